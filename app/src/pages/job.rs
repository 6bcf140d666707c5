//! The job page: the answer first (state, queue position and why it waits), then the
//! parameters and the state history. Updates in place over server-sent events.

use leptos::prelude::*;
use leptos_router::hooks::use_params_map;

use crate::app::Authed;
use crate::components::{loaded, Ago, ErrorBox, PageError, StateBadge};
use crate::error::ApiError;
use crate::format;
use crate::functions::{cancel_job, get_job, rerun_job};
use crate::live::use_live;
use crate::model::{AheadJob, Job, JobPage, JobState};
use crate::pages::job_logs::{FailureLines, LogsPanel};
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
    // Its own job's changes at once (folded over 150 ms); its pool's queue moving, while it
    // waits in it, at most once a second. Nothing else refetches the page.
    let own = live.throttled(std::time::Duration::from_millis(150), move |c| {
        params
            .with_untracked(|p| p.get("id"))
            .is_some_and(|id| c.job_id == id)
    });
    let shown = StoredValue::new(None::<(String, bool)>);
    let queue = live.throttled(std::time::Duration::from_secs(1), move |c| {
        shown
            .try_get_value()
            .flatten()
            .is_some_and(|(pool, queued)| queued && c.pool == pool)
    });
    let page = Resource::new(
        move || (id(), own.get(), queue.get()),
        |(id, _, _)| get_job(id),
    );
    // Re-run lives here, not in the button: the new job's launch moves the live version,
    // which draws the page body again; the answer must still find someone to navigate.
    let rerun = Action::new(move |(id, current): &(String, bool)| {
        let (id, current) = (id.clone(), *current);
        async move { rerun_job(id, current).await }
    });
    let navigate = leptos_router::hooks::use_navigate();
    Effect::new(move |_| {
        if let Some(Ok(j)) = rerun.value().get() {
            navigate(&format!("/jobs/{}", j.id), Default::default());
        }
    });
    provide_context(RerunAction(rerun));
    view! {
        <Transition fallback=|| view! { <p class="muted">"Loading…"</p> }>
            {move || Suspend::new(async move {
                loaded(page).await.map(|r| match r {
                    Ok(p) => {
                        // What the queue's moves are checked against.
                        shown.try_set_value(Some((p.job.pool.clone(), p.job.state == JobState::Queued)));
                        view! { <JobBody page=p/> }.into_any()
                    }
                    // Unknown, or another team's: 404 either way, as the API answers.
                    Err(e) => view! { <PageError err=e/> }.into_any(),
                })
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
    // Queued and running jobs count down and up with the live clock; an ended job's
    // answer is drawn once (its failure lines are read once).
    let headline = if job.state.is_active() {
        let job = job.clone();
        (move || headline(&job, now())).into_any()
    } else {
        headline(&job, page_now)
    };
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
                <RerunButtons job=job.clone()/>
                <CancelButton job=job.clone()/>
            </div>
        </div>
        {job.cloned_from.clone().map(|f| view! {
            <p class="muted small lineage" data-testid="cloned-from">
                "Cloned from " <a href=format!("/jobs/{}", f.id)>{f.name}</a>
            </p>
        })}
        <section class=format!("panel answer state-{}", state.as_str()) data-testid="job-answer">
            {headline}
        </section>
        {job.admitted_at.is_some().then(|| view! { <GpuPanel job_id=job.id.clone() gpus=job.gpus show_idle=job.can_cancel/> })}
        {job.admitted_at.is_some().then(|| view! { <LogsPanel job=job.clone()/> })}
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
                        {if job.admitted_at.is_none() && !job.state.is_active() {
                            "none: it never started".to_string()
                        } else if job.node_names.is_empty() && !job.state.is_active() {
                            "released (see Events for where it ran)".to_string()
                        } else if job.node_names.is_empty() {
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
                    {(!job.clones.is_empty()).then(|| view! {
                        <dt>"Re-runs and clones"</dt>
                        <dd data-testid="clones">
                            {job.clones.iter().map(|c| view! {
                                <a href=format!("/jobs/{}", c.id)>{c.name.clone()}</a>
                                " "
                            }).collect_view()}
                        </dd>
                    })}
                    {job.gpu_hours.clone().map(|h| view! {
                        <dt>"GPU-hours"</dt>
                        <dd data-testid="job-gpu-hours">{gpu_hours_line(&h)}</dd>
                    })}
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

/// "32.0 GPU-h allocated · 20.8 used · 11.2 idle · 65 % efficiency".
fn gpu_hours_line(h: &crate::model::JobGpuHours) -> String {
    let mut out = format!("{:.1} GPU-h allocated", h.allocated);
    match (h.used, h.idle, h.efficiency) {
        (Some(u), Some(i), Some(e)) => {
            out.push_str(&format!(
                " · {u:.1} used · {i:.1} idle · {:.0} % efficiency",
                e * 100.0
            ));
            if h.unmeasured > 0.05 {
                out.push_str(&format!(" ({:.1} GPU-h not measured)", h.unmeasured));
            }
        }
        _ => out.push_str(" · utilization not measured yet"),
    }
    out
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
        JobState::Running => {
            let started = job
                .events
                .iter()
                .rev()
                .find(|e| e.kind == "running")
                .map(|e| e.at)
                .or(job.admitted_at);
            let limit = job
                .admitted_at
                .map(|a| a + chrono::Duration::seconds(job.max_runtime_s as i64));
            view! {
                <p class="reason">
                    {format!("Running on {} in {}.", format::gpus_nodes(job.gpus), job.pool)}
                </p>
                <p class="eta" data-testid="running-for">
                    {started.map(|s| format!("Running for {}", format::duration((now - s).num_seconds().max(0))))}
                    {limit.map(|l| format!(
                        "; its max runtime ends in {}.",
                        format::wait_until(now, l),
                    ))}
                </p>
            }
            .into_any()
        }
        JobState::Failed => failure(job),
        _ => {
            let last = job
                .events
                .last()
                .map(|e| e.reason.clone())
                .unwrap_or_default();
            let text = ended_text(job.state, &last);
            view! { <p class="reason" data-testid="ended-reason">{text}</p> }.into_any()
        }
    }
}

/// A failed job leads with how long it ran and why it failed, in the cluster's words.
fn failure(job: &Job) -> AnyView {
    let failed = job.events.iter().rev().find(|e| e.kind == "failed");
    let at = failed.map(|e| e.at).or(job.finished_at);
    // Running time of the last run: from its pods starting (else its admission) to the end.
    let started = job
        .events
        .iter()
        .rev()
        .find(|e| e.kind == "running" || e.kind == "admitted")
        .map(|e| e.at);
    let title = match (started, at) {
        (Some(s), Some(e)) => format!("Failed after {}", format::duration((e - s).num_seconds())),
        _ => "Failed".to_string(),
    };
    let reason = failed
        .map(|e| e.reason.trim())
        .map(|r| r.strip_prefix("Failed:").map(str::trim).unwrap_or(r))
        .filter(|r| !r.is_empty())
        .map(capitalise)
        .unwrap_or_else(|| "The cluster gave no reason.".to_string());
    let when = at.map(|t| {
        view! {
            <p class="muted">
                {"Ended "}
                <time datetime=t.to_rfc3339()>{format::absolute(t)}</time>
                {format!("; its {} were released.", format::gpus_nodes(job.gpus))}
            </p>
        }
    });
    let detail = job.failure.clone().map(|f| {
        let exit = match f.exit_code {
            Some(c) => format!("exit code {c} ({})", f.reason),
            None => f.reason.clone(),
        };
        let place = [
            f.pod.as_ref().map(|p| format!("pod {p}")),
            f.rank.map(|r| format!("node rank {r}")),
            f.node.as_ref().map(|n| format!("on {n}")),
        ]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join(", ");
        view! {
            <dl class="kv failure-detail" data-testid="failure-detail">
                <dt>"Exit"</dt>
                <dd data-testid="failure-exit">{exit}": "{f.meaning.clone()}</dd>
                <dt>"Failed first"</dt>
                <dd data-testid="failure-where">{place}</dd>
                {f.condition.clone().map(|c| view! { <dt>"Job condition"</dt><dd class="muted">{c}</dd> })}
            </dl>
            <FailureLines job_id=job.id.clone() failure=f/>
        }
    });
    view! {
        <div class="failure" role="alert" data-testid="failure">
            <p class="failure-title">
                <span class="badge state-failed">"✕ failed"</span>
                " "
                <strong data-testid="failure-title">{title}</strong>
            </p>
            <p class="reason" data-testid="failure-reason">{reason}</p>
            {detail}
            {when}
        </div>
    }
    .into_any()
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

/// An ended job's headline: its state, then the cluster's last word on it, without saying
/// the state twice when that word already starts with it ("Succeeded: ...").
fn ended_text(state: JobState, last_reason: &str) -> String {
    let name = capitalise(state.as_str());
    match last_reason.trim() {
        "" => format!("{name}."),
        l if l.to_lowercase().starts_with(&state.as_str().to_lowercase()) => capitalise(l),
        l => format!("{name}. {l}"),
    }
}

fn capitalise(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().collect::<String>() + c.as_str(),
        None => String::new(),
    }
}

/// The page's re-run, shared with its buttons.
#[derive(Clone, Copy)]
struct RerunAction(Action<(String, bool), Result<Job, ApiError>>);

/// Re-run (one click and a confirmation: the same template version, parameters, GPUs, pool,
/// priority and max runtime) and Clone (the Launch form filled with the same values). A job
/// on an older template version says so and offers the current one; a deprecated template
/// takes no re-runs.
#[component]
pub fn RerunButtons(job: Job) -> impl IntoView {
    let ready = crate::components::use_ready();
    let confirming = RwSignal::new(false);
    let RerunAction(rerun) = expect_context::<RerunAction>();
    let error = move || rerun.value().get().and_then(|r| r.err());
    if !job.can_rerun {
        return ().into_any();
    }
    let note = job.version_note.clone();
    if note.as_ref().is_some_and(|n| n.deprecated) {
        return view! {
            <span class="muted small" data-testid="rerun-deprecated">
                {format!("Template {} is deprecated: no re-runs or clones.", job.template)}
            </span>
        }
        .into_any();
    }
    let id = job.id.clone();
    let question = format!(
        "Re-run {}? {} v{}, {} in {}, {} priority, max {}{}.",
        job.name,
        job.template,
        job.template_version,
        format::gpus_nodes(job.gpus),
        job.pool,
        job.priority.as_str(),
        format::duration(job.max_runtime_s as i64),
        if job.params.is_empty() {
            ""
        } else {
            ", the same parameters"
        },
    );
    let clone_href = format!("/launch/{}?from_job={}", job.template, job.id);
    let current = note.as_ref().and_then(|n| n.current);
    let differences = note.map(|n| n.differences).unwrap_or_default();
    view! {
        <span class="rerun" data-ready=move || ready.get().to_string()>
            <Show
                when=move || confirming.get()
                fallback=move || view! {
                    <button class="button" data-testid="rerun" on:click=move |_| confirming.set(true)>
                        "Re-run…"
                    </button>
                }
            >
                <span class="confirm" role="alertdialog" aria-label="Confirm re-run">
                    <span>{question.clone()}</span>
                    {current.map(|c| view! {
                        <span class="small" data-testid="rerun-version-note">
                            {format!("v{c} is the current version; differences: {}", if differences.is_empty() { "none that change the run".to_string() } else { differences.join("; ") })}
                        </span>
                    })}
                    <button
                        class="button primary"
                        data-testid="confirm-rerun"
                        disabled=move || rerun.pending().get()
                        on:click={
                            let id = id.clone();
                            move |_| {
                                rerun.dispatch((id.clone(), false));
                            }
                        }
                    >
                        {if current.is_some() { "Re-run as it was" } else { "Re-run" }}
                    </button>
                    {current.map(|c| {
                        let id = id.clone();
                        view! {
                            <button class="button" data-testid="rerun-current" on:click=move |_| {
                                rerun.dispatch((id.clone(), true));
                            }>{format!("Re-run on v{c}")}</button>
                        }
                    })}
                    <button class="button" on:click=move |_| confirming.set(false)>"Keep"</button>
                </span>
            </Show>
            <a class="button" data-testid="clone" href=clone_href>"Clone…"</a>
            {move || error().map(|e| view! { <span class="field-error">{e.message}</span> })}
        </span>
    }
    .into_any()
}

/// Cancel with one confirmation that names the job and its GPUs.
#[component]
pub fn CancelButton(job: Job) -> impl IntoView {
    let live = use_live();
    let ready = crate::components::use_ready();
    let confirming = RwSignal::new(false);
    let error = RwSignal::new(None::<ApiError>);
    let cancel_id = StoredValue::new(job.id.clone());
    let cancel = Action::new(move |id: &String| {
        let id = id.clone();
        async move { cancel_job(id).await }
    });
    Effect::new(move |_| match cancel.value().get() {
        Some(Ok(_)) => {
            confirming.set(false);
            live.poke(&cancel_id.get_value());
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

/// The job's GPUs: a node × GPU heatmap of the latest utilization and the last two hours of
/// mean utilization, memory and power. It refetches on every cluster-clock tick of the live
/// stream, so it moves without a reload. The idle warning is for those who can act on it
/// (the owner, the team's lead, admins).
#[component]
fn GpuPanel(job_id: String, gpus: u32, show_idle: bool) -> impl IntoView {
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
    let util = Resource::new(
        move || (own.get(), ticks.get()),
        move |_| crate::functions::get_job_utilization(job_id.clone()),
    );
    view! {
        <section class="panel" data-testid="gpu-panel">
            <h2>{format!("GPU utilization · {}", format::gpus_nodes(gpus))}</h2>
            <Transition fallback=|| view! { <p class="muted">"Loading GPU metrics…"</p> }>
                {move || Suspend::new(async move {
                    loaded(util).await.map(|r| match r {
                        Ok(u) if u.available => view! { <GpuView u show_idle/> }.into_any(),
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
            "background: hsl(220, 70%, {:.0}%); color: {text}",
            92.0 - u * 0.55
        )
    }
}

#[component]
fn GpuView(u: crate::model::JobUtilization, show_idle: bool) -> impl IntoView {
    let mut nodes: Vec<(String, Vec<(u32, f64)>)> = Vec::new();
    for g in &u.gpus {
        let last = g.util_pct.last().copied().unwrap_or(0.0);
        match nodes.iter_mut().find(|(n, _)| *n == g.node) {
            Some((_, cells)) => cells.push((g.gpu, last)),
            None => nodes.push((g.node.clone(), vec![(g.gpu, last)])),
        }
    }
    let columns = nodes.iter().map(|(_, c)| c.len()).max().unwrap_or(0);
    let at =
        u.to.map(|t| t.format("%H:%M UTC").to_string())
            .unwrap_or_default();
    let series =
        |f: fn(&crate::model::MeanSample) -> f64| u.mean.iter().map(f).collect::<Vec<f64>>();
    let util = series(|m| m.util_pct);
    let fb = series(|m| m.fb_used_gib);
    let power = series(|m| m.power_w);
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
                    {cells.into_iter().map(|(gpu, v)| view! {
                        <span class="heat-cell" style=heat(v) title=format!("{node} GPU {gpu}: {v:.0} %") data-util=format!("{v:.1}")>{format!("{v:.0}")}</span>
                    }).collect_view()}
                </div>
            }).collect_view()}
            <p class="muted small">{format!("Utilization (%) per GPU at {at}; red: under 5 %.{sampled}")}</p>
        </div>
        <div class="sparks">
            <Spark title="Mean utilization" unit="%" values=util max=100.0 span=span.clone()/>
            <Spark title="Memory in use (mean per GPU)" unit="GiB" values=fb max=80.0 span=span.clone()/>
            <Spark title="Power (mean per GPU)" unit="W" values=power max=700.0 span=span/>
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
    let points = values
        .iter()
        .enumerate()
        .map(|(i, v)| {
            format!(
                "{:.1},{:.1}",
                34.0 + i as f64 / n * (w - 40.0),
                8.0 + (1.0 - (v / max).clamp(0.0, 1.0)) * (h - 24.0)
            )
        })
        .collect::<Vec<_>>()
        .join(" ");
    let last = values.last().copied().unwrap_or(0.0);
    let label = format!("{title}, {span}, in {unit}");
    view! {
        <figure class="spark">
            <figcaption>{title} ": " <strong>{format!("{last:.0} {unit}")}</strong></figcaption>
            <svg viewBox=format!("0 0 {w} {h}") role="img" aria-label=label>
                <line x1="34" y1="8" x2="34" y2=format!("{}", h - 16.0) class="axis"/>
                <line x1="34" y1=format!("{}", h - 16.0) x2=format!("{}", w - 6.0) y2=format!("{}", h - 16.0) class="axis"/>
                <text x="30" y="14" text-anchor="end">{format!("{max:.0} {unit}")}</text>
                <text x="30" y=format!("{}", h - 16.0) text-anchor="end">{format!("0 {unit}")}</text>
                <text x=format!("{}", w - 6.0) y=format!("{}", h - 3.0) text-anchor="end">{span}</text>
                <polyline points=points class="line"/>
            </svg>
        </figure>
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ended_headline_names_its_state_once() {
        assert_eq!(
            ended_text(JobState::Succeeded, "Succeeded: the JobSet completed"),
            "Succeeded: the JobSet completed"
        );
        assert_eq!(ended_text(JobState::Succeeded, "succeeded"), "Succeeded");
        assert_eq!(
            ended_text(JobState::Cancelled, "cancelled by alice"),
            "Cancelled by alice"
        );
        assert_eq!(
            ended_text(JobState::Cancelled, "max runtime reached"),
            "Cancelled. max runtime reached"
        );
        assert_eq!(ended_text(JobState::Succeeded, "  "), "Succeeded.");
        for (state, reason) in [
            (JobState::Succeeded, "Succeeded"),
            (JobState::Succeeded, "Succeeded."),
            (JobState::Cancelled, "Cancelled"),
        ] {
            let t = ended_text(state, reason);
            assert_eq!(t.to_lowercase().matches(state.as_str()).count(), 1, "{t}");
        }
    }
}
