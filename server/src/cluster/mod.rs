//! The `Cluster` seam: what Gantry needs from the engine that queues and runs jobs. It follows
//! Kueue's model — submit a workload, cancel it, watch its state changes, read queue positions
//! from the visibility API — so the Kubernetes back end can implement it as it stands. The
//! in-process `sim` back end is the embedded default and the test double.

pub mod k8s;
pub mod kueue;
pub mod sim;

use app::model::domain::{JobFailure, LogLine, Priority};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use tokio::sync::mpsc;

pub use crate::domain::logs::{LogQuery, LogSource, Ranks};
pub use crate::domain::quota::{PoolSpec, QueueingStrategy, QuotaSpec};
pub use crate::domain::workload::{RunSpec, WorkloadSpec};

#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error("unknown pool {0}")]
    UnknownPool(String),
    #[error("the cluster is unavailable: {0}")]
    Unavailable(String),
    /// The cluster refused a change that would overwrite what someone else set.
    #[error("{0}")]
    Conflict(String),
}

pub type Result<T, E = ClusterError> = std::result::Result<T, E>;

/// A state change the cluster reports, in the order it happened.
#[derive(Clone, Debug, PartialEq)]
pub struct ClusterEvent {
    /// Increases by one per event of this cluster instance.
    pub seq: u64,
    pub job_id: String,
    pub pool: String,
    pub at: DateTime<Utc>,
    pub change: Change,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Change {
    /// Quota reserved and nodes assigned (Kueue `Admitted`).
    Admitted {
        nodes: Vec<String>,
        /// How long it was admitted before this admission, in admissions that ended in an
        /// eviction (Kueue's `accumulatedPastExecutionTimeSeconds`; 0 when none or not
        /// recorded): an admission later than the one the database holds is a missed
        /// eviction, and this count says when the run it knew of ended. `None` when the
        /// cluster no longer says when it was admitted (its Workload gone, or finished without
        /// its `Admitted`): the change then stands at the job's end, and is never taken for an
        /// admission again.
        past_run_s: Option<i64>,
    },
    /// All pods are up (Kueue `PodsReady`).
    Running,
    Succeeded {
        reason: String,
    },
    Failed {
        reason: String,
        /// Kueue's count of the seconds it was admitted in admissions that ended
        /// (`accumulatedPastExecutionTimeSeconds`), given only when its last admission ended
        /// at this end (a deactivation of an admitted workload: at its max runtime, say); 0
        /// otherwise. A job the database holds as queued then ran that long, less its closed
        /// runs, while Gantry was not watching, the last run ending here.
        past_run_s: i64,
    },
    Cancelled {
        reason: String,
    },
    /// Evicted to make room (Kueue `Evicted` with reason `Preempted`); queued again.
    Preempted {
        reason: String,
    },
    /// Evicted for another of Kueue's reasons (its pods not ready in time, an admission
    /// check, a stopped queue, a failed node); queued again. Not a preemption.
    Evicted {
        reason: String,
    },
}

/// A queued workload as Kueue's visibility API lists it, plus the reason from its
/// `QuotaReserved=False` condition.
#[derive(Clone, Debug, PartialEq)]
pub struct PendingWorkload {
    pub job_id: String,
    pub team: String,
    pub gpus: u32,
    pub priority: Priority,
    pub submitted_at: DateTime<Utc>,
    /// 1-based rank among the pending workloads of the pool.
    pub position_in_pool: u32,
    /// 1-based rank among the pending workloads of the same team in the pool.
    pub position_in_team: u32,
    pub reason: String,
    /// When it would be admitted if nothing new arrived; `None` when that cannot be bounded.
    pub eta: Option<DateTime<Utc>>,
}

/// A team's use of a pool.
#[derive(Clone, Debug, PartialEq)]
pub struct TeamUse {
    pub team: String,
    pub quota: QuotaSpec,
    pub used: u32,
    /// GPUs held beyond the nominal quota.
    pub borrowed: u32,
}

#[derive(Clone, Debug, PartialEq)]
pub struct PoolStatus {
    pub name: String,
    pub gpu_model: String,
    pub nodes: u32,
    pub gpus_total: u32,
    pub gpus_allocated: u32,
    pub free_nodes: u32,
    pub pending: u32,
    pub teams: Vec<TeamUse>,
}

/// What the cluster would do with a workload submitted now.
#[derive(Clone, Debug, PartialEq)]
pub struct Admissibility {
    pub fits_now: bool,
    pub ahead: u32,
    pub reason: Option<String>,
    /// The workload could never be admitted (larger than the pool or the quota).
    pub never: bool,
    pub eta: Option<DateTime<Utc>>,
}

/// Where a known workload stands, for reconciling after a restart.
#[derive(Clone, Debug, PartialEq)]
pub enum WorkloadPhase {
    /// Waiting; `evicted_at` when the cluster records when it was last evicted (Kueue's
    /// `Evicted` condition), so that a repair after missed events ends the run then.
    Pending { evicted_at: Option<DateTime<Utc>> },
    Admitted {
        at: DateTime<Utc>,
        nodes: Vec<String>,
        running: bool,
        /// How long it was admitted in earlier admissions that ended in an eviction (Kueue's
        /// `accumulatedPastExecutionTimeSeconds`; 0 when none, or not recorded), so that a
        /// repair after a missed eviction and re-admission bills the run that ended.
        past_run_s: i64,
    },
}

#[async_trait]
pub trait Cluster: Send + Sync + 'static {
    /// The cluster's clock: the sim's may run faster than real time.
    fn now(&self) -> DateTime<Utc>;
    /// Sets a team's GPU quota in a pool (a ClusterQueue's flavor quota).
    async fn set_quota(&self, team: &str, pool: &str, quota: QuotaSpec) -> Result<()>;
    /// Submits a workload; submitting one the cluster already has changes nothing.
    async fn submit(&self, w: WorkloadSpec) -> Result<()>;
    /// Removes a workload and frees what it holds; unknown ids are ignored.
    async fn cancel(&self, job_id: &str) -> Result<()>;
    /// The pending workloads of a pool in admission order (shared: a deep queue is not copied
    /// for every read).
    async fn pending(&self, pool: &str) -> Result<std::sync::Arc<Vec<PendingWorkload>>>;
    async fn pools(&self) -> Result<Vec<PoolStatus>>;
    /// Whether a workload like this would be admitted now, and if not why.
    async fn check(&self, w: &WorkloadSpec) -> Result<Admissibility>;
    /// Every workload the cluster knows that has not finished.
    async fn workloads(&self) -> Result<Vec<(String, WorkloadPhase)>>;
    /// Whether [`Cluster::workloads`] lists everything the cluster holds (a watch-fed back
    /// end: not before its first complete list). Gantry corrects its database only from a
    /// complete list.
    fn listed(&self) -> bool {
        true
    }
    /// A stream of every state change from now on.
    fn subscribe(&self) -> mpsc::UnboundedReceiver<ClusterEvent>;
    /// The sequence number of the last event sent to subscribers.
    fn last_seq(&self) -> u64;
    /// The object a workload is submitted as, as YAML for a person to review; `None` where
    /// the back end has no such object (the sim).
    fn manifest(&self, _w: &WorkloadSpec) -> Option<String> {
        None
    }
    /// Whether [`Cluster::manifest`] answers.
    fn has_manifests(&self) -> bool {
        false
    }
    /// What the job's pods printed, selected by `q`, in time order; `None` when the job has no
    /// pods (it never ran, or the cluster deleted them after it ended).
    async fn logs(&self, src: &LogSource, q: &LogQuery) -> Result<Option<Vec<LogLine>>>;
    /// The job's new log lines as they are written, from a stream the back end holds open
    /// (kube: `pods/log?follow=true` per pod); the channel closes when the pods' containers
    /// end. `None` where the back end has no such stream or the job has no pods yet: the
    /// caller reads [`Cluster::logs`] again instead (the sim, whose lines follow its clock).
    async fn follow_logs(
        &self,
        _src: &LogSource,
        _q: &LogQuery,
    ) -> Result<Option<mpsc::Receiver<LogLine>>> {
        Ok(None)
    }
    /// Why a failed job failed, from its pods (the first that failed); `None` when the pods
    /// are gone or none failed.
    async fn failure(&self, src: &LogSource) -> Result<Option<JobFailure>>;
    /// The names of a pool's `nodes` nodes, in order, for the Pools grid. A node a workload
    /// is placed on that is not among them gets a row of its own.
    fn node_names(&self, pool: &str, nodes: u32) -> Vec<String> {
        (0..nodes).map(|i| kueue::node_name(pool, i)).collect()
    }
}
