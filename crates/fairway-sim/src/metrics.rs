//! Per-job records of a simulated run and the summary statistics computed from them.
//!
//! The simulator engine fills a [`RunResult`] per policy; [`summarize`] turns it into a
//! [`PolicySummary`], and a [`SimReport`] bundles the summaries of all policies run on
//! one workload. The serialised form of [`SimReport`] is the `--output json` document,
//! specified in `docs/sim-output.md`.
//!
//! Conventions (see the document for the full definitions):
//! * percentiles use the nearest-rank method on the sorted values;
//! * every `f64` is rounded to [`DECIMALS`] decimals when serialised, so the JSON output
//!   is byte-stable across platforms; the in-memory values keep full precision;
//! * statistics over an empty set (and ratios with a zero denominator) are `None`, which
//!   serialises as `null`; sums and counts over an empty set are `0`. `NaN` is never emitted.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::ser::SerializeStruct;
use serde::{Serialize, Serializer};

/// Version of the JSON document produced by serialising a [`SimReport`]. Bumped on every
/// breaking change (a field removed, renamed, retyped or given a new meaning).
pub const SCHEMA_VERSION: u32 = 2;

/// Number of decimals every floating-point figure is rounded to when serialised.
pub const DECIMALS: u32 = 3;

const MS_PER_SECOND: f64 = 1_000.0;
const MS_PER_HOUR: f64 = 3_600_000.0;

/// One job's life in one simulated run.
#[derive(Clone, Debug, PartialEq)]
pub struct JobRecord {
    pub name: Arc<str>,
    /// Priority class name ("high", "low", ...).
    pub tier: Arc<str>,
    /// Project the job belongs to.
    pub tenant: Arc<str>,
    /// GPUs of the whole gang in thousandths (a share of one GPU counts its thousandths).
    pub gpu_milli: u64,
    pub submit_ms: u64,
    /// `None`: never started before the end.
    pub first_start_ms: Option<u64>,
    /// `None`: not finished by the end (or cancelled).
    pub finish_ms: Option<u64>,
    /// Run time when run alone (trace duration).
    pub work_ms: u64,
    pub preemptions: u32,
    /// GPU-ms wasted by preemption: work lost since the last checkpoint + grace period
    /// held + every restart overhead (the final run's too), × GPUs.
    pub lost_gpu_ms: u64,
    /// Every pending interval: the first wait and each re-wait after a preemption, up to
    /// the end of the run for a job still waiting then.
    pub queued_ms: u64,
    /// The start-time estimate it got when submitted.
    pub eta_at_submit: SubmitEta,
    /// Each start's wait for its image to be pulled, in start order (empty without the
    /// image model).
    pub image_waits_ms: Vec<u64>,
    /// GPU-ms held while waiting for images (not part of `lost_gpu_ms`).
    pub image_wait_gpu_ms: u64,
}

/// A job's start-time estimate at submit, as the simulator measured it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SubmitEta {
    /// The run did not measure estimates.
    #[default]
    NotMeasured,
    /// The forecast gave no time (not placeable, or beyond its limits).
    Unknown,
    /// Expected to start then (a job started by the cycle of its submit: its start).
    At(u64),
}

/// GPUs allocated from `t_ms` until the next sample (a step function, sorted by `t_ms`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct UtilSample {
    pub t_ms: u64,
    /// GPUs allocated from then on, in thousandths.
    pub gpu_milli_allocated: u64,
}

/// Everything one simulated run of one policy produced.
#[derive(Clone, Debug, PartialEq)]
pub struct RunResult {
    pub policy: String,
    /// How one-replica jobs were placed: a policy of `docs/placement.md`, or `core` (the
    /// core's own scoring).
    pub placement: String,
    pub capacity_gpus: u32,
    /// In job id order.
    pub records: Vec<JobRecord>,
    /// Allocation step function; the last sample lasts until `end_ms`.
    pub util: Vec<UtilSample>,
    pub events_processed: u64,
    pub cycles: u64,
    /// Simulated time at the end.
    pub end_ms: u64,
    /// What the core counted (cycles, starts, jobs considered, victim searches...): how
    /// much work the run asked of the scheduler, for benchmarks.
    pub core_counters: fairway_core::Counters,
}

impl RunResult {
    /// A 64-bit FNV-1a digest of what the run decided: every job's first start, finish,
    /// preemptions and lost GPU time, the allocation step function, the event and cycle
    /// counts and the end time. Two builds that make the same decisions on the same
    /// scenario give the same digest; `fairway bench sim` prints it so that a change meant
    /// to be faster, not different, can be checked on a whole trace.
    pub fn decisions_digest(&self) -> u64 {
        let mut digest = Fnv1a::default();
        for r in &self.records {
            digest.u64(r.first_start_ms.map_or(u64::MAX, |t| t));
            digest.u64(r.finish_ms.map_or(u64::MAX, |t| t));
            digest.u64(u64::from(r.preemptions));
            digest.u64(r.lost_gpu_ms);
        }
        for s in &self.util {
            digest.u64(s.t_ms);
            // Whole GPUs where the allocation is whole, so that the digest of a run without
            // shares is what it was when the simulator counted whole GPUs only.
            let milli = s.gpu_milli_allocated;
            digest.u64(if milli.is_multiple_of(1000) { milli / 1000 } else { milli | 1 << 63 });
        }
        digest.u64(self.events_processed);
        digest.u64(self.cycles);
        digest.u64(self.end_ms);
        digest.0
    }
}

/// FNV-1a over 64-bit words (little-endian bytes): stable across platforms and builds.
struct Fnv1a(u64);

impl Default for Fnv1a {
    fn default() -> Fnv1a {
        Fnv1a(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv1a {
    fn u64(&mut self, word: u64) {
        for byte in word.to_le_bytes() {
            self.0 ^= u64::from(byte);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
}

/// Wait time (first start − submit) over the jobs that started, in seconds.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct WaitStats {
    #[serde(serialize_with = "ser_opt")]
    pub mean: Option<f64>,
    #[serde(serialize_with = "ser_opt")]
    pub p50: Option<f64>,
    #[serde(serialize_with = "ser_opt")]
    pub p95: Option<f64>,
    #[serde(serialize_with = "ser_opt")]
    pub p99: Option<f64>,
    #[serde(serialize_with = "ser_opt")]
    pub max: Option<f64>,
}

/// Nearest-rank percentiles of a count per job.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct CountStats {
    pub p50: u32,
    pub p99: u32,
    pub max: u32,
}

/// Job completion time (finish − submit) over the jobs that finished, in seconds.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct JctStats {
    #[serde(serialize_with = "ser_opt")]
    pub mean: Option<f64>,
    #[serde(serialize_with = "ser_opt")]
    pub p50: Option<f64>,
    #[serde(serialize_with = "ser_opt")]
    pub p95: Option<f64>,
    #[serde(serialize_with = "ser_opt")]
    pub p99: Option<f64>,
}

/// Slowdown (JCT / work) over the finished jobs with non-zero work; dimensionless.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct SlowdownStats {
    #[serde(serialize_with = "ser_opt")]
    pub mean: Option<f64>,
    #[serde(serialize_with = "ser_opt")]
    pub p50: Option<f64>,
    #[serde(serialize_with = "ser_opt")]
    pub p95: Option<f64>,
}

/// p50 and p90 of a figure; `None` over an empty set.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct P50P90 {
    #[serde(serialize_with = "ser_opt")]
    pub p50: Option<f64>,
    #[serde(serialize_with = "ser_opt")]
    pub p90: Option<f64>,
}

/// How close the start-time estimates given at submit came to the actual first starts,
/// over the jobs that started (all zero and `null` when the run did not measure them).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct EtaStats {
    /// Jobs measured that started.
    pub jobs: u64,
    /// Of them, those the forecast gave no time (not placeable, or beyond its limits).
    pub without_estimate: u64,
    /// |estimate − first start| in seconds, over the jobs with an estimate.
    pub error_seconds: P50P90,
    /// Jobs with an estimate that waited at least [`ETA_WAIT_COUNTED_MS`].
    pub waited: u64,
    /// |estimate − first start| / (first start − submit), over those.
    pub error_of_wait: P50P90,
    /// Mean of estimate − first start in seconds, over the jobs with an estimate: above 0
    /// the estimates were late (the jobs started earlier than said), below 0 early.
    #[serde(serialize_with = "ser_opt")]
    pub bias_seconds_mean: Option<f64>,
}

/// Starts' waits for their images (all zero and `null` when the run has no image model).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ImageStats {
    /// Starts, first ones and restarts, of jobs with an image.
    pub starts: u64,
    /// Of them, those that waited for a pull.
    pub starts_waited: u64,
    /// Each start's wait for its image, in seconds (0 when its nodes held it).
    pub wait_seconds: WaitStats,
    /// GPU-hours held while waiting for images.
    #[serde(serialize_with = "ser_f64")]
    pub gpu_hours_waiting: f64,
}

/// The least wait for which an estimate's error is also counted against the wait: below a
/// minute, nobody reads an estimate.
pub const ETA_WAIT_COUNTED_MS: u64 = 60_000;

/// Statistics of one group of jobs (all jobs, one tier or one tenant).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct GroupSummary {
    /// Jobs submitted.
    pub jobs: u64,
    /// Jobs that started at least once.
    pub started: u64,
    /// Jobs that finished before the end.
    pub finished: u64,
    /// Jobs that never started (`jobs − started`); they are not part of `wait_seconds`.
    pub never_started: u64,
    /// Time to first start (`first start − submit`), over the jobs that started.
    pub wait_seconds: WaitStats,
    /// Total time queued: every pending interval, re-waits after preemption included, over
    /// every job (a job still waiting at the end counts until then).
    pub queued_seconds: WaitStats,
    /// Preemptions per job, over every job.
    pub preemptions_per_job: CountStats,
    pub jct_seconds: JctStats,
    pub slowdown: SlowdownStats,
    /// Preemptions summed over the group's jobs.
    pub preemptions: u64,
    /// GPU-hours wasted by preemption, summed over the group's jobs.
    #[serde(serialize_with = "ser_f64")]
    pub gpu_hours_lost: f64,
    /// Start-time estimates given at submit against the actual starts.
    pub eta: EtaStats,
    /// Starts' waits for image pulls.
    pub images: ImageStats,
}

/// Cluster-wide figures of one run.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ClusterSummary {
    pub capacity_gpus: u32,
    /// Allocated GPU-time inside the busy window / (capacity × busy window), in `[0, 1]`.
    /// `None` when the capacity or the busy window is zero.
    #[serde(serialize_with = "ser_opt")]
    pub gpu_utilization: Option<f64>,
    /// The headline: useful GPU-time (`gpu_hours_useful`, the finished jobs' own work) /
    /// (capacity × busy window). Allocated time lost to preemption or spent restarting is
    /// not useful.
    #[serde(serialize_with = "ser_opt")]
    pub gpu_utilization_useful: Option<f64>,
    /// Allocated GPU-time over the whole run (from time 0 to `end_ms`).
    #[serde(serialize_with = "ser_f64")]
    pub gpu_hours_allocated: f64,
    /// Σ gpus × work over the finished jobs.
    #[serde(serialize_with = "ser_f64")]
    pub gpu_hours_useful: f64,
    /// Σ lost GPU-time over all jobs.
    #[serde(serialize_with = "ser_f64")]
    pub gpu_hours_lost: f64,
    pub preemptions_total: u64,
    /// Of them, reclaims within a cohort (same priority; the rest gave way by priority).
    pub reclaims_total: u64,
    /// Length of the busy window (first submit to last finish, or to the end of the run
    /// while jobs remain unfinished).
    #[serde(serialize_with = "ser_f64")]
    pub makespan_seconds: f64,
    pub events_processed: u64,
    pub cycles: u64,
    /// Preemptors that started on GPUs freed elsewhere before their victims had gone
    /// (cycle step 3b).
    pub preemptors_moved: u64,
    /// Starts a cycle took back, a preemptor of the same cycle choosing them alone as its
    /// victims (preemption rule 8): not counted in `preemptions_total`.
    pub starts_taken_back: u64,
}

/// Summary of one policy's run.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct PolicySummary {
    pub policy: String,
    /// As [`RunResult::placement`].
    pub placement: String,
    pub all: GroupSummary,
    /// Keyed by tier name (sorted).
    pub tiers: BTreeMap<String, GroupSummary>,
    /// Keyed by tenant name (sorted).
    pub tenants: BTreeMap<String, GroupSummary>,
    pub cluster: ClusterSummary,
}

/// The whole `--output json` document. Serialises with a leading
/// `"schema_version": SCHEMA_VERSION` field.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SimReport {
    pub scenario: String,
    pub seed: u64,
    pub policies: Vec<PolicySummary>,
}

impl SimReport {
    /// Summarises each run, in the given order.
    pub fn from_runs(scenario: impl Into<String>, seed: u64, runs: &[RunResult]) -> Self {
        Self { scenario: scenario.into(), seed, policies: runs.iter().map(summarize).collect() }
    }

    /// The JSON document, pretty-printed, with a trailing newline.
    pub fn to_json(&self) -> String {
        let mut s = serde_json::to_string_pretty(self)
            .expect("a SimReport always serialises: string map keys, no failing fields");
        s.push('\n');
        s
    }
}

impl Serialize for SimReport {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut st = serializer.serialize_struct("SimReport", 4)?;
        st.serialize_field("schema_version", &SCHEMA_VERSION)?;
        st.serialize_field("scenario", &self.scenario)?;
        st.serialize_field("seed", &self.seed)?;
        st.serialize_field("policies", &self.policies)?;
        st.end()
    }
}

/// Rounds to [`DECIMALS`] decimals, normalising `-0.0` to `0.0`; `None` for non-finite input.
pub fn round_fixed(v: f64) -> Option<f64> {
    if !v.is_finite() {
        return None;
    }
    // An exact integer power of ten, so the scale is the same on every platform.
    let scale = 10u64.pow(DECIMALS) as f64;
    let r = (v * scale).round() / scale;
    if !r.is_finite() {
        return None;
    }
    Some(if r == 0.0 { 0.0 } else { r })
}

fn ser_f64<S: Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
    match round_fixed(*v) {
        Some(r) => s.serialize_f64(r),
        None => s.serialize_none(),
    }
}

fn ser_opt<S: Serializer>(v: &Option<f64>, s: S) -> Result<S::Ok, S::Error> {
    match v.and_then(round_fixed) {
        Some(r) => s.serialize_f64(r),
        None => s.serialize_none(),
    }
}

/// Nearest-rank percentile of ascending `sorted` values: the value at 1-based rank
/// `max(1, ceil(p / 100 × n))`. `None` when `sorted` is empty. `p` is in percent (0–100).
pub fn nearest_rank<T: Copy>(sorted: &[T], p: u32) -> Option<T> {
    if sorted.is_empty() {
        return None;
    }
    let n = sorted.len() as u64;
    let rank = (u64::from(p.min(100)) * n).div_ceil(100).max(1);
    Some(sorted[(rank - 1) as usize])
}

fn mean_ms_as_seconds(sorted_ms: &[u64]) -> Option<f64> {
    if sorted_ms.is_empty() {
        return None;
    }
    let sum: u128 = sorted_ms.iter().map(|&v| u128::from(v)).sum();
    Some(sum as f64 / sorted_ms.len() as f64 / MS_PER_SECOND)
}

/// Mean, p50, p95, p99 and max of ascending milliseconds, in seconds.
fn seconds_stats(sorted_ms: &[u64]) -> WaitStats {
    WaitStats {
        mean: mean_ms_as_seconds(sorted_ms),
        p50: ms_to_seconds(nearest_rank(sorted_ms, 50)),
        p95: ms_to_seconds(nearest_rank(sorted_ms, 95)),
        p99: ms_to_seconds(nearest_rank(sorted_ms, 99)),
        max: ms_to_seconds(sorted_ms.last().copied()),
    }
}

fn ms_to_seconds(v: Option<u64>) -> Option<f64> {
    v.map(|ms| ms as f64 / MS_PER_SECOND)
}

#[derive(Default)]
struct Acc {
    jobs: u64,
    started: u64,
    finished: u64,
    waits_ms: Vec<u64>,
    queued_ms: Vec<u64>,
    preemptions_per_job: Vec<u32>,
    jcts_ms: Vec<u64>,
    slowdowns: Vec<f64>,
    preemptions: u64,
    lost_gpu_ms: u128,
    eta_measured: u64,
    eta_unknown: u64,
    eta_errors_ms: Vec<u64>,
    eta_errors_of_wait: Vec<f64>,
    eta_bias_ms: i128,
    image_waits_ms: Vec<u64>,
    image_wait_gpu_ms: u128,
}

impl Acc {
    fn add(&mut self, r: &JobRecord) {
        self.jobs += 1;
        if let Some(start) = r.first_start_ms {
            self.started += 1;
            self.waits_ms.push(start.saturating_sub(r.submit_ms));
        }
        if let Some(finish) = r.finish_ms {
            self.finished += 1;
            let jct = finish.saturating_sub(r.submit_ms);
            self.jcts_ms.push(jct);
            if r.work_ms > 0 {
                self.slowdowns.push(jct as f64 / r.work_ms as f64);
            }
        }
        if let Some(start) = r.first_start_ms {
            self.add_eta(r.eta_at_submit, start, start.saturating_sub(r.submit_ms));
        }
        self.queued_ms.push(r.queued_ms);
        self.preemptions_per_job.push(r.preemptions);
        self.preemptions += u64::from(r.preemptions);
        self.lost_gpu_ms += u128::from(r.lost_gpu_ms);
        self.image_waits_ms.extend_from_slice(&r.image_waits_ms);
        self.image_wait_gpu_ms += u128::from(r.image_wait_gpu_ms);
    }

    fn add_eta(&mut self, eta: SubmitEta, start_ms: u64, wait_ms: u64) {
        match eta {
            SubmitEta::NotMeasured => {}
            SubmitEta::Unknown => {
                self.eta_measured += 1;
                self.eta_unknown += 1;
            }
            SubmitEta::At(eta_ms) => {
                self.eta_measured += 1;
                let error = eta_ms.abs_diff(start_ms);
                self.eta_errors_ms.push(error);
                self.eta_bias_ms += i128::from(eta_ms) - i128::from(start_ms);
                if wait_ms >= ETA_WAIT_COUNTED_MS {
                    self.eta_errors_of_wait.push(error as f64 / wait_ms as f64);
                }
            }
        }
    }

    fn eta(&mut self) -> EtaStats {
        self.eta_errors_ms.sort_unstable();
        self.eta_errors_of_wait.sort_unstable_by(f64::total_cmp);
        let (e, w) = (&self.eta_errors_ms, &self.eta_errors_of_wait);
        EtaStats {
            jobs: self.eta_measured,
            without_estimate: self.eta_unknown,
            error_seconds: P50P90 { p50: ms_to_seconds(nearest_rank(e, 50)), p90: ms_to_seconds(nearest_rank(e, 90)) },
            waited: w.len() as u64,
            error_of_wait: P50P90 { p50: nearest_rank(w, 50), p90: nearest_rank(w, 90) },
            bias_seconds_mean: (!e.is_empty()).then(|| self.eta_bias_ms as f64 / e.len() as f64 / MS_PER_SECOND),
        }
    }

    fn images(&mut self) -> ImageStats {
        self.image_waits_ms.sort_unstable();
        let w = &self.image_waits_ms;
        ImageStats {
            starts: w.len() as u64,
            starts_waited: w.iter().filter(|&&ms| ms > 0).count() as u64,
            wait_seconds: seconds_stats(w),
            gpu_hours_waiting: self.image_wait_gpu_ms as f64 / MS_PER_HOUR,
        }
    }

    fn finish(mut self) -> GroupSummary {
        let eta = self.eta();
        let images = self.images();
        self.waits_ms.sort_unstable();
        self.queued_ms.sort_unstable();
        self.preemptions_per_job.sort_unstable();
        self.jcts_ms.sort_unstable();
        self.slowdowns.sort_unstable_by(f64::total_cmp);
        let w = &self.waits_ms;
        let j = &self.jcts_ms;
        let s = &self.slowdowns;
        // Summing the sorted values makes the mean independent of the record order.
        let slowdown_mean = (!s.is_empty()).then(|| s.iter().sum::<f64>() / s.len() as f64);
        GroupSummary {
            jobs: self.jobs,
            started: self.started,
            finished: self.finished,
            never_started: self.jobs - self.started,
            wait_seconds: WaitStats {
                mean: mean_ms_as_seconds(w),
                p50: ms_to_seconds(nearest_rank(w, 50)),
                p95: ms_to_seconds(nearest_rank(w, 95)),
                p99: ms_to_seconds(nearest_rank(w, 99)),
                max: ms_to_seconds(w.last().copied()),
            },
            queued_seconds: seconds_stats(&self.queued_ms),
            preemptions_per_job: CountStats {
                p50: nearest_rank(&self.preemptions_per_job, 50).unwrap_or(0),
                p99: nearest_rank(&self.preemptions_per_job, 99).unwrap_or(0),
                max: self.preemptions_per_job.last().copied().unwrap_or(0),
            },
            jct_seconds: JctStats {
                mean: mean_ms_as_seconds(j),
                p50: ms_to_seconds(nearest_rank(j, 50)),
                p95: ms_to_seconds(nearest_rank(j, 95)),
                p99: ms_to_seconds(nearest_rank(j, 99)),
            },
            slowdown: SlowdownStats { mean: slowdown_mean, p50: nearest_rank(s, 50), p95: nearest_rank(s, 95) },
            preemptions: self.preemptions,
            gpu_hours_lost: self.lost_gpu_ms as f64 / MS_PER_HOUR,
            eta,
            images,
        }
    }
}

/// The busy window `[first submit, last finish]` of a run, in ms; the window ends at
/// `end_ms` instead when some job did not finish. `None` when the run has no jobs.
pub fn busy_window_ms(run: &RunResult) -> Option<(u64, u64)> {
    let start = run.records.iter().map(|r| r.submit_ms).min()?;
    let all_finished = run.records.iter().all(|r| r.finish_ms.is_some());
    let end =
        if all_finished { run.records.iter().filter_map(|r| r.finish_ms).max().unwrap_or(start) } else { run.end_ms };
    Some((start, end.max(start)))
}

/// Allocated GPU-ms of the step function `util` inside `[from_ms, to_ms)`; the last sample
/// lasts until `end_ms`. `util` must be sorted by `t_ms`.
pub fn allocated_gpu_ms(util: &[UtilSample], end_ms: u64, from_ms: u64, to_ms: u64) -> u128 {
    if from_ms >= to_ms || util.is_empty() {
        return 0;
    }
    // First sample whose interval can reach `from_ms`.
    let first = util.partition_point(|s| s.t_ms <= from_ms).saturating_sub(1);
    let mut total_milli = 0u128;
    for (i, s) in util.iter().enumerate().skip(first) {
        if s.t_ms >= to_ms {
            break;
        }
        let next = util.get(i + 1).map_or(end_ms, |n| n.t_ms);
        let lo = s.t_ms.max(from_ms);
        let hi = next.min(to_ms).min(end_ms);
        if hi > lo {
            total_milli += u128::from(s.gpu_milli_allocated) * u128::from(hi - lo);
        }
    }
    total_milli / 1000
}

/// Summarises one run: per tier, per tenant, all jobs, and cluster-wide figures.
pub fn summarize(run: &RunResult) -> PolicySummary {
    let mut all = Acc::default();
    let mut tiers: BTreeMap<&str, Acc> = BTreeMap::new();
    let mut tenants: BTreeMap<&str, Acc> = BTreeMap::new();
    let mut useful_gpu_milli_ms = 0u128;
    for r in &run.records {
        all.add(r);
        tiers.entry(&r.tier).or_default().add(r);
        tenants.entry(&r.tenant).or_default().add(r);
        if r.finish_ms.is_some() {
            useful_gpu_milli_ms += u128::from(r.gpu_milli) * u128::from(r.work_ms);
        }
    }
    let useful_gpu_ms = useful_gpu_milli_ms / 1000;
    let lost_gpu_ms = all.lost_gpu_ms;
    let preemptions_total = all.preemptions;

    let sorted_util;
    let util: &[UtilSample] = if run.util.is_sorted_by_key(|s| s.t_ms) {
        &run.util
    } else {
        let mut v = run.util.clone();
        v.sort_by_key(|s| s.t_ms); // stable: equal times keep their order
        sorted_util = v;
        &sorted_util
    };
    let allocated_total = allocated_gpu_ms(util, run.end_ms, 0, run.end_ms);
    let (gpu_utilization, gpu_utilization_useful, makespan_ms) = match busy_window_ms(run) {
        Some((start, end)) => {
            let span = end - start;
            let denom = u128::from(run.capacity_gpus) * u128::from(span);
            let used = allocated_gpu_ms(util, run.end_ms, start, end);
            let share = |gpu_ms: u128| (denom > 0).then(|| gpu_ms as f64 / denom as f64);
            (share(used), share(useful_gpu_ms), span)
        }
        None => (None, None, 0),
    };

    PolicySummary {
        policy: run.policy.clone(),
        placement: run.placement.clone(),
        all: all.finish(),
        tiers: tiers.into_iter().map(|(k, v)| (k.to_owned(), v.finish())).collect(),
        tenants: tenants.into_iter().map(|(k, v)| (k.to_owned(), v.finish())).collect(),
        cluster: ClusterSummary {
            capacity_gpus: run.capacity_gpus,
            gpu_utilization,
            gpu_utilization_useful,
            gpu_hours_allocated: allocated_total as f64 / MS_PER_HOUR,
            gpu_hours_useful: useful_gpu_ms as f64 / MS_PER_HOUR,
            gpu_hours_lost: lost_gpu_ms as f64 / MS_PER_HOUR,
            preemptions_total,
            reclaims_total: run.core_counters.reclaims,
            makespan_seconds: makespan_ms as f64 / MS_PER_SECOND,
            events_processed: run.events_processed,
            cycles: run.cycles,
            preemptors_moved: run.core_counters.preemptors_moved,
            starts_taken_back: run.core_counters.starts_taken_back,
        },
    }
}
