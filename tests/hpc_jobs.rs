//! Slurm jobs holding GPUs from the files sites write for other tools, end to end: a
//! dcgm-exporter job-mapping directory and `/run/gpustat`-style files name the jobs on
//! their GPUs (`gpu_allocation_info`, dcgm's `hpc_job` label, `/api/v1/gpus`), the uid
//! of a gpustat file names the user and through it the team, and a job holding a GPU that
//! computes nothing is `GpuAllocatedIdle` with the job in its labels. A configured
//! directory that is missing fails only the `hpc_jobs` collector.

mod common;

use std::time::Duration;

use common::{Agent, samples, value};

#[test]
fn jobs_from_mapping_and_gpustat_files_hold_their_gpus() {
    let root = std::env::temp_dir().join(format!("gpu-sentinel-hpc-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let (mapping, gpustat) = (root.join("mapping"), root.join("gpustat"));
    std::fs::create_dir_all(&mapping).expect("mapping dir");
    std::fs::write(mapping.join("0"), "4242\n").expect("write");
    std::fs::write(mapping.join("2.1"), "5151\n\n").expect("write");
    std::fs::write(mapping.join("notes.txt"), "not a GPU\n").expect("write");
    let config = format!(
        "[collect]\ninterval = \"200ms\"\nkmsg = \"off\"\nkubelet_socket = \"off\"\n\
         hpc_job_mapping_dir = \"{}\"\ngpustat_dir = \"{}\"\n\
         [state]\ndir = \"{}\"\n[idle]\nwindow = \"2s\"\n[export]\ndcgm_compat = true\n\
         [[teams]]\nname = \"hpc\"\nusers = [\"root\"]\n",
        mapping.display(),
        gpustat.display(),
        root.join("state").display()
    );
    let agent = Agent::on_fake_nvml(
        "hpc-jobs",
        "[simulation]\ngpus = 4\nfaults = []\n",
        &config,
        &[],
    );
    // The gpustat directory does not exist yet: only its family fails.
    let text = agent.metrics();
    let success = |t: &str| {
        value(
            t,
            "gpu_sentinel_collector_success",
            "collector=\"hpc_jobs\"",
        )
    };
    assert_eq!(success(&text), Some(0.0), "{text}");
    assert_eq!(samples(&text, "gpu_up").len(), 4);

    let doc: serde_json::Value =
        serde_json::from_slice(&agent.get("/api/v1/gpus").body).expect("JSON");
    let uuid3 = doc["gpus"][3]["uuid"].as_str().expect("uuid").to_string();
    std::fs::create_dir_all(&gpustat).expect("gpustat dir");
    // GPU 3 runs nothing in the simulator: the job holds it idle. uid 0 is root.
    std::fs::write(gpustat.join(&uuid3), "7777 0\n").expect("write");
    agent.wait_until(Duration::from_secs(20), |a| {
        a.get("/metrics").text().contains("hpc_job=\"7777\"")
    });
    let text = agent.get("/metrics").text();
    assert_eq!(success(&text), Some(1.0));
    let info = samples(&text, "gpu_allocation_info");
    let job_on = |gpu: &str, job: &str| {
        info.iter().any(|(l, _)| {
            l.contains(&format!("gpu=\"{gpu}\"")) && l.contains(&format!("hpc_job=\"{job}\""))
        })
    };
    assert!(
        job_on("0", "4242") && job_on("2", "5151") && job_on("3", "7777"),
        "{info:?}"
    );
    assert_eq!(info.len(), 3, "{info:?}");
    assert!(
        info.iter().any(|(l, _)| l.contains("hpc_job=\"7777\"")
            && l.contains("user=\"root\"")
            && l.contains("team=\"hpc\"")),
        "{info:?}"
    );
    assert!(
        samples(&text, "DCGM_FI_DEV_GPU_TEMP")
            .iter()
            .any(|(l, _)| l.contains("gpu=\"0\"") && l.contains("hpc_job=\"4242\"")),
        "{text}"
    );
    let doc: serde_json::Value =
        serde_json::from_slice(&agent.get("/api/v1/gpus").body).expect("JSON");
    assert_eq!(doc["gpus"][2]["holders"][0]["device"], "2.1");

    agent.wait_until(Duration::from_secs(20), |a| {
        a.get("/api/v1/alerts").text().contains("GpuAllocatedIdle")
    });
    let alerts: serde_json::Value =
        serde_json::from_slice(&agent.get("/api/v1/alerts").body).expect("JSON");
    let alert = alerts["alerts"]
        .as_array()
        .expect("alerts")
        .iter()
        .find(|a| a["labels"]["alertname"] == "GpuAllocatedIdle")
        .expect("an allocated-idle alert");
    assert_eq!(alert["labels"]["gpu"], "3", "{alert}");
    assert_eq!(alert["labels"]["hpc_job"], "7777", "{alert}");
    assert_eq!(alert["labels"]["team"], "hpc", "{alert}");
    let description = alert["annotations"]["description"].as_str().unwrap_or("");
    assert!(
        description.contains("Slurm job 7777 (user root, team hpc)"),
        "{description}"
    );
}
