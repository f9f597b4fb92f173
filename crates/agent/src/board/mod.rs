//! The live board at `/`: one server-rendered HTML page per collection.
//!
//! The page is rendered on the collection thread, once per publication, from the same
//! `/api/v1` documents the API serves ([`crate::api::Documents`]) plus the utilization
//! history of the engine's day window ([`heat`]); serving `/` then copies bytes, as
//! `/metrics` does. Everything is inline (CSS, SVG, a few lines of script that fetch `/`
//! every five seconds and swap `<main>`), and the page's
//! [`CONTENT_SECURITY_POLICY`] forbids loading anything else, so no request of the page
//! leaves the host. Each part is a maud template (`maud::html!`, checked when the crate
//! compiles) returning `maud::Markup`; every value spliced into one is escaped by
//! construction, and text from outside (process names, users, pods, alert annotations) is
//! spliced as [`crate::html::Text`], which escapes `'` as well. Only the page's own style
//! sheet and script, constants of `page.rs`, are spliced unescaped.
//!
//! The render reads no clock: every time it shows is relative to the snapshot's, so the
//! same collection renders the same bytes (`tests/it/board.rs` keeps a golden page).
//!
//! - [`heat`]: the shade scale and the heat strips (shared by tiles and any other HTML
//!   report that draws utilization);
//! - [`tile`]: one GPU's tile, with its health verdict ([`health`]), and [`mig`] the
//!   instances of a GPU in MIG mode on it;
//! - [`tables`]: the failure-risk ranking and the alerts;
//! - [`today`]: today's cost and waste, and the baseline the agent keeps for it;
//! - [`advice`]: scaling and placement advice;
//! - [`page`]: the document around them, its style sheet and script.

mod advice;
mod health;
pub mod heat;
mod mig;
mod page;
mod tables;
mod tile;
pub mod today;
mod units;

use bytes::Bytes;

use crate::api::Documents;
use crate::config::TeamConfig;

pub use heat::{HeatStrip, HeatStrips, strips};
pub(crate) use page::CONTENT_SECURITY_POLICY;
pub use today::{Today, TodayView};

/// What the board shows besides the documents: fixed for the agent's life.
#[derive(Debug, Clone, Default)]
pub struct BoardOptions {
    /// Where the data comes from, e.g. "simulator (8 GPUs, 600x speed)".
    pub source: String,
    pub version: String,
    /// `[cost] currency`.
    pub currency: String,
    /// `[[teams]]`: a holder's team is shown where one claims it.
    pub teams: Vec<TeamConfig>,
}

/// One collection as the board shows it.
#[derive(Debug, Clone, Copy)]
pub struct Board<'a> {
    pub documents: &'a Documents<'a>,
    /// Utilization history by GPU UUID.
    pub strips: &'a HeatStrips,
    /// Cost and idle holder time since the start of the day.
    pub today: &'a TodayView,
    pub options: &'a BoardOptions,
}

/// The page of `board`.
pub fn render(board: &Board<'_>) -> Bytes {
    Bytes::from(page::page(board))
}

/// The page `/` answers before the first collection: it says so and reloads itself.
pub(crate) fn waiting_page(options: &BoardOptions) -> Bytes {
    Bytes::from(page::waiting(options))
}

#[cfg(test)]
mod tests;
