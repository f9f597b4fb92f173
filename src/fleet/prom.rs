//! A client of the Prometheus HTTP query API (`/api/v1/query`, `/api/v1/query_range`), which
//! Thanos, Mimir and VictoriaMetrics serve too.
//!
//! Blocking on purpose: the fleet commands are one-shot and run their queries in sequence.
//! A 5xx or a connection failure is retried (the store may be restarting or overloaded); a
//! 4xx is not (the query or the credentials are wrong, and asking again changes nothing).
//! Every error names the URL and the query; no error carries a credential.

use std::time::Duration;

use anyhow::Context;
use chrono::{DateTime, Utc};
use serde::Deserialize;

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

pub struct Client {
    endpoint: Endpoint,
    agent: ureq::Agent,
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
        }
    }

    pub fn base(&self) -> &str {
        &self.endpoint.base
    }

    /// An instant query evaluated at `at`.
    pub fn instant(&self, query: &str, at: DateTime<Utc>) -> anyhow::Result<Vec<Sample>> {
        let time = at.timestamp().to_string();
        let data = self.call("query", query, &[("time", time.as_str())])?;
        match data {
            Data::Vector(series) => series
                .into_iter()
                .map(|s| {
                    Ok(Sample {
                        labels: s.metric,
                        value: parse_value(&s.value.1)?,
                    })
                })
                .collect::<anyhow::Result<Vec<_>>>()
                .with_context(|| self.context(query)),
            Data::Scalar((_, value)) => Ok(vec![Sample {
                labels: Default::default(),
                value: parse_value(&value).with_context(|| self.context(query))?,
            }]),
            Data::Matrix(_) => anyhow::bail!("{}: answered a range vector", self.context(query)),
        }
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
        let data = self.call(
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
        series
            .into_iter()
            .map(|s| {
                let points = s
                    .values
                    .into_iter()
                    .map(|(t, v)| {
                        let at = DateTime::from_timestamp_millis((t * 1000.0).round() as i64)
                            .context("a timestamp out of range")?;
                        Ok((at, parse_value(&v)?))
                    })
                    .collect::<anyhow::Result<Vec<_>>>()?;
                Ok(Series {
                    labels: s.metric,
                    points,
                })
            })
            .collect::<anyhow::Result<Vec<_>>>()
            .with_context(|| self.context(query))
    }

    fn context(&self, query: &str) -> String {
        format!("{} query {query:?}", redact::url(&self.endpoint.base))
    }

    fn call(&self, api: &str, query: &str, params: &[(&str, &str)]) -> anyhow::Result<Data> {
        let url = format!("{}/api/v1/{api}", self.endpoint.base);
        let mut last = None;
        for attempt in 0..ATTEMPTS {
            if attempt > 0 {
                std::thread::sleep(Duration::from_millis(500 << attempt));
            }
            let began = std::time::Instant::now();
            match self.once(&url, query, params) {
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
        Err(last.unwrap_or_else(|| anyhow::anyhow!("no attempt made")))
            .with_context(|| format!("gave up after {ATTEMPTS} attempts"))
    }

    fn once(&self, url: &str, query: &str, params: &[(&str, &str)]) -> Result<Data, Failure> {
        let shown = self.context(query);
        let mut request = self.agent.post(url);
        match &self.endpoint.auth {
            Auth::None => {}
            Auth::Bearer(token) => {
                request = request.header("Authorization", &format!("Bearer {token}"));
            }
            Auth::Basic { user, password } => {
                use base64::Engine as _;
                let pair =
                    base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
                request = request.header("Authorization", &format!("Basic {pair}"));
            }
        }
        let mut form: Vec<(&str, &str)> = vec![("query", query)];
        form.extend_from_slice(params);
        let mut response = request.send_form(form).map_err(|e| {
            Failure::Retry(anyhow::anyhow!(
                "{shown}: cannot reach the store: {}",
                redact::scrub(&e.to_string())
            ))
        })?;
        let status = response.status().as_u16();
        let body = response
            .body_mut()
            .with_config()
            .limit(256 << 20)
            .read_to_string()
            .map_err(|e| Failure::Retry(anyhow::anyhow!("{shown}: reading the answer: {e}")))?;
        let answer: Answer = match serde_json::from_str(&body) {
            Ok(answer) => answer,
            Err(_) => {
                let error = anyhow::anyhow!(
                    "{shown}: HTTP {status}, not a Prometheus API answer: {}",
                    excerpt(&body)
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

enum Failure {
    Retry(anyhow::Error),
    Final(anyhow::Error),
}

/// The first 200 characters of an answer, on one line.
fn excerpt(body: &str) -> String {
    let line: String = body.chars().take(200).collect();
    line.replace(['\n', '\r'], " ")
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
struct Answer {
    status: String,
    data: Option<Data>,
    #[serde(rename = "errorType")]
    error_type: Option<String>,
    error: Option<String>,
}

#[derive(Deserialize)]
#[serde(tag = "resultType", content = "result", rename_all = "lowercase")]
enum Data {
    Vector(Vec<VectorSeries>),
    Matrix(Vec<MatrixSeries>),
    Scalar((f64, String)),
}

impl Data {
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

#[derive(Deserialize)]
struct VectorSeries {
    #[serde(default)]
    metric: std::collections::BTreeMap<String, String>,
    value: (f64, String),
}

#[derive(Deserialize)]
struct MatrixSeries {
    #[serde(default)]
    metric: std::collections::BTreeMap<String, String>,
    values: Vec<(f64, String)>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_of_each_kind_parse() {
        let vector: Answer = serde_json::from_str(
            r#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{"owner":"ml"},"value":[1700000000.5,"3.25"]}]}}"#,
        )
        .expect("vector");
        assert!(
            matches!(vector.data, Some(Data::Vector(ref v)) if v.len() == 1 && v[0].metric["owner"] == "ml")
        );
        let matrix: Answer = serde_json::from_str(
            r#"{"status":"success","data":{"resultType":"matrix","result":[{"metric":{},"values":[[1700000000,"1"],[1700003600,"NaN"]]}]}}"#,
        )
        .expect("matrix");
        assert!(matches!(matrix.data, Some(Data::Matrix(ref m)) if m[0].values.len() == 2));
        let error: Answer = serde_json::from_str(
            r#"{"status":"error","errorType":"bad_data","error":"parse error at char 4"}"#,
        )
        .expect("error");
        assert_eq!(error.error.as_deref(), Some("parse error at char 4"));
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
            let _ = serde_json::from_str::<Answer>(&body);
            let _ = parse_value(&body);
        }
    }
}
