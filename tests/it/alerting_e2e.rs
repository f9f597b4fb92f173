//! Alerting through the real binary: the accelerated simulator's faults reach a real
//! local webhook receiver as Alertmanager version-4 payloads, with LLM advice on critical
//! alerts when a (fake) chat-completions server answers, and without delay when it hangs.

use crate::common;

use std::time::{Duration, Instant};

use common::http_server::{Answer, HttpServer, Request};
use common::{Agent, temp_file};

/// Runs the simulator at 600x with faults due after two simulated hours, the webhook
/// receiver at `hook`, and `extra` config appended.
fn agent(name: &str, hook: &HttpServer, extra: &str) -> Agent {
    // group_wait 0s: a group goes out in the collection that first fires it.
    let config = temp_file(
        &format!("{name}.toml"),
        &format!(
            "[simulation]\nfault_hours = 2.0\n\
             [[alerting.receivers]]\nname = \"ops\"\nkind = \"webhook\"\nurl = \"{}\"\n\
             [alerting.route]\nreceiver = \"ops\"\ngroup_wait = \"0s\"\n{extra}",
            hook.url("/hook")
        ),
    );
    Agent::start(
        &[
            "--simulate",
            "--sim-speed",
            "600",
            "--config",
            config.to_str().unwrap(),
        ],
        &[("GS_TEST_API_KEY", "sk-test")],
    )
}

/// The first webhook payload carrying a firing alert named `name`, waiting up to `limit`.
fn wait_for_alert(hook: &HttpServer, name: &str, limit: Duration) -> (serde_json::Value, Instant) {
    let began = Instant::now();
    while began.elapsed() < limit {
        for r in hook.requests() {
            let body = r.json();
            let found = body["alerts"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|a| a["labels"]["alertname"] == name && a["status"] == "firing");
            if found {
                return (body, Instant::now());
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let seen: Vec<String> = hook.requests().iter().map(Request::text).collect();
    panic!("no firing {name} within {limit:?}; received: {seen:#?}");
}

#[test]
fn simulated_faults_arrive_as_alertmanager_webhook_payloads() {
    let hook = HttpServer::start(vec![]);
    let _agent = agent("webhook", &hook, "");
    let (body, _) = wait_for_alert(&hook, "GpuLost", Duration::from_secs(60));
    assert_eq!(body["version"], "4");
    assert_eq!(body["receiver"], "ops");
    assert_eq!(body["status"], "firing");
    for key in [
        "groupKey",
        "groupLabels",
        "commonLabels",
        "commonAnnotations",
        "externalURL",
        "truncatedAlerts",
    ] {
        assert!(body.get(key).is_some(), "{key} missing: {body}");
    }
    let alert = &body["alerts"][0];
    for label in ["alertname", "severity", "hostname", "gpu", "uuid"] {
        assert!(alert["labels"][label].is_string(), "{label}: {alert}");
    }
    assert_eq!(alert["labels"]["severity"], "critical");
    assert!(
        alert["annotations"]["summary"]
            .as_str()
            .unwrap()
            .contains("lost")
    );
    assert_eq!(alert["fingerprint"].as_str().map(str::len), Some(16));
}

#[test]
fn critical_alerts_carry_llm_advice() {
    let hook = HttpServer::start(vec![]);
    let chat = HttpServer::start(vec![Answer::json(
        200,
        r#"{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"- Drain GPU 4 and reset it."},"finish_reason":"stop"}]}"#,
    )]);
    let extra = format!(
        "[advice]\nenabled = true\nbase_url = \"{}\"\nmodel = \"test-model\"\napi_key_env = \"GS_TEST_API_KEY\"\nmax_wait = \"5s\"\n",
        chat.url("")
    );
    let _agent = agent("advice", &hook, &extra);
    let (body, _) = wait_for_alert(&hook, "GpuLost", Duration::from_secs(60));
    let advised = body["alerts"]
        .as_array()
        .unwrap()
        .iter()
        .any(|a| a["annotations"]["advice"].as_str() == Some("- Drain GPU 4 and reset it."));
    assert!(advised, "{body}");
    let asked = chat.requests();
    assert!(!asked.is_empty());
    assert_eq!(asked[0].header("authorization"), Some("Bearer sk-test"));
    assert_eq!(asked[0].json()["model"], "test-model");
}

#[test]
fn a_hanging_advice_server_does_not_hold_alerts_back() {
    let hook = HttpServer::start(vec![]);
    let chat = HttpServer::start(vec![Answer::ok().delay(Duration::from_secs(120))]);
    let extra = format!(
        "[advice]\nenabled = true\nbase_url = \"{}\"\napi_key_env = \"GS_TEST_API_KEY\"\nmax_wait = \"2s\"\ntimeout = \"60s\"\n",
        chat.url("")
    );
    let agent = agent("hang", &hook, &extra);
    // GpuLost's notification is due in the collection that fires it (group_wait 0s), when
    // it first shows on /api/v1/alerts; it may then wait max_wait (2 s), plus one
    // collection interval (5 s) of slack.
    let began = Instant::now();
    let mut due_at = None;
    while began.elapsed() < Duration::from_secs(60) && due_at.is_none() {
        let alerts = agent.get("/api/v1/alerts").text();
        if alerts.contains("\"GpuLost\"") && alerts.contains("\"firing\"") {
            due_at = Some(Instant::now());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let due_at = due_at.expect("GpuLost fires");
    let (body, arrived) = wait_for_alert(&hook, "GpuLost", Duration::from_secs(30));
    let waited = arrived.saturating_duration_since(due_at);
    eprintln!("GpuLost went out {waited:?} after it fired");
    assert!(
        waited <= Duration::from_secs(2 + 5),
        "alert held {waited:?}"
    );
    assert!(body["alerts"][0]["annotations"].get("advice").is_none());
}

#[test]
fn the_fleet_digest_goes_out_on_its_interval() {
    let hook = HttpServer::start(vec![]);
    let chat = HttpServer::start(vec![Answer::json(
        200,
        r#"{"choices":[{"index":0,"message":{"role":"assistant","content":"GPU 1 is most at risk."},"finish_reason":"stop"}]}"#,
    )]);
    let extra = format!(
        "[advice]\nenabled = true\nbase_url = \"{}\"\napi_key_env = \"GS_TEST_API_KEY\"\ndigest_interval = \"2s\"\n",
        chat.url("")
    );
    let _agent = agent("digest", &hook, &extra);
    let (body, _) = wait_for_alert(&hook, "GpuFleetDigest", Duration::from_secs(30));
    let digest = &body["alerts"][0];
    assert_eq!(digest["labels"]["severity"], "info");
    assert_eq!(
        digest["annotations"]["description"],
        "GPU 1 is most at risk."
    );
    // The digest request carries the fleet, most at risk first.
    let asked = chat
        .requests()
        .into_iter()
        .find(|r| r.text().contains("summarise"))
        .expect("a digest request");
    assert!(asked.text().contains("gpus"), "{}", asked.text());
}
