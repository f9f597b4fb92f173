//! One GPU's tile: utilization (the tile's colour), memory held, temperatures, power,
//! failure risk with its top reasons, state, holders, and the heat strip.

use maud::{Markup, html};

use super::heat::HeatStrip;
use super::units::{duration, gib, percent};
use crate::api::{GpuHealthView, GpuView};
use crate::config::{Holder, TeamConfig, team_of};
use crate::engine::risk::FEATURES;
use crate::html::{Text, shade};
use crate::model::{Liveness, ProcessSample};

/// Reasons shown with a GPU's risk.
pub(crate) const REASONS_SHOWN: usize = 3;
/// Holders listed on a tile; the rest are counted.
const HOLDERS_SHOWN: usize = 4;

/// The states a tile can be in, as `data-state` lists them (space-separated).
pub fn states(gpu: &GpuView<'_>, risk_threshold: f64) -> Vec<&'static str> {
    let mut states = Vec::new();
    if gpu.lost {
        states.push("lost");
    } else if !gpu.sample.up {
        // Listed by the driver but not answering, and never answered since the agent began.
        states.push("down");
    }
    if gpu.risk.as_ref().is_some_and(|r| r.score >= risk_threshold) {
        states.push("at-risk");
    }
    if !gpu.idle.ghosts.is_empty() {
        states.push("ghost");
    }
    if gpu.idle.allocated_idle || gpu.mig_findings.iter().any(|i| i.allocated_idle) {
        states.push("idle-allocated");
    }
    if states.is_empty() {
        states.push(if gpu.idle.unused {
            "free"
        } else if gpu.idle.idle_now {
            "idle"
        } else {
            "busy"
        });
    }
    states
}

/// What the tile needs besides the GPU.
pub(crate) struct TileContext<'a> {
    pub risk_threshold: f64,
    pub(crate) strip: Option<&'a HeatStrip>,
    pub teams: &'a [TeamConfig],
    pub hostname: &'a str,
    /// The GPU's health verdict.
    pub health: Option<&'a GpuHealthView<'a>>,
}

pub fn tile(gpu: &GpuView<'_>, cx: &TileContext<'_>) -> Markup {
    let sample = &gpu.sample;
    let score = gpu.risk.as_ref().map_or(0.0, |r| r.score);
    let states = states(gpu, cx.risk_threshold);
    let up = sample.up && !gpu.lost;
    // A GPU in MIG mode has no utilization of its own: its instances' activity by share.
    let utilization = (sample.utilization.gpu)
        .or_else(|| crate::engine::mig::utilization(sample))
        .filter(|_| up);
    html! {
        article.tile data-uuid=(Text(&sample.uuid)) data-risk=(format!("{score:.3}"))
            data-state=(states.join(" ")) data-health=(cx.health.map_or("", |h| h.state.as_str())) {
            header class=(shade(utilization)) {
                span.idx { "GPU " (sample.index) }
                span.util { (utilization.map_or_else(|| "–".to_string(), percent)) }
            }
            p.model { (Text(&sample.name)) " " span.uuid { (Text(&sample.uuid)) } }
            p.badges {
                @for state in &states { span.badge.(state) { (state) } }
                @if gpu.idle.allocated_idle {
                    span.since { "held idle " (duration(gpu.idle.allocated_idle_seconds)) }
                }
                (super::health::gpu(cx.health))
            }
            (readings(gpu))
            (risk(gpu, score, cx.risk_threshold))
            @if sample.mig_instances.is_empty() && gpu.mig_findings.is_empty() {
                (holders(gpu, cx))
            } @else {
                // Each instance's line names its holders.
                (super::mig::instances(gpu))
            }
            @if let Some(strip) = cx.strip {
                div.strip {
                    (strip)
                    p.axis {
                        span { "−" (strip.cells.len() as i64 * strip.cell_seconds / 3600) " h" }
                        span { "now" }
                    }
                }
            }
        }
        "\n"
    }
}

/// A bar of `ratio` (0–1) on a track, stretched to the width it is given.
pub(crate) fn bar(ratio: f64) -> Markup {
    html! {
        svg.bar viewBox="0 0 100 1" preserveAspectRatio="none" {
            rect.track width="100" height="1" {}
            rect.fill width=(format!("{:.1}", ratio * 100.0)) height="1" {}
        }
    }
}

fn readings(gpu: &GpuView<'_>) -> Markup {
    let sample = &gpu.sample;
    let memory = &sample.memory;
    let temperature = |t: Option<f64>| t.map_or_else(|| "–".to_string(), |t| format!("{t:.0}"));
    html! {
        dl.readings {
            @match (memory.used_bytes, memory.total_bytes) {
                (Some(used), Some(total)) if total > 0 => {
                    div {
                        dt { "memory" }
                        dd {
                            (gib(used)) " / " (gib(total)) " GiB"
                            (bar((used as f64 / total as f64).clamp(0.0, 1.0)))
                        }
                    }
                }
                (Some(used), _) => { div { dt { "memory" } dd { (gib(used)) " GiB" } } }
                _ => {}
            }
            div {
                dt { "°C gpu · hbm" }
                dd {
                    (temperature(sample.temperature_celsius)) " · "
                    (temperature(sample.memory_temperature_celsius))
                }
            }
            @if let Some(power) = sample.power_watts {
                div {
                    dt { "power" }
                    dd {
                        (format!("{power:.0}")) " W"
                        @if let Some(limit) = sample.power_limit_watts {
                            span.muted { " / " (format!("{limit:.0}")) }
                        }
                    }
                }
            }
        }
    }
}

fn risk(gpu: &GpuView<'_>, score: f64, threshold: f64) -> Markup {
    html! {
        div.risk.high[score >= threshold] {
            span.score { "risk " (format!("{score:.2}")) }
            @if let Some(risk) = &gpu.risk {
                @if let Some(rule) = &risk.rule {
                    " " span.rule { (Text(rule)) }
                }
                (reasons(risk.top(REASONS_SHOWN)))
            }
        }
    }
}

/// Reasons as a list: the feature's name (its meaning on hover) and its share of the score
/// in log-odds.
pub fn reasons<'a>(reasons: impl Iterator<Item = &'a crate::engine::risk::Contribution>) -> Markup {
    // A share that rounds to +0.00 explains nothing.
    let shown: Vec<_> = reasons.filter(|r| r.contribution >= 0.005).collect();
    let meaning = |feature: &str| {
        FEATURES
            .iter()
            .find(|(name, _)| *name == feature)
            .map_or("", |(_, meaning)| meaning)
    };
    html! {
        @if !shown.is_empty() {
            ul.reasons {
                @for reason in shown {
                    li title=(Text(meaning(&reason.feature))) {
                        (Text(&reason.feature)) " " b { (format!("+{:.2}", reason.contribution)) }
                    }
                }
            }
        }
    }
}

fn holders(gpu: &GpuView<'_>, cx: &TileContext<'_>) -> Markup {
    html! {
        @if !gpu.processes.is_empty() {
            ul.holders {
                @for process in gpu.processes.iter().take(HOLDERS_SHOWN) {
                    (holder(process, gpu, cx))
                }
                @if gpu.processes.len() > HOLDERS_SHOWN {
                    li.more { "and " (gpu.processes.len() - HOLDERS_SHOWN) " more" }
                }
            }
        }
    }
}

fn holder(p: &ProcessSample, gpu: &GpuView<'_>, cx: &TileContext<'_>) -> Markup {
    let ghost = gpu.idle.ghosts.iter().find(|g| g.pid == p.pid);
    let mut parts: Vec<Markup> = Vec::new();
    if let Some(user) = &p.user {
        parts.push(html! { b { (Text(user)) } });
    }
    match (&p.namespace, &p.pod) {
        (Some(ns), Some(pod)) => parts.push(html! { (Text(ns)) "/" (Text(pod)) }),
        (None, Some(pod)) => parts.push(html! { "pod " (Text(pod)) }),
        (Some(ns), None) => parts.push(html! { "ns " (Text(ns)) }),
        (None, None) => {}
    }
    if let Some(job) = &p.hpc_job {
        parts.push(html! { "job " (Text(job)) });
    }
    if !cx.teams.is_empty() {
        let holder = Holder {
            namespace: p.namespace.as_deref(),
            user: p.user.as_deref(),
            slurm_account: p.slurm_account.as_deref(),
            host: Some(cx.hostname),
        };
        parts.push(html! { "team " b { (Text(team_of(cx.teams, &holder))) } });
    }
    let why = ghost.map(|ghost| {
        let why = match ghost.liveness {
            Liveness::Gone => "process gone",
            Liveness::Zombie => "zombie",
            Liveness::Orphaned => "orphaned",
            Liveness::Running | Liveness::Unknown => "0% SM",
        };
        (why, duration(ghost.idle_seconds))
    });
    html! {
        li class=[ghost.map(|_| "ghost")] {
            span.who {
                @for (i, part) in parts.iter().enumerate() {
                    @if i > 0 { " · " }
                    (part)
                }
            }
            " "
            span.what {
                (Text(p.process.as_deref().unwrap_or("?"))) " pid " (p.pid)
                @if let Some(bytes) = p.used_memory_bytes { " · " (gib(bytes)) " GiB" }
                @if let Some(sm) = p.sm_utilization { " · SM " (percent(sm)) }
            }
            @if let Some((why, idle)) = why {
                " " span.badge.ghost { "ghost: " (why) ", idle " (idle) }
            }
        }
    }
}
