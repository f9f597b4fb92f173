//! Evidence that holds: each feature's contribution to the score is an exponentially
//! decaying maximum, so a warning holds while its evidence holds and fades on its family's
//! time scale once the evidence stops, instead of flickering with every hour's noise.
//!
//! A family's evidence "starts" when its held contributions together reach
//! [`EVIDENCE_STARTS`] log-odds and ends when they fall under [`EVIDENCE_ENDS`]; the
//! alert's description names the families with evidence and when it started.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use super::features::FEATURES;

/// Failure families the features belong to, each with how long its evidence holds.
/// In [`FAMILIES`] order: a family's discriminant is its index there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    Memory,
    Xid,
    Pcie,
    NvLink,
    Cooling,
    Power,
    Structural,
}

pub const FAMILIES: [Family; 7] = [
    Family::Memory,
    Family::Xid,
    Family::Pcie,
    Family::NvLink,
    Family::Cooling,
    Family::Power,
    Family::Structural,
];

impl Family {
    /// What the evidence is, for the alert's description.
    pub fn label(self) -> &'static str {
        match self {
            Family::Memory => "memory errors (corrected ECC, remaps, retired pages)",
            Family::Xid => "hardware XIDs",
            Family::Pcie => "PCIe link (replays, link below its maximum)",
            Family::NvLink => "NVLink errors",
            Family::Cooling => "cooling (memory gap, temperature, slowdown)",
            Family::Power => "power delivery (power brake, erratic draw)",
            Family::Structural => "NVML calls (failing, slow)",
        }
    }

    /// The e-fold time of held evidence, seconds (docs/detection.md states them): memory
    /// wear builds over days and a one-off burst should be gone within a day or two; a
    /// failing link errs, or trains down, in episodes that can lie half a day apart, and
    /// a GSP going bad slows and fails NVML calls the same way (the NVML calls' rate
    /// tests; the readings of one hour hold for [`MOMENTARY_HOLD_SECONDS`]): between
    /// episodes the rate tests' short windows fall back while the long ones are still
    /// building, so every PCIe and NVLink term, and the NVML calls' rate tests, hold a
    /// day; temperatures and power follow the load within hours.
    pub(crate) fn hold_seconds(self) -> f64 {
        const H: f64 = 3600.0;
        match self {
            Family::Memory | Family::Pcie | Family::NvLink | Family::Structural => 24.0 * H,
            Family::Xid => 12.0 * H,
            Family::Cooling | Family::Power => 6.0 * H,
        }
    }

    pub fn index(self) -> usize {
        self as usize
    }
}

/// Held family contributions at which evidence starts and under which it ends, log-odds.
/// A single day of a few corrected errors (0.6 + 0.5 with the shipped weights) is below
/// the start: ordinary noise names no evidence.
pub(crate) const EVIDENCE_STARTS: f64 = 1.5;
pub(crate) const EVIDENCE_ENDS: f64 = 1.0;

/// The held contributions of one GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Hold {
    /// Unix seconds of the last assessment.
    at: Option<i64>,
    /// Held contribution per feature, in FEATURES order; saved by name.
    #[serde(
        serialize_with = "held_by_name",
        deserialize_with = "held_of_any_version"
    )]
    held: [f64; FEATURES.len()],
    /// Unix seconds each family's evidence started, while it lasts.
    since: [Option<i64>; FAMILIES.len()],
}

// Written out: the standard library derives `Default` for arrays of up to 32 only.
impl Default for Hold {
    fn default() -> Hold {
        Hold {
            at: None,
            held: [0.0; FEATURES.len()],
            since: [None; FAMILIES.len()],
        }
    }
}

/// The features of agents that saved their held terms as a list, in that list's order:
/// their terms load by name, and those of features since retired are dropped.
const LISTED_FEATURES: [&str; 29] = [
    "ecc_corrected_days",
    "ecc_corrected_rising",
    "ecc_corrected_sustained",
    "ecc_uncorrected_7d",
    "remapped_rows_new",
    "remap_pending",
    "retired_pages_new",
    "retired_pages_pending",
    "xid_hardware_7d",
    "pcie_replays_vs_baseline",
    "pcie_replays_rising",
    "pcie_replays_vs_peers",
    "pcie_link_degraded",
    "nvlink_errors_per_hour",
    "nvlink_errors_vs_baseline",
    "memory_gap_vs_baseline",
    "memory_temperature_gap",
    "temperature_vs_peers",
    "thermal_slowdown_24h",
    "hw_slowdown_share",
    "power_brake_24h",
    "power_erratic",
    "failed_calls_per_collection",
    "collect_seconds_level",
    "collect_slowdown",
    "temperature_vs_baseline",
    "thermal_slowdown_rise",
    "memory_gap_persistent",
    "temperature_persistent",
];

/// Held terms by feature name, the non-zero ones only.
fn held_by_name<S: serde::Serializer>(
    held: &[f64; FEATURES.len()],
    s: S,
) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeMap;
    let nonzero = held.iter().filter(|h| **h != 0.0).count();
    let mut map = s.serialize_map(Some(nonzero))?;
    for (h, (name, _)) in held.iter().zip(&FEATURES) {
        if *h != 0.0 {
            map.serialize_entry(name, h)?;
        }
    }
    map.end()
}

/// Held terms as saved by any version: a map by name (unknown names, a newer or an older
/// agent's features, are dropped), or the list older agents saved in [`LISTED_FEATURES`]
/// order.
fn held_of_any_version<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<[f64; FEATURES.len()], D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Saved {
        ByName(std::collections::BTreeMap<String, f64>),
        Listed(Vec<f64>),
    }
    let named: Vec<(String, f64)> = match Saved::deserialize(d)? {
        Saved::ByName(map) => map.into_iter().collect(),
        Saved::Listed(list) => LISTED_FEATURES
            .iter()
            .zip(list)
            .map(|(name, h)| (name.to_string(), h))
            .collect(),
    };
    let mut held = [0.0; FEATURES.len()];
    for (name, s) in named {
        if let Some(i) = FEATURES.iter().position(|(n, _)| *n == name)
            && s.is_finite()
            && s >= 0.0
        {
            held[i] = s;
        }
    }
    Ok(held)
}

/// One family's evidence, for the alert's description.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Evidence {
    /// The family's [`Family::label`]: borrowed when assessed, so that holding evidence
    /// allocates no name; owned when read back from JSON.
    pub family: Cow<'static, str>,
    /// Unix seconds the evidence started.
    pub since: i64,
    /// How long it has held, seconds.
    pub(crate) lasted_seconds: i64,
    /// Its held contributions together, log-odds.
    pub contribution: f64,
}

impl Hold {
    /// Folds this assessment's contributions (per feature, FEATURES order) in and returns
    /// the held ones; `evidence` is refilled with the families whose evidence holds,
    /// strongest first (a list kept from step to step, so that holding allocates nothing).
    pub fn apply(
        &mut self,
        now: i64,
        raw: &[f64; FEATURES.len()],
        evidence: &mut Vec<Evidence>,
    ) -> [f64; FEATURES.len()] {
        let elapsed = self
            .at
            .map_or(0.0, |at| now.saturating_sub(at).max(0) as f64);
        self.at = Some(self.at.map_or(now, |at| at.max(now)));
        let mut by_family = [0.0; FAMILIES.len()];
        // One decay factor per family, not per feature, and only for a family with a term
        // to decay: most terms of a healthy GPU are zero at most steps, and a term at zero
        // stays at zero without one.
        let mut decay: [Option<f64>; FAMILIES.len() + 1] = [None; FAMILIES.len() + 1];
        for (i, (held, &raw)) in self.held.iter_mut().zip(raw).enumerate() {
            // A term at +0 with nothing new stays at +0 and adds nothing to its family: most
            // terms of a healthy GPU at most steps, skipped without the work below.
            if raw == 0.0 && held.to_bits() == 0 {
                continue;
            }
            let family = family_of(i);
            let decayed = if *held == 0.0 {
                *held
            } else {
                let slot = HOLD_SLOT[i];
                let factor =
                    *decay[slot].get_or_insert_with(|| (-elapsed / slot_hold_seconds(slot)).exp());
                *held * factor
            };
            // Only evidence for risk is held; a term that lowers the score (a fitted
            // negative weight) counts as it is now.
            *held = if raw > 0.0 {
                raw.max(decayed)
            } else if raw < 0.0 {
                raw
            } else {
                decayed.max(0.0)
            };
            if !held.is_finite() {
                *held = 0.0;
            }
            by_family[family.index()] += held.max(0.0);
        }
        evidence.clear();
        for (f, family) in FAMILIES.iter().enumerate() {
            let total = by_family[f];
            self.since[f] = match self.since[f] {
                Some(since) if total >= EVIDENCE_ENDS => Some(since),
                None if total >= EVIDENCE_STARTS => Some(now),
                _ => None,
            };
            if let Some(since) = self.since[f] {
                evidence.push(Evidence {
                    family: Cow::Borrowed(family.label()),
                    since,
                    lasted_seconds: now.saturating_sub(since),
                    contribution: total,
                });
            }
        }
        evidence.sort_by(|a, b| b.contribution.total_cmp(&a.contribution));
        self.held
    }
}

/// What the held evidence of families other than the strongest adds to the log-odds, per
/// unit: evidence corroborates but does not stack. Weak readings of several unrelated
/// families at once — a few corrected errors, a noisy link, an hour of slowdown — are what
/// healthy GPUs show now and then; a failing GPU's evidence grows in its own family.
pub const CORROBORATION: f64 = 0.5;

/// The held contributions' share of the log-odds: the strongest family in full, the others
/// at [`CORROBORATION`].
pub fn combined(held: &[f64; FEATURES.len()]) -> f64 {
    let mut by_family = [0.0; FAMILIES.len()];
    for (i, h) in held.iter().enumerate() {
        by_family[family_of(i).index()] += h;
    }
    combine_families(&by_family)
}

/// [`combined`] from per-family sums.
pub fn combine_families(by_family: &[f64; FAMILIES.len()]) -> f64 {
    let total: f64 = by_family.iter().sum();
    let strongest = by_family.iter().copied().fold(0.0, f64::max);
    strongest + CORROBORATION * (total - strongest)
}

/// A feature's family, by its name's prefix: the names say what they measure.
const fn family_by_name(name: &str) -> Family {
    use super::features::starts_with as starts;
    if starts(name, "ecc_") || starts(name, "remap") || starts(name, "retired_") {
        Family::Memory
    } else if starts(name, "xid_") {
        Family::Xid
    } else if starts(name, "pcie_") {
        Family::Pcie
    } else if starts(name, "nvlink_") {
        Family::NvLink
    } else if starts(name, "power_") {
        Family::Power
    } else if starts(name, "failed_") || starts(name, "collect_") {
        Family::Structural
    } else {
        // memory_, temperature_, thermal_, hw_slowdown: what heat and cooling do.
        Family::Cooling
    }
}

/// The e-fold of the held NVML-call readings of one hour (failed calls per collection, the
/// collection time's level and slowdown): a driver reload or an hour of load on a host
/// whose node has no median to take away is one bad hour, gone within hours; what comes
/// back hour after hour is the rate tests' to hold, for their family's time.
const MOMENTARY_HOLD_SECONDS: f64 = 3.0 * 3600.0;

/// The slot of [`HOLD_SLOT`] past the families': the momentary NVML-call readings.
const MOMENTARY: usize = FAMILIES.len();

/// Where each feature's held term decays, in FEATURES order: its family's index, or
/// [`MOMENTARY`] for the structural readings that are not rate tests.
const HOLD_SLOT: [usize; FEATURES.len()] = {
    let mut out = [0; FEATURES.len()];
    let mut i = 0;
    while i < FEATURES.len() {
        let name = FEATURES[i].0;
        let family = family_by_name(name);
        out[i] = match family {
            Family::Structural if !super::features::is_rate_test(name) => MOMENTARY,
            _ => family as usize,
        };
        i += 1;
    }
    out
};

/// The e-fold of slot `slot` of [`HOLD_SLOT`], seconds.
fn slot_hold_seconds(slot: usize) -> f64 {
    FAMILIES
        .get(slot)
        .map_or(MOMENTARY_HOLD_SECONDS, |f| f.hold_seconds())
}

/// The family of each feature, in FEATURES order.
const FAMILY_OF: [Family; FEATURES.len()] = {
    let mut out = [Family::Structural; FEATURES.len()];
    let mut i = 0;
    while i < FEATURES.len() {
        out[i] = family_by_name(FEATURES[i].0);
        i += 1;
    }
    out
};

/// The family of feature `i` (FEATURES order).
pub fn family_of(i: usize) -> Family {
    FAMILY_OF.get(i).copied().unwrap_or(Family::Structural)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn index(name: &str) -> usize {
        FEATURES
            .iter()
            .position(|(n, _)| *n == name)
            .unwrap_or_else(|| panic!("no feature {name}"))
    }

    #[test]
    fn every_feature_has_the_family_its_name_says() {
        let prefixes = [
            ("ecc_", Family::Memory),
            ("remap", Family::Memory),
            ("retired_", Family::Memory),
            ("xid_", Family::Xid),
            ("pcie_", Family::Pcie),
            ("nvlink_", Family::NvLink),
            ("memory_", Family::Cooling),
            ("temperature_", Family::Cooling),
            ("thermal_", Family::Cooling),
            ("hw_slowdown", Family::Cooling),
            ("power_", Family::Power),
            ("failed_", Family::Structural),
            ("collect_", Family::Structural),
        ];
        for (i, (name, _)) in FEATURES.iter().enumerate() {
            let by_name = prefixes
                .iter()
                .find(|(p, _)| name.starts_with(p))
                .map(|(_, f)| *f);
            assert_eq!(Some(family_of(i)), by_name, "{name}");
        }
        for (i, family) in FAMILIES.iter().enumerate() {
            assert_eq!(family.index(), i);
        }
        assert_eq!(family_of(index("hw_slowdown_share")), Family::Cooling);
    }

    #[test]
    fn evidence_holds_then_decays_on_its_family_time_scale() {
        let mut hold = Hold::default();
        let mut evidence = Vec::new();
        let memory = index("ecc_corrected_days");
        let mut raw = [0.0; FEATURES.len()];
        raw[memory] = 4.0;
        let held = hold.apply(1_000, &raw, &mut evidence);
        assert_eq!(held[memory], 4.0);
        assert_eq!(evidence.len(), 1);
        assert_eq!(evidence[0].since, 1_000);
        raw[memory] = 0.0;
        // One e-fold later (24 h for memory), the evidence is 4/e and still started at 1000.
        let held = hold.apply(1_000 + 86_400, &raw, &mut evidence);
        assert!((held[memory] - 4.0 / std::f64::consts::E).abs() < 1e-9);
        assert_eq!(evidence[0].since, 1_000);
        // Another day and it has ended (4/e² < 1).
        hold.apply(1_000 + 2 * 86_400, &raw, &mut evidence);
        assert!(evidence.is_empty());
        // Stronger raw evidence replaces the held value at once.
        raw[memory] = 6.0;
        let held = hold.apply(1_000 + 2 * 86_400 + 60, &raw, &mut evidence);
        assert_eq!(held[memory], 6.0);
        assert_eq!(evidence[0].since, 1_000 + 2 * 86_400 + 60);
    }

    #[test]
    fn an_hour_of_failing_calls_fades_within_hours_and_calls_failing_hour_after_hour_hold() {
        // A driver reload on a node with no median: one hour's failed calls weigh 14 and
        // are gone within hours; the rate tests of the same family, which count what comes
        // back hour after hour, hold for a day.
        let mut hold = Hold::default();
        let mut evidence = Vec::new();
        let mut raw = [0.0; FEATURES.len()];
        let momentary = [
            "failed_calls_per_collection",
            "collect_seconds_level",
            "collect_slowdown",
        ];
        let rates = ["failed_calls_rate", "collect_slow_rate"];
        for name in momentary.iter().chain(&rates) {
            raw[index(name)] = 14.0;
        }
        hold.apply(0, &raw, &mut evidence);
        let held = hold.apply(24 * 3600, &[0.0; FEATURES.len()], &mut evidence);
        for name in momentary {
            let expected = 14.0 * (-8.0f64).exp();
            assert!((held[index(name)] - expected).abs() < 1e-9, "{name}");
        }
        for name in rates {
            let expected = 14.0 / std::f64::consts::E;
            assert!((held[index(name)] - expected).abs() < 1e-9, "{name}");
        }
    }

    #[test]
    fn link_evidence_holds_a_day_and_a_hardware_xids_half_a_day() {
        // A failing link's episodes can lie half a day apart: its rate tests' evidence
        // keeps 1/e a day on, an XID's a day on 1/e².
        let mut hold = Hold::default();
        let mut evidence = Vec::new();
        let mut raw = [0.0; FEATURES.len()];
        let links = ["pcie_replays_rate", "nvlink_errors_rate"];
        for name in links.iter().chain(&["xid_hardware_rate"]) {
            raw[index(name)] = 6.0;
        }
        hold.apply(0, &raw, &mut evidence);
        let held = hold.apply(86_400, &[0.0; FEATURES.len()], &mut evidence);
        for name in links {
            let expected = 6.0 / std::f64::consts::E;
            assert!((held[index(name)] - expected).abs() < 1e-9, "{name}");
        }
        let xid = 6.0 * (-2.0f64).exp();
        assert!((held[index("xid_hardware_rate")] - xid).abs() < 1e-9);
    }

    #[test]
    fn each_family_decays_on_its_own_time_scale_whatever_the_others_hold() {
        let mut hold = Hold::default();
        let mut evidence = Vec::new();
        let memory = index("ecc_corrected_days");
        let cooling = index("temperature_vs_peers");
        let mut raw = [0.0; FEATURES.len()];
        raw[memory] = 2.0;
        raw[cooling] = 3.0;
        hold.apply(0, &raw, &mut evidence);
        assert_eq!(evidence.len(), 2, "{evidence:?}");
        // Twelve hours on, nothing new: memory (e-fold 24 h) and cooling (6 h) decay each
        // by its own factor; terms at zero stay at zero.
        let held = hold.apply(12 * 3600, &[0.0; FEATURES.len()], &mut evidence);
        assert!((held[memory] - 2.0 * (-0.5f64).exp()).abs() < 1e-12);
        assert!((held[cooling] - 3.0 * (-2.0f64).exp()).abs() < 1e-12);
        let others = (0..FEATURES.len()).filter(|i| ![memory, cooling].contains(i));
        assert!(others.map(|i| held[i]).all(|h| h == 0.0));
        // The evidence list is refilled, not appended to: cooling's has ended (0.41 < 1).
        assert_eq!(evidence.len(), 1, "{evidence:?}");
        assert_eq!(evidence[0].family, Family::Memory.label());
    }
}

#[cfg(test)]
mod combined_tests {
    use super::*;

    #[test]
    fn the_strongest_family_counts_in_full_and_the_others_at_half() {
        let mut held = [0.0; FEATURES.len()];
        let days = FEATURES
            .iter()
            .position(|(n, _)| *n == "ecc_corrected_days");
        let rising = FEATURES
            .iter()
            .position(|(n, _)| *n == "ecc_corrected_rate");
        let replays = FEATURES.iter().position(|(n, _)| n.starts_with("pcie_"));
        let (Some(days), Some(rising), Some(replays)) = (days, rising, replays) else {
            panic!("features renamed");
        };
        // Terms of one family add up in full.
        held[days] = 2.0;
        held[rising] = 1.0;
        assert!((combined(&held) - 3.0).abs() < 1e-12);
        // Another family's evidence corroborates at CORROBORATION.
        held[replays] = 2.0;
        assert!((combined(&held) - (3.0 + CORROBORATION * 2.0)).abs() < 1e-12);
        // Whichever family is strongest counts in full.
        held[replays] = 5.0;
        assert!((combined(&held) - (5.0 + CORROBORATION * 3.0)).abs() < 1e-12);
        assert_eq!(combined(&[0.0; FEATURES.len()]), 0.0);
    }
}

#[cfg(test)]
mod saved_tests {
    use super::*;

    #[test]
    fn held_terms_load_by_name_and_an_older_agents_list_by_its_features() {
        let index = |name: &str| FEATURES.iter().position(|(n, _)| *n == name);
        let (Some(days), Some(gap), Some(rate)) = (
            index("ecc_corrected_days"),
            index("temperature_persistent"),
            index("ecc_corrected_rate"),
        ) else {
            panic!("features renamed");
        };
        // A list as agents saved it before held terms were saved by name: 29 terms in
        // LISTED_FEATURES order. Kept features keep their evidence, retired ones
        // (ecc_corrected_rising, second) are dropped, new ones start at zero.
        let listed: Vec<String> = (1..=LISTED_FEATURES.len())
            .map(|i| format!("{i}.0"))
            .collect();
        let older = format!(
            r#"{{"at": 100, "held": [{}], "since": [null, null, null, null, null, null, null]}}"#,
            listed.join(", ")
        );
        let hold: Hold = match serde_json::from_str(&older) {
            Ok(hold) => hold,
            Err(e) => panic!("{e}"),
        };
        assert_eq!(hold.held[days], 1.0);
        assert_eq!(hold.held[gap], 29.0);
        assert_eq!(hold.held[rate], 0.0);
        assert!(!hold.held.contains(&2.0), "a retired feature's term loaded");
        // By name, round trip; unknown names and garbage are no evidence.
        let again: Hold = match serde_json::to_string(&hold).map(|j| serde_json::from_str(&j)) {
            Ok(Ok(hold)) => hold,
            other => panic!("{other:?}"),
        };
        assert_eq!(again, hold);
        let bad: Hold = match serde_json::from_str(
            r#"{"held": {"ecc_corrected_days": -1.0, "ecc_corrected_rate": 3.0, "gone": 4.0}}"#,
        ) {
            Ok(hold) => hold,
            Err(e) => panic!("{e}"),
        };
        assert_eq!((bad.held[days], bad.held[rate]), (0.0, 3.0));
        assert_eq!(bad.held.iter().sum::<f64>(), 3.0);
    }
}
