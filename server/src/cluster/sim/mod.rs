//! The in-process `sim` cluster: simulated HGX pools (one Kueue cohort each) that admit,
//! borrow and preempt with the rules in [`super::kueue`], start workloads after a short
//! start-up, and finish them as `succeeded` when their max runtime has elapsed on the clock,
//! or as `failed` when a template parameter asks for it ([`failure`]).
//!
//! The sim keeps no storage of its own: on start it is rebuilt from the database
//! ([`SimCluster::restore`]), which stands in for the etcd of a real cluster.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use chrono::{DateTime, Duration, Utc};
use tokio::sync::mpsc;

use super::kueue::{KueueState, Pending};
pub use super::kueue::{RestoredWorkload, ETA_HORIZON_DAYS};
use super::*;
use crate::clock::Clock;
use app::model::domain::GPUS_PER_NODE;

pub struct SimCluster {
    clock: Clock,
    /// Sim seconds from admission until the pods run.
    startup: Duration,
    state: Mutex<KueueState>,
    subscribers: Mutex<Vec<mpsc::UnboundedSender<ClusterEvent>>>,
    seq: AtomicU64,
}

impl SimCluster {
    pub fn new(clock: Clock, startup_s: u64, pools: &[PoolSpec]) -> Self {
        SimCluster {
            clock,
            startup: Duration::seconds(startup_s as i64),
            state: Mutex::new(KueueState::new(pools, GPUS_PER_NODE)),
            subscribers: Mutex::new(Vec::new()),
            seq: AtomicU64::new(0),
        }
    }

    /// Runs `f` on the state at the clock's present, then sends what changed.
    fn with_state<T>(
        &self,
        f: impl FnOnce(&mut KueueState, DateTime<Utc>, &mut Vec<Pending>) -> T,
    ) -> T {
        let mut out = Vec::new();
        let mut st = self.state.lock().expect("sim lock");
        let now = self.clock.now();
        st.step(now, self.startup, &mut out);
        let r = f(&mut st, now, &mut out);
        self.emit(out);
        r
    }

    /// Puts back what the database says the cluster held: admitted jobs on their nodes,
    /// queued jobs in the queue with their original submission times and the seconds they
    /// were admitted before (runs that ended in a preemption). Then one admission pass.
    pub fn restore(&self, admitted: Vec<RestoredWorkload>, queued: Vec<(WorkloadSpec, i64)>) {
        let mut st = self.state.lock().expect("sim lock");
        for r in admitted {
            let job_id = r.spec.job_id.clone();
            let pool = r.spec.pool.clone();
            if let Err(e) = st.put_admitted(r) {
                tracing::warn!(job.id = %job_id, pool = %pool, error = %e, "restored job names an unknown pool");
            }
        }
        for (q, past_run_s) in queued {
            if let Err(e) = st.enqueue_with_past(q, past_run_s) {
                tracing::warn!(error = %e, "restored job names an unknown pool");
            }
        }
        drop(st);
        self.with_state(|st, now, out| st.cycle(now, out));
    }

    /// Moves the cluster to the clock's present.
    pub fn tick(&self) {
        self.with_state(|_, _, _| ());
    }

    /// Advances a manual clock and everything due in between. `None` for a scaled clock.
    pub fn advance(&self, by: Duration) -> Option<DateTime<Utc>> {
        let now = self.clock.advance(by)?;
        self.tick();
        Some(now)
    }

    fn emit(&self, events: Vec<Pending>) {
        if events.is_empty() {
            return;
        }
        let mut subs = self.subscribers.lock().expect("subscribers lock");
        for (job_id, pool, at, change) in events {
            let seq = self.seq.fetch_add(1, Ordering::SeqCst) + 1;
            let ev = ClusterEvent {
                seq,
                job_id,
                pool,
                at,
                change,
            };
            subs.retain(|s| s.send(ev.clone()).is_ok());
        }
    }
}

#[async_trait]
impl Cluster for SimCluster {
    fn now(&self) -> DateTime<Utc> {
        self.clock.now()
    }

    async fn set_quota(&self, team: &str, pool: &str, quota: QuotaSpec) -> Result<()> {
        self.with_state(|st, now, out| {
            st.set_quota(team, pool, quota)?;
            st.cycle(now, out);
            Ok(())
        })
    }

    async fn submit(&self, w: WorkloadSpec) -> Result<()> {
        self.with_state(|st, now, out| {
            if st.enqueue(w)? {
                st.cycle(now, out);
            }
            Ok(())
        })
    }

    async fn cancel(&self, job_id: &str) -> Result<()> {
        self.with_state(|st, now, out| {
            if let Some(pool) = st.remove(job_id) {
                out.push((
                    job_id.to_string(),
                    pool,
                    now,
                    Change::Cancelled {
                        reason: "Deleted from the cluster".into(),
                    },
                ));
                st.cycle(now, out);
            }
            Ok(())
        })
    }

    async fn pending(&self, pool: &str) -> Result<Arc<Vec<PendingWorkload>>> {
        self.with_state(|st, now, _| st.view(pool, now))
    }

    async fn pools(&self) -> Result<Vec<PoolStatus>> {
        self.with_state(|st, _, _| Ok(st.pools()))
    }

    async fn check(&self, w: &WorkloadSpec) -> Result<Admissibility> {
        self.with_state(|st, now, _| st.check(w, now))
    }

    async fn workloads(&self) -> Result<Vec<(String, WorkloadPhase)>> {
        let st = self.state.lock().expect("sim lock");
        let mut v = Vec::new();
        for co in st.cohorts.values() {
            for a in co.admitted.values() {
                v.push((
                    st.specs[&a.id].job_id.clone(),
                    WorkloadPhase::Admitted {
                        at: a.admitted_at,
                        nodes: co.capacity.node_names(&a.placement),
                        running: st.running.contains(&a.id),
                        past_run_s: st.past_run_s.get(&a.id).copied().unwrap_or(0),
                    },
                ));
            }
        }
        for q in st.queues.values() {
            for c in q.iter() {
                v.push((
                    st.specs[&c.id].job_id.clone(),
                    WorkloadPhase::Pending { evicted_at: None },
                ));
            }
        }
        Ok(v)
    }

    fn subscribe(&self) -> mpsc::UnboundedReceiver<ClusterEvent> {
        let (tx, rx) = mpsc::unbounded_channel();
        self.subscribers.lock().expect("subscribers lock").push(tx);
        rx
    }

    fn last_seq(&self) -> u64 {
        self.seq.load(Ordering::SeqCst)
    }

    async fn logs(&self, src: &LogSource, q: &LogQuery) -> Result<Option<Vec<LogLine>>> {
        let now = self.clock.now();
        if !logs::pods_exist(src, now) {
            return Ok(None);
        }
        let per_rank = (0..src.ranks())
            .filter(|r| q.ranks.includes(*r))
            .map(|r| logs::lines(src, r, now))
            .collect();
        Ok(Some(crate::domain::logs::select(
            crate::domain::logs::interleave(per_rank),
            q,
        )))
    }

    async fn failure(&self, src: &LogSource) -> Result<Option<JobFailure>> {
        if !logs::pods_exist(src, self.clock.now()) {
            return Ok(None);
        }
        Ok(logs::failure(src))
    }
}

pub mod failure;
pub mod logs;
#[cfg(test)]
mod tests;
