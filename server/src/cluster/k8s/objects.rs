//! The Kubernetes objects Gantry builds, as JSON: Kueue's queueing objects for the configured
//! pools and teams, and the JobSet (or Kubeflow TrainJob) of a launch. Pure functions, so
//! `gantry kube render` needs no cluster and the tests check every object against the CRDs.
//!
//! Written against Kueue v0.19 (`kueue.x-k8s.io/v1beta2`, the storage version), JobSet v0.12
//! (`jobset.x-k8s.io/v1alpha2`) and Kubeflow Trainer v2.3 (`trainer.kubeflow.org/v1alpha1`).

use serde_json::{json, Map, Value};

use crate::cluster::{PoolSpec, QuotaSpec, WorkloadSpec};
use crate::config::KubeSettings;
use app::model::domain::{Priority, GPUS_PER_NODE};

pub const KUEUE: &str = "kueue.x-k8s.io/v1beta2";
pub const JOBSET: &str = "jobset.x-k8s.io/v1alpha2";
pub const TRAINER: &str = "trainer.kubeflow.org/v1alpha1";
/// The field manager of every server-side apply.
pub const FIELD_MANAGER: &str = "gantry";
/// Label on every job object: the Gantry job it runs.
pub const JOB_ID_LABEL: &str = "gantry.dev/job-id";
pub const MASTER_PORT: u16 = 29500;
/// The replicated job (JobSet) / node group of every launch; pods are `<name>-node-<i>-0`.
const REPLICATED_JOB: &str = "node";

/// The namespace of a team's jobs and LocalQueues.
pub fn namespace(s: &KubeSettings, team: &str) -> String {
    format!("{}{team}", s.namespace_prefix)
}

/// A team's ClusterQueue in a pool; the pool is the cohort.
pub fn cluster_queue_name(team: &str, pool: &str) -> String {
    format!("{team}-{pool}")
}

/// The LocalQueue of a team's namespace that feeds its ClusterQueue in `pool`.
pub fn local_queue_name(pool: &str) -> String {
    pool.to_string()
}

pub fn priority_class_name(p: Priority) -> String {
    format!("gantry-{}", p.as_str())
}

pub use crate::domain::workload::object_name;

/// The node label value that selects a pool's HGX nodes.
pub fn node_label_value(s: &KubeSettings, pool: &PoolSpec) -> String {
    s.pool_node_labels
        .get(&pool.name)
        .cloned()
        .unwrap_or_else(|| format!("NVIDIA-{}", pool.gpu_model))
}

pub fn resource_flavor(s: &KubeSettings, pool: &PoolSpec) -> Value {
    json!({
        "apiVersion": KUEUE,
        "kind": "ResourceFlavor",
        "metadata": {"name": pool.name, "labels": managed()},
        "spec": {"nodeLabels": {s.node_label.clone(): node_label_value(s, pool)}}
    })
}

/// A team's share of a pool. Quotas are in GPUs; CPU and memory, when configured, scale with
/// them. Preemption as the sim's rules: reclaim borrowed quota from any priority, and
/// lower-priority jobs of the same queue.
pub fn cluster_queue(s: &KubeSettings, team: &str, pool: &PoolSpec, q: QuotaSpec) -> Value {
    let mut covered = vec![json!("nvidia.com/gpu")];
    let mut resources = vec![quota_resource("nvidia.com/gpu", q, |g| json!(g))];
    if s.cpu_per_gpu > 0 {
        covered.push(json!("cpu"));
        let per = s.cpu_per_gpu;
        resources.push(quota_resource("cpu", q, |g| json!(g * per)));
    }
    if s.memory_per_gpu_gib > 0 {
        covered.push(json!("memory"));
        let per = s.memory_per_gpu_gib;
        resources.push(quota_resource("memory", q, |g| {
            json!(format!("{}Gi", g * per))
        }));
    }
    json!({
        "apiVersion": KUEUE,
        "kind": "ClusterQueue",
        "metadata": {"name": cluster_queue_name(team, &pool.name), "labels": managed()},
        "spec": {
            "cohortName": pool.name,
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace(s, team)}},
            // The team's own order in the pool; by default the pool's.
            "queueingStrategy": q.strategy.unwrap_or(pool.strategy).as_str(),
            "preemption": {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"},
            "resourceGroups": [{
                "coveredResources": covered,
                "flavors": [{"name": pool.name, "resources": resources}]
            }]
        }
    })
}

fn quota_resource(name: &str, q: QuotaSpec, amount: impl Fn(u32) -> Value) -> Value {
    let mut r = Map::new();
    r.insert("name".into(), json!(name));
    r.insert("nominalQuota".into(), amount(q.nominal));
    if let Some(b) = q.borrowing_limit {
        r.insert("borrowingLimit".into(), amount(b));
    }
    if let Some(l) = q.lending_limit {
        r.insert("lendingLimit".into(), amount(l));
    }
    Value::Object(r)
}

pub fn local_queue(s: &KubeSettings, team: &str, pool: &str) -> Value {
    json!({
        "apiVersion": KUEUE,
        "kind": "LocalQueue",
        "metadata": {"name": local_queue_name(pool), "namespace": namespace(s, team), "labels": managed()},
        "spec": {"clusterQueue": cluster_queue_name(team, pool)}
    })
}

pub fn priority_class(p: Priority) -> Value {
    json!({
        "apiVersion": KUEUE,
        "kind": "WorkloadPriorityClass",
        "metadata": {"name": priority_class_name(p), "labels": managed()},
        "value": p.value(),
        "description": format!("Gantry priority '{}'", p.as_str())
    })
}

pub fn team_namespace(s: &KubeSettings, team: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": namespace(s, team), "labels": managed()}
    })
}

fn managed() -> Value {
    json!({"app.kubernetes.io/managed-by": "gantry"})
}

/// Nodes and GPUs per pod: gangs above one node take whole nodes, smaller ones one pod.
pub fn shape(gpus: u32) -> (u32, u32) {
    if gpus > GPUS_PER_NODE {
        (gpus.div_ceil(GPUS_PER_NODE), GPUS_PER_NODE)
    } else {
        (1, gpus)
    }
}

fn job_labels(w: &WorkloadSpec) -> Value {
    json!({
        "kueue.x-k8s.io/queue-name": local_queue_name(&w.pool),
        "kueue.x-k8s.io/priority-class": priority_class_name(w.priority),
        "kueue.x-k8s.io/max-exec-time-seconds": w.max_runtime_s.to_string(),
        "app.kubernetes.io/managed-by": "gantry",
        JOB_ID_LABEL: w.job_id,
        "gantry.dev/team": w.team,
        "gantry.dev/pool": w.pool,
        "gantry.dev/template": w.run.template,
        "gantry.dev/template-version": w.run.template_version.to_string(),
    })
}

fn job_annotations(w: &WorkloadSpec) -> Value {
    json!({"gantry.dev/job-name": w.run.name, "gantry.dev/launched-by": w.run.user})
}

fn resources(s: &KubeSettings, gpus: u32) -> Value {
    let mut r = Map::new();
    r.insert("nvidia.com/gpu".into(), json!(gpus));
    if s.cpu_per_gpu > 0 {
        r.insert("cpu".into(), json!(gpus * s.cpu_per_gpu));
    }
    if s.memory_per_gpu_gib > 0 {
        r.insert(
            "memory".into(),
            json!(format!("{}Gi", gpus * s.memory_per_gpu_gib)),
        );
    }
    json!({"requests": Value::Object(r.clone()), "limits": Value::Object(r)})
}

/// Parameters read by the sim cluster only, such as `sim_fail_after_s`.
pub const SIM_ONLY_PARAM_PREFIX: &str = "sim_";

/// The template's parameters as `--name=value` arguments, in the order they were given;
/// `sim_*` parameters are for the sim cluster only and stay out.
fn param_args(w: &WorkloadSpec) -> Vec<String> {
    w.run
        .params
        .iter()
        .filter(|(k, _)| !k.starts_with(SIM_ONLY_PARAM_PREFIX))
        .map(|(k, v)| match v {
            Value::String(s) => format!("--{k}={s}"),
            other => format!("--{k}={other}"),
        })
        .collect()
}

/// The container command: the launcher is told the gang's shape (torchrun and deepspeed by
/// their flags; anything else reads the environment), then the template's arguments.
fn launch_command(w: &WorkloadSpec, nodes: u32, per_pod: u32) -> Vec<String> {
    let mut cmd = w.run.command.clone();
    let rendezvous: Vec<String> = match cmd.first().map(String::as_str) {
        Some("torchrun") => vec![
            format!("--nnodes={nodes}"),
            format!("--nproc-per-node={per_pod}"),
            "--node-rank=$(NODE_RANK)".into(),
            "--master-addr=$(MASTER_ADDR)".into(),
            "--master-port=$(MASTER_PORT)".into(),
        ],
        Some("deepspeed") => vec![
            "--no_ssh".into(),
            format!("--num_nodes={nodes}"),
            format!("--num_gpus={per_pod}"),
            "--node_rank=$(NODE_RANK)".into(),
            "--master_addr=$(MASTER_ADDR)".into(),
            "--master_port=$(MASTER_PORT)".into(),
        ],
        _ => Vec::new(),
    };
    if !cmd.is_empty() {
        cmd.splice(1..1, rendezvous);
    }
    cmd.extend(param_args(w));
    cmd
}

/// A launch as a JobSet: one Indexed Job of one pod per node, all-or-nothing under Kueue.
pub fn jobset(s: &KubeSettings, w: &WorkloadSpec) -> Value {
    let name = object_name(&w.job_id);
    let (nodes, per_pod) = shape(w.gpus);
    let master = format!("{name}-{REPLICATED_JOB}-0-0.{name}");
    json!({
        "apiVersion": JOBSET,
        "kind": "JobSet",
        "metadata": {
            "name": name,
            "namespace": namespace(s, &w.team),
            "labels": job_labels(w),
            "annotations": job_annotations(w),
        },
        "spec": {
            "network": {"enableDNSHostnames": true, "publishNotReadyAddresses": true},
            "successPolicy": {"operator": "All"},
            "failurePolicy": {"maxRestarts": 0},
            "replicatedJobs": [{
                "name": REPLICATED_JOB,
                "replicas": 1,
                "template": {"spec": {
                    "parallelism": nodes,
                    "completions": nodes,
                    "completionMode": "Indexed",
                    "backoffLimit": 0,
                    "template": {
                        "metadata": {"labels": {JOB_ID_LABEL: w.job_id}},
                        "spec": {
                            "restartPolicy": "Never",
                            "containers": [{
                                "name": "trainer",
                                "image": w.run.image,
                                "command": launch_command(w, nodes, per_pod),
                                "env": [
                                    {"name": "NODE_RANK", "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}},
                                    {"name": "NNODES", "value": nodes.to_string()},
                                    {"name": "NPROC_PER_NODE", "value": per_pod.to_string()},
                                    {"name": "MASTER_ADDR", "value": master},
                                    {"name": "MASTER_PORT", "value": MASTER_PORT.to_string()},
                                    {"name": "GANTRY_JOB_ID", "value": w.job_id},
                                ],
                                "ports": [{"name": "rendezvous", "containerPort": MASTER_PORT}],
                                "resources": resources(s, per_pod),
                                "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
                            }],
                            "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory"}}],
                        }
                    }
                }}
            }]
        }
    })
}

/// A launch as a Kubeflow Trainer TrainJob on the template's ClusterTrainingRuntime; the
/// runtime's torch plugin sets the rendezvous (`PET_*`) itself.
pub fn trainjob(s: &KubeSettings, w: &WorkloadSpec, runtime: &str) -> Value {
    let (nodes, per_pod) = shape(w.gpus);
    let mut cmd = w.run.command.clone();
    cmd.extend(param_args(w));
    json!({
        "apiVersion": TRAINER,
        "kind": "TrainJob",
        "metadata": {
            "name": object_name(&w.job_id),
            "namespace": namespace(s, &w.team),
            "labels": job_labels(w),
            "annotations": job_annotations(w),
        },
        "spec": {
            "runtimeRef": {"name": runtime, "kind": "ClusterTrainingRuntime", "apiGroup": "trainer.kubeflow.org"},
            "trainer": {
                "image": w.run.image,
                "command": cmd,
                "numNodes": nodes,
                "numProcPerNode": per_pod,
                "resourcesPerNode": resources(s, per_pod),
                "env": [{"name": "GANTRY_JOB_ID", "value": w.job_id}],
            }
        }
    })
}

/// What a launch submits: a TrainJob when the template names a training runtime, else a JobSet.
pub fn job_object(s: &KubeSettings, w: &WorkloadSpec) -> Value {
    match &w.run.trainer_runtime {
        Some(rt) => trainjob(s, w, rt),
        None => jobset(s, w),
    }
}

/// Every Kueue object for the pools and quotas, in the order to apply them.
pub fn queueing_objects(
    s: &KubeSettings,
    pools: &[PoolSpec],
    quotas: &[(String, String, QuotaSpec)],
) -> Vec<Value> {
    let mut out: Vec<Value> = Priority::ALL.into_iter().map(priority_class).collect();
    out.extend(pools.iter().map(|p| resource_flavor(s, p)));
    let mut teams: Vec<&str> = quotas.iter().map(|(t, _, _)| t.as_str()).collect();
    teams.sort();
    teams.dedup();
    out.extend(teams.iter().map(|t| team_namespace(s, t)));
    for (team, pool, q) in quotas {
        if let Some(p) = pools.iter().find(|p| &p.name == pool) {
            out.push(cluster_queue(s, team, p, *q));
            out.push(local_queue(s, team, pool));
        }
    }
    out
}

/// Objects as multi-document YAML, for an admin to review and `kubectl apply`.
pub fn to_yaml(objects: &[Value]) -> String {
    let mut out = String::new();
    for o in objects {
        out.push_str("---\n");
        out.push_str(&serde_saphyr::to_string(o).unwrap_or_else(|e| format!("# {e}\n")));
        if !out.ends_with('\n') {
            out.push('\n');
        }
    }
    out
}
