//! What the HTML pages share — the live board at `/` and the fleet report — so both speak
//! of text and utilization the same way.
//!
//! The pages are maud templates (`maud::html!`): markup is checked when the crate compiles,
//! and every value spliced into it is escaped by construction — no page concatenates
//! markup by hand. What this module adds:
//!
//! - [`Text`]: how text from outside (process names, users, pod and team names, alert
//!   annotations, host names from a store) is spliced: `(Text(name))`. Maud's own escaping
//!   of a splice replaces `& < > "`; [`Text`] replaces `'` too, through [`escape`], so text
//!   stays text in an attribute whichever quote a reader of the page assumes.
//! - [`escape`]: the five-character escaping itself (`& < > " '`), for element content and
//!   quoted attribute values alike, so a process that names itself `<script>` shows as
//!   text, never as markup. The pages reach it only through [`Text`].
//! - [`shade`]: the utilization scale, eleven classes from idle to saturated; each page's
//!   style sheet colours them for its own theme (dark on a wall screen, light on paper).

use std::borrow::Cow;

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

/// Text from outside, spliced into a maud template escaped as [`escape`] escapes it.
#[derive(Debug, Clone, Copy)]
pub struct Text<T>(pub T);

impl<T: AsRef<str>> maud::Render for Text<T> {
    fn render_to(&self, buffer: &mut String) {
        buffer.push_str(&escape(self.0.as_ref()));
    }
}

/// The shade class of a utilization (0–1): `u0` (idle) to `u10` (saturated), `un` without
/// data. The page's style sheet colours each class once, for tiles and cells alike.
pub fn shade(utilization: Option<f64>) -> &'static str {
    const SHADES: [&str; 11] = [
        "u0", "u1", "u2", "u3", "u4", "u5", "u6", "u7", "u8", "u9", "u10",
    ];
    match utilization {
        Some(u) if u.is_finite() => SHADES[(u.clamp(0.0, 1.0) * 10.0).round() as usize],
        _ => "un",
    }
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

        #[test]
        fn text_in_a_template_is_escaped_as_escape_does(text in any::<String>()) {
            let page = maud::html! { p title=(Text(&text)) { (Text(&text)) } }.into_string();
            let escaped = escape(&text);
            prop_assert_eq!(page, format!("<p title=\"{escaped}\">{escaped}</p>"));
        }
    }
}
