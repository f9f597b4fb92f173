//! The documents read back what a reader ranks by, exactly as written; detail records come
//! back empty; abbreviated and older documents still read.

use chrono::{DateTime, Utc};

use super::*;
use crate::alert::alerting::Alerting;
use crate::config::Config;
use crate::engine::{Engine, EngineConfig, Findings};
use crate::model::Snapshot;
use crate::source::simulate::{FaultKind, Fleet, GpuPlan, WorkloadKind};

/// A simulated hour of five GPUs (two failing, one holding memory idle) with the engine's
/// findings and alerting's book at the end of it.
fn an_hour() -> (Snapshot, Findings, Alerting) {
    let start: DateTime<Utc> = "2026-03-02T09:00:00Z".parse().expect("a time");
    let plans = [
        GpuPlan::healthy(WorkloadKind::Training),
        GpuPlan::failing(FaultKind::MemoryWear, 0.0),
        GpuPlan::failing(FaultKind::FellOffBus, 0.0),
        GpuPlan::healthy(WorkloadKind::AllocatedIdle),
        GpuPlan::healthy(WorkloadKind::Inference),
    ];
    let mut fleet = Fleet::from_plans(7, "NVIDIA H100 80GB HBM3", start, &plans);
    let mut engine = Engine::new(EngineConfig::default());
    let mut alerting = Alerting::from_config(
        &Config::default(),
        "node-1".into(),
        "http://node-1:10400/api/v1/alerts".into(),
    )
    .expect("the default alerting");
    let mut last = None;
    for _ in 0..60 {
        fleet.advance(60.0);
        let mut snapshot = fleet.snapshot();
        snapshot.sanitize();
        let findings = engine.step(&snapshot);
        let _ = alerting.step(&findings, None);
        last = Some((snapshot, findings));
    }
    let (snapshot, findings) = last.expect("an hour of snapshots");
    (snapshot, findings, alerting)
}

#[test]
fn the_gpus_document_reads_back_what_review_ranks_by() {
    let (snapshot, findings, _) = an_hour();
    let written = GpusDocument::new(&snapshot, &findings, 0.7);
    let json = to_json(&written);
    let read: GpusDocument<'static> = serde_json::from_slice(&json).expect("reads back");

    assert_eq!(read.at, Some(snapshot.at));
    assert_eq!(read.hostname, written.hostname);
    assert_eq!(read.risk_threshold, Some(0.7));
    assert_eq!(read.gpus.len(), findings.gpus.len());
    assert!(
        read.gpus.iter().any(|g| !g.sample.up),
        "the GPU that fell off the bus is listed, not answering"
    );
    assert!(read.gpus.iter().any(|g| !g.findings.is_empty()));
    for (read, written) in read.gpus.iter().zip(&written.gpus) {
        assert_eq!(read.sample, written.sample);
        assert_eq!(read.lost, written.lost);
        assert_eq!(read.risk, written.risk);
        assert_eq!(read.findings, written.findings);
        assert_eq!(read.hardware_xids_24h, written.hardware_xids_24h);
        // Detail records are written, not read back.
        assert!(read.processes.is_empty() && read.xids.is_empty());
        assert_eq!(*read.idle, Default::default());
        assert_eq!(*read.cost, Default::default());
    }
    assert!(
        written.gpus.iter().any(|g| !g.processes.is_empty()),
        "the hour had processes to write"
    );
}

#[test]
fn an_abbreviated_document_reads_with_the_defaults_review_always_used() {
    let read: GpusDocument<'static> =
        serde_json::from_str(r#"{"gpus": [{"index": 3, "uuid": "GPU-a", "xids": [{"xid": 79}]}]}"#)
            .expect("reads");
    assert_eq!(read.at, None);
    assert_eq!(read.hostname, None);
    assert_eq!(read.risk_threshold, None);
    let gpu = &read.gpus[0];
    assert_eq!((gpu.sample.index, gpu.sample.uuid.as_str()), (3, "GPU-a"));
    assert_eq!(gpu.sample.name, "");
    assert!(
        gpu.sample.up,
        "a listed GPU without `up` is taken as answering"
    );
    assert_eq!(gpu.risk, None, "an exporter before the analysis engine");
    assert!(gpu.findings.is_empty() && !gpu.lost);

    let missing_uuid = serde_json::from_str::<GpusDocument<'static>>(r#"{"gpus": [{"index": 0}]}"#);
    assert!(missing_uuid.is_err());
}

#[test]
fn the_alerts_document_round_trips() {
    let (_, findings, alerting) = an_hour();
    let written = AlertsDocument::new(findings.at, alerting.book().alerts.values());
    assert!(!written.alerts.is_empty(), "the failing GPUs raised alerts");
    let json = to_json(&written);
    let read: AlertsDocument<'static> = serde_json::from_slice(&json).expect("reads back");
    assert_eq!(read, written);
    assert_eq!(to_json(&read), json);
}

#[test]
fn recommendations_read_back_the_job_asked_about() {
    let (_, findings, _) = an_hour();
    let written = Recommendations::new(&findings, Some((1, 1 << 30, false)));
    let job = written.job.clone().expect("a job was asked about");
    assert!(job.fits, "{job:?}");
    let read: Recommendations<'static> =
        serde_json::from_slice(&to_json(&written)).expect("reads back");
    assert_eq!(read.at, findings.at);
    assert_eq!(read.job, Some(job));

    let without_job = to_json(&Recommendations::new(&findings, None));
    let text = String::from_utf8_lossy(&without_job);
    assert!(!text.contains("\"job\""), "{text}");
}

#[test]
fn latest_is_empty_until_published_and_then_serves_the_publication() {
    let (snapshot, findings, alerting) = an_hour();
    let latest = Latest::default();
    assert!(latest.get().is_none());
    let published = Published::render(
        &snapshot,
        findings.clone(),
        alerting.book().alerts.values(),
        0.7,
        crate::export::Exposition::default(),
        // The page sees exactly the documents the API serves.
        |documents| Bytes::from(to_json(&documents.gpus).to_vec()),
    );
    assert_eq!(published.board, published.gpus_json);
    latest.publish(published);
    let served = latest.get().expect("published");
    assert_eq!(served.findings, findings);
    assert_eq!(
        served.gpus_json,
        to_json(&GpusDocument::new(&snapshot, &findings, 0.7))
    );
    assert_eq!(
        served.recommendations_json,
        to_json(&Recommendations::new(&findings, None))
    );
}

#[test]
fn the_health_document_has_the_contract_keys_and_reads_back_whole() {
    let (snapshot, findings, _) = an_hour();
    let written = HealthDocument::new(&snapshot, &findings);
    let json: serde_json::Value = serde_json::from_slice(&to_json(&written)).expect("JSON");
    for key in ["state", "action", "gpus", "node"] {
        assert!(json.get(key).is_some(), "{key} missing: {json}");
    }
    let gpu = &json["gpus"][0];
    for key in ["index", "uuid", "state", "components"] {
        assert!(gpu.get(key).is_some(), "gpus[].{key} missing: {gpu}");
    }
    let component = &gpu["components"][0];
    for key in ["component", "state", "reason", "action", "since"] {
        assert!(component.get(key).is_some(), "{key} missing: {component}");
    }
    // The GPU that fell off the bus within the hour takes the node out, and says how.
    assert_eq!(json["state"], "unhealthy");
    assert_eq!(json["action"], "drain_and_reboot");
    let lost = (json["gpus"].as_array().unwrap().iter())
        .find(|g| g["index"] == 2)
        .expect("GPU 2");
    assert_eq!(lost["state"], "unhealthy");
    let driver = (lost["components"].as_array().unwrap().iter())
        .find(|c| c["component"] == "driver")
        .expect("its driver component");
    assert_eq!(driver["action"], "drain_and_reboot");
    assert!(
        driver["reason"].as_str().unwrap().contains("XID 79"),
        "{driver}"
    );
    let read: HealthDocument<'static> = serde_json::from_value(json.clone()).expect("reads back");
    assert_eq!(read, written);
}
