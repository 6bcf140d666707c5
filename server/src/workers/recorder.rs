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
        let mut tries = Tries::default();
        // Said once when the back end goes away and once when it is back, not every round.
        let mut down = false;
        loop {
            every.tick().await;
            match record_once(&db, metrics.as_deref(), tz, &mut tries).await {
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

/// Intervals whose query failed in a row after which a round stops (the back end is down).
const MAX_FAILING: usize = 3;
/// Rounds in which one interval's query timed out after which it stays unmeasured.
const MAX_TIMEOUTS: u32 = 3;

/// The intervals whose query timed out, by id, and how many times: kept across rounds.
pub type Tries = std::collections::HashMap<String, u32>;

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
    tries: &mut Tries,
) -> anyhow::Result<Recorded> {
    let mut metrics_error = None;
    if let Some(metrics) = metrics {
        'batches: loop {
            let batch = db.intervals_without_util(500).await?;
            let full = batch.len() == 500;
            // Failures in a row of a back end that cannot be reached end the round; one
            // interval's query that is refused or times out does not hold back the rest.
            let mut failing = 0;
            for (id, job, start, end) in batch {
                match metrics.interval_mean(&job, start, end).await {
                    Ok(Some(u)) => {
                        failing = 0;
                        tries.remove(&id);
                        db.set_interval_util(&id, u).await?
                    }
                    // The back end has no figure for it: it stays unmeasured (allocated
                    // only), never invented.
                    Ok(None) => {
                        failing = 0;
                        tries.remove(&id);
                        db.set_interval_util_unknown(&id).await?
                    }
                    // Refused, and asking again gets the same: unmeasured too.
                    Err(MetricsError::Refused(why)) => {
                        tracing::warn!(interval.id = %id, job.id = %job.job_id, %why, "the metrics back end refused an interval's query; it stays unmeasured");
                        db.set_interval_util_unknown(&id).await?
                    }
                    // Too heavy for the back end, or the back end slow for a while: asked
                    // again next round, a few rounds at most; the rest go on meanwhile.
                    Err(MetricsError::TimedOut(why)) => {
                        let n = tries.entry(id.clone()).or_default();
                        *n += 1;
                        if *n >= MAX_TIMEOUTS {
                            tracing::warn!(interval.id = %id, job.id = %job.job_id, %why, "an interval's query timed out {MAX_TIMEOUTS} times; it stays unmeasured");
                            tries.remove(&id);
                            db.set_interval_util_unknown(&id).await?
                        } else {
                            metrics_error = Some(MetricsError::TimedOut(why));
                        }
                    }
                    Err(e) => {
                        metrics_error = Some(e);
                        failing += 1;
                        if failing >= MAX_FAILING {
                            break 'batches;
                        }
                    }
                }
            }
            // A batch with a failure read again would begin with it again.
            if !full || metrics_error.is_some() {
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

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use chrono::{DateTime, TimeDelta, Utc};

    use super::*;
    use crate::db::{NewJob, Transition};
    use crate::metrics::{JobGpus, JobSeries};
    use crate::testkit::TestDb;
    use app::model::JobState;

    /// Refuses the job named "refused", times out on each "slow" one, answers 50 % for the
    /// rest; or, `down`, answers nothing at all.
    struct Scripted {
        down: bool,
        asked: AtomicUsize,
        names: HashMap<String, String>,
    }

    #[async_trait::async_trait]
    impl Metrics for Scripted {
        async fn series(
            &self,
            _: &JobGpus,
            _: DateTime<Utc>,
            _: DateTime<Utc>,
            _: TimeDelta,
        ) -> Result<JobSeries, MetricsError> {
            unreachable!("the recorder asks for means only")
        }
        async fn interval_mean(
            &self,
            job: &JobGpus,
            _: DateTime<Utc>,
            _: DateTime<Utc>,
        ) -> Result<Option<f64>, MetricsError> {
            self.asked.fetch_add(1, Ordering::SeqCst);
            if self.down {
                return Err(MetricsError::Unavailable("could not be reached".into()));
            }
            match self.names[&job.job_id].as_str() {
                "refused" => Err(MetricsError::Refused("HTTP 422".into())),
                n if n.starts_with("slow") => {
                    Err(MetricsError::TimedOut("no answer within 5 s".into()))
                }
                _ => Ok(Some(0.5)),
            }
        }
    }

    /// An ended run of each name, oldest first; their names by job id.
    async fn runs(db: &Db, names: &[&str]) -> HashMap<String, String> {
        let params = serde_json::Map::new();
        let t0 = Utc::now() - TimeDelta::days(1);
        let mut ids = HashMap::new();
        for (i, name) in names.iter().enumerate() {
            let id = uuid::Uuid::now_v7().to_string();
            let at = t0 + TimeDelta::minutes(i as i64);
            db.insert_job(
                &NewJob {
                    id: &id,
                    name,
                    template: "llama-3.1-8b-fsdp",
                    template_version: 1,
                    team: "nlp",
                    user: "alice",
                    pool: "hgx-h100",
                    gpus: 8,
                    priority: Default::default(),
                    params: &params,
                    max_runtime_s: 3600,
                    idempotency_key: None,
                    request_body: "{}",
                    created_at: at,
                    cloned_from: None,
                },
                "test",
            )
            .await
            .unwrap();
            let none: &[String] = &[];
            for (from, to, at) in [
                (JobState::Queued, JobState::Admitted, at),
                (
                    JobState::Admitted,
                    JobState::Succeeded,
                    at + TimeDelta::hours(1),
                ),
            ] {
                let moved = db
                    .transition(&Transition {
                        job_id: &id,
                        from: &[from],
                        to,
                        at,
                        reason: "test",
                        node_names: Some(none),
                        kind: None,
                    })
                    .await
                    .unwrap();
                assert!(moved);
            }
            ids.insert(id, name.to_string());
        }
        ids
    }

    /// Intervals whose queries fail, refused or timing out, no longer hold back the ones after
    /// them (every later interval stayed unmeasured, and not rolled up, for good): a refused
    /// one is unmeasured at once, one that times out is asked again for a few rounds, then
    /// unmeasured; a back end that cannot be reached ends the round after a few tries;
    /// nothing is invented.
    #[tokio::test]
    async fn one_failing_interval_does_not_hold_back_the_rest() {
        let t = TestDb::sqlite();
        let db = Db::connect(&t.url, 2).await.unwrap();
        crate::seed::seed_catalog(&db, Utc::now()).await.unwrap();
        let names = runs(&db, &["slow1", "slow2", "slow3", "refused", "a", "b", "c"]).await;
        let m = Scripted {
            down: false,
            asked: AtomicUsize::new(0),
            names: names.clone(),
        };
        let mut tries = Tries::default();
        let left = |db: Db, names: HashMap<String, String>| async move {
            let mut left: Vec<String> = db
                .intervals_without_util(500)
                .await
                .unwrap()
                .into_iter()
                .map(|(_, job, _, _)| names[&job.job_id].clone())
                .collect();
            left.sort();
            left
        };
        let r = record_once(&db, Some(&m), chrono_tz::UTC, &mut tries)
            .await
            .unwrap();
        assert!(matches!(r.metrics_error, Some(MetricsError::TimedOut(_))));
        for (id, name) in &names {
            let util = db.job_intervals(id).await.unwrap()[0].3;
            match name.as_str() {
                "a" | "b" | "c" => assert_eq!(util, Some(0.5), "{name}"),
                _ => assert_eq!(util, None, "{name}"),
            }
        }
        // Only the slow ones are asked again: the refused one is unmeasured for good.
        assert_eq!(
            left(db.clone(), names.clone()).await,
            ["slow1", "slow2", "slow3"]
        );
        for _ in 1..MAX_TIMEOUTS {
            record_once(&db, Some(&m), chrono_tz::UTC, &mut tries)
                .await
                .unwrap();
        }
        assert!(left(db.clone(), names.clone()).await.is_empty());
        assert!(tries.is_empty(), "{tries:?}");

        // Down: a few tries, then the round ends.
        let more = runs(&db, &["d", "e", "f", "g", "h"]).await;
        let down = Scripted {
            down: true,
            asked: AtomicUsize::new(0),
            names: names.into_iter().chain(more).collect(),
        };
        record_once(&db, Some(&down), chrono_tz::UTC, &mut tries)
            .await
            .unwrap();
        assert_eq!(down.asked.load(Ordering::SeqCst), MAX_FAILING);
        assert_eq!(db.intervals_without_util(500).await.unwrap().len(), 5);
    }
}
