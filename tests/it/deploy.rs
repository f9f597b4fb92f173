//! The deployment files: the Kubernetes manifests (deploy/kubernetes), the systemd unit
//! (deploy/systemd) and the Dockerfile, checked against each other, against the binary and
//! against the configuration's defaults.
//!
//! Kubernetes: `kubectl kustomize` renders the directory and `kubernetes-validate --strict`
//! validates every resource offline against the Kubernetes schemas. It has no schema for
//! the Prometheus Operator's kinds (it warns and passes them), so the ServiceMonitor and
//! PrometheusRule are checked here against the fields of their API, and the rules by
//! promtool. Each form's command line (the DaemonSet's args, the unit's ExecStart, the
//! image's CMD) is run for real, on the simulator, with the configuration it ships with.
//!
//! YAML is read through `scripts/yaml-to-json.py` (PyYAML, which kubernetes-validate
//! brings). External tools are skipped when missing, unless `GPU_SENTINEL_REQUIRE_TOOLS=1`
//! (scripts/test.sh), which makes a missing tool a failure.

use crate::common;
use crate::deploy_support;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use base64::Engine as _;
use common::{binary, repo, samples, temp_file, tool};
use deploy_support::{
    config_arg, container, env_of, file_name, find, host_volume, instructions, keys_within,
    kustomize, kustomize_with_components, mount, only_instruction, parent, printed, quantity_mib,
    quantity_millicores, read, rendered, seconds, selects, single, start_as_deployed, strings,
    unit_settings, volume, volume_mounted_at, yaml_to_json,
};
use gpu_sentinel::config::Config;
use serde_json::Value;

// ---------------------------------------------------------------------------------------
// Kubernetes
// ---------------------------------------------------------------------------------------

#[test]
fn kustomize_renders_and_every_resource_validates_offline() {
    let (Some(kubectl), Some(validate)) = (tool("kubectl"), tool("kubernetes-validate")) else {
        return;
    };
    let rendered = kustomize(&kubectl);
    let file = temp_file("rendered.yaml", &rendered);
    let out = Command::new(validate)
        .arg("--strict")
        .arg(&file)
        .output()
        .expect("kubernetes-validate runs");
    let printed = printed(&out);
    assert!(out.status.success(), "{printed}");
    assert!(!printed.contains("ERROR"), "{printed}");
    // Every Kubernetes kind was validated; only the Prometheus Operator's had no schema.
    for kind in ["namespace", "configmap", "service", "daemonset"] {
        assert!(
            printed.contains(&format!("passed for resource {kind}/")),
            "{kind} not validated:\n{printed}"
        );
    }
    for line in printed.lines().filter(|l| l.starts_with("WARN")) {
        assert!(
            line.contains("monitoring.coreos.com/v1"),
            "only the Operator's kinds may lack a schema: {line}"
        );
    }
}

#[test]
fn the_rendered_set_is_the_one_documented() {
    let Some(docs) = rendered() else { return };
    let kinds: BTreeSet<&str> = docs.iter().filter_map(|d| d["kind"].as_str()).collect();
    assert_eq!(
        kinds,
        BTreeSet::from([
            "ConfigMap",
            "DaemonSet",
            "Namespace",
            "PrometheusRule",
            "Service",
            "ServiceMonitor"
        ]),
        "the web-config Secret is a component (off by default); the report CronJob comes \
         with the report"
    );
    for doc in docs.iter().filter(|d| d["kind"] != "Namespace") {
        assert_eq!(doc["metadata"]["namespace"], "gpu-sentinel", "{doc}");
    }
    // The shipped ConfigMap is deploy/kubernetes/config.toml, byte for byte.
    let config = find(docs, "ConfigMap");
    assert_eq!(
        config["data"]["config.toml"].as_str(),
        Some(read("deploy/kubernetes/config.toml").as_str())
    );
}

#[test]
fn daemonset_runs_on_every_gpu_node_and_sees_the_host() {
    let Some(docs) = rendered() else { return };
    let pod = &find(docs, "DaemonSet")["spec"]["template"]["spec"];
    assert_eq!(pod["nodeSelector"]["nvidia.com/gpu.present"], "true");
    let tolerations = pod["tolerations"].as_array().expect("tolerations");
    assert!(
        tolerations
            .iter()
            .any(|t| t["key"] == "nvidia.com/gpu" && t["operator"] == "Exists"),
        "{tolerations:?}"
    );
    assert_eq!(pod["hostPID"], true);
    assert_eq!(pod["priorityClassName"], "system-node-critical");
    assert_eq!(pod["runtimeClassName"], "nvidia");
    assert_eq!(pod["automountServiceAccountToken"], false);

    let agent = container(pod, "containers", "gpu-sentinel");
    assert_eq!(
        agent["image"].as_str(),
        Some(format!("gpu-sentinel:{}", env!("CARGO_PKG_VERSION")).as_str()),
        "the image tag follows the crate's version"
    );
    let env = env_of(agent);
    assert_eq!(env["NVIDIA_VISIBLE_DEVICES"], "all");
    assert_eq!(env["NVIDIA_DRIVER_CAPABILITIES"], "utility");
    assert_eq!(env["NODE_NAME"], "fieldRef:spec.nodeName");

    // Read-only host mounts: the kernel log and the kubelet's pod-resources socket.
    for (volume, host_path, kind) in [
        ("kmsg", "/dev/kmsg", "CharDevice"),
        (
            "pod-resources",
            "/var/lib/kubelet/pod-resources",
            "DirectoryOrCreate",
        ),
    ] {
        assert_eq!(
            host_volume(pod, volume),
            (host_path.to_string(), kind.into())
        );
        let mount = mount(agent, volume);
        assert_eq!(mount["mountPath"], host_path);
        assert_eq!(mount["readOnly"], true, "{volume} must be read-only");
    }
}

#[test]
fn daemonset_holds_no_gpu_and_stays_within_its_measured_footprint() {
    let Some(docs) = rendered() else { return };
    let pod = &find(docs, "DaemonSet")["spec"]["template"]["spec"];
    let agent = container(pod, "containers", "gpu-sentinel");
    let resources = &agent["resources"];
    for side in ["requests", "limits"] {
        let set = resources[side].as_object().expect(side);
        assert!(
            !set.keys().any(|k| k.starts_with("nvidia.com/")),
            "{side}: the agent must not take a GPU from the scheduler"
        );
    }
    // BENCHMARKS.md: 9.9 MiB RSS and 0.42% of a core at 8 GPUs, collecting every second.
    let mib = |q: &Value| quantity_mib(q.as_str().expect("memory quantity"));
    let millicores = |q: &Value| quantity_millicores(q.as_str().expect("cpu quantity"));
    assert!(mib(&resources["requests"]["memory"]) >= 2.0 * 9.9);
    assert!(mib(&resources["limits"]["memory"]) <= 256.0);
    assert!(millicores(&resources["requests"]["cpu"]) >= 4.2);
    assert!(millicores(&resources["limits"]["cpu"]) <= 500.0);
    assert!(mib(&resources["limits"]["memory"]) >= mib(&resources["requests"]["memory"]));
}

#[test]
fn daemonset_has_only_the_privileges_the_kernel_log_needs() {
    let Some(docs) = rendered() else { return };
    let pod = &find(docs, "DaemonSet")["spec"]["template"]["spec"];
    assert_eq!(
        pod.get("hostNetwork"),
        None,
        "the agent serves on the pod network"
    );
    assert_eq!(
        pod.get("initContainers"),
        None,
        "one container: the agent itself"
    );
    let security = &container(pod, "containers", "gpu-sentinel")["securityContext"];
    assert_eq!(security["capabilities"]["drop"], serde_json::json!(["ALL"]));
    let add: Vec<&str> = security["capabilities"]["add"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    assert_eq!(add, ["SYSLOG"]);
    assert_eq!(security["privileged"], Value::Null);
    assert_eq!(security["allowPrivilegeEscalation"], false);
    assert_eq!(security["readOnlyRootFilesystem"], true);
}

#[test]
fn daemonset_probes_and_ports_match_the_config_and_the_service() {
    let Some(docs) = rendered() else { return };
    let pod = &find(docs, "DaemonSet")["spec"]["template"]["spec"];
    let agent = container(pod, "containers", "gpu-sentinel");
    let config = Config::load(&repo().join("deploy/kubernetes/config.toml")).expect("config");
    let port = config.export.listen.port();
    let ports = agent["ports"].as_array().expect("ports");
    assert_eq!(ports.len(), 1);
    assert_eq!(ports[0]["name"], "metrics");
    assert_eq!(ports[0]["containerPort"], port);
    assert_eq!(agent["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(agent["livenessProbe"]["httpGet"]["path"], "/healthz");
    for probe in ["readinessProbe", "livenessProbe"] {
        assert_eq!(agent[probe]["httpGet"]["port"], "metrics", "{probe}");
    }

    let service = find(docs, "Service");
    assert_eq!(
        service["spec"]["clusterIP"], "None",
        "one endpoint per agent"
    );
    let pod_labels = &find(docs, "DaemonSet")["spec"]["template"]["metadata"]["labels"];
    assert!(selects(&service["spec"]["selector"], pod_labels));
    let service_port = &service["spec"]["ports"][0];
    assert_eq!(service_port["name"], "metrics");
    assert_eq!(service_port["port"], port);
    assert_eq!(service_port["targetPort"], "metrics");

    // The state volume is the config's [state] dir, on the node.
    assert_eq!(
        host_volume(pod, "state"),
        (
            "/var/lib/gpu-sentinel".to_string(),
            "DirectoryOrCreate".into()
        )
    );
    assert_eq!(
        mount(agent, "state")["mountPath"]
            .as_str()
            .map(PathBuf::from),
        Some(config.state.dir.clone())
    );
    assert_eq!(mount(agent, "state")["readOnly"], Value::Null);
}

/// The DaemonSet's own command line, run here: the ConfigMap is mounted where `--config`
/// points, and the agent started with the container's args and its `NODE_NAME` (plus the
/// simulator and a loopback port) becomes ready, labelling its series with the node's name.
#[test]
fn daemonset_commands_run_the_real_binary() {
    let Some(docs) = rendered() else { return };
    let pod = &find(docs, "DaemonSet")["spec"]["template"]["spec"];
    let agent = container(pod, "containers", "gpu-sentinel");
    assert_eq!(env_of(agent)["NODE_NAME"], "fieldRef:spec.nodeName");

    // The ConfigMap is mounted where the agent reads its --config from.
    let args = strings(&agent["args"]);
    let config_path = config_arg(&args).to_string();
    let configmap = find(docs, "ConfigMap")["metadata"]["name"].clone();
    let config_volume = volume_mounted_at(agent, parent(&config_path));
    assert_eq!(volume(pod, &config_volume)["configMap"]["name"], configmap);
    assert_eq!(
        file_name(&config_path),
        "config.toml",
        "the ConfigMap's key"
    );

    let config = read("deploy/kubernetes/config.toml");
    let agent = start_as_deployed(&args, &config, "k8s", &[("NODE_NAME", "gpu-node-7")]);
    let metrics = agent.metrics();
    let info = samples(&metrics, "gpu_info");
    assert!(!info.is_empty());
    assert!(
        info.iter()
            .all(|(l, _)| l.contains("hostname=\"gpu-node-7\"")),
        "{info:?}"
    );
    assert_eq!(agent.get("/readyz").status, 200);
    assert_eq!(agent.get("/healthz").status, 200);
}

#[test]
fn servicemonitor_scrapes_the_service_with_its_documented_fields() {
    let Some(docs) = rendered() else { return };
    let monitor = find(docs, "ServiceMonitor");
    let service = find(docs, "Service");
    assert_eq!(monitor["apiVersion"], "monitoring.coreos.com/v1");
    // Fields of the Prometheus Operator's ServiceMonitor API (monitoring.coreos.com/v1)
    // this resource may use; a misspelt one never reaches the Operator (the API server
    // prunes it, or refuses it under kubectl's field validation).
    keys_within(
        &monitor["spec"],
        &["selector", "endpoints", "namespaceSelector", "jobLabel"],
    );
    keys_within(
        &monitor["spec"]["selector"],
        &["matchLabels", "matchExpressions"],
    );
    assert!(selects(
        &monitor["spec"]["selector"]["matchLabels"],
        &service["metadata"]["labels"]
    ));
    let endpoints = monitor["spec"]["endpoints"].as_array().expect("endpoints");
    assert_eq!(endpoints.len(), 1);
    let endpoint = &endpoints[0];
    keys_within(
        endpoint,
        &[
            "port",
            "path",
            "scheme",
            "interval",
            "scrapeTimeout",
            "honorLabels",
            "honorTimestamps",
            "relabelings",
            "metricRelabelings",
            "tlsConfig",
            "basicAuth",
        ],
    );
    assert_eq!(endpoint["port"], service["spec"]["ports"][0]["name"]);
    assert_eq!(endpoint["path"], "/metrics");
    assert_eq!(endpoint["honorLabels"], true);
    let interval = seconds(endpoint["interval"].as_str().expect("interval"));
    let timeout = seconds(endpoint["scrapeTimeout"].as_str().expect("scrapeTimeout"));
    assert!(
        timeout <= interval,
        "the Operator refuses a timeout over the interval"
    );
    for relabeling in endpoint["relabelings"].as_array().expect("relabelings") {
        keys_within(
            relabeling,
            &[
                "sourceLabels",
                "separator",
                "targetLabel",
                "regex",
                "modulus",
                "replacement",
                "action",
            ],
        );
    }
}

/// The web-config component: the Secret holds the shipped web-config.yml, mounted with the
/// TLS Secret's files where `--web.config.file` points; the probes speak HTTPS; the
/// ServiceMonitor scrapes with the CA and the scrape Secret; everything validates; and the
/// shipped file, beside a real certificate and key, is accepted by `check-config` exactly
/// as `run` would read it.
#[test]
fn web_config_component_secures_the_daemonset_and_the_servicemonitor() {
    let (Some(kubectl), Some(validate), Some(openssl)) = (
        tool("kubectl"),
        tool("kubernetes-validate"),
        tool("openssl"),
    ) else {
        return;
    };
    let file = temp_file(
        "secured.yaml",
        &kustomize_with_components(&kubectl, &["components/web-config"]),
    );
    let out = Command::new(validate)
        .arg("--strict")
        .arg(&file)
        .output()
        .expect("kubernetes-validate runs");
    assert!(out.status.success(), "{}", printed(&out));
    assert!(
        printed(&out).contains("passed for resource secret/"),
        "{}",
        printed(&out)
    );
    let Some(docs) = yaml_to_json(&[&file]) else {
        return;
    };

    let secret = find(&docs, "Secret");
    let shipped = read("deploy/kubernetes/components/web-config/web-config.yml");
    let data = secret["data"]["web-config.yml"]
        .as_str()
        .expect("web-config.yml");
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(data.replace(['\n', ' '], ""))
        .expect("base64");
    assert_eq!(String::from_utf8(decoded).as_deref(), Ok(shipped.as_str()));

    let pod = &find(&docs, "DaemonSet")["spec"]["template"]["spec"];
    let agent = container(pod, "containers", "gpu-sentinel");
    let args = strings(&agent["args"]);
    let at = args
        .iter()
        .position(|a| a == "--web.config.file")
        .expect("--web.config.file in the args");
    let web_path = args[at + 1].clone();
    assert_eq!(file_name(&web_path), "web-config.yml");
    let web_volume = volume(pod, &volume_mounted_at(agent, parent(&web_path)));
    assert_eq!(mount(agent, "web-config")["readOnly"], true);
    let sources = web_volume["projected"]["sources"]
        .as_array()
        .expect("a projected volume");
    let names: Vec<&str> = sources
        .iter()
        .filter_map(|s| s["secret"]["name"].as_str())
        .collect();
    assert!(names.contains(&secret["metadata"]["name"].as_str().expect("name")));
    let tls_secret = "gpu-sentinel-tls";
    assert!(names.contains(&tls_secret), "{names:?}");
    for probe in ["readinessProbe", "livenessProbe"] {
        assert_eq!(agent[probe]["httpGet"]["scheme"], "HTTPS", "{probe}");
    }

    let endpoint = &find(&docs, "ServiceMonitor")["spec"]["endpoints"][0];
    assert_eq!(endpoint["scheme"], "https");
    assert_eq!(endpoint["honorLabels"], true);
    keys_within(
        &endpoint["tlsConfig"],
        &[
            "ca",
            "cert",
            "keySecret",
            "serverName",
            "insecureSkipVerify",
        ],
    );
    assert_eq!(endpoint["tlsConfig"]["ca"]["secret"]["name"], tls_secret);
    assert_eq!(endpoint["tlsConfig"]["ca"]["secret"]["key"], "ca.crt");
    keys_within(&endpoint["basicAuth"], &["username", "password"]);
    for part in ["username", "password"] {
        keys_within(&endpoint["basicAuth"][part], &["name", "key", "optional"]);
        assert_eq!(endpoint["basicAuth"][part]["key"], part);
    }

    // The shipped file, as mounted: beside tls.crt, tls.key and ca.crt.
    let dir = temp_file("mounted.keep", "")
        .parent()
        .expect("dir")
        .to_path_buf();
    let web = dir.join("web-config.yml");
    std::fs::write(&web, &shipped).expect("written");
    let made = Command::new(openssl)
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
        ])
        .args([
            "-nodes", "-keyout", "tls.key", "-out", "tls.crt", "-days", "1",
        ])
        .args(["-subj", "/CN=gpu-sentinel.gpu-sentinel.svc"])
        .current_dir(&dir)
        .output()
        .expect("openssl runs");
    assert!(made.status.success(), "{}", printed(&made));
    std::fs::copy(dir.join("tls.crt"), dir.join("ca.crt")).expect("ca.crt");
    let checked = Command::new(binary())
        .arg("check-config")
        .arg(repo().join("deploy/kubernetes/config.toml"))
        .arg("--web.config.file")
        .arg(&web)
        .output()
        .expect("check-config runs");
    assert!(checked.status.success(), "{}", printed(&checked));
}

/// The committed PrometheusRule is exactly what scripts/gen-prometheusrule.py makes of
/// alerts/gpu-sentinel.rules.yml, and holds the same groups.
#[test]
fn prometheusrule_is_generated_from_the_alerts_file() {
    let Some(python) = tool("python3") else {
        return;
    };
    let out = Command::new(python)
        .arg(repo().join("scripts/gen-prometheusrule.py"))
        .output()
        .expect("the generator runs");
    assert!(out.status.success(), "{}", printed(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout) == read("deploy/kubernetes/prometheusrule.yaml"),
        "deploy/kubernetes/prometheusrule.yaml is stale: run\n  \
         python3 scripts/gen-prometheusrule.py > deploy/kubernetes/prometheusrule.yaml"
    );
    let Some(rule) = yaml_to_json(&[&repo().join("deploy/kubernetes/prometheusrule.yaml")]) else {
        return;
    };
    let Some(alerts) = yaml_to_json(&[&repo().join("alerts/gpu-sentinel.rules.yml")]) else {
        return;
    };
    assert_eq!(rule[0]["spec"]["groups"], alerts[0]["groups"]);
    // What kustomize renders (and `kubectl apply -k` sends) holds them unchanged too.
    if let Some(docs) = rendered() {
        assert_eq!(
            find(docs, "PrometheusRule")["spec"]["groups"],
            alerts[0]["groups"]
        );
    }
}

#[test]
fn prometheusrule_uses_its_documented_fields_and_promtool_accepts_it() {
    let Some(docs) = rendered() else { return };
    let rule = find(docs, "PrometheusRule");
    assert_eq!(rule["apiVersion"], "monitoring.coreos.com/v1");
    keys_within(&rule["spec"], &["groups"]);
    let mut count = 0;
    for group in rule["spec"]["groups"].as_array().expect("groups") {
        // Fields of the Operator's PrometheusRule API (monitoring.coreos.com/v1).
        keys_within(
            group,
            &[
                "name",
                "interval",
                "labels",
                "limit",
                "partial_response_strategy",
                "query_offset",
                "rules",
            ],
        );
        assert!(group["name"].as_str().is_some_and(|n| !n.is_empty()));
        for rule in group["rules"].as_array().expect("rules") {
            count += 1;
            keys_within(
                rule,
                &[
                    "alert",
                    "record",
                    "expr",
                    "for",
                    "keep_firing_for",
                    "labels",
                    "annotations",
                ],
            );
            assert!(
                rule["alert"].is_string() != rule["record"].is_string(),
                "{rule}"
            );
            assert!(rule["expr"].is_string(), "{rule}");
            if let Some(duration) = rule.get("for") {
                seconds(duration.as_str().expect("for is a string"));
            }
            for map in ["labels", "annotations"] {
                if let Some(values) = rule.get(map) {
                    let values = values.as_object().expect("a map");
                    assert!(values.values().all(Value::is_string), "{map}: {rule}");
                }
            }
        }
    }
    // JSON is YAML: promtool checks the spec as a rules file.
    let Some(promtool) = tool("promtool") else {
        return;
    };
    let file = temp_file("rules.json", &rule["spec"].to_string());
    let out = Command::new(promtool)
        .args(["check", "rules"])
        .arg(&file)
        .output()
        .expect("promtool runs");
    assert!(out.status.success(), "{}", printed(&out));
    assert!(
        printed(&out).contains(&format!("{count} rules found")),
        "{}",
        printed(&out)
    );
}

// ---------------------------------------------------------------------------------------
// systemd
// ---------------------------------------------------------------------------------------

const UNIT: &str = "deploy/systemd/gpu-sentinel.service";

/// `systemd-analyze verify` on the unit, its ExecStart pointed at the built binary (verify
/// needs the program to exist). verify exits 0 on unknown keys and bad values, printing a
/// warning naming the file: any line naming it fails the test.
#[test]
fn systemd_unit_verifies() {
    let Some(analyze) = tool("systemd-analyze") else {
        return;
    };
    let unit = read(UNIT).replace(
        "ExecStart=/usr/local/bin/gpu-sentinel ",
        &format!("ExecStart={} ", binary().display()),
    );
    assert_ne!(
        unit,
        read(UNIT),
        "ExecStart runs /usr/local/bin/gpu-sentinel"
    );
    let file = temp_file("gpu-sentinel.service", &unit);
    let out = Command::new(&analyze)
        .args(["verify", "--man=no"])
        .arg(&file)
        .output()
        .expect("systemd-analyze runs");
    let verified = printed(&out);
    assert!(out.status.success(), "{verified}");
    assert!(!verified.contains("gpu-sentinel.service"), "{verified}");

    // The exposure score systemd gives the unit's sandboxing (0 best, 10 worst).
    let out = Command::new(&analyze)
        .args(["security", "--offline=true", "--no-pager"])
        .arg(&file)
        .output()
        .expect("systemd-analyze runs");
    if !out.status.success() {
        // `security --offline` is systemd 250 and later; verify above is the check proper.
        eprintln!("skipping the exposure score: {}", printed(&out));
        return;
    }
    let printed = String::from_utf8_lossy(&out.stdout).into_owned();
    let exposure: f64 = printed
        .lines()
        .find_map(|l| {
            l.split("Overall exposure level for gpu-sentinel.service: ")
                .nth(1)
        })
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no exposure level in:\n{printed}"));
    assert!(exposure <= 3.0, "exposure {exposure}:\n{printed}");
}

#[test]
fn systemd_unit_grants_only_what_the_agent_needs() {
    let unit = unit_settings(&read(UNIT));
    let one = |key: &str| single(&unit, key);
    assert_eq!(one("CapabilityBoundingSet"), "CAP_SYSLOG");
    assert_eq!(one("AmbientCapabilities"), "CAP_SYSLOG");
    assert_eq!(one("NoNewPrivileges"), "yes");
    assert_eq!(one("ProtectSystem"), "strict");
    assert_eq!(one("ProtectHome"), "yes");
    assert_eq!(one("PrivateTmp"), "yes");
    assert_eq!(one("DynamicUser"), "yes");
    assert_eq!(one("RestrictAddressFamilies"), "AF_INET AF_INET6 AF_UNIX");
    // StateDirectory= is /var/lib/<name>: the configuration's default [state] dir.
    assert_eq!(
        Path::new("/var/lib").join(one("StateDirectory")),
        Config::default().state.dir
    );
    // The kernel log and the NVIDIA devices stay reachable.
    assert_eq!(one("DevicePolicy"), "closed");
    let devices = &unit["DeviceAllow"];
    assert!(devices.iter().any(|d| d == "/dev/kmsg r"), "{devices:?}");
    assert!(
        devices.iter().any(|d| d == "char-nvidia* rw"),
        "{devices:?}"
    );
    // Settings that would take them away: the kernel log, other users' processes, NVML's
    // files under /proc, the GPUs.
    for (key, forbidden) in [
        ("ProtectKernelLogs", "yes"),
        ("ProtectProc", "invisible"),
        ("ProtectProc", "noaccess"),
        ("ProtectProc", "ptraceable"),
        ("ProcSubset", "pid"),
        ("PrivateDevices", "yes"),
        ("PrivateUsers", "yes"),
    ] {
        assert!(
            !unit
                .get(key)
                .is_some_and(|v| v.iter().any(|v| v == forbidden)),
            "{key}={forbidden}"
        );
    }
}

/// The unit's ExecStart, run with the configuration the README installs (config.toml) on
/// the simulator: the binary accepts it and becomes ready.
#[test]
fn systemd_exec_start_runs_the_real_binary() {
    let unit = unit_settings(&read(UNIT));
    let exec = &unit["ExecStart"];
    assert_eq!(exec.len(), 1);
    let words: Vec<String> = exec[0].split_whitespace().map(str::to_string).collect();
    assert_eq!(words[0], "/usr/local/bin/gpu-sentinel");
    assert_eq!(config_arg(&words[1..]), "/etc/gpu-sentinel/config.toml");
    let agent = start_as_deployed(&words[1..], &read("config.toml"), "systemd", &[]);
    assert!(!agent.metrics().is_empty());
}

// ---------------------------------------------------------------------------------------
// Docker
// ---------------------------------------------------------------------------------------

/// The libraries the binary is linked against, each with the Debian package that ships it
/// in debian:bookworm-slim (libc6 and libgcc-s1 are in every Debian image: essential and
/// required packages). NVML is not among them: it is loaded at run time from what the
/// NVIDIA Container Toolkit mounts. The list of a debug build and a release build is the
/// same (it comes from the crates' link directives, not from the profile).
const BASE_IMAGE_LIBRARIES: &[(&str, &str)] = &[
    ("libc.so.6", "libc6"),
    ("libm.so.6", "libc6"),
    ("libdl.so.2", "libc6"),
    ("libpthread.so.0", "libc6"),
    ("librt.so.1", "libc6"),
    ("ld-linux-x86-64.so.2", "libc6"),
    ("ld-linux-aarch64.so.1", "libc6"),
    ("libgcc_s.so.1", "libgcc-s1"),
];

#[test]
fn docker_runtime_stage_has_every_library_the_binary_needs() {
    let dockerfile = instructions(&read("Dockerfile"));
    let stages: Vec<&str> = dockerfile
        .iter()
        .filter(|(n, _)| n == "FROM")
        .map(|(_, v)| v.as_str())
        .collect();
    // The binary is compiled in the Rust image (the default, last stage) or on a bookworm
    // host (--target prebuilt, scripts/build-image.sh), and added to the one runtime stage:
    // either way it runs on the release it was built for, with the same glibc.
    assert_eq!(
        stages,
        [
            "rust:1-bookworm AS build",
            "debian:bookworm-slim AS runtime",
            "runtime AS prebuilt",
            "runtime"
        ],
    );
    let binaries: Vec<Vec<&str>> = dockerfile
        .iter()
        .filter(|(n, _)| n == "COPY")
        .map(|(_, v)| v.split_whitespace().collect::<Vec<_>>())
        .filter(|words| words.last() == Some(&"/usr/local/bin/gpu-sentinel"))
        .collect();
    assert_eq!(
        binaries,
        [
            vec![
                "--chmod=0755",
                "target/image/gpu-sentinel",
                "/usr/local/bin/gpu-sentinel"
            ],
            vec![
                "--from=build",
                "--chmod=0755",
                "/src/target/release/gpu-sentinel",
                "/usr/local/bin/gpu-sentinel"
            ],
        ],
        "the prebuilt stage adds the host's binary, the default stage the one compiled"
    );
    let Some(readelf) = tool("readelf") else {
        return;
    };
    let out = Command::new(readelf)
        .args(["--dynamic", "--wide"])
        .arg(binary())
        .output()
        .expect("readelf runs");
    assert!(out.status.success(), "{}", printed(&out));
    let needed: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains("(NEEDED)"))
        .filter_map(|l| Some(l.split_once('[')?.1.split_once(']')?.0.to_string()))
        .collect();
    assert!(needed.iter().any(|n| n == "libc.so.6"), "{needed:?}");
    for library in &needed {
        assert!(
            BASE_IMAGE_LIBRARIES.iter().any(|(name, _)| name == library),
            "{library} is not in debian:bookworm-slim (needed: {needed:?})"
        );
    }
}

#[test]
fn dockerfile_agrees_with_the_config_defaults() {
    let dockerfile = instructions(&read("Dockerfile"));
    let defaults = Config::default();
    let only = |name: &str| only_instruction(&dockerfile, name);
    assert_eq!(only("EXPOSE"), defaults.export.listen.port().to_string());
    assert_eq!(Path::new(&only("VOLUME")), defaults.state.dir);
    // The default kernel log needs CAP_SYSLOG, which only root receives in a container.
    assert_ne!(defaults.collect.kmsg_path(), None);
    assert_eq!(only("USER"), "root");
    let entrypoint: Vec<String> = serde_json::from_str(&only("ENTRYPOINT")).expect("exec form");
    assert_eq!(entrypoint, ["/usr/local/bin/gpu-sentinel"]);
    let cmd: Vec<String> = serde_json::from_str(&only("CMD")).expect("exec form");
    let config = config_arg(&cmd);
    assert!(
        dockerfile
            .iter()
            .any(|(n, v)| n == "COPY" && copy_sources(v) == ["config.toml", config]),
        "the image's --config is the repository's config.toml"
    );
    let healthcheck = only("HEALTHCHECK");
    assert!(healthcheck.contains("/healthz"), "{healthcheck}");
    assert!(
        healthcheck.contains(&format!("/{}", defaults.export.listen.port())),
        "{healthcheck}"
    );
}

/// A COPY's source and destination paths, its `--from=` and `--chmod=` flags left out.
fn copy_sources(arguments: &str) -> Vec<&str> {
    arguments
        .split_whitespace()
        .filter(|word| !word.starts_with("--"))
        .collect()
}

/// The image's CMD runs (with the image's config.toml) and its HEALTHCHECK command, as
/// written but aimed at the test's port, passes against it and fails with nothing there.
#[test]
fn docker_cmd_and_healthcheck_run_against_the_real_binary() {
    let dockerfile = instructions(&read("Dockerfile"));
    let value = |name: &str| {
        dockerfile
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
            .unwrap_or_else(|| panic!("no {name}"))
    };
    let cmd: Vec<String> = serde_json::from_str(&value("CMD")).expect("exec form");
    let agent = start_as_deployed(&cmd, &read("config.toml"), "docker", &[]);
    agent.metrics();

    let healthcheck = value("HEALTHCHECK");
    let exec = healthcheck
        .split_once("CMD ")
        .map(|(_, exec)| exec)
        .expect("HEALTHCHECK ... CMD [...]");
    let probe: Vec<String> = serde_json::from_str(exec).expect("exec form");
    let default_port = Config::default().export.listen.port().to_string();
    let port = agent.base.rsplit(':').next().expect("port").to_string();
    let run = |port: &str| {
        let probe: Vec<String> = probe
            .iter()
            .map(|a| a.replace(&format!("/{default_port}"), &format!("/{port}")))
            .collect();
        Command::new(&probe[0])
            .args(&probe[1..])
            .output()
            .expect("the probe runs")
    };
    let healthy = run(&port);
    assert!(healthy.status.success(), "{}", printed(&healthy));
    let nobody = common::free_port().to_string();
    assert!(!run(&nobody).status.success());
}
