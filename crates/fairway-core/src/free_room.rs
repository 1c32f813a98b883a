//! Where a job goes on free room: the walk of the free index (nodes by model and free GPUs)
//! that finds candidate nodes, and the choice among them (`placement.rs`), over a read-only
//! view of the nodes. Pure: it returns where, and the cycle starts the job there.

use std::cell::RefCell;
use std::collections::VecDeque;

use crate::cluster::{Node, Nodes};
use crate::config::ScoringPolicy;
use crate::ids::NodeIx;
use crate::jobs::JobStore;
use crate::model::JobState;
use crate::packing::{
    self, Ask, AskCounts, FragCache, GpuPick, KindCounts, ModelSet, NodeRoom, PackPolicy, WorkloadModel,
};
use crate::placement::{Candidate, choose_nodes, score};
use crate::types::{GpuModel, GpuSet, ImageId, NodeId, Resources};

/// What free-room placement reads.
#[derive(Clone, Copy)]
pub(crate) struct FreeRoom<'a> {
    pub nodes: &'a Nodes,
    pub scoring: ScoringPolicy,
    /// `Limits::candidate_nodes_scored_max`.
    pub scored_max: usize,
    /// `Policy::packing`, with what it reads: the jobs placed (gpu-clustering counts their
    /// kinds per node) and the typical asks learnt from recent arrivals (FGD, Fairway).
    pub packing: Option<(PackPolicy, &'a JobStore, &'a Arrivals)>,
    /// The image of the job being placed, and `Policy::image_locality_permille`.
    pub image: Option<ImageId>,
    pub image_permille: u32,
}

/// Arrivals remembered to learn the typical asks from, and how many arrivals the learnt
/// model may be behind.
const ARRIVALS_KEPT: usize = 4096;
const ARRIVALS_PER_REFRESH: u32 = 256;

/// The typical asks of the workload for FGD's and Fairway's placement, learnt online from the
/// asks of the latest [`ARRIVALS_KEPT`] submissions (FGD's paper takes them from the whole
/// trace, which a scheduler does not have): the asks covering 95% of them, learnt again
/// every [`ARRIVALS_PER_REFRESH`] submissions. A function of the submissions only, so
/// deterministic.
#[derive(Clone, Debug, Default)]
pub(crate) struct Arrivals {
    recent: VecDeque<Ask>,
    /// `recent`, counted by kind as it changes.
    counts: AskCounts,
    model: Option<WorkloadModel>,
    since_model: u32,
    /// Fragmentation of node states under `model`, emptied when another model is learnt.
    frag: RefCell<FragCache>,
    /// Scores by policy, ask and node state under `model` (see `FreeRoom::place_packed`),
    /// emptied when another model is learnt or past [`SCORED_STATES_MAX`].
    scored: RefCell<ScoredStates>,
    /// Per node (by position), its latest verdicts across placements (see
    /// [`NodeVerdict`]), emptied when another model is learnt.
    verdicts: RefCell<Vec<[Option<NodeVerdict>; VERDICTS_PER_NODE]>>,
}

/// Verdicts remembered per node: one per ask shape in the common mix of a few shapes.
const VERDICTS_PER_NODE: usize = 2;

/// Node states scored remembered before the memo starts again (a few MiB).
const SCORED_STATES_MAX: usize = 1 << 16;

type ScoredStates = crate::packing::FastMap<(PackPolicy, Ask, NodeRoom), (i64, GpuPick)>;

/// What a packing policy said of one node state for one ask: `None` when the ask does not
/// fit there. A node's `version` is unique to its state (`Node::version`), and the score is
/// a function of the state, the ask and the learnt model only (policies other than random
/// and gpu-clustering), so while the version and the model stay, the verdict stands.
#[derive(Clone, Copy, Debug)]
struct NodeVerdict {
    version: u64,
    policy: PackPolicy,
    ask: Ask,
    verdict: Option<(i64, GpuPick)>,
}

impl Arrivals {
    pub fn note(&mut self, ask: Ask) {
        if self.recent.len() == ARRIVALS_KEPT
            && let Some(old) = self.recent.pop_front()
        {
            self.counts.remove(&old);
        }
        self.counts.add(&ask);
        self.recent.push_back(ask);
        self.since_model += 1;
    }

    /// Learn again if the model is missing or behind.
    pub fn refresh(&mut self) {
        let stale = self.model.is_none() || self.since_model >= ARRIVALS_PER_REFRESH;
        if stale && self.since_model > 0 {
            let model = WorkloadModel::from_counts(&self.counts, 95);
            debug_assert_eq!(
                model,
                WorkloadModel::from_asks(self.recent.iter(), 95),
                "counts kept as asks come and go"
            );
            self.since_model = 0;
            // Scores are a function of the model: the memos stand while it is the same (a
            // third of Philly's refreshes learn the model they had).
            if self.model.as_ref() == Some(&model) {
                return;
            }
            self.model = Some(model);
            *self.frag.get_mut() = FragCache::default();
            self.verdicts.get_mut().clear();
            self.scored.get_mut().clear();
        }
    }

    pub fn model(&self) -> Option<&WorkloadModel> {
        self.model.as_ref()
    }
}

/// A packing policy's ranking of a node: its score, then whether it holds the job's image,
/// then the lower id.
type PackedKey = (i64, bool, std::cmp::Reverse<NodeId>);

/// A replica's resources as the packing policies see them (`None`: beyond their model, more
/// than 16 GPUs).
pub(crate) fn ask_of(per_replica: Resources, model: Option<GpuModel>) -> Option<Ask> {
    let (count, milli) = match per_replica {
        r if r.is_share() => (1, r.gpu_milli),
        r if r.gpus == 0 => (0, 0),
        r => (r.gpus, 1000),
    };
    let models = model.and_then(|m| ModelSet::of([m])).unwrap_or(ModelSet::ANY);
    Ask::new(per_replica.cpu_millis, per_replica.memory_mib, count, milli, models).ok()
}

/// A node as the packing policies see it: each GPU's free thousandths (a GPU held for a
/// preemptor or taken whole: 0), CPU and memory free.
fn room_of(node: &Node) -> Option<NodeRoom> {
    let gpus = node.spec.capacity.gpus as usize;
    if gpus > packing::NODE_GPUS_MAX {
        return None;
    }
    // On the stack: this runs for every candidate of every packed placement.
    let mut gpu_free = [0u16; packing::NODE_GPUS_MAX];
    for (slot, free) in gpu_free[..gpus].iter_mut().enumerate() {
        *free = node.slot_free_of(slot as u32);
    }
    let (cap, free) = (node.spec.capacity, node.available());
    NodeRoom::with_free(
        (cap.cpu_millis, cap.memory_mib),
        (free.cpu_millis, free.memory_mib),
        Some(node.spec.gpu_model),
        &gpu_free[..gpus],
    )
    .ok()
}

/// The kinds of the asks running on a node (gpu-clustering groups alike asks).
fn kinds_of(node: &Node, jobs: &JobStore) -> KindCounts {
    let mut kinds = KindCounts::default();
    for &ix in &node.placed {
        let job = &jobs[ix];
        let (JobState::Running { placement, .. } | JobState::Terminating { placement, .. }) = &job.state else {
            continue;
        };
        if let Some(ask) = ask_of(job.spec.per_replica, None) {
            for _ in placement.replicas().iter().filter(|r| r.node == node.spec.id) {
                kinds.add(ask.kind());
            }
        }
    }
    kinds
}

/// The verdict remembered for a node in state `version` on `ask`, if any.
fn recall(
    kept: &[Option<NodeVerdict>; VERDICTS_PER_NODE],
    version: u64,
    policy: PackPolicy,
    ask: &Ask,
) -> Option<Option<(i64, GpuPick)>> {
    kept.iter().flatten().find(|v| v.version == version && v.policy == policy && v.ask == *ask).map(|v| v.verdict)
}

/// Keeps `verdict`, in place of the oldest of the node's (the last slot is the newest).
fn remember(kept: &mut [Option<NodeVerdict>; VERDICTS_PER_NODE], verdict: NodeVerdict) {
    kept.rotate_left(1);
    kept[VERDICTS_PER_NODE - 1] = Some(verdict);
}

impl FreeRoom<'_> {
    /// The same view, placing a job of `image`.
    pub fn with_image(self, image: Option<ImageId>) -> Self {
        FreeRoom { image, ..self }
    }

    /// Does image locality favour `node` for the job placed (it holds the job's image, and
    /// locality is on)?
    fn favours_image_on(&self, node: &Node) -> bool {
        self.image_permille > 0 && node.holds(self.image)
    }

    /// The image-locality bonus of `node` in the core's scores (thousandths of CPU and
    /// memory tightness, as `placement::score` counts them).
    fn locality_bonus(&self, node: &Node) -> i64 {
        if self.favours_image_on(node) { i64::from(self.image_permille.min(1000)) * 1000 } else { 0 }
    }

    /// Where one replica goes on free room, with its GPUs when a packing policy chose them.
    pub fn place_one_with_gpus(
        &self,
        model: Option<GpuModel>,
        per_replica: Resources,
    ) -> Option<(NodeId, Option<GpuSet>)> {
        if let Some((policy, jobs, arrivals)) = self.packing
            && let Some(ask) = ask_of(per_replica, model)
            && (!policy.needs_workload_model() || arrivals.model().is_some())
        {
            let packed = self.place_packed(policy, jobs, arrivals, &ask, per_replica, model);
            // Nodes of more GPUs than the policies model are not theirs to judge: where no
            // other node takes the replica, the core's scoring places it (on one of those).
            if packed.is_some() || !self.nodes.any_beyond_packing() {
                return packed;
            }
        }
        self.place_one(model, per_replica).map(|node| (node, None))
    }

    /// A packing policy's choice among the first `candidate_nodes_scored_max` nodes where
    /// the replica fits (shared GPUs with room first for a share, then by free GPUs
    /// ascending): the best score, ties to the lowest node id. Nodes of more than 16 GPUs
    /// are not judged here: `place_one_with_gpus` leaves them to `scoring`.
    fn place_packed(
        &self,
        policy: PackPolicy,
        jobs: &JobStore,
        arrivals: &Arrivals,
        ask: &Ask,
        per_replica: Resources,
        model: Option<GpuModel>,
    ) -> Option<(NodeId, Option<GpuSet>)> {
        let index = &self.nodes.index;
        let mut best: Option<(PackedKey, GpuPick)> = None;
        let scored = std::cell::Cell::new(0usize);
        // Nodes in the same state score alike, so each state is scored once under the
        // learnt model, and a node's verdict stands until its state or the model changes;
        // not under random (a draw per node) or gpu-clustering (it reads what a node runs).
        let by_room = !matches!(policy, PackPolicy::Random | PackPolicy::GpuClustering);
        let mut scored_states = arrivals.scored.borrow_mut();
        let mut verdicts = arrivals.verdicts.borrow_mut();
        if by_room && verdicts.len() < self.nodes.len() {
            verdicts.resize(self.nodes.len(), [None; VERDICTS_PER_NODE]);
        }
        // Counts one more node the ask fits; true once enough have been scored.
        let count_fit = || {
            scored.set(scored.get() + 1);
            scored.get() >= self.scored_max
        };
        // Scores one node; true once enough have been scored, and its score if the ask fits.
        let mut visit = |node_ix: NodeIx, among_shared: bool| -> (bool, Option<i64>) {
            let node = self.nodes.at(node_ix);
            if per_replica.is_share() && !among_shared && node.shared_open() {
                // Met already among the shared nodes.
                return (false, None);
            }
            let at = node_ix.0 as usize;
            let known = by_room.then(|| recall(&verdicts[at], node.version, policy, ask)).flatten();
            let verdict = match known {
                Some(verdict) => {
                    debug_assert_eq!(
                        verdict,
                        self.judge(policy, jobs, arrivals, None, node, ask, per_replica),
                        "a remembered verdict on node {} is what judging it again gives",
                        node.spec.id.0
                    );
                    verdict
                }
                None => {
                    let memo = by_room.then_some(&mut *scored_states);
                    let verdict = self.judge(policy, jobs, arrivals, memo, node, ask, per_replica);
                    if by_room {
                        remember(&mut verdicts[at], NodeVerdict { version: node.version, policy, ask: *ask, verdict });
                    }
                    verdict
                }
            };
            let Some((score, pick)) = verdict else { return (false, None) };
            let key = (score, self.favours_image_on(node), std::cmp::Reverse(node.spec.id));
            if best.as_ref().is_none_or(|(b, _)| key > *b) {
                best = Some((key, pick));
            }
            (count_fit(), Some(score))
        };
        // Plain loops rather than one chain of iterators: this runs for every placement.
        'walk: {
            if per_replica.is_share() {
                for node_ix in index.shared_open(model) {
                    if visit(node_ix, true).0 {
                        break 'walk;
                    }
                }
            }
            // Only the levels where a node is: in a busy cluster most are empty.
            index.visit_occupied_levels(model, per_replica.as_whole_gpus().gpus, |level| {
                // The last node judged at this level, if it shares no GPU, and its score if the
                // ask fitted it: a twin of it (`twins`) scores alike and loses the tie on id,
                // so it is only counted. Twins are mostly neighbours in the walk: in a cluster
                // of one node shape, the nodes at one level are mostly in one state.
                let mut last: Option<(&Node, Option<i64>)> = None;
                index.visit_level(model, level, |node_ix| {
                    let node = self.nodes.at(node_ix);
                    if by_room
                        && let Some((first, score)) = last
                        && self.twins(first, node)
                    {
                        debug_assert_eq!(
                            score,
                            self.judge(policy, jobs, arrivals, None, node, ask, per_replica).map(|(s, _)| s),
                            "node {} scores as its twin {}",
                            node.spec.id.0,
                            first.spec.id.0
                        );
                        return score.is_some() && count_fit();
                    }
                    let (done, score) = visit(node_ix, false);
                    last = node.shared.is_empty().then_some((node, score));
                    done
                })
            });
        }
        let ((_, _, std::cmp::Reverse(node)), pick) = best?;
        let gpus = pick.devices().fold(GpuSet::EMPTY, |set, d| set.union(GpuSet::from_bits(1 << d)));
        Some((node, Some(gpus)))
    }

    /// Do a packing policy's verdicts on `first` and `node`, both at one level of the free
    /// index, differ only in the GPUs picked, and rank them alike but for their ids? Yes when
    /// neither shares a GPU (each GPU is then wholly free or taken, and no score reads their
    /// order: `scores_ignore_the_order_of_gpus`) and they have the same shape, room, model
    /// and image standing.
    fn twins(&self, first: &Node, node: &Node) -> bool {
        node.shared.is_empty()
            && node.available() == first.available()
            && node.spec.capacity == first.spec.capacity
            && node.spec.gpu_model == first.spec.gpu_model
            && self.favours_image_on(node) == self.favours_image_on(first)
    }

    /// A packing policy's verdict on one node for `ask`: its score and GPUs, or `None` when
    /// the ask does not fit. Nodes in the same state score alike: with `memo` each state is
    /// scored once under the model.
    #[allow(clippy::too_many_arguments)]
    fn judge(
        &self,
        policy: PackPolicy,
        jobs: &JobStore,
        arrivals: &Arrivals,
        memo: Option<&mut ScoredStates>,
        node: &Node,
        ask: &Ask,
        per_replica: Resources,
    ) -> Option<(i64, GpuPick)> {
        if !per_replica.fits_in(node.available()) {
            return None;
        }
        let room = room_of(node)?;
        if !room.fits(ask) {
            return None;
        }
        let score = |room: &NodeRoom| {
            let entropy = u64::from(node.spec.id.0) ^ node.version;
            let mut cache = arrivals.frag.borrow_mut();
            // Only gpu-clustering reads the kinds of the asks a node runs.
            let kinds = if policy == PackPolicy::GpuClustering { kinds_of(node, jobs) } else { KindCounts::default() };
            packing::score_node(policy, arrivals.model(), &mut cache, room, &kinds, ask, entropy)
        };
        let Some(memo) = memo else { return Some(score(&room)) };
        if memo.len() >= SCORED_STATES_MAX {
            memo.clear();
        }
        Some(*memo.entry((policy, *ask, room)).or_insert_with_key(|(_, _, room)| score(room)))
    }

    /// Free room on schedulable nodes for the job's shape: `(node, replicas)` or `None`.
    pub fn place(&self, model: Option<GpuModel>, per_replica: Resources, replicas: u32) -> Option<Vec<(NodeId, u32)>> {
        let candidates = self.candidates(model, per_replica, replicas);
        choose_nodes(&candidates, per_replica, replicas, self.scoring)
    }

    /// Where one replica goes on free room, as `place` would choose, without building
    /// the candidate list: the best-scored of the first feasible nodes (at most
    /// `candidate_nodes_scored_max`) at the first GPU level, in the policy's direction, that
    /// has any.
    pub fn place_one(&self, model: Option<GpuModel>, per_replica: Resources) -> Option<NodeId> {
        if per_replica.is_share() {
            return self.place_share(model, per_replica);
        }
        let lowest = per_replica.gpus;
        let highest = self.nodes.index.level_max();
        if lowest > highest {
            return None;
        }
        let policy = self.scoring;
        let cap = self.scored_max;
        let mut best: Option<(i64, std::cmp::Reverse<NodeId>)> = None;
        let mut scored = 0usize;
        for step in 0..=(highest - lowest) {
            let level = if policy == ScoringPolicy::Spread { highest - step } else { lowest + step };
            if !self.nodes.index.any_at_level(model, level) {
                continue;
            }
            for node_ix in self.nodes.index.at_level(model, level) {
                let node = self.nodes.at(node_ix);
                let available = node.available();
                if !per_replica.fits_in(available) {
                    continue;
                }
                let candidate = Candidate { node: node.spec.id, available, capacity: node.spec.capacity };
                let scored_here = score(policy, &candidate, per_replica) + self.locality_bonus(node);
                let key = (scored_here, std::cmp::Reverse(node.spec.id));
                if best.is_none_or(|b| key > b) {
                    best = Some(key);
                }
                scored += 1;
                if scored >= cap {
                    return best.map(|(_, std::cmp::Reverse(node))| node);
                }
            }
            if best.is_some() {
                return best.map(|(_, std::cmp::Reverse(node))| node);
            }
        }
        None
    }

    /// Where a share of one GPU goes: on a GPU already shared if one has room (the
    /// tightest such GPU, then the node with the fewest whole GPUs free, then id), so that a
    /// whole GPU is broken only when no shared one can take it; else where one whole GPU
    /// would go by the scoring policy. At most `candidate_nodes_scored_max` feasible nodes
    /// are weighed.
    fn place_share(&self, model: Option<GpuModel>, per_replica: Resources) -> Option<NodeId> {
        let milli = per_replica.gpu_milli;
        let mut best: Option<((u32, bool, u32, NodeId), NodeId)> = None;
        let mut scored = 0usize;
        for node_ix in self.nodes.index.shared_open(model) {
            let node = self.nodes.at(node_ix);
            if !per_replica.without_shares().fits_in(node.available()) {
                continue;
            }
            let Some((_, left)) = node.share_fit(milli) else { continue };
            let key = (left, !self.favours_image_on(node), node.available_gpus(), node.spec.id);
            if best.is_none_or(|(b, _)| key < b) {
                best = Some((key, node.spec.id));
            }
            scored += 1;
            if scored >= self.scored_max {
                break;
            }
        }
        if let Some((_, node)) = best {
            return Some(node);
        }
        self.place_one(model, per_replica.as_whole_gpus())
    }

    /// Candidate nodes from the free index. One replica: walk GPU levels in the scoring
    /// policy's preferred direction and stop at the first level with a feasible node (GPU
    /// fit dominates the score), scoring at most `candidate_nodes_scored_max`. A gang: all
    /// nodes with room for at least one replica, since fewest-nodes needs the whole picture.
    fn candidates(&self, model: Option<GpuModel>, per_replica: Resources, replicas: u32) -> Vec<Candidate> {
        let lowest = per_replica.gpus;
        let highest = self.nodes.index.level_max();
        if lowest > highest {
            return Vec::new();
        }
        let spread_single = replicas == 1 && self.scoring == ScoringPolicy::Spread;
        let cap = self.scored_max;
        let mut out = Vec::with_capacity(cap.min(16));
        for step in 0..=(highest - lowest) {
            let level = if spread_single { highest - step } else { lowest + step };
            if !self.nodes.index.any_at_level(model, level) {
                continue;
            }
            for node_ix in self.nodes.index.at_level(model, level) {
                let node = self.nodes.at(node_ix);
                let available = node.available();
                if per_replica.fits_in(available) {
                    out.push(Candidate { node: node.spec.id, available, capacity: node.spec.capacity });
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
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The model learnt from the counts kept as arrivals come and go is the one learnt from
    /// the window of the latest arrivals, long after the window first filled.
    #[test]
    fn the_counts_kept_learn_the_model_of_the_window() {
        let mut arrivals = Arrivals::default();
        // A drifting mix: shapes come into fashion and go out of it.
        for i in 0..(3 * ARRIVALS_KEPT as u64) {
            let gpus = 1 + ((i / 1000) + i % 3) % 4;
            let cpu = 1000 * (1 + (i / 1500 + i % 5) % 3);
            arrivals.note(ask_of(Resources::new(gpus as u32, cpu, 0), None).expect("a valid ask"));
            arrivals.refresh();
            if i % 997 == 0 || arrivals.since_model == 0 {
                let window = WorkloadModel::from_asks(arrivals.recent.iter(), 95);
                assert_eq!(WorkloadModel::from_counts(&arrivals.counts, 95), window, "after {} arrivals", i + 1);
            }
        }
        assert_eq!(arrivals.recent.len(), ARRIVALS_KEPT);
        assert!(arrivals.model().is_some_and(|m| m.shapes().len() > 1));
    }

    /// What was scored under the model is kept while a refresh learns the same model again,
    /// and dropped when it learns another.
    #[test]
    fn a_refresh_keeps_the_memos_only_when_the_model_is_the_same() {
        let ask = |gpus: u32| ask_of(Resources::new(gpus, 1000 * gpus as u64, 0), None).expect("a valid ask");
        let mut arrivals = Arrivals::default();
        let arrive = |arrivals: &mut Arrivals, n: usize, gpus_of: &dyn Fn(usize) -> u32| {
            for i in 0..n {
                arrivals.note(ask(gpus_of(i)));
                arrivals.refresh();
            }
        };
        // A steady mix of four shapes: every window of the latest arrivals counts them alike.
        // The first arrival is learnt at once, then every `ARRIVALS_PER_REFRESH`.
        let steady = |i: usize| 1 + (i % 4) as u32;
        arrive(&mut arrivals, ARRIVALS_KEPT + 1, &steady);
        assert_eq!(arrivals.since_model, 0, "refreshed");
        let learnt = arrivals.model().cloned().expect("a model");
        let marked = |arrivals: &Arrivals| !arrivals.verdicts.borrow().is_empty();
        arrivals.verdicts.get_mut().push([None; VERDICTS_PER_NODE]);
        arrive(&mut arrivals, 3 * ARRIVALS_PER_REFRESH as usize, &steady);
        assert_eq!(arrivals.since_model, 0, "refreshed");
        assert_eq!(arrivals.model(), Some(&learnt));
        assert!(marked(&arrivals), "the same model keeps what was scored under it");
        // A new shape in fashion: the next refresh learns another model.
        arrive(&mut arrivals, ARRIVALS_PER_REFRESH as usize, &|_| 8);
        assert_eq!(arrivals.since_model, 0, "refreshed");
        assert_ne!(arrivals.model(), Some(&learnt));
        assert!(!marked(&arrivals), "another model drops what was scored under the old one");
    }
}
