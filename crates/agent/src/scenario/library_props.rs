//! Property tests: random library options, polling and fault shapes under every noise
//! model never panic, and every nvidia-smi row written has the header's cells.

use proptest::prelude::*;

use super::emit::{FileFormat, write_node};
use super::{Library, LibraryOptions, Polling};
use crate::source::simulate::quirks::{EccBurst, InletEvent};
use crate::source::simulate::{
    Curve, FaultKind, Fleet, GpuPlan, GpuSpec, LinkMode, NoiseModel, Quirks, Shape, Sku,
    WorkloadKind,
};

fn curve() -> impl Strategy<Value = Curve> {
    prop::sample::select(Curve::ALL.to_vec())
}

fn noise() -> impl Strategy<Value = NoiseModel> {
    prop::sample::select(NoiseModel::ALL.to_vec())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn every_row_has_the_headers_cells(
        seed in any::<u64>(),
        nodes in 1usize..3,
        days in 0.01f64..1.0,
        interval in 120.0f64..3600.0,
        shortest in 0.0f64..1.0,
        nounits in any::<bool>(),
    ) {
        let library = Library::new(LibraryOptions::new(seed, nodes, days));
        let format = if nounits { FileFormat::SmiCsvNoUnits } else { FileFormat::SmiCsv };
        // Each node at its own interval, some as short as a tenth of the longest.
        let polling = Polling::between(interval * (0.1 + 0.9 * shortest), interval);
        for node in &library.nodes {
            let mut out = Vec::new();
            let rows = write_node(&library, node, &mut out, format, polling)
                .map_err(|e| TestCaseError::fail(format!("{e:#}")))?;
            let text = String::from_utf8(out).map_err(|e| TestCaseError::fail(e.to_string()))?;
            let mut lines = text.lines();
            let header = lines.next().unwrap_or_default();
            let width = header.split(", ").count();
            let mut data = 0u64;
            for line in lines {
                prop_assert_eq!(line.split(", ").count(), width, "{}", line);
                data += u64::from(line != header);
            }
            prop_assert_eq!(data, rows);
        }
    }

    #[test]
    fn every_gpu_of_a_library_has_a_noise_model_and_its_counters_never_fall_between_resets(
        seed in any::<u64>(),
        days in 0.05f64..3.0,
        longest in 60.0f64..1800.0,
    ) {
        let library = Library::new(LibraryOptions::new(seed, 1, days));
        let node = &library.nodes[0];
        for (gpu, label) in node.gpus.iter().zip(&node.labels) {
            prop_assert_eq!(gpu.noise.name(), label.variants.noise.as_str());
            prop_assert_eq!(label.variants.axis("noise"), Some(label.variants.noise.clone()));
        }
        let start = library.options.start;
        let mut last: Vec<Option<u64>> = vec![None; node.gpus.len()];
        node.run(start, days, Polling::between(longest / 4.0, longest), |step| {
            let t = (step.snapshot.at - start).num_milliseconds() as f64 / 1000.0;
            prop_assert!(!node.in_gap(t) || !step.failures.is_empty());
            for (i, g) in step.snapshot.gpus.iter().enumerate() {
                let now = g.ecc.corrected_aggregate;
                if let (Some(before), Some(now)) = (last[i], now) {
                    prop_assert!(now >= before, "aggregate ECC fell: {} then {}", before, now);
                }
                if now.is_some() {
                    last[i] = now;
                }
            }
            Ok(())
        })?;
    }

    #[test]
    fn random_shapes_and_quirks_never_panic(
        seed in any::<u64>(),
        kind in prop::sample::select(FaultKind::EVERY.to_vec()),
        sku in prop::sample::select(Sku::ALL.to_vec()),
        curve in curve(),
        noise in noise(),
        step in 5.0f64..3600.0,
        rate in 0.0f64..20.0,
        growth in 0.0f64..1000.0,
        precursor_days in 0.0f64..30.0,
        cluster_hours in 0.0f64..100.0,
        horizon_hours in 0.0f64..200.0,
        burst in 0.0f64..5000.0,
        replays in 0.0f64..10_000.0,
        inlet in -30.0f64..60.0,
        flags in any::<[bool; 3]>(),
    ) {
        let shape = Shape { curve, rate, growth, precursor_days, cluster_hours };
        let quirks = Quirks {
            ecc_burst: Some(EccBurst { at: 3600.0, count: burst }),
            counter_resets: vec![7200.0],
            steady_replays_per_hour: replays,
            inlet_events: vec![InletEvent { start: 0.0, end: 4.0 * 3600.0, degrees: inlet }],
            idle: flags[0].then_some((0.0, 3600.0)),
            mig: flags[1],
            ecc_disabled: flags[2],
            ..Quirks::default()
        };
        let spec = GpuSpec {
            plan: GpuPlan {
                fault: Some(kind),
                horizon_hours,
                background_noise: true,
                ..GpuPlan::healthy(WorkloadKind::Training)
            },
            sku,
            shape: Some(shape),
            link_mode: LinkMode::Both,
            quirks,
            noise,
        };
        let start = LibraryOptions::new(0, 1, 1.0).start;
        let mut fleet = Fleet::from_specs(seed, start, &[spec]);
        // Two days at most, in at most 600 steps.
        let step = step.max(2.0 * 86_400.0 / 600.0);
        let mut t = 0.0;
        while t < 2.0 * 86_400.0 {
            fleet.advance(step);
            t += step;
            let snapshot = fleet.snapshot();
            prop_assert_eq!(snapshot.gpus.len(), 1);
        }
    }
}
