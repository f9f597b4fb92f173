//! The failure-risk ranking and the alerts.

use std::cmp::Ordering;

use chrono::{DateTime, Utc};
use maud::{Markup, html};

use super::tile::{REASONS_SHOWN, bar, reasons, states};
use super::units::duration;
use crate::alert::{Alert, AlertState};
use crate::api::{AlertsDocument, GpuView, GpusDocument};
use crate::html::Text;

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

pub(super) fn ranking(gpus: &GpusDocument<'_>, threshold: f64) -> Markup {
    html! {
        section.ranking {
            h2 { "Failure risk " small { "threshold " (format!("{threshold:.2}")) } }
            table {
                thead { tr { th { "#" } th { "GPU" } th { "risk" } th { "top reasons" } th { "state" } } }
                tbody {
                    @for (rank, gpu) in ranked(gpus).into_iter().enumerate() {
                        (row(rank + 1, gpu, threshold))
                    }
                }
            }
        }
        "\n"
    }
}

/// One GPU's row in the ranking.
fn row(rank: usize, gpu: &GpuView<'_>, threshold: f64) -> Markup {
    let score = gpu.risk.as_ref().map_or(0.0, |r| r.score);
    html! {
        tr data-uuid=(Text(&gpu.sample.uuid)) data-risk=(format!("{score:.3}"))
            class=[(score >= threshold).then_some("high")] {
            td.num { (rank) }
            td { "GPU " (gpu.sample.index) " " span.uuid { (Text(&gpu.sample.uuid)) } }
            td.num { (format!("{score:.2}")) (bar(score.clamp(0.0, 1.0))) }
            td {
                @if let Some(risk) = &gpu.risk {
                    @if let Some(rule) = &risk.rule { span.rule { (Text(rule)) } }
                    (reasons(risk.top(REASONS_SHOWN)))
                }
            }
            td { @for state in states(gpu, threshold) { span.badge.(state) { (state) } } }
        }
        "\n"
    }
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

pub(super) fn alerts(alerts: &AlertsDocument<'_>) -> Markup {
    let mut active: Vec<&Alert> = alerts
        .alerts
        .iter()
        .map(|a| a.as_ref())
        .filter(|a| a.state != AlertState::Resolved)
        .collect();
    active.sort_by(|a, b| alert_order(a, b));
    html! {
        section.alerts {
            h2 { "Alerts " small { (active.len()) " active" } }
            @if active.is_empty() {
                p.muted { "No alert is pending or firing." }
            } @else {
                table {
                    thead { tr { th { "alert" } th { "GPU" } th { "state" } th { "age" } th { "summary" } } }
                    tbody {
                        @for alert in active {
                            (alert_row(alert, alerts.at))
                        }
                    }
                }
            }
        }
        "\n"
    }
}

fn alert_row(alert: &Alert, at: DateTime<Utc>) -> Markup {
    let gpu = alert.labels.get("gpu").map_or("", String::as_str);
    let summary = alert.annotations.get("summary").map_or("", String::as_str);
    let severity = Text(alert.severity());
    html! {
        tr class=(Text(format!("{} {}", alert.state.as_str(), alert.severity()))) {
            td { b { (Text(alert.name())) } " " span.badge.(severity) { (severity) } }
            td.num { (Text(gpu)) }
            td { (alert.state.as_str()) }
            td.num { (duration(age(alert, at))) }
            td { (Text(summary)) }
        }
        "\n"
    }
}
