//! GPU Performance Monitoring (Hopper and newer): SM active, SM occupancy, tensor and DRAM
//! activity as ratios between two samples.
//!
//! A GPM metric needs two samples; each tick takes one and compares it with the previous
//! tick's, so the ratios cover exactly one collection interval. nvml-wrapper's `GpmSample`
//! borrows the `Nvml` instance, which a struct that also owns that instance cannot hold, so
//! the previous sample is kept as its raw handle and re-wrapped for the comparison. Every
//! kept handle is freed before the `Nvml` it came from is shut down ([`GpmSamples::release`]).
//!
//! A GPU in MIG mode is sampled per GPU instance (`nvmlGpmMigSampleGet`), its samples kept
//! by (GPU, GPU instance id) and freed when the instance is destroyed. A GPU instance also
//! gets its graphics-engine activity (`NVML_GPM_METRIC_GRAPHICS_UTIL`): NVML has no
//! utilization in MIG mode, and it is the instance's `DCGM_FI_PROF_GR_ENGINE_ACTIVE`.

use std::collections::BTreeMap;

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

/// The previous GPM sample of each GPU, by NVML index, and of each MIG GPU instance.
#[derive(Default)]
pub(crate) struct GpmSamples {
    previous: Vec<Option<RawSample>>,
    /// By (GPU index, GPU instance id).
    mig_previous: BTreeMap<(usize, u32), RawSample>,
}

/// The metrics of a whole GPU, in [`Gpm`]'s order.
const METRICS: [(GpmMetricId, &str); 4] = [
    (GpmMetricId::SmUtil, "sm_active"),
    (GpmMetricId::SmOccupancy, "sm_occupancy"),
    (GpmMetricId::AnyTensorUtil, "tensor_active"),
    (GpmMetricId::DramBwUtil, "dram_active"),
];

/// A MIG GPU instance's: the whole GPU's and its graphics-engine activity.
const MIG_METRICS: [(GpmMetricId, &str); 5] = [
    METRICS[0],
    METRICS[1],
    METRICS[2],
    METRICS[3],
    (GpmMetricId::GraphicsUtil, "graphics_active"),
];

impl GpmSamples {
    /// Frees the kept samples of GPU `index` (it was lost, or a different GPU took its
    /// index), its MIG instances' included.
    pub fn forget(&mut self, nvml: &Nvml, index: usize) {
        if let Some(Some(raw)) = self.previous.get_mut(index).map(Option::take) {
            // SAFETY: `raw` came from `into_handle` on a sample of this same `nvml`, and was
            // taken out of the list, so it is wrapped (and freed on drop) exactly once.
            drop(unsafe { GpmSample::from_handle(nvml, raw.0) });
        }
        self.keep_mig(nvml, index, &[]);
    }

    /// Frees the kept samples of GPU `index`'s MIG GPU instances other than `present`
    /// (destroyed since, or the GPU left MIG mode).
    pub(crate) fn keep_mig(&mut self, nvml: &Nvml, index: usize, present: &[u32]) {
        let gone: Vec<(usize, u32)> = self
            .mig_previous
            .keys()
            .filter(|(gpu, gi)| *gpu == index && !present.contains(gi))
            .copied()
            .collect();
        for key in gone {
            if let Some(raw) = self.mig_previous.remove(&key) {
                // SAFETY: as in the whole-GPU case: taken out of the map, wrapped once.
                drop(unsafe { GpmSample::from_handle(nvml, raw.0) });
            }
        }
    }

    /// Frees every kept sample. Must run before `nvml` is shut down.
    pub fn release(&mut self, nvml: &Nvml) {
        for index in 0..self.previous.len() {
            self.forget(nvml, index);
        }
        let indexes: Vec<usize> = self.mig_previous.keys().map(|(gpu, _)| *gpu).collect();
        for index in indexes {
            self.keep_mig(nvml, index, &[]);
        }
    }

    /// Takes this tick's sample of GPU instance `gpu_instance` of GPU `index` (in MIG
    /// mode) and returns the ratios since the previous one (`None` on its first tick, or
    /// where GPM is unavailable).
    pub(crate) fn read_mig(
        &mut self,
        nvml: &Nvml,
        dev: &Device<'_>,
        index: usize,
        gpu_instance: u32,
        c: &mut Calls<'_>,
    ) -> Option<Gpm> {
        let current = c.call("nvmlGpmMigSampleGet", "", || {
            dev.gpm_mig_sample(gpu_instance)
        })?;
        let previous = self.mig_previous.remove(&(index, gpu_instance)).map(|raw| {
            // SAFETY: a handle of this `nvml`, taken out of the map, wrapped once.
            unsafe { GpmSample::from_handle(nvml, raw.0) }
        });
        let gpm = previous
            .as_ref()
            .and_then(|previous| ratios(nvml, previous, &current, &MIG_METRICS, c));
        drop(previous);
        self.mig_previous
            .insert((index, gpu_instance), RawSample(current.into_handle()));
        gpm
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
        let ratios = previous
            .as_ref()
            .and_then(|previous| ratios(nvml, previous, &current, &METRICS, c));
        drop(previous);
        self.previous[index] = Some(RawSample(current.into_handle()));
        ratios
    }
}

/// The GPM ratios of `metrics` (a prefix of [`MIG_METRICS`]) between two samples, 0–1.
fn ratios(
    nvml: &Nvml,
    previous: &GpmSample<'_>,
    current: &GpmSample<'_>,
    metrics: &[(GpmMetricId, &'static str)],
    c: &mut Calls<'_>,
) -> Option<Gpm> {
    let ids: Vec<GpmMetricId> = metrics.iter().map(|(id, _)| *id).collect();
    let results = c.settle(
        "nvmlGpmMetricsGet",
        "",
        gpm_metrics_get(nvml, previous, current, &ids),
    )?;
    let mut values = [None; MIG_METRICS.len()];
    for (i, result) in results.into_iter().enumerate().take(metrics.len()) {
        values[i] = c
            .settle("nvmlGpmMetricsGet", metrics[i].1, result)
            .map(|r| (r.value / 100.0).clamp(0.0, 1.0));
    }
    Some(Gpm {
        sm_active: values[0],
        sm_occupancy: values[1],
        tensor_active: values[2],
        dram_active: values[3],
        graphics_active: values[4],
    })
}
