//! Delivery outcomes against a real local HTTP server: which answers retry (with the wait
//! the service asked for), which drop, which succeed — by status, by chat services' in-body
//! codes, and for transport failures (refused, timed out). Also `build()` from receiver
//! entries, and that no error message ever shows a token or secret.

use crate::common;

use std::time::{Duration, Instant};

use common::alerts::{alert, no_env, notification, receiver};
use common::http_server::{Answer, HttpServer};
use gpu_sentinel::alert::notify::dingtalk::DingTalkNotifier;
use gpu_sentinel::alert::notify::feishu::FeishuNotifier;
use gpu_sentinel::alert::notify::webhook::WebhookNotifier;
use gpu_sentinel::alert::notify::wecom::WeComNotifier;
use gpu_sentinel::alert::notify::{Notifier, NotifyError, build};

const TIMEOUT: Duration = Duration::from_secs(5);

fn sample() -> gpu_sentinel::alert::Notification {
    notification("ops", vec![alert("GpuFailureRiskHigh", "critical", 3)])
}

/// Sends one sample notification through a webhook notifier to a server answering `answer`.
fn webhook_outcome(answer: Answer) -> (Result<(), NotifyError>, usize) {
    let server = HttpServer::start(vec![answer]);
    let notifier = WebhookNotifier::new(&server.url("/hook"), None, TIMEOUT).expect("notifier");
    let outcome = notifier.send(&sample());
    (outcome, server.requests().len())
}

fn is_retry(outcome: &Result<(), NotifyError>) -> bool {
    matches!(outcome, Err(NotifyError::Retry { .. }))
}

fn is_drop(outcome: &Result<(), NotifyError>) -> bool {
    matches!(outcome, Err(NotifyError::Drop { .. }))
}

fn after(outcome: &Result<(), NotifyError>) -> Option<Duration> {
    match outcome {
        Err(NotifyError::Retry { after, .. }) => *after,
        _ => None,
    }
}

#[test]
fn statuses_decide_ok_retry_or_drop() {
    assert_eq!(webhook_outcome(Answer::ok()).0, Ok(()));
    assert_eq!(webhook_outcome(Answer::status(204)).0, Ok(()));

    let (outcome, _) = webhook_outcome(Answer::status(503).body("maintenance"));
    assert!(is_retry(&outcome), "{outcome:?}");
    assert_eq!(after(&outcome), None);
    let reason = outcome.expect_err("503").to_string();
    assert!(
        reason.contains("503") && reason.contains("maintenance"),
        "{reason}"
    );

    let (outcome, _) = webhook_outcome(Answer::status(500));
    assert!(is_retry(&outcome), "{outcome:?}");

    let (outcome, _) = webhook_outcome(Answer::status(429).header("Retry-After", "17"));
    assert_eq!(
        after(&outcome),
        Some(Duration::from_secs(17)),
        "{outcome:?}"
    );

    // Retry-After as an HTTP-date, 30 s ahead.
    let date = (chrono::Utc::now() + chrono::Duration::seconds(30))
        .format("%a, %d %b %Y %H:%M:%S GMT")
        .to_string();
    let (outcome, _) = webhook_outcome(Answer::status(429).header("Retry-After", &date));
    let wait = after(&outcome).expect("a wait from the date");
    assert!(
        wait > Duration::from_secs(25) && wait <= Duration::from_secs(30),
        "{wait:?}"
    );

    let (outcome, _) = webhook_outcome(Answer::status(503).header("Retry-After", "5"));
    assert_eq!(after(&outcome), Some(Duration::from_secs(5)));

    for status in [400, 401, 403, 404, 413] {
        let (outcome, _) = webhook_outcome(Answer::status(status));
        assert!(is_drop(&outcome), "{status}: {outcome:?}");
    }

    // A redirect is not followed (a POST would become a GET): dropped after one request.
    let (outcome, requests) =
        webhook_outcome(Answer::status(302).header("Location", "http://127.0.0.1:1/elsewhere"));
    assert!(is_drop(&outcome), "{outcome:?}");
    assert_eq!(requests, 1);
}

#[test]
fn transport_failures_retry() {
    // Nobody listens on a port that was free a moment ago.
    let port = common::free_port();
    let notifier = WebhookNotifier::new(&format!("http://127.0.0.1:{port}/hook"), None, TIMEOUT)
        .expect("notifier");
    let outcome = notifier.send(&sample());
    assert!(is_retry(&outcome), "connection refused: {outcome:?}");

    // A receiver that accepts and never answers in time.
    let server = HttpServer::start(vec![Answer::ok().delay(Duration::from_secs(3))]);
    let notifier = WebhookNotifier::new(&server.url("/hook"), None, Duration::from_millis(300))
        .expect("notifier");
    let began = Instant::now();
    let outcome = notifier.send(&sample());
    assert!(is_retry(&outcome), "timeout: {outcome:?}");
    assert!(
        began.elapsed() < Duration::from_secs(2),
        "the timeout bounds the attempt: {:?}",
        began.elapsed()
    );
    assert!(outcome.expect_err("timeout").to_string().contains("300ms"));
}

fn feishu_outcome(answer: Answer) -> Result<(), NotifyError> {
    let server = HttpServer::start(vec![answer]);
    let notifier =
        FeishuNotifier::new(&server.url("/open-apis/bot/v2/hook/x"), None, TIMEOUT).expect("n");
    notifier.send(&sample())
}

#[test]
fn feishu_codes_in_the_body_decide() {
    assert_eq!(
        feishu_outcome(Answer::json(
            200,
            r#"{"code":0,"msg":"success","data":{},"StatusCode":0,"StatusMessage":"success"}"#
        )),
        Ok(())
    );
    // Older replies carry only StatusCode.
    assert_eq!(
        feishu_outcome(Answer::json(
            200,
            r#"{"StatusCode":0,"StatusMessage":"success"}"#
        )),
        Ok(())
    );
    let limited = feishu_outcome(Answer::json(
        200,
        r#"{"code":11232,"msg":"frequency limited"}"#,
    ));
    assert!(is_retry(&limited), "{limited:?}");
    // The Open Platform's rate limit, in a 400, with its own wait header.
    let limited = feishu_outcome(
        Answer::json(
            400,
            r#"{"code":99991400,"msg":"request trigger frequency limit"}"#,
        )
        .header("x-ogw-ratelimit-reset", "52"),
    );
    assert_eq!(
        after(&limited),
        Some(Duration::from_secs(52)),
        "{limited:?}"
    );
    let limited = feishu_outcome(
        Answer::json(
            429,
            r#"{"code":99991400,"msg":"request trigger frequency limit"}"#,
        )
        .header("x-ogw-ratelimit-reset", "9"),
    );
    assert_eq!(after(&limited), Some(Duration::from_secs(9)), "{limited:?}");
    for body in [
        r#"{"code":19021,"msg":"sign match fail or timestamp is not within one hour from current time"}"#,
        r#"{"code":9499,"msg":"Bad Request","data":{}}"#,
        r#"{"code":19001,"msg":"param invalid: incoming webhook access token invalid"}"#,
        r#"{"code":19024,"msg":"Key Words Not Found"}"#,
    ] {
        let outcome = feishu_outcome(Answer::json(200, body));
        assert!(is_drop(&outcome), "{body}: {outcome:?}");
    }
    // A 5xx retries whatever its body says.
    assert!(is_retry(&feishu_outcome(Answer::json(
        502,
        r#"{"code":9499}"#
    ))));
}

fn dingtalk_outcome(answer: Answer) -> Result<(), NotifyError> {
    let server = HttpServer::start(vec![answer]);
    let url = server.url("/robot/send?access_token=t0k3n");
    DingTalkNotifier::new(&url, None, TIMEOUT)
        .expect("n")
        .send(&sample())
}

#[test]
fn dingtalk_codes_in_the_body_decide() {
    assert_eq!(
        dingtalk_outcome(Answer::json(200, r#"{"errcode":0,"errmsg":"ok"}"#)),
        Ok(())
    );
    let busy = dingtalk_outcome(Answer::json(200, r#"{"errcode":-1,"errmsg":"系统繁忙"}"#));
    assert!(is_retry(&busy), "{busy:?}");
    let limited = dingtalk_outcome(Answer::json(
        200,
        r#"{"errcode":130101,"errmsg":"send too fast, exceed 20 times per minute"}"#,
    ));
    assert_eq!(
        after(&limited),
        Some(Duration::from_secs(600)),
        "{limited:?}"
    );
    for body in [
        r#"{"errcode":310000,"errmsg":"sign not match"}"#,
        r#"{"errcode":310000,"errmsg":"keywords not in content"}"#,
        r#"{"errcode":300001,"errmsg":"token is not exist"}"#,
    ] {
        let outcome = dingtalk_outcome(Answer::json(200, body));
        assert!(is_drop(&outcome), "{body}: {outcome:?}");
    }
}

fn wecom_outcome(answer: Answer) -> Result<(), NotifyError> {
    let server = HttpServer::start(vec![answer]);
    let url = server.url("/cgi-bin/webhook/send?key=k3y");
    WeComNotifier::new(&url, TIMEOUT)
        .expect("n")
        .send(&sample())
}

#[test]
fn wecom_codes_in_the_body_decide() {
    assert_eq!(
        wecom_outcome(Answer::json(200, r#"{"errcode":0,"errmsg":"ok"}"#)),
        Ok(())
    );
    let limited = wecom_outcome(Answer::json(
        200,
        r#"{"errcode":45009,"errmsg":"api freq out of limit"}"#,
    ));
    assert_eq!(
        after(&limited),
        Some(Duration::from_secs(60)),
        "{limited:?}"
    );
    assert!(is_retry(&wecom_outcome(Answer::json(
        200,
        r#"{"errcode":-1,"errmsg":"system busy"}"#
    ))));
    for body in [
        r#"{"errcode":93000,"errmsg":"invalid webhook url"}"#,
        r#"{"errcode":40058,"errmsg":"markdown.content exceed max length 4096"}"#,
    ] {
        let outcome = wecom_outcome(Answer::json(200, body));
        assert!(is_drop(&outcome), "{body}: {outcome:?}");
    }
}

#[test]
fn errors_never_show_tokens_or_secrets() {
    let token = "a1b2c3d4e5f6SECRETTOKEN";
    let secret = "SECsigning-secret-123456";
    // A server that echoes the token back in its error body.
    let server = HttpServer::start(vec![Answer::json(
        200,
        &format!(r#"{{"errcode":310000,"errmsg":"bad token {token} / {secret}"}}"#),
    )]);
    let url = server.url(&format!("/robot/send?access_token={token}"));
    let err = DingTalkNotifier::new(&url, Some(secret.into()), TIMEOUT)
        .expect("n")
        .send(&sample())
        .expect_err("rejected");
    let text = err.to_string();
    assert!(!text.contains(token) && !text.contains(secret), "{text}");
    assert!(text.contains("<redacted>"), "{text}");

    // Feishu's token is the last path segment; a refused connection must not show it.
    let hook = "0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b";
    let port = common::free_port();
    let url = format!("http://127.0.0.1:{port}/open-apis/bot/v2/hook/{hook}");
    let err = FeishuNotifier::new(&url, None, TIMEOUT)
        .expect("n")
        .send(&sample())
        .expect_err("refused");
    assert!(!err.to_string().contains(hook), "{err}");

    // A bearer token echoed by a webhook receiver.
    let bearer = "bearer-token-0123456789";
    let server = HttpServer::start(vec![Answer::status(401).body(&format!("bad {bearer}"))]);
    let err = WebhookNotifier::new(&server.url("/hook"), Some(bearer.into()), TIMEOUT)
        .expect("n")
        .send(&sample())
        .expect_err("401");
    assert!(!err.to_string().contains(bearer), "{err}");
    assert_eq!(
        server.requests()[0].header("authorization"),
        Some(format!("Bearer {bearer}").as_str())
    );
}

#[test]
fn build_resolves_urls_and_secrets_from_the_environment() {
    let server = HttpServer::start(vec![Answer::ok()]);
    let url = server.url("/hook");
    let mut entry = receiver("ops", "webhook", None);
    entry.url_env = Some("OPS_URL".into());
    entry.secret_env = Some("OPS_TOKEN".into());
    let env = |name: &str| match name {
        "OPS_URL" => Some(url.clone()),
        "OPS_TOKEN" => Some("tok-123".to_string()),
        _ => None,
    };
    let notifier = build(&entry, &env).expect("built");
    notifier.send(&sample()).expect("delivered");
    let request = &server.requests()[0];
    assert_eq!(request.path(), "/hook");
    assert_eq!(request.header("authorization"), Some("Bearer tok-123"));

    // A missing variable is named, with its receiver.
    let err = build(&entry, &no_env)
        .err()
        .expect("missing env")
        .to_string();
    assert!(
        err.contains("OPS_TOKEN") && err.contains("\"ops\""),
        "{err}"
    );
    entry.secret_env = None;
    let err = build(&entry, &no_env)
        .err()
        .expect("missing env")
        .to_string();
    assert!(err.contains("OPS_URL") && err.contains("not set"), "{err}");
    let err = build(&entry, &|_| Some("  ".into()))
        .err()
        .expect("empty env")
        .to_string();
    assert!(err.contains("OPS_URL") && err.contains("empty"), "{err}");

    // Bad entries.
    let err = build(&receiver("x", "pager", Some("http://a/")), &no_env).err();
    assert!(err.expect("unknown kind").to_string().contains("pager"));
    let err = build(&receiver("x", "slack", None), &no_env).err();
    assert!(err.expect("no url").to_string().contains("url"));
    let mut slack = receiver("x", "slack", Some("https://hooks.slack.com/services/T/B/x"));
    slack.secret_env = Some("S".into());
    let err = build(&slack, &|_| Some("s".into())).err();
    assert!(
        err.expect("secret on slack")
            .to_string()
            .contains("secret_env")
    );
    // A bad URL is reported without being quoted (it may hold the token).
    let err = build(
        &receiver("x", "wecom", Some("ftp://host/send?key=SECRETKEY")),
        &no_env,
    )
    .err()
    .expect("bad scheme")
    .to_string();
    assert!(err.contains("http") && !err.contains("SECRETKEY"), "{err}");
    // The log receiver needs no URL.
    build(&receiver("demo", "log", None), &no_env)
        .expect("log receiver")
        .send(&sample())
        .expect("logged");
    for kind in [
        "alertmanager",
        "webhook",
        "slack",
        "feishu",
        "dingtalk",
        "wecom",
    ] {
        build(
            &receiver("r", kind, Some("https://example.invalid/x")),
            &no_env,
        )
        .unwrap_or_else(|e| panic!("{kind}: {e}"));
    }
}
