//! Live updates: one `EventSource` on `/api/v1/events` per page load. A change of a job the
//! viewer may see carries its list row, which the Jobs list patches itself with
//! (`pages::jobs_live`); other pages refetch in place only for the changes that concern them
//! ([`Live::throttled`]: a job page for its own job, or its pool's queue while it waits;
//! summaries at most every few seconds); the clock ticks move times on the page and refetch
//! nothing but what draws the clock.

use chrono::{DateTime, Utc};
use leptos::prelude::*;

use crate::model::LiveEvent;

/// One change the stream told of, as pages filter them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Change {
    /// Counts the changes seen by this page load.
    pub seq: u64,
    /// The job, when the viewer may see it.
    pub job_id: String,
    pub user: String,
    /// The pool whose queue may have moved.
    pub pool: String,
    /// A notification was written for the viewer.
    pub notify: bool,
    /// The job's list row, when the viewer may see it: lists patch themselves with it.
    pub row: Option<Box<crate::model::Job>>,
    /// The state the job changed to, when the viewer may see it. The row is read once, when
    /// a stream first asks for it, so it may be newer: a change sent again to a stream that
    /// opened later (`since`) carries the row as it is by then.
    pub state: Option<crate::model::JobState>,
    /// When it happened (the cluster clock).
    pub at: DateTime<Utc>,
    /// Its number among the server's changes (`LiveEvent::Job::seq`); 0 when it has none
    /// (this page's own pokes, missed changes).
    pub server_seq: u64,
}

impl Change {
    /// Changes were missed (or the page asked): everything may have moved.
    pub fn is_everything(&self) -> bool {
        self.job_id.is_empty() && self.pool.is_empty()
    }
}

#[derive(Clone, Copy)]
pub struct Live {
    /// The last change, for pages that refetch only for what concerns them.
    pub last: RwSignal<Change>,
    /// The cluster clock from the last event or tick.
    pub now: RwSignal<Option<DateTime<Utc>>>,
    /// Whether the stream is connected (shown as a small "live" dot).
    pub connected: RwSignal<bool>,
    /// The server's changes up to this number are in what the page was read with or were
    /// told of since; one numbered higher than the next means some were missed.
    pub known: StoredValue<u64>,
}

impl Live {
    /// The freshest known cluster time: the stream's, else the page's own.
    pub fn now_or(&self, page_now: DateTime<Utc>) -> DateTime<Utc> {
        match self.now.get() {
            Some(t) if t > page_now => t,
            _ => page_now,
        }
    }

    /// Tells this page's parts that `job_id` changed (after this page changed it itself).
    pub fn poke(&self, job_id: &str) {
        let seq = self.last.with_untracked(|c| c.seq) + 1;
        self.last.set(Change {
            seq,
            job_id: job_id.to_string(),
            ..Default::default()
        });
    }

    /// A counter for a page's resources to key on: bumped when a change for which `wanted`
    /// answers true arrives (at once when none was in the last `every`; else once at the end
    /// of it, for all the changes in between). On the server it never moves.
    pub fn throttled(
        &self,
        every: std::time::Duration,
        wanted: impl Fn(&Change) -> bool + Send + Sync + 'static,
    ) -> RwSignal<u64> {
        let last = self.last;
        throttle(every, move || {
            last.with(|c| c.seq > 0 && (c.is_everything() || wanted(c)))
        })
    }

    /// A counter bumped when the cluster clock enters a new minute (readings that follow the
    /// clock, such as GPU utilization), at most once per `every` of real time.
    pub fn clock(&self, every: std::time::Duration) -> RwSignal<u64> {
        let now = self.now;
        let seen = StoredValue::new(None::<i64>);
        throttle(every, move || {
            let minute = now.get().map(|t| t.timestamp() / 60);
            let moved =
                minute.is_some() && seen.get_value().is_some() && minute != seen.get_value();
            if minute.is_some() {
                seen.set_value(minute);
            }
            moved
        })
    }
}

/// A counter bumped when `hit` (run in an effect, so what it reads is tracked) answers true:
/// at once when the last bump was at least `every` ago, else once when `every` has passed
/// since it, however many hits came in between.
pub fn throttle(
    every: std::time::Duration,
    hit: impl Fn() -> bool + Send + Sync + 'static,
) -> RwSignal<u64> {
    let out = RwSignal::new(0u64);
    let pending = StoredValue::new(false);
    // Milliseconds since the epoch of the last bump.
    let last_bump = StoredValue::new(f64::MIN);
    Effect::new(move |_| {
        if !hit() || pending.get_value() {
            return;
        }
        #[cfg(feature = "hydrate")]
        {
            let now = js_sys::Date::now();
            let wait = last_bump.get_value() + every.as_millis() as f64 - now;
            if wait <= 0.0 {
                last_bump.set_value(now);
                out.update(|v| *v += 1);
            } else {
                pending.set_value(true);
                leptos::prelude::set_timeout(
                    move || {
                        pending.try_set_value(false);
                        last_bump.try_set_value(js_sys::Date::now());
                        out.try_update(|v| *v += 1);
                    },
                    std::time::Duration::from_millis(wait.ceil() as u64),
                );
            }
        }
        #[cfg(not(feature = "hydrate"))]
        let _ = (every, last_bump);
    });
    out
}

/// The live state for the whole app; the stream follows whoever is signed in.
pub fn provide_live(viewer: crate::app::ViewerResource) -> Live {
    // How many changes the server had sent as it began this page: what the page reads holds
    // them (read on the server, before the page's data; sent with the page to the browser).
    let rendered_at = leptos::prelude::SharedValue::new(|| {
        #[cfg(feature = "ssr")]
        let seq = use_context::<crate::backend::SharedBackend>().map_or(0, |b| b.live_seq());
        #[cfg(not(feature = "ssr"))]
        let seq = 0;
        seq
    })
    .into_inner();
    let live = Live {
        last: RwSignal::new(Change::default()),
        now: RwSignal::new(None),
        connected: RwSignal::new(false),
        known: StoredValue::new(rendered_at),
    };
    provide_context(live);
    #[cfg(feature = "hydrate")]
    connect(live, viewer);
    #[cfg(not(feature = "hydrate"))]
    let _ = viewer;
    live
}

pub fn use_live() -> Live {
    expect_context::<Live>()
}

/// Whether changes were missed, told of the server's change `told` (or, from a stream's
/// first event, the count the stream starts from) while the page has all up to `known`; and
/// the new `known`. A change numbered 0 says nothing of the count. A stream that starts
/// below the page's count is another process's (a server restarted with its clock set
/// back): the page reads again and takes that count, or it would take every new change for
/// one it holds.
pub fn missed(known: u64, told: u64, first: bool) -> (bool, u64) {
    if told == 0 {
        return (false, known);
    }
    if first {
        return (told != known, told);
    }
    (told > known + 1, known.max(told))
}

#[cfg_attr(not(feature = "hydrate"), allow(dead_code))]
fn apply(live: Live, event: LiveEvent) {
    let seq = live.last.try_with_untracked(|c| c.seq).unwrap_or(0) + 1;
    // Changes were missed (between the page's read and the stream's opening, or while the
    // stream was down and reconnecting): a change for everything, so pages read again.
    let everything = |now| {
        live.last.try_set(Change {
            seq,
            at: now,
            ..Default::default()
        });
    };
    let check = |told, first| {
        let known = live.known.try_get_value().unwrap_or(0);
        let (missed, known) = missed(known, told, first);
        live.known.try_set_value(known);
        missed
    };
    match event {
        LiveEvent::Job {
            now,
            job_id,
            user,
            pool,
            notify,
            row,
            state,
            seq: server_seq,
        } => {
            live.now.try_set(Some(now));
            if check(server_seq, false) {
                return everything(now);
            }
            live.last.try_set(Change {
                seq,
                job_id,
                user,
                pool,
                notify,
                row,
                state,
                at: now,
                server_seq,
            });
        }
        LiveEvent::Tick { now, seq: opened } => {
            live.now.try_set(Some(now));
            if let Some(opened) = opened {
                if check(opened, true) {
                    everything(now);
                }
            }
        }
    }
}

#[cfg(feature = "hydrate")]
fn connect(live: Live, viewer: crate::app::ViewerResource) {
    use send_wrapper::SendWrapper;
    use wasm_bindgen::{closure::Closure, JsCast};

    Effect::new(move |_| {
        // Signed out (the sign-in page, a session that expired) there is nothing to follow,
        // and the stream would only answer 401, an error in the console.
        if !matches!(viewer.get(), Some(Ok(Some(_)))) {
            return;
        }
        // From the count the page was read with: the server sends first what changed since
        // (when it still keeps it), so the page need not read everything again. Reconnecting,
        // the browser sends the last change's number itself (`Last-Event-ID`).
        let url = match live.known.try_get_value().unwrap_or(0) {
            0 => "/api/v1/events".to_string(),
            known => format!("/api/v1/events?since={known}"),
        };
        let Ok(source) = web_sys::EventSource::new(&url) else {
            return;
        };
        let on_message =
            Closure::<dyn FnMut(web_sys::MessageEvent)>::new(move |ev: web_sys::MessageEvent| {
                if let Some(text) = ev.data().as_string() {
                    if let Ok(event) = serde_json::from_str::<LiveEvent>(&text) {
                        apply(live, event);
                    }
                }
            });
        // `try_`: the stream's callbacks come from the browser, whenever; should the app's
        // owner ever be gone by then, they do nothing rather than panic.
        let on_open = Closure::<dyn FnMut()>::new(move || {
            live.connected.try_set(true);
        });
        let on_error = Closure::<dyn FnMut()>::new(move || {
            live.connected.try_set(false);
        });
        // The server ended the stream (signed out, the token revoked, the session past its
        // lifetime): reconnecting would only answer 401, an error in the console.
        let closer = source.clone();
        let on_end = Closure::<dyn FnMut()>::new(move || {
            closer.close();
            live.connected.try_set(false);
        });
        source.set_onmessage(Some(on_message.as_ref().unchecked_ref()));
        source.set_onopen(Some(on_open.as_ref().unchecked_ref()));
        source.set_onerror(Some(on_error.as_ref().unchecked_ref()));
        let _ = source.add_event_listener_with_callback("end", on_end.as_ref().unchecked_ref());
        let held = SendWrapper::new((source, on_message, on_open, on_error, on_end));
        on_cleanup(move || {
            let (source, ..) = held.take();
            source.close();
        });
    });
}

#[cfg(test)]
mod tests {
    use super::missed;

    #[test]
    fn missed_changes_are_told_by_their_numbers() {
        // In order: none missed.
        assert_eq!(missed(4, 5, false), (false, 5));
        // One skipped (the stream fell behind, or the number came after a reconnect).
        assert_eq!(missed(4, 6, false), (true, 6));
        // An older one told late (sent before the page's read): none missed, `known` stays.
        assert_eq!(missed(6, 5, false), (false, 6));
        // No number (the server's own "missed some" event): says nothing of the count.
        assert_eq!(missed(6, 0, false), (false, 6));
        // A stream that opens with nothing sent since the page was read.
        assert_eq!(missed(6, 6, true), (false, 6));
        // One that starts below the page's count: another process's numbers.
        assert_eq!(missed(6, 3, true), (true, 3));
        // One sent between the page's read and the stream's opening: it will not come.
        assert_eq!(missed(6, 7, true), (true, 7));
    }
}
