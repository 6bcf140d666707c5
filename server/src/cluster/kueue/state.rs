//! The state model: what Kueue holds, and how it changes as workloads arrive, are admitted,
//! run, end or are evicted.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};

use super::*;
use crate::cluster::sim::failure;
use crate::cluster::{
    Change, ClusterError, PendingWorkload, PoolSpec, QuotaSpec, Result, WorkloadSpec,
};

/// How far ahead an ETA is looked for before saying "no estimate".
pub const ETA_HORIZON_DAYS: i64 = 30;

/// Kueue's state as Gantry models it: each pool's cohort of ClusterQueues with their quotas
/// and admitted workloads, each team's queue, and the queue views (positions, reasons,
/// ETAs). The sim runs on it, the Kubernetes back end mirrors what it watches into it, and
/// the what-if preview replays history on it.
#[derive(Default)]
pub struct KueueState {
    pub(in crate::cluster) cohorts: BTreeMap<String, Cohort>,
    pub(in crate::cluster) queues: BTreeMap<String, Queue>,
    pub(in crate::cluster) gpu_models: HashMap<String, String>,
    pub(in crate::cluster) specs: WidMap<WorkloadSpec>,
    pub(in crate::cluster) wids: HashMap<String, Wid>,
    pub(in crate::cluster) next_wid: Wid,
    /// Admitted workloads whose pods run.
    pub(in crate::cluster) running: HashSet<Wid>,
    /// Seconds each workload was admitted before it was evicted, over all its admissions:
    /// Kueue's `status.accumulatedPastExecutionTimeSeconds`. Its max runtime counts them
    /// (`workload_controller`: remaining = maximum - accumulated - time since admission).
    pub(in crate::cluster) past_run_s: WidMap<i64>,
    /// Every admission runs the whole `max_runtime_s` again, earlier ones not counted: the
    /// what-if replay, whose runtimes are the work each job did (a preempted job starts its
    /// work over), not limits.
    pub(crate) rerun_whole: bool,
    /// Each pool's queue view (positions, reasons, ETAs), recomputed after a change.
    pub(in crate::cluster) views: HashMap<String, Arc<Vec<PendingWorkload>>>,
}

/// A change and where and when it happened: (job id, pool, time, change).
pub type Pending = (String, String, DateTime<Utc>, Change);

/// A job the database says holds GPUs, to put back on its nodes after a restart.
pub struct RestoredWorkload {
    pub spec: WorkloadSpec,
    pub admitted_at: DateTime<Utc>,
    pub nodes: Vec<String>,
    pub running: bool,
    /// Seconds it was admitted before, in runs that were preempted.
    pub past_run_s: i64,
}

impl KueueState {
    pub fn new(pools: &[PoolSpec], per_node: u32) -> Self {
        let mut st = KueueState::default();
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
        if r.past_run_s > 0 {
            self.past_run_s.insert(wid, r.past_run_s);
        }
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

    /// [`KueueState::enqueue`] of a workload that was admitted for `past_run_s` seconds
    /// before, in admissions that ended in an eviction (a restart, a mirror).
    pub fn enqueue_with_past(&mut self, w: WorkloadSpec, past_run_s: i64) -> Result<bool> {
        let job_id = w.job_id.clone();
        let new = self.enqueue(w)?;
        if new && past_run_s > 0 {
            self.past_run_s.insert(self.wids[&job_id], past_run_s);
        }
        Ok(new)
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

    /// Seconds `wid` may still be admitted: its max runtime less what earlier admissions
    /// used (Kueue's max execution time is over them all).
    pub(super) fn run_left_s(&self, wid: Wid) -> i64 {
        let past = match self.rerun_whole {
            true => 0,
            false => self.past_run_s.get(&wid).copied().unwrap_or(0),
        };
        i64::try_from(self.specs[&wid].max_runtime_s)
            .unwrap_or(i64::MAX)
            .saturating_sub(past)
            .max(0)
    }

    pub(super) fn ends_at(&self, wid: Wid, admitted_at: DateTime<Utc>) -> DateTime<Utc> {
        // Saturating: a stored runtime (the what-if replays history) is not trusted to fit.
        let run = Some(self.run_left_s(wid))
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
                let preempted_before =
                    self.past_run_s.remove(&wid).is_some_and(|s| s > 0) && !self.rerun_whole;
                // Preempted before, its work started over and did not fit in what was left:
                // Kueue deactivates the workload at its max runtime (the Kubernetes back end
                // reads the same deactivation so).
                let failed = failed.or_else(|| {
                    preempted_before.then(|| {
                        format!(
                            "Stopped at its max runtime of {}: Kueue deactivated its workload",
                            app::format::duration(spec.max_runtime_s as i64)
                        )
                    })
                });
                if let Some(reason) = failed {
                    // Gantry sees every change of the sim as it happens: no count to repair
                    // from.
                    out.push((
                        spec.job_id,
                        pool,
                        end,
                        Change::Failed {
                            reason,
                            past_run_s: 0,
                        },
                    ));
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
                            past_run_s: Some(self.past_run_s.get(&wid).copied().unwrap_or(0)),
                        },
                    )),
                    Decision::Evict(wid, cause, since) => {
                        self.running.remove(&wid);
                        *self.past_run_s.entry(wid).or_default() +=
                            (at - since).num_seconds().max(0);
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
        self.past_run_s.remove(&wid);
        self.views.clear();
        Some(spec.pool)
    }
}
