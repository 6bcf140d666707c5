//! `/api/v1/notifications` (the viewer's list, read marks, settings) and `/api/v1/webhooks`
//! (add, list, remove, and each one's delivery log).

use super::*;
use app::model::{MarkRead, NewWebhook, NotificationPrefs};

pub(super) async fn notifications(
    State(state): State<AppState>,
    ApiViewer(v): ApiViewer,
) -> ApiResult<impl IntoResponse> {
    Ok(Json(state.portal.notifications(&v).await?))
}

pub(super) async fn mark_read(
    State(state): State<AppState>,
    ApiViewer(v): ApiViewer,
    ApiJson(req): ApiJson<MarkRead>,
) -> ApiResult<impl IntoResponse> {
    if req.all && !req.ids.is_empty() {
        return Err(ApiError::invalid("ids", "give ids or all, not both").into());
    }
    let ids = (!req.all).then_some(req.ids);
    Ok(Json(state.portal.mark_notifications_read(&v, ids).await?))
}

pub(super) async fn notification_settings(
    State(state): State<AppState>,
    ApiViewer(v): ApiViewer,
) -> ApiResult<impl IntoResponse> {
    Ok(Json(state.portal.notification_settings(&v).await?))
}

pub(super) async fn save_notification_settings(
    State(state): State<AppState>,
    ApiViewer(v): ApiViewer,
    ApiJson(req): ApiJson<NotificationPrefs>,
) -> ApiResult<impl IntoResponse> {
    Ok(Json(
        state.portal.save_notification_prefs(&v, req.prefs).await?,
    ))
}

pub(super) async fn webhooks(
    State(state): State<AppState>,
    ApiViewer(v): ApiViewer,
) -> ApiResult<impl IntoResponse> {
    Ok(Json(state.portal.notification_settings(&v).await?.webhooks))
}

pub(super) async fn create_webhook(
    State(state): State<AppState>,
    ApiViewer(v): ApiViewer,
    ApiJson(req): ApiJson<NewWebhook>,
) -> ApiResult<impl IntoResponse> {
    let created = state.portal.create_webhook(&v, req).await?;
    Ok((StatusCode::CREATED, Json(created)))
}

pub(super) async fn delete_webhook(
    State(state): State<AppState>,
    ApiViewer(v): ApiViewer,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<impl IntoResponse> {
    state.portal.delete_webhook(&v, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}

pub(super) async fn webhook_deliveries(
    State(state): State<AppState>,
    ApiViewer(v): ApiViewer,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<impl IntoResponse> {
    Ok(Json(state.portal.webhook_deliveries(&v, &id).await?))
}
