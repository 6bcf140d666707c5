//! What a job is to the cluster and to the metrics store: the workload (a Kueue Workload),
//! its container side, the names its objects get, and a run's GPUs. Plain data built from a
//! launch or a stored job.

use crate::domain::template::TemplateVersion;
use app::model::domain::Priority;
use chrono::{DateTime, Utc};
use serde_json::{Map, Value};

/// A job as the cluster sees it (a Kueue Workload).
#[derive(Clone, Debug, PartialEq)]
pub struct WorkloadSpec {
    /// Gantry's job id; the cluster objects are named from it, so a retried submission of the
    /// same job is the same workload.
    pub job_id: String,
    pub team: String,
    pub pool: String,
    pub gpus: u32,
    pub priority: Priority,
    pub submitted_at: DateTime<Utc>,
    pub max_runtime_s: u64,
    /// What runs: the Kubernetes back end builds the job object from it; the sim ignores it.
    pub run: RunSpec,
}

/// The container side of a workload, from the job and its exact template version.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunSpec {
    /// The job's display name.
    pub name: String,
    pub user: String,
    pub template: String,
    pub template_version: u32,
    pub image: String,
    pub command: Vec<String>,
    /// Parameter values in the template's order.
    pub params: Vec<(String, serde_json::Value)>,
    /// A Kubeflow Trainer `ClusterTrainingRuntime` to run under (a TrainJob); `None`: a JobSet.
    pub trainer_runtime: Option<String>,
}

/// The container side of a job: its exact template version, parameters in the template's order.
pub fn run_spec(
    template: &TemplateVersion,
    name: &str,
    user: &str,
    params: &Map<String, Value>,
) -> RunSpec {
    RunSpec {
        name: name.to_string(),
        user: user.to_string(),
        template: template.name.clone(),
        template_version: template.version,
        image: template.image.clone(),
        command: template.command.clone(),
        params: template
            .params
            .iter()
            .filter_map(|p| params.get(&p.name).map(|v| (p.name.clone(), v.clone())))
            .collect(),
        trainer_runtime: template.trainer_runtime.clone(),
    }
}

/// The JobSet or TrainJob of a job: deterministic from the job id, so a retried submission
/// applies the same object. Job ids are UUIDs: `gantry-` + its 32 hex digits.
pub fn object_name(job_id: &str) -> String {
    let id: String = job_id
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .map(|c| c.to_ascii_lowercase())
        .collect();
    format!("gantry-{id}")
}

/// A job's GPUs during one run: what a back end needs to find its series.
#[derive(Clone, Debug, PartialEq)]
pub struct JobGpus {
    pub job_id: String,
    pub team: String,
    pub gpus: u32,
    /// When this run started (the interval's start).
    pub since: DateTime<Utc>,
}
