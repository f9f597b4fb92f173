//! `docs/metrics.md` is generated from the metric catalogue; this test fails when the file
//! is stale. Regenerate it with `UPDATE_DOCS=1 cargo test --test it metrics_doc::`.

use std::path::Path;

#[test]
fn metrics_reference_matches_the_catalogue() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/metrics.md");
    let generated = gpu_sentinel::export::reference_markdown();
    if std::env::var("UPDATE_DOCS").as_deref() == Ok("1") {
        std::fs::create_dir_all(path.parent().unwrap_or(Path::new(".")))
            .and_then(|()| std::fs::write(&path, &generated))
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
        return;
    }
    let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        on_disk == generated,
        "{} is stale: regenerate it with UPDATE_DOCS=1 cargo test --test it metrics_doc::",
        path.display()
    );
}
