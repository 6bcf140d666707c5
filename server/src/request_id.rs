//! Request ids: every request gets one (`x-request-id`, kept if the client sent a sane one),
//! it is on the request's log line, and an internal error shows it instead of any detail.

use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;
use http::HeaderValue;

tokio::task_local! {
    static REQUEST_ID: String;
    static CLIENT_ADDR: Option<String>;
}

/// The client's address for the audit log: the first `X-Forwarded-For` hop behind a proxy,
/// else the peer address.
pub fn client_addr_of(headers: &http::HeaderMap, extensions: &http::Extensions) -> Option<String> {
    let forwarded = headers
        .get("x-forwarded-for")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(',').next())
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty());
    let peer = extensions
        .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
        .map(|c| c.0.ip().to_string());
    forwarded.or(peer)
}

/// The address of the client of the request being served, when known.
pub fn current_client_addr() -> Option<String> {
    CLIENT_ADDR.try_with(|a| a.clone()).ok().flatten()
}

pub const HEADER: &str = "x-request-id";

/// The id of the request being served, or "-" outside one.
pub fn current_request_id() -> String {
    REQUEST_ID
        .try_with(|id| id.clone())
        .unwrap_or_else(|_| "-".to_string())
}

fn sane(v: &HeaderValue) -> Option<String> {
    let s = v.to_str().ok()?;
    (!s.is_empty()
        && s.len() <= 64
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'))
    .then(|| s.to_string())
}

/// Assigns the id, makes it available to the handler and echoes it on the response.
pub async fn middleware(mut req: Request, next: Next) -> Response {
    let id = req
        .headers()
        .get(HEADER)
        .and_then(sane)
        .unwrap_or_else(|| uuid::Uuid::new_v4().simple().to_string()[..16].to_string());
    let value = HeaderValue::from_str(&id).expect("request id is ASCII");
    req.headers_mut().insert(HEADER, value.clone());
    let addr = client_addr_of(req.headers(), req.extensions());
    let mut res = REQUEST_ID
        .scope(id, CLIENT_ADDR.scope(addr, next.run(req)))
        .await;
    res.headers_mut().insert(HEADER, value);
    res
}
