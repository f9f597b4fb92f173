//! Redaction: the one way text is made safe to print or store — webhook tokens, signing
//! secrets, bearer tokens and API keys replaced by `<redacted>`.
//!
//! A [`Redactor`] applies two layers:
//!
//! * **Shapes**, which need no configuration. Every URL in the text (`scheme://…`) keeps its
//!   scheme, host, port and the words of its path, and loses what is a credential in the
//!   services we talk to: userinfo, every query value (DingTalk's `access_token`, WeCom's
//!   `key`, DingTalk's `sign`), the fragment, every path segment after Feishu's (and
//!   Lark's) `hook` (`open-apis/bot/v2/hook/<token>`), the token of a Slack webhook
//!   (`services/T…/B…/<token>`; the `T…`/`B…` ids stay), and any long segment of letters and
//!   digits (a UUID, a base62 token). Outside URLs: `Bearer …` / `Basic …` credentials and
//!   `token=…`, `key=…`, `secret=…`, `sign=…`, `password=…` pairs.
//! * **Known secrets**: values registered when a receiver or the advisor is built (the
//!   secret parts of its URL, its signing secret, its bearer token, its API key), replaced
//!   wherever they appear — a service echoing its token in an error body, an HTTP client
//!   error quoting a URL in pieces, a URL without a scheme.
//!
//! The process-wide registry ([`register_url`], [`register_secret`], [`scrub`]) is what
//! every log line passes through (`cli::logging`), and what errors are scrubbed with before
//! they are logged or stored, so text from code that knows no secret — the HTTP client's own
//! messages, a panic message — is covered too. Registered secrets are never removed: a
//! configuration's secrets live as long as the process.
//!
//! This module is the ground floor: it imports nothing else of the crate, so every layer
//! can use it.

use std::sync::{LazyLock, RwLock};

use regex::Regex;

/// What replaces a secret.
pub(crate) const REDACTED: &str = "<redacted>";

/// Shortest value registered as a known secret: replacing every `1` or `ab` in the logs
/// would make them unreadable, and such a value protects nothing.
const MIN_SECRET_CHARS: usize = 4;

/// Shortest path segment taken for a token by shape alone (a UUID is 36, a Slack token 24).
const MIN_TOKEN_CHARS: usize = 16;

/// Replaces secrets in text; see the module documentation for what counts as one.
#[derive(Clone, Default)]
pub(crate) struct Redactor {
    /// Known secrets, longest first, so a secret containing another is replaced whole.
    secrets: Vec<String>,
}

impl std::fmt::Debug for Redactor {
    // Never the secrets themselves.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redactor")
            .field("secrets", &self.secrets.len())
            .finish()
    }
}

impl Redactor {
    pub const fn new() -> Redactor {
        Redactor {
            secrets: Vec::new(),
        }
    }

    /// Registers a secret (a signing key, a bearer token, an API key), and its
    /// percent-encoded and percent-decoded forms, as they may appear in a URL.
    pub(crate) fn add_secret(&mut self, secret: &str) {
        let secret = secret.trim();
        for form in [
            secret.to_string(),
            percent_decode(secret),
            percent_encode(secret),
        ] {
            // Part of the marker itself is no secret: replacing it would mangle the marker.
            if form.chars().count() >= MIN_SECRET_CHARS
                && !REDACTED.contains(form.as_str())
                && !self.secrets.contains(&form)
            {
                self.secrets.push(form);
            }
        }
        self.secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
    }

    /// Registers the secret parts of a configured URL (those the shapes remove), so they
    /// are found wherever else they show up. Text that is not a `scheme://` URL is
    /// registered whole: it may be nothing but a token.
    pub(crate) fn add_url(&mut self, url: &str) {
        let url = url.trim();
        let Some(parts) = UrlParts::split(url) else {
            self.add_secret(url);
            return;
        };
        for secret in parts.secrets() {
            self.add_secret(secret);
        }
    }

    /// `text` with every secret replaced: the known secrets, then the shapes (in this
    /// order a second scrub changes nothing: a `<redacted>` the secrets left inside a URL
    /// is already part of it when the shapes look).
    pub fn scrub(&self, text: &str) -> String {
        let mut out = text.to_string();
        for secret in &self.secrets {
            if out.contains(secret.as_str()) {
                out = out.replace(secret.as_str(), REDACTED);
            }
        }
        scrub_shapes(&out)
    }
}

/// The process-wide registry of known secrets.
static REGISTRY: RwLock<Redactor> = RwLock::new(Redactor::new());

/// Registers a secret process-wide (see [`Redactor::add_secret`]).
pub fn register_secret(secret: &str) {
    crate::sync::write(&REGISTRY).add_secret(secret);
}

/// Registers the secret parts of a configured URL process-wide (see [`Redactor::add_url`]).
pub fn register_url(url: &str) {
    crate::sync::write(&REGISTRY).add_url(url);
}

/// `text` with the shapes and every registered secret replaced: what may be logged, stored
/// or answered.
pub fn scrub(text: &str) -> String {
    crate::sync::read(&REGISTRY).scrub(text)
}

/// One configured URL as it may be shown in a message: [`scrub`]bed, or `<not a URL>` when
/// it has no `scheme://` (then nothing of it can be told apart from a token).
pub fn url(url: &str) -> String {
    match UrlParts::split(url.trim()) {
        Some(_) => scrub(url.trim()),
        None => "<not a URL>".to_string(),
    }
}

/// A URL cut into its parts, on the raw text (nothing decoded, nothing validated), so any
/// text that looks like a URL can be redacted, parseable or not.
struct UrlParts<'a> {
    scheme: &'a str,
    userinfo: Option<&'a str>,
    host_port: &'a str,
    path: &'a str,
    query: Option<&'a str>,
    fragment: Option<&'a str>,
}

impl<'a> UrlParts<'a> {
    /// `scheme://authority[/path][?query][#fragment]`; None without a valid scheme.
    fn split(url: &'a str) -> Option<UrlParts<'a>> {
        let (scheme, rest) = url.split_once("://")?;
        if !is_scheme(scheme) {
            return None;
        }
        let (rest, fragment) = match rest.split_once('#') {
            Some((rest, fragment)) => (rest, Some(fragment)),
            None => (rest, None),
        };
        let (rest, query) = match rest.split_once('?') {
            Some((rest, query)) => (rest, Some(query)),
            None => (rest, None),
        };
        let (authority, path) = rest.find('/').map_or((rest, ""), |i| rest.split_at(i));
        let (userinfo, host_port) = match authority.rsplit_once('@') {
            Some((userinfo, host_port)) => (Some(userinfo), host_port),
            None => (None, authority),
        };
        Some(UrlParts {
            scheme,
            userinfo,
            host_port,
            path,
            query,
            fragment,
        })
    }

    /// The parts [`UrlParts::redacted`] replaces.
    fn secrets(&self) -> Vec<&'a str> {
        let mut out: Vec<&'a str> = self.userinfo.into_iter().collect();
        if let Some(userinfo) = self.userinfo {
            // user and password apart too: either may be quoted alone.
            out.extend(userinfo.split(':'));
        }
        let segments: Vec<&'a str> = self.path.split('/').collect();
        let secret = secret_segments(&segments);
        out.extend(
            segments
                .iter()
                .zip(&secret)
                .filter(|(_, s)| **s)
                .map(|(seg, _)| *seg),
        );
        for pair in self.query.unwrap_or("").split('&') {
            out.push(pair.split_once('=').map_or(pair, |(_, value)| value));
        }
        out.extend(self.fragment);
        out.retain(|s| !s.is_empty());
        out
    }

    /// The URL with its secret parts replaced.
    fn redacted(&self) -> String {
        let mut out = format!("{}://", self.scheme);
        if self.userinfo.is_some() {
            out.push_str(REDACTED);
            out.push('@');
        }
        out.push_str(self.host_port);
        let segments: Vec<&str> = self.path.split('/').collect();
        let secret = secret_segments(&segments);
        let path: Vec<&str> = segments
            .iter()
            .zip(&secret)
            .map(|(seg, s)| if *s { REDACTED } else { seg })
            .collect();
        out.push_str(&path.join("/"));
        if let Some(query) = self.query {
            out.push('?');
            let pairs: Vec<String> = query
                .split('&')
                .map(|pair| match pair.split_once('=') {
                    Some((name, "")) => format!("{name}="),
                    Some((name, _)) => format!("{name}={REDACTED}"),
                    None if pair.is_empty() => String::new(),
                    None => REDACTED.to_string(),
                })
                .collect();
            out.push_str(&pairs.join("&"));
        }
        if let Some(fragment) = self.fragment {
            out.push('#');
            if !fragment.is_empty() {
                out.push_str(REDACTED);
            }
        }
        out
    }
}

/// RFC 3986: a letter, then letters, digits, `+`, `-`, `.`.
fn is_scheme(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
}

/// Which path segments are secret, by the services' URL shapes (see the module
/// documentation). `segments` is the path split on `/` (the first is empty).
fn secret_segments(segments: &[&str]) -> Vec<bool> {
    let mut secret: Vec<bool> = segments.iter().map(|s| looks_like_token(s)).collect();
    let non_empty_after = |from: usize| (from..segments.len()).filter(|&j| !segments[j].is_empty());
    for (i, segment) in segments.iter().enumerate() {
        if segment.eq_ignore_ascii_case("hook") {
            // Feishu/Lark: open-apis/bot/v2/hook/<token>.
            for j in non_empty_after(i + 1) {
                secret[j] = true;
            }
        } else if ["services", "triggers", "workflows"].contains(segment) {
            // Slack: services/T…/B…/<token>; workspace and channel ids are not secret,
            // anything else after them is, and the last segment always.
            let rest: Vec<usize> = non_empty_after(i + 1).collect();
            for (k, &j) in rest.iter().enumerate() {
                if k + 1 == rest.len() || !is_slack_id(segments[j]) {
                    secret[j] = true;
                }
            }
        }
    }
    secret
}

/// A long run with both letters and digits: a UUID, a base62 token, a hex key. Words of
/// an API path (`recommendations`, `open-apis`) have no digits or are short.
fn looks_like_token(segment: &str) -> bool {
    segment.chars().count() >= MIN_TOKEN_CHARS
        && segment.chars().any(|c| c.is_ascii_digit())
        && segment.chars().any(|c| c.is_alphabetic())
}

/// Slack's workspace (`T…`), channel (`B…`) and app ids: upper-case letters and digits.
fn is_slack_id(segment: &str) -> bool {
    segment.len() >= 6
        && segment
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit())
}

/// Characters that end a URL inside free text.
fn ends_url(c: char) -> bool {
    c.is_whitespace() || "\"'<>`{}|\\^".contains(c)
}

/// Where the URL whose authority starts at `from` ends: at a character that ends URLs in
/// text, except that a `<redacted>` already in it belongs to it (scrubbing twice must give
/// what scrubbing once gave).
fn url_end(text: &str, from: usize) -> usize {
    let mut i = from;
    while let Some(c) = text[i..].chars().next() {
        if text[i..].starts_with(REDACTED) {
            i += REDACTED.len();
        } else if ends_url(c) {
            return i;
        } else {
            i += c.len_utf8();
        }
    }
    i
}

/// Punctuation that ends a sentence after a URL rather than belonging to it.
const TRAILING: &str = ".,:;!?)]";

static CREDENTIAL: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"\b((?i:bearer)|Basic)(\s+)[A-Za-z0-9._~+/-]{6,}=*").ok());

static PAIR: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(
        r#"(?i)\b(access_token|token|key|secret|sign|signature|password|passwd|api_key|apikey|api-key)=[^\s&"',;<>]+"#,
    )
    .ok()
});

/// The shapes layer: every URL in `text` redacted in place, then credentials outside URLs.
fn scrub_shapes(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let after = at + 3;
        // The scheme: the run of scheme characters before "://", from its first letter.
        let run = rest[..at]
            .char_indices()
            .rev()
            .take_while(|(_, c)| c.is_ascii_alphanumeric() || "+-.".contains(*c))
            .last()
            .map_or(at, |(i, _)| i);
        let Some(start) = rest[run..at]
            .char_indices()
            .find(|(_, c)| c.is_ascii_alphabetic())
            .map(|(i, _)| run + i)
        else {
            out.push_str(&rest[..after]);
            rest = &rest[after..];
            continue;
        };
        let mut end = url_end(rest, after);
        while end > after && rest[..end].ends_with(|c| TRAILING.contains(c)) {
            end -= 1;
        }
        out.push_str(&rest[..start]);
        match UrlParts::split(&rest[start..end]) {
            Some(parts) => out.push_str(&parts.redacted()),
            None => out.push_str(&rest[start..end]),
        }
        rest = &rest[end..];
    }
    out.push_str(rest);
    if let Some(re) = &*CREDENTIAL {
        out = re.replace_all(&out, "${1}${2}<redacted>").into_owned();
    }
    if let Some(re) = &*PAIR {
        out = re.replace_all(&out, "${1}=<redacted>").into_owned();
    }
    out
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Percent-encodes everything but RFC 3986's unreserved characters (base64's `+`, `/`,
/// `=` included). The one encoding of secrets put into URLs (DingTalk's `sign`), so that
/// redaction knows each secret in exactly the form it is sent in.
pub fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len() * 3);
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests;
