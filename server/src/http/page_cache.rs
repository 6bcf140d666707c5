//! Pages rendered for a session, served again to that same session while nothing changed.
//!
//! A page is a function of who asks, the address, what is stored, what the cluster says and
//! the clock. Rendering it is most of what a page request costs (Leptos builds the views and
//! serializes the resources for hydration), so the same page asked for again by the same
//! session, with no write to the database finished since it was rendered, is answered with the
//! bytes rendered then, for at most `server.page_cache_ms` (the cluster's state and the clock
//! are not in the database: that is how stale they may get, as with the pages' own polling).
//!
//! - The key is the session, its user and the path with its query: one session's page is
//!   never served to another, even of the same user.
//! - A write (any commit or writing statement, see [`crate::db::Db::changes`]) and any request
//!   that is not a GET (a cancel, a quota edit, an action on the cluster) make every entry
//!   stale: a user always sees their own change on the next load.
//! - Each answer gets a fresh CSP nonce: the cached bytes are split where the nonce was.
//! - Only a signed-in 200 `text/html` page without `Set-Cookie` is kept, up to
//!   [`MAX_BYTES`] in all.
//! - A page that could be kept says whether it was (`x-page-cache: hit` or `miss`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::response::Response;
use http::{header, HeaderMap, HeaderValue, Method, StatusCode};

use crate::http::state::AppState;

/// All cached pages together stay under this many bytes.
pub const MAX_BYTES: usize = 32 << 20;
/// Says whether a page was served again (`hit`) or rendered (`miss`).
pub const HEADER: &str = "x-page-cache";
/// A page bigger than this is not kept.
const MAX_PAGE_BYTES: usize = 4 << 20;

#[derive(PartialEq, Eq, Hash)]
struct Key {
    session: i128,
    user: String,
    uri: String,
}

struct Entry {
    /// What [`PageCache::generation`] was when the render began.
    generation: (u64, u64),
    at: Instant,
    headers: HeaderMap,
    /// The body, split where the nonce stood.
    pieces: Vec<Bytes>,
    nonce: String,
    len: usize,
}

/// The cache, one per server (see the module's documentation).
pub struct PageCache {
    ttl_ms: AtomicU64,
    /// Requests other than GET seen so far (with the database's writes, the generation).
    actions: AtomicU64,
    entries: Mutex<Entries>,
    hits: AtomicU64,
    misses: AtomicU64,
}

#[derive(Default)]
struct Entries {
    map: HashMap<Key, Entry>,
    bytes: usize,
    /// When entries that may no longer be served were last dropped.
    swept: Option<Instant>,
}

/// How often the cache answered, for the page benchmark and the tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheStats {
    pub hits: u64,
    pub misses: u64,
}

impl PageCache {
    pub fn new(ttl: Duration) -> PageCache {
        PageCache {
            ttl_ms: AtomicU64::new(ttl.as_millis().try_into().unwrap_or(u64::MAX)),
            actions: AtomicU64::new(0),
            entries: Mutex::default(),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    /// How long a page may be served again; zero turns the cache off (the page benchmark
    /// measures both).
    pub fn set_ttl(&self, ttl: Duration) {
        self.ttl_ms.store(
            ttl.as_millis().try_into().unwrap_or(u64::MAX),
            Ordering::SeqCst,
        );
        let mut entries = self.lock();
        entries.map.clear();
        entries.bytes = 0;
    }

    fn ttl(&self) -> Duration {
        Duration::from_millis(self.ttl_ms.load(Ordering::SeqCst))
    }

    pub fn stats(&self) -> CacheStats {
        CacheStats {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Entries> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn generation(&self, db_changes: u64) -> (u64, u64) {
        (db_changes, self.actions.load(Ordering::SeqCst))
    }

    fn get(&self, key: &Key, generation: (u64, u64), now: Instant) -> Option<Response> {
        let ttl = self.ttl();
        let entries = self.lock();
        let e = entries.map.get(key)?;
        if e.generation != generation || now.saturating_duration_since(e.at) >= ttl {
            return None;
        }
        let (pieces, mut headers, old) = (e.pieces.clone(), e.headers.clone(), e.nonce.clone());
        drop(entries);
        let nonce = new_nonce();
        let len = pieces.iter().map(Bytes::len).sum::<usize>() + pieces.len() * nonce.len();
        let mut body = Vec::with_capacity(len);
        for (i, piece) in pieces.iter().enumerate() {
            if i > 0 {
                body.extend_from_slice(nonce.as_bytes());
            }
            body.extend_from_slice(piece);
        }
        if let Some(csp) = headers
            .get(header::CONTENT_SECURITY_POLICY)
            .and_then(|v| v.to_str().ok())
            .map(|v| v.replace(&format!("'nonce-{old}'"), &format!("'nonce-{nonce}'")))
            .and_then(|v| HeaderValue::from_str(&v).ok())
        {
            headers.insert(header::CONTENT_SECURITY_POLICY, csp);
        }
        headers.insert(HEADER, HeaderValue::from_static("hit"));
        let mut res = Response::new(Body::from(body));
        *res.headers_mut() = headers;
        Some(res)
    }

    /// Keeps `entry`. Entries that may no longer be served (older, or of another generation
    /// than `current`) are dropped once a `ttl`, and whenever the cache is full: a signed-out
    /// session's pages do not stay in memory.
    fn put(&self, key: Key, entry: Entry, current: (u64, u64)) {
        let mut entries = self.lock();
        let ttl = self.ttl();
        let now = Instant::now();
        let due = entries
            .swept
            .is_none_or(|t| now.saturating_duration_since(t) >= ttl);
        if due || entries.bytes + entry.len > MAX_BYTES {
            entries.swept = Some(now);
            let Entries { map, bytes, .. } = &mut *entries;
            map.retain(|_, e| {
                let keep = e.generation == current && now.saturating_duration_since(e.at) < ttl;
                if !keep {
                    *bytes -= e.len;
                }
                keep
            });
            if entries.bytes + entry.len > MAX_BYTES {
                entries.map.clear();
                entries.bytes = 0;
            }
        }
        entries.bytes += entry.len;
        if let Some(old) = entries.map.insert(key, entry) {
            entries.bytes -= old.len;
        }
    }
}

/// `page` cut where `nonce` stands (`None` if it is not UTF-8).
fn split_at(page: &Bytes, nonce: &str) -> Option<Vec<Bytes>> {
    let text = std::str::from_utf8(page).ok()?;
    let mut pieces = Vec::new();
    let mut from = 0;
    for (at, _) in text.match_indices(nonce) {
        pieces.push(page.slice(from..at));
        from = at + nonce.len();
    }
    pieces.push(page.slice(from..));
    Some(pieces)
}

/// A nonce as Leptos makes one: 16 random bytes, URL-safe base64 without padding.
fn new_nonce() -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(rand::random::<[u8; 16]>())
}

/// Paths that are never pages: the API and server functions, sign-in, the site's files.
fn may_be_page(method: &Method, path: &str) -> bool {
    method == Method::GET
        && !path.starts_with("/api/")
        && !path.starts_with("/auth/")
        && !path.starts_with("/pkg/")
        && !path
            .rsplit('/')
            .next()
            .is_some_and(|last| last.contains('.'))
}

/// Middleware (inside the session layer): answers a page from the cache when it may, and
/// keeps a page it renders.
pub async fn page_cache(
    State(state): State<AppState>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let cache = &state.pages;
    if !may_be_page(req.method(), req.uri().path()) {
        let action = !crate::service::only_reads(req.method(), req.uri().path());
        let res = next.run(req).await;
        if action {
            // After the action is done: a page rendered while it ran is stale.
            cache.actions.fetch_add(1, Ordering::SeqCst);
        }
        return res;
    }
    if cache.ttl().is_zero() {
        return next.run(req).await;
    }
    // Taken before anything is read, the session included; an entry's age counts from here.
    let started = Instant::now();
    let generation = cache.generation(state.portal.data_changes());
    let (parts, body) = req.into_parts();
    // The session's user, its lifetime checked. Not the user's record: that changes only by a
    // write, which makes every entry stale, so a hit reads only the session.
    let session = parts.extensions.get::<tower_sessions::Session>();
    let user = match session {
        Some(s) => crate::service::session::session_user(s, state.portal.session_limits()).await,
        None => Ok(None),
    };
    let (Ok(Some(user)), Some(session), Some(uri)) = (
        user,
        session.and_then(|s| s.id()),
        parts.uri.path_and_query().map(|p| p.as_str().to_string()),
    ) else {
        return next
            .run(axum::extract::Request::from_parts(parts, body))
            .await;
    };
    let key = Key {
        session: session.0,
        user,
        uri,
    };
    if let Some(res) = cache.get(&key, generation, Instant::now()) {
        cache.hits.fetch_add(1, Ordering::Relaxed);
        return res;
    }
    cache.misses.fetch_add(1, Ordering::Relaxed);
    let res = next
        .run(axum::extract::Request::from_parts(parts, body))
        .await;
    keep(cache, key, (generation, started), res).await
}

/// Keeps a copy of `res` if it is a page that may be served again, and answers it.
async fn keep(
    cache: &PageCache,
    key: Key,
    (generation, started): ((u64, u64), Instant),
    res: Response,
) -> Response {
    let headers = res.headers();
    let html = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/html"));
    let nonce = headers
        .get(header::CONTENT_SECURITY_POLICY)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split("'nonce-").nth(1))
        .and_then(|v| v.split('\'').next())
        .filter(|n| !n.is_empty())
        .map(str::to_string);
    let (Some(nonce), true) = (
        nonce,
        res.status() == StatusCode::OK && html && !headers.contains_key(header::SET_COOKIE),
    ) else {
        return res;
    };
    let (mut parts, body) = res.into_parts();
    let bytes = match axum::body::to_bytes(body, usize::MAX).await {
        Ok(b) => b,
        Err(e) => {
            tracing::error!(error = %e, "a page's body failed while it was being sent");
            return Response::builder()
                .status(StatusCode::INTERNAL_SERVER_ERROR)
                .body(Body::empty())
                .unwrap_or_default();
        }
    };
    parts.headers.remove(header::CONTENT_LENGTH);
    if bytes.len() <= MAX_PAGE_BYTES {
        if let Some(pieces) = split_at(&bytes, &nonce) {
            let entry = Entry {
                generation,
                at: started,
                headers: parts.headers.clone(),
                pieces,
                nonce,
                len: bytes.len(),
            };
            cache.put(key, entry, generation);
            parts
                .headers
                .insert(HEADER, HeaderValue::from_static("miss"));
        }
    }
    Response::from_parts(parts, Body::from(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(generation: (u64, u64), at: Instant, body: &str, nonce: &str) -> Entry {
        let pieces = split_at(&Bytes::from(body.to_string()), nonce).unwrap();
        let mut headers = HeaderMap::new();
        headers.insert(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_str(&format!("script-src 'self' 'nonce-{nonce}'")).unwrap(),
        );
        Entry {
            generation,
            at,
            headers,
            pieces,
            nonce: nonce.into(),
            len: body.len(),
        }
    }

    fn key(session: i128, uri: &str) -> Key {
        Key {
            session,
            user: "alice".into(),
            uri: uri.into(),
        }
    }

    async fn text(res: Response) -> (String, String) {
        let csp = res.headers()[header::CONTENT_SECURITY_POLICY]
            .to_str()
            .unwrap()
            .to_string();
        let body = axum::body::to_bytes(res.into_body(), usize::MAX)
            .await
            .unwrap();
        (String::from_utf8(body.to_vec()).unwrap(), csp)
    }

    #[tokio::test]
    async fn an_entry_answers_its_own_key_with_a_fresh_nonce_until_a_change_or_its_age() {
        let cache = PageCache::new(Duration::from_millis(1000));
        let t0 = Instant::now();
        let body = r#"<script nonce="N0nce==">a</script><script nonce="N0nce==">b</script>"#;
        cache.put(key(1, "/jobs"), entry((5, 0), t0, body, "N0nce=="), (5, 0));

        let (html, csp) = text(cache.get(&key(1, "/jobs"), (5, 0), t0).unwrap()).await;
        assert!(!html.contains("N0nce=="), "{html}");
        let fresh = csp.split("'nonce-").nth(1).unwrap().trim_end_matches('\'');
        assert_eq!(fresh.len(), 22, "{csp}");
        assert!(
            fresh
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'),
            "the same alphabet as Leptos' own nonces: {csp}"
        );
        assert_eq!(
            html,
            body.replace("N0nce==", fresh),
            "the same page, with the header's new nonce in every place the old one stood"
        );
        let (again, _) = text(cache.get(&key(1, "/jobs"), (5, 0), t0).unwrap()).await;
        assert_ne!(again, html, "each answer has its own nonce");

        // Another session, another address, a write, an action, age: not served.
        assert!(cache.get(&key(2, "/jobs"), (5, 0), t0).is_none());
        assert!(cache
            .get(&key(1, "/jobs?state=queued"), (5, 0), t0)
            .is_none());
        assert!(cache.get(&key(1, "/jobs"), (6, 0), t0).is_none());
        assert!(cache.get(&key(1, "/jobs"), (5, 1), t0).is_none());
        assert!(cache
            .get(&key(1, "/jobs"), (5, 0), t0 + Duration::from_millis(999))
            .is_some());
        assert!(cache
            .get(&key(1, "/jobs"), (5, 0), t0 + Duration::from_millis(1000))
            .is_none());
        cache.set_ttl(Duration::ZERO);
        assert!(cache.get(&key(1, "/jobs"), (5, 0), t0).is_none());
    }

    #[test]
    fn the_cache_stays_under_its_bytes() {
        let cache = PageCache::new(Duration::from_secs(1));
        let page = "x".repeat(MAX_PAGE_BYTES);
        let t0 = Instant::now();
        for i in 0..(2 * MAX_BYTES / MAX_PAGE_BYTES) as i128 {
            cache.put(key(i, "/"), entry((1, 0), t0, &page, "n"), (1, 0));
            let e = cache.lock();
            assert!(e.bytes <= MAX_BYTES, "{} bytes after {i}", e.bytes);
            assert_eq!(e.bytes, e.map.values().map(|e| e.len).sum::<usize>());
        }
        // Stale entries go first: a newer generation's page fits by dropping them.
        cache.put(key(-1, "/"), entry((2, 0), t0, "y", "n"), (2, 0));
        assert_eq!(cache.lock().map.len(), 1);
    }

    #[test]
    fn pages_that_may_no_longer_be_served_leave_memory() {
        let cache = PageCache::new(Duration::from_millis(50));
        cache.put(key(1, "/"), entry((1, 0), Instant::now(), "a", "n"), (1, 0));
        cache.put(key(2, "/"), entry((1, 0), Instant::now(), "b", "n"), (1, 0));
        assert_eq!(cache.lock().map.len(), 2, "both may still be served");
        std::thread::sleep(Duration::from_millis(60));
        cache.put(key(3, "/"), entry((1, 0), Instant::now(), "c", "n"), (1, 0));
        let e = cache.lock();
        assert_eq!(e.map.len(), 1, "the two older than the ttl are gone");
        assert_eq!(e.bytes, 1);
    }

    #[test]
    fn only_page_gets_are_candidates() {
        assert!(may_be_page(&Method::GET, "/jobs"));
        assert!(may_be_page(&Method::GET, "/"));
        assert!(!may_be_page(&Method::POST, "/jobs"));
        assert!(!may_be_page(&Method::GET, "/api/v1/jobs"));
        assert!(!may_be_page(&Method::GET, "/api/list_jobs"));
        assert!(!may_be_page(&Method::GET, "/auth/callback"));
        assert!(!may_be_page(&Method::GET, "/pkg/gantry.wasm"));
        assert!(!may_be_page(&Method::GET, "/favicon.ico"));
    }
}
