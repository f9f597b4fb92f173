//! Records the source revision for `gpu_sentinel_build_info{revision}`.
//! `GPU_SENTINEL_REVISION` wins (a Docker build has no .git); else `git rev-parse`; else "unknown".

use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=GPU_SENTINEL_REVISION");
    println!("cargo:rerun-if-changed=.git/HEAD");
    println!("cargo:rerun-if-changed=.git/refs/heads");
    let revision = std::env::var("GPU_SENTINEL_REVISION")
        .ok()
        .filter(|r| !r.is_empty())
        .or_else(|| {
            Command::new("git")
                .args(["rev-parse", "--short=12", "HEAD"])
                .output()
                .ok()
                .filter(|o| o.status.success())
                .and_then(|o| String::from_utf8(o.stdout).ok())
                .map(|s| s.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".to_string());
    println!("cargo:rustc-env=GPU_SENTINEL_REVISION={revision}");
}
