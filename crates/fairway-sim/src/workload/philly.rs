//! Loaders for the Microsoft Philly derived traces: the Pollux job table, the Chronus job lists
//! and the HeliosArtifact VC node counts.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use csv::StringRecord;
use jiff::civil;

use super::csvutil::{CsvFile, UniqueNames, name_width};
use super::transform::finish;
use super::{GangSplit, LoadReport, TierMap, TraceJob, WorkloadError, reason};

/// Row filter for [`load_philly_pollux`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PolluxFilter {
    /// Keep jobs submitted at or after this wall-clock time (inclusive).
    pub from: Option<civil::DateTime>,
    /// Keep jobs submitted before this wall-clock time (exclusive).
    pub to: Option<civil::DateTime>,
    /// Keep only the first `max_jobs` jobs in submit order (after the window).
    pub max_jobs: Option<usize>,
}

/// Loads the Pollux `philly.csv` job table (`timestamp,duration,num_gpus,gpu_time,cluster`).
///
/// - `timestamp` (`YYYY-MM-DD HH:MM:SS`, wall clock without time zone; any ISO 8601 civil
///   date-time jiff accepts) is the submit time. Rows are not sorted in the file; the result is.
///   Times are compared as civil times, so there are no DST gaps.
/// - `duration` (float seconds, > 0) is rounded to whole ms (a positive sub-ms run time is 1 ms).
/// - `num_gpus` (≥ 1) is split into a gang by `split`.
/// - `cluster` (the VC hash) is both `project` and `user`. There is no tier. `gpu_time` is ignored.
/// - Names are `pollux-NNNNNN`, the 0-based data row index in the file (line = index + 2), so a
///   job keeps its name under any window or `max_jobs`.
///
/// The window (`filter.from` ≤ t < `filter.to`) is applied first, then `max_jobs`; rows dropped
/// by either are counted as skipped. The first kept job is at 0 ms.
pub fn load_philly_pollux(
    path: impl AsRef<Path>,
    split: &GangSplit,
    filter: &PolluxFilter,
) -> Result<(Vec<TraceJob>, LoadReport), WorkloadError> {
    split.validate()?;
    let mut csv = CsvFile::open(path.as_ref())?;
    let c_ts = csv.col("timestamp")?;
    let c_dur = csv.col("duration")?;
    let c_gpus = csv.col("num_gpus")?;
    let c_vc = csv.col("cluster")?;

    struct Raw {
        at_ms: i64,
        row: u64,
        duration_ms: u64,
        gpus: u32,
        vc: String,
    }
    let epoch = civil::date(1970, 1, 1).at(0, 0, 0, 0);
    let mut report = LoadReport::default();
    let mut raws = Vec::new();
    let mut rec = StringRecord::new();
    while let Some(row) = csv.next(&mut rec)? {
        let index = report.rows_read;
        report.rows_read += 1;
        let at: civil::DateTime =
            row.str(c_ts).parse().map_err(|e| row.error(c_ts, format!("not a `YYYY-MM-DD HH:MM:SS` time ({e})")))?;
        let duration_ms = row.duration_ms(c_dur)?;
        let gpus = row.u32(c_gpus)?;
        if gpus == 0 {
            return Err(row.error(c_gpus, "must be ≥ 1"));
        }
        let vc = row.non_empty(c_vc)?.to_owned();
        if filter.from.is_some_and(|from| at < from) || filter.to.is_some_and(|to| at >= to) {
            report.skip(reason::OUTSIDE_WINDOW, 1);
            continue;
        }
        let at_ms =
            i64::try_from(at.duration_since(epoch).as_millis()).expect("civil date-times are within ±10,000 years");
        raws.push(Raw { at_ms, row: index, duration_ms, gpus, vc });
    }
    raws.sort_by_key(|r| (r.at_ms, r.row));
    if let Some(max) = filter.max_jobs.filter(|&max| raws.len() > max) {
        report.skip(reason::BEYOND_MAX_JOBS, (raws.len() - max) as u64);
        raws.truncate(max);
    }
    let width = name_width(report.rows_read.saturating_sub(1));
    let start = raws.first().map_or(0, |r| r.at_ms);
    let jobs = raws
        .into_iter()
        .map(|r| {
            let (replicas, gpus_per_replica) = split.split(r.gpus);
            if replicas > 1 {
                report.adjust(reason::GANG_SPLIT, 1);
            }
            TraceJob {
                name: format!("pollux-{:0width$}", r.row),
                submit_ms: (r.at_ms - start) as u64,
                duration_ms: r.duration_ms,
                gpus_per_replica,
                gpu_milli: 0,
                replicas,
                user: r.vc.clone(),
                project: r.vc,
                tier: None,
                gpu_model: None,
                cpu_millis: 0,
                memory_mib: 0,
                checkpoint_interval_ms: None,
                image: None,
            }
        })
        .collect();
    Ok(finish(jobs, report))
}

/// Loads a Chronus job list (`trace_job_Philly_{MIX1,MIX2,SLO}.csv`).
///
/// Columns used: `job_id`, `user`, `num_gpu`, `submit_time` (s), `duration` (s), `job_type`.
/// - `user` is the VC with a `vc_` prefix; the prefix is dropped so projects match the Pollux
///   `cluster` values and [`load_philly_vc_quotas`]. It is both `project` and `user`.
/// - `job_type` (`strict`/`soft`/`best`) is mapped to a tier by `tiers`
///   ([`TierMap::chronus_default`]: strict→high, soft→medium, best→low); a label missing from
///   the map is an error.
/// - Rows with `num_gpu = 0` are skipped and counted as [`reason::ZERO_GPU`] (Chronus's own
///   loader skips them too). They are still checked for well-formedness.
/// - `num_gpu` > one node is split into a gang by `split`.
/// - Names are `chronus-NNNNNN` from `job_id` (which must be unique).
/// - Deadlines (`expect_time_list`) and the synthetic model fields are not carried over.
///
/// Submit times are shifted so the first job is at 0 ms (the files start at 1 s).
pub fn load_philly_chronus(
    path: impl AsRef<Path>,
    tiers: &TierMap,
    split: &GangSplit,
) -> Result<(Vec<TraceJob>, LoadReport), WorkloadError> {
    split.validate()?;
    let mut csv = CsvFile::open(path.as_ref())?;
    let c_id = csv.col("job_id")?;
    let c_user = csv.col("user")?;
    let c_gpus = csv.col("num_gpu")?;
    let c_submit = csv.col("submit_time")?;
    let c_dur = csv.col("duration")?;
    let c_type = csv.col("job_type")?;

    let mut report = LoadReport::default();
    let mut seen: HashMap<u64, u64> = HashMap::new();
    let mut jobs = Vec::new();
    let mut rec = StringRecord::new();
    while let Some(row) = csv.next(&mut rec)? {
        report.rows_read += 1;
        let id = row.u64(c_id)?;
        if let Some(&first) = seen.get(&id) {
            return Err(row.duplicate(format!("job_id {id}"), first));
        }
        seen.insert(id, row.byte);
        let vc = row.non_empty(c_user)?;
        let vc = vc.strip_prefix("vc_").unwrap_or(vc).to_owned();
        let gpus = row.u32(c_gpus)?;
        let submit_ms = row.seconds_as_ms(c_submit)?;
        let duration_ms = row.duration_ms(c_dur)?;
        let label = row.str(c_type);
        let tier = tiers
            .tier_for(label)
            .ok_or_else(|| row.error(c_type, format!("no tier for this job type (tier map has {})", tiers.labels())))?;
        if gpus == 0 {
            report.skip(reason::ZERO_GPU, 1);
            continue;
        }
        let (replicas, gpus_per_replica) = split.split(gpus);
        if replicas > 1 {
            report.adjust(reason::GANG_SPLIT, 1);
        }
        jobs.push(TraceJob {
            name: format!("chronus-{id:06}"),
            submit_ms,
            duration_ms,
            gpus_per_replica,
            gpu_milli: 0,
            replicas,
            user: vc.clone(),
            project: vc,
            tier: Some(tier.to_owned()),
            gpu_model: None,
            cpu_millis: 0,
            memory_mib: 0,
            checkpoint_interval_ms: None,
            image: None,
        });
    }
    Ok(finish(jobs, report))
}

/// Loads `philly_vc.csv` (`vc,node num`): VC → GPU quota (`node num × gpus_per_node`).
pub fn load_philly_vc_quotas(
    path: impl AsRef<Path>,
    gpus_per_node: u32,
) -> Result<BTreeMap<String, u32>, WorkloadError> {
    let mut csv = CsvFile::open(path.as_ref())?;
    let c_vc = csv.col("vc")?;
    let c_nodes = csv.col("node num")?;
    let mut quotas = BTreeMap::new();
    let mut names = UniqueNames::default();
    let mut rec = StringRecord::new();
    while let Some(row) = csv.next(&mut rec)? {
        let vc = names.claim(&row, c_vc)?;
        let nodes = row.u32(c_nodes)?;
        let gpus = nodes
            .checked_mul(gpus_per_node)
            .ok_or_else(|| row.error(c_nodes, "node count × GPUs per node overflows u32"))?;
        quotas.insert(vc, gpus);
    }
    Ok(quotas)
}
