//! Errors: the public [`FakeError`], and the API server's `kind: Status` failures
//! ([`ApiError`]) with the codes, reasons and message wording of the real server, since
//! clients branch on `code` and `reason` and people read `message`.

use serde_json::{Value, json};

use crate::kinds::Kind;

/// What can go wrong starting or driving the fake.
#[derive(Debug, thiserror::Error)]
pub enum FakeError {
    #[error("cannot listen on 127.0.0.1: {0}")]
    Bind(std::io::Error),
    #[error("the fake's URL is not a valid URI: {0}")]
    Url(String),
    #[error("cannot build a Kubernetes client for the fake: {0}")]
    Client(#[from] kube::Error),
}

/// A failed API call, answered as a `Status` object.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    pub details: Option<Value>,
    pub retry_after: Option<u32>,
}

impl ApiError {
    pub(crate) fn new(code: u16, reason: &'static str, message: impl Into<String>) -> ApiError {
        ApiError { code, reason, message: message.into(), details: None, retry_after: None }
    }

    fn with_details(mut self, kind: Kind, name: &str) -> ApiError {
        let info = kind.info();
        let mut details = json!({"name": name, "kind": info.plural});
        if !info.group.is_empty() {
            details["group"] = json!(info.group);
        }
        self.details = Some(details);
        self
    }

    pub(crate) fn not_found(kind: Kind, name: &str) -> ApiError {
        ApiError::new(404, "NotFound", format!("{} \"{name}\" not found", kind.qualified())).with_details(kind, name)
    }

    pub(crate) fn namespace_not_found(namespace: &str) -> ApiError {
        ApiError::new(404, "NotFound", format!("namespaces \"{namespace}\" not found"))
            .with_details(Kind::Namespace, namespace)
    }

    pub(crate) fn already_exists(kind: Kind, name: &str) -> ApiError {
        ApiError::new(409, "AlreadyExists", format!("{} \"{name}\" already exists", kind.qualified()))
            .with_details(kind, name)
    }

    pub(crate) fn conflict(kind: Kind, name: &str) -> ApiError {
        ApiError::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; please apply your changes to the latest version and try again",
                kind.qualified()
            ),
        )
        .with_details(kind, name)
    }

    /// A 409 with a message of the caller's (a binding to a bound pod, say).
    pub(crate) fn conflict_with(kind: Kind, name: &str, why: &str) -> ApiError {
        ApiError::new(
            409,
            "Conflict",
            format!("Operation cannot be fulfilled on {} \"{name}\": {why}", kind.qualified()),
        )
        .with_details(kind, name)
    }

    /// 422, with one cause per problem (`field: message`), as the real validation reports.
    pub(crate) fn invalid(kind: Kind, name: &str, causes: &[(String, String)]) -> ApiError {
        let text: Vec<String> = causes.iter().map(|(field, message)| format!("{field}: {message}")).collect();
        let message = match text.len() {
            1 => format!("{} \"{name}\" is invalid: {}", kind.qualified_kind(), text[0]),
            _ => format!("{} \"{name}\" is invalid: [{}]", kind.qualified_kind(), text.join(", ")),
        };
        let mut e = ApiError::new(422, "Invalid", message).with_details(kind, name);
        if let Some(details) = &mut e.details {
            details["kind"] = json!(kind.info().kind);
            details["causes"] = causes
                .iter()
                .map(|(field, message)| json!({"reason": "FieldValueInvalid", "message": message, "field": field}))
                .collect();
        }
        e
    }

    pub(crate) fn forbidden(kind: Kind, name: &str, why: &str) -> ApiError {
        ApiError::new(403, "Forbidden", format!("{} \"{name}\" is forbidden: {why}", kind.qualified()))
            .with_details(kind, name)
    }

    pub(crate) fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(400, "BadRequest", message)
    }

    pub(crate) fn method_not_allowed(message: impl Into<String>) -> ApiError {
        ApiError::new(405, "MethodNotAllowed", message)
    }

    pub(crate) fn unsupported_media_type(content_type: &str) -> ApiError {
        ApiError::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: application/json, application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json, application/apply-patch+yaml; got {content_type:?}"
            ),
        )
    }

    pub(crate) fn gone(message: impl Into<String>) -> ApiError {
        ApiError::new(410, "Expired", message)
    }

    pub(crate) fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(500, "InternalError", format!("Internal error occurred: {}", message.into()))
    }

    pub(crate) fn too_many_requests(retry_after: u32) -> ApiError {
        let mut e = ApiError::new(429, "TooManyRequests", "Too many requests, please try again later.");
        e.retry_after = Some(retry_after);
        e.details = Some(json!({"retryAfterSeconds": retry_after}));
        e
    }

    pub(crate) fn not_served(path: &str) -> ApiError {
        let mut e = ApiError::new(404, "NotFound", "the server could not find the requested resource");
        e.details = Some(
            json!({"causes": [{"reason": "UnexpectedServerResponse", "message": format!("404 page not found: {path}")}]}),
        );
        e
    }

    /// The `Status` object of the wire.
    pub(crate) fn status(&self) -> Value {
        let mut v = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(details) = &self.details {
            v["details"] = details.clone();
        }
        v
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}): {}", self.code, self.reason, self.message)
    }
}
