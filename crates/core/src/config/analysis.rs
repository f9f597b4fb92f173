//! `[risk]`, `[idle]`, `[cost]`, `[capacity]` and `[health]`: the analysis engine's settings.

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::duration;

/// Score at and above which a GPU is at risk, unless `[risk] threshold` says otherwise;
/// also what `train` measures at and what `review` assumes when the exporter does not say.
///
/// The score is a warning and ranking score, not a calibrated probability (the fit balances
/// failures against health, crates/lab/src/train/fit.rs). The shipped model's weights
/// (models/default-risk.toml) put a real warning sign, corrected ECC rising from 0 to 11 a
/// day, above it; on the simulated fleets of docs/detection.md every failure with
/// precursors reached it at least 12 hours ahead and no healthy GPU reached it.
pub const DEFAULT_RISK_THRESHOLD: f64 = 0.7;

/// `[risk]`: the failure-risk model.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RiskConfig {
    /// Risk model file (as written by `gpu-sentinel train`); unset: the shipped model
    /// (models/default-risk.toml, built into the binary).
    pub model: Option<PathBuf>,
    /// Score at and above which a GPU is at risk (the `GpuFailureRiskHigh` alert).
    pub threshold: f64,
}

impl Default for RiskConfig {
    fn default() -> Self {
        RiskConfig {
            model: None,
            threshold: DEFAULT_RISK_THRESHOLD,
        }
    }
}

/// `[idle]`: idle allocations, ghost and long-running processes.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct IdleConfig {
    /// GPU utilization (0–1) under which a sample counts as idle.
    pub threshold: f64,
    /// How long every sample must stay idle before a GPU whose memory is held counts as
    /// allocated-but-idle, and before a dead process still holding memory counts as a ghost.
    #[serde(deserialize_with = "duration")]
    pub window: Duration,
    /// Memory in use (MiB) that stands for an allocation when no process list exists
    /// (nvidia-smi logs in replay): above this, the GPU is held by someone.
    pub memory_floor_mib: u64,
    /// Runtime past which a process counts as long-running.
    #[serde(deserialize_with = "duration")]
    pub long_running: Duration,
}

impl Default for IdleConfig {
    fn default() -> Self {
        IdleConfig {
            threshold: 0.05,
            window: Duration::from_secs(30 * 60),
            memory_floor_mib: 1024,
            long_running: Duration::from_secs(24 * 3600),
        }
    }
}

/// `[cost]`: what GPU time costs, to put a price on idle time.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CostConfig {
    /// Currency name shown in metric help and reports.
    pub currency: String,
    /// Purchase price of one GPU, including its share of the server, depreciated linearly.
    pub purchase_price: f64,
    /// Years over which `purchase_price` is depreciated.
    pub depreciation_years: f64,
    /// Electricity price per kWh, applied to the GPU's measured power.
    pub power_price_per_kwh: f64,
    /// Hourly price of a rented GPU. When above 0 it replaces depreciation.
    pub hourly_price: f64,
    /// Hourly price of a comparable cloud GPU, for the fleet report's own-versus-rent
    /// comparison; 0 leaves the comparison out.
    pub cloud_hourly_price: f64,
    /// Who GPU time is charged to: "auto" (Kubernetes namespace where known, else user),
    /// "user", "namespace" or "pod".
    pub owner: String,
}

impl Default for CostConfig {
    fn default() -> Self {
        CostConfig {
            currency: "USD".into(),
            purchase_price: 0.0,
            depreciation_years: 4.0,
            power_price_per_kwh: 0.0,
            hourly_price: 0.0,
            cloud_hourly_price: 0.0,
            owner: "auto".into(),
        }
    }
}

/// Owner kinds `[cost] owner` accepts.
pub(crate) const OWNER_KINDS: [&str; 4] = ["auto", "user", "namespace", "pod"];

/// `[capacity]`: scaling and placement advice.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CapacityConfig {
    /// Window over which utilization is averaged before advising.
    #[serde(deserialize_with = "duration")]
    pub window: Duration,
    /// Scale out when more than `busy_share` of GPUs average above `busy_utilization`.
    pub busy_utilization: f64,
    pub busy_share: f64,
    /// Scale in when more than `idle_share` of GPUs average below `idle_utilization`.
    pub idle_utilization: f64,
    pub idle_share: f64,
    /// Headroom on the demand when recommending a GPU count (1.3 = 30% spare).
    pub buffer: f64,
    /// How long a new piece of advice must hold before it replaces the current one, so
    /// advice does not flap with the load.
    #[serde(deserialize_with = "duration")]
    pub hold: Duration,
}

impl Default for CapacityConfig {
    fn default() -> Self {
        CapacityConfig {
            window: Duration::from_secs(3600),
            busy_utilization: 0.8,
            busy_share: 0.8,
            idle_utilization: 0.2,
            idle_share: 0.5,
            buffer: 1.3,
            hold: Duration::from_secs(30 * 60),
        }
    }
}

/// Semantic checks of the analysis sections, as `(dotted key, message)`.
pub(super) fn problems(
    risk: &RiskConfig,
    idle: &IdleConfig,
    cost: &CostConfig,
    capacity: &CapacityConfig,
) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    let mut ratio = |key: &'static str, v: f64| {
        if !(0.0..=1.0).contains(&v) {
            out.push((key, format!("{v} is outside 0..1")));
        }
    };
    ratio("risk.threshold", risk.threshold);
    ratio("idle.threshold", idle.threshold);
    ratio("capacity.busy_utilization", capacity.busy_utilization);
    ratio("capacity.busy_share", capacity.busy_share);
    ratio("capacity.idle_utilization", capacity.idle_utilization);
    ratio("capacity.idle_share", capacity.idle_share);
    for (key, v) in [
        ("cost.purchase_price", cost.purchase_price),
        ("cost.power_price_per_kwh", cost.power_price_per_kwh),
        ("cost.hourly_price", cost.hourly_price),
        ("cost.cloud_hourly_price", cost.cloud_hourly_price),
    ] {
        if !(v.is_finite() && v >= 0.0) {
            out.push((key, format!("{v} must be 0 or more")));
        }
    }
    if !(cost.depreciation_years.is_finite() && cost.depreciation_years > 0.0) {
        out.push((
            "cost.depreciation_years",
            format!("{} must be more than 0", cost.depreciation_years),
        ));
    }
    if !OWNER_KINDS.contains(&cost.owner.as_str()) {
        out.push((
            "cost.owner",
            format!("{:?} is not one of {}", cost.owner, OWNER_KINDS.join(", ")),
        ));
    }
    if idle.memory_floor_mib > 1 << 20 {
        out.push((
            "idle.memory_floor_mib",
            format!(
                "{} MiB is more than any GPU holds (1 TiB)",
                idle.memory_floor_mib
            ),
        ));
    }
    if !(capacity.buffer.is_finite() && capacity.buffer >= 1.0) {
        out.push((
            "capacity.buffer",
            format!("{} must be 1 or more", capacity.buffer),
        ));
    }
    if capacity.idle_utilization >= capacity.busy_utilization {
        out.push((
            "capacity.idle_utilization",
            "must be below capacity.busy_utilization".to_string(),
        ));
    }
    for (key, d) in [
        ("idle.window", idle.window),
        ("capacity.window", capacity.window),
    ] {
        if d < Duration::from_secs(1) {
            out.push((
                key,
                format!("{} is shorter than 1s", humantime::format_duration(d)),
            ));
        }
    }
    out
}

/// `[health]`: the verdicts schedulers act on (`/api/v1/health`, `gpu-sentinel health`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HealthConfig {
    /// How long a component's state holds after its evidence was last seen: it recovers
    /// only once the evidence has been gone this long, so a state never flaps between
    /// collections. A worse state is taken at once.
    #[serde(deserialize_with = "duration")]
    pub hold: Duration,
}

impl Default for HealthConfig {
    fn default() -> Self {
        HealthConfig {
            hold: Duration::from_secs(5 * 60),
        }
    }
}
