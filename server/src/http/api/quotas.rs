//! `/api/v1/quotas` (ETag/If-Match), the what-if preview, and `/api/v1/pools`.

use super::*;

pub(super) async fn pools(
    State(state): State<AppState>,
    ApiViewer(v): ApiViewer,
) -> ApiResult<impl IntoResponse> {
    Ok(Json(state.portal.list_pools(&v).await?))
}

pub(super) fn etag(version: i64) -> String {
    format!("\"v{version}\"")
}

pub(super) async fn list_quotas(
    State(state): State<AppState>,
    ApiViewer(v): ApiViewer,
) -> ApiResult<impl IntoResponse> {
    Ok(Json(state.portal.quota_cells(&v).await?))
}

pub(super) async fn get_quota(
    State(state): State<AppState>,
    ApiViewer(v): ApiViewer,
    ApiPath((team, pool)): ApiPath<(String, String)>,
) -> ApiResult<impl IntoResponse> {
    let cell = state.portal.quota_for(&v, &team, &pool).await?;
    Ok(([(http::header::ETAG, etag(cell.version))], Json(cell)))
}

/// A whole number of GPUs, at least 0, or a 422 naming the field.
pub(super) fn whole_gpus(
    body: &serde_json::Map<String, serde_json::Value>,
    field: &str,
) -> Result<Option<u32>, ApiError> {
    match body.get(field) {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .filter(|n| *n <= u32::MAX as u64)
            .map(|n| Some(n as u32))
            .ok_or_else(|| {
                ApiError::invalid(
                    field,
                    format!("must be a whole number of GPUs, 0 or more (got {v})"),
                )
            }),
    }
}

/// A field that may be absent (`None`), null (`Some(None)`) or set.
pub(super) fn present<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    T::deserialize(d).map(Some)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct PreviewChange {
    team: String,
    pool: String,
    nominal_gpus: u32,
    /// Absent: unchanged; null: no borrowing limit.
    #[serde(default, deserialize_with = "present")]
    borrowing_limit_gpus: Option<Option<u32>>,
    /// Absent: unchanged; null: lends all of its nominal quota.
    #[serde(default, deserialize_with = "present")]
    lending_limit_gpus: Option<Option<u32>>,
    /// Absent: unchanged; null: the pool's default.
    #[serde(default, deserialize_with = "present")]
    queueing_strategy: Option<Option<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct PreviewRequest {
    changes: Vec<PreviewChange>,
    /// How far back to replay, in days (default 30, at most 90).
    #[serde(default)]
    days: Option<i64>,
}

/// What-if: the last 30 days of launches replayed under the current quotas and the draft.
pub(super) async fn preview_quotas(
    State(state): State<AppState>,
    ApiViewer(v): ApiViewer,
    ApiJson(req): ApiJson<PreviewRequest>,
) -> ApiResult<impl IntoResponse> {
    let days = req.days.unwrap_or(30);
    if !(1..=90).contains(&days) {
        return Err(ApiError::invalid("days", "must be 1 to 90").into());
    }
    let changes = req
        .changes
        .into_iter()
        .enumerate()
        .map(|(i, c)| {
            Ok((
                c.team,
                c.pool,
                crate::service::QuotaEdit {
                    nominal: c.nominal_gpus,
                    borrowing_limit: c.borrowing_limit_gpus,
                    lending_limit: c.lending_limit_gpus,
                    strategy: c
                        .queueing_strategy
                        .map(|s| s.as_deref().map(crate::service::parse_strategy).transpose())
                        .transpose()
                        .map_err(|e| e.with_field(format!("changes[{i}].queueing_strategy")))?,
                },
            ))
        })
        .collect::<Result<_, ApiError>>()?;
    Ok(Json(state.portal.preview_quotas(&v, changes, days).await?))
}

pub(super) async fn put_quota(
    State(state): State<AppState>,
    ApiViewer(v): ApiViewer,
    ClientAddr(address): ClientAddr,
    ApiPath((team, pool)): ApiPath<(String, String)>,
    headers: HeaderMap,
    ApiJson(body): ApiJson<serde_json::Value>,
) -> ApiResult<impl IntoResponse> {
    if !v.is_admin {
        return Err(ApiError::forbidden("only admins change quotas").into());
    }
    let Some(tag) = headers.get(http::header::IF_MATCH) else {
        return Err(ApiError::new(
            ErrorCode::PreconditionRequired,
            "send the quota's ETag in If-Match (from GET /api/v1/quotas/{team}/{pool}), so a change made meanwhile is not overwritten",
        )
        .with_field("If-Match")
        .into());
    };
    let version = tag
        .to_str()
        .ok()
        .map(|t| t.trim().trim_start_matches("W/").trim_matches('"'))
        .and_then(|t| t.strip_prefix('v'))
        .and_then(|n| n.parse::<i64>().ok())
        .ok_or_else(|| ApiError::invalid("If-Match", "must be an ETag of this API, like \"v3\""))?;
    let serde_json::Value::Object(body) = body else {
        return Err(ApiError::bad_request("the body must be a JSON object").into());
    };
    if let Some(unknown) = body.keys().find(|k| {
        !matches!(
            k.as_str(),
            "nominal_gpus" | "borrowing_limit_gpus" | "lending_limit_gpus" | "queueing_strategy"
        )
    }) {
        return Err(ApiError::invalid(
            unknown.clone(),
            "unknown field; accepted: nominal_gpus, borrowing_limit_gpus, lending_limit_gpus, queueing_strategy",
        )
        .into());
    }
    let nominal = whole_gpus(&body, "nominal_gpus")?.ok_or_else(|| {
        ApiError::invalid(
            "nominal_gpus",
            "required: a whole number of GPUs, 0 or more",
        )
    })?;
    // Left out: unchanged; null: no limit / Kueue's default (lend all) / the pool's default order.
    let borrowing_limit = match body.get("borrowing_limit_gpus") {
        None => None,
        Some(_) => Some(whole_gpus(&body, "borrowing_limit_gpus")?),
    };
    let lending_limit = match body.get("lending_limit_gpus") {
        None => None,
        Some(_) => Some(whole_gpus(&body, "lending_limit_gpus")?),
    };
    let strategy = match body.get("queueing_strategy") {
        None => None,
        Some(serde_json::Value::Null) => Some(None),
        Some(serde_json::Value::String(s)) => Some(Some(crate::service::parse_strategy(s)?)),
        Some(_) => {
            return Err(ApiError::invalid(
                "queueing_strategy",
                "must be \"BestEffortFIFO\", \"StrictFIFO\" or null (the pool's default)",
            )
            .into())
        }
    };
    let quota = crate::service::QuotaEdit {
        nominal,
        borrowing_limit,
        lending_limit,
        strategy,
    };
    let cell = state
        .portal
        .set_quota(&v, &team, &pool, quota, Some(version), address)
        .await?;
    Ok(([(http::header::ETAG, etag(cell.version))], Json(cell)))
}
