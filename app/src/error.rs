//! The one error type that crosses from the server to a browser or an API client: a code, a
//! message a person can act on and, for bad input, the field at fault.

use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// The request itself could not be read (malformed JSON, wrong content type).
    BadRequest,
    Unauthorized,
    Forbidden,
    NotFound,
    /// The route exists but not with this method.
    MethodNotAllowed,
    Conflict,
    PayloadTooLarge,
    /// A conditional request without its condition (`If-Match`).
    PreconditionRequired,
    /// The request's body did not arrive in time.
    Timeout,
    /// Over a per-user limit (live streams); try again later.
    TooManyRequests,
    /// The request was read but a value is not accepted.
    Invalid,
    /// Something broke on our side; the message carries only a request id.
    Internal,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, thiserror::Error)]
#[error("{message}")]
pub struct ApiError {
    pub code: ErrorCode,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
}

impl ApiError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ApiError {
            code,
            message: message.into(),
            field: None,
        }
    }

    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        ApiError {
            code: ErrorCode::Invalid,
            message: message.into(),
            field: Some(field.into()),
        }
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::BadRequest, message)
    }

    pub fn not_found(what: impl Into<String>) -> Self {
        Self::new(ErrorCode::NotFound, what)
    }

    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Forbidden, message)
    }

    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Conflict, message)
    }

    pub fn unauthorized() -> Self {
        Self::new(ErrorCode::Unauthorized, "sign in first")
    }

    /// An internal failure as the user sees it: no detail, only where to look.
    pub fn internal(request_id: &str) -> Self {
        Self::new(
            ErrorCode::Internal,
            format!("something went wrong on our side (request id {request_id})"),
        )
    }

    pub fn with_field(mut self, field: impl Into<String>) -> Self {
        self.field = Some(field.into());
        self
    }

    pub fn status(&self) -> u16 {
        match self.code {
            ErrorCode::BadRequest => 400,
            ErrorCode::Unauthorized => 401,
            ErrorCode::Forbidden => 403,
            ErrorCode::NotFound => 404,
            ErrorCode::MethodNotAllowed => 405,
            ErrorCode::Conflict => 409,
            ErrorCode::PayloadTooLarge => 413,
            ErrorCode::PreconditionRequired => 428,
            ErrorCode::Timeout => 408,
            ErrorCode::TooManyRequests => 429,
            ErrorCode::Invalid => 422,
            ErrorCode::Internal => 500,
        }
    }
}

impl leptos::server_fn::error::FromServerFnError for ApiError {
    type Encoder = leptos::server_fn::codec::JsonEncoding;

    fn from_server_fn_error(value: leptos::server_fn::error::ServerFnErrorErr) -> Self {
        use leptos::server_fn::error::ServerFnErrorErr as E;
        match value {
            E::Request(_) | E::Response(_) => ApiError::new(
                ErrorCode::Internal,
                "the server could not be reached; try again",
            ),
            E::Args(m) | E::MissingArg(m) | E::Deserialization(m) => ApiError::bad_request(m),
            other => ApiError::new(ErrorCode::Internal, other.to_string()),
        }
    }
}
