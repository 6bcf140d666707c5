//! Wires the parts together: database, cluster, reconciler, sessions, routes, and serves.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use app::backend::SharedBackend;
use app::model::JobState;
use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use axum::Router;
use leptos::config::LeptosOptions;
use leptos::prelude::provide_context;
use leptos_axum::{generate_route_list, LeptosRoutes};
use secrecy::ExposeSecret;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tower_http::trace::TraceLayer;
use tower_sessions::cookie::SameSite;
use tower_sessions::{Expiry, SessionManagerLayer};
use tracing::Span;

use crate::clock::Clock;
use crate::cluster::k8s::KubeCluster;
use crate::cluster::sim::{RestoredWorkload, SimCluster};
use crate::cluster::{Cluster, PoolSpec};
use crate::config::{ClockMode, ClusterBackend, Config};
use crate::db::Db;
use crate::http::session_store::DbSessionStore;
pub use crate::http::state::AppState;
use crate::service::Portal;

/// A running Gantry: its address and the means to stop it.
pub struct Running {
    pub addr: SocketAddr,
    pub portal: Arc<Portal>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    server: JoinHandle<()>,
    tasks: Vec<JoinHandle<()>>,
    db: Db,
    assets: Arc<crate::http::assets::AssetCache>,
    leptos_options: LeptosOptions,
    /// The page cache (`server.page_cache_ms`): the page benchmark measures with and without.
    pub pages: Arc<crate::http::page_cache::PageCache>,
}

impl Running {
    /// The pages' reads kept in memory (`db::memo`): the page benchmark measures with and
    /// without.
    pub fn read_memo(&self) -> &crate::db::memo::ReadMemo {
        self.db.read_memo()
    }

    /// Compresses the site's files in the background now, so that no first page load waits
    /// for it (the binary does; the many short-lived test servers do not).
    pub fn warm_assets(&mut self) {
        let (assets, options) = (self.assets.clone(), self.leptos_options.clone());
        self.tasks.push(tokio::spawn(async move {
            assets.warm(&options.site_root, &options.site_pkg_dir).await;
        }));
    }

    /// Stops serving, stops the background work and saves the sim clock.
    pub async fn stop(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        let _ = tokio::time::timeout(Duration::from_secs(10), &mut self.server).await;
        for t in &self.tasks {
            t.abort();
        }
        let save = self.db.save_sim_clock(self.portal.cluster().now());
        match tokio::time::timeout(Duration::from_secs(10), save).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "could not save the sim clock at shutdown"),
            Err(_) => tracing::warn!("could not save the sim clock at shutdown: no answer in 10 s"),
        }
        // The pool closes when every connection is back; a request still running after the
        // server's grace period may hold one: shutdown does not wait for it forever.
        if tokio::time::timeout(Duration::from_secs(10), self.db.close())
            .await
            .is_err()
        {
            tracing::warn!("database connections still in use 10 s after shutdown; leaving them");
        }
    }
}

/// The Leptos options when not run by cargo-leptos (tests, or the binary started directly).
/// The site's file names carry content hashes (`hash-files` in Cargo.toml); cargo-leptos
/// writes them to `hash.txt` beside the binary (a test binary is one directory below it).
pub fn leptos_options() -> LeptosOptions {
    let site_root = std::env::var("LEPTOS_SITE_ROOT").unwrap_or_else(|_| "target/site".into());
    let hash_file = std::env::current_exe().ok().and_then(|exe| {
        exe.ancestors()
            .skip(1)
            .take(2)
            .map(|dir| dir.join("hash.txt"))
            .find(|f| f.is_file())
    });
    let builder = LeptosOptions::builder()
        .output_name("gantry")
        .site_root(site_root)
        .site_pkg_dir("pkg");
    match hash_file {
        // Absolute: Leptos joins it to the binary's directory.
        Some(f) => builder
            .hash_files(true)
            .hash_file(Arc::<str>::from(f.to_string_lossy().as_ref()))
            .build(),
        None => builder.build(),
    }
}

/// The pools as the cluster back ends see them, with the configured queueing strategy.
async fn pool_specs(config: &Config, db: &Db) -> anyhow::Result<Vec<PoolSpec>> {
    let pools = crate::db::pool_specs(db.list_pools().await?, &config.sim.strict_fifo_pools);
    if let Some(unknown) = config
        .sim
        .strict_fifo_pools
        .iter()
        .find(|n| !pools.iter().any(|p| &p.name == *n))
    {
        anyhow::bail!(
            "invalid configuration: sim.strict_fifo_pools: there is no pool named '{unknown}'"
        );
    }
    Ok(pools)
}

async fn build_sim(
    config: &Config,
    db: &Db,
    pools: &[PoolSpec],
) -> anyhow::Result<Arc<SimCluster>> {
    // The sim clock resumes where it stopped; on first start it begins at the real time.
    let start = db.sim_clock().await?.unwrap_or_else(chrono::Utc::now);
    let clock = match config.sim.clock {
        ClockMode::Scaled => Clock::scaled(start, config.sim.time_scale),
        ClockMode::Manual => Clock::manual(start),
    };
    Ok(Arc::new(SimCluster::new(
        clock,
        config.sim.startup_s,
        pools,
    )))
}

/// Connects to Kubernetes, applies the stored quotas to the ClusterQueues (a refusal is
/// logged, not fatal: the portal keeps serving) and starts watching Kueue's workloads.
async fn build_kube(
    config: &Config,
    db: &Db,
    pools: Vec<PoolSpec>,
) -> anyhow::Result<Arc<KubeCluster>> {
    let kube = Arc::new(KubeCluster::connect(config.kube.clone(), pools).await?);
    for q in db.list_quotas().await? {
        kube.know_quota(&q.team, &q.pool, q.quota);
        if let Err(e) = kube.set_quota(&q.team, &q.pool, q.quota).await {
            tracing::warn!(team = %q.team, pool = %q.pool, error = %e, "could not apply the quota to its ClusterQueue");
        }
    }
    Ok(kube)
}

/// Rebuilds the sim's state from the database: quotas, then jobs holding GPUs on their
/// nodes, then the queue in submission order.
async fn restore_sim(sim: &SimCluster, db: &Db) -> anyhow::Result<()> {
    for q in db.list_quotas().await? {
        sim.set_quota(&q.team, &q.pool, q.quota).await?;
    }
    let mut admitted = Vec::new();
    let mut queued = Vec::new();
    for row in db.active_jobs().await? {
        // The sim runs no containers; it reads only the parameters (`sim_fail_after_s`).
        let run = crate::cluster::RunSpec {
            params: row
                .params
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            ..Default::default()
        };
        let spec = crate::service::stored_workload(&row, run);
        // Its earlier runs, ended by preemption, count toward its max runtime.
        let past_run_s = |row: &crate::db::JobRow| {
            let id = row.id.clone();
            async move {
                Ok::<i64, anyhow::Error>(
                    db.job_intervals(&id)
                        .await?
                        .iter()
                        .filter_map(|(_, start, end, _)| end.map(|e| (e - *start).num_seconds()))
                        .sum(),
                )
            }
        };
        match (row.state, row.admitted_at) {
            (JobState::Admitted | JobState::Running, Some(at)) => admitted.push(RestoredWorkload {
                past_run_s: past_run_s(&row).await?,
                spec,
                admitted_at: at,
                nodes: row.node_names.clone(),
                running: row.state == JobState::Running,
            }),
            // Only jobs that reached the cluster before; the others are sent by the reconciler.
            (JobState::Queued, _) if row.sent_at.is_some() => {
                queued.push((spec, past_run_s(&row).await?))
            }
            _ => {}
        }
    }
    tracing::info!(
        admitted = admitted.len(),
        queued = queued.len(),
        "sim restored from the database"
    );
    sim.restore(admitted, queued);
    Ok(())
}

/// Where people reach Gantry: `server.public_url`, else the origin of the OIDC redirect URL,
/// else the listen address.
fn public_url(config: &Config, bound: SocketAddr) -> String {
    if let Some(u) = &config.server.public_url {
        return u.trim_end_matches('/').to_string();
    }
    if let Some(o) = &config.auth.oidc {
        if let Ok(u) = url::Url::parse(&o.redirect_url) {
            return u.origin().ascii_serialization();
        }
    }
    format!("http://{bound}")
}

/// Starts Gantry with `config` and serves until [`Running::stop`].
pub async fn start(config: Config, leptos_options: LeptosOptions) -> anyhow::Result<Running> {
    let config = Arc::new(config);
    let url = config.database.url.expose_secret().to_string();
    let db = Db::connect(&url, config.database.max_connections).await?;
    // The reads every page makes (who is signed in, a page of jobs, the pools' rows), answered
    // from memory while nothing is written, at most as stale as a cached page (`db::memo`).
    db.read_memo()
        .set_ttl(Duration::from_millis(config.server.page_cache_ms));
    if config.demo.seed && crate::seed::seed_catalog(&db, chrono::Utc::now()).await? {
        tracing::info!("seeded the demo pools, teams, users and templates");
    }
    let no_jobs_yet = db
        .list_jobs(&crate::db::JobQuery {
            limit: 1,
            ..Default::default()
        })
        .await?
        .is_empty();
    let seeded_jobs_wanted = config.demo.seed && config.demo.jobs && no_jobs_yet;
    // Made-up GPU-hours belong in a demo, never in a real cluster's accounting.
    let history_wanted = config.demo.seed && config.demo.history && no_jobs_yet;
    if history_wanted && config.cluster.backend == ClusterBackend::Sim {
        let n = crate::seed::seed_history(&db, chrono::Utc::now()).await?;
        tracing::info!(jobs = n, "seeded 30 days of demo history");
    } else if history_wanted {
        tracing::info!("demo history is seeded only with the sim cluster; not on Kubernetes");
    }

    let pools = pool_specs(&config, &db).await?;
    let mut sim = None;
    let mut kube = None;
    let cluster: Arc<dyn Cluster> = match config.cluster.backend {
        ClusterBackend::Sim => sim.insert(build_sim(&config, &db, &pools).await?).clone(),
        ClusterBackend::Kube => kube.insert(build_kube(&config, &db, pools).await?).clone(),
    };
    let (applied_tx, applied_rx) = watch::channel(0u64);
    let live_tx = crate::service::LiveTx::new(1024);
    let (writer, resync) = crate::workers::reconciler::spawn_event_writer(
        db.clone(),
        cluster.clone(),
        cluster.subscribe(),
        applied_tx,
        live_tx.clone(),
    );
    let mut tasks = vec![writer];
    if let Some(sim) = &sim {
        restore_sim(sim, &db).await?;
    }
    if let Some(kube) = &kube {
        // The watch's first list brings the database up to date with what the cluster did
        // while Gantry was down (the event writer applies only changes that move a job on).
        tasks.push(kube.spawn_watch());
        tasks.extend(kube.spawn_job_watches());
    }
    let metrics: Option<Arc<dyn crate::metrics::Metrics>> = match config.metrics_backend() {
        crate::config::MetricsBackend::Sim => Some(Arc::new(crate::metrics::SimMetrics::new(
            config.metrics.seed,
        ))),
        crate::config::MetricsBackend::Prometheus => {
            let p = &config.metrics.prometheus;
            let m = crate::metrics::prometheus::PrometheusMetrics::new(
                &p.url,
                std::time::Duration::from_secs_f64(p.timeout_s),
                &config.kube.namespace_prefix,
            )
            .map_err(|e| anyhow::anyhow!("metrics.prometheus.url: {e}"))?;
            tracing::info!(url = %crate::config::redact_url(&p.url), "GPU metrics from Prometheus");
            Some(Arc::new(m))
        }
        crate::config::MetricsBackend::None => None,
    };
    let tz = config.usage.tz();
    if db.reset_rollups_unless(tz).await? {
        tracing::info!(time_zone = %tz.name(), "accounting time zone changed: rebuilding the daily usage rollups");
    }
    let mut portal = Portal::new(
        db.clone(),
        cluster.clone(),
        applied_rx,
        live_tx,
        config.auth.dev_login(),
    );
    portal = portal
        .with_auth(&config.auth)
        .with_usage(&config.usage)
        .with_metrics(metrics.clone())
        .with_sim(sim.clone())
        .with_webhook_networks(config.server.webhook_nets());
    let portal = Arc::new(portal);
    if let Err(e) = crate::workers::reconciler::resend_unsent(&portal).await {
        tracing::warn!(error = %e, "could not send stored jobs at start");
    }
    portal.sync().await;
    // The cluster holds what it will from here on (the sim restored, the watch started): the
    // event writer compares the database with it now and every few seconds.
    resync.request();
    if seeded_jobs_wanted {
        seed_jobs(&portal).await?;
    }
    tasks.push(crate::workers::reconciler::spawn_resender(portal.clone()));
    tasks.push(crate::workers::keeper::spawn_keeper(
        portal.clone(),
        Duration::from_secs(2),
    ));
    tasks.extend(crate::workers::notifier::spawn(portal.clone()));
    tasks.push(crate::workers::recorder::spawn_recorder(
        db.clone(),
        metrics.clone(),
        tz,
    ));
    if sim.is_some() {
        tasks.push(crate::workers::reconciler::spawn_clock_saver(
            db.clone(),
            cluster.clone(),
        ));
    }
    if let (Some(sim), ClockMode::Scaled) = (&sim, config.sim.clock) {
        let ticker = sim.clone();
        tasks.push(tokio::spawn(async move {
            let mut every = tokio::time::interval(Duration::from_millis(250));
            loop {
                every.tick().await;
                ticker.tick();
            }
        }));
    }

    let store = DbSessionStore::connect(&url).await?;
    tasks.push(tokio::spawn(store.clone().delete_expired_forever()));
    let sessions = SessionManagerLayer::new(store.clone())
        .with_name("gantry_session")
        .with_http_only(true)
        .with_same_site(SameSite::Lax)
        .with_secure(config.auth.secure())
        .with_expiry(Expiry::OnInactivity(time::Duration::seconds_f64(
            config.auth.session_idle_minutes * 60.0,
        )));
    let oidc = match &config.auth.oidc {
        Some(o) => {
            let known = db.team_ids().await?;
            for (group, grant) in &o.groups {
                if let Some(crate::config::GroupGrant::Team { team, .. }) =
                    crate::config::GroupGrant::parse(grant)
                {
                    if !known.contains(&team) {
                        tracing::warn!(%group, %team, "auth.oidc.groups maps a group to a team Gantry does not have");
                    }
                }
            }
            Some(Arc::new(crate::http::oidc::Oidc::new(o.clone())?))
        }
        None => None,
    };

    let state = AppState::new(crate::http::state::AppParts {
        portal: portal.clone(),
        config: config.clone(),
        oidc,
        leptos_options: Arc::new(leptos_options.clone()),
        sessions: store,
        streams: Arc::default(),
        assets: Arc::default(),
        pages: Arc::new(crate::http::page_cache::PageCache::new(
            Duration::from_millis(config.server.page_cache_ms),
        )),
    });

    let assets = state.assets.clone();
    let pages = state.pages.clone();
    let app = router(state, sessions);

    let listener = tokio::net::TcpListener::bind(config.server.addr).await?;
    portal.set_public_url(public_url(&config, listener.local_addr()?));
    let addr = listener.local_addr()?;
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let limits = crate::http::serve::ConnLimits {
        header_read: Duration::from_secs_f64(config.server.header_read_timeout_s),
        idle: Duration::from_secs_f64(config.server.idle_timeout_s),
    };
    let server = tokio::spawn(crate::http::serve::serve(listener, app, limits, async {
        let _ = rx.await;
    }));
    tracing::info!(%addr, database = %crate::config::redact_url(&url), clock = ?config.sim.clock, "Gantry is serving");
    Ok(Running {
        addr,
        portal,
        shutdown: Some(tx),
        server,
        tasks,
        db,
        assets,
        leptos_options,
        pages,
    })
}

/// The page routes, built once per process. `generate_route_list` renders the app once with
/// leptos_server's process-wide `SuppressResourceLoad` flag set, and a `Resource` first
/// polled meanwhile by a page of *any* server in the process waits on `pending()` forever:
/// the page never answers (leptos-rs/leptos#4773; several servers in one process, as the
/// tests start, hit it). Built once, before the first server serves, nothing overlaps it.
pub fn route_list() -> Vec<leptos_axum::AxumRouteListing> {
    static ROUTES: std::sync::OnceLock<Vec<leptos_axum::AxumRouteListing>> =
        std::sync::OnceLock::new();
    ROUTES
        .get_or_init(|| generate_route_list(app::app::App))
        .clone()
}

fn router(state: AppState, sessions: SessionManagerLayer<DbSessionStore>) -> Router {
    use tower::ServiceBuilder;
    let routes = route_list();
    let backend: SharedBackend = state.portal.clone();
    let leptos_options = (*state.leptos_options).clone();
    let max_body = state.config.server.max_body_bytes;
    let body_timeout = Duration::from_secs_f64(state.config.server.body_timeout_s);
    let trusted =
        crate::http::request_id::TrustedProxies(Arc::new(state.config.server.trusted_proxy_nets()));
    let mut app = Router::new()
        .merge(crate::http::api::routes())
        .route("/auth/logout", post(crate::http::auth::logout));
    if state.config.auth.dev_login() {
        app = app.route("/auth/dev/login", post(crate::http::auth::dev_login));
    }
    if state.oidc.is_some() {
        app = app
            .route("/auth/login", get(crate::http::auth::oidc_login))
            .route("/auth/callback", get(crate::http::auth::oidc_callback));
    }
    // The site's file names, read from the build's hash file once rather than on every page.
    let site_files = app::site::SiteFiles::read(&leptos_options);
    let page_context = move || {
        provide_context(backend.clone());
        provide_context(site_files.clone());
        page_security_policy();
    };
    let app = app
        .leptos_routes_with_context(&state, routes, page_context.clone(), {
            let options = leptos_options.clone();
            move || app::app::shell(options.clone())
        })
        .fallback(leptos_axum::file_and_error_handler_with_context::<
            AppState,
            _,
        >(page_context, app::app::shell))
        .with_state(state.clone());
    // The middleware wraps each router whole, once, not each of its routes (`Router::layer`):
    // there each layer boxes the next, and every request cloned the whole boxed chain under
    // every `from_fn` layer, a few hundred boxed clones per request, about a third of what
    // `/login` cost to answer (callgrind, the page benchmark). Here a clone is of the layers'
    // own fields and the router's `Arc`. Outermost first.
    let app = ServiceBuilder::new()
        // gzip or brotli as the client accepts, for what is worth it (not event streams or images).
        .layer(tower_http::compression::CompressionLayer::new())
        .layer(axum::middleware::from_fn(response_headers))
        .layer(axum::middleware::from_fn({
            let cache = state.assets.clone();
            move |req, next| crate::http::assets::compressed_pkg(cache.clone(), req, next)
        }))
        .layer(axum::middleware::from_fn(
            crate::http::request_id::middleware,
        ))
        .layer(
            TraceLayer::new_for_http()
                .make_span_with(request_span)
                .on_request(())
                .on_response(|res: &http::Response<_>, latency: Duration, _span: &Span| {
                    log_served(res.status(), latency)
                }),
        )
        .layer(sessions.clone())
        .layer(axum::middleware::from_fn(move |req, next| {
            crate::http::serve::body_deadline(body_timeout, max_body, req, next)
        }))
        .layer(DefaultBodyLimit::max(max_body))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            crate::http::csrf::csrf_guard,
        ))
        // One viewer per request, however many server functions a page renders.
        .layer(axum::middleware::from_fn(crate::service::memo_viewer))
        // A page asked for again by the same session while nothing changed: answered after the
        // session is read, before the page's viewer or data are.
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            crate::http::page_cache::page_cache,
        ))
        .layer(axum::middleware::from_fn(server_fn_status))
        .service(app);
    // The live stream: the session (who holds it), its log line, its id and the headers, and
    // nothing that would wrap its body for as long as it is open (compression never applies to
    // an event stream; tracing's layer would keep the request's span for hours).
    let live = ServiceBuilder::new()
        .layer(axum::middleware::from_fn(response_headers))
        .layer(axum::middleware::from_fn(
            crate::http::request_id::middleware,
        ))
        .layer(sessions)
        .layer(axum::middleware::from_fn(log_stream))
        .service(crate::http::api::live_routes().with_state(state.clone()));
    let app = Router::new()
        .route_service(crate::http::api::LIVE_PATH, live)
        .fallback_service(app);
    // Outermost: who the forwarded headers may be believed from, for every layer inside, then
    // the demo sign-in's guard (it answers only to this machine's names: DNS rebinding), then
    // no Leptos owner left on the thread by another request's page (http/fresh_owner.rs).
    let dev_login = state.config.auth.dev_login();
    let app = ServiceBuilder::new()
        .layer(axum::Extension(trusted))
        .layer(axum::middleware::from_fn(move |req, next| async move {
            if dev_login {
                crate::http::csrf::loopback_host_only(req, next).await
            } else {
                next.run(req).await
            }
        }))
        .layer(axum::middleware::from_fn(
            crate::http::fresh_owner::middleware,
        ))
        .service(app);
    Router::new().fallback_service(app)
}

/// A request's span: its id, method and path, on every line logged while it is served.
fn request_span<B>(req: &http::Request<B>) -> Span {
    let id = req
        .headers()
        .get(crate::http::request_id::HEADER)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("-");
    tracing::info_span!("request", id = %id, method = %req.method(), path = %req.uri().path())
}

/// A request's `served` line, written when its answer starts.
fn log_served(status: http::StatusCode, latency: Duration) {
    tracing::info!(
        status = status.as_u16(),
        latency_ms = latency.as_secs_f64() * 1000.0,
        "served"
    );
}

/// The span and `served` line of a live stream, as `TraceLayer` gives every other request,
/// without wrapping its body.
async fn log_stream(
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use tracing::Instrument;
    let span = request_span(&req);
    let start = std::time::Instant::now();
    let res = next.run(req).instrument(span.clone()).await;
    span.in_scope(|| log_served(res.status(), start.elapsed()));
    res
}

/// The Content-Security-Policy of a server-rendered page, on the response being rendered:
/// scripts only from this origin or carrying this response's nonce (Leptos puts it on its
/// hydration and resource scripts), WebAssembly may be compiled, nothing may frame the page.
fn page_security_policy() {
    use leptos::prelude::use_context;
    let (Some(nonce), Some(res)) = (
        leptos::nonce::use_nonce(),
        use_context::<leptos_axum::ResponseOptions>(),
    ) else {
        // A site file or a server function (this context is theirs too): no page, no nonce.
        return;
    };
    let policy = format!(
        "default-src 'self'; script-src 'self' 'nonce-{nonce}' 'wasm-unsafe-eval'; \
         style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; \
         object-src 'none'; base-uri 'self'; frame-ancestors 'none'"
    );
    if let Ok(v) = http::HeaderValue::from_str(&policy) {
        res.insert_header(http::header::CONTENT_SECURITY_POLICY, v);
    }
}

/// Headers on every response: a strict Content-Security-Policy where a page did not set its
/// own (JSON, files, sign-in errors), no MIME sniffing, no referrer to other origins, and the
/// caching of the site's files: those under `/pkg` carry a content hash in their name and
/// never change, so they are cached for a year as immutable.
async fn response_headers(
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use http::header::{self, HeaderValue};
    let hashed_asset = req.uri().path().starts_with("/pkg/");
    let uri = req.uri().clone();
    let mut res = next.run(req).await;
    let status = res.status();
    let ok = status.is_success();
    let h = res.headers_mut();
    if let header::Entry::Vacant(e) = h.entry(header::CONTENT_SECURITY_POLICY) {
        e.insert(HeaderValue::from_static(crate::http::SCRIPTLESS_POLICY));
        // A page gets its own policy, with the nonce of its hydration scripts; one that went
        // without would never become interactive in a browser.
        let html = h
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/html"));
        if html {
            tracing::warn!(
                path = uri.path(),
                status = status.as_u16(),
                "an HTML answer without a page's own security policy"
            );
        }
    }
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("strict-origin-when-cross-origin"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    if hashed_asset && ok {
        h.insert(
            header::CACHE_CONTROL,
            HeaderValue::from_static("public, max-age=31536000, immutable"),
        );
    } else if !h.contains_key(header::CACHE_CONTROL) {
        // Pages and API answers depend on who asks: never from a shared cache.
        h.insert(
            header::CACHE_CONTROL,
            HeaderValue::from_static("private, no-cache"),
        );
    }
    res
}

/// Server functions answer every error with 500; give a refusal its real status (the
/// `ApiError` in the body says which), so a user's mistake is a 4xx, not a logged failure.
async fn server_fn_status(
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let is_server_fn = {
        let p = req.uri().path();
        p.starts_with("/api/") && !p.starts_with("/api/v1/")
    };
    let res = next.run(req).await;
    if !is_server_fn || res.status() != http::StatusCode::INTERNAL_SERVER_ERROR {
        return res;
    }
    let (mut parts, body) = res.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, 1 << 20).await else {
        return http::Response::from_parts(parts, axum::body::Body::empty());
    };
    if let Ok(e) = serde_json::from_slice::<app::error::ApiError>(&bytes) {
        if let Ok(s) = http::StatusCode::from_u16(e.status()) {
            parts.status = s;
        }
    }
    http::Response::from_parts(parts, axum::body::Body::from(bytes))
}

/// The demo's first jobs, launched through the same service as any user's.
async fn seed_jobs(portal: &Portal) -> anyhow::Result<()> {
    for (user, template, gpus, pool, hours) in crate::seed::DEMO_JOBS {
        let Some(viewer) = portal
            .viewer_by_id(user)
            .await
            .map_err(|e| anyhow::anyhow!(e.message))?
        else {
            continue;
        };
        let req = crate::seed::demo_launch(template, *gpus, pool, *hours);
        if let Err(e) = portal.launch_job(&viewer, req, None).await {
            tracing::warn!(user, template, error = %e.message, "demo job not launched");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use app::site::{Scripts, SiteFiles, Stylesheet};
    use leptos::prelude::*;
    use leptos_meta::HashedStylesheet;

    /// Gantry writes the site's files into each page's head as Leptos's own `HashedStylesheet`
    /// and `HydrationScripts` do, from names read once: the same HTML, byte for byte, with the
    /// build's hash file and without, with a response nonce and without. A change in how
    /// Leptos writes them (a new version) fails here, not in a browser that cannot hydrate.
    #[test]
    fn the_site_head_is_what_leptos_writes() {
        let dir = tempfile::tempdir().unwrap();
        let hash_file = dir.path().join("hash.txt");
        // As cargo-leptos 0.3.10 writes it (compile/hash.rs).
        std::fs::write(
            &hash_file,
            "js: 3ffq1Jw2Qm0Qb9nL8xZ0mA\nwasm: b7Yk2LqWmC0v9RtX1pZ3sw\ncss: Vd9pQ2mXk1Rz7LwB3nY5cA\n",
        )
        .unwrap();
        let mut hashed = super::leptos_options();
        hashed.hash_files = true;
        hashed.hash_file = hash_file.to_string_lossy().as_ref().into();
        let mut plain = super::leptos_options();
        plain.hash_files = false;
        for (options, names) in [
            (
                hashed,
                [
                    "/pkg/gantry.Vd9pQ2mXk1Rz7LwB3nY5cA.css",
                    "/pkg/gantry.3ffq1Jw2Qm0Qb9nL8xZ0mA.js",
                    "/pkg/gantry.b7Yk2LqWmC0v9RtX1pZ3sw.wasm",
                ],
            ),
            (
                plain,
                ["/pkg/gantry.css", "/pkg/gantry.js", "/pkg/gantry.wasm"],
            ),
        ] {
            for nonce in [true, false] {
                let owner = Owner::new();
                let (leptos, gantry) = owner.with(|| {
                    if nonce {
                        leptos::nonce::provide_nonce();
                    }
                    let leptos = view! {
                        <HashedStylesheet options=options.clone() id="leptos"/>
                        <HydrationScripts options=options.clone()/>
                    }
                    .to_html();
                    provide_context(SiteFiles::read(&options));
                    let gantry = view! {
                        <Stylesheet options=options.clone()/>
                        <Scripts options=options.clone()/>
                    }
                    .to_html();
                    (leptos, gantry)
                });
                assert_eq!(
                    gantry, leptos,
                    "hash files: {}, nonce: {nonce}",
                    options.hash_files
                );
                for name in names {
                    assert!(
                        gantry.contains(&format!("href=\"{name}\"")),
                        "{name} in {gantry}"
                    );
                }
                assert_eq!(gantry.contains(" nonce=\""), nonce, "{gantry}");
            }
        }
    }
}
