//! What MIG instances add to the rules: `GpuAllocatedIdle` for each allocated-but-idle
//! instance, naming it and charging its share of the GPU; and, on a GPU's health alerts,
//! the instances (with their holders) the GPU takes down with it.
//!
//! An idle instance's alert carries its GPU's `gpu` and `uuid` as every GPU alert does,
//! and `gpu_instance`, `compute_instance`, `profile` and `mig_uuid` (the labels of its
//! `gpu_mig_*` series), so each instance is an alert of its own; its holders' `namespace`,
//! `pod`, `hpc_job` and `team` labels are its own holders', never the GPU's others.

use super::Rule;
use super::evaluate::{Candidate, add_holder_labels, candidate, holders};
use crate::engine::GpuFindings;
use crate::engine::mig::InstanceFindings;

/// One `GpuAllocatedIdle` candidate per allocated-but-idle instance of `gpu`.
pub(super) fn allocated_idle(
    rule: &Rule,
    hostname: &str,
    gpu: &GpuFindings,
    out: &mut Vec<Candidate>,
) {
    for instance in gpu.mig.iter().filter(|i| i.present && i.allocated_idle) {
        let minutes = instance.allocated_idle_seconds / 60.0;
        let named = Rule {
            summary: rule
                .summary
                .replace("{instance}", &format!(" {}", instance.label())),
            ..rule.clone()
        };
        let mut found = candidate(
            &named,
            hostname,
            Some(gpu),
            &format!("{minutes:.0} min"),
            description(gpu, instance, minutes),
        );
        let labels = &mut found.labels;
        labels.insert("gpu_instance".into(), instance.gpu_instance.to_string());
        labels.insert(
            "compute_instance".into(),
            instance.compute_instance.to_string(),
        );
        labels.insert("profile".into(), instance.profile.clone());
        labels.insert("mig_uuid".into(), instance.uuid.clone());
        add_holder_labels(labels, &instance.holders);
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

    #[test]
    fn an_idle_instance_is_an_alert_of_its_own_naming_it_and_its_share() {
        let rule = super::super::defaults(0.7)
            .into_iter()
            .find(|r| r.name == "GpuAllocatedIdle")
            .expect("the default rule");
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
}
