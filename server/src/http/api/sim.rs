//! `POST /api/v1/sim/advance`: the manual sim clock (admins).

use super::*;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Advance {
    seconds: i64,
}

/// `POST /api/v1/sim/advance {"seconds": N}`: moves the manual sim clock (admins only).
pub(super) async fn sim_advance(
    State(state): State<AppState>,
    ApiViewer(v): ApiViewer,
    ApiJson(body): ApiJson<Advance>,
) -> ApiResult<impl IntoResponse> {
    let now = state.portal.advance_sim(&v, body.seconds).await?;
    Ok(Json(serde_json::json!({ "now": now })))
}
