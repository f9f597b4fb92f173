//! The MIG part of a tile: a GPU in MIG mode drawn split into its instances.
//!
//! A bar of the GPU's compute slices, one segment per instance as wide as its slices and
//! shaded by its activity (an allocated-but-idle one outlined in the warning colour, the
//! slices no instance covers left as track), then one line per instance: its profile and
//! ids, memory, activity, who holds it (the scheduler's pods and jobs, else the processes
//! running in it) and its state. Everything comes from `/api/v1/gpus`: the instances of
//! the sample (`mig_instances`) and the engine's findings on them (`mig_findings`).

use std::fmt::Write;

use super::units::{duration, gib, percent};
use crate::api::GpuView;
use crate::engine::mig::InstanceFindings;
use crate::html::{escape, shade};
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

/// Writes the MIG part of `gpu`'s tile; nothing for a GPU without instances. A GPU that
/// stopped answering lists the instances it took down, as last seen.
pub fn write_instances(out: &mut String, gpu: &GpuView<'_>) {
    let instances = &gpu.sample.mig_instances;
    if instances.is_empty() {
        write_down(out, gpu);
        return;
    }
    let findings = |i: &MigInstance| gpu.mig_findings.iter().find(|f| f.uuid == i.uuid);
    let gpu_slices = instances
        .iter()
        .map(|i| i.gpu_slices)
        .max()
        .unwrap_or(0)
        .max(instances.iter().map(|i| i.slices).sum());
    let used: u32 = instances.iter().map(|i| i.slices).sum();
    let _ = write!(
        out,
        "<div class=\"mig\"><p class=\"mig-head\">MIG · {} instance{} · {used}/{gpu_slices} slices</p>\
         <svg class=\"split\" viewBox=\"0 0 {gpu_slices} 1\" preserveAspectRatio=\"none\">\
         <rect class=\"track\" width=\"{gpu_slices}\" height=\"1\"/>",
        instances.len(),
        if instances.len() == 1 { "" } else { "s" },
    );
    let mut next = 0;
    for i in instances {
        let x = position(i, instances, gpu_slices).unwrap_or(next);
        next = x + i.slices;
        let active = i.gpm.and_then(|g| g.sm_active);
        let _ = write!(
            out,
            "<rect class=\"{} {}\" x=\"{x}\" width=\"{}\" height=\"1\"><title>{}</title></rect>",
            shade(active),
            state(findings(i)),
            i.slices,
            escape(&format!(
                "{} GI {} CI {}",
                i.compute_profile(),
                i.gpu_instance,
                i.compute_instance
            )),
        );
    }
    out.push_str("</svg><ul class=\"instances\">");
    for i in instances {
        write_instance(out, gpu, i, findings(i));
    }
    out.push_str("</ul></div>");
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

fn write_instance(
    out: &mut String,
    gpu: &GpuView<'_>,
    i: &MigInstance,
    f: Option<&InstanceFindings>,
) {
    let state = state(f);
    let _ = write!(
        out,
        "<li class=\"{state}\" data-mig-uuid=\"{}\"><span class=\"prof\">{}</span> \
         <span class=\"muted\">GI {} · CI {}</span>",
        escape(&i.uuid),
        escape(&i.compute_profile()),
        i.gpu_instance,
        i.compute_instance,
    );
    if let (Some(used), Some(total)) = (i.memory.used_bytes, i.memory.total_bytes) {
        let _ = write!(out, " · {} / {} GiB", gib(used), gib(total));
    }
    if let Some(active) = i.gpm.and_then(|g| g.sm_active) {
        let _ = write!(out, " · SM {}", percent(active));
    }
    let who = holders(gpu, i, f);
    if !who.is_empty() {
        let _ = write!(out, " · <b>{}</b>", escape(&who.join(", ")));
    }
    match f {
        Some(f) if f.allocated_idle => {
            let _ = write!(
                out,
                " <span class=\"badge idle-allocated\">held idle {}",
                duration(f.allocated_idle_seconds)
            );
            // What its share of the GPU costs, where GPU time has a price.
            if f.hourly > 0.0 {
                let _ = write!(out, " · {:.2}/h", f.hourly);
            }
            out.push_str("</span>");
        }
        _ if state == "free" => out.push_str(" <span class=\"badge free\">free</span>"),
        _ => {}
    }
    out.push_str("</li>");
}

/// The instances of a GPU that stopped answering, with who held them.
fn write_down(out: &mut String, gpu: &GpuView<'_>) {
    if gpu.mig_findings.is_empty() {
        return;
    }
    out.push_str("<div class=\"mig\"><p class=\"mig-head\">MIG instances down with the GPU</p><ul class=\"instances\">");
    for f in gpu.mig_findings.iter() {
        let who: Vec<String> = f
            .holders
            .iter()
            .filter_map(|a| a.namespace.as_ref().zip(a.pod.as_ref()))
            .map(|(ns, pod)| format!("{ns}/{pod}"))
            .chain(f.owners.iter().cloned())
            .collect();
        let _ = write!(
            out,
            "<li class=\"down\" data-mig-uuid=\"{}\"><span class=\"prof\">{}</span> \
             <span class=\"muted\">GI {} · CI {}</span>",
            escape(&f.uuid),
            escape(&f.profile),
            f.gpu_instance,
            f.compute_instance,
        );
        if !who.is_empty() {
            let _ = write!(out, " · <b>{}</b>", escape(&who.join(", ")));
        }
        out.push_str("</li>");
    }
    out.push_str("</ul></div>");
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
#[path = "mig_tests.rs"]
mod tests;
