//! Restart replay benchmark, printed as figures (`cargo bench -p server --bench replay`, part
//! of `make bench`). After a restart the Kubernetes back end's watches list every Workload and
//! job object again, and the event writer is handed the history of each: an admission and an
//! end for every finished job the cluster still holds (Kueue keeps finished Workloads unless a
//! retention policy deletes them, and a JobSet stays with its verdict). Until it is through,
//! the changes that follow wait behind it. Measured: how long the event writer takes over the
//! history of `JOBS` ended jobs (two events each, nothing to write), and then one new launch's
//! admission sent behind it, on SQLite.

use std::sync::Arc;
use std::time::Instant;

use chrono::{Duration, TimeZone, Utc};
use gantry::cluster::sim::SimCluster;
use gantry::cluster::{Change, ClusterEvent};
use gantry::db::Db;

const JOBS: usize = 20_000;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let url = format!(
        "sqlite://{}?mode=rwc",
        dir.path().join("replay.db").display()
    );
    let db = Db::connect(&url, 8).await?;
    let start = Utc.with_ymd_and_hms(2026, 11, 1, 0, 0, 0).unwrap();
    gantry::seed::seed_catalog(&db, start).await?;
    let template = db.list_templates().await?.remove(0);
    // JOBS ended jobs, as a cluster's history holds them, and one queued job.
    let mut tx = db.pool().begin().await?;
    for c in 0..JOBS.div_ceil(500) {
        let mut sql = String::from(
            "INSERT INTO job (job_id, name, template_id, template_version, team_id, user_id, pool_id, gpus, priority, state, params, max_runtime_s, created_at, admitted_at, finished_at) VALUES ",
        );
        for j in c * 500..((c + 1) * 500).min(JOBS) {
            let t = start.timestamp_millis() + j as i64 * 60_000;
            let state = ["succeeded", "failed", "cancelled"][j % 3];
            if j % 500 != 0 {
                sql.push(',');
            }
            sql.push_str(&format!(
                "('ended-{j:06}', 'bench', '{}', {}, 'nlp', 'alice', 'hgx-h100', 16, 'normal', '{state}', '{{}}', 86400, {t}, {}, {})",
                template.name, template.version, t + 1000, t + 3_600_000
            ));
        }
        sqlx::query(&sql).execute(&mut *tx).await?;
    }
    sqlx::query(&format!(
        "INSERT INTO job (job_id, name, template_id, template_version, team_id, user_id, pool_id, gpus, priority, state, params, max_runtime_s, created_at) VALUES ('new-launch', 'bench', '{}', {}, 'nlp', 'alice', 'hgx-h100', 16, 'normal', 'queued', '{{}}', 86400, {})",
        template.name, template.version, Utc::now().timestamp_millis()
    ))
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;

    let pools = gantry::db::pool_specs(db.list_pools().await?, &[]);
    let cluster = Arc::new(SimCluster::new(
        gantry::clock::Clock::manual(Utc::now()),
        0,
        &pools,
    ));
    let (events_tx, events) = tokio::sync::mpsc::unbounded_channel();
    let (applied_tx, mut applied) = tokio::sync::watch::channel(0u64);
    let (_writer, _sync) = gantry::workers::reconciler::spawn_event_writer(
        db.clone(),
        cluster,
        events,
        applied_tx,
        gantry::service::LiveTx::new(1024),
    );
    let mut seq = 0;
    let mut send = |job_id: String, at, change| {
        seq += 1;
        events_tx
            .send(ClusterEvent {
                seq,
                job_id,
                pool: "hgx-h100".into(),
                at,
                change,
            })
            .expect("the writer runs");
        seq
    };
    let t = Instant::now();
    for j in 0..JOBS {
        let at = start + Duration::minutes(j as i64);
        send(
            format!("ended-{j:06}"),
            at + Duration::seconds(1),
            Change::Admitted {
                nodes: vec![],
                past_run_s: Some(0),
            },
        );
        send(
            format!("ended-{j:06}"),
            at + Duration::hours(1),
            Change::Succeeded {
                reason: "The JobSet completed".into(),
            },
        );
    }
    let last = send(
        "new-launch".into(),
        Utc::now(),
        Change::Admitted {
            nodes: vec![],
            past_run_s: Some(0),
        },
    );
    applied.wait_for(|a| *a >= last).await?;
    let took = t.elapsed().as_secs_f64();
    let row = db.get_job("new-launch").await?;
    anyhow::ensure!(
        row.state == app::model::JobState::Admitted,
        "the launch behind the history was admitted: {:?}",
        row.state
    );
    println!(
        "replay: the history of {JOBS} ended jobs ({} events) through the event writer in {took:.2} s ({:.0} events/s); a launch's admission behind it waited as long (SQLite)",
        2 * JOBS,
        (2 * JOBS) as f64 / took
    );
    Ok(())
}
