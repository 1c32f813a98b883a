//! Invariant checks: cheap enough to run after every cycle in tests and the simulator.
//! Cost is linear in nodes, GPU slots, placed jobs, reservations and accounts, with no
//! per-slot map: a slot is checked by looking at the node's own record of its owner, and
//! per-node and per-account sums go into vectors found by binary search over the (few,
//! sorted) node and account ids.

use crate::scheduler::{RunningEntry, Scheduler};
use crate::state::JobState;
use crate::types::{AccountId, JobId, JobSpec, NodeId, Placement, Priority, Resources};

/// What the placements and reservations add up to on one node.
#[derive(Clone, Copy, Default)]
struct NodeSums {
    used: Resources,
    reserved: Resources,
    /// GPU slots listed by placements (each checked to be owned by the job listing it).
    owned_slots: SlotSet,
    /// GPU slots listed by reservations (each checked to be held for the job listing it).
    held_slots: SlotSet,
}

/// A set of GPU slot indices (`u8`, so 256 bits cover them all).
#[derive(Clone, Copy, Default, PartialEq, Eq)]
struct SlotSet([u64; 4]);

impl SlotSet {
    /// Add a slot; false if it was already there.
    fn insert(&mut self, slot: u8) -> bool {
        let (word, bit) = (slot as usize / 64, 1u64 << (slot % 64));
        let fresh = self.0[word] & bit == 0;
        self.0[word] |= bit;
        fresh
    }

    fn of<T>(slots: &[Option<T>]) -> SlotSet {
        let mut set = SlotSet::default();
        for (i, _) in slots.iter().enumerate().filter(|(_, s)| s.is_some()) {
            set.insert(i as u8);
        }
        set
    }
}

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
    ///
    /// How "no slot twice" is shown without a map of slots: every slot a placement lists
    /// must record that job as its owner and be listed once on its node (a bit set per
    /// node), and the slots listed on a node must be exactly those that record an owner.
    /// The same goes for held slots.
    pub fn check_invariants(&self) -> Result<(), String> {
        self.queue.check()?;
        let node_ids: Vec<NodeId> = self.nodes.keys().copied().collect();
        let account_ids: Vec<AccountId> = self.accounts.keys().copied().collect();
        let mut nodes = vec![NodeSums::default(); node_ids.len()];
        let mut charged = vec![Resources::ZERO; account_ids.len()];
        let charge = |charged: &mut Vec<Resources>, id: JobId, a: AccountId, r: Resources| {
            let i = account_ids.binary_search(&a).map_err(|_| format!("{id} charged to unknown {a}"))?;
            charged[i] = charged[i].plus(r);
            Ok::<(), String>(())
        };
        let placed = self.running.keys().map(|(_, id)| *id).chain(self.terminating.iter().copied());
        for id in placed {
            let job = self.jobs.get(&id).ok_or_else(|| format!("{id} indexed but not held"))?;
            let (placement, is_charged) = match &job.state {
                JobState::Running { placement, .. } => (placement, true),
                JobState::Terminating { placement, .. } => (placement, false),
                JobState::Pending { .. } => return Err(format!("{id} indexed as placed but pending")),
            };
            check_gang(id, &job.spec, placement, "placed")?;
            for r in &placement.replicas {
                let i = node_ids.binary_search(&r.node).map_err(|_| format!("{id} placed on unknown {}", r.node))?;
                let node = &self.nodes[&r.node];
                let sums = &mut nodes[i];
                for &slot in &r.gpu_indices {
                    if node.gpu_owner.get(slot as usize).copied().flatten() != Some(id) {
                        return Err(format!("GPU {slot} on {} does not record owner {id}", r.node));
                    }
                    if !sums.owned_slots.insert(slot) {
                        return Err(format!("GPU {slot} on {} is listed twice by {id}", r.node));
                    }
                }
                sums.used = sums.used.plus(job.spec.per_replica);
            }
            if is_charged {
                for a in job.accounts() {
                    charge(&mut charged, id, a, job.spec.total())?;
                }
            }
        }
        self.check_running_index()?;
        for &id in &self.reserving {
            let job = self.jobs.get(&id).ok_or_else(|| format!("reserving {id} not held"))?;
            let JobState::Pending { reservation: Some(res) } = &job.state else {
                return Err(format!("{id} listed as reserving without a reservation"));
            };
            check_gang(id, &job.spec, &res.placement, "reserved")?;
            for r in &res.placement.replicas {
                let i = node_ids.binary_search(&r.node).map_err(|_| format!("{id} holds on unknown {}", r.node))?;
                let node = &self.nodes[&r.node];
                let sums = &mut nodes[i];
                for &slot in &r.gpu_indices {
                    if node.gpu_reserved.get(slot as usize).copied().flatten() != Some(id) {
                        return Err(format!("GPU {slot} on {} is not recorded as held for {id}", r.node));
                    }
                    if !sums.held_slots.insert(slot) {
                        return Err(format!("GPU {slot} on {} is held twice by {id}", r.node));
                    }
                }
                sums.reserved = sums.reserved.plus(job.spec.per_replica);
            }
            for a in job.accounts() {
                charge(&mut charged, id, a, job.spec.total())?;
            }
        }
        for ((node_id, node), sums) in self.nodes.iter().zip(&nodes) {
            if SlotSet::of(&node.gpu_owner) != sums.owned_slots {
                return Err(format!("{node_id} has a GPU whose recorded owner does not list it"));
            }
            if SlotSet::of(&node.gpu_reserved) != sums.held_slots {
                return Err(format!("{node_id} has a GPU recorded as held that no reservation lists"));
            }
            if node.available_gpus() != node.count_available_gpus() {
                return Err(format!(
                    "{node_id} counts {} GPUs available, its slots say otherwise",
                    node.available_gpus()
                ));
            }
            if node.used != sums.used {
                return Err(format!("{node_id} used {} disagrees with its jobs", node.used));
            }
            if node.reserved != sums.reserved {
                return Err(format!("{node_id} reserved {} disagrees with reservations", node.reserved));
            }
            if node.used.gpus > node.spec.capacity.gpus {
                return Err(format!("{node_id} over GPU capacity"));
            }
        }
        for ((id, account), expected) in self.accounts.iter().zip(&charged) {
            if account.charged != *expected {
                return Err(format!("{id} charged {} but its jobs add up to {expected}", account.charged));
            }
            if !account.within_quota() {
                return Err(format!("{id} charged {} over its quota {:?}", account.charged, account.quota));
            }
        }
        Ok(())
    }
}

impl Scheduler {
    /// The running index's entries say what their jobs say, and the preemptible-GPU tally
    /// adds them up (with no empty levels).
    fn check_running_index(&self) -> Result<(), String> {
        let mut tally: Vec<(Priority, u32)> = Vec::new();
        for (&(priority, id), entry) in &self.running {
            let job = &self.jobs[&id];
            let JobState::Running { placement, started_at } = &job.state else {
                return Err(format!("{id} indexed as running but not running"));
            };
            if priority != job.spec.priority || *entry != RunningEntry::of(job, placement, *started_at) {
                return Err(format!("running index entry of {id} disagrees with the job"));
            }
            let gpus = job.spec.total().gpus;
            if entry.preemptible && gpus > 0 {
                match tally.last_mut() {
                    Some((p, sum)) if *p == priority => *sum += gpus,
                    _ => tally.push((priority, gpus)),
                }
            }
        }
        if !tally.iter().copied().eq(self.preemptible_gpus.iter().map(|(p, g)| (*p, *g))) {
            return Err("the preemptible-GPU tally disagrees with the running jobs".into());
        }
        Ok(())
    }
}

/// A placement or hold covers the whole gang: `replicas` replicas of `per_replica.gpus`
/// GPUs each.
fn check_gang(id: JobId, spec: &JobSpec, placement: &Placement, what: &str) -> Result<(), String> {
    if placement.replicas.len() != spec.replicas as usize {
        return Err(format!("gang {id} has {} of {} replicas {what}", placement.replicas.len(), spec.replicas));
    }
    for r in &placement.replicas {
        if r.gpu_indices.len() != spec.per_replica.gpus as usize {
            return Err(format!(
                "{id} replica {what} on {} has {} GPUs, wants {}",
                r.node,
                r.gpu_indices.len(),
                spec.per_replica.gpus
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::config::Config;
    use crate::event::Event;
    use crate::scheduler::Scheduler;
    use crate::state::JobState;
    use crate::types::{GpuModel, JobId, JobSpec, NodeId, NodeSpec, Resources, Time};

    /// One 8-GPU node full with jobs 0 and 1 (2 GPUs each) and job 2 (4 GPUs); job 10
    /// (high, 2 GPUs) has preempted one of them and holds its GPUs.
    fn busy() -> Scheduler {
        let mut s = Scheduler::new(Config::default());
        let node = NodeSpec { id: NodeId(1), gpu_model: GpuModel(0), capacity: Resources::new(8, 64_000, 512_000) };
        s.apply(Event::NodeAdded(node), Time(0)).unwrap();
        for (i, gpus) in [(0, 2), (1, 2), (2, 4)] {
            s.apply(Event::Submit(JobSpec::new(JobId(i), 1000, Resources::gpus(gpus))), Time(0)).unwrap();
        }
        s.cycle(Time(0));
        s.apply(Event::Submit(JobSpec::new(JobId(10), 1_000_000, Resources::gpus(2))), Time(1)).unwrap();
        s.cycle(Time(1));
        assert_eq!(s.check_invariants(), Ok(()));
        assert_eq!(s.reserving.len(), 1, "job 10 holds GPUs while its victim terminates");
        s
    }

    fn placement_of(s: &mut Scheduler, id: u64) -> &mut crate::types::Placement {
        match &mut s.jobs.get_mut(&JobId(id)).unwrap().state {
            JobState::Running { placement, .. } | JobState::Terminating { placement, .. } => placement,
            JobState::Pending { .. } => panic!("not placed"),
        }
    }

    fn broken(s: &Scheduler, what: &str) {
        let err = s.check_invariants().expect_err(what);
        assert!(!err.is_empty());
    }

    #[test]
    fn two_jobs_listing_one_slot_are_caught() {
        let mut s = busy();
        let first = placement_of(&mut s, 1).replicas[0].gpu_indices[0];
        let p = placement_of(&mut s, 2);
        p.replicas[0].gpu_indices[0] = first;
        broken(&s, "job 2 lists a slot owned by job 1");
    }

    #[test]
    fn a_job_listing_its_slot_twice_is_caught() {
        let mut s = busy();
        let p = placement_of(&mut s, 2);
        p.replicas[0].gpu_indices[1] = p.replicas[0].gpu_indices[0];
        broken(&s, "job 2 lists one of its slots twice");
    }

    #[test]
    fn an_owner_that_does_not_list_its_slot_is_caught() {
        let mut s = busy();
        let node = s.nodes.get_mut(&NodeId(1)).unwrap();
        let free = node.gpu_owner.iter().position(|o| o.is_none());
        match free {
            Some(i) => node.gpu_owner[i] = Some(JobId(2)),
            None => {
                // Every slot is owned: take one away from its owner's placement instead.
                let p = placement_of(&mut s, 2);
                p.replicas[0].gpu_indices.pop();
            }
        }
        broken(&s, "a slot records an owner that does not list it");
    }

    #[test]
    fn a_broken_gang_is_caught() {
        let mut s = busy();
        placement_of(&mut s, 2).replicas.clear();
        broken(&s, "job 2 has no replicas placed");
    }

    #[test]
    fn a_hold_without_its_slot_record_is_caught() {
        let mut s = busy();
        let node = s.nodes.get_mut(&NodeId(1)).unwrap();
        let held = node.gpu_reserved.iter().position(|h| h.is_some()).expect("job 10 holds slots");
        node.gpu_reserved[held] = None;
        broken(&s, "a held slot lost its record");
    }

    #[test]
    fn a_stale_running_index_is_caught() {
        let mut s = busy();
        let priority = *s.preemptible_gpus.keys().next().expect("preemptible work runs");
        *s.preemptible_gpus.get_mut(&priority).unwrap() += 1;
        broken(&s, "the preemptible-GPU tally counts a GPU too many");
        let mut s = busy();
        s.running.values_mut().next().unwrap().preemptible = false;
        broken(&s, "a running entry disagrees with its job");
        let mut s = busy();
        s.nodes.get_mut(&NodeId(1)).unwrap().recount_as(7);
        broken(&s, "a node's cached count of available GPUs is stale");
    }

    #[test]
    fn wrong_charges_and_node_sums_are_caught() {
        let mut s = busy();
        let account = *s.accounts.keys().next().unwrap();
        s.accounts.get_mut(&account).unwrap().charged.gpus += 1;
        broken(&s, "an account charged more than its jobs");
        let mut s = busy();
        s.nodes.get_mut(&NodeId(1)).unwrap().used.cpu_millis += 1;
        broken(&s, "a node's used resources disagree with its jobs");
    }
}
