use super::policy::{self, FragOf, KindCounts, NodeView};
use super::*;

fn ask(cpu_milli: u64, gpu_count: u8, gpu_milli: u16) -> Ask {
    Ask::new(cpu_milli, 0, gpu_count.into(), gpu_milli.into(), ModelSet::ANY).unwrap()
}

fn node(cpu_milli: u64, gpus: usize) -> NodeRoom {
    NodeRoom::new(cpu_milli, 1 << 20, gpus, Some(GpuModel(0))).unwrap()
}

/// A node with these GPUs already taken in part: `used[i]` thousandths of GPU `i`.
fn node_used(cpu_milli: u64, used: &[u16]) -> NodeRoom {
    let mut n = node(cpu_milli, used.len());
    for (i, &u) in used.iter().enumerate() {
        let pick = if u == MILLI_PER_GPU { GpuPick::Whole(1 << i) } else { GpuPick::Share(i as u8) };
        if u > 0 {
            n.take(&ask(0, 1, u), pick).unwrap();
        }
    }
    n
}

#[test]
fn asks_are_checked_field_by_field() {
    assert_eq!(Ask::new(0, 0, 1, 1001, ModelSet::ANY), Err(ShapeError::MilliAboveWhole(1001)));
    assert_eq!(Ask::new(0, 0, 1, 0, ModelSet::ANY), Err(ShapeError::MilliMissing(1)));
    assert_eq!(Ask::new(0, 0, 0, 5, ModelSet::ANY), Err(ShapeError::MilliWithoutGpus(5)));
    assert_eq!(Ask::new(0, 0, 2, 500, ModelSet::ANY), Err(ShapeError::SharedMultiGpu { count: 2, milli: 500 }));
    assert_eq!(Ask::new(0, 0, 17, 1000, ModelSet::ANY), Err(ShapeError::TooManyGpus(17)));
    assert_eq!(Ask::new(0, 0, 1, 70_000, ModelSet::ANY), Err(ShapeError::MilliAboveWhole(70_000)), "checked, not cut");
    assert_eq!(Ask::new(0, 0, 257, 1000, ModelSet::ANY), Err(ShapeError::TooManyGpus(257)));
    let e = Ask::new(0, 0, 2, 500, ModelSet::ANY).unwrap_err().to_string();
    assert!(e.starts_with("gpu_milli:"), "{e}");
    assert!(Ask::new(0, 0, 8, 1000, ModelSet::ANY).is_ok());
    assert!(NodeRoom::new(1, 1, 17, None).is_err());
}

#[test]
fn shares_on_one_gpu_never_exceed_a_whole_and_refusals_change_nothing() {
    let mut n = node(64_000, 2);
    n.take(&ask(1000, 1, 600), GpuPick::Share(0)).unwrap();
    n.take(&ask(1000, 1, 400), GpuPick::Share(0)).unwrap();
    assert_eq!(n.gpu_free(), [0, 1000]);
    let before = n.clone();
    assert_eq!(n.take(&ask(0, 1, 1), GpuPick::Share(0)), Err(RoomError::Gpu { device: 0, free: 0, asked: 1 }));
    // A whole GPU is never shared: two whole GPUs need two wholly free ones.
    assert!(!n.fits(&ask(0, 2, 1000)));
    assert!(n.take(&ask(0, 2, 1000), GpuPick::Whole(0b11)).is_err());
    assert!(n.take(&ask(0, 1, 1000), GpuPick::Share(1)).is_err(), "a whole GPU is not a share");
    assert!(n.take(&ask(0, 1, 300), GpuPick::Share(5)).is_err(), "beyond the node's GPUs");
    assert!(n.take(&ask(70_000, 0, 0), GpuPick::None).is_err(), "CPU is never overcommitted");
    assert_eq!(n, before);
    n.give_back(&ask(1000, 1, 600), GpuPick::Share(0)).unwrap();
    assert_eq!(n.gpu_free(), [600, 1000]);
    assert!(n.give_back(&ask(0, 1, 700), GpuPick::Share(1)).is_err(), "more than a whole GPU");
}

#[test]
fn models_restrict_gpu_asks_only() {
    let a100 = NodeRoom::new(8000, 1000, 1, Some(GpuModel(3))).unwrap();
    let only_t4 = Ask::new(0, 0, 1, 500, ModelSet::of([GpuModel(1)]).unwrap()).unwrap();
    let t4_or_a100 = Ask::new(0, 0, 1, 500, ModelSet::of([GpuModel(1), GpuModel(3)]).unwrap()).unwrap();
    assert!(!a100.fits(&only_t4));
    assert!(a100.fits(&t4_or_a100));
    let cpu_only = Ask::new(1000, 0, 0, 0, ModelSet::of([GpuModel(1)]).unwrap()).unwrap();
    assert!(a100.fits(&cpu_only));
    assert!(!ModelSet::of([GpuModel(2)]).unwrap().admits(None), "a CPU-only node has no model");
    assert_eq!(ModelSet::of([GpuModel(64)]), None);
}

/// The fragmentation arithmetic, by hand. Node: GPUs free [1000, 190, 0, 0], 10 cores.
/// Typical asks: one whole GPU and 4 cores (weight 0.5), a 500 share and 2 cores (0.3),
/// CPU only, 1 core (0.2).
/// - whole GPU: fits on GPU 0 → the fragment is the free thousandths too small: 190.
/// - 500 share: fits on GPU 0 → again 190.
/// - CPU only: all 1190 free thousandths are fragment to it.
///   frag = 0.5 × 190 + 0.3 × 190 + 0.2 × 1190 = 95 + 57 + 238 = 390.
///
/// With 3 cores free the whole-GPU ask lacks CPU, so all 1190 count for it:
///   0.5 × 1190 + 57 + 238 = 890.
#[test]
fn fragmentation_is_computed_as_the_paper_defines_it() {
    let model = WorkloadModel::new(vec![
        TypicalShape { cpu_milli: 4000, gpu_count: 1, gpu_milli: 1000, models: ModelSet::ANY, weight: 0.5 },
        TypicalShape { cpu_milli: 2000, gpu_count: 1, gpu_milli: 500, models: ModelSet::ANY, weight: 0.3 },
        TypicalShape { cpu_milli: 1000, gpu_count: 0, gpu_milli: 0, models: ModelSet::ANY, weight: 0.2 },
    ]);
    let n = node_used(10_000, &[0, 810, 1000, 1000]);
    assert!((model.node_frag(&n) - 390.0).abs() < 1e-9, "{}", model.node_frag(&n));
    let b = model.breakdown(&n).0;
    assert!((b[1] - 152.0).abs() < 1e-9 && (b[2] - 800.0).abs() < 1e-9 && (b[4] - 238.0).abs() < 1e-9, "{b:?}");
    let mut low_cpu = n.clone();
    low_cpu.take(&ask(7000, 0, 0), GpuPick::None).unwrap();
    assert!((model.node_frag(&low_cpu) - 890.0).abs() < 1e-9, "{}", model.node_frag(&low_cpu));
    assert_eq!(model.node_frag(&node_used(10_000, &[1000, 1000])), 0.0, "a full node has nothing to fragment");
}

/// Typical asks: the most frequent cover the coverage share, weights renormalised over them.
#[test]
fn typical_asks_cover_the_share_asked_and_renormalise() {
    let a = ask(1000, 1, 1000);
    let b = ask(2000, 1, 500);
    let c = ask(3000, 0, 0);
    let asks: Vec<Ask> = [vec![a; 6], vec![b; 3], vec![c; 1]].concat();
    let m = WorkloadModel::from_asks(&asks, 90);
    let got: Vec<(u64, f64)> = m.shapes().iter().map(|s| (s.cpu_milli, s.weight)).collect();
    assert_eq!(got.len(), 2, "6 + 3 of 10 asks reach 90%");
    assert_eq!(got[0].0, 1000);
    assert!((got[0].1 - 6.0 / 9.0).abs() < 1e-12 && (got[1].1 - 3.0 / 9.0).abs() < 1e-12, "{got:?}");
    let all = WorkloadModel::from_asks(&asks, 100);
    assert_eq!(all.shapes().len(), 3);
    assert!((all.shapes().iter().map(|s| s.weight).sum::<f64>() - 1.0).abs() < 1e-12);
    // Equal counts: the larger ask first (the reference's order).
    let tie = WorkloadModel::from_asks(&[a, b], 100);
    assert_eq!(tie.shapes()[0].cpu_milli, 2000);
}

struct Case {
    name: &'static str,
    policy: PackPolicy,
    nodes: Vec<NodeRoom>,
    /// Asks each node already runs (for gpu-clustering's kinds).
    kinds: Vec<Vec<AskKind>>,
    ask: Ask,
    expected_node: usize,
    expected_pick: GpuPick,
}

fn model_for_cases() -> WorkloadModel {
    WorkloadModel::new(vec![
        TypicalShape { cpu_milli: 4000, gpu_count: 1, gpu_milli: 1000, models: ModelSet::ANY, weight: 0.6 },
        TypicalShape { cpu_milli: 2000, gpu_count: 1, gpu_milli: 500, models: ModelSet::ANY, weight: 0.4 },
    ])
}

/// Small clusters where the right node is known by hand, one or more per policy.
fn cases() -> Vec<Case> {
    let none = || vec![vec![]; 3];
    vec![
        // Best-fit: least CPU and GPU left after. Free GPUs 4, 2, 8 with equal CPU: 2 left 0.
        Case {
            name: "best-fit takes the node left with the least",
            policy: PackPolicy::BestFit,
            nodes: vec![node_used(32_000, &[0, 0, 0, 0]), node_used(32_000, &[0, 0]), node(32_000, 8)],
            kinds: none(),
            ask: ask(8000, 2, 1000),
            expected_node: 1,
            expected_pick: GpuPick::Whole(0b11),
        },
        // Dot product: least (free · ask). Node 0 has much CPU and GPU free, node 2 little
        // GPU: its product with a GPU-heavy ask is smallest.
        Case {
            name: "dot-product takes the least aligned free vector",
            policy: PackPolicy::DotProduct,
            nodes: vec![node(96_000, 8), node(96_000, 4), node_used(96_000, &[0, 1000])],
            kinds: none(),
            ask: ask(4000, 1, 1000),
            expected_node: 2,
            expected_pick: GpuPick::Whole(0b1),
        },
        // GPU packing: a share goes to a partly used GPU (case 1) before free GPUs of a used
        // node (case 2) or an idle node (case 3); the tightest such GPU.
        Case {
            name: "gpu-packing fills partly used GPUs first",
            policy: PackPolicy::GpuPacking,
            nodes: vec![node(32_000, 2), node_used(32_000, &[1000, 0]), node_used(32_000, &[500, 800, 0])],
            kinds: none(),
            ask: ask(1000, 1, 200),
            expected_node: 2,
            expected_pick: GpuPick::Share(1),
        },
        // GPU clustering: a node running only shares beats an idle one and a node of
        // whole-GPU asks, for a share.
        Case {
            name: "gpu-clustering puts a share with shares",
            policy: PackPolicy::GpuClustering,
            nodes: vec![node(32_000, 4), node_used(32_000, &[1000, 0, 0, 0]), node_used(32_000, &[300, 0, 0, 0])],
            kinds: vec![vec![], vec![AskKind::Whole(1)], vec![AskKind::Share]],
            ask: ask(1000, 1, 300),
            expected_node: 2,
            expected_pick: GpuPick::Share(0),
        },
        // FGD: a 500 share on the idle 1-GPU node 0 leaves 500 (useless to whole-GPU asks,
        // weight 0.6: +300); on node 1's half-used GPU it fills it (the 500 free was
        // fragment to whole-GPU asks: −300, and to nothing else). Node 1 wins.
        Case {
            name: "fgd takes the node whose fragmentation grows least",
            policy: PackPolicy::Fgd,
            nodes: vec![node(32_000, 1), node_used(32_000, &[500, 0]), node(32_000, 4)],
            kinds: none(),
            ask: ask(1000, 1, 500),
            expected_node: 1,
            expected_pick: GpuPick::Share(0),
        },
        Case {
            name: "fairway takes FGD's node and the GPU whose fragmentation grows least",
            policy: PackPolicy::Fairway,
            nodes: vec![node(32_000, 1), node_used(32_000, &[0, 500]), node(32_000, 4)],
            kinds: none(),
            ask: ask(1000, 1, 500),
            expected_node: 1,
            expected_pick: GpuPick::Share(1),
        },
        // Ties go to the lower rank (ranks are 2, 1, 0 below: node 2 first).
        Case {
            name: "equal scores go to the lowest rank",
            policy: PackPolicy::BestFit,
            nodes: vec![node(32_000, 2), node(32_000, 2), node(32_000, 2)],
            kinds: none(),
            ask: ask(1000, 1, 1000),
            expected_node: 2,
            expected_pick: GpuPick::Whole(0b1),
        },
        // Nodes that do not fit are never chosen, whatever their score.
        Case {
            name: "a node without the CPU is not a candidate",
            policy: PackPolicy::BestFit,
            nodes: vec![node_used(500, &[0]), node(32_000, 8), node(32_000, 8)],
            kinds: none(),
            ask: ask(1000, 1, 1000),
            expected_node: 2,
            expected_pick: GpuPick::Whole(0b1),
        },
    ]
}

#[test]
fn each_policy_chooses_the_node_known_by_hand() {
    for case in cases() {
        let ranks: Vec<u32> = (0..case.nodes.len() as u32).rev().collect();
        let mut packer = Packer::new(case.policy, case.nodes.clone(), ranks, Some(model_for_cases())).unwrap();
        for (i, kinds) in case.kinds.iter().enumerate() {
            for &k in kinds {
                packer.kinds[i].add(k);
            }
        }
        let got = packer.choose(&case.ask, 0).unwrap_or_else(|| panic!("{}: no node", case.name));
        assert_eq!((got.node, got.pick), (case.expected_node, case.expected_pick), "{}", case.name);
    }
}

#[test]
fn random_draws_only_among_nodes_that_fit_and_reaches_each() {
    let nodes = vec![node(32_000, 2), node_used(32_000, &[1000]), node(32_000, 1), node(32_000, 4)];
    let mut seen = [0u32; 4];
    for k in 0..400u64 {
        let mut packer = Packer::new(PackPolicy::Random, nodes.clone(), vec![0, 1, 2, 3], None).unwrap();
        let p = packer.choose(&ask(0, 1, 1000), k.wrapping_mul(0x9e37_79b9_7f4a_7c15)).unwrap();
        seen[p.node] += 1;
    }
    assert_eq!(seen[1], 0, "node 1 has no free GPU");
    assert!(seen[0] > 80 && seen[2] > 80 && seen[3] > 80, "{seen:?}");
}

#[test]
fn packers_refuse_what_they_cannot_do() {
    assert_eq!(
        Packer::new(PackPolicy::Fgd, vec![node(1, 1)], vec![0], None).err(),
        Some(PackError::NoWorkloadModel(PackPolicy::Fgd))
    );
    assert_eq!(
        Packer::new(PackPolicy::BestFit, vec![node(1, 1), node(1, 1)], vec![0], None).err(),
        Some(PackError::RankCount { ranks: 1, nodes: 2 })
    );
    assert_eq!(
        Packer::new(PackPolicy::BestFit, vec![node(1, 1), node(1, 1)], vec![3, 3], None).err(),
        Some(PackError::RankTwice(3))
    );
    assert_eq!("worst-fit".parse::<PackPolicy>(), Err(UnknownPolicy("worst-fit".into())));
    for p in PackPolicy::ALL {
        assert_eq!(p.name().parse::<PackPolicy>(), Ok(p));
    }
}

/// The packer's index (per-ask heaps fed by a change log, fragmentation memoised by node
/// state) against the plainest reference: score every node that fits, from scratch, and
/// take the best, ties to the lower rank. Random small clusters and ask streams, with
/// departures; every placement must match, and the nodes must keep every share rule.
#[test]
fn the_index_chooses_what_scoring_every_node_chooses() {
    let mut rng = SplitMix(7);
    for round in 0..300 {
        let policy = PackPolicy::ALL[1 + round % (PackPolicy::ALL.len() - 1)];
        let nodes: Vec<NodeRoom> = (0..1 + rng.below(6))
            .map(|_| {
                let gpus = [0, 1, 2, 4, 8][rng.below(5)];
                let model = if gpus == 0 { None } else { Some(GpuModel(rng.below(2) as u16)) };
                NodeRoom::new(4000 * (1 + rng.below(8) as u64), 1000 * (1 + rng.below(8) as u64), gpus, model).unwrap()
            })
            .collect();
        let mut ranks: Vec<u32> = (0..nodes.len() as u32).collect();
        for i in (1..ranks.len()).rev() {
            ranks.swap(i, rng.below(i + 1));
        }
        let shapes: Vec<Ask> = (0..1 + rng.below(5)).map(|_| random_ask(&mut rng)).collect();
        let model = WorkloadModel::from_asks(&shapes, 95);
        let mut packer = Packer::new(policy, nodes.clone(), ranks.clone(), Some(model.clone())).unwrap();
        let mut kinds = vec![KindCounts::default(); nodes.len()];
        let mut placed: Vec<(usize, Ask, GpuPick)> = Vec::new();
        for step in 0..40 {
            if step % 7 == 6 && !placed.is_empty() {
                let (n, a, p) = placed.swap_remove(rng.below(placed.len()));
                packer.release(n, &a, p).unwrap();
                kinds[n].remove(a.kind());
                continue;
            }
            let a = shapes[rng.below(shapes.len())];
            let expected = brute_force(policy, packer.rooms(), &ranks, &kinds, &model, &a);
            let got = packer.place(&a, 0);
            assert_eq!(got.map(|p| p.node), expected, "round {round} step {step} {policy}: {a:?}");
            if let Some(p) = got {
                kinds[p.node].add(a.kind());
                placed.push((p.node, a, p.pick));
            }
            for r in packer.rooms() {
                assert!(r.gpu_free().iter().all(|&f| f <= MILLI_PER_GPU));
            }
        }
        // Every share and whole GPU adds up: what is free plus what was placed is the node.
        let mut rebuilt = packer.rooms().to_vec();
        for (n, a, p) in &placed {
            rebuilt[*n].give_back(a, *p).unwrap();
        }
        assert!(rebuilt.iter().all(NodeRoom::is_idle), "round {round}");
    }
}

fn brute_force(
    policy: PackPolicy,
    rooms: &[NodeRoom],
    ranks: &[u32],
    kinds: &[KindCounts],
    model: &WorkloadModel,
    a: &Ask,
) -> Option<usize> {
    let mut best: Option<(i64, std::cmp::Reverse<u32>, usize)> = None;
    for (i, room) in rooms.iter().enumerate() {
        if !room.fits(a) {
            continue;
        }
        let view = NodeView { room, kinds: &kinds[i], frag: model.node_frag(room) };
        let mut frag: &WorkloadModel = model;
        let s = policy::score(policy, &view, a, &mut frag);
        let key = (s, std::cmp::Reverse(ranks[i]), i);
        if best.is_none_or(|b| (key.0, key.1) > (b.0, b.1)) {
            best = Some(key);
        }
    }
    best.map(|b| b.2)
}

fn random_ask(rng: &mut SplitMix) -> Ask {
    let models = match rng.below(4) {
        0 => ModelSet::of([GpuModel(rng.below(2) as u16)]).unwrap(),
        _ => ModelSet::ANY,
    };
    let (count, milli) = match rng.below(4) {
        0 => (0, 0),
        1 => (1, [100, 250, 460, 500, 810][rng.below(5)]),
        2 => (1, 1000),
        _ => ([2, 4, 8][rng.below(3)], 1000),
    };
    Ask::new(1000 * rng.below(12) as u64, 100 * rng.below(20) as u64, count, milli, models).unwrap()
}

struct SplitMix(u64);

impl SplitMix {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        policy::draw(z ^ (z >> 31), n)
    }
}

#[test]
fn memoised_fragmentation_matches_the_direct_sum() {
    let model = model_for_cases();
    let nodes = vec![node_used(16_000, &[300, 0, 1000, 0]), node_used(3000, &[500, 500]), node(0, 0)];
    let packer = Packer::new(PackPolicy::Fgd, nodes.clone(), vec![0, 1, 2], Some(model.clone())).unwrap();
    let direct: f64 = nodes.iter().map(|n| model.node_frag(n)).sum();
    assert!((packer.frag_total() - direct).abs() < 1e-9);
    let mut m: &WorkloadModel = &model;
    assert_eq!(m.frag_of(&nodes[0]), model.node_frag(&nodes[0]));
}

/// Where FGD's rounded scores tie between two GPUs, FGD takes the first and Fairway the one
/// whose fragmentation grows least. Typical asks: a 600 share (0.01), a 550 share (0.49), a
/// whole GPU (0.5). GPUs free [590, 580, 1000]; fragmentation before
/// 0.01 × 1170 + 0 + 0.5 × 1170 = 596.7. A 100 share on
/// - GPU 0 → [490, 580, 1000]: 10.7 + 0.49 × 490 + 535 = 785.8 (growth 189.1, σ(−0.1891) → 45);
/// - GPU 1 → [590, 480, 1000]: 10.7 + 0.49 × 480 + 535 = 780.9 (growth 184.2, also 45);
/// - GPU 2 → [590, 580, 900]: the whole GPU is gone: 11.7 + 0 + 0.5 × 2070 (growth 450, 38).
#[test]
fn fairway_breaks_fgds_gpu_ties_by_exact_growth() {
    let model = WorkloadModel::new(vec![
        TypicalShape { cpu_milli: 0, gpu_count: 1, gpu_milli: 600, models: ModelSet::ANY, weight: 0.01 },
        TypicalShape { cpu_milli: 0, gpu_count: 1, gpu_milli: 550, models: ModelSet::ANY, weight: 0.49 },
        TypicalShape { cpu_milli: 0, gpu_count: 1, gpu_milli: 1000, models: ModelSet::ANY, weight: 0.5 },
    ]);
    let n = node_used(8000, &[410, 420, 0]);
    assert!((model.node_frag(&n) - 596.7).abs() < 1e-9);
    let share = ask(0, 1, 100);
    let pick = |policy| Packer::new(policy, vec![n.clone()], vec![0], Some(model.clone())).unwrap().choose(&share, 0);
    assert_eq!(pick(PackPolicy::Fgd).map(|p| p.pick), Some(GpuPick::Share(0)));
    assert_eq!(pick(PackPolicy::Fairway).map(|p| p.pick), Some(GpuPick::Share(1)));
}

/// Where FGD's scores tie, FGD takes the lower rank and Fairway a node already in use. One
/// typical ask, a whole GPU: a whole GPU on either node leaves no fragment (score 50 on
/// both); node 0 is idle and ranked first, node 1 runs a whole GPU already.
#[test]
fn fairway_sends_fgds_ties_to_nodes_in_use() {
    let model = WorkloadModel::new(vec![TypicalShape {
        cpu_milli: 0,
        gpu_count: 1,
        gpu_milli: 1000,
        models: ModelSet::ANY,
        weight: 1.0,
    }]);
    let nodes = vec![node(8000, 2), node_used(8000, &[1000, 0])];
    let whole = ask(0, 1, 1000);
    let choose =
        |policy| Packer::new(policy, nodes.clone(), vec![0, 1], Some(model.clone())).unwrap().choose(&whole, 0);
    assert_eq!(choose(PackPolicy::Fgd).map(|p| p.node), Some(0));
    assert_eq!(choose(PackPolicy::Fairway).map(|p| (p.node, p.pick)), Some((1, GpuPick::Whole(0b10))));
}

/// `score_and_pick`, which the scheduler's placement calls, gives what `score` and `pick`
/// give apart, for every policy, whole and shared asks, on nodes taken in part.
#[test]
fn score_and_pick_together_is_score_and_pick_apart() {
    let model = model_for_cases();
    let nodes = [
        node(16_000, 8),
        node_used(16_000, &[300, 0, 1000, 0]),
        node_used(8000, &[500, 500, 700, 1000, 0, 250, 0, 0]),
        node_used(3000, &[500, 500]),
    ];
    let asks = [ask(1000, 1, 1000), ask(2000, 2, 1000), ask(500, 1, 500), ask(0, 1, 250), ask(4000, 1, 300)];
    let kinds = KindCounts::default();
    for policy in PackPolicy::ALL {
        for room in &nodes {
            for a in asks.iter().filter(|a| room.fits(a)) {
                let mut m: &WorkloadModel = &model;
                let view = NodeView { room, kinds: &kinds, frag: model.node_frag(room) };
                let apart = (policy::score(policy, &view, a, &mut m), policy::pick(policy, &view, a, &mut m, 42));
                assert_eq!(
                    policy::score_and_pick(policy, &view, a, &mut m, 42),
                    apart,
                    "{policy} on {room:?} for {a:?}"
                );
            }
        }
    }
}

/// No policy's score reads the order of a node's GPUs, only how much each has free: the
/// scheduler's placement judges one node of each state at a level and counts its twins
/// (`FreeRoom::place_packed`). Random nodes, each against the same GPUs in a shuffled order;
/// gpu-clustering's kinds and random's draw are beside the point (neither is memoised by
/// state) but hold too.
#[test]
fn scores_ignore_the_order_of_gpus() {
    let model = model_for_cases();
    let kinds = KindCounts::default();
    let mut rng = SplitMix(7);
    let mut compared = 0;
    for _ in 0..400 {
        let gpus = 1 + rng.below(8);
        let used: Vec<u16> = (0..gpus).map(|_| [0, 0, 1000, 1000, 250, 500, 700][rng.below(7)]).collect();
        let mut shuffled = used.clone();
        for i in (1..gpus).rev() {
            shuffled.swap(i, rng.below(i + 1));
        }
        let cpu = 1000 * (4 + rng.below(12)) as u64;
        let (room, twin) = (node_used(cpu, &used), node_used(cpu, &shuffled));
        for _ in 0..4 {
            let a = random_ask(&mut rng);
            assert_eq!(room.fits(&a), twin.fits(&a), "{used:?} against {shuffled:?} for {a:?}");
            if !room.fits(&a) {
                continue;
            }
            for policy in PackPolicy::ALL {
                let mut m: &WorkloadModel = &model;
                let score = |r: &NodeRoom, m: &mut &WorkloadModel| {
                    let view = NodeView { room: r, kinds: &kinds, frag: model.node_frag(r) };
                    policy::score(policy, &view, &a, m)
                };
                assert_eq!(
                    score(&room, &mut m),
                    score(&twin, &mut m),
                    "{policy}: {used:?} against {shuffled:?} for {a:?}"
                );
                compared += 1;
            }
        }
    }
    assert!(compared > 1000, "only {compared} comparisons");
}
