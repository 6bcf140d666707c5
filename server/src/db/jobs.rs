//! Jobs, their state changes and events.

use super::*;

/// One state change of a job as stored: when, what it entered (or `preempted`), and why.
#[derive(Clone, Debug, PartialEq)]
pub struct EventRow {
    pub at: DateTime<Utc>,
    pub kind: String,
    pub reason: String,
}

/// What [`Db::page_of_jobs`] reads.
#[derive(Clone, Debug, Default)]
pub struct JobPageRows {
    pub rows: Vec<JobRow>,
    /// How many jobs the filters select, on every page.
    pub total: u64,
    /// The newest of them (submission time, id), on whichever page it is.
    pub newest: Option<(DateTime<Utc>, String)>,
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
    /// The job this one was cloned or re-run from.
    pub cloned_from: Option<String>,
    /// Why it failed, as the cluster's pods told when it ended.
    pub failure: Option<app::model::domain::JobFailure>,
    /// When Gantry kept the last part of its logs (after it ended).
    pub logs_kept_at: Option<DateTime<Utc>>,
}

pub(super) const JOB_COLUMNS: &str = "job_id, name, template_id, template_version, team_id, user_id, pool_id, gpus, priority, state, params, max_runtime_s, node_names, request_body, created_at, admitted_at, finished_at, sent_at, cloned_from, failure, logs_kept_at";

pub(super) fn job_from_row(r: &AnyRow) -> Result<JobRow> {
    StoredJob {
        job_id: r.try_get("job_id")?,
        name: r.try_get("name")?,
        template_id: r.try_get("template_id")?,
        template_version: r.try_get("template_version")?,
        team_id: r.try_get("team_id")?,
        user_id: r.try_get("user_id")?,
        pool_id: r.try_get("pool_id")?,
        gpus: r.try_get("gpus")?,
        priority: r.try_get("priority")?,
        state: r.try_get("state")?,
        params: Some(r.try_get("params")?),
        max_runtime_s: r.try_get("max_runtime_s")?,
        node_names: r.try_get("node_names")?,
        request_body: r.try_get("request_body")?,
        created_at: r.try_get("created_at")?,
        admitted_at: r.try_get("admitted_at")?,
        finished_at: r.try_get("finished_at")?,
        sent_at: r.try_get("sent_at")?,
        cloned_from: r.try_get("cloned_from")?,
        failure: r.try_get("failure")?,
        logs_kept_at: r.try_get("logs_kept_at")?,
    }
    .into_job()
}

/// The columns of a list row: all of [`JOB_COLUMNS`] but `params` and `request_body`, which
/// only a job's own page and a repeated launch read.
const LIST_COLUMNS: [&str; 19] = [
    "job_id",
    "name",
    "template_id",
    "template_version",
    "team_id",
    "user_id",
    "pool_id",
    "gpus",
    "priority",
    "state",
    "max_runtime_s",
    "node_names",
    "created_at",
    "admitted_at",
    "finished_at",
    "sent_at",
    "cloned_from",
    "failure",
    "logs_kept_at",
];

/// A job's columns as stored (times in ms, the JSON columns as text), read from a row
/// ([`job_from_row`]) or from the JSON array a list comes in ([`Db::list_sql`], without
/// `params` and `request_body`).
#[derive(serde::Deserialize)]
struct StoredJob {
    job_id: String,
    name: String,
    template_id: String,
    template_version: i64,
    team_id: String,
    user_id: String,
    pool_id: String,
    gpus: i64,
    priority: String,
    state: String,
    #[serde(default)]
    params: Option<String>,
    max_runtime_s: i64,
    node_names: String,
    #[serde(default)]
    request_body: Option<String>,
    created_at: i64,
    admitted_at: Option<i64>,
    finished_at: Option<i64>,
    sent_at: Option<i64>,
    cloned_from: Option<String>,
    failure: Option<String>,
    logs_kept_at: Option<i64>,
}

impl StoredJob {
    /// The job; a list's row has empty `params` and no `request_body`.
    fn into_job(self) -> Result<JobRow> {
        Ok(JobRow {
            id: self.job_id,
            name: self.name,
            template: self.template_id,
            template_version: self.template_version as u32,
            team: self.team_id,
            user: self.user_id,
            pool: self.pool_id,
            gpus: self.gpus as u32,
            priority: Priority::parse(&self.priority).unwrap_or_default(),
            state: JobState::parse(&self.state).unwrap_or(JobState::Failed),
            params: match self.params {
                Some(p) => serde_json::from_str(&p)?,
                None => Map::new(),
            },
            max_runtime_s: self.max_runtime_s as u64,
            node_names: serde_json::from_str(&self.node_names)?,
            request_body: self.request_body,
            created_at: from_ms(self.created_at),
            admitted_at: self.admitted_at.map(from_ms),
            finished_at: self.finished_at.map(from_ms),
            sent_at: self.sent_at.map(from_ms),
            cloned_from: self.cloned_from,
            failure: self.failure.map(|f| serde_json::from_str(&f)).transpose()?,
            logs_kept_at: self.logs_kept_at.map(from_ms),
        })
    }
}

/// How many of a job's re-runs and clones its page names, newest first.
pub const MAX_CLONES: usize = 20;

/// A job as its own page shows it: the stored job and what is read beside it.
#[derive(Clone, Debug)]
pub struct JobDetail {
    pub row: JobRow,
    pub more: JobMore,
}

/// A job's name, who launched it and its team ([`Db::job_names`]).
#[derive(Clone, Debug, PartialEq)]
pub struct JobName {
    pub name: String,
    pub user: String,
    pub team: String,
}

/// What a job's own page shows beside the stored job ([`Db::job_detail`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct JobMore {
    /// Its state changes, oldest first.
    pub events: Vec<EventRow>,
    /// Its run intervals, oldest first.
    pub intervals: Vec<crate::domain::accounting::Run>,
    /// Its re-runs and clones in its own team as (id, name), newest first, at most
    /// [`MAX_CLONES`]. A clone launched into another team is not named or counted here: the
    /// job's readers need not be that team's.
    pub clones: Vec<(String, String)>,
    /// How many re-runs and clones it has in its team in all (`clones` names the newest).
    pub clone_count: u64,
    /// The name of the job it was cloned from, when that job is stored and of its team.
    pub origin_name: Option<String>,
    /// Whether the job it was cloned from is another team's (then neither named nor linked).
    pub origin_elsewhere: bool,
    /// Its template's newest version and whether the template is deprecated; `None` when
    /// the template is not stored.
    pub template: Option<(u32, bool)>,
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
    /// The job it was cloned or re-run from.
    pub cloned_from: Option<&'a str>,
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

/// Which jobs a list reads: its terms (shared with the live pages' [`JobTerms::matches`]),
/// then a page of them, newest first.
#[derive(Clone, Debug, Default)]
pub struct JobQuery {
    pub terms: app::model::domain::JobTerms,
    /// Keyset: only jobs after this one in the order (submitted, id), both descending.
    pub after: Option<(DateTime<Utc>, String)>,
    pub limit: i64,
}

/// `%text%` for `LIKE ... ESCAPE '\'`, its ASCII letters lowercased, its own wildcards
/// escaped.
fn like_pattern(text: &str) -> String {
    let mut p = String::from("%");
    for c in text.to_ascii_lowercase().chars() {
        if matches!(c, '%' | '_' | '\\') {
            p.push('\\');
        }
        p.push(c);
    }
    p.push('%');
    p
}

/// `SELECT` of one row whose column `alias` is a JSON array (as text) of an object of
/// `fields` (`'name', expression, …`) for each row of `from`, in `order`; `[]` when there are
/// none. The aggregate keeps the rows' order only when told (an `ORDER BY` inside it).
fn json_rows(postgres: bool, fields: &str, from: &str, order: &str, alias: &str) -> String {
    if postgres {
        // json_agg of no rows is NULL, not an empty array.
        format!("SELECT COALESCE(json_agg(json_build_object({fields}) ORDER BY {order})::text, '[]') AS {alias} FROM {from}")
    } else {
        format!("SELECT json_group_array(json_object({fields}) ORDER BY {order}) AS {alias} FROM {from}")
    }
}

/// The jobs of a page from the JSON array in its row's `page` column ([`Db::list_sql`]).
fn page_rows(row: &AnyRow) -> Result<Vec<JobRow>> {
    let page: String = row.try_get("page")?;
    let rows: Vec<StoredJob> = serde_json::from_str(&page)?;
    rows.into_iter().map(StoredJob::into_job).collect()
}

/// `sql` with `args` bound to `$1`, `$2`, … in order (from [`Db::list_sql`] and the like).
pub(super) fn with_args<'q>(
    sql: &'q str,
    args: &'q [String],
) -> sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>> {
    args.iter()
        .fold(sqlx::query(sql), |q, a| q.bind(a.as_str()))
}

/// The `WHERE` clause of a job list and its arguments (strings; numbers are bound as text
/// where the column is text, and written in where they are not).
fn job_where(query: &JobQuery, with_cursor: bool, postgres: bool) -> Option<(String, Vec<String>)> {
    let q = &query.terms;
    let mut sql = String::from(" WHERE 1 = 1");
    let mut args: Vec<String> = Vec::new();
    let arg = |args: &mut Vec<String>, v: String| {
        args.push(v);
        format!("${}", args.len())
    };
    if let Some(teams) = &q.teams {
        if teams.is_empty() {
            return None;
        }
        let marks: Vec<String> = teams.iter().map(|t| arg(&mut args, t.clone())).collect();
        sql.push_str(&format!(" AND team_id IN ({})", marks.join(", ")));
    }
    if let Some(user) = &q.user {
        let m = arg(&mut args, user.clone());
        sql.push_str(&format!(" AND user_id = {m}"));
    }
    if let Some(state) = q.state {
        let m = arg(&mut args, state.as_str().to_string());
        sql.push_str(&format!(" AND state = {m}"));
    }
    if q.active {
        sql.push_str(" AND state IN ('queued', 'admitted', 'running')");
    }
    if let Some(pool) = &q.pool {
        let m = arg(&mut args, pool.clone());
        sql.push_str(&format!(" AND pool_id = {m}"));
    }
    if let Some(text) = q.text.as_deref().filter(|t| !t.is_empty()) {
        let p = like_pattern(text);
        let (a, b, c) = (
            arg(&mut args, p.clone()),
            arg(&mut args, p.clone()),
            arg(&mut args, p),
        );
        // ASCII letters only, on both databases: SQLite's LOWER knows no others, and
        // Postgres' would follow the database's locale. `JobTerms::matches` does the same.
        let lower = |col: &str| {
            if postgres {
                format!(
                    "TRANSLATE({col}, 'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz')"
                )
            } else {
                format!("LOWER({col})")
            }
        };
        sql.push_str(&format!(
            " AND ({} LIKE {a} ESCAPE '\\' OR {} LIKE {b} ESCAPE '\\' OR {} LIKE {c} ESCAPE '\\')",
            lower("name"),
            lower("template_id"),
            lower("user_id")
        ));
    }
    if let Some(from) = q.from {
        sql.push_str(&format!(" AND created_at >= {}", ms(from)));
    }
    if let Some(until) = q.until {
        sql.push_str(&format!(" AND created_at < {}", ms(until)));
    }
    if let (true, Some((at, id))) = (with_cursor, &query.after) {
        let at = ms(*at);
        let m = arg(&mut args, id.clone());
        sql.push_str(&format!(
            " AND (created_at < {at} OR (created_at = {at} AND job_id < {m}))"
        ));
    }
    Some((sql, args))
}

pub(super) async fn insert_event(
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

impl Db {
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

    /// id → (name, user) for the given jobs.
    pub async fn job_names(&self, ids: &[&str]) -> Result<HashMap<String, JobName>> {
        let rows = self
            .rows_for_ids(
                "SELECT job_id, name, user_id, team_id FROM job WHERE job_id IN ({ids})",
                ids,
            )
            .await?;
        rows.iter()
            .map(|r| {
                Ok((
                    r.try_get("job_id")?,
                    JobName {
                        name: r.try_get("name")?,
                        user: r.try_get("user_id")?,
                        team: r.try_get("team_id")?,
                    },
                ))
            })
            .collect()
    }

    /// Which of `ids` have ended (succeeded, failed or cancelled). An ended job never moves
    /// again: nothing the cluster says of it changes the database.
    pub async fn ended_among(&self, ids: &[&str]) -> Result<std::collections::HashSet<String>> {
        let rows = self
            .rows_for_ids(
                "SELECT job_id FROM job WHERE job_id IN ({ids}) AND state IN ('succeeded', 'failed', 'cancelled')",
                ids,
            )
            .await?;
        rows.iter().map(|r| Ok(r.try_get("job_id")?)).collect()
    }

    /// Runs `sql` (with `{ids}` where the placeholders go) over `ids` in chunks the
    /// databases accept, and returns every row.
    pub(super) async fn rows_for_ids(&self, sql: &str, ids: &[&str]) -> Result<Vec<AnyRow>> {
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

    /// Stores a new job and its first event in one transaction. `Conflict` when the
    /// idempotency key was used before.
    pub async fn insert_job(&self, j: &NewJob<'_>, reason: &str) -> Result<()> {
        let mut tx = self.begin_events().await?;
        sqlx::query(
            "INSERT INTO job (job_id, name, template_id, template_version, team_id, user_id, pool_id, gpus, priority, state, params, max_runtime_s, idempotency_key, request_body, created_at, cloned_from) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, 'queued', $10, $11, $12, $13, $14, $15)",
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
        .bind(j.cloned_from)
        .execute(&mut *tx)
        .await
        .map_err(map_err)?;
        insert_event(&mut tx, j.id, j.created_at, "queued", reason).await?;
        self.commit(tx).await?;
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
            .execute(&*self.write())
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

    /// The statement [`Db::job_detail`] runs: the job's columns and, in the same row, what
    /// its own page shows beside them, each small table read by a subquery on its index
    /// (events, run intervals and clones as JSON arrays, the origin's name, the template's
    /// state).
    pub(super) fn detail_sql(&self) -> String {
        let array = |fields: &str, from: &str, order: &str| {
            format!("({})", json_rows(self.postgres, fields, from, order, "a"))
        };
        let events = array(
            "'at', e.at, 'kind', e.kind, 'reason', e.reason",
            "job_event e WHERE e.job_id = j.job_id",
            "e.at, e.job_event_id",
        );
        let intervals = array(
            "'gpus', i.gpus, 'start_ms', i.start_ms, 'end_ms', i.end_ms, 'util_mean', i.util_mean",
            "job_interval i WHERE i.job_id = j.job_id",
            "i.start_ms, i.interval_id",
        );
        let clones = array(
            "'job_id', c.job_id, 'name', c.name",
            &format!("(SELECT job_id, name, created_at FROM job c WHERE c.cloned_from = j.job_id AND c.team_id = j.team_id ORDER BY created_at DESC, job_id DESC LIMIT {MAX_CLONES}) AS c"),
            "c.created_at DESC, c.job_id DESC",
        );
        format!(
            "SELECT {JOB_COLUMNS}, {events} AS detail_events, {intervals} AS detail_intervals, {clones} AS detail_clones, \
             (SELECT COUNT(*) FROM job c WHERE c.cloned_from = j.job_id AND c.team_id = j.team_id) AS clone_count, \
             (SELECT o.name FROM job o WHERE o.job_id = j.cloned_from AND o.team_id = j.team_id) AS origin_name, \
             (SELECT COUNT(*) FROM job o WHERE o.job_id = j.cloned_from AND o.team_id <> j.team_id) AS origin_elsewhere, \
             (SELECT t.deprecated FROM template t WHERE t.template_id = j.template_id) AS template_deprecated, \
             (SELECT MAX(v.version) FROM template_version v WHERE v.template_id = j.template_id) AS template_newest \
             FROM job j WHERE j.job_id = $1"
        )
    }

    /// A job with what its own page shows beside it, in one statement: the page used to read
    /// them in five (the job, its events, clones, template and run intervals), and each trip
    /// through the pool is the statement and sqlx's ping of the connection when it is given
    /// back. `NotFound` for an unknown id.
    pub async fn job_detail(&self, id: &str) -> Result<JobDetail> {
        let row = sqlx::query(&self.detail_sql())
            .bind(id)
            .fetch_one(&self.pool)
            .await
            .map_err(map_err)?;
        #[derive(serde::Deserialize)]
        struct Event {
            at: i64,
            kind: String,
            reason: String,
        }
        #[derive(serde::Deserialize)]
        struct Interval {
            gpus: i64,
            start_ms: i64,
            end_ms: Option<i64>,
            util_mean: Option<f64>,
        }
        #[derive(serde::Deserialize)]
        struct Clone {
            job_id: String,
            name: String,
        }
        let events: Vec<Event> = serde_json::from_str(&row.try_get::<String, _>("detail_events")?)?;
        let intervals: Vec<Interval> =
            serde_json::from_str(&row.try_get::<String, _>("detail_intervals")?)?;
        let clones: Vec<Clone> = serde_json::from_str(&row.try_get::<String, _>("detail_clones")?)?;
        let deprecated: Option<i64> = row.try_get("template_deprecated")?;
        let newest: Option<i64> = row.try_get("template_newest")?;
        Ok(JobDetail {
            row: job_from_row(&row)?,
            more: JobMore {
                events: events
                    .into_iter()
                    .map(|e| EventRow {
                        at: from_ms(e.at),
                        kind: e.kind,
                        reason: e.reason,
                    })
                    .collect(),
                intervals: intervals
                    .into_iter()
                    .map(|i| {
                        (
                            i.gpus as u32,
                            from_ms(i.start_ms),
                            i.end_ms.map(from_ms),
                            i.util_mean,
                        )
                    })
                    .collect(),
                clones: clones.into_iter().map(|c| (c.job_id, c.name)).collect(),
                clone_count: row.try_get::<i64, _>("clone_count")? as u64,
                origin_name: row.try_get("origin_name")?,
                origin_elsewhere: row.try_get::<i64, _>("origin_elsewhere")? > 0,
                template: deprecated.map(|d| (newest.unwrap_or(0) as u32, d != 0)),
            },
        })
    }

    /// A job and its last run interval (start, and end once it ended), in one statement.
    /// `NotFound` for an unknown id.
    pub async fn job_and_last_interval(
        &self,
        id: &str,
    ) -> Result<(JobRow, Option<(DateTime<Utc>, Option<DateTime<Utc>>)>)> {
        let last = |col: &str| {
            format!("(SELECT i.{col} FROM job_interval i WHERE i.job_id = j.job_id ORDER BY i.start_ms DESC, i.interval_id DESC LIMIT 1) AS last_{col}")
        };
        let sql = format!(
            "SELECT {JOB_COLUMNS}, {}, {} FROM job j WHERE j.job_id = $1",
            last("start_ms"),
            last("end_ms")
        );
        let row = sqlx::query(&sql)
            .bind(id)
            .fetch_one(&self.pool)
            .await
            .map_err(map_err)?;
        let start: Option<i64> = row.try_get("last_start_ms")?;
        let end: Option<i64> = row.try_get("last_end_ms")?;
        Ok((
            job_from_row(&row)?,
            start.map(|s| (from_ms(s), end.map(from_ms))),
        ))
    }

    /// The statement [`Db::list_jobs`] runs and its arguments; `None` when `q` selects nothing.
    ///
    /// The page comes back as one JSON array in one row (`page`), its rows as objects of the
    /// [`LIST_COLUMNS`], instead of a row per job: sqlx hands rows over one at a time from its
    /// SQLite thread and copies every value again into its `Any` row, which took most of a
    /// 50-row page's time (about 10 µs a row, against a few µs for SQLite to read the index).
    pub(super) fn list_sql(&self, q: &JobQuery) -> Option<(String, Vec<String>)> {
        let (filter, args) = job_where(q, true, self.postgres)?;
        let fields = LIST_COLUMNS
            .iter()
            .map(|c| format!("'{c}', {c}"))
            .collect::<Vec<_>>()
            .join(", ");
        let order = "created_at DESC, job_id DESC";
        let page = format!(
            "SELECT {} FROM job{filter} ORDER BY {order} LIMIT {}",
            LIST_COLUMNS.join(", "),
            q.limit.clamp(1, 1000)
        );
        let sql = json_rows(
            self.postgres,
            &fields,
            &format!("({page}) AS p"),
            order,
            "page",
        );
        Some((sql, args))
    }

    /// How many jobs `q`'s filters select (the cursor aside), as [`Db::page_of_jobs`] counts.
    pub(super) fn count_sql(&self, q: &JobQuery) -> Option<(String, Vec<String>)> {
        let (filter, args) = job_where(q, false, self.postgres)?;
        Some((format!("SELECT COUNT(*) AS n FROM job{filter}"), args))
    }

    /// A page of jobs, newest first (submission time, then id), as `q` selects. A list shows
    /// neither a job's parameters nor its launch request: its rows have empty `params` and no
    /// `request_body` ([`Db::get_job`] has them).
    pub async fn list_jobs(&self, q: &JobQuery) -> Result<Vec<JobRow>> {
        let Some((sql, args)) = self.list_sql(q) else {
            return Ok(Vec::new());
        };
        let row = with_args(&sql, &args)
            .fetch_one(&self.pool)
            .await
            .map_err(map_err)?;
        page_rows(&row)
    }

    /// The statement [`Db::page_of_jobs`] runs and its arguments: the page ([`Db::list_sql`])
    /// and how many jobs the filters select in all ([`Db::count_sql`], which leaves out the
    /// cursor) in one row, so a list costs one trip through the pool instead of two (each is
    /// the statement and sqlx's ping when the connection is given back, each a hop to the
    /// connection's thread and back).
    pub(super) fn page_sql(&self, q: &JobQuery) -> Option<(String, Vec<String>)> {
        let (list, args) = self.list_sql(q)?;
        let (count, count_args) = self.count_sql(q)?;
        // Both number their arguments in the same order and the cursor's comes last, so the
        // count's are the first of the page's: `$1`… stand for the same values in both.
        debug_assert!(args.starts_with(&count_args));
        // Past the first page, the newest job the count holds: the page does not show it.
        let newest = if q.after.is_some() {
            let (filter, _) = job_where(q, false, self.postgres)?;
            let newest = |col: &str| {
                format!("(SELECT {col} FROM job{filter} ORDER BY created_at DESC, job_id DESC LIMIT 1) AS newest_{col}")
            };
            format!(", {}, {}", newest("created_at"), newest("job_id"))
        } else {
            String::new()
        };
        Some((
            format!("SELECT ({count}) AS n{newest}, ({list}) AS page"),
            args,
        ))
    }

    /// A page of jobs as [`Db::list_jobs`] reads it, how many jobs `q`'s filters select in
    /// all (the cursor aside), and the newest of those (its submission time and id), in one
    /// statement: a job newer than that newest one is not in the count.
    pub async fn page_of_jobs(&self, q: &JobQuery) -> Result<JobPageRows> {
        let Some((sql, args)) = self.page_sql(q) else {
            return Ok(JobPageRows::default());
        };
        self.page_of_jobs_sql(q, &sql, &args).await
    }

    /// [`Db::page_of_jobs`] for a page or an API read: the same rows answered again while
    /// nothing was written ([`Db::memo`], keyed by the query).
    pub async fn page_of_jobs_memo(&self, q: &JobQuery) -> Result<JobPageRows> {
        if q.limit > super::memo::MAX_ROWS as i64 {
            return self.page_of_jobs(q).await;
        }
        // Keyed by the query itself: the statement and its arguments are made from it alone
        // (and from which database this is, which a `Db` never changes), so they are built
        // only when the memo does not hold the answer. Built for every read and written out
        // as the key (a statement of 1 KB or more, escaped by `Debug`), they were about 4 % of
        // the home page's CPU time (the page benchmark, under `perf`).
        let key = format!("jobs {q:?}");
        self.memo(key, || self.page_of_jobs(q)).await
    }

    async fn page_of_jobs_sql(
        &self,
        q: &JobQuery,
        sql: &str,
        args: &[String],
    ) -> Result<JobPageRows> {
        let row = with_args(sql, args)
            .fetch_one(&self.pool)
            .await
            .map_err(map_err)?;
        let n: i64 = row.try_get("n")?;
        let rows = page_rows(&row)?;
        let newest = if q.after.is_some() {
            let at: Option<i64> = row.try_get("newest_created_at")?;
            let id: Option<String> = row.try_get("newest_job_id")?;
            at.zip(id).map(|(at, id)| (from_ms(at), id))
        } else {
            rows.first().map(|r| (r.created_at, r.id.clone()))
        };
        Ok(JobPageRows {
            rows,
            total: n.max(0) as u64,
            newest,
        })
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

    pub async fn events_for(&self, job_ids: &[&str]) -> Result<HashMap<String, Vec<EventRow>>> {
        let rows = self
            .rows_for_ids(
                "SELECT job_id, at, kind, reason FROM job_event WHERE job_id IN ({ids}) ORDER BY at, job_event_id",
                job_ids,
            )
            .await?;
        let mut out: HashMap<String, Vec<EventRow>> = HashMap::new();
        for r in rows {
            out.entry(r.try_get("job_id")?).or_default().push(EventRow {
                at: from_ms(r.try_get("at")?),
                kind: r.try_get("kind")?,
                reason: r.try_get("reason")?,
            });
        }
        Ok(out)
    }

    /// Applies a state change if the job is in one of `from`; returns whether it applied.
    pub async fn transition(&self, t: &Transition<'_>) -> Result<bool> {
        self.transition_audited(t, None).await
    }

    /// [`Db::transition`], with an audit entry written in the same transaction when it
    /// applies (an admin's action on another team's job): both are stored, or neither.
    pub async fn transition_audited(
        &self,
        t: &Transition<'_>,
        audit: Option<&crate::domain::audit::AuditEntry>,
    ) -> Result<bool> {
        let mut tx = self.begin_events().await?;
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
            if let Some(a) = audit {
                super::audit::insert_audit(&mut tx, a).await?;
            }
        }
        self.commit(tx).await?;
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
        let mut tx = self.begin_events().await?;
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
        self.commit(tx).await?;
        Ok(changed)
    }
}
