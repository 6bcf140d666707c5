//! Page benchmark, printed as figures (`cargo bench -p server --bench pages`, part of
//! `make bench`): Gantry built for release on a seeded SQLite database (the demo catalog, its
//! running and queued jobs and 30 days of finished ones), signed in as alice, with the site's
//! files under content-hashed names as `make release` serves them. Each of home,
//! Jobs (its first page of 50 rows), a job page and Pools is fetched under load, and in the
//! same run the same bytes are served by a bare axum handler under the same load, in turns
//! with the page (a second each, so that the machine's drift falls on both); the figure is
//! the ratio of requests per second, each against the static handler's turns beside it (the
//! static column prints the mean of those turns). Goal: each page at least 10 % of the
//! static handler. A change that makes a page smaller makes its static handler faster too:
//! read such a change by the page's requests per second, not only by its ratio (the Jobs
//! page's compact rows, 74 KB to 48 KB, raised its r/s by 18 % and lowered its ratio).
//!
//! Gantry serves a page again to the session it rendered it for while nothing was written
//! (`server.page_cache_ms`, `http::page_cache`), which is what a repeated load by one session
//! measures; each page is also measured with that cache off ("rendered": every load renders,
//! its reads answered from memory as for any viewer's load while nothing is written,
//! `db::memo`), and with both off ("uncached": every read from the database, the cost of the
//! first load after a change), and the share of loads the page cache answered is printed.
//!
//! Under the four pages three references are measured the same way: `/login` signed in (the
//! smallest page: the shell and the nav bar, two statements), which is about where any page
//! on this stack can get, the Jobs page's data as JSON without the page
//! (`/api/v1/jobs?limit=50`), and the floor of the stack itself: a Leptos page with no data,
//! no session and no middleware (a heading and the hydration scripts), rendered by
//! `leptos_axum` on a bare axum server in the same run.
//!
//! `GANTRY_BENCH_SECONDS` (default 5: seconds of the page and as many of the static handler,
//! for each figure) and `GANTRY_BENCH_CONNECTIONS` (default 32) set the load;
//! `GANTRY_BENCH_PAGES` (say `jobs,pools`: words of the page names) measures only those, to
//! profile one page at a time (`ref` for the references), and `GANTRY_BENCH_PATH` adds
//! another path (page `other`).
//! `GANTRY_BENCH_DB_CONNECTIONS` sets the database pool's size (the default config's 8).
//! `GANTRY_BENCH_WRITES_PER_S=n` (at most 1000) writes to the database n times a second for
//! the whole run, the static handler's figures and the references included (an audit entry
//! each; a busy cluster's job events are writes too), each write ending what both caches hold:
//! the cached and rendered figures under that load. The rate the writes reached is printed.
//! `GANTRY_BENCH_DUMP=dir` writes each page's bytes to `dir/0.html`, `dir/1.html`… in the order
//! printed. `GANTRY_BENCH_RENDERED_ONLY=1` skips the cached figure (to profile rendering alone).
//! Under each page a line gives, for its rendered figure, the whole process's CPU time per
//! request (both servers, the load and the kernel's work for them, from `/proc/self/stat`)
//! and how many cores were busy, for the page and for the static handler: a page whose cores
//! were not all busy was held down by waiting, not by work.
//! `GANTRY_BENCH_SOAK=n` then loads each page alone for n seconds more, rendered, after a
//! line naming this process, and then its static handler alone as long: windows for a sampling
//! profiler to see a whole request, the load and the kernel included, without the other's
//! turns: `perf record -e cpu-clock --call-graph dwarf,65528 -p <process> -- sleep <n - 2>`,
//! read with `perf report --no-inline` or `perf script --no-inline` (resolving inlined frames
//! runs addr2line over this binary for many minutes). Leptos's stacks are deeper than the
//! 64 KB perf copies: many samples lose their outer frames, never their inner ones.
//! `GANTRY_BENCH_LOG` is a tracing filter for the server's log on stderr: `sqlx::query=debug`
//! lists every statement a page makes, with its time. Both servers and the load run in this
//! process on the same cores, so the ratio, not the absolute figure, is what carries over to
//! another machine.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::response::IntoResponse;
use gantry::config::Config;
use gantry::startup::{leptos_options, start};

/// jemalloc, as in the `gantry` binary (see server/Cargo.toml): a page render makes many small
/// allocations.
#[cfg(unix)]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Answers of `GET url` from `connections` clients for `seconds`: how many were 200, how
/// many were not, and the seconds it took.
async fn load(
    client: &reqwest::Client,
    url: &str,
    connections: u64,
    seconds: u64,
) -> (u64, u64, f64) {
    let done = Arc::new(AtomicU64::new(0));
    let bad = Arc::new(AtomicU64::new(0));
    let until = Instant::now() + Duration::from_secs(seconds);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..connections {
        let (client, url, done, bad) = (client.clone(), url.to_string(), done.clone(), bad.clone());
        tasks.push(tokio::spawn(async move {
            while Instant::now() < until {
                match client.get(&url).send().await {
                    Ok(r) if r.status() == 200 => {
                        let _ = r.bytes().await;
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                    _ => {
                        bad.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    (
        done.load(Ordering::Relaxed),
        bad.load(Ordering::Relaxed),
        started.elapsed().as_secs_f64(),
    )
}

/// The CPU time this process has used, user and system, in seconds: every thread (both
/// servers, the load, the runtime's and SQLite's threads) and the kernel's work for them.
/// Linux's `/proc/self/stat`, whose times are in USER_HZ ticks (100 a second in Linux's ABI);
/// `None` where there is no such file.
fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The fields after the command's name, which is in parentheses: the state is field 3,
    // utime field 14, stime field 15.
    let fields: Vec<&str> = stat
        .get(stat.rfind(')')? + 2..)?
        .split_whitespace()
        .collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / 100.0)
}

/// What [`against_static`] measured, the page's figures first and the static handler's
/// second in each pair.
struct Turns {
    /// Requests per second.
    rate: [f64; 2],
    /// Answers of the page that were not 200.
    bad: u64,
    /// The process's CPU time per request, in microseconds (NaN without `/proc`).
    cpu_us: [f64; 2],
    /// The process's CPU time per second of wall time: how many cores were busy.
    cores: [f64; 2],
}

/// `url` and the static handler's `static_url` loaded in turns, a second each, `seconds` of
/// each: how fast the machine is drifts (other work on it, the CPU's clock), and a drift
/// then falls on both figures alike instead of on one.
async fn against_static(
    client: &reqwest::Client,
    url: &str,
    static_url: &str,
    connections: u64,
    seconds: u64,
) -> Turns {
    // Answers, answers not 200, seconds and CPU seconds: the page's, then the static handler's.
    let mut sums = [(0, 0, 0.0, 0.0); 2];
    for turn in 0..seconds {
        // Each goes first every other turn.
        let order = if turn % 2 == 0 { [0, 1] } else { [1, 0] };
        for which in order {
            let cpu = cpu_seconds();
            let (d, b, s) = load(client, [url, static_url][which], connections, 1).await;
            let cpu = match (cpu, cpu_seconds()) {
                (Some(a), Some(b)) => b - a,
                _ => f64::NAN,
            };
            let sum = &mut sums[which];
            *sum = (sum.0 + d, sum.1 + b, sum.2 + s, sum.3 + cpu);
        }
    }
    let figure = |(done, _, secs, cpu): (u64, u64, f64, f64)| {
        (
            done as f64 / secs,
            1e6 * cpu / done.max(1) as f64,
            cpu / secs,
        )
    };
    let (page, stat) = (figure(sums[0]), figure(sums[1]));
    Turns {
        rate: [page.0, stat.0],
        bad: sums[0].1,
        cpu_us: [page.1, stat.1],
        cores: [page.2, stat.2],
    }
}

fn main() -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(run())
}

async fn run() -> anyhow::Result<()> {
    if let Ok(filter) = std::env::var("GANTRY_BENCH_LOG") {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_writer(std::io::stderr)
            .init();
    }
    let seconds = env_or("GANTRY_BENCH_SECONDS", 5).max(1);
    let connections = env_or("GANTRY_BENCH_CONNECTIONS", 32);
    let dir = tempfile::tempdir()?;
    let mut config = Config::default();
    config.server.addr = "127.0.0.1:0".parse()?;
    config.database.url = format!(
        "sqlite://{}?mode=rwc",
        dir.path().join("bench.db").display()
    )
    .into();
    if let Ok(n) = std::env::var("GANTRY_BENCH_DB_CONNECTIONS") {
        config.database.max_connections = n.parse().ok().filter(|n| *n > 0).ok_or_else(|| {
            anyhow::anyhow!(
                "GANTRY_BENCH_DB_CONNECTIONS: expected a whole number above 0, got '{n}'"
            )
        })?;
    }
    config.demo.seed = true;
    config.demo.jobs = true;
    config.demo.history = true;
    // As `make release` serves the site: its files under content-hashed names, from the hash
    // file cargo-leptos writes next to the binary (the names need not exist to render a page).
    let hash_file = dir.path().join("hash.txt");
    std::fs::write(
        &hash_file,
        "js: Jq0aZ3kP9mWc2xT5vB8nEw\nwasm: r4Tn7YpQ1zLk6sHd0cMf2g\ncss: X8bV3nQ6wE1rT9yU4iO7pA\n",
    )?;
    let mut options = leptos_options();
    options.hash_files = true;
    options.hash_file = hash_file.to_string_lossy().as_ref().into();
    let running = start(config, options.clone()).await?;
    let base = format!("http://{}", running.addr);
    // The demo's seeded jobs are admitted and started in the first seconds, a burst of writes
    // that is not what a page costs later.
    tokio::time::sleep(Duration::from_secs(3)).await;

    let client = reqwest::Client::builder()
        .cookie_store(true)
        .pool_max_idle_per_host(connections as usize)
        .build()?;
    let res = client
        .post(format!("{base}/auth/dev/login"))
        .form(&[("user", "alice")])
        .send()
        .await?;
    anyhow::ensure!(
        res.status().is_success(),
        "sign-in as alice: {}",
        res.status()
    );
    let jobs: serde_json::Value = client
        .get(format!("{base}/api/v1/jobs?limit=50"))
        .send()
        .await?
        .json()
        .await?;
    let total: serde_json::Value = client
        .get(format!("{base}/api/v1/jobs?limit=1"))
        .send()
        .await?
        .json()
        .await?;
    // A job that runs (or starts) if the demo has one, else the newest.
    let list = jobs["jobs"].as_array().cloned().unwrap_or_default();
    let job_id = list
        .iter()
        .find(|j| j["state"] == "running" || j["state"] == "admitted")
        .or(list.first())
        .and_then(|j| j["id"].as_str())
        .ok_or_else(|| anyhow::anyhow!("the demo has no job of alice's team: {jobs}"))?
        .to_string();
    let mut pages = vec![
        ("home", "/".to_string()),
        ("Jobs (50 rows)", "/jobs".to_string()),
        ("job page", format!("/jobs/{job_id}")),
        ("Pools", "/pools".to_string()),
        // Two references, printed under the pages, to read their figures against: the
        // smallest page (the shell, the nav bar and the sign-in options; two statements),
        // and the Jobs page's own data as JSON without the page (its statement and
        // serialization, no view).
        ("ref: /login", "/login".to_string()),
        ("ref: Jobs JSON", "/api/v1/jobs?limit=50".to_string()),
    ];
    // Any other path, for comparison (say `/api/v1/me`, or a page not in the list).
    if let Ok(path) = std::env::var("GANTRY_BENCH_PATH") {
        pages.push(("other", path));
    }

    // The same bytes, from a handler that does nothing else.
    let mut bodies = Vec::new();
    for (_, path) in &pages {
        let r = client.get(format!("{base}{path}")).send().await?;
        anyhow::ensure!(r.status() == 200, "{path}: {}", r.status());
        bodies.push(r.bytes().await?);
    }
    // Each body as a file, to read what a page is made of.
    if let Ok(dump) = std::env::var("GANTRY_BENCH_DUMP") {
        for (i, body) in bodies.iter().enumerate() {
            std::fs::write(format!("{dump}/{i}.html"), body)?;
        }
    }
    // The stack's floor: Leptos rendering a page with nothing in it, on a bare axum server.
    let bare_page = {
        use leptos::prelude::*;
        let opts = options.clone();
        leptos_axum::render_app_async(move || {
            let opts = opts.clone();
            view! {
                <!DOCTYPE html>
                <html lang="en">
                    <head>
                        <meta charset="utf-8"/>
                        <title>"Gantry"</title>
                        <HydrationScripts options=opts/>
                    </head>
                    <body>
                        <main>
                            <h1>"Gantry"</h1>
                            <p>"A page with no data."</p>
                        </main>
                    </body>
                </html>
            }
        })
    };
    let floor_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let floor_base = format!("http://{}", floor_listener.local_addr()?);
    tokio::spawn(async move {
        let router = axum::Router::new().route("/", axum::routing::get(bare_page));
        let _ = axum::serve(floor_listener, router).await;
    });
    let r = client.get(format!("{floor_base}/")).send().await?;
    anyhow::ensure!(r.status() == 200, "the bare Leptos page: {}", r.status());
    pages.push(("ref: bare Leptos", "@floor/".to_string()));
    bodies.push(r.bytes().await?);

    let mut router = axum::Router::new();
    // Each body at its own path, `/0`, `/1`…: a page's path may carry a query string
    // (`/api/v1/jobs?limit=50`), which a route cannot, or share its path with another page's.
    for (i, body) in bodies.iter().enumerate() {
        let body = body.clone();
        router = router.route(
            &format!("/{i}"),
            axum::routing::get(move || {
                let body = body.clone();
                async move { ([("content-type", "text/html; charset=utf-8")], body).into_response() }
            }),
        );
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let static_base = format!("http://{}", listener.local_addr()?);
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });

    let writes_per_s = env_or("GANTRY_BENCH_WRITES_PER_S", 0);
    anyhow::ensure!(
        writes_per_s <= 1000,
        "GANTRY_BENCH_WRITES_PER_S: at most 1000, got {writes_per_s}"
    );
    let written = Arc::new(AtomicU64::new(0));
    let writes_began = Instant::now();
    let writer = (writes_per_s > 0).then(|| {
        let db = running.portal.db().clone();
        let written = written.clone();
        tokio::spawn(async move {
            let mut every =
                tokio::time::interval(Duration::from_secs_f64(1.0 / writes_per_s as f64));
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                every.tick().await;
                let entry = gantry::db::AuditEntry::new(
                    "bench",
                    "bench.write",
                    "bench",
                    chrono::Utc::now(),
                );
                match db.append_audit(&entry).await {
                    Ok(()) => {
                        written.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => eprintln!("the background write failed: {e}"),
                }
            }
        })
    });
    println!(
        "pages: {} jobs visible to alice; {connections} connections, {seconds} s of each per figure, {writes_per_s} writes per second, release build",
        total["total"]
    );
    println!(
        "{:<16} {:>9} {:>12} {:>14} {:>8} {:>8} {:>12} {:>9} {:>12} {:>9}",
        "page",
        "bytes",
        "Gantry r/s",
        "static r/s",
        "ratio",
        "cached",
        "rendered r/s",
        "ratio",
        "uncached r/s",
        "ratio"
    );
    let ttl = Duration::from_millis(Config::default().server.page_cache_ms);
    let only: Vec<String> = std::env::var("GANTRY_BENCH_PAGES")
        .map(|v| v.split(',').map(|w| w.trim().to_lowercase()).collect())
        .unwrap_or_default();
    let rendered_only = std::env::var("GANTRY_BENCH_RENDERED_ONLY").is_ok_and(|v| v == "1");
    let soak = env_or("GANTRY_BENCH_SOAK", 0);
    for (i, ((name, path), body)) in pages.iter().zip(&bodies).enumerate() {
        let url = match path.strip_prefix("@floor") {
            Some(rest) => format!("{floor_base}{rest}"),
            None => format!("{base}{path}"),
        };
        let lower = name.to_lowercase();
        if !only.is_empty() && !only.iter().any(|w| lower.contains(w.as_str())) {
            continue;
        }
        if name.starts_with("ref:") && !pages[i - 1].0.starts_with("ref:") {
            println!("references (not pages the goal is for):");
        }
        // A second of the same load first, unmeasured, for both: connections opened, caches
        // and the allocator warm, and the demo's first admissions (a burst of writes in the
        // seconds after start) behind it.
        let static_url = format!("{static_base}/{i}");
        load(&client, &url, connections, 1).await;
        load(&client, &static_url, connections, 1).await;
        // Each figure against the static handler's, measured in turns with it.
        let before = running.pages.stats();
        let (gantry, static_cached, bad) = if rendered_only {
            (f64::NAN, f64::NAN, 0)
        } else {
            let t = against_static(&client, &url, &static_url, connections, seconds).await;
            (t.rate[0], t.rate[1], t.bad)
        };
        let after = running.pages.stats();
        let answered = (after.hits + after.misses) - (before.hits + before.misses);
        // No figure (not 0 %) when the cached load was skipped.
        let cached = if answered == 0 {
            f64::NAN
        } else {
            100.0 * (after.hits - before.hits) as f64 / answered as f64
        };
        running.pages.set_ttl(Duration::ZERO);
        load(&client, &url, connections, 1).await;
        let rendered_turns = against_static(&client, &url, &static_url, connections, seconds).await;
        let (rendered, static_rendered, bad_rendered) = (
            rendered_turns.rate[0],
            rendered_turns.rate[1],
            rendered_turns.bad,
        );
        running.read_memo().set_ttl(Duration::ZERO);
        load(&client, &url, connections, 1).await;
        let t = against_static(&client, &url, &static_url, connections, seconds).await;
        let (uncached, static_uncached, bad_uncached) = (t.rate[0], t.rate[1], t.bad);
        let bad = bad + bad_rendered + bad_uncached;
        running.read_memo().set_ttl(ttl);
        running.pages.set_ttl(ttl);
        // Each ratio is against the static handler's turns beside it; the static figure
        // printed is the mean of those measured.
        let statics = [static_cached, static_rendered, static_uncached];
        let measured: Vec<f64> = statics.into_iter().filter(|r| !r.is_nan()).collect();
        let bare = measured.iter().sum::<f64>() / measured.len() as f64;
        println!(
            "{:<16} {:>9} {:>12.0} {:>14.0} {:>7.1} % {:>6.1} % {:>12.0} {:>7.1} % {:>12.0} {:>7.1} %{}",
            name,
            body.len(),
            gantry,
            bare,
            100.0 * gantry / static_cached,
            cached,
            rendered,
            100.0 * rendered / static_rendered,
            uncached,
            100.0 * uncached / static_uncached,
            if bad > 0 {
                format!("  ({bad} answers were not 200)")
            } else {
                String::new()
            }
        );
        // The whole process's CPU a request (servers, load and kernel alike), rendered: where
        // the cores were not all busy, waiting, not work, held the rate down.
        let Turns { cpu_us, cores, .. } = rendered_turns;
        println!(
            "{:<16} rendered, CPU a request: {:.0} µs ({:.1} cores busy); static: {:.0} µs ({:.1} cores)",
            "", cpu_us[0], cores[0], cpu_us[1], cores[1]
        );
        if soak > 0 {
            // The page alone, rendered, for a profiler to attach to this process meanwhile.
            running.pages.set_ttl(Duration::ZERO);
            println!(
                "{:<16} soak: {soak} s of this page alone, rendered, in process {}",
                "",
                std::process::id()
            );
            let (done, bad, secs) = load(&client, &url, connections, soak).await;
            println!(
                "{:<16} soak done: {:.0} requests per second, {bad} answers not 200",
                "",
                done as f64 / secs
            );
            running.pages.set_ttl(ttl);
            println!(
                "{:<16} static soak: {soak} s of the static handler alone",
                ""
            );
            let (done, _, secs) = load(&client, &static_url, connections, soak).await;
            println!(
                "{:<16} static soak done: {:.0} requests per second",
                "",
                done as f64 / secs
            );
        }
    }
    if let Some(w) = writer {
        w.abort();
        let _ = w.await;
        println!(
            "background writes: {:.0} per second reached",
            written.load(Ordering::Relaxed) as f64 / writes_began.elapsed().as_secs_f64()
        );
    }
    running.stop().await;
    Ok(())
}
