//! The advisor against a fake OpenAI-compatible chat-completions server on loopback: normal
//! answers, keep-alive lines before the body, answers cut at max_tokens, 401/429/500, error
//! bodies, malformed JSON and a server that never answers — all counted, none blocking.
//! Also the summary it sends and its redaction.

use crate::common;
use crate::delivery_support;

use std::time::{Duration, Instant};

use chrono::Utc;
use common::http_server::{Answer, HttpServer, Step};
use delivery_support::wait_until;
use gpu_sentinel::advice::{
    AdviceError, AdviceStatus, Advisor, CUT_SHORT_NOTE, Redaction, alert_summary, fleet_summary,
};
use gpu_sentinel::alert::{Alert, AlertState};
use gpu_sentinel::config::AdviceConfig;
use gpu_sentinel::engine::idle::ProcessFinding;
use gpu_sentinel::engine::risk::{Assessment, Contribution};
use gpu_sentinel::engine::{Findings, GpuFindings};
use gpu_sentinel::model::Liveness;
use serde_json::{Value, json};

const KEY: &str = "sk-test-not-a-real-key";

fn config(server: &HttpServer) -> AdviceConfig {
    AdviceConfig {
        enabled: true,
        // A base ending in /v1, as OpenAI-style servers are often given.
        base_url: server.url("/v1"),
        model: "test-model".into(),
        api_key_env: "GS_TEST_UNUSED".into(),
        timeout: Duration::from_secs(2),
        max_tokens: 123,
        ..AdviceConfig::default()
    }
}

fn advisor(server: &HttpServer) -> Advisor {
    Advisor::start(&config(server), KEY.into()).expect("advisor")
}

fn completion(content: &str, finish_reason: &str) -> String {
    json!({
        "id": "c-1",
        "object": "chat.completion",
        "model": "test-model",
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": content},
            "finish_reason": finish_reason,
        }],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    })
    .to_string()
}

fn summary() -> Value {
    json!({"alerts": [{"labels": {"alertname": "GpuLost", "gpu": "3"}}]})
}

fn counted(advisor: &Advisor, outcome: &str) -> u64 {
    advisor.stats().requests.get(outcome).copied().unwrap_or(0)
}

/// Waits for the group's request to finish either way.
fn settled(advisor: &Advisor, key: &str) -> AdviceStatus {
    wait_until(Duration::from_secs(10), || {
        !matches!(
            advisor.status(key),
            AdviceStatus::Pending { .. } | AdviceStatus::Unrequested
        )
    });
    advisor.status(key)
}

#[test]
fn a_normal_answer_is_cached_per_group() {
    let server = HttpServer::answering(|_| {
        Answer::status(200).body(&completion("- drain GPU 3\n- open an RMA", "stop"))
    });
    let advisor = advisor(&server);
    assert_eq!(advisor.status("g"), AdviceStatus::Unrequested);
    assert!(advisor.request("g", &summary()));
    assert!(!advisor.request("g", &summary()), "one request per group");
    assert_eq!(
        settled(&advisor, "g"),
        AdviceStatus::Ready("- drain GPU 3\n- open an RMA".into())
    );
    assert_eq!(
        advisor.advice("g").as_deref(),
        Some("- drain GPU 3\n- open an RMA")
    );
    assert!(!advisor.request("g", &summary()), "cached");
    assert_eq!(counted(&advisor, "ok"), 1);
    assert_eq!(advisor.stats().cached, 1);

    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    let r = &requests[0];
    assert_eq!(r.method, "POST");
    assert_eq!(r.path(), "/v1/chat/completions");
    assert_eq!(r.header("authorization"), Some(&*format!("Bearer {KEY}")));
    let body: Value = serde_json::from_slice(&r.body).expect("JSON request");
    assert_eq!(body["model"], "test-model", "the model is configuration");
    assert_eq!(body["max_tokens"], 123);
    assert_eq!(body["stream"], false);
    assert_eq!(body["messages"][0]["role"], "system");
    let sent: Value = serde_json::from_str(body["messages"][1]["content"].as_str().unwrap())
        .expect("the summary is sent as JSON");
    assert_eq!(sent, summary());

    // A resolved group is forgotten and asked about afresh next time.
    advisor.forget("g");
    assert_eq!(advisor.advice("g"), None);
    assert!(advisor.request("g", &summary()));
}

#[test]
fn blank_keep_alive_lines_before_the_body_are_skipped() {
    let server = HttpServer::answering(|_| {
        // No Content-Length: the body runs to the end of the connection, and the
        // keep-alive lines come while the "model" works.
        Answer::raw(vec![
            Step::Write(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n"
                    .to_vec(),
            ),
            Step::Write(b"\n".to_vec()),
            Step::Sleep(Duration::from_millis(200)),
            Step::Write(b"\n \n".to_vec()),
            Step::Sleep(Duration::from_millis(200)),
            Step::Write(b": keep-alive\n\n".to_vec()),
            Step::Write(completion("- reseat the GPU", "stop").into_bytes()),
        ])
    });
    let advisor = advisor(&server);
    advisor.request("g", &summary());
    assert_eq!(
        settled(&advisor, "g"),
        AdviceStatus::Ready("- reseat the GPU".into())
    );
    assert_eq!(counted(&advisor, "ok"), 1);
}

#[test]
fn an_answer_cut_at_max_tokens_is_kept_and_marked() {
    let server = HttpServer::answering(|_| {
        Answer::status(200).body(&completion("- drain GPU 3\n- che", "length"))
    });
    let advisor = advisor(&server);
    advisor.request("g", &summary());
    let AdviceStatus::Ready(text) = settled(&advisor, "g") else {
        panic!("kept");
    };
    assert!(text.starts_with("- drain GPU 3\n- che"));
    assert!(text.ends_with(CUT_SHORT_NOTE), "{text}");
    assert_eq!(counted(&advisor, "incomplete"), 1);
    assert_eq!(counted(&advisor, "ok"), 0);
}

/// One failing answer: no advice, counted under `outcome`, not asked again at once.
fn fails_with(answer: fn() -> Answer, outcome: &str) {
    let server = HttpServer::answering(move |_| answer());
    let advisor = advisor(&server);
    assert!(advisor.request("g", &summary()));
    assert_eq!(settled(&advisor, "g"), AdviceStatus::Failed, "{outcome}");
    assert_eq!(advisor.advice("g"), None);
    assert_eq!(counted(&advisor, outcome), 1, "{outcome}");
    assert!(!advisor.request("g", &summary()), "a failed group waits");
    assert_eq!(server.requests().len(), 1);
}

#[test]
fn a_refused_key_is_counted_and_not_retried_at_once() {
    fails_with(
        || {
            Answer::status(401).body(r#"{"error":{"message":"Authentication Fails (no such user)","type":"authentication_error"}}"#)
        },
        "unauthorized",
    );
}

#[test]
fn server_errors_error_bodies_and_malformed_json_are_counted() {
    fails_with(
        || Answer::status(500).body(r#"{"error":{"message":"internal"}}"#),
        "server_error",
    );
    fails_with(
        || Answer::status(503).body("upstream overloaded"),
        "server_error",
    );
    fails_with(
        || Answer::status(200).body(r#"{"error":{"message":"Model Not Exist"}}"#),
        "error_body",
    );
    fails_with(
        || Answer::status(200).body(r#"{"choices": [{"message": {"content": "- dr"#),
        "malformed",
    );
    fails_with(
        || Answer::status(200).body("<html>gateway</html>"),
        "malformed",
    );
    fails_with(
        || Answer::status(200).body(&completion("", "stop")),
        "empty",
    );
    fails_with(|| Answer::status(404).body("not found"), "client_error");
}

#[test]
fn rate_limiting_pauses_the_worker_for_retry_after() {
    let server = HttpServer::answering(|r| {
        let body: Value = serde_json::from_slice(&r.body).unwrap_or_default();
        let user = body["messages"][1]["content"].as_str().unwrap_or("");
        if user.contains("first") {
            Answer::status(429)
                .header("Retry-After", "1")
                .body(r#"{"error":{"message":"Rate limit reached"}}"#)
        } else {
            Answer::status(200).body(&completion("- wait", "stop"))
        }
    });
    let advisor = advisor(&server);
    advisor.request("first", &json!({"group": "first"}));
    advisor.request("second", &json!({"group": "second"}));
    assert_eq!(settled(&advisor, "first"), AdviceStatus::Failed);
    assert_eq!(
        settled(&advisor, "second"),
        AdviceStatus::Ready("- wait".into())
    );
    assert_eq!(counted(&advisor, "rate_limited"), 1);
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    let gap = requests[1].at - requests[0].at;
    assert!(gap >= Duration::from_millis(950), "paused {gap:?}");
}

#[test]
fn a_hanging_server_times_out_and_blocks_nothing() {
    let server = HttpServer::answering(|_| Answer::raw(vec![Step::Sleep(Duration::from_secs(60))]));
    let mut config = config(&server);
    config.timeout = Duration::from_secs(1);
    let advisor = Advisor::start(&config, KEY.into()).expect("advisor");
    let begun = Instant::now();
    assert!(advisor.request("a", &summary()));
    assert!(
        advisor.request("b", &summary()),
        "queued behind a, still at once"
    );
    assert!(
        begun.elapsed() < Duration::from_millis(200),
        "request never waits: {:?}",
        begun.elapsed()
    );
    assert_eq!(advisor.advice("a"), None);
    assert!(matches!(advisor.status("a"), AdviceStatus::Pending { .. }));
    // The dispatcher's side: after max_wait it sends without advice. Here: both time out,
    // one after the other, each within its own limit.
    assert_eq!(settled(&advisor, "a"), AdviceStatus::Failed);
    assert_eq!(settled(&advisor, "b"), AdviceStatus::Failed);
    assert!(
        begun.elapsed() < Duration::from_secs(5),
        "two 1 s timeouts took {:?}",
        begun.elapsed()
    );
    assert_eq!(counted(&advisor, "timeout"), 2);
    assert_eq!(advisor.advice("a"), None);
    // Shutdown does not wait for the worker either.
    let begun = Instant::now();
    advisor.shutdown();
    assert!(!advisor.request("c", &summary()));
    assert!(begun.elapsed() < Duration::from_millis(200));
}

#[test]
fn the_digest_is_asked_once_and_taken_once() {
    let server = HttpServer::answering(|r| {
        let body: Value = serde_json::from_slice(&r.body).unwrap_or_default();
        let system = body["messages"][0]["content"].as_str().unwrap_or("");
        assert!(
            system.contains("summarise"),
            "the digest has its own prompt"
        );
        Answer::status(200).body(&completion("GPU 3 is at risk; 2 GPUs idle.", "stop"))
    });
    let advisor = advisor(&server);
    assert!(advisor.digest(&json!({"gpus": []})));
    assert!(!advisor.digest(&json!({"gpus": []})), "one at a time");
    assert!(wait_until(Duration::from_secs(10), || counted(
        &advisor, "ok"
    ) == 1));
    assert_eq!(
        advisor.take_digest().as_deref(),
        Some("GPU 3 is at risk; 2 GPUs idle.")
    );
    assert_eq!(advisor.take_digest(), None);
}

#[test]
fn configuration_errors_name_the_variable() {
    let mut config = AdviceConfig::default();
    assert!(
        matches!(Advisor::from_config(&config), Ok(None)),
        "off by default"
    );
    config.enabled = true;
    config.api_key_env = "GS_TEST_ADVICE_KEY_THAT_IS_NOT_SET".into();
    let err = Advisor::from_config(&config).err().expect("no key");
    assert!(matches!(err, AdviceError::MissingApiKey { .. }));
    assert!(
        err.to_string()
            .contains("GS_TEST_ADVICE_KEY_THAT_IS_NOT_SET"),
        "{err}"
    );
    config.api_key_env = " ".into();
    assert!(matches!(
        Advisor::from_config(&config),
        Err(AdviceError::NoKeyVariable)
    ));
}

fn findings() -> Findings {
    let ghost = ProcessFinding {
        pid: 4242,
        memory_bytes: Some(8 << 30),
        user: Some("alice".into()),
        process: Some("python".into()),
        command: Some("python train.py --data /home/alice/secret".into()),
        pod: Some("trainer-0".into()),
        namespace: Some("research".into()),
        liveness: Liveness::Gone,
        idle_seconds: 3600.0,
        ..ProcessFinding::default()
    };
    let mut gpu = GpuFindings {
        index: 3,
        uuid: "GPU-3333".into(),
        name: "NVIDIA H100".into(),
        up: true,
        lost: false,
        risk: Assessment {
            score: 0.8123456,
            rule: None,
            contributions: vec![Contribution {
                feature: "ecc_corrected_rate_24h".into(),
                value: 42.0,
                contribution: 2.5,
            }],
            evidence: Vec::new(),
        },
        idle: Default::default(),
        thermal_slowdown: false,
        new_hardware_xids: vec![],
        hardware_xids_24h: vec![79],
        row_remap_failure: false,
        uncorrectable_ecc_24h: 0.0,
        failing_nvlink: None,
        cost: Default::default(),
        readings: Default::default(),
        health: Default::default(),
        mig: Vec::new(),
    };
    gpu.idle.ghosts.push(ghost);
    let mut other = gpu.clone();
    other.index = 1;
    other.uuid = "GPU-1111".into();
    other.risk = Assessment::default();
    other.idle = Default::default();
    Findings {
        at: Utc::now(),
        gpus: vec![other, gpu],
        capacity: Default::default(),
        placement: Default::default(),
        health: Default::default(),
    }
}

fn ghost_alert() -> Alert {
    let labels = [
        ("alertname", "GpuGhostProcess"),
        ("severity", "warning"),
        ("hostname", "gpu-node-7"),
        ("gpu", "3"),
        ("uuid", "GPU-3333"),
        ("user", "alice"),
    ];
    Alert {
        labels: labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        annotations: [(
            "summary".to_string(),
            "GPU 3 on gpu-node-7: python train.py --data /home/alice/secret (alice, \
             research/trainer-0) holds 8 GiB and is gone"
                .to_string(),
        )]
        .into(),
        state: AlertState::Firing,
        active_at: Utc::now(),
        starts_at: Some(Utc::now()),
        ends_at: None,
    }
}

#[test]
fn the_summary_carries_the_gpus_concerned_with_numbers_and_reasons() {
    let open = Redaction::default();
    let s = alert_summary(&[ghost_alert()], &findings(), "gpu-node-7", open);
    assert_eq!(s["host"], "gpu-node-7");
    let gpus = s["gpus"].as_array().expect("gpus");
    assert_eq!(gpus.len(), 1, "only the GPU the alert concerns");
    assert_eq!(gpus[0]["uuid"], "GPU-3333");
    assert_eq!(gpus[0]["risk"]["score"], 0.812);
    assert_eq!(
        gpus[0]["risk"]["reasons"][0]["feature"],
        "ecc_corrected_rate_24h"
    );
    assert_eq!(gpus[0]["hardware_xids_24h"], json!([79]));
    assert_eq!(gpus[0]["ghost_processes"][0]["user"], "alice");
    assert_eq!(s["fleet"]["gpus"], 2);
    assert_eq!(s["alerts"][0]["labels"]["alertname"], "GpuGhostProcess");
    let digest = fleet_summary(&findings(), "gpu-node-7", open);
    assert_eq!(digest["gpus"][0]["uuid"], "GPU-3333", "most at risk first");
}

#[test]
fn redaction_removes_hosts_users_and_commands_everywhere() {
    let all = Redaction {
        hostnames: true,
        users: true,
        commands: true,
    };
    let s = alert_summary(&[ghost_alert()], &findings(), "gpu-node-7", all).to_string();
    for secret in [
        "gpu-node-7",
        "alice",
        "train.py",
        "trainer-0",
        "research",
        "python",
    ] {
        assert!(!s.contains(secret), "{secret} leaked: {s}");
    }
    assert!(
        s.contains("<host>") && s.contains("<user>") && s.contains("<command>"),
        "{s}"
    );
    assert!(
        s.contains("GPU-3333") && s.contains("ecc_corrected_rate_24h"),
        "numbers stay"
    );
    let digest = fleet_summary(&findings(), "gpu-node-7", all).to_string();
    for secret in ["gpu-node-7", "alice", "train.py"] {
        assert!(!digest.contains(secret), "{secret} leaked: {digest}");
    }
    // Each switch on its own.
    let users_only = Redaction {
        users: true,
        ..Redaction::default()
    };
    let s = alert_summary(&[ghost_alert()], &findings(), "gpu-node-7", users_only).to_string();
    assert!(!s.contains("alice") && s.contains("gpu-node-7") && s.contains("train.py"));
}
