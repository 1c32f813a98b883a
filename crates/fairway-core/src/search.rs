//! The victim search's pure leaf: the best set of victims on one node.
//!
//! Given what a node has free, what a replica needs and the node's candidates, find the set
//! of victims that makes room and ranks first by the preemption rules (see
//! `preemption.rs`): the lowest highest priority (rule 2), the least GPU-time lost
//! (rule 3), the fewest GPUs freed beyond need (rule 4), the fewest victims, then the most
//! recently submitted victims (rule 5), within the victim bound (rule 6).
//!
//! The search is exact:
//! - When only GPUs must be freed (the node has the CPU and memory already) and no GPU is
//!   shared, a dynamic program over (GPUs freed, victims taken) keeps the best set for each
//!   pair: a node has at most 64 GPUs, so there are at most 65 × (bound + 1) states.
//! - When CPU or memory must be freed too, or GPUs are shared (a share of one GPU, see
//!   `Resources::gpu_milli`), a branch and bound over the candidates (least lost work
//!   first, cut when the work lost exceeds the best set's) finds the best set in at most
//!   [`BRANCH_STEPS_MAX`] steps. Beyond that many steps it settles for the candidates in
//!   rule order, minus those not needed, and says so ([`Exactness`]).
//!
//! With shared GPUs the room is counted GPU by GPU ([`SearchRoom`]): a GPU is free for a
//! whole-GPU job only when every job on it goes, and a share fits on one GPU whose free
//! thousandths (after the victims go) are at least the share: freeing 300 thousandths of a
//! GPU that a 500 share needs is not enough. Rule 4 counts thousandths of GPUs left free.
//! The search over the whole cluster ([`best_wide_set`]) counts each node the same way.
//!
//! Neither depends on the scheduler: tests compare them with a brute-force search.

use std::cmp::{Ordering, Reverse};

pub use smallvec::SmallVec;

use crate::min_tree::MinTree;
use crate::types::{GpuSet, JobId, NodeId, Priority, ResourceKind, Resources};

/// A one-replica preemptor's victim search, as the scheduler saw it: for tests that check
/// its choice from outside (see `Scheduler::record_searches`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SearchRecord {
    pub preemptor: JobId,
    /// What one replica needs.
    pub demand: Resources,
    pub victims_max: usize,
    /// Every node the preemptor could use: its id, what it has free, and the candidates on
    /// it that were examined (rules 1 and 6).
    pub nodes: Vec<(NodeId, SearchRoom, Vec<NodeCandidate>)>,
    /// The node and the victims (by id) chosen, if any.
    pub chosen: Option<(NodeId, Vec<JobId>)>,
}

/// A running job as a victim on one node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeCandidate {
    pub id: JobId,
    pub priority: Priority,
    /// GPU-time it would lose (since its work was last saved, times its GPUs), in GPU·ms.
    pub lost_gpu_ms: u64,
    /// What it frees on the node (whole GPUs, CPU, memory; a share's GPU is in `slots`).
    pub freed: Resources,
    /// Its tenant's fair share (rule 2b), as ordered bits: the higher, the further its
    /// tenant is above its share. 0 without fair sharing.
    pub tenant_share: u64,
    /// Its GPUs on the node (read when the node's room is counted GPU by GPU).
    pub slots: GpuSet,
    /// The thousandths of its one GPU it takes as a share; 0 when it takes its GPUs whole.
    pub share_milli: u32,
}

/// The thousandths a job frees on each of its GPUs: its share, or the whole GPU.
fn milli_per_slot(share_milli: u32) -> u16 {
    if share_milli > 0 { share_milli as u16 } else { 1000 }
}

/// What a node has free as the one-node search counts it.
///
/// Without shared GPUs on the node (and a preemptor that takes whole GPUs), GPUs are
/// counted whole (`free.gpus`) and `slot_free` is empty. Otherwise `slot_free` gives each
/// GPU's free thousandths (1000 for a free GPU, 0 for one taken whole or held for a
/// preemptor, `1000 − shares` for a shared one): a victim's going adds its thousandths to
/// each of its GPUs not `held`; a whole-GPU demand needs that many GPUs at 1000, a share
/// one GPU with at least its thousandths.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SearchRoom {
    /// Whole GPUs free (GPU by GPU: unread), CPU and memory.
    pub free: Resources,
    pub slot_free: Vec<u16>,
    /// GPUs held for a preemptor: no victim's going frees them.
    pub held: GpuSet,
}

impl SearchRoom {
    /// GPUs counted whole.
    pub fn whole(free: Resources) -> SearchRoom {
        SearchRoom { free, slot_free: Vec::new(), held: GpuSet::EMPTY }
    }

    /// Is the room counted GPU by GPU?
    pub fn by_slot(&self) -> bool {
        !self.slot_free.is_empty()
    }

    fn add(&mut self, c: &NodeCandidate) {
        self.add_freed(c.freed, c.slots, c.share_milli);
    }

    fn remove(&mut self, c: &NodeCandidate) {
        self.remove_freed(c.freed, c.slots, c.share_milli);
    }

    /// Undoes `add_freed`.
    fn remove_freed(&mut self, freed: Resources, slots: GpuSet, share_milli: u32) {
        self.free = self.free.minus(freed);
        if self.by_slot() {
            for slot in slots.minus(self.held).iter() {
                self.slot_free[slot as usize] -= milli_per_slot(share_milli);
            }
        }
    }

    /// The thousandths a job's going adds here: its share or whole GPUs, on its GPUs not
    /// held (GPU by GPU), or its whole GPUs × 1000.
    fn milli_freed(&self, freed: Resources, slots: GpuSet, share_milli: u32) -> u64 {
        if self.by_slot() {
            u64::from(slots.minus(self.held).len()) * u64::from(milli_per_slot(share_milli))
        } else {
            u64::from(freed.gpus) * 1000
        }
    }

    /// Whole GPUs free: GPU by GPU, those at 1000.
    pub(crate) fn whole_gpus(&self) -> u32 {
        if self.by_slot() { self.slot_free.iter().filter(|&&f| f >= 1000).count() as u32 } else { self.free.gpus }
    }

    /// The least thousandths that victims must still free here for `more` whole GPUs: the
    /// GPUs closest to whole, each up to 1000 (`None`: fewer GPUs than that may ever be
    /// whole). GPUs held for a preemptor never come free.
    fn milli_short_of(&self, more: u32) -> Option<u64> {
        if more == 0 {
            return Some(0);
        }
        if !self.by_slot() {
            return Some(u64::from(more) * 1000);
        }
        // On the stack: the branch and bound asks this at every step (a node has at most 64
        // GPUs).
        let mut short = [0u16; 64];
        let mut n = 0;
        for (s, &free) in self.slot_free.iter().enumerate() {
            if free < 1000 && !self.held.contains(s as u32) {
                short[n] = 1000 - free;
                n += 1;
            }
        }
        if n < more as usize {
            return None;
        }
        let short = &mut short[..n];
        short.sort_unstable();
        Some(short[..more as usize].iter().map(|&m| u64::from(m)).sum())
    }

    /// A job's going: it frees `freed`, and on `slots` its share (or each whole GPU).
    pub(crate) fn add_freed(&mut self, freed: Resources, slots: GpuSet, share_milli: u32) {
        self.free = self.free.plus(freed);
        if self.by_slot() {
            for slot in slots.minus(self.held).iter() {
                self.slot_free[slot as usize] += milli_per_slot(share_milli);
            }
        }
    }

    /// Does one replica of `demand` fit?
    pub fn fits(&self, demand: Resources) -> bool {
        if demand.cpu_millis > self.free.cpu_millis || demand.memory_mib > self.free.memory_mib {
            return false;
        }
        if !self.by_slot() {
            return demand.gpus <= self.free.gpus && !demand.is_share();
        }
        if demand.is_share() {
            self.slot_free.iter().any(|&f| u32::from(f) >= demand.gpu_milli)
        } else {
            self.slot_free.iter().filter(|&&f| f >= 1000).count() as u32 >= demand.gpus
        }
    }

    /// Thousandths of GPUs free.
    pub(crate) fn free_milli(&self) -> u64 {
        if self.by_slot() {
            self.slot_free.iter().map(|&f| u64::from(f)).sum()
        } else {
            u64::from(self.free.gpus) * 1000
        }
    }
}

/// How a set of victims ranks: lower is better (rules 2 to 5, in order).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SetCost {
    pub top_priority: Priority,
    /// Rule 2b: the least tenant share among the victims at `top_priority` (higher ranks
    /// first: the tenants furthest above their share give way first).
    pub top_share: u64,
    pub lost_gpu_ms: u64,
    /// Rule 4, in thousandths of GPUs (whole GPUs count 1000).
    pub milli_beyond_need: u64,
    pub victims: usize,
    /// The victims' ids, highest first: of two sets, the one that is larger here (the more
    /// recently submitted victims) ranks first.
    pub ids_newest_first: Vec<JobId>,
}

impl Ord for SetCost {
    fn cmp(&self, other: &SetCost) -> Ordering {
        (self.top_priority, Reverse(self.top_share), self.lost_gpu_ms, self.milli_beyond_need, self.victims)
            .cmp(&(
                other.top_priority,
                Reverse(other.top_share),
                other.lost_gpu_ms,
                other.milli_beyond_need,
                other.victims,
            ))
            .then_with(|| other.ids_newest_first.cmp(&self.ids_newest_first))
    }
}

impl PartialOrd for SetCost {
    fn partial_cmp(&self, other: &SetCost) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl SetCost {
    /// The cost of taking `set` from a node with `room` free for `demand`.
    pub fn of(set: &[NodeCandidate], room: &SearchRoom, demand: Resources) -> SetCost {
        SetCost::of_iter(set.iter(), room, demand)
    }

    fn of_iter<'a>(
        set: impl Iterator<Item = &'a NodeCandidate> + Clone,
        room: &SearchRoom,
        demand: Resources,
    ) -> SetCost {
        let mut ids_newest_first: Vec<JobId> = set.clone().map(|v| v.id).collect();
        ids_newest_first.sort_unstable_by(|a, b| b.cmp(a));
        let top_priority = set.clone().map(|v| v.priority).max().unwrap_or(Priority::MIN);
        let mut after = room.clone();
        set.clone().for_each(|v| after.add(v));
        SetCost {
            top_priority,
            top_share: set.clone().filter(|v| v.priority == top_priority).map(|v| v.tenant_share).min().unwrap_or(0),
            lost_gpu_ms: set.map(|v| v.lost_gpu_ms).sum(),
            milli_beyond_need: after.free_milli().saturating_sub(demand.gpu_milli_total()),
            victims: ids_newest_first.len(),
            ids_newest_first,
        }
    }
}

/// Whether a set is the best there is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exactness {
    Exact,
    /// The branch and bound ran out of steps: on one node, the set is the candidates in
    /// rule order, minus those not needed; over the whole cluster, the best set found by
    /// then (see `best_wide_set`).
    StepsExhausted,
}

/// The best set on a node, by index into the candidates (ascending), and its cost.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeSet {
    pub victims: Vec<usize>,
    pub cost: SetCost,
    pub exactness: Exactness,
}

/// Steps the branch and bound may take on one node.
pub const BRANCH_STEPS_MAX: u32 = 20_000;

/// The best set of at most `victims_max` candidates whose going makes room for `demand`
/// next to `available` (GPUs counted whole); `None` if no such set exists (or none is
/// needed: `demand` fits). See [`best_set_on_node_in`] for a room counted GPU by GPU.
///
/// Rule 2 first: the candidates are admitted level by level, lowest priority first, and
/// the first level at which some set makes room is the set's highest priority (a set of
/// lower levels alone would have been found before). Within it, the exact search ranks
/// sets by rules 3 to 5.
pub fn best_set_on_node(
    available: Resources,
    demand: Resources,
    candidates: &[NodeCandidate],
    victims_max: usize,
) -> Option<NodeSet> {
    best_set_on_node_with(&mut Buffers::default(), &SearchRoom::whole(available), demand, candidates, victims_max)
}

/// [`best_set_on_node`] on any [`SearchRoom`].
pub fn best_set_on_node_in(
    room: &SearchRoom,
    demand: Resources,
    candidates: &[NodeCandidate],
    victims_max: usize,
) -> Option<NodeSet> {
    best_set_on_node_with(&mut Buffers::default(), room, demand, candidates, victims_max)
}

/// Memory the search reuses from one call to the next (the scheduler keeps one).
#[derive(Clone, Debug, Default)]
pub struct Buffers {
    levels: Vec<Priority>,
    /// Rule 2b's floors at the deciding level, highest first, and the candidates a floor
    /// admits.
    floors: Vec<u64>,
    subset: Vec<usize>,
    admitted: Vec<usize>,
    at_level: Vec<NodeCandidate>,
    order: Vec<usize>,
    table: Vec<Option<Partial>>,
}

/// [`best_set_on_node`], reusing `buffers`.
pub fn best_set_on_node_with(
    buffers: &mut Buffers,
    available: &SearchRoom,
    demand: Resources,
    candidates: &[NodeCandidate],
    victims_max: usize,
) -> Option<NodeSet> {
    if available.fits(demand) || victims_max == 0 {
        return None;
    }
    // One level and one tenant share (a node's victims up to the level where it makes room,
    // without fair sharing: the usual case): one floor admitting every candidate, as below
    // but without listing levels and floors.
    if let Some(first) = candidates.first()
        && candidates.iter().all(|c| c.priority == first.priority && c.tenant_share == first.tenant_share)
    {
        let mut room = available.clone();
        candidates.iter().for_each(|c| room.add(c));
        if !room.fits(demand) {
            return None;
        }
        let (victims, exactness) = best_set_up_to_level(buffers, available, demand, candidates, victims_max)?;
        return Some(node_set(victims, exactness, candidates, available, demand));
    }
    let mut levels = std::mem::take(&mut buffers.levels);
    levels.clear();
    levels.extend(candidates.iter().map(|c| c.priority));
    levels.sort_unstable();
    levels.dedup();
    buffers.admitted.clear();
    let mut room = available.clone();
    let mut found = None;
    'levels: for &level in &levels {
        for (i, c) in candidates.iter().enumerate().filter(|(_, c)| c.priority == level) {
            buffers.admitted.push(i);
            room.add(c);
        }
        if !room.fits(demand) {
            continue;
        }
        // Rule 2b: the highest floor of tenant share at this level that still leaves a set
        // (every set found at a floor then has exactly that least share, so rules 3 to 5
        // decide among them as usual). Without fair sharing every share is 0: one floor.
        let mut floors = std::mem::take(&mut buffers.floors);
        floors.clear();
        floors.extend(candidates.iter().filter(|c| c.priority == level).map(|c| c.tenant_share));
        floors.sort_unstable_by(|a, b| b.cmp(a));
        floors.dedup();
        for &floor in &floors {
            let best = best_above_floor(buffers, available, demand, candidates, victims_max, level, floor);
            if let Some((victims, exactness)) = best {
                found = Some(node_set(victims, exactness, candidates, available, demand));
                buffers.floors = floors;
                break 'levels;
            }
        }
        buffers.floors = floors;
    }
    buffers.levels = levels;
    found
}

/// The set of `candidates` at `victims` (indices), in index order, with its cost.
fn node_set(
    mut victims: Vec<usize>,
    exactness: Exactness,
    candidates: &[NodeCandidate],
    available: &SearchRoom,
    demand: Resources,
) -> NodeSet {
    victims.sort_unstable();
    let cost = SetCost::of_iter(victims.iter().map(|&i| &candidates[i]), available, demand);
    NodeSet { victims, cost, exactness }
}

/// The best set of the admitted candidates (`buffers.admitted`) below `level`, and of
/// those at `level` whose tenant share is at least `floor`, by index into `candidates`.
fn best_above_floor(
    buffers: &mut Buffers,
    available: &SearchRoom,
    demand: Resources,
    candidates: &[NodeCandidate],
    victims_max: usize,
    level: Priority,
    floor: u64,
) -> Option<(Vec<usize>, Exactness)> {
    let mut subset = std::mem::take(&mut buffers.subset);
    subset.clear();
    let admits = |c: &NodeCandidate| c.priority < level || c.tenant_share >= floor;
    subset.extend(buffers.admitted.iter().copied().filter(|&i| admits(&candidates[i])));
    let mut room = available.clone();
    subset.iter().for_each(|&i| room.add(&candidates[i]));
    let best = if !room.fits(demand) {
        None
    } else if subset.len() == candidates.len() {
        // Usually every candidate is admitted at once (the scheduler passes those up to the
        // level where the node makes room): no copy then.
        best_set_up_to_level(buffers, available, demand, candidates, victims_max)
    } else {
        let mut at_level = std::mem::take(&mut buffers.at_level);
        at_level.clear();
        at_level.extend(subset.iter().map(|&i| candidates[i]));
        let best = best_set_up_to_level(buffers, available, demand, &at_level, victims_max);
        buffers.at_level = at_level;
        best.map(|(victims, exactness)| (victims.into_iter().map(|i| subset[i]).collect(), exactness))
    };
    buffers.subset = subset;
    best
}

/// Rules 3 to 5 among sets of `candidates` (indices into it).
fn best_set_up_to_level(
    buffers: &mut Buffers,
    available: &SearchRoom,
    demand: Resources,
    candidates: &[NodeCandidate],
    victims_max: usize,
) -> Option<(Vec<usize>, Exactness)> {
    let need = demand.saturating_minus(available.free);
    let gpus_only = need.cpu_millis == 0 && need.memory_mib == 0 && !available.by_slot();
    let holding_gpus = candidates.iter().filter(|c| c.freed.gpus > 0).count();
    if gpus_only && holding_gpus <= 64 {
        gpu_program(buffers, need.gpus, candidates, victims_max).map(|v| (v, Exactness::Exact))
    } else {
        branch_and_bound(available, demand, candidates, victims_max)
    }
}

/// A set in the dynamic program: the candidates taken (bit i: candidate at position i of
/// the id-descending order) and the work they lose.
#[derive(Clone, Copy, Debug)]
struct Partial {
    taken: u64,
    lost_gpu_ms: u64,
}

impl Partial {
    /// Same GPUs freed and same count: less work lost, then (rule 5) the set whose highest
    /// differing id is in it.
    fn better_than(&self, other: &Partial) -> bool {
        if self.lost_gpu_ms != other.lost_gpu_ms {
            return self.lost_gpu_ms < other.lost_gpu_ms;
        }
        let differ = self.taken ^ other.taken;
        differ != 0 && self.taken & (differ & differ.wrapping_neg()) != 0
    }
}

/// GPUs only: `best[g][k]` is the best set of `k` candidates freeing exactly `g` GPUs
/// (candidates freeing no GPU cannot help and are left out).
fn gpu_program(
    buffers: &mut Buffers,
    need_gpus: u32,
    candidates: &[NodeCandidate],
    victims_max: usize,
) -> Option<Vec<usize>> {
    // Positions in id-descending order, so that bit order is rule 5's order.
    let order = &mut buffers.order;
    order.clear();
    order.extend((0..candidates.len()).filter(|&i| candidates[i].freed.gpus > 0));
    order.sort_unstable_by(|&a, &b| candidates[b].id.cmp(&candidates[a].id));
    let gpus_max: usize = order.iter().map(|&i| candidates[i].freed.gpus as usize).sum();
    let k_max = victims_max.min(order.len());
    if (gpus_max as u64) < u64::from(need_gpus) || k_max == 0 {
        return None;
    }
    if need_gpus == 1 && order.iter().all(|&i| candidates[i].lost_gpu_ms > 0) {
        return Some(vec![best_single(candidates, order)]);
    }
    // best[g][k], row by row.
    let width = k_max + 1;
    let best = &mut buffers.table;
    best.clear();
    best.resize((gpus_max + 1) * width, None);
    best[0] = Some(Partial { taken: 0, lost_gpu_ms: 0 });
    let mut reach = 0usize;
    for (bit, &i) in order.iter().enumerate() {
        let (g_i, lost_i) = (candidates[i].freed.gpus as usize, candidates[i].lost_gpu_ms);
        // Downwards, so that each candidate is taken at most once.
        // After `bit` candidates, no set has more than `bit` of them.
        for g in (0..=reach).rev() {
            for k in (0..k_max.min(bit + 1)).rev() {
                let Some(from) = best[g * width + k] else { continue };
                let next = Partial { taken: from.taken | 1 << bit, lost_gpu_ms: from.lost_gpu_ms + lost_i };
                let slot = &mut best[(g + g_i) * width + k + 1];
                if slot.is_none_or(|s| next.better_than(&s)) {
                    *slot = Some(next);
                }
            }
        }
        reach += g_i;
    }
    // Rules 3, 4 and the count, then rule 5 (through `better_than`).
    let mut winner: Option<(u64, usize, usize, Partial)> = None;
    for (g, row) in best.chunks(width).enumerate().skip(need_gpus as usize) {
        for (k, p) in row.iter().enumerate() {
            let Some(p) = p else { continue };
            let key = (p.lost_gpu_ms, g, k);
            let wins = match &winner {
                None => true,
                Some((lost, wg, wk, wp)) => key < (*lost, *wg, *wk) || (key == (*lost, *wg, *wk) && p.better_than(wp)),
            };
            if wins {
                winner = Some((p.lost_gpu_ms, g, k, *p));
            }
        }
    }
    let (_, _, _, p) = winner?;
    Some((0..order.len()).filter(|bit| p.taken & (1 << bit) != 0).map(|bit| order[bit]).collect())
}

/// `gpu_program` for one GPU when every candidate loses work: each candidate alone makes
/// room and a set of several loses more than each of its members, so the best set is one
/// candidate: the least work lost, then the fewest GPUs freed (rule 4), then (rule 5,
/// `Partial::better_than` between two single sets) the higher id.
fn best_single(candidates: &[NodeCandidate], order: &[usize]) -> usize {
    let key = |i: usize| (candidates[i].lost_gpu_ms, candidates[i].freed.gpus, std::cmp::Reverse(candidates[i].id));
    order.iter().copied().min_by_key(|&i| key(i)).expect("a candidate frees a GPU")
}

/// CPU or memory must be freed too: depth first over the candidates, least lost work first,
/// taking each or not; a branch ends when its set makes room (more victims only rank
/// lower) or loses more work than the best set found.
fn branch_and_bound(
    available: &SearchRoom,
    demand: Resources,
    candidates: &[NodeCandidate],
    victims_max: usize,
) -> Option<(Vec<usize>, Exactness)> {
    let mut order: Vec<usize> = (0..candidates.len()).collect();
    order.sort_unstable_by_key(|&i| (candidates[i].lost_gpu_ms, std::cmp::Reverse(candidates[i].id)));
    // The room with every candidate from the current position on gone too: the most the
    // branch can still reach.
    let mut reach = available.clone();
    candidates.iter().for_each(|c| reach.add(c));
    let mut search = Branch {
        available,
        demand,
        candidates,
        order: &order,
        room: available.clone(),
        reach,
        victims_max,
        steps: 0,
        set: Vec::new(),
        best: None,
    };
    search.descend(0, 0);
    if search.steps > BRANCH_STEPS_MAX {
        let fallback = rule_order_minimal(available, demand, candidates, victims_max)?;
        return Some((fallback, Exactness::StepsExhausted));
    }
    search.best.map(|(_, set)| (set, Exactness::Exact))
}

/// The branch and bound's state: `room` is the room with the set's victims gone, `reach`
/// with the candidates from the current position on gone too (kept in place: each step
/// adds or removes one candidate and undoes it on the way back).
struct Branch<'a> {
    available: &'a SearchRoom,
    demand: Resources,
    candidates: &'a [NodeCandidate],
    order: &'a [usize],
    room: SearchRoom,
    reach: SearchRoom,
    victims_max: usize,
    steps: u32,
    set: Vec<usize>,
    best: Option<(SetCost, Vec<usize>)>,
}

impl Branch<'_> {
    fn descend(&mut self, position: usize, lost: u64) {
        self.steps += 1;
        if self.steps > BRANCH_STEPS_MAX {
            return;
        }
        if self.best.as_ref().is_some_and(|(b, _)| lost > b.lost_gpu_ms) {
            return;
        }
        if self.room.fits(self.demand) {
            let set: Vec<NodeCandidate> = self.set.iter().map(|&i| self.candidates[i]).collect();
            let cost = SetCost::of(&set, self.available, self.demand);
            if self.best.as_ref().is_none_or(|(b, _)| cost < *b) {
                self.best = Some((cost, self.set.clone()));
            }
            return;
        }
        if position == self.order.len() || self.set.len() == self.victims_max {
            return;
        }
        if !self.reach.fits(self.demand) {
            return;
        }
        let i = self.order[position];
        let c = self.candidates[i];
        self.set.push(i);
        self.room.add(&c);
        self.descend(position + 1, lost + c.lost_gpu_ms);
        self.room.remove(&c);
        self.set.pop();
        self.reach.remove(&c);
        self.descend(position + 1, lost);
        self.reach.add(&c);
    }
}

/// The candidates in rule order (priority, lost work, newest first) until the demand fits,
/// then those not needed dropped, most costly first.
fn rule_order_minimal(
    available: &SearchRoom,
    demand: Resources,
    candidates: &[NodeCandidate],
    victims_max: usize,
) -> Option<Vec<usize>> {
    let mut order: Vec<usize> = (0..candidates.len()).collect();
    order.sort_unstable_by_key(|&i| {
        let c = &candidates[i];
        (c.priority, c.lost_gpu_ms, std::cmp::Reverse(c.id))
    });
    let mut taken = Vec::new();
    let mut room = available.clone();
    for i in order {
        if room.fits(demand) {
            break;
        }
        taken.push(i);
        room.add(&candidates[i]);
    }
    if !room.fits(demand) {
        return None;
    }
    let mut at = taken.len();
    while at > 0 {
        at -= 1;
        room.remove(&candidates[taken[at]]);
        if room.fits(demand) {
            taken.remove(at);
        } else {
            room.add(&candidates[taken[at]]);
        }
    }
    (taken.len() <= victims_max).then_some(taken)
}

/// A running job as the victim of a gang or of a job over its quota: what it frees on each
/// node the job could use (by position in the search's node list; a gang victim may free
/// room on several) and what it gives back to each quota the job must come within.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WideCandidate {
    pub id: JobId,
    pub priority: Priority,
    /// GPU-time it would lose, in GPU·ms.
    pub lost_gpu_ms: u64,
    /// (node position, what it frees there, its GPUs there), by position. On a node counted
    /// GPU by GPU, its going adds to each of those GPUs its share (or 1000); elsewhere the
    /// GPUs in `Resources` count whole and the set is not read.
    pub frees: SmallVec<[(usize, Resources, GpuSet); 1]>,
    /// The thousandths of its one GPU it takes as a share; 0 when it takes its GPUs whole.
    pub share_milli: u32,
    /// What it gives back to each quota of [`WideSearch::quota_needs`], in the same order.
    pub quota_frees: SmallVec<[Resources; 2]>,
    /// Its group (its project) where a need counts what a group gives back only up to a
    /// cap (see [`WideSearch::quota_caps`]); an index into those caps.
    pub group: usize,
    /// Its tenant's fair share (rule 2b), as [`NodeCandidate::tenant_share`].
    pub tenant_share: u64,
}

/// A search over the whole cluster: a gang's replicas on any usable nodes, or a job that
/// must also come within quota.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WideSearch {
    /// What each usable node has free, by position: GPU by GPU where a GPU is shared or the
    /// job asks for a share (see [`SearchRoom`]).
    pub available: Vec<SearchRoom>,
    pub per_replica: Resources,
    pub replicas: u32,
    /// For each capped account of the job, what its victims must give back so that the job
    /// fits within the cap (zero where there is no limit).
    pub quota_needs: Vec<Resources>,
    /// Per need, in the same order: empty where every victim's `quota_frees` count in full,
    /// else for each group the most its victims together give back to that need (a cohort
    /// gets back from a member only what the member uses beyond its guarantee).
    pub quota_caps: Vec<Vec<Resources>>,
    pub candidates: Vec<WideCandidate>,
    pub victims_max: usize,
    /// Steps the branch and bound may take (`Limits::wide_search_steps_max`).
    pub steps_max: u32,
}

/// A gang's or a quota-bound job's search, as the scheduler saw it: for tests that check
/// its choice from outside (see `Scheduler::record_searches`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WideSearchRecord {
    pub preemptor: JobId,
    pub search: WideSearch,
    /// The victims the search chose, by index into the candidates (ascending), if any.
    pub chosen: Option<Vec<usize>>,
    pub exactness: Exactness,
    /// The victims the core took in the end, as `chosen`: the search's set when it is
    /// exact, else the better of it (made minimal) and the fallback's.
    pub taken: Option<Vec<usize>>,
}

/// Further replicas whose bound (`WideBranch::least_loss_for_missing`) is summed one by
/// one; past them, each counts as the cheapest.
const CHEAPEST_KEPT: usize = 8;

impl WideSearch {
    /// Replicas one node can hold in `room`.
    pub fn replicas_in(&self, room: &SearchRoom) -> u32 {
        if self.per_replica.is_share() {
            return u32::from(room.fits(self.per_replica)).min(self.replicas);
        }
        Resources { gpus: room.whole_gpus(), ..room.free }.count_fitting_up_to(self.per_replica, self.replicas)
    }

    /// Thousandths of GPUs all the replicas need.
    fn milli_needed(&self) -> u64 {
        self.per_replica.gpu_milli_total() * u64::from(self.replicas)
    }

    /// The rank of `set` (rules 2 to 5) once it has gone, to compare sets found by other
    /// means (the fallbacks past the step bound) with the search's own.
    pub fn rank_of(&self, set: &[usize]) -> SetCost {
        let mut state = WideState::new(self);
        for &i in set {
            state.take(i);
        }
        self.cost_of(set, state.room_milli)
    }

    /// The rank of `set` (rules 2 to 5), `room_milli` being the thousandths of GPUs free on
    /// all usable nodes once it has gone: for a search over the whole cluster, rule 4 counts
    /// what is left of them once the job has what it needs.
    fn cost_of(&self, set: &[usize], room_milli: u64) -> SetCost {
        let chosen = || set.iter().map(|&i| &self.candidates[i]);
        let mut ids_newest_first: Vec<JobId> = chosen().map(|c| c.id).collect();
        ids_newest_first.sort_unstable_by(|a, b| b.cmp(a));
        let top_priority = chosen().map(|c| c.priority).max().unwrap_or(Priority::MIN);
        SetCost {
            top_priority,
            top_share: chosen().filter(|c| c.priority == top_priority).map(|c| c.tenant_share).min().unwrap_or(0),
            lost_gpu_ms: chosen().map(|c| c.lost_gpu_ms).sum(),
            milli_beyond_need: room_milli.saturating_sub(self.milli_needed()),
            victims: ids_newest_first.len(),
            ids_newest_first,
        }
    }
}

/// The best set of at most `victims_max` candidates whose going lets every replica fit on
/// the usable nodes and brings every quota need to zero; `None` with `Exact` if there is
/// none (or none is needed). With `StepsExhausted` the search ran out of steps, and the set
/// is the best it had found by then, if any (it makes room, but a victim in it may not be
/// needed: the caller makes it minimal).
///
/// Rule 2 first, as on one node: candidates are admitted level by level, and at the first
/// level where all of them together make room, a branch and bound ranks the sets by rules
/// 3 to 5: candidates least lost work first, a greedy set to beat from the start, and a
/// branch ends when its set makes room or when what it must still lose at least, for room
/// and for quota (see `WideBranch::least_loss_for_missing` and
/// `WideBranch::quota_victims_min`), ranks it after the best set found. The steps are
/// counted over all levels.
pub fn best_wide_set(search: &WideSearch) -> (Option<Vec<usize>>, Exactness) {
    let mut levels: Vec<Priority> = search.candidates.iter().map(|c| c.priority).collect();
    levels.sort_unstable();
    levels.dedup();
    let mut state = WideState::new(search);
    if state.makes_room() || search.victims_max == 0 {
        return (None, Exactness::Exact);
    }
    let mut steps = 0;
    // A candidate that frees nothing is in no best set (without it a set still makes room
    // and ranks no lower): leaving it out keeps the branching to those that count.
    let frees_something = |c: &WideCandidate| {
        c.frees.iter().any(|(node, r, slots)| {
            *r != Resources::ZERO || search.available[*node].milli_freed(*r, *slots, c.share_milli) > 0
        }) || c.quota_frees.iter().enumerate().any(|(k, r)| {
            *r != Resources::ZERO
                && search.quota_caps.get(k).is_none_or(|caps| caps.is_empty() || caps[c.group] != Resources::ZERO)
        })
    };
    // The candidates admitted so far, all taken in `state`: each level and floor admits those
    // the one before did and more (a lower floor, then a higher level), so the test whether
    // all of them make room takes only the new ones.
    let mut admitted_so_far = vec![false; search.candidates.len()];
    let mut taken_so_far: Vec<usize> = Vec::with_capacity(search.candidates.len());
    for level in levels {
        // Rule 2b: floors of tenant share at this level, highest first (one floor, 0,
        // without fair sharing); see `best_set_on_node_with`.
        // Sized for all the candidates: collecting a filter grows the vector step by step.
        let mut floors: Vec<u64> = Vec::with_capacity(search.candidates.len());
        floors.extend(search.candidates.iter().filter(|c| c.priority == level).map(|c| c.tenant_share));
        floors.sort_unstable_by(|a, b| b.cmp(a));
        floors.dedup();
        for floor in floors {
            let admits = |c: &WideCandidate| {
                (c.priority < level || (c.priority == level && c.tenant_share >= floor)) && frees_something(c)
            };
            for (i, c) in search.candidates.iter().enumerate() {
                if !admitted_so_far[i] && admits(c) {
                    admitted_so_far[i] = true;
                    taken_so_far.push(i);
                    state.take(i);
                }
            }
            if !state.makes_room() {
                continue;
            }
            // The branch and bound starts from the cluster as it is; the admitted are taken
            // again after it, should a lower floor or a higher level be needed.
            for &i in taken_so_far.iter().rev() {
                state.give_back(i);
            }
            debug_assert!(
                taken_so_far.iter().all(|&i| admits(&search.candidates[i])),
                "admitted so far: all admitted here"
            );
            let mut admitted = taken_so_far.clone();
            // Those that give back to a quota first (then least lost work): a branch without
            // them ends as soon as what is left cannot meet the need (`quota_suffix`).
            admitted.sort_unstable_by_key(|&i| {
                let c = &search.candidates[i];
                let gives_nothing = c.quota_frees.iter().all(|r| *r == Resources::ZERO);
                (gives_nothing, c.lost_gpu_ms, std::cmp::Reverse(c.id))
            });
            let mut branch = WideBranch::new(search, &admitted, &mut state, &mut steps);
            branch.start();
            branch.seed();
            branch.descend(0, 0);
            let best = branch.best;
            if steps > search.steps_max {
                let found = best.map(|(_, mut set)| {
                    set.sort_unstable();
                    set
                });
                return (found, Exactness::StepsExhausted);
            }
            if let Some((_, mut set)) = best {
                set.sort_unstable();
                return (Some(set), Exactness::Exact);
            }
            for &i in &taken_so_far {
                state.take(i);
            }
        }
    }
    (None, Exactness::Exact)
}

/// The cluster as a set of victims leaves it, kept up to date one victim at a time.
struct WideState<'a> {
    search: &'a WideSearch,
    room: Vec<SearchRoom>,
    hosted: Vec<u32>,
    hosted_total: u64,
    /// Thousandths of GPUs free on all usable nodes, the victims taken gone.
    room_milli: u64,
    /// What the victims taken give back to each quota, in the order of the needs (capped
    /// per group where the need has caps).
    quota_freed: Vec<Amounts>,
    /// Per need with caps, per group: what the victims taken of the group give back before
    /// the cap.
    group_freed: Vec<Vec<Amounts>>,
    /// The search's quota figures as amounts, worked out once (the branch and bound moves
    /// them at every step): each need, each need's caps per group, and what each candidate
    /// gives back to each need (candidate `i`'s at `i * needs + k`).
    need_amounts: Vec<Amounts>,
    cap_amounts: Vec<Vec<Amounts>>,
    free_amounts: Vec<Amounts>,
}

/// Resources by [`ResourceKind::amount`] (GPUs in thousandths, whole and shared together;
/// CPU; memory): how quota needs are met, kept as plain sums so that moving a victim in or
/// out of a set costs no conversion.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Amounts([u64; 3]);

impl Amounts {
    fn of(r: Resources) -> Amounts {
        Amounts(ResourceKind::ALL.map(|k| k.amount(r)))
    }

    fn plus(self, other: Amounts) -> Amounts {
        Amounts(std::array::from_fn(|d| self.0[d] + other.0[d]))
    }

    /// Panics on underflow, as `Resources::minus_by_amount`.
    fn minus(self, other: Amounts) -> Amounts {
        Amounts(std::array::from_fn(|d| self.0[d].checked_sub(other.0[d]).expect("quota accounting underflow")))
    }

    fn min(self, other: Amounts) -> Amounts {
        Amounts(std::array::from_fn(|d| self.0[d].min(other.0[d])))
    }

    fn max(self, other: Amounts) -> Amounts {
        Amounts(std::array::from_fn(|d| self.0[d].max(other.0[d])))
    }

    /// `Resources::within_by_amount`.
    fn within(self, other: Amounts) -> bool {
        (0..3).all(|d| self.0[d] <= other.0[d])
    }
}

impl<'a> WideState<'a> {
    fn new(search: &'a WideSearch) -> WideState<'a> {
        let hosted: Vec<u32> = search.available.iter().map(|r| search.replicas_in(r)).collect();
        WideState {
            search,
            room: search.available.clone(),
            hosted_total: hosted.iter().map(|&h| u64::from(h)).sum(),
            room_milli: search.available.iter().map(SearchRoom::free_milli).sum(),
            hosted,
            quota_freed: vec![Amounts::default(); search.quota_needs.len()],
            group_freed: (0..search.quota_needs.len())
                .map(|k| vec![Amounts::default(); search.quota_caps.get(k).map_or(0, Vec::len)])
                .collect(),
            need_amounts: search.quota_needs.iter().map(|&r| Amounts::of(r)).collect(),
            cap_amounts: search.quota_caps.iter().map(|caps| caps.iter().map(|&r| Amounts::of(r)).collect()).collect(),
            free_amounts: Self::free_amounts(search),
        }
    }

    /// Each candidate's give-back to each need, candidate by candidate (sized at once: a
    /// flattened iterator would grow it step by step). A candidate that lists fewer
    /// give-backs than there are needs gives nothing to the others.
    fn free_amounts(search: &WideSearch) -> Vec<Amounts> {
        let needs = search.quota_needs.len();
        let mut amounts = Vec::with_capacity(search.candidates.len() * needs);
        for c in &search.candidates {
            amounts.extend((0..needs).map(|k| c.quota_frees.get(k).map_or(Amounts::default(), |&r| Amounts::of(r))));
        }
        amounts
    }

    fn makes_room(&self) -> bool {
        self.hosted_total >= u64::from(self.search.replicas)
            && self.need_amounts.iter().zip(&self.quota_freed).all(|(need, freed)| need.within(*freed))
    }

    fn take(&mut self, i: usize) {
        let c = &self.search.candidates[i];
        for &(node, r, slots) in &c.frees {
            self.change_room(node, |room| room.add_freed(r, slots, c.share_milli));
        }
        self.quota_move(i, true);
    }

    fn give_back(&mut self, i: usize) {
        let c = &self.search.candidates[i];
        for &(node, r, slots) in &c.frees {
            self.change_room(node, |room| room.remove_freed(r, slots, c.share_milli));
        }
        self.quota_move(i, false);
    }

    /// Candidate `i`'s quota frees taken (`true`) or given back, each need counting its
    /// group's sum only up to the group's cap where it has caps.
    fn quota_move(&mut self, i: usize, taken: bool) {
        let group = self.search.candidates[i].group;
        let needs = self.need_amounts.len();
        for k in 0..needs {
            let freed = self.free_amounts[i * needs + k];
            let caps = self.cap_amounts.get(k).filter(|caps| !caps.is_empty());
            // What the candidate's group counts for the need, before and after the move.
            let (before, after) = match caps {
                None if taken => (Amounts::default(), freed),
                None => (freed, Amounts::default()),
                Some(caps) => {
                    let sum = &mut self.group_freed[k][group];
                    let before = sum.min(caps[group]);
                    *sum = if taken { sum.plus(freed) } else { sum.minus(freed) };
                    (before, sum.min(caps[group]))
                }
            };
            let total = &mut self.quota_freed[k];
            *total = total.plus(after).minus(before);
        }
    }

    /// Changes `room[node]`, keeping `room_milli` and the replicas it hosts up to date.
    fn change_room(&mut self, node: usize, change: impl FnOnce(&mut SearchRoom)) {
        self.room_milli -= self.room[node].free_milli();
        change(&mut self.room[node]);
        self.room_milli += self.room[node].free_milli();
        let hosted = self.search.replicas_in(&self.room[node]);
        self.hosted_total = self.hosted_total - u64::from(self.hosted[node]) + u64::from(hosted);
        self.hosted[node] = hosted;
    }
}

/// Per node of a wide search, its candidates' entries (position in the branch's order,
/// thousandths of GPUs freed there, share of the work lost), least work lost per thousandth
/// first, then by position: one list for all nodes, each node's a range of it.
struct ByNode {
    /// Node `n`'s entries are `entries[starts[n]..starts[n + 1]]`.
    starts: Vec<usize>,
    entries: Vec<(usize, u64, u64)>,
}

impl ByNode {
    /// From (node, entry) pairs in any order, for `nodes` nodes.
    fn new(nodes: usize, mut pairs: Vec<(usize, (usize, u64, u64))>) -> ByNode {
        pairs.sort_unstable_by(|(na, a), (nb, b)| {
            na.cmp(nb)
                .then_with(|| (u128::from(a.2) * u128::from(b.1)).cmp(&(u128::from(b.2) * u128::from(a.1))))
                .then(a.0.cmp(&b.0))
        });
        let mut starts = Vec::with_capacity(nodes + 1);
        let mut at = 0;
        for node in 0..nodes {
            starts.push(at);
            at += pairs[at..].iter().take_while(|(n, _)| *n == node).count();
        }
        starts.push(at);
        ByNode { starts, entries: pairs.into_iter().map(|(_, e)| e).collect() }
    }

    fn len(&self) -> usize {
        self.starts.len() - 1
    }

    fn on(&self, node: usize) -> &[(usize, u64, u64)] {
        &self.entries[self.starts[node]..self.starts[node + 1]]
    }
}

/// The most GPUs `least_cover` covers (a node's GPUs are at most `Limits::gpus_per_node_max`,
/// 64 by default); a larger need takes the fractional bound.
const COVER_GPUS_MAX: u64 = 64;

/// The least total loss of entries of one node (`ByNode`'s, whole GPUs, from `position`
/// on) that free at least `gpus` whole GPUs, or `None` if all of them do not: a 0/1
/// knapsack cover, by dynamic programming over the GPUs still needed.
fn least_cover(entries: &[(usize, u64, u64)], position: usize, gpus: u64) -> Option<u64> {
    let need = gpus as usize;
    if need == 0 {
        return Some(0);
    }
    debug_assert!(need <= COVER_GPUS_MAX as usize, "a cover of at most {COVER_GPUS_MAX} GPUs");
    // `least[x]`: the least loss that frees at least `x` GPUs with the entries so far.
    let mut least = [u64::MAX; COVER_GPUS_MAX as usize + 1];
    least[0] = 0;
    for &(_, milli, loss) in entries.iter().filter(|(p, _, _)| *p >= position) {
        let frees = (milli / 1000) as usize;
        for x in (1..=need).rev() {
            let rest = least[x.saturating_sub(frees)];
            if rest != u64::MAX {
                least[x] = least[x].min(rest.saturating_add(loss));
            }
        }
    }
    least.get(need).copied().filter(|&l| l != u64::MAX)
}

struct WideBranch<'s, 'a> {
    search: &'a WideSearch,
    /// Whether the replicas do not all fit before any victim goes (else `by_node`,
    /// `next_replica_loss` and `replicas_max` are left empty: a job short only of quota).
    room_short: bool,
    /// The candidates of the level, least lost work first.
    order: &'s [usize],
    /// Per node: (position in `order`, thousandths of GPUs it frees there, its share of the
    /// work it loses), least work lost per thousandth first: for the bound on what the
    /// replicas still missing must cost.
    by_node: ByNode,
    /// Per node: the least work the candidates not yet decided must lose for one more
    /// replica there (`u64::MAX`: they cannot make room for one), kept up to date as the
    /// search moves. The bound needs the least of them at every step, so they sit in a
    /// tree of minimums.
    next_replica_loss: MinTree,
    /// Per node: the most replicas it could host with every candidate of the level gone (the
    /// bound counts no node for more further replicas than it could still host).
    replicas_max: Vec<u32>,
    /// Per position in `order`, per quota need (need `k` at position `p` at
    /// `p * needs + k`, positions up to `order.len()`): what the candidates from there on
    /// give back at most (before caps): a branch that cannot meet a need even with all of
    /// them ends.
    quota_suffix: Vec<Amounts>,
    /// Per position in `order`, per quota need (laid out as `quota_suffix`): the most any
    /// one candidate from there on gives back to it, amount by amount (before caps).
    quota_most_suffix: Vec<Amounts>,
    /// The lost work of the candidates in `order` before each position, summed (one more
    /// entry than there are candidates).
    lost_prefix: Vec<u64>,
    state: &'s mut WideState<'a>,
    steps: &'s mut u32,
    set: Vec<usize>,
    /// The best set so far, and its cost.
    best: Option<(SetCost, Vec<usize>)>,
}

impl<'s, 'a> WideBranch<'s, 'a> {
    fn new(search: &'a WideSearch, order: &'s [usize], state: &'s mut WideState<'a>, steps: &'s mut u32) -> Self {
        // Room only grows as victims go: where every replica fits before any, the room
        // bound is 0 throughout, and what it is worked out from is not built.
        let room_short = state.hosted_total < u64::from(search.replicas);
        let bounded: &[usize] = if room_short { order } else { &[] };
        let mut entries: Vec<(usize, (usize, u64, u64))> = Vec::with_capacity(bounded.len());
        for (position, &i) in bounded.iter().enumerate() {
            let c = &search.candidates[i];
            let milli_on = |&(node, r, slots): &(usize, Resources, GpuSet)| {
                (node, search.available[node].milli_freed(r, slots, c.share_milli))
            };
            let milli: u64 = c.frees.iter().map(|f| milli_on(f).1).sum();
            // A victim on several nodes loses its work once: each node bears its GPUs' share.
            for (node, m) in c.frees.iter().map(milli_on).filter(|(_, m)| *m > 0) {
                let share = (u128::from(c.lost_gpu_ms) * u128::from(m) / u128::from(milli)) as u64;
                entries.push((node, (position, m, share)));
            }
        }
        let by_node = ByNode::new(search.available.len(), entries);
        let needs = search.quota_needs.len();
        let mut quota_suffix = vec![Amounts::default(); (order.len() + 1) * needs];
        let mut quota_most_suffix = vec![Amounts::default(); (order.len() + 1) * needs];
        for position in (0..order.len()).rev() {
            let i = order[position];
            for k in 0..needs {
                let (here, later) = (position * needs + k, (position + 1) * needs + k);
                let gives = state.free_amounts[i * needs + k];
                quota_suffix[here] = quota_suffix[later].plus(gives);
                quota_most_suffix[here] = quota_most_suffix[later].max(gives);
            }
        }
        let mut lost_prefix = Vec::with_capacity(order.len() + 1);
        let mut lost = 0u64;
        lost_prefix.push(lost);
        for &i in order {
            lost = lost.saturating_add(search.candidates[i].lost_gpu_ms);
            lost_prefix.push(lost);
        }
        WideBranch {
            search,
            order,
            room_short,
            by_node,
            next_replica_loss: MinTree::default(),
            replicas_max: Vec::new(),
            quota_suffix,
            quota_most_suffix,
            lost_prefix,
            state,
            steps,
            set: Vec::new(),
            best: None,
        }
    }

    /// The least work that candidates from `position` on must lose on `node` for one more
    /// replica there: the thousandths of the GPUs a replica needs beyond the whole GPUs the
    /// node has left over (GPU by GPU, from the GPUs closest to whole), freed at the node's
    /// best ratios of work lost per thousandth (a fractional knapsack, a lower bound).
    ///
    /// For a job of one replica on a node counted in whole GPUs, the least loss of a set of
    /// them that frees enough, exactly (`least_cover`): victims come whole, and the
    /// fractional bound, counting half of one that frees 8 GPUs where 4 are needed, is too
    /// weak to end such searches within their steps. Not for a gang: a victim freeing room for two
    /// replicas on a node would count whole for each, and the bound sums the replicas.
    fn next_replica_loss_on(&self, node: usize, position: usize) -> Option<u64> {
        let per = self.search.per_replica.gpus;
        let room = &self.state.room[node];
        let left_over = room.whole_gpus().saturating_sub(per * self.state.hosted[node]);
        let needed = room.milli_short_of(per.saturating_sub(left_over))?;
        let entries = self.by_node.on(node);
        let (mut need, mut cost, mut in_part) = (needed, 0u64, false);
        for &(_, g, l) in entries.iter().filter(|(p, _, _)| *p >= position) {
            if need == 0 {
                break;
            }
            let take = g.min(need);
            // Only the last candidate is taken in part: the others cost their whole share,
            // without a division (this runs at every step of the branch and bound).
            in_part = take < g;
            cost += if in_part { (u128::from(l) * u128::from(take) / u128::from(g)) as u64 } else { l };
            need -= take;
        }
        if need > 0 {
            return None;
        }
        // Where the fractional bound took every candidate whole, its set frees enough and
        // costs the bound: the exact cover costs the same, with no dynamic program.
        if in_part && self.search.replicas == 1 && !room.by_slot() && needed <= COVER_GPUS_MAX * 1000 {
            return least_cover(entries, position, needed / 1000);
        }
        Some(cost)
    }

    /// A lower bound on the work the replicas still missing must cost: each further replica
    /// on a node costs at least what the next one there costs now (later ones need as many
    /// GPUs or more, at worse ratios), and a node hosts no more than it could with all its
    /// candidates gone. So the replicas cost at least the cheapest next replicas summed,
    /// each node's counted as often as it could still host one (a node bears its own share
    /// of a victim's lost work, see `by_node`, so the nodes' costs add up). Counting only
    /// the cheapest, once per missing replica, left gangs of whole-node replicas pruned too
    /// late: on Philly's VCs in a cohort, 18% of wide searches ran out of steps, against 1%.
    /// `None` if the nodes cannot host them all.
    fn least_loss_for_missing(&self) -> Option<u64> {
        let missing = u64::from(self.search.replicas).saturating_sub(self.state.hosted_total);
        debug_assert!(self.room_short || missing == 0, "room only grows as victims go");
        if self.search.per_replica.gpus == 0 || missing == 0 {
            return Some(0);
        }
        let cheapest = self.next_replica_loss.min();
        if cheapest == u64::MAX {
            return None;
        }
        if missing == 1 || missing > CHEAPEST_KEPT as u64 {
            return Some(missing.saturating_mul(cheapest));
        }
        // The `missing` cheapest further replicas, in ascending order.
        let missing = missing as usize;
        let mut kept = [u64::MAX; CHEAPEST_KEPT];
        let mut len = 0;
        for (node, &loss) in self.next_replica_loss.leaves().iter().enumerate() {
            if loss == u64::MAX || (len == missing && loss >= kept[missing - 1]) {
                continue;
            }
            let more = self.replicas_max[node].saturating_sub(self.state.hosted[node]) as usize;
            for _ in 0..more.min(missing) {
                let at = kept[..len].partition_point(|&k| k <= loss);
                if at == missing {
                    break;
                }
                kept.copy_within(at..missing - 1, at + 1);
                kept[at] = loss;
                len = (len + 1).min(missing);
            }
        }
        (len == missing).then(|| kept[..missing].iter().fold(0u64, |sum, &k| sum.saturating_add(k)))
    }

    /// The fewest further victims that can meet the quota needs, and a lower bound on the
    /// work they lose: each unmet need, amount by amount, takes at least its shortfall over
    /// the most any one candidate from `position` on gives back to it (caps only lower
    /// what a victim counts for); and the candidates that give back come first in the
    /// order, least lost work first, so that many victims lose at least as much as the
    /// next that many there. `(0, 0)` once the needs are met. Without it, a job over its
    /// quota with room to spare on the nodes had no bound but one more victim, and its
    /// search walked every candidate (86 steps per search on the VC cohort's hard caps).
    fn quota_victims_min(&self, position: usize) -> (usize, u64) {
        let needs = self.state.need_amounts.len();
        let mut victims = 0u64;
        for (k, need) in self.state.need_amounts.iter().enumerate() {
            let freed = self.state.quota_freed[k];
            let most = self.quota_most_suffix[position * needs + k];
            for d in 0..3 {
                let short = need.0[d].saturating_sub(freed.0[d]);
                if short > 0 {
                    // Nothing left gives to it: `descend` found the need out of reach.
                    victims = victims.max(short.div_ceil(most.0[d].max(1)));
                }
            }
        }
        let victims = victims.min((self.order.len() - position) as u64) as usize;
        (victims, self.lost_prefix[position + victims] - self.lost_prefix[position])
    }

    /// Brings `next_replica_loss` up to date on the nodes of candidate `i` for `position`;
    /// returns what it was there, for `restore`.
    fn refresh(&mut self, i: usize, position: usize) -> [(usize, u64); 2] {
        let mut saved = [(usize::MAX, u64::MAX); 2];
        if !self.room_short {
            return saved;
        }
        let frees = &self.search.candidates[i].frees;
        for (k, &(node, _, _)) in frees.iter().enumerate() {
            let now = self.next_replica_loss_on(node, position).unwrap_or(u64::MAX);
            let before = self.next_replica_loss.replace(node, now);
            if let Some(slot) = saved.get_mut(k) {
                *slot = (node, before);
            }
        }
        saved
    }

    fn restore(&mut self, i: usize, position: usize, saved: [(usize, u64); 2]) {
        if !self.room_short {
            return;
        }
        let frees = &self.search.candidates[i].frees;
        if frees.len() <= saved.len() {
            for (node, before) in saved.into_iter().filter(|(n, _)| *n != usize::MAX) {
                self.next_replica_loss.replace(node, before);
            }
        } else {
            for &(node, _, _) in frees {
                let now = self.next_replica_loss_on(node, position).unwrap_or(u64::MAX);
                self.next_replica_loss.replace(node, now);
            }
        }
    }

    fn descend(&mut self, position: usize, lost: u64) {
        *self.steps += 1;
        if *self.steps > self.search.steps_max {
            return;
        }
        if self.state.makes_room() {
            let cost = self.search.cost_of(&self.set, self.state.room_milli);
            if self.best.as_ref().is_none_or(|(b, _)| cost < *b) {
                self.best = Some((cost, self.set.clone()));
            }
            return;
        }
        let reachable = self.state.need_amounts.iter().enumerate().all(|(k, need)| {
            let later = self.quota_suffix[position * self.state.need_amounts.len() + k];
            need.within(self.state.quota_freed[k].plus(later))
        });
        if !reachable || position == self.order.len() || self.set.len() == self.search.victims_max {
            return;
        }
        // Bounds: at least one more victim, the GPUs the replicas still need, and the least
        // work that freeing them loses. Adding a victim never lowers (lost, freed, count), so
        // a branch whose bound ranks after the best set found cannot win.
        let Some(room_loss_min) = self.least_loss_for_missing() else { return };
        let (quota_victims, quota_loss_min) = self.quota_victims_min(position);
        if self.set.len() + quota_victims > self.search.victims_max {
            return;
        }
        // The same victims may make room and give back quota: the larger bound holds.
        let loss_min = room_loss_min.max(quota_loss_min);
        if let Some((best, _)) = &self.best {
            // Room only grows as victims go, and the job needs its thousandths free.
            let beyond_min = self.state.room_milli.max(self.search.milli_needed()) - self.search.milli_needed();
            let bound = (lost + loss_min, beyond_min, self.set.len() + quota_victims.max(1));
            if bound > (best.lost_gpu_ms, best.milli_beyond_need, best.victims) {
                return;
            }
        }
        let i = self.order[position];
        self.set.push(i);
        self.state.take(i);
        let saved = self.refresh(i, position + 1);
        self.descend(position + 1, lost + self.search.candidates[i].lost_gpu_ms);
        self.state.give_back(i);
        self.set.pop();
        self.restore(i, position, saved);
        let saved = self.refresh(i, position + 1);
        self.descend(position + 1, lost);
        self.restore(i, position, saved);
    }

    /// A first set to beat, so that the bound prunes from the start: one replica at a
    /// time, on the node where it loses the least (that node's candidates best ratio
    /// first), then every victim not needed dropped, most costly first.
    fn seed(&mut self) {
        let mut taken: Vec<usize> = Vec::new();
        while u64::from(self.search.replicas) > self.state.hosted_total {
            let mut cheapest: Option<(u64, usize, usize)> = None;
            for (node, list) in (0..self.by_node.len()).map(|node| (node, self.by_node.on(node))) {
                let (mut room, mut lost, mut count) = (self.state.room[node].clone(), 0u64, 0usize);
                let hosted = self.state.hosted[node];
                for &(position, _, _) in list {
                    let i = self.order[position];
                    if taken.contains(&i) {
                        continue;
                    }
                    let c = &self.search.candidates[i];
                    if let Some(&(_, r, slots)) = c.frees.iter().find(|(n, _, _)| *n == node) {
                        room.add_freed(r, slots, c.share_milli);
                    }
                    lost += c.lost_gpu_ms;
                    count += 1;
                    if self.search.replicas_in(&room) > hosted {
                        if cheapest.is_none_or(|(l, _, _)| lost < l) {
                            cheapest = Some((lost, node, count));
                        }
                        break;
                    }
                }
            }
            let Some((_, node, count)) = cheapest else { break };
            let mut added = 0;
            for k in 0..self.by_node.on(node).len() {
                let i = self.order[self.by_node.on(node)[k].0];
                if added == count {
                    break;
                }
                if !taken.contains(&i) {
                    taken.push(i);
                    self.state.take(i);
                    added += 1;
                }
            }
        }
        if self.state.makes_room() {
            taken.sort_unstable_by_key(|&i| std::cmp::Reverse(self.search.candidates[i].lost_gpu_ms));
            let mut k = 0;
            while k < taken.len() {
                self.state.give_back(taken[k]);
                if self.state.makes_room() {
                    taken.remove(k);
                } else {
                    self.state.take(taken[k]);
                    k += 1;
                }
            }
            if taken.len() <= self.search.victims_max {
                self.best = Some((self.search.cost_of(&taken, self.state.room_milli), taken.clone()));
            }
        }
        for &i in &taken {
            self.state.give_back(i);
        }
    }

    /// The bound's state for the search's start.
    fn start(&mut self) {
        if !self.room_short {
            return;
        }
        let values: Vec<u64> =
            (0..self.by_node.len()).map(|node| self.next_replica_loss_on(node, 0).unwrap_or(u64::MAX)).collect();
        self.next_replica_loss = MinTree::new(&values);
        let mut rooms = self.search.available.clone();
        for &i in self.order {
            let c = &self.search.candidates[i];
            for &(node, r, slots) in &c.frees {
                rooms[node].add_freed(r, slots, c.share_milli);
            }
        }
        self.replicas_max = rooms.iter().map(|room| self.search.replicas_in(room)).collect();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu_victim(id: u64, gpus: u32, lost_gpu_min: u64) -> NodeCandidate {
        NodeCandidate {
            id: JobId(id),
            priority: 10,
            lost_gpu_ms: lost_gpu_min * 60_000,
            freed: Resources::gpus(gpus),
            tenant_share: 0,
            slots: GpuSet::EMPTY,
            share_milli: 0,
        }
    }

    /// The case: A (3 GPUs, 3 GPU-min lost), B (1 GPU, 15), C (4 GPUs, 16); a job of
    /// 4 GPUs on the full 8-GPU node. A and B lose 18 GPU-min, C alone 16: C goes.
    #[test]
    fn the_least_lost_set_is_not_the_cheapest_prefix() {
        let candidates = [gpu_victim(1, 3, 3), gpu_victim(2, 1, 15), gpu_victim(3, 4, 16)];
        let set = best_set_on_node(Resources::ZERO, Resources::gpus(4), &candidates, 32).unwrap();
        assert_eq!(set.victims, [2]);
        assert_eq!((set.cost.lost_gpu_ms, set.exactness), (16 * 60_000, Exactness::Exact));
    }

    #[test]
    fn the_victim_bound_is_kept() {
        let candidates = [gpu_victim(1, 1, 1), gpu_victim(2, 1, 1), gpu_victim(3, 2, 50)];
        let two = best_set_on_node(Resources::ZERO, Resources::gpus(2), &candidates, 2).unwrap();
        assert_eq!(two.victims, [0, 1]);
        let one = best_set_on_node(Resources::ZERO, Resources::gpus(2), &candidates, 1).unwrap();
        assert_eq!(one.victims, [2]);
        assert_eq!(best_set_on_node(Resources::ZERO, Resources::gpus(3), &candidates, 1), None);
    }

    proptest::proptest! {
        /// `least_cover` against every subset: the least loss of entries from `position` on
        /// that free at least `gpus` GPUs.
        #[test]
        fn least_cover_is_the_cheapest_subset_that_frees_enough(
            entries in proptest::collection::vec((0..6usize, 1..9u64, 0..1_000u64), 0..10),
            position in 0..6usize,
            gpus in 0..12u64,
        ) {
            let entries: Vec<(usize, u64, u64)> = entries.into_iter().map(|(p, g, l)| (p, g * 1000, l)).collect();
            let eligible: Vec<&(usize, u64, u64)> = entries.iter().filter(|(p, _, _)| *p >= position).collect();
            let brute = (0u32..1 << eligible.len())
                .filter_map(|mask| {
                    let chosen = eligible.iter().enumerate().filter(|(i, _)| mask & (1 << i) != 0);
                    let (freed, loss) = chosen.fold((0, 0), |(f, l), (_, e)| (f + e.1 / 1000, l + e.2));
                    (freed >= gpus).then_some(loss)
                })
                .min();
            proptest::prop_assert_eq!(least_cover(&entries, position, gpus), brute);
        }
    }
}
