//! `check-config` and `run` agree, through the real binary: on every configuration below,
//! what `check-config` refuses `run` refuses with the same key and line, and what it
//! accepts `run` starts with. Unset `*_env` variables are warnings for `check-config`
//! (they may be set where the agent runs) and refusals for `run`; values read from the
//! environment are checked and never printed.

use crate::common;

use std::io::Read as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{Agent, binary, temp_file};

/// What `check-config` should say of a configuration.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Expect {
    /// Refused by both, at this line and key.
    Refused(usize, &'static str),
    /// A warning from `check-config` (exit 0), a refusal from `run`, naming the variable.
    Unset(usize, &'static str, &'static str),
}

/// One bad configuration: name, text, environment of both commands, verdict.
struct Case {
    name: &'static str,
    text: String,
    env: Vec<(&'static str, String)>,
    expect: Expect,
}

/// The text of a config with one receiver `hook` of `kind` and `option` lines (from line 4).
fn receiver(kind: &str, option: &str) -> String {
    format!(
        "[[alerting.receivers]]\nname = \"hook\"\nkind = \"{kind}\"\n{option}\n\n\
         [alerting.route]\nreceiver = \"hook\"\n"
    )
}

/// The text of a config whose `[export] web_config` (line 2) is a file holding `yaml`.
fn web_config(name: &str, yaml: &str) -> String {
    let path = temp_file(name, yaml);
    format!("[export]\nweb_config = {:?}\n", path.display().to_string())
}

fn binary_model() -> String {
    let path = temp_file("model.bin", "");
    std::fs::write(&path, [0x7f_u8, b'E', b'L', b'F', 0xff, 0xfe, 0x00, 0x01]).unwrap();
    path.display().to_string()
}

/// Every reproduction of the configurations check-config once passed and run refused, and their neighbours.
fn cases() -> Vec<Case> {
    let case = |name, text: String, expect| Case {
        name,
        text,
        env: Vec::new(),
        expect,
    };
    vec![
        case(
            "not_a_url",
            receiver("webhook", "url = \"not a url\""),
            Expect::Refused(4, "alerting.receivers[0].url"),
        ),
        case(
            "ftp_url",
            receiver("webhook", "url = \"ftp://example.com/hook\""),
            Expect::Refused(4, "alerting.receivers[0].url"),
        ),
        case(
            "zero_timeout",
            receiver("webhook", "url = \"http://127.0.0.1:9/\"\ntimeout = \"0s\""),
            Expect::Refused(5, "alerting.receivers[0].timeout"),
        ),
        case(
            "unknown_rule",
            "[[alerting.rules]]\nname = \"NoSuchDefault\"\n".into(),
            Expect::Refused(1, "alerting.rules[0]"),
        ),
        case(
            "binary_model",
            format!("[risk]\nmodel = {:?}\n", binary_model()),
            Expect::Refused(2, "risk.model"),
        ),
        case(
            "missing_model",
            "[risk]\nmodel = \"/nonexistent/gpu-sentinel-risk.toml\"\n".into(),
            Expect::Refused(2, "risk.model"),
        ),
        case(
            "advice_key_unset",
            "[advice]\nenabled = true\napi_key_env = \"GS_CFG_TEST_UNSET_KEY\"\n".into(),
            Expect::Unset(3, "advice.api_key_env", "GS_CFG_TEST_UNSET_KEY"),
        ),
        case(
            "url_env_unset",
            receiver("slack", "url_env = \"GS_CFG_TEST_UNSET_URL\""),
            Expect::Unset(4, "alerting.receivers[0].url_env", "GS_CFG_TEST_UNSET_URL"),
        ),
        case(
            "secret_env_unset",
            receiver(
                "feishu",
                "url = \"https://open.feishu.cn/open-apis/bot/v2/hook/x\"\n\
                 secret_env = \"GS_CFG_TEST_UNSET_SECRET\"",
            ),
            Expect::Unset(
                5,
                "alerting.receivers[0].secret_env",
                "GS_CFG_TEST_UNSET_SECRET",
            ),
        ),
        Case {
            name: "url_env_wrong_scheme",
            text: receiver("wecom", "url_env = \"GS_CFG_TEST_URL\""),
            env: vec![(
                "GS_CFG_TEST_URL",
                "ftp://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=SECRET-TOKEN-1".into(),
            )],
            expect: Expect::Refused(4, "alerting.receivers[0].url_env"),
        },
        Case {
            name: "advice_key_empty",
            text: "[advice]\nenabled = true\napi_key_env = \"GS_CFG_TEST_KEY\"\n".into(),
            env: vec![("GS_CFG_TEST_KEY", "  ".into())],
            expect: Expect::Refused(3, "advice.api_key_env"),
        },
        case(
            "secret_on_slack",
            receiver(
                "slack",
                "url = \"https://hooks.slack.com/services/T/B/x\"\nsecret_env = \"HOME\"",
            ),
            Expect::Refused(5, "alerting.receivers[0].secret_env"),
        ),
        case(
            "web_config_unknown_key",
            web_config("unknown-key.yml", "basic_auth_users: {}\nweb_listen: x\n"),
            Expect::Refused(2, "export.web_config"),
        ),
        case(
            "web_config_bad_hash",
            web_config("bad-hash.yml", "basic_auth_users:\n  alice: plain-text\n"),
            Expect::Refused(2, "export.web_config"),
        ),
        case(
            "web_config_missing_certificate",
            web_config(
                "no-cert.yml",
                "tls_server_config:\n  cert_file: absent.crt\n  key_file: absent.key\n",
            ),
            Expect::Refused(2, "export.web_config"),
        ),
        case(
            "web_config_missing_file",
            "[export]\nweb_config = \"/nonexistent/gpu-sentinel-web.yml\"\n".into(),
            Expect::Refused(2, "export.web_config"),
        ),
        case(
            "outbox_holds_nothing",
            "[alerting]\noutbox_max_entries = 0\n".into(),
            Expect::Refused(2, "alerting.outbox_max_entries"),
        ),
        case(
            "web_config_bcrypt_cost_too_high",
            web_config(
                "cost-15.yml",
                "basic_auth_users:\n  alice: $2y$15$QOauhQNbBCuQDKes6eFzPeMqBSjb7Mr5DUmpZ/VcEd00UAV/LDeSi\n",
            ),
            Expect::Refused(2, "export.web_config"),
        ),
        case(
            "server_holds_no_connection",
            "[server]\nmax_connections = 0\n".into(),
            Expect::Refused(2, "server.max_connections"),
        ),
        case(
            "advice_base_url",
            "[advice]\nbase_url = \"api.deepseek.com\"\n".into(),
            Expect::Refused(2, "advice.base_url"),
        ),
    ]
}

/// Runs `gpu-sentinel ARGS` with `env`; None as status when it was still running after
/// `limit` (it started: killed then).
fn run_for(
    args: &[&str],
    env: &[(&str, String)],
    limit: Duration,
) -> (Option<std::process::ExitStatus>, String, String) {
    let mut cmd = Command::new(binary());
    cmd.args(args)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("the binary starts");
    let began = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break Some(status);
        }
        if began.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stdout = String::new();
    let mut stderr = String::new();
    if let Some(mut out) = child.stdout.take() {
        let _ = out.read_to_string(&mut stdout);
    }
    if let Some(mut err) = child.stderr.take() {
        let _ = err.read_to_string(&mut stderr);
    }
    (status, stdout, stderr)
}

#[test]
fn check_config_and_run_agree_on_every_bad_configuration() {
    let mut failures = Vec::new();
    for case in cases() {
        let path = temp_file(&format!("{}.toml", case.name), &case.text);
        let file = path.display().to_string();
        let (checked, out, err) =
            run_for(&["check-config", &file], &case.env, Duration::from_secs(20));
        let (ran, _, run_err) = run_for(
            &[
                "run",
                "--simulate",
                "--config",
                &file,
                "--listen",
                "127.0.0.1:0",
            ],
            &case.env,
            Duration::from_secs(20),
        );
        let check_ok = checked.is_some_and(|s| s.success());
        let run_refused = ran.is_some_and(|s| !s.success());
        let (line, key) = match case.expect {
            Expect::Refused(line, key) | Expect::Unset(line, key, _) => (line, key),
        };
        let place = format!("{file}:{line}: {key}:");
        let mut problem = |what: String| failures.push(format!("{}: {what}", case.name));
        match case.expect {
            Expect::Refused(..) => {
                if check_ok || !err.contains(&place) {
                    problem(format!("check-config should refuse at {place}: {out}{err}"));
                }
            }
            Expect::Unset(_, _, var) => {
                if !check_ok || !err.contains(&format!("warning: {place}")) || !err.contains(var) {
                    problem(format!(
                        "check-config should warn at {place} of {var}: {out}{err}"
                    ));
                }
            }
        }
        if !run_refused || !run_err.contains(&place) {
            problem(format!("run should refuse at {place}: {run_err}"));
        }
        if let Expect::Unset(_, _, var) = case.expect {
            if !run_err.contains(var) {
                problem(format!("run should name {var}: {run_err}"));
            }
        }
        for (_, value) in &case.env {
            let secret = value.rsplit('=').next().unwrap_or(value).trim();
            if !secret.is_empty() && (err.contains(secret) || run_err.contains(secret)) {
                problem(format!("printed the value of a variable: {err}{run_err}"));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn a_config_check_config_accepts_makes_run_ready() {
    let text = receiver(
        "webhook",
        "url = \"http://127.0.0.1:9/hook\"\ntimeout = \"2s\"",
    ) + "\n[[alerting.rules]]\nname = \"GpuHot\"\nfield = \"temperature_celsius\"\n\
           op = \">=\"\nvalue = 85.0\n";
    let path = temp_file("accepted.toml", &text);
    let file = path.display().to_string();
    let (checked, out, err) = run_for(&["check-config", &file], &[], Duration::from_secs(20));
    assert!(checked.is_some_and(|s| s.success()), "{out}{err}");
    assert!(out.contains(": ok") && err.is_empty(), "{out}{err}");
    let agent = Agent::start(&["--simulate", "--config", &file], &[]);
    agent.wait_until(Duration::from_secs(20), |a| a.get("/readyz").status == 200);
}

#[test]
fn set_variables_make_both_accept_and_run_ready() {
    let text = receiver(
        "webhook",
        "url_env = \"GS_CFG_TEST_HOOK\"\nsecret_env = \"GS_CFG_TEST_TOKEN\"",
    ) + "\n[advice]\nenabled = true\nbase_url = \"http://127.0.0.1:9\"\n\
         api_key_env = \"GS_CFG_TEST_API_KEY\"\n";
    let path = temp_file("env-set.toml", &text);
    let file = path.display().to_string();
    let env = [
        ("GS_CFG_TEST_HOOK", "http://127.0.0.1:9/hook/TOKEN-IN-URL"),
        ("GS_CFG_TEST_TOKEN", "bearer-secret"),
        ("GS_CFG_TEST_API_KEY", "sk-secret"),
    ];
    let owned: Vec<(&str, String)> = env.iter().map(|(k, v)| (*k, v.to_string())).collect();
    let (checked, out, err) = run_for(&["check-config", &file], &owned, Duration::from_secs(20));
    assert!(checked.is_some_and(|s| s.success()), "{out}{err}");
    assert!(!err.contains("warning"), "{err}");
    let agent = Agent::start(&["--simulate", "--config", &file], &env);
    agent.wait_until(Duration::from_secs(20), |a| a.get("/readyz").status == 200);

    // Without them, check-config warns of each (exit 0) and run names each.
    let (checked, out, err) = run_for(&["check-config", &file], &[], Duration::from_secs(20));
    assert!(checked.is_some_and(|s| s.success()), "{out}{err}");
    for var in [
        "GS_CFG_TEST_HOOK",
        "GS_CFG_TEST_TOKEN",
        "GS_CFG_TEST_API_KEY",
    ] {
        assert!(err.contains(var), "{var} in {err}");
    }
    assert_eq!(err.matches("warning: ").count(), 3, "{err}");
    let (ran, _, run_err) = run_for(
        &[
            "run",
            "--simulate",
            "--config",
            &file,
            "--listen",
            "127.0.0.1:0",
        ],
        &[],
        Duration::from_secs(20),
    );
    assert!(ran.is_some_and(|s| !s.success()), "{run_err}");
    for var in [
        "GS_CFG_TEST_HOOK",
        "GS_CFG_TEST_TOKEN",
        "GS_CFG_TEST_API_KEY",
    ] {
        assert!(run_err.contains(var), "{var} in {run_err}");
    }
}
