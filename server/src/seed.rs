//! The embedded default's demo data: two HGX pools, three teams with quotas, five users and
//! realistic templates, plus (optionally) a few jobs so the pools are not empty on first run.

use app::model::{LaunchRequest, ParamKind, ParamSpec, Role};

use crate::domain::template::TemplateVersion;
use chrono::{DateTime, Utc};
use serde_json::{json, Map, Value};

use crate::cluster::QuotaSpec;
use crate::db::{Db, PoolRow, QuotaRow, Result};

pub struct DemoUser {
    pub id: &'static str,
    pub name: &'static str,
    pub admin: bool,
    pub teams: &'static [(&'static str, Role)],
}

pub const USERS: &[DemoUser] = &[
    DemoUser {
        id: "alice",
        name: "Alice Martin",
        admin: false,
        teams: &[("nlp", Role::Member)],
    },
    DemoUser {
        id: "bob",
        name: "Bob Okafor",
        admin: false,
        teams: &[("nlp", Role::Lead)],
    },
    DemoUser {
        id: "dave",
        name: "Dave Kim",
        admin: false,
        teams: &[("vision", Role::Member)],
    },
    DemoUser {
        id: "erin",
        name: "Erin Novak",
        admin: false,
        teams: &[("speech", Role::Member)],
    },
    DemoUser {
        id: "carol",
        name: "Carol Diaz",
        admin: true,
        teams: &[],
    },
];

/// (pool, GPU model, nodes)
pub const POOLS: &[(&str, &str, u32)] = &[
    ("hgx-h100", "NVIDIA H100 80GB", 16),
    ("hgx-h200", "NVIDIA H200 141GB", 4),
];

/// (team, pool, nominal GPUs, borrowing limit GPUs)
pub const QUOTAS: &[(&str, &str, u32, u32)] = &[
    ("nlp", "hgx-h100", 64, 32),
    ("vision", "hgx-h100", 32, 32),
    ("speech", "hgx-h100", 32, 16),
    ("nlp", "hgx-h200", 16, 8),
    ("vision", "hgx-h200", 8, 8),
    ("speech", "hgx-h200", 8, 0),
];

fn p(
    name: &str,
    label: &str,
    kind: ParamKind,
    default: Value,
    bounds: (Option<f64>, Option<f64>),
    help: &str,
    advanced: bool,
) -> ParamSpec {
    ParamSpec {
        name: name.into(),
        label: label.into(),
        kind,
        default,
        min: bounds.0,
        max: bounds.1,
        help: help.into(),
        advanced,
    }
}

fn common(lr: f64, batch: i64, dataset: &str, seq: i64) -> Vec<ParamSpec> {
    use ParamKind::*;
    vec![
        p(
            "learning_rate",
            "Learning rate",
            Float,
            json!(lr),
            (Some(1e-7), Some(1e-2)),
            "Peak learning rate after warm-up",
            false,
        ),
        p(
            "epochs",
            "Epochs",
            Int,
            json!(3),
            (Some(1.0), Some(50.0)),
            "Passes over the dataset",
            false,
        ),
        p(
            "per_device_batch_size",
            "Batch size per GPU",
            Int,
            json!(batch),
            (Some(1.0), Some(128.0)),
            "Micro-batch on each GPU",
            false,
        ),
        p(
            "dataset",
            "Dataset",
            Path,
            json!(dataset),
            (None, None),
            "Training data location",
            false,
        ),
        p(
            "max_seq_len",
            "Max sequence length",
            Int,
            json!(seq),
            (Some(128.0), Some(131072.0)),
            "Tokens per sample",
            true,
        ),
        p(
            "warmup_ratio",
            "Warm-up ratio",
            Float,
            json!(0.03),
            (Some(0.0), Some(0.5)),
            "Share of steps spent warming up",
            true,
        ),
        p(
            "gradient_checkpointing",
            "Gradient checkpointing",
            Bool,
            json!(true),
            (None, None),
            "Trade compute for memory",
            true,
        ),
        p(
            "seed",
            "Random seed",
            Int,
            json!(42),
            (Some(0.0), Some(2147483647.0)),
            "",
            true,
        ),
        // Read by the sim cluster only (see `cluster::sim::failure`); never passed to the
        // container on Kubernetes.
        p(
            crate::cluster::sim::failure::FAIL_AFTER_PARAM,
            "Sim: fail after (s)",
            Int,
            json!(0),
            (Some(0.0), Some(1_209_600.0)),
            "Sim cluster only: the job fails after this many seconds of running time; 0: never",
            true,
        ),
        p(
            crate::cluster::sim::failure::FAIL_REASON_PARAM,
            "Sim: how it fails",
            String,
            json!("exit code 1"),
            (None, None),
            "Sim cluster only: exit code N, or OOMKilled",
            true,
        ),
    ]
}

pub fn templates() -> Vec<TemplateVersion> {
    use ParamKind::*;
    let mut llama8 = common(2e-5, 4, "s3://ml-datasets/instruct/v3/", 8192);
    llama8.push(p(
        "fsdp_sharding",
        "FSDP sharding",
        String,
        json!("FULL_SHARD"),
        (None, None),
        "FULL_SHARD or HYBRID_SHARD",
        true,
    ));
    let mut llama70 = common(1e-4, 2, "s3://ml-datasets/instruct/v3/", 4096);
    llama70.insert(
        0,
        p(
            "lora_rank",
            "LoRA rank",
            Int,
            json!(16),
            (Some(1.0), Some(256.0)),
            "Rank of the adapter matrices",
            false,
        ),
    );
    llama70.insert(
        1,
        p(
            "lora_alpha",
            "LoRA alpha",
            Int,
            json!(32),
            (Some(1.0), Some(512.0)),
            "Scaling of the adapter",
            true,
        ),
    );
    let mistral = common(5e-6, 8, "s3://ml-datasets/chat-sft/2026-10/", 4096);
    let mut qwen = common(1e-5, 1, "s3://ml-datasets/pretrain-mix/v7/", 8192);
    qwen.push(p(
        "zero_offload",
        "Offload optimizer to CPU",
        Bool,
        json!(false),
        (None, None),
        "ZeRO-3 optimizer offload",
        true,
    ));
    let mut whisper = common(1e-5, 16, "s3://ml-datasets/speech/call-center-en/", 448);
    whisper.retain(|x| x.name != "max_seq_len");
    whisper.push(p(
        "language",
        "Language",
        String,
        json!("en"),
        (None, None),
        "ISO 639-1 code",
        false,
    ));
    let t = |name: &str,
             display: &str,
             family: &str,
             size: &str,
             method: &str,
             desc: &str,
             image: &str,
             cmd: &[&str],
             params: Vec<ParamSpec>,
             gpus: &[u32],
             default_gpus: u32,
             hours: u64| TemplateVersion {
        name: name.into(),
        version: 1,
        display_name: display.into(),
        family: family.into(),
        model_size: size.into(),
        method: method.into(),
        description: desc.into(),
        image: image.into(),
        command: cmd.iter().map(|s| s.to_string()).collect(),
        params,
        allowed_gpus: gpus.to_vec(),
        default_gpus,
        default_pool: "hgx-h100".into(),
        default_max_runtime_s: hours * 3600,
        trainer_runtime: None,
    };
    let mut all = vec![
        t("llama-3.1-8b-fsdp", "Llama 3.1 8B full fine-tune", "Llama", "8B", "Full fine-tune (FSDP)",
          "Full-parameter instruction tuning of Llama 3.1 8B with PyTorch FSDP across nodes.",
          "registry.internal/ml/llama-recipes:3.1-fsdp-2026.10", &["torchrun", "-m", "recipes.finetune", "--config", "configs/llama3_8b_full.yaml"],
          llama8, &[8, 16, 32, 64], 16, 8),
        t("llama-3.1-70b-lora", "Llama 3.1 70B LoRA", "Llama", "70B", "LoRA",
          "Parameter-efficient LoRA adapters on Llama 3.1 70B, bf16 base weights sharded with FSDP.",
          "registry.internal/ml/llama-recipes:3.1-lora-2026.10", &["torchrun", "-m", "recipes.lora", "--config", "configs/llama3_70b_lora.yaml"],
          llama70, &[8, 16, 32], 8, 12),
        t("mistral-7b-sft", "Mistral 7B SFT", "Mistral", "7B", "Supervised fine-tune",
          "Supervised fine-tuning of Mistral 7B v0.3 on chat data with TRL's SFTTrainer.",
          "registry.internal/ml/trl:0.12-cu124", &["torchrun", "sft.py", "--model", "mistralai/Mistral-7B-v0.3"],
          mistral, &[1, 2, 4, 8, 16], 8, 4),
        t("qwen2.5-72b-zero3", "Qwen2.5 72B DeepSpeed ZeRO-3", "Qwen", "72B", "Full fine-tune (ZeRO-3)",
          "Continued pre-training of Qwen2.5 72B with DeepSpeed ZeRO stage 3 over several HGX nodes.",
          "registry.internal/ml/deepspeed:0.15-cu124", &["deepspeed", "train.py", "--deepspeed", "ds_zero3.json"],
          qwen, &[16, 32, 64], 32, 24),
        t("whisper-large-v3-ft", "Whisper large-v3 fine-tune", "Whisper", "1.5B", "Full fine-tune",
          "Fine-tunes Whisper large-v3 for speech recognition in one language on in-house audio.",
          "registry.internal/ml/whisper-ft:2026.09", &["torchrun", "finetune_whisper.py"],
          whisper, &[1, 2, 4, 8], 4, 6),
    ];
    // On the Kubernetes back end Mistral SFT runs as a Kubeflow TrainJob on the stock
    // `torch-distributed` ClusterTrainingRuntime; the others as JobSets.
    if let Some(m) = all.iter_mut().find(|t| t.name == "mistral-7b-sft") {
        m.trainer_runtime = Some("torch-distributed".into());
    }
    all
}

/// Seeds pools, teams, users, quotas and templates, once: returns false if there were some.
pub async fn seed_catalog(db: &Db, now: DateTime<Utc>) -> Result<bool> {
    if db.count_pools().await? > 0 {
        return Ok(false);
    }
    for (name, model, nodes) in POOLS {
        db.insert_pool(
            &PoolRow {
                name: name.to_string(),
                gpu_model: model.to_string(),
                nodes: *nodes,
                strategy: "BestEffortFIFO".into(),
            },
            now,
        )
        .await?;
    }
    for (team, display) in [
        ("nlp", "Natural language"),
        ("vision", "Vision"),
        ("speech", "Speech"),
    ] {
        db.insert_team(team, display, now).await?;
    }
    for u in USERS {
        db.insert_user(u.id, u.name, u.admin, now).await?;
        for (team, role) in u.teams {
            db.insert_membership(u.id, team, *role).await?;
        }
    }
    for (team, pool, nominal, borrow) in QUOTAS {
        let quota = QuotaSpec {
            nominal: *nominal,
            borrowing_limit: Some(*borrow),
            lending_limit: None,
            strategy: None,
        };
        db.set_quota(
            &QuotaRow {
                team: team.to_string(),
                pool: pool.to_string(),
                quota,
            },
            now,
        )
        .await?;
    }
    for t in templates() {
        db.insert_template(&t, now, None).await?;
    }
    Ok(true)
}

/// A few launches that make a first look at the pools realistic: (user, template, GPUs,
/// pool, hours). Long runtimes, so at the demo's time scale they stay for a while.
pub const DEMO_JOBS: &[(&str, &str, u32, &str, u64)] = &[
    ("bob", "qwen2.5-72b-zero3", 32, "hgx-h100", 48),
    ("dave", "mistral-7b-sft", 16, "hgx-h100", 30),
    ("erin", "whisper-large-v3-ft", 4, "hgx-h100", 20),
    ("alice", "llama-3.1-8b-fsdp", 16, "hgx-h100", 36),
    ("bob", "llama-3.1-70b-lora", 16, "hgx-h200", 40),
    ("dave", "llama-3.1-70b-lora", 8, "hgx-h200", 26),
    ("erin", "whisper-large-v3-ft", 8, "hgx-h200", 30),
    ("alice", "llama-3.1-70b-lora", 8, "hgx-h200", 12),
];

pub fn demo_launch(template: &str, gpus: u32, pool: &str, hours: u64) -> LaunchRequest {
    LaunchRequest {
        template: template.into(),
        gpus,
        pool: Some(pool.into()),
        params: Map::new(),
        max_runtime_s: Some(hours * 3600),
        name: None,
        priority: None,
        team: None,
        ..Default::default()
    }
}

/// Thirty days of finished jobs, so the Usage page is full on a first run. Each team runs
/// two streams of jobs per pool, each at most half its nominal quota, so together they never
/// hold more GPUs than the pool has. Some jobs are preempted once and run again; some fail or
/// are cancelled. Deterministic (a fixed-seed generator), stored through the same state
/// changes as live jobs, so their run intervals and events are real rows.
pub async fn seed_history(db: &Db, now: DateTime<Utc>) -> anyhow::Result<usize> {
    use crate::db::{NewJob, Transition};
    use app::model::{JobState, Priority};
    let mut rng: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move |n: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % n.max(1)
    };
    let templates = db.list_templates().await?;
    let start = now - chrono::Duration::days(30);
    let mut made = 0;
    for &(team, pool, nominal, _) in QUOTAS {
        let users: Vec<&str> = USERS
            .iter()
            .filter(|u| u.teams.iter().any(|(t, _)| *t == team))
            .map(|u| u.id)
            .collect();
        let fitting: Vec<&TemplateVersion> = templates
            .iter()
            .filter(|t| t.allowed_gpus.iter().any(|g| *g <= nominal / 2))
            .collect();
        if users.is_empty() || fitting.is_empty() {
            continue;
        }
        for _stream in 0..2 {
            let mut t = start + chrono::Duration::minutes(next(12 * 60) as i64);
            loop {
                let template = fitting[next(fitting.len() as u64) as usize];
                let choices: Vec<u32> = template
                    .allowed_gpus
                    .iter()
                    .copied()
                    .filter(|g| *g <= nominal / 2)
                    .collect();
                let gpus = choices[next(choices.len() as u64) as usize];
                let hours = 1 + next(14) as i64;
                let run = chrono::Duration::minutes(hours * 60 + next(60) as i64);
                let wait = chrono::Duration::minutes(next(90) as i64);
                let admitted = t + wait;
                let end = admitted + run;
                if end >= now - chrono::Duration::hours(1) {
                    break;
                }
                let user = users[next(users.len() as u64) as usize];
                let id = uuid::Uuid::now_v7().to_string();
                let params: serde_json::Map<String, serde_json::Value> = template
                    .params
                    .iter()
                    .map(|p| (p.name.clone(), p.default.clone()))
                    .collect();
                let name = format!("{}-{}", template.name, &id[id.len() - 6..]);
                db.insert_job(
                    &NewJob {
                        id: &id,
                        name: &name,
                        template: &template.name,
                        template_version: template.version,
                        team,
                        user,
                        pool,
                        gpus,
                        priority: Priority::Normal,
                        params: &params,
                        max_runtime_s: (run.num_seconds() as u64 + 3600).max(3600),
                        idempotency_key: None,
                        request_body: "{}",
                        created_at: t,
                        cloned_from: None,
                    },
                    "Queued (demo history)",
                )
                .await?;
                let step =
                    |from: &'static [JobState], to, at, reason: &'static str, kind| Transition {
                        job_id: &id,
                        from,
                        to,
                        at,
                        reason,
                        node_names: None,
                        kind,
                    };
                // Admitted, then its pods run: the two steps of every run.
                let start_run: [(&'static [JobState], JobState, &'static str); 2] = [
                    (&[JobState::Queued], JobState::Admitted, "Admitted"),
                    (
                        &[JobState::Admitted],
                        JobState::Running,
                        "All pods are running",
                    ),
                ];
                let mut at = admitted;
                let mut remaining = run;
                // One job in six is preempted once, waits, and runs again.
                if next(6) == 0 && run > chrono::Duration::hours(2) {
                    let first = chrono::Duration::minutes(30 + next(60) as i64);
                    for (from, to, reason) in start_run {
                        db.transition(&step(from, to, at, reason, None)).await?;
                    }
                    at += first;
                    remaining -= first;
                    db.transition(&step(
                        &[JobState::Running],
                        JobState::Queued,
                        at,
                        "Preempted: another team reclaimed its quota",
                        Some("preempted"),
                    ))
                    .await?;
                    at += chrono::Duration::minutes(20 + next(60) as i64);
                }
                for (from, to, reason) in start_run {
                    db.transition(&step(from, to, at, reason, None)).await?;
                }
                let end = at + remaining;
                let (to, reason) = match next(12) {
                    0 => (JobState::Failed, "Failed: a worker exited with code 1"),
                    1 => (JobState::Cancelled, "Cancelled by its owner"),
                    _ => (JobState::Succeeded, "Succeeded"),
                };
                db.transition(&step(&[JobState::Running], to, end.min(now), reason, None))
                    .await?;
                made += 1;
                t = end + chrono::Duration::minutes(next(6 * 60) as i64);
            }
        }
    }
    Ok(made)
}
