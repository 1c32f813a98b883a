//! Invariant checks: cheap enough to run after every cycle in tests and the simulator
//! (cost proportional to running jobs and GPU slots, not to the pending queue).

use std::collections::BTreeMap;

use crate::scheduler::Scheduler;
use crate::state::JobState;
use crate::types::{AccountId, JobId, NodeId, Resources};

impl Scheduler {
    /// Check every invariant; `Err` names the first one broken.
    ///
    /// - No GPU is assigned twice: each slot's owner lists the slot in its placement, and
    ///   no two placements share a slot.
    /// - Gangs are whole: every placed job has exactly `replicas` replicas of
    ///   `per_replica.gpus` GPUs each.
    /// - Usage is within quota: what is charged to each account (running jobs and
    ///   reservations) matches the jobs and is within its cap (or the grandfathered usage).
    /// - Reserved GPUs belong to exactly one preemptor, which is pending and lists them.
    /// - The pending queue's indexes agree with its groups (every sleeping group is
    ///   indexed under what wakes it).
    pub fn check_invariants(&self) -> Result<(), String> {
        self.queue.check()?;
        let mut owner_seen: BTreeMap<(NodeId, u8), JobId> = BTreeMap::new();
        let mut held_seen: BTreeMap<(NodeId, u8), JobId> = BTreeMap::new();
        let mut charged: BTreeMap<AccountId, Resources> = BTreeMap::new();
        let mut node_used: BTreeMap<NodeId, Resources> = BTreeMap::new();
        let mut node_reserved: BTreeMap<NodeId, Resources> = BTreeMap::new();
        let placed = self.running.iter().map(|(_, id)| *id).chain(self.terminating.iter().copied());
        for id in placed {
            let job = self.jobs.get(&id).ok_or(format!("{id} indexed but not held"))?;
            let (placement, is_charged) = match &job.state {
                JobState::Running { placement, .. } => (placement, true),
                JobState::Terminating { placement, .. } => (placement, false),
                JobState::Pending { .. } => return Err(format!("{id} indexed as placed but pending")),
            };
            if placement.replicas.len() != job.spec.replicas as usize {
                return Err(format!(
                    "gang {id} has {} of {} replicas placed",
                    placement.replicas.len(),
                    job.spec.replicas
                ));
            }
            for r in &placement.replicas {
                if r.gpu_indices.len() != job.spec.per_replica.gpus as usize {
                    return Err(format!(
                        "{id} replica on {} has {} GPUs, wants {}",
                        r.node,
                        r.gpu_indices.len(),
                        job.spec.per_replica.gpus
                    ));
                }
                let used = node_used.entry(r.node).or_default();
                *used = used.plus(job.spec.per_replica);
                for &slot in &r.gpu_indices {
                    if let Some(other) = owner_seen.insert((r.node, slot), id) {
                        return Err(format!("GPU {slot} on {} assigned to {other} and {id}", r.node));
                    }
                    let node = self.nodes.get(&r.node).ok_or(format!("{id} placed on unknown {}", r.node))?;
                    if node.gpu_owner.get(slot as usize).copied().flatten() != Some(id) {
                        return Err(format!("GPU {slot} on {} does not record owner {id}", r.node));
                    }
                }
            }
            if is_charged {
                for a in job.accounts() {
                    let c = charged.entry(a).or_default();
                    *c = c.plus(job.spec.total());
                }
            }
        }
        for &id in &self.reserving {
            let job = self.jobs.get(&id).ok_or(format!("reserving {id} not held"))?;
            let JobState::Pending { reservation: Some(res) } = &job.state else {
                return Err(format!("{id} listed as reserving without a reservation"));
            };
            if res.placement.replicas.len() != job.spec.replicas as usize {
                return Err(format!("reservation of {id} is not a whole gang"));
            }
            for r in &res.placement.replicas {
                let e = node_reserved.entry(r.node).or_default();
                *e = e.plus(job.spec.per_replica);
                for &slot in &r.gpu_indices {
                    if let Some(other) = held_seen.insert((r.node, slot), id) {
                        return Err(format!("GPU {slot} on {} held for {other} and {id}", r.node));
                    }
                }
            }
            for a in job.accounts() {
                let c = charged.entry(a).or_default();
                *c = c.plus(job.spec.total());
            }
        }
        for (node_id, node) in &self.nodes {
            for (slot, owner) in node.gpu_owner.iter().enumerate() {
                if let Some(o) = owner
                    && owner_seen.get(&(*node_id, slot as u8)) != Some(o)
                {
                    return Err(format!("GPU {slot} on {node_id} owned by {o}, which does not list it"));
                }
            }
            for (slot, held) in node.gpu_reserved.iter().enumerate() {
                if let Some(h) = held
                    && held_seen.get(&(*node_id, slot as u8)) != Some(h)
                {
                    return Err(format!("GPU {slot} on {node_id} held for {h}, which does not list it"));
                }
            }
            if node.used != node_used.get(node_id).copied().unwrap_or_default() {
                return Err(format!("{node_id} used {} disagrees with its jobs", node.used));
            }
            if node.reserved != node_reserved.get(node_id).copied().unwrap_or_default() {
                return Err(format!("{node_id} reserved {} disagrees with reservations", node.reserved));
            }
            if node.used.gpus > node.spec.capacity.gpus {
                return Err(format!("{node_id} over GPU capacity"));
            }
        }
        for (id, account) in &self.accounts {
            let expected = charged.get(id).copied().unwrap_or_default();
            if account.charged != expected {
                return Err(format!("{id} charged {} but its jobs add up to {expected}", account.charged));
            }
            if !account.within_quota() {
                return Err(format!("{id} charged {} over its quota {:?}", account.charged, account.quota));
            }
        }
        Ok(())
    }
}
