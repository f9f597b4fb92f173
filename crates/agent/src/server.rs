//! The HTTP server: `/` (the live board), `/metrics`, `/healthz`, `/readyz`, `/api/v1/*`.
//!
//! Handlers only copy bytes rendered by the collector ([`crate::api::Latest`]); none of
//! them touches NVML or computes anything proportional to the fleet. Before the first
//! collection `/metrics` and `/readyz` answer 503 — never an empty 200, which Prometheus
//! would record as a healthy target with no GPUs.
//!
//! With a web configuration ([`crate::webconfig`]) it speaks TLS (HTTP/2 by ALPN when
//! allowed) and every request but the probes passes [`Protection`] first. At most
//! `[server] max_connections` are held ([`connections`]); when full the oldest idle one
//! is closed first.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::alert::deliver::DeliveryHealth;
use crate::api::{Latest, Recommendations, to_json};
use crate::board::{BoardOptions, CONTENT_SECURITY_POLICY};
use crate::export::CONTENT_TYPE as METRICS_CONTENT_TYPE;
use crate::webconfig::WebConfig;

mod connections;
mod protect;

pub use connections::connection_cap;
pub(crate) use protect::Protection;

use connections::{AcceptErrors, Connections, Slot};

/// What the server needs to answer.
#[derive(Debug)]
pub struct ServerState {
    pub latest: Arc<Latest>,
    /// Shown on the page before the first collection, e.g. "simulator (8 GPUs, 1x speed)".
    pub source: String,
    pub version: &'static str,
    /// When the server started (the first collection may take a while).
    pub started: std::time::Instant,
    /// `/healthz` fails when nothing was published for this long.
    pub stale_after: Duration,
    /// The delivery workers: `/healthz` fails while one is down. None without receivers.
    pub delivery: Option<DeliveryHealth>,
}

/// How the server speaks: TLS or not, HTTP/2 or not, and what each request must pass.
#[derive(Default)]
pub struct Transport {
    /// None: plain HTTP/1.1.
    pub tls: Option<tokio_rustls::TlsAcceptor>,
    /// HTTP/2 (over TLS, by ALPN) as well as HTTP/1.1.
    pub http2: bool,
    pub(crate) protection: Protection,
}

impl Transport {
    /// What a web configuration asks for; plain and open without one.
    pub fn new(web: Option<&WebConfig>) -> Transport {
        Transport {
            tls: web
                .and_then(|w| w.tls.clone())
                .map(tokio_rustls::TlsAcceptor::from),
            http2: web.is_some_and(|w| w.http2 && w.tls.is_some()),
            protection: Protection::new(web),
        }
    }

    /// Starts serving the web configuration's certificate: records its expiry for
    /// `gpu_sentinel_tls_cert_expiry_timestamp_seconds` and warns when it is near.
    pub fn announce(web: Option<&WebConfig>) {
        if let Some(leaf) = web.and_then(|w| w.leaf.as_ref()) {
            leaf.serve();
        }
    }

    /// `https` with TLS, else `http`.
    pub fn scheme(&self) -> &'static str {
        if self.tls.is_some() { "https" } else { "http" }
    }
}

/// Slow or stuck clients must not hold connections open forever.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long an evicted connection may take to finish a request it started meanwhile.
const EVICTION_GRACE: Duration = Duration::from_secs(1);

/// Serves until `shutdown` changes, holding at most `max_connections` connections.
pub async fn serve(
    listener: TcpListener,
    state: Arc<ServerState>,
    transport: Transport,
    max_connections: usize,
    mut shutdown: watch::Receiver<bool>,
) -> std::io::Result<()> {
    let mut http = auto::Builder::new(TokioExecutor::new());
    http.http1()
        .timer(TokioTimer::new())
        .header_read_timeout(HANDSHAKE_TIMEOUT);
    http.http2().timer(TokioTimer::new());
    if !transport.http2 {
        http = http.http1_only();
    }
    let http = Arc::new(http);
    let tls = transport.tls.clone();
    let protection = Arc::new(transport.protection);
    let connections = Connections::new(max_connections);
    let mut accept_errors = AcceptErrors::default();
    loop {
        // Full of connections that are all answering: new ones wait in the backlog.
        tokio::select! {
            _ = connections.room() => {}
            _ = shutdown.changed() => return Ok(()),
        }
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(conn) => {
                    accept_errors.accepted();
                    conn
                }
                Err(e) => {
                    // Out of descriptors, a closed idle connection gives one back; either
                    // way the pause keeps this from spinning on a failing accept.
                    let freed = connections.evict_idle();
                    let pause = accept_errors.failed(&e, freed);
                    if !pause.is_zero() {
                        tokio::time::sleep(pause).await;
                    }
                    continue;
                }
            },
            _ = shutdown.changed() => return Ok(()),
        };
        let _ = stream.set_nodelay(true);
        let ticket = connections.admit();
        let connection = Connection {
            state: state.clone(),
            protection: protection.clone(),
            http: http.clone(),
            shutdown: shutdown.clone(),
            client: peer.ip(),
            slot: ticket.slot(),
        };
        let tls = tls.clone();
        tokio::spawn(async move {
            let evicted = ticket.evicted();
            tokio::pin!(evicted);
            match tls {
                None => connection.serve(stream, evicted).await,
                Some(acceptor) => {
                    let handshake =
                        tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream));
                    tokio::select! {
                        done = handshake => match done {
                            Ok(Ok(stream)) => connection.serve(stream, evicted).await,
                            // Scanners and clients without the right certificate end here.
                            Ok(Err(e)) => tracing::debug!("TLS handshake failed: {e}"),
                            Err(_) => tracing::debug!("TLS handshake timed out"),
                        },
                        // No request yet: nothing is lost by closing now.
                        _ = evicted.as_mut() => {}
                    }
                }
            }
            // The ticket, moved in here, leaves the registry when this task ends.
        });
    }
}

/// One accepted connection and what answering it needs.
struct Connection {
    state: Arc<ServerState>,
    protection: Arc<Protection>,
    http: Arc<auto::Builder<TokioExecutor>>,
    shutdown: watch::Receiver<bool>,
    /// The peer's address: the rate limits are per client.
    client: std::net::IpAddr,
    /// Marked busy while a request is answered, so eviction picks idle connections.
    slot: Arc<Slot>,
}

impl Connection {
    async fn serve<I>(
        mut self,
        io: I,
        evicted: std::pin::Pin<&mut impl std::future::Future<Output = ()>>,
    ) where
        I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let (state, protection, slot, client) = (
            self.state.clone(),
            self.protection.clone(),
            self.slot.clone(),
            self.client,
        );
        let service = service_fn(move |req: Request<Incoming>| {
            let state = state.clone();
            let protection = protection.clone();
            let busy = slot.request();
            async move {
                let mut resp = match protection.refusal(&req, client).await {
                    Some(refused) => refused,
                    None => route(&state, &req),
                };
                protection.decorate(&mut resp);
                drop(busy);
                Ok::<_, Infallible>(without_body_for_head(&req, resp))
            }
        });
        let conn = self.http.serve_connection(TokioIo::new(io), service);
        tokio::pin!(conn);
        tokio::select! {
            result = conn.as_mut() => {
                if let Err(e) = result {
                    tracing::debug!("connection ended: {e}");
                }
            }
            _ = evicted => {
                // Chosen while idle; a request that arrived since may finish.
                conn.as_mut().graceful_shutdown();
                let _ = tokio::time::timeout(EVICTION_GRACE, conn.as_mut()).await;
            }
            _ = self.shutdown.changed() => conn.as_mut().graceful_shutdown(),
        }
    }
}

/// A HEAD answer keeps the GET's headers but carries no body: HTTP/1.1 drops one itself,
/// but hyper's HTTP/2 sends it as DATA on a stream the HEAD's END_STREAM rules out, which
/// clients read as a protocol error — refusals (401, 429) were such answers.
fn without_body_for_head(
    req: &Request<Incoming>,
    resp: Response<Full<Bytes>>,
) -> Response<Full<Bytes>> {
    if req.method() != Method::HEAD {
        return resp;
    }
    let (parts, _) = resp.into_parts();
    Response::from_parts(parts, Full::new(Bytes::new()))
}

/// Binds the listen address with a message that names it when that fails.
pub async fn bind(addr: SocketAddr) -> anyhow::Result<TcpListener> {
    TcpListener::bind(addr).await.map_err(|e| {
        anyhow::anyhow!(
            "cannot listen on {addr}: {e} (choose another with --listen or [export] listen)"
        )
    })
}

fn route(state: &ServerState, req: &Request<Incoming>) -> Response<Full<Bytes>> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        let mut resp = text(StatusCode::METHOD_NOT_ALLOWED, "only GET and HEAD\n");
        resp.headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
        return resp;
    }
    let latest = state.latest.get();
    match req.uri().path() {
        "/" => board(state, latest.as_ref().map(|p| p.board.clone())),
        "/metrics" => match latest {
            Some(p) if accepts_gzip(req) && !p.metrics.gzip.is_empty() => {
                let mut resp = bytes(StatusCode::OK, METRICS_CONTENT_TYPE, p.metrics.gzip.clone());
                resp.headers_mut()
                    .insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
                resp.headers_mut()
                    .insert(header::VARY, HeaderValue::from_static("Accept-Encoding"));
                resp
            }
            Some(p) => {
                let mut resp = bytes(StatusCode::OK, METRICS_CONTENT_TYPE, p.metrics.text.clone());
                resp.headers_mut()
                    .insert(header::VARY, HeaderValue::from_static("Accept-Encoding"));
                resp
            }
            None => not_ready(),
        },
        "/healthz" => healthz(state, latest.as_ref().map(|p| p.published)),
        "/readyz" => match latest {
            Some(_) => text(StatusCode::OK, "ready\n"),
            None => not_ready(),
        },
        "/api/v1/gpus" => match latest {
            Some(p) => bytes(StatusCode::OK, "application/json", p.gpus_json.clone()),
            None => not_ready(),
        },
        "/api/v1/alerts" => match latest {
            Some(p) => bytes(StatusCode::OK, "application/json", p.alerts_json.clone()),
            None => not_ready(),
        },
        "/api/v1/health" => match latest {
            Some(p) => bytes(StatusCode::OK, "application/json", p.health_json.clone()),
            None => not_ready(),
        },
        "/api/v1/recommendations" => match (latest, job_query(req.uri().query())) {
            (_, Err(message)) => text(StatusCode::BAD_REQUEST, &message),
            (None, _) => not_ready(),
            (Some(p), Ok(None)) => bytes(
                StatusCode::OK,
                "application/json",
                p.recommendations_json.clone(),
            ),
            // Fitting a job reads only the published placement: cheap, no driver call.
            (Some(p), Ok(Some(job))) => bytes(
                StatusCode::OK,
                "application/json",
                to_json(&Recommendations::new(&p.findings, Some(job))),
            ),
        },
        _ => text(StatusCode::NOT_FOUND, "not found; see /\n"),
    }
}

/// Liveness: a collector that died or hangs in a driver call publishes nothing new; past
/// `stale_after` the agent says so, and an orchestrator may restart it. A receiver whose
/// delivery worker is down (panicked, waiting to be restarted) fails it too, named in the
/// body, until the worker runs again.
fn healthz(state: &ServerState, published: Option<std::time::Instant>) -> Response<Full<Bytes>> {
    let (status, body) = health(state, published);
    text(status, &body)
}

/// `/healthz`'s status and body.
fn health(state: &ServerState, published: Option<std::time::Instant>) -> (StatusCode, String) {
    let age = published.map_or(state.started.elapsed(), |at| at.elapsed());
    let stale = age > state.stale_after;
    let what = if published.is_some() {
        "last collection"
    } else {
        "started, no collection yet,"
    };
    let down = state
        .delivery
        .as_ref()
        .map(DeliveryHealth::down)
        .unwrap_or_default();
    let word = match (stale, down.is_empty()) {
        (true, _) => "stale",
        (false, false) => "down",
        (false, true) => "ok",
    };
    let mut body = format!("{word}: {what} {:.1}s ago\n", age.as_secs_f64());
    for (receiver, why) in &down {
        body.push_str(&format!(
            "delivery worker of receiver {receiver:?} is down: {why}\n"
        ));
    }
    let status = if stale || !down.is_empty() {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::OK
    };
    (status, body)
}

/// The job of `?gpus=N&memory_gib=M[&exclusive=true]`, None without `gpus`.
fn job_query(query: Option<&str>) -> Result<Option<(usize, u64, bool)>, String> {
    let Some(query) = query else {
        return Ok(None);
    };
    let (mut gpus, mut memory_gib, mut exclusive) = (None, 0.0_f64, false);
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        match key {
            "gpus" => {
                gpus = Some(
                    value
                        .parse::<usize>()
                        .ok()
                        .filter(|n| *n > 0)
                        .ok_or_else(|| {
                            format!("gpus={value:?}: expected a whole number above 0\n")
                        })?,
                )
            }
            "memory_gib" => {
                memory_gib = value
                    .parse::<f64>()
                    .ok()
                    .filter(|m| m.is_finite() && *m >= 0.0)
                    .ok_or_else(|| format!("memory_gib={value:?}: expected a number of GiB\n"))?
            }
            "exclusive" => {
                exclusive = match value {
                    "true" | "1" | "" => true,
                    "false" | "0" => false,
                    _ => return Err(format!("exclusive={value:?}: expected true or false\n")),
                }
            }
            _ => {
                return Err(format!(
                    "unknown parameter {key:?}; use gpus, memory_gib, exclusive\n"
                ));
            }
        }
    }
    match gpus {
        Some(n) => Ok(Some((
            n,
            (memory_gib * (1u64 << 30) as f64) as u64,
            exclusive,
        ))),
        None if memory_gib > 0.0 || exclusive => Err("gpus=N is needed to fit a job\n".into()),
        None => Ok(None),
    }
}

fn not_ready() -> Response<Full<Bytes>> {
    let mut resp = text(
        StatusCode::SERVICE_UNAVAILABLE,
        "no collection has completed yet\n",
    );
    resp.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    resp
}

/// True when the client accepts gzip (`Accept-Encoding: gzip`, not `gzip;q=0`).
fn accepts_gzip(req: &Request<Incoming>) -> bool {
    req.headers()
        .get_all(header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|coding| {
            let mut parts = coding.split(';').map(str::trim);
            let name = parts.next().unwrap_or("");
            let refused = parts.any(|p| {
                p.strip_prefix("q=")
                    .and_then(|q| q.parse::<f32>().ok())
                    .is_some_and(|q| q <= 0.0)
            });
            (name.eq_ignore_ascii_case("gzip") || name == "*") && !refused
        })
}

/// The board's Content-Security-Policy as a header value, made once (it is plain ASCII).
static BOARD_POLICY: std::sync::LazyLock<Option<HeaderValue>> =
    std::sync::LazyLock::new(|| HeaderValue::from_str(&CONTENT_SECURITY_POLICY).ok());

/// The board of the last collection; before the first, a page that says so and reloads
/// itself (503, like `/metrics`). Either way the page may load nothing from elsewhere.
fn board(state: &ServerState, page: Option<Bytes>) -> Response<Full<Bytes>> {
    let mut resp = match page {
        Some(page) => bytes(StatusCode::OK, "text/html; charset=utf-8", page),
        None => {
            let options = BoardOptions {
                source: state.source.clone(),
                version: state.version.to_string(),
                ..BoardOptions::default()
            };
            let mut resp = bytes(
                StatusCode::SERVICE_UNAVAILABLE,
                "text/html; charset=utf-8",
                crate::board::waiting_page(&options),
            );
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            resp
        }
    };
    if let Some(policy) = BOARD_POLICY.as_ref() {
        resp.headers_mut()
            .insert(header::CONTENT_SECURITY_POLICY, policy.clone());
    }
    resp.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp.headers_mut().insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    resp
}

fn text(status: StatusCode, body: &str) -> Response<Full<Bytes>> {
    bytes(
        status,
        "text/plain; charset=utf-8",
        Bytes::from(body.to_string()),
    )
}

fn bytes(status: StatusCode, content_type: &'static str, body: Bytes) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(body));
    *resp.status_mut() = status;
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    resp
}

#[cfg(test)]
mod query_props;

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;
    use crate::alert::deliver::supervise::{Liveness, Status};

    fn state(delivery: Option<DeliveryHealth>) -> ServerState {
        ServerState {
            latest: Arc::new(Latest::default()),
            source: "test".into(),
            version: "0",
            started: Instant::now(),
            stale_after: Duration::from_secs(10),
            delivery,
        }
    }

    #[test]
    fn a_delivery_worker_down_fails_healthz_naming_its_receiver_until_it_runs_again() {
        let liveness = Arc::new(Liveness::default());
        liveness.register("ops");
        liveness.register("chat");
        let state = state(Some(DeliveryHealth::from(Arc::clone(&liveness))));
        assert_eq!(health(&state, Some(Instant::now())).0, StatusCode::OK);

        liveness.set(
            "chat",
            Status::Restarting {
                reason: "panicked: overflow".into(),
            },
        );
        let (status, body) = health(&state, Some(Instant::now()));
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(body.starts_with("down: "), "{body}");
        assert!(
            body.contains("receiver \"chat\" is down: panicked: overflow; restarting"),
            "{body}"
        );
        assert!(!body.contains("\"ops\""), "{body}");

        liveness.set("chat", Status::Running);
        assert_eq!(health(&state, Some(Instant::now())).0, StatusCode::OK);
    }

    #[test]
    fn the_board_says_it_waits_before_the_first_collection_and_keeps_its_policy() {
        let state = state(None);
        let policy = |resp: &Response<Full<Bytes>>| {
            resp.headers()
                .get(header::CONTENT_SECURITY_POLICY)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        let waiting = board(&state, None);
        assert_eq!(waiting.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(waiting.headers().contains_key(header::RETRY_AFTER));
        assert_eq!(
            policy(&waiting).as_deref(),
            Some(CONTENT_SECURITY_POLICY.as_str())
        );

        let page = Bytes::from_static(b"<!doctype html><main></main>");
        let served = board(&state, Some(page.clone()));
        assert_eq!(served.status(), StatusCode::OK);
        assert_eq!(
            policy(&served).as_deref(),
            Some(CONTENT_SECURITY_POLICY.as_str())
        );
        assert_eq!(
            served.headers().get(header::CACHE_CONTROL),
            Some(&HeaderValue::from_static("no-store"))
        );
    }

    #[test]
    fn without_receivers_only_collection_counts() {
        let (status, body) = health(&state(None), Some(Instant::now()));
        assert_eq!(status, StatusCode::OK);
        assert!(body.starts_with("ok: last collection"), "{body}");
    }
}
