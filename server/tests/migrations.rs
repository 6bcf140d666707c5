//! Migrations never change once landed, and every database Gantry ever created upgrades to
//! today's schema, on SQLite and on Postgres.
//!
//! - `data/migration_checksums.txt` lists every migration's SHA-384 (sqlx's checksum): a
//!   changed, removed or unlisted migration fails here, naming the file.
//! - Databases built from the schema's past states (the first landed one, and those that ran
//!   the two migrations that were once edited after landing, kept in
//!   `data/edited_migrations/`) are upgraded by `Db::connect` and compared with a fresh
//!   database: the same tables, columns, indexes and checks, and the old rows still there.

use std::borrow::Cow;
use std::collections::BTreeSet;

use gantry::db::migrations::{hex, EDITED, MIGRATOR};
use gantry::db::Db;
use sha2::{Digest, Sha384};
use sqlx::migrate::{Migration, MigrationType, Migrator};
use sqlx::{AnyPool, Row};

#[path = "support/db.rs"]
mod test_db;
use test_db::{Database, Target};

const MIGRATIONS_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../migrations");
const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data");

fn listed() -> Vec<(String, String)> {
    std::fs::read_to_string(format!("{DATA}/migration_checksums.txt"))
        .expect("checksum list")
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| {
            let (file, sum) = l.split_once(' ').expect("`file checksum` per line");
            (file.to_string(), sum.trim().to_string())
        })
        .collect()
}

#[test]
fn every_landed_migration_keeps_its_checksum() {
    let list = listed();
    let mut on_disk: Vec<String> = std::fs::read_dir(MIGRATIONS_DIR)
        .expect("migrations/")
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".sql"))
        .collect();
    on_disk.sort();
    let mut problems = Vec::new();
    for (file, sum) in &list {
        let path = format!("{MIGRATIONS_DIR}/{file}");
        match std::fs::read(&path) {
            Err(_) => problems.push(format!(
                "{file} was removed: a landed migration stays (databases have run it)"
            )),
            Ok(text) => {
                let now = hex(&Sha384::digest(&text));
                if &now != sum {
                    problems.push(format!(
                        "{file} changed after it landed (SHA-384 {now}, listed {sum}): put the change in a new migration"
                    ));
                }
            }
        }
        // What sqlx compiled in, and will compare with each database's record, is the same.
        let version: i64 = file.split('_').next().unwrap().parse().expect("version");
        match MIGRATOR.iter().find(|m| m.version == version) {
            Some(m) if hex(&m.checksum) == *sum => {}
            Some(m) => problems.push(format!(
                "{file}: the migrator's checksum is {}",
                hex(&m.checksum)
            )),
            None => problems.push(format!("{file}: not in the migrator")),
        }
    }
    for file in &on_disk {
        if !list.iter().any(|(f, _)| f == file) {
            problems.push(format!(
                "{file} is not in tests/data/migration_checksums.txt: add `{file} <sha384sum>` once it lands"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert_eq!(MIGRATOR.iter().count(), list.len());
}

/// The edited texts kept as fixtures are the ones whose checksums the repair recognises.
#[test]
fn the_edited_texts_are_the_ones_the_repair_knows() {
    for edit in EDITED {
        let text = edited_text(edit.version);
        assert_eq!(hex(&Sha384::digest(text.as_bytes())), edit.edited_checksum);
        let first = MIGRATOR.iter().find(|m| m.version == edit.version).unwrap();
        assert_ne!(hex(&first.checksum), edit.edited_checksum);
    }
}

fn edited_text(version: i64) -> String {
    let dir = format!("{DATA}/edited_migrations");
    let file = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with(&version.to_string())
        })
        .unwrap_or_else(|| panic!("no edited text of {version} in {dir}"));
    std::fs::read_to_string(file).unwrap()
}

/// A past state of the schema: the migrations up to `through`, with the edited text where
/// `edited` names a version.
fn past_migrator(through: i64, edited: &[i64]) -> Migrator {
    let migrations: Vec<Migration> = MIGRATOR
        .iter()
        .filter(|m| m.version <= through)
        .map(|m| {
            if edited.contains(&m.version) {
                Migration::new(
                    m.version,
                    m.description.clone(),
                    MigrationType::Simple,
                    Cow::Owned(edited_text(m.version)),
                    m.no_tx,
                )
            } else {
                m.clone()
            }
        })
        .collect();
    Migrator {
        migrations: Cow::Owned(migrations),
        ..Migrator::DEFAULT
    }
}

async fn pool(url: &str) -> AnyPool {
    sqlx::any::install_default_drivers();
    AnyPool::connect(url).await.expect("connect")
}

/// Tables with their columns (name, type, nullability, default), indexes and checks, as the
/// database describes them, in an order that does not depend on how they were added.
async fn schema(pool: &AnyPool, target: Target) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    match target {
        Target::Sqlite => {
            let tables: Vec<String> = sqlx::query(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' AND name <> '_sqlx_migrations'",
            )
            .fetch_all(pool)
            .await
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
            for t in tables {
                for r in sqlx::query(
                    "SELECT name, type, \"notnull\", COALESCE(dflt_value, ''), pk FROM pragma_table_info($1)",
                )
                .bind(&t)
                .fetch_all(pool)
                .await
                .unwrap()
                {
                    let (name, ty, notnull, dflt, pk): (String, String, i64, String, i64) =
                        (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4));
                    out.insert(format!(
                        "column {t}.{name} {ty} notnull={notnull} default={dflt} pk={pk}"
                    ));
                }
                for r in sqlx::query(
                    "SELECT name, \"unique\", partial FROM pragma_index_list($1) WHERE origin = 'c'",
                )
                .bind(&t)
                .fetch_all(pool)
                .await
                .unwrap()
                {
                    let (name, unique, partial): (String, i64, i64) = (r.get(0), r.get(1), r.get(2));
                    let cols: Vec<String> =
                        sqlx::query("SELECT name FROM pragma_index_info($1) ORDER BY seqno")
                            .bind(&name)
                            .fetch_all(pool)
                            .await
                            .unwrap()
                            .iter()
                            .map(|r| r.get(0))
                            .collect();
                    out.insert(format!(
                        "index {t}.{name} ({}) unique={unique} partial={partial}",
                        cols.join(", ")
                    ));
                }
                // SQLite keeps a table's checks only in its CREATE text; a column added later
                // carries its own, so count each column's CHECK by name.
                let sql: String =
                    sqlx::query("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = $1")
                        .bind(&t)
                        .fetch_one(pool)
                        .await
                        .unwrap()
                        .get(0);
                for check in sql.split("CHECK").skip(1) {
                    let body: String = check
                        .chars()
                        .skip_while(|c| *c != '(')
                        .scan(0i32, |depth, c| {
                            match c {
                                '(' => *depth += 1,
                                ')' => *depth -= 1,
                                _ => {}
                            }
                            (*depth > 0 || c == ')').then_some(c)
                        })
                        .filter(|c| !c.is_whitespace())
                        .collect();
                    out.insert(format!("check {t} {body}"));
                }
            }
        }
        Target::Postgres => {
            for r in sqlx::query(
                "SELECT table_name::text, column_name::text, data_type::text, is_nullable::text, COALESCE(column_default::text, '') \
                 FROM information_schema.columns WHERE table_schema = 'public' AND table_name <> '_sqlx_migrations'",
            )
            .fetch_all(pool)
            .await
            .unwrap()
            {
                let (t, c, ty, null, dflt): (String, String, String, String, String) =
                    (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4));
                out.insert(format!("column {t}.{c} {ty} nullable={null} default={dflt}"));
            }
            for r in sqlx::query(
                "SELECT indexdef::text FROM pg_indexes WHERE schemaname = 'public' AND tablename <> '_sqlx_migrations'",
            )
            .fetch_all(pool)
            .await
            .unwrap()
            {
                out.insert(format!("index {}", r.get::<String, _>(0)));
            }
            for r in sqlx::query(
                "SELECT conrelid::regclass::text, contype::text, pg_get_constraintdef(oid)::text FROM pg_constraint \
                 WHERE connamespace = 'public'::regnamespace AND conrelid <> '_sqlx_migrations'::regclass",
            )
            .fetch_all(pool)
            .await
            .unwrap()
            {
                let (t, kind, def): (String, String, String) = (r.get(0), r.get(1), r.get(2));
                out.insert(format!("constraint {t} {kind} {def}"));
            }
        }
    }
    out
}

/// Rows a database of the first schema would hold: a team, a user, a pool, a quota, a
/// template version and a job that was admitted.
async fn first_rows(pool: &AnyPool) {
    for sql in [
        "INSERT INTO team (team_id, display_name, created_at) VALUES ('nlp', 'NLP', 1)",
        "INSERT INTO app_user (user_id, display_name, created_at) VALUES ('alice', 'Alice', 1)",
        "INSERT INTO membership (user_id, team_id, role) VALUES ('alice', 'nlp', 'member')",
        "INSERT INTO pool (pool_id, gpu_model, node_count, gpus_per_node, created_at) VALUES ('hgx-h100', 'H100', 4, 8, 1)",
        "INSERT INTO quota (team_id, pool_id, nominal_gpus, updated_at) VALUES ('nlp', 'hgx-h100', 16, 1)",
        "INSERT INTO template (template_id, display_name, family, model_size, method, description, default_pool, created_at) \
         VALUES ('llama', 'Llama', 'llama', '8B', 'fsdp', 'd', 'hgx-h100', 1)",
        "INSERT INTO template_version (template_id, version, image, command, params, allowed_gpus, default_gpus, default_max_runtime_s, created_at) \
         VALUES ('llama', 1, 'img', '[]', '[]', '[8]', 8, 3600, 1)",
        "INSERT INTO job (job_id, name, template_id, template_version, team_id, user_id, pool_id, gpus, priority, state, params, max_runtime_s, created_at, admitted_at, sent_at) \
         VALUES ('j1', 'first', 'llama', 1, 'nlp', 'alice', 'hgx-h100', 8, 'normal', 'running', '{}', 3600, 1000, 2000, 1000)",
    ] {
        sqlx::query(sql).execute(pool).await.unwrap();
    }
}

/// Builds a database as `past` left it, upgrades it with Gantry's own start-up path, and
/// compares it with a fresh one.
async fn upgrades(target: Target, past: Migrator, what: &str) {
    let before_intervals = past.iter().all(|m| m.version < JOB_INTERVAL);
    let fresh = Database::fresh(target).await;
    let fresh_db = Db::connect(&fresh.url, 2).await.expect("fresh database");
    let want = schema(&pool(&fresh.url).await, target).await;
    fresh_db.close().await;
    fresh.drop_database().await;

    let old = Database::fresh(target).await;
    let p = pool(&old.url).await;
    past.run(&p).await.unwrap_or_else(|e| panic!("{what}: {e}"));
    first_rows(&p).await;
    let db = Db::connect(&old.url, 2)
        .await
        .unwrap_or_else(|e| panic!("{what} does not upgrade: {e}"));
    // A second start finds nothing to do and nothing to repair.
    db.migrate()
        .await
        .unwrap_or_else(|e| panic!("{what}, second start: {e}"));
    let got = schema(&p, target).await;
    let missing: Vec<_> = want.difference(&got).collect();
    let extra: Vec<_> = got.difference(&want).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "{what} upgraded to another schema than a fresh database's:\nmissing {missing:#?}\nextra {extra:#?}"
    );
    // The old rows are there, with what the later migrations gave them.
    let q = sqlx::query(
        "SELECT nominal_gpus, version, borrowing_limit_gpus, lending_limit_gpus, queueing_strategy FROM quota WHERE team_id = 'nlp'",
    )
    .fetch_one(&p)
    .await
    .unwrap();
    let row: (i64, i64, Option<i64>, Option<i64>, Option<String>) =
        (q.get(0), q.get(1), q.get(2), q.get(3), q.get(4));
    assert_eq!(
        row,
        (16, 1, None, None, None),
        "{what}: the first quota row"
    );
    let intervals: Vec<(String, i64, Option<i64>)> =
        sqlx::query("SELECT job_id, start_ms, end_ms FROM job_interval")
            .fetch_all(&p)
            .await
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect();
    // The running job gets its interval from the job_interval migration's backfill when that
    // ran after the row was written.
    let want_intervals = if before_intervals {
        vec![("j1".to_string(), 2000, None)]
    } else {
        vec![]
    };
    assert_eq!(intervals, want_intervals, "{what}");
    let applied: i64 = sqlx::query("SELECT COUNT(*) FROM _sqlx_migrations WHERE success")
        .fetch_one(&p)
        .await
        .unwrap()
        .get(0);
    assert_eq!(applied as usize, MIGRATOR.iter().count(), "{what}");
    db.close().await;
    p.close().await;
    old.drop_database().await;
}

const INIT: i64 = 20261129000001;
const JOB_INTERVAL: i64 = 20261129000005;
const USAGE_ROLLUP: i64 = 20261129000006;
const QUOTA_STRATEGY: i64 = 20261201000001;

async fn every_past_schema_upgrades(target: Target) {
    upgrades(target, past_migrator(INIT, &[]), "the first landed schema").await;
    upgrades(
        target,
        past_migrator(INIT, &[INIT]),
        "the first schema with the edited init",
    )
    .await;
    upgrades(
        target,
        past_migrator(USAGE_ROLLUP, &[INIT]),
        "the edited init and the first usage_rollup",
    )
    .await;
    upgrades(
        target,
        past_migrator(QUOTA_STRATEGY, &[INIT, USAGE_ROLLUP]),
        "the schema before the edits were undone (both edited)",
    )
    .await;
    upgrades(
        target,
        past_migrator(QUOTA_STRATEGY, &[]),
        "the first texts through quota_strategy",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_past_schema_upgrades_on_sqlite() {
    every_past_schema_upgrades(Target::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_past_schema_upgrades_on_postgres() {
    every_past_schema_upgrades(Target::Postgres).await;
}
