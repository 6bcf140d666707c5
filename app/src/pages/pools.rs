//! Pools: every node of every pool as a row of its 8 GPUs, coloured by allocation and
//! utilization, with the job each belongs to (names for the viewer's own team only). It
//! refetches on every cluster-clock tick of the live stream.

use leptos::prelude::*;

use crate::app::Authed;
use crate::components::{loaded, PageError};
use crate::live::use_live;
use crate::model::{GridCell, PoolGrid};

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
    let grids = Resource::new(
        move || (changed.get(), ticks.get()),
        |_| crate::functions::get_pool_grids(),
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
                        view! {
                            {note.map(|n| view! { <p class="notice" data-testid="metrics-note">{n}</p> })}
                            {list.into_iter().map(|g| view! { <Grid g/> }).collect_view()}
                        }
                        .into_any()
                    }
                    Err(e) => view! { <PageError err=e/> }.into_any(),
                })
            })}
        </Transition>
    }
}

fn cell_style(c: &GridCell) -> String {
    // Your team's jobs in blue, other teams' in grey-violet; darker when busier.
    let hue = if c.job_id.is_some() {
        "220, 70%"
    } else {
        "265, 22%"
    };
    match (&c.job, c.util_pct) {
        (None, _) => "background: var(--line)".into(),
        (Some(_), None) => format!("background: hsl({hue}, 70%)"),
        (Some(_), Some(u)) if u < 5.0 => "background: #f6c8c2".into(),
        (Some(_), Some(u)) => {
            let text = if u > 60.0 { "#ffffff" } else { "#0b1020" };
            format!(
                "background: hsl({hue}, {:.0}%); color: {text}",
                88.0 - u * 0.5
            )
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
            <div class="pool-grid">
                {g.nodes.into_iter().map(|n| view! {
                    <div class="heat-row">
                        <span class="heat-node">{n.name.clone()}</span>
                        {n.cells.into_iter().enumerate().map(|(i, c)| {
                            let title = match (&c.job, c.util_pct) {
                                (None, _) => format!("{} GPU {i}: free", n.name),
                                (Some(j), Some(u)) => format!("{} GPU {i}: {j} · {u:.0} %", n.name),
                                (Some(j), None) => format!("{} GPU {i}: {j}", n.name),
                            };
                            let style = cell_style(&c);
                            let label = c.util_pct.map(|u| format!("{u:.0}")).unwrap_or_default();
                            match c.job_id.clone() {
                                Some(id) => view! {
                                    <a class="heat-cell grid-cell" style=style title=title.clone() aria-label=title href=format!("/jobs/{id}") data-job=c.job.clone().unwrap_or_default()>{label}</a>
                                }.into_any(),
                                None => view! {
                                    <span class="heat-cell grid-cell" style=style title=title.clone() aria-label=title data-job=c.job.clone().unwrap_or_default()>{label}</span>
                                }.into_any(),
                            }
                        }).collect_view()}
                    </div>
                }).collect_view()}
            </div>
        </section>
    }
}
