//! What a library run found, and its tables.

use crate::engine::risk::{Assessment, RiskModel, is_likelihood_ratio};
use crate::scenario::GpuLabel;

use super::super::evaluate::{Columns, Figures, LEAD, Outcome, Table};
use super::GpuRef;

/// Everything a library run found.
#[derive(Debug, Clone)]
pub struct LibraryReport {
    /// Fitted on every GPU: the model to ship.
    pub model: RiskModel,
    pub gpus: usize,
    pub failing: usize,
    pub rows: usize,
    /// From the noise × curve folds (failures) and the noise folds (healthy GPUs): by
    /// failure family, and healthy GPUs by each confounder
    /// they show (a GPU with two counts in both rows) ...
    pub by_family: Table,
    /// The same failures by how long before the failure their precursor starts: a
    /// precursor of under two days leaves little to warn on a day ahead.
    pub(crate) by_span: Table,
    /// The same failures by whether their precursor shows anything a day ahead: the
    /// recall a day ahead is judged on those that do.
    pub by_sign: Table,
    /// Failures that showed a sign a day ahead and were not warned then, one line each
    /// with the node and GPU it is listed by.
    pub(crate) missed: Vec<(usize, u32, String)>,
    /// Failures warned a day ahead though their precursor showed nothing by then.
    pub(crate) lucky: Vec<(usize, u32, String)>,
    /// Healthy GPUs the headline's folds warned on, one line each: what they show, their
    /// variants, the fold, how often the score crossed and what drove its first crossing.
    pub(crate) false_alarms: Vec<(usize, u32, String)>,
    /// The same under the shipped model.
    pub(crate) shipped_false_alarms: Vec<(usize, u32, String)>,
    pub(crate) by_confounder: Table,
    /// ... and every healthy GPU once.
    pub healthy: Figures,
    /// One row per held-out variant value (`curve=exponential`, …).
    pub(crate) by_variant: Table,
    /// The model in use (the shipped one, models/default-risk.toml), judged on every GPU:
    /// by family, by whether the precursor shows a sign a day ahead, and every healthy GPU
    /// once.
    pub(crate) shipped_by_family: Table,
    pub(crate) shipped_by_sign: Table,
    pub(crate) shipped_healthy: Figures,
    /// Anchor GPUs every fit was held to.
    pub anchors: usize,
    /// GPUs followed hour by hour (`--trace`): node, GPU, the model, its lines.
    pub(crate) traces: Vec<(usize, u32, String, Vec<String>)>,
}

impl LibraryReport {
    /// An empty report of a library run.
    pub(super) fn new(gpus: usize, failing: usize, rows: usize, anchors: usize) -> Self {
        LibraryReport {
            model: RiskModel::shipped(),
            gpus,
            failing,
            rows,
            by_family: Table::default(),
            by_span: Table::default(),
            by_sign: Table::default(),
            missed: Vec::new(),
            lucky: Vec::new(),
            false_alarms: Vec::new(),
            shipped_false_alarms: Vec::new(),
            by_confounder: Table::default(),
            healthy: Figures::default(),
            by_variant: Table::default(),
            shipped_by_family: Table::default(),
            shipped_by_sign: Table::default(),
            shipped_healthy: Figures::default(),
            anchors,
            traces: Vec::new(),
        }
    }

    /// Keeps a traced GPU's hours under `model` (nothing for a GPU not traced).
    pub(super) fn add_trace(&mut self, gpu: &GpuRef, model: &str, lines: Vec<String>) {
        if !lines.is_empty() {
            self.traces
                .push((gpu.node, gpu.index, model.to_string(), lines));
        }
    }

    /// The traced GPUs' hours, by node and GPU, the judging model's before the shipped
    /// one's; empty without `--trace`.
    fn traced(&self) -> String {
        let mut sorted: Vec<&(usize, u32, String, Vec<String>)> = self.traces.iter().collect();
        sorted.sort_by_key(|(node, gpu, model, _)| (*node, *gpu, model == SHIPPED));
        let mut out = String::new();
        if !sorted.is_empty() {
            out.push_str(
                "\nTraced GPUs (--trace): at the first collection of each hour, the score and \
                 its largest held terms (feature value → log-odds, a rate test's value in \
                 nats):\n",
            );
        }
        for (node, gpu, model, lines) in sorted {
            out.push_str(&format!(
                "\nnode {} GPU {gpu} under {model}:\n\n```\n{}\n```\n",
                node + 1,
                lines.join("\n")
            ));
        }
        out
    }

    /// Counts the shipped model's outcome on a GPU (`crossing`: what drove a healthy GPU's
    /// first false warning, if it had one).
    pub(super) fn add_shipped(
        &mut self,
        gpu: &GpuRef,
        outcome: &Outcome,
        crossing: Option<&Crossing>,
    ) {
        match outcome {
            Outcome::Failed { .. } => {
                let family = gpu.label.family.as_deref().unwrap_or("unnamed");
                self.shipped_by_family.add(family, outcome);
                self.shipped_by_sign.add(sign_class(gpu), outcome);
            }
            Outcome::Healthy { false_warnings, .. } => {
                self.shipped_healthy.add(outcome);
                if *false_warnings > 0 {
                    let line =
                        false_alarm_line(gpu, "none (shipped model)", *false_warnings, crossing);
                    self.shipped_false_alarms.push((gpu.node, gpu.index, line));
                }
            }
        }
    }

    /// Counts a GPU's outcome in the headline tables (by family, by span, by sign,
    /// healthy), judged in `fold` (the variants held out), with what drove a healthy GPU's
    /// first false warning (`crossing`).
    pub(super) fn add_headline(
        &mut self,
        gpu: &GpuRef,
        outcome: &Outcome,
        fold: &str,
        crossing: Option<&Crossing>,
    ) {
        let label = &gpu.label;
        match outcome {
            Outcome::Failed { lead, .. } => {
                let family = label.family.as_deref().unwrap_or("unnamed");
                self.by_family.add(family, outcome);
                if let Some(span) = span_class(label) {
                    self.by_span.add(span, outcome);
                }
                self.by_sign.add(sign_class(gpu), outcome);
                let warned = lead.is_some_and(|l| l >= LEAD);
                let reached_predictable = matches!(
                    outcome,
                    Outcome::Failed {
                        predictable: true,
                        reached: true,
                        ..
                    }
                );
                // Missed though it showed a sign, or warned though it showed none (luck,
                // or a sign the reading of the precursor's signal does not see).
                if reached_predictable && gpu.shows_a_day_ahead != warned {
                    let list = if gpu.shows_a_day_ahead {
                        &mut self.missed
                    } else {
                        &mut self.lucky
                    };
                    list.push((gpu.node, gpu.index, missed_line(gpu, *lead)));
                }
            }
            Outcome::Healthy { false_warnings, .. } => {
                for confounder in confounders(label) {
                    self.by_confounder.add(&confounder, outcome);
                }
                self.healthy.add(outcome);
                if *false_warnings > 0 {
                    let line = false_alarm_line(gpu, fold, *false_warnings, crossing);
                    self.false_alarms.push((gpu.node, gpu.index, line));
                }
            }
        }
    }

    /// GPUs listed by node and GPU, one a line.
    fn list(failures: &[(usize, u32, String)]) -> String {
        let mut sorted = failures.to_vec();
        sorted.sort_by_key(|f| (f.0, f.1));
        if sorted.is_empty() {
            return "none\n".into();
        }
        sorted.iter().map(|(_, _, l)| format!("- {l}\n")).collect()
    }

    /// The evaluation tables, as Markdown with their headings.
    pub fn tables(&self) -> String {
        format!(
            "{} GPUs ({} failing), {} training rows; every figure from folds that never saw \
             the GPU's variant, every fit held to {} operators' anchor GPUs.\n\n\
             By failure family (each failure judged by a model fitted without its noise \
             model and without its precursor curve):\n\n{}\n\
             The same failures by how long before the failure the precursor starts:\n\n{}\n\
             The same failures by whether their precursor shows anything to warn on a day \
             before the failure (its expected signal, docs/detection.md): the recall a day \
             ahead is judged on those that do:\n\n{}\n\
             Of those that do, the ones not warned a day ahead (node, GPU: family, curve, \
             noise, rate class, model, workload, span, warning held at the failure):\n\n{}\n\
             and those warned a day ahead although their precursor showed nothing by \
             then:\n\n{}\n\
             Healthy GPUs by what they show, a GPU under each thing it shows (each judged by \
             a model fitted without its noise model):\n\n{}\n\
             The healthy GPUs warned on (node, GPU: what it shows; model, noise, workload; \
             the fold; false warnings; at the first, the score and its largest held terms, \
             feature value → log-odds, a rate test's value in nats):\n\n{}\n\
             By held-out variant (one fold per value):\n\n{}\n\
             The shipped model (models/default-risk.toml) on every GPU, by failure \
             family:\n\n{}\n\
             by whether the precursor shows anything a day ahead:\n\n{}\n\
             and on every healthy GPU:\n\n{}\n\
             the healthy GPUs it warned on:\n\n{}",
            self.gpus,
            self.failing,
            self.rows,
            self.anchors,
            self.by_family
                .markdown("family", Columns::Failures, Some(&self.by_family.total())),
            self.by_span
                .markdown("precursor span", Columns::Failures, None),
            self.by_sign
                .markdown("a day ahead", Columns::Failures, None),
            Self::list(&self.missed),
            Self::list(&self.lucky),
            self.by_confounder
                .markdown("shows", Columns::Healthy, Some(&self.healthy)),
            Self::list(&self.false_alarms),
            // A GPU is in one fold of each axis: a total over all folds would count it once
            // per axis.
            self.by_variant.markdown("held out", Columns::Both, None),
            self.shipped_by_family.markdown(
                "family",
                Columns::Failures,
                Some(&self.shipped_by_family.total())
            ),
            self.shipped_by_sign
                .markdown("a day ahead", Columns::Failures, None),
            Table::default().markdown("healthy", Columns::Healthy, Some(&self.shipped_healthy)),
            Self::list(&self.shipped_false_alarms),
        ) + &self.traced()
    }
}

/// How long before its failure a GPU's precursor starts, as a row of the span table.
fn span_class(label: &GpuLabel) -> Option<&'static str> {
    let days = (label.failure_s? - label.precursor_start_s?) / 86_400.0;
    Some(if days < 2.0 {
        "under 2 days"
    } else if days < 5.0 {
        "2 to 5 days"
    } else {
        "5 days or more"
    })
}

/// `node 3 GPU 5: thermal, linear, poisson, low, H100, training, 2.4 days, held 6 h` for
/// a failure not warned a day ahead (or warned without a sign).
fn missed_line(gpu: &GpuRef, lead: Option<f64>) -> String {
    let label = &gpu.label;
    let v = &label.variants;
    let span = match (label.failure_s, label.precursor_start_s) {
        (Some(f), Some(p)) => format!("{:.1} days", (f - p) / 86_400.0),
        _ => "no span".into(),
    };
    let held = lead.map_or("no warning held".into(), |l| {
        format!("held {:.0} h", l / 3_600.0)
    });
    format!(
        "node {} GPU {}: {}, {}, {}, {}, {}, {}, {span}, {held}",
        gpu.node + 1,
        gpu.index,
        label.family.as_deref().unwrap_or("unnamed"),
        v.curve.as_deref().unwrap_or("-"),
        v.noise,
        v.rate_class.as_deref().unwrap_or("-"),
        v.sku.name(),
        v.workload,
    )
}

/// Whether a failure's precursor shows anything a day ahead, as a row of the sign table.
fn sign_class(gpu: &GpuRef) -> &'static str {
    if gpu.shows_a_day_ahead {
        SHOWS
    } else {
        "shows nothing"
    }
}

/// The sign table's row of the failures judged for the recall a day ahead.
pub const SHOWS: &str = "shows a sign";

/// The confounders a healthy GPU shows (`none` for a plain healthy GPU).
fn confounders(label: &GpuLabel) -> Vec<String> {
    let names: Vec<String> = label
        .confounders
        .iter()
        .filter_map(|c| serde_json::to_value(c).ok()?.as_str().map(str::to_string))
        .collect();
    if names.is_empty() {
        vec!["none".into()]
    } else {
        names
    }
}

/// How the traces name the shipped model.
pub(crate) const SHIPPED: &str = "the shipped model";

/// Held terms a false warning's line names.
pub(crate) const TERMS_SHOWN: usize = 4;

/// What drove a score at the step it crossed the threshold.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Crossing {
    /// Seconds from the library's start.
    pub t: f64,
    pub score: f64,
    /// The rule that set the score, if one did.
    pub rule: Option<String>,
    /// The largest positive held terms: feature, its value, its log-odds.
    pub terms: Vec<(String, f64, f64)>,
    /// When the later crossings came, seconds from the library's start.
    pub later: Vec<f64>,
}

impl Crossing {
    /// From the assessment at the crossing.
    pub(crate) fn of(t: f64, risk: &Assessment) -> Crossing {
        Crossing {
            t,
            score: risk.score,
            rule: risk.rule.clone(),
            terms: risk
                .top(TERMS_SHOWN)
                .map(|c| (c.feature.to_string(), c.value, c.contribution))
                .collect(),
            later: Vec::new(),
        }
    }
}

/// `pcie_replays_rate 7.10 nats → +2.90`: a held term, its value (nats for a rate test)
/// and its log-odds.
pub(crate) fn term_text(feature: &str, value: f64, logit: f64) -> String {
    let nats = crate::engine::risk::FEATURES
        .iter()
        .position(|(n, _)| *n == feature)
        .is_some_and(is_likelihood_ratio);
    let unit = if nats { " nats" } else { "" };
    format!("{feature} {value:.2}{unit} → {logit:+.2}")
}

/// `node 2 GPU 6: gpu_reset, driver_reload; H100, overdispersed, training; fold
/// noise=overdispersed; 3 false warnings, the first on day 12.4 at 0.74:
/// pcie_replays_rate 7.10 nats → +2.90, …` for a healthy GPU warned on.
fn false_alarm_line(
    gpu: &GpuRef,
    fold: &str,
    false_warnings: u32,
    crossing: Option<&Crossing>,
) -> String {
    let v = &gpu.label.variants;
    let first = crossing.map_or(String::new(), |c| {
        let terms: Vec<String> = c
            .terms
            .iter()
            .map(|(feature, value, logit)| term_text(feature, *value, *logit))
            .collect();
        let rule = c
            .rule
            .as_deref()
            .map_or(String::new(), |r| format!(" (rule {r})"));
        let later: Vec<String> = c
            .later
            .iter()
            .map(|t| format!("{:.1}", t / 86_400.0))
            .collect();
        let later = if later.is_empty() {
            String::new()
        } else {
            format!(" (later ones on days {})", later.join(", "))
        };
        format!(
            ", the first on day {:.1} at {:.2}{rule}: {}{later}",
            c.t / 86_400.0,
            c.score,
            if terms.is_empty() {
                "no term".into()
            } else {
                terms.join(", ")
            }
        )
    });
    format!(
        "node {} GPU {}: {}; {}, {}, {}; fold {fold}; {false_warnings} false warning{}{first}",
        gpu.node + 1,
        gpu.index,
        confounders(&gpu.label).join(", "),
        v.sku.name(),
        v.noise,
        v.workload,
        if false_warnings == 1 { "" } else { "s" },
    )
}
