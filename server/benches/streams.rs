//! Live stream benchmark, printed as figures (`cargo bench -p server --bench streams`, part of
//! `make bench`): the release `gantry` binary runs as its own process on a fresh SQLite
//! database with the demo catalog; `GANTRY_BENCH_STREAMS` (default 1,000) live streams are
//! opened as alice, then bob (her teammate) launches five jobs a second apart. Printed: the
//! server's resident memory before and with the streams open, how long each launch took to
//! reach every stream (p50, p99, max over all streams and launches), and the bytes one launch
//! cost one stream. The bar set by issue 16: 1,000 streams add at most 26 MB and an event
//! reaches all of them with p99 at most 71 ms.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The resident memory of a process, in MiB (Linux).
fn rss_mib(pid: u32) -> anyhow::Result<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| anyhow::anyhow!("no VmRSS for {pid}"))?;
    Ok(kb / 1024.0)
}

/// Ends the server with the bench, however the bench ends.
struct Server(Child);
impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// What one stream received since it last showed a launch: the text, when each piece came,
/// and how many bytes.
#[derive(Default)]
struct Received {
    text: String,
    pieces: Vec<(usize, Instant)>,
    bytes: usize,
}

impl Received {
    fn push(&mut self, at: Instant, chunk: &str) {
        self.pieces.push((self.text.len(), at));
        self.text.push_str(chunk);
        self.bytes += chunk.len();
    }

    /// When the piece that completed `needle` arrived, if it did.
    fn arrival_of(&self, needle: &str) -> Option<Instant> {
        let end = self.text.find(needle)? + needle.len() - 1;
        self.pieces
            .iter()
            .rev()
            .find(|(start, _)| *start <= end)
            .map(|(_, at)| *at)
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn main() -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(run())
}

async fn sign_in(base: &str, user: &str) -> anyhow::Result<reqwest::Client> {
    let client = reqwest::Client::builder()
        .cookie_store(true)
        .redirect(reqwest::redirect::Policy::none())
        .build()?;
    let res = client
        .post(format!("{base}/auth/dev/login"))
        .form(&[("user", user)])
        .send()
        .await?;
    anyhow::ensure!(res.status() == 303, "sign-in as {user}: {}", res.status());
    Ok(client)
}

async fn run() -> anyhow::Result<()> {
    let streams = env_or("GANTRY_BENCH_STREAMS", 1000) as usize;
    let launches = 5usize;
    let dir = tempfile::tempdir()?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let base = format!("http://127.0.0.1:{port}");
    let server = Server(
        Command::new(env!("CARGO_BIN_EXE_gantry"))
            .env("GANTRY__SERVER__ADDR", format!("127.0.0.1:{port}"))
            .env(
                "GANTRY__DATABASE__URL",
                format!(
                    "sqlite://{}?mode=rwc",
                    dir.path().join("bench.db").display()
                ),
            )
            .env(
                "GANTRY__SERVER__MAX_STREAMS_PER_USER",
                (streams + 10).to_string(),
            )
            .env("GANTRY__DEMO__JOBS", "false")
            .env("GANTRY__DEMO__HISTORY", "false")
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()?,
    );
    let pid = server.0.id();
    let ready = Instant::now();
    loop {
        match reqwest::get(format!("{base}/healthz")).await {
            Ok(r) if r.status() == 200 => break,
            _ if ready.elapsed() > Duration::from_secs(60) => {
                anyhow::bail!("gantry did not answer /healthz within 60 s")
            }
            _ => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
    let alice = sign_in(&base, "alice").await?;
    let bob = sign_in(&base, "bob").await?;
    // Warm the paths a launch takes, then read the memory without streams.
    let warm = bob
        .post(format!("{base}/api/v1/jobs"))
        .json(&serde_json::json!({"template": "mistral-7b-sft", "gpus": 8, "name": "bench-warm"}))
        .send()
        .await?;
    anyhow::ensure!(warm.status() == 201, "warm-up launch: {}", warm.status());
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = rss_mib(pid)?;

    // Every stream passes on what it receives, when; the launches are found in it by their
    // job ids (which every version of the stream carries to a teammate).
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(usize, Instant, String)>();
    let (open_tx, mut open_rx) = tokio::sync::mpsc::unbounded_channel::<()>();
    let mut tasks = Vec::new();
    for k in 0..streams {
        let (alice, url, tx, open_tx) = (
            alice.clone(),
            format!("{base}/api/v1/events"),
            tx.clone(),
            open_tx.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let Ok(mut res) = alice.get(url).send().await else {
                return;
            };
            if res.status() != 200 {
                eprintln!("a stream was refused: {}", res.status());
                return;
            }
            let _ = open_tx.send(());
            while let Ok(Some(chunk)) = res.chunk().await {
                let text = String::from_utf8_lossy(&chunk).into_owned();
                if tx.send((k, Instant::now(), text)).is_err() {
                    return;
                }
            }
        }));
    }
    drop(open_tx);
    let opening = Instant::now();
    let mut open = 0;
    while open < streams {
        match tokio::time::timeout(Duration::from_secs(60), open_rx.recv()).await {
            Ok(Some(())) => open += 1,
            _ => anyhow::bail!("only {open} of {streams} streams opened"),
        }
    }
    let opened_in = opening.elapsed();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let with_streams = rss_mib(pid)?;
    // What each stream received since it last showed a launch (ticks before the first one are
    // not counted).
    while rx.try_recv().is_ok() {}
    let mut pending: Vec<Received> = (0..streams).map(|_| Received::default()).collect();

    let mut latencies = Vec::new();
    let mut event_bytes = Vec::new();
    for i in 0..launches {
        let sent = Instant::now();
        let res = bob
            .post(format!("{base}/api/v1/jobs"))
            .json(&serde_json::json!({"template": "mistral-7b-sft", "gpus": 8, "name": format!("bench-{i}")}))
            .send()
            .await?;
        anyhow::ensure!(res.status() == 201, "launch {i}: {}", res.status());
        let id = res.json::<serde_json::Value>().await?["id"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let needle = format!("\"job_id\":\"{id}\"");
        let mut seen = 0;
        let mut found = vec![false; streams];
        let mut take = |r: &mut Received, found: &mut bool, seen: &mut usize| {
            if let Some(at) = r.arrival_of(&needle) {
                *found = true;
                *seen += 1;
                latencies.push(at.duration_since(sent).as_secs_f64() * 1000.0);
                event_bytes.push(r.bytes as f64);
                *r = Received::default();
            }
        };
        // Some streams may have it already (it came before the launch's answer).
        for (r, f) in pending.iter_mut().zip(found.iter_mut()) {
            take(r, f, &mut seen);
        }
        while seen < streams {
            match tokio::time::timeout(Duration::from_secs(30), rx.recv()).await {
                Ok(Some((k, at, chunk))) => {
                    let r = &mut pending[k];
                    r.push(at, &chunk);
                    if !found[k] {
                        take(r, &mut found[k], &mut seen);
                    }
                }
                _ => anyhow::bail!("launch {i} reached {seen} of {streams} streams in 30 s"),
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    latencies.sort_by(|a, b| a.total_cmp(b));
    event_bytes.sort_by(|a, b| a.total_cmp(b));
    println!(
        "streams: {streams} live streams as alice, opened in {:.1} s; bob launches {launches} jobs; release build, server in its own process",
        opened_in.as_secs_f64()
    );
    println!(
        "server memory: {before:.1} MiB without streams, {with_streams:.1} MiB with them: {:.1} MiB ({:.1} MB) added (bar: 26 MB)",
        with_streams - before,
        (with_streams - before) * 1.048_576
    );
    println!(
        "launch to every stream: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms over {} deliveries (bar: p99 71 ms)",
        percentile(&latencies, 0.5),
        percentile(&latencies, 0.99),
        latencies.last().copied().unwrap_or_default(),
        latencies.len()
    );
    println!(
        "bytes a launch cost one stream (its event with the row, and ticks in between): median {:.0}",
        percentile(&event_bytes, 0.5)
    );
    for t in tasks {
        t.abort();
    }
    drop(server);
    Ok(())
}
