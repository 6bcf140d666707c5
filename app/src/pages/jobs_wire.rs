//! How the Jobs page's list travels inside the page, for hydration.
//!
//! A resource rendered on the server is written into the page as JSON, and Leptos writes that
//! JSON as a JavaScript string literal with Rust's `Debug` escaping, a backslash before each of
//! its quotes. For the 50 rows of a Jobs page that was 38 KB, and its serialization and
//! escaping were about a third of what the server spent on the page (callgrind, the page
//! benchmark): most of it the names and empty values of fields a row never shows (the pending
//! reason, events, parameters, nodes…). Here each row travels as an array of only what the
//! page reads of it: what the table shows, what the Cancel button asks about, and what the
//! live patching (`jobs_live`) compares. The fields it leaves out arrive empty; the page
//! never reads them (the tests below check that a row, its patching facts and its place in
//! the order come back as they went). Its quotes are swapped as
//! [`crate::wire::SwappedJson`] has them: the page's string needs far fewer escapes.
//! Fetches after the page has loaded go through the server function as before, with whole
//! rows; the API is unchanged.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use leptos::server::codee::{Decoder, Encoder};
use serde::{Deserialize, Serialize};

use crate::error::ApiError;
use crate::model::{Job, JobKey, JobList, JobState, Priority};
use crate::wire::{from_swapped, to_swapped};

/// A row: id, name, template, team, user, pool, GPUs, state, queue position, submitted,
/// admitted, finished, and whether the viewer may cancel it. A tuple struct travels as an
/// array: no field names.
#[derive(PartialEq, Serialize, Deserialize)]
struct Row<S>(
    S,
    S,
    S,
    S,
    S,
    S,
    u32,
    JobState,
    Option<u32>,
    Instant,
    Option<Instant>,
    Option<Instant>,
    bool,
);

/// A time as one number, nanoseconds since the Unix epoch: exact (but for a leap second,
/// which comes back as the next second's first; the database holds none), and a fraction of
/// the work of RFC 3339 text both ways (chrono's writing of the rows' three dates was 6 % of
/// what the server spent on a Jobs page, callgrind over the page benchmark).
#[derive(Clone, Copy, PartialEq)]
struct Instant(DateTime<Utc>);

impl Serialize for Instant {
    fn serialize<Se: serde::Serializer>(&self, s: Se) -> Result<Se::Ok, Se::Error> {
        let t = self.0;
        s.serialize_i128(
            i128::from(t.timestamp()) * 1_000_000_000 + i128::from(t.timestamp_subsec_nanos()),
        )
    }
}

impl<'de> Deserialize<'de> for Instant {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let n = i128::deserialize(d)?;
        i64::try_from(n.div_euclid(1_000_000_000))
            .ok()
            .and_then(|secs| DateTime::from_timestamp(secs, n.rem_euclid(1_000_000_000) as u32))
            .map(Instant)
            .ok_or_else(|| serde::de::Error::custom(format!("{n} ns is out of range for a time")))
    }
}

/// What the page reads of `j`.
fn row(j: &Job) -> Row<&str> {
    Row(
        &j.id,
        &j.name,
        &j.template,
        &j.team,
        &j.user,
        &j.pool,
        j.gpus,
        j.state,
        j.queue_position,
        Instant(j.created_at),
        j.admitted_at.map(Instant),
        j.finished_at.map(Instant),
        j.can_cancel,
    )
}

/// Whether `a` and `b` are the same row to the page (whatever else of them differs).
pub(crate) fn same_row(a: &Job, b: &Job) -> bool {
    row(a) == row(b)
}

#[derive(Serialize)]
enum Out<'a> {
    Ok(ListOut<'a>),
    Err(&'a ApiError),
}

#[derive(Serialize)]
struct ListOut<'a> {
    rows: Vec<Row<&'a str>>,
    total: u64,
    next_cursor: Option<&'a str>,
    now: DateTime<Utc>,
    live_seq: u64,
    newest: Option<&'a JobKey>,
    after: Option<&'a JobKey>,
}

#[derive(Deserialize)]
enum In {
    Ok(ListIn),
    Err(ApiError),
}

#[derive(Deserialize)]
struct ListIn {
    rows: Vec<Row<String>>,
    total: u64,
    next_cursor: Option<String>,
    now: DateTime<Utc>,
    live_seq: u64,
    newest: Option<JobKey>,
    after: Option<JobKey>,
}

/// The Jobs page list's codec (see the module's documentation).
pub struct JobRowsCodec;

impl Encoder<Result<Arc<JobList>, ApiError>> for JobRowsCodec {
    type Error = serde_json::Error;
    type Encoded = String;

    fn encode(val: &Result<Arc<JobList>, ApiError>) -> Result<String, serde_json::Error> {
        let out = match val {
            Ok(l) => Out::Ok(ListOut {
                rows: l.jobs.iter().map(row).collect(),
                total: l.total,
                next_cursor: l.next_cursor.as_deref(),
                now: l.now,
                live_seq: l.live_seq,
                newest: l.newest.as_ref(),
                after: l.after.as_ref(),
            }),
            Err(e) => Out::Err(e),
        };
        to_swapped(&out)
    }
}

impl Decoder<Result<Arc<JobList>, ApiError>> for JobRowsCodec {
    type Error = serde_json::Error;
    type Encoded = str;

    fn decode(val: &str) -> Result<Result<Arc<JobList>, ApiError>, serde_json::Error> {
        Ok(match from_swapped::<In>(val)? {
            In::Ok(l) => Ok(Arc::new(JobList {
                jobs: l.rows.into_iter().map(job).collect(),
                total: l.total,
                next_cursor: l.next_cursor,
                now: l.now,
                live_seq: l.live_seq,
                newest: l.newest,
                after: l.after,
            })),
            In::Err(e) => Err(e),
        })
    }
}

/// A row as a job, with what the row leaves out empty.
fn job(r: Row<String>) -> Job {
    let Row(
        id,
        name,
        template,
        team,
        user,
        pool,
        gpus,
        state,
        queue_position,
        Instant(created_at),
        admitted_at,
        finished_at,
        can_cancel,
    ) = r;
    Job {
        id,
        name,
        template,
        template_version: 0,
        team,
        user,
        pool,
        gpus,
        nodes: 0,
        priority: Priority::default(),
        state,
        queue_position,
        queue_position_in_team: None,
        pending_reason: None,
        eta: None,
        ahead: Vec::new(),
        preemptions: Vec::new(),
        created_at,
        admitted_at: admitted_at.map(|t| t.0),
        finished_at: finished_at.map(|t| t.0),
        params: Default::default(),
        max_runtime_s: 0,
        node_names: Vec::new(),
        events: Vec::new(),
        can_cancel,
        failure: None,
        cloned_from: None,
        clones: Vec::new(),
        clone_count: 0,
        can_rerun: false,
        version_note: None,
        gpu_hours: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::live::Change;
    use crate::model::{AheadJob, JobEvent, JobTerms};
    use crate::pages::jobs::Row as Drawn;
    use crate::pages::jobs_live::tests::{job, t};
    use crate::pages::jobs_live::{patch, Patched};

    /// Jobs as the server lists them, with what a row does not show filled in too.
    fn page() -> JobList {
        let mut queued = job("q1", 30, JobState::Queued, "h100", Some(2));
        queued.pending_reason = Some("Team nlp has 16 of its 16 GPUs in use".into());
        queued.eta = Some(t(900));
        queued.can_cancel = true;
        queued.ahead = vec![AheadJob {
            position: 1,
            team: "nlp".into(),
            gpus: 8,
            priority: Priority::High,
            submitted_at: t(5),
            id: Some("q0".into()),
            name: Some("run-q0".into()),
            user: Some("alice".into()),
        }];
        let mut running = job("r1", 20, JobState::Running, "h100", None);
        running.admitted_at = Some(t(25));
        running.node_names = vec!["h100-node-00".into()];
        running
            .params
            .insert("lr".into(), serde_json::json!(0.0003));
        running.can_cancel = true;
        running.events = vec![JobEvent {
            at: t(25),
            kind: "admitted".into(),
            reason: "Admitted to h100".into(),
        }];
        let mut failed = job("f1", 10, JobState::Failed, "h200", None);
        failed.admitted_at = Some(t(12));
        failed.finished_at = Some(t(14));
        failed.user = "alice".into();
        JobList {
            jobs: vec![queued, running, failed],
            total: 7,
            next_cursor: Some("cursor-after-f1".into()),
            now: t(1000),
            live_seq: 42,
            newest: Some(JobKey::of(&job("n1", 40, JobState::Queued, "h100", None))),
            after: None,
        }
    }

    fn round_trip(l: &Result<JobList, ApiError>) -> Result<Arc<JobList>, ApiError> {
        let encoded = JobRowsCodec::encode(&l.clone().map(Arc::new)).unwrap();
        JobRowsCodec::decode(&encoded).unwrap()
    }

    fn drawn(l: &JobList) -> Vec<Drawn> {
        l.jobs.iter().map(Drawn::of).collect()
    }

    #[test]
    fn a_page_comes_back_drawn_as_it_went() {
        let sent = page();
        let got = round_trip(&Ok(sent.clone())).unwrap();
        assert_eq!(drawn(&got), drawn(&sent));
        assert_eq!(
            (got.total, &got.next_cursor, got.now, got.live_seq),
            (sent.total, &sent.next_cursor, sent.now, sent.live_seq)
        );
        assert_eq!((&got.newest, &got.after), (&sent.newest, &sent.after));
        // What a row does not show stayed behind.
        assert_eq!(got.jobs[0].pending_reason, None);
        assert!(got.jobs[1].node_names.is_empty() && got.jobs[1].events.is_empty());
    }

    #[test]
    fn a_page_that_came_back_patches_as_the_one_that_went() {
        let sent = page();
        let mut a = sent.clone();
        let mut b = Arc::unwrap_or_clone(round_trip(&Ok(sent.clone())).unwrap());
        let terms = JobTerms {
            teams: Some(vec!["nlp".into()]),
            ..Default::default()
        };
        // The running row told of again as it is, then a launch, the queued row admitted,
        // and the failed row's job (another page's filter would drop it) unchanged.
        let mut admitted = sent.jobs[0].clone();
        admitted.state = JobState::Admitted;
        admitted.queue_position = None;
        admitted.admitted_at = Some(t(1001));
        let rows = [
            sent.jobs[1].clone(),
            job("n2", 50, JobState::Queued, "h100", Some(3)),
            admitted,
            sent.jobs[2].clone(),
        ];
        for (i, row) in rows.into_iter().enumerate() {
            let c = Change {
                seq: i as u64 + 1,
                job_id: row.id.clone(),
                pool: row.pool.clone(),
                at: t(1000 + i as i64),
                state: Some(row.state),
                row: Some(Box::new(row)),
                ..Default::default()
            };
            let (pa, pb) = (patch(&mut a, &terms, &c), patch(&mut b, &terms, &c));
            assert_eq!(pa, pb, "change {i}");
            assert_eq!(drawn(&a), drawn(&b), "change {i}");
            assert_eq!(a.total, b.total, "change {i}");
        }
        // A row told of as it was is nothing new, to either.
        let again = Change {
            seq: 5,
            job_id: "r1".into(),
            pool: "h100".into(),
            at: t(1010),
            row: Some(Box::new(sent.jobs[1].clone())),
            ..Default::default()
        };
        assert_eq!(patch(&mut b, &terms, &again), Patched::Nothing);
    }

    #[test]
    fn times_come_back_to_the_nanosecond() {
        let times = [
            "2026-12-06T19:17:35.123456789Z",
            "2026-12-06T19:17:35Z",
            "1969-12-31T23:59:59.999999999Z",
            "1970-01-01T00:00:00Z",
            "9999-12-31T23:59:59.999999999Z",
        ];
        for text in times {
            let t = Instant(text.parse().unwrap());
            let json = serde_json::to_string(&t).unwrap();
            let back: Instant = serde_json::from_str(&json).unwrap();
            assert_eq!(back.0, t.0, "{text} as {json}");
        }
        // A number out of chrono's range is an error, not a wrong time.
        let far = format!("{}", i128::from(i64::MAX) * 1_000_000_000);
        assert!(serde_json::from_str::<Instant>(&far).is_err());
    }

    #[test]
    fn an_error_comes_back_as_it_went() {
        let e = ApiError::not_found("no such team 'vision'");
        assert_eq!(round_trip(&Err(e.clone())), Err(e));
    }

    #[test]
    fn rows_travel_in_under_half_the_bytes_of_whole_jobs() {
        let l = Ok(page());
        let compact = JobRowsCodec::encode(&l.clone().map(Arc::new))
            .unwrap()
            .len();
        let whole = serde_json::to_string(&l).unwrap().len();
        assert!(
            compact * 2 < whole,
            "{compact} bytes against {whole} as whole jobs"
        );
    }
}
