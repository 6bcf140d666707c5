//! A test-only Kubernetes API server double, in process over real HTTP: the subset Gantry
//! uses (server-side apply, get, list, watch from a resourceVersion, delete, Kueue's
//! LocalQueue visibility endpoint) and a scripted admission controller that writes Workload
//! conditions as Kueue would. It admits with the same rules as the sim
//! (`gantry::cluster::sim::SimState`), so scenarios can be compared between back ends.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Router;
use chrono::Utc;
use gantry::cluster::sim::SimState;
use gantry::cluster::{Change, PoolSpec, QuotaSpec, RunSpec, WorkloadSpec};
use serde_json::{json, Value};
use tokio::sync::broadcast;

#[derive(Default)]
struct Store {
    rv: u64,
    /// "plural/namespace/name" → object.
    objects: BTreeMap<String, Value>,
    /// Every change, for watches that start from an older resourceVersion.
    log: Vec<(u64, String, &'static str, Value)>,
    sim: Option<SimState>,
    /// Every request, as "METHOD path", for assertions.
    requests: Vec<String>,
}

pub struct ApiServer {
    store: Mutex<Store>,
    events: broadcast::Sender<(u64, String, &'static str, Value)>,
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

impl ApiServer {
    /// Starts on a free loopback port.
    pub async fn start(pools: &[PoolSpec]) -> Arc<ApiServer> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (events, _) = broadcast::channel(4096);
        let me = Arc::new(ApiServer {
            store: Mutex::new(Store {
                sim: Some(SimState::new(pools, 8)),
                ..Default::default()
            }),
            events,
            addr,
            task: Mutex::new(None),
        });
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
        s.sim.as_mut().unwrap().remove(job_id);
        self.admit(&mut s);
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

    /// Kueue's part: an admission pass, then every Workload's conditions as it says.
    fn admit(&self, s: &mut Store) {
        let mut out = Vec::new();
        let now = Utc::now();
        s.sim.as_mut().unwrap().cycle(now, &mut out);
        for (job_id, _pool, _at, change) in out {
            let Some(k) = workload_key_of(s, &job_id) else {
                continue;
            };
            let mut w = s.objects[&k].clone();
            match change {
                Change::Admitted { .. } => set_conditions(
                    &mut w,
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
                ),
                Change::Preempted { reason } => {
                    let kueue_reason = if reason.contains("reclaimed") {
                        "InCohortReclamation"
                    } else {
                        "InClusterQueue"
                    };
                    set_conditions(
                        &mut w,
                        &[
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
                        ],
                    )
                }
                _ => continue,
            }
            self.put(s, &k, w, "MODIFIED");
        }
        // Why the others wait, in Kueue's words.
        let pools: Vec<String> = s
            .objects
            .values()
            .filter(|o| o["kind"] == "Workload")
            .filter_map(|o| o["spec"]["queueName"].as_str().map(String::from))
            .collect();
        for pool in pools {
            let Ok(view) = s.sim.as_mut().unwrap().view(&pool, now) else {
                continue;
            };
            for p in view.iter() {
                let Some(k) = workload_key_of(s, &p.job_id) else {
                    continue;
                };
                let mut w = s.objects[&k].clone();
                let message = format!("couldn't assign flavors to pod set node: {}", p.reason);
                let current = w["status"]["conditions"]
                    .as_array()
                    .and_then(|cs| cs.iter().find(|c| c["type"] == "QuotaReserved"))
                    .and_then(|c| c["message"].as_str())
                    .map(String::from);
                if current.as_deref() != Some(message.as_str()) {
                    set_conditions(
                        &mut w,
                        &[condition("QuotaReserved", false, "Pending", &message)],
                    );
                    self.put(s, &k, w, "MODIFIED");
                }
            }
        }
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

fn set_conditions(w: &mut Value, new: &[Value]) {
    let mut cs: Vec<Value> = w["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for c in new {
        cs.retain(|x| x["type"] != c["type"]);
        cs.push(c.clone());
    }
    w["status"]["conditions"] = json!(cs);
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

    if group == "visibility.kueue.x-k8s.io"
        && plural == "localqueues"
        && sub == Some("pendingworkloads")
    {
        let lq = name.unwrap_or_default();
        let mut s = me.store.lock().unwrap();
        let team = ns.trim_start_matches("team-").to_string();
        let view = s.sim.as_mut().unwrap().view(lq, Utc::now());
        let Ok(view) = view else { return not_found(lq) };
        let items: Vec<Value> = view
            .iter()
            .filter(|p| p.team == team)
            .enumerate()
            .map(|(i, p)| {
                let owner = gantry::cluster::k8s::objects::object_name(&p.job_id);
                json!({"metadata": {"name": format!("jobset-{owner}"), "namespace": ns,
                        "creationTimestamp": p.submitted_at.to_rfc3339(),
                        "ownerReferences": [{"kind": "JobSet", "name": owner}]},
                       "priority": p.priority.value(), "localQueueName": lq,
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
            if plural == "clusterqueues" {
                let pool = obj["spec"]["cohortName"].as_str().unwrap().to_string();
                let team = name.trim_end_matches(&format!("-{pool}")).to_string();
                let r = &obj["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0];
                let q = QuotaSpec {
                    nominal: r["nominalQuota"].as_u64().unwrap() as u32,
                    borrowing_limit: r["borrowingLimit"].as_u64().map(|v| v as u32),
                    lending_limit: r["lendingLimit"].as_u64().map(|v| v as u32),
                    strategy: None,
                };
                s.sim.as_mut().unwrap().set_quota(&team, &pool, q).unwrap();
                me.admit(&mut s);
            }
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
                let workload = json!({
                    "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
                    "metadata": {"name": wname, "namespace": ns, "creationTimestamp": Utc::now().to_rfc3339(),
                                 "labels": {"test/job-id": job_id},
                                 "ownerReferences": [{"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": name, "uid": obj["metadata"]["uid"]}]},
                    "spec": {"queueName": pool, "maximumExecutionTimeSeconds": max,
                             "priorityClassRef": {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": prio},
                             "podSets": [{"name": "node", "count": count, "template": {"spec": {"containers": [{"name": "trainer", "resources": {"requests": {"nvidia.com/gpu": per.to_string()}}}]}}}]},
                    "status": {"conditions": [condition("QuotaReserved", false, "Pending", "waiting for the next admission pass")]}
                });
                let wk = key("workloads", ns, &wname);
                me.put(&mut s, &wk, workload, "ADDED");
                let priority =
                    app::model::Priority::parse(prio.trim_start_matches("gantry-")).unwrap();
                s.sim
                    .as_mut()
                    .unwrap()
                    .enqueue(WorkloadSpec {
                        job_id,
                        team: ns.trim_start_matches("team-").to_string(),
                        pool,
                        gpus: (count * per) as u32,
                        priority,
                        submitted_at: Utc::now(),
                        max_runtime_s: max,
                        run: RunSpec::default(),
                    })
                    .unwrap();
                me.admit(&mut s);
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
                    s.sim.as_mut().unwrap().remove(job_id);
                    me.admit(&mut s);
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
