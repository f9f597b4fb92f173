//! The metrics reference, `docs/metrics.md`: every family of the native catalogue
//! ([`super::metrics`]) and of the dcgm-exporter compatible set ([`super::dcgm`]), as
//! Markdown tables, and the dcgm-exporter fields not rendered with the reason.
//!
//! Generated, never edited by hand: `UPDATE_DOCS=1 cargo test --test metrics_doc` rewrites
//! the file, and the same test fails when the file and the catalogues disagree. It sits
//! above both catalogues so that neither imports the other.

use std::fmt::Write as _;

use super::dcgm;
use super::metric_def::MetricDef;
use super::metrics::{ALERTING, ANALYSIS, NATIVE};

/// The metrics reference (`docs/metrics.md`): native families, then the dcgm-exporter
/// compatible ones. Generated; edit the catalogue, not the file.
pub fn reference_markdown() -> String {
    let mut out = String::new();
    out.push_str(
        "# Metrics reference\n\n\
         <!-- Generated from src/export/metrics.rs and src/export/dcgm.rs by \
         `UPDATE_DOCS=1 cargo test --test metrics_doc`. Do not edit by hand. -->\n\n\
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
    out.push_str(
        "\n## dcgm-exporter compatible metrics (`[export] dcgm_compat = true`)\n\n\
         Rendered in addition to the metrics above, with dcgm-exporter's names, units and \
         labels so its Grafana dashboard and existing alert rules keep working. Every series \
         carries `gpu`, `UUID`, `pci_bus_id`, `device` (`nvidia<index>`), `modelName`, \
         `Hostname` (the spelling of dcgm-exporter up to 4.7; 4.8.3 and later write \
         `hostname`) and `DCGM_FI_DRIVER_VERSION`; the labels column lists only the ones beyond those. Units \
         are dcgm-exporter's: MHz, °C, W, mJ, MiB, %.\n\n",
    );
    table(&mut out, &dcgm::reference_defs());
    out.push_str(
        "\nNot rendered, from dcgm-exporter's default counter set and its commented-out \
         defaults:\n\n| field | why |\n|---|---|\n",
    );
    for (field, why) in dcgm::NOT_COVERED {
        let _ = writeln!(out, "| `{field}` | {why} |");
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_lists_every_family() {
        let doc = reference_markdown();
        for def in NATIVE.iter().chain(ANALYSIS).chain(ALERTING) {
            assert!(doc.contains(&format!("| `{}` |", def.name)), "{}", def.name);
        }
    }
}
