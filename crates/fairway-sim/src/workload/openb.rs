//! Loaders for Alibaba's `cluster-trace-gpu-v2023` ("openb") pod and node lists.

use std::path::Path;

use csv::StringRecord;
use serde::{Deserialize, Serialize};

use super::csvutil::{CsvFile, UniqueNames};
use super::transform::finish;
use super::{LoadReport, TierMap, TraceJob, WorkloadError, reason};

/// What to do with a pod whose `deletion_time` is empty (still alive at the end of the trace).
///
/// The published `openb_pod_list_default.csv` has no such row; other openb pod lists may.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MissingDeletion {
    /// Skip the pod and count it as [`reason::NO_DELETION_TIME`].
    #[default]
    Skip,
    /// Let the pod run until the end of the trace: the largest creation, scheduled or deletion
    /// time in the file. Counted as [`reason::DELETION_AT_TRACE_END`].
    TraceEnd,
}

/// How a pod asking for part of one GPU (`num_gpu = 1`, `gpu_milli < 1000`) is loaded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GpuShares {
    /// As a share of one GPU (`TraceJob::gpu_milli`): it may sit beside other shares.
    #[default]
    Share,
    /// As a whole GPU, counted in [`LoadReport::adjusted`] as
    /// [`reason::FRACTIONAL_GPU_ROUNDED`] (how the simulator ran openb before it knew shares).
    RoundUp,
}

/// Options for [`load_openb_pods`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpenbOptions {
    /// `qos` → tier; [`TierMap::openb_default`] by default. A QoS missing from the map is an error.
    pub qos_tiers: TierMap,
    /// Handling of an empty `deletion_time`.
    pub missing_deletion: MissingDeletion,
    /// Skip pods with an empty `scheduled_time` (never scheduled in the trace; 897 of 8,152 in
    /// the default list), counting them as [`reason::NEVER_SCHEDULED`]. Off by default: the
    /// published packing benchmark places every pod.
    pub skip_unscheduled: bool,
    /// Shares of one GPU: kept as shares, or rounded up to whole GPUs.
    pub gpu_shares: GpuShares,
}

impl Default for OpenbOptions {
    fn default() -> Self {
        Self {
            qos_tiers: TierMap::openb_default(),
            missing_deletion: MissingDeletion::Skip,
            skip_unscheduled: false,
            gpu_shares: GpuShares::Share,
        }
    }
}

/// Loads an openb pod list (`openb_pod_list_*.csv`).
///
/// - `name` is kept as the job name (must be unique).
/// - `creation_time` (s) is the submit time; run time is `deletion_time − creation_time`
///   (so it includes the time the pod waited in Alibaba's cluster: median 2 s, p99 15 min).
///   An empty `deletion_time` is handled by [`OpenbOptions::missing_deletion`]; a pod with
///   `deletion_time ≤ creation_time` (one in the default list) is skipped and counted as
///   [`reason::NON_POSITIVE_LIFETIME`].
/// - GPUs: `num_gpu` GPUs of `gpu_milli`/1000 each. One GPU with `gpu_milli < 1000` is a
///   share of one GPU (`TraceJob::gpu_milli`), or with [`GpuShares::RoundUp`] a whole GPU,
///   counted in [`LoadReport::adjusted`] as [`reason::FRACTIONAL_GPU_ROUNDED`]. Several GPUs
///   each less than whole (no such row in the published lists) are rounded up alike: a
///   share is of one GPU. `num_gpu = 0` (CPU-only) pods are skipped and counted as
///   [`reason::ZERO_GPU`]. A pod is always one replica (openb's multi-GPU pods must fit on
///   one node).
/// - `qos` → tier by [`OpenbOptions::qos_tiers`]; `cpu_milli`, `memory_mib` per replica;
///   a non-empty `gpu_spec` becomes `gpu_model` (verbatim).
/// - `project` and `user` are the constant `"openb"` (the trace has no tenants).
/// - Pods with an empty `scheduled_time` are kept unless [`OpenbOptions::skip_unscheduled`].
///
/// Submit times are shifted so the first job is at 0 ms.
pub fn load_openb_pods(
    path: impl AsRef<Path>,
    options: &OpenbOptions,
) -> Result<(Vec<TraceJob>, LoadReport), WorkloadError> {
    let mut csv = CsvFile::open(path.as_ref())?;
    let c_name = csv.col("name")?;
    let c_cpu = csv.col("cpu_milli")?;
    let c_mem = csv.col("memory_mib")?;
    let c_gpus = csv.col("num_gpu")?;
    let c_milli = csv.col("gpu_milli")?;
    let c_spec = csv.col_opt("gpu_spec");
    let c_qos = csv.col("qos")?;
    let c_created = csv.col("creation_time")?;
    let c_deleted = csv.col("deletion_time")?;
    let c_scheduled = csv.col("scheduled_time")?;

    struct Raw {
        job: TraceJob,
        created_ms: u64,
        deleted_ms: Option<u64>,
        rounded: bool,
    }
    let mut report = LoadReport::default();
    let mut names = UniqueNames::default();
    let mut raws = Vec::new();
    let mut trace_end_ms = 0;
    let mut rec = StringRecord::new();
    while let Some(row) = csv.next(&mut rec)? {
        report.rows_read += 1;
        let name = names.claim(&row, c_name)?;
        let cpu_millis = row.u64(c_cpu)?;
        let memory_mib = row.u64(c_mem)?;
        let num_gpu = row.u32(c_gpus)?;
        let gpu_milli = row.u32(c_milli)?;
        if gpu_milli > 1000 {
            return Err(row.error(c_milli, "must be ≤ 1000 (thousandths of one GPU)"));
        }
        if num_gpu > 0 && gpu_milli == 0 {
            return Err(row.error(c_milli, "must be ≥ 1 when num_gpu > 0"));
        }
        let gpu_model = c_spec.map(|c| row.str(c)).filter(|s| !s.is_empty()).map(str::to_owned);
        let qos = row.str(c_qos);
        let tier = options.qos_tiers.tier_for(qos).ok_or_else(|| {
            row.error(c_qos, format!("no tier for this QoS (tier map has {})", options.qos_tiers.labels()))
        })?;
        let created_ms = row.seconds_as_ms(c_created)?;
        let deleted_ms = match row.str(c_deleted) {
            "" => None,
            _ => Some(row.seconds_as_ms(c_deleted)?),
        };
        let scheduled_ms = match row.str(c_scheduled) {
            "" => None,
            _ => Some(row.seconds_as_ms(c_scheduled)?),
        };
        trace_end_ms = trace_end_ms.max(created_ms).max(deleted_ms.unwrap_or(0)).max(scheduled_ms.unwrap_or(0));

        if num_gpu == 0 {
            report.skip(reason::ZERO_GPU, 1);
            continue;
        }
        if options.skip_unscheduled && scheduled_ms.is_none() {
            report.skip(reason::NEVER_SCHEDULED, 1);
            continue;
        }
        let share = num_gpu == 1 && gpu_milli < 1000 && options.gpu_shares == GpuShares::Share;
        raws.push(Raw {
            job: TraceJob {
                name,
                submit_ms: created_ms,
                duration_ms: 0,
                gpus_per_replica: if share { 0 } else { num_gpu },
                gpu_milli: if share { gpu_milli } else { 0 },
                replicas: 1,
                user: "openb".into(),
                project: "openb".into(),
                tier: Some(tier.to_owned()),
                gpu_model,
                cpu_millis,
                memory_mib,
                checkpoint_interval_ms: None,
                image: None,
            },
            created_ms,
            deleted_ms,
            rounded: gpu_milli < 1000 && !share,
        });
    }

    let mut jobs = Vec::with_capacity(raws.len());
    for raw in raws {
        let deleted_ms = match (raw.deleted_ms, options.missing_deletion) {
            (Some(t), _) => t,
            (None, MissingDeletion::Skip) => {
                report.skip(reason::NO_DELETION_TIME, 1);
                continue;
            }
            (None, MissingDeletion::TraceEnd) => {
                report.adjust(reason::DELETION_AT_TRACE_END, 1);
                trace_end_ms
            }
        };
        if deleted_ms <= raw.created_ms {
            report.skip(reason::NON_POSITIVE_LIFETIME, 1);
            continue;
        }
        if raw.rounded {
            report.adjust(reason::FRACTIONAL_GPU_ROUNDED, 1);
        }
        let mut job = raw.job;
        job.duration_ms = deleted_ms - raw.created_ms;
        jobs.push(job);
    }
    Ok(finish(jobs, report))
}

/// One node of a cluster description.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceNode {
    pub name: String,
    pub gpus: u32,
    pub gpu_model: String,
    pub cpu_millis: u64,
    pub memory_mib: u64,
}

/// Loads an openb node list (`openb_node_list_*.csv`: `sn,cpu_milli,memory_mib,gpu,model`),
/// in file order. Names (`sn`) must be unique; `model` must not be empty.
pub fn load_openb_nodes(path: impl AsRef<Path>) -> Result<Vec<TraceNode>, WorkloadError> {
    let mut csv = CsvFile::open(path.as_ref())?;
    let c_name = csv.col("sn")?;
    let c_cpu = csv.col("cpu_milli")?;
    let c_mem = csv.col("memory_mib")?;
    let c_gpus = csv.col("gpu")?;
    let c_model = csv.col("model")?;
    let mut names = UniqueNames::default();
    let mut nodes = Vec::new();
    let mut rec = StringRecord::new();
    while let Some(row) = csv.next(&mut rec)? {
        let name = names.claim(&row, c_name)?;
        nodes.push(TraceNode {
            name,
            gpus: row.u32(c_gpus)?,
            gpu_model: row.non_empty(c_model)?.to_owned(),
            cpu_millis: row.u64(c_cpu)?,
            memory_mib: row.u64(c_mem)?,
        });
    }
    Ok(nodes)
}
