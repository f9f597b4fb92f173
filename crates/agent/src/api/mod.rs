//! The `/api/v1` surface: the documents `/api/v1/gpus`, `/api/v1/alerts`,
//! `/api/v1/recommendations` and `/api/v1/health` answer, declared once, and what the
//! collection loop publishes for the HTTP server to copy.
//!
//! - [`documents`]: the documents as Serialize + Deserialize types. The agent renders
//!   them from borrowed data after each collection; `gpu-sentinel review` (and any other
//!   reader) deserialises the same types, so the writer and the reader cannot drift apart.
//! - [`published`]: [`Published`], everything served about one collection rendered once,
//!   and [`Latest`], the atomic pointer to it that the agent swaps and the server reads;
//!   [`Documents`], the documents of one collection as the board renderer reads them.
//!
//! This module sits above `export` (a publication carries the exposition) and below
//! `board` (whose renderer the agent hands to [`Published::render`]) and `server`; the
//! agent, further up, decides when a publication happens.

pub mod documents;
pub mod published;

pub use documents::{
    AlertsDocument, GpuHealthView, GpuView, GpusDocument, HealthDocument, JobFit, Recommendations,
};
pub use published::{Documents, Latest, Published};

use bytes::Bytes;
use serde::Serialize;

/// Pretty JSON of plain data (serialising it cannot fail; an error body beats a dead
/// collector should that ever change).
pub(crate) fn to_json<T: Serialize>(value: &T) -> Bytes {
    match serde_json::to_vec_pretty(value) {
        Ok(body) => Bytes::from(body),
        Err(e) => Bytes::from(format!("{{\"error\":\"{e}\"}}")),
    }
}

#[cfg(test)]
mod tests;
