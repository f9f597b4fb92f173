//! Exact payloads of the machine-facing notifiers, received by a real local HTTP server:
//! the webhook's Alertmanager version-4 message, and the alert list pushed to
//! Alertmanager's `POST /api/v2/alerts` (with `endsAt` set the way Prometheus sets it).

use crate::common;

use std::time::Duration;

use chrono::Utc;
use common::alerts::{alert, at, labels, notification, resolved};
use common::http_server::{Answer, HttpServer};
use gpu_sentinel::alert::AlertState;
use gpu_sentinel::alert::notify::Notifier;
use gpu_sentinel::alert::notify::alertmanager::AlertmanagerNotifier;
use gpu_sentinel::alert::notify::webhook::WebhookNotifier;
use serde_json::{Value, json};

const TIMEOUT: Duration = Duration::from_secs(5);

#[test]
fn webhook_sends_alertmanagers_version_4_payload() {
    let server = HttpServer::start(vec![Answer::ok()]);
    let notifier =
        WebhookNotifier::new(&server.url("/hook"), Some("tok".into()), TIMEOUT).expect("n");
    let firing = alert("GpuFailureRiskHigh", "critical", 3);
    let gone = resolved(alert("GpuFailureRiskHigh", "critical", 5));
    let mut pending = alert("GpuFailureRiskHigh", "critical", 6);
    pending.state = AlertState::Pending;
    // Resolved listed first: the payload puts firing alerts first all the same.
    let n = notification("ops", vec![gone.clone(), pending, firing.clone()]);
    notifier.send(&n).expect("delivered");

    let request = &server.requests()[0];
    assert_eq!(request.method, "POST");
    assert_eq!(request.path(), "/hook");
    assert_eq!(request.header("authorization"), Some("Bearer tok"));
    assert!(
        request
            .header("content-type")
            .is_some_and(|t| t.starts_with("application/json"))
    );
    let fingerprint = |a: &gpu_sentinel::alert::Alert| format!("{:016x}", a.fingerprint());
    let expected = json!({
        "receiver": "ops",
        "status": "firing",
        "alerts": [
            {
                "status": "firing",
                "labels": firing.labels,
                "annotations": firing.annotations,
                "startsAt": "2024-05-01T10:01:00Z",
                "endsAt": "0001-01-01T00:00:00Z",
                "generatorURL": "http://gpu-host-01:10400/api/v1/alerts",
                "fingerprint": fingerprint(&firing),
            },
            {
                "status": "resolved",
                "labels": gone.labels,
                "annotations": gone.annotations,
                "startsAt": "2024-05-01T10:01:00Z",
                "endsAt": "2024-05-01T10:21:00Z",
                "generatorURL": "http://gpu-host-01:10400/api/v1/alerts",
                "fingerprint": fingerprint(&gone),
            },
        ],
        "groupLabels": {"alertname": "GpuFailureRiskHigh"},
        "commonLabels": labels(&[
            ("alertname", "GpuFailureRiskHigh"),
            ("hostname", "gpu-host-01"),
            ("severity", "critical"),
        ]),
        "commonAnnotations": {
            "description": firing.annotations["description"],
            "runbook": firing.annotations["runbook"],
        },
        "externalURL": "http://gpu-host-01:10400/api/v1/alerts",
        "version": "4",
        "groupKey": "{}:{alertname=\"GpuFailureRiskHigh\"}",
        "truncatedAlerts": 0,
    });
    assert_eq!(request.json(), expected);
    for a in expected["alerts"].as_array().expect("alerts") {
        let fp = a["fingerprint"].as_str().expect("fingerprint");
        assert!(
            fp.len() == 16 && fp.chars().all(|c| c.is_ascii_hexdigit()),
            "{fp}"
        );
    }

    // All resolved: the group's status is resolved.
    notifier
        .send(&notification("ops", vec![gone]))
        .expect("delivered");
    let body = server.wait_for(2, TIMEOUT)[1].json();
    assert_eq!(body["status"], "resolved");
    assert_eq!(body["alerts"][0]["status"], "resolved");
}

#[test]
fn alertmanager_receives_the_alert_list_with_ends_ahead() {
    let server = HttpServer::start(vec![Answer::ok()]);
    let resend = Duration::from_secs(30);
    let notifier =
        AlertmanagerNotifier::new(&server.url(""), None, TIMEOUT, resend).expect("notifier");
    let firing = alert("GpuLost", "critical", 1);
    let mut decided = alert("GpuThermalSlowdown", "warning", 2);
    decided.ends_at = Some(at("2024-05-01T11:00:00Z"));
    let gone = resolved(alert("GpuHardwareXid", "critical", 3));
    let mut pending = alert("GpuAllocatedIdle", "info", 4);
    pending.state = AlertState::Pending;
    let n = notification(
        "am",
        vec![firing.clone(), decided.clone(), gone.clone(), pending],
    );
    let before = Utc::now();
    notifier.send(&n).expect("delivered");
    let after = Utc::now();

    let request = &server.requests()[0];
    assert_eq!(request.method, "POST");
    assert_eq!(request.path(), "/api/v2/alerts");
    let body = request.json();
    let alerts = body.as_array().expect("a JSON array");
    assert_eq!(alerts.len(), 3, "pending alerts are not pushed: {body}");
    for (sent, source) in alerts.iter().zip([&firing, &decided, &gone]) {
        let mut keys: Vec<&str> = sent
            .as_object()
            .expect("object")
            .keys()
            .map(String::as_str)
            .collect();
        keys.sort();
        assert_eq!(
            keys,
            [
                "annotations",
                "endsAt",
                "generatorURL",
                "labels",
                "startsAt"
            ]
        );
        assert_eq!(sent["labels"], json!(source.labels));
        assert_eq!(sent["annotations"], json!(source.annotations));
        assert_eq!(time(&sent["startsAt"]), at("2024-05-01T10:01:00Z"));
        assert_eq!(
            sent["generatorURL"],
            "http://gpu-host-01:10400/api/v1/alerts"
        );
    }
    // Firing with no end: four resend intervals after the send.
    let ends = time(&alerts[0]["endsAt"]);
    let ahead = chrono::Duration::seconds(120);
    assert!(
        ends >= before + ahead && ends <= after + ahead,
        "{ends} not 2 min after the send"
    );
    // Firing with an end the dispatcher chose, and resolved with its real end.
    assert_eq!(time(&alerts[1]["endsAt"]), at("2024-05-01T11:00:00Z"));
    assert_eq!(time(&alerts[2]["endsAt"]), at("2024-05-01T10:21:00Z"));

    // A base URL with a path prefix, and the full API URL, both land on the API.
    let prefixed =
        AlertmanagerNotifier::new(&server.url("/am/"), None, TIMEOUT, resend).expect("notifier");
    prefixed.send(&n).expect("delivered");
    let full = AlertmanagerNotifier::new(&server.url("/api/v2/alerts"), None, TIMEOUT, resend)
        .expect("notifier");
    full.send(&n).expect("delivered");
    let requests = server.wait_for(3, TIMEOUT);
    assert_eq!(requests[1].path(), "/am/api/v2/alerts");
    assert_eq!(requests[2].path(), "/api/v2/alerts");
}

#[test]
fn alertmanager_batches_long_lists() {
    let server = HttpServer::start(vec![Answer::ok()]);
    let notifier =
        AlertmanagerNotifier::new(&server.url(""), None, TIMEOUT, Duration::from_secs(60))
            .expect("notifier");
    let alerts = (0..600)
        .map(|gpu| alert("GpuLost", "critical", gpu))
        .collect();
    notifier
        .send(&notification("am", alerts))
        .expect("delivered");
    let sizes: Vec<usize> = server
        .requests()
        .iter()
        .map(|r| r.json().as_array().map_or(0, Vec::len))
        .collect();
    assert_eq!(sizes, [256, 256, 88]);

    // A failing batch fails the notification (retried whole: re-sending is harmless).
    let failing = HttpServer::start(vec![Answer::ok(), Answer::status(503)]);
    let notifier =
        AlertmanagerNotifier::new(&failing.url(""), None, TIMEOUT, Duration::from_secs(60))
            .expect("notifier");
    let alerts = (0..300)
        .map(|gpu| alert("GpuLost", "critical", gpu))
        .collect();
    assert!(notifier.send(&notification("am", alerts)).is_err());
}

fn time(value: &Value) -> chrono::DateTime<Utc> {
    let text = value
        .as_str()
        .unwrap_or_else(|| panic!("{value} is not a time"));
    chrono::DateTime::parse_from_rfc3339(text)
        .unwrap_or_else(|e| panic!("{text}: {e}"))
        .with_timezone(&Utc)
}

#[test]
fn an_endless_resend_interval_ends_alerts_in_the_last_representable_year_not_a_panic() {
    use gpu_sentinel::alert::notify::alertmanager::postable;
    let n = notification("am", vec![alert("GpuLost", "critical", 1)]);
    let now = at("2024-05-01T10:00:00Z");
    for interval in [
        Duration::from_secs(u64::MAX),
        Duration::from_secs(100_000 * 365 * 86_400),
    ] {
        let alerts = postable(&n, now, interval);
        assert_eq!(
            alerts[0].ends_at,
            at("9999-12-31T23:59:59Z"),
            "{interval:?}"
        );
    }
}
