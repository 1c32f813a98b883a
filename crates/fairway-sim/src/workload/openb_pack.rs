//! Loaders for the packing benchmark's inputs: any openb node list and pod list, including
//! the variants published with FGD (more GPU sharing, GPU-model constraints, more multi-GPU
//! or CPU-only pods) and lists whose time or `qos` columns are empty or absent. Only the
//! columns placement needs are read.

use std::path::Path;

use csv::StringRecord;
use fairway_core::packing::{Ask, ModelSet, NODE_GPUS_MAX, ShapeError};

use super::WorkloadError;
use super::csvutil::{CsvFile, UniqueNames};

/// One node of an openb node list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PackNodeRow {
    pub name: String,
    pub cpu_milli: u64,
    pub memory_mib: u64,
    pub gpus: u32,
    /// The GPU model; `None` for a CPU-only node (`gpu` = 0 and `model` empty).
    pub model: Option<String>,
}

/// One pod of an openb pod list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PackPodRow {
    pub name: String,
    pub cpu_milli: u64,
    pub memory_mib: u64,
    pub num_gpu: u32,
    /// Thousandths of each GPU (0 for a CPU-only pod).
    pub gpu_milli: u32,
    /// The GPU models allowed (`gpu_spec`, `|`-separated); empty means any.
    pub gpu_models: Vec<String>,
}

/// Loads a node list (`sn, cpu_milli, memory_mib, gpu, model`), in file order.
pub fn load_pack_nodes(path: impl AsRef<Path>) -> Result<Vec<PackNodeRow>, WorkloadError> {
    let mut csv = CsvFile::open(path.as_ref())?;
    let c_name = csv.col("sn")?;
    let c_cpu = csv.col("cpu_milli")?;
    let c_mem = csv.col("memory_mib")?;
    let c_gpus = csv.col("gpu")?;
    let c_model = csv.col_opt("model");
    let mut names = UniqueNames::default();
    let mut nodes = Vec::new();
    let mut rec = StringRecord::new();
    while let Some(row) = csv.next(&mut rec)? {
        let name = names.claim(&row, c_name)?;
        let gpus = row.u32(c_gpus)?;
        if gpus as usize > NODE_GPUS_MAX {
            return Err(row.error(c_gpus, ShapeError::TooManyGpus(gpus.into()).reason()));
        }
        let model = c_model.map(|c| row.str(c)).filter(|m| !m.is_empty()).map(str::to_owned);
        if gpus > 0 && model.is_none() {
            let col = c_model.unwrap_or(c_gpus);
            return Err(row.error(col, "a node with GPUs must name their model"));
        }
        nodes.push(PackNodeRow { name, cpu_milli: row.u64(c_cpu)?, memory_mib: row.u64(c_mem)?, gpus, model });
    }
    Ok(nodes)
}

/// Loads a pod list (`name, cpu_milli, memory_mib, num_gpu, gpu_milli`, and `gpu_spec` if
/// present), in file order. Other columns (`qos`, times, phase) are not read.
pub fn load_pack_pods(path: impl AsRef<Path>) -> Result<Vec<PackPodRow>, WorkloadError> {
    let mut csv = CsvFile::open(path.as_ref())?;
    let c_name = csv.col("name")?;
    let c_cpu = csv.col("cpu_milli")?;
    let c_mem = csv.col("memory_mib")?;
    let c_gpus = csv.col("num_gpu")?;
    let c_milli = csv.col("gpu_milli")?;
    let c_spec = csv.col_opt("gpu_spec");
    let mut names = UniqueNames::default();
    let mut pods = Vec::new();
    let mut rec = StringRecord::new();
    while let Some(row) = csv.next(&mut rec)? {
        let name = names.claim(&row, c_name)?;
        let cpu_milli = row.u64(c_cpu)?;
        let memory_mib = row.u64(c_mem)?;
        let num_gpu = row.u32(c_gpus)?;
        let gpu_milli = row.u32(c_milli)?;
        // The core's rules for a request's GPUs, reported on the column at fault.
        Ask::new(cpu_milli, memory_mib, num_gpu, gpu_milli, ModelSet::ANY).map_err(|e| {
            let col = if e.field() == "gpu_count" { c_gpus } else { c_milli };
            row.error(col, e.reason())
        })?;
        let gpu_models = c_spec
            .map(|c| row.str(c).split('|').filter(|m| !m.is_empty()).map(str::to_owned).collect())
            .unwrap_or_default();
        pods.push(PackPodRow { name, cpu_milli, memory_mib, num_gpu, gpu_milli, gpu_models });
    }
    Ok(pods)
}
