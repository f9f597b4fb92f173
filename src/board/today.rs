//! Today's cost and waste: the engine's cost counters minus their values at the start of
//! the day (UTC), and the section of the board that shows them.
//!
//! The engine keeps running totals (busy and idle cost per GPU, busy and idle seconds per
//! holder; `src/engine/cost.rs`); the board wants "today". [`Today`] remembers the totals
//! at the first publication of each day and subtracts them. It lives in the agent's
//! memory only: after a restart "today" counts from the restart, and the section says
//! since when it counts.

use std::collections::BTreeMap;
use std::fmt::Write;

use chrono::{DateTime, NaiveDate, Utc};

use crate::api::GpusDocument;
use crate::html::escape;

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
    pub busy_cost: f64,
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
pub(super) fn write_section(out: &mut String, today: &TodayView, currency: &str) {
    let currency = escape(currency);
    out.push_str("<section class=\"today\"><h2>Today");
    if let Some(since) = today.since {
        let _ = write!(
            out,
            " <small>since {} UTC</small>",
            since.format("%Y-%m-%d %H:%M")
        );
    }
    out.push_str("</h2>");
    let total = today.busy_cost + today.idle_cost;
    if total > 0.0 || today.hourly_cost > 0.0 {
        let waste = if total > 0.0 {
            today.idle_cost / total
        } else {
            0.0
        };
        let _ = write!(
            out,
            "<dl class=\"figures\"><div><dt>busy</dt><dd>{:.2} {currency}</dd></div>\
             <div><dt>idle (waste)</dt><dd class=\"warn\">{:.2} {currency}</dd></div>\
             <div><dt>waste share</dt><dd>{:.0}%</dd></div>\
             <div><dt>now</dt><dd>{:.2} {currency}/h</dd></div></dl>",
            today.busy_cost,
            today.idle_cost,
            waste * 100.0,
            today.hourly_cost,
        );
    } else {
        out.push_str(
            "<p class=\"muted\">No price is configured: set <code>[cost] hourly_price</code> or \
             <code>purchase_price</code> to see money.</p>",
        );
    }
    if today.holders.is_empty() {
        out.push_str("<p class=\"muted\">No holder has left a GPU idle today.</p>");
    } else {
        out.push_str(
            "<table><thead><tr><th>holder</th><th>idle GPU-h</th><th>busy GPU-h</th></tr></thead><tbody>",
        );
        for holder in today.holders.iter().take(HOLDERS_SHOWN) {
            let _ = write!(
                out,
                "<tr><td>{}</td><td class=\"num warn\">{:.1}</td><td class=\"num\">{:.1}</td></tr>",
                escape(&holder.owner),
                holder.idle_seconds / 3600.0,
                holder.busy_seconds / 3600.0,
            );
        }
        out.push_str("</tbody></table>");
    }
    out.push_str("</section>\n");
}
