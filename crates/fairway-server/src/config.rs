//! The server's configuration: a YAML file (all optional) plus command-line overrides.
//! With no file at all the server runs: 127.0.0.1:7733, `./fairway-data`, GPUs from NVML
//! or the `--gpus` flag, the built-in priority classes, no quotas.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::ServerError;

pub const DEFAULT_LISTEN: &str = "127.0.0.1:7733";

/// The server's settings, after the file and the flags are merged.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    pub listen: SocketAddr,
    pub data_dir: PathBuf,
    /// Simulated GPUs (`8`, `16x8`); `None`: discover with NVML.
    pub simulated_gpus: Option<String>,
    /// The model name of simulated GPUs.
    pub gpu_model: String,
    pub file: ConfigFile,
    /// The executable that runs `__shim` (normally the `fairway` binary itself).
    pub shim_exe: PathBuf,
    /// How often the loop runs a cycle and polls checkpoints without any event.
    pub tick_ms: u64,
}

impl ServerConfig {
    /// Defaults for a data directory; the shim is the running executable.
    pub fn new(data_dir: PathBuf) -> ServerConfig {
        ServerConfig {
            listen: DEFAULT_LISTEN.parse().expect("valid default"),
            data_dir,
            simulated_gpus: None,
            gpu_model: "GPU".into(),
            file: ConfigFile::default(),
            shim_exe: std::env::current_exe().unwrap_or_else(|_| PathBuf::from("fairway")),
            tick_ms: 1000,
        }
    }

    pub fn db_path(&self) -> PathBuf {
        self.data_dir.join("fairway.db")
    }
}

/// `fairway.yaml`. Unknown fields are errors: a misspelt `quotas:` must not silently
/// leave every tenant uncapped.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    /// `host:port`; loopback unless told otherwise.
    pub listen: Option<String>,
    pub data_dir: Option<PathBuf>,
    /// Simulated GPUs, as `--gpus`.
    pub gpus: Option<String>,
    pub gpu_model: Option<String>,
    #[serde(default)]
    pub priority_classes: Vec<PriorityClassConfig>,
    #[serde(default)]
    pub quotas: Vec<QuotaConfig>,
    /// Images to pull at start-up and keep warm.
    #[serde(default)]
    pub images: Vec<String>,
    #[serde(default)]
    pub limits: LimitsConfig,
    /// `auto` (default: docker or podman on the PATH, if its daemon answers), `none`, or
    /// the path of a docker- or podman-compatible executable.
    pub container_runtime: Option<String>,
}

#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct PriorityClassConfig {
    pub name: String,
    pub value: i32,
    #[serde(default)]
    pub global_default: bool,
    /// `PreemptLowerPriority` (default) or `Never`.
    pub preemption_policy: Option<String>,
    #[serde(default)]
    pub description: String,
}

#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct QuotaConfig {
    /// Exactly one of `project` and `user`.
    pub project: Option<String>,
    pub user: Option<String>,
    pub gpus_max: Option<u32>,
    pub cpu_millis_max: Option<u64>,
    pub memory_mib_max: Option<u64>,
}

#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsConfig {
    /// Largest request body accepted.
    pub request_body_bytes_max: usize,
    /// Jobs the server holds before refusing submissions (pending + running).
    pub jobs_active_max: u32,
    /// Jobs in one submission.
    pub jobs_per_submission_max: usize,
    /// Per-job log file size before rotation, and files kept.
    pub log_bytes_max: u64,
    pub log_files_max: u32,
    /// Jobs one list request returns at most.
    pub list_jobs_max: u32,
    /// The longest grace period a job may ask for: how long a victim may keep GPUs that a
    /// higher-priority job is waiting for.
    pub grace_seconds_max: u64,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        LimitsConfig {
            request_body_bytes_max: 4 << 20,
            jobs_active_max: 100_000,
            jobs_per_submission_max: 1000,
            log_bytes_max: 16 << 20,
            log_files_max: 3,
            list_jobs_max: 10_000,
            grace_seconds_max: 600,
        }
    }
}

impl ConfigFile {
    /// Reads the file; errors name the file and the field.
    pub fn load(path: &Path) -> Result<ConfigFile, ServerError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ServerError::Config(format!("{}: cannot read: {e}", path.display())))?;
        ConfigFile::parse(&text).map_err(|e| ServerError::Config(format!("{}: {e}", path.display())))
    }

    pub fn parse(text: &str) -> Result<ConfigFile, String> {
        if text.trim().is_empty() {
            return Ok(ConfigFile::default());
        }
        let file: ConfigFile = serde_saphyr::from_str(text).map_err(|e| e.to_string())?;
        file.check()?;
        Ok(file)
    }

    fn check(&self) -> Result<(), String> {
        for (i, q) in self.quotas.iter().enumerate() {
            if q.project.is_some() == q.user.is_some() {
                return Err(format!("quotas[{i}]: give exactly one of project and user"));
            }
        }
        for (i, c) in self.priority_classes.iter().enumerate() {
            if let Some(p) = &c.preemption_policy
                && p != "PreemptLowerPriority"
                && p != "Never"
            {
                return Err(format!(
                    "priority_classes[{i}].preemption_policy: {p:?} is not PreemptLowerPriority or Never"
                ));
            }
        }
        let l = &self.limits;
        if l.request_body_bytes_max == 0 || l.jobs_active_max == 0 || l.jobs_per_submission_max == 0 {
            return Err("limits: every limit must be at least 1".into());
        }
        if l.log_bytes_max == 0 || l.log_files_max == 0 || l.list_jobs_max == 0 {
            return Err("limits: every limit must be at least 1".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_file_is_the_defaults() {
        assert_eq!(ConfigFile::parse("").unwrap(), ConfigFile::default());
        assert_eq!(ConfigFile::parse("# nothing\n").unwrap(), ConfigFile::default());
    }

    #[test]
    fn full_file_parses() {
        let file = ConfigFile::parse(
            "listen: 0.0.0.0:9000\ngpus: 2x4\ngpu_model: A100\npriority_classes:\n  - { name: urgent, value: 5000000 }\n\
             quotas:\n  - { project: ads, gpus_max: 4 }\nimages: [pytorch/pytorch:2.4]\nlimits: { log_files_max: 5 }\n",
        )
        .unwrap();
        assert_eq!(file.gpus.as_deref(), Some("2x4"));
        assert_eq!(file.priority_classes[0].value, 5_000_000);
        assert_eq!(file.quotas[0].gpus_max, Some(4));
        assert_eq!(file.limits.log_files_max, 5);
        assert_eq!(file.limits.log_bytes_max, LimitsConfig::default().log_bytes_max);
    }

    #[test]
    fn the_shipped_example_parses() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/fairway.yaml");
        let file = ConfigFile::load(&path).unwrap();
        assert_eq!(file.quotas.len(), 3);
        assert_eq!(file.limits.grace_seconds_max, 300);
        assert_eq!(file.container_runtime.as_deref(), Some("auto"));
    }

    #[test]
    fn bad_files_name_the_field() {
        let cases = [
            ("quota: []\n", "quota"),
            ("quotas:\n  - { gpus_max: 4 }\n", "quotas[0]: give exactly one of project and user"),
            (
                "priority_classes:\n  - { name: x, value: 1, preemption_policy: Sometimes }\n",
                "priority_classes[0].preemption_policy",
            ),
            ("limits: { log_files_max: 0 }\n", "limits"),
            ("priority_classes:\n  - { name: x, value: lots }\n", "value"),
        ];
        for (text, want) in cases {
            let err = ConfigFile::parse(text).expect_err(text);
            assert!(err.contains(want), "{text}: {err}");
        }
    }
}
