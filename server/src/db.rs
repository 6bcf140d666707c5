//! Persistence: one `Db` over sqlx's `Any` driver, so the same SQL runs on SQLite (the
//! embedded default) and Postgres (production). Times are milliseconds since the epoch.

use std::collections::HashMap;

use crate::cluster::QuotaSpec;
use app::model::{JobEvent, JobState, Membership, ParamSpec, Priority, Role, Template, Viewer};
use chrono::{DateTime, TimeZone, Utc};
use serde_json::{Map, Value};
use sqlx::any::{AnyPoolOptions, AnyRow};
use sqlx::{AnyPool, Row};

#[derive(Debug, thiserror::Error)]
pub enum DbError {
    #[error("not found")]
    NotFound,
    #[error("unique constraint violated")]
    Conflict,
    #[error("database: {0}")]
    Sqlx(#[from] sqlx::Error),
    #[error("migration: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("stored JSON does not parse: {0}")]
    Json(#[from] serde_json::Error),
}

pub type Result<T, E = DbError> = std::result::Result<T, E>;

fn map_err(e: sqlx::Error) -> DbError {
    match &e {
        sqlx::Error::RowNotFound => DbError::NotFound,
        sqlx::Error::Database(d) if d.is_unique_violation() => DbError::Conflict,
        _ => DbError::Sqlx(e),
    }
}

pub fn ms(t: DateTime<Utc>) -> i64 {
    t.timestamp_millis()
}

pub fn from_ms(v: i64) -> DateTime<Utc> {
    Utc.timestamp_millis_opt(v).single().unwrap_or_default()
}

#[derive(Clone)]
pub struct Db {
    pool: AnyPool,
    postgres: bool,
}

/// A read-only view of one moment: every query through it sees the same committed state
/// (Postgres: REPEATABLE READ; SQLite: one read transaction is one snapshot).
pub struct Snapshot {
    tx: sqlx::Transaction<'static, sqlx::Any>,
}

/// A sign-in through an OpenID provider, as [`Db::sign_in_identity`] records it.
pub struct IdentitySignIn<'a> {
    pub issuer: &'a str,
    pub subject: &'a str,
    pub wanted_user_id: &'a str,
    pub display_name: &'a str,
    pub email: Option<&'a str>,
    pub is_admin: bool,
    pub teams: &'a [Membership],
    pub groups: &'a [String],
    pub at: DateTime<Utc>,
}

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

const TOKEN_COLUMNS: &str =
    "token_id, user_id, name, prefix, created_at, expires_at, last_used_at, revoked_at";

fn token_row(r: &AnyRow) -> Result<TokenRow> {
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

/// GPU accounting in the same transaction as the state change: admission opens a run
/// interval, leaving the GPUs (preempted back to the queue, or finished) closes it. A job
/// cancelled while queued never had one, so it counts nothing.
async fn record_interval(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    t: &Transition<'_>,
) -> Result<()> {
    match t.to {
        JobState::Admitted => {
            sqlx::query(
                "INSERT INTO job_interval (interval_id, job_id, team_id, user_id, pool_id, template_id, gpus, start_ms) \
                 SELECT $1, job_id, team_id, user_id, pool_id, template_id, gpus, $2 FROM job WHERE job_id = $3",
            )
            .bind(uuid::Uuid::now_v7().to_string())
            .bind(ms(t.at))
            .bind(t.job_id)
            .execute(&mut **tx)
            .await
            .map_err(map_err)?;
        }
        JobState::Queued | JobState::Succeeded | JobState::Failed | JobState::Cancelled => {
            sqlx::query(
                "UPDATE job_interval SET end_ms = CASE WHEN $1 < start_ms THEN start_ms ELSE $1 END \
                 WHERE job_id = $2 AND end_ms IS NULL",
            )
            .bind(ms(t.at))
            .bind(t.job_id)
            .execute(&mut **tx)
            .await
            .map_err(map_err)?;
        }
        JobState::Running => {}
    }
    Ok(())
}

fn role_name(role: Role) -> &'static str {
    match role {
        Role::Member => "member",
        Role::Lead => "lead",
    }
}

/// A job as stored; the service adds queue position and reason from the cluster.
#[derive(Clone, Debug)]
pub struct JobRow {
    pub id: String,
    pub name: String,
    pub template: String,
    pub template_version: u32,
    pub team: String,
    pub user: String,
    pub pool: String,
    pub gpus: u32,
    pub priority: Priority,
    pub state: JobState,
    pub params: Map<String, Value>,
    pub max_runtime_s: u64,
    pub node_names: Vec<String>,
    pub request_body: Option<String>,
    pub created_at: DateTime<Utc>,
    pub admitted_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
    pub sent_at: Option<DateTime<Utc>>,
}

const JOB_COLUMNS: &str = "job_id, name, template_id, template_version, team_id, user_id, pool_id, gpus, priority, state, params, max_runtime_s, node_names, request_body, created_at, admitted_at, finished_at, sent_at";

fn job_from_row(r: &AnyRow) -> Result<JobRow> {
    let state: String = r.try_get("state")?;
    let priority: String = r.try_get("priority")?;
    let params: String = r.try_get("params")?;
    let nodes: String = r.try_get("node_names")?;
    Ok(JobRow {
        id: r.try_get("job_id")?,
        name: r.try_get("name")?,
        template: r.try_get("template_id")?,
        template_version: r.try_get::<i64, _>("template_version")? as u32,
        team: r.try_get("team_id")?,
        user: r.try_get("user_id")?,
        pool: r.try_get("pool_id")?,
        gpus: r.try_get::<i64, _>("gpus")? as u32,
        priority: Priority::parse(&priority).unwrap_or_default(),
        state: JobState::parse(&state).unwrap_or(JobState::Failed),
        params: serde_json::from_str(&params)?,
        max_runtime_s: r.try_get::<i64, _>("max_runtime_s")? as u64,
        node_names: serde_json::from_str(&nodes)?,
        request_body: r.try_get("request_body")?,
        created_at: from_ms(r.try_get("created_at")?),
        admitted_at: r.try_get::<Option<i64>, _>("admitted_at")?.map(from_ms),
        finished_at: r.try_get::<Option<i64>, _>("finished_at")?.map(from_ms),
        sent_at: r.try_get::<Option<i64>, _>("sent_at")?.map(from_ms),
    })
}

/// A new job to store.
pub struct NewJob<'a> {
    pub id: &'a str,
    pub name: &'a str,
    pub template: &'a str,
    pub template_version: u32,
    pub team: &'a str,
    pub user: &'a str,
    pub pool: &'a str,
    pub gpus: u32,
    pub priority: Priority,
    pub params: &'a Map<String, Value>,
    pub max_runtime_s: u64,
    pub idempotency_key: Option<&'a str>,
    pub request_body: &'a str,
    pub created_at: DateTime<Utc>,
}

/// A state change to store, with the fields it sets.
pub struct Transition<'a> {
    pub job_id: &'a str,
    /// Applied only if the job is in one of these states (so late events never undo a cancel).
    pub from: &'a [JobState],
    pub to: JobState,
    pub at: DateTime<Utc>,
    pub reason: &'a str,
    pub node_names: Option<&'a [String]>,
    /// The event's kind when it is not the state entered (`preempted`).
    pub kind: Option<&'a str>,
}

/// One audit log entry.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct AuditEntry {
    pub id: String,
    pub at: DateTime<Utc>,
    pub actor: String,
    pub action: String,
    pub target: String,
    pub before: Option<Value>,
    pub after: Option<Value>,
    pub address: Option<String>,
}

impl AuditEntry {
    pub fn new(actor: &str, action: &str, target: &str, at: DateTime<Utc>) -> Self {
        AuditEntry {
            id: uuid::Uuid::now_v7().to_string(),
            at,
            actor: actor.to_string(),
            action: action.to_string(),
            target: target.to_string(),
            before: None,
            after: None,
            address: None,
        }
    }
}

#[derive(Clone, Debug, Default)]
pub struct AuditFilter {
    pub actor: Option<String>,
    pub action: Option<String>,
    /// Entries whose target starts with this.
    pub target: Option<String>,
    pub limit: i64,
}

async fn insert_audit(tx: &mut sqlx::Transaction<'_, sqlx::Any>, a: &AuditEntry) -> Result<()> {
    sqlx::query(
        "INSERT INTO audit (audit_id, at, actor, action, target, before, after, address) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
    )
    .bind(&a.id)
    .bind(ms(a.at))
    .bind(&a.actor)
    .bind(&a.action)
    .bind(&a.target)
    .bind(a.before.as_ref().map(Value::to_string))
    .bind(a.after.as_ref().map(Value::to_string))
    .bind(a.address.as_deref())
    .execute(&mut **tx)
    .await
    .map_err(map_err)?;
    Ok(())
}

#[derive(Clone, Debug)]
pub struct QuotaRow {
    pub team: String,
    pub pool: String,
    pub quota: QuotaSpec,
}

/// A quota change written inside an open transaction (see [`Db::begin_quota_update`]).
pub struct QuotaWrite {
    tx: sqlx::Transaction<'static, sqlx::Any>,
}

impl QuotaWrite {
    pub async fn commit(self) -> Result<()> {
        self.tx.commit().await.map_err(map_err)
    }

    pub async fn rollback(self) -> Result<()> {
        self.tx.rollback().await.map_err(map_err)
    }
}

#[derive(Clone, Debug)]
pub struct PoolRow {
    pub name: String,
    pub gpu_model: String,
    pub nodes: u32,
    pub strategy: String,
}

#[derive(Clone, Debug, Default)]
pub struct JobQuery {
    pub teams: Option<Vec<String>>,
    pub user: Option<String>,
    pub state: Option<JobState>,
    pub limit: i64,
}

impl Db {
    /// Connects and brings the schema up to date.
    pub async fn connect(url: &str, max_connections: u32) -> Result<Db> {
        sqlx::any::install_default_drivers();
        let pool = AnyPoolOptions::new()
            .max_connections(max_connections)
            .connect(url)
            .await?;
        if url.starts_with("sqlite:") {
            // Readers do not block the writer in WAL mode; the setting stays with the file.
            sqlx::query("PRAGMA journal_mode = WAL")
                .execute(&pool)
                .await?;
        }
        let db = Db {
            pool,
            postgres: !url.starts_with("sqlite:"),
        };
        db.migrate().await?;
        Ok(db)
    }

    pub async fn migrate(&self) -> Result<()> {
        sqlx::migrate!("../migrations").run(&self.pool).await?;
        Ok(())
    }

    pub async fn ping(&self) -> Result<()> {
        sqlx::query("SELECT 1")
            .execute(&self.pool)
            .await
            .map_err(map_err)?;
        Ok(())
    }

    pub async fn close(&self) {
        self.pool.close().await;
    }

    /// A transaction that writes. On SQLite it takes the write lock at once
    /// (`BEGIN IMMEDIATE`) and so waits its turn: a deferred one that reads first cannot
    /// upgrade once another connection has written, and fails with "database is locked"
    /// (SQLITE_BUSY) instead of waiting (<https://sqlite.org/lang_transaction.html>).
    async fn begin_write(&self) -> Result<sqlx::Transaction<'static, sqlx::Any>> {
        if self.postgres {
            self.pool.begin().await.map_err(map_err)
        } else {
            self.pool
                .begin_with("BEGIN IMMEDIATE")
                .await
                .map_err(map_err)
        }
    }

    // ---- people and teams -------------------------------------------------------------

    pub async fn insert_team(&self, team: &str, display: &str, at: DateTime<Utc>) -> Result<()> {
        sqlx::query("INSERT INTO team (team_id, display_name, created_at) VALUES ($1, $2, $3) ON CONFLICT (team_id) DO NOTHING")
            .bind(team)
            .bind(display)
            .bind(ms(at))
            .execute(&self.pool)
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
            .execute(&self.pool)
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
            .execute(&self.pool)
            .await
            .map_err(map_err)?;
        Ok(())
    }

    pub async fn get_viewer(&self, user: &str) -> Result<Option<Viewer>> {
        let Some(row) =
            sqlx::query("SELECT user_id, display_name, is_admin FROM app_user WHERE user_id = $1")
                .bind(user)
                .fetch_optional(&self.pool)
                .await
                .map_err(map_err)?
        else {
            return Ok(None);
        };
        let teams =
            sqlx::query("SELECT team_id, role FROM membership WHERE user_id = $1 ORDER BY team_id")
                .bind(user)
                .fetch_all(&self.pool)
                .await
                .map_err(map_err)?
                .iter()
                .map(|r| {
                    let role: String = r.try_get("role")?;
                    Ok(Membership {
                        team: r.try_get("team_id")?,
                        role: if role == "lead" {
                            Role::Lead
                        } else {
                            Role::Member
                        },
                    })
                })
                .collect::<Result<Vec<_>>>()?;
        Ok(Some(Viewer {
            user: row.try_get("user_id")?,
            display_name: row.try_get("display_name")?,
            teams,
            is_admin: row.try_get::<i64, _>("is_admin")? != 0,
        }))
    }

    /// Records a sign-in through an OpenID provider: the user for `(issuer, subject)` is
    /// created or updated from the claims, and their memberships become exactly `teams`
    /// (the provider's groups are the truth). Returns the user id, which is
    /// `wanted_user_id` on first sign-in unless another person already has it.
    pub async fn sign_in_identity(&self, s: &IdentitySignIn<'_>) -> Result<String> {
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
        let user = match known {
            Some(u) => u,
            None => {
                let mut candidate = s.wanted_user_id.to_string();
                let mut n = 1;
                loop {
                    let taken = sqlx::query("SELECT 1 AS one FROM app_user WHERE user_id = $1")
                        .bind(&candidate)
                        .fetch_optional(&mut *tx)
                        .await
                        .map_err(map_err)?
                        .is_some();
                    if !taken {
                        break candidate;
                    }
                    n += 1;
                    candidate = format!("{}-{n}", s.wanted_user_id);
                }
            }
        };
        sqlx::query(
            "INSERT INTO app_user (user_id, display_name, email, is_admin, created_at) VALUES ($1, $2, $3, $4, $5) \
             ON CONFLICT (user_id) DO UPDATE SET display_name = $2, email = $3, is_admin = $4",
        )
        .bind(&user)
        .bind(s.display_name)
        .bind(s.email)
        .bind(s.is_admin as i64)
        .bind(ms(s.at))
        .execute(&mut *tx)
        .await
        .map_err(map_err)?;
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
        sqlx::query(
            "INSERT INTO user_identity (issuer, subject, user_id, idp_groups, last_sign_in_at) VALUES ($1, $2, $3, $4, $5) \
             ON CONFLICT (issuer, subject) DO UPDATE SET idp_groups = $4, last_sign_in_at = $5",
        )
        .bind(s.issuer)
        .bind(s.subject)
        .bind(&user)
        .bind(serde_json::to_string(s.groups)?)
        .bind(ms(s.at))
        .execute(&mut *tx)
        .await
        .map_err(map_err)?;
        tx.commit().await.map_err(map_err)?;
        Ok(user)
    }

    pub async fn team_ids(&self) -> Result<Vec<String>> {
        let rows = sqlx::query("SELECT team_id FROM team ORDER BY team_id")
            .fetch_all(&self.pool)
            .await
            .map_err(map_err)?;
        rows.iter().map(|r| Ok(r.try_get("team_id")?)).collect()
    }

    // ---- GPU accounting ---------------------------------------------------------------

    /// Run intervals overlapping `[from, to)` (open ones included), optionally of some
    /// teams only.
    pub async fn intervals_overlapping(
        &self,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
        teams: Option<&[String]>,
    ) -> Result<Vec<crate::usage::Interval>> {
        if teams.is_some_and(|t| t.is_empty()) {
            return Ok(Vec::new());
        }
        let sql = format!(
            "SELECT team_id, user_id, pool_id, template_id, gpus, start_ms, end_ms, util_mean \
             FROM job_interval WHERE start_ms < $1 AND (end_ms IS NULL OR end_ms > $2){}",
            Self::team_filter(teams, 3)
        );
        let mut q = sqlx::query(&sql).bind(ms(to)).bind(ms(from));
        for t in teams.unwrap_or_default() {
            q = q.bind(t);
        }
        Self::interval_rows(&q.fetch_all(&self.pool).await.map_err(map_err)?)
    }

    fn interval_rows(rows: &[AnyRow]) -> Result<Vec<crate::usage::Interval>> {
        rows.iter()
            .map(|r| {
                Ok(crate::usage::Interval {
                    team: r.try_get("team_id")?,
                    user: r.try_get("user_id")?,
                    pool: r.try_get("pool_id")?,
                    template: r.try_get("template_id")?,
                    gpus: r.try_get::<i64, _>("gpus")? as u32,
                    start: from_ms(r.try_get("start_ms")?),
                    end: r.try_get::<Option<i64>, _>("end_ms")?.map(from_ms),
                    util: r.try_get("util_mean")?,
                })
            })
            .collect()
    }

    /// `AND team_id IN ($n, …)` for `teams`, numbered from `first`; `None` for every team.
    fn team_filter(teams: Option<&[String]>, first: usize) -> String {
        match teams {
            Some(t) => {
                let marks: Vec<String> = (0..t.len()).map(|i| format!("${}", i + first)).collect();
                format!(" AND team_id IN ({})", marks.join(", "))
            }
            None => String::new(),
        }
    }

    /// A consistent view for a report made of several reads.
    pub async fn snapshot(&self) -> Result<Snapshot> {
        let mut tx = self.pool.begin().await.map_err(map_err)?;
        if self.postgres {
            sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                .execute(&mut *tx)
                .await
                .map_err(map_err)?;
        }
        Ok(Snapshot { tx })
    }

    /// Open intervals and ended ones not rolled up yet, overlapping `[from, to)`.
    pub async fn intervals_not_rolled_up(
        &self,
        snap: &mut Snapshot,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
        teams: Option<&[String]>,
    ) -> Result<Vec<crate::usage::Interval>> {
        if teams.is_some_and(|t| t.is_empty()) {
            return Ok(Vec::new());
        }
        let sql = format!(
            "SELECT team_id, user_id, pool_id, template_id, gpus, start_ms, end_ms, util_mean FROM job_interval \
             WHERE rolled_up = 0 AND start_ms < $1 AND (end_ms IS NULL OR end_ms > $2){}",
            Self::team_filter(teams, 3)
        );
        let mut q = sqlx::query(&sql).bind(ms(to)).bind(ms(from));
        for t in teams.unwrap_or_default() {
            q = q.bind(t);
        }
        Self::interval_rows(&q.fetch_all(&mut *snap.tx).await.map_err(map_err)?)
    }

    /// Rolled-up intervals overlapping `[from, to)` (a range's partial days).
    pub async fn rolled_up_overlapping(
        &self,
        snap: &mut Snapshot,
        tz: &str,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
        teams: Option<&[String]>,
    ) -> Result<Vec<crate::usage::Interval>> {
        if teams.is_some_and(|t| t.is_empty()) {
            return Ok(Vec::new());
        }
        let longest: i64 = sqlx::query("SELECT longest_ms FROM usage_rollup_meta WHERE tz = $1")
            .bind(tz)
            .fetch_optional(&mut *snap.tx)
            .await
            .map_err(map_err)?
            .map(|r| r.try_get("longest_ms"))
            .transpose()?
            .unwrap_or(0);
        // Starting no earlier than the longest interval before `from`: an index range.
        let sql = format!(
            "SELECT team_id, user_id, pool_id, template_id, gpus, start_ms, end_ms, util_mean FROM job_interval \
             WHERE rolled_up = 1 AND start_ms < $1 AND start_ms >= $2 AND end_ms > $3{}",
            Self::team_filter(teams, 4)
        );
        let mut q = sqlx::query(&sql)
            .bind(ms(to))
            .bind(ms(from) - longest)
            .bind(ms(from));
        for t in teams.unwrap_or_default() {
            q = q.bind(t);
        }
        Self::interval_rows(&q.fetch_all(&mut *snap.tx).await.map_err(map_err)?)
    }

    /// Daily rollups of whole local days `[first, end)`, summed per day and group:
    /// (day, group, GPU-ms, measured GPU-ms, used GPU-ms).
    pub async fn rollup_days(
        &self,
        snap: &mut Snapshot,
        tz: &str,
        first: chrono::NaiveDate,
        end: chrono::NaiveDate,
        group_by: crate::usage::GroupBy,
        teams: Option<&[String]>,
    ) -> Result<Vec<(chrono::NaiveDate, String, f64, f64, f64)>> {
        if teams.is_some_and(|t| t.is_empty()) {
            return Ok(Vec::new());
        }
        let col = match group_by {
            crate::usage::GroupBy::Team => "team_id",
            crate::usage::GroupBy::User => "user_id",
            crate::usage::GroupBy::Pool => "pool_id",
            crate::usage::GroupBy::Template => "template_id",
        };
        let sql = format!(
            "SELECT day, {col} AS k, SUM(gpu_ms) AS a, SUM(measured_gpu_ms) AS m, SUM(used_gpu_ms) AS u \
             FROM usage_daily WHERE tz = $1 AND day >= $2 AND day < $3{} GROUP BY day, {col}",
            Self::team_filter(teams, 4)
        );
        let mut q = sqlx::query(&sql)
            .bind(tz)
            .bind(first.to_string())
            .bind(end.to_string());
        for t in teams.unwrap_or_default() {
            q = q.bind(t);
        }
        let rows = q.fetch_all(&mut *snap.tx).await.map_err(map_err)?;
        rows.iter()
            .map(|r| {
                let day: String = r.try_get("day")?;
                Ok((
                    day.parse().unwrap_or_default(),
                    r.try_get("k")?,
                    r.try_get("a")?,
                    r.try_get("m")?,
                    r.try_get("u")?,
                ))
            })
            .collect()
    }

    /// Rolls up to `limit` ended intervals into the daily table of `tz` (those whose
    /// utilization is known, unless `wait_for_util` is false). Returns how many.
    pub async fn roll_up(
        &self,
        tz: chrono_tz::Tz,
        limit: i64,
        wait_for_util: bool,
    ) -> Result<usize> {
        let sql = format!(
            "SELECT interval_id, team_id, user_id, pool_id, template_id, gpus, start_ms, end_ms, util_mean FROM job_interval \
             WHERE rolled_up = 0 AND end_ms IS NOT NULL{} ORDER BY end_ms LIMIT $1",
            if wait_for_util { " AND util_checked = 1" } else { "" }
        );
        let rows = sqlx::query(&sql)
            .bind(limit)
            .fetch_all(&self.pool)
            .await
            .map_err(map_err)?;
        if rows.is_empty() {
            return Ok(0);
        }
        let intervals = Self::interval_rows(&rows)?;
        let mut tx = self.begin_write().await?;
        let mut longest = 0i64;
        let mut done = 0;
        for (r, i) in rows.iter().zip(&intervals) {
            // Claim it first: two recorders (two replicas, or a test beside the server's
            // own) never add the same interval twice.
            let id: String = r.try_get("interval_id")?;
            let claimed = sqlx::query(
                "UPDATE job_interval SET rolled_up = 1 WHERE interval_id = $1 AND rolled_up = 0",
            )
            .bind(&id)
            .execute(&mut *tx)
            .await
            .map_err(map_err)?
            .rows_affected()
                > 0;
            if !claimed {
                continue;
            }
            done += 1;
            let end = i.end.expect("ended");
            longest = longest.max((end - i.start).num_milliseconds());
            let util = i.util.map(|u| u.clamp(0.0, 1.0));
            for (day, gpu_ms) in
                crate::usage::pieces(i, i.start, end, end, crate::usage::Bucket::Day, tz)
            {
                let measured = if util.is_some() { gpu_ms } else { 0.0 };
                sqlx::query(
                    "INSERT INTO usage_daily (tz, day, team_id, user_id, pool_id, template_id, gpu_ms, measured_gpu_ms, used_gpu_ms) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) \
                     ON CONFLICT (tz, day, team_id, user_id, pool_id, template_id) DO UPDATE SET \
                     gpu_ms = usage_daily.gpu_ms + excluded.gpu_ms, \
                     measured_gpu_ms = usage_daily.measured_gpu_ms + excluded.measured_gpu_ms, \
                     used_gpu_ms = usage_daily.used_gpu_ms + excluded.used_gpu_ms",
                )
                .bind(tz.name())
                .bind(day.to_string())
                .bind(&i.team)
                .bind(&i.user)
                .bind(&i.pool)
                .bind(&i.template)
                .bind(gpu_ms)
                .bind(measured)
                .bind(measured * util.unwrap_or(0.0))
                .execute(&mut *tx)
                .await
                .map_err(map_err)?;
            }
        }
        sqlx::query(
            "INSERT INTO usage_rollup_meta (tz, longest_ms) VALUES ($1, $2) \
             ON CONFLICT (tz) DO UPDATE SET longest_ms = CASE WHEN excluded.longest_ms > usage_rollup_meta.longest_ms THEN excluded.longest_ms ELSE usage_rollup_meta.longest_ms END",
        )
        .bind(tz.name())
        .bind(longest)
        .execute(&mut *tx)
        .await
        .map_err(map_err)?;
        tx.commit().await.map_err(map_err)?;
        Ok(done)
    }

    /// Rebuilds every daily rollup of `tz` from the ended intervals in one pass (after a
    /// bulk import; the recorder rolls up new intervals one batch at a time). Returns how
    /// many intervals it rolled up.
    pub async fn rebuild_rollups(&self, tz: chrono_tz::Tz) -> Result<usize> {
        use std::collections::HashMap;
        type Key = (chrono::NaiveDate, String, String, String, String);
        let mut days: HashMap<Key, (f64, f64, f64)> = HashMap::new();
        let mut longest = 0i64;
        let mut count = 0usize;
        let mut after = String::new();
        let mut tx = self.begin_write().await?;
        for sql in [
            "DELETE FROM usage_daily",
            "DELETE FROM usage_rollup_meta",
            "UPDATE job_interval SET rolled_up = 0",
        ] {
            sqlx::query(sql).execute(&mut *tx).await.map_err(map_err)?;
        }
        loop {
            // Keyset pages by id (unique, so nothing is read twice or skipped).
            let rows = sqlx::query(
                "SELECT interval_id, team_id, user_id, pool_id, template_id, gpus, start_ms, end_ms, util_mean FROM job_interval \
                 WHERE end_ms IS NOT NULL AND interval_id > $1 ORDER BY interval_id LIMIT 50000",
            )
            .bind(&after)
            .fetch_all(&mut *tx)
            .await
            .map_err(map_err)?;
            let page = Self::interval_rows(&rows)?;
            let full = page.len() == 50_000;
            if let Some(last) = rows.last() {
                after = last.try_get("interval_id")?;
            }
            for i in &page {
                let end = i.end.expect("ended");
                longest = longest.max((end - i.start).num_milliseconds());
                for (day, gpu_ms) in
                    crate::usage::pieces(i, i.start, end, end, crate::usage::Bucket::Day, tz)
                {
                    let e = days
                        .entry((
                            day,
                            i.team.clone(),
                            i.user.clone(),
                            i.pool.clone(),
                            i.template.clone(),
                        ))
                        .or_default();
                    e.0 += gpu_ms;
                    if let Some(u) = i.util {
                        e.1 += gpu_ms;
                        e.2 += gpu_ms * u.clamp(0.0, 1.0);
                    }
                }
            }
            count += page.len();
            if !full {
                break;
            }
        }
        for ((day, team, user, pool, template), (a, m, u)) in &days {
            sqlx::query(
                "INSERT INTO usage_daily (tz, day, team_id, user_id, pool_id, template_id, gpu_ms, measured_gpu_ms, used_gpu_ms) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
            )
            .bind(tz.name())
            .bind(day.to_string())
            .bind(team)
            .bind(user)
            .bind(pool)
            .bind(template)
            .bind(*a)
            .bind(*m)
            .bind(*u)
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
        }
        sqlx::query("UPDATE job_interval SET rolled_up = 1 WHERE end_ms IS NOT NULL")
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
        sqlx::query("INSERT INTO usage_rollup_meta (tz, longest_ms) VALUES ($1, $2)")
            .bind(tz.name())
            .bind(longest)
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
        tx.commit().await.map_err(map_err)?;
        Ok(count)
    }

    /// The pool, for benchmarks that load data in bulk.
    pub fn pool(&self) -> &AnyPool {
        &self.pool
    }

    /// Rollups made for another time zone are dropped and rebuilt (after a configuration
    /// change): returns whether that happened.
    pub async fn reset_rollups_unless(&self, tz: chrono_tz::Tz) -> Result<bool> {
        let other = sqlx::query("SELECT tz FROM usage_rollup_meta WHERE tz <> $1")
            .bind(tz.name())
            .fetch_optional(&self.pool)
            .await
            .map_err(map_err)?
            .is_some();
        if other {
            let mut tx = self.begin_write().await?;
            for sql in [
                "DELETE FROM usage_daily",
                "DELETE FROM usage_rollup_meta",
                "UPDATE job_interval SET rolled_up = 0",
            ] {
                sqlx::query(sql).execute(&mut *tx).await.map_err(map_err)?;
            }
            tx.commit().await.map_err(map_err)?;
        }
        Ok(other)
    }

    /// The jobs with the most GPU-hours inside `[from, to)` (running ones up to `now`):
    /// (job id, name, user, team, allocated GPU-ms, idle GPU-ms of the measured part), most
    /// allocated first, or most idle first.
    #[allow(clippy::too_many_arguments)]
    pub async fn top_jobs(
        &self,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
        now: DateTime<Utc>,
        teams: Option<&[String]>,
        by_idle: bool,
        limit: i64,
    ) -> Result<Vec<(String, String, String, String, f64, f64)>> {
        if teams.is_some_and(|t| t.is_empty()) {
            return Ok(Vec::new());
        }
        // Each interval clipped to the range, exactly; portable CASE instead of LEAST/MIN.
        let clipped =
            "(CASE WHEN COALESCE(i.end_ms, $3) < $2 THEN COALESCE(i.end_ms, $3) ELSE $2 END \
                        - CASE WHEN i.start_ms > $1 THEN i.start_ms ELSE $1 END)";
        let sql = format!(
            "SELECT i.job_id AS job_id, j.name AS name, j.user_id AS user_id, j.team_id AS team_id, \
                    CAST(SUM(i.gpus * {clipped}) AS DOUBLE PRECISION) AS gpu_ms, \
                    CAST(SUM(CASE WHEN i.util_mean IS NULL THEN 0 ELSE i.gpus * {clipped} * (1 - i.util_mean) END) AS DOUBLE PRECISION) AS idle_ms \
             FROM job_interval i JOIN job j ON j.job_id = i.job_id \
             WHERE i.start_ms < $2 AND (i.end_ms IS NULL OR i.end_ms > $1){} \
             GROUP BY i.job_id, j.name, j.user_id, j.team_id ORDER BY {} DESC LIMIT {limit}",
            Self::team_filter(teams, 4).replace("team_id", "i.team_id"),
            if by_idle { "idle_ms" } else { "gpu_ms" },
        );
        let mut q = sqlx::query(&sql).bind(ms(from)).bind(ms(to)).bind(ms(now));
        for t in teams.unwrap_or_default() {
            q = q.bind(t);
        }
        let rows = q.fetch_all(&self.pool).await.map_err(map_err)?;
        rows.iter()
            .map(|r| {
                Ok((
                    r.try_get("job_id")?,
                    r.try_get("name")?,
                    r.try_get("user_id")?,
                    r.try_get("team_id")?,
                    r.try_get::<f64, _>("gpu_ms")?,
                    r.try_get::<f64, _>("idle_ms")?,
                ))
            })
            // A job admitted and ended in the same instant held nothing.
            .filter(|r: &Result<(String, String, String, String, f64, f64)>| {
                r.as_ref().map_or(true, |r| r.4 > 0.0)
            })
            .collect()
    }

    /// When each job holding GPUs now started its current run (one query for all of them;
    /// open intervals are never rolled up, so the partial index finds them).
    pub async fn open_interval_starts(&self) -> Result<HashMap<String, DateTime<Utc>>> {
        let rows = sqlx::query(
            "SELECT job_id, start_ms FROM job_interval WHERE rolled_up = 0 AND end_ms IS NULL",
        )
        .fetch_all(&self.pool)
        .await
        .map_err(map_err)?;
        rows.iter()
            .map(|r| Ok((r.try_get("job_id")?, from_ms(r.try_get("start_ms")?))))
            .collect()
    }

    /// The job's latest run interval: (start, end or `None` while it runs).
    pub async fn last_interval(
        &self,
        job_id: &str,
    ) -> Result<Option<(DateTime<Utc>, Option<DateTime<Utc>>)>> {
        let row = sqlx::query(
            "SELECT start_ms, end_ms FROM job_interval WHERE job_id = $1 ORDER BY start_ms DESC LIMIT 1",
        )
        .bind(job_id)
        .fetch_optional(&self.pool)
        .await
        .map_err(map_err)?;
        row.map(|r| {
            Ok((
                from_ms(r.try_get("start_ms")?),
                r.try_get::<Option<i64>, _>("end_ms")?.map(from_ms),
            ))
        })
        .transpose()
    }

    /// Ended run intervals whose mean utilization is not stored yet, oldest first.
    pub async fn intervals_without_util(
        &self,
        limit: i64,
    ) -> Result<
        Vec<(
            String,
            crate::metrics::JobGpus,
            DateTime<Utc>,
            DateTime<Utc>,
        )>,
    > {
        let rows = sqlx::query(
            "SELECT interval_id, job_id, team_id, gpus, start_ms, end_ms FROM job_interval \
             WHERE end_ms IS NOT NULL AND util_checked = 0 ORDER BY end_ms LIMIT $1",
        )
        .bind(limit)
        .fetch_all(&self.pool)
        .await
        .map_err(map_err)?;
        rows.iter()
            .map(|r| {
                let start = from_ms(r.try_get("start_ms")?);
                Ok((
                    r.try_get("interval_id")?,
                    crate::metrics::JobGpus {
                        job_id: r.try_get("job_id")?,
                        team: r.try_get("team_id")?,
                        gpus: r.try_get::<i64, _>("gpus")? as u32,
                        since: start,
                    },
                    start,
                    from_ms(r.try_get("end_ms")?),
                ))
            })
            .collect()
    }

    pub async fn set_interval_util(&self, interval_id: &str, util: f64) -> Result<()> {
        sqlx::query(
            "UPDATE job_interval SET util_mean = $1, util_checked = 1 WHERE interval_id = $2",
        )
        .bind(util)
        .bind(interval_id)
        .execute(&self.pool)
        .await
        .map_err(map_err)?;
        Ok(())
    }

    /// The metrics back end has no figure for this interval: it stays unmeasured.
    pub async fn set_interval_util_unknown(&self, interval_id: &str) -> Result<()> {
        sqlx::query("UPDATE job_interval SET util_checked = 1 WHERE interval_id = $1")
            .bind(interval_id)
            .execute(&self.pool)
            .await
            .map_err(map_err)?;
        Ok(())
    }

    // ---- personal API tokens ------------------------------------------------------------

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
        .execute(&self.pool)
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
        .execute(&self.pool)
        .await
        .map_err(map_err)?
        .rows_affected();
        Ok(n > 0)
    }

    pub async fn touch_token(&self, id: &str, at: DateTime<Utc>) -> Result<()> {
        sqlx::query("UPDATE api_token SET last_used_at = $1 WHERE token_id = $2")
            .bind(ms(at))
            .bind(id)
            .execute(&self.pool)
            .await
            .map_err(map_err)?;
        Ok(())
    }

    pub async fn list_user_ids(&self) -> Result<Vec<String>> {
        let rows = sqlx::query("SELECT user_id FROM app_user ORDER BY is_admin, user_id")
            .fetch_all(&self.pool)
            .await
            .map_err(map_err)?;
        rows.iter().map(|r| Ok(r.try_get("user_id")?)).collect()
    }

    // ---- pools and quotas -------------------------------------------------------------

    pub async fn insert_pool(&self, p: &PoolRow, at: DateTime<Utc>) -> Result<()> {
        sqlx::query("INSERT INTO pool (pool_id, gpu_model, node_count, gpus_per_node, queueing_strategy, created_at) VALUES ($1, $2, $3, 8, $4, $5) ON CONFLICT (pool_id) DO NOTHING")
            .bind(&p.name)
            .bind(&p.gpu_model)
            .bind(p.nodes as i64)
            .bind(&p.strategy)
            .bind(ms(at))
            .execute(&self.pool)
            .await
            .map_err(map_err)?;
        Ok(())
    }

    pub async fn list_pools(&self) -> Result<Vec<PoolRow>> {
        let rows = sqlx::query(
            "SELECT pool_id, gpu_model, node_count, queueing_strategy FROM pool ORDER BY pool_id",
        )
        .fetch_all(&self.pool)
        .await
        .map_err(map_err)?;
        rows.iter()
            .map(|r| {
                Ok(PoolRow {
                    name: r.try_get("pool_id")?,
                    gpu_model: r.try_get("gpu_model")?,
                    nodes: r.try_get::<i64, _>("node_count")? as u32,
                    strategy: r.try_get("queueing_strategy")?,
                })
            })
            .collect()
    }

    pub async fn set_quota(&self, q: &QuotaRow, at: DateTime<Utc>) -> Result<()> {
        sqlx::query(
            "INSERT INTO quota (team_id, pool_id, nominal_gpus, borrowing_limit_gpus, lending_limit_gpus, queueing_strategy, updated_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7) \
             ON CONFLICT (team_id, pool_id) DO UPDATE SET nominal_gpus = excluded.nominal_gpus, \
             borrowing_limit_gpus = excluded.borrowing_limit_gpus, lending_limit_gpus = excluded.lending_limit_gpus, \
             queueing_strategy = excluded.queueing_strategy, updated_at = excluded.updated_at",
        )
        .bind(&q.team)
        .bind(&q.pool)
        .bind(q.quota.nominal as i64)
        .bind(q.quota.borrowing_limit.map(i64::from))
        .bind(q.quota.lending_limit.map(i64::from))
        .bind(q.quota.strategy.map(|s| s.as_str()))
        .bind(ms(at))
        .execute(&self.pool)
        .await
        .map_err(map_err)?;
        Ok(())
    }

    /// One quota with its version (the ETag of the quota API).
    pub async fn quota(&self, team: &str, pool: &str) -> Result<Option<(QuotaSpec, i64)>> {
        let row = sqlx::query(
            "SELECT nominal_gpus, borrowing_limit_gpus, lending_limit_gpus, queueing_strategy, version FROM quota WHERE team_id = $1 AND pool_id = $2",
        )
        .bind(team)
        .bind(pool)
        .fetch_optional(&self.pool)
        .await
        .map_err(map_err)?;
        row.map(|r| {
            Ok((
                QuotaSpec {
                    nominal: r.try_get::<i64, _>("nominal_gpus")? as u32,
                    borrowing_limit: r
                        .try_get::<Option<i64>, _>("borrowing_limit_gpus")?
                        .map(|v| v as u32),
                    lending_limit: r
                        .try_get::<Option<i64>, _>("lending_limit_gpus")?
                        .map(|v| v as u32),
                    strategy: strategy_of(&r)?,
                },
                r.try_get::<i64, _>("version")?,
            ))
        })
        .transpose()
    }

    /// Writes a quota change, only if the quota is still at `version`, with its audit entry,
    /// in a transaction left open: the caller applies the change to the cluster, then commits
    /// it (or drops it, which rolls it back). `None` (nothing written) when someone else
    /// changed the quota first. The row stays locked until the end, so no other save can
    /// slip in between the check and the commit.
    pub async fn begin_quota_update(
        &self,
        q: &QuotaRow,
        version: i64,
        audit: &AuditEntry,
    ) -> Result<Option<QuotaWrite>> {
        let mut tx = self.begin_write().await?;
        let changed = sqlx::query(
            "UPDATE quota SET nominal_gpus = $1, borrowing_limit_gpus = $2, lending_limit_gpus = $3, queueing_strategy = $4, \
             updated_at = $5, version = version + 1 \
             WHERE team_id = $6 AND pool_id = $7 AND version = $8",
        )
        .bind(q.quota.nominal as i64)
        .bind(q.quota.borrowing_limit.map(i64::from))
        .bind(q.quota.lending_limit.map(i64::from))
        .bind(q.quota.strategy.map(|s| s.as_str()))
        .bind(ms(audit.at))
        .bind(&q.team)
        .bind(&q.pool)
        .bind(version)
        .execute(&mut *tx)
        .await
        .map_err(map_err)?
        .rows_affected()
            > 0;
        if !changed {
            tx.rollback().await.map_err(map_err)?;
            return Ok(None);
        }
        insert_audit(&mut tx, audit).await?;
        Ok(Some(QuotaWrite { tx }))
    }

    pub async fn append_audit(&self, a: &AuditEntry) -> Result<()> {
        let mut tx = self.begin_write().await?;
        insert_audit(&mut tx, a).await?;
        tx.commit().await.map_err(map_err)?;
        Ok(())
    }

    /// The audit log, newest first, filtered by exact actor / action and target prefix.
    pub async fn audit(&self, f: &AuditFilter) -> Result<Vec<AuditEntry>> {
        let mut sql = "SELECT audit_id, at, actor, action, target, before, after, address FROM audit WHERE 1 = 1".to_string();
        let mut binds: Vec<String> = Vec::new();
        if let Some(a) = &f.actor {
            binds.push(a.clone());
            sql.push_str(&format!(" AND actor = ${}", binds.len()));
        }
        if let Some(a) = &f.action {
            binds.push(a.clone());
            sql.push_str(&format!(" AND action = ${}", binds.len()));
        }
        if let Some(t) = &f.target {
            binds.push(format!("{}%", t.replace('%', "")));
            sql.push_str(&format!(" AND target LIKE ${}", binds.len()));
        }
        sql.push_str(&format!(
            " ORDER BY at DESC, audit_id DESC LIMIT {}",
            f.limit.clamp(1, 10_000)
        ));
        let mut q = sqlx::query(&sql);
        for b in &binds {
            q = q.bind(b);
        }
        let rows = q.fetch_all(&self.pool).await.map_err(map_err)?;
        rows.iter()
            .map(|r| {
                let json = |col: &str| -> Result<Option<Value>> {
                    Ok(r.try_get::<Option<String>, _>(col)?
                        .map(|s| serde_json::from_str(&s))
                        .transpose()?)
                };
                Ok(AuditEntry {
                    id: r.try_get("audit_id")?,
                    at: from_ms(r.try_get("at")?),
                    actor: r.try_get("actor")?,
                    action: r.try_get("action")?,
                    target: r.try_get("target")?,
                    before: json("before")?,
                    after: json("after")?,
                    address: r.try_get("address")?,
                })
            })
            .collect()
    }

    /// Launches since `from` that ran (were admitted), as the what-if replay needs them:
    /// (team, pool, GPUs, priority, submitted, admitted, finished).
    #[allow(clippy::type_complexity)]
    pub async fn launches_since(
        &self,
        from: DateTime<Utc>,
    ) -> Result<
        Vec<(
            String,
            String,
            u32,
            Priority,
            DateTime<Utc>,
            DateTime<Utc>,
            Option<DateTime<Utc>>,
        )>,
    > {
        let rows = sqlx::query(
            "SELECT team_id, pool_id, gpus, priority, created_at, admitted_at, finished_at FROM job \
             WHERE created_at >= $1 AND admitted_at IS NOT NULL ORDER BY created_at",
        )
        .bind(ms(from))
        .fetch_all(&self.pool)
        .await
        .map_err(map_err)?;
        rows.iter()
            .map(|r| {
                Ok((
                    r.try_get("team_id")?,
                    r.try_get("pool_id")?,
                    r.try_get::<i64, _>("gpus")? as u32,
                    Priority::parse(&r.try_get::<String, _>("priority")?).unwrap_or_default(),
                    from_ms(r.try_get("created_at")?),
                    from_ms(r.try_get("admitted_at")?),
                    r.try_get::<Option<i64>, _>("finished_at")?.map(from_ms),
                ))
            })
            .collect()
    }

    pub async fn list_quotas(&self) -> Result<Vec<QuotaRow>> {
        let rows = sqlx::query(
            "SELECT team_id, pool_id, nominal_gpus, borrowing_limit_gpus, lending_limit_gpus, queueing_strategy FROM quota ORDER BY team_id, pool_id",
        )
        .fetch_all(&self.pool)
        .await
        .map_err(map_err)?;
        rows.iter()
            .map(|r| {
                Ok(QuotaRow {
                    team: r.try_get("team_id")?,
                    pool: r.try_get("pool_id")?,
                    quota: QuotaSpec {
                        nominal: r.try_get::<i64, _>("nominal_gpus")? as u32,
                        borrowing_limit: r
                            .try_get::<Option<i64>, _>("borrowing_limit_gpus")?
                            .map(|v| v as u32),
                        lending_limit: r
                            .try_get::<Option<i64>, _>("lending_limit_gpus")?
                            .map(|v| v as u32),
                        strategy: strategy_of(r)?,
                    },
                })
            })
            .collect()
    }

    /// id → (name, user) for the given jobs.
    pub async fn job_names(&self, ids: &[&str]) -> Result<HashMap<String, (String, String)>> {
        let rows = self
            .rows_for_ids(
                "SELECT job_id, name, user_id FROM job WHERE job_id IN ({ids})",
                ids,
            )
            .await?;
        rows.iter()
            .map(|r| {
                Ok((
                    r.try_get("job_id")?,
                    (r.try_get("name")?, r.try_get("user_id")?),
                ))
            })
            .collect()
    }

    /// Runs `sql` (with `{ids}` where the placeholders go) over `ids` in chunks the
    /// databases accept, and returns every row.
    async fn rows_for_ids(&self, sql: &str, ids: &[&str]) -> Result<Vec<AnyRow>> {
        let mut rows = Vec::new();
        for chunk in ids.chunks(200) {
            let marks: Vec<String> = (1..=chunk.len()).map(|i| format!("${i}")).collect();
            let sql = sql.replace("{ids}", &marks.join(", "));
            let mut q = sqlx::query(&sql);
            for id in chunk {
                q = q.bind(*id);
            }
            rows.extend(q.fetch_all(&self.pool).await.map_err(map_err)?);
        }
        Ok(rows)
    }

    // ---- templates ----------------------------------------------------------------------

    /// Stores a template and its first version (or a new version of an existing one).
    pub async fn insert_template(&self, t: &Template, at: DateTime<Utc>) -> Result<()> {
        let mut tx = self.begin_write().await?;
        sqlx::query("INSERT INTO template (template_id, display_name, family, model_size, method, description, default_pool, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
                     ON CONFLICT (template_id) DO UPDATE SET display_name = excluded.display_name, family = excluded.family, \
                     model_size = excluded.model_size, method = excluded.method, description = excluded.description, default_pool = excluded.default_pool")
            .bind(&t.name)
            .bind(&t.display_name)
            .bind(&t.family)
            .bind(&t.model_size)
            .bind(&t.method)
            .bind(&t.description)
            .bind(&t.default_pool)
            .bind(ms(at))
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
        sqlx::query("INSERT INTO template_version (template_id, version, image, command, params, allowed_gpus, default_gpus, default_max_runtime_s, created_at, trainer_runtime) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)")
            .bind(&t.name)
            .bind(t.version as i64)
            .bind(&t.image)
            .bind(serde_json::to_string(&t.command)?)
            .bind(serde_json::to_string(&t.params)?)
            .bind(serde_json::to_string(&t.allowed_gpus)?)
            .bind(t.default_gpus as i64)
            .bind(t.default_max_runtime_s as i64)
            .bind(ms(at))
            .bind(t.trainer_runtime.as_deref())
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
        tx.commit().await.map_err(map_err)?;
        Ok(())
    }

    /// A template's newest version number and whether it is deprecated; `None` if unknown.
    pub async fn template_state(&self, id: &str) -> Result<Option<(u32, bool)>> {
        let row = sqlx::query(
            "SELECT t.deprecated, (SELECT MAX(v.version) FROM template_version v WHERE v.template_id = t.template_id) AS newest \
             FROM template t WHERE t.template_id = $1",
        )
        .bind(id)
        .fetch_optional(&self.pool)
        .await
        .map_err(map_err)?;
        row.map(|r| {
            Ok((
                r.try_get::<Option<i64>, _>("newest")?.unwrap_or(0) as u32,
                r.try_get::<i64, _>("deprecated")? != 0,
            ))
        })
        .transpose()
    }

    /// Hides a template from Launch; jobs keep showing the version they ran.
    pub async fn deprecate_template(&self, id: &str) -> Result<bool> {
        Ok(sqlx::query(
            "UPDATE template SET deprecated = 1 WHERE template_id = $1 AND deprecated = 0",
        )
        .bind(id)
        .execute(&self.pool)
        .await
        .map_err(map_err)?
        .rows_affected()
            > 0)
    }

    /// One exact template version (deprecated or not): what a job ran.
    pub async fn template_version(&self, id: &str, version: u32) -> Result<Option<Template>> {
        let row = sqlx::query(
            "SELECT t.template_id, t.display_name, t.family, t.model_size, t.method, t.description, t.default_pool, \
                    v.version, v.image, v.command, v.params, v.allowed_gpus, v.default_gpus, v.default_max_runtime_s, v.trainer_runtime \
             FROM template t JOIN template_version v ON v.template_id = t.template_id \
             WHERE t.template_id = $1 AND v.version = $2",
        )
        .bind(id)
        .bind(version as i64)
        .fetch_optional(&self.pool)
        .await
        .map_err(map_err)?;
        row.as_ref().map(template_from_row).transpose()
    }

    /// The newest version of every template that is not deprecated.
    pub async fn list_templates(&self) -> Result<Vec<Template>> {
        let rows = sqlx::query(
            "SELECT t.template_id, t.display_name, t.family, t.model_size, t.method, t.description, t.default_pool, \
                    v.version, v.image, v.command, v.params, v.allowed_gpus, v.default_gpus, v.default_max_runtime_s, v.trainer_runtime \
             FROM template t JOIN template_version v ON v.template_id = t.template_id \
             WHERE t.deprecated = 0 \
               AND v.version = (SELECT MAX(v2.version) FROM template_version v2 WHERE v2.template_id = t.template_id) \
             ORDER BY t.family, t.template_id",
        )
        .fetch_all(&self.pool)
        .await
        .map_err(map_err)?;
        rows.iter().map(template_from_row).collect()
    }

    /// template → when the team last launched it.
    pub async fn last_used_by_team(&self, team: &str) -> Result<HashMap<String, DateTime<Utc>>> {
        let rows = sqlx::query("SELECT template_id, MAX(created_at) AS last FROM job WHERE team_id = $1 GROUP BY template_id")
            .bind(team)
            .fetch_all(&self.pool)
            .await
            .map_err(map_err)?;
        rows.iter()
            .map(|r| Ok((r.try_get("template_id")?, from_ms(r.try_get("last")?))))
            .collect()
    }

    // ---- jobs ---------------------------------------------------------------------------

    /// Stores a new job and its first event in one transaction. `Conflict` when the
    /// idempotency key was used before.
    pub async fn insert_job(&self, j: &NewJob<'_>, reason: &str) -> Result<()> {
        let mut tx = self.begin_write().await?;
        sqlx::query(
            "INSERT INTO job (job_id, name, template_id, template_version, team_id, user_id, pool_id, gpus, priority, state, params, max_runtime_s, idempotency_key, request_body, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, 'queued', $10, $11, $12, $13, $14)",
        )
        .bind(j.id)
        .bind(j.name)
        .bind(j.template)
        .bind(j.template_version as i64)
        .bind(j.team)
        .bind(j.user)
        .bind(j.pool)
        .bind(j.gpus as i64)
        .bind(j.priority.as_str())
        .bind(serde_json::to_string(j.params)?)
        .bind(j.max_runtime_s as i64)
        .bind(j.idempotency_key)
        .bind(j.request_body)
        .bind(ms(j.created_at))
        .execute(&mut *tx)
        .await
        .map_err(map_err)?;
        insert_event(&mut tx, j.id, j.created_at, "queued", reason).await?;
        tx.commit().await.map_err(map_err)?;
        Ok(())
    }

    pub async fn find_by_idempotency_key(&self, user: &str, key: &str) -> Result<Option<JobRow>> {
        let sql =
            format!("SELECT {JOB_COLUMNS} FROM job WHERE user_id = $1 AND idempotency_key = $2");
        sqlx::query(&sql)
            .bind(user)
            .bind(key)
            .fetch_optional(&self.pool)
            .await
            .map_err(map_err)?
            .as_ref()
            .map(job_from_row)
            .transpose()
    }

    pub async fn mark_sent(&self, job_id: &str, at: DateTime<Utc>) -> Result<()> {
        sqlx::query("UPDATE job SET sent_at = $1 WHERE job_id = $2 AND sent_at IS NULL")
            .bind(ms(at))
            .bind(job_id)
            .execute(&self.pool)
            .await
            .map_err(map_err)?;
        Ok(())
    }

    pub async fn get_job(&self, id: &str) -> Result<JobRow> {
        let sql = format!("SELECT {JOB_COLUMNS} FROM job WHERE job_id = $1");
        let row = sqlx::query(&sql)
            .bind(id)
            .fetch_one(&self.pool)
            .await
            .map_err(map_err)?;
        job_from_row(&row)
    }

    pub async fn list_jobs(&self, q: &JobQuery) -> Result<Vec<JobRow>> {
        let mut sql = format!("SELECT {JOB_COLUMNS} FROM job WHERE 1 = 1");
        let mut args: Vec<String> = Vec::new();
        if let Some(teams) = &q.teams {
            if teams.is_empty() {
                return Ok(Vec::new());
            }
            let marks: Vec<String> = teams
                .iter()
                .map(|t| {
                    args.push(t.clone());
                    format!("${}", args.len())
                })
                .collect();
            sql.push_str(&format!(" AND team_id IN ({})", marks.join(", ")));
        }
        if let Some(user) = &q.user {
            args.push(user.clone());
            sql.push_str(&format!(" AND user_id = ${}", args.len()));
        }
        if let Some(state) = q.state {
            args.push(state.as_str().to_string());
            sql.push_str(&format!(" AND state = ${}", args.len()));
        }
        sql.push_str(&format!(
            " ORDER BY created_at DESC, job_id DESC LIMIT {}",
            q.limit.clamp(1, 1000)
        ));
        let mut query = sqlx::query(&sql);
        for a in &args {
            query = query.bind(a.as_str());
        }
        let rows = query.fetch_all(&self.pool).await.map_err(map_err)?;
        rows.iter().map(job_from_row).collect()
    }

    /// Queued, admitted and running jobs, oldest first.
    pub async fn active_jobs(&self) -> Result<Vec<JobRow>> {
        let sql = format!("SELECT {JOB_COLUMNS} FROM job WHERE state IN ('queued', 'admitted', 'running') ORDER BY created_at, job_id");
        let rows = sqlx::query(&sql)
            .fetch_all(&self.pool)
            .await
            .map_err(map_err)?;
        rows.iter().map(job_from_row).collect()
    }

    pub async fn events_for(&self, job_ids: &[&str]) -> Result<HashMap<String, Vec<JobEvent>>> {
        let rows = self
            .rows_for_ids(
                "SELECT job_id, at, kind, reason FROM job_event WHERE job_id IN ({ids}) ORDER BY at, job_event_id",
                job_ids,
            )
            .await?;
        let mut out: HashMap<String, Vec<JobEvent>> = HashMap::new();
        for r in rows {
            out.entry(r.try_get("job_id")?).or_default().push(JobEvent {
                at: from_ms(r.try_get("at")?),
                kind: r.try_get("kind")?,
                reason: r.try_get("reason")?,
            });
        }
        Ok(out)
    }

    /// Applies a state change if the job is in one of `from`; returns whether it applied.
    pub async fn transition(&self, t: &Transition<'_>) -> Result<bool> {
        let mut tx = self.begin_write().await?;
        let sets_admitted = t.to == JobState::Admitted;
        let sets_finished = matches!(
            t.to,
            JobState::Succeeded | JobState::Failed | JobState::Cancelled
        );
        let nodes = t.node_names.map(serde_json::to_string).transpose()?;
        let marks: Vec<String> = (0..t.from.len()).map(|i| format!("${}", i + 7)).collect();
        let sql = format!(
            "UPDATE job SET state = $1, \
                 admitted_at = CASE WHEN $2 = 1 THEN $3 ELSE admitted_at END, \
                 finished_at = CASE WHEN $4 = 1 THEN $3 ELSE finished_at END, \
                 node_names = COALESCE($5, node_names) \
             WHERE job_id = $6 AND state IN ({})",
            marks.join(", ")
        );
        let mut q = sqlx::query(&sql)
            .bind(t.to.as_str())
            .bind(sets_admitted as i64)
            .bind(ms(t.at))
            .bind(sets_finished as i64)
            .bind(nodes)
            .bind(t.job_id);
        for s in t.from {
            q = q.bind(s.as_str());
        }
        let changed = q.execute(&mut *tx).await.map_err(map_err)?.rows_affected() > 0;
        if changed {
            record_interval(&mut tx, t).await?;
            insert_event(
                &mut tx,
                t.job_id,
                t.at,
                t.kind.unwrap_or(t.to.as_str()),
                t.reason,
            )
            .await?;
        }
        tx.commit().await.map_err(map_err)?;
        Ok(changed)
    }

    /// Sets an admitted or running job's admission time and nodes to what the cluster says,
    /// moving the start of its open run interval with it, and records `reason` as an event
    /// at `seen`. False when the job is no longer admitted or running.
    pub async fn correct_admission(
        &self,
        job_id: &str,
        admitted_at: DateTime<Utc>,
        nodes: &[String],
        seen: DateTime<Utc>,
        reason: &str,
    ) -> Result<bool> {
        let mut tx = self.begin_write().await?;
        let changed = sqlx::query(
            "UPDATE job SET admitted_at = $1, node_names = $2 \
             WHERE job_id = $3 AND state IN ('admitted', 'running')",
        )
        .bind(ms(admitted_at))
        .bind(serde_json::to_string(nodes)?)
        .bind(job_id)
        .execute(&mut *tx)
        .await
        .map_err(map_err)?
        .rows_affected()
            > 0;
        if changed {
            sqlx::query(
                "UPDATE job_interval SET start_ms = $1 WHERE job_id = $2 AND end_ms IS NULL",
            )
            .bind(ms(admitted_at))
            .bind(job_id)
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
            insert_event(&mut tx, job_id, seen, "corrected", reason).await?;
        }
        tx.commit().await.map_err(map_err)?;
        Ok(changed)
    }

    // ---- sim clock ----------------------------------------------------------------------

    pub async fn sim_clock(&self) -> Result<Option<DateTime<Utc>>> {
        let row = sqlx::query("SELECT now_ms FROM sim_clock WHERE sim_clock_id = 1")
            .fetch_optional(&self.pool)
            .await
            .map_err(map_err)?;
        Ok(row
            .map(|r| r.try_get::<i64, _>("now_ms").map(from_ms))
            .transpose()?)
    }

    pub async fn save_sim_clock(&self, now: DateTime<Utc>) -> Result<()> {
        sqlx::query("INSERT INTO sim_clock (sim_clock_id, now_ms) VALUES (1, $1) ON CONFLICT (sim_clock_id) DO UPDATE SET now_ms = excluded.now_ms")
            .bind(ms(now))
            .execute(&self.pool)
            .await
            .map_err(map_err)?;
        Ok(())
    }

    pub async fn count_pools(&self) -> Result<i64> {
        let r = sqlx::query("SELECT COUNT(*) AS n FROM pool")
            .fetch_one(&self.pool)
            .await
            .map_err(map_err)?;
        Ok(r.try_get::<i64, _>("n")?)
    }
}

async fn insert_event(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    job_id: &str,
    at: DateTime<Utc>,
    kind: &str,
    reason: &str,
) -> Result<()> {
    sqlx::query("INSERT INTO job_event (job_event_id, job_id, at, kind, reason) VALUES ($1, $2, $3, $4, $5)")
        .bind(uuid::Uuid::now_v7().to_string())
        .bind(job_id)
        .bind(ms(at))
        .bind(kind)
        .bind(reason)
        .execute(&mut **tx)
        .await
        .map_err(map_err)?;
    Ok(())
}

fn template_from_row(r: &AnyRow) -> Result<Template> {
    let command: String = r.try_get("command")?;
    let params: String = r.try_get("params")?;
    let allowed: String = r.try_get("allowed_gpus")?;
    Ok(Template {
        name: r.try_get("template_id")?,
        version: r.try_get::<i64, _>("version")? as u32,
        display_name: r.try_get("display_name")?,
        family: r.try_get("family")?,
        model_size: r.try_get("model_size")?,
        method: r.try_get("method")?,
        description: r.try_get("description")?,
        image: r.try_get("image")?,
        command: serde_json::from_str(&command)?,
        params: serde_json::from_str::<Vec<ParamSpec>>(&params)?,
        allowed_gpus: serde_json::from_str(&allowed)?,
        default_gpus: r.try_get::<i64, _>("default_gpus")? as u32,
        default_pool: r.try_get("default_pool")?,
        default_max_runtime_s: r.try_get::<i64, _>("default_max_runtime_s")? as u64,
        trainer_runtime: r.try_get::<Option<String>, _>("trainer_runtime")?,
        last_used_by_team: None,
    })
}

/// A quota row's queueing strategy (`None`: the pool's default).
fn strategy_of(
    r: &sqlx::any::AnyRow,
) -> std::result::Result<Option<crate::cluster::QueueingStrategy>, sqlx::Error> {
    let s: Option<String> = r.try_get("queueing_strategy")?;
    Ok(s.and_then(|s| crate::cluster::QueueingStrategy::parse(&s)))
}
