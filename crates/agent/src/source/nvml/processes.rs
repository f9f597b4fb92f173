//! Compute processes on a GPU and their share of its SM and memory-copy time.
//!
//! `nvmlDeviceGetProcessUtilization` returns the samples taken after a given timestamp; the
//! newest timestamp seen is kept per GPU so each tick covers exactly the time since the last
//! one. NVML only reports processes that were busy at some point in that window, so a listed
//! process without a sample was idle: 0, not unknown. Owner fields and liveness are left to
//! the `/proc` resolver that runs after collection.

use std::collections::HashMap;

use nvml_wrapper::Device;
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError;

use super::calls::Calls;
use crate::model::ProcessSample;

const UTILIZATION: &str = "nvmlDeviceGetProcessUtilization";

/// Reads the compute processes of GPU `gpu` (`uuid`), advancing `last_seen` (NVML's CPU
/// timestamp in microseconds) past the utilization samples consumed.
pub fn read(
    dev: &Device<'_>,
    c: &mut Calls<'_>,
    gpu: u32,
    uuid: &str,
    last_seen: &mut u64,
) -> Vec<ProcessSample> {
    let Some(running) = c.call("nvmlDeviceGetComputeRunningProcesses_v3", "", || {
        dev.running_compute_processes()
    }) else {
        return Vec::new();
    };
    if running.is_empty() {
        return Vec::new();
    }
    let usage = if c.skip(UTILIZATION, "") {
        None
    } else {
        match dev.process_utilization_stats(*last_seen) {
            // No samples newer than `last_seen`: every process was idle since the last tick.
            Err(NvmlError::NotFound) => Some(Vec::new()),
            result => c.settle(UTILIZATION, "", result),
        }
    };
    // Mean SM and memory utilization (percent) per PID over the samples since `last_seen`.
    let by_pid: Option<HashMap<u32, (f64, f64)>> = usage.map(|samples| {
        let mut sums: HashMap<u32, (f64, f64, u32)> = HashMap::new();
        for sample in &samples {
            *last_seen = (*last_seen).max(sample.timestamp);
            let entry = sums.entry(sample.pid).or_insert((0.0, 0.0, 0));
            entry.0 += f64::from(sample.sm_util);
            entry.1 += f64::from(sample.mem_util);
            entry.2 += 1;
        }
        sums.into_iter()
            .map(|(pid, (sm, mem, n))| (pid, (sm / f64::from(n), mem / f64::from(n))))
            .collect()
    });
    running
        .into_iter()
        .map(|p| {
            let (sm, mem) = match &by_pid {
                Some(map) => {
                    let (sm, mem) = map.get(&p.pid).copied().unwrap_or((0.0, 0.0));
                    (Some(sm / 100.0), Some(mem / 100.0))
                }
                None => (None, None),
            };
            ProcessSample {
                gpu,
                uuid: uuid.to_string(),
                pid: p.pid,
                used_memory_bytes: match p.used_gpu_memory {
                    UsedGpuMemory::Used(bytes) => Some(bytes),
                    UsedGpuMemory::Unavailable => None,
                },
                sm_utilization: sm,
                memory_utilization: mem,
                ..ProcessSample::default()
            }
        })
        .collect()
}
