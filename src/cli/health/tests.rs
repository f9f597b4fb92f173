//! The line a scheduler reads: the worst component, its GPU and the action, within 80
//! characters whatever the reasons say; the URL the agent is asked at.

use std::borrow::Cow;

use chrono::DateTime;
use proptest::prelude::*;

use super::*;

fn verdict(component: &'static str, state: State, action: Action, reason: &str) -> Verdict {
    Verdict {
        component: Cow::Borrowed(component),
        state,
        reason: reason.into(),
        action,
        since: DateTime::from_timestamp(1_767_225_600, 0).unwrap(),
    }
}

fn gpu(index: u32, components: Vec<Verdict>) -> GpuHealthView<'static> {
    let (state, action) = crate::engine::health::summarise(&components);
    GpuHealthView {
        index,
        uuid: Cow::Owned(format!("GPU-{index}")),
        state,
        action,
        components: Cow::Owned(components),
    }
}

fn doc(gpus: Vec<GpuHealthView<'static>>, node: Vec<Verdict>) -> HealthDocument<'static> {
    let (state, action) = crate::engine::health::summarise(
        gpus.iter().flat_map(|g| g.components.iter()).chain(&node),
    );
    HealthDocument {
        at: None,
        hostname: None,
        state,
        action,
        gpus,
        node: Cow::Owned(node),
    }
}

fn ok(component: &'static str) -> Verdict {
    verdict(component, State::Healthy, Action::None, "fine")
}

#[test]
fn a_healthy_node_says_so_in_a_few_words() {
    let d = doc(
        vec![gpu(0, vec![ok("memory")]), gpu(1, vec![ok("memory")])],
        vec![ok("pci")],
    );
    assert_eq!(line(&d), "healthy: 2 GPUs, every component");
}

#[test]
fn the_worst_component_names_its_gpu_and_action() {
    let d = doc(
        vec![
            gpu(
                1,
                vec![verdict(
                    "memory",
                    State::Degraded,
                    Action::ResetGpu,
                    "a remap is pending",
                )],
            ),
            gpu(
                4,
                vec![
                    ok("memory"),
                    verdict(
                        "xid",
                        State::Unhealthy,
                        Action::DrainAndReboot,
                        "XID 79 0 min ago: GPU has fallen off the bus",
                    ),
                ],
            ),
            gpu(
                3,
                vec![verdict(
                    "thermal",
                    State::Unhealthy,
                    Action::InspectHardware,
                    "slowdown",
                )],
            ),
        ],
        vec![ok("pci")],
    );
    let text = line(&d);
    assert!(
        text.starts_with("unhealthy: GPU 4 xid, drain_and_reboot: XID 79 0 min ago: GPU has"),
        "{text}"
    );
    assert!(
        text.ends_with("...") && text.chars().count() <= MAX_LINE,
        "{text}"
    );
}

#[test]
fn a_node_component_is_named_as_the_node() {
    let d = doc(
        vec![gpu(0, vec![ok("memory")])],
        vec![verdict(
            "pci",
            State::Unhealthy,
            Action::DrainAndReboot,
            "1 GPU missing",
        )],
    );
    assert_eq!(
        line(&d),
        "unhealthy: node pci, drain_and_reboot: 1 GPU missing"
    );
}

#[test]
fn an_application_fault_shows_its_action_on_a_healthy_node() {
    let d = doc(
        vec![gpu(
            2,
            vec![verdict("xid", State::Healthy, Action::RestartJob, "XID 13")],
        )],
        vec![],
    );
    assert_eq!(line(&d), "healthy: GPU 2 xid, restart_job: XID 13");
}

#[test]
fn the_url_is_completed_to_the_document() {
    assert_eq!(health_url("http://h:10400"), "http://h:10400/api/v1/health");
    assert_eq!(health_url("h:10400/"), "http://h:10400/api/v1/health");
    assert_eq!(
        health_url("https://h/api/v1/health"),
        "https://h/api/v1/health"
    );
}

#[test]
fn unknown_is_one_line_too() {
    let text = unknown(HealthFormat::Text, &"x".repeat(500));
    assert_eq!(text.lines().count(), 1);
    assert_eq!(text.trim_end().chars().count(), MAX_LINE);
    let json: serde_json::Value =
        serde_json::from_str(&unknown(HealthFormat::Json, "timeout")).unwrap();
    assert_eq!(json["state"], "unknown");
}

fn any_state() -> impl Strategy<Value = State> {
    prop::sample::select(State::ALL.to_vec())
}

fn any_action() -> impl Strategy<Value = Action> {
    prop::sample::select(vec![
        Action::None,
        Action::RestartJob,
        Action::ResetGpu,
        Action::InspectHardware,
        Action::DrainAndReboot,
    ])
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Any document the agent could send, reasons of any text included, makes one line of
    /// at most 80 characters that names the worst state.
    #[test]
    fn any_verdicts_make_one_short_line(
        gpus in prop::collection::vec(
            prop::collection::vec((any_state(), any_action(), ".{0,300}"), 0..9),
            0..9,
        ),
        node in prop::collection::vec((any_state(), any_action(), ".{0,300}"), 0..4),
    ) {
        let make = |list: Vec<(State, Action, String)>| -> Vec<Verdict> {
            list.into_iter().map(|(s, a, r)| verdict("memory", s, a, &r)).collect()
        };
        let d = doc(
            gpus.into_iter().enumerate().map(|(i, c)| gpu(i as u32, make(c))).collect(),
            make(node),
        );
        let text = line(&d);
        prop_assert!(text.chars().count() <= MAX_LINE, "{text:?}");
        prop_assert!(!text.contains('\n') && !text.contains('\r'));
        prop_assert!(text.starts_with(d.state.as_str()));
    }

    /// An answer damaged anywhere (a cut, arbitrary text spliced in) is a document or a
    /// refusal, never a panic; whatever reads makes a short line.
    #[test]
    fn a_damaged_answer_reads_or_is_refused(at in 0usize..2000, cut in 0usize..40, text in ".{0,40}") {
        let d = doc(
            vec![gpu(0, vec![verdict("memory", State::Degraded, Action::ResetGpu, "pending")])],
            vec![ok("pci")],
        );
        let json = serde_json::to_string(&d).unwrap();
        let mut chars: Vec<char> = json.chars().collect();
        let at = at.min(chars.len());
        let end = (at + cut).min(chars.len());
        chars.splice(at..end, text.chars());
        let body: String = chars.into_iter().collect();
        if let Ok(read) = serde_json::from_str::<HealthDocument<'static>>(&body) {
            prop_assert!(line(&read).chars().count() <= MAX_LINE);
        }
    }
}
