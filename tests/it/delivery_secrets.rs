//! No webhook token or secret anywhere, through the real binary (fake NVML, a GPU lost after
//! a second, a state directory): Feishu, Slack, DingTalk (signed) and WeCom receivers whose
//! tokens are in their URLs, pointed at a local server that fails every delivery and echoes
//! the tokens in its error body (Feishu at a closed port: the HTTP client's own error),
//! run at `RUST_LOG=trace`. An earlier build leaked the Feishu token in "delivery failed" lines and in
//! the outbox's `last_error`, and the HTTP client's debug lines carrying whole Slack and
//! DingTalk URLs. None of the tokens may appear in stderr, `/metrics`, `/api/v1/*`,
//! `/healthz`, or any file under the state directory (the outbox's bytes included).
//!
//! Also `url_env` holding a URL with the wrong scheme: neither `run` nor `check-config`
//! may print it.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::http_server::{Answer, HttpServer};
use common::{binary, fake_nvml_lib, free_port, temp_file};

/// Tokens as the services shape them, short ones included: a token is secret by where it
/// sits in the URL, not by its length.
const FEISHU: &str = "fsTOK1";
const SLACK: &str = "XXslackTOKEN42";
const DINGTALK: &str = "dtTOKEN77";
const DINGTALK_SECRET: &str = "SECdt-signing-555";
const WECOM: &str = "wcKEY99";
const SECRETS: [&str; 5] = [FEISHU, SLACK, DINGTALK, DINGTALK_SECRET, WECOM];

/// A running agent whose stderr goes to a file (trace output outgrows a pipe nobody reads).
struct Run {
    child: Child,
    base: String,
    stderr: PathBuf,
    http: ureq::Agent,
}

impl Run {
    fn start(args: &[&str], env: &[(&str, &str)], name: &str) -> Run {
        let port = free_port();
        let stderr = std::env::temp_dir().join(format!("gs-{name}-{}.log", std::process::id()));
        let file = std::fs::File::create(&stderr).expect("stderr file");
        let mut cmd = Command::new(binary());
        cmd.arg("run")
            .args(args)
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .env("RUST_LOG", "trace")
            .stdout(Stdio::null())
            .stderr(file);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let run = Run {
            child: cmd.spawn().expect("the agent starts"),
            base: format!("http://127.0.0.1:{port}"),
            stderr,
            http: ureq::Agent::config_builder()
                .http_status_as_error(false)
                .timeout_global(Some(Duration::from_secs(10)))
                .build()
                .into(),
        };
        let began = Instant::now();
        while run.get("/healthz").is_none() {
            assert!(
                began.elapsed() < Duration::from_secs(20),
                "agent did not start"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        run
    }

    fn get(&self, path: &str) -> Option<String> {
        let mut resp = self.http.get(format!("{}{path}", self.base)).call().ok()?;
        resp.body_mut().read_to_string().ok()
    }

    /// SIGTERM, wait, and everything it wrote to stderr.
    fn stop(mut self) -> String {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        let _ = self.child.wait();
        std::fs::read_to_string(&self.stderr).expect("stderr file")
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Asserts no secret occurs in `bytes`, naming `what` it was.
fn assert_clean(what: &str, bytes: &[u8]) {
    for secret in SECRETS {
        let found = bytes
            .windows(secret.len())
            .position(|w| w == secret.as_bytes());
        if let Some(at) = found {
            let text = String::from_utf8_lossy(&bytes[at.saturating_sub(200)..]);
            let shown: String = text.chars().take(400).collect();
            panic!("{secret} in {what}: …{shown}…");
        }
    }
}

fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(files_under(&path));
        } else {
            out.push(path);
        }
    }
    out
}

#[test]
fn tokens_appear_in_no_log_line_answer_or_state_file_even_at_trace() {
    // Every delivery fails, and the error body quotes every token back.
    let echo = format!("bad token {}", SECRETS.join(" "));
    let server = HttpServer::start(vec![Answer::status(500).body(&echo)]);
    let closed = free_port();
    let state = std::env::temp_dir().join(format!("gs-secrets-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&state);
    let scenario = temp_file(
        "secrets-scenario.toml",
        "[simulation]\ngpus = 2\nfaults = []\n[[fault]]\ngpu = 1\nfunction = \"*\"\nerror = \"GPU_IS_LOST\"\nafter_seconds = 1.0\n",
    );
    let receiver = |name: &str, kind: &str, url: &str, extra: &str| {
        format!("[[alerting.receivers]]\nname = \"{name}\"\nkind = \"{kind}\"\n{url}\n{extra}\n")
    };
    let route = |name: &str| {
        format!(
            "[[alerting.route.routes]]\nmatchers = [\"alertname=~.+\"]\nreceiver = \"{name}\"\ncontinue = true\n"
        )
    };
    let config = temp_file(
        "secrets.toml",
        &format!(
            "[collect]\ninterval = \"200ms\"\nkmsg = \"off\"\n[state]\ndir = \"{}\"\n{}{}{}{}\
             [alerting.route]\nreceiver = \"feishu\"\ngroup_wait = \"0s\"\n{}{}{}{}",
            state.display(),
            receiver(
                "feishu",
                "feishu",
                &format!("url = \"http://127.0.0.1:{closed}/open-apis/bot/v2/hook/{FEISHU}\""),
                ""
            ),
            receiver("slack", "slack", "url_env = \"GS_TEST_SLACK_URL\"", ""),
            receiver(
                "dingtalk",
                "dingtalk",
                &format!(
                    "url = \"{}\"",
                    server.url(&format!("/robot/send?access_token={DINGTALK}"))
                ),
                "secret_env = \"GS_TEST_DINGTALK_SECRET\""
            ),
            receiver(
                "wecom",
                "wecom",
                &format!(
                    "url = \"{}\"",
                    server.url(&format!("/cgi-bin/webhook/send?key={WECOM}"))
                ),
                ""
            ),
            route("feishu"),
            route("slack"),
            route("dingtalk"),
            route("wecom"),
        ),
    );
    let slack_url = server.url(&format!("/services/T0001ABCD/B0002EFGH/{SLACK}"));
    let lib = fake_nvml_lib();
    let run = Run::start(
        &[
            "--nvml-lib",
            lib.to_str().unwrap(),
            "--config",
            config.to_str().unwrap(),
        ],
        &[
            ("FAKE_NVML_SCENARIO", scenario.to_str().unwrap()),
            ("GS_TEST_SLACK_URL", &slack_url),
            ("GS_TEST_DINGTALK_SECRET", DINGTALK_SECRET),
        ],
        "secrets",
    );
    // Each of the three receivers at the server has failed at least twice (so its error
    // is stored and logged), and Feishu has had time to be refused as often.
    let began = Instant::now();
    loop {
        let requests = server.requests();
        let tried = |path: &str| requests.iter().filter(|r| r.path() == path).count();
        let slack = tried("/services/T0001ABCD/B0002EFGH/XXslackTOKEN42");
        if slack >= 2 && tried("/robot/send") >= 2 && tried("/cgi-bin/webhook/send") >= 2 {
            break;
        }
        assert!(
            began.elapsed() < Duration::from_secs(40),
            "not every receiver was tried twice: {:?}",
            requests
                .iter()
                .map(|r| r.target.clone())
                .collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    for path in [
        "/metrics",
        "/api/v1/gpus",
        "/api/v1/alerts",
        "/api/v1/recommendations",
        "/healthz",
        "/",
    ] {
        let body = run.get(path).unwrap_or_default();
        assert_clean(path, body.as_bytes());
    }
    let stderr = run.stop();
    assert_clean("stderr", stderr.as_bytes());
    for name in ["feishu", "slack", "dingtalk", "wecom"] {
        assert!(
            stderr.contains(&format!("receiver \"{name}\": delivery failed")),
            "{name} failed and said so: {stderr}"
        );
    }
    assert!(stderr.contains("/hook/<redacted>"), "{stderr}");
    // The HTTP client's debug and trace output is not there at all.
    assert!(
        !stderr
            .lines()
            .any(|l| (l.contains("DEBUG") || l.contains("TRACE")) && l.contains(" ureq")),
        "ureq below info was logged"
    );
    assert!(!stderr.contains("\u{1b}["), "no colour codes in a file");
    let files = files_under(&state);
    assert!(
        files.iter().any(|f| f.ends_with("outbox.redb")),
        "{files:?}"
    );
    for file in files {
        let bytes = std::fs::read(&file).expect("a state file");
        assert_clean(&file.display().to_string(), &bytes);
    }
    let _ = std::fs::remove_dir_all(&state);
}

#[test]
fn a_url_env_with_the_wrong_scheme_is_refused_without_printing_it() {
    let url = format!("ftp://hooks.example/open-apis/bot/v2/hook/{FEISHU}?key={WECOM}");
    let config = temp_file(
        "wrong-scheme.toml",
        "[[alerting.receivers]]\nname = \"ops\"\nkind = \"feishu\"\nurl_env = \"GS_TEST_BAD_URL\"\n\
         [alerting.route]\nreceiver = \"ops\"\n",
    );
    let port = free_port().to_string();
    let run = Command::new(binary())
        .args([
            "run",
            "--simulate",
            "--listen",
            &format!("127.0.0.1:{port}"),
        ])
        .args(["--config", config.to_str().unwrap()])
        .env("RUST_LOG", "trace")
        .env("GS_TEST_BAD_URL", &url)
        .output()
        .expect("runs");
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(!run.status.success(), "refused: {printed}");
    assert!(
        printed.contains("http:// or https://"),
        "says why: {printed}"
    );
    assert_clean("run's output", printed.as_bytes());

    let check = Command::new(binary())
        .args(["check-config", config.to_str().unwrap()])
        .env("RUST_LOG", "trace")
        .env("GS_TEST_BAD_URL", &url)
        .output()
        .expect("runs");
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );
    assert_clean("check-config's output", printed.as_bytes());
}
