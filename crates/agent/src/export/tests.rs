//! Behaviour of [`render`](super::render) on hand-built snapshots: absent values, lost
//! GPUs, the process cap, label sanitising, XID accumulation and the gzip body.

use std::io::Read as _;

use chrono::{DateTime, Utc};

use super::*;
use crate::model::FamilyHealth;
use crate::model::{GpuSample, HostInfo, ProcessSample, XidEvent, XidSource};

fn at(seconds: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(1_767_225_600 + seconds, 0).unwrap_or_default()
}

fn gpu(index: u32) -> GpuSample {
    GpuSample {
        index,
        uuid: format!("GPU-{index}"),
        name: "NVIDIA H100 80GB HBM3".into(),
        pci_bus_id: format!("00000000:{:02X}:00.0", 0x18 + index),
        serial: Some(format!("serial-{index}")),
        up: true,
        temperature_celsius: Some(40.0 + f64::from(index)),
        ..Default::default()
    }
}

fn snapshot(gpus: Vec<GpuSample>) -> Snapshot {
    Snapshot {
        at: at(0),
        host: HostInfo {
            hostname: "host-a".into(),
            driver_version: Some("570.124.06".into()),
            cuda_version: Some("12.8".into()),
            ..HostInfo::default()
        },
        gpus,
        ..Default::default()
    }
}

fn health() -> CollectHealth {
    CollectHealth {
        source_up: true,
        families: vec![FamilyHealth {
            name: "memory",
            seconds: 0.25,
            success: false,
        }],
        errors_by_call: [("nvmlDeviceGetMemoryInfo".to_string(), 3)].into(),
        seconds: 0.5,
    }
}

fn text(snapshot: &Snapshot, state: &mut ExportState, options: &RenderOptions) -> String {
    let health = health();
    let exposition = render(&RenderInput::new(snapshot, &health), state, options);
    String::from_utf8(exposition.text.to_vec()).unwrap_or_default()
}

fn options() -> RenderOptions {
    RenderOptions {
        hostname: "node-1".into(),
        ..RenderOptions::default()
    }
}

/// Sample lines (not comments) of the family `name`.
fn samples<'a>(text: &'a str, name: &str) -> Vec<&'a str> {
    text.lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .collect()
}

#[test]
fn absent_values_render_no_series_and_empty_families_are_omitted() {
    let text = text(&snapshot(vec![gpu(0)]), &mut ExportState::new(), &options());
    assert_eq!(
        samples(&text, "gpu_temperature_celsius"),
        [r#"gpu_temperature_celsius{gpu="0",uuid="GPU-0"} 40"#]
    );
    for absent in [
        "gpu_power_watts",
        "gpu_utilization_ratio",
        "gpu_clock_hertz",
        "gpu_ecc_errors_total",
        "gpu_xid_errors_total",
        "gpu_process_memory_bytes",
    ] {
        assert!(!text.contains(absent), "{absent} rendered:\n{text}");
    }
    assert!(text.contains("gpu_sentinel_process_series_dropped 0\n"));
}

#[test]
fn identity_and_health_render() {
    let text = text(&snapshot(vec![gpu(0)]), &mut ExportState::new(), &options());
    assert_eq!(
        samples(&text, "gpu_info"),
        [concat!(
            r#"gpu_info{gpu="0",uuid="GPU-0",name="NVIDIA H100 80GB HBM3","#,
            r#"pci_bus_id="00000000:18:00.0",serial="serial-0",driver_version="570.124.06","#,
            r#"cuda_version="12.8",hostname="node-1"} 1"#
        )]
    );
    assert!(text.contains("gpu_sentinel_source_up 1\n"));
    assert!(text.contains("gpu_sentinel_collect_duration_seconds{stage=\"collect\"} 0.5\n"));
    assert!(text.contains("gpu_sentinel_last_collect_timestamp_seconds 1767225600\n"));
    assert!(
        text.contains("gpu_sentinel_collect_errors_total{call=\"nvmlDeviceGetMemoryInfo\"} 3\n")
    );
    assert!(text.contains("gpu_sentinel_collector_success{collector=\"memory\"} 0\n"));
    assert!(text.contains("gpu_sentinel_collector_duration_seconds{collector=\"memory\"} 0.25\n"));
    assert!(text.contains(&format!(
        "gpu_sentinel_build_info{{version=\"{}\",revision=\"{}\"}} 1\n",
        env!("CARGO_PKG_VERSION"),
        env!("GPU_SENTINEL_REVISION")
    )));
}

#[test]
fn clocks_are_rendered_in_hertz() {
    let mut g = gpu(0);
    g.clocks.sm = Some(1980);
    let text = text(&snapshot(vec![g]), &mut ExportState::new(), &options());
    assert_eq!(
        samples(&text, "gpu_clock_hertz"),
        [r#"gpu_clock_hertz{gpu="0",uuid="GPU-0",clock="sm"} 1980000000"#]
    );
}

#[test]
fn a_lost_gpu_renders_up_zero_its_info_and_its_xids_only() {
    let mut lost = GpuSample {
        up: false,
        ..gpu(1)
    };
    // Stale data a source might leave behind must not leak out.
    lost.power_watts = Some(300.0);
    let mut snap = snapshot(vec![gpu(0), lost]);
    snap.processes = vec![ProcessSample {
        gpu: 1,
        uuid: "GPU-1".into(),
        pid: 7,
        used_memory_bytes: Some(1 << 30),
        ..Default::default()
    }];
    snap.events = vec![XidEvent {
        at: at(0),
        gpu: Some(1),
        uuid: Some("GPU-1".into()),
        pci_bus_id: None,
        xid: 79,
        source: XidSource::Kmsg,
        message: None,
    }];
    let opts = RenderOptions {
        dcgm_compat: true,
        ..options()
    };
    let text = text(&snap, &mut ExportState::new(), &opts);
    let lost_series: Vec<&str> = text
        .lines()
        .filter(|l| {
            !l.starts_with('#') && (l.contains("uuid=\"GPU-1\"") || l.contains("UUID=\"GPU-1\""))
        })
        .collect();
    assert_eq!(lost_series.len(), 4, "{lost_series:#?}");
    assert!(lost_series[0].starts_with("gpu_info{gpu=\"1\""));
    assert_eq!(lost_series[1], r#"gpu_up{gpu="1",uuid="GPU-1"} 0"#);
    assert_eq!(
        lost_series[2],
        r#"gpu_xid_errors_total{gpu="1",uuid="GPU-1",xid="79",class="hardware"} 1"#
    );
    assert!(lost_series[3].starts_with("DCGM_FI_DEV_XID_ERRORS{gpu=\"1\""));
    assert!(lost_series[3].ends_with(",err_code=\"79\"} 79"));
    assert!(text.contains(r#"gpu_up{gpu="0",uuid="GPU-0"} 1"#));
}

#[test]
fn xid_counters_accumulate_across_ticks() {
    let mut state = ExportState::new();
    let xid = |n: u32| XidEvent {
        at: at(0),
        gpu: Some(0),
        uuid: Some("GPU-0".into()),
        pci_bus_id: None,
        xid: n,
        source: XidSource::Nvml,
        message: None,
    };
    let mut snap = snapshot(vec![gpu(0)]);
    let opts = RenderOptions {
        dcgm_compat: true,
        ..options()
    };
    snap.events = vec![xid(13), xid(13)];
    text(&snap, &mut state, &opts);
    snap.events = vec![];
    text(&snap, &mut state, &opts);
    snap.events = vec![xid(13), xid(48)];
    let text = text(&snap, &mut state, &opts);
    assert_eq!(
        samples(&text, "gpu_xid_errors_total"),
        [
            r#"gpu_xid_errors_total{gpu="0",uuid="GPU-0",xid="13",class="application"} 3"#,
            r#"gpu_xid_errors_total{gpu="0",uuid="GPU-0",xid="48",class="memory"} 1"#,
        ]
    );
    let dcgm = samples(&text, "DCGM_FI_DEV_XID_ERRORS");
    assert_eq!(dcgm.len(), 1);
    assert!(dcgm[0].ends_with(",err_code=\"48\"} 48"), "{}", dcgm[0]);
}

#[test]
fn a_healthy_gpu_shows_xid_zero_to_dcgm() {
    let opts = RenderOptions {
        dcgm_compat: true,
        dcgm_hostname_label: HostnameLabel::Lowercase,
        ..options()
    };
    let text = text(&snapshot(vec![gpu(0)]), &mut ExportState::new(), &opts);
    assert_eq!(
        samples(&text, "DCGM_FI_DEV_XID_ERRORS"),
        [concat!(
            r#"DCGM_FI_DEV_XID_ERRORS{gpu="0",UUID="GPU-0",pci_bus_id="00000000:18:00.0","#,
            r#"device="nvidia0",modelName="NVIDIA H100 80GB HBM3",hostname="node-1","#,
            r#"DCGM_FI_DRIVER_VERSION="570.124.06",err_code="0"} 0"#
        )]
    );
}

fn process(gpu: u32, pid: u32, mib: u64) -> ProcessSample {
    ProcessSample {
        gpu,
        uuid: format!("GPU-{gpu}"),
        pid,
        used_memory_bytes: Some(mib << 20),
        sm_utilization: Some(0.5),
        process: Some("python".into()),
        ..Default::default()
    }
}

#[test]
fn process_series_keep_the_largest_holders_and_count_the_rest() {
    let mut snap = snapshot(vec![gpu(0), gpu(1)]);
    snap.processes = vec![
        process(0, 10, 100),
        process(0, 11, 5000),
        process(1, 12, 300),
        process(1, 13, 200),
        process(1, 14, 1),
    ];
    let opts = RenderOptions {
        max_process_series: 3,
        ..options()
    };
    let text = text(&snap, &mut ExportState::new(), &opts);
    let kept: Vec<&str> = samples(&text, "gpu_process_memory_bytes");
    assert_eq!(kept.len(), 3, "{kept:#?}");
    for (line, pid) in kept.iter().zip(["11", "12", "13"]) {
        assert!(line.contains(&format!("pid=\"{pid}\"")), "{line}");
    }
    assert_eq!(samples(&text, "gpu_process_utilization_ratio").len(), 3);
    assert!(text.contains("gpu_sentinel_process_series_dropped 2\n"));
}

#[test]
fn label_values_are_sanitised_cut_and_escaped() {
    let mut snap = snapshot(vec![gpu(0)]);
    snap.processes = vec![ProcessSample {
        process: Some("a\"b\\c\nd\u{1b}[31me\u{0}".into()),
        user: Some("x".repeat(500)),
        pod: Some("пóд-名前".into()),
        ..process(0, 1, 10)
    }];
    let opts = RenderOptions {
        max_label_length: 100,
        ..options()
    };
    let text = text(&snap, &mut ExportState::new(), &opts);
    let line = samples(&text, "gpu_process_memory_bytes")
        .first()
        .copied()
        .unwrap_or_default();
    assert!(
        line.contains(r#"process="a\"b\\c\nd[31me""#),
        "control characters removed, quote/backslash/newline escaped: {line}"
    );
    assert!(
        line.contains(&format!("user=\"{}\"", "x".repeat(100))),
        "{line}"
    );
    assert!(line.contains("pod=\"пóд-名前\""), "{line}");
    // Empty owners are left out rather than rendered as "".
    assert!(!line.contains("container="), "{line}");
}

#[test]
fn a_tiny_label_length_never_cuts_gpu_identity() {
    let mut g = gpu(0);
    g.uuid = "GPU-4ef22fd1-a3d5-17e2-9eb5-ce3d06dcef79".into();
    let opts = RenderOptions {
        max_label_length: 8,
        ..options()
    };
    let text = text(&snapshot(vec![g]), &mut ExportState::new(), &opts);
    assert!(text.contains(r#"gpu_up{gpu="0",uuid="GPU-4ef22fd1-a3d5-17e2-9eb5-ce3d06dcef79"} 1"#));
}

#[test]
fn gzip_decompresses_to_the_text() {
    let (snap, health) = (snapshot(vec![gpu(0), gpu(1)]), health());
    let exposition = render(
        &RenderInput::new(&snap, &health),
        &mut ExportState::new(),
        &options(),
    );
    let mut unzipped = Vec::new();
    let read = flate2::read::GzDecoder::new(&exposition.gzip[..]).read_to_end(&mut unzipped);
    assert!(read.is_ok(), "{read:?}");
    assert!(!exposition.text.is_empty());
    assert_eq!(unzipped, exposition.text.to_vec());
}

#[test]
fn families_follow_the_catalogue_order() {
    let mut g = gpu(0);
    g.power_watts = Some(100.0);
    g.utilization.gpu = Some(0.5);
    let (snap, health) = (snapshot(vec![g]), health());
    let families = families(
        &RenderInput::new(&snap, &health),
        &mut ExportState::new(),
        &options(),
    );
    let names: Vec<&str> = families.names().collect();
    let positions: Vec<usize> = names
        .iter()
        .filter_map(|n| metrics::NATIVE.iter().position(|d| d.name == *n))
        .collect();
    assert_eq!(positions.len(), names.len());
    assert!(positions.windows(2).all(|w| w[0] < w[1]), "{names:?}");
}

#[test]
fn nvlink_errors_are_summed_per_gpu_unless_per_link_is_asked() {
    use crate::model::NvLinkErrors;
    let mut g = gpu(0);
    g.nvlink = (0..18)
        .map(|link| NvLinkErrors {
            link,
            replay: u64::from(link),
            crc_flit: if link == 5 { 1000 } else { 0 },
            ..NvLinkErrors::default()
        })
        .collect();
    let summed = text(
        &snapshot(vec![g.clone()]),
        &mut ExportState::new(),
        &options(),
    );
    assert_eq!(
        samples(&summed, "gpu_nvlink_errors_total"),
        [
            r#"gpu_nvlink_errors_total{gpu="0",uuid="GPU-0",error="replay"} 153"#,
            r#"gpu_nvlink_errors_total{gpu="0",uuid="GPU-0",error="recovery"} 0"#,
            r#"gpu_nvlink_errors_total{gpu="0",uuid="GPU-0",error="crc_flit"} 1000"#,
            r#"gpu_nvlink_errors_total{gpu="0",uuid="GPU-0",error="crc_data"} 0"#,
        ]
    );
    let per_link = RenderOptions {
        nvlink_per_link: true,
        ..options()
    };
    let text = text(&snapshot(vec![g]), &mut ExportState::new(), &per_link);
    let lines = samples(&text, "gpu_nvlink_errors_total");
    assert_eq!(lines.len(), 72);
    assert!(lines.contains(
        &r#"gpu_nvlink_errors_total{gpu="0",uuid="GPU-0",link="5",error="crc_flit"} 1000"#
    ));
}
