//! What a metric family is: its name, Prometheus type, labels and help text.
//!
//! The lowest piece of the exposition: the native catalogue ([`super::metrics`]), the
//! dcgm-exporter fields ([`super::dcgm`]), the families under construction
//! ([`super::families`]) and the metrics reference ([`super::reference`]) all describe
//! families with [`MetricDef`], and none of them needs another to do so.

/// Prometheus metric type. Only the two kinds gpu-sentinel emits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricKind {
    Gauge,
    Counter,
}

impl MetricKind {
    pub fn as_str(self) -> &'static str {
        match self {
            MetricKind::Gauge => "gauge",
            MetricKind::Counter => "counter",
        }
    }
}

/// One metric family: its name, type, label names in exposition order, and help text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetricDef {
    pub name: &'static str,
    pub kind: MetricKind,
    /// Label names in the order samples carry them. An empty label value is left out of
    /// the sample, which Prometheus treats exactly like an absent label.
    pub labels: &'static [&'static str],
    pub help: &'static str,
}

pub const fn gauge(
    name: &'static str,
    labels: &'static [&'static str],
    help: &'static str,
) -> MetricDef {
    MetricDef {
        name,
        kind: MetricKind::Gauge,
        labels,
        help,
    }
}

pub const fn counter(
    name: &'static str,
    labels: &'static [&'static str],
    help: &'static str,
) -> MetricDef {
    MetricDef {
        name,
        kind: MetricKind::Counter,
        labels,
        help,
    }
}
