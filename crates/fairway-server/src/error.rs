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
            [one] => format!("invalid submission: document {}, {}: {}", one.document, one.path, one.reason),
            many => format!("invalid submission: {} problems", many.len()),
        };
        ApiError { details, ..ApiError::new(StatusCode::BAD_REQUEST, "invalid_spec", message) }
    }
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }
    pub fn not_found(id: i64) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, "not_found", format!("job {id} does not exist"))
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

pub(crate) fn warning_view(w: &fairway_spec::Warning) -> FieldError {
    FieldError { document: w.document, path: w.path.clone(), reason: w.message.clone() }
}
