//! MIG (Multi-Instance GPU) instances: the devices a GPU in MIG mode is cut into.
//!
//! A GPU in MIG mode holds GPU instances (a slice of its memory and compute, with a
//! profile such as `1g.10gb` or `3g.40gb`), each holding one or more compute instances.
//! NVML hands out every compute instance as a device of its own, with a `MIG-…` UUID, and
//! schedulers allocate those devices (`nvidia.com/mig-1g.10gb`). A [`MigInstance`] is one
//! such device: its ids, profile, placement, its GPU instance's memory and activity, and
//! how many processes run on it. Its share of the GPU ([`MigInstance::fraction`]) is its
//! compute slices over the GPU's, which is what its idle time and cost are charged at.
//!
//! Memory and GPM activity belong to the GPU instance: the compute instances of one GPU
//! instance report the same values (as `nvidia-smi` shows them, "Shared Memory-Usage").

use serde::{Deserialize, Serialize};

use super::sanitize::{Checked, RejectedValues};
use super::{Allocation, Gpm, Memory, ProcessSample};

/// One MIG device: a compute instance of a GPU instance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct MigInstance {
    /// The GPU instance's id, as `nvidia-smi` shows it under "GI ID".
    pub gpu_instance: u32,
    /// The compute instance's id within its GPU instance ("CI ID").
    pub compute_instance: u32,
    /// The MIG device's UUID (`MIG-…`).
    pub uuid: String,
    /// NVML's index of the MIG device on its GPU ("MIG Dev"; the device plugin's index
    /// strategy names it `<gpu>:<index>`).
    #[serde(default)]
    pub device_index: u32,
    /// The GPU instance's profile as `nvidia-smi` names it: `1g.10gb`, `3g.40gb`, `1g.18gb`.
    pub profile: String,
    /// Compute slices of this compute instance.
    pub slices: u32,
    /// Compute slices of its GPU instance (more than `slices` when the GPU instance is
    /// split into several compute instances).
    pub gpu_instance_slices: u32,
    /// Compute slices of the whole GPU (7 on an A100, H100 or H200).
    pub gpu_slices: u32,
    /// Where the GPU instance sits among the GPU's memory slices (`nvidia-smi mig -lgi`'s
    /// Start:Size).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<MigPlacement>,
    /// Streaming multiprocessors of this compute instance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub multiprocessors: Option<u32>,
    /// The GPU instance's frame-buffer memory (shared by its compute instances).
    #[serde(default)]
    pub memory: Memory,
    /// GPM ratios of the GPU instance between two collections (Hopper and newer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpm: Option<Gpm>,
    /// Compute processes running on this MIG device.
    #[serde(default)]
    pub processes: u32,
}

/// A GPU instance's place on its GPU, in memory slices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct MigPlacement {
    pub start: u32,
    pub size: u32,
}

impl MigInstance {
    /// Its share of the GPU's compute, 0–1: its compute slices over the GPU's (a `1g` of an
    /// H100 is 1/7). 0 when the slices are unknown.
    pub fn fraction(&self) -> f64 {
        if self.gpu_slices == 0 {
            return 0.0;
        }
        (f64::from(self.slices) / f64::from(self.gpu_slices)).clamp(0.0, 1.0)
    }

    /// The compute instance's profile as `nvidia-smi -L` names it: the GPU instance's when
    /// it takes all of it, else `<c>c.` before it (`1c.3g.40gb`).
    pub fn compute_profile(&self) -> String {
        if self.slices == 0 || self.slices >= self.gpu_instance_slices {
            self.profile.clone()
        } else {
            format!("{}c.{}", self.slices, self.profile)
        }
    }

    /// `GI <gi>/CI <ci> <profile>`: how alerts and the board name the instance.
    pub fn label(&self) -> String {
        format!(
            "MIG {} (GI {}, CI {})",
            self.compute_profile(),
            self.gpu_instance,
            self.compute_instance
        )
    }

    /// Whether a scheduler's allocation is of this instance: by GPU and compute instance,
    /// or by GPU instance alone where the allocation names no compute instance.
    pub fn holds(&self, allocation: &Allocation) -> bool {
        match (allocation.gpu_instance, allocation.compute_instance) {
            (Some(gi), Some(ci)) => gi == self.gpu_instance && ci == self.compute_instance,
            (Some(gi), None) => gi == self.gpu_instance,
            _ => false,
        }
    }

    /// Whether a process (already known to be on this instance's GPU) runs on it.
    pub fn runs(&self, process: &ProcessSample) -> bool {
        process.gpu_instance == Some(self.gpu_instance)
            && process
                .compute_instance
                .is_none_or(|ci| ci == self.compute_instance)
    }

    /// Clears what no MIG device can report, counting it as its GPU's fields are counted.
    pub(super) fn sanitize_into(&mut self, r: &mut RejectedValues) {
        let m = &mut self.memory;
        r.whole(
            Checked::MemoryTotal,
            &mut m.total_bytes,
            super::sanitize::LARGEST_MEMORY_BYTES,
        );
        let most = m
            .total_bytes
            .unwrap_or(super::sanitize::LARGEST_MEMORY_BYTES);
        r.whole(Checked::MemoryUsed, &mut m.used_bytes, most);
        r.whole(Checked::MemoryFree, &mut m.free_bytes, most);
        r.whole(Checked::MemoryReserved, &mut m.reserved_bytes, most);
        if let Some(gpm) = &mut self.gpm {
            for ratio in [
                &mut gpm.sm_active,
                &mut gpm.sm_occupancy,
                &mut gpm.tensor_active,
                &mut gpm.dram_active,
                &mut gpm.graphics_active,
            ] {
                r.ratio(Checked::Gpm, ratio);
            }
        }
        // More slices than the GPU has: the slice counts cannot be believed, and with them
        // the instance's share of the GPU.
        if self.slices > self.gpu_slices || self.gpu_instance_slices > self.gpu_slices {
            self.slices = 0;
            self.gpu_instance_slices = 0;
            r.reject(Checked::MigSlices);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn instance(gi: u32, ci: u32, slices: u32, of_gi: u32) -> MigInstance {
        MigInstance {
            gpu_instance: gi,
            compute_instance: ci,
            uuid: format!("MIG-{gi}-{ci}"),
            profile: "3g.40gb".into(),
            slices,
            gpu_instance_slices: of_gi,
            gpu_slices: 7,
            ..MigInstance::default()
        }
    }

    #[test]
    fn a_compute_instance_is_named_and_charged_by_its_own_slices() {
        let whole = instance(2, 0, 3, 3);
        assert_eq!(whole.compute_profile(), "3g.40gb");
        assert!((whole.fraction() - 3.0 / 7.0).abs() < 1e-12);
        let part = instance(2, 1, 2, 3);
        assert_eq!(part.compute_profile(), "2c.3g.40gb");
        assert!((part.fraction() - 2.0 / 7.0).abs() < 1e-12);
        assert_eq!(part.label(), "MIG 2c.3g.40gb (GI 2, CI 1)");
        assert_eq!(MigInstance::default().fraction(), 0.0);
    }

    #[test]
    fn allocations_and_processes_find_their_instance() {
        let i = instance(9, 0, 1, 1);
        let by = |gi, ci| Allocation {
            gpu_instance: gi,
            compute_instance: ci,
            ..Allocation::default()
        };
        assert!(i.holds(&by(Some(9), Some(0))));
        assert!(i.holds(&by(Some(9), None)));
        assert!(!i.holds(&by(Some(9), Some(1))));
        assert!(!i.holds(&by(None, None)));
        let on = |gi, ci| ProcessSample {
            gpu_instance: gi,
            compute_instance: ci,
            ..ProcessSample::default()
        };
        assert!(i.runs(&on(Some(9), Some(0))) && i.runs(&on(Some(9), None)));
        assert!(!i.runs(&on(Some(10), Some(0))) && !i.runs(&on(None, None)));
    }

    #[test]
    fn recordings_with_and_without_instances_load() {
        use crate::model::GpuSample;
        // A sample recorded before MIG instances were read.
        let old: GpuSample =
            serde_json::from_str(r#"{"index":0,"uuid":"GPU-1","name":"H100","up":true}"#)
                .expect("an old sample loads");
        assert!(old.mig_instances.is_empty());
        let process: ProcessSample =
            serde_json::from_str(r#"{"gpu":0,"uuid":"GPU-1","pid":7}"#).expect("an old process");
        assert_eq!(process.gpu_instance, None);
        let sample = GpuSample {
            mig_instances: vec![instance(2, 1, 2, 3)],
            ..old
        };
        let json = serde_json::to_string(&sample).expect("JSON");
        assert!(
            json.contains("\"gpu_instance\":2") && !json.contains("null"),
            "{json}"
        );
        let back: GpuSample = serde_json::from_str(&json).expect("it loads back");
        assert_eq!(back, sample);
        // GPM recorded before the graphics activity was read loads without it.
        let gpm: Gpm = serde_json::from_str(r#"{"sm_active":0.5}"#).expect("old GPM");
        assert_eq!((gpm.sm_active, gpm.graphics_active), (Some(0.5), None));
    }

    #[test]
    fn impossible_slices_and_memory_are_cleared() {
        let mut i = instance(1, 0, 9, 9);
        i.memory.total_bytes = Some(10);
        i.memory.used_bytes = Some(11);
        let mut r = RejectedValues::default();
        i.sanitize_into(&mut r);
        assert_eq!((i.slices, i.fraction()), (0, 0.0));
        assert_eq!(i.memory.used_bytes, None);
        assert_eq!(r.count(Checked::MigSlices), 1);
        assert_eq!(r.count(Checked::MemoryUsed), 1);
    }
}
