//! XIDs from the kernel log: the complete record NVML's event API is not.
//!
//! NVML's event wait returns only the last XID when several arrive between waits, so the
//! agent also reads what the driver writes to the kernel log (`/dev/kmsg`, or a log file a
//! shipper appends to), parses the `NVRM: Xid …` and "GPU has fallen off the bus" lines
//! ([`parse_line`]), and merges both streams so each error counts once ([`XidDeduper`]).
//! GPUs are matched across the two through one normalised PCI bus id
//! ([`crate::model::normalize_pci_bus_id`], [`resolve_gpu`]).
//!
//! - [`parse`]: line formats;
//! - [`follow`]: the thread that follows the log ([`KmsgFollower`]);
//! - [`dedup`]: merging with NVML events;
//! - [`collector`]: both merged on every snapshot ([`KernelLogXids`]).

pub mod collector;
pub mod dedup;
pub mod follow;
pub mod parse;

pub(crate) use collector::KernelLogXids;
pub(crate) use dedup::{XidDeduper, resolve_gpu};
pub use follow::{KmsgError, KmsgEvent, KmsgFollower};
