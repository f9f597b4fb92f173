//! What a GPU host says of its GPUs beside their readings: the NVLink fabric registration
//! of each GPU and the kernel log the XIDs come from. The health verdicts read them.

use serde::{Deserialize, Serialize};

/// A GPU's NVLink fabric registration with the fabric manager (`nvmlDeviceGetGpuFabricInfo`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fabric {
    pub state: FabricState,
    /// NVML's return code of the registration once completed: 0 is success.
    #[serde(default)]
    pub status: u32,
}

/// Where a GPU's fabric registration stands (`NVML_GPU_FABRIC_STATE_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FabricState {
    NotStarted,
    InProgress,
    Completed,
}

/// The kernel log the agent follows for XIDs, as it fares.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct KernelLog {
    pub path: String,
    pub readable: bool,
    /// Why it cannot be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}
