//! What one step's readings say of each GPU component. Each judge returns `None` when the
//! readings cannot tell (the GPU does not answer, an idle link whose generation says
//! nothing), so the held state stays; otherwise the state, action and a reason with the
//! numbers.
//!
//! Limits and their sources ([`links`] has the PCIe and NVLink ones):
//! - retired pages: 60 in all, 15 for double-bit errors (DCGM's `DCGM_LIMIT_MAX_RETIRED_PAGES`
//!   and its soft limit); a failed row remap is NVIDIA's replacement signal, a pending one
//!   asks for a reset;
//! - slowdowns: a GPU slowed down (thermal, or the power brake) now is degraded; slowed
//!   down for more than half of the last hour, more often slowed than not, its cooling or
//!   power delivery cannot hold the load: unhealthy;
//! - clocks stuck low: the SM clock under half its maximum for 5 minutes while the GPU is
//!   busy and no clock-event reason (power cap, thermal, hardware slowdown, a clock
//!   setting) explains it;
//! - NVML: a second to read a GPU (a healthy one answers in milliseconds), or three calls
//!   failing within an hour.

use std::fmt::Write as _;

use super::hold::{Found, Reason, found, healthy};
use super::{Action, GpuHealthState, State, links, xid};
use crate::engine::GpuFindings;
use crate::engine::window::Sums;
use crate::model::{ClockEvents, GpuSample, normalize_pci_bus_id};

const RETIRED_PAGES_LIMIT: u64 = 60;
const RETIRED_DBE_PAGES_LIMIT: u64 = 15;
/// Share of the last hour in slowdown past which the cooling or power delivery is at fault.
const SLOWDOWN_SHARE: f64 = 0.5;
/// Observed time in the last hour before that share is read.
const SLOWDOWN_OBSERVED_SECONDS: f64 = 600.0;
const CLOCKS_LOW_RATIO: f64 = 0.5;
const CLOCKS_LOW_BUSY: f64 = 0.5;
const CLOCKS_LOW_SECONDS: i64 = 300;
const SLOW_READ_SECONDS: f64 = 1.0;
const FAILED_CALLS_PER_HOUR: f64 = 3.0;

/// Clock-event reasons that explain low clocks.
const CLOCK_REASONS: u64 = ClockEvents::APPLICATIONS_CLOCKS_SETTING
    | ClockEvents::SW_POWER_CAP
    | ClockEvents::HW_SLOWDOWN
    | ClockEvents::SYNC_BOOST
    | ClockEvents::SW_THERMAL_SLOWDOWN
    | ClockEvents::HW_THERMAL_SLOWDOWN
    | ClockEvents::HW_POWER_BRAKE_SLOWDOWN
    | ClockEvents::DISPLAY_CLOCK_SETTING;

/// What a GPU's components are judged from at one step.
pub(crate) struct Input<'a> {
    pub now: i64,
    /// The GPU's sample; `None` when the snapshot does not list it.
    pub sample: Option<&'a GpuSample>,
    pub finding: &'a GpuFindings,
    /// The last hour of the GPU's windows.
    pub hour: &'a Sums,
    pub risk_threshold: f64,
    /// The NVIDIA GPUs on the PCI bus, where it was read.
    pub pci_gpus: Option<&'a [String]>,
    pub bus_id: &'a str,
}

/// Every GPU component's evidence, in [`super::GPU_COMPONENTS`] order; updates what the
/// components compare with (links seen, the link's best, counters, resets).
pub fn judge(input: &Input<'_>, state: &mut GpuHealthState) -> [Option<Found>; 8] {
    let up = input.sample.filter(|s| s.up);
    let deltas = up.map(|s| links::note_counters(input.now, s, state));
    let found = [
        up.and_then(memory),
        up.and_then(|s| thermal(s, input.hour)),
        up.and_then(|s| power(input.now, s, input.hour, state)),
        up.and_then(|s| links::pcie(s, input.hour, state)),
        up.and_then(|s| links::nvlink(s, deltas.as_ref(), state)),
        xids(input.now, state),
        driver(input, state),
        risk(input),
    ];
    if let Some(s) = input.sample {
        state.answered = Some(s.up);
    }
    found
}

fn memory(s: &GpuSample) -> Option<Found> {
    let remapped = s.remapped_rows;
    let retired = s.retired_pages;
    if let Some(r) = remapped.filter(|r| r.failure) {
        return found(
            State::Unhealthy,
            Action::InspectHardware,
            format!(
                "row remapping failed ({} rows remapped for uncorrectable, {} for correctable \
                 errors): NVIDIA's sign to replace the GPU",
                r.uncorrectable, r.correctable
            ),
        );
    }
    if let Some(p) = retired.filter(|p| p.sbe + p.dbe >= RETIRED_PAGES_LIMIT) {
        return found(
            State::Unhealthy,
            Action::InspectHardware,
            format!(
                "{} pages retired ({} single-bit, {} double-bit): at the limit of {RETIRED_PAGES_LIMIT}",
                p.sbe + p.dbe,
                p.sbe,
                p.dbe
            ),
        );
    }
    if let Some(r) = remapped.filter(|r| r.pending) {
        return found(
            State::Degraded,
            Action::ResetGpu,
            format!(
                "a row remap is pending ({} rows remapped for uncorrectable errors): it \
                 applies at the next GPU reset",
                r.uncorrectable
            ),
        );
    }
    if let Some(p) = retired.filter(|p| p.pending) {
        return found(
            State::Degraded,
            Action::ResetGpu,
            format!(
                "a page retirement is pending ({} pages retired): it applies at the next GPU reset",
                p.sbe + p.dbe
            ),
        );
    }
    if let Some(p) = retired.filter(|p| p.dbe >= RETIRED_DBE_PAGES_LIMIT) {
        return found(
            State::Degraded,
            Action::InspectHardware,
            format!(
                "{} pages retired for double-bit errors: past the limit of {RETIRED_DBE_PAGES_LIMIT}",
                p.dbe
            ),
        );
    }
    if let Some(n) = s.ecc.uncorrected_volatile.filter(|n| *n > 0) {
        return found(
            State::Degraded,
            Action::ResetGpu,
            format!("{n} uncorrectable ECC errors since the GPU was last reset"),
        );
    }
    healthy(
        "no failed or pending remap or retirement; no uncorrectable ECC error since the last reset",
    )
}

fn minutes(seconds: f64) -> f64 {
    (seconds / 60.0).round()
}

fn celsius(t: Option<f64>) -> String {
    t.map_or_else(|| "?".into(), |t| format!("{t:.0} C"))
}

fn thermal(s: &GpuSample, hour: &Sums) -> Option<Found> {
    // Formatted only for a reason: a step of a replay judges millions of healthy GPUs.
    let temperatures = || {
        format!(
            "GPU {}, HBM {}",
            celsius(s.temperature_celsius),
            celsius(s.memory_temperature_celsius)
        )
    };
    if hour.seconds >= SLOWDOWN_OBSERVED_SECONDS
        && hour.thermal_slowdown_seconds > SLOWDOWN_SHARE * hour.seconds
    {
        return found(
            State::Unhealthy,
            Action::InspectHardware,
            format!(
                "thermal slowdown {:.0} of the last {:.0} minutes ({}): check its cooling",
                minutes(hour.thermal_slowdown_seconds),
                minutes(hour.seconds),
                temperatures()
            ),
        );
    }
    let events = s.clock_events.unwrap_or_default();
    if events.thermal() {
        let kind = if events.intersects(ClockEvents::HW_THERMAL_SLOWDOWN) {
            "hardware"
        } else {
            "software"
        };
        return found(
            State::Degraded,
            Action::InspectHardware,
            format!("{kind} thermal slowdown now ({})", temperatures()),
        );
    }
    healthy("no thermal slowdown")
}

fn power(now: i64, s: &GpuSample, hour: &Sums, state: &mut GpuHealthState) -> Option<Found> {
    let events = s.clock_events.unwrap_or_default();
    let low = match (s.clocks.sm, s.clocks_max.sm, s.utilization.gpu) {
        (Some(sm), Some(max), Some(busy)) => {
            max > 0
                && f64::from(sm) < CLOCKS_LOW_RATIO * f64::from(max)
                && busy >= CLOCKS_LOW_BUSY
                && !events.intersects(CLOCK_REASONS)
        }
        _ => false,
    };
    state.clocks_low_since = match (low, state.clocks_low_since) {
        (false, _) => None,
        (true, since) => Some(since.unwrap_or(now)),
    };
    let watts = |w: Option<f64>| w.map_or_else(|| "?".into(), |w| format!("{w:.0} W"));
    if hour.seconds >= SLOWDOWN_OBSERVED_SECONDS
        && hour.power_brake_seconds > SLOWDOWN_SHARE * hour.seconds
    {
        return found(
            State::Unhealthy,
            Action::InspectHardware,
            format!(
                "hardware power brake {:.0} of the last {:.0} minutes: failing power delivery",
                minutes(hour.power_brake_seconds),
                minutes(hour.seconds)
            ),
        );
    }
    if events.intersects(ClockEvents::HW_POWER_BRAKE_SLOWDOWN) {
        return found(
            State::Degraded,
            Action::InspectHardware,
            format!(
                "hardware power brake now (drawing {} of {})",
                watts(s.power_watts),
                watts(s.power_limit_watts)
            ),
        );
    }
    if events.intersects(ClockEvents::HW_SLOWDOWN) && !events.thermal() {
        return found(
            State::Degraded,
            Action::InspectHardware,
            format!(
                "hardware slowdown without a thermal cause now (drawing {} of {})",
                watts(s.power_watts),
                watts(s.power_limit_watts)
            ),
        );
    }
    if let Some(since) = state
        .clocks_low_since
        .filter(|t| now - t >= CLOCKS_LOW_SECONDS)
    {
        return found(
            State::Degraded,
            Action::ResetGpu,
            format!(
                "clocks stuck low: SM {} of {} MHz for {:.0} min at {:.0}% busy, no clock-event reason",
                s.clocks.sm.unwrap_or_default(),
                s.clocks_max.sm.unwrap_or_default(),
                minutes((now - since) as f64),
                s.utilization.gpu.unwrap_or_default() * 100.0
            ),
        );
    }
    healthy("no hardware slowdown or power brake; clocks follow the load")
}

/// Seconds as the reasons say them: `12 min`, `3 h`.
fn ago(seconds: i64) -> String {
    match seconds.max(0) {
        s if s < 3600 => format!("{} min", s / 60),
        s => format!("{} h", s / 3600),
    }
}

/// The XIDs that still count: inside their window and after the last reset.
fn counting(now: i64, state: &GpuHealthState) -> impl Iterator<Item = (i64, u32)> + '_ {
    let reset = state.reset_at.unwrap_or(i64::MIN);
    (state.xids.iter().copied())
        .filter(move |&(at, x)| at >= reset && now - at < xid::window_seconds(x))
}

fn xids(now: i64, state: &GpuHealthState) -> Option<Found> {
    // The worst, and of equals the newest.
    let Some((at, worst)) = counting(now, state).max_by_key(|&(at, x)| (xid::verdict(x), at))
    else {
        return healthy("no XID in the last 24 h");
    };
    let (level, action) = xid::verdict(worst);
    let mut others: Vec<u32> = counting(now, state)
        .map(|(_, x)| x)
        .filter(|x| *x != worst)
        .collect();
    others.sort_unstable();
    others.dedup();
    let mut text = format!(
        "XID {worst} {} ago: {}",
        ago(now - at),
        crate::xid::description(worst)
    );
    if !others.is_empty() {
        let listed: Vec<String> = others.iter().map(u32::to_string).collect();
        let _ = write!(text, "; also XID {}", listed.join(", "));
    }
    found(level, action, text)
}

fn driver(input: &Input<'_>, state: &GpuHealthState) -> Option<Found> {
    let lost_context = || {
        let mut text = String::new();
        if counting(input.now, state).any(|(_, x)| x == 79) {
            text.push_str(" after XID 79 (fell off the bus)");
        }
        let bus = normalize_pci_bus_id(input.bus_id);
        let on_bus = (input.pci_gpus.unwrap_or_default().iter())
            .any(|g| bus.is_some() && normalize_pci_bus_id(g) == bus);
        if on_bus {
            text.push_str("; still on the PCI bus");
        }
        text
    };
    let Some(s) = input.sample else {
        return input.finding.lost.then(|| Found {
            state: State::Unhealthy,
            action: Action::DrainAndReboot,
            reason: Reason::Text(format!("gone from NVML's device list{}", lost_context())),
        });
    };
    if !s.up {
        return found(
            State::Unhealthy,
            Action::DrainAndReboot,
            format!("does not answer NVML (GPU is lost){}", lost_context()),
        );
    }
    let failed = input.hour.deltas.failed_calls;
    if failed >= FAILED_CALLS_PER_HOUR {
        return found(
            State::Degraded,
            Action::ResetGpu,
            format!("{failed:.0} NVML calls failed in the last hour"),
        );
    }
    if s.collect_seconds >= SLOW_READ_SECONDS {
        return found(
            State::Degraded,
            Action::ResetGpu,
            format!(
                "NVML took {:.1} s to read the GPU (a healthy one answers in milliseconds)",
                s.collect_seconds
            ),
        );
    }
    if s.persistence_mode == Some(false) {
        return found(
            State::Degraded,
            Action::None,
            "persistence mode is off: the driver tears the GPU down between jobs \
             (nvidia-smi -pm 1, or run nvidia-persistenced)"
                .into(),
        );
    }
    healthy("answers NVML")
}

fn risk(input: &Input<'_>) -> Option<Found> {
    let risk = &input.finding.risk;
    if risk.score < input.risk_threshold {
        return healthy("failure risk under the threshold");
    }
    let mut text = format!(
        "failure risk {:.2} (threshold {:.2})",
        risk.score, input.risk_threshold
    );
    if let Some(rule) = &risk.rule {
        let _ = write!(text, ", rule {rule}");
    }
    let reasons: Vec<&str> = risk.top(3).map(|c| &*c.feature).collect();
    if !reasons.is_empty() {
        let _ = write!(text, ": {}", reasons.join(", "));
    }
    found(State::Degraded, Action::InspectHardware, text)
}
