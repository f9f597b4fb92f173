//! Shared by the outbox, delivery and advice tests: a real loopback HTTP server with scripted
//! answers, a test [`Notifier`] that POSTs notifications as JSON with ureq, sample
//! notifications and temporary directories.
#![allow(dead_code)] // each test binary uses a different part of this

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::Utc;
use gpu_sentinel::alert::notify::http::Endpoint;
use gpu_sentinel::alert::notify::{Notifier, NotifyError};
use gpu_sentinel::alert::{Alert, AlertState, LabelSet, Notification};

/// A fresh, empty directory under the system temp dir, unique to this test and process.
pub fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "gs-{name}-{}-{}",
        std::process::id(),
        Utc::now().timestamp_nanos_opt().unwrap_or(0)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// A notification to `receiver` for group `group`, with one alert whose `gpu` label is the
/// group name.
pub fn notification(receiver: &str, group: &str, state: AlertState) -> Notification {
    let labels: LabelSet = [
        ("alertname", "GpuLost"),
        ("severity", "critical"),
        ("hostname", "node-1"),
        ("gpu", group),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let now = Utc::now();
    Notification {
        receiver: receiver.into(),
        group_key: group.into(),
        group_labels: [("gpu".to_string(), group.to_string())].into(),
        alerts: vec![Alert {
            labels,
            annotations: [("summary".to_string(), format!("GPU {group} lost"))].into(),
            state,
            active_at: now,
            starts_at: Some(now),
            ends_at: (state == AlertState::Resolved).then_some(now),
        }],
        created_at: now,
        external_url: "http://node-1:10400/api/v1/alerts".into(),
    }
}

/// One request the server received.
#[derive(Debug, Clone)]
pub struct Request {
    pub method: String,
    pub path: String,
    pub headers: BTreeMap<String, String>,
    pub body: Vec<u8>,
    pub at: Instant,
}

impl Request {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .get(&name.to_ascii_lowercase())
            .map(String::as_str)
    }

    /// The body as a notification (what [`HttpNotifier`] sends).
    pub fn notification(&self) -> Notification {
        serde_json::from_slice(&self.body).expect("the body is a notification")
    }
}

/// What the server does to answer: write bytes, or pause.
pub enum Step {
    Write(Vec<u8>),
    Sleep(Duration),
}

/// A complete HTTP/1.1 response that closes the connection.
pub fn response(status: u16, headers: &[(&str, &str)], body: &str) -> Vec<Step> {
    let mut head = format!(
        "HTTP/1.1 {status} X\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    head.push_str(body);
    vec![Step::Write(head.into_bytes())]
}

type Handler = dyn Fn(&Request) -> Vec<Step> + Send + Sync;

/// A loopback HTTP server answering each request with its handler's steps, on its own
/// thread per connection (a handler that sleeps holds only its own connection).
pub struct Server {
    pub url: String,
    requests: Arc<Mutex<Vec<Request>>>,
}

impl Server {
    pub fn start(handler: impl Fn(&Request) -> Vec<Step> + Send + Sync + 'static) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        let url = format!("http://{}", listener.local_addr().expect("local addr"));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let handler: Arc<Handler> = Arc::new(handler);
        let seen = Arc::clone(&requests);
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let handler = Arc::clone(&handler);
                let seen = Arc::clone(&seen);
                std::thread::spawn(move || serve(stream, &*handler, &seen));
            }
        });
        Server { url, requests }
    }

    /// Every request received so far, in arrival order.
    pub fn requests(&self) -> Vec<Request> {
        self.requests.lock().expect("requests").clone()
    }
}

fn serve(stream: TcpStream, handler: &Handler, seen: &Mutex<Vec<Request>>) {
    let Ok(read_half) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(read_half);
    let mut line = String::new();
    if reader.read_line(&mut line).is_err() || line.is_empty() {
        return;
    }
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or_default().to_string();
    let path = parts.next().unwrap_or_default().to_string();
    let mut headers = BTreeMap::new();
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).is_err() || h.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
    }
    let len: usize = headers
        .get("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; len];
    if reader.read_exact(&mut body).is_err() {
        return;
    }
    let request = Request {
        method,
        path,
        headers,
        body,
        at: Instant::now(),
    };
    seen.lock().expect("requests").push(request.clone());
    let mut stream = stream;
    for step in handler(&request) {
        match step {
            Step::Write(bytes) => {
                if stream
                    .write_all(&bytes)
                    .and_then(|_| stream.flush())
                    .is_err()
                {
                    return;
                }
            }
            Step::Sleep(d) => std::thread::sleep(d),
        }
    }
}

/// A test receiver integration: POSTs the notification itself as JSON through the
/// notifiers' own HTTP endpoint, so the delivery tests run on the real outcome
/// classification (2xx ok; 5xx, 429 and transport errors retry, honouring `Retry-After`;
/// other 4xx drop).
pub struct HttpNotifier(Endpoint);

impl HttpNotifier {
    pub fn new(url: &str, timeout: Duration) -> HttpNotifier {
        HttpNotifier(Endpoint::new(url, timeout).expect("a valid test URL"))
    }
}

impl Notifier for HttpNotifier {
    fn send(&self, notification: &Notification) -> Result<(), NotifyError> {
        let body = serde_json::to_vec(notification).map_err(|e| NotifyError::Drop {
            reason: e.to_string(),
        })?;
        self.0.post_json(None, &body, None)
    }
}

/// Polls `done` every 20 ms until it holds or `limit` passes; returns whether it held.
pub fn wait_until(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    done()
}
