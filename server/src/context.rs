//! The request a service call runs for: its id (shown instead of an internal error's
//! detail) and its client's address (for the audit log). Set by the HTTP layer for the
//! request's whole handling.

use std::future::Future;

tokio::task_local! {
    static REQUEST_ID: String;
    static CLIENT_ADDR: Option<String>;
}

/// Runs `fut` as the handling of request `id` from `addr`.
pub async fn scope<F: Future>(id: String, addr: Option<String>, fut: F) -> F::Output {
    REQUEST_ID.scope(id, CLIENT_ADDR.scope(addr, fut)).await
}

/// The address of the client of the request being served, when known.
pub fn current_client_addr() -> Option<String> {
    CLIENT_ADDR.try_with(|a| a.clone()).ok().flatten()
}

/// The id of the request being served, or "-" outside one.
pub fn current_request_id() -> String {
    REQUEST_ID
        .try_with(|id| id.clone())
        .unwrap_or_else(|_| "-".to_string())
}
