//! The scheduling cycle: one numbered recipe, run by every driver the same way.

use std::collections::HashMap;
use std::ops::Bound;

use crate::config::ScoringPolicy;
use crate::decision::{Decision, PendingReason, StopCause};
use crate::placement::{Candidate, choose_nodes};
use crate::preemption::{PreemptionScope, VictimPlan};
use crate::scheduler::Scheduler;
use crate::state::{JobState, QueueKey, Reservation, Termination};
use crate::types::{
    AccountId, GpuModel, JobId, NodeId, Placement, PreemptionPolicy, Priority, ReplicaPlacement, Resources, Time,
};

/// What one cycle did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CycleOutcome {
    /// To carry out in order. Already applied to the core's state.
    pub decisions: Vec<Decision>,
    pub stats: CycleStats,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CycleStats {
    /// Pending jobs looked at.
    pub jobs_considered: u32,
    pub started: u32,
    pub victims_preempted: u32,
    pub preemption_searches: u32,
    /// Pending jobs left at the end of the cycle.
    pub pending: u32,
}

/// Jobs with the same shape get the same answer from placement within one cycle, because
/// free room only shrinks during a cycle. Kueue calls this equivalence hashing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Shape {
    model: Option<GpuModel>,
    per_replica: Resources,
    replicas: u32,
}

/// Per-cycle memory of answers already computed. Only looked up, never iterated, so the
/// `HashMap` order cannot reach a decision.
#[derive(Default)]
struct CycleMemo {
    no_fit: HashMap<Shape, ()>,
    /// Highest priority at which an unrestricted victim search for the shape failed.
    no_victims: HashMap<Shape, Priority>,
    never_fits: HashMap<Shape, bool>,
}

impl Scheduler {
    /// Run one scheduling cycle at `now`.
    ///
    /// 1. Hand out decisions that events produced since the last cycle (stops, requeues).
    /// 2. Stop running jobs whose run-time limit has passed.
    /// 3. Start preemptors whose victims have all exited, on the GPUs held for them.
    /// 4. Walk the pending queue in order (priority, then submit time, then id); for each job:
    ///    a. with backfill off, once one job is blocked every job behind it is blocked;
    ///    b. a job whose victims are still terminating keeps waiting for them;
    ///    c. a job that could never fit on any node says so;
    ///    d. a job over its account's quota waits, unless it can preempt its own
    ///       account's lower-priority work (step f, restricted to that account);
    ///    e. place on free GPUs if possible and start;
    ///    f. otherwise, if the policy and the job allow, preempt lower-priority work
    ///       (see `preemption.rs` for the order) and hold the freed GPUs for the job;
    ///    g. otherwise record why it is pending.
    /// 5. Check the invariants (debug builds; the simulator checks them in every build).
    pub fn cycle(&mut self, now: Time) -> CycleOutcome {
        self.counters.cycles += 1;
        let mut out = CycleOutcome { decisions: std::mem::take(&mut self.outbox), ..CycleOutcome::default() };
        self.enforce_runtime_limits(now, &mut out);
        self.start_ready_preemptors(now, &mut out);
        self.walk_queue(now, &mut out);
        out.stats.pending = self.queue.len() as u32;
        debug_assert_eq!(self.check_invariants(), Ok(()));
        out
    }

    /// Step 2.
    fn enforce_runtime_limits(&mut self, now: Time, out: &mut CycleOutcome) {
        while let Some(&(deadline, job)) = self.runtime_deadlines.first() {
            if deadline > now {
                break;
            }
            self.begin_termination(job, Termination::Stopped(StopCause::RuntimeLimit));
            out.decisions.push(Decision::Stop { job, cause: StopCause::RuntimeLimit });
        }
    }

    /// Step 3.
    fn start_ready_preemptors(&mut self, now: Time, out: &mut CycleOutcome) {
        let ready: Vec<JobId> = self
            .reserving
            .iter()
            .copied()
            .filter(|id| {
                let JobState::Pending { reservation: Some(r) } = &self.jobs[id].state else { unreachable!() };
                r.victims.iter().all(|v| self.jobs.get(v).is_none_or(|j| matches!(j.state, JobState::Pending { .. })))
            })
            .collect();
        for id in ready {
            let reservation = self.drop_reservation(id).expect("reserving job holds a reservation");
            self.start(id, reservation.placement.clone(), now);
            out.decisions.push(Decision::Start { job: id, placement: reservation.placement });
            out.stats.started += 1;
        }
    }

    /// Step 4.
    fn walk_queue(&mut self, now: Time, out: &mut CycleOutcome) {
        let limits = self.config.limits.clone();
        let policy = self.config.policy.clone();
        let mut memo = CycleMemo::default();
        let mut blocked_by: Option<(JobId, Priority)> = None;
        let mut cursor: Option<QueueKey> = None;
        let mut searches = 0u32;
        loop {
            let lower = cursor.map_or(Bound::Unbounded, Bound::Excluded);
            let Some(&key) = self.queue.range((lower, Bound::Unbounded)).next() else { break };
            cursor = Some(key);
            if out.stats.started >= limits.starts_per_cycle_max {
                break;
            }
            out.stats.jobs_considered += 1;
            let id = key.id;
            // a.
            if let Some((job, priority)) = blocked_by {
                self.set_reasons(id, vec![PendingReason::BlockedBehind { job, priority }]);
                continue;
            }
            let job = &self.jobs[&id];
            let spec = job.spec.clone();
            // b.
            if let JobState::Pending { reservation: Some(r) } = &job.state {
                let victims = self.still_terminating(&r.victims);
                self.set_reasons(id, vec![PendingReason::WaitingForPreemption { victims }]);
                if !policy.backfill {
                    blocked_by = Some((id, spec.priority));
                }
                continue;
            }
            let shape = Shape { model: spec.gpu_model, per_replica: spec.per_replica, replicas: spec.replicas };
            // c.
            let never =
                *memo.never_fits.entry(shape).or_insert_with(|| !self.any_node_holds(shape.model, shape.per_replica));
            if never {
                let reason =
                    PendingReason::NeverFits { gpus_per_replica: spec.per_replica.gpus, gpu_model: spec.gpu_model };
                self.set_reasons(id, vec![reason]);
                continue;
            }
            let may_preempt = policy.preemption && spec.preemption_policy == PreemptionPolicy::PreemptLowerPriority;
            // d.
            if let Some((account, reason)) = self.quota_shortfall(id) {
                let mut reasons = vec![reason];
                if may_preempt && searches < limits.preemption_attempts_per_cycle_max {
                    searches += 1;
                    out.stats.preemption_searches += 1;
                    if let Some(plan) = self.find_victims(id, PreemptionScope::Account(account), now) {
                        self.carry_out_preemption(id, plan, now, out);
                        continue;
                    }
                }
                reasons.truncate(1);
                self.set_reasons(id, reasons);
                continue;
            }
            // e.
            if !memo.no_fit.contains_key(&shape) {
                if let Some(chosen) = self.try_place(shape.model, shape.per_replica, shape.replicas) {
                    let placement = self.assign_slots(id, &chosen, spec.per_replica.gpus);
                    self.start(id, placement.clone(), now);
                    out.decisions.push(Decision::Start { job: id, placement });
                    out.stats.started += 1;
                    continue;
                }
                memo.no_fit.insert(shape, ());
            }
            // f.
            let mut reasons = vec![self.no_fit_reason(shape)];
            if !policy.preemption {
                // Nothing to add: the policy never preempts.
            } else if !may_preempt {
                reasons.push(PendingReason::PreemptionDisabled);
            } else if memo.no_victims.get(&shape).is_some_and(|p| *p >= spec.priority) {
                reasons.push(PendingReason::NoPreemptionCandidates);
            } else if searches >= limits.preemption_attempts_per_cycle_max {
                reasons.push(PendingReason::PreemptionBudgetExhausted);
            } else {
                searches += 1;
                out.stats.preemption_searches += 1;
                match self.find_victims(id, PreemptionScope::Any, now) {
                    Some(plan) => {
                        self.carry_out_preemption(id, plan, now, out);
                        if !policy.backfill {
                            blocked_by = Some((id, spec.priority));
                        }
                        continue;
                    }
                    None => {
                        memo.no_victims.insert(shape, spec.priority);
                        reasons.push(PendingReason::NoPreemptionCandidates);
                    }
                }
            }
            // g.
            self.set_reasons(id, reasons);
            if !policy.backfill {
                blocked_by = Some((id, spec.priority));
            }
        }
    }

    fn set_reasons(&mut self, id: JobId, reasons: Vec<PendingReason>) {
        self.jobs.get_mut(&id).expect("queued job is known").reasons = reasons;
    }

    fn still_terminating(&self, victims: &[JobId]) -> Vec<JobId> {
        victims
            .iter()
            .copied()
            .filter(|v| self.jobs.get(v).is_some_and(|j| matches!(j.state, JobState::Terminating { .. })))
            .collect()
    }

    /// The first of the job's accounts that starting it would take over quota.
    fn quota_shortfall(&self, id: JobId) -> Option<(AccountId, PendingReason)> {
        let job = &self.jobs[&id];
        let total = job.spec.total();
        job.accounts().find_map(|account| {
            let (resource, used, limit) = self.accounts.get(&account)?.over_quota(total)?;
            let requested = resource.of(total);
            Some((account, PendingReason::OverQuota { account, resource, requested, used, limit }))
        })
    }

    fn any_node_holds(&self, model: Option<GpuModel>, per_replica: Resources) -> bool {
        self.nodes.values().any(|n| model.is_none_or(|m| m == n.spec.gpu_model) && per_replica.fits_in(n.spec.capacity))
    }

    fn no_fit_reason(&self, shape: Shape) -> PendingReason {
        let (gpus_free_max, nodes_matching) = self.index.summary(shape.model);
        PendingReason::NoFit {
            gpus_per_replica: shape.per_replica.gpus,
            replicas: shape.replicas,
            gpu_model: shape.model,
            gpus_free_max,
            nodes_matching,
        }
    }

    /// Free room on schedulable nodes for the job's shape: `(node, replicas)` or `None`.
    pub(crate) fn try_place(
        &self,
        model: Option<GpuModel>,
        per_replica: Resources,
        replicas: u32,
    ) -> Option<Vec<(NodeId, u32)>> {
        let candidates = self.free_candidates(model, per_replica, replicas);
        choose_nodes(&candidates, per_replica, replicas, self.config.policy.scoring)
    }

    /// Candidate nodes from the free index. One replica: walk GPU levels in the scoring
    /// policy's preferred direction and stop at the first level with a feasible node (GPU
    /// fit dominates the score), scoring at most `candidate_nodes_scored_max`. A gang: all
    /// nodes with room for at least one replica, since fewest-nodes needs the whole picture.
    fn free_candidates(&self, model: Option<GpuModel>, per_replica: Resources, replicas: u32) -> Vec<Candidate> {
        let lowest = per_replica.gpus;
        let highest = self.index.level_max();
        if lowest > highest {
            return Vec::new();
        }
        let spread_single = replicas == 1 && self.config.policy.scoring == ScoringPolicy::Spread;
        let levels: Box<dyn Iterator<Item = u32>> =
            if spread_single { Box::new((lowest..=highest).rev()) } else { Box::new(lowest..=highest) };
        let cap = self.config.limits.candidate_nodes_scored_max as usize;
        let mut out = Vec::new();
        for level in levels {
            for node_id in self.index.at_level(model, level) {
                let node = &self.nodes[&node_id];
                let available = node.available();
                if per_replica.fits_in(available) {
                    out.push(Candidate { node: node_id, available, capacity: node.spec.capacity });
                    if replicas == 1 && out.len() >= cap {
                        return out;
                    }
                }
            }
            if replicas == 1 && !out.is_empty() {
                return out;
            }
        }
        out
    }

    /// Issue the preemptions of a plan and hold the freed GPUs for the preemptor.
    fn carry_out_preemption(&mut self, id: JobId, plan: VictimPlan, now: Time, out: &mut CycleOutcome) {
        let per_replica_gpus = self.jobs[&id].spec.per_replica.gpus;
        let placement = self.assign_reserved_slots(id, &plan, per_replica_gpus);
        for &victim in &plan.victims {
            let deadline = now.plus_ms(self.jobs[&victim].spec.grace_ms);
            self.begin_termination(victim, Termination::Preempted { preemptor: id, deadline });
            out.decisions.push(Decision::Preempt { victim, preemptor: id, deadline });
            out.stats.victims_preempted += 1;
            self.counters.preemptions += 1;
        }
        self.reserve(id, Reservation { placement, victims: plan.victims.clone() });
        self.set_reasons(id, vec![PendingReason::WaitingForPreemption { victims: plan.victims }]);
    }

    /// Slots for a preemptor: free, unheld slots first, then the victims' slots.
    fn assign_reserved_slots(&self, id: JobId, plan: &VictimPlan, per_replica_gpus: u32) -> Placement {
        let mut replicas = Vec::new();
        for &(node_id, count) in &plan.chosen {
            let node = &self.nodes[&node_id];
            let need = (count * per_replica_gpus) as usize;
            let mut slots: Vec<u8> = node.pick_slots(need as u32, None);
            for (i, owner) in node.gpu_owner.iter().enumerate() {
                if slots.len() == need {
                    break;
                }
                if owner.is_some_and(|o| plan.victims.contains(&o)) && node.gpu_reserved[i].is_none() {
                    slots.push(i as u8);
                }
            }
            assert_eq!(slots.len(), need, "victim plan for {id} does not free enough GPUs on {node_id}");
            slots.sort();
            let g = per_replica_gpus as usize;
            for i in 0..count as usize {
                replicas.push(ReplicaPlacement { node: node_id, gpu_indices: slots[i * g..(i + 1) * g].to_vec() });
            }
        }
        Placement { replicas }
    }
}
