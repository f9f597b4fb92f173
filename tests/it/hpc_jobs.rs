//! Slurm jobs holding GPUs from the files sites write for other tools, end to end: a
//! dcgm-exporter job-mapping directory and `/run/gpustat`-style files name the jobs on
//! their GPUs (`gpu_allocation_info`, dcgm's `hpc_job` label, `/api/v1/gpus`), the uid
//! of a gpustat file names the user and through it the team, and a job holding a GPU that
//! computes nothing is `GpuAllocatedIdle` with the job in its labels. A configured
//! directory that is missing fails only the `hpc_jobs` collector. The controller
//! (`scontrol`, a script here: no slurmctld runs in the tests) names each job's account,
//! which `[[teams]] slurm_accounts` match.

use crate::common;

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

/// A Slurm controller's answers, as `scontrol show job --oneliner ID` prints them; each call
/// is logged, so the test can see that a job is asked for once.
const SCONTROL: &str = r#"#!/bin/sh
echo "$*" >> "$(dirname "$0")/calls"
if [ -e "$(dirname "$0")/down" ]; then
  echo "slurm_load_jobs error: Unable to contact slurm controller (connect failure)" >&2
  exit 1
fi
case "$4" in
  4242) echo "JobId=4242 JobName=train UserId=alice(1000) GroupId=alice(1000) Account=physics QOS=normal JobState=RUNNING" ;;
  5151) echo "slurm_load_jobs error: Invalid job id specified" >&2; exit 1 ;;
  *) echo "JobId=$4 UserId=bob(1001) Account=(null) QOS=normal" ;;
esac
"#;

#[test]
fn the_controller_names_each_jobs_account_and_teams_claim_by_it() {
    use std::os::unix::fs::PermissionsExt;

    let root = std::env::temp_dir().join(format!("gpu-sentinel-acct-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let mapping = root.join("mapping");
    std::fs::create_dir_all(&mapping).expect("mapping dir");
    std::fs::write(mapping.join("0"), "4242\n").expect("write");
    std::fs::write(mapping.join("1"), "5151\n").expect("write");
    let scontrol = root.join("scontrol");
    std::fs::write(&scontrol, SCONTROL).expect("write");
    std::fs::set_permissions(&scontrol, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let config = format!(
        "[collect]\ninterval = \"200ms\"\nkmsg = \"off\"\nkubelet_socket = \"off\"\n\
         hpc_job_mapping_dir = \"{}\"\nscontrol = \"{}\"\n[state]\ndir = \"{}\"\n\
         [[teams]]\nname = \"phys\"\nslurm_accounts = [\"phys*\"]\n",
        mapping.display(),
        scontrol.display(),
        root.join("state").display()
    );
    let agent = Agent::on_fake_nvml(
        "slurm-accounts",
        "[simulation]\ngpus = 4\nfaults = []\n",
        &config,
        &[],
    );
    let info_of = |text: &str, job: &str| {
        samples(text, "gpu_allocation_info")
            .into_iter()
            .find(|(l, _)| l.contains(&format!("hpc_job=\"{job}\"")))
            .map(|(l, _)| l.to_string())
            .unwrap_or_default()
    };
    agent.wait_until(Duration::from_secs(20), |a| {
        info_of(&a.get("/metrics").text(), "4242").contains("team=\"phys\"")
    });
    let text = agent.metrics();
    // The job the controller no longer knows is nobody's team, and no failure.
    assert!(
        info_of(&text, "5151").contains("team=\"unassigned\""),
        "{text}"
    );
    let success = |t: &str, family: &str| {
        value(
            t,
            "gpu_sentinel_collector_success",
            &format!("collector=\"{family}\""),
        )
    };
    assert_eq!(success(&text, "slurm_accounts"), Some(1.0), "{text}");
    let doc: serde_json::Value =
        serde_json::from_slice(&agent.get("/api/v1/gpus").body).expect("JSON");
    assert_eq!(doc["gpus"][0]["holders"][0]["slurm_account"], "physics");

    // Each job is asked for once, however many collections ran.
    std::thread::sleep(Duration::from_millis(600));
    let calls = std::fs::read_to_string(root.join("calls")).expect("calls");
    assert_eq!(
        calls.lines().collect::<Vec<_>>(),
        ["show job --oneliner 4242", "show job --oneliner 5151"],
        "{calls}"
    );

    // The controller goes down and a new job arrives: only this family fails, once in the
    // log; the known jobs keep their team and everything else is served.
    std::fs::write(root.join("down"), "").expect("write");
    std::fs::write(mapping.join("2"), "6161\n").expect("write");
    agent.wait_until(Duration::from_secs(20), |a| {
        success(&a.get("/metrics").text(), "slurm_accounts") == Some(0.0)
    });
    let text = agent.metrics();
    assert!(info_of(&text, "4242").contains("team=\"phys\""), "{text}");
    assert!(
        info_of(&text, "6161").contains("team=\"unassigned\""),
        "{text}"
    );
    assert_eq!(success(&text, "hpc_jobs"), Some(1.0));
    assert_eq!(samples(&text, "gpu_up").len(), 4);
    std::thread::sleep(Duration::from_millis(600));
    // Paused after the failure: not asked again at every collection.
    let calls = std::fs::read_to_string(root.join("calls")).expect("calls");
    assert_eq!(calls.lines().count(), 3, "{calls}");
    let (_, stderr) = agent.stop();
    assert_eq!(
        stderr.matches("Unable to contact slurm controller").count(),
        1,
        "{stderr}"
    );
}
