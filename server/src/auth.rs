//! Sign-in for the embedded default: local sign-in by user name (loopback only, see config)
//! and sign-out. Sessions live in the database through tower-sessions' sqlx store.

use app::error::ApiError;
use axum::extract::{FromRequestParts, State};
use axum::response::{IntoResponse, Redirect, Response};
use axum::Form;
use http::request::Parts;
use serde::Deserialize;
use tower_sessions::Session;

use crate::api::ApiFailure;
use crate::startup::AppState;

const USER_KEY: &str = "user_id";

pub async fn session_user(session: &Session) -> Result<Option<String>, ApiError> {
    session
        .get::<String>(USER_KEY)
        .await
        .map_err(crate::service::internal)
}

#[derive(Deserialize)]
pub struct DevLogin {
    user: String,
    #[serde(default)]
    next: Option<String>,
}

/// Only same-site paths are followed after sign-in, never another origin.
fn safe_next(next: Option<&str>) -> &str {
    match next {
        Some(n) if n.starts_with('/') && !n.starts_with("//") && !n.contains('\\') => n,
        _ => "/",
    }
}

/// `POST /auth/dev/login` with form field `user`.
pub async fn dev_login(
    State(state): State<AppState>,
    session: Session,
    crate::api::ClientAddr(address): crate::api::ClientAddr,
    Form(form): Form<DevLogin>,
) -> Response {
    if !state.config.auth.dev_login {
        return ApiFailure(ApiError::not_found("local sign-in is turned off")).into_response();
    }
    let viewer = match state.portal.viewer_by_id(form.user.trim()).await {
        Ok(Some(v)) => v,
        Ok(None) => {
            return ApiFailure(
                ApiError::new(
                    app::error::ErrorCode::Unauthorized,
                    format!("there is no user named '{}'", form.user),
                )
                .with_field("user"),
            )
            .into_response()
        }
        Err(e) => return ApiFailure(e).into_response(),
    };
    // A new session id at sign-in, so a session fixed before it is worth nothing.
    if let Err(e) = session.cycle_id().await {
        return ApiFailure(crate::service::internal(e)).into_response();
    }
    if let Err(e) = session.insert(USER_KEY, &viewer.user).await {
        return ApiFailure(crate::service::internal(e)).into_response();
    }
    tracing::info!(user = %viewer.user, admin = viewer.is_admin, "signed in (local)");
    if viewer.is_admin {
        let mut entry = crate::db::AuditEntry::new(
            &viewer.user,
            "auth.sign_in",
            &viewer.user,
            chrono::Utc::now(),
        );
        entry.after = Some(serde_json::json!({"method": "local"}));
        entry.address = address;
        if let Err(e) = state.portal.audit(entry).await {
            return ApiFailure(e).into_response();
        }
    }
    Redirect::to(safe_next(form.next.as_deref())).into_response()
}

/// `POST /auth/logout`: ends the session.
pub async fn logout(session: Session) -> Response {
    if let Err(e) = session.flush().await {
        return ApiFailure(crate::service::internal(e)).into_response();
    }
    Redirect::to("/login").into_response()
}

/// The signed-in user of an API request, or 401.
pub struct ApiViewer(pub app::model::Viewer);

impl FromRequestParts<AppState> for ApiViewer {
    type Rejection = ApiFailure;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let session = Session::from_request_parts(parts, state)
            .await
            .map_err(|_| ApiFailure(ApiError::unauthorized()))?;
        let user = session_user(&session)
            .await?
            .ok_or_else(|| ApiFailure(ApiError::unauthorized()))?;
        match state.portal.viewer_by_id(&user).await? {
            Some(v) => Ok(ApiViewer(v)),
            None => Err(ApiFailure(ApiError::unauthorized())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::safe_next;

    #[test]
    fn only_local_paths_are_followed_after_sign_in() {
        assert_eq!(safe_next(Some("/jobs")), "/jobs");
        assert_eq!(safe_next(Some("//evil.example")), "/");
        assert_eq!(safe_next(Some("https://evil.example")), "/");
        assert_eq!(safe_next(None), "/");
    }
}
