//! Unit tests of `alert::notify::kind`: each kind's facts as its integration documents them.

use super::*;

#[test]
fn the_facts_are_what_the_integrations_document() {
    let secret = |k| facts(k).secret;
    assert_eq!(secret(ReceiverKind::Feishu), Some(SecretUse::Signing));
    assert_eq!(secret(ReceiverKind::DingTalk), Some(SecretUse::Signing));
    assert_eq!(secret(ReceiverKind::Webhook), Some(SecretUse::Bearer));
    assert_eq!(secret(ReceiverKind::Alertmanager), Some(SecretUse::Bearer));
    for kind in [ReceiverKind::Slack, ReceiverKind::WeCom, ReceiverKind::Log] {
        assert_eq!(secret(kind), None, "{kind}");
    }
    let limited: Vec<ReceiverKind> = ReceiverKind::ALL
        .into_iter()
        .filter(|k| facts(*k).default_max_per_minute > 0)
        .collect();
    assert_eq!(limited, [ReceiverKind::DingTalk, ReceiverKind::WeCom]);
    let whole_list: Vec<ReceiverKind> = ReceiverKind::ALL
        .into_iter()
        .filter(|k| facts(*k).consumes == Consumes::AlertList)
        .collect();
    assert_eq!(whole_list, [ReceiverKind::Alertmanager]);
}
