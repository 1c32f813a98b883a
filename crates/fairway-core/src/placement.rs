//! Placement: which nodes take a job's replicas. Pure functions over a list of candidate
//! nodes and what each has available, so the same code serves real placement and the
//! what-if placements of the preemption search.
//!
//! Recipe (Nomad's feasibility → ranking → selection):
//! 1. Feasibility: a node is a candidate if one replica fits in what it has available.
//! 2. A gang that fits on one node goes on the best-scored such node.
//! 3. Otherwise the gang takes the fewest nodes: nodes holding the most replicas first,
//!    and the last node is the best-scored one that holds the remainder.
//! 4. Ranking uses the named [`ScoringPolicy`]; ties break by node id.

use crate::config::ScoringPolicy;
use crate::types::{NodeId, Resources};

/// A node a replica could go on and what it has available for this job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Candidate {
    pub node: NodeId,
    pub available: Resources,
    pub capacity: Resources,
}

impl Candidate {
    /// How many replicas of `per_replica` fit here.
    pub fn replicas_fitting(&self, per_replica: Resources) -> u32 {
        self.available.count_fitting(per_replica)
    }
}

/// Score of putting `demand` on a candidate: higher is better.
pub fn score(policy: ScoringPolicy, candidate: &Candidate, demand: Resources) -> i64 {
    let left = candidate.available.saturating_minus(demand);
    // Permille of capacity left free, per dimension; GPUs dominate, CPU then memory break ties.
    let permille = |left: u64, cap: u64| (left * 1000).checked_div(cap).unwrap_or(0) as i64;
    let tightness = i64::from(left.gpus) * 1_000_000
        + permille(left.cpu_millis, candidate.capacity.cpu_millis) * 1_000
        + permille(left.memory_mib, candidate.capacity.memory_mib);
    match policy {
        ScoringPolicy::BestFit => -tightness,
        ScoringPolicy::Spread => tightness,
    }
}

/// Choose nodes for `replicas` replicas of `per_replica`: `(node, replicas on it)` in
/// ascending node order, or `None` when the candidates cannot hold the whole gang.
pub fn choose_nodes(
    candidates: &[Candidate],
    per_replica: Resources,
    replicas: u32,
    policy: ScoringPolicy,
) -> Option<Vec<(NodeId, u32)>> {
    assert!(replicas >= 1, "a gang has at least one replica");
    if replicas == 1 {
        // The common case, without the gang's bookkeeping: the best-scored node that fits.
        let fitting = candidates.iter().filter(|c| per_replica.fits_in(c.available));
        return best_scored(fitting, per_replica, policy).map(|node| vec![(node, 1)]);
    }
    let mut fits: Vec<(Candidate, u32)> =
        candidates.iter().map(|c| (*c, c.replicas_fitting(per_replica))).filter(|(_, k)| *k > 0).collect();
    let total: u64 = fits.iter().map(|(_, k)| u64::from(*k)).sum();
    if total < u64::from(replicas) {
        return None;
    }
    // Step 2: one node holds the whole gang.
    if let Some(best) =
        best_scored(fits.iter().filter(|(_, k)| *k >= replicas).map(|(c, _)| c), per_replica.times(replicas), policy)
    {
        return Some(vec![(best, replicas)]);
    }
    // Step 3: fewest nodes. Most replicas first; ties by score, then node id.
    fits.sort_by(|(a, ka), (b, kb)| {
        kb.cmp(ka)
            .then_with(|| score(policy, b, per_replica.times(*kb)).cmp(&score(policy, a, per_replica.times(*ka))))
            .then_with(|| a.node.cmp(&b.node))
    });
    let mut chosen: Vec<(NodeId, u32)> = Vec::new();
    let mut placed = 0;
    for (c, k) in &fits {
        let remaining = replicas - placed;
        if *k >= remaining {
            // The tail: the best-scored unused node that holds the remainder.
            let used: Vec<NodeId> = chosen.iter().map(|(n, _)| *n).collect();
            let tail = fits.iter().filter(|(c2, k2)| *k2 >= remaining && !used.contains(&c2.node)).map(|(c2, _)| c2);
            let node = best_scored(tail, per_replica.times(remaining), policy).unwrap_or(c.node);
            chosen.push((node, remaining));
            chosen.sort();
            return Some(chosen);
        }
        chosen.push((c.node, *k));
        placed += k;
    }
    unreachable!("total capacity was checked to hold the gang")
}

fn best_scored<'a>(
    candidates: impl Iterator<Item = &'a Candidate>,
    demand: Resources,
    policy: ScoringPolicy,
) -> Option<NodeId> {
    candidates
        .map(|c| (score(policy, c, demand), std::cmp::Reverse(c.node)))
        .max()
        .map(|(_, std::cmp::Reverse(node))| node)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cand(node: u32, gpus: u32, cap: u32) -> Candidate {
        Candidate { node: NodeId(node), available: Resources::gpus(gpus), capacity: Resources::gpus(cap) }
    }

    #[test]
    fn best_fit_takes_the_tightest_node() {
        let c = [cand(1, 8, 8), cand(2, 3, 8), cand(3, 2, 8)];
        assert_eq!(choose_nodes(&c, Resources::gpus(2), 1, ScoringPolicy::BestFit), Some(vec![(NodeId(3), 1)]));
        assert_eq!(choose_nodes(&c, Resources::gpus(2), 1, ScoringPolicy::Spread), Some(vec![(NodeId(1), 1)]));
    }

    #[test]
    fn gang_uses_fewest_nodes_and_best_fit_tail() {
        // 3 replicas of 4: node 1 holds 2, nodes 2 and 3 hold 1 each; the tail goes on the tighter node 3.
        let c = [cand(1, 8, 8), cand(2, 6, 8), cand(3, 4, 8)];
        assert_eq!(
            choose_nodes(&c, Resources::gpus(4), 3, ScoringPolicy::BestFit),
            Some(vec![(NodeId(1), 2), (NodeId(3), 1)])
        );
        assert_eq!(choose_nodes(&c, Resources::gpus(4), 5, ScoringPolicy::BestFit), None);
    }

    #[test]
    fn cpu_limits_replicas_per_node() {
        let c = Candidate {
            node: NodeId(1),
            available: Resources::new(8, 3000, 100),
            capacity: Resources::new(8, 8000, 100),
        };
        assert_eq!(c.replicas_fitting(Resources::new(1, 1000, 0)), 3);
    }
}
