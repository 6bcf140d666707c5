//! Cross-site request forgery: a state-changing request a browser sends must name this
//! server as its origin.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, Method};

use app::error::ApiError;

use crate::http::failure::ApiFailure;
use crate::http::state::AppState;

/// Refuses a state-changing request a browser sent from another origin. Cookies are
/// `SameSite=Lax`, which stops other sites but not another port or subdomain of the same
/// site; so every POST/PUT/PATCH/DELETE that a browser sends must also carry an `Origin`
/// (or `Sec-Fetch-Site`) naming this server. API calls with an `Authorization` header carry
/// no ambient credential and pass; so do clients that send neither header (not browsers).
pub async fn csrf_guard(
    State(state): State<AppState>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    // A token-authenticated API call: `ApiViewer` judges it by its token alone. Elsewhere
    // (server functions, sign-out) an Authorization header proves nothing and is no pass.
    let token_call = req.uri().path().starts_with("/api/v1/")
        && req.headers().contains_key(http::header::AUTHORIZATION);
    if token_call
        || matches!(
            *req.method(),
            Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE
        )
    {
        return next.run(req).await;
    }
    let public = state
        .config
        .auth
        .oidc
        .as_ref()
        .and_then(|o| origin_of(&o.redirect_url));
    let trust_forwarded = crate::http::request_id::from_trusted_proxy(req.extensions());
    match same_origin(req.headers(), public.as_deref(), trust_forwarded) {
        Ok(()) => next.run(req).await,
        Err(why) => {
            tracing::warn!(method = %req.method(), path = %req.uri().path(), %why, "cross-site request refused");
            ApiFailure(ApiError::forbidden(format!(
                "cross-site request refused: {why}"
            )))
            .into_response()
        }
    }
}

/// With the demo sign-in on (a loopback-only server that signs anyone in by name), every
/// request must name this machine in `Host`: `localhost`, a 127/8 address or `[::1]`, any
/// port. Otherwise a web page elsewhere could point its own name at 127.0.0.1 (DNS
/// rebinding): the browser would take Gantry for that page's own origin, so the cross-site
/// check would pass, and the page's script could sign in as anyone and read or change
/// everything. Development servers guard the same way (an allowed-hosts list).
pub async fn loopback_host_only(
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let host = req
        .headers()
        .get(http::header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if is_loopback_host(host) {
        return next.run(req).await;
    }
    tracing::warn!(%host, path = %req.uri().path(), "request for another host name refused (demo sign-in is on)");
    ApiFailure(ApiError::forbidden(format!(
        "this Gantry signs people in by name without a password, so it answers only to localhost, 127.0.0.1 or [::1], not to '{host}'"
    )))
    .into_response()
}

/// Whether a `Host` value names this machine: `localhost`, a loopback address, with or
/// without a port.
fn is_loopback_host(host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        Some(rest) => rest.split(']').next().unwrap_or(""),
        None => match host.rsplit_once(':') {
            Some((name, port)) if port.chars().all(|c| c.is_ascii_digit()) => name,
            _ => host,
        },
    };
    name.eq_ignore_ascii_case("localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

fn origin_of(url: &str) -> Option<String> {
    let u = openidconnect::url::Url::parse(url).ok()?;
    Some(u.origin().ascii_serialization())
}

/// `Ok` when the browser says the request comes from this server's own pages.
/// `X-Forwarded-Host` counts only when `trust_forwarded` (the request came from a trusted
/// proxy, `server.trusted_proxies`); anyone else could name any host in it.
pub fn same_origin(
    headers: &HeaderMap,
    public_origin: Option<&str>,
    trust_forwarded: bool,
) -> Result<(), String> {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(origin) = header("origin") {
        let authority = origin
            .strip_prefix("https://")
            .or_else(|| origin.strip_prefix("http://"));
        let forwarded = header("x-forwarded-host")
            .filter(|_| trust_forwarded)
            .and_then(|v| v.split(',').next())
            .map(str::trim);
        let hosts = [forwarded, header("host")];
        let ok = public_origin == Some(origin)
            || authority.is_some_and(|a| hosts.iter().flatten().any(|h| h == &a));
        return if ok {
            Ok(())
        } else {
            Err(format!("Origin {origin} is not this server"))
        };
    }
    match header("sec-fetch-site") {
        None | Some("same-origin") | Some("none") => Ok(()),
        Some(other) => Err(format!("Sec-Fetch-Site is {other}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        h
    }

    #[test]
    fn origin_check_table() {
        let public = Some("https://gantry.example.com");
        let cases: &[(&[(&str, &str)], bool)] = &[
            (
                &[
                    ("host", "127.0.0.1:3000"),
                    ("origin", "http://127.0.0.1:3000"),
                ],
                true,
            ),
            (
                &[
                    ("host", "127.0.0.1:3000"),
                    ("origin", "http://127.0.0.1:4000"),
                ],
                false,
            ),
            (
                &[
                    ("host", "127.0.0.1:3000"),
                    ("origin", "https://evil.example"),
                ],
                false,
            ),
            (&[("host", "127.0.0.1:3000"), ("origin", "null")], false),
            (
                &[
                    ("host", "gantry:80"),
                    ("origin", "https://gantry.example.com"),
                ],
                true,
            ),
            (
                &[
                    ("host", "svc"),
                    ("x-forwarded-host", "gantry.example.com"),
                    ("origin", "https://gantry.example.com"),
                ],
                true,
            ),
            (
                &[("host", "127.0.0.1:3000"), ("sec-fetch-site", "same-site")],
                false,
            ),
            (
                &[("host", "127.0.0.1:3000"), ("sec-fetch-site", "cross-site")],
                false,
            ),
            (
                &[
                    ("host", "127.0.0.1:3000"),
                    ("sec-fetch-site", "same-origin"),
                ],
                true,
            ),
            (&[("host", "127.0.0.1:3000")], true),
        ];
        for (h, ok) in cases {
            for trust in [false, true] {
                assert_eq!(
                    same_origin(&headers(h), public, trust).is_ok(),
                    *ok,
                    "{h:?}"
                );
            }
        }
        // Behind a proxy with no public origin configured: its `X-Forwarded-Host` is believed
        // only when the proxy is trusted; from anyone else it proves nothing.
        let proxied = headers(&[
            ("host", "svc:3000"),
            ("x-forwarded-host", "gantry.example.com"),
            ("origin", "https://gantry.example.com"),
        ]);
        assert!(same_origin(&proxied, None, true).is_ok());
        assert!(same_origin(&proxied, None, false).is_err());
        let forged = headers(&[
            ("host", "127.0.0.1:3000"),
            ("x-forwarded-host", "evil.example"),
            ("origin", "https://evil.example"),
        ]);
        assert!(same_origin(&forged, None, false).is_err());
    }
}
