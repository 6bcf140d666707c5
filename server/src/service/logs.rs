//! A job's logs: from its pods while the cluster has them, from what Gantry kept after it
//! ended once the pods are gone; and the keeping itself, with the failure read from the
//! pods, done once per ended job.

use super::*;
use crate::cluster::{LogQuery, LogSource, Ranks};
use crate::db::KeptLog;
use crate::domain::logs::{interleave, keep_tail, select, KEEP_LINES_PER_RANK, KEEP_RANKS};

/// Where a log read came from.
pub const FROM_CLUSTER: &str = "cluster";
pub const FROM_KEPT: &str = "kept";
pub const FROM_NONE: &str = "none";

/// What a back end needs to read a stored job's logs.
pub fn log_source(row: &JobRow) -> LogSource {
    LogSource {
        job_id: row.id.clone(),
        team: row.team.clone(),
        gpus: row.gpus,
        template: row.template.clone(),
        params: row
            .params
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        max_runtime_s: row.max_runtime_s,
        started_at: row.admitted_at,
        ended: match (row.state.is_active(), row.finished_at) {
            (false, Some(at)) => Some((at, row.state)),
            _ => None,
        },
        nodes: row.node_names.clone(),
    }
}

impl Portal {
    /// The job's log lines as `q` selects them; another team's job is "not found", as the
    /// job itself is.
    pub async fn job_logs(&self, viewer: &Viewer, id: &str, q: LogQuery) -> Result<JobLogs, Error> {
        let row = self.visible_row(viewer, id).await?;
        let ranks = nodes_for(row.gpus).max(1);
        if let Ranks::One(r) = q.ranks {
            if r >= ranks {
                return Err(Error::invalid(
                    "rank",
                    format!(
                        "this job has node ranks 0 to {} ({} pod{}); 'all' reads every rank",
                        ranks - 1,
                        ranks,
                        if ranks == 1 { "" } else { "s" }
                    ),
                ));
            }
        }
        let empty = |message: &str| JobLogs {
            lines: Vec::new(),
            ranks,
            source: FROM_NONE.into(),
            truncated: false,
            message: Some(message.to_string()),
            ended: !row.state.is_active(),
        };
        if row.admitted_at.is_none() {
            return Ok(empty(
                "No logs yet: the job has not started (its pods are created when it is admitted).",
            ));
        }
        let src = log_source(&row);
        // The id of the request whose read failed, when it failed.
        let unavailable = match self.cluster.logs(&src, &q).await {
            Ok(Some(lines)) => {
                return Ok(JobLogs {
                    lines,
                    ranks,
                    source: FROM_CLUSTER.into(),
                    truncated: false,
                    message: None,
                    ended: !row.state.is_active(),
                })
            }
            Ok(None) => None,
            Err(e) => {
                // The cluster's own words (its service account, namespaces, pod names) go to
                // the log with the request's id; the viewer gets the id to quote.
                let request = crate::context::current_request_id();
                tracing::warn!(job.id = %id, request_id = %request, error = %e, "could not read the job's logs from the cluster");
                Some(request)
            }
        };
        let kept = self.db.kept_logs(id).await?;
        if kept.is_empty() {
            return Ok(match unavailable {
                Some(request) => empty(&format!("Logs unavailable: the cluster did not answer (request {request}). Gantry tries again as you follow.")),
                None if row.state.is_active() => empty("No logs yet: the pods are starting."),
                None => empty("No logs: the cluster deleted the pods and Gantry kept none of this job's lines."),
            });
        }
        let truncated = kept.iter().any(|k| k.truncated && q.ranks.includes(k.rank));
        let lines = select(interleave(kept.into_iter().map(|k| k.lines).collect()), &q);
        Ok(JobLogs {
            lines,
            ranks,
            source: FROM_KEPT.into(),
            truncated,
            message: Some(match unavailable {
                Some(request) => format!("The cluster did not answer (request {request}); showing the lines Gantry kept when the job ended."),
                None => format!(
                    "The pods are gone; showing the last {} lines per rank Gantry kept when the job ended.",
                    KEEP_LINES_PER_RANK
                ),
            }),
            ended: true,
        })
    }

    /// The job's new log lines from a stream the cluster holds open (kube), with the
    /// permissions of [`Portal::job_logs`]; `None` when the cluster has none for it (the sim,
    /// a job with no pods, a cluster that did not answer): the caller reads again instead.
    pub async fn follow_job_logs(
        &self,
        viewer: &Viewer,
        id: &str,
        q: LogQuery,
    ) -> Result<Option<tokio::sync::mpsc::Receiver<app::model::domain::LogLine>>, Error> {
        let row = self.visible_row(viewer, id).await?;
        if row.admitted_at.is_none() || !row.state.is_active() {
            return Ok(None);
        }
        match self.cluster.follow_logs(&log_source(&row), &q).await {
            Ok(r) => Ok(r),
            Err(e) => {
                tracing::warn!(job.id = %id, error = %e, "could not follow the job's logs; reading them again instead");
                Ok(None)
            }
        }
    }

    /// Keeps the last part of an ended job's logs, and its failure, in the database, once.
    /// Returns whether it is kept now; `Ok(false)` when the cluster could not be read (the
    /// keeper tries again).
    pub async fn keep_logs(&self, row: &JobRow) -> Result<bool, Error> {
        let src = log_source(row);
        let failure = if row.state == JobState::Failed {
            match self.cluster.failure(&src).await {
                Ok(f) => f,
                Err(e) => {
                    tracing::warn!(job.id = %row.id, error = %e, "could not read why the job failed; trying again");
                    return Ok(false);
                }
            }
        } else {
            None
        };
        let mut ranks: Vec<u32> = (0..src.ranks().min(KEEP_RANKS)).collect();
        if let Some(r) = failure.as_ref().and_then(|f| f.rank) {
            if !ranks.contains(&r) {
                ranks.push(r);
            }
        }
        let mut kept = Vec::new();
        for rank in ranks {
            let q = LogQuery {
                ranks: Ranks::One(rank),
                tail: Some(KEEP_LINES_PER_RANK),
                since: None,
            };
            match self.cluster.logs(&src, &q).await {
                Ok(Some(lines)) => {
                    // As many lines as asked for: there may have been more before them.
                    let full = lines.len() >= KEEP_LINES_PER_RANK;
                    let (lines, cut) = keep_tail(lines);
                    let truncated = cut || full;
                    kept.push(KeptLog {
                        rank,
                        lines,
                        truncated,
                    });
                }
                // The pods are gone already: nothing more can be kept.
                Ok(None) => break,
                Err(e) => {
                    tracing::warn!(job.id = %row.id, error = %e, "could not keep the job's logs; trying again");
                    return Ok(false);
                }
            }
        }
        let kept_now = self
            .db
            .keep_logs(&row.id, &kept, failure.as_ref(), self.cluster.now())
            .await?;
        if kept_now {
            tracing::info!(job.id = %row.id, ranks = kept.len(), "kept the ended job's logs");
        }
        Ok(true)
    }
}
