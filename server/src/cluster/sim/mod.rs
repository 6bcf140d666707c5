//! The in-process `sim` cluster: simulated HGX pools (one Kueue cohort each) that admit,
//! borrow and preempt with the rules in [`super::admission`], start workloads after a short
//! start-up, and finish them as `succeeded` when their max runtime has elapsed on the clock,
//! or as `failed` when a template parameter asks for it ([`failure`]).
//!
//! The sim keeps no storage of its own: on start it is rebuilt from the database
//! ([`SimCluster::restore`]), which stands in for the etcd of a real cluster.

mod view;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use chrono::{DateTime, Duration, Utc};
use tokio::sync::mpsc;

use super::admission::{
    forecast, Blocker, Candidate, Cohort, Decision, PoolCapacity, Queue, Quota, Wid, WidMap,
};
use super::*;
use crate::clock::Clock;
use app::model::domain::GPUS_PER_NODE;

/// How far ahead an ETA is looked for before saying "no estimate".
pub const ETA_HORIZON_DAYS: i64 = 30;

pub struct SimCluster {
    clock: Clock,
    /// Sim seconds from admission until the pods run.
    startup: Duration,
    state: Mutex<SimState>,
    subscribers: Mutex<Vec<mpsc::UnboundedSender<ClusterEvent>>>,
    seq: AtomicU64,
}

/// Everything the sim knows, behind one lock.
#[derive(Default)]
pub struct SimState {
    cohorts: BTreeMap<String, Cohort>,
    queues: BTreeMap<String, Queue>,
    gpu_models: HashMap<String, String>,
    specs: WidMap<WorkloadSpec>,
    wids: HashMap<String, Wid>,
    next_wid: Wid,
    /// Admitted workloads whose pods run.
    running: HashSet<Wid>,
    /// Each pool's queue view (positions, reasons, ETAs), recomputed after a change.
    views: HashMap<String, Arc<Vec<PendingWorkload>>>,
}

/// A change and where and when it happened: (job id, pool, time, change).
pub type Pending = (String, String, DateTime<Utc>, Change);

/// A job the database says holds GPUs, to put back on its nodes after a restart.
pub struct RestoredWorkload {
    pub spec: WorkloadSpec,
    pub admitted_at: DateTime<Utc>,
    pub nodes: Vec<String>,
    pub running: bool,
}

impl SimState {
    pub fn new(pools: &[PoolSpec], per_node: u32) -> Self {
        let mut st = SimState::default();
        for p in pools {
            let mut cap = PoolCapacity::new(&p.name, p.nodes as usize, per_node);
            cap.strategy = p.strategy;
            st.cohorts.insert(p.name.clone(), Cohort::new(cap));
            st.queues.insert(p.name.clone(), Queue::default());
            st.gpu_models.insert(p.name.clone(), p.gpu_model.clone());
        }
        st
    }

    pub fn set_quota(&mut self, team: &str, pool: &str, q: QuotaSpec) -> Result<()> {
        let co = self
            .cohorts
            .get_mut(pool)
            .ok_or_else(|| ClusterError::UnknownPool(pool.to_string()))?;
        let strategy = q.strategy.unwrap_or(co.capacity.strategy);
        co.set_quota(
            team,
            Quota {
                nominal: q.nominal,
                borrowing_limit: q.borrowing_limit,
                lending_limit: q.lending_limit,
                strategy,
            },
        );
        self.views.clear();
        Ok(())
    }

    fn candidate(&mut self, wid: Wid) -> Candidate {
        let spec = &self.specs[&wid];
        let co = self
            .cohorts
            .get_mut(&spec.pool)
            .expect("pool of a known workload");
        Candidate {
            id: wid,
            team: co.team(&spec.team),
            gpus: spec.gpus,
            priority: spec.priority.value(),
            submitted_at: spec.submitted_at,
        }
    }

    /// Puts a workload that already holds GPUs on its nodes (or wherever it fits, else back in
    /// the queue) without an admission pass: a restart, or a mirror of a real cluster.
    pub fn put_admitted(&mut self, r: RestoredWorkload) -> Result<()> {
        let job_id = r.spec.job_id.clone();
        let pool = r.spec.pool.clone();
        if !self.enqueue(r.spec)? {
            return Ok(());
        }
        let wid = self.wids[&job_id];
        let c = self
            .queues
            .get_mut(&pool)
            .and_then(|q| q.remove(wid))
            .expect("just queued");
        let co = self.cohorts.get_mut(&pool).expect("pool");
        match co
            .capacity
            .placement_on(&r.nodes, c.gpus)
            .or_else(|| co.capacity.place(c.gpus))
        {
            Some(p) => {
                co.admit(&c, p, r.admitted_at);
                if r.running {
                    self.running.insert(wid);
                }
            }
            None => self.queues.get_mut(&pool).expect("queue").push(c),
        }
        self.views.clear();
        Ok(())
    }

    /// Adds a pending workload; false if it was known already.
    pub fn enqueue(&mut self, w: WorkloadSpec) -> Result<bool> {
        if !self.cohorts.contains_key(&w.pool) {
            return Err(ClusterError::UnknownPool(w.pool.clone()));
        }
        if self.wids.contains_key(&w.job_id) {
            return Ok(false);
        }
        self.next_wid += 1;
        let wid = self.next_wid;
        self.wids.insert(w.job_id.clone(), wid);
        let pool = w.pool.clone();
        self.specs.insert(wid, w);
        let c = self.candidate(wid);
        self.queues.get_mut(&pool).expect("queue of a pool").push(c);
        self.views.clear();
        Ok(true)
    }

    fn ends_at(&self, wid: Wid, admitted_at: DateTime<Utc>) -> DateTime<Utc> {
        // Saturating: a stored runtime (the what-if replays history) is not trusted to fit.
        let run = i64::try_from(self.specs[&wid].max_runtime_s)
            .ok()
            .and_then(Duration::try_seconds)
            .unwrap_or(Duration::MAX);
        admitted_at
            .checked_add_signed(run)
            .unwrap_or(DateTime::<Utc>::MAX_UTC)
    }

    /// Starts and finishes what is due up to `target`, in time order, with an admission pass
    /// after each change.
    pub fn step(&mut self, target: DateTime<Utc>, startup: Duration, out: &mut Vec<Pending>) {
        loop {
            let mut next: Option<DateTime<Utc>> = None;
            for co in self.cohorts.values() {
                for a in co.admitted.values() {
                    let end = self.ends_at(a.id, a.admitted_at);
                    let t = if self.running.contains(&a.id) {
                        failure::fails_at(&self.specs[&a.id], a.admitted_at, startup)
                            .map_or(end, |f| f.min(end))
                    } else {
                        (a.admitted_at + startup).min(end)
                    };
                    next = Some(next.map_or(t, |n| n.min(t)));
                }
            }
            let Some(t) = next.filter(|t| *t <= target) else {
                break;
            };
            let mut started = Vec::new();
            let mut finished = Vec::new();
            for co in self.cohorts.values() {
                for a in co.admitted.values() {
                    let end = self.ends_at(a.id, a.admitted_at);
                    if !self.running.contains(&a.id) && a.admitted_at + startup <= t && end > t {
                        started.push(a.id);
                    }
                    if end <= t {
                        finished.push((co.pool().to_string(), a.id, end, None));
                    } else if let Some(f) =
                        failure::fails_at(&self.specs[&a.id], a.admitted_at, startup)
                            .filter(|f| *f <= t && self.running.contains(&a.id))
                    {
                        let nodes = co.capacity.node_names(&a.placement);
                        let reason = failure::sentence(&self.specs[&a.id], &nodes);
                        finished.push((co.pool().to_string(), a.id, f, Some(reason)));
                    }
                }
            }
            for wid in started {
                self.running.insert(wid);
                let spec = &self.specs[&wid];
                out.push((spec.job_id.clone(), spec.pool.clone(), t, Change::Running));
            }
            for (pool, wid, end, failed) in finished {
                self.cohorts.get_mut(&pool).expect("pool").release(wid);
                self.running.remove(&wid);
                let spec = self.specs.remove(&wid).expect("finished workload is known");
                self.wids.remove(&spec.job_id);
                if let Some(reason) = failed {
                    out.push((spec.job_id, pool, end, Change::Failed { reason }));
                    continue;
                }
                let reason = format!(
                    "Completed after {} (the sim ends jobs at their max runtime)",
                    app::format::duration(spec.max_runtime_s as i64)
                );
                out.push((spec.job_id, pool, end, Change::Succeeded { reason }));
            }
            self.views.clear();
            self.cycle(t, out);
        }
    }

    /// Kueue's scheduling cycles, with preemption, over every pool at time `at`, until they
    /// change nothing; each admission and eviction becomes an event, in the order decided.
    pub fn cycle(&mut self, at: DateTime<Utc>, out: &mut Vec<Pending>) {
        for (pool, co) in self.cohorts.iter_mut() {
            let queue = self.queues.get_mut(pool).expect("queue of a pool");
            if queue.is_empty() {
                continue;
            }
            let decisions = co.settle(queue, at, true);
            if decisions.is_empty() {
                continue;
            }
            self.views.clear();
            for d in decisions {
                match d {
                    Decision::Admit(wid, placement) => out.push((
                        self.specs[&wid].job_id.clone(),
                        pool.clone(),
                        at,
                        Change::Admitted {
                            nodes: co.capacity.node_names(&placement),
                        },
                    )),
                    Decision::Evict(wid, cause) => {
                        self.running.remove(&wid);
                        out.push((
                            self.specs[&wid].job_id.clone(),
                            pool.clone(),
                            at,
                            Change::Preempted {
                                reason: cause.sentence(),
                            },
                        ));
                    }
                }
            }
        }
    }

    /// Removes a workload wherever it is; its pool if it was known.
    pub fn remove(&mut self, job_id: &str) -> Option<String> {
        let wid = self.wids.remove(job_id)?;
        let spec = self.specs.remove(&wid)?;
        if let Some(q) = self.queues.get_mut(&spec.pool) {
            q.remove(wid);
        }
        if let Some(co) = self.cohorts.get_mut(&spec.pool) {
            co.release(wid);
        }
        self.running.remove(&wid);
        self.views.clear();
        Some(spec.pool)
    }
}

impl SimCluster {
    pub fn new(clock: Clock, startup_s: u64, pools: &[PoolSpec]) -> Self {
        SimCluster {
            clock,
            startup: Duration::seconds(startup_s as i64),
            state: Mutex::new(SimState::new(pools, GPUS_PER_NODE)),
            subscribers: Mutex::new(Vec::new()),
            seq: AtomicU64::new(0),
        }
    }

    /// Runs `f` on the state at the clock's present, then sends what changed.
    fn with_state<T>(
        &self,
        f: impl FnOnce(&mut SimState, DateTime<Utc>, &mut Vec<Pending>) -> T,
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
    /// queued jobs in the queue with their original submission times. Then one admission pass.
    pub fn restore(&self, admitted: Vec<RestoredWorkload>, queued: Vec<WorkloadSpec>) {
        let mut st = self.state.lock().expect("sim lock");
        for r in admitted {
            let job_id = r.spec.job_id.clone();
            let pool = r.spec.pool.clone();
            if let Err(e) = st.put_admitted(r) {
                tracing::warn!(job.id = %job_id, pool = %pool, error = %e, "restored job names an unknown pool");
            }
        }
        for q in queued {
            if let Err(e) = st.enqueue(q) {
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
                    },
                ));
            }
        }
        for q in st.queues.values() {
            for c in q.iter() {
                v.push((st.specs[&c.id].job_id.clone(), WorkloadPhase::Pending));
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
}

pub mod failure;
#[cfg(test)]
mod tests;
