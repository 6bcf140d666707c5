//! What every input must be before anything reads it: text without control characters, and
//! JSON without a key given twice. Used at the edge of the JSON API (bodies, query strings,
//! path segments) and by the services the server functions call, so both refuse the same.

use std::collections::HashSet;
use std::fmt;

use crate::error::Error;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};

/// A control character (Unicode category Cc: U+0000–U+001F, U+007F–U+009F). Postgres refuses
/// NUL in text outright (a 500 once), SQLite stores it, and the others break a line, a CSV
/// cell or a log record when shown.
fn is_refused(c: char, multi_line: bool) -> bool {
    c.is_control() && !(multi_line && matches!(c, '\n' | '\r' | '\t'))
}

fn refusal(field: &str, s: &str, c: char) -> Error {
    let at = s.chars().position(|x| x == c).unwrap_or(0);
    Error::invalid(
        field,
        format!(
            "must not contain control characters (found U+{:04X} at character {})",
            c as u32,
            at + 1
        ),
    )
}

/// A one-line value (an id, a name, a filter, a parameter): no control characters at all,
/// tab and newline included — these are shown in one table cell, one CSV cell, one log line.
pub fn single_line(field: &str, s: &str) -> Result<(), Error> {
    match s.chars().find(|&c| is_refused(c, false)) {
        Some(c) => Err(refusal(field, s, c)),
        None => Ok(()),
    }
}

/// Free text written over several lines (a template definition, its description): tab,
/// newline and carriage return are the text's own; every other control character is refused.
pub fn multi_line(field: &str, s: &str) -> Result<(), Error> {
    match s.chars().find(|&c| is_refused(c, true)) {
        Some(c) => Err(refusal(field, s, c)),
        None => Ok(()),
    }
}

/// [`single_line`] for an optional value.
pub fn single_line_opt(field: &str, s: Option<&str>) -> Result<(), Error> {
    s.map_or(Ok(()), |s| single_line(field, s))
}

/// Every string in a JSON value, keys included, is one line; `field` names the value and a
/// nested one is named by its path (`params.note`, `params.tags[1]`).
pub fn json_single_line(field: &str, v: &serde_json::Value) -> Result<(), Error> {
    json_text(field, v, &[])
}

/// Like [`json_single_line`], but a string under one of the `free_text` keys may run over
/// several lines ([`multi_line`]).
pub fn json_text(field: &str, v: &serde_json::Value, free_text: &[&str]) -> Result<(), Error> {
    use serde_json::Value;
    match v {
        Value::String(s) => single_line(field, s),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .try_for_each(|(i, x)| json_text(&format!("{field}[{i}]"), x, free_text)),
        Value::Object(m) => m.iter().try_for_each(|(k, x)| {
            let path = format!("{field}.{}", k.escape_debug());
            single_line(&path, k)?;
            match x {
                Value::String(s) if free_text.contains(&k.as_str()) => multi_line(&path, s),
                _ => json_text(&path, x, free_text),
            }
        }),
        _ => Ok(()),
    }
}

/// The start of the message a duplicate key fails with; the key follows in backticks.
pub const DUPLICATE_KEY: &str = "duplicate key `";
/// The start of the message a control character in a key fails with.
pub const CONTROL_IN_KEY: &str = "control character in key `";
/// The message a control character in a string value fails with.
pub const CONTROL_IN_VALUE: &str = "must not contain control characters";

/// A pass over a JSON document that accepts any value but fails on a key given twice in one
/// object (serde_json keeps the last one silently in a map such as a launch's `params`) and on
/// a control character in any string. Run under `serde_path_to_error`, the failure carries the
/// path of the object or string at fault.
pub struct CheckedJson;

impl<'de> de::Deserialize<'de> for CheckedJson {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(CheckedVisitor)
    }
}

struct CheckedVisitor;

impl<'de> Visitor<'de> for CheckedVisitor {
    type Value = CheckedJson;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<CheckedJson, E> {
        Ok(CheckedJson)
    }
    fn visit_i64<E>(self, _: i64) -> Result<CheckedJson, E> {
        Ok(CheckedJson)
    }
    fn visit_u64<E>(self, _: u64) -> Result<CheckedJson, E> {
        Ok(CheckedJson)
    }
    fn visit_f64<E>(self, _: f64) -> Result<CheckedJson, E> {
        Ok(CheckedJson)
    }
    fn visit_unit<E>(self) -> Result<CheckedJson, E> {
        Ok(CheckedJson)
    }
    fn visit_str<E: de::Error>(self, s: &str) -> Result<CheckedJson, E> {
        if s.chars().any(|c| is_refused(c, false)) {
            return Err(E::custom(CONTROL_IN_VALUE));
        }
        Ok(CheckedJson)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<CheckedJson, A::Error> {
        while seq.next_element::<CheckedJson>()?.is_some() {}
        Ok(CheckedJson)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<CheckedJson, A::Error> {
        let mut seen = HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            if key.chars().any(|c| is_refused(c, false)) {
                return Err(de::Error::custom(format!(
                    "{CONTROL_IN_KEY}{}`",
                    key.escape_debug()
                )));
            }
            if !seen.insert(key.clone()) {
                return Err(de::Error::custom(format!("{DUPLICATE_KEY}{key}`")));
            }
            map.next_value::<CheckedJson>()?;
        }
        Ok(CheckedJson)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(json: &str) -> Result<(), (String, String)> {
        let de = &mut serde_json::Deserializer::from_str(json);
        serde_path_to_error::deserialize::<_, CheckedJson>(de)
            .map(|_| ())
            .map_err(|e| (e.path().to_string(), e.into_inner().to_string()))
    }

    #[test]
    fn duplicate_keys_are_found_at_any_depth() {
        assert!(check(r#"{"a": 1, "b": {"a": 1}, "c": [{"a": 1}, {"a": 2}]}"#).is_ok());
        let (path, msg) = check(r#"{"a": 1, "a": 2}"#).unwrap_err();
        assert_eq!(path, ".");
        assert!(msg.starts_with("duplicate key `a`"), "{msg}");
        let (path, msg) = check(r#"{"params": {"x": 1, "x": 1}}"#).unwrap_err();
        assert_eq!(path, "params");
        assert!(msg.starts_with("duplicate key `x`"), "{msg}");
        let (path, _) = check(r#"{"changes": [{}, {"team": "a", "team": "b"}]}"#).unwrap_err();
        assert_eq!(path, "changes[1]");
    }

    #[test]
    fn control_characters_are_found_in_values_and_keys() {
        let (path, msg) = check(r#"{"params": {"note": "a\u0000b"}}"#).unwrap_err();
        assert_eq!(path, "params.note");
        assert!(msg.starts_with(CONTROL_IN_VALUE), "{msg}");
        let (path, msg) = check(r#"{"params": {"n\tote": 1}}"#).unwrap_err();
        assert_eq!(path, "params");
        assert!(msg.starts_with(CONTROL_IN_KEY), "{msg}");
        assert!(check(r#"{"name": "caf\u00e9 \u2603"}"#).is_ok());
    }

    #[test]
    fn one_line_and_several_lines() {
        for c in [
            '\0', '\u{1}', '\t', '\n', '\r', '\u{1b}', '\u{7f}', '\u{85}',
        ] {
            let s = format!("a{c}b");
            let e = single_line("name", &s).unwrap_err();
            assert_eq!(e.field.as_deref(), Some("name"));
            assert!(e.message.contains("character 2"), "{}", e.message);
        }
        assert!(multi_line("template", "a:\n\tb\r\n").is_ok());
        assert!(multi_line("template", "a\0").is_err());
        assert!(single_line("name", "naïve – ok").is_ok());
        let e = json_single_line("params", &serde_json::json!({"tags": ["ok", "b\u{0}d"]}))
            .unwrap_err();
        assert_eq!(e.field.as_deref(), Some("params.tags[1]"));
    }
}
