//! The victim searches (`fairway_core::search`: on one node, and over the whole cluster for
//! gangs and jobs over quota) against brute-force references:
//! every set of candidates within the victim bound is tried, and the one that makes room and
//! ranks first by the written rules (2: lowest highest priority, 2b: at that priority, the
//! tenants furthest above their fair share, 3: least GPU-time lost, 4: fewest GPUs beyond
//! need, then fewer victims, 5: the most recently submitted victims) must be the one the
//! core picks.

use fairway_core::search::{
    Exactness, NodeCandidate, SearchRecord, SearchRoom, WideCandidate, WideSearch, best_set_on_node,
    best_set_on_node_in, best_wide_set,
};
use fairway_core::{GpuSet, JobId, Limits, NodeId, Priority, Resources};
use proptest::prelude::*;

/// What a node has free once `set` is gone, as the rules count it: CPU and memory summed;
/// GPUs whole, or (when the room is counted GPU by GPU) each GPU's free thousandths, a
/// victim adding its share (or 1000) to each of its GPUs that is not held.
fn room_after(room: &SearchRoom, set: &[NodeCandidate]) -> (Resources, Option<Vec<u32>>) {
    let free = set.iter().fold(room.free, |r, c| r.plus(c.freed));
    if room.slot_free.is_empty() {
        return (free, None);
    }
    let mut slots: Vec<u32> = room.slot_free.iter().map(|&f| u32::from(f)).collect();
    for c in set {
        for s in c.slots.iter().filter(|&s| !room.held.contains(s)) {
            slots[s as usize] += if c.share_milli > 0 { c.share_milli } else { 1000 };
        }
    }
    (free, Some(slots))
}

/// Does one replica of `demand` fit: a share on one GPU with that many thousandths free,
/// whole GPUs on GPUs wholly free.
fn fits(after: &(Resources, Option<Vec<u32>>), demand: Resources) -> bool {
    let (free, slots) = after;
    if demand.cpu_millis > free.cpu_millis || demand.memory_mib > free.memory_mib {
        return false;
    }
    match slots {
        None => !demand.is_share() && demand.gpus <= free.gpus,
        Some(slots) if demand.is_share() => slots.iter().any(|&f| f >= demand.gpu_milli),
        Some(slots) => slots.iter().filter(|&&f| f >= 1000).count() as u32 >= demand.gpus,
    }
}

/// The rules as a user reads them, as a sort key over one set.
fn rank(set: &[NodeCandidate], room: &SearchRoom, demand: Resources) -> Rank {
    let (free, slots) = room_after(room, set);
    let free_milli: u64 = match slots {
        None => u64::from(free.gpus) * 1000,
        Some(slots) => slots.iter().map(|&f| u64::from(f)).sum(),
    };
    let demand_milli = u64::from(demand.gpus) * 1000 + u64::from(demand.gpu_milli);
    let mut newest: Vec<u64> = set.iter().map(|c| c.id.0).collect();
    newest.sort_unstable_by(|a, b| b.cmp(a));
    let top = set.iter().map(|c| c.priority).max().unwrap_or(Priority::MIN);
    (
        top,
        // Rule 2b: the least share among the victims at the top priority, highest first.
        std::cmp::Reverse(set.iter().filter(|c| c.priority == top).map(|c| c.tenant_share).min().unwrap_or(0)),
        set.iter().map(|c| c.lost_gpu_ms).sum(),
        // Rule 4: thousandths of GPUs left free beyond need.
        free_milli.saturating_sub(demand_milli),
        set.len(),
        // Larger ids first wins: reversed so that the smaller key is the better set.
        newest.into_iter().map(std::cmp::Reverse).collect(),
    )
}

/// Every set of at most `victims_max` candidates, tried one by one: the best that makes
/// room, as indices. A set that makes room is not extended (more victims only rank lower),
/// nor one that cannot make room with every candidate left.
pub fn brute_force(
    room: &SearchRoom,
    demand: Resources,
    candidates: &[NodeCandidate],
    victims_max: usize,
) -> Option<Vec<usize>> {
    if fits(&room_after(room, &[]), demand) {
        return None;
    }
    let mut best = None;
    try_sets(room, demand, candidates, victims_max, 0, &mut Vec::new(), &mut best);
    best.map(|(_, set)| set)
}

type Rank = (Priority, std::cmp::Reverse<u64>, u64, u64, usize, Vec<std::cmp::Reverse<u64>>);
type Best = Option<(Rank, Vec<usize>)>;

fn try_sets(
    room: &SearchRoom,
    demand: Resources,
    candidates: &[NodeCandidate],
    victims_max: usize,
    from: usize,
    set: &mut Vec<usize>,
    best: &mut Best,
) {
    let chosen: Vec<NodeCandidate> = set.iter().map(|&i| candidates[i]).collect();
    if fits(&room_after(room, &chosen), demand) {
        let key = rank(&chosen, room, demand);
        if best.as_ref().is_none_or(|(k, _)| key < *k) {
            *best = Some((key, set.clone()));
        }
        return;
    }
    let all: Vec<NodeCandidate> = chosen.iter().copied().chain(candidates[from..].iter().copied()).collect();
    if set.len() == victims_max || !fits(&room_after(room, &all), demand) {
        return;
    }
    for i in from..candidates.len() {
        set.push(i);
        try_sets(room, demand, candidates, victims_max, i + 1, set, best);
        set.pop();
    }
}

/// The whole one-replica search of the scheduler, by brute force: the best set on every
/// node, then the best node (rules 2 to 5, then the lowest node id).
pub fn brute_force_record(record: &SearchRecord) -> Option<(NodeId, Vec<JobId>)> {
    let mut best: Option<(_, NodeId, Vec<JobId>)> = None;
    for (node, available, candidates) in &record.nodes {
        let Some(set) = brute_force(available, record.demand, candidates, record.victims_max) else { continue };
        let chosen: Vec<NodeCandidate> = set.iter().map(|&i| candidates[i]).collect();
        let key = (rank(&chosen, available, record.demand), *node);
        if best.as_ref().is_none_or(|(k, _, _)| key < *k) {
            let mut ids: Vec<JobId> = chosen.iter().map(|c| c.id).collect();
            ids.sort_unstable();
            best = Some((key, *node, ids));
        }
    }
    best.map(|(_, node, ids)| (node, ids))
}

/// The nodes once `set` has gone: on a node counted GPU by GPU, each victim adds its
/// share (or 1000) to each of its GPUs there not held for a preemptor.
fn wide_rooms_after(search: &WideSearch, set: &[usize]) -> Vec<SearchRoom> {
    let mut room = search.available.clone();
    for &i in set {
        let c = &search.candidates[i];
        for &(node, r, slots) in &c.frees {
            let room = &mut room[node];
            room.free = room.free.plus(r);
            if !room.slot_free.is_empty() {
                for slot in slots.iter().filter(|s| !room.held.contains(*s)) {
                    room.slot_free[slot as usize] += if c.share_milli > 0 { c.share_milli as u16 } else { 1000 };
                }
            }
        }
    }
    room
}

fn wide_free_milli(room: &SearchRoom) -> u64 {
    if room.slot_free.is_empty() {
        u64::from(room.free.gpus) * 1000
    } else {
        room.slot_free.iter().map(|&f| u64::from(f)).sum()
    }
}

/// Does the going of `set` let every replica fit on the usable nodes and meet every quota
/// need, as the rules count it?
pub fn wide_set_makes_room(search: &WideSearch, set: &[usize]) -> bool {
    let room = wide_rooms_after(search, set);
    let mut quota = vec![Resources::ZERO; search.quota_needs.len()];
    for (k, q) in quota.iter_mut().enumerate() {
        let caps = search.quota_caps.get(k).filter(|caps| !caps.is_empty());
        let groups = caps.map_or(1, Vec::len);
        for g in 0..groups {
            let of_group = set.iter().map(|&i| &search.candidates[i]).filter(|c| caps.is_none() || c.group == g);
            let sum = of_group.fold(Resources::ZERO, |t, c| t.plus(c.quota_frees[k]));
            *q = q.plus(caps.map_or(sum, |caps| sum.min_by_amount(caps[g])));
        }
    }
    let per = search.per_replica;
    let fit = |have: u64, need: u64| have.checked_div(need).unwrap_or(u64::MAX);
    let hosted: u64 = room
        .iter()
        .map(|r| {
            let (cpu, memory) = (fit(r.free.cpu_millis, per.cpu_millis), fit(r.free.memory_mib, per.memory_mib));
            let gpus = if per.gpu_milli > 0 {
                // A share: one replica, on a GPU with at least its thousandths free.
                let on_one_gpu = r.slot_free.iter().any(|&f| u32::from(f) >= per.gpu_milli);
                if on_one_gpu { 1 } else { 0 }
            } else {
                let whole = if r.slot_free.is_empty() {
                    u64::from(r.free.gpus)
                } else {
                    r.slot_free.iter().filter(|&&f| f >= 1000).count() as u64
                };
                fit(whole, u64::from(per.gpus))
            };
            gpus.min(cpu).min(memory).min(u64::from(search.replicas))
        })
        .sum();
    hosted >= u64::from(search.replicas) && search.quota_needs.iter().zip(&quota).all(|(n, q)| n.within_by_amount(*q))
}

/// A gang's or a quota-bound job's search, by brute force: every set of at most
/// `victims_max` candidates; a set makes room when, with its victims gone, the usable nodes
/// hold every replica (each node as many as fit in what it would have free) and each of the
/// job's capped accounts gets back what it needs (where a need caps what each group gives
/// back, a cohort from each member, the group's victims count up to that cap). Ranked by
/// the rules as written, rule 4
/// counting the GPUs left free on all usable nodes. The best set, as ascending indices.
pub fn brute_force_wide(search: &WideSearch) -> Option<Vec<usize>> {
    let makes_room = |set: &[usize]| wide_set_makes_room(search, set);
    let rooms_after = |set: &[usize]| wide_rooms_after(search, set);
    let free_milli = wide_free_milli;
    if makes_room(&[]) {
        return None;
    }
    let need_milli = (u64::from(search.per_replica.gpus) * 1000 + u64::from(search.per_replica.gpu_milli))
        * u64::from(search.replicas);
    let rank = |set: &[usize]| {
        let chosen: Vec<&WideCandidate> = set.iter().map(|&i| &search.candidates[i]).collect();
        let free_after: u64 = rooms_after(set).iter().map(free_milli).sum();
        let mut newest: Vec<u64> = chosen.iter().map(|c| c.id.0).collect();
        newest.sort_unstable_by(|a, b| b.cmp(a));
        let top = chosen.iter().map(|c| c.priority).max().unwrap_or(Priority::MIN);
        (
            top,
            std::cmp::Reverse(chosen.iter().filter(|c| c.priority == top).map(|c| c.tenant_share).min().unwrap_or(0)),
            chosen.iter().map(|c| c.lost_gpu_ms).sum::<u64>(),
            free_after.saturating_sub(need_milli),
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
                    slots: GpuSet::EMPTY,
                    share_milli: 0,
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
        let reference = brute_force(&SearchRoom::whole(available), demand, &candidates, victims_max);
        prop_assert_eq!(found.as_ref().map(|s| s.victims.clone()), reference, "{:?}", found);
        if let Some(found) = found {
            prop_assert_eq!(found.exactness, Exactness::Exact);
        }
    }
}

/// One GPU of a node as generated: free, held for a preemptor, taken whole by one job (a
/// victim candidate or not; over this GPU and the next one too with `span` 2), or shared by
/// jobs of shares in hundreds of thousandths (each a candidate or not), cut where the
/// shares would pass 1000. A held GPU may carry shares too.
#[derive(Clone, Debug)]
enum SlotShape {
    Free,
    Held(Vec<(u32, bool)>),
    Whole { candidate: bool, span: u32 },
    Shared(Vec<(u32, bool)>),
}

fn slot_shape() -> impl Strategy<Value = SlotShape> {
    let sharers = prop::collection::vec((1..=6u32, prop::bool::weighted(0.8)), 1..=3);
    prop_oneof![
        2 => Just(SlotShape::Free),
        1 => prop::collection::vec((1..=6u32, prop::bool::weighted(0.8)), 0..=2).prop_map(SlotShape::Held),
        2 => (prop::bool::weighted(0.8), 1..=2u32).prop_map(|(candidate, span)| SlotShape::Whole { candidate, span }),
        4 => sharers.prop_map(SlotShape::Shared),
    ]
}

/// A node whose GPUs are counted one by one, its candidates and a demand (a share or whole
/// GPUs, maybe CPU too).
fn slot_case() -> impl Strategy<Value = (SearchRoom, Resources, Vec<NodeCandidate>, usize)> {
    (
        prop::collection::vec(slot_shape(), 1..=4),
        prop::collection::vec(candidate(), 12),
        prop_oneof![2 => prop::sample::select(vec![100u32, 300, 500, 800, 999]).prop_map(|m| (0u32, m)), 1 => (1..=3u32).prop_map(|g| (g, 0u32))],
        prop::sample::select(vec![0u64, 2_000]),
        prop::sample::select(vec![0u64, 2_000]),
        prop_oneof![1 => 1..=3usize, 1 => Just(32usize)],
    )
        .prop_map(|(slots, attributes, (gpus, share), cpu_free, cpu_wanted, victims_max)| {
            let mut slot_free = vec![1000u16; slots.len()];
            let mut held = GpuSet::EMPTY;
            let mut candidates = Vec::new();
            let mut attributes = attributes.into_iter();
            let mut add = |slots: GpuSet, share_milli: u32, candidates: &mut Vec<NodeCandidate>| {
                let ((priority, _, cpu, _, lost), tenant_share) = attributes.next().unwrap_or(((0, 0, 0, 0, 0), 0));
                let id = JobId(candidates.len() as u64 * 5 + 2);
                let whole = if share_milli > 0 { 0 } else { slots.len() };
                candidates.push(NodeCandidate {
                    id,
                    priority,
                    lost_gpu_ms: lost,
                    freed: Resources::new(whole, cpu, 0),
                    tenant_share,
                    slots,
                    share_milli,
                });
            };
            let mut skip = 0;
            for (s, shape) in slots.iter().enumerate() {
                let one = GpuSet::from_bits(1 << s);
                if skip > 0 {
                    skip -= 1;
                    continue;
                }
                match shape {
                    SlotShape::Free => {}
                    SlotShape::Whole { candidate, span } => {
                        let span = (*span as usize).min(slots.len() - s);
                        let mut set = GpuSet::EMPTY;
                        for (t, free) in slot_free.iter_mut().enumerate().skip(s).take(span) {
                            *free = 0;
                            set = set.union(GpuSet::from_bits(1 << t));
                        }
                        skip = span - 1;
                        if *candidate {
                            add(set, 0, &mut candidates);
                        }
                    }
                    SlotShape::Held(sharers) | SlotShape::Shared(sharers) => {
                        let mut used = 0;
                        for &(hundreds, candidate) in sharers {
                            if used + hundreds * 100 > 1000 {
                                break;
                            }
                            used += hundreds * 100;
                            if candidate {
                                add(one, hundreds * 100, &mut candidates);
                            }
                        }
                        slot_free[s] = (1000 - used) as u16;
                        if matches!(shape, SlotShape::Held(_)) {
                            held = held.union(one);
                            slot_free[s] = 0;
                        }
                    }
                }
            }
            let whole_free = slot_free.iter().filter(|&&f| f == 1000).count() as u32;
            let room = SearchRoom { free: Resources::new(whole_free, cpu_free, 0), slot_free, held };
            let demand = Resources { gpu_milli: share, ..Resources::new(gpus, cpu_wanted, 0) };
            (room, demand, candidates, victims_max)
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 20_000, ..ProptestConfig::default() })]

    /// Shared GPUs: a whole GPU comes free only when every job on it goes, a share needs one
    /// GPU with room enough once its victims go.
    #[test]
    fn the_node_search_counts_shared_gpus_one_by_one((room, demand, candidates, victims_max) in slot_case()) {
        let found = best_set_on_node_in(&room, demand, &candidates, victims_max);
        let reference = brute_force(&room, demand, &candidates, victims_max);
        prop_assert_eq!(found.as_ref().map(|s| s.victims.clone()), reference, "{:?}", found);
        if let Some(found) = found {
            prop_assert_eq!(found.exactness, Exactness::Exact);
        }
    }
}

/// Freeing 300 thousandths of a GPU a 500 share needs is not enough: of two shares of 300
/// on a full GPU (with 400 more held by a job that stays), one is not enough, two are.
#[test]
fn a_share_needs_enough_thousandths_on_one_gpu() {
    let share = |id: u64, lost: u64| NodeCandidate {
        id: JobId(id),
        priority: 0,
        lost_gpu_ms: lost,
        freed: Resources::ZERO,
        tenant_share: 0,
        slots: GpuSet::from_bits(1),
        share_milli: 300,
    };
    let room = SearchRoom { free: Resources::ZERO, slot_free: vec![0], held: GpuSet::EMPTY };
    let set = best_set_on_node_in(&room, Resources::share(500, 0, 0), &[share(1, 10), share(2, 20)], 32).unwrap();
    assert_eq!(set.victims, [0, 1]);
    // A 300 share fits once the cheaper one goes.
    let set = best_set_on_node_in(&room, Resources::share(300, 0, 0), &[share(1, 10), share(2, 20)], 32).unwrap();
    assert_eq!(set.victims, [0]);
    // A whole GPU: the job that stays keeps it taken.
    assert_eq!(best_set_on_node_in(&room, Resources::gpus(1), &[share(1, 10), share(2, 20)], 32), None);
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
        slots: GpuSet::EMPTY,
        share_milli: 0,
    };
    let candidates = [v(1, 3, 3), v(2, 1, 15), v(3, 4, 16)];
    assert_eq!(brute_force(&SearchRoom::whole(Resources::ZERO), Resources::gpus(4), &candidates, 32), Some(vec![2]));
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
                    let mut per_node: Vec<(usize, Resources, GpuSet)> = Vec::new();
                    for (n, g, c) in frees {
                        let n = n % nodes.len();
                        match per_node.iter_mut().find(|(m, _, _)| *m == n) {
                            Some((_, r, _)) => *r = r.plus(Resources::new(g, c, 0)),
                            None => per_node.push((n, Resources::new(g, c, 0), GpuSet::EMPTY)),
                        }
                    }
                    per_node.sort_by_key(|(n, _, _)| *n);
                    let total = per_node.iter().fold(Resources::ZERO, |t, (_, r, _)| t.plus(*r));
                    WideCandidate {
                        // Ids in another order than the list's.
                        id: JobId((i as u64 * 7 + 3) % 11),
                        priority,
                        lost_gpu_ms: lost * u64::from(total.gpus.max(1)),
                        frees: per_node.into(),
                        share_milli: 0,
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
                available: nodes.into_iter().map(|(g, c)| SearchRoom::whole(Resources::new(g, c, 0))).collect(),
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
                steps_max: Limits::default().wide_search_steps_max,
            }
        })
}

/// A search over up to three nodes where GPUs are shared: some nodes are counted GPU by GPU
/// (each GPU free, taken, held for a preemptor, or shared with 300 or 500 thousandths
/// left), victims are shares of one GPU or take whole GPUs, and the job asks for whole GPUs
/// (a gang) or a share; half the time a quota need, as in `wide_case`.
fn wide_case_with_shares() -> impl Strategy<Value = WideSearch> {
    let node = (
        prop::option::of(prop::collection::vec(prop::sample::select(vec![0u16, 300, 500, 1000]), 1..=4)),
        0..=3u32,
        0..16u32,
        prop::sample::select(vec![0u64, 2_000, 8_000]),
    );
    let candidate = (
        prop::sample::select(vec![0, 5, 10]),
        prop::sample::select(vec![60_000u64, 120_000, 240_000]),
        (0..3usize, 0..16u32, prop::sample::select(vec![0u64, 2_000])),
        prop_oneof![1 => Just(0u32), 1 => prop::sample::select(vec![200u32, 500, 700])],
        any::<bool>(),
    );
    (
        prop::collection::vec(node, 1..=3),
        prop_oneof![1 => (1..=3u32).prop_map(|g| (g, 0u32)), 1 => prop::sample::select(vec![300u32, 600]).prop_map(|m| (0, m))],
        prop::sample::select(vec![0u64, 2_000]),
        1..=3u32,
        prop::collection::vec(candidate, 0..=9),
        prop_oneof![1 => Just(None), 1 => (0..=4u32).prop_map(Some)],
        prop_oneof![1 => 1..=3usize, 1 => Just(32usize)],
    )
        .prop_map(|(nodes, (gpus, milli), cpu, replicas, shapes, quota_milli, victims_max)| {
            let rooms: Vec<SearchRoom> = nodes
                .into_iter()
                .map(|(slots, whole, held_bits, node_cpu)| match slots {
                    None => SearchRoom::whole(Resources::new(whole, node_cpu, 0)),
                    Some(mut slot_free) => {
                        let held = GpuSet::from_bits(u64::from(held_bits) & ((1 << slot_free.len()) - 1));
                        for slot in held.iter() {
                            slot_free[slot as usize] = 0;
                        }
                        let free_gpus = slot_free.iter().filter(|&&f| f == 1000).count() as u32;
                        SearchRoom { free: Resources::new(free_gpus, node_cpu, 0), slot_free, held }
                    }
                })
                .collect();
            let candidates = shapes
                .into_iter()
                .enumerate()
                .map(|(i, (priority, lost, (n, bits, c), share_milli, charged))| {
                    let n = n % rooms.len();
                    let width = if rooms[n].slot_free.is_empty() { 4 } else { rooms[n].slot_free.len() };
                    let mut slots = GpuSet::from_bits(u64::from(bits) & ((1 << width) - 1));
                    if share_milli > 0 {
                        // A share sits on one GPU.
                        slots = slots.lowest(1);
                    }
                    let gpus = if share_milli > 0 { 0 } else { slots.len().max(1) };
                    let freed = Resources::new(gpus, c, 0);
                    let total = Resources { gpu_milli: share_milli, ..freed };
                    WideCandidate {
                        id: JobId((i as u64 * 7 + 3) % 11),
                        priority,
                        lost_gpu_ms: lost,
                        frees: [(n, freed, slots)].into_iter().collect(),
                        share_milli,
                        quota_frees: quota_milli.map(|_| if charged { total } else { Resources::ZERO }).into_iter().collect(),
                        tenant_share: 0,
                        group: 0,
                    }
                })
                .collect();
            let per_replica = Resources { gpu_milli: milli, ..Resources::new(gpus, cpu, 0) };
            WideSearch {
                available: rooms,
                per_replica,
                replicas: if milli > 0 { 1 } else { replicas },
                // A need in thousandths of a GPU, so that shares give back part of it.
                quota_needs: quota_milli.map(|m| Resources { gpu_milli: m * 250, ..Resources::ZERO }).into_iter().collect(),
                quota_caps: quota_milli.map(|_| Vec::new()).into_iter().collect(),
                candidates,
                victims_max,
                steps_max: Limits::default().wide_search_steps_max,
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

    #[test]
    fn the_wide_search_counts_shared_gpus_one_by_one(search in wide_case_with_shares()) {
        let (found, exactness) = best_wide_set(&search);
        prop_assert_eq!(exactness, Exactness::Exact);
        prop_assert_eq!(found, brute_force_wide(&search));
    }

    /// Out of steps, the search still returns a set whenever it found one before the bound,
    /// and that set makes room within the victim bound; within the steps it is exact.
    #[test]
    fn a_search_out_of_steps_returns_a_set_that_makes_room(
        search in prop_oneof![wide_case(), wide_case_with_shares()],
        steps_max in 0..12u32,
    ) {
        let search = WideSearch { steps_max, ..search };
        let (found, exactness) = best_wide_set(&search);
        match exactness {
            Exactness::Exact => prop_assert_eq!(found, brute_force_wide(&search)),
            Exactness::StepsExhausted => {
                if let Some(set) = found {
                    prop_assert!(set.len() <= search.victims_max, "{set:?} is over the victim bound");
                    prop_assert!(set.windows(2).all(|w| w[0] < w[1]), "{set:?} is not ascending");
                    prop_assert!(wide_set_makes_room(&search, &set), "{set:?} does not make room");
                }
            }
        }
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
        frees: frees.into_iter().map(|(n, r)| (n, r, GpuSet::EMPTY)).collect(),
        share_milli: 0,
        quota_frees: Default::default(),
        tenant_share: 0,
        group: 0,
    };
    let search = WideSearch {
        available: vec![SearchRoom::whole(Resources::ZERO), SearchRoom::whole(Resources::ZERO)],
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
        steps_max: Limits::default().wide_search_steps_max,
    };
    assert_eq!(brute_force_wide(&search), Some(vec![2]));
    assert_eq!(best_wide_set(&search), (Some(vec![2]), Exactness::Exact));
}
