//! `gpu-sentinel snapshot`: one collection, printed for a person or as JSON.

use std::fmt::Write as _;
use std::time::Duration;

use super::SnapshotArgs;
use crate::model::{Liveness, Snapshot};

const GIB: f64 = (1u64 << 30) as f64;

pub fn snapshot(args: &SnapshotArgs) -> anyhow::Result<()> {
    let config = args.source.config()?;
    let mut source = super::sources::open(&config, args.source.simulate)?;
    if !args.source.simulate {
        // Per-process utilization and GPM ratios are differences between two samples:
        // the first collection only sets the baseline.
        source.collect();
        std::thread::sleep(Duration::from_secs(1));
    }
    let collection = source.collect();
    if args.json {
        let json = serde_json::to_string_pretty(&collection.snapshot)?;
        super::output::print(&format!("{json}\n"))
    } else {
        super::output::print(&table(&collection.snapshot))
    }
}

fn opt<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or_else(|| "-".to_string(), |v| v.to_string())
}

fn percent(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_string(), |v| format!("{:.0}%", v * 100.0))
}

/// A fixed-width table of GPUs, then one of processes.
pub fn table(snap: &Snapshot) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} at {}  driver {}  CUDA {}",
        snap.host.hostname,
        snap.at.format("%Y-%m-%d %H:%M:%S UTC"),
        snap.host.driver_version.as_deref().unwrap_or("-"),
        snap.host.cuda_version.as_deref().unwrap_or("-"),
    );
    let _ = writeln!(
        out,
        "{:>3} {:<24} {:<4} {:>5} {:>13} {:>5} {:>5} {:>11} {:>9} {:>11} {:>12}",
        "GPU",
        "NAME",
        "UP",
        "UTIL",
        "MEMORY GiB",
        "TEMP",
        "HBM",
        "POWER W",
        "ECC C/U",
        "REMAP C/U",
        "PCIE"
    );
    for g in &snap.gpus {
        let memory = match (g.memory.used_bytes, g.memory.total_bytes) {
            (Some(u), Some(t)) => format!("{:.1}/{:.1}", u as f64 / GIB, t as f64 / GIB),
            _ => "-".into(),
        };
        let power = match (g.power_watts, g.power_limit_watts) {
            (Some(p), Some(l)) => format!("{p:.0}/{l:.0}"),
            (Some(p), None) => format!("{p:.0}"),
            _ => "-".into(),
        };
        let ecc = format!(
            "{}/{}",
            opt(g.ecc.corrected_volatile),
            opt(g.ecc.uncorrected_volatile)
        );
        let remap = g.remapped_rows.map_or("-".into(), |r| {
            let flag = if r.failure {
                " FAIL"
            } else if r.pending {
                " pend"
            } else {
                ""
            };
            format!("{}/{}{flag}", r.correctable, r.uncorrectable)
        });
        let pcie = match (g.pcie.link_generation, g.pcie.link_width) {
            (Some(gen_), Some(w)) => format!("g{gen_}x{w} r{}", opt(g.pcie.replay_counter)),
            _ => "-".into(),
        };
        let name: String = g.name.chars().take(24).collect();
        let _ = writeln!(
            out,
            "{:>3} {:<24} {:<4} {:>5} {:>13} {:>5} {:>5} {:>11} {:>9} {:>11} {:>12}",
            g.index,
            name,
            if g.up { "yes" } else { "LOST" },
            percent(g.utilization.gpu),
            memory,
            opt(g.temperature_celsius),
            opt(g.memory_temperature_celsius),
            power,
            ecc,
            remap,
            pcie,
        );
    }
    if !snap.processes.is_empty() {
        let _ = writeln!(
            out,
            "\n{:>3} {:>8} {:<12} {:<14} {:>9} {:>5} {:<9} POD",
            "GPU", "PID", "USER", "PROCESS", "MEM GiB", "SM", "STATE"
        );
        for p in &snap.processes {
            let state = match p.liveness {
                Liveness::Unknown => "?",
                Liveness::Running => "running",
                Liveness::Zombie => "zombie",
                Liveness::Orphaned => "orphaned",
                Liveness::Gone => "GONE",
            };
            let _ = writeln!(
                out,
                "{:>3} {:>8} {:<12} {:<14} {:>9} {:>5} {:<9} {}",
                p.gpu,
                p.pid,
                p.user.as_deref().unwrap_or("-"),
                p.process.as_deref().unwrap_or("-"),
                p.used_memory_bytes
                    .map_or("-".into(), |b| format!("{:.1}", b as f64 / GIB)),
                percent(p.sm_utilization),
                state,
                p.pod.as_deref().unwrap_or("-"),
            );
        }
    }
    for e in &snap.events {
        let _ = writeln!(
            out,
            "XID {} on GPU {} ({}) at {}",
            e.xid,
            opt(e.gpu),
            e.pci_bus_id.as_deref().unwrap_or("?"),
            e.at.format("%H:%M:%S")
        );
    }
    out
}
