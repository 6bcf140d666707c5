//! Pools: every node of every pool as a row of its 8 GPUs, coloured by allocation and
//! utilization, with the job each belongs to (names for the viewer's own team only). It
//! refetches on every cluster-clock tick of the live stream.

use leptos::prelude::*;

use crate::app::Authed;
use crate::components::{loaded, PageError};
use crate::format::escape_html_into as esc;
use crate::live::use_live;
use crate::model::{GridCell, GridNode, PoolGrid};
use crate::pages::pools_wire::PoolGridsCodec;
use crate::sync_html::sync_html;

#[component]
pub fn PoolsPage() -> impl IntoView {
    view! {
        <Authed>
            <Pools/>
        </Authed>
    }
}

#[component]
fn Pools() -> impl IntoView {
    let live = use_live();
    // Placements change with jobs (at most every 2 s); readings with the cluster clock's
    // minutes (at most every 10 s of real time however fast the sim clock runs).
    let changed = live.throttled(std::time::Duration::from_secs(2), |_| true);
    let ticks = live.clock(std::time::Duration::from_secs(10));
    // In the page with each pool's jobs named once (`pools_wire`).
    let grids = Resource::<_, PoolGridsCodec>::new_with_options(
        move || (changed.get(), ticks.get()),
        |_| crate::functions::get_pool_grids(),
        false,
    );
    view! {
        <section class="page-head">
            <h1>"Pools"</h1>
            <p class="muted">"Every node and its 8 GPUs, with utilization (%) now. Light grey: free. Blue: your team's jobs (click to open); grey-violet: another team's. Darker when busier; red: held but under 5 % busy."</p>
        </section>
        <Transition fallback=|| view! { <p class="muted">"Loading pools…"</p> }>
            {move || Suspend::new(async move {
                loaded(grids).await.map(|r| match r {
                    Ok(list) => {
                        let note = list.iter().find_map(|g| g.metrics_note.clone());
                        // Waits on nothing: written in one pass (`sync_html`).
                        sync_html(view! {
                            {note.map(|n| view! { <p class="notice" data-testid="metrics-note">{n}</p> })}
                            {list.into_iter().map(|g| view! { <Grid g/> }).collect_view()}
                        })
                        .into_any()
                    }
                    Err(e) => view! { <PageError err=e/> }.into_any(),
                })
            })}
        </Transition>
    }
}

/// A cell's colour, written into `h`: your team's jobs in blue, other teams' in grey-violet;
/// darker when busier. Our own text and numbers only: nothing in it needs escaping.
fn cell_style_into(h: &mut String, c: &GridCell) {
    use std::fmt::Write;
    let hue = if c.job_id.is_some() {
        "220, 70%"
    } else {
        "265, 22%"
    };
    match (&c.job, c.util_pct) {
        (None, _) => h.push_str("background: var(--line)"),
        (Some(_), None) => {
            h.push_str("background: hsl(");
            h.push_str(hue);
            h.push_str(", 70%)");
        }
        (Some(_), Some(u)) if u < 5.0 => h.push_str("background: #f6c8c2"),
        (Some(_), Some(u)) => {
            let text = if u > 60.0 { "#ffffff" } else { "#0b1020" };
            h.push_str("background: hsl(");
            h.push_str(hue);
            let _ = write!(
                h,
                ", {}%); color: {text}",
                crate::format::whole(88.0 - u * 0.5)
            );
        }
    }
}

#[component]
fn Grid(g: PoolGrid) -> impl IntoView {
    let total: usize = g.nodes.iter().map(|n| n.cells.len()).sum();
    let held = g
        .nodes
        .iter()
        .flat_map(|n| &n.cells)
        .filter(|c| c.job.is_some())
        .count();
    view! {
        <section class="panel" data-testid=format!("grid-{}", g.pool)>
            <h2>{format!("{} · {} · {} nodes · {held} of {total} GPUs held", g.pool, g.gpu_model, g.nodes.len())}</h2>
            // Written as one string: 8 cells a node, none of them reactive, are a page's worth of
            // elements that cost more as views than as text (page bench). Hydration keeps what
            // the server sent; a refetch builds the grid anew.
            <div class="pool-grid" inner_html=grid_html(&g.nodes)></div>
        </section>
    }
}

/// The rows of a pool's grid as HTML: per node its name and its GPUs, each a link to the job
/// that holds it when the viewer may open it, with its utilization as text and in its title.
pub fn grid_html(nodes: &[GridNode]) -> String {
    use std::fmt::Write;
    let mut h = String::with_capacity(64 + nodes.len() * 8 * 220);
    let (mut title, mut escaped) = (String::with_capacity(96), String::with_capacity(96));
    for n in nodes {
        h.push_str(r#"<div class="heat-row"><span class="heat-node">"#);
        esc(&mut h, &n.name);
        h.push_str("</span>");
        for (i, c) in n.cells.iter().enumerate() {
            // Pushed, not `format!`: a pool page writes this for every GPU of every node.
            title.clear();
            title.push_str(&n.name);
            let _ = write!(title, " GPU {i}: ");
            match (&c.job, c.util_pct) {
                (None, _) => title.push_str("free"),
                (Some(j), Some(u)) => {
                    title.push_str(j);
                    let _ = write!(title, " · {} %", crate::format::whole(u));
                }
                (Some(j), None) => title.push_str(j),
            }
            let tag = if c.job_id.is_some() { "a" } else { "span" };
            h.push('<');
            h.push_str(tag);
            h.push_str(r#" class="heat-cell grid-cell" style=""#);
            cell_style_into(&mut h, c);
            escaped.clear();
            esc(&mut escaped, &title);
            h.push_str(r#"" title=""#);
            h.push_str(&escaped);
            h.push_str(r#"" aria-label=""#);
            h.push_str(&escaped);
            if let Some(id) = &c.job_id {
                h.push_str(r#"" href="/jobs/"#);
                esc(&mut h, id);
            }
            h.push_str(r#"" data-job=""#);
            esc(&mut h, c.job.as_deref().unwrap_or_default());
            h.push_str(r#"">"#);
            if let Some(u) = c.util_pct {
                let _ = write!(h, "{}", crate::format::whole(u));
            }
            h.push_str("</");
            h.push_str(tag);
            h.push('>');
        }
        h.push_str("</div>");
    }
    h
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A GPU of a grid, for tests.
    pub(crate) fn cell(job: Option<&str>, job_id: Option<&str>, util_pct: Option<f64>) -> GridCell {
        GridCell {
            job: job.map(str::to_string),
            job_id: job_id.map(str::to_string),
            util_pct,
        }
    }

    /// Each GPU is one element with what the view had: a link to a job the viewer may open,
    /// a span otherwise, the title, the label and `data-job`; names are escaped.
    #[test]
    fn the_grid_is_one_element_per_gpu_with_names_escaped() {
        let nodes = vec![GridNode {
            name: "node-0".into(),
            cells: vec![
                cell(Some("<b>x</b> & \"y\""), Some("id-1"), Some(42.4)),
                cell(Some("another team"), None, None),
                cell(None, None, None),
            ],
        }];
        let h = grid_html(&nodes);
        assert_eq!(h.matches("grid-cell").count(), 3, "{h}");
        assert!(h.starts_with(r#"<div class="heat-row"><span class="heat-node">node-0</span><a class="heat-cell grid-cell" style="background: hsl(220, 70%, 67%); color: #0b1020""#), "{h}");
        assert!(
            h.contains(r#"title="node-0 GPU 0: &lt;b&gt;x&lt;/b&gt; &amp; &quot;y&quot; · 42 %""#),
            "{h}"
        );
        assert!(
            h.contains(
                r#"href="/jobs/id-1" data-job="&lt;b&gt;x&lt;/b&gt; &amp; &quot;y&quot;">42</a>"#
            ),
            "{h}"
        );
        assert!(h.contains(r#"<span class="heat-cell grid-cell" style="background: hsl(265, 22%, 70%)" title="node-0 GPU 1: another team" aria-label="node-0 GPU 1: another team" data-job="another team"></span>"#), "{h}");
        assert!(h.contains(r#"title="node-0 GPU 2: free" aria-label="node-0 GPU 2: free" data-job=""></span></div>"#), "{h}");
        assert!(!h.contains("<b>"), "{h}");
    }
}
