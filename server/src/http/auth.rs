//! Who is asking: sessions (sign-in through an OpenID provider, or the local demo sign-in of
//! the embedded default), personal API tokens (`Authorization: Bearer`), the sessions'
//! absolute lifetime, sign-out, and the Origin check that refuses cross-site posts.
//! Sessions live in the database through tower-sessions' sqlx store.

use app::error::{ApiError, ErrorCode};
use axum::extract::{FromRequestParts, Query, State};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::Form;
use chrono::Utc;
use http::request::Parts;
use http::HeaderMap;
use serde::Deserialize;
use tower_sessions::Session;

use crate::http::failure::ApiFailure;
use crate::http::oidc::{Pending, SignInError};
use crate::http::state::AppState;

const ID_TOKEN_KEY: &str = "id_token";
const PENDING_KEY: &str = "oidc_pending";
/// How long a sign-in started at the provider and not finished is kept. Starting one needs no
/// credential, so each `GET /auth/login` without a cookie stores a session: kept for the
/// sessions' idle time (12 h), anyone could fill the store by asking again and again; how many
/// may be started is bounded too (`oidc::PendingStarts`).
pub const PENDING_MINUTES: i64 = 10;
pub use crate::domain::token::{new_token, token_hash, TOKEN_PREFIX};
pub use crate::service::session::{
    session_ended, session_user, SessionLimits, ENDED_KEY, SIGNED_IN_KEY, USER_KEY,
};

/// Signs `user` in on this session: a new session id (a session fixed before sign-in is
/// worth nothing), the sign-in time for the absolute lifetime, and the sessions' idle
/// expiry (a pending sign-in had a short one).
async fn start_session(
    state: &AppState,
    session: &Session,
    user: &str,
    id_token: Option<&str>,
) -> Result<(), ApiError> {
    let internal = crate::error::internal;
    session.cycle_id().await.map_err(internal)?;
    session.clear().await;
    session.set_expiry(Some(tower_sessions::Expiry::OnInactivity(
        time::Duration::seconds_f64(state.config.auth.session_idle_minutes * 60.0),
    )));
    session.insert(USER_KEY, user).await.map_err(internal)?;
    session
        .insert(SIGNED_IN_KEY, Utc::now().timestamp_millis())
        .await
        .map_err(internal)?;
    if let Some(t) = id_token {
        session.insert(ID_TOKEN_KEY, t).await.map_err(internal)?;
    }
    Ok(())
}

#[derive(Deserialize)]
pub struct DevLogin {
    user: String,
    #[serde(default)]
    next: Option<String>,
}

/// Only a path on Gantry's own origin is followed after sign-in. The candidate is resolved
/// against an origin of our own, as a browser resolves a `Location`, and kept only if it
/// stays there; control characters (a browser drops tabs and newlines, so `/\t/evil`
/// becomes `//evil`) and backslashes (read as `/`) are refused outright. Anything else: `/`.
fn safe_next(next: Option<&str>) -> String {
    const HOME: &str = "/";
    let Some(n) = next else {
        return HOME.into();
    };
    if !n.starts_with('/') || n.chars().any(|c| c.is_control() || c == '\\') {
        return HOME.into();
    }
    let base = url::Url::parse("http://gantry.invalid/").expect("a valid base");
    match base.join(n) {
        // `/.//evil.example` is same-origin, but its path is `//evil.example`: as a Location
        // that is another site.
        Ok(u) if u.origin() == base.origin() && !u.path().starts_with("//") => {
            let mut out = u.path().to_string();
            if let Some(q) = u.query() {
                out.push('?');
                out.push_str(q);
            }
            if let Some(f) = u.fragment() {
                out.push('#');
                out.push_str(f);
            }
            out
        }
        _ => HOME.into(),
    }
}

/// `POST /auth/dev/login` with form field `user` (the embedded default only).
pub async fn dev_login(
    State(state): State<AppState>,
    session: Session,
    crate::http::request_id::ClientAddr(address): crate::http::request_id::ClientAddr,
    Form(form): Form<DevLogin>,
) -> Response {
    if !state.config.auth.dev_login() {
        return ApiFailure(ApiError::not_found("local sign-in is turned off")).into_response();
    }
    let viewer = match state.portal.viewer_by_id(form.user.trim()).await {
        Ok(Some(v)) => v,
        Ok(None) => {
            return ApiFailure(
                ApiError::new(
                    ErrorCode::Unauthorized,
                    format!("there is no user named '{}'", form.user),
                )
                .with_field("user"),
            )
            .into_response()
        }
        Err(e) => return ApiFailure::from(e).into_response(),
    };
    if let Err(e) = start_session(&state, &session, &viewer.user, None).await {
        return ApiFailure::from(e).into_response();
    }
    tracing::info!(user = %viewer.user, admin = viewer.is_admin, "signed in (local)");
    if viewer.is_admin {
        if let Err(e) = state
            .portal
            .audit_sign_in(&viewer.user, "local", address)
            .await
        {
            return ApiFailure::from(e).into_response();
        }
    }
    Redirect::to(&safe_next(form.next.as_deref())).into_response()
}

#[derive(Deserialize)]
pub struct LoginQuery {
    #[serde(default)]
    next: Option<String>,
}

/// `GET /auth/login`: starts the Authorization Code flow at the OpenID provider.
pub async fn oidc_login(
    State(state): State<AppState>,
    session: Session,
    crate::http::request_id::ClientAddr(address): crate::http::request_id::ClientAddr,
    headers: HeaderMap,
    Query(q): Query<LoginQuery>,
) -> Response {
    let Some(oidc) = &state.oidc else {
        return ApiFailure(ApiError::not_found(
            "single sign-on is not configured on this server ([auth.oidc])",
        ))
        .into_response();
    };
    // A browser says what a request is for: a sign-in starts as a page of its own. An image,
    // a frame, a script or a prefetch (speculation rules) that another site makes a visitor's
    // browser send (a hundred of them would use up the visitor's address's allowance) is
    // refused before it stores or counts anything. A client that says nothing (curl) is
    // taken at its word.
    let fetch = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_ascii_lowercase)
    };
    if fetch("sec-fetch-mode").is_some_and(|m| m != "navigate")
        || fetch("sec-fetch-dest").is_some_and(|d| d != "document")
        || fetch("sec-purpose").is_some()
        || fetch("purpose").is_some_and(|p| p.contains("prefetch"))
    {
        return sign_in_failed(&state, &SignInError::NotNavigation);
    }
    // Loaded first: a cookie naming no stored session (made up, or expired) leaves no id.
    let signed_in = match session.get::<String>(USER_KEY).await {
        Ok(user) => user.is_some(),
        Err(e) => return ApiFailure::from(crate::error::internal(e)).into_response(),
    };
    match oidc.begin(&safe_next(q.next.as_deref()), Utc::now()).await {
        Ok((url, mut pending)) => {
            // Without a session this start stores one: counted, so that asking again and
            // again cannot fill the store (a browser holding its session reuses it). Only a
            // start that stores one counts: one the provider could not be reached for does not.
            if session.id().is_none() {
                match oidc
                    .pending
                    .admit(address.as_deref(), std::time::Instant::now())
                {
                    Ok(counted) => pending.counted_as(counted),
                    Err(refused) => {
                        tracing::warn!(address = ?address, everyone = refused.everyone, "sign-in refused: too many started in the last 10 minutes and not finished");
                        return sign_in_refused(&state, &refused.error(), refused);
                    }
                }
            } else if let Ok(Some(before)) = session.get::<Pending>(PENDING_KEY).await {
                // Started again in its pending session: still the start that was counted.
                if let Some(c) = before.counted() {
                    pending.counted_as(c.clone());
                }
            }
            // Someone not signed in gets a session only for the sign-in's round trip.
            if !signed_in {
                session.set_expiry(Some(tower_sessions::Expiry::OnInactivity(
                    time::Duration::minutes(PENDING_MINUTES),
                )));
            }
            if let Err(e) = session.insert(PENDING_KEY, pending).await {
                return ApiFailure::from(crate::error::internal(e)).into_response();
            }
            Redirect::to(&url).into_response()
        }
        Err(e) => sign_in_failed(&state, &e),
    }
}

#[derive(Deserialize)]
pub struct CallbackQuery {
    code: Option<String>,
    state: Option<String>,
    error: Option<String>,
    error_description: Option<String>,
    /// RFC 9207: the provider names itself, so a response from another provider is refused.
    iss: Option<String>,
}

/// `GET /auth/callback`: ends the flow. Any failure is a page that says what went wrong and
/// offers to start again; nothing is signed in.
pub async fn oidc_callback(
    State(state): State<AppState>,
    session: Session,
    crate::http::request_id::ClientAddr(address): crate::http::request_id::ClientAddr,
    Query(q): Query<CallbackQuery>,
) -> Response {
    let Some(oidc) = state.oidc.clone() else {
        return ApiFailure(ApiError::not_found("single sign-on is not configured")).into_response();
    };
    // One use only: a replayed or second callback finds nothing pending.
    let pending: Option<Pending> = match session.remove(PENDING_KEY).await {
        Ok(p) => p,
        Err(e) => return ApiFailure::from(crate::error::internal(e)).into_response(),
    };
    let Some(pending) = pending else {
        return sign_in_failed(&state, &SignInError::NotStarted);
    };
    if let Some(error) = q.error {
        let detail = match q.error_description {
            Some(d) => format!("{error}: {d}"),
            None => error,
        };
        return sign_in_failed(&state, &SignInError::Refused(detail));
    }
    if let Some(iss) = &q.iss {
        if iss.trim_end_matches('/') != oidc.issuer().trim_end_matches('/') {
            return sign_in_failed(
                &state,
                &SignInError::Refused(format!(
                    "the response comes from issuer {iss}, not the configured {}",
                    oidc.issuer()
                )),
            );
        }
    }
    let (Some(code), Some(returned_state)) = (q.code, q.state) else {
        return sign_in_failed(&state, &SignInError::StateMismatch);
    };
    let next = pending.next.clone();
    let counted = pending.counted().cloned();
    let who = match oidc
        .finish(pending, &returned_state, &code, Utc::now())
        .await
    {
        Ok(w) => {
            // Each finished sign-in makes a signed-in session: so many per person.
            if let Err(refused) = oidc.finished.admit(
                Some(&format!("sub:{}", w.subject)),
                std::time::Instant::now(),
            ) {
                tracing::warn!(user = %w.user_name, address = ?address, "sign-in refused: signed in too often in the last 10 minutes");
                let e = if refused.everyone {
                    refused.error()
                } else {
                    SignInError::TooOften {
                        times: crate::http::oidc::FINISHED_PER_PERSON as usize,
                        minutes: refused.retry_after_s().div_ceil(60),
                    }
                };
                return sign_in_refused(&state, &e, refused);
            }
            // Finished: no longer a sign-in left halfway (its session becomes a signed-in one).
            if let Some(c) = &counted {
                oidc.pending.release(c);
            }
            w
        }
        Err(e) => {
            tracing::warn!(error = %e, "OpenID sign-in refused");
            return sign_in_failed(&state, &e);
        }
    };
    let known = match state.portal.team_ids().await {
        Ok(t) => t,
        Err(e) => return ApiFailure::from(e).into_response(),
    };
    let (teams, unknown): (Vec<_>, Vec<_>) = who
        .teams
        .iter()
        .cloned()
        .partition(|m| known.contains(&m.team));
    if !unknown.is_empty() {
        tracing::warn!(user = %who.user_name, teams = ?unknown.iter().map(|m| &m.team).collect::<Vec<_>>(), "groups map to teams Gantry does not have; ignored");
    }
    let record = crate::domain::identity::IdentitySignIn {
        issuer: &who.issuer,
        subject: &who.subject,
        wanted_user_id: &who.user_name,
        display_name: &who.display_name,
        email: who.email.as_deref(),
        is_admin: who.is_admin,
        teams: &teams,
        groups: &who.groups,
        at: Utc::now(),
    };
    let user = match state.portal.sign_in_identity(&record).await {
        Ok(u) => u,
        Err(e) => return ApiFailure::from(e).into_response(),
    };
    if let Err(e) = start_session(&state, &session, &user, Some(&who.id_token)).await {
        return ApiFailure::from(e).into_response();
    }
    tracing::info!(%user, teams = teams.len(), admin = who.is_admin, "signed in (OpenID)");
    if who.is_admin {
        if let Err(e) = state.portal.audit_sign_in(&user, "oidc", address).await {
            return ApiFailure::from(e).into_response();
        }
    }
    Redirect::to(&safe_next(Some(&next))).into_response()
}

/// A sign-in failure as a page a person can act on.
/// A sign-in refused for now by one of the bounds on sign-ins: the page, and when to try
/// again (`Retry-After`).
fn sign_in_refused(
    state: &AppState,
    e: &SignInError,
    refused: crate::http::oidc::Refused,
) -> Response {
    let mut res = sign_in_failed(state, e);
    res.headers_mut().insert(
        http::header::RETRY_AFTER,
        http::HeaderValue::from(refused.retry_after_s()),
    );
    res
}

fn sign_in_failed(state: &AppState, e: &SignInError) -> Response {
    use app::format::escape_html;
    let body = format!(
        r#"<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"/><meta name="viewport" content="width=device-width, initial-scale=1"/><title>Sign-in failed · Gantry</title><link rel="stylesheet" href="{}"/></head>
<body><header class="topbar"><a class="brand" href="/">Gantry</a></header><main>
<section class="panel narrow" data-testid="sign-in-failed"><h1>Sign-in failed</h1><p>{}</p>
<p><a class="button primary" href="/auth/login">Sign in again</a> <a href="/">Home</a></p></section></main></body></html>"#,
        escape_html(&crate::http::assets::stylesheet_href(&state.leptos_options)),
        escape_html(&e.to_string())
    );
    // Its own policy, so it is not taken for a page that lost its nonce (startup.rs).
    let policy = [(
        http::header::CONTENT_SECURITY_POLICY,
        crate::http::SCRIPTLESS_POLICY,
    )];
    (e.status(), policy, Html(body)).into_response()
}

/// `POST /auth/logout`: ends the session here, then at the provider when it offers
/// RP-initiated logout (so the next sign-in asks for the password again).
pub async fn logout(State(state): State<AppState>, session: Session) -> Response {
    let id_token: Option<String> = session.get(ID_TOKEN_KEY).await.ok().flatten();
    if let Err(e) = session.flush().await {
        return ApiFailure::from(crate::error::internal(e)).into_response();
    }
    if let Some(oidc) = &state.oidc {
        if let Some(url) = oidc.logout_url(id_token.as_deref()).await {
            return Redirect::to(&url).into_response();
        }
    }
    Redirect::to("/login").into_response()
}

// ---- personal API tokens ----------------------------------------------------------------

fn bearer(headers: &HeaderMap) -> Option<Result<&str, ApiError>> {
    let v = headers.get(http::header::AUTHORIZATION)?;
    let bad = || {
        ApiError::new(
            ErrorCode::Unauthorized,
            "the Authorization header must be `Bearer <personal API token>`",
        )
    };
    Some(
        // The scheme is case-insensitive (RFC 6750, RFC 9110 §11.1).
        v.to_str()
            .ok()
            .and_then(|v| v.split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, token)| token.trim())
            .filter(|t| !t.is_empty())
            .ok_or_else(bad),
    )
}

/// How a request proved who it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Via {
    Session,
    Token,
}

/// The signed-in user of an API request, or 401. A request with an `Authorization` header
/// is judged by its token alone, never by a cookie that came along.
pub struct ApiViewer(pub app::model::Viewer);

/// Like [`ApiViewer`], and says whether a session or a token proved it.
pub struct Authenticated(pub app::model::Viewer, pub Via);

impl FromRequestParts<AppState> for Authenticated {
    type Rejection = ApiFailure;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let Held(v, credential) = Held::from_request_parts(parts, state).await?;
        let via = match credential {
            Credential::Session { .. } => Via::Session,
            Credential::Token(_) => Via::Token,
        };
        Ok(Authenticated(v, via))
    }
}

impl FromRequestParts<AppState> for ApiViewer {
    type Rejection = ApiFailure;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let Authenticated(v, _) = Authenticated::from_request_parts(parts, state).await?;
        Ok(ApiViewer(v))
    }
}

// ---- long-lived requests --------------------------------------------------------------------

/// What proved who holds a long-lived request (the live stream), kept so that it can be asked
/// again while the request lasts: a sign-out, a revoked token or the end of the session's
/// lifetime must end the stream too, not only refuse the next request.
pub enum Credential {
    Session {
        id: tower_sessions::session::Id,
        user: String,
    },
    /// The token itself; never logged (no `Debug`).
    Token(String),
}

/// Like [`ApiViewer`], with the [`Credential`] to check again later; what [`Authenticated`]
/// and [`ApiViewer`] are read from.
pub struct Held(pub app::model::Viewer, pub Credential);

impl FromRequestParts<AppState> for Held {
    type Rejection = ApiFailure;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        if let Some(token) = bearer(&parts.headers) {
            let token = token?;
            let v = state.portal.viewer_by_token(token).await?;
            return Ok(Held(v, Credential::Token(token.to_string())));
        }
        let session = Session::from_request_parts(parts, state)
            .await
            .map_err(|_| ApiFailure(ApiError::unauthorized()))?;
        let user = session_user(&session, state.portal.session_limits())
            .await?
            .ok_or_else(|| ApiFailure(ApiError::unauthorized()))?;
        let id = session
            .id()
            .ok_or_else(|| ApiFailure(ApiError::unauthorized()))?;
        match state
            .portal
            .viewer_by_id_for(
                &user,
                crate::service::only_reads(&parts.method, parts.uri.path()),
            )
            .await?
        {
            Some(v) => Ok(Held(v, Credential::Session { id, user })),
            None => Err(ApiFailure(ApiError::unauthorized())),
        }
    }
}

impl Credential {
    /// The viewer as of now, or `None` when the credential no longer holds: the session was
    /// signed out (gone from the store), expired (idle or absolute lifetime) or now belongs
    /// to nobody; the token was revoked or its user removed. An error is a failure to ask
    /// (the database), not an answer.
    pub async fn recheck(&self, state: &AppState) -> Result<Option<app::model::Viewer>, ApiError> {
        match self {
            Credential::Token(token) => match state.portal.viewer_by_token(token).await {
                Ok(v) => Ok(Some(v)),
                Err(e) if e.kind == crate::error::Kind::Unauthorized => Ok(None),
                Err(e) => Err(e.into()),
            },
            Credential::Session { id, user } => {
                use tower_sessions::SessionStore;
                // The store's load answers only unexpired records (idle expiry).
                let Some(record) = state
                    .sessions
                    .load(id)
                    .await
                    .map_err(crate::error::internal)?
                else {
                    return Ok(None);
                };
                let same_user = record.data.get(USER_KEY).and_then(|u| u.as_str()) == Some(user);
                let limit = state.portal.session_limits().absolute.num_milliseconds();
                let within = record
                    .data
                    .get(SIGNED_IN_KEY)
                    .and_then(|t| t.as_i64())
                    .is_some_and(|at| Utc::now().timestamp_millis() - at <= limit);
                if !(same_user && within) {
                    return Ok(None);
                }
                // Asked again while a live stream is open, which only reads.
                Ok(state.portal.viewer_by_id_for(user, true).await?)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_local_paths_are_followed_after_sign_in() {
        assert_eq!(safe_next(Some("/jobs")), "/jobs");
        assert_eq!(
            safe_next(Some("/jobs?state=failed#top")),
            "/jobs?state=failed#top"
        );
        assert_eq!(safe_next(None), "/");
        for evil in [
            "//evil.example",
            "https://evil.example",
            "HTTPS://evil.example",
            "/\t/evil.example",
            "/\n/evil.example",
            "/\r\n/evil.example",
            "/\u{0}/evil.example",
            "/\\evil.example",
            "/\\/evil.example",
            "\\\\evil.example",
            "/ /evil.example/..",
            // Dot segments that resolve to a path beginning `//` (once redirected there).
            "/.//evil.example",
            "/a/..//evil.example",
            "/%2e//evil.example",
            "evil.example",
            "javascript:alert(1)",
            "",
        ] {
            let got = safe_next(Some(evil));
            assert!(
                got == "/" || (got.starts_with('/') && !got.starts_with("//")),
                "{evil:?} gave {got:?}"
            );
            assert!(
                !got.contains("evil.example") || got.starts_with("/%20/"),
                "{evil:?} gave {got:?}"
            );
        }
        // Encoded slashes stay a path on our origin: a browser does not decode them into an
        // authority.
        assert_eq!(
            safe_next(Some("/%2F%2Fevil.example")),
            "/%2F%2Fevil.example"
        );
        assert_eq!(safe_next(Some("/%09/evil.example")), "/%09/evil.example");
        assert_eq!(safe_next(Some("/a/../b")), "/b");
    }
}
