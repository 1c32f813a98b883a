//! Workload sources: trace loaders, the synthetic generator and workload transforms.
//!
//! Every source produces the same trace-independent record, [`TraceJob`], which is what the
//! simulator consumes. All loaders and the generator return jobs sorted by `(submit_ms, name)`
//! with the first job submitted at `0` ms, so ids handed out in that order are stable.
//!
//! | source | loader | tenant (`project`) | tier |
//! |---|---|---|---|
//! | Philly (Pollux table) | [`load_philly_pollux`] | VC hash (`cluster`) | none (use [`assign_tiers`]) |
//! | Philly (Chronus artifact) | [`load_philly_chronus`] | VC hash (`user` without its `vc_` prefix) | `job_type` via [`TierMap`] |
//! | Alibaba openb pods | [`load_openb_pods`] | the constant `"openb"` | `qos` via [`TierMap`] |
//! | synthetic | [`generate`] | drawn from [`JobClass::projects`] | [`JobClass::tier`] |
//!
//! Cluster descriptions come from [`load_openb_nodes`] and [`load_philly_vc_quotas`].
//!
//! Scenario files embed a [`WorkloadSpec`] (a [`TraceSource`] plus a list of [`Transform`]s);
//! [`WorkloadSpec::load`] resolves relative paths against the scenario file's folder.
//!
//! Malformed rows are errors ([`WorkloadError`] names the file, line and field), never silently
//! dropped. Rows that are skipped on purpose (documented per loader) are counted in the
//! [`LoadReport`], which always satisfies `rows_read == jobs_loaded + Σ skipped`.

mod csvutil;
mod gang;
mod openb;
mod openb_pack;
mod philly;
mod spec;
mod synthetic;
mod transform;

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

pub use gang::GangSplit;
pub use openb::{GpuShares, MissingDeletion, OpenbOptions, TraceNode, load_openb_nodes, load_openb_pods};
pub use openb_pack::{PackNodeRow, PackPodRow, load_pack_nodes, load_pack_pods};
pub use philly::{PolluxFilter, load_philly_chronus, load_philly_pollux, load_philly_vc_quotas};
pub use spec::{TierMap, TraceSource, Transform, WorkloadSpec};
pub use synthetic::{DurationDist, JobClass, MAX_SYNTHETIC_JOBS, SyntheticSpec, Weighted, generate};
pub use transform::{ImagesBy, assign_images, assign_tiers, compress_time, normalise_start, sort_jobs, take, window};

/// One job of a workload, independent of the trace it came from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceJob {
    /// Stable and unique within a workload (e.g. `"pollux-000123"`).
    pub name: String,
    /// Milliseconds from the start of the workload (the first job is at 0 after normalisation).
    pub submit_ms: u64,
    /// Run time when run alone, in milliseconds; always > 0.
    pub duration_ms: u64,
    /// Whole GPUs per replica (0 for a share of one GPU).
    pub gpus_per_replica: u32,
    /// A share of one GPU, in thousandths (1 to 999), for a one-replica job with no whole
    /// GPU; 0 otherwise.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub gpu_milli: u32,
    /// Number of replicas (a gang when > 1), ≥ 1.
    pub replicas: u32,
    /// User name; traces without users use the project.
    pub user: String,
    /// Tenant / queue (e.g. the Philly VC).
    pub project: String,
    /// Priority class name, if the trace or an assignment gives one.
    pub tier: Option<String>,
    /// Required GPU model, if any.
    pub gpu_model: Option<String>,
    /// CPU per replica in millicores; 0 if unknown.
    pub cpu_millis: u64,
    /// Memory per replica in MiB; 0 if unknown.
    pub memory_mib: u64,
    /// How often the job checkpoints, if known.
    pub checkpoint_interval_ms: Option<u64>,
    /// Its container image, if the trace or an assignment gives one (see
    /// [`assign_images`]); the simulator's pull model reads it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
}

fn is_zero(v: &u32) -> bool {
    *v == 0
}

impl TraceJob {
    /// Total GPUs of the job (`gpus_per_replica * replicas`).
    pub fn total_gpus(&self) -> u64 {
        u64::from(self.gpus_per_replica) * u64::from(self.replicas)
    }
}

/// What a load did besides returning jobs.
///
/// `rows_read == jobs_loaded + Σ skipped` holds for every loader and for
/// [`WorkloadSpec::load`] (jobs a transform drops are counted as skipped).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoadReport {
    /// Data rows read (header excluded); for the generator, the number of jobs generated.
    pub rows_read: u64,
    /// Jobs returned.
    pub jobs_loaded: u64,
    /// Rows skipped on purpose, by reason (see [`reason`]), in the order first seen.
    pub skipped: Vec<(String, u64)>,
    /// Rows loaded but changed on the way (e.g. fractional GPUs rounded up, gangs split), by
    /// reason (see [`reason`]).
    pub adjusted: Vec<(String, u64)>,
}

impl LoadReport {
    /// The number of rows skipped for `reason` (0 if none).
    pub fn skipped_count(&self, reason: &str) -> u64 {
        count_of(&self.skipped, reason)
    }

    /// The number of rows adjusted for `reason` (0 if none).
    pub fn adjusted_count(&self, reason: &str) -> u64 {
        count_of(&self.adjusted, reason)
    }

    /// All skipped rows.
    pub fn total_skipped(&self) -> u64 {
        self.skipped.iter().map(|(_, n)| n).sum()
    }

    pub(crate) fn skip(&mut self, reason: &str, n: u64) {
        bump(&mut self.skipped, reason, n);
    }

    pub(crate) fn adjust(&mut self, reason: &str, n: u64) {
        bump(&mut self.adjusted, reason, n);
    }
}

fn count_of(list: &[(String, u64)], reason: &str) -> u64 {
    list.iter().find(|(r, _)| r == reason).map_or(0, |(_, n)| *n)
}

fn bump(list: &mut Vec<(String, u64)>, reason: &str, n: u64) {
    if n == 0 {
        return;
    }
    match list.iter_mut().find(|(r, _)| r == reason) {
        Some((_, count)) => *count += n,
        None => list.push((reason.to_owned(), n)),
    }
}

/// The reasons used in [`LoadReport::skipped`] and [`LoadReport::adjusted`].
pub mod reason {
    /// Skipped: the row asks for no GPU (Chronus `num_gpu = 0`, openb CPU-only pods).
    pub const ZERO_GPU: &str = "zero GPUs requested";
    /// Skipped: the submit time is outside the loader's `from`/`to` window.
    pub const OUTSIDE_WINDOW: &str = "submitted outside the time window";
    /// Skipped: the job comes after the first `max_jobs` jobs (in submit order).
    pub const BEYOND_MAX_JOBS: &str = "beyond max_jobs";
    /// Skipped (openb, [`MissingDeletion::Skip`](super::MissingDeletion::Skip)): empty `deletion_time`.
    pub const NO_DELETION_TIME: &str = "no deletion time";
    /// Skipped (openb): `deletion_time <= creation_time`, so the pod has no run time.
    pub const NON_POSITIVE_LIFETIME: &str = "deletion time not after creation time";
    /// Skipped (openb, only with `skip_unscheduled`): the pod was never scheduled in the trace.
    pub const NEVER_SCHEDULED: &str = "never scheduled";
    /// Skipped by a [`Transform::Window`](super::Transform::Window).
    pub const DROPPED_BY_WINDOW: &str = "dropped by window transform";
    /// Skipped by a [`Transform::Take`](super::Transform::Take).
    pub const DROPPED_BY_TAKE: &str = "dropped by take transform";
    /// Adjusted (openb): a fractional GPU request was rounded up to one whole GPU per GPU.
    pub const FRACTIONAL_GPU_ROUNDED: &str = "fractional GPU rounded up to whole";
    /// Adjusted: a job larger than one node was split into a gang ([`GangSplit`](super::GangSplit)).
    pub const GANG_SPLIT: &str = "split into a gang";
    /// Adjusted (openb, [`MissingDeletion::TraceEnd`](super::MissingDeletion::TraceEnd)):
    /// an empty `deletion_time` was replaced by the end of the trace.
    pub const DELETION_AT_TRACE_END: &str = "no deletion time, ran to trace end";
}

/// Why a workload could not be loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WorkloadError {
    /// The file could not be opened or read.
    #[error("{}: cannot read", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The CSV structure is broken (e.g. a row with the wrong number of fields).
    #[error("{}:{line}: malformed CSV", path.display())]
    Csv {
        path: PathBuf,
        /// 1-based line number (the header is line 1); 0 if unknown.
        line: u64,
        #[source]
        source: csv::Error,
    },
    /// A required column is missing from the header.
    #[error("{}: header has no column `{column}`", path.display())]
    MissingColumn { path: PathBuf, column: String },
    /// A field could not be parsed or has a value out of range.
    #[error("{}:{line}: field `{field}` = {value:?}: {reason}", path.display())]
    Field {
        path: PathBuf,
        /// 1-based line number (the header is line 1).
        line: u64,
        field: String,
        value: String,
        reason: String,
    },
    /// Two rows give the same job or node name.
    #[error("{}:{line}: duplicate name `{name}` (first seen on line {first_line})", path.display())]
    DuplicateName { path: PathBuf, line: u64, name: String, first_line: u64 },
    /// A spec (generator, transform, tier map, gang split) is invalid.
    #[error("invalid workload spec: {0}")]
    Spec(String),
}
