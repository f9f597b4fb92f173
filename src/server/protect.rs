//! What the web configuration asks of every request: the rate limit, basic
//! authentication, and the extra response headers.
//!
//! `/healthz` and `/readyz` are answered without credentials and outside the rate limit:
//! kubelet and load-balancer probes carry neither, and a probe refused with 401 or 429
//! would restart or drain a healthy agent. They reveal only whether the agent collects.

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{self, HeaderName, HeaderValue};
use hyper::{Request, Response, StatusCode};

use crate::webconfig::{BasicAuth, RateLimiter, WebConfig};

/// The paths answered to anyone.
pub const OPEN_PATHS: [&str; 2] = ["/healthz", "/readyz"];

/// The checks and headers of one web configuration (none without one).
#[derive(Debug, Default)]
pub struct Protection {
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

    /// None when the request may be answered; else the refusal to send.
    pub async fn refusal<B>(&self, req: &Request<B>) -> Option<Response<Full<Bytes>>> {
        if OPEN_PATHS.contains(&req.uri().path()) {
            return None;
        }
        if let Some(limiter) = &self.limiter {
            if !limiter.allow() {
                return Some(plain(StatusCode::TOO_MANY_REQUESTS, "Too Many Requests\n"));
            }
        }
        let auth = self.auth.as_ref()?;
        let given = req
            .headers()
            .get(header::AUTHORIZATION)
            .map(HeaderValue::as_bytes);
        if auth.allows(given).await {
            return None;
        }
        let mut resp = plain(StatusCode::UNAUTHORIZED, "Unauthorized\n");
        resp.headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Basic"));
        Some(resp)
    }

    /// Adds the configured headers to a response.
    pub fn decorate<B>(&self, resp: &mut Response<B>) {
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
