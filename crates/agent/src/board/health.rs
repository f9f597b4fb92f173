//! The health verdicts on the board: the node's state and action at the top, and on each
//! tile the GPU's state with the components behind it and the repair action (every
//! component's reason on hover), as `/api/v1/health` has them.

use maud::{Markup, html};

use crate::api::{GpuHealthView, HealthDocument};
use crate::engine::health::{Action, State};
use crate::html::Text;

/// The node's verdict in the summary line: `node unhealthy: drain_and_reboot`.
pub fn node(doc: &HealthDocument<'_>) -> Markup {
    let state = doc.state.as_str();
    html! {
        span.health.(state) data-health=(state) {
            "node " b { (state) }
            @if doc.action != Action::None { ": " (doc.action.as_str()) }
        }
    }
}

/// One GPU's verdict among its tile's badges: its state, and when not plainly healthy the
/// components in it and the action; every such component's reason on hover.
pub fn gpu(gpu: Option<&GpuHealthView<'_>>) -> Markup {
    let Some(gpu) = gpu else {
        return html! {};
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
    let reasons = Text(reasons.join("\n"));
    let worst: Vec<&str> = (gpu.components.iter())
        .filter(noted)
        .filter(|c| c.state == gpu.state)
        .map(|c| &*c.component)
        .collect();
    html! {
        span.badge.(state) title=(reasons) { (state) }
        @if !worst.is_empty() {
            span.health.(state) title=(reasons) {
                (Text(worst.join(", ")))
                @if gpu.action != Action::None { " → " b { (gpu.action.as_str()) } }
            }
        }
    }
}
