//! A test-only Kubernetes API server double, in process over real HTTP: the subset Gantry
//! uses (server-side apply, get, list, watch from a resourceVersion, delete, Kueue's
//! LocalQueue visibility endpoint).
//!
//! It decides nothing. Kueue's part is scripted by the test: [`ApiServer::admit`],
//! [`ApiServer::preempt`], [`ApiServer::pend`], [`ApiServer::finish`] write a Workload's
//! conditions as Kueue would (`QuotaReserved`, `Admitted`, `PodsReady`, `Evicted`,
//! `Preempted`, `Finished`, each with its `lastTransitionTime`), so a test states what Kueue
//! did and checks that Gantry shows exactly that. The only thing it computes is what Kueue's
//! API computes without deciding: the visibility endpoint lists a LocalQueue's pending
//! Workloads in the order of a BestEffortFIFO ClusterQueue (priority, higher first, from the
//! Workload's `WorkloadPriorityClass`; then creation time).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Router;
use chrono::{DateTime, Utc};
use serde_json::{json, Value};
use tokio::sync::broadcast;

#[derive(Default)]
struct Store {
    rv: u64,
    /// "plural/namespace/name" → object.
    objects: BTreeMap<String, Value>,
    /// Every change, for watches that start from an older resourceVersion.
    log: Vec<(u64, String, &'static str, Value)>,
    /// Every request, as "METHOD path", for assertions.
    requests: Vec<String>,
    /// "namespace/pod" → its container's lines, as the kubelet would serve them.
    pod_logs: BTreeMap<String, Vec<(DateTime<Utc>, String)>>,
    /// Whether reading a pod's log is forbidden (RBAC), as [`ApiServer::forbid_logs`] set.
    logs_forbidden: bool,
    /// Plural → how long a list of it takes to answer, as [`ApiServer::delay_lists`] set.
    list_delays: BTreeMap<String, Duration>,
    /// Plurals this server does not serve (their CRD is not installed), as
    /// [`ApiServer::unserve`] set: 404 to every request.
    unserved: Vec<String>,
}

/// A line written to a pod's log ("namespace/pod", the line), or `None` when the pod's
/// container ended (a followed log ends).
type LogWrite = (String, Option<(DateTime<Utc>, String)>);

pub struct ApiServer {
    store: Mutex<Store>,
    events: broadcast::Sender<(u64, String, &'static str, Value)>,
    log_writes: broadcast::Sender<LogWrite>,
    pub addr: SocketAddr,
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

fn key(plural: &str, ns: &str, name: &str) -> String {
    format!("{plural}/{ns}/{name}")
}

fn condition(kind: &str, ok: bool, reason: &str, message: &str) -> Value {
    json!({"type": kind, "status": if ok { "True" } else { "False" }, "reason": reason,
           "message": message, "lastTransitionTime": Utc::now().to_rfc3339()})
}

/// The Workload conditions Kueue writes when it preempts a workload, with the `Preempted`
/// reason it gives (`InClusterQueue`, `InCohortReclamation`, ...).
fn preempted_conditions(kueue_reason: &str) -> Vec<Value> {
    vec![
        condition(
            "Admitted",
            false,
            "NoReservation",
            "The workload has no reservation",
        ),
        condition("PodsReady", false, "Evicted", ""),
        condition(
            "Evicted",
            true,
            "Preempted",
            "Preempted to accommodate a workload",
        ),
        condition(
            "Preempted",
            true,
            kueue_reason,
            "Preempted to accommodate a workload",
        ),
        condition(
            "QuotaReserved",
            false,
            "Pending",
            "Preempted; waiting for quota",
        ),
    ]
}

impl ApiServer {
    /// Starts on a free loopback port, with Gantry's `WorkloadPriorityClass`es installed (as
    /// `gantry kube render` writes them for the cluster's admin).
    pub async fn start() -> Arc<ApiServer> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (events, _) = broadcast::channel(4096);
        let me = Arc::new(ApiServer {
            store: Mutex::new(Store::default()),
            events,
            log_writes: broadcast::channel(4096).0,
            addr,
            task: Mutex::new(None),
        });
        {
            let mut s = me.store.lock().unwrap();
            for p in app::model::Priority::ALL {
                let wpc = gantry::cluster::k8s::objects::priority_class(p);
                let name = wpc["metadata"]["name"].as_str().unwrap().to_string();
                me.put(
                    &mut s,
                    &key("workloadpriorityclasses", "", &name),
                    wpc,
                    "ADDED",
                );
            }
        }
        me.serve(listener);
        me
    }

    fn serve(self: &Arc<Self>, listener: tokio::net::TcpListener) {
        let app = Router::new().fallback(handle).with_state(self.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        *self.task.lock().unwrap() = Some(task);
    }

    /// Reading a pod's log is forbidden (`true`) as RBAC would answer, or allowed again.
    pub fn forbid_logs(&self, forbidden: bool) {
        self.store.lock().unwrap().logs_forbidden = forbidden;
    }

    /// The API server goes away (connections refused) until [`ApiServer::up`].
    pub fn down(&self) {
        if let Some(t) = self.task.lock().unwrap().take() {
            t.abort();
        }
    }

    pub async fn up(self: &Arc<Self>) {
        let listener = tokio::net::TcpListener::bind(self.addr).await.unwrap();
        self.serve(listener);
    }

    /// A kubeconfig file for this server.
    pub fn kubeconfig(&self, dir: &std::path::Path) -> std::path::PathBuf {
        let path = dir.join("kubeconfig");
        std::fs::write(
            &path,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: double\n  cluster:\n    server: http://{}\ncontexts:\n- name: double\n  context:\n    cluster: double\n    user: gantry\ncurrent-context: double\nusers:\n- name: gantry\n  user:\n    token: test\n",
                self.addr
            ),
        )
        .unwrap();
        path
    }

    pub fn requests(&self) -> Vec<String> {
        self.store.lock().unwrap().requests.clone()
    }

    pub fn objects(&self, plural: &str) -> Vec<Value> {
        let s = self.store.lock().unwrap();
        s.objects
            .iter()
            .filter(|(k, _)| k.starts_with(&format!("{plural}/")))
            .map(|(_, v)| v.clone())
            .collect()
    }

    /// The scripted end of a job: its Workload gets `Finished`.
    pub fn finish(&self, job_id: &str, succeeded: bool) {
        self.finish_at(job_id, succeeded, Utc::now());
    }

    /// The end of a job as Kueue recorded it at `at` (in the past: it happened while Gantry
    /// was not watching).
    pub fn finish_at(&self, job_id: &str, succeeded: bool, at: chrono::DateTime<Utc>) {
        let mut s = self.store.lock().unwrap();
        let Some(k) = workload_key_of(&s, job_id) else {
            panic!("no workload for job {job_id}");
        };
        let mut w = s.objects[&k].clone();
        let mut finished = condition(
            "Finished",
            true,
            if succeeded { "Succeeded" } else { "Failed" },
            if succeeded {
                "Job finished successfully"
            } else {
                "Job failed: BackoffLimitExceeded"
            },
        );
        finished["lastTransitionTime"] = json!(at.to_rfc3339());
        set_conditions(&mut w, &[finished]);
        self.put(&mut s, &k, w, "MODIFIED");
    }

    /// A list of `plural` answers after `delay` (a slow API server, or a large list): the
    /// watches of different kinds complete their first lists at different times.
    pub fn delay_lists(&self, plural: &str, delay: Duration) {
        self.store
            .lock()
            .unwrap()
            .list_delays
            .insert(plural.to_string(), delay);
    }

    /// The API server no longer serves `plural` (say `trainjobs`: Kubeflow Trainer is not
    /// installed): every request for it gets the 404 Kubernetes gives for an unknown resource.
    pub fn unserve(&self, plural: &str) {
        self.store.lock().unwrap().unserved.push(plural.to_string());
    }

    /// The JobSet controller's verdict on a job's JobSet at `at`: all its jobs completed
    /// (`terminalState` and the `Completed` condition, with the controller's reason and
    /// message), or it failed (`Failed`, reaching its max restarts).
    pub fn end_job_object(&self, job_id: &str, succeeded: bool, at: DateTime<Utc>) {
        let mut s = self.store.lock().unwrap();
        let k = s
            .objects
            .iter()
            .find(|(k, v)| {
                k.starts_with("jobsets/") && v["metadata"]["labels"]["gantry.dev/job-id"] == job_id
            })
            .map(|(k, _)| k.clone())
            .unwrap_or_else(|| panic!("no JobSet for job {job_id}"));
        let mut o = s.objects[&k].clone();
        let (state, reason, message) = if succeeded {
            (
                "Completed",
                "AllJobsCompleted",
                "jobset completed successfully",
            )
        } else {
            (
                "Failed",
                "FailedJobs",
                "jobset failed due to reaching max restarts",
            )
        };
        o["status"] = json!({"terminalState": state, "conditions": [
            {"type": state, "status": "True", "reason": reason, "message": message,
             "lastTransitionTime": at.to_rfc3339()}]});
        self.put(&mut s, &k, o, "MODIFIED");
    }

    /// Kueue deletes a job's finished Workload, as its `objectRetentionPolicies`
    /// (`workloads.afterFinished`, Kueue 0.12 and later) do; the JobSet stays.
    pub fn collect_workload(&self, job_id: &str) {
        let mut s = self.store.lock().unwrap();
        let k = workload_key_of(&s, job_id).unwrap_or_else(|| panic!("no workload for {job_id}"));
        assert!(has_true(&s.objects[&k], "Finished"), "only finished ones");
        self.remove(&mut s, &k);
    }

    /// The key of a job's Workload, once Gantry's job object has reached the API server
    /// (waits up to 20 s: a launch may be sent by Gantry's resender a little later).
    async fn workload_key(&self, job_id: &str) -> String {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(k) = workload_key_of(&self.store.lock().unwrap(), job_id) {
                return k;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no workload for job {job_id}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Writes Kueue's conditions on a job's Workload.
    async fn script(&self, job_id: &str, edit: impl FnOnce(&mut Value)) {
        let k = self.workload_key(job_id).await;
        let mut s = self.store.lock().unwrap();
        let mut w = s.objects[&k].clone();
        edit(&mut w);
        self.put(&mut s, &k, w, "MODIFIED");
    }

    /// An admission check rejects the job's Workload while it waits: Kueue finishes it with
    /// reason `AdmissionChecksRejected`; it never held quota.
    pub async fn reject(&self, job_id: &str, message: &str) {
        self.script(job_id, |w| {
            set_conditions(
                w,
                &[condition(
                    "Finished",
                    true,
                    "AdmissionChecksRejected",
                    message,
                )],
            )
        })
        .await;
    }

    /// Kueue admits the job's Workload: quota reserved, admitted, its pods ready. Without
    /// Topology Aware Scheduling Kueue names no nodes.
    pub async fn admit(&self, job_id: &str) {
        self.admit_on(job_id, &[]).await;
    }

    /// Kueue admits the job's Workload with Topology Aware Scheduling, on `nodes` (written
    /// as `status.admission.podSetAssignments[].topologyAssignment` at hostname level).
    pub async fn admit_on(&self, job_id: &str, nodes: &[&str]) {
        let nodes: Vec<String> = nodes.iter().map(|n| n.to_string()).collect();
        self.script(job_id, move |w| {
            set_conditions(
                w,
                &[
                    condition(
                        "QuotaReserved",
                        true,
                        "QuotaReserved",
                        "Quota reserved in ClusterQueue",
                    ),
                    condition("Admitted", true, "Admitted", "The workload is admitted"),
                    condition("PodsReady", true, "PodsReady", "All pods reached readiness"),
                    condition("Evicted", false, "Admitted", ""),
                    condition("Preempted", false, "Admitted", ""),
                ],
            );
            let cq = format!(
                "{}-{}",
                w["metadata"]["namespace"]
                    .as_str()
                    .unwrap_or_default()
                    .trim_start_matches("team-"),
                w["spec"]["queueName"].as_str().unwrap_or_default()
            );
            let mut psa = json!({"name": "node", "count": w["spec"]["podSets"][0]["count"]});
            if !nodes.is_empty() {
                psa["topologyAssignment"] = json!({
                    "levels": ["kubernetes.io/hostname"],
                    "domains": nodes.iter().map(|n| json!({"values": [n], "count": 1})).collect::<Vec<_>>(),
                });
            }
            w["status"]["admission"] = json!({"clusterQueue": cq, "podSetAssignments": [psa]});
        })
        .await;
    }

    /// Kueue preempts the job's Workload: evicted, `Preempted` with `kueue_reason`
    /// (`InClusterQueue`, `InCohortReclamation`, `InCohortReclaimWhileBorrowing`,
    /// `InCohortFairSharing`), its quota released; it is requeued.
    pub async fn preempt(&self, job_id: &str, kueue_reason: &str) {
        let conditions = preempted_conditions(kueue_reason);
        self.script(job_id, move |w| {
            // Kueue (0.9 and later) adds the admission's whole seconds to the workload's
            // count as `Admitted` turns false (SyncAdmittedCondition).
            let admitted = w["status"]["conditions"].as_array().and_then(|cs| {
                cs.iter()
                    .find(|c| c["type"] == "Admitted" && c["status"] == "True")
                    .and_then(|c| c["lastTransitionTime"].as_str())
                    .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
            });
            if let Some(since) = admitted {
                let d = (Utc::now() - since.to_utc()).num_seconds();
                let past = w["status"]["accumulatedPastExecutionTimeSeconds"]
                    .as_i64()
                    .unwrap_or(0);
                w["status"]["accumulatedPastExecutionTimeSeconds"] = json!(past + d);
            }
            set_conditions(w, &conditions);
            if let Some(st) = w["status"].as_object_mut() {
                st.remove("admission");
            }
        })
        .await;
    }

    /// Kueue deactivates the job's Workload at its max runtime (KEP-3125) and leaves it so:
    /// `spec.active: false`, evicted with reason `DeactivatedDueToMaximumExecutionTimeExceeded`,
    /// its quota released at `released` (`Admitted` false since then, so no condition says
    /// when it was admitted), and the run since `admitted` added in whole seconds to its
    /// count, `accumulatedPastExecutionTimeSeconds` (SyncAdmittedCondition). Both times in the
    /// past: it ran while Gantry was not watching.
    pub async fn deactivate_at_max_runtime(
        &self,
        job_id: &str,
        admitted: DateTime<Utc>,
        released: DateTime<Utc>,
    ) {
        self.script(job_id, move |w| {
            let at = |mut c: Value, t: DateTime<Utc>| {
                c["lastTransitionTime"] = json!(t.to_rfc3339());
                c
            };
            let reason = "DeactivatedDueToMaximumExecutionTimeExceeded";
            set_conditions(
                w,
                &[
                    at(
                        condition(
                            "DeactivationTarget",
                            true,
                            "MaximumExecutionTimeExceeded",
                            "exceeding the maximum execution time",
                        ),
                        released - chrono::Duration::seconds(1),
                    ),
                    at(
                        condition(
                            "Evicted",
                            true,
                            reason,
                            "The workload is deactivated due to exceeding the maximum execution time",
                        ),
                        released,
                    ),
                    at(
                        condition("QuotaReserved", false, "Pending", "The workload is deactivated"),
                        released,
                    ),
                    at(
                        condition(
                            "Admitted",
                            false,
                            "NoReservation",
                            "The workload has no reservation",
                        ),
                        released,
                    ),
                    at(condition("Requeued", false, reason, ""), released),
                ],
            );
            w["spec"]["active"] = json!(false);
            let past = w["status"]["accumulatedPastExecutionTimeSeconds"]
                .as_i64()
                .unwrap_or(0);
            w["status"]["accumulatedPastExecutionTimeSeconds"] =
                json!(past + (released - admitted).num_seconds());
            if let Some(st) = w["status"].as_object_mut() {
                st.remove("admission");
            }
        })
        .await;
    }

    /// Kueue tried the job's Workload and could not reserve quota: `QuotaReserved=False`,
    /// reason `Pending`, with Kueue's `message`.
    pub async fn pend(&self, job_id: &str, message: &str) {
        let c = condition("QuotaReserved", false, "Pending", message);
        self.script(job_id, move |w| set_conditions(w, &[c])).await;
    }

    fn put(&self, s: &mut Store, k: &str, mut obj: Value, kind: &'static str) {
        s.rv += 1;
        obj["metadata"]["resourceVersion"] = json!(s.rv.to_string());
        let plural = k.split('/').next().unwrap().to_string();
        s.objects.insert(k.to_string(), obj.clone());
        s.log.push((s.rv, plural.clone(), kind, obj.clone()));
        let _ = self.events.send((s.rv, plural, kind, obj));
    }

    fn remove(&self, s: &mut Store, k: &str) -> Option<Value> {
        let mut obj = s.objects.remove(k)?;
        s.rv += 1;
        obj["metadata"]["resourceVersion"] = json!(s.rv.to_string());
        let plural = k.split('/').next().unwrap().to_string();
        s.log.push((s.rv, plural.clone(), "DELETED", obj.clone()));
        let _ = self.events.send((s.rv, plural, "DELETED", obj.clone()));
        Some(obj)
    }
}

fn workload_key_of(s: &Store, job_id: &str) -> Option<String> {
    s.objects
        .iter()
        .find(|(k, v)| {
            k.starts_with("workloads/") && v["metadata"]["labels"]["test/job-id"] == job_id
        })
        .map(|(k, _)| k.clone())
}

/// Sets conditions as the API conventions say: a condition whose status does not change
/// keeps its `lastTransitionTime`.
/// A query parameter's decoded value.
fn param(query: &str, name: &str) -> Option<String> {
    url::form_urlencoded::parse(query.as_bytes())
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned())
}

fn core_pods(me: &ApiServer, ns: &str, rest: &[&str], query: &str) -> Response {
    let mut s = me.store.lock().unwrap();
    match rest {
        [] => {
            // `labelSelector=k=v[,k=v]`: equality only, as Gantry asks.
            let selector = param(query, "labelSelector").unwrap_or_default();
            let wanted: Vec<(&str, &str)> = selector
                .split(',')
                .filter_map(|kv| kv.split_once('='))
                .collect();
            let items: Vec<Value> = s
                .objects
                .iter()
                .filter(|(k, _)| k.starts_with(&format!("pods/{ns}/")))
                .map(|(_, v)| v)
                .filter(|p| {
                    wanted
                        .iter()
                        .all(|(k, v)| p["metadata"]["labels"][*k] == *v)
                })
                .cloned()
                .collect();
            reply(
                StatusCode::OK,
                json!({"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": s.rv.to_string()}, "items": items}),
            )
        }
        [name, "log"] if s.logs_forbidden => reply(
            StatusCode::FORBIDDEN,
            json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Forbidden", "code": 403,
                   "message": format!("pods \"{name}\" is forbidden: User \"system:serviceaccount:gantry:gantry\" cannot get resource \"pods/log\" in API group \"\" in the namespace \"{ns}\"")}),
        ),
        [name, "log"] => {
            let Some(lines) = s.pod_logs.get(&format!("{ns}/{name}")) else {
                return not_found(name);
            };
            let stamps = param(query, "timestamps").as_deref() == Some("true");
            let since = param(query, "sinceSeconds")
                .and_then(|v| v.parse::<i64>().ok())
                .map(|secs| Utc::now() - chrono::Duration::seconds(secs));
            let mut out: Vec<String> = lines
                .iter()
                .filter(|(at, _)| since.is_none_or(|s| *at >= s))
                .map(|(at, text)| {
                    if stamps {
                        format!(
                            "{} {text}",
                            at.to_rfc3339_opts(chrono::SecondsFormat::Nanos, true)
                        )
                    } else {
                        text.clone()
                    }
                })
                .collect();
            if let Some(n) = param(query, "tailLines").and_then(|v| v.parse::<usize>().ok()) {
                let cut = out.len().saturating_sub(n);
                out.drain(..cut);
            }
            // `follow=true`: the lines so far, then each line as it is written, until the
            // container ends (the kubelet holds the response open the same way).
            let running = s.objects.get(&key("pods", ns, name)).is_some_and(|p| {
                !matches!(p["status"]["phase"].as_str(), Some("Failed" | "Succeeded"))
            });
            if running && param(query, "follow").as_deref() == Some("true") {
                let pod_key = format!("{ns}/{name}");
                s.requests
                    .push(format!("FOLLOW /api/v1/namespaces/{ns}/pods/{name}/log"));
                let writes = me.log_writes.subscribe();
                drop(s);
                let past = futures::stream::iter(
                    out.into_iter()
                        .map(|l| Ok::<_, std::io::Error>(Bytes::from(format!("{l}\n")))),
                );
                let later = futures::stream::unfold(
                    (writes, pod_key, stamps),
                    |(mut writes, pod_key, stamps)| async move {
                        loop {
                            match writes.recv().await {
                                Ok((k, Some((at, text)))) if k == pod_key => {
                                    let line = if stamps {
                                        format!(
                                            "{} {text}\n",
                                            at.to_rfc3339_opts(chrono::SecondsFormat::Nanos, true)
                                        )
                                    } else {
                                        format!("{text}\n")
                                    };
                                    return Some((
                                        Ok(Bytes::from(line)),
                                        (writes, pod_key, stamps),
                                    ));
                                }
                                Ok((k, None)) if k == pod_key || k.is_empty() => return None,
                                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => continue,
                                Err(broadcast::error::RecvError::Closed) => return None,
                            }
                        }
                    },
                );
                return Response::builder()
                    .status(StatusCode::OK)
                    .header("content-type", "text/plain")
                    .body(Body::from_stream(futures::StreamExt::chain(past, later)))
                    .unwrap();
            }
            let mut body = out.join("\n");
            if !body.is_empty() {
                body.push('\n');
            }
            Response::builder()
                .status(StatusCode::OK)
                .header("content-type", "text/plain")
                .body(Body::from(body))
                .unwrap()
        }
        _ => not_found(&rest.join("/")),
    }
}

impl ApiServer {
    /// A pod as the JobSet controller and the kubelet leave it, with its log lines.
    pub fn add_pod(&self, ns: &str, pod: Value, lines: Vec<(DateTime<Utc>, String)>) {
        let name = pod["metadata"]["name"].as_str().unwrap().to_string();
        let mut s = self.store.lock().unwrap();
        let ended = pod["status"]["phase"] == "Failed" || pod["status"]["phase"] == "Succeeded";
        s.objects.insert(key("pods", ns, &name), pod);
        s.pod_logs.insert(format!("{ns}/{name}"), lines);
        if ended {
            // Its container ended: a followed log of it ends.
            let _ = self.log_writes.send((format!("{ns}/{name}"), None));
        }
    }

    /// A pod's container writes a line: read logs show it, followed logs get it now.
    pub fn write_log(&self, ns: &str, pod: &str, at: DateTime<Utc>, text: &str) {
        let k = format!("{ns}/{pod}");
        let mut s = self.store.lock().unwrap();
        s.pod_logs
            .entry(k.clone())
            .or_default()
            .push((at, text.to_string()));
        let _ = self.log_writes.send((k, Some((at, text.to_string()))));
    }

    /// Deletes every pod (as a JobSet's TTL after it finished would).
    pub fn delete_pods(&self) {
        let mut s = self.store.lock().unwrap();
        s.objects.retain(|k, _| !k.starts_with("pods/"));
        s.pod_logs.clear();
        let _ = self.log_writes.send((String::new(), None));
    }

    /// Sets a job object's status (its `Failed` condition, say).
    pub fn set_status(&self, plural: &str, ns: &str, name: &str, status: Value) {
        let mut s = self.store.lock().unwrap();
        if let Some(o) = s.objects.get_mut(&key(plural, ns, name)) {
            o["status"] = status;
        }
    }
}

fn set_conditions(w: &mut Value, new: &[Value]) {
    let mut cs: Vec<Value> = w["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for c in new {
        let mut c = c.clone();
        if let Some(old) = cs.iter().find(|x| x["type"] == c["type"]) {
            if old["status"] == c["status"] {
                c["lastTransitionTime"] = old["lastTransitionTime"].clone();
            }
        }
        cs.retain(|x| x["type"] != c["type"]);
        cs.push(c);
    }
    w["status"]["conditions"] = json!(cs);
}

fn has_true(w: &Value, kind: &str) -> bool {
    w["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == kind && c["status"] == "True")
    })
}

fn created(w: &Value) -> DateTime<Utc> {
    w["metadata"]["creationTimestamp"]
        .as_str()
        .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
        .map(|t| t.to_utc())
        .unwrap_or_default()
}

fn reply(status: StatusCode, body: Value) -> Response {
    (
        status,
        [("content-type", "application/json")],
        body.to_string(),
    )
        .into_response()
}

fn not_found(what: &str) -> Response {
    reply(
        StatusCode::NOT_FOUND,
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404, "message": format!("{what} not found")}),
    )
}

async fn handle(
    State(me): State<Arc<ApiServer>>,
    method: Method,
    uri: Uri,
    body: Bytes,
) -> Response {
    let path = uri.path().to_string();
    let query = uri.query().unwrap_or_default().to_string();
    me.store
        .lock()
        .unwrap()
        .requests
        .push(format!("{method} {path}"));
    let segs: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    // The core group: a namespace's pods (list, with a label selector) and a pod's log.
    if let ["api", "v1", "namespaces", ns, "pods", rest @ ..] = segs.as_slice() {
        return core_pods(&me, ns, rest, &query);
    }
    if segs.first() != Some(&"apis") || segs.len() < 4 {
        return not_found(&path);
    }
    let (group, version) = (segs[1], segs[2]);
    let rest = &segs[3..];
    let (ns, plural, name, sub) = if rest[0] == "namespaces" && rest.len() >= 3 {
        (rest[1], rest[2], rest.get(3).copied(), rest.get(4).copied())
    } else {
        ("", rest[0], rest.get(1).copied(), rest.get(2).copied())
    };

    if me
        .store
        .lock()
        .unwrap()
        .unserved
        .iter()
        .any(|p| p == plural)
    {
        return not_found(&path);
    }
    if group == "visibility.kueue.x-k8s.io"
        && plural == "localqueues"
        && sub == Some("pendingworkloads")
    {
        let lq = name.unwrap_or_default();
        let s = me.store.lock().unwrap();
        // Kueue's pending workloads of this LocalQueue: not holding quota, not finished;
        // in a BestEffortFIFO ClusterQueue's order (priority, higher first, then creation
        // time). Each team's LocalQueue feeds its own ClusterQueue, so both positions agree.
        let mut pending: Vec<&Value> = s
            .objects
            .iter()
            .filter(|(k, _)| k.starts_with(&format!("workloads/{ns}/")))
            .map(|(_, w)| w)
            .filter(|w| w["spec"]["queueName"] == lq)
            .filter(|w| !has_true(w, "QuotaReserved") && !has_true(w, "Finished"))
            .collect();
        pending.sort_by_key(|w| {
            (
                std::cmp::Reverse(w["spec"]["priority"].as_i64().unwrap_or(0)),
                created(w),
            )
        });
        let items: Vec<Value> = pending
            .iter()
            .enumerate()
            .map(|(i, w)| {
                json!({"metadata": w["metadata"], "priority": w["spec"]["priority"],
                       "localQueueName": lq,
                       "positionInClusterQueue": i, "positionInLocalQueue": i})
            })
            .collect();
        return reply(
            StatusCode::OK,
            json!({"kind": "PendingWorkloadsSummary", "items": items}),
        );
    }

    match (method.clone(), name) {
        (Method::PATCH, Some(name)) => {
            let mut obj: Value = serde_json::from_slice(&body).unwrap();
            let mut s = me.store.lock().unwrap();
            let k = key(plural, ns, name);
            let created = !s.objects.contains_key(&k);
            if let Some(old) = s.objects.get(&k) {
                // server-side apply, simplified: the applied fields replace, status stays
                obj["status"] = old["status"].clone();
                obj["metadata"]["uid"] = old["metadata"]["uid"].clone();
                obj["metadata"]["creationTimestamp"] = old["metadata"]["creationTimestamp"].clone();
            } else {
                obj["metadata"]["uid"] = json!(uuid::Uuid::new_v4().to_string());
                obj["metadata"]["creationTimestamp"] = json!(Utc::now().to_rfc3339());
            }
            me.put(
                &mut s,
                &k,
                obj.clone(),
                if created { "ADDED" } else { "MODIFIED" },
            );
            if created && (plural == "jobsets" || plural == "trainjobs") {
                // Kueue's job integration: a Workload owned by the job object
                let labels = &obj["metadata"]["labels"];
                let job_id = labels["gantry.dev/job-id"].as_str().unwrap().to_string();
                let pool = labels["kueue.x-k8s.io/queue-name"]
                    .as_str()
                    .unwrap()
                    .to_string();
                let prio = labels["kueue.x-k8s.io/priority-class"]
                    .as_str()
                    .unwrap()
                    .to_string();
                let max: u64 = labels["kueue.x-k8s.io/max-exec-time-seconds"]
                    .as_str()
                    .unwrap()
                    .parse()
                    .unwrap();
                let (count, per) = if plural == "jobsets" {
                    let spec = &obj["spec"]["replicatedJobs"][0]["template"]["spec"];
                    (
                        spec["parallelism"].as_u64().unwrap(),
                        spec["template"]["spec"]["containers"][0]["resources"]["requests"]
                            ["nvidia.com/gpu"]
                            .as_u64()
                            .unwrap(),
                    )
                } else {
                    let t = &obj["spec"]["trainer"];
                    (
                        t["numNodes"].as_u64().unwrap(),
                        t["resourcesPerNode"]["requests"]["nvidia.com/gpu"]
                            .as_u64()
                            .unwrap(),
                    )
                };
                let wname = format!("{}-{name}", plural.trim_end_matches('s'));
                // Kueue resolves the priority class to its value, as the Workload's priority.
                let priority = s
                    .objects
                    .get(&key("workloadpriorityclasses", "", &prio))
                    .and_then(|c| c["value"].as_i64())
                    .unwrap_or(0);
                let workload = json!({
                    "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
                    "metadata": {"name": wname, "namespace": ns, "creationTimestamp": Utc::now().to_rfc3339(),
                                 "labels": {"test/job-id": job_id},
                                 "ownerReferences": [{"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": name, "uid": obj["metadata"]["uid"]}]},
                    "spec": {"queueName": pool, "maximumExecutionTimeSeconds": max, "priority": priority,
                             "priorityClassRef": {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": prio},
                             "podSets": [{"name": "node", "count": count, "template": {"spec": {"containers": [{"name": "trainer", "resources": {"requests": {"nvidia.com/gpu": per.to_string()}}}]}}}]},
                    // Kueue has not looked at it yet: no conditions until its scheduler does
                    "status": {}
                });
                let wk = key("workloads", ns, &wname);
                me.put(&mut s, &wk, workload, "ADDED");
            }
            reply(
                if created {
                    StatusCode::CREATED
                } else {
                    StatusCode::OK
                },
                s.objects[&k].clone(),
            )
        }
        (Method::DELETE, Some(name)) => {
            let mut s = me.store.lock().unwrap();
            let k = key(plural, ns, name);
            let Some(obj) = me.remove(&mut s, &k) else {
                return not_found(name);
            };
            if plural == "jobsets" || plural == "trainjobs" {
                // foreground deletion takes the owned Workload with it
                if let Some(job_id) = obj["metadata"]["labels"]["gantry.dev/job-id"].as_str() {
                    if let Some(wk) = workload_key_of(&s, job_id) {
                        me.remove(&mut s, &wk);
                    }
                }
            }
            reply(
                StatusCode::OK,
                json!({"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 200}),
            )
        }
        (Method::GET, Some(name)) => {
            let s = me.store.lock().unwrap();
            match s.objects.get(&key(plural, ns, name)) {
                Some(o) => reply(StatusCode::OK, o.clone()),
                None => not_found(name),
            }
        }
        (Method::GET, None) if query.contains("watch=true") || query.contains("watch=1") => {
            let from: u64 = query
                .split('&')
                .find_map(|kv| kv.strip_prefix("resourceVersion="))
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            let (backlog, rx) = {
                let s = me.store.lock().unwrap();
                let rx = me.events.subscribe();
                let backlog: Vec<(u64, String, &'static str, Value)> = s
                    .log
                    .iter()
                    .filter(|e| e.0 > from && e.1 == plural)
                    .cloned()
                    .collect();
                (backlog, rx)
            };
            let plural = plural.to_string();
            let line = |kind: &str, obj: &Value| {
                let mut v = serde_json::to_vec(&json!({"type": kind, "object": obj})).unwrap();
                v.push(b'\n');
                Ok::<_, std::convert::Infallible>(Bytes::from(v))
            };
            let first = futures::stream::iter(backlog.into_iter().map(move |e| line(e.2, &e.3)));
            let last_sent = from;
            let rest = futures::stream::unfold(
                (rx, plural, last_sent),
                move |(mut rx, plural, last)| async move {
                    loop {
                        match rx.recv().await {
                            Ok((rv, p, kind, obj)) if p == plural && rv > last => {
                                return Some((line(kind, &obj), (rx, plural, rv)));
                            }
                            Ok(_) => continue,
                            Err(broadcast::error::RecvError::Lagged(_)) => continue,
                            Err(_) => return None,
                        }
                    }
                },
            );
            let body = Body::from_stream(futures::StreamExt::chain(first, rest));
            Response::builder()
                .status(StatusCode::OK)
                .header("content-type", "application/json")
                .body(body)
                .unwrap()
        }
        (Method::GET, None) => {
            let delay = me.store.lock().unwrap().list_delays.get(plural).copied();
            if let Some(d) = delay {
                tokio::time::sleep(d).await;
            }
            let s = me.store.lock().unwrap();
            let items: Vec<Value> = s
                .objects
                .iter()
                .filter(|(k, _)| k.starts_with(&format!("{plural}/")))
                .map(|(_, v)| v.clone())
                .collect();
            reply(
                StatusCode::OK,
                json!({"kind": "List", "apiVersion": format!("{group}/{version}"), "metadata": {"resourceVersion": s.rv.to_string()}, "items": items}),
            )
        }
        _ => reply(
            StatusCode::METHOD_NOT_ALLOWED,
            json!({"kind": "Status", "code": 405}),
        ),
    }
}
