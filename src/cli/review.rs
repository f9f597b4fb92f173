//! `gpu-sentinel review [--url URL]`: a running exporter's fleet, most at risk first.
//!
//! What an operator reads before a maintenance window: which GPUs to drain or replace and
//! why. It fetches `/api/v1/gpus` once and ranks the GPUs by failure-risk score (a lost GPU
//! ahead of an answering one at the same score), each with the known-bad rule that fired,
//! the largest contributions to its score, and its findings.

use std::fmt::Write as _;
use std::time::Duration;

use anyhow::Context;
use chrono::SecondsFormat;
use clap::Args;

use crate::api::{GpuView, GpusDocument};
use crate::engine::risk::Contribution;

#[derive(Debug, Clone, Args)]
pub struct ReviewArgs {
    /// Base URL of a running gpu-sentinel (or the full /api/v1/gpus URL).
    #[arg(long, value_name = "URL", default_value = "http://127.0.0.1:10400")]
    pub url: String,
    /// Rank the whole fleet from a Prometheus-compatible store instead of one exporter
    /// (credentials as for `report`: GPU_SENTINEL_PROMETHEUS_TOKEN, or _USER and _PASSWORD).
    #[arg(long, value_name = "URL", conflicts_with = "url")]
    pub prometheus: Option<String>,
    /// With --prometheus: samples one query may load in the store (Prometheus
    /// --query.max-samples); by default what the store's flags say, else 50000000.
    #[arg(long, value_name = "N", requires = "prometheus")]
    pub max_samples: Option<u64>,
    /// Give up on the exporter after this long.
    #[arg(long, value_name = "D", default_value = "10s", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
}

/// Reasons shown per GPU.
const TOP_REASONS: usize = 3;

pub fn review(args: &ReviewArgs) -> anyhow::Result<()> {
    if let Some(base) = &args.prometheus {
        let client = crate::fleet::prom::Client::new(crate::fleet::prom::Endpoint {
            base: base.clone(),
            auth: super::report::auth_from_env()?,
            timeout: args.timeout,
        });
        let at = chrono::Utc::now();
        let ranked = crate::fleet::review::rank(&client, at, args.max_samples)?;
        return super::output::print(&render_fleet(&ranked, client.base(), at));
    }
    let url = gpus_url(&args.url);
    let body = fetch(&url, args.timeout)?;
    let doc = parse(&body).with_context(|| format!("{url} did not answer as expected"))?;
    super::output::print(&render(&doc, &url))
}

/// `/api/v1/gpus` under a base URL, unless the URL already names it.
pub(crate) fn gpus_url(base: &str) -> String {
    let base = base.trim().trim_end_matches('/');
    let base = if base.contains("://") {
        base.to_string()
    } else {
        format!("http://{base}")
    };
    if base.ends_with("/api/v1/gpus") {
        base
    } else {
        format!("{base}/api/v1/gpus")
    }
}

fn fetch(url: &str, timeout: Duration) -> anyhow::Result<String> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(timeout))
        .build()
        .into();
    let mut response = agent.get(url).call().map_err(|e| {
        anyhow::anyhow!(
            "cannot reach {url}: {e}\nIs `gpu-sentinel run` listening there? Point --url at it \
             (default http://127.0.0.1:10400)."
        )
    })?;
    let status = response.status();
    let body = response
        .body_mut()
        .read_to_string()
        .with_context(|| format!("cannot read the answer of {url}"))?;
    match status.as_u16() {
        200 => Ok(body),
        503 => anyhow::bail!(
            "{url} answered 503: the exporter has not finished its first collection yet; try again in a few seconds"
        ),
        code => anyhow::bail!(
            "{url} answered HTTP {code}: {}",
            body.chars().take(200).collect::<String>().trim()
        ),
    }
}

/// The document, checked for what the review needs (see [`crate::api::documents`] for
/// what reading keeps and what it leaves out).
pub fn parse(body: &str) -> anyhow::Result<GpusDocument<'static>> {
    let doc: GpusDocument<'static> = serde_json::from_str(body).map_err(|e| {
        anyhow::anyhow!(
            "not a gpu-sentinel /api/v1/gpus document ({e}); expected {{\"gpus\": [{{\"index\", \"uuid\", \"risk\": {{\"score\", …}}, \"findings\", …}}]}}"
        )
    })?;
    anyhow::ensure!(
        doc.gpus.is_empty() || doc.gpus.iter().any(|g| g.risk.is_some()),
        "the exporter lists GPUs but no risk scores: it predates the analysis engine (upgrade \
         gpu-sentinel on that host)"
    );
    Ok(doc)
}

fn score(g: &GpuView<'_>) -> f64 {
    g.risk.as_ref().map_or(0.0, |r| r.score)
}

fn lost(g: &GpuView<'_>) -> bool {
    g.findings.iter().any(|f| f == "lost")
}

/// The ranking as text.
pub fn render(doc: &GpusDocument<'_>, url: &str) -> String {
    let threshold = doc
        .risk_threshold
        // An exporter that does not say uses `[risk] threshold`'s default.
        .unwrap_or(crate::config::DEFAULT_RISK_THRESHOLD);
    let mut ranked: Vec<&GpuView<'_>> = doc.gpus.iter().collect();
    ranked.sort_by(|a, b| {
        score(b)
            .total_cmp(&score(a))
            .then_with(|| lost(b).cmp(&lost(a)))
            .then_with(|| a.sample.index.cmp(&b.sample.index))
    });
    // RFC 3339 in UTC with `Z`, as the exporter writes it.
    let at = doc.at.map_or_else(
        || "?".to_string(),
        |at| at.to_rfc3339_opts(SecondsFormat::AutoSi, true),
    );
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} — host {}, as of {at}",
        url,
        doc.hostname.as_deref().unwrap_or("?"),
    );
    let at_risk = ranked.iter().filter(|g| score(g) >= threshold).count();
    let _ = writeln!(
        out,
        "{} GPUs: {at_risk} at risk (score ≥ {threshold:.2}), {} lost, {} not answering",
        ranked.len(),
        ranked.iter().filter(|g| lost(g)).count(),
        ranked.iter().filter(|g| !g.sample.up).count()
    );
    if ranked.is_empty() {
        return out;
    }
    let _ = writeln!(
        out,
        "\n{:>4} {:>4} {:>6}  {:<6} {:>5} {:>5}  {:<24} UUID",
        "RANK", "GPU", "RISK", "STATE", "UTIL", "TEMP", "NAME"
    );
    for (rank, g) in ranked.iter().enumerate() {
        let state = if lost(g) {
            "LOST"
        } else if !g.sample.up {
            "DOWN"
        } else {
            "up"
        };
        let flag = if score(g) >= threshold { "!" } else { " " };
        let util = g
            .sample
            .utilization
            .gpu
            .map_or("-".into(), |u| format!("{:.0}%", u * 100.0));
        let temp = g
            .sample
            .temperature_celsius
            .map_or("-".into(), |t| format!("{t:.0}C"));
        let name: String = g.sample.name.chars().take(24).collect();
        let risk = g
            .risk
            .as_ref()
            .map_or("-".to_string(), |r| format!("{:.2}", r.score));
        let _ = writeln!(
            out,
            "{:>4} {:>4} {:>5}{flag}  {:<6} {:>5} {:>5}  {:<24} {}",
            rank + 1,
            g.sample.index,
            risk,
            state,
            util,
            temp,
            name,
            g.sample.uuid
        );
        let indent = " ".repeat(12);
        if let Some(rule) = g.risk.as_ref().and_then(|r| r.rule.as_deref()) {
            let _ = writeln!(
                out,
                "{indent}rule: {rule} (a known-bad state, not a prediction)"
            );
        }
        let mut reasons: Vec<&Contribution> = g
            .risk
            .as_ref()
            .map(|r| {
                r.contributions
                    .iter()
                    .filter(|c| c.contribution > 0.0)
                    .collect()
            })
            .unwrap_or_default();
        reasons.sort_by(|a, b| b.contribution.total_cmp(&a.contribution));
        if !reasons.is_empty() {
            let text: Vec<String> = reasons
                .iter()
                .take(TOP_REASONS)
                .map(|c| format!("{} {:.2} (+{:.2})", c.feature, c.value, c.contribution))
                .collect();
            let _ = writeln!(out, "{indent}reasons: {}", text.join(", "));
        }
        if !g.findings.is_empty() {
            let _ = writeln!(out, "{indent}findings: {}", g.findings.join(", "));
        }
    }
    out
}

/// The fleet's ranking as text: the single-host table with the host in front.
pub(crate) fn render_fleet(
    ranked: &[crate::fleet::review::FleetGpu],
    store: &str,
    at: chrono::DateTime<chrono::Utc>,
) -> String {
    let threshold = crate::config::DEFAULT_RISK_THRESHOLD;
    let mut out = String::new();
    let hosts: std::collections::BTreeSet<&str> = ranked.iter().map(|g| g.host.as_str()).collect();
    let _ = writeln!(
        out,
        "{store} — {} hosts, as of {}",
        hosts.len(),
        at.to_rfc3339_opts(SecondsFormat::Secs, true)
    );
    let _ = writeln!(
        out,
        "{} GPUs: {} at risk (score ≥ {threshold:.2}), {} not answering",
        ranked.len(),
        ranked
            .iter()
            .filter(|g| g.risk.unwrap_or(0.0) >= threshold)
            .count(),
        ranked.iter().filter(|g| !g.up).count()
    );
    if ranked.is_empty() {
        return out;
    }
    let _ = writeln!(
        out,
        "\n{:>4} {:<16} {:>4} {:>6}  {:<6} {:>5} {:>5}  {:<24} UUID",
        "RANK", "HOST", "GPU", "RISK", "STATE", "UTIL", "TEMP", "NAME"
    );
    for (rank, g) in ranked.iter().enumerate() {
        let flag = if g.risk.unwrap_or(0.0) >= threshold {
            "!"
        } else {
            " "
        };
        let host: String = g.host.chars().take(16).collect();
        let name: String = g.name.chars().take(24).collect();
        let _ = writeln!(
            out,
            "{:>4} {:<16} {:>4} {:>5}{flag}  {:<6} {:>5} {:>5}  {:<24} {}",
            rank + 1,
            host,
            g.gpu,
            g.risk.map_or("-".into(), |r| format!("{r:.2}")),
            if g.up { "up" } else { "DOWN" },
            g.utilization
                .map_or("-".into(), |u| format!("{:.0}%", u * 100.0)),
            g.temperature.map_or("-".into(), |t| format!("{t:.0}C")),
            name,
            g.uuid
        );
        let indent = " ".repeat(12);
        if let Some(rule) = &g.rule {
            let _ = writeln!(
                out,
                "{indent}rule: {rule} (a known-bad state, not a prediction)"
            );
        }
        if !g.reasons.is_empty() {
            let text: Vec<String> = g
                .reasons
                .iter()
                .take(TOP_REASONS)
                .map(|(feature, contribution)| format!("{feature} (+{contribution:.2})"))
                .collect();
            let _ = writeln!(out, "{indent}reasons: {}", text.join(", "));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        assert_eq!(gpus_url("http://h:1/"), "http://h:1/api/v1/gpus");
        assert_eq!(gpus_url("h:1"), "http://h:1/api/v1/gpus");
        assert_eq!(gpus_url("http://h:1/api/v1/gpus"), "http://h:1/api/v1/gpus");
    }

    #[test]
    fn documents_without_the_shape_are_refused() {
        assert!(parse("<html></html>").is_err());
        assert!(parse("{\"gpus\": [{\"uuid\": \"GPU-a\"}]}").is_err());
        let err = parse("{\"gpus\": [{\"index\": 0, \"uuid\": \"GPU-a\"}]}").unwrap_err();
        assert!(err.to_string().contains("no risk scores"), "{err}");
        assert!(parse("{\"gpus\": []}").is_ok());
    }

    #[test]
    fn the_heading_shows_the_documents_time_as_the_exporter_wrote_it() {
        let doc = parse(r#"{"at": "2026-03-02T09:00:00Z", "hostname": "dgx-07", "gpus": []}"#)
            .expect("a document");
        let text = render(&doc, "http://h:1/api/v1/gpus");
        assert!(
            text.starts_with("http://h:1/api/v1/gpus — host dgx-07, as of 2026-03-02T09:00:00Z\n"),
            "{text}"
        );
        let text = render(&parse("{\"gpus\": []}").expect("a document"), "u");
        assert!(text.starts_with("u — host ?, as of ?\n"), "{text}");
    }
}
