//! A real orphaned process for the ghost tests: a shell starts `sleep` in the background,
//! prints its PID and exits, so `sleep` is re-parented while it lives on.

use std::process::{Command, Stdio};

/// The orphan, killed when the test ends, however it ends.
pub struct Orphan(pub u32);

impl Orphan {
    pub fn start() -> Orphan {
        let out = Command::new("sh")
            .args(["-c", "sleep 120 >/dev/null 2>&1 & echo $!"])
            .stdout(Stdio::piped())
            .output()
            .expect("sh runs");
        let pid: u32 = String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .expect("the shell printed the PID");
        Orphan(pid)
    }
}

impl Drop for Orphan {
    fn drop(&mut self) {
        let _ = Command::new("kill").arg(self.0.to_string()).status();
    }
}
