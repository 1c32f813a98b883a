//! The victim searches (`fairway_core::search`: on one node, and over the whole cluster for
//! gangs and jobs over quota) against brute-force references:
//! every set of candidates within the victim bound is tried, and the one that makes room and
//! ranks first by the written rules (2: lowest highest priority, 2b: at that priority, the
//! tenants furthest above their fair share, 3: least GPU-time lost, 4: fewest GPUs beyond
//! need, then fewer victims, 5: the most recently submitted victims) must be the one the
//! core picks.

use fairway_core::search::{
    Exactness, NodeCandidate, SearchRecord, WideCandidate, WideSearch, best_set_on_node, best_wide_set,
};
use fairway_core::{JobId, NodeId, Priority, Resources};
use proptest::prelude::*;

/// The rules as a user reads them, as a sort key over one set.
fn rank(set: &[NodeCandidate], available: Resources, demand: Resources) -> Rank {
    let freed_gpus: u32 = set.iter().map(|c| c.freed.gpus).sum();
    let mut newest: Vec<u64> = set.iter().map(|c| c.id.0).collect();
    newest.sort_unstable_by(|a, b| b.cmp(a));
    let top = set.iter().map(|c| c.priority).max().unwrap_or(Priority::MIN);
    (
        top,
        // Rule 2b: the least share among the victims at the top priority, highest first.
        std::cmp::Reverse(set.iter().filter(|c| c.priority == top).map(|c| c.tenant_share).min().unwrap_or(0)),
        set.iter().map(|c| c.lost_gpu_ms).sum(),
        (available.gpus + freed_gpus).saturating_sub(demand.gpus),
        set.len(),
        // Larger ids first wins: reversed so that the smaller key is the better set.
        newest.into_iter().map(std::cmp::Reverse).collect(),
    )
}

/// Every set of at most `victims_max` candidates, tried one by one: the best that makes
/// room, as indices. A set that makes room is not extended (more victims only rank lower),
/// nor one that cannot make room with every candidate left.
pub fn brute_force(
    available: Resources,
    demand: Resources,
    candidates: &[NodeCandidate],
    victims_max: usize,
) -> Option<Vec<usize>> {
    if demand.fits_in(available) {
        return None;
    }
    let mut rest = vec![Resources::ZERO; candidates.len() + 1];
    for i in (0..candidates.len()).rev() {
        rest[i] = rest[i + 1].plus(candidates[i].freed);
    }
    let mut best = None;
    try_sets(available, demand, candidates, victims_max, &rest, 0, &mut Vec::new(), &mut best);
    best.map(|(_, set)| set)
}

type Rank = (Priority, std::cmp::Reverse<u64>, u64, u32, usize, Vec<std::cmp::Reverse<u64>>);
type Best = Option<(Rank, Vec<usize>)>;

#[allow(clippy::too_many_arguments)]
fn try_sets(
    available: Resources,
    demand: Resources,
    candidates: &[NodeCandidate],
    victims_max: usize,
    rest: &[Resources],
    from: usize,
    set: &mut Vec<usize>,
    best: &mut Best,
) {
    let room = set.iter().fold(available, |r, &i| r.plus(candidates[i].freed));
    if demand.fits_in(room) {
        let chosen: Vec<NodeCandidate> = set.iter().map(|&i| candidates[i]).collect();
        let key = rank(&chosen, available, demand);
        if best.as_ref().is_none_or(|(k, _)| key < *k) {
            *best = Some((key, set.clone()));
        }
        return;
    }
    if set.len() == victims_max || !demand.fits_in(room.plus(rest[from])) {
        return;
    }
    for i in from..candidates.len() {
        set.push(i);
        try_sets(available, demand, candidates, victims_max, rest, i + 1, set, best);
        set.pop();
    }
}

/// The whole one-replica search of the scheduler, by brute force: the best set on every
/// node, then the best node (rules 2 to 5, then the lowest node id).
pub fn brute_force_record(record: &SearchRecord) -> Option<(NodeId, Vec<JobId>)> {
    let mut best: Option<(_, NodeId, Vec<JobId>)> = None;
    for (node, available, candidates) in &record.nodes {
        let Some(set) = brute_force(*available, record.demand, candidates, record.victims_max) else { continue };
        let chosen: Vec<NodeCandidate> = set.iter().map(|&i| candidates[i]).collect();
        let key = (rank(&chosen, *available, record.demand), *node);
        if best.as_ref().is_none_or(|(k, _, _)| key < *k) {
            let mut ids: Vec<JobId> = chosen.iter().map(|c| c.id).collect();
            ids.sort_unstable();
            best = Some((key, *node, ids));
        }
    }
    best.map(|(_, node, ids)| (node, ids))
}

/// A gang's or a quota-bound job's search, by brute force: every set of at most
/// `victims_max` candidates; a set makes room when, with its victims gone, the usable nodes
/// hold every replica (each node as many as fit in what it would have free) and each of the
/// job's capped accounts gets back what it needs (where a need caps what each group gives
/// back, a cohort from each member, the group's victims count up to that cap). Ranked by
/// the rules as written, rule 4
/// counting the GPUs left free on all usable nodes. The best set, as ascending indices.
pub fn brute_force_wide(search: &WideSearch) -> Option<Vec<usize>> {
    let makes_room = |set: &[usize]| {
        let mut room = search.available.clone();
        let mut quota = vec![Resources::ZERO; search.quota_needs.len()];
        for &i in set {
            let c = &search.candidates[i];
            for &(node, r) in &c.frees {
                room[node] = room[node].plus(r);
            }
        }
        for (k, q) in quota.iter_mut().enumerate() {
            let caps = search.quota_caps.get(k).filter(|caps| !caps.is_empty());
            let groups = caps.map_or(1, Vec::len);
            for g in 0..groups {
                let of_group = set.iter().map(|&i| &search.candidates[i]).filter(|c| caps.is_none() || c.group == g);
                let sum = of_group.fold(Resources::ZERO, |t, c| t.plus(c.quota_frees[k]));
                *q = q.plus(caps.map_or(sum, |caps| sum.min_each(caps[g])));
            }
        }
        let per = search.per_replica;
        let fit = |have: u64, need: u64| have.checked_div(need).unwrap_or(u64::MAX);
        let hosted: u64 = room
            .iter()
            .map(|r| {
                fit(u64::from(r.gpus), u64::from(per.gpus))
                    .min(fit(r.cpu_millis, per.cpu_millis))
                    .min(fit(r.memory_mib, per.memory_mib))
                    .min(u64::from(search.replicas))
            })
            .sum();
        hosted >= u64::from(search.replicas) && search.quota_needs.iter().zip(&quota).all(|(n, q)| n.fits_in(*q))
    };
    if makes_room(&[]) {
        return None;
    }
    let free_gpus: u64 = search.available.iter().map(|r| u64::from(r.gpus)).sum();
    let need_gpus = u64::from(search.per_replica.gpus) * u64::from(search.replicas);
    let rank = |set: &[usize]| {
        let chosen: Vec<&WideCandidate> = set.iter().map(|&i| &search.candidates[i]).collect();
        let freed: u64 = chosen.iter().flat_map(|c| c.frees.iter()).map(|(_, r)| u64::from(r.gpus)).sum();
        let mut newest: Vec<u64> = chosen.iter().map(|c| c.id.0).collect();
        newest.sort_unstable_by(|a, b| b.cmp(a));
        let top = chosen.iter().map(|c| c.priority).max().unwrap_or(Priority::MIN);
        (
            top,
            std::cmp::Reverse(chosen.iter().filter(|c| c.priority == top).map(|c| c.tenant_share).min().unwrap_or(0)),
            chosen.iter().map(|c| c.lost_gpu_ms).sum::<u64>(),
            (free_gpus + freed).saturating_sub(need_gpus),
            set.len(),
            newest.into_iter().map(std::cmp::Reverse).collect::<Vec<_>>(),
        )
    };
    let n = search.candidates.len();
    assert!(n <= 20, "the brute force is for small cases ({n} candidates)");
    let mut best: Option<(_, Vec<usize>)> = None;
    for mask in 0u32..(1 << n) {
        if mask.count_ones() as usize > search.victims_max {
            continue;
        }
        let set: Vec<usize> = (0..n).filter(|i| mask & (1 << i) != 0).collect();
        if !makes_room(&set) {
            continue;
        }
        let key = rank(&set);
        if best.as_ref().is_none_or(|(k, _)| key < *k) {
            best = Some((key, set));
        }
    }
    best.map(|(_, set)| set)
}

fn candidate() -> impl Strategy<Value = ((Priority, u32, u64, u64, u64), u64)> {
    let shape = (
        prop::sample::select(vec![0, 5, 10]),
        prop_oneof![1 => Just(0u32), 3 => 1..=2u32, 2 => 3..=4u32],
        prop::sample::select(vec![0u64, 1_000, 4_000]),
        prop::sample::select(vec![0u64, 1_000]),
        // Few distinct values, so that ties between sets are common.
        prop::sample::select(vec![0u64, 60_000, 120_000, 180_000, 240_000]),
    );
    // Tenant shares (rule 2b): half the cases without fair sharing (all 0).
    (shape, prop_oneof![1 => Just(0u64), 1 => 0..3u64])
}

fn case() -> impl Strategy<Value = (Resources, Resources, Vec<NodeCandidate>, usize)> {
    (
        (0..=2u32, prop::sample::select(vec![0u64, 2_000]), prop::sample::select(vec![0u64, 500])),
        (1..=8u32, prop::sample::select(vec![0u64, 2_000, 8_000]), prop::sample::select(vec![0u64, 1_000])),
        prop::collection::vec(candidate(), 0..=12),
        prop_oneof![1 => 1..=4usize, 1 => Just(32usize)],
        any::<u64>(),
    )
        .prop_map(|(avail, want, shapes, victims_max, seed)| {
            // Ids in a shuffled order, so that id order and list order differ.
            let mut ids: Vec<u64> = (0..shapes.len() as u64).map(|i| i * 7 + 3).collect();
            let mut s = seed;
            for i in (1..ids.len()).rev() {
                s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                ids.swap(i, (s >> 33) as usize % (i + 1));
            }
            let candidates = shapes
                .into_iter()
                .zip(ids)
                .map(|(((priority, gpus, cpu, mem, lost), tenant_share), id)| NodeCandidate {
                    id: JobId(id),
                    priority,
                    lost_gpu_ms: lost * u64::from(gpus.max(1)),
                    freed: Resources::new(gpus, cpu, mem),
                    tenant_share,
                })
                .collect();
            (Resources::new(avail.0, avail.1, avail.2), Resources::new(want.0, want.1, want.2), candidates, victims_max)
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 20_000, ..ProptestConfig::default() })]

    #[test]
    fn the_node_search_finds_the_set_the_rules_rank_first((available, demand, candidates, victims_max) in case()) {
        let found = best_set_on_node(available, demand, &candidates, victims_max);
        let reference = brute_force(available, demand, &candidates, victims_max);
        prop_assert_eq!(found.as_ref().map(|s| s.victims.clone()), reference, "{:?}", found);
        if let Some(found) = found {
            prop_assert_eq!(found.exactness, Exactness::Exact);
        }
    }
}

/// The reproduction, by hand: the greedy prefix took A and B (18 GPU-min); C alone
/// loses 16 GPU-min and is one victim.
#[test]
fn c_alone_beats_a_and_b() {
    let v = |id: u64, gpus: u32, lost_gpu_min: u64| NodeCandidate {
        id: JobId(id),
        priority: 10,
        lost_gpu_ms: lost_gpu_min * 60_000,
        freed: Resources::gpus(gpus),
        tenant_share: 0,
    };
    let candidates = [v(1, 3, 3), v(2, 1, 15), v(3, 4, 16)];
    assert_eq!(brute_force(Resources::ZERO, Resources::gpus(4), &candidates, 32), Some(vec![2]));
    assert_eq!(best_set_on_node(Resources::ZERO, Resources::gpus(4), &candidates, 32).unwrap().victims, [2]);
}

/// A search over up to three nodes: candidates that free room on one or two of them (a
/// gang victim), and, half the time, a quota need that only some candidates give back to.
fn wide_case() -> impl Strategy<Value = WideSearch> {
    let node = (0..=4u32, prop::sample::select(vec![0u64, 2_000, 8_000]));
    let candidate = (
        prop::sample::select(vec![0, 5, 10]),
        prop::sample::select(vec![0u64, 60_000, 120_000, 240_000]),
        prop::collection::vec((0..3usize, 0..=4u32, prop::sample::select(vec![0u64, 2_000])), 1..=2),
        any::<bool>(),
        prop_oneof![1 => Just(0u64), 1 => 0..3u64],
        0..2usize,
    );
    (
        prop::collection::vec(node, 1..=3),
        (1..=4u32, prop::sample::select(vec![0u64, 2_000])),
        1..=3u32,
        prop::collection::vec(candidate, 0..=10),
        prop_oneof![1 => Just(None), 1 => (0..=6u32).prop_map(Some)],
        prop_oneof![1 => 1..=3usize, 1 => Just(32usize)],
        prop_oneof![1 => Just(None), 1 => (0..=4u32, 0..=4u32).prop_map(Some)],
    )
        .prop_map(|(nodes, (gpus, cpu), replicas, shapes, quota_gpus, victims_max, group_caps)| {
            let candidates = shapes
                .into_iter()
                .enumerate()
                .map(|(i, (priority, lost, frees, charged, tenant_share, group))| {
                    let mut per_node: Vec<(usize, Resources)> = Vec::new();
                    for (n, g, c) in frees {
                        let n = n % nodes.len();
                        match per_node.iter_mut().find(|(m, _)| *m == n) {
                            Some((_, r)) => *r = r.plus(Resources::new(g, c, 0)),
                            None => per_node.push((n, Resources::new(g, c, 0))),
                        }
                    }
                    per_node.sort_by_key(|(n, _)| *n);
                    let total = per_node.iter().fold(Resources::ZERO, |t, (_, r)| t.plus(*r));
                    WideCandidate {
                        // Ids in another order than the list's.
                        id: JobId((i as u64 * 7 + 3) % 11),
                        priority,
                        lost_gpu_ms: lost * u64::from(total.gpus.max(1)),
                        frees: per_node,
                        quota_frees: quota_gpus
                            .map(|_| if charged { total } else { Resources::ZERO })
                            .into_iter()
                            .collect(),
                        tenant_share,
                        group,
                    }
                })
                .collect();
            WideSearch {
                available: nodes.into_iter().map(|(g, c)| Resources::new(g, c, 0)).collect(),
                per_replica: Resources::new(gpus, cpu, 0),
                replicas,
                quota_needs: quota_gpus.map(Resources::gpus).into_iter().collect(),
                // A need that counts each group's victims only up to a cap, as a cohort's.
                quota_caps: quota_gpus
                    .map(|_| group_caps.map_or(Vec::new(), |(a, b)| vec![Resources::gpus(a), Resources::gpus(b)]))
                    .into_iter()
                    .collect(),
                candidates,
                victims_max,
            }
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 5_000, ..ProptestConfig::default() })]

    #[test]
    fn the_wide_search_finds_the_set_the_rules_rank_first(search in wide_case()) {
        let (found, exactness) = best_wide_set(&search);
        prop_assert_eq!(exactness, Exactness::Exact);
        prop_assert_eq!(found, brute_force_wide(&search));
    }
}

/// A gang's victim that spans two nodes frees room on both but loses its work once: here
/// it (10 GPU-min over 2 + 2 GPUs) beats a one-node victim on each node (8 + 8).
#[test]
fn a_victim_on_two_nodes_counts_its_loss_once() {
    let victim = |id: u64, lost_gpu_min: u64, frees: Vec<(usize, Resources)>| WideCandidate {
        id: JobId(id),
        priority: 10,
        lost_gpu_ms: lost_gpu_min * 60_000,
        frees,
        quota_frees: Vec::new(),
        tenant_share: 0,
        group: 0,
    };
    let search = WideSearch {
        available: vec![Resources::ZERO, Resources::ZERO],
        per_replica: Resources::gpus(2),
        replicas: 2,
        quota_needs: Vec::new(),
        quota_caps: Vec::new(),
        candidates: vec![
            victim(1, 8, vec![(0, Resources::gpus(2))]),
            victim(2, 8, vec![(1, Resources::gpus(2))]),
            victim(3, 10, vec![(0, Resources::gpus(2)), (1, Resources::gpus(2))]),
        ],
        victims_max: 32,
    };
    assert_eq!(brute_force_wide(&search), Some(vec![2]));
    assert_eq!(best_wide_set(&search), (Some(vec![2]), Exactness::Exact));
}
