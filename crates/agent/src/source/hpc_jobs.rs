//! Slurm jobs holding GPUs, from the files sites already write for other tools, so a GPU
//! allocated to a job that has not started a CUDA process (or whose processes run in a
//! PID namespace the agent cannot see) still has a holder:
//!
//! - `[collect] hpc_job_mapping_dir`, dcgm-exporter's `--hpc-job-mapping-dir` format: one
//!   file per GPU, named by its NVML index (`0`) or `index.instance` for a MIG instance
//!   (`0.1`), each line a job id; a Slurm prolog writes it and the epilog empties it.
//! - `[collect] gpustat_dir`, the `/run/gpustat/<index|uuid>` files of Slurm GPU-stat
//!   prologs: one line `"<jobid> <uid>"`; the uid names the user (from the passwd file).
//!
//! Files are read once per collection. A configured directory that is missing or
//! unreadable fails the `hpc_jobs` collector (the collector loop says so once, and again
//! when it comes back); a file of another shape is skipped.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::collector::{Collected, Collector};
use crate::model::{Allocation, GpuSample, Snapshot};
use crate::procinfo::ProcFs;

/// The collector family's name in `gpu_sentinel_collector_success`.
pub(crate) const FAMILY: &str = "hpc_jobs";

/// Largest mapping file read; a job list is a few lines.
const MAX_FILE_BYTES: u64 = 64 * 1024;
/// Most job ids taken from one file.
const MAX_JOBS_PER_FILE: usize = 64;

/// Reads the configured job files each collection.
pub(crate) struct HpcJobFiles {
    mapping_dir: Option<PathBuf>,
    gpustat_dir: Option<PathBuf>,
    /// Names the uids of gpustat files (numbers without it).
    users: Option<Arc<ProcFs>>,
}

impl HpcJobFiles {
    /// `None` when neither directory is configured.
    pub fn new(
        mapping_dir: Option<&Path>,
        gpustat_dir: Option<&Path>,
        users: Option<Arc<ProcFs>>,
    ) -> Option<HpcJobFiles> {
        (mapping_dir.is_some() || gpustat_dir.is_some()).then(|| HpcJobFiles {
            mapping_dir: mapping_dir.map(Path::to_owned),
            gpustat_dir: gpustat_dir.map(Path::to_owned),
            users,
        })
    }
}

impl Collector for HpcJobFiles {
    fn name(&self) -> &'static str {
        FAMILY
    }

    /// Adds a job allocation per GPU and job found.
    fn collect(&mut self, snapshot: &mut Snapshot) -> anyhow::Result<Collected> {
        let mut found = BTreeSet::new();
        let mut problems = Vec::new();
        if let Some(dir) = &self.mapping_dir {
            match files(dir) {
                Ok(files) => {
                    for (name, text) in files {
                        let Some((gpu, instance)) = mapping_file_gpu(&name, &snapshot.gpus) else {
                            continue;
                        };
                        // `3.1`: GPU instance 1 of GPU 3, where NVML lists it.
                        let gpu_instance = name
                            .split_once('.')
                            .and_then(|(_, gi)| gi.parse::<u32>().ok())
                            .filter(|gi| gpu.mig_instances.iter().any(|m| m.gpu_instance == *gi));
                        for job in mapping_jobs(&text) {
                            found.insert(Allocation {
                                gpu_instance,
                                ..allocation(gpu, instance.then(|| name.clone()), job, None)
                            });
                        }
                    }
                }
                Err(e) => problems.push(format!("{}: {e}", dir.display())),
            }
        }
        if let Some(dir) = &self.gpustat_dir {
            match files(dir) {
                Ok(files) => {
                    for (name, text) in files {
                        let gpu = snapshot.gpus.iter().find(|g| {
                            g.uuid.eq_ignore_ascii_case(&name) || g.index.to_string() == name
                        });
                        let (Some(gpu), Some((job, uid))) = (gpu, gpustat_line(&text)) else {
                            continue;
                        };
                        let user = self
                            .users
                            .as_ref()
                            .map_or_else(|| uid.to_string(), |u| u.user_name(uid));
                        found.insert(allocation(gpu, None, job, Some(user)));
                    }
                }
                Err(e) => problems.push(format!("{}: {e}", dir.display())),
            }
        }
        snapshot.allocations.extend(found);
        if !problems.is_empty() {
            anyhow::bail!(
                "Slurm job files: {}; jobs are not attributed from them until they read",
                problems.join("; ")
            );
        }
        snapshot.scheduled_by.push("slurm".into());
        Ok(Collected::Done)
    }
}

fn allocation(
    gpu: &GpuSample,
    device: Option<String>,
    job: String,
    user: Option<String>,
) -> Allocation {
    Allocation {
        gpu: gpu.index,
        uuid: gpu.uuid.clone(),
        device,
        hpc_job: Some(job),
        user,
        ..Allocation::default()
    }
}

/// The plain files of `dir` with their text (files too large, unreadable or not UTF-8 are
/// skipped: one bad file must not hide the others).
fn files(dir: &Path) -> std::io::Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let Ok(entry) = entry else { continue };
        let Ok(meta) = entry.metadata() else { continue };
        if !meta.is_file() || meta.len() > MAX_FILE_BYTES {
            continue;
        }
        let Some(name) = entry.file_name().to_str().map(str::to_string) else {
            continue;
        };
        if let Ok(text) = std::fs::read_to_string(entry.path()) {
            out.push((name, text));
        }
    }
    out.sort();
    Ok(out)
}

/// The GPU a mapping file names (`3`, or `3.1` for instance 1 of GPU 3, then `true`).
pub(crate) fn mapping_file_gpu<'g>(
    name: &str,
    gpus: &'g [GpuSample],
) -> Option<(&'g GpuSample, bool)> {
    let (index, instance) = match name.split_once('.') {
        Some((index, instance)) => (index, Some(instance)),
        None => (name, None),
    };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(index) || instance.is_some_and(|i| !digits(i)) {
        return None;
    }
    let index: u32 = index.parse().ok()?;
    gpus.iter()
        .find(|g| g.index == index)
        .map(|g| (g, instance.is_some()))
}

/// Job ids of a mapping file: one per line, blank lines skipped, anything that is not a
/// job id (Slurm writes digits, `_` for array tasks, `+` for het jobs) ignored.
pub(crate) fn mapping_jobs(text: &str) -> Vec<String> {
    text.lines()
        .map(str::trim)
        .filter(|l| job_id(l))
        .take(MAX_JOBS_PER_FILE)
        .map(str::to_string)
        .collect()
}

/// `"<jobid> <uid>"`, the first line of a gpustat file.
pub(crate) fn gpustat_line(text: &str) -> Option<(String, u32)> {
    let mut fields = text.lines().next()?.split_whitespace();
    let job = fields.next().filter(|j| job_id(j))?;
    let uid = fields.next()?.parse().ok()?;
    Some((job.to_string(), uid))
}

fn job_id(text: &str) -> bool {
    (1..=64).contains(&text.len())
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'+' | b'.' | b'-'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn gpus() -> Vec<GpuSample> {
        (0..2)
            .map(|index| GpuSample {
                index,
                uuid: format!("GPU-{index}"),
                ..GpuSample::default()
            })
            .collect()
    }

    #[test]
    fn mapping_files_name_gpus_and_instances() {
        let gpus = gpus();
        assert_eq!(
            mapping_file_gpu("1", &gpus).map(|(g, i)| (g.index, i)),
            Some((1, false))
        );
        assert_eq!(
            mapping_file_gpu("0.3", &gpus).map(|(g, i)| (g.index, i)),
            Some((0, true))
        );
        for name in ["2", "", ".1", "1.", "a", "1.x", "-1", "GPU-0"] {
            assert!(mapping_file_gpu(name, &gpus).is_none(), "{name:?}");
        }
    }

    #[test]
    fn job_lines_and_gpustat_lines() {
        assert_eq!(
            mapping_jobs("4242\n\n 4243 \nnot a job\n77_3\n"),
            ["4242", "4243", "77_3"]
        );
        assert_eq!(gpustat_line("4242 1000\n"), Some(("4242".into(), 1000)));
        assert_eq!(gpustat_line("4242"), None);
        assert_eq!(gpustat_line("4242 alice"), None);
        assert_eq!(gpustat_line(""), None);
    }

    proptest! {
        /// Any file content parses or not without panicking, and what parses is a job id.
        #[test]
        fn any_file_text_parses_without_panic(text in "(?s).{0,200}", name in ".{0,12}") {
            for job in mapping_jobs(&text) {
                prop_assert!(job_id(&job));
            }
            if let Some((job, _)) = gpustat_line(&text) {
                prop_assert!(job_id(&job));
            }
            let _ = mapping_file_gpu(&name, &gpus());
        }
    }
}
