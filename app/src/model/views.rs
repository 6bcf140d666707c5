//! What pages, server functions and the JSON API show: jobs, templates, pools, quotas,
//! usage, the viewer. Built only by the server's services.

use super::domain::*;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// One state change of a job, with its time and reason.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobEvent {
    pub at: DateTime<Utc>,
    /// The state entered, or `preempted` for a preemption (the job is then queued again).
    pub kind: String,
    pub reason: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Job {
    pub id: String,
    pub name: String,
    pub template: String,
    pub template_version: u32,
    pub team: String,
    pub user: String,
    pub pool: String,
    pub gpus: u32,
    pub nodes: u32,
    pub priority: Priority,
    pub state: JobState,
    /// 1-based rank among the queued jobs of the pool; null unless queued.
    pub queue_position: Option<u32>,
    /// 1-based rank among the queued jobs of the same team in the pool; null unless queued.
    pub queue_position_in_team: Option<u32>,
    /// One sentence naming what the job waits for; null unless queued.
    pub pending_reason: Option<String>,
    /// When the job should be admitted if nothing new arrives; null when it cannot be bounded.
    pub eta: Option<DateTime<Utc>>,
    /// The queued jobs ahead of this one in its pool (names and owners only for own team).
    pub ahead: Vec<AheadJob>,
    /// Every time the job was preempted, with why.
    pub preemptions: Vec<Preemption>,
    pub created_at: DateTime<Utc>,
    pub admitted_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
    pub params: Map<String, Value>,
    pub max_runtime_s: u64,
    /// Nodes the job was placed on while it holds GPUs.
    pub node_names: Vec<String>,
    pub events: Vec<JobEvent>,
    /// Whether the viewer may cancel it (owner, team lead or admin, and the job is active).
    pub can_cancel: bool,
    /// Why it failed, from the pod that failed first; null unless failed and known.
    #[serde(default)]
    pub failure: Option<JobFailure>,
    /// The job it was cloned or re-run from.
    #[serde(default)]
    pub cloned_from: Option<JobLink>,
    /// Jobs cloned or re-run from this one, the newest first (on the job's own page).
    #[serde(default)]
    pub clones: Vec<JobLink>,
    /// How many jobs were cloned or re-run from this one in all; `clones` names the newest
    /// (at most 20). 0 in list rows.
    #[serde(default)]
    pub clone_count: u64,
    /// Whether the viewer may re-run or clone it (a member of its team).
    #[serde(default)]
    pub can_rerun: bool,
    /// Set when the job's template version is no longer the current one (on its own page).
    #[serde(default)]
    pub version_note: Option<VersionNote>,
    /// GPU-hours over its runs, once it has ended (on its own page).
    #[serde(default)]
    pub gpu_hours: Option<JobGpuHours>,
}

/// An ended job's GPU-hours: allocated, used and idle (where measured), and efficiency.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobGpuHours {
    pub allocated: f64,
    pub used: Option<f64>,
    pub idle: Option<f64>,
    /// Allocated hours whose utilization is not known (yet, or ever).
    pub unmeasured: f64,
    /// Used / measured, 0..=1.
    pub efficiency: Option<f64>,
}

/// Another job, by id and name.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobLink {
    pub id: String,
    pub name: String,
}

/// Lines of a job's log and where they came from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobLogs {
    pub lines: Vec<LogLine>,
    /// How many node ranks (pods) the job has.
    pub ranks: u32,
    /// `cluster` (the pods), `kept` (what Gantry kept when the job ended) or `none`.
    pub source: String,
    /// Earlier lines were not kept.
    pub truncated: bool,
    /// Why there are no lines, or where they come from when not the pods.
    pub message: Option<String>,
    /// The job has ended: no more lines will come.
    pub ended: bool,
}

/// A queued job ahead of another, as its viewer may see it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AheadJob {
    pub position: u32,
    pub team: String,
    pub gpus: u32,
    pub priority: Priority,
    pub submitted_at: DateTime<Utc>,
    /// Only for the viewer's own team.
    pub id: Option<String>,
    pub name: Option<String>,
    pub user: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Preemption {
    pub at: DateTime<Utc>,
    pub reason: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobList {
    /// One page of the jobs the filter selects, newest first.
    pub jobs: Vec<Job>,
    /// How many jobs the filter selects, on every page.
    pub total: u64,
    /// Asks for the next (older) page; `None` on the last page.
    pub next_cursor: Option<String>,
    /// The cluster clock when the list was read (the sim clock may run faster than real time).
    pub now: DateTime<Utc>,
    /// How many live changes had been sent when the list was read: it holds those, and a
    /// change numbered higher may not be in it (see `LiveEvent::Job::seq`).
    #[serde(default)]
    pub live_seq: u64,
    /// The newest job `total` counts (on whichever page it is), in the list's order: a job
    /// newer than it was not counted yet. (An older one may not have been either: a launch
    /// stored just after the read can be older than one stored just before.) `None` when the
    /// filter selected none.
    #[serde(default)]
    pub newest: Option<JobKey>,
    /// Where this page starts: past this job (the last of the page before, as the cursor
    /// names it); `None` on the first page. A job at or before it in the order belongs to an
    /// earlier page.
    #[serde(default)]
    pub after: Option<JobKey>,
}

/// A job's place in the newest-first order of a list: its submission time, then its id.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobKey {
    pub created_at: DateTime<Utc>,
    pub id: String,
}

impl JobKey {
    pub fn of(job: &Job) -> JobKey {
        JobKey {
            created_at: job.created_at,
            id: job.id.clone(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobPage {
    pub job: Job,
    pub now: DateTime<Utc>,
    /// The GPU panel's figures when the page was read, for a job that was admitted (`None`
    /// for one never admitted): read with the job, so the page waits on one answer, and the
    /// panel needs no loading boundary of its own.
    #[serde(default)]
    pub util: Option<Result<GpuPanelData, crate::error::ApiError>>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Template {
    pub name: String,
    pub version: u32,
    pub display_name: String,
    pub family: String,
    pub model_size: String,
    pub method: String,
    pub description: String,
    pub image: String,
    pub command: Vec<String>,
    pub params: Vec<ParamSpec>,
    pub allowed_gpus: Vec<u32>,
    pub default_gpus: u32,
    pub default_pool: String,
    pub default_max_runtime_s: u64,
    /// The Kubeflow Trainer `ClusterTrainingRuntime` it runs under; `None`: a JobSet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trainer_runtime: Option<String>,
    /// When the viewer's team last launched it.
    pub last_used_by_team: Option<DateTime<Utc>>,
}

/// A page of the template catalogue (`GET /api/v1/templates`, the admins' Templates page),
/// by name.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TemplateList {
    pub templates: Vec<Template>,
    /// How many templates the search selects, on every page.
    pub total: u64,
    /// Asks for the next page; `None` on the last page.
    pub next_cursor: Option<String>,
}

/// A team's quota in a pool as admins see and edit it, with the live figures beside it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct QuotaCell {
    pub team: String,
    pub pool: String,
    pub nominal_gpus: u32,
    /// `None`: may borrow any unused quota of the pool (Kueue's default).
    pub borrowing_limit_gpus: Option<u32>,
    /// How much of the nominal quota other teams may borrow; `None`: all of it (Kueue's
    /// default).
    #[serde(default)]
    pub lending_limit_gpus: Option<u32>,
    /// The team's queue order in the pool: `BestEffortFIFO` or `StrictFIFO` (Kueue's
    /// ClusterQueue `queueingStrategy`).
    #[serde(default)]
    pub queueing_strategy: String,
    /// Bumped by every change; the API's `ETag` is `"v<version>"`.
    pub version: i64,
    pub used_gpus: u32,
    pub borrowed_gpus: u32,
    /// GPUs of this team's idle nominal quota that other teams are using now. Kueue pools what
    /// a cohort lends, so the pool's borrowed GPUs are attributed to the idle quotas pro rata.
    pub lent_gpus: u32,
    /// GPUs the team's queued jobs ask for.
    pub queued_gpus: u32,
    pub pool_gpus: u32,
    /// The sum of every team's nominal quota in the pool (may exceed `pool_gpus`: a warning).
    pub pool_nominal_sum: u32,
}

/// A quota as an admin drafts it (the Quotas page's Save and Preview).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct QuotaDraft {
    pub nominal_gpus: u32,
    pub borrowing_limit_gpus: Option<u32>,
    pub lending_limit_gpus: Option<u32>,
    /// `BestEffortFIFO` or `StrictFIFO`.
    pub queueing_strategy: String,
}

/// One entry of the append-only audit log.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AuditRecord {
    pub at: DateTime<Utc>,
    pub actor: String,
    pub action: String,
    pub target: String,
    pub before: Option<Value>,
    pub after: Option<Value>,
    pub address: Option<String>,
}

/// A page of the audit log, newest first.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AuditList {
    pub records: Vec<AuditRecord>,
    /// How many entries the filters select, on every page.
    pub total: u64,
    /// Asks for the next (older) page; `None` on the last page.
    pub next_cursor: Option<String>,
}

/// What one team got in a what-if replay.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TeamOutcome {
    pub team: String,
    pub jobs: u32,
    /// Jobs that never started within the replay.
    pub never_started: u32,
    pub median_wait_s: i64,
    pub p90_wait_s: i64,
    pub gpu_hours: f64,
    pub preemptions: u32,
}

/// What the last days would have looked like under the current quotas and under a draft.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct QuotaPreview {
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    pub launches: u32,
    pub current: Vec<TeamOutcome>,
    pub draft: Vec<TeamOutcome>,
    pub elapsed_ms: u64,
    /// The 90th-percentile waits side by side, as SVG drawn on the server (text escaped).
    #[serde(default)]
    pub chart_svg: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Pool {
    pub name: String,
    pub gpu_model: String,
    pub nodes: u32,
    pub gpus_per_node: u32,
    pub gpus_total: u32,
    pub gpus_allocated: u32,
    pub gpus_free: u32,
    /// Nodes with all 8 GPUs free: what a multi-node gang needs.
    pub free_nodes: u32,
    pub queued_jobs: u32,
    /// Each team's quota and use here.
    pub teams: Vec<QuotaUse>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct QuotaUse {
    pub team: String,
    pub pool: String,
    pub nominal_gpus: u32,
    /// How far beyond nominal the team may borrow; null is no limit.
    pub borrowing_limit_gpus: Option<u32>,
    pub used_gpus: u32,
    /// GPUs held beyond the nominal quota, lent by other teams.
    pub borrowed_gpus: u32,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HomeView {
    pub viewer: Viewer,
    /// The viewer's newest queued, admitted and running jobs (at most `HOME_ACTIVE_JOBS`).
    pub active_jobs: Vec<Job>,
    /// How many active jobs the viewer has in all.
    pub active_total: u64,
    pub quotas: Vec<QuotaUse>,
    pub pools: Vec<Pool>,
    pub now: DateTime<Utc>,
}

/// A launch as the JSON API and the Launch form send it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LaunchRequest {
    pub template: String,
    pub gpus: u32,
    #[serde(default)]
    pub pool: Option<String>,
    #[serde(default)]
    pub params: Map<String, Value>,
    #[serde(default)]
    pub max_runtime_s: Option<u64>,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub priority: Option<Priority>,
    /// The team to launch for; defaults to the user's first team.
    #[serde(default)]
    pub team: Option<String>,
    /// An exact template version (a re-run, or a clone of an older job); default: the newest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template_version: Option<u32>,
    /// The job this launch clones; recorded, and both jobs' pages link to each other.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_job: Option<String>,
}

/// A re-run's options (`POST /api/v1/jobs/{id}/rerun`); the body may be empty.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RerunRequest {
    /// Run on the template's newest version instead of the job's own.
    #[serde(default)]
    pub use_current_version: bool,
}

/// A job's template version beside the template's current one, for Re-run and Clone.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct VersionNote {
    /// The template's newest version; `None` when the template is deprecated.
    pub current: Option<u32>,
    pub deprecated: bool,
    /// What changed from the job's version to the current one, one line each.
    pub differences: Vec<String>,
}

/// What the Launch form shows before the click: would this fit now, and if not, why.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LaunchCheck {
    pub fits_now: bool,
    /// Queued jobs in the pool that would be ahead of this one.
    pub jobs_ahead: u32,
    pub reason: Option<String>,
    pub eta: Option<DateTime<Utc>>,
    /// The cluster clock when checked.
    pub now: DateTime<Utc>,
    /// The team cannot hold this job under the current quotas: it would be accepted and wait
    /// until a quota changes (as in Kueue). The Launch form asks for a second click.
    #[serde(default)]
    pub cannot_start: bool,
}

/// What the live stream (`/api/v1/events`, server-sent events) carries.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum LiveEvent {
    /// Something changed in a pool's queue or in a job of it.
    Job {
        /// The job, or empty when it is another team's (or after missed changes).
        job_id: String,
        /// Who launched it (empty when the job is not shown).
        #[serde(default)]
        user: String,
        /// A notification was written for the viewer: refetch the list in the top bar.
        #[serde(default)]
        notify: bool,
        /// The pool whose queue may have moved; empty after missed changes (refetch all).
        pool: String,
        /// The job's new state; only with `job_id` (of another team's job only the pool).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        state: Option<JobState>,
        now: DateTime<Utc>,
        /// The job as a list row (no events), with what the viewer may do with it; only
        /// with `job_id`. Lists patch themselves with it instead of asking again.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        row: Option<Box<Job>>,
        /// The change's number among all the changes the server sent (one more each; a
        /// restarted server's are higher; 0 after missed changes): a reader told of `n + 2`
        /// after `n` missed one.
        #[serde(default)]
        seq: u64,
    },
    /// The cluster clock, every few seconds, so elapsed times move.
    Tick {
        now: DateTime<Utc>,
        /// On a stream's first event only: how many changes had been sent when it opened.
        /// Every later change comes on the stream; a page read with fewer lacks the others.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        seq: Option<u64>,
    },
}

/// What the sign-in page offers.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SignInOptions {
    /// The demo users of the embedded default (local sign-in); empty when it is off.
    pub demo_users: Vec<Viewer>,
    /// The OpenID provider's name when single sign-on is configured.
    pub sso_provider: Option<String>,
    /// Why the last session ended on its own ("expired"), if it did.
    pub ended: Option<String>,
}

/// A personal API token as listed (the token itself is shown once, at creation).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ApiTokenInfo {
    pub id: String,
    pub name: String,
    /// The token's first characters, to recognise it.
    pub prefix: String,
    pub created_at: DateTime<Utc>,
    pub expires_at: Option<DateTime<Utc>>,
    pub last_used_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
    /// Past its expiry when it was read: refused like a revoked one.
    #[serde(default)]
    pub expired: bool,
}

/// A live API token of some user, as an admin sees it (never the token itself).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UserApiToken {
    /// Who holds it: its calls act as this user.
    pub user: String,
    #[serde(flatten)]
    pub info: ApiTokenInfo,
}

/// A page of every user's live API tokens (not revoked, not expired), for admins: by user,
/// newest first within each.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UserApiTokens {
    pub tokens: Vec<UserApiToken>,
    /// How many live tokens the filter selects, on every page.
    pub total: u64,
    /// Asks for the next page; `None` on the last page.
    pub next_cursor: Option<String>,
}

/// A token just created: the only time its secret is shown.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
pub struct NewApiToken {
    pub token: String,
    pub info: ApiTokenInfo,
    /// Under single sign-on: the token works while its owner signs in to Gantry at least this
    /// often, in days (their teams and role come from the provider at sign-in).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sign_in_days: Option<u32>,
}

/// The secret stays out of `Debug` (and so out of logs).
impl std::fmt::Debug for NewApiToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NewApiToken")
            .field("token", &format_args!("{}…", self.info.prefix))
            .field("info", &self.info)
            .field("sign_in_days", &self.sign_in_days)
            .finish()
    }
}

/// One row of a usage report, as pages show it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UsageRowView {
    /// The bucket's first day in the accounting time zone, `YYYY-MM-DD`.
    pub bucket_start: String,
    pub key: String,
    pub gpu_hours_allocated: f64,
    pub gpu_hours_used: f64,
    pub gpu_hours_idle: f64,
    pub gpu_hours_unmeasured: f64,
    pub efficiency: Option<f64>,
}

/// The Usage page: a report, its chart, and where to download the same rows.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UsageView {
    pub from: String,
    /// Exclusive: the report counts `[from, to)`.
    pub to: String,
    /// The last day counted (the day before `to`).
    pub last_day: String,
    pub time_zone: String,
    pub group_by: String,
    pub bucket: String,
    pub rows: Vec<UsageRowView>,
    /// Over the whole range and every group.
    pub total: UsageRowView,
    pub chart_svg: String,
    /// The same chart drawn for a phone's width (readable text when scaled to it).
    pub chart_svg_narrow: String,
    pub csv_url: String,
    /// The jobs with the most GPU-hours, and with the most idle GPU-hours.
    pub top_allocated: Vec<TopJob>,
    pub top_idle: Vec<TopJob>,
    /// Each quota (of the teams in the report) against its use.
    pub quota_use: Vec<QuotaAgainstUse>,
}

/// One GPU of a job over a window: utilization samples, 0–100 %.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GpuSeries {
    pub node: String,
    /// 0–7 on its node.
    pub gpu: u32,
    pub util_pct: Vec<f64>,
}

/// The job's GPUs together at one time.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MeanSample {
    pub at: DateTime<Utc>,
    pub util_pct: f64,
    pub fb_used_gib: f64,
    pub power_w: f64,
}

/// A job's GPU utilization over its current (or last) run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobUtilization {
    pub job_id: String,
    /// False when the job has not run yet, or the metrics back end has nothing for it.
    pub available: bool,
    pub message: Option<String>,
    pub from: Option<DateTime<Utc>>,
    pub to: Option<DateTime<Utc>>,
    pub step_s: i64,
    pub gpus: Vec<GpuSeries>,
    pub mean: Vec<MeanSample>,
    /// Every GPU under 5 % for the last 30 minutes (a stalled job holding its GPUs).
    pub idle: bool,
}

/// What the job page's GPU panel draws of a [`JobUtilization`]: each GPU's latest reading,
/// and the mean series as plain numbers (the charts place samples by their index). A
/// running job's page carried every GPU's two hours of samples (16 GPUs: 1,920 numbers) and
/// a date per sample, to draw the latest of each.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GpuPanelData {
    pub available: bool,
    pub message: Option<String>,
    pub from: Option<DateTime<Utc>>,
    pub to: Option<DateTime<Utc>>,
    pub step_s: i64,
    /// Node, GPU on the node, and its latest utilization (%), in the back end's order.
    pub cells: Vec<(String, u32, f64)>,
    pub util_pct: Vec<f64>,
    pub fb_used_gib: Vec<f64>,
    pub power_w: Vec<f64>,
    pub idle: bool,
}

#[cfg(feature = "ssr")]
impl From<JobUtilization> for GpuPanelData {
    fn from(u: JobUtilization) -> Self {
        // To a tenth (of a per cent, a GiB, a watt): finer than the charts draw, and what the
        // page carries for hydration is a third of the digits.
        let series = |f: fn(&MeanSample) -> f64| {
            u.mean
                .iter()
                .map(|m| (f(m) * 10.0).round() / 10.0)
                .collect::<Vec<f64>>()
        };
        GpuPanelData {
            util_pct: series(|m| m.util_pct),
            fb_used_gib: series(|m| m.fb_used_gib),
            power_w: series(|m| m.power_w),
            cells: u
                .gpus
                .into_iter()
                .map(|g| {
                    let last = g.util_pct.last().copied().unwrap_or(0.0);
                    (g.node, g.gpu, last)
                })
                .collect(),
            available: u.available,
            message: u.message,
            from: u.from,
            to: u.to,
            step_s: u.step_s,
            idle: u.idle,
        }
    }
}

/// A job in a usage report's top list.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TopJob {
    pub id: String,
    pub name: String,
    pub user: String,
    pub team: String,
    pub gpu_hours_allocated: f64,
    pub gpu_hours_idle: f64,
}

/// A team's quota in a pool against its use over a report's range.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct QuotaAgainstUse {
    pub team: String,
    pub pool: String,
    /// Nominal quota × the range's hours.
    pub quota_gpu_hours: f64,
    pub gpu_hours_allocated: f64,
}

/// One GPU in a pool's grid.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GridCell {
    /// The job holding it: its name for the viewer's own team, "another team" otherwise;
    /// `None` when free.
    pub job: Option<String>,
    /// Set only for jobs the viewer may open.
    pub job_id: Option<String>,
    /// Utilization, 0–100 %, when known.
    pub util_pct: Option<f64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GridNode {
    pub name: String,
    pub cells: Vec<GridCell>,
}

/// Every node of a pool as a row of its GPUs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PoolGrid {
    pub pool: String,
    pub gpu_model: String,
    pub nodes: Vec<GridNode>,
    /// Why cells show allocation only, when the metrics back end did not answer.
    pub metrics_note: Option<String>,
}

/// How a user is told of one event.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NotificationPref {
    /// `started`, `succeeded`, `failed`, `preempted` or `idle` (30 minutes under 5 %).
    pub event: String,
    /// In Gantry: the list in the top bar.
    pub in_app: bool,
    /// The browser's notifications (while a Gantry tab is open and allowed to show them).
    pub browser: bool,
    /// The user's own webhooks that carry this event.
    pub webhook: bool,
}

/// A webhook as shown back (its address shortened: it may be the credential itself).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WebhookInfo {
    pub id: String,
    pub url: String,
    /// `slack` or `generic` (JSON signed with HMAC-SHA256 in `X-Gantry-Signature`).
    pub kind: String,
    pub events: Vec<String>,
    /// Set for a team's webhook.
    pub team: Option<String>,
    pub created_by: String,
    pub created_at: DateTime<Utc>,
}

/// The viewer's notification settings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NotificationSettings {
    pub prefs: Vec<NotificationPref>,
    /// Their own webhooks and their teams'.
    pub webhooks: Vec<WebhookInfo>,
    /// Teams the viewer leads (who may set a team webhook).
    pub lead_of: Vec<String>,
}

/// `PUT /api/v1/notifications/settings`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NotificationPrefs {
    pub prefs: Vec<NotificationPref>,
}

/// `POST /api/v1/webhooks`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewWebhook {
    pub url: String,
    /// `slack` or `generic`.
    pub kind: String,
    pub events: Vec<String>,
    /// A team's webhook (its leads only; `failed` and `idle`).
    #[serde(default)]
    pub team: Option<String>,
}

/// A new webhook and its signing secret, shown once.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
pub struct CreatedWebhook {
    pub webhook: WebhookInfo,
    pub secret: String,
}

/// Without the secret: whatever prints this must not print the credential.
impl std::fmt::Debug for CreatedWebhook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CreatedWebhook")
            .field("webhook", &self.webhook)
            .field("secret", &"(hidden)")
            .finish()
    }
}

/// One delivery of a webhook, as its log shows it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeliveryInfo {
    pub id: String,
    pub event: String,
    pub job_id: String,
    /// `pending`, `delivered` or `failed` (given up).
    pub state: String,
    pub attempts: u32,
    pub last_status: Option<u16>,
    pub last_error: Option<String>,
    pub created_at: DateTime<Utc>,
    pub delivered_at: Option<DateTime<Utc>>,
    /// When it is tried again, while pending.
    pub next_at: Option<DateTime<Utc>>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NotificationItem {
    pub id: String,
    pub job_id: String,
    pub event: String,
    pub at: DateTime<Utc>,
    pub message: String,
    /// Also to be shown as a browser notification.
    pub browser: bool,
    pub read: bool,
}

/// How many of a person's newest notifications the bell shows.
pub const NEWEST_NOTIFICATIONS: usize = 50;
/// How many of a webhook's newest deliveries its log shows.
pub const NEWEST_DELIVERIES: usize = 100;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NotificationList {
    pub items: Vec<NotificationItem>,
    pub unread: u32,
}

/// `POST /api/v1/notifications/read`: these ids, or (`all`) every one.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MarkRead {
    #[serde(default)]
    pub ids: Vec<String>,
    #[serde(default)]
    pub all: bool,
}

#[cfg(all(test, feature = "ssr"))]
mod tests {
    use super::*;

    #[test]
    fn the_gpu_panel_keeps_each_gpus_latest_reading_and_the_means_to_a_tenth() {
        let at = DateTime::<Utc>::from_timestamp(1_700_000_000, 0).unwrap();
        let u = JobUtilization {
            job_id: "j".into(),
            available: true,
            message: None,
            from: Some(at),
            to: Some(at),
            step_s: 60,
            gpus: vec![
                GpuSeries {
                    node: "n1".into(),
                    gpu: 0,
                    util_pct: vec![10.0, 57.2549],
                },
                GpuSeries {
                    node: "n1".into(),
                    gpu: 1,
                    util_pct: vec![],
                },
            ],
            mean: vec![MeanSample {
                at,
                util_pct: 57.25001,
                fb_used_gib: 71.96,
                power_w: 412.049,
            }],
            idle: false,
        };
        let p = GpuPanelData::from(u);
        assert_eq!(p.util_pct, vec![57.3]);
        assert_eq!(p.fb_used_gib, vec![72.0]);
        assert_eq!(p.power_w, vec![412.0]);
        // The heatmap's cells are not rounded here: they are written to a tenth where drawn.
        assert_eq!(
            p.cells,
            vec![("n1".to_string(), 0, 57.2549), ("n1".to_string(), 1, 0.0)]
        );
        assert!(p.available && !p.idle);
    }
}
