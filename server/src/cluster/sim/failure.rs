//! Failing a job on purpose, so demos and tests show failures. Two template parameters, read
//! only by the sim (the Kubernetes back end does not pass `sim_*` parameters to the container):
//!
//! - `sim_fail_after_s` (int): the job fails after this many seconds of running time, counted
//!   from when its pods start (admission + start-up); absent or 0: never. A job that reaches
//!   its max runtime first succeeds. After a preemption the count starts again, as a restarted
//!   run would.
//! - `sim_fail_reason` (string): what the failing worker did: `exit code N` (the default,
//!   `exit code 1`), `OOMKilled`, or any other words, said as they are.
//!
//! Everything follows from the stored job (its parameters and admission time), so a sim
//! rebuilt from the database fails the job at the same moment with the same sentence.

use chrono::{DateTime, Duration, Utc};

use super::WorkloadSpec;
use app::model::domain::GPUS_PER_NODE;

/// Seconds of running time after which the sim fails the job; absent or 0: never.
pub const FAIL_AFTER_PARAM: &str = "sim_fail_after_s";
/// How the failing worker ends: `exit code N`, `OOMKilled`, or words of one's own.
pub const FAIL_REASON_PARAM: &str = "sim_fail_reason";

fn param<'a>(w: &'a WorkloadSpec, name: &str) -> Option<&'a serde_json::Value> {
    w.run.params.iter().find(|(k, _)| k == name).map(|(_, v)| v)
}

/// The seconds of running time after which `w` fails; `None`: it does not.
pub fn fail_after_s(w: &WorkloadSpec) -> Option<u64> {
    let v = param(w, FAIL_AFTER_PARAM)?;
    let s = v
        .as_u64()
        .or_else(|| v.as_f64().filter(|f| *f >= 1.0).map(|f| f as u64))?;
    (s > 0).then_some(s)
}

/// When `w`, admitted at `admitted_at` with pods up after `startup`, fails; `None` if it never
/// does or reaches its max runtime first.
pub fn fails_at(
    w: &WorkloadSpec,
    admitted_at: DateTime<Utc>,
    startup: Duration,
) -> Option<DateTime<Utc>> {
    let after = fail_after_s(w)?;
    let at = admitted_at + startup + Duration::seconds(after as i64);
    let end = admitted_at + Duration::seconds(w.max_runtime_s as i64);
    (at < end).then_some(at)
}

/// The job's failure as one sentence: what the worker did, which worker on which node, and
/// after how long. Deterministic: the last rank of the gang, on its last node.
///
/// "Failed: a worker exited with code 1 (rank 15 on hgx-h100-node-02) after 10 min"
pub fn sentence(w: &WorkloadSpec, nodes: &[String]) -> String {
    let raw = param(w, FAIL_REASON_PARAM)
        .and_then(|v| v.as_str())
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .unwrap_or("exit code 1");
    let what = if let Some(code) = raw
        .strip_prefix("exit code")
        .map(str::trim)
        .filter(|c| !c.is_empty() && c.chars().all(|ch| ch.is_ascii_digit()))
    {
        format!("a worker exited with code {code}")
    } else if raw.eq_ignore_ascii_case("oomkilled") {
        "a worker ran out of memory (OOMKilled)".to_string()
    } else {
        format!("a worker failed: {raw}")
    };
    let rank = w.gpus.saturating_sub(1);
    let node = nodes
        .get((rank / GPUS_PER_NODE) as usize)
        .or(nodes.last())
        .map(|n| format!(" on {n}"))
        .unwrap_or_default();
    let after = fail_after_s(w).unwrap_or(0);
    format!(
        "Failed: {what} (rank {rank}{node}) after {}",
        app::format::duration(after as i64)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::RunSpec;
    use app::model::Priority;
    use serde_json::json;

    fn w(gpus: u32, params: &[(&str, serde_json::Value)]) -> WorkloadSpec {
        WorkloadSpec {
            job_id: "j".into(),
            team: "nlp".into(),
            pool: "hgx-h100".into(),
            gpus,
            priority: Priority::Normal,
            submitted_at: DateTime::UNIX_EPOCH,
            max_runtime_s: 3600,
            run: RunSpec {
                params: params
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.clone()))
                    .collect(),
                ..Default::default()
            },
        }
    }

    #[test]
    fn fail_time_counts_running_time_and_yields_to_the_max_runtime() {
        let t = DateTime::UNIX_EPOCH;
        let s = Duration::seconds(30);
        assert_eq!(fails_at(&w(8, &[]), t, s), None);
        assert_eq!(fails_at(&w(8, &[(FAIL_AFTER_PARAM, json!(0))]), t, s), None);
        assert_eq!(
            fails_at(&w(8, &[(FAIL_AFTER_PARAM, json!(600))]), t, s),
            Some(t + Duration::seconds(630))
        );
        assert_eq!(
            fails_at(&w(8, &[(FAIL_AFTER_PARAM, json!(3570))]), t, s),
            None,
            "the max runtime comes first"
        );
    }

    #[test]
    fn the_sentence_names_the_worker_its_node_and_the_time() {
        let nodes = vec!["hgx-h100-node-04".to_string(), "hgx-h100-node-05".into()];
        assert_eq!(
            sentence(&w(16, &[(FAIL_AFTER_PARAM, json!(600))]), &nodes),
            "Failed: a worker exited with code 1 (rank 15 on hgx-h100-node-05) after 10 min"
        );
        assert_eq!(
            sentence(
                &w(
                    4,
                    &[
                        (FAIL_AFTER_PARAM, json!(90)),
                        (FAIL_REASON_PARAM, json!("OOMKilled"))
                    ]
                ),
                &nodes[..1]
            ),
            "Failed: a worker ran out of memory (OOMKilled) (rank 3 on hgx-h100-node-04) after 1 min"
        );
        assert_eq!(
            sentence(
                &w(
                    1,
                    &[
                        (FAIL_AFTER_PARAM, json!(30)),
                        (FAIL_REASON_PARAM, json!("exit code 137"))
                    ]
                ),
                &nodes[..1]
            ),
            "Failed: a worker exited with code 137 (rank 0 on hgx-h100-node-04) after 30 s"
        );
        assert_eq!(
            sentence(
                &w(
                    1,
                    &[
                        (FAIL_AFTER_PARAM, json!(30)),
                        (FAIL_REASON_PARAM, json!("NCCL timeout"))
                    ]
                ),
                &[]
            ),
            "Failed: a worker failed: NCCL timeout (rank 0) after 30 s"
        );
    }
}
