//! The two metric dialects a fleet's store may hold: gpu-sentinel's own families, or
//! dcgm-exporter's `DCGM_FI_*` (at sites that have not deployed us). The report's figures
//! are the same; only the PromQL that computes them differs, and it lives here.
//!
//! Every usage query answers rows of GPU-seconds labelled `instance` (the host), `owner`,
//! `team` (when the agent set one), `state` (`busy`/`idle`) and, per GPU, `gpu`: dcgm-exporter's
//! rows are renamed into those labels (`Hostname` → `instance`, `namespace` → `owner`) so
//! the report reads one shape.

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::plan::shard::{duration, select};
use super::prom::{Client, Sample};
use super::report_mig::{self, DCGM_ACTIVITY, weight};

/// The metric every gpu-sentinel figure needs.
pub(crate) const OWNER_METRIC: &str = "gpu_owner_seconds_total";

/// The names [`Dialect::detect`] asks the store's index about.
const DETECTED: &str = "{__name__=~\"gpu_utilization_ratio|gpu_owner_seconds_total|DCGM_FI_DEV_GPU_UTIL|DCGM_FI_DEV_FB_USED\"}";

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Dialect {
    /// gpu-sentinel's families: GPU-seconds per owner come from `gpu_owner_seconds_total`.
    Native,
    /// dcgm-exporter's: a GPU is *held* while its framebuffer use is above the floor or a
    /// pod is mapped to it, *busy* while held and `DCGM_FI_DEV_GPU_UTIL` is at or above the
    /// idle threshold; GPU-seconds are counted by subquery at the report's step.
    Dcgm { memory_floor_mib: u64 },
}

/// How a usage query's rows count.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Counted {
    /// The state they are time in (None: each row carries its `state` label).
    pub state: Option<&'static str>,
    /// A state they are also taken off: idle time is held time less busy time.
    pub less: Option<&'static str>,
}

impl Counted {
    /// Rows that carry their state, or have none.
    pub const AS_LABELLED: Counted = Counted {
        state: None,
        less: None,
    };

    /// Rows of time in `state`.
    pub fn state(state: &'static str) -> Counted {
        Counted {
            state: Some(state),
            less: None,
        }
    }
}

impl Dialect {
    /// Which dialect the store holds between `from` and `to`; gpu-sentinel's wins when
    /// both are there. One label-values call: the store looks the names up in its index
    /// instead of reading a week of samples. A name listed here may still have no sample in
    /// the period (the index is per block); the figures that read it say so
    /// ([`Dialect::no_samples`]).
    pub(crate) fn detect(
        client: &Client,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
        memory_floor_mib: u64,
    ) -> anyhow::Result<Dialect> {
        let names = client.label_values("__name__", DETECTED, from, to)?;
        let has = |metric: &str| names.iter().any(|n| n == metric);
        if has("gpu_utilization_ratio") {
            anyhow::ensure!(
                has(OWNER_METRIC),
                "{} has gpu_utilization_ratio but no {OWNER_METRIC} between {from} and {to}: the agents predate owner accounting",
                client.base()
            );
            return Ok(Dialect::Native);
        }
        if has("DCGM_FI_DEV_GPU_UTIL") {
            anyhow::ensure!(
                has("DCGM_FI_DEV_FB_USED"),
                "{} has DCGM_FI_DEV_GPU_UTIL but no DCGM_FI_DEV_FB_USED between {from} and {to}: enable that field in dcgm-exporter's counter list",
                client.base()
            );
            return Ok(Dialect::Dcgm { memory_floor_mib });
        }
        anyhow::bail!(
            "{} has neither gpu_utilization_ratio (gpu-sentinel) nor DCGM_FI_DEV_GPU_UTIL (dcgm-exporter) between {from} and {to}: nothing scraped GPUs into this store then, or it is beyond the store's retention",
            client.base()
        )
    }

    /// The error for a family the store lists but holds no sample of in the period.
    pub(crate) fn no_samples(
        metric: &str,
        client: &Client,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> anyhow::Error {
        anyhow::anyhow!(
            "{} has no samples of {metric} between {from} and {to} (its index lists the name, its blocks hold none in the period): nothing scraped GPUs into this store then, or the period is beyond the store's retention",
            client.base()
        )
    }

    /// `source` in the report.
    pub fn source(self) -> &'static str {
        match self {
            Dialect::Native => "gpu-sentinel",
            Dialect::Dcgm { .. } => "dcgm-exporter",
        }
    }

    /// The label naming a GPU's host.
    pub fn host(self) -> &'static str {
        match self {
            Dialect::Native => "instance",
            Dialect::Dcgm { .. } => "Hostname",
        }
    }

    /// The families a raw figure reads: utilization, power, and what held GPU-time is
    /// counted from.
    pub fn families(self) -> [&'static str; 3] {
        match self {
            Dialect::Native => ["gpu_utilization_ratio", "gpu_power_watts", OWNER_METRIC],
            Dialect::Dcgm { .. } => [
                "DCGM_FI_DEV_GPU_UTIL",
                "DCGM_FI_DEV_POWER_USAGE",
                "DCGM_FI_DEV_FB_USED",
            ],
        }
    }

    /// Each GPU's mean utilization (0–1) over the `range` before the evaluation time, from
    /// the raw samples of the hosts `hosts` matches (empty: all): a range selector reads each
    /// sample once, where a subquery would evaluate an expression at every one of its steps.
    pub(crate) fn utilization_over(self, hosts: &str, range: &str) -> String {
        let family = select(self.utilization_metric(), &[hosts]);
        match self {
            Dialect::Native => format!("avg_over_time({family}[{range}])"),
            Dialect::Dcgm { .. } => format!("(avg_over_time({family}[{range}]) / 100)"),
        }
    }

    /// Each GPU's mean power draw, watts, over the `range` before the evaluation time.
    pub(crate) fn power_over(self, hosts: &str, range: &str) -> String {
        let family = match self {
            Dialect::Native => "gpu_power_watts",
            Dialect::Dcgm { .. } => "DCGM_FI_DEV_POWER_USAGE",
        };
        format!("avg_over_time({}[{range}])", select(family, &[hosts]))
    }

    /// `expression` (per series) as one row per GPU. gpu-sentinel writes one series per GPU,
    /// so its rows go as they are (grouping them would cost the store a fifth more CPU on
    /// the hourly rows, BENCHMARKS.md); dcgm-exporter's series of one GPU change labels
    /// with the pod on it, so the store averages them. The client averages any GPU that
    /// still has several ([`super::hourly::Hourly::from_series`]).
    pub fn per_gpu(self, expression: &str) -> String {
        match self {
            Dialect::Native => expression.to_string(),
            Dialect::Dcgm { .. } => format!("avg by (Hostname, gpu) ({expression})"),
        }
    }

    /// The family of the utilization samples, for messages.
    pub(crate) fn utilization_metric(self) -> &'static str {
        match self {
            Dialect::Native => "gpu_utilization_ratio",
            Dialect::Dcgm { .. } => "DCGM_FI_DEV_GPU_UTIL",
        }
    }

    /// dcgm-exporter's held GPUs on the hosts `hosts` matches: framebuffer use above the
    /// floor, or a pod mapped to the GPU.
    fn held(memory_floor_mib: u64, hosts: &str) -> String {
        format!(
            "({} > {memory_floor_mib} or {})",
            select("DCGM_FI_DEV_FB_USED", &[hosts]),
            select("DCGM_FI_DEV_FB_USED", &["pod!=\"\"", hosts])
        )
    }

    /// The families a held-time query reads, each with the times it reads it.
    pub(crate) fn held_reads(self) -> Vec<(String, f64)> {
        match self {
            Dialect::Native => vec![(OWNER_METRIC.to_string(), 1.0)],
            // Framebuffer use twice (above the floor, or with a pod), utilization once, and
            // MIG instances' activity once.
            Dialect::Dcgm { .. } => vec![
                ("DCGM_FI_DEV_FB_USED".to_string(), 2.0),
                ("DCGM_FI_DEV_GPU_UTIL".to_string(), 1.0),
                (DCGM_ACTIVITY.to_string(), 1.0),
            ],
        }
    }

    /// The families a MIG GPU's load is read from ([`report_mig`]).
    pub(crate) fn mig_families(self) -> Vec<&'static str> {
        match self {
            Dialect::Native => report_mig::NATIVE_FAMILIES.to_vec(),
            Dialect::Dcgm { .. } => vec![DCGM_ACTIVITY],
        }
    }

    /// Each MIG GPU's load, in GPUs, over `range` before the evaluation time on the hosts
    /// `hosts` matches: one row per host and GPU, none for a GPU not in MIG mode.
    pub(crate) fn mig_load(self, hosts: &str, range: &str) -> String {
        match self {
            Dialect::Native => report_mig::native_load(hosts, range),
            Dialect::Dcgm { .. } => report_mig::dcgm_load(hosts, range),
        }
    }

    /// The GPU-seconds held on the hosts `hosts` matches in the `window` before the
    /// evaluation time (dcgm-exporter's counted at every `step` of a subquery: a finer
    /// resolution than the scrape interval would count points that find no sample).
    pub(crate) fn held_seconds(self, hosts: &str, window: &str, step: Duration) -> String {
        match self {
            Dialect::Native => format!(
                "sum(increase({}[{window}]))",
                select(OWNER_METRIC, &[hosts])
            ),
            Dialect::Dcgm { memory_floor_mib } => {
                let resolution = duration(step.as_millis() as i64);
                format!(
                    "sum by (GPU_I_PROFILE, modelName) (count_over_time({}[{window}:{resolution}])) * {}",
                    Dialect::held(memory_floor_mib, hosts),
                    step.as_secs_f64()
                )
            }
        }
    }

    /// Queries answering GPU-seconds over `window` (at the query's time) on the hosts
    /// `hosts` matches, with how each query's rows count ([`Counted`]). `per_gpu` keeps the
    /// `gpu` label; `gpu_instances`: whether the store holds MIG instances' series, whose
    /// activity then counts too.
    pub fn usage(
        self,
        hosts: &str,
        window: &str,
        step: Duration,
        idle_threshold: f64,
        per_gpu: bool,
        gpu_instances: bool,
    ) -> Vec<(String, Counted)> {
        match self {
            Dialect::Native => {
                let by = if per_gpu {
                    "instance, gpu, owner, team, state"
                } else {
                    "instance, owner, team, state"
                };
                vec![(
                    format!(
                        "sum by ({by}) (increase({}[{window}]))",
                        select(OWNER_METRIC, &[hosts])
                    ),
                    Counted::AS_LABELLED,
                )]
            }
            Dialect::Dcgm { memory_floor_mib } => {
                // A MIG instance's rows keep its profile and model, for its share
                // (`report_mig::weight`).
                let by = if per_gpu {
                    "Hostname, gpu, namespace, GPU_I_PROFILE, modelName"
                } else {
                    "Hostname, namespace, GPU_I_PROFILE, modelName"
                };
                let held = Dialect::held(memory_floor_mib, hosts);
                // A whole GPU is busy by its utilization, a GPU instance by its own SM
                // activity (dcgm-exporter reports no utilization in MIG mode).
                let utilization = format!(
                    "({} >= {})",
                    select("DCGM_FI_DEV_GPU_UTIL", &[hosts]),
                    idle_threshold * 100.0
                );
                // Without GPU instances, utilization alone: an `or` costs the store a pass
                // over every series of its left side at each step, even with nothing on
                // its right (a third of the query's time at 2,048 GPUs).
                let active = if gpu_instances {
                    format!(
                        "({utilization} or ({} >= {idle_threshold}))",
                        select(DCGM_ACTIVITY, &["GPU_I_ID!=\"\"", hosts]),
                    )
                } else {
                    utilization
                };
                let resolution = duration(step.as_millis() as i64);
                let seconds = step.as_secs_f64();
                let count = |selected: &str| {
                    format!(
                        "sum by ({by}) (count_over_time({selected}[{window}:{resolution}])) * {seconds}"
                    )
                };
                // Idle time is held time less busy time: held time joins nothing, where
                // asking for idle time itself (`unless`) would join the families at every
                // step a second time.
                let busy = format!("({held} and on(Hostname, gpu, GPU_I_ID) {active})");
                vec![
                    (count(&held), Counted::state("idle")),
                    (
                        count(&busy),
                        Counted {
                            state: Some("busy"),
                            less: Some("idle"),
                        },
                    ),
                ]
            }
        }
    }

    /// A usage row in the report's labels (see the module's documentation).
    pub(crate) fn normalise(self, mut row: Sample, state: Option<&'static str>) -> Sample {
        if let Dialect::Dcgm { .. } = self {
            weight(&mut row);
            let host = row.labels.remove("Hostname").unwrap_or_default();
            let owner = row.labels.remove("namespace").unwrap_or_default();
            row.labels.insert("instance".into(), host);
            row.labels.insert("owner".into(), owner);
        }
        if let Some(state) = state {
            row.labels.insert("state".into(), state.to_string());
        }
        row
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dcgm_rows_take_the_reports_labels() {
        let row = Sample {
            labels: [("Hostname", "node-7"), ("namespace", "ml-a"), ("gpu", "3")]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            value: 60.0,
        };
        let row = Dialect::Dcgm {
            memory_floor_mib: 1024,
        }
        .normalise(row, Some("idle"));
        assert_eq!(
            (
                row.label("instance"),
                row.label("owner"),
                row.label("state"),
                row.label("gpu")
            ),
            ("node-7", "ml-a", "idle", "3")
        );
    }

    #[test]
    fn dcgm_usage_splits_held_time_into_busy_and_idle() {
        let queries = Dialect::Dcgm {
            memory_floor_mib: 1024,
        }
        .usage("", "3600s", Duration::from_secs(60), 0.05, false, true);
        // Held time counts as idle, busy time as busy and taken off idle.
        let counted: Vec<_> = queries.iter().map(|(_, c)| *c).collect();
        assert_eq!(
            counted,
            [
                Counted::state("idle"),
                Counted {
                    state: Some("busy"),
                    less: Some("idle")
                }
            ]
        );
        assert_eq!(
            queries[0].0,
            "sum by (Hostname, namespace, GPU_I_PROFILE, modelName) (count_over_time((DCGM_FI_DEV_FB_USED > 1024 or DCGM_FI_DEV_FB_USED{pod!=\"\"})[3600s:60s])) * 60"
        );
        assert!(
            queries[1]
                .0
                .contains("(DCGM_FI_DEV_FB_USED > 1024 or DCGM_FI_DEV_FB_USED{pod!=\"\"}) and on(Hostname, gpu, GPU_I_ID) ((DCGM_FI_DEV_GPU_UTIL >= 5) or (DCGM_FI_PROF_SM_ACTIVE{GPU_I_ID!=\"\"} >= 0.05))"),
            "{}",
            queries[1].0
        );
        // A store without GPU instances: utilization alone.
        let whole = Dialect::Dcgm {
            memory_floor_mib: 1024,
        }
        .usage("", "3600s", Duration::from_secs(60), 0.05, false, false);
        assert!(
            whole[1].0.contains(
                "and on(Hostname, gpu, GPU_I_ID) (DCGM_FI_DEV_GPU_UTIL >= 5))[3600s:60s]"
            ),
            "{}",
            whole[1].0
        );
        assert!(!whole[1].0.contains("SM_ACTIVE"), "{}", whole[1].0);
        let native = Dialect::Native.usage(
            "instance=~\"a|b\"",
            "3600s",
            Duration::from_secs(60),
            0.05,
            true,
            false,
        );
        assert_eq!(
            native[0].0,
            "sum by (instance, gpu, owner, team, state) (increase(gpu_owner_seconds_total{instance=~\"a|b\"}[3600s]))"
        );
    }
}
