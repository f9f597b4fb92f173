//! Unit tests of `cli::preflight`: what `run` refuses, `check` finds, with key and line.

use super::*;

fn no_env(_: &str) -> Option<String> {
    None
}

/// `(key, line)` of each problem.
fn placed(problems: &[Problem]) -> Vec<(String, Option<usize>)> {
    problems
        .iter()
        .map(|p| (p.key.clone().unwrap_or_default(), p.line))
        .collect()
}

fn receiver(kind: &str, option: &str) -> String {
    format!(
        "[[alerting.receivers]]\nname = \"hook\"\nkind = \"{kind}\"\n{option}\n\n\
         [alerting.route]\nreceiver = \"hook\"\n"
    )
}

#[test]
fn the_shipped_config_and_the_defaults_pass() {
    let checked = check(include_str!("../../../config.toml"), &no_env);
    assert!(checked.errors.is_empty(), "{:?}", checked.errors);
    assert!(checked.unset_env.is_empty(), "{:?}", checked.unset_env);
    assert_eq!(checked.config, Some(Config::default()));
    assert!(check("", &no_env).into_runnable(Path::new("x")).is_ok());
}

#[test]
fn receiver_urls_are_checked_at_their_line() {
    for (url, expected) in [
        ("not a url", "is not a valid URL"),
        (
            "ftp://example.com/hook",
            "must start with http:// or https://",
        ),
    ] {
        let text = receiver("webhook", &format!("url = \"{url}\""));
        let checked = check(&text, &no_env);
        assert_eq!(
            placed(&checked.errors),
            vec![("alerting.receivers[0].url".to_string(), Some(4))]
        );
        assert!(
            checked.errors[0].message.contains(expected),
            "{:?}",
            checked.errors
        );
        assert!(checked.errors[0].message.contains("\"hook\""));
    }
}

#[test]
fn a_zero_receiver_timeout_is_refused() {
    let text = receiver("webhook", "url = \"http://127.0.0.1:9/\"\ntimeout = \"0s\"");
    let checked = check(&text, &no_env);
    assert_eq!(
        placed(&checked.errors),
        vec![("alerting.receivers[0].timeout".to_string(), Some(5))]
    );
}

#[test]
fn a_rule_that_is_no_default_and_has_no_field_is_refused_at_its_entry() {
    let text = "[[alerting.rules]]\nname = \"GpuLost\"\nfor = \"1m\"\n\n\
                [[alerting.rules]]\nname = \"NoSuchDefault\"\n";
    let checked = check(text, &no_env);
    assert_eq!(
        placed(&checked.errors),
        vec![("alerting.rules[1]".to_string(), Some(5))]
    );
    assert!(checked.errors[0].message.contains("NoSuchDefault"));
}

#[test]
fn a_risk_model_that_is_not_a_model_is_refused() {
    let dir = std::env::temp_dir().join(format!("gs-preflight-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let binary = dir.join("model.bin");
    std::fs::write(&binary, [0xff_u8, 0xfe, 0x00, 0x81, 0x7f]).unwrap();
    for path in [binary.clone(), dir.join("absent.toml"), dir.clone()] {
        let text = format!(
            "[risk]\nthreshold = 0.7\nmodel = {:?}\n",
            path.display().to_string()
        );
        let checked = check(&text, &no_env);
        assert_eq!(
            placed(&checked.errors),
            vec![("risk.model".to_string(), Some(3))],
            "{path:?}"
        );
    }
    let shipped = concat!(env!("CARGO_MANIFEST_DIR"), "/models/default-risk.toml");
    let checked = check(&format!("[risk]\nmodel = {shipped:?}\n"), &no_env);
    assert!(checked.errors.is_empty(), "{:?}", checked.errors);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn unset_variables_are_kept_apart_and_run_refuses_them() {
    let text = "[advice]\nenabled = true\napi_key_env = \"GS_KEY\"\n\n\
                [[alerting.receivers]]\nname = \"hook\"\nkind = \"webhook\"\n\
                url_env = \"GS_URL\"\nsecret_env = \"GS_TOKEN\"\n\
                [alerting.route]\nreceiver = \"hook\"\n";
    let checked = check(text, &no_env);
    assert!(checked.errors.is_empty(), "{:?}", checked.errors);
    assert_eq!(
        placed(&checked.unset_env),
        vec![
            ("advice.api_key_env".to_string(), Some(3)),
            ("alerting.receivers[0].url_env".to_string(), Some(8)),
            ("alerting.receivers[0].secret_env".to_string(), Some(9)),
        ]
    );
    for (problem, var) in checked
        .unset_env
        .iter()
        .zip(["GS_KEY", "GS_URL", "GS_TOKEN"])
    {
        assert!(problem.message.contains(var), "{problem:?}");
    }
    let refused = check(text, &no_env)
        .into_runnable(Path::new("c.toml"))
        .unwrap_err()
        .to_string();
    assert!(
        refused.contains("c.toml:8: alerting.receivers[0].url_env:"),
        "{refused}"
    );
    assert!(
        refused.contains("GS_URL") && refused.contains("not set"),
        "{refused}"
    );

    // Set, everything passes.
    let env = |name: &str| match name {
        "GS_KEY" => Some("sk-key".to_string()),
        "GS_URL" => Some("https://hooks.example.com/x".to_string()),
        "GS_TOKEN" => Some("tok".to_string()),
        _ => None,
    };
    assert!(check(text, &env).into_runnable(Path::new("c.toml")).is_ok());
}

#[test]
fn values_from_the_environment_are_checked_and_never_shown() {
    let text = receiver("feishu", "url_env = \"GS_URL\"\nsecret_env = \"GS_SECRET\"");
    let env = |name: &str| match name {
        "GS_URL" => Some("ftp://open.feishu.cn/hook/TOKEN-IN-PATH".to_string()),
        "GS_SECRET" => Some("   ".to_string()),
        _ => None,
    };
    let checked = check(&text, &env);
    assert!(checked.unset_env.is_empty());
    assert_eq!(
        placed(&checked.errors),
        vec![
            ("alerting.receivers[0].url_env".to_string(), Some(4)),
            ("alerting.receivers[0].secret_env".to_string(), Some(5)),
        ]
    );
    let shown = format!("{:?}", checked.errors);
    assert!(
        shown.contains("GS_URL") && shown.contains("ftp://"),
        "{shown}"
    );
    assert!(
        shown.contains("GS_SECRET") && shown.contains("empty"),
        "{shown}"
    );
    assert!(!shown.contains("TOKEN-IN-PATH"), "{shown}");
}

#[test]
fn an_advice_key_variable_set_but_empty_is_an_error() {
    let text = "[advice]\nenabled = true\napi_key_env = \"GS_KEY\"\n";
    let checked = check(text, &|_| Some(String::new()));
    assert_eq!(
        placed(&checked.errors),
        vec![("advice.api_key_env".to_string(), Some(3))]
    );
    let checked = check("[advice]\nenabled = true\napi_key_env = \" \"\n", &no_env);
    assert_eq!(placed(&checked.errors).len(), 1);
    // Off, its variable is not needed.
    let checked = check(
        "[advice]\nenabled = false\napi_key_env = \"GS_KEY\"\n",
        &no_env,
    );
    assert!(checked.errors.is_empty() && checked.unset_env.is_empty());
}

#[test]
fn a_problem_found_by_value_checks_is_not_reported_twice() {
    // An unknown kind and a bad matcher are value checks; the builders would repeat them.
    let text = receiver("pager", "url = \"http://x/\"")
        + "matchers = [\"gpu=~(\"]\n\n[[alerting.rules]]\nname = \"X\"\nop = \"=\"\n";
    let checked = check(&text, &no_env);
    assert_eq!(
        placed(&checked.errors),
        vec![
            ("alerting.receivers[0].kind".to_string(), Some(3)),
            ("alerting.route.matchers[0]".to_string(), Some(8)),
            ("alerting.rules[0].op".to_string(), Some(12)),
        ]
    );
}

#[test]
fn text_that_is_not_a_configuration_is_one_problem_with_a_line() {
    let checked = check("[collect\n", &no_env);
    assert!(checked.config.is_none());
    assert_eq!(checked.errors.len(), 1);
    assert_eq!(checked.errors[0].line, Some(1));
}
