//! The health verdicts on the board: the node's state and action at the top, and on each
//! tile the GPU's state with the components behind it and the repair action (every
//! component's reason on hover), as `/api/v1/health` has them.

use std::fmt::Write;

use crate::api::{GpuHealthView, HealthDocument};
use crate::engine::health::{Action, State};
use crate::html::escape;

/// The node's verdict in the summary line: `node unhealthy: drain_and_reboot`.
pub fn write_node(out: &mut String, doc: &HealthDocument<'_>) {
    let state = doc.state.as_str();
    let _ = write!(
        out,
        "<span class=\"health {state}\" data-health=\"{state}\">node <b>{state}</b>"
    );
    if doc.action != Action::None {
        let _ = write!(out, ": {}", doc.action.as_str());
    }
    out.push_str("</span>");
}

/// One GPU's verdict among its tile's badges: its state, and when not plainly healthy the
/// components in it and the action; every such component's reason on hover.
pub fn write_gpu(out: &mut String, gpu: Option<&GpuHealthView<'_>>) {
    let Some(gpu) = gpu else {
        return;
    };
    let state = gpu.state.as_str();
    let noted =
        |c: &&crate::engine::health::Verdict| c.state != State::Healthy || c.action != Action::None;
    let reasons: Vec<String> = (gpu.components.iter())
        .filter(noted)
        .map(|c| {
            format!(
                "{} {}: {} ({})",
                c.component,
                c.state.as_str(),
                c.reason,
                c.action.as_str()
            )
        })
        .collect();
    let _ = write!(
        out,
        "<span class=\"badge {state}\" title=\"{}\">{state}</span>",
        escape(&reasons.join("\n"))
    );
    let worst: Vec<&str> = (gpu.components.iter())
        .filter(noted)
        .filter(|c| c.state == gpu.state)
        .map(|c| &*c.component)
        .collect();
    if worst.is_empty() {
        return;
    }
    let _ = write!(
        out,
        "<span class=\"health {state}\" title=\"{}\">{}",
        escape(&reasons.join("\n")),
        escape(&worst.join(", "))
    );
    if gpu.action != Action::None {
        let _ = write!(out, " → <b>{}</b>", gpu.action.as_str());
    }
    out.push_str("</span>");
}
