//! The controller's settings: a YAML file (all optional), in the server's format where the
//! two overlap (`listen`, `tls`, `limits`), plus what only a cluster needs.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::KubeError;

/// `fairway kube --config FILE`. Unknown keys are errors.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct Settings {
    /// The read-only API for the `fairway` CLI (`/v1`), `/healthz` and `/metrics`.
    pub listen: String,
    /// `/metrics` and `/healthz` alone, without a token, for Prometheus and probes; `None`:
    /// only on `listen`.
    pub metrics_listen: Option<String>,
    /// TLS of that API (PEM files), as the server's `tls`.
    pub tls: Option<TlsFiles>,
    /// Bearer tokens allowed to read the API (one per line, `fwt_…`); `None`: the API is
    /// open to whoever reaches it (bind it to loopback and use `kubectl port-forward`).
    pub api_tokens_file: Option<PathBuf>,
    /// The mutating admission webhook (HTTPS): `None` runs without it (jobs then opt in
    /// explicitly).
    pub webhook: Option<WebhookSettings>,
    /// The extended resource of GPUs on nodes and in pods.
    pub gpu_resource: String,
    /// Node labels that name the GPU model, first present wins.
    pub gpu_model_labels: Vec<String>,
    /// The GPU model of nodes with GPUs and none of those labels.
    pub gpu_model_default: String,
    /// A namespace with this label (`key=value`) has its new Jobs managed (through the
    /// webhook).
    pub managed_namespace_label: String,
    /// The `schedulerName` of the pods of managed workloads; a Job whose pod template names
    /// it is managed, whatever its namespace.
    pub scheduler_name: String,
    /// Leader election: only the holder of this Lease acts.
    pub leader_election: LeaderElection,
    /// Concurrent API writes (admissions, binds, suspends).
    pub writes_in_flight_max: usize,
    /// Status and event writes per second at most (they never delay admissions).
    pub status_writes_per_second_max: u32,
    /// Fair sharing between namespaces (projects) inside one priority; `None`: off. A
    /// namespace's weight is its `fairway.dev/fair-share-weight` annotation (1 without).
    pub fair_share: Option<FairShareSettings>,
    /// Shares of one GPU: the extended resource a pod asks for part of one GPU by, where a
    /// device plugin shares GPUs (HAMi's `nvidia.com/gpucores`, Volcano's
    /// `volcano.sh/vgpu-cores`); `None`: GPUs are not shared, and a Job asking for a share
    /// is refused with the reason (see `docs/kubernetes.md`).
    pub gpu_share: Option<GpuShareSettings>,
    /// Reservations with backfill for Jobs that cannot be admitted (the core's `plan.rs`);
    /// `None`: off.
    pub reservations: Option<fairway_spec::ReservationsDoc>,
    /// How one-replica Jobs are placed (`docs/placement.md`): `fairway` (the default), `fgd`,
    /// the paper's baselines, or `core` for the core's own best-fit scoring.
    pub placement: Option<String>,
    /// What `/metrics` exports beyond its bounded families, as the server's `metrics:`
    /// (`pending_job_series_max`: one series per longest-waiting pending workload).
    pub metrics: fairway_server::config::MetricsConfig,
}

#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct FairShareSettings {
    /// Past usage counts half as much this long after (0: only current holdings count; a
    /// day when left out), in seconds or in hours (`fairway_spec::half_life_ms`).
    #[serde(default)]
    pub half_life_seconds: Option<u64>,
    #[serde(default)]
    pub half_life_hours: Option<fairway_spec::Hours>,
    /// Users' weights (a user is a workload's `fairway.dev/user`; 1 unless named here).
    /// Namespaces weigh through their own annotation (`fairway.dev/fair-share-weight`).
    #[serde(default)]
    pub user_weights: Vec<UserWeight>,
}

impl FairShareSettings {
    /// The core's fair sharing, or why the half-life is refused.
    pub fn to_core(&self) -> Result<fairway_core::FairSharing, String> {
        fairway_spec::half_life_ms("fair_share", self.half_life_seconds, self.half_life_hours)
            .map(|half_life_ms| fairway_core::FairSharing { half_life_ms })
            .map_err(|e| e.to_string())
    }
}

/// A user's fair-share weight, inside the projects (namespaces) it works in.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct UserWeight {
    pub user: String,
    pub weight: u32,
}

/// The most users `fair_share.user_weights` may name.
pub const USER_WEIGHTS_MAX: usize = 10_000;

/// How a pod asks for a share of one GPU: `resource` units of `units_per_gpu` per GPU, beside
/// one `gpu_resource` (HAMi: `nvidia.com/gpu: 1` and `nvidia.com/gpucores: 50` is half a GPU).
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct GpuShareSettings {
    pub resource: String,
    /// What one whole GPU counts in `resource` (100 for a percentage).
    #[serde(default = "percent")]
    pub units_per_gpu: u32,
    /// How many `gpu_resource` a node reports per physical GPU, so that the kubelet admits
    /// several pods to one GPU (HAMi's `deviceSplitCount`): a node's GPUs are its
    /// allocatable `gpu_resource` divided by it.
    #[serde(default = "one")]
    pub splits_per_gpu: u32,
}

fn percent() -> u32 {
    100
}

fn one() -> u32 {
    1
}

#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TlsFiles {
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
}

#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct WebhookSettings {
    pub listen: String,
    /// The serving certificate and key (PEM), e.g. from cert-manager; both or neither.
    /// Neither: the controller makes and keeps its own ([`ManagedCert`]).
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
    #[serde(default)]
    pub managed_cert: ManagedCert,
}

/// Where a certificate the controller made is kept and announced (see `certs`).
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct ManagedCert {
    /// The namespace of the Secret and the Service.
    pub namespace: String,
    pub secret_name: String,
    /// The Service the API server calls the webhook through.
    pub service_name: String,
    /// The `MutatingWebhookConfiguration` whose `caBundle` is written.
    pub webhook_configuration: String,
    /// More names (or IP addresses) the certificate is for: a webhook reached by URL.
    pub hosts: Vec<String>,
}

impl Default for ManagedCert {
    fn default() -> Self {
        ManagedCert {
            namespace: "fairway-system".into(),
            secret_name: "fairway-webhook-cert".into(),
            service_name: "fairway-webhook".into(),
            webhook_configuration: "fairway".into(),
            hosts: Vec::new(),
        }
    }
}

#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct LeaderElection {
    pub enabled: bool,
    pub namespace: String,
    pub lease_name: String,
    pub lease_seconds: u32,
    /// This replica's name in the Lease; default: `$POD_NAME`, else `fairway-<pid>`.
    pub identity: Option<String>,
}

impl Default for LeaderElection {
    fn default() -> Self {
        LeaderElection {
            enabled: true,
            namespace: "fairway-system".into(),
            lease_name: "fairway-controller".into(),
            lease_seconds: 15,
            identity: None,
        }
    }
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            listen: "127.0.0.1:7733".into(),
            metrics_listen: None,
            tls: None,
            api_tokens_file: None,
            webhook: None,
            gpu_resource: "nvidia.com/gpu".into(),
            gpu_model_labels: vec!["nvidia.com/gpu.product".into(), "cloud.google.com/gke-accelerator".into()],
            gpu_model_default: "GPU".into(),
            managed_namespace_label: "fairway.dev/managed=true".into(),
            scheduler_name: "fairway".into(),
            leader_election: LeaderElection::default(),
            writes_in_flight_max: 64,
            status_writes_per_second_max: 100,
            fair_share: None,
            gpu_share: None,
            reservations: None,
            placement: None,
            metrics: fairway_server::config::MetricsConfig::default(),
        }
    }
}

impl Settings {
    pub fn load(path: &Path) -> Result<Settings, KubeError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| KubeError::Config(format!("{}: cannot read: {e}", path.display())))?;
        Settings::parse(&text).map_err(|e| KubeError::Config(format!("{}: {e}", path.display())))
    }

    pub fn parse(text: &str) -> Result<Settings, String> {
        if text.trim().is_empty() {
            return Ok(Settings::default());
        }
        let settings: Settings = fairway_spec::from_yaml(text)?;
        settings.check()?;
        Ok(settings)
    }

    fn check(&self) -> Result<(), String> {
        self.listen.parse::<SocketAddr>().map_err(|_| format!("listen: {:?} is not HOST:PORT", self.listen))?;
        if let Some(m) = &self.metrics_listen {
            m.parse::<SocketAddr>().map_err(|_| format!("metrics_listen: {m:?} is not HOST:PORT"))?;
        }
        if let Some(w) = &self.webhook {
            w.listen.parse::<SocketAddr>().map_err(|_| format!("webhook.listen: {:?} is not HOST:PORT", w.listen))?;
            if w.cert_file.is_some() != w.key_file.is_some() {
                return Err("webhook.cert_file and webhook.key_file: give both, or neither to let the controller make its own certificate".into());
            }
            let m = &w.managed_cert;
            if [&m.namespace, &m.secret_name, &m.service_name, &m.webhook_configuration].iter().any(|v| v.is_empty()) {
                return Err("webhook.managed_cert: namespace, secret_name, service_name and webhook_configuration must not be empty".into());
            }
        }
        if self.managed_label().is_none() {
            return Err(format!("managed_namespace_label: {:?} is not KEY=VALUE", self.managed_namespace_label));
        }
        if self.scheduler_name.is_empty() || self.gpu_resource.is_empty() {
            return Err("scheduler_name and gpu_resource must not be empty".into());
        }
        if let Some(s) = &self.gpu_share {
            if s.resource.is_empty() || s.resource == self.gpu_resource {
                return Err(format!(
                    "gpu_share.resource: must name a resource other than gpu_resource, got {:?}",
                    s.resource
                ));
            }
            if s.splits_per_gpu == 0 {
                return Err("gpu_share.splits_per_gpu: at least 1".into());
            }
            if s.units_per_gpu < 2 {
                return Err(format!(
                    "gpu_share.units_per_gpu: at least 2 (a share is less than one GPU), got {}",
                    s.units_per_gpu
                ));
            }
        }
        if self.writes_in_flight_max == 0 || self.status_writes_per_second_max == 0 {
            return Err("writes_in_flight_max and status_writes_per_second_max must be at least 1".into());
        }
        if self.leader_election.lease_seconds < 2 {
            return Err("leader_election.lease_seconds: at least 2".into());
        }
        if let Some(f) = &self.fair_share {
            f.to_core()?;
            check_user_weights(&f.user_weights)?;
        }
        if let Some(r) = self.reservations {
            r.to_core("reservations").map_err(|e| e.to_string())?;
        }
        if let Some(name) = &self.placement {
            fairway_spec::placement_of(name, "placement").map_err(|e| e.to_string())?;
        }
        let most = fairway_server::config::PENDING_JOB_SERIES_MAX;
        if self.metrics.pending_job_series_max > most {
            return Err(format!(
                "metrics.pending_job_series_max: at most {most} (one series per workload; for small clusters)"
            ));
        }
        Ok(())
    }

    /// The opt-in label as (key, value).
    pub fn managed_label(&self) -> Option<(&str, &str)> {
        self.managed_namespace_label.split_once('=').filter(|(k, v)| !k.is_empty() && !v.is_empty())
    }
}

/// Each user named once, by a non-empty name, with a weight from 1 to the most.
fn check_user_weights(weights: &[UserWeight]) -> Result<(), String> {
    if weights.len() > USER_WEIGHTS_MAX {
        return Err(format!("fair_share.user_weights: at most {USER_WEIGHTS_MAX} users, got {}", weights.len()));
    }
    for (i, w) in weights.iter().enumerate() {
        if w.user.trim().is_empty() {
            return Err(format!("fair_share.user_weights[{i}].user: must not be empty"));
        }
        fairway_spec::check_fair_share_weight(&format!("fair_share.user_weights[{i}].weight"), w.weight)?;
        if weights[..i].iter().any(|o| o.user == w.user) {
            return Err(format!("fair_share.user_weights[{i}].user: {:?} is named twice", w.user));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_errors() {
        let s = Settings::parse("").unwrap();
        assert_eq!((s.scheduler_name.as_str(), s.managed_label()), ("fairway", Some(("fairway.dev/managed", "true"))));
        // Fair sharing and reservations turn on with their defaults: a day, one, an hour.
        let s = Settings::parse("fair_share: {}\nreservations: {}\n").unwrap();
        assert_eq!(s.fair_share.map(|f| f.to_core().unwrap().half_life_ms), Some(86_400_000));
        assert_eq!(s.reservations.map(|r| r.to_core("reservations").unwrap().1), Some(3_600_000));
        // Spans in hours, as the simulator's scenarios write them, read the same.
        let s = Settings::parse("fair_share: { half_life_hours: 12 }\nreservations: { default_runtime_hours: 4 }\n")
            .unwrap();
        assert_eq!(s.fair_share.map(|f| f.to_core().unwrap().half_life_ms), Some(43_200_000));
        assert_eq!(s.reservations.map(|r| r.to_core("reservations").unwrap().1), Some(14_400_000));
        for (text, want) in [
            ("listen: nowhere\n", "listen"),
            ("managed_namespace_label: managed\n", "managed_namespace_label"),
            ("writes_in_flight_max: 0\n", "writes_in_flight_max"),
            ("fair_share: { half_life_seconds: 999999999999 }\n", "fair_share.half_life_seconds"),
            ("fair_share: { half_life_seconds: 60, half_life_hours: 1 }\n", "not both"),
            ("metrics: { pending_job_series_max: 10001 }\n", "metrics.pending_job_series_max: at most 10000"),
            ("fair_share: { half_life: 60 }\n", "fair_share.half_life: line 1 column 15: unknown field `half_life`"),
            // A value of the wrong type is named by its field, not only by line and column.
            ("writes_in_flight_max: many\n", "writes_in_flight_max: line 1 column 23: invalid u"),
            (
                "fair_share: { user_weights: [{ user: ana, weight: 0 }] }\n",
                "fair_share.user_weights[0].weight: must be a whole number from 1 to 1000000, got 0",
            ),
            (
                "fair_share: { user_weights: [{ user: ana, weight: 2 }, { user: ana, weight: 3 }] }\n",
                "fair_share.user_weights[1].user: \"ana\" is named twice",
            ),
            ("fair_share: { user_weights: [{ user: \" \", weight: 2 }] }\n", "fair_share.user_weights[0].user"),
            ("fair_share: { user_weights: [{ name: ana, weight: 2 }] }\n", "fair_share.user_weights[0].name: "),
            ("placement: tightest\n", "placement: unknown placement policy \"tightest\""),
            ("gpu_resourse: x\n", "gpu_resourse"),
            ("webhook:\n  listen: 0.0.0.0:9443\n  cert_file: /c.pem\n", "webhook.cert_file and webhook.key_file"),
        ] {
            let err = Settings::parse(text).unwrap_err();
            assert!(err.contains(want), "{text}: {err}");
        }
    }
}
