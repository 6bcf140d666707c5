//! The log keeper: when a job ends, keeps the last part of each rank's log (and, for a failed
//! job, why its first pod failed) in the database before the cluster deletes the pods.
//! Level-triggered: every round it looks for ended jobs not kept yet, so a job that ended
//! while Gantry was down, or while the cluster did not answer, is kept on a later round.

use std::sync::Arc;
use std::time::Duration;

use crate::service::Portal;

/// How far back an ended job is still worth a try (its pods are long gone after that).
pub const KEEP_WITHIN_HOURS: i64 = 24;

/// One round: keeps every ended job not kept yet; returns how many were kept.
pub async fn keep_once(portal: &Portal) -> anyhow::Result<usize> {
    let since = portal.cluster().now() - chrono::Duration::hours(KEEP_WITHIN_HOURS);
    let rows = portal.db().jobs_to_keep(since, 20).await?;
    let mut kept = 0;
    for row in rows {
        if portal.keep_logs(&row).await? {
            kept += 1;
        }
    }
    Ok(kept)
}

pub fn spawn_keeper(portal: Arc<Portal>, period: Duration) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut every = tokio::time::interval(period);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            if let Err(e) = keep_once(&portal).await {
                tracing::warn!(error = %e, "could not keep ended jobs' logs; will retry");
            }
        }
    })
}
