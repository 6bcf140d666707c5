//! The usage recorder: stores each ended run interval's mean GPU utilization, read from the
//! metrics back end, and rolls ended intervals up into the daily usage table.

use std::sync::Arc;
use std::time::Duration;

use crate::db::Db;
use crate::metrics::{Metrics, MetricsError};

/// Every few seconds: stores the mean utilization of every ended run interval that lacks
/// one, then rolls ended intervals up into the daily usage table. A metrics back end that is
/// down leaves its intervals for the next round (reports count them exactly meanwhile):
/// nothing is lost. Without a back end, intervals are rolled up unmeasured.
pub fn spawn_recorder(
    db: Db,
    metrics: Option<Arc<dyn Metrics>>,
    tz: chrono_tz::Tz,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut every = tokio::time::interval(Duration::from_secs(2));
        // Said once when the back end goes away and once when it is back, not every round.
        let mut down = false;
        loop {
            every.tick().await;
            match record_once(&db, metrics.as_deref(), tz).await {
                Ok(r) => match (r.metrics_error, down) {
                    (Some(e), false) => {
                        tracing::warn!(error = %e, "metrics unavailable; ended runs wait, unmeasured, until it answers");
                        down = true;
                    }
                    (None, true) => {
                        tracing::info!("metrics back end answers again; measuring ended runs");
                        down = false;
                    }
                    _ => {}
                },
                Err(e) => {
                    tracing::warn!(error = %e, "could not record interval utilization; will retry");
                }
            }
        }
    })
}

/// What one round of the recorder did.
#[derive(Debug)]
pub struct Recorded {
    /// Intervals rolled up into the daily table.
    pub rolled: usize,
    /// Set when the metrics back end did not answer (its intervals wait for the next round).
    pub metrics_error: Option<MetricsError>,
}

/// One round of [`spawn_recorder`].
pub async fn record_once(
    db: &Db,
    metrics: Option<&dyn Metrics>,
    tz: chrono_tz::Tz,
) -> anyhow::Result<Recorded> {
    let mut metrics_error = None;
    if let Some(metrics) = metrics {
        'batches: loop {
            let batch = db.intervals_without_util(500).await?;
            let full = batch.len() == 500;
            for (id, job, start, end) in batch {
                match metrics.interval_mean(&job, start, end).await {
                    Ok(Some(u)) => db.set_interval_util(&id, u).await?,
                    // The back end has no figure for it: it stays unmeasured (allocated
                    // only), never invented.
                    Ok(None) => db.set_interval_util_unknown(&id).await?,
                    Err(e) => {
                        metrics_error = Some(e);
                        break 'batches;
                    }
                }
            }
            if !full {
                break;
            }
        }
    }
    let mut rolled = 0;
    loop {
        let n = db.roll_up(tz, 500, metrics.is_some()).await?;
        rolled += n;
        if n < 500 {
            return Ok(Recorded {
                rolled,
                metrics_error,
            });
        }
    }
}
