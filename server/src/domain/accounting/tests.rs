//! GPU accounting: hand-computed cases and a minute-by-minute property test of the report.

use super::*;
use proptest::prelude::*;

fn t(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

fn d(s: &str) -> NaiveDate {
    s.parse().unwrap()
}

fn iv(team: &str, gpus: u32, start: &str, end: Option<&str>, util: Option<f64>) -> Interval {
    Interval {
        team: team.into(),
        user: format!("{team}-user"),
        pool: "hgx-h100".into(),
        template: "llama".into(),
        gpus,
        start: t(start),
        end: end.map(t),
        util,
    }
}

fn cells(rows: &[UsageRow]) -> Vec<(String, String, f64)> {
    rows.iter()
        .map(|r| {
            (
                r.bucket_start.to_string(),
                r.key.clone(),
                r.gpu_hours_allocated,
            )
        })
        .collect()
}

const FROM: &str = "2026-11-01T00:00:00Z";
const TO: &str = "2026-12-01T00:00:00Z";
const NOW: &str = "2026-11-20T00:00:00Z";

fn run(intervals: &[Interval], bucket: Bucket, tz: Tz) -> Vec<UsageRow> {
    report(intervals, t(FROM), t(TO), t(NOW), GroupBy::Team, bucket, tz)
}

#[test]
fn an_interval_across_midnight_is_split_at_the_day_boundary() {
    // 8 GPUs from 22:00 to 02:00 UTC: 2 h × 8 on each side of midnight.
    let rows = run(
        &[iv(
            "nlp",
            8,
            "2026-11-03T22:00:00Z",
            Some("2026-11-04T02:00:00Z"),
            None,
        )],
        Bucket::Day,
        Tz::UTC,
    );
    assert_eq!(
        cells(&rows),
        [
            ("2026-11-03".into(), "nlp".into(), 16.0),
            ("2026-11-04".into(), "nlp".into(), 16.0)
        ]
    );
}

#[test]
fn days_follow_the_configured_time_zone() {
    // The same interval in Berlin (UTC+1 in November): 23:00–03:00 local, 1 h + 3 h.
    let rows = run(
        &[iv(
            "nlp",
            8,
            "2026-11-03T22:00:00Z",
            Some("2026-11-04T02:00:00Z"),
            None,
        )],
        Bucket::Day,
        chrono_tz::Europe::Berlin,
    );
    assert_eq!(
        cells(&rows),
        [
            ("2026-11-03".into(), "nlp".into(), 8.0),
            ("2026-11-04".into(), "nlp".into(), 24.0)
        ]
    );
    // The day the clocks go back holds 25 hours: a job running through it counts 25 × GPUs.
    let rows = report(
        &[iv(
            "nlp",
            1,
            "2026-10-24T00:00:00Z",
            Some("2026-10-27T00:00:00Z"),
            None,
        )],
        t("2026-10-01T00:00:00Z"),
        t("2026-11-01T00:00:00Z"),
        t(NOW),
        GroupBy::Team,
        Bucket::Day,
        chrono_tz::Europe::Berlin,
    );
    let oct25 = rows
        .iter()
        .find(|r| r.bucket_start == d("2026-10-25"))
        .unwrap();
    assert_eq!(oct25.gpu_hours_allocated, 25.0);
    let total: f64 = rows.iter().map(|r| r.gpu_hours_allocated).sum();
    assert_eq!(total, 72.0);
}

#[test]
fn a_preempted_job_adds_its_intervals_and_the_queue_counts_nothing() {
    // 16 GPUs: ran 1 h, preempted, waited 5 h in the queue, ran 2 h more.
    let rows = run(
        &[
            iv(
                "nlp",
                16,
                "2026-11-05T10:00:00Z",
                Some("2026-11-05T11:00:00Z"),
                None,
            ),
            iv(
                "nlp",
                16,
                "2026-11-05T16:00:00Z",
                Some("2026-11-05T18:00:00Z"),
                None,
            ),
        ],
        Bucket::Day,
        Tz::UTC,
    );
    assert_eq!(cells(&rows), [("2026-11-05".into(), "nlp".into(), 48.0)]);
}

#[test]
fn only_the_part_inside_the_range_counts_and_a_running_job_counts_to_now() {
    let intervals = [
        // Starts before the range: only from `from` on.
        iv(
            "nlp",
            8,
            "2026-10-31T20:00:00Z",
            Some("2026-11-01T02:00:00Z"),
            None,
        ),
        // Still running: up to `now` (2026-11-20T00:00Z), 2 h on the 19th.
        iv("vision", 4, "2026-11-19T22:00:00Z", None, None),
        // Entirely before the range.
        iv(
            "speech",
            8,
            "2026-10-01T00:00:00Z",
            Some("2026-10-02T00:00:00Z"),
            None,
        ),
    ];
    let rows = run(&intervals, Bucket::Day, Tz::UTC);
    assert_eq!(
        cells(&rows),
        [
            ("2026-11-01".into(), "nlp".into(), 16.0),
            ("2026-11-19".into(), "vision".into(), 8.0)
        ]
    );
    // `to` cuts too: [from, to) = the 1st, 00:00–01:00.
    let rows = report(
        &intervals,
        t(FROM),
        t("2026-11-01T01:00:00Z"),
        t(NOW),
        GroupBy::Team,
        Bucket::Day,
        Tz::UTC,
    );
    assert_eq!(cells(&rows), [("2026-11-01".into(), "nlp".into(), 8.0)]);
}

#[test]
fn used_idle_and_efficiency_come_from_utilization() {
    let rows = run(
        &[
            // 8 GPU-h at 25 %: 2 used, 6 idle.
            iv(
                "nlp",
                8,
                "2026-11-06T00:00:00Z",
                Some("2026-11-06T01:00:00Z"),
                Some(0.25),
            ),
            // 8 GPU-h at 75 %: 6 used, 2 idle.
            iv(
                "nlp",
                8,
                "2026-11-06T02:00:00Z",
                Some("2026-11-06T03:00:00Z"),
                Some(0.75),
            ),
            // 4 GPU-h not measured yet: allocated, neither used nor idle.
            iv(
                "nlp",
                4,
                "2026-11-06T04:00:00Z",
                Some("2026-11-06T05:00:00Z"),
                None,
            ),
        ],
        Bucket::Day,
        Tz::UTC,
    );
    assert_eq!(rows.len(), 1);
    let r = &rows[0];
    assert_eq!(r.gpu_hours_allocated, 20.0);
    assert_eq!(r.gpu_hours_used, 8.0);
    assert_eq!(r.gpu_hours_idle, 8.0);
    assert_eq!(r.gpu_hours_unmeasured, 4.0);
    assert_eq!(r.efficiency, Some(0.5));
}

/// Sums are floating point (they reach infinity, never wrap), and at the last date there is
/// the buckets saturate instead of panicking or looping: a u32::MAX-GPU job running from the
/// start of time to its end is counted.
#[test]
fn extreme_times_and_sizes_neither_panic_nor_loop() {
    for bucket in [Bucket::Day, Bucket::Week, Bucket::Month] {
        assert_eq!(next_bucket(NaiveDate::MAX, bucket), NaiveDate::MAX);
    }
    let huge = Interval {
        gpus: u32::MAX,
        start: DateTime::<Utc>::MIN_UTC,
        end: None,
        ..iv("nlp", 8, FROM, None, Some(0.5))
    };
    let end = DateTime::<Utc>::MAX_UTC;
    for bucket in [Bucket::Day, Bucket::Month] {
        let rows = report(
            std::slice::from_ref(&huge),
            end - Duration::days(40),
            end,
            end,
            GroupBy::Team,
            bucket,
            chrono_tz::UTC,
        );
        let total: f64 = rows.iter().map(|r| r.gpu_hours_allocated).sum();
        assert!(total > 0.0 && total.is_finite(), "{bucket:?}: {total}");
    }
}

#[test]
fn weeks_start_on_monday_and_months_on_the_first() {
    // Sunday 2026-11-08 22:00 → Monday 2026-11-09 02:00 UTC.
    let i = [iv(
        "nlp",
        1,
        "2026-11-08T22:00:00Z",
        Some("2026-11-09T02:00:00Z"),
        None,
    )];
    assert_eq!(
        cells(&run(&i, Bucket::Week, Tz::UTC)),
        [
            ("2026-11-02".into(), "nlp".into(), 2.0),
            ("2026-11-09".into(), "nlp".into(), 2.0)
        ]
    );
    let i = [iv(
        "nlp",
        2,
        "2026-10-31T23:00:00Z",
        Some("2026-11-01T01:00:00Z"),
        None,
    )];
    let rows = report(
        &i,
        t("2026-10-01T00:00:00Z"),
        t(TO),
        t(NOW),
        GroupBy::Team,
        Bucket::Month,
        Tz::UTC,
    );
    assert_eq!(
        cells(&rows),
        [
            ("2026-10-01".into(), "nlp".into(), 2.0),
            ("2026-11-01".into(), "nlp".into(), 2.0)
        ]
    );
}

#[test]
fn groups_by_user_pool_and_template() {
    let mut a = iv(
        "nlp",
        8,
        "2026-11-06T00:00:00Z",
        Some("2026-11-06T01:00:00Z"),
        None,
    );
    let mut b = a.clone();
    b.user = "bob".into();
    b.pool = "hgx-h200".into();
    b.template = "qwen".into();
    a.user = "alice".into();
    let rows = report(
        &[a, b],
        t(FROM),
        t(TO),
        t(NOW),
        GroupBy::Pool,
        Bucket::Day,
        Tz::UTC,
    );
    let keys: Vec<_> = rows.iter().map(|r| r.key.as_str()).collect();
    assert_eq!(keys, ["hgx-h100", "hgx-h200"]);
}

#[test]
fn csv_has_a_header_and_the_same_numbers() {
    let rows = run(
        &[iv(
            "nlp",
            8,
            "2026-11-06T00:00:00Z",
            Some("2026-11-06T01:30:00Z"),
            Some(0.5),
        )],
        Bucket::Day,
        Tz::UTC,
    );
    let csv = to_csv(&rows, GroupBy::Team);
    assert_eq!(
        csv,
        "bucket_start,team,gpu_hours_allocated,gpu_hours_used,gpu_hours_idle,gpu_hours_unmeasured,efficiency\n\
         2026-11-06,nlp,12.000,6.000,6.000,0.000,0.5000\n"
    );
}

/// An independent computation: walk the range minute by minute and give each minute to the
/// local day it falls in. Exact when every time is a whole minute (time-zone offsets are).
fn by_minutes(
    intervals: &[Interval],
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    now: DateTime<Utc>,
    tz: Tz,
) -> BTreeMap<(NaiveDate, String), f64> {
    let mut out = BTreeMap::new();
    let mut m = from;
    while m < to {
        for i in intervals {
            if i.start <= m && m < i.end.unwrap_or(now) {
                *out.entry((m.with_timezone(&tz).date_naive(), i.team.clone()))
                    .or_insert(0.0) += f64::from(i.gpus) / 60.0;
            }
        }
        m += Duration::minutes(1);
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn the_report_matches_a_minute_by_minute_count(
        raw in prop::collection::vec((0usize..3, 1u32..=32, 0i64..(6 * 24 * 60), 0i64..(40 * 60), any::<bool>()), 0..12),
        from_off in 0i64..(2 * 24 * 60),
        len in 1i64..(5 * 24 * 60),
        tz_pick in 0usize..3,
    ) {
        // Around the end of summer time in Europe (2026-10-25), so some days are 25 h long.
        let base = t("2026-10-22T00:00:00Z");
        let tz = [Tz::UTC, chrono_tz::Europe::Berlin, chrono_tz::America::Los_Angeles][tz_pick];
        let now = base + Duration::days(7);
        let intervals: Vec<Interval> = raw.iter().map(|(team, gpus, start, dur, open)| {
            let start = base + Duration::minutes(*start);
            Interval {
                team: ["nlp", "vision", "speech"][*team].into(),
                user: "u".into(), pool: "p".into(), template: "t".into(),
                gpus: *gpus,
                start,
                end: (!open).then(|| start + Duration::minutes(*dur)),
                util: None,
            }
        }).collect();
        let from = base + Duration::minutes(from_off);
        let to = from + Duration::minutes(len);
        let rows = report(&intervals, from, to, now, GroupBy::Team, Bucket::Day, tz);
        let expected = by_minutes(&intervals, from, to, now, tz);
        let got: BTreeMap<(NaiveDate, String), f64> = rows.iter().map(|r| ((r.bucket_start, r.key.clone()), r.gpu_hours_allocated)).collect();
        prop_assert_eq!(got.len(), expected.len(), "{:?} vs {:?}", got, expected);
        for (k, v) in &expected {
            let g = got.get(k).copied().unwrap_or(-1.0);
            prop_assert!((g - v).abs() < 1e-6, "{:?}: {} vs {}", k, g, v);
        }
    }
}

#[test]
fn the_chart_has_axes_units_a_legend_and_the_efficiency_line() {
    let rows = run(
        &[
            iv(
                "nlp",
                8,
                "2026-11-06T00:00:00Z",
                Some("2026-11-06T10:00:00Z"),
                Some(0.8),
            ),
            iv(
                "vision",
                4,
                "2026-11-07T00:00:00Z",
                Some("2026-11-07T10:00:00Z"),
                Some(0.4),
            ),
        ],
        Bucket::Day,
        Tz::UTC,
    );
    let svg = chart_svg(&rows, GroupBy::Team, Bucket::Day);
    for needle in [
        "GPU-hours allocated per day, by team",
        "GPU-hours allocated",
        "efficiency (%)",
        "nlp",
        "vision",
        "efficiency (right axis)",
        "Nov 06",
        "GPU-h",
    ] {
        assert!(svg.contains(needle), "{needle} missing");
    }
    assert!(svg.contains("<polyline"), "the efficiency line");
    // For a phone: a narrower canvas with the same labels, its text drawn at the same sizes
    // (so about twice as large on the screen as the wide chart's scaled down).
    let narrow = chart_svg_narrow(&rows, GroupBy::Team, Bucket::Day);
    assert!(
        narrow.contains(r#"viewBox="0 0 420 380""#),
        "{}",
        &narrow[..200]
    );
    assert!(svg.contains(r#"viewBox="0 0 860 370""#));
    for needle in [
        "GPU-hours allocated per day, by team",
        "efficiency (%)",
        "nlp",
        "vision",
        "GPU-h",
    ] {
        assert!(
            narrow.contains(needle),
            "{needle} missing from the narrow chart"
        );
    }
    let sizes = |svg: &str| -> std::collections::BTreeSet<String> {
        svg.split(r#"font-size=""#)
            .skip(1)
            .filter_map(|rest| rest.split('"').next().map(String::from))
            .collect()
    };
    assert!(!sizes(&svg).is_empty());
    assert_eq!(sizes(&narrow), sizes(&svg), "the same text sizes");
}

#[test]
fn a_jobs_hours_count_every_run_and_measure_what_is_measured() {
    let t = |h: i64| Utc.with_ymd_and_hms(2026, 12, 1, 0, 0, 0).unwrap() + Duration::hours(h);
    // 16 GPUs for 2 h at 50 %, preempted; then 16 GPUs for 1 h, not measured yet.
    let runs = [
        (16, t(0), Some(t(2)), Some(0.5)),
        (16, t(3), Some(t(4)), None),
    ];
    let h = job_hours(&runs, t(10));
    assert_eq!(h.allocated, 48.0);
    assert_eq!(h.used, Some(16.0));
    assert_eq!(h.idle, Some(16.0));
    assert_eq!(h.unmeasured, 16.0);
    assert_eq!(h.efficiency, Some(0.5));
    let none = job_hours(&[(8, t(0), None, None)], t(1));
    assert_eq!(none.allocated, 8.0);
    assert_eq!((none.used, none.efficiency), (None, None));
}
