//! Invariants of the whole portal on the sim back end, checked after every step of random
//! sequences of launches, cancels, quota edits (nominal, borrowing, lending, queue order),
//! clock advances and server restarts, driven over HTTP like any client:
//! - the jobs the API calls admitted or running are exactly the cluster's admitted workloads;
//! - per pool, admitted GPUs never exceed the pool; per team, never more than nominal plus
//!   borrowing limit (nor more than the pool when the borrowing is unlimited);
//! - every accepted launch exists exactly once, and ends only by its runtime, a cancel its
//!   user asked for, or (in between) preemptions that name why.
//!
//! Cases are bounded (`GANTRY_INVARIANT_CASES`, default 6, each up to 40 steps) to keep
//! `make test` short; a failure prints the sequence proptest shrank it to.

use std::collections::{HashMap, HashSet};

use gantry::cluster::WorkloadPhase;
use gantry::startup::{leptos_options, start, Running};
use proptest::prelude::*;
use reqwest::StatusCode;
use serde_json::{json, Value};

#[path = "support/session.rs"]
mod session;
#[path = "support/config.rs"]
mod test_config;
use test_config::test_config as config;

const TEAMS: [(&str, &str); 3] = [("nlp", "alice"), ("vision", "dave"), ("speech", "erin")];
const POOLS: [&str; 2] = ["hgx-h100", "hgx-h200"];
/// Sub-node gangs too (mistral-7b-sft takes 1 to 16 GPUs): nodes fragment, which once made
/// two teams evict each other for room without end.
const SIZES: [u32; 7] = [1, 2, 4, 8, 16, 32, 64];
const PRIORITIES: [&str; 3] = ["low", "normal", "high"];

#[derive(Clone, Debug)]
enum Op {
    Launch {
        team: usize,
        pool: usize,
        size: usize,
        priority: usize,
        runtime_min: u32,
    },
    /// Cancel the n-th (mod count) launched job that has not ended.
    Cancel(usize),
    Quota {
        team: usize,
        pool: usize,
        nominal_eighths: u32,
        borrowing: Option<u32>,
        lending_eighths: Option<u32>,
        strict: bool,
    },
    Advance(u32),
    Restart,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..3usize, 0..2usize, 0..7usize, 0..3usize, 10..240u32).prop_map(
            |(team, pool, size, priority, runtime_min)| Op::Launch { team, pool, size, priority, runtime_min }
        ),
        2 => (0..64usize).prop_map(Op::Cancel),
        2 => (0..3usize, 0..2usize, 0..9u32, proptest::option::of(0..9u32), proptest::option::of(0..9u32), any::<bool>())
            .prop_map(|(team, pool, nominal_eighths, borrowing, lending_eighths, strict)| Op::Quota {
                team, pool, nominal_eighths, borrowing, lending_eighths, strict
            }),
        3 => (1..240u32).prop_map(Op::Advance),
        1 => Just(Op::Restart),
    ]
}

struct World {
    running: Option<Running>,
    base: String,
    clients: HashMap<&'static str, reqwest::Client>,
    /// Every accepted launch: id → (owner, max runtime in seconds).
    launched: Vec<(String, &'static str, i64)>,
    /// Jobs a user cancelled.
    cancelled: HashSet<String>,
    /// GPUs each team held in each pool at the last check.
    held: HashMap<(&'static str, &'static str), u64>,
}

impl World {
    async fn start(url: &str) -> World {
        let running = start(config(url), leptos_options())
            .await
            .expect("server starts");
        let base = format!("http://{}", running.addr);
        let mut clients = HashMap::new();
        for user in ["alice", "dave", "erin", "carol"] {
            clients.insert(user, session::sign_in(&base, user).await);
        }
        World {
            running: Some(running),
            base,
            clients,
            launched: Vec::new(),
            cancelled: HashSet::new(),
            held: HashMap::new(),
        }
    }

    /// Stops the server (saving the sim clock) and starts another on the same database.
    async fn restart(&mut self, url: &str) {
        if let Some(old) = self.running.take() {
            old.stop().await;
        }
        let fresh = World::start(url).await;
        self.running = fresh.running;
        self.base = fresh.base;
        self.clients = fresh.clients;
    }

    fn portal(&self) -> &gantry::service::Portal {
        &self.running.as_ref().expect("a running server").portal
    }

    async fn get(&self, user: &str, path: &str) -> Value {
        let res = self.clients[user]
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::OK, "{path}");
        res.json().await.unwrap()
    }

    /// Every job the admin may see, page by page (20 a page, so the walk crosses pages):
    /// the pages together are the list, and each says the same total.
    async fn all_jobs(&self) -> Value {
        let mut all = Vec::new();
        let mut cursor: Option<String> = None;
        let mut total = None;
        loop {
            let path = match &cursor {
                Some(c) => format!("/api/v1/jobs?limit=20&cursor={c}"),
                None => "/api/v1/jobs?limit=20".to_string(),
            };
            let page = self.get("carol", &path).await;
            let jobs = page["jobs"].as_array().unwrap();
            assert!(jobs.len() <= 20, "{path}: {} jobs on a page", jobs.len());
            all.extend(jobs.iter().cloned());
            match total {
                None => total = page["total"].as_u64(),
                Some(t) => assert_eq!(page["total"].as_u64(), Some(t), "{path}"),
            }
            match page["next_cursor"].as_str() {
                Some(c) => cursor = Some(c.to_string()),
                None => break,
            }
        }
        assert_eq!(Some(all.len() as u64), total, "the pages hold the total");
        Value::Array(all)
    }

    async fn send(&self, user: &str, req: reqwest::RequestBuilder) -> (StatusCode, Value) {
        let _ = user;
        let res = req.send().await.unwrap();
        let status = res.status();
        (status, res.json().await.unwrap_or(Value::Null))
    }

    async fn apply(&mut self, op: &Op, url: &str) {
        match *op {
            Op::Launch {
                team,
                pool,
                size,
                priority,
                runtime_min,
            } => {
                let (_, user) = TEAMS[team];
                let template = if SIZES[size] < 8 {
                    "mistral-7b-sft"
                } else {
                    "llama-3.1-8b-fsdp"
                };
                let body = json!({
                    "template": template,
                    "gpus": SIZES[size],
                    "pool": POOLS[pool],
                    "priority": PRIORITIES[priority],
                    "max_runtime_s": runtime_min * 60,
                });
                let req = self.clients[user]
                    .post(format!("{}/api/v1/jobs", self.base))
                    .json(&body);
                let (status, job) = self.send(user, req).await;
                match status {
                    StatusCode::CREATED => self.launched.push((
                        job["id"].as_str().unwrap().to_string(),
                        user,
                        i64::from(runtime_min) * 60,
                    )),
                    // Larger than the pool (64 GPUs in hgx-h200): refused, naming the field.
                    StatusCode::UNPROCESSABLE_ENTITY => {
                        assert_eq!(job["error"]["field"], "gpus", "{job}");
                        assert!(
                            SIZES[size] > 32 && pool == 1,
                            "refused a launch that fits the pool: {job}"
                        );
                    }
                    s => panic!("launch answered {s}: {job}"),
                }
            }
            Op::Cancel(n) => {
                let jobs = self.all_jobs().await;
                let active: Vec<(String, String)> = self
                    .launched
                    .iter()
                    .filter(|(id, _, _)| {
                        jobs.as_array().unwrap().iter().any(|j| {
                            j["id"] == *id.as_str()
                                && matches!(
                                    j["state"].as_str(),
                                    Some("queued" | "admitted" | "running")
                                )
                        })
                    })
                    .map(|(id, user, _)| (id.clone(), user.to_string()))
                    .collect();
                if active.is_empty() {
                    return;
                }
                let (id, user) = &active[n % active.len()];
                let req = self.clients[user.as_str()]
                    .post(format!("{}/api/v1/jobs/{id}/cancel", self.base))
                    .json(&json!({}));
                let (status, body) = self.send(user, req).await;
                assert_eq!(status, StatusCode::OK, "{body}");
                self.cancelled.insert(id.clone());
            }
            Op::Quota {
                team,
                pool,
                nominal_eighths,
                borrowing,
                lending_eighths,
                strict,
            } => {
                let (team, _) = TEAMS[team];
                let pool = POOLS[pool];
                let capacity = if pool == "hgx-h100" { 128 } else { 32 };
                let nominal = capacity * nominal_eighths / 8;
                let url = format!("{}/api/v1/quotas/{team}/{pool}", self.base);
                let carol = &self.clients["carol"];
                let res = carol.get(&url).send().await.unwrap();
                assert_eq!(res.status(), StatusCode::OK);
                let tag = res.headers()["etag"].to_str().unwrap().to_string();
                let body = json!({
                    "nominal_gpus": nominal,
                    "borrowing_limit_gpus": borrowing.map(|b| capacity * b / 8),
                    "lending_limit_gpus": lending_eighths.map(|l| nominal * l / 8),
                    "queueing_strategy": if strict { "StrictFIFO" } else { "BestEffortFIFO" },
                });
                let req = carol.put(&url).header("If-Match", tag).json(&body);
                let (status, cell) = self.send("carol", req).await;
                assert_eq!(status, StatusCode::OK, "{body}: {cell}");
            }
            Op::Advance(minutes) => {
                let req = self.clients["carol"]
                    .post(format!("{}/api/v1/sim/advance", self.base))
                    .json(&json!({ "seconds": i64::from(minutes) * 60 }));
                let (status, body) = self.send("carol", req).await;
                assert_eq!(status, StatusCode::OK, "{body}");
            }
            Op::Restart => self.restart(url).await,
        }
        self.portal().sync().await;
    }

    async fn check(&mut self, step: usize, op: &Op) {
        let ctx = format!("after step {step} ({op:?})");
        let jobs = self.all_jobs().await;
        let jobs = jobs.as_array().unwrap();
        // Every accepted launch exactly once, and nothing else.
        let mut seen: HashMap<&str, usize> = HashMap::new();
        for j in jobs {
            *seen.entry(j["id"].as_str().unwrap()).or_default() += 1;
        }
        for (id, _, _) in &self.launched {
            assert_eq!(
                seen.get(id.as_str()),
                Some(&1),
                "{ctx}: launch {id} is listed {:?} times",
                seen.get(id.as_str())
            );
        }
        assert_eq!(
            seen.len(),
            self.launched.len(),
            "{ctx}: jobs nobody launched are listed"
        );

        // Admitted or running in the API == admitted in the cluster, on the same nodes; queued
        // in the API == pending in the cluster.
        let listed = self.portal().cluster().workloads().await.unwrap();
        let mut pending: Vec<&str> = listed
            .iter()
            .filter(|(_, p)| matches!(p, WorkloadPhase::Pending { .. }))
            .map(|(id, _)| id.as_str())
            .collect();
        let mut queued: Vec<&str> = jobs
            .iter()
            .filter(|j| j["state"] == "queued")
            .map(|j| j["id"].as_str().unwrap())
            .collect();
        pending.sort();
        queued.sort();
        assert_eq!(
            queued, pending,
            "{ctx}: the API's queued jobs are not the cluster's pending ones"
        );
        let cluster: HashMap<String, Vec<String>> = listed
            .into_iter()
            .filter_map(|(id, phase)| match phase {
                WorkloadPhase::Admitted { nodes, .. } => Some((id, nodes)),
                WorkloadPhase::Pending { .. } => None,
            })
            .collect();
        let api: HashMap<String, Vec<String>> = jobs
            .iter()
            .filter(|j| matches!(j["state"].as_str(), Some("admitted" | "running")))
            .map(|j| {
                let nodes = j["node_names"]
                    .as_array()
                    .map(|a| a.iter().map(|n| n.as_str().unwrap().to_string()).collect())
                    .unwrap_or_default();
                (j["id"].as_str().unwrap().to_string(), nodes)
            })
            .collect();
        let mut a: Vec<_> = api.keys().collect();
        let mut c: Vec<_> = cluster.keys().collect();
        a.sort();
        c.sort();
        assert_eq!(a, c, "{ctx}: the API's admitted jobs are not the cluster's");
        for (id, nodes) in &api {
            let mut x = nodes.clone();
            let mut y = cluster[id].clone();
            x.sort();
            y.sort();
            assert_eq!(x, y, "{ctx}: nodes of {id}");
        }

        // Capacity and quota.
        let quotas = self.get("carol", "/api/v1/quotas").await;
        for pool in POOLS {
            let capacity: u64 = if pool == "hgx-h100" { 128 } else { 32 };
            let in_pool =
                |j: &&Value| j["pool"] == pool && api.contains_key(j["id"].as_str().unwrap());
            let used: u64 = jobs
                .iter()
                .filter(in_pool)
                .map(|j| j["gpus"].as_u64().unwrap())
                .sum();
            assert!(
                used <= capacity,
                "{ctx}: {used} GPUs admitted in {pool} of {capacity}"
            );
            for (team, _) in TEAMS {
                let held: u64 = jobs
                    .iter()
                    .filter(in_pool)
                    .filter(|j| j["team"] == team)
                    .map(|j| j["gpus"].as_u64().unwrap())
                    .sum();
                let q = quotas
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|q| q["team"] == team && q["pool"] == pool)
                    .unwrap_or_else(|| panic!("{ctx}: no quota for {team} in {pool}"));
                let nominal = q["nominal_gpus"].as_u64().unwrap();
                // Kueue's most: nominal + borrowing, bounded by what the others lend.
                let lendable: u64 = quotas
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|o| o["pool"] == pool && o["team"] != team)
                    .map(|o| {
                        let n = o["nominal_gpus"].as_u64().unwrap();
                        o["lending_limit_gpus"].as_u64().map_or(n, |l| l.min(n))
                    })
                    .sum();
                let borrow = q["borrowing_limit_gpus"]
                    .as_u64()
                    .map_or(lendable, |b| b.min(lendable));
                let most = (nominal + borrow).min(capacity);
                // A quota lowered under running jobs does not evict them (nor does Kueue):
                // above the bound, a team's use may only shrink.
                let prev = self.held.get(&(team, pool)).copied().unwrap_or(0);
                assert!(
                    held <= most || held <= prev,
                    "{ctx}: {team} holds {held} GPUs in {pool}, more than its {most} (nominal {nominal} + {borrow} borrowable) and more than before ({prev})"
                );
                self.held.insert((team, pool), held);
            }
        }

        // How jobs ended.
        for j in jobs {
            let id = j["id"].as_str().unwrap();
            let (_, _, runtime) = self.launched.iter().find(|(l, _, _)| l == id).unwrap();
            let job = self.get("carol", &format!("/api/v1/jobs/{id}")).await;
            for e in job["events"].as_array().unwrap() {
                if e["kind"] == "preempted" {
                    assert!(
                        e["reason"].as_str().unwrap().starts_with("Preempted"),
                        "{ctx}: a preemption of {id} that does not say why: {e}"
                    );
                }
            }
            match j["state"].as_str().unwrap() {
                "cancelled" => assert!(
                    self.cancelled.contains(id),
                    "{ctx}: {id} was cancelled by nobody: {job}"
                ),
                "succeeded" => {
                    let admitted =
                        chrono::DateTime::parse_from_rfc3339(job["admitted_at"].as_str().unwrap())
                            .unwrap();
                    let finished =
                        chrono::DateTime::parse_from_rfc3339(job["finished_at"].as_str().unwrap())
                            .unwrap();
                    assert_eq!(
                        (finished - admitted).num_seconds(),
                        *runtime,
                        "{ctx}: {id} ended before or after its runtime: {job}"
                    );
                }
                // Preempted before: Kueue's max execution time counts every admission
                // (`accumulatedPastExecutionTimeSeconds`), and the job is stopped once they
                // add up to its runtime.
                "failed" => {
                    let at = |e: &Value| {
                        chrono::DateTime::parse_from_rfc3339(e["at"].as_str().unwrap()).unwrap()
                    };
                    let mut admitted_for = 0;
                    let mut since = None;
                    for e in job["events"].as_array().unwrap() {
                        match e["kind"].as_str().unwrap() {
                            "admitted" => since = Some(at(e)),
                            "preempted" | "failed" => {
                                if let Some(s) = since.take() {
                                    admitted_for += (at(e) - s).num_seconds();
                                }
                            }
                            _ => {}
                        }
                    }
                    assert!(
                        !job["preemptions"].as_array().unwrap().is_empty()
                            && job["failure"].is_null()
                            && job["events"].as_array().unwrap().last().is_some_and(|e| e
                                ["reason"]
                                .as_str()
                                .unwrap()
                                .starts_with("Stopped at its max runtime")),
                        "{ctx}: {id} failed although nothing fails it: {job}"
                    );
                    assert_eq!(
                        admitted_for, *runtime,
                        "{ctx}: {id} was stopped before or after its runtime, over all its admissions: {job}"
                    );
                }
                _ => {}
            }
        }
    }
}

fn cases() -> u32 {
    std::env::var("GANTRY_INVARIANT_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(6)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), max_shrink_iters: 64, ..ProptestConfig::default() })]

    #[test]
    fn the_portal_tells_what_the_cluster_does(ops in proptest::collection::vec(op(), 1..60)) {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        rt.block_on(async {
            let dir = tempfile::tempdir().unwrap();
            let url = format!("sqlite://{}?mode=rwc", dir.path().join("gantry.db").display());
            let mut w = World::start(&url).await;
            for (i, op) in ops.iter().enumerate() {
                w.apply(op, &url).await;
                w.check(i, op).await;
            }
            if let Some(r) = w.running.take() {
                r.stop().await;
            }
        });
    }
}
