//! The failure-risk ranking and the alerts.

use std::cmp::Ordering;
use std::fmt::Write;

use chrono::{DateTime, Utc};

use super::tile::{REASONS_SHOWN, states, write_reasons};
use super::units::duration;
use crate::alert::{Alert, AlertState};
use crate::api::{AlertsDocument, GpuView, GpusDocument};
use crate::html::escape;

/// GPUs most at risk first; equal scores by index.
pub fn ranked<'d, 'a>(gpus: &'d GpusDocument<'a>) -> Vec<&'d GpuView<'a>> {
    let score = |g: &GpuView<'_>| g.risk.as_ref().map_or(0.0, |r| r.score);
    let mut ranked: Vec<&GpuView<'a>> = gpus.gpus.iter().collect();
    ranked.sort_by(|a, b| {
        score(b)
            .total_cmp(&score(a))
            .then_with(|| a.sample.index.cmp(&b.sample.index))
    });
    ranked
}

pub(super) fn write_ranking(out: &mut String, gpus: &GpusDocument<'_>, threshold: f64) {
    let _ = write!(
        out,
        "<section class=\"ranking\"><h2>Failure risk <small>threshold {threshold:.2}</small></h2>\
         <table><thead><tr><th>#</th><th>GPU</th><th>risk</th><th>top reasons</th><th>state</th></tr></thead><tbody>"
    );
    for (rank, gpu) in ranked(gpus).into_iter().enumerate() {
        let score = gpu.risk.as_ref().map_or(0.0, |r| r.score);
        let _ = write!(
            out,
            "<tr data-uuid=\"{}\" data-risk=\"{score:.3}\"{}><td class=\"num\">{}</td>\
             <td>GPU {} <span class=\"uuid\">{}</span></td>\
             <td class=\"num\">{score:.2}<svg class=\"bar\" viewBox=\"0 0 100 1\" preserveAspectRatio=\"none\">\
             <rect class=\"track\" width=\"100\" height=\"1\"/><rect class=\"fill\" width=\"{:.1}\" height=\"1\"/></svg></td><td>",
            escape(&gpu.sample.uuid),
            if score >= threshold {
                " class=\"high\""
            } else {
                ""
            },
            rank + 1,
            gpu.sample.index,
            escape(&gpu.sample.uuid),
            score.clamp(0.0, 1.0) * 100.0,
        );
        if let Some(risk) = &gpu.risk {
            if let Some(rule) = &risk.rule {
                let _ = write!(out, "<span class=\"rule\">{}</span>", escape(rule));
            }
            write_reasons(out, risk.top(REASONS_SHOWN));
        }
        out.push_str("</td><td>");
        for state in states(gpu, threshold) {
            let _ = write!(out, "<span class=\"badge {state}\">{state}</span>");
        }
        out.push_str("</td></tr>\n");
    }
    out.push_str("</tbody></table></section>\n");
}

/// Firing before pending, critical before warning, oldest first.
fn alert_order(a: &Alert, b: &Alert) -> Ordering {
    let state = |a: &Alert| match a.state {
        AlertState::Firing => 0,
        AlertState::Pending => 1,
        AlertState::Resolved => 2,
    };
    let severity = |a: &Alert| match a.severity() {
        "critical" => 0,
        "warning" => 1,
        _ => 2,
    };
    state(a)
        .cmp(&state(b))
        .then_with(|| severity(a).cmp(&severity(b)))
        .then_with(|| a.active_at.cmp(&b.active_at))
        .then_with(|| a.labels.cmp(&b.labels))
}

/// Age of an alert at `at`: since it fired, or since its condition began while pending.
fn age(alert: &Alert, at: DateTime<Utc>) -> f64 {
    let since = alert.starts_at.unwrap_or(alert.active_at);
    (at - since).num_seconds().max(0) as f64
}

pub(super) fn write_alerts(out: &mut String, alerts: &AlertsDocument<'_>) {
    let mut active: Vec<&Alert> = alerts
        .alerts
        .iter()
        .map(|a| a.as_ref())
        .filter(|a| a.state != AlertState::Resolved)
        .collect();
    active.sort_by(|a, b| alert_order(a, b));
    let _ = write!(
        out,
        "<section class=\"alerts\"><h2>Alerts <small>{} active</small></h2>",
        active.len()
    );
    if active.is_empty() {
        out.push_str("<p class=\"muted\">No alert is pending or firing.</p></section>\n");
        return;
    }
    out.push_str(
        "<table><thead><tr><th>alert</th><th>GPU</th><th>state</th><th>age</th><th>summary</th></tr></thead><tbody>",
    );
    for alert in active {
        let gpu = alert.labels.get("gpu").map_or("", String::as_str);
        let summary = alert.annotations.get("summary").map_or("", String::as_str);
        let _ = writeln!(
            out,
            "<tr class=\"{} {}\"><td><b>{}</b> <span class=\"badge {}\">{}</span></td>\
             <td class=\"num\">{}</td><td>{}</td><td class=\"num\">{}</td><td>{}</td></tr>",
            alert.state.as_str(),
            escape(alert.severity()),
            escape(alert.name()),
            escape(alert.severity()),
            escape(alert.severity()),
            escape(gpu),
            alert.state.as_str(),
            duration(age(alert, alerts.at)),
            escape(summary),
        );
    }
    out.push_str("</tbody></table></section>\n");
}
