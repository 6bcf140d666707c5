//! `GET /api/v1/events`: the live stream, rechecking who holds it.

use super::*;

/// `GET /api/v1/events`: server-sent events. The viewer's teams' job changes carry the job
/// id; other teams' changes only say which pool moved (queue positions may have changed).
///
/// Who holds the stream is asked again every [`RECHECK`]: after a sign-out, a revoked token
/// or the end of the session's lifetime the stream sends an `end` event and closes (the
/// viewer's teams are read again too, so a change of team applies within seconds). A user
/// holds at most `server.max_streams_per_user` streams; one more is a 429.
///
/// Each change carries its number as the event's id. A stream opened with `?since=N` (the
/// count a page was read with) or reconnecting with `Last-Event-ID: N` (the browser sends the
/// last id it was given) is first sent the changes after `N`, when the server still keeps
/// them (the last [`crate::service::REPLAY`]); its first tick then says `N`, so the page
/// misses nothing and reads nothing again.
pub(super) async fn events(
    State(state): State<AppState>,
    crate::http::auth::Held(viewer, credential): crate::http::auth::Held,
    headers: http::HeaderMap,
    axum::extract::Query(q): axum::extract::Query<std::collections::HashMap<String, String>>,
) -> ApiResult<Response> {
    let since = match q.get("since").map(|s| s.trim()) {
        None | Some("") => None,
        Some(s) => Some(s.parse::<u64>().map_err(|_| {
            ApiError::invalid(
                "since",
                "the count of live changes a page was read with (a whole number, as `live_seq` gives it)",
            )
        })?),
    };
    // A reconnecting browser's own last id goes before the address it was opened with.
    let since = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .or(since);
    let Some(slot) = state
        .streams
        .take(&viewer.user, state.config.server.max_streams_per_user)
    else {
        let mut res = ApiFailure(ApiError::new(
            ErrorCode::TooManyRequests,
            format!(
                "you already hold {} live streams; close a tab and try again",
                state.config.server.max_streams_per_user
            ),
        ))
        .into_response();
        res.headers_mut().insert(
            http::header::RETRY_AFTER,
            http::HeaderValue::from_static("5"),
        );
        return Ok(res);
    };
    // The stream is the response body itself: no task or channel of its own, so an open stream
    // holds only its connection, its body and this state (the figure `make bench` prints).
    // Every RECHECK sends a tick, which is the keep-alive too.
    let stream = futures::stream::unfold(
        Some(Box::new(Watch::new(state, viewer, credential, slot, since))),
        |watch| async move {
            let mut watch = watch?;
            let (text, last) = watch.next().await?;
            Some((Ok::<_, Infallible>(text), (!last).then_some(watch)))
        },
    );
    Ok(Sse::new(stream).into_response())
}

/// How often a live stream asks again whether its holder may still see it (and ticks).
pub(super) const RECHECK: Duration = Duration::from_secs(2);

/// One live stream's state, between the events it sends.
struct Watch {
    state: AppState,
    viewer: app::model::Viewer,
    credential: crate::http::auth::Credential,
    live: tokio::sync::broadcast::Receiver<crate::service::LiveChange>,
    every: tokio::time::Interval,
    /// The first event, a tick saying this count, is still to be sent.
    first: Option<u64>,
    /// Changes sent before the stream opened, after the count its reader holds: sent next.
    replay: std::collections::VecDeque<crate::service::LiveChange>,
    _slot: crate::http::state::StreamSlot,
}

impl Watch {
    fn new(
        state: AppState,
        viewer: app::model::Viewer,
        credential: crate::http::auth::Credential,
        slot: crate::http::state::StreamSlot,
        since: Option<u64>,
    ) -> Watch {
        let sub = state.portal.subscribe_live_since(since);
        // Each stream rechecks at a phase of its own: streams opened together (every page
        // reconnecting after a restart) would otherwise ask the database all at once, every
        // RECHECK, for as long as they stay open.
        let phase = RECHECK.mul_f64(rand::random::<f64>());
        let mut every = tokio::time::interval_at(tokio::time::Instant::now() + phase, RECHECK);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        Watch {
            state,
            viewer,
            credential,
            live: sub.rx,
            every,
            first: Some(sub.from),
            replay: sub.replay.into(),
            _slot: slot,
        }
    }

    /// The next event, and whether it is the last; `None` once the portal is shutting down.
    /// What it awaits on the database is boxed while it runs: a waiting stream then holds only
    /// the two small waits, not room for a query's state.
    async fn next(&mut self) -> Option<(Event, bool)> {
        use tokio::sync::broadcast::error::RecvError;
        let portal = &self.state.portal;
        if let Some(from) = self.first.take() {
            // The clock at once; who holds the stream was checked a moment ago.
            let tick = serde_json::to_string(&portal.live_first_tick(from)).unwrap_or_default();
            return Some((Event::default().data(tick), false));
        }
        if let Some(c) = self.replay.pop_front() {
            let id = c.seq.to_string();
            let text = Box::pin(portal.live_event_text(&self.viewer, Some(c))).await;
            return Some((Event::default().id(id).data(&*text), false));
        }
        let mut id = None;
        // Written once per change and kind of viewer, shared by the streams.
        let text = tokio::select! {
            msg = self.live.recv() => match msg {
                Ok(c) => {
                    id = Some(c.seq.to_string());
                    Box::pin(portal.live_event_text(&self.viewer, Some(c))).await
                }
                // Missed some: a tick saying where the stream goes on from makes the page read
                // everything once; the oldest change still held comes next.
                Err(RecvError::Lagged(_)) => match crate::service::resume_after_lag(&mut self.live).await {
                    Some((from, next)) => {
                        self.replay.push_front(next);
                        serde_json::to_string(&portal.live_first_tick(from)).unwrap_or_default().into()
                    }
                    None => return None,
                },
                Err(RecvError::Closed) => return None,
            },
            _ = self.every.tick() => {
                match Box::pin(self.credential.recheck(&self.state)).await {
                    Ok(Some(v)) => self.viewer = v,
                    Ok(None) => {
                        tracing::info!(user = %self.viewer.user, "live stream ended: signed out, revoked or expired");
                        let end = Event::default().event("end").data(r#"{"reason":"signed_out"}"#);
                        return Some((end, true));
                    }
                    // The database did not answer: keep the stream, ask again next time.
                    Err(e) => tracing::warn!(error = %e, "live stream: could not check its holder"),
                }
                serde_json::to_string(&portal.live_tick()).unwrap_or_default().into()
            }
        };
        let event = Event::default();
        let event = match id {
            Some(id) => event.id(id),
            None => event,
        };
        Some((event.data(&*text), false))
    }
}
