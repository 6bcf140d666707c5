//! Teams, users, memberships, sign-ins through the OpenID provider, personal API tokens.

use super::*;

/// A personal API token as stored (never the token itself).
#[derive(Clone, Debug, PartialEq)]
pub struct TokenRow {
    pub id: String,
    pub user: String,
    pub name: String,
    pub prefix: String,
    pub created_at: DateTime<Utc>,
    pub expires_at: Option<DateTime<Utc>>,
    pub last_used_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
}

impl TokenRow {
    /// Usable at `now`: not revoked and not past its expiry.
    pub fn live_at(&self, now: DateTime<Utc>) -> bool {
        self.revoked_at.is_none() && self.expires_at.is_none_or(|e| e > now)
    }
}

pub(super) const TOKEN_COLUMNS: &str =
    "token_id, user_id, name, prefix, created_at, expires_at, last_used_at, revoked_at";

pub(super) fn token_row(r: &AnyRow) -> Result<TokenRow> {
    let opt = |c: &str| -> Result<Option<DateTime<Utc>>> {
        Ok(r.try_get::<Option<i64>, _>(c)?.map(from_ms))
    };
    Ok(TokenRow {
        id: r.try_get("token_id")?,
        user: r.try_get("user_id")?,
        name: r.try_get("name")?,
        prefix: r.try_get("prefix")?,
        created_at: from_ms(r.try_get("created_at")?),
        expires_at: opt("expires_at")?,
        last_used_at: opt("last_used_at")?,
        revoked_at: opt("revoked_at")?,
    })
}

pub(super) fn role_name(role: Role) -> &'static str {
    match role {
        Role::Member => "member",
        Role::Lead => "lead",
    }
}

impl Db {
    pub async fn insert_team(&self, team: &str, display: &str, at: DateTime<Utc>) -> Result<()> {
        sqlx::query("INSERT INTO team (team_id, display_name, created_at) VALUES ($1, $2, $3) ON CONFLICT (team_id) DO NOTHING")
            .bind(team)
            .bind(display)
            .bind(ms(at))
            .execute(&*self.write())
            .await
            .map_err(map_err)?;
        Ok(())
    }

    pub async fn insert_user(
        &self,
        user: &str,
        display: &str,
        is_admin: bool,
        at: DateTime<Utc>,
    ) -> Result<()> {
        sqlx::query("INSERT INTO app_user (user_id, display_name, is_admin, created_at) VALUES ($1, $2, $3, $4) ON CONFLICT (user_id) DO NOTHING")
            .bind(user)
            .bind(display)
            .bind(is_admin as i64)
            .bind(ms(at))
            .execute(&*self.write())
            .await
            .map_err(map_err)?;
        Ok(())
    }

    pub async fn insert_membership(&self, user: &str, team: &str, role: Role) -> Result<()> {
        let role = role_name(role);
        sqlx::query("INSERT INTO membership (user_id, team_id, role) VALUES ($1, $2, $3) ON CONFLICT (user_id, team_id) DO NOTHING")
            .bind(user)
            .bind(team)
            .bind(role)
            .execute(&*self.write())
            .await
            .map_err(map_err)?;
        Ok(())
    }

    /// The user and their memberships, in one query (every page and API call asks).
    pub async fn get_viewer(&self, user: &str) -> Result<Option<Viewer>> {
        let rows = sqlx::query(&format!(
            "{VIEWER_ROWS} WHERE u.user_id = $1 ORDER BY m.team_id"
        ))
        .bind(user)
        .fetch_all(&self.pool)
        .await
        .map_err(map_err)?;
        Ok(viewers(&rows)?.pop())
    }

    /// Every user as a viewer, in one statement (the dev sign-in page lists them): plain
    /// users first, then by id.
    pub async fn list_viewers(&self) -> Result<Vec<Viewer>> {
        let rows = sqlx::query(&format!(
            "{VIEWER_ROWS} ORDER BY u.is_admin, u.user_id, m.team_id"
        ))
        .fetch_all(&self.pool)
        .await
        .map_err(map_err)?;
        viewers(&rows)
    }

    /// Records a sign-in through an OpenID provider: the user for `(issuer, subject)` is
    /// created or updated from the claims, and their memberships become exactly `teams`
    /// (the provider's groups are the truth). Returns the user id, which is
    /// `wanted_user_id` on first sign-in unless another person already has it.
    ///
    /// Two first sign-ins at once (two people whose names give the same id, or one person in
    /// two tabs) never share a user: a new id is claimed by an insert that does nothing when
    /// the id is taken, committed or not (Postgres waits for the other transaction), and a
    /// person whose identity was recorded meanwhile signs in again as the user it names.
    pub async fn sign_in_identity(&self, s: &IdentitySignIn<'_>) -> Result<String> {
        // Lost a race for the identity at most once per concurrent first sign-in of the same
        // person; the next round finds it recorded.
        for _ in 0..3 {
            if let Some(user) = self.try_sign_in_identity(s).await? {
                return Ok(user);
            }
        }
        Err(DbError::Conflict)
    }

    /// One try of [`Db::sign_in_identity`]; `None` (nothing written) when the same identity
    /// was recorded by another sign-in meanwhile.
    async fn try_sign_in_identity(&self, s: &IdentitySignIn<'_>) -> Result<Option<String>> {
        let mut tx = self.begin_write().await?;
        let known: Option<String> =
            sqlx::query("SELECT user_id FROM user_identity WHERE issuer = $1 AND subject = $2")
                .bind(s.issuer)
                .bind(s.subject)
                .fetch_optional(&mut *tx)
                .await
                .map_err(map_err)?
                .map(|r| r.try_get("user_id"))
                .transpose()?;
        let is_known = known.is_some();
        let user = match known {
            Some(u) => {
                put_user(
                    &mut tx,
                    &u,
                    s,
                    "DO UPDATE SET display_name = $2, email = $3, is_admin = $4",
                )
                .await?;
                u
            }
            None => {
                let mut candidate = s.wanted_user_id.to_string();
                let mut n = 1;
                loop {
                    if put_user(&mut tx, &candidate, s, "DO NOTHING").await? == 1 {
                        break candidate;
                    }
                    n += 1;
                    candidate = format!("{}-{n}", s.wanted_user_id);
                }
            }
        };
        sqlx::query("DELETE FROM membership WHERE user_id = $1")
            .bind(&user)
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
        for m in s.teams {
            sqlx::query("INSERT INTO membership (user_id, team_id, role) VALUES ($1, $2, $3)")
                .bind(&user)
                .bind(&m.team)
                .bind(role_name(m.role))
                .execute(&mut *tx)
                .await
                .map_err(map_err)?;
        }
        let recorded = if is_known {
            sqlx::query(
                "UPDATE user_identity SET idp_groups = $3, last_sign_in_at = $4 \
                 WHERE issuer = $1 AND subject = $2 AND user_id = $5",
            )
        } else {
            // Another first sign-in of the same person may have recorded it since the read
            // above: then this one wrote a user of its own, which must not stay.
            sqlx::query(
                "INSERT INTO user_identity (issuer, subject, idp_groups, last_sign_in_at, user_id) \
                 VALUES ($1, $2, $3, $4, $5) ON CONFLICT (issuer, subject) DO NOTHING",
            )
        }
        .bind(s.issuer)
        .bind(s.subject)
        .bind(serde_json::to_string(s.groups)?)
        .bind(ms(s.at))
        .bind(&user)
        .execute(&mut *tx)
        .await
        .map_err(map_err)?
        .rows_affected();
        if recorded != 1 {
            return Ok(None); // rolled back as the transaction drops
        }
        self.commit(tx).await?;
        Ok(Some(user))
    }

    pub async fn team_ids(&self) -> Result<Vec<String>> {
        let rows = sqlx::query("SELECT team_id FROM team ORDER BY team_id")
            .fetch_all(&self.pool)
            .await
            .map_err(map_err)?;
        rows.iter().map(|r| Ok(r.try_get("team_id")?)).collect()
    }

    pub async fn insert_token(&self, t: &TokenRow, hash: &str) -> Result<()> {
        sqlx::query(
            "INSERT INTO api_token (token_id, user_id, name, token_hash, prefix, created_at, expires_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
        )
        .bind(&t.id)
        .bind(&t.user)
        .bind(&t.name)
        .bind(hash)
        .bind(&t.prefix)
        .bind(ms(t.created_at))
        .bind(t.expires_at.map(ms))
        .execute(&*self.write())
        .await
        .map_err(map_err)?;
        Ok(())
    }

    pub async fn list_tokens(&self, user: &str) -> Result<Vec<TokenRow>> {
        let rows = sqlx::query(&format!(
            "SELECT {TOKEN_COLUMNS} FROM api_token WHERE user_id = $1 ORDER BY created_at DESC, token_id DESC"
        ))
        .bind(user)
        .fetch_all(&self.pool)
        .await
        .map_err(map_err)?;
        rows.iter().map(token_row).collect()
    }

    /// When `user` last signed in through an OpenID provider; `None`: never.
    pub async fn last_sign_in(&self, user: &str) -> Result<Option<DateTime<Utc>>> {
        let row =
            sqlx::query("SELECT MAX(last_sign_in_at) AS at FROM user_identity WHERE user_id = $1")
                .bind(user)
                .fetch_one(&self.pool)
                .await
                .map_err(map_err)?;
        Ok(row.try_get::<Option<i64>, _>("at")?.map(from_ms))
    }

    /// The token with this hash, revoked or not (the caller decides).
    pub async fn token_by_hash(&self, hash: &str) -> Result<Option<TokenRow>> {
        sqlx::query(&format!(
            "SELECT {TOKEN_COLUMNS} FROM api_token WHERE token_hash = $1"
        ))
        .bind(hash)
        .fetch_optional(&self.pool)
        .await
        .map_err(map_err)?
        .as_ref()
        .map(token_row)
        .transpose()
    }

    /// Revokes the user's token; false if they have no such live token.
    pub async fn revoke_token(&self, user: &str, id: &str, at: DateTime<Utc>) -> Result<bool> {
        let n = sqlx::query(
            "UPDATE api_token SET revoked_at = $1 WHERE token_id = $2 AND user_id = $3 AND revoked_at IS NULL",
        )
        .bind(ms(at))
        .bind(id)
        .bind(user)
        .execute(&*self.write())
        .await
        .map_err(map_err)?
        .rows_affected();
        Ok(n > 0)
    }

    /// Live tokens (not revoked, not expired at `now`), every user's or `user`'s: by user, newest
    /// first within each, at most `limit` after the place `after` (user, time, id), and how
    /// many live tokens there are in all (the place aside). The page and its count are one
    /// statement, so they agree: a token made or revoked meanwhile is in both or in neither.
    pub async fn live_tokens(
        &self,
        user: Option<&str>,
        now: DateTime<Utc>,
        after: Option<&(String, DateTime<Utc>, String)>,
        limit: i64,
    ) -> Result<(Vec<TokenRow>, u64)> {
        let live = format!(
            "revoked_at IS NULL AND (expires_at IS NULL OR expires_at > $1){}",
            if user.is_some() {
                " AND user_id = $2"
            } else {
                ""
            }
        );
        // The place's arguments come after the count's, which are the first of the page's.
        let n = if user.is_some() { 3 } else { 2 };
        let place = if after.is_some() {
            format!(
                " AND (user_id > ${n} OR (user_id = ${n} AND (created_at < ${} \
                 OR (created_at = ${} AND token_id < ${}))))",
                n + 1,
                n + 1,
                n + 2
            )
        } else {
            String::new()
        };
        let count = format!("SELECT COUNT(*) FROM api_token WHERE {live}");
        let list = format!(
            "SELECT {TOKEN_COLUMNS}, ({count}) AS n FROM api_token WHERE {live}{place} \
             ORDER BY user_id, created_at DESC, token_id DESC LIMIT {}",
            limit.max(0)
        );
        let mut q = sqlx::query(&list).bind(ms(now));
        if let Some(u) = user {
            q = q.bind(u);
        }
        if let Some((u, at, id)) = after {
            q = q.bind(u.as_str()).bind(ms(*at)).bind(id.as_str());
        }
        let rows = q.fetch_all(&self.pool).await.map_err(map_err)?;
        let total: i64 = match rows.first() {
            Some(r) => r.try_get("n")?,
            // An empty first page: none live, as the statement saw it.
            None if after.is_none() => 0,
            // An empty later page has no row to carry the count: past the last token.
            None => {
                let mut q = sqlx::query(&count).bind(ms(now));
                if let Some(u) = user {
                    q = q.bind(u);
                }
                q.fetch_one(&self.pool).await.map_err(map_err)?.try_get(0)?
            }
        };
        Ok((
            rows.iter().map(token_row).collect::<Result<_>>()?,
            total.max(0) as u64,
        ))
    }

    /// Revokes a live token (not revoked, not expired at `at`) whoever holds it (an admin's
    /// revocation): the token as it was, `None` if there is no such live token.
    pub async fn revoke_any_token(&self, id: &str, at: DateTime<Utc>) -> Result<Option<TokenRow>> {
        let Some(row) = sqlx::query(&format!(
            "SELECT {TOKEN_COLUMNS} FROM api_token WHERE token_id = $1 AND revoked_at IS NULL \
             AND (expires_at IS NULL OR expires_at > $2)"
        ))
        .bind(id)
        .bind(ms(at))
        .fetch_optional(&self.pool)
        .await
        .map_err(map_err)?
        .as_ref()
        .map(token_row)
        .transpose()?
        else {
            return Ok(None);
        };
        // Its owner's revocation may have come first.
        Ok(self.revoke_token(&row.user, id, at).await?.then_some(row))
    }

    pub async fn touch_token(&self, id: &str, at: DateTime<Utc>) -> Result<()> {
        sqlx::query("UPDATE api_token SET last_used_at = $1 WHERE token_id = $2")
            .bind(ms(at))
            .bind(id)
            .execute(&*self.write())
            .await
            .map_err(map_err)?;
        Ok(())
    }
}

/// A user with their memberships, one row per membership (or one with no team).
const VIEWER_ROWS: &str = "SELECT u.user_id, u.display_name, u.is_admin, m.team_id, m.role \
     FROM app_user u LEFT JOIN membership m ON m.user_id = u.user_id";

/// Viewers from [`VIEWER_ROWS`] ordered by user: each user's rows are consecutive.
fn viewers(rows: &[sqlx::any::AnyRow]) -> Result<Vec<Viewer>> {
    let mut out: Vec<Viewer> = Vec::new();
    for r in rows {
        let user: String = r.try_get("user_id")?;
        if out.last().is_none_or(|v| v.user != user) {
            out.push(Viewer {
                user,
                display_name: r.try_get("display_name")?,
                teams: Vec::new(),
                is_admin: r.try_get::<i64, _>("is_admin")? != 0,
            });
        }
        let Some(team) = r.try_get::<Option<String>, _>("team_id")? else {
            continue;
        };
        let role: String = r.try_get("role")?;
        if let Some(v) = out.last_mut() {
            v.teams.push(Membership {
                team,
                role: if role == "lead" {
                    Role::Lead
                } else {
                    Role::Member
                },
            });
        }
    }
    Ok(out)
}

/// Writes the user `id` from a sign-in's claims; `on_conflict` says what an existing user
/// gets (`DO NOTHING`: the id is taken). Returns the rows written.
async fn put_user(
    tx: &mut sqlx::Transaction<'static, sqlx::Any>,
    id: &str,
    s: &IdentitySignIn<'_>,
    on_conflict: &str,
) -> Result<u64> {
    Ok(sqlx::query(&format!(
        "INSERT INTO app_user (user_id, display_name, email, is_admin, created_at) \
         VALUES ($1, $2, $3, $4, $5) ON CONFLICT (user_id) {on_conflict}"
    ))
    .bind(id)
    .bind(s.display_name)
    .bind(s.email)
    .bind(s.is_admin as i64)
    .bind(ms(s.at))
    .execute(&mut **tx)
    .await
    .map_err(map_err)?
    .rows_affected())
}
