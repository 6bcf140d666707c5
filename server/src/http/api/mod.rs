//! The JSON API under `/api/v1` for automation, the CLI and agents, plus `/healthz`,
//! `/readyz` and the live event stream. Errors are `{"error": {code, message, field}}`.

mod audit;
mod events;
mod extract;
mod health;
mod jobs;
mod logs;
mod notify;
mod quotas;
mod sim;
mod templates;
mod tokens;
mod usage;

use audit::*;
use events::*;
use extract::*;
pub use extract::{ApiJson, ApiPath, ApiQuery};
use health::*;
use jobs::*;
use logs::*;
use notify::*;
use quotas::*;
use sim::*;
use templates::*;
use tokens::*;
use usage::*;

use std::convert::Infallible;
use std::time::Duration;

use app::backend::JobFilter;
use app::error::{ApiError, ErrorCode};
use app::model::{JobState, LaunchRequest};
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

use crate::http::auth::{ApiViewer, Authenticated, Via};
use crate::http::state::AppState;

pub use crate::http::failure::ApiFailure;
pub use crate::http::request_id::ClientAddr;

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
        .route("/api/v1/jobs/{id}/logs", get(job_logs))
        .route("/api/v1/jobs/{id}/rerun", post(rerun))
        .route("/api/v1/notifications", get(notifications))
        .route("/api/v1/notifications/read", post(mark_read))
        .route(
            "/api/v1/notifications/settings",
            get(notification_settings).put(save_notification_settings),
        )
        .route("/api/v1/webhooks", get(webhooks).post(create_webhook))
        .route(
            "/api/v1/webhooks/{id}",
            axum::routing::delete(delete_webhook),
        )
        .route("/api/v1/webhooks/{id}/deliveries", get(webhook_deliveries))
        .route("/api/v1/sim/advance", post(sim_advance))
        .route("/api/v1/usage", get(usage))
        .route("/api/v1/tokens", get(list_tokens).post(create_token))
        .route("/api/v1/tokens/{id}", axum::routing::delete(revoke_token))
        .route("/api/v1/admin/tokens", get(admin_tokens))
        .route("/api/v1/{*rest}", axum::routing::any(no_such_route))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .method_not_allowed_fallback(method_not_allowed)
}

/// The live stream's path.
pub const LIVE_PATH: &str = "/api/v1/events";

/// `GET /api/v1/events`, apart from [`routes`]: the router gives a live stream only the
/// layers it needs, so that an open stream holds as little as it can.
pub fn live_routes() -> Router<AppState> {
    Router::new()
        .route(LIVE_PATH, get(events))
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

/// A list's `limit` query value: a page size the service then checks (1 to 200); empty is the
/// default. Not a number is a 422 naming `limit`.
fn page_limit(v: Option<&str>) -> Result<Option<u32>, ApiError> {
    match v.map(str::trim) {
        None | Some("") => Ok(None),
        Some(l) => l.parse::<u32>().map(Some).map_err(|_| {
            ApiError::invalid(
                "limit",
                format!(
                    "a number of entries per page from 1 to {}",
                    crate::service::PAGE_MAX
                ),
            )
        }),
    }
}
