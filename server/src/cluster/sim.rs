//! The in-process `sim` cluster: simulated HGX pools that admit workloads with the rules in
//! [`super::admission`] (Kueue's), start them after a short start-up, and finish them as
//! `succeeded` when their max runtime has elapsed on the cluster clock.
//!
//! The sim keeps no storage of its own: on start it is rebuilt from the database
//! ([`SimCluster::restore`]), which stands in for the etcd of a real cluster.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use async_trait::async_trait;
use chrono::{DateTime, Duration, Utc};
use tokio::sync::mpsc;

use super::admission::{admission_cycle, Candidate, Placement, PoolCapacity, TeamUsage};
use super::*;
use crate::clock::Clock;

pub struct SimCluster {
    clock: Clock,
    /// Sim seconds from admission until the pods run.
    startup: Duration,
    state: Mutex<SimState>,
    subscribers: Mutex<Vec<mpsc::UnboundedSender<ClusterEvent>>>,
    seq: AtomicU64,
}

#[derive(Default)]
struct SimState {
    pools: BTreeMap<String, PoolCapacity>,
    gpu_models: HashMap<String, String>,
    /// (team, pool) → nominal GPUs.
    quotas: HashMap<(String, String), u32>,
    pending: HashMap<String, WorkloadSpec>,
    admitted: HashMap<String, AdmittedWorkload>,
}

struct AdmittedWorkload {
    spec: WorkloadSpec,
    at: DateTime<Utc>,
    placement: Placement,
    running: bool,
}

impl AdmittedWorkload {
    fn ends_at(&self) -> DateTime<Utc> {
        self.at + Duration::seconds(self.spec.max_runtime_s as i64)
    }
}

type Pending = (String, String, DateTime<Utc>, Change);

/// A job the database says holds GPUs, to put back on its nodes after a restart.
pub struct RestoredWorkload {
    pub spec: WorkloadSpec,
    pub admitted_at: DateTime<Utc>,
    pub nodes: Vec<String>,
    pub running: bool,
}

impl SimCluster {
    pub fn new(clock: Clock, startup_s: u64, pools: &[PoolSpec]) -> Self {
        let mut state = SimState::default();
        for p in pools {
            let mut cap = PoolCapacity::new(&p.name, p.nodes as usize);
            cap.strategy = p.strategy;
            state.pools.insert(p.name.clone(), cap);
            state.gpu_models.insert(p.name.clone(), p.gpu_model.clone());
        }
        SimCluster {
            clock,
            startup: Duration::seconds(startup_s as i64),
            state: Mutex::new(state),
            subscribers: Mutex::new(Vec::new()),
            seq: AtomicU64::new(0),
        }
    }

    pub fn is_manual(&self) -> bool {
        self.clock.is_manual()
    }

    /// Puts back what the database says the cluster held: admitted jobs on their nodes,
    /// queued jobs in the queue with their original submission times. Then one admission pass.
    pub fn restore(&self, admitted: Vec<RestoredWorkload>, queued: Vec<WorkloadSpec>) {
        let mut out = Vec::new();
        {
            let mut st = self.state.lock().expect("sim lock");
            for r in admitted {
                let Some(pool) = st.pools.get_mut(&r.spec.pool) else {
                    tracing::warn!(job.id = %r.spec.job_id, pool = %r.spec.pool, "restored job names an unknown pool");
                    continue;
                };
                let placement = pool
                    .placement_on(&r.nodes, r.spec.gpus)
                    .filter(|p| p.0.iter().all(|&(i, g)| pool.nodes[i].free >= g))
                    .or_else(|| pool.place(r.spec.gpus));
                match placement {
                    Some(p) => {
                        pool.allocate(&p);
                        st.admitted.insert(
                            r.spec.job_id.clone(),
                            AdmittedWorkload {
                                spec: r.spec,
                                at: r.admitted_at,
                                placement: p,
                                running: r.running,
                            },
                        );
                    }
                    None => {
                        st.pending.insert(r.spec.job_id.clone(), r.spec);
                    }
                }
            }
            for q in queued {
                st.pending.entry(q.job_id.clone()).or_insert(q);
            }
            let now = self.clock.now();
            self.step(&mut st, now, &mut out);
            self.cycle(&mut st, now, &mut out);
            self.emit(out);
        }
    }

    /// Moves the cluster to the clock's present: starts and finishes what is due, in time
    /// order, with an admission pass after each change.
    pub fn tick(&self) {
        let mut out = Vec::new();
        let mut st = self.state.lock().expect("sim lock");
        self.step(&mut st, self.clock.now(), &mut out);
        self.emit(out);
    }

    /// Advances a manual clock and everything due in between. `None` for a scaled clock.
    pub fn advance(&self, by: Duration) -> Option<DateTime<Utc>> {
        let now = self.clock.advance(by)?;
        self.tick();
        Some(now)
    }

    fn step(&self, st: &mut SimState, target: DateTime<Utc>, out: &mut Vec<Pending>) {
        loop {
            let next = st
                .admitted
                .values()
                .map(|a| {
                    if a.running {
                        a.ends_at()
                    } else {
                        (a.at + self.startup).min(a.ends_at())
                    }
                })
                .min();
            let Some(t) = next.filter(|t| *t <= target) else {
                break;
            };
            let mut finished = Vec::new();
            for (id, a) in st.admitted.iter_mut() {
                if !a.running && a.at + self.startup <= t && a.ends_at() > t {
                    a.running = true;
                    out.push((id.clone(), a.spec.pool.clone(), t, Change::Running));
                }
                if a.ends_at() <= t {
                    finished.push(id.clone());
                }
            }
            finished.sort();
            for id in finished {
                let a = st.admitted.remove(&id).expect("finished job is admitted");
                if let Some(pool) = st.pools.get_mut(&a.spec.pool) {
                    pool.release(&a.placement);
                }
                let reason = format!(
                    "Completed after {} (the sim ends jobs at their max runtime)",
                    app::format::duration(a.spec.max_runtime_s as i64)
                );
                out.push((
                    id,
                    a.spec.pool.clone(),
                    a.ends_at(),
                    Change::Succeeded { reason },
                ));
            }
            self.cycle(st, t, out);
        }
    }

    fn usage(st: &SimState, pool: &str) -> TeamUsage {
        let mut usage = TeamUsage::default();
        for ((team, p), n) in &st.quotas {
            if p == pool {
                usage.nominal.insert(team.clone(), *n);
            }
        }
        for a in st.admitted.values().filter(|a| a.spec.pool == pool) {
            *usage.used.entry(a.spec.team.clone()).or_default() += a.spec.gpus;
        }
        usage
    }

    fn candidates(st: &SimState, pool: &str) -> Vec<Candidate> {
        st.pending
            .values()
            .filter(|w| w.pool == pool)
            .map(|w| Candidate {
                id: w.job_id.clone(),
                team: w.team.clone(),
                gpus: w.gpus,
                priority: w.priority,
                submitted_at: w.submitted_at,
            })
            .collect()
    }

    /// One admission pass over every pool at time `at`.
    fn cycle(&self, st: &mut SimState, at: DateTime<Utc>, out: &mut Vec<Pending>) {
        let names: Vec<String> = st.pools.keys().cloned().collect();
        for name in names {
            let candidates = Self::candidates(st, &name);
            if candidates.is_empty() {
                continue;
            }
            let mut usage = Self::usage(st, &name);
            let pool = st.pools.get_mut(&name).expect("pool exists");
            let cycle = admission_cycle(pool, &mut usage, &candidates);
            let named: Vec<(String, Placement, Vec<String>)> = cycle
                .admitted
                .into_iter()
                .map(|(id, p)| {
                    let nodes = pool.node_names(&p);
                    (id, p, nodes)
                })
                .collect();
            for (id, placement, nodes) in named {
                let spec = st.pending.remove(&id).expect("admitted job was pending");
                out.push((id.clone(), name.clone(), at, Change::Admitted { nodes }));
                st.admitted.insert(
                    id,
                    AdmittedWorkload {
                        spec,
                        at,
                        placement,
                        running: false,
                    },
                );
            }
        }
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

    /// The pending workloads of a pool, in order, with why each waits: a dry admission pass
    /// over the present state (which admits nothing, as the last real pass admitted all it could).
    fn pending_in(st: &SimState, pool: &str) -> Result<Vec<PendingWorkload>> {
        let cap = st
            .pools
            .get(pool)
            .ok_or_else(|| ClusterError::UnknownPool(pool.to_string()))?;
        let mut cap = cap.clone();
        let mut usage = Self::usage(st, pool);
        let candidates = Self::candidates(st, pool);
        let cycle = admission_cycle(&mut cap, &mut usage, &candidates);
        let mut per_team: HashMap<String, u32> = HashMap::new();
        let mut list = Vec::new();
        for (pos, (id, blocker)) in cycle.pending.into_iter().enumerate() {
            let w = &st.pending[&id];
            let team_pos = per_team.entry(w.team.clone()).or_default();
            *team_pos += 1;
            list.push(PendingWorkload {
                job_id: id,
                team: w.team.clone(),
                gpus: w.gpus,
                position_in_pool: pos as u32 + 1,
                position_in_team: *team_pos,
                reason: blocker.sentence(),
            });
        }
        Ok(list)
    }
}

#[async_trait]
impl Cluster for SimCluster {
    fn now(&self) -> DateTime<Utc> {
        self.clock.now()
    }

    async fn set_quota(&self, team: &str, pool: &str, nominal_gpus: u32) -> Result<()> {
        let mut out = Vec::new();
        let mut st = self.state.lock().expect("sim lock");
        if !st.pools.contains_key(pool) {
            return Err(ClusterError::UnknownPool(pool.to_string()));
        }
        st.quotas
            .insert((team.to_string(), pool.to_string()), nominal_gpus);
        let now = self.clock.now();
        self.step(&mut st, now, &mut out);
        self.cycle(&mut st, now, &mut out);
        self.emit(out);
        Ok(())
    }

    async fn submit(&self, w: WorkloadSpec) -> Result<()> {
        let mut out = Vec::new();
        let mut st = self.state.lock().expect("sim lock");
        if !st.pools.contains_key(&w.pool) {
            return Err(ClusterError::UnknownPool(w.pool.clone()));
        }
        if st.pending.contains_key(&w.job_id) || st.admitted.contains_key(&w.job_id) {
            return Ok(());
        }
        let now = self.clock.now();
        self.step(&mut st, now, &mut out);
        st.pending.insert(w.job_id.clone(), w);
        self.cycle(&mut st, now, &mut out);
        self.emit(out);
        Ok(())
    }

    async fn cancel(&self, job_id: &str) -> Result<()> {
        let mut out = Vec::new();
        let mut st = self.state.lock().expect("sim lock");
        let now = self.clock.now();
        self.step(&mut st, now, &mut out);
        let pool = if let Some(w) = st.pending.remove(job_id) {
            Some(w.pool)
        } else if let Some(a) = st.admitted.remove(job_id) {
            if let Some(pool) = st.pools.get_mut(&a.spec.pool) {
                pool.release(&a.placement);
            }
            Some(a.spec.pool)
        } else {
            None
        };
        if let Some(pool) = pool {
            out.push((
                job_id.to_string(),
                pool,
                now,
                Change::Cancelled {
                    reason: "Deleted from the cluster".into(),
                },
            ));
            self.cycle(&mut st, now, &mut out);
        }
        self.emit(out);
        Ok(())
    }

    async fn pending(&self, pool: &str) -> Result<Vec<PendingWorkload>> {
        let st = self.state.lock().expect("sim lock");
        Self::pending_in(&st, pool)
    }

    async fn pools(&self) -> Result<Vec<PoolStatus>> {
        let st = self.state.lock().expect("sim lock");
        Ok(st
            .pools
            .values()
            .map(|p| {
                let usage = Self::usage(&st, &p.name);
                let mut used_by_team: Vec<(String, u32)> = usage.used.into_iter().collect();
                used_by_team.sort();
                PoolStatus {
                    name: p.name.clone(),
                    gpu_model: st.gpu_models.get(&p.name).cloned().unwrap_or_default(),
                    nodes: p.nodes.len() as u32,
                    gpus_total: p.total_gpus(),
                    gpus_allocated: p.total_gpus() - p.free_gpus(),
                    free_nodes: p.free_whole_nodes(),
                    pending: st.pending.values().filter(|w| w.pool == p.name).count() as u32,
                    used_by_team,
                }
            })
            .collect())
    }

    async fn check(&self, w: &WorkloadSpec) -> Result<Admissibility> {
        let st = self.state.lock().expect("sim lock");
        let cap = st
            .pools
            .get(&w.pool)
            .ok_or_else(|| ClusterError::UnknownPool(w.pool.clone()))?;
        let mut cap = cap.clone();
        let mut usage = Self::usage(&st, &w.pool);
        let mut candidates = Self::candidates(&st, &w.pool);
        // The probe sorts after every real workload of its priority, as a new launch would.
        let probe_at = candidates
            .iter()
            .map(|c| c.submitted_at)
            .max()
            .unwrap_or(w.submitted_at)
            .max(w.submitted_at);
        candidates.push(Candidate {
            id: "\u{10FFFF}probe".into(),
            team: w.team.clone(),
            gpus: w.gpus,
            priority: w.priority,
            submitted_at: probe_at,
        });
        let cycle = admission_cycle(&mut cap, &mut usage, &candidates);
        if cycle
            .admitted
            .iter()
            .any(|(id, _)| id.starts_with('\u{10FFFF}'))
        {
            return Ok(Admissibility {
                fits_now: true,
                ahead: 0,
                reason: None,
                never: false,
            });
        }
        let pos = cycle
            .pending
            .iter()
            .position(|(id, _)| id.starts_with('\u{10FFFF}'))
            .unwrap_or(0);
        let blocker = &cycle.pending[pos].1;
        Ok(Admissibility {
            fits_now: false,
            ahead: pos as u32,
            reason: Some(blocker.sentence()),
            never: blocker.is_permanent(),
        })
    }

    async fn workloads(&self) -> Result<Vec<(String, WorkloadPhase)>> {
        let st = self.state.lock().expect("sim lock");
        let mut v: Vec<(String, WorkloadPhase)> = st
            .pending
            .keys()
            .map(|id| (id.clone(), WorkloadPhase::Pending))
            .collect();
        for (id, a) in &st.admitted {
            let pool = &st.pools[&a.spec.pool];
            v.push((
                id.clone(),
                WorkloadPhase::Admitted {
                    at: a.at,
                    nodes: pool.node_names(&a.placement),
                    running: a.running,
                },
            ));
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

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn t0() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, 1, 9, 0, 0).unwrap()
    }

    async fn sim(nodes: u32) -> SimCluster {
        let s = SimCluster::new(
            Clock::manual(t0()),
            30,
            &[PoolSpec {
                name: "hgx-h100".into(),
                gpu_model: "H100".into(),
                nodes,
                strategy: QueueingStrategy::BestEffortFifo,
            }],
        );
        s.set_quota("nlp", "hgx-h100", 64).await.unwrap();
        s.set_quota("vision", "hgx-h100", 32).await.unwrap();
        s
    }

    fn job(id: &str, team: &str, gpus: u32, runtime_s: u64, minute: i64) -> WorkloadSpec {
        WorkloadSpec {
            job_id: id.into(),
            team: team.into(),
            pool: "hgx-h100".into(),
            gpus,
            priority: Priority::Normal,
            submitted_at: t0() + Duration::minutes(minute),
            max_runtime_s: runtime_s,
        }
    }

    fn drain(rx: &mut mpsc::UnboundedReceiver<ClusterEvent>) -> Vec<(String, Change)> {
        let mut v = Vec::new();
        while let Ok(e) = rx.try_recv() {
            v.push((e.job_id, e.change));
        }
        v
    }

    #[tokio::test]
    async fn jobs_are_admitted_run_and_finish_on_the_clock() {
        let s = sim(2).await;
        let mut rx = s.subscribe();
        s.submit(job("a", "nlp", 16, 3600, 0)).await.unwrap();
        let ev = drain(&mut rx);
        assert!(
            matches!(&ev[0], (id, Change::Admitted { nodes }) if id == "a" && nodes.len() == 2)
        );
        s.advance(Duration::seconds(30));
        assert_eq!(drain(&mut rx), vec![("a".to_string(), Change::Running)]);
        s.advance(Duration::seconds(3569));
        assert!(
            drain(&mut rx).is_empty(),
            "one second before the end it still runs"
        );
        s.advance(Duration::seconds(1));
        assert!(matches!(&drain(&mut rx)[0], (id, Change::Succeeded { .. }) if id == "a"));
        assert_eq!(s.pools().await.unwrap()[0].gpus_allocated, 0);
    }

    #[tokio::test]
    async fn a_finish_admits_the_next_job_at_that_moment() {
        let s = sim(2).await;
        let mut rx = s.subscribe();
        s.submit(job("a", "nlp", 16, 600, 0)).await.unwrap();
        s.submit(job("b", "nlp", 16, 600, 1)).await.unwrap();
        let q = s.pending("hgx-h100").await.unwrap();
        assert_eq!(q.len(), 1);
        assert_eq!(q[0].position_in_pool, 1);
        assert_eq!(
            q[0].reason,
            "Waiting for 2 whole nodes in hgx-h100: none is free"
        );
        drain(&mut rx);
        s.advance(Duration::hours(1));
        let mut rx_events = Vec::new();
        while let Ok(e) = rx.try_recv() {
            rx_events.push(e);
        }
        let b_admitted = rx_events
            .iter()
            .find(|e| e.job_id == "b" && matches!(e.change, Change::Admitted { .. }))
            .unwrap();
        assert_eq!(
            b_admitted.at,
            t0() + Duration::seconds(600),
            "admitted when a finished, not at the end of the advance"
        );
        let b_done = rx_events
            .iter()
            .find(|e| e.job_id == "b" && matches!(e.change, Change::Succeeded { .. }))
            .unwrap();
        assert_eq!(b_done.at, t0() + Duration::seconds(1200));
    }

    #[tokio::test]
    async fn positions_move_when_a_job_ahead_is_cancelled() {
        let s = sim(16).await;
        s.submit(job("running", "nlp", 64, 3600, 0)).await.unwrap();
        s.submit(job("b", "nlp", 16, 3600, 1)).await.unwrap();
        s.submit(job("c", "nlp", 16, 3600, 2)).await.unwrap();
        let q = s.pending("hgx-h100").await.unwrap();
        assert_eq!(
            q.iter()
                .map(|p| (p.job_id.as_str(), p.position_in_pool))
                .collect::<Vec<_>>(),
            [("b", 1), ("c", 2)]
        );
        assert_eq!(
            q[1].reason,
            "Team nlp would exceed its quota in hgx-h100: 64 of 64 GPUs in use, this job needs 16"
        );
        s.cancel("b").await.unwrap();
        let q = s.pending("hgx-h100").await.unwrap();
        assert_eq!(q.len(), 1);
        assert_eq!((q[0].job_id.as_str(), q[0].position_in_pool), ("c", 1));
    }

    #[tokio::test]
    async fn submitting_twice_is_one_workload() {
        let s = sim(1).await;
        s.submit(job("a", "nlp", 8, 60, 0)).await.unwrap();
        s.submit(job("a", "nlp", 8, 60, 0)).await.unwrap();
        s.submit(job("b", "nlp", 8, 60, 1)).await.unwrap();
        s.submit(job("b", "nlp", 8, 60, 1)).await.unwrap();
        assert_eq!(s.workloads().await.unwrap().len(), 2);
        assert_eq!(s.pending("hgx-h100").await.unwrap().len(), 1);
    }

    #[tokio::test]
    async fn restore_puts_jobs_back_on_their_nodes_and_in_order() {
        let s = sim(2).await;
        let nodes = vec!["hgx-h100-node-01".to_string()];
        s.restore(
            vec![RestoredWorkload {
                spec: job("a", "nlp", 8, 3600, 0),
                admitted_at: t0(),
                nodes: nodes.clone(),
                running: true,
            }],
            vec![job("c", "nlp", 16, 60, 2), job("b", "nlp", 16, 60, 1)],
        );
        let w = s.workloads().await.unwrap();
        assert!(w.iter().any(|(id, p)| id == "a"
            && matches!(p, WorkloadPhase::Admitted { nodes: n, .. } if *n == nodes)));
        let q = s.pending("hgx-h100").await.unwrap();
        assert_eq!(
            q.iter().map(|p| p.job_id.as_str()).collect::<Vec<_>>(),
            ["b", "c"]
        );
    }

    #[tokio::test]
    async fn check_says_whether_a_launch_would_fit() {
        let s = sim(2).await;
        let probe = job("probe", "vision", 16, 60, 5);
        assert!(s.check(&probe).await.unwrap().fits_now);
        s.submit(job("a", "nlp", 16, 3600, 0)).await.unwrap();
        let c = s.check(&probe).await.unwrap();
        assert!(!c.fits_now);
        assert_eq!(c.ahead, 0);
        assert_eq!(
            c.reason.as_deref(),
            Some("Waiting for 2 whole nodes in hgx-h100: none is free")
        );
        let c = s.check(&job("huge", "nlp", 128, 60, 5)).await.unwrap();
        assert!(c.never);
    }
}
