//! The shipped Grafana dashboard (dashboards/gpu-sentinel.json), end to end: a real
//! Prometheus scrapes the accelerated simulator and every panel's query returns data.

mod common;

use std::time::Duration;

use common::{Agent, Prometheus, repo, temp_file, tool};

/// Every panel query, with the template variables resolved as "All".
fn queries() -> Vec<(String, String)> {
    let text =
        std::fs::read_to_string(repo().join("dashboards/gpu-sentinel.json")).expect("dashboard");
    let doc: serde_json::Value = serde_json::from_str(&text).expect("dashboard JSON");
    let mut out = Vec::new();
    for panel in doc["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().into_iter().flatten() {
            if let Some(expr) = target["expr"].as_str() {
                let title = panel["title"].as_str().unwrap_or("").to_string();
                out.push((title, expr.replace("$instance", ".*").replace("$gpu", ".*")));
            }
        }
    }
    out
}

#[test]
fn every_dashboard_query_returns_data() {
    let Some(prometheus) = tool("prometheus") else {
        return;
    };
    let config = temp_file(
        "dashboard.toml",
        "[simulation]\nfault_hours = 2.0\n[cost]\npurchase_price = 30000.0\npower_price_per_kwh = 0.2\n",
    );
    let agent = Agent::start(
        &[
            "--simulate",
            "--sim-speed",
            "600",
            "--config",
            config.to_str().unwrap(),
        ],
        &[],
    );
    agent.metrics();
    let target = agent.base.trim_start_matches("http://").to_string();
    let prom = Prometheus::start(&prometheus, &[&target]);
    prom.wait_for_scrapes(1);
    let queries = queries();
    assert!(
        queries.len() >= 25,
        "the dashboard was read: {}",
        queries.len()
    );
    // Faults need a few simulated hours, rates need two scrapes: retry until all answer.
    let began = std::time::Instant::now();
    let mut empty: Vec<String> = Vec::new();
    while began.elapsed() < Duration::from_secs(60) {
        empty = queries
            .iter()
            .filter(|(_, expr)| prom.query(expr).is_empty())
            .map(|(title, expr)| format!("{title}: {expr}"))
            .collect();
        if empty.is_empty() {
            return;
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    panic!("panels without data: {empty:#?}");
}
