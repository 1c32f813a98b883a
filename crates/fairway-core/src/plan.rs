//! Reservations with backfill (EASY, with an option for several reservations).
//!
//! With `Policy::reservations` set, the highest-ranked pending jobs that cannot start (no
//! room now, and no preemption that makes room) get a **reservation**, at most
//! `Reservations::count_max` of them, in queue order: the earliest time the GPUs they need
//! are expected to be free, and the nodes they would start on then. A job ranked below a
//! reservation starts now only if it cannot delay it: either it is expected to end before
//! the reservation's time, or it takes only what the reservation's nodes will not need
//! then ("spare" room; other nodes are not constrained). Big gangs then no longer starve
//! behind a stream of small jobs.
//!
//! **Expected ends.** A running job is expected to end as `estimate.rs` says (its run-time
//! limit and grace, its own estimate, its tenant's history, or the default); a job being
//! stopped ends at its grace deadline. A pending job's own run is estimated the same way.
//!
//! **The plan** (`Scheduler::plan`) is recomputed at the start of every cycle that has one,
//! from the running jobs' expected ends, earlier reservations taking their nodes first; a
//! reservation whose job started, left or can no longer be placed is dropped. Within a
//! cycle, a job started on a reservation's spare room uses it up.
//!
//! **Limits.** Reservations constrain starts on free room. A preemptor takes its victims by
//! the preemption order (priority first), not by the plan; a reservation's holder that
//! may preempt does so before it reserves.

use crate::ids::{JobIx, QueueKey};
use crate::model::JobState;
use crate::placement::{Candidate, choose_nodes};
use crate::scheduler::Scheduler;
use crate::types::{JobId, NodeId, Resources, Time};

/// A pending job's reservation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Planned {
    pub id: JobId,
    pub ix: JobIx,
    pub key: QueueKey,
    /// When the GPUs it needs are expected to be free.
    pub at: Time,
    /// The nodes it would start on then: (node, what it reserves there, what of the node's
    /// free room a job ranked below it may take now without delaying it).
    pub nodes: Vec<(NodeId, Resources, Resources)>,
}

impl Scheduler {
    /// Where and when the pending job at `ix` could start once running jobs end as
    /// expected, earlier reservations (`taken`) keeping their nodes: `None` if it could not
    /// even then (nodes drained or gone, a gang larger than what may free up).
    fn shadow(&self, ix: JobIx, taken: &[Planned], now: Time) -> Option<Planned> {
        let job = &self.jobs[ix];
        let (model, per_replica, replicas) = (job.spec.gpu_model, job.spec.per_replica, job.spec.replicas);
        let usable: Vec<&crate::cluster::Node> =
            self.nodes.iter().filter(|n| n.schedulable && model.is_none_or(|m| m == n.spec.gpu_model)).collect();
        let reserved_by_earlier = |node: NodeId| {
            taken
                .iter()
                .flat_map(|p| p.nodes.iter())
                .filter(|(n, ..)| *n == node)
                .fold(Resources::ZERO, |t, (_, r, _)| t.plus(*r))
        };
        let now_free: Vec<Resources> = usable.iter().map(|n| n.available()).collect();
        // What earlier reservations will take of each node: room freed there goes to them
        // first.
        // A node's CPU and memory may be over-booked while victims leave (their preemptor's
        // hold counts apart): what is over is owed too.
        let over = |n: &crate::cluster::Node| {
            let booked = n.used.plus(n.reserved);
            let cap = n.spec.capacity;
            Resources::new(
                0,
                booked.cpu_millis.saturating_sub(cap.cpu_millis),
                booked.memory_mib.saturating_sub(cap.memory_mib),
            )
        };
        let debt: Vec<Resources> = usable.iter().map(|n| reserved_by_earlier(n.spec.id).plus(over(n))).collect();
        // What each usable node gets back, and when, in order of expected end.
        let mut ends: Vec<(Time, JobId, usize, Resources)> = Vec::new();
        for (i, node) in usable.iter().enumerate() {
            for &vix in &node.placed {
                let v = &self.jobs[vix];
                let (JobState::Running { placement, .. } | JobState::Terminating { placement, .. }) = &v.state else {
                    continue;
                };
                let on_node = placement.replicas().iter().filter(|r| r.node == node.spec.id);
                let (mut here, mut slots) = (0u32, crate::types::GpuSet::EMPTY);
                for r in on_node {
                    here += 1;
                    slots = slots.union(r.gpus);
                }
                // A victim's slots held for its preemptor go to the preemptor, not back to
                // the free room (its CPU and memory do: a hold counts its own apart).
                let mut freed = v.spec.per_replica.times(here);
                freed.gpus = slots.minus(node.held).len();
                ends.push((self.expected_end(vix, now), v.spec.id, i, freed));
            }
        }
        ends.sort_unstable();
        let mut free = now_free.clone();
        let hosted = |free: &[Resources]| {
            free.iter()
                .zip(&debt)
                .map(|(f, d)| u64::from(f.saturating_minus(*d).count_fitting(per_replica)))
                .sum::<u64>()
        };
        let mut at = now;
        let mut k = 0;
        while hosted(&free) < u64::from(replicas) {
            let &(end, _, i, r) = ends.get(k)?;
            // Every job ending at the same time frees its room at once.
            at = end;
            free[i] = free[i].plus(r);
            k += 1;
            while let Some(&(_, _, j, r)) = ends.get(k).filter(|e| e.0 == end) {
                free[j] = free[j].plus(r);
                k += 1;
            }
        }
        let candidates: Vec<Candidate> = usable
            .iter()
            .zip(free.iter().zip(&debt))
            .map(|(n, (f, d))| Candidate {
                node: n.spec.id,
                available: f.saturating_minus(*d),
                capacity: n.spec.capacity,
            })
            .collect();
        let chosen = choose_nodes(&candidates, per_replica, replicas, self.config.policy.scoring)?;
        let nodes = chosen
            .into_iter()
            .map(|(node, count)| {
                let i = usable.iter().position(|n| n.spec.id == node).expect("chosen among them");
                let reserved = per_replica.times(count);
                let spare = now_free[i].min_each(free[i].saturating_minus(debt[i]).saturating_minus(reserved));
                (node, reserved, spare)
            })
            .collect();
        Some(Planned { id: job.spec.id, ix, key: job.key, at, nodes })
    }

    /// Step 4's first part: the reservations as of `now` (module doc). Whether they changed
    /// is recorded, so that jobs they held back look again.
    pub(crate) fn refresh_plan(&mut self, now: Time) {
        if self.plan.is_empty() {
            return;
        }
        let before = std::mem::take(&mut self.plan);
        let mut plan: Vec<Planned> = Vec::with_capacity(before.len());
        for p in &before {
            let still = self.jobs.get_slot(p.ix).is_some_and(|j| {
                j.spec.id == p.id && matches!(j.state, JobState::Pending { reservation: None }) && j.queued_in.is_some()
            });
            if let Some(fresh) = still.then(|| self.shadow(p.ix, &plan, now)).flatten() {
                plan.push(fresh);
            }
        }
        if plan != before {
            self.changes.plan_changed = true;
        }
        self.plan = plan;
    }

    /// Step 4g: a job that cannot start (no room, no preemption) gets a reservation if it
    /// ranks among the first `count_max` such jobs.
    pub(crate) fn maybe_reserve(&mut self, ix: JobIx, now: Time) {
        let Some(limits) = self.config.policy.reservations else { return };
        let key = self.jobs[ix].key;
        if self.plan.iter().any(|p| p.ix == ix) {
            return;
        }
        let full = self.plan.len() >= limits.count_max as usize;
        if full && self.plan.last().is_none_or(|last| last.key < key) {
            return;
        }
        // Reservations ranked above it keep their nodes first; those below are placed
        // again after it at the next refresh.
        let above: Vec<Planned> = self.plan.iter().filter(|p| p.key < key).cloned().collect();
        let Some(planned) = self.shadow(ix, &above, now) else { return };
        let at = self.plan.partition_point(|p| p.key < key);
        self.plan.insert(at, planned);
        self.plan.truncate(limits.count_max as usize);
        // Those ranked below it are placed around it now.
        let mut i = at + 1;
        while i < self.plan.len() {
            match self.shadow(self.plan[i].ix, &self.plan[..i], now) {
                Some(again) => {
                    self.plan[i] = again;
                    i += 1;
                }
                None => {
                    self.plan.remove(i);
                }
            }
        }
        self.changes.plan_changed = true;
    }

    /// Would starting the job at `ix` on `chosen` now delay a reservation ranked above it?
    /// The first such reservation, if any.
    pub(crate) fn delays_reservation(&self, ix: JobIx, chosen: &[(NodeId, u32)], now: Time) -> Option<&Planned> {
        let job = &self.jobs[ix];
        let ends_at = now.plus_ms(self.expected_run_ms(ix));
        let use_on: Vec<(NodeId, Resources)> =
            chosen.iter().map(|&(n, c)| (n, job.spec.per_replica.times(c))).collect();
        // Each reservation's spare room already leaves out what those above it reserve.
        self.plan.iter().filter(|p| p.key < job.key && ends_at > p.at).find(|p| {
            p.nodes.iter().any(|(node, _, spare)| use_on.iter().any(|(n, used)| n == node && !used.fits_in(*spare)))
        })
    }

    /// A placement on free room that delays no reservation ranked above the job: every
    /// usable node with what it has free, less what reservations above need of it.
    pub(crate) fn place_around_plan(&self, ix: JobIx, now: Time) -> Option<Vec<(NodeId, u32)>> {
        let job = &self.jobs[ix];
        let ends_at = now.plus_ms(self.expected_run_ms(ix));
        let binding: Vec<&Planned> = self.plan.iter().filter(|p| p.key < job.key && ends_at > p.at).collect();
        let candidates: Vec<Candidate> = self
            .nodes
            .iter()
            .filter(|n| n.schedulable && job.spec.gpu_model.is_none_or(|m| m == n.spec.gpu_model))
            .map(|n| {
                let mut available = n.available();
                for p in &binding {
                    if let Some((_, _, spare)) = p.nodes.iter().find(|(node, ..)| *node == n.spec.id) {
                        available = available.min_each(*spare);
                    }
                }
                Candidate { node: n.spec.id, available, capacity: n.spec.capacity }
            })
            .collect();
        choose_nodes(&candidates, job.spec.per_replica, job.spec.replicas, self.config.policy.scoring)
    }

    /// A job started on `chosen`: it used up the reservations' spare room there for the
    /// rest of the cycle.
    pub(crate) fn plan_started(&mut self, ix: JobIx, chosen: &[(NodeId, u32)]) {
        let job = &self.jobs[ix];
        let per_replica = job.spec.per_replica;
        // Whoever starts, the room it takes is no longer spare.
        for p in &mut self.plan {
            for (node, _, spare) in &mut p.nodes {
                if let Some(&(_, count)) = chosen.iter().find(|(n, _)| n == node) {
                    *spare = spare.saturating_minus(per_replica.times(count));
                }
            }
        }
        // A holder that starts leaves the plan.
        if let Some(at) = self.plan.iter().position(|p| p.ix == ix) {
            self.plan.remove(at);
            self.changes.plan_changed = true;
        }
    }
}
