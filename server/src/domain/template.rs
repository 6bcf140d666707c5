//! A template version as it is stored and launched: immutable once written, what a job runs
//! (image, command, parameters) and what it may ask for (GPU counts, pool, runtime). What a
//! viewer is shown of it (with their team's last use) is built by the services.

use app::model::domain::ParamSpec;
use serde::Serialize;

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TemplateVersion {
    pub name: String,
    pub version: u32,
    pub display_name: String,
    pub family: String,
    pub model_size: String,
    pub method: String,
    pub description: String,
    pub image: String,
    pub command: Vec<String>,
    pub params: Vec<ParamSpec>,
    pub allowed_gpus: Vec<u32>,
    pub default_gpus: u32,
    pub default_pool: String,
    pub default_max_runtime_s: u64,
    /// The Kubeflow Trainer `ClusterTrainingRuntime` it runs under; `None`: a JobSet.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trainer_runtime: Option<String>,
}
