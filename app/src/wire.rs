//! How a page's resources travel inside the page, for hydration.
//!
//! Leptos writes each resource rendered on the server into the page as a JavaScript string
//! literal, with Rust's `Debug` escaping: a backslash before every `"`, and every one of them
//! splits the write. JSON is quotes every few characters, and that escaping was 7 % of what
//! the server spent on a Jobs page (callgrind over the page benchmark). [`SwappedJson`] is
//! JSON with its double quotes and apostrophes swapped: what travels needs far fewer
//! escapes (none for plain JSON; an apostrophe in a value becomes a `"`, and backslashes
//! and control characters are escaped as before), and the page reads it back by swapping
//! them again. Both are ASCII, so the swap is a byte for a byte.

use leptos::server::codee::{Decoder, Encoder};
use serde::de::DeserializeOwned;
use serde::Serialize;

/// `"` for `'` and `'` for `"`, in place.
pub(crate) fn swap_quotes(s: String) -> String {
    let mut bytes = s.into_bytes();
    for b in &mut bytes {
        *b = match *b {
            b'"' => b'\'',
            b'\'' => b'"',
            other => other,
        };
    }
    // Two ASCII bytes exchanged: still the UTF-8 it was.
    String::from_utf8(bytes).expect("swapping two ASCII bytes keeps UTF-8")
}

/// `val` as JSON with its quotes swapped.
pub(crate) fn to_swapped<T: Serialize + ?Sized>(val: &T) -> Result<String, serde_json::Error> {
    serde_json::to_string(val).map(swap_quotes)
}

/// A value from JSON with its quotes swapped.
pub(crate) fn from_swapped<T: DeserializeOwned>(val: &str) -> Result<T, serde_json::Error> {
    serde_json::from_str(&swap_quotes(val.to_string()))
}

/// JSON with its quotes swapped (see the module's documentation): a resource's codec.
pub struct SwappedJson;

impl<T: Serialize> Encoder<T> for SwappedJson {
    type Error = serde_json::Error;
    type Encoded = String;

    fn encode(val: &T) -> Result<String, serde_json::Error> {
        to_swapped(val)
    }
}

impl<T: DeserializeOwned> Decoder<T> for SwappedJson {
    type Error = serde_json::Error;
    type Encoded = str;

    fn decode(val: &str) -> Result<T, serde_json::Error> {
        from_swapped(val)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// As the page carries it: Leptos replaces `<` with `\u003c` and writes the result with
    /// `{:?}` as a JavaScript string literal, which the browser reads (here: as the JSON
    /// string it also is) and hands to the decoder.
    fn through_the_page<T: Serialize + DeserializeOwned>(val: &T) -> T {
        let encoded = <SwappedJson as Encoder<T>>::encode(val).unwrap();
        let literal = format!("{:?}", encoded.replace('<', "\\u003c"));
        let read: String = serde_json::from_str(&literal).unwrap();
        SwappedJson::decode(&read).unwrap()
    }

    #[test]
    fn values_with_quotes_apostrophes_and_markup_come_back() {
        let sent = vec![
            "team 'vision'".to_string(),
            r#"say "hi" \ back"#.into(),
            "</script><!--".into(),
            "ünïcode ✓".into(),
            String::new(),
        ];
        assert_eq!(through_the_page(&sent), sent);
    }

    #[test]
    fn plain_json_travels_without_escapes() {
        let encoded = <SwappedJson as Encoder<_>>::encode(&serde_json::json!({
            "name": "llama-3.1-70b",
            "gpus": 16,
            "params": {"lr": 0.0003}
        }))
        .unwrap();
        // Leptos writes it with `{:?}`: nothing to escape, so it is the string in quotes.
        assert_eq!(format!("{encoded:?}"), format!("\"{encoded}\""));
    }
}
