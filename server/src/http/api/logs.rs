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
///   then an `end` event when the job has ended and its last lines were sent.
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

/// How often a followed log is read again.
const FOLLOW_EVERY: Duration = Duration::from_secs(1);

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
    tokio::spawn(async move {
        let _slot = slot;
        let portal = state.portal.clone();
        let mut query = first;
        // The stamp of the last line sent, and the lines sent with exactly that stamp: the
        // next read starts just before it, so a line stamped alike that came later is not
        // lost, and those sent are not sent twice.
        let mut last_at: Option<DateTime<Utc>> = None;
        let mut sent_at_last: Vec<String> = Vec::new();
        let mut every = tokio::time::interval(FOLLOW_EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut checked = tokio::time::Instant::now();
        loop {
            tokio::select! {
                _ = every.tick() => {}
                _ = tx.closed() => return,
            }
            if checked.elapsed() >= super::events::RECHECK {
                checked = tokio::time::Instant::now();
                if let Ok(None) = credential.recheck(&state).await {
                    let _ = tx
                        .send(
                            Event::default()
                                .event("end")
                                .data(r#"{"reason":"signed_out"}"#),
                        )
                        .await;
                    return;
                }
            }
            let logs = match portal.job_logs(&viewer, &id, query).await {
                Ok(l) => l,
                Err(e) => {
                    tracing::warn!(job.id = %id, error = %e.message, "following a log: read failed");
                    continue;
                }
            };
            let fresh: Vec<_> = logs
                .lines
                .into_iter()
                .filter(|l| Some(l.at) != last_at || !sent_at_last.contains(&l.text))
                .collect();
            if let Some(last) = fresh.last().map(|l| l.at) {
                if Some(last) != last_at {
                    sent_at_last.clear();
                }
                for l in &fresh {
                    if l.at == last {
                        sent_at_last.push(l.text.clone());
                    }
                    let data = serde_json::to_string(l).unwrap_or_default();
                    if tx.send(Event::default().data(data)).await.is_err() {
                        return;
                    }
                }
                last_at = Some(last);
                query.since = Some(last - chrono::Duration::nanoseconds(1));
                // After the first read, every line since the last one.
                query.tail = None;
            } else if logs.ended {
                let _ = tx
                    .send(Event::default().event("end").data(r#"{"reason":"ended"}"#))
                    .await;
                return;
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
