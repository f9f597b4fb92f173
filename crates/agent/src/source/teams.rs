//! The team of every holder in a snapshot: each process and each allocation is matched
//! against `[[teams]]` (first match wins, else `unassigned`; see `config::team_of`) by what
//! it is known by — namespace, user, Slurm account, host — once per collection, so the exposition, the
//! engine's cost per owner and the alerts all read the same answer.

use crate::config::{Holder, TeamConfig, team_of};
use crate::model::Snapshot;

/// Sets `team` on every process and allocation of `snapshot`.
pub fn assign(snapshot: &mut Snapshot, teams: &[TeamConfig]) {
    let host = snapshot.host.hostname.clone();
    let host = (!host.is_empty()).then_some(host.as_str());
    let team = |namespace: &Option<String>, user: &Option<String>, account: &Option<String>| {
        let holder = Holder {
            namespace: namespace.as_deref(),
            user: user.as_deref(),
            slurm_account: account.as_deref(),
            host,
        };
        Some(team_of(teams, &holder).to_string())
    };
    for p in &mut snapshot.processes {
        p.team = team(&p.namespace, &p.user, &p.slurm_account);
    }
    for a in &mut snapshot.allocations {
        a.team = team(&a.namespace, &a.user, &a.slurm_account);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::model::{Allocation, HostInfo, ProcessSample};

    #[test]
    fn processes_and_allocations_get_the_first_team_that_claims_them() {
        let config = Config::parse(
            "[[teams]]\nname = \"ml\"\nnamespaces = [\"ml-*\"]\n\
             [[teams]]\nname = \"research\"\nusers = [\"alice\"]\n\
             [[teams]]\nname = \"phys\"\nslurm_accounts = [\"phys*\"]\n",
        )
        .expect("valid config");
        let mut snapshot = Snapshot {
            host: HostInfo {
                hostname: "node-1".into(),
                ..HostInfo::default()
            },
            processes: vec![
                ProcessSample {
                    user: Some("alice".into()),
                    ..ProcessSample::default()
                },
                ProcessSample {
                    user: Some("carol".into()),
                    hpc_job: Some("4242".into()),
                    slurm_account: Some("physics".into()),
                    ..ProcessSample::default()
                },
                ProcessSample {
                    user: Some("bob".into()),
                    ..ProcessSample::default()
                },
            ],
            allocations: vec![Allocation {
                namespace: Some("ml-train".into()),
                pod: Some("trainer-0".into()),
                ..Allocation::default()
            }],
            ..Snapshot::default()
        };
        assign(&mut snapshot, &config.teams);
        let teams: Vec<Option<&str>> = snapshot
            .processes
            .iter()
            .map(|p| p.team.as_deref())
            .collect();
        assert_eq!(teams, [Some("research"), Some("phys"), Some("unassigned")]);
        assert_eq!(snapshot.allocations[0].team.as_deref(), Some("ml"));
    }
}
