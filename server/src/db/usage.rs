//! Run intervals and the daily usage rollups (GPU accounting).

use super::*;

/// What [`Db::intervals_without_util`] runs, from the partial index `job_interval_unchecked`.
pub(super) const INTERVALS_WITHOUT_UTIL: &str =
    "SELECT interval_id, job_id, team_id, gpus, start_ms, end_ms FROM job_interval \
     WHERE end_ms IS NOT NULL AND util_checked = 0 ORDER BY end_ms LIMIT $1";

/// GPU accounting in the same transaction as the state change: admission opens a run
/// interval, leaving the GPUs (preempted back to the queue, or finished) closes it. A job
/// cancelled while queued never had one, so it counts nothing.
pub(super) async fn record_interval(
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

impl Db {
    /// Run intervals overlapping `[from, to)` (open ones included), optionally of some
    /// teams only.
    pub async fn intervals_overlapping(
        &self,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
        teams: Option<&[String]>,
    ) -> Result<Vec<crate::domain::accounting::Interval>> {
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

    pub(super) fn interval_rows(
        rows: &[AnyRow],
    ) -> Result<Vec<crate::domain::accounting::Interval>> {
        rows.iter()
            .map(|r| {
                Ok(crate::domain::accounting::Interval {
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
    pub(super) fn team_filter(teams: Option<&[String]>, first: usize) -> String {
        match teams {
            Some(t) => {
                let marks: Vec<String> = (0..t.len()).map(|i| format!("${}", i + first)).collect();
                format!(" AND team_id IN ({})", marks.join(", "))
            }
            None => String::new(),
        }
    }

    /// Open intervals and ended ones not rolled up yet, overlapping `[from, to)`.
    pub async fn intervals_not_rolled_up(
        &self,
        snap: &mut Snapshot,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
        teams: Option<&[String]>,
    ) -> Result<Vec<crate::domain::accounting::Interval>> {
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
    ) -> Result<Vec<crate::domain::accounting::Interval>> {
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
        group_by: crate::domain::accounting::GroupBy,
        teams: Option<&[String]>,
    ) -> Result<Vec<(chrono::NaiveDate, String, f64, f64, f64)>> {
        if teams.is_some_and(|t| t.is_empty()) {
            return Ok(Vec::new());
        }
        let col = match group_by {
            crate::domain::accounting::GroupBy::Team => "team_id",
            crate::domain::accounting::GroupBy::User => "user_id",
            crate::domain::accounting::GroupBy::Pool => "pool_id",
            crate::domain::accounting::GroupBy::Template => "template_id",
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
            // Rolled up, its utilization is final: one still unmeasured (no metrics back end
            // when it ended) is not measured later, or the same hours would read as
            // unmeasured in whole days and as measured at a report's partial edge days.
            let claimed = sqlx::query(
                "UPDATE job_interval SET rolled_up = 1, util_checked = 1 WHERE interval_id = $1 AND rolled_up = 0",
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
            for (day, gpu_ms) in crate::domain::accounting::pieces(
                i,
                i.start,
                end,
                end,
                crate::domain::accounting::Bucket::Day,
                tz,
            ) {
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
        self.commit(tx).await?;
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
                for (day, gpu_ms) in crate::domain::accounting::pieces(
                    i,
                    i.start,
                    end,
                    end,
                    crate::domain::accounting::Bucket::Day,
                    tz,
                ) {
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
        self.commit(tx).await?;
        Ok(count)
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
            self.commit(tx).await?;
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
            "SELECT start_ms, end_ms FROM job_interval WHERE job_id = $1 ORDER BY start_ms DESC, interval_id DESC LIMIT 1",
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

    /// Seconds of the job's run intervals that have ended (whole seconds, as Kueue counts a
    /// workload's past admissions).
    pub async fn closed_run_s(&self, job_id: &str) -> Result<i64> {
        let rows = sqlx::query(
            "SELECT start_ms, end_ms FROM job_interval WHERE job_id = $1 AND end_ms IS NOT NULL",
        )
        .bind(job_id)
        .fetch_all(&self.pool)
        .await
        .map_err(map_err)?;
        let mut ms = 0i64;
        for r in &rows {
            ms += r.try_get::<i64, _>("end_ms")? - r.try_get::<i64, _>("start_ms")?;
        }
        Ok(ms / 1000)
    }

    /// Every run interval of one job, oldest first: (GPUs, start, end, mean utilization).
    pub async fn job_intervals(&self, job_id: &str) -> Result<Vec<crate::domain::accounting::Run>> {
        let rows = sqlx::query(
            "SELECT gpus, start_ms, end_ms, util_mean FROM job_interval WHERE job_id = $1 ORDER BY start_ms, interval_id",
        )
        .bind(job_id)
        .fetch_all(&self.pool)
        .await
        .map_err(map_err)?;
        rows.iter()
            .map(|r| {
                Ok((
                    r.try_get::<i64, _>("gpus")? as u32,
                    from_ms(r.try_get("start_ms")?),
                    r.try_get::<Option<i64>, _>("end_ms")?.map(from_ms),
                    r.try_get::<Option<f64>, _>("util_mean")?,
                ))
            })
            .collect()
    }

    /// Ended run intervals whose mean utilization is not stored yet, oldest first.
    pub async fn intervals_without_util(
        &self,
        limit: i64,
    ) -> Result<
        Vec<(
            String,
            crate::domain::workload::JobGpus,
            DateTime<Utc>,
            DateTime<Utc>,
        )>,
    > {
        let rows = sqlx::query(INTERVALS_WITHOUT_UTIL)
            .bind(limit)
            .fetch_all(&self.pool)
            .await
            .map_err(map_err)?;
        rows.iter()
            .map(|r| {
                let start = from_ms(r.try_get("start_ms")?);
                Ok((
                    r.try_get("interval_id")?,
                    crate::domain::workload::JobGpus {
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
        .execute(&*self.write())
        .await
        .map_err(map_err)?;
        Ok(())
    }

    /// The metrics back end has no figure for this interval: it stays unmeasured.
    pub async fn set_interval_util_unknown(&self, interval_id: &str) -> Result<()> {
        sqlx::query("UPDATE job_interval SET util_checked = 1 WHERE interval_id = $1")
            .bind(interval_id)
            .execute(&*self.write())
            .await
            .map_err(map_err)?;
        Ok(())
    }
}
