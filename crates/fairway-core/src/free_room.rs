//! Where a job goes on free room: the walk of the free index (nodes by model and free GPUs)
//! that finds candidate nodes, and the choice among them (`placement.rs`), over a read-only
//! view of the nodes. Pure: it returns where, and the cycle starts the job there.

use crate::cluster::Nodes;
use crate::config::ScoringPolicy;
use crate::placement::{Candidate, choose_nodes, score};
use crate::types::{GpuModel, NodeId, Resources};

/// What free-room placement reads.
#[derive(Clone, Copy)]
pub(crate) struct FreeRoom<'a> {
    pub nodes: &'a Nodes,
    pub scoring: ScoringPolicy,
    /// `Limits::candidate_nodes_scored_max`.
    pub scored_max: usize,
}

impl FreeRoom<'_> {
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
                let key = (score(policy, &candidate, per_replica), std::cmp::Reverse(node.spec.id));
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
        let mut best: Option<((u32, u32, NodeId), NodeId)> = None;
        let mut scored = 0usize;
        for node_ix in self.nodes.index.shared_open(model) {
            let node = self.nodes.at(node_ix);
            if !per_replica.without_shares().fits_in(node.available()) {
                continue;
            }
            let Some((_, left)) = node.share_fit(milli) else { continue };
            let key = (left, node.available_gpus(), node.spec.id);
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
