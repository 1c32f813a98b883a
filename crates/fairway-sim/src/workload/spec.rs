//! Serde types for scenario files: tier maps, trace sources and transforms.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use jiff::civil;
use serde::{Deserialize, Serialize};

use super::transform::{self, derive_seed};
use super::{
    GangSplit, GpuShares, LoadReport, MissingDeletion, OpenbOptions, PolluxFilter, SyntheticSpec, TraceJob,
    WorkloadError, generate, load_openb_pods, load_philly_chronus, load_philly_pollux, reason,
};

/// Maps a trace's priority label (Chronus `job_type`, openb `qos`) to a tier name.
///
/// In a scenario file it is a plain map, e.g. `{ strict: critical, soft: normal, best: scavenger }`;
/// it replaces the default map entirely. Labels are matched exactly (case-sensitive).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct TierMap(pub BTreeMap<String, String>);

impl TierMap {
    /// Chronus `job_type`: strict→high, soft→medium, best→low.
    pub fn chronus_default() -> Self {
        Self::from_pairs([("strict", "high"), ("soft", "medium"), ("best", "low")])
    }

    /// openb `qos`: LS→high, Guaranteed→high, Burstable→medium, BE→low.
    pub fn openb_default() -> Self {
        Self::from_pairs([("LS", "high"), ("Guaranteed", "high"), ("Burstable", "medium"), ("BE", "low")])
    }

    pub fn from_pairs<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        Self(pairs.into_iter().map(|(k, v)| (k.to_owned(), v.to_owned())).collect())
    }

    /// The tier for `label`, if the map has one.
    pub fn tier_for(&self, label: &str) -> Option<&str> {
        self.0.get(label).map(String::as_str)
    }

    /// The labels, for error messages: `` `a`, `b` ``.
    pub(crate) fn labels(&self) -> String {
        if self.0.is_empty() {
            return "no labels".into();
        }
        self.0.keys().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", ")
    }
}

fn chronus_tiers() -> TierMap {
    TierMap::chronus_default()
}

fn openb_tiers() -> TierMap {
    TierMap::openb_default()
}

/// Where a workload's jobs come from. Relative paths resolve against the `base_dir` given to
/// [`TraceSource::load`] (the scenario file's folder).
///
/// ```yaml
/// kind: philly-pollux
/// path: ../traces/philly-pollux/philly.csv
/// from: 2017-10-03 00:00:00
/// to: 2017-12-01 00:00:00
/// gang_split: { gpus_per_node: 8 }
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum TraceSource {
    /// [`load_philly_pollux`].
    PhillyPollux {
        path: PathBuf,
        /// Inclusive start of the submit-time window (wall clock, e.g. `2017-10-03 00:00:00`).
        #[serde(default)]
        from: Option<civil::DateTime>,
        /// Exclusive end of the submit-time window.
        #[serde(default)]
        to: Option<civil::DateTime>,
        #[serde(default)]
        max_jobs: Option<usize>,
        #[serde(default)]
        gang_split: GangSplit,
    },
    /// [`load_philly_chronus`].
    PhillyChronus {
        path: PathBuf,
        #[serde(default = "chronus_tiers")]
        tiers: TierMap,
        #[serde(default)]
        gang_split: GangSplit,
        #[serde(default)]
        max_jobs: Option<usize>,
    },
    /// [`load_openb_pods`].
    OpenbPods {
        path: PathBuf,
        #[serde(default = "openb_tiers")]
        qos_tiers: TierMap,
        #[serde(default)]
        missing_deletion: MissingDeletion,
        #[serde(default)]
        skip_unscheduled: bool,
        /// `share` (the default) or `round-up` (see [`GpuShares`]).
        #[serde(default)]
        gpu_shares: GpuShares,
        #[serde(default)]
        max_jobs: Option<usize>,
    },
    /// [`generate`], with the seed given to [`TraceSource::load`].
    Synthetic(SyntheticSpec),
}

impl TraceSource {
    /// The trace file, if the source reads one.
    pub fn path(&self) -> Option<&Path> {
        match self {
            Self::PhillyPollux { path, .. } | Self::PhillyChronus { path, .. } | Self::OpenbPods { path, .. } => {
                Some(path)
            }
            Self::Synthetic(_) => None,
        }
    }

    /// Replaces the trace file (e.g. a command-line override). Returns `false`, changing
    /// nothing, for a synthetic source.
    pub fn set_path(&mut self, new_path: PathBuf) -> bool {
        match self {
            Self::PhillyPollux { path, .. } | Self::PhillyChronus { path, .. } | Self::OpenbPods { path, .. } => {
                *path = new_path;
                true
            }
            Self::Synthetic(_) => false,
        }
    }

    /// Loads or generates the jobs. `seed` is only used by [`TraceSource::Synthetic`]
    /// (`generate(spec, seed)`); its report has `rows_read = jobs_loaded` = jobs generated.
    pub fn load(&self, base_dir: &Path, seed: u64) -> Result<(Vec<TraceJob>, LoadReport), WorkloadError> {
        let resolve = |p: &Path| {
            if p.is_absolute() { p.to_owned() } else { base_dir.join(p) }
        };
        let (jobs, mut report, max_jobs) = match self {
            Self::PhillyPollux { path, from, to, max_jobs, gang_split } => {
                let filter = PolluxFilter { from: *from, to: *to, max_jobs: *max_jobs };
                let (jobs, report) = load_philly_pollux(resolve(path), gang_split, &filter)?;
                (jobs, report, None)
            }
            Self::PhillyChronus { path, tiers, gang_split, max_jobs } => {
                let (jobs, report) = load_philly_chronus(resolve(path), tiers, gang_split)?;
                (jobs, report, *max_jobs)
            }
            Self::OpenbPods { path, qos_tiers, missing_deletion, skip_unscheduled, gpu_shares, max_jobs } => {
                let options = OpenbOptions {
                    qos_tiers: qos_tiers.clone(),
                    missing_deletion: *missing_deletion,
                    skip_unscheduled: *skip_unscheduled,
                    gpu_shares: *gpu_shares,
                };
                let (jobs, report) = load_openb_pods(resolve(path), &options)?;
                (jobs, report, *max_jobs)
            }
            Self::Synthetic(spec) => {
                let jobs = generate(spec, seed)?;
                let n = jobs.len() as u64;
                let report = LoadReport { rows_read: n, jobs_loaded: n, ..LoadReport::default() };
                (jobs, report, None)
            }
        };
        let jobs = match max_jobs {
            Some(max) if jobs.len() > max => {
                report.skip(reason::BEYOND_MAX_JOBS, (jobs.len() - max) as u64);
                transform::take(jobs, max)
            }
            _ => jobs,
        };
        report.jobs_loaded = jobs.len() as u64;
        Ok((jobs, report))
    }
}

/// A transform applied after loading (see the functions of the same names).
///
/// ```yaml
/// - { op: window, from_ms: 0, to_ms: 86400000 }
/// - { op: compress-time, factor: 4 }
/// - { op: assign-tiers, shares: { high: 0.2, medium: 0.3, low: 0.5 } }
/// - { op: assign-images, images: 16, zipf_exponent: 1.0, by: project }
/// - { op: take, jobs: 5000 }
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Transform {
    /// [`compress_time`](super::compress_time); `factor` must be finite and > 0.
    CompressTime { factor: f64 },
    /// [`window`](super::window): keep `from_ms ≤ submit < to_ms` (defaults 0 and unbounded).
    Window {
        #[serde(default)]
        from_ms: u64,
        #[serde(default)]
        to_ms: Option<u64>,
    },
    /// [`take`](super::take): keep the first `jobs` jobs.
    Take { jobs: usize },
    /// [`assign_tiers`](super::assign_tiers) with shares in tier-name order. Without `seed`, the
    /// seed is derived from the load seed and the transform's position in the list.
    AssignTiers {
        shares: BTreeMap<String, f64>,
        #[serde(default)]
        overwrite: bool,
        #[serde(default)]
        seed: Option<u64>,
    },
    /// [`assign_images`](super::assign_images): `images` distinct images by Zipf's law
    /// (`zipf_exponent`, default 1), drawn per job, project or user (`by`, default job).
    /// Without `seed`, as for `assign-tiers`.
    AssignImages {
        images: u32,
        #[serde(default = "zipf_default")]
        zipf_exponent: f64,
        #[serde(default)]
        by: super::ImagesBy,
        #[serde(default)]
        overwrite: bool,
        #[serde(default)]
        seed: Option<u64>,
    },
}

fn zipf_default() -> f64 {
    1.0
}

/// A trace source plus transforms: what a scenario file embeds.
///
/// ```yaml
/// source: { kind: philly-chronus, path: traces/MIX1.csv }
/// transforms:
///   - { op: compress-time, factor: 2 }
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkloadSpec {
    pub source: TraceSource,
    #[serde(default)]
    pub transforms: Vec<Transform>,
}

impl WorkloadSpec {
    /// Loads the source, applies the transforms in order, then shifts the first job to 0 ms.
    /// Jobs a transform drops are counted in the report's `skipped`.
    pub fn load(&self, base_dir: &Path, seed: u64) -> Result<(Vec<TraceJob>, LoadReport), WorkloadError> {
        let (mut jobs, mut report) = self.source.load(base_dir, seed)?;
        for (i, t) in self.transforms.iter().enumerate() {
            let before = jobs.len() as u64;
            jobs = match t {
                Transform::CompressTime { factor } => {
                    if !(factor.is_finite() && *factor > 0.0) {
                        return Err(WorkloadError::Spec(format!(
                            "compress-time: factor must be finite and > 0, got {factor}"
                        )));
                    }
                    transform::compress_time(jobs, *factor)
                }
                Transform::Window { from_ms, to_ms } => {
                    let kept = transform::window(jobs, *from_ms, to_ms.unwrap_or(u64::MAX));
                    report.skip(reason::DROPPED_BY_WINDOW, before - kept.len() as u64);
                    kept
                }
                Transform::Take { jobs: n } => {
                    let kept = transform::take(jobs, *n);
                    report.skip(reason::DROPPED_BY_TAKE, before - kept.len() as u64);
                    kept
                }
                Transform::AssignTiers { shares, overwrite, seed: own_seed } => {
                    let shares: Vec<(String, f64)> = shares.iter().map(|(k, v)| (k.clone(), *v)).collect();
                    let s = own_seed.unwrap_or_else(|| derive_seed(seed, i as u64 + 1));
                    transform::assign_tiers(jobs, &shares, s, *overwrite)?
                }
                Transform::AssignImages { images, zipf_exponent, by, overwrite, seed: own_seed } => {
                    let s = own_seed.unwrap_or_else(|| derive_seed(seed, i as u64 + 1));
                    transform::assign_images(jobs, *images, *zipf_exponent, *by, s, *overwrite)?
                }
            };
        }
        let jobs = transform::normalise_start(jobs);
        report.jobs_loaded = jobs.len() as u64;
        Ok((jobs, report))
    }
}
