//! Live updates: one `EventSource` on `/api/v1/events` per page load; pages key their
//! resources on `Live::version` so they refetch in place when a job moves.

use chrono::{DateTime, Utc};
use leptos::prelude::*;

use crate::model::LiveEvent;

#[derive(Clone, Copy)]
pub struct Live {
    /// Bumped on every job change the viewer may see.
    pub version: RwSignal<u64>,
    /// The cluster clock from the last event or tick.
    pub now: RwSignal<Option<DateTime<Utc>>>,
    /// Whether the stream is connected (shown as a small "live" dot).
    pub connected: RwSignal<bool>,
}

impl Live {
    /// The freshest known cluster time: the stream's, else the page's own.
    pub fn now_or(&self, page_now: DateTime<Utc>) -> DateTime<Utc> {
        match self.now.get() {
            Some(t) if t > page_now => t,
            _ => page_now,
        }
    }
}

/// The live state for the whole app; the stream follows whoever is signed in.
pub fn provide_live(viewer: crate::app::ViewerResource) -> Live {
    let live = Live {
        version: RwSignal::new(0),
        now: RwSignal::new(None),
        connected: RwSignal::new(false),
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

#[cfg_attr(not(feature = "hydrate"), allow(dead_code))]
fn apply(live: Live, event: LiveEvent) {
    match event {
        LiveEvent::Job { now, .. } => {
            live.now.try_set(Some(now));
            live.version.try_update(|v| *v += 1);
        }
        LiveEvent::Tick { now } => {
            live.now.try_set(Some(now));
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
        let Ok(source) = web_sys::EventSource::new("/api/v1/events") else {
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
