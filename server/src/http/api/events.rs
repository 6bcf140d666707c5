//! `GET /api/v1/events`: the live stream, rechecking who holds it.

use super::*;

/// `GET /api/v1/events`: server-sent events. The viewer's teams' job changes carry the job
/// id; other teams' changes only say which pool moved (queue positions may have changed).
///
/// Who holds the stream is asked again every [`RECHECK`]: after a sign-out, a revoked token
/// or the end of the session's lifetime the stream sends an `end` event and closes (the
/// viewer's teams are read again too, so a change of team applies within seconds). A user
/// holds at most `server.max_streams_per_user` streams; one more is a 429.
pub(super) async fn events(
    State(state): State<AppState>,
    crate::http::auth::Held(viewer, credential): crate::http::auth::Held,
) -> ApiResult<Response> {
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
    let (tx, rx) = tokio::sync::mpsc::channel::<Event>(64);
    tokio::spawn(stream_events(state, viewer, credential, slot, tx));
    let stream = tokio_stream::wrappers::ReceiverStream::new(rx).map(Ok::<_, Infallible>);
    Ok(Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response())
}

/// How often a live stream asks again whether its holder may still see it (and ticks).
pub(super) const RECHECK: Duration = Duration::from_secs(2);

pub(super) async fn stream_events(
    state: AppState,
    mut viewer: app::model::Viewer,
    credential: crate::http::auth::Credential,
    _slot: crate::http::state::StreamSlot,
    tx: tokio::sync::mpsc::Sender<Event>,
) {
    use tokio::sync::broadcast::error::RecvError;
    let portal = state.portal.clone();
    let mut live = portal.subscribe_live();
    let mut every = tokio::time::interval(RECHECK);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        // Written once per change and kind of viewer, shared by the streams.
        let text = tokio::select! {
            msg = live.recv() => match msg {
                Ok(c) => portal.live_event_text(&viewer, Some(c)).await,
                // Missed some: a pool-less change makes the page refetch everything.
                Err(RecvError::Lagged(_)) => portal.live_event_text(&viewer, None).await,
                Err(RecvError::Closed) => return,
            },
            _ = every.tick() => {
                match credential.recheck(&state).await {
                    Ok(Some(v)) => viewer = v,
                    Ok(None) => {
                        tracing::info!(user = %viewer.user, "live stream ended: signed out, revoked or expired");
                        let end = Event::default().event("end").data(r#"{"reason":"signed_out"}"#);
                        let _ = tx.send(end).await;
                        return;
                    }
                    // The database did not answer: keep the stream, ask again next time.
                    Err(e) => tracing::warn!(error = %e, "live stream: could not check its holder"),
                }
                serde_json::to_string(&portal.live_tick()).unwrap_or_default().into()
            }
            // The client went away.
            _ = tx.closed() => return,
        };
        if tx.send(Event::default().data(&*text)).await.is_err() {
            return;
        }
    }
}
