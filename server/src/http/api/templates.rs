//! `/api/v1/templates`: the catalogue, and admins' definitions, versions and deprecation.

use super::*;

pub(super) async fn templates(
    State(state): State<AppState>,
    ApiViewer(v): ApiViewer,
) -> ApiResult<impl IntoResponse> {
    Ok(Json(state.portal.list_templates(&v).await?))
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
