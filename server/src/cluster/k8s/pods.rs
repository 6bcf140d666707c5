//! A job's pods: their logs (the `pods/log` subresource, with `tailLines`, `sinceSeconds` and
//! `timestamps`, read once or held open with `follow`) and why the first one failed (`containerStatuses`, pod `reason`).
//!
//! The pods of a job are those of its JobSet, found by the label the JobSet controller puts
//! on every pod, `jobset.sigs.k8s.io/jobset-name`; a Kubeflow TrainJob runs as a JobSet of
//! the same name, so the same label finds its pods. A pod's node rank is its Indexed Job
//! completion index (`batch.kubernetes.io/job-completion-index`, label or annotation); when a
//! rank has several pods (a restarted run), the newest is read.

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, LogParams};
use serde_json::Value;
use tokio::sync::mpsc;

use super::{objects, KubeCluster};
use crate::cluster::{LogQuery, LogSource, Result};
use crate::domain::logs::{interleave, select};
use app::model::domain::{exit_code_meaning, JobFailure, LogLine};

pub const JOBSET_NAME_LABEL: &str = "jobset.sigs.k8s.io/jobset-name";
pub const COMPLETION_INDEX: &str = "batch.kubernetes.io/job-completion-index";
/// The trainer container: `trainer` in Gantry's JobSets, `node` in Kubeflow Trainer's torch
/// runtimes; otherwise the pod's first container.
const CONTAINERS: [&str; 2] = ["trainer", "node"];
/// Lines a followed log holds for a reader that is behind.
const FOLLOW_BUFFER: usize = 1_024;

/// A pod of the job as read from the API server.
#[derive(Clone, Debug)]
pub struct JobPod {
    pub name: String,
    pub rank: u32,
    pub container: Option<String>,
    pub pod: Value,
}

fn rank_of(pod: &Value) -> Option<u32> {
    let meta = &pod["metadata"];
    meta["labels"][COMPLETION_INDEX]
        .as_str()
        .or_else(|| meta["annotations"][COMPLETION_INDEX].as_str())
        .and_then(|s| s.parse().ok())
}

/// The newest pod of each rank, ordered by rank.
pub fn by_rank(pods: Vec<Value>) -> Vec<JobPod> {
    let mut best: std::collections::BTreeMap<u32, Value> = Default::default();
    for p in pods {
        let Some(rank) = rank_of(&p) else { continue };
        let newer = best.get(&rank).is_none_or(|old| {
            p["metadata"]["creationTimestamp"].as_str().unwrap_or("")
                > old["metadata"]["creationTimestamp"].as_str().unwrap_or("")
        });
        if newer {
            best.insert(rank, p);
        }
    }
    best.into_iter()
        .map(|(rank, pod)| {
            let names: Vec<&str> = pod["spec"]["containers"]
                .as_array()
                .map(|cs| cs.iter().filter_map(|c| c["name"].as_str()).collect())
                .unwrap_or_default();
            let container = CONTAINERS
                .iter()
                .find(|c| names.contains(c))
                .map(|c| c.to_string())
                .or_else(|| names.first().map(|c| c.to_string()));
            JobPod {
                name: pod["metadata"]["name"].as_str().unwrap_or("").to_string(),
                rank,
                container,
                pod,
            }
        })
        .collect()
}

/// One `--timestamps` line: "2026-12-01T09:00:00.123456789Z text".
pub fn parse_line(rank: u32, line: &str) -> Option<LogLine> {
    let (at, text) = line.split_once(' ').unwrap_or((line, ""));
    let at = DateTime::parse_from_rfc3339(at).ok()?.with_timezone(&Utc);
    Some(LogLine {
        rank,
        at,
        text: text.trim_end_matches('\r').to_string(),
    })
}

/// How a pod's log is asked for: its trainer container, with stamps, the last `tail` lines
/// and those since `since` in whole seconds, one more (the exact cut is made on the stamps).
fn log_params(p: &JobPod, q: &LogQuery, follow: bool) -> LogParams {
    LogParams {
        container: p.container.clone(),
        follow,
        timestamps: true,
        tail_lines: q.tail.map(|t| t as i64),
        since_seconds: q.since.map(|s| (Utc::now() - s).num_seconds().max(0) + 1),
        ..Default::default()
    }
}

fn terminated(status: &Value) -> Option<&Value> {
    let t = &status["state"]["terminated"];
    if t.is_object() {
        return Some(t);
    }
    let t = &status["lastState"]["terminated"];
    t.is_object().then_some(t)
}

/// The first pod that failed and why, from the pods' statuses and the job object's `Failed`
/// condition message. `None` when no pod failed.
pub fn first_failure(pods: &[JobPod], condition: Option<String>) -> Option<JobFailure> {
    let mut found: Vec<(String, JobFailure)> = Vec::new();
    for p in pods {
        let status = &p.pod["status"];
        let node = p.pod["spec"]["nodeName"].as_str().map(String::from);
        // Evicted by the kubelet (node pressure): the pod's own reason, no container exit.
        if status["reason"].as_str() == Some("Evicted") {
            let msg = status["message"].as_str().unwrap_or("").to_string();
            found.push((
                String::new(),
                JobFailure {
                    summary: "A worker's pod was evicted from its node".into(),
                    exit_code: None,
                    reason: "Evicted".into(),
                    meaning: if msg.is_empty() {
                        "the kubelet evicted the pod (node pressure: memory, disk or ephemeral storage)".into()
                    } else {
                        format!("the kubelet evicted the pod: {msg}")
                    },
                    pod: Some(p.name.clone()),
                    rank: Some(p.rank),
                    node,
                    at: None,
                    condition: condition.clone(),
                },
            ));
            continue;
        }
        let statuses = status["containerStatuses"].as_array();
        for cs in statuses.into_iter().flatten() {
            let Some(t) = terminated(cs) else { continue };
            let code = t["exitCode"].as_i64().unwrap_or(0) as i32;
            if code == 0 {
                continue;
            }
            let reason = t["reason"].as_str().unwrap_or("Error").to_string();
            let finished = t["finishedAt"].as_str().unwrap_or("").to_string();
            let at = DateTime::parse_from_rfc3339(&finished)
                .ok()
                .map(|t| t.with_timezone(&Utc));
            let (summary, meaning) = if reason == "OOMKilled" {
                (
                    "A worker ran out of memory (OOMKilled)".to_string(),
                    "the container used more memory than its limit and the kernel killed it (host memory, not GPU memory)".to_string(),
                )
            } else {
                (
                    format!("A worker exited with code {code}"),
                    exit_code_meaning(code),
                )
            };
            found.push((
                finished,
                JobFailure {
                    summary,
                    exit_code: Some(code),
                    reason,
                    meaning,
                    pod: Some(p.name.clone()),
                    rank: Some(p.rank),
                    node: node.clone(),
                    at,
                    condition: condition.clone(),
                },
            ));
        }
    }
    // The earliest finish first; an eviction (no time) after any exit.
    found.sort_by(|a, b| match (a.0.is_empty(), b.0.is_empty()) {
        (false, true) => std::cmp::Ordering::Less,
        (true, false) => std::cmp::Ordering::Greater,
        _ => a.0.cmp(&b.0),
    });
    found.into_iter().next().map(|(_, f)| f)
}

impl KubeCluster {
    async fn job_pods(&self, src: &LogSource) -> Result<Vec<JobPod>> {
        let ns = objects::namespace(&self.settings, &src.team);
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &ns);
        let lp = ListParams::default().labels(&format!(
            "{JOBSET_NAME_LABEL}={}",
            objects::object_name(&src.job_id)
        ));
        let list = self.call("list pods", api.list(&lp)).await?;
        let pods = list
            .items
            .into_iter()
            .filter_map(|p| serde_json::to_value(p).ok())
            .collect();
        Ok(by_rank(pods))
    }

    pub(super) async fn read_logs(
        &self,
        src: &LogSource,
        q: &LogQuery,
    ) -> Result<Option<Vec<LogLine>>> {
        let pods = self.job_pods(src).await?;
        if pods.is_empty() {
            return Ok(None);
        }
        let ns = objects::namespace(&self.settings, &src.team);
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &ns);
        let mut per_rank = Vec::new();
        for p in pods.iter().filter(|p| q.ranks.includes(p.rank)) {
            let lp = log_params(p, q, false);
            let what = format!("read the log of pod {}", p.name);
            let text = match self.call(&what, api.logs(&p.name, &lp)).await {
                Ok(t) => t,
                // A pod still being created has no log yet: nothing to show for it.
                Err(crate::cluster::ClusterError::Unavailable(m)) if m.contains("(400)") => {
                    String::new()
                }
                Err(e) => return Err(e),
            };
            per_rank.push(
                text.lines()
                    .filter_map(|l| parse_line(p.rank, l))
                    .collect::<Vec<_>>(),
            );
        }
        Ok(Some(select(interleave(per_rank), q)))
    }

    /// Holds a `pods/log?follow=true` stream open per selected pod and sends each line as
    /// the kubelet writes it (lines of several ranks in the order they arrive). `None` when
    /// the job has no pods; the channel closes when every pod's container has ended.
    pub(super) async fn follow_pod_logs(
        &self,
        src: &LogSource,
        q: &LogQuery,
    ) -> Result<Option<mpsc::Receiver<LogLine>>> {
        let pods: Vec<JobPod> = self
            .job_pods(src)
            .await?
            .into_iter()
            .filter(|p| q.ranks.includes(p.rank))
            .collect();
        if pods.is_empty() {
            return Ok(None);
        }
        let ns = objects::namespace(&self.settings, &src.team);
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &ns);
        let (tx, rx) = mpsc::channel(FOLLOW_BUFFER);
        for p in pods {
            let lp = log_params(&p, q, true);
            // Opening is bounded by the call timeout; the stream itself is held.
            let what = format!("follow the log of pod {}", p.name);
            let reader = match self.call(&what, api.log_stream(&p.name, &lp)).await {
                Ok(r) => r,
                // A pod still being created has no log yet.
                Err(crate::cluster::ClusterError::Unavailable(m)) if m.contains("(400)") => {
                    continue
                }
                Err(e) => return Err(e),
            };
            let (tx, since, rank) = (tx.clone(), q.since, p.rank);
            tokio::spawn(async move {
                use futures::{AsyncBufReadExt, StreamExt};
                let mut lines = reader.lines();
                loop {
                    let next = tokio::select! {
                        l = lines.next() => l,
                        _ = tx.closed() => return,
                    };
                    let Some(Ok(text)) = next else { return };
                    let Some(line) = parse_line(rank, &text) else {
                        continue;
                    };
                    // `sinceSeconds` is whole seconds: the exact cut is made here.
                    if since.is_some_and(|s| line.at <= s) {
                        continue;
                    }
                    if tx.send(line).await.is_err() {
                        return;
                    }
                }
            });
        }
        Ok(Some(rx))
    }

    pub(super) async fn read_failure(&self, src: &LogSource) -> Result<Option<JobFailure>> {
        let pods = self.job_pods(src).await?;
        if pods.is_empty() {
            return Ok(None);
        }
        let condition = self.failed_condition(src).await;
        Ok(first_failure(&pods, condition))
    }

    /// The `Failed` condition message of the job's JobSet or TrainJob, when it has one.
    async fn failed_condition(&self, src: &LogSource) -> Option<String> {
        let name = objects::object_name(&src.job_id);
        let ns = objects::namespace(&self.settings, &src.team);
        for ar in [
            super::resource("jobset.x-k8s.io", "v1alpha2", "JobSet", "jobsets"),
            super::resource("trainer.kubeflow.org", "v1alpha1", "TrainJob", "trainjobs"),
        ] {
            let api: Api<kube::api::DynamicObject> =
                Api::namespaced_with(self.client.clone(), &ns, &ar);
            if let Ok(Some(o)) = self.call("get job object", api.get_opt(&name)).await {
                let v = serde_json::to_value(o).ok()?;
                return v["status"]["conditions"]
                    .as_array()?
                    .iter()
                    .find(|c| c["type"] == "Failed" && c["status"] == "True")
                    .and_then(|c| c["message"].as_str())
                    .map(String::from);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(name: &str, rank: &str, created: &str, status: Value) -> Value {
        json!({
            "metadata": {"name": name, "creationTimestamp": created,
                         "labels": {COMPLETION_INDEX: rank}},
            "spec": {"nodeName": format!("node-{rank}"),
                     "containers": [{"name": "sidecar"}, {"name": "trainer"}]},
            "status": status,
        })
    }

    #[test]
    fn the_newest_pod_of_each_rank_in_rank_order() {
        let pods = by_rank(vec![
            pod("j-node-1-0", "1", "2026-12-01T09:00:00Z", json!({})),
            pod("j-node-0-0-old", "0", "2026-12-01T08:00:00Z", json!({})),
            pod("j-node-0-0", "0", "2026-12-01T09:00:00Z", json!({})),
            json!({"metadata": {"name": "no-index"}}),
        ]);
        let names: Vec<(&str, u32)> = pods.iter().map(|p| (p.name.as_str(), p.rank)).collect();
        assert_eq!(names, [("j-node-0-0", 0), ("j-node-1-0", 1)]);
        assert_eq!(pods[0].container.as_deref(), Some("trainer"));
    }

    #[test]
    fn lines_keep_their_nanosecond_stamps() {
        let l = parse_line(3, "2026-12-01T09:00:01.123456789Z step 10 | loss 2.1\r").unwrap();
        assert_eq!(l.rank, 3);
        assert_eq!(l.text, "step 10 | loss 2.1");
        assert_eq!(l.at.timestamp_subsec_nanos(), 123_456_789);
        assert!(parse_line(0, "no stamp here").is_none());
    }

    #[test]
    fn the_first_failed_pod_is_named_with_its_exit_and_meaning() {
        let exited = |code: i64, reason: &str, at: &str| {
            json!({"containerStatuses": [{"name": "trainer", "state": {"terminated":
                {"exitCode": code, "reason": reason, "finishedAt": at}}}]})
        };
        let pods = by_rank(vec![
            pod(
                "j-node-0-0",
                "0",
                "t",
                exited(143, "Error", "2026-12-01T09:10:05Z"),
            ),
            pod(
                "j-node-1-0",
                "1",
                "t",
                exited(137, "OOMKilled", "2026-12-01T09:10:00Z"),
            ),
            pod(
                "j-node-2-0",
                "2",
                "t",
                exited(0, "Completed", "2026-12-01T09:09:00Z"),
            ),
        ]);
        let f = first_failure(&pods, Some("jobset failed".into())).unwrap();
        assert_eq!(f.reason, "OOMKilled");
        assert_eq!(f.exit_code, Some(137));
        assert_eq!(f.rank, Some(1));
        assert_eq!(f.node.as_deref(), Some("node-1"));
        assert_eq!(f.condition.as_deref(), Some("jobset failed"));
        assert!(f.meaning.contains("memory"));

        // lastState counts too (a restarted container), and an eviction has no exit code
        let evicted = by_rank(vec![pod(
            "j-node-0-0",
            "0",
            "t",
            json!({"reason": "Evicted", "message": "The node was low on resource: memory."}),
        )]);
        let f = first_failure(&evicted, None).unwrap();
        assert_eq!(f.reason, "Evicted");
        assert_eq!(f.exit_code, None);
        assert!(f.meaning.contains("low on resource"));
        let restarted = by_rank(vec![pod(
            "j-node-0-0",
            "0",
            "t",
            json!({"containerStatuses": [{"name": "trainer", "state": {"running": {}},
                   "lastState": {"terminated": {"exitCode": 1, "reason": "Error", "finishedAt": "2026-12-01T09:00:00Z"}}}]}),
        )]);
        let f = first_failure(&restarted, None).unwrap();
        assert_eq!(f.exit_code, Some(1));
        assert!(f.meaning.contains("exception"));
        assert!(first_failure(&by_rank(vec![pod("p", "0", "t", json!({}))]), None).is_none());
    }
}
