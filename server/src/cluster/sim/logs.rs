//! The sim's pods' logs: a deterministic, realistic training log per node rank, written from
//! the job (template, GPUs, parameters, how it ended) and the sim clock, so demos and tests
//! have real lines to show. What a `torchrun` job on HGX nodes prints: the launcher and its
//! rendezvous, NCCL's start-up, the model loading (rank 0), a step line every 30 s with a
//! falling loss, the learning rate and tokens/s (rank 0), a collective check on the other
//! ranks every 10 min, a checkpoint every 15 min on every rank, and at the end either the
//! final summary or, when it failed, the failing rank's traceback and the others' NCCL errors.
//!
//! The same job at the same clock gives the same lines: they are a function of the job and
//! the time, never stored by the sim. A pod's log exists from its creation (the last
//! admission) until [`POD_TTL_S`] after the job ended, when the sim deletes the pods as a
//! JobSet's `ttlSecondsAfterFinished` would; Gantry keeps the last part of it before then.

use app::model::domain::{exit_code_meaning, JobFailure, JobState, LogLine, GPUS_PER_NODE};
use chrono::{DateTime, Duration, Utc};

use super::failure::{FAIL_AFTER_PARAM, FAIL_REASON_PARAM};
use crate::domain::logs::LogSource;
use crate::domain::workload::object_name;

/// Sim seconds a finished job's pods (and so their logs) stay in the cluster.
pub const POD_TTL_S: i64 = 600;
/// Sim seconds from a pod's creation to its first training step.
const STARTUP_S: i64 = 60;
const STEP_LINE_EVERY_S: i64 = 30;
const STEPS_PER_LINE: u64 = 10;
const CHECK_EVERY_S: i64 = 600;
const CHECKPOINT_EVERY_S: i64 = 900;

/// Whether the job's pods exist at `now`.
pub fn pods_exist(src: &LogSource, now: DateTime<Utc>) -> bool {
    match (src.started_at, src.ended) {
        (None, _) => false,
        (Some(s), _) if s > now => false,
        (Some(_), Some((end, _))) => now < end + Duration::seconds(POD_TTL_S),
        (Some(_), None) => true,
    }
}

/// A small deterministic hash (FNV-1a) for per-job, per-step variation.
fn hash(job: &str, salt: u64) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ salt.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    for b in job.bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h ^= h >> 29;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^ (h >> 32)
}

/// A number in [-1, 1) from the job and a salt.
fn noise(job: &str, salt: u64) -> f64 {
    (hash(job, salt) % 20_000) as f64 / 10_000.0 - 1.0
}

fn param_str<'a>(src: &'a LogSource, name: &str) -> Option<&'a serde_json::Value> {
    src.params.iter().find(|(k, _)| k == name).map(|(_, v)| v)
}

/// How the sim's failing worker ended: `(exit code, Kubernetes reason, words of one's own)`.
fn failing_how(src: &LogSource) -> (Option<i32>, &'static str, Option<String>) {
    let raw = param_str(src, FAIL_REASON_PARAM)
        .and_then(|v| v.as_str())
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .unwrap_or("exit code 1");
    if let Some(code) = raw
        .strip_prefix("exit code")
        .map(str::trim)
        .and_then(|c| c.parse::<i32>().ok())
    {
        (Some(code), "Error", None)
    } else if raw.eq_ignore_ascii_case("oomkilled") {
        (Some(137), "OOMKilled", None)
    } else {
        (Some(1), "Error", Some(raw.to_string()))
    }
}

/// The node rank of the failing worker: the pod of the gang's last GPU, as the failure
/// sentence says.
pub fn failing_rank(src: &LogSource) -> u32 {
    src.gpus.saturating_sub(1) / GPUS_PER_NODE
}

fn pod_name(src: &LogSource, rank: u32) -> String {
    format!("{}-node-{rank}-0", object_name(&src.job_id))
}

/// Why the sim's job failed, as the kube back end reads it from the failing pod.
pub fn failure(src: &LogSource) -> Option<JobFailure> {
    let (at, state) = src.ended?;
    if state != JobState::Failed || param_str(src, FAIL_AFTER_PARAM).is_none() {
        return None;
    }
    let (code, reason, words) = failing_how(src);
    let rank = failing_rank(src);
    let summary = match (reason, &words) {
        ("OOMKilled", _) => "A worker ran out of memory (OOMKilled)".to_string(),
        (_, Some(w)) => format!("A worker failed: {w}"),
        _ => format!("A worker exited with code {}", code.unwrap_or(1)),
    };
    Some(JobFailure {
        summary,
        exit_code: code,
        reason: reason.to_string(),
        meaning: if reason == "OOMKilled" {
            "the container used more memory than its limit and the kernel killed it (host memory, not GPU memory)".into()
        } else {
            exit_code_meaning(code.unwrap_or(1))
        },
        pod: Some(pod_name(src, rank)),
        rank: Some(rank),
        node: src.nodes.get(rank as usize).cloned(),
        at: Some(at),
        condition: Some(format!(
            "jobset failed: job {}-node-0 failed (pod {} exited)",
            object_name(&src.job_id),
            pod_name(src, rank)
        )),
    })
}

/// Every line node rank `rank` printed from its pod's creation until `now` (or the job's end).
pub fn lines(src: &LogSource, rank: u32, now: DateTime<Utc>) -> Vec<LogLine> {
    let Some(t0) = src.started_at else {
        return Vec::new();
    };
    if rank >= src.ranks() || !pods_exist(src, now) {
        return Vec::new();
    }
    let end = src.ended.map(|(t, _)| t);
    let until = end.map_or(now, |e| e.min(now));
    let mut out = Vec::new();
    let mut push = |at: DateTime<Utc>, text: String| {
        if at <= until {
            out.push(LogLine { rank, at, text });
        }
    };
    let ms = |s: f64| Duration::milliseconds((s * 1000.0) as i64);
    let nodes = src.ranks();
    let per_pod = src.gpus.min(GPUS_PER_NODE);
    let world = src.gpus;
    let name = object_name(&src.job_id);
    let pod = pod_name(src, rank);
    let ip = format!(
        "10.42.{}.{}",
        rank + 1,
        10 + hash(&src.job_id, rank as u64) % 200
    );
    let first = rank * GPUS_PER_NODE;
    let last_global = first + per_pod - 1;
    push(
        t0,
        format!(
            "+ torchrun --nnodes={nodes} --nproc_per_node={per_pod} --node_rank={rank} --rdzv_backend=c10d --rdzv_endpoint={name}-node-0-0.{name}:29500 train.py"
        ),
    );
    push(
        t0 + ms(1.2),
        format!("[I torch.distributed.run] Using nproc_per_node={per_pod}."),
    );
    push(
        t0 + ms(4.8 + 0.1 * rank as f64),
        format!(
            "[I torch.distributed.elastic.agent.server.api] Rendezvous complete for workers. Result: restart_count=0 master_addr={name}-node-0-0.{name} master_port=29500 group_rank={rank} group_world_size={nodes} local_ranks=[0..{}] global_ranks=[{first}..{last_global}]",
            per_pod - 1
        ),
    );
    push(
        t0 + ms(7.3),
        format!(
            "{pod}:{}:{} [0] NCCL INFO NCCL version 2.21.5+cuda12.4",
            300 + rank,
            300 + rank
        ),
    );
    push(
        t0 + ms(7.4),
        format!(
            "{pod}:{}:{} [0] NCCL INFO Bootstrap : Using eth0:{ip}<0>",
            300 + rank,
            300 + rank
        ),
    );
    push(
        t0 + ms(7.9),
        format!(
            "{pod}:{}:{} [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [2]mlx5_2:1/IB [3]mlx5_3:1/IB ; OOB eth0:{ip}<0>",
            300 + rank,
            300 + rank
        ),
    );
    push(
        t0 + ms(11.0 + 0.2 * rank as f64),
        format!(
            "{pod}:{}:{} [0] NCCL INFO comm 0x{:x} rank {first} nranks {world} cudaDev 0 nvmlDev 0 busId 18000 - Init COMPLETE",
            300 + rank,
            300 + rank,
            hash(&src.job_id, 7) & 0xffff_ffff
        ),
    );
    if rank == 0 {
        let args: Vec<String> = src
            .params
            .iter()
            .filter(|(k, _)| !k.starts_with("sim_"))
            .map(|(k, v)| match v {
                serde_json::Value::String(s) => format!("{k}={s}"),
                other => format!("{k}={other}"),
            })
            .collect();
        push(
            t0 + ms(14.0),
            format!("[rank 0] loading {} ({})", src.template, args.join(", ")),
        );
        push(
            t0 + ms(41.5),
            format!(
                "[rank 0] model ready: FSDP over {world} GPUs ({nodes} node{}), bf16, activation checkpointing on",
                if nodes == 1 { "" } else { "s" }
            ),
        );
        push(
            t0 + ms(55.0),
            "[rank 0] dataset: 1,048,576 sequences of 4,096 tokens, global batch 512".to_string(),
        );
    }
    // Training: step lines (rank 0), collective checks (others), checkpoints (all).
    let total_steps = (src.max_runtime_s as i64 - STARTUP_S).max(STEP_LINE_EVERY_S) as u64
        / STEP_LINE_EVERY_S as u64
        * STEPS_PER_LINE;
    let base_tps = 3_050.0 * world as f64;
    let mut t = t0 + Duration::seconds(STARTUP_S);
    let mut i: u64 = 0;
    let stop = until;
    while t <= stop {
        i += 1;
        t += Duration::seconds(STEP_LINE_EVERY_S);
        // Nothing trains at or after the end: the ending's own lines are the last.
        if t > stop || end.is_some_and(|e| t >= e) {
            break;
        }
        let step = i * STEPS_PER_LINE;
        let elapsed = (t - t0).num_seconds();
        if rank == 0 {
            let loss =
                1.15 + 2.6 * (-(step as f64) / 900.0).exp() + 0.025 * noise(&src.job_id, step);
            let warm = 100.0;
            let peak = 3.0e-4;
            let lr = if (step as f64) < warm {
                peak * step as f64 / warm
            } else {
                let p = ((step as f64 - warm) / (total_steps as f64 - warm).max(1.0)).min(1.0);
                peak * 0.5 * (1.0 + (std::f64::consts::PI * p).cos())
            };
            let tps = base_tps * (1.0 + 0.02 * noise(&src.job_id, step ^ 0xabc));
            push(
                t,
                format!(
                    "[rank 0] step {step:>6}/{total_steps} | loss {loss:.4} | lr {lr:.2e} | {} tokens/s | {:.2} s/step",
                    app::format::thousands(tps as u64),
                    STEP_LINE_EVERY_S as f64 / STEPS_PER_LINE as f64 * (1.0 + 0.01 * noise(&src.job_id, step ^ 0x55))
                ),
            );
        } else if elapsed % CHECK_EVERY_S < STEP_LINE_EVERY_S {
            push(
                t,
                format!(
                    "[rank {first}] step {step}: all-reduce ok over {world} ranks, max memory allocated {:.1} GiB",
                    62.0 + 4.0 * noise(&src.job_id, rank as u64 + step)
                ),
            );
        }
        if elapsed % CHECKPOINT_EVERY_S < STEP_LINE_EVERY_S {
            if rank == 0 {
                push(
                    t + ms(0.5),
                    format!(
                        "[rank 0] saving checkpoint /checkpoints/{}/step_{step:06}",
                        src.job_id
                    ),
                );
            }
            push(
                t + ms(6.0 + 2.0 * noise(&src.job_id, rank as u64 ^ step).abs()),
                format!(
                    "[rank {first}] saved shard {rank} of {nodes} ({:.2} GiB)",
                    1.4 + 0.1 * noise(&src.job_id, step)
                ),
            );
        }
    }
    if let Some((end, state)) = src.ended {
        if end <= now {
            ending(src, rank, end, state, &mut push);
        }
    }
    // In time order (a checkpoint's last line may fall after the next step's).
    out.sort_by_key(|l| l.at);
    out
}

fn ending(
    src: &LogSource,
    rank: u32,
    end: DateTime<Utc>,
    state: JobState,
    push: &mut impl FnMut(DateTime<Utc>, String),
) {
    let at = |ms: i64| end - Duration::milliseconds(ms);
    let first = rank * GPUS_PER_NODE;
    match state {
        JobState::Succeeded => {
            if rank == 0 {
                push(
                    at(900),
                    format!(
                        "[rank 0] saving final checkpoint /checkpoints/{}/final",
                        src.job_id
                    ),
                );
                push(at(100), "[rank 0] training finished: max runtime reached, final checkpoint saved".into());
            }
            push(
                at(10),
                "[I torch.distributed.elastic.agent.server.api] [default] worker group successfully finished.".into(),
            );
        }
        JobState::Failed => {
            let bad = failing_rank(src);
            let (code, reason, words) = failing_how(src);
            if rank == bad {
                let local = src.gpus.saturating_sub(1) % GPUS_PER_NODE;
                let global = src.gpus.saturating_sub(1);
                let p = |s: &str| format!("[rank{global}]: {s}");
                push(at(1_500), p("Traceback (most recent call last):"));
                push(at(1_499), p("  File \"/workspace/train.py\", line 214, in <module>"));
                push(at(1_498), p("    main()"));
                push(at(1_497), p("  File \"/workspace/train.py\", line 187, in main"));
                push(at(1_496), p("    loss.backward()"));
                let last = match (reason, &words) {
                    ("OOMKilled", _) => "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB. GPU 7 has a total capacity of 79.11 GiB of which 1.12 GiB is free.".to_string(),
                    (_, Some(w)) => format!("RuntimeError: {w}"),
                    _ => format!(
                        "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5; CUDA error: an illegal memory access was encountered (rank {global})"
                    ),
                };
                push(at(1_495), p(&last));
                push(
                    at(400),
                    format!(
                        "[E torch.distributed.elastic.multiprocessing.api] failed (exitcode: {}) local_rank: {local} (pid: {}) of binary: /usr/bin/python3",
                        code.unwrap_or(1),
                        4_100 + local
                    ),
                );
                if reason == "OOMKilled" {
                    push(at(50), "Killed".into());
                }
            } else {
                push(
                    at(1_200),
                    format!(
                        "{}:{}:{} [0] NCCL WARN NET/IB : Got completion from peer 10.42.{}.x with error 12, opcode 0, len 0, vendor err 129 (Recv)",
                        pod_name(src, rank),
                        300 + rank,
                        300 + rank,
                        bad + 1
                    ),
                );
                push(
                    at(1_100),
                    format!("[rank{first}]: torch.distributed.DistBackendError: NCCL communicator was aborted on rank {first}: a peer (node rank {bad}) failed"),
                );
                push(
                    at(300),
                    "[W torch.distributed.elastic.agent.server.api] received SIGTERM: stopping workers (the gang failed)".into(),
                );
            }
        }
        JobState::Cancelled => push(
            at(200),
            "[W torch.distributed.elastic.agent.server.api] received SIGTERM: stopping workers (the job was cancelled)".into(),
        ),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use serde_json::json;

    fn src(
        gpus: u32,
        ended: Option<(i64, JobState)>,
        params: Vec<(&str, serde_json::Value)>,
    ) -> LogSource {
        let t0 = Utc.with_ymd_and_hms(2026, 12, 1, 9, 0, 0).unwrap();
        LogSource {
            job_id: "0193a5c2-0000-7000-8000-000000000001".into(),
            team: "nlp".into(),
            gpus,
            template: "llama-3.1-8b-fsdp".into(),
            params: params
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
            max_runtime_s: 7_200,
            started_at: Some(t0),
            ended: ended.map(|(s, st)| (t0 + Duration::seconds(s), st)),
            nodes: vec!["hgx-h100-node-01".into(), "hgx-h100-node-02".into()],
        }
    }

    fn at(s: i64) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 12, 1, 9, 0, 0).unwrap() + Duration::seconds(s)
    }

    #[test]
    fn a_running_job_logs_steps_with_a_falling_loss_and_grows_with_the_clock() {
        let s = src(16, None, vec![("epochs", json!(3))]);
        let early = lines(&s, 0, at(600));
        let later = lines(&s, 0, at(1_800));
        assert_eq!(early, later[..early.len()], "the past does not change");
        assert!(later.len() > early.len());
        assert!(early[0]
            .text
            .starts_with("+ torchrun --nnodes=2 --nproc_per_node=8 --node_rank=0"));
        assert!(early
            .iter()
            .any(|l| l.text.contains("NCCL INFO NCCL version")));
        assert!(early
            .iter()
            .any(|l| l.text.contains("loading llama-3.1-8b-fsdp (epochs=3)")));
        let losses: Vec<f64> = later
            .iter()
            .filter_map(|l| l.text.split("loss ").nth(1))
            .map(|r| r.split(' ').next().unwrap().parse().unwrap())
            .collect();
        assert!(losses.len() > 50, "{}", losses.len());
        assert!(losses.last().unwrap() < &(losses[0] - 0.5), "{losses:?}");
        assert!(later.iter().any(|l| l.text.contains("saving checkpoint")));
        assert!(
            later.windows(2).all(|w| w[0].at <= w[1].at),
            "in time order"
        );
        assert!(later.iter().all(|l| l.at <= at(1_800)));
        // rank 1 prints its own start-up and checks, not the step lines
        let r1 = lines(&s, 1, at(1_800));
        assert!(r1[0].text.contains("--node_rank=1"));
        assert!(r1.iter().any(|l| l.text.contains("global_ranks=[8..15]")));
        assert!(!r1.iter().any(|l| l.text.contains("| loss ")));
        assert!(
            lines(&s, 2, at(1_800)).is_empty(),
            "a 2-node job has ranks 0 and 1"
        );
        assert!(lines(&s, 0, at(-5)).is_empty(), "no pod before admission");
    }

    #[test]
    fn a_failed_job_ends_with_the_failing_ranks_traceback_and_its_pods_go_later() {
        let s = src(
            16,
            Some((1_260, JobState::Failed)),
            vec![
                ("sim_fail_after_s", json!(1_200)),
                ("sim_fail_reason", json!("OOMKilled")),
            ],
        );
        let bad = lines(&s, 1, at(1_300));
        let tail: Vec<&str> = bad.iter().rev().take(8).map(|l| l.text.as_str()).collect();
        assert!(
            tail.iter()
                .any(|t| t.contains("Traceback (most recent call last)")),
            "{tail:?}"
        );
        assert!(
            tail.iter().any(|t| t.contains("CUDA out of memory")),
            "{tail:?}"
        );
        assert!(tail.iter().any(|t| t.contains("exitcode: 137")), "{tail:?}");
        assert!(bad.iter().all(|l| l.at <= at(1_260)));
        assert_eq!(
            bad.last().unwrap().text,
            "Killed",
            "the ending is the last line"
        );
        let zero = lines(&s, 0, at(1_300));
        assert!(
            zero.last().unwrap().text.contains("SIGTERM"),
            "{:?}",
            zero.last()
        );
        let other = lines(&s, 0, at(1_300));
        assert!(other.iter().any(|l| l.text.contains("NCCL WARN")));
        let f = failure(&s).unwrap();
        assert_eq!(f.reason, "OOMKilled");
        assert_eq!(f.exit_code, Some(137));
        assert_eq!(f.rank, Some(1));
        assert_eq!(f.node.as_deref(), Some("hgx-h100-node-02"));
        assert!(f.pod.unwrap().ends_with("-node-1-0"));
        // the pods are deleted POD_TTL_S after the end: no more lines from the cluster
        assert!(!lines(&s, 1, at(1_260 + POD_TTL_S - 1)).is_empty());
        assert!(lines(&s, 1, at(1_260 + POD_TTL_S)).is_empty());
    }

    #[test]
    fn exit_codes_read_as_their_meaning() {
        let s = src(
            8,
            Some((600, JobState::Failed)),
            vec![
                ("sim_fail_after_s", json!(500)),
                ("sim_fail_reason", json!("exit code 139")),
            ],
        );
        let f = failure(&s).unwrap();
        assert_eq!(f.summary, "A worker exited with code 139");
        assert!(f.meaning.contains("segmentation fault"), "{}", f.meaning);
        assert_eq!(f.rank, Some(0));
        let ok = src(8, Some((600, JobState::Succeeded)), vec![]);
        assert_eq!(failure(&ok), None);
        assert!(lines(&ok, 0, at(700))
            .last()
            .unwrap()
            .text
            .contains("successfully finished"));
    }
}
