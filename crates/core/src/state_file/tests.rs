use std::sync::{Arc, Mutex};

use super::*;

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("gs-state-file-{}-{name}", std::process::id()));
    let _ = fs::remove_dir_all(&d);
    fs::create_dir_all(&d).unwrap();
    d
}

/// The files in `dir` whose names start with `prefix`, sorted.
fn named(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(prefix))
        })
        .collect();
    out.sort();
    out
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
    let bytes = buffer.lock().unwrap().clone();
    String::from_utf8_lossy(&bytes).into_owned()
}

struct Sink(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Sink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn round_trip_and_missing() {
    let d = dir("rt");
    let path = d.join("x.json");
    assert_eq!(load::<Vec<u32>>(&path), None);
    save(&path, &vec![1u32, 2, 3]).unwrap();
    assert_eq!(load::<Vec<u32>>(&path), Some(vec![1, 2, 3]));
    assert!(named(&d, "x.json.corrupt").is_empty());
}

#[test]
fn damaged_files_are_kept_byte_for_byte_with_one_warning() {
    let d = dir("damaged");
    let path = d.join("x.json");
    for damage in [
        &b"{not json"[..],
        b"[1, 2, \"\xff\xfe\"]",
        b"\xc3\x28\x00\x01",
        b"{\"wrong\": \"shape\"}",
        b"",
    ] {
        fs::write(&path, damage).unwrap();
        let log = logged(|| assert_eq!(load::<Vec<u32>>(&path), None));
        assert!(!path.exists(), "{damage:?} left in place");
        assert_eq!(log.matches("WARN").count(), 1, "{log}");
        assert!(log.contains(&path.display().to_string()), "{log}");
        assert!(log.contains("corrupt-"), "{log}");
    }
    // Each damaged file is kept: the later ones did not overwrite the first.
    let kept = named(&d, "x.json.corrupt-");
    assert_eq!(kept.len(), 5, "{kept:?}");
    let mut contents: Vec<Vec<u8>> = kept.iter().map(|p| fs::read(p).unwrap()).collect();
    contents.sort();
    assert!(contents.contains(&b"\xc3\x28\x00\x01".to_vec()));
    assert!(contents.contains(&Vec::new()));
}

#[test]
fn a_file_that_cannot_be_read_is_moved_aside_too() {
    let d = dir("dir");
    // A directory where the file should be: reading fails, and it is still evidence.
    let path = d.join("x.json");
    fs::create_dir_all(path.join("inner")).unwrap();
    assert_eq!(load::<Vec<u32>>(&path), None);
    assert!(!path.exists());
    assert_eq!(named(&d, "x.json.corrupt-").len(), 1);
}

#[test]
fn failed_saves_are_logged_once_per_error_and_counted() {
    let d = dir("save-log");
    // A regular file where the state directory should be: every save fails alike.
    let blocker = d.join("state");
    fs::write(&blocker, "not a directory").unwrap();
    let path = blocker.join("x.json");
    let mut log = SaveLog::new("test state", path.clone());
    let text = logged(|| {
        for _ in 0..5 {
            log.record(&save(&path, &1u32));
        }
    });
    assert_eq!(log.failures(), 5);
    assert_eq!(text.matches("cannot save test state").count(), 1, "{text}");

    // A different error is told once more.
    let text = logged(|| {
        for _ in 0..3 {
            log.record(&Err(std::io::Error::other("disk full")));
        }
    });
    assert_eq!(log.failures(), 8);
    assert_eq!(text.matches("cannot save test state").count(), 1, "{text}");
    assert!(text.contains("disk full"), "{text}");

    // Recovery is told once, and a later failure is a new first failure.
    fs::remove_file(&blocker).unwrap();
    let text = logged(|| {
        log.record(&save(&path, &1u32));
        log.record(&save(&path, &1u32));
    });
    assert_eq!(text.matches("saved to").count(), 1, "{text}");
    assert!(text.contains("after 8 failed attempt(s)"), "{text}");
    let text = logged(|| log.record(&Err(std::io::Error::other("disk full"))));
    assert_eq!(text.matches("cannot save test state").count(), 1, "{text}");
    assert_eq!(
        log.failure_counter()
            .load(std::sync::atomic::Ordering::Relaxed),
        9
    );
}
