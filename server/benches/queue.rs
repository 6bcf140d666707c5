//! Queue benchmarks, printed as figures (`cargo bench -p server --bench queue`):
//! 1. Kueue's scheduler performance test "baseline" (../shared/k8s/perf/) replayed through the
//!    sim's admission rules on a virtual clock: only the scheduler's own work costs wall time.
//! 2. With 10,000 queued jobs in one pool, the time to recompute every job's position, reason
//!    and ETA after one change.

use std::collections::HashMap;
use std::time::Instant;

use app::model::Priority;
use chrono::{DateTime, Duration, TimeZone, Utc};
use gantry::cluster::kueue::KueueState;
use gantry::cluster::kueue::QueueingStrategy;
use gantry::cluster::{Change, PoolSpec, QuotaSpec, WorkloadSpec};

fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap()
}

/// Peak resident memory of this process, from /proc (Linux).
fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .map(|l| l.to_string())
        })
        .and_then(|l| {
            l.split_whitespace()
                .nth(1)
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

struct Class {
    name: &'static str,
    count: u32,
    interval_ms: i64,
    runtime_ms: u64,
    priority: Priority,
    request: u32,
}

/// generator.yaml: 5 cohorts × 6 ClusterQueues (nominal 20, borrowingLimit 100,
/// reclaimWithinCohort Any, withinClusterQueue LowerPriority), each with these workload sets.
/// Kueue's priorities 50/100/200 keep their order as low/normal/high here.
const CLASSES: [Class; 3] = [
    Class {
        name: "small",
        count: 350,
        interval_ms: 100,
        runtime_ms: 200,
        priority: Priority::Low,
        request: 1,
    },
    Class {
        name: "medium",
        count: 100,
        interval_ms: 500,
        runtime_ms: 500,
        priority: Priority::Normal,
        request: 5,
    },
    Class {
        name: "large",
        count: 50,
        interval_ms: 1200,
        runtime_ms: 1000,
        priority: Priority::High,
        request: 20,
    },
];

/// One virtual second of the sim stands for one millisecond of the Kueue test, so runtimes
/// of 200 ms are whole units; every figure below is converted back to milliseconds.
fn baseline() {
    let cohorts = 5;
    let queues = 6;
    let pools: Vec<PoolSpec> = (0..cohorts)
        .map(|c| PoolSpec {
            name: format!("cohort-{c}"),
            gpu_model: "quota only".into(),
            nodes: 1,
            strategy: QueueingStrategy::BestEffortFifo,
        })
        .collect();
    // No node topology in Kueue's test: one "node" as large as the cohort's quota.
    let mut st = KueueState::new(&pools, 20 * queues as u32);
    for p in &pools {
        for q in 0..queues {
            st.set_quota(
                &format!("cq-{q}"),
                &p.name,
                QuotaSpec {
                    nominal: 20,
                    borrowing_limit: Some(100),
                    lending_limit: None,
                    strategy: None,
                },
            )
            .unwrap();
        }
    }
    let mut arrivals: Vec<(i64, WorkloadSpec, &'static str)> = Vec::new();
    for p in &pools {
        for q in 0..queues {
            for class in &CLASSES {
                for k in 0..class.count {
                    let at = k as i64 * class.interval_ms;
                    arrivals.push((
                        at,
                        WorkloadSpec {
                            job_id: format!("{}-cq{q}-{}-{k}", p.name, class.name),
                            team: format!("cq-{q}"),
                            pool: p.name.clone(),
                            gpus: class.request,
                            priority: class.priority,
                            submitted_at: t0() + Duration::seconds(at),
                            max_runtime_s: class.runtime_ms,
                            run: Default::default(),
                        },
                        class.name,
                    ));
                }
            }
        }
    }
    arrivals.sort_by_key(|(at, w, _)| (*at, w.job_id.clone()));
    let class_of: HashMap<String, &'static str> = arrivals
        .iter()
        .map(|(_, w, c)| (w.job_id.clone(), *c))
        .collect();
    let submitted: HashMap<String, DateTime<Utc>> = arrivals
        .iter()
        .map(|(_, w, _)| (w.job_id.clone(), w.submitted_at))
        .collect();
    let total = arrivals.len();

    let startup = Duration::zero();
    let mut out = Vec::new();
    let start = Instant::now();
    let mut i = 0;
    while i < arrivals.len() {
        let at = t0() + Duration::seconds(arrivals[i].0);
        st.step(at, startup, &mut out);
        while i < arrivals.len() && t0() + Duration::seconds(arrivals[i].0) == at {
            st.enqueue(arrivals[i].1.clone()).unwrap();
            i += 1;
        }
        st.cycle(at, &mut out);
    }
    st.step(t0() + Duration::days(365), startup, &mut out);
    let wall = start.elapsed();

    let mut waits: HashMap<&str, (f64, u32)> = HashMap::new();
    let mut admissions = 0u64;
    let mut preemptions = 0u64;
    let mut finished = 0usize;
    let mut first_admission: HashMap<&str, DateTime<Utc>> = HashMap::new();
    for (job_id, _, at, change) in &out {
        match change {
            Change::Admitted { .. } => {
                admissions += 1;
                first_admission.entry(job_id.as_str()).or_insert(*at);
            }
            Change::Preempted { .. } => preemptions += 1,
            Change::Succeeded { .. } => finished += 1,
            _ => {}
        }
    }
    for (job_id, at) in &first_admission {
        let e = waits.entry(class_of[*job_id]).or_default();
        e.0 += (*at - submitted[*job_id]).num_seconds() as f64;
        e.1 += 1;
    }
    println!("== Kueue scheduler-perf \"baseline\" replayed through the sim (virtual clock)");
    println!("workloads: {total}, finished: {finished}, admissions: {admissions} (incl. re-admissions after {preemptions} preemptions)");
    println!("wall time of the whole replay: {:.3} s", wall.as_secs_f64());
    println!(
        "admissions per second of wall time: {:.0}",
        admissions as f64 / wall.as_secs_f64()
    );
    println!("peak memory (process VmHWM): {:.1} MiB", peak_rss_mib());
    let last = out.iter().map(|(_, _, at, _)| *at).max().unwrap_or(t0());
    println!(
        "virtual makespan: {:.1} s of the test's time (Kueue's run: 351 s wall)",
        (last - t0()).num_seconds() as f64 / 1000.0
    );
    for class in &CLASSES {
        let (sum, n) = waits.get(class.name).copied().unwrap_or((0.0, 0));
        println!(
            "avg time to admission, {:<6}: {:>8.0} ms (virtual; Kueue measured {} ms)",
            class.name,
            sum / n.max(1) as f64,
            match class.name {
                "small" => "215468",
                "medium" => "76768",
                _ => "6666",
            }
        );
    }
    assert_eq!(finished, total, "every workload ran to the end");
}

/// A tiny deterministic generator, so the figures are repeatable.
struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
}

fn recompute_after_one_change() {
    let pool = PoolSpec {
        name: "hgx-h100".into(),
        gpu_model: "H100".into(),
        nodes: 16,
        strategy: QueueingStrategy::BestEffortFifo,
    };
    let mut st = KueueState::new(std::slice::from_ref(&pool), 8);
    let teams = ["nlp", "vision", "speech"];
    for (t, n) in teams.iter().zip([64, 32, 32]) {
        st.set_quota(
            t,
            "hgx-h100",
            QuotaSpec {
                nominal: n,
                borrowing_limit: Some(32),
                lending_limit: None,
                strategy: None,
            },
        )
        .unwrap();
    }
    let mut rng = Lcg(42);
    let sizes = [1, 2, 4, 8, 16, 32];
    let prios = [
        Priority::Low,
        Priority::Normal,
        Priority::Normal,
        Priority::High,
    ];
    let mut out = Vec::new();
    let now = t0();
    for i in 0..10_000 + 40 {
        let w = WorkloadSpec {
            job_id: format!("job-{i}"),
            team: teams[(rng.next() % 3) as usize].into(),
            pool: "hgx-h100".into(),
            gpus: sizes[(rng.next() % sizes.len() as u64) as usize],
            priority: prios[(rng.next() % prios.len() as u64) as usize],
            submitted_at: now - Duration::seconds(20_000 - i as i64),
            max_runtime_s: 600 + rng.next() % (8 * 3600),
            run: Default::default(),
        };
        st.enqueue(w).unwrap();
    }
    st.cycle(now, &mut out);
    let queued = st.view("hgx-h100", now).unwrap().len();
    let mut times = Vec::new();
    let admitted: Vec<String> = out
        .iter()
        .filter(|(_, _, _, c)| matches!(c, Change::Admitted { .. }))
        .map(|(id, ..)| id.clone())
        .collect();
    for (k, id) in admitted.iter().take(15).enumerate() {
        let t = now + Duration::seconds(k as i64);
        let start = Instant::now();
        // one change: a running job ends early (cancelled) and the pool is re-examined
        st.remove(id);
        st.cycle(t, &mut out);
        let view = st.view("hgx-h100", t).unwrap();
        times.push(start.elapsed().as_secs_f64() * 1000.0);
        assert!(!view.is_empty());
    }
    times.sort_by(|a, b| a.partial_cmp(b).unwrap());
    println!("== {queued} queued jobs in one pool: recompute every position, reason and ETA after one change");
    println!(
        "median {:.2} ms, min {:.2} ms, max {:.2} ms over {} changes",
        times[times.len() / 2],
        times[0],
        times[times.len() - 1],
        times.len()
    );
}

/// What-if: 30 days of a 1,000-user platform (50,000 launches) replayed under two quota
/// settings, as the quota Preview does. The platform: 8 teams on 128 HGX nodes (1,024 GPUs:
/// 96 H100 nodes, 32 H200 nodes), about half used on average, in bursts.
fn whatif_50k() {
    use gantry::whatif::{replay, TraceJob};
    let pools = [
        PoolSpec {
            name: "hgx-h100".into(),
            gpu_model: "H100".into(),
            nodes: 96,
            strategy: QueueingStrategy::BestEffortFifo,
        },
        PoolSpec {
            name: "hgx-h200".into(),
            gpu_model: "H200".into(),
            nodes: 32,
            strategy: QueueingStrategy::BestEffortFifo,
        },
    ];
    let teams = [
        "nlp", "vision", "speech", "robotics", "search", "ads", "recsys", "safety",
    ];
    let quota = |n, b| QuotaSpec {
        nominal: n,
        borrowing_limit: Some(b),
        lending_limit: None,
        strategy: None,
    };
    let mut current = Vec::new();
    for t in teams {
        current.push((t.to_string(), "hgx-h100".to_string(), quota(96, 96)));
        current.push((t.to_string(), "hgx-h200".to_string(), quota(32, 32)));
    }
    let mut draft = current.clone();
    draft[0].2 = quota(160, 96); // nlp gets more H100s, ads fewer
    draft[10].2 = quota(32, 96);
    let mut rng = Lcg(7);
    let sizes = [1, 1, 2, 4, 8, 8, 16, 32];
    let start = t0();
    let trace: Vec<TraceJob> = (0..50_000)
        .map(|i| TraceJob {
            team: teams[(rng.next() % teams.len() as u64) as usize].into(),
            pool: if rng.next().is_multiple_of(5) {
                "hgx-h200".into()
            } else {
                "hgx-h100".into()
            },
            gpus: sizes[(rng.next() % sizes.len() as u64) as usize],
            priority: [
                Priority::Low,
                Priority::Normal,
                Priority::Normal,
                Priority::High,
            ][(rng.next() % 4) as usize],
            // 30 days, about 52 s apart
            submitted_at: start + Duration::seconds(i * 30 * 86_400 / 50_000),
            runtime_s: 300 + rng.next() % 7_200,
        })
        .collect();
    let wall = Instant::now();
    let a = replay(&pools, &current, &trace);
    let b = replay(&pools, &draft, &trace);
    let secs = wall.elapsed().as_secs_f64();
    println!("== what-if: 50,000 launches over 30 days, replayed under current and draft quotas");
    println!("wall time of both replays: {secs:.3} s (goal: under 2 s)");
    for (x, y) in a.iter().zip(&b).take(3) {
        println!(
            "{:<8} median wait {:>6} s -> {:>6} s, p90 {:>7} s -> {:>7} s, GPU-hours {:>8.1} -> {:>8.1}, preemptions {} -> {}",
            x.team, x.median_wait_s, y.median_wait_s, x.p90_wait_s, y.p90_wait_s, x.gpu_hours, y.gpu_hours, x.preemptions, y.preemptions
        );
    }
}

fn main() {
    baseline();
    recompute_after_one_change();
    whatif_50k();
}
