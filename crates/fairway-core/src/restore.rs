//! Taking back jobs a driver knew before the core (re)started: the daemon's restart
//! recovery. A pending job returns to its original queue position; a running one keeps
//! exactly the GPUs it holds, even if a cap has since been lowered (it may drain, not grow).

use crate::event::{RestoredHold, RestoredJob, RestoredStop};
use crate::ids::JobIx;
use crate::model::{JobState, Reservation, Termination};
use crate::scheduler::{CoreError, Scheduler};
use crate::types::{GpuSet, JobSpec, NodeId, Placement};

impl Scheduler {
    /// 1. Check the placement against the nodes (before anything changes).
    /// 2. Queue the job at its original submit time.
    /// 3. If it runs, start it where it is, as of its start time, and let its accounts keep
    ///    what it holds.
    /// 4. If it was being stopped, it is on its way out again, with its original deadline.
    pub(crate) fn restore(&mut self, restored: RestoredJob) -> Result<(), CoreError> {
        let RestoredJob { spec, submitted_at, runtime_done_ms, preemptions, preempted_at, last_checkpoint, running } =
            restored;
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
        // Before it starts: rule 1's protection of the run counts these. A job preempted
        // before re-entered the queue about when it was last chosen as a victim (its grace
        // period later): rule 1's delay counts from then.
        let mut preempted_at = preempted_at;
        preempted_at.sort_unstable();
        job.queued_at = preempted_at.last().map_or(submitted_at, |&at| at.max(submitted_at));
        for at in preempted_at {
            job.record_preemption(at);
        }
        if let Some(run) = running {
            self.start(ix, run.placement, run.started_at);
            self.counters.starts -= 1;
            self.grandfather_accounts_of(ix);
            match run.stopping {
                None => {}
                Some(RestoredStop::Preempted { preemptor, deadline }) => {
                    self.begin_termination(ix, Termination::Preempted { preemptor, deadline });
                }
                Some(RestoredStop::Stopped(cause)) => self.begin_termination(ix, Termination::Stopped(cause)),
            }
        }
        Ok(())
    }

    /// Gives a restored pending preemptor its hold back (see [`RestoredHold`]).
    pub(crate) fn restore_hold(&mut self, hold: RestoredHold) -> Result<(), CoreError> {
        let RestoredHold { preemptor, placement, victims } = hold;
        let invalid = |reason: String| Err(CoreError::InvalidJob { job: preemptor, reason });
        let Some(ix) = self.jobs.ix_of(preemptor) else { return Err(CoreError::UnknownJob(preemptor)) };
        let job = &self.jobs[ix];
        if !matches!(job.state, JobState::Pending { reservation: None }) || job.queued_in.is_none() {
            return invalid("only a queued job without a hold can get one back".into());
        }
        if placement.replicas().len() != job.spec.replicas as usize
            || placement.replicas().iter().any(|r| r.gpus.len() != job.spec.per_replica.slots_per_replica())
        {
            return invalid("the hold does not have the job's shape".into());
        }
        let leaving = self.still_terminating(preemptor, &victims);
        for replica in placement.replicas() {
            let Some(node) = self.nodes.get(replica.node) else {
                return invalid(format!("the hold names unknown {}", replica.node));
            };
            if self.jobs[ix].spec.gpu_model.is_some_and(|m| m != node.spec.gpu_model)
                || !self.jobs[ix].spec.per_replica.as_whole_gpus().fits_in(node.spec.capacity)
            {
                return invalid(format!("the hold does not fit on {}", replica.node));
            }
            // Per GPU, the thousandths its leaving victims free there.
            let mut victims_free = vec![0u32; node.spec.capacity.gpus as usize];
            for v in leaving.iter().filter_map(|v| self.jobs.get(*v)) {
                let JobState::Terminating { placement, .. } = &v.state else { continue };
                let share = v.spec.per_replica.gpu_milli;
                for slot in crate::scheduler::slots_on(placement, replica.node).iter() {
                    victims_free[slot as usize] += if share > 0 { share } else { 1000 };
                }
            }
            if replica.gpus.iter().any(|slot| slot >= node.spec.capacity.gpus) {
                return invalid(format!("the hold names GPUs {} that {} lacks", replica.gpus, replica.node));
            }
            // What each GPU has free once they are gone; a share's GPU may keep other shares.
            let now_free = node.slot_free();
            let free_after = |slot: u32| (u32::from(now_free[slot as usize]) + victims_free[slot as usize]).min(1000);
            let per_replica = self.jobs[ix].spec.per_replica;
            let wants = if per_replica.is_share() { per_replica.gpu_milli } else { 1000 };
            if !replica.gpus.is_disjoint(node.held) || replica.gpus.iter().any(|slot| free_after(slot) < wants) {
                return invalid(format!("GPUs {} on {} are no longer free for it", replica.gpus, replica.node));
            }
        }
        let waiting = leaving.len() as u32;
        self.reserve(ix, Reservation { placement, victims: leaving, waiting, charged: Default::default() });
        // The hold was granted under the caps of its time: it keeps what it holds, as a
        // restored run does.
        self.grandfather_accounts_of(ix);
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
            let wants = spec.per_replica.slots_per_replica();
            if replica.gpus.len() != wants {
                return invalid(format!("{} GPUs on {}, spec {wants}", replica.gpus.len(), replica.node));
            }
            if spec.gpu_model.is_some_and(|m| m != node.spec.gpu_model) {
                return invalid(format!("{} has another GPU model than the job asks for", replica.node));
            }
            let listed_before =
                seen.iter().filter(|(n, _)| *n == replica.node).fold(GpuSet::EMPTY, |acc, (_, g)| acc.union(*g));
            let share = spec.per_replica.gpu_milli;
            // A share may join others on a slot that has room; a whole GPU needs a free one.
            let shareable = if share > 0 { node.shared.minus(node.held) } else { GpuSet::EMPTY };
            let taken = node.owned.union(node.held).union(listed_before).minus(shareable);
            for slot in replica.gpus.iter() {
                if shareable.contains(slot) && u32::from(node.shares[slot as usize]) + share > 1000 {
                    return invalid(format!("GPU {slot} on {} has no room left for a share of {share}", replica.node));
                }
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

    /// A restored running job or hold may hold more than a cap now allows: keep it, as
    /// `SetQuota` does for a lowered cap.
    fn grandfather_accounts_of(&mut self, ix: JobIx) {
        let job = &self.jobs[ix];
        debug_assert!(matches!(job.state, JobState::Running { .. } | JobState::Pending { reservation: Some(_) }));
        for account in self.charged_accounts(ix) {
            self.ledger.grandfather_if_over(account);
        }
    }
}
