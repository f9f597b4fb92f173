//! Records the source revision for `gpu_sentinel_build_info{revision}`.
//! `GPU_SENTINEL_REVISION` wins (a Docker build has no .git); else `git rev-parse`; else "unknown".

use std::path::Path;
use std::process::Command;

/// What `git rev-parse ARGS` prints, trimmed; None without git or outside a repository.
fn git(args: &[&str]) -> Option<String> {
    Command::new("git")
        .args(args)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string())
}

fn main() {
    println!("cargo:rerun-if-env-changed=GPU_SENTINEL_REVISION");
    // Watch the files a commit or checkout changes, where they really are: in a worktree
    // `.git` is a file and HEAD lives in the worktree's own git directory, the branches in
    // the common one. Watching a path that does not exist would rebuild the crate on every
    // cargo command.
    if let (Some(dir), Some(common)) = (
        git(&["rev-parse", "--git-dir"]),
        git(&["rev-parse", "--git-common-dir"]),
    ) {
        let watched = [
            Path::new(&dir).join("HEAD"),
            Path::new(&common).join("refs/heads"),
            Path::new(&common).join("packed-refs"),
        ];
        for path in watched.iter().filter(|p| p.exists()) {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
    let revision = std::env::var("GPU_SENTINEL_REVISION")
        .ok()
        .filter(|r| !r.is_empty())
        .or_else(|| git(&["rev-parse", "--short=12", "HEAD"]))
        .unwrap_or_else(|| "unknown".to_string());
    println!("cargo:rustc-env=GPU_SENTINEL_REVISION={revision}");
}
