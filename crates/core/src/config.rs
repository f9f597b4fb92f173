//! Typed configuration, read from TOML, validated with errors that name the key and line.
//!
//! Every struct here is the documentation of its section: `config.toml` at the repository
//! root shows each option with its default, and a test checks that file parses to exactly
//! [`Config::default`]. Unknown keys are errors (a typo must not silently fall back to a
//! default). Secrets never live in the file: options ending in `_env` name an environment
//! variable instead.

mod alerting;
mod analysis;
mod locate;
mod matcher;
mod parsed;
mod server;
mod simulation;
mod teams;
pub mod url;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Deserializer};

pub use alerting::{
    AdviceConfig, AlertingConfig, DEFAULT_GROUP_BY, DEFAULT_GROUP_INTERVAL, DEFAULT_GROUP_WAIT,
    DEFAULT_REPEAT_INTERVAL, ReceiverConfig, ReceiverKind, RouteConfig, RuleConfig,
};
pub use analysis::{
    CapacityConfig, CostConfig, DEFAULT_RISK_THRESHOLD, HealthConfig, IdleConfig, RiskConfig,
};
pub use locate::Problem;
pub use matcher::{Matcher, MatcherError};
pub use parsed::Parsed;
pub use server::ServerConfig;
pub use simulation::{MAX_SIM_SPEED, MIG_MODELS, SIMULATED_FAULTS, SimulationConfig};
pub use teams::{Holder, TeamConfig, UNASSIGNED, team_of};

/// The whole configuration file.
#[derive(Debug, Clone, PartialEq, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub collect: CollectConfig,
    pub export: ExportConfig,
    pub server: ServerConfig,
    pub state: StateConfig,
    pub simulation: SimulationConfig,
    pub risk: RiskConfig,
    pub idle: IdleConfig,
    pub cost: CostConfig,
    pub capacity: CapacityConfig,
    pub health: HealthConfig,
    pub alerting: AlertingConfig,
    pub advice: AdviceConfig,
    /// `[[teams]]`: who a GPU's holder belongs to (first match wins).
    pub teams: Vec<TeamConfig>,
}

/// `[collect]`: how and how often GPUs are read.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CollectConfig {
    /// Time between two collections of every GPU. Scrapes never trigger a collection.
    #[serde(deserialize_with = "duration")]
    pub interval: Duration,
    /// Path of `libnvidia-ml.so.1`. Unset: the system's library search path, then the
    /// usual driver directories (`/usr/lib/x86_64-linux-gnu`, `/usr/local/nvidia/lib64`, …).
    pub nvml_lib: Option<PathBuf>,
    /// Kernel log read for XID lines: `/dev/kmsg`, a file that a log shipper appends to,
    /// or `"off"`. NVML's event wait reports only the last XID when several arrive at once,
    /// so the kernel log is the second, complete source.
    pub kmsg: String,
    /// Read the processes on each GPU and their owners from `/proc`.
    pub processes: bool,
    /// The `/proc` tree processes are read from: the host's, also where a container mounts
    /// it elsewhere (node_exporter's `--path.procfs`).
    pub proc_path: PathBuf,
    /// Keep the arguments of process command lines. Off by default: command lines often
    /// carry tokens and passwords, and they end up in labels, logs and alerts.
    pub show_arguments: bool,
    /// The kubelet's PodResources socket, asked each collection which pod holds which GPU
    /// (the DaemonSet mounts `/var/lib/kubelet/pod-resources`), or `"off"`. Where its
    /// directory does not exist the host is taken for no Kubernetes node.
    pub kubelet_socket: String,
    /// Kubernetes resource names allocated as GPUs besides `nvidia.com/mig-*`, which always
    /// count (add a renamed time-slicing resource such as `nvidia.com/gpu.shared`).
    pub gpu_resource_names: Vec<String>,
    /// dcgm-exporter's HPC job-mapping directory: a file per GPU named by its index (or
    /// `index.instance`), one Slurm job id per line. Empty: not read.
    pub hpc_job_mapping_dir: String,
    /// Directory of `<index|uuid>` files holding `"<jobid> <uid>"` (Slurm GPU-stat
    /// prologs, `/run/gpustat`). Empty: not read.
    pub gpustat_dir: String,
    /// The program asked for a Slurm job's account (`scontrol show job`), so `[[teams]]
    /// slurm_accounts` can match; a name on the PATH or a path, or `"off"`. Asked only on a
    /// host where jobs are seen, once per job.
    pub scontrol: String,
    /// sysfs's PCI device directory, read each collection for NVIDIA GPUs the bus lists
    /// but NVML does not (the `pci` health component), or `"off"`.
    pub pci_devices: String,
}

impl Default for CollectConfig {
    fn default() -> Self {
        Self {
            interval: Duration::from_secs(5),
            nvml_lib: None,
            kmsg: "/dev/kmsg".into(),
            processes: true,
            proc_path: PathBuf::from("/proc"),
            show_arguments: false,
            kubelet_socket: DEFAULT_KUBELET_SOCKET.into(),
            gpu_resource_names: vec!["nvidia.com/gpu".into()],
            hpc_job_mapping_dir: String::new(),
            gpustat_dir: String::new(),
            scontrol: "scontrol".into(),
            pci_devices: "/sys/bus/pci/devices".into(),
        }
    }
}

/// Where the kubelet serves its PodResources API.
pub(crate) const DEFAULT_KUBELET_SOCKET: &str = "/var/lib/kubelet/pod-resources/kubelet.sock";

impl CollectConfig {
    /// The kernel-log path to follow, or `None` when disabled.
    pub fn kmsg_path(&self) -> Option<&Path> {
        match self.kmsg.as_str() {
            "" | "off" => None,
            path => Some(Path::new(path)),
        }
    }

    /// The Slurm job directories to read (`hpc_job_mapping_dir`, `gpustat_dir`), `None`
    /// where unset.
    pub fn hpc_job_dirs(&self) -> (Option<&Path>, Option<&Path>) {
        fn dir(d: &str) -> Option<&Path> {
            (!d.is_empty()).then(|| Path::new(d))
        }
        (dir(&self.hpc_job_mapping_dir), dir(&self.gpustat_dir))
    }

    /// The program that names a Slurm job's account, or `None` when disabled.
    pub fn scontrol_program(&self) -> Option<&Path> {
        match self.scontrol.as_str() {
            "" | "off" => None,
            program => Some(Path::new(program)),
        }
    }

    /// The kubelet socket to ask, or `None` when disabled.
    pub fn kubelet_socket_path(&self) -> Option<&Path> {
        match self.kubelet_socket.as_str() {
            "" | "off" => None,
            path => Some(Path::new(path)),
        }
    }
}

/// `[export]`: the Prometheus scrape target.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ExportConfig {
    /// Address of the HTTP server (`/metrics`, `/api/v1/*`).
    pub listen: SocketAddr,
    /// Also expose dcgm-exporter's `DCGM_FI_*` names, units and labels.
    pub dcgm_compat: bool,
    /// Spelling of the host label in dcgm-compatible series: "Hostname" as dcgm-exporter
    /// up to 4.7 writes it, or "hostname" as 4.6.0-4.8.3 and later do.
    pub dcgm_hostname_label: String,
    /// Most per-process series (`gpu_process_*`) in one exposition; the processes using the
    /// most memory are kept. Bounds cardinality on hosts with many short jobs.
    pub max_process_series: usize,
    /// Longest label value; longer values (command names, pod names) are truncated.
    pub max_label_length: usize,
    /// One `gpu_nvlink_errors_total` series per link and error instead of per GPU and
    /// error: 18 links make 72 series a GPU, nearly always zero. The API and the risk's
    /// reasons keep per-link detail either way.
    pub nvlink_per_link: bool,
    /// Value of the `hostname` label; empty means `$NODE_NAME` when set (the Kubernetes
    /// downward API), else the host's name.
    pub hostname: String,
    /// Web configuration file in exporter-toolkit's format (TLS, client certificates,
    /// basic-auth users, headers, rate limit); `--web.config.file` overrides it. Unset:
    /// plain HTTP without authentication.
    pub web_config: Option<PathBuf>,
}

impl Default for ExportConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([0, 0, 0, 0], 10400)),
            dcgm_compat: false,
            dcgm_hostname_label: "Hostname".into(),
            max_process_series: 256,
            max_label_length: 128,
            nvlink_per_link: false,
            hostname: String::new(),
            web_config: None,
        }
    }
}

/// The shortest cut applied to label values, whatever the configuration says: GPU UUIDs
/// (40 characters) and PCI bus ids must stay whole, or two GPUs' series could collide
/// and Prometheus would reject the whole scrape as holding duplicates. The configuration
/// refuses a smaller `export.max_label_length`; the exposition applies it as a floor.
pub const MIN_LABEL_LENGTH: usize = 64;

/// `[state]`: where state that must survive a restart lives.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StateConfig {
    /// Directory for the analysis engine's windows, alert state and the notification outbox.
    pub dir: PathBuf,
    /// How often the analysis engine's state is written (and always at shutdown): a
    /// `kill -9` or a power cut loses at most this much of its history.
    #[serde(deserialize_with = "duration")]
    pub save_interval: Duration,
}

impl Default for StateConfig {
    fn default() -> Self {
        Self {
            dir: PathBuf::from("/var/lib/gpu-sentinel"),
            save_interval: Duration::from_secs(60),
        }
    }
}

/// A configuration that failed to load: every problem found, each with key and line.
#[derive(Debug, thiserror::Error)]
#[error("{}", render_problems(.path, .problems))]
pub struct ConfigError {
    pub path: PathBuf,
    pub problems: Vec<Problem>,
}

fn render_problems(path: &Path, problems: &[Problem]) -> String {
    problems
        .iter()
        .map(|p| p.render(path))
        .collect::<Vec<_>>()
        .join("\n")
}

impl Config {
    /// Reads and validates a configuration file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = Config::read_text(path)?;
        Config::parse(&text).map_err(|problems| ConfigError {
            path: path.to_owned(),
            problems,
        })
    }

    /// A configuration file's text. An unreadable file is a problem of the whole file;
    /// bytes that are not UTF-8 are a problem at their line.
    pub fn read_text(path: &Path) -> Result<String, ConfigError> {
        let problem = |problem| ConfigError {
            path: path.to_owned(),
            problems: vec![problem],
        };
        let bytes = std::fs::read(path)
            .map_err(|e| problem(Problem::file(format!("cannot read the file: {e}"))))?;
        String::from_utf8(bytes).map_err(|e| {
            let valid = &e.as_bytes()[..e.utf8_error().valid_up_to()];
            let line = valid.iter().filter(|&&b| b == b'\n').count() + 1;
            problem(Problem {
                key: None,
                line: Some(line),
                message: "is not UTF-8 text (a binary file?)".into(),
            })
        })
    }

    /// Parses and validates configuration text.
    pub fn parse(text: &str) -> Result<Config, Vec<Problem>> {
        let (config, problems) = Config::parse_with_problems(text)?;
        if problems.is_empty() {
            Ok(config)
        } else {
            Err(problems)
        }
    }

    /// The configuration the text describes and what is wrong with its values (nothing:
    /// valid); Err when it is not TOML of the right shape at all.
    pub fn parse_with_problems(text: &str) -> Result<(Config, Vec<Problem>), Vec<Problem>> {
        let config: Config =
            toml::from_str(text).map_err(|e| vec![Problem::from_toml(text, &e)])?;
        let problems = config
            .problems()
            .into_iter()
            .map(|(key, message)| Problem::at_key(text, &key, message))
            .collect();
        Ok((config, problems))
    }

    /// Semantic checks that types alone cannot express, as `(dotted key, message)`.
    fn problems(&self) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = self
            .own_problems()
            .into_iter()
            .map(|(key, message)| (key.to_string(), message))
            .collect();
        out.extend(alerting::problems(&self.alerting, &self.advice));
        let receivers: Vec<&str> = self
            .alerting
            .receivers
            .iter()
            .map(|r| r.name.as_str())
            .collect();
        out.extend(teams::problems(&self.teams, &receivers));
        out
    }

    /// Checks of the sections whose keys are fixed (no array entries among them).
    fn own_problems(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        let interval = self.collect.interval;
        if interval < Duration::from_millis(100) || interval > Duration::from_secs(3600) {
            out.push((
                "collect.interval",
                format!(
                    "{} is outside 100ms..1h",
                    humantime::format_duration(interval)
                ),
            ));
        }
        let save = self.state.save_interval;
        if save < Duration::from_secs(1) || save > Duration::from_secs(3600) {
            out.push((
                "state.save_interval",
                format!("{} is outside 1s..1h", humantime::format_duration(save)),
            ));
        }
        if !["Hostname", "hostname"].contains(&self.export.dcgm_hostname_label.as_str()) {
            out.push((
                "export.dcgm_hostname_label",
                format!(
                    "{:?} is neither \"Hostname\" nor \"hostname\"",
                    self.export.dcgm_hostname_label
                ),
            ));
        }
        if self.server.max_connections == 0 {
            out.push((
                "server.max_connections",
                "must be at least 1: a server that may hold no connection answers nobody".into(),
            ));
        }
        let min_label = MIN_LABEL_LENGTH;
        if self.export.max_label_length < min_label {
            out.push((
                "export.max_label_length",
                format!("must be at least {min_label} characters, so GPU UUIDs stay whole"),
            ));
        }
        out.extend(self.simulation.problems());
        out.extend(analysis::problems(
            &self.risk,
            &self.idle,
            &self.cost,
            &self.capacity,
        ));
        out
    }
}

/// Deserializes a humantime duration such as `"500ms"`, `"5s"`, `"30m"` or `"24h"`.
pub fn duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let text = String::deserialize(d)?;
    parse_duration(&text).map_err(serde::de::Error::custom)
}

/// Parses a duration as written in config and on the command line.
pub fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    humantime::parse_duration(text.trim()).map_err(|reason| DurationError {
        text: text.to_string(),
        reason,
    })
}

/// A duration that is not written the way configuration files write them. The message
/// quotes the text and shows the accepted forms, since it ends up next to a key and line.
#[derive(Debug, thiserror::Error)]
#[error("{text:?} is not a duration like \"500ms\", \"5s\", \"30m\", \"24h\": {reason}")]
pub struct DurationError {
    /// The text as written, untrimmed.
    pub text: String,
    /// What humantime found wrong with it; part of the message, not a separate cause, so
    /// error chains do not print it twice.
    pub reason: humantime::DurationError,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_file_gives_defaults() {
        assert_eq!(Config::parse("").unwrap(), Config::default());
    }

    #[test]
    fn shipped_config_toml_is_exactly_the_defaults() {
        let text = include_str!("../../../config.toml");
        assert_eq!(Config::parse(text).unwrap(), Config::default());
    }

    #[test]
    fn unknown_key_names_key_and_line() {
        let err = Config::parse("[collect]\ninterval = \"5s\"\nintervall = \"1s\"\n").unwrap_err();
        assert_eq!(err.len(), 1);
        assert_eq!(err[0].line, Some(3));
        assert_eq!(err[0].key.as_deref(), Some("collect.intervall"));
        assert!(err[0].message.contains("unknown field"), "{:?}", err[0]);
    }

    #[test]
    fn wrong_type_names_key_and_line() {
        let err = Config::parse("[export]\n\ndcgm_compat = \"yes\"\n").unwrap_err();
        assert_eq!(err[0].line, Some(3));
        assert_eq!(err[0].key.as_deref(), Some("export.dcgm_compat"));
    }

    #[test]
    fn bad_duration_names_key_and_line() {
        let err = Config::parse("[collect]\ninterval = \"soon\"\n").unwrap_err();
        assert_eq!(err[0].line, Some(2));
        assert_eq!(err[0].key.as_deref(), Some("collect.interval"));
        assert!(err[0].message.contains("soon"));
    }

    #[test]
    fn every_semantic_problem_is_reported_with_its_line() {
        let text = "[collect]\ninterval = \"1ms\"\n[simulation]\ngpus = 0\nfaults = [\"meteor\"]\n";
        let err = Config::parse(text).unwrap_err();
        let found: Vec<_> = err
            .iter()
            .map(|p| (p.key.clone().unwrap_or_default(), p.line))
            .collect();
        assert_eq!(
            found,
            vec![
                ("collect.interval".to_string(), Some(2)),
                ("simulation.gpus".to_string(), Some(4)),
                ("simulation.faults".to_string(), Some(5)),
            ]
        );
    }

    #[test]
    fn alerting_problems_name_the_receiver() {
        let text = "[[alerting.receivers]]\nname = \"ops\"\nkind = \"pager\"\nurl = \"http://x\"\n\
                    [alerting.route]\nreceiver = \"oncall\"\nmatchers = [\"gpu=~(\"]\n";
        let err = Config::parse(text).unwrap_err();
        let messages: Vec<&str> = err.iter().map(|p| p.message.as_str()).collect();
        assert!(
            messages.iter().any(|m| m.contains("\"pager\"")),
            "{messages:?}"
        );
        assert!(
            messages
                .iter()
                .any(|m| m.contains("\"oncall\" is not defined")),
            "{messages:?}"
        );
        assert!(
            messages.iter().any(|m| m.contains("bad regex")),
            "{messages:?}"
        );
        let keys: Vec<(Option<&str>, Option<usize>)> =
            err.iter().map(|p| (p.key.as_deref(), p.line)).collect();
        assert_eq!(
            keys,
            vec![
                (Some("alerting.receivers[0].kind"), Some(3)),
                (Some("alerting.route.receiver"), Some(6)),
                (Some("alerting.route.matchers[0]"), Some(7)),
            ]
        );
    }

    #[test]
    fn resolutions_must_outlive_the_longest_group_interval() {
        let text = "[alerting]\nresolved_retention = \"15m\"\n[alerting.route]\n\
                    [[alerting.route.routes]]\ngroup_interval = \"30m\"\n";
        let err = Config::parse(text).unwrap_err();
        assert_eq!(err[0].key.as_deref(), Some("alerting.resolved_retention"));
        assert_eq!(err[0].line, Some(2));
    }

    #[test]
    fn syntax_error_has_a_line() {
        let err = Config::parse("[collect\ninterval = 5").unwrap_err();
        assert_eq!(err[0].line, Some(1));
    }

    #[test]
    fn durations_accept_the_documented_forms() {
        for (text, secs) in [
            ("500ms", 0.5),
            ("5s", 5.0),
            ("30m", 1800.0),
            ("24h", 86400.0),
        ] {
            assert_eq!(parse_duration(text).unwrap().as_secs_f64(), secs);
        }
        assert!(parse_duration("5").is_err());
    }
}
