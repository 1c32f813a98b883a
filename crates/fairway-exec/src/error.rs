//! The crate's one error type.

use std::path::PathBuf;

/// Everything that can go wrong in the executor layer. Each variant names its cause (a path, a
/// flag value, an OS error) so the server can log it or show it to a user as is.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    /// A `--gpus` value that is not `N` or `NODESxGPUS` within the limits.
    #[error("invalid --gpus value {value:?}: {reason}; expected N or NODESxGPUS, e.g. 8 or 16x8")]
    InvalidGpuFlag {
        /// The flag value as given.
        value: String,
        /// What is wrong with it.
        reason: String,
    },
    /// NVML could not be loaded or initialised (no driver, no library, or built without the
    /// `nvml` feature).
    #[error("NVML is unavailable ({message}); pass --gpus N (or NODESxGPUS) to run with simulated GPUs")]
    NvmlUnavailable {
        /// The loader's or NVML's message.
        message: String,
    },
    /// NVML initialised but a device query failed, or it found no devices.
    #[error("NVML device query failed: {message}")]
    Nvml {
        /// What failed.
        message: String,
    },
    /// A [`LaunchSpec`](crate::LaunchSpec) or argument the caller built is unusable.
    #[error("invalid launch spec: {0}")]
    InvalidSpec(String),
    /// A file-system or process operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done, with the path.
        context: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// Starting the shim process itself failed (the job's own spawn errors are reported by the
    /// shim in `exit.json` instead).
    #[error("cannot start the shim {exe:?}: {source}")]
    SpawnShim {
        /// The shim executable.
        exe: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A JSON file (`launch.json`, `exit.json`, …) could not be read as JSON of the right shape.
    #[error("bad JSON in {path:?}: {source}")]
    Json {
        /// The file.
        path: PathBuf,
        /// The parser's error.
        #[source]
        source: serde_json::Error,
    },
    /// Signalling a process group failed for a reason other than "already gone".
    #[error("cannot signal process group {pgid}: {source}")]
    Signal {
        /// The process group.
        pgid: u32,
        /// The OS error.
        #[source]
        source: nix::errno::Errno,
    },
    /// A container runtime command failed.
    #[error("{command} failed: {detail}")]
    Container {
        /// The command, e.g. `docker pull nvcr.io/nvidia/pytorch:24.01-py3`.
        command: String,
        /// Its exit status and the end of its stderr, or the OS error.
        detail: String,
    },
}

impl ExecError {
    /// A short, stable label for metrics (`exec_errors_total{kind="…"}`).
    pub fn metric_label(&self) -> &'static str {
        match self {
            ExecError::InvalidGpuFlag { .. } => "invalid_gpu_flag",
            ExecError::NvmlUnavailable { .. } => "nvml_unavailable",
            ExecError::Nvml { .. } => "nvml",
            ExecError::InvalidSpec(_) => "invalid_spec",
            ExecError::Io { .. } => "io",
            ExecError::SpawnShim { .. } => "spawn_shim",
            ExecError::Json { .. } => "json",
            ExecError::Signal { .. } => "signal",
            ExecError::Container { .. } => "container",
        }
    }

    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        ExecError::Io { context: context.into(), source }
    }
}
