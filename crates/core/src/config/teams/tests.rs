use super::*;
use crate::config::Config;

fn teams(text: &str) -> Vec<TeamConfig> {
    Config::parse(text).expect("valid config").teams
}

fn holder<'a>(
    namespace: Option<&'a str>,
    user: Option<&'a str>,
    host: Option<&'a str>,
) -> Holder<'a> {
    Holder {
        namespace,
        user,
        slurm_account: None,
        host,
    }
}

#[test]
fn first_team_that_claims_the_holder_wins() {
    let t = teams(
        "[[teams]]\nname = \"vision\"\nnamespaces = [\"cv-*\"]\nusers = [\"alice\"]\n\
         [[teams]]\nname = \"research\"\nnamespaces = [\"*\"]\n",
    );
    assert_eq!(team_of(&t, &holder(Some("cv-train"), None, None)), "vision");
    assert_eq!(team_of(&t, &holder(None, Some("alice"), None)), "vision");
    assert_eq!(
        team_of(&t, &holder(Some("nlp"), Some("bob"), None)),
        "research"
    );
    // No namespace known and no user pattern of research: nobody claims it.
    assert_eq!(team_of(&t, &holder(None, Some("bob"), None)), UNASSIGNED);
}

#[test]
fn hosts_and_slurm_accounts_claim_too() {
    let t = teams(
        "[[teams]]\nname = \"hpc\"\nslurm_accounts = [\"phys?\"]\n\
         [[teams]]\nname = \"inference\"\nhosts = [\"inf-[0-9]*\"]\n",
    );
    let slurm = Holder {
        slurm_account: Some("phys1"),
        ..Holder::default()
    };
    assert_eq!(team_of(&t, &slurm), "hpc");
    assert_eq!(
        team_of(&t, &holder(None, None, Some("inf-07"))),
        "inference"
    );
    assert_eq!(
        team_of(&t, &holder(None, None, Some("train-07"))),
        UNASSIGNED
    );
    assert_eq!(
        team_of(&[], &holder(Some("x"), Some("y"), Some("z"))),
        UNASSIGNED
    );
}

#[test]
fn bad_teams_are_refused_with_key_and_line() {
    let text = "[[alerting.receivers]]\nname = \"ops\"\nkind = \"log\"\n\
                [[teams]]\nname = \"a\"\nnamespaces = [\"[oops\"]\n\
                [[teams]]\nname = \"a\"\nusers = [\"x\"]\nreceiver = \"nobody\"\n\
                [[teams]]\nname = \"unassigned\"\n";
    let problems = Config::parse(text).unwrap_err();
    let got: Vec<(Option<&str>, &str)> = problems
        .iter()
        .map(|p| (p.key.as_deref(), p.message.as_str()))
        .collect();
    let has = |key: &str, words: &str| {
        got.iter()
            .any(|(k, m)| *k == Some(key) && m.contains(words))
    };
    assert!(has("teams[0].namespaces[0]", "bad pattern"), "{got:?}");
    assert!(has("teams[1].name", "defined twice"), "{got:?}");
    assert!(
        has("teams[1].receiver", "no receiver named \"nobody\""),
        "{got:?}"
    );
    assert!(has("teams[2].name", "unassigned"), "{got:?}");
    assert!(has("teams[2]", "claims nothing"), "{got:?}");
    let bad_pattern = problems
        .iter()
        .find(|p| p.key.as_deref() == Some("teams[0].namespaces[0]"))
        .expect("pattern problem");
    assert_eq!(bad_pattern.line, Some(6));
}

#[test]
fn a_team_with_a_known_receiver_loads() {
    let t = teams(
        "[alerting.route]\nreceiver = \"ops\"\n\
         [[alerting.receivers]]\nname = \"ops\"\nkind = \"log\"\n\
         [[teams]]\nname = \"ml\"\nnamespaces = [\"ml\"]\nreceiver = \"ops\"\n",
    );
    assert_eq!(t[0].receiver.as_deref(), Some("ops"));
    assert!(t[0].claims(&holder(Some("ml"), None, None)));
    assert!(!t[0].claims(&holder(Some("ml2"), None, None)));
}
