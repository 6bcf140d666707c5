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

/// Networks no webhook reaches unless `server.webhook_networks` allows them: this host
/// (loopback, "this network"), private and shared (CGNAT) ranges, link-local (a cloud's
/// metadata address, 169.254.169.254), multicast and reserved; IPv6 loopback, unspecified,
/// unique local, link-local and multicast. An IPv4-mapped IPv6 address counts as its IPv4.
const INTERNAL: [&str; 14] = [
    "0.0.0.0/8",
    "10.0.0.0/8",
    "100.64.0.0/10",
    "127.0.0.0/8",
    "169.254.0.0/16",
    "172.16.0.0/12",
    "192.168.0.0/16",
    "224.0.0.0/4",
    "240.0.0.0/4",
    "::/128",
    "::1/128",
    "fc00::/7",
    "fe80::/10",
    "ff00::/8",
];

/// Whether a webhook may post to `ip`: a public address, or one in `allowed`.
pub fn webhook_may_reach(ip: std::net::IpAddr, allowed: &[ipnet::IpNet]) -> bool {
    let ip = ip.to_canonical();
    allowed.iter().any(|n| n.contains(&ip))
        || !INTERNAL
            .iter()
            .filter_map(|n| n.parse::<ipnet::IpNet>().ok())
            .any(|n| n.contains(&ip))
}

/// What a refused address is told with (the creation's 422, a delivery's error).
pub fn unreachable_address(ip: std::net::IpAddr) -> String {
    format!(
        "{ip} is a private, loopback or link-local address, which webhooks may not reach; \
         an admin may allow its network in server.webhook_networks"
    )
}

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

    /// The refused ranges agree with the standard library's own classification (IANA's
    /// special-purpose registries), address by address, and an allowed network lets its
    /// addresses through.
    #[test]
    fn webhooks_reach_public_addresses_and_allowed_networks_only() {
        use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
        let v4 = |ip: Ipv4Addr| {
            ip.is_private()
                || ip.is_loopback()
                || ip.is_link_local()
                || ip.is_multicast()
                || ip.is_broadcast()
                || ip.is_unspecified()
                || ip.octets()[0] == 0
                || ip.octets()[0] >= 240
                || (ip.octets()[0] == 100 && (64..128).contains(&ip.octets()[1]))
        };
        let v6 = |ip: Ipv6Addr| {
            ip.is_loopback()
                || ip.is_unspecified()
                || ip.is_multicast()
                || ip.is_unique_local()
                || ip.is_unicast_link_local()
        };
        let addresses = [
            "8.8.8.8",
            "1.1.1.1",
            "10.0.0.1",
            "10.255.255.255",
            "11.0.0.1",
            "100.63.255.255",
            "100.64.0.1",
            "100.127.255.255",
            "100.128.0.1",
            "127.0.0.1",
            "127.9.9.9",
            "169.254.169.254",
            "169.255.0.1",
            "172.15.255.255",
            "172.16.0.1",
            "172.31.255.255",
            "172.32.0.1",
            "192.168.1.1",
            "192.169.0.1",
            "224.0.0.1",
            "239.255.255.255",
            "255.255.255.255",
            "0.0.0.0",
            "0.1.2.3",
            "::1",
            "::",
            "fd00::1",
            "fc00::1",
            "fe80::1",
            "ff02::1",
            "2001:4860:4860::8888",
            "2606:4700::1111",
        ];
        for a in addresses {
            let ip: IpAddr = a.parse().unwrap();
            let internal = match ip {
                IpAddr::V4(v) => v4(v),
                IpAddr::V6(v) => v6(v),
            };
            assert_eq!(webhook_may_reach(ip, &[]), !internal, "{a}");
        }
        // An IPv4-mapped IPv6 address is its IPv4 address.
        assert!(!webhook_may_reach(
            "::ffff:169.254.169.254".parse().unwrap(),
            &[]
        ));
        assert!(webhook_may_reach("::ffff:8.8.8.8".parse().unwrap(), &[]));
        // Allowed networks, and only those.
        let allowed: Vec<ipnet::IpNet> = vec!["10.20.0.0/16".parse().unwrap()];
        assert!(webhook_may_reach("10.20.3.4".parse().unwrap(), &allowed));
        assert!(!webhook_may_reach("10.21.0.1".parse().unwrap(), &allowed));
        assert!(!webhook_may_reach(
            "169.254.169.254".parse().unwrap(),
            &allowed
        ));
    }

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
