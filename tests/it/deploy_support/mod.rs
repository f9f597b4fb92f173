//! Helpers of tests/it/deploy.rs: reading the deployment files (YAML through
//! scripts/yaml-to-json.py, unit files, Dockerfiles), finding things in rendered manifests,
//! Kubernetes quantities and Prometheus durations, and starting the binary with a
//! deployment's command line. tests/it/deploy_report.rs uses some of them.
#![allow(dead_code)] // each test binary uses a different part of these helpers

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output};
use std::sync::OnceLock;

use clap::Parser as _;
use gpu_sentinel::config::Config;
use serde_json::Value;

use crate::common::{self, Agent, repo, temp_file, tool};

pub fn read(path: &str) -> String {
    std::fs::read_to_string(repo().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

pub fn printed(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// `kubectl kustomize deploy/kubernetes`.
pub fn kustomize(kubectl: &Path) -> String {
    let out = Command::new(kubectl)
        .arg("kustomize")
        .arg(repo().join("deploy/kubernetes"))
        .output()
        .expect("kubectl runs");
    assert!(out.status.success(), "kubectl kustomize: {}", printed(&out));
    String::from_utf8(out.stdout).expect("UTF-8 manifests")
}

/// The rendered manifests as JSON, once per test binary; None (skip) without the tools.
pub fn rendered() -> Option<&'static Vec<Value>> {
    static RENDERED: OnceLock<Option<Vec<Value>>> = OnceLock::new();
    RENDERED
        .get_or_init(|| {
            let kubectl = tool("kubectl")?;
            let file = temp_file("kustomized.yaml", &kustomize(&kubectl));
            yaml_to_json(&[&file])
        })
        .as_ref()
}

/// The YAML documents of `files`, through scripts/yaml-to-json.py.
pub fn yaml_to_json(files: &[&Path]) -> Option<Vec<Value>> {
    let python = tool("python3")?;
    let out = Command::new(python)
        .arg(repo().join("scripts/yaml-to-json.py"))
        .args(files)
        .output()
        .expect("python3 runs");
    if out.status.code() == Some(3)
        && std::env::var("GPU_SENTINEL_REQUIRE_TOOLS").as_deref() != Ok("1")
    {
        eprintln!("skipping: {}", printed(&out));
        return None;
    }
    assert!(out.status.success(), "yaml-to-json: {}", printed(&out));
    Some(serde_json::from_slice(&out.stdout).expect("JSON"))
}

/// The one resource of `kind`.
pub fn find<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    let found: Vec<&Value> = docs.iter().filter(|d| d["kind"] == kind).collect();
    assert_eq!(found.len(), 1, "one {kind}");
    found[0]
}

pub fn container<'a>(pod: &'a Value, list: &str, name: &str) -> &'a Value {
    pod[list]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["name"] == name))
        .unwrap_or_else(|| panic!("no {list} {name}"))
}

pub fn volume<'a>(pod: &'a Value, name: &str) -> &'a Value {
    pod["volumes"]
        .as_array()
        .and_then(|vs| vs.iter().find(|v| v["name"] == name))
        .unwrap_or_else(|| panic!("no volume {name}"))
}

/// A hostPath volume's path and type.
pub fn host_volume(pod: &Value, name: &str) -> (String, String) {
    let host = &volume(pod, name)["hostPath"];
    (
        host["path"].as_str().unwrap_or_default().to_string(),
        host["type"].as_str().unwrap_or_default().to_string(),
    )
}

pub fn mount<'a>(container: &'a Value, volume: &str) -> &'a Value {
    container["volumeMounts"]
        .as_array()
        .and_then(|ms| ms.iter().find(|m| m["name"] == volume))
        .unwrap_or_else(|| panic!("{volume} not mounted in {}", container["name"]))
}

/// The name of the volume mounted at `path` in `container`.
pub fn volume_mounted_at(container: &Value, path: &str) -> String {
    container["volumeMounts"]
        .as_array()
        .and_then(|ms| ms.iter().find(|m| m["mountPath"] == path))
        .and_then(|m| m["name"].as_str())
        .unwrap_or_else(|| panic!("nothing mounted at {path} in {}", container["name"]))
        .to_string()
}

/// A container's environment: `value`, or `fieldRef:PATH` for the downward API.
pub fn env_of(container: &Value) -> BTreeMap<String, String> {
    container["env"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| {
            let value = match e["value"].as_str() {
                Some(v) => v.to_string(),
                None => format!(
                    "fieldRef:{}",
                    e["valueFrom"]["fieldRef"]["fieldPath"].as_str()?
                ),
            };
            Some((e["name"].as_str()?.to_string(), value))
        })
        .collect()
}

pub fn strings(list: &Value) -> Vec<String> {
    list.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

pub fn parent(path: &str) -> &str {
    path.rsplit_once('/').map_or("", |(dir, _)| dir)
}

pub fn file_name(path: &str) -> &str {
    path.rsplit_once('/').map_or(path, |(_, name)| name)
}

/// Whether every label of `selector` is on `labels` with the same value.
pub fn selects(selector: &Value, labels: &Value) -> bool {
    selector
        .as_object()
        .is_some_and(|s| !s.is_empty() && s.iter().all(|(k, v)| labels[k] == *v))
}

/// Fails on a key of `object` outside `allowed`.
pub fn keys_within(object: &Value, allowed: &[&str]) {
    let object = object
        .as_object()
        .unwrap_or_else(|| panic!("not a map: {object}"));
    for key in object.keys() {
        assert!(
            allowed.contains(&key.as_str()),
            "unknown field {key:?} in {object:?}"
        );
    }
}

/// A Prometheus duration ("15s", "1m", "1h30m") in seconds; panics on anything else.
pub fn seconds(duration: &str) -> f64 {
    let units = [
        ("ms", 0.001),
        ("y", 31_536_000.0),
        ("w", 604_800.0),
        ("d", 86_400.0),
        ("h", 3_600.0),
        ("m", 60.0),
        ("s", 1.0),
    ];
    let mut rest = duration;
    let mut total = 0.0;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let number: f64 = rest[..digits]
            .parse()
            .unwrap_or_else(|_| panic!("bad duration {duration:?}"));
        rest = &rest[digits..];
        let (unit, factor) = units
            .iter()
            .find(|(u, _)| rest.starts_with(u))
            .unwrap_or_else(|| panic!("bad duration {duration:?}"));
        total += number * factor;
        rest = &rest[unit.len()..];
    }
    assert!(!duration.is_empty(), "empty duration");
    total
}

/// A memory quantity ("32Mi", "128M") in MiB.
pub fn quantity_mib(q: &str) -> f64 {
    let split = q.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(q.len());
    let number: f64 = q[..split]
        .parse()
        .unwrap_or_else(|_| panic!("quantity {q}"));
    let factor = match &q[split..] {
        "Ki" => 1.0 / 1024.0,
        "Mi" => 1.0,
        "Gi" => 1024.0,
        "M" => 1e6 / 1_048_576.0,
        "G" => 1e9 / 1_048_576.0,
        "" => 1.0 / 1_048_576.0,
        unit => panic!("unit {unit} in {q}"),
    };
    number * factor
}

/// A CPU quantity ("10m", "0.5", "1") in millicores.
pub fn quantity_millicores(q: &str) -> f64 {
    match q.strip_suffix('m') {
        Some(milli) => milli.parse().unwrap_or_else(|_| panic!("quantity {q}")),
        None => q.parse::<f64>().unwrap_or_else(|_| panic!("quantity {q}")) * 1000.0,
    }
}

/// The value after `--config` in a command line that starts with `run`.
pub fn config_arg(args: &[String]) -> &str {
    assert_eq!(args.first().map(String::as_str), Some("run"), "{args:?}");
    args.iter()
        .position(|a| a == "--config")
        .and_then(|i| args.get(i + 1))
        .unwrap_or_else(|| panic!("no --config in {args:?}"))
}

/// Starts the binary with a deployment's command line `args` (starting with `run`), its
/// `--config` file replaced by `config` with the state directory moved into a temporary
/// one, on the simulator and a loopback port.
pub fn start_as_deployed(args: &[String], config: &str, name: &str, env: &[(&str, &str)]) -> Agent {
    let default_dir = format!(
        "dir = {:?}",
        Config::default().state.dir.display().to_string()
    );
    assert_eq!(
        config.matches(&default_dir).count(),
        1,
        "[state] {default_dir}"
    );
    let state =
        std::env::temp_dir().join(format!("gpu-sentinel-deploy-{}-{name}", std::process::id()));
    let config = config.replace(
        &default_dir,
        &format!("dir = {:?}", state.display().to_string()),
    );
    let path = temp_file(&format!("{name}-config.toml"), &config);
    let check = common::run(&["check-config", &path.display().to_string()]);
    assert!(check.status.success(), "check-config: {}", printed(&check));

    // A flag the binary does not know is named here, rather than as a server that never
    // answers.
    let argv = std::iter::once("gpu-sentinel").chain(args.iter().map(String::as_str));
    if let Err(e) = gpu_sentinel::cli::Cli::try_parse_from(argv) {
        panic!("the binary refuses {args:?}: {e}");
    }
    let original = config_arg(args).to_string();
    let mut rest: Vec<String> = args[1..]
        .iter()
        .map(|a| {
            if *a == original {
                path.display().to_string()
            } else {
                a.clone()
            }
        })
        .collect();
    rest.push("--simulate".into());
    let rest: Vec<&str> = rest.iter().map(String::as_str).collect();
    Agent::start(&rest, env)
}

/// `Key=Value` settings of a unit file, every value of a repeated key in order.
pub fn unit_settings(text: &str) -> BTreeMap<String, Vec<String>> {
    let mut settings: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for line in text.lines().map(str::trim) {
        if line.starts_with(['#', ';', '[']) || line.is_empty() {
            continue;
        }
        if let Some((key, value)) = line.split_once('=') {
            settings
                .entry(key.trim().to_string())
                .or_default()
                .push(value.trim().to_string());
        }
    }
    settings
}

/// The value of the one `key=` setting of a unit.
pub fn single(unit: &BTreeMap<String, Vec<String>>, key: &str) -> String {
    match unit.get(key).map(Vec::as_slice) {
        Some([value]) => value.clone(),
        other => panic!("{key}: {other:?}"),
    }
}

/// The arguments of the one instruction `name` of a Dockerfile.
pub fn only_instruction(instructions: &[(String, String)], name: &str) -> String {
    let found: Vec<&String> = instructions
        .iter()
        .filter(|(n, _)| n == name)
        .map(|(_, v)| v)
        .collect();
    match found.as_slice() {
        [one] => (*one).clone(),
        _ => panic!("{name}: {found:?}"),
    }
}

/// A Dockerfile's instructions, continuation lines joined: (NAME, arguments).
pub fn instructions(text: &str) -> Vec<(String, String)> {
    let mut joined = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        if current.is_empty() && (line.trim_start().starts_with('#') || line.trim().is_empty()) {
            continue;
        }
        match line.strip_suffix('\\') {
            Some(part) => current.push_str(part),
            None => {
                current.push_str(line);
                joined.push(std::mem::take(&mut current));
            }
        }
    }
    joined
        .iter()
        .filter_map(|l| {
            let (name, args) = l.trim().split_once(char::is_whitespace)?;
            Some((name.to_ascii_uppercase(), args.trim().to_string()))
        })
        .collect()
}

/// deploy/kubernetes with `components` (e.g. `components/web-config`) turned on as its
/// kustomization's comment says — `components:` and their lines uncommented — rendered by
/// `kubectl kustomize`.
pub fn kustomize_with_components(kubectl: &Path, components: &[&str]) -> String {
    let dir = std::env::temp_dir().join(format!(
        "gpu-sentinel-k8s-{}-{}",
        components.join("+").replace('/', "_"),
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    copy_tree(&repo().join("deploy/kubernetes"), &dir);
    let kustomization = dir.join("kustomization.yaml");
    let mut text = std::fs::read_to_string(&kustomization).expect("kustomization");
    assert!(
        text.contains("# components:\n"),
        "components are offered, commented out"
    );
    text = text.replace("# components:\n", "components:\n");
    for component in components {
        let commented = format!("#   - {component}\n");
        assert!(
            text.contains(&commented),
            "{component} is offered, commented out"
        );
        text = text.replace(&commented, &format!("  - {component}\n"));
    }
    std::fs::write(&kustomization, text).expect("kustomization written");
    let out = Command::new(kubectl)
        .arg("kustomize")
        .arg(&dir)
        .output()
        .expect("kubectl runs");
    assert!(out.status.success(), "kubectl kustomize: {}", printed(&out));
    let _ = std::fs::remove_dir_all(&dir);
    String::from_utf8(out.stdout).expect("UTF-8 manifests")
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("dir");
    for entry in std::fs::read_dir(from).expect("readable").flatten() {
        let target = to.join(entry.file_name());
        if entry.path().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copied");
        }
    }
}
