//! The link components, PCIe and NVLink, and the counter bookkeeping their rates need.
//!
//! - PCIe: a link below the generation or width it reached (the generation only while the
//!   GPU is busy: an idle link steps down to save power); replays over the last hour at
//!   more than 8 a minute (DCGM's `DCGM_LIMIT_MAX_PCIREPLAY_RATE`, "the maximum
//!   recommended" by the driver), and at ten times that, a link that retrains all the time,
//!   the prelude of a GPU falling off the bus (over an hour, so one burst is not a storm);
//! - NVLink: a link that was active and is not; the fabric registration not started or
//!   failed; any replay or recovery error (DCGM's limit is 1), CRC errors at 100 a second
//!   (below that they "do not matter", by DCGM's note).

use std::fmt::Write as _;

use super::hold::{Found, found, healthy};
use super::{Action, GpuHealthState, LastCounters, State};
use crate::engine::window::Sums;
use crate::model::{FabricState, GpuSample};

const PCIE_REPLAYS_PER_MINUTE: f64 = 8.0;
const PCIE_FAILING_REPLAYS_PER_MINUTE: f64 = 10.0 * PCIE_REPLAYS_PER_MINUTE;
const NVLINK_CRC_PER_SECOND: f64 = 100.0;
/// Utilization from which a link runs at full generation (an idle one steps down).
const PCIE_BUSY: f64 = 0.1;

/// Rates of the error counters since the previous sample.
#[derive(Debug, Default)]
pub(crate) struct Deltas {
    seconds: f64,
    nvlink_crc: Option<u64>,
    nvlink_replay: Option<u64>,
    nvlink_recovery: Option<u64>,
    /// The NVLink whose errors grew most since the previous sample.
    nvlink_growing: Option<u32>,
}

/// Growth of a counter, a counter that went down having started over.
fn growth(now: Option<u64>, before: Option<u64>) -> Option<u64> {
    let now = now?;
    Some(match before {
        Some(before) if now >= before => now - before,
        Some(_) => now,
        None => return None,
    })
}

fn went_down(now: Option<u64>, before: Option<u64>) -> bool {
    matches!((now, before), (Some(n), Some(b)) if n < b)
}

/// Remembers this sample's counters and returns their growth; notes a reset (the GPU
/// answering again, volatile counters starting over).
pub(crate) fn note_counters(now: i64, s: &GpuSample, state: &mut GpuHealthState) -> Deltas {
    let sum = |f: fn(&crate::model::NvLinkErrors) -> u64| {
        (!s.nvlink.is_empty()).then(|| s.nvlink.iter().map(f).fold(0u64, u64::saturating_add))
    };
    let ecc_volatile = match (s.ecc.corrected_volatile, s.ecc.uncorrected_volatile) {
        (Some(c), Some(u)) => Some(c.saturating_add(u)),
        _ => None,
    };
    let current = LastCounters {
        at: now,
        pcie_replays: s.pcie.replay_counter,
        nvlink_crc: sum(|l| l.crc_flit.saturating_add(l.crc_data)),
        nvlink_replay: sum(|l| l.replay),
        nvlink_recovery: sum(|l| l.recovery),
        ecc_volatile,
    };
    let nvlink_growing = growing_link(s, &mut state.nvlink_totals);
    // A GPU answering again was reset or rebooted; so was one whose counters started over.
    if state.answered == Some(false) {
        state.reset_at = Some(now);
    }
    let Some(before) = state.last.replace(current) else {
        return Deltas::default();
    };
    if went_down(current.ecc_volatile, before.ecc_volatile)
        || went_down(current.pcie_replays, before.pcie_replays)
    {
        state.reset_at = Some(now);
    }
    Deltas {
        seconds: (now - before.at) as f64,
        nvlink_crc: growth(current.nvlink_crc, before.nvlink_crc),
        nvlink_replay: growth(current.nvlink_replay, before.nvlink_replay),
        nvlink_recovery: growth(current.nvlink_recovery, before.nvlink_recovery),
        nvlink_growing,
    }
}

/// The NVLink whose error total grew most since `totals` (the previous sample's, updated
/// to this one's); ties go to the lower link number. None when none grew.
fn growing_link(s: &GpuSample, totals: &mut Vec<(u32, u64)>) -> Option<u32> {
    let mut growing: Option<(u64, u32)> = None;
    for l in &s.nvlink {
        let total = l.total();
        let grew = match totals.iter_mut().find(|(link, _)| *link == l.link) {
            Some((_, before)) => {
                let grew = growth(Some(total), Some(*before)).unwrap_or(0);
                *before = total;
                grew
            }
            None => {
                totals.push((l.link, total));
                0
            }
        };
        if grew > 0
            && growing.is_none_or(|(most, link)| grew > most || (grew == most && l.link < link))
        {
            growing = Some((grew, l.link));
        }
    }
    growing.map(|(_, link)| link)
}

/// Observed time in the last hour before its replay rate is read.
const REPLAYS_OBSERVED_SECONDS: f64 = 600.0;

pub fn pcie(s: &GpuSample, hour: &Sums, state: &mut GpuHealthState) -> Option<Found> {
    let link = &s.pcie;
    let best = |reached: &mut Option<u32>, now: Option<u32>| {
        *reached = (*reached).max(now);
        *reached
    };
    let width_reached = best(&mut state.pcie_width_reached, link.link_width);
    let busy = s.utilization.gpu.is_some_and(|u| u >= PCIE_BUSY);
    // An idle link steps its generation down to save power: only a busy one's counts.
    let generation_reached = if busy {
        best(&mut state.pcie_generation_reached, link.link_generation)
    } else {
        state.pcie_generation_reached
    };
    let replays = (hour.seconds >= REPLAYS_OBSERVED_SECONDS)
        .then(|| hour.deltas.pcie_replays * 60.0 / hour.seconds);
    let shown = |v: Option<u32>| v.map_or_else(|| "?".into(), |v| v.to_string());
    // Formatted only for a reason: a step of a replay judges millions of healthy GPUs.
    let at = || {
        format!(
            "Gen{} x{}",
            shown(link.link_generation),
            shown(link.link_width)
        )
    };
    if let Some(rate) = replays.filter(|r| *r >= PCIE_FAILING_REPLAYS_PER_MINUTE) {
        return found(
            State::Unhealthy,
            Action::InspectHardware,
            format!(
                "{rate:.0} PCIe replays a minute over the last hour at {}, ten times the \
                 limit of {PCIE_REPLAYS_PER_MINUTE:.0}: the link is failing",
                at()
            ),
        );
    }
    let narrower = link.link_width < width_reached;
    let slower = busy && link.link_generation < generation_reached;
    if narrower || slower {
        let mut text = format!(
            "PCIe link at {}, below the Gen{} x{} it reached",
            at(),
            shown(generation_reached),
            shown(width_reached)
        );
        if let (Some(g), Some(w)) = (link.link_generation_max, link.link_width_max) {
            let _ = write!(text, " (NVML's maximum: Gen{g} x{w})");
        }
        text.push_str(": reseat or replace the card or its riser");
        return found(State::Degraded, Action::InspectHardware, text);
    }
    if let Some(rate) = replays.filter(|r| *r > PCIE_REPLAYS_PER_MINUTE) {
        return found(
            State::Degraded,
            Action::InspectHardware,
            format!(
                "{rate:.0} PCIe replays a minute over the last hour at {}, over the limit of \
                 {PCIE_REPLAYS_PER_MINUTE:.0}",
                at()
            ),
        );
    }
    if !busy && link.link_generation < generation_reached {
        return None;
    }
    healthy("PCIe link at the generation and width it reached; replays within the limit")
}

pub fn nvlink(s: &GpuSample, deltas: Option<&Deltas>, state: &mut GpuHealthState) -> Option<Found> {
    for l in s.nvlink.iter().filter(|l| l.link < 64) {
        state.nvlinks_seen |= 1 << l.link;
    }
    let down: Vec<String> = (s.nvlink_inactive.iter())
        .filter(|&&l| l < 64 && state.nvlinks_seen & (1 << l) != 0)
        .map(u32::to_string)
        .collect();
    if let Some(f) = s.fabric {
        match f.state {
            FabricState::Completed if f.status != 0 => {
                return found(
                    State::Unhealthy,
                    Action::DrainAndReboot,
                    format!(
                        "NVLink fabric registration failed (NVML error {}): restart the fabric manager or reboot",
                        f.status
                    ),
                );
            }
            FabricState::NotStarted => {
                return found(
                    State::Unhealthy,
                    Action::DrainAndReboot,
                    "the NVLink fabric has not started for this GPU: is nvidia-fabricmanager running?".into(),
                );
            }
            _ => {}
        }
    }
    if !down.is_empty() {
        return found(
            State::Unhealthy,
            Action::ResetGpu,
            format!(
                "NVLink {} down (active before); {} links active",
                down.join(", "),
                s.nvlink.len()
            ),
        );
    }
    if s.fabric.is_some_and(|f| f.state == FabricState::InProgress) {
        return found(
            State::Degraded,
            Action::None,
            "NVLink fabric registration in progress".into(),
        );
    }
    if let Some(d) = deltas {
        // The reasons below are of this reading's errors: they name the link that had most.
        let on = d
            .nvlink_growing
            .map_or(String::new(), |l| format!(", most on link {l}"));
        if let Some(n) = d.nvlink_recovery.filter(|n| *n > 0) {
            return found(
                State::Degraded,
                Action::ResetGpu,
                format!("{n} NVLink recovery errors since the last reading{on}: a link retrains"),
            );
        }
        let crc = (d.seconds > 0.0)
            .then(|| d.nvlink_crc.map(|n| n as f64 / d.seconds))
            .flatten();
        if let Some(rate) = crc.filter(|r| *r >= NVLINK_CRC_PER_SECOND) {
            return found(
                State::Degraded,
                Action::None,
                format!(
                    "{rate:.0} NVLink CRC errors a second{on}, past {NVLINK_CRC_PER_SECOND:.0}"
                ),
            );
        }
        if let Some(n) = d.nvlink_replay.filter(|n| *n > 0) {
            return found(
                State::Degraded,
                Action::None,
                format!("{n} NVLink replay errors since the last reading{on}"),
            );
        }
    }
    healthy("every NVLink that was active is active; errors within the limits")
}
