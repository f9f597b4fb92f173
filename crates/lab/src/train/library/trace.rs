//! `train --scenarios --trace NODE:GPU`: a GPU followed hour by hour under the model that
//! judges it, so that why a failure was warned late (or a healthy GPU warned at all) can be
//! read off the run that counted it, not a second run beside it.

use crate::engine::risk::Assessment;

use super::report::{TERMS_SHOWN, term_text};

/// One traced GPU's hours under one model.
#[derive(Debug, Clone, Default)]
pub(crate) struct Trace {
    /// Clock hour (from the library's start) of the last line, so that a line is written at
    /// the first collection of each hour whatever the node's interval.
    last_hour: Option<i64>,
    pub(crate) lines: Vec<String>,
}

impl Trace {
    /// Adds the line of a collection at `t` (seconds from the library's start) if it is
    /// the first of its hour and the GPU has not failed yet (`failure_s`: when it fails, if
    /// it does; some failures leave the GPU up, scored on to the end of the run).
    pub(crate) fn step(&mut self, t: f64, failure_s: Option<f64>, risk: &Assessment) {
        let hour = (t / 3600.0).floor() as i64;
        if self.last_hour == Some(hour) || failure_s.is_some_and(|f| t >= f) {
            return;
        }
        self.last_hour = Some(hour);
        let before = failure_s.map_or(String::new(), |f| {
            format!(", {:.1} h before the failure", (f - t) / 3600.0)
        });
        let rule = risk
            .rule
            .as_deref()
            .map_or(String::new(), |r| format!(" (rule {r})"));
        let terms: Vec<String> = risk
            .top(TERMS_SHOWN)
            .map(|c| term_text(&c.feature, c.value, c.contribution))
            .collect();
        self.lines.push(format!(
            "day {:.2}{before}: {:.3}{rule}{}{}",
            t / 86_400.0,
            risk.score,
            if terms.is_empty() { "" } else { ", " },
            terms.join(", ")
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::risk::Contribution;

    fn risk(score: f64) -> Assessment {
        Assessment {
            score,
            rule: None,
            contributions: vec![Contribution {
                feature: "nvlink_errors_rate".into(),
                value: 5.32,
                contribution: 3.72,
            }],
            evidence: Vec::new(),
        }
    }

    #[test]
    fn one_line_an_hour_with_the_hours_left_and_the_terms() {
        let mut trace = Trace::default();
        // Every ten minutes for two hours and a bit, failing at 26 h 10 min: nothing after.
        for step in 0..14 {
            let t = 86_400.0 + 600.0 * step as f64;
            trace.step(t, Some(26.0 * 3600.0 + 600.0), &risk(0.655));
        }
        assert_eq!(trace.lines.len(), 3, "{:?}", trace.lines);
        assert_eq!(
            trace.lines[0],
            "day 1.00, 2.2 h before the failure: 0.655, nvlink_errors_rate 5.32 nats → +3.72"
        );
        assert!(
            trace.lines[2].starts_with("day 1.08, 0.2 h before"),
            "{:?}",
            trace.lines
        );
        let mut healthy = Trace::default();
        healthy.step(3600.0, None, &risk(0.011));
        assert_eq!(
            healthy.lines,
            ["day 0.04: 0.011, nvlink_errors_rate 5.32 nats → +3.72"]
        );
    }
}
