//! Today's cost and waste: the engine's cost counters minus their values at the start of
//! the day (UTC), and the section of the board that shows them.
//!
//! The engine keeps running totals (busy and idle cost per GPU, busy and idle seconds per
//! holder; `crates/agent/src/engine/cost.rs`); the board wants "today". [`Today`] remembers the totals
//! at the first publication of each day and subtracts them. It lives in the agent's
//! memory only: after a restart "today" counts from the restart, and the section says
//! since when it counts.

use std::collections::BTreeMap;

use chrono::{DateTime, NaiveDate, Utc};
use maud::{Markup, html};

use crate::api::GpusDocument;
use crate::html::Text;

/// The totals at the start of the day (or at the agent's start, or at a GPU's or holder's
/// first appearance that day).
#[derive(Debug, Clone, Default)]
pub struct Today {
    day: Option<NaiveDate>,
    since: Option<DateTime<Utc>>,
    /// Busy and idle cost by GPU UUID.
    gpus: BTreeMap<String, (f64, f64)>,
    /// Busy and idle seconds by holder, summed over GPUs.
    owners: BTreeMap<String, (f64, f64)>,
}

/// One holder's GPU time today.
#[derive(Debug, Clone, PartialEq)]
pub struct HolderToday {
    pub owner: String,
    pub busy_seconds: f64,
    pub idle_seconds: f64,
}

/// What the board shows of today.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TodayView {
    /// Start of the counting: midnight UTC, or later when the agent started later.
    pub since: Option<DateTime<Utc>>,
    pub(crate) busy_cost: f64,
    /// Cost of idle GPU time: the waste.
    pub idle_cost: f64,
    /// Cost per hour at the last sample's power, all GPUs.
    pub hourly_cost: f64,
    /// Holders with idle time today, most idle first.
    pub holders: Vec<HolderToday>,
}

impl Today {
    /// Today's part of the totals in `gpus`, moving the baseline when the day changed.
    pub fn update(&mut self, gpus: &GpusDocument<'_>, at: DateTime<Utc>) -> TodayView {
        let day = at.date_naive();
        if self.day != Some(day) {
            let midnight = day.and_hms_opt(0, 0, 0).map(|t| t.and_utc());
            // The first day counts from the first publication, the next ones from midnight.
            self.since = if self.day.is_none() {
                Some(at)
            } else {
                midnight
            };
            self.day = Some(day);
            self.gpus.clear();
            self.owners.clear();
        }
        let mut view = TodayView {
            since: self.since,
            ..TodayView::default()
        };
        let mut owners: BTreeMap<&str, (f64, f64)> = BTreeMap::new();
        for gpu in &gpus.gpus {
            let cost = &gpu.cost;
            let base = *self
                .gpus
                .entry(gpu.sample.uuid.clone())
                .or_insert((cost.busy, cost.idle));
            // Totals only grow; a smaller one (state reset) starts the GPU's day afresh.
            view.busy_cost += (cost.busy - base.0).max(0.0);
            view.idle_cost += (cost.idle - base.1).max(0.0);
            view.hourly_cost += cost.hourly;
            for (owner, _team, busy, idle) in &cost.owners {
                let sum = owners.entry(owner).or_default();
                sum.0 += busy;
                sum.1 += idle;
            }
        }
        for (owner, (busy, idle)) in owners {
            let base = *self.owners.entry(owner.to_string()).or_insert((busy, idle));
            let idle_seconds = (idle - base.1).max(0.0);
            if idle_seconds > 0.0 {
                view.holders.push(HolderToday {
                    owner: owner.to_string(),
                    busy_seconds: (busy - base.0).max(0.0),
                    idle_seconds,
                });
            }
        }
        view.holders.sort_by(|a, b| {
            b.idle_seconds
                .total_cmp(&a.idle_seconds)
                .then_with(|| a.owner.cmp(&b.owner))
        });
        view
    }
}

/// Holders listed in the waste table.
const HOLDERS_SHOWN: usize = 8;

/// The "Today" section.
pub(super) fn section(today: &TodayView, currency: &str) -> Markup {
    let currency = Text(currency);
    let total = today.busy_cost + today.idle_cost;
    let waste = if total > 0.0 {
        today.idle_cost / total
    } else {
        0.0
    };
    html! {
        section.today {
            h2 {
                "Today"
                @if let Some(since) = today.since {
                    " " small { "since " (since.format("%Y-%m-%d %H:%M")) " UTC" }
                }
            }
            @if total > 0.0 || today.hourly_cost > 0.0 {
                dl.figures {
                    div { dt { "busy" } dd { (format!("{:.2}", today.busy_cost)) " " (currency) } }
                    div {
                        dt { "idle (waste)" }
                        dd.warn { (format!("{:.2}", today.idle_cost)) " " (currency) }
                    }
                    div { dt { "waste share" } dd { (format!("{:.0}%", waste * 100.0)) } }
                    div { dt { "now" } dd { (format!("{:.2}", today.hourly_cost)) " " (currency) "/h" } }
                }
            } @else {
                p.muted {
                    "No price is configured: set " code { "[cost] hourly_price" } " or "
                    code { "purchase_price" } " to see money."
                }
            }
            @if today.holders.is_empty() {
                p.muted { "No holder has left a GPU idle today." }
            } @else {
                table {
                    thead { tr { th { "holder" } th { "idle GPU-h" } th { "busy GPU-h" } } }
                    tbody {
                        @for holder in today.holders.iter().take(HOLDERS_SHOWN) {
                            tr {
                                td { (Text(&holder.owner)) }
                                td.num.warn { (format!("{:.1}", holder.idle_seconds / 3600.0)) }
                                td.num { (format!("{:.1}", holder.busy_seconds / 3600.0)) }
                            }
                        }
                    }
                }
            }
        }
        "\n"
    }
}
