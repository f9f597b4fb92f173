//! The Slurm account of every job seen on the host, so `[[teams]] slurm_accounts` can claim
//! it.
//!
//! Neither slurmstepd's cgroup nor the job-mapping files name the account; the controller
//! does. Each job id seen in a collection (on a process, from its cgroup, or on an
//! allocation, from the mapping files) is looked up once with `scontrol show job --oneliner
//! <id>` (`Account=` in its answer) and remembered while the job is on the host. The lookup
//! needs no privilege beyond what any user on a Slurm node has, unlike reading another
//! user's `/proc/PID/environ` for `SLURM_JOB_ACCOUNT`, which would need `CAP_SYS_PTRACE`
//! and hand the agent every secret in that environment.
//!
//! The controller can be slow or down: each lookup has a time limit, at most
//! [`LOOKUPS_PER_COLLECTION`] start per collection and none once one call's time limit is
//! spent in it, and after a failure no lookup runs for
//! [`RETRY_AFTER`] (`gpu_sentinel_collector_success{collector="slurm_accounts"}` is 0
//! meanwhile, which the collector loop says once). A job the controller answered for without an
//! account is remembered as such.

use std::collections::{BTreeSet, HashMap};
use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::collector::{Collected, Collector};
use crate::model::Snapshot;

/// The collector family's name in `gpu_sentinel_collector_success`.
pub(crate) const FAMILY: &str = "slurm_accounts";

/// New jobs looked up in one collection; the rest wait for the next.
pub(crate) const LOOKUPS_PER_COLLECTION: usize = 4;
/// Time one `scontrol` call may take.
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(2);
/// Pause after a failed lookup before the controller is asked again.
pub(crate) const RETRY_AFTER: Duration = Duration::from_secs(300);
/// Largest answer read from `scontrol` (a one-line job record is a few KiB).
const MAX_ANSWER_BYTES: u64 = 256 * 1024;

/// Looks up and remembers the accounts of the host's jobs.
pub(crate) struct SlurmAccounts {
    program: PathBuf,
    /// Job id → its account (`None`: the controller knows the job but names no account).
    known: HashMap<String, Option<String>>,
    /// When lookups may run again after a failure, and the failure (said once).
    paused: Option<(Instant, String)>,
}

impl SlurmAccounts {
    /// Asks `program` (`scontrol`, or a path to it).
    pub fn new(program: PathBuf) -> SlurmAccounts {
        SlurmAccounts {
            program,
            known: HashMap::new(),
            paused: None,
        }
    }
}

impl Collector for SlurmAccounts {
    fn name(&self) -> &'static str {
        FAMILY
    }

    /// Sets `slurm_account` on every process and allocation of a job whose account is
    /// known, looking up jobs not seen before. Absent when the snapshot has no job: the
    /// host is no Slurm node (or runs no job), and there is nothing to report.
    fn collect(&mut self, snapshot: &mut Snapshot) -> anyhow::Result<Collected> {
        let jobs: BTreeSet<String> = snapshot
            .processes
            .iter()
            .map(|p| &p.hpc_job)
            .chain(snapshot.allocations.iter().map(|a| &a.hpc_job))
            .flatten()
            .cloned()
            .collect();
        if jobs.is_empty() {
            self.known.clear();
            return Ok(Collected::Absent);
        }
        let began = Instant::now();
        // Forget jobs that left: the map holds only what runs here now.
        self.known.retain(|job, _| jobs.contains(job));
        let unknown: Vec<&String> = jobs
            .iter()
            .filter(|job| !self.known.contains_key(*job))
            .take(LOOKUPS_PER_COLLECTION)
            .collect();
        for job in unknown {
            // The lookups run on the collection thread: together they get one call's time,
            // and what is left waits for the next collection.
            if began.elapsed() >= LOOKUP_TIMEOUT
                || self
                    .paused
                    .as_ref()
                    .is_some_and(|(until, _)| Instant::now() < *until)
            {
                break;
            }
            match self.look_up(job) {
                Ok(account) => {
                    self.paused = None;
                    self.known.insert(job.clone(), account);
                }
                Err(problem) => {
                    self.paused = Some((Instant::now() + RETRY_AFTER, problem));
                    break;
                }
            }
        }
        if self.paused.is_some() && jobs.iter().all(|job| self.known.contains_key(job)) {
            // The job that failed has left and every other is known: nothing is failing
            // now.
            self.paused = None;
        }
        let account = |job: &Option<String>| {
            job.as_ref()
                .and_then(|job| self.known.get(job))
                .cloned()
                .flatten()
        };
        for p in &mut snapshot.processes {
            p.slurm_account = account(&p.hpc_job);
        }
        for a in &mut snapshot.allocations {
            a.slurm_account = account(&a.hpc_job);
        }
        match &self.paused {
            Some((_, problem)) => anyhow::bail!(
                "Slurm accounts: {problem}; jobs are not matched to [[teams]] slurm_accounts \
                 until it answers (asked again every {} s)",
                RETRY_AFTER.as_secs()
            ),
            None => Ok(Collected::Done),
        }
    }
}

impl SlurmAccounts {
    /// The account `scontrol` names for `job`; an error says what went wrong (the job id is
    /// passed as one argument, never through a shell).
    fn look_up(&self, job: &str) -> Result<Option<String>, String> {
        let program = self.program.display();
        let mut child = Command::new(&self.program)
            .args(["show", "job", "--oneliner", job])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot run {program}: {e}"))?;
        let deadline = Instant::now() + LOOKUP_TIMEOUT;
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(10));
                }
                Ok(None) => {
                    // Killing a process that just exited fails harmlessly.
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(format!(
                        "{program} show job {job} did not answer within {} s",
                        LOOKUP_TIMEOUT.as_secs()
                    ));
                }
                Err(e) => return Err(format!("waiting for {program}: {e}")),
            }
        };
        let read = |pipe: Option<&mut dyn Read>| {
            let mut text = String::new();
            if let Some(pipe) = pipe {
                // An answer that is not text reads as no account.
                let _ = pipe.take(MAX_ANSWER_BYTES).read_to_string(&mut text);
            }
            text
        };
        let answer = read(child.stdout.as_mut().map(|p| p as &mut dyn Read));
        let complaint = read(child.stderr.as_mut().map(|p| p as &mut dyn Read));
        if status.success() {
            return Ok(account(&answer));
        }
        // A job that ended between the collection and the lookup is not a failure of the
        // controller: it is gone, and its account does not matter any more.
        if complaint.contains("Invalid job id") {
            return Ok(None);
        }
        let first = complaint.lines().next().unwrap_or("").trim();
        Err(format!(
            "{program} show job {job} exited with {status}{}{first}",
            if first.is_empty() { "" } else { ": " }
        ))
    }
}

/// The `Account=` of a `scontrol show job --oneliner` answer (`None` when it has none, or
/// names `(null)`).
pub fn account(answer: &str) -> Option<String> {
    answer
        .split_whitespace()
        .find_map(|field| field.strip_prefix("Account="))
        .filter(|a| !a.is_empty() && *a != "(null)")
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_account_of_a_one_line_job_record() {
        let answer = "JobId=4242 JobName=train UserId=alice(1000) GroupId=alice(1000) \
                      MCS_label=N/A Priority=1 Nice=0 Account=vision QOS=normal \
                      JobState=RUNNING Reason=None";
        assert_eq!(account(answer).as_deref(), Some("vision"));
        assert_eq!(account("JobId=1 Account=(null) QOS=normal"), None);
        assert_eq!(account("JobId=1 Account= QOS=normal"), None);
        assert_eq!(
            account("slurm_load_jobs error: Invalid job id specified"),
            None
        );
    }

    proptest! {
        /// Whatever scontrol prints, reading it never panics, and an account read back
        /// has no whitespace in it.
        #[test]
        fn any_answer_reads_without_panicking(answer in "\\PC{0,200}") {
            if let Some(a) = account(&answer) {
                prop_assert!(!a.chars().any(char::is_whitespace));
                prop_assert!(!a.is_empty());
            }
        }
    }
}
