//! One OpenAI-compatible chat-completions request, and what its answer means.
//!
//! `POST {base_url}/chat/completions`, non-streaming, with a total time limit covering
//! connecting, waiting and reading the body. Facts about such servers this handles:
//! DeepSeek (and others) write blank keep-alive lines — or SSE comment lines starting with
//! `:` — before the JSON body while the model is still working; some answer 200 with an
//! `{"error": …}` body; `finish_reason` `"length"` means the answer was cut at `max_tokens`.
//! The API key goes only into the `Authorization` header. It and the URL's secret parts are
//! registered with [`crate::redact`] when the client is built, and every error is scrubbed
//! by it: a server may echo the key, and the HTTP client's errors quote the URL.

use std::time::Duration;

use serde_json::{Value, json};

use crate::redact;

/// Most bytes of an answer read (a chat answer of a few hundred tokens is a few KiB).
const MAX_BODY: u64 = 1 << 20;
/// Most characters of a server's error detail kept for logs.
const MAX_DETAIL: usize = 200;

/// A configured chat-completions endpoint.
pub struct ChatClient {
    /// Where requests go (`endpoint(base_url)`).
    target: String,
    /// The URL as messages may show it.
    shown: String,
    api_key: String,
    model: String,
    max_tokens: u32,
    agent: ureq::Agent,
}

impl std::fmt::Debug for ChatClient {
    // By hand, so the key cannot end up in a log through `{:?}`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatClient")
            .field("url", &self.shown)
            .field("model", &self.model)
            .field("max_tokens", &self.max_tokens)
            .finish_non_exhaustive()
    }
}

/// A usable answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    Complete(String),
    /// Cut at `max_tokens` (`finish_reason` "length"): kept, marked as cut short.
    CutShort(String),
}

/// Why there is no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChatError {
    #[error("HTTP {status}: the API key was refused ({detail})")]
    Unauthorized { status: u16, detail: String },
    #[error("HTTP 429: rate limited ({detail})")]
    RateLimited {
        detail: String,
        retry_after: Option<Duration>,
    },
    #[error("HTTP {status}: server error ({detail})")]
    Server { status: u16, detail: String },
    #[error("HTTP {status}: request refused ({detail})")]
    Client { status: u16, detail: String },
    #[error("the answer is an error: {0}")]
    ErrorBody(String),
    #[error("the answer is not the expected JSON: {0}")]
    Malformed(String),
    #[error("the answer has no text")]
    Empty,
    #[error("no answer within the time limit")]
    Timeout,
    #[error("{0}")]
    Transport(String),
}

impl ChatError {
    /// The `outcome` label of `gpu_sentinel_advice_requests_total`.
    pub fn outcome(&self) -> &'static str {
        match self {
            ChatError::Unauthorized { .. } => "unauthorized",
            ChatError::RateLimited { .. } => "rate_limited",
            ChatError::Server { .. } => "server_error",
            ChatError::Client { .. } => "client_error",
            ChatError::ErrorBody(_) => "error_body",
            ChatError::Malformed(_) => "malformed",
            ChatError::Empty => "empty",
            ChatError::Timeout => "timeout",
            ChatError::Transport(_) => "transport",
        }
    }
}

/// The URL requests go to: `base_url` with `/chat/completions` appended (a base ending in
/// `/v1` gets `/v1/chat/completions`; a base that already names the endpoint is kept).
pub fn endpoint(base_url: &str) -> String {
    let base = base_url.trim().trim_end_matches('/');
    if base.ends_with("/chat/completions") {
        base.to_string()
    } else {
        format!("{base}/chat/completions")
    }
}

impl ChatClient {
    pub fn new(
        base_url: &str,
        api_key: String,
        model: &str,
        max_tokens: u32,
        timeout: Duration,
    ) -> ChatClient {
        redact::register_url(&endpoint(base_url));
        redact::register_secret(&api_key);
        let agent = ureq::Agent::config_builder()
            .timeout_global(Some(timeout))
            .http_status_as_error(false)
            .build()
            .into();
        ChatClient {
            target: endpoint(base_url),
            shown: redact::url(&endpoint(base_url)),
            api_key,
            model: model.to_string(),
            max_tokens,
            agent,
        }
    }

    /// The endpoint as messages may show it: its secret parts replaced. The URL itself
    /// never leaves the client.
    pub fn url(&self) -> &str {
        &self.shown
    }

    /// Asks once: `system` instructions, `user` content. Blocking, bounded by the timeout.
    pub fn ask(&self, system: &str, user: &str) -> Result<Answer, ChatError> {
        let body = json!({
            "model": self.model,
            "messages": [
                {"role": "system", "content": system},
                {"role": "user", "content": user},
            ],
            "max_tokens": self.max_tokens,
            "temperature": 0.2,
            "stream": false,
        })
        .to_string();
        let mut response = self
            .agent
            .post(&self.target)
            .header("Authorization", format!("Bearer {}", self.api_key))
            .header("Content-Type", "application/json")
            .header("Accept", "application/json")
            .send(body.as_bytes())
            .map_err(transport)?;
        let status = response.status().as_u16();
        // Seconds or an HTTP date, read as the notifiers read it; the worker bounds it.
        let retry_after = response
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| crate::retry_after::parse(v, chrono::Utc::now()));
        let text = response
            .body_mut()
            .with_config()
            .limit(MAX_BODY)
            .read_to_string()
            .map_err(transport)?;
        classify(status, retry_after, &text)
    }
}

fn transport(e: ureq::Error) -> ChatError {
    match e {
        ureq::Error::Timeout(_) => ChatError::Timeout,
        ureq::Error::Io(io)
            if matches!(
                io.kind(),
                std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock
            ) =>
        {
            ChatError::Timeout
        }
        other => ChatError::Transport(redact::scrub(&other.to_string())),
    }
}

/// What an answer with `status` and body `text` means.
pub fn classify(
    status: u16,
    retry_after: Option<Duration>,
    text: &str,
) -> Result<Answer, ChatError> {
    let json = strip_keep_alive(text);
    if !(200..300).contains(&status) {
        let detail = error_detail(json);
        return Err(match status {
            401 | 403 => ChatError::Unauthorized { status, detail },
            429 => ChatError::RateLimited {
                detail,
                retry_after,
            },
            500..=599 => ChatError::Server { status, detail },
            _ => ChatError::Client { status, detail },
        });
    }
    let value: Value =
        serde_json::from_str(json).map_err(|e| ChatError::Malformed(e.to_string()))?;
    if value.get("error").is_some_and(|e| !e.is_null()) {
        return Err(ChatError::ErrorBody(error_detail(json)));
    }
    let choice = value
        .get("choices")
        .and_then(|c| c.get(0))
        .ok_or_else(|| ChatError::Malformed("no choices".into()))?;
    let content = choice
        .get("message")
        .and_then(|m| m.get("content"))
        .and_then(Value::as_str)
        .map(str::trim)
        .unwrap_or("");
    if content.is_empty() {
        return Err(ChatError::Empty);
    }
    match choice.get("finish_reason").and_then(Value::as_str) {
        Some("length") => Ok(Answer::CutShort(content.to_string())),
        _ => Ok(Answer::Complete(content.to_string())),
    }
}

/// The body without the keep-alive lines some servers write before it: blank lines and
/// SSE comments (`: keep-alive`).
fn strip_keep_alive(text: &str) -> &str {
    let mut rest = text;
    loop {
        let trimmed = rest.trim_start();
        if let Some(comment) = trimmed.strip_prefix(':') {
            rest = comment.split_once('\n').map_or("", |(_, after)| after);
        } else {
            return trimmed;
        }
    }
}

/// A short, printable reason from an error body: `error.message` when the body is the
/// usual `{"error": {"message": …}}`, else the body's start.
fn error_detail(body: &str) -> String {
    let parsed: Option<Value> = serde_json::from_str(body).ok();
    let message = parsed.as_ref().and_then(|v| {
        let e = v.get("error")?;
        e.get("message")
            .and_then(Value::as_str)
            .or_else(|| e.as_str())
            .map(str::to_string)
    });
    // A server may quote the key or the URL back.
    let text = redact::scrub(&message.unwrap_or_else(|| body.trim().to_string()));
    let text: String = text
        .chars()
        .filter(|c| !c.is_control())
        .take(MAX_DETAIL)
        .collect();
    if text.is_empty() {
        "no detail".into()
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints() {
        let want = "https://api.deepseek.com/chat/completions";
        assert_eq!(endpoint("https://api.deepseek.com"), want);
        assert_eq!(endpoint("https://api.deepseek.com/"), want);
        assert_eq!(endpoint(want), want);
        assert_eq!(
            endpoint("http://127.0.0.1:8000/v1"),
            "http://127.0.0.1:8000/v1/chat/completions"
        );
    }

    #[test]
    fn the_key_and_the_urls_secrets_never_show() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .unwrap_or(9);
        let client = ChatClient::new(
            &format!("http://127.0.0.1:{port}/v1?api-key=Zq-query-secret"),
            "sk-Zq-api-key-0123".into(),
            "m",
            10,
            Duration::from_secs(2),
        );
        let err = client.ask("s", "u").expect_err("nothing listens there");
        let shown = format!("{err} {err:?} {client:?} {}", client.url());
        assert!(!shown.contains("Zq-query-secret"), "{shown}");
        assert!(!shown.contains("sk-Zq-api-key-0123"), "{shown}");
        let echoed =
            classify(401, None, "invalid key sk-Zq-api-key-0123").map_err(|e| e.to_string());
        assert_eq!(
            echoed,
            Err("HTTP 401: the API key was refused (invalid key <redacted>)".into())
        );
    }

    #[test]
    fn keep_alive_lines_and_comments_before_the_body() {
        assert_eq!(strip_keep_alive("\n\n \r\n{\"a\":1}"), "{\"a\":1}");
        assert_eq!(strip_keep_alive(": keep-alive\n\n: keep-alive\n{}"), "{}");
        assert_eq!(strip_keep_alive(":"), "");
    }

    #[test]
    fn answers() {
        let ok =
            r#"{"choices":[{"message":{"content":" check the fan "},"finish_reason":"stop"}]}"#;
        assert_eq!(
            classify(200, None, ok),
            Ok(Answer::Complete("check the fan".into()))
        );
        let cut = r#"{"choices":[{"message":{"content":"- drain"},"finish_reason":"length"}]}"#;
        assert_eq!(
            classify(200, None, cut),
            Ok(Answer::CutShort("- drain".into()))
        );
        let empty = r#"{"choices":[{"message":{"content":""},"finish_reason":"length"}]}"#;
        assert_eq!(classify(200, None, empty), Err(ChatError::Empty));
        let err = r#"{"error":{"message":"model not found","type":"invalid_request_error"}}"#;
        assert_eq!(
            classify(200, None, err),
            Err(ChatError::ErrorBody("model not found".into()))
        );
        assert_eq!(
            classify(404, None, err).map_err(|e| e.outcome()),
            Err("client_error")
        );
        assert!(matches!(
            classify(200, None, "{\"choices\": ["),
            Err(ChatError::Malformed(_))
        ));
        assert!(matches!(
            classify(200, None, "{}"),
            Err(ChatError::Malformed(_))
        ));
        assert_eq!(
            classify(429, Some(Duration::from_secs(3)), "busy"),
            Err(ChatError::RateLimited {
                detail: "busy".into(),
                retry_after: Some(Duration::from_secs(3))
            })
        );
        assert_eq!(
            classify(503, None, "").map_err(|e| e.to_string()),
            Err("HTTP 503: server error (no detail)".into())
        );
    }
}
