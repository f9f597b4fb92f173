//! gpu-sentinel's ground: what a GPU reading is (`model`), the XID catalog (`xid`), the
//! typed configuration (`config`), and the small utilities every other crate shares
//! (poison-tolerant locks, the host's name, `Retry-After`, HTML escaping, secret
//! redaction, atomic state files, comparing text on the hot paths). It knows nothing of
//! NVML, the engine or HTTP.
//! docs/architecture.md draws the crates and the layers inside them.

pub mod config;
pub mod host;
pub mod html;
pub mod model;
pub mod redact;
pub mod retry_after;
pub mod state_file;
pub mod sync;
pub mod text;
pub mod xid;
