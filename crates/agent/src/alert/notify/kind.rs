//! What each receiver kind takes and how it is fed: the facts that used to be string
//! comparisons spread over the notifier builder, the delivery stage, dispatch and the
//! advice path.
//!
//! [`ReceiverKind`] itself is a configuration value (`config`, parsed once from `kind =
//! "…"`); its facts belong to its integration, so every notifier file declares its own
//! `FACTS` next to the code they describe, and [`facts`] picks them by kind. A new kind is
//! an enum variant, a notifier file with its `FACTS`, and one arm here and in the builder:
//! the compiler points at each.

use super::{alertmanager, dingtalk, feishu, log, slack, webhook, wecom};
use crate::config::ReceiverKind;

/// One kind's facts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KindFacts {
    /// What `secret_env` holds for this kind; None: the kind takes none (its URL is its
    /// credential), and setting one is refused rather than ignored.
    pub secret: Option<SecretUse>,
    /// Messages a minute when the receiver's `max_per_minute` is 0; 0: unlimited.
    pub(crate) default_max_per_minute: u32,
    /// What dispatch sends it.
    pub consumes: Consumes,
}

/// What a receiver's `secret_env` is used for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecretUse {
    /// Signs each request (Feishu, DingTalk).
    Signing,
    /// Sent as `Authorization: Bearer …` (webhook, Alertmanager behind a proxy).
    Bearer,
}

/// What dispatch sends a receiver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Consumes {
    /// Aggregation groups, on Alertmanager's group timers (people read these).
    Groups,
    /// The whole current alert list, re-sent every resend interval (Alertmanager, which
    /// groups, silences and inhibits by itself). Such a machine consumer is not sent the
    /// fleet digest either.
    AlertList,
}

/// The facts of `kind`, as its notifier declares them.
pub fn facts(kind: ReceiverKind) -> &'static KindFacts {
    match kind {
        ReceiverKind::Alertmanager => &alertmanager::FACTS,
        ReceiverKind::Webhook => &webhook::FACTS,
        ReceiverKind::Slack => &slack::FACTS,
        ReceiverKind::Feishu => &feishu::FACTS,
        ReceiverKind::DingTalk => &dingtalk::FACTS,
        ReceiverKind::WeCom => &wecom::FACTS,
        ReceiverKind::Log => &log::FACTS,
    }
}

#[cfg(test)]
mod tests;
