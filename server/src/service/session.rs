//! A browser session's user: who signed in, and whether the session still holds (its absolute
//! lifetime from sign-in, and the idle time the store enforces).

use crate::error::Error;
use chrono::{TimeDelta, Utc};
use tower_sessions::Session;

pub const USER_KEY: &str = "user_id";
pub const SIGNED_IN_KEY: &str = "signed_in_at_ms";
const SEEN_KEY: &str = "seen_at_ms";
/// Set when a session ended on its own, so the sign-in page can say why.
pub const ENDED_KEY: &str = "ended";

/// How long a session lives: `absolute` from sign-in however busy, `idle` since its last
/// request.
#[derive(Clone, Copy, Debug)]
pub struct SessionLimits {
    pub absolute: TimeDelta,
    pub idle: TimeDelta,
}

/// The signed-in user of this session, or `None`. A session older than `limits.absolute`
/// (from sign-in, however busy) ends here: it is emptied and remembers only that it expired.
/// A request also marks the session seen, which saves it and so moves its idle expiry on
/// (tower-sessions saves only changed sessions); at most every minute, or every quarter of
/// the idle time if that is shorter, so a busy page is not a write per request.
pub async fn session_user(
    session: &Session,
    limits: SessionLimits,
) -> Result<Option<String>, Error> {
    let internal = super::internal;
    let Some(user) = session.get::<String>(USER_KEY).await.map_err(internal)? else {
        return Ok(None);
    };
    let at: Option<i64> = session.get(SIGNED_IN_KEY).await.map_err(internal)?;
    let now = Utc::now().timestamp_millis();
    if at.is_none_or(|at| now - at > limits.absolute.num_milliseconds()) {
        tracing::info!(%user, "session reached its absolute lifetime");
        session.clear().await;
        session
            .insert(ENDED_KEY, "expired")
            .await
            .map_err(internal)?;
        return Ok(None);
    }
    let seen: Option<i64> = session.get(SEEN_KEY).await.map_err(internal)?;
    let every = (limits.idle.num_milliseconds() / 4).min(60_000);
    if seen.is_none_or(|seen| now - seen >= every) {
        session.insert(SEEN_KEY, now).await.map_err(internal)?;
    }
    Ok(Some(user))
}

/// Why the last session ended on its own, if it did (read by the sign-in page).
pub async fn session_ended(session: &Session) -> Option<String> {
    session.get::<String>(ENDED_KEY).await.ok().flatten()
}
