//! Who people are: sign-in through an OpenID provider, sign-in audit, readiness of the
//! store that holds them, and the sim clock an admin may move.

use crate::error::Error;
use app::model::Viewer;
use chrono::{DateTime, Utc};

use super::*;
use crate::db::DbError;
use crate::domain::audit::AuditEntry;
use crate::domain::identity::IdentitySignIn;

impl Portal {
    /// Whether the database answers (`/readyz`).
    pub async fn database_ready(&self) -> Result<(), DbError> {
        self.db.ping().await
    }

    /// The cluster's clock.
    pub fn now(&self) -> DateTime<Utc> {
        self.cluster.now()
    }

    /// The teams Gantry has, to map a provider's groups onto.
    pub async fn team_ids(&self) -> Result<Vec<String>, Error> {
        Ok(self.db.team_ids().await?)
    }

    /// Records a sign-in through the OpenID provider; the user id it is known by.
    pub async fn sign_in_identity(&self, record: &IdentitySignIn<'_>) -> Result<String, Error> {
        Ok(self.db.sign_in_identity(record).await?)
    }

    /// An admin's sign-in, in the audit log.
    pub async fn audit_sign_in(
        &self,
        user: &str,
        method: &str,
        address: Option<String>,
    ) -> Result<(), Error> {
        let mut entry = AuditEntry::new(user, "auth.sign_in", user, Utc::now());
        entry.after = Some(serde_json::json!({ "method": method }));
        entry.address = address;
        self.audit(entry).await
    }

    /// Moves the manual sim clock by `seconds` (admins only); the new time.
    pub async fn advance_sim(&self, viewer: &Viewer, seconds: i64) -> Result<DateTime<Utc>, Error> {
        let Some(sim) = self.sim.as_ref() else {
            return Err(Error::not_found(
                "the sim clock exists only with the sim back end",
            ));
        };
        if !viewer.is_admin {
            return Err(Error::forbidden("only an admin can move the sim clock"));
        }
        if !(1..=30 * 86400).contains(&seconds) {
            return Err(Error::invalid(
                "seconds",
                "must be between 1 and 2592000 (30 days)",
            ));
        }
        let Some(now) = sim.advance(chrono::Duration::seconds(seconds)) else {
            return Err(Error::conflict(
                "the sim clock is scaled; set GANTRY__SIM__CLOCK=manual to move it by hand",
            ));
        };
        self.sync().await;
        if let Err(e) = self.db.save_sim_clock(now).await {
            tracing::warn!(error = %e, "could not save the sim clock");
        }
        Ok(now)
    }
}

/// Live (unrevoked) personal API tokens a user may hold.
pub const MAX_LIVE_TOKENS: usize = 20;

fn token_info(t: crate::db::TokenRow) -> ApiTokenInfo {
    ApiTokenInfo {
        id: t.id,
        name: t.name,
        prefix: t.prefix,
        created_at: t.created_at,
        expires_at: t.expires_at,
        last_used_at: t.last_used_at,
        revoked_at: t.revoked_at,
        expired: t.expires_at.is_some_and(|at| at <= Utc::now()),
    }
}

impl Portal {
    /// Moves whenever a write to the database has completed (see [`crate::db::Db::changes`]).
    pub fn data_changes(&self) -> u64 {
        self.db.changes()
    }

    pub fn session_limits(&self) -> session::SessionLimits {
        self.session_limits
    }

    /// The user a personal API token stands for; 401 for an unknown, revoked or expired one.
    pub async fn viewer_by_token(&self, token: &str) -> Result<Viewer, Error> {
        let refused = || {
            Error::unauthorized("this API token is not valid: it is unknown, revoked or expired")
        };
        let row = self
            .db
            .token_by_hash(&crate::domain::token::token_hash(token))
            .await?
            .ok_or_else(refused)?;
        let now = Utc::now();
        if !row.live_at(now) {
            return Err(refused());
        }
        // Teams and role are what the owner's groups gave at their last sign-in: a token
        // works only while that is recent, so one taken out of a group at the provider (or
        // gone) does not keep its rights through a token.
        if let Some(days) = self.token_sign_in_days {
            let last = self.db.last_sign_in(&row.user).await?;
            if last.is_none_or(|t| now - t > chrono::TimeDelta::days(days.into())) {
                return Err(Error::unauthorized(format!(
                    "this API token's owner has not signed in to Gantry through {} in the last {days} days, so their teams and role may be out of date: sign in to Gantry once and the token works again",
                    self.sso_provider.as_deref().unwrap_or("the identity provider")
                )));
            }
        }
        // "Last used" to the minute: not a database write on every call.
        if row
            .last_used_at
            .is_none_or(|t| now - t > chrono::TimeDelta::minutes(1))
        {
            self.db.touch_token(&row.id, now).await?;
        }
        self.db.get_viewer(&row.user).await?.ok_or_else(refused)
    }

    pub async fn viewer_by_id(&self, user: &str) -> Result<Option<Viewer>, Error> {
        crate::input::single_line("user", user)?;
        Ok(self.db.get_viewer(user).await?)
    }

    /// [`Portal::viewer_by_id`] for a request that only reads (`read_only`, see
    /// [`super::only_reads`]: a page, an API read, a server function that only reads):
    /// answered from memory while nothing was written (`db::memo`). An action reads the
    /// database: what it may do follows a role taken away even by a write other than through
    /// this process.
    pub async fn viewer_by_id_for(
        &self,
        user: &str,
        read_only: bool,
    ) -> Result<Option<Viewer>, Error> {
        if !read_only {
            return self.viewer_by_id(user).await;
        }
        crate::input::single_line("user", user)?;
        Ok(self
            .db
            .memo(format!("viewer {user:?}"), || self.db.get_viewer(user))
            .await?)
    }

    /// The signed-in user of this request. A page asks for it once per server function it
    /// renders (three or four times); with [`ViewerMemo`] in the request, as the router puts
    /// it, the session and the user are read once per request.
    pub async fn viewer(&self, parts: &http::request::Parts) -> Result<Option<Viewer>, Error> {
        let Some(session) = parts.extensions.get::<tower_sessions::Session>() else {
            return Ok(None);
        };
        let read = || async {
            match session::session_user(session, self.session_limits).await? {
                Some(user) => {
                    let read_only = super::only_reads(&parts.method, parts.uri.path());
                    self.viewer_by_id_for(&user, read_only).await
                }
                None => Ok(None),
            }
        };
        match parts.extensions.get::<ViewerMemo>() {
            Some(memo) => memo.0.get_or_try_init(read).await.cloned(),
            None => read().await,
        }
    }

    pub async fn sign_in_options(
        &self,
        parts: &http::request::Parts,
    ) -> Result<SignInOptions, Error> {
        // Read again only after a write, as the pages' reads are (`db::memo`): the sign-in
        // page is every visitor's first, and this statement was about 45 % of its CPU (page
        // bench, /login: 293-302 µs a request with it, 164-172 without).
        let demo_users = if self.dev_login {
            self.db
                .memo("demo users".to_string(), || self.db.list_viewers())
                .await?
        } else {
            Vec::new()
        };
        let ended = match parts.extensions.get::<tower_sessions::Session>() {
            Some(s) => session::session_ended(s).await,
            None => None,
        };
        Ok(SignInOptions {
            demo_users,
            sso_provider: self.sso_provider.clone(),
            ended,
        })
    }

    pub async fn list_tokens(&self, viewer: &Viewer) -> Result<Vec<ApiTokenInfo>, Error> {
        Ok(self
            .db
            .list_tokens(&viewer.user)
            .await?
            .into_iter()
            .map(token_info)
            .collect())
    }

    pub async fn create_token(
        &self,
        viewer: &Viewer,
        name: String,
        expires_in_days: Option<u32>,
    ) -> Result<NewApiToken, Error> {
        crate::input::single_line("name", &name)?;
        let name = name.trim().to_string();
        if name.is_empty() || name.chars().count() > 64 {
            return Err(Error::invalid(
                "name",
                "give the token a name of 1 to 64 characters, e.g. \"ci-pipeline\"",
            ));
        }
        if let Some(d) = expires_in_days {
            if !(1..=365).contains(&d) {
                return Err(Error::invalid(
                    "expires_in_days",
                    format!("must be 1 to 365 days, or empty for no expiry; got {d}"),
                ));
            }
        }
        let now = Utc::now();
        // Expired tokens are not live: they take no place (and have no Revoke button).
        let live = self
            .db
            .list_tokens(&viewer.user)
            .await?
            .iter()
            .filter(|t| t.live_at(now))
            .count();
        if live >= MAX_LIVE_TOKENS {
            return Err(Error::conflict(format!(
                "you already have {live} live tokens, the most allowed; revoke one first"
            )));
        }
        let (token, hash) = crate::domain::token::new_token();
        let row = crate::db::TokenRow {
            id: uuid::Uuid::now_v7().to_string(),
            user: viewer.user.clone(),
            name,
            prefix: token
                .chars()
                .take(crate::domain::token::TOKEN_PREFIX.len() + 4)
                .collect(),
            created_at: now,
            expires_at: expires_in_days.map(|d| now + chrono::TimeDelta::days(d.into())),
            last_used_at: None,
            revoked_at: None,
        };
        self.db.insert_token(&row, &hash).await?;
        let mut entry = crate::db::AuditEntry::new(&viewer.user, "token.create", &viewer.user, now);
        entry.after =
            Some(serde_json::json!({"id": row.id, "name": row.name, "expires_at": row.expires_at}));
        self.audit(entry).await?;
        Ok(NewApiToken {
            token,
            info: token_info(row),
            sign_in_days: self.token_sign_in_days,
        })
    }

    /// Revokes one of the viewer's tokens, or for an admin anyone's: an admin takes away the
    /// token of someone who left, or one that leaked, without waiting for its owner. The
    /// audit log names the owner as the target. Anyone else's token id answers as unknown, as
    /// if it did not exist.
    pub async fn revoke_token(&self, viewer: &Viewer, id: &str) -> Result<(), Error> {
        crate::input::single_line("id", id)?;
        let now = Utc::now();
        // The audit entry names the token as an admin's revocation of another's does.
        let name = self
            .db
            .list_tokens(&viewer.user)
            .await?
            .into_iter()
            .find(|t| t.id == id)
            .map(|t| t.name);
        if self.db.revoke_token(&viewer.user, id, now).await? {
            let mut entry =
                crate::db::AuditEntry::new(&viewer.user, "token.revoke", &viewer.user, now);
            entry.before = Some(serde_json::json!({"id": id, "name": name, "user": viewer.user}));
            return self.audit(entry).await;
        }
        if viewer.is_admin {
            if let Some(t) = self.db.revoke_any_token(id, now).await? {
                let mut entry =
                    crate::db::AuditEntry::new(&viewer.user, "token.revoke", &t.user, now);
                entry.before = Some(serde_json::json!({"id": id, "name": t.name, "user": t.user}));
                return self.audit(entry).await;
            }
            return Err(Error::not_found(format!(
                "no user has a live API token with id '{id}'"
            )));
        }
        Err(Error::not_found(format!(
            "you have no live API token with id '{id}'"
        )))
    }

    /// Every user's live API tokens, or one user's (admins only): a page of them by user,
    /// newest first within each (`limit`, 50 by default, at most 200), from the `cursor` an
    /// earlier page gave, with how many there are in all.
    pub async fn live_tokens(
        &self,
        viewer: &Viewer,
        user: Option<String>,
        cursor: Option<&str>,
        limit: Option<u32>,
    ) -> Result<UserApiTokens, Error> {
        if !viewer.is_admin {
            return Err(Error::forbidden(
                "only admins list other people's API tokens; yours are on your profile page",
            ));
        }
        let user = user.map(|u| u.trim().to_string()).filter(|u| !u.is_empty());
        crate::input::single_line_opt("user", user.as_deref())?;
        let limit = super::page::page_size(limit)?;
        let after = match cursor.map(str::trim).filter(|c| !c.is_empty()) {
            None => None,
            Some(c) => Some(super::page::decode_user_cursor(c).ok_or_else(|| {
                Error::invalid(
                    "cursor",
                    "the next_cursor of an earlier page, as it was given",
                )
            })?),
        };
        // A place in one user's list is not a place in another's: their pages would not join up.
        if let (Some(u), Some((at_user, _, _))) = (&user, &after) {
            if u != at_user {
                return Err(Error::invalid(
                    "cursor",
                    format!("this cursor is a place in another list, not in user '{u}''s tokens; leave it out to start from the first page"),
                ));
            }
        }
        // One more than a page: whether there is a next page.
        let (mut rows, total) = self
            .db
            .live_tokens(
                user.as_deref(),
                Utc::now(),
                after.as_ref(),
                i64::from(limit) + 1,
            )
            .await?;
        let next_cursor = if rows.len() > limit as usize {
            rows.truncate(limit as usize);
            rows.last()
                .map(|t| super::page::encode_user_cursor(&t.user, t.created_at, &t.id))
        } else {
            None
        };
        Ok(UserApiTokens {
            tokens: rows
                .into_iter()
                .map(|t| UserApiToken {
                    user: t.user.clone(),
                    info: token_info(t),
                })
                .collect(),
            total,
            next_cursor,
        })
    }
}

/// The viewer of one request, read at most once (see [`Portal::viewer`]). Clones share it: a
/// page's server functions each get a clone of the request's parts.
#[derive(Clone, Default)]
pub struct ViewerMemo(std::sync::Arc<tokio::sync::OnceCell<Option<Viewer>>>);

/// Middleware: gives each request its own [`ViewerMemo`] and [`app::functions::RequestMemo`].
pub async fn memo_viewer(
    mut req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    req.extensions_mut().insert(ViewerMemo::default());
    req.extensions_mut()
        .insert(app::functions::RequestMemo::default());
    next.run(req).await
}
