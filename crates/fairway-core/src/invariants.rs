//! Invariant checks: cheap enough to run after every cycle in tests and the simulator.
//! Cost is linear in nodes, placed replicas, reservations, running jobs and accounts (never
//! in the pending backlog beyond the queue's own per-group check): placed jobs are found
//! through the nodes that list them, slots are compared as per-node bit sets, and per-node
//! and per-account sums are compared by the ledger (`Ledger::check`).

use std::collections::BTreeMap;

use crate::cluster::PlacedEnd;
use crate::ids::JobIx;
use crate::model::JobState;
use crate::scheduler::{Scheduler, replicas_per_node};
use crate::types::{AccountId, GpuSet, JobId, JobSpec, Placement, Resources};
use crate::victims::{VictimEntry, VictimTallies};

impl Scheduler {
    /// Check every invariant; `Err` names the first one broken.
    ///
    /// - No GPU is assigned twice: the placements listed on a node own disjoint slots whose
    ///   union is what the node records as owned; a share sits only on a slot no whole-GPU
    ///   job owns, the shares on one slot add up to at most 1000 thousandths, and the node's
    ///   per-slot record of shares is what its jobs' shares add up to.
    /// - Gangs are whole: every placed job has exactly `replicas` replicas of
    ///   `per_replica.gpus` GPUs each, on nodes that list it.
    /// - Usage is within quota: what is charged to each account (running and terminating
    ///   jobs, and what each hold charges: its total less its own account's victims still
    ///   leaving) matches the jobs and is within its cap (or the grandfathered usage).
    /// - Reserved GPUs belong to exactly one preemptor, which is pending, lists them, sits in
    ///   the holding set and counts the victims it still waits for (ready exactly at zero).
    /// - The victim index (each node's list, the per-priority tally, each capped account's
    ///   preemptible GPUs), the index of placed jobs by expected end, the terminating set,
    ///   the count of capped accounts and the free index say what the jobs and nodes say.
    /// - The pending queue's indexes agree with its groups (every sleeping group is
    ///   indexed under what wakes it).
    pub fn check_invariants(&self) -> Result<(), String> {
        self.queue.check()?;
        let nodes: Vec<&crate::cluster::Node> = self.nodes.iter().collect();
        self.nodes.index.check(self.nodes.iter())?;
        self.nodes.check_ids()?;
        let account_ids = self.ledger.account_ids();
        let account =
            |id: JobId, a: AccountId| account_ids.binary_search(&a).map_err(|_| format!("{id} charged to unknown {a}"));
        let mut charged = vec![Resources::ZERO; account_ids.len()];
        let mut charge = |id: JobId, a: AccountId, r: Resources| {
            let i = account(id, a)?;
            charged[i] = charged[i].plus(r);
            Ok::<(), String>(())
        };
        let mut terminating = 0usize;
        // Running jobs, each with its live entry in `run_ends`.
        let (run_ends_live, run_ends_counted) = self.run_ends.live_entries(|e| crate::plan::runs_to(&self.jobs, e));
        let mut run_ends_seen = 0usize;
        let mut tallies = VictimTallies::default();
        // What each account's placed jobs hold, as fair sharing must count it.
        let mut fair_held: BTreeMap<AccountId, Resources> = BTreeMap::new();
        // Per capped account, its running preemptible GPUs by priority (when tracked).
        let mut own: Vec<BTreeMap<crate::types::Priority, crate::ledger::PreemptibleRuns>> =
            vec![BTreeMap::new(); account_ids.len()];
        for node in &nodes {
            let node_id = node.spec.id;
            let (mut owned, mut used) = (GpuSet::EMPTY, Resources::ZERO);
            let mut shares = vec![0u32; node.shares.len()];
            for (k, &ix) in node.placed.iter().enumerate() {
                if node.placed[..k].contains(&ix) {
                    return Err(format!("{node_id} lists a job twice"));
                }
                let job = self.jobs.get_slot(ix).ok_or_else(|| format!("{node_id} lists a job that is gone"))?;
                let id = job.spec.id;
                let (placement, running) = match &job.state {
                    JobState::Running { placement, .. } => (placement, true),
                    JobState::Terminating { placement, .. } => (placement, false),
                    JobState::Pending { .. } => return Err(format!("{id} listed as placed on {node_id} but pending")),
                };
                let (mut here, mut slots_here) = (0, GpuSet::EMPTY);
                for r in placement.replicas().iter().filter(|r| r.node == node_id) {
                    if job.spec.per_replica.is_share() {
                        let slot = r.gpus.iter().next().filter(|&s| (s as usize) < shares.len());
                        let Some(slot) = slot.filter(|_| r.gpus.len() == 1) else {
                            return Err(format!(
                                "{id}'s share on {node_id} names GPUs {}, not one of the node's",
                                r.gpus
                            ));
                        };
                        shares[slot as usize] += job.spec.per_replica.gpu_milli;
                    } else if !owned.is_disjoint(r.gpus) {
                        return Err(format!("GPUs {} on {node_id} are listed twice", owned.intersection(r.gpus)));
                    }
                    owned = owned.union(r.gpus);
                    slots_here = slots_here.union(r.gpus);
                    used = used.plus(job.spec.per_replica);
                    here += 1;
                }
                if here == 0 {
                    return Err(format!("{node_id} lists {id}, which has no replica there"));
                }
                if self.tracks_run_ends() {
                    let end = job.end_key();
                    let entry = PlacedEnd { job: ix, end, slots: slots_here, room: job.spec.per_replica.times(here) };
                    if node.ends.iter().filter(|e| **e == entry).count() != 1 {
                        return Err(format!("{node_id} does not list {id} once by its expected end {end}"));
                    }
                }
                // Whole-job checks once, at the node of the job's first replica.
                if placement.replicas()[0].node != node_id {
                    continue;
                }
                check_gang(id, &job.spec, placement, "placed")?;
                if self.tracks_run_ends() && running {
                    if run_ends_live.binary_search(&(job.expected_end, id, ix)).is_err() {
                        return Err(format!("{id} runs but is not indexed by its expected end"));
                    }
                    run_ends_seen += 1;
                }
                for r in placement.replicas() {
                    let listed = self.nodes.get(r.node).is_some_and(|n| n.placed.contains(&ix));
                    if !listed {
                        return Err(format!("{id} is placed on {}, which does not list it", r.node));
                    }
                }
                for a in self.charged_accounts(ix) {
                    charge(id, a, job.spec.total())?;
                }
                for a in job.accounts() {
                    if self.fair.enabled() && job.spec.total() != Resources::ZERO {
                        let sum = fair_held.entry(a).or_insert(Resources::ZERO);
                        *sum = sum.plus(job.spec.total());
                    }
                }
                if running {
                    if self.tracks_victims() {
                        let gpus = job.spec.gpu_slots();
                        if job.spec.preemptible {
                            tallies.add(job.spec.priority, gpus);
                            for a in job.accounts().filter(|a| self.ledger.is_capped(*a)) {
                                let runs = own[account(id, a)?].entry(job.spec.priority).or_default();
                                runs.gpus += gpus;
                                runs.jobs += 1;
                            }
                        }
                        self.check_victim_entries(ix, job)?;
                    }
                } else {
                    terminating += 1;
                    if !self.terminating.contains(&ix) {
                        return Err(format!("{id} is terminating but not in the terminating set"));
                    }
                }
            }
            let ends_listed = if self.tracks_run_ends() { node.placed.len() } else { 0 };
            if node.ends.len() != ends_listed {
                return Err(format!("{node_id} lists {} expected ends for {ends_listed} jobs", node.ends.len()));
            }
            if let Some(w) = node.ends.windows(2).find(|w| w[0].end > w[1].end) {
                return Err(format!("{node_id} lists the expected end {} before {}", w[0].end, w[1].end));
            }
            let shared = GpuSet::from_bits(
                shares.iter().enumerate().filter(|(_, m)| **m > 0).fold(0, |bits, (s, _)| bits | 1 << s),
            );
            if let Some(slot) = shares.iter().position(|m| *m > 1000) {
                return Err(format!("GPU {slot} on {node_id} is shared beyond 1000 thousandths ({})", shares[slot]));
            }
            let whole = self.whole_slots_of(node);
            if !whole.is_disjoint(shared) {
                return Err(format!("GPUs {} on {node_id} are taken whole and shared", whole.intersection(shared)));
            }
            if shared != node.shared || shares.iter().zip(&node.shares).any(|(a, b)| *a != u32::from(*b)) {
                return Err(format!(
                    "{node_id} records shares {:?} on GPUs {}, its jobs {shares:?} on {shared}",
                    node.shares, node.shared
                ));
            }
            if owned != node.owned {
                return Err(format!("{node_id} records GPUs {} as owned, its jobs own {owned}", node.owned));
            }
            if used != node.used {
                return Err(format!("{node_id} used {} disagrees with its jobs", node.used));
            }
            if node.used.gpus > node.spec.capacity.gpus
                || !owned.union(node.held).minus(GpuSet::first(node.spec.capacity.gpus)).is_empty()
            {
                return Err(format!("{node_id} over GPU capacity"));
            }
        }
        if run_ends_seen != run_ends_live.len() || run_ends_seen != run_ends_counted {
            return Err(format!(
                "{} jobs indexed by expected end ({run_ends_counted} counted), {run_ends_seen} running",
                run_ends_live.len()
            ));
        }
        if terminating != self.terminating.len() {
            return Err(format!("{} jobs in the terminating set, {terminating} terminating", self.terminating.len()));
        }
        self.check_victim_lists(tallies)?;
        let mut held = vec![(GpuSet::EMPTY, Resources::ZERO); nodes.len()];
        for (&id, &ix) in &self.reserving {
            let job =
                self.jobs.get_slot(ix).filter(|j| j.spec.id == id).ok_or_else(|| format!("reserving {id} not held"))?;
            let JobState::Pending { reservation: Some(res) } = &job.state else {
                return Err(format!("{id} listed as reserving without a reservation"));
            };
            if job.queued_in.is_some() || !self.queue.holding.contains(&job.key) {
                return Err(format!("{id} holds GPUs but is not in the holding set"));
            }
            check_gang(id, &job.spec, &res.placement, "reserved")?;
            let waiting = self.still_terminating(id, &res.victims).len() as u32;
            if res.waiting != waiting {
                return Err(format!("{id} counts {} victims to wait for, {waiting} still terminate", res.waiting));
            }
            if (waiting == 0) != self.ready_preemptors.contains(&id) {
                return Err(format!("{id} waits for {waiting} victims but is listed as ready or not ready wrongly"));
            }
            for r in res.placement.replicas() {
                let i = self.nodes.ix_of(r.node).ok_or_else(|| format!("{id} holds on unknown {}", r.node))?.0 as usize;
                let (slots, reserved) = &mut held[i];
                if !slots.is_disjoint(r.gpus) {
                    return Err(format!("GPUs {} on {} are held twice", slots.intersection(r.gpus), r.node));
                }
                *slots = slots.union(r.gpus);
                *reserved = reserved.plus(job.spec.per_replica);
            }
            let expected = self.hold_charges(ix, &res.victims);
            if !res.charged.iter().zip(&expected).all(|(a, b)| a.same_amounts(*b)) {
                return Err(format!(
                    "{id} records {:?} as its hold's charges, its victims leave {expected:?}",
                    res.charged
                ));
            }
            for (k, a) in self.charged_accounts(ix).enumerate() {
                charge(id, a, res.charged[k])?;
            }
        }
        if self.ready_preemptors.iter().any(|id| !self.reserving.contains_key(id)) {
            return Err("a job is listed as a ready preemptor but holds nothing".into());
        }
        if self.queue.holding.len() != self.reserving.len() {
            return Err(format!(
                "{} jobs in the holding set, {} hold GPUs",
                self.queue.holding.len(),
                self.reserving.len()
            ));
        }
        for (node, (slots, reserved)) in nodes.iter().zip(&held) {
            if node.held != *slots {
                return Err(format!("{} records GPUs {} as held, reservations hold {slots}", node.spec.id, node.held));
            }
            if node.reserved != *reserved {
                return Err(format!("{} reserved {} disagrees with reservations", node.spec.id, node.reserved));
            }
        }
        self.check_moved()?;
        self.check_plan()?;
        let fair_tracked: BTreeMap<AccountId, Resources> = self.fair.holdings().collect();
        if fair_tracked != fair_held {
            return Err(format!("fair sharing counts holdings {fair_tracked:?}, the placed jobs hold {fair_held:?}"));
        }
        self.ledger.check(&charged, &own)?;
        // Last: the slot checks above name a wrong slot record more precisely.
        match nodes.iter().find(|n| !n.room_agrees()) {
            Some(n) => {
                Err(format!("{} keeps {} as its room, which its slots and use disagree with", n.spec.id, n.available()))
            }
            None => Ok(()),
        }
    }

    /// Reservations (see `plan.rs`): at most the configured number, in queue order (by
    /// priority only with fair sharing), each of
    /// a distinct job that is still queued without a hold, on known nodes of its model.
    fn check_plan(&self) -> Result<(), String> {
        let count_max = self.config.policy.reservations.map_or(0, |r| r.count_max as usize);
        if self.plan.len() > count_max {
            return Err(format!("{} reservations, at most {count_max} allowed", self.plan.len()));
        }
        // With fair sharing, holders of one rank are in the order of their tenants' shares
        // at the last refresh (`plan.rs`), which starts since may have changed.
        let fair = self.fair.enabled();
        if !self.plan.windows(2).all(|w| if fair { w[0].key.rank <= w[1].key.rank } else { w[0].key < w[1].key }) {
            return Err("reservations are not in queue order".into());
        }
        for p in &self.plan {
            let job = self
                .jobs
                .get_slot(p.ix)
                .filter(|j| j.spec.id == p.id)
                .ok_or(format!("reservation of gone {}", p.id))?;
            if !matches!(job.state, JobState::Pending { reservation: None })
                || job.queued_in.is_none()
                || job.key != p.key
            {
                return Err(format!("{} holds a reservation but is not queued without a hold", p.id));
            }
            for (node, reserved, spare) in p.nodes.iter() {
                let n = self.nodes.get(*node).ok_or(format!("{} reserves on unknown {node}", p.id))?;
                if job.spec.gpu_model.is_some_and(|m| m != n.spec.gpu_model) || !reserved.fits_in(n.spec.capacity) {
                    return Err(format!("{} reserves {reserved} on {node}, which cannot hold it", p.id));
                }
                if !spare.fits_in(n.spec.capacity) {
                    return Err(format!("{} counts {spare} spare on {node}, more than it has", p.id));
                }
            }
        }
        Ok(())
    }

    /// A victim moved to a hold terminates for a preemptor of its own project's cohort, and
    /// each project's `moving` adds up its moved victims.
    fn check_moved(&self) -> Result<(), String> {
        let mut shortfall: BTreeMap<AccountId, Resources> = BTreeMap::new();
        let mut holds: BTreeMap<AccountId, Resources> = BTreeMap::new();
        for &ix in self.reserving.values() {
            let job = &self.jobs[ix];
            let JobState::Pending { reservation: Some(r) } = &job.state else { continue };
            let s = shortfall.entry(job.spec.project).or_default();
            *s = s.plus(job.spec.total().minus(r.charged[0]));
            let h = holds.entry(job.spec.project).or_default();
            *h = h.plus(job.spec.total());
        }
        for project in self.ledger.account_ids() {
            let expected = holds.get(&project).copied().unwrap_or_default();
            if !self.ledger.holds(project).same_amounts(expected) {
                return Err(format!(
                    "{project} records {} of holds, its holds add up to {expected}",
                    self.ledger.holds(project)
                ));
            }
            let expected = shortfall.get(&project).copied().unwrap_or_default();
            if !self.ledger.hold_shortfall(project).same_amounts(expected) {
                return Err(format!(
                    "{project} records {} of its holds as not charged, they add up to {expected}",
                    self.ledger.hold_shortfall(project)
                ));
            }
        }
        let mut moving: BTreeMap<AccountId, Resources> = BTreeMap::new();
        for job in self.jobs.iter() {
            let Some(crate::model::MovedToHold { cohort, preemptor_project }) = job.moved_to_hold else { continue };
            let id = job.spec.id;
            let JobState::Terminating { why: crate::model::Termination::Preempted { preemptor, .. }, .. } = job.state
            else {
                return Err(format!("{id} is moved to a hold but does not terminate for a preemptor"));
            };
            // The hold may have been given up since: the victim leaves all the same.
            let holder = self
                .jobs
                .get(preemptor)
                .filter(|p| matches!(&p.state, JobState::Pending { reservation: Some(r) } if r.victims.contains(&id)));
            // Its preemptor's project stays in the cohort, the preemptor gone or not.
            let same = self.ledger.cohort_of(job.spec.project) == Some(cohort)
                && self.ledger.cohort_of(preemptor_project) == Some(cohort)
                && holder.is_none_or(|h| h.spec.project == preemptor_project);
            if !same {
                return Err(format!(
                    "{id} is moved to a hold of {cohort}, which is not its and its preemptor's cohort"
                ));
            }
            let m = moving.entry(job.spec.project).or_default();
            *m = m.plus(job.spec.total());
        }
        for project in self.ledger.moving_projects().into_iter().chain(moving.keys().copied()) {
            let expected = moving.get(&project).copied().unwrap_or_default();
            if !self.ledger.moving(project).same_amounts(expected) {
                return Err(format!(
                    "{project} records {} moving to holds, its moved victims add up to {expected}",
                    self.ledger.moving(project)
                ));
            }
        }
        Ok(())
    }

    /// A running job is listed as a victim on each of its nodes exactly when it is
    /// preemptible, with what it frees there.
    fn check_victim_entries(&self, ix: JobIx, job: &crate::model::Job) -> Result<(), String> {
        let JobState::Running { placement, started_at } = &job.state else { unreachable!("running") };
        let id = job.spec.id;
        for (node_id, replicas) in replicas_per_node(placement) {
            let node = self.nodes.by_id(node_id);
            let listed = node.victims.binary_search_by_key(&(job.spec.priority, id), VictimEntry::key).ok();
            let slots = crate::scheduler::slots_on(placement, node_id);
            let expected = VictimEntry::new(job, ix, *started_at, job.spec.per_replica.times(replicas), slots);
            match (job.spec.preemptible, listed) {
                (true, Some(at)) if node.victims[at] == expected => {}
                (true, Some(_)) => return Err(format!("the victim entry of {id} on {node_id} disagrees with the job")),
                (true, None) => return Err(format!("preemptible {id} is not listed as a victim on {node_id}")),
                (false, Some(_)) => return Err(format!("non-preemptible {id} is listed as a victim on {node_id}")),
                (false, None) => {}
            }
        }
        Ok(())
    }

    /// Every node's victim list is in (priority, id) order and names only running,
    /// preemptible jobs placed there (each checked against its job above, so a list holds
    /// exactly its node's victims), and the per-priority tallies add up the running jobs.
    fn check_victim_lists(&self, tallies: VictimTallies) -> Result<(), String> {
        if !self.tracks_victims() {
            let listed = self.nodes.iter().any(|n| !n.victims.is_empty());
            return if listed || self.tallies != VictimTallies::default() {
                Err("victims indexed under a policy that never preempts".into())
            } else {
                Ok(())
            };
        }
        for node in self.nodes.iter() {
            if !node.victims.windows(2).all(|w| w[0].key() < w[1].key()) {
                return Err(format!("the victim list of {} is out of order", node.spec.id));
            }
            for e in &node.victims {
                let placed_here = self.jobs.get_slot(e.ix).filter(|j| j.spec.id == e.id).is_some_and(|j| {
                    j.spec.preemptible
                        && matches!(&j.state, JobState::Running { placement, .. } if placement.replicas().iter().any(|r| r.node == node.spec.id))
                });
                if !placed_here {
                    return Err(format!("{} lists {} as a victim, which does not run there", node.spec.id, e.id));
                }
            }
        }
        if tallies != self.tallies {
            return Err("the running tallies disagree with the running jobs".into());
        }
        Ok(())
    }
}

impl Scheduler {
    /// Slots on `node` that its whole-GPU jobs list, worked out from the jobs.
    fn whole_slots_of(&self, node: &crate::cluster::Node) -> GpuSet {
        let mut whole = GpuSet::EMPTY;
        for &ix in &node.placed {
            let Some(job) = self.jobs.get_slot(ix) else { continue };
            let (JobState::Running { placement, .. } | JobState::Terminating { placement, .. }) = &job.state else {
                continue;
            };
            if !job.spec.per_replica.is_share() {
                for r in placement.replicas().iter().filter(|r| r.node == node.spec.id) {
                    whole = whole.union(r.gpus);
                }
            }
        }
        whole
    }
}

/// A placement or hold covers the whole gang: `replicas` replicas of `per_replica.gpus`
/// GPUs each (one for a share).
fn check_gang(id: JobId, spec: &JobSpec, placement: &Placement, what: &str) -> Result<(), String> {
    let replicas = placement.replicas();
    if replicas.len() != spec.replicas as usize {
        return Err(format!("gang {id} has {} of {} replicas {what}", replicas.len(), spec.replicas));
    }
    let wants = spec.per_replica.slots_per_replica();
    for r in replicas {
        if r.gpus.len() != wants {
            return Err(format!("{id} replica {what} on {} has {} GPUs, wants {wants}", r.node, r.gpus.len()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::config::Config;
    use crate::event::Event;
    use crate::model::JobState;
    use crate::scheduler::Scheduler;
    use crate::types::{GpuModel, GpuSet, JobId, JobSpec, NodeId, NodeSpec, Resources, Time};

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
        match &mut s.jobs.get_mut(JobId(id)).unwrap().state {
            JobState::Running { placement, .. } | JobState::Terminating { placement, .. } => placement,
            JobState::Pending { .. } => panic!("not placed"),
        }
    }

    fn node_mut(s: &mut Scheduler) -> &mut crate::cluster::Node {
        s.nodes.get_mut_for_tests(NodeId(1))
    }

    fn broken(s: &Scheduler, what: &str) {
        let err = s.check_invariants().expect_err(what);
        assert!(!err.is_empty());
    }

    #[test]
    fn two_jobs_listing_one_slot_are_caught() {
        let mut s = busy();
        let first = placement_of(&mut s, 1).replicas()[0].gpus.lowest(1);
        let p = placement_of(&mut s, 2);
        let r = &mut p.replicas_mut()[0];
        r.gpus = r.gpus.minus(r.gpus.lowest(1)).union(first);
        broken(&s, "job 2 lists a slot owned by job 1");
    }

    #[test]
    fn an_owner_that_does_not_list_its_slot_is_caught() {
        let mut s = busy();
        let p = placement_of(&mut s, 2);
        let r = &mut p.replicas_mut()[0];
        r.gpus = r.gpus.minus(r.gpus.lowest(1));
        broken(&s, "a slot recorded as owned is listed by no job");
    }

    #[test]
    fn a_slot_owned_by_nobody_is_caught() {
        let mut s = busy();
        let node = node_mut(&mut s);
        node.owned = node.owned.minus(node.owned.lowest(1));
        broken(&s, "a job lists a slot the node does not record as owned");
    }

    #[test]
    fn a_broken_gang_is_caught() {
        let mut s = busy();
        placement_of(&mut s, 2)
            .replicas_mut()
            .push(crate::types::ReplicaPlacement { node: NodeId(1), gpus: GpuSet::EMPTY });
        broken(&s, "job 2 has a replica too many");
    }

    #[test]
    fn a_hold_without_its_slot_record_is_caught() {
        let mut s = busy();
        let node = node_mut(&mut s);
        assert!(!node.held.is_empty(), "job 10 holds slots");
        node.held = node.held.minus(node.held.lowest(1));
        broken(&s, "a held slot lost its record");
    }

    #[test]
    fn a_stale_victim_index_is_caught() {
        let mut s = busy();
        let priority = *s.tallies.preemptible.keys().next().expect("preemptible work runs");
        s.tallies.preemptible.get_mut(&priority).unwrap().gpus += 1;
        broken(&s, "the preemptible tally counts a GPU too many");
        let mut s = busy();
        node_mut(&mut s).victims[0].freed.gpus += 1;
        broken(&s, "a victim entry disagrees with its job");
        let mut s = busy();
        node_mut(&mut s).victims.pop();
        broken(&s, "a preemptible running job is not listed");
        let mut s = busy();
        node_mut(&mut s).victims.reverse();
        broken(&s, "a victim list out of order");
        let mut s = busy();
        let ix = *node_mut(&mut s).placed.first().unwrap();
        node_mut(&mut s).placed.push(ix);
        broken(&s, "a node lists a job twice");
    }

    /// With reservations on, a node lists its jobs' expected ends sorted (what a
    /// reservation reads in order): a list out of order is caught.
    #[test]
    fn expected_ends_out_of_order_are_caught() {
        let mut config = Config::default();
        config.policy.reservations = Some(crate::config::Reservations { count_max: 1 });
        let mut s = Scheduler::new(config);
        let node = NodeSpec { id: NodeId(1), gpu_model: GpuModel(0), capacity: Resources::new(8, 64_000, 512_000) };
        s.apply(Event::NodeAdded(node), Time(0)).unwrap();
        // Submitted longest first: sorted, the list is the reverse of the order they start.
        for (i, hours) in [(0, 3), (1, 2), (2, 1)] {
            let mut spec = JobSpec::new(JobId(i), 1000, Resources::gpus(2));
            spec.max_runtime_ms = Some(hours * 3_600_000);
            s.apply(Event::Submit(spec), Time(0)).unwrap();
        }
        s.cycle(Time(0));
        assert_eq!(s.check_invariants(), Ok(()));
        let ends: Vec<Time> = node_mut(&mut s).ends.iter().map(|e| e.end).collect();
        assert_eq!(ends.len(), 3);
        assert!(ends.is_sorted() && ends[0] < ends[2], "{ends:?}");
        node_mut(&mut s).ends.swap(0, 2);
        let err = s.check_invariants().expect_err("ends out of order");
        assert!(err.contains("lists the expected end"), "{err}");
        node_mut(&mut s).ends.swap(0, 2);
        assert_eq!(s.check_invariants(), Ok(()));
        // Running jobs are indexed by end to be revised once past it: an index that lost
        // them is caught.
        s.run_ends = Default::default();
        let err = s.check_invariants().expect_err("running jobs not indexed");
        assert!(err.contains("not indexed by its expected end"), "{err}");
    }

    #[test]
    fn wrong_charges_and_node_sums_are_caught() {
        let mut s = busy();
        let account = s.ledger.iter().next().unwrap().0;
        s.ledger.account_mut(account).charged.gpus += 1;
        broken(&s, "an account charged more than its jobs");
        // A member of a cohort keeps its settled usage: one left stale is caught.
        let mut s = busy();
        let project = crate::types::AccountId(0);
        let nominal = crate::types::NominalQuota {
            cohort: crate::types::AccountId(99),
            nominal: crate::types::Quota::gpus(64),
            borrowing_limit: crate::types::Quota::default(),
            lending_limit: crate::types::Quota::default(),
        };
        s.apply(Event::SetNominalQuota { project, nominal: Some(nominal) }, Time(2)).unwrap();
        assert_eq!(s.check_invariants(), Ok(()));
        s.ledger.skew_settled(project);
        let err = s.check_invariants().expect_err("a member whose settled usage was not worked out again");
        assert!(err.contains("settled usage"), "{err}");
        let mut s = busy();
        node_mut(&mut s).used.cpu_millis += 1;
        broken(&s, "a node's used resources disagree with its jobs");
    }
}
