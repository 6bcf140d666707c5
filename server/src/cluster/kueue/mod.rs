//! Kueue's rules and state model, written once: admission (fit, preemption, the scheduling
//! cycle, the forecast) and the state they act on (`state.rs`) with its queue views
//! (`view.rs`). The sim cluster runs them; the Kubernetes back end leaves admission to Kueue
//! itself and mirrors what it watches into the same state for positions and ETAs; the what-if
//! preview replays history on it.
//!
//! Model: each pool is a Kueue cohort; each team's share of it is a ClusterQueue with a
//! `nominalQuota`, an optional `borrowingLimit` and an optional `lendingLimit` for
//! `nvidia.com/gpu` in the pool's ResourceFlavor. What is copied from Kueue, and where:
//! - A workload is admitted only when the whole of it fits at once, quota and capacity both
//!   (<https://kueue.sigs.k8s.io/docs/concepts/workload/>), and starts all-or-nothing
//!   (`waitForPodsReady`, <https://kueue.sigs.k8s.io/docs/tasks/manage/setup_wait_for_pods_ready/>).
//! - Gangs above 8 GPUs take whole nodes and smaller ones one node, as Topology Aware
//!   Scheduling places them with `podset-required-topology: kubernetes.io/hostname`
//!   (<https://kueue.sigs.k8s.io/docs/concepts/topology_aware_scheduling/>).
//! - Borrowing: a ClusterQueue may use unused quota of its cohort beyond its nominal quota, up
//!   to its `borrowingLimit`; a `lendingLimit` keeps part of its nominal quota from being lent
//!   (<https://kueue.sigs.k8s.io/docs/concepts/cluster_queue/#borrowinglimit>,
//!   <https://kueue.sigs.k8s.io/docs/concepts/cluster_queue/#lendinglimit>).
//! - The scheduler (kubernetes-sigs/kueue `pkg/scheduler/scheduler.go`, `schedule`): each
//!   cycle takes the head of every ClusterQueue, nominates each against the state at the start
//!   of the cycle (fits, fits after preempting, or not at all: `flavorassigner`
//!   `fitsResourceQuota`), orders the entries within-nominal before borrowing, then priority,
//!   then creation time (`makeClassicalIterator`), and checks each again against what the
//!   cycle has done so far (`fits`); an entry that needs preemption evicts its victims and is
//!   admitted in a later cycle. [`Cohort::settle`] runs cycles until one changes nothing.
//! - Preemption as `reclaimWithinCohort: Any` and `withinClusterQueue: LowerPriority`, without
//!   `borrowWithinCohort` (`pkg/scheduler/preemption/preemption.go` `classicalPreemptions`,
//!   `classical/candidate_generator.go`): only a request within the ClusterQueue's nominal
//!   quota may preempt; candidates are the queue's lower-priority workloads and the workloads
//!   of queues over their nominal quota; victims are removed in Kueue's order until the
//!   preemptor fits, then put back where not needed (`fillBackWorkloads`).
//! - Order: higher WorkloadPriorityClass value first, then earlier creation time
//!   (<https://kueue.sigs.k8s.io/docs/concepts/workload_priority_class/>).
//! - `queueingStrategy` is a ClusterQueue's (a team × pool): `BestEffortFIFO` (Kueue's
//!   default) sets an inadmissible head aside for the next until something is released;
//!   under `StrictFIFO` the head blocks the rest of its own queue, never another team's
//!   (<https://kueue.sigs.k8s.io/docs/concepts/cluster_queue/#queueing-strategy>). A
//!   preempted workload goes back in line by its creation time, so under `StrictFIFO` it
//!   blocks its queue again from the moment it is evicted.
//!
//! `kueue/conformance_cases.rs` holds cases ported from Kueue's own tests, with Kueue's
//! expected results; `kueue/conformance.rs` runs them through these rules.

mod cycle;
mod state;
mod view;

pub use state::*;
mod forecast;
mod preemption;

pub use forecast::*;

mod fit;

use std::cmp::Reverse;
use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, Utc};

/// A workload's id inside the admission rules (the sim maps job ids to these).
pub type Wid = u64;

/// Hashing for workload ids: small unique integers, so one multiply spreads them well
/// (SipHash's protection against chosen keys buys nothing here and costs the hot paths).
#[derive(Clone, Copy, Default)]
pub struct WidHasher(u64);

impl std::hash::Hasher for WidHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(*b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0 ^ n).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// A map keyed by workload id.
pub type WidMap<V> = HashMap<Wid, V, std::hash::BuildHasherDefault<WidHasher>>;
/// A team's index in its cohort.
pub type TeamIdx = usize;

pub use crate::domain::quota::QueueingStrategy;

/// A team's ClusterQueue quota in one pool, in GPUs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Quota {
    pub nominal: u32,
    /// How far beyond nominal the team may borrow; `None` is no limit (Kueue's default).
    pub borrowing_limit: Option<u32>,
    /// How much of its nominal quota the team lends to the cohort; `None` is all of it.
    pub lending_limit: Option<u32>,
    /// The ClusterQueue's `queueingStrategy`: how the team's own queue is ordered.
    pub strategy: QueueingStrategy,
}

impl Quota {
    /// The part of the nominal quota that is never lent.
    fn guaranteed(&self) -> u32 {
        self.nominal - self.lending_limit.unwrap_or(self.nominal).min(self.nominal)
    }
}

/// One node and how many of its GPUs are free.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    pub name: String,
    pub free: u32,
}

/// A pool's nodes as the admission pass sees them.
#[derive(Clone, Debug)]
pub struct PoolCapacity {
    pub name: String,
    pub per_node: u32,
    pub nodes: Vec<Node>,
    pub strategy: QueueingStrategy,
}

/// GPUs taken on each node, by node index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement(pub Vec<(usize, u32)>);

/// The name the sim gives node `i` of a pool (`hgx-h100-node-03`).
pub fn node_name(pool: &str, i: u32) -> String {
    format!("{pool}-node-{i:02}")
}

impl PoolCapacity {
    /// `count` nodes of `per_node` GPUs.
    pub fn new(name: &str, count: usize, per_node: u32) -> Self {
        PoolCapacity {
            name: name.to_string(),
            per_node,
            nodes: (0..count)
                .map(|i| Node {
                    name: node_name(name, i as u32),
                    free: per_node,
                })
                .collect(),
            strategy: QueueingStrategy::default(),
        }
    }

    pub fn total(&self) -> u32 {
        self.nodes.len() as u32 * self.per_node
    }

    pub fn free(&self) -> u32 {
        self.nodes.iter().map(|n| n.free).sum()
    }

    pub fn free_whole_nodes(&self) -> u32 {
        self.nodes
            .iter()
            .filter(|n| n.free == self.per_node)
            .count() as u32
    }

    /// Where a gang would go now, or `None`. Up to a node's size: the fullest node that still
    /// has room (best fit keeps whole nodes free for gangs). More: that many whole free nodes.
    pub fn place(&self, gpus: u32) -> Option<Placement> {
        if gpus == 0 {
            return None;
        }
        if gpus <= self.per_node {
            self.nodes
                .iter()
                .enumerate()
                .filter(|(_, n)| n.free >= gpus)
                .min_by_key(|(i, n)| (n.free, *i))
                .map(|(i, _)| Placement(vec![(i, gpus)]))
        } else {
            let need = gpus.div_ceil(self.per_node) as usize;
            let free: Vec<usize> = self
                .nodes
                .iter()
                .enumerate()
                .filter(|(_, n)| n.free == self.per_node)
                .map(|(i, _)| i)
                .take(need)
                .collect();
            (free.len() == need)
                .then(|| Placement(free.into_iter().map(|i| (i, self.per_node)).collect()))
        }
    }

    pub fn allocate(&mut self, p: &Placement) {
        for &(i, g) in &p.0 {
            self.nodes[i].free -= g;
        }
    }

    pub fn release(&mut self, p: &Placement) {
        for &(i, g) in &p.0 {
            self.nodes[i].free = (self.nodes[i].free + g).min(self.per_node);
        }
    }

    pub fn node_names(&self, p: &Placement) -> Vec<String> {
        p.0.iter()
            .map(|&(i, _)| self.nodes[i].name.clone())
            .collect()
    }

    /// The placement on the named nodes, if they have room (restoring a job after a restart).
    pub fn placement_on(&self, names: &[String], gpus: u32) -> Option<Placement> {
        let per_node = gpus.min(self.per_node);
        let mut p = Vec::new();
        for name in names {
            let i = self.nodes.iter().position(|n| &n.name == name)?;
            if self.nodes[i].free < per_node {
                return None;
            }
            p.push((i, per_node));
        }
        (p.len() as u32 * per_node == gpus).then_some(Placement(p))
    }
}

/// A workload waiting for admission.
#[derive(Clone, Debug, PartialEq)]
pub struct Candidate {
    pub id: Wid,
    pub team: TeamIdx,
    pub gpus: u32,
    /// The WorkloadPriorityClass value; higher goes first.
    pub priority: i32,
    pub submitted_at: DateTime<Utc>,
}

/// Kueue's queue order as a sortable key: priority (higher first), creation time, id.
pub type QueueKey = (Reverse<i32>, DateTime<Utc>, Wid);

impl Candidate {
    pub fn key(&self) -> QueueKey {
        (Reverse(self.priority), self.submitted_at, self.id)
    }
}

/// The pending workloads of one pool in queue order.
#[derive(Clone, Debug, Default)]
pub struct Queue {
    items: BTreeMap<QueueKey, Candidate>,
    keys: WidMap<QueueKey>,
    /// The same workloads by class (team, GPUs), each class in queue order. Every workload of
    /// a class meets the same quota and room, so a pass can skip a whole class at once.
    classes: BTreeMap<(TeamIdx, u32), std::collections::BTreeSet<QueueKey>>,
}

impl Queue {
    pub fn push(&mut self, c: Candidate) {
        if self.keys.contains_key(&c.id) {
            return;
        }
        self.classes
            .entry((c.team, c.gpus))
            .or_default()
            .insert(c.key());
        self.keys.insert(c.id, c.key());
        self.items.insert(c.key(), c);
    }

    pub fn remove(&mut self, id: Wid) -> Option<Candidate> {
        let key = self.keys.remove(&id)?;
        let c = self.items.remove(&key)?;
        if let Some(class) = self.classes.get_mut(&(c.team, c.gpus)) {
            class.remove(&key);
            if class.is_empty() {
                self.classes.remove(&(c.team, c.gpus));
            }
        }
        Some(c)
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = &Candidate> + Clone {
        self.items.values()
    }

    pub fn get(&self, id: Wid) -> Option<&Candidate> {
        self.keys.get(&id).and_then(|k| self.items.get(k))
    }
}

/// A workload holding GPUs.
#[derive(Clone, Debug, PartialEq)]
pub struct Admitted {
    pub id: Wid,
    pub team: TeamIdx,
    pub gpus: u32,
    pub priority: i32,
    pub submitted_at: DateTime<Utc>,
    pub admitted_at: DateTime<Utc>,
    pub placement: Placement,
}

/// Why a workload is evicted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PreemptCause {
    /// The preemptor's team took back quota this workload's team had borrowed.
    Reclaim { by_team: String },
    /// A higher-priority workload of the same team needed the room.
    Priority { by_team: String },
}

impl PreemptCause {
    pub fn sentence(&self) -> String {
        match self {
            PreemptCause::Reclaim { by_team } => {
                format!("Preempted: team {by_team} reclaimed its quota")
            }
            PreemptCause::Priority { by_team } => {
                format!("Preempted by a higher-priority job of team {by_team}")
            }
        }
    }
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
    /// Larger than the team may ever hold in the pool (nominal + borrowing limit).
    LargerThanQuota {
        team: String,
        pool: String,
        need: u32,
        most: u32,
        nominal: u32,
    },
    /// The team's borrowing limit binds.
    BorrowingLimit {
        team: String,
        pool: String,
        used: u32,
        nominal: u32,
        limit: u32,
        need: u32,
    },
    /// Within the limits, but the cohort has not enough unused quota to lend.
    Quota {
        team: String,
        pool: String,
        used: u32,
        nominal: u32,
        /// Other teams' unused quota the team may borrow now.
        borrowable: u32,
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
    /// The team's queue is StrictFIFO: its earlier workloads block this one.
    StrictFifo {
        team: String,
        pool: String,
        ahead: u32,
    },
}

impl Blocker {
    /// One plain sentence for the job page.
    pub fn sentence(&self) -> String {
        match self {
            Blocker::LargerThanPool { pool, need, total } => {
                format!("Needs {need} GPUs but {pool} has {total} in all: it can never be admitted")
            }
            Blocker::LargerThanQuota { team, pool, need, most, nominal } => format!(
                "Cannot start under the current quotas: team {team} may hold at most {most} GPUs in {pool} (its quota of {nominal} plus what it may borrow) and this job needs {need}. It starts once the team's quota or borrowing limit in {pool} is raised, or other teams lend more"
            ),
            Blocker::BorrowingLimit { team, pool, used, nominal, limit, need } => {
                if *limit == 0 {
                    format!("Team {team} would exceed its quota in {pool}: {used} of {nominal} GPUs in use, this job needs {need}")
                } else {
                    format!(
                        "Team {team} would exceed its quota and borrowing limit in {pool}: {used} of {nominal} + {limit} GPUs in use, this job needs {need}"
                    )
                }
            }
            Blocker::Quota { team, pool, used, nominal, borrowable, need } => {
                let over = used.saturating_add(*need).saturating_sub(*nominal);
                let can = match borrowable {
                    0 => "none of other teams' quota is unused".to_string(),
                    n => format!("only {n} GPUs of other teams' quota are unused"),
                };
                format!(
                    "Team {team} has {used} of its {nominal} GPUs in use in {pool}; this job needs {need}, so the team would borrow {over}, but {can}"
                )
            }
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
            Blocker::StrictFifo { team, pool, ahead } => {
                let jobs = if *ahead == 1 { "1 earlier job".to_string() } else { format!("{ahead} earlier jobs") };
                format!("Waiting behind {jobs} of team {team} in {pool}: the team's queue there is in strict FIFO order")
            }
        }
    }

    pub fn is_permanent(&self) -> bool {
        matches!(
            self,
            Blocker::LargerThanPool { .. } | Blocker::LargerThanQuota { .. }
        )
    }
}

/// One pool as a Kueue cohort: its nodes, its teams' quotas and what is admitted.
#[derive(Clone, Debug)]
pub struct Cohort {
    pub capacity: PoolCapacity,
    pub teams: Vec<String>,
    pub quotas: Vec<Quota>,
    pub used: Vec<u32>,
    pub admitted: BTreeMap<Wid, Admitted>,
}

/// Why a workload did not fit, in brief.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Miss {
    Never,
    Quota,
    Room,
}

#[derive(Clone, Copy, Debug)]
enum QuotaStatus {
    Fits { borrows: bool },
    TooLarge { most: u32 },
    BorrowingLimit { limit: u32 },
    Cohort,
}

/// What one scheduling cycle decided.
#[derive(Debug, Default)]
pub struct Cycle {
    /// Admitted in this cycle, in the order they were taken.
    pub admitted: Vec<(Wid, Placement)>,
    /// Evictions issued in this cycle, and for whom.
    pub preempted: Vec<(Wid, PreemptCause)>,
    /// What the evicted workloads held (already released from the cohort).
    pub evicted: Vec<Admitted>,
    /// Heads that issued preemptions: admitted in a later cycle, once their victims are gone.
    pub preempting: Vec<Wid>,
    /// Heads that fit neither now nor after preempting (Kueue's `NoFit`, or no candidates).
    pub unschedulable: Vec<Wid>,
    /// Heads that were nominated but no longer fitted after earlier entries of the cycle.
    pub skipped: Vec<Wid>,
}

/// What a head can do, decided at nomination.
#[derive(Clone, Debug, PartialEq)]
pub enum Mode {
    Fit {
        placement: Placement,
        borrows: bool,
    },
    Preempt {
        targets: Vec<(Wid, PreemptCause)>,
        borrows: bool,
    },
    NoFit,
}

impl Mode {
    fn borrows(&self) -> bool {
        match self {
            Mode::Fit { borrows, .. } | Mode::Preempt { borrows, .. } => *borrows,
            Mode::NoFit => false,
        }
    }
}

/// One change a settle made, in the order it happened.
#[derive(Clone, Debug, PartialEq)]
pub enum Decision {
    Admit(Wid, Placement),
    /// Evicted, and since when it had been admitted.
    Evict(Wid, PreemptCause, DateTime<Utc>),
}

impl Cohort {
    pub fn new(capacity: PoolCapacity) -> Self {
        Cohort {
            capacity,
            teams: Vec::new(),
            quotas: Vec::new(),
            used: Vec::new(),
            admitted: BTreeMap::new(),
        }
    }

    pub fn pool(&self) -> &str {
        &self.capacity.name
    }

    /// The team's index, adding it (with no quota) if it is new.
    pub fn team(&mut self, name: &str) -> TeamIdx {
        match self.teams.iter().position(|t| t == name) {
            Some(i) => i,
            None => {
                self.teams.push(name.to_string());
                self.quotas.push(Quota {
                    strategy: self.capacity.strategy,
                    ..Quota::default()
                });
                self.used.push(0);
                self.teams.len() - 1
            }
        }
    }

    pub fn set_quota(&mut self, team: &str, q: Quota) {
        let i = self.team(team);
        self.quotas[i] = q;
    }

    pub fn admit(&mut self, c: &Candidate, placement: Placement, at: DateTime<Utc>) {
        self.capacity.allocate(&placement);
        self.used[c.team] += c.gpus;
        self.admitted.insert(
            c.id,
            Admitted {
                id: c.id,
                team: c.team,
                gpus: c.gpus,
                priority: c.priority,
                submitted_at: c.submitted_at,
                admitted_at: at,
                placement,
            },
        );
    }

    pub fn release(&mut self, id: Wid) -> Option<Admitted> {
        let a = self.admitted.remove(&id)?;
        self.capacity.release(&a.placement);
        self.used[a.team] -= a.gpus;
        Some(a)
    }

    /// Puts an admitted workload back as it was (undoing a simulated removal).
    fn admit_admitted(&mut self, a: &Admitted) {
        self.capacity.allocate(&a.placement);
        self.used[a.team] += a.gpus;
        self.admitted.insert(a.id, a.clone());
    }
}

#[cfg(test)]
mod conformance;
#[cfg(test)]
mod conformance_cases;
#[cfg(test)]
mod tests;
