//! The whole flow on the Kubernetes back end, over real HTTP against the in-process API
//! server double of `support/apiserver.rs`: launch → admitted → running → succeeded, a
//! reclaim preemption with its reason, queue position from the visibility API, cancel, the
//! API server going away and coming back, and Gantry restarting with a launch it stored but
//! never sent.

mod support;

use std::time::Duration;

use gantry::cluster::{PoolSpec, QueueingStrategy};
use gantry::config::{ClusterBackend, Config};
use gantry::startup::{leptos_options, start, Running};
use serde_json::{json, Value};
use support::apiserver::ApiServer;

struct Gantry {
    base: String,
    running: Running,
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

/// The demo's pools, as the API server double's admission rules need them.
fn seeded_pools() -> [PoolSpec; 2] {
    let pool = |name: &str, gpu_model: &str, nodes| PoolSpec {
        name: name.into(),
        gpu_model: gpu_model.into(),
        nodes,
        strategy: QueueingStrategy::BestEffortFifo,
    };
    [pool("hgx-h100", "H100", 16), pool("hgx-h200", "H200", 4)]
}

fn llama(gpus: u32) -> Value {
    json!({"template": "llama-3.1-8b-fsdp", "gpus": gpus, "pool": "hgx-h100"})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn launch_run_preempt_cancel_finish_outage_and_restart_against_an_api_server_double() {
    let dir = tempfile::tempdir().unwrap();
    let pools = seeded_pools();
    let api = ApiServer::start(&pools).await;
    let mut config = Config::default();
    config.server.addr = "127.0.0.1:0".parse().unwrap();
    config.database.url =
        format!("sqlite://{}?mode=rwc", dir.path().join("flow.db").display()).into();
    config.demo.jobs = false;
    config.demo.history = false;
    config.cluster.backend = ClusterBackend::Kube;
    config.kube.kubeconfig = Some(api.kubeconfig(dir.path()));
    config.kube.timeout_s = 2;

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
    until(&alice, &g.base, &id2, "running", |j| {
        j["state"] == "running"
    })
    .await;
    let j3 = launch(&dave, &g.base, llama(32)).await;
    let id3 = j3["id"].as_str().unwrap().to_string();
    until(&dave, &g.base, &id3, "running", |j| j["state"] == "running").await;

    // 3. speech claims its nominal 32: Kueue reclaims nlp's borrowed GPUs.
    let j4 = launch(&erin, &g.base, llama(32)).await;
    let id4 = j4["id"].as_str().unwrap().to_string();
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
    let reason = back["pending_reason"].as_str().unwrap();
    assert!(
        reason.starts_with("Kueue: couldn't assign flavors"),
        "{reason}"
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
        .unwrap()
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(list.iter().filter(|j| j["id"] == id5.as_str()).count(), 1);
    g.running.stop().await;
}

/// Where a job stands, in terms both back ends share (the sim's pods start on its clock,
/// so "admitted" and "running" are one: it holds its GPUs).
fn standing(j: &Value) -> String {
    let state = match j["state"].as_str().unwrap() {
        "admitted" | "running" => "holds GPUs",
        other => other,
    };
    let reasons: Vec<&str> = j["preemptions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["reason"].as_str().unwrap())
        .collect();
    format!(
        "{state} position={} team_position={} preempted={reasons:?}",
        j["queue_position"], j["queue_position_in_team"]
    )
}

/// One behavioural scenario, run against a back end: borrowing, a quota-held job, a reclaim
/// preemption, and a cancel that moves the queue. Returns each job's standing after each step.
async fn scenario(backend: ClusterBackend) -> Vec<(String, String)> {
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config::default();
    config.server.addr = "127.0.0.1:0".parse().unwrap();
    config.database.url = format!("sqlite://{}?mode=rwc", dir.path().join("s.db").display()).into();
    config.demo.jobs = false;
    config.demo.history = false;
    config.sim.clock = gantry::config::ClockMode::Manual;
    let mut _api = None;
    if backend == ClusterBackend::Kube {
        let pools = seeded_pools();
        let api = ApiServer::start(&pools).await;
        config.cluster.backend = ClusterBackend::Kube;
        config.kube.kubeconfig = Some(api.kubeconfig(dir.path()));
        config.kube.timeout_s = 2;
        _api = Some(api);
    }
    let g = start_gantry(&config).await;
    let alice = sign_in(&g.base, "alice").await;
    let dave = sign_in(&g.base, "dave").await;
    let erin = sign_in(&g.base, "erin").await;
    // the admin reads every team's jobs
    let carol = sign_in(&g.base, "carol").await;
    let mut ids: Vec<(&str, String)> = Vec::new();
    let mut out = Vec::new();
    // Waits until every job is where the step leaves it (the kube watch is asynchronous),
    // then records where each stands.
    async fn settle(
        http: &reqwest::Client,
        base: &str,
        ids: &[(&str, String)],
        expect: &[(&str, &str)],
        out: &mut Vec<(String, String)>,
        step: &str,
    ) {
        for (label, state) in expect {
            let id = &ids.iter().find(|(l, _)| l == label).unwrap().1;
            until(http, base, id, state, |j| {
                let s = j["state"].as_str().unwrap();
                let holds = s == "admitted" || s == "running";
                (if *state == "holds" {
                    holds
                } else {
                    s == *state
                }) && (s != "queued" || !j["queue_position"].is_null())
            })
            .await;
        }
        for (label, id) in ids {
            out.push((
                format!("{step}: {label}"),
                standing(&job(http, base, id).await),
            ));
        }
    }
    let mut go =
        |label: &'static str, j: Value| ids.push((label, j["id"].as_str().unwrap().to_string()));

    go("nlp-64", launch(&alice, &g.base, llama(64)).await);
    go("nlp-32-borrows", launch(&alice, &g.base, llama(32)).await);
    go("vision-32", launch(&dave, &g.base, llama(32)).await);
    settle(
        &carol,
        &g.base,
        &ids,
        &[
            ("nlp-64", "holds"),
            ("nlp-32-borrows", "holds"),
            ("vision-32", "holds"),
        ],
        &mut out,
        "1 filled",
    )
    .await;
    let mut go =
        |label: &'static str, j: Value| ids.push((label, j["id"].as_str().unwrap().to_string()));
    go(
        "nlp-16-over-limit",
        launch(&alice, &g.base, llama(16)).await,
    );
    settle(
        &carol,
        &g.base,
        &ids,
        &[("nlp-16-over-limit", "queued")],
        &mut out,
        "2 over the limit",
    )
    .await;
    let mut go =
        |label: &'static str, j: Value| ids.push((label, j["id"].as_str().unwrap().to_string()));
    go(
        "speech-32-reclaims",
        launch(&erin, &g.base, llama(32)).await,
    );
    settle(
        &carol,
        &g.base,
        &ids,
        &[
            ("speech-32-reclaims", "holds"),
            ("nlp-32-borrows", "queued"),
        ],
        &mut out,
        "3 reclaim",
    )
    .await;
    let over = ids
        .iter()
        .find(|(l, _)| *l == "nlp-16-over-limit")
        .unwrap()
        .1
        .clone();
    let res = alice
        .post(format!("{}/api/v1/jobs/{over}/cancel", g.base))
        .send()
        .await
        .unwrap();
    assert!(res.status().is_success());
    settle(
        &carol,
        &g.base,
        &ids,
        &[("nlp-16-over-limit", "cancelled")],
        &mut out,
        "4 cancel",
    )
    .await;
    g.running.stop().await;
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_scenario_agrees_on_the_sim_and_the_kube_back_end() {
    let sim = scenario(ClusterBackend::Sim).await;
    let kube = scenario(ClusterBackend::Kube).await;
    // the scenario itself, as Kueue's rules say it goes: the preempted job keeps its original
    // submission time, so it is back at the head of the queue, ahead of the later nlp job
    let at = |o: &[(String, String)], k: &str| o.iter().find(|(s, _)| s == k).unwrap().1.clone();
    assert_eq!(at(&sim, "3 reclaim: nlp-32-borrows"), "queued position=1 team_position=1 preempted=[\"Preempted: team speech reclaimed its quota\"]", "{sim:#?}");
    assert!(
        at(&sim, "4 cancel: nlp-32-borrows").starts_with("queued position=1 team_position=1"),
        "{sim:#?}"
    );
    // and both back ends agree on every step, but for the words of the preemption reason
    // (Kueue's condition names the cause, not the team)
    let normalise = |o: Vec<(String, String)>| -> Vec<(String, String)> {
        o.into_iter()
            .map(|(k, v)| {
                (
                    k,
                    v.replace("team speech reclaimed", "another team reclaimed"),
                )
            })
            .collect()
    };
    assert_eq!(normalise(sim), normalise(kube));
}

/// Gantry is down while a job ends; on restart the watch's first list brings the end in at
/// the time Kueue's `Finished` condition records, so the job's run (and its GPU-hours) ends
/// then, not when Gantry came back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_that_ended_during_an_outage_ends_at_its_condition_time() {
    let dir = tempfile::tempdir().unwrap();
    let api = ApiServer::start(&seeded_pools()).await;
    let mut config = Config::default();
    config.server.addr = "127.0.0.1:0".parse().unwrap();
    config.database.url = format!(
        "sqlite://{}?mode=rwc",
        dir.path().join("outage.db").display()
    )
    .into();
    config.demo.jobs = false;
    config.demo.history = false;
    config.cluster.backend = ClusterBackend::Kube;
    config.kube.kubeconfig = Some(api.kubeconfig(dir.path()));
    config.kube.timeout_s = 2;

    let g = start_gantry(&config).await;
    let alice = sign_in(&g.base, "alice").await;
    let j = launch(&alice, &g.base, llama(16)).await;
    let id = j["id"].as_str().unwrap().to_string();
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
        .db
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
    g.running.stop().await;
}
