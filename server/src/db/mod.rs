//! Persistence: one `Db` over sqlx's `Any` driver, so the same SQL runs on SQLite (the
//! embedded default) and Postgres (production). Times are milliseconds since the epoch.

mod audit;
mod identity;
mod jobs;
mod logs;
pub mod memo;
pub mod migrations;
mod notify;
mod pools;
mod templates;
mod usage;

#[cfg(test)]
mod tests;

use audit::insert_audit;
pub use identity::TokenRow;
pub use jobs::{
    EventRow, JobDetail, JobMore, JobName, JobPageRows, JobQuery, JobRow, NewJob, Transition,
    MAX_CLONES,
};
pub use logs::KeptLog;
pub use notify::{DeliveryRow, JobEventRow, NotificationRow, WebhookRow};
pub use pools::{pool_specs, PoolRow, QuotaRow, QuotaWrite};
use usage::record_interval;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

pub use crate::domain::audit::{AuditEntry, AuditFilter};
pub use crate::domain::identity::IdentitySignIn;
use crate::domain::quota::{PoolSpec, QueueingStrategy, QuotaSpec};
use crate::domain::template::TemplateVersion;
use app::model::domain::Viewer;
use app::model::domain::{JobState, Membership, ParamSpec, Priority, Role};
use chrono::{DateTime, TimeZone, Utc};
use serde_json::{Map, Value};
use sqlx::any::{AnyPoolOptions, AnyRow};
use sqlx::{AnyPool, Row};

#[derive(Debug, thiserror::Error)]
pub enum DbError {
    #[error("not found")]
    NotFound,
    #[error("unique constraint violated")]
    Conflict,
    #[error("database: {0}")]
    Sqlx(#[from] sqlx::Error),
    #[error("migration: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("stored JSON does not parse: {0}")]
    Json(#[from] serde_json::Error),
}

pub type Result<T, E = DbError> = std::result::Result<T, E>;

fn map_err(e: sqlx::Error) -> DbError {
    match &e {
        sqlx::Error::RowNotFound => DbError::NotFound,
        sqlx::Error::Database(d) if d.is_unique_violation() => DbError::Conflict,
        _ => DbError::Sqlx(e),
    }
}

pub fn ms(t: DateTime<Utc>) -> i64 {
    t.timestamp_millis()
}

pub fn from_ms(v: i64) -> DateTime<Utc> {
    Utc.timestamp_millis_opt(v).single().unwrap_or_default()
}

#[derive(Clone)]
pub struct Db {
    pool: AnyPool,
    postgres: bool,
    /// How many writes have completed through this handle and its clones (see [`Db::changes`]).
    changes: Arc<AtomicU64>,
    /// Page reads kept while nothing was written (see [`memo`] and [`Db::memo`]).
    memo: Arc<memo::ReadMemo>,
}

/// A write's fence: counts the write as done when dropped, after the statement it was borrowed
/// for has completed (a temporary lives to the end of its statement, past the `.await`).
pub(crate) struct Written<'a> {
    pool: &'a AnyPool,
    _counted: Counted<'a>,
}

impl std::ops::Deref for Written<'_> {
    type Target = AnyPool;
    fn deref(&self) -> &AnyPool {
        self.pool
    }
}

/// Counts a write in [`Db::changes`] when dropped: after the statement or commit it was made
/// for returned, or was given up.
pub(crate) struct Counted<'a>(pub(crate) &'a AtomicU64);

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// A read-only view of one moment: every query through it sees the same committed state
/// (Postgres: REPEATABLE READ; SQLite: one read transaction is one snapshot).
pub struct Snapshot {
    tx: sqlx::Transaction<'static, sqlx::Any>,
}

/// The Postgres advisory lock that transactions adding job events take (see
/// [`Db::begin_events`]); an advisory lock belongs to one database, so databases on one
/// server do not share it.
const EVENTS_LOCK: i64 = 0x6761_6e74_7279; // "gantry"

impl Db {
    /// Connects and brings the schema up to date.
    pub async fn connect(url: &str, max_connections: u32) -> Result<Db> {
        sqlx::any::install_default_drivers();
        let sqlite = url.starts_with("sqlite:");
        let pool = AnyPoolOptions::new()
            .max_connections(max_connections)
            // sqlx pings a connection each time the pool hands it out; a SQLite connection
            // is a file this process holds open and cannot go stale, and the ping was a second
            // round trip to its worker thread on every query. Postgres keeps the check.
            .test_before_acquire(!sqlite)
            .connect(url)
            .await?;
        if sqlite {
            // Readers do not block the writer in WAL mode; the setting stays with the file.
            sqlx::query("PRAGMA journal_mode = WAL")
                .execute(&pool)
                .await?;
        }
        let db = Db {
            pool,
            postgres: !sqlite,
            changes: Arc::default(),
            memo: Arc::default(),
        };
        db.migrate().await?;
        Ok(db)
    }

    /// A number that moves whenever a write through this database (any clone of it) has
    /// completed: a commit, or a single statement that writes. Something read after taking it
    /// and found equal later saw no write finish in between, so a page rendered meanwhile
    /// still shows what is stored (see `http::page_cache`).
    pub fn changes(&self) -> u64 {
        self.changes.load(Ordering::SeqCst)
    }

    /// The value `read` gives, or the one it gave for the same `key` while no write has
    /// finished since (and within the memo's time to live, [`Db::read_memo`]): see [`memo`].
    /// `key` must name everything the read depends on, its kind first (`viewer "alice"`).
    pub(crate) async fn memo<T, F, Fut>(&self, key: String, read: F) -> Result<T>
    where
        T: Clone + Send + Sync + 'static,
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<T>>,
    {
        if self.memo.ttl().is_zero() {
            return read().await;
        }
        let began = self.changes();
        if let Some(v) = self.memo.get::<T>(&key, began) {
            return Ok(v);
        }
        let started = std::time::Instant::now();
        let value = read().await?;
        self.memo
            .put(key, value.clone(), started, (began, self.changes()));
        Ok(value)
    }

    /// The page reads' memo and its time to live (zero by default: off).
    pub fn read_memo(&self) -> &memo::ReadMemo {
        &self.memo
    }

    /// The pool for one statement that writes; the write counts in [`Db::changes`] when the
    /// statement is done.
    pub(crate) fn write(&self) -> Written<'_> {
        Written {
            pool: &self.pool,
            _counted: Counted(&self.changes),
        }
    }

    /// Commits a transaction from [`Db::begin_write`]; the write counts in [`Db::changes`]
    /// once the commit has returned or was given up (a transaction dropped without one wrote
    /// nothing).
    async fn commit(&self, tx: sqlx::Transaction<'static, sqlx::Any>) -> Result<()> {
        // Counted when the commit returns, or when it is dropped on the way (a request whose
        // client went away): it may have landed. (If it lands only after, a read between is
        // kept until the next write or for the memo's time to live at most.)
        let _counts = Counted(&self.changes);
        tx.commit().await.map_err(map_err)
    }

    pub async fn migrate(&self) -> Result<()> {
        migrations::run(&self.pool, self.postgres).await?;
        Ok(())
    }

    pub async fn ping(&self) -> Result<()> {
        sqlx::query("SELECT 1")
            .execute(&self.pool)
            .await
            .map_err(map_err)?;
        Ok(())
    }

    pub async fn close(&self) {
        self.pool.close().await;
    }

    /// A transaction that writes. On SQLite it takes the write lock at once
    /// (`BEGIN IMMEDIATE`) and so waits its turn: a deferred one that reads first cannot
    /// upgrade once another connection has written, and fails with "database is locked"
    /// (SQLITE_BUSY) instead of waiting (<https://sqlite.org/lang_transaction.html>).
    async fn begin_write(&self) -> Result<sqlx::Transaction<'static, sqlx::Any>> {
        if self.postgres {
            self.pool.begin().await.map_err(map_err)
        } else {
            self.pool
                .begin_with("BEGIN IMMEDIATE")
                .await
                .map_err(map_err)
        }
    }

    /// A write transaction that adds job events. They run one at a time on both databases:
    /// on SQLite every write transaction does (`BEGIN IMMEDIATE`), and on Postgres this one
    /// first takes an advisory lock held until it ends, before any row it locks (so two of
    /// them never wait on each other). A job event gets its UUIDv7 id inside it, so ids sort
    /// in the order they were committed, and a reader that goes on from the last id it saw
    /// (the notifier's cursor) never passes over an event committed late. Only these take
    /// the lock: a quota change held open across a call to the cluster does not hold up
    /// launches. (Ids come from this process's clock: one process per database, as
    /// `deploy/` runs it.)
    async fn begin_events(&self) -> Result<sqlx::Transaction<'static, sqlx::Any>> {
        let mut tx = self.begin_write().await?;
        if self.postgres {
            sqlx::query("SELECT pg_advisory_xact_lock($1)")
                .bind(EVENTS_LOCK)
                .execute(&mut *tx)
                .await
                .map_err(map_err)?;
        }
        Ok(tx)
    }

    /// A consistent view for a report made of several reads.
    pub async fn snapshot(&self) -> Result<Snapshot> {
        let mut tx = self.pool.begin().await.map_err(map_err)?;
        if self.postgres {
            sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                .execute(&mut *tx)
                .await
                .map_err(map_err)?;
        }
        Ok(Snapshot { tx })
    }

    /// Where the sim clock resumes after a restart: the saved clock, or the latest time a
    /// job event records when that is later (the clock is saved every 2 s of real time, up to
    /// two minutes of sim time at 60×, and a crash loses what was not saved: resumed earlier,
    /// a run admitted again would overlap the one before it). `None` before the first save.
    pub async fn sim_clock(&self) -> Result<Option<DateTime<Utc>>> {
        let row = sqlx::query(
            "SELECT (SELECT now_ms FROM sim_clock WHERE sim_clock_id = 1) AS saved, \
             (SELECT MAX(at) FROM job_event) AS last_event",
        )
        .fetch_one(&self.pool)
        .await
        .map_err(map_err)?;
        let saved: Option<i64> = row.try_get("saved")?;
        let last_event: Option<i64> = row.try_get("last_event")?;
        Ok(saved.map(|s| from_ms(s.max(last_event.unwrap_or(s)))))
    }

    /// Saves the sim's clock, for a restart to resume from. Not a change in [`Db::changes`]:
    /// pages take the clock from the cluster, not from this row, and the page cache already
    /// lets the clock be as stale as its time to live (`http::page_cache`). Counted, the save
    /// every 2 s dropped every cached page of the embedded default that often.
    pub async fn save_sim_clock(&self, now: DateTime<Utc>) -> Result<()> {
        sqlx::query("INSERT INTO sim_clock (sim_clock_id, now_ms) VALUES (1, $1) ON CONFLICT (sim_clock_id) DO UPDATE SET now_ms = excluded.now_ms")
            .bind(ms(now))
            .execute(&self.pool)
            .await
            .map_err(map_err)?;
        Ok(())
    }
}
