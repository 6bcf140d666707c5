//! The Kubernetes back end: Kueue queues and admits, Gantry submits and watches.
//!
//! - Launch → server-side apply (field manager `gantry`) of a JobSet, or of a Kubeflow
//!   TrainJob when the template names a `ClusterTrainingRuntime`; the name comes from the job
//!   id, so a retried submission applies the same object.
//! - State ← a watch (kube-runtime `watcher`, not polling) of Kueue `Workload`s: their
//!   conditions become Gantry's state changes (see [`status`]).
//! - Queue positions ← Kueue's visibility API: each team's LocalQueue endpoint gives the team
//!   position (a team's LocalQueue feeds its own ClusterQueue, so it is also the position in
//!   that ClusterQueue); the pool position merges the pool's queues in Kueue's cross-queue
//!   order (priority, then creation time).
//!   That is an approximation: Kueue's scheduler takes the heads of the ClusterQueues of a
//!   cohort in that order, but under BestEffortFIFO it may admit a later workload that fits
//!   before an earlier one that does not.
//! - Why pending ← the `QuotaReserved=False` message Kueue writes on the Workload.
//! - ETA, `check` and pool figures ← a mirror of what the watch saw, run through the same
//!   admission rules as the sim (`super::kueue`).
//! - Cancel → delete with foreground propagation. Quota edits → server-side apply of the
//!   ClusterQueue's quotas without `force`: a field another manager owns is a conflict
//!   reported back, never overwritten.
//!
//! Every API call has a timeout; a failure is `ClusterError::Unavailable`, the job stays
//! stored and the reconciler sends it again.

pub mod objects;
pub mod pods;
pub mod status;
#[cfg(test)]
mod tests;

mod watch;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration as StdDuration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use futures::StreamExt;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams,
};
use kube::runtime::{watcher, WatchStreamExt};
use serde_json::Value;
use tokio::sync::mpsc;

use super::kueue::{KueueState, RestoredWorkload};
use super::{
    Admissibility, Change, Cluster, ClusterError, ClusterEvent, PendingWorkload, PoolSpec,
    PoolStatus, QuotaSpec, Result, RunSpec, WorkloadPhase, WorkloadSpec,
};
use crate::config::KubeSettings;
use app::model::domain::GPUS_PER_NODE;
use status::{Observed, Phase};

/// Every (API group, resource, verb) this back end calls: what `deploy/rbac.yaml` grants,
/// no more (a test keeps them equal). A server-side apply is a `patch`, and one that creates
/// the object is also authorized as `create`.
pub const API_USE: &[(&str, &str, &str)] = &[
    ("kueue.x-k8s.io", "workloads", "list"),
    ("kueue.x-k8s.io", "workloads", "watch"),
    ("jobset.x-k8s.io", "jobsets", "list"),
    ("jobset.x-k8s.io", "jobsets", "watch"),
    ("trainer.kubeflow.org", "trainjobs", "list"),
    ("trainer.kubeflow.org", "trainjobs", "watch"),
    ("kueue.x-k8s.io", "clusterqueues", "create"),
    ("kueue.x-k8s.io", "clusterqueues", "patch"),
    (
        "visibility.kueue.x-k8s.io",
        "localqueues/pendingworkloads",
        "get",
    ),
    ("jobset.x-k8s.io", "jobsets", "create"),
    ("jobset.x-k8s.io", "jobsets", "patch"),
    ("jobset.x-k8s.io", "jobsets", "delete"),
    ("trainer.kubeflow.org", "trainjobs", "create"),
    ("trainer.kubeflow.org", "trainjobs", "patch"),
    ("trainer.kubeflow.org", "trainjobs", "delete"),
    // A job's pods, their logs, and its object's Failed condition (cluster/k8s/pods.rs).
    ("", "pods", "list"),
    ("", "pods/log", "get"),
    ("jobset.x-k8s.io", "jobsets", "get"),
    ("trainer.kubeflow.org", "trainjobs", "get"),
];

fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

pub fn workload_resource() -> ApiResource {
    resource("kueue.x-k8s.io", "v1beta2", "Workload", "workloads")
}

/// The API resource of an object Gantry builds, from its `apiVersion` and `kind`.
pub fn resource_of(obj: &Value) -> Option<ApiResource> {
    let (group, version) = obj["apiVersion"]
        .as_str()?
        .rsplit_once('/')
        .unwrap_or(("", obj["apiVersion"].as_str()?));
    let kind = obj["kind"].as_str()?;
    let plural = match kind {
        "WorkloadPriorityClass" => "workloadpriorityclasses".to_string(),
        other => format!("{}s", other.to_ascii_lowercase()),
    };
    Some(resource(group, version, kind, &plural))
}

/// What the watch has seen, and the quotas Gantry applied.
#[derive(Default)]
struct Mirror {
    quotas: BTreeMap<(String, String), QuotaSpec>,
    observed: HashMap<String, Observed>,
    /// Job id → max runtime, object kind and team, from submissions (for the ETA, and for a
    /// cancel before the watch has seen the job's Workload).
    submitted: HashMap<String, (u64, &'static str, String)>,
    /// Whether the Workload watch has listed once; until then job objects wait in `deferred`
    /// (job id → the latest sighting and whether it was a deletion).
    workloads_listed: bool,
    deferred: HashMap<String, (Value, bool)>,
    /// Job id → the pool and the changes of its job object's verdict (see
    /// `watch::verdict_changes`), for its Workload going away before its end was seen: only
    /// while that Workload is in the mirror, unfinished.
    verdicts: HashMap<String, (String, TimedChanges)>,
}

/// Changes, each at the time the cluster recorded it.
type TimedChanges = Vec<(DateTime<Utc>, Change)>;

pub struct KubeCluster {
    client: kube::Client,
    settings: KubeSettings,
    pools: Vec<PoolSpec>,
    mirror: Mutex<Mirror>,
    subscribers: Mutex<Vec<mpsc::UnboundedSender<ClusterEvent>>>,
    seq: AtomicU64,
    /// Whether the last call reached the API server (shown on the job page while not).
    reachable: AtomicBool,
    /// Whether the Workload watch's first list is complete (the mirror holds everything).
    listed: AtomicBool,
    /// How many of the job-object watches (JobSets, and TrainJobs when `kube.trainer` is on)
    /// have completed their first list: a job whose Workload is gone is known by its object.
    jobs_listed: AtomicUsize,
}

fn unavailable(e: impl std::fmt::Display) -> ClusterError {
    ClusterError::Unavailable(e.to_string())
}

impl KubeCluster {
    /// A back end on `client` (from the kubeconfig, in-cluster, or a test's mock service).
    pub fn new(client: kube::Client, settings: KubeSettings, pools: Vec<PoolSpec>) -> Self {
        KubeCluster {
            client,
            settings,
            pools,
            mirror: Mutex::new(Mirror::default()),
            subscribers: Mutex::new(Vec::new()),
            seq: AtomicU64::new(0),
            reachable: AtomicBool::new(true),
            listed: AtomicBool::new(false),
            jobs_listed: AtomicUsize::new(0),
        }
    }

    /// Connects with `KUBECONFIG`/`~/.kube/config`, else the in-cluster service account.
    pub async fn connect(settings: KubeSettings, pools: Vec<PoolSpec>) -> anyhow::Result<Self> {
        let client = match &settings.kubeconfig {
            Some(path) => {
                let kc = kube::config::Kubeconfig::read_from(path).map_err(|e| {
                    anyhow::anyhow!("kube.kubeconfig: cannot read {}: {e}", path.display())
                })?;
                let cfg = kube::Config::from_custom_kubeconfig(
                    kc,
                    &kube::config::KubeConfigOptions::default(),
                )
                .await
                .map_err(|e| anyhow::anyhow!("kube.kubeconfig {}: {e}", path.display()))?;
                kube::Client::try_from(cfg)?
            }
            None => kube::Client::try_default().await.map_err(|e| {
                anyhow::anyhow!("cluster.backend = kube, but no Kubernetes client could be configured (KUBECONFIG, ~/.kube/config or in-cluster): {e}")
            })?,
        };
        Ok(KubeCluster::new(client, settings, pools))
    }

    /// Records a team's quota for the mirror without applying it (the stored quotas at start,
    /// so pool figures and checks work while the API server is away).
    pub fn know_quota(&self, team: &str, pool: &str, q: QuotaSpec) {
        self.mirror()
            .quotas
            .insert((team.to_string(), pool.to_string()), q);
    }

    pub fn is_reachable(&self) -> bool {
        self.reachable.load(Ordering::Relaxed)
    }

    fn pool_spec(&self, pool: &str) -> Option<&PoolSpec> {
        self.pools.iter().find(|p| p.name == pool)
    }

    /// Runs one API call under the configured timeout, noting whether the server answered.
    async fn call<T>(
        &self,
        what: &str,
        fut: impl std::future::Future<Output = kube::Result<T>>,
    ) -> Result<T> {
        let limit = StdDuration::from_secs(self.settings.timeout_s);
        match tokio::time::timeout(limit, fut).await {
            Ok(Ok(v)) => {
                self.reachable.store(true, Ordering::Relaxed);
                Ok(v)
            }
            Ok(Err(kube::Error::Api(s))) if s.code == 409 => {
                self.reachable.store(true, Ordering::Relaxed);
                Err(ClusterError::Conflict(format!("{what}: {}", s.message)))
            }
            Ok(Err(kube::Error::Api(s))) => {
                // The server answered: reachable, but it refused.
                self.reachable.store(true, Ordering::Relaxed);
                Err(ClusterError::Unavailable(format!(
                    "{what}: {} ({})",
                    s.message, s.code
                )))
            }
            Ok(Err(e)) => {
                self.reachable.store(false, Ordering::Relaxed);
                Err(unavailable(format!("{what}: {e}")))
            }
            Err(_) => {
                self.reachable.store(false, Ordering::Relaxed);
                Err(unavailable(format!(
                    "{what}: no answer within {} s",
                    self.settings.timeout_s
                )))
            }
        }
    }

    /// Server-side apply of one object as field manager `gantry`.
    pub async fn apply(&self, obj: &Value, force: bool) -> Result<()> {
        let ar = resource_of(obj).ok_or_else(|| unavailable("object without apiVersion/kind"))?;
        let name = obj["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let dynamic: DynamicObject = serde_json::from_value(obj.clone()).map_err(unavailable)?;
        let api: Api<DynamicObject> = match obj["metadata"]["namespace"].as_str() {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, &ar),
            None => Api::all_with(self.client.clone(), &ar),
        };
        let mut pp = PatchParams::apply(objects::FIELD_MANAGER);
        if force {
            pp = pp.force();
        }
        let what = format!("apply {} {name}", ar.kind);
        self.call(&what, api.patch(&name, &pp, &Patch::Apply(&dynamic)))
            .await
            .map(|_| ())
    }

    /// The pending workloads of a team's LocalQueue in a pool from Kueue's visibility API,
    /// in its order.
    async fn visibility(&self, team: &str, pool: &str) -> Result<Vec<VisiblePending>> {
        let path = format!(
            "/apis/visibility.kueue.x-k8s.io/v1beta2/namespaces/{}/localqueues/{}/pendingworkloads?limit=10000",
            objects::namespace(&self.settings, team),
            objects::local_queue_name(pool)
        );
        let req = http::Request::get(path)
            .body(Vec::new())
            .map_err(unavailable)?;
        let summary: Value = self
            .call("read pending workloads", self.client.request(req))
            .await?;
        Ok(summary["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|it| {
                let owner = it["metadata"]["ownerReferences"]
                    .as_array()?
                    .iter()
                    .find_map(|o| o["name"].as_str().and_then(status::job_id_of));
                Some(VisiblePending {
                    job_id: owner?,
                    team: team.to_string(),
                    priority: it["priority"].as_i64().unwrap_or(0),
                    created: it["metadata"]["creationTimestamp"]
                        .as_str()
                        .and_then(|s| DateTime::parse_from_rfc3339(s).ok())
                        .map(|t| t.with_timezone(&Utc))
                        .unwrap_or_default(),
                    position_in_queue: it["positionInLocalQueue"].as_u64().unwrap_or(0) as u32,
                })
            })
            .collect())
    }

    fn teams_in(&self, pool: &str) -> Vec<String> {
        self.mirror()
            .quotas
            .keys()
            .filter(|(_, p)| p == pool)
            .map(|(t, _)| t.clone())
            .collect()
    }
}

/// One entry of a visibility API answer.
#[derive(Clone, Debug)]
pub struct VisiblePending {
    pub job_id: String,
    pub team: String,
    pub priority: i64,
    pub created: DateTime<Utc>,
    /// 0-based, as Kueue counts.
    pub position_in_queue: u32,
}

/// The ClusterQueues of a pool merged into one line, in the order Kueue's scheduler takes
/// the heads of a cohort's queues: higher priority first, then earlier creation.
pub fn merge_queues(mut lists: Vec<Vec<VisiblePending>>) -> Vec<VisiblePending> {
    for l in &mut lists {
        l.sort_by_key(|p| p.position_in_queue);
    }
    let mut out: Vec<VisiblePending> = lists.into_iter().flatten().collect();
    // A stable sort keeps each queue's own order among equals.
    out.sort_by(|a, b| b.priority.cmp(&a.priority).then(a.created.cmp(&b.created)));
    out
}

#[async_trait]
impl Cluster for KubeCluster {
    fn manifest(&self, w: &WorkloadSpec) -> Option<String> {
        Some(objects::to_yaml(&[objects::job_object(&self.settings, w)]))
    }

    fn has_manifests(&self) -> bool {
        true
    }

    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }

    async fn set_quota(&self, team: &str, pool: &str, quota: QuotaSpec) -> Result<()> {
        let p = self
            .pool_spec(pool)
            .ok_or_else(|| ClusterError::UnknownPool(pool.to_string()))?;
        let cq = objects::cluster_queue(&self.settings, team, p, quota);
        self.apply(&cq, false).await?;
        self.mirror()
            .quotas
            .insert((team.to_string(), pool.to_string()), quota);
        Ok(())
    }

    async fn submit(&self, w: WorkloadSpec) -> Result<()> {
        if self.pool_spec(&w.pool).is_none() {
            return Err(ClusterError::UnknownPool(w.pool.clone()));
        }
        let obj = objects::job_object(&self.settings, &w);
        let kind = if w.run.trainer_runtime.is_some() {
            "TrainJob"
        } else {
            "JobSet"
        };
        self.mirror()
            .submitted
            .insert(w.job_id.clone(), (w.max_runtime_s, kind, w.team.clone()));
        self.apply(&obj, true).await
    }

    async fn cancel(&self, job_id: &str) -> Result<()> {
        let (ns, kinds) = {
            let m = self.mirror();
            let seen = m.observed.get(job_id);
            let team = seen
                .map(|o| o.team.clone())
                .or_else(|| m.submitted.get(job_id).map(|s| s.2.clone()));
            let kind = m.submitted.get(job_id).map(|s| s.1).or_else(|| {
                seen.map(|o| {
                    if o.owner_kind == "TrainJob" {
                        "TrainJob"
                    } else {
                        "JobSet"
                    }
                })
            });
            (
                team.map(|t| objects::namespace(&self.settings, &t)),
                kind.map_or(vec!["JobSet", "TrainJob"], |k| vec![k]),
            )
        };
        let Some(ns) = ns else {
            // Neither sent by this process nor seen by the watch: nothing known to delete (a
            // job object sent before a restart and not yet seen is the resender's to delete).
            return Ok(());
        };
        let name = objects::object_name(job_id);
        for kind in kinds {
            let ar = match kind {
                "TrainJob" => resource("trainer.kubeflow.org", "v1alpha1", "TrainJob", "trainjobs"),
                _ => resource("jobset.x-k8s.io", "v1alpha2", "JobSet", "jobsets"),
            };
            let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), &ns, &ar);
            match self
                .call(
                    &format!("delete {kind} {name}"),
                    api.delete(&name, &DeleteParams::foreground()),
                )
                .await
            {
                Ok(_) => {}
                Err(ClusterError::Unavailable(m)) if m.ends_with("(404)") => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    async fn pending(&self, pool: &str) -> Result<Arc<Vec<PendingWorkload>>> {
        let now = Utc::now();
        let mut mirror = self.mirror_state();
        let estimated = mirror.view(pool, now)?;
        let mut lists = Vec::new();
        let mut visible = true;
        for team in self.teams_in(pool) {
            match self.visibility(&team, pool).await {
                Ok(l) => lists.push(l),
                Err(e) => {
                    tracing::warn!(pool, error = %e, "Kueue's visibility API did not answer; positions come from the watched workloads");
                    visible = false;
                    break;
                }
            }
        }
        if !visible {
            return Ok(estimated);
        }
        let by_id: HashMap<&str, &PendingWorkload> =
            estimated.iter().map(|p| (p.job_id.as_str(), p)).collect();
        let observed = self.mirror();
        let mut out = Vec::new();
        let mut per_team: HashMap<String, u32> = HashMap::new();
        for (i, v) in merge_queues(lists).into_iter().enumerate() {
            let o = observed.observed.get(&v.job_id);
            let e = by_id.get(v.job_id.as_str());
            let team_pos = per_team.entry(v.team.clone()).or_default();
            *team_pos += 1;
            out.push(PendingWorkload {
                job_id: v.job_id.clone(),
                team: v.team.clone(),
                gpus: o.map_or(0, |o| o.gpus),
                priority: o.map(|o| o.priority).unwrap_or_default(),
                submitted_at: v.created,
                position_in_pool: i as u32 + 1,
                position_in_team: v.position_in_queue + 1,
                reason: match o.map(|o| &o.phase) {
                    Some(Phase::Pending { reason }) => reason.clone(),
                    _ => "Waiting for Kueue".into(),
                },
                eta: e.and_then(|e| e.eta),
            });
        }
        Ok(Arc::new(out))
    }

    async fn pools(&self) -> Result<Vec<PoolStatus>> {
        Ok(self.mirror_state().pools())
    }

    async fn check(&self, w: &WorkloadSpec) -> Result<Admissibility> {
        let mut a = self.mirror_state().check(w, Utc::now())?;
        if !self.is_reachable() && !a.never {
            // What the watched state says is stale; say so rather than promise a start.
            a.fits_now = false;
            a.eta = None;
            a.reason = Some(
                "The cluster is unreachable: a launch is stored now and sent when it answers"
                    .into(),
            );
        }
        Ok(a)
    }

    async fn workloads(&self) -> Result<Vec<(String, WorkloadPhase)>> {
        let m = self.mirror();
        Ok(m.observed
            .values()
            .filter_map(|o| {
                let phase = match &o.phase {
                    Phase::Pending { .. } => WorkloadPhase::Pending {
                        evicted_at: o.times.evicted,
                    },
                    Phase::Admitted { at, nodes } => WorkloadPhase::Admitted {
                        at: *at,
                        nodes: nodes.clone(),
                        running: false,
                        past_run_s: o.past_run_s,
                    },
                    Phase::Running { at, nodes } => WorkloadPhase::Admitted {
                        at: *at,
                        nodes: nodes.clone(),
                        running: true,
                        past_run_s: o.past_run_s,
                    },
                    Phase::Finished { .. } => return None,
                };
                Some((o.job_id.clone(), phase))
            })
            .collect())
    }

    fn subscribe(&self) -> mpsc::UnboundedReceiver<ClusterEvent> {
        let (tx, rx) = mpsc::unbounded_channel();
        self.subscribers.lock().expect("subscribers lock").push(tx);
        rx
    }

    fn last_seq(&self) -> u64 {
        self.seq.load(Ordering::SeqCst)
    }

    async fn logs(
        &self,
        src: &super::LogSource,
        q: &super::LogQuery,
    ) -> Result<Option<Vec<app::model::domain::LogLine>>> {
        self.read_logs(src, q).await
    }

    async fn follow_logs(
        &self,
        src: &super::LogSource,
        q: &super::LogQuery,
    ) -> Result<Option<tokio::sync::mpsc::Receiver<app::model::domain::LogLine>>> {
        self.follow_pod_logs(src, q).await
    }

    async fn failure(
        &self,
        src: &super::LogSource,
    ) -> Result<Option<app::model::domain::JobFailure>> {
        self.read_failure(src).await
    }

    /// Complete once the Workload watch and every job-object watch have listed: a job that
    /// finished while Gantry was away and whose Workload Kueue has since deleted (its
    /// `objectRetentionPolicies`) is known only by its JobSet's verdict, which must be written
    /// before the database is compared with the Workloads (else it would end as cancelled).
    fn listed(&self) -> bool {
        self.listed.load(Ordering::SeqCst)
            && self.jobs_listed.load(Ordering::SeqCst) >= self.job_kinds().len()
    }
}
