//! One GPU's tile: utilization (the tile's colour), memory held, temperatures, power,
//! failure risk with its top reasons, state, holders, and the heat strip.

use std::fmt::Write;

use super::heat::HeatStrip;
use super::units::{duration, gib, percent};
use crate::api::{GpuHealthView, GpuView};
use crate::config::{Holder, TeamConfig, team_of};
use crate::engine::risk::FEATURES;
use crate::html::escape;
use crate::html::shade;
use crate::model::{Liveness, ProcessSample};

/// Reasons shown with a GPU's risk.
pub const REASONS_SHOWN: usize = 3;
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
pub struct TileContext<'a> {
    pub risk_threshold: f64,
    pub strip: Option<&'a HeatStrip>,
    pub teams: &'a [TeamConfig],
    pub hostname: &'a str,
    /// The GPU's health verdict.
    pub health: Option<&'a GpuHealthView<'a>>,
}

pub fn write_tile(out: &mut String, gpu: &GpuView<'_>, cx: &TileContext<'_>) {
    let sample = &gpu.sample;
    let score = gpu.risk.as_ref().map_or(0.0, |r| r.score);
    let states = states(gpu, cx.risk_threshold);
    let up = sample.up && !gpu.lost;
    // A GPU in MIG mode has no utilization of its own: its instances' activity by share.
    let utilization = (sample.utilization.gpu)
        .or_else(|| crate::engine::mig::utilization(sample))
        .filter(|_| up);
    let _ = write!(
        out,
        "<article class=\"tile\" data-uuid=\"{}\" data-risk=\"{score:.3}\" data-state=\"{}\" \
         data-health=\"{}\">\
         <header class=\"{}\"><span class=\"idx\">GPU {}</span><span class=\"util\">{}</span></header>\
         <p class=\"model\">{} <span class=\"uuid\">{}</span></p><p class=\"badges\">",
        escape(&sample.uuid),
        states.join(" "),
        cx.health.map_or("", |h| h.state.as_str()),
        shade(utilization),
        sample.index,
        utilization.map_or_else(|| "–".to_string(), percent),
        escape(&sample.name),
        escape(&sample.uuid),
    );
    for state in &states {
        let _ = write!(out, "<span class=\"badge {state}\">{state}</span>");
    }
    if gpu.idle.allocated_idle {
        let _ = write!(
            out,
            "<span class=\"since\">held idle {}</span>",
            duration(gpu.idle.allocated_idle_seconds)
        );
    }
    super::health::write_gpu(out, cx.health);
    out.push_str("</p>");
    write_readings(out, gpu);
    write_risk(out, gpu, score, cx.risk_threshold);
    match sample.mig_instances.is_empty() && gpu.mig_findings.is_empty() {
        true => write_holders(out, gpu, cx),
        // Each instance's line names its holders.
        false => super::mig::write_instances(out, gpu),
    }
    if let Some(strip) = cx.strip {
        out.push_str("<div class=\"strip\">");
        strip.write_svg(out);
        let hours = strip.cells.len() as i64 * strip.cell_seconds / 3600;
        let _ = write!(
            out,
            "<p class=\"axis\"><span>−{hours} h</span><span>now</span></p></div>"
        );
    }
    out.push_str("</article>\n");
}

fn write_readings(out: &mut String, gpu: &GpuView<'_>) {
    let sample = &gpu.sample;
    out.push_str("<dl class=\"readings\">");
    let memory = &sample.memory;
    match (memory.used_bytes, memory.total_bytes) {
        (Some(used), Some(total)) if total > 0 => {
            let ratio = (used as f64 / total as f64).clamp(0.0, 1.0);
            let _ = write!(
                out,
                "<div><dt>memory</dt><dd>{} / {} GiB\
                 <svg class=\"bar\" viewBox=\"0 0 100 1\" preserveAspectRatio=\"none\">\
                 <rect class=\"track\" width=\"100\" height=\"1\"/>\
                 <rect class=\"fill\" width=\"{:.1}\" height=\"1\"/></svg></dd></div>",
                gib(used),
                gib(total),
                ratio * 100.0,
            );
        }
        (Some(used), _) => {
            let _ = write!(out, "<div><dt>memory</dt><dd>{} GiB</dd></div>", gib(used));
        }
        _ => {}
    }
    let temperature = |t: Option<f64>| t.map_or_else(|| "–".to_string(), |t| format!("{t:.0}"));
    let _ = write!(
        out,
        "<div><dt>°C gpu · hbm</dt><dd>{} · {}</dd></div>",
        temperature(sample.temperature_celsius),
        temperature(sample.memory_temperature_celsius),
    );
    if let Some(power) = sample.power_watts {
        let _ = write!(out, "<div><dt>power</dt><dd>{power:.0} W");
        if let Some(limit) = sample.power_limit_watts {
            let _ = write!(out, "<span class=\"muted\"> / {limit:.0}</span>");
        }
        out.push_str("</dd></div>");
    }
    out.push_str("</dl>");
}

fn write_risk(out: &mut String, gpu: &GpuView<'_>, score: f64, threshold: f64) {
    let class = if score >= threshold {
        "risk high"
    } else {
        "risk"
    };
    let _ = write!(
        out,
        "<div class=\"{class}\"><span class=\"score\">risk {score:.2}</span>"
    );
    if let Some(risk) = &gpu.risk {
        if let Some(rule) = &risk.rule {
            let _ = write!(out, " <span class=\"rule\">{}</span>", escape(rule));
        }
        write_reasons(out, risk.top(REASONS_SHOWN));
    }
    out.push_str("</div>");
}

/// Reasons as a list: the feature's name (its meaning on hover) and its share of the score
/// in log-odds.
pub fn write_reasons<'a>(
    out: &mut String,
    reasons: impl Iterator<Item = &'a crate::engine::risk::Contribution>,
) {
    let mut any = false;
    // A share that rounds to +0.00 explains nothing.
    for reason in reasons.filter(|r| r.contribution >= 0.005) {
        if !any {
            out.push_str("<ul class=\"reasons\">");
            any = true;
        }
        let meaning = FEATURES
            .iter()
            .find(|(name, _)| *name == reason.feature)
            .map_or("", |(_, meaning)| meaning);
        let _ = write!(
            out,
            "<li title=\"{}\">{} <b>+{:.2}</b></li>",
            escape(meaning),
            escape(&reason.feature),
            reason.contribution,
        );
    }
    if any {
        out.push_str("</ul>");
    }
}

fn write_holders(out: &mut String, gpu: &GpuView<'_>, cx: &TileContext<'_>) {
    if gpu.processes.is_empty() {
        return;
    }
    out.push_str("<ul class=\"holders\">");
    for process in gpu.processes.iter().take(HOLDERS_SHOWN) {
        write_holder(out, process, gpu, cx);
    }
    if gpu.processes.len() > HOLDERS_SHOWN {
        let _ = write!(
            out,
            "<li class=\"more\">and {} more</li>",
            gpu.processes.len() - HOLDERS_SHOWN
        );
    }
    out.push_str("</ul>");
}

fn write_holder(out: &mut String, p: &ProcessSample, gpu: &GpuView<'_>, cx: &TileContext<'_>) {
    let ghost = gpu.idle.ghosts.iter().find(|g| g.pid == p.pid);
    let _ = write!(
        out,
        "<li{}><span class=\"who\">",
        if ghost.is_some() {
            " class=\"ghost\""
        } else {
            ""
        }
    );
    let mut parts: Vec<String> = Vec::new();
    if let Some(user) = &p.user {
        parts.push(format!("<b>{}</b>", escape(user)));
    }
    match (&p.namespace, &p.pod) {
        (Some(ns), Some(pod)) => parts.push(format!("{}/{}", escape(ns), escape(pod))),
        (None, Some(pod)) => parts.push(format!("pod {}", escape(pod))),
        (Some(ns), None) => parts.push(format!("ns {}", escape(ns))),
        (None, None) => {}
    }
    if let Some(job) = &p.hpc_job {
        parts.push(format!("job {}", escape(job)));
    }
    if !cx.teams.is_empty() {
        let holder = Holder {
            namespace: p.namespace.as_deref(),
            user: p.user.as_deref(),
            slurm_account: p.slurm_account.as_deref(),
            host: Some(cx.hostname),
        };
        parts.push(format!(
            "team <b>{}</b>",
            escape(team_of(cx.teams, &holder))
        ));
    }
    out.push_str(&parts.join(" · "));
    let _ = write!(
        out,
        "</span> <span class=\"what\">{} pid {}",
        escape(p.process.as_deref().unwrap_or("?")),
        p.pid
    );
    if let Some(bytes) = p.used_memory_bytes {
        let _ = write!(out, " · {} GiB", gib(bytes));
    }
    if let Some(sm) = p.sm_utilization {
        let _ = write!(out, " · SM {}", percent(sm));
    }
    out.push_str("</span>");
    if let Some(ghost) = ghost {
        let why = match ghost.liveness {
            Liveness::Gone => "process gone",
            Liveness::Zombie => "zombie",
            Liveness::Orphaned => "orphaned",
            Liveness::Running | Liveness::Unknown => "0% SM",
        };
        let _ = write!(
            out,
            " <span class=\"badge ghost\">ghost: {why}, idle {}</span>",
            duration(ghost.idle_seconds)
        );
    }
    out.push_str("</li>");
}
