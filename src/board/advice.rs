//! The scaling and placement section: what `/api/v1/recommendations` advises, in words.

use std::fmt::Write;

use crate::api::Recommendations;
use crate::engine::capacity::Direction;
use crate::html::escape;

const GIB: f64 = (1u64 << 30) as f64;

pub(super) fn write_section(out: &mut String, advice: &Recommendations<'_>) {
    let scaling = &advice.scaling;
    let (class, headline) = match scaling.direction {
        Direction::Out => ("warn", "scale out"),
        Direction::In => ("cool", "scale in"),
        Direction::Hold => ("ok", "hold"),
    };
    let _ = write!(
        out,
        "<section class=\"advice\"><h2>Scaling and placement</h2>\
         <p class=\"headline {class}\">{headline}</p><p>{}</p>\
         <dl class=\"figures\"><div><dt>demand</dt><dd>{:.1} GPUs</dd></div>\
         <div><dt>recommended</dt><dd>{} GPUs</dd></div>\
         <div><dt>busy / idle</dt><dd>{:.0}% / {:.0}%</dd></div></dl>",
        escape(&scaling.reason),
        scaling.demand_gpus,
        scaling.recommended_gpus,
        scaling.busy_share * 100.0,
        scaling.idle_share * 100.0,
    );
    let placement = &advice.placement;
    let _ = write!(
        out,
        "<dl class=\"figures\"><div><dt>free GPUs</dt><dd>{}</dd></div>\
         <div><dt>largest free memory</dt><dd>{:.1} GiB</dd></div>\
         <div><dt>stranded free memory</dt><dd>{:.0}%</dd></div></dl>",
        placement.free_gpus,
        placement.largest_free_memory_bytes as f64 / GIB,
        placement.fragmentation_ratio * 100.0,
    );
    if !placement.slots.is_empty() {
        out.push_str("<p class=\"slots\">");
        for slot in &placement.slots {
            let _ = write!(
                out,
                "<span class=\"slot{}\">GPU {} · {:.0} GiB free</span>",
                if slot.allocated { " held" } else { "" },
                slot.index,
                slot.free_bytes as f64 / GIB,
            );
        }
        out.push_str("</p>");
    }
    out.push_str(
        "<p class=\"muted\">Ask whether a job fits: \
         <a href=\"/api/v1/recommendations?gpus=2&amp;memory_gib=40\">/api/v1/recommendations?gpus=2&amp;memory_gib=40</a></p>\
         </section>\n",
    );
}
