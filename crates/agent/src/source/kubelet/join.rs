//! Processes to pods: which pod a GPU process belongs to.
//!
//! A process's cgroup gives its pod's UID (`procinfo::cgroup`); the PodResources API gives
//! each pod's name, namespace and containers with the GPUs they hold — but no UID. The two
//! meet on the GPU: a UID whose processes run on GPUs held by exactly one pod is that
//! pod. Where several pods share a GPU (time-slicing), the candidates are narrowed by every
//! GPU the UID's processes use, and by elimination: a pod already bound to another UID is
//! not a candidate. A binding is kept across collections while its pod is listed and
//! still holds a GPU the UID runs on (a UID names one pod for the pod's whole life), so a
//! process that joins a shared GPU later is named at once.
//!
//! The container *name* is set when exactly one of the pod's containers holds the GPU;
//! otherwise the process keeps the container id its cgroup gave.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::model::{Allocation, ProcessSample};

/// A pod: (namespace, name).
type PodKey = (String, String);

/// Pod UIDs bound to pods, kept across collections.
#[derive(Debug, Default)]
pub(crate) struct PodJoin {
    bound: HashMap<String, PodKey>,
}

impl PodJoin {
    /// Names the pod, namespace and container of every process whose pod UID can be bound
    /// to one of `allocations`' pods. Processes outside pods are left as they are.
    pub fn apply(&mut self, processes: &mut [ProcessSample], allocations: &[Allocation]) {
        let mut holders: HashMap<&str, BTreeSet<PodKey>> = HashMap::new();
        // (pod, GPU) → the containers of the pod holding that GPU.
        let mut containers: HashMap<(PodKey, &str), BTreeSet<&str>> = HashMap::new();
        for a in allocations {
            let (Some(ns), Some(pod)) = (&a.namespace, &a.pod) else {
                continue;
            };
            let key = (ns.clone(), pod.clone());
            holders.entry(&a.uuid).or_default().insert(key.clone());
            let names = containers.entry((key, a.uuid.as_str())).or_default();
            if let Some(c) = &a.container {
                names.insert(c);
            }
        }
        let mut uid_gpus: BTreeMap<String, BTreeSet<&str>> = BTreeMap::new();
        for p in processes.iter() {
            if let Some(uid) = &p.pod {
                uid_gpus.entry(uid.clone()).or_default().insert(&p.uuid);
            }
        }
        // A binding holds while its pod holds one of the GPUs the UID runs on now.
        self.bound.retain(|uid, key| {
            uid_gpus.get(uid).is_none_or(|gpus| {
                gpus.iter()
                    .any(|g| holders.get(g).is_some_and(|h| h.contains(key)))
            })
        });
        loop {
            let taken: BTreeSet<&PodKey> = self.bound.values().collect();
            let mut found = Vec::new();
            for (uid, gpus) in &uid_gpus {
                if self.bound.contains_key(uid) {
                    continue;
                }
                let mut candidates: Option<BTreeSet<&PodKey>> = None;
                for g in gpus {
                    let here: BTreeSet<&PodKey> = holders
                        .get(g)
                        .map(|h| h.iter().filter(|k| !taken.contains(k)).collect())
                        .unwrap_or_default();
                    candidates = Some(match candidates {
                        None => here,
                        Some(c) => c.intersection(&here).copied().collect(),
                    });
                }
                if let Some(c) = candidates
                    && c.len() == 1
                    && let Some(key) = c.first()
                {
                    found.push((uid.clone(), (*key).clone()));
                }
            }
            if found.is_empty() {
                break;
            }
            for (uid, key) in found {
                // Two UIDs narrowed to one pod in the same round: neither is bound.
                if !self.bound.values().any(|k| *k == key) {
                    self.bound.insert(uid, key);
                }
            }
        }
        // UIDs not seen now are dropped: the map stays as small as the process list.
        self.bound.retain(|uid, _| uid_gpus.contains_key(uid));

        for p in processes.iter_mut() {
            let Some(key) = p.pod.as_ref().and_then(|uid| self.bound.get(uid)) else {
                continue;
            };
            let names = containers.get(&(key.clone(), p.uuid.as_str()));
            if let Some(names) = names
                && names.len() == 1
                && let Some(name) = names.first()
            {
                p.container = Some((*name).to_string());
            }
            p.namespace = Some(key.0.clone());
            p.pod = Some(key.1.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alloc(uuid: &str, ns: &str, pod: &str, container: &str) -> Allocation {
        Allocation {
            uuid: uuid.into(),
            namespace: Some(ns.into()),
            pod: Some(pod.into()),
            container: Some(container.into()),
            ..Allocation::default()
        }
    }

    fn process(uuid: &str, pid: u32, uid: &str) -> ProcessSample {
        ProcessSample {
            uuid: uuid.into(),
            pid,
            pod: Some(uid.into()),
            container: Some("c".repeat(64)),
            ..ProcessSample::default()
        }
    }

    fn named(p: &ProcessSample) -> (Option<&str>, Option<&str>, Option<&str>) {
        (
            p.namespace.as_deref(),
            p.pod.as_deref(),
            p.container.as_deref(),
        )
    }

    #[test]
    fn a_gpu_held_by_one_pod_names_its_processes() {
        let mut join = PodJoin::default();
        let mut procs = vec![process("GPU-A", 1, "uid-1")];
        join.apply(
            &mut procs,
            &[alloc("GPU-A", "ml-team", "train-0", "trainer")],
        );
        assert_eq!(
            named(&procs[0]),
            (Some("ml-team"), Some("train-0"), Some("trainer"))
        );
    }

    #[test]
    fn shared_gpus_are_told_apart_by_other_gpus_and_by_elimination() {
        let allocations = [
            alloc("GPU-A", "ns", "a", "main"),
            alloc("GPU-A", "ns", "b", "main"),
            alloc("GPU-B", "ns", "a", "main"),
        ];
        let mut join = PodJoin::default();
        // uid-2 runs only on the shared GPU; uid-1 also runs on GPU-B, which only pod a holds.
        let mut procs = vec![
            process("GPU-A", 1, "uid-1"),
            process("GPU-B", 2, "uid-1"),
            process("GPU-A", 3, "uid-2"),
        ];
        join.apply(&mut procs, &allocations);
        assert_eq!(procs[0].pod.as_deref(), Some("a"));
        assert_eq!(procs[1].pod.as_deref(), Some("a"));
        assert_eq!(procs[2].pod.as_deref(), Some("b"));

        // Next collection uid-1 left GPU-B; its binding stands, and uid-2 is still b.
        let mut procs = vec![process("GPU-A", 1, "uid-1"), process("GPU-A", 3, "uid-2")];
        join.apply(&mut procs, &allocations);
        assert_eq!(procs[0].pod.as_deref(), Some("a"));
        assert_eq!(procs[1].pod.as_deref(), Some("b"));
    }

    #[test]
    fn ambiguous_or_unallocated_uids_keep_what_cgroups_said() {
        let allocations = [
            alloc("GPU-A", "ns", "a", "main"),
            alloc("GPU-A", "ns", "b", "main"),
        ];
        let mut join = PodJoin::default();
        let mut procs = vec![process("GPU-A", 1, "uid-1"), process("GPU-C", 2, "uid-3")];
        join.apply(&mut procs, &allocations);
        assert_eq!(procs[0].pod.as_deref(), Some("uid-1"));
        assert_eq!(procs[0].namespace, None);
        assert_eq!(procs[1].pod.as_deref(), Some("uid-3"));
        let mut outside = vec![ProcessSample {
            uuid: "GPU-A".into(),
            user: Some("alice".into()),
            ..ProcessSample::default()
        }];
        join.apply(&mut outside, &allocations);
        assert_eq!(named(&outside[0]), (None, None, None));
    }

    #[test]
    fn two_containers_on_one_gpu_keep_the_container_id() {
        let allocations = [
            alloc("GPU-A", "ns", "a", "main"),
            alloc("GPU-A", "ns", "a", "sidecar"),
        ];
        let mut procs = vec![process("GPU-A", 1, "uid-1")];
        PodJoin::default().apply(&mut procs, &allocations);
        assert_eq!(procs[0].pod.as_deref(), Some("a"));
        assert_eq!(procs[0].container.as_deref().map(str::len), Some(64));
    }
}
