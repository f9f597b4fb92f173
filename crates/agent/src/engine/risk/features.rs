//! The risk model's features: what a GPU's windows and running state say about its health,
//! as numbers that mean the same on every GPU (docs/detection.md, "What is scored").
//!
//! Three normalisations replace absolute levels:
//! - **rates with their uncertainty**: every error counter (corrected ECC, PCIe replays,
//!   NVLink errors, hardware XIDs, failed and slow NVML collections, hours of unstable
//!   power) is read as a
//!   noisy rate against the GPU's own baseline, a likelihood ratio in nats of "the rate went
//!   up and stayed up" over hourly counts that are capped, so a one-off burst is one bad
//!   hour and a climb is many ([`super::rate`]);
//! - **the GPU's own baseline**: a rate against its own previous days, the memory–GPU gap
//!   against its own gap at similar utilization, power spread against its own; a warm-up
//!   without history gives these features nothing rather than a guess;
//! - **node peers**: what every GPU of the node shares (a room's cooling, a driver reload,
//!   a platform's replay storm) is subtracted as the node's median ([`super::Peers`]).
//!
//! Counts enter as `ln(1 + x)`, so a weight reads as "log-odds per e-fold" and no burst
//! outweighs everything else. Every feature is 0 on a healthy GPU with nothing to report,
//! so a model's bias is the healthy score.

use super::RiskInput;
use super::peers::Shared;
use super::state::{CORRECTED, DAYS, REPLAYS, RollingDays};
use crate::engine::GpuState;
use crate::engine::window::{DAY, Summaries};
use crate::model::GpuSample;

/// Every feature the model can weigh, with what it measures. The order is the order of
/// [`features`]' output and of training columns. Saved state names its held terms
/// (`Hold`), so a feature may go anywhere in the list and state saved by an older agent
/// still loads.
pub const FEATURES: [(&str, &str); 32] = [
    (
        "ecc_corrected_days",
        "rolling days of the last 7 with corrected ECC errors, each counting up to 1 at 3 errors",
    ),
    (
        "ecc_corrected_rate",
        "the corrected ECC rate test: log-likelihood ratio (nats) of hourly counts, capped, against the GPU's own baseline rate or one error every four days, over windows of 6 h to 8 days",
    ),
    (
        "ecc_uncorrected_7d",
        "ln(1 + uncorrected ECC errors, last 7 days)",
    ),
    (
        "remapped_rows_new",
        "ln(1 + rows remapped lately, an uncorrectable-error remap twice; e-fold 3 days)",
    ),
    ("remap_pending", "1 when a row remap waits for a GPU reset"),
    (
        "retired_pages_new",
        "ln(1 + pages retired lately, a double-bit retirement twice; e-fold 3 days)",
    ),
    (
        "retired_pages_pending",
        "1 when a page retirement waits for a driver reload",
    ),
    (
        "xid_hardware_7d",
        "ln(1 + hardware-fault XIDs, last 7 days)",
    ),
    (
        "xid_hardware_rate",
        "the hardware-XID rate test (nats) against the GPU's own baseline or one a month, less the node's median",
    ),
    (
        "pcie_replays_rate",
        "the PCIe replay rate test (nats) against the GPU's own baseline or 0.5 an hour, less the node's median",
    ),
    (
        "pcie_replays_vs_peers",
        "ln(1 + last day's replays ÷ 240), less the node's median",
    ),
    (
        "pcie_link_degraded",
        "share of recent loaded time (e-fold 2 h) with the link below its maximum width or generation (reported, or the best it showed under load)",
    ),
    (
        "nvlink_errors_per_hour",
        "ln(1 + NVLink CRC, replay and recovery errors per hour over the last 24 h), less the node's median",
    ),
    (
        "nvlink_errors_rate",
        "the NVLink error rate test (nats) against the GPU's own baseline or one every four hours, less the node's median",
    ),
    (
        "memory_gap_vs_baseline",
        "(memory − GPU temperature gap above the GPU's own gap at similar utilization, less the node's median, − 5 °C) / 5, when above",
    ),
    (
        "memory_temperature_gap",
        "(memory − GPU temperature, last hour's mean, − 15 °C) / 5, when above",
    ),
    (
        "temperature_vs_peers",
        "(GPU temperature beyond 80 °C, last hour's mean, beyond the node's median, − 3 °C) / 5, when above",
    ),
    (
        "thermal_slowdown_24h",
        "ln(1 + percent of the last 24 h in thermal slowdown beyond the node's median), less what a node running hot explains",
    ),
    (
        "hw_slowdown_share",
        "ln(1 + percent of recent time (e-fold 6 h) in hardware slowdown without power brake or thermal reason, beyond the node's median)",
    ),
    (
        "power_brake_24h",
        "ln(1 + percent of the last 24 h under the hardware power brake beyond the node's median)",
    ),
    (
        "power_erratic",
        "ln(1 + last hour's power residual against the GPU's own utilization → power line, over the GPU's normal residual or 2% of the limit, ÷ 2.5% of the limit), less what a node running hot explains",
    ),
    (
        "power_unstable_hours",
        "the rate test (nats) of hours whose power residual is over twice the GPU's normal and 2% of the limit beyond it, against the GPU's own rate or one every two days, less the node's median and what a node running hot explains",
    ),
    (
        "failed_calls_per_collection",
        "ln(1 + 10 × NVML calls failing per collection, last hour, beyond the node's median)",
    ),
    (
        "failed_calls_rate",
        "the failed NVML call rate test (nats) against the GPU's own baseline or one an hour, less the node's median",
    ),
    (
        "collect_seconds_level",
        "ln(1 + mean collection time of this GPU, last hour without its slowest collection, beyond the node's median ÷ 0.25 s)",
    ),
    (
        "collect_slowdown",
        "ln(collection time, last hour without its slowest collection ÷ the week's baseline or 50 ms if more), when slower, beyond the node's median",
    ),
    (
        "collect_slow_rate",
        "the rate test (nats) of collections taking 0.25 s or more, against the GPU's own rate or one a day, less the node's median",
    ),
    (
        "temperature_vs_baseline",
        "(GPU temperature above the GPU's own at similar power, last hour, less the node's median, − 4 °C) / 4, when above, less what a node running hot explains",
    ),
    (
        "thermal_slowdown_rise",
        "ln(1 + percent of the last day's loaded time in thermal slowdown) over the same for the median of the GPU's previous days, less the node's median and what a node running hot explains",
    ),
    (
        "memory_gap_persistent",
        "(memory − GPU temperature above the GPU's own gap at similar utilization, averaged over about a day, less the node's median, − 2 °C) / 2, when above",
    ),
    (
        "temperature_persistent",
        "(GPU temperature above the GPU's own at similar power, averaged over about a day, less the node's median, − 2 °C) / 2, when above, less what a node running hot explains",
    ),
    (
        "memory_gap_lasting",
        "(memory − GPU temperature above the GPU's own gap at similar utilization, averaged over about three days, less the node's median, − 2 °C) / 2, when above",
    ),
];

/// Whether `name` begins with `prefix`, usable where a constant is computed.
pub const fn starts_with(name: &str, prefix: &str) -> bool {
    let (name, prefix) = (name.as_bytes(), prefix.as_bytes());
    if name.len() < prefix.len() {
        return false;
    }
    let mut i = 0;
    while i < prefix.len() {
        if name[i] != prefix[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// Whether `name` ends with `suffix`, usable where a constant is computed.
pub(crate) const fn ends_with(name: &str, suffix: &str) -> bool {
    let (name, suffix) = (name.as_bytes(), suffix.as_bytes());
    if name.len() < suffix.len() {
        return false;
    }
    let start = name.len() - suffix.len();
    let mut i = 0;
    while i < suffix.len() {
        if name[start + i] != suffix[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// The index of feature `name` in [`FEATURES`]; evaluated for a constant, a name that is
/// not a feature's fails to compile.
pub const fn feature_index(name: &str) -> usize {
    let mut i = 0;
    while i < FEATURES.len() {
        let known = FEATURES[i].0;
        if known.len() == name.len() && starts_with(known, name) {
            return i;
        }
        i += 1;
    }
    panic!("not a risk feature's name")
}

/// Whether feature `i` ([`FEATURES`] order) is a rate test's log-likelihood ratio
/// ([`super::rate`]): evidence in nats, which a model should weigh by at most one.
pub fn is_likelihood_ratio(i: usize) -> bool {
    i < FEATURES.len() && is_rate_test(FEATURES[i].0)
}

/// Whether the feature named `name` is a rate test's log-likelihood ratio, usable where a
/// constant is computed: the rate tests' names end in `_rate`, and the unstable power
/// hours are one too.
pub(crate) const fn is_rate_test(name: &str) -> bool {
    const UNSTABLE_HOURS: &str = "power_unstable_hours";
    ends_with(name, "_rate")
        || (name.len() == UNSTABLE_HOURS.len() && starts_with(name, UNSTABLE_HOURS))
}

/// The collection time at which a GPU's NVML calls count as slow: healthy reads take
/// milliseconds, GSP RPC timeouts take seconds.
pub(crate) const SLOW_COLLECTION_SECONDS: f64 = 0.25;

/// Below this mean collection time a GPU is not slow, whatever its baseline: a moment's
/// load on the host must not read as a failing GSP.
const COLLECTION_FLOOR_SECONDS: f64 = 0.05;

/// Collections the last hour must hold before its collection time says anything, which
/// is then their mean without the slowest one: the first read after the agent or the
/// driver starts again, or after a gap in a log, is slow (the driver loads, caches are
/// cold), and alone in its hour, or beside two ordinary reads, it would read as a GPU
/// slowing down. A slowing GSP slows every collection of the hour.
const HOUR_COLLECTIONS: u32 = 3;

/// PCIe replays in a day that healthy links show now and then (one burst of a hundred in
/// a day weighs little); day counts are compared on the scale of `ln(1 + count / this)`.
const ORDINARY_REPLAYS_PER_DAY: f64 = 240.0;

/// Corrected errors in a day at which that day counts fully as a day with errors: an
/// isolated error is a third of a day of evidence.
const CORRECTED_FULL_DAY: f64 = 3.0;

/// Power residual a GPU shows at steady load from sensor noise and clock boosts, as a share
/// of its power limit: a normal below it counts as it.
const STEADY_POWER_SPREAD: f64 = 0.02;

/// Previous days a rate baseline needs before it is trusted.
const BASELINE_DAYS: usize = 2;

/// `ln(1 + x)` as [`f64::ln_1p`] gives it, a zero returned as it is (as `ln_1p` returns
/// it) without a call into the maths library: most features are zero at most steps.
trait Ln1p {
    fn ln1p(self) -> f64;
}

impl Ln1p for f64 {
    #[inline]
    fn ln1p(self) -> f64 {
        if self == 0.0 { self } else { self.ln_1p() }
    }
}

/// What one GPU shows on its own, before the node's median is taken away.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Signals {
    pub(crate) ecc_days: f64,
    pub(crate) ecc_rate: f64,
    pub uncorrected: f64,
    pub remaps: f64,
    pub remap_pending: bool,
    pub retired: f64,
    pub retired_pending: bool,
    pub xids: f64,
    pub(crate) link_degraded: f64,
    pub(crate) memory_gap: f64,
    pub(crate) power_erratic: f64,
    /// What the node's GPUs may share, peer-subtracted in [`features`].
    pub shared: Shared,
}

impl Signals {
    /// A GPU's signals at `now`, from its state, its windows summarised at `now`, and
    /// this step's sample (None when the snapshot misses the GPU).
    pub fn of(
        now: i64,
        state: &GpuState,
        windows: &Summaries,
        sample: Option<&GpuSample>,
    ) -> Signals {
        let (hour, day, base) = (&windows.hour, &windows.day, &windows.baseline);
        let risk = &state.risk;
        let per_hour = |count: f64, seconds: f64| {
            // Counts of the last day are taken over the whole day, observed or not: a burst
            // in a fresh agent's first minutes must not read as thousands a day.
            if seconds > 0.0 {
                count * 3600.0 / seconds.max(DAY as f64)
            } else {
                0.0
            }
        };
        let share = |seconds: f64| {
            if day.seconds > 0.0 {
                (seconds / day.seconds.max(DAY as f64)).clamp(0.0, 1.0)
            } else {
                0.0
            }
        };
        let days = &risk.days;
        let corrected = |d: usize| days.count(CORRECTED, d);
        let replays = |d: usize| days.count(REPLAYS, d);
        let replay_scale = |count: f64| (count / ORDINARY_REPLAYS_PER_DAY).ln1p();

        let ecc_days = (0..DAYS)
            .map(|d| (corrected(d) / CORRECTED_FULL_DAY).min(1.0))
            .sum();
        let replay_level = replay_scale(replays(0));
        let rates = &risk.rates;

        let thermal_rise = thermal_rise(days);

        let rows = sample.and_then(|s| s.remapped_rows);
        let pages = sample.and_then(|s| s.retired_pages);
        let nvlink_hour = per_hour(day.deltas.nvlink_errors, day.seconds);
        let collect = &hour.collect_seconds;
        let collect_now = (collect.n >= HOUR_COLLECTIONS)
            .then(|| (collect.sum - hour.collect_slowest) / f64::from(collect.n - 1));
        let collect_slowdown = match (collect_now, base.collect_seconds.mean()) {
            (Some(now), Some(base)) if now > base.max(COLLECTION_FLOOR_SECONDS) => {
                (now / base.max(COLLECTION_FLOOR_SECONDS)).ln()
            }
            _ => 0.0,
        };
        let power = &risk.power;
        // Against the GPU's own normal spread only: before it is learnt, a draw that always
        // swings (an all-reduce phase) would read as erratic.
        let power_erratic = power.normal.get().map_or(0.0, |normal| {
            ((power.unexplained - normal.max(STEADY_POWER_SPREAD)) / 0.025)
                .max(0.0)
                .ln1p()
        });
        Signals {
            ecc_days,
            ecc_rate: rates.ecc_corrected.llr(),
            uncorrected: windows.week.deltas.ecc_uncorrected.ln1p(),
            remaps: risk.remaps.at_time(now).ln1p(),
            remap_pending: rows.is_some_and(|r| r.pending),
            retired: risk.retired.at_time(now).ln1p(),
            retired_pending: pages.is_some_and(|p| p.pending),
            xids: windows.week.deltas.xid_hardware.ln1p(),
            link_degraded: risk.link_degraded.clamp(0.0, 1.0),
            memory_gap: hour.memory_gap.mean().unwrap_or(0.0),
            power_erratic,
            shared: Shared {
                collect_slowdown,
                replay_level,
                replay_rate: rates.pcie_replays.llr(),
                nvlink_rate: rates.nvlink_errors.llr(),
                xid_rate: rates.xid_hardware.llr(),
                failed_rate: rates.failed_calls.llr(),
                slow_rate: rates.slow_collections.llr(),
                power_unstable: power.unstable.llr(),
                nvlink_level: nvlink_hour.ln1p(),
                gap_deviation: risk.gap.deviation.unwrap_or(0.0),
                temperature_excess: (hour.temperature.mean().unwrap_or(0.0) - 80.0).max(0.0),
                temperature_deviation: risk.temperature.deviation.unwrap_or(0.0),
                gap_persistent: risk.gap.deviation_day.unwrap_or(0.0),
                temperature_persistent: risk.temperature.deviation_day.unwrap_or(0.0),
                gap_lasting: risk.gap.deviation_days.unwrap_or(0.0),
                thermal_share: share(day.thermal_slowdown_seconds),
                thermal_rise,
                hw_slowdown_share: risk.hw_slowdown.clamp(0.0, 1.0),
                brake_share: share(day.power_brake_seconds),
                failed_per_collection: if hour.samples > 0 {
                    hour.deltas.failed_calls / f64::from(hour.samples)
                } else {
                    0.0
                },
                collect_seconds: collect_now.unwrap_or(0.0),
            },
        }
    }
}

/// Loaded seconds a rolling day needs before its thermal-slowdown share means anything:
/// an idle day slows down for no one, and a GPU back at work after idle days is not
/// compared with them.
const LOADED_DAY_SECONDS: f64 = 2.0 * 3600.0;

/// `ln(1 + percent of loaded time in thermal slowdown)` of the last day over the same for
/// the median of the GPU's previous loaded days: a GPU that always ran into its thermal
/// limit is its own normal, one whose cooling degrades slows down more day after day.
fn thermal_rise(days: &RollingDays) -> f64 {
    let share = |d: usize| {
        let s = days.slowdown(d);
        (s.loaded >= LOADED_DAY_SECONDS).then(|| (100.0 * (s.thermal / s.loaded).min(1.0)).ln1p())
    };
    let Some(today) = share(0) else {
        return 0.0;
    };
    previous_median(days, share).map_or(0.0, |median| (today - median).max(0.0))
}

/// The median of `value` over the previous days the GPU was watched (None where `value`
/// gives none), once [`BASELINE_DAYS`] of them have one: one noisy day does not move it.
fn previous_median(days: &RollingDays, value: impl Fn(usize) -> Option<f64>) -> Option<f64> {
    let mut previous = [0.0; DAYS];
    let mut n = 0;
    for v in days.observed_days().filter_map(value) {
        previous[n] = v;
        n += 1;
    }
    if n < BASELINE_DAYS {
        return None;
    }
    let previous = &mut previous[..n];
    previous.sort_by(f64::total_cmp);
    Some((previous[(n - 1) / 2] + previous[n / 2]) / 2.0)
}

/// Degrees the node's median GPU runs above its own normal at the same power from which
/// the node's heat starts to explain thermal slowdown, and over which it explains all.
const NODE_HEAT_FROM: f64 = 2.0;
const NODE_HEAT_SPAN: f64 = 4.0;

/// Degrees a day-long deviation from the GPU's own temperature or memory gap must pass
/// before it counts, and the degrees that make one unit of it.
const PERSISTENT_DEGREES: f64 = 2.0;

/// Feature values in [`FEATURES`] order.
pub fn features(input: &RiskInput<'_>) -> [f64; FEATURES.len()] {
    let s = input.signals;
    // What this GPU shows beyond the node's median GPU; the whole value on a node without
    // enough GPUs to have a median.
    let own = input.peers.beyond(&s.shared);
    // A node running hotter than its own normal at the same power (a room or CDU in
    // trouble) explains what heat does to its GPUs: the hottest of them, at the end of the
    // airflow, slow down first with nothing wrong with them; an idle GPU warms by more
    // degrees than a busy one when the inlet air warms towards its limit; clocks and
    // power swing as they throttle.
    let node_heat = input
        .peers
        .median
        .as_ref()
        .map_or(0.0, |m| m.temperature_deviation);
    let unexplained = 1.0 - ((node_heat - NODE_HEAT_FROM) / NODE_HEAT_SPAN).clamp(0.0, 1.0);
    let flag = |on: bool| if on { 1.0 } else { 0.0 };
    let percent = |share: f64| (100.0 * share).ln1p();
    [
        s.ecc_days,
        s.ecc_rate,
        s.uncorrected,
        s.remaps,
        flag(s.remap_pending),
        s.retired,
        flag(s.retired_pending),
        s.xids,
        own.xid_rate,
        own.replay_rate,
        own.replay_level,
        s.link_degraded,
        own.nvlink_level,
        own.nvlink_rate,
        ((own.gap_deviation - 5.0) / 5.0).max(0.0),
        ((s.memory_gap - 15.0) / 5.0).max(0.0),
        ((own.temperature_excess - 3.0) / 5.0).max(0.0),
        unexplained * percent(own.thermal_share),
        percent(own.hw_slowdown_share),
        percent(own.brake_share),
        unexplained * s.power_erratic,
        unexplained * own.power_unstable,
        (10.0 * own.failed_per_collection).ln1p(),
        own.failed_rate,
        (own.collect_seconds / SLOW_COLLECTION_SECONDS).ln1p(),
        own.collect_slowdown,
        own.slow_rate,
        unexplained * ((own.temperature_deviation - 4.0) / 4.0).max(0.0),
        unexplained * own.thermal_rise,
        // Persistence: a few degrees held for a day are a cooling that degrades, where the
        // hour's deviation needs more to stand out of a bursty job's swings.
        ((own.gap_persistent - PERSISTENT_DEGREES) / PERSISTENT_DEGREES).max(0.0),
        unexplained
            * ((own.temperature_persistent - PERSISTENT_DEGREES) / PERSISTENT_DEGREES).max(0.0),
        ((own.gap_lasting - PERSISTENT_DEGREES) / PERSISTENT_DEGREES).max(0.0),
    ]
}
