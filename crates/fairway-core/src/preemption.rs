//! The victim search: which running jobs give way to a pending one.
//!
//! # Preemption order
//!
//! 1. **Eligibility.** Only running jobs that are preemptible and of *strictly lower*
//!    priority are candidates; equal or higher priority is never preempted. A job whose
//!    `preemptionPolicy` is `Never` preempts nobody. A job over its account's quota may
//!    preempt only lower-priority work charged to that same account, and only if that
//!    brings it back within the cap.
//! 2. **Lowest priority first.** A set whose highest-priority victim is lower wins.
//! 3. **Least work lost.** Then the set losing the least GPU-time since each victim's last
//!    checkpoint (reported, or implied by its checkpoint interval, or its start): the most
//!    recently started or checkpointed jobs go first.
//! 4. **Fewest GPUs freed beyond need.** Victims that are not needed are dropped (the set
//!    is minimal), and among nodes the one where the set frees the least excess wins.
//! 5. **Stable ties.** Then fewer victims, then the most recently submitted victim (highest
//!    id) first, then the lowest node id.
//! 6. **Bounded.** At most `victims_per_preemption_max` victims and
//!    `victim_candidates_max` candidates examined; beyond that the job does not preempt.
//!
//! Every rule has its own scenario test in `tests/it/scenarios/`.

use std::cmp::Reverse;
use std::collections::BTreeMap;

use crate::placement::{Candidate, choose_nodes};
use crate::scheduler::Scheduler;
use crate::state::JobState;
use crate::types::{AccountId, JobId, NodeId, Priority, ResourceKind, Resources, Time};

/// Whose work a preemptor may take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PreemptionScope {
    /// Any lower-priority work (the job is within quota).
    Any,
    /// Only work charged to this account (the job is over that account's quota).
    Account(AccountId),
}

/// The victims and where the preemptor will run once they are gone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct VictimPlan {
    pub victims: Vec<JobId>,
    pub chosen: Vec<(NodeId, u32)>,
}

/// A running job considered as a victim.
#[derive(Clone, Debug)]
struct Victim {
    id: JobId,
    priority: Priority,
    lost_gpu_ms: u64,
    total: Resources,
    /// Resources it frees on each node.
    frees: Vec<(NodeId, Resources)>,
}

impl Victim {
    /// Rules 2, 3 and 5: the order in which victims are taken.
    fn order_key(&self) -> (Priority, u64, Reverse<JobId>) {
        (self.priority, self.lost_gpu_ms, Reverse(self.id))
    }
}

/// Rules 2–5 for comparing whole victim sets: lower is better.
type SetCost = (Priority, u64, u32, usize, NodeId);

impl Scheduler {
    pub(crate) fn find_victims(&self, id: JobId, scope: PreemptionScope, now: Time) -> Option<VictimPlan> {
        let job = &self.jobs[&id];
        let victims = self.victim_candidates(id, scope, now);
        if victims.is_empty() {
            return None;
        }
        let single = job.spec.replicas == 1 && scope == PreemptionScope::Any;
        if single { self.best_single_node_set(id, &victims) } else { self.greedy_set(id, scope, &victims) }
    }

    /// Rule 1 and the candidate bound; sorted by rules 2, 3 and 5.
    fn victim_candidates(&self, id: JobId, scope: PreemptionScope, now: Time) -> Vec<Victim> {
        let job = &self.jobs[&id];
        let limit = self.config.limits.victim_candidates_max as usize;
        let mut out = Vec::new();
        for &(priority, vid) in &self.running {
            if priority >= job.spec.priority || out.len() >= limit {
                break;
            }
            let victim = &self.jobs[&vid];
            if !victim.spec.preemptible {
                continue;
            }
            if let PreemptionScope::Account(account) = scope {
                if !victim.accounts().any(|a| a == account) {
                    continue;
                }
            }
            let JobState::Running { placement, started_at } = &victim.state else { unreachable!("running index") };
            let frees = self.frees_on_eligible_nodes(job.spec.gpu_model, victim.spec.per_replica, placement);
            // A victim on no node the job can use frees nothing for it, unless the job
            // needs the victim's quota rather than its GPUs.
            if frees.is_empty() && scope == PreemptionScope::Any {
                continue;
            }
            let saved = victim.last_progress_saved(*started_at, now);
            out.push(Victim {
                id: vid,
                priority,
                lost_gpu_ms: now.ms_since(saved) * u64::from(victim.spec.total().gpus.max(1)),
                total: victim.spec.total(),
                frees,
            });
        }
        out.sort_by_key(Victim::order_key);
        out
    }

    fn frees_on_eligible_nodes(
        &self,
        model: Option<crate::types::GpuModel>,
        per_replica: Resources,
        placement: &crate::types::Placement,
    ) -> Vec<(NodeId, Resources)> {
        let mut frees: BTreeMap<NodeId, Resources> = BTreeMap::new();
        for replica in &placement.replicas {
            let node = &self.nodes[&replica.node];
            if node.schedulable && model.is_none_or(|m| m == node.spec.gpu_model) {
                let entry = frees.entry(replica.node).or_default();
                *entry = entry.plus(per_replica);
            }
        }
        frees.into_iter().collect()
    }

    /// One replica: for each node, the cheapest minimal set on that node; then the best node.
    fn best_single_node_set(&self, id: JobId, victims: &[Victim]) -> Option<VictimPlan> {
        let demand = self.jobs[&id].spec.per_replica;
        let max_victims = self.config.limits.victims_per_preemption_max as usize;
        let mut by_node: BTreeMap<NodeId, Vec<(&Victim, Resources)>> = BTreeMap::new();
        for v in victims {
            for &(node, freed) in &v.frees {
                by_node.entry(node).or_default().push((v, freed));
            }
        }
        let mut best: Option<(SetCost, Vec<JobId>, NodeId)> = None;
        for (node_id, on_node) in by_node {
            let available = self.nodes[&node_id].available();
            let Some(set) = minimal_prefix(available, demand, &on_node, max_victims) else { continue };
            let freed_gpus: u32 = set.iter().map(|(_, r)| r.gpus).sum();
            let cost: SetCost = (
                set.iter().map(|(v, _)| v.priority).max().expect("non-empty"),
                set.iter().map(|(v, _)| v.lost_gpu_ms).sum(),
                (available.gpus + freed_gpus).saturating_sub(demand.gpus),
                set.len(),
                node_id,
            );
            if best.as_ref().is_none_or(|(c, _, _)| cost < *c) {
                best = Some((cost, set.iter().map(|(v, _)| v.id).collect(), node_id));
            }
        }
        let (_, mut victims, node) = best?;
        victims.sort();
        Some(VictimPlan { victims, chosen: vec![(node, 1)] })
    }

    /// Gangs and quota-bound preemptors: take victims in order until the job fits, then drop
    /// every victim that is not needed (most costly first).
    fn greedy_set(&self, id: JobId, scope: PreemptionScope, victims: &[Victim]) -> Option<VictimPlan> {
        let max_victims = self.config.limits.victims_per_preemption_max as usize;
        let mut taken: Vec<&Victim> = Vec::new();
        let mut fits = None;
        for v in victims {
            if taken.len() == max_victims {
                return None;
            }
            taken.push(v);
            fits = self.fits_without(id, scope, &taken);
            if fits.is_some() {
                break;
            }
        }
        fits?;
        let mut i = taken.len();
        while i > 0 {
            i -= 1;
            let mut fewer = taken.clone();
            fewer.remove(i);
            if self.fits_without(id, scope, &fewer).is_some() {
                taken = fewer;
            }
        }
        let chosen = self.fits_without(id, scope, &taken).expect("minimal set still fits");
        let mut ids: Vec<JobId> = taken.iter().map(|v| v.id).collect();
        ids.sort();
        Some(VictimPlan { victims: ids, chosen })
    }

    /// Where the job would go if `gone` had left, respecting quota for a bound preemptor.
    fn fits_without(&self, id: JobId, scope: PreemptionScope, gone: &[&Victim]) -> Option<Vec<(NodeId, u32)>> {
        let job = &self.jobs[&id];
        if let PreemptionScope::Account(account) = scope {
            let freed = gone.iter().fold(Resources::ZERO, |acc, v| acc.plus(v.total));
            let a = &self.accounts[&account];
            let quota = a.quota.expect("bound preemptor's account has a quota");
            let total = job.spec.total();
            let ok = ResourceKind::ALL.into_iter().all(|k| {
                quota.limit(k).is_none_or(|limit| k.of(a.charged).saturating_sub(k.of(freed)) + k.of(total) <= limit)
            });
            if !ok {
                return None;
            }
        }
        let mut freed: BTreeMap<NodeId, Resources> = BTreeMap::new();
        for v in gone {
            for &(node, r) in &v.frees {
                let e = freed.entry(node).or_default();
                *e = e.plus(r);
            }
        }
        let candidates: Vec<Candidate> = self
            .nodes
            .values()
            .filter(|n| n.schedulable && job.spec.gpu_model.is_none_or(|m| m == n.spec.gpu_model))
            .map(|n| Candidate {
                node: n.spec.id,
                available: n.available().plus(freed.get(&n.spec.id).copied().unwrap_or_default()),
                capacity: n.spec.capacity,
            })
            .collect();
        choose_nodes(&candidates, job.spec.per_replica, job.spec.replicas, self.config.policy.scoring)
    }
}

/// Take victims on one node in order until `demand` fits, then drop the ones not needed
/// (most costly first). `None` when even all of them (within the bound) are not enough.
fn minimal_prefix<'a>(
    available: Resources,
    demand: Resources,
    on_node: &[(&'a Victim, Resources)],
    max_victims: usize,
) -> Option<Vec<(&'a Victim, Resources)>> {
    let mut taken: Vec<(&Victim, Resources)> = Vec::new();
    let mut room = available;
    for &(v, freed) in on_node {
        if demand.fits_in(room) {
            break;
        }
        if taken.len() == max_victims {
            return None;
        }
        taken.push((v, freed));
        room = room.plus(freed);
    }
    if !demand.fits_in(room) {
        return None;
    }
    let mut i = taken.len();
    while i > 0 {
        i -= 1;
        let without = room.minus(taken[i].1);
        if demand.fits_in(without) {
            room = without;
            taken.remove(i);
        }
    }
    Some(taken)
}
