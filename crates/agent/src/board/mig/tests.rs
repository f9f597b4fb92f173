use chrono::{DateTime, Utc};

use super::*;
use crate::api::GpusDocument;
use crate::config::SimulationConfig;
use crate::engine::{Engine, EngineConfig};
use crate::source::simulate::Fleet;

/// Two simulated hours of a node whose GPU 0 is in MIG mode (the mixed layout: a 3g split
/// in two, a 2g, a notebook left idle on a 1g and an empty 1g; GPU 1 is the one whose
/// instances change).
fn mig_tile() -> String {
    let start: DateTime<Utc> = "2026-03-02T09:00:00Z".parse().expect("a time");
    let config = SimulationConfig {
        gpus: 3,
        mig_gpus: 2,
        faults: Vec::new(),
        ..SimulationConfig::default()
    };
    let mut fleet = Fleet::new(&config, start);
    let mut engine = Engine::new(EngineConfig::default());
    let mut last = None;
    for _ in 0..120 {
        fleet.advance(60.0);
        let snapshot = fleet.snapshot();
        let findings = engine.step(&snapshot);
        last = Some((snapshot, findings));
    }
    let (snapshot, findings) = last.expect("two hours of snapshots");
    let document = GpusDocument::new(&snapshot, &findings, 0.7);
    let mut out = String::new();
    write_instances(&mut out, &document.gpus[0]);
    out
}

#[test]
fn a_mig_gpu_is_drawn_split_into_its_instances_with_their_holders() {
    let tile = mig_tile();
    assert_eq!(tile.matches("data-mig-uuid=\"MIG-").count(), 5, "{tile}");
    assert!(tile.contains("MIG · 5 instances · 7/7 slices"), "{tile}");
    // One segment per instance on the bar of 7 slices, where it sits on the GPU.
    assert!(tile.contains("viewBox=\"0 0 7 1\""));
    assert_eq!(tile.matches("<rect class=\"u").count(), 5);
    assert!(tile.contains("x=\"2\" width=\"1\" height=\"1\"><title>1g.10gb GI 9 CI 0</title>"));
    assert!(tile.contains("x=\"5\" width=\"2\" height=\"1\"><title>2c.3g.40gb GI 2 CI 1</title>"));
    // The notebook left idle on GI 9, with its holder and its share's cost.
    let notebook = tile
        .split("<li ")
        .find(|l| l.contains(">GI 9 · CI 0<"))
        .expect("GI 9's line");
    assert!(
        notebook.starts_with("class=\"idle-allocated\""),
        "{notebook}"
    );
    assert!(notebook.contains("<b>notebooks/jupyter-"), "{notebook}");
    assert!(notebook.contains("held idle 1 h"), "{notebook}");
    // Nothing on GI 10: free.
    let empty = tile
        .split("<li ")
        .find(|l| l.contains(">GI 10 · CI 0<"))
        .expect("GI 10's line");
    assert!(empty.contains("badge free"), "{empty}");
}
