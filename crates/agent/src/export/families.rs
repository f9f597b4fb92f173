//! [`Families`]: the metric families of one exposition under construction, in the order
//! they will be written, and their encoding to Prometheus text format 0.0.4.
//!
//! Renderers (the native one, the dcgm-exporter one, the analysis one) ask
//! for a family by its [`MetricDef`] and push samples into it. A family asked for the
//! first time is appended, so the exposition follows the order renderers ask in; a family
//! that ends up with no samples is left out entirely. Every label value passes through one
//! sanitiser here, so no renderer can forget it.
//!
//! Encoding goes through the `prometheus` crate's data model and `TextEncoder`, which own
//! the format's escaping rules (`\\`, `"` and newline in label values; `\\` and newline in
//! HELP).

use prometheus::proto;

use super::metric_def::{MetricDef, MetricKind};
use crate::config::MIN_LABEL_LENGTH;

/// The families of one exposition, in output order.
#[derive(Debug)]
pub struct Families {
    families: Vec<Family>,
    max_label_length: usize,
}

/// One metric family and the samples pushed into it so far.
#[derive(Debug)]
pub struct Family {
    def: MetricDef,
    /// Name, help and type set when the family is created; samples pushed as they come.
    proto: proto::MetricFamily,
    max_label_length: usize,
}

impl Families {
    /// An empty exposition whose label values are cut to `max_label_length` characters
    /// (at least [`MIN_LABEL_LENGTH`]).
    pub fn new(max_label_length: usize) -> Families {
        Families {
            families: Vec::new(),
            max_label_length: max_label_length.max(MIN_LABEL_LENGTH),
        }
    }

    /// Fixes the output order of these families up front (a catalogue), whatever order
    /// renderers then fill them in.
    pub(crate) fn declare(&mut self, defs: &[MetricDef]) {
        for def in defs {
            self.family(def);
        }
    }

    /// The family named by `def`, appended at the end if not asked for before.
    pub fn family(&mut self, def: &MetricDef) -> &mut Family {
        let position = self.families.iter().position(|f| f.def.name == def.name);
        let index = match position {
            Some(index) => index,
            None => {
                let mut proto = proto::MetricFamily::default();
                proto.set_name(def.name.to_string());
                proto.set_help(def.help.to_string());
                proto.set_field_type(match def.kind {
                    MetricKind::Gauge => proto::MetricType::GAUGE,
                    MetricKind::Counter => proto::MetricType::COUNTER,
                });
                self.families.push(Family {
                    def: *def,
                    proto,
                    max_label_length: self.max_label_length,
                });
                self.families.len() - 1
            }
        };
        &mut self.families[index]
    }

    /// Names of the families that hold samples, in output order.
    pub fn names(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.families
            .iter()
            .filter(|f| !f.is_empty())
            .map(|f| f.def.name)
    }

    /// Number of samples across all families.
    pub(crate) fn sample_count(&self) -> usize {
        self.families.iter().map(Family::len).sum()
    }

    /// The exposition in Prometheus text format 0.0.4.
    pub fn encode(&self) -> String {
        let encoder = prometheus::TextEncoder::new();
        let mut text = String::with_capacity(self.sample_count() * 160);
        for family in &self.families {
            if family.is_empty() {
                continue;
            }
            // The encoder fails only on a family without samples or name, both excluded
            // here; should that ever change, one family is lost, not the exposition.
            if let Err(error) = encoder.encode_utf8(std::slice::from_ref(&family.proto), &mut text)
            {
                tracing::error!(family = family.def.name, %error, "metric family not encoded");
            }
        }
        text
    }
}

impl Family {
    /// Replaces the help text, for families whose help carries configuration (the
    /// currency of `gpu_cost_total`).
    pub(crate) fn set_help(&mut self, help: String) {
        self.proto.set_help(help);
    }

    /// Adds a sample. `label_values` pair up with the family's label names in order; an
    /// empty value leaves its label out (Prometheus reads an empty label as an absent one).
    pub fn push(&mut self, label_values: &[&str], value: f64) {
        debug_assert_eq!(
            label_values.len(),
            self.def.labels.len(),
            "{}: label values do not match the label names",
            self.def.name
        );
        let labels = self
            .def
            .labels
            .iter()
            .zip(label_values)
            .filter_map(|(name, value)| {
                let value = sanitize_label_value(value, self.max_label_length);
                (!value.is_empty()).then(|| {
                    let mut pair = proto::LabelPair::default();
                    pair.set_name((*name).to_string());
                    pair.set_value(value);
                    pair
                })
            })
            .collect();
        let mut sample = proto::Metric::default();
        sample.set_label(labels);
        match self.def.kind {
            MetricKind::Gauge => {
                let mut gauge = proto::Gauge::default();
                gauge.set_value(value);
                sample.set_gauge(gauge);
            }
            MetricKind::Counter => {
                let mut counter = proto::Counter::default();
                counter.set_value(value);
                sample.set_counter(counter);
            }
        }
        self.proto.mut_metric().push(sample);
    }

    /// Adds a sample when there is a value; `None` renders nothing, never 0.
    pub(crate) fn push_some(&mut self, label_values: &[&str], value: Option<f64>) {
        if let Some(value) = value {
            self.push(label_values, value);
        }
    }

    pub fn len(&self) -> usize {
        self.proto.get_metric().len()
    }

    pub fn is_empty(&self) -> bool {
        self.proto.get_metric().is_empty()
    }
}

/// A label value fit for the exposition: control characters removed except newline (the
/// text format escapes it as `\n`, so it survives without breaking a line), then cut to
/// `max_chars` characters. Rust strings are valid UTF-8 and the cut falls between
/// characters, so the result is valid UTF-8 too; quotes and backslashes stay and are
/// escaped by the encoder.
pub(crate) fn sanitize_label_value(value: &str, max_chars: usize) -> String {
    value
        .chars()
        .filter(|c| *c == '\n' || !c.is_control())
        .take(max_chars)
        .collect()
}

/// `0/1` of a flag.
pub fn flag(value: bool) -> f64 {
    if value { 1.0 } else { 0.0 }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::metrics::{BUILD_INFO, GPU_UP, SOURCE_UP};

    #[test]
    fn control_characters_go_and_long_values_are_cut_by_characters() {
        assert_eq!(
            sanitize_label_value("a\u{0}b\tc\u{1b}[1md\re", 64),
            "abc[1mde"
        );
        assert_eq!(sanitize_label_value("line\nbreak", 64), "line\nbreak");
        assert_eq!(sanitize_label_value("äöüß", 3), "äöü");
        assert_eq!(sanitize_label_value("\u{7f}\u{9b}", 3), "");
    }

    #[test]
    fn families_without_samples_are_omitted_and_order_is_kept() {
        let mut families = Families::new(0);
        families.family(&SOURCE_UP);
        families.family(&GPU_UP).push(&["0", "GPU-a"], 1.0);
        families.family(&BUILD_INFO).push(&["1.0", ""], 1.0);
        families.family(&GPU_UP).push(&["1", "GPU-b"], 0.0);
        let text = families.encode();
        assert!(!text.contains("gpu_sentinel_source_up"));
        let up = text.find("# TYPE gpu_up gauge").unwrap();
        let build = text.find("# TYPE gpu_sentinel_build_info gauge").unwrap();
        assert!(up < build);
        assert!(
            text.contains(
                "gpu_up{gpu=\"0\",uuid=\"GPU-a\"} 1\ngpu_up{gpu=\"1\",uuid=\"GPU-b\"} 0\n"
            )
        );
        // The empty revision is left out.
        assert!(text.contains("gpu_sentinel_build_info{version=\"1.0\"} 1\n"));
    }

    #[test]
    fn quotes_backslashes_and_newlines_are_escaped() {
        let mut families = Families::new(64);
        families
            .family(&BUILD_INFO)
            .push(&["say \"hi\"", "C:\\path\nnext\u{7}"], 1.0);
        assert!(
            families.encode().contains(
                r#"gpu_sentinel_build_info{version="say \"hi\"",revision="C:\\path\nnext"} 1"#
            ),
            "{}",
            families.encode()
        );
    }
}
