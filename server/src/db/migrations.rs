//! The schema's history: sqlx's migrator over `migrations/`, and the repair of databases that
//! ran a migration's text as it was after an edit that should never have been made.
//!
//! A landed migration never changes (`tests/migrations.rs` holds every one's checksum). Two
//! did change once, after they had landed; they are back to their first text, and what the
//! edits added is now in migrations of its own. A database that ran the edited text has that
//! schema already: its record of the edited migration is set back to the first text's
//! checksum and the migration that now carries the edit is recorded as applied, so sqlx's
//! check passes and nothing runs twice. Any other checksum difference stays sqlx's error.

use sqlx::migrate::{MigrateError, Migrator};
use sqlx::{AnyPool, Row};

/// Every migration in `migrations/`, compiled in.
pub static MIGRATOR: Migrator = sqlx::migrate!("../migrations");

/// A landed migration that was edited afterwards, and the migration that now makes the edit.
pub struct Edited {
    pub version: i64,
    /// SHA-384 of the edited text (hex), as sqlx recorded it where that text ran.
    pub edited_checksum: &'static str,
    pub carried_by: i64,
}

pub const EDITED: &[Edited] = &[
    // init: the quota's borrowing and lending limits (edited in a5c570a).
    Edited {
        version: 20261129000001,
        edited_checksum: "39dc5765897604a4f2ec04e26a28f3fec47dfa2a66845bd4ece18ea15ed8d7aaf24d7cff666688bfe75fca99bdbdd43e",
        carried_by: 20261201000002,
    },
    // usage_rollup: the partial index of intervals not rolled up (edited in c950dbb).
    Edited {
        version: 20261129000006,
        edited_checksum: "d8461c42aa406dff81cd99d57cc9b111e8a08a8e4f3ccf8cef115418bf31e946ea75ce6d8276cbe25518045f289dcb6a",
        carried_by: 20261201000003,
    },
];

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Brings the schema up to date, repairing first what the edited migrations left behind.
pub async fn run(pool: &AnyPool, postgres: bool) -> Result<(), MigrateError> {
    repair_edited(pool, postgres).await?;
    MIGRATOR.run(pool).await
}

async fn repair_edited(pool: &AnyPool, postgres: bool) -> Result<(), MigrateError> {
    let table: Option<String> = if postgres {
        sqlx::query("SELECT CAST(to_regclass('_sqlx_migrations') AS TEXT)")
            .fetch_one(pool)
            .await?
            .try_get(0)?
    } else {
        sqlx::query(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name = '_sqlx_migrations'",
        )
        .fetch_optional(pool)
        .await?
        .map(|r| r.try_get(0))
        .transpose()?
    };
    if table.is_none() {
        return Ok(());
    }
    for edit in EDITED {
        let Some(recorded) =
            sqlx::query("SELECT checksum FROM _sqlx_migrations WHERE version = $1")
                .bind(edit.version)
                .fetch_optional(pool)
                .await?
        else {
            continue;
        };
        let recorded: Vec<u8> = recorded.try_get(0)?;
        if hex(&recorded) != edit.edited_checksum {
            continue;
        }
        let first = migration(edit.version)?;
        let carrier = migration(edit.carried_by)?;
        let mut tx = pool.begin().await?;
        sqlx::query("UPDATE _sqlx_migrations SET checksum = $1 WHERE version = $2")
            .bind(first.checksum.to_vec())
            .bind(edit.version)
            .execute(&mut *tx)
            .await?;
        sqlx::query(
            "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
             VALUES ($1, $2, $3, $4, 0)",
        )
        .bind(carrier.version)
        .bind(carrier.description.to_string())
        .bind(true)
        .bind(carrier.checksum.to_vec())
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        tracing::warn!(
            version = edit.version,
            carried_by = edit.carried_by,
            "this database ran an edited text of a landed migration; its record now names the first text, and the migration that carries the edit is recorded as applied"
        );
    }
    Ok(())
}

fn migration(version: i64) -> Result<&'static sqlx::migrate::Migration, MigrateError> {
    MIGRATOR
        .iter()
        .find(|m| m.version == version)
        .ok_or(MigrateError::VersionMissing(version))
}
