//! Checks that need to know the cluster: is the GPU model known, does a replica fit on a
//! node at all. A bare parse cannot make them, so they are a separate step.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::{SpecError, SpecErrors};
use crate::model::{Field, JobDoc};
use crate::value::quote;

/// The largest node of each GPU model, per dimension (the dimensions may come from
/// different nodes: this is an envelope, so a replica that does not fit it fits nowhere).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterShape {
    pub models: BTreeMap<String, ModelShape>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelShape {
    pub gpus_per_node_max: u32,
    pub cpu_millis_max: u64,
    pub memory_mib_max: u64,
}

impl ModelShape {
    /// The first dimension of `job`'s replica that exceeds this shape, with a reason.
    fn excess(&self, job: &JobDoc, model: &str) -> Option<(Field, String)> {
        let r = &job.resources;
        let dims = [
            (Field::Gpus, u64::from(r.gpus), u64::from(self.gpus_per_node_max), "GPUs"),
            (Field::Cpu, r.cpu_millis, self.cpu_millis_max, "millicores of CPU"),
            (Field::Memory, r.memory_mib, self.memory_mib_max, "MiB of memory"),
        ];
        dims.into_iter().find(|(_, want, have, _)| want > have).map(|(field, want, have, unit)| {
            (field, format!("a replica needs {want} {unit} but the largest {model} node has {have}"))
        })
    }
}

/// Every job whose GPU model the cluster lacks, or whose replica fits on no node.
pub fn validate_against_cluster<'a>(
    jobs: impl IntoIterator<Item = &'a JobDoc>,
    cluster: &ClusterShape,
) -> Result<(), SpecErrors> {
    let errors: Vec<SpecError> = jobs.into_iter().filter_map(|job| check_job(job, cluster)).collect();
    if errors.is_empty() { Ok(()) } else { Err(SpecErrors(errors)) }
}

fn check_job(job: &JobDoc, cluster: &ClusterShape) -> Option<SpecError> {
    match &job.resources.gpu_model {
        Some(model) => match cluster.models.get(model) {
            Some(shape) => shape.excess(job, model).map(|(field, reason)| job.origin.error(field, reason)),
            None => Some(job.origin.error(Field::GpuModel, unknown_model(model, cluster))),
        },
        None => fits_any(job, cluster),
    }
}

fn unknown_model(model: &str, cluster: &ClusterShape) -> String {
    if cluster.models.is_empty() {
        return format!("unknown GPU model {}: the cluster has no GPU nodes", quote(model));
    }
    let known: Vec<&str> = cluster.models.keys().map(String::as_str).collect();
    format!("unknown GPU model {}; the cluster has: {}", quote(model), known.join(", "))
}

/// A job that names no model needs one model whose nodes can hold a replica.
fn fits_any(job: &JobDoc, cluster: &ClusterShape) -> Option<SpecError> {
    if cluster.models.values().any(|shape| shape.excess(job, "").is_none()) {
        return None;
    }
    let r = &job.resources;
    let largest = |dim: fn(&ModelShape) -> u64| cluster.models.values().map(dim).max().unwrap_or(0);
    let dims = [
        (Field::Gpus, u64::from(r.gpus), largest(|s| u64::from(s.gpus_per_node_max)), "GPUs"),
        (Field::Cpu, r.cpu_millis, largest(|s| s.cpu_millis_max), "millicores of CPU"),
        (Field::Memory, r.memory_mib, largest(|s| s.memory_mib_max), "MiB of memory"),
    ];
    let error = match dims.into_iter().find(|(_, want, have, _)| want > have) {
        Some((field, want, have, unit)) => job
            .origin
            .error(field, format!("a replica needs {want} {unit} but the largest node of any model has {have}")),
        None => job.origin.error(
            Field::Gpus,
            format!(
                "a replica needs {} GPUs, {} millicores and {} MiB together, and no GPU model's nodes have all three",
                r.gpus, r.cpu_millis, r.memory_mib
            ),
        ),
    };
    Some(error)
}
