//! `/api/v1/jobs`: launch (with `Idempotency-Key`), list, one job, cancel, its GPU utilization,
//! and the manifest a launch would submit.

use super::*;

pub(super) async fn launch(
    State(state): State<AppState>,
    ApiViewer(v): ApiViewer,
    headers: HeaderMap,
    ApiJson(req): ApiJson<LaunchRequest>,
) -> ApiResult<impl IntoResponse> {
    let key = match headers.get("idempotency-key") {
        Some(k) => Some(
            k.to_str()
                .map_err(|_| ApiError::invalid("Idempotency-Key", "must be printable ASCII"))?
                .to_string(),
        ),
        None => None,
    };
    let (job, created) = state.portal.launch_job(&v, req, key).await?;
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((
        status,
        [(http::header::LOCATION, format!("/api/v1/jobs/{}", job.id))],
        Json(job),
    ))
}

/// The JobSet or TrainJob a launch with this body would submit, as YAML (kube back end).
pub(super) async fn manifest(
    State(state): State<AppState>,
    ApiViewer(v): ApiViewer,
    ApiJson(req): ApiJson<LaunchRequest>,
) -> ApiResult<impl IntoResponse> {
    match state.portal.launch_manifest(&v, req).await? {
        Some(yaml) => Ok((
            [(
                http::header::CONTENT_TYPE,
                "application/yaml; charset=utf-8",
            )],
            yaml,
        )),
        None => Err(ApiError::not_found(
            "manifests exist on the Kubernetes back end only (cluster.backend = kube)",
        )
        .into()),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct JobsQuery {
    state: Option<String>,
    team: Option<String>,
    #[serde(default)]
    mine: bool,
    user: Option<String>,
    pool: Option<String>,
    q: Option<String>,
    from: Option<String>,
    to: Option<String>,
    cursor: Option<String>,
    limit: Option<String>,
}

/// `GET /api/v1/jobs`: a page of the jobs the caller may see, newest first, as
/// `{"jobs": [...], "total": N, "next_cursor": "..." | null, "now": ...}`; the next page is
/// asked for with `cursor=<next_cursor>` and the same filters.
pub(super) async fn list_jobs(
    State(state): State<AppState>,
    ApiViewer(v): ApiViewer,
    ApiQuery(q): ApiQuery<JobsQuery>,
) -> ApiResult<impl IntoResponse> {
    let state_filter = match q.state.as_deref() {
        None | Some("") => None,
        Some(s) => Some(JobState::parse(s).ok_or_else(|| {
            ApiError::invalid("state", format!("unknown state '{s}'; one of queued, admitted, running, succeeded, failed, cancelled"))
        })?),
    };
    let limit = page_limit(q.limit.as_deref())?;
    let list = state
        .portal
        .list_jobs(
            &v,
            JobFilter {
                state: state_filter,
                team: q.team,
                mine: q.mine,
                active: false,
                user: q.user,
                pool: q.pool,
                q: q.q,
                from: q.from,
                to: q.to,
                cursor: q.cursor,
                limit,
            },
        )
        .await?;
    Ok(Json(list))
}

pub(super) async fn get_job(
    State(state): State<AppState>,
    ApiViewer(v): ApiViewer,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<impl IntoResponse> {
    Ok(Json(state.portal.get_job(&v, &id).await?))
}

pub(super) async fn cancel(
    State(state): State<AppState>,
    ApiViewer(v): ApiViewer,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<impl IntoResponse> {
    Ok(Json(state.portal.cancel_job(&v, &id).await?))
}

/// `GET /api/v1/jobs/{id}/utilization`: the job's per-GPU series, mean utilization, memory
/// and power, and the idle flag.
pub(super) async fn job_utilization(
    State(state): State<AppState>,
    ApiViewer(v): ApiViewer,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<impl IntoResponse> {
    Ok(Json(state.portal.job_utilization(&v, &id).await?))
}
