//! `/healthz`, `/readyz` and `GET /api/v1/me`.

use super::*;

pub(super) async fn healthz() -> &'static str {
    "ok"
}

pub(super) async fn readyz(State(state): State<AppState>) -> Response {
    match state.portal.database_ready().await {
        Ok(()) => "ready".into_response(),
        Err(e) => {
            tracing::warn!(error = %e, "readiness check: database did not answer");
            (StatusCode::SERVICE_UNAVAILABLE, "database unavailable").into_response()
        }
    }
}

pub(super) async fn me(ApiViewer(v): ApiViewer) -> Json<app::model::Viewer> {
    Json(v)
}
