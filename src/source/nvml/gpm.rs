//! GPU Performance Monitoring (Hopper and newer): SM active, SM occupancy, tensor and DRAM
//! activity as ratios between two samples.
//!
//! A GPM metric needs two samples; each tick takes one and compares it with the previous
//! tick's, so the ratios cover exactly one collection interval. nvml-wrapper's `GpmSample`
//! borrows the `Nvml` instance, which a struct that also owns that instance cannot hold, so
//! the previous sample is kept as its raw handle and re-wrapped for the comparison. Every
//! kept handle is freed before the `Nvml` it came from is shut down ([`GpmSamples::release`]).

use nvml_wrapper::enums::gpm::GpmMetricId;
use nvml_wrapper::gpm::gpm_metrics_get;
use nvml_wrapper::{Device, GpmSample, Nvml};
use nvml_wrapper_sys::bindings::nvmlGpmSample_t;

use super::calls::Calls;
use crate::model::Gpm;

/// A GPM sample handle kept between ticks.
struct RawSample(nvmlGpmSample_t);

// SAFETY: a GPM sample is a heap buffer owned by NVML; the handle is only ever used by the
// thread that currently owns the `NvmlSource` (through `&mut self`), never concurrently.
unsafe impl Send for RawSample {}

/// The previous GPM sample of each GPU, by NVML index.
#[derive(Default)]
pub struct GpmSamples {
    previous: Vec<Option<RawSample>>,
}

const METRICS: [(GpmMetricId, &str); 4] = [
    (GpmMetricId::SmUtil, "sm_active"),
    (GpmMetricId::SmOccupancy, "sm_occupancy"),
    (GpmMetricId::AnyTensorUtil, "tensor_active"),
    (GpmMetricId::DramBwUtil, "dram_active"),
];

impl GpmSamples {
    /// Frees the kept sample of GPU `index` (it was lost, or a different GPU took its index).
    pub fn forget(&mut self, nvml: &Nvml, index: usize) {
        if let Some(Some(raw)) = self.previous.get_mut(index).map(Option::take) {
            // SAFETY: `raw` came from `into_handle` on a sample of this same `nvml`, and was
            // taken out of the list, so it is wrapped (and freed on drop) exactly once.
            drop(unsafe { GpmSample::from_handle(nvml, raw.0) });
        }
    }

    /// Frees every kept sample. Must run before `nvml` is shut down.
    pub fn release(&mut self, nvml: &Nvml) {
        for index in 0..self.previous.len() {
            self.forget(nvml, index);
        }
    }

    /// Takes this tick's sample of GPU `index` and returns the ratios since the previous one
    /// (`None` on the first tick, or where GPM is unavailable).
    pub fn read(
        &mut self,
        nvml: &Nvml,
        dev: &Device<'_>,
        index: usize,
        c: &mut Calls<'_>,
    ) -> Option<Gpm> {
        if c.skip("nvmlGpmSampleGet", "") {
            return None;
        }
        if !c.skip("nvmlGpmQueryDeviceSupport", "") {
            match c.call("nvmlGpmQueryDeviceSupport", "", || dev.gpm_support()) {
                // Asked once: whether a GPU supports GPM does not change while it is up.
                Some(true) => c.never_again("nvmlGpmQueryDeviceSupport", ""),
                Some(false) => {
                    c.never_again("nvmlGpmSampleGet", "");
                    return None;
                }
                None => return None,
            }
        }
        let current = c.call("nvmlGpmSampleGet", "", || dev.gpm_sample())?;
        if self.previous.len() <= index {
            self.previous.resize_with(index + 1, || None);
        }
        let previous = self.previous[index].take().map(|raw| {
            // SAFETY: as in `forget`: a handle of this `nvml`, taken out, wrapped once.
            unsafe { GpmSample::from_handle(nvml, raw.0) }
        });
        let ratios = previous.as_ref().and_then(|previous| {
            let ids: Vec<GpmMetricId> = METRICS.iter().map(|(id, _)| *id).collect();
            let results = c.settle(
                "nvmlGpmMetricsGet",
                "",
                gpm_metrics_get(nvml, previous, &current, &ids),
            )?;
            let mut values = [None; 4];
            for (i, result) in results.into_iter().enumerate().take(METRICS.len()) {
                values[i] = c
                    .settle("nvmlGpmMetricsGet", METRICS[i].1, result)
                    .map(|r| (r.value / 100.0).clamp(0.0, 1.0));
            }
            Some(Gpm {
                sm_active: values[0],
                sm_occupancy: values[1],
                tensor_active: values[2],
                dram_active: values[3],
            })
        });
        drop(previous);
        self.previous[index] = Some(RawSample(current.into_handle()));
        ratios
    }
}
