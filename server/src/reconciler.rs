//! Brings the database into agreement with the cluster: writes every state change the
//! cluster reports, re-sends jobs that were stored but never reached it, and keeps the sim
//! clock saved so a restart resumes where it stopped.

use std::sync::Arc;
use std::time::Duration;

use app::model::JobState;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use crate::cluster::{Change, Cluster, ClusterEvent};
use crate::db::{Db, Transition};
use crate::service::{LiveChange, Portal};

/// Writes cluster events to the database in order, then marks them applied.
pub fn spawn_event_writer(
    db: Db,
    mut events: mpsc::UnboundedReceiver<ClusterEvent>,
    applied: watch::Sender<u64>,
    live: tokio::sync::broadcast::Sender<LiveChange>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        while let Some(ev) = events.recv().await {
            // A database outage must not lose the event: retry until it is written.
            let mut delay = Duration::from_millis(100);
            loop {
                match apply(&db, &ev).await {
                    Ok(Some(change)) => {
                        let _ = live.send(change);
                        break;
                    }
                    Ok(None) => break,
                    Err(e) => {
                        tracing::error!(job.id = %ev.job_id, seq = ev.seq, error = %e, "could not store a cluster event; retrying");
                        tokio::time::sleep(delay).await;
                        delay = (delay * 2).min(Duration::from_secs(10));
                    }
                }
            }
            applied.send_replace(ev.seq);
        }
    })
}

async fn apply(db: &Db, ev: &ClusterEvent) -> Result<Option<LiveChange>, crate::db::DbError> {
    use JobState::*;
    let none: &[String] = &[];
    let mut kind = None;
    let (from, to, reason, nodes): (&[JobState], JobState, String, Option<&[String]>) =
        match &ev.change {
            Change::Admitted { nodes } => (
                &[Queued],
                Admitted,
                if nodes.is_empty() {
                    format!("Admitted: quota reserved in {}", ev.pool)
                } else {
                    format!(
                        "Admitted: quota reserved in {} on {}",
                        ev.pool,
                        nodes.join(", ")
                    )
                },
                Some(nodes.as_slice()),
            ),
            Change::Running => (
                &[Admitted],
                Running,
                "All pods are running".to_string(),
                None,
            ),
            Change::Succeeded { reason } => (&[Admitted, Running], Succeeded, reason.clone(), None),
            Change::Failed { reason } => (&[Admitted, Running], Failed, reason.clone(), None),
            Change::Cancelled { reason } => (
                &[Queued, Admitted, Running],
                Cancelled,
                reason.clone(),
                None,
            ),
            Change::Preempted { reason } => {
                kind = Some("preempted");
                (&[Admitted, Running], Queued, reason.clone(), Some(none))
            }
        };
    let applied = db
        .transition(&Transition {
            job_id: &ev.job_id,
            from,
            to,
            at: ev.at,
            reason: &reason,
            node_names: nodes,
            kind,
        })
        .await?;
    if !applied {
        return Ok(None);
    }
    let row = db.get_job(&ev.job_id).await?;
    tracing::info!(job.id = %ev.job_id, state = %to, pool = %ev.pool, "job moved");
    Ok(Some(LiveChange {
        job_id: row.id,
        team: row.team,
        pool: row.pool,
        state: to,
        at: ev.at,
    }))
}

/// Seconds a sent job may stay unseen by the cluster before it is sent again.
pub const RESEND_AFTER_S: i64 = 120;

/// Brings the cluster in line with the database: sends queued jobs the cluster does not know
/// (stored, then the server stopped or the cluster was unreachable before it was sent) and
/// deletes workloads of jobs that already ended in the database (a cancel the cluster missed).
/// Run at start and every few seconds.
pub async fn resend_unsent(portal: &Portal) -> anyhow::Result<usize> {
    let active: std::collections::HashSet<String> = portal
        .db
        .active_jobs()
        .await?
        .into_iter()
        .map(|r| r.id)
        .collect();
    for (id, _) in portal.cluster.workloads().await? {
        if !active.contains(&id) {
            tracing::info!(job.id = %id, "deleting a workload whose job has ended");
            portal.cluster.cancel(&id).await?;
        }
    }
    let known: std::collections::HashSet<String> = portal
        .cluster
        .workloads()
        .await?
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    let mut sent = 0;
    let now = portal.cluster.now();
    for row in portal.db.active_jobs().await? {
        if row.state != JobState::Queued || known.contains(&row.id) {
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
        let spec = crate::service::workload_of(&portal.db, &row).await?;
        portal.cluster.submit(spec).await?;
        portal.db.mark_sent(&row.id, portal.cluster.now()).await?;
        sent += 1;
    }
    Ok(sent)
}

pub fn spawn_resender(portal: Arc<Portal>) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut every = tokio::time::interval(Duration::from_secs(10));
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
