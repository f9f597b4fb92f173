//! Pods from the kubelet's PodResources API, end to end: a test kubelet (tonic on a Unix
//! socket, the real proto's messages) hands out whole GPUs, time-sliced replicas, a MIG
//! device and a GPU whose pod runs nothing; the agent runs on the fake NVML library, and
//! `/metrics`, `/api/v1/gpus` and `/api/v1/alerts` name each GPU's pod, namespace,
//! container and team. A socket that is missing, refuses, hangs or vanishes mid-run fails
//! only the `kubelet` collector, says so once, and everything else is served.

use crate::common;
use crate::kubelet_support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{Agent, samples, value};
use kubelet_support::{PodResourcesServer, answer, hanging_socket, pod, refusing_socket};

const SCENARIO: &str = "[simulation]\ngpus = 4\nfaults = []\n";
/// A MIG device of GPU 2, as NVML lists it (a modern MIG UUID does not name its parent).
const MIG_UUID: &str = "MIG-5c1e0b2d-1f3a-5e6b-9c8d-7a6b5c4d3e2f";

fn socket_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "gpu-sentinel-kubelet-{}-{name}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// The agent's configuration: fast collections, the kubelet at `socket`, and state kept
/// next to the socket (a fresh engine for every test).
fn config(socket: &Path, extra: &str) -> String {
    let dir = socket.parent().expect("socket in a directory");
    format!(
        "[collect]\ninterval = \"200ms\"\nkmsg = \"off\"\nkubelet_socket = \"{}\"\n\
         [state]\ndir = \"{}\"\n[idle]\nwindow = \"2s\"\n{extra}",
        socket.display(),
        dir.join("state").display()
    )
}

fn gpus(agent: &Agent) -> serde_json::Value {
    serde_json::from_slice(&agent.get("/api/v1/gpus").body).expect("JSON")
}

fn kubelet_success(text: &str) -> Option<f64> {
    value(
        text,
        "gpu_sentinel_collector_success",
        "collector=\"kubelet\"",
    )
}

/// Lines of the one warning the agent gives about the socket.
fn kubelet_warnings(stderr: &str) -> usize {
    stderr
        .lines()
        .filter(|l| l.contains("kubelet pod resources at"))
        .count()
}

const TEAMS: &str = "[export]\ndcgm_compat = true\n\
    [[teams]]\nname = \"ml\"\nnamespaces = [\"ml-*\"]\n\
    [[teams]]\nname = \"research\"\nnamespaces = [\"research\"]\n";

#[test]
fn pods_are_named_on_whole_mig_time_sliced_and_idle_gpus() {
    let dir = socket_dir("pods");
    let socket = dir.join("kubelet.sock");
    let server = PodResourcesServer::start(&socket, answer(Vec::new()));
    let scenario = format!("{SCENARIO}[[mig]]\ngpu = 2\ndevices = [\"{MIG_UUID}\"]\n");
    let agent = Agent::on_fake_nvml("kubelet-pods", &scenario, &config(&socket, TEAMS), &[]);
    agent.metrics();
    let doc = gpus(&agent);
    let uuid = |i: usize| doc["gpus"][i]["uuid"].as_str().expect("uuid").to_string();
    let (u0, u1, u2) = (uuid(0), uuid(1), uuid(2));
    let mig = format!("MIG-{u2}/1/0");
    let replicas = [format!("{u1}::0"), format!("{u1}::1")];
    server.set(answer(vec![
        pod(
            "ml-train",
            "trainer-0",
            &[("trainer", "nvidia.com/gpu", &[&u0])],
        ),
        pod(
            "ml-infer",
            "serve-a",
            &[("server", "nvidia.com/gpu", &[&replicas[0]])],
        ),
        pod(
            "ml-infer",
            "serve-b",
            &[("server", "nvidia.com/gpu", &[&replicas[1]])],
        ),
        pod(
            "research",
            "notebook",
            &[("jupyter", "nvidia.com/mig-1g.10gb", &[&mig])],
        ),
        // The same GPU's MIG device in today's form, mapped through NVML's MIG list.
        pod(
            "research",
            "eval",
            &[("runner", "nvidia.com/mig-3g.40gb", &[MIG_UUID])],
        ),
        // GPU 3 runs nothing in the simulator: allocated by index, idle.
        pod("ml-idle", "stuck-0", &[("main", "nvidia.com/gpu", &["3"])]),
        pod("other", "fpga", &[("app", "example.com/fpga", &["fpga0"])]),
    ]));
    agent.wait_until(Duration::from_secs(20), |a| {
        a.get("/metrics").text().contains("pod=\"stuck-0\"")
    });
    let text = agent.get("/metrics").text();
    assert_eq!(kubelet_success(&text), Some(1.0), "{text}");

    let info = samples(&text, "gpu_allocation_info");
    let holder = |gpu: &str, ns: &str, pod: &str, container: &str, team: &str| {
        info.iter().any(|(labels, v)| {
            *v == 1.0
                && labels.contains(&format!("gpu=\"{gpu}\""))
                && labels.contains(&format!("namespace=\"{ns}\""))
                && labels.contains(&format!("pod=\"{pod}\""))
                && labels.contains(&format!("container=\"{container}\""))
                && labels.contains(&format!("team=\"{team}\""))
        })
    };
    assert!(
        holder("0", "ml-train", "trainer-0", "trainer", "ml"),
        "{info:?}"
    );
    assert!(
        holder("1", "ml-infer", "serve-a", "server", "ml"),
        "{info:?}"
    );
    assert!(
        holder("1", "ml-infer", "serve-b", "server", "ml"),
        "{info:?}"
    );
    assert!(
        holder("2", "research", "eval", "runner", "research"),
        "{info:?}"
    );
    assert!(
        holder("2", "research", "notebook", "jupyter", "research"),
        "{info:?}"
    );
    assert!(holder("3", "ml-idle", "stuck-0", "main", "ml"), "{info:?}");
    assert_eq!(
        info.len(),
        6,
        "one series per GPU and holder, none for the FPGA: {info:?}"
    );
    for gpu in 0..4 {
        assert_eq!(
            value(&text, "gpu_allocated", &format!("gpu=\"{gpu}\"")),
            Some(1.0),
            "GPU {gpu}"
        );
    }

    // dcgm-exporter's labels on the DCGM series: one copy per pod sharing a GPU.
    let temps = samples(&text, "DCGM_FI_DEV_GPU_TEMP");
    let on = |gpu: &str| -> Vec<&str> {
        temps
            .iter()
            .filter(|(l, _)| l.contains(&format!("gpu=\"{gpu}\"")))
            .map(|(l, _)| *l)
            .collect()
    };
    assert_eq!(on("0").len(), 1);
    assert!(
        on("0")[0].contains("pod=\"trainer-0\",namespace=\"ml-train\",container=\"trainer\""),
        "{:?}",
        on("0")
    );
    assert_eq!(on("1").len(), 2, "{:?}", on("1"));
    assert!(on("1").iter().any(|l| l.contains("pod=\"serve-b\"")));

    // The API lists the holders with the GPU.
    let doc = gpus(&agent);
    assert_eq!(doc["gpus"][2]["mig_devices"][0], MIG_UUID);
    let holders = doc["gpus"][2]["holders"].as_array().expect("holders");
    let notebook = holders
        .iter()
        .find(|h| h["pod"] == "notebook")
        .expect("notebook");
    assert_eq!(notebook["device"], mig.as_str(), "{holders:?}");
    assert_eq!(notebook["team"], "research", "{holders:?}");
    assert!(
        holders
            .iter()
            .any(|h| h["pod"] == "eval" && h["device"] == MIG_UUID),
        "{holders:?}"
    );
    assert_eq!(doc["gpus"][1]["holders"].as_array().map(Vec::len), Some(2));

    // The pod that holds GPU 3 and runs nothing is allocated-idle after the window.
    agent.wait_until(Duration::from_secs(20), |a| {
        a.get("/api/v1/alerts")
            .text()
            .contains("\"GpuAllocatedIdle\"")
    });
    let alerts: serde_json::Value =
        serde_json::from_slice(&agent.get("/api/v1/alerts").body).expect("JSON");
    let idle: Vec<&serde_json::Value> = alerts["alerts"]
        .as_array()
        .expect("alerts")
        .iter()
        .filter(|a| a["labels"]["alertname"] == "GpuAllocatedIdle")
        .collect();
    assert_eq!(idle.len(), 1, "only GPU 3 is idle: {idle:?}");
    let alert = idle[0];
    assert_eq!(alert["labels"]["gpu"], "3", "{alert}");
    assert_eq!(alert["labels"]["pod"], "stuck-0", "{alert}");
    assert_eq!(alert["labels"]["namespace"], "ml-idle", "{alert}");
    assert_eq!(alert["labels"]["team"], "ml", "{alert}");
    let description = alert["annotations"]["description"].as_str().unwrap_or("");
    assert!(
        description.contains("pod ml-idle/stuck-0") && description.contains("team ml"),
        "{description}"
    );
    // Its idle time is charged to the pod's owner and team.
    let text = agent.get("/metrics").text();
    assert!(
        samples(&text, "gpu_owner_seconds_total")
            .iter()
            .any(|(l, _)| {
                l.contains("gpu=\"3\"")
                    && l.contains("owner=\"ml-idle\"")
                    && l.contains("team=\"ml\"")
            }),
        "{text}"
    );
}

/// Starts an agent on `socket` (in whatever state the caller left it), checks that for a
/// few collections the kubelet family is failed and the GPUs are served, and returns the
/// agent's log.
fn degraded_run(name: &str, socket: &Path) -> String {
    let agent = Agent::on_fake_nvml(name, SCENARIO, &config(socket, ""), &[]);
    let text = agent.metrics();
    assert_eq!(kubelet_success(&text), Some(0.0), "{text}");
    // Several collections later: still failed, still serving everything else.
    std::thread::sleep(Duration::from_millis(1500));
    let text = agent.get("/metrics").text();
    assert_eq!(kubelet_success(&text), Some(0.0));
    assert_eq!(samples(&text, "gpu_up").len(), 4, "{text}");
    assert_eq!(
        value(
            &text,
            "gpu_sentinel_collector_success",
            "collector=\"procfs\""
        ),
        Some(1.0)
    );
    assert!(samples(&text, "gpu_allocation_info").is_empty());
    assert_eq!(agent.get("/readyz").status, 200);
    let (_, stderr) = agent.stop();
    stderr
}

#[test]
fn a_missing_socket_fails_the_kubelet_family_once() {
    let dir = socket_dir("missing");
    let stderr = degraded_run("kubelet-missing", &dir.join("kubelet.sock"));
    assert_eq!(kubelet_warnings(&stderr), 1, "{stderr}");
    assert!(stderr.contains("cannot connect"), "{stderr}");
}

#[test]
fn a_refusing_socket_fails_the_kubelet_family_once() {
    let dir = socket_dir("refusing");
    let socket = dir.join("kubelet.sock");
    refusing_socket(&socket);
    let stderr = degraded_run("kubelet-refusing", &socket);
    assert_eq!(kubelet_warnings(&stderr), 1, "{stderr}");
}

#[test]
fn a_hanging_socket_times_out_and_fails_the_kubelet_family_once() {
    let dir = socket_dir("hanging");
    let socket = dir.join("kubelet.sock");
    let _hanging = hanging_socket(&socket);
    let stderr = degraded_run("kubelet-hanging", &socket);
    assert_eq!(kubelet_warnings(&stderr), 1, "{stderr}");
    assert!(stderr.contains("no answer within"), "{stderr}");
}

#[test]
fn a_socket_removed_mid_run_fails_the_family_and_clears_the_pods() {
    let dir = socket_dir("vanishing");
    let socket = dir.join("kubelet.sock");
    let mut server = PodResourcesServer::start(
        &socket,
        answer(vec![pod("ml-a", "p", &[("c", "nvidia.com/gpu", &["0"])])]),
    );
    let agent = Agent::on_fake_nvml(
        "kubelet-vanishing",
        SCENARIO,
        &config(&socket, ""),
        &[("RUST_LOG", "warn,gpu_sentinel_agent::source=info")],
    );
    agent.wait_until(Duration::from_secs(20), |a| {
        a.get("/metrics").text().contains("pod=\"p\"")
    });
    assert_eq!(kubelet_success(&agent.get("/metrics").text()), Some(1.0));
    server.stop();
    assert!(!socket.exists());
    agent.wait_until(Duration::from_secs(20), |a| {
        kubelet_success(&a.get("/metrics").text()) == Some(0.0)
    });
    std::thread::sleep(Duration::from_millis(1000));
    let text = agent.get("/metrics").text();
    assert_eq!(kubelet_success(&text), Some(0.0));
    assert!(samples(&text, "gpu_allocation_info").is_empty(), "{text}");
    assert_eq!(samples(&text, "gpu_up").len(), 4);
    // It comes back: attributed again, and said once.
    let _server = PodResourcesServer::start(
        &socket,
        answer(vec![pod("ml-a", "q", &[("c", "nvidia.com/gpu", &["0"])])]),
    );
    agent.wait_until(Duration::from_secs(20), |a| {
        a.get("/metrics").text().contains("pod=\"q\"")
    });
    let (_, stderr) = agent.stop();
    assert_eq!(kubelet_warnings(&stderr), 1, "{stderr}");
    assert_eq!(
        stderr.matches("collector kubelet works again").count(),
        1,
        "{stderr}"
    );
}

/// On a node whose kubelet answers, a GPU running processes that no pod was given is used
/// outside the scheduler: counted per GPU and alerted on. When the kubelet stops answering
/// nothing is known of the allocations, and nothing is claimed.
#[test]
fn processes_on_a_gpu_no_pod_holds_run_outside_the_scheduler() {
    let dir = socket_dir("outside");
    let socket = dir.join("kubelet.sock");
    let server = PodResourcesServer::start(&socket, answer(Vec::new()));
    // GPU 3 (free in the simulator) reports a live host process — this test's own — as
    // `docker run --gpus` beside the scheduler would; the simulator's processes have PIDs
    // that do not exist here (ghosts, not jobs).
    let scenario = format!(
        "{SCENARIO}[[process]]\ngpu = 3\npid = {}\nused_memory_bytes = 1073741824\nsm_utilization = 0.5\n",
        std::process::id()
    );
    let agent = Agent::on_fake_nvml("kubelet-outside", &scenario, &config(&socket, ""), &[]);
    agent.metrics();
    let doc = gpus(&agent);
    let u0 = doc["gpus"][0]["uuid"].as_str().expect("uuid").to_string();
    // GPU 0 is the pod's; GPU 3 runs the live process and no pod holds it.
    server.set(answer(vec![pod(
        "ml-train",
        "trainer-0",
        &[("trainer", "nvidia.com/gpu", &[&u0])],
    )]));
    agent.wait_until(Duration::from_secs(20), |a| {
        a.get("/metrics").text().contains("pod=\"trainer-0\"")
    });
    let text = agent.get("/metrics").text();
    let outside = |text: &str, gpu: &str| {
        value(
            text,
            "gpu_outside_scheduler_processes",
            &format!("gpu=\"{gpu}\""),
        )
    };
    assert_eq!(outside(&text, "0"), Some(0.0), "the pod's GPU");
    assert_eq!(
        outside(&text, "1"),
        Some(0.0),
        "only processes that are gone"
    );
    assert_eq!(outside(&text, "3"), Some(1.0), "{text}");
    agent.wait_until(Duration::from_secs(20), |a| {
        a.get("/api/v1/alerts")
            .text()
            .contains("\"GpuOutsideScheduler\"")
    });
    let alerts: serde_json::Value =
        serde_json::from_slice(&agent.get("/api/v1/alerts").body).expect("JSON");
    let gpus_alerted: Vec<&str> = alerts["alerts"]
        .as_array()
        .expect("alerts")
        .iter()
        .filter(|a| a["labels"]["alertname"] == "GpuOutsideScheduler")
        .filter_map(|a| a["labels"]["gpu"].as_str())
        .collect();
    assert!(gpus_alerted == ["3"], "{gpus_alerted:?}");

    // The kubelet goes away: no allocations are known, so no GPU is said to be outside.
    drop(server);
    let _ = std::fs::remove_file(&socket);
    agent.wait_until(Duration::from_secs(20), |a| {
        kubelet_success(&a.get("/metrics").text()) == Some(0.0)
    });
    let text = agent.get("/metrics").text();
    for gpu in 0..4 {
        assert_eq!(
            outside(&text, &gpu.to_string()),
            Some(0.0),
            "GPU {gpu}: {text}"
        );
    }
}
