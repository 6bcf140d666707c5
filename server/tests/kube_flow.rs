//! The whole flow on the Kubernetes back end, over real HTTP against the in-process API
//! server double of `support/apiserver.rs`, which decides nothing: each test scripts what
//! Kueue does (admit, preempt with Kueue's reason, keep pending with Kueue's message,
//! finish) and checks that Gantry's API shows exactly that.
//!
//! - launch → admitted → running → succeeded, a reclaim preemption with its reason, queue
//!   position from the visibility API, cancel, the API server going away and coming back,
//!   and Gantry restarting with a launch it stored but never sent;
//! - a job that ended during an outage ends at its condition's time;
//! - the Kueue conformance table (`data/kueue_cases.rs`, the cases the admission rules are
//!   checked against in the lib): each case that fits the seeded teams and pool is replayed
//!   with Kueue's *expected* outcome scripted into the double, and Gantry must show it. The
//!   kube back end is checked against Kueue's own results, not against Gantry's rules.

#[path = "data/kueue_cases.rs"]
mod kueue_cases;
mod support;

use std::time::Duration;

use gantry::config::{ClusterBackend, Config};
use gantry::startup::{leptos_options, start, Running};
use serde_json::{json, Value};
use support::apiserver::ApiServer;

struct Gantry {
    base: String,
    running: Running,
}

/// Gantry on the Kubernetes back end against `api`, its SQLite database `name`.db in `dir`,
/// with no demo data; the API server's calls time out after 2 s.
fn kube_config(dir: &std::path::Path, api: &ApiServer, name: &str) -> Config {
    let mut config = Config::default();
    config.server.addr = "127.0.0.1:0".parse().unwrap();
    config.database.url = format!(
        "sqlite://{}?mode=rwc",
        dir.join(format!("{name}.db")).display()
    )
    .into();
    config.demo.jobs = false;
    config.demo.history = false;
    config.cluster.backend = ClusterBackend::Kube;
    config.kube.kubeconfig = Some(api.kubeconfig(dir));
    config.kube.timeout_s = 2;
    config
}

async fn start_gantry(config: &Config) -> Gantry {
    let running = start(config.clone(), leptos_options())
        .await
        .expect("gantry starts");
    Gantry {
        base: format!("http://{}", running.addr),
        running,
    }
}

use support::session::sign_in;

async fn launch(http: &reqwest::Client, base: &str, body: Value) -> Value {
    let res = http
        .post(format!("{base}/api/v1/jobs"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 201);
    res.json().await.unwrap()
}

/// The id of a job launched as `body`.
async fn launch_id(http: &reqwest::Client, base: &str, body: Value) -> String {
    launch(http, base, body).await["id"]
        .as_str()
        .unwrap()
        .to_string()
}

/// An RFC 3339 time of the API, in milliseconds.
fn ms(v: &Value) -> i64 {
    chrono::DateTime::parse_from_rfc3339(v.as_str().unwrap())
        .unwrap()
        .timestamp_millis()
}

async fn job(http: &reqwest::Client, base: &str, id: &str) -> Value {
    http.get(format!("{base}/api/v1/jobs/{id}"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// Polls until the job satisfies `ok` (the watch is asynchronous), failing after 20 s.
async fn until(
    http: &reqwest::Client,
    base: &str,
    id: &str,
    what: &str,
    ok: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let j = job(http, base, id).await;
        if ok(&j) {
            return j;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "job {id} never became {what}: {j}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The items of a server-sent event stream as they come: `data` lines, and `event NAME`.
fn sse_items(mut res: reqwest::Response) -> tokio::sync::mpsc::UnboundedReceiver<String> {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut buf = String::new();
        while let Ok(Some(chunk)) = res.chunk().await {
            buf.push_str(&String::from_utf8_lossy(&chunk));
            while let Some(i) = buf.find("\n\n") {
                let event: String = buf.drain(..i + 2).collect();
                for line in event.lines() {
                    let item = if let Some(d) = line.strip_prefix("data:") {
                        d.trim().to_string()
                    } else if let Some(e) = line.strip_prefix("event:") {
                        format!("event {}", e.trim())
                    } else {
                        continue;
                    };
                    if tx.send(item).is_err() {
                        return;
                    }
                }
            }
        }
    });
    rx
}

/// The next `n` items of a stream from [`sse_items`], each within 10 s.
async fn next_items(
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<String>,
    n: usize,
) -> Vec<String> {
    let mut out = Vec::new();
    while out.len() < n {
        match tokio::time::timeout(Duration::from_secs(10), rx.recv()).await {
            Ok(Some(i)) => out.push(i),
            other => panic!("the stream gave {out:?}, then {other:?}"),
        }
    }
    out
}

/// The GPU-hours allocated in the usage report, over every team (read by an admin), and the
/// report.
async fn allocated_gpu_hours(base: &str) -> (f64, Value) {
    let carol = sign_in(base, "carol").await;
    let report: Value = carol
        .get(format!("{base}/api/v1/usage?group_by=team"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let allocated = report["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["gpu_hours_allocated"].as_f64().unwrap())
        .sum();
    (allocated, report)
}

fn llama(gpus: u32) -> Value {
    json!({"template": "llama-3.1-8b-fsdp", "gpus": gpus, "pool": "hgx-h100"})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn launch_run_preempt_cancel_finish_outage_and_restart_against_an_api_server_double() {
    let dir = tempfile::tempdir().unwrap();
    let api = ApiServer::start().await;
    let config = kube_config(dir.path(), &api, "flow");

    let g = start_gantry(&config).await;
    assert_eq!(
        api.objects("clusterqueues").len(),
        6,
        "the stored quotas went to the ClusterQueues"
    );
    let alice = sign_in(&g.base, "alice").await;
    let dave = sign_in(&g.base, "dave").await;
    let erin = sign_in(&g.base, "erin").await;

    // 1. Launch → admitted → running, as a JobSet with Kueue's labels.
    let j1 = launch(&alice, &g.base, llama(64)).await;
    let id1 = j1["id"].as_str().unwrap().to_string();
    api.admit(&id1).await;
    until(&alice, &g.base, &id1, "running", |j| {
        j["state"] == "running"
    })
    .await;
    let js = api.objects("jobsets");
    assert_eq!(js.len(), 1);
    assert_eq!(
        js[0]["metadata"]["labels"]["gantry.dev/job-id"],
        id1.as_str()
    );
    assert_eq!(js[0]["metadata"]["namespace"], "team-nlp");

    // 2. nlp borrows 32 more; vision fills its own 32: the pool's 128 GPUs are in use.
    let j2 = launch(&alice, &g.base, llama(32)).await;
    let id2 = j2["id"].as_str().unwrap().to_string();
    api.admit(&id2).await;
    until(&alice, &g.base, &id2, "running", |j| {
        j["state"] == "running"
    })
    .await;
    let j3 = launch(&dave, &g.base, llama(32)).await;
    let id3 = j3["id"].as_str().unwrap().to_string();
    api.admit(&id3).await;
    until(&dave, &g.base, &id3, "running", |j| j["state"] == "running").await;

    // 3. speech claims its nominal 32: Kueue reclaims nlp's borrowed GPUs (evicts the
    //    borrower, then admits speech's job) and says why the evicted job waits.
    let j4 = launch(&erin, &g.base, llama(32)).await;
    let id4 = j4["id"].as_str().unwrap().to_string();
    api.preempt(&id2, "InCohortReclamation").await;
    api.admit(&id4).await;
    api.pend(
        &id2,
        "couldn't assign flavors to pod set node: insufficient unused quota for nvidia.com/gpu in flavor hgx-h100, 32 more needed",
    )
    .await;
    until(&erin, &g.base, &id4, "running", |j| j["state"] == "running").await;
    let back = until(&alice, &g.base, &id2, "queued after preemption", |j| {
        j["state"] == "queued" && !j["preemptions"].as_array().unwrap().is_empty()
    })
    .await;
    assert_eq!(
        back["preemptions"][0]["reason"],
        "Preempted: another team reclaimed its quota"
    );
    // 4. its position and Kueue's reason come back from the cluster
    let back = until(&alice, &g.base, &id2, "listed", |j| {
        j["queue_position"] == 1
    })
    .await;
    assert_eq!(back["queue_position_in_team"], 1);
    assert_eq!(
        back["pending_reason"],
        "Kueue: couldn't assign flavors to pod set node: insufficient unused quota for nvidia.com/gpu in flavor hgx-h100, 32 more needed"
    );

    // 5. Cancel deletes the JobSet (and Kueue's Workload with it).
    let res = alice
        .post(format!("{}/api/v1/jobs/{id2}/cancel", g.base))
        .send()
        .await
        .unwrap();
    assert!(res.status().is_success());
    until(&alice, &g.base, &id2, "cancelled", |j| {
        j["state"] == "cancelled"
    })
    .await;
    let deletes: Vec<String> = api
        .requests()
        .into_iter()
        .filter(|r| r.starts_with("DELETE"))
        .collect();
    assert_eq!(deletes.len(), 1, "{deletes:?}");
    assert!(deletes[0].ends_with(&gantry::cluster::k8s::objects::object_name(&id2)));

    // 6. The job finishes in the cluster.
    api.finish(&id1, true);
    let done = until(&alice, &g.base, &id1, "succeeded", |j| {
        j["state"] == "succeeded"
    })
    .await;
    assert!(
        done["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["reason"] == "Job finished successfully"),
        "{done}"
    );

    // 7. The API server goes away: a launch is stored and says so; Gantry restarts before it
    //    could send it; the API server comes back; the restarted Gantry sends it, once.
    api.down();
    let j5 = launch(&alice, &g.base, llama(8)).await;
    let id5 = j5["id"].as_str().unwrap().to_string();
    assert_eq!(j5["state"], "queued");
    assert!(
        j5["pending_reason"]
            .as_str()
            .unwrap()
            .contains("not yet sent"),
        "{j5}"
    );
    let (_, home) = (0, alice.get(format!("{}/", g.base)).send().await.unwrap());
    assert_eq!(home.status().as_u16(), 200, "the portal keeps serving");
    g.running.stop().await;
    api.up().await;
    let g = start_gantry(&config).await;
    let alice = sign_in(&g.base, "alice").await;
    api.admit(&id5).await; // once the restarted Gantry has sent it
    until(&alice, &g.base, &id5, "running after the restart", |j| {
        j["state"] == "running"
    })
    .await;
    let mine: Vec<Value> = api
        .objects("jobsets")
        .into_iter()
        .filter(|o| o["metadata"]["labels"]["gantry.dev/job-id"] == id5.as_str())
        .collect();
    assert_eq!(mine.len(), 1, "sent once");
    // what happened while Gantry was down stays as it was; nothing doubled
    assert_eq!(job(&alice, &g.base, &id1).await["state"], "succeeded");
    assert_eq!(job(&alice, &g.base, &id2).await["state"], "cancelled");
    let list: Vec<Value> = alice
        .get(format!("{}/api/v1/jobs", g.base))
        .send()
        .await
        .unwrap()
        .json::<Value>()
        .await
        .unwrap()["jobs"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(list.iter().filter(|j| j["id"] == id5.as_str()).count(), 1);
    g.running.stop().await;
}

/// Gantry is down while a job ends; on restart the watch's first list brings the end in at
/// the time Kueue's `Finished` condition records, so the job's run (and its GPU-hours) ends
/// then, not when Gantry came back.
/// Logs and the failure reason on the kube back end: the job's pods are found by the JobSet
/// controller's label, ordered by completion index, read with `pods/log` (`timestamps`,
/// `tailLines`); a failed job's reason is the first failed pod's container status with the
/// JobSet's `Failed` condition; the keeper keeps the lines, which the page shows after the
/// pods are deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_and_the_failure_come_from_the_pods_and_outlive_them() {
    let dir = tempfile::tempdir().unwrap();
    let api = ApiServer::start().await;
    let config = kube_config(dir.path(), &api, "logs");
    let g = start_gantry(&config).await;
    let alice = sign_in(&g.base, "alice").await;
    let dave = sign_in(&g.base, "dave").await;

    let j = launch(&alice, &g.base, llama(16)).await;
    let id = j["id"].as_str().unwrap().to_string();
    let name = gantry::cluster::k8s::objects::object_name(&id);
    api.admit(&id).await;
    until(&alice, &g.base, &id, "running", |j| j["state"] == "running").await;
    let t0 = chrono::Utc::now() - chrono::Duration::seconds(120);
    let at = |s: i64| t0 + chrono::Duration::seconds(s);
    let pod = |rank: u32, status: Value| {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("{name}-node-{rank}-0"), "namespace": "team-nlp",
                         "creationTimestamp": t0.to_rfc3339(),
                         "labels": {"jobset.sigs.k8s.io/jobset-name": name,
                                    "batch.kubernetes.io/job-completion-index": rank.to_string()}},
            "spec": {"nodeName": format!("hgx-h100-node-0{}", rank + 1),
                     "containers": [{"name": "trainer", "image": "x"}]},
            "status": status,
        })
    };
    // Another job's pod in the same namespace must not be read.
    api.add_pod(
        "team-nlp",
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": "gantry-other-node-0-0", "namespace": "team-nlp",
                            "labels": {"jobset.sigs.k8s.io/jobset-name": "gantry-other",
                                       "batch.kubernetes.io/job-completion-index": "0"}},
               "spec": {"containers": [{"name": "trainer"}]}, "status": {}}),
        vec![(at(1), "not this job".into())],
    );
    api.add_pod(
        "team-nlp",
        pod(1, json!({"phase": "Running"})),
        vec![
            (at(2), "rank 1 starting".into()),
            (at(4), "NCCL INFO Init COMPLETE".into()),
        ],
    );
    api.add_pod(
        "team-nlp",
        pod(0, json!({"phase": "Running"})),
        vec![
            (at(1), "rank 0 starting".into()),
            (at(3), "step 10 | loss 2.5".into()),
            (at(5), "step 20 | loss 2.1".into()),
        ],
    );
    let text = |q: &'static str| {
        let (alice, base, id) = (alice.clone(), g.base.clone(), id.clone());
        async move {
            let res = alice
                .get(format!("{base}/api/v1/jobs/{id}/logs?{q}"))
                .send()
                .await
                .unwrap();
            (res.status().as_u16(), res.text().await.unwrap())
        }
    };
    let (status, rank0) = text("rank=0").await;
    assert_eq!(status, 200, "{rank0}");
    let lines: Vec<&str> = rank0
        .lines()
        .map(|l| l.split_once(' ').unwrap().1)
        .collect();
    assert_eq!(
        lines,
        [
            "rank 0 starting",
            "step 10 | loss 2.5",
            "step 20 | loss 2.1"
        ]
    );
    let (_, all) = text("rank=all").await;
    let order: Vec<&str> = all.lines().map(|l| &l[..8]).collect();
    assert_eq!(
        order,
        ["[rank 0]", "[rank 1]", "[rank 0]", "[rank 1]", "[rank 0]"],
        "{all}"
    );
    assert!(!all.contains("not this job"));
    let (_, tail) = text("rank=0&tail=1").await;
    assert!(tail.trim_end().ends_with("step 20 | loss 2.1") && tail.lines().count() == 1);
    let res = dave
        .get(format!("{}/api/v1/jobs/{id}/logs", g.base))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 404);
    let asked = api.requests();
    assert!(
        asked
            .iter()
            .any(|r| r == &format!("GET /api/v1/namespaces/team-nlp/pods/{name}-node-0-0/log")),
        "{asked:?}"
    );

    // Followed: one `pods/log?follow=true` stream held per pod, and a line the kubelet
    // writes arrives without Gantry reading the logs again.
    let res = alice
        .get(format!(
            "{}/api/v1/jobs/{id}/logs?rank=all&follow=true",
            g.base
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 200);
    let mut follower = sse_items(res);
    let first = next_items(&mut follower, 5).await;
    let texts = |items: &[String]| -> Vec<String> {
        items
            .iter()
            .filter_map(|i| serde_json::from_str::<Value>(i).ok())
            .map(|l| format!("{} {}", l["rank"], l["text"].as_str().unwrap()))
            .collect()
    };
    assert_eq!(
        texts(&first),
        [
            "0 rank 0 starting",
            "1 rank 1 starting",
            "0 step 10 | loss 2.5",
            "1 NCCL INFO Init COMPLETE",
            "0 step 20 | loss 2.1"
        ]
    );
    let log_reads = || {
        api.requests()
            .iter()
            .filter(|r| r.starts_with("GET ") && r.ends_with("/log"))
            .count()
    };
    let held =
        |pod: u32| format!("FOLLOW /api/v1/namespaces/team-nlp/pods/{name}-node-{pod}-0/log");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !(api.requests().contains(&held(0)) && api.requests().contains(&held(1))) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no held follow: {:?}",
            api.requests()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let reads_before = log_reads();
    api.write_log(
        "team-nlp",
        &format!("{name}-node-0-0"),
        at(6),
        "step 30 | loss 1.9",
    );
    api.write_log(
        "team-nlp",
        &format!("{name}-node-1-0"),
        at(6),
        "rank 1 step 30",
    );
    let live = next_items(&mut follower, 2).await;
    let mut live = texts(&live);
    live.sort();
    assert_eq!(live, ["0 step 30 | loss 1.9", "1 rank 1 step 30"]);
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(
        log_reads(),
        reads_before,
        "while the streams are held, the logs are not read again"
    );

    // Rank 1 is OOMKilled first, rank 0 then exits 143; the JobSet fails.
    api.add_pod(
        "team-nlp",
        pod(1, json!({"phase": "Failed", "containerStatuses": [{"name": "trainer",
            "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled", "finishedAt": at(100).to_rfc3339()}}}]})),
        vec![
            (at(2), "rank 1 starting".into()),
            (at(99), "torch.OutOfMemoryError: CUDA out of memory.".into()),
        ],
    );
    api.add_pod(
        "team-nlp",
        pod(0, json!({"phase": "Failed", "containerStatuses": [{"name": "trainer",
            "state": {"terminated": {"exitCode": 143, "reason": "Error", "finishedAt": at(105).to_rfc3339()}}}]})),
        vec![(at(1), "rank 0 starting".into()), (at(104), "received SIGTERM".into())],
    );
    api.set_status(
        "jobsets",
        "team-nlp",
        &name,
        json!({"conditions": [{"type": "Failed", "status": "True", "reason": "FailedJobs",
                               "message": "jobset failed due to reaching max restarts"}]}),
    );
    api.finish(&id, false);
    let j = until(&alice, &g.base, &id, "failed with a reason", |j| {
        j["state"] == "failed" && !j["failure"].is_null()
    })
    .await;
    // The pods' containers ended their followed logs; the lines written last are read once
    // more, then the stream ends with the job.
    let mut rest = Vec::new();
    while !rest.iter().any(|i: &String| i == "event end") {
        rest.extend(next_items(&mut follower, 1).await);
    }
    let rest_texts = texts(&rest);
    assert_eq!(
        rest_texts,
        [
            "1 torch.OutOfMemoryError: CUDA out of memory.",
            "0 received SIGTERM"
        ],
        "{rest:?}"
    );
    let f = &j["failure"];
    assert_eq!(f["reason"], "OOMKilled", "{f}");
    assert_eq!(f["exit_code"], 137);
    assert_eq!(f["rank"], 1);
    assert_eq!(f["pod"], format!("{name}-node-1-0"));
    assert_eq!(f["node"], "hgx-h100-node-02");
    assert_eq!(f["condition"], "jobset failed due to reaching max restarts");

    // The pods go; the kept lines stay.
    api.delete_pods();
    let res = alice
        .get(format!("{}/api/v1/jobs/{id}/logs?rank=1", g.base))
        .send()
        .await
        .unwrap();
    assert_eq!(res.headers()["x-gantry-log-source"], "kept");
    let kept = res.text().await.unwrap();
    assert!(kept.contains("CUDA out of memory"), "{kept}");

    // RBAC refuses the log: the viewer is told so with the request's id to quote, never the
    // API server's own words (its service account, the namespace, the pod's name).
    api.add_pod(
        "team-nlp",
        pod(0, json!({"phase": "Failed"})),
        vec![(at(1), "rank 0 starting".into())],
    );
    api.forbid_logs(true);
    let res = alice
        .get(format!("{}/api/v1/jobs/{id}/logs?rank=0", g.base))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 200);
    let request = res.headers()["x-request-id"].to_str().unwrap().to_string();
    let message = res.headers()["x-gantry-log-message"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(
        message.contains(&format!("request {request}")) && message.contains("did not answer"),
        "{message}"
    );
    for secret in ["serviceaccount", "forbidden", "team-nlp", name.as_str()] {
        assert!(!message.contains(secret), "{secret} in {message}");
    }
    assert!(res.text().await.unwrap().contains("received SIGTERM"));
    g.running.stop().await;
}

/// A workload an admission check rejects (Kueue's `Finished` with `AdmissionChecksRejected`)
/// failed, and never ran: no admission, no GPU-hours. It was shown as succeeded, after an
/// admission Gantry made up (every reason but `Failed` was taken for a success).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workload_an_admission_check_rejects_fails_without_having_run() {
    let dir = tempfile::tempdir().unwrap();
    let api = ApiServer::start().await;
    let config = kube_config(dir.path(), &api, "rejected");
    let g = start_gantry(&config).await;
    let alice = sign_in(&g.base, "alice").await;
    let j = launch(&alice, &g.base, llama(16)).await;
    let id = j["id"].as_str().unwrap().to_string();
    api.reject(
        &id,
        "Admission check provisioning-h100 rejected the workload",
    )
    .await;
    let failed = until(&alice, &g.base, &id, "failed", |j| j["state"] == "failed").await;
    assert_eq!(failed["admitted_at"], Value::Null, "{failed}");
    let said = failed.to_string();
    assert!(said.contains("provisioning-h100 rejected"), "{said}");
    assert!(
        g.running
            .portal
            .db()
            .last_interval(&id)
            .await
            .unwrap()
            .is_none(),
        "no run to bill"
    );
    g.running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_that_ended_during_an_outage_ends_at_its_condition_time() {
    let dir = tempfile::tempdir().unwrap();
    let api = ApiServer::start().await;
    let config = kube_config(dir.path(), &api, "outage");

    let g = start_gantry(&config).await;
    let alice = sign_in(&g.base, "alice").await;
    let j = launch(&alice, &g.base, llama(16)).await;
    let id = j["id"].as_str().unwrap().to_string();
    api.admit(&id).await;
    until(&alice, &g.base, &id, "running", |j| j["state"] == "running").await;
    let workload = api
        .objects("workloads")
        .into_iter()
        .find(|w| w.to_string().contains(&id.replace('-', "")))
        .expect("the job's workload");
    let admitted_at = workload["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Admitted")
        .and_then(|c| c["lastTransitionTime"].as_str())
        .map(|t| chrono::DateTime::parse_from_rfc3339(t).unwrap().to_utc())
        .expect("Kueue's admission time");
    g.running.stop().await;

    // While Gantry is down: the job ends, 1.5 s after its admission as Kueue records it.
    let finished_at = admitted_at + chrono::Duration::milliseconds(1500);
    api.finish_at(&id, true, finished_at);
    tokio::time::sleep(Duration::from_secs(3)).await;

    let g = start_gantry(&config).await;
    let alice = sign_in(&g.base, "alice").await;
    let done = until(&alice, &g.base, &id, "succeeded", |j| {
        j["state"] == "succeeded"
    })
    .await;
    let at = |v: &Value| {
        chrono::DateTime::parse_from_rfc3339(v.as_str().unwrap())
            .unwrap()
            .timestamp_millis()
    };
    assert_eq!(
        at(&done["finished_at"]),
        finished_at.timestamp_millis(),
        "{done}"
    );
    assert_eq!(
        at(&done["admitted_at"]),
        admitted_at.timestamp_millis(),
        "{done}"
    );
    let (start, end) = g
        .running
        .portal
        .db()
        .last_interval(&id)
        .await
        .unwrap()
        .expect("the job's run");
    assert_eq!(
        (start.timestamp_millis(), end.map(|e| e.timestamp_millis())),
        (
            admitted_at.timestamp_millis(),
            Some(finished_at.timestamp_millis())
        ),
        "the run counts from Kueue's admission to its Finished condition: 16 GPUs x 1.5 s"
    );
    // The usage report bills exactly that, not the time Gantry was down.
    let (allocated, report) = allocated_gpu_hours(&g.base).await;
    assert!(
        (allocated - 16.0 * 1.5 / 3600.0).abs() < 1e-9,
        "GPU-hours from the conditions' times: {report}"
    );
    g.running.stop().await;
}

/// Kueue 0.12 and later delete finished Workloads after a retention time
/// (`objectRetentionPolicies`); the JobSet stays with its verdict. Two jobs end while Gantry
/// is down and their Workloads are collected: one Gantry knew as running (it fails), one it
/// knew only as queued (admitted while Gantry was down; it succeeds). Each must end by its
/// JobSet's verdict, at its time. Before: the comparison ran on the Workload watch's list
/// alone, so the running job ended as cancelled at Gantry's restart (its GPU-hours billed to
/// then); and the queued one's success was refused, so it stayed queued, its finished JobSet
/// applied again every 10 s. The JobSets' list is slowed so that the comparison would come first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_whose_workloads_were_collected_while_gantry_was_down_end_by_their_jobsets() {
    let dir = tempfile::tempdir().unwrap();
    let api = ApiServer::start().await;
    let config = kube_config(dir.path(), &api, "collected");
    let g = start_gantry(&config).await;
    let alice = sign_in(&g.base, "alice").await;
    let ran = launch_id(&alice, &g.base, llama(16)).await;
    api.admit(&ran).await;
    let running = until(&alice, &g.base, &ran, "running", |j| {
        j["state"] == "running"
    })
    .await;
    let queued = launch_id(&alice, &g.base, llama(8)).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !api
        .objects("jobsets")
        .iter()
        .any(|o| o["metadata"]["labels"]["gantry.dev/job-id"] == queued.as_str())
    {
        assert!(tokio::time::Instant::now() < deadline, "never sent");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    g.running.stop().await;

    // While Gantry is down: the second job is admitted; both end, and Kueue collects both
    // finished Workloads.
    api.admit(&queued).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let now = chrono::Utc::now();
    let ran_end = now - chrono::Duration::milliseconds(500);
    let queued_end = now - chrono::Duration::milliseconds(200);
    api.finish_at(&ran, false, ran_end);
    api.end_job_object(&ran, false, ran_end);
    api.finish_at(&queued, true, queued_end);
    api.end_job_object(&queued, true, queued_end);
    api.collect_workload(&ran);
    api.collect_workload(&queued);
    api.delay_lists("jobsets", Duration::from_millis(1500));

    let g = start_gantry(&config).await;
    let alice = sign_in(&g.base, "alice").await;
    let done = until(&alice, &g.base, &ran, "ended", |j| {
        j["finished_at"].is_string()
    })
    .await;
    assert_eq!(done["state"], "failed", "{done}");
    assert!(
        done.to_string()
            .contains("jobset failed due to reaching max restarts"),
        "the JobSet's words: {done}"
    );
    assert_eq!(
        ms(&done["finished_at"]),
        ran_end.timestamp_millis(),
        "{done}"
    );
    let db = g.running.portal.db();
    let (start, end) = db.last_interval(&ran).await.unwrap().expect("its run");
    assert_eq!(
        (start.timestamp_millis(), end.map(|e| e.timestamp_millis())),
        (
            ms(&running["admitted_at"]),
            Some(ran_end.timestamp_millis())
        ),
        "the run it knew of ends at the JobSet's verdict, not at Gantry's restart"
    );

    let succeeded = until(&alice, &g.base, &queued, "ended", |j| {
        j["finished_at"].is_string()
    })
    .await;
    assert_eq!(succeeded["state"], "succeeded", "{succeeded}");
    assert_eq!(
        ms(&succeeded["finished_at"]),
        queued_end.timestamp_millis(),
        "{succeeded}"
    );
    let said = succeeded.to_string();
    assert!(
        said.contains("jobset completed successfully")
            && said.contains("its run time is not recorded"),
        "the JobSet's words, and that its run was not measured: {said}"
    );
    let (start, end) = db.last_interval(&queued).await.unwrap().expect("a run");
    assert_eq!(
        Some(start),
        end,
        "when it was admitted is gone with its Workload: nothing is made up"
    );
    g.running.stop().await;
}

/// Kubeflow Trainer is optional (`kube.trainer` is on by default): on a cluster that does not
/// serve TrainJobs, the TrainJob watch never lists. The comparison with the cluster must not
/// wait for it. Here a job's JobSet is deleted with its Workload while Gantry is down; only
/// the comparison can end it. Before, it waited for every job watch's list: the job stayed
/// running, billed, for as long as Gantry ran.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_kubeflow_trainer_the_cluster_is_still_compared() {
    let dir = tempfile::tempdir().unwrap();
    let api = ApiServer::start().await;
    api.unserve("trainjobs");
    let config = kube_config(dir.path(), &api, "no-trainer");
    assert!(config.kube.trainer, "on by default");
    let g = start_gantry(&config).await;
    let alice = sign_in(&g.base, "alice").await;
    let id = launch_id(&alice, &g.base, llama(16)).await;
    api.admit(&id).await;
    until(&alice, &g.base, &id, "running", |j| j["state"] == "running").await;
    g.running.stop().await;

    // While Gantry is down, someone deletes the JobSet (and Kueue's Workload with it).
    let http = reqwest::Client::new();
    let name = format!("gantry-{}", id.replace('-', ""));
    let res = http
        .delete(format!(
            "http://{}/apis/jobset.x-k8s.io/v1alpha2/namespaces/team-nlp/jobsets/{name}",
            api.addr
        ))
        .send()
        .await
        .unwrap();
    assert!(res.status().is_success(), "{}", res.status());

    let g = start_gantry(&config).await;
    let alice = sign_in(&g.base, "alice").await;
    let ended = until(&alice, &g.base, &id, "cancelled", |j| {
        j["state"] == "cancelled"
    })
    .await;
    assert!(
        ended.to_string().contains("Corrected from the cluster"),
        "{ended}"
    );
    g.running.stop().await;
}

/// Preempted, admitted again and finished, all while Gantry is down. Kueue keeps `Admitted`
/// on a finished Workload at its last admission, and its count of the earlier admissions'
/// seconds (`accumulatedPastExecutionTimeSeconds`): the run Gantry knew of ends where that
/// count says, and the second run is billed from the re-admission to the end. Before: one
/// run from the first admission to the end, the time it waited in the queue billed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_preempted_readmitted_and_finished_while_gantry_was_down_is_two_runs() {
    let dir = tempfile::tempdir().unwrap();
    let api = ApiServer::start().await;
    let config = kube_config(dir.path(), &api, "readmitted");
    let g = start_gantry(&config).await;
    let alice = sign_in(&g.base, "alice").await;
    let id = launch_id(&alice, &g.base, llama(16)).await;
    api.admit(&id).await;
    let running = until(&alice, &g.base, &id, "running", |j| j["state"] == "running").await;
    g.running.stop().await;

    // While Gantry is down: about 2 s after its admission it is preempted, waits about 2 s,
    // is admitted again, and ends about 1 s later.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    api.preempt(&id, "InCohortReclamation").await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    api.admit(&id).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    api.finish(&id, true);
    let workload = api
        .objects("workloads")
        .into_iter()
        .find(|w| w["metadata"]["labels"]["test/job-id"] == id.as_str())
        .expect("the job's workload");
    let past_s = workload["status"]["accumulatedPastExecutionTimeSeconds"]
        .as_i64()
        .expect("Kueue's count");
    let condition_time = |kind: &str| {
        workload["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == kind)
            .and_then(|c| c["lastTransitionTime"].as_str())
            .map(|t| {
                chrono::DateTime::parse_from_rfc3339(t)
                    .unwrap()
                    .timestamp_millis()
            })
            .unwrap()
    };
    let (again, finished) = (condition_time("Admitted"), condition_time("Finished"));

    let g = start_gantry(&config).await;
    let alice = sign_in(&g.base, "alice").await;
    let done = until(&alice, &g.base, &id, "succeeded", |j| {
        j["state"] == "succeeded"
    })
    .await;
    let first = ms(&running["admitted_at"]);
    let runs: Vec<(i64, Option<i64>)> = g
        .running
        .portal
        .db()
        .job_intervals(&id)
        .await
        .unwrap()
        .into_iter()
        .map(|(_, s, e, _)| (s.timestamp_millis(), e.map(|e| e.timestamp_millis())))
        .collect();
    assert_eq!(
        runs,
        vec![
            (first, Some(first + past_s * 1000)),
            (again, Some(finished))
        ],
        "two runs, the queued time between them not billed: {done}"
    );
    assert!(past_s >= 1, "the first run lasted over a second");
    assert!(done.to_string().contains("evicted at"), "{done}");
    g.running.stop().await;
}

/// A job Gantry knew only as queued is admitted and run to its max runtime while Gantry is
/// down: Kueue deactivates its Workload, whose conditions then no longer say when it was
/// admitted, but whose count (`accumulatedPastExecutionTimeSeconds`) holds the run. The job
/// fails at the deactivation with that run recorded and billed. Before, it failed from the
/// queue and billed nothing for GPUs held up to its whole max runtime.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_to_the_max_runtime_while_gantry_was_down_is_billed_for_kueues_count() {
    let dir = tempfile::tempdir().unwrap();
    let api = ApiServer::start().await;
    let config = kube_config(dir.path(), &api, "deactivated");
    let g = start_gantry(&config).await;
    let alice = sign_in(&g.base, "alice").await;
    let id = launch_id(&alice, &g.base, llama(16)).await;
    api.pend(&id, "waiting for quota").await;
    // Sent (the Workload exists), and seen waiting.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let queued = job(&alice, &g.base, &id).await;
    assert_eq!(queued["state"], "queued", "{queued}");
    g.running.stop().await;

    // While Gantry is down: admitted a second after the launch, deactivated about 6 s later.
    tokio::time::sleep(Duration::from_secs(7)).await;
    let submitted = chrono::DateTime::parse_from_rfc3339(queued["created_at"].as_str().unwrap())
        .unwrap()
        .to_utc();
    let admitted = submitted + chrono::Duration::seconds(1);
    let released = chrono::Utc::now() - chrono::Duration::milliseconds(300);
    api.deactivate_at_max_runtime(&id, admitted, released).await;
    let count_s = (released - admitted).num_seconds();
    assert!(count_s >= 5, "a run longer than the rounding: {count_s} s");

    let g = start_gantry(&config).await;
    let alice = sign_in(&g.base, "alice").await;
    let done = until(&alice, &g.base, &id, "failed", |j| j["state"] == "failed").await;
    let end = released.timestamp_millis();
    assert_eq!(ms(&done["finished_at"]), end, "{done}");
    let runs: Vec<(i64, Option<i64>)> = g
        .running
        .portal
        .db()
        .job_intervals(&id)
        .await
        .unwrap()
        .into_iter()
        .map(|(_, s, e, _)| (s.timestamp_millis(), e.map(|e| e.timestamp_millis())))
        .collect();
    assert_eq!(
        runs,
        vec![(end - count_s * 1000, Some(end))],
        "one run of Kueue's count, ending at the deactivation: {done}"
    );
    let text = done.to_string();
    assert!(text.contains("Stopped at its max runtime"), "{done}");
    assert!(
        text.contains("admitted while Gantry was not watching"),
        "its events say the run was not seen: {done}"
    );
    // The usage report bills it: 16 GPUs for Kueue's count.
    let (allocated, report) = allocated_gpu_hours(&g.base).await;
    assert!(
        (allocated - 16.0 * count_s as f64 / 3600.0).abs() < 1e-9,
        "GPU-hours by Kueue's count: {report}"
    );
    g.running.stop().await;
}

/// The pool the Kueue cases run in, its nodes, and the seeded teams the cases' ClusterQueues
/// map onto (in order), each with a member who launches for it.
const POOL: &str = "hgx-h100";
const POOL_NODES: u32 = 16;
const TEAMS: [(&str, &str); 3] = [("nlp", "alice"), ("vision", "dave"), ("speech", "erin")];
/// One Kueue resource unit of the table is one 8-GPU node.
const GPUS: u32 = 8;

/// How a case maps onto Gantry: its ClusterQueues onto the seeded teams and its Kueue
/// priority values onto low/normal/high, both in order.
struct Mapped {
    team_of: std::collections::HashMap<&'static str, usize>,
    priority_of: std::collections::HashMap<i32, app::model::Priority>,
}

/// The mapping of a case, or why it cannot be replayed through Gantry's API.
fn map_case(case: &kueue_cases::Case) -> Result<Mapped, String> {
    use kueue_cases::Kind;
    if let Kind::Targets { .. } = case.kind {
        return Err("GetTargets: the victims Kueue would pick for a preemptor; no Workload condition shows them".into());
    }
    if case.cqs.len() > TEAMS.len() {
        return Err(format!(
            "{} ClusterQueues; Gantry seeds {} teams",
            case.cqs.len(),
            TEAMS.len()
        ));
    }
    if !case.cohort && case.cqs.len() > 1 {
        return Err("ClusterQueues without a cohort: Gantry's teams of a pool share one".into());
    }
    let nodes = case
        .nodes
        .unwrap_or_else(|| case.cqs.iter().map(|q| q.nominal).sum());
    if nodes > POOL_NODES {
        return Err(format!("needs {nodes} nodes; {POOL} has {POOL_NODES}"));
    }
    if let Some(q) = case
        .cqs
        .iter()
        .find(|q| q.borrowing_limit.is_some_and(|b| b > POOL_NODES))
    {
        return Err(format!(
            "{}: borrowing limit over the pool's {POOL_NODES} nodes",
            q.name
        ));
    }
    let all = case.admitted.iter().chain(case.pending);
    if let Some(w) = all.clone().find(|w| w.units == 0 || w.units > POOL_NODES) {
        return Err(format!(
            "{} asks for {} nodes; a launch takes 1 to {POOL_NODES}",
            w.name, w.units
        ));
    }
    let mut values: Vec<i32> = all.map(|w| w.priority).collect();
    values.sort();
    values.dedup();
    if values.len() > app::model::Priority::ALL.len() {
        return Err(format!(
            "{} priority values; Gantry has 3 classes",
            values.len()
        ));
    }
    Ok(Mapped {
        team_of: case
            .cqs
            .iter()
            .enumerate()
            .map(|(i, q)| (q.name, i))
            .collect(),
        priority_of: values.into_iter().zip(app::model::Priority::ALL).collect(),
    })
}

/// The `Preempted` reason the script gives a victim. The table names victims, not their
/// preemptors, so this is our reading of each case, stated here: a victim whose
/// ClusterQueue also gets a higher-priority workload admitted in the case was preempted
/// within its ClusterQueue (`InClusterQueue`); any other was reclaimed by another
/// ClusterQueue of the cohort (`InCohortReclamation`).
fn kueue_reason(case: &kueue_cases::Case, victim: &kueue_cases::Wl) -> &'static str {
    let same_cq_preemptor = case
        .pending
        .iter()
        .filter(|w| case.want_admitted.contains(&w.name))
        .any(|w| w.cq == victim.cq && w.priority > victim.priority);
    if same_cq_preemptor {
        "InClusterQueue"
    } else {
        "InCohortReclamation"
    }
}

/// What the job page must say for a `Preempted` reason (Kueue's reason in words).
fn sentence(kueue_reason: &str) -> &'static str {
    match kueue_reason {
        "InClusterQueue" => "Preempted by a higher-priority job of the same team",
        _ => "Preempted: another team reclaimed its quota",
    }
}

/// Kueue's message for a workload it keeps pending (scripted, in Kueue's words; it names
/// the workload so each job's reason can be told apart).
fn pending_message(w: &kueue_cases::Wl) -> String {
    format!(
        "couldn't assign flavors to pod set node: insufficient unused quota for nvidia.com/gpu in flavor {POOL}, {} more needed (workload {})",
        w.units * GPUS,
        w.name
    )
}

/// One case through the kube back end: quotas, launches in creation order, the case's
/// initial admissions, then Kueue's expected outcome scripted into the double; Gantry's API
/// must show exactly that outcome.
async fn replay(case: &kueue_cases::Case, m: &Mapped) {
    let src = case.source;
    let dir = tempfile::tempdir().unwrap();
    let api = ApiServer::start().await;
    let config = kube_config(dir.path(), &api, "case");
    let g = start_gantry(&config).await;

    // A template for every whole-node gang of the pool (the seeded ones take a few sizes).
    let db = g.running.portal.db();
    let mut t = db
        .list_templates()
        .await
        .unwrap()
        .into_iter()
        .find(|t| t.name == "llama-3.1-8b-fsdp")
        .unwrap();
    t.name = "kueue-case".into();
    t.version = 1;
    t.allowed_gpus = (1..=POOL_NODES).map(|u| u * GPUS).collect();
    db.insert_template(&t, chrono::Utc::now(), None)
        .await
        .unwrap();

    // The case's ClusterQueues as the teams' quotas in the pool (a team without one: none).
    let carol = sign_in(&g.base, "carol").await;
    for (i, (team, _)) in TEAMS.iter().enumerate() {
        let body = match case.cqs.get(i) {
            Some(q) => json!({
                "nominal_gpus": q.nominal * GPUS,
                "borrowing_limit_gpus": q.borrowing_limit.map(|b| b * GPUS),
                "lending_limit_gpus": q.lending_limit.map(|l| l * GPUS),
                "queueing_strategy": if q.strict { "StrictFIFO" } else { "BestEffortFIFO" },
            }),
            None => {
                json!({"nominal_gpus": 0, "borrowing_limit_gpus": 0, "lending_limit_gpus": null})
            }
        };
        let url = format!("{}/api/v1/quotas/{team}/{POOL}", g.base);
        let res = carol.get(&url).send().await.unwrap();
        let tag = res.headers()["etag"].to_str().unwrap().to_string();
        let res = carol
            .put(&url)
            .header("If-Match", tag)
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = res.status();
        assert!(
            status.is_success(),
            "{src}: quota of {team}: {status} {}",
            res.text().await.unwrap()
        );
    }

    // Launches in creation order, each by a member of its ClusterQueue's team.
    let mut clients = Vec::new();
    for (_, user) in TEAMS {
        clients.push(sign_in(&g.base, user).await);
    }
    let mut all: Vec<&kueue_cases::Wl> = case.admitted.iter().chain(case.pending).collect();
    all.sort_by_key(|w| w.created);
    let mut ids = std::collections::HashMap::new();
    for w in &all {
        let team = m.team_of[w.cq];
        let j = launch(
            &clients[team],
            &g.base,
            json!({"template": "kueue-case", "gpus": w.units * GPUS, "pool": POOL,
                   "team": TEAMS[team].0, "priority": m.priority_of[&w.priority], "name": w.name}),
        )
        .await;
        ids.insert(w.name, j["id"].as_str().unwrap().to_string());
    }

    // Where the case starts: its admitted workloads hold their quota.
    let mut admitted: Vec<&kueue_cases::Wl> = case.admitted.iter().collect();
    admitted.sort_by_key(|w| w.admitted_at);
    for w in &admitted {
        api.admit(&ids[w.name]).await;
    }
    for w in &admitted {
        until(
            &carol,
            &g.base,
            &ids[w.name],
            &format!("{src}: {} running", w.name),
            |j| j["state"] == "running",
        )
        .await;
    }

    // Kueue's expected outcome: the victims evicted, then the admissions, then why the rest
    // waits.
    let named = |n: &str| *all.iter().find(|w| w.name == n).unwrap();
    let mut reasons = std::collections::HashMap::new();
    for v in case.want_preempted {
        let reason = kueue_reason(case, named(v));
        reasons.insert(*v, reason);
        api.preempt(&ids[v], reason).await;
    }
    for a in case.want_admitted {
        api.admit(&ids[a]).await;
    }
    for p in case.want_pending {
        api.pend(&ids[p], &pending_message(named(p))).await;
    }

    // What Gantry must show.
    let holds = |n: &str| {
        case.want_admitted.contains(&n)
            || (case.admitted.iter().any(|w| w.name == n) && !case.want_preempted.contains(&n))
    };
    for w in &all {
        let id = &ids[w.name];
        let preemptions: Vec<&str> = reasons
            .get(w.name)
            .map(|r| vec![sentence(r)])
            .unwrap_or_default();
        if holds(w.name) {
            let j = until(
                &carol,
                &g.base,
                id,
                &format!("{src}: {} running", w.name),
                |j| j["state"] == "running",
            )
            .await;
            assert_eq!(j["preemptions"], json!([]), "{src}: {}: {j}", w.name);
            continue;
        }
        // Pending: its place in its team's queue is Kueue's BestEffortFIFO order (priority,
        // higher first, then creation) among the case's pending workloads of its queue.
        let mut queue: Vec<&&kueue_cases::Wl> = all
            .iter()
            .filter(|o| o.cq == w.cq && !holds(o.name))
            .collect();
        queue.sort_by_key(|o| (std::cmp::Reverse(o.priority), o.created));
        let position = queue.iter().position(|o| o.name == w.name).unwrap() + 1;
        let reason = if case.want_pending.contains(&w.name) {
            format!("Kueue: {}", pending_message(w))
        } else if reasons.contains_key(w.name) {
            "Kueue: Preempted; waiting for quota".to_string()
        } else {
            "Waiting for Kueue to consider it".to_string()
        };
        let what = format!(
            "{src}: {} queued at team position {position}, preempted {preemptions:?}, waiting because {reason:?}",
            w.name
        );
        until(&carol, &g.base, id, &what, |j| {
            j["state"] == "queued"
                && j["queue_position_in_team"] == position
                && j["pending_reason"] == reason.as_str()
                && j["preemptions"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|p| p["reason"].as_str().unwrap())
                    .collect::<Vec<_>>()
                    == preemptions
        })
        .await;
    }
    g.running.stop().await;
    api.down();
}

/// Kueue's conformance table replayed through the kube back end: for each case that maps
/// onto the seeded teams (at most 3 ClusterQueues), priorities (at most 3 values) and pool
/// (at most 16 nodes), Kueue's expected result is scripted into the double and Gantry's API
/// must show it: the admitted jobs running, the preempted ones queued again with a
/// preemption that says why, the pending ones queued in Kueue's order with Kueue's message.
/// Skipped cases are printed with the reason (run with `--nocapture` to see them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kueue_conformance_cases_show_kueues_expected_outcome_on_the_kube_back_end() {
    let mut replayed = Vec::new();
    let mut skipped = Vec::new();
    for case in kueue_cases::CASES {
        match map_case(case) {
            Ok(m) => {
                replay(case, &m).await;
                replayed.push(case.source);
            }
            Err(why) => skipped.push(format!("{}: {why}", case.source)),
        }
    }
    println!("replayed {} Kueue cases:", replayed.len());
    for r in &replayed {
        println!("  {r}");
    }
    println!(
        "skipped {} (and {} listed as not ported in the table):",
        skipped.len(),
        kueue_cases::NOT_PORTED.len()
    );
    for s in &skipped {
        println!("  {s}");
    }
    assert!(
        replayed.len() >= 27,
        "only {} cases replayed",
        replayed.len()
    );
}
