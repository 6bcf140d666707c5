//! Notifications as plain values: the events a user can be told of, what a webhook receives
//! (Slack-compatible or generic JSON signed with HMAC-SHA256), and the retry schedule.

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// What happened to a job that someone may want to hear of.
pub const EVENTS: [&str; 5] = ["started", "succeeded", "failed", "preempted", "idle"];
/// What a team webhook may carry: the team's failures and idle jobs.
pub const TEAM_EVENTS: [&str; 2] = ["failed", "idle"];

/// The notification event of a stored job event kind; `None` for the ones nobody is told of.
pub fn event_of_kind(kind: &str) -> Option<&'static str> {
    match kind {
        "running" => Some("started"),
        "succeeded" => Some("succeeded"),
        "failed" => Some("failed"),
        "preempted" => Some("preempted"),
        _ => None,
    }
}

/// The channels a user picked for an event. Unset: told in Gantry, not in the browser, and
/// by their webhooks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Channels {
    pub in_app: bool,
    pub browser: bool,
    pub webhook: bool,
}

impl Default for Channels {
    fn default() -> Self {
        Channels {
            in_app: true,
            browser: false,
            webhook: true,
        }
    }
}

/// A webhook address as shown back: scheme, host and the last four characters. A Slack
/// incoming-webhook URL is itself the credential, so it is never shown whole.
pub fn redact_webhook_url(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let host = rest.split('/').next().unwrap_or("");
    let tail: String = url
        .chars()
        .rev()
        .take(4)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    if rest.len() <= host.len() + 1 {
        return format!("{scheme}://{host}/");
    }
    format!("{scheme}://{host}/…{tail}")
}

/// `sha256=<hex>`: HMAC-SHA256 of the exact body with the webhook's secret, as sent in
/// `X-Gantry-Signature`.
pub fn signature(secret: &str, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("any key length");
    mac.update(body);
    let bytes = mac.finalize().into_bytes();
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256={hex}")
}

/// Seconds before attempt `n + 1` after `n` failed ones: 1, 2, 4, ... capped at 10 minutes.
pub fn backoff_s(attempts: u32) -> i64 {
    (1i64 << attempts.saturating_sub(1).min(20)).min(600)
}

/// A delivery that failed this many times is given up (and shown as failed in the log).
pub const MAX_ATTEMPTS: u32 = 8;

/// One job event as a webhook receives it.
#[derive(Clone, Debug, PartialEq)]
pub struct Message<'a> {
    pub event: &'a str,
    pub delivery_id: &'a str,
    pub job_id: &'a str,
    pub job_name: &'a str,
    pub team: &'a str,
    pub user: &'a str,
    pub pool: &'a str,
    pub gpus: u32,
    pub at: chrono::DateTime<chrono::Utc>,
    /// One sentence: "Job llama-sweep failed: a worker ran out of memory (OOMKilled)".
    pub text: &'a str,
    /// The job's page.
    pub url: &'a str,
}

/// The body for a webhook of `kind`: Slack's incoming-webhook `{"text": ...}` (with the
/// link in Slack's `<url|label>` form), or the generic JSON document.
pub fn payload(kind: &str, m: &Message<'_>) -> String {
    let v = if kind == "slack" {
        serde_json::json!({ "text": format!("{} <{}|Open in Gantry>", m.text, m.url) })
    } else {
        serde_json::json!({
            "event": m.event,
            "delivery_id": m.delivery_id,
            "at": m.at.to_rfc3339(),
            "text": m.text,
            "url": m.url,
            "job": {"id": m.job_id, "name": m.job_name, "team": m.team, "user": m.user,
                    "pool": m.pool, "gpus": m.gpus},
        })
    };
    v.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signature_is_rfc_4231s_hmac_sha256() {
        // RFC 4231, test case 2: key "Jefe", data "what do ya want for nothing?".
        assert_eq!(
            signature("Jefe", b"what do ya want for nothing?"),
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn webhook_addresses_are_shown_without_their_secret_path() {
        assert_eq!(
            redact_webhook_url("https://hooks.slack.com/services/T000/B000/XXXXsecretYYYY"),
            "https://hooks.slack.com/…YYYY"
        );
        assert_eq!(
            redact_webhook_url("http://127.0.0.1:9000/"),
            "http://127.0.0.1:9000/"
        );
    }

    #[test]
    fn retries_back_off_and_stop() {
        let waits: Vec<i64> = (1..=MAX_ATTEMPTS).map(backoff_s).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 64, 128]);
        assert_eq!(backoff_s(30), 600);
        assert_eq!(event_of_kind("running"), Some("started"));
        assert_eq!(event_of_kind("queued"), None);
    }
}
