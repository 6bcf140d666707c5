//! The job page's GPU panel: a node × GPU heatmap of the latest utilization and small charts
//! of the run's mean utilization, memory and power, refetched as the cluster clock moves.

use leptos::prelude::*;

use crate::components::{loaded, ErrorBox};
use crate::format;
use crate::live::use_live;
use crate::sync_html::sync_html;
use crate::wire::SwappedJson;

/// The job's GPUs: a node × GPU heatmap of the latest utilization and the last two hours of
/// mean utilization, memory and power. It refetches on every cluster-clock tick of the live
/// stream, so it moves without a reload. The idle warning is for those who can act on it
/// (the owner, the team's lead, admins).
#[component]
pub(crate) fn GpuPanel(job_id: String, gpus: u32, show_idle: bool) -> impl IntoView {
    let live = use_live();
    // The fetcher owns its id: a plain value cannot be read after the panel is gone.
    // Again when the job changes, and when the cluster clock enters a new minute (new
    // readings; at most every 10 s of real time however fast the sim clock runs).
    let own = {
        let job_id = job_id.clone();
        live.throttled(std::time::Duration::from_millis(500), move |c| {
            c.job_id == job_id
        })
    };
    let ticks = live.clock(std::time::Duration::from_secs(10));
    // In the page as `SwappedJson`: far fewer escapes there.
    let util = Resource::<_, SwappedJson>::new_with_options(
        move || (own.get(), ticks.get()),
        move |_| crate::functions::get_job_utilization(job_id.clone()),
        false,
    );
    view! {
        <section class="panel" data-testid="gpu-panel">
            <h2>{format!("GPU utilization · {}", format::gpus_nodes(gpus))}</h2>
            <Transition fallback=|| view! { <p class="muted">"Loading GPU metrics…"</p> }>
                {move || Suspend::new(async move {
                    loaded(util).await.map(|r| match r {
                        // Waits on nothing: written in one pass (`sync_html`).
                        Ok(u) if u.available => sync_html(view! { <GpuView u show_idle/> }).into_any(),
                        Ok(u) => view! {
                            <p class="muted" data-testid="gpu-unavailable">
                                {unavailable_line(u.message.as_deref())}
                            </p>
                        }.into_any(),
                        Err(e) => view! { <ErrorBox err=e/> }.into_any(),
                    })
                })}
            </Transition>
        </section>
    }
}

/// Why a job shows no GPU figures, as one sentence: "Metrics unavailable: Prometheus could
/// not be reached (12:04 UTC)." or "No GPU metrics: the job has not run yet."
fn unavailable_line(message: Option<&str>) -> String {
    match message {
        Some(m) if m.starts_with("metrics unavailable") => format!("M{}.", &m[1..]),
        Some(m) => format!("No GPU metrics: {m}."),
        None => "No GPU metrics yet.".into(),
    }
}

/// A cell's colour: pale to deep blue with utilization; red under 5 %.
fn heat(u: f64) -> String {
    if u < 5.0 {
        "background: #f6c8c2".into()
    } else {
        let text = if u > 55.0 { "#ffffff" } else { "#0b1020" };
        format!(
            "background: hsl(220, 70%, {}%); color: {text}",
            format::whole(92.0 - u * 0.55)
        )
    }
}

#[component]
fn GpuView(u: crate::model::GpuPanelData, show_idle: bool) -> impl IntoView {
    let mut nodes: Vec<(String, Vec<(u32, f64)>)> = Vec::new();
    for (node, gpu, last) in u.cells {
        match nodes.iter_mut().find(|(n, _)| *n == node) {
            Some((_, cells)) => cells.push((gpu, last)),
            None => nodes.push((node, vec![(gpu, last)])),
        }
    }
    let columns = nodes.iter().map(|(_, c)| c.len()).max().unwrap_or(0);
    let at =
        u.to.map(|t| t.format("%H:%M UTC").to_string())
            .unwrap_or_default();
    let span = match (u.from, u.to) {
        (Some(a), Some(b)) if (b - a).num_hours() >= 20 => {
            format!(
                "{} – {}",
                a.format("%b %-d %H:%M"),
                b.format("%b %-d %H:%M UTC")
            )
        }
        (Some(a), Some(b)) => format!("{} – {}", a.format("%H:%M"), b.format("%H:%M UTC")),
        _ => String::new(),
    };
    let sampled = if u.step_s > 60 {
        format!(" Whole run, one sample per {}.", format::duration(u.step_s))
    } else {
        String::new()
    };
    view! {
        {(u.idle && show_idle).then(|| view! {
            <p class="notice idle" data-testid="gpu-idle">
                <strong>"Idle: "</strong>
                "every GPU of this job has been under 5 % for 30 minutes. It holds its GPUs doing nothing: check it, or cancel it so others can use them."
            </p>
        })}
        <div class="heatmap" data-testid="gpu-heatmap" data-at=at.clone()>
            <div class="heat-row heat-labels" aria-hidden="true">
                <span class="heat-node">"Node"</span>
                {(0..columns).map(|g| view! { <span class="heat-col">{format!("GPU {g}")}</span> }).collect_view()}
            </div>
            {nodes.into_iter().map(|(node, cells)| view! {
                <div class="heat-row">
                    <span class="heat-node">{node.clone()}</span>
                    {cells.into_iter().map(|(gpu, v)| {
                        let whole = format::whole(v);
                        view! {
                            <span class="heat-cell" style=heat(v) title=format!("{node} GPU {gpu}: {whole} %") data-util=format::Tenths::of(v).to_string()>{whole.to_string()}</span>
                        }
                    }).collect_view()}
                </div>
            }).collect_view()}
            <p class="muted small">{format!("Utilization (%) per GPU at {at}; red: under 5 %.{sampled}")}</p>
        </div>
        <div class="sparks">
            <Spark title="Mean utilization" unit="%" values=u.util_pct max=100.0 span=span.clone()/>
            <Spark title="Memory in use (mean per GPU)" unit="GiB" values=u.fb_used_gib max=80.0 span=span.clone()/>
            <Spark title="Power (mean per GPU)" unit="W" values=u.power_w max=700.0 span=span/>
        </div>
    }
}

/// A small line chart with its axes labelled: 0 and `max` on the left, the time span below.
#[component]
fn Spark(
    title: &'static str,
    unit: &'static str,
    values: Vec<f64>,
    max: f64,
    span: String,
) -> impl IntoView {
    let (w, h) = (300.0, 90.0);
    let n = values.len().max(2) as f64 - 1.0;
    // Written as whole tenths: float formatting for two coordinates of up to 240 samples on
    // each of three charts was a tenth of what a job page cost the server (callgrind).
    let mut points = String::with_capacity(values.len() * 12);
    for (i, v) in values.iter().enumerate() {
        use std::fmt::Write;
        let x = format::Tenths::of(34.0 + i as f64 / n * (w - 40.0));
        let y = format::Tenths::of(8.0 + (1.0 - (v / max).clamp(0.0, 1.0)) * (h - 24.0));
        let sep = if i == 0 { "" } else { " " };
        let _ = write!(points, "{sep}{x},{y}");
    }
    let last = values.last().copied().unwrap_or(0.0);
    let label = format!("{title}, {span}, in {unit}");
    view! {
        <figure class="spark">
            <figcaption>{title} ": " <strong>{format!("{} {unit}", format::whole(last))}</strong></figcaption>
            <svg viewBox=format!("0 0 {w} {h}") role="img" aria-label=label>
                <line x1="34" y1="8" x2="34" y2=format!("{}", h - 16.0) class="axis"/>
                <line x1="34" y1=format!("{}", h - 16.0) x2=format!("{}", w - 6.0) y2=format!("{}", h - 16.0) class="axis"/>
                <text x="30" y="14" text-anchor="end">{format!("{} {unit}", format::whole(max))}</text>
                <text x="30" y=format!("{}", h - 16.0) text-anchor="end">{format!("0 {unit}")}</text>
                <text x=format!("{}", w - 6.0) y=format!("{}", h - 3.0) text-anchor="end">{span}</text>
                <polyline points=points class="line"/>
            </svg>
        </figure>
    }
}
