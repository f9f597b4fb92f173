//! Reading a store's answer: parsed as it arrives, its bytes counted against the cap on
//! answers in flight, values that are not finite (or past ±1e18) dropped and named.

use std::io::Read;
use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::Context;
use serde::Deserialize;

/// The first 200 characters of an answer, on one line.
pub(super) fn excerpt(body: &str) -> String {
    let line: String = body.chars().take(200).collect();
    line.replace(['\n', '\r'], " ")
}

/// Reads an answer while counting its bytes against the client's cap on answers in
/// flight, and keeps its first bytes for an error message.
pub(super) struct Budgeted<'a, R> {
    pub(super) inner: R,
    pub(super) reading: &'a AtomicUsize,
    pub(super) budget: usize,
    /// Bytes this answer added to `reading` (given back on drop).
    pub(super) read: usize,
    pub(super) start: Vec<u8>,
    /// Set when the cap was crossed: the bytes the other answers held then.
    pub(super) over: Option<usize>,
}

/// Bytes of an answer kept for the message when it is not a Prometheus API answer.
pub(super) const EXCERPT_BYTES: usize = 800;

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

/// The largest magnitude a value read may have. No figure the fleet commands ask a store
/// for comes near it (a million GPUs hold 1.4e17 bytes of memory; a month of them is 2.6e12
/// GPU-seconds), while values near f64's largest (`1e308`) overflow into infinity as soon as
/// two are added: such a value is a broken exporter or a query dividing by almost nothing.
pub(super) const MAX_MAGNITUDE: f64 = 1e18;

/// Values that are not finite numbers, or past [`MAX_MAGNITUDE`], dropped from one answer.
#[derive(Default)]
pub(super) struct Dropped {
    count: usize,
    first: Option<String>,
}

impl Dropped {
    /// Whether `value` is kept; a dropped one is counted, the first with its series.
    pub(super) fn keep(
        &mut self,
        labels: &std::collections::BTreeMap<String, String>,
        value: f64,
    ) -> bool {
        if value.is_finite() && value.abs() <= MAX_MAGNITUDE {
            return true;
        }
        self.count += 1;
        if self.first.is_none() {
            let pairs: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v:?}")).collect();
            self.first = Some(format!("{{{}}} ({value})", pairs.join(", ")));
        }
        false
    }

    pub(super) fn warn(&self, context: &str) {
        if let Some(first) = &self.first {
            tracing::warn!(
                "{context}: dropped {} value(s) that are not finite numbers (NaN or ±Inf) or \
                 past ±1e18; the first in series {first}",
                self.count
            );
        }
    }
}

/// A sample value, parsed from the string Prometheus writes (`"1.5"`, `"NaN"`, `"+Inf"`)
/// while the answer is read: no string is kept per point.
pub(super) struct Value(pub(super) f64);

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
pub(super) fn parse_value(text: &str) -> anyhow::Result<f64> {
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
pub(super) struct Answer<D> {
    pub(super) status: String,
    pub(super) data: Option<D>,
    #[serde(rename = "errorType")]
    pub(super) error_type: Option<String>,
    pub(super) error: Option<String>,
}

#[derive(Deserialize)]
#[serde(tag = "resultType", content = "result", rename_all = "lowercase")]
pub(super) enum Data {
    Vector(Vec<VectorSeries>),
    Matrix(Vec<MatrixSeries>),
    Scalar((f64, Value)),
}

/// How much an answer holds, for the debug log.
pub(super) trait Shape {
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

/// A series answer: one label set per series.
impl Shape for Vec<std::collections::BTreeMap<String, String>> {
    fn series(&self) -> usize {
        self.len()
    }

    fn points(&self) -> usize {
        0
    }
}

/// The store's flags: no series.
impl Shape for std::collections::BTreeMap<String, String> {
    fn series(&self) -> usize {
        0
    }

    fn points(&self) -> usize {
        0
    }
}

#[derive(Deserialize)]
pub(super) struct VectorSeries {
    #[serde(default)]
    pub(super) metric: std::collections::BTreeMap<String, String>,
    pub(super) value: (f64, Value),
}

#[derive(Deserialize)]
pub(super) struct MatrixSeries {
    #[serde(default)]
    pub(super) metric: std::collections::BTreeMap<String, String>,
    pub(super) values: Vec<(f64, Value)>,
}
