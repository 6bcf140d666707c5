//! The JSON API under `/api/v1` for automation, the CLI and agents, plus `/healthz`,
//! `/readyz` and the live event stream. Errors are `{"error": {code, message, field}}`.

use std::convert::Infallible;
use std::time::Duration;

use app::backend::JobFilter;
use app::error::{ApiError, ErrorCode};
use app::model::{JobState, LaunchRequest, LiveEvent};
use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Path, RawPathParams, Request, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures::StreamExt;
use http::{HeaderMap, StatusCode};
use serde::de::DeserializeOwned;
use serde::Deserialize;

use crate::auth::{ApiViewer, Authenticated, Via};
use crate::startup::AppState;

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

type ApiResult<T> = Result<T, ApiFailure>;

/// A JSON body read strictly: malformed JSON is a 400; a value of the wrong type, a missing,
/// unknown or repeated field (at any depth) or a control character a 422 naming the field; a
/// body over the limit a 413.
pub struct ApiJson<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiFailure;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        if !media_type_is(&req, &["application/json"]) {
            return Err(ApiFailure(ApiError::bad_request(
                "send the body as JSON with Content-Type: application/json",
            )));
        }
        let bytes = Bytes::from_request(req, state).await.map_err(|rej| {
            if rej.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiFailure(ApiError::new(
                    ErrorCode::PayloadTooLarge,
                    "the request body is too large",
                ))
            } else {
                ApiFailure(ApiError::bad_request("the request body could not be read"))
            }
        })?;
        read_json(&bytes).map(ApiJson)
    }
}

/// Whether the request's media type is one of `types`: case-insensitive, parameters allowed
/// (`application/json; charset=utf-8`), and nothing else (`application/jsonx` is not JSON).
fn media_type_is(req: &Request, types: &[&str]) -> bool {
    req.headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|t| types.iter().any(|x| t.trim().eq_ignore_ascii_case(x)))
}

/// A JSON body as `T`: first one pass that refuses a key given twice and control
/// characters, and nothing may follow the value; then `T` itself. Malformed JSON is a 400,
/// anything else a 422 naming the field by its path (`params.lr`, `changes[0].team`).
fn read_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiFailure> {
    use serde_json::error::Category;
    let malformed =
        |e: &serde_json::Error| ApiFailure(ApiError::bad_request(format!("malformed JSON: {e}")));
    let de = &mut serde_json::Deserializer::from_slice(bytes);
    if let Err(e) = serde_path_to_error::deserialize::<_, crate::input::CheckedJson>(&mut *de) {
        let path = e.path().to_string();
        let inner = e.into_inner();
        return Err(match inner.classify() {
            Category::Data => ApiFailure(field_error(&path, &inner.to_string())),
            _ => malformed(&inner),
        });
    }
    // Nothing may follow the value (`{…}this is not JSON` was once taken).
    de.end().map_err(|e| malformed(&e))?;
    let de = &mut serde_json::Deserializer::from_slice(bytes);
    serde_path_to_error::deserialize::<_, T>(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        match inner.classify() {
            Category::Data => ApiFailure(field_error(&path, &inner.to_string())),
            _ => malformed(&inner),
        }
    })
}

/// The text between `prefix` at the start of `msg` and the next backtick.
fn quoted_after<'a>(msg: &'a str, prefix: &str) -> Option<&'a str> {
    msg.strip_prefix(prefix)?.split('`').next()
}

/// A value that was read but not accepted, as a 422 naming the field: serde's message (`unknown
/// field`, `missing field`, `duplicate field`, a wrong type) and the path where it failed.
fn field_error(path: &str, msg: &str) -> ApiError {
    let msg = msg.split(" at line ").next().unwrap_or(msg);
    let at_root = path.is_empty() || path == ".";
    let key = [
        "unknown field `",
        "missing field `",
        "duplicate field `",
        crate::input::DUPLICATE_KEY,
        crate::input::CONTROL_IN_KEY,
    ]
    .iter()
    .find_map(|p| quoted_after(msg, p));
    let field = match key {
        // The key is named in the message; the path is the object it is in (or, for some
        // errors, already ends with the key).
        Some(k) if at_root || path == k || path.ends_with(&format!(".{k}")) => {
            if at_root {
                k.to_string()
            } else {
                path.to_string()
            }
        }
        Some(k) => format!("{path}.{k}"),
        None if at_root => String::new(),
        None => path.to_string(),
    };
    let err = ApiError::new(ErrorCode::Invalid, msg);
    if field.is_empty() {
        err
    } else {
        err.with_field(field)
    }
}

/// A query string read strictly, with every rejection in the API's JSON error shape: an
/// unknown, repeated or ill-typed parameter, or a control character, is a 422 naming it.
pub struct ApiQuery<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiFailure;

    async fn from_request_parts(
        parts: &mut http::request::Parts,
        _state: &S,
    ) -> Result<Self, Self::Rejection> {
        let query = parts.uri.query().unwrap_or_default().as_bytes();
        let mut seen = std::collections::HashSet::new();
        for (k, v) in form_urlencoded::parse(query) {
            let name = k.escape_debug().to_string();
            crate::input::single_line(&name, &k)?;
            crate::input::single_line(&name, &v)?;
            if !seen.insert(k) {
                return Err(ApiError::invalid(name, "given more than once").into());
            }
        }
        let de = serde_urlencoded::Deserializer::new(form_urlencoded::parse(query));
        serde_path_to_error::deserialize(de)
            .map(ApiQuery)
            .map_err(|e| ApiFailure(field_error(&e.path().to_string(), &e.inner().to_string())))
    }
}

/// Path segments (ids, names) in the API's JSON error shape: a control character or bytes
/// that are not UTF-8 are a 422 naming the segment.
pub struct ApiPath<T>(pub T);

impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for ApiPath<T> {
    type Rejection = ApiFailure;

    async fn from_request_parts(
        parts: &mut http::request::Parts,
        state: &S,
    ) -> Result<Self, Self::Rejection> {
        let raw = RawPathParams::from_request_parts(parts, state)
            .await
            .map_err(|rej| {
                let text = rej.body_text();
                let field = text
                    .split_once('`')
                    .and_then(|(_, rest)| rest.split('`').next())
                    .unwrap_or("path")
                    .to_string();
                ApiFailure(ApiError::invalid(field, text))
            })?;
        for (name, value) in &raw {
            crate::input::single_line(name, value)?;
        }
        Path::<T>::from_request_parts(parts, state)
            .await
            .map(|Path(t)| ApiPath(t))
            .map_err(|rej| ApiFailure(ApiError::invalid("path", rej.body_text())))
    }
}

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/v1/me", get(me))
        .route("/api/v1/templates", get(templates).post(create_template))
        .route(
            "/api/v1/templates/{name}/versions",
            post(add_template_version),
        )
        .route(
            "/api/v1/templates/{name}/deprecate",
            post(deprecate_template),
        )
        .route("/api/v1/pools", get(pools))
        .route("/api/v1/jobs", get(list_jobs).post(launch))
        .route("/api/v1/manifests", post(manifest))
        .route("/api/v1/quotas", get(list_quotas))
        .route("/api/v1/quotas/preview", post(preview_quotas))
        .route(
            "/api/v1/quotas/{team}/{pool}",
            get(get_quota).put(put_quota),
        )
        .route("/api/v1/audit", get(audit_log))
        .route("/api/v1/jobs/{id}", get(get_job))
        .route("/api/v1/jobs/{id}/cancel", post(cancel))
        .route("/api/v1/jobs/{id}/utilization", get(job_utilization))
        .route("/api/v1/events", get(events))
        .route("/api/v1/sim/advance", post(sim_advance))
        .route("/api/v1/usage", get(usage))
        .route("/api/v1/tokens", get(list_tokens).post(create_token))
        .route("/api/v1/tokens/{id}", axum::routing::delete(revoke_token))
        .route("/api/v1/{*rest}", axum::routing::any(no_such_route))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .method_not_allowed_fallback(method_not_allowed)
}

async fn method_not_allowed() -> ApiFailure {
    ApiFailure(ApiError::new(
        ErrorCode::MethodNotAllowed,
        "this route does not take that method; see README.md for the routes",
    ))
}

async fn no_such_route() -> ApiFailure {
    ApiFailure(ApiError::not_found(
        "no such API route; see README.md for the routes",
    ))
}

async fn healthz() -> &'static str {
    "ok"
}

async fn readyz(State(state): State<AppState>) -> Response {
    match state.portal.db.ping().await {
        Ok(()) => "ready".into_response(),
        Err(e) => {
            tracing::warn!(error = %e, "readiness check: database did not answer");
            (StatusCode::SERVICE_UNAVAILABLE, "database unavailable").into_response()
        }
    }
}

async fn me(ApiViewer(v): ApiViewer) -> Json<app::model::Viewer> {
    Json(v)
}

async fn templates(
    State(state): State<AppState>,
    ApiViewer(v): ApiViewer,
) -> ApiResult<impl IntoResponse> {
    Ok(Json(state.portal.templates(&v).await?))
}

async fn pools(
    State(state): State<AppState>,
    ApiViewer(_): ApiViewer,
) -> ApiResult<impl IntoResponse> {
    Ok(Json(state.portal.pools().await?))
}

async fn launch(
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
    let (job, created) = state.portal.launch(&v, req, key).await?;
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

/// The client's address for the audit log (see [`crate::request_id::client_addr_of`]).
pub struct ClientAddr(pub Option<String>);

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for ClientAddr {
    type Rejection = Infallible;

    async fn from_request_parts(
        parts: &mut http::request::Parts,
        _state: &S,
    ) -> Result<Self, Self::Rejection> {
        Ok(ClientAddr(crate::request_id::client_addr_of(
            &parts.headers,
            &parts.extensions,
        )))
    }
}

fn etag(version: i64) -> String {
    format!("\"v{version}\"")
}

async fn list_quotas(
    State(state): State<AppState>,
    ApiViewer(v): ApiViewer,
) -> ApiResult<impl IntoResponse> {
    Ok(Json(state.portal.quota_cells(&v).await?))
}

async fn get_quota(
    State(state): State<AppState>,
    ApiViewer(v): ApiViewer,
    ApiPath((team, pool)): ApiPath<(String, String)>,
) -> ApiResult<impl IntoResponse> {
    let cell = state.portal.quota_for(&v, &team, &pool).await?;
    Ok(([(http::header::ETAG, etag(cell.version))], Json(cell)))
}

/// A whole number of GPUs, at least 0, or a 422 naming the field.
fn whole_gpus(
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
fn present<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    T::deserialize(d).map(Some)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PreviewChange {
    team: String,
    pool: String,
    nominal_gpus: u32,
    #[serde(default)]
    borrowing_limit_gpus: Option<u32>,
    /// Absent: unchanged; null: lends all of its nominal quota.
    #[serde(default, deserialize_with = "present")]
    lending_limit_gpus: Option<Option<u32>>,
    /// Absent: unchanged; null: the pool's default.
    #[serde(default, deserialize_with = "present")]
    queueing_strategy: Option<Option<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PreviewRequest {
    changes: Vec<PreviewChange>,
    /// How far back to replay, in days (default 30, at most 90).
    #[serde(default)]
    days: Option<i64>,
}

/// What-if: the last 30 days of launches replayed under the current quotas and the draft.
async fn preview_quotas(
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
        .map(|c| {
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
                        .transpose()?,
                },
            ))
        })
        .collect::<Result<_, ApiError>>()?;
    Ok(Json(state.portal.preview_quotas(&v, changes, days).await?))
}

async fn put_quota(
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
    let borrowing_limit = whole_gpus(&body, "borrowing_limit_gpus")?;
    // Left out: unchanged; null: Kueue's default (lend all) / the pool's default order.
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

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AuditQuery {
    actor: Option<String>,
    action: Option<String>,
    target: Option<String>,
    format: Option<String>,
    limit: Option<i64>,
}

async fn audit_log(
    State(state): State<AppState>,
    ApiViewer(v): ApiViewer,
    ApiQuery(q): ApiQuery<AuditQuery>,
) -> ApiResult<Response> {
    let entries = state
        .portal
        .audit_log(
            &v,
            crate::db::AuditFilter {
                actor: q.actor,
                action: q.action,
                target: q.target,
                limit: q.limit.unwrap_or(1000),
            },
        )
        .await?;
    match q.format.as_deref() {
        None | Some("json") => Ok(Json(entries).into_response()),
        Some("csv") => {
            let mut out = String::from("at,actor,action,target,before,after,address\n");
            let cell = |s: &str| format!("\"{}\"", s.replace('"', "\"\""));
            for e in entries {
                let json = |v: &Option<serde_json::Value>| {
                    v.as_ref().map(|v| v.to_string()).unwrap_or_default()
                };
                out.push_str(
                    &[
                        e.at.to_rfc3339(),
                        cell(&e.actor),
                        cell(&e.action),
                        cell(&e.target),
                        cell(&json(&e.before)),
                        cell(&json(&e.after)),
                        cell(e.address.as_deref().unwrap_or_default()),
                    ]
                    .join(","),
                );
                out.push('\n');
            }
            Ok((
                [
                    (http::header::CONTENT_TYPE, "text/csv; charset=utf-8"),
                    (
                        http::header::CONTENT_DISPOSITION,
                        "attachment; filename=\"gantry-audit.csv\"",
                    ),
                ],
                out,
            )
                .into_response())
        }
        Some(other) => {
            Err(ApiError::invalid("format", format!("'{other}' is not json or csv")).into())
        }
    }
}

/// A template definition as text: YAML (or JSON, which YAML reads too).
pub struct DefinitionText(pub String);

impl<S: Send + Sync> FromRequest<S> for DefinitionText {
    type Rejection = ApiFailure;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let accepted = media_type_is(
            &req,
            &[
                "application/yaml",
                "application/x-yaml",
                "text/yaml",
                "application/json",
                "text/plain",
            ],
        );
        if !accepted {
            return Err(ApiFailure(ApiError::bad_request(
                "send the template definition as YAML (Content-Type: application/yaml) or JSON",
            )));
        }
        let bytes = Bytes::from_request(req, state).await.map_err(|rej| {
            if rej.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiFailure(ApiError::new(
                    ErrorCode::PayloadTooLarge,
                    "the definition is too large",
                ))
            } else {
                ApiFailure(ApiError::bad_request("the request body could not be read"))
            }
        })?;
        String::from_utf8(bytes.to_vec())
            .map(DefinitionText)
            .map_err(|_| ApiFailure(ApiError::bad_request("the definition must be UTF-8 text")))
    }
}

async fn create_template(
    State(state): State<AppState>,
    ApiViewer(v): ApiViewer,
    ClientAddr(address): ClientAddr,
    DefinitionText(text): DefinitionText,
) -> ApiResult<impl IntoResponse> {
    let t = state.portal.create_template(&v, &text, address).await?;
    Ok((StatusCode::CREATED, Json(t)))
}

async fn add_template_version(
    State(state): State<AppState>,
    ApiViewer(v): ApiViewer,
    ClientAddr(address): ClientAddr,
    ApiPath(name): ApiPath<String>,
    DefinitionText(text): DefinitionText,
) -> ApiResult<impl IntoResponse> {
    let t = state
        .portal
        .add_template_version(&v, &name, &text, address)
        .await?;
    Ok((StatusCode::CREATED, Json(t)))
}

async fn deprecate_template(
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

/// The JobSet or TrainJob a launch with this body would submit, as YAML (kube back end).
async fn manifest(
    State(state): State<AppState>,
    ApiViewer(v): ApiViewer,
    ApiJson(req): ApiJson<LaunchRequest>,
) -> ApiResult<impl IntoResponse> {
    match state.portal.manifest(&v, req).await? {
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
struct JobsQuery {
    state: Option<String>,
    team: Option<String>,
    #[serde(default)]
    mine: bool,
}

async fn list_jobs(
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
    let jobs = state
        .portal
        .jobs(
            &v,
            JobFilter {
                state: state_filter,
                team: q.team,
                mine: q.mine,
            },
        )
        .await?;
    Ok(Json(jobs))
}

async fn get_job(
    State(state): State<AppState>,
    ApiViewer(v): ApiViewer,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<impl IntoResponse> {
    Ok(Json(state.portal.job_for(&v, &id).await?))
}

async fn cancel(
    State(state): State<AppState>,
    ApiViewer(v): ApiViewer,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<impl IntoResponse> {
    Ok(Json(state.portal.cancel(&v, &id).await?))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Advance {
    seconds: i64,
}

/// `POST /api/v1/sim/advance {"seconds": N}`: moves the manual sim clock (admins only).
async fn sim_advance(
    State(state): State<AppState>,
    ApiViewer(v): ApiViewer,
    ApiJson(body): ApiJson<Advance>,
) -> ApiResult<impl IntoResponse> {
    let Some(sim) = state.sim.as_ref() else {
        return Err(ApiError::not_found("the sim clock exists only with the sim back end").into());
    };
    if !v.is_admin {
        return Err(ApiError::forbidden("only an admin can move the sim clock").into());
    }
    if !(1..=30 * 86400).contains(&body.seconds) {
        return Err(ApiError::invalid("seconds", "must be between 1 and 2592000 (30 days)").into());
    }
    let Some(now) = sim.advance(chrono::Duration::seconds(body.seconds)) else {
        return Err(ApiError::conflict(
            "the sim clock is scaled; set GANTRY__SIM__CLOCK=manual to move it by hand",
        )
        .into());
    };
    state.portal.sync().await;
    if let Err(e) = state.portal.db.save_sim_clock(now).await {
        tracing::warn!(error = %e, "could not save the sim clock");
    }
    Ok(Json(serde_json::json!({ "now": now })))
}

/// `GET /api/v1/events`: server-sent events. The viewer's teams' job changes carry the job
/// id; other teams' changes only say which pool moved (queue positions may have changed).
///
/// Who holds the stream is asked again every [`RECHECK`]: after a sign-out, a revoked token
/// or the end of the session's lifetime the stream sends an `end` event and closes (the
/// viewer's teams are read again too, so a change of team applies within seconds). A user
/// holds at most `server.max_streams_per_user` streams; one more is a 429.
async fn events(
    State(state): State<AppState>,
    crate::auth::Held(viewer, credential): crate::auth::Held,
) -> ApiResult<Response> {
    let Some(slot) = state
        .streams
        .take(&viewer.user, state.config.server.max_streams_per_user)
    else {
        let mut res = ApiFailure(ApiError::new(
            ErrorCode::TooManyRequests,
            format!(
                "you already hold {} live streams; close a tab and try again",
                state.config.server.max_streams_per_user
            ),
        ))
        .into_response();
        res.headers_mut().insert(
            http::header::RETRY_AFTER,
            http::HeaderValue::from_static("5"),
        );
        return Ok(res);
    };
    let (tx, rx) = tokio::sync::mpsc::channel::<Event>(64);
    tokio::spawn(stream_events(state, viewer, credential, slot, tx));
    let stream = tokio_stream::wrappers::ReceiverStream::new(rx).map(Ok::<_, Infallible>);
    Ok(Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response())
}

/// How often a live stream asks again whether its holder may still see it (and ticks).
const RECHECK: Duration = Duration::from_secs(2);

async fn stream_events(
    state: AppState,
    mut viewer: app::model::Viewer,
    credential: crate::auth::Credential,
    _slot: crate::auth::StreamSlot,
    tx: tokio::sync::mpsc::Sender<Event>,
) {
    use tokio::sync::broadcast::error::RecvError;
    let portal = state.portal.clone();
    let mut live = portal.subscribe_live();
    let mut every = tokio::time::interval(RECHECK);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let event = tokio::select! {
            msg = live.recv() => match msg {
                Ok(c) if viewer.is_admin || viewer.is_member_of(&c.team) => LiveEvent::Job {
                    job_id: c.job_id,
                    pool: c.pool,
                    state: c.state,
                    now: c.at,
                },
                Ok(c) => LiveEvent::Job {
                    job_id: String::new(),
                    pool: c.pool,
                    state: c.state,
                    now: c.at,
                },
                // Missed some: a pool-less change makes the page refetch everything.
                Err(RecvError::Lagged(_)) => LiveEvent::Job {
                    job_id: String::new(),
                    pool: String::new(),
                    state: JobState::Queued,
                    now: app::backend::Backend::now(&*portal),
                },
                Err(RecvError::Closed) => return,
            },
            _ = every.tick() => {
                match credential.recheck(&state).await {
                    Ok(Some(v)) => viewer = v,
                    Ok(None) => {
                        tracing::info!(user = %viewer.user, "live stream ended: signed out, revoked or expired");
                        let end = Event::default().event("end").data(r#"{"reason":"signed_out"}"#);
                        let _ = tx.send(end).await;
                        return;
                    }
                    // The database did not answer: keep the stream, ask again next time.
                    Err(e) => tracing::warn!(error = %e, "live stream: could not check its holder"),
                }
                LiveEvent::Tick {
                    now: app::backend::Backend::now(&*portal),
                }
            }
            // The client went away.
            _ = tx.closed() => return,
        };
        let data = serde_json::to_string(&event).unwrap_or_default();
        if tx.send(Event::default().data(data)).await.is_err() {
            return;
        }
    }
}

async fn list_tokens(
    State(state): State<AppState>,
    ApiViewer(v): ApiViewer,
) -> ApiResult<impl IntoResponse> {
    use app::backend::Backend;
    Ok(Json(state.portal.list_tokens(&v).await?))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NewToken {
    name: String,
    #[serde(default)]
    expires_in_days: Option<u32>,
}

/// Tokens are made in a signed-in session only: a leaked token cannot mint more.
async fn create_token(
    State(state): State<AppState>,
    Authenticated(v, via): Authenticated,
    ApiJson(body): ApiJson<NewToken>,
) -> ApiResult<impl IntoResponse> {
    use app::backend::Backend;
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

async fn revoke_token(
    State(state): State<AppState>,
    ApiViewer(v): ApiViewer,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<impl IntoResponse> {
    use app::backend::Backend;
    state.portal.revoke_token(&v, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UsageQuery {
    from: Option<String>,
    to: Option<String>,
    group_by: Option<String>,
    bucket: Option<String>,
    team: Option<String>,
    format: Option<String>,
}

/// A date (`2026-11-01`, midnight in the accounting time zone) or an RFC 3339 time.
fn usage_time(
    field: &str,
    v: &str,
    tz: chrono_tz::Tz,
) -> Result<chrono::DateTime<chrono::Utc>, ApiError> {
    use chrono::Datelike;
    let t = match v.parse::<chrono::NaiveDate>() {
        Ok(d) => crate::usage::local_midnight(d, tz),
        Err(_) => chrono::DateTime::parse_from_rfc3339(v)
            .map(|t| t.with_timezone(&chrono::Utc))
            .map_err(|_| {
                ApiError::invalid(
                    field,
                    format!("'{v}' is neither a date (2026-11-01) nor an RFC 3339 time"),
                )
            })?,
    };
    // The years RFC 3339 can write; chrono reads dates up to ±262143, at whose ends a day
    // more or less (the report's default span, its buckets) would not exist.
    if !(1..=9999).contains(&t.year()) {
        return Err(ApiError::invalid(
            field,
            format!("'{v}' is outside the years 1 to 9999"),
        ));
    }
    Ok(t)
}

/// `GET /api/v1/usage`: GPU-hours allocated, used and idle, and efficiency, per bucket and
/// group (leads: their teams; admins: all). `format=csv` gives the same rows as CSV.
async fn usage(
    State(state): State<AppState>,
    ApiViewer(v): ApiViewer,
    ApiQuery(q): ApiQuery<UsageQuery>,
) -> ApiResult<Response> {
    use crate::usage::{Bucket, GroupBy};
    let tz = state.portal.usage_tz();
    let today = state.portal.cluster.now().with_timezone(&tz).date_naive();
    let to = match &q.to {
        Some(t) => usage_time("to", t, tz)?,
        None => crate::usage::local_midnight(today + chrono::Duration::days(1), tz),
    };
    let from = match &q.from {
        Some(f) => usage_time("from", f, tz)?,
        None => to - chrono::Duration::days(30),
    };
    if to <= from {
        return Err(ApiError::invalid("to", "must be after from").into());
    }
    if to - from > chrono::Duration::days(400) {
        return Err(ApiError::invalid("to", "a report spans at most 400 days").into());
    }
    let group_by = GroupBy::parse(q.group_by.as_deref().unwrap_or("team"))?;
    let bucket = Bucket::parse(q.bucket.as_deref().unwrap_or("day"))?;
    let csv = match q.format.as_deref().unwrap_or("json") {
        "json" => false,
        "csv" => true,
        other => {
            return Err(ApiError::invalid("format", format!("'{other}' is not json or csv")).into())
        }
    };
    let rows = state
        .portal
        .usage(&v, from, to, group_by, bucket, q.team.as_deref())
        .await?;
    if csv {
        return Ok((
            [
                (http::header::CONTENT_TYPE, "text/csv; charset=utf-8"),
                (
                    http::header::CONTENT_DISPOSITION,
                    "attachment; filename=\"gantry-usage.csv\"",
                ),
            ],
            crate::usage::to_csv(&rows, group_by),
        )
            .into_response());
    }
    let key = group_by.as_str();
    let rows: Vec<serde_json::Value> = rows
        .iter()
        .map(|r| {
            serde_json::json!({
                "bucket_start": r.bucket_start,
                key: r.key,
                "gpu_hours_allocated": r.gpu_hours_allocated,
                "gpu_hours_used": r.gpu_hours_used,
                "gpu_hours_idle": r.gpu_hours_idle,
                "gpu_hours_unmeasured": r.gpu_hours_unmeasured,
                "efficiency": r.efficiency,
            })
        })
        .collect();
    Ok(Json(serde_json::json!({
        "from": from,
        "to": to,
        "time_zone": tz.name(),
        "group_by": key,
        "bucket": bucket.as_str(),
        "rows": rows,
    }))
    .into_response())
}

/// `GET /api/v1/jobs/{id}/utilization`: the job's per-GPU series, mean utilization, memory
/// and power, and the idle flag.
async fn job_utilization(
    State(state): State<AppState>,
    ApiViewer(v): ApiViewer,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<impl IntoResponse> {
    Ok(Json(state.portal.job_utilization(&v, &id).await?))
}
