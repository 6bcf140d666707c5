//! What-if: replay real launches (submission time, size, priority, actual runtime) through the
//! sim's admission rules under given quotas, and report per team how long jobs waited, the
//! GPU-hours delivered and how often jobs were preempted. Run twice — current quotas and a
//! draft — it shows what a quota change would have done to the last 30 days.
//!
//! Percentiles are nearest-rank: the p-th percentile of n sorted waits is the value at rank
//! ⌈p/100 · n⌉. A job's wait is all the time it spent queued, including after preemptions.

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, Duration, Utc};

use crate::cluster::kueue::KueueState;
use crate::cluster::{Change, PoolSpec, QuotaSpec, RunSpec, WorkloadSpec};
use app::model::{Priority, GPUS_PER_NODE};

/// One launch as it happened.
#[derive(Clone, Debug)]
pub struct TraceJob {
    pub team: String,
    pub pool: String,
    pub gpus: u32,
    pub priority: Priority,
    pub submitted_at: DateTime<Utc>,
    /// How long it actually ran, in seconds.
    pub runtime_s: u64,
}

pub use app::model::TeamOutcome;

/// The nearest-rank percentile of sorted values (0 for none).
pub fn percentile(sorted: &[i64], p: f64) -> i64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil().max(1.0) as usize;
    sorted[rank.min(sorted.len()) - 1]
}

/// How long a replay runs on after the last arrival: 90 days, a generous bound.
const REPLAY_TAIL_S: u64 = 90 * 86_400;

#[derive(Default)]
struct JobTally {
    team: String,
    gpus: u32,
    queued_since: Option<DateTime<Utc>>,
    running_since: Option<DateTime<Utc>>,
    wait_s: i64,
    started: bool,
    gpu_seconds: f64,
    preemptions: u32,
}

/// Replays `trace` (any order) under `quotas` on `pools`. Jobs still queued or running after
/// the last arrival run on until everything that can start has finished.
pub fn replay(
    pools: &[PoolSpec],
    quotas: &[(String, String, QuotaSpec)],
    trace: &[TraceJob],
) -> Vec<TeamOutcome> {
    let mut st = KueueState::new(pools, GPUS_PER_NODE);
    // A runtime here is the work the job did: preempted, it starts that work over.
    st.rerun_whole = true;
    for (team, pool, q) in quotas {
        let _ = st.set_quota(team, pool, *q);
    }
    let mut order: Vec<usize> = (0..trace.len()).collect();
    order.sort_by_key(|&i| trace[i].submitted_at);
    let mut tally: HashMap<String, JobTally> = HashMap::with_capacity(trace.len());
    let mut out = Vec::new();
    let apply = |out: &mut Vec<(String, String, DateTime<Utc>, Change)>,
                 tally: &mut HashMap<String, JobTally>| {
        for (id, _pool, at, change) in out.drain(..) {
            let Some(t) = tally.get_mut(&id) else {
                continue;
            };
            match change {
                Change::Admitted { .. } => {
                    if let Some(q) = t.queued_since.take() {
                        t.wait_s = t.wait_s.saturating_add((at - q).num_seconds());
                    }
                    t.started = true;
                    t.running_since = Some(at);
                }
                Change::Evicted { .. } => {
                    if let Some(r) = t.running_since.take() {
                        t.gpu_seconds += (at - r).num_seconds() as f64 * t.gpus as f64;
                    }
                    t.queued_since = Some(at);
                }
                Change::Preempted { .. } => {
                    if let Some(r) = t.running_since.take() {
                        t.gpu_seconds += (at - r).num_seconds() as f64 * t.gpus as f64;
                    }
                    t.preemptions = t.preemptions.saturating_add(1);
                    t.queued_since = Some(at);
                }
                Change::Succeeded { .. } | Change::Failed { .. } | Change::Cancelled { .. } => {
                    if let Some(r) = t.running_since.take() {
                        t.gpu_seconds += (at - r).num_seconds() as f64 * t.gpus as f64;
                    }
                }
                Change::Running => {}
            }
        }
    };
    let mut last = None;
    for (n, &i) in order.iter().enumerate() {
        let j = &trace[i];
        st.step(j.submitted_at, Duration::zero(), &mut out);
        apply(&mut out, &mut tally);
        let id = format!("w{n}");
        tally.insert(
            id.clone(),
            JobTally {
                team: j.team.clone(),
                gpus: j.gpus,
                queued_since: Some(j.submitted_at),
                ..Default::default()
            },
        );
        let spec = WorkloadSpec {
            job_id: id,
            team: j.team.clone(),
            pool: j.pool.clone(),
            gpus: j.gpus,
            priority: j.priority,
            submitted_at: j.submitted_at,
            // Stored times are trusted nowhere: a runtime past the replay's end (or one that
            // would not fit the sim's signed seconds) ends with the replay.
            max_runtime_s: j.runtime_s.clamp(1, REPLAY_TAIL_S),
            run: RunSpec::default(),
        };
        if st.enqueue(spec).unwrap_or(false) {
            st.cycle(j.submitted_at, &mut out);
            apply(&mut out, &mut tally);
        }
        last = Some(j.submitted_at);
    }
    if let Some(last) = last {
        // Let what was started or queued run out.
        let end = last
            .checked_add_signed(Duration::seconds(REPLAY_TAIL_S as i64))
            .unwrap_or(DateTime::<Utc>::MAX_UTC);
        st.step(end, Duration::zero(), &mut out);
        apply(&mut out, &mut tally);
    }
    let mut by_team: BTreeMap<String, (Vec<i64>, TeamOutcome)> = BTreeMap::new();
    for t in tally.into_values() {
        let e = by_team.entry(t.team.clone()).or_insert_with(|| {
            (
                Vec::new(),
                TeamOutcome {
                    team: t.team.clone(),
                    jobs: 0,
                    never_started: 0,
                    median_wait_s: 0,
                    p90_wait_s: 0,
                    gpu_hours: 0.0,
                    preemptions: 0,
                },
            )
        });
        e.1.jobs = e.1.jobs.saturating_add(1);
        e.1.preemptions = e.1.preemptions.saturating_add(t.preemptions);
        e.1.gpu_hours += t.gpu_seconds / 3600.0;
        if t.started {
            e.0.push(t.wait_s);
        } else {
            e.1.never_started = e.1.never_started.saturating_add(1);
        }
    }
    by_team
        .into_values()
        .map(|(mut waits, mut o)| {
            waits.sort_unstable();
            o.median_wait_s = percentile(&waits, 50.0);
            o.p90_wait_s = percentile(&waits, 90.0);
            o.gpu_hours = (o.gpu_hours * 100.0).round() / 100.0;
            o
        })
        .collect()
}

/// The preview as a chart: per team, the 90th-percentile wait under the current quotas and
/// under the draft, side by side (SVG, with axes, units and a legend).
pub fn wait_chart(current: &[TeamOutcome], draft: &[TeamOutcome]) -> String {
    use plotters::prelude::*;
    let teams: Vec<&str> = current.iter().map(|o| o.team.as_str()).collect();
    // Hours once some wait reaches an hour, else minutes.
    let longest = current
        .iter()
        .chain(draft)
        .map(|o| o.p90_wait_s)
        .max()
        .unwrap_or(0);
    let (per, unit, digits) = if longest >= 3600 {
        (3600.0, "h", 1)
    } else {
        (60.0, "min", 0)
    };
    let hours = move |o: &TeamOutcome| o.p90_wait_s as f64 / per;
    let draft_of = |team: &str| {
        draft
            .iter()
            .find(|d| d.team == team)
            .map(hours)
            .unwrap_or(0.0)
    };
    let top = current
        .iter()
        .map(hours)
        .chain(draft.iter().map(hours))
        .fold(0.0_f64, f64::max)
        .max(if unit == "h" { 1.0 } else { 10.0 })
        * 1.15;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (720, 300)).into_drawing_area();
        let _ = root.fill(&WHITE);
        let n = teams.len().max(1);
        let mut chart = match ChartBuilder::on(&root)
            .caption("90th percentile wait, last 30 days", ("sans-serif", 16))
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(56)
            .build_cartesian_2d(-0.5..n as f64 - 0.5, 0.0..top)
        {
            Ok(c) => c,
            Err(_) => return String::new(),
        };
        let labels = teams.clone();
        let _ = chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(n)
            .x_label_formatter(&|x| {
                let i = x.round();
                if (x - i).abs() > 1e-6 || i < 0.0 {
                    String::new()
                } else {
                    labels
                        .get(i as usize)
                        .map(|t| t.to_string())
                        .unwrap_or_default()
                }
            })
            .x_desc("team")
            .y_desc(if unit == "h" {
                "wait (hours)"
            } else {
                "wait (minutes)"
            })
            .y_labels(6)
            .y_label_formatter(&|y| format!("{y:.digits$} {unit}"))
            .draw();
        let now_color = RGBColor(150, 156, 168);
        let draft_color = RGBColor(47, 95, 208);
        let bars = |offset: f64, color: RGBColor, value: &dyn Fn(usize) -> f64| {
            (0..teams.len())
                .map(|i| {
                    let x0 = i as f64 + offset;
                    Rectangle::new([(x0, 0.0), (x0 + 0.38, value(i))], color.filled())
                })
                .collect::<Vec<_>>()
        };
        let _ = chart
            .draw_series(bars(-0.4, now_color, &|i| hours(&current[i])))
            .map(|s| {
                s.label("current quotas").legend(move |(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 12, y + 5)], now_color.filled())
                })
            });
        let _ = chart
            .draw_series(bars(0.02, draft_color, &|i| draft_of(teams[i])))
            .map(|s| {
                s.label("draft").legend(move |(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 12, y + 5)], draft_color.filled())
                })
            });
        let _ = chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.9))
            .border_style(BLACK.mix(0.3))
            .draw();
        let _ = root.present();
    }
    svg
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn t(min: i64) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, 1, 0, 0, 0).unwrap() + Duration::minutes(min)
    }

    fn job(team: &str, gpus: u32, at_min: i64, run_min: u64) -> TraceJob {
        TraceJob {
            team: team.into(),
            pool: "p".into(),
            gpus,
            priority: Priority::Normal,
            submitted_at: t(at_min),
            runtime_s: run_min * 60,
        }
    }

    fn pool(nodes: u32) -> Vec<PoolSpec> {
        vec![PoolSpec {
            name: "p".into(),
            gpu_model: "H100".into(),
            nodes,
            strategy: Default::default(),
        }]
    }

    fn q(team: &str, nominal: u32, borrow: Option<u32>) -> (String, String, QuotaSpec) {
        (
            team.into(),
            "p".into(),
            QuotaSpec {
                nominal,
                borrowing_limit: borrow,
                lending_limit: None,
                strategy: None,
            },
        )
    }

    /// Stored history is not trusted to be sane: arrivals at the end of time, runtimes past
    /// any bound and gangs of every GPU a u32 holds replay without a panic or a wrap.
    #[test]
    fn extreme_history_replays_without_overflow() {
        let end = DateTime::<Utc>::MAX_UTC - Duration::hours(1);
        let trace = vec![
            TraceJob {
                submitted_at: end,
                runtime_s: u64::MAX,
                ..job("a", 8, 0, 1)
            },
            TraceJob {
                submitted_at: DateTime::<Utc>::MIN_UTC,
                runtime_s: u64::MAX,
                ..job("a", 8, 0, 1)
            },
            TraceJob {
                runtime_s: i64::MAX as u64 + 1,
                ..job("b", u32::MAX, 0, 1)
            },
            job("b", 8, 5, 10),
        ];
        let out = replay(
            &pool(2),
            &[q("a", 8, Some(8)), q("b", u32::MAX, None)],
            &trace,
        );
        let a = out.iter().find(|o| o.team == "a").unwrap();
        assert_eq!(a.jobs, 2);
        assert!(a.median_wait_s >= 0 && a.p90_wait_s >= 0, "{a:?}");
        assert!(a.gpu_hours.is_finite() && a.gpu_hours > 0.0, "{a:?}");
        let b = out.iter().find(|o| o.team == "b").unwrap();
        assert_eq!((b.jobs, b.never_started), (2, 1), "{b:?}");
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        assert_eq!(percentile(&[], 50.0), 0);
        assert_eq!(percentile(&[7], 90.0), 7);
        assert_eq!(percentile(&[0, 59], 50.0), 0);
        assert_eq!(percentile(&[0, 59], 90.0), 59);
        let ten: Vec<i64> = (1..=10).collect();
        assert_eq!((percentile(&ten, 50.0), percentile(&ten, 90.0)), (5, 9));
    }

    /// A trace small enough to work out by hand, under the current quotas and a draft.
    #[test]
    fn a_hand_computed_trace_under_two_quota_settings() {
        // Two nodes (16 GPUs). nlp launches three 8-GPU jobs of an hour at 0, 10 and 20 min;
        // vision one 8-GPU job of 30 min at 5 min.
        let trace = vec![
            job("nlp", 8, 0, 60),
            job("vision", 8, 5, 30),
            job("nlp", 8, 10, 60),
            job("nlp", 8, 20, 60),
        ];
        // Current: nlp 8 and vision 8, no borrowing. nlp's jobs run one after another:
        // waits 0, 50 (10 → 60) and 100 min (20 → 120); vision starts at once.
        let current = replay(
            &pool(2),
            &[q("nlp", 8, Some(0)), q("vision", 8, Some(0))],
            &trace,
        );
        let nlp = current.iter().find(|o| o.team == "nlp").unwrap();
        assert_eq!(
            (nlp.jobs, nlp.median_wait_s, nlp.p90_wait_s),
            (3, 50 * 60, 100 * 60)
        );
        assert_eq!(nlp.gpu_hours, 24.0, "3 jobs × 8 GPUs × 1 h");
        let vision = current.iter().find(|o| o.team == "vision").unwrap();
        assert_eq!((vision.median_wait_s, vision.gpu_hours), (0, 4.0));
        // Draft: nlp may borrow 8. At 10 min vision holds 8, nlp 8: the pool is full, so
        // nlp's second job starts when vision's ends (35 min): wait 25; the third at 60 min
        // when nlp's first ends: wait 40.
        let draft = replay(
            &pool(2),
            &[q("nlp", 8, Some(8)), q("vision", 8, Some(0))],
            &trace,
        );
        let nlp = draft.iter().find(|o| o.team == "nlp").unwrap();
        assert_eq!((nlp.median_wait_s, nlp.p90_wait_s), (25 * 60, 40 * 60));
        assert_eq!(nlp.preemptions, 0);
        // With reclaim: vision launches again at 40 min while nlp borrows → nlp's newest
        // borrowing job is preempted and waits again.
        let mut reclaim = trace.clone();
        reclaim.push(job("vision", 8, 40, 10));
        let draft = replay(
            &pool(2),
            &[q("nlp", 8, Some(8)), q("vision", 8, Some(0))],
            &reclaim,
        );
        let nlp = draft.iter().find(|o| o.team == "nlp").unwrap();
        assert_eq!(nlp.preemptions, 1, "{draft:?}");
        // A runtime in the trace is the work the job did: preempted after 5 min (35 → 40), it
        // does all of its hour again once admitted again (the sim's max runtime, counted over
        // admissions as Kueue does, would stop it after 55 min).
        assert!(
            (nlp.gpu_hours - (24.0 + 8.0 * 5.0 / 60.0)).abs() < 0.01,
            "{draft:?}"
        );
        let vision = draft.iter().find(|o| o.team == "vision").unwrap();
        assert_eq!(vision.p90_wait_s, 0, "vision reclaims at once");
    }

    #[test]
    fn the_chart_has_axes_units_a_legend_and_both_bars() {
        let o = |team: &str, p90: i64| TeamOutcome {
            team: team.into(),
            jobs: 3,
            never_started: 0,
            median_wait_s: 0,
            p90_wait_s: p90,
            gpu_hours: 1.0,
            preemptions: 0,
        };
        let svg = wait_chart(
            &[o("nlp", 7200), o("vision", 0)],
            &[o("nlp", 1800), o("vision", 0)],
        );
        std::fs::write(std::env::temp_dir().join("gantry-wait-chart.svg"), &svg).unwrap();
        assert!(svg.starts_with("<svg"), "{svg}");
        for text in [
            "90th percentile wait, last 30 days",
            "wait (hours)",
            "team",
            "current quotas",
            "draft",
            "nlp",
            "vision",
            "2.0 h",
        ] {
            assert!(svg.contains(text), "{text} missing from the chart");
        }
        assert!(svg.matches("<rect").count() >= 4, "bars for both settings");
        let short = wait_chart(&[o("nlp", 600)], &[o("nlp", 0)]);
        assert!(
            short.contains("wait (minutes)") && short.contains("10 min"),
            "short waits in minutes"
        );
    }

    #[test]
    fn a_job_too_large_for_its_quota_never_starts() {
        let trace = vec![job("nlp", 16, 0, 60)];
        let out = replay(&pool(2), &[q("nlp", 8, Some(0))], &trace);
        assert_eq!(
            (out[0].jobs, out[0].never_started, out[0].gpu_hours),
            (1, 1, 0.0)
        );
    }
}
