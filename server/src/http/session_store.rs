//! Sessions in the configured database: tower-sessions' sqlx store for SQLite or Postgres,
//! behind one type so the router does not care which.

use async_trait::async_trait;
use tower_sessions::session::{Id, Record};
use tower_sessions::session_store::{self, ExpiredDeletion, SessionStore};
use tower_sessions_sqlx_store::{PostgresStore, SqliteStore};

#[derive(Clone, Debug)]
pub enum DbSessionStore {
    Sqlite(SqliteStore),
    Postgres(PostgresStore),
}

impl DbSessionStore {
    pub async fn connect(url: &str) -> anyhow::Result<DbSessionStore> {
        if url.starts_with("sqlite:") {
            let pool = sqlx::sqlite::SqlitePoolOptions::new()
                .max_connections(4)
                // No ping before each use: see `Db::connect`.
                .test_before_acquire(false)
                .connect(url)
                .await?;
            let store = SqliteStore::new(pool);
            store.migrate().await?;
            Ok(DbSessionStore::Sqlite(store))
        } else {
            let pool = sqlx::postgres::PgPoolOptions::new()
                .max_connections(4)
                .connect(url)
                .await?;
            let store = PostgresStore::new(pool);
            store.migrate().await?;
            Ok(DbSessionStore::Postgres(store))
        }
    }

    /// Deletes expired sessions every minute, forever.
    pub async fn delete_expired_forever(self) {
        let every = tokio::time::Duration::from_secs(60);
        let result = match self {
            DbSessionStore::Sqlite(s) => s.continuously_delete_expired(every).await,
            DbSessionStore::Postgres(s) => s.continuously_delete_expired(every).await,
        };
        if let Err(e) = result {
            tracing::warn!(error = %e, "expired-session cleanup stopped");
        }
    }
}

#[async_trait]
impl SessionStore for DbSessionStore {
    async fn create(&self, record: &mut Record) -> session_store::Result<()> {
        match self {
            DbSessionStore::Sqlite(s) => s.create(record).await,
            DbSessionStore::Postgres(s) => s.create(record).await,
        }
    }

    async fn save(&self, record: &Record) -> session_store::Result<()> {
        match self {
            DbSessionStore::Sqlite(s) => s.save(record).await,
            DbSessionStore::Postgres(s) => s.save(record).await,
        }
    }

    async fn load(&self, id: &Id) -> session_store::Result<Option<Record>> {
        match self {
            DbSessionStore::Sqlite(s) => s.load(id).await,
            DbSessionStore::Postgres(s) => s.load(id).await,
        }
    }

    async fn delete(&self, id: &Id) -> session_store::Result<()> {
        match self {
            DbSessionStore::Sqlite(s) => s.delete(id).await,
            DbSessionStore::Postgres(s) => s.delete(id).await,
        }
    }
}
