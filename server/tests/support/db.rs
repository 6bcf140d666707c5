//! A fresh database for one test: SQLite in a temporary directory, or a new database on the
//! Postgres server at 127.0.0.1:5432 (`GANTRY_TEST_POSTGRES` names another). Never skipped:
//! if the server is not there the test fails and says so.

#[derive(Clone, Copy, Debug)]
pub enum Target {
    Sqlite,
    Postgres,
}

/// Where the Postgres tests create their databases.
pub fn postgres_admin_url() -> String {
    std::env::var("GANTRY_TEST_POSTGRES")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into())
}

pub struct Database {
    pub url: String,
    _dir: Option<tempfile::TempDir>,
    /// The Postgres database to drop when the test is done.
    pg_name: Option<String>,
}

impl Database {
    pub async fn fresh(target: Target) -> Database {
        match target {
            Target::Sqlite => {
                let dir = tempfile::tempdir().expect("temp dir");
                let url = format!(
                    "sqlite://{}?mode=rwc",
                    dir.path().join("gantry.db").display()
                );
                Database {
                    url,
                    _dir: Some(dir),
                    pg_name: None,
                }
            }
            Target::Postgres => {
                use sqlx::Connection;
                let admin = postgres_admin_url();
                let mut conn = sqlx::PgConnection::connect(&admin).await.unwrap_or_else(|e| {
                    panic!("Postgres tests need a server at {admin} (set GANTRY_TEST_POSTGRES to another): {e}")
                });
                let name = format!("gantry_test_{}", uuid::Uuid::new_v4().simple());
                sqlx::query(&format!("CREATE DATABASE {name}"))
                    .execute(&mut conn)
                    .await
                    .expect("create test database");
                let base = admin.rsplit_once('/').map(|(b, _)| b).unwrap_or(&admin);
                Database {
                    url: format!("{base}/{name}"),
                    _dir: None,
                    pg_name: Some(name),
                }
            }
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
