//! Core benchmarks (divan). Run: `cargo bench -p fairway-core --bench cycle`.
//! Figures are recorded in docs/benchmarks.md.
//!
//! - `cycle_*`: one scheduling cycle on 1,000 nodes x 8 GPUs with 100,000 pending jobs;
//!   `cycle_preemption_searches_*` is the hard path: every pending job outranks the running
//!   work, so the cycle runs as many victim searches as its budget allows.
//! - `*_all_on`: the same with everything issue 13 added switched on: fair sharing inside
//!   a tier, the 11 projects in one cohort with nominal quotas (borrowing, lending,
//!   reclaim), and 4 reservations with backfill.
//! - `place_*`: placements per second onto an empty cluster.
//! - `submit_100k`: submitting 100,000 jobs; the allocation profile gives bytes per job.
//!   `submit_100k_one_group_shortest_first`: the worst case of the queue's member lists,
//!   every job in one group and each sorted to a random place in it.

use divan::{AllocProfiler, Bencher, black_box};
use fairway_core::{
    AccountId, Config, Decision, Event, ExitOutcome, FairSharing, GpuModel, JobId, JobSpec, NodeId, NodeSpec,
    NominalQuota, QueueOrder, Quota, Reservations, Resources, Scheduler, Time,
};

#[global_allocator]
static ALLOC: AllocProfiler = AllocProfiler::system();

fn main() {
    divan::main();
}

const NODES: u32 = 1_000;
const PENDING: u64 = 100_000;

fn cluster(nodes: u32) -> Scheduler {
    cluster_with(nodes, Config::default())
}

/// Projects of the benchmark's jobs (`job`): 0 to 10.
const PROJECTS: u32 = 11;

/// Everything on: fair sharing (a day's half-life), 4 reservations, and every project in
/// one cohort with a nominal quota of an eighth of the cluster (the cohort's nominal total,
/// 11/8 of the cluster, is over-subscribed, as shared clusters' quotas often are: the
/// cluster's room, not the cohort's, is what runs out).
fn all_on(nodes: u32) -> Scheduler {
    let mut config = Config::default();
    config.policy.fair_share = Some(FairSharing { half_life_ms: 24 * 3_600_000 });
    config.policy.reservations = Some(Reservations { count_max: 4 });
    let mut s = cluster_with(nodes, config);
    for project in 0..PROJECTS {
        let nominal = NominalQuota {
            cohort: AccountId(1_000),
            nominal: Quota::gpus(nodes),
            borrowing_limit: Quota::default(),
            lending_limit: Quota::default(),
        };
        s.apply(Event::SetNominalQuota { project: AccountId(project), nominal: Some(nominal) }, Time::ZERO).unwrap();
    }
    s
}

fn cluster_with(nodes: u32, config: Config) -> Scheduler {
    let mut s = Scheduler::new(config);
    for i in 0..nodes {
        let spec = NodeSpec {
            id: NodeId(i),
            gpu_model: GpuModel((i % 2) as u16),
            capacity: Resources::new(8, 96_000, 1_048_576),
        };
        s.apply(Event::NodeAdded(spec), Time::ZERO).unwrap();
    }
    s
}

/// A deterministic mix of shapes, tiers and tenants, like a busy shared cluster.
fn job(id: u64, base_priority: i32) -> JobSpec {
    let gpus = [1, 1, 1, 2, 2, 4, 8][(id % 7) as usize];
    let mut spec = JobSpec::new(
        JobId(id),
        base_priority + [0, 1000, 100_000][(id % 3) as usize],
        Resources::new(gpus, 4_000, 32_768),
    );
    spec.project = AccountId((id % 11) as u32);
    spec.user = AccountId(100 + (id % 37) as u32);
    spec.replicas = if id.is_multiple_of(53) { 2 } else { 1 };
    spec
}

/// A full cluster (every GPU busy with work that outranks the backlog, so nothing in the
/// backlog may preempt it) and `PENDING` jobs waiting, after one cycle has given every
/// group its verdict.
fn full_cluster_with_backlog() -> (Scheduler, Vec<JobId>) {
    full_cluster_with_backlog_on(cluster(NODES))
}

fn full_cluster_with_backlog_on(mut s: Scheduler) -> (Scheduler, Vec<JobId>) {
    let mut running = Vec::new();
    for i in 0..u64::from(NODES) * 8 {
        s.apply(Event::Submit(JobSpec::new(JobId(i), 5_000_000, Resources::new(1, 1_000, 1_024))), Time::ZERO).unwrap();
        running.push(JobId(i));
    }
    s.cycle(Time::ZERO);
    for i in 0..PENDING {
        s.apply(Event::Submit(job(1_000_000 + i, 0)), Time(1)).unwrap();
    }
    s.cycle(Time(1));
    (s, running)
}

/// The start-time estimates a server's job list asks for: the forecast of the first 1,000
/// of 100,000 pending jobs (`forecast.rs`), on a full cluster whose 8,000 runs end at 97
/// different times (their run-time limits), so that the forecast plays many times forward.
#[divan::bench(sample_count = 10)]
fn forecast_1000_of_100k_pending(bencher: Bencher) {
    let mut s = cluster(NODES);
    for i in 0..u64::from(NODES) * 8 {
        let mut spec = JobSpec::new(JobId(i), 5_000_000, Resources::new(1, 1_000, 1_024));
        spec.max_runtime_ms = Some((i % 97 + 1) * 60_000);
        s.apply(Event::Submit(spec), Time::ZERO).unwrap();
    }
    s.cycle(Time::ZERO);
    for i in 0..PENDING {
        s.apply(Event::Submit(job(1_000_000 + i, 0)), Time(1)).unwrap();
    }
    s.cycle(Time(1));
    bencher.bench_local(|| {
        let estimates = s.forecast(Time(2), 1_000);
        assert_eq!(estimates.len() as u64, PENDING);
        estimates
    });
}

/// One cycle after one running job exits: the woken groups are asked again.
#[divan::bench(sample_count = 20)]
fn cycle_after_exit_100k_pending(bencher: Bencher) {
    after_exit(bencher, cluster);
}

/// `cycle_after_exit_100k_pending` on a cluster made by `make`.
fn after_exit(bencher: Bencher, make: fn(u32) -> Scheduler) {
    bencher
        .with_inputs(|| {
            let (mut s, running) = full_cluster_with_backlog_on(make(NODES));
            s.apply(Event::Exited { job: running[4_321], outcome: ExitOutcome::Succeeded }, Time(2)).unwrap();
            s
        })
        .bench_local_values(|mut s| {
            let out = s.cycle(Time(2));
            // Return the scheduler so that dropping it is not timed.
            (s, out)
        });
}

/// One cycle in which a high-priority job arrives and preempts.
#[divan::bench(sample_count = 20)]
fn cycle_with_preemption_100k_pending(bencher: Bencher) {
    bencher
        .with_inputs(|| {
            let (mut s, _) = full_cluster_with_backlog();
            s.apply(Event::Submit(JobSpec::new(JobId(9_000_000), 10_000_000, Resources::gpus(8))), Time(2)).unwrap();
            s
        })
        .bench_local_values(|mut s| {
            let out = s.cycle(Time(2));
            assert!(out.decisions.iter().any(|d| matches!(d, Decision::Preempt { .. })));
            (s, out)
        });
}

/// A full cluster of preemptible low-priority work in mixed sizes (4, 2, 1 and 1 GPUs per
/// node), each job with its own last checkpoint, and `PENDING` jobs that all outrank it.
fn full_cluster_of_victims() -> Scheduler {
    full_cluster_of_victims_on(cluster(NODES))
}

fn full_cluster_of_victims_on(mut s: Scheduler) -> Scheduler {
    let mut id = 0;
    for _ in 0..NODES {
        for gpus in [4, 2, 1, 1] {
            s.apply(Event::Submit(JobSpec::new(JobId(id), -1_000, Resources::new(gpus, 1_000, 1_024))), Time::ZERO)
                .unwrap();
            id += 1;
        }
    }
    s.cycle(Time::ZERO);
    let now = Time::from_secs(3_600);
    for j in 0..id {
        // Checkpoints spread over the hour: every victim loses a different amount of work.
        let at = Time::from_secs((j * 7_919) % 3_600);
        s.apply(Event::CheckpointReported { job: JobId(j), at }, now).unwrap();
    }
    for i in 0..PENDING {
        s.apply(Event::Submit(job(1_000_000 + i, 0)), now).unwrap();
    }
    s
}

/// The hard path: 100,000 pending jobs meet a full cluster whose every job they may preempt;
/// the cycle searches for victims as often as `preemption_attempts_per_cycle_max` allows
/// (64), each search weighing the nodes where the job could make room.
#[divan::bench(sample_count = 10)]
fn cycle_preemption_searches_100k_pending(bencher: Bencher) {
    bencher.with_inputs(full_cluster_of_victims).bench_local_values(|mut s| {
        let out = s.cycle(Time::from_secs(3_600));
        assert!(out.stats.preemption_searches >= 32, "searches {}", out.stats.preemption_searches);
        assert!(out.decisions.iter().filter(|d| matches!(d, Decision::Preempt { .. })).count() >= 32);
        (s, out)
    });
}

/// `cycle_after_exit_100k_pending` with everything on (`all_on`).
#[divan::bench(sample_count = 20)]
fn cycle_after_exit_100k_pending_all_on(bencher: Bencher) {
    bencher
        .with_inputs(|| {
            let (mut s, running) = full_cluster_with_backlog_on(all_on(NODES));
            s.apply(Event::Exited { job: running[4_321], outcome: ExitOutcome::Succeeded }, Time(2)).unwrap();
            s
        })
        .bench_local_values(|mut s| {
            let out = s.cycle(Time(2));
            assert!(!s.reservations().is_empty(), "the backlog's head holds a reservation");
            (s, out)
        });
}

/// `cycle_preemption_searches_100k_pending` with everything on (`all_on`).
#[divan::bench(sample_count = 10)]
fn cycle_preemption_searches_100k_pending_all_on(bencher: Bencher) {
    bencher.with_inputs(|| full_cluster_of_victims_on(all_on(NODES))).bench_local_values(|mut s| {
        let out = s.cycle(Time::from_secs(3_600));
        assert!(out.stats.preemption_searches >= 32, "searches {}", out.stats.preemption_searches);
        assert!(out.decisions.iter().filter(|d| matches!(d, Decision::Preempt { .. })).count() >= 32);
        (s, out)
    });
}

/// The cold first cycle: 100,000 pending jobs meet an empty cluster of 8,000 GPUs and
/// fill it. Divide the jobs started by the time for placements per second.
#[divan::bench(sample_count = 10)]
fn cycle_cold_fill_100k_pending(bencher: Bencher) {
    cold_fill(bencher, cluster);
}

/// `cycle_cold_fill_100k_pending` on a cluster made by `make`.
fn cold_fill(bencher: Bencher, make: fn(u32) -> Scheduler) {
    bencher
        .with_inputs(|| {
            let mut s = make(NODES);
            for i in 0..PENDING {
                s.apply(Event::Submit(job(i, 0)), Time::ZERO).unwrap();
            }
            s
        })
        .bench_local_values(|mut s| {
            let out = s.cycle(Time::ZERO);
            assert!(out.stats.started > 2_000, "started {}", out.stats.started);
            (s, out)
        });
}

/// 10,000 one-GPU placements onto an empty 1,000 x 8 cluster.
#[divan::bench(sample_count = 10)]
fn place_10k_single_gpu(bencher: Bencher) {
    place_10k(bencher, cluster);
}

/// `place_10k_single_gpu` on a cluster made by `make`.
fn place_10k(bencher: Bencher, make: fn(u32) -> Scheduler) {
    bencher
        .with_inputs(|| {
            let mut s = make(2 * NODES);
            for i in 0..10_000 {
                s.apply(Event::Submit(JobSpec::new(JobId(i), 0, Resources::new(1, 1_000, 1_024))), Time::ZERO).unwrap();
            }
            s
        })
        .bench_local_values(|mut s| {
            let out = s.cycle(Time::ZERO);
            assert_eq!(out.stats.started, 10_000);
            (s, out)
        });
}

/// Submitting 100,000 jobs; with the allocation profiler, bytes allocated / 100,000 bounds
/// the memory a pending job costs.
#[divan::bench(sample_count = 5)]
fn submit_100k(bencher: Bencher) {
    bencher.with_inputs(|| cluster(NODES)).bench_local_values(|mut s| {
        for i in 0..PENDING {
            s.apply(Event::Submit(job(i, 0)), Time::ZERO).unwrap();
        }
        black_box(s)
    });
}

/// The worst case of a group's sorted member list (`queue::Members`): 100,000 jobs of
/// one group under shortest-first order, whose run-time estimates put each anywhere in it
/// (a member list moves the shorter side of the key's place).
#[divan::bench(sample_count = 5)]
fn submit_100k_one_group_shortest_first(bencher: Bencher) {
    let mut config = Config::default();
    config.policy.order = QueueOrder::PriorityShortestFirst;
    bencher.with_inputs(|| cluster_with(NODES, config.clone())).bench_local_values(|mut s| {
        for i in 0..PENDING {
            let mut spec = JobSpec::new(JobId(i), 0, Resources::new(1, 4_000, 32_768));
            // One group: the same total limit, below every estimate, is the group's run
            // limit; the estimates (a fixed scramble of the ids, up to a day) order it.
            spec.max_total_runtime_ms = Some(60_000);
            spec.runtime_estimate_ms = Some(120_000 + i.wrapping_mul(0x9E37_79B9_7F4A_7C15) % 86_400_000);
            s.apply(Event::Submit(spec), Time::ZERO).unwrap();
        }
        black_box(s)
    });
}

/// A cluster whose one-replica jobs are placed by the core's own scoring (`packing: None`)
/// instead of the default, Fairway's packing policy (`docs/placement.md`).
fn core_scoring(nodes: u32) -> Scheduler {
    let mut config = Config::default();
    config.policy.packing = None;
    cluster_with(nodes, config)
}

/// `cycle_after_exit_100k_pending` with the core's own scoring.
#[divan::bench(sample_count = 20)]
fn cycle_after_exit_100k_pending_core_scoring(bencher: Bencher) {
    after_exit(bencher, core_scoring);
}

/// `cycle_cold_fill_100k_pending` with the core's own scoring.
#[divan::bench(sample_count = 5)]
fn cycle_cold_fill_100k_pending_core_scoring(bencher: Bencher) {
    cold_fill(bencher, core_scoring);
}

/// `place_10k_single_gpu` with the core's own scoring.
#[divan::bench(sample_count = 5)]
fn place_10k_single_gpu_core_scoring(bencher: Bencher) {
    place_10k(bencher, core_scoring);
}
