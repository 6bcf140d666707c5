//! One CSV cell of text, as Gantry's downloads (usage, audit log) write it.

/// `s` as a CSV cell: quoted, with quotes doubled, when it holds a comma, a quote or a line
/// break (or `always`). A text that begins with `=`, `+`, `-`, `@`, a tab or a carriage
/// return is read as a formula by spreadsheets (a user name from an identity provider may
/// begin with `-`): it gets a leading `'`, as OWASP's advice on CSV injection says, so the
/// cell shows the text and runs nothing.
pub fn text(s: &str, always: bool) -> String {
    let s = if s.starts_with(['=', '+', '-', '@', '\t', '\r']) {
        format!("'{s}")
    } else {
        s.to_string()
    };
    if always || s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::text;

    #[test]
    fn cells_are_quoted_when_needed_and_never_read_as_formulas() {
        assert_eq!(text("nlp", false), "nlp");
        assert_eq!(text("nlp", true), "\"nlp\"");
        assert_eq!(text("a,b", false), "\"a,b\"");
        assert_eq!(text("say \"hi\"", false), "\"say \"\"hi\"\"\"");
        assert_eq!(text("two\nlines", false), "\"two\nlines\"");
        for formula in ["=1+2", "+1", "-A1-B2", "@SUM(A1)", "\tx", "\rx"] {
            let cell = text(formula, false);
            assert!(
                cell.starts_with('\'') || cell.starts_with("\"'"),
                "{formula:?} gave {cell:?}"
            );
        }
        assert_eq!(text("-2", true), "\"'-2\"");
        // Text that merely holds such a character further in is left as it is.
        assert_eq!(text("a-b@c", false), "a-b@c");
    }
}
