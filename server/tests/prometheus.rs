//! The `prometheus` metrics back end against a real Prometheus (Debian's `prometheus`
//! package, started here on loopback) scraping a test exporter that serves DCGM-format
//! series with known values for known pods, under both label namings real deployments use.
//! Without the binary these tests fail and say how to install it; they never skip.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{TimeDelta, Utc};
use gantry::config::{ClockMode, Config, MetricsBackend};
use gantry::metrics::prometheus::PrometheusMetrics;
use gantry::metrics::{JobGpus, Metrics};
use gantry::startup::{leptos_options, start};
use reqwest::StatusCode;
use serde_json::{json, Value};

#[path = "support/session.rs"]
mod session;

fn prometheus_bin() -> PathBuf {
    let bin = PathBuf::from(
        std::env::var("GANTRY_TEST_PROMETHEUS").unwrap_or_else(|_| "/usr/bin/prometheus".into()),
    );
    assert!(
        bin.exists(),
        "these tests run a real Prometheus and found none at {}: install Debian's package \
         (`make setup-prometheus`, i.e. `apt-get install prometheus`) or set GANTRY_TEST_PROMETHEUS",
        bin.display()
    );
    bin
}

/// A free loopback port (Prometheus needs a fixed one so a restart comes back at the same
/// address).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A Prometheus process with its own configuration and data directory.
struct Prometheus {
    port: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
}

impl Prometheus {
    /// Scrapes the exporter every second: `/direct` keeps the exporter's `namespace`/`pod`
    /// labels (`honor_labels`); `/clashing` is a target that carries its own `namespace` and
    /// `pod` (the exporter pod's), so Prometheus renames the exporter's to
    /// `exported_namespace`/`exported_pod`, as it does in many real clusters.
    fn start(exporter: SocketAddr) -> Prometheus {
        let dir = tempfile::tempdir().unwrap();
        let config = format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
             scrape_configs:\n\
             - job_name: dcgm-direct\n  honor_labels: true\n  metrics_path: /direct\n  \
               static_configs:\n  - targets: ['{exporter}']\n\
             - job_name: dcgm-clashing\n  metrics_path: /clashing\n  static_configs:\n  \
               - targets: ['{exporter}']\n    labels:\n      namespace: gpu-operator\n      \
               pod: nvidia-dcgm-exporter-7x2kq\n"
        );
        std::fs::write(dir.path().join("prometheus.yml"), config).unwrap();
        let mut p = Prometheus {
            port: free_port(),
            dir,
            child: None,
        };
        p.restart();
        p
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Starts it (again, on the same port and data) and waits until it answers.
    fn restart(&mut self) {
        let child = Command::new(prometheus_bin())
            .arg(format!(
                "--config.file={}",
                self.dir.path().join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                self.dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{}", self.port))
            .arg("--log.level=warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start prometheus");
        self.child = Some(child);
        let addr = format!("127.0.0.1:{}", self.port);
        let until = Instant::now() + Duration::from_secs(30);
        loop {
            if answers_ok(&addr, "/-/ready") {
                return;
            }
            assert!(
                Instant::now() < until,
                "Prometheus did not get ready in 30 s"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Stops it as an operator would (SIGTERM, so its data is on disk for a restart).
    fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = Command::new("kill")
                .args(["-TERM", &c.id().to_string()])
                .status();
            let until = Instant::now() + Duration::from_secs(10);
            while c.try_wait().ok().flatten().is_none() && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Waits until `query` gives at least `n` series.
    async fn wait_for(&self, query: &str, n: usize) {
        let http = reqwest::Client::new();
        let until = Instant::now() + Duration::from_secs(30);
        loop {
            let got = http
                .get(format!("{}/api/v1/query", self.url()))
                .query(&[("query", query)])
                .send()
                .await
                .ok();
            let count = match got {
                Some(r) => r
                    .json::<Value>()
                    .await
                    .ok()
                    .and_then(|v| v["data"]["result"].as_array().map(Vec::len)),
                None => None,
            };
            if count.unwrap_or(0) >= n {
                return;
            }
            assert!(
                Instant::now() < until,
                "Prometheus did not have {n} series of {query} within 30 s (has {count:?})"
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Whether `GET {path}` on `addr` answers 200 (a blocking probe: `restart` runs no runtime).
fn answers_ok(addr: &str, path: &str) -> bool {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(addr) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    let mut head = [0u8; 12];
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .is_ok()
        && s.read_exact(&mut head).is_ok()
        && &head[9..12] == b"200"
}

/// One GPU series the exporter serves.
#[derive(Clone)]
struct Gpu {
    /// `direct` or `clashing`: which scrape job sees it.
    path: &'static str,
    namespace: Option<String>,
    pod: Option<String>,
    /// `Hostname` (dcgm-exporter ≤ 4.5.3-4.8.2) or `hostname` (later).
    host_label: &'static str,
    host: String,
    gpu: u32,
    util: f64,
    /// `DCGM_FI_PROF_GR_ENGINE_ACTIVE`, a ratio, where the GPU has profiling metrics.
    active: Option<f64>,
    fb_mib: f64,
    power_w: f64,
}

impl Gpu {
    fn lines(&self, out: &mut String) {
        let mut labels = format!(
            "gpu=\"{}\",UUID=\"GPU-{:08x}-test\",device=\"nvidia{}\",modelName=\"NVIDIA H100 80GB HBM3\",{}=\"{}\",DCGM_FI_DRIVER_VERSION=\"580.105.08\"",
            self.gpu,
            fnv(&format!("{}{}", self.host, self.gpu)),
            self.gpu,
            self.host_label,
            self.host
        );
        if let (Some(ns), Some(pod)) = (&self.namespace, &self.pod) {
            labels.push_str(&format!(
                ",container=\"trainer\",namespace=\"{ns}\",pod=\"{pod}\",pod_uid=\"\""
            ));
        }
        out.push_str(&format!("DCGM_FI_DEV_GPU_UTIL{{{labels}}} {}\n", self.util));
        out.push_str(&format!(
            "DCGM_FI_DEV_FB_USED{{{labels}}} {}\n",
            self.fb_mib
        ));
        out.push_str(&format!(
            "DCGM_FI_DEV_POWER_USAGE{{{labels}}} {:.6}\n",
            self.power_w
        ));
        if let Some(a) = self.active {
            out.push_str(&format!(
                "DCGM_FI_PROF_GR_ENGINE_ACTIVE{{{labels}}} {a:.6}\n"
            ));
        }
    }
}

fn fnv(s: &str) -> u32 {
    s.bytes().fold(0x811c_9dc5u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

type Served = Arc<Mutex<Vec<Gpu>>>;

/// A DCGM-exporter stand-in: `GET /direct` and `GET /clashing` in Prometheus' text format.
async fn exporter(gpus: Served) -> SocketAddr {
    use axum::{extract::Path, routing::get, Router};
    let app = Router::new().route(
        "/{path}",
        get(move |Path(path): Path<String>| {
            let gpus = gpus.clone();
            async move {
                let mut out = String::from(
                    "# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).\n# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n",
                );
                for g in gpus.lock().unwrap().iter().filter(|g| g.path == path) {
                    g.lines(&mut out);
                }
                ([("content-type", "text/plain; version=0.0.4")], out)
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

/// The series of one pod of a job: 8 GPUs with `util(gpu)`.
fn pod_gpus(
    path: &'static str,
    namespace: &str,
    pod: &str,
    host_label: &'static str,
    host: &str,
    util: impl Fn(u32) -> f64,
    active: impl Fn(u32) -> Option<f64>,
) -> Vec<Gpu> {
    (0..8)
        .map(|g| Gpu {
            path,
            namespace: Some(namespace.into()),
            pod: Some(pod.into()),
            host_label,
            host: host.into(),
            gpu: g,
            util: util(g),
            active: active(g),
            fb_mib: 40_000.0 + 100.0 * f64::from(g),
            power_w: 300.0 + f64::from(g) + 0.5,
        })
        .collect()
}

fn job(id: &str, team: &str, gpus: u32) -> JobGpus {
    JobGpus {
        job_id: id.into(),
        team: team.into(),
        gpus,
        since: Utc::now() - TimeDelta::minutes(10),
    }
}

const JOB_A: &str = "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a01";
const JOB_B: &str = "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a02";
const JOB_C: &str = "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a03";

fn name(id: &str) -> String {
    format!("gantry-{}", id.replace('-', ""))
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_prometheus_back_end_reads_dcgm_series_as_the_exporter_serves_them() {
    // Job A: a two-node JobSet in team-nlp, labels as the exporter wrote them
    // (`namespace`/`pod`, `Hostname`). Its first pod is on the node whose name sorts last,
    // so the order must come from the pods, not the hosts.
    let mut gpus = pod_gpus(
        "direct",
        "team-nlp",
        &format!("{}-node-0-0-x7k2p", name(JOB_A)),
        "Hostname",
        "hgx-b-07",
        |g| 50.0 + f64::from(g),
        |_| None,
    );
    gpus.extend(pod_gpus(
        "direct",
        "team-nlp",
        &format!("{}-node-0-1-q9z3m", name(JOB_A)),
        "Hostname",
        "hgx-a-03",
        |g| 60.0 + f64::from(g),
        |_| None,
    ));
    // Job B: a TrainJob in team-vision behind a clashing scrape target
    // (`exported_namespace`/`exported_pod`), newer exporter (`hostname`).
    gpus.extend(pod_gpus(
        "clashing",
        "team-vision",
        &format!("{}-node-0-0-abcde", name(JOB_B)),
        "hostname",
        "hgx-c-01",
        |g| 20.0 + f64::from(g),
        |_| None,
    ));
    // Job C: GPUs with profiling metrics; engine-active is the utilization, not GPU_UTIL.
    gpus.extend(pod_gpus(
        "direct",
        "team-nlp",
        &format!("{}-node-0-0-zz9zz", name(JOB_C)),
        "Hostname",
        "hgx-d-02",
        |_| 99.0,
        |g| Some(0.30 + 0.01 * f64::from(g)),
    ));
    // Decoys: job A's pod name in another team's namespace, and idle GPUs with no pod.
    gpus.extend(pod_gpus(
        "direct",
        "team-speech",
        &format!("{}-node-0-0-x7k2p", name(JOB_A)),
        "Hostname",
        "hgx-e-05",
        |_| 0.0,
        |_| None,
    ));
    for g in 0..8 {
        let mut idle = gpus[0].clone();
        (idle.namespace, idle.pod, idle.host, idle.gpu, idle.util) =
            (None, None, "hgx-f-09".into(), g, 0.0);
        gpus.push(idle);
    }
    let total = gpus.len();
    let addr = exporter(Arc::new(Mutex::new(gpus))).await;
    let begun = Utc::now();
    let mut prom = Prometheus::start(addr);
    prom.wait_for("DCGM_FI_DEV_GPU_UTIL", total).await;
    // A few scrapes' worth of samples.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let m = PrometheusMetrics::new(&prom.url(), Duration::from_secs(2), "team-").unwrap();
    let now = Utc::now();

    let a = m
        .series(
            &job(JOB_A, "nlp", 16),
            now - TimeDelta::seconds(4),
            now,
            TimeDelta::seconds(1),
        )
        .await
        .unwrap();
    assert_eq!(a.times.len(), 5);
    assert_eq!(a.gpus.len(), 16, "two pods of 8, and not the decoys");
    for (i, track) in a.gpus.iter().enumerate() {
        let (node, base) = if i < 8 {
            ("hgx-b-07", 50.0)
        } else {
            ("hgx-a-03", 60.0)
        };
        assert_eq!(track.node.as_deref(), Some(node), "GPU {i}");
        assert_eq!(track.gpu, (i % 8) as u32);
        let r = track.readings.last().unwrap().expect("a reading now");
        assert!(close(r.util_pct, base + (i % 8) as f64), "GPU {i}: {r:?}");
        assert!(
            close(r.fb_used_mib, 40_000.0 + 100.0 * (i % 8) as f64),
            "{r:?}"
        );
        assert!(close(r.power_w, 300.5 + (i % 8) as f64), "{r:?}");
    }

    let b = m
        .series(&job(JOB_B, "vision", 8), now, now, TimeDelta::seconds(60))
        .await
        .unwrap();
    assert_eq!(
        b.gpus.len(),
        8,
        "found under exported_namespace/exported_pod"
    );
    for (g, track) in b.gpus.iter().enumerate() {
        assert_eq!(track.node.as_deref(), Some("hgx-c-01"), "from `hostname`");
        assert!(close(track.readings[0].unwrap().util_pct, 20.0 + g as f64));
    }

    let c = m
        .series(&job(JOB_C, "nlp", 8), now, now, TimeDelta::seconds(60))
        .await
        .unwrap();
    let utils: Vec<f64> = c
        .gpus
        .iter()
        .map(|t| t.readings[0].unwrap().util_pct)
        .collect();
    let want: Vec<f64> = (0..8).map(|g| 30.0 + f64::from(g)).collect();
    assert!(
        utils.iter().zip(&want).all(|(u, w)| (u - w).abs() < 1e-6),
        "engine-active wins over GPU_UTIL: {utils:?}"
    );

    // The Pools grid's read: several jobs in one query (two teams' namespaces, both label
    // namings, a job Prometheus never saw, and job A's pod name under another team: the
    // decoy's 8 idle GPUs), each job with exactly the GPUs its own read gives it, in order.
    let unseen = job("0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4aff", "nlp", 8);
    let asked = [
        job(JOB_C, "nlp", 8),
        unseen,
        job(JOB_A, "nlp", 16),
        job(JOB_B, "vision", 8),
        job(JOB_A, "speech", 8),
    ];
    let many = m
        .series_many(&asked, now, now, TimeDelta::seconds(60))
        .await
        .unwrap();
    assert_eq!(many.len(), asked.len());
    for (got, j) in many.iter().zip(&asked) {
        let one = m.series(j, now, now, TimeDelta::seconds(60)).await.unwrap();
        assert_eq!(got, &one, "{j:?}");
    }
    let counts: Vec<usize> = many.iter().map(|s| s.gpus.len()).collect();
    assert_eq!(counts, [8, 0, 16, 8, 8]);
    let util_of = |s: &gantry::metrics::JobSeries| -> f64 {
        s.gpus.iter().map(|t| t.readings[0].unwrap().util_pct).sum()
    };
    assert!(util_of(&many[2]) > 0.0 && util_of(&many[4]) == 0.0);

    // The mean of a run: the exporter's values are constant, so it is exact.
    let mean_a = m
        .interval_mean(&job(JOB_A, "nlp", 16), begun, Utc::now())
        .await
        .unwrap()
        .unwrap();
    assert!(close(mean_a, (53.5 + 63.5) / 2.0 / 100.0), "{mean_a}");
    let mean_c = m
        .interval_mean(&job(JOB_C, "nlp", 8), begun, Utc::now())
        .await
        .unwrap()
        .unwrap();
    assert!((mean_c - 0.335).abs() < 1e-6, "{mean_c}");
    // A job Prometheus has never seen: no series, no mean (never a made-up 0).
    let unknown = job("0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4aff", "nlp", 8);
    assert!(m
        .series(&unknown, now, now, TimeDelta::seconds(60))
        .await
        .unwrap()
        .gpus
        .is_empty());
    assert_eq!(
        m.interval_mean(&unknown, begun, Utc::now()).await.unwrap(),
        None
    );
    // Job A under the wrong team's namespace is not job A.
    assert!(close(
        m.interval_mean(&job(JOB_A, "speech", 8), begun, Utc::now())
            .await
            .unwrap()
            .unwrap(),
        0.0
    ));

    // Prometheus stopped mid-test: a clear error, at once.
    prom.stop();
    let t = Instant::now();
    let err = m
        .series(&job(JOB_A, "nlp", 16), now, now, TimeDelta::seconds(60))
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "metrics unavailable: Prometheus could not be reached"
    );
    assert!(m
        .interval_mean(&job(JOB_A, "nlp", 16), begun, now)
        .await
        .is_err());
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());

    // A Prometheus that takes the connection and never answers: the timeout, not a hang.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let m = PrometheusMetrics::new(
        &format!("http://{}", silent.local_addr().unwrap()),
        Duration::from_millis(500),
        "team-",
    )
    .unwrap();
    let t = Instant::now();
    let err = m
        .series(&job(JOB_A, "nlp", 16), now, now, TimeDelta::seconds(60))
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "metrics unavailable: Prometheus did not answer within 0.5 s"
    );
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
}

/// A signed-in JSON client of the portal.
struct Client {
    http: reqwest::Client,
    base: String,
}

impl Client {
    async fn sign_in(base: &str, user: &str) -> Client {
        Client {
            http: session::sign_in(base, user).await,
            base: base.into(),
        }
    }

    async fn get(&self, path: &str) -> (StatusCode, Value) {
        let res = self
            .http
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .unwrap();
        let status = res.status();
        (status, res.json().await.unwrap_or(Value::Null))
    }

    async fn post(&self, path: &str, body: Value) -> (StatusCode, Value) {
        let res = self
            .http
            .post(format!("{}{path}", self.base))
            .header("origin", &self.base)
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = res.status();
        (status, res.json().await.unwrap_or(Value::Null))
    }
}

/// Team nlp's usage since `from`: allocated, used, idle and unmeasured GPU-hours, summed
/// over the day rows (the range may cross midnight).
async fn nlp_usage(bob: &Client, from: chrono::DateTime<Utc>) -> [f64; 4] {
    let to = Utc::now() + TimeDelta::minutes(1);
    let (s, report) = bob
        .get(&format!(
            "/api/v1/usage?group_by=team&bucket=day&team=nlp&from={}&to={}",
            from.format("%Y-%m-%dT%H:%M:%SZ"),
            to.format("%Y-%m-%dT%H:%M:%SZ")
        ))
        .await;
    assert_eq!(s, StatusCode::OK, "{report}");
    let rows = report["rows"].as_array().unwrap();
    assert!(!rows.is_empty(), "{report}");
    let sum = |k: &str| rows.iter().map(|r| r[k].as_f64().unwrap()).sum::<f64>();
    [
        sum("gpu_hours_allocated"),
        sum("gpu_hours_used"),
        sum("gpu_hours_idle"),
        sum("gpu_hours_unmeasured"),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_portal_measures_runs_from_prometheus_and_keeps_serving_without_it() {
    let served: Served = Arc::new(Mutex::new(Vec::new()));
    let addr = exporter(served.clone()).await;
    let mut prom = Prometheus::start(addr);

    // The sim cluster on a clock that runs at real time, so its runs line up with
    // Prometheus' samples.
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config::default();
    config.server.addr = "127.0.0.1:0".parse().unwrap();
    config.database.url = format!(
        "sqlite://{}?mode=rwc",
        dir.path().join("gantry.db").display()
    )
    .into();
    config.sim.clock = ClockMode::Scaled;
    config.sim.time_scale = 1.0;
    config.sim.startup_s = 0;
    config.demo.jobs = false;
    config.demo.history = false;
    config.metrics.backend = Some(MetricsBackend::Prometheus);
    config.metrics.prometheus.url = prom.url();
    config.metrics.prometheus.timeout_s = 1.0;
    let running = start(config, leptos_options())
        .await
        .expect("server starts");
    let base = format!("http://{}", running.addr);
    let alice = Client::sign_in(&base, "alice").await;
    let bob = Client::sign_in(&base, "bob").await;

    let begun = Utc::now() - TimeDelta::seconds(5);
    let (s, job) = alice
        .post(
            "/api/v1/jobs",
            json!({ "template": "llama-3.1-8b-fsdp", "gpus": 16, "pool": "hgx-h100" }),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{job}");
    let id = job["id"].as_str().unwrap().to_string();
    assert_ne!(job["state"], "queued", "{job}");
    // The job's two pods appear in the exporter, as DCGM maps GPUs to pods.
    {
        let mut g = served.lock().unwrap();
        g.extend(pod_gpus(
            "direct",
            "team-nlp",
            &format!("{}-node-0-0-aaaaa", name(&id)),
            "Hostname",
            "gpu-node-1",
            |g| 60.0 + f64::from(g),
            |_| None,
        ));
        g.extend(pod_gpus(
            "clashing",
            "team-nlp",
            &format!("{}-node-0-1-bbbbb", name(&id)),
            "hostname",
            "gpu-node-2",
            |g| 70.0 + f64::from(g),
            |_| None,
        ));
    }
    prom.wait_for(
        &format!(
            "{{pod=~\"{}-.+\"}} or {{exported_pod=~\"{}-.+\"}}",
            name(&id),
            name(&id)
        ),
        16 * 3,
    )
    .await;

    // The job page's figures are the exporter's.
    let (s, u) = alice.get(&format!("/api/v1/jobs/{id}/utilization")).await;
    assert_eq!(s, StatusCode::OK, "{u}");
    assert_eq!(u["available"], true, "{u}");
    let gpus = u["gpus"].as_array().unwrap();
    assert_eq!(gpus.len(), 16, "{u}");
    let latest: BTreeMap<(String, u64), f64> = gpus
        .iter()
        .map(|g| {
            (
                (
                    g["node"].as_str().unwrap().to_string(),
                    g["gpu"].as_u64().unwrap(),
                ),
                g["util_pct"]
                    .as_array()
                    .unwrap()
                    .last()
                    .unwrap()
                    .as_f64()
                    .unwrap(),
            )
        })
        .collect();
    for g in 0..8u64 {
        assert!(
            close(latest[&("gpu-node-1".into(), g)], 60.0 + g as f64),
            "{latest:?}"
        );
        assert!(
            close(latest[&("gpu-node-2".into(), g)], 70.0 + g as f64),
            "{latest:?}"
        );
    }
    let mean = u["mean"].as_array().unwrap().last().unwrap().clone();
    assert!(close(mean["util_pct"].as_f64().unwrap(), 68.5), "{mean}");
    assert!(close(mean["power_w"].as_f64().unwrap(), 304.0), "{mean}");
    assert_eq!(u["idle"], false);

    // Prometheus goes away: the job page says so, once the answer read before is older than
    // the read memo's time to live (`server.page_cache_ms`, `db::memo`); everything else
    // still answers.
    prom.stop();
    tokio::time::sleep(Duration::from_millis(
        Config::default().server.page_cache_ms + 200,
    ))
    .await;
    let (s, u) = alice.get(&format!("/api/v1/jobs/{id}/utilization")).await;
    assert_eq!(s, StatusCode::OK, "{u}");
    assert_eq!(u["available"], false, "{u}");
    let msg = u["message"].as_str().unwrap();
    assert!(
        msg.starts_with("metrics unavailable: Prometheus could not be reached (")
            && msg.ends_with(" UTC)"),
        "{msg}"
    );
    let (s, j) = alice.get(&format!("/api/v1/jobs/{id}")).await;
    assert_eq!(s, StatusCode::OK, "{j}");
    let (s, pools) = alice.get("/api/v1/pools").await;
    assert_eq!(s, StatusCode::OK, "{pools}");
    // The pages, rendered whole on the server, say it in words.
    let html = |path: String| {
        let http = alice.http.clone();
        async move {
            let res = http.get(path).send().await.unwrap();
            assert_eq!(res.status(), StatusCode::OK);
            res.text().await.unwrap()
        }
    };
    let job_page = html(format!("{base}/jobs/{id}")).await;
    assert!(
        job_page.contains("Metrics unavailable: Prometheus could not be reached ("),
        "{job_page}"
    );
    let pools_page = html(format!("{base}/pools")).await;
    assert!(
        pools_page.contains(
            "Utilization not shown. Metrics unavailable: Prometheus could not be reached ("
        ),
        "{pools_page}"
    );

    // The run ends while Prometheus is down: it is kept, not measured, never called idle.
    let (s, body) = alice
        .post(&format!("/api/v1/jobs/{id}/cancel"), json!({}))
        .await;
    assert_eq!(s, StatusCode::OK, "{body}");
    tokio::time::sleep(Duration::from_secs(5)).await;
    let [alloc, used, idle, unmeasured] = nlp_usage(&bob, begun).await;
    assert!(alloc > 0.0, "{alloc}");
    assert!(
        close(unmeasured, alloc),
        "not measured: {unmeasured} of {alloc}"
    );
    assert!(close(used, 0.0) && close(idle, 0.0), "{used} {idle}");

    // Prometheus is back (same data): the recorder measures the run from its samples.
    prom.restart();
    let until = Instant::now() + Duration::from_secs(30);
    let [alloc, used, idle, _] = loop {
        let u = nlp_usage(&bob, begun).await;
        if close(u[3], 0.0) {
            break u;
        }
        assert!(
            Instant::now() < until,
            "still not measured after 30 s: {u:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    // The exporter's mean, (63.5 % + 73.5 %) / 2.
    assert!((used - alloc * 0.685).abs() < 1e-9, "{used} of {alloc}");
    assert!((idle - alloc * 0.315).abs() < 1e-9, "{idle} of {alloc}");
    running.stop().await;
}
