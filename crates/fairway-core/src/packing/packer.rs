//! The packer: nodes with GPU shares, and the best node for each ask under a policy.
//!
//! Recipe for one ask:
//! 1. Find the ask's index (one per distinct ask; built on first use by scoring every node
//!    that fits).
//! 2. Score again the nodes that changed since the index last looked (each node carries a
//!    version; the packer logs which nodes changed), and push them.
//! 3. Drop stale entries from the top (an entry is stale when its node changed since).
//! 4. The top is the best node: highest score, then lowest rank. `random` instead draws
//!    among all nodes that fit.
//!
//! A node's score for an ask depends only on the node and the ask, so a node that did not
//! change keeps its score: each ask costs the nodes that changed since an ask of its shape
//! last came, not the whole cluster.

use std::collections::{BinaryHeap, HashMap};

use super::policy::{self, FragOf, KindCounts, NodeView, Score};
use super::{Ask, GpuPick, NODE_GPUS_MAX, NodeRoom, PackPolicy, RoomError, WorkloadModel};

pub(crate) type FastMap<K, V> = HashMap<K, V, foldhash::fast::FixedState>;

/// Where an ask went: the node's index and its GPUs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placement {
    pub node: usize,
    pub pick: GpuPick,
}

/// Work counters, for benchmarks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PackStats {
    /// Node scores computed.
    pub scored: u64,
    /// Fragmentation computed for a node state not seen before.
    pub frag_computed: u64,
    /// Fragmentation found in the memo.
    pub frag_memo_hits: u64,
}

/// Why a packer cannot be built.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PackError {
    #[error("policy {0}: needs the workload's typical asks")]
    NoWorkloadModel(PackPolicy),
    #[error("ranks: {ranks} given for {nodes} nodes")]
    RankCount { ranks: usize, nodes: usize },
    #[error("ranks: {0} is given to two nodes (ranks break ties and must be distinct)")]
    RankTwice(u32),
}

/// A node's score in an index: ordered by score, then lower rank; one 128-bit compare.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Entry {
    /// The score (sign bit flipped, so that it orders as unsigned) above `!rank`.
    key: u128,
    node: u32,
    version: u32,
}

impl Entry {
    fn new(score: Score, rank: u32, node: usize, version: u32) -> Entry {
        let score_bits = (score as u64) ^ (1 << 63);
        Entry { key: (u128::from(score_bits) << 64) | u128::from(!rank), node: node as u32, version }
    }
}

#[derive(Default)]
struct AskIndex {
    heap: BinaryHeap<Entry>,
    /// `random`: the nodes that fit, in no particular order, and each node's place there
    /// (`u32::MAX` when absent).
    fitting: Vec<u32>,
    place: Vec<u32>,
    /// How much of the change log this index has seen.
    seen: usize,
    built: bool,
    /// The ask fit no node when the packer had given back this many times: room only
    /// shrinks between give-backs, so it still fits none until the next.
    fit_none_at_release: Option<u64>,
}

/// The memo key of a node's fragmentation: all it depends on.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct FragKey {
    model: u16,
    cpu_step: u16,
    free_desc: [u16; NODE_GPUS_MAX],
}

/// Fragmentation of node states, memoised; bounded by [`FRAG_MEMO_MAX`]. Without a
/// workload model nothing may ask (only FGD and Fairway do, and they need one).
struct FragMemo<'m> {
    model: Option<&'m WorkloadModel>,
    memo: &'m mut FastMap<FragKey, f64>,
    stats: &'m mut PackStats,
}

/// Fragmentation of node states under one workload model, memoised across placements (the
/// scheduler keeps one per model: a value depends on the model, so a new model needs a new
/// cache). Only what a pure function gave is kept, so it changes no decision.
#[derive(Clone, Debug, Default)]
pub(crate) struct FragCache {
    memo: FastMap<FragKey, f64>,
    stats: PackStats,
}

impl std::fmt::Debug for FragKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "FragKey({}, {}, {:?})", self.model, self.cpu_step, self.free_desc)
    }
}

/// One node's score and GPUs for `ask` (which fits it) under `policy`: the scheduler's
/// placement weighs a bounded list of candidates, without the packer's indexes, fragmentation
/// memoised in `cache`. `kinds` counts the asks running on the node by kind (gpu-clustering
/// reads it).
pub(crate) fn score_node(
    policy: PackPolicy,
    model: Option<&WorkloadModel>,
    cache: &mut FragCache,
    room: &NodeRoom,
    kinds: &KindCounts,
    ask: &Ask,
    entropy: u64,
) -> (Score, GpuPick) {
    let mut frag = FragMemo { model, memo: &mut cache.memo, stats: &mut cache.stats };
    let now = if model.is_some() { frag.frag_of(room) } else { 0.0 };
    let view = NodeView { room, kinds, frag: now };
    policy::score_and_pick(policy, &view, ask, &mut frag, splitmix(entropy))
}

/// States remembered before the memo starts again.
const FRAG_MEMO_MAX: usize = 1 << 20;
/// Changes logged before the indexes are rebuilt from scratch.
const CHANGE_LOG_MAX: usize = 1 << 22;

impl FragOf for FragMemo<'_> {
    fn frag_of(&mut self, room: &NodeRoom) -> f64 {
        let model = self.model.expect("only FGD and Fairway measure fragmentation, and they need a workload model");
        let key = FragKey {
            model: room.model.map_or(u16::MAX, |m| m.0),
            cpu_step: model.cpu_step(room.cpu_milli_free),
            free_desc: room.sorted_free_desc(),
        };
        if let Some(&f) = self.memo.get(&key) {
            self.stats.frag_memo_hits += 1;
            return f;
        }
        if self.memo.len() >= FRAG_MEMO_MAX {
            self.memo.clear();
        }
        self.stats.frag_computed += 1;
        let f = model.node_frag(room);
        self.memo.insert(key, f);
        f
    }
}

/// Nodes with GPU shares, and the best node for each ask under one policy.
pub struct Packer {
    policy: PackPolicy,
    model: Option<WorkloadModel>,
    rooms: Vec<NodeRoom>,
    ranks: Vec<u32>,
    versions: Vec<u32>,
    pub(super) kinds: Vec<KindCounts>,
    /// Each node's fragmentation now (0 without a workload model), and their sum.
    frags: Vec<f64>,
    frag_sum: f64,
    asks: FastMap<Ask, usize>,
    indexes: Vec<AskIndex>,
    changes: Vec<u32>,
    marks: Vec<u32>,
    epoch: u32,
    memo: FastMap<FragKey, f64>,
    stats: PackStats,
    /// Give-backs so far.
    releases: u64,
}

impl Packer {
    /// A packer over `rooms`; `ranks[i]` breaks ties for node `i` (lower first; distinct).
    /// `model` is required by FGD and Fairway, and enables [`Self::frag_total`].
    pub fn new(
        policy: PackPolicy,
        rooms: Vec<NodeRoom>,
        ranks: Vec<u32>,
        model: Option<WorkloadModel>,
    ) -> Result<Packer, PackError> {
        if policy.needs_workload_model() && model.is_none() {
            return Err(PackError::NoWorkloadModel(policy));
        }
        if ranks.len() != rooms.len() {
            return Err(PackError::RankCount { ranks: ranks.len(), nodes: rooms.len() });
        }
        let mut sorted = ranks.clone();
        sorted.sort_unstable();
        if let Some(w) = sorted.windows(2).find(|w| w[0] == w[1]) {
            return Err(PackError::RankTwice(w[0]));
        }
        let n = rooms.len();
        let mut packer = Packer {
            policy,
            model,
            rooms,
            ranks,
            versions: vec![0; n],
            kinds: vec![KindCounts::default(); n],
            frags: vec![0.0; n],
            frag_sum: 0.0,
            asks: FastMap::default(),
            indexes: Vec::new(),
            changes: Vec::new(),
            marks: vec![0; n],
            epoch: 0,
            memo: FastMap::default(),
            stats: PackStats::default(),
            releases: 0,
        };
        for i in 0..n {
            packer.frags[i] = packer.frag_now(i);
            packer.frag_sum += packer.frags[i];
        }
        Ok(packer)
    }

    pub fn policy(&self) -> PackPolicy {
        self.policy
    }
    pub fn rooms(&self) -> &[NodeRoom] {
        &self.rooms
    }
    pub fn stats(&self) -> PackStats {
        self.stats
    }
    /// The cluster's fragmentation now (0 without a workload model).
    pub fn frag_total(&self) -> f64 {
        self.frag_sum
    }
    /// Node `i`'s fragmentation now.
    pub fn node_frag(&self, i: usize) -> f64 {
        self.frags[i]
    }

    /// Places `ask` on the best node and takes it; `None` if no node fits. `entropy` (random
    /// bits) serves the `random` policy only.
    pub fn place(&mut self, ask: &Ask, entropy: u64) -> Option<Placement> {
        let placement = self.choose(ask, entropy)?;
        self.take(placement.node, ask, placement.pick).expect("the chosen node fits the ask");
        Some(placement)
    }

    /// The best node for `ask` and its GPUs, without taking them.
    pub fn choose(&mut self, ask: &Ask, entropy: u64) -> Option<Placement> {
        let node = self.best_node(ask, entropy)?;
        let view = NodeView { room: &self.rooms[node], kinds: &self.kinds[node], frag: self.frags[node] };
        let mut memo = FragMemo { model: self.model.as_ref(), memo: &mut self.memo, stats: &mut self.stats };
        let pick = policy::pick(self.policy, &view, ask, &mut memo, splitmix(entropy));
        Some(Placement { node, pick })
    }

    /// Takes `ask` on node `node` with `pick` (what [`Self::place`] does after choosing).
    pub fn take(&mut self, node: usize, ask: &Ask, pick: GpuPick) -> Result<(), RoomError> {
        self.rooms[node].take(ask, pick)?;
        self.kinds[node].add(ask.kind());
        self.changed(node);
        Ok(())
    }

    /// Gives back what an ask took on node `node` (a departure).
    pub fn release(&mut self, node: usize, ask: &Ask, pick: GpuPick) -> Result<(), RoomError> {
        self.rooms[node].give_back(ask, pick)?;
        self.kinds[node].remove(ask.kind());
        self.releases += 1;
        self.changed(node);
        Ok(())
    }

    fn changed(&mut self, node: usize) {
        self.versions[node] = self.versions[node].wrapping_add(1);
        let before = self.frags[node];
        self.frags[node] = self.frag_now(node);
        self.frag_sum += self.frags[node] - before;
        if self.changes.len() >= CHANGE_LOG_MAX {
            self.changes.clear();
            for index in &mut self.indexes {
                *index = AskIndex::default();
            }
            // Rebuilt indexes start from every node: nothing of the log is needed.
        }
        self.changes.push(node as u32);
    }

    fn frag_now(&mut self, node: usize) -> f64 {
        if self.model.is_none() {
            return 0.0;
        }
        FragMemo { model: self.model.as_ref(), memo: &mut self.memo, stats: &mut self.stats }.frag_of(&self.rooms[node])
    }

    /// Steps 1–4 of the recipe.
    fn best_node(&mut self, ask: &Ask, entropy: u64) -> Option<usize> {
        let next_id = self.indexes.len();
        let id = *self.asks.entry(*ask).or_insert(next_id);
        if id == next_id {
            self.indexes.push(AskIndex::default());
        }
        let Packer {
            policy,
            model,
            rooms,
            ranks,
            versions,
            kinds,
            frags,
            indexes,
            changes,
            marks,
            epoch,
            memo,
            stats,
            releases,
            ..
        } = self;
        let index = &mut indexes[id];
        if index.fit_none_at_release == Some(*releases) {
            // Nothing was given back since this ask fit nowhere: it still fits nowhere. The
            // changes stay unseen until it is asked again after a give-back.
            return None;
        }
        let mut scorer =
            Scorer { policy: *policy, model: model.as_ref(), rooms, ranks, versions, kinds, frags, memo, stats };
        if !index.built {
            index.heap.clear();
            index.fitting.clear();
            if *policy == PackPolicy::Random {
                // Only `random` keeps the set of nodes that fit.
                index.place = vec![u32::MAX; rooms.len()];
            }
            for node in 0..rooms.len() {
                scorer.update(index, node, ask);
            }
            index.built = true;
        } else {
            *epoch = epoch.wrapping_add(1);
            for &node in &changes[index.seen..] {
                let node = node as usize;
                if marks[node] != *epoch {
                    marks[node] = *epoch;
                    scorer.update(index, node, ask);
                }
            }
        }
        index.seen = changes.len();
        if *policy == PackPolicy::Random {
            // Drawn among the nodes that fit: no scores, no heap.
            if index.fitting.is_empty() {
                index.fit_none_at_release = Some(*releases);
                return None;
            }
            return Some(index.fitting[policy::draw(entropy, index.fitting.len())] as usize);
        }
        if index.heap.len() > 2 * rooms.len() + 1024 {
            index.heap.retain(|e| e.version == versions[e.node as usize]);
        }
        while let Some(top) = index.heap.peek() {
            if top.version == versions[top.node as usize] {
                return Some(top.node as usize);
            }
            index.heap.pop();
        }
        index.fit_none_at_release = Some(*releases);
        None
    }
}

/// Scores nodes for an index, borrowing the packer's parts.
struct Scorer<'a> {
    policy: PackPolicy,
    model: Option<&'a WorkloadModel>,
    rooms: &'a [NodeRoom],
    ranks: &'a [u32],
    versions: &'a [u32],
    kinds: &'a [KindCounts],
    frags: &'a [f64],
    memo: &'a mut FastMap<FragKey, f64>,
    stats: &'a mut PackStats,
}

impl Scorer<'_> {
    /// Brings `index` up to date with node `node`.
    fn update(&mut self, index: &mut AskIndex, node: usize, ask: &Ask) {
        if self.policy == PackPolicy::Random {
            Self::update_fitting(index, node, self.rooms[node].fits(ask));
        } else {
            self.push_if_fits(&mut index.heap, node, ask);
        }
    }

    fn update_fitting(index: &mut AskIndex, node: usize, fits: bool) {
        let at = index.place[node];
        match (fits, at == u32::MAX) {
            (true, true) => {
                index.place[node] = index.fitting.len() as u32;
                index.fitting.push(node as u32);
            }
            (false, false) => {
                index.fitting.swap_remove(at as usize);
                if let Some(&moved) = index.fitting.get(at as usize) {
                    index.place[moved as usize] = at;
                }
                index.place[node] = u32::MAX;
            }
            _ => {}
        }
    }

    fn push_if_fits(&mut self, heap: &mut BinaryHeap<Entry>, node: usize, ask: &Ask) {
        let room = &self.rooms[node];
        if !room.fits(ask) {
            return;
        }
        self.stats.scored += 1;
        let view = NodeView { room, kinds: &self.kinds[node], frag: self.frags[node] };
        let mut memo = FragMemo { model: self.model, memo: self.memo, stats: self.stats };
        let score = policy::score(self.policy, &view, ask, &mut memo);
        heap.push(Entry::new(score, self.ranks[node], node, self.versions[node]));
    }
}

/// Scrambles the caller's entropy for the second draw of `random` (the GPU).
fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}
