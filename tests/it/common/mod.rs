//! Runs the real `gpu-sentinel` binary for integration tests and talks HTTP to it.
#![allow(dead_code)] // each test binary uses a different part of this harness

pub mod alerts;
pub mod history;
pub mod http_server;
pub mod orphan;
pub mod victoria;

use std::io::{Read, Write as _};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The binary under test, built by cargo for integration tests.
pub fn binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_gpu-sentinel"))
}

/// Runs the binary to completion with `args`, without a configuration named by the
/// environment (`GPU_SENTINEL_CONFIG`): the fleet commands' tests.
pub fn run_without_env_config(args: &[&str]) -> Output {
    Command::new(binary())
        .args(args)
        .env_remove("GPU_SENTINEL_CONFIG")
        .output()
        .expect("gpu-sentinel runs")
}

/// A fresh directory `gpu-sentinel-{subject}-{pid}-{name}` in the system's temporary one.
pub fn scratch(subject: &str, name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "gpu-sentinel-{subject}-{}-{name}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

/// Seconds since the epoch as RFC 3339, as the fleet commands' `--from`/`--to` take them.
pub fn rfc3339(seconds: f64) -> String {
    chrono::DateTime::from_timestamp(seconds as i64, 0)
        .expect("in range")
        .to_rfc3339()
}

/// Runs the binary to completion with `args`.
pub fn run(args: &[&str]) -> Output {
    Command::new(binary())
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .expect("the gpu-sentinel binary runs")
}

/// A loopback port nobody listens on right now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// A running `gpu-sentinel run`, killed when dropped.
pub struct Agent {
    pub child: Child,
    pub base: String,
    http: ureq::Agent,
}

/// A reply: status, headers we look at, body bytes.
pub struct Reply {
    pub status: u16,
    pub content_type: Option<String>,
    pub content_encoding: Option<String>,
    pub body: Vec<u8>,
}

impl Reply {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

impl Agent {
    /// Starts `gpu-sentinel run ARGS --listen 127.0.0.1:PORT` with extra environment.
    pub fn start(args: &[&str], env: &[(&str, &str)]) -> Agent {
        let agent = Agent::spawn(args, env);
        agent.wait_until(Duration::from_secs(20), |a| a.try_get("/healthz").is_some());
        agent
    }

    /// The loopback port it listens on.
    pub fn port(&self) -> u16 {
        self.base
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .expect("the base URL ends in a port")
    }

    /// Like [`Agent::start`], without waiting for plain-HTTP `/healthz` (for agents that
    /// serve TLS).
    pub fn spawn(args: &[&str], env: &[(&str, &str)]) -> Agent {
        let port = free_port();
        let listen = format!("127.0.0.1:{port}");
        let mut cmd = Command::new(binary());
        cmd.arg("run")
            .args(args)
            .args(["--listen", &listen])
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd.spawn().expect("the gpu-sentinel binary starts");
        let http: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(10)))
            .build()
            .into();
        Agent {
            child,
            base: format!("http://{listen}"),
            http,
        }
    }

    fn try_get(&self, path: &str) -> Option<Reply> {
        self.request(path, &[])
    }

    /// GET with extra headers; None when the server is not reachable.
    pub fn request(&self, path: &str, headers: &[(&str, &str)]) -> Option<Reply> {
        let mut req = self.http.get(format!("{}{path}", self.base));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let mut resp = req.call().ok()?;
        let header = |name: &str| {
            resp.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        let content_type = header("content-type");
        let content_encoding = header("content-encoding");
        let status = resp.status().as_u16();
        let mut body = Vec::new();
        resp.body_mut().as_reader().read_to_end(&mut body).ok()?;
        Some(Reply {
            status,
            content_type,
            content_encoding,
            body,
        })
    }

    /// GET that must reach the server.
    pub fn get(&self, path: &str) -> Reply {
        self.request(path, &[])
            .unwrap_or_else(|| panic!("GET {path}: server unreachable"))
    }

    /// Polls `ready` until it holds; panics after `limit`.
    pub fn wait_until(&self, limit: Duration, mut ready: impl FnMut(&Agent) -> bool) {
        let began = Instant::now();
        while began.elapsed() < limit {
            if ready(self) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("condition not met within {limit:?}");
    }

    /// `/metrics` once the first collection is in.
    pub fn metrics(&self) -> String {
        self.wait_until(Duration::from_secs(20), |a| a.get("/readyz").status == 200);
        self.get("/metrics").text()
    }

    /// `run` on the fake NVML library (`FAKE_NVML_SCENARIO` = the simulator scenario
    /// `scenario`, TOML) with the configuration `config` and more environment `env`; the
    /// files are named after `name`.
    pub fn on_fake_nvml(name: &str, scenario: &str, config: &str, env: &[(&str, &str)]) -> Agent {
        let lib = fake_nvml_lib();
        let scenario = temp_file(&format!("{name}.toml"), scenario);
        // Each agent gets a state directory of its own unless the test gives one: on the
        // default (/var/lib/gpu-sentinel) agents of tests running side by side would meet
        // the state lock, and one run's alerts would be read back by the next.
        let config = if config.contains("[state]") {
            config.to_string()
        } else {
            let dir = std::env::temp_dir().join(format!(
                "gpu-sentinel-test-state-{}-{name}",
                std::process::id()
            ));
            let _ = std::fs::remove_dir_all(&dir);
            format!("{config}\n[state]\ndir = {:?}\n", dir.display().to_string())
        };
        let config = temp_file(&format!("{name}-config.toml"), &config);
        let scenario = scenario.to_str().expect("UTF-8 temp path").to_string();
        let mut env = env.to_vec();
        env.push(("FAKE_NVML_SCENARIO", &scenario));
        Agent::start(
            &[
                "--nvml-lib",
                lib.to_str().expect("UTF-8 library path"),
                "--config",
                config.to_str().expect("UTF-8 temp path"),
            ],
            &env,
        )
    }

    /// Kills the agent with SIGKILL (`Child::kill`): no destructor, no flush, no save.
    pub fn kill9(&mut self) {
        self.child.kill().expect("kill -9");
        let _ = self.child.wait();
    }

    /// Sends SIGTERM and returns the exit status and stderr.
    pub fn stop(mut self) -> (std::process::ExitStatus, String) {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        let status = self.child.wait().expect("the agent exits");
        let mut stderr = String::new();
        if let Some(mut err) = self.child.stderr.take() {
            let _ = err.read_to_string(&mut stderr);
        }
        (status, stderr)
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Writes `text` to a fresh file in a per-test temporary directory.
pub fn temp_file(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "gpu-sentinel-test-{}-{}",
        std::process::id(),
        name.replace(['/', '.'], "_")
    ));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join(name);
    std::fs::write(&path, text).expect("temp file");
    path
}

/// The repository root (for config.toml and fixtures).
pub fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `/metrics` samples of a family: `(labels, value)` for lines starting with `name{` or `name `.
pub fn samples<'a>(text: &'a str, name: &str) -> Vec<(&'a str, f64)> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let rest = l.strip_prefix(name)?;
            let (labels, value) = if let Some(r) = rest.strip_prefix('{') {
                let end = r.rfind('}')?;
                (&r[..end], r[end + 1..].trim())
            } else if rest.starts_with(' ') {
                ("", rest.trim())
            } else {
                return None;
            };
            Some((labels, value.split(' ').next()?.parse().ok()?))
        })
        .collect()
}

/// Runs `replay --json ARGS`; returns the report and stderr, asserting success.
pub fn replay_json(args: &[&str]) -> (serde_json::Value, String) {
    let mut all = vec!["replay", "--json"];
    all.extend_from_slice(args);
    let out = run(&all);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "replay {args:?} failed:\n{stderr}");
    let report = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("replay {args:?} printed no JSON ({e}):\n{stderr}"));
    (report, stderr)
}

/// The value of the first sample of `family` whose labels contain `labels_contain`.
pub fn value(text: &str, family: &str, labels_contain: &str) -> Option<f64> {
    samples(text, family)
        .into_iter()
        .find(|(labels, _)| labels.contains(labels_contain))
        .map(|(_, v)| v)
}

/// The path of an external tool the tests run for real (promtool, prometheus, …), or None
/// to skip. With `GPU_SENTINEL_REQUIRE_TOOLS=1` (scripts/test.sh sets it) a missing tool
/// fails the test instead: CI must never pass by skipping.
pub fn tool(name: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(name))
            .find(|candidate| candidate.is_file())
    });
    if found.is_none() {
        if std::env::var("GPU_SENTINEL_REQUIRE_TOOLS").as_deref() == Ok("1") {
            panic!(
                "{name} is required (GPU_SENTINEL_REQUIRE_TOOLS=1) but not on PATH; scripts/test.sh installs it"
            );
        }
        eprintln!("skipping: {name} not on PATH (scripts/test.sh installs it)");
    }
    found
}

/// A real Prometheus server scraping `targets` every second, killed when dropped.
pub struct Prometheus {
    child: Child,
    pub base: String,
    http: ureq::Agent,
    _dir: PathBuf,
}

impl Prometheus {
    pub fn start(binary: &Path, targets: &[&str]) -> Prometheus {
        Prometheus::start_with_rules(binary, targets, &[])
    }

    /// As [`Prometheus::start`], evaluating the rule files `rules` every second.
    pub fn start_with_rules(binary: &Path, targets: &[&str], rules: &[&Path]) -> Prometheus {
        let list = targets
            .iter()
            .map(|t| format!("'{t}'"))
            .collect::<Vec<_>>()
            .join(", ");
        Prometheus::configured(
            binary,
            &format!("  - job_name: gpu\n    static_configs:\n      - targets: [{list}]\n"),
            rules,
        )
    }

    /// A Prometheus whose `scrape_configs:` list is `jobs` (YAML list items, indented two
    /// spaces), every job scraped each second.
    pub fn with_scrape_configs(binary: &Path, jobs: &str) -> Prometheus {
        Prometheus::configured(binary, jobs, &[])
    }

    fn configured(binary: &Path, jobs: &str, rules: &[&Path]) -> Prometheus {
        let rule_files = rules
            .iter()
            .map(|r| format!("'{}'", r.display()))
            .collect::<Vec<_>>()
            .join(", ");
        let config = format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files: [{rule_files}]\nscrape_configs:\n{jobs}"
        );
        Prometheus::spawn(binary, &config, None, &[])
    }

    /// `promtool tsdb create-blocks-from openmetrics FILE DATA`, asserting promtool took
    /// the file: the backfill step of every test of the fleet commands.
    pub fn backfill(promtool: &Path, file: &Path, data: &Path) {
        let loaded = Command::new(promtool)
            .args(["tsdb", "create-blocks-from", "openmetrics", "-q"])
            .arg(file)
            .arg(data)
            .output()
            .expect("promtool runs");
        assert!(
            loaded.status.success(),
            "promtool refused {}: {}",
            file.display(),
            String::from_utf8_lossy(&loaded.stderr)
        );
    }

    /// A Prometheus that scrapes nothing and serves the TSDB blocks under `data` (made by
    /// `promtool tsdb create-blocks-from`), kept however old they are; answers once ready.
    pub fn on_blocks(binary: &Path, data: &Path) -> Prometheus {
        Prometheus::on_blocks_with(binary, data, &[])
    }

    /// As [`Prometheus::on_blocks`], with more command-line flags
    /// (`--query.max-samples=…`).
    pub fn on_blocks_with(binary: &Path, data: &Path, flags: &[&str]) -> Prometheus {
        Prometheus::on_blocks_configured(binary, data, "global:\n  scrape_interval: 1m\n", flags)
    }

    /// As [`Prometheus::on_blocks_with`], with `config` as its configuration file.
    pub fn on_blocks_configured(
        binary: &Path,
        data: &Path,
        config: &str,
        flags: &[&str],
    ) -> Prometheus {
        // The port comes from `free_port`, which another test (or another test process)
        // may be handed too before this Prometheus binds it: then this one exits and the
        // other answers. A server counts as ready only once it says it serves `data`.
        for _ in 0..5 {
            let mut prometheus = Prometheus::spawn(binary, config, Some(data), flags);
            let began = Instant::now();
            while began.elapsed() < Duration::from_secs(60) {
                if prometheus.child.try_wait().ok().flatten().is_some() {
                    break;
                }
                let ready = prometheus
                    .http
                    .get(format!("{}/-/ready", prometheus.base))
                    .call()
                    .is_ok_and(|r| r.status() == 200);
                if ready {
                    if prometheus.serves(data) {
                        return prometheus;
                    }
                    break;
                }
                std::thread::sleep(Duration::from_millis(200));
            }
            if began.elapsed() >= Duration::from_secs(60) {
                break;
            }
        }
        panic!("Prometheus on {} was not ready within 60s", data.display());
    }

    /// Whether the server answering at this address is the one started on `data`
    /// (its `storage.tsdb.path` flag).
    fn serves(&self, data: &Path) -> bool {
        let Ok(mut resp) = self
            .http
            .get(format!("{}/api/v1/status/flags", self.base))
            .call()
        else {
            return false;
        };
        let body = resp.body_mut().read_to_string().unwrap_or_default();
        let doc: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
        doc["data"]["storage.tsdb.path"].as_str() == data.to_str()
    }

    fn spawn(binary: &Path, config: &str, data: Option<&Path>, flags: &[&str]) -> Prometheus {
        let port = free_port();
        let dir =
            std::env::temp_dir().join(format!("gpu-sentinel-prom-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("prometheus dir");
        std::fs::write(dir.join("prometheus.yml"), config).expect("prometheus config");
        let data = data.map_or_else(|| dir.join("data"), Path::to_path_buf);
        let child = Command::new(binary)
            .arg(format!(
                "--config.file={}",
                dir.join("prometheus.yml").display()
            ))
            .arg(format!("--storage.tsdb.path={}", data.display()))
            .arg("--storage.tsdb.retention.time=100y")
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .args(flags)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("prometheus starts");
        let http: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(10)))
            .build()
            .into();
        Prometheus {
            child,
            base: format!("http://127.0.0.1:{port}"),
            http,
            _dir: dir,
        }
    }

    /// `/api/v1/targets`' active targets (empty when Prometheus is not answering yet).
    pub fn targets(&self) -> Vec<serde_json::Value> {
        let Ok(mut resp) = self
            .http
            .get(format!("{}/api/v1/targets", self.base))
            .call()
        else {
            return Vec::new();
        };
        let body = resp.body_mut().read_to_string().unwrap_or_default();
        let doc: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
        doc["data"]["activeTargets"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// Result vector of an instant query (empty when Prometheus is not answering yet).
    pub fn query(&self, expr: &str) -> Vec<serde_json::Value> {
        let Ok(mut resp) = self
            .http
            .get(format!("{}/api/v1/query", self.base))
            .query("query", expr)
            .call()
        else {
            return Vec::new();
        };
        let Ok(body) = resp.body_mut().read_to_string() else {
            return Vec::new();
        };
        let doc: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
        assert_ne!(doc["status"], "error", "query {expr:?} failed: {body}");
        doc["data"]["result"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// Waits until every target has been scraped successfully.
    pub fn wait_for_scrapes(&self, targets: usize) {
        let began = Instant::now();
        while began.elapsed() < Duration::from_secs(60) {
            let up = self.query("up == 1");
            if up.len() == targets {
                return;
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        panic!("Prometheus did not scrape {targets} target(s) within 60s");
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self._dir);
    }
}

/// Runs `promtool check metrics` (plus `extra` flags) on `text`; returns its exit status
/// and everything it printed.
pub fn promtool_check(promtool: &Path, extra: &[&str], text: &str) -> (bool, String) {
    let mut child = Command::new(promtool)
        .args(["check", "metrics"])
        .args(extra)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", promtool.display()));
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(text.as_bytes())
            .unwrap_or_else(|e| panic!("cannot feed promtool: {e}"));
    }
    let output = child
        .wait_with_output()
        .unwrap_or_else(|e| panic!("promtool did not finish: {e}"));
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), printed)
}

/// Where the fake library is: `FAKE_NVML_LIB`, or next to this test binary's `deps/` folder
/// (`target/debug/libfake_nvml.so`).
pub fn fake_nvml_lib() -> PathBuf {
    let path = match std::env::var_os("FAKE_NVML_LIB") {
        Some(p) => PathBuf::from(p),
        None => {
            let exe = std::env::current_exe().expect("the test binary knows its path");
            let profile_dir = exe
                .parent()
                .and_then(Path::parent)
                .expect("test binaries live in target/<profile>/deps");
            profile_dir.join("libfake_nvml.so")
        }
    };
    assert!(
        path.is_file(),
        "the fake NVML library is not built: {} does not exist.\n\
         Build it with `cargo build --workspace` (scripts/test.sh does this before the tests), \
         or point FAKE_NVML_LIB at libfake_nvml.so.",
        path.display()
    );
    path
}

/// The name libtest knows a test by, to run it again in a child with `--exact`: its path
/// in this binary without the crate, from the `module_path!()` of the file it is in
/// (`it::nvml_source` and `name` → `nvml_source::name`).
pub fn test_path(module_path: &str, name: &str) -> String {
    match module_path.split_once("::") {
        Some((_, module)) => format!("{module}::{name}"),
        None => name.to_string(),
    }
}
