use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::*;

/// A collector that answers from a script, one outcome per collection, sleeping first.
struct Scripted {
    name: &'static str,
    outcomes: VecDeque<Result<Collected, &'static str>>,
    sleep: Duration,
}

impl Collector for Scripted {
    fn name(&self) -> &'static str {
        self.name
    }

    fn collect(&mut self, snapshot: &mut Snapshot) -> anyhow::Result<Collected> {
        std::thread::sleep(self.sleep);
        snapshot.scheduled_by.push(self.name.to_string());
        match self.outcomes.pop_front() {
            Some(Ok(collected)) => Ok(collected),
            Some(Err(reason)) => Err(anyhow::anyhow!(reason).context("reading the thing")),
            None => Ok(Collected::Done),
        }
    }
}

fn scripted(
    name: &'static str,
    outcomes: &[Result<Collected, &'static str>],
    sleep: Duration,
) -> Box<dyn Collector> {
    Box::new(Scripted {
        name,
        outcomes: outcomes.iter().copied().collect(),
        sleep,
    })
}

/// Runs `f` with its log lines (info and above) captured as plain text.
fn logged(f: impl FnOnce()) -> String {
    let buffer = Arc::new(Mutex::new(Vec::<u8>::new()));
    let sink = buffer.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_ansi(false)
        .with_max_level(tracing::Level::INFO)
        .with_writer(move || Sink(sink.clone()))
        .finish();
    tracing::subscriber::with_default(subscriber, f);
    let bytes = buffer.lock().map(|b| b.clone()).unwrap_or_default();
    String::from_utf8_lossy(&bytes).into_owned()
}

struct Sink(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Sink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if let Ok(mut b) = self.0.lock() {
            b.extend_from_slice(buf);
        }
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// One collection through `collectors`: the snapshot and the health it recorded.
fn tick(collectors: &mut Collectors) -> (Snapshot, Vec<FamilyHealth>) {
    let mut snapshot = Snapshot::default();
    let mut families = Vec::new();
    collectors.run(&mut snapshot, &mut families);
    (snapshot, families)
}

#[test]
fn each_collector_runs_in_order_and_is_timed() {
    let mut collectors = Collectors::default();
    collectors.push(scripted("first", &[], Duration::from_millis(30)));
    collectors.push(scripted("second", &[], Duration::ZERO));
    assert_eq!(collectors.names(), ["first", "second"]);
    let (snapshot, families) = tick(&mut collectors);
    assert_eq!(snapshot.scheduled_by, ["first", "second"], "in order");
    let names: Vec<&str> = families.iter().map(|f| f.name).collect();
    assert_eq!(names, ["first", "second"]);
    assert!(families.iter().all(|f| f.success));
    assert!(families[0].seconds >= 0.030, "{families:?}");
    assert!(families[1].seconds < 0.030, "{families:?}");
}

#[test]
fn a_failure_is_recorded_and_an_absent_collector_is_left_out() {
    let mut collectors = Collectors::default();
    collectors.push(scripted("broken", &[Err("no such file")], Duration::ZERO));
    collectors.push(scripted("absent", &[Ok(Collected::Absent)], Duration::ZERO));
    collectors.push(scripted("fine", &[], Duration::ZERO));
    let (snapshot, families) = tick(&mut collectors);
    // A failed collector does not stop the ones after it.
    assert_eq!(snapshot.scheduled_by, ["broken", "absent", "fine"]);
    let health: Vec<(&str, bool)> = families.iter().map(|f| (f.name, f.success)).collect();
    assert_eq!(health, [("broken", false), ("fine", true)]);
}

#[test]
fn the_first_failure_is_said_once_and_the_recovery_once() {
    let mut collectors = Collectors::default();
    collectors.push(scripted(
        "kubelet",
        &[
            Ok(Collected::Done),
            Err("connection refused"),
            Err("connection refused"),
            Err("no answer within 2s"),
            Ok(Collected::Done),
            Ok(Collected::Done),
            Err("connection refused"),
        ],
        Duration::ZERO,
    ));
    let mut success = Vec::new();
    let log = logged(|| {
        for _ in 0..7 {
            success.push(tick(&mut collectors).1[0].success);
        }
    });
    assert_eq!(success, [true, false, false, false, true, true, false]);
    let warnings: Vec<&str> = log.lines().filter(|l| l.contains("WARN")).collect();
    assert_eq!(warnings.len(), 2, "one per outage:\n{log}");
    assert!(
        warnings[0].contains("reading the thing: connection refused"),
        "the reason with its context:\n{log}"
    );
    assert!(
        warnings[0].contains("gpu_sentinel_collector_success{collector=\"kubelet\"} is 0"),
        "{log}"
    );
    // A new reason in the same outage is no new warning.
    assert!(
        warnings.iter().all(|l| !l.contains("no answer within")),
        "{log}"
    );
    let recoveries: Vec<&str> = log.lines().filter(|l| l.contains("works again")).collect();
    assert_eq!(recoveries.len(), 1, "{log}");
    assert!(recoveries[0].contains("INFO"), "{log}");
    assert!(
        recoveries[0].contains("after 3 failed collections"),
        "how long it failed:\n{log}"
    );
}
