//! The tests' one HTTP/1.1 server on loopback, for everything that sends HTTP (notifiers,
//! Alertmanager's webhook, the delivery stage against a flaky receiver, the LLM advisor,
//! `review` against an exporter): it records every request with the time it arrived, and
//! answers either from a script (status, headers, body, delay; then the last answer of the
//! script, 200 "ok" when the script is empty) or from a handler that picks each answer from
//! the request. An answer may also be raw steps (bytes and pauses) for a response that is
//! streamed slowly, cut off, or never sent.
//!
//! One thread accepts; each connection gets a thread, one request, and `Connection:
//! close`, which every client handles and which keeps the server simple.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// One answer.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
    /// Wait before answering (a slow or hanging receiver).
    pub delay: Duration,
    /// Written after `delay` instead of the response the fields above describe.
    pub raw: Option<Vec<Step>>,
}

/// One step of a raw answer.
#[derive(Debug, Clone)]
pub enum Step {
    /// Bytes written as they are (a status line, headers, part of a body).
    Write(Vec<u8>),
    /// A pause: a receiver that works slowly, or never answers.
    Sleep(Duration),
}

impl Answer {
    pub fn status(status: u16) -> Answer {
        Answer {
            status,
            headers: Vec::new(),
            body: String::new(),
            delay: Duration::ZERO,
            raw: None,
        }
    }

    /// An answer written step by step, exactly as given; the connection closes after the
    /// last step.
    pub fn raw(steps: Vec<Step>) -> Answer {
        Answer {
            raw: Some(steps),
            ..Answer::status(200)
        }
    }

    pub fn ok() -> Answer {
        Answer::status(200).body("ok")
    }

    /// A JSON body with its content type.
    pub fn json(status: u16, body: &str) -> Answer {
        Answer::status(status)
            .header("Content-Type", "application/json")
            .body(body)
    }

    pub fn header(mut self, name: &str, value: &str) -> Answer {
        self.headers.push((name.to_string(), value.to_string()));
        self
    }

    pub fn body(mut self, body: &str) -> Answer {
        self.body = body.to_string();
        self
    }

    pub fn delay(mut self, delay: Duration) -> Answer {
        self.delay = delay;
        self
    }
}

/// A request as received.
#[derive(Debug, Clone)]
pub struct Request {
    pub method: String,
    /// Path and query, as sent.
    pub target: String,
    /// Names lower-cased.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// When the whole request had arrived.
    pub at: Instant,
}

impl Request {
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn path(&self) -> &str {
        self.target.split('?').next().unwrap_or("")
    }

    /// A query parameter, percent-decoded.
    pub fn query(&self, name: &str) -> Option<String> {
        let query = self.target.split_once('?')?.1;
        query.split('&').find_map(|pair| {
            let (k, v) = pair.split_once('=')?;
            (k == name).then(|| percent_decode(v))
        })
    }

    /// A field of a form body (`application/x-www-form-urlencoded`), percent-decoded.
    pub fn form(&self, name: &str) -> Option<String> {
        let body = std::str::from_utf8(&self.body).ok()?;
        body.split('&').find_map(|pair| {
            let (k, v) = pair.split_once('=')?;
            (k == name).then(|| percent_decode(v))
        })
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body as JSON; panics with the body when it is not.
    pub fn json(&self) -> serde_json::Value {
        self.body_as()
    }

    /// The body as JSON of type `T` (a notification, a chat completion request); panics
    /// with the body when it is not one.
    pub fn body_as<T: serde::de::DeserializeOwned>(&self) -> T {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "request body is not a {} ({e}): {}",
                std::any::type_name::<T>(),
                self.text()
            )
        })
    }
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                match u8::from_str_radix(hex, 16) {
                    Ok(b) => {
                        out.push(b);
                        i += 3;
                    }
                    Err(_) => {
                        out.push(b'%');
                        i += 1;
                    }
                }
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Picks the answer to a request.
type Handler = dyn Fn(&Request) -> Answer + Send + Sync;

struct Shared {
    /// Answers each request when set; the script is not used then.
    handler: Option<Box<Handler>>,
    script: Mutex<VecDeque<Answer>>,
    last: Mutex<Answer>,
    requests: Mutex<Vec<Request>>,
    arrived: Condvar,
    stop: AtomicBool,
}

/// The server; stops accepting when dropped.
pub struct HttpServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

impl HttpServer {
    /// Starts on a free loopback port, answering `script` in order.
    pub fn start(script: Vec<Answer>) -> HttpServer {
        HttpServer::serving(None, script)
    }

    /// Starts on a free loopback port, answering each request with what `handler` picks
    /// for it (a receiver whose answer depends on the body, the time, or a count).
    pub fn answering(handler: impl Fn(&Request) -> Answer + Send + Sync + 'static) -> HttpServer {
        HttpServer::serving(Some(Box::new(handler)), Vec::new())
    }

    fn serving(handler: Option<Box<Handler>>, script: Vec<Answer>) -> HttpServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
        let addr = listener.local_addr().expect("local address");
        let shared = Arc::new(Shared {
            handler,
            last: Mutex::new(script.last().cloned().unwrap_or_else(Answer::ok)),
            script: Mutex::new(script.into()),
            requests: Mutex::new(Vec::new()),
            arrived: Condvar::new(),
            stop: AtomicBool::new(false),
        });
        let accept_shared = Arc::clone(&shared);
        let accept = std::thread::spawn(move || {
            for stream in listener.incoming() {
                if accept_shared.stop.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(stream) = stream else { continue };
                let shared = Arc::clone(&accept_shared);
                std::thread::spawn(move || serve(stream, &shared));
            }
        });
        HttpServer {
            addr,
            shared,
            accept: Some(accept),
        }
    }

    /// `http://127.0.0.1:PORT{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Appends answers to the script (of a server started with one).
    pub fn then(&self, answers: Vec<Answer>) {
        assert!(
            self.shared.handler.is_none(),
            "a server answering with a handler has no script"
        );
        let mut script = self.shared.script.lock().expect("script lock");
        if let Some(last) = answers.last() {
            *self.shared.last.lock().expect("last lock") = last.clone();
        }
        script.extend(answers);
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<Request> {
        self.shared.requests.lock().expect("requests lock").clone()
    }

    /// Waits until `count` requests have arrived; panics after `limit`.
    pub fn wait_for(&self, count: usize, limit: Duration) -> Vec<Request> {
        let deadline = Instant::now() + limit;
        let mut requests = self.shared.requests.lock().expect("requests lock");
        while requests.len() < count {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                panic!(
                    "{} request(s) within {limit:?}, expected {count}",
                    requests.len()
                );
            }
            requests = self
                .shared
                .arrived
                .wait_timeout(requests, left)
                .expect("requests lock")
                .0;
        }
        requests.clone()
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so it sees the flag.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(handle) = self.accept.take() {
            let _ = handle.join();
        }
    }
}

fn serve(stream: TcpStream, shared: &Shared) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let Ok(mut writer) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(stream);
    let Some(request) = read_request(&mut reader) else {
        return;
    };
    let answer = match &shared.handler {
        Some(handler) => handler(&request),
        None => {
            let mut script = shared.script.lock().expect("script lock");
            script
                .pop_front()
                .unwrap_or_else(|| shared.last.lock().expect("last lock").clone())
        }
    };
    {
        let mut requests = shared.requests.lock().expect("requests lock");
        requests.push(request);
        shared.arrived.notify_all();
    }
    if !answer.delay.is_zero() {
        std::thread::sleep(answer.delay);
    }
    if let Some(steps) = &answer.raw {
        for step in steps {
            match step {
                Step::Write(bytes) => {
                    if writer
                        .write_all(bytes)
                        .and_then(|()| writer.flush())
                        .is_err()
                    {
                        return;
                    }
                }
                Step::Sleep(pause) => std::thread::sleep(*pause),
            }
        }
        return;
    }
    let mut head = format!(
        "HTTP/1.1 {} {}\r\nContent-Length: {}\r\nConnection: close\r\n",
        answer.status,
        reason(answer.status),
        answer.body.len()
    );
    for (k, v) in &answer.headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    let _ = writer.write_all(head.as_bytes());
    let _ = writer.write_all(answer.body.as_bytes());
    let _ = writer.flush();
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        302 => "Found",
        400 => "Bad Request",
        404 => "Not Found",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Status",
    }
}

/// Reads one request: head, then a Content-Length or chunked body.
fn read_request(reader: &mut impl BufRead) -> Option<Request> {
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let mut parts = line.split_whitespace();
    let method = parts.next()?.to_string();
    let target = parts.next()?.to_string();
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).ok()?;
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        let (k, v) = line.split_once(':')?;
        headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
    }
    let header = |name: &str| {
        headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    };
    let mut body = Vec::new();
    if header("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        loop {
            let mut size = String::new();
            reader.read_line(&mut size).ok()?;
            let size = usize::from_str_radix(size.trim().split(';').next()?, 16).ok()?;
            let mut chunk = vec![0; size + 2]; // data and its CRLF
            reader.read_exact(&mut chunk).ok()?;
            if size == 0 {
                break;
            }
            body.extend_from_slice(&chunk[..size]);
        }
    } else if let Some(length) = header("content-length").and_then(|v| v.parse().ok()) {
        body = vec![0; length];
        reader.read_exact(&mut body).ok()?;
    }
    Some(Request {
        method,
        target,
        headers,
        body,
        at: Instant::now(),
    })
}
