//! The job page's actions: Re-run and Clone (with the page's re-run action they share) and
//! Cancel (also used by the Jobs list's rows).

use leptos::prelude::*;

use crate::error::ApiError;
use crate::format;
use crate::functions::cancel_job;
use crate::live::use_live;
use crate::model::{Job, JobState};

/// The page's re-run, shared with its buttons.
#[derive(Clone, Copy)]
pub(crate) struct RerunAction {
    pub(crate) action: Action<(String, bool, String), Result<Job, ApiError>>,
    /// The idempotency key of this page's re-runs: one per visit of the page, so that a
    /// second click, or a click again after an answer that was lost (the page may have drawn
    /// its buttons anew meanwhile: the new job changed it), finds the job made instead of
    /// making another. After a re-run the browser goes to the new job's page.
    pub(crate) key: StoredValue<String>,
    /// The job whose re-run confirmation is open. Kept with the page, not the buttons: a live
    /// change draws the page's body again (the re-run itself does, arriving as a new re-run
    /// of the job), and an open confirmation must stay open through that; named by its job,
    /// so that another job drawn on the same page does not find it open.
    pub(crate) confirming: RwSignal<Option<String>>,
}

/// Re-run (one click and a confirmation: the same template version, parameters, GPUs, pool,
/// priority and max runtime) and Clone (the Launch form filled with the same values). A job
/// on an older template version says so and offers the current one; a deprecated template
/// takes no re-runs.
#[component]
pub fn RerunButtons(job: Job) -> impl IntoView {
    let ready = crate::components::use_ready();
    let RerunAction {
        action: rerun,
        key,
        confirming,
    } = expect_context::<RerunAction>();
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
    let (open, opener) = confirm_opener(confirming, &id, "button", "rerun", "Re-run…");
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
            <Show when=open fallback=opener>
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
                                rerun.dispatch((id.clone(), false, key.get_value()));
                            }
                        }
                    >
                        {if current.is_some() { "Re-run as it was" } else { "Re-run" }}
                    </button>
                    {current.map(|c| {
                        let id = id.clone();
                        view! {
                            <button class="button" data-testid="rerun-current"
                                disabled=move || rerun.pending().get()
                                on:click=move |_| {
                                    rerun.dispatch((id.clone(), true, key.get_value()));
                                }>{format!("Re-run on v{c}")}</button>
                        }
                    })}
                    <button class="button" on:click=move |_| confirming.set(None)>"Keep"</button>
                </span>
            </Show>
            <a class="button" data-testid="clone" href=clone_href>"Clone…"</a>
            {move || error().map(|e| view! { <span class="field-error">{e.message}</span> })}
        </span>
    }
    .into_any()
}

/// For a page's confirmation named by its job (`confirming`): whether it is open for job `id`,
/// and the button that opens it (`class`, `data-testid` and `label`), shown while it is not.
fn confirm_opener(
    confirming: RwSignal<Option<String>>,
    id: &str,
    class: &'static str,
    testid: &'static str,
    label: &'static str,
) -> (
    impl Fn() -> bool + Send + Sync + 'static,
    impl Fn() -> AnyView + Send + Sync + 'static,
) {
    let open = {
        let id = id.to_string();
        move || confirming.with(|c| c.as_deref() == Some(id.as_str()))
    };
    let id = id.to_string();
    let opener = move || {
        let id = id.clone();
        view! {
            <button class=class data-testid=testid on:click=move |_| confirming.set(Some(id.clone()))>
                {label}
            </button>
        }
        .into_any()
    };
    (open, opener)
}

/// What the Cancel button names and cancels: a list row keeps this instead of the whole job.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct CancelAsk {
    id: String,
    name: String,
    state: JobState,
    gpus: u32,
    pool: String,
}

impl CancelAsk {
    /// Set only when the viewer may cancel the job: nothing reactive is made for the others
    /// (most rows of a Jobs page have ended, and each action, effect and signal is work on
    /// every page rendered).
    pub(crate) fn of(job: &Job) -> Option<CancelAsk> {
        job.can_cancel.then(|| CancelAsk {
            id: job.id.clone(),
            name: job.name.clone(),
            state: job.state,
            gpus: job.gpus,
            pool: job.pool.clone(),
        })
    }
}

/// A page's Cancel: whose confirmation is open, the cancel on its way and the last error, each
/// named by its job. Kept with the page, not with the buttons: a live change draws a job page's
/// body again, and a Jobs row again when what it shows moves (a queued job's place, a job that
/// starts), and an open confirmation, a cancel in flight and its error must outlive that. One
/// confirmation is open at a time, and one cancel is on its way at a time (an action keeps
/// only its latest answer): "Cancel job" waits while another job's cancel is answered.
#[derive(Clone, Copy)]
pub(crate) struct CancelAction {
    confirming: RwSignal<Option<String>>,
    action: Action<String, (String, Result<Job, ApiError>)>,
    error: RwSignal<Option<(String, ApiError)>>,
}

impl CancelAction {
    /// The page's, for its Cancel buttons (`cancel_button`).
    pub(crate) fn provide() -> CancelAction {
        let live = use_live();
        let confirming = RwSignal::new(None::<String>);
        let error = RwSignal::new(None::<(String, ApiError)>);
        let action = Action::new(move |id: &String| {
            let id = id.clone();
            async move { (id.clone(), cancel_job(id).await) }
        });
        Effect::new(move |_| match action.value().get() {
            Some((id, Ok(_))) => {
                if confirming.get_untracked().as_ref() == Some(&id) {
                    confirming.set(None);
                }
                live.poke(&id);
            }
            Some((id, Err(e))) => error.set(Some((id, e))),
            None => {}
        });
        let c = CancelAction {
            confirming,
            action,
            error,
        };
        provide_context(c);
        c
    }

    /// Closes any open confirmation and forgets errors (the page shows another job).
    pub(crate) fn reset(self) {
        self.confirming.set(None);
        self.error.set(None);
    }
}

/// Cancel with one confirmation that names the job and its GPUs. Its state is the page's
/// [`CancelAction`] (one of its own where the page has none).
pub(crate) fn cancel_button(job: &CancelAsk) -> AnyView {
    let ready = crate::components::use_ready();
    let page = use_context::<CancelAction>().unwrap_or_else(CancelAction::provide);
    let CancelAction {
        confirming,
        action: cancel,
        error: errors,
    } = page;
    let (open, opener) = confirm_opener(
        confirming,
        &job.id,
        "button danger-outline",
        "cancel",
        "Cancel…",
    );
    let error = {
        let id = job.id.clone();
        move || {
            errors.with(|e| {
                e.as_ref()
                    .filter(|(of, _)| *of == id)
                    .map(|(_, e)| e.message.clone())
            })
        }
    };
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
            <Show when=open fallback=opener>
                <span class="confirm" role="alertdialog" aria-label="Confirm cancel">
                    <span>{question.clone()}</span>
                    <button
                        class="button danger"
                        data-testid="confirm-cancel"
                        disabled=move || cancel.pending().get()
                        on:click={
                            let id = id.clone();
                            move |_| {
                                errors.update(|e| {
                                    if e.as_ref().is_some_and(|(of, _)| *of == id) {
                                        *e = None;
                                    }
                                });
                                cancel.dispatch(id.clone());
                            }
                        }
                    >
                        "Cancel job"
                    </button>
                    <button class="button" on:click=move |_| confirming.set(None)>
                        "Keep it"
                    </button>
                </span>
            </Show>
            {move || error().map(|m| view! { <span class="field-error">{m}</span> })}
        </span>
    }
    .into_any()
}
