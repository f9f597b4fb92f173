//! What a human-readable notification says, before any service's markup: the title, and
//! per alert its name, severity, where (GPU, UUID, host), summary, description, runbook,
//! advice and times. Each chat integration dresses these facts in its own format.
//!
//! Chat services cap message sizes, so this module also cuts text on UTF-8 boundaries and
//! finds how many alerts fit a budget, ending the message with "… (N more alerts)" rather
//! than letting the service reject it (a rejected message is a lost alert).

use chrono::{DateTime, Utc};

use crate::alert::{Alert, AlertState, Notification};

/// The alerts a message shows: not pending ones (never notified); firing before resolved,
/// the most severe first, then oldest first.
pub fn shown(notification: &Notification) -> Vec<&Alert> {
    let mut alerts: Vec<&Alert> = notification
        .alerts
        .iter()
        .filter(|a| a.state != AlertState::Pending)
        .collect();
    alerts.sort_by_key(|a| {
        (
            a.state == AlertState::Resolved,
            severity_rank(a.severity()),
            a.starts_at.unwrap_or(a.active_at),
        )
    });
    alerts
}

fn severity_rank(severity: &str) -> u8 {
    match severity {
        "critical" => 0,
        "warning" => 1,
        "info" => 2,
        _ => 3,
    }
}

/// `[FIRING:2] GpuLost · gpu-host-01` / `[RESOLVED] GpuLost · gpu-host-01`, like
/// Alertmanager's default title: status, count of firing alerts, then what the alerts
/// share (alert name, host).
pub fn title(notification: &Notification) -> String {
    let alerts = shown(notification);
    let firing = alerts
        .iter()
        .filter(|a| a.state == AlertState::Firing)
        .count();
    let status = if firing > 0 {
        format!("[FIRING:{firing}]")
    } else {
        "[RESOLVED]".to_string()
    };
    // What the shown alerts share (pending ones are not in the message).
    let mut common = alerts.first().map(|a| a.labels.clone()).unwrap_or_default();
    for a in &alerts {
        common.retain(|k, v| a.labels.get(k) == Some(v));
    }
    let mut parts = Vec::new();
    match common.get("alertname") {
        Some(name) => parts.push(name.clone()),
        None => {
            // Different alerts grouped together: name a few, count the rest.
            let mut names: Vec<&str> = alerts.iter().map(|a| a.name()).collect();
            names.sort_unstable();
            names.dedup();
            let mut listed = names.iter().take(3).copied().collect::<Vec<_>>().join(", ");
            if names.len() > 3 {
                listed.push_str(&format!(" +{}", names.len() - 3));
            }
            parts.push(listed);
        }
    }
    if let Some(gpu) = common.get("gpu") {
        parts.push(format!("GPU {gpu}"));
    }
    if let Some(host) = common.get("hostname") {
        parts.push(host.clone());
    }
    format!("{status} {}", parts.join(" · "))
}

/// The colour family of a message: resolved, or its highest severity.
pub(crate) fn tone(notification: &Notification) -> Tone {
    if notification.status() == "resolved" {
        return Tone::Resolved;
    }
    match notification.severity() {
        "critical" => Tone::Critical,
        "warning" => Tone::Warning,
        _ => Tone::Info,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tone {
    Critical,
    Warning,
    Info,
    Resolved,
}

/// One alert's facts, its long fields already cut to the integration's budget.
#[derive(Debug, Clone)]
pub struct Facts {
    pub name: String,
    pub severity: String,
    pub firing: bool,
    /// "GPU 3 (GPU-…) on host-a", "host-a", or empty.
    pub(crate) location: String,
    pub summary: Option<String>,
    pub description: Option<String>,
    pub runbook: Option<String>,
    pub advice: Option<String>,
    /// "since 2024-05-01 10:00:00 UTC" or "resolved 2024-05-01 10:20:00 UTC after 20m".
    pub when: String,
}

impl Facts {
    /// The location line (when known), then each field present as `**Label:** value`, in
    /// the order every chat message shows them.
    pub(crate) fn markdown_fields(&self) -> Vec<String> {
        let mut lines = Vec::new();
        if !self.location.is_empty() {
            lines.push(self.location.clone());
        }
        for (label, value) in [
            ("Summary", &self.summary),
            ("Description", &self.description),
            ("Runbook", &self.runbook),
            ("Advice", &self.advice),
        ] {
            if let Some(v) = value {
                lines.push(format!("**{label}:** {v}"));
            }
        }
        lines
    }

    /// Reads an alert; `field_bytes` bounds the description and advice, a quarter of it
    /// the summary and runbook (they are one-liners).
    pub fn of(alert: &Alert, field_bytes: usize) -> Facts {
        let annotation = |name: &str, max: usize| {
            alert
                .annotations
                .get(name)
                .map(|v| v.trim())
                .filter(|v| !v.is_empty())
                .map(|v| truncate_bytes(v, max))
        };
        let label = |name: &str| alert.labels.get(name).filter(|v| !v.is_empty());
        let mut location = String::new();
        if let Some(gpu) = label("gpu") {
            location.push_str(&format!("GPU {gpu}"));
            if let Some(uuid) = label("uuid") {
                location.push_str(&format!(" ({uuid})"));
            }
        }
        if let Some(host) = label("hostname") {
            if !location.is_empty() {
                location.push_str(" on ");
            }
            location.push_str(host);
        }
        let firing = alert.state != AlertState::Resolved;
        let started = alert.starts_at.unwrap_or(alert.active_at);
        let when = match (firing, alert.ends_at) {
            (false, Some(ended)) => format!(
                "resolved {} after {}",
                clock(ended),
                span((ended - started).num_seconds())
            ),
            (false, None) => "resolved".to_string(),
            (true, _) => format!("since {}", clock(started)),
        };
        Facts {
            name: alert.name().to_string(),
            severity: alert.severity().to_string(),
            firing,
            location,
            summary: annotation("summary", field_bytes / 4),
            description: annotation("description", field_bytes),
            runbook: annotation("runbook", field_bytes / 4),
            advice: annotation("advice", field_bytes),
            when,
        }
    }
}

fn clock(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%d %H:%M:%S UTC").to_string()
}

/// "1h 5m", "20m", "45s": the coarsest two units are enough for a human.
fn span(seconds: i64) -> String {
    let s = seconds.max(0);
    let (d, h, m, sec) = (s / 86_400, s / 3600 % 24, s / 60 % 60, s % 60);
    let parts: Vec<String> = [(d, "d"), (h, "h"), (m, "m"), (sec, "s")]
        .iter()
        .skip_while(|(v, _)| *v == 0)
        .take(2)
        .filter(|(v, _)| *v > 0)
        .map(|(v, unit)| format!("{v}{unit}"))
        .collect();
    if parts.is_empty() {
        "0s".to_string()
    } else {
        parts.join(" ")
    }
}

/// A markdown message: `heading` and the title, the first `count` alerts each rendered by
/// `alert` from its facts (long fields cut to `field_bytes`), then "… (N more alerts)" and
/// the link to all alerts; blocks separated by a blank line, which every chat markdown
/// dialect reads as a line break.
pub(crate) fn markdown_message(
    notification: &Notification,
    count: usize,
    heading: &str,
    field_bytes: usize,
    alert: impl Fn(&Facts) -> String,
) -> String {
    let alerts = shown(notification);
    let shown = count.min(alerts.len());
    let mut parts = vec![format!("{heading} {}", title(notification))];
    for a in &alerts[..shown] {
        parts.push(alert(&Facts::of(a, field_bytes)));
    }
    let mut footer = Vec::new();
    if shown < alerts.len() {
        footer.push(more_marker(alerts.len() - shown));
    }
    if !notification.external_url.is_empty() {
        footer.push(format!("[All alerts]({})", notification.external_url));
    }
    if !footer.is_empty() {
        parts.push(footer.join(" · "));
    }
    parts.join("\n\n")
}

/// The marker ending a message that could not show every alert.
pub(crate) fn more_marker(hidden: usize) -> String {
    if hidden == 1 {
        "… (1 more alert)".to_string()
    } else {
        format!("… ({hidden} more alerts)")
    }
}

/// `text` cut to at most `max` bytes on a character boundary, with "…" when cut.
pub(crate) fn truncate_bytes(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let ellipsis = "…";
    let mut end = max.saturating_sub(ellipsis.len());
    while end > 0 && !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{ellipsis}", &text[..end])
}

/// `text` cut to at most `max` characters (Slack counts characters), with "…" when cut.
pub(crate) fn truncate_chars(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let kept: String = text.chars().take(max.saturating_sub(1)).collect();
    format!("{kept}…")
}

/// Renders the first k of `total` alerts for the largest k whose rendering `size` keeps
/// within `limit` (the renderer adds the "more alerts" marker when k < total). Size grows
/// with k, so a binary search finds k in log(total) renderings. Falls back to k = 0 (the
/// title and the marker) when not even one alert fits.
pub fn fit<T>(
    total: usize,
    limit: usize,
    render: impl Fn(usize) -> T,
    size: impl Fn(&T) -> usize,
) -> T {
    let all = render(total);
    if size(&all) <= limit {
        return all;
    }
    let (mut lo, mut hi) = (0, total); // invariant: lo fits or is 0, hi does not fit
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if size(&render(mid)) <= limit {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    render(lo)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncation_respects_utf8_boundaries() {
        let text = "显存温度过高".repeat(10); // 3 bytes a character
        let cut = truncate_bytes(&text, 20);
        assert!(cut.len() <= 20, "{} bytes", cut.len());
        assert!(cut.ends_with('…'));
        assert_eq!(truncate_bytes("short", 20), "short");
        assert_eq!(truncate_chars("αβγδε", 3), "αβ…");
        assert_eq!(truncate_chars("αβγ", 3), "αβγ");
    }

    #[test]
    fn fit_finds_the_largest_prefix() {
        let render = |k: usize| "x".repeat(10 * k) + if k < 50 { "+" } else { "" };
        assert_eq!(fit(50, 10_000, render, String::len).len(), 500);
        assert_eq!(fit(50, 105, render, String::len).len(), 101);
        assert_eq!(fit(50, 3, render, String::len), "+");
    }

    #[test]
    fn spans_read_well() {
        assert_eq!(span(45), "45s");
        assert_eq!(span(20 * 60), "20m");
        assert_eq!(span(3600 + 5 * 60 + 3), "1h 5m");
        assert_eq!(span(-3), "0s");
    }
}
