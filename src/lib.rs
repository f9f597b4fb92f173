//! gpu-sentinel: a per-host NVIDIA GPU agent.
//!
//! Sources ([`source`]) produce one [`model::Snapshot`] per tick; the exposition renders it
//! for Prometheus; the HTTP server serves what was rendered last. See DESIGN.md for the
//! whole picture.

pub mod config;
pub mod export;
pub mod host;
pub mod model;
pub mod procinfo;
pub mod source;
pub mod xid;
