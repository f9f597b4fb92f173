//! `[server]`: limits of the HTTP server (the web configuration file holds its TLS and
//! authentication).

use serde::Deserialize;

/// `[server]`: limits of the HTTP server.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    /// Most connections held open at once. When full, the oldest idle one (a keep-alive
    /// connection between requests, or one that sent nothing yet) is closed for the new
    /// one; when all are answering, new ones wait. Lowered at start where the open-file
    /// limit leaves fewer descriptors. At least 1.
    pub max_connections: usize,
}

impl Default for ServerConfig {
    fn default() -> Self {
        // A few Prometheus servers, a board or two and probes need a handful; 512 leaves
        // room for a fleet of scrapers while keeping a descriptor flood bounded.
        Self {
            max_connections: 512,
        }
    }
}
