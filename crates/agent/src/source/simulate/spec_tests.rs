//! Scenario GPUs (`Fleet::from_specs`): each model reads as `nvidia-smi` shows it, drawn
//! shapes unfold, and confounders show without a fault.

use super::quirks::{EccBurst, Quirks};
use super::*;

fn start() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-01-05T00:00:00Z")
        .expect("a date")
        .with_timezone(&Utc)
}

fn spec(sku: Sku, workload: WorkloadKind) -> GpuSpec {
    GpuSpec {
        plan: GpuPlan::healthy(workload),
        sku,
        shape: None,
        link_mode: LinkMode::Both,
        quirks: Quirks::default(),
        noise: NoiseModel::Poisson,
    }
}

fn run(specs: &[GpuSpec], hours: f64) -> (Fleet, Snapshot) {
    let mut fleet = Fleet::from_specs(9, start(), specs);
    let mut t = 0.0;
    while t < hours * 3600.0 {
        fleet.advance(300.0);
        t += 300.0;
    }
    let snapshot = fleet.snapshot();
    (fleet, snapshot)
}

#[test]
fn each_model_reads_as_nvidia_smi_shows_it() {
    let specs: Vec<GpuSpec> = Sku::ALL
        .iter()
        .map(|&s| spec(s, WorkloadKind::Training))
        .collect();
    let (_, snap) = run(&specs, 2.0);
    for (gpu, sku) in snap.gpus.iter().zip(Sku::ALL) {
        let s = sku.spec();
        assert_eq!(gpu.name, s.name);
        assert_eq!(gpu.memory.total_bytes, Some(s.total_mib << 20));
        assert!(gpu.memory.used_bytes <= gpu.memory.total_bytes, "{sku:?}");
        assert_eq!(gpu.power_limit_watts, Some(s.power_limit_w));
        assert_eq!(gpu.pcie.link_generation_max, Some(s.pcie_gen_max));
        assert_eq!(gpu.nvlink.len() as u32, s.nvlinks);
        assert_eq!(gpu.retired_pages.is_some(), sku == Sku::V100, "{sku:?}");
        assert_eq!(gpu.remapped_rows.is_some(), sku != Sku::V100, "{sku:?}");
    }
    let l40s = &snap.gpus[4];
    assert_eq!(l40s.memory_temperature_celsius, None);
    // A loaded H100 and H200: HBM cooler than the die; idle, warmer.
    let mut fleet = Fleet::from_specs(9, start(), &specs[..2]);
    let (mut loaded, mut idle) = (Vec::new(), Vec::new());
    for _ in 0..(24 * 12) {
        fleet.advance(300.0);
        for gpu in fleet.snapshot().gpus {
            let (die, hbm) = (gpu.temperature_celsius, gpu.memory_temperature_celsius);
            let gap = hbm.zip(die).map(|(m, d)| m - d).expect("both");
            match gpu.utilization.gpu {
                Some(u) if u > 0.9 => loaded.push(gap),
                Some(0.0) => idle.push(gap),
                _ => {}
            }
        }
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    assert!(
        loaded.len() > 20 && idle.len() > 2,
        "{} {}",
        loaded.len(),
        idle.len()
    );
    assert!((-13.0..-3.0).contains(&mean(&loaded)), "{loaded:?}");
    assert!(mean(&idle) > 0.0, "{idle:?}");
}

#[test]
fn a_degrading_link_trains_down_to_x8_and_two_generations_lower_then_drops() {
    let mut failing = spec(Sku::H100, WorkloadKind::Training);
    failing.plan.fault = Some(FaultKind::PcieLink);
    failing.plan.horizon_hours = 48.0;
    failing.link_mode = LinkMode::TrainDown;
    failing.shape = Some(Shape {
        curve: Curve::Stepwise,
        rate: 1.0,
        growth: 10.0,
        precursor_days: 1.5,
        cluster_hours: 12.0,
    });
    let (_, before) = run(std::slice::from_ref(&failing), 46.0);
    let pcie = before.gpus[0].pcie;
    assert_eq!((pcie.link_width, pcie.link_generation), (Some(8), Some(3)));
    assert!(before.gpus[0].up);
    let (mut fleet, after) = run(&[failing], 48.5);
    assert!(!after.gpus[0].up);
    let failures = fleet.take_failures();
    assert_eq!(failures.len(), 1);
    assert_eq!(failures[0].family, "pcie_link");
}

#[test]
fn confounders_show_without_a_fault() {
    let mut burst = spec(Sku::A100, WorkloadKind::Inference);
    burst.quirks = Quirks {
        ecc_burst: Some(EccBurst {
            at: 3600.0,
            count: 300.0,
        }),
        counter_resets: vec![5.0 * 3600.0],
        ..Quirks::default()
    };
    let mut mig = spec(Sku::H100, WorkloadKind::Training);
    mig.quirks.mig = true;
    let mut ecc_off = spec(Sku::H200, WorkloadKind::Training);
    ecc_off.quirks.ecc_disabled = true;
    let specs = [burst, mig, ecc_off];
    let (_, at_3h) = run(&specs, 3.0);
    let corrected = at_3h.gpus[0].ecc.corrected_volatile.expect("ECC on");
    assert!((200..400).contains(&corrected), "{corrected}");
    let (_, at_6h) = run(&specs, 6.0);
    assert_eq!(at_6h.gpus[0].ecc.corrected_volatile, Some(0), "reset");
    assert_eq!(at_6h.gpus[0].ecc.corrected_aggregate, Some(corrected));
    let mig = &at_6h.gpus[1];
    assert_eq!(mig.mig_enabled, Some(true));
    assert_eq!((mig.utilization.gpu, mig.remapped_rows), (None, None));
    assert!(mig.temperature_celsius.is_some());
    let off = &at_6h.gpus[2];
    assert_eq!(off.ecc, crate::model::Ecc::default());
    assert_eq!(off.remapped_rows, None);
}

#[test]
fn an_idle_l40s_drops_its_link_to_gen1_and_a_loaded_one_holds_gen4() {
    let specs = [
        spec(Sku::L40S, WorkloadKind::Unused),
        spec(Sku::H100, WorkloadKind::Unused),
    ];
    let (_, snap) = run(&specs, 1.0);
    let (l40s, h100) = (&snap.gpus[0].pcie, &snap.gpus[1].pcie);
    assert_eq!(
        (l40s.link_generation, l40s.link_generation_max),
        (Some(1), Some(4))
    );
    assert_eq!((h100.link_generation, h100.link_width), (Some(5), Some(16)));
    let mut fleet = Fleet::from_specs(9, start(), &[spec(Sku::L40S, WorkloadKind::Training)]);
    let mut loaded = 0;
    for _ in 0..48 {
        fleet.advance(300.0);
        let gpu = &fleet.snapshot().gpus[0];
        if gpu.utilization.gpu > Some(0.5) {
            loaded += 1;
            assert_eq!(gpu.pcie.link_generation, Some(4));
        }
    }
    assert!(loaded > 10);
}
