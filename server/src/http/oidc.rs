//! Single sign-on through an OpenID provider: Authorization Code flow with PKCE (S256),
//! `state` and `nonce` checked, and the ID token's signature, issuer, audience and expiry
//! verified by the `openidconnect` crate. The provider is found by discovery from its issuer
//! URL; its metadata and keys are fetched again after [`REDISCOVER_AFTER`] or when a token
//! fails to verify against them (a rotated signing key).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use app::model::{Membership, Role};
use openidconnect::core::{
    CoreAuthDisplay, CoreAuthPrompt, CoreAuthenticationFlow, CoreErrorResponseType,
    CoreGenderClaim, CoreJsonWebKey, CoreJweContentEncryptionAlgorithm, CoreJwsSigningAlgorithm,
    CoreRevocableToken, CoreRevocationErrorResponse, CoreTokenIntrospectionResponse, CoreTokenType,
};
use openidconnect::{
    AccessTokenHash, AdditionalClaims, AuthorizationCode, Client, ClientId, ClientSecret,
    CsrfToken, EmptyExtraTokenFields, EndSessionUrl, EndpointMaybeSet, EndpointNotSet, EndpointSet,
    IdToken, IdTokenFields, IssuerUrl, LogoutRequest, Nonce, OAuth2TokenResponse,
    PkceCodeChallenge, PkceCodeVerifier, PostLogoutRedirectUrl, ProviderMetadataWithLogout,
    RedirectUrl, RequestTokenError, Scope, StandardErrorResponse, StandardTokenResponse,
    TokenResponse,
};
use secrecy::ExposeSecret;
use serde::{Deserialize, Serialize};

use crate::config::{GroupGrant, OidcConfig};

/// Provider metadata and keys are fetched again after this long.
pub const REDISCOVER_AFTER: Duration = Duration::from_secs(600);
/// A sign-in started but not finished within this long is refused.
pub const PENDING_FOR: chrono::TimeDelta = chrono::TimeDelta::minutes(10);

/// Every claim of the ID token beyond the standard ones (the groups claim is among them;
/// its name is configuration).
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(transparent)]
pub struct ExtraClaims(pub serde_json::Map<String, serde_json::Value>);

impl AdditionalClaims for ExtraClaims {}

type GantryIdTokenFields = IdTokenFields<
    ExtraClaims,
    EmptyExtraTokenFields,
    CoreGenderClaim,
    CoreJweContentEncryptionAlgorithm,
    CoreJwsSigningAlgorithm,
>;
type GantryTokenResponse = StandardTokenResponse<GantryIdTokenFields, CoreTokenType>;
pub type GantryIdToken = IdToken<
    ExtraClaims,
    CoreGenderClaim,
    CoreJweContentEncryptionAlgorithm,
    CoreJwsSigningAlgorithm,
>;

/// The client as discovery builds it: authorization endpoint known, token and userinfo
/// endpoints as the provider declares them.
type GantryClient = Client<
    ExtraClaims,
    CoreAuthDisplay,
    CoreGenderClaim,
    CoreJweContentEncryptionAlgorithm,
    CoreJsonWebKey,
    CoreAuthPrompt,
    StandardErrorResponse<CoreErrorResponseType>,
    GantryTokenResponse,
    CoreTokenIntrospectionResponse,
    CoreRevocableToken,
    CoreRevocationErrorResponse,
    EndpointSet,
    EndpointNotSet,
    EndpointNotSet,
    EndpointNotSet,
    EndpointMaybeSet,
    EndpointMaybeSet,
>;

struct Provider {
    client: GantryClient,
    end_session: Option<EndSessionUrl>,
    fetched: Instant,
}

/// What a sign-in in progress keeps in the (pre-sign-in) session.
#[derive(Clone, Deserialize, Serialize)]
pub struct Pending {
    state: String,
    nonce: String,
    pkce_verifier: String,
    pub next: String,
    started_at_ms: i64,
    /// Set when [`PendingStarts`] counted this start: its finish takes it off the count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    counted: Option<Counted>,
}

impl Pending {
    /// Notes that this start was counted as `counted` (see [`PendingStarts::release`]).
    pub fn counted_as(&mut self, counted: Counted) {
        self.counted = Some(counted);
    }

    /// How this start was counted, if it was.
    pub fn counted(&self) -> Option<&Counted> {
        self.counted.as_ref()
    }
}

/// Without `state`, `nonce` and the PKCE verifier: whoever reads them could finish the
/// sign-in in another browser.
impl std::fmt::Debug for Pending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pending")
            .field("next", &self.next)
            .field("started_at_ms", &self.started_at_ms)
            .field("counted", &self.counted)
            .finish_non_exhaustive()
    }
}

/// Who signed in, from verified claims and the group mapping.
#[derive(Clone, PartialEq)]
pub struct SignedIn {
    pub issuer: String,
    pub subject: String,
    pub user_name: String,
    pub display_name: String,
    pub email: Option<String>,
    pub groups: Vec<String>,
    pub teams: Vec<Membership>,
    pub is_admin: bool,
    /// The raw ID token, kept for `id_token_hint` at sign-out.
    pub id_token: String,
}

/// Without the ID token: it is a bearer credential the provider signed for this person.
impl std::fmt::Debug for SignedIn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SignedIn")
            .field("issuer", &self.issuer)
            .field("subject", &self.subject)
            .field("user_name", &self.user_name)
            .field("display_name", &self.display_name)
            .field("email", &self.email)
            .field("groups", &self.groups)
            .field("teams", &self.teams)
            .field("is_admin", &self.is_admin)
            .finish_non_exhaustive()
    }
}

/// Why a sign-in was refused, in words for the person in front of the browser.
#[derive(Debug, thiserror::Error)]
pub enum SignInError {
    #[error("No sign-in was started in this browser, or this sign-in link was already used. Start again from the sign-in page.")]
    NotStarted,
    #[error("The sign-in took longer than 10 minutes. Start again.")]
    Stale,
    #[error("The sign-in response does not belong to the sign-in this browser started (its state parameter does not match). Nothing was signed in; start again.")]
    StateMismatch,
    #[error("The identity provider refused the sign-in: {0}")]
    Refused(String),
    #[error("The identity provider did not accept the sign-in code: it was already used or has expired. Start again.")]
    CodeRejected,
    #[error(
        "The identity provider's ID token failed verification, so Gantry did not sign you in: {0}"
    )]
    Verification(String),
    #[error("The identity provider at {issuer} did not answer: {detail}")]
    Unreachable { issuer: String, detail: String },
    #[error("Too many sign-ins were started from your address in the last 10 minutes and not finished. Try again in {minutes} min.")]
    TooMany { minutes: u64 },
    #[error("You have signed in {times} times in the last 10 minutes, the most Gantry allows one person. Try again in {minutes} min; the sessions you already have still work.")]
    TooOften { times: usize, minutes: u64 },
    #[error("Too many sign-ins are in progress on this server right now. Try again in {minutes} min; anyone already signed in is not affected.")]
    Busy { minutes: u64 },
    #[error("A sign-in starts when you open it in the browser (from the sign-in page, a link or the address bar), not from an image, a frame, a script or a prefetch. Open the sign-in page instead.")]
    NotNavigation,
}

impl SignInError {
    pub fn status(&self) -> http::StatusCode {
        match self {
            SignInError::Unreachable { .. } => http::StatusCode::BAD_GATEWAY,
            SignInError::TooMany { .. }
            | SignInError::TooOften { .. }
            | SignInError::Busy { .. } => http::StatusCode::TOO_MANY_REQUESTS,
            SignInError::NotNavigation => http::StatusCode::FORBIDDEN,
            SignInError::Refused(_) | SignInError::CodeRejected | SignInError::Verification(_) => {
                http::StatusCode::UNAUTHORIZED
            }
            _ => http::StatusCode::BAD_REQUEST,
        }
    }
}

pub struct Oidc {
    config: OidcConfig,
    http: openidconnect::reqwest::Client,
    provider: tokio::sync::Mutex<Option<Arc<Provider>>>,
    /// Sign-ins started without a session (each stores one), by address.
    pub pending: PendingStarts,
    /// Sign-ins finished, by person (issuer's subject): each makes a signed-in session, and
    /// a finished sign-in is off its address's count, so a script holding one account's
    /// credentials (the provider's own session answers every round trip after the first)
    /// could otherwise make sessions without end. At most [`FINISHED_PER_PERSON`].
    pub finished: PendingStarts,
}

/// Sign-ins one person may finish in [`PENDING_FOR`]: far more than anyone signs in by hand.
pub const FINISHED_PER_PERSON: u32 = 20;

/// Sign-ins started without a session cookie in the last [`PENDING_FOR`]. Starting one needs
/// no credential and stores a session for the round trip, so without a bound anyone could
/// fill the session store: one client address (an IPv6 address by its /64, which one holder
/// has whole) may start `per_address` of them, and all addresses together
/// [`PendingStarts::IN_ALL`] (as many session rows of a few hundred bytes at most). A browser
/// that starts again with its pending session's cookie reuses that session and is not
/// counted, and a sign-in that finishes is taken off the count (its session is a signed-in
/// one from then on): what is bounded is the sign-ins left unfinished, so an office behind
/// one address is held back only by the sign-ins its people leave halfway.
#[derive(Debug)]
pub struct PendingStarts {
    per_address: usize,
    window: Duration,
    epoch: u32,
    starts: std::sync::Mutex<Starts>,
}

#[derive(Debug, Default)]
struct Starts {
    /// Numbers the counted starts, in order.
    next: u64,
    /// Every counted start, oldest (lowest number) first, and its address.
    all: std::collections::VecDeque<(u64, Instant, Option<String>)>,
    /// The counted starts of each address, oldest first.
    by_address:
        std::collections::HashMap<Option<String>, std::collections::VecDeque<(u64, Instant)>>,
}

/// A start [`PendingStarts`] counted, as its pending sign-in keeps it (in the session).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
pub struct Counted {
    /// Which process counted it: a start counted before a restart is not on this one's count.
    /// 32 bits, so that it survives any JSON reader (the session keeps it).
    epoch: u32,
    seq: u64,
    address: Option<String>,
}

impl PendingStarts {
    /// Starts kept from all addresses together.
    pub const IN_ALL: usize = 50_000;

    pub fn new(per_address: u32, window: Duration) -> PendingStarts {
        PendingStarts {
            per_address: per_address as usize,
            window,
            epoch: rand::random(),
            starts: std::sync::Mutex::default(),
        }
    }

    /// Counts a start from `address` at `now`, or says how long until it may start and
    /// whether the bound reached is all addresses' ([`PendingStarts::IN_ALL`]) or this one's
    /// (`per_address`).
    pub fn admit(&self, address: Option<&str>, now: Instant) -> Result<Counted, Refused> {
        let mut starts = self.starts.lock().unwrap_or_else(|e| e.into_inner());
        let Starts {
            next,
            all,
            by_address,
        } = &mut *starts;
        while let Some((_, at, from)) = all.front() {
            if now.saturating_duration_since(*at) < self.window {
                break;
            }
            if let Some(q) = by_address.get_mut(from) {
                q.pop_front();
                if q.is_empty() {
                    by_address.remove(from);
                }
            }
            all.pop_front();
        }
        let wait = |since: Instant| {
            self.window
                .saturating_sub(now.saturating_duration_since(since))
        };
        if all.len() >= Self::IN_ALL {
            return Err(Refused {
                wait: all.front().map_or(self.window, |(_, at, _)| wait(*at)),
                everyone: true,
            });
        }
        let key = address.map(address_key);
        let mine = by_address.entry(key.clone()).or_default();
        if mine.len() >= self.per_address {
            return Err(Refused {
                wait: mine.front().map_or(self.window, |(_, at)| wait(*at)),
                everyone: false,
            });
        }
        let seq = *next;
        *next += 1;
        mine.push_back((seq, now));
        all.push_back((seq, now, key.clone()));
        Ok(Counted {
            epoch: self.epoch,
            seq,
            address: key,
        })
    }

    /// Takes a finished sign-in's start off the count, if it is still on it (counted by this
    /// process, and not older than the window).
    pub fn release(&self, counted: &Counted) {
        if counted.epoch != self.epoch {
            return;
        }
        let mut starts = self.starts.lock().unwrap_or_else(|e| e.into_inner());
        let Starts {
            all, by_address, ..
        } = &mut *starts;
        let Some(mine) = by_address.get_mut(&counted.address) else {
            return;
        };
        let Some(i) = mine.iter().position(|(seq, _)| *seq == counted.seq) else {
            return;
        };
        mine.remove(i);
        if mine.is_empty() {
            by_address.remove(&counted.address);
        }
        // Numbered in order: found by halves.
        if let Ok(i) = all.binary_search_by_key(&counted.seq, |(seq, _, _)| *seq) {
            all.remove(i);
        }
    }
}

/// A start [`PendingStarts::admit`] refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Refused {
    /// Until a start may be counted again.
    pub wait: Duration,
    /// The bound for all addresses together was reached, not the address's own.
    pub everyone: bool,
}

impl Refused {
    /// Whole seconds, rounded up: a client waiting this long is not refused again.
    pub fn retry_after_s(&self) -> u64 {
        (self.wait.as_secs() + u64::from(self.wait.subsec_nanos() > 0)).max(1)
    }

    /// What the person is told.
    pub fn error(&self) -> SignInError {
        let minutes = self.retry_after_s().div_ceil(60);
        if self.everyone {
            SignInError::Busy { minutes }
        } else {
            SignInError::TooMany { minutes }
        }
    }
}

/// What [`PendingStarts`] counts an address as: an IPv6 address by its /64.
fn address_key(address: &str) -> String {
    match address.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V6(v6)) if v6.to_ipv4_mapped().is_none() => {
            let s = v6.segments();
            format!("{:x}:{:x}:{:x}:{:x}::/64", s[0], s[1], s[2], s[3])
        }
        _ => address.to_string(),
    }
}

impl std::fmt::Debug for Oidc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Oidc")
            .field("issuer", &self.config.issuer)
            .field("client_id", &self.config.client_id)
            .finish_non_exhaustive()
    }
}

impl Oidc {
    pub fn new(config: OidcConfig) -> anyhow::Result<Oidc> {
        // No redirects: a provider answering discovery or the token request with a redirect
        // could otherwise send the code to a third party (SSRF).
        let http = openidconnect::reqwest::ClientBuilder::new()
            .redirect(openidconnect::reqwest::redirect::Policy::none())
            .timeout(Duration::from_secs(10))
            .build()?;
        Ok(Oidc {
            pending: PendingStarts::new(
                config.pending_per_address,
                PENDING_FOR.to_std().unwrap_or(Duration::from_secs(600)),
            ),
            finished: PendingStarts::new(
                FINISHED_PER_PERSON,
                PENDING_FOR.to_std().unwrap_or(Duration::from_secs(600)),
            ),
            config,
            http,
            provider: tokio::sync::Mutex::new(None),
        })
    }

    pub fn issuer(&self) -> &str {
        &self.config.issuer
    }

    pub fn provider_name(&self) -> &str {
        &self.config.provider_name
    }

    fn unreachable(&self, e: impl std::fmt::Display) -> SignInError {
        SignInError::Unreachable {
            issuer: self.config.issuer.clone(),
            detail: e.to_string(),
        }
    }

    async fn provider(&self, fresh: bool) -> Result<Arc<Provider>, SignInError> {
        let mut slot = self.provider.lock().await;
        if let Some(p) = slot.as_ref() {
            if !fresh && p.fetched.elapsed() < REDISCOVER_AFTER {
                return Ok(p.clone());
            }
        }
        let issuer = IssuerUrl::new(self.config.issuer.clone()).map_err(|e| self.unreachable(e))?;
        let metadata = ProviderMetadataWithLogout::discover_async(issuer, &self.http)
            .await
            .map_err(|e| self.unreachable(error_chain(&e)))?;
        let end_session = metadata.additional_metadata().end_session_endpoint.clone();
        let redirect =
            RedirectUrl::new(self.config.redirect_url.clone()).map_err(|e| self.unreachable(e))?;
        let client = GantryClient::from_provider_metadata(
            metadata,
            ClientId::new(self.config.client_id.clone()),
            self.config
                .client_secret
                .as_ref()
                .map(|s| ClientSecret::new(s.expose_secret().to_string())),
        )
        .set_redirect_uri(redirect);
        let p = Arc::new(Provider {
            client,
            end_session,
            fetched: Instant::now(),
        });
        *slot = Some(p.clone());
        tracing::info!(issuer = %self.config.issuer, "OpenID provider discovered");
        Ok(p)
    }

    /// Starts a sign-in: the provider's authorization URL, and what to keep until the
    /// browser comes back.
    pub async fn begin(
        &self,
        next: &str,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<(String, Pending), SignInError> {
        let p = self.provider(false).await?;
        let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
        let mut request = p.client.authorize_url(
            CoreAuthenticationFlow::AuthorizationCode,
            CsrfToken::new_random,
            Nonce::new_random,
        );
        for scope in self.config.scopes.iter().filter(|s| *s != "openid") {
            request = request.add_scope(Scope::new(scope.clone()));
        }
        let (url, state, nonce) = request.set_pkce_challenge(challenge).url();
        Ok((
            url.to_string(),
            Pending {
                state: state.secret().clone(),
                nonce: nonce.secret().clone(),
                pkce_verifier: verifier.secret().clone(),
                next: next.to_string(),
                started_at_ms: now.timestamp_millis(),
                counted: None,
            },
        ))
    }

    /// Ends a sign-in: checks `state`, exchanges the code (with the PKCE verifier) and
    /// verifies the ID token (signature, issuer, audience, expiry, nonce, access-token hash).
    pub async fn finish(
        &self,
        pending: Pending,
        state: &str,
        code: &str,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<SignedIn, SignInError> {
        use subtle_eq::ct_eq;
        if !ct_eq(pending.state.as_bytes(), state.as_bytes()) {
            return Err(SignInError::StateMismatch);
        }
        if now.timestamp_millis() - pending.started_at_ms > PENDING_FOR.num_milliseconds() {
            return Err(SignInError::Stale);
        }
        let p = self.provider(false).await?;
        let request = p
            .client
            .exchange_code(AuthorizationCode::new(code.to_string()))
            .map_err(|e| self.unreachable(e))?;
        let response = request
            .set_pkce_verifier(PkceCodeVerifier::new(pending.pkce_verifier.clone()))
            .request_async(&self.http)
            .await
            .map_err(|e| match e {
                RequestTokenError::ServerResponse(r)
                    if *r.error() == CoreErrorResponseType::InvalidGrant =>
                {
                    SignInError::CodeRejected
                }
                RequestTokenError::ServerResponse(r) => SignInError::Refused(format!(
                    "{}{}",
                    r.error().as_ref(),
                    r.error_description()
                        .map(|d| format!(": {d}"))
                        .unwrap_or_default()
                )),
                other => self.unreachable(error_chain(&other)),
            })?;
        let id_token = response
            .id_token()
            .ok_or_else(|| SignInError::Verification("the token response has no ID token".into()))?
            .clone();
        let nonce = Nonce::new(pending.nonce.clone());
        // The provider whose keys verified the token: its at_hash is checked with the same key.
        let mut keys = p;
        let first = id_token
            .claims(&keys.client.id_token_verifier(), &nonce)
            .cloned()
            .map_err(|e| e.to_string());
        let claims = match first {
            Ok(c) => c,
            // The keys may have been rotated since discovery: fetch them once more (and check
            // at_hash with the new ones too: with the old set the key is not found).
            Err(first) => {
                keys = self.provider(true).await?;
                id_token
                    .claims(&keys.client.id_token_verifier(), &nonce)
                    .map_err(|_| SignInError::Verification(first))?
                    .clone()
            }
        };
        if let Some(expected) = claims.access_token_hash() {
            let verifier = keys.client.id_token_verifier();
            let alg = id_token
                .signing_alg()
                .map_err(|e| SignInError::Verification(e.to_string()))?;
            let key = id_token
                .signing_key(&verifier)
                .map_err(|e| SignInError::Verification(e.to_string()))?;
            let actual = AccessTokenHash::from_token(response.access_token(), alg, key)
                .map_err(|e| SignInError::Verification(e.to_string()))?;
            if actual != *expected {
                return Err(SignInError::Verification(
                    "the access token does not match the ID token's at_hash".into(),
                ));
            }
        }
        let extra = &claims.additional_claims().0;
        let groups = groups_of(extra.get(&self.config.groups_claim));
        let subject = claims.subject().as_str().to_string();
        let user_name = claims
            .preferred_username()
            .map(|u| u.as_str().to_string())
            .or_else(|| {
                claims
                    .email()
                    .and_then(|e| e.as_str().split('@').next().map(String::from))
            })
            .unwrap_or_else(|| subject.clone());
        let display_name = claims
            .name()
            .and_then(|n| n.get(None))
            .map(|n| n.as_str().to_string())
            .unwrap_or_else(|| user_name.clone());
        let (teams, is_admin) = self.grants(&groups);
        Ok(SignedIn {
            issuer: claims.issuer().as_str().to_string(),
            subject,
            user_name: user_id_from(&user_name),
            display_name,
            email: claims.email().map(|e| e.as_str().to_string()),
            groups,
            teams,
            is_admin,
            id_token: id_token.to_string(),
        })
    }

    /// Teams and roles from IdP groups, by configuration; a lead grant wins over member.
    pub fn grants(&self, groups: &[String]) -> (Vec<Membership>, bool) {
        grants(&self.config.groups, groups)
    }

    /// Where to send the browser after Gantry's own sign-out: the provider's end-session
    /// endpoint when it offers one (RP-initiated logout), else `None`.
    pub async fn logout_url(&self, id_token: Option<&str>) -> Option<String> {
        let p = self.provider(false).await.ok()?;
        let end = p.end_session.clone()?;
        let mut req =
            LogoutRequest::from(end).set_client_id(ClientId::new(self.config.client_id.clone()));
        if let Ok(u) = PostLogoutRedirectUrl::new(self.config.post_logout_url()) {
            req = req.set_post_logout_redirect_uri(u);
        }
        if let Some(t) = id_token.and_then(|t| t.parse::<GantryIdToken>().ok()) {
            req = req.set_id_token_hint(&t);
        }
        Some(req.http_get_url().to_string())
    }
}

/// The groups claim as a list: an array of strings, or one string.
fn groups_of(v: Option<&serde_json::Value>) -> Vec<String> {
    match v {
        Some(serde_json::Value::Array(a)) => a
            .iter()
            .filter_map(|g| g.as_str().map(String::from))
            .collect(),
        Some(serde_json::Value::String(s)) => vec![s.clone()],
        _ => Vec::new(),
    }
}

pub fn grants(
    mapping: &std::collections::BTreeMap<String, String>,
    groups: &[String],
) -> (Vec<Membership>, bool) {
    let mut is_admin = false;
    let mut leads = BTreeSet::new();
    let mut members = BTreeSet::new();
    for g in groups {
        match mapping.get(g).and_then(|v| GroupGrant::parse(v)) {
            Some(GroupGrant::Admin) => is_admin = true,
            Some(GroupGrant::Team { team, lead: true }) => {
                leads.insert(team);
            }
            Some(GroupGrant::Team { team, lead: false }) => {
                members.insert(team);
            }
            None => {}
        }
    }
    let mut teams: Vec<Membership> = leads
        .iter()
        .map(|t| Membership {
            team: t.clone(),
            role: Role::Lead,
        })
        .collect();
    teams.extend(members.difference(&leads).map(|t| Membership {
        team: t.clone(),
        role: Role::Member,
    }));
    teams.sort_by(|a, b| a.team.cmp(&b.team));
    (teams, is_admin)
}

/// A user id Gantry can show and put in URLs: lowercase letters, digits, `.`, `_`, `-`.
fn user_id_from(name: &str) -> String {
    let id: String = name
        .trim()
        .to_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '-'
            }
        })
        .take(64)
        .collect();
    if id.trim_matches('-').is_empty() {
        "user".into()
    } else {
        id
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(s) = cur {
        out.push_str(": ");
        out.push_str(&s.to_string());
        cur = s.source();
    }
    out
}

mod subtle_eq {
    /// Compares without stopping at the first difference.
    pub fn ct_eq(a: &[u8], b: &[u8]) -> bool {
        a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pending_sign_in_keeps_its_secrets_out_of_debug() {
        let p = Pending {
            state: "state-s3cr3t".into(),
            nonce: "nonce-s3cr3t".into(),
            pkce_verifier: "verifier-s3cr3t".into(),
            next: "/jobs".into(),
            started_at_ms: 1,
            counted: None,
        };
        let shown = format!("{p:?}");
        assert!(!shown.contains("s3cr3t"), "{shown}");
        assert!(shown.contains("/jobs"), "{shown}");
        // Nor does who signed in show their ID token, nor a new webhook its secret.
        let who = SignedIn {
            issuer: "https://idp.example.com".into(),
            subject: "s-1".into(),
            user_name: "dana".into(),
            display_name: "Dana".into(),
            email: None,
            groups: vec![],
            teams: vec![],
            is_admin: false,
            id_token: "eyJ.s3cr3t.sig".into(),
        };
        let shown = format!("{who:?}");
        assert!(
            !shown.contains("s3cr3t") && shown.contains("dana"),
            "{shown}"
        );
        let hook = app::model::CreatedWebhook {
            webhook: app::model::WebhookInfo {
                id: "w-1".into(),
                url: "https://hooks.example.com/…abcd".into(),
                kind: "generic".into(),
                events: vec![],
                team: None,
                created_by: "dana".into(),
                created_at: chrono::Utc::now(),
            },
            secret: "whsec-s3cr3t".into(),
        };
        let shown = format!("{hook:?}");
        assert!(
            !shown.contains("s3cr3t") && shown.contains("w-1"),
            "{shown}"
        );
    }

    #[test]
    fn sign_ins_started_are_bounded_per_address_and_in_all() {
        let limit = PendingStarts::new(3, Duration::from_secs(600));
        let t0 = Instant::now();
        let at = |secs| t0 + Duration::from_secs(secs);
        for i in 0..3 {
            assert!(limit.admit(Some("192.0.2.1"), at(i)).is_ok());
        }
        // The fourth waits until the first is 10 minutes old.
        let refused = limit.admit(Some("192.0.2.1"), at(100)).unwrap_err();
        assert_eq!(
            refused,
            Refused {
                wait: Duration::from_secs(500),
                everyone: false
            }
        );
        assert_eq!(refused.retry_after_s(), 500);
        assert!(refused.error().to_string().contains("from your address"));
        assert!(
            limit.admit(Some("192.0.2.2"), at(100)).is_ok(),
            "another address"
        );
        assert!(
            limit.admit(Some("192.0.2.1"), at(600)).is_ok(),
            "the first expired"
        );
        assert!(limit.admit(Some("192.0.2.1"), at(600)).is_err());
        // An IPv6 address counts by its /64: its holder has all of it.
        for i in 1..=3 {
            let a = format!("2001:db8:1:2::{i}");
            assert!(limit.admit(Some(&a), at(700)).is_ok());
        }
        assert!(limit.admit(Some("2001:db8:1:2:ffff::9"), at(700)).is_err());
        assert!(limit.admit(Some("2001:db8:1:3::1"), at(700)).is_ok());

        // All addresses together: the store holds at most IN_ALL pending sign-ins.
        let limit = PendingStarts::new(1, Duration::from_secs(600));
        for i in 0..PendingStarts::IN_ALL {
            let a = format!("10.{}.{}.{}", i >> 16, (i >> 8) & 255, i & 255);
            assert!(limit.admit(Some(&a), at(i as u64 / 100)).is_ok(), "{a}");
        }
        let last = PendingStarts::IN_ALL as u64 / 100;
        let refused = limit.admit(Some("203.0.113.9"), at(last)).unwrap_err();
        assert_eq!(
            refused,
            Refused {
                wait: Duration::from_secs(600 - last),
                everyone: true
            }
        );
        assert!(refused
            .error()
            .to_string()
            .contains("in progress on this server"));
        // Rounded up: waiting exactly that long is enough.
        let part = Refused {
            wait: Duration::from_millis(1500),
            everyone: false,
        };
        assert_eq!(part.retry_after_s(), 2);
        // As the oldest expire, room comes back.
        assert!(limit.admit(Some("203.0.113.9"), at(600)).is_ok());
    }

    /// A sign-in that finishes is taken off its address's count and all addresses' count;
    /// one counted by another process, or already expired, takes nothing off.
    #[test]
    fn a_finished_sign_in_is_taken_off_the_count() {
        let limit = PendingStarts::new(2, Duration::from_secs(600));
        let t0 = Instant::now();
        let at = |secs| t0 + Duration::from_secs(secs);
        let first = limit.admit(Some("192.0.2.1"), at(0)).unwrap();
        let second = limit.admit(Some("192.0.2.1"), at(1)).unwrap();
        assert!(limit.admit(Some("192.0.2.1"), at(2)).is_err());
        limit.release(&second);
        let third = limit.admit(Some("192.0.2.1"), at(3)).unwrap();
        assert!(
            limit.admit(Some("192.0.2.1"), at(4)).is_err(),
            "one place came back, not two"
        );
        // Released twice, or counted by a process before a restart: nothing more comes back.
        limit.release(&second);
        let elsewhere = PendingStarts::new(2, Duration::from_secs(600));
        limit.release(&elsewhere.admit(Some("192.0.2.1"), at(5)).unwrap());
        assert!(limit.admit(Some("192.0.2.1"), at(5)).is_err());
        // The first expires at 600 s; released after that, it does not free the third's place.
        assert!(limit.admit(Some("192.0.2.1"), at(600)).is_ok());
        limit.release(&first);
        assert!(limit.admit(Some("192.0.2.1"), at(601)).is_err());
        limit.release(&third);
        assert!(limit.admit(Some("192.0.2.1"), at(602)).is_ok());
        // All addresses' count is taken off too: IN_ALL starts, one released, one more fits.
        let limit = PendingStarts::new(1, Duration::from_secs(600));
        let mut one = None;
        for i in 0..PendingStarts::IN_ALL {
            let a = format!("10.{}.{}.{}", i >> 16, (i >> 8) & 255, i & 255);
            let c = limit.admit(Some(&a), at(0)).unwrap();
            if i == 1234 {
                one = Some(c);
            }
        }
        assert!(
            limit
                .admit(Some("203.0.113.9"), at(1))
                .unwrap_err()
                .everyone
        );
        limit.release(&one.unwrap());
        assert!(limit.admit(Some("203.0.113.9"), at(1)).is_ok());
        assert!(
            limit
                .admit(Some("203.0.113.10"), at(1))
                .unwrap_err()
                .everyone
        );
    }

    #[test]
    fn groups_map_to_teams_and_roles() {
        let mapping = [
            ("ml-nlp", "nlp:member"),
            ("ml-nlp-leads", "nlp:lead"),
            ("ml-vision", "vision:member"),
            ("ml-platform-admins", "admin"),
        ]
        .into_iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
        let g = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let (teams, admin) = grants(&mapping, &g(&["ml-nlp", "ml-nlp-leads", "unrelated"]));
        assert_eq!(
            teams,
            vec![Membership {
                team: "nlp".into(),
                role: Role::Lead
            }]
        );
        assert!(!admin);
        let (teams, admin) = grants(&mapping, &g(&["ml-vision", "ml-platform-admins"]));
        assert_eq!(teams.len(), 1);
        assert_eq!(teams[0].role, Role::Member);
        assert!(admin);
        assert_eq!(grants(&mapping, &g(&["other"])), (vec![], false));
    }

    #[test]
    fn groups_claim_may_be_a_list_or_one_string() {
        use serde_json::json;
        assert_eq!(groups_of(Some(&json!(["a", "b", 3]))), vec!["a", "b"]);
        assert_eq!(groups_of(Some(&json!("a"))), vec!["a"]);
        assert!(groups_of(None).is_empty());
    }

    #[test]
    fn user_ids_are_safe_to_show() {
        assert_eq!(user_id_from("Nina.Kowalski"), "nina.kowalski");
        assert_eq!(user_id_from("a b/c"), "a-b-c");
        assert_eq!(user_id_from("  "), "user");
    }

    #[test]
    fn state_comparison() {
        assert!(subtle_eq::ct_eq(b"abc", b"abc"));
        assert!(!subtle_eq::ct_eq(b"abc", b"abd"));
        assert!(!subtle_eq::ct_eq(b"abc", b"ab"));
    }
}
