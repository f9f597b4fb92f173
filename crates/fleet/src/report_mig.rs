//! MIG capacity in the fleet report, in GPU fractions: a GPU in MIG mode is cut into
//! instances, and each counts at its share of the GPU — an idle `1g.10gb` of an H100 is a
//! seventh of a GPU held idle, not a GPU.
//!
//! - gpu-sentinel's metrics: the agent already charges an instance's holders its share in
//!   `gpu_owner_seconds_total`, so held, busy and idle GPU-hours need nothing here. A GPU in
//!   MIG mode has no `gpu_utilization_ratio` (NVML answers none per GPU in MIG mode); its
//!   load is its instances' SM activity weighted by their shares,
//!   `gpu_mig_sm_active_ratio × gpu_mig_share_ratio`, summed per GPU.
//! - dcgm-exporter's: a GPU in MIG mode has a `DCGM_FI_DEV_FB_USED` and
//!   `DCGM_FI_PROF_SM_ACTIVE` series per GPU instance (`GPU_I_ID`, `GPU_I_PROFILE`) and no
//!   `DCGM_FI_DEV_GPU_UTIL`. An instance's share comes from its profile's name: its `Ng`
//!   slice count over the GPU's slices (7 on an A100, H100, H200; 4 on an A30). Held time
//!   is counted per instance series and weighted by that share in the client
//!   ([`weight`]); busy is its own `DCGM_FI_PROF_SM_ACTIVE` at or above the idle threshold;
//!   its load is the same activity weighted in PromQL ([`dcgm_load`]).
//!
//! `Dialect::mig_families` and `Dialect::mig_load` (crates/fleet/src/dialect.rs) pick the families
//! and the load query of a dialect from here.

use super::plan::shard::select;

/// gpu-sentinel's MIG families the report reads.
pub const NATIVE_FAMILIES: [&str; 2] = ["gpu_mig_sm_active_ratio", "gpu_mig_share_ratio"];

/// dcgm-exporter's per-instance activity (a fraction, 0–1).
pub(crate) const DCGM_ACTIVITY: &str = "DCGM_FI_PROF_SM_ACTIVE";

/// Slices of a GPU by model (`modelName` matched as a regular expression), and the slice
/// counts its GPU instance profiles have; the last row is every other MIG-capable GPU.
const SLICES: [(&str, &str, u32, &[u32]); 2] = [
    ("=~", ".*A30.*", 4, &[1, 2, 4]),
    ("!~", ".*A30.*", 7, &[1, 2, 3, 4, 7]),
];

/// The GPU instance slices a profile names: `3` for `3g.40gb` and for a compute
/// instance's `1c.3g.40gb`; None for a name without one.
pub(crate) fn profile_slices(profile: &str) -> Option<u32> {
    profile
        .split('.')
        .find_map(|part| part.strip_suffix('g').and_then(|n| n.parse::<u32>().ok()))
        .filter(|n| *n > 0)
}

/// An instance's share of its GPU from its profile and the GPU's model name; None when the
/// profile names no slices.
pub(crate) fn profile_fraction(profile: &str, model: &str) -> Option<f64> {
    let slices = profile_slices(profile)?;
    let total = if model.contains("A30") { 4 } else { 7 };
    Some((f64::from(slices) / f64::from(total)).min(1.0))
}

/// Each MIG GPU's load in gpu-sentinel's metrics, in GPUs, over `range` before the
/// evaluation time on the hosts `hosts` matches: one row per `instance` and `gpu`, none for
/// a GPU not in MIG mode.
pub(crate) fn native_load(hosts: &str, range: &str) -> String {
    format!(
        "sum by (instance, gpu) (avg_over_time({}[{range}]) * avg_over_time({}[{range}]))",
        select("gpu_mig_sm_active_ratio", &[hosts]),
        select("gpu_mig_share_ratio", &[hosts]),
    )
}

/// The same in dcgm-exporter's series: one row per `Hostname` and `gpu`.
pub(crate) fn dcgm_load(hosts: &str, range: &str) -> String {
    // One term per model class and slice count: each instance's series is in exactly
    // one, so `or` joins them without dropping any.
    let terms: Vec<String> = SLICES
        .iter()
        .flat_map(|&(op, model, total, counts)| {
            counts.iter().map(move |n| {
                let matchers = [
                    "GPU_I_ID!=\"\"".to_string(),
                    format!("GPU_I_PROFILE=~\"([0-9]+c\\\\.)?{n}g\\\\..*\""),
                    format!("modelName{op}\"{model}\""),
                    hosts.to_string(),
                ];
                let matchers: Vec<&str> = matchers.iter().map(String::as_str).collect();
                format!(
                    "avg_over_time({}[{range}]) * {}",
                    select(DCGM_ACTIVITY, &matchers),
                    f64::from(*n) / f64::from(total)
                )
            })
        })
        .collect();
    format!("sum by (Hostname, gpu) ({})", terms.join(" or "))
}

/// A dcgm-exporter held-time row (GPU-seconds of one series) at its instance's share: rows
/// of a GPU instance (`GPU_I_PROFILE` set) count its fraction, others whole. The profile
/// and model labels are dropped, so rows of one owner and GPU add up.
pub fn weight(row: &mut super::prom::Sample) {
    let profile = row.labels.remove("GPU_I_PROFILE").unwrap_or_default();
    let model = row.labels.remove("modelName").unwrap_or_default();
    if profile.is_empty() {
        return;
    }
    // A profile naming no slices is counted whole, as before MIG was read.
    if let Some(fraction) = profile_fraction(&profile, &model) {
        row.value *= fraction;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profiles_name_their_slices() {
        assert_eq!(profile_slices("1g.10gb"), Some(1));
        assert_eq!(profile_slices("3g.40gb"), Some(3));
        assert_eq!(profile_slices("1c.3g.40gb"), Some(3));
        assert_eq!(profile_slices("7g.80gb"), Some(7));
        assert_eq!(profile_slices("1g.10gb+me"), Some(1));
        assert_eq!(profile_slices(""), None);
        assert_eq!(profile_slices("whole"), None);
        let h100 = "NVIDIA H100 80GB HBM3";
        assert_eq!(profile_fraction("1g.10gb", h100), Some(1.0 / 7.0));
        assert_eq!(profile_fraction("2g.12gb", "NVIDIA A30"), Some(0.5));
    }

    #[test]
    fn a_held_instance_row_counts_its_share() {
        let mut row = super::super::prom::Sample {
            labels: [
                ("Hostname", "n"),
                ("GPU_I_PROFILE", "2g.20gb"),
                ("modelName", "NVIDIA H100 80GB HBM3"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
            value: 700.0,
        };
        weight(&mut row);
        assert!((row.value - 200.0).abs() < 1e-9);
        assert!(!row.labels.contains_key("GPU_I_PROFILE") && !row.labels.contains_key("modelName"));
        let mut whole = super::super::prom::Sample {
            labels: [("Hostname", "n")]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            value: 700.0,
        };
        weight(&mut whole);
        assert_eq!(whole.value, 700.0);
    }

    #[test]
    fn dcgm_load_weights_each_profile_by_its_slices() {
        let text = dcgm_load("Hostname=~\"a\"", "1h");
        assert!(text.starts_with("sum by (Hostname, gpu) (avg_over_time(DCGM_FI_PROF_SM_ACTIVE{GPU_I_ID!=\"\",GPU_I_PROFILE=~\"([0-9]+c\\\\.)?1g\\\\..*\",modelName=~\".*A30.*\",Hostname=~\"a\"}[1h]) * 0.25 or "), "{text}");
        assert!(
            text.contains(
                "3g\\\\..*\",modelName!~\".*A30.*\",Hostname=~\"a\"}[1h]) * 0.42857142857142855"
            ),
            "{text}"
        );
        assert_eq!(text.matches(" or ").count(), 7);
    }
}
