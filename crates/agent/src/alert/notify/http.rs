//! The HTTP side every integration shares: one blocking client per receiver, and the one
//! place where an HTTP outcome becomes "delivered", "retry" or "drop".
//!
//! Classification follows Alertmanager's `notify` package: 2xx is delivered; 5xx, 429 and
//! transport failures (refused, reset, timed out, DNS) are worth retrying, honouring
//! `Retry-After`; every other status is dropped, since sending the same request again
//! cannot change the answer. Chat services that answer with an error code inside a 2xx (or
//! 4xx) body plug in a [`BodyCheck`] that overrides the status-based verdict.
//!
//! Webhook URLs of chat services carry their token (`?access_token=`, `?key=`,
//! `/hook/<uuid>`, `/services/T…/B…/<token>`): an [`Endpoint`] registers its URL, bearer
//! token and signing secret with [`crate::redact`] when it is built, and every message that
//! leaves this module — the HTTP client's errors, which quote the URL, included — is
//! scrubbed by it.

use std::io::Read as _;
use std::time::Duration;

use chrono::{DateTime, Utc};
use ureq::http::{HeaderMap, Uri};

use super::NotifyError;
use crate::redact;

/// One configured URL with its secret parts replaced, for messages.
pub use crate::redact::url as redacted_url;

/// Most bytes of a reply we read: enough for any error body, bounded against a server
/// that streams forever.
const MAX_REPLY_BYTES: u64 = 64 * 1024;

/// Most characters of a reply body quoted in an error message.
const EXCERPT_CHARS: usize = 200;

/// What the service answered.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub headers: HeaderMap,
    /// At most 64 KiB of the body.
    pub body: Vec<u8>,
}

impl Reply {
    /// A header's value, if present and readable.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The start of the body as text, for error messages (not yet redacted).
    pub fn excerpt(&self) -> String {
        let text = String::from_utf8_lossy(&self.body);
        let text = text.trim();
        let mut out: String = text.chars().take(EXCERPT_CHARS).collect();
        if text.chars().count() > EXCERPT_CHARS {
            out.push('…');
        }
        out
    }
}

/// A service-specific reading of a reply body (Feishu `code`, DingTalk and WeCom
/// `errcode`). `None` when the body says nothing (not JSON, no code): the status decides.
pub type BodyCheck = fn(&Reply, DateTime<Utc>) -> Option<Result<(), NotifyError>>;

/// The verdict on a reply: the one place statuses are classified.
///
/// 5xx and 429 retry whatever the body says (`Retry-After` honoured, or the wait a body
/// check found); 2xx and other 4xx first ask `check` (a chat service's in-body code may
/// say "rate limited" inside a 400, or "bad token" inside a 200), then fall back to the
/// status: 2xx delivered, other statuses dropped.
pub fn classify(
    reply: &Reply,
    now: DateTime<Utc>,
    check: Option<BodyCheck>,
) -> Result<(), NotifyError> {
    let status = reply.status;
    let verdict = check.and_then(|check| check(reply, now));
    if status == 429 || (500..600).contains(&status) {
        // Only a body's *retry* verdict (with a service-specific wait) can refine these:
        // a 429 or 5xx is never dropped on what its body says.
        if let Some(Err(retry @ NotifyError::Retry { .. })) = verdict {
            return Err(retry);
        }
        return Err(NotifyError::Retry {
            reason: format!("HTTP {status}: {}", reply.excerpt()),
            after: retry_after(reply.header("retry-after"), now),
        });
    }
    if (200..300).contains(&status) || (400..500).contains(&status) {
        if let Some(verdict) = verdict {
            return verdict;
        }
    }
    if (200..300).contains(&status) {
        return Ok(());
    }
    let reason = match status {
        300..=399 => format!(
            "HTTP {status}: redirects are not followed (a webhook must not move); check the URL"
        ),
        _ => format!("HTTP {status}: {}", reply.excerpt()),
    };
    Err(NotifyError::Drop { reason })
}

/// `Retry-After` as the wait the service asked for (see [`crate::retry_after`]): None
/// when absent or unreadable.
pub fn retry_after(value: Option<&str>, now: DateTime<Utc>) -> Option<Duration> {
    crate::retry_after::parse(value?, now)
}

/// A transport failure as a verdict: nearly all are worth retrying (the receiver may come
/// back); a URL the client cannot use never will be.
fn transport_error(err: ureq::Error, timeout: Duration) -> NotifyError {
    match err {
        ureq::Error::Timeout(_) => NotifyError::Retry {
            reason: format!("no answer within {}", humantime::format_duration(timeout)),
            after: None,
        },
        ureq::Error::BadUri(_)
        | ureq::Error::Http(_)
        | ureq::Error::RequireHttpsOnly(_)
        | ureq::Error::InvalidProxyUrl => NotifyError::Drop {
            reason: format!("unusable request: {err}"),
        },
        other => NotifyError::Retry {
            reason: format!("transport: {other}"),
            after: None,
        },
    }
}

/// Why a URL cannot be a receiver's endpoint. The URL shows only redacted (`shown`), or not
/// at all when nothing of it can be told apart from a token.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EndpointError {
    #[error("URL must start with http:// or https:// (its value is not shown: it may be a token)")]
    NoScheme,
    #[error("URL {shown} is not a valid URL")]
    Invalid { shown: String },
    #[error("URL {shown} must start with http:// or https://")]
    Scheme { shown: String },
    #[error("URL {shown} has no host")]
    NoHost { shown: String },
}

/// One receiver's endpoint: the URL, a client with the receiver's timeout and the optional
/// bearer token. Its secrets are registered with [`crate::redact`] when it is built.
pub struct Endpoint {
    agent: ureq::Agent,
    url: String,
    bearer: Option<String>,
    timeout: Duration,
}

impl std::fmt::Debug for Endpoint {
    // Never the URL itself: it may hold the token.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("url", &redacted_url(&self.url))
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl Endpoint {
    /// Checks that `url` is an absolute http(s) URL; errors show it only redacted. Its
    /// secret parts are registered first, so even a URL refused here never reaches a log.
    pub fn new(url: &str, timeout: Duration) -> Result<Endpoint, EndpointError> {
        redact::register_url(url);
        if !url.contains("://") {
            // Nothing of it can be told apart from a token: not quoted at all.
            return Err(EndpointError::NoScheme);
        }
        let shown = || redacted_url(url);
        let uri: Uri = url
            .parse()
            .map_err(|_| EndpointError::Invalid { shown: shown() })?;
        match uri.scheme_str() {
            Some("http") | Some("https") => {}
            _ => return Err(EndpointError::Scheme { shown: shown() }),
        }
        if uri.host().is_none_or(str::is_empty) {
            return Err(EndpointError::NoHost { shown: shown() });
        }
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(timeout))
            .http_status_as_error(false)
            // A webhook that redirects is misconfigured, and following a POST redirect
            // would turn it into a GET: classify the 3xx instead.
            .max_redirects(0)
            .user_agent(concat!("gpu-sentinel/", env!("CARGO_PKG_VERSION")))
            .build()
            .into();
        Ok(Endpoint {
            agent,
            url: url.to_string(),
            bearer: None,
            timeout,
        })
    }

    /// Sends `Authorization: Bearer TOKEN` with every request.
    pub(crate) fn with_bearer(mut self, token: Option<String>) -> Endpoint {
        if let Some(token) = &token {
            redact::register_secret(token);
        }
        self.bearer = token;
        self
    }

    /// Another secret (a signing key) to keep out of messages.
    pub(crate) fn redact_also(&mut self, secret: &str) {
        redact::register_secret(secret);
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// The URL with its secret parts replaced.
    pub fn shown(&self) -> String {
        redacted_url(&self.url)
    }

    /// POSTs a JSON body to the endpoint's URL (or `url`, the same URL with signing
    /// parameters added) and classifies the outcome. Error reasons name the redacted URL.
    pub fn post_json(
        &self,
        url: Option<&str>,
        body: &[u8],
        check: Option<BodyCheck>,
    ) -> Result<(), NotifyError> {
        let target = url.unwrap_or(&self.url);
        let mut request = self
            .agent
            .post(target)
            .header("Content-Type", "application/json; charset=utf-8");
        if let Some(token) = &self.bearer {
            request = request.header("Authorization", format!("Bearer {token}"));
        }
        let outcome = match request.send(body) {
            Ok(mut response) => {
                let status = response.status().as_u16();
                let headers = response.headers().clone();
                let mut body = Vec::new();
                // A reply cut short still has its status; what was read is enough to
                // classify, so a read error is not a delivery error.
                let _ = response
                    .body_mut()
                    .as_reader()
                    .take(MAX_REPLY_BYTES)
                    .read_to_end(&mut body);
                let reply = Reply {
                    status,
                    headers,
                    body,
                };
                classify(&reply, Utc::now(), check)
            }
            Err(err) => Err(transport_error(err, self.timeout)),
        };
        // Scrubbed whole: a reply body or a client error may quote the (signed) URL.
        outcome.map_err(|err| match err {
            NotifyError::Retry { reason, after } => NotifyError::Retry {
                reason: redact::scrub(&format!("POST {}: {reason}", self.shown())),
                after,
            },
            NotifyError::Drop { reason } => NotifyError::Drop {
                reason: redact::scrub(&format!("POST {}: {reason}", self.shown())),
            },
        })
    }
}

/// Reads a chat service's JSON reply code: `Some((code, message))` when `field` is an
/// integer in a JSON object body.
pub(crate) fn body_code(reply: &Reply, field: &str, message_field: &str) -> Option<(i64, String)> {
    let doc: serde_json::Value = serde_json::from_slice(&reply.body).ok()?;
    let code = doc.get(field)?.as_i64()?;
    let message = doc
        .get(message_field)
        .and_then(|m| m.as_str())
        .unwrap_or("")
        .to_string();
    Some((code, message))
}

/// The verdict of a chat robot that answers `{"errcode": N, "errmsg": …}` (DingTalk and
/// WeCom): 0 is delivered (when the status says so too), -1 "system busy" and the robot's
/// rate-limit code are retried (the latter after `rate_limit_wait`), any other code is
/// dropped, as Alertmanager's own WeChat integration does. None: not such a body.
pub(crate) fn errcode_verdict(
    reply: &Reply,
    service: &str,
    rate_limit_code: i64,
    rate_limit_wait: Duration,
) -> Option<Result<(), NotifyError>> {
    let (code, message) = body_code(reply, "errcode", "errmsg")?;
    let reason = format!("{service} errcode {code}: {message}");
    match code {
        0 if reply.status < 300 => Some(Ok(())),
        0 => None,
        -1 => Some(Err(NotifyError::Retry {
            reason,
            after: None,
        })),
        c if c == rate_limit_code => Some(Err(NotifyError::Retry {
            reason,
            after: Some(rate_limit_wait),
        })),
        _ => Some(Err(NotifyError::Drop { reason })),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(status: u16, headers: &[(&'static str, &str)], body: &str) -> Reply {
        let mut map = HeaderMap::new();
        for (k, v) in headers {
            map.insert(*k, v.parse().expect("header value"));
        }
        Reply {
            status,
            headers: map,
            body: body.as_bytes().to_vec(),
        }
    }

    #[test]
    fn statuses_classify_like_alertmanager() {
        let now = Utc::now();
        assert_eq!(classify(&reply(200, &[], ""), now, None), Ok(()));
        assert_eq!(classify(&reply(204, &[], ""), now, None), Ok(()));
        assert!(matches!(
            classify(&reply(503, &[], "down"), now, None),
            Err(NotifyError::Retry { after: None, .. })
        ));
        assert_eq!(
            classify(&reply(429, &[("retry-after", "7")], ""), now, None),
            Err(NotifyError::Retry {
                reason: "HTTP 429: ".into(),
                after: Some(Duration::from_secs(7))
            })
        );
        assert!(matches!(
            classify(&reply(400, &[], "bad"), now, None),
            Err(NotifyError::Drop { .. })
        ));
        assert!(matches!(
            classify(&reply(302, &[], ""), now, None),
            Err(NotifyError::Drop { .. })
        ));
    }
}
