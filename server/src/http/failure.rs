//! An error of the services as an HTTP response: its status and the JSON error shape
//! `{"error": {code, message, field}}` every `/api/v1` route answers with.

use app::error::ApiError;
use axum::response::{IntoResponse, Response};
use axum::Json;
use http::StatusCode;

/// An `ApiError` as an HTTP response.
#[derive(Debug)]
pub struct ApiFailure(pub ApiError);

impl From<ApiError> for ApiFailure {
    fn from(e: ApiError) -> Self {
        ApiFailure(e)
    }
}

impl IntoResponse for ApiFailure {
    fn into_response(self) -> Response {
        let status =
            StatusCode::from_u16(self.0.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        (status, Json(serde_json::json!({ "error": self.0 }))).into_response()
    }
}

impl From<crate::error::Error> for ApiFailure {
    fn from(e: crate::error::Error) -> Self {
        ApiFailure(e.into())
    }
}
