//! The seeded synthetic workload generator.

use std::collections::HashSet;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Exp, LogNormal};
use serde::{Deserialize, Serialize};

use super::transform::{cumulative_weights, pick, sort_in_place};
use super::{TraceJob, WorkloadError};

/// The most jobs one [`generate`] call may produce (a guard against a huge `horizon_ms`).
pub const MAX_SYNTHETIC_JOBS: u64 = 20_000_000;

/// The 90th percentile of the standard normal distribution.
const Z90: f64 = 1.281_551_565_544_600_4;

/// A synthetic workload: a mix of job classes arriving as a Poisson process.
///
/// Each class arrives as its own Poisson stream: a class with `mean_interarrival_ms` has rate
/// `1 / mean_interarrival_ms`; the classes without one share the spec-level
/// `mean_interarrival_ms` in proportion to their `weight`. The superposition is generated as one
/// stream (exponential gaps with the total rate; each arrival's class drawn by rate share).
/// The first job arrives at 0.
///
/// Generation stops after `jobs` jobs or at the first arrival at or after `horizon_ms`,
/// whichever comes first; at least one of the two must be set.
///
/// ```yaml
/// jobs: 10000
/// mean_interarrival_ms: 30000
/// classes:
///   - name_prefix: train
///     tier: low
///     weight: 3
///     duration: { kind: log-normal, median_ms: 1800000, p90_ms: 14400000, max_ms: 604800000 }
///     gpus: [{ value: 1, weight: 8 }, { value: 8, weight: 1 }]
///     replicas: [{ value: 1 }, { value: 4, weight: 0.1 }]
///     projects: [{ value: team-a, weight: 2 }, { value: team-b }]
///     checkpoint_interval_ms: 600000
///   - name_prefix: infer
///     tier: high
///     weight: 1
///     duration: { kind: fixed, ms: 600000 }
///     gpus: [{ value: 1 }]
///     projects: [{ value: serving }]
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SyntheticSpec {
    /// Number of jobs to generate.
    #[serde(default)]
    pub jobs: Option<u64>,
    /// Stop at the first arrival at or after this time.
    #[serde(default)]
    pub horizon_ms: Option<u64>,
    /// Mean inter-arrival time of the stream shared by the classes that give a `weight`.
    #[serde(default)]
    pub mean_interarrival_ms: Option<f64>,
    pub classes: Vec<JobClass>,
}

/// One class of synthetic jobs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobClass {
    /// Jobs are named `{name_prefix}-NNNNNN` (a per-class counter); prefixes must be unique.
    pub name_prefix: String,
    #[serde(default)]
    pub tier: Option<String>,
    /// Share of the spec-level arrival stream (default 1 when `mean_interarrival_ms` is unset).
    #[serde(default)]
    pub weight: Option<f64>,
    /// This class's own Poisson stream (exclusive with `weight`).
    #[serde(default)]
    pub mean_interarrival_ms: Option<f64>,
    pub duration: DurationDist,
    /// GPUs per replica, with weights; values ≥ 1.
    pub gpus: Vec<Weighted<u32>>,
    /// Replicas, with weights; values ≥ 1. Default: always 1.
    #[serde(default = "one_replica")]
    pub replicas: Vec<Weighted<u32>>,
    /// Projects (tenants), with weights; each job's `user` is its project.
    pub projects: Vec<Weighted<String>>,
    #[serde(default)]
    pub gpu_model: Option<String>,
    /// CPU per replica (millicores); 0 if unknown.
    #[serde(default)]
    pub cpu_millis: u64,
    /// Memory per replica (MiB); 0 if unknown.
    #[serde(default)]
    pub memory_mib: u64,
    #[serde(default)]
    pub checkpoint_interval_ms: Option<u64>,
}

fn one_replica() -> Vec<Weighted<u32>> {
    vec![Weighted { value: 1, weight: 1.0 }]
}

/// A value with a relative weight (default 1).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Weighted<T> {
    pub value: T,
    #[serde(default = "unit_weight")]
    pub weight: f64,
}

fn unit_weight() -> f64 {
    1.0
}

impl<T> Weighted<T> {
    pub fn new(value: T, weight: f64) -> Self {
        Self { value, weight }
    }
}

/// A run-time distribution; samples are rounded to whole ms and clamped to `[min_ms, max_ms]`
/// (`min_ms` defaults to 1, so run times are always > 0).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum DurationDist {
    /// Always `ms` (> 0).
    Fixed { ms: u64 },
    /// Log-normal with the given median and 90th percentile (`p90_ms ≥ median_ms > 0`):
    /// `μ = ln(median)`, `σ = ln(p90 / median) / 1.2816`.
    LogNormal {
        median_ms: f64,
        p90_ms: f64,
        #[serde(default)]
        min_ms: Option<u64>,
        #[serde(default)]
        max_ms: Option<u64>,
    },
}

enum DurationSampler {
    Fixed(u64),
    LogNormal { dist: LogNormal<f64>, min: u64, max: u64 },
}

impl DurationSampler {
    fn new(d: &DurationDist, class: &str) -> Result<Self, WorkloadError> {
        let bad = |msg: String| WorkloadError::Spec(format!("class `{class}`: duration: {msg}"));
        match *d {
            DurationDist::Fixed { ms } => {
                if ms == 0 {
                    return Err(bad("fixed ms must be > 0".into()));
                }
                Ok(Self::Fixed(ms))
            }
            DurationDist::LogNormal { median_ms, p90_ms, min_ms, max_ms } => {
                if !(median_ms.is_finite() && median_ms > 0.0) {
                    return Err(bad(format!("median_ms must be finite and > 0, got {median_ms}")));
                }
                if !(p90_ms.is_finite() && p90_ms >= median_ms) {
                    return Err(bad(format!("p90_ms must be finite and ≥ median_ms, got {p90_ms}")));
                }
                let min = min_ms.unwrap_or(1).max(1);
                let max = max_ms.unwrap_or(u64::MAX);
                if min > max {
                    return Err(bad(format!("min_ms {min} > max_ms {max}")));
                }
                let sigma = (p90_ms / median_ms).ln() / Z90;
                let dist = LogNormal::new(median_ms.ln(), sigma).map_err(|e| bad(format!("log-normal: {e}")))?;
                Ok(Self::LogNormal { dist, min, max })
            }
        }
    }

    fn sample(&self, rng: &mut ChaCha8Rng) -> u64 {
        match self {
            Self::Fixed(ms) => *ms,
            Self::LogNormal { dist, min, max } => {
                let x = dist.sample(rng).round();
                // `as` saturates: huge samples become u64::MAX before the clamp.
                (x as u64).clamp(*min, *max)
            }
        }
    }
}

struct Choices<T> {
    values: Vec<T>,
    cumulative: Vec<f64>,
}

impl<T: Clone> Choices<T> {
    fn new(items: &[Weighted<T>], what: &str, label: impl Fn(&T) -> String) -> Result<Self, WorkloadError> {
        if items.is_empty() {
            return Err(WorkloadError::Spec(format!("{what}: needs at least one choice")));
        }
        let labels: Vec<String> = items.iter().map(|w| label(&w.value)).collect();
        let cumulative = cumulative_weights(labels.iter().zip(items).map(|(l, w)| (l.as_str(), w.weight)), what)?;
        Ok(Self { values: items.iter().map(|w| w.value.clone()).collect(), cumulative })
    }

    fn sample(&self, rng: &mut ChaCha8Rng) -> &T {
        &self.values[pick(&self.cumulative, rng.random::<f64>())]
    }
}

struct ClassSampler<'a> {
    class: &'a JobClass,
    duration: DurationSampler,
    gpus: Choices<u32>,
    replicas: Choices<u32>,
    projects: Choices<String>,
    count: u64,
}

impl SyntheticSpec {
    /// Checks the spec without generating anything.
    pub fn validate(&self) -> Result<(), WorkloadError> {
        self.prepare().map(|_| ())
    }

    fn prepare(&self) -> Result<(Vec<ClassSampler<'_>>, Vec<f64>, f64), WorkloadError> {
        if self.jobs.is_none() && self.horizon_ms.is_none() {
            return Err(WorkloadError::Spec("synthetic: set `jobs`, `horizon_ms` or both".into()));
        }
        if self.classes.is_empty() {
            return Err(WorkloadError::Spec("synthetic: needs at least one class".into()));
        }
        let positive = |v: Option<f64>, what: &str| -> Result<(), WorkloadError> {
            match v {
                Some(m) if !(m.is_finite() && m > 0.0) => {
                    Err(WorkloadError::Spec(format!("{what}: mean_interarrival_ms must be finite and > 0, got {m}")))
                }
                _ => Ok(()),
            }
        };
        positive(self.mean_interarrival_ms, "synthetic")?;
        let mut prefixes = HashSet::new();
        let mut samplers = Vec::with_capacity(self.classes.len());
        let mut shared_weight = 0.0;
        let mut shared_classes = 0;
        for class in &self.classes {
            let name = class.name_prefix.as_str();
            if name.is_empty() {
                return Err(WorkloadError::Spec("synthetic: empty name_prefix".into()));
            }
            if !prefixes.insert(name) {
                return Err(WorkloadError::Spec(format!("synthetic: duplicate name_prefix `{name}`")));
            }
            positive(class.mean_interarrival_ms, &format!("class `{name}`"))?;
            match (class.weight, class.mean_interarrival_ms) {
                (Some(_), Some(_)) => {
                    return Err(WorkloadError::Spec(format!(
                        "class `{name}`: give `weight` or `mean_interarrival_ms`, not both"
                    )));
                }
                (w, None) => {
                    let w = w.unwrap_or(1.0);
                    if !(w.is_finite() && w >= 0.0) {
                        return Err(WorkloadError::Spec(format!(
                            "class `{name}`: weight must be finite and ≥ 0, got {w}"
                        )));
                    }
                    shared_weight += w;
                    shared_classes += 1;
                }
                (None, Some(_)) => {}
            }
            for (what, items) in [("gpus", &class.gpus), ("replicas", &class.replicas)] {
                if items.iter().any(|w| w.value == 0) {
                    return Err(WorkloadError::Spec(format!("class `{name}`: {what} values must be ≥ 1")));
                }
            }
            if class.checkpoint_interval_ms == Some(0) {
                return Err(WorkloadError::Spec(format!("class `{name}`: checkpoint_interval_ms must be > 0")));
            }
            samplers.push(ClassSampler {
                class,
                duration: DurationSampler::new(&class.duration, name)?,
                gpus: Choices::new(&class.gpus, &format!("class `{name}` gpus"), u32::to_string)?,
                replicas: Choices::new(&class.replicas, &format!("class `{name}` replicas"), u32::to_string)?,
                projects: Choices::new(&class.projects, &format!("class `{name}` project"), String::clone)?,
                count: 0,
            });
        }
        let shared_mean = match (shared_classes, self.mean_interarrival_ms) {
            (0, None) => 0.0,
            (0, Some(_)) => {
                return Err(WorkloadError::Spec(
                    "synthetic: `mean_interarrival_ms` is set but every class has its own".into(),
                ));
            }
            (_, None) => {
                return Err(WorkloadError::Spec(
                    "synthetic: classes without their own `mean_interarrival_ms` share the \
                     spec-level `mean_interarrival_ms`, which is not set"
                        .into(),
                ));
            }
            (_, Some(m)) => m,
        };
        if shared_classes > 0 && shared_weight <= 0.0 {
            return Err(WorkloadError::Spec("synthetic: class weights must include a positive weight".into()));
        }
        let rates: Vec<f64> = self
            .classes
            .iter()
            .map(|c| match c.mean_interarrival_ms {
                Some(m) => 1.0 / m,
                None => c.weight.unwrap_or(1.0) / shared_weight / shared_mean,
            })
            .collect();
        let total: f64 = rates.iter().sum();
        let cumulative =
            cumulative_weights(self.classes.iter().zip(&rates).map(|(c, r)| (c.name_prefix.as_str(), *r)), "class")?;
        Ok((samplers, cumulative, total))
    }
}

/// Generates the workload described by `spec`, deterministically from `seed`.
///
/// The random stream is `ChaCha8Rng::seed_from_u64(seed)`; per arrival it draws, in order:
/// class, run time, GPUs, replicas, project, next gap. The same spec and seed give the same jobs
/// on every run and platform (up to last-bit differences of the platform's `ln`/`exp`, which
/// would have to land exactly on a rounding boundary to change a millisecond value). The stream
/// depends on the `rand_distr` version (value-stable within a minor version).
///
/// Returns the jobs sorted by `(submit_ms, name)`, the first at 0 ms.
pub fn generate(spec: &SyntheticSpec, seed: u64) -> Result<Vec<TraceJob>, WorkloadError> {
    let (mut samplers, class_cumulative, total_rate) = spec.prepare()?;
    let limit = spec.jobs.unwrap_or(u64::MAX);
    if spec.jobs.is_some_and(|n| n > MAX_SYNTHETIC_JOBS) {
        return Err(WorkloadError::Spec(format!("synthetic: at most {MAX_SYNTHETIC_JOBS} jobs")));
    }
    let gaps = Exp::new(total_rate).map_err(|e| WorkloadError::Spec(format!("synthetic: arrival rate: {e}")))?;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut jobs = Vec::new();
    let mut t = 0.0_f64;
    while (jobs.len() as u64) < limit {
        let submit_ms = t.round() as u64;
        if spec.horizon_ms.is_some_and(|h| submit_ms >= h) {
            break;
        }
        if jobs.len() as u64 >= MAX_SYNTHETIC_JOBS {
            return Err(WorkloadError::Spec(format!(
                "synthetic: `horizon_ms` would give more than {MAX_SYNTHETIC_JOBS} jobs"
            )));
        }
        let sampler = &mut samplers[pick(&class_cumulative, rng.random::<f64>())];
        let duration_ms = sampler.duration.sample(&mut rng);
        let gpus_per_replica = *sampler.gpus.sample(&mut rng);
        let replicas = *sampler.replicas.sample(&mut rng);
        let project = sampler.projects.sample(&mut rng).clone();
        let class = sampler.class;
        jobs.push(TraceJob {
            name: format!("{}-{:06}", class.name_prefix, sampler.count),
            submit_ms,
            duration_ms,
            gpus_per_replica,
            gpu_milli: 0,
            replicas,
            user: project.clone(),
            project,
            tier: class.tier.clone(),
            gpu_model: class.gpu_model.clone(),
            cpu_millis: class.cpu_millis,
            memory_mib: class.memory_mib,
            checkpoint_interval_ms: class.checkpoint_interval_ms,
            image: None,
        });
        sampler.count += 1;
        t += gaps.sample(&mut rng);
    }
    sort_in_place(&mut jobs);
    Ok(jobs)
}
