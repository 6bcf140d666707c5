//! Sign-in settings: sessions, the demo sign-in, and the OpenID provider with its group →
//! team/role mapping.

use super::*;

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthConfig {
    /// Local sign-in by user name, for the embedded default only: loopback addresses only,
    /// never together with `[auth.oidc]`. Unset: on without OIDC, off with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dev_login: Option<bool>,
    /// Sessions end after this long without a request.
    pub session_idle_minutes: f64,
    /// Sessions end this long after sign-in, however busy.
    pub session_absolute_minutes: f64,
    /// Mark cookies `Secure`; also on whenever `auth.oidc.redirect_url` is https.
    pub secure_cookies: bool,
    /// Single sign-on through an OpenID provider (`[auth.oidc]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oidc: Option<OidcConfig>,
}

/// `[auth.oidc]`: an OpenID provider found by discovery from its issuer URL.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OidcConfig {
    /// The issuer, e.g. `https://idp.example.com/realms/ml`; http only on loopback.
    pub issuer: String,
    pub client_id: String,
    /// A secret: never logged, redacted in `Debug`. Unset for a public client (PKCE only).
    #[serde(
        default,
        serialize_with = "expose_opt",
        skip_serializing_if = "Option::is_none"
    )]
    pub client_secret: Option<SecretString>,
    /// Where the provider sends the browser back: Gantry's `/auth/callback`.
    pub redirect_url: String,
    #[serde(default = "default_scopes")]
    pub scopes: Vec<String>,
    /// The ID-token claim that lists the user's groups.
    #[serde(default = "default_groups_claim")]
    pub groups_claim: String,
    /// IdP group → `"team:member"`, `"team:lead"` or `"admin"`.
    #[serde(default)]
    pub groups: std::collections::BTreeMap<String, String>,
    /// Where the provider sends the browser after sign-out (RP-initiated logout); defaults
    /// to Gantry's `/login` next to `redirect_url`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub post_logout_redirect_url: Option<String>,
    /// The provider's name on the sign-in button, e.g. "Keycloak".
    #[serde(default = "default_provider_name")]
    pub provider_name: String,
    /// Sign-ins one client address may start in 10 minutes without a session cookie (each
    /// stores a session for the round trip to the provider); one more is a 429. Raise it when
    /// many people reach Gantry through one address that is not a trusted proxy (a NAT).
    #[serde(default = "default_pending_per_address")]
    pub pending_per_address: u32,
    /// A personal API token works only while its owner has signed in through the provider
    /// within this many days: teams and role come from the groups at sign-in, so someone
    /// taken out of a group (or gone) keeps a token's old rights until then at most. 0: no
    /// such bound (a token works until it expires or is revoked).
    #[serde(default = "default_token_sign_in_days")]
    pub token_sign_in_days: u32,
}

pub(super) fn default_token_sign_in_days() -> u32 {
    30
}

pub(super) fn default_pending_per_address() -> u32 {
    100
}

pub(super) fn default_scopes() -> Vec<String> {
    ["openid", "profile", "email", "groups"]
        .map(String::from)
        .to_vec()
}

pub(super) fn default_groups_claim() -> String {
    "groups".into()
}

pub(super) fn default_provider_name() -> String {
    "your identity provider".into()
}

pub(super) fn expose_opt<S: serde::Serializer>(
    s: &Option<SecretString>,
    ser: S,
) -> Result<S::Ok, S::Error> {
    match s {
        Some(s) => ser.serialize_str(s.expose_secret()),
        None => ser.serialize_none(),
    }
}

/// What an IdP group grants.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GroupGrant {
    Admin,
    Team { team: String, lead: bool },
}

/// `http` only for a loopback host; anything else must be `https`.
pub(super) fn check_url(key: &'static str, value: &str) -> Result<(), ConfigError> {
    let bad = |message: String| ConfigError::Invalid { key, message };
    let url = url::Url::parse(value).map_err(|e| bad(format!("'{value}' is not a URL: {e}")))?;
    let loopback = match url.host() {
        Some(url::Host::Domain(d)) => d == "localhost",
        Some(url::Host::Ipv4(a)) => a.is_loopback(),
        Some(url::Host::Ipv6(a)) => a.is_loopback(),
        None => false,
    };
    match url.scheme() {
        "https" => Ok(()),
        "http" if loopback => Ok(()),
        "http" => Err(bad(format!(
            "'{value}' must use https (http is accepted for loopback addresses only)"
        ))),
        other => Err(bad(format!("'{value}': scheme {other} is not http(s)"))),
    }
}

impl AuthConfig {
    /// Whether the local demo sign-in is served.
    pub fn dev_login(&self) -> bool {
        self.dev_login.unwrap_or(self.oidc.is_none())
    }

    /// Whether cookies carry `Secure`.
    pub fn secure(&self) -> bool {
        self.secure_cookies
            || self
                .oidc
                .as_ref()
                .is_some_and(|o| o.redirect_url.starts_with("https://"))
    }
}

impl GroupGrant {
    pub fn parse(v: &str) -> Option<GroupGrant> {
        if v == "admin" {
            return Some(GroupGrant::Admin);
        }
        let (team, role) = v.split_once(':')?;
        let team_ok = !team.is_empty()
            && team
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
        match role {
            "member" if team_ok => Some(GroupGrant::Team {
                team: team.into(),
                lead: false,
            }),
            "lead" if team_ok => Some(GroupGrant::Team {
                team: team.into(),
                lead: true,
            }),
            _ => None,
        }
    }
}

impl OidcConfig {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        check_url("auth.oidc.issuer", &self.issuer)?;
        check_url("auth.oidc.redirect_url", &self.redirect_url)?;
        if let Some(u) = &self.post_logout_redirect_url {
            check_url("auth.oidc.post_logout_redirect_url", u)?;
        }
        if self.client_id.trim().is_empty() {
            return Err(ConfigError::Invalid {
                key: "auth.oidc.client_id",
                message: "must not be empty".into(),
            });
        }
        if !self.scopes.iter().any(|s| s == "openid") {
            return Err(ConfigError::Invalid {
                key: "auth.oidc.scopes",
                message: format!("must include \"openid\", got {:?}", self.scopes),
            });
        }
        if !(1..=100_000).contains(&self.pending_per_address) {
            return Err(ConfigError::Invalid {
                key: "auth.oidc.pending_per_address",
                message: format!(
                    "must be from 1 to 100000 sign-ins, got {}",
                    self.pending_per_address
                ),
            });
        }
        if self.token_sign_in_days > 3650 {
            return Err(ConfigError::Invalid {
                key: "auth.oidc.token_sign_in_days",
                message: format!(
                    "must be from 0 (no bound) to 3650 days, got {}",
                    self.token_sign_in_days
                ),
            });
        }
        for (group, grant) in &self.groups {
            if GroupGrant::parse(grant).is_none() {
                return Err(ConfigError::Invalid {
                    key: "auth.oidc.groups",
                    message: format!(
                        "group \"{group}\" maps to \"{grant}\"; accepted: \"admin\", \"<team>:member\" or \"<team>:lead\""
                    ),
                });
            }
        }
        Ok(())
    }

    /// Where the provider sends the browser after RP-initiated logout.
    pub fn post_logout_url(&self) -> String {
        self.post_logout_redirect_url.clone().unwrap_or_else(|| {
            match url::Url::parse(&self.redirect_url).and_then(|u| u.join("/login")) {
                Ok(u) => u.to_string(),
                Err(_) => "/login".into(),
            }
        })
    }
}
