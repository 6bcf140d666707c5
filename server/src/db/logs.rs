//! What Gantry keeps of a job after it ends: the last lines of each node rank's log
//! (gzip-compressed JSON, base64 in a TEXT column on both databases), its failure, and
//! which jobs it has cloned or re-run it as.

use std::io::{Read, Write};

use base64::Engine;
use flate2::read::GzDecoder;
use flate2::write::GzEncoder;

use super::*;
use app::model::domain::{JobFailure, LogLine};

/// One rank's kept lines.
#[derive(Clone, Debug, PartialEq)]
pub struct KeptLog {
    pub rank: u32,
    pub lines: Vec<LogLine>,
    /// Earlier lines were dropped to stay within the bounds.
    pub truncated: bool,
}

fn pack(lines: &[LogLine]) -> Result<String> {
    let json = serde_json::to_vec(lines)?;
    let mut gz = GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&json)
        .and_then(|_| gz.finish())
        .map(|bytes| base64::engine::general_purpose::STANDARD.encode(bytes))
        .map_err(|e| DbError::Sqlx(sqlx::Error::Io(e)))
}

fn unpack(body: &str) -> Result<Vec<LogLine>> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(body)
        .map_err(|e| DbError::Sqlx(sqlx::Error::Decode(Box::new(e))))?;
    let mut json = Vec::new();
    GzDecoder::new(&bytes[..])
        .read_to_end(&mut json)
        .map_err(|e| DbError::Sqlx(sqlx::Error::Io(e)))?;
    Ok(serde_json::from_slice(&json)?)
}

impl Db {
    /// Stores what was kept of a job's logs and its failure, and marks it kept, in one
    /// transaction. Keeping again replaces nothing: the first kept copy stays.
    pub async fn keep_logs(
        &self,
        job_id: &str,
        logs: &[KeptLog],
        failure: Option<&JobFailure>,
        at: DateTime<Utc>,
    ) -> Result<bool> {
        let mut tx = self.begin_write().await?;
        let marked = sqlx::query(
            "UPDATE job SET logs_kept_at = $1, failure = COALESCE(failure, $2) WHERE job_id = $3 AND logs_kept_at IS NULL",
        )
        .bind(ms(at))
        .bind(failure.map(serde_json::to_string).transpose()?)
        .bind(job_id)
        .execute(&mut *tx)
        .await
        .map_err(map_err)?
        .rows_affected();
        if marked == 0 {
            return Ok(false);
        }
        for l in logs {
            sqlx::query(
                "INSERT INTO job_log (job_id, node_rank, line_count, truncated, body) VALUES ($1, $2, $3, $4, $5)",
            )
            .bind(job_id)
            .bind(l.rank as i64)
            .bind(l.lines.len() as i64)
            .bind(l.truncated as i64)
            .bind(pack(&l.lines)?)
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
        }
        self.commit(tx).await?;
        Ok(true)
    }

    /// The kept logs of a job, by rank.
    pub async fn kept_logs(&self, job_id: &str) -> Result<Vec<KeptLog>> {
        let rows = sqlx::query(
            "SELECT node_rank, truncated, body FROM job_log WHERE job_id = $1 ORDER BY node_rank",
        )
        .bind(job_id)
        .fetch_all(&self.pool)
        .await
        .map_err(map_err)?;
        rows.iter()
            .map(|r| {
                Ok(KeptLog {
                    rank: r.try_get::<i64, _>("node_rank")? as u32,
                    truncated: r.try_get::<i64, _>("truncated")? != 0,
                    lines: unpack(&r.try_get::<String, _>("body")?)?,
                })
            })
            .collect()
    }

    /// Ended jobs whose logs are not kept yet, finished after `since` (the oldest first).
    pub async fn jobs_to_keep(&self, since: DateTime<Utc>, limit: i64) -> Result<Vec<JobRow>> {
        let sql = format!(
            "SELECT {} FROM job WHERE state IN ('succeeded', 'failed', 'cancelled') AND logs_kept_at IS NULL AND admitted_at IS NOT NULL AND finished_at > $1 ORDER BY finished_at LIMIT $2",
            jobs::JOB_COLUMNS
        );
        let rows = sqlx::query(&sql)
            .bind(ms(since))
            .bind(limit)
            .fetch_all(&self.pool)
            .await
            .map_err(map_err)?;
        rows.iter().map(jobs::job_from_row).collect()
    }

    /// Stores a failure read from the cluster before the logs are kept (the first one stays).
    pub async fn set_failure(&self, job_id: &str, failure: &JobFailure) -> Result<()> {
        sqlx::query("UPDATE job SET failure = $1 WHERE job_id = $2 AND failure IS NULL")
            .bind(serde_json::to_string(failure)?)
            .bind(job_id)
            .execute(&*self.write())
            .await
            .map_err(map_err)?;
        Ok(())
    }

    /// How many jobs of its team were cloned or re-run from `job_id`.
    pub async fn count_clones(&self, job_id: &str) -> Result<u64> {
        let n: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM job WHERE cloned_from = $1 AND team_id = (SELECT team_id FROM job WHERE job_id = $1)",
        )
            .bind(job_id)
            .fetch_one(&self.pool)
            .await
            .map_err(map_err)?;
        Ok(n as u64)
    }

    /// The highest `N` among team `team`'s jobs named `"{base} · re-run N"` (0 when there
    /// is none): a re-run takes the next number, so that re-running a re-run, or a clone in
    /// between, neither repeats a name nor skips a number.
    pub async fn last_rerun_number(&self, team: &str, base: &str) -> Result<u64> {
        let prefix = format!("{base} · re-run ");
        // LIKE narrows (SQLite's ignores ASCII case); the exact prefix is checked below.
        let pattern = format!(
            "{}%",
            prefix
                .replace('\\', "\\\\")
                .replace('%', "\\%")
                .replace('_', "\\_")
        );
        let names: Vec<String> = sqlx::query_scalar(
            "SELECT name FROM job WHERE team_id = $1 AND name LIKE $2 ESCAPE '\\'",
        )
        .bind(team)
        .bind(pattern)
        .fetch_all(&self.pool)
        .await
        .map_err(map_err)?;
        Ok(names
            .iter()
            .filter_map(|n| n.strip_prefix(&prefix))
            .filter(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
            .filter_map(|n| n.parse::<u64>().ok())
            .max()
            .unwrap_or(0))
    }

    /// The jobs of its team cloned or re-run from `job_id`, the newest first: (id, name,
    /// created), at most [`super::MAX_CLONES`].
    pub async fn clones_of(&self, job_id: &str) -> Result<Vec<(String, String, DateTime<Utc>)>> {
        let sql = format!("SELECT job_id, name, created_at FROM job WHERE cloned_from = $1 AND team_id = (SELECT team_id FROM job WHERE job_id = $1) ORDER BY created_at DESC, job_id DESC LIMIT {}", super::MAX_CLONES);
        let rows = sqlx::query(&sql)
            .bind(job_id)
            .fetch_all(&self.pool)
            .await
            .map_err(map_err)?;
        rows.iter()
            .map(|r| {
                Ok((
                    r.try_get("job_id")?,
                    r.try_get("name")?,
                    from_ms(r.try_get("created_at")?),
                ))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn packed_lines_come_back_as_they_went_and_smaller() {
        let lines: Vec<LogLine> = (0..2_000)
            .map(|i| LogLine {
                rank: 1,
                at: Utc.timestamp_opt(1_800_000_000 + i, 5_000).unwrap(),
                text: format!("[rank 0] step {i:>6}/9000 | loss 2.{i:04} | lr 3.00e-4"),
            })
            .collect();
        let body = pack(&lines).unwrap();
        assert_eq!(unpack(&body).unwrap(), lines);
        let raw: usize = lines.iter().map(|l| l.text.len() + 30).sum();
        assert!(body.len() * 3 < raw, "{} of {raw}", body.len());
    }
}
