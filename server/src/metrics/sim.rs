//! The sim metrics back end (the embedded default): series shaped like training,
//! deterministic for a seed: a warm-up ramp, a steady state with noise, evaluation dips every
//! hour, and now and then a job that stalls at 0 %.

use chrono::{DateTime, TimeDelta, Utc};

use super::*;

/// Made-up but plausible training utilization, the same for the same seed and job.
#[derive(Clone, Debug)]
pub struct SimMetrics {
    seed: u64,
}

/// FNV-1a: a stable hash (std's is randomised per process).
fn fnv(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for b in *p {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        h ^= 0xff;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// A number in [0, 1) from a hash.
fn unit(h: u64) -> f64 {
    (h >> 11) as f64 / (1u64 << 53) as f64
}

impl SimMetrics {
    pub fn new(seed: u64) -> SimMetrics {
        SimMetrics { seed }
    }

    fn job_hash(&self, job_id: &str) -> u64 {
        fnv(&[&self.seed.to_le_bytes(), job_id.as_bytes()])
    }

    /// Whether this job stalls (a hung data loader, a deadlock): about 1 in 12 jobs.
    pub fn stalls(&self, job_id: &str) -> bool {
        self.job(job_id).stalls
    }

    /// Utilization in 0..=1 of GPU `gpu`, `secs` seconds into the run.
    pub fn util(&self, job_id: &str, gpu: u32, secs: i64) -> f64 {
        let job = self.job(job_id);
        job.util(gpu, job.steady(gpu), secs)
    }

    /// What a job's readings share: hashed once for all of them (a running job's page reads
    /// a reading a minute for two hours of each of its GPUs: 1,936 of them for 16 GPUs).
    fn job(&self, job_id: &str) -> SimJob {
        let h = self.job_hash(job_id);
        SimJob {
            h,
            stalls: h.is_multiple_of(12),
        }
    }
}

/// One job's hash, and whether it stalls.
#[derive(Clone, Copy)]
struct SimJob {
    h: u64,
    stalls: bool,
}

impl SimJob {
    /// GPU `gpu`'s steady-state level, in 0..=1.
    fn steady(self, gpu: u32) -> f64 {
        0.72 + 0.22 * unit(fnv(&[&self.h.to_le_bytes(), &gpu.to_le_bytes()]))
    }

    /// Utilization in 0..=1 of GPU `gpu`, whose steady level is `steady`, `secs` seconds into
    /// the run.
    fn util(self, gpu: u32, steady: f64, secs: i64) -> f64 {
        let minute = secs.div_euclid(60);
        if secs < 0 {
            return 0.0;
        }
        // Stalled jobs stop after 40 minutes and sit at 0 %.
        if self.stalls && secs >= 40 * 60 {
            return 0.0;
        }
        let noise = (unit(fnv(&[
            &self.h.to_le_bytes(),
            &gpu.to_le_bytes(),
            &minute.to_le_bytes(),
        ])) - 0.5)
            * 0.08;
        // Warm-up: data loading and compilation, ramping over 8 minutes.
        let warm = (secs as f64 / (8.0 * 60.0)).min(1.0);
        // Evaluation: 5 minutes at the end of every hour, GPUs mostly waiting.
        let in_hour = secs.rem_euclid(3600);
        let eval = secs >= 3600 && in_hour < 5 * 60;
        let level = if eval { 0.3 } else { steady };
        (0.03 + (level - 0.03) * warm + noise).clamp(0.0, 1.0)
    }
}

/// A reading of GPU `gpu` of `job` (`sim`, with the GPU's `steady` level) at `at`.
fn reading(
    job: &JobGpus,
    sim: SimJob,
    gpu: u32,
    steady: f64,
    at: DateTime<Utc>,
) -> Option<GpuReading> {
    if gpu >= job.gpus || at < job.since {
        return None;
    }
    let u = sim.util(gpu, steady, (at - job.since).num_seconds());
    Some(GpuReading {
        util_pct: u * 100.0,
        fb_used_mib: if u > 0.05 {
            62_000.0 + 12_000.0 * u
        } else {
            61_000.0
        },
        power_w: 90.0 + 600.0 * u,
    })
}

#[async_trait::async_trait]
impl Metrics for SimMetrics {
    async fn series(
        &self,
        job: &JobGpus,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
        step: TimeDelta,
    ) -> Result<JobSeries, MetricsError> {
        let times = steps(from, to, step);
        let sim = self.job(&job.job_id);
        let gpus = (0..job.gpus)
            .map(|g| {
                let steady = sim.steady(g);
                GpuTrack {
                    node: None,
                    gpu: g,
                    readings: times
                        .iter()
                        .map(|t| reading(job, sim, g, steady, *t))
                        .collect(),
                }
            })
            .collect();
        Ok(JobSeries { times, gpus })
    }

    async fn interval_mean(
        &self,
        job: &JobGpus,
        start: DateTime<Utc>,
        end: DateTime<Utc>,
    ) -> Result<Option<f64>, MetricsError> {
        let (from, to) = (
            (start - job.since).num_seconds(),
            (end - job.since).num_seconds(),
        );
        if to <= from || job.gpus == 0 {
            return Ok(None);
        }
        let sim = self.job(&job.job_id);
        let steady: Vec<f64> = (0..job.gpus).map(|g| sim.steady(g)).collect();
        // One sample a minute per GPU, at the middle of each minute.
        let mut sum = 0.0;
        let mut n = 0u64;
        let mut s = from - from.rem_euclid(60) + 30;
        while s < to {
            if s >= from {
                for (g, level) in (0..job.gpus).zip(&steady) {
                    sum += sim.util(g, *level, s);
                    n += 1;
                }
            }
            s += 60;
        }
        if n == 0 {
            // Shorter than a minute: one sample at the middle.
            let mid = (from + to) / 2;
            let v: f64 = (0..job.gpus)
                .zip(&steady)
                .map(|(g, level)| sim.util(g, *level, mid))
                .sum::<f64>()
                / f64::from(job.gpus);
            return Ok(Some(v));
        }
        Ok(Some(sum / n as f64))
    }
}
