//! The services behind every page and API route, one file per area: launch, jobs, quotas,
//! templates, usage, gpu, identity, audit, live, logs, notify; `page` is the cursor of long lists. Each method checks who may do it; the JSON
//! handlers and the server functions ([`backend`]) call the same method and stay thin.

mod audit;
mod backend;
mod gpu;
mod identity;
mod jobs;
mod launch;
mod live;
mod logs;
mod notify;
pub mod page;
mod quotas;
pub mod session;
mod templates;
mod usage;

pub use usage::grouping;

pub use identity::{memo_viewer, ViewerMemo};
pub use launch::{stored_workload, workload_of};
pub use live::{resume_after_lag, LiveChange, LiveTx, Subscribed, REPLAY};
pub use logs::log_source;
pub use notify::webhook_client;
pub use page::{PAGE_DEFAULT, PAGE_MAX};
pub use quotas::{parse_strategy, QuotaEdit};

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration as StdDuration;

use crate::error::Error;
use app::backend::{Backend, JobFilter};
use app::model::*;
use chrono::{DateTime, Utc};
use serde_json::{Map, Value};
use tokio::sync::{broadcast, watch};

use crate::cluster::{Cluster, PendingWorkload, RunSpec, WorkloadSpec};
use crate::db::{Db, DbError, JobMore, JobQuery, JobRow, NewJob, Transition};
use crate::domain::template::TemplateVersion;
pub use crate::domain::workload::run_spec;

pub use crate::domain::template_def::{MAX_RUNTIME_LIMIT_S, MIN_RUNTIME_S};
/// The most jobs a "who is ahead" list shows.
pub const MAX_AHEAD: usize = 100;

/// The services: the database, the cluster and the settings behind every operation. Its
/// methods, one per operation and each with its permission checks, live in this module's
/// files by area; [`Backend`] (the server functions) only delegates to them.
pub struct Portal {
    db: Db,
    cluster: Arc<dyn Cluster>,
    /// Sequence number of the last cluster event written to the database.
    applied: watch::Receiver<u64>,
    live: LiveTx,
    dev_login: bool,
    /// The OpenID provider's name, when single sign-on is configured.
    sso_provider: Option<String>,
    /// Under single sign-on, how recently a token's owner must have signed in for the token
    /// to work (`auth.oidc.token_sign_in_days`).
    token_sign_in_days: Option<u32>,
    /// Sessions end this long after sign-in.
    session_limits: session::SessionLimits,
    /// The time zone accounting days are counted in.
    usage_tz: chrono_tz::Tz,
    /// Where GPU utilization comes from, if anywhere.
    metrics: Option<Arc<dyn crate::metrics::Metrics>>,
    /// Quota edits one at a time (with the version check, two admins never overwrite).
    quota_edits: tokio::sync::Mutex<()>,
    /// Re-runs named one at a time: the last re-run number is read and the new job stored
    /// under this lock, so two re-runs of one name sent together get different numbers. Held
    /// until the job is stored, not while it is sent to the cluster.
    rerun_names: tokio::sync::Mutex<()>,
    /// The sim cluster when it is the back end, for moving its manual clock.
    sim: Option<Arc<crate::cluster::sim::SimCluster>>,
    /// Where people reach Gantry, for links in webhook messages (set once it listens).
    public_url: std::sync::OnceLock<String>,
    /// The internal networks webhooks may reach (`server.webhook_networks`).
    webhook_networks: Arc<[ipnet::IpNet]>,
}

use crate::error::internal;

impl Portal {
    pub fn new(
        db: Db,
        cluster: Arc<dyn Cluster>,
        applied: watch::Receiver<u64>,
        live: LiveTx,
        dev_login: bool,
    ) -> Self {
        Portal {
            db,
            cluster,
            applied,
            live,
            dev_login,
            sso_provider: None,
            token_sign_in_days: None,
            session_limits: session::SessionLimits {
                absolute: chrono::TimeDelta::hours(24),
                idle: chrono::TimeDelta::hours(12),
            },
            usage_tz: chrono_tz::Tz::UTC,
            metrics: None,
            quota_edits: tokio::sync::Mutex::new(()),
            rerun_names: tokio::sync::Mutex::new(()),
            sim: None,
            public_url: std::sync::OnceLock::new(),
            webhook_networks: Arc::new([]),
        }
    }

    /// The internal networks webhooks may post to (see `server.webhook_networks`).
    pub fn with_webhook_networks(mut self, nets: Vec<ipnet::IpNet>) -> Self {
        self.webhook_networks = nets.into();
        self
    }

    pub fn webhook_networks(&self) -> Arc<[ipnet::IpNet]> {
        self.webhook_networks.clone()
    }

    /// Where people reach Gantry (links in webhook messages); the first setting stays.
    pub fn set_public_url(&self, url: String) {
        let _ = self.public_url.set(url);
    }

    pub(crate) fn public_url(&self) -> &str {
        self.public_url
            .get()
            .map(String::as_str)
            .unwrap_or("http://127.0.0.1:3000")
    }

    /// The database, for start-up, the workers and tests; routes go through the services
    /// (tests/layers.rs fails on `http` code that reaches it).
    pub fn db(&self) -> &Db {
        &self.db
    }

    /// The cluster, for start-up, the workers and tests (as [`Portal::db`]).
    pub fn cluster(&self) -> &Arc<dyn Cluster> {
        &self.cluster
    }

    /// The sim cluster, when it is the back end (its clock can be moved by hand).
    pub fn with_sim(mut self, sim: Option<Arc<crate::cluster::sim::SimCluster>>) -> Self {
        self.sim = sim;
        self
    }

    /// Sign-in settings: the provider's name for the sign-in page, the sessions' lifetime.
    pub fn with_auth(mut self, auth: &crate::config::AuthConfig) -> Self {
        self.sso_provider = auth.oidc.as_ref().map(|o| o.provider_name.clone());
        self.token_sign_in_days = auth
            .oidc
            .as_ref()
            .map(|o| o.token_sign_in_days)
            .filter(|d| *d > 0);
        let minutes = |m: f64| chrono::TimeDelta::milliseconds((m * 60_000.0) as i64);
        self.session_limits = session::SessionLimits {
            absolute: minutes(auth.session_absolute_minutes),
            idle: minutes(auth.session_idle_minutes),
        };
        self
    }

    /// Accounting settings: the time zone of report days.
    pub fn with_usage(mut self, usage: &crate::config::UsageConfig) -> Self {
        self.usage_tz = usage.tz();
        self
    }

    pub fn with_metrics(mut self, metrics: Option<Arc<dyn crate::metrics::Metrics>>) -> Self {
        self.metrics = metrics;
        self
    }

    fn may_see(viewer: &Viewer, team: &str) -> bool {
        viewer.is_admin || viewer.is_member_of(team)
    }
}

/// Whether a request only reads: a GET, HEAD or OPTIONS, or a POST to a server function that
/// only reads. The page cache counts any other as an action (its pages go stale), and such a
/// request reads its viewer from the database, not from `db::memo`
/// ([`Portal::viewer_by_id_for`]).
pub fn only_reads(method: &http::Method, path: &str) -> bool {
    matches!(
        *method,
        http::Method::GET | http::Method::HEAD | http::Method::OPTIONS
    ) || reads_only(path)
}

/// The server functions that only read. A hydrated page calls some at once (the notification
/// list in the top bar, for one); counted as actions, they made every entry stale, so that a
/// browser's reload was never answered from the cache. Should one of them write after all, the
/// database's change count still makes the entries stale; every other POST is an action.
fn reads_only(path: &str) -> bool {
    use app::functions::*;
    use leptos::server_fn::ServerFn;
    const READS: &[&str] = &[
        GetViewer::PATH,
        GetSignInOptions::PATH,
        ListApiTokens::PATH,
        GetHome::PATH,
        ListTemplates::PATH,
        TemplatesPage::PATH,
        ListPools::PATH,
        CheckLaunch::PATH,
        AdminQuotas::PATH,
        PreviewQuota::PATH,
        AuditRecords::PATH,
        ManifestsAvailable::PATH,
        ListJobs::PATH,
        GetJob::PATH,
        GetJobLogs::PATH,
        GetNotifications::PATH,
        GetNotificationSettings::PATH,
        GetWebhookDeliveries::PATH,
        GetUsage::PATH,
        GetJobUtilization::PATH,
        GetPoolGrids::PATH,
    ];
    READS.contains(&path)
}

#[cfg(test)]
mod tests;
