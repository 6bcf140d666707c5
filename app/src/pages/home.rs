//! Home: my running and queued jobs, my team's quota use, the pools' free whole nodes.

use leptos::prelude::*;

use crate::app::Authed;
use crate::components::{loaded, progress_text, PageError, StateBadge};
use crate::format;
use crate::functions::get_home;
use crate::live::use_live;
use crate::model::{HomeView, Pool, QuotaUse};
use crate::sync_html::sync_html;
use crate::wire::SwappedJson;

#[component]
pub fn HomePage() -> impl IntoView {
    view! {
        <Authed>
            <Home/>
        </Authed>
    }
}

#[component]
fn Home() -> impl IntoView {
    let live = use_live();
    // Any change may move the home page's figures: refetched at most every 3 s.
    let changed = live.throttled(std::time::Duration::from_secs(3), |_| true);
    // In the page as `SwappedJson`: far fewer escapes there.
    let home =
        Resource::<_, SwappedJson>::new_with_options(move || changed.get(), |_| get_home(), false);
    view! {
        <Transition fallback=|| view! { <p class="muted">"Loading…"</p> }>
            {move || Suspend::new(async move {
                loaded(home).await.map(|r| match r {
                    // Waits on nothing: written in one pass (`sync_html`).
                    Ok(h) => sync_html(view! { <HomeBody home=h/> }).into_any(),
                    Err(e) => view! { <PageError err=e/> }.into_any(),
                })
            })}
        </Transition>
    }
}

#[component]
fn HomeBody(home: HomeView) -> impl IntoView {
    let live = use_live();
    let page_now = home.now;
    let first_name = home.viewer.display_name.clone();
    let jobs = home.active_jobs.clone();
    let has_jobs = !jobs.is_empty();
    // The home page lists the newest few; it says so when there are more.
    let more = (home.active_total > jobs.len() as u64).then_some((jobs.len(), home.active_total));
    // An admin in no team cannot launch: no button that would be refused.
    let can_launch = home.viewer.can_launch();
    view! {
        <div class="page-head">
            <h1>"Hello, " {first_name}</h1>
            {can_launch.then(|| view! {
                <a class="button primary big" href="/launch" data-testid="home-launch">
                    "Launch a job"
                </a>
            })}
        </div>
        <section class="panel">
            <h2>"Your active jobs"</h2>
            <Show
                when=move || has_jobs
                fallback=move || {
                    view! {
                        <div class="empty">
                            <p>"No jobs running or queued."</p>
                            {can_launch.then(|| view! { <a class="button" href="/launch">"Launch your first"</a> })}
                        </div>
                    }
                }
            >
                <table class="table">
                    <thead>
                        <tr>
                            <th>"State"</th>
                            <th>"Job"</th>
                            <th class="num">"GPUs"</th>
                            <th>"Pool"</th>
                            <th>"Where it stands"</th>
                        </tr>
                    </thead>
                    <tbody>
                        {jobs
                            .clone()
                            .into_iter()
                            .map(|j| {
                                let j2 = j.clone();
                                let text = move || progress_text(&j, live.now_or(page_now));
                                view! {
                                    <tr>
                                        <td><StateBadge state=j2.state/></td>
                                        <td><a href=format!("/jobs/{}", j2.id)>{j2.name.clone()}</a></td>
                                        <td class="num">{format::gpus_nodes(j2.gpus)}</td>
                                        <td>{j2.pool.clone()}</td>
                                        <td>{text}</td>
                                    </tr>
                                }
                            })
                            .collect_view()}
                    </tbody>
                </table>
                {more.map(|(shown, total)| view! {
                    <p class="muted small" data-testid="home-more">
                        {format!("The newest {shown} of your {} active jobs. ", format::thousands(total))}
                        <a href="/jobs?scope=mine">"All of them on Jobs →"</a>
                    </p>
                })}
            </Show>
        </section>
        <div class="two-col">
            <section class="panel">
                <h2>"Team quota"</h2>
                <QuotaBars quotas=home.quotas.clone()/>
            </section>
            <section class="panel">
                <h2>"Pools"</h2>
                <PoolTable pools=home.pools.clone()/>
            </section>
        </div>
    }
}

#[component]
pub fn QuotaBars(quotas: Vec<QuotaUse>) -> impl IntoView {
    if quotas.is_empty() {
        return view! { <p class="muted">"No quota: your team has no share of any pool yet."</p> }
            .into_any();
    }
    view! {
        <ul class="bars">
            {quotas
                .into_iter()
                .map(|q| {
                    let pct = if q.nominal_gpus == 0 {
                        0.0
                    } else {
                        (q.used_gpus as f64 / q.nominal_gpus as f64 * 100.0).min(100.0)
                    };
                    view! {
                        <li>
                            <div class="bar-label">
                                <span>{format!("{} in {}", q.team, q.pool)}</span>
                                <span class="num">
                                    {format!("{} / {} GPUs of quota", q.used_gpus, q.nominal_gpus)}
                                    {match (q.borrowed_gpus, q.borrowing_limit_gpus) {
                                        (b, _) if b > 0 => format!(" · {b} borrowed"),
                                        (_, Some(0)) => String::new(),
                                        (_, Some(l)) => format!(" · may borrow {l} more"),
                                        (_, None) => " · may borrow unused quota".to_string(),
                                    }}
                                </span>
                            </div>
                            <div
                                class="bar"
                                role="meter"
                                aria-valuemin="0"
                                aria-valuemax=q.nominal_gpus
                                aria-valuenow=q.used_gpus
                                aria-label=format!("{} quota use in {}", q.team, q.pool)
                            >
                                <div class="bar-fill" style=format!("width: {pct:.1}%")></div>
                            </div>
                        </li>
                    }
                })
                .collect_view()}
        </ul>
    }
    .into_any()
}

#[component]
pub fn PoolTable(pools: Vec<Pool>) -> impl IntoView {
    view! {
        <table class="table">
            <thead>
                <tr>
                    <th>"Pool"</th>
                    <th class="num">"Free whole nodes"</th>
                    <th class="num">"Free GPUs"</th>
                    <th class="num">"Queued jobs"</th>
                </tr>
            </thead>
            <tbody>
                {pools
                    .into_iter()
                    .map(|p| {
                        view! {
                            <tr>
                                <td>
                                    <strong>{p.name.clone()}</strong>
                                    <span class="muted">{format!(" {}", p.gpu_model)}</span>
                                </td>
                                <td class="num">{format!("{} of {} nodes", p.free_nodes, p.nodes)}</td>
                                <td class="num">{format!("{} of {} GPUs", p.gpus_free, p.gpus_total)}</td>
                                <td class="num">{p.queued_jobs}</td>
                            </tr>
                        }
                    })
                    .collect_view()}
            </tbody>
        </table>
    }
}
