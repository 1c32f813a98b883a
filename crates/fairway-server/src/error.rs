//! Errors: [`ServerError`] for starting and running the server, [`ApiError`] for answers.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use fairway_spec::SpecErrors;

use crate::api::{ErrorBody, ErrorDetail, FieldError};

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("configuration: {0}")]
    Config(String),
    #[error(transparent)]
    Store(#[from] fairway_store::StoreError),
    #[error(transparent)]
    Exec(#[from] fairway_exec::ExecError),
    #[error("{what}: {source}")]
    Io { what: String, source: std::io::Error },
}

/// An error answer: a status and the body every client can read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    pub details: Vec<FieldError>,
}

impl ApiError {
    fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError { status, code, message: message.into(), details: Vec::new() }
    }
    pub fn invalid_spec(errors: SpecErrors) -> ApiError {
        let details: Vec<FieldError> = errors
            .iter()
            .map(|e| FieldError { document: e.document, path: e.path.clone(), reason: e.reason.clone() })
            .collect();
        let message = match details.as_slice() {
            [one] => format!("invalid submission: {}", where_and_why(one)),
            many => format!("invalid submission: {} problems", many.len()),
        };
        ApiError { details, ..ApiError::new(StatusCode::BAD_REQUEST, "invalid_spec", message) }
    }
    /// Like `invalid_spec`, with another status and code: the spec is well formed but this
    /// caller may not submit it (403 `forbidden`) or this cluster cannot run it (422
    /// `unschedulable`, `unsupported`).
    pub fn spec_refused(status: StatusCode, code: &'static str, errors: SpecErrors) -> ApiError {
        let invalid = ApiError::invalid_spec(errors);
        let message = invalid.message.replacen("invalid submission", "submission refused", 1);
        ApiError { status, code, message, ..invalid }
    }
    pub fn unauthenticated(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::UNAUTHORIZED, "unauthenticated", message)
    }
    pub fn forbidden(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::FORBIDDEN, "forbidden", message)
    }
    pub fn cross_origin(origin: &str) -> ApiError {
        ApiError::new(
            StatusCode::FORBIDDEN,
            "cross_origin",
            format!("cross-origin request from {origin:?} refused: this API takes changes only from its own origin"),
        )
    }
    pub fn unsupported_media_type(got: &str) -> ApiError {
        ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            format!("Content-Type {got:?} is not accepted here: send application/json or application/yaml"),
        )
    }
    pub fn method_not_allowed() -> ApiError {
        ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            "this route does not take that method; see /openapi.yaml",
        )
    }
    pub fn timeout(what: &str) -> ApiError {
        ApiError::new(StatusCode::REQUEST_TIMEOUT, "timeout", format!("{what} took too long"))
    }
    pub fn store_unavailable(problem: &str) -> ApiError {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "store_unavailable",
            format!("the server cannot record changes now ({problem}); nothing was changed; try again later"),
        )
    }
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }
    pub fn not_found(id: i64) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, "not_found", format!("job {id} does not exist"))
    }
    pub fn not_found_message(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, "not_found", message)
    }
    pub fn conflict(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::CONFLICT, "conflict", message)
    }
    pub fn queue_full(jobs_max: u32) -> ApiError {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "queue_full",
            format!("the server already holds its limit of {jobs_max} unfinished jobs; try again later"),
        )
    }
    pub fn payload_too_large(bytes_max: usize) -> ApiError {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            format!("request body larger than the limit of {bytes_max} bytes"),
        )
    }
    pub fn new_unavailable(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", message)
    }
    pub fn unavailable() -> ApiError {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", "the server is shutting down")
    }
    pub fn store(e: fairway_store::StoreError) -> ApiError {
        tracing::error!("store: {e}");
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", format!("store error: {e}"))
    }
    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message)
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}): {}", self.status.as_u16(), self.code, self.message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body =
            ErrorBody { error: ErrorDetail { code: self.code.into(), message: self.message, details: self.details } };
        (self.status, axum::Json(body)).into_response()
    }
}

/// A JSON body as `T`; errors name the field (`gpus_max: expected a non-negative integer,
/// got the text "four"`) in words, without Rust type names.
pub fn parse_json<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    // Every body is an object: say so, rather than let serde name the Rust type it wanted.
    match bytes.iter().find(|b| !b.is_ascii_whitespace()) {
        None => return Err(ApiError::bad_request("body: empty, where a JSON object is expected")),
        Some(b'{') => {}
        Some(_) if serde_json::from_slice::<serde::de::IgnoredAny>(bytes).is_ok() => {
            return Err(ApiError::bad_request("body: must be a JSON object ({\"field\": value, ...})"));
        }
        Some(_) => {}
    }
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let value: T = serde_path_to_error::deserialize(&mut deserializer).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        let reason = plain_words(&inner.to_string());
        // A syntax error is about the text, not a field (its path would read "?").
        if inner.is_syntax() || inner.is_eof() {
            return ApiError::bad_request(format!("body: not valid JSON: {reason}"));
        }
        ApiError::bad_request(match path.as_str() {
            "." | "" => format!("body: {reason}"),
            path => format!("body: {path}: {reason}"),
        })
    })?;
    deserializer.end().map_err(|e| ApiError::bad_request(format!("body: {}", plain_words(&e.to_string()))))?;
    Ok(value)
}

/// A query string as `T`; errors name the parameter.
pub fn parse_query<T: serde::de::DeserializeOwned>(raw: Option<&str>) -> Result<T, ApiError> {
    let raw = raw.unwrap_or("");
    let deserializer = serde_urlencoded::Deserializer::new(form_urlencoded::parse(raw.as_bytes()));
    serde_path_to_error::deserialize(deserializer).map_err(|e| {
        let path = e.path().to_string();
        let message = e.into_inner().to_string();
        let value = form_urlencoded::parse(raw.as_bytes()).find(|(k, _)| *k == path).map(|(_, v)| v.into_owned());
        let negative =
            |v: &str| v.strip_prefix('-').is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()));
        let reason = match value {
            // Rust calls the minus sign of `-1` an invalid digit for a count.
            Some(v) if negative(&v) && message == "invalid digit found in string" => {
                format!("must not be negative, got {v:?}")
            }
            Some(v) if !message.starts_with("unknown field") => format!("{}, got {v:?}", plain_words(&message)),
            _ => plain_words(&message).replacen("unknown field", "unknown parameter", 1),
        };
        ApiError::bad_request(match path.as_str() {
            "." | "" => format!("query: {reason}"),
            path => format!("query parameter {path}: {reason}"),
        })
    })
}

/// serde's messages with Rust's vocabulary replaced by plain words: `u32` is "a
/// non-negative integer up to 4294967295", `` `x` `` is "x", "invalid digit found in
/// string" is "not a whole number".
pub fn plain_words(message: &str) -> String {
    let mut text = message.replace('`', "\"");
    let replacements = [
        ("invalid digit found in string", "not a whole number"),
        ("number too large to fit in target type", "the number is too large"),
        ("number too small to fit in target type", "the number is too small"),
        ("cannot parse integer from empty string", "empty, where a whole number is expected"),
        ("invalid type: ", ""),
        ("invalid value: ", ""),
        ("unknown variant ", "unknown value "),
        ("EOF while parsing", "the text ends in the middle of"),
        ("provided string was not `true` or `false`", "not true or false"),
        ("provided string was not \"true\" or \"false\"", "not true or false"),
    ];
    for (from, to) in replacements {
        text = text.replace(from, to);
    }
    let words = [
        ("u8", "a non-negative integer"),
        ("u16", "a non-negative integer"),
        ("u32", "a non-negative integer up to 4294967295"),
        ("u64", "a non-negative integer"),
        ("usize", "a non-negative integer"),
        ("i8", "an integer"),
        ("i16", "an integer"),
        ("i32", "an integer from -2147483648 to 2147483647"),
        ("i64", "an integer"),
        ("isize", "an integer"),
        ("f32", "a number"),
        ("f64", "a number"),
    ];
    let mut out = String::with_capacity(text.len());
    for (i, token) in text.split(' ').enumerate() {
        if i > 0 {
            out.push(' ');
        }
        let bare = token.trim_end_matches([',', '.', ';']);
        match words.iter().find(|(w, _)| *w == bare) {
            Some((_, plain)) => {
                out.push_str(plain);
                out.push_str(&token[bare.len()..]);
            }
            None => out.push_str(token),
        }
    }
    out.replace("expected struct ", "expected an object ").replace("string \"", "the text \"")
}

/// `input: reason` for the whole input, `document N: reason` for a whole document,
/// `document N, path: reason` for a field.
pub fn where_and_why(e: &FieldError) -> String {
    match (e.document, e.path.as_str()) {
        (0, _) => format!("input: {}", e.reason),
        (n, "") => format!("document {n}: {}", e.reason),
        (n, path) => format!("document {n}, {path}: {}", e.reason),
    }
}

pub(crate) fn warning_view(w: &fairway_spec::Warning) -> FieldError {
    FieldError { document: w.document, path: w.path.clone(), reason: w.message.clone() }
}
