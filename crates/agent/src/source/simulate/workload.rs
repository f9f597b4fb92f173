//! What runs on a simulated GPU: the load it puts on the engines and the processes that hold
//! its memory. Healthy families carry the noise real fleets have (diurnal inference load,
//! checkpoint dips in training, job turnover); the idle and ghost families are the waste
//! gpu-sentinel exists to find.

use rand::Rng;
use rand::rngs::SmallRng;

use crate::model::Liveness;

const GIB: u64 = 1 << 30;
const HOUR: f64 = 3600.0;

/// The kind of work a simulated GPU carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkloadKind {
    /// Long training jobs at high utilization with checkpoint dips, separated by short gaps.
    Training,
    /// A serving process whose load follows the day, with bursts.
    Inference,
    /// Nothing allocated: free capacity, not waste.
    Unused,
    /// A job that computed briefly, then holds 60 GiB while the GPU sits idle.
    AllocatedIdle,
    /// A training job whose process dies and leaves its memory held (a ghost).
    Ghost,
    /// Batch and interactive jobs of ten minutes to three hours with gaps between them;
    /// while one runs, utilization jumps between 20% and full load, and the bursts give
    /// brief temperature peaks within spec. Busy and healthy.
    Bursty,
}

/// Engine load and memory held, the target the GPU's state moves toward.
#[derive(Debug, Clone, Copy, Default)]
pub struct Load {
    pub util: f64,
    pub(crate) mem_copy: f64,
    pub decoder: f64,
    pub(crate) tensor: f64,
}

/// A process as the simulator knows it; owners are made up but stable.
#[derive(Debug, Clone, PartialEq)]
pub struct SimProcess {
    pub pid: u32,
    pub memory_bytes: u64,
    /// Share of the GPU's SM time this process uses.
    pub(crate) sm_share: f64,
    pub command: &'static str,
    pub user: &'static str,
    pub namespace: Option<&'static str>,
    pub pod: Option<String>,
    pub container: Option<String>,
    pub liveness: Liveness,
    /// Simulated time the process started, seconds since the fleet started (may be negative).
    pub started: f64,
    /// The MIG (GPU instance, compute instance) it runs in, on a GPU in MIG mode.
    pub instance: Option<(u32, u32)>,
}

/// A workload with its schedule of jobs.
#[derive(Debug, Clone)]
pub struct Workload {
    pub kind: WorkloadKind,
    /// The job running now, if any.
    job: Option<SimProcess>,
    /// When the current job ends (training) or the gap ends (no job).
    switch_at: f64,
    /// Phase offsets so GPUs do not checkpoint or peak in lockstep.
    phase: f64,
    /// When the allocated-idle job stops computing / the ghost's process dies.
    pub(crate) turn_at: f64,
}

const USERS: [&str; 6] = ["alice", "bob", "chen", "dmitri", "erin", "fatima"];
const TEAMS: [&str; 3] = ["ml-research", "vision", "speech"];

impl Workload {
    pub fn new(kind: WorkloadKind, turn_at: f64, rng: &mut SmallRng) -> Workload {
        let mut w = Workload {
            kind,
            job: None,
            switch_at: 0.0,
            phase: rng.random_range(0.0..HOUR),
            turn_at,
        };
        match kind {
            WorkloadKind::Unused => {}
            WorkloadKind::Inference => {
                let started = -rng.random_range(2.0..30.0) * 24.0 * HOUR;
                w.job = Some(new_job(rng, started, 38 * GIB));
                w.job_mut_set(|p| {
                    p.command = "tritonserver";
                    p.user = "svc-inference";
                    p.namespace = Some("inference");
                    p.pod = p.pod.as_ref().map(|pod| pod.replacen("train", "triton", 1));
                });
                w.switch_at = f64::INFINITY;
            }
            WorkloadKind::AllocatedIdle => {
                let started = -rng.random_range(0.5..2.0) * HOUR;
                w.job = Some(new_job(rng, started, 60 * GIB));
                w.job_mut_set(|p| {
                    p.command = "jupyter-lab";
                    p.namespace = Some("notebooks");
                    p.pod = Some(format!("jupyter-{}", p.user));
                });
                w.switch_at = f64::INFINITY;
            }
            WorkloadKind::Ghost => {
                let started = -rng.random_range(1.0..6.0) * HOUR;
                w.job = Some(new_job(rng, started, 45 * GIB));
                w.switch_at = f64::INFINITY;
            }
            WorkloadKind::Bursty => {
                w.switch_at = rng.random_range(0.0..1.0) * HOUR;
            }
            WorkloadKind::Training => {
                // Start mid-job: a job that began up to two days ago and runs 6–72 h in all.
                let length = rng.random_range(6.0..72.0) * HOUR;
                let started = -rng.random_range(0.0..length.min(48.0 * HOUR));
                let memory = rng.random_range(62..76) * GIB;
                w.job = Some(new_job(rng, started, memory));
                w.switch_at = started + length;
            }
        }
        w
    }

    fn job_mut_set(&mut self, f: impl FnOnce(&mut SimProcess)) {
        if let Some(job) = self.job.as_mut() {
            f(job);
        }
    }

    /// Moves the schedule to time `t` (seconds since start): jobs end, gaps end, new jobs
    /// start, the ghost's process dies.
    pub fn advance(&mut self, t: f64, rng: &mut SmallRng) {
        match self.kind {
            WorkloadKind::Training => {
                while t >= self.switch_at {
                    if self.job.is_some() {
                        self.job = None;
                        self.switch_at += rng.random_range(0.05..2.0) * HOUR;
                    } else {
                        let start = self.switch_at;
                        let memory = rng.random_range(30..76) * GIB;
                        self.job = Some(new_job(rng, start, memory));
                        self.switch_at = start + rng.random_range(6.0..72.0) * HOUR;
                    }
                }
            }
            WorkloadKind::Bursty => {
                while t >= self.switch_at {
                    if self.job.is_some() {
                        self.job = None;
                        self.switch_at += rng.random_range(0.1..2.0) * HOUR;
                    } else {
                        let start = self.switch_at;
                        let memory = rng.random_range(8..70) * GIB;
                        self.job = Some(new_job(rng, start, memory));
                        self.switch_at = start + rng.random_range(0.15..3.0) * HOUR;
                    }
                }
            }
            WorkloadKind::Ghost if t >= self.turn_at => {
                self.job_mut_set(|p| p.liveness = Liveness::Gone);
            }
            _ => {}
        }
    }

    /// Engine load at time `t`.
    pub fn load(&self, t: f64, rng: &mut SmallRng) -> Load {
        let noise = |rng: &mut SmallRng, scale: f64| rng.random_range(-scale..scale);
        match self.kind {
            WorkloadKind::Unused => Load::default(),
            WorkloadKind::Training | WorkloadKind::Bursty if self.job.is_none() => Load::default(),
            WorkloadKind::Bursty => {
                let util = if rng.random_bool(0.35) {
                    rng.random_range(0.97..1.0)
                } else {
                    rng.random_range(0.2..0.6)
                };
                Load {
                    util,
                    mem_copy: util * 0.6,
                    decoder: 0.0,
                    tensor: util * 0.5,
                }
            }
            WorkloadKind::Training => {
                // A checkpoint every 45 minutes stalls compute for about two minutes.
                let in_checkpoint = (t + self.phase).rem_euclid(45.0 * 60.0) < 120.0;
                if in_checkpoint {
                    Load {
                        util: 0.04 + noise(rng, 0.03).abs(),
                        mem_copy: 0.02,
                        decoder: 0.0,
                        tensor: 0.01,
                    }
                } else {
                    let util = (0.93 + noise(rng, 0.05)).clamp(0.0, 1.0);
                    Load {
                        util,
                        mem_copy: (0.42 + noise(rng, 0.08)).clamp(0.0, 1.0),
                        decoder: 0.0,
                        tensor: util * 0.62,
                    }
                }
            }
            WorkloadKind::Inference => {
                // Peak at 14:00 simulated, trough at 02:00, plus request bursts.
                let hours = (t + self.phase) / HOUR;
                let diurnal = 0.5 * (1.0 + ((hours - 8.0) / 24.0 * std::f64::consts::TAU).sin());
                let burst = if rng.random_bool(0.1) {
                    rng.random_range(0.1..0.3)
                } else {
                    0.0
                };
                let util = (0.12 + 0.55 * diurnal + burst + noise(rng, 0.04)).clamp(0.0, 1.0);
                Load {
                    util,
                    mem_copy: util * 0.5,
                    decoder: (util * 0.35).clamp(0.0, 1.0),
                    tensor: util * 0.35,
                }
            }
            WorkloadKind::AllocatedIdle if t < self.turn_at => Load {
                util: 0.7 + noise(rng, 0.1),
                mem_copy: 0.3,
                decoder: 0.0,
                tensor: 0.3,
            },
            WorkloadKind::AllocatedIdle => {
                // A notebook left open: an occasional blip, never real work.
                let util = if rng.random_bool(0.05) { 0.02 } else { 0.0 };
                Load {
                    util,
                    mem_copy: 0.0,
                    decoder: 0.0,
                    tensor: 0.0,
                }
            }
            WorkloadKind::Ghost if t < self.turn_at => Load {
                util: 0.9 + noise(rng, 0.05),
                mem_copy: 0.4,
                decoder: 0.0,
                tensor: 0.55,
            },
            WorkloadKind::Ghost => Load::default(),
        }
    }

    /// Processes on the GPU now, with their SM share of `util`.
    pub fn processes(&self, util: f64) -> Vec<SimProcess> {
        self.job
            .iter()
            .map(|p| SimProcess {
                sm_share: if p.liveness == Liveness::Gone {
                    0.0
                } else {
                    util
                },
                ..p.clone()
            })
            .collect()
    }

    /// Memory held by processes, bytes.
    pub(crate) fn memory_held(&self) -> u64 {
        self.job.as_ref().map_or(0, |p| p.memory_bytes)
    }
}

fn new_job(rng: &mut SmallRng, started: f64, memory_bytes: u64) -> SimProcess {
    let team = TEAMS[rng.random_range(0..TEAMS.len())];
    let suffix: u32 = rng.random();
    SimProcess {
        pid: rng.random_range(2_000..4_000_000),
        memory_bytes,
        sm_share: 0.0,
        command: "python",
        user: USERS[rng.random_range(0..USERS.len())],
        namespace: Some(team),
        pod: Some(format!("train-{:05x}-0", suffix & 0xfffff)),
        container: Some(format!(
            "{:016x}{:016x}",
            rng.random::<u64>(),
            rng.random::<u64>()
        )),
        liveness: Liveness::Running,
        started,
        instance: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn training_jobs_turn_over_and_leave_gaps() {
        let mut rng = SmallRng::seed_from_u64(1);
        let mut w = Workload::new(WorkloadKind::Training, 0.0, &mut rng);
        let mut pids = std::collections::BTreeSet::new();
        let mut idle_ticks = 0;
        for step in 0..(30 * 24) {
            w.advance(step as f64 * HOUR, &mut rng);
            match w.processes(0.9).first() {
                Some(p) => {
                    pids.insert(p.pid);
                }
                None => idle_ticks += 1,
            }
        }
        assert!(
            pids.len() >= 8,
            "30 days of 6–72 h jobs: {} jobs",
            pids.len()
        );
        assert!(idle_ticks > 0, "gaps between jobs exist");
    }

    #[test]
    fn ghost_process_dies_but_keeps_memory() {
        let mut rng = SmallRng::seed_from_u64(2);
        let mut w = Workload::new(WorkloadKind::Ghost, 100.0, &mut rng);
        w.advance(50.0, &mut rng);
        assert_eq!(w.processes(0.9)[0].liveness, Liveness::Running);
        w.advance(150.0, &mut rng);
        let p = &w.processes(0.0)[0];
        assert_eq!(p.liveness, Liveness::Gone);
        assert_eq!(p.memory_bytes, 45 * GIB);
        assert_eq!(w.load(150.0, &mut rng).util, 0.0);
    }

    #[test]
    fn bursty_jobs_burst_and_pause() {
        let mut rng = SmallRng::seed_from_u64(3);
        let mut w = Workload::new(WorkloadKind::Bursty, 0.0, &mut rng);
        let (mut full, mut idle, mut jobs) = (0, 0, std::collections::BTreeSet::new());
        for step in 0..(3 * 24 * 12) {
            let t = step as f64 * 300.0;
            w.advance(t, &mut rng);
            let util = w.load(t, &mut rng).util;
            full += usize::from(util > 0.95);
            idle += usize::from(util == 0.0);
            if let Some(p) = w.processes(util).first() {
                jobs.insert(p.pid);
            }
        }
        assert!(
            full > 50 && idle > 50 && jobs.len() > 10,
            "{full} {idle} {}",
            jobs.len()
        );
    }
}
