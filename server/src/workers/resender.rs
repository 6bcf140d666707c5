//! The resender: sends stored jobs the cluster does not know and deletes workloads of jobs
//! that already ended; and the clock saver, so the sim resumes from its clock after a restart.

use std::sync::Arc;
use std::time::Duration;

use app::model::JobState;
use tokio::task::JoinHandle;

use crate::cluster::Cluster;
use crate::db::Db;
use crate::service::Portal;

/// Seconds a sent job may stay unseen by the cluster before it is sent again.
pub const RESEND_AFTER_S: i64 = 120;

/// Brings the cluster in line with the database: sends queued jobs the cluster does not know
/// (stored, then the server stopped or the cluster was unreachable before it was sent) and
/// deletes workloads of jobs that already ended in the database (a cancel the cluster missed).
/// Run at start and every few seconds.
///
/// The cluster is read before the database, and a workload is deleted only when its job's
/// row, read again just before, has ended: a launch is stored before it is sent, so a
/// workload whose row is missing or still active is a launch in flight (or not Gantry's) and
/// is left alone. One job's error is logged and the pass goes on.
pub async fn resend_unsent(portal: &Portal) -> anyhow::Result<usize> {
    let held = portal.cluster().workloads().await?;
    let active: std::collections::HashSet<String> = portal
        .db()
        .active_jobs()
        .await?
        .into_iter()
        .map(|r| r.id)
        .collect();
    for (id, _) in &held {
        if active.contains(id) {
            continue;
        }
        if let Err(e) = delete_if_ended(portal, id).await {
            tracing::warn!(job.id = %id, error = %e, "could not check or delete a workload whose job may have ended");
        }
    }
    let known: std::collections::HashSet<String> = portal
        .cluster()
        .workloads()
        .await?
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    let mut sent = 0;
    let now = portal.cluster().now();
    for row in portal.db().active_jobs().await? {
        if known.contains(&row.id) {
            // The cluster holds it: it was sent, though its send was not recorded (the apply
            // timed out after it landed, or the record failed). Recorded now, so that a later
            // repair knows it once reached the cluster and never sends it again.
            if row.sent_at.is_none() {
                portal.db().mark_sent(&row.id, now).await?;
            }
            continue;
        }
        if row.state != JobState::Queued {
            continue;
        }
        // Sent but not seen yet: a real cluster lists it a moment later. Only a job it still
        // lacks after a while is sent again (the same object name: nothing doubles).
        if row
            .sent_at
            .is_some_and(|at| now - at < chrono::Duration::seconds(RESEND_AFTER_S))
        {
            continue;
        }
        match resend(portal, &row).await {
            Ok(()) => sent += 1,
            Err(e) => tracing::warn!(job.id = %row.id, error = %e, "could not send a stored job"),
        }
    }
    Ok(sent)
}

/// Deletes the workload of job `id` if its row says the job has ended.
async fn delete_if_ended(portal: &Portal, id: &str) -> anyhow::Result<()> {
    let row = match portal.db().get_job(id).await {
        Ok(row) => row,
        Err(crate::db::DbError::NotFound) => {
            tracing::warn!(job.id = %id, "the cluster holds a workload with no stored job; left alone");
            return Ok(());
        }
        Err(e) => return Err(e.into()),
    };
    if row.state.is_active() {
        // Stored and sent between the two reads: a live launch, not a leftover.
        return Ok(());
    }
    tracing::info!(job.id = %id, state = %row.state, "deleting a workload whose job has ended");
    portal.cluster().cancel(id).await?;
    Ok(())
}

async fn resend(portal: &Portal, row: &crate::db::JobRow) -> anyhow::Result<()> {
    let spec = crate::service::workload_of(portal.db(), row).await?;
    portal.cluster().submit(spec).await?;
    portal
        .db()
        .mark_sent(&row.id, portal.cluster().now())
        .await?;
    Ok(())
}

/// How often the resender runs.
pub const RESEND_EVERY: Duration = Duration::from_secs(10);

pub fn spawn_resender(portal: Arc<Portal>) -> JoinHandle<()> {
    spawn_resender_every(portal, RESEND_EVERY)
}

/// The resender on its own period (tests run it far more often than production does).
pub fn spawn_resender_every(portal: Arc<Portal>, period: Duration) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut every = tokio::time::interval(period);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            match resend_unsent(&portal).await {
                Ok(0) => {}
                Ok(n) => tracing::info!(count = n, "sent stored jobs the cluster did not have"),
                Err(e) => tracing::warn!(error = %e, "could not re-send stored jobs"),
            }
        }
    })
}

/// Saves the cluster clock every few seconds (the sim resumes from it after a restart).
pub fn spawn_clock_saver(db: Db, cluster: Arc<dyn Cluster>) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut every = tokio::time::interval(Duration::from_secs(2));
        loop {
            every.tick().await;
            if let Err(e) = db.save_sim_clock(cluster.now()).await {
                tracing::warn!(error = %e, "could not save the sim clock");
            }
        }
    })
}
