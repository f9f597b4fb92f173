//! Chat notifiers against a real local HTTP server: the exact message shape of Slack,
//! Feishu, DingTalk and WeCom; Feishu's and DingTalk's signatures recomputed here with
//! HMAC-SHA256 straight from the services' documented recipes; and every service's size
//! limit kept with Chinese text (three bytes a character) cut on UTF-8 boundaries.

use crate::common;

use std::time::Duration;

use base64::Engine as _;
use chrono::Utc;
use common::alerts::{alert, notification, resolved};
use common::http_server::{Answer, HttpServer, Request};
use gpu_sentinel::alert::notify::Notifier;
use gpu_sentinel::alert::notify::dingtalk::DingTalkNotifier;
use gpu_sentinel::alert::notify::feishu::FeishuNotifier;
use gpu_sentinel::alert::notify::slack::SlackNotifier;
use gpu_sentinel::alert::notify::wecom::WeComNotifier;
use gpu_sentinel::alert::{Alert, Notification};
use hmac::{KeyInit as _, Mac as _};
use serde_json::Value;

const TIMEOUT: Duration = Duration::from_secs(5);
const TITLE: &str = "[FIRING:2] GpuFailureRiskHigh · gpu-host-01";

/// Two firing alerts, one critical with advice and characters chat markup must escape.
fn pair() -> Notification {
    let mut critical = alert("GpuFailureRiskHigh", "critical", 3);
    critical.annotations.insert(
        "advice".into(),
        "Drain GPU 3 & schedule an RMA check <before Friday>.".into(),
    );
    let warning = alert("GpuFailureRiskHigh", "warning", 4);
    notification("ops", vec![warning, critical])
}

/// `n` alerts whose descriptions are `chars` Chinese characters.
fn many(n: u32, chars: usize) -> Notification {
    let sentence = "显存纠错计数持续上升，建议尽快排空并检查。";
    let text: String = sentence.chars().cycle().take(chars).collect();
    let alerts = (0..n)
        .map(|gpu| {
            let mut a = alert("GpuFailureRiskHigh", "critical", gpu);
            a.annotations.insert("description".into(), text.clone());
            a
        })
        .collect();
    notification("ops", alerts)
}

fn hmac_base64(key: &[u8], message: &[u8]) -> String {
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(key).expect("any key length");
    mac.update(message);
    base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())
}

/// N in "… (N more alerts)", or 0 without the marker.
fn hidden(text: &str) -> usize {
    let Some(start) = text.find("… (") else {
        return 0;
    };
    let digits: String = text[start + "… (".len()..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().expect("a count in the marker")
}

fn send(notifier: &dyn Notifier, server: &HttpServer, n: &Notification) -> Request {
    let before = server.requests().len();
    notifier.send(n).expect("delivered");
    server.wait_for(before + 1, TIMEOUT)[before].clone()
}

#[test]
fn slack_message_has_a_coloured_attachment_with_blocks() {
    let server = HttpServer::start(vec![Answer::ok()]);
    let notifier = SlackNotifier::new(&server.url("/services/T0/B0/x"), TIMEOUT).expect("n");
    let body = send(&notifier, &server, &pair()).json();
    assert_eq!(body["text"], TITLE);
    let attachment = &body["attachments"][0];
    assert_eq!(attachment["color"], "#d63232", "critical is red");
    let blocks = attachment["blocks"].as_array().expect("blocks");
    assert_eq!(blocks[0]["type"], "header");
    assert_eq!(blocks[0]["text"]["text"], TITLE);
    // The critical alert first, whatever the notification's order.
    let first = blocks[1]["text"]["text"].as_str().expect("section text");
    assert_eq!(blocks[1]["text"]["type"], "mrkdwn");
    for part in [
        "*GpuFailureRiskHigh* (critical)",
        "GPU 3 (GPU-00000000-0000-0000-0000-000000000003) on gpu-host-01",
        "*Summary:* GPU 3 on gpu-host-01: GpuFailureRiskHigh",
        "*Description:* Failure risk 0.91 (≥ 0.70): corrected ECC 42/h",
        "*Runbook:* https://runbooks.example/gpu#failure-risk",
        "*Advice:* Drain GPU 3 &amp; schedule an RMA check &lt;before Friday&gt;.",
        "_since 2024-05-01 10:01:00 UTC_",
    ] {
        assert!(first.contains(part), "{part:?} missing from:\n{first}");
    }
    assert!(
        blocks[2]["text"]["text"]
            .as_str()
            .is_some_and(|t| t.contains("(warning)"))
    );
    assert_eq!(blocks[3]["type"], "context");
    assert_eq!(
        blocks[3]["elements"][0]["text"],
        "<http://gpu-host-01:10400/api/v1/alerts|All alerts>"
    );

    // Resolved: green, with when it ended.
    let n = notification("ops", vec![resolved(alert("GpuLost", "critical", 1))]);
    let body = send(&notifier, &server, &n).json();
    assert_eq!(body["text"], "[RESOLVED] GpuLost · GPU 1 · gpu-host-01");
    assert_eq!(body["attachments"][0]["color"], "#2eb67d");
    let section = body["attachments"][0]["blocks"][1]["text"]["text"]
        .as_str()
        .expect("section");
    assert!(section.contains("— resolved"), "{section}");
    assert!(
        section.contains("resolved 2024-05-01 10:21:00 UTC after 20m"),
        "{section}"
    );
}

#[test]
fn slack_keeps_its_block_and_text_limits() {
    let server = HttpServer::start(vec![Answer::ok()]);
    let notifier = SlackNotifier::new(&server.url("/services/T0/B0/x"), TIMEOUT).expect("n");
    let body = send(&notifier, &server, &many(60, 5000)).json();
    let blocks = body["attachments"][0]["blocks"].as_array().expect("blocks");
    assert!(blocks.len() <= 50, "{} blocks", blocks.len());
    let sections: Vec<&str> = blocks
        .iter()
        .filter(|b| b["type"] == "section")
        .map(|b| b["text"]["text"].as_str().expect("text"))
        .collect();
    for s in &sections {
        assert!(s.chars().count() <= 3000, "{} chars", s.chars().count());
    }
    let footer = blocks
        .last()
        .and_then(|b| b["elements"][0]["text"].as_str())
        .expect("footer");
    assert_eq!(sections.len() + hidden(footer), 60, "{footer}");
    assert!(footer.contains("… (12 more alerts)"), "{footer}");
}

#[test]
fn feishu_card_is_signed_as_documented() {
    let server = HttpServer::start(vec![Answer::json(200, r#"{"code":0,"msg":"success"}"#)]);
    let secret = "feishu-signing-secret";
    let notifier = FeishuNotifier::new(
        &server.url("/open-apis/bot/v2/hook/0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b"),
        Some(secret.into()),
        TIMEOUT,
    )
    .expect("n");
    let before = Utc::now().timestamp();
    let body = send(&notifier, &server, &pair()).json();
    let after = Utc::now().timestamp();
    // timestamp: seconds, as a string; sign: base64(HMAC-SHA256(timestamp\nsecret, "")).
    let timestamp = body["timestamp"].as_str().expect("timestamp is a string");
    let seconds: i64 = timestamp.parse().expect("seconds");
    assert!((before..=after).contains(&seconds), "{seconds}");
    let expected = hmac_base64(format!("{timestamp}\n{secret}").as_bytes(), b"");
    assert_eq!(body["sign"], expected.as_str());

    assert_eq!(body["msg_type"], "interactive");
    let card = &body["card"];
    assert_eq!(card["header"]["title"]["content"], TITLE);
    assert_eq!(card["header"]["template"], "red");
    let elements = card["elements"].as_array().expect("elements");
    let tags: Vec<&str> = elements
        .iter()
        .map(|e| e["tag"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(tags, ["div", "hr", "div", "note"]);
    let first = elements[0]["text"]["content"].as_str().expect("content");
    assert_eq!(elements[0]["text"]["tag"], "lark_md");
    for part in [
        "**GpuFailureRiskHigh** (critical)",
        "GPU 3 (GPU-00000000-0000-0000-0000-000000000003) on gpu-host-01",
        "**Description:** Failure risk 0.91 (≥ 0.70)",
        "**Runbook:** https://runbooks.example/gpu#failure-risk",
        "**Advice:** Drain GPU 3 & schedule an RMA check <before Friday>.",
        "since 2024-05-01 10:01:00 UTC",
    ] {
        assert!(first.contains(part), "{part:?} missing from:\n{first}");
    }
    assert_eq!(
        elements[3]["elements"][0]["content"],
        "[All alerts](http://gpu-host-01:10400/api/v1/alerts)"
    );

    // Without a secret there is nothing to sign.
    let unsigned =
        FeishuNotifier::new(&server.url("/open-apis/bot/v2/hook/x"), None, TIMEOUT).expect("n");
    let body = send(&unsigned, &server, &pair()).json();
    assert!(body.get("timestamp").is_none() && body.get("sign").is_none());

    // Resolved: a green card.
    let n = notification("ops", vec![resolved(alert("GpuLost", "critical", 1))]);
    let body = send(&unsigned, &server, &n).json();
    assert_eq!(body["card"]["header"]["template"], "green");
}

#[test]
fn feishu_bodies_stay_under_20_kb() {
    let server = HttpServer::start(vec![Answer::json(200, r#"{"code":0}"#)]);
    let notifier = FeishuNotifier::new(
        &server.url("/open-apis/bot/v2/hook/x"),
        Some("s".into()),
        TIMEOUT,
    )
    .expect("n");
    let request = send(&notifier, &server, &many(300, 1000));
    assert!(request.body.len() <= 20_000, "{} bytes", request.body.len());
    let body = request.json();
    let elements = body["card"]["elements"].as_array().expect("elements");
    let shown = elements.iter().filter(|e| e["tag"] == "div").count();
    let note = elements
        .last()
        .and_then(|e| e["elements"][0]["content"].as_str())
        .expect("note");
    assert!(shown >= 1, "at least one alert shown");
    assert_eq!(shown + hidden(note), 300, "{note}");
    // Large enough to be near the limit, not cut far too early.
    assert!(request.body.len() > 15_000, "{} bytes", request.body.len());

    // One alert larger than the limit alone: its description is cut, the alert still sent.
    let request = send(&notifier, &server, &many(1, 30_000));
    assert!(request.body.len() <= 20_000, "{} bytes", request.body.len());
    let content = request.json()["card"]["elements"][0]["text"]["content"]
        .as_str()
        .expect("content")
        .to_string();
    assert!(content.contains("显存纠错计数") && content.contains('…'));
}

#[test]
fn dingtalk_markdown_is_signed_in_the_url() {
    let server = HttpServer::start(vec![Answer::json(200, r#"{"errcode":0,"errmsg":"ok"}"#)]);
    let secret = "SEC0123456789abcdef";
    let notifier = DingTalkNotifier::new(
        &server.url("/robot/send?access_token=tok"),
        Some(secret.into()),
        TIMEOUT,
    )
    .expect("n");
    let before = Utc::now().timestamp_millis();
    let request = send(&notifier, &server, &pair());
    let after = Utc::now().timestamp_millis();
    assert_eq!(request.path(), "/robot/send");
    assert_eq!(request.query("access_token").as_deref(), Some("tok"));
    // timestamp: milliseconds; sign: base64(HMAC-SHA256(secret, timestamp\nsecret)),
    // URL-encoded (decoded by `query`).
    let timestamp = request.query("timestamp").expect("timestamp");
    let millis: i64 = timestamp.parse().expect("milliseconds");
    assert!((before..=after).contains(&millis), "{millis}");
    let expected = hmac_base64(
        secret.as_bytes(),
        format!("{timestamp}\n{secret}").as_bytes(),
    );
    assert_eq!(request.query("sign"), Some(expected));
    assert!(!request.target.contains('+') && !request.target.contains("=="));

    let body = request.json();
    assert_eq!(body["msgtype"], "markdown");
    assert_eq!(body["markdown"]["title"], TITLE);
    let text = body["markdown"]["text"].as_str().expect("text");
    assert!(text.starts_with(&format!("### {TITLE}\n\n")), "{text}");
    for part in [
        "#### 🔴 GpuFailureRiskHigh (critical)",
        "#### 🟠 GpuFailureRiskHigh (warning)",
        "**Description:** Failure risk 0.91",
        "**Advice:** Drain GPU 3",
        "[All alerts](http://gpu-host-01:10400/api/v1/alerts)",
    ] {
        assert!(text.contains(part), "{part:?} missing from:\n{text}");
    }
    assert!(text.find("(critical)") < text.find("(warning)"));

    let unsigned =
        DingTalkNotifier::new(&server.url("/robot/send?access_token=tok"), None, TIMEOUT)
            .expect("n");
    let request = send(&unsigned, &server, &pair());
    assert_eq!(request.query("sign"), None);
    assert_eq!(request.query("timestamp"), None);
}

#[test]
fn dingtalk_text_stays_under_its_limit() {
    let server = HttpServer::start(vec![Answer::json(200, r#"{"errcode":0}"#)]);
    let notifier =
        DingTalkNotifier::new(&server.url("/robot/send?access_token=t"), None, TIMEOUT).expect("n");
    let body = send(&notifier, &server, &many(100, 1300)).json();
    let text = body["markdown"]["text"].as_str().expect("text");
    assert!(text.len() <= 20_000, "{} bytes", text.len());
    assert!(
        text.len() > 15_000,
        "{} bytes: cut far too early",
        text.len()
    );
    let shown = text.matches("#### ").count();
    assert_eq!(shown + hidden(text), 100);
    assert!(text.contains("more alerts)"));
}

#[test]
fn wecom_markdown_fits_4096_bytes() {
    let server = HttpServer::start(vec![Answer::json(200, r#"{"errcode":0,"errmsg":"ok"}"#)]);
    let notifier =
        WeComNotifier::new(&server.url("/cgi-bin/webhook/send?key=k"), TIMEOUT).expect("n");
    let body = send(&notifier, &server, &pair()).json();
    assert_eq!(body["msgtype"], "markdown");
    let content = body["markdown"]["content"].as_str().expect("content");
    assert!(content.starts_with(&format!("## {TITLE}\n\n")), "{content}");
    for part in [
        "**GpuFailureRiskHigh** <font color=\"warning\">critical</font>",
        "GPU 3 (GPU-00000000-0000-0000-0000-000000000003) on gpu-host-01",
        "**Description:** Failure risk 0.91",
        "**Advice:** Drain GPU 3",
        "<font color=\"comment\">since 2024-05-01 10:01:00 UTC</font>",
    ] {
        assert!(content.contains(part), "{part:?} missing from:\n{content}");
    }

    // Chinese text near the limit: cut on character boundaries, count kept.
    for (alerts, chars) in [(30, 300), (12, 340), (1, 5000), (3, 1365)] {
        let body = send(&notifier, &server, &many(alerts, chars)).json();
        let content = body["markdown"]["content"].as_str().expect("content");
        assert!(
            content.len() <= 4096,
            "{alerts}×{chars}: {} bytes",
            content.len()
        );
        let shown = content.matches("**GpuFailureRiskHigh**").count();
        assert!(shown >= 1, "{alerts}×{chars}: no alert shown");
        assert_eq!(shown + hidden(content), alerts as usize, "{content}");
    }

    let n = notification("ops", vec![resolved(alert("GpuLost", "critical", 1))]);
    let body = send(&notifier, &server, &n).json();
    let content = body["markdown"]["content"].as_str().expect("content");
    assert!(
        content.contains("<font color=\"info\">resolved</font>"),
        "{content}"
    );
}

#[test]
fn messages_show_only_notified_alerts() {
    // Pending alerts are never shown; an alert without a GPU shows its host.
    let server = HttpServer::start(vec![Answer::json(200, r#"{"errcode":0}"#)]);
    let notifier =
        WeComNotifier::new(&server.url("/cgi-bin/webhook/send?key=k"), TIMEOUT).expect("n");
    let mut pending: Alert = alert("GpuAllocatedIdle", "info", 7);
    pending.state = gpu_sentinel::alert::AlertState::Pending;
    let mut fleet = alert("GpuFleetScaleOut", "info", 0);
    fleet.labels.remove("gpu");
    fleet.labels.remove("uuid");
    // Only pending alerts: nothing is sent.
    notifier
        .send(&notification("ops", vec![pending.clone()]))
        .expect("nothing to send");
    assert!(server.requests().is_empty());
    let body: Value = send(
        &notifier,
        &server,
        &notification("ops", vec![pending, fleet]),
    )
    .json();
    let content = body["markdown"]["content"].as_str().expect("content");
    assert!(!content.contains("GpuAllocatedIdle"), "{content}");
    assert!(content.contains("\ngpu-host-01\n"), "{content}");
    assert!(
        content.starts_with("## [FIRING:1] GpuFleetScaleOut · gpu-host-01"),
        "{content}"
    );
}
