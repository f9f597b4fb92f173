//! The report as Markdown (short enough for a chat message) and as one self-contained HTML
//! file (inline CSS and SVG, no external asset: readable offline and as an attachment).
//! The HTML is a maud template, as the board is: every spliced value escaped by
//! construction, outside text (teams, owners, hosts, reasons) as [`Text`].

use std::fmt::Write as _;

use maud::{DOCTYPE, Markup, PreEscaped, html};

use super::report::{HeatCell, NodeHeatmap, Report, TeamReport};
use super::report_health::GpuVerdict;
use crate::html::{Text, shade};

/// Chat services cut long messages (Slack's section text at 3,000 characters, DingTalk's and
/// WeCom's Markdown at 4,096 bytes): the Markdown stays under this.
pub(crate) const MARKDOWN_LIMIT: usize = 3_800;

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
    let title = format!(
        "GPU usage {} → {}",
        report.from.format("%Y-%m-%d"),
        report.to.format("%Y-%m-%d")
    );
    let currency = Text(&report.currency);
    let fleet = &report.fleet;
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                title { (Text(&title)) }
                // This file's constant: no outside text in it.
                style { (PreEscaped(STYLE)) }
            }
            body {
                h1 { (Text(&title)) }
                p.muted {
                    (report.from.format("%Y-%m-%d %H:%M")) " → " (report.to.format("%Y-%m-%d %H:%M UTC"))
                    " · source: " (Text(report.source)) " · " (fleet.gpus) " GPUs · mean utilization "
                    (format!("{:.0}%", fleet.utilization * 100.0))
                }
                p.muted { (Text(read_line(report))) }
                h2 { "Teams" }
                (teams_table(report, currency))
                h2 { "Largest idle holdings" }
                (idle_table(report))
                h2 { "Fleet utilization by hour (UTC)" }
                (heatmap_svg(&fleet.heatmap))
                h2 { "Utilization by host" }
                (node_heatmap_svg(&fleet.node_heatmap))
                (plans(report, currency))
                h2 { "Failure risk" }
                (risk_table(report))
            }
        }
        "\n"
    }
    .into_string()
}

fn teams_table(report: &Report, currency: Text<&String>) -> Markup {
    html! {
        table {
            tr {
                th { "team" } th.n { "GPU-h held" } th.n { "busy" } th.n { "idle" }
                th.n { "efficiency" } th.n { "waste (" (currency) ")" } th.n { "held before" }
            }
            @for team in &report.teams {
                tr {
                    td { (Text(&team.team)) }
                    td.n { (format!("{:.1}", team.usage.gpu_hours)) }
                    td.n { (format!("{:.1}", team.usage.busy_gpu_hours)) }
                    td.n { (format!("{:.1}", team.usage.idle_gpu_hours)) }
                    td.n { (format!("{:.0}%", team.usage.efficiency * 100.0)) }
                    td.n { (format!("{:.2}", team.usage.waste_cost)) }
                    td.n { (format!("{:.1}", team.previous.gpu_hours)) }
                }
            }
        }
    }
}

/// The ten largest idle holdings of all teams.
fn idle_table(report: &Report) -> Markup {
    let mut idle: Vec<_> = report
        .teams
        .iter()
        .flat_map(|t| t.top_idle.iter().map(move |i| (t, i)))
        .collect();
    idle.sort_by(|a, b| b.1.idle_gpu_hours.total_cmp(&a.1.idle_gpu_hours));
    html! {
        table {
            tr {
                th { "team" } th { "owner" } th { "host" } th.n { "GPU" } th.n { "idle GPU-h" }
                th.n { "waste" }
            }
            @for (team, idle) in idle.into_iter().take(10) {
                tr {
                    td { (Text(&team.team)) }
                    td { (Text(&idle.owner)) }
                    td { (Text(&idle.host)) }
                    td.n { (Text(&idle.gpu)) }
                    td.n { (format!("{:.1}", idle.idle_gpu_hours)) }
                    td.n { (format!("{:.2}", idle.waste_cost)) }
                }
            }
        }
    }
}

/// Scaling, the capacity plan, own or rent, and energy.
fn plans(report: &Report, currency: Text<&String>) -> Markup {
    let fleet = &report.fleet;
    let capacity = &fleet.capacity;
    let demand: Vec<String> = (capacity.monthly_demand_gpus.iter())
        .map(|d| format!("{d:.1}"))
        .collect();
    let tco = &fleet.tco;
    let energy = &fleet.energy;
    html! {
        h2 { "Scaling" }
        p {
            b { (Text(&fleet.scale.direction)) } " — " (fleet.scale.gpus) " GPUs recommended. "
            (Text(&fleet.scale.reason))
        }
        h2 { "Capacity plan" }
        p {
            "Demand by 30-day month (GPUs of work, oldest first): " (demand.join(" · "))
            ". Growth " (format!("{:+.1}", capacity.growth * 100.0)) "% a month; next month "
            (format!("{:.1}", capacity.forecast_demand_gpus)) " GPUs of work; with the buffer "
            b { (capacity.recommended_gpus) " GPUs" } " (" (capacity.gpus_to_buy) " to buy)."
        }
        h2 { "Own or rent" }
        p {
            "At " (format!("{:.0}", tco.utilization * 100.0)) "% utilization an owned GPU costs "
            (format!("{:.2}", tco.owned_per_gpu_hour)) " " (currency) " an hour, "
            (format!("{:.2}", tco.owned_per_used_gpu_hour)) " " (currency) " per hour of work; the cloud "
            (format!("{:.2}", tco.cloud_per_used_gpu_hour)) " " (currency) ". Cheaper: "
            b { (Text(&tco.cheaper)) }
            @if tco.monthly_saving > 0.0 {
                ", by " (format!("{:.0}", tco.monthly_saving)) " " (currency) " a month"
            } @else {
                " (set [cost] purchase_price and cloud_hourly_price to compare)"
            }
            "."
        }
        h2 { "Energy" }
        p {
            "Night-idle hosts: " (host_list(&energy.night_idle_hosts)) ". "
            (format!("{:.1}", energy.kwh)) " kWh, " (format!("{:.2}", energy.cost)) " " (currency)
            " in the period."
        }
        p {
            "Weekend-idle hosts: " (host_list(&energy.weekend_idle_hosts)) ". "
            (format!("{:.1}", energy.weekend_kwh)) " kWh, " (format!("{:.2}", energy.weekend_cost))
            " " (currency) " in the period."
        }
        p.muted { (Text(&energy.note)) }
    }
}

/// Every GPU by risk, with its health at the period's end.
fn risk_table(report: &Report) -> Markup {
    html! {
        table {
            tr {
                th { "host" } th.n { "GPU" } th { "UUID" } th.n { "risk" } th { "reasons" }
                th { "health at the end" } th { "repair" }
            }
            @for entry in &report.fleet.risk {
                @let health = &entry.health;
                tr {
                    td { (Text(&entry.host)) }
                    td.n { (Text(&entry.gpu)) }
                    td { (Text(&entry.uuid)) }
                    td.n { (format!("{:.2}", entry.risk)) }
                    td { (Text(entry.reasons.join(", "))) }
                    td class=(health.state) {
                        (health.state)
                        @if let Some(since) = health.since {
                            " since " (since.format("%Y-%m-%d %H:%M UTC"))
                        }
                        @if !health.components.is_empty() {
                            " ("
                            @for (i, c) in health.components.iter().enumerate() {
                                @if i > 0 { ", " }
                                (Text(&c.component)) " " (Text(c.state))
                            }
                            ")"
                        }
                    }
                    td { (Text(health.action.as_deref().unwrap_or("—"))) }
                }
            }
        }
    }
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

fn host_list(hosts: &[String]) -> Text<String> {
    Text(match hosts.is_empty() {
        true => "none".to_string(),
        false => hosts.join(", "),
    })
}

/// Days down, hours across, one cell per hour coloured by utilization.
fn heatmap_svg(cells: &[HeatCell]) -> Markup {
    let mut days: Vec<&str> = cells.iter().map(|c| c.day.as_str()).collect();
    days.dedup();
    let (cell, left, top) = (18, 80, 16);
    html! {
        svg xmlns="http://www.w3.org/2000/svg" width=(left + 24 * cell + 4)
            height=(top + days.len() * cell + 4) role="img" aria-label="utilization heatmap" {
            @for hour in (0..24).step_by(3) {
                text x=(left + hour * cell) y="11" { (format!("{hour:02}")) }
            }
            @for (row, day) in days.iter().enumerate() {
                @let y = top + row * cell;
                text x="0" y=(y + 13) { (Text(day)) }
                @for c in cells.iter().filter(|c| c.day == *day) {
                    rect x=(left + c.hour as usize * cell) y=(y) width=(cell - 1) height=(cell - 1)
                        class=(shade(Some(c.utilization))) {
                        title {
                            (Text(day)) " " (format!("{:02}:00 {:.0}%", c.hour, c.utilization * 100.0))
                        }
                    }
                }
            }
        }
    }
}

/// Hosts down, time across; one cell per slice, blank where a host had no data.
fn node_heatmap_svg(map: &NodeHeatmap) -> Markup {
    let slices = map
        .hosts
        .iter()
        .map(|h| h.utilization.len())
        .max()
        .unwrap_or(0);
    let (width, height, left, top) = (8, 14, 90, 16);
    html! {
        svg xmlns="http://www.w3.org/2000/svg" width=(left + slices * width + 4)
            height=(top + map.hosts.len() * height + 4) role="img" aria-label="utilization by host" {
            @if let Some(start) = map.start {
                text x=(left) y="11" { (start.format("%Y-%m-%d %H:%M")) }
            }
            @for (row, host) in map.hosts.iter().enumerate() {
                @let y = top + row * height;
                text x="0" y=(y + 11) { (Text(&host.host)) }
                @for (i, value) in host.utilization.iter().enumerate() {
                    @if let Some(u) = value {
                        rect x=(left + i * width) y=(y) width=(width - 1) height=(height - 1)
                            class=(shade(Some(*u))) {
                            title { (Text(&host.host)) " " (format!("{:.0}%", u * 100.0)) }
                        }
                    }
                }
            }
        }
    }
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

#[cfg(test)]
mod html_tests;
