//! `gantry kube render`: the Kubernetes objects for the configured pools, teams and quotas, or
//! the job object a launch would submit, as YAML for an admin to review. Needs no cluster.

use serde_json::{Map, Value};

use crate::cluster::k8s::objects;
use crate::cluster::WorkloadSpec;
use crate::config::Config;
use crate::db::Db;
use app::model::Priority;

pub const USAGE: &str = "usage: gantry kube render [--template <name> --gpus <N> [--team <team>] [--priority low|normal|high]]";

/// What to render.
#[derive(Debug, Default, PartialEq)]
pub struct RenderArgs {
    pub template: Option<String>,
    pub gpus: Option<u32>,
    pub team: Option<String>,
    pub priority: Option<Priority>,
}

impl RenderArgs {
    /// Parses the words after `gantry kube render`.
    pub fn parse(words: &[String]) -> Result<RenderArgs, String> {
        let mut a = RenderArgs::default();
        let mut it = words.iter();
        while let Some(flag) = it.next() {
            let mut value = || {
                it.next()
                    .cloned()
                    .ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))
            };
            match flag.as_str() {
                "--template" => a.template = Some(value()?),
                "--team" => a.team = Some(value()?),
                "--gpus" => {
                    let v = value()?;
                    a.gpus = Some(v.parse().ok().filter(|g| *g > 0).ok_or_else(|| {
                        format!("--gpus: expected a whole number above 0, got '{v}'")
                    })?)
                }
                "--priority" => {
                    let v = value()?;
                    a.priority = Some(Priority::parse(&v).ok_or_else(|| {
                        format!("--priority: expected low, normal or high, got '{v}'")
                    })?)
                }
                other => return Err(format!("unknown argument '{other}'\n{USAGE}")),
            }
        }
        if a.template.is_some() != a.gpus.is_some() {
            return Err(format!("--template and --gpus go together\n{USAGE}"));
        }
        if a.template.is_none() && (a.team.is_some() || a.priority.is_some()) {
            return Err(format!("--team and --priority need --template\n{USAGE}"));
        }
        Ok(a)
    }
}

/// The YAML for `args`, from the pools, quotas and templates stored in `db`.
pub async fn render(config: &Config, db: &Db, args: &RenderArgs) -> anyhow::Result<String> {
    let pools = crate::db::pool_specs(db.list_pools().await?, &config.sim.strict_fifo_pools);
    let quotas: Vec<_> = db
        .list_quotas()
        .await?
        .into_iter()
        .map(|q| (q.team, q.pool, q.quota))
        .collect();
    let (Some(name), Some(gpus)) = (&args.template, args.gpus) else {
        return Ok(objects::to_yaml(&objects::queueing_objects(
            &config.kube,
            &pools,
            &quotas,
        )));
    };
    let templates = db.list_templates().await?;
    let Some(t) = templates.iter().find(|t| &t.name == name) else {
        let known: Vec<&str> = templates.iter().map(|t| t.name.as_str()).collect();
        anyhow::bail!(
            "--template: no template '{name}'; known: {}",
            known.join(", ")
        );
    };
    if !t.allowed_gpus.contains(&gpus) {
        anyhow::bail!(
            "--gpus: {} runs on {:?} GPUs, not {gpus}",
            t.name,
            t.allowed_gpus
        );
    }
    let team = match &args.team {
        Some(team) => {
            if !quotas.iter().any(|(q, _, _)| q == team) {
                anyhow::bail!("--team: no team '{team}' has a quota");
            }
            team.clone()
        }
        None => quotas
            .iter()
            .find(|(_, p, _)| p == &t.default_pool)
            .map(|(team, _, _)| team.clone())
            .ok_or_else(|| anyhow::anyhow!("no team has a quota in {}", t.default_pool))?,
    };
    let params: Map<String, Value> = t
        .params
        .iter()
        .map(|p| (p.name.clone(), p.default.clone()))
        .collect();
    let id = uuid::Uuid::now_v7().to_string();
    let job_name = format!("{}-{}", t.name, &id[id.len() - 6..]);
    let w = WorkloadSpec {
        job_id: id,
        team,
        pool: t.default_pool.clone(),
        gpus,
        priority: args.priority.unwrap_or_default(),
        submitted_at: chrono::Utc::now(),
        max_runtime_s: t.default_max_runtime_s,
        run: crate::domain::workload::run_spec(t, &job_name, "you", &params),
    };
    Ok(objects::to_yaml(&[objects::job_object(&config.kube, &w)]))
}
