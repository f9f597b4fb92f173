//! The MIG GPU-instance profiles of the models the simulator can put in MIG mode, as
//! `nvidia-smi mig -lgip` lists them and NVML answers `nvmlDeviceGetGpuInstanceProfileInfoV`
//! (NVIDIA's MIG user guide, "Supported MIG Profiles"; memory and SM counts as the driver
//! reports them on each model, which is a little under the name's gigabytes).
//!
//! Each GPU has 7 compute slices and 8 memory slices. A profile's NVML index
//! (`NVML_GPU_INSTANCE_PROFILE_1_SLICE` = 0 …) is what the profile-info call is asked with;
//! its id (19 for every `1g`) is what a GPU instance's info answers. GPU instance ids follow
//! from the placement: the 7g instance is 0, 4 memory slices at 0 or 4 are 1 or 2, 2 slices
//! at 0, 2, 4, 6 are 3–6, and 1 slice at 0–6 is 7–13 (as `nvidia-smi mig -lgi` shows them).

/// One GPU-instance profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GiProfile {
    /// NVML's profile index (`NVML_GPU_INSTANCE_PROFILE_*`).
    pub index: u32,
    /// NVML's profile id, as a GPU instance's info answers it.
    pub id: u32,
    /// As `nvidia-smi` names it (NVML prefixes `MIG `).
    pub name: &'static str,
    pub slices: u32,
    pub(crate) memory_slices: u32,
    pub memory_mib: u64,
    pub multiprocessors: u32,
    /// Most instances of the profile on one GPU.
    pub instances: u32,
}

/// The MIG profiles of one GPU model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MigTable {
    /// The whole GPU's frame-buffer memory as NVML reports it (`nvidia-smi`'s total), MiB:
    /// a little more than the full-GPU profile's, which the driver keeps some of.
    pub total_mib: u64,
    /// Compute slices of the whole GPU.
    pub gpu_slices: u32,
    /// Memory slices of the whole GPU.
    pub(crate) memory_slices: u32,
    pub profiles: &'static [GiProfile],
}

/// The NVML profile indexes: 1, 2, 3, 4 and 7 slices, then the 1-slice variants with media
/// extensions (`+me`, REV1) and with two memory slices (REV2).
const ONE: u32 = 0;
const TWO: u32 = 1;
const THREE: u32 = 2;
const FOUR: u32 = 3;
const SEVEN: u32 = 4;
const ONE_ME: u32 = 7;
const ONE_DOUBLE: u32 = 9;

/// (index, id, name, compute slices, memory slices, MiB, SMs, instances).
type Row = (u32, u32, &'static str, u32, u32, u64, u32, u32);

const fn profile(row: Row) -> GiProfile {
    let (index, id, name, slices, memory_slices, memory_mib, multiprocessors, instances) = row;
    GiProfile {
        index,
        id,
        name,
        slices,
        memory_slices,
        memory_mib,
        multiprocessors,
        instances,
    }
}

/// H100 SXM5 80 GB (memory as the captured H100 reports its instances: 9984, 20096 and
/// 40448 MiB).
const H100_80GB: &[GiProfile] = &[
    profile((ONE, 19, "1g.10gb", 1, 1, 9_984, 16, 7)),
    profile((TWO, 14, "2g.20gb", 2, 2, 20_096, 32, 3)),
    profile((THREE, 9, "3g.40gb", 3, 4, 40_448, 60, 2)),
    profile((FOUR, 5, "4g.40gb", 4, 4, 40_448, 64, 1)),
    profile((SEVEN, 0, "7g.80gb", 7, 8, 81_152, 132, 1)),
    profile((ONE_ME, 20, "1g.10gb+me", 1, 1, 9_984, 16, 1)),
    profile((ONE_DOUBLE, 15, "1g.20gb", 1, 2, 20_096, 26, 4)),
];

/// H200 141 GB (the captured H200 reports 16384, 33280 and 71424 MiB instances).
const H200_141GB: &[GiProfile] = &[
    profile((ONE, 19, "1g.18gb", 1, 1, 16_384, 16, 7)),
    profile((TWO, 14, "2g.35gb", 2, 2, 33_280, 32, 3)),
    profile((THREE, 9, "3g.71gb", 3, 4, 71_424, 60, 2)),
    profile((FOUR, 5, "4g.71gb", 4, 4, 71_424, 64, 1)),
    profile((SEVEN, 0, "7g.141gb", 7, 8, 143_360, 132, 1)),
    profile((ONE_ME, 20, "1g.18gb+me", 1, 1, 16_384, 16, 1)),
    profile((ONE_DOUBLE, 15, "1g.35gb", 1, 2, 33_280, 26, 4)),
];

/// A100 SXM4 80 GB.
const A100_80GB: &[GiProfile] = &[
    profile((ONE, 19, "1g.10gb", 1, 1, 9_728, 14, 7)),
    profile((TWO, 14, "2g.20gb", 2, 2, 19_968, 28, 3)),
    profile((THREE, 9, "3g.40gb", 3, 4, 40_192, 42, 2)),
    profile((FOUR, 5, "4g.40gb", 4, 4, 40_192, 56, 1)),
    profile((SEVEN, 0, "7g.80gb", 7, 8, 80_896, 98, 1)),
    profile((ONE_ME, 20, "1g.10gb+me", 1, 1, 9_728, 14, 1)),
    profile((ONE_DOUBLE, 15, "1g.20gb", 1, 2, 19_968, 14, 4)),
];

/// A100 SXM4 40 GB.
const A100_40GB: &[GiProfile] = &[
    profile((ONE, 19, "1g.5gb", 1, 1, 4_864, 14, 7)),
    profile((TWO, 14, "2g.10gb", 2, 2, 9_984, 28, 3)),
    profile((THREE, 9, "3g.20gb", 3, 4, 20_096, 42, 2)),
    profile((FOUR, 5, "4g.20gb", 4, 4, 20_096, 56, 1)),
    profile((SEVEN, 0, "7g.40gb", 7, 8, 40_448, 98, 1)),
    profile((ONE_ME, 20, "1g.5gb+me", 1, 1, 4_864, 14, 1)),
    profile((ONE_DOUBLE, 15, "1g.10gb", 1, 2, 9_984, 14, 4)),
];

const fn table(total_mib: u64, profiles: &'static [GiProfile]) -> MigTable {
    MigTable {
        total_mib,
        gpu_slices: 7,
        memory_slices: 8,
        profiles,
    }
}

/// The MIG profiles of a GPU model by the name NVML gives it; `None` for a model without
/// MIG (V100, L40S, anything unknown).
pub fn table_for(model: &str) -> Option<MigTable> {
    let has = |s: &str| model.contains(s);
    // Totals: the captured H100 and H200 (as the simulator's whole GPUs of those models
    // report them) and the A100s' 80 and 40 GiB.
    if has("H200") {
        Some(table(143_771, H200_141GB))
    } else if has("H100") {
        Some(table(81_559, H100_80GB))
    } else if has("A100") && has("40GB") {
        Some(table(40_960, A100_40GB))
    } else if has("A100") {
        Some(table(81_920, A100_80GB))
    } else {
        None
    }
}

impl MigTable {
    /// The profile of `slices` compute slices and `memory_slices` memory slices, without
    /// media extensions.
    pub fn profile(&self, slices: u32, memory_slices: u32) -> Option<&'static GiProfile> {
        self.profiles
            .iter()
            .find(|p| p.slices == slices && p.memory_slices == memory_slices && p.index != ONE_ME)
    }

    /// The profile with NVML index `index`.
    pub fn by_index(&self, index: u32) -> Option<&'static GiProfile> {
        self.profiles.iter().find(|p| p.index == index)
    }

    #[cfg(test)]
    /// The profile with NVML id `id`.
    pub(crate) fn by_id(&self, id: u32) -> Option<&'static GiProfile> {
        self.profiles.iter().find(|p| p.id == id)
    }
}

/// The GPU instance id NVML gives an instance of `memory_slices` memory slices starting at
/// memory slice `start`.
pub fn gpu_instance_id(memory_slices: u32, start: u32) -> u32 {
    match memory_slices {
        8 => 0,
        4 => 1 + start / 4,
        2 => 3 + start / 2,
        _ => 7 + start,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_model_is_seven_compute_and_eight_memory_slices() {
        for model in [
            "NVIDIA H100 80GB HBM3",
            "NVIDIA H200",
            "NVIDIA A100-SXM4-80GB",
            "NVIDIA A100-SXM4-40GB",
        ] {
            let t = table_for(model).expect("a MIG model");
            let full = t.profile(7, 8).expect("the whole-GPU profile");
            assert_eq!(full.id, 0, "{model}");
            // Seven 1g instances fill the compute slices; their memory fits the GPU's.
            let one = t.profile(1, 1).expect("1g");
            assert_eq!(one.instances * one.slices, t.gpu_slices, "{model}");
            assert!(one.memory_mib * 7 <= full.memory_mib, "{model}");
            // The whole GPU holds its full-GPU instance.
            assert!(full.memory_mib < t.total_mib, "{model}");
            let mut ids: Vec<u32> = t.profiles.iter().map(|p| p.id).collect();
            ids.sort_unstable();
            ids.dedup();
            assert_eq!(ids.len(), t.profiles.len(), "{model}: ids are distinct");
        }
        assert_eq!(table_for("Tesla V100-SXM2-32GB"), None);
        // Every model the configuration accepts for MIG has its table.
        for model in crate::config::MIG_MODELS {
            assert!(table_for(model).is_some(), "{model}");
        }
        assert_eq!(table_for("NVIDIA L40S"), None);
    }

    #[test]
    fn names_are_the_captured_ones() {
        let h100 = table_for("NVIDIA H100 80GB HBM3").unwrap();
        assert_eq!(h100.profile(1, 1).unwrap().name, "1g.10gb");
        assert_eq!(h100.profile(3, 4).unwrap().memory_mib, 40_448);
        let h200 = table_for("NVIDIA H200").unwrap();
        assert_eq!(h200.profile(1, 1).unwrap().name, "1g.18gb");
        assert_eq!(h200.profile(1, 2).unwrap().name, "1g.35gb");
        assert_eq!(h200.by_id(9).unwrap().name, "3g.71gb");
        assert_eq!(h200.by_index(ONE_ME).unwrap().name, "1g.18gb+me");
    }

    #[test]
    fn instance_ids_follow_the_placement() {
        // The captured H100: 2g at 0 is GI 3, 1g at 2 and 3 are GI 9 and 10, 3g at 4 is GI 2.
        assert_eq!(gpu_instance_id(2, 0), 3);
        assert_eq!(gpu_instance_id(1, 2), 9);
        assert_eq!(gpu_instance_id(1, 3), 10);
        assert_eq!(gpu_instance_id(4, 4), 2);
        assert_eq!(gpu_instance_id(8, 0), 0);
    }
}
