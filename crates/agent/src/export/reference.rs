//! The metrics reference, `docs/metrics.md`: every family of the native catalogue
//! ([`super::metrics`]) and of the dcgm-exporter compatible set ([`super::dcgm`]), as
//! Markdown tables, and the dcgm-exporter fields not rendered with the reason.
//!
//! Generated, never edited by hand: `UPDATE_DOCS=1 cargo test --test it metrics_doc::` rewrites
//! the file, and the same test fails when the file and the catalogues disagree. It sits
//! above both catalogues so that neither imports the other.

use std::fmt::Write as _;

use super::budget;
use super::dcgm;
use super::dcgm_render::PER_INSTANCE;
use super::metric_def::MetricDef;
use super::metrics::{ALERTING, ANALYSIS, NATIVE};
use super::mig::{MIG_ANALYSIS, MIG_NATIVE};

/// The metrics reference (`docs/metrics.md`): native families, then the dcgm-exporter
/// compatible ones. Generated; edit the catalogue, not the file.
pub fn reference_markdown() -> String {
    let mut out = String::new();
    out.push_str(
        "# Metrics reference\n\n\
         <!-- Generated from crates/agent/src/export/metrics.rs and crates/agent/src/export/dcgm.rs by \
         `UPDATE_DOCS=1 cargo test --test it metrics_doc::`. Do not edit by hand. -->\n\n\
         Every series of a GPU carries `gpu` (the NVML index) and `uuid`; identity \
         (name, PCI bus id, serial, driver) lives on `gpu_info` only. A value the GPU did not \
         give renders no sample rather than 0. A lost GPU renders `gpu_up 0`, its `gpu_info` \
         and its XID counters, nothing else.\n\n\
         ## gpu-sentinel metrics\n\n",
    );
    table(&mut out, NATIVE);
    out.push_str(
        "\n## Analysis metrics\n\n\
         From the analysis engine: failure risk with its reasons, idle and ghost findings, \
         cost and owner time, scaling and placement advice. Counters of cost and owner time \
         continue across restarts (the engine's state is persisted).\n\n",
    );
    table(&mut out, ANALYSIS);
    out.push_str("\n## Alerting metrics\n\n");
    table(&mut out, ALERTING);
    let _ = write!(
        out,
        "\n## MIG instance metrics\n\n\
         A GPU in MIG mode is cut into MIG devices (compute instances of GPU instances); each \
         has these series, labelled with its GPU's `gpu` and `uuid`, its `gpu_instance` and \
         `compute_instance` ids as `nvidia-smi` shows them, its `profile` as `nvidia-smi -L` \
         names it (`1g.10gb`, `1c.3g.40gb`) and its `mig_uuid`. An instance renders its series \
         while it exists, zeros when nothing runs in it; one created or destroyed appears or \
         goes at the next collection. Memory and activity are its GPU instance's (shared by \
         its compute instances); activity comes from GPM (Hopper and newer), and an instance \
         without it is never called idle. NVML gives no per-process utilization in MIG \
         mode: a process in an instance counts as computing nothing while its GPU instance's \
         SM activity is under 1%, so a dead one there is a ghost (`gpu_ghost_processes`, and \
         `GpuGhostProcess` with the instance's labels). Idle time and cost are the instance's own, at its \
         share of the GPU (`gpu_mig_share_ratio`). `gpu_allocation_info` and `gpu_process_*` \
         carry `gpu_instance` and `compute_instance` for what holds or runs in an \
         instance.\n\n\
         Owner time (`gpu_owner_seconds_total`) on a GPU in MIG mode: each interval between \
         two collections, every instance listed at its end charges its holders (the owners, \
         per [cost] owner, of the processes in it and of the scheduler's allocations of it) \
         its share of the interval, split evenly among them, busy or idle by its activity at \
         that end. A compute instance's share is its own compute slices (a `1c.3g.40gb` is \
         1/7, not 3/7), so the compute instances of one GPU instance add up to it, and an \
         allocation of a GPU instance without a compute instance holds each of them: its \
         owner is charged the GPU instance once. An instance nothing holds charges nobody \
         (the GPU's `gpu_cost_total` still counts it), including a compute instance that \
         shows its held sibling's memory; an instance created or destroyed is charged for \
         the intervals that end while it is listed. An owner's series of a MIG GPU thus sum \
         to the GPU-hours of the instances it held, at their shares, and a MIG GPU's owners \
         to at most its wall time. dcgm-exporter's series are one per GPU instance: the \
         fleet report counts such a series at its whole profile while a pod holds it or its \
         memory is above the floor, so a GPU instance with an empty compute instance counts \
         more there than here (docs/fleet.md).\n\n\
         Each MIG instance costs {} series (the MIG lines of the budget below). A GPU in MIG \
         mode keeps its own series too, less what NVML does not give in MIG mode (utilization, \
         row remaps, NVLink, GPM of the whole GPU): seven `1g` instances of an H100 add \
         {} series to it.\n\n",
        budget::per_mig_instance(),
        7 * budget::per_mig_instance()
    );
    table(&mut out, MIG_NATIVE);
    table(&mut out, MIG_ANALYSIS);
    out.push_str(
        "\n## dcgm-exporter compatible metrics (`[export] dcgm_compat = true`)\n\n\
         Rendered in addition to the metrics above, with dcgm-exporter's names, units and \
         labels so its Grafana dashboard and existing alert rules keep working. Every series \
         carries `gpu`, `UUID`, `pci_bus_id`, `device` (`nvidia<index>`), `modelName`, \
         `Hostname` (the spelling of dcgm-exporter up to 4.7; 4.8.3 and later write \
         `hostname`) and `DCGM_FI_DRIVER_VERSION`; the labels column lists only the ones beyond those. Units \
         are dcgm-exporter's: MHz, °C, W, mJ, MiB, %.\n\n",
    );
    let mut defs = dcgm::reference_defs();
    for def in &mut defs {
        if PER_INSTANCE.iter().any(|(name, _)| *name == def.name) {
            def.labels = &[
                "GPU_I_PROFILE",
                "GPU_I_ID",
                "pod",
                "namespace",
                "container",
                "hpc_job",
            ];
        }
    }
    table(&mut out, &defs);
    let _ = write!(
        out,
        "\nOn a GPU in MIG mode the fields with `GPU_I_PROFILE` and `GPU_I_ID` above are one \
         series per GPU instance (its profile, `1g.10gb`, and NVML's id), in place of the \
         GPU's own, with the `pod`, `namespace` and `container` of the pod holding that \
         instance (dcgm-exporter's labels on its GPU-instance series); the other fields stay \
         one series of the GPU, without the instances' pods. That is {} series a GPU \
         instance.\n",
        PER_INSTANCE.len()
    );
    let _ = write!(
        out,
        "\nEach `DCGM_FI_*` family is one series a GPU; with the native families that is at \
         most {} series a GPU (dcgm-exporter's default set is 26 fields).\n",
        budget::DCGM_COMPAT_PER_GPU
    );
    out.push_str(
        "\nNot rendered, from dcgm-exporter's default counter set and its commented-out \
         defaults:\n\n| field | why |\n|---|---|\n",
    );
    for (field, why) in dcgm::NOT_COVERED {
        let _ = writeln!(out, "| `{field}` | {why} |");
    }
    let _ = write!(
        out,
        "\n## Series budget\n\n\
         What each native family costs the Prometheus that scrapes it: at a thousand hosts of \
         eight GPUs every series a GPU is 8,000 series in the store. The default exposition \
         stays within {} series a GPU, not counting the agent's own `gpu_sentinel_*` and the \
         per-process series (`max_process_series` bounds those); `tests/it/exposition.rs` holds \
         the simulator's exposition to each line below and to the total, at the worst moment \
         of its worst GPU over a simulated day (a failing GPU, its health verdicts counted). \
         The PCIe link's maximum generation and width have no series: they do not change \
         while the GPU sits in its slot, and `/api/v1/gpus` and the pcie health verdict read \
         the link against them; the reserved frame buffer is total less used less free.\n\n\
         The health verdicts' `gpu_health_state` names only the components that are not \
         healthy: eight constant zeros a GPU would have been 64,000 series at a thousand hosts. \
         Those it names carry their repair `action`: a component whose action changes \
         replaces its series rather than adding one. A component that recovers leaves the exposition, which Prometheus marks stale at \
         the next scrape, so its alert resolves; `gpu_node_health_state` is always there, \
         0 on a node whose GPUs are all healthy.\n\n",
        budget::DEFAULT_PER_GPU
    );
    budget_table(
        &mut out,
        NATIVE
            .iter()
            .chain(ANALYSIS)
            .chain(ALERTING)
            .chain(MIG_NATIVE)
            .chain(MIG_ANALYSIS),
    );
    out
}

fn table(out: &mut String, defs: &[MetricDef]) {
    out.push_str("| metric | type | labels | help |\n|---|---|---|---|\n");
    for def in defs {
        let labels: Vec<String> = def.labels.iter().map(|l| format!("`{l}`")).collect();
        // Writing to a String cannot fail.
        let _ = writeln!(
            out,
            "| `{}` | {} | {} | {} |",
            def.name,
            def.kind.as_str(),
            labels.join(", "),
            def.help.replace('|', "\\|")
        );
    }
}

/// What each family costs the store, and why it is worth it ([`budget`]).
fn budget_table<'a>(out: &mut String, defs: impl Iterator<Item = &'a MetricDef>) {
    out.push_str("| metric | series | worth it because |\n|---|---|---|\n");
    for def in defs {
        let (cost, why) = budget::of(def.name)
            .map(|b| (b.cost.describe(), b.why))
            .unwrap_or_else(|| ("unbudgeted".into(), ""));
        let _ = writeln!(
            out,
            "| `{}` | {} | {} |",
            def.name,
            cost.replace('|', "\\|"),
            why.replace('|', "\\|")
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_lists_every_family() {
        let doc = reference_markdown();
        for def in NATIVE
            .iter()
            .chain(ANALYSIS)
            .chain(ALERTING)
            .chain(MIG_NATIVE)
            .chain(MIG_ANALYSIS)
        {
            assert!(doc.contains(&format!("| `{}` |", def.name)), "{}", def.name);
        }
    }
}
