//! The GPU models the simulator can be: memory, power, clocks, links and how their
//! temperatures read.
//!
//! H100, H200 and L40S figures are those `nvidia-smi --query-gpu` reports on those models
//! (memory total and reserved, power limit, idle draw, clocks, PCIe generation; idle and
//! loaded GPU and memory temperatures): on a loaded H100 or H200 the HBM reads 5–12 °C
//! *cooler* than the die, while idle it reads 4–7 °C warmer; the L40S (GDDR6) has no memory
//! temperature at all. A100 and V100 figures are their datasheets' (SXM4 80 GB at 400 W,
//! SXM2 32 GB at 300 W). The V100, being pre-Ampere, retires pages instead of remapping
//! rows, and not every V100 board reports its HBM2 temperature.

use serde::{Deserialize, Serialize};

/// A GPU model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Sku {
    H100,
    H200,
    A100,
    V100,
    L40S,
}

/// How a GPU records a bad memory location.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemoryRepair {
    /// Row remapping (Ampere and later).
    RowRemap,
    /// Page retirement (Volta and earlier).
    PageRetirement,
}

/// Everything the simulator needs to know about a GPU model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SkuSpec {
    pub sku: Sku,
    /// As `nvidia-smi` names it.
    pub name: &'static str,
    pub(crate) total_mib: u64,
    pub(crate) reserved_mib: u64,
    pub(crate) power_limit_w: f64,
    pub(crate) idle_power_w: f64,
    pub(crate) max_sm_mhz: u32,
    pub(crate) idle_sm_mhz: u32,
    pub(crate) memory_mhz: u32,
    pub(crate) max_video_mhz: u32,
    pub(crate) idle_video_mhz: u32,
    pub(crate) nvlinks: u32,
    pub(crate) pcie_gen_max: u32,
    /// The PCIe generation an idle GPU drops to to save power (Ada cards: the captured RTX
    /// 4080 SUPER reads Gen1 idle, Gen4 loaded); None: it holds its generation.
    pub(crate) idle_link_gen: Option<u32>,
    pub repair: MemoryRepair,
    /// Share of boards of this model that report a memory temperature.
    pub(crate) memory_sensor_share: f64,
    /// Memory minus GPU temperature, °C, idle and at full power: each GPU draws its own
    /// from these ranges.
    pub(crate) idle_gap: (f64, f64),
    pub(crate) loaded_gap: (f64, f64),
    /// Degrees per watt from inlet air to die.
    pub(crate) degrees_per_watt: f64,
}

impl Sku {
    pub const ALL: [Sku; 5] = [Sku::H100, Sku::H200, Sku::A100, Sku::V100, Sku::L40S];

    pub fn name(self) -> &'static str {
        match self {
            Sku::H100 => "H100",
            Sku::H200 => "H200",
            Sku::A100 => "A100",
            Sku::V100 => "V100",
            Sku::L40S => "L40S",
        }
    }

    pub fn spec(self) -> &'static SkuSpec {
        match self {
            Sku::H100 => &H100,
            Sku::H200 => &H200,
            Sku::A100 => &A100,
            Sku::V100 => &V100,
            Sku::L40S => &L40S,
        }
    }
}

/// H100 SXM5 80 GB; the built-in fleet's GPU.
pub const H100: SkuSpec = SkuSpec {
    sku: Sku::H100,
    name: "NVIDIA H100 80GB HBM3",
    total_mib: 81_559,
    reserved_mib: 479,
    power_limit_w: 700.0,
    idle_power_w: 69.0,
    max_sm_mhz: 1980,
    idle_sm_mhz: 345,
    memory_mhz: 2619,
    max_video_mhz: 1545,
    idle_video_mhz: 765,
    nvlinks: 18,
    pcie_gen_max: 5,
    idle_link_gen: None,
    repair: MemoryRepair::RowRemap,
    memory_sensor_share: 1.0,
    idle_gap: (5.0, 9.0),
    loaded_gap: (-11.0, -5.0),
    degrees_per_watt: 0.055,
};

const H200: SkuSpec = SkuSpec {
    sku: Sku::H200,
    name: "NVIDIA H200",
    total_mib: 143_771,
    reserved_mib: 614,
    power_limit_w: 700.0,
    idle_power_w: 78.0,
    max_sm_mhz: 1980,
    idle_sm_mhz: 345,
    memory_mhz: 3201,
    max_video_mhz: 1545,
    idle_video_mhz: 765,
    nvlinks: 18,
    pcie_gen_max: 5,
    idle_link_gen: None,
    repair: MemoryRepair::RowRemap,
    memory_sensor_share: 1.0,
    idle_gap: (2.0, 6.0),
    loaded_gap: (-12.0, -6.0),
    degrees_per_watt: 0.05,
};

const A100: SkuSpec = SkuSpec {
    sku: Sku::A100,
    name: "NVIDIA A100-SXM4-80GB",
    total_mib: 81_920,
    reserved_mib: 567,
    power_limit_w: 400.0,
    idle_power_w: 60.0,
    max_sm_mhz: 1410,
    idle_sm_mhz: 210,
    memory_mhz: 1593,
    max_video_mhz: 1290,
    idle_video_mhz: 795,
    nvlinks: 12,
    pcie_gen_max: 4,
    idle_link_gen: None,
    repair: MemoryRepair::RowRemap,
    memory_sensor_share: 1.0,
    idle_gap: (2.0, 6.0),
    loaded_gap: (-6.0, 0.0),
    degrees_per_watt: 0.09,
};

const V100: SkuSpec = SkuSpec {
    sku: Sku::V100,
    name: "Tesla V100-SXM2-32GB",
    total_mib: 32_768,
    reserved_mib: 0,
    power_limit_w: 300.0,
    idle_power_w: 42.0,
    max_sm_mhz: 1530,
    idle_sm_mhz: 135,
    memory_mhz: 877,
    max_video_mhz: 1372,
    idle_video_mhz: 555,
    nvlinks: 6,
    pcie_gen_max: 3,
    idle_link_gen: None,
    repair: MemoryRepair::PageRetirement,
    memory_sensor_share: 0.5,
    idle_gap: (0.0, 4.0),
    loaded_gap: (-4.0, 2.0),
    degrees_per_watt: 0.12,
};

const L40S: SkuSpec = SkuSpec {
    sku: Sku::L40S,
    name: "NVIDIA L40S",
    total_mib: 46_068,
    reserved_mib: 609,
    power_limit_w: 350.0,
    idle_power_w: 34.0,
    max_sm_mhz: 2520,
    idle_sm_mhz: 210,
    memory_mhz: 9001,
    max_video_mhz: 1965,
    idle_video_mhz: 1965,
    nvlinks: 0,
    pcie_gen_max: 4,
    idle_link_gen: Some(1),
    repair: MemoryRepair::RowRemap,
    memory_sensor_share: 0.0,
    idle_gap: (0.0, 0.0),
    loaded_gap: (0.0, 0.0),
    degrees_per_watt: 0.09,
};

impl SkuSpec {
    /// Whether a fault family can show on this model at all: NVLink faults need NVLinks,
    /// page retirement a pre-Ampere GPU, row remapping a later one.
    pub(crate) fn supports(&self, kind: super::FaultKind) -> bool {
        use super::FaultKind::*;
        match kind {
            NvLink => self.nvlinks > 0,
            PageRetirement => self.repair == MemoryRepair::PageRetirement,
            RowRemap => self.repair == MemoryRepair::RowRemap,
            _ => true,
        }
    }
}
