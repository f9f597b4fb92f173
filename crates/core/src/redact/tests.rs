use proptest::prelude::*;

use super::*;

fn shapes(text: &str) -> String {
    Redactor::new().scrub(text)
}

#[test]
fn each_services_webhook_loses_its_token() {
    assert_eq!(
        shapes("https://open.feishu.cn/open-apis/bot/v2/hook/0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b"),
        "https://open.feishu.cn/open-apis/bot/v2/hook/<redacted>"
    );
    // Short tokens too: the shape says where the token is, not its length.
    assert_eq!(
        shapes("http://127.0.0.1:9/open-apis/bot/v2/hook/shortTOK1"),
        "http://127.0.0.1:9/open-apis/bot/v2/hook/<redacted>"
    );
    assert_eq!(
        shapes("https://hooks.slack.com/services/T0001ABCD/B0002EFGH/XXXXslacktokenXXXXYYYY"),
        "https://hooks.slack.com/services/T0001ABCD/B0002EFGH/<redacted>"
    );
    assert_eq!(
        shapes("https://hooks.slack.com/services/T0001ABCD/B0002EFGH/abc"),
        "https://hooks.slack.com/services/T0001ABCD/B0002EFGH/<redacted>"
    );
    assert_eq!(
        shapes("https://oapi.dingtalk.com/robot/send?access_token=dt1&timestamp=1&sign=a%2Bb"),
        "https://oapi.dingtalk.com/robot/send?access_token=<redacted>&timestamp=<redacted>&sign=<redacted>"
    );
    assert_eq!(
        shapes("https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=KEY-1234"),
        "https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=<redacted>"
    );
    assert_eq!(
        shapes("http://user:pw@127.0.0.1:9093/api/v2/alerts#frag"),
        "http://<redacted>@127.0.0.1:9093/api/v2/alerts#<redacted>"
    );
    // Paths of our own and of Alertmanager stay readable.
    for plain in [
        "http://127.0.0.1:10400/api/v1/recommendations",
        "http://am:9093/api/v2/alerts",
        "https://api.deepseek.com/chat/completions",
    ] {
        assert_eq!(shapes(plain), plain);
    }
}

#[test]
fn urls_inside_text_are_redacted_in_place() {
    assert_eq!(
        shapes("delivery failed (POST http://h:1/hook/abcd: HTTP 500: oops); next in 1s"),
        "delivery failed (POST http://h:1/hook/<redacted>: HTTP 500: oops); next in 1s"
    );
    assert_eq!(
        shapes("uri: \"ftp://x/robot/send?access_token=t0k\", then"),
        "uri: \"ftp://x/robot/send?access_token=<redacted>\", then"
    );
    assert_eq!(shapes("no url :// here"), "no url :// here");
    assert_eq!(shapes("://x?key=abc"), "://x?key=<redacted>");
    assert_eq!(shapes(""), "");
}

#[test]
fn scrubbed_text_scrubs_to_itself() {
    let once = shapes("POST http://h:1/services/T0001ABCD/B0002EFGH/tok: HTTP 500");
    assert_eq!(
        once,
        "POST http://h:1/services/T0001ABCD/B0002EFGH/<redacted>: HTTP 500"
    );
    assert_eq!(shapes(&once), once);
    assert_eq!(shapes(&shapes(&once)), once);
}

#[test]
fn credentials_outside_urls() {
    assert_eq!(
        shapes("Authorization: Bearer sk-abcdef123456"),
        "Authorization: Bearer <redacted>"
    );
    assert_eq!(shapes("basic checks passed"), "basic checks passed");
    assert_eq!(
        shapes("{\"token=abc123\"} and secret=xyz&next"),
        "{\"token=<redacted>\"} and secret=<redacted>&next"
    );
}

#[test]
fn known_secrets_are_replaced_anywhere() {
    let mut r = Redactor::new();
    r.add_url("https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=wcKEY123");
    r.add_secret("SEC-signing");
    r.add_secret("ab");
    assert_eq!(
        r.scrub("errmsg: invalid key wcKEY123, signed with SEC-signing, ab"),
        "errmsg: invalid key <redacted>, signed with <redacted>, ab"
    );
    // A URL without a scheme is registered whole.
    r.add_url("hooks.slack.com/services/T1/B1/tok9");
    assert_eq!(
        r.scrub("bad URI hooks.slack.com/services/T1/B1/tok9"),
        "bad URI <redacted>"
    );
    // Percent-encoded forms too.
    r.add_secret("a+b/c==");
    assert_eq!(r.scrub("sign=a%2Bb%2Fc%3D%3D"), "sign=<redacted>");
    assert!(!format!("{r:?}").contains("wcKEY123"));
}

#[test]
fn one_url_is_shown_without_its_secrets() {
    assert_eq!(
        url("ftp://x/open-apis/bot/v2/hook/fsTOKshort"),
        "ftp://x/open-apis/bot/v2/hook/<redacted>"
    );
    assert_eq!(url("open.feishu.cn/open-apis/bot/v2/hook/t"), "<not a URL>");
    assert_eq!(url("just-a-token-0123"), "<not a URL>");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Whatever punctuation surrounds it, a token in a known position never survives
    /// scrubbing. (Tokens start with `Zq`, which no fixed part of the URLs contains.)
    #[test]
    fn tokens_never_survive(
        prefix in "[ (\"'<:=,]{0,6}",
        suffix in "[ ):,.;!?\"'>]{0,6}",
        token in "Zq[A-Za-z0-9_-]{0,40}",
        shape in 0usize..4,
    ) {
        let url = match shape {
            0 => format!("https://open.feishu.cn/open-apis/bot/v2/hook/{token}"),
            1 => format!("https://hooks.slack.com/services/T0001ABCD/B0002EFGH/{token}"),
            2 => format!("https://oapi.dingtalk.com/robot/send?access_token={token}"),
            _ => format!("https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key={token}&x=1"),
        };
        let clean = shapes(&format!("failed {prefix}{url}{suffix} (retry)"));
        prop_assert!(!clean.contains(&token), "{clean}");
        prop_assert!(clean.contains(REDACTED), "{clean}");
    }

    /// Scrubbing is idempotent: text scrubbed on its way into an error, and again on its
    /// way into the log, reads as if scrubbed once.
    #[test]
    fn scrubbing_twice_is_scrubbing_once(
        before in ".{0,12}",
        url in "(https?|ftp)://[a-z0-9.:@]{1,12}(/[A-Za-z0-9<>%=&?_-]{0,12}){0,5}",
        after in "[ .:;)<>\"]{0,3}.{0,12}",
    ) {
        let once = shapes(&format!("{before}{url}{after}"));
        prop_assert_eq!(shapes(&once), once.clone());
        let mut r = Redactor::new();
        r.add_url(&url);
        let once = r.scrub(&format!("POST {url}: {before}"));
        prop_assert_eq!(r.scrub(&once), once.clone());
    }

    #[test]
    fn any_text_scrubs_without_panicking(text in ".{0,200}") {
        let mut r = Redactor::new();
        r.add_url(&text);
        r.add_secret(&text);
        let _ = r.scrub(&text);
        let _ = url(&text);
    }
}
