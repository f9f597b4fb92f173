//! The metrics reference, `docs/metrics.md`: every family of the native catalogue
//! ([`super::metrics`]) and of the dcgm-exporter compatible set ([`super::dcgm`]), as
//! Markdown tables, and the dcgm-exporter fields not rendered with the reason.
//!
//! Generated, never edited by hand: `UPDATE_DOCS=1 cargo test --test metrics_doc` rewrites
//! the file, and the same test fails when the file and the catalogues disagree. It sits
//! above both catalogues so that neither imports the other.

use std::fmt::Write as _;

use super::budget;
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
         per-process series (`max_process_series` bounds those); `tests/exposition.rs` holds \
         the simulator's exposition to each line below and to the total.\n\n\
         The budget was 70 series a GPU (110 with `dcgm_compat`) until the health verdicts \
         added `gpu_health_state`, one series per component, 8 a GPU. Emitting only the \
         components that are not healthy would have cost nothing on a healthy fleet, but a \
         series that exists only while something is wrong cannot be told from a series that \
         stopped being scraped, an alert cannot use `absent()` on it, and a dashboard shows a \
         gap where a component recovered. The verdict is what schedulers and alerts act on, \
         and each of its series keeps one value for hours (a few bytes a day on disk after \
         compression), so it is worth its place in the head; no family was trimmed for it, \
         because the families above were cut to what an operator acts on already.\n\n",
        budget::DEFAULT_PER_GPU
    );
    budget_table(&mut out, NATIVE.iter().chain(ANALYSIS).chain(ALERTING));
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
        for def in NATIVE.iter().chain(ANALYSIS).chain(ALERTING) {
            assert!(doc.contains(&format!("| `{}` |", def.name)), "{}", def.name);
        }
    }
}
