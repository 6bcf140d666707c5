//! Usage (team leads: their teams; admins: all): GPU-hours allocated, used and idle, and
//! efficiency, per day, week or month, grouped by team, user, pool or template. The range and
//! grouping live in the URL; the chart is drawn on the server; the CSV holds the same rows.

use leptos::prelude::*;

use crate::app::{Authed, Require};
use crate::components::{loaded, PageError};
use crate::model::{TopJob, UsageRowView, UsageView};

#[component]
pub fn UsagePage() -> impl IntoView {
    view! {
        <Authed require=Require::LeadOrAdmin>
            <Usage/>
        </Authed>
    }
}

fn hours(h: f64) -> String {
    // An empty float sum is -0.0: never show "-0.0".
    let h = h + 0.0;
    if h >= 100.0 {
        format!("{h:.0} GPU-h")
    } else {
        format!("{h:.1} GPU-h")
    }
}

fn percent(e: Option<f64>) -> String {
    e.map(|e| format!("{:.0} %", e * 100.0))
        .unwrap_or_else(|| "—".into())
}

#[component]
fn Usage() -> impl IntoView {
    let query = leptos_router::hooks::use_query_map();
    let get = move |k: &str, default: &str| {
        query
            .read()
            .get(k)
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| default.to_string())
    };
    let params = move || {
        (
            get("days", "30").parse::<u32>().unwrap_or(30),
            get("group_by", "team"),
            get("bucket", "day"),
        )
    };
    let report = Resource::new(params, |(days, group_by, bucket)| {
        crate::functions::get_usage(days, group_by, bucket)
    });
    // A link to the same page with one parameter changed.
    let link = move |k: &'static str, v: &'static str| {
        let (days, group_by, bucket) = params();
        let mut p = [
            ("days", days.to_string()),
            ("group_by", group_by),
            ("bucket", bucket),
        ];
        for (pk, pv) in p.iter_mut() {
            if *pk == k {
                *pv = v.to_string();
            }
        }
        let q: Vec<String> = p.iter().map(|(k, v)| format!("{k}={v}")).collect();
        format!("/usage?{}", q.join("&"))
    };
    let choice = move |k: &'static str, v: &'static str, label: &'static str| {
        let on = move || match k {
            "days" => params().0.to_string() == v,
            "group_by" => params().1 == v,
            _ => params().2 == v,
        };
        view! {
            <a class="chip" class:on=on href=move || link(k, v) data-testid=format!("usage-{k}-{v}")>{label}</a>
        }
    };
    view! {
        <section class="page-head">
            <h1>"Usage"</h1>
            <p class="muted">"GPU-hours from admission to the end of each run (time in the queue counts nothing). Used = allocated × measured utilization; idle = allocated but not used."</p>
        </section>
        <div class="usage-controls">
            <span class="muted">"Range"</span>
            {choice("days", "7", "7 days")}
            {choice("days", "30", "30 days")}
            {choice("days", "90", "90 days")}
            <span class="muted">"By"</span>
            {choice("group_by", "team", "team")}
            {choice("group_by", "user", "user")}
            {choice("group_by", "pool", "pool")}
            {choice("group_by", "template", "template")}
            <span class="muted">"Per"</span>
            {choice("bucket", "day", "day")}
            {choice("bucket", "week", "week")}
            {choice("bucket", "month", "month")}
        </div>
        <Transition fallback=|| view! { <p class="muted">"Loading usage…"</p> }>
            {move || Suspend::new(async move {
                loaded(report).await.map(|r| match r {
                    Ok(v) => view! { <Report v/> }.into_any(),
                    Err(e) => view! { <PageError err=e/> }.into_any(),
                })
            })}
        </Transition>
    }
}

#[component]
fn Report(v: UsageView) -> impl IntoView {
    let t = v.total.clone();
    let empty = v.rows.is_empty();
    let key = v.group_by.clone();
    view! {
        <section class="figures" data-testid="usage-totals">
            <div class="big-figure"><span class="value" data-testid="usage-allocated">{hours(t.gpu_hours_allocated)}</span><span class="label">"allocated"</span></div>
            <div class="big-figure"><span class="value">{hours(t.gpu_hours_used)}</span><span class="label">"used"</span></div>
            <div class="big-figure"><span class="value">{hours(t.gpu_hours_idle)}</span><span class="label">"idle (allocated, not used)"</span></div>
            <div class="big-figure"><span class="value">{percent(t.efficiency)}</span><span class="label">"efficiency"</span></div>
        </section>
        <p class="muted">{format!("{} to {} inclusive; days in {}.", v.from, v.last_day, v.time_zone)}
            {(t.gpu_hours_unmeasured > 0.0).then(|| format!(" {} not measured yet (counted as allocated only).", hours(t.gpu_hours_unmeasured)))}
        </p>
        {if empty {
            view! { <p class="empty" data-testid="usage-empty">"No GPU-hours in this range yet: nothing ran."</p> }.into_any()
        } else {
            view! {
                <div class="chart chart-wide" data-testid="usage-chart" inner_html=v.chart_svg.clone()></div>
                <div class="chart chart-narrow" data-testid="usage-chart-narrow" inner_html=v.chart_svg_narrow.clone()></div>
            }.into_any()
        }}
        <div class="two-col">
            <section class="panel" data-testid="quota-use">
                <h2>"Quota against use"</h2>
                <table class="audit-table">
                    <thead><tr><th>"Team"</th><th>"Pool"</th><th class="num">"Quota × hours"</th><th class="num">"Allocated"</th><th class="num">"Of quota"</th></tr></thead>
                    <tbody>
                        {v.quota_use.iter().map(|q| view! {
                            <tr>
                                <td>{q.team.clone()}</td><td>{q.pool.clone()}</td>
                                <td class="num">{hours(q.quota_gpu_hours)}</td>
                                <td class="num">{hours(q.gpu_hours_allocated)}</td>
                                <td class="num">{if q.quota_gpu_hours > 0.0 { format!("{:.0} %", 100.0 * q.gpu_hours_allocated / q.quota_gpu_hours + 0.0) } else { "no quota".into() }}</td>
                            </tr>
                        }).collect_view()}
                    </tbody>
                </table>
                <p class="muted small">"Over 100 %: the team borrowed what others left idle."</p>
            </section>
            <section class="panel" data-testid="top-jobs">
                <h2>"Top jobs"</h2>
                <TopList title="By GPU-hours" jobs=v.top_allocated.clone() idle=false/>
                <TopList title="By idle GPU-hours" jobs=v.top_idle.clone() idle=true/>
            </section>
        </div>
        <section class="panel">
            <div class="panel-head">
                <h2>"The numbers"</h2>
                <a class="button" href=v.csv_url.clone() download="gantry-usage.csv" rel="external" data-testid="usage-csv">"Download CSV"</a>
            </div>
            <table class="audit-table" data-testid="usage-table">
                <thead><tr>
                    <th>{format!("{} start", v.bucket)}</th><th>{key}</th>
                    <th class="num">"Allocated"</th><th class="num">"Used"</th><th class="num">"Idle"</th><th class="num">"Efficiency"</th>
                </tr></thead>
                <tbody>
                    {v.rows.into_iter().map(|r: UsageRowView| view! {
                        <tr>
                            <td>{r.bucket_start}</td><td>{r.key}</td>
                            <td class="num" data-allocated=format!("{:.3}", r.gpu_hours_allocated)>{hours(r.gpu_hours_allocated)}</td>
                            <td class="num">{hours(r.gpu_hours_used)}</td>
                            <td class="num">{hours(r.gpu_hours_idle)}</td>
                            <td class="num">{percent(r.efficiency)}</td>
                        </tr>
                    }).collect_view()}
                </tbody>
            </table>
        </section>
    }
}

#[component]
fn TopList(title: &'static str, jobs: Vec<TopJob>, idle: bool) -> impl IntoView {
    view! {
        <h3 class="small-head">{title}</h3>
        {if jobs.is_empty() {
            view! { <p class="muted small">"None in this range."</p> }.into_any()
        } else {
            view! {
                <ol class="top-jobs">
                    {jobs.into_iter().map(|j| view! {
                        <li>
                            <a href=format!("/jobs/{}", j.id)>{j.name}</a>
                            <span class="muted">{format!(" · {} · {}", j.user, j.team)}</span>
                            <span class="num">{if idle { format!("{} idle of {}", hours(j.gpu_hours_idle), hours(j.gpu_hours_allocated)) } else { hours(j.gpu_hours_allocated) }}</span>
                        </li>
                    }).collect_view()}
                </ol>
            }.into_any()
        }}
    }
}
