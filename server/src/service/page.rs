//! Pages of a long list (jobs, the audit log): a cursor is the place after the last entry
//! of a page, keyset-style, so a page is as fast at the end of a list as at its start and
//! entries added meanwhile neither repeat nor go missing.

use chrono::{DateTime, Utc};

use crate::error::Error;

/// Entries on a page unless asked otherwise, and the most one page holds.
pub const PAGE_DEFAULT: u32 = 50;
pub const PAGE_MAX: u32 = 200;

/// A list's place: the last entry of a page, as (time, id), in URL-safe base64.
pub fn encode_cursor(at: DateTime<Utc>, id: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(format!("{}:{id}", at.timestamp_millis()))
}

pub fn decode_cursor(c: &str) -> Option<(DateTime<Utc>, String)> {
    use base64::Engine;
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(c.trim())
        .ok()?;
    let text = String::from_utf8(raw).ok()?;
    let (ms, id) = text.split_once(':')?;
    let at = chrono::TimeZone::timestamp_millis_opt(&Utc, ms.parse().ok()?).single()?;
    (!id.is_empty() && !id.chars().any(char::is_control)).then(|| (at, id.to_string()))
}

/// A list ordered by name: the place after `name`, in URL-safe base64.
pub fn encode_name_cursor(name: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(format!("name:{name}"))
}

pub fn decode_name_cursor(c: &str) -> Option<String> {
    use base64::Engine;
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(c.trim())
        .ok()?;
    let name = String::from_utf8(raw)
        .ok()?
        .strip_prefix("name:")?
        .to_string();
    (!name.is_empty() && !name.chars().any(char::is_control)).then_some(name)
}

/// A list ordered by user, then newest first (the admin's API tokens): the place after the
/// token `id` of `user` made at `at`, in URL-safe base64.
pub fn encode_user_cursor(user: &str, at: DateTime<Utc>, id: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(format!("user:{}:{id}:{user}", at.timestamp_millis()))
}

/// The place [`encode_user_cursor`] gave, as (user, time, id); `None` for anything else. The
/// id (Gantry's own, a UUID) holds no colon; the user, last, may.
pub fn decode_user_cursor(c: &str) -> Option<(String, DateTime<Utc>, String)> {
    use base64::Engine;
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(c.trim())
        .ok()?;
    let text = String::from_utf8(raw).ok()?;
    let (ms, rest) = text.strip_prefix("user:")?.split_once(':')?;
    let (id, user) = rest.split_once(':')?;
    let at = chrono::TimeZone::timestamp_millis_opt(&Utc, ms.parse().ok()?).single()?;
    let fine = |s: &str| !s.is_empty() && !s.chars().any(char::is_control);
    (fine(id) && fine(user)).then(|| (user.to_string(), at, id.to_string()))
}

/// The page size asked for, checked: `PAGE_DEFAULT` when none.
pub fn page_size(limit: Option<u32>) -> Result<u32, Error> {
    let limit = limit.unwrap_or(PAGE_DEFAULT);
    if (1..=PAGE_MAX).contains(&limit) {
        Ok(limit)
    } else {
        Err(Error::invalid(
            "limit",
            format!("a number of entries per page from 1 to {PAGE_MAX}, got {limit}"),
        ))
    }
}

/// The place a `cursor` names; a 422 naming `cursor` when it is not one Gantry gave.
pub fn cursor_place(cursor: Option<&str>) -> Result<Option<(DateTime<Utc>, String)>, Error> {
    match cursor.map(str::trim).filter(|c| !c.is_empty()) {
        None => Ok(None),
        Some(c) => decode_cursor(c).map(Some).ok_or_else(|| {
            Error::invalid(
                "cursor",
                "the next_cursor of an earlier page, as it was given",
            )
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_refuse_what_they_did_not_make() {
        let at = chrono::TimeZone::timestamp_millis_opt(&Utc, 1_796_000_000_123)
            .single()
            .unwrap();
        let c = encode_cursor(at, "5f0c-job");
        assert_eq!(decode_cursor(&c), Some((at, "5f0c-job".to_string())));
        for bad in ["", "not base64!", "bm8gY29sb24", "eDp4"] {
            assert_eq!(decode_cursor(bad), None, "{bad}");
        }
        let n = encode_name_cursor("llama-3.1-8b-fsdp");
        assert_eq!(decode_name_cursor(&n).as_deref(), Some("llama-3.1-8b-fsdp"));
        assert_eq!(
            decode_name_cursor(&c),
            None,
            "a job cursor is not a name cursor"
        );
        assert_eq!(decode_name_cursor("bmFtZTo"), None, "an empty name");
        let u = encode_user_cursor("ops:bot", at, "0190-token");
        assert_eq!(
            decode_user_cursor(&u),
            Some(("ops:bot".to_string(), at, "0190-token".to_string())),
            "a user name may hold a colon"
        );
        assert_eq!(
            decode_user_cursor(&c),
            None,
            "a job cursor is not a user cursor"
        );
        assert_eq!(decode_cursor(&u), None, "nor the other way round");
        assert_eq!(decode_user_cursor(&n), None);
        use base64::Engine;
        let raw = |s: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
        for bad in [
            "user:12:id:",
            "user:12::alice",
            "user:x:id:alice",
            "user:12:id",
        ] {
            assert_eq!(decode_user_cursor(&raw(bad)), None, "{bad}");
        }
    }
}
