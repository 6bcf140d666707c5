//! `/api/v1/templates`: the catalogue, and admins' definitions, versions and deprecation.

use super::*;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct TemplatesQuery {
    q: Option<String>,
    cursor: Option<String>,
    limit: Option<String>,
}

/// `GET /api/v1/templates`: a page of the catalogue by name, as
/// `{"templates": [...], "total": N, "next_cursor": "..." | null}`; `q` searches name,
/// display name and family; the next page is `cursor=<next_cursor>`.
pub(super) async fn templates(
    State(state): State<AppState>,
    ApiViewer(v): ApiViewer,
    ApiQuery(q): ApiQuery<TemplatesQuery>,
) -> ApiResult<impl IntoResponse> {
    let limit = page_limit(q.limit.as_deref())?;
    Ok(Json(
        state
            .portal
            .templates_page(&v, q.q, q.cursor, limit)
            .await?,
    ))
}

pub(super) async fn create_template(
    State(state): State<AppState>,
    ApiViewer(v): ApiViewer,
    DefinitionText(text): DefinitionText,
) -> ApiResult<impl IntoResponse> {
    let t = state.portal.save_template(&v, None, text).await?;
    Ok((StatusCode::CREATED, Json(t)))
}

pub(super) async fn add_template_version(
    State(state): State<AppState>,
    ApiViewer(v): ApiViewer,
    ApiPath(name): ApiPath<String>,
    DefinitionText(text): DefinitionText,
) -> ApiResult<impl IntoResponse> {
    let t = state.portal.save_template(&v, Some(name), text).await?;
    Ok((StatusCode::CREATED, Json(t)))
}

pub(super) async fn deprecate_template(
    State(state): State<AppState>,
    ApiViewer(v): ApiViewer,
    ClientAddr(address): ClientAddr,
    ApiPath(name): ApiPath<String>,
) -> ApiResult<impl IntoResponse> {
    state.portal.deprecate_template(&v, &name, address).await?;
    Ok(Json(
        serde_json::json!({"template": name, "deprecated": true}),
    ))
}
