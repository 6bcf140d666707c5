//! The job page: the answer first (state, queue position and why it waits), then the
//! parameters and the state history. Updates in place over server-sent events.

use leptos::prelude::*;
use leptos_router::hooks::use_params_map;

use crate::app::Authed;
use crate::components::{loaded, PageError, StateBadge};
use crate::format;
use crate::functions::{get_job, rerun_job};
use crate::live::use_live;
use crate::model::{AheadJob, Job, JobPage, JobState};
use crate::pages::job_actions::{
    cancel_button, CancelAction, CancelAsk, RerunAction, RerunButtons,
};
use crate::pages::job_gpu::GpuPanel;
use crate::pages::job_logs::{FailureLines, LogsPanel};
use crate::sync_html::sync_html;
use crate::wire::SwappedJson;
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
    // What the page shows that other jobs' changes move: its pool and whether it waits in
    // it, and the re-runs and clones it names.
    let shown = StoredValue::new(None::<Shown>);
    // Its own job's changes at once (folded over 150 ms), and a re-run or clone of it that the
    // page does not name yet (launched in another tab, or by a teammate): its link is added.
    // Its pool's queue moving, while it waits in it, at most once a second. Nothing else
    // refetches the page.
    let own = live.throttled(std::time::Duration::from_millis(150), move |c| {
        params.with_untracked(|p| p.get("id")).is_some_and(|id| {
            c.job_id == id
                || shown
                    .try_with_value(|s| is_new_clone(c, &id, s.as_ref()))
                    .unwrap_or(false)
        })
    });
    let queue = live.throttled(std::time::Duration::from_secs(1), move |c| {
        shown
            .try_with_value(|s| s.as_ref().is_some_and(|s| s.queued && c.pool == s.pool))
            .unwrap_or(false)
    });
    // In the page as `SwappedJson`: far fewer escapes there.
    let page = Resource::<_, SwappedJson>::new_with_options(
        move || (id(), own.get(), queue.get()),
        |(id, _, _)| get_job(id),
        false,
    );
    // Re-run lives here, not in the button: the new job's launch moves the live version,
    // which draws the page body again; the answer must still find someone to navigate.
    let rerun = Action::new(move |(id, current, key): &(String, bool, String)| {
        let (id, current, key) = (id.clone(), *current, key.clone());
        async move { rerun_job(id, current, key).await }
    });
    let navigate = leptos_router::hooks::use_navigate();
    Effect::new(move |_| {
        if let Some(Ok(j)) = rerun.value().get() {
            navigate(&format!("/jobs/{}", j.id), Default::default());
        }
    });
    // A fresh key for each job the page shows: the page stays when the browser goes from a
    // job to its re-run, and a key kept across them would give back the first re-run.
    let key = StoredValue::new(String::new());
    let confirming = RwSignal::new(None::<String>);
    let cancel = CancelAction::provide();
    Effect::new(move |_| {
        let _ = id();
        key.set_value(crate::pages::launch_form::new_idempotency_key());
        confirming.set(None);
        cancel.reset();
    });
    provide_context(RerunAction {
        action: rerun,
        key,
        confirming,
    });
    view! {
        <Transition fallback=|| view! { <p class="muted">"Loading…"</p> }>
            {move || Suspend::new(async move {
                loaded(page).await.map(|r| match r {
                    Ok(p) => {
                        // What other jobs' changes are checked against.
                        shown.try_set_value(Some(Shown {
                            pool: p.job.pool.clone(),
                            queued: p.job.state == JobState::Queued,
                            clones: p.job.clones.iter().map(|c| c.id.clone()).collect(),
                            read_at: p.now,
                        }));
                        view! { <JobBody page=p/> }.into_any()
                    }
                    // Unknown, or another team's: 404 either way, as the API answers.
                    Err(e) => view! { <PageError err=e/> }.into_any(),
                })
            })}
        </Transition>
    }
}

/// What a job's page shows that changes to other jobs can move.
struct Shown {
    pool: String,
    queued: bool,
    /// The re-runs and clones it names (the 20 newest of them).
    clones: Vec<String>,
    /// The cluster's clock when the page was read: a re-run launched since is not named.
    read_at: chrono::DateTime<chrono::Utc>,
}

/// A change to a re-run or clone of job `id` launched since its page was read, which the
/// page does not name yet. (An older one that is not named stays unnamed: only the newest
/// are, and its changes refetch nothing.)
fn is_new_clone(c: &crate::live::Change, id: &str, shown: Option<&Shown>) -> bool {
    let (Some(row), Some(shown)) = (c.row.as_ref(), shown) else {
        return false;
    };
    row.cloned_from.as_ref().is_some_and(|f| f.id == id)
        // To the millisecond: a job's time is stored so, the clock is finer (and a manual
        // clock stands still between the two).
        && row.created_at.timestamp_millis() >= shown.read_at.timestamp_millis()
        && !shown.clones.contains(&row.id)
}

#[component]
fn JobBody(page: JobPage) -> impl IntoView {
    let live = use_live();
    let job = page.job;
    let page_now = page.now;
    let now = move || live.now_or(page_now);
    // Queued and running jobs count down and up with the live clock; an ended job's
    // answer is drawn once (its failure lines are read once).
    // On the server the clock is the page's: drawn once, not as a closure (which the server
    // runs twice a render); a closure adds no markers, so the browser's hydrates over it.
    let headline = if job.state.is_active() && cfg!(feature = "hydrate") {
        let job = job.clone();
        (move || headline(&job, now())).into_any()
    } else {
        headline(&job, page_now)
    };
    let state = job.state;
    // What waits on nothing is written in one pass (`sync_html`); the answer and the two
    // panels fetch.
    view! {
        {sync_html(view! {
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
                    {CancelAsk::of(&job).map(|a| cancel_button(&a))}
                </div>
            </div>
            {job.cloned_from.clone().map(|f| view! {
                <p class="muted small lineage" data-testid="cloned-from">
                    "Cloned from " <a href=format!("/jobs/{}", f.id)>{f.name}</a>
                </p>
            })}
        })}
        // Not in one pass: a failed job's answer reads its failing lines (a Suspense).
        <section class=format!("panel answer state-{}", state.as_str()) data-testid="job-answer">
            {headline}
        </section>
        {page.util.map(|first| view! { <GpuPanel job_id=job.id.clone() gpus=job.gpus show_idle=job.can_cancel first/> })}
        {job.admitted_at.is_some().then(|| view! { <LogsPanel job=job.clone()/> })}
        {details(&job, page_now, live)}
    }
}

/// The page's lower part, which waits on nothing: the details, the parameters and the
/// events. On the server it is written straight into a string ([`details_html`]) instead of
/// built as views (about forty elements, two clocks) and then written; the HTML is the views',
/// byte for byte (`the_details_written_as_one_string_are_the_views_html`), so the browser
/// hydrates these views over it. Only where the views are built type-erased
/// (`--cfg erase_components`, as the Makefile builds), whose markers the string writes.
fn details(job: &Job, page_now: DateTime<Utc>, live: crate::live::Live) -> impl IntoView {
    #[cfg(all(feature = "ssr", erase_components))]
    {
        sync_html(leptos::tachys::html::InertElement::new(details_html(
            job,
            live.now_or(page_now),
        )))
    }
    #[cfg(not(all(feature = "ssr", erase_components)))]
    {
        sync_html(details_view(job.clone(), page_now, live))
    }
}

/// [`details`] as views: in the browser, and on the server for comparison.
#[cfg(any(not(all(feature = "ssr", erase_components)), test))]
fn details_view(job: Job, page_now: DateTime<Utc>, live: crate::live::Live) -> impl IntoView {
    use crate::components::Ago;
    let now = move || live.now_or(page_now);
    let state = job.state;
    view! {
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
                    <dd>{nodes_text(&job)}</dd>
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
                            {older_clones(&job).map(|line| view! {
                                <span class="muted" data-testid="clones-older">{line}</span>
                            })}
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
                <table class="table compact job-params" data-testid="job-params">
                    <tbody>
                        {job
                            .params
                            .iter()
                            .map(|(k, v)| {
                                view! {
                                    <tr>
                                        <th scope="row">{k.clone()}</th>
                                        <td class="num"><code>{param_text(v)}</code></td>
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

/// What [`details_view`] writes on the server (built with `--cfg erase_components`), written
/// directly: tachys' escaping, and its markers (`<!>`) after each dynamic text, each
/// component or element list, and each absent view.
#[cfg(all(feature = "ssr", erase_components))]
fn details_html(job: &Job, now: DateTime<Utc>) -> String {
    use crate::sync_html::{push_attr, push_text};
    let mut out = String::with_capacity(3_000 + 200 * (job.params.len() + job.events.len()));
    let o = &mut out;
    // A `<dt>` and its `<dd>` of one text.
    fn pair(o: &mut String, dt: &str, dd_open: &str, text: &str) {
        o.push_str("<dt>");
        o.push_str(dt);
        o.push_str("</dt>");
        o.push_str(dd_open);
        push_text(o, text);
        o.push_str("<!></dd>");
    }
    o.push_str(r#"<div class="two-col"><section class="panel"><h2>Details</h2><dl class="kv">"#);
    pair(
        o,
        "State",
        r#"<dd data-testid="job-state">"#,
        job.state.as_str(),
    );
    pair(o, "Pool", "<dd>", &job.pool);
    pair(o, "GPUs", "<dd>", &format::gpus_nodes(job.gpus));
    pair(o, "Nodes", "<dd>", &nodes_text(job));
    pair(o, "Priority", "<dd>", job.priority.as_str());
    pair(
        o,
        "Max runtime",
        "<dd>",
        &format::duration(job.max_runtime_s as i64),
    );
    o.push_str(r#"<dt>Submitted</dt><dd><time datetime=""#);
    push_attr(o, &job.created_at.to_rfc3339());
    o.push_str(r#"" title=""#);
    push_attr(o, &format::absolute(job.created_at));
    o.push_str(r#"">"#);
    push_text(o, &format::ago(now, job.created_at));
    o.push_str("<!></time><!></dd>");
    if job.clones.is_empty() {
        o.push_str("<!>");
    } else {
        o.push_str(r#"<dt>Re-runs and clones<!></dt><dd data-testid="clones">"#);
        for c in &job.clones {
            o.push_str(r#"<a href="/jobs/"#);
            push_attr(o, &c.id);
            o.push_str(r#"">"#);
            push_text(o, &c.name);
            o.push_str("<!></a> <!>");
        }
        o.push_str("<!>");
        match older_clones(job) {
            Some(line) => {
                o.push_str(r#"<span data-testid="clones-older" class="muted">"#);
                push_text(o, &line);
                o.push_str("<!></span>");
            }
            None => o.push_str("<!>"),
        }
        o.push_str("<!><!></dd><!>");
    }
    match &job.gpu_hours {
        Some(h) => {
            o.push_str(r#"<dt>GPU-hours<!></dt><dd data-testid="job-gpu-hours">"#);
            push_text(o, &gpu_hours_line(h));
            o.push_str("<!></dd><!>");
        }
        None => o.push_str("<!>"),
    }
    pair(
        o,
        "Where it stands",
        "<dd>",
        &crate::components::progress_text(job, now),
    );
    o.push_str(r#"<!><!></dl><!><!></section><section class="panel"><h2>Parameters</h2><table data-testid="job-params" class="table compact job-params"><tbody>"#);
    for (k, v) in &job.params {
        o.push_str(r#"<tr><th scope="row">"#);
        push_text(o, k);
        o.push_str(r#"<!></th><td class="num"><code>"#);
        push_text(o, &param_text(v));
        o.push_str("<!></code><!></td><!><!></tr>");
    }
    o.push_str(r#"<!><!></tbody><!></table><!><!></section><!><!></div><section class="panel"><h2>Events</h2><ol data-testid="job-events" class="timeline">"#);
    for e in job.events.iter().rev() {
        o.push_str(r#"<li><time datetime=""#);
        push_attr(o, &e.at.to_rfc3339());
        o.push_str(r#"">"#);
        push_text(o, &format::absolute(e.at));
        o.push_str(r#"<!></time><span class="badge state-"#);
        push_attr(o, &e.kind);
        o.push_str(r#"">"#);
        push_text(o, &e.kind);
        o.push_str("<!></span><span>");
        push_text(o, &e.reason);
        o.push_str("<!></span><!><!></li>");
    }
    // The events' list, its section, and the two sections' own end.
    o.push_str("<!><!></ol><!><!></section><!>");
    out
}

/// Where a job's nodes are, in words: "hgx-h200-node-00, hgx-h200-node-01", "not placed yet".
fn nodes_text(job: &Job) -> String {
    if job.admitted_at.is_none() && !job.state.is_active() {
        "none: it never started".to_string()
    } else if job.node_names.is_empty() && !job.state.is_active() {
        "released (see Events for where it ran)".to_string()
    } else if job.node_names.is_empty() {
        "not placed yet".to_string()
    } else {
        job.node_names.join(", ")
    }
}

/// A parameter's value as the table shows it: a string as itself, anything else as JSON.
fn param_text(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// "and 2 older (the 20 newest are named)" when the page names only some of the job's
/// re-runs and clones; `None` when it names them all.
fn older_clones(job: &Job) -> Option<String> {
    let named = job.clones.len() as u64;
    (job.clone_count > named).then(|| {
        let older = job.clone_count - named;
        format!("and {older} older (the {named} newest are named)")
    })
}

/// "Who is ahead (3 jobs)", or "Who is ahead (149 jobs; the first 100 are listed)" when the
/// table lists only some of them.
fn ahead_summary(listed: usize, total: usize) -> String {
    let jobs = |n: usize| {
        if n == 1 {
            "1 job".to_string()
        } else {
            format!("{n} jobs")
        }
    };
    if total > listed {
        format!(
            "Who is ahead ({}; the first {listed} are listed)",
            jobs(total)
        )
    } else {
        format!("Who is ahead ({})", jobs(listed))
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
                <AheadTable
                    ahead=job.ahead.clone()
                    total=job.queue_position.map_or(0, |p| p.saturating_sub(1) as usize)
                    now=now
                />
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
/// only for the viewer's own team. `total`: how many jobs are ahead (the job's position
/// less one); the server sends the first 100.
#[component]
fn AheadTable(ahead: Vec<AheadJob>, total: usize, now: DateTime<Utc>) -> impl IntoView {
    if ahead.is_empty() {
        return view! { <p class="muted" data-testid="ahead-none">"Nobody is ahead of this job."</p> }.into_any();
    }
    let count = ahead.len();
    let summary = ahead_summary(count, total);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::live::Change;
    use crate::model::JobLink;
    use crate::pages::jobs_live::tests::{job, t};

    /// A change to job `id`, cloned from `from`, launched at `at`.
    fn clone_change(id: &str, from: &str, at: i64) -> Change {
        let mut row = job(id, at, JobState::Queued, "hgx-h100", Some(1));
        row.cloned_from = Some(JobLink {
            id: from.into(),
            name: "origin".into(),
        });
        Change {
            seq: 1,
            job_id: id.into(),
            pool: "hgx-h100".into(),
            row: Some(Box::new(row)),
            ..Default::default()
        }
    }

    /// The lower part written as one string ([`details_html`]) is what tachys writes for its
    /// views ([`details_view`]), byte for byte, so the browser hydrates those views over it:
    /// queued, running and ended jobs (placed, never placed, released), with and without
    /// re-runs (all named, or only the newest), GPU-hours and parameters of every JSON kind,
    /// text that needs escaping or is empty, and the clock as the page read it and moved on
    /// by the live stream.
    #[cfg(all(feature = "ssr", erase_components))]
    #[test]
    fn the_details_written_as_one_string_are_the_views_html() {
        use crate::model::{JobEvent, JobGpuHours};
        use leptos::tachys::view::RenderHtml;
        let mut jobs = Vec::new();
        let mut running = job("r1", 0, JobState::Running, "hgx-h200", None);
        running.admitted_at = Some(t(30));
        running.node_names = vec!["node-a".into(), "node-b".into()];
        running.params = serde_json::from_value(serde_json::json!({
            "dataset": "s3://d/<v3>&'x'",
            "epochs": 3,
            "lr": 0.0001,
            "flag": true,
            "none": null,
            "list": [1, "a\"b"],
            "empty": "",
        }))
        .unwrap();
        running.events = vec![
            JobEvent {
                at: t(0),
                kind: "queued".into(),
                reason: "Launched by bob & co <x>".into(),
            },
            JobEvent {
                at: t(30),
                kind: "admitted".into(),
                reason: String::new(),
            },
            JobEvent {
                at: t(60),
                kind: "running".into(),
                reason: "All pods are running".into(),
            },
        ];
        jobs.push(running.clone());
        let mut clones = running.clone();
        clones.clones = vec![
            JobLink {
                id: "c&1".into(),
                name: "re-run \"one\"".into(),
            },
            JobLink {
                id: "c2".into(),
                name: String::new(),
            },
        ];
        clones.gpu_hours = Some(JobGpuHours {
            allocated: 32.0,
            used: Some(20.8),
            idle: Some(11.2),
            unmeasured: 0.0,
            efficiency: Some(0.65),
        });
        jobs.push(clones.clone());
        clones.clone_count = 25;
        clones.gpu_hours = None;
        jobs.push(clones);
        let mut queued = job("q1", 100, JobState::Queued, "a&b <pool>", Some(3));
        queued.name = String::new();
        jobs.push(queued);
        let mut never = job("n1", 100, JobState::Cancelled, "hgx-h100", None);
        never.finished_at = Some(t(200));
        jobs.push(never);
        let mut released = job("f1", 100, JobState::Failed, "hgx-h100", None);
        released.admitted_at = Some(t(130));
        released.finished_at = Some(t(4_000));
        jobs.push(released);
        let now = t(9_000);
        for live_now in [None, Some(t(9_090))] {
            for j in &jobs {
                let owner = Owner::new();
                let (by_view, by_string) = owner.with(|| {
                    let live = crate::live::Live {
                        last: RwSignal::new(Default::default()),
                        now: RwSignal::new(live_now),
                        connected: RwSignal::new(false),
                        known: StoredValue::new(0),
                    };
                    provide_context(live);
                    (
                        sync_html(details_view(j.clone(), now, live)).to_html(),
                        details(j, now, live).to_html(),
                    )
                });
                assert_eq!(by_string, by_view, "job {}, live clock {live_now:?}", j.id);
            }
        }
    }

    #[test]
    fn a_page_follows_a_re_run_launched_since_it_was_read_and_not_an_older_one() {
        let shown = Shown {
            pool: "hgx-h100".into(),
            queued: false,
            clones: vec!["named".into()],
            read_at: t(100) + chrono::Duration::nanoseconds(146_379_082),
        };
        // Launched since the page was read (in the same millisecond counts: a stored time
        // has no finer part), and not named: its link is missing.
        let mut same_ms = clone_change("new", "origin-id", 100);
        same_ms.row.as_mut().unwrap().created_at = t(100) + chrono::Duration::milliseconds(146);
        let mut no_row = clone_change("new", "origin-id", 160);
        no_row.row = None;
        for (what, change, page, new) in [
            (
                "launched in the read's millisecond",
                same_ms,
                Some(&shown),
                true,
            ),
            (
                "launched later",
                clone_change("new", "origin-id", 160),
                Some(&shown),
                true,
            ),
            // Named already; older than the page (beyond the 20 it names); another job's
            // clone; a change without a row; a page not read yet.
            (
                "named",
                clone_change("named", "origin-id", 160),
                Some(&shown),
                false,
            ),
            (
                "older",
                clone_change("old", "origin-id", 99),
                Some(&shown),
                false,
            ),
            (
                "another's",
                clone_change("new", "other-id", 160),
                Some(&shown),
                false,
            ),
            ("no row", no_row, Some(&shown), false),
            (
                "not read",
                clone_change("new", "origin-id", 160),
                None,
                false,
            ),
        ] {
            assert_eq!(is_new_clone(&change, "origin-id", page), new, "{what}");
        }
    }

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
