//! The scenario library's nvidia-smi logs read back as the snapshots they were written from:
//! every field both sides know, with units and without, across driver-reload restarts,
//! lost GPUs, MIG rows, ECC off, V100 retired pages and L40S without a memory sensor.

use chrono::FixedOffset;

use super::smi_csv::{SmiCsvOptions, SmiCsvReader};
use super::{SnapshotReader, Warnings};
use crate::model::{GpuSample, Snapshot};
use crate::scenario::smi_csv::{SmiCsvWriter, Units};
use crate::scenario::{Library, LibraryOptions};

/// What the log keeps of a sample, at the precision it is written with.
fn kept(s: &GpuSample) -> String {
    if !s.up {
        return format!("{} {} lost", s.index, s.uuid);
    }
    let mib = |b: Option<u64>| b.map(|b| b >> 20);
    let pct = |r: Option<f64>| r.map(|r| (r * 100.0).round() as i64);
    let w = |x: Option<f64>| x.map(|x| format!("{x:.2}"));
    format!(
        "{} {} {} {} mig={:?} t={:?}/{:?} u={:?}/{:?} mem={:?}/{:?}/{:?} p={:?}/{:?} \
         sm={:?}/{:?} mclk={:?} ev={:?} ecc={:?} retired={:?} remap={:?} link={:?}x{:?}",
        s.index,
        s.uuid,
        s.name,
        s.pci_bus_id,
        s.mig_enabled,
        s.temperature_celsius,
        s.memory_temperature_celsius,
        pct(s.utilization.gpu),
        pct(s.utilization.memory_copy),
        mib(s.memory.total_bytes),
        mib(s.memory.used_bytes),
        mib(s.memory.free_bytes),
        w(s.power_watts),
        w(s.power_limit_watts),
        s.clocks.sm,
        s.clocks_max.sm,
        s.clocks.memory,
        s.clock_events,
        s.ecc,
        s.retired_pages,
        s.remapped_rows,
        s.pcie.link_generation,
        s.pcie.link_width,
    )
}

#[test]
fn scenario_logs_read_back_as_written() {
    // Seed 2: a node losing GPUs, a node with driver reloads, five models between them.
    let library = Library::new(LibraryOptions::new(2, 5, 3.0));
    let mut skus = std::collections::BTreeSet::new();
    for node in &library.nodes {
        skus.insert(node.sku);
        for units in [Units::Units, Units::NoUnits] {
            let mut written: Vec<Snapshot> = Vec::new();
            let mut csv = SmiCsvWriter::new(Vec::new(), units);
            csv.header().expect("a Vec takes writes");
            node.run(library.options.start, 3.0, 1800.0, |step| {
                if step.after_reload {
                    csv.header()?;
                }
                written.push(step.snapshot.clone());
                csv.round(step.snapshot)
            })
            .expect("a Vec takes writes");
            let text = csv.into_inner();
            let options = SmiCsvOptions {
                fields: None,
                timezone: FixedOffset::east_opt(0).expect("UTC"),
            };
            let mut reader = SmiCsvReader::new(&text[..], options);
            let mut warnings = Warnings::collecting();
            let mut read = Snapshot::default();
            for (round, snapshot) in written.iter().enumerate() {
                let more = reader
                    .next_into(&mut read, &mut warnings)
                    .expect("the log reads");
                assert!(more, "{}: round {round} missing", node.hostname);
                assert_eq!(read.at, snapshot.at + chrono::TimeDelta::milliseconds(3));
                assert_eq!(read.gpus.len(), snapshot.gpus.len());
                for (got, want) in read.gpus.iter().zip(&snapshot.gpus) {
                    let (got, want) = (kept(got), kept(want));
                    assert_eq!(got, want, "{} {units:?} round {round}", node.hostname);
                }
            }
            assert!(
                !reader
                    .next_into(&mut read, &mut warnings)
                    .expect("the log reads"),
                "no round beyond those written"
            );
        }
    }
    assert_eq!(skus.len(), 5);
}
