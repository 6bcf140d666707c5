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

/// What changed from one version of a template to another, one line each, for someone
/// deciding whether to re-run on the newer one.
pub fn differences(old: &TemplateVersion, new: &TemplateVersion) -> Vec<String> {
    let mut out = Vec::new();
    let (a, b) = (old.version, new.version);
    if old.image != new.image {
        out.push(format!(
            "image: {} (v{a}) → {} (v{b})",
            old.image, new.image
        ));
    }
    if old.command != new.command {
        out.push(format!(
            "command: {} → {}",
            old.command.join(" "),
            new.command.join(" ")
        ));
    }
    if old.allowed_gpus != new.allowed_gpus {
        let list = |v: &[u32]| v.iter().map(u32::to_string).collect::<Vec<_>>().join(", ");
        out.push(format!(
            "allowed GPUs: {} → {}",
            list(&old.allowed_gpus),
            list(&new.allowed_gpus)
        ));
    }
    if old.default_max_runtime_s != new.default_max_runtime_s {
        out.push(format!(
            "default max runtime: {} s → {} s",
            old.default_max_runtime_s, new.default_max_runtime_s
        ));
    }
    if old.trainer_runtime != new.trainer_runtime {
        let rt = |r: &Option<String>| r.clone().unwrap_or_else(|| "JobSet".into());
        out.push(format!(
            "runs as: {} → {}",
            rt(&old.trainer_runtime),
            rt(&new.trainer_runtime)
        ));
    }
    for p in &old.params {
        match new.params.iter().find(|q| q.name == p.name) {
            None => out.push(format!(
                "parameter {} removed (its value is dropped)",
                p.name
            )),
            Some(q) if q.default != p.default => out.push(format!(
                "parameter {}: default {} → {}",
                p.name, p.default, q.default
            )),
            Some(q) if q != p => out.push(format!("parameter {}: its limits changed", p.name)),
            _ => {}
        }
    }
    for q in &new.params {
        if !old.params.iter().any(|p| p.name == q.name) {
            out.push(format!(
                "parameter {} added (default {})",
                q.name, q.default
            ));
        }
    }
    out
}
