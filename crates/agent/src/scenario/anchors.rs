//! The operators' anchor histories: a healthy, busy node of eight H100s, then one GPU (or
//! all of them) changed as an operator's rule of thumb describes. The risk model's unit
//! tests (crates/agent/src/engine/risk/tests.rs) assert what each must score, and `gpu-sentinel train`
//! holds every fit to the same (`train::anchors`): both build the histories here, so the
//! scenario a test checks is the scenario the fit is held to.

use chrono::{DateTime, TimeDelta, Utc};

use crate::model::{
    ClockEvents, Ecc, GpuSample, Pcie, RemappedRows, Snapshot, Utilization, XidEvent, XidSource,
};

/// Minutes between samples.
pub(crate) const STEP_MIN: i64 = 5;
/// GPUs of the node.
pub const GPUS: u32 = 8;
pub const DAY_MIN: i64 = 24 * 60;
/// The first minute of the eighth day: most anchors change their GPU from here, after a
/// week of baseline.
pub(crate) const LAST_DAY: i64 = 7 * DAY_MIN;

/// A change to GPU `g`'s sample at minute `m` (it may add XIDs for the GPU).
pub type NodeChange = dyn Fn(i64, u32, &mut GpuSample, &mut Vec<u32>) + Send + Sync;

/// The time of minute `m`.
pub fn at(minute: i64) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-03-01T00:00:00Z")
        .map(|t| t.with_timezone(&Utc))
        .unwrap_or_default()
        + TimeDelta::minutes(minute)
}

/// A busy, healthy H100 at minute `m`: 90% utilization, 65 °C, HBM 5 °C above, a Gen5 x16
/// link.
pub fn healthy(gpu: u32, m: i64) -> GpuSample {
    let wobble = ((m + i64::from(gpu) * 7) % 11) as f64 / 10.0;
    GpuSample {
        index: gpu,
        uuid: format!("GPU-{gpu}"),
        name: "NVIDIA H100 80GB HBM3".into(),
        up: true,
        utilization: Utilization {
            gpu: Some(0.88 + 0.01 * wobble),
            ..Utilization::default()
        },
        temperature_celsius: Some(65.0 + wobble),
        memory_temperature_celsius: Some(70.0 + wobble),
        power_watts: Some(560.0 + 5.0 * wobble),
        power_limit_watts: Some(700.0),
        clock_events: Some(ClockEvents(0)),
        ecc: Ecc {
            corrected_volatile: Some(0),
            uncorrected_volatile: Some(0),
            corrected_aggregate: Some(0),
            uncorrected_aggregate: Some(0),
        },
        pcie: Pcie {
            replay_counter: Some(3),
            link_generation: Some(5),
            link_generation_max: Some(5),
            link_width: Some(16),
            link_width_max: Some(16),
            ..Pcie::default()
        },
        remapped_rows: Some(RemappedRows::default()),
        collect_seconds: 0.004,
        ..GpuSample::default()
    }
}

/// `days` of the node, one snapshot every [`STEP_MIN`] minutes from minute 0, each handed
/// to `each` with its minute; `change` edits each GPU's sample first.
pub fn node_history(
    days: i64,
    mut change: impl FnMut(i64, u32, &mut GpuSample, &mut Vec<u32>),
    mut each: impl FnMut(i64, &Snapshot),
) {
    let mut m = 0;
    while m <= days * DAY_MIN {
        let mut gpus: Vec<GpuSample> = (0..GPUS).map(|g| healthy(g, m)).collect();
        let mut events = Vec::new();
        for (g, sample) in gpus.iter_mut().enumerate() {
            let mut xids = Vec::new();
            change(m, g as u32, sample, &mut xids);
            events.extend(xids.into_iter().map(|xid| XidEvent {
                at: at(m),
                gpu: Some(g as u32),
                uuid: Some(format!("GPU-{g}")),
                pci_bus_id: None,
                xid,
                source: XidSource::Kmsg,
                message: None,
            }));
        }
        let snapshot = Snapshot {
            at: at(m),
            gpus,
            events,
            ..Snapshot::default()
        };
        each(m, &snapshot);
        m += STEP_MIN;
    }
}

/// Where the corrected-error climb starts and ends (it runs over nine days).
pub const CLIMB_START: i64 = 3 * DAY_MIN;
pub const CLIMB_END: i64 = CLIMB_START + 6 * DAY_MIN;

/// Corrected errors climbing from 0 to 12 a day over six days: after t days, t² in all.
pub fn ecc_climb(m: i64, s: &mut GpuSample, _: &mut Vec<u32>) {
    let days = (m - CLIMB_START).clamp(0, 6 * DAY_MIN) as f64 / DAY_MIN as f64;
    let count = (days * days) as u64;
    s.ecc.corrected_volatile = Some(count);
    s.ecc.corrected_aggregate = Some(count);
}

/// A handful of corrected errors a day (one every half day) from the climb's start.
pub fn ecc_few(m: i64, s: &mut GpuSample, _: &mut Vec<u32>) {
    let count = ((m - CLIMB_START).max(0) / (DAY_MIN / 2)) as u64;
    s.ecc.corrected_volatile = Some(count);
    s.ecc.corrected_aggregate = Some(count);
}

/// An H100 whose HBM runs 8 °C cooler than the die, as loaded H100s do, and whose gap
/// grows by `rise` degrees on the last day.
pub fn hbm_gap(rise: f64) -> impl Fn(i64, &mut GpuSample, &mut Vec<u32>) + Send + Sync {
    move |m, s, _| {
        let rise = if m >= LAST_DAY { rise } else { 0.0 };
        s.memory_temperature_celsius = s.temperature_celsius.map(|t| t - 8.0 + rise);
    }
}

/// From the last day, every GPU of the node runs at 84-91 °C; the two hottest slow down now
/// and then (nine days).
pub fn node_wide_heat(m: i64, g: u32, s: &mut GpuSample, _: &mut Vec<u32>) {
    if m >= LAST_DAY {
        let t = 84.0 + f64::from(g) + ((m / STEP_MIN) % 3) as f64 * 0.3;
        s.temperature_celsius = Some(t);
        s.memory_temperature_celsius = Some(t + 8.0);
        if g >= 6 && m % 60 < 12 {
            s.clock_events = Some(ClockEvents(
                ClockEvents::SW_THERMAL_SLOWDOWN | ClockEvents::HW_SLOWDOWN,
            ));
        }
    }
}

/// The same heat on one GPU alone, slowing down a fifth of every hour.
pub fn heat_alone(m: i64, s: &mut GpuSample, _: &mut Vec<u32>) {
    if m >= LAST_DAY {
        s.temperature_celsius = Some(91.0);
        s.memory_temperature_celsius = Some(99.0);
        if m % 60 < 12 {
            s.clock_events = Some(ClockEvents(ClockEvents::SW_THERMAL_SLOWDOWN));
        }
    }
}

/// Inlet air warming for eight hours of the last day until every GPU runs at 86-88 °C:
/// the three idle GPUs (normally 35 °C) warm by 50 degrees, the busy ones by 22 (nine days).
pub fn idle_warming_heat(m: i64, g: u32, s: &mut GpuSample, _: &mut Vec<u32>) {
    let idle = g < 3;
    if idle {
        s.utilization.gpu = Some(0.0);
        s.power_watts = Some(80.0);
        s.temperature_celsius = Some(35.0);
        s.memory_temperature_celsius = Some(37.0);
    }
    if (LAST_DAY..LAST_DAY + 8 * 60).contains(&m) {
        let t = 86.0 + f64::from(g % 3) + ((m / STEP_MIN) % 3) as f64 * 0.3;
        s.temperature_celsius = Some(t);
        s.memory_temperature_celsius = Some(t + if idle { 2.0 } else { 5.0 });
    }
}

/// 120 replays an hour, every hour (two weeks).
pub fn steady_noisy_link(m: i64, s: &mut GpuSample, _: &mut Vec<u32>) {
    s.pcie.replay_counter = Some(3 + 2 * m as u64);
}

/// From a few replays an hour, doubling every day from the eighth day (to about 60 an hour
/// after six days; thirteen days).
pub fn accelerating_link(m: i64, s: &mut GpuSample, _: &mut Vec<u32>) {
    let days = (m - LAST_DAY).max(0) as f64 / DAY_MIN as f64;
    // Replays per hour 1 × 2^days, integrated.
    let total = 24.0 * (2f64.powf(days) - 1.0) / std::f64::consts::LN_2;
    s.pcie.replay_counter = Some(3 + total as u64);
}

/// Corrected errors climbing from 0 to 12 a day over six days as [`ecc_climb`], but drawn
/// Poisson step by step, so days read 3, 1, 4, 6, 5, 9, … rather than a smooth climb.
pub fn ecc_noisy_climb(m: i64, s: &mut GpuSample, _: &mut Vec<u32>) {
    static TOTALS: std::sync::OnceLock<Vec<u64>> = std::sync::OnceLock::new();
    let totals = TOTALS.get_or_init(|| {
        cumulative(9, 0xECC, |m| {
            let days = (m - CLIMB_START).clamp(0, 6 * DAY_MIN) as f64 / DAY_MIN as f64;
            2.0 * days
        })
    });
    let count = total_at(totals, m);
    s.ecc.corrected_volatile = Some(count);
    s.ecc.corrected_aggregate = Some(count);
}

/// Where the two-day replay ramp starts: it runs from half an hour's replay to 300 an hour
/// over the last two of nine days, Poisson.
pub const RAMP_START: i64 = 7 * DAY_MIN;

/// A link healthy for a week that dies in two days: replays from 0.3 to 300 an hour,
/// growing exponentially from [`RAMP_START`], drawn Poisson (nine days).
pub fn link_two_day_ramp(m: i64, s: &mut GpuSample, _: &mut Vec<u32>) {
    static TOTALS: std::sync::OnceLock<Vec<u64>> = std::sync::OnceLock::new();
    let totals = TOTALS.get_or_init(|| {
        cumulative(9, 0x9C1E, |m| {
            let days = (m - RAMP_START).clamp(0, 2 * DAY_MIN) as f64 / DAY_MIN as f64;
            24.0 * 0.3 * 1000f64.powf(days / 2.0)
        })
    });
    s.pcie.replay_counter = Some(3 + total_at(totals, m));
}

/// Power swinging more and more at steady utilization: Gaussian swings whose standard
/// deviation grows from nothing to 120 W over days 4 to 9 (nine days), no power-brake bit.
pub fn power_swings_growing(m: i64, s: &mut GpuSample, _: &mut Vec<u32>) {
    let days = (m - 4 * DAY_MIN).clamp(0, 5 * DAY_MIN) as f64 / DAY_MIN as f64;
    let sd = 120.0 * days / 5.0;
    if let Some(p) = s.power_watts.as_mut() {
        *p = (*p + sd * normal(m, 0x90E)).clamp(60.0, 700.0);
    }
}

/// A draw that always swung: a third of the samples, from the first day, 150 to 270 W
/// under the job's draw at the same utilization (an all-reduce phase; nine days).
pub fn power_always_swinging(m: i64, s: &mut GpuSample, _: &mut Vec<u32>) {
    let u = uniform(m, 0x05C);
    if u < 0.3
        && let Some(p) = s.power_watts.as_mut()
    {
        *p -= 150.0 + 120.0 * u / 0.3;
    }
}

/// Cumulative Poisson counts at every step of `days`, `per_day(m)` events a day at minute
/// `m`, drawn from `salt`: the same every run.
fn cumulative(days: i64, salt: u64, per_day: impl Fn(i64) -> f64) -> Vec<u64> {
    let mut total = 0;
    (0..=days * DAY_MIN / STEP_MIN)
        .map(|step| {
            let m = step * STEP_MIN;
            let lambda = per_day(m) * STEP_MIN as f64 / DAY_MIN as f64;
            total += poisson(lambda, uniform(m, salt));
            total
        })
        .collect()
}

fn total_at(totals: &[u64], m: i64) -> u64 {
    let step = (m.max(0) / STEP_MIN) as usize;
    totals.get(step).or(totals.last()).copied().unwrap_or(0)
}

/// A Poisson draw of mean `lambda` by inversion of the uniform `u`.
fn poisson(lambda: f64, u: f64) -> u64 {
    if lambda <= 0.0 {
        return 0;
    }
    let (mut k, mut p) = (0u64, (-lambda).exp());
    let mut cdf = p;
    while u > cdf && k < 10_000 {
        k += 1;
        p *= lambda / k as f64;
        cdf += p;
    }
    k
}

/// A uniform draw in [0, 1) for minute `m` and `salt` (splitmix64).
fn uniform(m: i64, salt: u64) -> f64 {
    let mut z = (m as u64) ^ salt.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 53) as f64
}

/// A standard normal draw for minute `m` and `salt` (Box–Muller).
fn normal(m: i64, salt: u64) -> f64 {
    let u1 = uniform(m, salt).max(1e-12);
    let u2 = uniform(m, salt ^ 0xA5A5);
    (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
}

/// `change` applied to GPU 0 alone.
pub fn on_gpu_0(
    change: impl Fn(i64, &mut GpuSample, &mut Vec<u32>) + Send + Sync,
) -> impl Fn(i64, u32, &mut GpuSample, &mut Vec<u32>) + Send + Sync {
    move |m, g, s, xids| {
        if g == 0 {
            change(m, s, xids);
        }
    }
}
