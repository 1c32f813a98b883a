//! Reservations with backfill (EASY, with an option for several reservations).
//!
//! With `Policy::reservations` set, the highest-ranked pending jobs that cannot start (no
//! room now, and no preemption that makes room) get a **reservation**, at most
//! `Reservations::count_max` of them, in rank order (`PlanRank`: the order the walk asks
//! jobs in, so with fair sharing a tier's tenants by share): the earliest time the GPUs they need
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
//! reservations on, each node keeps its placed jobs' expected ends sorted (`Node::ends`),
//! and the running jobs are kept by expected end (`Scheduler::run_ends`, a heap), both
//! updated at start, stop and exit; a job past its end gets its new one before the plan is
//! read.
//!
//! **The plan** (`Scheduler::plan`) is recomputed at the start of every cycle that has one,
//! from the running jobs' expected ends, earlier reservations taking their nodes first; a
//! reservation whose job started, left or can no longer be placed is dropped, and so is
//! one whose job a cycle finds held back by its quota or its cohort (step 4d: it waits for
//! that, not for room; it may reserve again once the cap no longer holds it). A cycle keeps
//! the plan as it is when nothing it reads changed since it was made (no node changed, no
//! expected end moved, every reservation still held and still in the future); otherwise
//! each reservation is computed again, reusing what its last computation learnt of each
//! node that has not changed since (`NodeHosting`). A reservation is kept as it was when
//! its time came from the nodes' steps, is still to come, and no node that changed since
//! hosts a replica by then, before or after the change: the same steps come by then, and
//! the same nodes with the same room host its replicas then (`Hosting::last`). The nodes
//! that changed are then only checked (their room by that time, `hosts_one_by`) and marked
//! stale; their steps are learnt at the next computation that needs them. A
//! reservation that goes leaves what it learnt to the next one, which keeps it if its job
//! has the same shape (GPUs per replica, replicas, GPU model) and otherwise learns every
//! node afresh in the same buffers (`Hosting::learn_for`; the plan's holder changes often).
//! Within a cycle, a job started on a reservation's spare room uses it up. With fair
//! sharing, a job held for a reservation is asked again when shares alone move it above the
//! holder (`wake_outranking_held`).
//!
//! **Limits.** Reservations constrain starts on free room. A preemptor takes its victims by
//! the preemption order (priority first), not by the plan; a reservation's holder that
//! may preempt does so before it reserves.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::collections::binary_heap::PeekMut;
use std::collections::btree_map::Entry;

use crate::cluster::PlacedEnd;
use crate::ids::{JobIx, NodeIx, QueueKey};
use crate::min_tree::MinTree;
use crate::model::JobState;
use crate::placement::{Candidate, choose_nodes};
use crate::scheduler::Scheduler;
use crate::types::{JobId, JobSpec, NodeId, Resources, Time};

/// A pending job's reservation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Planned {
    pub id: JobId,
    pub ix: JobIx,
    pub key: QueueKey,
    /// When the GPUs it needs are expected to be free.
    pub at: Time,
    /// The nodes it would start on then: (node, what it reserves there, what of the node's
    /// free room a job ranked below it may take now without delaying it). Shared with the
    /// copy its `Hosting` keeps (`Hosting::last`), which a kept reservation hands back at
    /// nearly every cycle; copied when a start uses up spare room (`plan_started`).
    pub nodes: std::sync::Arc<Vec<(NodeId, Resources, Resources)>>,
}

/// What `Scheduler::shadow` learns of one usable node for one reservation's job: reused
/// by the next computation of the same reservation while the node and what earlier
/// reservations take of it are as they were (`Node::version`, `debt`).
#[derive(Clone, Debug)]
pub(crate) struct NodeHosting {
    node: NodeId,
    /// `Node::version` when computed.
    version: u64,
    capacity: Resources,
    /// What earlier reservations and over-booking take of what frees up there.
    debt: Resources,
    /// The over-booking part of `debt` (a function of the node's state, so of `version`).
    over: Resources,
    /// What a new job may take there now.
    now_free: Resources,
    /// Replicas it could host now (at most the job's).
    hosted_now: u32,
    /// Its placed jobs' expected ends (`PlacedEnd::end`, not yet brought up to `now`), in
    /// order, each with the node's free room once that job and those before it have left.
    free_after: Vec<(Time, Resources)>,
    /// The ends (as above) at which it could host one more replica, up to the job's.
    steps: Vec<Time>,
}

/// What one reservation's computations keep: what was learnt of each usable node, in id
/// order, for a job of one shape, and the scratch of one computation.
#[derive(Clone, Debug, Default)]
pub(crate) struct Hosting {
    /// The shape `nodes` was learnt for (`plan_shape`).
    shape: Option<PlanShape>,
    nodes: Vec<NodeHosting>,
    /// The position among the cluster's nodes of each of `nodes`, and the other way: each
    /// position's slot in `nodes` (`u32::MAX`: not usable), read for every node that changed.
    positions: Vec<u32>,
    slot_at: Vec<u32>,
    /// Each of `nodes`' `hosted_now`, their sum, and the nodes that host a replica now as a
    /// bit set (slot `k` is bit `k % 64` of word `k / 64`); and each one's `first_step`
    /// (`u64::MAX`: none) in a tree of minimums. Kept up to date with the slots, so that a
    /// computation reads only the nodes that host a replica by its time: most nodes host
    /// none, when a gang waits for a few of them to free up or a job for the first node to.
    hosted: Vec<u32>,
    hosted_total: usize,
    hosting_now: Vec<u64>,
    first_steps: MinTree,
    /// Scratch of `shadow`: the slots that host a replica at the reservation's time.
    hosting_then: Vec<usize>,
    /// `Nodes::version` when `nodes` was last brought up to date; `None` when nothing was
    /// learnt for this shape.
    seen: Option<u64>,
    /// The nodes earlier reservations took a part of then.
    taken_nodes: Vec<NodeId>,
    /// Scratch of `learn_nodes`: the positions to read again.
    revisit: Vec<u32>,
    /// The usable nodes that changed since they were learnt while the last reservation was
    /// kept (none of them hosts a replica by its time), a bit per slot as in `hosting_now`:
    /// learnt again at the next computation that is not kept, and checked again only if
    /// they change again before.
    stale: Vec<u64>,
    /// Scratch of `nth_step`: the slots whose steps it took, with how many.
    taken_steps: Vec<(usize, usize)>,
    candidates: Vec<Candidate>,
    /// The last reservation computed with it, when its time came from the nodes' steps
    /// (not from room free now): kept while no node that changed since hosts a replica
    /// by its time, before or after the change (`Scheduler::shadow`).
    last: Option<Planned>,
}

/// Spare `Hosting`s kept: a new reservation takes one instead of allocating two buffers
/// per usable node and learning every node afresh (the plan's holder changes often with
/// reservations on, and the next is often of the same shape).
const SPARE_HOSTINGS_MAX: usize = 4;

/// A pending job's rank as the plan counts it (module doc): the order the walk asks jobs
/// in, priority first, then with fair sharing its project's and user's shares now
/// (`FairKey`; 0 without), then queue order.
pub(crate) type PlanRank = (Reverse<crate::types::Priority>, crate::fairshare::FairKey, QueueKey);

/// A running job's entry in `RunEnds`: its expected end, id and slot.
pub(crate) type RunEnd = (Time, JobId, JobIx);

/// Running jobs by expected end, for `revise_run_ends` to find those past it: a heap of
/// entries, earliest end first. An entry goes stale when its job stops running to that end
/// (it exits, is stopped, or its end is revised); stale entries are dropped when they come
/// to the top, or all at once when they outnumber the live ones, so that no change looks an
/// entry up to remove it (a start, exit, stop or revision at nearly every event).
#[derive(Clone, Debug, Default)]
pub(crate) struct RunEnds {
    heap: BinaryHeap<Reverse<RunEnd>>,
    /// Running jobs indexed: one live entry each (a job indexed again with the same key
    /// may have two copies, taken as one).
    live: usize,
}

/// Stale entries `RunEnds` keeps beyond the live ones before dropping them all.
const RUN_ENDS_STALE_SLACK: usize = 1024;

impl RunEnds {
    /// A running job's entry.
    fn add(&mut self, entry: RunEnd) {
        self.heap.push(Reverse(entry));
        self.live += 1;
    }

    /// A running job's entry went stale (it stays until dropped).
    fn went_stale(&mut self) {
        self.live -= 1;
    }

    /// The earliest end of any entry, stale or live.
    fn first_end(&self) -> Option<Time> {
        self.heap.peek().map(|Reverse((end, ..))| *end)
    }

    /// Take out every entry that ends by `now`: the stale ones are dropped, the live ones
    /// (`is_live` tells) go into `out`, in order of end, then id, each once.
    fn take_due(&mut self, now: Time, is_live: impl Fn(&RunEnd) -> bool, out: &mut Vec<RunEnd>) {
        while let Some(top) = self.heap.peek_mut() {
            if top.0.0 > now {
                break;
            }
            out.push(PeekMut::pop(top).0);
        }
        keep_live_sorted(out, is_live);
    }

    /// Put back a live entry `take_due` took out.
    fn put_back(&mut self, entry: RunEnd) {
        self.heap.push(Reverse(entry));
    }

    /// Drop the stale entries once they outnumber the live ones by far (`is_live` tells):
    /// called where the heap grows.
    fn drop_stale_if_many(&mut self, is_live: impl Fn(&RunEnd) -> bool) {
        if self.heap.len() <= 2 * self.live + RUN_ENDS_STALE_SLACK {
            return;
        }
        let mut entries: Vec<RunEnd> = std::mem::take(&mut self.heap).into_iter().map(|Reverse(e)| e).collect();
        keep_live_sorted(&mut entries, is_live);
        self.heap = entries.into_iter().map(Reverse).collect();
    }

    /// The live entries, sorted, each once (for the invariants check), with how many running
    /// jobs are counted indexed.
    pub(crate) fn live_entries(&self, is_live: impl Fn(&RunEnd) -> bool) -> (Vec<RunEnd>, usize) {
        let mut entries: Vec<RunEnd> = self.heap.iter().map(|Reverse(e)| *e).collect();
        keep_live_sorted(&mut entries, is_live);
        (entries, self.live)
    }
}

/// `entries`' live ones, sorted, each once: a job indexed again with the same key while its
/// stale copy is still in the heap has two copies.
fn keep_live_sorted(entries: &mut Vec<RunEnd>, is_live: impl Fn(&RunEnd) -> bool) {
    entries.retain(|e| is_live(e));
    entries.sort_unstable();
    entries.dedup();
}

impl Hosting {
    /// Make it one for a job of `shape`: what was learnt for another shape is forgotten
    /// (the buffers are kept).
    fn learn_for(&mut self, shape: PlanShape) {
        if self.shape != Some(shape) {
            for h in &mut self.nodes {
                h.version = u64::MAX;
            }
            self.seen = None;
            self.shape = Some(shape);
            self.last = None;
        }
    }

    /// Whether slot `k` hosts a replica by `at`: now, or at one of its steps.
    fn hosts_by(&self, k: usize, at: Time) -> bool {
        self.hosted[k] > 0 || self.nodes[k].first_step().is_some_and(|step| step <= at)
    }

    /// Slot `k`'s `hosted` and `first_steps`, and the sum and set kept of them.
    fn set_slot(&mut self, k: usize) {
        let (hosted, first_step) = (self.nodes[k].hosted_now, self.nodes[k].first_step());
        self.hosted_total = self.hosted_total - self.hosted[k] as usize + hosted as usize;
        self.hosted[k] = hosted;
        let (word, bit) = (k / 64, 1u64 << (k % 64));
        self.hosting_now[word] = if hosted > 0 { self.hosting_now[word] | bit } else { self.hosting_now[word] & !bit };
        self.first_steps.replace(k, first_step.map_or(u64::MAX, |t| t.0));
    }

    /// `hosted`, `first_steps` and what is kept of them, for every slot afresh.
    fn set_every_slot(&mut self) {
        let slots = self.nodes.len();
        self.hosted.clear();
        self.hosted.extend(self.nodes.iter().map(|h| h.hosted_now));
        self.hosted_total = self.hosted.iter().map(|h| *h as usize).sum();
        self.hosting_now.clear();
        self.hosting_now.resize(slots.div_ceil(64), 0);
        for (k, _) in self.hosted.iter().enumerate().filter(|(_, h)| **h > 0) {
            self.hosting_now[k / 64] |= 1 << (k % 64);
        }
        let first_steps: Vec<u64> = self.nodes.iter().map(|h| h.first_step().map_or(u64::MAX, |t| t.0)).collect();
        self.first_steps = MinTree::new(&first_steps);
    }

    /// The earliest time, not before `now`, at which the nodes together could host
    /// `replicas` (`None`: not even once every placed job has ended). Each node could host
    /// one more replica at each of its steps; the time is the `replicas`-th such, counting
    /// those it could host now as hosted at `now`.
    fn earliest_time(&mut self, replicas: u32, now: Time) -> Option<Time> {
        let nth = (replicas as usize).checked_sub(1)?;
        if self.hosted_total > nth {
            return Some(now);
        }
        if nth == self.hosted_total {
            // One more replica: the earliest step of any node (each node's are in order).
            let earliest = self.first_steps.min();
            return (earliest < u64::MAX).then_some(Time(earliest.max(now.0)));
        }
        // The later steps in order, a few of all the nodes': those before now count as now.
        let nth_later = nth - self.hosted_total;
        self.nth_step(nth_later).map(|t| Time(t.max(now.0)))
    }

    /// The `nth` (from 0) of all the nodes' steps in order, a node's own in theirs: the
    /// least taken one at a time from the tree of first steps, each node's next step put
    /// in its place, and the tree then restored. A gang waits for a few steps of many
    /// nodes: this reads `nth + 1` of them, where listing every node's steps read them all.
    /// `None` when there are no more than `nth` steps.
    fn nth_step(&mut self, nth: usize) -> Option<u64> {
        let mut taken = std::mem::take(&mut self.taken_steps);
        taken.clear();
        let mut found = None;
        for _ in 0..=nth {
            let Some(k) = self.first_steps.min_index() else {
                found = None;
                break;
            };
            let step = self.first_steps.min();
            found = Some(step);
            let count = match taken.iter_mut().find(|(slot, _)| *slot == k) {
                Some((_, count)) => {
                    *count += 1;
                    *count
                }
                None => {
                    taken.push((k, 1));
                    1
                }
            };
            let next = self.nodes[k].steps.get(count).map_or(u64::MAX, |t| t.0);
            self.first_steps.replace(k, next);
        }
        for &(k, _) in &taken {
            self.first_steps.replace(k, self.nodes[k].first_step().map_or(u64::MAX, |t| t.0));
        }
        self.taken_steps = taken;
        found
    }

    /// `candidates`: the nodes that can host a replica at `at`, with their room then (now,
    /// if the room is there now), in id order. A node hosts one once it could now or one
    /// of its steps has come; the others hold no replica, so `choose_nodes` would pass them
    /// over: most nodes, when a gang waits for a few of them to free up.
    fn fill_candidates(&mut self, at: Time, room_now: bool) {
        let mut hosting_then = std::mem::take(&mut self.hosting_then);
        hosting_then.clear();
        self.push_hosting_now(&mut hosting_then);
        if !room_now {
            self.first_steps.at_most(at.0, &mut hosting_then);
            hosting_then.sort_unstable();
            hosting_then.dedup();
        }
        self.candidates.clear();
        self.candidates.extend(hosting_then.iter().map(|&k| {
            let h = &self.nodes[k];
            let room = if room_now { h.now_free } else { h.free_at(at) };
            Candidate { node: h.node, available: room.saturating_minus(h.debt), capacity: h.capacity }
        }));
        self.hosting_then = hosting_then;
    }

    /// The slots that host a replica now, ascending, appended to `out`.
    fn push_hosting_now(&self, out: &mut Vec<usize>) {
        for (w, &word) in self.hosting_now.iter().enumerate() {
            let mut rest = word;
            while rest != 0 {
                out.push(w * 64 + rest.trailing_zeros() as usize);
                rest &= rest - 1;
            }
        }
    }
}

/// A job's shape as the plan counts it: GPUs per replica (a share as a whole GPU, see
/// `Resources::as_whole_gpus`), replicas, and the GPU model it asks for (which nodes it may
/// use: `shadow` takes a node it learnt and that did not change since as usable without
/// reading it). What a `Hosting` learns depends on it.
type PlanShape = (Resources, u32, Option<crate::types::GpuModel>);

fn plan_shape(spec: &JobSpec) -> PlanShape {
    (spec.per_replica.as_whole_gpus(), spec.replicas, spec.gpu_model)
}

impl NodeHosting {
    /// Nothing learnt yet: `compute` fills it (no node's version is `u64::MAX`).
    fn empty() -> NodeHosting {
        NodeHosting {
            node: NodeId(0),
            version: u64::MAX,
            capacity: Resources::ZERO,
            debt: Resources::ZERO,
            over: Resources::ZERO,
            now_free: Resources::ZERO,
            hosted_now: 0,
            free_after: Vec::new(),
            steps: Vec::new(),
        }
    }

    fn compute(&mut self, node: &crate::cluster::Node, debt: Resources, per_replica: Resources, replicas: u32) {
        let hosts = |free: Resources| free.saturating_minus(debt).count_fitting_up_to(per_replica, replicas);
        self.node = node.spec.id;
        self.version = node.version;
        self.capacity = node.spec.capacity;
        self.debt = debt;
        self.now_free = node.available().without_shares();
        self.hosted_now = hosts(self.now_free);
        self.free_after.clear();
        self.steps.clear();
        if self.hosted_now == replicas {
            return;
        }
        // The node keeps its ends sorted.
        let (mut free, mut hosted) = (self.now_free, self.hosted_now);
        for e in &node.ends {
            free = free.plus(e.gives_back(node.held));
            self.free_after.push((e.end, free));
            // Once it could host them all, the later ends add no step (their room is
            // still kept, for `free_at`).
            if hosted < replicas {
                let more = hosts(free);
                self.steps.extend(std::iter::repeat_n(e.end, (more - hosted) as usize));
                hosted = more;
            }
        }
    }

    /// Its first step: the ends it could host one more replica at are in order.
    fn first_step(&self) -> Option<Time> {
        self.steps.first().copied()
    }

    /// Its free room at `at` (not before `now`): every job expected to end by then has left.
    fn free_at(&self, at: Time) -> Resources {
        match self.free_after.partition_point(|e| e.0 <= at) {
            0 => self.now_free,
            k => self.free_after[k - 1].1,
        }
    }
}

impl Scheduler {
    /// Where and when the pending job at `ix` could start once running jobs end as
    /// expected, earlier reservations (`taken`) keeping their nodes: `None` if it could not
    /// even then (nodes drained or gone, a gang larger than what may free up).
    ///
    /// Each usable node's placed jobs, in order of expected end, tell when it could host
    /// one more replica; the earliest time at which the nodes together host them all is the
    /// `replicas`-th of those times. `learnt` is what the last computation for the same job
    /// learnt of each node (empty: none); it is brought up to date.
    fn shadow(&self, ix: JobIx, taken: &[Planned], now: Time, learnt: &mut Hosting) -> Option<Planned> {
        let job = &self.jobs[ix];
        let shape = plan_shape(&job.spec);
        let (per_replica, replicas, _) = shape;
        learnt.learn_for(shape);
        let same_job = |last: &Planned| (last.id, last.ix, last.key) == (job.spec.id, ix, job.key);
        let last = learnt.last.take().filter(|last| same_job(last) && last.at > now);
        let unchanged = self.learn_nodes(learnt, taken, shape, last.as_ref().map(|l| l.at));
        // No node that changed hosts a replica by the last time, before or after: the same
        // steps come by then, the same nodes host one then with the same room, and the
        // time is still to come. The same nodes are chosen.
        if let Some(last) = last.filter(|_| unchanged) {
            learnt.last = Some(last.clone());
            return Some(last);
        }
        let at = learnt.earliest_time(replicas, now)?;
        let room_now = learnt.hosted_total >= replicas as usize;
        learnt.fill_candidates(at, room_now);
        let Hosting { nodes: hosting, candidates, .. } = learnt;
        let chosen = choose_nodes(candidates, per_replica, replicas, self.config.policy.scoring)?;
        let nodes: Vec<_> = chosen
            .into_iter()
            .map(|(node, count)| {
                // Both are in id order.
                let c = candidates.binary_search_by_key(&node, |c| c.node).map(|k| &candidates[k]);
                let h = hosting.binary_search_by_key(&node, |h| h.node).map(|k| &hosting[k]);
                let (c, h) = (c.expect("chosen among them"), h.expect("a candidate is a usable node"));
                let reserved = per_replica.times(count);
                // What the reservation leaves of the node's room then (its debt taken), and
                // no more than is free now.
                let spare = h.now_free.min_each(c.available.saturating_minus(reserved));
                (node, reserved, spare)
            })
            .collect();
        let planned = Planned { id: job.spec.id, ix, key: job.key, at, nodes: std::sync::Arc::new(nodes) };
        learnt.last = (!room_now).then(|| planned.clone());
        Some(planned)
    }

    /// Bring what `learnt` knows of each usable node up to date for a job of `shape`,
    /// earlier reservations (`taken`) keeping their part of each node.
    ///
    /// Every node's version is unique to its state (`Nodes::version`), so a node whose
    /// version is the one seen at the last computation is as it was then. When the nodes
    /// log tells which changed since then (`Nodes::changed_since`), only those and those an
    /// earlier reservation takes a part of (now or then) are read: nodes change at nearly
    /// every event, but one or two at a time, and a walk over every usable node at every
    /// cycle would be the reservations' largest cost with everything on. Otherwise every
    /// node is walked.
    ///
    /// `true` when only those were read and none of them hosts a replica by `last_at`,
    /// before or after (never without `last_at`).
    fn learn_nodes(&self, learnt: &mut Hosting, taken: &[Planned], shape: PlanShape, last_at: Option<Time>) -> bool {
        let seen = learnt.seen.filter(|_| learnt.positions.len() == learnt.nodes.len());
        let changed = seen.and_then(|version| self.nodes.changed_since(version));
        let known_changes = changed.is_some();
        let mut revisit = std::mem::take(&mut learnt.revisit);
        revisit.clear();
        if let Some(changed) = changed {
            revisit.extend(changed);
            for node in learnt.taken_nodes.iter().copied().chain(nodes_of(taken)) {
                revisit.extend(self.nodes.ix_of(node).map(|ix| ix.0));
            }
            revisit.sort_unstable();
            revisit.dedup();
        }
        let learnt_in_place = match known_changes {
            true => self.learn_changed(learnt, &revisit, taken, shape, last_at),
            false => None,
        };
        if learnt_in_place.is_none() {
            self.learn_every_node(learnt, taken, shape);
        }
        learnt.revisit = revisit;
        learnt.seen = Some(self.nodes.version());
        learnt.taken_nodes.clear();
        learnt.taken_nodes.extend(nodes_of(taken));
        learnt_in_place.unwrap_or(false)
    }

    /// `learn_nodes` where only the nodes at `revisit` (positions) may have changed; with
    /// whether none of them hosts a replica by `last_at`, before or after. `None`, with
    /// nothing changed, when one of them became usable or stopped being usable (the usable
    /// nodes are then walked again).
    ///
    /// When none of them does, the last reservation is kept and they are only marked
    /// `stale`, a check of their room at its time instead of learning their steps (the
    /// reservation is kept at most cycles, and a node changes at most of them). Otherwise
    /// they and the stale ones are brought up to date in place.
    fn learn_changed(
        &self,
        learnt: &mut Hosting,
        revisit: &[u32],
        taken: &[Planned],
        shape: PlanShape,
        last_at: Option<Time>,
    ) -> Option<bool> {
        let slot_of = |learnt: &Hosting, position: u32| {
            learnt.slot_at.get(position as usize).filter(|k| **k != u32::MAX).map(|k| *k as usize)
        };
        let usable = |position: u32| self.nodes.at(NodeIx(position)).usable_by(shape.2);
        if revisit.iter().any(|&position| slot_of(learnt, position).is_some() != usable(position)) {
            return None;
        }
        if let Some(at) = last_at {
            let hosts_by_last = |position: u32| {
                let Some(k) = slot_of(learnt, position) else { return false };
                // A stale node hosted none by then when it was marked (or the reservation
                // would not have been kept): what was learnt of it is older than that.
                let before = learnt.stale[k / 64] & (1 << (k % 64)) == 0 && learnt.hosts_by(k, at);
                before || hosts_one_by(self.nodes.at(NodeIx(position)), taken, shape, at)
            };
            // Stale nodes that did not change since are as they were when marked.
            if !revisit.iter().any(|&position| hosts_by_last(position)) {
                for &position in revisit {
                    if let Some(k) = slot_of(learnt, position) {
                        learnt.stale[k / 64] |= 1 << (k % 64);
                    }
                }
                return Some(true);
            }
        }
        for &position in revisit {
            if let Some(k) = slot_of(learnt, position) {
                bring_up_to_date(&mut learnt.nodes[k], self.nodes.at(NodeIx(position)), taken, shape);
                learnt.set_slot(k);
            }
        }
        for w in 0..learnt.stale.len() {
            let mut bits = std::mem::take(&mut learnt.stale[w]);
            while bits != 0 {
                let k = w * 64 + bits.trailing_zeros() as usize;
                bits &= bits - 1;
                let position = learnt.positions[k];
                bring_up_to_date(&mut learnt.nodes[k], self.nodes.at(NodeIx(position)), taken, shape);
                learnt.set_slot(k);
            }
        }
        Some(false)
    }

    /// `learn_nodes` over every node: the usable ones in id order, each reusing what was
    /// learnt of it if it is as it was (in place, in one pass: the usable nodes rarely
    /// change; from the first position where they did, the nodes are learnt afresh).
    fn learn_every_node(&self, learnt: &mut Hosting, taken: &[Planned], shape: PlanShape) {
        let Hosting { nodes: hosting, positions, .. } = learnt;
        positions.clear();
        let mut usable_count = 0;
        for (position, (id, version)) in self.nodes.ids_and_versions().enumerate() {
            let node = self.nodes.at(NodeIx(position as u32));
            // A node learnt at its present version was usable then and is as it was.
            let learnt_as_is = hosting.get(usable_count).is_some_and(|h| h.node == id && h.version == version);
            if !learnt_as_is {
                if !node.usable_by(shape.2) {
                    continue;
                }
                if hosting.get(usable_count).is_none_or(|h| h.node != id) {
                    hosting.truncate(usable_count);
                    hosting.push(NodeHosting::empty());
                }
            }
            bring_up_to_date(&mut hosting[usable_count], node, taken, shape);
            positions.push(position as u32);
            usable_count += 1;
        }
        hosting.truncate(usable_count);
        // Every node was read: none is stale.
        learnt.stale.clear();
        learnt.stale.resize(usable_count.div_ceil(64), 0);
        learnt.slot_at.clear();
        learnt.slot_at.resize(self.nodes.len(), u32::MAX);
        for (k, &position) in learnt.positions.iter().enumerate() {
            learnt.slot_at[position as usize] = k as u32;
        }
        learnt.set_every_slot();
    }

    /// Running jobs past their expected end get a new one, as of `now` (`estimate.rs`):
    /// what `run_ends` says before a reservation reads it.
    fn revise_run_ends(&mut self, now: Time) {
        // Most cycles find the earliest end still ahead.
        if self.run_ends.first_end().is_none_or(|end| end > now) {
            return;
        }
        let mut due = std::mem::take(&mut self.run_ends_due);
        let jobs = &self.jobs;
        self.run_ends.take_due(now, |entry| runs_to(jobs, entry), &mut due);
        for &entry in &due {
            let revised = self.expected_end(entry.2, now);
            match revised != entry.0 {
                true => self.move_run_end(entry, revised),
                false => self.run_ends.put_back(entry),
            }
        }
        due.clear();
        self.run_ends_due = due;
    }

    /// Whether the reservation's job still waits for it: pending, queued, holding nothing.
    fn still_reserving(&self, p: &Planned) -> bool {
        self.jobs.get_slot(p.ix).is_some_and(|j| {
            j.spec.id == p.id && matches!(j.state, JobState::Pending { reservation: None }) && j.queued_in.is_some()
        })
    }

    /// Index the placed job at `ix` by its expected end: in its nodes' lists, and in
    /// `run_ends` while it runs (a terminating job's end is not revised).
    pub(crate) fn index_run_end(&mut self, ix: JobIx) {
        let job = &self.jobs[ix];
        let (JobState::Running { placement, .. } | JobState::Terminating { placement, .. }) = &job.state else {
            unreachable!("only placed jobs are indexed by end");
        };
        let (end, id, per_replica) = (job.end_key(), job.spec.id, job.spec.per_replica);
        let running = matches!(job.state, JobState::Running { .. });
        for here in placement.replicas().chunk_by(|a, b| a.node == b.node) {
            PlacedEnd::new(ix, end, per_replica, here).insert_sorted(self.nodes.ends_mut(here[0].node));
        }
        if running {
            self.run_ends.add((end, id, ix));
            // Where the heap grows, so that it never holds more than twice the most jobs
            // that ran at once, and the slack.
            let jobs = &self.jobs;
            self.run_ends.drop_stale_if_many(|entry| runs_to(jobs, entry));
        }
        self.run_ends_version += 1;
    }

    /// A running job's expected end, indexed at `entry` (taken out of `run_ends`), moves
    /// to `revised`: a new entry in `run_ends`, and its entry in each of its nodes' lists
    /// moved to its place in their order.
    fn move_run_end(&mut self, entry: RunEnd, revised: Time) {
        let (_, id, ix) = entry;
        self.jobs[ix].expected_end = revised;
        let job = &self.jobs[ix];
        let JobState::Running { placement, .. } = &job.state else { unreachable!("only running jobs are revised") };
        for here in placement.replicas().chunk_by(|a, b| a.node == b.node) {
            let ends = self.nodes.ends_mut(here[0].node);
            let at = ends.iter().position(|e| e.job == ix).expect("a placed job is listed on its nodes");
            let mut moved = ends.remove(at);
            moved.end = revised;
            moved.insert_sorted(ends);
        }
        self.run_ends.put_back((revised, id, ix));
        self.run_ends_version += 1;
    }

    /// Undo `index_run_end` (before the job's state or end changes).
    pub(crate) fn unindex_run_end(&mut self, ix: JobIx) {
        let job = &self.jobs[ix];
        let (JobState::Running { placement, .. } | JobState::Terminating { placement, .. }) = &job.state else {
            unreachable!("only placed jobs are indexed by end");
        };
        if matches!(job.state, JobState::Running { .. }) {
            self.run_ends.went_stale();
        }
        for here in placement.replicas().chunk_by(|a, b| a.node == b.node) {
            self.nodes.ends_mut(here[0].node).retain(|e| e.job != ix);
        }
        self.run_ends_version += 1;
    }

    /// A `Hosting` for a new reservation of the job at `ix`: a spare one learnt for a job
    /// of the same shape if any (`shadow` brings what it learnt of each node up to date as
    /// for any reservation), else any spare one, else a new one.
    fn fresh_hosting(&mut self, ix: JobIx) -> Hosting {
        let shape = Some(plan_shape(&self.jobs[ix].spec));
        let same = self.spare_hostings.iter().rposition(|h| h.shape == shape);
        match same {
            Some(i) => self.spare_hostings.remove(i),
            None => self.spare_hostings.pop().unwrap_or_default(),
        }
    }

    /// Keep a reservation's `Hosting` that is no longer needed, for the next one (the
    /// oldest spare makes way).
    fn retire_hosting(&mut self, hosting: Hosting) {
        if self.spare_hostings.len() == SPARE_HOSTINGS_MAX {
            self.spare_hostings.remove(0);
        }
        self.spare_hostings.push(hosting);
    }

    /// The `Hosting` of a reservation that left the plan, kept for the next.
    pub(crate) fn retire_hosting_of(&mut self, id: JobId) {
        if let Some(hosting) = self.hosting.remove(&id) {
            self.retire_hosting(hosting);
        }
    }

    /// Step 4's first part: the reservations as of `now` (module doc). Whether they changed
    /// is recorded, so that jobs they held back look again.
    pub(crate) fn refresh_plan(&mut self, now: Time) {
        self.drop_reservations_held_by_caps();
        if self.plan.is_empty() {
            // Reservations that are gone leave what they learnt to the next.
            for (_, hosting) in std::mem::take(&mut self.hosting) {
                self.retire_hosting(hosting);
            }
            return;
        }
        self.revise_run_ends(now);
        let reordered = self.order_plan_by_rank(now);
        // Nothing it reads changed and no reservation's time has come: the same plan (the
        // ends it walked up to each time are where they were; those passed since only
        // move to `now`, before that time).
        let read = (self.nodes.version(), self.run_ends_version);
        if !reordered && self.plan_read == Some(read) && self.plan.iter().all(|p| p.at > now && self.still_reserving(p))
        {
            return;
        }
        // The plan is rebuilt in the buffer of the one before last: this runs at most cycles
        // with reservations on, and fresh buffers cost more than the reservations' arithmetic.
        let mut before = std::mem::take(&mut self.plan_spare);
        std::mem::swap(&mut before, &mut self.plan);
        // Each reservation's `Hosting` (what its last computation learnt of the nodes, a
        // dozen buffers) is brought up to date where the map keeps it, never copied: the
        // map is taken out for the loop, as `shadow` does not read it.
        let mut hostings = std::mem::take(&mut self.hosting);
        for p in &before {
            if !self.still_reserving(p) {
                continue;
            }
            let hosting = match hostings.entry(p.id) {
                Entry::Occupied(kept) => kept.into_mut(),
                Entry::Vacant(none) => none.insert(self.fresh_hosting(p.ix)),
            };
            match self.shadow(p.ix, &self.plan, now, hosting) {
                Some(fresh) => self.plan.push(fresh),
                None => {
                    let hosting = hostings.remove(&p.id).expect("just brought up to date");
                    self.retire_hosting(hosting);
                }
            }
        }
        self.hosting = hostings;
        // Those of reservations gone serve the next ones.
        let gone: Vec<JobId> =
            self.hosting.keys().filter(|id| !self.plan.iter().any(|p| p.id == **id)).copied().collect();
        for id in gone {
            self.retire_hosting_of(id);
        }
        if self.plan != before {
            self.changes.plan_changed = true;
        }
        before.clear();
        self.plan_spare = before;
        self.plan_read = Some(read);
    }

    /// Step 4a, with fair sharing: shares move as jobs start and end, so a job held back
    /// for a reservation may come to rank above its holder with neither the plan nor the
    /// room changing. Its group wakes to be asked again, as the reservation no longer binds
    /// it (scenario 161). A group held for a reservation that is gone was woken by the
    /// plan's change.
    pub(crate) fn wake_outranking_held(&mut self, now: Time) {
        if !self.fair.enabled() || self.plan.is_empty() {
            return;
        }
        let outranking: Vec<crate::ids::GroupIx> = self
            .queue
            .held_for_reservations()
            .filter(|&(_, head, holder)| {
                let Some(p) = self.plan.iter().find(|p| p.id == holder) else { return false };
                self.rank_against(head.ix, head, p, now).is_lt()
            })
            .map(|(gix, ..)| gix)
            .collect();
        for gix in outranking {
            self.queue.wake(gix);
        }
    }

    /// With fair sharing, holders of one priority move in rank as their tenants' shares
    /// change: put the plan back in rank order as of `now` (earlier reservations take their
    /// nodes first). Whether its order changed.
    fn order_plan_by_rank(&mut self, now: Time) -> bool {
        if !self.fair.enabled() || self.plan.len() < 2 {
            return false;
        }
        let ranks = self.plan_ranks(now);
        if ranks.is_sorted() {
            return false;
        }
        let mut ranked: Vec<(PlanRank, Planned)> = ranks.into_iter().zip(self.plan.drain(..)).collect();
        ranked.sort_unstable_by_key(|(rank, _)| *rank);
        self.plan.extend(ranked.into_iter().map(|(_, p)| p));
        true
    }

    /// A check for the tests, before a cycle at `now`: a reservation computed from what its
    /// last computation learnt of the nodes (`hosting`) is what computing it from nothing
    /// gives; and when the cycle would keep the plan as it is (`refresh_plan`: nothing it
    /// reads changed), the plan is what computing it afresh gives. `Err` names the first
    /// reservation that differs.
    #[doc(hidden)]
    pub fn check_kept_plan(&self, now: Time) -> Result<(), String> {
        for (i, p) in self.plan.iter().enumerate() {
            let Some(learnt) = self.hosting.get(&p.id) else { continue };
            if self.jobs.get_slot(p.ix).is_none_or(|j| j.spec.id != p.id) {
                continue;
            }
            let from_learnt = self.shadow(p.ix, &self.plan[..i], now, &mut learnt.clone());
            let from_nothing = self.shadow(p.ix, &self.plan[..i], now, &mut Hosting::default());
            if from_learnt != from_nothing {
                return Err(format!(
                    "reservation of {} from what was learnt {from_learnt:?} differs from a fresh one {from_nothing:?}",
                    p.id
                ));
            }
        }
        let read = (self.nodes.version(), self.run_ends_version);
        let would_revise = self
            .run_ends
            .live_entries(|e| runs_to(&self.jobs, e))
            .0
            .iter()
            .any(|&(end, _, ix)| end <= now && self.expected_end(ix, now) != end);
        let in_rank_order = self.plan_ranks(now).is_sorted();
        let kept = self.plan_read == Some(read)
            && !would_revise
            && in_rank_order
            && self.plan.iter().all(|p| p.at > now && self.still_reserving(p));
        if !kept {
            return Ok(());
        }
        for (i, p) in self.plan.iter().enumerate() {
            let fresh = self.shadow(p.ix, &self.plan[..i], now, &mut Hosting::default());
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
        if self.plan.iter().any(|p| p.ix == ix) {
            return;
        }
        // Its place: before the first reservation ranked below it (the plan is in rank
        // order as of its last refresh; with fair sharing, starts since may have moved a
        // holder down, and it is placed again after this one anyway).
        let key = self.jobs[ix].key;
        let at = self.plan.iter().position(|p| self.rank_against(ix, key, p, now).is_lt()).unwrap_or(self.plan.len());
        if at >= limits.count_max as usize {
            return;
        }
        self.revise_run_ends(now);
        // Reservations ranked above it keep their nodes first; those below are placed
        // again after it.
        let mut learnt = self.fresh_hosting(ix);
        let Some(planned) = self.shadow(ix, &self.plan[..at], now, &mut learnt) else {
            self.retire_hosting(learnt);
            return;
        };
        self.hosting.insert(planned.id, learnt);
        self.plan.insert(at, planned);
        let kept = self.plan.len().min(limits.count_max as usize);
        while self.plan.len() > kept {
            let dropped = self.plan.pop().expect("longer than kept");
            self.retire_hosting_of(dropped.id);
        }
        // Those ranked below it are placed around it now.
        let mut i = at + 1;
        while i < self.plan.len() {
            let id = self.plan[i].id;
            let mut learnt = self.hosting.remove(&id).unwrap_or_else(|| self.fresh_hosting(self.plan[i].ix));
            match self.shadow(self.plan[i].ix, &self.plan[..i], now, &mut learnt) {
                Some(again) => {
                    self.plan[i] = again;
                    self.hosting.insert(id, learnt);
                    i += 1;
                }
                None => {
                    self.plan.remove(i);
                    self.retire_hosting(learnt);
                }
            }
        }
        self.changes.plan_changed = true;
    }

    /// The rank of the pending job at `ix` (queued at `key`) as of `now` (`PlanRank`).
    /// Without fair sharing it is the queue's order, and no job is read.
    pub(crate) fn plan_rank(&self, ix: JobIx, key: QueueKey, now: Time) -> PlanRank {
        // A holder that left (the refresh drops it) ranks by its key alone.
        let job = self.jobs.get_slot(ix).filter(|j| self.fair.enabled() && j.spec.id == key.id);
        let shares = job.map_or((0, 0), |j| self.fair.key(j.spec.project, j.spec.user, now));
        (key.rank, shares, key)
    }

    /// Each reservation's holder's rank now, in plan order.
    fn plan_ranks(&self, now: Time) -> Vec<PlanRank> {
        self.plan.iter().map(|p| self.plan_rank(p.ix, p.key, now)).collect()
    }

    /// How the pending job at `ix` (queued at `key`) ranks against the reservation `p` now
    /// (`Less`: above it): `plan_rank` compared, the shares read only where they decide (the
    /// same priority, other tenants).
    fn rank_against(&self, ix: JobIx, key: QueueKey, p: &Planned, now: Time) -> std::cmp::Ordering {
        if key.rank != p.key.rank || !self.fair.enabled() {
            return key.cmp(&p.key);
        }
        let holder = self.jobs.get_slot(p.ix).filter(|j| j.spec.id == p.id);
        let spec = &self.jobs[ix].spec;
        match holder {
            Some(h) if (h.spec.project, h.spec.user) == (spec.project, spec.user) => key.cmp(&p.key),
            _ => self.plan_rank(ix, key, now).cmp(&self.plan_rank(p.ix, p.key, now)),
        }
    }

    /// Would starting the job at `ix` on `chosen` now delay a reservation ranked above it?
    /// The first such reservation, if any.
    pub(crate) fn delays_reservation(&self, ix: JobIx, chosen: &[(NodeId, u32)], now: Time) -> Option<&Planned> {
        let job = &self.jobs[ix];
        let ends_at = now.plus_ms(self.expected_run_ms(ix));
        let per_replica = job.spec.per_replica.as_whole_gpus();
        // Each reservation's spare room already leaves out what those above it reserve.
        self.plan.iter().filter(|p| ends_at > p.at && self.rank_against(ix, job.key, p, now).is_gt()).find(|p| {
            p.nodes.iter().any(|(node, _, spare)| {
                chosen.iter().any(|(n, count)| n == node && !per_replica.times(*count).fits_in(*spare))
            })
        })
    }

    /// A placement on free room that delays no reservation ranked above the job: every
    /// usable node with what it has free, less what reservations above need of it.
    pub(crate) fn place_around_plan(&self, ix: JobIx, now: Time) -> Option<Vec<(NodeId, u32)>> {
        let job = &self.jobs[ix];
        let ends_at = now.plus_ms(self.expected_run_ms(ix));
        let binding: Vec<&Planned> =
            self.plan.iter().filter(|p| ends_at > p.at && self.rank_against(ix, job.key, p, now).is_gt()).collect();
        let (per_replica, model) = (job.spec.per_replica.as_whole_gpus(), job.spec.gpu_model);
        let mut candidates: Vec<Candidate> = Vec::new();
        // A node where one replica does not fit in what is free is no candidate (`choose_nodes`
        // weighs only those where one does, in any order), whatever reservations leave of it.
        let mut add = |n: &crate::cluster::Node| {
            if !per_replica.fits_in(n.available()) {
                return;
            }
            let mut available = n.available();
            for p in &binding {
                if let Some((_, _, spare)) = p.nodes.iter().find(|(node, ..)| *node == n.spec.id) {
                    available = available.min_each(*spare);
                }
            }
            candidates.push(Candidate { node: n.spec.id, available, capacity: n.spec.capacity });
        };
        match per_replica.gpus {
            // Only the usable nodes with that many GPUs free or more, from the free index.
            gpus @ 1.. => {
                let index = &self.nodes.index;
                index.visit_occupied_levels(model, gpus, |level| {
                    index.visit_level(model, level, |at| {
                        add(self.nodes.at(at));
                        false
                    })
                });
            }
            0 => self.nodes.iter().filter(|n| n.usable_by(model)).for_each(add),
        }
        choose_nodes(&candidates, per_replica, job.spec.replicas, self.config.policy.scoring)
    }

    /// A job started on `chosen`: it used up the reservations' spare room there for the
    /// rest of the cycle.
    pub(crate) fn plan_started(&mut self, ix: JobIx, chosen: &[(NodeId, u32)]) {
        let job = &self.jobs[ix];
        let per_replica = job.spec.per_replica.as_whole_gpus();
        // Whoever starts, the room it takes is no longer spare.
        for p in &mut self.plan {
            if !p.nodes.iter().any(|(node, ..)| chosen.iter().any(|(n, _)| n == node)) {
                continue;
            }
            for (node, _, spare) in std::sync::Arc::make_mut(&mut p.nodes) {
                if let Some(&(_, count)) = chosen.iter().find(|(n, _)| n == node) {
                    *spare = spare.saturating_minus(per_replica.times(count));
                }
            }
        }
        // A holder that starts leaves the plan.
        self.leave_plan(ix);
    }

    /// The job at `ix` gives up its reservation, if it has one: it started, it holds GPUs
    /// while its victims leave, or a cap holds it back (a reservation is for room: kept, it
    /// would hold back jobs ranked below for a start its quota or cohort does not allow).
    /// Jobs held back for the plan look again.
    pub(crate) fn leave_plan(&mut self, ix: JobIx) {
        if let Some(at) = self.plan.iter().position(|p| p.ix == ix) {
            let left = self.plan.remove(at);
            self.retire_hosting_of(left.id);
            self.changes.plan_changed = true;
            // Those ranked below were placed around it: the next refresh places them again.
            self.plan_read = None;
        }
    }

    /// Reservations whose job its quota or its cohort now holds back go (see `leave_plan`):
    /// a cap went down or changed hands, or a job of its accounts started (at the start of
    /// a cycle, and after its walk). Their jobs are asked again, to say so.
    pub(crate) fn drop_reservations_held_by_caps(&mut self) {
        if self.plan.is_empty() || !self.ledger.any_capped() {
            return;
        }
        let held: Vec<JobIx> = self
            .plan
            .iter()
            .filter(|p| self.still_reserving(p) && self.cap_shortfall(p.ix).is_some())
            .map(|p| p.ix)
            .collect();
        for ix in held {
            self.leave_plan(ix);
            if let Some(gix) = self.jobs[ix].queued_in.filter(|&g| self.queue.is_asleep(g)) {
                self.queue.wake(gix);
            }
        }
    }
}

/// Whether `entry` of `run_ends` is live: its job runs, to that end.
pub(crate) fn runs_to(jobs: &crate::jobs::JobStore, &(end, id, ix): &RunEnd) -> bool {
    jobs.get_slot(ix)
        .is_some_and(|j| j.spec.id == id && j.expected_end == end && matches!(j.state, JobState::Running { .. }))
}

/// The nodes reservations take a part of (a node once per reservation on it).
fn nodes_of(plan: &[Planned]) -> impl Iterator<Item = NodeId> + '_ {
    plan.iter().flat_map(|p| p.nodes.iter().map(|(n, ..)| *n))
}

/// Whether `node` (a usable node) could host a replica of a job of `shape` by `at`, earlier
/// reservations (`taken`) keeping their part of it: what `NodeHosting::compute` and
/// `Hosting::hosts_by` say of it, without learning its steps.
fn hosts_one_by(node: &crate::cluster::Node, taken: &[Planned], shape: PlanShape, at: Time) -> bool {
    // Its free room at `at`: every job expected to end by then has left (ends are sorted).
    let free = node
        .ends
        .iter()
        .take_while(|e| e.end <= at)
        .fold(node.available().without_shares(), |free, e| free.plus(e.gives_back(node.held)));
    shape.0.fits_in(free.saturating_minus(debt_of(node, taken, over_booked(node))))
}

/// What earlier reservations (`taken`) take of `node`, and what is `over` booked there.
fn debt_of(node: &crate::cluster::Node, taken: &[Planned], over: Resources) -> Resources {
    let reserved_by_earlier = taken
        .iter()
        .flat_map(|p| p.nodes.iter())
        .filter(|(n, ..)| *n == node.spec.id)
        .fold(Resources::ZERO, |t, (_, r, _)| t.plus(*r));
    reserved_by_earlier.plus(over)
}

/// What `h` learnt of `node` (a usable node), brought up to date: computed again unless the
/// node is at the version learnt and earlier reservations (`taken`) take of it what they
/// took then.
fn bring_up_to_date(h: &mut NodeHosting, node: &crate::cluster::Node, taken: &[Planned], shape: PlanShape) {
    let (per_replica, replicas, _) = shape;
    let learnt_as_is = h.node == node.spec.id && h.version == node.version;
    // A node as it was is over-booked as it was: only the earlier reservations' part of its
    // debt may have changed.
    let over_now = if learnt_as_is { h.over } else { over_booked(node) };
    let debt = debt_of(node, taken, over_now);
    if !learnt_as_is || h.debt != debt {
        h.compute(node, debt, per_replica, replicas);
        h.over = over_now;
    }
}

/// A node's CPU and memory may be over-booked while victims leave (their preemptor's hold
/// counts apart): what is over is owed too.
fn over_booked(n: &crate::cluster::Node) -> Resources {
    let booked = n.used.plus(n.reserved);
    let cap = n.spec.capacity;
    Resources::new(
        0,
        booked.cpu_millis.saturating_sub(cap.cpu_millis),
        booked.memory_mib.saturating_sub(cap.memory_mib),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `nth_step` is the `nth` of every node's steps sorted together (a plain sort), and
    /// leaves the tree of first steps as it found it.
    #[test]
    fn nth_step_is_the_nth_of_all_steps_in_order() {
        let mut rng = crate::test_rng::TestRng::new(7);
        let mut next = |below: u64| rng.below(below);
        for nodes in [0usize, 1, 2, 5, 64] {
            for _ in 0..100 {
                let mut hosting = Hosting::default();
                let mut all = Vec::new();
                for _ in 0..nodes {
                    let mut node = NodeHosting::empty();
                    let mut at = next(50);
                    for _ in 0..next(4) {
                        // Steps repeat where one end frees room for several replicas.
                        at += next(3);
                        node.steps.push(Time(at));
                        all.push(at);
                    }
                    hosting.nodes.push(node);
                }
                hosting.set_every_slot();
                let tree_before = hosting.first_steps.leaves().to_vec();
                all.sort_unstable();
                for nth in 0..all.len() + 2 {
                    assert_eq!(hosting.nth_step(nth), all.get(nth).copied(), "{nodes} nodes, step {nth} of {all:?}");
                    assert_eq!(hosting.first_steps.leaves(), &tree_before[..], "the tree restored");
                }
            }
        }
    }

    /// `RunEnds` against a sorted set of the live entries: the entries due at any time are
    /// the set's up to then, whatever went stale before, and stale entries never pile up
    /// past the slack (jobs indexed again with the same key included).
    #[test]
    fn run_ends_due_are_those_of_a_sorted_set() {
        use std::collections::BTreeSet;
        let mut rng = crate::test_rng::TestRng::new(11);
        let (mut ends, mut model) = (RunEnds::default(), BTreeSet::<RunEnd>::new());
        let mut gone: Vec<RunEnd> = Vec::new();
        let (mut now, mut live_max) = (0, 0);
        for step in 0..20_000u64 {
            match rng.below(8) {
                0..=2 => {
                    let entry = (Time(now + rng.below(20_000)), JobId(step), JobIx(step as u32));
                    ends.add(entry);
                    model.insert(entry);
                    ends.drop_stale_if_many(|e| model.contains(e));
                }
                3..=5 if !model.is_empty() => {
                    let entry = *model.iter().nth(rng.below(model.len() as u64) as usize).unwrap();
                    model.remove(&entry);
                    ends.went_stale();
                    gone.push(entry);
                }
                6 if !gone.is_empty() => {
                    // Indexed again with the same key while its stale copy is still there.
                    let entry = gone.swap_remove(rng.below(gone.len() as u64) as usize);
                    if model.insert(entry) {
                        ends.add(entry);
                        ends.drop_stale_if_many(|e| model.contains(e));
                    }
                }
                _ => {
                    now += rng.below(20);
                    let mut due = Vec::new();
                    ends.take_due(Time(now), |e| model.contains(e), &mut due);
                    let expected: Vec<RunEnd> =
                        model.range(..=(Time(now), JobId(u64::MAX), JobIx(u32::MAX))).copied().collect();
                    assert_eq!(due, expected, "at {now}");
                    for (k, &entry) in due.iter().enumerate() {
                        // Half move on, half stay where they are.
                        let kept = match k % 2 {
                            0 => entry,
                            _ => (Time(now + 1 + rng.below(100)), entry.1, entry.2),
                        };
                        model.remove(&entry);
                        model.insert(kept);
                        ends.put_back(kept);
                    }
                }
            }
            live_max = live_max.max(model.len());
            assert!(ends.heap.len() <= 2 * live_max + RUN_ENDS_STALE_SLACK + 1, "stale entries pile up");
            if step % 100 == 0 {
                let (live, counted) = ends.live_entries(|e| model.contains(e));
                assert_eq!(live, model.iter().copied().collect::<Vec<_>>());
                assert_eq!(counted, model.len());
            }
        }
    }
}
