//! What GPU time costs, split into busy and idle, and GPU-seconds per owner.
//!
//! A GPU's hourly cost is its depreciation (purchase price over the depreciation years)
//! or its rental price, plus its measured power at the electricity price. Summed as
//! counters (`gpu_cost_total{state}`, `gpu_owner_seconds_total{owner,state}`), Prometheus
//! can answer "what did idle GPUs cost last week, by team" with `increase()`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::config::CostConfig;
use crate::config::UNASSIGNED;
use crate::model::{Allocation, GpuSample, ProcessSample};

const HOURS_PER_YEAR: f64 = 365.25 * 24.0;

/// Owners remembered per GPU; the least recently seen are dropped beyond this, so a host
/// that runs thousands of short pods keeps bounded state and series.
const MAX_OWNERS: usize = 256;

/// Owners of a GPU with series (`gpu_owner_seconds_total`): those that held it within this
/// many seconds. Every owner since start would be two series each, for good, on a host of
/// short jobs; an owner's counter that stops keeps its samples in the store, and resumes
/// from its total if the owner comes back.
pub(crate) const OWNER_SERIES_SECONDS: i64 = 3600;

/// Most owners of a GPU with series at once, the most recently seen first.
pub(crate) const MAX_EXPOSED_OWNERS: usize = 4;

/// Accumulated cost and owner time of one GPU.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CostState {
    pub busy: f64,
    pub idle: f64,
    /// GPU-seconds by owner: (busy, idle, last seen unix seconds).
    pub owners: BTreeMap<String, OwnerTime>,
}

/// GPU-seconds one owner was charged.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct OwnerTime {
    pub busy_seconds: f64,
    pub idle_seconds: f64,
    /// Unix seconds when this owner last held the GPU.
    pub(crate) last_seen: i64,
    /// The owner's team when last seen (`[[teams]]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub team: Option<String>,
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
    /// `(owner, team, busy seconds, idle seconds)`, by owner name.
    pub owners: Vec<(String, String, f64, f64)>,
    /// Per entry of `owners`: whether it has series in the exposition (held the GPU in
    /// the last [`OWNER_SERIES_SECONDS`], among the [`MAX_EXPOSED_OWNERS`] latest).
    #[serde(skip)]
    pub exposed: Vec<bool>,
}

impl CostState {
    /// The totals at `now`.
    pub fn view(&self, now: i64) -> CostView {
        if self.owners.is_empty() {
            return CostView {
                busy: self.busy,
                idle: self.idle,
                ..CostView::default()
            };
        }
        let mut recent: Vec<i64> = self
            .owners
            .values()
            .map(|t| t.last_seen)
            .filter(|&seen| now - seen <= OWNER_SERIES_SECONDS)
            .collect();
        recent.sort_unstable_by(|a, b| b.cmp(a));
        // The latest seen of the owners kept; ties at the cut all stay (a GPU shared by
        // several pods charges them at the same instant).
        let cut = recent
            .get(MAX_EXPOSED_OWNERS.saturating_sub(1))
            .copied()
            .unwrap_or(i64::MIN);
        CostView {
            busy: self.busy,
            idle: self.idle,
            hourly: 0.0,
            owners: self
                .owners
                .iter()
                .map(|(o, t)| {
                    let team = t.team.clone().unwrap_or_else(|| UNASSIGNED.to_string());
                    (o.clone(), team, t.busy_seconds, t.idle_seconds)
                })
                .collect(),
            exposed: self
                .owners
                .values()
                .map(|t| now - t.last_seen <= OWNER_SERIES_SECONDS && t.last_seen >= cut)
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
    owner_of(&process.namespace, &process.pod, &process.user, kind)
}

/// Who a scheduler's allocation is charged to, per `[cost] owner`; a Slurm job without a
/// user is charged to the job.
pub(crate) fn allocation_owner(allocation: &Allocation, kind: &str) -> String {
    let job = allocation.hpc_job.as_ref().map(|j| format!("job {j}"));
    let user = allocation.user.clone().or(job);
    owner_of(&allocation.namespace, &allocation.pod, &user, kind)
}

fn owner_of(
    namespace: &Option<String>,
    pod: &Option<String>,
    user: &Option<String>,
    kind: &str,
) -> String {
    let pod = || match (namespace, pod) {
        (Some(ns), Some(pod)) => Some(format!("{ns}/{pod}")),
        (None, Some(pod)) => Some(pod.clone()),
        _ => None,
    };
    let chosen = match kind {
        "user" => user.clone(),
        "namespace" => namespace.clone(),
        "pod" => pod(),
        _ => namespace.clone().or_else(|| user.clone()),
    };
    chosen.unwrap_or_else(|| "unknown".to_string())
}

/// Who holds a GPU at one step: its processes and the scheduler's allocations.
#[derive(Debug, Clone, Copy)]
pub struct Holders<'a> {
    pub processes: &'a [&'a ProcessSample],
    pub allocations: &'a [&'a Allocation],
}

/// Who holds a GPU (or a MIG instance) by `[cost] owner`, with their teams.
pub fn owners_of(holders: Holders<'_>, kind: &str) -> BTreeMap<String, Option<String>> {
    let mut owners: BTreeMap<String, Option<String>> = holders
        .processes
        .iter()
        .map(|p| (owner(p, kind), p.team.clone()))
        .collect();
    for a in holders.allocations {
        owners
            .entry(allocation_owner(a, kind))
            .or_insert_with(|| a.team.clone());
    }
    owners
}

/// Charges `seconds` GPU-seconds, split evenly, to `owners` as busy or idle time, and keeps
/// the owners remembered bounded.
pub(crate) fn charge_owners(
    state: &mut CostState,
    now: i64,
    owners: BTreeMap<String, Option<String>>,
    seconds: f64,
    busy: bool,
) {
    let share = seconds / owners.len().max(1) as f64;
    for (name, team) in owners {
        let entry = state.owners.entry(name).or_default();
        if team.is_some() {
            entry.team = team;
        }
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

/// Charges `seconds` of this GPU: to busy or idle, and to the owners holding it.
pub fn update(
    state: &mut CostState,
    now: i64,
    seconds: f64,
    sample: &GpuSample,
    holders: Holders<'_>,
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
        // A pod allocated the GPU is charged even while it runs nothing: that is the waste.
        // A GPU nobody holds (every sample of an nvidia-smi log) charges no owner.
        if !holders.processes.is_empty() || !holders.allocations.is_empty() {
            let owners = owners_of(holders, &config.owner);
            // Sharing GPUs split the time evenly: GPU-seconds add up to wall time.
            charge_owners(state, now, owners, seconds, busy);
        }
    }
    CostView {
        hourly,
        ..state.view(now)
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
        let both = Holders {
            processes: &[&a, &b],
            allocations: &[],
        };
        update(&mut state, 3600, 3600.0, &gpu, both, true, &config());
        gpu.power_watts = Some(0.0);
        let one = Holders {
            processes: &[&a],
            allocations: &[],
        };
        let view = update(&mut state, 7200, 3600.0, &gpu, one, false, &config());
        assert!((view.busy - 1.1).abs() < 1e-3);
        assert!((view.idle - 1.0).abs() < 1e-3);
        assert_eq!(
            view.owners,
            vec![
                ("bob".to_string(), UNASSIGNED.to_string(), 1800.0, 0.0),
                ("vision".to_string(), UNASSIGNED.to_string(), 1800.0, 3600.0)
            ]
        );
    }

    #[test]
    fn an_allocated_pod_without_processes_is_charged_with_its_team() {
        let mut state = CostState::default();
        let gpu = GpuSample {
            up: true,
            ..GpuSample::default()
        };
        let pod = Allocation {
            namespace: Some("ml-idle".into()),
            pod: Some("stuck-0".into()),
            team: Some("ml".into()),
            ..Allocation::default()
        };
        let holders = Holders {
            processes: &[],
            allocations: &[&pod],
        };
        let view = update(&mut state, 60, 60.0, &gpu, holders, false, &config());
        assert_eq!(
            view.owners,
            vec![("ml-idle".to_string(), "ml".to_string(), 0.0, 60.0)]
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
