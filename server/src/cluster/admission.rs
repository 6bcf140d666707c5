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
//! - Preemption as `reclaimWithinCohort: Any` and `withinClusterQueue: LowerPriority`
//!   (<https://kueue.sigs.k8s.io/docs/concepts/preemption/>): a workload that fits within its
//!   queue's nominal quota may evict workloads of other queues that are borrowing, whatever
//!   their priority; any workload may evict lower-priority workloads of its own queue.
//!   Candidates are taken as Kueue orders them: other queues' borrowing workloads first, then
//!   lower priority first, then the most recently admitted first; eviction stops as soon as
//!   the preemptor fits, and a queue's workloads stop being candidates for reclaim once it is
//!   back within its nominal quota. (Kueue also tries to put back victims that turn out not
//!   to be needed; with whole-node gangs the greedy set is already minimal in the cases here.)
//! - Order: higher WorkloadPriorityClass value first, then earlier creation time
//!   (<https://kueue.sigs.k8s.io/docs/concepts/workload_priority_class/>).
//! - `BestEffortFIFO` (Kueue's default): a workload that cannot be admitted does not block
//!   later ones that fit. `StrictFIFO`: the head blocks everything behind it
//!   (<https://kueue.sigs.k8s.io/docs/concepts/cluster_queue/#queueing-strategy>).

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

/// The pending workloads of one pool in queue order, with the sizes each team waits for.
#[derive(Clone, Debug, Default)]
pub struct Queue {
    items: BTreeMap<QueueKey, Candidate>,
    keys: WidMap<QueueKey>,
    /// Per team: GPU count → how many pending workloads ask for it.
    sizes: Vec<BTreeMap<u32, usize>>,
    /// The same workloads by class (team, GPUs), each class in queue order. Every workload of
    /// a class meets the same quota and room, so a pass can skip a whole class at once.
    classes: BTreeMap<(TeamIdx, u32), std::collections::BTreeSet<QueueKey>>,
}

impl Queue {
    pub fn push(&mut self, c: Candidate) {
        if self.keys.contains_key(&c.id) {
            return;
        }
        if self.sizes.len() <= c.team {
            self.sizes.resize_with(c.team + 1, BTreeMap::new);
        }
        *self.sizes[c.team].entry(c.gpus).or_default() += 1;
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
        let sizes = &mut self.sizes[c.team];
        if let Some(n) = sizes.get_mut(&c.gpus) {
            *n -= 1;
            if *n == 0 {
                sizes.remove(&c.gpus);
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

    /// The smallest request each team has waiting (`u32::MAX` for none).
    fn min_sizes(&self) -> Vec<u32> {
        self.sizes
            .iter()
            .map(|s| s.keys().next().copied().unwrap_or(u32::MAX))
            .collect()
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
        lendable: u32,
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
    /// StrictFIFO: earlier workloads at the head block this one.
    StrictFifo {
        pool: String,
        ahead: u32,
        higher: u32,
    },
}

impl Blocker {
    /// One plain sentence for the job page.
    pub fn sentence(&self) -> String {
        match self {
            Blocker::LargerThanPool { pool, need, total } => {
                format!("Needs {need} GPUs but {pool} has {total} in all: it can never be admitted")
            }
            Blocker::LargerThanQuota { team, pool, need, most } => format!(
                "Needs {need} GPUs but team {team} may hold at most {most} in {pool} (quota plus borrowing limit): it can never be admitted"
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
            Blocker::Quota { team, pool, used, nominal, lendable, need } => {
                let over = (used + need).saturating_sub(*nominal);
                if *used >= *nominal {
                    format!(
                        "Team {team} is at its quota in {pool} ({used} of {nominal} GPUs in use) and other teams' unused quota is taken: {lendable} GPUs could be borrowed, this job needs {need}"
                    )
                } else {
                    format!(
                        "Team {team} would need to borrow {over} GPUs in {pool} ({used} of {nominal} in use), but only {lendable} of other teams' quota is unused; this job needs {need}"
                    )
                }
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
            Blocker::StrictFifo { pool, ahead, higher } => {
                let jobs = if *ahead == 1 { "1 earlier job".to_string() } else { format!("{ahead} earlier jobs") };
                if *higher > 0 {
                    format!("Waiting behind {jobs} in {pool} ({higher} of higher priority), which queues in strict FIFO order")
                } else {
                    format!("Waiting behind {jobs} in {pool}, which queues in strict FIFO order")
                }
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

/// What one admission pass decided.
#[derive(Debug, Default)]
pub struct Cycle {
    pub admitted: Vec<(Wid, Placement)>,
    pub preempted: Vec<(Wid, PreemptCause)>,
    /// Still pending, in queue order, with why (only when reasons were asked for).
    pub pending: Vec<(Wid, Blocker)>,
}

#[derive(Clone, Copy, Debug)]
pub struct CycleOptions {
    pub preemption: bool,
    /// Explain every workload left pending (slower: no early stop).
    pub reasons: bool,
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
                self.quotas.push(Quota::default());
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
        let lendable_by_others: u32 = (0..self.teams.len())
            .filter(|&j| j != team)
            .map(|j| self.quotas[j].nominal - self.quotas[j].guaranteed())
            .sum();
        let borrow = q
            .borrowing_limit
            .map_or(lendable_by_others, |l| l.min(lendable_by_others));
        (q.nominal + borrow).min(self.capacity.total())
    }

    /// The quota check of Kueue's flavor assignment, without allocating: the hot path.
    fn quota_status(&self, team: TeamIdx, need: u32) -> QuotaStatus {
        let q = self.quotas[team];
        let used = self.used[team];
        let most = self.most(team);
        if need > most {
            return QuotaStatus::TooLarge { most };
        }
        let new_used = used + need;
        if let Some(limit) = q.borrowing_limit {
            if new_used > q.nominal + limit {
                return QuotaStatus::BorrowingLimit { limit };
            }
        }
        // Use beyond a queue's guaranteed part draws on the cohort's lendable quota.
        let mut lendable = 0;
        let mut drawn = 0;
        for (j, qj) in self.quotas.iter().enumerate() {
            let g = qj.guaranteed();
            lendable += qj.nominal - g;
            let u = if j == team { new_used } else { self.used[j] };
            drawn += u.saturating_sub(g);
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
            }),
            QuotaStatus::BorrowingLimit { limit } => Err(Blocker::BorrowingLimit {
                team: name(),
                pool: pool(),
                used,
                nominal: q.nominal,
                limit,
                need,
            }),
            QuotaStatus::Cohort => {
                let others_unused: u32 = self
                    .quotas
                    .iter()
                    .enumerate()
                    .filter(|(j, _)| *j != team)
                    .map(|(j, qj)| {
                        (qj.nominal - qj.guaranteed())
                            .saturating_sub(self.used[j].saturating_sub(qj.guaranteed()))
                    })
                    .sum::<u32>()
                    .saturating_sub(self.borrowed(team));
                Err(Blocker::Quota {
                    team: name(),
                    pool: pool(),
                    used,
                    nominal: q.nominal,
                    lendable: others_unused,
                    need,
                })
            }
        }
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

    /// The victims that would let `c` in, in Kueue's candidate order, or `None`.
    pub fn find_preemption(&self, c: &Candidate) -> Option<(Vec<(Wid, PreemptCause)>, Placement)> {
        let q = self.quotas[c.team];
        // reclaimWithinCohort applies when the preemptor fits within its nominal quota.
        let can_reclaim = self.used[c.team] + c.gpus <= q.nominal;
        let mut candidates: Vec<&Admitted> = self
            .admitted
            .values()
            .filter(|a| {
                (a.team == c.team && a.priority < c.priority)
                    || (can_reclaim
                        && a.team != c.team
                        && self.used[a.team] > self.quotas[a.team].nominal)
            })
            .collect();
        if candidates.is_empty() {
            return None;
        }
        candidates.sort_by(|a, b| {
            (a.team == c.team)
                .cmp(&(b.team == c.team))
                .then(a.priority.cmp(&b.priority))
                .then(b.admitted_at.cmp(&a.admitted_at))
                .then(b.id.cmp(&a.id))
        });
        let mut scratch = Cohort {
            capacity: self.capacity.clone(),
            teams: Vec::new(),
            quotas: self.quotas.clone(),
            used: self.used.clone(),
            admitted: BTreeMap::new(),
        };
        scratch.teams.clone_from(&self.teams);
        let by_team = self.teams[c.team].clone();
        let mut victims = Vec::new();
        for a in candidates {
            let cause = if a.team == c.team {
                PreemptCause::Priority {
                    by_team: by_team.clone(),
                }
            } else {
                if scratch.used[a.team] <= scratch.quotas[a.team].nominal {
                    continue; // that team is back within its quota
                }
                PreemptCause::Reclaim {
                    by_team: by_team.clone(),
                }
            };
            scratch.capacity.release(&a.placement);
            scratch.used[a.team] -= a.gpus;
            victims.push((a.id, cause));
            if let Ok(p) = scratch.try_fit(c) {
                return Some((victims, p));
            }
        }
        None
    }

    /// One admission pass over `queue` (in queue order) at time `at`.
    pub fn cycle(&mut self, queue: &Queue, at: DateTime<Utc>, opts: CycleOptions) -> Cycle {
        if !opts.reasons && self.capacity.strategy == QueueingStrategy::BestEffortFifo {
            return self.cycle_by_class(queue, at, opts);
        }
        self.cycle_in_order(queue, at, opts)
    }

    /// The same pass as [`Self::cycle_in_order`] without explanations, walking the queue as a
    /// merge of its classes (team, GPUs): a class that failed is dropped whole, as is every
    /// class at least as large as a request that found no room. The result is the same; the
    /// work no longer grows with the jobs that cannot fit.
    fn cycle_by_class(&mut self, queue: &Queue, at: DateTime<Utc>, opts: CycleOptions) -> Cycle {
        use std::collections::BinaryHeap;
        use std::ops::Bound::{Excluded, Unbounded};
        let mut out = Cycle::default();
        let classes: Vec<(&(TeamIdx, u32), &std::collections::BTreeSet<QueueKey>)> =
            queue.classes.iter().collect();
        let mut heap: BinaryHeap<Reverse<(QueueKey, usize)>> = classes
            .iter()
            .enumerate()
            .filter_map(|(i, (_, keys))| keys.iter().next().map(|k| Reverse((*k, i))))
            .collect();
        // Quota only shrinks within a pass and priority only falls, so a class that failed
        // stays failed; room only shrinks, so no request at least `no_room` large fits.
        let mut failed_team: Vec<u32> = vec![u32::MAX; self.teams.len()];
        let mut no_room = u32::MAX;
        while let Some(Reverse((key, i))) = heap.pop() {
            let &(team, gpus) = classes[i].0;
            if gpus >= no_room || failed_team.get(team).is_some_and(|&f| gpus >= f) {
                continue; // the whole class is out of this pass
            }
            let c = &queue.items[&key];
            let next = |heap: &mut BinaryHeap<Reverse<(QueueKey, usize)>>| {
                if let Some(k) = classes[i].1.range((Excluded(key), Unbounded)).next() {
                    heap.push(Reverse((*k, i)));
                }
            };
            match self.try_fit(c) {
                Ok(p) => {
                    self.admit(c, p.clone(), at);
                    out.admitted.push((c.id, p));
                    next(&mut heap);
                }
                Err(miss) => {
                    let preempt = if miss != Miss::Never && opts.preemption {
                        self.find_preemption(c)
                    } else {
                        None
                    };
                    match preempt {
                        Some((victims, p)) => {
                            for (id, cause) in victims {
                                self.release(id);
                                out.preempted.push((id, cause));
                            }
                            self.admit(c, p.clone(), at);
                            out.admitted.push((c.id, p));
                            // Room came back: every class is in play again from here on.
                            failed_team.iter_mut().for_each(|f| *f = u32::MAX);
                            no_room = u32::MAX;
                            heap = classes
                                .iter()
                                .enumerate()
                                .filter_map(|(j, (_, keys))| {
                                    keys.range((Excluded(key), Unbounded))
                                        .next()
                                        .map(|k| Reverse((*k, j)))
                                })
                                .collect();
                        }
                        None => match miss {
                            // Another team may still preempt its way in, so with preemption
                            // only this team's class is out.
                            Miss::Room if !opts.preemption => no_room = no_room.min(gpus),
                            Miss::Room | Miss::Quota => {
                                if let Some(f) = failed_team.get_mut(team) {
                                    *f = (*f).min(gpus);
                                }
                            }
                            Miss::Never => {
                                next(&mut heap);
                            }
                        },
                    }
                }
            }
        }
        out
    }

    /// One admission pass walking the queue in order, explaining what stays pending if asked.
    fn cycle_in_order(&mut self, queue: &Queue, at: DateTime<Utc>, opts: CycleOptions) -> Cycle {
        let mut out = Cycle::default();
        let strict = self.capacity.strategy == QueueingStrategy::StrictFifo;
        let min_sizes = queue.min_sizes();
        // Per team: the smallest request that failed this pass. Quota and room only shrink
        // during a pass and the queue runs by falling priority, so any later request of the
        // team at least that large fails too.
        let mut failed: Vec<u32> = vec![u32::MAX; self.teams.len()];
        let mut ahead = 0u32;
        let mut run = 0u32;
        let mut last_priority = None;
        let mut blocked = false;
        for c in queue.iter() {
            if blocked {
                if !opts.reasons {
                    break;
                }
                if last_priority != Some(c.priority) {
                    run = 0;
                    last_priority = Some(c.priority);
                }
                let higher = ahead - run;
                out.pending.push((
                    c.id,
                    Blocker::StrictFifo {
                        pool: self.capacity.name.clone(),
                        ahead,
                        higher,
                    },
                ));
                ahead += 1;
                run += 1;
                continue;
            }
            if c.team < failed.len() && c.gpus >= failed[c.team] {
                if opts.reasons {
                    let b = self
                        .evaluate(c)
                        .err()
                        .unwrap_or_else(|| self.capacity_blocker(c.gpus));
                    out.pending.push((c.id, b));
                } else if all_blocked(&min_sizes, &failed)
                    || (!opts.preemption && self.capacity.free() == 0)
                {
                    break;
                }
                continue;
            }
            let result = if opts.reasons {
                match self.evaluate(c) {
                    Ok(p) => Ok((Vec::new(), p)),
                    Err(b) if opts.preemption && !b.is_permanent() => {
                        self.find_preemption(c).ok_or(Some(b))
                    }
                    Err(b) => Err(Some(b)),
                }
            } else {
                match self.try_fit(c) {
                    Ok(p) => Ok((Vec::new(), p)),
                    Err(Miss::Never) => Err(None),
                    Err(_) if opts.preemption => self.find_preemption(c).ok_or(None),
                    Err(_) => Err(None),
                }
            };
            match result {
                Ok((victims, p)) => {
                    let preempted = !victims.is_empty();
                    for (id, cause) in victims {
                        self.release(id);
                        out.preempted.push((id, cause));
                    }
                    self.admit(c, p.clone(), at);
                    out.admitted.push((c.id, p));
                    // Without preemption nothing more fits in a full pool.
                    if !opts.reasons && !opts.preemption && self.capacity.free() == 0 {
                        break;
                    }
                    if preempted {
                        failed.iter_mut().for_each(|f| *f = u32::MAX);
                    }
                }
                Err(b) => {
                    if c.team < failed.len() {
                        failed[c.team] = c.gpus;
                    }
                    if let Some(b) = b {
                        out.pending.push((c.id, b));
                    }
                    if strict {
                        blocked = true;
                        last_priority = Some(c.priority);
                        ahead = 1;
                        run = 1;
                    }
                    // Nothing left can fit once every waiting team is blocked at its smallest request.
                    if !opts.reasons && all_blocked(&min_sizes, &failed) {
                        break;
                    }
                    // Without preemption nothing fits in a full pool.
                    if !opts.reasons && !opts.preemption && self.capacity.free() == 0 {
                        break;
                    }
                }
            }
        }
        out
    }
}

/// Every team with something waiting has failed at (or below) its smallest request.
fn all_blocked(min_sizes: &[u32], failed: &[u32]) -> bool {
    min_sizes
        .iter()
        .enumerate()
        .all(|(t, &m)| m == u32::MAX || failed.get(t).is_some_and(|&f| f <= m))
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
    let strict = co.capacity.strategy == QueueingStrategy::StrictFifo;
    let mut t = now;
    loop {
        // One pass at `t`, as `Cohort::cycle` makes it without preemption.
        failed_team.clear();
        failed_team.resize(co.teams.len(), u32::MAX);
        let mut no_room = u32::MAX;
        loop {
            let mut best: Option<(QueueKey, usize)> = None;
            for (i, cl) in classes.iter().enumerate() {
                let Some(k) = cl.head else { continue };
                if cl.gpus >= no_room || failed_team.get(cl.team).is_some_and(|&f| cl.gpus >= f) {
                    continue;
                }
                if best.is_none_or(|(b, _)| k < b) {
                    best = Some((k, i));
                }
            }
            let Some(((Reverse(priority), submitted_at, id), i)) = best else {
                break;
            };
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
                }
                // Under StrictFIFO the head blocks everything behind it, as in `cycle_in_order`.
                Err(_) if strict => break,
                // The same for the whole class: none of it is ever admitted.
                Err(Miss::Never) => {
                    left -= 1 + cl.rest.len();
                    cl.head = None;
                }
                Err(Miss::Room) => no_room = no_room.min(cl.gpus),
                Err(Miss::Quota) => {
                    if let Some(f) = failed_team.get_mut(cl.team) {
                        *f = (*f).min(cl.gpus);
                    }
                }
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
mod tests;
