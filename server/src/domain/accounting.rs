//! GPU accounting: GPU-hours allocated, used (allocation × utilization), idle, and
//! efficiency, per team, user, pool or template, per day, week or month in the configured
//! time zone.
//!
//! The rules:
//! - A job counts from admission to the end of each run interval; a preempted job's intervals
//!   add up; time in the queue counts nothing.
//! - An interval is split at bucket boundaries in the configured time zone (so a
//!   Europe/Berlin day in which the clocks go back holds 25 hours).
//! - A report over `[from, to)` counts exactly the part of each interval inside it; a running
//!   job counts up to `now`.
//! - Used and idle hours come from the interval's stored mean utilization. An interval whose
//!   utilization is not known yet counts as allocated and `unmeasured`, not as idle.

use std::collections::BTreeMap;

use chrono::{DateTime, Datelike, Duration, NaiveDate, TimeZone, Utc};
use chrono_tz::Tz;
use serde::{Deserialize, Serialize};

/// One run interval of a job, as stored.
#[derive(Clone, Debug, PartialEq)]
pub struct Interval {
    pub team: String,
    pub user: String,
    pub pool: String,
    pub template: String,
    pub gpus: u32,
    pub start: DateTime<Utc>,
    /// `None` while the job still holds its GPUs.
    pub end: Option<DateTime<Utc>>,
    /// Mean GPU utilization over the interval, 0..=1, once known.
    pub util: Option<f64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GroupBy {
    Team,
    User,
    Pool,
    Template,
}

impl GroupBy {
    /// `team`, `user`, `pool` or `template`; else what is accepted.
    pub fn parse(v: &str) -> Result<GroupBy, String> {
        match v {
            "team" => Ok(GroupBy::Team),
            "user" => Ok(GroupBy::User),
            "pool" => Ok(GroupBy::Pool),
            "template" => Ok(GroupBy::Template),
            other => Err(format!(
                "'{other}' is not one of team, user, pool, template"
            )),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            GroupBy::Team => "team",
            GroupBy::User => "user",
            GroupBy::Pool => "pool",
            GroupBy::Template => "template",
        }
    }

    fn key(self, i: &Interval) -> &str {
        match self {
            GroupBy::Team => &i.team,
            GroupBy::User => &i.user,
            GroupBy::Pool => &i.pool,
            GroupBy::Template => &i.template,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Bucket {
    Day,
    /// Weeks start on Monday (ISO 8601).
    Week,
    Month,
}

impl Bucket {
    /// `day`, `week` or `month`; else what is accepted.
    pub fn parse(v: &str) -> Result<Bucket, String> {
        match v {
            "day" => Ok(Bucket::Day),
            "week" => Ok(Bucket::Week),
            "month" => Ok(Bucket::Month),
            other => Err(format!("'{other}' is not one of day, week, month")),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Bucket::Day => "day",
            Bucket::Week => "week",
            Bucket::Month => "month",
        }
    }
}

/// One row of a report: a bucket (its first local date) and a group.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct UsageRow {
    /// The bucket's first day in the configured time zone, `YYYY-MM-DD`.
    pub bucket_start: NaiveDate,
    pub key: String,
    pub gpu_hours_allocated: f64,
    pub gpu_hours_used: f64,
    pub gpu_hours_idle: f64,
    /// Allocated hours whose utilization is not known (yet).
    pub gpu_hours_unmeasured: f64,
    /// Used ÷ measured allocated hours; `None` when nothing was measured.
    pub efficiency: Option<f64>,
}

/// The local date a bucket containing `date` starts on.
pub fn bucket_of(date: NaiveDate, bucket: Bucket) -> NaiveDate {
    match bucket {
        Bucket::Day => date,
        Bucket::Week => date - Duration::days(date.weekday().num_days_from_monday().into()),
        Bucket::Month => date.with_day(1).expect("day 1 exists"),
    }
}

/// The first day of the bucket after the one starting on `start`; saturating at the last
/// date there is (a report is never near it, but a panic is not the way to say so).
fn next_bucket(start: NaiveDate, bucket: Bucket) -> NaiveDate {
    match bucket {
        Bucket::Day => start.checked_add_days(chrono::Days::new(1)),
        Bucket::Week => start.checked_add_days(chrono::Days::new(7)),
        Bucket::Month => start
            .with_day(1)
            .and_then(|d| d.checked_add_months(chrono::Months::new(1))),
    }
    .unwrap_or(NaiveDate::MAX)
}

/// The instant a local date begins in `tz`. Where midnight does not exist (a DST jump at
/// midnight), the day begins at the first instant that does.
pub fn local_midnight(date: NaiveDate, tz: Tz) -> DateTime<Utc> {
    let mut t = date.and_hms_opt(0, 0, 0).expect("midnight");
    for _ in 0..180 {
        if let Some(x) = tz.from_local_datetime(&t).earliest() {
            return x.with_timezone(&Utc);
        }
        match t.checked_add_signed(Duration::minutes(1)) {
            Some(next) => t = next,
            None => break,
        }
    }
    Utc.from_utc_datetime(&date.and_hms_opt(0, 0, 0).expect("midnight"))
}

fn local_date(t: DateTime<Utc>, tz: Tz) -> NaiveDate {
    t.with_timezone(&tz).date_naive()
}

#[derive(Default, Clone, Copy)]
pub struct Sums {
    allocated_ms: f64,
    used_ms: f64,
    measured_ms: f64,
}

/// The pieces of `i` inside `[from, to)` (an open interval runs to `now`), one per bucket:
/// (the bucket's first local day, GPU-milliseconds).
pub fn pieces(
    i: &Interval,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    now: DateTime<Utc>,
    bucket: Bucket,
    tz: Tz,
) -> Vec<(NaiveDate, f64)> {
    let start = i.start.max(from);
    let end = i.end.unwrap_or(now).min(to);
    let mut out = Vec::new();
    let mut cur = start;
    while cur < end {
        let b = bucket_of(local_date(cur, tz), bucket);
        let boundary = local_midnight(next_bucket(b, bucket), tz);
        // At the last date there is, the next bucket saturates to this one: take the rest.
        let piece_end = if boundary > cur {
            end.min(boundary)
        } else {
            end
        };
        out.push((
            b,
            (piece_end - cur).num_milliseconds() as f64 * f64::from(i.gpus),
        ));
        cur = piece_end;
    }
    out
}

/// One job's GPU-hours over its runs, as the usage report counts them: allocated from
/// admission to the end of each run; used = allocated × mean utilization where measured; idle
/// the measured rest; efficiency = used / measured. `None` where nothing is measured yet.
#[derive(Clone, Debug, PartialEq)]
pub struct JobHours {
    pub allocated: f64,
    pub used: Option<f64>,
    pub idle: Option<f64>,
    pub unmeasured: f64,
    pub efficiency: Option<f64>,
}

/// One run of a job: GPUs, start, end (`None`: still running), mean utilization 0..=1.
pub type Run = (u32, DateTime<Utc>, Option<DateTime<Utc>>, Option<f64>);

pub fn job_hours(runs: &[Run], now: DateTime<Utc>) -> JobHours {
    let (mut allocated, mut measured, mut used) = (0.0, 0.0, 0.0);
    for (gpus, start, end, util) in runs {
        let h = (end.unwrap_or(now) - *start).num_milliseconds().max(0) as f64 / 3_600_000.0
            * f64::from(*gpus);
        allocated += h;
        if let Some(u) = util {
            measured += h;
            used += h * u;
        }
    }
    let any = measured > 0.0;
    JobHours {
        allocated,
        used: any.then_some(used),
        idle: any.then_some(measured - used),
        unmeasured: allocated - measured,
        efficiency: any.then(|| used / measured),
    }
}

/// Sums per (bucket, group) in GPU-milliseconds, before they become hours.
#[derive(Default)]
pub struct Accumulator {
    sums: BTreeMap<(NaiveDate, String), Sums>,
}

impl Accumulator {
    /// Adds every piece of `intervals` inside `[from, to)`.
    #[allow(clippy::too_many_arguments)]
    pub fn add_intervals(
        &mut self,
        intervals: &[Interval],
        from: DateTime<Utc>,
        to: DateTime<Utc>,
        now: DateTime<Utc>,
        group_by: GroupBy,
        bucket: Bucket,
        tz: Tz,
    ) {
        for i in intervals {
            for (b, gpu_ms) in pieces(i, from, to, now, bucket, tz) {
                let measured = if i.util.is_some() { gpu_ms } else { 0.0 };
                let used = gpu_ms * i.util.unwrap_or(0.0).clamp(0.0, 1.0);
                self.add(b, group_by.key(i), gpu_ms, measured, used);
            }
        }
    }

    /// Adds one rolled-up day (already in GPU-milliseconds) to the bucket holding it.
    pub fn add_day(
        &mut self,
        day: NaiveDate,
        key: &str,
        gpu_ms: f64,
        measured: f64,
        used: f64,
        bucket: Bucket,
    ) {
        self.add(bucket_of(day, bucket), key, gpu_ms, measured, used);
    }

    fn add(&mut self, b: NaiveDate, key: &str, gpu_ms: f64, measured: f64, used: f64) {
        let s = self.sums.entry((b, key.to_string())).or_default();
        s.allocated_ms += gpu_ms;
        s.measured_ms += measured;
        s.used_ms += used;
    }

    pub fn rows(self) -> Vec<UsageRow> {
        const MS_PER_HOUR: f64 = 3_600_000.0;
        self.sums
            .into_iter()
            .map(|((bucket_start, key), s)| UsageRow {
                bucket_start,
                key,
                gpu_hours_allocated: s.allocated_ms / MS_PER_HOUR,
                gpu_hours_used: s.used_ms / MS_PER_HOUR,
                gpu_hours_idle: (s.measured_ms - s.used_ms) / MS_PER_HOUR,
                gpu_hours_unmeasured: (s.allocated_ms - s.measured_ms) / MS_PER_HOUR,
                efficiency: (s.measured_ms > 0.0).then(|| s.used_ms / s.measured_ms),
            })
            .collect()
    }
}

/// The report over `[from, to)` straight from the intervals: rows sorted by bucket, then
/// group. The definition every faster path is checked against.
pub fn report(
    intervals: &[Interval],
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    now: DateTime<Utc>,
    group_by: GroupBy,
    bucket: Bucket,
    tz: Tz,
) -> Vec<UsageRow> {
    let mut acc = Accumulator::default();
    acc.add_intervals(intervals, from, to, now, group_by, bucket, tz);
    acc.rows()
}

/// The whole local days inside `[from, to)`: `[first, end)`, possibly empty.
pub fn whole_days(from: DateTime<Utc>, to: DateTime<Utc>, tz: Tz) -> (NaiveDate, NaiveDate) {
    let mut first = local_date(from, tz);
    if local_midnight(first, tz) < from {
        first += Duration::days(1);
    }
    let end = local_date(to, tz);
    // `end` begins at or before `to`: days before it end by `to`.
    (first, end.max(first))
}

/// The rows as CSV with a header; the group's column is named after the grouping.
pub fn to_csv(rows: &[UsageRow], group_by: GroupBy) -> String {
    let mut out = format!(
        "bucket_start,{},gpu_hours_allocated,gpu_hours_used,gpu_hours_idle,gpu_hours_unmeasured,efficiency\n",
        group_by.as_str()
    );
    for r in rows {
        out.push_str(&format!(
            "{},{},{:.3},{:.3},{:.3},{:.3},{}\n",
            r.bucket_start,
            super::csv::text(&r.key, false),
            r.gpu_hours_allocated,
            r.gpu_hours_used,
            r.gpu_hours_idle,
            r.gpu_hours_unmeasured,
            r.efficiency.map(|e| format!("{e:.4}")).unwrap_or_default()
        ));
    }
    out
}

#[cfg(test)]
mod tests;

/// Stacked bars of allocated GPU-hours per bucket, one colour per group, and the
/// efficiency (used ÷ measured) of each bucket as a line on a 0–100 % axis on the right.
pub fn chart_svg(rows: &[UsageRow], group_by: GroupBy, bucket: Bucket) -> String {
    chart_svg_sized(rows, group_by, bucket, (860, 370))
}

/// The chart drawn for a phone's width: the same text sizes on a narrower canvas, so the
/// text stays readable when it is scaled to the screen.
pub fn chart_svg_narrow(rows: &[UsageRow], group_by: GroupBy, bucket: Bucket) -> String {
    chart_svg_sized(rows, group_by, bucket, (420, 380))
}

fn chart_svg_sized(
    rows: &[UsageRow],
    group_by: GroupBy,
    bucket: Bucket,
    (width, height): (u32, u32),
) -> String {
    use plotters::prelude::*;
    let buckets: Vec<NaiveDate> = {
        let mut b: Vec<NaiveDate> = rows.iter().map(|r| r.bucket_start).collect();
        b.dedup();
        b
    };
    let mut groups: Vec<&str> = rows.iter().map(|r| r.key.as_str()).collect();
    groups.sort();
    groups.dedup();
    let n = buckets.len().max(1);
    let index = |d: NaiveDate| buckets.iter().position(|b| *b == d).unwrap_or(0);
    let totals: Vec<f64> = buckets
        .iter()
        .map(|b| {
            rows.iter()
                .filter(|r| r.bucket_start == *b)
                .map(|r| r.gpu_hours_allocated)
                .sum()
        })
        .collect();
    let top = totals.iter().copied().fold(0.0_f64, f64::max).max(1.0) * 1.08;
    let palette = [
        RGBColor(47, 95, 208),
        RGBColor(29, 122, 62),
        RGBColor(154, 98, 0),
        RGBColor(107, 63, 184),
        RGBColor(180, 35, 24),
        RGBColor(31, 111, 184),
        RGBColor(90, 99, 114),
    ];
    let per = bucket.as_str();
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (width, height)).into_drawing_area();
        let _ = root.fill(&WHITE);
        let title = format!("GPU-hours allocated per {per}, by {}", group_by.as_str());
        let title_x = (width as i32 - 8 * title.chars().count() as i32).max(16) / 2;
        let _ = root.draw(&Text::new(title, (title_x, 10), ("sans-serif", 16)));
        // The legend in rows under the title, so it never hides a bar or the line.
        let narrow = width < 600;
        let mut x = if narrow { 16 } else { 90 };
        let mut y = 34;
        let entries = groups
            .iter()
            .enumerate()
            .map(|(gi, g)| (g.to_string(), Some(palette[gi % palette.len()])))
            .chain(std::iter::once((
                "efficiency (right axis)".to_string(),
                None,
            )));
        for (label, color) in entries {
            let w = 16 + 7 * label.chars().count() as i32 + 18;
            if x + w > width as i32 && x > 16 {
                x = 16;
                y += 18;
            }
            match color {
                Some(c) => {
                    let _ = root.draw(&Rectangle::new([(x, y), (x + 11, y + 11)], c.filled()));
                }
                None => {
                    let _ = root.draw(&PathElement::new(
                        vec![(x - 2, y + 6), (x + 12, y + 6)],
                        RGBColor(20, 24, 32).stroke_width(2),
                    ));
                }
            }
            let _ = root.draw(&Text::new(
                label.clone(),
                (x + 16, y - 1),
                ("sans-serif", 13),
            ));
            x += w;
        }
        let mut chart = match ChartBuilder::on(&root)
            .margin(12)
            .margin_top((y + 24) as u32)
            .x_label_area_size(40)
            .y_label_area_size(if narrow { 70 } else { 84 })
            .right_y_label_area_size(if narrow { 44 } else { 56 })
            .build_cartesian_2d(-0.5..n as f64 - 0.5, 0.0..top)
        {
            Ok(c) => c.set_secondary_coord(-0.5..n as f64 - 0.5, 0.0..100.0),
            Err(_) => return String::new(),
        };
        let labels = buckets.clone();
        let every = n.div_ceil(if narrow { 4 } else { 8 }).max(1);
        let _ = chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(n + 1)
            .x_label_formatter(&|x| {
                let i = x.round();
                if (x - i).abs() > 1e-6 || i < 0.0 || !(i as usize).is_multiple_of(every) {
                    String::new()
                } else {
                    labels
                        .get(i as usize)
                        .map(|d| d.format("%b %d").to_string())
                        .unwrap_or_default()
                }
            })
            .x_desc(format!("{per} (start)"))
            .y_desc("GPU-hours allocated")
            .y_labels(6)
            .y_label_formatter(&|y| format!("{y:.0} GPU-h"))
            .draw();
        let _ = chart
            .configure_secondary_axes()
            .y_desc("efficiency (%)")
            .y_labels(6)
            .y_label_formatter(&|y| format!("{y:.0} %"))
            .draw();
        let mut base = vec![0.0; n];
        for (gi, g) in groups.iter().enumerate() {
            let color = palette[gi % palette.len()];
            let bars: Vec<_> = rows
                .iter()
                .filter(|r| r.key == *g)
                .map(|r| {
                    let i = index(r.bucket_start);
                    let y0 = base[i];
                    base[i] += r.gpu_hours_allocated;
                    Rectangle::new(
                        [(i as f64 - 0.38, y0), (i as f64 + 0.38, base[i])],
                        color.filled(),
                    )
                })
                .collect();
            let _ = chart.draw_series(bars);
        }
        // Efficiency per bucket over every group: used ÷ measured.
        let points: Vec<(f64, f64)> = buckets
            .iter()
            .enumerate()
            .filter_map(|(i, b)| {
                let (used, measured) =
                    rows.iter()
                        .filter(|r| r.bucket_start == *b)
                        .fold((0.0, 0.0), |(u, m), r| {
                            (
                                u + r.gpu_hours_used,
                                m + r.gpu_hours_used + r.gpu_hours_idle,
                            )
                        });
                (measured > 0.0).then(|| (i as f64, 100.0 * used / measured))
            })
            .collect();
        let line = RGBColor(20, 24, 32);
        let _ = chart.draw_secondary_series(LineSeries::new(points.clone(), line.stroke_width(2)));
        let _ =
            chart.draw_secondary_series(points.iter().map(|p| Circle::new(*p, 3, line.filled())));
        let _ = root.present();
    }
    svg
}
