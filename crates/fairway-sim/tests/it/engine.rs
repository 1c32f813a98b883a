//! The simulator driving the core: hand-checked waits, determinism, conservation.

use std::path::{Path, PathBuf};

use fairway_sim::engine::{CheckLevel, simulate};
use fairway_sim::metrics::{JobRecord, RunResult, SimReport};
use fairway_sim::scenario::{self, Overrides, Scenario};

fn scenario_path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scenarios").join(name)
}

fn load(name: &str, overrides: &Overrides) -> Scenario {
    scenario::load(&scenario_path(name), overrides).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn run_all(s: &Scenario) -> Vec<RunResult> {
    s.policies
        .iter()
        .map(|p| {
            let config = s.engine_config(p, CheckLevel::EveryCycle);
            simulate(&p.name, &s.jobs, &s.nodes, &p.quotas, &config, &mut |_, _| {}).expect("simulation runs")
        })
        .collect()
}

fn record<'a>(run: &'a RunResult, name: &str) -> &'a JobRecord {
    run.records.iter().find(|r| &*r.name == name).unwrap_or_else(|| panic!("no job {name}"))
}

/// (first start, finish) in seconds.
fn times(run: &RunResult, name: &str) -> (u64, u64) {
    let r = record(run, name);
    (r.first_start_ms.expect("started") / 1000, r.finish_ms.expect("finished") / 1000)
}

#[test]
fn tiny_trace_has_the_hand_computed_waits() {
    let s = load("tiny-preemption.yaml", &Overrides::default());
    let runs = run_all(&s);
    let [fifo, priority, fairway] = [&runs[0], &runs[1], &runs[2]];
    // fifo: strict arrival order. urgent waits for low-fill (0..100), small-low for urgent
    // to start (no backfill), then both share the node.
    assert_eq!(times(fifo, "low-fill"), (0, 100));
    assert_eq!(times(fifo, "urgent"), (100, 150));
    assert_eq!(times(fifo, "small-low"), (100, 110));
    // priority: same here (nothing is free before 100), urgent goes first at 100.
    assert_eq!(times(priority, "urgent"), (100, 150));
    assert_eq!(times(priority, "small-low"), (100, 110));
    // fairway: low-fill is preempted at 10 with a 30 s grace period; urgent starts at 40 on
    // the held GPUs; small-low (arrived at 20) must not take them during the grace period,
    // so it starts at 40 on the other 4 free GPUs and ends at 50. low-fill (8 GPUs, no
    // checkpoint: all 40 s lost) restarts when urgent ends at 90, pays 60 s of restart
    // overhead and runs its full 100 s: done at 250.
    assert_eq!(times(fairway, "urgent"), (40, 90));
    assert_eq!(times(fairway, "small-low"), (40, 50));
    let low = record(fairway, "low-fill");
    assert_eq!((low.first_start_ms, low.finish_ms), (Some(0), Some(250_000)));
    assert_eq!(low.preemptions, 1);
    assert_eq!(
        low.lost_gpu_ms,
        8 * (40_000 + 60_000),
        "8 GPUs x (10 s of work + 30 s of grace, then the 60 s restart overhead of the run that finishes)"
    );
    // Queued: never before its first start; from its exit at 40 to its restart at 90.
    assert_eq!(low.queued_ms, 50_000);
    assert_eq!(record(fairway, "urgent").queued_ms, 40_000 - record(fairway, "urgent").submit_ms);
    assert_eq!(record(fifo, "low-fill").queued_ms, 0);
    for run in [fifo, priority] {
        assert!(run.records.iter().all(|r| r.preemptions == 0), "{} never preempts", run.policy);
    }
}

#[test]
fn same_scenario_and_seed_give_byte_identical_output() {
    let overrides = Overrides::default();
    let first =
        SimReport::from_runs("pollux-fixture", 11, &run_all(&load("pollux-fixture.yaml", &overrides))).to_json();
    let second =
        SimReport::from_runs("pollux-fixture", 11, &run_all(&load("pollux-fixture.yaml", &overrides))).to_json();
    assert_eq!(first, second);
    // A different seed assigns different tiers, so the per-tier figures move.
    let other = Overrides { seed: Some(12), ..Overrides::default() };
    let third = SimReport::from_runs("pollux-fixture", 12, &run_all(&load("pollux-fixture.yaml", &other))).to_json();
    assert_ne!(first, third);
}

#[test]
fn every_job_ends_exactly_once_and_gpu_time_is_conserved() {
    let s = load("pollux-fixture.yaml", &Overrides::default());
    assert!(s.jobs.len() > 400, "fixture has {} jobs", s.jobs.len());
    for run in run_all(&s) {
        let mut allocated_gpu_ms: u128 = 0;
        for pair in run.util.windows(2) {
            allocated_gpu_ms +=
                u128::from(pair[0].gpu_milli_allocated) * u128::from(pair[1].t_ms - pair[0].t_ms) / 1000;
        }
        assert_eq!(run.util.last().map(|u| u.gpu_milli_allocated), Some(0), "{}: GPUs left allocated", run.policy);
        let mut useful: u128 = 0;
        for r in &run.records {
            match (r.first_start_ms, r.finish_ms) {
                (Some(start), Some(finish)) => {
                    assert!(start >= r.submit_ms && finish >= start + r.work_ms, "{}: {r:?}", run.policy);
                    useful += u128::from(r.gpu_milli) * u128::from(r.work_ms) / 1000;
                }
                // Only a job whose request exceeds its tenant's quota may never start.
                (None, None) => assert!(r.gpu_milli > 1000, "{}: {} never started", run.policy, r.name),
                other => panic!("{}: {} ended inconsistently: {other:?}", run.policy, r.name),
            }
        }
        let lost: u128 = run.records.iter().map(|r| u128::from(r.lost_gpu_ms)).sum();
        // An outside ledger: allocated GPU time is exactly useful work plus what was lost
        // (work since the last checkpoint, grace periods and every restart overhead).
        assert_eq!(allocated_gpu_ms, useful + lost, "{}: allocated = useful + lost", run.policy);
        if run.policy != "fairway" {
            assert_eq!(allocated_gpu_ms, useful, "{}: no preemption, no waste", run.policy);
            assert_eq!(lost, 0);
        }
    }
}

#[test]
fn fairway_cuts_high_priority_waits_on_the_trace_excerpt() {
    let s = load("pollux-fixture.yaml", &Overrides::default());
    let report = SimReport::from_runs(&s.name, s.seed, &run_all(&s));
    let wait = |policy: &str| {
        let p = report.policies.iter().find(|p| p.policy == policy).expect("policy ran");
        p.tiers["high"].wait_seconds.mean.expect("high jobs started")
    };
    assert!(wait("fairway") < wait("priority"), "fairway {} vs priority {}", wait("fairway"), wait("priority"));
    assert!(wait("priority") < wait("fifo"), "priority {} vs fifo {}", wait("priority"), wait("fifo"));
}

#[test]
fn bad_scenarios_name_the_field() {
    let tmp = tempfile::Builder::new().prefix("fairway-sim-bad-").tempdir().unwrap();
    let dir = tmp.path();
    let cases = [
        ("policies: [fifo, nope]", "policies[1]"),
        ("policies: [{ name: x, order: sideways, preemption: false }]", "policies[0].order"),
        ("cluster: { nodes: [{ name: n, gpus: 0, gpu_model: A100 }] }", "cluster.nodes[0].gpus"),
        ("quotas: [{ gpus_max: 3 }]", "quotas[0]"),
        ("placement: tightest", "placement: unknown placement policy"),
        ("policies: [{ name: x, order: priority, preemption: true, placement: fdg }]", "policies[0].placement"),
        ("preemption_protection: { urgent: { min_run_seconds: 60 } }", "preemption_protection.urgent"),
        (
            "preemption_protection: { low: { preemptions_per_hour_max: 0 } }",
            "preemption_protection.low.preemptions_per_hour_max",
        ),
        ("preemption_protection: { low: { min_run_secs: 60 } }", "min_run_secs"),
        (
            "policies: [{ name: x, order: priority, preemption: true, fair_share: { half_life_hours: -1 } }]",
            "policies[0].fair_share.half_life_hours",
        ),
        (
            "policies: [{ name: x, order: priority, preemption: true, backfill: false, fair_share: { half_life_hours: 1 } }]",
            "policies[0].fair_share: needs backfill",
        ),
        (
            "policies: [{ name: x, order: priority, preemption: true, fair_share: { half_life_hours: 1, weights: [{ project: vision, weight: 0 }] } }]",
            "policies[0].fair_share.weights[0].weight",
        ),
        ("cost_model: { image_pull_seconds: 0 }", "cost_model.image_pull_seconds: must be from 1"),
        ("cost_model: { image_pull_seconds: 60, node_image_cache_max: 0 }", "cost_model.node_image_cache_max"),
        (
            "cost_model: { node_image_cache_max: 4 }",
            "cost_model.node_image_cache_max: needs cost_model.image_pull_seconds",
        ),
        (
            "cost_model: { image_pull_seconds: 60, prepulled_images: [ok, \"Bad Image\"] }",
            "cost_model.prepulled_images[1]",
        ),
        (
            "policies: [{ name: x, order: priority, preemption: true, image_locality_permille: 1001 }]",
            "policies[0].image_locality_permille",
        ),
        // A mistake inside a custom policy is reported where it is, not as a policy that
        // matches neither form.
        ("policies: [{ name: x, ordr: priority, preemption: true }]", "policies[0].ordr: line"),
        (
            "policies: [{ name: x, order: priority, preemption: true, cohorts: [{ name: c, members: [{ project: p, nominal: { gpus: -1 } }] }] }]",
            "policies[0].cohorts[0].members[0].nominal.gpus: line",
        ),
        ("policies: [7]", "expected a preset's name"),
        (
            "policies: [{ name: x, order: priority, preemption: true, fair_share: { half_life_hours: 1e300 } }]",
            "policies[0].fair_share.half_life_hours: must be from 0 to 87600, got 1e300",
        ),
    ];
    for (i, (change, field)) in cases.iter().enumerate() {
        let base = std::fs::read_to_string(scenario_path("tiny-preemption.yaml")).unwrap();
        let key = change.split(':').next().unwrap();
        let mut text: String =
            base.lines().filter(|l| !l.starts_with(&format!("{key}:"))).collect::<Vec<_>>().join("\n");
        if key == "cluster" {
            text = text.replace("  nodes: [{ name: n, gpus: 8, gpu_model: A100 }]\n", "");
        }
        text.push('\n');
        text.push_str(change);
        text.push('\n');
        let path = dir.join(format!("bad-{i}.yaml"));
        std::fs::write(&path, text).unwrap();
        let err = scenario::load(&path, &Overrides::default()).expect_err(change).to_string();
        assert!(err.contains(field), "{change}: error {err:?} does not name {field}");
    }
    let unknown_tier = "jobs:\n  - { name: a, tenant: { project: p }, priority: urgent-ish, resources: { gpus: 1 }, command: [x], submit_seconds: 0, duration_seconds: 1 }";
    let base = std::fs::read_to_string(scenario_path("tiny-preemption.yaml")).unwrap();
    let head: String = base.lines().take_while(|l| !l.starts_with("jobs:")).collect::<Vec<_>>().join("\n");
    let path = dir.join("bad-tier.yaml");
    std::fs::write(&path, format!("{head}\n{unknown_tier}\n")).unwrap();
    let err = scenario::load(&path, &Overrides::default()).expect_err("unknown tier").to_string();
    assert!(err.contains("urgent-ish") && err.contains("known"), "{err}");
}

/// Fair sharing inside a tier reaches the core: bob's one job waits for alice's backlog in
/// submit order, and goes at the first free GPU with fair sharing (see the fixture).
#[test]
fn fair_sharing_serves_a_newcomer_before_a_backlog() {
    let s = load("tiny-fair-share.yaml", &Overrides::default());
    let runs = run_all(&s);
    let run = |name: &str| runs.iter().find(|r| r.policy == name).unwrap_or_else(|| panic!("{name} ran"));
    assert_eq!(times(run("priority"), "b1"), (200, 300));
    assert_eq!(times(run("priority"), "a4"), (100, 200));
    for policy in ["fair", "fair-weighted"] {
        assert_eq!(times(run(policy), "b1"), (100, 200), "{policy}");
        assert_eq!(times(run(policy), "a3"), (100, 200), "{policy}");
        assert_eq!(times(run(policy), "a4"), (200, 300), "{policy}");
    }
}

/// Starvation by size: a 4-GPU job behind a flood of 1-GPU jobs starts only when fair
/// sharing puts it first *and* a reservation keeps the GPUs it waits for (see the fixture):
/// either alone leaves it behind the whole backlog.
#[test]
fn fair_sharing_with_a_reservation_ends_starvation_by_size() {
    let s = load("tiny-size-starvation.yaml", &Overrides::default());
    let runs = run_all(&s);
    let run = |name: &str| runs.iter().find(|r| r.policy == name).unwrap_or_else(|| panic!("{name} ran"));
    for policy in ["priority", "fair", "resv"] {
        assert_eq!(times(run(policy), "n1"), (800, 900), "{policy}");
        assert_eq!(times(run(policy), "s7"), (400, 800), "{policy}");
    }
    let both = run("fair-resv");
    assert_eq!(times(both, "n1"), (400, 500));
    for sweep in ["s4", "s5", "s6", "s7"] {
        assert_eq!(times(both, sweep), (500, 900), "{sweep}");
    }
}

/// A tier's protection from preemption reaches the core: on the Pollux excerpt, a minimum run
/// longer than any job there leaves nothing to preempt, and a 10-minute one changes what is
/// preempted.
#[test]
fn preemption_protection_per_tier_reaches_the_victim_search() {
    let base = std::fs::read_to_string(scenario_path("pollux-fixture.yaml")).unwrap();
    let tmp = tempfile::Builder::new().prefix("fairway-sim-protect-").tempdir().unwrap();
    let dir = tmp.path();
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let preemptions = |protection: &str| {
        let text = base.replace("../fixtures/", &format!("{}/fixtures/", fixtures.display()));
        let path = dir.join("protected.yaml");
        std::fs::write(&path, format!("{text}\n{protection}\n")).unwrap();
        let s = scenario::load(&path, &Overrides::default()).unwrap_or_else(|e| panic!("{e}"));
        let runs = run_all(&s);
        let fairway = runs.iter().find(|r| r.policy == "fairway").expect("fairway ran");
        fairway.records.iter().map(|r| r.preemptions).sum::<u32>()
    };
    let none = preemptions("");
    assert!(none > 0, "the excerpt preempts without protection");
    let all_tiers = |min_run: u64| {
        format!(
            "preemption_protection:\n  low: {{ min_run_seconds: {min_run} }}\n  medium: {{ min_run_seconds: {min_run} }}\n  high: {{ min_run_seconds: {min_run} }}"
        )
    };
    assert_eq!(preemptions(&all_tiers(100_000_000)), 0, "no run reaches a minimum that long");
    // A 10-minute minimum changes which runs are taken (not always fewer of them: a
    // protected run's place may be taken by several others).
    let short = preemptions(&all_tiers(600));
    assert_ne!(short, none, "a 10-minute minimum run changes the choices");
}

/// Weights hold over time: on 6 GPUs, alice (weight 1) and bob (weight 2) each keep a
/// backlog of 1-GPU jobs of 100 s; over the first 1,000 s bob starts twice as many jobs as
/// alice, with and without a memory of past usage.
#[test]
fn fair_share_weights_hold_over_time() {
    let tmp = tempfile::Builder::new().prefix("fairway-sim-weights-").tempdir().unwrap();
    let dir = tmp.path();
    let mut text =
        String::from("name: weights\nseed: 1\ncluster:\n  nodes: [{ name: n, gpus: 6, gpu_model: A100 }]\njobs:\n");
    for i in 0..60 {
        for tenant in ["alice", "bob"] {
            text += &format!(
                "  - {{ name: {tenant}-{i}, tenant: {{ project: {tenant} }}, priority: medium, resources: {{ gpus: 1 }}, \
                 command: [train], submit_seconds: 0, duration_seconds: 100 }}\n"
            );
        }
    }
    text += "policies:\n";
    // The hour twice, in each unit a file may use: the same policy.
    for (name, half_life) in
        [("now", "half_life_hours: 0"), ("hour", "half_life_hours: 1"), ("hour-s", "half_life_seconds: 3600")]
    {
        text += &format!(
            "  - {{ name: {name}, order: priority, preemption: true, fair_share: {{ {half_life}, \
             weights: [{{ project: bob, weight: 2 }}] }} }}\n"
        );
    }
    let path = dir.join("weights.yaml");
    std::fs::write(&path, text).unwrap();
    let s = scenario::load(&path, &Overrides::default()).unwrap_or_else(|e| panic!("{e}"));
    let half_lives: Vec<_> = s.policies.iter().map(|p| p.policy.fair_share.map(|f| f.half_life_ms)).collect();
    assert_eq!(half_lives, [Some(0), Some(3_600_000), Some(3_600_000)]);
    for run in run_all(&s) {
        let started_before = |tenant: &str, s: u64| {
            run.records
                .iter()
                .filter(|r| r.name.starts_with(tenant) && r.first_start_ms.is_some_and(|t| t < s * 1000))
                .count()
        };
        let (alice, bob) = (started_before("alice", 1_000), started_before("bob", 1_000));
        assert_eq!(alice + bob, 60, "{}: 6 GPUs, 10 rounds of 100 s", run.policy);
        assert!((19..=21).contains(&alice) && (39..=41).contains(&bob), "{}: alice {alice}, bob {bob}", run.policy);
    }
}

/// A scenario with one cohort of two projects on one 8-GPU node, under the given policies:
/// vision submits eight 1-GPU jobs of 100 s at 0, speech four at 10 (all medium).
fn cohort_scenario(policies: &str, members: &str) -> Result<Scenario, String> {
    let tmp = tempfile::Builder::new().prefix("fairway-sim-cohort-").tempdir().unwrap();
    let dir = tmp.path();
    let mut text = String::from(
        "name: cohort\nseed: 1\ncluster:\n  nodes: [{ name: n, gpus: 8, gpu_model: A100 }]\njob_defaults: { grace_seconds: 5 }\n",
    );
    text += &format!("cohorts:\n  - name: lab\n    members:\n{members}");
    text += "jobs:\n";
    for (tenant, count, at) in [("vision", 8, 0), ("speech", 4, 10)] {
        for i in 0..count {
            text += &format!(
                "  - {{ name: {tenant}-{i}, tenant: {{ project: {tenant} }}, priority: medium, resources: {{ gpus: 1 }}, \
                 command: [train], submit_seconds: {at}, duration_seconds: 100 }}\n"
            );
        }
    }
    text += &format!("policies:\n{policies}");
    let path = dir.join(format!("cohort-{}.yaml", text.len()));
    std::fs::write(&path, text).unwrap();
    scenario::load(&path, &Overrides::default()).map_err(|e| e.to_string())
}

const LAB: &str =
    "      - { project: vision, nominal: { gpus: 4 } }\n      - { project: speech, nominal: { gpus: 4 } }\n";

/// Borrowing against hard caps, hand-checked. With the cohort, vision runs all eight jobs
/// at once (four borrowed from idle speech); speech's four jobs at 10 s are within its
/// nominal quota, so each reclaims one of vision's borrowed jobs (5 s of grace: speech
/// starts at 15). With the nominal quotas as hard caps (nothing lent), vision's second four
/// wait until 100 s beside four GPUs idle for the first 10 s.
#[test]
fn a_cohort_lends_idle_quota_and_reclaims_it() {
    let policies = "  - { name: lend, order: priority, preemption: true }\n  \
                    - { name: caps, order: priority, preemption: true, nominal_quotas: hard_caps }\n";
    let s = cohort_scenario(policies, LAB).unwrap();
    let runs = run_all(&s);
    let (lend, caps) = (&runs[0], &runs[1]);
    let first_starts = |run: &RunResult, tenant: &str| {
        let mut t: Vec<u64> = run
            .records
            .iter()
            .filter(|r| r.name.starts_with(tenant))
            .map(|r| r.first_start_ms.expect("started") / 1000)
            .collect();
        t.sort_unstable();
        t
    };
    assert_eq!(first_starts(lend, "vision"), [0; 8]);
    assert_eq!(first_starts(lend, "speech"), [15; 4]);
    let preempted: Vec<&str> = lend.records.iter().filter(|r| r.preemptions > 0).map(|r| &*r.name).collect();
    assert_eq!(preempted.len(), 4, "{preempted:?}");
    assert!(preempted.iter().all(|n| n.starts_with("vision")), "{preempted:?}");
    // All of the same tier: each was a reclaim, and the summary counts them so.
    let summary = |run: &RunResult| fairway_sim::metrics::summarize(run).cluster;
    assert_eq!((summary(lend).preemptions_total, summary(lend).reclaims_total), (4, 4));
    assert_eq!(first_starts(caps, "vision"), [0, 0, 0, 0, 100, 100, 100, 100]);
    assert_eq!(first_starts(caps, "speech"), [10; 4]);
    assert!(caps.records.iter().all(|r| r.preemptions == 0));
}

/// A lending limit keeps part of a member's quota for it: speech lends 2 of its 4 GPUs, so
/// vision borrows only two, and speech's first two jobs start at once without reclaiming.
#[test]
fn a_lending_limit_keeps_quota_for_its_owner() {
    let members = "      - { project: vision, nominal: { gpus: 4 } }\n      \
                   - { project: speech, nominal: { gpus: 4 }, lending_limit: { gpus: 2 } }\n";
    let s = cohort_scenario("  - { name: lend, order: priority, preemption: true }\n", members).unwrap();
    let run = &run_all(&s)[0];
    let vision_at_0 =
        run.records.iter().filter(|r| r.name.starts_with("vision") && r.first_start_ms == Some(0)).count();
    assert_eq!(vision_at_0, 6);
    let speech_at_10 =
        run.records.iter().filter(|r| r.name.starts_with("speech") && r.first_start_ms == Some(10_000)).count();
    assert_eq!(speech_at_10, 2, "two on the GPUs kept for speech, two reclaimed");
}

#[test]
fn impossible_cohorts_and_modes_name_the_field() {
    let lend = "  - { name: lend, order: priority, preemption: true }\n";
    let over = "      - { project: vision, nominal: { gpus: 4 }, lending_limit: { gpus: 6 } }\n";
    let e = cohort_scenario(lend, over).unwrap_err();
    assert!(
        e.contains("cohorts[0].members[0].lending_limit.gpus") && e.contains("more than the nominal quota 4"),
        "{e}"
    );
    let twice =
        "      - { project: vision, nominal: { gpus: 4 } }\n      - { project: vision, nominal: { gpus: 2 } }\n";
    let e = cohort_scenario(lend, twice).unwrap_err();
    assert!(e.contains("cohorts[0].members[1].project") && e.contains("already a member"), "{e}");
    // A guarantee (nominal less lending limit) above the project's hard quota would sit idle.
    let kept = "      - { project: vision, nominal: { gpus: 4 }, lending_limit: { gpus: 1 } }\n";
    let capped =
        "  - { name: capped, order: priority, preemption: true, quotas: [{ project: vision, gpus_max: 2 }] }\n";
    let e = cohort_scenario(capped, kept).unwrap_err();
    assert!(
        e.contains("policies[0]")
            && e.contains("project vision keeps 3 gpus of its nominal 4 unlent, more than its hard quota of 2"),
        "{e}"
    );
    let ignored = "  - { name: capped, order: priority, preemption: true, quotas: [{ project: vision, gpus_max: 2 }], nominal_quotas: ignore }\n";
    assert!(cohort_scenario(ignored, kept).is_ok(), "without places there is no guarantee");
    let within =
        "  - { name: capped, order: priority, preemption: true, quotas: [{ project: vision, gpus_max: 3 }] }\n";
    assert!(cohort_scenario(within, kept).is_ok(), "a guarantee of 3 within a quota of 3");
    let bad_mode = "  - { name: x, order: priority, preemption: true, nominal_quotas: lend }\n";
    let e = cohort_scenario(bad_mode, LAB).unwrap_err();
    assert!(e.contains("policies[0].nominal_quotas") && e.contains("cohort, hard_caps or ignore"), "{e}");
}

/// A scenario from its text, written to a temporary file.
fn inline_scenario(name: &str, text: &str) -> Result<Scenario, String> {
    let tmp = tempfile::Builder::new().prefix(&format!("fairway-sim-{name}-")).tempdir().unwrap();
    let dir = tmp.path();
    let path = dir.join(format!("{name}-{}.yaml", text.len()));
    std::fs::write(&path, text).unwrap();
    scenario::load(&path, &Overrides::default()).map_err(|e| e.to_string())
}

/// Reservations against gang starvation, hand-checked in outline: one 8-GPU node, a 1-GPU
/// job of 100 s every 14 s (about seven run at once), and an
/// 8-GPU job of 100 s at 100 s and 600 s, all one priority. Under plain backfill the small
/// jobs keep taking every GPU that frees up and the gangs wait for the stream to end; with
/// one reservation (a 100 s default estimate) each gang starts within about 100 s, and
/// useful utilization stays as high.
#[test]
fn reservations_let_gangs_start_through_a_stream_of_small_jobs() {
    let mut text = String::from(
        "name: gangs\nseed: 1\ncluster:\n  nodes: [{ name: n, gpus: 8, gpu_model: A100 }]\njob_defaults: { grace_seconds: 0 }\njobs:\n",
    );
    for i in 0..100 {
        text += &format!(
            "  - {{ name: small-{i}, tenant: {{ project: p }}, priority: medium, resources: {{ gpus: 1 }}, \
             command: [train], submit_seconds: {}, duration_seconds: 100 }}\n",
            i * 14
        );
    }
    for (i, at) in [100, 600].into_iter().enumerate() {
        text += &format!(
            "  - {{ name: gang-{i}, tenant: {{ project: p }}, priority: medium, resources: {{ gpus: 8 }}, \
             command: [train], submit_seconds: {at}, duration_seconds: 100 }}\n"
        );
    }
    text += "policies:\n  - { name: backfill, order: priority, preemption: false }\n  \
             - { name: reserve, order: priority, preemption: false, reservations: { count: 1, default_runtime_hours: 0.0277778 } }\n";
    let s = inline_scenario("gangs", &text).unwrap();
    let runs = run_all(&s);
    let gang_wait = |run: &RunResult| {
        let waits: Vec<u64> = run
            .records
            .iter()
            .filter(|r| r.name.starts_with("gang"))
            .map(|r| (r.first_start_ms.expect("every gang starts") - r.submit_ms) / 1000)
            .collect();
        waits.into_iter().max().unwrap()
    };
    let (plain, reserved) = (gang_wait(&runs[0]), gang_wait(&runs[1]));
    assert!(plain > 500, "without a reservation the gangs wait for the stream: {plain} s");
    assert!(reserved <= 200, "with one, a gang waits for the jobs running when it came: {reserved} s");
    let makespan = |run: &RunResult| run.records.iter().filter_map(|r| r.finish_ms).max().unwrap();
    assert!(makespan(&runs[1]) <= makespan(&runs[0]) + 100_000, "reserving costs at most one gang's run of idle time");
}

#[test]
fn bad_reservations_name_the_field() {
    let base = "name: r\ncluster:\n  nodes: [{ name: n, gpus: 8, gpu_model: A100 }]\njobs:\n  - { name: a, tenant: { project: p }, resources: { gpus: 1 }, command: [x], submit_seconds: 0, duration_seconds: 1 }\npolicies:\n";
    for (policy, field) in [
        (
            "  - { name: x, order: priority, preemption: false, reservations: { count: 0, default_runtime_hours: 1 } }\n",
            "policies[0].reservations.count",
        ),
        (
            "  - { name: x, order: priority, preemption: false, reservations: { default_runtime_hours: -1 } }\n",
            "policies[0].reservations.default_runtime_hours",
        ),
        (
            "  - { name: x, order: fifo, preemption: false, backfill: false, reservations: { default_runtime_hours: 1 } }\n",
            "policies[0].reservations",
        ),
        (
            "  - { name: x, order: priority, preemption: false, reservations: { default_runtime_hours: 1, default_runtime_seconds: 60 } }\n",
            "policies[0].reservations.default_runtime_seconds: give default_runtime_seconds or default_runtime_hours, not both",
        ),
    ] {
        let e = inline_scenario("bad-reservations", &format!("{base}{policy}")).unwrap_err();
        assert!(e.contains(field), "{policy}: {e}");
    }
}

/// The sharing anomaly, hand-checked: a cohort of vision and speech (4 GPUs each) on 8 GPUs.
/// Vision submits 2 jobs of 100 s, speech 10, all at 0 (speech's first in queue order: the
/// jobs are ordered by name at one submit time). Alone on 4 GPUs vision waits 0 and speech
/// 4 × 0 + 4 × 100 + 2 × 200 = 800 s over 10 jobs (80 s). Shared, 8 of speech's start at 0
/// (4 on vision's idle quota), and vision's 2 reclaim 2 of them in the same cycle: those two
/// starts are taken back (preemption rule 8), so 6 of speech's start at 0 and its last 4 at
/// 100 s: 400 s over 10 jobs (40 s). Speech is 40 s better off for sharing, vision no worse.
#[test]
fn the_sharing_anomaly_compares_each_member_with_its_private_cluster() {
    let mut text = String::from(
        "name: anomaly\nseed: 1\ncluster:\n  nodes: [{ name: n, gpus: 8, gpu_model: A100 }]\njob_defaults: { grace_seconds: 0 }\n\
         cohorts:\n  - name: lab\n    members:\n      - { project: vision, nominal: { gpus: 4 } }\n      - { project: speech, nominal: { gpus: 4 } }\njobs:\n",
    );
    for (tenant, count) in [("vision", 2), ("speech", 10)] {
        for i in 0..count {
            text += &format!(
                "  - {{ name: {tenant}-{i}, tenant: {{ project: {tenant} }}, priority: medium, resources: {{ gpus: 1 }}, \
                 command: [train], submit_seconds: 0, duration_seconds: 100 }}\n"
            );
        }
    }
    text += "policies: [fairway]\n";
    let s = inline_scenario("anomaly", &text).unwrap();
    let shared = &run_all(&s)[0];
    let p = &s.policies[0];
    let config = s.engine_config(p, CheckLevel::EveryCycle);
    let anomalies = fairway_sim::anomaly::sharing_anomaly(&s, p, shared, &config).unwrap();
    let got: Vec<(String, u32, usize, f64, f64)> = anomalies
        .iter()
        .map(|a| (a.tenant.clone(), a.nominal_gpus, a.jobs, a.shared_wait_mean_s, a.alone_wait_mean_s))
        .collect();
    assert_eq!(got, [("speech".to_string(), 4, 10, 40.0, 80.0), ("vision".to_string(), 4, 2, 0.0, 0.0)]);
    assert_eq!(anomalies[0].anomaly_s(), -40.0);
    // The two starts taken back are neither preemptions nor runs.
    assert_eq!((shared.core_counters.starts_taken_back, shared.core_counters.preemptions), (2, 0));
}

/// The sharing anomaly of a gang behind a backlog, and fair sharing removing it, hand-checked
/// (no preemption, so only the order decides): a cohort of gang and sweep (4 GPUs each) on
/// two nodes of 4. At 0, gang's g0 (2 GPUs, 100 s) and six of sweep's thirty 1-GPU jobs of
/// 100 s start; gang's g1 (4 GPUs) comes at 50 s. At 100 s everything has ended.
/// - In submit order, sweep's backlog (submitted at 0) goes before g1 and takes all 8 GPUs
///   (4 of them lent by gang) at 100, 200 and 300 s; g1 starts at 400 s. Gang waits
///   (0 + 350) / 2 = 175 s, against (0 + 50) / 2 = 25 s alone on 4 GPUs: 150 s worse off.
///   Sweep waits (6 × 0 + 8 × 100 + 8 × 200 + 8 × 300) / 30 = 160 s.
/// - With fair sharing, gang holds nothing at 100 s and sweep has held 6 GPUs: g1 goes first
///   and starts at 100 s, as alone. Sweep's last four start at 400 s, so it waits
///   (4 × 100 + 8 × 200 + 8 × 300 + 4 × 400) / 30 = 200 s, still better off than alone
///   (326.7 s: 4 GPUs, 4 jobs per 100 s, the last 2 at 700 s).
#[test]
fn fair_sharing_serves_a_gang_tenant_as_well_as_alone() {
    let mut text = String::from(
        "name: anomaly\nseed: 1\ncluster:\n  nodes: [{ name: n, count: 2, gpus: 4, gpu_model: A100 }]\njob_defaults: { grace_seconds: 0 }\n\
         cohorts:\n  - name: lab\n    members:\n      - { project: gang, nominal: { gpus: 4 } }\n      - { project: sweep, nominal: { gpus: 4 } }\njobs:\n",
    );
    for (name, gpus, at) in [("g0", 2, 0), ("g1", 4, 50)] {
        text += &format!(
            "  - {{ name: {name}, tenant: {{ project: gang }}, priority: medium, resources: {{ gpus: {gpus} }}, \
             command: [train], submit_seconds: {at}, duration_seconds: 100 }}\n"
        );
    }
    for i in 0..30 {
        text += &format!(
            "  - {{ name: s{i:02}, tenant: {{ project: sweep }}, priority: medium, resources: {{ gpus: 1 }}, \
             command: [train], submit_seconds: 0, duration_seconds: 100 }}\n"
        );
    }
    text += "policies:\n  - { name: cohort, order: priority, preemption: false }\n  \
             - { name: cohort-fair, order: priority, preemption: false, fair_share: { half_life_hours: 24 } }\n";
    let s = inline_scenario("anomaly", &text).unwrap();
    let runs = run_all(&s);
    let mut got = Vec::new();
    for (p, shared) in s.policies.iter().zip(&runs) {
        let config = s.engine_config(p, CheckLevel::EveryCycle);
        for a in fairway_sim::anomaly::sharing_anomaly(&s, p, shared, &config).unwrap() {
            got.push((p.name.clone(), a.tenant.clone(), a.shared_wait_mean_s, a.alone_wait_mean_s, a.anomaly_s()));
        }
    }
    let row = |p: &str, t: &str, shared: f64, alone: f64| (p.to_string(), t.to_string(), shared, alone, shared - alone);
    let sweep_alone = 9_800.0 / 30.0;
    assert_eq!(
        got,
        [
            row("cohort", "gang", 175.0, 25.0),
            row("cohort", "sweep", 160.0, sweep_alone),
            row("cohort-fair", "gang", 25.0, 25.0),
            row("cohort-fair", "sweep", 200.0, sweep_alone),
        ]
    );
}

/// Start-time estimates at submit, hand-checked: one node of 2 GPUs, six jobs of 1 GPU and
/// 100 s of one tenant. At 0, a0 and a1 start and a2 waits: nothing is known of the tenant's
/// run times, so a0 and a1 are expected to run the default hour and a2 to start at 3,600 s;
/// it starts at 100 s (3,500 s off). At 300 s the tenant has three runs of 100 s behind it:
/// b0 and b1 start, and b2 is expected to start when they have run 100 s, at 400 s, which
/// is when it starts. The four that started at once were told so exactly.
#[test]
fn start_time_estimates_are_measured_against_the_starts() {
    let mut text =
        String::from("name: eta\nseed: 1\ncluster:\n  nodes: [{ name: n, gpus: 2, gpu_model: A100 }]\njobs:\n");
    for (prefix, at) in [("a", 0), ("b", 300)] {
        for i in 0..3 {
            text += &format!(
                "  - {{ name: {prefix}{i}, tenant: {{ project: vision }}, priority: medium, resources: {{ gpus: 1 }}, \
                 command: [train], submit_seconds: {at}, duration_seconds: 100 }}\n"
            );
        }
    }
    text += "policies: [priority]\n";
    let s = inline_scenario("eta", &text).unwrap();
    let p = &s.policies[0];
    let mut config = s.engine_config(p, CheckLevel::EveryCycle);
    config.eta_jobs_max = fairway_sim::engine::ETA_JOBS_MAX;
    let run = simulate(&p.name, &s.jobs, &s.nodes, &p.quotas, &config, &mut |_, _| {}).unwrap();
    let etas: Vec<(String, fairway_sim::metrics::SubmitEta)> =
        run.records.iter().map(|r| (r.name.to_string(), r.eta_at_submit)).collect();
    use fairway_sim::metrics::SubmitEta::At;
    let expected = [("a0", 0), ("a1", 0), ("a2", 3_600_000), ("b0", 300_000), ("b1", 300_000), ("b2", 400_000)];
    assert_eq!(etas, expected.map(|(n, t)| (n.to_string(), At(t))));
    let e = &SimReport::from_runs("eta", 1, std::slice::from_ref(&run)).policies[0].all.eta;
    assert_eq!((e.jobs, e.without_estimate, e.waited), (6, 0, 2));
    assert_eq!((e.error_seconds.p50, e.error_seconds.p90), (Some(0.0), Some(3_500.0)));
    assert_eq!((e.error_of_wait.p50, e.error_of_wait.p90), (Some(0.0), Some(35.0)));
    // Without the measurement, nothing is recorded.
    let plain = &run_all(&s)[0];
    assert!(plain.records.iter().all(|r| r.eta_at_submit == fairway_sim::metrics::SubmitEta::NotMeasured));
}

/// The shortest-job-first oracle, hand-checked: one GPU, `first` runs 0–100 s; at 10 s three
/// jobs of one priority arrive, 300, 100 and 200 s long (`a-300`, `b-100`, `c-200`: jobs of
/// one submit time are ordered by name). Priority order starts them by name, at 100, 400 and
/// 500 s; the oracle knows their durations and starts the shortest first: `b-100` at 100 s,
/// `c-200` at 200 s, `a-300` at 400 s.
#[test]
fn the_sjf_oracle_starts_the_shortest_true_duration_first() {
    let mut text =
        String::from("name: sjf\nseed: 1\ncluster:\n  nodes: [{ name: n, gpus: 1, gpu_model: A100 }]\njobs:\n");
    for (name, at, seconds) in [("first", 0, 100), ("a-300", 10, 300), ("b-100", 10, 100), ("c-200", 10, 200)] {
        text += &format!(
            "  - {{ name: {name}, tenant: {{ project: p }}, priority: medium, resources: {{ gpus: 1 }}, \
             command: [train], submit_seconds: {at}, duration_seconds: {seconds} }}\n"
        );
    }
    text += "policies: [priority, { name: oracle, order: sjf-oracle, preemption: true }]\n";
    let s = inline_scenario("sjf", &text).unwrap();
    let runs = run_all(&s);
    let starts = |run: &RunResult| -> Vec<u64> {
        ["a-300", "b-100", "c-200"].iter().map(|n| record(run, n).first_start_ms.unwrap() / 1000).collect()
    };
    assert_eq!(starts(&runs[0]), [100, 400, 500]);
    assert_eq!(starts(&runs[1]), [400, 100, 200]);
    let e = inline_scenario("sjf-bad", &text.replace("order: sjf-oracle", "order: shortest")).unwrap_err();
    assert!(e.contains("policies[1].order") && e.contains("sjf-oracle"), "{e}");
}

/// Shares of one GPU in the simulator, with the scenario's placement policy and a policy
/// that keeps the core's own scoring (see the fixture for the hand-checked figures).
#[test]
fn shares_run_side_by_side_and_count_in_thousandths() {
    let s = load("tiny-shares.yaml", &Overrides::default());
    let packing: Vec<_> = s.policies.iter().map(|p| p.policy.packing.map(|p| p.name())).collect();
    assert_eq!(packing, [Some("gpu-packing"), None]);
    let runs = run_all(&s);
    let placements: Vec<&str> = runs.iter().map(|r| r.placement.as_str()).collect();
    assert_eq!(placements, ["gpu-packing", "core"], "what each run reports it placed by");
    for run in runs {
        let start = |name: &str| record(&run, name).first_start_ms;
        assert_eq!((start("a1"), start("a2"), start("b")), (Some(0), Some(0), Some(0)), "{}", run.policy);
        assert_eq!(start("c"), Some(60_000), "{}", run.policy);
        assert_eq!(record(&run, "c").finish_ms, Some(90_000), "{}", run.policy);
        assert_eq!((record(&run, "a1").gpu_milli, record(&run, "b").gpu_milli), (500, 1000));
        let allocated = fairway_sim::metrics::allocated_gpu_ms(&run.util, run.end_ms, 0, run.end_ms);
        assert_eq!(allocated, 135_000, "{}: 2 GPUs for 60 s, then half a GPU for 30 s", run.policy);
    }
}

#[test]
fn image_pulls_delay_starts_and_locality_avoids_them() {
    let s = load("tiny-images.yaml", &Overrides::default());
    let runs = run_all(&s);
    let finish = |run: &RunResult, name: &str| record(run, name).finish_ms;
    let waits = |run: &RunResult, name: &str| record(run, name).image_waits_ms.clone();
    let [with, without] = &runs[..] else { panic!("two policies") };
    // The first two jobs pull on both nodes either way.
    for run in [with, without] {
        assert_eq!((finish(run, "a"), finish(run, "b")), (Some(1_100_000), Some(1_100_000)), "{}", run.policy);
        assert_eq!((waits(run, "a"), waits(run, "b")), (vec![100_000], vec![100_000]), "{}", run.policy);
    }
    assert_eq!((waits(with, "c"), waits(with, "d")), (vec![0], vec![0]));
    assert_eq!((finish(with, "c"), finish(with, "d")), (Some(3_000_000), Some(5_000_000)));
    assert_eq!((waits(without, "c"), waits(without, "d")), (vec![100_000], vec![100_000]));
    assert_eq!((finish(without, "c"), finish(without, "d")), (Some(3_100_000), Some(5_100_000)));

    let report = SimReport::from_runs(&s.name, s.seed, &runs);
    // Neither policy names a placement, nor does the scenario: the default.
    assert!(report.policies.iter().all(|p| p.placement == "fairway"), "the default placement is fairway");
    let images = |i: usize| &report.policies[i].all.images;
    assert_eq!((images(0).starts, images(0).starts_waited), (4, 2));
    assert_eq!(images(0).wait_seconds.mean, Some(50.0));
    assert_eq!((images(1).starts, images(1).starts_waited), (4, 4));
    assert_eq!(images(1).wait_seconds.mean, Some(100.0));
    // GPU time held while pulling is its own figure, not preemption's loss.
    assert!((images(1).gpu_hours_waiting - 400.0 / 3600.0).abs() < 1e-9);
    assert_eq!(report.policies[1].cluster.gpu_hours_lost, 0.0);
}

/// `examples/philly-images.yaml` on the committed Philly excerpt: every run is checked
/// cycle by cycle, and locality pulls less than the same policy without it.
#[test]
fn the_image_example_pulls_less_with_locality_on_the_philly_excerpt() {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/philly-images.yaml");
    let overrides = Overrides {
        trace_path: Some(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/philly_pollux_sample.csv")),
        ..Overrides::default()
    };
    let s = scenario::load(&example, &overrides).unwrap();
    let images = s.images.as_ref().expect("the example turns the image model on");
    assert_eq!((images.pull_ms, images.node_cache_max, images.prepulled.len()), (180_000, 4, 1));
    let runs = run_all(&s);
    let report = SimReport::from_runs(&s.name, s.seed, &runs);
    let pulled = |i: usize| report.policies[i].all.images.starts_waited;
    assert_eq!(report.policies[1].policy, "fairway-no-locality");
    assert!(report.policies[0].all.images.starts > 400);
    assert!(pulled(0) < pulled(1), "locality {} vs none {}", pulled(0), pulled(1));
    // No start waits longer than one pull.
    assert!(runs.iter().flat_map(|r| &r.records).flat_map(|r| &r.image_waits_ms).all(|&w| w <= 180_000));
}

/// A sweep over seeds reports image pulls when a run modelled them, and only then.
#[test]
fn a_sweep_reports_image_pulls_only_when_modelled() {
    use fairway_sim::sweep::SeedSweep;
    let with = load("tiny-images.yaml", &Overrides::default());
    let report = SimReport::from_runs(&with.name, with.seed, &run_all(&with));
    let sweep = SeedSweep::from_reports(&[1, 1], &[report.clone(), report]);
    let pulled = sweep.figures.iter().find(|f| f.figure == "starts that waited for an image pull").expect("reported");
    let means: Vec<f64> = pulled.policies.iter().map(|s| s.as_ref().unwrap().mean).collect();
    assert_eq!(means, [50.0, 100.0]);
    let without = load("tiny-preemption.yaml", &Overrides::default());
    let report = SimReport::from_runs(&without.name, without.seed, &run_all(&without));
    let sweep = SeedSweep::from_reports(&[1], &[report]);
    assert!(sweep.figures.iter().all(|f| !f.figure.contains("image")));
}

#[test]
fn a_pull_under_way_is_shared_and_a_gang_waits_for_its_slowest_node() {
    let s = load("tiny-images-gang.yaml", &Overrides::default());
    let run = &run_all(&s)[0];
    let got = |name: &str| {
        let r = record(run, name);
        (r.first_start_ms, r.image_waits_ms.clone(), r.finish_ms)
    };
    assert_eq!(got("jx"), (Some(0), vec![100_000], Some(1_100_000)));
    assert_eq!(got("jy"), (Some(50_000), vec![50_000], Some(1_100_000)));
    assert_eq!(got("gang"), (Some(2_000_000), vec![100_000], Some(3_100_000)));
    // The gang held its 4 GPUs for the 100 s of n1's pull, and jy its GPU while waiting.
    assert_eq!(record(run, "gang").image_wait_gpu_ms, 400_000);
    assert_eq!(record(run, "jy").image_wait_gpu_ms, 50_000);
}

/// A preemptor does not wait out its victim's grace period when GPUs free elsewhere first
/// (the core's cycle step 3b), hand-checked: two nodes of 4 GPUs; `low-a` (low, 1,000 s) and
/// `done-soon` (high, 20 s) fill them at 0; `urgent` (high, 4 GPUs) comes at 10 and
/// preempts `low-a`, whose grace period would end at 40. `done-soon` ends at 20 and `urgent`
/// starts on its GPUs then. `low-a` stops all the same at 40 and restarts on its own GPUs.
#[test]
fn a_preemptor_starts_where_gpus_free_before_its_victims_have_gone() {
    let text = "name: move\nseed: 1\ncluster:\n  nodes: [{ name: n, count: 2, gpus: 4, gpu_model: A100 }]\n\
                job_defaults: { grace_seconds: 30 }\njobs:\n\
                  - { name: low-a, tenant: { project: p }, priority: low, resources: { gpus: 4 }, command: [t], submit_seconds: 0, duration_seconds: 1000 }\n\
                  - { name: done-soon, tenant: { project: p }, priority: high, resources: { gpus: 4 }, command: [t], submit_seconds: 0, duration_seconds: 20 }\n\
                  - { name: urgent, tenant: { project: p }, priority: high, resources: { gpus: 4 }, command: [t], submit_seconds: 10, duration_seconds: 50 }\n\
                policies: [fairway]\n";
    let s = inline_scenario("move", text).unwrap();
    let runs = run_all(&s);
    let run = &runs[0];
    assert_eq!(times(run, "urgent"), (20, 70), "urgent starts when done-soon ends, not at low-a's deadline (40)");
    let low = record(run, "low-a");
    assert_eq!((low.first_start_ms, low.preemptions), (Some(0), 1), "low-a was told to stop and stops");
    assert_eq!(low.queued_ms, 0, "low-a restarts at 40 on the GPUs it freed");
    let summary = fairway_sim::metrics::summarize(run);
    assert_eq!(summary.cluster.preemptors_moved, 1);
    assert_eq!(summary.cluster.preemptions_total, 1);
}
