//! The services behind every page and API route: launch, list, cancel, pools and quotas.
//! Each method checks who may do it; handlers and server functions stay thin.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration as StdDuration;

use app::backend::{Backend, JobFilter};
use app::error::ApiError;
use app::model::*;
use chrono::{DateTime, Utc};
use serde_json::{Map, Value};
use tokio::sync::{broadcast, watch};

use crate::cluster::{Cluster, ClusterError, PendingWorkload, RunSpec, WorkloadSpec};
use crate::db::{Db, DbError, JobQuery, JobRow, NewJob, Transition};
use crate::request_id::current_request_id;

/// Longest max runtime a launch may ask for: 14 days.
pub const MAX_RUNTIME_LIMIT_S: u64 = 14 * 24 * 3600;
/// Shortest: one minute.
pub const MIN_RUNTIME_S: u64 = 60;
/// The most jobs a "who is ahead" list shows.
pub const MAX_AHEAD: usize = 100;

/// The pools, their live use, the quotas and the queues a quota cell is figured from.
struct QuotaContext {
    pools: Vec<crate::db::PoolRow>,
    status: Vec<crate::cluster::PoolStatus>,
    quotas: Vec<crate::db::QuotaRow>,
    queues: HashMap<String, Arc<Vec<PendingWorkload>>>,
}

/// A change a live page may want to know about.
#[derive(Clone, Debug)]
pub struct LiveChange {
    pub job_id: String,
    pub team: String,
    pub pool: String,
    pub state: JobState,
    pub at: DateTime<Utc>,
}

pub struct Portal {
    pub db: Db,
    pub cluster: Arc<dyn Cluster>,
    /// Sequence number of the last cluster event written to the database.
    applied: watch::Receiver<u64>,
    live: broadcast::Sender<LiveChange>,
    dev_login: bool,
    /// The OpenID provider's name, when single sign-on is configured.
    sso_provider: Option<String>,
    /// Sessions end this long after sign-in.
    session_limits: crate::auth::SessionLimits,
    /// The time zone accounting days are counted in.
    usage_tz: chrono_tz::Tz,
    /// Where GPU utilization comes from, if anywhere.
    metrics: Option<Arc<dyn crate::metrics::Metrics>>,
    /// The Kubernetes object settings, when that is the back end.
    kube: Option<crate::config::KubeSettings>,
    /// Quota edits one at a time (with the version check, two admins never overwrite).
    quota_edits: tokio::sync::Mutex<()>,
}

impl From<DbError> for ApiError {
    fn from(e: DbError) -> Self {
        match e {
            DbError::NotFound => ApiError::not_found("not found"),
            DbError::Conflict => ApiError::conflict("that already exists"),
            other => internal(other),
        }
    }
}

impl From<ClusterError> for ApiError {
    fn from(e: ClusterError) -> Self {
        match e {
            ClusterError::Conflict(m) => ApiError::conflict(format!(
                "the cluster kept a value someone else set, nothing was changed: {m}"
            )),
            other => internal(other),
        }
    }
}

/// Logs an internal failure with the request id and returns what the user may see.
/// A quota change: nominal and borrowing limit as given; the lending limit and the queueing
/// strategy only where `Some` (`Some(None)`: back to Kueue's default / the pool's default).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct QuotaEdit {
    pub nominal: u32,
    pub borrowing_limit: Option<u32>,
    pub lending_limit: Option<Option<u32>>,
    pub strategy: Option<Option<crate::cluster::QueueingStrategy>>,
}

impl QuotaEdit {
    /// From the Quotas page's draft: every field set.
    pub fn from_draft(d: &app::model::QuotaDraft) -> Result<Self, ApiError> {
        Ok(QuotaEdit {
            nominal: d.nominal_gpus,
            borrowing_limit: d.borrowing_limit_gpus,
            lending_limit: Some(d.lending_limit_gpus),
            strategy: Some(Some(parse_strategy(&d.queueing_strategy)?)),
        })
    }

    /// The quota this edit gives, on top of `before`.
    pub fn apply(&self, before: &crate::cluster::QuotaSpec) -> crate::cluster::QuotaSpec {
        crate::cluster::QuotaSpec {
            nominal: self.nominal,
            borrowing_limit: self.borrowing_limit,
            lending_limit: self.lending_limit.unwrap_or(before.lending_limit),
            strategy: self.strategy.unwrap_or(before.strategy),
        }
    }
}

/// `BestEffortFIFO` or `StrictFIFO`, or a 422 naming `queueing_strategy`.
pub fn parse_strategy(s: &str) -> Result<crate::cluster::QueueingStrategy, ApiError> {
    crate::cluster::QueueingStrategy::parse(s).ok_or_else(|| {
        ApiError::invalid(
            "queueing_strategy",
            format!("must be BestEffortFIFO or StrictFIFO (got {s:?})"),
        )
    })
}

/// What a quota may be in a pool of `capacity` GPUs, checked the same for a save and for a
/// preview: a 422 naming the field.
fn check_quota(
    pool: &str,
    capacity: u32,
    quota: &crate::cluster::QuotaSpec,
) -> Result<(), ApiError> {
    if quota.nominal > capacity {
        return Err(ApiError::invalid(
            "nominal_gpus",
            format!("{pool} has {capacity} GPUs; a nominal quota can be 0 to {capacity}"),
        ));
    }
    if quota.borrowing_limit.is_some_and(|b| b > capacity) {
        return Err(ApiError::invalid(
            "borrowing_limit_gpus",
            format!("{pool} has {capacity} GPUs; a borrowing limit can be 0 to {capacity}, or null for no limit"),
        ));
    }
    if quota.lending_limit.is_some_and(|l| l > quota.nominal) {
        return Err(ApiError::invalid(
            "lending_limit_gpus",
            format!(
                "a lending limit can be 0 to the nominal quota ({} GPUs), or null to lend all of it",
                quota.nominal
            ),
        ));
    }
    Ok(())
}

pub fn internal(e: impl std::fmt::Display) -> ApiError {
    let id = current_request_id();
    tracing::error!(request_id = %id, error = %e, "internal error");
    ApiError::internal(&id)
}

/// A node of the Pools grid with every GPU free.
fn empty_node(name: String, gpus: usize) -> GridNode {
    GridNode {
        name,
        cells: vec![
            GridCell {
                job: None,
                job_id: None,
                util_pct: None
            };
            gpus
        ],
    }
}

/// Live (unrevoked) personal API tokens a user may hold.
pub const MAX_LIVE_TOKENS: usize = 20;

fn token_info(t: crate::db::TokenRow) -> ApiTokenInfo {
    ApiTokenInfo {
        id: t.id,
        name: t.name,
        prefix: t.prefix,
        created_at: t.created_at,
        expires_at: t.expires_at,
        last_used_at: t.last_used_at,
        revoked_at: t.revoked_at,
    }
}

/// A launch that passed every check, ready to store.
/// The container side of a job: its exact template version, parameters in the template's order.
pub fn run_spec(
    template: &Template,
    name: &str,
    user: &str,
    params: &Map<String, Value>,
) -> RunSpec {
    RunSpec {
        name: name.to_string(),
        user: user.to_string(),
        template: template.name.clone(),
        template_version: template.version,
        image: template.image.clone(),
        command: template.command.clone(),
        params: template
            .params
            .iter()
            .filter_map(|p| params.get(&p.name).map(|v| (p.name.clone(), v.clone())))
            .collect(),
        trainer_runtime: template.trainer_runtime.clone(),
    }
}

/// A stored job as the cluster gets it (the reconciler re-sends these).
pub async fn workload_of(db: &crate::db::Db, row: &JobRow) -> anyhow::Result<WorkloadSpec> {
    let template = db
        .template_version(&row.template, row.template_version)
        .await?
        .ok_or_else(|| {
            anyhow::anyhow!(
                "job {} names template {} v{} that is not stored",
                row.id,
                row.template,
                row.template_version
            )
        })?;
    Ok(stored_workload(
        row,
        run_spec(&template, &row.name, &row.user, &row.params),
    ))
}

/// A stored job as a workload, with its submission time kept.
pub fn stored_workload(row: &JobRow, run: RunSpec) -> WorkloadSpec {
    WorkloadSpec {
        job_id: row.id.clone(),
        team: row.team.clone(),
        pool: row.pool.clone(),
        gpus: row.gpus,
        priority: row.priority,
        submitted_at: row.created_at,
        max_runtime_s: row.max_runtime_s,
        run,
    }
}

struct ValidLaunch {
    template: Template,
    team: String,
    pool: String,
    gpus: u32,
    priority: Priority,
    params: Map<String, Value>,
    max_runtime_s: u64,
    name: Option<String>,
}

impl ValidLaunch {
    /// The workload this launch is, as the cluster gets it.
    fn workload(&self, job_id: String, submitted_at: DateTime<Utc>, run: RunSpec) -> WorkloadSpec {
        WorkloadSpec {
            job_id,
            team: self.team.clone(),
            pool: self.pool.clone(),
            gpus: self.gpus,
            priority: self.priority,
            submitted_at,
            max_runtime_s: self.max_runtime_s,
            run,
        }
    }
}

impl Portal {
    pub fn new(
        db: Db,
        cluster: Arc<dyn Cluster>,
        applied: watch::Receiver<u64>,
        live: broadcast::Sender<LiveChange>,
        dev_login: bool,
    ) -> Self {
        Portal {
            db,
            cluster,
            applied,
            live,
            dev_login,
            sso_provider: None,
            session_limits: crate::auth::SessionLimits {
                absolute: chrono::TimeDelta::hours(24),
                idle: chrono::TimeDelta::hours(12),
            },
            usage_tz: chrono_tz::Tz::UTC,
            metrics: None,
            kube: None,
            quota_edits: tokio::sync::Mutex::new(()),
        }
    }

    /// Sign-in settings: the provider's name for the sign-in page, the sessions' lifetime.
    pub fn with_auth(mut self, auth: &crate::config::AuthConfig) -> Self {
        self.sso_provider = auth.oidc.as_ref().map(|o| o.provider_name.clone());
        let minutes = |m: f64| chrono::TimeDelta::milliseconds((m * 60_000.0) as i64);
        self.session_limits = crate::auth::SessionLimits {
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

    /// The job's per-GPU utilization over its current or last run (at most the last two
    /// hours, a sample a minute), the mean utilization, memory and power, and the idle flag.
    /// Seen by whoever may see the job.
    pub async fn job_utilization(
        &self,
        viewer: &Viewer,
        id: &str,
    ) -> Result<JobUtilization, ApiError> {
        let row = self.visible_row(viewer, id).await?;
        let mut out = JobUtilization {
            job_id: row.id.clone(),
            available: false,
            message: None,
            from: None,
            to: None,
            step_s: 60,
            gpus: Vec::new(),
            mean: Vec::new(),
            idle: false,
        };
        let Some(metrics) = &self.metrics else {
            out.message = Some("no metrics back end is configured".into());
            return Ok(out);
        };
        let Some((start, end)) = self.db.last_interval(&row.id).await? else {
            out.message = Some("the job has not run yet".into());
            return Ok(out);
        };
        let now = self.cluster.now();
        let to = end.unwrap_or(now).min(now);
        // The last two hours of the run, a sample a minute, the newest one at `to` (now, for
        // a running job), so the heatmap shows the latest readings.
        let step = chrono::TimeDelta::seconds(out.step_s);
        let from = start.max(to - chrono::TimeDelta::hours(2));
        let from = to - step * ((to - from).num_seconds() / out.step_s) as i32;
        let job = crate::metrics::JobGpus {
            job_id: row.id.clone(),
            team: row.team.clone(),
            gpus: row.gpus,
            since: start,
        };
        let series = match metrics.series(&job, from, to, step).await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(job.id = %row.id, error = %e, "job utilization: metrics unavailable");
                out.message = Some(format!("{e} ({})", now.format("%H:%M UTC")));
                return Ok(out);
            }
        };
        let per_node = 8u32;
        out.gpus = series
            .gpus
            .iter()
            .enumerate()
            .map(|(i, track)| {
                // The back end's node name (DCGM's Hostname) when it has one, else the node
                // the cluster placed the job on, 8 GPUs each.
                let (node, gpu) = match &track.node {
                    Some(node) => (node.clone(), track.gpu),
                    None => {
                        let k = i as u32 / per_node;
                        let node = row
                            .node_names
                            .get(k as usize)
                            .cloned()
                            .unwrap_or_else(|| format!("node {}", k + 1));
                        (node, i as u32 % per_node)
                    }
                };
                GpuSeries {
                    node,
                    gpu,
                    util_pct: Vec::new(),
                }
            })
            .collect();
        let mut samples = Vec::new();
        // A time counts when every GPU has a reading at it.
        for (i, t) in series.times.iter().enumerate() {
            let at_t: Option<Vec<_>> = series.gpus.iter().map(|g| g.readings[i]).collect();
            let Some(at_t) = at_t.filter(|r| !r.is_empty()) else {
                continue;
            };
            for (s, r) in out.gpus.iter_mut().zip(&at_t) {
                s.util_pct.push(r.util_pct);
            }
            let n = at_t.len() as f64;
            out.mean.push(MeanSample {
                at: *t,
                util_pct: at_t.iter().map(|r| r.util_pct).sum::<f64>() / n,
                fb_used_gib: at_t.iter().map(|r| r.fb_used_mib).sum::<f64>() / n / 1024.0,
                power_w: at_t.iter().map(|r| r.power_w).sum::<f64>() / n,
            });
            samples.push((*t, at_t.iter().map(|r| r.util_pct).collect()));
        }
        if out.mean.is_empty() {
            out.message = Some("the metrics back end has no samples for this run".into());
        }
        out.available = !out.mean.is_empty();
        out.idle = end.is_none() && crate::metrics::is_idle(&samples, to);
        out.from = Some(from);
        out.to = Some(to);
        Ok(out)
    }

    pub fn usage_tz(&self) -> chrono_tz::Tz {
        self.usage_tz
    }

    /// A usage report over `[from, to)`. Leads see the teams they lead, admins every team;
    /// `team` narrows it to one.
    pub async fn usage(
        &self,
        viewer: &Viewer,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
        group_by: crate::usage::GroupBy,
        bucket: crate::usage::Bucket,
        team: Option<&str>,
    ) -> Result<Vec<crate::usage::UsageRow>, ApiError> {
        crate::input::single_line_opt("team", team)?;
        let teams = self.report_teams(viewer, team)?;
        Ok(crate::usage::from_database(
            &self.db,
            from,
            to,
            self.cluster.now(),
            group_by,
            bucket,
            self.usage_tz,
            teams.as_deref(),
        )
        .await?)
    }

    /// The teams a usage report covers: `team` if the viewer leads it (or is an admin);
    /// else every team for an admin (`None`), the teams they lead for a lead; else 403.
    fn report_teams(
        &self,
        viewer: &Viewer,
        team: Option<&str>,
    ) -> Result<Option<Vec<String>>, ApiError> {
        let led: Vec<String> = viewer
            .teams
            .iter()
            .filter(|m| m.role == Role::Lead)
            .map(|m| m.team.clone())
            .collect();
        Ok(match team {
            Some(t) if viewer.is_admin || led.iter().any(|l| l == t) => Some(vec![t.to_string()]),
            Some(t) => {
                return Err(ApiError::forbidden(format!(
                    "only a lead of team '{t}' or an admin sees its usage"
                ))
                .with_field("team"))
            }
            None if viewer.is_admin => None,
            None if !led.is_empty() => Some(led),
            None => {
                return Err(ApiError::forbidden(
                    "usage reports are for team leads and admins",
                ))
            }
        })
    }

    pub fn session_limits(&self) -> crate::auth::SessionLimits {
        self.session_limits
    }

    /// The user a personal API token stands for; 401 for an unknown, revoked or expired one.
    pub async fn viewer_by_token(&self, token: &str) -> Result<Viewer, ApiError> {
        let refused = || {
            ApiError::new(
                app::error::ErrorCode::Unauthorized,
                "this API token is not valid: it is unknown, revoked or expired",
            )
        };
        let row = self
            .db
            .token_by_hash(&crate::auth::token_hash(token))
            .await?
            .ok_or_else(refused)?;
        let now = Utc::now();
        if row.revoked_at.is_some() || row.expires_at.is_some_and(|e| e <= now) {
            return Err(refused());
        }
        // "Last used" to the minute: not a database write on every call.
        if row
            .last_used_at
            .is_none_or(|t| now - t > chrono::TimeDelta::minutes(1))
        {
            self.db.touch_token(&row.id, now).await?;
        }
        self.db.get_viewer(&row.user).await?.ok_or_else(refused)
    }

    /// On the Kubernetes back end: launches can show the object they submit.
    pub fn with_kube(mut self, settings: crate::config::KubeSettings) -> Self {
        self.kube = Some(settings);
        self
    }

    pub fn subscribe_live(&self) -> broadcast::Receiver<LiveChange> {
        self.live.subscribe()
    }

    pub fn publish(&self, change: LiveChange) {
        // No receivers is fine: nobody is watching.
        let _ = self.live.send(change);
    }

    /// Waits until every cluster event so far is in the database, so a response reflects
    /// what the cluster already did (an immediate admission, a freed slot).
    pub async fn sync(&self) {
        let target = self.cluster.last_seq();
        let mut rx = self.applied.clone();
        let _ =
            tokio::time::timeout(StdDuration::from_secs(2), rx.wait_for(|v| *v >= target)).await;
    }

    pub async fn viewer_by_id(&self, user: &str) -> Result<Option<Viewer>, ApiError> {
        crate::input::single_line("user", user)?;
        Ok(self.db.get_viewer(user).await?)
    }

    fn may_see(viewer: &Viewer, team: &str) -> bool {
        viewer.is_admin || viewer.is_member_of(team)
    }

    // ---- launch -------------------------------------------------------------------------

    async fn validate(
        &self,
        viewer: &Viewer,
        req: &LaunchRequest,
    ) -> Result<ValidLaunch, ApiError> {
        use crate::input::{json_single_line, single_line, single_line_opt};
        single_line("template", &req.template)?;
        single_line_opt("pool", req.pool.as_deref())?;
        single_line_opt("team", req.team.as_deref())?;
        single_line_opt("name", req.name.as_deref())?;
        for (key, value) in &req.params {
            let field = format!("params.{}", key.escape_debug());
            single_line(&field, key)?;
            json_single_line(&field, value)?;
        }
        let team = match &req.team {
            Some(t) if viewer.is_member_of(t) => t.clone(),
            Some(t) => {
                return Err(ApiError::forbidden(format!("you are not a member of team '{t}'")).with_field("team"))
            }
            None => viewer
                .primary_team()
                .ok_or_else(|| ApiError::invalid("team", "you are not a member of any team, so you cannot launch jobs yet; ask an admin to add you to one"))?
                .to_string(),
        };
        let templates = self.db.list_templates().await?;
        let template = templates
            .iter()
            .find(|t| t.name == req.template)
            .cloned()
            .ok_or_else(|| {
                let known: Vec<&str> = templates.iter().map(|t| t.name.as_str()).collect();
                ApiError::invalid(
                    "template",
                    format!(
                        "unknown template '{}'; known templates: {}",
                        req.template,
                        known.join(", ")
                    ),
                )
            })?;
        let pools = self.cluster.pools().await?;
        let pool_name = req
            .pool
            .clone()
            .unwrap_or_else(|| template.default_pool.clone());
        let pool = pools.iter().find(|p| p.name == pool_name).ok_or_else(|| {
            let known: Vec<&str> = pools.iter().map(|p| p.name.as_str()).collect();
            ApiError::invalid(
                "pool",
                format!("unknown pool '{pool_name}'; pools: {}", known.join(", ")),
            )
        })?;
        let gpus = req.gpus;
        if gpus == 0
            || (gpus <= GPUS_PER_NODE && !gpus.is_power_of_two())
            || (gpus > GPUS_PER_NODE && !gpus.is_multiple_of(GPUS_PER_NODE))
        {
            return Err(ApiError::invalid("gpus", format!("{gpus} GPUs is not a gang size: use 1, 2, 4 or 8 on one node, or a multiple of 8 for whole nodes")));
        }
        if !template.allowed_gpus.contains(&gpus) {
            let allowed: Vec<String> = template
                .allowed_gpus
                .iter()
                .map(|g| g.to_string())
                .collect();
            return Err(ApiError::invalid(
                "gpus",
                format!(
                    "template {} runs on {} GPUs, not {gpus}",
                    template.name,
                    allowed.join(", ")
                ),
            ));
        }
        if gpus > pool.gpus_total {
            return Err(ApiError::invalid(
                "gpus",
                format!(
                    "{} has {} GPUs in all: a {gpus}-GPU gang could never be admitted",
                    pool.name, pool.gpus_total
                ),
            ));
        }
        let mut params = Map::new();
        for (key, _) in req.params.iter() {
            if !template.params.iter().any(|p| &p.name == key) {
                let known: Vec<&str> = template.params.iter().map(|p| p.name.as_str()).collect();
                return Err(ApiError::invalid(
                    format!("params.{key}"),
                    format!(
                        "unknown parameter '{key}'; {} takes: {}",
                        template.name,
                        known.join(", ")
                    ),
                ));
            }
        }
        for spec in &template.params {
            let value = match req.params.get(&spec.name) {
                Some(v) => spec.check(v).map_err(|m| {
                    ApiError::invalid(
                        format!("params.{}", spec.name),
                        format!("{} {m}", spec.name),
                    )
                })?,
                None => spec.default.clone(),
            };
            params.insert(spec.name.clone(), value);
        }
        let max_runtime_s = req.max_runtime_s.unwrap_or(template.default_max_runtime_s);
        if !(MIN_RUNTIME_S..=MAX_RUNTIME_LIMIT_S).contains(&max_runtime_s) {
            return Err(ApiError::invalid("max_runtime_s", format!("must be between {MIN_RUNTIME_S} s (1 minute) and {MAX_RUNTIME_LIMIT_S} s (14 days), got {max_runtime_s}")));
        }
        let name = match req.name.as_deref().map(str::trim) {
            None | Some("") => None,
            Some(n) if n.chars().count() > 100 => {
                return Err(ApiError::invalid("name", "must be at most 100 characters"))
            }
            Some(n) if n.chars().any(char::is_control) => {
                return Err(ApiError::invalid(
                    "name",
                    "must not contain control characters",
                ))
            }
            Some(n) => Some(n.to_string()),
        };
        Ok(ValidLaunch {
            template,
            team,
            pool: pool.name.clone(),
            gpus,
            priority: req.priority.unwrap_or_default(),
            params,
            max_runtime_s,
            name,
        })
    }

    #[tracing::instrument(skip(self, viewer, req, key), fields(user = %viewer.user, template = %req.template, gpus = req.gpus))]
    pub async fn launch(
        &self,
        viewer: &Viewer,
        req: LaunchRequest,
        key: Option<String>,
    ) -> Result<(Job, bool), ApiError> {
        let body = serde_json::to_string(&req).map_err(internal)?;
        if let Some(key) = key.as_deref() {
            crate::input::single_line("Idempotency-Key", key)?;
            if key.is_empty() || key.len() > 200 {
                return Err(ApiError::invalid(
                    "Idempotency-Key",
                    "must be 1 to 200 characters",
                ));
            }
            if let Some(existing) = self.db.find_by_idempotency_key(&viewer.user, key).await? {
                return self.repeat(viewer, existing, &body).await;
            }
        }
        let v = self.validate(viewer, &req).await?;
        self.admissibility(&v).await?;
        let now = self.cluster.now();
        let id = uuid::Uuid::now_v7().to_string();
        let name = v
            .name
            .clone()
            .unwrap_or_else(|| format!("{}-{}", v.template.name, &id[id.len() - 6..]));
        let new = NewJob {
            id: &id,
            name: &name,
            template: &v.template.name,
            template_version: v.template.version,
            team: &v.team,
            user: &viewer.user,
            pool: &v.pool,
            gpus: v.gpus,
            priority: v.priority,
            params: &v.params,
            max_runtime_s: v.max_runtime_s,
            idempotency_key: key.as_deref(),
            request_body: &body,
            created_at: now,
        };
        let reason = format!(
            "Launched by {} ({} v{})",
            viewer.user, v.template.name, v.template.version
        );
        match self.db.insert_job(&new, &reason).await {
            Ok(()) => {}
            Err(DbError::Conflict) if key.is_some() => {
                // A concurrent request with the same key won the race: answer as a repeat.
                let existing = self
                    .db
                    .find_by_idempotency_key(&viewer.user, key.as_deref().unwrap_or_default())
                    .await?;
                return match existing {
                    Some(e) => self.repeat(viewer, e, &body).await,
                    None => Err(ApiError::conflict(
                        "a launch with this Idempotency-Key is in progress",
                    )),
                };
            }
            Err(e) => return Err(e.into()),
        }
        tracing::info!(job.id = %id, team = %v.team, pool = %v.pool, "job stored");
        // Stored first; now the cluster. If it is unreachable the job stays queued and the
        // reconciler sends it later.
        let spec = v.workload(
            id.clone(),
            now,
            run_spec(&v.template, &name, &viewer.user, &v.params),
        );
        match self.cluster.submit(spec).await {
            Ok(()) => self.db.mark_sent(&id, self.cluster.now()).await?,
            Err(e) => {
                tracing::warn!(job.id = %id, error = %e, "cluster did not take the job yet; it will be retried")
            }
        }
        self.publish(LiveChange {
            job_id: id.clone(),
            team: v.team,
            pool: v.pool,
            state: JobState::Queued,
            at: now,
        });
        self.sync().await;
        let job = self.job_for(viewer, &id).await?;
        Ok((job, true))
    }

    async fn repeat(
        &self,
        viewer: &Viewer,
        existing: JobRow,
        body: &str,
    ) -> Result<(Job, bool), ApiError> {
        if existing.request_body.as_deref() != Some(body) {
            return Err(ApiError::invalid(
                "Idempotency-Key",
                "this key was already used for a different launch; use a new key for a new launch",
            ));
        }
        Ok((self.job_for(viewer, &existing.id).await?, false))
    }

    /// What the cluster would do with this launch now. A gang larger than the team may hold
    /// under the current quotas (`never`) is accepted and waits, as Kueue keeps it pending:
    /// quotas change and cohorts grow. (One larger than the pool is refused in `validate`.)
    async fn admissibility(
        &self,
        v: &ValidLaunch,
    ) -> Result<crate::cluster::Admissibility, ApiError> {
        let spec = v.workload(String::new(), self.cluster.now(), RunSpec::default());
        Ok(self.cluster.check(&spec).await?)
    }

    pub async fn check(
        &self,
        viewer: &Viewer,
        req: LaunchRequest,
    ) -> Result<LaunchCheck, ApiError> {
        let v = self.validate(viewer, &req).await?;
        let a = self.admissibility(&v).await?;
        Ok(LaunchCheck {
            fits_now: a.fits_now,
            jobs_ahead: a.ahead,
            reason: a.reason,
            eta: a.eta,
            now: self.cluster.now(),
            cannot_start: a.never,
        })
    }

    /// Every team's quota in every pool with live use and queued demand (admins only).
    pub async fn quota_cells(&self, viewer: &Viewer) -> Result<Vec<QuotaCell>, ApiError> {
        if !viewer.is_admin {
            return Err(ApiError::forbidden("only admins see every team's quotas"));
        }
        let ctx = self.quota_context().await?;
        let mut cells = Vec::new();
        for q in &ctx.quotas {
            if let Some(cell) = self.quota_cell(&q.team, &q.pool, &ctx).await? {
                cells.push(cell);
            }
        }
        Ok(cells)
    }

    /// What every quota cell is figured from, read once.
    async fn quota_context(&self) -> Result<QuotaContext, ApiError> {
        let pools = self.db.list_pools().await?;
        let mut queues = HashMap::new();
        for p in &pools {
            // A cluster that does not answer costs the queued figure, not the page.
            if let Ok(q) = self.cluster.pending(&p.name).await {
                queues.insert(p.name.clone(), q);
            }
        }
        Ok(QuotaContext {
            pools,
            status: self.cluster.pools().await?,
            quotas: self.db.list_quotas().await?,
            queues,
        })
    }

    async fn quota_cell(
        &self,
        team: &str,
        pool: &str,
        ctx: &QuotaContext,
    ) -> Result<Option<QuotaCell>, ApiError> {
        let Some((spec, version)) = self.db.quota(team, pool).await? else {
            return Ok(None);
        };
        let Some(p) = ctx.pools.iter().find(|p| p.name == pool) else {
            return Ok(None);
        };
        let pool_status = ctx.status.iter().find(|s| s.name == pool);
        let live = pool_status.and_then(|s| s.teams.iter().find(|t| t.team == team));
        let lent_gpus = pool_status.map_or(0, |s| {
            let idle = |t: &crate::cluster::TeamUse| t.quota.nominal.saturating_sub(t.used);
            let borrowed: u32 = s.teams.iter().map(|t| t.borrowed).sum();
            let idle_all: u32 = s.teams.iter().map(idle).sum();
            match live {
                Some(me) if borrowed > 0 && idle_all > 0 => {
                    ((borrowed as f64 * idle(me) as f64 / idle_all as f64).round() as u32)
                        .min(idle(me))
                }
                _ => 0,
            }
        });
        let nominal_sum = ctx
            .quotas
            .iter()
            .filter(|q| q.pool == pool)
            .map(|q| q.quota.nominal)
            .sum();
        let queued_gpus = ctx.queues.get(pool).map_or(0, |q| {
            q.iter().filter(|w| w.team == team).map(|w| w.gpus).sum()
        });
        Ok(Some(QuotaCell {
            team: team.to_string(),
            pool: pool.to_string(),
            nominal_gpus: spec.nominal,
            borrowing_limit_gpus: spec.borrowing_limit,
            lending_limit_gpus: spec.lending_limit,
            queueing_strategy: spec
                .strategy
                .or(live.and_then(|t| t.quota.strategy))
                .unwrap_or_else(|| {
                    crate::cluster::QueueingStrategy::parse(&p.strategy).unwrap_or_default()
                })
                .as_str()
                .to_string(),
            version,
            used_gpus: live.map_or(0, |t| t.used),
            borrowed_gpus: live.map_or(0, |t| t.borrowed),
            lent_gpus,
            queued_gpus,
            pool_gpus: p.nodes * app::model::GPUS_PER_NODE,
            pool_nominal_sum: nominal_sum,
        }))
    }

    /// One quota (admins only); 404 for an unknown team × pool.
    pub async fn quota_for(
        &self,
        viewer: &Viewer,
        team: &str,
        pool: &str,
    ) -> Result<QuotaCell, ApiError> {
        if !viewer.is_admin {
            return Err(ApiError::forbidden("only admins see every team's quotas"));
        }
        crate::input::single_line("team", team)?;
        crate::input::single_line("pool", pool)?;
        let ctx = self.quota_context().await?;
        self.quota_cell(team, pool, &ctx)
            .await?
            .ok_or_else(|| ApiError::not_found(format!("team {team} has no quota in {pool}")))
    }

    /// Sets a team's quota in a pool (admins only), if it is still at `if_match` (`None`:
    /// unconditionally). The version is checked and the change written in a database
    /// transaction, then applied to the cluster (on Kubernetes the ClusterQueue, never forcing
    /// fields others own), then committed; edits are one at a time.
    pub async fn set_quota(
        &self,
        viewer: &Viewer,
        team: &str,
        pool: &str,
        quota: QuotaEdit,
        if_match: Option<i64>,
        address: Option<String>,
    ) -> Result<QuotaCell, ApiError> {
        if !viewer.is_admin {
            return Err(ApiError::forbidden("only admins change quotas"));
        }
        crate::input::single_line("team", team)?;
        crate::input::single_line("pool", pool)?;
        let pools = self.db.list_pools().await?;
        let Some(p) = pools.iter().find(|p| p.name == pool) else {
            return Err(ApiError::not_found(format!(
                "there is no pool named '{pool}'"
            )));
        };
        let capacity = p.nodes * app::model::GPUS_PER_NODE;
        let _one_at_a_time = self.quota_edits.lock().await;
        let Some((before, version)) = self.db.quota(team, pool).await? else {
            return Err(ApiError::not_found(format!(
                "team {team} has no quota in {pool}"
            )));
        };
        if if_match.is_some_and(|v| v != version) {
            return Err(ApiError::conflict(format!(
                "this quota was changed by someone else since you loaded it (now version {version}); reload it and apply your change again"
            )));
        }
        // Fields the edit leaves out keep their stored values.
        let quota = quota.apply(&before);
        check_quota(pool, capacity, &quota)?;
        let now = self.cluster.now();
        // The audit log records when people acted: real time, not the (sim) cluster clock.
        let mut audit = crate::db::AuditEntry::new(
            &viewer.user,
            "quota.set",
            &format!("{team}/{pool}"),
            Utc::now(),
        );
        let shape = |q: &crate::cluster::QuotaSpec| {
            serde_json::json!({
                "nominal_gpus": q.nominal,
                "borrowing_limit_gpus": q.borrowing_limit,
                "lending_limit_gpus": q.lending_limit,
                "queueing_strategy": q.strategy.map(|s| s.as_str()),
            })
        };
        audit.before = Some(shape(&before));
        audit.after = Some(shape(&quota));
        audit.address = address;
        let row = crate::db::QuotaRow {
            team: team.to_string(),
            pool: pool.to_string(),
            quota,
        };
        // The version is checked and the change written in the database first, the cluster
        // changed next, the write committed last: a cluster that refuses leaves nothing
        // stored, and a commit that fails puts the cluster back.
        let Some(write) = self.db.begin_quota_update(&row, version, &audit).await? else {
            return Err(ApiError::conflict(
                "this quota was changed by someone else at the same moment; reload it and apply your change again",
            ));
        };
        if let Err(e) = self.cluster.set_quota(team, pool, quota).await {
            if let Err(db) = write.rollback().await {
                tracing::warn!(team, pool, error = %db, "could not roll back a quota write the cluster refused");
            }
            return Err(e.into());
        }
        if let Err(e) = write.commit().await {
            tracing::error!(team, pool, error = %e, "could not store a quota the cluster accepted; putting the cluster back");
            if let Err(back) = self.cluster.set_quota(team, pool, before).await {
                tracing::error!(team, pool, error = %back, nominal = before.nominal, borrowing_limit = ?before.borrowing_limit, "could not put the cluster's quota back: the cluster and the database disagree");
            }
            return Err(e.into());
        }
        tracing::info!(team, pool, by = %viewer.user, nominal = quota.nominal, borrowing_limit = ?quota.borrowing_limit, lending_limit = ?quota.lending_limit, strategy = ?quota.strategy, "quota set");
        // What the new quota admitted at once is in the database before the answer (the
        // test saw a race here: the job still queued for a moment after Save).
        self.sync().await;
        self.publish(LiveChange {
            job_id: String::new(),
            team: team.to_string(),
            pool: pool.to_string(),
            state: JobState::Queued,
            at: now,
        });
        self.quota_for(viewer, team, pool).await
    }

    /// What-if: the last `days` of real launches replayed under the current quotas and under
    /// the current ones with `changes` applied (admins only).
    pub async fn preview_quotas(
        &self,
        viewer: &Viewer,
        changes: Vec<(String, String, QuotaEdit)>,
        days: i64,
    ) -> Result<QuotaPreview, ApiError> {
        if !viewer.is_admin {
            return Err(ApiError::forbidden("only admins preview quota changes"));
        }
        for (team, pool, _) in &changes {
            crate::input::single_line("team", team)?;
            crate::input::single_line("pool", pool)?;
        }
        let started = std::time::Instant::now();
        let rows = self.db.list_pools().await?;
        let capacity_of = |pool: &str| {
            rows.iter()
                .find(|p| p.name == pool)
                .map(|p| p.nodes * app::model::GPUS_PER_NODE)
        };
        let current: Vec<(String, String, crate::cluster::QuotaSpec)> = self
            .db
            .list_quotas()
            .await?
            .into_iter()
            .map(|q| (q.team, q.pool, q.quota))
            .collect();
        let mut draft = current.clone();
        for (team, pool, q) in changes {
            match draft.iter_mut().find(|(t, p, _)| *t == team && *p == pool) {
                Some(slot) => {
                    let quota = q.apply(&slot.2);
                    let capacity = capacity_of(&pool).unwrap_or(0);
                    check_quota(&pool, capacity, &quota)?;
                    slot.2 = quota;
                }
                None => {
                    return Err(ApiError::invalid(
                        "changes",
                        format!("team {team} has no quota in {pool} to change"),
                    ))
                }
            }
        }
        let pools = crate::cluster::PoolSpec::from_rows(rows, &[]);
        let to = self.cluster.now();
        let from = to - chrono::Duration::days(days);
        let trace: Vec<crate::whatif::TraceJob> = self
            .db
            .launches_since(from)
            .await?
            .into_iter()
            .map(
                |(team, pool, gpus, priority, submitted_at, admitted, finished)| {
                    crate::whatif::TraceJob {
                        team,
                        pool,
                        gpus,
                        priority,
                        submitted_at,
                        runtime_s: (finished.unwrap_or(to) - admitted).num_seconds().max(1) as u64,
                    }
                },
            )
            .collect();
        let (now_out, draft_out) = tokio::task::spawn_blocking(move || {
            (
                crate::whatif::replay(&pools, &current, &trace),
                crate::whatif::replay(&pools, &draft, &trace),
            )
        })
        .await
        .map_err(internal)?;
        Ok(QuotaPreview {
            from,
            to,
            chart_svg: crate::whatif::wait_chart(&now_out, &draft_out),
            launches: now_out.iter().map(|o| o.jobs).sum(),
            current: now_out,
            draft: draft_out,
            elapsed_ms: started.elapsed().as_millis() as u64,
        })
    }

    /// Creates a template (version 1) from its definition (admins only).
    pub async fn create_template(
        &self,
        viewer: &Viewer,
        text: &str,
        address: Option<String>,
    ) -> Result<Template, ApiError> {
        let t = self.parse_template(viewer, text).await?;
        if self.db.template_state(&t.name).await?.is_some() {
            return Err(ApiError::conflict(format!(
                "template '{}' exists; add a version with POST /api/v1/templates/{}/versions",
                t.name, t.name
            )));
        }
        self.db.insert_template(&t, Utc::now()).await?;
        self.audit_change(viewer, "template.create", &t.name, None, Some(&t), address)
            .await?;
        Ok(t)
    }

    /// A new, immutable version of a template (admins only); jobs keep the version they ran.
    pub async fn add_template_version(
        &self,
        viewer: &Viewer,
        name: &str,
        text: &str,
        address: Option<String>,
    ) -> Result<Template, ApiError> {
        crate::input::single_line("name", name)?;
        let mut t = self.parse_template(viewer, text).await?;
        let Some((newest, deprecated)) = self.db.template_state(name).await? else {
            return Err(ApiError::not_found(format!(
                "there is no template '{name}'"
            )));
        };
        if t.name != name {
            return Err(ApiError::invalid(
                "template",
                format!("line 1: name: must be '{name}', the template in the address"),
            ));
        }
        if deprecated {
            return Err(ApiError::conflict(format!(
                "template '{name}' is deprecated"
            )));
        }
        let before = self.db.template_version(name, newest).await?;
        t.version = newest + 1;
        self.db.insert_template(&t, Utc::now()).await?;
        self.audit_change(
            viewer,
            "template.version",
            name,
            before.as_ref(),
            Some(&t),
            address,
        )
        .await?;
        Ok(t)
    }

    /// Hides a template from Launch (admins only); old jobs still show it.
    pub async fn deprecate_template(
        &self,
        viewer: &Viewer,
        name: &str,
        address: Option<String>,
    ) -> Result<(), ApiError> {
        if !viewer.is_admin {
            return Err(ApiError::forbidden("only admins manage templates"));
        }
        crate::input::single_line("name", name)?;
        let Some((newest, _)) = self.db.template_state(name).await? else {
            return Err(ApiError::not_found(format!(
                "there is no template '{name}'"
            )));
        };
        if !self.db.deprecate_template(name).await? {
            return Err(ApiError::conflict(format!(
                "template '{name}' is already deprecated"
            )));
        }
        let before = self.db.template_version(name, newest).await?;
        let mut entry =
            crate::db::AuditEntry::new(&viewer.user, "template.deprecate", name, Utc::now());
        entry.before =
            before.map(|t| serde_json::json!({"version": t.version, "deprecated": false}));
        entry.after = Some(serde_json::json!({"deprecated": true}));
        entry.address = address;
        self.audit(entry).await
    }

    async fn parse_template(&self, viewer: &Viewer, text: &str) -> Result<Template, ApiError> {
        if !viewer.is_admin {
            return Err(ApiError::forbidden("only admins manage templates"));
        }
        let pools: Vec<(String, u32)> = self
            .db
            .list_pools()
            .await?
            .into_iter()
            .map(|p| (p.name, p.nodes * GPUS_PER_NODE))
            .collect();
        // Tab and newline belong to YAML; other control characters, written as they are or
        // as escapes (`"\0"`), are refused in every value, and newlines only in free text.
        crate::input::multi_line("template", text)?;
        let t = crate::template_def::parse(text, &pools)
            .map_err(|why| ApiError::invalid("template", why))?;
        let fields = serde_json::to_value(&t).map_err(internal)?;
        crate::input::json_text("", &fields, &["description", "help"]).map_err(|e| {
            let at = e.field.unwrap_or_default();
            ApiError::invalid(
                "template",
                format!("{}: {}", at.trim_start_matches('.'), e.message),
            )
        })?;
        Ok(t)
    }

    async fn audit_change(
        &self,
        viewer: &Viewer,
        action: &str,
        target: &str,
        before: Option<&Template>,
        after: Option<&Template>,
        address: Option<String>,
    ) -> Result<(), ApiError> {
        let mut entry = crate::db::AuditEntry::new(&viewer.user, action, target, Utc::now());
        let shape = |t: &Template| {
            let mut v = serde_json::to_value(t).unwrap_or_default();
            if let Some(m) = v.as_object_mut() {
                m.remove("last_used_by_team");
            }
            v
        };
        entry.before = before.map(shape);
        entry.after = after.map(shape);
        entry.address = address;
        self.audit(entry).await
    }

    /// Appends to the audit log (sign-ins of admins, admin actions).
    pub async fn audit(&self, entry: crate::db::AuditEntry) -> Result<(), ApiError> {
        Ok(self.db.append_audit(&entry).await?)
    }

    /// The audit log, newest first (admins only).
    pub async fn audit_log(
        &self,
        viewer: &Viewer,
        filter: crate::db::AuditFilter,
    ) -> Result<Vec<crate::db::AuditEntry>, ApiError> {
        if !viewer.is_admin {
            return Err(ApiError::forbidden("only admins read the audit log"));
        }
        crate::input::single_line_opt("actor", filter.actor.as_deref())?;
        crate::input::single_line_opt("action", filter.action.as_deref())?;
        crate::input::single_line_opt("target", filter.target.as_deref())?;
        Ok(self.db.audit(&filter).await?)
    }

    /// The JobSet or TrainJob this launch would submit (Kubernetes back end only). The job id
    /// and name are placeholders until the launch.
    pub async fn manifest(
        &self,
        viewer: &Viewer,
        req: LaunchRequest,
    ) -> Result<Option<String>, ApiError> {
        let Some(settings) = &self.kube else {
            return Ok(None);
        };
        let v = self.validate(viewer, &req).await?;
        let id = uuid::Uuid::nil().to_string();
        let name = v
            .name
            .clone()
            .unwrap_or_else(|| format!("{}-<id>", v.template.name));
        let w = v.workload(
            id,
            self.cluster.now(),
            run_spec(&v.template, &name, &viewer.user, &v.params),
        );
        let obj = crate::cluster::k8s::objects::job_object(settings, &w);
        Ok(Some(format!(
            "# What Launch submits (the job id, all zeros here, is assigned at launch)\n{}",
            crate::cluster::k8s::objects::to_yaml(&[obj])
        )))
    }

    // ---- reading jobs -------------------------------------------------------------------

    /// The queue of every pool these rows wait in, in order (Kueue's visibility API).
    async fn queues_for(
        &self,
        rows: &[JobRow],
    ) -> Result<HashMap<String, std::sync::Arc<Vec<PendingWorkload>>>, ApiError> {
        let mut pools: Vec<&str> = rows
            .iter()
            .filter(|r| r.state == JobState::Queued)
            .map(|r| r.pool.as_str())
            .collect();
        pools.sort();
        pools.dedup();
        let mut out = HashMap::new();
        for pool in pools {
            // A cluster that does not answer costs the positions, not the page.
            match self.cluster.pending(pool).await {
                Ok(q) => {
                    out.insert(pool.to_string(), q);
                }
                Err(e) => tracing::warn!(pool, error = %e, "no queue positions from the cluster"),
            }
        }
        Ok(out)
    }

    /// The jobs ahead of `position` in a pool's queue, as `viewer` may see them.
    async fn ahead_of(
        &self,
        viewer: &Viewer,
        queue: &[PendingWorkload],
        position: u32,
    ) -> Result<Vec<AheadJob>, ApiError> {
        let ahead = &queue[..(position.saturating_sub(1) as usize).min(queue.len())];
        let own: Vec<&str> = ahead
            .iter()
            .filter(|p| Self::may_see(viewer, &p.team))
            .map(|p| p.job_id.as_str())
            .collect();
        let names = if own.is_empty() {
            HashMap::new()
        } else {
            self.db.job_names(&own).await?
        };
        Ok(ahead
            .iter()
            .take(MAX_AHEAD)
            .map(|p| {
                let named = names.get(&p.job_id);
                AheadJob {
                    position: p.position_in_pool,
                    team: p.team.clone(),
                    gpus: p.gpus,
                    priority: p.priority,
                    submitted_at: p.submitted_at,
                    id: named.map(|_| p.job_id.clone()),
                    name: named.map(|(n, _)| n.clone()),
                    user: named.map(|(_, u)| u.clone()),
                }
            })
            .collect())
    }

    async fn to_jobs(
        &self,
        viewer: &Viewer,
        rows: Vec<JobRow>,
        with_ahead: bool,
    ) -> Result<Vec<Job>, ApiError> {
        let queues = self.queues_for(&rows).await?;
        let ids: Vec<&str> = rows.iter().map(|r| r.id.as_str()).collect();
        let mut events = self.db.events_for(&ids).await?;
        let mut jobs = Vec::with_capacity(rows.len());
        for r in rows {
            let queue = queues.get(&r.pool);
            let p = queue.and_then(|q| q.iter().find(|p| p.job_id == r.id));
            let ahead = match (with_ahead, queue, p) {
                (true, Some(q), Some(p)) => self.ahead_of(viewer, q, p.position_in_pool).await?,
                _ => Vec::new(),
            };
            let can_cancel = r.state.is_active()
                && (r.user == viewer.user || viewer.is_lead_of(&r.team) || viewer.is_admin);
            let events = events.remove(&r.id).unwrap_or_default();
            let preemptions = events
                .iter()
                .filter(|e| e.kind == "preempted")
                .map(|e| Preemption {
                    at: e.at,
                    reason: e.reason.clone(),
                })
                .collect();
            jobs.push(Job {
                events,
                preemptions,
                ahead,
                queue_position: p.map(|p| p.position_in_pool),
                queue_position_in_team: p.map(|p| p.position_in_team),
                eta: p.and_then(|p| p.eta),
                pending_reason: match (r.state, p) {
                    (JobState::Queued, Some(p)) => Some(p.reason.clone()),
                    (JobState::Queued, None) if r.sent_at.is_none() => Some(
                        "Stored, not yet sent: the cluster is unreachable; Gantry retries every 10 s"
                            .to_string(),
                    ),
                    (JobState::Queued, None) => Some(
                        "Sent to the cluster; waiting for Kueue to list it in the queue"
                            .to_string(),
                    ),
                    _ => None,
                },
                nodes: nodes_for(r.gpus),
                id: r.id,
                name: r.name,
                template: r.template,
                template_version: r.template_version,
                team: r.team,
                user: r.user,
                pool: r.pool,
                gpus: r.gpus,
                priority: r.priority,
                state: r.state,
                created_at: r.created_at,
                admitted_at: r.admitted_at,
                finished_at: r.finished_at,
                params: r.params,
                max_runtime_s: r.max_runtime_s,
                node_names: if r.state.holds_gpus() {
                    r.node_names
                } else {
                    Vec::new()
                },
                can_cancel,
            });
        }
        Ok(jobs)
    }

    /// A job the viewer may see; another team's job is "not found", not "forbidden".
    async fn visible_row(&self, viewer: &Viewer, id: &str) -> Result<JobRow, ApiError> {
        crate::input::single_line("id", id)?;
        let not_found = || ApiError::not_found(format!("no job with id '{id}'"));
        let row = match self.db.get_job(id).await {
            Ok(r) => r,
            Err(DbError::NotFound) => return Err(not_found()),
            Err(e) => return Err(e.into()),
        };
        if !Self::may_see(viewer, &row.team) {
            return Err(not_found());
        }
        Ok(row)
    }

    pub async fn job_for(&self, viewer: &Viewer, id: &str) -> Result<Job, ApiError> {
        let row = self.visible_row(viewer, id).await?;
        Ok(self.to_jobs(viewer, vec![row], true).await?.remove(0))
    }

    pub async fn jobs(&self, viewer: &Viewer, filter: JobFilter) -> Result<Vec<Job>, ApiError> {
        crate::input::single_line_opt("team", filter.team.as_deref())?;
        let teams = match &filter.team {
            Some(t) if Self::may_see(viewer, t) => Some(vec![t.clone()]),
            Some(t) => {
                return Err(ApiError::forbidden(format!(
                    "you can list only your own team's jobs, not team '{t}'"
                ))
                .with_field("team"))
            }
            None if viewer.is_admin => None,
            None => Some(viewer.teams.iter().map(|m| m.team.clone()).collect()),
        };
        let rows = self
            .db
            .list_jobs(&JobQuery {
                teams,
                user: filter.mine.then(|| viewer.user.clone()),
                state: filter.state,
                limit: 500,
            })
            .await?;
        self.to_jobs(viewer, rows, false).await
    }

    #[tracing::instrument(skip(self, viewer), fields(user = %viewer.user))]
    pub async fn cancel(&self, viewer: &Viewer, id: &str) -> Result<Job, ApiError> {
        let row = self.visible_row(viewer, id).await?;
        if !(row.user == viewer.user || viewer.is_lead_of(&row.team) || viewer.is_admin) {
            return Err(ApiError::forbidden(format!(
                "only {} (who launched it), a lead of team {} or an admin can cancel this job",
                row.user, row.team
            )));
        }
        if !row.state.is_active() {
            return Err(ApiError::conflict(format!(
                "the job has already {}; only queued, admitted or running jobs can be cancelled",
                row.state
            )));
        }
        // The database first, with who cancelled; then the cluster. Should the cluster not
        // answer, the reconciler deletes workloads of cancelled jobs when it can.
        let at = self.cluster.now();
        let reason = format!("Cancelled by {}", viewer.user);
        let by_admin = viewer.is_admin && row.user != viewer.user && !viewer.is_lead_of(&row.team);
        let applied = self
            .db
            .transition(&Transition {
                job_id: id,
                from: &[JobState::Queued, JobState::Admitted, JobState::Running],
                to: JobState::Cancelled,
                at,
                reason: &reason,
                node_names: None,
                kind: None,
            })
            .await?;
        if applied {
            if by_admin {
                // An admin acting on another team's job is an admin action: audited.
                let mut entry =
                    crate::db::AuditEntry::new(&viewer.user, "job.cancel", id, Utc::now());
                entry.before = Some(
                    serde_json::json!({"state": row.state.as_str(), "team": row.team, "user": row.user}),
                );
                entry.after = Some(serde_json::json!({"state": "cancelled"}));
                entry.address = crate::request_id::current_client_addr();
                self.audit(entry).await?;
            }
            self.publish(LiveChange {
                job_id: id.to_string(),
                team: row.team.clone(),
                pool: row.pool.clone(),
                state: JobState::Cancelled,
                at,
            });
        }
        if let Err(e) = self.cluster.cancel(id).await {
            tracing::warn!(job.id = %id, error = %e, "cluster did not delete the job yet; it will be retried");
        }
        self.sync().await;
        self.job_for(viewer, id).await
    }

    // ---- pools and the home page --------------------------------------------------------

    pub async fn pools(&self) -> Result<Vec<Pool>, ApiError> {
        Ok(self
            .cluster
            .pools()
            .await?
            .into_iter()
            .map(|p| Pool {
                teams: p
                    .teams
                    .iter()
                    .map(|t| QuotaUse {
                        team: t.team.clone(),
                        pool: p.name.clone(),
                        nominal_gpus: t.quota.nominal,
                        borrowing_limit_gpus: t.quota.borrowing_limit,
                        used_gpus: t.used,
                        borrowed_gpus: t.borrowed,
                    })
                    .collect(),
                gpus_free: p.gpus_total - p.gpus_allocated,
                name: p.name,
                gpu_model: p.gpu_model,
                nodes: p.nodes,
                gpus_per_node: GPUS_PER_NODE,
                gpus_total: p.gpus_total,
                gpus_allocated: p.gpus_allocated,
                free_nodes: p.free_nodes,
                queued_jobs: p.pending,
            })
            .collect())
    }

    pub async fn quota_use(&self, viewer: &Viewer) -> Result<Vec<QuotaUse>, ApiError> {
        Ok(self
            .pools()
            .await?
            .into_iter()
            .flat_map(|p| p.teams)
            .filter(|q| viewer.is_member_of(&q.team))
            .collect())
    }

    pub async fn templates(&self, viewer: &Viewer) -> Result<Vec<Template>, ApiError> {
        let mut list = self.db.list_templates().await?;
        if let Some(team) = viewer.primary_team() {
            let used = self.db.last_used_by_team(team).await?;
            for t in &mut list {
                t.last_used_by_team = used.get(&t.name).copied();
            }
        }
        Ok(list)
    }
}

#[async_trait::async_trait]
impl Backend for Portal {
    async fn viewer(&self, parts: &http::request::Parts) -> Result<Option<Viewer>, ApiError> {
        let Some(session) = parts.extensions.get::<tower_sessions::Session>() else {
            return Ok(None);
        };
        match crate::auth::session_user(session, self.session_limits).await? {
            Some(user) => self.viewer_by_id(&user).await,
            None => Ok(None),
        }
    }

    async fn home(&self, viewer: &Viewer) -> Result<HomeView, ApiError> {
        let mine = self
            .jobs(
                viewer,
                JobFilter {
                    mine: true,
                    ..Default::default()
                },
            )
            .await?;
        Ok(HomeView {
            viewer: viewer.clone(),
            active_jobs: mine.into_iter().filter(|j| j.state.is_active()).collect(),
            quotas: self.quota_use(viewer).await?,
            pools: self.pools().await?,
            now: self.cluster.now(),
        })
    }

    async fn list_templates(&self, viewer: &Viewer) -> Result<Vec<Template>, ApiError> {
        self.templates(viewer).await
    }

    async fn list_pools(&self, _viewer: &Viewer) -> Result<Vec<Pool>, ApiError> {
        self.pools().await
    }

    async fn check_launch(
        &self,
        viewer: &Viewer,
        req: LaunchRequest,
    ) -> Result<LaunchCheck, ApiError> {
        self.check(viewer, req).await
    }

    async fn quota_cells(&self, viewer: &Viewer) -> Result<Vec<QuotaCell>, ApiError> {
        Portal::quota_cells(self, viewer).await
    }

    async fn save_quota(
        &self,
        viewer: &Viewer,
        team: String,
        pool: String,
        draft: app::model::QuotaDraft,
        version: i64,
    ) -> Result<QuotaCell, ApiError> {
        let q = QuotaEdit::from_draft(&draft)?;
        let address = crate::request_id::current_client_addr();
        self.set_quota(viewer, &team, &pool, q, Some(version), address)
            .await
    }

    async fn preview_quota(
        &self,
        viewer: &Viewer,
        team: String,
        pool: String,
        draft: app::model::QuotaDraft,
    ) -> Result<QuotaPreview, ApiError> {
        let q = QuotaEdit::from_draft(&draft)?;
        self.preview_quotas(viewer, vec![(team, pool, q)], 30).await
    }

    async fn save_template(
        &self,
        viewer: &Viewer,
        name: Option<String>,
        definition: String,
    ) -> Result<Template, ApiError> {
        let address = crate::request_id::current_client_addr();
        match name {
            None => self.create_template(viewer, &definition, address).await,
            Some(n) => {
                self.add_template_version(viewer, &n, &definition, address)
                    .await
            }
        }
    }

    async fn deprecate_template(&self, viewer: &Viewer, name: String) -> Result<(), ApiError> {
        let address = crate::request_id::current_client_addr();
        Portal::deprecate_template(self, viewer, &name, address).await
    }

    async fn audit_records(
        &self,
        viewer: &Viewer,
        actor: Option<String>,
        action: Option<String>,
        target: Option<String>,
    ) -> Result<Vec<AuditRecord>, ApiError> {
        let blank = |s: Option<String>| s.filter(|s| !s.trim().is_empty());
        let entries = self
            .audit_log(
                viewer,
                crate::db::AuditFilter {
                    actor: blank(actor),
                    action: blank(action),
                    target: blank(target),
                    limit: 500,
                },
            )
            .await?;
        Ok(entries
            .into_iter()
            .map(|e| AuditRecord {
                at: e.at,
                actor: e.actor,
                action: e.action,
                target: e.target,
                before: e.before,
                after: e.after,
                address: e.address,
            })
            .collect())
    }

    fn manifests_available(&self) -> bool {
        self.kube.is_some()
    }

    async fn launch_manifest(
        &self,
        viewer: &Viewer,
        req: LaunchRequest,
    ) -> Result<Option<String>, ApiError> {
        self.manifest(viewer, req).await
    }

    async fn launch_job(
        &self,
        viewer: &Viewer,
        req: LaunchRequest,
        key: Option<String>,
    ) -> Result<(Job, bool), ApiError> {
        self.launch(viewer, req, key).await
    }

    async fn list_jobs(&self, viewer: &Viewer, filter: JobFilter) -> Result<JobList, ApiError> {
        Ok(JobList {
            jobs: self.jobs(viewer, filter).await?,
            now: self.cluster.now(),
        })
    }

    async fn get_job(&self, viewer: &Viewer, id: &str) -> Result<Job, ApiError> {
        self.job_for(viewer, id).await
    }

    async fn cancel_job(&self, viewer: &Viewer, id: &str) -> Result<Job, ApiError> {
        self.cancel(viewer, id).await
    }

    async fn sign_in_options(
        &self,
        parts: &http::request::Parts,
    ) -> Result<SignInOptions, ApiError> {
        let mut demo_users = Vec::new();
        if self.dev_login {
            for id in self.db.list_user_ids().await? {
                if let Some(v) = self.db.get_viewer(&id).await? {
                    demo_users.push(v);
                }
            }
        }
        let ended = match parts.extensions.get::<tower_sessions::Session>() {
            Some(s) => crate::auth::session_ended(s).await,
            None => None,
        };
        Ok(SignInOptions {
            demo_users,
            sso_provider: self.sso_provider.clone(),
            ended,
        })
    }

    async fn list_tokens(&self, viewer: &Viewer) -> Result<Vec<ApiTokenInfo>, ApiError> {
        Ok(self
            .db
            .list_tokens(&viewer.user)
            .await?
            .into_iter()
            .map(token_info)
            .collect())
    }

    async fn create_token(
        &self,
        viewer: &Viewer,
        name: String,
        expires_in_days: Option<u32>,
    ) -> Result<NewApiToken, ApiError> {
        crate::input::single_line("name", &name)?;
        let name = name.trim().to_string();
        if name.is_empty() || name.chars().count() > 64 {
            return Err(ApiError::invalid(
                "name",
                "give the token a name of 1 to 64 characters, e.g. \"ci-pipeline\"",
            ));
        }
        if let Some(d) = expires_in_days {
            if !(1..=365).contains(&d) {
                return Err(ApiError::invalid(
                    "expires_in_days",
                    format!("must be 1 to 365 days, or empty for no expiry; got {d}"),
                ));
            }
        }
        let live = self
            .db
            .list_tokens(&viewer.user)
            .await?
            .iter()
            .filter(|t| t.revoked_at.is_none())
            .count();
        if live >= MAX_LIVE_TOKENS {
            return Err(ApiError::conflict(format!(
                "you already have {live} live tokens, the most allowed; revoke one first"
            )));
        }
        let now = Utc::now();
        let (token, hash) = crate::auth::new_token();
        let row = crate::db::TokenRow {
            id: uuid::Uuid::now_v7().to_string(),
            user: viewer.user.clone(),
            name,
            prefix: token
                .chars()
                .take(crate::auth::TOKEN_PREFIX.len() + 4)
                .collect(),
            created_at: now,
            expires_at: expires_in_days.map(|d| now + chrono::TimeDelta::days(d.into())),
            last_used_at: None,
            revoked_at: None,
        };
        self.db.insert_token(&row, &hash).await?;
        let mut entry = crate::db::AuditEntry::new(&viewer.user, "token.create", &viewer.user, now);
        entry.after =
            Some(serde_json::json!({"id": row.id, "name": row.name, "expires_at": row.expires_at}));
        self.audit(entry).await?;
        Ok(NewApiToken {
            token,
            info: token_info(row),
        })
    }

    async fn pool_grids(&self, viewer: &Viewer) -> Result<Vec<PoolGrid>, ApiError> {
        let per_node = 8usize;
        let now = self.cluster.now();
        let mut grids: Vec<PoolGrid> = self
            .db
            .list_pools()
            .await?
            .into_iter()
            .map(|p| PoolGrid {
                nodes: (0..p.nodes)
                    .map(|i| empty_node(format!("{}-node-{i:02}", p.name), per_node))
                    .collect(),
                pool: p.name,
                gpu_model: p.gpu_model,
                metrics_note: None,
            })
            .collect();
        let mut metrics_note = None;
        let running_since = self.db.open_interval_starts().await?;
        for job in self.db.active_jobs().await? {
            if !matches!(job.state, JobState::Admitted | JobState::Running) {
                continue;
            }
            let Some(grid) = grids.iter_mut().find(|g| g.pool == job.pool) else {
                continue;
            };
            let visible = Self::may_see(viewer, &job.team);
            let since = running_since.get(&job.id).copied();
            let gpus = crate::metrics::JobGpus {
                job_id: job.id.clone(),
                team: job.team.clone(),
                gpus: job.gpus,
                since: since.unwrap_or(now),
            };
            // The job's GPUs now, one query per job; a back end that is down leaves the
            // cells coloured by allocation only (and is not asked again for the next job).
            let readings = match (&self.metrics, since) {
                (Some(m), Some(_)) if metrics_note.is_none() => match m
                    .series(&gpus, now, now, chrono::TimeDelta::seconds(60))
                    .await
                {
                    Ok(s) => Some(s.gpus),
                    Err(e) => {
                        tracing::debug!(job.id = %job.id, error = %e, "pools grid: no utilization");
                        metrics_note = Some(format!(
                            "Utilization not shown. Metrics unavailable: {} ({}).",
                            e.reason(),
                            now.format("%H:%M UTC")
                        ));
                        None
                    }
                },
                _ => None,
            };
            let mut g = 0u32;
            for node in &job.node_names {
                let row = match grid.nodes.iter().position(|n| &n.name == node) {
                    Some(i) => i,
                    None => {
                        grid.nodes.push(empty_node(node.clone(), per_node));
                        grid.nodes.len() - 1
                    }
                };
                for cell in grid.nodes[row].cells.iter_mut().filter(|c| c.job.is_none()) {
                    if g >= job.gpus {
                        break;
                    }
                    let util = readings
                        .as_ref()
                        .and_then(|tracks| tracks.get(g as usize))
                        .and_then(|t| t.readings.first().copied().flatten())
                        .map(|r| r.util_pct);
                    *cell = GridCell {
                        job: Some(if visible {
                            job.name.clone()
                        } else {
                            "another team".into()
                        }),
                        job_id: visible.then(|| job.id.clone()),
                        util_pct: util,
                    };
                    g += 1;
                }
            }
        }
        for g in &mut grids {
            g.metrics_note.clone_from(&metrics_note);
        }
        Ok(grids)
    }

    async fn job_utilization(&self, viewer: &Viewer, id: &str) -> Result<JobUtilization, ApiError> {
        Portal::job_utilization(self, viewer, id).await
    }

    async fn usage_view(
        &self,
        viewer: &Viewer,
        days: u32,
        group_by: String,
        bucket: String,
    ) -> Result<UsageView, ApiError> {
        use crate::usage::{Bucket, GroupBy};
        if !matches!(days, 1..=400) {
            return Err(ApiError::invalid("days", "must be 1 to 400"));
        }
        let g = GroupBy::parse(&group_by)?;
        let b = Bucket::parse(&bucket)?;
        let tz = self.usage_tz;
        let today = self.cluster.now().with_timezone(&tz).date_naive();
        let to_day = today + chrono::Duration::days(1);
        let from_day = to_day - chrono::Duration::days(days.into());
        let (from, to) = (
            crate::usage::local_midnight(from_day, tz),
            crate::usage::local_midnight(to_day, tz),
        );
        let rows = self.usage(viewer, from, to, g, b, None).await?;
        let teams = self.report_teams(viewer, None)?;
        let now = self.cluster.now();
        let top = |by_idle| {
            let teams = teams.clone();
            async move {
                Ok::<_, ApiError>(
                    self.db
                        .top_jobs(from, to, now, teams.as_deref(), by_idle, 10)
                        .await?
                        .into_iter()
                        .map(|(id, name, user, team, a, i)| TopJob {
                            id,
                            name,
                            user,
                            team,
                            gpu_hours_allocated: a / 3.6e6,
                            gpu_hours_idle: i / 3.6e6,
                        })
                        .filter(|j| !by_idle || j.gpu_hours_idle > 0.0)
                        .collect::<Vec<_>>(),
                )
            }
        };
        let top_allocated = top(false).await?;
        let top_idle = top(true).await?;
        // Quota against use: per team and pool, the nominal quota over the range's hours.
        let hours = (to.min(now) - from).num_milliseconds().max(0) as f64 / 3.6e6;
        let mut quota_use = Vec::new();
        // One report per team (grouped by pool), shared by that team's quotas.
        let mut by_team: std::collections::HashMap<String, Vec<crate::usage::UsageRow>> =
            std::collections::HashMap::new();
        for q in self.db.list_quotas().await? {
            if teams.as_ref().is_some_and(|t| !t.contains(&q.team)) {
                continue;
            }
            if !by_team.contains_key(&q.team) {
                let rows = self
                    .usage(viewer, from, to, GroupBy::Pool, b, Some(&q.team))
                    .await?;
                by_team.insert(q.team.clone(), rows);
            }
            let used = by_team[&q.team]
                .iter()
                .filter(|r| r.key == q.pool)
                .map(|r| r.gpu_hours_allocated)
                .sum::<f64>()
                + 0.0; // an empty float sum is -0.0
            quota_use.push(QuotaAgainstUse {
                team: q.team.clone(),
                pool: q.pool.clone(),
                quota_gpu_hours: f64::from(q.quota.nominal) * hours,
                gpu_hours_allocated: used,
            });
        }
        let view = |r: &crate::usage::UsageRow| UsageRowView {
            bucket_start: r.bucket_start.to_string(),
            key: r.key.clone(),
            gpu_hours_allocated: r.gpu_hours_allocated,
            gpu_hours_used: r.gpu_hours_used,
            gpu_hours_idle: r.gpu_hours_idle,
            gpu_hours_unmeasured: r.gpu_hours_unmeasured,
            efficiency: r.efficiency,
        };
        let mut total = UsageRowView {
            bucket_start: from_day.to_string(),
            key: "all".into(),
            gpu_hours_allocated: 0.0,
            gpu_hours_used: 0.0,
            gpu_hours_idle: 0.0,
            gpu_hours_unmeasured: 0.0,
            efficiency: None,
        };
        for r in &rows {
            total.gpu_hours_allocated += r.gpu_hours_allocated;
            total.gpu_hours_used += r.gpu_hours_used;
            total.gpu_hours_idle += r.gpu_hours_idle;
            total.gpu_hours_unmeasured += r.gpu_hours_unmeasured;
        }
        let measured = total.gpu_hours_used + total.gpu_hours_idle;
        total.efficiency = (measured > 0.0).then(|| total.gpu_hours_used / measured);
        Ok(UsageView {
            from: from_day.to_string(),
            to: to_day.to_string(),
            last_day: today.to_string(),
            time_zone: tz.name().to_string(),
            chart_svg: crate::usage::chart_svg(&rows, g, b),
            csv_url: format!(
                "/api/v1/usage?from={from_day}&to={to_day}&group_by={group_by}&bucket={bucket}&format=csv"
            ),
            group_by,
            bucket,
            rows: rows.iter().map(view).collect(),
            total,
            top_allocated,
            top_idle,
            quota_use,
        })
    }

    async fn revoke_token(&self, viewer: &Viewer, id: &str) -> Result<(), ApiError> {
        crate::input::single_line("id", id)?;
        let now = Utc::now();
        if !self.db.revoke_token(&viewer.user, id, now).await? {
            return Err(ApiError::not_found(format!(
                "you have no live API token with id '{id}'"
            )));
        }
        let mut entry = crate::db::AuditEntry::new(&viewer.user, "token.revoke", &viewer.user, now);
        entry.before = Some(serde_json::json!({"id": id}));
        self.audit(entry).await?;
        Ok(())
    }

    fn now(&self) -> DateTime<Utc> {
        self.cluster.now()
    }
}

#[cfg(test)]
mod tests;
