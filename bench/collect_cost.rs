//! Collection cost per GPU per tick through the real NVML code path, answered by the fake
//! NVML library: `bench/collect.sh` runs it at 8 and 1024 GPUs.
//!
//! usage: collect-cost LIBFAKE_NVML_SO TICKS   (FAKE_NVML_SCENARIO names the fleet)

use std::path::Path;
use std::time::Instant;

use gpu_sentinel::source::Source;
use gpu_sentinel::source::nvml::NvmlSource;

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let lib = args
        .next()
        .ok_or_else(|| anyhow::anyhow!("usage: collect-cost LIB TICKS"))?;
    let ticks: u32 = args.next().unwrap_or_else(|| "20".into()).parse()?;
    let mut source = NvmlSource::open(Some(Path::new(&lib)))?;
    // The first tick reads identity and sets GPM and process baselines; time the steady state.
    let gpus = source.collect().snapshot.gpus.len();
    let began = Instant::now();
    for _ in 0..ticks {
        source.collect();
    }
    let per_tick = began.elapsed().as_secs_f64() / f64::from(ticks);
    println!(
        "{gpus} GPUs: {:.3} ms per tick, {:.1} us per GPU per tick",
        per_tick * 1e3,
        per_tick * 1e6 / gpus as f64
    );
    Ok(())
}
