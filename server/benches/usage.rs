//! Usage report benchmark, printed as figures (`cargo bench -p server --bench usage`):
//! 1,000,000 job run intervals over ~100 days; the report for a 90-day range grouped by team
//! per day, on SQLite and on Postgres (a fresh database on 127.0.0.1:5432, or
//! `GANTRY_TEST_POSTGRES`; missing, the bench fails and says so). Compared in the same run
//! with a plain `GROUP BY` over the raw rows (which is not even exact: it gives each interval
//! to the day it started in) and with the exact report computed from the raw rows.

use std::time::Instant;

use chrono::{DateTime, Duration, TimeZone, Utc};
use gantry::db::Db;
use gantry::usage::{Bucket, GroupBy};

const INTERVALS: usize = 1_000_000;
const PER_JOB: usize = 4;
const RUNS: usize = 7;

fn now() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 29, 12, 0, 0).unwrap()
}

struct Rng(u64);

impl Rng {
    fn next(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// Loads the catalog, 250,000 jobs and 1,000,000 intervals in bulk.
async fn load(db: &Db) -> anyhow::Result<()> {
    let start = now() - Duration::days(100);
    gantry::seed::seed_catalog(db, start).await?;
    let templates: Vec<(String, i64)> = db
        .list_templates()
        .await?
        .into_iter()
        .map(|t| (t.name, i64::from(t.version)))
        .collect();
    let users = [
        ("alice", "nlp"),
        ("bob", "nlp"),
        ("dave", "vision"),
        ("erin", "speech"),
    ];
    let pools = ["hgx-h100", "hgx-h200"];
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let jobs = INTERVALS / PER_JOB;
    let mut tx = db.pool().begin().await?;
    let chunk = 400;
    for c in 0..jobs.div_ceil(chunk) {
        let mut job_sql = String::from(
            "INSERT INTO job (job_id, name, template_id, template_version, team_id, user_id, pool_id, gpus, priority, state, params, max_runtime_s, created_at) VALUES ",
        );
        let mut iv_sql = String::from(
            "INSERT INTO job_interval (interval_id, job_id, team_id, user_id, pool_id, template_id, gpus, start_ms, end_ms, util_mean, util_checked) VALUES ",
        );
        for j in c * chunk..((c + 1) * chunk).min(jobs) {
            let (user, team) = users[rng.next(users.len() as u64) as usize];
            let pool = pools[rng.next(2) as usize];
            let (template, version) = &templates[rng.next(templates.len() as u64) as usize];
            let gpus = [1, 8, 16, 32][rng.next(4) as usize];
            let mut t = start.timestamp_millis() + (rng.next(100 * 86_400) as i64) * 1000;
            if j % chunk != 0 {
                job_sql.push(',');
            }
            job_sql.push_str(&format!(
                "('bench-{j:07}', 'bench', '{template}', {version}, '{team}', '{user}', '{pool}', {gpus}, 'normal', 'succeeded', '{{}}', 86400, {t})"
            ));
            for k in 0..PER_JOB {
                let len = (10 + rng.next(20 * 60) as i64) * 60_000;
                let util = rng.next(1000) as f64 / 1000.0;
                if j % chunk != 0 || k != 0 {
                    iv_sql.push(',');
                }
                iv_sql.push_str(&format!(
                    "('bench-{j:07}-{k}', 'bench-{j:07}', '{team}', '{user}', '{pool}', '{template}', {gpus}, {t}, {}, {util}, 1)",
                    t + len
                ));
                t += len + rng.next(3 * 3600) as i64 * 1000;
            }
        }
        sqlx::query(&job_sql).execute(&mut *tx).await?;
        sqlx::query(&iv_sql).execute(&mut *tx).await?;
    }
    tx.commit().await?;
    Ok(())
}

async fn bench(label: &str, url: &str) -> anyhow::Result<()> {
    let db = Db::connect(url, 4).await?;
    let t = Instant::now();
    load(&db).await?;
    println!(
        "{label}: loaded {INTERVALS} intervals in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    let tz = chrono_tz::Tz::UTC;
    let t = Instant::now();
    let n = db.rebuild_rollups(tz).await?;
    println!(
        "{label}: daily rollups rebuilt from {n} intervals in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    if label == "Postgres" {
        // What autovacuum does after a bulk load; the planner needs the statistics.
        sqlx::query("ANALYZE job_interval")
            .execute(db.pool())
            .await?;
        sqlx::query("ANALYZE usage_daily")
            .execute(db.pool())
            .await?;
    }
    let to = gantry::usage::local_midnight(now().date_naive() + Duration::days(1), tz);
    let from = to - Duration::days(90);

    let mut fast = Vec::new();
    let mut rows = Vec::new();
    for _ in 0..RUNS {
        let t = Instant::now();
        rows = gantry::usage::from_database(
            &db,
            from,
            to,
            now(),
            GroupBy::Team,
            Bucket::Day,
            tz,
            None,
        )
        .await?;
        fast.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    let mut plain = Vec::new();
    for _ in 0..RUNS {
        let t = Instant::now();
        let r = sqlx::query(
            "SELECT team_id, (start_ms - $1) / 86400000 AS d, CAST(SUM(gpus * (end_ms - start_ms)) AS BIGINT) AS gpu_ms \
             FROM job_interval WHERE start_ms >= $1 AND start_ms < $2 GROUP BY team_id, (start_ms - $1) / 86400000",
        )
        .bind(from.timestamp_millis())
        .bind(to.timestamp_millis())
        .fetch_all(db.pool())
        .await?;
        plain.push(t.elapsed().as_secs_f64() * 1000.0);
        assert!(!r.is_empty());
    }
    let t = Instant::now();
    let all = db.intervals_overlapping(from, to, None).await?;
    let exact = gantry::usage::report(&all, from, to, now(), GroupBy::Team, Bucket::Day, tz);
    let raw_exact = t.elapsed().as_secs_f64() * 1000.0;
    let total =
        |r: &[gantry::usage::UsageRow]| r.iter().map(|x| x.gpu_hours_allocated).sum::<f64>();
    assert_eq!(
        rows.len(),
        exact.len(),
        "rollups and raw rows agree on the rows"
    );
    assert!((total(&rows) - total(&exact)).abs() < 1e-6 * total(&exact));
    println!(
        "{label}: 90-day report by team per day ({} rows, {:.0} GPU-hours): rollups median {:.1} ms (min {:.1}, max {:.1}, {RUNS} runs); plain GROUP BY over the raw rows median {:.1} ms; exact from the raw rows {:.0} ms",
        rows.len(),
        total(&rows),
        median(fast.clone()),
        fast.iter().copied().fold(f64::MAX, f64::min),
        fast.iter().copied().fold(0.0, f64::max),
        median(plain),
        raw_exact
    );
    db.close().await;
    Ok(())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let sqlite = format!(
        "sqlite://{}?mode=rwc",
        dir.path().join("bench.db").display()
    );
    bench("SQLite", &sqlite).await?;

    use sqlx::Connection;
    let admin = std::env::var("GANTRY_TEST_POSTGRES")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
    let mut conn = sqlx::PgConnection::connect(&admin).await.map_err(|e| {
        anyhow::anyhow!("the Postgres half of this bench needs a server at {admin}: {e}")
    })?;
    let name = format!("gantry_bench_{}", uuid::Uuid::new_v4().simple());
    sqlx::query(&format!("CREATE DATABASE {name}"))
        .execute(&mut conn)
        .await?;
    let base = admin.rsplit_once('/').map(|(b, _)| b).unwrap_or(&admin);
    let result = bench("Postgres", &format!("{base}/{name}")).await;
    sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        .execute(&mut conn)
        .await?;
    result
}
