//! What MIG instances add to the rules: `GpuAllocatedIdle` for each allocated-but-idle
//! instance, naming it and charging its share of the GPU; `GpuGhostProcess` for each
//! instance dead processes hold memory in; and, on a GPU's health alerts, the instances
//! (with their holders) the GPU takes down with it.
//!
//! An instance's alert carries its GPU's `gpu` and `uuid` as every GPU alert does,
//! and `gpu_instance`, `compute_instance`, `profile` and `mig_uuid` (the labels of its
//! `gpu_mig_*` series), so each instance is an alert of its own; its holders' `namespace`,
//! `pod`, `hpc_job` and `team` labels are its own holders', never the GPU's others.

use std::collections::BTreeMap;

use super::Rule;
use super::evaluate::{Candidate, add_holder_labels, candidate, holders, processes};
use crate::alert::LabelSet;
use crate::engine::GpuFindings;
use crate::engine::idle::ProcessFinding;
use crate::engine::mig::InstanceFindings;

/// `rule` with `{instance}` in its summary naming `label`.
fn named(rule: &Rule, label: &str) -> Rule {
    Rule {
        summary: rule.summary.replace("{instance}", &format!(" {label}")),
        ..rule.clone()
    }
}

/// The labels of an instance's `gpu_mig_*` series, on its alert.
fn add_instance_labels(labels: &mut LabelSet, gi: u32, ci: u32, profile: &str, mig_uuid: &str) {
    labels.insert("gpu_instance".into(), gi.to_string());
    labels.insert("compute_instance".into(), ci.to_string());
    labels.insert("profile".into(), profile.to_string());
    labels.insert("mig_uuid".into(), mig_uuid.to_string());
}

/// One `GpuAllocatedIdle` candidate per allocated-but-idle instance of `gpu`.
pub(super) fn allocated_idle(
    rule: &Rule,
    hostname: &str,
    gpu: &GpuFindings,
    out: &mut Vec<Candidate>,
) {
    for instance in gpu.mig.iter().filter(|i| i.present && i.allocated_idle) {
        let minutes = instance.allocated_idle_seconds / 60.0;
        let mut found = candidate(
            &named(rule, &instance.label()),
            hostname,
            Some(gpu),
            &format!("{minutes:.0} min"),
            description(gpu, instance, minutes),
        );
        let labels = &mut found.labels;
        add_instance_labels(
            labels,
            instance.gpu_instance,
            instance.compute_instance,
            &instance.profile,
            &instance.uuid,
        );
        add_holder_labels(labels, &instance.holders);
        out.push(found);
    }
}

/// One `GpuGhostProcess` candidate per MIG instance of `gpu` that ghosts hold memory in
/// (the GPU's own candidate counts the ghosts outside any instance).
pub(super) fn ghosts(rule: &Rule, hostname: &str, gpu: &GpuFindings, out: &mut Vec<Candidate>) {
    // Asked of every GPU at every step, nearly always of none.
    if gpu.idle.ghosts.is_empty() {
        return;
    }
    let mut by_instance: BTreeMap<&str, Vec<ProcessFinding>> = BTreeMap::new();
    for ghost in &gpu.idle.ghosts {
        if let Some(uuid) = ghost.mig_uuid.as_deref() {
            by_instance.entry(uuid).or_default().push(ghost.clone());
        }
    }
    for (mig_uuid, ghosts) in by_instance {
        let first = &ghosts[0];
        let label = first.instance_label().unwrap_or_default();
        let mut found = candidate(
            &named(rule, &label),
            hostname,
            Some(gpu),
            &ghosts.len().to_string(),
            format!(
                "Memory held in {label} ({mig_uuid}) of GPU {} by processes that are gone, \
                 zombies or orphans, with no SM activity in it for the idle window: {}.",
                gpu.index,
                processes(&ghosts)
            ),
        );
        add_instance_labels(
            &mut found.labels,
            first.gpu_instance.unwrap_or_default(),
            first.compute_instance.unwrap_or_default(),
            first.profile.as_deref().unwrap_or_default(),
            mig_uuid,
        );
        out.push(found);
    }
}

/// `MIG 1g.10gb (GI 9, CI 0, MIG-…) of GPU 0 is allocated to …; it is 1/7 of the GPU: …`.
fn description(gpu: &GpuFindings, instance: &InstanceFindings, minutes: f64) -> String {
    let held = if !instance.holders.is_empty() {
        format!("is allocated to {}", holders(&instance.holders))
    } else if !instance.owners.is_empty() {
        format!("holds memory for {}", instance.owners.join(", "))
    } else {
        "holds memory".to_string()
    };
    let share = match share_of_seven(instance.fraction) {
        Some(sevenths) => format!("{sevenths}/7"),
        None => format!("{:.0}%", instance.fraction * 100.0),
    };
    format!(
        "{} ({}) of GPU {} {held} while its SM activity stayed under the idle threshold for \
         {minutes:.0} minutes. It is {share} of the GPU: its idle time costs {:.2} an hour \
         (its share of the GPU's {:.2}); {:.2} of idle cost so far.",
        instance.label(),
        instance.uuid,
        gpu.index,
        instance.hourly,
        gpu.cost.hourly,
        instance.cost_idle,
    )
}

/// `fraction` as sevenths of a GPU, when it is a whole number of them.
fn share_of_seven(fraction: f64) -> Option<u32> {
    let sevenths = fraction * 7.0;
    ((sevenths - sevenths.round()).abs() < 1e-6 && sevenths >= 0.5).then(|| sevenths.round() as u32)
}

/// ` MIG instances on it: …` naming each instance of a GPU in MIG mode and who holds it,
/// for the GPU's health alerts; empty for a GPU without instances.
pub(super) fn affected(gpu: &GpuFindings) -> String {
    if gpu.mig.is_empty() {
        return String::new();
    }
    let listed: Vec<String> = gpu
        .mig
        .iter()
        .map(|i| {
            let who = if !i.holders.is_empty() {
                format!(" held by {}", holders(&i.holders))
            } else if !i.owners.is_empty() {
                format!(" used by {}", i.owners.join(", "))
            } else {
                String::new()
            };
            format!("{}{who}", i.label())
        })
        .collect();
    format!(" MIG instances on it: {}.", listed.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Allocation;

    fn gpu_with_idle_instance() -> GpuFindings {
        let mut gpu = GpuFindings {
            index: 0,
            uuid: "GPU-a".into(),
            up: true,
            ..GpuFindings::default()
        };
        gpu.cost.hourly = 7.0;
        gpu.mig = vec![
            InstanceFindings {
                uuid: "MIG-9".into(),
                gpu_instance: 9,
                profile: "1g.10gb".into(),
                fraction: 1.0 / 7.0,
                present: true,
                allocated: true,
                allocated_idle: true,
                allocated_idle_seconds: 2400.0,
                holders: vec![Allocation {
                    namespace: Some("notebooks".into()),
                    pod: Some("jupyter-alice".into()),
                    gpu_instance: Some(9),
                    ..Allocation::default()
                }],
                hourly: 1.0,
                cost_idle: 0.5,
                ..InstanceFindings::default()
            },
            InstanceFindings {
                uuid: "MIG-2".into(),
                gpu_instance: 2,
                profile: "3g.40gb".into(),
                fraction: 3.0 / 7.0,
                present: true,
                allocated: true,
                owners: vec!["ml".into()],
                ..InstanceFindings::default()
            },
        ];
        gpu
    }

    fn default_rule(name: &str) -> Rule {
        super::super::defaults(0.7)
            .into_iter()
            .find(|r| r.name == name)
            .expect("the default rule")
    }

    #[test]
    fn an_idle_instance_is_an_alert_of_its_own_naming_it_and_its_share() {
        let rule = default_rule("GpuAllocatedIdle");
        let mut out = Vec::new();
        allocated_idle(&rule, "node-1", &gpu_with_idle_instance(), &mut out);
        assert_eq!(out.len(), 1, "only the idle instance");
        let alert = &out[0];
        let label = |k: &str| alert.labels.get(k).map(String::as_str);
        assert_eq!(label("gpu_instance"), Some("9"));
        assert_eq!(label("profile"), Some("1g.10gb"));
        assert_eq!(label("mig_uuid"), Some("MIG-9"));
        assert_eq!(label("pod"), Some("jupyter-alice"));
        assert_eq!(label("gpu"), Some("0"));
        let summary = &alert.annotations["summary"];
        assert_eq!(
            summary,
            "GPU 0 MIG 1g.10gb (GI 9, CI 0) on node-1 is allocated but idle for 40 min"
        );
        let description = &alert.annotations["description"];
        assert!(
            description.contains("is allocated to pod notebooks/jupyter-alice")
                && description.contains("It is 1/7 of the GPU")
                && description.contains("costs 1.00 an hour (its share of the GPU's 7.00)"),
            "{description}"
        );
    }

    #[test]
    fn a_gpu_health_alert_names_the_instances_it_takes_down() {
        let text = affected(&gpu_with_idle_instance());
        assert_eq!(
            text,
            " MIG instances on it: MIG 1g.10gb (GI 9, CI 0) held by pod notebooks/jupyter-alice; \
             MIG 3g.40gb (GI 2, CI 0) used by ml."
        );
        assert_eq!(affected(&GpuFindings::default()), "");
        assert_eq!(share_of_seven(3.0 / 7.0), Some(3));
        assert_eq!(share_of_seven(0.25), None);
    }

    #[test]
    fn a_ghost_in_an_instance_is_an_alert_of_its_own_naming_it() {
        use crate::engine::idle::ProcessFinding;
        use crate::model::Liveness;
        let rule = default_rule("GpuGhostProcess");
        let mut gpu = gpu_with_idle_instance();
        let ghost = |pid: u32, instance: Option<(u32, &str, &str)>| ProcessFinding {
            pid,
            user: Some("bob".into()),
            liveness: Liveness::Gone,
            idle_seconds: 1800.0,
            gpu_instance: instance.map(|i| i.0),
            compute_instance: instance.map(|_| 0),
            profile: instance.map(|i| i.1.to_string()),
            mig_uuid: instance.map(|i| i.2.to_string()),
            ..ProcessFinding::default()
        };
        gpu.idle.ghosts = vec![
            ghost(11, Some((9, "1g.10gb", "MIG-9"))),
            ghost(12, Some((9, "1g.10gb", "MIG-9"))),
            ghost(13, None),
        ];
        let input = crate::engine::Findings {
            at: chrono::DateTime::default(),
            gpus: vec![gpu],
            capacity: Default::default(),
            placement: Default::default(),
            health: Default::default(),
        };
        let out = super::super::evaluate(
            std::slice::from_ref(&rule),
            &super::super::RuleInput {
                findings: &input,
                health: None,
                hostname: "node-1",
            },
        );
        assert_eq!(out.len(), 2, "{out:?}");
        let (whole, instance): (Vec<_>, Vec<_>) =
            out.iter().partition(|c| !c.labels.contains_key("mig_uuid"));
        let label = |c: &Candidate, k: &str| c.labels.get(k).cloned().unwrap_or_default();
        assert_eq!(
            whole[0].annotations["summary"],
            "GPU 0 on node-1 holds memory for 1 dead process(es)"
        );
        assert!(whole[0].annotations["description"].contains("pid 13 "));
        assert!(!whole[0].annotations["description"].contains("pid 11 "));
        let one = instance[0];
        assert_eq!(
            (label(one, "gpu_instance"), label(one, "compute_instance")),
            ("9".into(), "0".into())
        );
        assert_eq!(label(one, "profile"), "1g.10gb");
        assert_eq!(label(one, "mig_uuid"), "MIG-9");
        assert_eq!(label(one, "uuid"), "GPU-a");
        assert_eq!(
            one.annotations["summary"],
            "GPU 0 MIG 1g.10gb (GI 9, CI 0) on node-1 holds memory for 2 dead process(es)"
        );
        let description = &one.annotations["description"];
        assert!(
            description.starts_with("Memory held in MIG 1g.10gb (GI 9, CI 0) (MIG-9) of GPU 0")
                && description.contains("pid 11 (bob, Gone, idle 30 min); pid 12 "),
            "{description}"
        );
    }
}
