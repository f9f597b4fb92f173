//! Notifiers: one small file per integration behind one trait.
//!
//! Each integration turns a [`Notification`] into its service's payload and sends it; its
//! error says whether trying again can help. Retrying, backoff, rate limits and counting
//! live outside the integrations (`alert::deliver`), and no integration imports another.

use std::time::Duration;

use super::Notification;

/// Delivers notifications to one receiver.
pub trait Notifier: Send + Sync {
    /// Sends one notification. Blocking, bounded by the receiver's timeout.
    fn send(&self, notification: &Notification) -> Result<(), NotifyError>;
}

/// Why a delivery failed, and whether to try again.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum NotifyError {
    /// Worth retrying (5xx, 429, a transport error, a chat service's rate-limit code);
    /// `after` is the wait the service asked for (`Retry-After`), if any.
    #[error("{reason} (will retry)")]
    Retry {
        reason: String,
        after: Option<Duration>,
    },
    /// Retrying cannot help (other 4xx, a rejected payload, a bad token); dropped and counted.
    #[error("{reason} (dropped)")]
    Drop { reason: String },
}
