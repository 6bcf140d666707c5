//! GPU metrics: where utilization comes from. A [`Metrics`] back end answers a job's
//! per-GPU series over a time range and the mean utilization of a run interval; the recorder
//! stores that mean with the interval, so usage reports never depend on the metrics store's
//! retention.
//!
//! `sim` (the embedded default) makes up series shaped like training, deterministic for a
//! seed: a warm-up ramp, a steady state with noise, evaluation dips every hour, and now and
//! then a job that stalls at 0 %. `prometheus` ([`prometheus`]) asks PromQL over DCGM
//! exporter series.

pub mod prometheus;

mod sim;

pub use sim::SimMetrics;

use chrono::{DateTime, TimeDelta, Utc};

pub use crate::domain::workload::JobGpus;

#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    /// The back end did not answer (down, unreachable, too slow): ask again later.
    #[error("metrics unavailable: {0}")]
    Unavailable(String),
    /// The back end did not answer this query in time: it may be too heavy for it (a long
    /// run's mean), or the back end slow for a while.
    #[error("metrics unavailable: {0}")]
    TimedOut(String),
    /// The back end answered, and refused this query (an HTTP 4xx): asking it again the same
    /// way gets the same answer.
    #[error("metrics unavailable: {0}")]
    Refused(String),
}

impl MetricsError {
    /// Why, without the "metrics unavailable" in front.
    pub fn reason(&self) -> &str {
        match self {
            MetricsError::Unavailable(why)
            | MetricsError::TimedOut(why)
            | MetricsError::Refused(why) => why,
        }
    }
}

/// One GPU's reading at one time.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct GpuReading {
    /// Utilization, 0–100 %.
    pub util_pct: f64,
    /// Frame-buffer memory in use, MiB.
    pub fb_used_mib: f64,
    /// Power draw, W.
    pub power_w: f64,
}

/// One GPU of a job over a [`JobSeries`]' times.
#[derive(Clone, Debug, PartialEq)]
pub struct GpuTrack {
    /// The node it is on, when the back end knows (DCGM's `Hostname` label).
    pub node: Option<String>,
    /// Its index on that node (DCGM's `gpu` label), or across the job when `node` is unknown.
    pub gpu: u32,
    /// A reading per time; `None` where the back end has no sample.
    pub readings: Vec<Option<GpuReading>>,
}

/// A job's readings at `times` (`from`, `from + step`, … up to `to`), one track per GPU.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct JobSeries {
    pub times: Vec<DateTime<Utc>>,
    pub gpus: Vec<GpuTrack>,
}

/// The times `from`, `from + step`, … that are not after `to`.
pub fn steps(from: DateTime<Utc>, to: DateTime<Utc>, step: TimeDelta) -> Vec<DateTime<Utc>> {
    let mut out = Vec::new();
    let mut t = from;
    while t <= to && step > TimeDelta::zero() {
        out.push(t);
        t += step;
    }
    out
}

#[async_trait::async_trait]
pub trait Metrics: Send + Sync {
    /// The job's per-GPU readings at every `step` from `from` to `to` (both included).
    async fn series(
        &self,
        job: &JobGpus,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
        step: TimeDelta,
    ) -> Result<JobSeries, MetricsError>;

    /// [`Metrics::series`] for several jobs at once, in `jobs`' order: the Pools grid asks
    /// once per pool. The default asks job by job; a back end that can do one query does.
    async fn series_many(
        &self,
        jobs: &[JobGpus],
        from: DateTime<Utc>,
        to: DateTime<Utc>,
        step: TimeDelta,
    ) -> Result<Vec<JobSeries>, MetricsError> {
        let mut out = Vec::with_capacity(jobs.len());
        for job in jobs {
            out.push(self.series(job, from, to, step).await?);
        }
        Ok(out)
    }

    /// Mean utilization (0..=1) of all the job's GPUs over `[start, end)`; `None` when the
    /// back end has no samples for it.
    async fn interval_mean(
        &self,
        job: &JobGpus,
        start: DateTime<Utc>,
        end: DateTime<Utc>,
    ) -> Result<Option<f64>, MetricsError>;
}

/// Idle: utilization under 5 % on every GPU at every sample of the last 30 minutes.
pub const IDLE_BELOW_PCT: f64 = 5.0;
pub const IDLE_FOR: chrono::TimeDelta = chrono::TimeDelta::minutes(30);

/// Whether the samples (time, per-GPU utilization in %) show the job idle at `now`: it has
/// samples covering the last [`IDLE_FOR`], and every one is under [`IDLE_BELOW_PCT`].
pub fn is_idle(samples: &[(DateTime<Utc>, Vec<f64>)], now: DateTime<Utc>) -> bool {
    let since = now - IDLE_FOR;
    let Some(first) = samples.first() else {
        return false;
    };
    if first.0 > since {
        return false;
    }
    samples
        .iter()
        .filter(|(t, _)| *t >= since)
        .all(|(_, gpus)| gpus.iter().all(|u| *u < IDLE_BELOW_PCT))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(id: &str) -> JobGpus {
        JobGpus {
            job_id: id.into(),
            team: "nlp".into(),
            gpus: 8,
            since: "2026-11-01T00:00:00Z".parse().unwrap(),
        }
    }

    #[test]
    fn idle_means_every_gpu_under_5_percent_for_30_minutes() {
        let t0: DateTime<Utc> = "2026-11-01T00:00:00Z".parse().unwrap();
        let at = |m: i64| t0 + chrono::Duration::minutes(m);
        let series =
            |f: &dyn Fn(i64) -> Vec<f64>| (0..=60).map(|m| (at(m), f(m))).collect::<Vec<_>>();
        // 0 % for the last 31 minutes on both GPUs: idle.
        let s = series(&|m| {
            if m >= 29 {
                vec![0.0, 1.0]
            } else {
                vec![90.0, 90.0]
            }
        });
        assert!(is_idle(&s, at(60)));
        // One GPU busy once in the window: not idle.
        let s = series(&|m| {
            if m == 50 {
                vec![0.0, 40.0]
            } else {
                vec![0.0, 0.0]
            }
        });
        assert!(!is_idle(&s, at(60)));
        // Quiet, but for only 20 minutes so far: not idle yet.
        let s: Vec<_> = (0..=20).map(|m| (at(40 + m), vec![0.0])).collect();
        assert!(!is_idle(&s, at(60)));
        assert!(!is_idle(&[], at(60)));
    }

    #[test]
    fn the_same_seed_gives_the_same_series_and_another_seed_another() {
        let a = SimMetrics::new(1);
        let b = SimMetrics::new(2);
        let s = |m: &SimMetrics| {
            (0..600)
                .map(|t| m.util("job-1", 3, t * 60))
                .collect::<Vec<_>>()
        };
        assert_eq!(s(&a), s(&SimMetrics::new(1)));
        assert_ne!(s(&a), s(&b));
    }

    #[test]
    fn series_look_like_training() {
        let m = SimMetrics::new(7);
        let id = (0..100)
            .map(|i| format!("job-{i}"))
            .find(|j| !m.stalls(j))
            .unwrap();
        // Warm-up starts low and climbs.
        assert!(m.util(&id, 0, 0) < 0.1);
        assert!(m.util(&id, 0, 30 * 60) > 0.6);
        // The evaluation dip at the top of each hour.
        assert!(m.util(&id, 0, 3600 + 120) < 0.4);
        assert!(m.util(&id, 0, 3600 + 20 * 60) > 0.6);
        // Some jobs stall at 0 %, and not all do.
        let stalled: Vec<_> = (0..200)
            .map(|i| format!("job-{i}"))
            .filter(|j| m.stalls(j))
            .collect();
        assert!(
            !stalled.is_empty() && stalled.len() < 40,
            "{}",
            stalled.len()
        );
        assert_eq!(m.util(&stalled[0], 0, 3 * 3600), 0.0);
    }

    /// The sim's readings are the figures its formula gave before a job's hash was worked out
    /// once for all its readings: computed apart from this code (a Python transcription of the
    /// formula as it stood at 8db36ba), so the demo's charts did not move.
    #[test]
    fn the_sim_readings_are_the_formula_s_figures() {
        let m = SimMetrics::new(42);
        for (job, gpu, secs, want) in [
            ("job-1", 3, 0, 0.0),
            ("job-1", 3, 200, 0.36222195685040737),
            ("job-1", 3, 1800, 0.8763437232118387),
            ("job-1", 3, 3720, 0.3013417425729073),
            ("job-7", 0, 5400, 0.7635957492163472),
            ("job-7", 15, 7199, 0.776721748752575),
        ] {
            assert_eq!(m.util(job, gpu, secs), want, "{job} GPU {gpu} at {secs} s");
        }
        // The first of job-0…job-99 that stalls, by the same transcription.
        let stalls: Vec<_> = (0..100)
            .map(|i| format!("job-{i}"))
            .filter(|j| m.stalls(j))
            .collect();
        assert_eq!(stalls.first().map(String::as_str), Some("job-3"));
    }

    /// A series (each job's hash worked out once, each GPU's level once) reads what `util`
    /// reads for each GPU at each time, a stalled job's zeros included.
    #[tokio::test]
    async fn a_series_reads_what_util_reads() {
        let m = SimMetrics::new(42);
        for id in ["job-1", "job-3"] {
            let j = JobGpus {
                gpus: 16,
                ..job(id)
            };
            let s = m
                .series(
                    &j,
                    j.since,
                    j.since + TimeDelta::hours(2),
                    TimeDelta::minutes(1),
                )
                .await
                .unwrap();
            assert_eq!((s.gpus.len(), s.times.len()), (16, 121));
            for (g, track) in s.gpus.iter().enumerate() {
                for (t, r) in s.times.iter().zip(&track.readings) {
                    let secs = (*t - j.since).num_seconds();
                    let want = m.util(id, g as u32, secs) * 100.0;
                    assert_eq!(r.unwrap().util_pct, want, "{id} GPU {g} at {secs} s");
                }
            }
        }
    }

    #[tokio::test]
    async fn an_interval_mean_is_the_mean_of_its_minutes() {
        let m = SimMetrics::new(3);
        let j = job("job-9");
        let start = j.since + chrono::Duration::hours(2);
        let end = start + chrono::Duration::minutes(10);
        let mean = m.interval_mean(&j, start, end).await.unwrap().unwrap();
        let by_hand: f64 = (0..10)
            .flat_map(|k| (0..8).map(move |g| (k, g)))
            .map(|(k, g)| m.util("job-9", g, 2 * 3600 + k * 60 + 30))
            .sum::<f64>()
            / 80.0;
        assert!((mean - by_hand).abs() < 1e-12, "{mean} vs {by_hand}");
        let s = m
            .series(&j, start, end, TimeDelta::minutes(1))
            .await
            .unwrap();
        assert_eq!(s.times.len(), 11, "both ends included");
        assert_eq!(s.gpus.len(), 8, "the job has 8 GPUs");
        let r = s.gpus[7].readings[0].unwrap();
        assert!(r.util_pct >= 0.0 && r.util_pct <= 100.0 && r.power_w > 0.0);
        let before = m
            .series(
                &j,
                j.since - TimeDelta::minutes(2),
                j.since,
                TimeDelta::minutes(1),
            )
            .await
            .unwrap();
        assert_eq!(
            before.gpus[0]
                .readings
                .iter()
                .map(Option::is_some)
                .collect::<Vec<_>>(),
            [false, false, true],
            "nothing before the run started"
        );
    }
}
