//! Pure, deterministic transforms on job lists. Each returns the jobs sorted by
//! `(submit_ms, name)`.

use serde::{Deserialize, Serialize};

use super::{LoadReport, TraceJob, WorkloadError};

/// Sorts by `(submit_ms, name)`, the canonical workload order.
pub fn sort_jobs(mut jobs: Vec<TraceJob>) -> Vec<TraceJob> {
    sort_in_place(&mut jobs);
    jobs
}

pub(crate) fn sort_in_place(jobs: &mut [TraceJob]) {
    jobs.sort_by(|a, b| a.submit_ms.cmp(&b.submit_ms).then_with(|| a.name.cmp(&b.name)));
}

/// Shifts submit times so the first job is submitted at 0.
pub fn normalise_start(mut jobs: Vec<TraceJob>) -> Vec<TraceJob> {
    if let Some(start) = jobs.iter().map(|j| j.submit_ms).min() {
        for job in &mut jobs {
            job.submit_ms -= start;
        }
    }
    sort_in_place(&mut jobs);
    jobs
}

/// Divides submit times by `factor` (rounded to the nearest ms); run times are unchanged.
/// `factor = 2.0` doubles the arrival rate (and so the offered load).
///
/// # Panics
/// If `factor` is not finite and > 0.
pub fn compress_time(mut jobs: Vec<TraceJob>, factor: f64) -> Vec<TraceJob> {
    assert!(factor.is_finite() && factor > 0.0, "compress_time: factor must be finite and > 0, got {factor}");
    for job in &mut jobs {
        job.submit_ms = (job.submit_ms as f64 / factor).round() as u64;
    }
    sort_in_place(&mut jobs);
    jobs
}

/// Keeps jobs with `from_ms ≤ submit_ms < to_ms`. Submit times are not shifted (see
/// [`normalise_start`]).
pub fn window(mut jobs: Vec<TraceJob>, from_ms: u64, to_ms: u64) -> Vec<TraceJob> {
    jobs.retain(|j| (from_ms..to_ms).contains(&j.submit_ms));
    sort_in_place(&mut jobs);
    jobs
}

/// Keeps the first `n` jobs in `(submit_ms, name)` order.
pub fn take(mut jobs: Vec<TraceJob>, n: usize) -> Vec<TraceJob> {
    sort_in_place(&mut jobs);
    jobs.truncate(n);
    jobs
}

/// Gives jobs a tier drawn with the given shares (weights, normalised; need not sum to 1).
///
/// Only jobs whose tier is `None` are changed unless `overwrite` is set. The draw for a job
/// depends only on `seed` and the job's name, not on its position, so a job gets the same
/// tier whatever window or subset of the workload it is loaded with.
pub fn assign_tiers(
    mut jobs: Vec<TraceJob>,
    shares: &[(String, f64)],
    seed: u64,
    overwrite: bool,
) -> Result<Vec<TraceJob>, WorkloadError> {
    let cumulative = cumulative_weights(shares.iter().map(|(t, w)| (t.as_str(), *w)), "tier")?;
    for job in &mut jobs {
        if job.tier.is_some() && !overwrite {
            continue;
        }
        let u = unit_f64(mix(seed ^ fnv1a(job.name.as_bytes())));
        let i = pick(&cumulative, u);
        job.tier = Some(shares[i].0.clone());
    }
    sort_in_place(&mut jobs);
    Ok(jobs)
}

/// Whose choice a job's image is (see [`assign_images`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ImagesBy {
    /// Each job draws its own image.
    #[default]
    Job,
    /// Every job of a project uses the project's image (a team's training image).
    Project,
    /// Every job of a user uses the user's image.
    User,
}

/// The most distinct images [`assign_images`] hands out.
pub const IMAGES_ASSIGNED_MAX: u32 = 4096;

/// Gives jobs a container image named `image-0` … `image-{count − 1}`, drawn by Zipf's law
/// with exponent `zipf_exponent`: image `k` weighs `1 / (k + 1)^s`, so a few images are
/// common and many rare, as in clusters where teams build on a handful of base images
/// (0: every image as likely). `image-0` is the most common.
///
/// Only jobs without an image are changed unless `overwrite` is set. The draw depends only
/// on `seed` and the name it is keyed by (the job's, its project's or its user's, by `by`),
/// so a job gets the same image whatever window or subset of the workload it is loaded with.
pub fn assign_images(
    mut jobs: Vec<TraceJob>,
    count: u32,
    zipf_exponent: f64,
    by: ImagesBy,
    seed: u64,
    overwrite: bool,
) -> Result<Vec<TraceJob>, WorkloadError> {
    if count == 0 || count > IMAGES_ASSIGNED_MAX {
        return Err(WorkloadError::Spec(format!(
            "assign-images: images must be 1 to {IMAGES_ASSIGNED_MAX}, got {count}"
        )));
    }
    if !zipf_exponent.is_finite() || !(0.0..=8.0).contains(&zipf_exponent) {
        return Err(WorkloadError::Spec(format!(
            "assign-images: zipf_exponent must be from 0 to 8, got {zipf_exponent}"
        )));
    }
    let names: Vec<String> = (0..count).map(|k| format!("image-{k}")).collect();
    let weights = (0..count).map(|k| f64::from(k + 1).powf(-zipf_exponent));
    let cumulative = cumulative_weights(names.iter().map(String::as_str).zip(weights), "image")?;
    for job in &mut jobs {
        if job.image.is_some() && !overwrite {
            continue;
        }
        let key = match by {
            ImagesBy::Job => &job.name,
            ImagesBy::Project => &job.project,
            ImagesBy::User => &job.user,
        };
        let u = unit_f64(mix(seed ^ fnv1a(key.as_bytes())));
        job.image = Some(names[pick(&cumulative, u)].clone());
    }
    sort_in_place(&mut jobs);
    Ok(jobs)
}

/// Cumulative weights normalised to end at 1.0; checks that weights are finite, ≥ 0 and not all
/// zero, and that names are non-empty.
pub(crate) fn cumulative_weights<'a>(
    items: impl IntoIterator<Item = (&'a str, f64)>,
    what: &str,
) -> Result<Vec<f64>, WorkloadError> {
    let mut cumulative = Vec::new();
    let mut total = 0.0;
    for (name, w) in items {
        if name.is_empty() {
            return Err(WorkloadError::Spec(format!("empty {what} name")));
        }
        if !w.is_finite() || w < 0.0 {
            return Err(WorkloadError::Spec(format!("{what} `{name}`: weight must be finite and ≥ 0, got {w}")));
        }
        total += w;
        cumulative.push(total);
    }
    if total <= 0.0 {
        return Err(WorkloadError::Spec(format!("{what} weights must include at least one positive weight")));
    }
    for c in &mut cumulative {
        *c /= total;
    }
    Ok(cumulative)
}

/// The index `i` with `cumulative[i-1] ≤ u < cumulative[i]` for `u ∈ [0, 1)`, never an item with
/// weight 0.
pub(crate) fn pick(cumulative: &[f64], u: f64) -> usize {
    cumulative.partition_point(|&c| c <= u).min(cumulative.len() - 1)
}

/// SplitMix64 finaliser: a fixed, platform-independent 64-bit mixer.
pub(crate) fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A seed for sub-stream `stream` of `seed`.
pub(crate) fn derive_seed(seed: u64, stream: u64) -> u64 {
    mix(seed ^ mix(stream))
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3))
}

/// The top 53 bits as a float in `[0, 1)`.
fn unit_f64(x: u64) -> f64 {
    (x >> 11) as f64 / (1u64 << 53) as f64
}

/// Sorts, shifts the first job to 0 and fills in `jobs_loaded`.
pub(crate) fn finish(jobs: Vec<TraceJob>, mut report: LoadReport) -> (Vec<TraceJob>, LoadReport) {
    let jobs = normalise_start(jobs);
    report.jobs_loaded = jobs.len() as u64;
    (jobs, report)
}
