//! `/api/v1/tokens`: personal API tokens.

use super::*;

pub(super) async fn list_tokens(
    State(state): State<AppState>,
    ApiViewer(v): ApiViewer,
) -> ApiResult<impl IntoResponse> {
    Ok(Json(state.portal.list_tokens(&v).await?))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct NewToken {
    name: String,
    #[serde(default)]
    expires_in_days: Option<u32>,
}

/// Tokens are made in a signed-in session only: a leaked token cannot mint more.
pub(super) async fn create_token(
    State(state): State<AppState>,
    Authenticated(v, via): Authenticated,
    ApiJson(body): ApiJson<NewToken>,
) -> ApiResult<impl IntoResponse> {
    if via == Via::Token {
        return Err(ApiError::forbidden(
            "API tokens cannot create tokens; create them from your profile page while signed in",
        )
        .into());
    }
    let created = state
        .portal
        .create_token(&v, body.name, body.expires_in_days)
        .await?;
    Ok((StatusCode::CREATED, Json(created)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct AdminTokensQuery {
    user: Option<String>,
    cursor: Option<String>,
    limit: Option<u32>,
}

/// `GET /api/v1/admin/tokens` (admins): a page of every user's live tokens, or of `user`'s,
/// as `{"tokens": [{"user": ..., "id": ..., "name": ...}], "total": N, "next_cursor": ...}`.
pub(super) async fn admin_tokens(
    State(state): State<AppState>,
    ApiViewer(v): ApiViewer,
    ApiQuery(q): ApiQuery<AdminTokensQuery>,
) -> ApiResult<impl IntoResponse> {
    Ok(Json(
        state
            .portal
            .live_tokens(&v, q.user, q.cursor.as_deref(), q.limit)
            .await?,
    ))
}

/// `DELETE /api/v1/tokens/{id}`: the caller's own token, or for an admin anyone's.
pub(super) async fn revoke_token(
    State(state): State<AppState>,
    ApiViewer(v): ApiViewer,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<impl IntoResponse> {
    state.portal.revoke_token(&v, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}
