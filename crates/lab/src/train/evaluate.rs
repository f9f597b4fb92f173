//! How a risk model did against ground truth: recall at a lead time with the warning held,
//! lead-time distribution, and false warnings per 1,000 healthy GPU-days.
//!
//! An operator drains a GPU when its warning fires and trusts it only if it stays up: a
//! warning that fires a week ahead, resolves, and fires again an hour before the failure
//! bought one hour. So a failure counts as warned `L` ahead only when the score stayed at
//! or above the threshold at every step from `L` before the failure until it happened —
//! the lead is the length of the last unbroken warning before the failure. On a healthy GPU
//! every rise of the score across the threshold is one false warning (a flickering one
//! counts each time it fires, as the pager would).
//!
//! Each GPU is followed by a [`Tracker`] fed one score per step (constant state, no
//! history kept), and finished against its [`Truth`].

use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Seconds in a day.
const DAY: f64 = 86_400.0;
/// Seconds in an hour.
const HOUR: f64 = 3_600.0;
/// Lead at which a failure counts as warned a day ahead, and half a day ahead.
pub(crate) const LEAD: f64 = 24.0 * HOUR;
pub(crate) const SHORT_LEAD: f64 = 12.0 * HOUR;

/// What really happened to a GPU, as the scenario that made it says (when it failed is
/// what [`Tracker::fail`] was told).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Truth {
    /// The GPU fails; `predictable` is false for families without precursors (a bus drop),
    /// which are reported as lost, never claimed as predicted.
    Fails { predictable: bool },
    /// The GPU stays healthy.
    Healthy,
}

/// Follows one GPU's score, step by step.
#[derive(Debug, Clone)]
pub(crate) struct Tracker {
    threshold: f64,
    /// Start of the warning that is up now.
    warning_since: Option<f64>,
    /// Rises across the threshold so far.
    onsets: u32,
    first_step: Option<f64>,
    last_step: f64,
    /// The lead held when the failure came (set by [`Tracker::fail`]).
    held_at_failure: Option<f64>,
    failed: bool,
}

impl Tracker {
    pub fn new(threshold: f64) -> Tracker {
        Tracker {
            threshold,
            warning_since: None,
            onsets: 0,
            first_step: None,
            last_step: 0.0,
            held_at_failure: None,
            failed: false,
        }
    }

    /// The score at `t` (seconds); true when a warning starts at this step (the score
    /// rose across the threshold). Steps after the failure are ignored: what the model
    /// says of a dead GPU is not a prediction.
    pub fn step(&mut self, t: f64, score: f64) -> bool {
        if self.failed {
            return false;
        }
        self.first_step.get_or_insert(t);
        self.last_step = t;
        if score >= self.threshold {
            if self.warning_since.is_none() {
                self.warning_since = Some(t);
                self.onsets += 1;
                return true;
            }
        } else {
            self.warning_since = None;
        }
        false
    }

    /// The GPU failed at `t`: the warning up now (if any) is the lead it was given.
    pub fn fail(&mut self, t: f64) {
        if self.failed {
            return;
        }
        self.failed = true;
        self.held_at_failure = self.warning_since.map(|since| (t - since).max(0.0));
    }

    /// What this GPU's run says, against what really happened.
    pub fn finish(&self, truth: &Truth) -> Outcome {
        let observed = self.first_step.map_or(0.0, |first| self.last_step - first);
        match truth {
            Truth::Fails { predictable } => Outcome::Failed {
                lead: if self.failed {
                    self.held_at_failure
                } else {
                    None
                },
                predictable: *predictable,
                reached: self.failed,
            },
            Truth::Healthy => Outcome::Healthy {
                false_warnings: self.onsets,
                days: observed / DAY,
            },
        }
    }
}

/// One GPU's result.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Failed {
        /// Seconds the warning had been held, unbroken, when the failure came.
        lead: Option<f64>,
        predictable: bool,
        /// Whether the run reached the failure (a run cut short says nothing).
        reached: bool,
    },
    Healthy {
        false_warnings: u32,
        days: f64,
    },
}

/// The figures of one group of GPUs (a family, a held-out variant, a confounder).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Figures {
    /// Predictable failures the run reached.
    pub failures: u32,
    pub(crate) warned_24h: u32,
    pub(crate) warned_12h: u32,
    /// Leads of the warned failures, in hours, sorted.
    pub(crate) leads_hours: Vec<f64>,
    /// Failures without precursors the run reached (not counted in recall).
    pub(crate) unpredictable: u32,
    /// Of those, how many a warning claimed (held at the failure): should be none.
    pub(crate) unpredictable_claimed: u32,
    pub(crate) healthy_gpus: u32,
    pub(crate) healthy_days: f64,
    pub(crate) false_warnings: u32,
}

impl Figures {
    pub fn add(&mut self, outcome: &Outcome) {
        match *outcome {
            Outcome::Failed { reached: false, .. } => {}
            Outcome::Failed {
                lead,
                predictable: false,
                ..
            } => {
                self.unpredictable += 1;
                self.unpredictable_claimed += u32::from(lead.is_some());
            }
            Outcome::Failed { lead, .. } => {
                self.failures += 1;
                if let Some(lead) = lead {
                    self.warned_24h += u32::from(lead >= LEAD);
                    self.warned_12h += u32::from(lead >= SHORT_LEAD);
                    let hours = lead / HOUR;
                    let at = self.leads_hours.partition_point(|h| *h < hours);
                    self.leads_hours.insert(at, hours);
                }
            }
            Outcome::Healthy {
                false_warnings,
                days,
            } => {
                self.healthy_gpus += 1;
                self.healthy_days += days;
                self.false_warnings += false_warnings;
            }
        }
    }

    /// Share of predictable failures warned at least 24 h ahead, held to the failure.
    pub(crate) fn recall_24h(&self) -> Option<f64> {
        (self.failures > 0).then(|| f64::from(self.warned_24h) / f64::from(self.failures))
    }

    pub(crate) fn recall_12h(&self) -> Option<f64> {
        (self.failures > 0).then(|| f64::from(self.warned_12h) / f64::from(self.failures))
    }

    /// False warnings per 1,000 healthy GPU-days.
    pub fn false_per_1000_days(&self) -> Option<f64> {
        (self.healthy_days > 0.0)
            .then(|| f64::from(self.false_warnings) * 1000.0 / self.healthy_days)
    }

    /// The `q` quantile (0–1) of the leads, in hours (nearest rank).
    pub(crate) fn lead_quantile(&self, q: f64) -> Option<f64> {
        let n = self.leads_hours.len();
        if n == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * n as f64).ceil() as usize).clamp(1, n);
        self.leads_hours.get(rank - 1).copied()
    }
}

/// Figures by group name, in name order.
#[derive(Debug, Clone, Default)]
pub struct Table {
    pub rows: BTreeMap<String, Figures>,
}

impl Table {
    pub fn add(&mut self, group: &str, outcome: &Outcome) {
        self.rows.entry(group.to_string()).or_default().add(outcome);
    }

    /// All groups together.
    pub fn total(&self) -> Figures {
        let mut total = Figures::default();
        for f in self.rows.values() {
            total.failures += f.failures;
            total.warned_24h += f.warned_24h;
            total.warned_12h += f.warned_12h;
            total.unpredictable += f.unpredictable;
            total.unpredictable_claimed += f.unpredictable_claimed;
            total.healthy_gpus += f.healthy_gpus;
            total.healthy_days += f.healthy_days;
            total.false_warnings += f.false_warnings;
            total.leads_hours.extend_from_slice(&f.leads_hours);
        }
        total.leads_hours.sort_by(f64::total_cmp);
        total
    }

    /// A Markdown table: one row per group, then `total` as the row `all` when given (the
    /// sum of the rows, [`Table::total`], unless a GPU counts in several groups); `columns`
    /// picks the failure columns, the healthy ones, or both.
    pub fn markdown(&self, first: &str, columns: Columns, total: Option<&Figures>) -> String {
        let (failures, healthy) = match columns {
            Columns::Failures => (true, false),
            Columns::Healthy => (false, true),
            Columns::Both => (true, true),
        };
        let mut head = format!("| {first} |");
        let mut rule = "|---|".to_string();
        if failures {
            head.push_str(
                " failures | warned ≥ 24 h | warned ≥ 12 h | lead p10 / median / p90 (h) \
                 | lost without precursor (claimed) |",
            );
            rule.push_str("---:|---:|---:|---:|---:|");
        }
        if healthy {
            head.push_str(" healthy GPUs | GPU-days | false warnings | per 1,000 GPU-days |");
            rule.push_str("---:|---:|---:|---:|");
        }
        let mut out = format!("{head}\n{rule}\n");
        let all_row = total.map(|f| ("all".to_string(), f));
        let rows = self.rows.iter().map(|(n, f)| (n.clone(), f)).chain(all_row);
        for (name, f) in rows {
            let pct = |r: Option<f64>| r.map_or("–".into(), |r| format!("{:.0}%", r * 100.0));
            let hours = |h: Option<f64>| h.map_or("–".into(), |h| format!("{h:.0}"));
            let _ = write!(out, "| {name} |");
            if failures {
                let _ = write!(
                    out,
                    " {} | {} ({}) | {} ({}) | {} / {} / {} | {} |",
                    f.failures,
                    f.warned_24h,
                    pct(f.recall_24h()),
                    f.warned_12h,
                    pct(f.recall_12h()),
                    hours(f.lead_quantile(0.1)),
                    hours(f.lead_quantile(0.5)),
                    hours(f.lead_quantile(0.9)),
                    if f.unpredictable == 0 {
                        "–".to_string()
                    } else {
                        format!("{} ({})", f.unpredictable, f.unpredictable_claimed)
                    },
                );
            }
            if healthy {
                let _ = write!(
                    out,
                    " {} | {:.0} | {} | {} |",
                    f.healthy_gpus,
                    f.healthy_days,
                    f.false_warnings,
                    f.false_per_1000_days()
                        .map_or("–".into(), |r| format!("{r:.2}")),
                );
            }
            out.push('\n');
        }
        out
    }
}

/// Which columns a table shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Columns {
    Failures,
    Healthy,
    Both,
}

#[cfg(test)]
mod tests {
    use super::*;

    const FAILS: Truth = Truth::Fails { predictable: true };

    /// Feeds hourly scores from `scores` (hour i has score i) and fails after the last.
    fn run(scores: &[f64], fail: bool) -> Tracker {
        let mut tracker = Tracker::new(0.7);
        for (i, s) in scores.iter().enumerate() {
            tracker.step(i as f64 * HOUR, *s);
        }
        if fail {
            tracker.fail(scores.len() as f64 * HOUR);
        }
        tracker
    }

    #[test]
    fn the_lead_is_the_last_unbroken_warning() {
        // Warned from hour 2, broken at hour 10, warned again from hour 20 to the failure at
        // hour 48: 28 hours of lead, not 46.
        let mut scores = vec![0.1; 48];
        for (h, s) in scores.iter_mut().enumerate() {
            if (2..10).contains(&h) || h >= 20 {
                *s = 0.9;
            }
        }
        let outcome = run(&scores, true).finish(&FAILS);
        assert_eq!(
            outcome,
            Outcome::Failed {
                lead: Some(28.0 * HOUR),
                predictable: true,
                reached: true
            }
        );
        let mut f = Figures::default();
        f.add(&outcome);
        assert_eq!((f.warned_24h, f.warned_12h, f.failures), (1, 1, 1));
    }

    #[test]
    fn a_warning_that_resolved_before_the_failure_is_no_lead() {
        let mut scores = vec![0.9; 40];
        scores[39] = 0.5;
        let outcome = run(&scores, true).finish(&FAILS);
        let mut f = Figures::default();
        f.add(&outcome);
        assert_eq!((f.failures, f.warned_12h), (1, 0));
        assert_eq!(f.recall_12h(), Some(0.0));
    }

    #[test]
    fn a_flickering_healthy_gpu_counts_each_rise() {
        let scores: Vec<f64> = (0..48)
            .map(|h| if h % 4 == 0 { 0.8 } else { 0.2 })
            .collect();
        let outcome = run(&scores, false).finish(&Truth::Healthy);
        let Outcome::Healthy {
            false_warnings,
            days,
        } = outcome
        else {
            panic!("a healthy outcome");
        };
        assert_eq!(false_warnings, 12);
        assert!((days - 47.0 / 24.0).abs() < 1e-9);
        let mut table = Table::default();
        table.add("noisy_link", &outcome);
        let rate = table.total().false_per_1000_days().expect("days observed");
        assert!((rate - 12.0 * 1000.0 / (47.0 / 24.0)).abs() < 1e-6);
    }

    #[test]
    fn bus_drops_are_not_recall_and_a_run_cut_short_says_nothing() {
        let mut f = Figures::default();
        f.add(&Outcome::Failed {
            lead: None,
            predictable: false,
            reached: true,
        });
        f.add(&Outcome::Failed {
            lead: Some(1e6),
            predictable: true,
            reached: false,
        });
        assert_eq!(
            (f.failures, f.unpredictable, f.unpredictable_claimed),
            (0, 1, 0)
        );
        assert_eq!(f.recall_24h(), None);
    }

    #[test]
    fn lead_quantiles_and_the_markdown_table() {
        let mut table = Table::default();
        for lead in [30.0, 10.0, 50.0, 70.0] {
            table.add(
                "memory_wear",
                &Outcome::Failed {
                    lead: Some(lead * HOUR),
                    predictable: true,
                    reached: true,
                },
            );
        }
        table.add(
            "memory_wear",
            &Outcome::Failed {
                lead: None,
                predictable: true,
                reached: true,
            },
        );
        let f = &table.rows["memory_wear"];
        assert_eq!(f.leads_hours, [10.0, 30.0, 50.0, 70.0]);
        assert_eq!(f.lead_quantile(0.5), Some(30.0));
        assert_eq!(f.lead_quantile(0.9), Some(70.0));
        assert_eq!(f.recall_24h(), Some(0.6));
        let md = table.markdown("family", Columns::Failures, Some(&table.total()));
        assert!(
            md.contains("| memory_wear | 5 | 3 (60%) | 3 (60%) | 10 / 30 / 70 | – |\n"),
            "{md}"
        );
        assert!(md.contains("| all | 5 |"), "{md}");
        let md = table.markdown("family", Columns::Healthy, None);
        assert!(md.contains("| memory_wear | 0 | 0 | 0 | – |\n"), "{md}");
        assert!(!md.contains("| all |"), "{md}");
    }
}
