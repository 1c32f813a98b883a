use super::*;
use crate::workload::{PackNodeRow, PackPodRow};

fn node(name: &str, cpu_milli: u64, gpus: u32) -> PackNodeRow {
    PackNodeRow { name: name.into(), cpu_milli, memory_mib: 1 << 20, gpus, model: (gpus > 0).then(|| "T4".into()) }
}

fn pod(name: &str, cpu_milli: u64, num_gpu: u32, gpu_milli: u32) -> PackPodRow {
    PackPodRow { name: name.into(), cpu_milli, memory_mib: 1024, num_gpu, gpu_milli, gpu_models: vec![] }
}

/// The curve's arithmetic by hand: 3 GPUs (3,000 thousandths). Arrivals: none (0, 0), a
/// 2-GPU pod placed (2,000 arrived and allocated: load 66.67% → 67), a 500 share placed
/// (2,500 / 2,500: 83.33% → 83), a 500 share that fails (3,000 / 2,500: 100%).
/// - at 67: 66.67; at 66 (no arrival rounds to it): the mean of 65–67, 66.67;
/// - at 83: 83.33; at 100: 83.33; at 50: none near, no point.
/// - fragmentation: 300 of 1,000 free at 67 (30%), 250 of 500 at 83 (50%).
#[test]
fn curve_points_are_the_means_of_arrivals_rounding_to_each_percent() {
    let mut c = CurveBuckets::new(100);
    c.record(0, 0, 0.0, 3000, 3000);
    c.record(2000, 2000, 300.0, 1000, 3000);
    c.record(2500, 2500, 250.0, 500, 3000);
    c.record(3000, 2500, 250.0, 500, 3000);
    let curve = c.finish();
    assert_eq!(curve.len(), 101);
    let at = |k: usize| curve[k].map(|p| (p.alloc_percent, p.frag_percent));
    assert_eq!(at(0), Some((0.0, 0.0)));
    assert_eq!(at(67), Some((66.67, 30.0)));
    assert_eq!(at(66), Some((66.67, 30.0)));
    assert_eq!(at(83), Some((83.33, 50.0)));
    assert_eq!(at(100), Some((83.33, 50.0)));
    assert_eq!(at(50), None);
    // Two arrivals in one bucket are averaged.
    let mut c = CurveBuckets::new(10);
    c.record(100, 100, 0.0, 900, 1000);
    c.record(104, 90, 0.0, 910, 1000);
    assert_eq!(c.finish()[10].map(|p| p.alloc_percent), Some(9.5));
}

#[test]
fn loads_round_half_to_even_as_the_reference_does() {
    assert_eq!(round_half_even(2.5), 2.0);
    assert_eq!(round_half_even(3.5), 4.0);
    assert_eq!(round_half_even(66.67), 67.0);
    assert_eq!(round_half_even(129.49), 129.0);
}

/// One node of two GPUs, two 500 shares and one whole GPU: best-fit stacks the shares on
/// one GPU in every arrival order (the tightest GPU), so everything fits: 100% allocated,
/// nothing free to fragment. Random may split the shares, and then the whole GPU fails.
#[test]
fn a_hand_checked_packing_run() {
    let input = PackInput::new(
        vec![node("n", 16_000, 2)],
        vec![pod("a", 1000, 1, 500), pod("b", 1000, 1, 500), pod("c", 1000, 1, 1000)],
    )
    .unwrap();
    assert_eq!(input.asked_percent(), 100.0);
    for seed in 0..20 {
        let run = run_one(&input, PackPolicy::BestFit, seed, 100);
        assert_eq!((run.pods, run.placed, run.failed), (3, 3, 0), "seed {seed}");
        assert_eq!(run.curve[100].map(|p| (p.alloc_percent, p.frag_percent)), Some((100.0, 0.0)));
        assert_eq!(run.final_alloc_percent, 100.0);
    }
    let failed: usize = (0..40).map(|seed| run_one(&input, PackPolicy::Random, seed, 100).failed).sum();
    assert!(failed > 0, "random splits the shares in some orders");
}

#[test]
fn resampling_reaches_the_target_from_below_and_from_above() {
    let nodes = vec![node("a", 64_000, 8), node("b", 64_000, 8)];
    let pods: Vec<PackPodRow> = (0..10).map(|i| pod(&format!("p{i}"), 1000, 1, 100 * (i + 1))).collect();
    let input = PackInput::new(nodes, pods).unwrap();
    let capacity = 16_000u64;
    let asked: u64 = 5500;
    for (target, seed) in [(130, 1), (200, 2), (20, 3), (10, 4)] {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let (arrivals, ranks) = arrivals(&input, &mut rng, target);
        let total: u64 = arrivals.iter().map(Ask::gpu_milli_total).sum();
        let target_milli = u64::from(target) * capacity / 100;
        assert!(total <= target_milli, "target {target}%: {total}");
        if target_milli > asked {
            assert!(arrivals.len() >= 10, "resampled up keeps every pod");
            assert!(target_milli - total < 1000, "stops within one pod of the target: {total}");
        } else {
            assert!(arrivals.len() < 10, "resampled down");
        }
        let mut sorted = ranks.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, [0, 1], "ranks are a permutation");
    }
}

#[test]
fn the_same_seed_gives_the_same_report_and_threads_change_nothing() {
    let nodes: Vec<PackNodeRow> = (0..12).map(|i| node(&format!("n{i:02}"), 32_000, [1, 2, 4, 8][i % 4])).collect();
    let pods: Vec<PackPodRow> = (0..60)
        .map(|i| match i % 4 {
            0 => pod(&format!("p{i:02}"), 2000, 1, [230, 470, 810][i % 3]),
            1 => pod(&format!("p{i:02}"), 4000, 1, 1000),
            2 => pod(&format!("p{i:02}"), 8000, [2, 4][i % 2], 1000),
            _ => pod(&format!("p{i:02}"), 3000, 0, 0),
        })
        .collect();
    let input = PackInput::new(nodes, pods).unwrap();
    let mut config = PackConfig::published();
    config.seeds = vec![1, 2, 3];
    let one = serde_json::to_string(&run(&input, &config).unwrap()).unwrap();
    config.threads = 2;
    let two = serde_json::to_string(&run(&input, &config).unwrap()).unwrap();
    assert_eq!(one, two);
    let report = run(&input, &config).unwrap();
    assert_eq!(report.runs.len(), PackPolicy::ALL.len() * 3);
    for r in &report.runs {
        assert_eq!(r.placed + r.failed, r.pods);
        assert!(r.final_alloc_percent <= 100.0);
    }
}

#[test]
fn bad_inputs_and_settings_are_refused_by_name() {
    let e = PackInput::new(vec![node("cpu", 8000, 0)], vec![pod("p", 1, 1, 100)]).err().unwrap();
    assert!(e.to_string().starts_with("nodes:"), "{e}");
    let e = PackInput::new(vec![node("n", 8000, 1)], vec![pod("p", 1, 0, 0)]).err().unwrap();
    assert!(e.to_string().starts_with("pods:"), "{e}");
    let input = PackInput::new(vec![node("n", 8000, 1)], vec![pod("p", 1, 1, 100)]).unwrap();
    let mut config = PackConfig::published();
    config.target_percent = 0;
    assert!(run(&input, &config).unwrap_err().to_string().starts_with("target_percent:"));
    config.target_percent = 130;
    config.seeds.clear();
    assert!(run(&input, &config).unwrap_err().to_string().starts_with("seeds:"));
}
