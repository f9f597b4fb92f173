//! What GPU time costs, split into busy and idle, and GPU-seconds per owner.
//!
//! A GPU's hourly cost is its depreciation (purchase price over the depreciation years)
//! or its rental price, plus its measured power at the electricity price. Summed as
//! counters (`gpu_cost_total{state}`, `gpu_owner_seconds_total{owner,state}`), Prometheus
//! can answer "what did idle GPUs cost last week, by team" with `increase()`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::config::CostConfig;
use crate::model::{GpuSample, ProcessSample};

const HOURS_PER_YEAR: f64 = 365.25 * 24.0;

/// Owners remembered per GPU; the least recently seen are dropped beyond this, so a host
/// that runs thousands of short pods keeps bounded state and series.
const MAX_OWNERS: usize = 256;

/// Accumulated cost and owner time of one GPU.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CostState {
    pub busy: f64,
    pub idle: f64,
    /// GPU-seconds by owner: (busy, idle, last seen unix seconds).
    pub owners: BTreeMap<String, OwnerTime>,
}

/// GPU-seconds one owner was charged.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct OwnerTime {
    pub busy_seconds: f64,
    pub idle_seconds: f64,
    /// Unix seconds when this owner last held the GPU.
    pub last_seen: i64,
}

/// Totals for the exposition and the API.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct CostView {
    /// Cost of busy time so far, in the configured currency.
    pub busy: f64,
    /// Cost of idle time so far.
    pub idle: f64,
    /// Cost per hour at the last sample's power.
    pub hourly: f64,
    /// `(owner, busy seconds, idle seconds)`, by owner name.
    pub owners: Vec<(String, f64, f64)>,
}

impl CostState {
    pub fn view(&self) -> CostView {
        CostView {
            busy: self.busy,
            idle: self.idle,
            hourly: 0.0,
            owners: self
                .owners
                .iter()
                .map(|(o, t)| (o.clone(), t.busy_seconds, t.idle_seconds))
                .collect(),
        }
    }
}

/// Cost of one GPU-hour at `power_watts`.
pub fn hourly_cost(config: &CostConfig, power_watts: Option<f64>) -> f64 {
    let capital = if config.hourly_price > 0.0 {
        config.hourly_price
    } else {
        config.purchase_price / (config.depreciation_years * HOURS_PER_YEAR)
    };
    let energy = power_watts.unwrap_or(0.0).max(0.0) / 1000.0 * config.power_price_per_kwh;
    capital + energy
}

/// Who a process's GPU time is charged to, per `[cost] owner`.
pub fn owner(process: &ProcessSample, kind: &str) -> String {
    let user = || process.user.clone();
    let namespace = || process.namespace.clone();
    let pod = || match (&process.namespace, &process.pod) {
        (Some(ns), Some(pod)) => Some(format!("{ns}/{pod}")),
        (None, Some(pod)) => Some(pod.clone()),
        _ => None,
    };
    let chosen = match kind {
        "user" => user(),
        "namespace" => namespace(),
        "pod" => pod(),
        _ => namespace().or_else(user),
    };
    chosen.unwrap_or_else(|| "unknown".to_string())
}

/// Charges `seconds` of this GPU: to busy or idle, and to the owners holding it.
pub fn update(
    state: &mut CostState,
    now: i64,
    seconds: f64,
    sample: &GpuSample,
    processes: &[&ProcessSample],
    busy: bool,
    config: &CostConfig,
) -> CostView {
    let hourly = hourly_cost(config, sample.power_watts);
    if sample.up && seconds > 0.0 {
        let cost = hourly * seconds / 3600.0;
        if busy {
            state.busy += cost;
        } else {
            state.idle += cost;
        }
        let mut owners: Vec<String> = processes.iter().map(|p| owner(p, &config.owner)).collect();
        owners.sort();
        owners.dedup();
        // Sharing GPUs split the time evenly: GPU-seconds add up to wall time.
        let share = seconds / owners.len().max(1) as f64;
        for name in owners {
            let entry = state.owners.entry(name).or_default();
            if busy {
                entry.busy_seconds += share;
            } else {
                entry.idle_seconds += share;
            }
            entry.last_seen = now;
        }
        while state.owners.len() > MAX_OWNERS {
            let oldest = state
                .owners
                .iter()
                .min_by_key(|(_, t)| t.last_seen)
                .map(|(name, _)| name.clone());
            match oldest {
                Some(name) => state.owners.remove(&name),
                None => break,
            };
        }
    }
    CostView {
        hourly,
        ..state.view()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> CostConfig {
        CostConfig {
            purchase_price: 35_064.0,
            depreciation_years: 4.0,
            power_price_per_kwh: 0.2,
            ..CostConfig::default()
        }
    }

    #[test]
    fn hourly_cost_is_depreciation_plus_measured_power() {
        // 35,064 over 4 years is 1.0 an hour; 500 W at 0.2/kWh is 0.1 an hour.
        assert!((hourly_cost(&config(), Some(500.0)) - 1.1).abs() < 1e-3);
        let rented = CostConfig {
            hourly_price: 2.5,
            ..config()
        };
        assert!((hourly_cost(&rented, Some(0.0)) - 2.5).abs() < 1e-9);
    }

    #[test]
    fn time_is_split_between_busy_and_idle_and_owners() {
        let mut state = CostState::default();
        let mut gpu = GpuSample {
            up: true,
            power_watts: Some(500.0),
            ..GpuSample::default()
        };
        let a = ProcessSample {
            user: Some("alice".into()),
            namespace: Some("vision".into()),
            ..ProcessSample::default()
        };
        let b = ProcessSample {
            user: Some("bob".into()),
            ..ProcessSample::default()
        };
        update(&mut state, 3600, 3600.0, &gpu, &[&a, &b], true, &config());
        gpu.power_watts = Some(0.0);
        let view = update(&mut state, 7200, 3600.0, &gpu, &[&a], false, &config());
        assert!((view.busy - 1.1).abs() < 1e-3);
        assert!((view.idle - 1.0).abs() < 1e-3);
        assert_eq!(
            view.owners,
            vec![
                ("bob".to_string(), 1800.0, 0.0),
                ("vision".to_string(), 1800.0, 3600.0)
            ]
        );
    }

    #[test]
    fn owner_kinds() {
        let p = ProcessSample {
            user: Some("alice".into()),
            namespace: Some("ml".into()),
            pod: Some("train-0".into()),
            ..ProcessSample::default()
        };
        assert_eq!(owner(&p, "auto"), "ml");
        assert_eq!(owner(&p, "user"), "alice");
        assert_eq!(owner(&p, "pod"), "ml/train-0");
        assert_eq!(owner(&ProcessSample::default(), "auto"), "unknown");
    }
}
