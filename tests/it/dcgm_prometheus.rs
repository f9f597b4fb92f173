//! dcgm-exporter compatibility, end to end: a real Prometheus scrapes the simulator in
//! `dcgm_compat` mode and every query of dcgm-exporter's Grafana dashboard returns data.

use crate::common;

use common::{Agent, Prometheus, repo, temp_file, tool};

#[test]
fn every_dcgm_dashboard_query_returns_data() {
    let Some(prometheus) = tool("prometheus") else {
        return;
    };
    let config = temp_file("dcgm.toml", "[export]\ndcgm_compat = true\n");
    let agent = Agent::start(&["--simulate", "--config", config.to_str().unwrap()], &[]);
    agent.metrics();
    let target = agent.base.trim_start_matches("http://").to_string();
    let prom = Prometheus::start(&prometheus, &[&target]);
    prom.wait_for_scrapes(1);

    let queries = std::fs::read_to_string(repo().join("tests/fixtures/dcgm-dashboard-queries.txt"))
        .expect("query list");
    let mut empty = Vec::new();
    let mut checked = 0;
    for expr in queries.lines().map(str::trim) {
        if expr.is_empty() || expr.starts_with('#') {
            continue;
        }
        checked += 1;
        if prom.query(expr).is_empty() {
            empty.push(expr.to_string());
        }
    }
    assert!(checked >= 10, "the query list was read: {checked}");
    assert!(empty.is_empty(), "queries without data: {empty:#?}");

    // Per-GPU panels need one series per GPU, with dcgm-exporter's labels.
    let temps = prom.query("DCGM_FI_DEV_GPU_TEMP");
    assert_eq!(temps.len(), 8);
    for label in [
        "gpu",
        "UUID",
        "pci_bus_id",
        "device",
        "modelName",
        "Hostname",
    ] {
        assert!(
            temps[0]["metric"].get(label).is_some(),
            "label {label} missing: {}",
            temps[0]
        );
    }
}
