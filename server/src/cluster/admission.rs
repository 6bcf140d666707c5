//! Kueue's admission rules, written once. The sim cluster runs them; the Kubernetes back end
//! leaves admission to Kueue itself and these rules are the reference the two must agree on.
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
//!   (<https://kueue.sigs.k8s.io/docs/concepts/cluster_queue/#queueing-strategy>).
//!
//! `admission/conformance_cases.rs` holds cases ported from Kueue's own tests, with Kueue's
//! expected results; `admission/conformance.rs` runs them through these rules.

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

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum QueueingStrategy {
    #[default]
    BestEffortFifo,
    StrictFifo,
}

impl QueueingStrategy {
    /// Kueue's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            QueueingStrategy::BestEffortFifo => "BestEffortFIFO",
            QueueingStrategy::StrictFifo => "StrictFIFO",
        }
    }

    pub fn parse(s: &str) -> Option<QueueingStrategy> {
        match s {
            "BestEffortFIFO" => Some(QueueingStrategy::BestEffortFifo),
            "StrictFIFO" => Some(QueueingStrategy::StrictFifo),
            _ => None,
        }
    }
}

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

impl PoolCapacity {
    /// `count` nodes of `per_node` GPUs.
    pub fn new(name: &str, count: usize, per_node: u32) -> Self {
        PoolCapacity {
            name: name.to_string(),
            per_node,
            nodes: (0..count)
                .map(|i| Node {
                    name: format!("{name}-node-{i:02}"),
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
    Evict(Wid, PreemptCause),
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

    /// GPUs the team holds beyond its nominal quota.
    pub fn borrowed(&self, team: TeamIdx) -> u32 {
        self.used[team].saturating_sub(self.quotas[team].nominal)
    }

    /// The most the team could ever hold here.
    pub fn most(&self, team: TeamIdx) -> u32 {
        let q = self.quotas[team];
        // In u64: quotas replayed from history (the what-if) may sum past u32.
        let lendable_by_others: u64 = (0..self.teams.len())
            .filter(|&j| j != team)
            .map(|j| u64::from(self.quotas[j].nominal - self.quotas[j].guaranteed()))
            .sum();
        let borrow = q
            .borrowing_limit
            .map_or(lendable_by_others, |l| u64::from(l).min(lendable_by_others));
        let most = (u64::from(q.nominal) + borrow).min(u64::from(self.capacity.total()));
        u32::try_from(most).unwrap_or(u32::MAX)
    }

    /// The quota check of Kueue's flavor assignment, without allocating: the hot path.
    fn quota_status(&self, team: TeamIdx, need: u32) -> QuotaStatus {
        self.quota_status_with(&self.used, team, need)
    }

    /// [`Self::quota_status`] with the teams' use given (a simulated removal).
    fn quota_status_with(&self, used: &[u32], team: TeamIdx, need: u32) -> QuotaStatus {
        let q = self.quotas[team];
        let most = self.most(team);
        if need > most {
            return QuotaStatus::TooLarge { most };
        }
        let new_used = used[team].saturating_add(need);
        if let Some(limit) = q.borrowing_limit {
            if new_used > q.nominal.saturating_add(limit) {
                return QuotaStatus::BorrowingLimit { limit };
            }
        }
        // Use beyond a queue's guaranteed part draws on the cohort's lendable quota.
        let mut lendable = 0u64;
        let mut drawn = 0u64;
        for (j, qj) in self.quotas.iter().enumerate() {
            let g = qj.guaranteed();
            lendable += u64::from(qj.nominal - g);
            let u = if j == team { new_used } else { used[j] };
            drawn += u64::from(u.saturating_sub(g));
        }
        if drawn > lendable {
            return QuotaStatus::Cohort;
        }
        QuotaStatus::Fits {
            borrows: new_used > q.nominal,
        }
    }

    /// The quota check with what binds spelled out: `Ok(borrows)` or the blocker.
    pub fn quota_check(&self, team: TeamIdx, need: u32) -> Result<bool, Blocker> {
        let q = self.quotas[team];
        let used = self.used[team];
        let name = || self.teams[team].clone();
        let pool = || self.capacity.name.clone();
        match self.quota_status(team, need) {
            QuotaStatus::Fits { borrows } => Ok(borrows),
            QuotaStatus::TooLarge { most } => Err(Blocker::LargerThanQuota {
                team: name(),
                pool: pool(),
                need,
                most,
                nominal: q.nominal,
            }),
            QuotaStatus::BorrowingLimit { limit } => Err(Blocker::BorrowingLimit {
                team: name(),
                pool: pool(),
                used,
                nominal: q.nominal,
                limit,
                need,
            }),
            QuotaStatus::Cohort => Err(Blocker::Quota {
                team: name(),
                pool: pool(),
                used,
                nominal: q.nominal,
                borrowable: self.borrowable(team),
                need,
            }),
        }
    }

    /// Other teams' unused quota `team` may borrow now: Kueue's `Available` for the team,
    /// less what is left of its own nominal quota.
    pub fn borrowable(&self, team: TeamIdx) -> u32 {
        let q = self.quotas[team];
        let used = i64::from(self.used[team]);
        let (mut lendable, mut drawn) = (0i64, 0i64);
        for (j, qj) in self.quotas.iter().enumerate() {
            let g = i64::from(qj.guaranteed());
            lendable += i64::from(qj.nominal) - g;
            drawn += (i64::from(self.used[j]) - g).max(0);
        }
        let mut from_cohort = (lendable - drawn).max(0);
        if let Some(limit) = q.borrowing_limit {
            let headroom =
                i64::from(q.nominal) + i64::from(limit) - used.max(i64::from(q.guaranteed()));
            from_cohort = from_cohort.min(headroom.max(0));
        }
        let available = (i64::from(q.guaranteed()) - used).max(0) + from_cohort;
        let own_left = (i64::from(q.nominal) - used).max(0);
        u32::try_from((available - own_left).max(0)).unwrap_or(u32::MAX)
    }

    /// Would `c` fit now without preempting? `Err(permanent)` if not; allocates nothing.
    fn try_fit(&self, c: &Candidate) -> Result<Placement, Miss> {
        if c.gpus > self.capacity.total() {
            return Err(Miss::Never);
        }
        match self.quota_status(c.team, c.gpus) {
            QuotaStatus::Fits { .. } => self.capacity.place(c.gpus).ok_or(Miss::Room),
            QuotaStatus::TooLarge { .. } => Err(Miss::Never),
            _ => Err(Miss::Quota),
        }
    }

    fn capacity_blocker(&self, need: u32) -> Blocker {
        let pool = self.capacity.name.clone();
        if need > self.capacity.per_node {
            Blocker::WholeNodes {
                pool,
                need: need.div_ceil(self.capacity.per_node),
                free: self.capacity.free_whole_nodes(),
            }
        } else {
            Blocker::NodeRoom {
                pool,
                need,
                most_free: self
                    .capacity
                    .nodes
                    .iter()
                    .map(|n| n.free)
                    .max()
                    .unwrap_or(0),
            }
        }
    }

    /// Would `c` be admitted now, without preempting anything?
    pub fn evaluate(&self, c: &Candidate) -> Result<Placement, Blocker> {
        let total = self.capacity.total();
        if c.gpus > total {
            return Err(Blocker::LargerThanPool {
                pool: self.capacity.name.clone(),
                need: c.gpus,
                total,
            });
        }
        self.quota_check(c.team, c.gpus)?;
        self.capacity
            .place(c.gpus)
            .ok_or_else(|| self.capacity_blocker(c.gpus))
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

    /// Kueue's classical preemption (`preemption.go` `classicalPreemptions`, with
    /// `withinClusterQueue: LowerPriority`, `reclaimWithinCohort: Any` and no
    /// `borrowWithinCohort`): the victims that would let `c` in, or `None`.
    ///
    /// - Candidates: the team's own lower-priority workloads; and, from teams holding more
    ///   than their nominal quota, any workload. The latter are "hierarchical reclaim"
    ///   candidates when `c` fits within its own nominal quota (usage + request ≤ nominal),
    ///   otherwise candidates that may only be taken if `c` then fits without borrowing.
    /// - Order (`CandidatesOrdering`): other teams first, lower priority first, most recently
    ///   admitted first.
    /// - Attempts: with borrowing allowed, then without (or the other way round when `c`
    ///   needs to borrow but its team is under nominal), each removing candidates in order
    ///   until `c` fits; another team's workload stops being a candidate once that team is
    ///   back within its nominal quota.
    /// - The set is then made minimal (`fillBackWorkloads`): from the second-to-last victim
    ///   back to the first, a victim whose return still leaves room is put back.
    pub fn preemption_targets(&self, c: &Candidate) -> Option<Vec<(Wid, PreemptCause)>> {
        let t = c.team;
        let q = self.quotas[t];
        let used = self.used[t];
        let advantage = used.saturating_add(c.gpus) <= q.nominal;
        // Equal reservation times (Kueue's are whole seconds) fall back to the later
        // workload first, where Kueue compares UIDs.
        let order = |a: &&Admitted, b: &&Admitted| {
            a.priority
                .cmp(&b.priority)
                .then(b.admitted_at.cmp(&a.admitted_at))
                .then(b.id.cmp(&a.id))
        };
        let mut others: Vec<&Admitted> = self
            .admitted
            .values()
            .filter(|a| a.team != t && self.used[a.team] > self.quotas[a.team].nominal)
            .collect();
        others.sort_by(order);
        let mut same: Vec<&Admitted> = self
            .admitted
            .values()
            .filter(|a| a.team == t && a.priority < c.priority)
            .collect();
        same.sort_by(order);
        if others.is_empty() && same.is_empty() {
            return None;
        }
        let attempts: &[bool] = if others.is_empty() || used >= q.nominal {
            &[true]
        } else if !advantage {
            &[false, true]
        } else {
            &[true, false]
        };
        let by_team = self.teams[t].clone();
        for &allow_borrowing in attempts {
            // A simulated removal: the nodes and the teams' use, not the whole cohort.
            let mut cap = self.capacity.clone();
            let mut used = self.used.clone();
            let mut victims: Vec<&Admitted> = Vec::new();
            let mut fits = false;
            for a in others.iter().chain(same.iter()) {
                if a.team != t {
                    // A candidate that may only be taken without borrowing is not valid in
                    // an attempt that allows borrowing; nor once its team is within nominal.
                    if allow_borrowing && !advantage {
                        continue;
                    }
                    if used[a.team] <= self.quotas[a.team].nominal {
                        continue;
                    }
                }
                cap.release(&a.placement);
                used[a.team] -= a.gpus;
                victims.push(a);
                if self.fits_with(&cap, &used, c, allow_borrowing) {
                    fits = true;
                    break;
                }
            }
            if !fits {
                continue;
            }
            // fillBackWorkloads: in reverse, skipping the last, put back what is not needed.
            let mut i = victims.len().saturating_sub(1);
            while i > 0 {
                i -= 1;
                let v = victims[i];
                cap.allocate(&v.placement);
                used[v.team] += v.gpus;
                if self.fits_with(&cap, &used, c, allow_borrowing) {
                    victims.swap_remove(i);
                } else {
                    cap.release(&v.placement);
                    used[v.team] -= v.gpus;
                }
            }
            return Some(
                victims
                    .into_iter()
                    .map(|a| {
                        let cause = if a.team == t {
                            PreemptCause::Priority {
                                by_team: by_team.clone(),
                            }
                        } else {
                            PreemptCause::Reclaim {
                                by_team: by_team.clone(),
                            }
                        };
                        (a.id, cause)
                    })
                    .collect(),
            );
        }
        None
    }

    /// [`Self::fits`] on simulated nodes and use.
    fn fits_with(
        &self,
        cap: &PoolCapacity,
        used: &[u32],
        c: &Candidate,
        allow_borrowing: bool,
    ) -> bool {
        if !allow_borrowing && used[c.team].saturating_add(c.gpus) > self.quotas[c.team].nominal {
            return false;
        }
        matches!(
            self.quota_status_with(used, c.team, c.gpus),
            QuotaStatus::Fits { .. }
        ) && cap.place(c.gpus).is_some()
    }

    /// Puts an admitted workload back as it was (undoing a simulated removal).
    fn admit_admitted(&mut self, a: &Admitted) {
        self.capacity.allocate(&a.placement);
        self.used[a.team] += a.gpus;
        self.admitted.insert(a.id, a.clone());
    }

    /// Kueue's `workloadFits` (quota, and room on the nodes): does `c` fit now?
    fn fits(&self, c: &Candidate, allow_borrowing: bool) -> bool {
        self.fits_with(&self.capacity, &self.used, c, allow_borrowing)
    }

    /// Kueue's flavor assignment for one head (`fitsResourceQuota`): fits now, fits after
    /// preempting, or not at all.
    pub fn nominate(&self, c: &Candidate) -> Mode {
        if c.gpus > self.capacity.total() {
            return Mode::NoFit;
        }
        let t = c.team;
        match self.quota_status(t, c.gpus) {
            QuotaStatus::TooLarge { .. } => return Mode::NoFit,
            // Quota fits: admitted where the nodes have room, else it waits for room.
            // Preemption is for quota only, as in Kueue (without Topology Aware Scheduling
            // preemption); evicting for room alone could flap between teams.
            QuotaStatus::Fits { borrows } => {
                return match self.capacity.place(c.gpus) {
                    Some(p) => Mode::Fit {
                        placement: p,
                        borrows,
                    },
                    None => Mode::NoFit,
                };
            }
            QuotaStatus::BorrowingLimit { .. } | QuotaStatus::Cohort => {
                // Preemption is considered only for a request within the nominal quota
                // (without `borrowWithinCohort`, which Gantry does not offer).
                if c.gpus > self.quotas[t].nominal {
                    return Mode::NoFit;
                }
            }
        }
        match self.preemption_targets(c) {
            Some(targets) => {
                let own: u32 = targets
                    .iter()
                    .filter_map(|(id, _)| self.admitted.get(id))
                    .filter(|a| a.team == t)
                    .map(|a| a.gpus)
                    .sum();
                let borrows = (self.used[t] - own).saturating_add(c.gpus) > self.quotas[t].nominal;
                Mode::Preempt { targets, borrows }
            }
            None => Mode::NoFit,
        }
    }

    /// One Kueue scheduling cycle (`scheduler.go` `schedule`) over the heads of the teams'
    /// queues: each head is nominated against the state at the start of the cycle, the
    /// entries are taken in Kueue's order (within nominal quota before borrowing, then
    /// priority, then creation time), and each is checked again against what the cycle has
    /// done so far. A workload that needs preemption only evicts its victims in this cycle
    /// (it is admitted in a later one, once they are gone), and a workload admitted in a
    /// cycle is never a victim in the same cycle: victims are chosen at nomination.
    ///
    /// Workloads in `preemptors` (waiting for their victims to go) are taken first, as with
    /// Kueue's `PrioritizePreemptorWorkloads` gate: Kueue's evictions take time, the sim's
    /// none, and without it a borrower of higher priority can take the quota a preemptor
    /// freed, be reclaimed, and take it again, without end (Kueue's "quota stealing and
    /// thrashing", which that gate exists to prevent).
    pub fn schedule(
        &mut self,
        heads: &[Candidate],
        preemptors: &[Option<Wid>],
        at: DateTime<Utc>,
    ) -> Cycle {
        let waiting = |c: &Candidate| preemptors.get(c.team).is_some_and(|p| *p == Some(c.id));
        let mut entries: Vec<(&Candidate, Mode)> =
            heads.iter().map(|c| (c, self.nominate(c))).collect();
        entries.sort_by(|(a, ma), (b, mb)| {
            waiting(b)
                .cmp(&waiting(a))
                .then(ma.borrows().cmp(&mb.borrows()))
                .then(b.priority.cmp(&a.priority))
                .then(a.submitted_at.cmp(&b.submitted_at))
                .then(a.id.cmp(&b.id))
        });
        let mut out = Cycle::default();
        let mut victims: std::collections::HashSet<Wid> = Default::default();
        // Quota and nodes held for preemptors until the end of the cycle.
        let mut reserved: Vec<(TeamIdx, u32, Option<Placement>)> = Vec::new();
        for (c, mode) in entries {
            match mode {
                Mode::NoFit => out.unschedulable.push(c.id),
                Mode::Fit { .. } => match self.capacity.place(c.gpus) {
                    Some(p) if self.fits(c, true) => {
                        self.admit(c, p.clone(), at);
                        out.admitted.push((c.id, p));
                    }
                    _ => out.skipped.push(c.id),
                },
                Mode::Preempt { targets, .. } => {
                    if targets.iter().any(|(id, _)| victims.contains(id)) {
                        out.skipped.push(c.id);
                        continue;
                    }
                    let removed: Vec<Admitted> = targets
                        .iter()
                        .filter_map(|(id, _)| self.release(*id))
                        .collect();
                    if !self.fits(c, true) {
                        for a in &removed {
                            self.admit_admitted(a);
                        }
                        out.skipped.push(c.id);
                        continue;
                    }
                    // Kueue adds the preemptor's usage to the cycle's snapshot, so later
                    // entries cannot take what its victims free.
                    let q = self.quotas[c.team];
                    let headroom = if self.used[c.team].saturating_add(c.gpus) > q.nominal {
                        q.borrowing_limit.map_or(c.gpus, |l| {
                            (q.nominal + l)
                                .saturating_sub(self.used[c.team])
                                .min(c.gpus)
                        })
                    } else {
                        c.gpus
                    };
                    let p = self.capacity.place(c.gpus);
                    if let Some(p) = &p {
                        self.capacity.allocate(p);
                    }
                    self.used[c.team] += headroom;
                    reserved.push((c.team, headroom, p));
                    for (id, cause) in targets {
                        victims.insert(id);
                        out.preempted.push((id, cause));
                    }
                    out.evicted.extend(removed);
                    out.preempting.push(c.id);
                }
            }
        }
        for (team, gpus, p) in reserved {
            self.used[team] -= gpus;
            if let Some(p) = p {
                self.capacity.release(&p);
            }
        }
        out
    }

    /// The head of each team's queue, as Kueue's queue manager hands them to a cycle: the
    /// first pending workload of the team; under `BestEffortFIFO` skipping what was found
    /// inadmissible since the last release (`failed[team]`: the smallest such request; any
    /// later request of the team at least that large fails too, as quota and room only
    /// shrink until something is released and the queue runs by falling priority).
    ///
    /// A workload that issued preemptions stays its team's head until it is admitted
    /// (`preemptors[team]`; Kueue's queue manager keeps it "sticky at the head"), so the
    /// workloads it evicted cannot take back the room before it.
    pub fn heads(
        &self,
        queue: &Queue,
        failed: &[u32],
        preemptors: &[Option<Wid>],
    ) -> Vec<Candidate> {
        let mut best: Vec<Option<QueueKey>> = vec![None; self.teams.len()];
        for (team, p) in preemptors.iter().enumerate() {
            if let (Some(id), Some(b)) = (p, best.get_mut(team)) {
                if let Some(c) = queue.get(*id) {
                    *b = Some(c.key());
                }
            }
        }
        for (&(team, gpus), keys) in &queue.classes {
            if preemptors
                .get(team)
                .is_some_and(|p| p.is_some_and(|id| queue.get(id).is_some()))
            {
                continue;
            }
            let strict = self
                .quotas
                .get(team)
                .is_some_and(|q| q.strategy == QueueingStrategy::StrictFifo);
            if !strict && gpus >= failed.get(team).copied().unwrap_or(u32::MAX) {
                continue;
            }
            if let (Some(k), Some(b)) = (keys.iter().next(), best.get_mut(team)) {
                if b.is_none_or(|b| *k < b) {
                    *b = Some(*k);
                }
            }
        }
        best.into_iter()
            .flatten()
            .map(|k| queue.items[&k].clone())
            .collect()
    }

    /// Scheduling cycles at `at` until one changes nothing, as Kueue's scheduler runs while
    /// its queues have heads: admitted workloads leave `queue`, evicted ones go back to it
    /// (with their creation time), and under `BestEffortFIFO` an inadmissible head steps
    /// aside for the next until something is released. `preemption: false` leaves every
    /// admitted workload in place (the ETA forecast).
    pub fn settle(
        &mut self,
        queue: &mut Queue,
        at: DateTime<Utc>,
        preemption: bool,
    ) -> Vec<Decision> {
        let mut out = Vec::new();
        let mut failed: Vec<u32> = vec![u32::MAX; self.teams.len()];
        let mut preemptors: Vec<Option<Wid>> = vec![None; self.teams.len()];
        let mut returning: Vec<Candidate> = Vec::new();
        // Each productive cycle admits, evicts or sets one head aside: bounded by the queue.
        let mut budget = 4 * (queue.len() + self.admitted.len()) + 16;
        loop {
            failed.resize(self.teams.len(), u32::MAX);
            preemptors.resize(self.teams.len(), None);
            let heads = self.heads(queue, &failed, &preemptors);
            if heads.is_empty() || budget == 0 {
                if budget == 0 {
                    tracing::warn!(pool = %self.capacity.name, "admission did not settle; stopping the pass");
                }
                break;
            }
            budget -= 1;
            let cycle = if preemption {
                self.schedule(&heads, &preemptors, at)
            } else {
                self.schedule_without_preemption(&heads, at)
            };
            let released = !cycle.preempted.is_empty();
            let mut productive = !cycle.admitted.is_empty() || released;
            for (id, p) in cycle.admitted {
                if let Some(c) = queue.remove(id) {
                    if preemptors[c.team] == Some(id) {
                        preemptors[c.team] = None;
                    }
                }
                out.push(Decision::Admit(id, p));
            }
            for &id in &cycle.preempting {
                if let Some(c) = queue.get(id) {
                    preemptors[c.team] = Some(id);
                }
            }
            // An evicted workload is queued again once it is gone: Kueue's evictions take
            // time, so it is not back in line in the instant it was evicted. In the sim the
            // instant is this settle; without the pause a victim could be taken back in and
            // evicted again at the same moment, without end.
            returning.extend(cycle.evicted.into_iter().map(|a| Candidate {
                id: a.id,
                team: a.team,
                gpus: a.gpus,
                priority: a.priority,
                submitted_at: a.submitted_at,
            }));
            for (id, cause) in cycle.preempted {
                out.push(Decision::Evict(id, cause));
            }
            for id in cycle.unschedulable {
                let Some(c) = queue.get(id) else { continue };
                if preemptors[c.team] == Some(id) {
                    preemptors[c.team] = None; // no longer preempting: back in line
                }
                if self.quotas[c.team].strategy == QueueingStrategy::StrictFifo {
                    continue; // the head stays, and blocks its team's queue
                }
                if c.gpus < failed[c.team] {
                    failed[c.team] = c.gpus;
                    productive = true;
                }
            }
            if released {
                // The victims are gone: every head is in play again, those set aside in this
                // very cycle too (Kueue requeues the cohort's inadmissible workloads when a
                // workload is evicted).
                failed.iter_mut().for_each(|f| *f = u32::MAX);
            }
            if !productive {
                break;
            }
        }
        for c in returning {
            queue.push(c);
        }
        out
    }

    /// A cycle in which nothing is preempted: heads that fit are admitted, the rest step
    /// aside (the ETA forecast's passes).
    fn schedule_without_preemption(&mut self, heads: &[Candidate], at: DateTime<Utc>) -> Cycle {
        let mut entries: Vec<(&Candidate, bool)> = heads
            .iter()
            .map(|c| {
                let borrows =
                    self.used[c.team].saturating_add(c.gpus) > self.quotas[c.team].nominal;
                (c, borrows)
            })
            .collect();
        entries.sort_by(|(a, ba), (b, bb)| {
            ba.cmp(bb)
                .then(b.priority.cmp(&a.priority))
                .then(a.submitted_at.cmp(&b.submitted_at))
                .then(a.id.cmp(&b.id))
        });
        let mut out = Cycle::default();
        for (c, _) in entries {
            match self.try_fit(c) {
                Ok(p) => {
                    self.admit(c, p.clone(), at);
                    out.admitted.push((c.id, p));
                }
                Err(_) => out.unschedulable.push(c.id),
            }
        }
        out
    }
}

/// When each pending workload would be admitted if nothing new arrived: running workloads end
/// at their max runtime, pending ones are admitted in order by the same rules (without
/// preemption, an approximation stated on the page: "about"). Workloads not admitted within
/// `horizon` get no estimate.
///
/// Each step is the pass [`Cohort::cycle`] makes without preemption, walked over the queue's
/// classes (team, GPUs) in queue order. Every workload of a class meets the same quota and room, and a class
/// that misses is out for the rest of the pass, so a class is only ever admitted from its
/// front: a cursor per class stands in for a copy of the queue that admitted workloads are
/// removed from. `forecast_matches_a_replay_of_admission_passes` checks the two agree.
pub fn forecast(
    cohort: &Cohort,
    queue: &Queue,
    ends: &WidMap<DateTime<Utc>>,
    runtime: impl Fn(Wid) -> i64,
    now: DateTime<Utc>,
    horizon: chrono::Duration,
) -> WidMap<DateTime<Utc>> {
    use std::collections::BinaryHeap;
    struct Class<'a> {
        team: TeamIdx,
        gpus: u32,
        head: Option<QueueKey>,
        rest: std::collections::btree_set::Iter<'a, QueueKey>,
    }
    let mut co = cohort.clone();
    let mut classes: Vec<Class> = queue
        .classes
        .iter()
        .map(|(&(team, gpus), keys)| {
            let mut rest = keys.iter();
            Class {
                team,
                gpus,
                head: rest.next().copied(),
                rest,
            }
        })
        .collect();
    let mut eta = WidMap::with_capacity_and_hasher(queue.len(), Default::default());
    let mut heap: BinaryHeap<Reverse<(DateTime<Utc>, Wid)>> = co
        .admitted
        .keys()
        .map(|id| Reverse((ends.get(id).copied().unwrap_or(now).max(now), *id)))
        .collect();
    let limit = now + horizon;
    let mut left = queue.len();
    let mut failed_team: Vec<u32> = Vec::new();
    let mut t = now;
    loop {
        // Scheduling cycles at `t`, as `Cohort::settle` runs them without preemption: the
        // head of each team (its best class not set aside), taken within nominal quota
        // first, then by priority and creation time.
        failed_team.clear();
        failed_team.resize(co.teams.len(), u32::MAX);
        loop {
            let mut heads: Vec<Option<(QueueKey, usize)>> = vec![None; co.teams.len()];
            for (i, cl) in classes.iter().enumerate() {
                let Some(k) = cl.head else { continue };
                if failed_team.get(cl.team).is_some_and(|&f| cl.gpus >= f) {
                    continue;
                }
                if let Some(h) = heads.get_mut(cl.team) {
                    if h.is_none_or(|(b, _)| k < b) {
                        *h = Some((k, i));
                    }
                }
            }
            let mut heads: Vec<(bool, QueueKey, usize)> = heads
                .into_iter()
                .flatten()
                .map(|(k, i)| {
                    let cl = &classes[i];
                    let borrows =
                        co.used[cl.team].saturating_add(cl.gpus) > co.quotas[cl.team].nominal;
                    (borrows, k, i)
                })
                .collect();
            if heads.is_empty() {
                break;
            }
            heads.sort();
            let mut productive = false;
            for (_, (Reverse(priority), submitted_at, id), i) in heads {
                let cl = &mut classes[i];
                let c = Candidate {
                    id,
                    team: cl.team,
                    gpus: cl.gpus,
                    priority,
                    submitted_at,
                };
                match co.try_fit(&c) {
                    Ok(p) => {
                        co.admit(&c, p, t);
                        eta.insert(id, t);
                        heap.push(Reverse((
                            t + chrono::Duration::seconds(runtime(id).max(1)),
                            id,
                        )));
                        cl.head = cl.rest.next().copied();
                        left -= 1;
                        productive = true;
                    }
                    // Under StrictFIFO the head blocks the rest of its team's queue.
                    Err(_) if co.quotas[cl.team].strategy == QueueingStrategy::StrictFifo => {
                        if let Some(f) = failed_team.get_mut(cl.team) {
                            *f = 0;
                        }
                    }
                    Err(_) => {
                        if let Some(f) = failed_team.get_mut(cl.team) {
                            if cl.gpus < *f {
                                *f = cl.gpus;
                                productive = true;
                            }
                        }
                    }
                }
            }
            if !productive {
                break;
            }
        }
        if left == 0 {
            break;
        }
        let Some(Reverse((next, _))) = heap.peek().copied() else {
            break;
        };
        if next > limit {
            break;
        }
        t = next;
        while let Some(Reverse((when, id))) = heap.peek().copied() {
            if when > t {
                break;
            }
            heap.pop();
            co.release(id);
        }
    }
    eta
}

#[cfg(test)]
mod conformance;
#[cfg(test)]
mod conformance_cases;
#[cfg(test)]
mod tests;
