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
    /// Listen on a non-loopback address without TLS (`--insecure`): bearer tokens then cross
    /// the network in clear text.
    pub insecure: bool,
    /// Where the server records where it runs, for CLIs on this machine
    /// (`$XDG_STATE_HOME/fairway/servers`, else `~/.local/state/fairway/servers`); `None`:
    /// not recorded.
    pub registry_dir: Option<PathBuf>,
    /// The clock scheduling reads (the wall clock; tests drive their own).
    pub clock: std::sync::Arc<dyn crate::clock::Clock>,
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
            insecure: false,
            registry_dir: default_registry_dir(),
            clock: std::sync::Arc::new(crate::clock::SystemClock),
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
    /// TLS for the API: required to listen on a non-loopback address (unless `--insecure`).
    pub tls: Option<TlsConfig>,
    /// The highest priority class a non-admin token may use, unless its project has its
    /// own setting (`projects`). Default `high`: `critical` is for admins to grant.
    pub priority_class_max: Option<String>,
    /// Per-project settings.
    #[serde(default)]
    pub projects: Vec<ProjectConfig>,
    /// Failed runs with retries left wait before running again: the first retry after
    /// `initial`, each next one twice as long, at most `max`.
    #[serde(default)]
    pub retry_backoff: BackoffConfig,
    /// Fair sharing between tenants inside one priority (off unless set).
    pub fair_share: Option<FairShareConfig>,
    /// Nominal quotas lent within cohorts (see `docs/cohorts.md`).
    #[serde(default)]
    pub cohorts: Vec<fairway_spec::CohortDoc>,
    /// Reservations with backfill for jobs that cannot start (the core's `plan.rs`).
    #[serde(default)]
    pub reservations: Option<fairway_spec::ReservationsDoc>,
    /// How one-replica jobs are placed (`docs/placement.md`): `fairway` (the default), `fgd`,
    /// the paper's baselines, or `core` for the core's own best-fit scoring.
    #[serde(default)]
    pub placement: Option<String>,
    #[serde(default)]
    pub metrics: MetricsConfig,
    /// Alerts the server sends itself, by e-mail and webhook, for machines without a
    /// monitoring stack (`docs/notify.md`; checked by `crate::notify::check`).
    #[serde(default)]
    pub notify: NotifyConfig,
}

/// `notify:`: who is told (`receivers`), how e-mail leaves (`smtp`), and when (`rules`).
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct NotifyConfig {
    pub smtp: Option<SmtpConfig>,
    #[serde(default)]
    pub receivers: Vec<ReceiverConfig>,
    #[serde(default)]
    pub rules: Vec<NotifyRuleConfig>,
}

/// The mail relay notifications go through.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct SmtpConfig {
    pub host: String,
    /// Default: 587 with `starttls`, 465 with `tls`, 25 with `none`.
    pub port: Option<u16>,
    /// `starttls` (default), `tls` (implicit TLS), or `none` (plain text: a relay on this
    /// machine, or one that takes no password).
    pub security: Option<String>,
    pub username: Option<String>,
    /// A file holding the password (its first line), read at start-up; required with
    /// `username`. Not inline, so that the config file may be readable by others.
    pub password_file: Option<PathBuf>,
    /// The sender, `fairway@example.org` or `Fairway <fairway@example.org>`.
    pub from: String,
}

/// One destination: e-mail addresses, a webhook, or both.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ReceiverConfig {
    pub name: String,
    #[serde(default)]
    pub email_to: Vec<String>,
    /// Receives Alertmanager's webhook JSON (version 4), so that what reads Alertmanager's
    /// calls reads these.
    pub webhook_url: Option<String>,
}

/// One rule: which jobs, on what condition, told to whom.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct NotifyRuleConfig {
    pub name: String,
    /// `pending` (waiting longer than `pending_seconds`), `failed` (ended failed, its retries
    /// spent), or `preempted` (preempted at least `preemptions_min` times).
    pub when: String,
    /// Only jobs of this priority class (any, unless given).
    pub tier: Option<String>,
    /// Only jobs of this project (any, unless given).
    pub tenant: Option<String>,
    pub pending_seconds: Option<u64>,
    pub preemptions_min: Option<u32>,
    pub receiver: String,
}

/// `metrics:`: what `/metrics` exports beyond its bounded families.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct MetricsConfig {
    /// Export how long each of this many longest-waiting pending jobs has waited, one series
    /// per job (`fairway_job_pending_seconds`), so that an alert can name the job: for small
    /// clusters (kube-state-metrics' per-pod series). 0, the default: none.
    #[serde(default)]
    pub pending_job_series_max: u32,
}

/// The most per-job series `metrics.pending_job_series_max` may ask for.
pub const PENDING_JOB_SERIES_MAX: u32 = 10_000;

/// `fair_share:` (see the core's `fairshare.rs` for the formula).
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct FairShareConfig {
    /// Past usage counts half as much this long after (0: only current holdings count; a
    /// day when left out), in seconds or in hours (`fairway_spec::half_life_ms`).
    #[serde(default)]
    pub half_life_seconds: Option<u64>,
    #[serde(default)]
    pub half_life_hours: Option<fairway_spec::Hours>,
    /// Weights (1 unless named).
    #[serde(default)]
    pub weights: Vec<WeightConfig>,
}

impl FairShareConfig {
    /// The core's fair sharing, or why the half-life is refused.
    pub fn to_core(&self) -> Result<fairway_core::FairSharing, String> {
        fairway_spec::half_life_ms("fair_share", self.half_life_seconds, self.half_life_hours)
            .map(|half_life_ms| fairway_core::FairSharing { half_life_ms })
            .map_err(|e| e.to_string())
    }
}

#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct WeightConfig {
    /// Exactly one of `project` and `user`.
    pub project: Option<String>,
    pub user: Option<String>,
    pub weight: u32,
}

#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// PEM: the certificate chain, leaf first.
    pub cert_file: PathBuf,
    /// PEM: its private key (PKCS#8, PKCS#1 or SEC1).
    pub key_file: PathBuf,
}

#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ProjectConfig {
    pub name: String,
    /// The highest priority class this project's tokens may use.
    pub priority_class_max: Option<String>,
    /// The Unix user this project's jobs run as. Only a server running as root can switch
    /// users; a non-root server with `run_as` set refuses to start.
    pub run_as: Option<String>,
}

#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct BackoffConfig {
    pub initial_seconds: u64,
    pub max_seconds: u64,
}

impl Default for BackoffConfig {
    fn default() -> Self {
        // Kubernetes' Job controller: 10 s, doubling, capped at 6 minutes.
        BackoffConfig { initial_seconds: 10, max_seconds: 360 }
    }
}

impl BackoffConfig {
    /// The wait before the retry that follows `failures` failed runs (1 = the first retry).
    pub fn delay_ms(&self, failures: u32) -> u64 {
        let doublings = failures.saturating_sub(1).min(32);
        let delay = self.initial_seconds.saturating_mul(1u64 << doublings);
        delay.min(self.max_seconds).saturating_mul(1000)
    }
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
    /// Rule 1 of the preemption order: a run of this class younger than this is not a
    /// victim (0: no minimum).
    #[serde(default)]
    pub min_run_before_preemption_seconds: u64,
    /// Rule 1: a job of this class chosen as a victim this many times in the last hour is
    /// not chosen again until the oldest of those is an hour old.
    pub preemptions_per_hour_max: Option<u32>,
    /// Jobs of this class may preempt runs that rule 1 protects (work that must start now;
    /// the built-in `critical` does).
    #[serde(default)]
    pub overrides_preemption_protection: bool,
    /// Rule 1, the preemptor's side: a job of this class waits this long for free GPUs
    /// (since it entered the queue, or was requeued) before it preempts (0: at once).
    #[serde(default)]
    pub preemption_delay_seconds: u64,
    #[serde(default)]
    pub description: String,
}

impl PriorityClassConfig {
    pub fn protection(&self) -> fairway_spec::PreemptionProtection {
        fairway_spec::PreemptionProtection {
            min_run_seconds: self.min_run_before_preemption_seconds,
            preemptions_per_hour_max: self.preemptions_per_hour_max,
            overrides_protection: self.overrides_preemption_protection,
            preemption_delay_seconds: self.preemption_delay_seconds,
        }
    }
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
    /// Open connections at once; more are closed as they arrive.
    pub connections_max: usize,
    /// How long a client may take to send a request's headers, and how long a kept-alive
    /// connection may stay idle between requests.
    pub header_read_timeout_seconds: u64,
    /// How long a client may take to send a request's body.
    pub body_read_timeout_seconds: u64,
    /// Victims all preemptors together may take in one scheduling cycle (rule 7 of the
    /// preemption order); a preemptor beyond it waits for the next cycle.
    pub preemption_victims_per_cycle_max: u32,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        LimitsConfig {
            // The job-spec reader's own limit (docs/job-spec.md): a larger body could never parse.
            request_body_bytes_max: 1 << 20,
            jobs_active_max: 100_000,
            jobs_per_submission_max: 1000,
            log_bytes_max: 16 << 20,
            log_files_max: 3,
            list_jobs_max: 10_000,
            grace_seconds_max: 600,
            connections_max: 1024,
            preemption_victims_per_cycle_max: fairway_core::Limits::default().victims_per_cycle_max,
            header_read_timeout_seconds: 10,
            body_read_timeout_seconds: 30,
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
        let file: ConfigFile = fairway_spec::from_yaml(text)?;
        file.check()?;
        Ok(file)
    }

    fn check(&self) -> Result<(), String> {
        for (i, q) in self.quotas.iter().enumerate() {
            if q.project.is_some() == q.user.is_some() {
                return Err(format!("quotas[{i}]: give exactly one of project and user"));
            }
            check_account_names(&format!("quotas[{i}]"), q.project.as_deref(), q.user.as_deref())?;
        }
        if let Some(f) = &self.fair_share {
            f.to_core()?;
            for (i, w) in f.weights.iter().enumerate() {
                if w.project.is_some() == w.user.is_some() {
                    return Err(format!("fair_share.weights[{i}]: give exactly one of project and user"));
                }
                check_account_names(&format!("fair_share.weights[{i}]"), w.project.as_deref(), w.user.as_deref())?;
                fairway_spec::check_fair_share_weight(&format!("fair_share.weights[{i}].weight"), w.weight)?;
                let same = |o: &WeightConfig| o.project == w.project && o.user == w.user;
                if f.weights[..i].iter().any(same) {
                    return Err(format!("fair_share.weights[{i}]: names an account already weighted"));
                }
            }
        }
        fairway_spec::resolve_cohorts(&self.cohorts, "cohorts", &mut fairway_spec::Interner::new())
            .map_err(|e| e.to_string())?;
        self.check_guarantees_within_quotas()?;
        if let Some(r) = self.reservations {
            r.to_core("reservations").map_err(|e| e.to_string())?;
        }
        if let Some(name) = &self.placement {
            fairway_spec::placement_of(name, "placement").map_err(|e| e.to_string())?;
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
            if let Err((field, reason)) = c.protection().check() {
                let field = match field {
                    "minRunBeforePreemptionSeconds" => "min_run_before_preemption_seconds",
                    "preemptionDelaySeconds" => "preemption_delay_seconds",
                    _ => "preemptions_per_hour_max",
                };
                return Err(format!("priority_classes[{i}].{field}: {reason}"));
            }
        }
        let l = &self.limits;
        let zero = [
            ("request_body_bytes_max", l.request_body_bytes_max as u64),
            ("jobs_active_max", u64::from(l.jobs_active_max)),
            ("jobs_per_submission_max", l.jobs_per_submission_max as u64),
            ("log_bytes_max", l.log_bytes_max),
            ("log_files_max", u64::from(l.log_files_max)),
            ("list_jobs_max", u64::from(l.list_jobs_max)),
            ("connections_max", l.connections_max as u64),
            ("header_read_timeout_seconds", l.header_read_timeout_seconds),
            ("body_read_timeout_seconds", l.body_read_timeout_seconds),
            ("preemption_victims_per_cycle_max", u64::from(l.preemption_victims_per_cycle_max)),
        ];
        if let Some((name, _)) = zero.iter().find(|(_, v)| *v == 0) {
            return Err(format!("limits.{name}: must be at least 1"));
        }
        if l.request_body_bytes_max > fairway_spec::ParseLimits::default().input_bytes_max {
            return Err(format!(
                "limits.request_body_bytes_max: at most {} (the job-spec reader's limit)",
                fairway_spec::ParseLimits::default().input_bytes_max
            ));
        }
        let mut seen = std::collections::BTreeSet::new();
        for (i, p) in self.projects.iter().enumerate() {
            fairway_spec::check_account_name(&p.name).map_err(|reason| format!("projects[{i}].name: {reason}"))?;
            if !seen.insert(p.name.as_str()) {
                return Err(format!("projects[{i}].name: {:?} is given twice", p.name));
            }
            if let Some(user) = &p.run_as
                && (user.is_empty() || user.starts_with('-') || user.contains(['/', ':', ' ']))
            {
                return Err(format!("projects[{i}].run_as: {user:?} is not a user name"));
            }
        }
        if self.metrics.pending_job_series_max > PENDING_JOB_SERIES_MAX {
            return Err(format!(
                "metrics.pending_job_series_max: at most {PENDING_JOB_SERIES_MAX} (one series per job; for small clusters)"
            ));
        }
        crate::notify::check(&self.notify, &self.priority_classes)?;
        let b = &self.retry_backoff;
        if b.initial_seconds == 0 || b.max_seconds < b.initial_seconds {
            return Err("retry_backoff: initial_seconds must be at least 1 and at most max_seconds".into());
        }
        Ok(())
    }
}

/// A project or user named in the file follows the job spec's rule for names: one that
/// breaks it could never match a job.
fn check_account_names(at: &str, project: Option<&str>, user: Option<&str>) -> Result<(), String> {
    for (key, name) in [("project", project), ("user", user)] {
        if let Some(name) = name {
            fairway_spec::check_account_name(name).map_err(|reason| format!("{at}.{key}: {reason}"))?;
        }
    }
    Ok(())
}

/// `$XDG_STATE_HOME/fairway/servers`, else `$HOME/.local/state/fairway/servers`.
pub fn default_registry_dir() -> Option<PathBuf> {
    let state = std::env::var_os("XDG_STATE_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/state")))?;
    Some(state.join("fairway").join("servers"))
}

impl ConfigFile {
    /// A cohort member may not keep unlent (its guarantee) more than its project's hard
    /// quota lets it use: that would sit idle (`fairway_spec::GuaranteeBeyondCap`).
    fn check_guarantees_within_quotas(&self) -> Result<(), String> {
        for (i, cohort) in self.cohorts.iter().enumerate() {
            for (j, member) in cohort.members.iter().enumerate() {
                let Some((k, q)) =
                    self.quotas.iter().enumerate().find(|(_, q)| q.project.as_deref() == Some(member.project.as_str()))
                else {
                    continue;
                };
                let cap = fairway_core::Quota {
                    gpus_max: q.gpus_max,
                    cpu_millis_max: q.cpu_millis_max,
                    memory_mib_max: q.memory_mib_max,
                };
                if let Some(beyond) = member.guarantee_beyond(cap) {
                    let cap_field = format!("quotas[{k}].{}_max", beyond.resource);
                    return Err(format!(
                        "cohorts[{i}].members[{j}].lending_limit.{}: {}",
                        beyond.resource,
                        beyond.reason(&member.project, &cap_field)
                    ));
                }
            }
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
    fn fair_sharing_and_reservations_turn_on_with_their_defaults() {
        let file = ConfigFile::parse("fair_share: {}\nreservations: {}\n").unwrap();
        assert_eq!(file.fair_share.map(|f| f.to_core().unwrap().half_life_ms), Some(86_400_000));
        let reservations = file.reservations.unwrap().to_core("reservations").unwrap();
        assert_eq!((reservations.0.count_max, reservations.1), (1, 3_600_000));
    }

    /// A policy tried in the simulator (whose scenarios speak hours) is copied as it is.
    #[test]
    fn spans_read_in_hours_as_the_simulators_scenarios_write_them() {
        let file =
            ConfigFile::parse("fair_share: { half_life_hours: 12 }\nreservations: { default_runtime_hours: 4 }\n")
                .unwrap();
        assert_eq!(file.fair_share.map(|f| f.to_core().unwrap().half_life_ms), Some(43_200_000));
        assert_eq!(file.reservations.unwrap().to_core("reservations").unwrap().1, 14_400_000);
    }

    #[test]
    fn backoff_doubles_up_to_its_cap() {
        let b = BackoffConfig { initial_seconds: 10, max_seconds: 60 };
        let delays: Vec<u64> = (1..=6).map(|n| b.delay_ms(n) / 1000).collect();
        assert_eq!(delays, [10, 20, 40, 60, 60, 60]);
        assert_eq!(b.delay_ms(u32::MAX), 60_000);
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
            ("limits: { log_files_max: 0 }\n", "limits.log_files_max"),
            ("limits: { request_body_bytes_max: 4194304 }\n", "limits.request_body_bytes_max"),
            ("projects:\n  - { name: a }\n  - { name: a }\n", "projects[1].name"),
            ("projects:\n  - { name: a, run_as: \"-x\" }\n", "projects[0].run_as"),
            ("retry_backoff: { initial_seconds: 0 }\n", "retry_backoff"),
            ("tls: { cert_file: a }\n", "key_file"),
            ("priority_classes:\n  - { name: x, value: lots }\n", "value"),
            ("fair_share: { half_life_seconds: 999999999999 }\n", "fair_share.half_life_seconds"),
            ("fair_share: { half_life_seconds: 60, weights: [{ weight: 2 }] }\n", "fair_share.weights[0]"),
            (
                "fair_share: { half_life_seconds: 60, weights: [{ project: a, weight: 0 }] }\n",
                "fair_share.weights[0].weight: must be a whole number from 1 to 1000000, got 0",
            ),
            (
                "fair_share: { half_life_seconds: 60, weights: [{ user: a, weight: 1000001 }] }\n",
                "fair_share.weights[0].weight: must be a whole number from 1 to 1000000, got 1000001",
            ),
            (
                "fair_share: { half_life_seconds: 60, weights: [{ project: a, weight: 2 }, { project: a, weight: 3 }] }\n",
                "fair_share.weights[1]",
            ),
            ("fair_share: { half_life: 60 }\n", "half_life"),
            (
                "cohorts: [{ name: lab, members: [{ project: a, nominal: { gpus: 2 }, lending_limit: { gpus: 3 } }] }]\n",
                "cohorts[0].members[0].lending_limit.gpus: 3 is more than the nominal quota 2",
            ),
            ("cohorts: [{ name: lab, members: [{ project: a, nominal: { gpu: 2 } }] }]\n", "gpu"),
            (
                "quotas: [{ project: a, gpus_max: 2 }]\n\
                 cohorts: [{ name: lab, members: [{ project: a, nominal: { gpus: 4 }, lending_limit: { gpus: 1 } }] }]\n",
                "cohorts[0].members[0].lending_limit.gpus: project a keeps 3 gpus of its nominal 4 unlent, more than \
                 its hard quota of 2 (quotas[0].gpus_max)",
            ),
            ("reservations: { count: 0, default_runtime_seconds: 60 }\n", "reservations.count: must be from 1"),
            ("reservations: { default_runtime_seconds: 0 }\n", "reservations.default_runtime_seconds"),
            (
                "reservations: { default_runtime_seconds: 60, default_runtime_hours: 1 }\n",
                "reservations.default_runtime_seconds: give default_runtime_seconds or default_runtime_hours, not both",
            ),
            ("fair_share: { half_life_hours: -1 }\n", "fair_share.half_life_hours: must be from 0 to 87600, got -1"),
            ("placement: tightest\n", "placement: unknown placement policy \"tightest\""),
            // Names follow the job spec's rule, so every one named here can match a job.
            (
                "quotas: [{ project: \"my team\", gpus_max: 2 }]\n",
                "quotas[0].project: must not contain whitespace or control characters, got \"my team\"",
            ),
            ("quotas: [{ user: \"\", gpus_max: 2 }]\n", "quotas[0].user: must not be empty"),
            (
                "fair_share: { weights: [{ user: \"a\\tb\", weight: 2 }] }\n",
                "fair_share.weights[0].user: must not contain whitespace",
            ),
            ("cohorts: [{ name: \"my lab\", members: [{ project: a, nominal: { gpus: 2 } }] }]\n", "cohorts[0].name"),
            (
                "cohorts: [{ name: lab, members: [{ project: \" a\", nominal: { gpus: 2 } }] }]\n",
                "cohorts[0].members[0].project: must not contain whitespace",
            ),
            ("projects:\n  - { name: \"a b\" }\n", "projects[0].name: must not contain whitespace"),
        ];
        for (text, want) in cases {
            let err = ConfigFile::parse(text).expect_err(text);
            assert!(err.contains(want), "{text}: {err}");
        }
        // A YAML error reads "FIELD: line L column C: …" after the file's name, without the
        // parser's own "error: ", which the program's prefix would repeat.
        let err = ConfigFile::parse("fair_share: 3\n").unwrap_err();
        assert!(err.starts_with("fair_share: line 1 column 13: "), "{err}");
        let err =
            ConfigFile::parse("cohorts:\n  - name: lab\n    members:\n      - { project: a, nominal: { gpus: -1 } }\n")
                .unwrap_err();
        assert!(err.starts_with("cohorts[0].members[0].nominal.gpus: line 4 column 40: invalid u32"), "{err}");
    }
}
