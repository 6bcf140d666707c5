//! `/api/v1/jobs/{id}/logs` (a job's log as text, as JSON, or followed as server-sent
//! events) and `/api/v1/jobs/{id}/rerun`.

use super::*;
use crate::domain::logs::MAX_LINES_PER_READ;
use crate::domain::logs::{LogQuery, Ranks};
use chrono::{DateTime, Utc};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct LogsQuery {
    /// A node rank (0, 1, ...) or `all`; default 0.
    rank: Option<String>,
    tail: Option<String>,
    since: Option<String>,
    #[serde(default)]
    follow: bool,
    #[serde(default)]
    download: bool,
}

fn parse_query(q: &LogsQuery, default_tail: Option<usize>) -> Result<LogQuery, ApiError> {
    let ranks = match q.rank.as_deref().map(str::trim) {
        None | Some("") => Ranks::One(0),
        Some("all") => Ranks::All,
        Some(r) => Ranks::One(
            r.parse()
                .map_err(|_| ApiError::invalid("rank", "a node rank (0, 1, ...) or 'all'"))?,
        ),
    };
    let tail = match q.tail.as_deref() {
        None | Some("") => default_tail,
        Some(t) => Some(
            t.parse::<usize>()
                .ok()
                .filter(|n| (1..=MAX_LINES_PER_READ).contains(n))
                .ok_or_else(|| {
                    ApiError::invalid(
                        "tail",
                        format!("a number of lines from 1 to {MAX_LINES_PER_READ}"),
                    )
                })?,
        ),
    };
    let since = match q.since.as_deref() {
        None | Some("") => None,
        Some(s) => Some(
            DateTime::parse_from_rfc3339(s)
                .map(|t| t.with_timezone(&Utc))
                .map_err(|_| {
                    ApiError::invalid("since", "an RFC 3339 time, e.g. 2026-12-01T09:30:00Z")
                })?,
        ),
    };
    Ok(LogQuery { ranks, tail, since })
}

/// Headers carry only printable ASCII.
fn header_text(s: &str) -> http::HeaderValue {
    let ascii: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_graphic() || c == ' ' {
                c
            } else {
                '?'
            }
        })
        .collect();
    http::HeaderValue::from_str(&ascii).unwrap_or(http::HeaderValue::from_static("-"))
}

/// `GET /api/v1/jobs/{id}/logs?rank=&tail=&since=&follow=&download=`: the job's log, with
/// the permissions of reading the job (another team's job is a 404).
///
/// - plain text by default, one line per log line as `kubectl logs --timestamps` prints it,
///   with `[rank N] ` before each line for `rank=all`; `Accept: application/json` gives the
///   lines as JSON with where they came from;
/// - `download=true`: the whole log (up to 50,000 lines) as an attachment;
/// - `follow=true`: server-sent events, one `data:` JSON line per log line as they come,
///   then an `end` event when the job has ended and its last lines were sent. On kube the
///   lines come from `pods/log?follow=true` streams held open per pod; on the sim the log is
///   read again every second (its lines follow the sim clock).
pub(super) async fn job_logs(
    State(state): State<AppState>,
    held: crate::http::auth::Held,
    headers: HeaderMap,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<LogsQuery>,
) -> ApiResult<Response> {
    let crate::http::auth::Held(viewer, credential) = held;
    if q.follow {
        let query = parse_query(&q, Some(200))?;
        // Checked before the stream starts: another team's job is a 404 here too.
        state.portal.job_logs(&viewer, &id, query).await?;
        return follow(state, viewer, credential, id, query).await;
    }
    let query = parse_query(&q, if q.download { None } else { Some(1_000) })?;
    let logs = state.portal.job_logs(&viewer, &id, query).await?;
    let wants_json = headers
        .get(http::header::ACCEPT)
        .and_then(|a| a.to_str().ok())
        .is_some_and(|a| a.contains("application/json"));
    if wants_json && !q.download {
        return Ok(Json(logs).into_response());
    }
    let with_rank = query.ranks == Ranks::All;
    let mut body = String::new();
    for l in &logs.lines {
        body.push_str(&l.render(with_rank));
        body.push('\n');
    }
    let mut res = body.into_response();
    let h = res.headers_mut();
    h.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    h.insert("x-gantry-log-source", header_text(&logs.source));
    if let Some(m) = &logs.message {
        h.insert("x-gantry-log-message", header_text(m));
    }
    if q.download {
        let which = match query.ranks {
            Ranks::All => "all-ranks".to_string(),
            Ranks::One(r) => format!("rank-{r}"),
        };
        let safe: String = id
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
            .collect();
        h.insert(
            http::header::CONTENT_DISPOSITION,
            header_text(&format!("attachment; filename=\"job-{safe}-{which}.log\"")),
        );
    }
    Ok(res)
}

/// How often a followed log is read again where the cluster holds no stream (the sim), and
/// how long to wait before opening the cluster's stream again after it closed.
const FOLLOW_EVERY: Duration = Duration::from_secs(1);

/// The lines a follower has sent, per rank: the stamp of the last one and the lines sent with
/// exactly that stamp. A read again starts just before it, so a line stamped alike that came
/// later is not lost, and none is sent twice.
#[derive(Default)]
struct Sent(std::collections::HashMap<u32, (DateTime<Utc>, Vec<String>)>);

impl Sent {
    /// Whether `l` is new, noting it as sent if so.
    fn fresh(&mut self, l: &app::model::domain::LogLine) -> bool {
        match self.0.get_mut(&l.rank) {
            Some((at, _)) if l.at < *at => false,
            Some((at, texts)) if l.at == *at => {
                if texts.contains(&l.text) {
                    false
                } else {
                    texts.push(l.text.clone());
                    true
                }
            }
            _ => {
                self.0.insert(l.rank, (l.at, vec![l.text.clone()]));
                true
            }
        }
    }

    /// Where a read again starts: just before the latest line sent (the sim writes every
    /// rank's lines on one clock) or, for a stream held per pod, before the earliest rank's.
    fn since(&self, earliest: bool) -> Option<DateTime<Utc>> {
        let stamps = self.0.values().map(|(at, _)| *at);
        let at = if earliest { stamps.min() } else { stamps.max() };
        at.map(|a| a - chrono::Duration::nanoseconds(1))
    }
}

/// Who holds a followed log, asked again every [`super::events::RECHECK`]: the reason to end
/// the stream when they signed out, their token was revoked or expired, or a change of team
/// hides the job (the viewer's teams are read again, as `/api/v1/events` does). A database
/// that does not answer keeps the stream until the next check.
async fn still_held(
    state: &AppState,
    credential: &crate::http::auth::Credential,
    viewer: &mut app::model::Viewer,
    id: &str,
) -> Option<&'static str> {
    match credential.recheck(state).await {
        Ok(None) => Some("signed_out"),
        Ok(Some(v)) => {
            *viewer = v;
            match state.portal.may_see_job(viewer, id).await {
                Ok(false) => Some("not_found"),
                Ok(true) => None,
                Err(e) => {
                    tracing::warn!(job.id = %id, error = %e.message, "following a log: could not check who may see it");
                    None
                }
            }
        }
        Err(e) => {
            tracing::warn!(job.id = %id, error = %e, "following a log: could not check its holder");
            None
        }
    }
}

async fn follow(
    state: AppState,
    viewer: app::model::Viewer,
    credential: crate::http::auth::Credential,
    id: String,
    first: LogQuery,
) -> ApiResult<Response> {
    let Some(slot) = state
        .streams
        .take(&viewer.user, state.config.server.max_streams_per_user)
    else {
        return Err(ApiError::new(
            ErrorCode::TooManyRequests,
            format!(
                "you already hold {} live streams; close a tab and try again",
                state.config.server.max_streams_per_user
            ),
        )
        .into());
    };
    let (tx, rx) = tokio::sync::mpsc::channel::<Event>(256);
    let mut viewer = viewer;
    tokio::spawn(async move {
        let _slot = slot;
        let portal = state.portal.clone();
        let send = |l: &app::model::domain::LogLine| {
            Event::default().data(serde_json::to_string(l).unwrap_or_default())
        };
        let end = |reason: &str| {
            Event::default()
                .event("end")
                .data(format!(r#"{{"reason":"{reason}"}}"#))
        };
        let mut query = first;
        let mut sent = Sent::default();
        let mut recheck_at = tokio::time::Instant::now() + super::events::RECHECK;
        loop {
            // What is there: the last `tail` lines first, then whatever came since.
            match portal.job_logs(&viewer, &id, query).await {
                Ok(logs) => {
                    let mut fresh = 0;
                    for l in logs.lines.iter().filter(|l| sent.fresh(l)) {
                        fresh += 1;
                        if tx.send(send(l)).await.is_err() {
                            return;
                        }
                    }
                    query.tail = None;
                    // Nothing sent yet: still after where the reader asked to start, not
                    // from the log's first line (that sent the reader's last line again).
                    query.since = sent.since(false).or(query.since);
                    if fresh == 0 && logs.ended {
                        let _ = tx.send(end("ended")).await;
                        return;
                    }
                    // Where the cluster holds a stream (kube's `pods/log?follow=true`), its
                    // lines as they are written, until the pods' containers end.
                    if !logs.ended {
                        let from = LogQuery {
                            since: sent.since(true).or(query.since),
                            ..query
                        };
                        if let Ok(Some(mut lines)) =
                            portal.follow_job_logs(&viewer, &id, from).await
                        {
                            loop {
                                tokio::select! {
                                    l = lines.recv() => match l {
                                        Some(l) => {
                                            if sent.fresh(&l) && tx.send(send(&l)).await.is_err() {
                                                return;
                                            }
                                        }
                                        None => break,
                                    },
                                    _ = tokio::time::sleep_until(recheck_at) => {
                                        recheck_at = tokio::time::Instant::now() + super::events::RECHECK;
                                        if let Some(reason) = still_held(&state, &credential, &mut viewer, &id).await {
                                            let _ = tx.send(end(reason)).await;
                                            return;
                                        }
                                    }
                                    _ = tx.closed() => return,
                                }
                            }
                            query.since = sent.since(false).or(query.since);
                        }
                    }
                }
                // Gone from the viewer's sight (a change of team): the end, not a retry.
                Err(e) if e.kind == crate::error::Kind::NotFound => {
                    let _ = tx.send(end("not_found")).await;
                    return;
                }
                Err(e) => {
                    tracing::warn!(job.id = %id, error = %e.message, "following a log: read failed");
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(FOLLOW_EVERY) => {}
                _ = tx.closed() => return,
            }
            if tokio::time::Instant::now() >= recheck_at {
                recheck_at = tokio::time::Instant::now() + super::events::RECHECK;
                if let Some(reason) = still_held(&state, &credential, &mut viewer, &id).await {
                    let _ = tx.send(end(reason)).await;
                    return;
                }
            }
        }
    });
    let stream = tokio_stream::wrappers::ReceiverStream::new(rx).map(Ok::<_, Infallible>);
    Ok(Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response())
}

/// `POST /api/v1/jobs/{id}/rerun`: the job again, as it was (body optional:
/// `{"use_current_version": true}`); honours `Idempotency-Key`. 201 with the new job, or 200
/// with the first re-run for a repeated key.
pub(super) async fn rerun(
    State(state): State<AppState>,
    ApiViewer(v): ApiViewer,
    headers: HeaderMap,
    ApiPath(id): ApiPath<String>,
    body: Bytes,
) -> ApiResult<Response> {
    let opts: app::model::RerunRequest = if body.iter().all(|b| b.is_ascii_whitespace()) {
        Default::default()
    } else {
        read_json(&body)?
    };
    let key = match headers.get("idempotency-key") {
        Some(k) => Some(
            k.to_str()
                .map_err(|_| ApiError::invalid("Idempotency-Key", "must be printable ASCII"))?
                .to_string(),
        ),
        None => None,
    };
    let (job, created) = state.portal.rerun_job(&v, &id, opts, key).await?;
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((
        status,
        [(http::header::LOCATION, format!("/api/v1/jobs/{}", job.id))],
        Json(job),
    )
        .into_response())
}
