//! Jobs: the viewer's and their team's jobs, filterable by state, with queue position or
//! elapsed time; filters live in the URL.

use leptos::prelude::*;
use leptos_router::hooks::use_query_map;

use crate::app::{use_viewer, Authed};
use crate::components::{loaded, progress_text, Ago, PageError, StateBadge};
use crate::format;
use crate::functions::list_jobs;
use crate::live::use_live;
use crate::model::{JobList, JobState};
use crate::pages::job::CancelButton;

#[component]
pub fn JobsPage() -> impl IntoView {
    view! {
        <Authed>
            <Jobs/>
        </Authed>
    }
}

#[component]
fn Jobs() -> impl IntoView {
    let live = use_live();
    let query = use_query_map();
    let state = move || query.read().get("state").filter(|s| !s.is_empty());
    let scope = move || {
        query
            .read()
            .get("scope")
            .unwrap_or_else(|| "team".to_string())
    };
    let list = Resource::new(
        move || (state(), scope(), live.version.get()),
        |(state, scope, _)| list_jobs(state, Some(scope)),
    );
    let link = move |new_state: Option<&str>, new_scope: Option<&str>| {
        let st = new_state.map(str::to_string).or_else(state);
        let sc = new_scope.map(str::to_string).unwrap_or_else(scope);
        match st.as_deref() {
            Some("all") | None => format!("/jobs?scope={sc}"),
            Some(s) => format!("/jobs?scope={sc}&state={s}"),
        }
    };
    let can_launch = use_viewer().is_some_and(|v| v.can_launch());
    view! {
        <div class="page-head">
            <h1>"Jobs"</h1>
            {can_launch.then(|| view! { <a class="button primary" href="/launch" data-testid="jobs-launch">"Launch a job"</a> })}
        </div>
        <nav class="filters" aria-label="Filter jobs">
            <span class="filter-group">
                {["team", "mine"]
                    .into_iter()
                    .map(|s| {
                        view! {
                            <a
                                href=move || link(None, Some(s))
                                class="chip"
                                class:active=move || scope() == s
                                aria-current=move || (scope() == s).then_some("true")
                            >
                                {if s == "mine" { "Mine" } else { "My team" }}
                            </a>
                        }
                    })
                    .collect_view()}
            </span>
            <span class="filter-group">
                <a
                    href=move || link(Some("all"), None)
                    class="chip"
                    class:active=move || state().is_none()
                    data-testid="filter-all"
                >
                    "All states"
                </a>
                {JobState::ALL
                    .into_iter()
                    .map(|s| {
                        view! {
                            <a
                                href=move || link(Some(s.as_str()), None)
                                class="chip"
                                class:active=move || state().as_deref() == Some(s.as_str())
                                data-testid=format!("filter-{}", s.as_str())
                            >
                                {s.as_str()}
                            </a>
                        }
                    })
                    .collect_view()}
            </span>
        </nav>
        <Transition fallback=|| view! { <p class="muted">"Loading…"</p> }>
            {move || Suspend::new(async move {
                loaded(list).await.map(|r| match r {
                    Ok(l) => view! { <JobTable list=l can_launch/> }.into_any(),
                    Err(e) => view! { <PageError err=e/> }.into_any(),
                })
            })}
        </Transition>
    }
}

#[component]
fn JobTable(list: JobList, can_launch: bool) -> impl IntoView {
    let live = use_live();
    let page_now = list.now;
    if list.jobs.is_empty() {
        return view! {
            <div class="empty panel">
                <p>"No jobs match. Jobs you and your team launch show up here."</p>
                {can_launch.then(|| view! { <a class="button" href="/launch">"Launch one"</a> })}
            </div>
        }
        .into_any();
    }
    // On a phone the table scrolls inside its box instead of widening the page.
    view! {
        <div class="table-scroll">
        <table class="table" data-testid="jobs-table">
            <thead>
                <tr>
                    <th>"State"</th>
                    <th>"Name"</th>
                    <th>"Template"</th>
                    <th>"User"</th>
                    <th class="num">"GPUs"</th>
                    <th>"Pool"</th>
                    <th>"Position / elapsed"</th>
                    <th>"Submitted"</th>
                    <th><span class="sr-only">"Actions"</span></th>
                </tr>
            </thead>
            <tbody>
                {list
                    .jobs
                    .into_iter()
                    .map(|j| {
                        let progress = {
                            let j = j.clone();
                            move || progress_text(&j, live.now_or(page_now))
                        };
                        let created = j.created_at;
                        view! {
                            <tr data-testid=format!("job-row-{}", j.id) data-state=j.state.as_str()>
                                <td><StateBadge state=j.state/></td>
                                <td><a href=format!("/jobs/{}", j.id)>{j.name.clone()}</a></td>
                                <td>{j.template.clone()}</td>
                                <td>{j.user.clone()}</td>
                                <td class="num">{format::gpus_nodes(j.gpus)}</td>
                                <td>{j.pool.clone()}</td>
                                <td class="num">{progress}</td>
                                <td>{move || view! { <Ago now=live.now_or(page_now) at=created/> }}</td>
                                <td><CancelButton job=j.clone()/></td>
                            </tr>
                        }
                    })
                    .collect_view()}
            </tbody>
        </table>
        </div>
    }
        .into_any()
}
