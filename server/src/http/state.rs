//! What every handler can reach (`AppState`), and the live streams each user holds.

use std::sync::Arc;

use axum::extract::FromRef;
use leptos::config::LeptosOptions;

use crate::config::Config;
use crate::http::session_store::DbSessionStore;
use crate::service::Portal;

/// Everything a handler can reach, behind one `Arc`: axum clones the state for every
/// extractor and stateful layer of every request (several per page), and one count is
/// cheaper to copy and drop than one per part.
#[derive(Clone)]
pub struct AppState(Arc<AppParts>);

impl AppState {
    pub fn new(parts: AppParts) -> AppState {
        AppState(Arc::new(parts))
    }
}

impl std::ops::Deref for AppState {
    type Target = AppParts;

    fn deref(&self) -> &AppParts {
        &self.0
    }
}

/// What an [`AppState`] holds.
pub struct AppParts {
    pub portal: Arc<Portal>,
    pub config: Arc<Config>,
    /// Single sign-on, when `[auth.oidc]` is configured.
    pub oidc: Option<Arc<crate::http::oidc::Oidc>>,
    pub leptos_options: Arc<LeptosOptions>,
    /// The session store, to ask again whether a long-lived request's session still holds.
    pub sessions: DbSessionStore,
    /// The live streams each user holds (`server.max_streams_per_user`).
    pub streams: Arc<StreamSlots>,
    /// Compressed copies of the site's hashed files.
    pub assets: Arc<crate::http::assets::AssetCache>,
    /// Pages rendered for a session, served again to it while nothing changed.
    pub pages: Arc<crate::http::page_cache::PageCache>,
}

impl FromRef<AppState> for LeptosOptions {
    fn from_ref(s: &AppState) -> Self {
        (*s.leptos_options).clone()
    }
}

/// How many live streams each user holds, so one user cannot hold the server's connections
/// (`server.max_streams_per_user`).
#[derive(Default)]
pub struct StreamSlots(std::sync::Mutex<std::collections::HashMap<String, usize>>);

/// One held stream; dropping it frees the slot.
pub struct StreamSlot {
    slots: std::sync::Arc<StreamSlots>,
    user: String,
}

impl StreamSlots {
    /// A slot for `user`, or `None` when they already hold `max`.
    pub fn take(self: &std::sync::Arc<Self>, user: &str, max: usize) -> Option<StreamSlot> {
        let mut held = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let n = held.entry(user.to_string()).or_default();
        if *n >= max {
            return None;
        }
        *n += 1;
        Some(StreamSlot {
            slots: self.clone(),
            user: user.to_string(),
        })
    }

    pub fn held(&self, user: &str) -> usize {
        let held = self.0.lock().unwrap_or_else(|e| e.into_inner());
        held.get(user).copied().unwrap_or(0)
    }
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        let mut held = self.slots.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = held.get_mut(&self.user) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                held.remove(&self.user);
            }
        }
    }
}
