//! What a fleet report covers and how it prices: read by the team figures
//! ([`super::report`]) and the fleet-wide ones alike.

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::config::{CapacityConfig, CostConfig, TeamConfig};

/// What a report covers and how it prices.
#[derive(Debug, Clone)]
pub struct ReportSpec {
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    /// Only this team (all teams when None).
    pub team: Option<String>,
    pub teams: Vec<TeamConfig>,
    pub cost: CostConfig,
    pub capacity: CapacityConfig,
    /// Utilization (0–1) under which a held GPU counts as idle.
    pub idle_threshold: f64,
    /// Framebuffer use (MiB) above which dcgm-exporter's GPUs count as held.
    pub memory_floor_mib: u64,
    /// Resolution at which dcgm-exporter's held GPU-seconds are counted; None: the store's
    /// scrape interval, from the spacing of its samples. The other figures step an hour.
    pub step: Option<Duration>,
    /// Samples one query may load in the store; None: what the store says
    /// (`query.max-samples` in its flags), else Prometheus's default.
    pub max_samples: Option<u64>,
}
