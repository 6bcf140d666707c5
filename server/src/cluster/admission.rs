//! Kueue's admission rules, written once. The sim cluster runs them; the Kubernetes back end
//! leaves admission to Kueue itself and these rules are the reference the two must agree on.
//!
//! What is copied from Kueue, and where it is documented:
//! - A workload is admitted only when the whole of it fits at once, quota and capacity both:
//!   Kueue reserves quota for every pod set of a Workload together or not at all
//!   (<https://kueue.sigs.k8s.io/docs/concepts/workload/>, "Admission"), and all-or-nothing
//!   start is `waitForPodsReady` (<https://kueue.sigs.k8s.io/docs/tasks/manage/setup_wait_for_pods_ready/>).
//! - Whole nodes for gangs above 8 GPUs, and one node for 8 or fewer, is what Topology Aware
//!   Scheduling gives with `kueue.x-k8s.io/podset-required-topology: kubernetes.io/hostname`
//!   and one pod per node (<https://kueue.sigs.k8s.io/docs/concepts/topology_aware_scheduling/>).
//! - A team's usage may not pass its `nominalQuota` in the pool's flavor (borrowing comes with
//!   cohorts later) (<https://kueue.sigs.k8s.io/docs/concepts/cluster_queue/#resource-groups>).
//! - Order: higher WorkloadPriorityClass value first, then earlier creation time
//!   (<https://kueue.sigs.k8s.io/docs/concepts/workload_priority_class/>; ClusterQueue
//!   "queueingStrategy": both strategies sort by priority, then creation timestamp).
//! - `BestEffortFIFO` (Kueue's default): a workload that cannot be admitted does not block
//!   later ones that fit. `StrictFIFO`: the head blocks everything behind it
//!   (<https://kueue.sigs.k8s.io/docs/concepts/cluster_queue/#queueing-strategy>).

use std::cmp::Ordering;
use std::collections::HashMap;

use app::model::{Priority, GPUS_PER_NODE};
use chrono::{DateTime, Utc};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum QueueingStrategy {
    #[default]
    BestEffortFifo,
    StrictFifo,
}

impl QueueingStrategy {
    pub fn parse(s: &str) -> Option<QueueingStrategy> {
        match s {
            "BestEffortFIFO" => Some(QueueingStrategy::BestEffortFifo),
            "StrictFIFO" => Some(QueueingStrategy::StrictFifo),
            _ => None,
        }
    }
}

/// One HGX node and how many of its GPUs are free.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    pub name: String,
    pub free: u32,
}

/// A pool's nodes as the admission pass sees them.
#[derive(Clone, Debug)]
pub struct PoolCapacity {
    pub name: String,
    pub nodes: Vec<Node>,
    pub strategy: QueueingStrategy,
}

impl PoolCapacity {
    pub fn new(name: &str, node_count: usize) -> Self {
        PoolCapacity {
            name: name.to_string(),
            nodes: (0..node_count)
                .map(|i| Node {
                    name: format!("{name}-node-{i:02}"),
                    free: GPUS_PER_NODE,
                })
                .collect(),
            strategy: QueueingStrategy::default(),
        }
    }

    pub fn total_gpus(&self) -> u32 {
        self.nodes.len() as u32 * GPUS_PER_NODE
    }

    pub fn free_gpus(&self) -> u32 {
        self.nodes.iter().map(|n| n.free).sum()
    }

    pub fn free_whole_nodes(&self) -> u32 {
        self.nodes
            .iter()
            .filter(|n| n.free == GPUS_PER_NODE)
            .count() as u32
    }

    /// Where a gang of `gpus` would go now, or `None`. Up to 8 GPUs: the fullest node that
    /// still has room (best fit, so whole nodes stay free for gangs). More: whole free nodes.
    pub fn place(&self, gpus: u32) -> Option<Placement> {
        if gpus == 0 {
            return None;
        }
        if gpus <= GPUS_PER_NODE {
            self.nodes
                .iter()
                .enumerate()
                .filter(|(_, n)| n.free >= gpus)
                .min_by_key(|(i, n)| (n.free, *i))
                .map(|(i, _)| Placement(vec![(i, gpus)]))
        } else {
            let need = gpus.div_ceil(GPUS_PER_NODE) as usize;
            let free: Vec<usize> = self
                .nodes
                .iter()
                .enumerate()
                .filter(|(_, n)| n.free == GPUS_PER_NODE)
                .map(|(i, _)| i)
                .take(need)
                .collect();
            (free.len() == need)
                .then(|| Placement(free.into_iter().map(|i| (i, GPUS_PER_NODE)).collect()))
        }
    }

    pub fn allocate(&mut self, p: &Placement) {
        for &(i, g) in &p.0 {
            self.nodes[i].free -= g;
        }
    }

    pub fn release(&mut self, p: &Placement) {
        for &(i, g) in &p.0 {
            self.nodes[i].free = (self.nodes[i].free + g).min(GPUS_PER_NODE);
        }
    }

    pub fn node_names(&self, p: &Placement) -> Vec<String> {
        p.0.iter()
            .map(|&(i, _)| self.nodes[i].name.clone())
            .collect()
    }

    /// The placement on the named nodes (used to restore a job after a restart).
    pub fn placement_on(&self, names: &[String], gpus: u32) -> Option<Placement> {
        let per_node = gpus.min(GPUS_PER_NODE);
        let mut p = Vec::new();
        for name in names {
            let i = self.nodes.iter().position(|n| &n.name == name)?;
            p.push((i, per_node));
        }
        Some(Placement(p))
    }
}

/// GPUs taken on each node, by node index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement(pub Vec<(usize, u32)>);

/// A workload waiting for admission.
#[derive(Clone, Debug)]
pub struct Candidate {
    pub id: String,
    pub team: String,
    pub gpus: u32,
    pub priority: Priority,
    pub submitted_at: DateTime<Utc>,
}

/// Kueue's queue order: priority (higher first), then creation time, then id for a total order.
pub fn queue_order(a: &Candidate, b: &Candidate) -> Ordering {
    b.priority
        .value()
        .cmp(&a.priority.value())
        .then(a.submitted_at.cmp(&b.submitted_at))
        .then(a.id.cmp(&b.id))
}

/// Why a workload is not admitted: the binding constraint, checked in Kueue's order (quota
/// first, then whether the pods fit).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Blocker {
    /// Larger than the whole pool: can never be admitted.
    LargerThanPool {
        pool: String,
        need: u32,
        total: u32,
    },
    /// Larger than the team's quota: can never be admitted without borrowing.
    LargerThanQuota {
        team: String,
        pool: String,
        need: u32,
        nominal: u32,
    },
    Quota {
        team: String,
        pool: String,
        used: u32,
        nominal: u32,
        need: u32,
    },
    WholeNodes {
        pool: String,
        need: u32,
        free: u32,
    },
    NodeRoom {
        pool: String,
        need: u32,
        most_free: u32,
    },
    /// StrictFIFO: an earlier workload at the head blocks this one.
    StrictFifo {
        pool: String,
    },
}

impl Blocker {
    /// One plain sentence for the job page.
    pub fn sentence(&self) -> String {
        match self {
            Blocker::LargerThanPool { pool, need, total } => format!(
                "Needs {need} GPUs but {pool} has {total} in all: it can never be admitted"
            ),
            Blocker::LargerThanQuota { team, pool, need, nominal } => format!(
                "Needs {need} GPUs but team {team}'s quota in {pool} is {nominal}: it can never be admitted"
            ),
            Blocker::Quota { team, pool, used, nominal, need } => format!(
                "Team {team} would exceed its quota in {pool}: {used} of {nominal} GPUs in use, this job needs {need}"
            ),
            Blocker::WholeNodes { pool, need, free } => format!(
                "Waiting for {need} whole nodes in {pool}: {} free",
                match free {
                    0 => "none is".to_string(),
                    1 => "1 is".to_string(),
                    n => format!("{n} are"),
                }
            ),
            Blocker::NodeRoom { pool, need, most_free } => format!(
                "Waiting for a node with {need} free GPUs in {pool}: at most {most_free} free on any node"
            ),
            Blocker::StrictFifo { pool } => format!(
                "Waiting behind an earlier job in {pool}, which queues in strict FIFO order"
            ),
        }
    }

    pub fn is_permanent(&self) -> bool {
        matches!(
            self,
            Blocker::LargerThanPool { .. } | Blocker::LargerThanQuota { .. }
        )
    }
}

/// GPUs in use per team in one pool, and the teams' nominal quotas there.
#[derive(Clone, Debug, Default)]
pub struct TeamUsage {
    pub nominal: HashMap<String, u32>,
    pub used: HashMap<String, u32>,
}

impl TeamUsage {
    pub fn used(&self, team: &str) -> u32 {
        self.used.get(team).copied().unwrap_or(0)
    }

    pub fn nominal(&self, team: &str) -> u32 {
        self.nominal.get(team).copied().unwrap_or(0)
    }
}

/// Would `c` be admitted now? `Ok` with where it would go, or the binding constraint.
pub fn evaluate(
    pool: &PoolCapacity,
    usage: &TeamUsage,
    c: &Candidate,
) -> Result<Placement, Blocker> {
    let total = pool.total_gpus();
    if c.gpus > total {
        return Err(Blocker::LargerThanPool {
            pool: pool.name.clone(),
            need: c.gpus,
            total,
        });
    }
    let nominal = usage.nominal(&c.team);
    if c.gpus > nominal {
        return Err(Blocker::LargerThanQuota {
            team: c.team.clone(),
            pool: pool.name.clone(),
            need: c.gpus,
            nominal,
        });
    }
    let used = usage.used(&c.team);
    if used + c.gpus > nominal {
        return Err(Blocker::Quota {
            team: c.team.clone(),
            pool: pool.name.clone(),
            used,
            nominal,
            need: c.gpus,
        });
    }
    pool.place(c.gpus).ok_or_else(|| {
        if c.gpus > GPUS_PER_NODE {
            Blocker::WholeNodes {
                pool: pool.name.clone(),
                need: c.gpus.div_ceil(GPUS_PER_NODE),
                free: pool.free_whole_nodes(),
            }
        } else {
            Blocker::NodeRoom {
                pool: pool.name.clone(),
                need: c.gpus,
                most_free: pool.nodes.iter().map(|n| n.free).max().unwrap_or(0),
            }
        }
    })
}

/// What one admission pass over a pool decided.
#[derive(Debug, Default)]
pub struct Cycle {
    pub admitted: Vec<(String, Placement)>,
    /// Still pending, in queue order: id and why.
    pub pending: Vec<(String, Blocker)>,
}

/// One admission pass: walk the pending workloads in queue order and admit every one that
/// fits, allocating as it goes. Under StrictFIFO the first that does not fit stops the pass.
pub fn admission_cycle(
    pool: &mut PoolCapacity,
    usage: &mut TeamUsage,
    pending: &[Candidate],
) -> Cycle {
    let mut order: Vec<&Candidate> = pending.iter().collect();
    order.sort_by(|a, b| queue_order(a, b));
    let mut cycle = Cycle::default();
    let mut blocked_head = false;
    for c in order {
        if blocked_head {
            cycle.pending.push((
                c.id.clone(),
                Blocker::StrictFifo {
                    pool: pool.name.clone(),
                },
            ));
            continue;
        }
        match evaluate(pool, usage, c) {
            Ok(p) => {
                pool.allocate(&p);
                *usage.used.entry(c.team.clone()).or_default() += c.gpus;
                cycle.admitted.push((c.id.clone(), p));
            }
            Err(b) => {
                if pool.strategy == QueueingStrategy::StrictFifo {
                    blocked_head = true;
                }
                cycle.pending.push((c.id.clone(), b));
            }
        }
    }
    cycle
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    /// Builder-style fixture: a pool, quotas, usage and a queue.
    struct Scenario {
        pool: PoolCapacity,
        usage: TeamUsage,
        queue: Vec<Candidate>,
        minute: i64,
    }

    impl Scenario {
        fn pool(nodes: usize) -> Self {
            Scenario {
                pool: PoolCapacity::new("hgx-h100", nodes),
                usage: TeamUsage::default(),
                queue: Vec::new(),
                minute: 0,
            }
        }
        fn strict(mut self) -> Self {
            self.pool.strategy = QueueingStrategy::StrictFifo;
            self
        }
        fn quota(mut self, team: &str, gpus: u32) -> Self {
            self.usage.nominal.insert(team.into(), gpus);
            self
        }
        /// A job already admitted and running.
        fn running(mut self, team: &str, gpus: u32) -> Self {
            let p = self.pool.place(gpus).expect("fixture job must fit");
            self.pool.allocate(&p);
            *self.usage.used.entry(team.into()).or_default() += gpus;
            self
        }
        fn queued(self, id: &str, team: &str, gpus: u32) -> Self {
            self.queued_with(id, team, gpus, Priority::Normal)
        }
        fn queued_with(mut self, id: &str, team: &str, gpus: u32, priority: Priority) -> Self {
            self.minute += 1;
            self.queue.push(Candidate {
                id: id.into(),
                team: team.into(),
                gpus,
                priority,
                submitted_at: Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap()
                    + chrono::Duration::minutes(self.minute),
            });
            self
        }
        fn cycle(mut self) -> (Cycle, PoolCapacity) {
            let c = admission_cycle(&mut self.pool, &mut self.usage, &self.queue);
            (c, self.pool)
        }
    }

    fn ids(c: &Cycle) -> Vec<&str> {
        c.admitted.iter().map(|(id, _)| id.as_str()).collect()
    }

    #[test]
    fn gang_is_all_or_nothing_on_whole_nodes() {
        // 4 nodes, one GPU taken on each: 28 GPUs free but no whole node, so a 16-GPU gang waits.
        let mut s = Scenario::pool(4).quota("nlp", 64).quota("vision", 64);
        for _ in 0..4 {
            s = s.running("vision", 1);
        }
        // best fit packs the four 1-GPU jobs onto one node, so spread them by hand
        for n in &mut s.pool.nodes {
            n.free = 7;
        }
        let (c, pool) = s.queued("big", "nlp", 16).cycle();
        assert!(c.admitted.is_empty());
        assert_eq!(pool.free_gpus(), 28, "nothing partially allocated");
        assert_eq!(
            c.pending[0].1,
            Blocker::WholeNodes {
                pool: "hgx-h100".into(),
                need: 2,
                free: 0
            }
        );
        assert_eq!(
            c.pending[0].1.sentence(),
            "Waiting for 2 whole nodes in hgx-h100: none is free"
        );
    }

    #[test]
    fn gang_takes_whole_free_nodes() {
        let (c, pool) = Scenario::pool(4)
            .quota("nlp", 64)
            .running("nlp", 4)
            .queued("a", "nlp", 16)
            .cycle();
        assert_eq!(ids(&c), ["a"]);
        let p = &c.admitted[0].1;
        assert_eq!(p.0.len(), 2);
        assert!(p.0.iter().all(|&(_, g)| g == 8));
        assert_eq!(pool.free_whole_nodes(), 1);
    }

    #[test]
    fn small_jobs_pack_onto_the_fullest_node() {
        let (c, pool) = Scenario::pool(2)
            .quota("nlp", 16)
            .running("nlp", 4)
            .queued("a", "nlp", 4)
            .cycle();
        assert_eq!(ids(&c), ["a"]);
        assert_eq!(pool.free_whole_nodes(), 1, "the second node stays whole");
    }

    #[test]
    fn quota_binds_before_capacity() {
        let (c, _) = Scenario::pool(16)
            .quota("nlp", 64)
            .running("nlp", 56)
            .queued("a", "nlp", 16)
            .cycle();
        assert!(c.admitted.is_empty());
        assert_eq!(
            c.pending[0].1.sentence(),
            "Team nlp would exceed its quota in hgx-h100: 56 of 64 GPUs in use, this job needs 16"
        );
    }

    #[test]
    fn priority_then_fifo() {
        // Room for one 8-GPU job: the high-priority one wins though it came last.
        let (c, _) = Scenario::pool(1)
            .quota("nlp", 64)
            .queued("first", "nlp", 8)
            .queued("second", "nlp", 8)
            .queued_with("urgent", "nlp", 8, Priority::High)
            .cycle();
        assert_eq!(ids(&c), ["urgent"]);
        let pending: Vec<&str> = c.pending.iter().map(|(id, _)| id.as_str()).collect();
        assert_eq!(pending, ["first", "second"], "FIFO among equals");
    }

    #[test]
    fn best_effort_fifo_lets_a_later_job_that_fits_go_first() {
        let (c, _) = Scenario::pool(2)
            .quota("nlp", 64)
            .running("nlp", 4)
            .queued("big", "nlp", 16)
            .queued("small", "nlp", 4)
            .cycle();
        assert_eq!(ids(&c), ["small"]);
        assert_eq!(c.pending[0].0, "big");
    }

    #[test]
    fn strict_fifo_blocks_behind_the_head() {
        let (c, _) = Scenario::pool(2)
            .strict()
            .quota("nlp", 64)
            .running("nlp", 4)
            .queued("big", "nlp", 16)
            .queued("small", "nlp", 4)
            .cycle();
        assert!(c.admitted.is_empty());
        assert_eq!(
            c.pending[1].1,
            Blocker::StrictFifo {
                pool: "hgx-h100".into()
            }
        );
    }

    #[test]
    fn one_team_at_quota_does_not_block_another() {
        let (c, _) = Scenario::pool(16)
            .quota("nlp", 64)
            .quota("vision", 32)
            .running("nlp", 64)
            .queued("nlp-job", "nlp", 8)
            .queued("vision-job", "vision", 8)
            .cycle();
        assert_eq!(ids(&c), ["vision-job"]);
    }

    #[test]
    fn never_admissible_gangs_say_so() {
        let (c, _) = Scenario::pool(2)
            .quota("nlp", 64)
            .queued("huge", "nlp", 32)
            .cycle();
        assert!(c.pending[0].1.is_permanent());
        assert_eq!(
            c.pending[0].1.sentence(),
            "Needs 32 GPUs but hgx-h100 has 16 in all: it can never be admitted"
        );
        let (c, _) = Scenario::pool(16)
            .quota("nlp", 16)
            .queued("big", "nlp", 32)
            .cycle();
        assert!(matches!(c.pending[0].1, Blocker::LargerThanQuota { .. }));
    }

    #[test]
    fn single_node_jobs_need_room_on_one_node() {
        let mut s = Scenario::pool(2).quota("nlp", 64);
        s.pool.nodes[0].free = 2;
        s.pool.nodes[1].free = 3;
        let (c, _) = s.queued("four", "nlp", 4).cycle();
        assert_eq!(
            c.pending[0].1.sentence(),
            "Waiting for a node with 4 free GPUs in hgx-h100: at most 3 free on any node"
        );
    }
}
