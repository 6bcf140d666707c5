//! What the server's lower layers (database, cluster, metrics) may know of the app's types:
//! job states, priorities, who is asking (the viewer with their teams and roles), template
//! parameters and their check, and the node size. Plain values, no views.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// GPUs on one HGX node. A gang larger than this takes whole nodes.
pub const GPUS_PER_NODE: u32 = 8;

/// Where a job stands. `preempted` is not a resting state: a preempted job goes back to
/// `queued` and the preemption is recorded as an event (see DESIGN.md, "Job states").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    Queued,
    Admitted,
    Running,
    Succeeded,
    Failed,
    Cancelled,
}

impl JobState {
    pub const ALL: [JobState; 6] = [
        JobState::Queued,
        JobState::Admitted,
        JobState::Running,
        JobState::Succeeded,
        JobState::Failed,
        JobState::Cancelled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Queued => "queued",
            JobState::Admitted => "admitted",
            JobState::Running => "running",
            JobState::Succeeded => "succeeded",
            JobState::Failed => "failed",
            JobState::Cancelled => "cancelled",
        }
    }

    /// The badge's classes: "badge state-queued".
    pub fn badge_class(self) -> &'static str {
        match self {
            JobState::Queued => "badge state-queued",
            JobState::Admitted => "badge state-admitted",
            JobState::Running => "badge state-running",
            JobState::Succeeded => "badge state-succeeded",
            JobState::Failed => "badge state-failed",
            JobState::Cancelled => "badge state-cancelled",
        }
    }

    pub fn parse(s: &str) -> Option<JobState> {
        JobState::ALL.into_iter().find(|st| st.as_str() == s)
    }

    /// Queued, admitted or running: the job still holds or waits for GPUs.
    pub fn is_active(self) -> bool {
        matches!(
            self,
            JobState::Queued | JobState::Admitted | JobState::Running
        )
    }

    /// The job holds GPUs.
    pub fn holds_gpus(self) -> bool {
        matches!(self, JobState::Admitted | JobState::Running)
    }
}

impl std::fmt::Display for JobState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Launch priority, modelled on Kueue WorkloadPriorityClasses of the same names.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Priority {
    Low,
    #[default]
    Normal,
    High,
}

impl Priority {
    pub const ALL: [Priority; 3] = [Priority::Low, Priority::Normal, Priority::High];

    pub fn as_str(self) -> &'static str {
        match self {
            Priority::Low => "low",
            Priority::Normal => "normal",
            Priority::High => "high",
        }
    }

    pub fn parse(s: &str) -> Option<Priority> {
        Priority::ALL.into_iter().find(|p| p.as_str() == s)
    }

    /// The `value` of the matching WorkloadPriorityClass; higher is admitted first.
    pub fn value(self) -> i32 {
        match self {
            Priority::Low => 100,
            Priority::Normal => 1000,
            Priority::High => 10000,
        }
    }
}

/// Nodes a gang of `gpus` GPUs occupies: one node up to 8 GPUs, else whole nodes.
pub fn nodes_for(gpus: u32) -> u32 {
    if gpus <= GPUS_PER_NODE {
        1
    } else {
        gpus.div_ceil(GPUS_PER_NODE)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ParamKind {
    Int,
    Float,
    String,
    Bool,
    /// A dataset or checkpoint location (s3://, gs://, /mnt/…).
    Path,
}

/// A typed template parameter with its default and bounds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ParamSpec {
    pub name: String,
    pub label: String,
    pub kind: ParamKind,
    pub default: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<f64>,
    #[serde(default)]
    pub help: String,
    /// Rarely changed: shown under "Advanced".
    #[serde(default)]
    pub advanced: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Member,
    Lead,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Membership {
    pub team: String,
    pub role: Role,
}

impl ParamSpec {
    /// What the bounds allow, for messages: "between 1 and 64", "at least 1".
    pub fn bounds_text(&self) -> Option<String> {
        // 1e-7 reads better than 0.0000001
        let n = |x: f64| {
            if x != 0.0 && x.abs() < 1e-3 {
                format!("{x:e}")
            } else {
                format!("{x}")
            }
        };
        match (self.min, self.max) {
            (Some(lo), Some(hi)) => Some(format!("between {} and {}", n(lo), n(hi))),
            (Some(lo), None) => Some(format!("at least {}", n(lo))),
            (None, Some(hi)) => Some(format!("at most {}", n(hi))),
            (None, None) => None,
        }
    }

    fn check_bounds(&self, x: f64) -> Result<(), String> {
        let low = self.min.is_some_and(|lo| x < lo);
        let high = self.max.is_some_and(|hi| x > hi);
        if low || high {
            Err(format!(
                "must be {}",
                self.bounds_text().unwrap_or_default()
            ))
        } else {
            Ok(())
        }
    }

    /// Checks a JSON value against the parameter's type and bounds. The server runs this on
    /// every launch and the Launch form runs it as the user types, so both say the same.
    pub fn check(&self, v: &Value) -> Result<Value, String> {
        match self.kind {
            ParamKind::Int => {
                let n = v
                    .as_i64()
                    .ok_or_else(|| "must be a whole number".to_string())?;
                self.check_bounds(n as f64)?;
                Ok(Value::from(n))
            }
            ParamKind::Float => {
                let x = v.as_f64().ok_or_else(|| "must be a number".to_string())?;
                if !x.is_finite() {
                    return Err("must be a finite number".to_string());
                }
                self.check_bounds(x)?;
                Ok(Value::from(x))
            }
            ParamKind::Bool => v
                .as_bool()
                .map(Value::from)
                .ok_or_else(|| "must be true or false".to_string()),
            ParamKind::String | ParamKind::Path => {
                let s = v.as_str().ok_or_else(|| "must be text".to_string())?;
                let s = s.trim();
                if s.is_empty() {
                    return Err("must not be empty".to_string());
                }
                if s.len() > 1024 {
                    return Err("must be at most 1024 characters".to_string());
                }
                if self.kind == ParamKind::Path
                    && !["s3://", "gs://", "hf://", "/"]
                        .iter()
                        .any(|p| s.starts_with(p))
                {
                    return Err("must be a path starting with s3://, gs://, hf:// or /".to_string());
                }
                Ok(Value::from(s))
            }
        }
    }

    /// Reads what a person typed in the form into a checked value.
    pub fn parse_input(&self, raw: &str) -> Result<Value, String> {
        let raw = raw.trim();
        let v = match self.kind {
            ParamKind::Int => Value::from(
                raw.parse::<i64>()
                    .map_err(|_| "must be a whole number".to_string())?,
            ),
            ParamKind::Float => Value::from(
                raw.parse::<f64>()
                    .map_err(|_| "must be a number, e.g. 2e-5".to_string())?,
            ),
            ParamKind::Bool => Value::from(raw == "true"),
            ParamKind::String | ParamKind::Path => Value::from(raw),
        };
        self.check(&v)
    }

    /// The default as the form shows it.
    pub fn default_text(&self) -> String {
        match &self.default {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        }
    }
}

/// The signed-in user as the pages read them, once a page load: who they are, and the names
/// of the pools, which the Jobs page's pool filter offers. With the user rather than read by
/// the Jobs page itself: each read a page waits on is a loading boundary of its own, and that
/// one was about 9 % of what the Jobs page cost the server (the page benchmark).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PageViewer {
    pub viewer: Viewer,
    pub pools: Vec<String>,
}

impl std::ops::Deref for PageViewer {
    type Target = Viewer;
    fn deref(&self) -> &Viewer {
        &self.viewer
    }
}

/// Who is asking: the signed-in user with their teams and roles, as every permission check
/// reads them (stored as a user and their memberships).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Viewer {
    pub user: String,
    pub display_name: String,
    pub teams: Vec<Membership>,
    pub is_admin: bool,
}

impl Viewer {
    pub fn is_member_of(&self, team: &str) -> bool {
        self.teams.iter().any(|m| m.team == team)
    }

    pub fn is_lead_of(&self, team: &str) -> bool {
        self.teams
            .iter()
            .any(|m| m.team == team && m.role == Role::Lead)
    }

    pub fn primary_team(&self) -> Option<&str> {
        self.teams.first().map(|m| m.team.as_str())
    }

    /// A job runs on a team's quota: only a member of some team may launch one (an admin
    /// in no team may not).
    pub fn can_launch(&self) -> bool {
        !self.teams.is_empty()
    }

    /// Usage reports are for team leads (their teams) and admins (all).
    pub fn sees_usage(&self) -> bool {
        self.is_admin || self.teams.iter().any(|m| m.role == Role::Lead)
    }
}

/// One line a job's pod printed. `rank` is the pod's node rank (torchrun's `node_rank`, the
/// JobSet pod's completion index): node rank `r` runs the GPU processes of global ranks
/// `8r ..= 8r + 7`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogLine {
    pub rank: u32,
    pub at: chrono::DateTime<chrono::Utc>,
    pub text: String,
}

impl LogLine {
    /// As `kubectl logs --timestamps` prints it, with `[rank N] ` before it when several
    /// ranks are interleaved.
    pub fn render(&self, with_rank: bool) -> String {
        let at = self.at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        if with_rank {
            format!("[rank {}] {at} {}", self.rank, self.text)
        } else {
            format!("{at} {}", self.text)
        }
    }
}

/// Whether a log line reports an error worth a reader's eye: a Python traceback and its
/// exception, NCCL warnings, CUDA errors, out-of-memory, a worker's non-zero exit.
pub fn is_error_line(text: &str) -> bool {
    const MARKS: [&str; 12] = [
        "Traceback (most recent call last)",
        "Error:",
        "Error(",
        "NCCL WARN",
        "CUDA error",
        "out of memory",
        "OutOfMemory",
        "OOMKilled",
        "exitcode:",
        "FATAL",
        "[E ",
        "Killed",
    ];
    MARKS.iter().any(|m| text.contains(m))
}

/// Why a job failed, in plain words, from the first pod that failed (kube: the pods'
/// `containerStatuses` and the JobSet/TrainJob `Failed` condition; sim: its failure
/// parameters).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobFailure {
    /// One sentence: "A worker ran out of memory (OOMKilled)".
    pub summary: String,
    /// The container's exit code, when it exited.
    pub exit_code: Option<i32>,
    /// Kubernetes' word for it: `OOMKilled`, `Error`, `Evicted`, `DeadlineExceeded`, ...
    pub reason: String,
    /// What that exit code or reason usually means, for someone who has not memorised them.
    pub meaning: String,
    /// The pod that failed first, its node rank and node.
    pub pod: Option<String>,
    pub rank: Option<u32>,
    pub node: Option<String>,
    pub at: Option<chrono::DateTime<chrono::Utc>>,
    /// The job object's `Failed` condition message, when it has one.
    pub condition: Option<String>,
}

/// What an exit code usually means in a training container (128 + N: killed by signal N).
pub fn exit_code_meaning(code: i32) -> String {
    match code {
        0 => "it exited normally".into(),
        1 => {
            "the program raised an error (a Python exception, most often); its last lines say which"
                .into()
        }
        2 => "the command was misused: a bad argument or option".into(),
        126 => "the command could not be executed (not executable)".into(),
        127 => "the command was not found in the image".into(),
        134 => "aborted (SIGABRT): often a failed CUDA or C++ assertion".into(),
        135 => "bus error (SIGBUS): often /dev/shm too small for the data loaders".into(),
        137 => "killed (SIGKILL): out of memory, or stopped by Kubernetes".into(),
        139 => "segmentation fault (SIGSEGV) in native code".into(),
        143 => "terminated (SIGTERM): stopped from outside, e.g. cancelled or preempted".into(),
        c if c > 128 && c < 160 => format!("killed by signal {}", c - 128),
        c => format!("the program exited with code {c}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_badge_class_names_its_state() {
        for s in JobState::ALL {
            assert_eq!(s.badge_class(), format!("badge state-{}", s.as_str()));
        }
    }

    #[test]
    fn days_bound_whole_utc_days() {
        let t = |s: &str| {
            chrono::DateTime::parse_from_rfc3339(s)
                .unwrap()
                .with_timezone(&chrono::Utc)
        };
        assert_eq!(
            day_or_time("2026-12-01", false).unwrap(),
            Some(t("2026-12-01T00:00:00Z"))
        );
        assert_eq!(
            day_or_time("2026-12-01", true).unwrap(),
            Some(t("2026-12-02T00:00:00Z"))
        );
        // A time as `to` includes its own millisecond, the precision jobs are kept to.
        assert_eq!(
            day_or_time("2026-12-01T09:30:00+01:00", true).unwrap(),
            Some(t("2026-12-01T08:30:00.001Z"))
        );
        assert_eq!(
            day_or_time("2026-12-01T09:30:00.0005Z", true).unwrap(),
            Some(t("2026-12-01T09:30:00.001Z"))
        );
        assert_eq!(
            day_or_time("2026-12-01T09:30:00+01:00", false).unwrap(),
            Some(t("2026-12-01T08:30:00Z"))
        );
        assert_eq!(day_or_time(" ", false).unwrap(), None);
        assert_eq!(day_or_time("yesterday", false), Err(DAY_OR_TIME));
        let viewer = Viewer {
            user: "alice".into(),
            display_name: "Alice".into(),
            teams: vec![],
            is_admin: false,
        };
        let bad = JobFilter {
            to: Some("yesterday".into()),
            ..Default::default()
        };
        assert_eq!(bad.terms(&viewer).unwrap_err().0, "to");
    }

    fn int_param() -> ParamSpec {
        ParamSpec {
            name: "epochs".into(),
            label: "Epochs".into(),
            kind: ParamKind::Int,
            default: Value::from(3),
            min: Some(1.0),
            max: Some(100.0),
            help: String::new(),
            advanced: false,
        }
    }

    #[test]
    fn params_are_checked_for_type_and_bounds() {
        let p = int_param();
        assert_eq!(p.check(&Value::from(3)), Ok(Value::from(3)));
        assert_eq!(
            p.check(&Value::from(0)).unwrap_err(),
            "must be between 1 and 100"
        );
        assert_eq!(
            p.check(&Value::from("3")).unwrap_err(),
            "must be a whole number"
        );
        assert_eq!(p.parse_input(" 7 "), Ok(Value::from(7)));
        assert!(p.parse_input("seven").is_err());
        let path = ParamSpec {
            kind: ParamKind::Path,
            min: None,
            max: None,
            ..int_param()
        };
        assert!(path.check(&Value::from("s3://data/train")).is_ok());
        assert!(path.check(&Value::from("data/train")).is_err());
    }

    #[test]
    fn whole_nodes_beyond_eight_gpus() {
        assert_eq!(nodes_for(4), 1);
        assert_eq!(nodes_for(8), 1);
        assert_eq!(nodes_for(16), 2);
        assert_eq!(nodes_for(64), 8);
    }
}

/// Which jobs a list asks for, as the Jobs page and `GET /api/v1/jobs` take it. Scoping to
/// what the viewer may see is the backend's job ([`JobFilter::terms`] names the teams).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct JobFilter {
    pub state: Option<JobState>,
    pub team: Option<String>,
    /// Only the viewer's own jobs.
    pub mine: bool,
    /// Only queued, admitted and running jobs.
    pub active: bool,
    pub user: Option<String>,
    pub pool: Option<String>,
    /// Text in the job's name, template or user, ignoring the case of ASCII letters.
    pub q: Option<String>,
    /// Submitted on or after `from`, on or before `to`: a day (`2026-12-01`, UTC) or an
    /// RFC 3339 time.
    pub from: Option<String>,
    pub to: Option<String>,
    /// A `next_cursor` from the page before.
    pub cursor: Option<String>,
    /// Jobs per page: 50 unless asked, at most 200.
    pub limit: Option<u32>,
}

/// What `from` and `to` accept.
pub const DAY_OR_TIME: &str =
    "a day as 2026-12-01 (UTC) or an RFC 3339 time such as 2026-12-01T09:30:00Z";

/// A list's time bound: an RFC 3339 time, or a UTC day (its start). With `end` it is the
/// first instant past the bound, so that `to` includes what it names: the start of the next
/// day for a day, and the next millisecond for a time (submission times are kept to the
/// millisecond, so a job submitted at exactly `to` is in the list). Empty is no bound;
/// anything else is `Err`.
pub fn day_or_time(
    v: &str,
    end: bool,
) -> Result<Option<chrono::DateTime<chrono::Utc>>, &'static str> {
    let v = v.trim();
    if v.is_empty() {
        return Ok(None);
    }
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(v) {
        let t = t.with_timezone(&chrono::Utc);
        if !end {
            return Ok(Some(t));
        }
        let past = t
            .timestamp_millis()
            .checked_add(1)
            .and_then(chrono::DateTime::from_timestamp_millis)
            .ok_or(DAY_OR_TIME)?;
        return Ok(Some(past));
    }
    let day = chrono::NaiveDate::parse_from_str(v, "%Y-%m-%d").map_err(|_| DAY_OR_TIME)?;
    let day = if end {
        day.succ_opt().unwrap_or(day)
    } else {
        day
    };
    Ok(Some(day.and_time(chrono::NaiveTime::MIN).and_utc()))
}

/// The terms of a job list whatever its page: the database's query is built from them, and a
/// live page uses [`JobTerms::matches`] to place a changed job without asking the server. The
/// two are one rule (`server/tests/api.rs` holds the SQL and `matches` equal).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct JobTerms {
    /// Only these teams' jobs (`None`: every team's, for an admin).
    pub teams: Option<Vec<String>>,
    pub user: Option<String>,
    pub state: Option<JobState>,
    /// Only queued, admitted and running jobs.
    pub active: bool,
    pub pool: Option<String>,
    /// Jobs whose name, template or user contains this, ignoring the case of ASCII letters.
    pub text: Option<String>,
    /// Submitted at or after `from`, before `until`.
    pub from: Option<chrono::DateTime<chrono::Utc>>,
    pub until: Option<chrono::DateTime<chrono::Utc>>,
}

/// What [`JobTerms::matches`] reads of a job.
#[derive(Clone, Copy, Debug)]
pub struct JobFacts<'a> {
    pub team: &'a str,
    pub user: &'a str,
    pub state: JobState,
    pub pool: &'a str,
    pub name: &'a str,
    pub template: &'a str,
    pub created_at: chrono::DateTime<chrono::Utc>,
}

impl JobFilter {
    /// The list's terms for `viewer`: the team asked for (the caller checks that the viewer
    /// may see it), else every team for an admin and the viewer's teams for anyone else;
    /// `mine` is the viewer's own jobs. `Err` names the field and what it accepts.
    pub fn terms(&self, viewer: &Viewer) -> Result<JobTerms, (&'static str, String)> {
        fn some(v: &Option<String>) -> Option<&str> {
            v.as_deref().map(str::trim).filter(|v| !v.is_empty())
        }
        let from = match &self.from {
            Some(v) => day_or_time(v, false).map_err(|m| ("from", m.to_string()))?,
            None => None,
        };
        let until = match &self.to {
            Some(v) => day_or_time(v, true).map_err(|m| ("to", m.to_string()))?,
            None => None,
        };
        Ok(JobTerms {
            teams: match some(&self.team) {
                Some(t) => Some(vec![t.to_string()]),
                None if viewer.is_admin => None,
                None => Some(viewer.teams.iter().map(|m| m.team.clone()).collect()),
            },
            user: if self.mine {
                Some(viewer.user.clone())
            } else {
                some(&self.user).map(String::from)
            },
            state: self.state,
            active: self.active,
            pool: some(&self.pool).map(String::from),
            text: some(&self.q).map(String::from),
            from,
            until,
        })
    }
}

impl JobTerms {
    /// Whether a job is in the list these terms make (any page of it).
    pub fn matches(&self, j: JobFacts<'_>) -> bool {
        // The case of ASCII letters only, as the database's query.
        let contains = |hay: &str, needle: &str| hay.to_ascii_lowercase().contains(needle);
        self.teams
            .as_ref()
            .is_none_or(|ts| ts.iter().any(|t| t == j.team))
            && self.user.as_deref().is_none_or(|u| u == j.user)
            && self.state.is_none_or(|s| s == j.state)
            && (!self.active || j.state.is_active())
            && self.pool.as_deref().is_none_or(|p| p == j.pool)
            && self.text.as_deref().is_none_or(|t| {
                let t = t.to_ascii_lowercase();
                contains(j.name, &t) || contains(j.template, &t) || contains(j.user, &t)
            })
            && self.from.is_none_or(|f| j.created_at >= f)
            && self.until.is_none_or(|u| j.created_at < u)
    }
}
