//! Server functions: read the session, call one backend method, return a data type.

use leptos::prelude::*;
use leptos::server_fn::codec::Json;

use crate::error::ApiError;
use crate::model::*;

/// What a request's server functions answer, by key, once per request. Leptos 0.8 may build
/// a `Transition`'s content more than once on the server (its boundary walks the children
/// again once the first resources are in, to find the nested ones, then builds them for
/// real), and the job page's GPU panel then asked for the job's utilization two or three
/// times per render (it now comes with the job), the calls overlapping. [`crate::components::built_once`] now keeps that
/// walk from building the view; this keeps any view built again from reading again. A call
/// that finds its key being read waits for that answer. The server gives each request its
/// own (`memo_viewer`); clones share it.
#[cfg(feature = "ssr")]
#[derive(Clone, Default)]
pub struct RequestMemo(
    std::sync::Arc<
        std::sync::Mutex<
            std::collections::HashMap<String, std::sync::Arc<dyn std::any::Any + Send + Sync>>,
        >,
    >,
);

#[cfg(feature = "ssr")]
impl RequestMemo {
    /// The answer to `key`: `read`'s, unless this request has read it or is reading it. A
    /// key names one type of answer (another type under the same key is read again).
    pub async fn once<T, F>(&self, key: String, read: impl FnOnce() -> F) -> T
    where
        T: Clone + Send + Sync + 'static,
        F: std::future::Future<Output = T>,
    {
        type Cell<T> = tokio::sync::OnceCell<T>;
        let cell = {
            let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
            match map
                .get(&key)
                .and_then(|c| c.clone().downcast::<Cell<T>>().ok())
            {
                Some(c) => c,
                None => {
                    let c = std::sync::Arc::new(Cell::<T>::new());
                    map.insert(key, c.clone());
                    c
                }
            }
        };
        // Should the call reading it be dropped, the next one waiting reads instead.
        cell.get_or_init(read).await.clone()
    }
}

#[cfg(feature = "ssr")]
mod ssr {
    use crate::backend::SharedBackend;
    use crate::error::ApiError;
    use crate::model::Viewer;
    use leptos::prelude::use_context;

    /// `read`'s answer, once per request and `key` (see [`super::RequestMemo`]).
    pub async fn once<T, F>(key: String, read: impl FnOnce() -> F) -> T
    where
        T: Clone + Send + Sync + 'static,
        F: std::future::Future<Output = T>,
    {
        let memo = use_context::<http::request::Parts>()
            .and_then(|p| p.extensions.get::<super::RequestMemo>().cloned());
        match memo {
            Some(m) => m.once(key, read).await,
            None => read().await,
        }
    }

    /// Job `id`'s GPU panel figures as `viewer` may see them, once per request however often
    /// they are asked for (see RequestMemo).
    pub async fn utilization(
        backend: &SharedBackend,
        viewer: &Viewer,
        id: &str,
    ) -> Result<crate::model::GpuPanelData, ApiError> {
        once(format!("job_utilization {id}"), || async {
            backend.job_gpu_panel(viewer, id).await
        })
        .await
    }

    pub fn backend() -> Result<SharedBackend, ApiError> {
        use_context::<SharedBackend>()
            .ok_or_else(|| ApiError::new(crate::error::ErrorCode::Internal, "backend missing"))
    }

    /// The backend and the signed-in user, or 401.
    pub async fn backend_and_viewer() -> Result<(SharedBackend, Viewer), ApiError> {
        let backend = backend()?;
        let parts = use_context::<http::request::Parts>()
            .ok_or_else(|| ApiError::new(crate::error::ErrorCode::Internal, "request missing"))?;
        let viewer = backend
            .viewer(&parts)
            .await?
            .ok_or_else(ApiError::unauthorized)?;
        Ok((backend, viewer))
    }
}

#[server]
pub async fn get_viewer() -> Result<Option<PageViewer>, ApiError> {
    let backend = ssr::backend()?;
    let parts = use_context::<http::request::Parts>();
    let Some(viewer) = (match parts {
        Some(parts) => backend.viewer(&parts).await?,
        None => None,
    }) else {
        return Ok(None);
    };
    Ok(Some(PageViewer {
        viewer,
        pools: backend.pool_names().await?,
    }))
}

#[server]
pub async fn get_sign_in_options() -> Result<SignInOptions, ApiError> {
    let backend = ssr::backend()?;
    match use_context::<http::request::Parts>() {
        Some(parts) => backend.sign_in_options(&parts).await,
        None => Ok(SignInOptions::default()),
    }
}

#[server]
pub async fn list_api_tokens() -> Result<Vec<ApiTokenInfo>, ApiError> {
    let (backend, viewer) = ssr::backend_and_viewer().await?;
    backend.list_tokens(&viewer).await
}

#[server(input = Json)]
pub async fn create_api_token(
    name: String,
    expires_in_days: Option<u32>,
) -> Result<NewApiToken, ApiError> {
    let (backend, viewer) = ssr::backend_and_viewer().await?;
    backend.create_token(&viewer, name, expires_in_days).await
}

#[server]
pub async fn revoke_api_token(id: String) -> Result<(), ApiError> {
    let (backend, viewer) = ssr::backend_and_viewer().await?;
    backend.revoke_token(&viewer, &id).await
}

/// A page of every user's live API tokens, or of `user`'s (the admins' Tokens page).
#[server]
pub async fn admin_api_tokens(
    user: Option<String>,
    cursor: Option<String>,
) -> Result<UserApiTokens, ApiError> {
    let (backend, viewer) = ssr::backend_and_viewer().await?;
    backend.live_tokens(&viewer, user, cursor).await
}

#[server]
pub async fn get_home() -> Result<HomeView, ApiError> {
    let (backend, viewer) = ssr::backend_and_viewer().await?;
    backend.home(&viewer).await
}

#[server]
pub async fn list_templates() -> Result<Vec<Template>, ApiError> {
    let (backend, viewer) = ssr::backend_and_viewer().await?;
    backend.list_templates(&viewer).await
}

/// A page of the catalogue by name (the admins' Templates page); `q` searches it.
#[server]
pub async fn templates_page(
    q: Option<String>,
    cursor: Option<String>,
) -> Result<TemplateList, ApiError> {
    let (backend, viewer) = ssr::backend_and_viewer().await?;
    backend.templates_page(&viewer, q, cursor, None).await
}

#[server]
pub async fn list_pools() -> Result<Vec<Pool>, ApiError> {
    let (backend, viewer) = ssr::backend_and_viewer().await?;
    backend.list_pools(&viewer).await
}

#[server(input = Json)]
pub async fn check_launch(req: LaunchRequest) -> Result<LaunchCheck, ApiError> {
    let (backend, viewer) = ssr::backend_and_viewer().await?;
    backend.check_launch(&viewer, req).await
}

#[server]
pub async fn admin_quotas() -> Result<Vec<QuotaCell>, ApiError> {
    let (backend, viewer) = ssr::backend_and_viewer().await?;
    backend.quota_cells(&viewer).await
}

#[server]
pub async fn save_quota(
    team: String,
    pool: String,
    draft: QuotaDraft,
    version: i64,
) -> Result<QuotaCell, ApiError> {
    let (backend, viewer) = ssr::backend_and_viewer().await?;
    backend
        .save_quota(&viewer, team, pool, draft, version)
        .await
}

#[server]
pub async fn preview_quota(
    team: String,
    pool: String,
    draft: QuotaDraft,
) -> Result<QuotaPreview, ApiError> {
    let (backend, viewer) = ssr::backend_and_viewer().await?;
    backend.preview_quota(&viewer, team, pool, draft).await
}

#[server]
pub async fn save_template(name: Option<String>, definition: String) -> Result<Template, ApiError> {
    let (backend, viewer) = ssr::backend_and_viewer().await?;
    backend.save_template(&viewer, name, definition).await
}

#[server]
pub async fn deprecate_template(name: String) -> Result<(), ApiError> {
    let (backend, viewer) = ssr::backend_and_viewer().await?;
    backend.deprecate_template(&viewer, name).await
}

#[server]
pub async fn audit_records(
    actor: Option<String>,
    action: Option<String>,
    target: Option<String>,
    cursor: Option<String>,
) -> Result<AuditList, ApiError> {
    let (backend, viewer) = ssr::backend_and_viewer().await?;
    backend
        .audit_records(&viewer, actor, action, target, cursor)
        .await
}

#[server]
pub async fn manifests_available() -> Result<bool, ApiError> {
    let (backend, _viewer) = ssr::backend_and_viewer().await?;
    Ok(backend.manifests_available())
}

#[server(input = Json)]
pub async fn launch_manifest(req: LaunchRequest) -> Result<Option<String>, ApiError> {
    let (backend, viewer) = ssr::backend_and_viewer().await?;
    backend.launch_manifest(&viewer, req).await
}

#[server(input = Json)]
pub async fn launch_job(req: LaunchRequest, idempotency_key: String) -> Result<Job, ApiError> {
    let (backend, viewer) = ssr::backend_and_viewer().await?;
    let key = (!idempotency_key.is_empty()).then_some(idempotency_key);
    backend
        .launch_job(&viewer, req, key)
        .await
        .map(|(job, _)| job)
}

/// What the Jobs page's URL asks for: `state`, `scope` (`team` or `mine`), and the search,
/// filters and page as `GET /api/v1/jobs` takes them.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct JobsPageQuery {
    pub state: Option<String>,
    pub scope: Option<String>,
    pub q: Option<String>,
    pub pool: Option<String>,
    pub user: Option<String>,
    pub team: Option<String>,
    pub from: Option<String>,
    pub to: Option<String>,
    pub cursor: Option<String>,
}

impl JobsPageQuery {
    /// The list this URL asks for. An unknown state is an error naming `state`.
    pub fn filter(&self) -> Result<crate::model::JobFilter, ApiError> {
        let state = match self.state.as_deref() {
            None | Some("") | Some("all") => None,
            Some(s) => Some(
                JobState::parse(s)
                    .ok_or_else(|| ApiError::invalid("state", format!("unknown state '{s}'")))?,
            ),
        };
        let some = |v: &Option<String>| v.clone().filter(|v| !v.trim().is_empty());
        Ok(crate::model::JobFilter {
            state,
            team: some(&self.team),
            mine: self.scope.as_deref() == Some("mine"),
            user: some(&self.user),
            pool: some(&self.pool),
            q: some(&self.q),
            from: some(&self.from),
            to: some(&self.to),
            cursor: some(&self.cursor),
            ..Default::default()
        })
    }
}

#[server]
pub async fn list_jobs(query: JobsPageQuery) -> Result<JobList, ApiError> {
    let filter = query.filter()?;
    let (backend, viewer) = ssr::backend_and_viewer().await?;
    backend.list_jobs(&viewer, filter).await
}

#[server]
pub async fn get_job(id: String) -> Result<JobPage, ApiError> {
    let (backend, viewer) = ssr::backend_and_viewer().await?;
    let job = backend.get_job(&viewer, &id).await?;
    // The GPU panel's first figures come with the job (see `JobPage::util`).
    let util = match job.admitted_at {
        Some(_) => Some(ssr::utilization(&backend, &viewer, &id).await),
        None => None,
    };
    Ok(JobPage {
        job,
        now: backend.now(),
        util,
    })
}

#[server]
pub async fn cancel_job(id: String) -> Result<Job, ApiError> {
    let (backend, viewer) = ssr::backend_and_viewer().await?;
    backend.cancel_job(&viewer, &id).await
}

#[server]
pub async fn get_job_logs(id: String, rank: Option<u32>, tail: usize) -> Result<JobLogs, ApiError> {
    let (backend, viewer) = ssr::backend_and_viewer().await?;
    backend.job_logs(&viewer, &id, rank, tail).await
}

#[server]
pub async fn rerun_job(
    id: String,
    use_current_version: bool,
    idempotency_key: String,
) -> Result<Job, ApiError> {
    let (backend, viewer) = ssr::backend_and_viewer().await?;
    let key = (!idempotency_key.is_empty()).then_some(idempotency_key);
    backend
        .rerun_job(&viewer, &id, use_current_version, key)
        .await
}

#[server]
pub async fn get_notifications() -> Result<NotificationList, ApiError> {
    let (backend, viewer) = ssr::backend_and_viewer().await?;
    backend.notifications(&viewer).await
}

#[server]
pub async fn mark_all_notifications_read() -> Result<NotificationList, ApiError> {
    let (backend, viewer) = ssr::backend_and_viewer().await?;
    backend.mark_notifications_read(&viewer).await
}

#[server]
pub async fn get_notification_settings() -> Result<NotificationSettings, ApiError> {
    let (backend, viewer) = ssr::backend_and_viewer().await?;
    backend.notification_settings(&viewer).await
}

#[server(input = Json)]
pub async fn save_notification_prefs(
    prefs: Vec<NotificationPref>,
) -> Result<NotificationSettings, ApiError> {
    let (backend, viewer) = ssr::backend_and_viewer().await?;
    backend.save_notification_prefs(&viewer, prefs).await
}

#[server(input = Json)]
pub async fn create_webhook(req: NewWebhook) -> Result<CreatedWebhook, ApiError> {
    let (backend, viewer) = ssr::backend_and_viewer().await?;
    backend.create_webhook(&viewer, req).await
}

#[server]
pub async fn delete_webhook(id: String) -> Result<(), ApiError> {
    let (backend, viewer) = ssr::backend_and_viewer().await?;
    backend.delete_webhook(&viewer, &id).await
}

#[server]
pub async fn get_webhook_deliveries(id: String) -> Result<Vec<DeliveryInfo>, ApiError> {
    let (backend, viewer) = ssr::backend_and_viewer().await?;
    backend.webhook_deliveries(&viewer, &id).await
}

#[server]
pub async fn get_usage(days: u32, group_by: String, bucket: String) -> Result<UsageView, ApiError> {
    let (backend, viewer) = ssr::backend_and_viewer().await?;
    backend.usage_view(&viewer, days, group_by, bucket).await
}

#[server]
pub async fn get_job_utilization(id: String) -> Result<GpuPanelData, ApiError> {
    let (backend, viewer) = ssr::backend_and_viewer().await?;
    ssr::utilization(&backend, &viewer, &id).await
}

#[server]
pub async fn get_pool_grids() -> Result<Vec<PoolGrid>, ApiError> {
    let (backend, viewer) = ssr::backend_and_viewer().await?;
    backend.pool_grids(&viewer).await
}
