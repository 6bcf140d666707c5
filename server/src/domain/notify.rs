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
        // Kueue's other evictions put the job back in the queue as a preemption does: told
        // under the same setting, in their own words.
        "preempted" | "evicted" => Some("preempted"),
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

/// A webhook address as shown back: scheme, host (with its port) and the last four characters
/// of the path and query. A Slack incoming-webhook URL is itself the credential, so it is never
/// shown whole, and a user name or password in the address (`https://user:pass@host/…`) is
/// never shown at all.
pub fn redact_webhook_url(url: &str) -> String {
    let Ok(parsed) = url::Url::parse(url) else {
        return "(an address that does not parse)".to_string();
    };
    let host = match (parsed.host_str(), parsed.port()) {
        (Some(h), Some(p)) => format!("{h}:{p}"),
        (Some(h), None) => h.to_string(),
        (None, _) => String::new(),
    };
    let rest = format!(
        "{}{}",
        parsed.path(),
        parsed.query().map_or(String::new(), |q| format!("?{q}"))
    );
    let scheme = parsed.scheme();
    if rest.len() <= 1 {
        return format!("{scheme}://{host}/");
    }
    let tail: String = rest
        .chars()
        .rev()
        .take(4)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
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

/// Networks no webhook reaches unless `server.webhook_networks` allows them: every range
/// that is not global (IANA's special-purpose registries, as Python's `ipaddress` reads them:
/// this host, private, shared (CGNAT), link-local with a cloud's metadata address
/// 169.254.169.254, benchmarking, documentation, reserved; IPv6 loopback, unspecified,
/// discard, IETF protocol assignments, documentation, unique local, link-local), multicast,
/// and, stricter than that, all of 192.0.0.0/24 (Oracle Cloud's metadata address is
/// 192.0.0.192), site-local `fec0::/10` and the deprecated IPv4-compatible `::/96`. An
/// IPv4-mapped address, or a NAT64 one (`64:ff9b::/96`), counts as the IPv4 address in it.
const INTERNAL: [&str; 25] = [
    "0.0.0.0/8",
    "10.0.0.0/8",
    "100.64.0.0/10",
    "127.0.0.0/8",
    "169.254.0.0/16",
    "172.16.0.0/12",
    "192.0.0.0/24",
    "192.0.2.0/24",
    "192.168.0.0/16",
    "198.18.0.0/15",
    "198.51.100.0/24",
    "203.0.113.0/24",
    "224.0.0.0/4",
    "240.0.0.0/4",
    "::/96",
    "::1/128",
    "100::/64",
    "2001::/23",
    "2001:db8::/32",
    "fc00::/7",
    "fe80::/10",
    "fec0::/10",
    "ff00::/8",
    // Written out for the reader: inside the ranges above.
    "::/128",
    "255.255.255.255/32",
];

/// Whether a webhook may post to `ip`: a public address, or one in `allowed`.
pub fn webhook_may_reach(ip: std::net::IpAddr, allowed: &[ipnet::IpNet]) -> bool {
    /// [`INTERNAL`] parsed once, and the NAT64 prefix.
    static NETS: std::sync::LazyLock<(Vec<ipnet::IpNet>, ipnet::Ipv6Net)> =
        std::sync::LazyLock::new(|| {
            let internal = INTERNAL
                .iter()
                .map(|n| n.parse().expect("a static network"))
                .collect();
            (internal, "64:ff9b::/96".parse().expect("a static network"))
        });
    let (internal, nat64) = &*NETS;
    let mut ip = ip.to_canonical();
    if let std::net::IpAddr::V6(v6) = ip {
        if nat64.contains(&v6) {
            let o = v6.octets();
            ip = std::net::Ipv4Addr::new(o[12], o[13], o[14], o[15]).into();
        }
    }
    allowed.iter().any(|n| n.contains(&ip)) || !internal.iter().any(|n| n.contains(&ip))
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

    /// The refused ranges agree, address by address, with an outside oracle: Python's
    /// `ipaddress` (CPython 3.11.7), internal being `not is_global or is_multicast`. The table
    /// was printed by it; where Gantry is stricter, the addresses are listed apart.
    #[test]
    fn webhooks_reach_public_addresses_and_allowed_networks_only() {
        const ORACLE: [(&str, bool); 50] = [
            ("8.8.8.8", false),
            ("1.1.1.1", false),
            ("0.1.2.3", true),
            ("10.0.0.1", true),
            ("10.255.255.255", true),
            ("11.0.0.1", false),
            ("100.63.255.255", false),
            ("100.64.0.1", true),
            ("100.127.255.255", true),
            ("100.128.0.1", false),
            ("127.0.0.1", true),
            ("127.9.9.9", true),
            ("169.254.169.254", true),
            ("169.255.0.1", false),
            ("172.15.255.255", false),
            ("172.16.0.1", true),
            ("172.31.255.255", true),
            ("172.32.0.1", false),
            ("192.0.0.1", true),
            ("192.0.0.170", true),
            ("192.0.2.1", true),
            ("192.88.99.1", false),
            ("192.168.1.1", true),
            ("192.169.0.1", false),
            ("198.17.255.255", false),
            ("198.18.0.1", true),
            ("198.19.255.255", true),
            ("198.20.0.1", false),
            ("198.51.100.7", true),
            ("203.0.113.9", true),
            ("203.0.114.1", false),
            ("224.0.0.1", true),
            ("239.255.255.255", true),
            ("240.0.0.1", true),
            ("255.255.255.255", true),
            ("::", true),
            ("::1", true),
            ("100::1", true),
            ("2001::1", true),
            ("2001:db8::1", true),
            ("2001:10::1", true),
            ("2001:4860:4860::8888", false),
            ("2606:4700::1111", false),
            ("fc00::1", true),
            ("fd00::1", true),
            ("fe80::1", true),
            ("febf::1", true),
            ("ff02::1", true),
            ("ff0e::1", true),
            ("2a00:1450:4001::1", false),
        ];
        for (a, internal) in ORACLE {
            let ip: std::net::IpAddr = a.parse().unwrap();
            assert_eq!(webhook_may_reach(ip, &[]), !internal, "{a}");
        }
        // Stricter than the oracle: all of 192.0.0.0/24 (Oracle Cloud's metadata address),
        // site-local, IPv4-compatible; IPv4-mapped and NAT64 addresses as their IPv4.
        for a in [
            "192.0.0.8",
            "192.0.0.192",
            "fec0::1",
            "::7f00:1",
            "::ffff:169.254.169.254",
            "64:ff9b::a9fe:a9fe",
        ] {
            assert!(!webhook_may_reach(a.parse().unwrap(), &[]), "{a}");
        }
        for a in ["::ffff:8.8.8.8", "64:ff9b::808:808"] {
            assert!(webhook_may_reach(a.parse().unwrap(), &[]), "{a}");
        }
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
        // A password in the address is the credential itself: never shown, nor the user.
        for url in [
            "https://gantry:S3cret@chat.internal/hooks/abcd",
            "https://gantry:S3cret@chat.internal:8443/hooks/abcd",
            "https://S3cret@chat.internal/",
        ] {
            let shown = redact_webhook_url(url);
            assert!(
                !shown.contains("S3cret") && !shown.contains('@'),
                "{url} -> {shown}"
            );
            assert!(
                shown.starts_with("https://chat.internal"),
                "{url} -> {shown}"
            );
        }
        assert_eq!(
            redact_webhook_url("https://u:p@chat.internal:8443/hooks/abcd?x=1"),
            "https://chat.internal:8443/…?x=1"
        );
        assert_eq!(
            redact_webhook_url("not a url"),
            "(an address that does not parse)"
        );
    }

    #[test]
    fn retries_back_off_and_stop() {
        let waits: Vec<i64> = (1..=MAX_ATTEMPTS).map(backoff_s).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 64, 128]);
        assert_eq!(backoff_s(30), 600);
        assert_eq!(event_of_kind("running"), Some("started"));
        assert_eq!(event_of_kind("queued"), None);
        assert_eq!(event_of_kind("evicted"), Some("preempted"));
    }
}
