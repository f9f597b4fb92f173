//! The shipped Grafana dashboard (dashboards/gpu-sentinel.json), end to end: a real
//! Prometheus scrapes the accelerated simulator and every panel's query returns data.

use crate::common;

use std::time::Duration;

use common::{Agent, Prometheus, repo, temp_file, tool};

/// Every panel query of `dashboard`, with the template variables resolved as "All" and
/// the range as five minutes.
fn queries_of(dashboard: &str) -> Vec<(String, String)> {
    let text = std::fs::read_to_string(repo().join(dashboard)).expect("dashboard");
    let doc: serde_json::Value = serde_json::from_str(&text).expect("dashboard JSON");
    let mut out = Vec::new();
    for panel in doc["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().into_iter().flatten() {
            if let Some(expr) = target["expr"].as_str() {
                let title = panel["title"].as_str().unwrap_or("").to_string();
                out.push((
                    title,
                    expr.replace("$instance", ".*")
                        .replace("$gpu", ".*")
                        .replace("$__range", "5m"),
                ));
            }
        }
    }
    out
}

fn queries() -> Vec<(String, String)> {
    queries_of("dashboards/gpu-sentinel.json")
}

/// Polls until every query has data, for up to a minute; panics naming those without.
fn wait_for_data(prom: &Prometheus, queries: &[(String, String)]) {
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

/// The fleet dashboard reads the recording rules of alerts/gpu-sentinel-fleet.rules.yml:
/// a real Prometheus evaluates them (every second here, instead of every minute) over two
/// simulated hosts, and every panel answers.
#[test]
fn every_fleet_dashboard_query_returns_data_through_the_recording_rules() {
    let Some(prometheus) = tool("prometheus") else {
        return;
    };
    let rules = std::fs::read_to_string(repo().join("alerts/gpu-sentinel-fleet.rules.yml"))
        .expect("fleet rules");
    assert!(rules.contains("interval: 1m"));
    let rules = temp_file(
        "fleet.rules.yml",
        &rules.replace("interval: 1m", "interval: 1s"),
    );
    let agents: Vec<Agent> = [1, 2]
        .iter()
        .map(|seed| {
            let config = temp_file(
                &format!("fleet-dashboard-{seed}.toml"),
                &format!(
                    "[simulation]\nseed = {seed}\nfault_hours = 2.0\n[[teams]]\nname = \"research\"\nnamespaces = [\"ml-*\"]\n"
                ),
            );
            Agent::start(
                &[
                    "--simulate",
                    "--sim-speed",
                    "600",
                    "--config",
                    config.to_str().expect("utf-8 path"),
                ],
                &[],
            )
        })
        .collect();
    let targets: Vec<String> = agents
        .iter()
        .map(|a| {
            a.metrics();
            a.base.trim_start_matches("http://").to_string()
        })
        .collect();
    let targets: Vec<&str> = targets.iter().map(String::as_str).collect();
    let prom = Prometheus::start_with_rules(&prometheus, &targets, &[rules.as_path()]);
    prom.wait_for_scrapes(2);
    let queries = queries_of("dashboards/gpu-sentinel-fleet.json");
    assert!(
        queries.len() >= 10,
        "the dashboard was read: {}",
        queries.len()
    );
    wait_for_data(&prom, &queries);
    // Both hosts are rows of the utilization heatmap.
    assert_eq!(prom.query("instance:gpu_utilization:avg").len(), 2);
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
    wait_for_data(&prom, &queries);
}
