//! The HTTP edge: the JSON API's routes and extractors, sign-in and the session, the
//! cross-site check, request ids, response headers and compressed site files, and the serve
//! loop with its timeouts. A handler parses, calls one service method and answers; it never
//! reaches the database or the cluster itself (tests/layers.rs).

pub mod api;
pub mod assets;
pub mod auth;
pub mod csrf;
pub mod failure;
pub mod fresh_owner;
pub mod oidc;
pub mod page_cache;
pub mod request_id;
pub mod serve;
pub mod session_store;
pub mod state;

/// The Content-Security-Policy of an answer that is not a rendered page: nothing inline runs.
pub const SCRIPTLESS_POLICY: &str =
    "default-src 'self'; object-src 'none'; base-uri 'self'; frame-ancestors 'none'";
