//! The Leptos server functions' [`Backend`]: each method delegates to the one service method
//! its JSON route calls too.

use super::*;
use app::error::ApiError;

#[async_trait::async_trait]
impl Backend for Portal {
    async fn viewer(&self, parts: &http::request::Parts) -> Result<Option<Viewer>, ApiError> {
        Portal::viewer(self, parts).await.map_err(ApiError::from)
    }

    async fn home(&self, viewer: &Viewer) -> Result<HomeView, ApiError> {
        Portal::home(self, viewer).await.map_err(ApiError::from)
    }

    async fn list_templates(&self, viewer: &Viewer) -> Result<Vec<Template>, ApiError> {
        Portal::list_templates(self, viewer)
            .await
            .map_err(ApiError::from)
    }

    async fn templates_page(
        &self,
        viewer: &Viewer,
        q: Option<String>,
        cursor: Option<String>,
        limit: Option<u32>,
    ) -> Result<TemplateList, ApiError> {
        Portal::templates_page(self, viewer, q, cursor, limit)
            .await
            .map_err(ApiError::from)
    }

    async fn list_pools(&self, viewer: &Viewer) -> Result<Vec<Pool>, ApiError> {
        Portal::list_pools(self, viewer)
            .await
            .map_err(ApiError::from)
    }

    async fn pool_names(&self) -> Result<Vec<String>, ApiError> {
        Portal::pool_names(self).await.map_err(ApiError::from)
    }

    async fn check_launch(
        &self,
        viewer: &Viewer,
        req: LaunchRequest,
    ) -> Result<LaunchCheck, ApiError> {
        Portal::check_launch(self, viewer, req)
            .await
            .map_err(ApiError::from)
    }

    async fn quota_cells(&self, viewer: &Viewer) -> Result<Vec<QuotaCell>, ApiError> {
        Portal::quota_cells(self, viewer)
            .await
            .map_err(ApiError::from)
    }

    async fn save_quota(
        &self,
        viewer: &Viewer,
        team: String,
        pool: String,
        draft: app::model::QuotaDraft,
        version: i64,
    ) -> Result<QuotaCell, ApiError> {
        let result: Result<_, Error> = async {
            let q = QuotaEdit::from_draft(&draft)?;
            let address = crate::context::current_client_addr();
            self.set_quota(viewer, &team, &pool, q, Some(version), address)
                .await
        }
        .await;
        result.map_err(ApiError::from)
    }

    async fn preview_quota(
        &self,
        viewer: &Viewer,
        team: String,
        pool: String,
        draft: app::model::QuotaDraft,
    ) -> Result<QuotaPreview, ApiError> {
        let result: Result<_, Error> = async {
            let q = QuotaEdit::from_draft(&draft)?;
            self.preview_quotas(viewer, vec![(team, pool, q)], 30).await
        }
        .await;
        // One cell's form: its fields by their own names, not as the API's `changes[0].team`.
        result.map_err(|mut e| {
            if let Some(f) = e
                .field
                .as_deref()
                .and_then(|f| f.strip_prefix("changes[0]."))
            {
                e.field = Some(f.to_string());
            }
            ApiError::from(e)
        })
    }

    async fn save_template(
        &self,
        viewer: &Viewer,
        name: Option<String>,
        definition: String,
    ) -> Result<Template, ApiError> {
        Portal::save_template(self, viewer, name, definition)
            .await
            .map_err(ApiError::from)
    }

    async fn deprecate_template(&self, viewer: &Viewer, name: String) -> Result<(), ApiError> {
        let result: Result<_, Error> = async {
            let address = crate::context::current_client_addr();
            Portal::deprecate_template(self, viewer, &name, address).await
        }
        .await;
        result.map_err(ApiError::from)
    }

    async fn audit_records(
        &self,
        viewer: &Viewer,
        actor: Option<String>,
        action: Option<String>,
        target: Option<String>,
        cursor: Option<String>,
    ) -> Result<AuditList, ApiError> {
        Portal::audit_records(self, viewer, actor, action, target, cursor)
            .await
            .map_err(ApiError::from)
    }

    fn manifests_available(&self) -> bool {
        self.cluster.has_manifests()
    }

    async fn launch_manifest(
        &self,
        viewer: &Viewer,
        req: LaunchRequest,
    ) -> Result<Option<String>, ApiError> {
        Portal::launch_manifest(self, viewer, req)
            .await
            .map_err(ApiError::from)
    }

    async fn launch_job(
        &self,
        viewer: &Viewer,
        req: LaunchRequest,
        key: Option<String>,
    ) -> Result<(Job, bool), ApiError> {
        Portal::launch_job(self, viewer, req, key)
            .await
            .map_err(ApiError::from)
    }

    async fn list_jobs(&self, viewer: &Viewer, filter: JobFilter) -> Result<JobList, ApiError> {
        Portal::list_jobs(self, viewer, filter)
            .await
            .map_err(ApiError::from)
    }

    async fn get_job(&self, viewer: &Viewer, id: &str) -> Result<Job, ApiError> {
        Portal::get_job(self, viewer, id)
            .await
            .map_err(ApiError::from)
    }

    async fn cancel_job(&self, viewer: &Viewer, id: &str) -> Result<Job, ApiError> {
        Portal::cancel_job(self, viewer, id)
            .await
            .map_err(ApiError::from)
    }

    async fn job_logs(
        &self,
        viewer: &Viewer,
        id: &str,
        rank: Option<u32>,
        tail: usize,
    ) -> Result<JobLogs, ApiError> {
        let q = crate::cluster::LogQuery {
            ranks: rank.map_or(crate::cluster::Ranks::All, crate::cluster::Ranks::One),
            tail: Some(tail.clamp(1, crate::domain::logs::MAX_LINES_PER_READ)),
            since: None,
        };
        Portal::job_logs(self, viewer, id, q)
            .await
            .map_err(ApiError::from)
    }

    async fn notifications(&self, viewer: &Viewer) -> Result<NotificationList, ApiError> {
        Portal::notifications(self, viewer)
            .await
            .map_err(ApiError::from)
    }

    async fn mark_notifications_read(&self, viewer: &Viewer) -> Result<NotificationList, ApiError> {
        Portal::mark_notifications_read(self, viewer, None)
            .await
            .map_err(ApiError::from)
    }

    async fn notification_settings(
        &self,
        viewer: &Viewer,
    ) -> Result<NotificationSettings, ApiError> {
        Portal::notification_settings(self, viewer)
            .await
            .map_err(ApiError::from)
    }

    async fn save_notification_prefs(
        &self,
        viewer: &Viewer,
        prefs: Vec<NotificationPref>,
    ) -> Result<NotificationSettings, ApiError> {
        Portal::save_notification_prefs(self, viewer, prefs)
            .await
            .map_err(ApiError::from)
    }

    async fn create_webhook(
        &self,
        viewer: &Viewer,
        req: NewWebhook,
    ) -> Result<CreatedWebhook, ApiError> {
        Portal::create_webhook(self, viewer, req)
            .await
            .map_err(ApiError::from)
    }

    async fn delete_webhook(&self, viewer: &Viewer, id: &str) -> Result<(), ApiError> {
        Portal::delete_webhook(self, viewer, id)
            .await
            .map_err(ApiError::from)
    }

    async fn webhook_deliveries(
        &self,
        viewer: &Viewer,
        id: &str,
    ) -> Result<Vec<DeliveryInfo>, ApiError> {
        Portal::webhook_deliveries(self, viewer, id)
            .await
            .map_err(ApiError::from)
    }

    async fn rerun_job(
        &self,
        viewer: &Viewer,
        id: &str,
        use_current_version: bool,
        idempotency_key: Option<String>,
    ) -> Result<Job, ApiError> {
        let opts = RerunRequest {
            use_current_version,
        };
        Portal::rerun_job(self, viewer, id, opts, idempotency_key)
            .await
            .map(|(job, _)| job)
            .map_err(ApiError::from)
    }

    async fn sign_in_options(
        &self,
        parts: &http::request::Parts,
    ) -> Result<SignInOptions, ApiError> {
        Portal::sign_in_options(self, parts)
            .await
            .map_err(ApiError::from)
    }

    async fn list_tokens(&self, viewer: &Viewer) -> Result<Vec<ApiTokenInfo>, ApiError> {
        Portal::list_tokens(self, viewer)
            .await
            .map_err(ApiError::from)
    }

    async fn create_token(
        &self,
        viewer: &Viewer,
        name: String,
        expires_in_days: Option<u32>,
    ) -> Result<NewApiToken, ApiError> {
        Portal::create_token(self, viewer, name, expires_in_days)
            .await
            .map_err(ApiError::from)
    }

    async fn pool_grids(&self, viewer: &Viewer) -> Result<Vec<PoolGrid>, ApiError> {
        Portal::pool_grids(self, viewer)
            .await
            .map_err(ApiError::from)
    }

    async fn job_gpu_panel(&self, viewer: &Viewer, id: &str) -> Result<GpuPanelData, ApiError> {
        Portal::job_gpu_panel(self, viewer, id)
            .await
            .map_err(ApiError::from)
    }

    async fn usage_view(
        &self,
        viewer: &Viewer,
        days: u32,
        group_by: String,
        bucket: String,
    ) -> Result<UsageView, ApiError> {
        Portal::usage_view(self, viewer, days, group_by, bucket)
            .await
            .map_err(ApiError::from)
    }

    async fn revoke_token(&self, viewer: &Viewer, id: &str) -> Result<(), ApiError> {
        Portal::revoke_token(self, viewer, id)
            .await
            .map_err(ApiError::from)
    }

    async fn live_tokens(
        &self,
        viewer: &Viewer,
        user: Option<String>,
        cursor: Option<String>,
    ) -> Result<UserApiTokens, ApiError> {
        Portal::live_tokens(self, viewer, user, cursor.as_deref(), None)
            .await
            .map_err(ApiError::from)
    }

    fn now(&self) -> DateTime<Utc> {
        self.cluster.now()
    }

    fn live_seq(&self) -> u64 {
        Portal::live_seq(self)
    }
}
