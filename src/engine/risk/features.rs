//! The risk model's features: what a GPU's windows say about its health, as numbers.
//!
//! Counts enter as `ln(1 + rate)`, so a weight reads as "log-odds per e-fold of the rate"
//! and a burst of a thousand errors cannot outweigh everything else. Trends compare the
//! last day with the GPU's own week before it (the baseline); level features catch what
//! has been rising for longer than the baseline can show. Every feature is 0 on a healthy
//! GPU with nothing to report, so a model's bias is the healthy score.

use super::RiskInput;
use crate::engine::window::{DAY, Summaries};

/// Every feature the model can weigh, with what it measures. The order is the order of
/// [`features`]' output and of training columns.
pub const FEATURES: [(&str, &str); 19] = [
    (
        "ecc_corrected_per_day",
        "ln(1 + corrected ECC errors in the last 24 h)",
    ),
    (
        "ecc_corrected_trend",
        "ln(1 + last-day rate) − ln(1 + the week's baseline rate), when rising",
    ),
    (
        "ecc_uncorrected_7d",
        "ln(1 + uncorrected ECC errors, last 7 days)",
    ),
    (
        "remapped_rows",
        "ln(1 + rows remapped, correctable and uncorrectable)",
    ),
    ("remap_pending", "1 when a row remap waits for a GPU reset"),
    (
        "xid_hardware_7d",
        "ln(1 + hardware-fault XIDs, last 7 days)",
    ),
    (
        "pcie_replays_per_hour",
        "ln(1 + PCIe replays per hour over the last 24 h ÷ 10)",
    ),
    (
        "pcie_replays_vs_baseline",
        "the same for the last 24 h − for the week's baseline, when rising",
    ),
    (
        "pcie_replays_vs_peers",
        "the same for the last 24 h − for the node's median GPU, when above",
    ),
    (
        "nvlink_errors_per_hour",
        "ln(1 + NVLink CRC, replay and recovery errors per hour over the last 24 h)",
    ),
    (
        "nvlink_errors_vs_baseline",
        "ln(1 + NVLink errors per hour, last 24 h) − ln(1 + the week's baseline), when rising",
    ),
    (
        "memory_temperature_gap",
        "(memory − GPU temperature, last hour's mean, − 15 °C) / 5, when above",
    ),
    (
        "temperature_level",
        "(GPU temperature, last hour's mean, − 80 °C) / 5, when above",
    ),
    (
        "thermal_slowdown_24h",
        "ln(1 + percent of the last 24 h in thermal slowdown)",
    ),
    (
        "power_brake_24h",
        "ln(1 + percent of the last 24 h under the hardware power brake)",
    ),
    (
        "power_erratic",
        "ln(power's standard deviation ÷ what utilization explains), last hour, when above",
    ),
    (
        "failed_calls_per_collection",
        "ln(1 + 10 × NVML calls failing per collection, last hour)",
    ),
    (
        "collect_seconds_level",
        "ln(1 + mean collection time of this GPU, last hour ÷ 0.25 s)",
    ),
    (
        "collect_slowdown",
        "ln(collection time, last hour ÷ the week's baseline or 50 ms if more), when slower",
    ),
];

/// The collection time at which a GPU's NVML calls count as slow: healthy reads take
/// milliseconds, GSP RPC timeouts take seconds.
const SLOW_COLLECTION_SECONDS: f64 = 0.25;

/// Below this mean collection time a GPU is not slow, whatever its baseline: a moment's
/// load on the host must not read as a failing GSP.
const COLLECTION_FLOOR_SECONDS: f64 = 0.05;

/// PCIe replays per hour that healthy links show now and then (one burst of a hundred in a
/// day is 4 an hour); rates are compared on the scale of `ln(1 + rate / this)`.
const ORDINARY_REPLAYS_PER_HOUR: f64 = 10.0;

/// Power swing a GPU shows at steady load from sensor noise and clock boosts, as a share
/// of its power limit.
const STEADY_POWER_SWING: f64 = 0.03;

/// Feature values in [`FEATURES`] order.
pub fn features(input: &RiskInput<'_>) -> [f64; FEATURES.len()] {
    let Summaries {
        hour,
        day,
        week,
        baseline: base,
    } = input.windows;
    // Counts of the last day are taken over the whole day, observed or not: a burst in
    // the first minutes of a fresh agent must not read as a rate of thousands a day.
    let per_hour = |count: f64, seconds: f64| {
        if seconds > 0.0 {
            count * 3600.0 / seconds.max(DAY as f64)
        } else {
            0.0
        }
    };
    // Shares of the day likewise: two minutes under the power brake in a fresh agent's
    // first two minutes are not a day spent there.
    let share = |seconds: f64| {
        if day.seconds > 0.0 {
            (seconds / day.seconds.max(DAY as f64)).clamp(0.0, 1.0)
        } else {
            0.0
        }
    };
    let rising = |recent: f64, baseline: f64| (recent.ln_1p() - baseline.ln_1p()).max(0.0);

    let corrected_day = day.deltas.ecc_corrected;
    let corrected_base = base.per_day(base.deltas.ecc_corrected);
    let replays = |per_hour: f64| (per_hour / ORDINARY_REPLAYS_PER_HOUR).ln_1p();
    let replays_hour = replays(per_hour(day.deltas.pcie_replays, day.seconds));
    let replays_base = replays(per_hour(base.deltas.pcie_replays, base.seconds));
    let nvlink_hour = per_hour(day.deltas.nvlink_errors, day.seconds);
    let nvlink_base = per_hour(base.deltas.nvlink_errors, base.seconds);
    let rows = input.sample.and_then(|s| s.remapped_rows);
    let remapped = rows.map_or(0.0, |r| {
        r.correctable.saturating_add(r.uncorrectable) as f64
    });
    let pending = rows.is_some_and(|r| r.pending);
    let gap = hour.memory_gap.mean().unwrap_or(0.0);
    let temp = hour.temperature.mean().unwrap_or(0.0);
    let failed_per_collection = if hour.samples > 0 {
        hour.deltas.failed_calls / f64::from(hour.samples)
    } else {
        0.0
    };
    let collect_now = hour.collect_seconds.mean();
    let collect_base = base.collect_seconds.mean();
    let collect_slowdown = match (collect_now, collect_base) {
        (Some(now), Some(base)) if now > base.max(COLLECTION_FLOOR_SECONDS) => {
            (now / base.max(COLLECTION_FLOOR_SECONDS)).ln()
        }
        _ => 0.0,
    };
    // Power should move with utilization; what it does beyond that, relative to the GPU's
    // power limit (or the most it drew this week where the limit is unknown), is erratic.
    let scale = input
        .sample
        .and_then(|s| s.power_limit_watts)
        .or(week.power.max())
        .unwrap_or(0.0);
    let power_erratic = match (hour.power.std_dev(), hour.utilization.std_dev()) {
        (Some(power), Some(util)) if scale > 0.0 && hour.power.n >= 3 => (power
            / (scale * (util + STEADY_POWER_SWING)))
            .ln()
            .max(0.0),
        _ => 0.0,
    };
    [
        corrected_day.ln_1p(),
        rising(corrected_day, corrected_base),
        week.deltas.ecc_uncorrected.ln_1p(),
        remapped.ln_1p(),
        if pending { 1.0 } else { 0.0 },
        week.deltas.xid_hardware.ln_1p(),
        replays_hour,
        (replays_hour - replays_base).max(0.0),
        input
            .peers
            .median_replays_per_hour
            .map_or(0.0, |median| (replays_hour - replays(median)).max(0.0)),
        nvlink_hour.ln_1p(),
        rising(nvlink_hour, nvlink_base),
        ((gap - 15.0) / 5.0).max(0.0),
        ((temp - 80.0) / 5.0).max(0.0),
        (100.0 * share(day.thermal_slowdown_seconds)).ln_1p(),
        (100.0 * share(day.power_brake_seconds)).ln_1p(),
        power_erratic,
        (10.0 * failed_per_collection).ln_1p(),
        (collect_now.unwrap_or(0.0) / SLOW_COLLECTION_SECONDS).ln_1p(),
        collect_slowdown,
    ]
}
