//! Small pieces shared by pages: state badges, error boxes, times with tooltips.

use chrono::{DateTime, Utc};
use leptos::prelude::*;

use crate::error::{ApiError, ErrorCode};
use crate::format;
use crate::model::{Job, JobState};

/// `false` on the server, `true` once this part of the page has hydrated in the browser
/// (effects run only there). Rendered as `data-ready` so tests wait for live controls.
pub fn use_ready() -> RwSignal<bool> {
    let ready = RwSignal::new(false);
    Effect::new(move |_| ready.set(true));
    ready
}

/// Runs `fetch` in the browser whenever what it reads changes, and puts its answer in the
/// returned signal (`None` until the first answer; always `None` on the server). A plain task,
/// not a resource: no Suspense above waits for it, so the page shows at once and this part
/// loads in place. An answer that lands after its part of the page is gone does nothing.
pub fn fetched<T, F, Fut>(fetch: F) -> RwSignal<Option<T>>
where
    T: Send + Sync + 'static,
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = T> + 'static,
{
    let out = RwSignal::new(None::<T>);
    Effect::new(move |_| {
        let fut = fetch();
        #[cfg(feature = "hydrate")]
        leptos::task::spawn_local(async move {
            let v = fut.await;
            out.try_set(Some(v));
        });
        #[cfg(not(feature = "hydrate"))]
        drop(fut);
    });
    out
}

/// A state as a coloured badge that also carries the word (never colour alone). Its markup
/// is written once more as text by [`state_badge_html`]: keep the two alike.
#[component]
pub fn StateBadge(state: JobState) -> impl IntoView {
    let icon = state_icon(state);
    view! {
        <span class=state.badge_class() data-state=state.as_str()>
            <span aria-hidden="true">{icon}</span>
            " "
            {state.as_str()}
        </span>
    }
}

/// The sign a state's badge carries beside its word.
pub fn state_icon(state: JobState) -> &'static str {
    match state {
        JobState::Queued => "◷",
        JobState::Admitted => "◔",
        JobState::Running => "▶",
        JobState::Succeeded => "✓",
        JobState::Failed => "✕",
        JobState::Cancelled => "⊘",
    }
}

/// A state's badge as [`StateBadge`] draws it, written as HTML: for a cell set through
/// `inner_html`, where a component per row of a long table is work on every page.
pub fn state_badge_html(state: JobState) -> String {
    let mut out = String::with_capacity(96);
    state_badge_into(&mut out, state);
    out
}

/// [`state_badge_html`] written into `out`.
pub fn state_badge_into(out: &mut String, state: JobState) {
    for part in [
        r#"<span class=""#,
        state.badge_class(),
        r#"" data-state=""#,
        state.as_str(),
        r#""><span aria-hidden="true">"#,
        state_icon(state),
        "</span> ",
        state.as_str(),
        "</span>",
    ] {
        out.push_str(part);
    }
}

/// "12 min ago" with the absolute time on hover.
#[component]
pub fn Ago(now: DateTime<Utc>, at: DateTime<Utc>) -> impl IntoView {
    view! { <time datetime=at.to_rfc3339() title=format::absolute(at)>{format::ago(now, at)}</time> }
}

/// Where a job stands in a few words: "#2 in queue", "running 3.2 h", "finished 5 min ago".
pub fn progress_text(job: &Job, now: DateTime<Utc>) -> String {
    Progress::of(job).text(now)
}

/// What [`progress_text`] reads of a job: a list row keeps this small copy for its clock
/// instead of the whole job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Progress {
    state: JobState,
    queue_position: Option<u32>,
    created_at: DateTime<Utc>,
    admitted_at: Option<DateTime<Utc>>,
    finished_at: Option<DateTime<Utc>>,
}

impl Progress {
    pub fn of(job: &Job) -> Progress {
        Progress {
            state: job.state,
            queue_position: job.queue_position,
            created_at: job.created_at,
            admitted_at: job.admitted_at,
            finished_at: job.finished_at,
        }
    }

    /// Its place in its pool's queue, while queued.
    pub fn queue_position(self) -> Option<u32> {
        self.queue_position
    }

    /// Whether it has been admitted.
    pub fn admitted(self) -> bool {
        self.admitted_at.is_some()
    }

    /// "#3 in queue · waiting 12 min", "running 3.2 h", "ran 45 min": a Jobs page writes one
    /// a row (pushed, not `format!`ted).
    pub fn text(self, now: DateTime<Utc>) -> String {
        let mut out = String::with_capacity(40);
        let span = match self.state {
            JobState::Queued => {
                match self.queue_position {
                    Some(p) => {
                        out.push('#');
                        format::push_digits(&mut out, u64::from(p));
                        out.push_str(" in queue · waiting");
                    }
                    None => out.push_str("queued · waiting"),
                }
                Some(now - self.created_at)
            }
            JobState::Admitted => {
                out.push_str("admitted · starting");
                None
            }
            JobState::Running => {
                out.push_str("running");
                self.admitted_at.map(|t| now - t)
            }
            _ => match (self.admitted_at, self.finished_at) {
                (Some(a), Some(f)) => {
                    out.push_str("ran");
                    Some(f - a)
                }
                _ => {
                    out.push_str("never ran");
                    None
                }
            },
        };
        if let Some(span) = span {
            out.push(' ');
            format::duration_into(&mut out, span.num_seconds());
        }
        out
    }
}

/// A resource's value inside a `Suspend`, or `None` once the view it belongs to is gone.
///
/// `.await` on a disposed resource panics, and a panic leaves the wasm app dead until a
/// reload (leaving a job page for another job page while its GPU panel loaded). Leptos
/// cancels a Suspend's future when its owner is cleaned up; but when the job view runs again
/// while the next job still loads, the old view stays up with its panel disposed, and the
/// panel's answer landing then wakes a new Suspend on that cleaned owner, where the cancel
/// never fires. This check makes that case render nothing (end2end/tests/race.spec.ts fails
/// without it: "…defined at app/src/pages/job.rs:…, but it has already been disposed").
pub async fn loaded<T, Ser>(resource: Resource<T, Ser>) -> Option<T>
where
    T: Clone + Send + Sync + 'static,
    Ser: 'static,
{
    if resource.is_disposed() {
        return None;
    }
    let value = resource.await;
    built_once().await;
    Some(value)
}

/// On the server, one turn of the executor between a `Suspend`'s data and the view it
/// builds, so that the view is built once per render rather than two or three times; in the
/// browser, nothing. Call it right after the last `.await` on a resource in a `Suspend`
/// whose view is built by a closure (`move || Suspend::new(…)`); [`loaded`] does.
///
/// Leptos 0.8's `Suspense` and `Transition` call such a closure and poll its `Suspend` once
/// without waiting (`dry_resolve`) when they start, and again once their resources are in,
/// to find resources read further down; only then do they call it a last time to render. A
/// `Suspend` whose data were in by that second look built its whole view there only to drop
/// it, and each resource created in that view (a job's GPU panel, its failing rank's lines)
/// was fetched and written into the page once more. Waiting for one turn here makes that
/// look find the `Suspend` not ready, so the view is built for the render alone. Resources
/// created in the view are read in their own `Suspense`, which waits for them as before.
pub async fn built_once() {
    #[cfg(feature = "ssr")]
    {
        let mut turned = false;
        std::future::poll_fn(|cx| {
            if turned {
                std::task::Poll::Ready(())
            } else {
                turned = true;
                cx.waker().wake_by_ref();
                std::task::Poll::Pending
            }
        })
        .await
    }
}

/// On the server, two turns of the executor before a `Suspend` that is not built by a closure
/// (`Suspense` children written as `{Suspend::new(…)}`, as [`crate::app::Authed`]'s) builds its
/// view; in the browser, nothing.
///
/// Such a `Suspend` is one object for the whole render: `Suspense` polls it without waiting
/// when it starts and again once its resources are in (`dry_resolve`, to find resources read
/// further down), and a ready `Suspend` then builds its view there and walks all of it, twice,
/// before the render walks it again. For the sign-in gate that was the whole page (about 15 %
/// of the Jobs page's samples in the page bench). Pending for those two looks, the view is
/// built and walked by the render alone. Were there a third look, it would build the view
/// there, as before: the same page, only slower. What the page reads is read in its own
/// `Suspense`, which waits for it as before.
pub async fn unwalked() {
    built_once().await;
    built_once().await;
}

/// Sets the HTTP status of the page being rendered on the server, so a refused or unknown
/// page is not a 200 to a crawler, a monitor or a script. Nothing in the browser.
pub fn set_page_status(status: u16) {
    #[cfg(feature = "ssr")]
    if let (Some(resp), Ok(code)) = (
        use_context::<leptos_axum::ResponseOptions>(),
        http::StatusCode::from_u16(status),
    ) {
        resp.set_status(code);
    }
    #[cfg(not(feature = "ssr"))]
    let _ = status;
}

/// The error that stands in for a whole page: shown as an [`ErrorBox`], answered with the
/// error's own status (404 for a job that is not there or not the viewer's to see, 403, …).
#[component]
pub fn PageError(err: ApiError) -> impl IntoView {
    set_page_status(err.status());
    view! { <ErrorBox err/> }
}

#[component]
pub fn ErrorBox(err: ApiError) -> impl IntoView {
    let (title, hint) = match err.code {
        ErrorCode::Unauthorized => ("Signed out", Some(("Sign in", "/login"))),
        ErrorCode::NotFound => ("Not found", Some(("Back to jobs", "/jobs"))),
        ErrorCode::Forbidden => ("Not allowed", None),
        ErrorCode::Internal => ("Something went wrong", None),
        _ => ("That did not work", None),
    };
    view! {
        <div class="error-box" role="alert">
            <strong>{title}</strong>
            <p>{err.message.clone()}</p>
            {hint.map(|(label, href)| view! { <a href=href>{label}</a> })}
        </div>
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The badge a row writes as HTML is the one `StateBadge` draws: its class, its state,
    /// its sign (hidden from screen readers) and its word, for every state.
    #[test]
    fn a_rows_badge_is_the_state_badge() {
        for s in JobState::ALL {
            assert_eq!(
                state_badge_html(s),
                format!(
                    r#"<span class="badge state-{0}" data-state="{0}"><span aria-hidden="true">{1}</span> {0}</span>"#,
                    s.as_str(),
                    state_icon(s)
                )
            );
        }
        assert_eq!(
            state_badge_html(JobState::Running),
            r#"<span class="badge state-running" data-state="running"><span aria-hidden="true">▶</span> running</span>"#
        );
    }

    /// A row's progress text in each state, spans in the units `format::duration` picks.
    #[test]
    fn progress_reads_as_the_state_and_its_span() {
        let now = DateTime::from_timestamp(1_790_000_000, 0).expect("in range");
        let ago = |s: i64| now - chrono::Duration::seconds(s);
        let p = |state, queue_position, admitted: Option<i64>, finished: Option<i64>| {
            Progress {
                state,
                queue_position,
                created_at: ago(720),
                admitted_at: admitted.map(ago),
                finished_at: finished.map(ago),
            }
            .text(now)
        };
        use JobState::*;
        assert_eq!(
            p(Queued, Some(3), None, None),
            "#3 in queue · waiting 12 min"
        );
        assert_eq!(p(Queued, None, None, None), "queued · waiting 12 min");
        assert_eq!(p(Admitted, None, Some(5), None), "admitted · starting");
        assert_eq!(
            p(Running, None, Some(3 * 3600 + 720), None),
            "running 3.2 h"
        );
        assert_eq!(p(Running, None, None, None), "running");
        assert_eq!(p(Succeeded, None, Some(3000), Some(300)), "ran 45 min");
        assert_eq!(p(Failed, None, Some(50), Some(5)), "ran 45 s");
        assert_eq!(p(Cancelled, None, None, Some(5)), "never ran");
        // A clock behind the job's times reads as no time, not a negative one.
        assert_eq!(p(Running, None, Some(-30), None), "running 0 s");
    }
}
