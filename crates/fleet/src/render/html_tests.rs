//! The report's HTML with text from outside in every place it lands: names of teams,
//! owners, hosts, GPUs, reasons, health components and the currency come from labels in a
//! store anyone scraped by it can write, and stay text.

use chrono::{DateTime, Utc};

use super::*;
use crate::figures::{Capacity, Energy, RiskEntry, Scale, Tco};
use crate::hourly::{NodeHeatmap, NodeRow};
use crate::reading::StoreUse;
use crate::report::{FleetReport, IdleHolding, Usage};
use crate::report_health::{ComponentVerdict, GpuVerdict};

const HOSTILE: &str = "<script>alert('x')</script>";

fn hostile(what: &str) -> String {
    format!("{what}\"><img src=x>{HOSTILE}&")
}

fn report() -> Report {
    let at: DateTime<Utc> = "2026-03-02T00:00:00Z".parse().expect("a time");
    let usage = Usage {
        gpu_hours: 10.0,
        busy_gpu_hours: 4.0,
        idle_gpu_hours: 6.0,
        efficiency: 0.4,
        waste_cost: 12.0,
    };
    Report {
        from: at - chrono::Duration::days(1),
        to: at,
        source: "native",
        store: StoreUse::default(),
        currency: hostile("currency"),
        teams: vec![TeamReport {
            team: hostile("team"),
            usage: usage.clone(),
            previous: usage,
            top_idle: vec![IdleHolding {
                owner: hostile("owner"),
                host: hostile("host"),
                gpu: hostile("gpu"),
                idle_gpu_hours: 6.0,
                waste_cost: 12.0,
            }],
        }],
        fleet: FleetReport {
            gpus: 1,
            utilization: 0.4,
            scale: Scale {
                direction: hostile("direction"),
                gpus: 1,
                reason: hostile("reason"),
            },
            capacity: Capacity::default(),
            tco: Tco {
                cheaper: hostile("cheaper"),
                ..Tco::default()
            },
            energy: Energy {
                night_window: (2, 6),
                night_idle_hosts: vec![hostile("night")],
                kwh: 1.0,
                cost: 0.5,
                weekend_idle_hosts: Vec::new(),
                weekend_kwh: 0.0,
                weekend_cost: 0.0,
                note: hostile("note"),
            },
            risk: vec![RiskEntry {
                host: hostile("host"),
                gpu: hostile("gpu"),
                uuid: hostile("uuid"),
                risk: 0.9,
                reasons: vec![hostile("reason")],
                health: GpuVerdict {
                    state: "unhealthy",
                    action: Some(hostile("action")),
                    since: Some(at),
                    components: vec![ComponentVerdict {
                        component: hostile("component"),
                        state: "unhealthy",
                        action: None,
                    }],
                },
            }],
            heatmap: vec![HeatCell {
                day: hostile("day"),
                hour: 3,
                utilization: 0.5,
            }],
            node_heatmap: NodeHeatmap {
                start: Some(at),
                step_seconds: 3600,
                hosts: vec![NodeRow {
                    host: hostile("node"),
                    utilization: vec![Some(0.5), None],
                }],
            },
        },
    }
}

#[test]
fn text_from_a_store_is_shown_as_text_in_every_place() {
    let page = html(&report());
    assert!(!page.contains("<script>"), "{page}");
    assert!(!page.contains("<img"), "{page}");
    let escaped = "&quot;&gt;&lt;img src=x&gt;&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&amp;";
    for what in [
        "currency",
        "team",
        "owner",
        "host",
        "gpu",
        "direction",
        "reason",
        "cheaper",
        "night",
        "note",
        "uuid",
        "action",
        "component",
        "day",
        "node",
    ] {
        assert!(
            page.contains(&format!("{what}{escaped}")),
            "{what} shown escaped: {page}"
        );
    }
    // The whole page, as the browser will read it: one style sheet, then the body.
    assert!(page.starts_with("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"));
    assert_eq!(page.matches("<style>").count(), 1);
    assert!(page.ends_with("</table></body></html>\n"));
}
