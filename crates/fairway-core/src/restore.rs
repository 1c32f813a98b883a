//! Taking back jobs a driver knew before the core (re)started: the daemon's restart
//! recovery. A pending job returns to its original queue position; a running one keeps
//! exactly the GPUs it holds, even if a cap has since been lowered (it may drain, not grow).

use crate::event::RestoredJob;
use crate::jobs::JobIx;
use crate::scheduler::{CoreError, Scheduler};
use crate::state::JobState;
use crate::types::{GpuSet, JobSpec, NodeId, Placement};

impl Scheduler {
    /// 1. Check the placement against the nodes (before anything changes).
    /// 2. Queue the job at its original submit time.
    /// 3. If it runs, start it where it is, as of its start time, and let its accounts keep
    ///    what it holds.
    pub(crate) fn restore(&mut self, restored: RestoredJob) -> Result<(), CoreError> {
        let RestoredJob { spec, submitted_at, runtime_done_ms, preemptions, last_checkpoint, running } = restored;
        let id = spec.id;
        if let Some(run) = &running {
            self.check_restored_placement(&spec, &run.placement)?;
        }
        self.submit(spec, submitted_at)?;
        let ix = self.jobs.ix_of(id).expect("just submitted");
        let job = &mut self.jobs[ix];
        job.runtime_done_ms = runtime_done_ms;
        job.preemptions = preemptions;
        job.last_checkpoint = last_checkpoint;
        if let Some(run) = running {
            self.start(ix, run.placement, run.started_at);
            self.counters.starts -= 1;
            self.grandfather_accounts_of(ix);
        }
        Ok(())
    }

    fn check_restored_placement(&self, spec: &JobSpec, placement: &Placement) -> Result<(), CoreError> {
        let invalid = |reason: String| Err(CoreError::InvalidJob { job: spec.id, reason });
        let replicas = placement.replicas();
        if replicas.len() != spec.replicas as usize {
            return invalid(format!("placement has {} replicas, spec {}", replicas.len(), spec.replicas));
        }
        let mut seen: Vec<(NodeId, GpuSet)> = Vec::new();
        for replica in replicas {
            let Some(node) = self.nodes.get(replica.node) else {
                return invalid(format!("placement names unknown {}", replica.node));
            };
            if replica.gpus.len() != spec.per_replica.gpus {
                return invalid(format!(
                    "{} GPUs on {}, spec {}",
                    replica.gpus.len(),
                    replica.node,
                    spec.per_replica.gpus
                ));
            }
            if spec.gpu_model.is_some_and(|m| m != node.spec.gpu_model) {
                return invalid(format!("{} has another GPU model than the job asks for", replica.node));
            }
            let listed_before =
                seen.iter().filter(|(n, _)| *n == replica.node).fold(GpuSet::EMPTY, |acc, (_, g)| acc.union(*g));
            let taken = node.owned.union(node.held).union(listed_before);
            for slot in replica.gpus.iter() {
                if slot >= node.spec.capacity.gpus {
                    return invalid(format!("GPU {slot} does not exist on {}", replica.node));
                }
                if taken.contains(slot) {
                    return invalid(format!("GPU {slot} on {} is already assigned", replica.node));
                }
            }
            seen.push((replica.node, replica.gpus));
        }
        Ok(())
    }

    /// A restored running job may hold more than a cap now allows: keep it, as
    /// `SetQuota` does for a lowered cap.
    fn grandfather_accounts_of(&mut self, ix: JobIx) {
        let job = &self.jobs[ix];
        debug_assert!(matches!(job.state, JobState::Running { .. }));
        for account in job.accounts() {
            let account = self.accounts.get_mut(&account).expect("charged by start");
            if !account.within_quota() {
                account.grandfathered = account.charged;
            }
        }
    }
}
