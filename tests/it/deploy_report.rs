//! The weekly fleet report's packaging: the Kubernetes component components/fleet-report
//! (a CronJob with its configuration and state volume) rendered by `kubectl kustomize` and
//! validated offline, its command run through the real binary, its configuration accepted
//! by `check-config`; and the systemd service and timer verified by `systemd-analyze`.

use crate::common;
use crate::deploy_support;

use std::process::Command;

use common::{binary, temp_file, tool};
use deploy_support::{
    container, find, kustomize_with_components, printed, read, strings, yaml_to_json,
};

#[test]
fn report_cronjob_validates_and_runs_the_real_report_command() {
    let (Some(kubectl), Some(validate)) = (tool("kubectl"), tool("kubernetes-validate")) else {
        return;
    };
    let file = temp_file(
        "report.yaml",
        &kustomize_with_components(&kubectl, &["components/fleet-report"]),
    );
    let out = Command::new(validate)
        .arg("--strict")
        .arg(&file)
        .output()
        .expect("kubernetes-validate runs");
    assert!(out.status.success(), "{}", printed(&out));
    for resource in [
        "cronjob/gpu-sentinel-report",
        "persistentvolumeclaim/gpu-sentinel-report-state",
    ] {
        assert!(
            printed(&out).contains(&format!("passed for resource {resource}")),
            "{}",
            printed(&out)
        );
    }
    let Some(docs) = yaml_to_json(&[&file]) else {
        return;
    };
    let cronjob = find(&docs, "CronJob");
    assert_eq!(cronjob["spec"]["schedule"], "0 6 * * 1", "Mondays at 06:00");
    assert_eq!(cronjob["spec"]["concurrencyPolicy"], "Forbid");
    let pod = &cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"];
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert!(pod["hostPID"].is_null(), "the report needs no host access");
    let report = container(pod, "containers", "report");
    assert!(
        report["resources"]["limits"]["nvidia.com/gpu"].is_null(),
        "no GPU"
    );
    let args = strings(&report["args"]);
    assert_eq!(args.first().map(String::as_str), Some("report"));
    assert!(args.iter().any(|a| a == "--send"));

    // The state volume holds the outbox: [state] dir of the mounted configuration.
    let state = report["volumeMounts"]
        .as_array()
        .expect("mounts")
        .iter()
        .find(|m| m["name"] == "state")
        .and_then(|m| m["mountPath"].as_str())
        .expect("the state volume is mounted");
    let config_text = read("deploy/kubernetes/components/fleet-report/report.toml");
    assert!(
        config_text.contains(&format!("dir = \"{state}\"")),
        "[state] dir is the volume"
    );

    // The configuration is what `check-config` (and so `report`) accepts, with the Secret's
    // variable set as the CronJob's envFrom sets it.
    let config = temp_file("report.toml", &config_text);
    let out = Command::new(binary())
        .arg("check-config")
        .arg(&config)
        .env(
            "RESEARCH_SLACK_URL",
            "https://hooks.slack.com/services/T0/B0/test",
        )
        .output()
        .expect("runs");
    assert!(out.status.success(), "{}", printed(&out));

    // The CronJob's arguments, against a store that is not there: they parse, and the run
    // fails on the store, naming it, and leaves no report file.
    let dead = format!("http://127.0.0.1:{}", common::free_port());
    let out_dir =
        std::env::temp_dir().join(format!("gpu-sentinel-report-run-{}", std::process::id()));
    std::fs::create_dir_all(&out_dir).expect("dir");
    let html = out_dir.join("report.html");
    let args: Vec<String> = args
        .iter()
        .map(|a| match a.as_str() {
            "$(PROMETHEUS_URL)" => dead.clone(),
            "/etc/gpu-sentinel/report.toml" => config.display().to_string(),
            "/var/lib/gpu-sentinel/report.html" => html.display().to_string(),
            _ => a.clone(),
        })
        .collect();
    let out = Command::new(binary())
        .args(&args)
        .args(["--timeout", "1s"])
        .env(
            "RESEARCH_SLACK_URL",
            "https://hooks.slack.com/services/T0/B0/test",
        )
        .output()
        .expect("runs");
    assert!(!out.status.success());
    assert!(
        printed(&out).contains(&dead) && printed(&out).contains("cannot reach"),
        "{}",
        printed(&out)
    );
    assert!(!html.exists());
    let _ = std::fs::remove_dir_all(&out_dir);
}

#[test]
fn report_timer_and_service_verify() {
    let Some(analyze) = tool("systemd-analyze") else {
        return;
    };
    let unit = read("deploy/systemd/gpu-sentinel-report.service");
    let local = unit.replace(
        "ExecStart=/usr/local/bin/gpu-sentinel ",
        &format!("ExecStart={} ", binary().display()),
    );
    assert_ne!(local, unit, "ExecStart runs /usr/local/bin/gpu-sentinel");
    let dir =
        std::env::temp_dir().join(format!("gpu-sentinel-report-units-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    std::fs::write(dir.join("gpu-sentinel-report.service"), &local).expect("unit");
    std::fs::write(
        dir.join("gpu-sentinel-report.timer"),
        read("deploy/systemd/gpu-sentinel-report.timer"),
    )
    .expect("timer");
    let out = Command::new(&analyze)
        .args(["verify", "--man=no"])
        .arg(dir.join("gpu-sentinel-report.service"))
        .arg(dir.join("gpu-sentinel-report.timer"))
        .output()
        .expect("systemd-analyze runs");
    assert!(out.status.success(), "{}", printed(&out));
    assert!(
        !printed(&out).contains("gpu-sentinel-report"),
        "{}",
        printed(&out)
    );
    let timer = read("deploy/systemd/gpu-sentinel-report.timer");
    assert!(timer.contains("OnCalendar=Mon *-*-* 06:00:00") && timer.contains("Persistent=true"));

    // The command the service runs is one the binary accepts.
    let exec = local
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .expect("ExecStart");
    let words: Vec<String> = exec
        .split_whitespace()
        .skip(1)
        .map(|w| w.replace("${PROMETHEUS_URL}", "http://127.0.0.1:1"))
        .collect();
    let out = Command::new(binary())
        .args(&words)
        .arg("--help")
        .output()
        .expect("runs");
    assert!(out.status.success(), "{}", printed(&out));
    let _ = std::fs::remove_dir_all(&dir);
}
