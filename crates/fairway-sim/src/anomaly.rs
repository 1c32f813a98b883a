//! The sharing anomaly of each member of a cohort: its jobs' mean wait in the shared
//! cluster against their mean wait alone on a private cluster of its nominal quota (the
//! same policy, its jobs only). A positive anomaly is a tenant worse off for sharing.
//!
//! The private cluster has the shared cluster's first node shape, as many whole nodes as
//! the nominal quota holds and one node for the rest (its CPU and memory in proportion). A
//! job too large for it never starts there and is left out of both means.

use std::collections::BTreeSet;

use fairway_core::{JobId, NodeId, NodeSpec, Resources};

use crate::engine::{EngineConfig, SimError, SimJob, simulate};
use crate::metrics::RunResult;
use crate::scenario::{Scenario, SimPolicy};

/// One member's figures.
#[derive(Clone, Debug, PartialEq)]
pub struct Anomaly {
    pub tenant: String,
    pub nominal_gpus: u32,
    /// Jobs that started in both runs (the means are over them).
    pub jobs: usize,
    pub shared_wait_mean_s: f64,
    pub alone_wait_mean_s: f64,
}

impl Anomaly {
    /// Shared less alone: what sharing cost (positive) or gave (negative) the tenant.
    pub fn anomaly_s(&self) -> f64 {
        self.shared_wait_mean_s - self.alone_wait_mean_s
    }
}

/// Each member of the policy's cohorts, by tenant name: its run alone beside `shared`.
pub fn sharing_anomaly(
    scenario: &Scenario,
    policy: &SimPolicy,
    shared: &RunResult,
    config: &EngineConfig,
) -> Result<Vec<Anomaly>, SimError> {
    let shape = scenario.nodes.first().expect("a scenario has nodes");
    let mut out = Vec::new();
    for (project, nominal) in &policy.nominals {
        let nominal_gpus = nominal.nominal.gpus_max.unwrap_or(0);
        let mine: Vec<&SimJob> = scenario.jobs.iter().filter(|j| j.spec.project == *project).collect();
        let Some(first) = mine.first() else { continue };
        let tenant = first.tenant.to_string();
        if nominal_gpus == 0 {
            continue;
        }
        let jobs: Vec<SimJob> = mine
            .iter()
            .enumerate()
            .map(|(k, j)| {
                let mut job = (*j).clone();
                job.spec.id = JobId(k as u64);
                job
            })
            .collect();
        let nodes = private_cluster(shape, nominal_gpus);
        let alone_config = EngineConfig { nominals: Vec::new(), ..config.clone() };
        let alone = simulate(&policy.name, &jobs, &nodes, &[], &alone_config, &mut |_, _| {})?;
        let started_alone: BTreeSet<&str> =
            alone.records.iter().filter(|r| r.first_start_ms.is_some()).map(|r| &*r.name).collect();
        let wait = |run: &RunResult| {
            let waits: Vec<u64> = run
                .records
                .iter()
                .filter(|r| &*r.tenant == tenant.as_str() && started_alone.contains(&*r.name))
                .filter_map(|r| r.first_start_ms.map(|s| s - r.submit_ms))
                .collect();
            (waits.len(), waits.iter().sum::<u64>() as f64 / 1000.0 / waits.len().max(1) as f64)
        };
        let (jobs_counted, shared_wait_mean_s) = wait(shared);
        let (_, alone_wait_mean_s) = wait(&alone);
        out.push(Anomaly { tenant, nominal_gpus, jobs: jobs_counted, shared_wait_mean_s, alone_wait_mean_s });
    }
    out.sort_by(|a, b| a.tenant.cmp(&b.tenant));
    Ok(out)
}

/// Nodes of `shape` holding `gpus` in all: whole nodes, then one for the rest.
fn private_cluster(shape: &NodeSpec, gpus: u32) -> Vec<NodeSpec> {
    let per = shape.capacity.gpus.max(1);
    let mut nodes = Vec::new();
    let mut left = gpus;
    while left > 0 {
        let here = left.min(per);
        let scale = |v: u64| v * u64::from(here) / u64::from(per);
        let capacity = Resources::new(here, scale(shape.capacity.cpu_millis), scale(shape.capacity.memory_mib));
        nodes.push(NodeSpec { id: NodeId(nodes.len() as u32), gpu_model: shape.gpu_model, capacity });
        left -= here;
    }
    nodes
}
