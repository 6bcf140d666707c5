//! How numbers and times read on every page: units always, relative times with the absolute
//! time kept for a tooltip.

use chrono::{DateTime, Utc};

use crate::model::nodes_for;

/// "16 GPUs (2 nodes)", "4 GPUs (1 node)".
pub fn gpus_nodes(gpus: u32) -> String {
    let mut out = String::with_capacity(20);
    gpus_nodes_into(&mut out, gpus);
    out
}

/// [`gpus_nodes`] written into `out`, digit by digit (a Jobs page writes one a row).
pub fn gpus_nodes_into(out: &mut String, gpus: u32) {
    let nodes = nodes_for(gpus);
    push_digits(out, u64::from(gpus));
    out.push_str(if gpus == 1 { " GPU (" } else { " GPUs (" });
    push_digits(out, u64::from(nodes));
    out.push_str(if nodes == 1 { " node)" } else { " nodes)" });
}

/// A span of seconds in the unit a person would use: "45 s", "12 min", "3.2 h", "2.5 days".
pub fn duration(secs: i64) -> String {
    let mut out = String::with_capacity(12);
    duration_into(&mut out, secs);
    out
}

/// [`duration`] written into `out`. Pushed digit by digit rather than `format!`ted: a Jobs
/// page writes one or two for each of its rows, with the words around them.
pub fn duration_into(out: &mut String, secs: i64) {
    // Clamped: the roundings below add to it (a max runtime is a u64).
    let secs = secs.clamp(0, i64::MAX / 2) as u64;
    if secs < 60 {
        push_digits(out, secs);
        out.push_str(" s");
    } else if secs < 3600 {
        push_digits(out, secs / 60);
        out.push_str(" min");
    } else if secs < 48 * 3600 {
        // Whole tenths of an hour, in integers.
        let tenths = (secs + 180) / 360;
        if tenths < 100 {
            push_tenths(out, tenths);
        } else {
            push_digits(out, (secs + 1800) / 3600);
        }
        out.push_str(" h");
    } else {
        push_tenths(out, (secs + 4320) / 8640);
        out.push_str(" days");
    }
}

/// `n` in decimal digits.
pub(crate) fn push_digits(out: &mut String, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for &d in &digits[i..] {
        out.push(char::from(d));
    }
}

/// `tenths` / 10 with its one decimal: "3.2".
fn push_tenths(out: &mut String, tenths: u64) {
    push_digits(out, tenths / 10);
    out.push('.');
    out.push(char::from(b'0' + (tenths % 10) as u8));
}

pub fn since(now: DateTime<Utc>, then: DateTime<Utc>) -> String {
    duration((now - then).num_seconds())
}

/// "12 min ago", "just now".
pub fn ago(now: DateTime<Utc>, then: DateTime<Utc>) -> String {
    let secs = (now - then).num_seconds();
    if secs < 5 {
        "just now".to_string()
    } else {
        let mut out = String::with_capacity(16);
        duration_into(&mut out, secs);
        out.push_str(" ago");
        out
    }
}

/// `x` to one decimal, like `{:.1}` but written from an integer: "30.1", "-0.5", "0.0".
/// Float formatting with a precision is slow, and a job page writes hundreds of these (its
/// charts' coordinates). Unlike `{:.1}`, halves and near-halves (0.15, whose tenfold rounds
/// to 1.5) round away from zero, and there is no "-0.0"; not finite is 0.0. The server
/// and the page run the same code on the same numbers, so they agree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tenths(i64);

impl Tenths {
    pub fn of(x: f64) -> Tenths {
        Tenths(if x.is_finite() {
            (x * 10.0).round() as i64
        } else {
            0
        })
    }

    /// Written into `out` as [`Display`](std::fmt::Display) writes it ("-12.3"), digit by
    /// digit: a chart writes two a sample.
    pub fn write_into(&self, out: &mut String) {
        if self.0 < 0 {
            out.push('-');
        }
        push_tenths(out, self.0.unsigned_abs());
    }
}

impl std::fmt::Display for Tenths {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut out = String::with_capacity(8);
        self.write_into(&mut out);
        f.write_str(&out)
    }
}

/// `x` as a whole number, as `{:.0}` writes it but without float formatting (see
/// [`Tenths`]): halves round away from zero, and there is no "-0"; not finite is 0.
pub fn whole(x: f64) -> i64 {
    if x.is_finite() {
        x.round() as i64
    } else {
        0
    }
}

/// The absolute time for tooltips and timelines: "2026-11-29 14:20:05 UTC".
///
/// Written digit by digit: chrono's `format("%Y-%m-%d …")` parses its pattern again on every
/// call, and a Jobs page writes this for each of its rows. Years outside 0–9999 are as
/// chrono writes them ("+10000", "-0001").
pub fn absolute(t: DateTime<Utc>) -> String {
    use chrono::{Datelike, Timelike};
    let year = t.year();
    if !(0..=9999).contains(&year) {
        return t.format("%Y-%m-%d %H:%M:%S UTC").to_string();
    }
    // Digit by digit: `format!` with `{:02}` padding was 3,000 instructions a call.
    let mut out = String::with_capacity(23);
    let mut digits = |n: u32, width: u32| {
        for place in (0..width).rev() {
            out.push(char::from(b'0' + (n / 10u32.pow(place) % 10) as u8));
        }
    };
    digits(year as u32, 4);
    let fields = [
        ('-', t.month()),
        ('-', t.day()),
        (' ', t.hour()),
        (':', t.minute()),
        (':', t.second()),
    ];
    for (sep, n) in fields {
        out.push(sep);
        out.push(char::from(b'0' + (n / 10) as u8));
        out.push(char::from(b'0' + (n % 10) as u8));
    }
    out.push_str(" UTC");
    out
}

/// A max runtime in hours for the form: 3600 → "1", 5400 → "1.5".
pub fn hours(secs: u64) -> String {
    let h = secs as f64 / 3600.0;
    if (h - h.round()).abs() < 1e-9 {
        format!("{h:.0}")
    } else {
        format!("{h:.2}")
            .trim_end_matches('0')
            .trim_end_matches('.')
            .to_string()
    }
}

/// "about 40 min (≈14:20 UTC)": a wait until an estimated time.
pub fn wait_until(now: DateTime<Utc>, eta: DateTime<Utc>) -> String {
    let secs = (eta - now).num_seconds();
    if secs < 60 {
        "any moment now".to_string()
    } else {
        format!("about {} (≈{})", duration(secs), clock_time(now, eta))
    }
}

/// "14:20 UTC" today, "Nov 30 14:20 UTC" on another day.
pub fn clock_time(now: DateTime<Utc>, t: DateTime<Utc>) -> String {
    if t.date_naive() == now.date_naive() {
        t.format("%H:%M UTC").to_string()
    } else {
        t.format("%b %-d %H:%M UTC").to_string()
    }
}

/// 1234567 → "1,234,567".
pub fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Percent-encodes a query value.
pub fn query_value(v: &str) -> String {
    let mut out = String::new();
    for b in v.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// `s` written into `out` as HTML text or a quoted attribute value: `&`, `<`, `>`, `"` and `'`
/// escaped, nothing else changed.
///
/// Scans bytes, not chars: the five are ASCII, and a UTF-8 sequence's bytes are never ASCII,
/// so a byte match is always a whole character. `str::find` with a set of chars decodes every
/// character first; on the Pools page, whose grid is written as one string, that scan was a
/// fifth of what the page cost the server (callgrind, the page benchmark).
pub fn escape_html_into(out: &mut String, s: &str) {
    let bytes = s.as_bytes();
    let mut start = 0;
    for (i, b) in bytes.iter().enumerate() {
        let with = match b {
            b'&' => "&amp;",
            b'<' => "&lt;",
            b'>' => "&gt;",
            b'"' => "&quot;",
            b'\'' => "&#39;",
            _ => continue,
        };
        // Both ends are at ASCII bytes (or the ends of `s`): character boundaries.
        out.push_str(&s[start..i]);
        out.push_str(with);
        start = i + 1;
    }
    out.push_str(&s[start..]);
}

/// `s` as HTML text or a quoted attribute value (see [`escape_html_into`]).
pub fn escape_html(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    escape_html_into(&mut out, s);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An upstream HTML decoder (`html-escape`, which tachys writes attributes with) reads back
    /// exactly what went in, and none of the five characters is left raw: over ASCII,
    /// multi-byte characters next to the five, and each of them at either end.
    #[test]
    fn escaped_html_reads_back_as_written() {
        let pieces = [
            "",
            "a",
            "&",
            "<",
            ">",
            "\"",
            "'",
            "é",
            "漢",
            "🚀",
            "&amp;",
            " ",
            "node-0 GPU 1",
            "\u{301}",
            "\\",
            "/",
            "=",
        ];
        let mut checked = 0;
        for a in pieces {
            for b in pieces {
                for c in pieces {
                    let s = format!("{a}{b}{c}");
                    let mut out = String::from("kept:");
                    escape_html_into(&mut out, &s);
                    let out = out.strip_prefix("kept:").expect("appends");
                    assert_eq!(html_escape::decode_html_entities(out), s, "{out}");
                    assert!(!out.contains(['<', '>', '"', '\'']), "{out}");
                    assert_eq!(
                        out.matches('&').count(),
                        s.matches(['&', '<', '>', '"', '\'']).count(),
                        "{out}"
                    );
                    assert_eq!(escape_html(&s), out);
                    checked += 1;
                }
            }
        }
        assert_eq!(checked, 17 * 17 * 17);
    }

    /// Rust's `{:.1}` and `{:.0}` are the reference, away from halves (where they round to
    /// even and these away from zero): coordinates and percentages as the job page has them.
    #[test]
    fn tenths_and_wholes_read_as_float_formatting_writes_them() {
        let mut checked = 0;
        for i in -20_000..=20_000 {
            let x = f64::from(i) * 0.0173 + 0.0011;
            let (t, w) = ((x * 10.0).fract().abs(), x.fract().abs());
            if (t - 0.5).abs() > 1e-6 && format!("{x:.1}") != "-0.0" {
                assert_eq!(Tenths::of(x).to_string(), format!("{x:.1}"), "{x}");
                let mut written = String::from("kept ");
                Tenths::of(x).write_into(&mut written);
                assert_eq!(written, format!("kept {x:.1}"), "{x}");
                checked += 1;
            }
            if (w - 0.5).abs() > 1e-6 && format!("{x:.0}") != "-0" {
                assert_eq!(whole(x).to_string(), format!("{x:.0}"), "{x}");
            }
        }
        assert!(checked > 30_000, "{checked}");
        assert_eq!(Tenths::of(-0.04).to_string(), "0.0");
        assert_eq!(Tenths::of(-0.06).to_string(), "-0.1");
        for t in [i64::MIN, i64::MAX, 0, -1, 9, 10, -10] {
            let mut written = String::new();
            Tenths(t).write_into(&mut written);
            assert_eq!(written, Tenths(t).to_string());
        }
        assert_eq!(
            (Tenths::of(f64::NAN).to_string(), whole(f64::INFINITY)),
            ("0.0".into(), 0)
        );
    }

    /// chrono's own formatting is the reference, over times spread across 1970–2200
    /// (leap days, the ends of months and years, every second of a minute).
    #[test]
    fn absolute_times_read_as_chrono_formats_them() {
        let mut secs: i64 = 0;
        let mut checked = 0;
        while secs < 7_258_118_400 {
            let t = DateTime::<Utc>::from_timestamp(secs, 123_456_789).expect("in range");
            assert_eq!(
                absolute(t),
                t.format("%Y-%m-%d %H:%M:%S UTC").to_string(),
                "{secs}"
            );
            checked += 1;
            // A step that is not a whole number of minutes, hours or days.
            secs += 86_400 * 3 + 3_607 * 5 + 13;
        }
        assert!(checked > 25_000, "{checked}");
        let leap = DateTime::parse_from_rfc3339("2024-02-29T23:59:59Z").unwrap();
        assert_eq!(absolute(leap.to_utc()), "2024-02-29 23:59:59 UTC");
    }

    #[test]
    fn thousands_are_grouped() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1_000), "1,000");
        assert_eq!(thousands(1_234_567), "1,234,567");
    }

    #[test]
    fn gpus_and_nodes_read_with_units() {
        assert_eq!(gpus_nodes(1), "1 GPU (1 node)");
        assert_eq!(gpus_nodes(8), "8 GPUs (1 node)");
        assert_eq!(gpus_nodes(16), "16 GPUs (2 nodes)");
    }

    #[test]
    fn durations_pick_a_readable_unit() {
        let now = DateTime::from_timestamp(1_790_000_000, 0).expect("in range");
        let before = |s: i64| now - chrono::Duration::seconds(s);
        assert_eq!(ago(now, before(4)), "just now");
        assert_eq!(ago(now, before(-60)), "just now");
        assert_eq!(ago(now, before(5)), "5 s ago");
        assert_eq!(ago(now, before(3 * 3600 + 720)), "3.2 h ago");
        assert_eq!(since(now, before(720)), "12 min");
        assert_eq!(duration(-3), "0 s");
        for secs in 0..3600 {
            let want = if secs < 60 {
                format!("{secs} s")
            } else {
                format!("{} min", secs / 60)
            };
            assert_eq!(duration(secs), want);
        }
        assert_eq!(duration(59), "59 s");
        assert_eq!(duration(720), "12 min");
        assert_eq!(duration(3 * 3600 + 720), "3.2 h");
        assert_eq!(duration(30 * 3600), "30 h");
        assert_eq!(duration(3 * 86400), "3.0 days");
        // A max runtime near u64's top, as the pages pass it: no overflow.
        assert!(duration(i64::MAX).ends_with(" days"));
        assert_eq!(duration(u64::MAX as i64), "0 s");
        // Rounded to the nearest tenth (or hour from 10 h), as `{:.1}` / `{:.0}` read.
        for secs in (3600..48 * 3600)
            .step_by(7)
            .chain((48 * 3600..40 * 86400).step_by(611))
        {
            let (h, d) = (secs as f64 / 3600.0, secs as f64 / 86400.0);
            let want = if secs >= 48 * 3600 {
                format!("{d:.1} days")
            } else if h < 9.95 {
                format!("{h:.1} h")
            } else {
                format!("{h:.0} h")
            };
            // Exact halves may round either way; none lands on one but at these steps.
            let half =
                |x: f64| ((x * 10.0).fract() - 0.5).abs() < 1e-9 || (x.fract() - 0.5).abs() < 1e-9;
            if !half(h) && !half(d) {
                assert_eq!(duration(secs), want, "{secs} s");
            }
        }
        assert_eq!(hours(5400), "1.5");
        assert_eq!(hours(7200), "2");
    }

    #[test]
    fn waits_read_as_a_span_and_a_clock_time() {
        let now = chrono::DateTime::parse_from_rfc3339("2026-11-29T13:40:00Z")
            .unwrap()
            .with_timezone(&Utc);
        assert_eq!(
            wait_until(now, now + chrono::Duration::minutes(40)),
            "about 40 min (≈14:20 UTC)"
        );
        assert_eq!(wait_until(now, now), "any moment now");
        assert_eq!(
            wait_until(now, now + chrono::Duration::hours(26)),
            "about 26 h (≈Nov 30 15:40 UTC)"
        );
    }
}
