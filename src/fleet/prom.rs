//! A client of the Prometheus HTTP query API (`/api/v1/query`, `/api/v1/query_range`), which
//! Thanos, Mimir and VictoriaMetrics serve too.
//!
//! Blocking on purpose: the fleet commands are one-shot. Queries that do not depend on each
//! other may run on threads of their own sharing one client, which lets at most
//! [`CONCURRENT`] be in flight: Prometheus evaluates each query on one core, so a report's
//! independent reads finish sooner side by side, and the bound keeps one report from
//! crowding out the store's other clients.
//! A 5xx or a connection failure is retried (the store may be restarting or overloaded); a
//! 4xx is not (the query or the credentials are wrong, and asking again changes nothing).
//! The endpoint's timeout is one deadline per query, its retries included, so a store that
//! never answers costs `--timeout`, not a multiple of it.
//! Answers are parsed as they arrive, values straight into numbers; the bytes of all the
//! answers in flight together are capped ([`ANSWER_BYTES_IN_FLIGHT`]), so a store sending
//! hundreds of megabytes fails the query that crossed the cap instead of the process.
//! Values that are not finite (`NaN`, `±Inf`: a division by zero in a query, a broken
//! exporter) are dropped where they are read, counted, and named in one warning per query:
//! no figure downstream has to guard against them.
//! Every error names the URL and the query; no error carries a credential.

use std::io::Read;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde::de::DeserializeOwned;

use crate::redact;

/// How the store is reached.
#[derive(Debug, Clone, Default)]
pub struct Endpoint {
    /// Base URL (`http://prometheus:9090`, or a Thanos/Mimir query frontend's prefix).
    pub base: String,
    pub auth: Auth,
    pub timeout: Duration,
}

/// Credentials, read from the environment by the command line (never from a flag, which
/// would show in `ps`).
#[derive(Clone, Default)]
pub enum Auth {
    #[default]
    None,
    Bearer(String),
    Basic {
        user: String,
        password: String,
    },
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Auth::None => "None",
            Auth::Bearer(_) => "Bearer(<redacted>)",
            Auth::Basic { .. } => "Basic(<redacted>)",
        })
    }
}

/// One series of an instant query's answer: its labels and value.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub labels: std::collections::BTreeMap<String, String>,
    pub value: f64,
}

impl Sample {
    /// A label's value; empty when the series does not have it.
    pub fn label(&self, name: &str) -> &str {
        self.labels.get(name).map_or("", String::as_str)
    }
}

/// One series of a range query's answer: its labels and (time, value) points.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub labels: std::collections::BTreeMap<String, String>,
    pub points: Vec<(DateTime<Utc>, f64)>,
}

/// The attempts a query gets when the store answers 5xx or cannot be reached.
const ATTEMPTS: u32 = 3;

/// Queries one client keeps in flight at most, however many threads share it.
pub const CONCURRENT: usize = 4;

/// Bytes of the answers in flight, all queries together, at most. The report's systemd
/// unit caps the process at 256 MB; parsed answers (16 bytes a point) take less than their
/// JSON (about 20 a point), so this leaves room for the report's own tables.
pub const ANSWER_BYTES_IN_FLIGHT: usize = 128 << 20;

/// A counting semaphore: the bound on queries in flight.
struct Permits {
    free: std::sync::Mutex<usize>,
    returned: std::sync::Condvar,
}

struct Permit<'a>(&'a Permits);

impl Permits {
    fn new(count: usize) -> Permits {
        Permits {
            free: std::sync::Mutex::new(count),
            returned: std::sync::Condvar::new(),
        }
    }

    fn take(&self) -> Permit<'_> {
        // A poisoned lock only means another query thread panicked; the count is still right.
        let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
        while *free == 0 {
            free = self.returned.wait(free).unwrap_or_else(|e| e.into_inner());
        }
        *free -= 1;
        Permit(self)
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        *self.0.free.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        self.0.returned.notify_one();
    }
}

/// The answer of a query run on a scoped thread (`std::thread::scope`); a panic there
/// becomes an error here.
pub fn joined<T>(
    handle: std::thread::ScopedJoinHandle<'_, anyhow::Result<T>>,
) -> anyhow::Result<T> {
    handle
        .join()
        .unwrap_or_else(|_| Err(anyhow::anyhow!("a query thread panicked")))
}

/// Shared by reference between threads: each query waits for one of [`CONCURRENT`]
/// permits, so callers may start every independent query at once.
pub struct Client {
    endpoint: Endpoint,
    agent: ureq::Agent,
    permits: Permits,
    /// Bytes read of the answers in flight.
    reading: AtomicUsize,
    answer_budget: usize,
}

impl Client {
    pub fn new(endpoint: Endpoint) -> Client {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(endpoint.timeout))
            .build()
            .into();
        let base = endpoint.base.trim().trim_end_matches('/').to_string();
        Client {
            endpoint: Endpoint { base, ..endpoint },
            agent,
            permits: Permits::new(CONCURRENT),
            reading: AtomicUsize::new(0),
            answer_budget: ANSWER_BYTES_IN_FLIGHT,
        }
    }

    /// The same client with another cap on the answer bytes in flight (tests).
    pub fn with_answer_budget(mut self, bytes: usize) -> Client {
        self.answer_budget = bytes;
        self
    }

    pub fn base(&self) -> &str {
        &self.endpoint.base
    }

    /// An instant query evaluated at `at`.
    pub fn instant(&self, query: &str, at: DateTime<Utc>) -> anyhow::Result<Vec<Sample>> {
        let time = at.timestamp().to_string();
        let data: Data = self.call("query", query, &[("time", time.as_str())])?;
        let mut dropped = Dropped::default();
        let samples = match data {
            Data::Vector(series) => series
                .into_iter()
                .filter_map(|s| {
                    let value = s.value.1.0;
                    dropped.keep(&s.metric, value).then_some(Sample {
                        labels: s.metric,
                        value,
                    })
                })
                .collect(),
            Data::Scalar((_, value)) => {
                let labels = Default::default();
                if dropped.keep(&labels, value.0) {
                    vec![Sample {
                        labels,
                        value: value.0,
                    }]
                } else {
                    Vec::new()
                }
            }
            Data::Matrix(_) => anyhow::bail!("{}: answered a range vector", self.context(query)),
        };
        dropped.warn(&self.context(query));
        Ok(samples)
    }

    /// A range query from `start` to `end` every `step`.
    pub fn range(
        &self,
        query: &str,
        start: DateTime<Utc>,
        end: DateTime<Utc>,
        step: Duration,
    ) -> anyhow::Result<Vec<Series>> {
        let (start, end, step) = (
            start.timestamp().to_string(),
            end.timestamp().to_string(),
            step.as_secs().max(1).to_string(),
        );
        let data: Data = self.call(
            "query_range",
            query,
            &[
                ("start", start.as_str()),
                ("end", end.as_str()),
                ("step", step.as_str()),
            ],
        )?;
        let Data::Matrix(series) = data else {
            anyhow::bail!("{}: did not answer a range vector", self.context(query));
        };
        let mut dropped = Dropped::default();
        let mut out = Vec::with_capacity(series.len());
        for s in series {
            let mut points = Vec::with_capacity(s.values.len());
            for (t, v) in s.values {
                if !dropped.keep(&s.metric, v.0) {
                    continue;
                }
                let at = DateTime::from_timestamp_millis((t * 1000.0).round() as i64)
                    .with_context(|| {
                        format!("{}: timestamp {t} out of range", self.context(query))
                    })?;
                points.push((at, v.0));
            }
            // A series whose every value was dropped says nothing.
            if !points.is_empty() {
                out.push(Series {
                    labels: s.metric,
                    points,
                });
            }
        }
        dropped.warn(&self.context(query));
        Ok(out)
    }

    /// The values `label` takes in series matching `matcher` that have samples between
    /// `start` and `end` (`/api/v1/label/NAME/values`): the store answers from its index,
    /// without reading samples. Coarse in time: a store lists what its blocks overlapping the
    /// range hold, so a name listed may still have no sample in the range.
    pub fn label_values(
        &self,
        label: &str,
        matcher: &str,
        start: DateTime<Utc>,
        end: DateTime<Utc>,
    ) -> anyhow::Result<Vec<String>> {
        let (start, end) = (start.timestamp().to_string(), end.timestamp().to_string());
        self.call(
            &format!("label/{label}/values"),
            matcher,
            &[("start", start.as_str()), ("end", end.as_str())],
        )
    }

    fn context(&self, query: &str) -> String {
        format!("{} query {query:?}", redact::url(&self.endpoint.base))
    }

    fn call<D: DeserializeOwned + Shape>(
        &self,
        api: &str,
        query: &str,
        params: &[(&str, &str)],
    ) -> anyhow::Result<D> {
        let url = format!("{}/api/v1/{api}", self.endpoint.base);
        let mut last = None;
        // Set when the first attempt starts (a query queued behind others for a permit
        // has not been asked yet); every retry and its pause come out of it.
        let mut deadline: Option<Instant> = None;
        let mut made = 0;
        for attempt in 0..ATTEMPTS {
            if let Some(deadline) = deadline {
                let pause = Duration::from_millis(500 << attempt);
                if deadline.saturating_duration_since(Instant::now()) <= pause {
                    break;
                }
                std::thread::sleep(pause);
            }
            // Held for the attempt only, not for the pause before a retry.
            let permit = self.permits.take();
            let began = Instant::now();
            let deadline = *deadline.get_or_insert(began + self.endpoint.timeout);
            let left = deadline.saturating_duration_since(began);
            if left.is_zero() {
                break;
            }
            made += 1;
            let outcome = self.once::<D>(api, &url, query, params, left);
            drop(permit);
            match outcome {
                Ok(data) => {
                    // Where a report's time goes (bench/report.sh prints the slowest).
                    tracing::debug!(
                        api,
                        query,
                        seconds = began.elapsed().as_secs_f64(),
                        series = data.series(),
                        points = data.points(),
                        "store answered"
                    );
                    return Ok(data);
                }
                Err(Failure::Final(error)) => return Err(error),
                Err(Failure::Retry(error)) => last = Some(error),
            }
        }
        let timeout = humantime::format_duration(self.endpoint.timeout);
        Err(last.unwrap_or_else(|| anyhow::anyhow!("{}: no attempt made", self.context(query))))
            .with_context(|| {
                format!("gave up after {made} attempt(s) within the query's timeout of {timeout}")
            })
    }

    fn once<D: DeserializeOwned>(
        &self,
        api: &str,
        url: &str,
        query: &str,
        params: &[(&str, &str)],
        left: Duration,
    ) -> Result<D, Failure> {
        let shown = self.context(query);
        // The query endpoints take a form (a long query fits no URL); the label-values
        // endpoint is served for GET only, its matcher in `match[]`. The attempt gets what
        // is left of the query's deadline, reading the answer included.
        let sent = if api.starts_with("label/") {
            self.authorize(self.agent.get(url))
                .config()
                .timeout_global(Some(left))
                .build()
                .query_pairs(params.iter().copied().chain([("match[]", query)]))
                .call()
        } else {
            let mut form: Vec<(&str, &str)> = vec![("query", query)];
            form.extend_from_slice(params);
            self.authorize(self.agent.post(url))
                .config()
                .timeout_global(Some(left))
                .build()
                .send_form(form)
        };
        let mut response = sent.map_err(|e| {
            Failure::Retry(anyhow::anyhow!(
                "{shown}: cannot reach the store: {}",
                redact::scrub(&e.to_string())
            ))
        })?;
        let status = response.status().as_u16();
        let mut reader = Budgeted {
            inner: response.body_mut().with_config().reader(),
            reading: &self.reading,
            budget: self.answer_budget,
            read: 0,
            start: Vec::new(),
            over: None,
        };
        // serde_json reads a byte at a time: the buffer is outside the count, so the
        // count moves per chunk.
        let parsed = serde_json::from_reader::<_, Answer<D>>(std::io::BufReader::with_capacity(
            64 << 10,
            &mut reader,
        ));
        let (over, start) = (reader.over, std::mem::take(&mut reader.start));
        drop(reader);
        let answer = match parsed {
            Ok(answer) => answer,
            Err(_) if over.is_some() => {
                let others = over.unwrap_or(0);
                let error = anyhow::anyhow!(
                    "{shown}: the answers in flight passed {} MB; this one alone {}; \
                     ask for a shorter period or fewer hosts",
                    self.answer_budget >> 20,
                    if others == 0 {
                        "is larger than that".to_string()
                    } else {
                        "crossed it beside other answers".to_string()
                    }
                );
                // Alone over the cap, it will be again; beside others, a later attempt may
                // find the room they leave.
                return Err(if others == 0 {
                    Failure::Final(error)
                } else {
                    Failure::Retry(error)
                });
            }
            Err(e) if e.is_io() => {
                return Err(Failure::Retry(anyhow::anyhow!(
                    "{shown}: reading the answer: {}",
                    redact::scrub(&e.to_string())
                )));
            }
            Err(_) => {
                let error = anyhow::anyhow!(
                    "{shown}: HTTP {status}, not a Prometheus API answer: {}",
                    excerpt(&String::from_utf8_lossy(&start))
                );
                return Err(match status {
                    401 | 403 => Failure::Final(anyhow::anyhow!(
                        "{shown}: HTTP {status}: the store refused the credentials (set GPU_SENTINEL_PROMETHEUS_TOKEN, or GPU_SENTINEL_PROMETHEUS_USER and GPU_SENTINEL_PROMETHEUS_PASSWORD)"
                    )),
                    500.. => Failure::Retry(error),
                    _ => Failure::Final(error),
                });
            }
        };
        if answer.status != "success" {
            let error = anyhow::anyhow!(
                "{shown}: HTTP {status}: {} {}",
                answer.error_type.unwrap_or_default(),
                answer.error.unwrap_or_default()
            );
            return Err(if status >= 500 {
                Failure::Retry(error)
            } else {
                Failure::Final(error)
            });
        }
        answer
            .data
            .ok_or_else(|| Failure::Final(anyhow::anyhow!("{shown}: an answer without data")))
    }
}

impl Client {
    fn authorize<B>(&self, request: ureq::RequestBuilder<B>) -> ureq::RequestBuilder<B> {
        match &self.endpoint.auth {
            Auth::None => request,
            Auth::Bearer(token) => request.header("Authorization", &format!("Bearer {token}")),
            Auth::Basic { user, password } => {
                use base64::Engine as _;
                let pair =
                    base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
                request.header("Authorization", &format!("Basic {pair}"))
            }
        }
    }
}

enum Failure {
    Retry(anyhow::Error),
    Final(anyhow::Error),
}

/// The first 200 characters of an answer, on one line.
fn excerpt(body: &str) -> String {
    let line: String = body.chars().take(200).collect();
    line.replace(['\n', '\r'], " ")
}

/// Reads an answer while counting its bytes against the client's cap on answers in
/// flight, and keeps its first bytes for an error message.
struct Budgeted<'a, R> {
    inner: R,
    reading: &'a AtomicUsize,
    budget: usize,
    /// Bytes this answer added to `reading` (given back on drop).
    read: usize,
    start: Vec<u8>,
    /// Set when the cap was crossed: the bytes the other answers held then.
    over: Option<usize>,
}

/// Bytes of an answer kept for the message when it is not a Prometheus API answer.
const EXCERPT_BYTES: usize = 800;

impl<R: Read> Read for Budgeted<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        let total = self.reading.fetch_add(n, Ordering::Relaxed) + n;
        self.read += n;
        if total > self.budget {
            self.over = Some(total - self.read);
            return Err(std::io::Error::other(
                "the answers in flight are over the cap",
            ));
        }
        if self.start.len() < EXCERPT_BYTES {
            let keep = (EXCERPT_BYTES - self.start.len()).min(n);
            self.start.extend_from_slice(&buf[..keep]);
        }
        Ok(n)
    }
}

impl<R> Drop for Budgeted<'_, R> {
    fn drop(&mut self) {
        self.reading.fetch_sub(self.read, Ordering::Relaxed);
    }
}

/// Values that are not finite numbers, dropped from one answer.
#[derive(Default)]
struct Dropped {
    count: usize,
    first: Option<String>,
}

impl Dropped {
    /// Whether `value` is kept; a dropped one is counted, the first with its series.
    fn keep(&mut self, labels: &std::collections::BTreeMap<String, String>, value: f64) -> bool {
        if value.is_finite() {
            return true;
        }
        self.count += 1;
        if self.first.is_none() {
            let pairs: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v:?}")).collect();
            self.first = Some(format!("{{{}}} ({value})", pairs.join(", ")));
        }
        false
    }

    fn warn(&self, context: &str) {
        if let Some(first) = &self.first {
            tracing::warn!(
                "{context}: dropped {} value(s) that are not finite numbers (NaN or ±Inf); \
                 the first in series {first}",
                self.count
            );
        }
    }
}

/// A sample value, parsed from the string Prometheus writes (`"1.5"`, `"NaN"`, `"+Inf"`)
/// while the answer is read: no string is kept per point.
struct Value(f64);

impl<'de> Deserialize<'de> for Value {
    fn deserialize<De: serde::Deserializer<'de>>(deserializer: De) -> Result<Value, De::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = Value;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a sample value as a string")
            }
            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Value, E> {
                parse_value(text).map(Value).map_err(E::custom)
            }
        }
        deserializer.deserialize_str(Visitor)
    }
}

/// Prometheus writes sample values as strings (`"1.5"`, `"NaN"`, `"+Inf"`).
fn parse_value(text: &str) -> anyhow::Result<f64> {
    match text {
        "NaN" => Ok(f64::NAN),
        "+Inf" | "Inf" => Ok(f64::INFINITY),
        "-Inf" => Ok(f64::NEG_INFINITY),
        _ => text
            .parse()
            .with_context(|| format!("{text:?} is not a sample value")),
    }
}

#[derive(Deserialize)]
struct Answer<D> {
    status: String,
    data: Option<D>,
    #[serde(rename = "errorType")]
    error_type: Option<String>,
    error: Option<String>,
}

#[derive(Deserialize)]
#[serde(tag = "resultType", content = "result", rename_all = "lowercase")]
enum Data {
    Vector(Vec<VectorSeries>),
    Matrix(Vec<MatrixSeries>),
    Scalar((f64, Value)),
}

/// How much an answer holds, for the debug log.
trait Shape {
    fn series(&self) -> usize;
    fn points(&self) -> usize;
}

impl Shape for Data {
    fn series(&self) -> usize {
        match self {
            Data::Vector(series) => series.len(),
            Data::Matrix(series) => series.len(),
            Data::Scalar(_) => 1,
        }
    }

    fn points(&self) -> usize {
        match self {
            Data::Matrix(series) => series.iter().map(|s| s.values.len()).sum(),
            _ => self.series(),
        }
    }
}

/// A label-values answer: one value per entry.
impl Shape for Vec<String> {
    fn series(&self) -> usize {
        self.len()
    }

    fn points(&self) -> usize {
        self.len()
    }
}

#[derive(Deserialize)]
struct VectorSeries {
    #[serde(default)]
    metric: std::collections::BTreeMap<String, String>,
    value: (f64, Value),
}

#[derive(Deserialize)]
struct MatrixSeries {
    #[serde(default)]
    metric: std::collections::BTreeMap<String, String>,
    values: Vec<(f64, Value)>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_of_each_kind_parse() {
        let vector: Answer<Data> = serde_json::from_str(
            r#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{"owner":"ml"},"value":[1700000000.5,"3.25"]}]}}"#,
        )
        .expect("vector");
        assert!(
            matches!(vector.data, Some(Data::Vector(ref v)) if v.len() == 1 && v[0].metric["owner"] == "ml")
        );
        let matrix: Answer<Data> = serde_json::from_str(
            r#"{"status":"success","data":{"resultType":"matrix","result":[{"metric":{},"values":[[1700000000,"1"],[1700003600,"NaN"]]}]}}"#,
        )
        .expect("matrix");
        assert!(matches!(matrix.data, Some(Data::Matrix(ref m)) if m[0].values.len() == 2));
        let error: Answer<Data> = serde_json::from_str(
            r#"{"status":"error","errorType":"bad_data","error":"parse error at char 4"}"#,
        )
        .expect("error");
        assert_eq!(error.error.as_deref(), Some("parse error at char 4"));
    }

    #[test]
    fn permits_bound_the_queries_in_flight() {
        use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
        let permits = Permits::new(CONCURRENT);
        let (running, peak) = (AtomicUsize::new(0), AtomicUsize::new(0));
        std::thread::scope(|scope| {
            for _ in 0..12 {
                scope.spawn(|| {
                    let _permit = permits.take();
                    peak.fetch_max(running.fetch_add(1, SeqCst) + 1, SeqCst);
                    std::thread::sleep(Duration::from_millis(30));
                    running.fetch_sub(1, SeqCst);
                });
            }
        });
        let peak = peak.into_inner();
        assert!((2..=CONCURRENT).contains(&peak), "{peak} in flight at once");
        assert_eq!(
            *permits.free.lock().expect("lock"),
            CONCURRENT,
            "all returned"
        );
    }

    #[test]
    fn values_parse_as_prometheus_writes_them() {
        assert_eq!(parse_value("1.5").ok(), Some(1.5));
        assert!(parse_value("NaN").is_ok_and(f64::is_nan));
        assert_eq!(parse_value("+Inf").ok(), Some(f64::INFINITY));
        assert!(parse_value("one").is_err());
    }

    #[test]
    fn credentials_never_show_in_debug() {
        let auth = Auth::Basic {
            user: "u".into(),
            password: "hunter2".into(),
        };
        assert!(!format!("{auth:?}").contains("hunter2"));
    }

    proptest::proptest! {
        #[test]
        fn any_answer_body_parses_or_fails_cleanly(body in ".{0,300}") {
            let _ = serde_json::from_str::<Answer<Data>>(&body);
            let _ = serde_json::from_str::<Answer<Vec<String>>>(&body);
            let _ = parse_value(&body);
        }
    }
}
