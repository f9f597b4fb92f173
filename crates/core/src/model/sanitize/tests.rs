//! Unit tests of the range checks: each bound, at and past its edge.

use super::*;
use crate::model::{Gpm, Memory, NvLinkErrors, RemappedRows, RetiredPages};

/// A sample of an ordinary busy H100, every checked value present and real.
fn healthy() -> GpuSample {
    let mut s = GpuSample {
        uuid: "GPU-a".into(),
        up: true,
        temperature_celsius: Some(62.0),
        memory_temperature_celsius: Some(70.0),
        power_watts: Some(620.5),
        power_limit_watts: Some(700.0),
        energy_joules: Some(1.5e9),
        fan_speed_ratio: Some(0.3),
        performance_state: Some(0),
        memory: Memory {
            total_bytes: Some(81_559 << 20),
            used_bytes: Some(61_234 << 20),
            free_bytes: Some(19_846 << 20),
            reserved_bytes: Some(479 << 20),
        },
        retired_pages: Some(RetiredPages::default()),
        remapped_rows: Some(RemappedRows::default()),
        nvlink: vec![NvLinkErrors::default(); 2],
        gpm: Some(Gpm {
            sm_active: Some(0.8),
            sm_occupancy: Some(0.4),
            tensor_active: Some(0.5),
            dram_active: Some(0.3),
            graphics_active: None,
        }),
        collect_seconds: 0.004,
        ..GpuSample::default()
    };
    s.utilization.gpu = Some(0.9);
    s.utilization.memory_copy = Some(0.3);
    s.utilization.encoder = Some(0.0);
    s.utilization.decoder = Some(0.0);
    s.clocks.sm = Some(1980);
    s.clocks.memory = Some(2619);
    s.clocks_max.sm = Some(1980);
    s.ecc.corrected_volatile = Some(3);
    s.pcie.link_generation = Some(5);
    s.pcie.link_width = Some(16);
    s.pcie.replay_counter = Some(0);
    s.pcie.tx_bytes_per_second = Some(2e9);
    s
}

/// Sanitizes a copy of `sample` changed by `edit`; the cleared copy and what was counted.
fn check(edit: impl FnOnce(&mut GpuSample)) -> (GpuSample, RejectedValues) {
    let mut s = healthy();
    edit(&mut s);
    let rejected = s.sanitize();
    (s, rejected)
}

/// Only `field` was counted, once.
fn only(rejected: &RejectedValues, field: Checked) {
    let counted: Vec<(Checked, u64)> = rejected.iter().collect();
    assert_eq!(counted, [(field, 1)]);
}

#[test]
fn real_readings_pass_untouched() {
    let (s, rejected) = check(|_| {});
    assert_eq!(rejected.total(), 0, "{rejected:?}");
    assert_eq!(s, healthy());
    // Edges that are real: a GPU at 0 % and idle at 0 W, a fan above its rated speed,
    // memory completely used, P15, the slowest link.
    let (_, rejected) = check(|s| {
        s.utilization.gpu = Some(0.0);
        s.power_watts = Some(0.0);
        s.temperature_celsius = Some(0.0);
        s.fan_speed_ratio = Some(1.1);
        s.memory.used_bytes = s.memory.total_bytes;
        s.performance_state = Some(15);
        s.pcie.link_generation = Some(1);
        s.pcie.link_width = Some(1);
        s.utilization.memory_copy = Some(1.0);
    });
    assert_eq!(rejected.total(), 0, "{rejected:?}");
}

#[test]
fn temperatures_below_zero_or_beyond_silicon_are_cleared() {
    let (s, r) = check(|s| s.temperature_celsius = Some(-5.0));
    assert_eq!(s.temperature_celsius, None);
    only(&r, Checked::Temperature);
    let (s, r) = check(|s| s.memory_temperature_celsius = Some(255.0));
    assert_eq!(s.memory_temperature_celsius, None);
    only(&r, Checked::MemoryTemperature);
    let (_, r) = check(|s| s.temperature_celsius = Some(150.0));
    assert_eq!(r.total(), 0);
}

#[test]
fn negative_or_absurd_power_is_cleared() {
    let (s, r) = check(|s| s.power_watts = Some(-1.0));
    assert_eq!(s.power_watts, None);
    only(&r, Checked::Power);
    let (s, r) = check(|s| s.power_limit_watts = Some(1e6));
    assert_eq!(s.power_limit_watts, None);
    only(&r, Checked::PowerLimit);
    let (s, r) = check(|s| s.energy_joules = Some(-3.0));
    assert_eq!(s.energy_joules, None);
    only(&r, Checked::Energy);
}

#[test]
fn ratios_outside_zero_to_one_are_cleared() {
    let (s, r) = check(|s| s.utilization.gpu = Some(1.5));
    assert_eq!(s.utilization.gpu, None);
    only(&r, Checked::UtilizationGpu);
    let (s, r) = check(|s| s.utilization.decoder = Some(-0.01));
    assert_eq!(s.utilization.decoder, None);
    only(&r, Checked::UtilizationDecoder);
    let (s, r) = check(|s| s.fan_speed_ratio = Some(-0.1));
    assert_eq!(s.fan_speed_ratio, None);
    only(&r, Checked::FanSpeed);
    let (s, r) = check(|s| {
        if let Some(g) = &mut s.gpm {
            g.tensor_active = Some(2.0);
        }
    });
    assert_eq!(s.gpm.unwrap().tensor_active, None);
    assert_eq!(s.gpm.unwrap().sm_active, Some(0.8));
    only(&r, Checked::Gpm);
}

#[test]
fn memory_parts_larger_than_the_whole_are_cleared() {
    let (s, r) = check(|s| s.memory.used_bytes = Some((81_559 << 20) + 1));
    assert_eq!(s.memory.used_bytes, None);
    assert_eq!(s.memory.total_bytes, Some(81_559 << 20));
    only(&r, Checked::MemoryUsed);
    // A total beyond any GPU is cleared; the parts are then judged on their own.
    let (s, r) = check(|s| s.memory.total_bytes = Some(u64::MAX));
    assert_eq!(s.memory.total_bytes, None);
    assert_eq!(s.memory.used_bytes, Some(61_234 << 20));
    only(&r, Checked::MemoryTotal);
}

#[test]
fn clocks_pstates_and_links_beyond_any_gpu_are_cleared() {
    let (s, r) = check(|s| s.clocks.graphics = Some(4_000_000));
    assert_eq!(s.clocks.graphics, None);
    assert_eq!(s.clocks.sm, Some(1980));
    only(&r, Checked::Clock);
    let (s, r) = check(|s| s.clocks_max.memory = Some(u32::MAX));
    assert_eq!(s.clocks_max.memory, None);
    only(&r, Checked::ClockMax);
    let (s, r) = check(|s| s.performance_state = Some(32));
    assert_eq!(s.performance_state, None);
    only(&r, Checked::PerformanceState);
    let (s, r) = check(|s| s.pcie.link_width = Some(64));
    assert_eq!(s.pcie.link_width, None);
    only(&r, Checked::PcieWidth);
    let (s, r) = check(|s| s.pcie.link_generation = Some(99));
    assert_eq!(s.pcie.link_generation, None);
    only(&r, Checked::PcieGeneration);
    let (s, r) = check(|s| s.pcie.rx_bytes_per_second = Some(-5.0));
    assert_eq!(s.pcie.rx_bytes_per_second, None);
    only(&r, Checked::PcieThroughput);
}

#[test]
fn counters_past_two_to_the_53_are_cleared() {
    let (s, r) = check(|s| s.ecc.uncorrected_aggregate = Some(u64::MAX));
    assert_eq!(s.ecc.uncorrected_aggregate, None);
    assert_eq!(s.ecc.corrected_volatile, Some(3));
    only(&r, Checked::Ecc);
    let (_, r) = check(|s| s.ecc.uncorrected_aggregate = Some(LARGEST_COUNT));
    assert_eq!(r.total(), 0);
    let (s, r) = check(|s| {
        s.remapped_rows = Some(RemappedRows {
            correctable: u64::MAX,
            ..RemappedRows::default()
        })
    });
    assert_eq!(s.remapped_rows, None);
    only(&r, Checked::RemappedRows);
    let (s, r) = check(|s| {
        s.retired_pages = Some(RetiredPages {
            dbe: u64::MAX,
            ..RetiredPages::default()
        })
    });
    assert_eq!(s.retired_pages, None);
    only(&r, Checked::RetiredPages);
    let (s, r) = check(|s| s.nvlink[1].crc_data = u64::MAX);
    assert_eq!(s.nvlink.len(), 1);
    only(&r, Checked::NvLink);
    let (s, r) = check(|s| s.pcie.replay_counter = Some(u64::MAX));
    assert_eq!(s.pcie.replay_counter, None);
    only(&r, Checked::PcieReplays);
}

#[test]
fn collect_time_and_processes_are_checked_too() {
    let (s, r) = check(|s| s.collect_seconds = -1.0);
    assert_eq!(s.collect_seconds, 0.0);
    only(&r, Checked::CollectSeconds);

    let mut snapshot = Snapshot {
        gpus: vec![healthy(), healthy()],
        processes: vec![ProcessSample {
            used_memory_bytes: Some(u64::MAX),
            sm_utilization: Some(3.0),
            memory_utilization: Some(0.2),
            runtime_seconds: Some(-1.0),
            ..ProcessSample::default()
        }],
        ..Snapshot::default()
    };
    snapshot.gpus[1].temperature_celsius = Some(-40.0);
    let r = snapshot.sanitize();
    let counted: Vec<(Checked, u64)> = r.iter().collect();
    assert_eq!(
        counted,
        [
            (Checked::Temperature, 1),
            (Checked::ProcessMemory, 1),
            (Checked::ProcessUtilization, 1),
            (Checked::ProcessRuntime, 1),
        ]
    );
    let p = &snapshot.processes[0];
    assert_eq!(
        (p.used_memory_bytes, p.sm_utilization, p.memory_utilization),
        (None, None, Some(0.2))
    );
    assert_eq!(snapshot.gpus[0].temperature_celsius, Some(62.0));
}

#[test]
fn tallies_add_up_and_every_field_has_its_own_slot_and_name() {
    let mut a = RejectedValues::default();
    a.reject(Checked::Power);
    let mut b = RejectedValues::default();
    b.reject(Checked::Power);
    b.reject(Checked::Ecc);
    a.add(&b);
    assert_eq!(a.count(Checked::Power), 2);
    assert_eq!(a.count(Checked::Ecc), 1);
    assert_eq!(a.total(), 3);
    let mut names = std::collections::BTreeSet::new();
    for (i, field) in Checked::ALL.into_iter().enumerate() {
        assert_eq!(field.index(), i, "{field:?}");
        assert!(names.insert(field.name()), "{} twice", field.name());
    }
}
