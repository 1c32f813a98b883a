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
//! limit and grace, its own estimate, its tenant's history, or the default), as of its
//! start until it runs past that; a job being preempted ends at its grace deadline, one
//! being stopped at once. A pending job's own run is estimated the same way. With
//! reservations on, placed jobs are also kept sorted by expected end (`Scheduler::run_ends`,
//! updated at start, stop and exit; a job past its end gets its new one before the plan is
//! read).
//!
//! **The plan** (`Scheduler::plan`) is recomputed at the start of every cycle that has one,
//! from the running jobs' expected ends, earlier reservations taking their nodes first; a
//! reservation whose job started, left or can no longer be placed is dropped. A cycle keeps
//! the plan as it is when nothing it reads changed since it was made (no node changed, no
//! expected end moved, every reservation still held and still in the future). Within a
//! cycle, a job started on a reservation's spare room uses it up.
//!
//! **Limits.** Reservations constrain starts on free room. A preemptor takes its victims by
//! the preemption order (priority first), not by the plan; a reservation's holder that
//! may preempt does so before it reserves.

use crate::cluster::PlacedEnd;
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

/// A usable node as `Scheduler::shadow` weighs it.
struct NodeRoom<'a> {
    node: &'a crate::cluster::Node,
    /// What a new job may take there now.
    now_free: Resources,
    /// What earlier reservations and over-booking take of what frees up there.
    debt: Resources,
    /// Replicas it could host now (at most the job's).
    hosted_now: u32,
    /// Its placed jobs' (expected end, what they give back), in order of end, in the
    /// shadow's list of ends (only as far as needed to host every replica).
    ends: std::ops::Range<usize>,
}

impl Scheduler {
    /// Where and when the pending job at `ix` could start once running jobs end as
    /// expected, earlier reservations (`taken`) keeping their nodes: `None` if it could not
    /// even then (nodes drained or gone, a gang larger than what may free up).
    ///
    /// Each usable node's placed jobs, in order of expected end, tell when it could host
    /// one more replica; the earliest time at which the nodes together host them all is the
    /// `replicas`-th of those times.
    fn shadow(&self, ix: JobIx, taken: &[Planned], now: Time) -> Option<Planned> {
        let job = &self.jobs[ix];
        let (model, per_replica, replicas) = (job.spec.gpu_model, job.spec.per_replica, job.spec.replicas);
        let reserved_by_earlier = |node: NodeId| {
            taken
                .iter()
                .flat_map(|p| p.nodes.iter())
                .filter(|(n, ..)| *n == node)
                .fold(Resources::ZERO, |t, (_, r, _)| t.plus(*r))
        };
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
        let mut rooms: Vec<NodeRoom> = Vec::new();
        // What each node's placed jobs give back there, and when: `rooms[i].ends` indexes it.
        let mut ends: Vec<(Time, Resources)> = Vec::new();
        // One entry per replica a node could host, at the time it could.
        let mut steps: Vec<Time> = Vec::new();
        for node in self.nodes.iter().filter(|n| n.schedulable && model.is_none_or(|m| m == n.spec.gpu_model)) {
            let now_free = node.available();
            // What earlier reservations will take of the node: room freed here goes to
            // them first.
            let debt = reserved_by_earlier(node.spec.id).plus(over(node));
            let hosts = |free: Resources| free.saturating_minus(debt).count_fitting(per_replica).min(replicas);
            let first = ends.len();
            let hosted_now = hosts(now_free);
            let mut hosted = hosted_now;
            steps.extend(std::iter::repeat_n(now, hosted as usize));
            if hosted < replicas {
                // A victim's slots held for its preemptor go to the preemptor, not back to
                // the free room (its CPU and memory do: a hold counts its own apart).
                ends.extend(node.ends.iter().map(|e| {
                    let mut room = e.room;
                    room.gpus = e.slots.minus(node.held).len();
                    (e.end.max(now), room)
                }));
                ends[first..].sort_unstable_by_key(|e| e.0);
                let mut free = now_free;
                for &(end, freed) in &ends[first..] {
                    free = free.plus(freed);
                    let more = hosts(free);
                    steps.extend(std::iter::repeat_n(end, (more - hosted) as usize));
                    hosted = more;
                    if hosted == replicas {
                        break;
                    }
                }
            }
            rooms.push(NodeRoom { node, now_free, debt, hosted_now, ends: first..ends.len() });
        }
        let nth = (replicas as usize).checked_sub(1)?;
        if steps.len() <= nth {
            return None;
        }
        let room_now = rooms.iter().map(|r| r.hosted_now as usize).sum::<usize>() > nth;
        let at = *steps.select_nth_unstable(nth).1;
        // Each node's room at `at`: every job expected to end by then has left, unless the
        // room there is now (then it is counted as it is).
        let free_at = |room: &NodeRoom| match room_now {
            true => room.now_free,
            false => ends[room.ends.clone()].iter().take_while(|e| e.0 <= at).fold(room.now_free, |f, e| f.plus(e.1)),
        };
        let free: Vec<Resources> = rooms.iter().map(free_at).collect();
        let candidates: Vec<Candidate> = rooms
            .iter()
            .zip(&free)
            .map(|(r, f)| Candidate {
                node: r.node.spec.id,
                available: f.saturating_minus(r.debt),
                capacity: r.node.spec.capacity,
            })
            .collect();
        let chosen = choose_nodes(&candidates, per_replica, replicas, self.config.policy.scoring)?;
        let nodes = chosen
            .into_iter()
            .map(|(node, count)| {
                let i = rooms.iter().position(|r| r.node.spec.id == node).expect("chosen among them");
                let reserved = per_replica.times(count);
                let spare =
                    rooms[i].now_free.min_each(free[i].saturating_minus(rooms[i].debt).saturating_minus(reserved));
                (node, reserved, spare)
            })
            .collect();
        Some(Planned { id: job.spec.id, ix, key: job.key, at, nodes })
    }

    /// Running jobs past their expected end get a new one, as of `now` (`estimate.rs`):
    /// what `run_ends` says before a reservation reads it.
    fn revise_run_ends(&mut self, now: Time) {
        let overdue: Vec<(Time, JobId, JobIx)> = self
            .run_ends
            .range(..=(now, JobId(u64::MAX), JobIx(u32::MAX)))
            .filter(|&&(_, _, ix)| matches!(self.jobs[ix].state, JobState::Running { .. }))
            .copied()
            .collect();
        for entry in overdue {
            let ix = entry.2;
            let revised = self.expected_end(ix, now);
            if revised != entry.0 {
                self.unindex_run_end(ix);
                self.jobs[ix].expected_end = revised;
                self.index_run_end(ix);
            }
        }
    }

    /// Index the placed job at `ix` by its expected end (`run_ends` and its nodes' lists).
    pub(crate) fn index_run_end(&mut self, ix: JobIx) {
        let job = &self.jobs[ix];
        let (JobState::Running { placement, .. } | JobState::Terminating { placement, .. }) = &job.state else {
            unreachable!("only placed jobs are indexed by end");
        };
        let (end, id, per_replica) = (Self::run_end_key(job), job.spec.id, job.spec.per_replica);
        for here in placement.replicas().chunk_by(|a, b| a.node == b.node) {
            let slots = here.iter().fold(crate::types::GpuSet::EMPTY, |s, r| s.union(r.gpus));
            let room = per_replica.times(here.len() as u32);
            self.nodes.ends_mut(here[0].node).push(PlacedEnd { job: ix, end, slots, room });
        }
        self.run_ends.insert((end, id, ix));
        self.run_ends_version += 1;
    }

    /// Undo `index_run_end` (before the job's state or end changes).
    pub(crate) fn unindex_run_end(&mut self, ix: JobIx) {
        let job = &self.jobs[ix];
        let (JobState::Running { placement, .. } | JobState::Terminating { placement, .. }) = &job.state else {
            unreachable!("only placed jobs are indexed by end");
        };
        self.run_ends.remove(&(Self::run_end_key(job), job.spec.id, ix));
        for here in placement.replicas().chunk_by(|a, b| a.node == b.node) {
            self.nodes.ends_mut(here[0].node).retain(|e| e.job != ix);
        }
        self.run_ends_version += 1;
    }

    /// Step 4's first part: the reservations as of `now` (module doc). Whether they changed
    /// is recorded, so that jobs they held back look again.
    pub(crate) fn refresh_plan(&mut self, now: Time) {
        if self.plan.is_empty() {
            return;
        }
        self.revise_run_ends(now);
        let still_holds = |p: &Planned| {
            self.jobs.get_slot(p.ix).is_some_and(|j| {
                j.spec.id == p.id && matches!(j.state, JobState::Pending { reservation: None }) && j.queued_in.is_some()
            })
        };
        // Nothing it reads changed and no reservation's time has come: the same plan (the
        // ends it walked up to each time are where they were; those passed since only
        // move to `now`, before that time).
        let read = (self.nodes.version(), self.run_ends_version);
        if self.plan_read == Some(read) && self.plan.iter().all(|p| p.at > now && still_holds(p)) {
            return;
        }
        let before = std::mem::take(&mut self.plan);
        let mut plan: Vec<Planned> = Vec::with_capacity(before.len());
        for p in &before {
            if let Some(fresh) = still_holds(p).then(|| self.shadow(p.ix, &plan, now)).flatten() {
                plan.push(fresh);
            }
        }
        if plan != before {
            self.changes.plan_changed = true;
        }
        self.plan = plan;
        self.plan_read = Some(read);
    }

    /// A check for the tests: when the next cycle at `now` would keep the plan as it is
    /// (`refresh_plan`: nothing it reads changed), the plan must be what computing it afresh
    /// gives. `Err` names the first reservation that differs.
    #[doc(hidden)]
    pub fn check_kept_plan(&self, now: Time) -> Result<(), String> {
        let read = (self.nodes.version(), self.run_ends_version);
        let would_revise = self.run_ends.range(..=(now, JobId(u64::MAX), JobIx(u32::MAX))).any(|&(end, _, ix)| {
            matches!(self.jobs[ix].state, JobState::Running { .. }) && self.expected_end(ix, now) != end
        });
        let holds = |p: &Planned| {
            self.jobs.get_slot(p.ix).is_some_and(|j| {
                j.spec.id == p.id && matches!(j.state, JobState::Pending { reservation: None }) && j.queued_in.is_some()
            })
        };
        let kept = self.plan_read == Some(read) && !would_revise && self.plan.iter().all(|p| p.at > now && holds(p));
        if !kept {
            return Ok(());
        }
        for (i, p) in self.plan.iter().enumerate() {
            let fresh = self.shadow(p.ix, &self.plan[..i], now);
            if fresh.as_ref() != Some(p) {
                return Err(format!("kept reservation {p:?} differs from a fresh one {fresh:?} at {now}"));
            }
        }
        Ok(())
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
        self.revise_run_ends(now);
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
