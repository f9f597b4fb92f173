//! `gpu-sentinel review` through the real binary, against the tests' loopback HTTP server
//! serving a fixed `/api/v1/gpus` document (the shape the exporter serves).

use crate::common;

use std::process::Output;

use common::http_server::{Answer, HttpServer};
use common::{free_port, run};

/// An exporter serving `body` with `status` at `GET /api/v1/gpus` (404 elsewhere, so the
/// review must ask for the right path) until dropped.
fn serving(status: u16, body: String) -> HttpServer {
    HttpServer::answering(move |request| {
        if request.method == "GET" && request.target == "/api/v1/gpus" {
            Answer::json(status, &body)
        } else {
            Answer::status(404).body("not found")
        }
    })
}

fn review(url: &str) -> Output {
    run(&["review", "--url", url, "--timeout", "5s"])
}

/// Four GPUs as the exporter lists them: a healthy one, one at risk from memory wear, a
/// lost one, and an idle one holding memory.
fn fleet() -> String {
    serde_json::json!({
        "at": "2026-03-02T09:00:00Z",
        "hostname": "dgx-07",
        "risk_threshold": 0.7,
        "gpus": [
            {
                "index": 0, "uuid": "GPU-0000", "name": "NVIDIA H100 80GB HBM3", "up": true,
                "utilization": {"gpu": 0.93}, "temperature_celsius": 61.0,
                "processes": [], "xids": [],
                "risk": {"score": 0.02, "contributions": []},
                "findings": []
            },
            {
                "index": 1, "uuid": "GPU-1111", "name": "NVIDIA H100 80GB HBM3", "up": true,
                "utilization": {"gpu": 0.88}, "temperature_celsius": 66.0,
                "processes": [], "xids": [],
                "risk": {"score": 0.83, "contributions": [
                    {"feature": "remapped_rows", "value": 2.3, "contribution": 1.2},
                    {"feature": "ecc_corrected_per_day", "value": 3.9, "contribution": 4.7},
                    {"feature": "memory_temperature_gap", "value": 0.4, "contribution": 0.3},
                    {"feature": "temperature_level", "value": 0.1, "contribution": 0.05}
                ]},
                "findings": ["failure_risk"]
            },
            {
                "index": 2, "uuid": "GPU-2222", "name": "NVIDIA H100 80GB HBM3", "up": false,
                "processes": [], "xids": [{"xid": 79}],
                "risk": {"score": 0.95, "rule": "fell_off_bus", "contributions": []},
                "findings": ["failure_risk", "lost", "hardware_xid"]
            },
            {
                "index": 3, "uuid": "GPU-3333", "name": "NVIDIA H100 80GB HBM3", "up": true,
                "utilization": {"gpu": 0.0}, "temperature_celsius": 34.0,
                "processes": [], "xids": [],
                "risk": {"score": 0.04, "contributions": [
                    {"feature": "collect_slowdown", "value": 0.2, "contribution": 0.1}
                ]},
                "findings": ["allocated_idle"]
            }
        ]
    })
    .to_string()
}

#[test]
fn the_fleet_is_ranked_most_at_risk_first_with_reasons() {
    let exporter = serving(200, fleet());
    let out = review(&exporter.url(""));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("host dgx-07"), "{stdout}");
    assert!(
        stdout.contains("4 GPUs: 2 at risk (score ≥ 0.70), 1 lost, 1 not answering"),
        "{stdout}"
    );
    // Ranked rows: RANK GPU RISK …
    let ranked: Vec<(&str, &str)> = stdout
        .lines()
        .skip_while(|l| !l.contains("RANK"))
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            let rank = words.next()?;
            rank.parse::<u32>().ok()?;
            Some((words.next()?, words.next()?))
        })
        .collect();
    assert_eq!(
        ranked,
        [("2", "0.95!"), ("1", "0.83!"), ("3", "0.04"), ("0", "0.02")],
        "{stdout}"
    );
    // The lost GPU shows its rule; the worn one its largest contributions, largest first.
    assert!(stdout.contains("LOST"), "{stdout}");
    assert!(stdout.contains("rule: fell_off_bus"), "{stdout}");
    assert!(
        stdout.contains(
            "reasons: ecc_corrected_per_day 3.90 (+4.70), remapped_rows 2.30 (+1.20), memory_temperature_gap 0.40 (+0.30)"
        ),
        "{stdout}"
    );
    assert!(
        !stdout.contains("temperature_level"),
        "only the top 3: {stdout}"
    );
    assert!(stdout.contains("findings: allocated_idle"), "{stdout}");
}

#[test]
fn an_unreachable_exporter_is_a_clear_error() {
    let url = format!("http://127.0.0.1:{}", free_port());
    let out = review(&url);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("cannot reach"), "{stderr}");
    assert!(stderr.contains("--url"), "{stderr}");
}

#[test]
fn a_body_of_another_shape_is_a_clear_error() {
    let exporter = serving(200, "<html>a router's login page</html>".into());
    let out = review(&exporter.url(""));
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("not a gpu-sentinel /api/v1/gpus document"),
        "{stderr}"
    );

    let exporter = serving(
        200,
        r#"{"gpus": [{"index": 0, "uuid": "GPU-0", "name": "x", "up": true}]}"#.into(),
    );
    let stderr = String::from_utf8_lossy(&review(&exporter.url("")).stderr).into_owned();
    assert!(stderr.contains("no risk scores"), "{stderr}");
}

#[test]
fn an_exporter_that_is_not_ready_says_so() {
    let exporter = serving(503, "no collection yet".into());
    let out = review(&exporter.url(""));
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("first collection"), "{stderr}");
}
