//! The report as Markdown (short enough for a chat message) and as one self-contained HTML
//! file (inline CSS and SVG, no external asset: readable offline and as an attachment).

use std::fmt::Write as _;

use super::report::{HeatCell, NodeHeatmap, Report, TeamReport};
use super::report_health::GpuVerdict;
use crate::html::{escape, shade};

/// Chat services cut long messages (Slack's section text at 3,000 characters, DingTalk's and
/// WeCom's Markdown at 4,096 bytes): the Markdown stays under this.
pub const MARKDOWN_LIMIT: usize = 3_800;

/// The report as Markdown: one table of teams, then the fleet in a few lines.
pub fn markdown(report: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "## GPU usage {} → {}\n",
        report.from.format("%Y-%m-%d %H:%M"),
        report.to.format("%Y-%m-%d %H:%M UTC")
    );
    let _ = writeln!(
        out,
        "| team | GPU-h held | busy | idle | efficiency | waste ({}) | vs before |",
        report.currency
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|---:|");
    let mut rows = String::new();
    let mut left_out = 0;
    for team in &report.teams {
        let row = team_row(team);
        if out.len() + rows.len() + row.len() > MARKDOWN_LIMIT - 900 {
            left_out += 1;
            continue;
        }
        rows.push_str(&row);
    }
    out.push_str(&rows);
    if left_out > 0 {
        let _ = writeln!(
            out,
            "\n_{left_out} smaller teams left out; see the HTML report._"
        );
    }
    let fleet = &report.fleet;
    let _ = writeln!(
        out,
        "\n**Fleet:** {} GPUs, {:.0}% mean utilization; scaling: **{}** ({} GPUs) — {}.",
        fleet.gpus,
        fleet.utilization * 100.0,
        fleet.scale.direction,
        fleet.scale.gpus,
        fleet.scale.reason
    );
    let _ = writeln!(
        out,
        "**Capacity:** {:.1} GPUs of work, {:+.1}% a month → {} GPUs recommended ({} to buy). Own vs rent: {}.",
        fleet.capacity.forecast_demand_gpus,
        fleet.capacity.growth * 100.0,
        fleet.capacity.recommended_gpus,
        fleet.capacity.gpus_to_buy,
        fleet.tco.cheaper
    );
    if !fleet.energy.night_idle_hosts.is_empty() {
        let hosts = fleet.energy.night_idle_hosts.join(", ");
        let hosts = shorten(&hosts, 300);
        let _ = writeln!(
            out,
            "**Night-idle hosts** ({:02}–{:02} UTC): {hosts}: {:.1} kWh, {:.2} {} in the period.",
            fleet.energy.night_window.0,
            fleet.energy.night_window.1,
            fleet.energy.kwh,
            fleet.energy.cost,
            report.currency
        );
    }
    if !fleet.risk.is_empty() {
        let _ = writeln!(out, "**Most at risk:**");
        // The three highest scores, and any GPU unhealthy at the end: those leave service.
        let shown = fleet
            .risk
            .iter()
            .enumerate()
            .filter(|(k, r)| (*k < 3 && r.risk >= 0.1) || r.health.is_unhealthy())
            .take(6);
        for (_, entry) in shown {
            let _ = writeln!(
                out,
                "- {} GPU {} ({:.2}, {}): {}",
                entry.host,
                entry.gpu,
                entry.risk,
                verdict_text(&entry.health),
                entry.reasons.join(", ")
            );
        }
    }
    let _ = writeln!(out, "_{}_", read_line(report));
    if out.len() > MARKDOWN_LIMIT {
        out = shorten(&out, MARKDOWN_LIMIT);
    }
    out
}

/// What the report was read from: the recording rules' hourly records, raw samples, or
/// both, and for how many of the period's hours.
pub fn read_line(report: &Report) -> String {
    let store = &report.store;
    match (store.recorded_hours, store.raw_hours) {
        (0, _) => format!(
            "Read from raw samples ({} metrics, scraped every {}s): no recording rules in the store for the period.",
            report.source, store.scrape_interval_seconds
        ),
        (recorded, 0) => format!(
            "Read from the recording rules' hourly records ({} metrics): all {recorded} hours.",
            report.source
        ),
        (recorded, raw) => format!(
            "Read from the recording rules' hourly records for {recorded} hours and from raw samples for {raw} ({} metrics).",
            report.source
        ),
    }
}

fn team_row(team: &TeamReport) -> String {
    let change = if team.previous.gpu_hours > 0.0 {
        format!(
            "{:+.0}%",
            (team.usage.gpu_hours / team.previous.gpu_hours - 1.0) * 100.0
        )
    } else {
        "new".to_string()
    };
    format!(
        "| {} | {:.1} | {:.1} | {:.1} | {:.0}% | {:.2} | {change} |\n",
        markdown_cell(&team.team),
        team.usage.gpu_hours,
        team.usage.busy_gpu_hours,
        team.usage.idle_gpu_hours,
        team.usage.efficiency * 100.0,
        team.usage.waste_cost
    )
}

/// A table cell: pipes and line breaks would break the table.
fn markdown_cell(text: &str) -> String {
    text.replace('|', "\\|").replace(['\n', '\r'], " ")
}

/// `text` cut to at most `limit` bytes at a character boundary, marked when cut.
fn shorten(text: &str, limit: usize) -> String {
    if text.len() <= limit {
        return text.to_string();
    }
    let mut end = limit.saturating_sub(3);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

const STYLE: &str = "body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#1b1f24;background:#fff}\
h1{font-size:20px}h2{font-size:16px;margin-top:28px}table{border-collapse:collapse}\
th,td{padding:4px 10px;border-bottom:1px solid #ddd;text-align:left}\
.n{text-align:right;font-variant-numeric:tabular-nums}.muted{color:#667}svg text{font:10px sans-serif}\
.u0{fill:#f0f4f8}.u1{fill:#d9e6f2}.u2{fill:#c2d7ec}.u3{fill:#a9c6e3}.u4{fill:#8fb3d9}\
.u5{fill:#7399cb}.u6{fill:#5a82bd}.u7{fill:#416aad}.u8{fill:#2b559c}.u9{fill:#18418a}\
.u10{fill:#0b2f73}.un{fill:#fff}.unhealthy{color:#b00020;font-weight:600}.degraded{color:#9a6700}\
.unknown{color:#667}";

/// The report as one HTML file.
pub fn html(report: &Report) -> String {
    let mut out = String::new();
    let title = format!(
        "GPU usage {} → {}",
        report.from.format("%Y-%m-%d"),
        report.to.format("%Y-%m-%d")
    );
    let _ = write!(
        out,
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title><style>{STYLE}</style></head><body><h1>{}</h1>",
        escape(&title),
        escape(&title)
    );
    let _ = write!(
        out,
        "<p class=\"muted\">{} → {} · source: {} · {} GPUs · mean utilization {:.0}%</p>",
        report.from.format("%Y-%m-%d %H:%M"),
        report.to.format("%Y-%m-%d %H:%M UTC"),
        report.source,
        report.fleet.gpus,
        report.fleet.utilization * 100.0
    );
    let _ = write!(out, "<p class=\"muted\">{}</p>", escape(&read_line(report)));
    out.push_str("<h2>Teams</h2><table><tr><th>team</th><th class=\"n\">GPU-h held</th><th class=\"n\">busy</th><th class=\"n\">idle</th><th class=\"n\">efficiency</th>");
    let _ = write!(
        out,
        "<th class=\"n\">waste ({})</th><th class=\"n\">held before</th></tr>",
        escape(&report.currency)
    );
    for team in &report.teams {
        let _ = write!(
            out,
            "<tr><td>{}</td><td class=\"n\">{:.1}</td><td class=\"n\">{:.1}</td><td class=\"n\">{:.1}</td><td class=\"n\">{:.0}%</td><td class=\"n\">{:.2}</td><td class=\"n\">{:.1}</td></tr>",
            escape(&team.team),
            team.usage.gpu_hours,
            team.usage.busy_gpu_hours,
            team.usage.idle_gpu_hours,
            team.usage.efficiency * 100.0,
            team.usage.waste_cost,
            team.previous.gpu_hours
        );
    }
    out.push_str("</table><h2>Largest idle holdings</h2><table><tr><th>team</th><th>owner</th><th>host</th><th class=\"n\">GPU</th><th class=\"n\">idle GPU-h</th><th class=\"n\">waste</th></tr>");
    let mut idle: Vec<_> = report
        .teams
        .iter()
        .flat_map(|t| t.top_idle.iter().map(move |i| (t, i)))
        .collect();
    idle.sort_by(|a, b| b.1.idle_gpu_hours.total_cmp(&a.1.idle_gpu_hours));
    for (team, idle) in idle.into_iter().take(10) {
        let _ = write!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{:.1}</td><td class=\"n\">{:.2}</td></tr>",
            escape(&team.team),
            escape(&idle.owner),
            escape(&idle.host),
            escape(&idle.gpu),
            idle.idle_gpu_hours,
            idle.waste_cost
        );
    }
    out.push_str("</table><h2>Fleet utilization by hour (UTC)</h2>");
    out.push_str(&heatmap_svg(&report.fleet.heatmap));
    out.push_str("<h2>Utilization by host</h2>");
    out.push_str(&node_heatmap_svg(&report.fleet.node_heatmap));
    let fleet = &report.fleet;
    let _ = write!(
        out,
        "<h2>Scaling</h2><p><b>{}</b> — {} GPUs recommended. {}</p>",
        escape(&fleet.scale.direction),
        fleet.scale.gpus,
        escape(&fleet.scale.reason)
    );
    let capacity = &fleet.capacity;
    let _ = write!(
        out,
        "<h2>Capacity plan</h2><p>Demand by 30-day month (GPUs of work, oldest first): {}. Growth {:+.1}% a month; next month {:.1} GPUs of work; with the buffer <b>{} GPUs</b> ({} to buy).</p>",
        capacity
            .monthly_demand_gpus
            .iter()
            .map(|d| format!("{d:.1}"))
            .collect::<Vec<_>>()
            .join(" · "),
        capacity.growth * 100.0,
        capacity.forecast_demand_gpus,
        capacity.recommended_gpus,
        capacity.gpus_to_buy
    );
    let tco = &fleet.tco;
    let _ = write!(
        out,
        "<h2>Own or rent</h2><p>At {:.0}% utilization an owned GPU costs {:.2} {cur} an hour, {:.2} {cur} per hour of work; the cloud {:.2} {cur}. Cheaper: <b>{}</b>{}.</p>",
        tco.utilization * 100.0,
        tco.owned_per_gpu_hour,
        tco.owned_per_used_gpu_hour,
        tco.cloud_per_used_gpu_hour,
        escape(&tco.cheaper),
        if tco.monthly_saving > 0.0 {
            format!(
                ", by {:.0} {} a month",
                tco.monthly_saving,
                escape(&report.currency)
            )
        } else {
            " (set [cost] purchase_price and cloud_hourly_price to compare)".to_string()
        },
        cur = escape(&report.currency)
    );
    let _ = write!(
        out,
        "<h2>Energy</h2><p>Night-idle hosts: {}. {:.1} kWh, {:.2} {cur} in the period.</p><p>Weekend-idle hosts: {}. {:.1} kWh, {:.2} {cur} in the period.</p><p class=\"muted\">{}</p>",
        host_list(&fleet.energy.night_idle_hosts),
        fleet.energy.kwh,
        fleet.energy.cost,
        host_list(&fleet.energy.weekend_idle_hosts),
        fleet.energy.weekend_kwh,
        fleet.energy.weekend_cost,
        escape(&fleet.energy.note),
        cur = escape(&report.currency)
    );
    out.push_str("<h2>Failure risk</h2><table><tr><th>host</th><th class=\"n\">GPU</th><th>UUID</th><th class=\"n\">risk</th><th>reasons</th><th>health at the end</th><th>repair</th></tr>");
    for entry in &fleet.risk {
        let health = &entry.health;
        let since = health
            .since
            .map(|t| format!(" since {}", t.format("%Y-%m-%d %H:%M UTC")))
            .unwrap_or_default();
        let components: Vec<String> = health
            .components
            .iter()
            .map(|c| format!("{} {}", c.component, c.state))
            .collect();
        let detail = match components.is_empty() {
            true => String::new(),
            false => format!(" ({})", components.join(", ")),
        };
        let _ = write!(
            out,
            "<tr><td>{}</td><td class=\"n\">{}</td><td>{}</td><td class=\"n\">{:.2}</td><td>{}</td><td class=\"{}\">{}{}{}</td><td>{}</td></tr>",
            escape(&entry.host),
            escape(&entry.gpu),
            escape(&entry.uuid),
            entry.risk,
            escape(&entry.reasons.join(", ")),
            health.state,
            health.state,
            escape(&since),
            escape(&detail),
            escape(health.action.as_deref().unwrap_or("—"))
        );
    }
    out.push_str("</table></body></html>\n");
    out
}

/// `unhealthy, drain_and_reboot since 2026-12-01 04:10 UTC`; `health unknown` where the
/// GPU's agent exposed no verdict.
fn verdict_text(health: &GpuVerdict) -> String {
    if health.state == "unknown" {
        return "health unknown".to_string();
    }
    let mut text = health.state.to_string();
    if let Some(action) = health.action.as_deref().filter(|a| *a != "none") {
        text.push_str(", ");
        text.push_str(action);
    }
    if let Some(since) = health.since {
        text.push_str(&format!(" since {}", since.format("%Y-%m-%d %H:%M UTC")));
    }
    text
}

fn host_list(hosts: &[String]) -> String {
    if hosts.is_empty() {
        "none".to_string()
    } else {
        escape(&hosts.join(", ")).into_owned()
    }
}

/// Days down, hours across, one cell per hour coloured by utilization.
fn heatmap_svg(cells: &[HeatCell]) -> String {
    let mut days: Vec<&str> = cells.iter().map(|c| c.day.as_str()).collect();
    days.dedup();
    let (cell, left, top) = (18, 80, 16);
    let width = left + 24 * cell + 4;
    let height = top + days.len() * cell + 4;
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" role=\"img\" aria-label=\"utilization heatmap\">"
    );
    for hour in (0..24).step_by(3) {
        let _ = write!(
            svg,
            "<text x=\"{}\" y=\"11\">{hour:02}</text>",
            left + hour * cell
        );
    }
    for (row, day) in days.iter().enumerate() {
        let y = top + row * cell;
        let _ = write!(svg, "<text x=\"0\" y=\"{}\">{}</text>", y + 13, escape(day));
        for c in cells.iter().filter(|c| c.day == *day) {
            let _ = write!(
                svg,
                "<rect x=\"{}\" y=\"{y}\" width=\"{}\" height=\"{}\" class=\"{}\"><title>{} {:02}:00 {:.0}%</title></rect>",
                left + c.hour as usize * cell,
                cell - 1,
                cell - 1,
                shade(Some(c.utilization)),
                escape(day),
                c.hour,
                c.utilization * 100.0
            );
        }
    }
    svg.push_str("</svg>");
    svg
}

/// Hosts down, time across; one cell per slice, blank where a host had no data.
fn node_heatmap_svg(map: &NodeHeatmap) -> String {
    let slices = map
        .hosts
        .iter()
        .map(|h| h.utilization.len())
        .max()
        .unwrap_or(0);
    let (width, height, left, top) = (8, 14, 90, 16);
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" role=\"img\" aria-label=\"utilization by host\">",
        left + slices * width + 4,
        top + map.hosts.len() * height + 4
    );
    if let Some(start) = map.start {
        let _ = write!(
            svg,
            "<text x=\"{left}\" y=\"11\">{}</text>",
            start.format("%Y-%m-%d %H:%M")
        );
    }
    for (row, host) in map.hosts.iter().enumerate() {
        let y = top + row * height;
        let _ = write!(
            svg,
            "<text x=\"0\" y=\"{}\">{}</text>",
            y + 11,
            escape(&host.host)
        );
        for (i, value) in host.utilization.iter().enumerate() {
            if let Some(u) = value {
                let _ = write!(
                    svg,
                    "<rect x=\"{}\" y=\"{y}\" width=\"{}\" height=\"{}\" class=\"{}\"><title>{} {:.0}%</title></rect>",
                    left + i * width,
                    width - 1,
                    height - 1,
                    shade(Some(*u)),
                    escape(&host.host),
                    u * 100.0
                );
            }
        }
    }
    svg.push_str("</svg>");
    svg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shorten_respects_character_boundaries() {
        assert_eq!(shorten("ééééé", 7), "éé…");
        assert_eq!(shorten("ééééé", 6), "é…");
        assert_eq!(shorten("short", 10), "short");
    }
}
