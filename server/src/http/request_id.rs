//! Request ids: every request gets one (`x-request-id`, kept if the client sent a sane one),
//! it is on the request's log line, and an internal error shows it instead of any detail.

use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;
use http::HeaderValue;

pub use crate::context::{current_client_addr, current_request_id};

/// The reverse proxies whose forwarded headers are believed (`server.trusted_proxies`), put
/// on every request by the router.
#[derive(Clone, Debug, Default)]
pub struct TrustedProxies(pub std::sync::Arc<Vec<ipnet::IpNet>>);

impl TrustedProxies {
    pub fn trusts(&self, ip: std::net::IpAddr) -> bool {
        let ip = ip.to_canonical();
        self.0.iter().any(|n| n.contains(&ip))
    }
}

fn peer_of(extensions: &http::Extensions) -> Option<std::net::IpAddr> {
    extensions
        .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
        .map(|c| c.0.ip().to_canonical())
}

/// Whether the request came straight from a trusted proxy, so that its `X-Forwarded-*`
/// headers may be believed.
pub fn from_trusted_proxy(extensions: &http::Extensions) -> bool {
    let trusted = extensions.get::<TrustedProxies>();
    match (trusted, peer_of(extensions)) {
        (Some(t), Some(peer)) => t.trusts(peer),
        _ => false,
    }
}

/// The client's address for the audit log: the socket's peer, unless the peer is a trusted
/// proxy; then `X-Forwarded-For` is read from the right (the hop our proxy appended) past
/// every trusted proxy, and the first address not trusted is the client. A header from
/// anyone else is ignored: whoever sends it could write any address.
pub fn client_addr_of(headers: &http::HeaderMap, extensions: &http::Extensions) -> Option<String> {
    let peer = peer_of(extensions)?;
    if !from_trusted_proxy(extensions) {
        return Some(peer.to_string());
    }
    let trusted = extensions
        .get::<TrustedProxies>()
        .cloned()
        .unwrap_or_default();
    let hops: Vec<&str> = headers
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .collect();
    // From the right, past the trusted proxies. A hop that is not an address was written by
    // someone not trusted (a trusted proxy writes the address it saw): the chain is believed
    // up to it, so a client cannot hide its address behind one.
    let mut furthest = None;
    for hop in hops.iter().rev() {
        let Ok(ip) = hop.parse::<std::net::IpAddr>().map(|ip| ip.to_canonical()) else {
            break;
        };
        if !trusted.trusts(ip) {
            return Some(ip.to_string());
        }
        furthest = Some(ip);
    }
    // Every hop believed is trusted (or there are none): the leftmost is the furthest we know.
    Some(furthest.unwrap_or(peer).to_string())
}

pub const HEADER: &str = "x-request-id";

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
    let mut res = crate::context::scope(id, addr, next.run(req)).await;
    res.headers_mut().insert(HEADER, value);
    res
}

/// The client's address for the audit log (see [`client_addr_of`]).
pub struct ClientAddr(pub Option<String>);

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for ClientAddr {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut http::request::Parts,
        _state: &S,
    ) -> Result<Self, Self::Rejection> {
        Ok(ClientAddr(client_addr_of(
            &parts.headers,
            &parts.extensions,
        )))
    }
}
