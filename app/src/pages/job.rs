//! The job page: the answer first (state, queue position and why it waits), then the
//! parameters and the state history. Updates in place over server-sent events.

use leptos::prelude::*;
use leptos_router::hooks::use_params_map;

use crate::app::Authed;
use crate::components::{Ago, ErrorBox, StateBadge};
use crate::error::ApiError;
use crate::format;
use crate::functions::{cancel_job, get_job};
use crate::live::use_live;
use crate::model::{AheadJob, Job, JobPage, JobState};
use chrono::{DateTime, Utc};

#[component]
pub fn JobDetailPage() -> impl IntoView {
    view! {
        <Authed>
            <JobDetail/>
        </Authed>
    }
}

#[component]
fn JobDetail() -> impl IntoView {
    let live = use_live();
    let params = use_params_map();
    let id = move || params.read().get("id").unwrap_or_default();
    let page = Resource::new(move || (id(), live.version.get()), |(id, _)| get_job(id));
    view! {
        <Transition fallback=|| view! { <p class="muted">"Loading…"</p> }>
            {move || Suspend::new(async move {
                match page.await {
                    Ok(p) => view! { <JobBody page=p/> }.into_any(),
                    Err(e) => view! { <ErrorBox err=e/> }.into_any(),
                }
            })}
        </Transition>
    }
}

#[component]
fn JobBody(page: JobPage) -> impl IntoView {
    let live = use_live();
    let job = page.job;
    let page_now = page.now;
    let now = move || live.now_or(page_now);
    let headline = headline(&job, page_now);
    let state = job.state;
    view! {
        <div class="page-head">
            <div>
                <h1 data-testid="job-name">{job.name.clone()}</h1>
                <p class="muted">
                    {format!(
                        "{} v{} · {} · team {} · {} in {}",
                        job.template,
                        job.template_version,
                        job.user,
                        job.team,
                        format::gpus_nodes(job.gpus),
                        job.pool,
                    )}
                </p>
            </div>
            <div class="head-actions">
                <StateBadge state=state/>
                <CancelButton job=job.clone()/>
            </div>
        </div>
        <section class=format!("panel answer state-{}", state.as_str()) data-testid="job-answer">
            {headline}
        </section>
        <div class="two-col">
            <section class="panel">
                <h2>"Details"</h2>
                <dl class="kv">
                    <dt>"State"</dt>
                    <dd data-testid="job-state">{state.as_str()}</dd>
                    <dt>"Pool"</dt>
                    <dd>{job.pool.clone()}</dd>
                    <dt>"GPUs"</dt>
                    <dd>{format::gpus_nodes(job.gpus)}</dd>
                    <dt>"Nodes"</dt>
                    <dd>
                        {if job.node_names.is_empty() {
                            "not placed yet".to_string()
                        } else {
                            job.node_names.join(", ")
                        }}
                    </dd>
                    <dt>"Priority"</dt>
                    <dd>{job.priority.as_str()}</dd>
                    <dt>"Max runtime"</dt>
                    <dd>{format::duration(job.max_runtime_s as i64)}</dd>
                    <dt>"Submitted"</dt>
                    <dd>{move || view! { <Ago now=now() at=job.created_at/> }}</dd>
                    <dt>"Where it stands"</dt>
                    <dd>
                        {
                            let job = job.clone();
                            move || crate::components::progress_text(&job, now())
                        }
                    </dd>
                </dl>
            </section>
            <section class="panel">
                <h2>"Parameters"</h2>
                <table class="table compact">
                    <tbody>
                        {job
                            .params
                            .iter()
                            .map(|(k, v)| {
                                let v = match v {
                                    serde_json::Value::String(s) => s.clone(),
                                    other => other.to_string(),
                                };
                                view! {
                                    <tr>
                                        <th scope="row">{k.clone()}</th>
                                        <td class="num"><code>{v}</code></td>
                                    </tr>
                                }
                            })
                            .collect_view()}
                    </tbody>
                </table>
            </section>
        </div>
        <section class="panel">
            <h2>"Events"</h2>
            <ol class="timeline" data-testid="job-events">
                {job
                    .events
                    .iter()
                    .rev()
                    .map(|e| {
                        view! {
                            <li>
                                <time datetime=e.at.to_rfc3339()>{format::absolute(e.at)}</time>
                                <span class=format!("badge state-{}", e.kind)>{e.kind.clone()}</span>
                                <span>{e.reason.clone()}</span>
                            </li>
                        }
                    })
                    .collect_view()}
            </ol>
        </section>
    }
}

/// The big first line: position, ETA and reason while queued, progress while running.
fn headline(job: &Job, now: DateTime<Utc>) -> AnyView {
    match job.state {
        JobState::Queued => {
            let pos = job
                .queue_position
                .map(|p| format!("#{p}"))
                .unwrap_or_else(|| "—".to_string());
            let team_pos = job
                .queue_position_in_team
                .map(|p| format!("in {} · #{p} in team {}", job.pool, job.team))
                .unwrap_or_else(|| format!("in {}", job.pool));
            let reason = job
                .pending_reason
                .clone()
                .unwrap_or_else(|| "Waiting for the next admission pass.".to_string());
            let eta = match (job.eta, job.queue_position) {
                (Some(t), _) => format!("Starts in {}", format::wait_until(now, t)),
                // Not in the cluster's queue (yet): the reason below says why.
                (None, None) => "Not in the queue yet: no estimate until the cluster lists it".to_string(),
                (None, Some(_)) => "No estimate: it cannot start before something changes (a quota, or jobs that would never fit)".to_string(),
            };
            let preempted = job.preemptions.last().map(|p| {
                view! {
                    <p class="preempted-note">
                        <span class="badge state-preempted">"preempted"</span>
                        {format!(" {} ({}); it kept its place in the queue.", p.reason, format::absolute(p.at))}
                    </p>
                }
            });
            view! {
                <div class="big-figure">
                    <span class="label">"Queue position"</span>
                    <span class="value" data-testid="queue-position">{pos}</span>
                    <span class="muted" data-testid="team-position">{team_pos}</span>
                </div>
                <p class="eta" data-testid="eta">{eta}</p>
                <p class="reason" data-testid="pending-reason">{reason}</p>
                {preempted}
                <AheadTable ahead=job.ahead.clone() now=now/>
            }
            .into_any()
        }
        JobState::Admitted => view! {
            <p class="reason">
                {format!("Admitted: {} reserved; pods are starting.", format::gpus_nodes(job.gpus))}
            </p>
        }
        .into_any(),
        JobState::Running => view! {
            <p class="reason">
                {format!("Running on {} in {}.", format::gpus_nodes(job.gpus), job.pool)}
            </p>
        }
        .into_any(),
        _ => {
            let last = job
                .events
                .last()
                .map(|e| e.reason.clone())
                .unwrap_or_default();
            view! { <p class="reason">{format!("{}. {}", capitalise(job.state.as_str()), last)}</p> }
                .into_any()
        }
    }
}

/// Who is ahead in the pool's queue: team, GPUs, priority and wait for all; name and owner
/// only for the viewer's own team.
#[component]
fn AheadTable(ahead: Vec<AheadJob>, now: DateTime<Utc>) -> impl IntoView {
    if ahead.is_empty() {
        return view! { <p class="muted" data-testid="ahead-none">"Nobody is ahead of this job."</p> }.into_any();
    }
    let count = ahead.len();
    let summary = format!(
        "Who is ahead ({})",
        if count == 1 {
            "1 job".to_string()
        } else {
            format!("{count} jobs")
        }
    );
    view! {
        <details class="ahead" open=count <= 10>
            <summary>{summary}</summary>
            <table class="table compact" data-testid="ahead">
                <thead>
                    <tr>
                        <th class="num">"#"</th>
                        <th>"Team"</th>
                        <th>"Job"</th>
                        <th class="num">"GPUs"</th>
                        <th>"Priority"</th>
                        <th class="num">"Waiting"</th>
                    </tr>
                </thead>
                <tbody>
                    {ahead
                        .into_iter()
                        .map(|a| {
                            let job = match (a.id, a.name, a.user) {
                                (Some(id), Some(name), Some(user)) => view! {
                                    <a href=format!("/jobs/{id}")>{name}</a>
                                    <span class="muted">{format!(" · {user}")}</span>
                                }
                                    .into_any(),
                                _ => view! { <span class="muted">"another team's job"</span> }.into_any(),
                            };
                            view! {
                                <tr>
                                    <td class="num">{a.position}</td>
                                    <td>{a.team}</td>
                                    <td>{job}</td>
                                    <td class="num">{format::gpus_nodes(a.gpus)}</td>
                                    <td>{a.priority.as_str()}</td>
                                    <td class="num">{format::since(now, a.submitted_at)}</td>
                                </tr>
                            }
                        })
                        .collect_view()}
                </tbody>
            </table>
        </details>
    }
        .into_any()
}

fn capitalise(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().collect::<String>() + c.as_str(),
        None => String::new(),
    }
}

/// Cancel with one confirmation that names the job and its GPUs.
#[component]
pub fn CancelButton(job: Job) -> impl IntoView {
    let live = use_live();
    let ready = crate::components::use_ready();
    let confirming = RwSignal::new(false);
    let error = RwSignal::new(None::<ApiError>);
    let cancel = Action::new(move |id: &String| {
        let id = id.clone();
        async move { cancel_job(id).await }
    });
    Effect::new(move |_| match cancel.value().get() {
        Some(Ok(_)) => {
            confirming.set(false);
            live.version.update(|v| *v += 1);
        }
        Some(Err(e)) => error.set(Some(e)),
        None => {}
    });
    if !job.can_cancel {
        return ().into_any();
    }
    let id = job.id.clone();
    let question = format!(
        "Cancel {}? It {} {} in {}.",
        job.name,
        if job.state == JobState::Queued {
            "waits for"
        } else {
            "holds"
        },
        format::gpus_nodes(job.gpus),
        job.pool
    );
    view! {
        <span class="cancel" data-ready=move || ready.get().to_string()>
            <Show
                when=move || confirming.get()
                fallback=move || {
                    view! {
                        <button class="button danger-outline" data-testid="cancel" on:click=move |_| confirming.set(true)>
                            "Cancel…"
                        </button>
                    }
                }
            >
                <span class="confirm" role="alertdialog" aria-label="Confirm cancel">
                    <span>{question.clone()}</span>
                    <button
                        class="button danger"
                        data-testid="confirm-cancel"
                        disabled=move || cancel.pending().get()
                        on:click={
                            let id = id.clone();
                            move |_| {
                                cancel.dispatch(id.clone());
                            }
                        }
                    >
                        "Cancel job"
                    </button>
                    <button class="button" on:click=move |_| confirming.set(false)>
                        "Keep it"
                    </button>
                </span>
            </Show>
            {move || error.get().map(|e| view! { <span class="field-error">{e.message}</span> })}
        </span>
    }
        .into_any()
}
