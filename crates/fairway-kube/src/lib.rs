//! # fairway-kube
//!
//! Fairway's Kubernetes driver (`fairway kube`): the same core as the standalone server and
//! the simulator, fed by the cluster's watches, its decisions carried out through the API
//! server. Kubernetes stays the engine: the stock Job controller creates and deletes pods,
//! kubelets run them; Fairway decides which workloads are admitted (unsuspended), where
//! their pods go (bound through the Binding subresource), and which give way (suspended).
//! See `docs/kubernetes.md`.
//!
//! - [`engine`]: the core and the mirror of the cluster, IO-free: watch events in, actions out.
//! - [`executor`]: the actions against the API server (idempotent writes, retries).
//! - [`controller`]: the watches, the engine task, the executor, wired together.
//! - [`workload`]: `batch/v1` Jobs and Kubeflow PaddleJobs behind one adapter.
//! - [`objects`]: what is read from nodes, pods, quotas and priority classes.
//! - [`settings`]: the config file.
//! - [`certs`]: the webhook's own certificate, kept in a Secret.
//! - [`recent_usage`]: fair sharing's memory, kept in a ConfigMap across leaders.

pub mod certs;
pub mod controller;
pub mod engine;
pub mod executor;
pub mod http;
pub mod leader;
pub mod objects;
pub mod recent_usage;
pub mod run;
pub mod settings;
pub mod webhook;
pub mod workload;

pub use controller::Controller;
pub use settings::Settings;

#[derive(Debug, thiserror::Error)]
pub enum KubeError {
    #[error("configuration: {0}")]
    Config(String),
    #[error("Kubernetes API: {0}")]
    Api(#[from] kube::Error),
    #[error("{what}: {source}")]
    Io { what: String, source: std::io::Error },
}
