//! Reads a page makes on every load, kept in memory while nothing was written (see
//! [`Db::memo`](super::Db::memo)).
//!
//! Every page reads who is signed in, and most read a page of jobs, a job or the pools' rows,
//! from the database on every load: one statement each, answered by the same rows until
//! something is written, and on SQLite each one a hand-off to a connection's thread and back
//! (about a quarter of a small page's CPU, page bench profile of 2026-12-05). Such a read,
//! named by a key that says everything it depends on (its statement and arguments, or the
//! query they are made from), is kept
//! with the write count ([`Db::changes`](super::Db::changes)) it began at and answered again,
//! to any request, while:
//!
//! - no write through this database has finished since it began: a read during which a write
//!   finished is not kept, and a read after a write finds nothing kept before it;
//! - it is younger than the time to live, counted from when the read began: what is written
//!   other than through this process (an operator's SQL, `gantry kube render` seeding the
//!   demo) shows within that, as the cached pages' own staleness (`server.page_cache_ms`,
//!   which sets both; 0 turns both off).
//!
//! The reads that go through it are those of pages and API reads; an action's reply (a
//! cancelled job as it now is) may take one too, after its own write. Deciding what a request
//! may do is not among them: an action (see `service::only_reads`) reads its viewer from the
//! database (`Portal::viewer_by_id_for`), and a check that decides a write reads the
//! database itself.

use std::any::Any;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The most reads kept at once; past it, everything kept is dropped and kept again as read.
/// Most are a viewer (under 1 KB) or a page of jobs, at most [`MAX_ROWS`] rows of about 1 KB;
/// one is every active job (as many as the pools hold): tens of MB at the very most.
pub const MAX_ENTRIES: usize = 256;

/// A page of jobs with more rows than this (`limit` goes up to 200) is read, not kept.
pub const MAX_ROWS: usize = 51;

type Value = Arc<dyn Any + Send + Sync>;

/// What [`Db::memo`](super::Db::memo) keeps; one per database, shared by its clones.
#[derive(Default)]
pub struct ReadMemo {
    ttl_ms: AtomicU64,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// The write count every entry was read at.
    changes: u64,
    entries: HashMap<String, (Instant, Value)>,
}

impl ReadMemo {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn ttl(&self) -> Duration {
        Duration::from_millis(self.ttl_ms.load(Ordering::Relaxed))
    }

    /// Sets how long a read may be answered again; zero turns the memo off and drops what it
    /// holds.
    pub fn set_ttl(&self, ttl: Duration) {
        self.ttl_ms.store(
            ttl.as_millis().min(u64::MAX as u128) as u64,
            Ordering::Relaxed,
        );
        if ttl.is_zero() {
            self.lock().entries.clear();
        }
    }

    /// The value kept under `key`, if it was read at write count `changes` within the time to
    /// live and is a `T`.
    pub(super) fn get<T: Clone + 'static>(&self, key: &str, changes: u64) -> Option<T> {
        let ttl = self.ttl();
        let found = {
            let mut inner = self.lock();
            if changes < inner.changes {
                // A caller that took the count before a write that another has seen.
                return None;
            }
            if inner.changes != changes {
                inner.entries.clear();
                inner.changes = changes;
            }
            inner
                .entries
                .get(key)
                .filter(|(began, _)| began.elapsed() < ttl)
                .map(|(_, v)| v.clone())
        };
        found.and_then(|v| v.downcast_ref::<T>().cloned())
    }

    /// Keeps `value`, read under `key` from write count `began` (at `started`) to `ended`: only
    /// if no write finished in between and none has since.
    pub(super) fn put<T: Send + Sync + 'static>(
        &self,
        key: String,
        value: T,
        started: Instant,
        (began, ended): (u64, u64),
    ) {
        if began != ended {
            return;
        }
        let mut inner = self.lock();
        if inner.changes != began {
            if inner.changes > began {
                return;
            }
            inner.entries.clear();
            inner.changes = began;
        }
        if inner.entries.len() >= MAX_ENTRIES && !inner.entries.contains_key(&key) {
            inner.entries.clear();
        }
        inner.entries.insert(key, (started, Arc::new(value)));
    }
}
