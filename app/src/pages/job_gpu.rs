//! The job page's GPU panel: a node × GPU heatmap of the latest utilization and small charts
//! of the run's mean utilization, memory and power, refetched as the cluster clock moves.

use leptos::prelude::*;

use crate::components::ErrorBox;
use crate::error::ApiError;
use crate::format;
use crate::format::escape_html_into as esc;
#[cfg(feature = "hydrate")]
use crate::live::use_live;
use crate::model::GpuPanelData;
use crate::sync_html::sync_html;

/// The job's GPUs: a node × GPU heatmap of the latest utilization and the last two hours of
/// mean utilization, memory and power. Its first figures come with the job's page (`first`,
/// read with the job: no loading boundary of its own, each of which was a few per cent of
/// what a job page cost the server). In the browser it reads them again on every cluster-clock
/// tick of the live stream, so it moves without a reload; a change to the job itself reads
/// the whole page again, this panel's figures with it. The idle warning is for those who can
/// act on it (the owner, the team's lead, admins).
#[component]
pub(crate) fn GpuPanel(
    job_id: String,
    gpus: u32,
    show_idle: bool,
    first: Result<GpuPanelData, ApiError>,
) -> impl IntoView {
    let heading = view! { <h2>{format!("GPU utilization · {}", format::gpus_nodes(gpus))}</h2> };
    // On the server the figures never change during a render: written once, not as a
    // closure (which the server runs twice a render). The browser's closure writes the same
    // HTML (a closure adds no markers) and hydrates over it.
    #[cfg(not(feature = "hydrate"))]
    {
        let _ = job_id;
        view! {
            <section class="panel" data-testid="gpu-panel">
                {heading}
                {figures(&first, show_idle)}
            </section>
        }
    }
    #[cfg(feature = "hydrate")]
    {
        let util = RwSignal::new(first);
        refetch_on_ticks(job_id, util);
        view! {
            <section class="panel" data-testid="gpu-panel">
                {heading}
                {move || util.with(|u| figures(u, show_idle))}
            </section>
        }
    }
}

/// Reads job `id`'s figures into `util` again each time the cluster clock enters a new minute
/// (new readings; at most every 10 s of real time however fast the sim clock runs). The
/// newest read wins; an answer landing after the panel is gone is dropped.
#[cfg(feature = "hydrate")]
fn refetch_on_ticks(id: String, util: RwSignal<Result<GpuPanelData, ApiError>>) {
    let ticks = use_live().clock(std::time::Duration::from_secs(10));
    let asked = StoredValue::new(0u64);
    Effect::new(move |seen: Option<u64>| {
        let tick = ticks.get();
        // Not on the effect's first run: the page brought the figures.
        if seen.is_some_and(|s| s != tick) {
            let Some(n) = asked.try_update_value(|n| {
                *n += 1;
                *n
            }) else {
                return tick;
            };
            let id = id.clone();
            leptos::task::spawn_local(async move {
                let res = crate::functions::get_job_utilization(id).await;
                if asked.try_get_value() == Some(n) {
                    util.try_set(res);
                }
            });
        }
        tick
    });
}

/// What the panel shows under its heading: the figures, why there are none, or the error.
fn figures(u: &Result<GpuPanelData, ApiError>, show_idle: bool) -> AnyView {
    match u {
        // Waits on nothing: written in one pass (`sync_html`).
        Ok(u) if u.available => {
            let html = gpu_view_html(u, show_idle);
            sync_html(view! { <div class="gpu-view" inner_html=html></div> }).into_any()
        }
        Ok(u) => view! {
            <p class="muted" data-testid="gpu-unavailable">
                {unavailable_line(u.message.as_deref())}
            </p>
        }
        .into_any(),
        Err(e) => view! { <ErrorBox err=e.clone()/> }.into_any(),
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

/// A cell's colour, written into `h`: pale to deep blue with utilization; red under 5 %.
fn heat_into(h: &mut String, u: f64) {
    use std::fmt::Write;
    if u < 5.0 {
        h.push_str("background: #f6c8c2;");
    } else {
        let text = if u > 55.0 { "#ffffff" } else { "#0b1020" };
        let _ = write!(
            h,
            "background: hsl(220, 70%, {}%); color: {text};",
            format::whole(92.0 - u * 0.55)
        );
    }
}

/// The panel's contents as HTML: the idle warning (for those who may act on it), the node ×
/// GPU heatmap with each GPU's latest utilization, and the three charts.
fn gpu_view_html(u: &crate::model::GpuPanelData, show_idle: bool) -> String {
    use std::fmt::Write;
    // Grouped by node, in the order the back end sends them.
    let mut nodes: Vec<(&str, Vec<(u32, f64)>)> = Vec::new();
    for (node, gpu, last) in &u.cells {
        match nodes.iter_mut().find(|(n, _)| n == node) {
            Some((_, cells)) => cells.push((*gpu, *last)),
            None => nodes.push((node, vec![(*gpu, *last)])),
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
    let mut h =
        String::with_capacity(2_000 + u.cells.len() * 200 + 3 * (800 + u.util_pct.len() * 12));
    if u.idle && show_idle {
        h.push_str(r#"<p class="notice idle" data-testid="gpu-idle"><strong>Idle: </strong>every GPU of this job has been under 5 % for 30 minutes. It holds its GPUs doing nothing: check it, or cancel it so others can use them.</p>"#);
    }
    h.push_str(r#"<div class="heatmap" data-testid="gpu-heatmap" data-at=""#);
    esc(&mut h, &at);
    h.push_str(r#""><div class="heat-row heat-labels" aria-hidden="true"><span class="heat-node">Node</span>"#);
    for g in 0..columns {
        let _ = write!(h, r#"<span class="heat-col">GPU {g}</span>"#);
    }
    h.push_str("</div>");
    for (node, cells) in &nodes {
        h.push_str(r#"<div class="heat-row"><span class="heat-node">"#);
        esc(&mut h, node);
        h.push_str("</span>");
        for (gpu, v) in cells {
            let whole = format::whole(*v);
            h.push_str(r#"<span class="heat-cell" style=""#);
            heat_into(&mut h, *v);
            h.push_str(r#"" title=""#);
            esc(&mut h, node);
            let _ = write!(h, r#" GPU {gpu}: {whole} %" data-util=""#);
            format::Tenths::of(*v).write_into(&mut h);
            let _ = write!(h, r#"">{whole}</span>"#);
        }
        h.push_str("</div>");
    }
    h.push_str(r#"<p class="muted small">Utilization (%) per GPU at "#);
    esc(&mut h, &at);
    h.push_str("; red: under 5 %.");
    if u.step_s > 60 {
        h.push_str(" Whole run, one sample per ");
        esc(&mut h, &format::duration(u.step_s));
        h.push('.');
    }
    h.push_str(r#"</p></div><div class="sparks">"#);
    spark_into(&mut h, "Mean utilization", "%", &u.util_pct, 100.0, &span);
    spark_into(
        &mut h,
        "Memory in use (mean per GPU)",
        "GiB",
        &u.fb_used_gib,
        80.0,
        &span,
    );
    spark_into(
        &mut h,
        "Power (mean per GPU)",
        "W",
        &u.power_w,
        700.0,
        &span,
    );
    h.push_str("</div>");
    h
}

/// A small line chart with its axes labelled, written into `h`: 0 and `max` on the left, the
/// time span below. `title` and `unit` are ours (no escaping); `span` is escaped.
fn spark_into(h: &mut String, title: &str, unit: &str, values: &[f64], max: f64, span: &str) {
    use std::fmt::Write;
    // The chart's box: 300 × 90, the axes at x 34 and y 74 (h − 16), the span's baseline at
    // y 87 (h − 3), its right edge at x 294 (w − 6).
    let (w, ht) = (300.0, 90.0);
    let n = values.len().max(2) as f64 - 1.0;
    let last = values.last().copied().unwrap_or(0.0);
    let _ = write!(
        h,
        r#"<figure class="spark"><figcaption>{title}: <strong>{} {unit}</strong></figcaption><svg viewBox="0 0 300 90" role="img" aria-label="{title}, "#,
        format::whole(last)
    );
    esc(h, span);
    let _ = write!(
        h,
        r#", in {unit}"><line x1="34" y1="8" x2="34" y2="74" class="axis"></line><line x1="34" y1="74" x2="294" y2="74" class="axis"></line><text x="30" y="14" text-anchor="end">{} {unit}</text><text x="30" y="74" text-anchor="end">0 {unit}</text><text x="294" y="87" text-anchor="end">"#,
        format::whole(max)
    );
    esc(h, span);
    h.push_str(r#"</text><polyline points=""#);
    // Whole tenths, digit by digit: float formatting for two coordinates of up to 240
    // samples on each of three charts was a tenth of what a job page cost the server.
    for (i, v) in values.iter().enumerate() {
        if i > 0 {
            h.push(' ');
        }
        format::Tenths::of(34.0 + i as f64 / n * (w - 40.0)).write_into(h);
        h.push(',');
        format::Tenths::of(8.0 + (1.0 - (v / max).clamp(0.0, 1.0)) * (ht - 24.0)).write_into(h);
    }
    h.push_str(r#"" class="line"></polyline></svg></figure>"#);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::GpuPanelData;

    fn panel(idle: bool) -> GpuPanelData {
        let at = |m: i64| chrono::DateTime::from_timestamp(1_790_000_000 + m * 60, 0);
        GpuPanelData {
            available: true,
            message: None,
            from: at(0),
            to: at(3),
            step_s: 60,
            cells: vec![
                ("node-<0>".into(), 0, 35.84),
                ("node-<0>".into(), 1, 2.0),
                ("node-1".into(), 0, 71.25),
            ],
            util_pct: vec![10.0, 55.55, 120.0],
            fb_used_gib: vec![40.0],
            power_w: vec![],
            idle,
        }
    }

    /// What the view wrote before it was one string: a cell a GPU, grouped by node in the
    /// back end's order, with its colour, title and reading; names escaped; the charts'
    /// points in whole tenths, clamped to the chart; the idle warning only for who may act.
    #[test]
    fn the_panel_has_a_cell_a_gpu_and_three_labelled_charts() {
        let h = gpu_view_html(&panel(true), true);
        assert_eq!(h.matches(r#"class="heat-cell""#).count(), 3, "{h}");
        assert_eq!(h.matches(r#"<div class="heat-row">"#).count(), 2, "{h}");
        assert_eq!(h.matches(r#"<span class="heat-col">"#).count(), 2, "{h}");
        assert!(h.contains(r#"<span class="heat-node">node-&lt;0&gt;</span><span class="heat-cell" style="background: hsl(220, 70%, 72%); color: #0b1020;" title="node-&lt;0&gt; GPU 0: 36 %" data-util="35.8">36</span><span class="heat-cell" style="background: #f6c8c2;" title="node-&lt;0&gt; GPU 1: 2 %" data-util="2.0">2</span></div>"#), "{h}");
        assert!(h.contains(r#"style="background: hsl(220, 70%, 53%); color: #ffffff;" title="node-1 GPU 0: 71 %" data-util="71.3">71</span>"#), "{h}");
        assert!(!h.contains("<0>"), "{h}");
        assert_eq!(h.matches(r#"<figure class="spark">"#).count(), 3, "{h}");
        assert!(
            h.contains(r#"aria-label="Mean utilization, 14:13 – 14:16 UTC, in %""#),
            "{h}"
        );
        // x from 34 to 294 over the samples; y from 74 (0) up to 8 (the max), clamped.
        assert!(
            h.contains(r#"points="34.0,67.4 164.0,37.3 294.0,8.0""#),
            "{h}"
        );
        assert!(h.contains(r#"points="34.0,41.0""#), "{h}");
        assert!(h.contains(r#"points="""#), "{h}");
        assert!(h.contains("<strong>120 %</strong>"), "{h}");
        assert!(h.contains(r#"data-testid="gpu-idle""#), "{h}");
        assert!(!gpu_view_html(&panel(true), false).contains("gpu-idle"));
        assert!(!gpu_view_html(&panel(false), true).contains("gpu-idle"));
    }

    /// The whole panel for a long run (sampled every 5 min), its idle notice on, against the
    /// markup the view wrote before it was one string (its `<!>` hydration markers taken out,
    /// attributes in the new order).
    #[test]
    fn a_long_runs_panel_reads_as_the_view_wrote_it() {
        let mut u = panel(true);
        u.step_s = 300;
        u.cells.truncate(1);
        u.util_pct = vec![50.0, 25.0];
        u.fb_used_gib.clear();
        let h = gpu_view_html(&u, true);
        let chart = |title: &str, unit: &str, last: &str, max: &str, points: &str| {
            format!(
                r#"<figure class="spark"><figcaption>{title}: <strong>{last} {unit}</strong></figcaption><svg viewBox="0 0 300 90" role="img" aria-label="{title}, 14:13 – 14:16 UTC, in {unit}"><line x1="34" y1="8" x2="34" y2="74" class="axis"></line><line x1="34" y1="74" x2="294" y2="74" class="axis"></line><text x="30" y="14" text-anchor="end">{max} {unit}</text><text x="30" y="74" text-anchor="end">0 {unit}</text><text x="294" y="87" text-anchor="end">14:13 – 14:16 UTC</text><polyline points="{points}" class="line"></polyline></svg></figure>"#
            )
        };
        let want = [
            r#"<p class="notice idle" data-testid="gpu-idle"><strong>Idle: </strong>every GPU of this job has been under 5 % for 30 minutes. It holds its GPUs doing nothing: check it, or cancel it so others can use them.</p>"#.to_string(),
            r#"<div class="heatmap" data-testid="gpu-heatmap" data-at="14:16 UTC"><div class="heat-row heat-labels" aria-hidden="true"><span class="heat-node">Node</span><span class="heat-col">GPU 0</span></div>"#.to_string(),
            r#"<div class="heat-row"><span class="heat-node">node-&lt;0&gt;</span><span class="heat-cell" style="background: hsl(220, 70%, 72%); color: #0b1020;" title="node-&lt;0&gt; GPU 0: 36 %" data-util="35.8">36</span></div>"#.to_string(),
            r#"<p class="muted small">Utilization (%) per GPU at 14:16 UTC; red: under 5 %. Whole run, one sample per 5 min.</p></div>"#.to_string(),
            r#"<div class="sparks">"#.to_string(),
            chart("Mean utilization", "%", "25", "100", "34.0,41.0 294.0,57.5"),
            chart("Memory in use (mean per GPU)", "GiB", "0", "80", ""),
            chart("Power (mean per GPU)", "W", "0", "700", ""),
            "</div>".to_string(),
        ]
        .concat();
        assert_eq!(h, want);
    }
}
