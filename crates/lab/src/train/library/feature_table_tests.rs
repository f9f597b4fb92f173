//! What the features read on each GPU of a scenario library: for a failing GPU the values
//! a day before its failure, for any other GPU the largest each feature reached. Not a
//! check (it asserts nothing) but the reading docs/detection.md quotes when it says what
//! the healthy GPUs never show and what a missed failure showed a day ahead:
//!
//! ```sh
//! SEED=2 FEATURES=memory_gap_vs_baseline,memory_gap_persistent \
//!     cargo test --release -p gpu-sentinel-lab --features train --lib -- \
//!     --ignored feature_table --nocapture
//! ```
//!
//! The library is `train --scenarios 24 --days 30 --interval 10m`'s (its shortest
//! interval half of that, a row every 10 minutes).

use super::*;

#[test]
#[ignore = "a reading for docs/detection.md, minutes long: run it by name"]
fn feature_table() {
    let seed: u64 = std::env::var("SEED")
        .map_or(Ok(1), |s| s.parse())
        .expect("SEED");
    let names = std::env::var("FEATURES").unwrap_or_else(|_| {
        "memory_gap_vs_baseline,memory_gap_persistent,memory_gap_lasting,\
         temperature_vs_baseline,temperature_persistent"
            .into()
    });
    let columns: Vec<usize> = names
        .split(',')
        .map(|n| {
            FEATURES
                .iter()
                .position(|(f, _)| *f == n)
                .unwrap_or_else(|| panic!("{n} is not a feature"))
        })
        .collect();
    let library = Library::new(crate::scenario::LibraryOptions::new(seed, 24, 30.0));
    let options = LibraryOptions {
        seed,
        nodes: 24,
        days: 30.0,
        interval: 600.0,
        shortest_interval: 300.0,
        row_every: 600.0,
        threshold: 0.5,
        false_per_1000_days: 1.0,
        trace: Vec::new(),
    };
    let observed = observe(&library, &options);
    println!("node GPU kind family shows-a-day-ahead confounders | {names}");
    for (g, gpu) in observed.gpus.iter().enumerate() {
        let mut rows = observed.rows.iter().filter(|r| r.gpu == g);
        let values: Vec<f64> = match gpu.label.failure_s {
            Some(at) if gpu.label.kind == TruthKind::Failing => {
                let day_ahead = rows.rfind(|r| r.t <= at - 86_400.0);
                columns
                    .iter()
                    .map(|&i| day_ahead.map_or(0.0, |r| r.x[i]))
                    .collect()
            }
            _ => {
                let mut most = vec![0.0f64; columns.len()];
                for r in rows {
                    for (m, &i) in most.iter_mut().zip(&columns) {
                        *m = m.max(r.x[i]);
                    }
                }
                most
            }
        };
        let values: Vec<String> = values.iter().map(|v| format!("{v:.2}")).collect();
        println!(
            "node {} GPU {} {:?} {} {} {:?} | {}",
            gpu.node + 1,
            gpu.index,
            gpu.label.kind,
            gpu.label.family.as_deref().unwrap_or("-"),
            gpu.shows_a_day_ahead,
            gpu.label.confounders,
            values.join(" ")
        );
    }
}
