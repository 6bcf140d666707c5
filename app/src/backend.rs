//! The seam between the pages and the server: the server provides an `Arc<dyn Backend>` in
//! Leptos context and server functions call it. No SQL and no cluster code lives in `app`.

use std::sync::Arc;

use chrono::{DateTime, Utc};

use crate::error::ApiError;
use crate::model::*;

pub use crate::model::domain::JobFilter;

#[async_trait::async_trait]
pub trait Backend: Send + Sync + 'static {
    /// The signed-in user of this request, if any.
    async fn viewer(&self, parts: &http::request::Parts) -> Result<Option<Viewer>, ApiError>;
    async fn home(&self, viewer: &Viewer) -> Result<HomeView, ApiError>;
    async fn list_templates(&self, viewer: &Viewer) -> Result<Vec<Template>, ApiError>;
    /// A page of the catalogue by name: `q` searches name, display name and family.
    async fn templates_page(
        &self,
        viewer: &Viewer,
        q: Option<String>,
        cursor: Option<String>,
        limit: Option<u32>,
    ) -> Result<TemplateList, ApiError>;
    async fn list_pools(&self, viewer: &Viewer) -> Result<Vec<Pool>, ApiError>;
    /// The pools' names, in order.
    async fn pool_names(&self) -> Result<Vec<String>, ApiError>;
    async fn check_launch(
        &self,
        viewer: &Viewer,
        req: LaunchRequest,
    ) -> Result<LaunchCheck, ApiError>;
    /// Whether launches can show the Kubernetes object they submit (the kube back end).
    fn manifests_available(&self) -> bool;
    /// The Kubernetes object this launch would submit, as YAML; `None` on the sim back end.
    async fn launch_manifest(
        &self,
        viewer: &Viewer,
        req: LaunchRequest,
    ) -> Result<Option<String>, ApiError>;
    /// Stores the job, then sends it to the cluster. The same idempotency key returns the
    /// same job (`false` in the second element) instead of launching twice.
    async fn launch_job(
        &self,
        viewer: &Viewer,
        req: LaunchRequest,
        idempotency_key: Option<String>,
    ) -> Result<(Job, bool), ApiError>;
    async fn list_jobs(&self, viewer: &Viewer, filter: JobFilter) -> Result<JobList, ApiError>;
    async fn get_job(&self, viewer: &Viewer, id: &str) -> Result<Job, ApiError>;
    async fn cancel_job(&self, viewer: &Viewer, id: &str) -> Result<Job, ApiError>;
    /// A job's log lines: `rank` a node rank or `None` for all, the last `tail` lines.
    async fn job_logs(
        &self,
        viewer: &Viewer,
        id: &str,
        rank: Option<u32>,
        tail: usize,
    ) -> Result<JobLogs, ApiError>;
    async fn notifications(&self, viewer: &Viewer) -> Result<NotificationList, ApiError>;
    async fn mark_notifications_read(&self, viewer: &Viewer) -> Result<NotificationList, ApiError>;
    async fn notification_settings(
        &self,
        viewer: &Viewer,
    ) -> Result<NotificationSettings, ApiError>;
    async fn save_notification_prefs(
        &self,
        viewer: &Viewer,
        prefs: Vec<NotificationPref>,
    ) -> Result<NotificationSettings, ApiError>;
    async fn create_webhook(
        &self,
        viewer: &Viewer,
        req: NewWebhook,
    ) -> Result<CreatedWebhook, ApiError>;
    async fn delete_webhook(&self, viewer: &Viewer, id: &str) -> Result<(), ApiError>;
    async fn webhook_deliveries(
        &self,
        viewer: &Viewer,
        id: &str,
    ) -> Result<Vec<DeliveryInfo>, ApiError>;
    /// The job again as it was (or on the template's current version); returns the new job.
    /// The same idempotency key returns the job it made instead of another.
    async fn rerun_job(
        &self,
        viewer: &Viewer,
        id: &str,
        use_current_version: bool,
        idempotency_key: Option<String>,
    ) -> Result<Job, ApiError>;
    /// Every team × pool quota with live figures (admins only).
    async fn quota_cells(&self, viewer: &Viewer) -> Result<Vec<QuotaCell>, ApiError>;
    /// Sets one quota if it is still at `version` (admins only).
    async fn save_quota(
        &self,
        viewer: &Viewer,
        team: String,
        pool: String,
        draft: QuotaDraft,
        version: i64,
    ) -> Result<QuotaCell, ApiError>;
    /// The last 30 days replayed under the current quotas and with this one changed.
    async fn preview_quota(
        &self,
        viewer: &Viewer,
        team: String,
        pool: String,
        draft: QuotaDraft,
    ) -> Result<QuotaPreview, ApiError>;
    /// Creates a template (`version` `None`) or a new version of `name` from a YAML
    /// definition (admins only).
    async fn save_template(
        &self,
        viewer: &Viewer,
        name: Option<String>,
        definition: String,
    ) -> Result<Template, ApiError>;
    /// Hides a template from Launch (admins only).
    async fn deprecate_template(&self, viewer: &Viewer, name: String) -> Result<(), ApiError>;
    /// A page of the audit log, newest first, filtered (admins only).
    async fn audit_records(
        &self,
        viewer: &Viewer,
        actor: Option<String>,
        action: Option<String>,
        target: Option<String>,
        cursor: Option<String>,
    ) -> Result<AuditList, ApiError>;
    /// What the sign-in page offers this request (demo users, single sign-on, why the last
    /// session ended).
    async fn sign_in_options(
        &self,
        parts: &http::request::Parts,
    ) -> Result<SignInOptions, ApiError>;
    /// The viewer's personal API tokens, newest first.
    async fn list_tokens(&self, viewer: &Viewer) -> Result<Vec<ApiTokenInfo>, ApiError>;
    /// Creates a token; its secret is in the answer and nowhere else.
    async fn create_token(
        &self,
        viewer: &Viewer,
        name: String,
        expires_in_days: Option<u32>,
    ) -> Result<NewApiToken, ApiError>;
    /// Every pool as a node × GPU grid: who holds each GPU (names for the viewer's team only)
    /// and its utilization now.
    async fn pool_grids(&self, viewer: &Viewer) -> Result<Vec<PoolGrid>, ApiError>;
    /// The job's GPU utilization over its current or last run, as its page's GPU panel draws
    /// it (the mean series and each GPU's latest reading).
    async fn job_gpu_panel(&self, viewer: &Viewer, id: &str) -> Result<GpuPanelData, ApiError>;
    /// GPU usage over the last `days` days (leads: their teams; admins: all).
    async fn usage_view(
        &self,
        viewer: &Viewer,
        days: u32,
        group_by: String,
        bucket: String,
    ) -> Result<UsageView, ApiError>;
    /// Revokes one of the viewer's tokens (an admin: anyone's); it is refused from the next
    /// request on.
    async fn revoke_token(&self, viewer: &Viewer, id: &str) -> Result<(), ApiError>;
    /// A page of every user's live API tokens, or of `user`'s (admins only), from `cursor`.
    async fn live_tokens(
        &self,
        viewer: &Viewer,
        user: Option<String>,
        cursor: Option<String>,
    ) -> Result<UserApiTokens, ApiError>;
    /// The cluster clock.
    fn now(&self) -> DateTime<Utc>;
    /// How many live changes have been sent: what a page reads from now on holds them.
    fn live_seq(&self) -> u64;
}

pub type SharedBackend = Arc<dyn Backend>;
