//! MIG through the real binary: a simulated node with two GPUs in MIG mode serves each
//! instance's `gpu_mig_*` series, with `dcgm_compat` dcgm-exporter's per-GPU-instance
//! series (`GPU_I_ID`, `GPU_I_PROFILE`), lists the instances in `/api/v1/gpus` and follows
//! one created and one destroyed; on the fake NVML library with a test kubelet, the pods
//! holding MIG devices are named on their own instance's series only, and the notebook
//! left idle in a `1g.10gb` fires `GpuAllocatedIdle` naming the instance, charged at a
//! seventh of the GPU.

use crate::common;
use crate::kubelet_support;

use std::path::PathBuf;
use std::time::Duration;

use common::{Agent, samples, value};
use kubelet_support::{PodResourcesServer, answer, pod};

fn json(agent: &Agent, path: &str) -> serde_json::Value {
    serde_json::from_slice(&agent.get(path).body).expect("JSON")
}

fn state_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("gpu-sentinel-mig-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// The `GPU_I_ID` values of a family's series of GPU `gpu`, in order.
fn gpu_instance_ids(text: &str, family: &str, gpu: &str) -> Vec<String> {
    samples(text, family)
        .iter()
        .filter(|(l, _)| l.contains(&format!("gpu=\"{gpu}\"")))
        .filter_map(|(l, _)| {
            l.split_once("GPU_I_ID=\"")
                .and_then(|(_, rest)| rest.split_once('"'))
                .map(|(id, _)| id.to_string())
        })
        .collect()
}

#[test]
fn a_simulated_mig_node_serves_every_instance_and_follows_their_changes() {
    let dir = state_dir("simulated");
    let config = common::temp_file(
        "mig-simulated.toml",
        &format!(
            "[export]\ndcgm_compat = true\n[collect]\nkmsg = \"off\"\nkubelet_socket = \"off\"\n\
             [state]\ndir = \"{}\"\n",
            dir.display()
        ),
    );
    let config = config.to_str().expect("UTF-8 path");
    let agent = Agent::start(
        &[
            "--simulate",
            "--sim-mig",
            "2",
            "--sim-speed",
            "600",
            "--config",
            config,
        ],
        &[],
    );
    let text = agent.metrics();
    // GPU 0, the mixed layout: a 3g split into two compute instances, a 2g, two 1g.
    let fb_used = gpu_instance_ids(&text, "DCGM_FI_DEV_FB_USED", "0");
    assert_eq!(fb_used, ["2", "3", "9", "10"], "{text}");
    for (labels, _) in samples(&text, "DCGM_FI_DEV_FB_USED") {
        if labels.contains("gpu=\"0\"") || labels.contains("gpu=\"1\"") {
            assert!(labels.contains("GPU_I_PROFILE=\""), "{labels}");
        }
    }
    assert!(text.contains("GPU_I_PROFILE=\"3g.40gb\",GPU_I_ID=\"2\""));
    // The graphics-engine activity MIG users read, per GPU instance too (NVML gives no
    // utilization in MIG mode: GPM's per GPU instance).
    let engine = gpu_instance_ids(&text, "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "0");
    assert_eq!(engine, ["2", "3", "9", "10"], "{text}");
    for (labels, v) in samples(&text, "DCGM_FI_PROF_GR_ENGINE_ACTIVE") {
        assert!((0.0..=1.0).contains(&v), "{labels} {v}");
        if labels.contains("gpu=\"0\"") {
            assert!(labels.contains("GPU_I_PROFILE=\""), "{labels}");
        }
    }
    // A GPU not in MIG mode keeps its one series, without instance labels.
    let whole: Vec<_> = samples(&text, "DCGM_FI_DEV_FB_USED")
        .into_iter()
        .filter(|(l, _)| l.contains("gpu=\"2\""))
        .collect();
    assert!(
        whole.len() == 1 && !whole[0].0.contains("GPU_I_ID"),
        "{whole:?}"
    );
    // Native series per MIG device: five on GPU 0.
    let used = samples(&text, "gpu_mig_memory_used_bytes");
    let on_gpu0: Vec<_> = used
        .iter()
        .filter(|(l, _)| l.contains("gpu=\"0\""))
        .collect();
    assert_eq!(on_gpu0.len(), 5, "{used:?}");
    assert!(on_gpu0.iter().any(|(l, _)| {
        l.contains("gpu_instance=\"2\",compute_instance=\"1\",profile=\"2c.3g.40gb\"")
    }));
    assert!(value(&text, "gpu_mig_share_ratio", "gpu_instance=\"9\"").is_some());

    // The API lists each MIG GPU's instances with profile and memory.
    let doc = json(&agent, "/api/v1/gpus");
    for gpu in [0usize, 1] {
        let instances = doc["gpus"][gpu]["mig_instances"]
            .as_array()
            .expect("instances");
        assert!(!instances.is_empty(), "GPU {gpu}");
        for i in instances {
            assert!(
                i["profile"].as_str().is_some_and(|p| p.ends_with("gb")),
                "{i}"
            );
            assert!(
                i["memory"]["total_bytes"]
                    .as_u64()
                    .is_some_and(|b| b > 9 << 30),
                "{i}"
            );
            assert!(i["memory"]["used_bytes"].as_u64().is_some(), "{i}");
            assert!(
                i["uuid"].as_str().is_some_and(|u| u.starts_with("MIG-")),
                "{i}"
            );
        }
        assert!(doc["gpus"][gpu]["mig_findings"].as_array().is_some());
    }
    assert!(doc["gpus"][2].get("mig_instances").is_none());

    // GPU 1's last GPU instance is created 15 simulated minutes in, its first destroyed at
    // 30 (1.5 and 3 s at this speed): followed at the next collections.
    agent.wait_until(Duration::from_secs(30), |a| {
        let text = a.get("/metrics").text();
        let gis = gpu_instance_ids(&text, "DCGM_FI_DEV_FB_USED", "1");
        gis.contains(&"13".to_string()) && !gis.contains(&"7".to_string())
    });
    let text = agent.get("/metrics").text();
    assert!(value(&text, "gpu_mig_memory_used_bytes", "gpu=\"1\",uuid").is_some());
    assert!(
        !samples(&text, "gpu_mig_processes")
            .iter()
            .any(|(l, _)| l.contains("gpu=\"1\"") && l.contains("gpu_instance=\"7\"")),
        "the destroyed instance's series are gone"
    );
    // The empty 1g still reports, with zeros.
    assert_eq!(
        value(&text, "gpu_mig_processes", "gpu=\"0\",uuid").map(|_| ()),
        Some(())
    );
    let empty = samples(&text, "gpu_mig_processes")
        .into_iter()
        .find(|(l, _)| l.contains("gpu=\"0\"") && l.contains("gpu_instance=\"10\""))
        .expect("GI 10 reports");
    assert_eq!(empty.1, 0.0);
}

#[test]
fn pods_holding_mig_instances_are_named_on_their_instance_only_and_an_idle_one_alerts() {
    let dir = state_dir("kubelet");
    let socket = dir.join("kubelet.sock");
    let server = PodResourcesServer::start(&socket, answer(Vec::new()));
    // Simulated time runs at 600x the wall clock: the notebook on GPU 0's GI 9 stops
    // computing 24 simulated minutes in (2.4 s); the idle window is 2 s of wall time.
    let scenario = "[simulation]\ngpus = 3\nmig_gpus = 2\nfaults = []\nspeed = 600.0\n[clock]\nmode = \"wall\"\n";
    let config = format!(
        "[collect]\ninterval = \"200ms\"\nkmsg = \"off\"\nkubelet_socket = \"{}\"\n\
         [state]\ndir = \"{}\"\n[idle]\nwindow = \"2s\"\n[export]\ndcgm_compat = true\n\
         [cost]\nhourly_price = 7.0\n",
        socket.display(),
        dir.join("state").display()
    );
    let agent = Agent::on_fake_nvml("mig-kubelet", scenario, &config, &[]);
    agent.metrics();
    let doc = json(&agent, "/api/v1/gpus");
    let instances = doc["gpus"][0]["mig_instances"]
        .as_array()
        .expect("MIG instances");
    let uuid_of = |gi: u64| {
        instances
            .iter()
            .find(|i| i["gpu_instance"] == gi)
            .and_then(|i| i["uuid"].as_str())
            .expect("the instance")
            .to_string()
    };
    let notebook = uuid_of(9);
    let gi3_index = instances
        .iter()
        .find(|i| i["gpu_instance"] == 3)
        .and_then(|i| i["device_index"].as_u64())
        .expect("GI 3's index");
    let by_index = format!("0:{gi3_index}");
    server.set(answer(vec![
        // By MIG UUID (the device plugin's default), by index strategy, and by GKE's form.
        pod(
            "research",
            "notebook",
            &[("jupyter", "nvidia.com/mig-1g.10gb", &[&notebook])],
        ),
        pod(
            "serving",
            "llm-0",
            &[("server", "nvidia.com/mig-2g.20gb", &[&by_index])],
        ),
        pod(
            "batch",
            "etl-0",
            &[("main", "nvidia.com/mig-1g.10gb", &["nvidia0/gi10"])],
        ),
    ]));
    agent.wait_until(Duration::from_secs(20), |a| {
        a.get("/metrics").text().contains("pod=\"etl-0\"")
    });
    let text = agent.get("/metrics").text();
    let fb: Vec<(&str, f64)> = samples(&text, "DCGM_FI_DEV_FB_USED")
        .into_iter()
        .filter(|(l, _)| l.contains("gpu=\"0\""))
        .collect();
    let series_of = |gi: &str| -> Vec<&str> {
        fb.iter()
            .filter(|(l, _)| l.contains(&format!("GPU_I_ID=\"{gi}\"")))
            .map(|(l, _)| *l)
            .collect()
    };
    assert_eq!(series_of("9").len(), 1, "{fb:?}");
    assert!(
        series_of("9")[0].contains("pod=\"notebook\",namespace=\"research\",container=\"jupyter\"")
    );
    assert!(series_of("3")[0].contains("pod=\"llm-0\""), "{fb:?}");
    assert!(series_of("10")[0].contains("pod=\"etl-0\""), "{fb:?}");
    assert!(!series_of("2")[0].contains("pod="), "{fb:?}");
    // The whole board's series of the GPU carry no instance's pod.
    let temps: Vec<_> = samples(&text, "DCGM_FI_DEV_GPU_TEMP")
        .into_iter()
        .filter(|(l, _)| l.contains("gpu=\"0\""))
        .collect();
    assert!(
        temps.len() == 1 && !temps[0].0.contains("pod="),
        "{temps:?}"
    );
    // Natively: the allocation names its instance.
    assert!(
        samples(&text, "gpu_allocation_info").iter().any(|(l, _)| {
            l.contains("pod=\"notebook\"")
                && l.contains("gpu_instance=\"9\",compute_instance=\"0\"")
        }),
        "{text}"
    );

    // The notebook holds its instance and computes nothing, and so does the batch pod on
    // the empty GI 10: an alert each, none for the GPU or its busy instances.
    let idle_instances = |a: &Agent| -> Vec<String> {
        let alerts = json(a, "/api/v1/alerts");
        let mut gis: Vec<String> = alerts["alerts"]
            .as_array()
            .expect("alerts")
            .iter()
            .filter(|a| a["labels"]["alertname"] == "GpuAllocatedIdle" && a["labels"]["gpu"] == "0")
            .map(|a| {
                a["labels"]["gpu_instance"]
                    .as_str()
                    .unwrap_or("the GPU")
                    .to_string()
            })
            .collect();
        gis.sort();
        gis
    };
    agent.wait_until(Duration::from_secs(30), |a| idle_instances(a).len() >= 2);
    assert_eq!(idle_instances(&agent), ["10", "9"]);
    let alerts = json(&agent, "/api/v1/alerts");
    let alert = alerts["alerts"]
        .as_array()
        .expect("alerts")
        .iter()
        .find(|a| {
            a["labels"]["alertname"] == "GpuAllocatedIdle"
                && a["labels"]["gpu"] == "0"
                && a["labels"]["gpu_instance"] == "9"
        })
        .expect("the notebook's alert");
    assert_eq!(alert["labels"]["gpu_instance"], "9", "{alert}");
    assert_eq!(alert["labels"]["profile"], "1g.10gb", "{alert}");
    assert_eq!(alert["labels"]["mig_uuid"], notebook.as_str(), "{alert}");
    assert_eq!(alert["labels"]["pod"], "notebook", "{alert}");
    let summary = alert["annotations"]["summary"].as_str().unwrap_or("");
    assert!(
        summary.starts_with("GPU 0 MIG 1g.10gb (GI 9, CI 0) on "),
        "{summary}"
    );
    let description = alert["annotations"]["description"].as_str().unwrap_or("");
    assert!(
        description.contains("pod research/notebook")
            && description.contains("It is 1/7 of the GPU")
            && description.contains("costs 1.00 an hour (its share of the GPU's 7.00)"),
        "{description}"
    );
    // Its idle cost is a seventh of the GPU's hourly price, on the instance's counter.
    let text = agent.get("/metrics").text();
    let idle_cost = value(
        &text,
        "gpu_mig_cost_total",
        &format!("mig_uuid=\"{notebook}\",state=\"idle\""),
    )
    .expect("the instance's idle cost");
    assert!(idle_cost > 0.0, "{text}");
    let doc = json(&agent, "/api/v1/gpus");
    let findings = doc["gpus"][0]["mig_findings"].as_array().expect("findings");
    let nine = findings
        .iter()
        .find(|f| f["gpu_instance"] == 9)
        .expect("GI 9");
    assert!(
        (nine["hourly"].as_f64().unwrap_or(0.0) - 1.0).abs() < 1e-9,
        "{nine}"
    );
    assert_eq!(nine["allocated_idle"], true);
    // The pod's namespace is charged GPU time.
    assert!(
        samples(&text, "gpu_owner_seconds_total")
            .iter()
            .any(|(l, _)| l.contains("gpu=\"0\"") && l.contains("owner=\"research\"")),
        "{text}"
    );
}

/// The sample of `family` on GPU 0's compute instance `ci` of GPU instance 2 (the `3g`
/// split into a `1c` and a `2c`).
fn split_gi(text: &str, family: &str, ci: u32) -> Option<f64> {
    let at = format!("gpu_instance=\"2\",compute_instance=\"{ci}\"");
    samples(text, family)
        .into_iter()
        .find(|(l, _)| l.contains("gpu=\"0\"") && l.contains(&at))
        .map(|(_, v)| v)
}

#[test]
fn an_empty_compute_instance_beside_a_held_one_is_free_and_charged_to_nobody() {
    // GPU 0's 3g: a training job on its 1c all along, bursty jobs on its 2c that come and
    // go. NVML reports the GPU instance's memory on both; while the 2c runs nothing it is
    // free capacity, not allocated (and not allocated-but-idle) by the 1c's memory.
    let dir = state_dir("split");
    let config = common::temp_file(
        "mig-split.toml",
        &format!(
            "[collect]\ninterval = \"1s\"\nkmsg = \"off\"\nkubelet_socket = \"off\"\n\
             [state]\ndir = \"{}\"\n",
            dir.display()
        ),
    );
    let config = config.to_str().expect("UTF-8 path");
    let agent = Agent::start(
        &[
            "--simulate",
            "--sim-mig",
            "2",
            "--sim-speed",
            "600",
            "--config",
            config,
        ],
        &[],
    );
    agent.metrics();
    let mut found = None;
    agent.wait_until(Duration::from_secs(90), |a| {
        let text = a.get("/metrics").text();
        let held = split_gi(&text, "gpu_mig_processes", 0).is_some_and(|n| n > 0.0);
        let empty = split_gi(&text, "gpu_mig_processes", 1) == Some(0.0);
        if held && empty {
            found = Some(text);
        }
        found.is_some()
    });
    let text = found.expect("a scrape with the 2c empty");
    let memory = split_gi(&text, "gpu_mig_memory_used_bytes", 1).expect("memory");
    assert!(
        memory > f64::from(1u32 << 30),
        "the 2c reports the 1c's memory, over the idle floor: {memory}"
    );
    assert_eq!(split_gi(&text, "gpu_mig_allocated", 0), Some(1.0), "the 1c");
    assert_eq!(
        split_gi(&text, "gpu_mig_allocated", 1),
        Some(0.0),
        "the empty 2c beside it"
    );
    assert_eq!(split_gi(&text, "gpu_mig_allocated_idle", 1), Some(0.0));
    // Free: the 2c's two sevenths, besides the empty 1g on each MIG GPU.
    let free = value(&text, "gpu_node_free_mig_gpus", "").expect("free MIG capacity");
    assert!(free >= 4.0 / 7.0 - 1e-9, "free MIG GPUs {free}");
    // The API agrees: no holder, no owner on it.
    let doc = json(&agent, "/api/v1/gpus");
    let findings = doc["gpus"][0]["mig_findings"].as_array().expect("findings");
    let two = findings
        .iter()
        .find(|f| f["gpu_instance"] == 2 && f["compute_instance"] == 1)
        .expect("the 2c's findings");
    if two["owners"].as_array().is_some_and(|o| o.is_empty()) {
        assert_eq!(two["allocated"], false, "{two}");
        assert_eq!(two["unused"], two["idle_now"], "{two}");
    }
}

#[test]
fn an_orphan_holding_memory_in_an_idle_mig_instance_is_a_ghost_of_that_instance() {
    // A real orphan (its shell exits, `sleep` lives on re-parented) that the fake NVML
    // reports holding 4 GiB in GPU 0's empty `1g.10gb` (GI 10). NVML gives no per-process
    // utilization in MIG mode: the GPU instance's GPM SM activity (0: nothing else runs
    // there) is what tells it computes nothing.
    let orphan = crate::common::orphan::Orphan::start();
    let pid = orphan.0;
    let scenario = format!(
        "[simulation]\ngpus = 3\nmig_gpus = 2\nfaults = []\nspeed = 600.0\n[clock]\n\
         mode = \"wall\"\n[[process]]\ngpu = 0\npid = {pid}\nused_memory_bytes = 4294967296\n\
         gpu_instance = 10\ncompute_instance = 0\n"
    );
    let config = "[collect]\ninterval = \"200ms\"\nkmsg = \"off\"\nkubelet_socket = \"off\"\n\
                  [idle]\nwindow = \"2s\"\n";
    let agent = Agent::on_fake_nvml("mig-ghost", &scenario, config, &[]);
    agent.metrics();
    let ghost_alert = |a: &Agent| -> Option<serde_json::Value> {
        json(a, "/api/v1/alerts")["alerts"]
            .as_array()?
            .iter()
            .find(|x| {
                x["labels"]["alertname"] == "GpuGhostProcess"
                    && x["labels"]["gpu"] == "0"
                    && x["labels"]["gpu_instance"] == "10"
            })
            .cloned()
    };
    agent.wait_until(Duration::from_secs(30), |a| ghost_alert(a).is_some());
    let doc = json(&agent, "/api/v1/gpus");
    let gi10 = doc["gpus"][0]["mig_instances"]
        .as_array()
        .and_then(|l| l.iter().find(|i| i["gpu_instance"] == 10))
        .and_then(|i| i["uuid"].as_str())
        .expect("GI 10 listed")
        .to_string();
    let ghost = doc["gpus"][0]["idle"]["ghosts"]
        .as_array()
        .and_then(|g| g.iter().find(|p| p["pid"] == pid))
        .cloned()
        .expect("the orphan is a ghost of GPU 0");
    assert_eq!(ghost["liveness"], "orphaned", "{ghost}");
    assert_eq!(ghost["gpu_instance"], 10, "{ghost}");
    assert_eq!(ghost["compute_instance"], 0, "{ghost}");
    assert_eq!(ghost["profile"], "1g.10gb", "{ghost}");
    assert_eq!(ghost["mig_uuid"], gi10.as_str(), "{ghost}");

    let alert = ghost_alert(&agent).expect("the instance's alert");
    assert_eq!(alert["labels"]["profile"], "1g.10gb", "{alert}");
    assert_eq!(alert["labels"]["compute_instance"], "0", "{alert}");
    assert_eq!(alert["labels"]["mig_uuid"], gi10.as_str(), "{alert}");
    let summary = alert["annotations"]["summary"].as_str().unwrap_or("");
    assert!(
        summary.starts_with("GPU 0 MIG 1g.10gb (GI 10, CI 0) on "),
        "{summary}"
    );
    let description = alert["annotations"]["description"].as_str().unwrap_or("");
    assert!(
        description.contains(&format!("pid {pid} (")),
        "{description}"
    );
    let text = agent.get("/metrics").text();
    assert!(
        value(&text, "gpu_ghost_processes", "gpu=\"0\"").is_some_and(|n| n >= 1.0),
        "{text}"
    );
}
