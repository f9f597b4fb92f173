use super::*;
use crate::model::{Gpm, Memory};

fn instance(gi: u32, ci: u32, used_mib: u64, holders_pid: u32) -> MigInstance {
    MigInstance {
        gpu_instance: gi,
        compute_instance: ci,
        uuid: format!("MIG-{gi}-{ci}"),
        profile: if gi == 2 { "3g.40gb" } else { "1g.10gb" }.into(),
        slices: 1,
        gpu_instance_slices: if gi == 2 { 3 } else { 1 },
        gpu_slices: 7,
        memory: Memory {
            total_bytes: Some(10_000 * MIB),
            used_bytes: Some(used_mib * MIB),
            free_bytes: Some((10_000 - used_mib) * MIB),
            reserved_bytes: Some(0),
        },
        gpm: Some(Gpm {
            sm_active: Some(0.25),
            ..Gpm::default()
        }),
        processes: holders_pid,
        ..MigInstance::default()
    }
}

fn snapshot() -> Snapshot {
    let mig_gpu = GpuSample {
        index: 0,
        uuid: "GPU-mig".into(),
        name: "NVIDIA H100 80GB HBM3".into(),
        up: true,
        mig_enabled: Some(true),
        temperature_celsius: Some(40.0),
        memory: Memory {
            used_bytes: Some(999 * MIB),
            ..Memory::default()
        },
        mig_instances: vec![
            instance(2, 0, 5000, 0),
            instance(2, 1, 5000, 0),
            instance(9, 0, 7000, 1),
        ],
        ..GpuSample::default()
    };
    let whole = GpuSample {
        index: 1,
        uuid: "GPU-whole".into(),
        up: true,
        temperature_celsius: Some(41.0),
        memory: Memory {
            used_bytes: Some(123 * MIB),
            ..Memory::default()
        },
        ..GpuSample::default()
    };
    let pod = |gpu: u32, uuid: &str, name: &str, gi: Option<u32>| Allocation {
        gpu,
        uuid: uuid.into(),
        namespace: Some("ml".into()),
        pod: Some(name.into()),
        container: Some("main".into()),
        gpu_instance: gi,
        compute_instance: gi.map(|_| 0),
        ..Allocation::default()
    };
    Snapshot {
        gpus: vec![mig_gpu, whole],
        allocations: vec![
            pod(0, "GPU-mig", "notebook", Some(9)),
            pod(1, "GPU-whole", "trainer", None),
        ],
        ..Snapshot::default()
    }
}

fn rendered() -> String {
    let mut families = Families::new(128);
    render_dcgm(
        &mut families,
        &snapshot(),
        &ExportState::new(),
        "node",
        HostnameLabel::Capitalised,
    );
    families.encode()
}

fn lines<'a>(text: &'a str, family: &str) -> Vec<&'a str> {
    text.lines()
        .filter(|l| l.starts_with(&format!("{family}{{")))
        .collect()
}

#[test]
fn a_mig_gpu_reports_what_mig_divides_per_gpu_instance_with_its_pods() {
    let text = rendered();
    let used = lines(&text, "DCGM_FI_DEV_FB_USED");
    // GI 2 (two compute instances: one series), GI 9, and the whole GPU; not the MIG
    // GPU's own total, which would count its instances twice.
    assert_eq!(used.len(), 3, "{used:#?}");
    assert!(used[0].contains("GPU_I_PROFILE=\"3g.40gb\",GPU_I_ID=\"2\",Hostname=\"node\""));
    assert!(used[0].ends_with("} 5000"), "{}", used[0]);
    assert!(!used[0].contains("pod="));
    assert!(used[1].contains("GPU_I_ID=\"9\"") && used[1].contains("pod=\"notebook\""));
    assert!(used[1].ends_with("} 7000"));
    assert!(used[2].contains("gpu=\"1\"") && used[2].contains("pod=\"trainer\""));
    assert!(!used[2].contains("GPU_I_"));
    let active = lines(&text, "DCGM_FI_PROF_SM_ACTIVE");
    assert_eq!(active.len(), 2);
}

#[test]
fn the_whole_board_readings_of_a_mig_gpu_stay_one_series_without_instance_pods() {
    let text = rendered();
    let temperature = lines(&text, "DCGM_FI_DEV_GPU_TEMP");
    assert_eq!(temperature.len(), 2, "{temperature:#?}");
    assert!(temperature[0].contains("gpu=\"0\"") && !temperature[0].contains("pod="));
    assert!(!temperature[0].contains("GPU_I_"));
    // The labels keep dcgm-exporter's order.
    assert!(temperature[1].starts_with(
        "DCGM_FI_DEV_GPU_TEMP{gpu=\"1\",UUID=\"GPU-whole\",device=\"nvidia1\",Hostname=\"node\""
    ));
}
