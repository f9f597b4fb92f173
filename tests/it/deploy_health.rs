//! The health verdict's scheduler hooks: the Kubernetes component
//! components/node-problem-detector (rendered and validated offline, its plugin
//! configuration held to node-problem-detector's config schema, its plugin command run
//! through the real binary against a real agent) and the Slurm checks of deploy/slurm (the
//! HealthCheckProgram script and the NHC check, run against the real binary with a stub
//! `scontrol` that records what it is told).
//!
//! node-problem-detector itself is not built here: its Go module needs a newer Go than
//! Debian's (1.19), and no other toolchain can be installed on these machines. So its
//! plugin configuration is read into the fields of its Go types
//! (pkg/custompluginmonitor/types: `CustomPluginConfig`, `pluginGlobalConfig`,
//! `CustomRule`; pkg/types: `Condition`), refusing any other field (node-problem-detector
//! would ignore a misspelt one silently), and checked by the rules of its `Validate` and
//! `ApplyConfiguration`: plugin "custom", durations Go parses, no rule timeout over the
//! global one, a default condition for every permanent rule, a plugin path that exists
//! (here: where the DaemonSet puts the binary). Where a node-problem-detector binary does
//! exist (on PATH, or named by `GPU_SENTINEL_NPD`), it runs for real: the DaemonSet's
//! command line without Kubernetes, the shipped plugin config pointed at a simulated agent
//! whose GPU falls off the bus, its problem gauge and condition read back.

use crate::common;
use crate::deploy_support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use clap::Parser as _;
use common::http_server::{Answer, HttpServer};
use common::{Agent, binary, repo, temp_file, tool};
use deploy_support::{
    container, find, kustomize_with_components, mount, printed, read, strings, volume, yaml_to_json,
};
use serde::Deserialize;
use serde_json::Value;

const COMPONENT: &str = "deploy/kubernetes/components/node-problem-detector";

// ---------------------------------------------------------------------------------------
// node-problem-detector's configuration schema
// ---------------------------------------------------------------------------------------

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CustomPluginConfig {
    plugin: String,
    #[serde(rename = "pluginConfig", default)]
    plugin_config: PluginGlobalConfig,
    source: String,
    conditions: Vec<Condition>,
    rules: Vec<CustomRule>,
    #[serde(rename = "metricsReporting", default)]
    metrics_reporting: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct PluginGlobalConfig {
    invoke_interval: Option<String>,
    timeout: Option<String>,
    max_output_length: Option<i64>,
    concurrency: Option<i64>,
    enable_message_change_based_condition_update: Option<bool>,
    skip_initial_status: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Condition {
    #[serde(rename = "type")]
    kind: String,
    reason: String,
    message: String,
    #[serde(default)]
    status: Option<String>,
    #[serde(rename = "taintEnabled", default)]
    taint_enabled: Option<bool>,
    #[serde(rename = "taintKey", default)]
    taint_key: Option<String>,
    #[serde(rename = "taintValue", default)]
    taint_value: Option<String>,
    #[serde(rename = "taintEffect", default)]
    taint_effect: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CustomRule {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    condition: String,
    reason: String,
    path: String,
    #[serde(default)]
    args: Vec<String>,
    timeout: Option<String>,
    invoke_interval: Option<String>,
}

/// A Go duration (`time.ParseDuration`): a sequence of decimal numbers with units ns, us,
/// µs, ms, s, m, h; seconds. `None` where Go would refuse it.
fn go_duration(text: &str) -> Option<f64> {
    if text == "0" {
        return Some(0.0);
    }
    let mut rest = text.strip_prefix('+').unwrap_or(text);
    let mut total = 0.0;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let number_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number: f64 = rest[..number_end].parse().ok()?;
        rest = &rest[number_end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_end] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        total += number * scale;
        rest = &rest[unit_end..];
    }
    Some(total)
}

/// What node-problem-detector's `ApplyConfiguration` and `Validate` refuse, with its
/// defaults (5 s timeout, 30 s interval, 80 characters of output); `exists` stands for
/// `os.Stat` of a rule's path.
fn npd_validate(config: &CustomPluginConfig, exists: impl Fn(&str) -> bool) -> Result<(), String> {
    if config.plugin != "custom" {
        return Err(format!("plugin {:?}: only \"custom\"", config.plugin));
    }
    let global = &config.plugin_config;
    let duration = |text: &Option<String>, default: f64, what: &str| match text {
        None => Ok(default),
        Some(t) => go_duration(t).ok_or_else(|| format!("{what} {t:?} is no Go duration")),
    };
    let timeout = duration(&global.timeout, 5.0, "timeout")?;
    duration(&global.invoke_interval, 30.0, "invoke_interval")?;
    if global.max_output_length.is_some_and(|n| n <= 0)
        || global.concurrency.is_some_and(|n| n <= 0)
    {
        return Err("max_output_length and concurrency must be positive".into());
    }
    for rule in &config.rules {
        if rule.kind != "temporary" && rule.kind != "permanent" {
            return Err(format!("rule type {:?}", rule.kind));
        }
        if duration(&rule.timeout, 0.0, "rule timeout")? > timeout {
            return Err(format!(
                "rule timeout over the global {timeout} s: {rule:?}"
            ));
        }
        duration(&rule.invoke_interval, 0.0, "rule invoke_interval")?;
        if !exists(&rule.path) {
            return Err(format!("rule path {:?} does not exist", rule.path));
        }
        if rule.kind == "permanent" && !config.conditions.iter().any(|c| c.kind == rule.condition) {
            return Err(format!(
                "permanent problem {} has no default condition",
                rule.condition
            ));
        }
    }
    Ok(())
}

fn plugin_config() -> CustomPluginConfig {
    serde_json::from_str(&read(&format!("{COMPONENT}/gpu-health.json")))
        .unwrap_or_else(|e| panic!("gpu-health.json is not node-problem-detector's config: {e}"))
}

#[test]
fn the_plugin_config_has_node_problem_detectors_fields_and_passes_its_checks() {
    let config = plugin_config();
    let plugin_path = "/gpu-sentinel/gpu-sentinel";
    npd_validate(&config, |p| p == plugin_path).expect("node-problem-detector accepts it");
    assert_eq!(config.source, "gpu-sentinel");
    assert_eq!(config.metrics_reporting, Some(true));
    // The one condition the plugin sets, a problem condition as node-problem-detector's
    // are (True while the problem is there); healthy is its default reason.
    let [condition] = config.conditions.as_slice() else {
        panic!("one condition: {:?}", config.conditions)
    };
    assert_eq!(
        (condition.kind.as_str(), condition.reason.as_str()),
        ("GpuUnhealthy", "GpuHealthy")
    );
    assert!(!condition.message.is_empty());
    assert!(condition.status.is_none() && condition.taint_enabled.is_none());
    assert!(
        condition.taint_key.is_none()
            && condition.taint_value.is_none()
            && condition.taint_effect.is_none()
    );
    let [rule] = config.rules.as_slice() else {
        panic!("one rule: {:?}", config.rules)
    };
    assert_eq!(
        (
            rule.kind.as_str(),
            rule.condition.as_str(),
            rule.reason.as_str()
        ),
        ("permanent", "GpuUnhealthy", "GpuUnhealthy")
    );
    // The whole line fits in the message (node-problem-detector cuts at max_output_length),
    // and the plugin gives up before node-problem-detector kills it.
    let global = &config.plugin_config;
    assert!(global.max_output_length.unwrap_or(80) >= 80);
    assert_eq!(
        global.enable_message_change_based_condition_update,
        Some(true)
    );
    assert_eq!(global.skip_initial_status, None);
    let args = &rule.args;
    let at = args
        .iter()
        .position(|a| a == "--timeout")
        .expect("--timeout");
    let plugin_timeout = go_duration(&args[at + 1]).expect("a duration");
    assert!(plugin_timeout < go_duration(rule.timeout.as_deref().unwrap_or("5s")).unwrap());
    // The command line is the binary's own.
    let argv = std::iter::once("gpu-sentinel").chain(args.iter().map(String::as_str));
    if let Err(e) = gpu_sentinel::cli::Cli::try_parse_from(argv) {
        panic!("the binary refuses {args:?}: {e}");
    }
}

#[test]
fn node_problem_detectors_checks_refuse_what_it_refuses() {
    let good = plugin_config();
    let path = good.rules[0].path.clone();
    let mut wrong = plugin_config();
    wrong.rules[0].condition = "GpuHealthy".into();
    assert!(
        npd_validate(&wrong, |p| p == path)
            .unwrap_err()
            .contains("no default condition")
    );
    let mut slow = plugin_config();
    slow.rules[0].timeout = Some("1m".into());
    assert!(
        npd_validate(&slow, |p| p == path)
            .unwrap_err()
            .contains("over the global")
    );
    assert!(
        npd_validate(&good, |_| false)
            .unwrap_err()
            .contains("does not exist")
    );
    let misspelt = read(&format!("{COMPONENT}/gpu-health.json"))
        .replace("\"invoke_interval\"", "\"invoke_intervall\"");
    assert!(serde_json::from_str::<CustomPluginConfig>(&misspelt).is_err());
    assert_eq!(go_duration("1m30s"), Some(90.0));
    assert_eq!(go_duration("30"), None);
}

// ---------------------------------------------------------------------------------------
// The Kubernetes component
// ---------------------------------------------------------------------------------------

#[test]
fn the_component_validates_and_runs_the_plugin_where_the_binary_is() {
    let (Some(kubectl), Some(validate)) = (tool("kubectl"), tool("kubernetes-validate")) else {
        return;
    };
    let file = temp_file(
        "npd.yaml",
        &kustomize_with_components(&kubectl, &["components/node-problem-detector"]),
    );
    let out = Command::new(validate)
        .arg("--strict")
        .arg(&file)
        .output()
        .expect("kubernetes-validate runs");
    assert!(out.status.success(), "{}", printed(&out));
    for resource in [
        "daemonset/gpu-sentinel-npd",
        "service/gpu-sentinel-local",
        "serviceaccount/gpu-sentinel-npd",
        "clusterrole/gpu-sentinel-npd",
        "clusterrolebinding/gpu-sentinel-npd",
        "configmap/gpu-sentinel-npd-config-",
    ] {
        assert!(
            printed(&out).contains(&format!("passed for resource {resource}")),
            "{resource}: {}",
            printed(&out)
        );
    }
    let Some(docs) = yaml_to_json(&[&file]) else {
        return;
    };
    let named = |kind: &str, name: &str| -> &Value {
        docs.iter()
            .find(|d| {
                d["kind"] == kind
                    && d["metadata"]["name"]
                        .as_str()
                        .is_some_and(|n| n.starts_with(name))
            })
            .unwrap_or_else(|| panic!("no {kind} {name}"))
    };

    // The ConfigMap holds the plugin config byte for byte, mounted where the command reads it.
    let config_map = named("ConfigMap", "gpu-sentinel-npd-config");
    assert_eq!(
        config_map["data"]["gpu-health.json"].as_str(),
        Some(read(&format!("{COMPONENT}/gpu-health.json")).as_str())
    );
    let ds = named("DaemonSet", "gpu-sentinel-npd");
    let pod = &ds["spec"]["template"]["spec"];
    let npd = container(pod, "containers", "node-problem-detector");
    let command = strings(&npd["command"]);
    let monitor = command
        .iter()
        .find_map(|a| a.strip_prefix("--config.custom-plugin-monitor="))
        .expect("the custom plugin monitor flag");
    let config_mount = mount(npd, "config")["mountPath"]
        .as_str()
        .expect("mounted")
        .to_string();
    assert_eq!(
        Path::new(monitor),
        Path::new(&config_mount).join("gpu-health.json")
    );
    assert_eq!(
        volume(pod, "config")["configMap"]["name"],
        config_map["metadata"]["name"]
    );

    // The plugin's path is the binary the init container copies in from the agent's image.
    let plugin = plugin_config();
    let rule = &plugin.rules[0];
    let init = container(pod, "initContainers", "plugin");
    let agent_pod = &find_agent(&docs)["spec"]["template"]["spec"];
    assert_eq!(
        init["image"],
        container(agent_pod, "containers", "gpu-sentinel")["image"]
    );
    let copy = strings(&init["command"]);
    assert_eq!(copy[0], "cp");
    let copied = Path::new(&copy[2]);
    let shared = mount(init, "plugin")["mountPath"]
        .as_str()
        .expect("mounted");
    let seen_at = mount(npd, "plugin")["mountPath"].as_str().expect("mounted");
    assert_eq!(copied.parent(), Some(Path::new(shared)));
    assert_eq!(
        Path::new(&rule.path),
        Path::new(seen_at).join(copied.file_name().expect("a file"))
    );
    assert_eq!(
        copy[1], "/usr/local/bin/gpu-sentinel",
        "the Dockerfile's path"
    );
    assert!(read("Dockerfile").contains("/usr/local/bin/gpu-sentinel"));

    // The plugin asks the node-local Service, which selects the agent's pods (not
    // node-problem-detector's) and which the ServiceMonitor does not scrape.
    let service = named("Service", "gpu-sentinel-local");
    assert_eq!(service["spec"]["internalTrafficPolicy"], "Local");
    let url = &rule.args[rule.args.iter().position(|a| a == "--url").expect("--url") + 1];
    let namespace = service["metadata"]["namespace"]
        .as_str()
        .expect("namespaced");
    let port = service["spec"]["ports"][0]["port"]
        .as_i64()
        .expect("a port");
    assert_eq!(
        *url,
        format!("http://gpu-sentinel-local.{namespace}.svc:{port}")
    );
    let agent_labels = &find_agent(&docs)["spec"]["template"]["metadata"]["labels"];
    for (key, value) in service["spec"]["selector"].as_object().expect("a selector") {
        assert_eq!(&agent_labels[key], value, "{key}");
        assert_ne!(
            &pod_labels(ds)[key],
            value,
            "node-problem-detector's pods are not selected"
        );
    }
    let scraped = &find(&docs, "ServiceMonitor")["spec"]["selector"]["matchLabels"];
    assert!(
        scraped
            .as_object()
            .expect("labels")
            .iter()
            .any(|(k, v)| &service["metadata"]["labels"][k] != v),
        "the ServiceMonitor must not scrape the agents twice"
    );
    // node-problem-detector may patch its node's status and nothing else of the node.
    let binding = named("ClusterRoleBinding", "gpu-sentinel-npd");
    assert_eq!(binding["subjects"][0]["name"], pod["serviceAccountName"]);
    assert_eq!(binding["subjects"][0]["namespace"], namespace);
    let role = named("ClusterRole", "gpu-sentinel-npd");
    let node_verbs: Vec<String> = role["rules"]
        .as_array()
        .expect("rules")
        .iter()
        .filter(|r| {
            strings(&r["resources"])
                .iter()
                .any(|res| res.starts_with("nodes"))
        })
        .flat_map(|r| strings(&r["verbs"]))
        .collect();
    assert_eq!(node_verbs, ["get", "patch"]);
}

fn find_agent(docs: &[Value]) -> &Value {
    docs.iter()
        .find(|d| d["kind"] == "DaemonSet" && d["metadata"]["name"] == "gpu-sentinel")
        .expect("the agent's DaemonSet")
}

fn pod_labels(ds: &Value) -> &Value {
    &ds["spec"]["template"]["metadata"]["labels"]
}

/// The plugin's command line, as node-problem-detector runs it, against `url`.
fn run_plugin(url: &str) -> Output {
    let rule = &plugin_config().rules[0];
    let at = rule.args.iter().position(|a| a == "--url").expect("--url");
    let mut args = rule.args.clone();
    args[at + 1] = url.to_string();
    Command::new(binary())
        .args(&args)
        .env_remove("GPU_SENTINEL_AGENT_USER")
        .env_remove("GPU_SENTINEL_AGENT_PASSWORD")
        .output()
        .expect("the plugin runs")
}

#[test]
fn the_plugin_command_answers_as_node_problem_detector_reads_it() {
    let max = plugin_config()
        .plugin_config
        .max_output_length
        .unwrap_or(80) as usize;
    let mut agent = Agent::start(&["--simulate"], &[]);
    agent.wait_until(std::time::Duration::from_secs(20), |a| {
        a.get("/readyz").status == 200
    });
    let out = run_plugin(&agent.base);
    let line = String::from_utf8_lossy(&out.stdout).trim_end().to_string();
    assert_eq!(out.status.code(), Some(0), "OK: {line}");
    assert!(
        line.starts_with("healthy") && line.chars().count() <= max,
        "{line}"
    );
    agent.kill9();
    let out = run_plugin(&agent.base);
    assert_eq!(out.status.code(), Some(2), "Unknown");
    let server = HttpServer::start(vec![Answer::json(200, UNHEALTHY)]);
    let out = run_plugin(&server.url(""));
    let line = String::from_utf8_lossy(&out.stdout).trim_end().to_string();
    assert_eq!(out.status.code(), Some(1), "NonOK: {line}");
    assert!(line.chars().count() <= max, "{line}");
}

// ---------------------------------------------------------------------------------------
// node-problem-detector itself, where it is installed
// ---------------------------------------------------------------------------------------

/// node-problem-detector's binary: `GPU_SENTINEL_NPD`, else `node-problem-detector` on
/// PATH; `None` without either.
fn npd_binary() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("GPU_SENTINEL_NPD") {
        let path = PathBuf::from(path);
        assert!(
            path.is_file(),
            "GPU_SENTINEL_NPD={} is not a file",
            path.display()
        );
        return Some(path);
    }
    let paths = std::env::var_os("PATH")?;
    std::env::split_paths(&paths)
        .map(|dir| dir.join("node-problem-detector"))
        .find(|candidate| candidate.is_file())
}

/// The shipped gpu-health.json with its rule's plugin at `plugin` and asking `url`: what
/// the DaemonSet's mounts and the node-local Service give it in a cluster.
fn plugin_config_at(plugin: &Path, url: &str) -> Value {
    let mut config: Value =
        serde_json::from_str(&read(&format!("{COMPONENT}/gpu-health.json"))).expect("JSON");
    let rule = &mut config["rules"][0];
    rule["path"] = Value::from(plugin.display().to_string());
    let args = rule["args"].as_array_mut().expect("the rule's args");
    let at = args.iter().position(|a| a == "--url").expect("--url");
    args[at + 1] = Value::from(url);
    config
}

/// The DaemonSet's node-problem-detector command line, without the binary; `None` where
/// YAML cannot be read here.
fn npd_daemonset_args() -> Option<Vec<String>> {
    let docs = yaml_to_json(&[&repo().join(COMPONENT).join("daemonset.yaml")])?;
    let pod = &find(&docs, "DaemonSet")["spec"]["template"]["spec"];
    let command = strings(&container(pod, "containers", "node-problem-detector")["command"]);
    Some(command[1..].to_vec())
}

/// A child process killed when dropped (also when the test fails), its stderr in a file.
struct Killed {
    child: std::process::Child,
    log: PathBuf,
}

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Killed {
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

#[test]
fn node_problem_detector_sets_gpu_unhealthy_from_the_plugin_where_it_is_installed() {
    // A simulated node whose GPU 1 falls off the bus 15 simulated minutes in: 3 s of wall
    // time at 300 times real time.
    let config = temp_file(
        "npd-simulation.toml",
        "[simulation]\ngpus = 2\nfaults = [\"fell_off_bus\"]\nfault_hours = 0.25\n",
    );
    let agent = Agent::start(
        &[
            "--simulate",
            "--sim-speed",
            "300",
            "--config",
            config.to_str().expect("UTF-8 path"),
        ],
        &[],
    );
    let monitor = plugin_config_at(&binary(), &agent.base);
    let max = monitor["pluginConfig"]["max_output_length"]
        .as_u64()
        .expect("max_output_length") as usize;

    // The rule's command, as node-problem-detector's plugin runs it (its path and args, no
    // shell), once the GPU is gone: NonOK, one line that it keeps whole (it cuts bytes).
    let rule = &monitor["rules"][0];
    let path = rule["path"].as_str().expect("path").to_string();
    let args = strings(&rule["args"]);
    let began = std::time::Instant::now();
    let line = loop {
        let out = Command::new(&path)
            .args(&args)
            .output()
            .expect("the plugin runs");
        let line = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if !(line.starts_with("healthy") || line.starts_with("degraded")) {
            assert_eq!(out.status.code(), Some(1), "NonOK: {}", printed(&out));
            break line;
        }
        assert_eq!(out.status.code(), Some(0), "OK: {}", printed(&out));
        assert!(
            began.elapsed() < std::time::Duration::from_secs(60),
            "the simulated GPU never fell off the bus: {line}"
        );
        std::thread::sleep(std::time::Duration::from_millis(250));
    };
    assert!(
        line.starts_with("unhealthy")
            && line.contains("GPU 1")
            && line.contains("drain_and_reboot"),
        "{line}"
    );
    assert!(line.len() <= max, "{} bytes: {line}", line.len());

    let Some(npd) = npd_binary() else {
        eprintln!(
            "skipping node-problem-detector itself: no node-problem-detector on PATH and \
             GPU_SENTINEL_NPD unset (it is not built here: its go.mod needs a newer Go than \
             this machine's); the plugin config was checked against its schema and the \
             plugin's command run as it runs it"
        );
        return;
    };
    let dir = common::scratch("deploy_health", "npd");
    let monitor_path = dir.join("gpu-health.json");
    std::fs::write(&monitor_path, monitor.to_string()).expect("the plugin config");
    // The DaemonSet's command line, the monitor where this test wrote it, and no
    // Kubernetes: the problem shows in its Prometheus endpoint and its log.
    let Some(daemonset_args) = npd_daemonset_args() else {
        return;
    };
    let mut npd_args: Vec<String> = daemonset_args
        .into_iter()
        .map(
            |a| match a.strip_prefix("--config.custom-plugin-monitor=") {
                Some(_) => format!("--config.custom-plugin-monitor={}", monitor_path.display()),
                None => a,
            },
        )
        .collect();
    let port = common::free_port();
    npd_args.extend([
        "--enable-k8s-exporter=false".to_string(),
        "--prometheus-address=127.0.0.1".to_string(),
        format!("--prometheus-port={port}"),
    ]);
    let log = dir.join("npd.log");
    let stderr = std::fs::File::create(&log).expect("the log file");
    let npd = Killed {
        child: Command::new(&npd)
            .args(&npd_args)
            .env("NODE_NAME", "gpu-node-1")
            .stdout(std::process::Stdio::null())
            .stderr(stderr)
            .spawn()
            .unwrap_or_else(|e| panic!("{} does not start: {e}", npd.display())),
        log,
    };
    let metrics = || {
        ureq::get(&format!("http://127.0.0.1:{port}/metrics"))
            .call()
            .ok()
            .and_then(|mut r| r.body_mut().read_to_string().ok())
    };
    let unhealthy = |text: &str, family: &str, labels: &[&str]| {
        common::samples(text, family)
            .iter()
            .find(|(l, _)| labels.iter().all(|want| l.contains(want)))
            .map(|(_, v)| *v)
    };
    // It runs the plugin at start and every invoke_interval (30 s).
    let began = std::time::Instant::now();
    let text = loop {
        let text = metrics().unwrap_or_default();
        let gauge = unhealthy(
            &text,
            "problem_gauge",
            &["type=\"GpuUnhealthy\"", "reason=\"GpuUnhealthy\""],
        );
        if gauge == Some(1.0) {
            break text;
        }
        assert!(
            began.elapsed() < std::time::Duration::from_secs(75),
            "problem_gauge{{type=\"GpuUnhealthy\"}} never 1: {gauge:?}\n{text}\n{}",
            npd.log()
        );
        std::thread::sleep(std::time::Duration::from_millis(500));
    };
    assert!(
        unhealthy(&text, "problem_counter", &["reason=\"GpuUnhealthy\""]).is_some_and(|n| n >= 1.0),
        "{text}"
    );
    // The condition it would set on the node: True, the rule's reason, the plugin's line.
    let log = npd.log();
    assert!(
        log.contains("GpuUnhealthy") && log.contains("True") && log.contains(&line),
        "{line:?} not in node-problem-detector's status:\n{log}"
    );
}

// ---------------------------------------------------------------------------------------
// Slurm
// ---------------------------------------------------------------------------------------

/// An agent's verdict of a node whose GPU 4 fell off the bus.
const UNHEALTHY: &str = r#"{"state":"unhealthy","action":"drain_and_reboot","gpus":[
  {"index":4,"uuid":"GPU-4","state":"unhealthy","action":"drain_and_reboot","components":[
    {"component":"driver","state":"unhealthy","reason":"does not answer NVML (GPU is lost) after XID 79 (fell off the bus)","action":"drain_and_reboot","since":"2026-03-02T08:00:00Z"}]}],
  "node":[]}"#;

/// A verdict of a healthy node.
const HEALTHY: &str = r#"{"state":"healthy","action":"none","gpus":[
  {"index":0,"uuid":"GPU-0","state":"healthy","action":"none","components":[
    {"component":"memory","state":"healthy","reason":"fine","action":"none","since":"2026-03-02T08:00:00Z"}]}],
  "node":[]}"#;

/// A folder with a stub `scontrol` that appends each call's arguments to `calls` and
/// answers `show node` with the reason in `reason` (none when the file is empty), and
/// `gpu-sentinel`, the real binary.
struct SlurmStub {
    dir: PathBuf,
}

impl SlurmStub {
    fn new(name: &str) -> SlurmStub {
        let dir = temp_file(&format!("slurm-{name}.keep"), "")
            .parent()
            .expect("dir")
            .join("bin");
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("stub dir");
        let scontrol = dir.join("scontrol");
        std::fs::write(
            &scontrol,
            format!(
                "#!/bin/sh\nprintf '%s\\n' \"$*\" >> '{calls}'\n\
                 if [ \"$1\" = show ]; then\n  echo \"NodeName=$3 State=IDLE\"\n  \
                 reason=$(cat '{reason}' 2>/dev/null)\n  [ -n \"$reason\" ] && echo \"   Reason=$reason [root@2026-03-02T08:00:00]\"\nfi\nexit 0\n",
                calls = dir.join("calls").display(),
                reason = dir.join("reason").display()
            ),
        )
        .expect("stub written");
        make_executable(&scontrol);
        std::os::unix::fs::symlink(binary(), dir.join("gpu-sentinel")).expect("binary linked");
        SlurmStub { dir }
    }

    fn set_reason(&self, reason: &str) {
        std::fs::write(self.dir.join("reason"), reason).expect("reason");
    }

    /// The `scontrol` calls so far, and forgets them.
    fn calls(&self) -> Vec<String> {
        let path = self.dir.join("calls");
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let _ = std::fs::remove_file(&path);
        text.lines().map(str::to_string).collect()
    }

    fn path(&self) -> String {
        format!("{}:/usr/bin:/bin", self.dir.display())
    }
}

fn make_executable(path: &Path) {
    use std::os::unix::fs::PermissionsExt as _;
    let mut permissions = std::fs::metadata(path).expect("metadata").permissions();
    permissions.set_mode(0o755);
    std::fs::set_permissions(path, permissions).expect("chmod");
}

/// Runs deploy/slurm/gpu-sentinel-healthcheck as slurmd would, against `url`.
fn healthcheck(stub: &SlurmStub, url: &str, env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(repo().join("deploy/slurm/gpu-sentinel-healthcheck"));
    cmd.env_clear()
        .env("PATH", stub.path())
        .env("SLURMD_NODENAME", "gpu-node-7")
        .env("GPU_SENTINEL_URL", url);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("the health check runs")
}

#[test]
fn the_health_check_program_drains_on_unhealthy_and_resumes_only_its_own_drain() {
    let stub = SlurmStub::new("program");
    let unhealthy = HttpServer::answering(|_| Answer::json(200, UNHEALTHY));
    let healthy = HttpServer::answering(|_| Answer::json(200, HEALTHY));

    let out = healthcheck(&stub, &unhealthy.url(""), &[]);
    assert!(out.status.success(), "{}", printed(&out));
    let calls = stub.calls();
    let drain = calls
        .iter()
        .find(|c| c.starts_with("update"))
        .expect("a drain");
    assert_eq!(
        *drain,
        "update NodeName=gpu-node-7 State=DRAIN Reason=gpu-sentinel: unhealthy: GPU 4 driver, \
         drain_and_reboot: does not answer NVML (GPU is lost)..."
    );

    // Healthy again: resumed, since the drain was this check's.
    stub.set_reason(
        "gpu-sentinel: unhealthy: GPU 4 driver, drain_and_reboot: does not answer NVML",
    );
    healthcheck(&stub, &healthy.url(""), &[]);
    assert_eq!(
        stub.calls(),
        [
            "show node gpu-node-7",
            "update NodeName=gpu-node-7 State=RESUME"
        ]
    );
    // An operator's drain is left alone.
    stub.set_reason("operator: replacing a fan");
    healthcheck(&stub, &healthy.url(""), &[]);
    assert_eq!(stub.calls(), ["show node gpu-node-7"]);

    // Unknown (no agent): nothing, unless asked to drain then too.
    let gone = format!("http://127.0.0.1:{}", common::free_port());
    stub.set_reason("");
    healthcheck(&stub, &gone, &[]);
    assert_eq!(stub.calls(), ["show node gpu-node-7"]);
    healthcheck(&stub, &gone, &[("GPU_SENTINEL_DRAIN_ON_UNKNOWN", "1")]);
    let calls = stub.calls();
    assert!(
        calls.iter().any(|c| c.starts_with(
            "update NodeName=gpu-node-7 State=DRAIN Reason=gpu-sentinel: unknown: cannot reach"
        )),
        "{calls:?}"
    );
}

/// Runs NHC's check function from deploy/slurm/gpu-sentinel.nhc with a stub `die` and
/// `log` that print what NHC would be told.
fn nhc(stub: &SlurmStub, args: &str) -> String {
    let script = format!(
        "die() {{ echo \"die $1 $2\"; }}\nlog() {{ echo \"log $*\"; }}\n. '{}'\ncheck_gpu_sentinel {args}\necho \"returned $?\"\n",
        repo().join("deploy/slurm/gpu-sentinel.nhc").display()
    );
    let out = Command::new("bash")
        .arg("-c")
        .arg(script)
        .env_clear()
        .env("PATH", stub.path())
        .output()
        .expect("bash runs");
    assert!(out.status.success(), "{}", printed(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn the_nhc_check_fails_with_the_verdicts_line() {
    let stub = SlurmStub::new("nhc");
    let unhealthy = HttpServer::answering(|_| Answer::json(200, UNHEALTHY));
    let healthy = HttpServer::answering(|_| Answer::json(200, HEALTHY));
    let said = nhc(&stub, &unhealthy.url(""));
    assert!(
        said.starts_with("die 1 unhealthy: GPU 4 driver, drain_and_reboot: does not answer NVML"),
        "{said}"
    );
    assert!(said.ends_with("returned 1\n"), "{said}");
    assert_eq!(nhc(&stub, &healthy.url("")), "returned 0\n");
    let gone = format!("http://127.0.0.1:{}", common::free_port());
    let said = nhc(&stub, &gone);
    assert!(
        said.starts_with("log check_gpu_sentinel: unknown: cannot reach")
            && said.ends_with("returned 0\n"),
        "{said}"
    );
    let said = nhc(&stub, &format!("{gone} drain-unknown"));
    assert!(said.starts_with("die 1 unknown: cannot reach"), "{said}");
    // NHC drains itself: the check never calls scontrol.
    assert!(stub.calls().is_empty());
}

#[test]
fn the_slurm_scripts_pass_shellcheck() {
    let Some(shellcheck) = tool("shellcheck") else {
        return;
    };
    for (script, shell) in [
        ("deploy/slurm/gpu-sentinel-healthcheck", "sh"),
        ("deploy/slurm/gpu-sentinel.nhc", "bash"),
    ] {
        let out = Command::new(&shellcheck)
            .args(["-s", shell])
            .arg(repo().join(script))
            .output()
            .expect("shellcheck runs");
        assert!(out.status.success(), "{script}: {}", printed(&out));
    }
}
