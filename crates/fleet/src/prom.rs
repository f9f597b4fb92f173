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
//! exporter), or so large that adding two overflows (past ±1e18, `answer::MAX_MAGNITUDE`),
//! are dropped where they are read, counted, and named in one warning per query: no figure
//! downstream has to guard against them.
//! A query the store refuses for its size (each store's words for it are in [`refusal`]) is
//! not retried as it is: its error carries a [`Refused`] naming the limit, and the caller
//! that planned it ([`super::plan`]) asks again in smaller pieces.
//! Every error names the URL and the query; no error carries a credential.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use chrono::{DateTime, Utc};
use serde::de::DeserializeOwned;

use crate::redact;
use answer::{Answer, Budgeted, Data, Dropped, Shape, excerpt};
pub use auth::Auth;
use permits::Permits;
pub use refusal::{Limit, Misunderstood, Refused, misunderstood, refusal};

mod answer;
mod auth;
mod permits;
mod refusal;
mod stream;
#[cfg(test)]
mod tests;

/// How the store is reached.
#[derive(Debug, Clone, Default)]
pub struct Endpoint {
    /// Base URL (`http://prometheus:9090`, or a Thanos/Mimir query frontend's prefix).
    pub base: String,
    pub auth: Auth,
    pub timeout: Duration,
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
pub(crate) const CONCURRENT: usize = 4;

/// Bytes of the answers in flight, all queries together, at most. The report's systemd
/// unit caps the process at 256 MB; parsed answers (16 bytes a point) take less than their
/// JSON (about 20 a point), so this leaves room for the report's own tables.
pub const ANSWER_BYTES_IN_FLIGHT: usize = 128 << 20;

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
    /// Requests sent, retries included.
    sent: AtomicUsize,
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
            sent: AtomicUsize::new(0),
        }
    }

    /// Requests sent to the store so far, retries included.
    pub fn sent(&self) -> usize {
        self.sent.load(Ordering::Relaxed)
    }

    /// The same client with another cap on the answer bytes in flight (`report
    /// --max-answer-mb`).
    pub fn with_answer_budget(mut self, bytes: usize) -> Client {
        self.answer_budget = bytes;
        self
    }

    /// Bytes of the answers in flight at most.
    pub(crate) fn answer_budget(&self) -> usize {
        self.answer_budget
    }

    pub fn base(&self) -> &str {
        &self.endpoint.base
    }

    /// An instant query evaluated at `at`.
    pub fn instant(&self, query: &str, at: DateTime<Utc>) -> anyhow::Result<Vec<Sample>> {
        let time = seconds(at);
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
        let mut series = Vec::new();
        self.range_each(query, start, end, step, &mut |s| series.push(s))?;
        Ok(series)
    }

    /// A range query whose series are handed to `each` as they are read, one at a time: the
    /// client never holds the whole answer. Values that are not finite are dropped (and
    /// named in a warning) as in [`Client::range`].
    pub(crate) fn range_each(
        &self,
        query: &str,
        start: DateTime<Utc>,
        end: DateTime<Utc>,
        step: Duration,
        each: &mut dyn FnMut(Series),
    ) -> anyhow::Result<()> {
        let (start, end, step) = (
            seconds(start),
            seconds(end),
            format!("{:.3}", step.as_secs_f64().max(0.001)),
        );
        let mut dropped = Dropped::default();
        let mut bad_time = None;
        let mut hand_on = |s: answer::MatrixSeries| {
            let mut points = Vec::with_capacity(s.values.len());
            for (t, v) in s.values {
                if !dropped.keep(&s.metric, v.0) {
                    continue;
                }
                match DateTime::from_timestamp_millis((t * 1000.0).round() as i64) {
                    Some(at) => points.push((at, v.0)),
                    None => bad_time = Some(t),
                }
            }
            if !points.is_empty() {
                each(Series {
                    labels: s.metric,
                    points,
                });
            }
        };
        self.call_with(
            "query_range",
            query,
            &[
                ("start", start.as_str()),
                ("end", end.as_str()),
                ("step", step.as_str()),
            ],
            &mut |reader| stream::matrix(reader, &mut hand_on),
        )?;
        if let Some(t) = bad_time {
            anyhow::bail!("{}: timestamp {t} out of range", self.context(query));
        }
        dropped.warn(&self.context(query));
        Ok(())
    }

    /// An instant query answering a range vector (`family[1h]`: the raw samples of each
    /// series in the hour before `at`, with their own timestamps).
    pub(crate) fn instant_matrix(
        &self,
        query: &str,
        at: DateTime<Utc>,
    ) -> anyhow::Result<Vec<Series>> {
        let time = seconds(at);
        let data: Data = self.call("query", query, &[("time", time.as_str())])?;
        match data {
            Data::Matrix(series) => self.matrix(query, series),
            // A selector without a range answers an instant vector: each series' last
            // sample, stamped with the evaluation time.
            Data::Vector(series) => self.matrix(
                query,
                series
                    .into_iter()
                    .map(|s| answer::MatrixSeries {
                        metric: s.metric,
                        values: vec![s.value],
                    })
                    .collect(),
            ),
            Data::Scalar(_) => anyhow::bail!("{}: answered a scalar", self.context(query)),
        }
    }

    /// The series of a matrix answer, values that are not finite dropped.
    fn matrix(
        &self,
        query: &str,
        series: Vec<answer::MatrixSeries>,
    ) -> anyhow::Result<Vec<Series>> {
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

    /// The label sets of the series matching `matcher` with samples between `start` and
    /// `end` (`/api/v1/series`): answered from the store's index, without reading samples.
    pub fn series(
        &self,
        matcher: &str,
        start: DateTime<Utc>,
        end: DateTime<Utc>,
    ) -> anyhow::Result<Vec<std::collections::BTreeMap<String, String>>> {
        let (start, end) = (start.timestamp().to_string(), end.timestamp().to_string());
        self.call(
            "series",
            matcher,
            &[("start", start.as_str()), ("end", end.as_str())],
        )
    }

    /// A flag of the store's command line (`/api/v1/status/flags`, which Prometheus and
    /// Thanos serve); `None` when the store does not say.
    pub fn flag(&self, name: &str) -> Option<String> {
        let flags: std::collections::BTreeMap<String, String> =
            self.call("status/flags", "", &[]).ok()?;
        flags.get(name).cloned()
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
        self.call_with(api, query, params, &mut |reader| {
            serde_json::from_reader(reader)
        })
    }

    /// [`Client::call`], the answer read by `parse` (which may hand series on as it reads
    /// them: an attempt that fails part-way and is retried hands some on twice).
    fn call_with<D: Shape>(
        &self,
        api: &str,
        query: &str,
        params: &[(&str, &str)],
        parse: &mut dyn FnMut(&mut dyn std::io::Read) -> serde_json::Result<Answer<D>>,
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
            self.sent.fetch_add(1, Ordering::Relaxed);
            let outcome = self.once::<D>(api, &url, query, params, left, parse);
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

    fn once<D>(
        &self,
        api: &str,
        url: &str,
        query: &str,
        params: &[(&str, &str)],
        left: Duration,
        parse: &mut dyn FnMut(&mut dyn std::io::Read) -> serde_json::Result<Answer<D>>,
    ) -> Result<D, Failure> {
        let shown = self.context(query);
        // The query endpoints take a form (a long query fits no URL), and so does the series
        // endpoint (its matcher in `match[]`); the label-values endpoint is served for GET
        // only. The attempt gets what is left of the query's deadline, reading the answer
        // included.
        let sent = if api == "status/flags" {
            self.authorize(self.agent.get(url))
                .config()
                .timeout_global(Some(left))
                .build()
                .call()
        } else if api.starts_with("label/") {
            self.authorize(self.agent.get(url))
                .config()
                .timeout_global(Some(left))
                .build()
                .query_pairs(params.iter().copied().chain([("match[]", query)]))
                .call()
        } else {
            let key = if api == "series" { "match[]" } else { "query" };
            let mut form: Vec<(&str, &str)> = vec![(key, query)];
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
        let parsed = parse(&mut std::io::BufReader::with_capacity(
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
                // find the room they leave. (The planner sizes pieces to the cap, so a
                // store sending more than planned is misbehaving, not to be asked again.)
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
                let body = excerpt(&String::from_utf8_lossy(&start));
                let error =
                    anyhow::anyhow!("{shown}: HTTP {status}, not a Prometheus API answer: {body}");
                // A query frontend may answer a refusal in plain text.
                if let Some(limit) = refusal::classify(&body).filter(|_| status >= 400) {
                    return Err(Failure::Final(anyhow::Error::new(Refused {
                        limit,
                        message: format!("{error}"),
                    })));
                }
                return Err(match status {
                    401 | 403 => Failure::Final(anyhow::anyhow!(
                        "{shown}: HTTP {status}: the store refused the credentials (set GPU_SENTINEL_PROMETHEUS_TOKEN, or GPU_SENTINEL_PROMETHEUS_USER and GPU_SENTINEL_PROMETHEUS_PASSWORD)"
                    )),
                    500.. => Failure::Retry(error),
                    _ => Failure::Final(anyhow::Error::new(Misunderstood(format!("{error}")))),
                });
            }
        };
        if answer.status != "success" {
            let said = answer.error.unwrap_or_default();
            let error = anyhow::anyhow!(
                "{shown}: HTTP {status}: {} {}",
                answer.error_type.unwrap_or_default(),
                redact::scrub(&said)
            );
            if let Some(limit) = refusal::classify(&said) {
                return Err(Failure::Final(anyhow::Error::new(Refused {
                    limit,
                    message: format!("{error}"),
                })));
            }
            return Err(if status >= 500 {
                Failure::Retry(error)
            } else {
                Failure::Final(anyhow::Error::new(Misunderstood(format!("{error}"))))
            });
        }
        answer
            .data
            .ok_or_else(|| Failure::Final(anyhow::anyhow!("{shown}: an answer without data")))
    }
}

impl Client {
    fn authorize<B>(&self, request: ureq::RequestBuilder<B>) -> ureq::RequestBuilder<B> {
        match self.endpoint.auth.header() {
            Some(value) => request.header("Authorization", &value),
            None => request,
        }
    }
}

/// A time as the query API takes it: seconds since the epoch, to the millisecond.
fn seconds(at: DateTime<Utc>) -> String {
    let millis = at.timestamp_millis();
    format!("{}.{:03}", millis.div_euclid(1000), millis.rem_euclid(1000))
}

enum Failure {
    Retry(anyhow::Error),
    Final(anyhow::Error),
}
