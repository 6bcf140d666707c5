//! Fixtures for unit tests that need the service and the reconciler together: a fresh
//! database (SQLite in a temporary directory, or a new Postgres database), the demo catalog,
//! the sim behind a cluster wrapper that can refuse or misbehave on demand, and the event
//! writer running.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use tokio::sync::{mpsc, watch};

use crate::clock::Clock;
use crate::cluster::sim::SimCluster;
use crate::cluster::{
    Admissibility, Cluster, ClusterError, ClusterEvent, PendingWorkload, PoolStatus, QuotaSpec,
    Result, WorkloadPhase, WorkloadSpec,
};
use crate::db::Db;
use crate::service::Portal;

/// A database for one test, removed at the end.
pub struct TestDb {
    pub url: String,
    _dir: Option<tempfile::TempDir>,
    pg_name: Option<String>,
}

/// Where Postgres tests create their databases (as in `tests/api.rs`).
fn postgres_admin_url() -> String {
    std::env::var("GANTRY_TEST_POSTGRES")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into())
}

impl TestDb {
    pub fn sqlite() -> TestDb {
        let dir = tempfile::tempdir().expect("temp dir");
        let url = format!(
            "sqlite://{}?mode=rwc",
            dir.path().join("gantry.db").display()
        );
        TestDb {
            url,
            _dir: Some(dir),
            pg_name: None,
        }
    }

    pub async fn postgres() -> TestDb {
        use sqlx::Connection;
        let admin = postgres_admin_url();
        let mut conn = sqlx::PgConnection::connect(&admin)
            .await
            .unwrap_or_else(|e| panic!("Postgres tests need a server at {admin}: {e}"));
        let name = format!("gantry_unit_{}", uuid::Uuid::new_v4().simple());
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&mut conn)
            .await
            .expect("create test database");
        let base = admin.rsplit_once('/').map(|(b, _)| b).unwrap_or(&admin);
        TestDb {
            url: format!("{base}/{name}"),
            _dir: None,
            pg_name: Some(name),
        }
    }

    /// Drops the Postgres database (SQLite's directory goes with the value).
    pub async fn drop_database(self) {
        if let Some(name) = self.pg_name {
            use sqlx::Connection;
            let mut conn = sqlx::PgConnection::connect(&postgres_admin_url())
                .await
                .expect("postgres for cleanup");
            sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                .execute(&mut conn)
                .await
                .expect("drop test database");
        }
    }
}

/// The sim, passed through, except where a test tells it to misbehave.
pub struct Wrapped {
    pub sim: Arc<SimCluster>,
    /// `set_quota` fails with `Unavailable` while set.
    pub refuse_quota: AtomicBool,
    /// On the next `set_quota`, before the sim takes it: ends (on the Postgres server) every
    /// connection of this database that is inside a transaction, as a lost connection would.
    pub kill_open_transactions: Mutex<Option<String>>,
    /// Every quota the sim was given through the wrapper, in order.
    pub quotas_set: Mutex<Vec<(String, String, QuotaSpec)>>,
}

impl Wrapped {
    pub fn new(sim: Arc<SimCluster>) -> Wrapped {
        Wrapped {
            sim,
            refuse_quota: AtomicBool::new(false),
            kill_open_transactions: Mutex::new(None),
            quotas_set: Mutex::new(Vec::new()),
        }
    }

    /// The quota the sim holds for a team in a pool.
    pub async fn quota_of(&self, team: &str, pool: &str) -> Option<QuotaSpec> {
        self.sim
            .pools()
            .await
            .ok()?
            .into_iter()
            .find(|p| p.name == pool)?
            .teams
            .into_iter()
            .find(|t| t.team == team)
            .map(|t| t.quota)
    }
}

#[async_trait]
impl Cluster for Wrapped {
    fn now(&self) -> DateTime<Utc> {
        self.sim.now()
    }
    async fn set_quota(&self, team: &str, pool: &str, quota: QuotaSpec) -> Result<()> {
        if self.refuse_quota.load(Ordering::SeqCst) {
            return Err(ClusterError::Unavailable("refused by the test".into()));
        }
        let kill = self.kill_open_transactions.lock().unwrap().take();
        if let Some(url) = kill {
            use sqlx::Connection;
            let mut conn = sqlx::PgConnection::connect(&url).await.expect("postgres");
            let killed: Vec<(bool,)> = sqlx::query_as(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                 WHERE datname = current_database() AND pid <> pg_backend_pid() \
                 AND state LIKE 'idle in transaction%'",
            )
            .fetch_all(&mut conn)
            .await
            .expect("terminate backends");
            tracing::info!(count = killed.len(), "test: ended open transactions");
        }
        self.quotas_set
            .lock()
            .unwrap()
            .push((team.to_string(), pool.to_string(), quota));
        self.sim.set_quota(team, pool, quota).await
    }
    async fn submit(&self, w: WorkloadSpec) -> Result<()> {
        self.sim.submit(w).await
    }
    async fn cancel(&self, job_id: &str) -> Result<()> {
        self.sim.cancel(job_id).await
    }
    async fn pending(&self, pool: &str) -> Result<Arc<Vec<PendingWorkload>>> {
        self.sim.pending(pool).await
    }
    async fn pools(&self) -> Result<Vec<PoolStatus>> {
        self.sim.pools().await
    }
    async fn check(&self, w: &WorkloadSpec) -> Result<Admissibility> {
        self.sim.check(w).await
    }
    async fn workloads(&self) -> Result<Vec<(String, WorkloadPhase)>> {
        self.sim.workloads().await
    }
    fn subscribe(&self) -> mpsc::UnboundedReceiver<ClusterEvent> {
        self.sim.subscribe()
    }
    fn last_seq(&self) -> u64 {
        self.sim.last_seq()
    }
    async fn logs(
        &self,
        src: &crate::cluster::LogSource,
        q: &crate::cluster::LogQuery,
    ) -> Result<Option<Vec<app::model::domain::LogLine>>> {
        self.sim.logs(src, q).await
    }
    async fn failure(
        &self,
        src: &crate::cluster::LogSource,
    ) -> Result<Option<app::model::domain::JobFailure>> {
        self.sim.failure(src).await
    }
}

/// A portal over `db` with the demo catalog, the sim (manual clock) behind [`Wrapped`], and
/// the event writer running.
pub struct Fixture {
    pub portal: Arc<Portal>,
    pub cluster: Arc<Wrapped>,
    pub db: Db,
    /// Asks the event writer for a comparison with the cluster.
    pub resync: crate::workers::reconciler::SyncHandle,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Fixture {
    pub async fn start(db: &TestDb) -> Fixture {
        Fixture::start_with(db, crate::workers::reconciler::SYNC_EVERY).await
    }

    /// With the event writer comparing the database with the cluster as often as `every`.
    pub async fn start_with(db: &TestDb, every: crate::workers::reconciler::SyncEvery) -> Fixture {
        let db = Db::connect(&db.url, 5).await.expect("database");
        let now = Utc::now();
        crate::seed::seed_catalog(&db, now).await.expect("seed");
        let pools = crate::db::pool_specs(db.list_pools().await.expect("pools"), &[]);
        let sim = Arc::new(SimCluster::new(Clock::manual(now), 60, &pools));
        for q in db.list_quotas().await.expect("quotas") {
            sim.set_quota(&q.team, &q.pool, q.quota)
                .await
                .expect("quota");
        }
        let cluster = Arc::new(Wrapped::new(sim));
        let (applied_tx, applied_rx) = watch::channel(0u64);
        let live_tx = crate::service::LiveTx::new(1024);
        let (writer, resync) = crate::workers::reconciler::spawn_event_writer_every(
            db.clone(),
            cluster.clone(),
            cluster.subscribe(),
            applied_tx,
            live_tx.clone(),
            every,
        );
        resync.request();
        // The first comparison is over before a test changes anything.
        resync.passes(1).await;
        let portal = Arc::new(Portal::new(
            db.clone(),
            cluster.clone(),
            applied_rx,
            live_tx,
            true,
        ));
        Fixture {
            portal,
            cluster,
            db,
            resync,
            tasks: vec![writer],
        }
    }

    pub async fn viewer(&self, user: &str) -> app::model::Viewer {
        self.portal
            .viewer_by_id(user)
            .await
            .expect("viewer")
            .expect("a seeded user")
    }

    pub async fn stop(self) {
        for t in &self.tasks {
            t.abort();
        }
        self.db.close().await;
    }
}
