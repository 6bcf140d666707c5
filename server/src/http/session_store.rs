//! Sessions in the configured database: tower-sessions' sqlx store for SQLite or Postgres,
//! behind one type so the router does not care which, with the records this process wrote or
//! read kept in memory as well.
//!
//! Every request with a session cookie loads its record; from the database that was one more
//! statement (and two hops to a SQLite connection's thread) per page, API call and live
//! stream check. Gantry runs as one process (`deploy/deployment.yaml`: one replica,
//! `Recreate`), and every write to the sessions table goes through this store, so a record
//! in memory is the database's record: [`SessionStore::save`] and `create` write the database
//! first and keep the record only once it is written; `delete` forgets it before and after the
//! database deletes it, and a record read while a delete ran is not kept. A record past its `expiry_date` is never answered from memory, as the sqlx
//! store answers only unexpired rows. At most [`CACHED_SESSIONS`] records are kept; past
//! that, expired ones are dropped, and a record that still does not fit is only in the
//! database.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use time::OffsetDateTime;
use tower_sessions::session::{Id, Record};
use tower_sessions::session_store::{self, ExpiredDeletion, SessionStore};
use tower_sessions_sqlx_store::{PostgresStore, SqliteStore};

/// The most session records kept in memory (a record is a few hundred bytes).
pub const CACHED_SESSIONS: usize = 20_000;

#[derive(Clone, Debug)]
enum Backing {
    Sqlite(SqliteStore),
    Postgres(PostgresStore),
}

#[derive(Clone)]
pub struct DbSessionStore {
    db: Backing,
    cache: Arc<Mutex<Cached>>,
}

#[derive(Default)]
struct Cached {
    records: HashMap<Id, Record>,
    /// Deletes so far. A record read or written while a delete ran is not kept: a sign-out
    /// racing a request of the same session must not leave the session alive in memory.
    deletes: u64,
    /// The ids deleted in the last [`GONE_FOR`], and when. A request that loaded its session
    /// before the sign-out saves it after (the store's save is an insert or update): that
    /// save must not write the signed-out session back.
    gone: HashMap<Id, std::time::Instant>,
}

/// How long a deleted session's id is remembered: longer than any request that loaded it
/// can still be running (a page or an API call; live streams save nothing).
const GONE_FOR: std::time::Duration = std::time::Duration::from_secs(15 * 60);

/// Without the records: they hold who is signed in and the sign-in flow's secrets.
impl std::fmt::Debug for DbSessionStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DbSessionStore")
            .field("db", &self.db)
            .field("cached", &self.lock().records.len())
            .finish()
    }
}

impl DbSessionStore {
    pub async fn connect(url: &str) -> anyhow::Result<DbSessionStore> {
        let db = if url.starts_with("sqlite:") {
            let pool = sqlx::sqlite::SqlitePoolOptions::new()
                .max_connections(4)
                // No ping before each use: see `Db::connect`.
                .test_before_acquire(false)
                .connect(url)
                .await?;
            let store = SqliteStore::new(pool);
            store.migrate().await?;
            Backing::Sqlite(store)
        } else {
            let pool = sqlx::postgres::PgPoolOptions::new()
                .max_connections(4)
                .connect(url)
                .await?;
            let store = PostgresStore::new(pool);
            store.migrate().await?;
            Backing::Postgres(store)
        };
        Ok(DbSessionStore {
            db,
            cache: Arc::default(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Cached> {
        self.cache.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn deletes(&self) -> u64 {
        self.lock().deletes
    }

    /// Whether the session `id` was deleted (signed out, or its id cycled at sign-in).
    fn is_gone(&self, id: &Id) -> bool {
        self.lock().gone.contains_key(id)
    }

    /// Keeps `record`, as the database held it when the count of deletes was `deletes`, in
    /// memory: if no delete has run since, and there is room.
    fn keep(&self, record: &Record, deletes: u64) {
        let mut cache = self.lock();
        if cache.deletes != deletes {
            cache.records.remove(&record.id);
            return;
        }
        let records = &mut cache.records;
        if records.len() >= CACHED_SESSIONS && !records.contains_key(&record.id) {
            let now = OffsetDateTime::now_utc();
            records.retain(|_, r| r.expiry_date > now);
            if records.len() >= CACHED_SESSIONS {
                return;
            }
        }
        records.insert(record.id, record.clone());
    }

    /// Deletes expired sessions every minute, forever (from the database; memory never
    /// answers an expired record, and drops them when full).
    pub async fn delete_expired_forever(self) {
        let every = tokio::time::Duration::from_secs(60);
        let result = match self.db {
            Backing::Sqlite(s) => s.continuously_delete_expired(every).await,
            Backing::Postgres(s) => s.continuously_delete_expired(every).await,
        };
        if let Err(e) = result {
            tracing::warn!(error = %e, "expired-session cleanup stopped");
        }
    }
}

#[async_trait]
impl SessionStore for DbSessionStore {
    async fn create(&self, record: &mut Record) -> session_store::Result<()> {
        // The database picks a fresh id should this one be taken; keep what it stored.
        let deletes = self.deletes();
        match &self.db {
            Backing::Sqlite(s) => s.create(record).await?,
            Backing::Postgres(s) => s.create(record).await?,
        }
        self.keep(record, deletes);
        Ok(())
    }

    async fn save(&self, record: &Record) -> session_store::Result<()> {
        // Signed out while this request ran: its changes go nowhere.
        if self.is_gone(&record.id) {
            return Ok(());
        }
        let deletes = self.deletes();
        let saved = match &self.db {
            Backing::Sqlite(s) => s.save(record).await,
            Backing::Postgres(s) => s.save(record).await,
        };
        match saved {
            Ok(()) => self.keep(record, deletes),
            // Whatever the database holds now, memory must not answer for it.
            Err(_) => {
                self.lock().records.remove(&record.id);
            }
        }
        // Deleted while it was being saved: the save may have written the row back after the
        // delete. Delete it again.
        if self.is_gone(&record.id) {
            self.lock().records.remove(&record.id);
            match &self.db {
                Backing::Sqlite(s) => s.delete(&record.id).await?,
                Backing::Postgres(s) => s.delete(&record.id).await?,
            }
        }
        saved
    }

    async fn load(&self, id: &Id) -> session_store::Result<Option<Record>> {
        let now = OffsetDateTime::now_utc();
        let deletes = {
            let cache = self.lock();
            if let Some(r) = cache.records.get(id).filter(|r| r.expiry_date > now) {
                return Ok(Some(r.clone()));
            }
            cache.deletes
        };
        let loaded = match &self.db {
            Backing::Sqlite(s) => s.load(id).await?,
            Backing::Postgres(s) => s.load(id).await?,
        };
        match &loaded {
            Some(r) => self.keep(r, deletes),
            None => {
                self.lock().records.remove(id);
            }
        }
        Ok(loaded)
    }

    async fn delete(&self, id: &Id) -> session_store::Result<()> {
        {
            let mut cache = self.lock();
            cache.deletes += 1;
            cache.records.remove(id);
            let now = std::time::Instant::now();
            cache
                .gone
                .retain(|_, at| now.duration_since(*at) < GONE_FOR);
            cache.gone.insert(*id, now);
        }
        let deleted = match &self.db {
            Backing::Sqlite(s) => s.delete(id).await,
            Backing::Postgres(s) => s.delete(id).await,
        };
        // A load that read the row before the database deleted it, and kept it after the
        // count above, is not answered either.
        {
            let mut cache = self.lock();
            cache.deletes += 1;
            cache.records.remove(id);
        }
        deleted
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::Duration;

    fn record(expires_in: Duration) -> Record {
        let mut data = HashMap::new();
        data.insert("user_id".to_string(), serde_json::json!("alice"));
        Record {
            id: Id::default(),
            data,
            expiry_date: OffsetDateTime::now_utc() + expires_in,
        }
    }

    /// A store on a fresh SQLite file: the directory (kept while the test runs), its URL.
    async fn store() -> (tempfile::TempDir, String, DbSessionStore) {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}?mode=rwc", dir.path().join("s.db").display());
        let store = DbSessionStore::connect(&url).await.unwrap();
        (dir, url, store)
    }

    async fn rows(url: &str) -> i64 {
        let pool = sqlx::SqlitePool::connect(url).await.unwrap();
        sqlx::query_scalar("SELECT COUNT(*) FROM tower_sessions")
            .fetch_one(&pool)
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn memory_answers_what_the_database_holds_and_never_a_deleted_or_expired_record() {
        let (_dir, url, store) = store().await;

        let mut r = record(Duration::hours(1));
        store.create(&mut r).await.unwrap();
        assert_eq!(rows(&url).await, 1, "written to the database first");
        assert_eq!(store.load(&r.id).await.unwrap().as_ref(), Some(&r));

        // Answered from memory: the row is gone behind the store's back (which nothing in
        // Gantry does), and the record still loads.
        let pool = sqlx::SqlitePool::connect(&url).await.unwrap();
        sqlx::query("DELETE FROM tower_sessions")
            .execute(&pool)
            .await
            .unwrap();
        assert_eq!(store.load(&r.id).await.unwrap().as_ref(), Some(&r));

        // A saved change is what the next load answers, and is in the database.
        r.data
            .insert("seen_at_ms".to_string(), serde_json::json!(42));
        store.save(&r).await.unwrap();
        assert_eq!(rows(&url).await, 1);
        assert_eq!(store.load(&r.id).await.unwrap().as_ref(), Some(&r));

        // Signed out: gone from both.
        store.delete(&r.id).await.unwrap();
        assert_eq!(store.load(&r.id).await.unwrap(), None);
        assert_eq!(rows(&url).await, 0);

        // Past its expiry, a record is not answered, from memory or the database.
        let mut old = record(Duration::milliseconds(300));
        store.create(&mut old).await.unwrap();
        assert!(store.load(&old.id).await.unwrap().is_some());
        tokio::time::sleep(std::time::Duration::from_millis(400)).await;
        assert_eq!(store.load(&old.id).await.unwrap(), None);

        // Its records stay out of its Debug.
        let debug = format!("{store:?}");
        assert!(!debug.contains("alice"), "{debug}");
    }

    /// A request that loaded the session before the sign-out and saves it after (every page
    /// that refreshes the seen time, a sign-in flow's pending state) must not sign the user
    /// back in: the store's save is an insert or update, and once wrote the row back.
    #[tokio::test]
    async fn a_save_after_the_sign_out_does_not_bring_the_session_back() {
        let (_dir, url, store) = store().await;
        let mut r = record(Duration::hours(1));
        store.create(&mut r).await.unwrap();
        let mut loaded = store
            .load(&r.id)
            .await
            .unwrap()
            .expect("loaded by a request");
        store.delete(&r.id).await.unwrap();
        loaded
            .data
            .insert("seen_at_ms".to_string(), serde_json::json!(42));
        store.save(&loaded).await.unwrap();
        assert_eq!(store.load(&r.id).await.unwrap(), None);
        assert_eq!(rows(&url).await, 0, "nor in the database");
        // Another session is saved as before.
        let mut other = record(Duration::hours(1));
        store.create(&mut other).await.unwrap();
        store.save(&other).await.unwrap();
        assert_eq!(rows(&url).await, 1);
    }

    #[tokio::test]
    async fn a_load_that_raced_a_delete_is_not_kept() {
        let (_dir, _, store) = store().await;
        let mut r = record(Duration::hours(1));
        store.create(&mut r).await.unwrap();
        // A load that read the row before a delete began, kept after it: not kept.
        let before = store.deletes();
        store.delete(&Id::default()).await.unwrap();
        store.keep(&r, before);
        assert!(!store.lock().records.contains_key(&r.id));
        // With no delete in between, it is.
        store.keep(&r, store.deletes());
        assert!(store.lock().records.contains_key(&r.id));
    }
}
