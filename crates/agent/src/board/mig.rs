//! The MIG part of a tile: a GPU in MIG mode drawn split into its instances.
//!
//! A bar of the GPU's compute slices, one segment per instance as wide as its slices and
//! shaded by its activity (an allocated-but-idle one outlined in the warning colour, the
//! slices no instance covers left as track), then one line per instance: its profile and
//! ids, memory, activity, who holds it (the scheduler's pods and jobs, else the processes
//! running in it) and its state. Everything comes from `/api/v1/gpus`: the instances of
//! the sample (`mig_instances`) and the engine's findings on them (`mig_findings`).

use maud::{Markup, html};

use super::units::{duration, gib, percent};
use crate::api::GpuView;
use crate::engine::mig::InstanceFindings;
use crate::html::{Text, shade};
use crate::model::MigInstance;

/// The state of an instance, as its line's class and badge say it.
fn state(f: Option<&InstanceFindings>) -> &'static str {
    match f {
        Some(f) if f.allocated_idle => "idle-allocated",
        Some(f) if f.unused => "free",
        Some(f) if f.idle_now => "idle",
        Some(f) if !f.present => "down",
        _ => "busy",
    }
}

/// Appends the MIG part of `gpu`'s tile ([`instances`]) to `out` (what its tests read).
#[cfg(test)]
pub(crate) fn write_instances(out: &mut String, gpu: &GpuView<'_>) {
    maud::Render::render_to(&instances(gpu), out);
}

/// The MIG part of `gpu`'s tile; nothing for a GPU without instances. A GPU that stopped
/// answering lists the instances it took down, as last seen.
pub fn instances(gpu: &GpuView<'_>) -> Markup {
    let instances = &gpu.sample.mig_instances;
    if instances.is_empty() {
        return down(gpu);
    }
    let findings = |i: &MigInstance| gpu.mig_findings.iter().find(|f| f.uuid == i.uuid);
    let gpu_slices = instances
        .iter()
        .map(|i| i.gpu_slices)
        .max()
        .unwrap_or(0)
        .max(instances.iter().map(|i| i.slices).sum());
    let used: u32 = instances.iter().map(|i| i.slices).sum();
    // Where each segment starts: its placement, else right after the one before.
    let mut next = 0;
    let starts: Vec<u32> = instances
        .iter()
        .map(|i| {
            let x = position(i, instances, gpu_slices).unwrap_or(next);
            next = x + i.slices;
            x
        })
        .collect();
    html! {
        div.mig {
            p.mig-head {
                "MIG · " (instances.len()) " instance" @if instances.len() != 1 { "s" }
                " · " (used) "/" (gpu_slices) " slices"
            }
            svg.split viewBox={ "0 0 " (gpu_slices) " 1" } preserveAspectRatio="none" {
                rect.track width=(gpu_slices) height="1" {}
                @for (i, x) in instances.iter().zip(starts) {
                    rect class={ (shade(i.gpm.and_then(|g| g.sm_active))) " " (state(findings(i))) }
                        x=(x) width=(i.slices) height="1" {
                        title {
                            (Text(format!(
                                "{} GI {} CI {}",
                                i.compute_profile(),
                                i.gpu_instance,
                                i.compute_instance
                            )))
                        }
                    }
                }
            }
            ul.instances {
                @for i in instances { (instance(gpu, i, findings(i))) }
            }
        }
    }
}

/// The first compute slice of instance `i`: its GPU instance's (its first memory slice,
/// within the GPU's compute slices: a `3g` on memory slices 4–7 computes on 4–6) plus the
/// slices of the compute instances before it in the same GPU instance.
fn position(i: &MigInstance, all: &[MigInstance], gpu_slices: u32) -> Option<u32> {
    let start = i.placement?.start;
    let gi_start = start.min(gpu_slices.saturating_sub(i.gpu_instance_slices));
    let before: u32 = all
        .iter()
        .filter(|o| o.gpu_instance == i.gpu_instance && o.compute_instance < i.compute_instance)
        .map(|o| o.slices)
        .sum();
    Some(gi_start + before)
}

fn instance(gpu: &GpuView<'_>, i: &MigInstance, f: Option<&InstanceFindings>) -> Markup {
    let state = state(f);
    let who = holders(gpu, i, f);
    html! {
        li class=(state) data-mig-uuid=(Text(&i.uuid)) {
            span.prof { (Text(i.compute_profile())) } " "
            span.muted { "GI " (i.gpu_instance) " · CI " (i.compute_instance) }
            @if let (Some(used), Some(total)) = (i.memory.used_bytes, i.memory.total_bytes) {
                " · " (gib(used)) " / " (gib(total)) " GiB"
            }
            @if let Some(active) = i.gpm.and_then(|g| g.sm_active) { " · SM " (percent(active)) }
            @if !who.is_empty() { " · " b { (Text(who.join(", "))) } }
            @match f {
                Some(f) if f.allocated_idle => {
                    " "
                    span.badge.idle-allocated {
                        "held idle " (duration(f.allocated_idle_seconds))
                        // What its share of the GPU costs, where GPU time has a price.
                        @if f.hourly > 0.0 { " · " (format!("{:.2}", f.hourly)) "/h" }
                    }
                }
                _ if state == "free" => { " " span.badge.free { "free" } }
                _ => {}
            }
        }
    }
}

/// The instances of a GPU that stopped answering, with who held them.
fn down(gpu: &GpuView<'_>) -> Markup {
    let who = |f: &InstanceFindings| -> Vec<String> {
        f.holders
            .iter()
            .filter_map(|a| a.namespace.as_ref().zip(a.pod.as_ref()))
            .map(|(ns, pod)| format!("{ns}/{pod}"))
            .chain(f.owners.iter().cloned())
            .collect()
    };
    html! {
        @if !gpu.mig_findings.is_empty() {
            div.mig {
                p.mig-head { "MIG instances down with the GPU" }
                ul.instances {
                    @for f in gpu.mig_findings.iter() {
                        @let who = who(f);
                        li.down data-mig-uuid=(Text(&f.uuid)) {
                            span.prof { (Text(&f.profile)) } " "
                            span.muted { "GI " (f.gpu_instance) " · CI " (f.compute_instance) }
                            @if !who.is_empty() { " · " b { (Text(who.join(", "))) } }
                        }
                    }
                }
            }
        }
    }
}

/// Who holds an instance: the scheduler's holders (`namespace/pod`, Slurm jobs), else the
/// processes running in it (`namespace/pod` or user).
fn holders(gpu: &GpuView<'_>, i: &MigInstance, f: Option<&InstanceFindings>) -> Vec<String> {
    let mut who: Vec<String> = f
        .map(|f| f.holders.as_slice())
        .unwrap_or_default()
        .iter()
        .filter_map(|a| match (&a.namespace, &a.pod, &a.hpc_job) {
            (Some(ns), Some(pod), _) => Some(format!("{ns}/{pod}")),
            (_, _, Some(job)) => Some(format!("job {job}")),
            _ => None,
        })
        .collect();
    if who.is_empty() {
        who = gpu
            .processes
            .iter()
            .filter(|p| i.runs(p))
            .filter_map(|p| match (&p.namespace, &p.pod, &p.user) {
                (Some(ns), Some(pod), _) => Some(format!("{ns}/{pod}")),
                (_, _, Some(user)) => Some(user.clone()),
                _ => None,
            })
            .collect();
    }
    who.sort();
    who.dedup();
    who
}

#[cfg(test)]
mod tests;
