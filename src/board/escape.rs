//! Escaping text from outside (process names, users, pod names, alert annotations) for HTML.
//!
//! One function serves element content and double-quoted attribute values alike: it
//! replaces the five characters that can end either (`& < > " '`), so a process that names
//! itself `<script>` shows as text, never as markup, wherever the board puts it.

use std::borrow::Cow;
use std::fmt::Write;

/// `text` safe inside an element or a double- or single-quoted attribute value. Borrows
/// when nothing needs escaping (the common case: most names are plain).
pub fn escape(text: &str) -> Cow<'_, str> {
    if !text.contains(['&', '<', '>', '"', '\'']) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// Appends `text` escaped to `out`.
pub fn push_escaped(out: &mut String, text: &str) {
    let _ = write!(out, "{}", escape(text));
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Reverses [`escape`]: what a browser reads back.
    fn unescape(text: &str) -> String {
        text.replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&quot;", "\"")
            .replace("&#39;", "'")
            .replace("&amp;", "&")
    }

    #[test]
    fn a_hostile_name_becomes_text() {
        assert_eq!(
            escape("<img src=x onerror=\"alert('x')\">&"),
            "&lt;img src=x onerror=&quot;alert(&#39;x&#39;)&quot;&gt;&amp;"
        );
        assert!(matches!(escape("python3"), Cow::Borrowed("python3")));
    }

    proptest! {
        #[test]
        fn escaped_text_holds_no_markup_and_reads_back(text in any::<String>()) {
            let escaped = escape(&text);
            prop_assert!(!escaped.contains(['<', '>', '"', '\'']));
            // Every `&` starts one of the five entities.
            for (i, _) in escaped.match_indices('&') {
                let rest = &escaped[i..];
                prop_assert!(
                    ["&amp;", "&lt;", "&gt;", "&quot;", "&#39;"].iter().any(|e| rest.starts_with(e)),
                    "stray & in {escaped:?}"
                );
            }
            prop_assert_eq!(unescape(&escaped), text);
        }
    }
}
