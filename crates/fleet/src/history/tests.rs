use super::*;

fn t(seconds: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(1_700_000_000 + seconds, 0).expect("in range")
}

fn series(name: &str, labels: &[(&str, &str)], points: &[(i64, f64)]) -> Series {
    let mut map: BTreeMap<String, String> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    map.insert("__name__".into(), name.into());
    Series {
        labels: map,
        points: points.iter().map(|&(s, v)| (t(s), v)).collect(),
    }
}

fn rebuild_all(dialect: Dialect, count: usize, all: &[Series]) -> (Vec<Snapshot>, Notes) {
    let mut xids = XidTracker::new(t(0));
    let mut notes = Notes::default();
    let snapshots = rebuild(
        dialect,
        t(0),
        TimeDelta::seconds(60),
        count,
        all,
        &mut xids,
        &mut notes,
    );
    (snapshots, notes)
}

const GPU0: &[(&str, &str)] = &[("gpu", "0"), ("uuid", "GPU-a"), ("instance", "n1")];

#[test]
fn native_families_come_back_in_model_units() {
    let info = [
        ("gpu", "0"),
        ("uuid", "GPU-a"),
        ("name", "NVIDIA H100"),
        ("pci_bus_id", "00000000:3B:00.0"),
        ("hostname", "node-1"),
        ("driver_version", "570.1"),
    ];
    let all = [
        series("gpu_info", &info, &[(0, 1.0), (60, 1.0), (120, 1.0)]),
        series("gpu_up", GPU0, &[(0, 1.0), (60, 1.0), (120, 0.0)]),
        series(
            "gpu_utilization_ratio",
            GPU0,
            &[(0, 0.5), (60, 0.25), (120, 0.9)],
        ),
        series("gpu_memory_used_bytes", GPU0, &[(0, 1024.0)]),
        series(
            "gpu_clock_hertz",
            &[("gpu", "0"), ("uuid", "GPU-a"), ("clock", "sm")],
            &[(0, 1_980_000_000.0)],
        ),
        series(
            "gpu_clock_event_active",
            &[
                ("gpu", "0"),
                ("uuid", "GPU-a"),
                ("reason", "hw_thermal_slowdown"),
            ],
            &[(0, 1.0)],
        ),
        series(
            "gpu_ecc_errors_total",
            &[
                ("gpu", "0"),
                ("uuid", "GPU-a"),
                ("error", "corrected"),
                ("scope", "volatile"),
            ],
            &[(0, 7.0)],
        ),
        series("gpu_remapped_rows_failure", GPU0, &[(0, 1.0)]),
        series(
            "gpu_process_memory_bytes",
            &[
                ("gpu", "0"),
                ("uuid", "GPU-a"),
                ("pid", "42"),
                ("namespace", "ml-a"),
                ("user", ""),
            ],
            &[(0, 2048.0)],
        ),
    ];
    let (snapshots, notes) = rebuild_all(Dialect::GpuSentinel, 3, &all);
    assert!(notes.skipped.is_empty(), "{:?}", notes.skipped);
    assert_eq!(snapshots.len(), 3);
    let first = &snapshots[0];
    assert_eq!(first.host.hostname, "node-1");
    assert_eq!(first.host.driver_version.as_deref(), Some("570.1"));
    let g = &first.gpus[0];
    assert_eq!(
        (g.index, g.uuid.as_str(), g.name.as_str()),
        (0, "GPU-a", "NVIDIA H100")
    );
    assert!(g.up);
    assert_eq!(g.utilization.gpu, Some(0.5));
    assert_eq!(g.memory.used_bytes, Some(1024));
    assert_eq!(g.clocks.sm, Some(1980));
    assert!(g.clock_events.is_some_and(|e| e.thermal()));
    assert_eq!(g.ecc.corrected_volatile, Some(7));
    assert!(g.remapped_rows.is_some_and(|r| r.failure));
    assert_eq!(
        g.temperature_celsius, None,
        "what the store lacks stays empty"
    );
    let p = &first.processes[0];
    assert_eq!((p.pid, p.used_memory_bytes), (42, Some(2048)));
    assert_eq!(p.namespace.as_deref(), Some("ml-a"));
    assert_eq!(p.user, None);
    // gpu_up 0: the GPU is listed, lost, with its identity only.
    let lost = &snapshots[2].gpus[0];
    assert!(!lost.up);
    assert_eq!(lost.name, "NVIDIA H100");
    assert_eq!(lost.utilization.gpu, None);
}

#[test]
fn xid_counters_become_events_only_when_they_grow_after_the_first_step() {
    let xid = [
        ("gpu", "0"),
        ("uuid", "GPU-a"),
        ("xid", "79"),
        ("class", "hardware"),
    ];
    let old = [
        ("gpu", "0"),
        ("uuid", "GPU-a"),
        ("xid", "13"),
        ("class", "application"),
    ];
    let all = [
        series(
            "gpu_up",
            GPU0,
            &[(0, 1.0), (60, 1.0), (120, 1.0), (180, 1.0)],
        ),
        series(
            "gpu_xid_errors_total",
            &old,
            &[(0, 5.0), (60, 5.0), (120, 5.0), (180, 5.0)],
        ),
        series("gpu_xid_errors_total", &xid, &[(120, 2.0), (180, 3.0)]),
    ];
    let (snapshots, _) = rebuild_all(Dialect::GpuSentinel, 4, &all);
    let xids: Vec<Vec<u32>> = snapshots
        .iter()
        .map(|s| s.events.iter().map(|e| e.xid).collect())
        .collect();
    assert_eq!(xids, [vec![], vec![], vec![79, 79], vec![79]]);
    assert_eq!(snapshots[2].events[0].uuid.as_deref(), Some("GPU-a"));
}

#[test]
fn dcgm_fields_come_back_in_model_units_and_a_vanished_gpu_is_missing() {
    let labels = [
        ("gpu", "1"),
        ("UUID", "GPU-b"),
        ("modelName", "NVIDIA H200"),
        ("Hostname", "node-2"),
        ("DCGM_FI_DRIVER_VERSION", "570.1"),
    ];
    let xid0 = [("gpu", "1"), ("UUID", "GPU-b"), ("err_code", "0")];
    let xid79 = [("gpu", "1"), ("UUID", "GPU-b"), ("err_code", "79")];
    let all = [
        series("DCGM_FI_DEV_GPU_UTIL", &labels, &[(0, 43.0), (60, 50.0)]),
        series("DCGM_FI_DEV_FB_USED", &labels, &[(0, 3.0)]),
        series("DCGM_FI_DEV_FB_FREE", &labels, &[(0, 5.0)]),
        series(
            "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
            &labels,
            &[(0, 12346.0)],
        ),
        series("DCGM_FI_DEV_XID_ERRORS", &xid0, &[(0, 0.0), (60, 0.0)]),
        series(
            "DCGM_FI_DEV_XID_ERRORS",
            &xid79,
            &[(60, 79.0), (120, 79.0), (180, 79.0)],
        ),
    ];
    let (snapshots, _) = rebuild_all(Dialect::DcgmExporter, 4, &all);
    assert_eq!(snapshots.len(), 2, "no field but the XID gauge: not listed");
    let g = &snapshots[0].gpus[0];
    assert_eq!(snapshots[0].host.hostname, "node-2");
    assert_eq!((g.index, g.name.as_str()), (1, "NVIDIA H200"));
    assert_eq!(g.utilization.gpu, Some(0.43));
    assert_eq!(g.memory.used_bytes, Some(3 << 20));
    assert_eq!(g.memory.total_bytes, Some(8 << 20), "used + free");
    assert_eq!(g.energy_joules, Some(12.346));
    assert!(snapshots[0].events.is_empty());
    assert_eq!(
        snapshots[1]
            .events
            .iter()
            .map(|e| e.xid)
            .collect::<Vec<_>>(),
        [79]
    );
}

#[test]
fn series_without_an_identity_are_skipped_and_counted() {
    let all = [
        series("gpu_up", &[("gpu", "x"), ("uuid", "GPU-a")], &[(0, 1.0)]),
        series("gpu_up", &[("gpu", "0")], &[(0, 1.0)]),
        series("gpu_up", GPU0, &[(0, 1.0)]),
    ];
    let (snapshots, notes) = rebuild_all(Dialect::GpuSentinel, 1, &all);
    assert_eq!(snapshots[0].gpus.len(), 1);
    assert_eq!(
        notes.skipped.values().sum::<u64>(),
        2,
        "{:?}",
        notes.skipped
    );
}

#[test]
fn chunks_cover_the_period_within_the_point_limit() {
    let period = Period {
        from: t(0),
        to: t(3 * 86_400),
        step: Duration::from_secs(60),
    };
    assert_eq!(period.chunk_steps(), 360);
    let fine = Period {
        step: Duration::from_secs(1),
        ..period
    };
    assert_eq!(fine.chunk_steps(), MAX_POINTS);
    assert_eq!(period.survey_window(), TimeDelta::hours(1));
    let decades = Period {
        to: t(20 * 365 * 86_400),
        ..period
    };
    let window = decades.survey_window();
    assert!((20 * 365 * 86_400) / window.num_seconds() <= MAX_POINTS as i64);
}

#[test]
fn label_values_are_quoted_for_promql() {
    assert_eq!(quote(r#"a"b\c"#), r#"a\"b\\c"#);
    assert_eq!(
        Dialect::GpuSentinel
            .selector("h:1")
            .split("instance=")
            .nth(1),
        Some("\"h:1\"}")
    );
}

proptest::proptest! {
    /// Whatever labels and values a store answers, the rebuild never panics, keeps only
    /// listed GPUs in index order, and hands on no reading that is not finite.
    #[test]
    fn any_series_rebuild_cleanly(
        rows in proptest::collection::vec(
            (
                0usize..native::METRICS.len() + dcgm::METRICS.len(),
                "[0-9x]{0,3}",
                "(GPU-[ab])?",
                "[a-z0-9_]{0,8}",
                proptest::collection::vec((0i64..5, proptest::num::f64::ANY), 0..5),
            ),
            0..24,
        ),
        dcgm_dialect in proptest::bool::ANY,
    ) {
        let names: Vec<&str> = native::METRICS.iter().chain(dcgm::METRICS).copied().collect();
        let all: Vec<Series> = rows
            .iter()
            .map(|(name, gpu, uuid, other, points)| {
                let labels = [
                    ("gpu", gpu.as_str()),
                    ("uuid", uuid.as_str()),
                    ("UUID", uuid.as_str()),
                    ("xid", other.as_str()),
                    ("err_code", other.as_str()),
                    ("pid", other.as_str()),
                    ("link", other.as_str()),
                    ("clock", other.as_str()),
                    ("reason", other.as_str()),
                ];
                let points: Vec<(i64, f64)> = points.iter().map(|&(k, v)| (k * 60, v)).collect();
                series(names[*name], &labels, &points)
            })
            .collect();
        let dialect = if dcgm_dialect { Dialect::DcgmExporter } else { Dialect::GpuSentinel };
        let (snapshots, _) = rebuild_all(dialect, 5, &all);
        for s in &snapshots {
            proptest::prop_assert!(!s.gpus.is_empty());
            proptest::prop_assert!(s.gpus.windows(2).all(|w| w[0].index <= w[1].index));
            proptest::prop_assert!(s.events.len() as u64 <= MAX_XIDS_PER_STEP * 24);
            for g in &s.gpus {
                proptest::prop_assert!(!g.uuid.is_empty());
                for v in [g.utilization.gpu, g.power_watts, g.temperature_celsius, g.energy_joules].into_iter().flatten() {
                    proptest::prop_assert!(v.is_finite());
                }
            }
        }
    }
}

#[test]
fn nvlink_errors_summed_over_links_come_back_as_one_link() {
    let with = |error: &'static str| -> Vec<(&'static str, &'static str)> {
        vec![
            ("gpu", "0"),
            ("uuid", "GPU-a"),
            ("instance", "n1"),
            ("error", error),
        ]
    };
    let all = [
        series("gpu_up", GPU0, &[(0, 1.0)]),
        series("gpu_nvlink_errors_total", &with("replay"), &[(0, 7.0)]),
        series("gpu_nvlink_errors_total", &with("crc_flit"), &[(0, 900.0)]),
    ];
    let (snapshots, _) = rebuild_all(Dialect::GpuSentinel, 1, &all);
    let links = &snapshots[0].gpus[0].nvlink;
    assert_eq!(links.len(), 1);
    assert_eq!((links[0].replay, links[0].crc_flit), (7, 900));
}

#[test]
fn a_gpu_instances_engine_activity_is_not_its_gpus_utilization() {
    // A GPU in MIG mode: dcgm-exporter (and gpu-sentinel with dcgm_compat) serves
    // DCGM_FI_PROF_GR_ENGINE_ACTIVE per GPU instance and no utilization of the GPU.
    let gi = |id| {
        [
            ("gpu", "0"),
            ("UUID", "GPU-m"),
            ("GPU_I_ID", id),
            ("GPU_I_PROFILE", "1g.10gb"),
        ]
    };
    let whole = [("gpu", "1"), ("UUID", "GPU-w")];
    let all = [
        series("DCGM_FI_PROF_GR_ENGINE_ACTIVE", &gi("9"), &[(0, 0.0)]),
        series("DCGM_FI_PROF_GR_ENGINE_ACTIVE", &gi("10"), &[(0, 0.9)]),
        series("DCGM_FI_DEV_FB_USED", &gi("9"), &[(0, 3.0)]),
        series("DCGM_FI_PROF_GR_ENGINE_ACTIVE", &whole, &[(0, 0.6)]),
    ];
    let (snapshots, _) = rebuild_all(Dialect::DcgmExporter, 1, &all);
    let gpu = |uuid: &str| {
        snapshots[0]
            .gpus
            .iter()
            .find(|g| g.uuid == uuid)
            .unwrap_or_else(|| panic!("{uuid}: {:?}", snapshots[0].gpus))
    };
    assert_eq!(gpu("GPU-m").utilization.gpu, None);
    assert_eq!(gpu("GPU-w").utilization.gpu, Some(0.6));
}
