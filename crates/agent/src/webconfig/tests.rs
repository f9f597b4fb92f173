use std::path::Path;

use proptest::prelude::*;

use super::*;

/// A real bcrypt hash (cost 4, password "secret"), made once.
fn hash() -> &'static str {
    static HASH: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    HASH.get_or_init(|| bcrypt::hash("secret", 4).expect("bcrypt hashes"))
}

fn parse(text: &str) -> Result<WebConfig, Problem> {
    WebConfig::parse(text, Path::new("/nonexistent"))
}

#[test]
fn an_empty_file_is_the_empty_configuration() {
    for text in ["", "\n", "# nothing\n", "---\n"] {
        let config = parse(text).expect("empty is valid");
        assert!(config.tls.is_none() && config.users.is_empty() && config.http2);
        assert!(config.headers.is_empty() && config.rate_limit.is_none());
    }
}

#[test]
fn users_headers_and_rate_limit_are_read() {
    let text = format!(
        "basic_auth_users:\n  alice: {h}\n  bob: '{h}'\nhttp_server_config:\n  http2: false\n  \
         headers:\n    X-Frame-Options: deny\n    Content-Security-Policy: \"default-src 'self'\"\n    \
         X-XSS-Protection: ''\nrate_limit:\n  interval: 1m30s\n  burst: 20\n",
        h = hash()
    );
    let config = parse(&text).expect("valid");
    assert_eq!(config.users.len(), 2);
    assert!(!config.http2);
    assert_eq!(
        config.headers,
        vec![
            ("X-Frame-Options", "deny".to_string()),
            ("Content-Security-Policy", "default-src 'self'".to_string()),
        ]
    );
    assert_eq!(config.rate_limit, Some((Duration::from_secs(90), 20)));
}

#[test]
fn an_unknown_key_is_refused_with_its_line_and_name() {
    let text = "tls_server_config:\n  cert_file: a.crt\n  key_file: a.key\n  cert_flie: b.crt\n";
    let problem = parse(text).unwrap_err();
    assert_eq!(problem.line, Some(4), "{problem:?}");
    assert!(problem.message.contains("cert_flie"), "{problem:?}");
    assert!(problem.message.contains("tls_server_config"), "{problem:?}");

    let problem = parse("basic_auth_users: {}\nweb_listen: x\n").unwrap_err();
    assert_eq!(problem.line, Some(2), "{problem:?}");
    assert!(problem.message.contains("web_listen"), "{problem:?}");
}

#[test]
fn a_bad_hash_is_refused_at_its_line_without_being_repeated() {
    let text = format!(
        "basic_auth_users:\n  alice: {}\n  bob: $2y$10$tooshort\n",
        hash()
    );
    let problem = parse(&text).unwrap_err();
    assert_eq!(problem.line, Some(3), "{problem:?}");
    assert!(
        problem.message.contains("basic_auth_users.bob"),
        "{problem:?}"
    );
    assert!(problem.message.contains("not a bcrypt hash"), "{problem:?}");
    assert!(!problem.message.contains("tooshort"), "{problem:?}");
    // A plain-text password in place of a hash is not echoed either.
    let problem = parse("basic_auth_users:\n  carol: hunter2\n").unwrap_err();
    assert!(!problem.message.contains("hunter2"), "{problem:?}");
}

#[test]
fn go_names_that_rustls_lacks_are_refused_by_name() {
    let cases = [
        (
            "tls_server_config:\n  cert_file: a\n  key_file: b\n  cipher_suites:\n    - TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA\n",
            5,
            "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA",
        ),
        (
            "tls_server_config:\n  cert_file: a\n  key_file: b\n  curve_preferences: [CurveP521]\n",
            4,
            "CurveP521",
        ),
        (
            "tls_server_config:\n  cert_file: a\n  key_file: b\n  client_auth_type: Whatever\n",
            4,
            "Whatever",
        ),
        (
            "tls_server_config:\n  cert_file: a\n  key_file: b\n  min_version: TLS14\n",
            4,
            "TLS14",
        ),
        (
            "http_server_config:\n  headers:\n    Server: nginx\n",
            3,
            "Server",
        ),
    ];
    for (text, line, name) in cases {
        let problem = parse(text).unwrap_err();
        assert_eq!(problem.line, Some(line), "{text}: {problem:?}");
        assert!(problem.message.contains(name), "{text}: {problem:?}");
    }
}

#[test]
fn checks_after_reading_name_their_key_and_line() {
    let cases = [
        (
            "tls_server_config:\n  cert_file: a\n  key_file: b\n  min_version: TLS10\n",
            "tls_server_config.min_version",
            4,
        ),
        (
            "tls_server_config:\n  cert_file: a\n  key_file: b\n  min_version: TLS13\n  max_version: TLS12\n",
            "tls_server_config.min_version",
            4,
        ),
        (
            "tls_server_config:\n  cert_file: a\n",
            "tls_server_config",
            1,
        ),
        (
            "tls_server_config:\n  cert_file: missing.crt\n  key_file: missing.key\n",
            "tls_server_config.cert_file",
            2,
        ),
        (
            "http_server_config:\n  headers:\n    X-Frame-Options: allow\n",
            "http_server_config.headers.X-Frame-Options",
            3,
        ),
        ("rate_limit:\n  interval: 1s\n", "rate_limit.burst", 1),
        (
            "tls_server_config:\n  cert_file: a\n  key_file: b\n  client_allowed_sans: [x]\n",
            "tls_server_config.client_allowed_sans",
            4,
        ),
    ];
    for (text, key, line) in cases {
        let problem = parse(text).unwrap_err();
        assert_eq!(problem.key.as_deref(), Some(key), "{text}: {problem:?}");
        assert_eq!(problem.line, Some(line), "{text}: {problem:?}");
    }
}

#[test]
fn go_durations() {
    let ok = [
        ("0", 0.0),
        ("1s", 1.0),
        ("250ms", 0.25),
        ("1m30s", 90.0),
        ("1.5h", 5400.0),
        ("2us", 2e-6),
    ];
    for (text, seconds) in ok {
        let d = GoDuration::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
        assert!((d.0.as_secs_f64() - seconds).abs() < 1e-9, "{text}");
    }
    for bad in ["", "1", "s", "-1s", "1d", "1..5s", "1s2"] {
        assert!(GoDuration::parse(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn bcrypt_hash_forms() {
    let h = hash();
    assert!(BcryptHash::parse(h).is_ok());
    assert!(BcryptHash::parse(&h.replacen("$2b$", "$2y$", 1)).is_ok());
    assert!(BcryptHash::parse(&h.replacen("$2b$", "$2a$", 1)).is_ok());
    assert!(BcryptHash::parse(&h.replacen("$2b$", "$2x$", 1)).is_err());
    assert!(BcryptHash::parse(&h.replacen("$04$", "$03$", 1)).is_err());
    assert!(BcryptHash::parse(&h.replacen("$04$", "$32$", 1)).is_err());
    assert!(BcryptHash::parse(&format!("{h}x")).is_err());
    assert_eq!(BcryptHash::parse(h).map(|h| h.cost()), Ok(4));
}

#[test]
fn bcrypt_costs_above_14_are_refused_naming_the_user_and_why() {
    let at = |cost: &str| hash().replacen("$04$", &format!("${cost}$"), 1);
    assert_eq!(BcryptHash::parse(&at("14")).map(|h| h.cost()), Ok(14));
    for (cost, time) in [("15", "2 seconds"), ("31", "29 hours")] {
        let text = format!(
            "basic_auth_users:\n  alice: {}\n  bob: {}\n",
            hash(),
            at(cost)
        );
        let problem = parse(&text).unwrap_err();
        assert_eq!(problem.line, Some(3), "{problem:?}");
        let message = &problem.message;
        assert!(message.contains("basic_auth_users.bob"), "{message}");
        assert!(
            message.contains(&format!("bcrypt cost {cost}, above the 14 accepted")),
            "{message}"
        );
        assert!(
            message.contains(&format!("about {time} of a core")),
            "{message}"
        );
        assert!(!message.contains(&at(cost)[7..]), "{message}");
    }
}

#[test]
fn debug_output_hides_hashes_and_inline_keys() {
    let text = format!(
        "basic_auth_users:\n  alice: {}\ntls_server_config:\n  key: SECRETKEY\n",
        hash()
    );
    let file: file::FileConfig = serde_norway::from_str(&text).expect("reads");
    let shown = format!("{file:?}");
    assert!(
        !shown.contains(hash()) && !shown.contains("SECRETKEY"),
        "{shown}"
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Any text gives a configuration or a problem, never a panic; a problem's line is
    /// inside the file.
    #[test]
    fn any_text_is_read_or_refused(text in "[ -~\n]{0,300}") {
        if let Err(problem) = parse(&text) {
            let lines = text.lines().count().max(1);
            if let Some(line) = problem.line {
                prop_assert!(line >= 1 && line <= lines + 1, "{problem:?}");
            }
        }
    }

    /// Files built from the real keys with arbitrary values never panic, and unknown keys
    /// anywhere are refused with their name.
    #[test]
    fn known_shapes_with_arbitrary_values(
        section in prop::sample::select(vec!["tls_server_config", "http_server_config", "rate_limit", "basic_auth_users"]),
        key in "[a-z_]{1,12}",
        value in "[ -~]{0,40}",
    ) {
        let text = format!("{section}:\n  {key}: {value:?}\n");
        match parse(&text) {
            Ok(_) => {}
            Err(problem) => {
                prop_assert!(problem.line.is_some() || problem.key.is_some(), "{problem:?}");
                if problem.message.contains("unknown field") {
                    prop_assert!(problem.message.contains(&key), "{problem:?}");
                    prop_assert_eq!(problem.line, Some(2));
                }
            }
        }
    }

    #[test]
    fn durations_never_panic(text in "[0-9.a-zµ+-]{0,20}") {
        let _ = GoDuration::parse(&text);
    }

    #[test]
    fn hashes_never_panic_nor_echo(text in "[$0-9a-zA-Z./]{0,70}") {
        if let Err(message) = BcryptHash::parse(&text) {
            prop_assert!(text.len() < 8 || !message.contains(&text));
        }
    }
}
