//! Facts about the host the agent runs on.

/// This host's name: `$NODE_NAME` when set, else the kernel's (`/proc/sys/kernel/hostname`),
/// else `$HOSTNAME`, else `localhost`.
///
/// In a Kubernetes pod the kernel's host name is the pod's name; the DaemonSet sets
/// `NODE_NAME` from the downward API (`spec.nodeName`), as dcgm-exporter's does, so the
/// `hostname` label names the node whichever agent a dashboard was built for.
pub fn hostname() -> String {
    hostname_from(
        std::env::var("NODE_NAME").ok(),
        std::fs::read_to_string("/proc/sys/kernel/hostname").ok(),
        std::env::var("HOSTNAME").ok(),
    )
}

/// The first non-blank of the node name, the kernel's name and `$HOSTNAME`.
fn hostname_from(node: Option<String>, kernel: Option<String>, env: Option<String>) -> String {
    [node, kernel, env]
        .into_iter()
        .flatten()
        .map(|s| s.trim().to_string())
        .find(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".to_string())
}

#[cfg(test)]
mod tests {
    use super::hostname_from;

    fn some(s: &str) -> Option<String> {
        Some(s.to_string())
    }

    #[test]
    fn the_node_name_wins_then_the_kernel_then_the_environment() {
        assert_eq!(
            hostname_from(some("gpu-node-7"), some("pod-abc\n"), some("x")),
            "gpu-node-7"
        );
        assert_eq!(
            hostname_from(some("  "), some("pod-abc\n"), None),
            "pod-abc"
        );
        assert_eq!(hostname_from(None, some(""), some("h")), "h");
        assert_eq!(hostname_from(None, None, None), "localhost");
    }
}
