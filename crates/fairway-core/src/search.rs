//! The victim search's pure leaf: the best set of victims on one node.
//!
//! Given what a node has free, what a replica needs and the node's candidates, find the set
//! of victims that makes room and ranks first by the preemption rules (see
//! `preemption.rs`): the lowest highest priority (rule 2), the least GPU-time lost
//! (rule 3), the fewest GPUs freed beyond need (rule 4), the fewest victims, then the most
//! recently submitted victims (rule 5), within the victim bound (rule 6).
//!
//! The search is exact:
//! - When only GPUs must be freed (the node has the CPU and memory already), a dynamic
//!   program over (GPUs freed, victims taken) keeps the best set for each pair: a node has
//!   at most 64 GPUs, so there are at most 65 × (bound + 1) states.
//! - When CPU or memory must be freed too, a branch and bound over the candidates (least
//!   lost work first, cut when the work lost exceeds the best set's) finds the best set in
//!   at most [`BRANCH_STEPS_MAX`] steps. Beyond that many steps it settles for the
//!   candidates in rule order, minus those not needed, and says so ([`Exactness`]).
//!
//! Neither depends on the scheduler: tests compare them with a brute-force search.

use std::cmp::Ordering;

use crate::types::{JobId, NodeId, Priority, Resources};

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
    pub nodes: Vec<(NodeId, Resources, Vec<NodeCandidate>)>,
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
    /// What it frees on the node.
    pub freed: Resources,
}

/// How a set of victims ranks: lower is better (rules 2 to 5, in order).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SetCost {
    pub top_priority: Priority,
    pub lost_gpu_ms: u64,
    pub gpus_beyond_need: u32,
    pub victims: usize,
    /// The victims' ids, highest first: of two sets, the one that is larger here (the more
    /// recently submitted victims) ranks first.
    pub ids_newest_first: Vec<JobId>,
}

impl Ord for SetCost {
    fn cmp(&self, other: &SetCost) -> Ordering {
        (self.top_priority, self.lost_gpu_ms, self.gpus_beyond_need, self.victims)
            .cmp(&(other.top_priority, other.lost_gpu_ms, other.gpus_beyond_need, other.victims))
            .then_with(|| other.ids_newest_first.cmp(&self.ids_newest_first))
    }
}

impl PartialOrd for SetCost {
    fn partial_cmp(&self, other: &SetCost) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl SetCost {
    /// The cost of taking `set` from a node with `available` free for `demand`.
    pub fn of(set: &[NodeCandidate], available: Resources, demand: Resources) -> SetCost {
        SetCost::of_iter(set.iter(), available, demand)
    }

    fn of_iter<'a>(
        set: impl Iterator<Item = &'a NodeCandidate> + Clone,
        available: Resources,
        demand: Resources,
    ) -> SetCost {
        let mut ids_newest_first: Vec<JobId> = set.clone().map(|v| v.id).collect();
        ids_newest_first.sort_unstable_by(|a, b| b.cmp(a));
        let freed_gpus: u32 = set.clone().map(|v| v.freed.gpus).sum();
        SetCost {
            top_priority: set.clone().map(|v| v.priority).max().unwrap_or(Priority::MIN),
            lost_gpu_ms: set.map(|v| v.lost_gpu_ms).sum(),
            gpus_beyond_need: (available.gpus + freed_gpus).saturating_sub(demand.gpus),
            victims: ids_newest_first.len(),
            ids_newest_first,
        }
    }
}

/// Whether a set is the best there is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exactness {
    Exact,
    /// The branch and bound ran out of steps: the set is the candidates in rule order,
    /// minus those not needed.
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
/// next to `available`; `None` if no such set exists (or none is needed: `demand` fits).
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
    best_set_on_node_with(&mut Buffers::default(), available, demand, candidates, victims_max)
}

/// Memory the search reuses from one call to the next (the scheduler keeps one).
#[derive(Clone, Debug, Default)]
pub struct Buffers {
    levels: Vec<Priority>,
    admitted: Vec<usize>,
    at_level: Vec<NodeCandidate>,
    order: Vec<usize>,
    table: Vec<Option<Partial>>,
}

/// [`best_set_on_node`], reusing `buffers`.
pub fn best_set_on_node_with(
    buffers: &mut Buffers,
    available: Resources,
    demand: Resources,
    candidates: &[NodeCandidate],
    victims_max: usize,
) -> Option<NodeSet> {
    if demand.fits_in(available) || victims_max == 0 {
        return None;
    }
    let mut levels = std::mem::take(&mut buffers.levels);
    levels.clear();
    levels.extend(candidates.iter().map(|c| c.priority));
    levels.sort_unstable();
    levels.dedup();
    buffers.admitted.clear();
    let mut room = available;
    let mut found = None;
    for &level in &levels {
        for (i, c) in candidates.iter().enumerate().filter(|(_, c)| c.priority == level) {
            buffers.admitted.push(i);
            room = room.plus(c.freed);
        }
        if !demand.fits_in(room) {
            continue;
        }
        // Usually every candidate is admitted at once (the scheduler passes those up to the
        // level where the node makes room): no copy then.
        let best = if buffers.admitted.len() == candidates.len() {
            best_set_up_to_level(buffers, available, demand, candidates, victims_max)
        } else {
            let mut at_level = std::mem::take(&mut buffers.at_level);
            at_level.clear();
            at_level.extend(buffers.admitted.iter().map(|&i| candidates[i]));
            let best = best_set_up_to_level(buffers, available, demand, &at_level, victims_max);
            buffers.at_level = at_level;
            best.map(|(victims, exactness)| (victims.into_iter().map(|i| buffers.admitted[i]).collect(), exactness))
        };
        if let Some((mut victims, exactness)) = best {
            victims.sort_unstable();
            let cost = SetCost::of_iter(victims.iter().map(|&i| &candidates[i]), available, demand);
            found = Some(NodeSet { victims, cost, exactness });
            break;
        }
    }
    buffers.levels = levels;
    found
}

/// Rules 3 to 5 among sets of `candidates` (indices into it).
fn best_set_up_to_level(
    buffers: &mut Buffers,
    available: Resources,
    demand: Resources,
    candidates: &[NodeCandidate],
    victims_max: usize,
) -> Option<(Vec<usize>, Exactness)> {
    let need = demand.saturating_minus(available);
    let gpus_only = need.cpu_millis == 0 && need.memory_mib == 0;
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

/// CPU or memory must be freed too: depth first over the candidates, least lost work first,
/// taking each or not; a branch ends when its set makes room (more victims only rank
/// lower) or loses more work than the best set found.
fn branch_and_bound(
    available: Resources,
    demand: Resources,
    candidates: &[NodeCandidate],
    victims_max: usize,
) -> Option<(Vec<usize>, Exactness)> {
    let mut order: Vec<usize> = (0..candidates.len()).collect();
    order.sort_unstable_by_key(|&i| (candidates[i].lost_gpu_ms, std::cmp::Reverse(candidates[i].id)));
    // What the candidates from position p on could free at most.
    let mut rest = vec![Resources::ZERO; order.len() + 1];
    for p in (0..order.len()).rev() {
        rest[p] = rest[p + 1].plus(candidates[order[p]].freed);
    }
    let mut search = Branch {
        available,
        demand,
        candidates,
        order: &order,
        rest: &rest,
        victims_max,
        steps: 0,
        set: Vec::new(),
        best: None,
    };
    search.descend(0, available, 0);
    if search.steps > BRANCH_STEPS_MAX {
        let fallback = rule_order_minimal(available, demand, candidates, victims_max)?;
        return Some((fallback, Exactness::StepsExhausted));
    }
    search.best.map(|(_, set)| (set, Exactness::Exact))
}

struct Branch<'a> {
    available: Resources,
    demand: Resources,
    candidates: &'a [NodeCandidate],
    order: &'a [usize],
    rest: &'a [Resources],
    victims_max: usize,
    steps: u32,
    set: Vec<usize>,
    best: Option<(SetCost, Vec<usize>)>,
}

impl Branch<'_> {
    fn descend(&mut self, position: usize, room: Resources, lost: u64) {
        self.steps += 1;
        if self.steps > BRANCH_STEPS_MAX {
            return;
        }
        if self.best.as_ref().is_some_and(|(b, _)| lost > b.lost_gpu_ms) {
            return;
        }
        if self.demand.fits_in(room) {
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
        if !self.demand.fits_in(room.plus(self.rest[position])) {
            return;
        }
        let i = self.order[position];
        self.set.push(i);
        self.descend(position + 1, room.plus(self.candidates[i].freed), lost + self.candidates[i].lost_gpu_ms);
        self.set.pop();
        self.descend(position + 1, room, lost);
    }
}

/// The candidates in rule order (priority, lost work, newest first) until the demand fits,
/// then those not needed dropped, most costly first.
fn rule_order_minimal(
    available: Resources,
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
    let mut room = available;
    for i in order {
        if demand.fits_in(room) {
            break;
        }
        taken.push(i);
        room = room.plus(candidates[i].freed);
    }
    if !demand.fits_in(room) {
        return None;
    }
    let mut at = taken.len();
    while at > 0 {
        at -= 1;
        let without = room.minus(candidates[taken[at]].freed);
        if demand.fits_in(without) {
            room = without;
            taken.remove(at);
        }
    }
    (taken.len() <= victims_max).then_some(taken)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu_victim(id: u64, gpus: u32, lost_gpu_min: u64) -> NodeCandidate {
        NodeCandidate { id: JobId(id), priority: 10, lost_gpu_ms: lost_gpu_min * 60_000, freed: Resources::gpus(gpus) }
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
}
