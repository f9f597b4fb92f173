//! What the web configuration asks of every request: the rate limit, basic
//! authentication, and the extra response headers.
//!
//! A credential already verified is let through first, before the rate limit: it costs a
//! MAC and a compare, so counting it would protect nothing, and a flood that empties the
//! limit must not turn a real Prometheus away. Everything else takes a token from its
//! client address's bucket ([`RateLimiter`]), then goes to [`BasicAuth::check`], whose
//! bcrypt runs on a bounded pool and whose failures are limited per address.
//!
//! `/healthz` and `/readyz` are answered without credentials and outside the rate limit:
//! kubelet and load-balancer probes carry neither, and a probe refused with 401 or 429
//! would restart or drain a healthy agent. They reveal only whether the agent collects.

use std::net::IpAddr;

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{self, HeaderName, HeaderValue};
use hyper::{Request, Response, StatusCode};

use crate::webconfig::{BasicAuth, RateLimiter, Verdict, WebConfig};

/// The paths answered to anyone.
pub(crate) const OPEN_PATHS: [&str; 2] = ["/healthz", "/readyz"];

/// The checks and headers of one web configuration (none without one).
#[derive(Debug, Default)]
pub(crate) struct Protection {
    auth: Option<BasicAuth>,
    limiter: Option<RateLimiter>,
    headers: Vec<(HeaderName, HeaderValue)>,
}

impl Protection {
    /// The protection a web configuration describes. Makes the dummy bcrypt hash (one
    /// hash, at the users' cost): call it before serving, off the async workers.
    pub fn new(web: Option<&WebConfig>) -> Protection {
        let Some(web) = web else {
            return Protection::default();
        };
        let headers = web
            .headers
            .iter()
            .filter_map(|(name, value)| {
                // Names come from exporter-toolkit's fixed set and values were checked when
                // the file was read; a pair that still fails is skipped, not a panic.
                Some((
                    HeaderName::from_bytes(name.as_bytes()).ok()?,
                    HeaderValue::from_str(value).ok()?,
                ))
            })
            .collect();
        Protection {
            auth: BasicAuth::new(&web.users),
            limiter: web
                .rate_limit
                .map(|(every, burst)| RateLimiter::new(every, burst)),
            headers,
        }
    }

    /// None when the request from `client` may be answered; else the refusal to send.
    pub async fn refusal<B>(
        &self,
        req: &Request<B>,
        client: IpAddr,
    ) -> Option<Response<Full<Bytes>>> {
        if OPEN_PATHS.contains(&req.uri().path()) {
            return None;
        }
        let given = req
            .headers()
            .get(header::AUTHORIZATION)
            .map(HeaderValue::as_bytes);
        if self.auth.as_ref().is_some_and(|auth| auth.verified(given)) {
            return None;
        }
        if let Some(limiter) = &self.limiter {
            if !limiter.allow(client) {
                let wait = limiter.retry_after(client);
                return Some(retry(
                    StatusCode::TOO_MANY_REQUESTS,
                    "Too Many Requests\n",
                    wait,
                ));
            }
        }
        let auth = self.auth.as_ref()?;
        match auth.check(given, client).await {
            Verdict::Allowed => None,
            Verdict::Refused => {
                let mut resp = plain(StatusCode::UNAUTHORIZED, "Unauthorized\n");
                resp.headers_mut()
                    .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Basic"));
                Some(resp)
            }
            Verdict::Limited(wait) => Some(retry(
                StatusCode::TOO_MANY_REQUESTS,
                "Too many failed logins from this address\n",
                wait,
            )),
            Verdict::Busy => Some(retry(
                StatusCode::SERVICE_UNAVAILABLE,
                "Too many logins being checked; try again\n",
                std::time::Duration::from_secs(1),
            )),
        }
    }

    /// Adds the configured headers to a response.
    pub(crate) fn decorate<B>(&self, resp: &mut Response<B>) {
        for (name, value) in &self.headers {
            resp.headers_mut().insert(name.clone(), value.clone());
        }
    }
}

fn plain(status: StatusCode, body: &'static str) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp
}

/// A refusal with `Retry-After` in whole seconds (at least 1).
fn retry(
    status: StatusCode,
    body: &'static str,
    wait: std::time::Duration,
) -> Response<Full<Bytes>> {
    let mut resp = plain(status, body);
    let seconds = wait.as_secs_f64().ceil().max(1.0) as u64;
    if let Ok(value) = HeaderValue::from_str(&seconds.to_string()) {
        resp.headers_mut().insert(header::RETRY_AFTER, value);
    }
    resp
}
