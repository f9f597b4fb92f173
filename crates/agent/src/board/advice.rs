//! The scaling and placement section: what `/api/v1/recommendations` advises, in words.

use maud::{Markup, html};

use crate::api::Recommendations;
use crate::engine::capacity::Direction;
use crate::html::Text;

const GIB: f64 = (1u64 << 30) as f64;

pub(super) fn section(advice: &Recommendations<'_>) -> Markup {
    let scaling = &advice.scaling;
    let (class, headline) = match scaling.direction {
        Direction::Out => ("warn", "scale out"),
        Direction::In => ("cool", "scale in"),
        Direction::Hold => ("ok", "hold"),
    };
    let placement = &advice.placement;
    html! {
        section.advice {
            h2 { "Scaling and placement" }
            p.headline.(class) { (headline) }
            p { (Text(&scaling.reason)) }
            dl.figures {
                div { dt { "demand" } dd { (format!("{:.1}", scaling.demand_gpus)) " GPUs" } }
                div { dt { "recommended" } dd { (scaling.recommended_gpus) " GPUs" } }
                div {
                    dt { "busy / idle" }
                    dd {
                        (format!("{:.0}% / {:.0}%", scaling.busy_share * 100.0, scaling.idle_share * 100.0))
                    }
                }
            }
            dl.figures {
                div { dt { "free GPUs" } dd { (placement.free_gpus) } }
                div {
                    dt { "largest free memory" }
                    dd { (format!("{:.1}", placement.largest_free_memory_bytes as f64 / GIB)) " GiB" }
                }
                div {
                    dt { "stranded free memory" }
                    dd { (format!("{:.0}", placement.fragmentation_ratio * 100.0)) "%" }
                }
            }
            @if !placement.slots.is_empty() {
                p.slots {
                    @for slot in &placement.slots {
                        span.slot.held[slot.allocated] {
                            "GPU " (slot.index) " · " (format!("{:.0}", slot.free_bytes as f64 / GIB)) " GiB free"
                        }
                    }
                }
            }
            p.muted {
                "Ask whether a job fits: "
                a href="/api/v1/recommendations?gpus=2&memory_gib=40" {
                    "/api/v1/recommendations?gpus=2&memory_gib=40"
                }
            }
        }
        "\n"
    }
}
