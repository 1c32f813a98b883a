//! The placement policies and their scores. Each scores one feasible node for one ask
//! (higher is better); the packer takes the best node, ties going to the lower rank. The
//! baselines follow the definitions of FGD's reference simulator, integer rounding included,
//! so that their figures can be compared with the published ones (docs/placement.md).

use std::fmt;
use std::str::FromStr;

use super::{Ask, AskKind, GpuPick, MILLI_PER_GPU, NodeRoom};

/// A placement policy, chosen by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PackPolicy {
    /// A node drawn uniformly among those that fit (the caller's entropy).
    Random,
    /// The node whose free (CPU, GPU) vector has the least dot product with the ask.
    DotProduct,
    /// Nodes already running asks of the same kind (share, k whole GPUs) first.
    GpuClustering,
    /// Partly used GPUs first, then free GPUs on used nodes, then idle nodes.
    GpuPacking,
    /// The node left with the least free CPU and GPU (each over the largest node's).
    BestFit,
    /// Fragmentation gradient descent: the node whose fragmentation grows least.
    Fgd,
    /// Fairway's own: FGD's node score with its ties going to nodes in use, and for a share
    /// the GPU whose fragmentation grows least exactly (FGD rounds it), then the tightest.
    Fairway,
}

impl PackPolicy {
    /// Every policy, the baselines first, in the paper's order.
    pub const ALL: [PackPolicy; 7] = [
        PackPolicy::Random,
        PackPolicy::DotProduct,
        PackPolicy::GpuClustering,
        PackPolicy::GpuPacking,
        PackPolicy::BestFit,
        PackPolicy::Fgd,
        PackPolicy::Fairway,
    ];
    /// The policy the scheduler uses unless told otherwise: the best measured on the
    /// packing benchmark (docs/placement.md), Fairway's own, ahead of FGD by a small margin.
    pub const DEFAULT: PackPolicy = PackPolicy::Fairway;

    pub fn name(self) -> &'static str {
        match self {
            PackPolicy::Random => "random",
            PackPolicy::DotProduct => "dot-product",
            PackPolicy::GpuClustering => "gpu-clustering",
            PackPolicy::GpuPacking => "gpu-packing",
            PackPolicy::BestFit => "best-fit",
            PackPolicy::Fgd => "fgd",
            PackPolicy::Fairway => "fairway",
        }
    }

    /// Whether it needs a [`WorkloadModel`](super::WorkloadModel) (the typical asks).
    pub fn needs_workload_model(self) -> bool {
        matches!(self, PackPolicy::Fgd | PackPolicy::Fairway)
    }
}

impl fmt::Display for PackPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A policy name that is not one of [`PackPolicy::ALL`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown placement policy {0:?} (known: random, dot-product, gpu-clustering, gpu-packing, best-fit, fgd, fairway)"
)]
pub struct UnknownPolicy(pub String);

impl FromStr for PackPolicy {
    type Err = UnknownPolicy;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        PackPolicy::ALL.into_iter().find(|p| p.name() == s).ok_or_else(|| UnknownPolicy(s.to_owned()))
    }
}

/// A node's score for an ask: higher first.
pub(super) type Score = i64;

/// The largest node the baselines normalise by, as the reference does: 128 cores, 8 GPUs.
const MAX_SPEC_CPU_MILLI: f64 = 128_000.0;
const MAX_SPEC_GPU_MILLI: i64 = 8_000;
const MAX_NODE_SCORE: i64 = 100;

/// How many asks of each kind a node runs (for `gpu-clustering`): index 0 for shares,
/// `k` for asks of `k` whole GPUs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct KindCounts([u16; super::NODE_GPUS_MAX + 1]);

impl KindCounts {
    fn slot(kind: AskKind) -> Option<usize> {
        match kind {
            AskKind::CpuOnly => None,
            AskKind::Share => Some(0),
            AskKind::Whole(k) => Some(usize::from(k)),
        }
    }
    pub(crate) fn add(&mut self, kind: AskKind) {
        if let Some(i) = Self::slot(kind) {
            self.0[i] += 1;
        }
    }
    pub(super) fn remove(&mut self, kind: AskKind) {
        if let Some(i) = Self::slot(kind) {
            self.0[i] = self.0[i].saturating_sub(1);
        }
    }
    fn has(&self, kind: AskKind) -> bool {
        Self::slot(kind).is_some_and(|i| self.0[i] > 0)
    }
    fn kinds(&self) -> usize {
        self.0.iter().filter(|&&n| n > 0).count()
    }
}

/// What a policy may look at on one node.
pub(super) struct NodeView<'a> {
    pub room: &'a NodeRoom,
    pub kinds: &'a KindCounts,
    /// The node's fragmentation now (FGD and Fairway only; 0 otherwise).
    pub frag: f64,
}

/// Fragmentation of a what-if state of a node, memoised by the packer.
pub(super) trait FragOf {
    fn frag_of(&mut self, room: &NodeRoom) -> f64;
}

/// Unmemoised, for the tests' brute-force reference.
#[cfg(test)]
impl FragOf for &super::WorkloadModel {
    fn frag_of(&mut self, room: &NodeRoom) -> f64 {
        self.node_frag(room)
    }
}

/// The node's score for `ask`, which fits it.
pub(super) fn score(policy: PackPolicy, node: &NodeView<'_>, ask: &Ask, frag: &mut impl FragOf) -> Score {
    match policy {
        // The packer draws among feasible nodes itself.
        PackPolicy::Random => 0,
        PackPolicy::DotProduct => dot_product(node.room, ask),
        PackPolicy::GpuClustering => gpu_clustering(node, ask),
        PackPolicy::GpuPacking => gpu_packing(node.room, ask),
        PackPolicy::BestFit => best_fit(node.room, ask),
        PackPolicy::Fgd => fgd(node, ask, frag).0,
        PackPolicy::Fairway => fairway(node, ask, frag).0,
    }
}

/// The GPUs `ask` takes on the chosen node. `entropy` serves `random` only.
pub(super) fn pick(
    policy: PackPolicy,
    node: &NodeView<'_>,
    ask: &Ask,
    frag: &mut impl FragOf,
    entropy: u64,
) -> GpuPick {
    let room = node.room;
    let default = || room.default_pick(ask).expect("the chosen node fits the ask");
    if !ask.is_share() {
        return default();
    }
    match policy {
        PackPolicy::Random => {
            let fitting: Vec<u8> =
                (0..room.gpus() as u8).filter(|&i| room.gpu_free()[usize::from(i)] >= ask.gpu_milli).collect();
            GpuPick::Share(fitting[draw(entropy, fitting.len())])
        }
        PackPolicy::Fgd => fgd(node, ask, frag).1,
        PackPolicy::Fairway => fairway(node, ask, frag).1,
        _ => default(),
    }
}

/// [`score`] and [`pick`] together: FGD and Fairway weigh each GPU of a node once for both.
pub(super) fn score_and_pick(
    policy: PackPolicy,
    node: &NodeView<'_>,
    ask: &Ask,
    frag: &mut impl FragOf,
    entropy: u64,
) -> (Score, GpuPick) {
    match policy {
        PackPolicy::Fgd => fgd(node, ask, frag),
        PackPolicy::Fairway => fairway(node, ask, frag),
        _ => (score(policy, node, ask, frag), pick(policy, node, ask, frag, entropy)),
    }
}

/// A number in `0..n` from 64 random bits (Lemire's multiply-shift).
pub(super) fn draw(entropy: u64, n: usize) -> usize {
    ((u128::from(entropy) * n as u128) >> 64) as usize
}

/// `(1 − (cpu left after / 128 cores + GPU left after / 8 GPUs) / 2) × 100`, truncated.
fn best_fit(room: &NodeRoom, ask: &Ask) -> i64 {
    let cpu_left = room.cpu_milli_free as f64 - ask.cpu_milli as f64;
    let gpu_left = room.gpu_free_total() as f64 - ask.gpu_milli_total() as f64;
    let mut left = 0.0;
    left += cpu_left / MAX_SPEC_CPU_MILLI * 0.5;
    left += gpu_left / MAX_SPEC_GPU_MILLI as f64 * 0.5;
    ((1.0 - left) * MAX_NODE_SCORE as f64) as i64
}

/// `(1 − (free · ask) / 2) × 100`, truncated, both vectors (CPU, GPU) over the largest node.
fn dot_product(room: &NodeRoom, ask: &Ask) -> i64 {
    let node =
        [room.cpu_milli_free as f64 / MAX_SPEC_CPU_MILLI, room.gpu_free_total() as f64 / MAX_SPEC_GPU_MILLI as f64];
    let want = [ask.cpu_milli as f64 / MAX_SPEC_CPU_MILLI, ask.gpu_milli_total() as f64 / MAX_SPEC_GPU_MILLI as f64];
    let mut dot = 0.0;
    for i in 0..2 {
        dot += node[i] * want[i];
    }
    ((1.0 - dot / 2.0) * MAX_NODE_SCORE as f64) as i64
}

/// Quarters of the score range: (75, 100] a node running only this kind of ask, (50, 75]
/// one running this kind among others, (25, 50] an idle node, [0, 25] one running other
/// kinds; within a quarter, the less free GPU the better. CPU-only asks score 0 everywhere.
fn gpu_clustering(node: &NodeView<'_>, ask: &Ask) -> i64 {
    let kind = ask.kind();
    if kind == AskKind::CpuOnly {
        return 0;
    }
    let used = MAX_NODE_SCORE / 4 * (MAX_SPEC_GPU_MILLI - node.room.gpu_free_total() as i64) / MAX_SPEC_GPU_MILLI;
    let quarter = match (node.kinds.has(kind), node.kinds.kinds()) {
        (true, 1) => 3,
        (true, _) => 2,
        (false, 0) => 1,
        (false, _) => 0,
    };
    used + MAX_NODE_SCORE * quarter / 4
}

/// Highest for asks that fit on partly used GPUs (100 less a tenth of the percent left on
/// the GPUs used, at least 50), then for asks that need free GPUs of a used node (50 less
/// their count, at least 33), then idle nodes (33 less their GPUs). CPU-only asks score 0.
fn gpu_packing(room: &NodeRoom, ask: &Ask) -> i64 {
    if ask.gpu_count == 0 {
        return 0;
    }
    let free = room.gpu_free();
    let whole_free = room.whole_gpus_free() as i64;
    if whole_free == room.gpus() as i64 {
        return (MAX_NODE_SCORE / 3 - whole_free).max(whole_free);
    }
    let (order, n) = least_free_first(room);
    let mut wanted = ask.gpu_count;
    let mut whole_used = 0i64;
    let mut percent_left_on_used = 0i64;
    for &i in &order[..n] {
        if wanted == 0 {
            break;
        }
        if free[i] >= ask.gpu_milli {
            wanted -= 1;
            if free[i] == MILLI_PER_GPU {
                whole_used += 1;
            }
            percent_left_on_used += i64::from(free[i]) * 100 / i64::from(MILLI_PER_GPU);
        }
    }
    if whole_used > 0 {
        (MAX_NODE_SCORE / 2 - whole_used).max(MAX_NODE_SCORE / 3)
    } else {
        (MAX_NODE_SCORE - percent_left_on_used / 10).max(MAX_NODE_SCORE / 2)
    }
}

/// The node after `ask` took the GPUs FGD's reference gives it when scoring: for a share,
/// device `device`; otherwise the least free GPUs that hold it.
fn after(room: &NodeRoom, ask: &Ask, device: Option<usize>) -> NodeRoom {
    let mut next = room.clone();
    next.cpu_milli_free -= ask.cpu_milli;
    if let Some(d) = device {
        next.gpu_free[d] -= ask.gpu_milli;
        return next;
    }
    let (order, n) = least_free_first(room);
    let mut wanted = ask.gpu_count;
    for &i in &order[..n] {
        if wanted == 0 {
            break;
        }
        if next.gpu_free[i] >= ask.gpu_milli {
            next.gpu_free[i] -= ask.gpu_milli;
            wanted -= 1;
        }
    }
    next
}

/// The node's GPU indices, least free first, lower index among equals; and how many.
fn least_free_first(room: &NodeRoom) -> ([usize; super::NODE_GPUS_MAX], usize) {
    let n = room.gpus();
    let mut order = [0usize; super::NODE_GPUS_MAX];
    for (i, o) in order.iter_mut().enumerate().take(n) {
        *o = i;
    }
    order[..n].sort_by_key(|&i| room.gpu_free[i]);
    (order, n)
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// FGD's score for a node going from `frag_before` to `frag_after`:
/// `sigmoid((frag before − frag after) / 1000) × 100`, truncated.
fn fgd_score(frag_before: f64, frag_after: f64) -> i64 {
    (sigmoid((frag_before - frag_after) / 1000.0) * MAX_NODE_SCORE as f64) as i64
}

/// Calls `visit(gpu, its free thousandths, the node's fragmentation after the share there)`
/// for each GPU of the node that holds the share, in index order. GPUs with as much free
/// give the same node after the share: their fragmentation is looked up once.
fn each_share_gpu(node: &NodeView<'_>, ask: &Ask, frag: &mut impl FragOf, mut visit: impl FnMut(usize, u16, f64)) {
    let mut seen: Option<(u16, f64)> = None;
    for (i, &f) in node.room.gpu_free().iter().enumerate() {
        if f < ask.gpu_milli {
            continue;
        }
        let after_frag = match seen {
            Some((sf, a)) if sf == f => a,
            _ => frag.frag_of(&after(node.room, ask, Some(i))),
        };
        seen = Some((f, after_frag));
        visit(i, f, after_frag);
    }
}

/// FGD: [`fgd_score`] of the node after the ask; for a share, of its best GPU (the first
/// among equals).
fn fgd(node: &NodeView<'_>, ask: &Ask, frag: &mut impl FragOf) -> (i64, GpuPick) {
    if !ask.is_share() {
        let s = fgd_score(node.frag, frag.frag_of(&after(node.room, ask, None)));
        return (s, node.room.default_pick(ask).expect("the node fits the ask"));
    }
    let mut best: Option<(i64, usize)> = None;
    each_share_gpu(node, ask, frag, |i, _, after_frag| {
        let s = fgd_score(node.frag, after_frag);
        if best.is_none_or(|(b, _)| s > b) {
            best = Some((s, i));
        }
    });
    let (s, i) = best.expect("the node has a GPU for the share");
    (s, GpuPick::Share(i as u8))
}

/// Fairway's policy: FGD's node score (its rounded sigmoid, whose coarse steps, with ties
/// going to the lower rank, also act as first-fit), ties going first to a node already in
/// use (so idle nodes stay whole); for a share, the GPU whose fragmentation grows least,
/// measured exactly (millionths of a GPU), then the one with the least free (FGD takes the
/// first GPU of the best rounded score).
fn fairway(node: &NodeView<'_>, ask: &Ask, frag: &mut impl FragOf) -> (Score, GpuPick) {
    // FGD's score, doubled, plus one on a node in use: ties in FGD's score go to used nodes.
    let in_use = i64::from(!node.room.is_idle());
    if !ask.is_share() {
        let (s, p) = fgd(node, ask, frag);
        return (s * 2 + in_use, p);
    }
    let mut least_after = f64::INFINITY;
    let mut best: Option<((i64, i64), usize)> = None;
    each_share_gpu(node, ask, frag, |i, free, after_frag| {
        least_after = least_after.min(after_frag);
        let growth = ((after_frag - node.frag) * 1000.0).round() as i64;
        let key = (-growth, -i64::from(free));
        if best.is_none_or(|(b, _)| key > b) {
            best = Some((key, i));
        }
    });
    let (_, i) = best.expect("the node has a GPU for the share");
    // FGD's score falls as fragmentation after grows: the node's is the least's.
    (fgd_score(node.frag, least_after) * 2 + in_use, GpuPick::Share(i as u8))
}
