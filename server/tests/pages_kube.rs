//! Server-rendered pages always answer: many pages at once, on the Kubernetes back end, with
//! the API server up, down, back, and flapping, while other Gantry servers start and stop in
//! the same process (as the in-process test runs did when a page once never answered).
//!
//! The cause was leptos_server's process-wide `SuppressResourceLoad` flag, set while any
//! server builds its route list: a page's `Resource` first polled in that window waited on
//! `pending()` forever (leptos-rs/leptos#4773). `gantry::startup::route_list` now builds the
//! list once per process. The `trigger` thread below asks for the route list in a loop, as
//! every server start did; with the list built per call, most pages here never answer.

#[allow(dead_code)]
mod support;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use gantry::config::{ClockMode, ClusterBackend, Config};
use gantry::startup::{leptos_options, start};
use serde_json::{json, Value};
use support::apiserver::ApiServer;
use support::session::sign_in;

/// Longest a page may take; the kube calls on a page path time out after 1 s here.
const PAGE_LIMIT: Duration = Duration::from_secs(5);

fn sim_config(dir: &std::path::Path) -> Config {
    let mut c = Config::default();
    c.server.addr = "127.0.0.1:0".parse().unwrap();
    c.database.url = format!("sqlite://{}?mode=rwc", dir.join("churn.db").display()).into();
    c.sim.clock = ClockMode::Manual;
    c.demo.jobs = false;
    c.demo.history = false;
    c
}

async fn launch(http: &reqwest::Client, base: &str, body: Value) -> String {
    let res = http
        .post(format!("{base}/api/v1/jobs"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 201);
    let job: Value = res.json().await.unwrap();
    job["id"].as_str().unwrap().to_string()
}

/// Loads every page in `paths` `rounds` times, 12 at once, each within [`PAGE_LIMIT`].
async fn load_pages(
    phase: &str,
    base: &str,
    clients: &[reqwest::Client],
    paths: &[String],
    rounds: usize,
) {
    let requests = (0..rounds).flat_map(|r| {
        paths
            .iter()
            .enumerate()
            .map(move |(i, p)| (r * paths.len() + i, p.clone()))
    });
    let results: Vec<Result<(), String>> = futures::stream::iter(requests)
        .map(|(n, path)| {
            let http = clients[n % clients.len()].clone();
            let url = format!("{base}{path}");
            async move {
                let load = async {
                    let res = http.get(&url).send().await.map_err(|e| e.to_string())?;
                    let status = res.status();
                    let body = res.text().await.map_err(|e| e.to_string())?;
                    Ok::<_, String>((status, body))
                };
                match tokio::time::timeout(PAGE_LIMIT, load).await {
                    Err(_) => Err(format!(
                        "{phase}: {path} did not answer within {PAGE_LIMIT:?}"
                    )),
                    Ok(Err(e)) => Err(format!("{phase}: {path}: {e}")),
                    Ok(Ok((status, body))) => {
                        if status.is_server_error() {
                            Err(format!("{phase}: {path} answered {status}"))
                        } else if !body.contains("</html>") {
                            Err(format!(
                                "{phase}: {path} answered an unfinished page ({status})"
                            ))
                        } else {
                            Ok(())
                        }
                    }
                }
            }
        })
        .buffer_unordered(12)
        .collect()
        .await;
    let failed: Vec<String> = results.into_iter().filter_map(Result::err).collect();
    assert!(
        failed.is_empty(),
        "{} of the pages failed: {failed:#?}",
        failed.len()
    );
}

/// Longest a phase may go on loading pages while it waits for another server to start.
const START_LIMIT: Duration = Duration::from_secs(60);

/// Loads the pages six rounds, then a round at a time until another server has finished
/// starting since the phase began, so that every phase overlaps a start however fast the
/// pages are (CI once loaded all four phases in 1.2 s while one server started).
async fn overlapping_a_start(
    phase: &str,
    starts: &AtomicUsize,
    base: &str,
    clients: &[reqwest::Client],
    paths: &[String],
) {
    let (before, began) = (starts.load(Ordering::Relaxed), std::time::Instant::now());
    load_pages(phase, base, clients, paths, 6).await;
    while starts.load(Ordering::Relaxed) == before {
        assert!(
            began.elapsed() < START_LIMIT,
            "{phase}: no other server finished starting within {START_LIMIT:?}"
        );
        load_pages(phase, base, clients, paths, 1).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pages_answer_while_the_api_server_comes_and_goes_and_other_servers_start() {
    tokio::time::timeout(Duration::from_secs(240), run())
        .await
        .expect("the whole test within 240 s");
}

async fn run() {
    let dir = tempfile::tempdir().unwrap();
    let api = ApiServer::start().await;
    let mut config = Config::default();
    config.server.addr = "127.0.0.1:0".parse().unwrap();
    config.database.url = format!(
        "sqlite://{}?mode=rwc",
        dir.path().join("pages.db").display()
    )
    .into();
    config.demo.jobs = false;
    config.demo.history = false;
    config.cluster.backend = ClusterBackend::Kube;
    config.kube.kubeconfig = Some(api.kubeconfig(dir.path()));
    config.kube.timeout_s = 1;
    let g = start(config, leptos_options())
        .await
        .expect("gantry starts");
    let base = format!("http://{}", g.addr);
    let carol = sign_in(&base, "carol").await;
    let alice = sign_in(&base, "alice").await;
    let llama =
        |gpus: u32| json!({"template": "llama-3.1-8b-fsdp", "gpus": gpus, "pool": "hgx-h100"});
    let running = launch(&alice, &base, llama(8)).await;
    let queued = launch(&alice, &base, llama(16)).await;
    api.admit(&running).await;
    api.pend(
        &queued,
        "couldn't assign flavors to pod set main: insufficient unused quota",
    )
    .await;

    // Other servers start and stop in this process all along; a thread asks for the route
    // list as each start does. All of it stops when the test ends, failed or not.
    struct StopOnDrop(Arc<AtomicBool>);
    impl Drop for StopOnDrop {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Relaxed);
        }
    }
    let stop = Arc::new(AtomicBool::new(false));
    let _stop_on_drop = StopOnDrop(stop.clone());
    let starts = Arc::new(AtomicUsize::new(0));
    let churn = {
        let (stop, starts) = (stop.clone(), starts.clone());
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let d = tempfile::tempdir().unwrap();
                let other = start(sim_config(d.path()), leptos_options())
                    .await
                    .expect("another gantry starts");
                starts.fetch_add(1, Ordering::Relaxed);
                other.stop().await;
            }
        })
    };
    let trigger = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let routes = gantry::startup::route_list();
                assert!(!routes.is_empty());
                std::thread::sleep(Duration::from_millis(1));
            }
        })
    };

    let paths: Vec<String> = [
        "/",
        "/jobs",
        &format!("/jobs/{running}"),
        &format!("/jobs/{queued}"),
        "/pools",
        "/launch",
        "/launch/llama-3.1-8b-fsdp",
        "/profile",
        "/usage",
        "/admin/quotas",
        "/admin/templates",
        "/no-such-page",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    let clients = [carol, alice];

    let phase = |name: &'static str| overlapping_a_start(name, &starts, &base, &clients, &paths);
    phase("API server up").await;
    api.down();
    phase("API server down").await;
    api.up().await;
    phase("API server back").await;
    let flapping = {
        let api = api.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                tokio::time::sleep(Duration::from_millis(300)).await;
                api.down();
                tokio::time::sleep(Duration::from_millis(300)).await;
                api.up().await;
            }
        })
    };
    phase("API server flapping").await;

    stop.store(true, Ordering::Relaxed);
    flapping.await.unwrap();
    churn.await.unwrap();
    trigger.join().unwrap();
    g.stop().await;
}
