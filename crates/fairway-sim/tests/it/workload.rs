//! Tests for `fairway_sim::workload`: trace loaders (on committed fixture excerpts), gang splits,
//! tier maps, bad-row errors, the synthetic generator and the transforms.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use fairway_sim::workload::{
    DurationDist, GangSplit, GpuShares, ImagesBy, JobClass, LoadReport, MissingDeletion, OpenbOptions, PolluxFilter,
    SyntheticSpec, TierMap, TraceJob, TraceSource, Transform, Weighted, WorkloadError, WorkloadSpec, assign_images,
    assign_tiers, compress_time, generate, load_openb_nodes, load_openb_pods, load_philly_chronus, load_philly_pollux,
    load_philly_vc_quotas, normalise_start, reason, sort_jobs, take, window,
};
use jiff::civil;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn fixture(name: &str) -> PathBuf {
    fixtures().join(name)
}

/// A file in a per-test temp folder (fixed names, so repeated runs reuse them; concurrent runs
/// write the same contents).
fn temp_csv(test: &str, contents: &str) -> PathBuf {
    let dir = std::env::temp_dir().join("fairway-workload-tests").join(test);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("input.csv");
    std::fs::write(&path, contents).unwrap();
    path
}

fn job<'a>(jobs: &'a [TraceJob], name: &str) -> &'a TraceJob {
    jobs.iter().find(|j| j.name == name).unwrap_or_else(|| panic!("no job {name}"))
}

/// The invariants every load must keep.
fn check_invariants(jobs: &[TraceJob], report: &LoadReport) {
    assert_eq!(report.jobs_loaded, jobs.len() as u64);
    assert_eq!(report.rows_read, report.jobs_loaded + report.total_skipped(), "{report:?}");
    if let Some(first) = jobs.first() {
        assert_eq!(first.submit_ms, 0, "first job at 0");
    }
    for pair in jobs.windows(2) {
        assert!(
            (pair[0].submit_ms, &pair[0].name) < (pair[1].submit_ms, &pair[1].name),
            "sorted by (submit_ms, name) with unique names: {} / {}",
            pair[0].name,
            pair[1].name
        );
    }
    let names: BTreeSet<&str> = jobs.iter().map(|j| j.name.as_str()).collect();
    assert_eq!(names.len(), jobs.len(), "unique names");
    for j in jobs {
        assert!(j.duration_ms > 0, "{}", j.name);
        let share = (1..1000).contains(&j.gpu_milli) && j.gpus_per_replica == 0 && j.replicas == 1;
        assert!((j.gpus_per_replica >= 1 && j.gpu_milli == 0) || share, "{}", j.name);
        assert!(j.replicas >= 1, "{}", j.name);
    }
}

fn tier_counts(jobs: &[TraceJob]) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for j in jobs {
        *m.entry(j.tier.clone().unwrap_or_else(|| "<none>".into())).or_default() += 1;
    }
    m
}

fn counts(pairs: &[(&str, usize)]) -> BTreeMap<String, usize> {
    pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

// ---------------------------------------------------------------- Philly (Pollux)

#[test]
fn pollux_fixture_loads_sorted_with_exact_rows() {
    let (jobs, report) =
        load_philly_pollux(fixture("philly_pollux_sample.csv"), &GangSplit::default(), &PolluxFilter::default())
            .unwrap();
    check_invariants(&jobs, &report);
    assert_eq!(jobs.len(), 418);
    assert_eq!(report.rows_read, 418);
    assert!(report.skipped.is_empty());
    assert_eq!(report.adjusted_count(reason::GANG_SPLIT), 6);

    // The earliest row (2017-09-19 05:47:11) is data row 407 of the (unsorted) file.
    let first = &jobs[0];
    assert_eq!(
        first,
        &TraceJob {
            name: "pollux-000407".into(),
            submit_ms: 0,
            duration_ms: 1_336_914_000,
            gpus_per_replica: 1,
            gpu_milli: 0,
            replicas: 1,
            user: "6214e9".into(),
            project: "6214e9".into(),
            tier: None,
            gpu_model: None,
            cpu_millis: 0,
            memory_mib: 0,
            checkpoint_interval_ms: None,
            image: None,
        }
    );
    // Next: 2017-09-24 14:11:50, 462,279 s later.
    assert_eq!(jobs[1].name, "pollux-000190");
    assert_eq!(jobs[1].submit_ms, 462_279_000);
    assert_eq!(jobs[1].duration_ms, 210_000);
    assert_eq!(jobs.last().unwrap().name, "pollux-000318");
    assert_eq!(jobs.last().unwrap().submit_ms, 8_117_833_000);

    let total_gpus: u64 = jobs.iter().map(TraceJob::total_gpus).sum();
    assert_eq!(total_gpus, 792);
    let total_ms: u64 = jobs.iter().map(|j| j.duration_ms).sum();
    assert_eq!(total_ms, 3_680_571_000);
    let projects: BTreeSet<&str> = jobs.iter().map(|j| j.project.as_str()).collect();
    assert_eq!(projects.len(), 11);
    assert_eq!(jobs.iter().filter(|j| j.project == "6214e9").count(), 200);

    // The six multi-node rows and their gangs.
    for (name, gpus, replicas, per) in [
        ("pollux-000012", 32, 4, 8),
        ("pollux-000025", 16, 2, 8),
        ("pollux-000052", 12, 2, 6),
        ("pollux-000053", 24, 3, 8),
        ("pollux-000120", 128, 16, 8),
        ("pollux-000123", 64, 8, 8),
    ] {
        let j = job(&jobs, name);
        assert_eq!((j.replicas, j.gpus_per_replica), (replicas, per), "{name}");
        assert_eq!(j.total_gpus(), gpus);
    }
    assert_eq!(job(&jobs, "pollux-000012").project, "2869ce");
    assert_eq!(job(&jobs, "pollux-000012").duration_ms, 55_625_000);
}

#[test]
fn pollux_window_and_max_jobs() {
    let from = civil::date(2017, 10, 15).at(0, 0, 0, 0);
    let to = civil::date(2017, 11, 1).at(0, 0, 0, 0);
    let filter = PolluxFilter { from: Some(from), to: Some(to), max_jobs: None };
    let path = fixture("philly_pollux_sample.csv");
    let (jobs, report) = load_philly_pollux(&path, &GangSplit::default(), &filter).unwrap();
    check_invariants(&jobs, &report);
    assert_eq!(jobs.len(), 119);
    assert_eq!(report.skipped_count(reason::OUTSIDE_WINDOW), 299);
    // 2017-10-15 01:53:19, names stay those of the full file.
    assert_eq!(jobs[0].name, "pollux-000278");
    assert_eq!(jobs[0].duration_ms, 7_241_000);
    assert_eq!(jobs[0].project, "6c71a0");

    let filter = PolluxFilter { max_jobs: Some(50), ..filter };
    let (jobs50, report) = load_philly_pollux(&path, &GangSplit::default(), &filter).unwrap();
    check_invariants(&jobs50, &report);
    assert_eq!(jobs50.len(), 50);
    assert_eq!(report.skipped_count(reason::OUTSIDE_WINDOW), 299);
    assert_eq!(report.skipped_count(reason::BEYOND_MAX_JOBS), 69);
    assert_eq!(jobs50[..], jobs[..50]);
    assert_eq!(jobs50[49].name, "pollux-000241");
    assert_eq!(jobs50[49].submit_ms, 535_716_000);
}

#[test]
fn vc_quotas() {
    let q = load_philly_vc_quotas(fixture("philly_vc.csv"), 8).unwrap();
    assert_eq!(q.len(), 11);
    assert_eq!(q["6214e9"], 512);
    assert_eq!(q["ee9e8c"], 512);
    assert_eq!(q["7f04ca"], 256);
    assert_eq!(q["11cb48"], 128);
    assert_eq!(q["103959"], 64);
    assert_eq!(q.values().sum::<u32>(), 2816);
    let q4 = load_philly_vc_quotas(fixture("philly_vc.csv"), 4).unwrap();
    assert_eq!(q4["6214e9"], 256);
}

// ---------------------------------------------------------------- Philly (Chronus)

#[test]
fn chronus_fixture_loads_with_tiers_and_skips_zero_gpu() {
    let (jobs, report) =
        load_philly_chronus(fixture("chronus_mix1_head300.csv"), &TierMap::chronus_default(), &GangSplit::default())
            .unwrap();
    check_invariants(&jobs, &report);
    assert_eq!(report.rows_read, 300);
    assert_eq!(jobs.len(), 299);
    assert_eq!(report.skipped, vec![(reason::ZERO_GPU.to_string(), 1)]);
    assert!(!jobs.iter().any(|j| j.name == "chronus-000195"), "0-GPU row");

    // Earliest: job 31, submit_time 2 s (→ 0 ms), 82 s, vc_7f04ca, best effort.
    let first = &jobs[0];
    assert_eq!(first.name, "chronus-000031");
    assert_eq!(first.submit_ms, 0);
    assert_eq!(first.duration_ms, 82_000);
    assert_eq!((first.replicas, first.gpus_per_replica), (1, 1));
    assert_eq!(first.project, "7f04ca");
    assert_eq!(first.user, "7f04ca");
    assert_eq!(first.tier.as_deref(), Some("low"));
    assert_eq!(jobs.last().unwrap().submit_ms, 19_893_000);

    assert_eq!(tier_counts(&jobs), counts(&[("high", 205), ("low", 94)]));
    let gang = job(&jobs, "chronus-000131");
    assert_eq!((gang.replicas, gang.gpus_per_replica), (4, 8));
    assert_eq!(report.adjusted_count(reason::GANG_SPLIT), 1);
    let projects: BTreeSet<&str> = jobs.iter().map(|j| j.project.as_str()).collect();
    assert_eq!(projects.len(), 11);
    // Chronus VCs match the quota file once `vc_` is dropped.
    let quotas = load_philly_vc_quotas(fixture("philly_vc.csv"), 8).unwrap();
    assert!(projects.iter().all(|p| quotas.contains_key(*p)));
}

#[test]
fn chronus_tier_map_default_and_custom() {
    let path = fixture("chronus_mix2_head100.csv");
    let (jobs, _) = load_philly_chronus(&path, &TierMap::chronus_default(), &GangSplit::default()).unwrap();
    assert_eq!(tier_counts(&jobs), counts(&[("medium", 63), ("high", 28), ("low", 9)]));

    let custom = TierMap::from_pairs([("strict", "critical"), ("soft", "normal"), ("best", "scavenger")]);
    let (jobs, _) = load_philly_chronus(&path, &custom, &GangSplit::default()).unwrap();
    assert_eq!(tier_counts(&jobs), counts(&[("normal", 63), ("critical", 28), ("scavenger", 9)]));

    // A label missing from the map is an error naming the line and field.
    let partial = TierMap::from_pairs([("strict", "high"), ("best", "low")]);
    let err = load_philly_chronus(&path, &partial, &GangSplit::default()).unwrap_err();
    match &err {
        WorkloadError::Field { line, field, value, .. } => {
            assert_eq!(field, "job_type");
            assert_eq!(value, "soft");
            assert_eq!(*line, 2, "the first data row of MIX2 is soft");
        }
        other => panic!("unexpected error {other:?}"),
    }
    assert!(err.to_string().contains("chronus_mix2_head100.csv:2:"), "{err}");
}

// ---------------------------------------------------------------- Alibaba openb

#[test]
fn openb_pods_fixture_shares_rounding_and_skips() {
    // Rounded up, as before shares: 34 pods asking for part of one GPU take a whole one.
    let round_up = OpenbOptions { gpu_shares: GpuShares::RoundUp, ..OpenbOptions::default() };
    let (rounded, report) = load_openb_pods(fixture("openb_pods_sample.csv"), &round_up).unwrap();
    check_invariants(&rounded, &report);
    assert_eq!(report.adjusted_count(reason::FRACTIONAL_GPU_ROUNDED), 34);
    assert_eq!(rounded.iter().filter(|j| j.gpu_milli > 0).count(), 0);

    let (jobs, report) = load_openb_pods(fixture("openb_pods_sample.csv"), &OpenbOptions::default()).unwrap();
    check_invariants(&jobs, &report);
    assert_eq!(report.rows_read, 104);
    assert_eq!(jobs.len(), 97);
    assert_eq!(report.skipped_count(reason::ZERO_GPU), 6);
    assert_eq!(report.skipped_count(reason::NON_POSITIVE_LIFETIME), 1);
    assert_eq!(report.skipped.len(), 2);
    assert_eq!(report.adjusted_count(reason::FRACTIONAL_GPU_ROUNDED), 0);
    // The same 34 are shares of one GPU by default, the rest as loaded before.
    assert_eq!(jobs.iter().filter(|j| j.gpu_milli > 0).count(), 34);
    for (share, whole) in jobs.iter().zip(&rounded) {
        let expected = if share.gpu_milli > 0 {
            TraceJob { gpus_per_replica: 1, gpu_milli: 0, ..share.clone() }
        } else {
            share.clone()
        };
        assert_eq!(&expected, whole);
    }
    assert!(!jobs.iter().any(|j| j.name == "openb-pod-7285"));

    assert_eq!(
        jobs[0],
        TraceJob {
            name: "openb-pod-0000".into(),
            submit_ms: 0,
            duration_ms: 12_537_496_000,
            gpus_per_replica: 1,
            gpu_milli: 0,
            replicas: 1,
            user: "openb".into(),
            project: "openb".into(),
            tier: Some("high".into()),
            gpu_model: None,
            cpu_millis: 12_000,
            memory_mib: 16_384,
            checkpoint_interval_ms: None,
            image: None,
        }
    );
    // 46% of one GPU: a share of 460 thousandths.
    let j1 = &jobs[1];
    assert_eq!(j1.name, "openb-pod-0001");
    assert_eq!(j1.submit_ms, 427_061_000);
    assert_eq!(j1.duration_ms, (12_902_960 - 427_061) * 1000);
    assert_eq!((j1.replicas, j1.gpus_per_replica, j1.gpu_milli), (1, 0, 460));
    assert_eq!((j1.cpu_millis, j1.memory_mib), (6000, 12_288));

    assert_eq!(tier_counts(&jobs), counts(&[("high", 52), ("medium", 1), ("low", 44)]));
    let mut by_gpus: BTreeMap<u32, usize> = BTreeMap::new();
    for j in &jobs {
        assert_eq!(j.replicas, 1, "openb pods are never split");
        *by_gpus.entry(j.gpus_per_replica).or_default() += 1;
    }
    assert_eq!(by_gpus, BTreeMap::from([(0, 34), (1, 60), (2, 1), (4, 1), (8, 1)]));
    assert_eq!(job(&jobs, "openb-pod-0129").tier.as_deref(), Some("high")); // Guaranteed

    let options = OpenbOptions {
        skip_unscheduled: true,
        qos_tiers: TierMap::from_pairs([("LS", "a"), ("Guaranteed", "a"), ("Burstable", "b"), ("BE", "c")]),
        ..OpenbOptions::default()
    };
    let (jobs, report) = load_openb_pods(fixture("openb_pods_sample.csv"), &options).unwrap();
    check_invariants(&jobs, &report);
    // Five kept pods were never scheduled, and so was the zero-lifetime one (a skip counts
    // under the first reason that applies).
    assert_eq!(report.skipped_count(reason::NEVER_SCHEDULED), 6);
    assert_eq!(report.skipped_count(reason::NON_POSITIVE_LIFETIME), 0);
    assert_eq!(jobs.len(), 92);
    assert!(jobs.iter().all(|j| matches!(j.tier.as_deref(), Some("a" | "b" | "c"))));
}

#[test]
fn openb_missing_deletion_handling() {
    let csv = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n\
               p0,1000,1024,1,1000,,LS,Running,10,,10\n\
               p1,1000,1024,2,1000,V100M32,BE,Succeeded,20,50,25\n\
               p2,1000,1024,1,500,,BE,Running,30,,\n";
    let path = temp_csv("openb-missing-deletion", csv);
    let (jobs, report) = load_openb_pods(&path, &OpenbOptions::default()).unwrap();
    check_invariants(&jobs, &report);
    assert_eq!(jobs.len(), 1);
    assert_eq!(report.skipped_count(reason::NO_DELETION_TIME), 2);
    assert_eq!(jobs[0].name, "p1");
    assert_eq!(jobs[0].gpus_per_replica, 2);
    assert_eq!(jobs[0].gpu_model.as_deref(), Some("V100M32"));
    assert_eq!(jobs[0].duration_ms, 30_000);

    let options = OpenbOptions { missing_deletion: MissingDeletion::TraceEnd, ..OpenbOptions::default() };
    let (jobs, report) = load_openb_pods(&path, &options).unwrap();
    check_invariants(&jobs, &report);
    assert_eq!(jobs.len(), 3);
    assert_eq!(report.adjusted_count(reason::DELETION_AT_TRACE_END), 2);
    assert_eq!(report.adjusted_count(reason::FRACTIONAL_GPU_ROUNDED), 0);
    assert_eq!(job(&jobs, "p2").gpu_milli, 500);
    // The trace ends at the latest time in the file: 50 s.
    assert_eq!(job(&jobs, "p0").duration_ms, 40_000);
    assert_eq!(job(&jobs, "p0").submit_ms, 0);
    assert_eq!(job(&jobs, "p2").duration_ms, 20_000);
    assert_eq!(job(&jobs, "p2").submit_ms, 20_000);
}

#[test]
fn openb_nodes_fixture() {
    let nodes = load_openb_nodes(fixture("openb_nodes_sample.csv")).unwrap();
    assert_eq!(nodes.len(), 20);
    let n0 = &nodes[0];
    assert_eq!(n0.name, "openb-node-0000");
    assert_eq!((n0.gpus, n0.gpu_model.as_str()), (2, "P100"));
    assert_eq!((n0.cpu_millis, n0.memory_mib), (64_000, 262_144));
    assert_eq!(nodes.last().unwrap().name, "openb-node-1159");
    assert_eq!(nodes.iter().map(|n| n.gpus).sum::<u32>(), 108);
    let models: BTreeSet<&str> = nodes.iter().map(|n| n.gpu_model.as_str()).collect();
    assert_eq!(models, BTreeSet::from(["G2", "G3", "P100", "T4", "V100M32"]));
}

// ---------------------------------------------------------------- gang split

#[test]
fn gang_split_table() {
    let s8 = GangSplit::new(8);
    let table = [
        (1, (1, 1)),
        (7, (1, 7)),
        (8, (1, 8)),
        (9, (3, 3)),
        (10, (2, 5)),
        (11, (11, 1)),
        (12, (2, 6)),
        (14, (2, 7)),
        (16, (2, 8)),
        (17, (17, 1)),
        (18, (3, 6)),
        (20, (4, 5)),
        (24, (3, 8)),
        (32, (4, 8)),
        (64, (8, 8)),
        (128, (16, 8)),
    ];
    for (gpus, expected) in table {
        assert_eq!(s8.split(gpus), expected, "{gpus} GPUs on 8-GPU nodes");
    }
    for n in 1..=16u32 {
        let s = GangSplit::new(n);
        for g in 1..=200u32 {
            let (r, per) = s.split(g);
            assert_eq!(r * per, g);
            assert!(per <= n);
            // Fewest replicas: no smaller divisor-count fits.
            assert!((1..r).all(|r2| g % r2 != 0 || g / r2 > n), "{g} on {n}");
        }
    }
    assert_eq!(GangSplit::new(4).split(12), (3, 4));
    assert_eq!(GangSplit::default(), GangSplit::new(8));
    assert!(GangSplit::new(0).validate().is_err());
    let err = load_philly_pollux(fixture("philly_pollux_sample.csv"), &GangSplit::new(0), &PolluxFilter::default())
        .unwrap_err();
    assert!(matches!(err, WorkloadError::Spec(_)), "{err:?}");
}

// ---------------------------------------------------------------- bad rows

fn field_error(err: WorkloadError) -> (u64, String, String) {
    match err {
        WorkloadError::Field { line, field, value, .. } => (line, field, value),
        other => panic!("expected a field error, got {other:?}"),
    }
}

#[test]
fn bad_rows_name_line_and_field() {
    let head = "timestamp,duration,num_gpus,gpu_time,cluster\n";
    let good = "2017-10-09 07:01:55,66.0,1,66.0,11cb48\n";
    let load = |test: &str, body: &str| {
        let path = temp_csv(test, &format!("{head}{good}{body}"));
        load_philly_pollux(&path, &GangSplit::default(), &PolluxFilter::default())
    };

    let err = load("bad-duration", "2017-10-09 07:02:00,abc,1,1,11cb48\n").unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("input.csv:3:") && msg.contains("`duration`"), "{msg}");
    assert_eq!(field_error(err), (3, "duration".into(), "abc".into()));

    let err = load("zero-duration", "2017-10-09 07:02:00,0.0,1,0,11cb48\n").unwrap_err();
    assert_eq!(field_error(err), (3, "duration".into(), "0.0".into()));

    let err = load("bad-ts", "2017-13-09 07:02:00,5.0,1,5,11cb48\n").unwrap_err();
    assert_eq!(field_error(err), (3, "timestamp".into(), "2017-13-09 07:02:00".into()));

    let err = load("zero-gpus", "2017-10-09 07:02:00,5.0,0,0,11cb48\n").unwrap_err();
    assert_eq!(field_error(err), (3, "num_gpus".into(), "0".into()));

    let err = load("neg-gpus", "\n2017-10-09 07:02:00,5.0,-2,0,11cb48\n").unwrap_err();
    assert_eq!(field_error(err), (4, "num_gpus".into(), "-2".into()), "line numbers count blank lines");

    let err = load("empty-vc", "2017-10-09 07:02:00,5.0,1,5,\n").unwrap_err();
    assert_eq!(field_error(err), (3, "cluster".into(), String::new()));

    let err = load("short-row", "2017-10-09 07:02:00,5.0,1\n").unwrap_err();
    match &err {
        WorkloadError::Csv { line, .. } => assert_eq!(*line, 3),
        other => panic!("{other:?}"),
    }
    assert!(err.to_string().contains("input.csv:3:"), "{err}");

    let path = temp_csv("missing-col", "timestamp,duration,gpus,cluster\n");
    let err = load_philly_pollux(&path, &GangSplit::default(), &PolluxFilter::default()).unwrap_err();
    match err {
        WorkloadError::MissingColumn { column, .. } => assert_eq!(column, "num_gpus"),
        other => panic!("{other:?}"),
    }

    let err = load_philly_pollux(fixtures().join("no-such-file.csv"), &GangSplit::default(), &PolluxFilter::default())
        .unwrap_err();
    assert!(matches!(err, WorkloadError::Io { .. }), "{err:?}");

    // Chronus: duplicate job ids and bad submit times.
    let head = "job_id,user,num_gpu,submit_time,iterations,model_name,duration,interval,expect_time_list,expect_value_list,best_effort,job_type\n";
    let path = temp_csv(
        "chronus-dup",
        &format!(
            "{head}0,vc_a,1,5,1,m,10,1,10,10,0,strict\n1,vc_a,1,6,1,m,10,1,10,10,0,strict\n0,vc_b,1,7,1,m,10,1,10,10,0,best\n"
        ),
    );
    let err = load_philly_chronus(&path, &TierMap::chronus_default(), &GangSplit::default()).unwrap_err();
    match err {
        WorkloadError::DuplicateName { line, first_line, .. } => assert_eq!((line, first_line), (4, 2)),
        other => panic!("{other:?}"),
    }
    let path = temp_csv("chronus-bad-submit", &format!("{head}0,vc_a,1,-5,1,m,10,1,10,10,0,strict\n"));
    let err = load_philly_chronus(&path, &TierMap::chronus_default(), &GangSplit::default()).unwrap_err();
    assert_eq!(field_error(err), (2, "submit_time".into(), "-5".into()));

    // openb: more than a whole GPU per GPU, unknown QoS.
    let head = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n";
    let path =
        temp_csv("openb-milli", &format!("{head}p0,1,1,1,1000,,LS,Running,0,5,0\np1,1,1,1,1500,,LS,Running,0,5,0\n"));
    let err = load_openb_pods(&path, &OpenbOptions::default()).unwrap_err();
    assert_eq!(field_error(err), (3, "gpu_milli".into(), "1500".into()));
    let path = temp_csv("openb-qos", &format!("{head}p0,1,1,1,1000,,Platinum,Running,0,5,0\n"));
    let err = load_openb_pods(&path, &OpenbOptions::default()).unwrap_err();
    assert_eq!(field_error(err), (2, "qos".into(), "Platinum".into()));

    // Node lists.
    let path = temp_csv("nodes-bad", "sn,cpu_milli,memory_mib,gpu,model\nn0,1,1,8,G2\nn1,1,1,eight,G2\n");
    let err = load_openb_nodes(&path).unwrap_err();
    assert_eq!(field_error(err), (3, "gpu".into(), "eight".into()));
}

// ---------------------------------------------------------------- synthetic generator

fn weighted<T>(pairs: Vec<(T, f64)>) -> Vec<Weighted<T>> {
    pairs.into_iter().map(|(v, w)| Weighted::new(v, w)).collect()
}

fn class(prefix: &str, tier: Option<&str>, weight: f64) -> JobClass {
    JobClass {
        name_prefix: prefix.into(),
        tier: tier.map(str::to_owned),
        weight: Some(weight),
        mean_interarrival_ms: None,
        duration: DurationDist::LogNormal {
            median_ms: 600_000.0,
            p90_ms: 3_600_000.0,
            min_ms: Some(1_000),
            max_ms: Some(86_400_000),
        },
        gpus: weighted(vec![(1, 0.7), (2, 0.1), (4, 0.1), (8, 0.1)]),
        replicas: weighted(vec![(1, 0.9), (2, 0.1)]),
        projects: weighted(vec![("a".to_owned(), 3.0), ("b".to_owned(), 1.0)]),
        gpu_model: None,
        cpu_millis: 4000,
        memory_mib: 16_384,
        checkpoint_interval_ms: Some(600_000),
    }
}

fn mixed_spec(jobs: u64) -> SyntheticSpec {
    SyntheticSpec {
        jobs: Some(jobs),
        horizon_ms: None,
        mean_interarrival_ms: Some(10_000.0),
        classes: vec![class("hi", Some("high"), 2.0), class("mid", Some("medium"), 3.0), class("lo", Some("low"), 5.0)],
    }
}

fn share(n: usize, of: usize) -> f64 {
    n as f64 / of as f64
}

#[test]
fn synthetic_is_deterministic_per_seed() {
    let spec = mixed_spec(2_000);
    let a = generate(&spec, 42).unwrap();
    let b = generate(&spec, 42).unwrap();
    assert_eq!(a, b);
    let c = generate(&spec, 43).unwrap();
    assert_ne!(a, c);
    assert_eq!(a.len(), 2_000);
    let report = LoadReport { rows_read: 2_000, jobs_loaded: 2_000, ..LoadReport::default() };
    check_invariants(&a, &report);
    // Names are per-class counters.
    assert!(a.iter().any(|j| j.name == "hi-000000"));
    assert!(a.iter().any(|j| j.name == "lo-000000"));
    let first = &a[0];
    assert_eq!(first.submit_ms, 0);
    assert_eq!(first.user, first.project);
    assert_eq!((first.cpu_millis, first.memory_mib), (4000, 16_384));
    assert_eq!(first.checkpoint_interval_ms, Some(600_000));
}

#[test]
fn synthetic_distributions_on_10k_jobs() {
    let n = 10_000;
    let jobs = generate(&mixed_spec(n as u64), 7).unwrap();
    assert_eq!(jobs.len(), n);
    let tiers = tier_counts(&jobs);
    for (tier, expected) in [("high", 0.2), ("medium", 0.3), ("low", 0.5)] {
        let got = share(tiers[tier], n);
        assert!((got - expected).abs() < 0.03, "{tier}: {got} vs {expected}");
    }
    let one_gpu = jobs.iter().filter(|j| j.gpus_per_replica == 1).count();
    assert!((share(one_gpu, n) - 0.7).abs() < 0.03);
    let gangs = jobs.iter().filter(|j| j.replicas == 2).count();
    assert!((share(gangs, n) - 0.1).abs() < 0.03);
    let a = jobs.iter().filter(|j| j.project == "a").count();
    assert!((share(a, n) - 0.75).abs() < 0.03);

    // Mean inter-arrival ≈ 10 s (exponential): the span is ≈ n × 10 s.
    let span = jobs.last().unwrap().submit_ms as f64;
    let mean_gap = span / (n - 1) as f64;
    assert!((mean_gap - 10_000.0).abs() < 500.0, "mean gap {mean_gap}");

    // Log-normal run time: median ≈ 10 min, p90 ≈ 60 min, clamped to [1 s, 1 day].
    let mut d: Vec<u64> = jobs.iter().map(|j| j.duration_ms).collect();
    d.sort_unstable();
    let median = d[n / 2] as f64;
    let p90 = d[n * 9 / 10] as f64;
    assert!((median / 600_000.0 - 1.0).abs() < 0.08, "median {median}");
    assert!((p90 / 3_600_000.0 - 1.0).abs() < 0.12, "p90 {p90}");
    assert!(d[0] >= 1_000 && *d.last().unwrap() <= 86_400_000);
}

#[test]
fn synthetic_per_class_rates_and_horizon() {
    let mut fast = class("fast", Some("low"), 1.0);
    fast.weight = None;
    fast.mean_interarrival_ms = Some(1_000.0);
    fast.duration = DurationDist::Fixed { ms: 5_000 };
    let mut slow = class("slow", Some("high"), 1.0);
    slow.weight = None;
    slow.mean_interarrival_ms = Some(4_000.0);
    let spec = SyntheticSpec {
        jobs: None,
        horizon_ms: Some(10_000_000),
        mean_interarrival_ms: None,
        classes: vec![fast, slow],
    };
    let jobs = generate(&spec, 1).unwrap();
    assert!(jobs.iter().all(|j| j.submit_ms < 10_000_000));
    // Expected arrivals: 10,000 + 2,500.
    let fast_n = jobs.iter().filter(|j| j.name.starts_with("fast-")).count();
    let slow_n = jobs.iter().filter(|j| j.name.starts_with("slow-")).count();
    assert!((fast_n as f64 - 10_000.0).abs() < 400.0, "{fast_n}");
    assert!((slow_n as f64 - 2_500.0).abs() < 200.0, "{slow_n}");
    assert!(jobs.iter().filter(|j| j.name.starts_with("fast-")).all(|j| j.duration_ms == 5_000));
    // jobs and horizon together: whichever comes first.
    let spec = SyntheticSpec { jobs: Some(100), ..spec };
    assert_eq!(generate(&spec, 1).unwrap().len(), 100);
}

#[test]
fn synthetic_spec_validation() {
    let mut spec = mixed_spec(10);
    spec.jobs = None;
    assert!(generate(&spec, 0).is_err(), "needs jobs or horizon");

    let mut spec = mixed_spec(10);
    spec.classes[1].name_prefix = "hi".into();
    assert!(spec.validate().is_err(), "duplicate prefix");

    let mut spec = mixed_spec(10);
    spec.mean_interarrival_ms = None;
    assert!(spec.validate().is_err(), "weights need a shared mean");

    let mut spec = mixed_spec(10);
    spec.classes[0].gpus = weighted(vec![(0, 1.0)]);
    assert!(spec.validate().is_err(), "0 GPUs");

    let mut spec = mixed_spec(10);
    spec.classes[0].duration = DurationDist::LogNormal { median_ms: 100.0, p90_ms: 50.0, min_ms: None, max_ms: None };
    assert!(spec.validate().is_err(), "p90 < median");

    let mut spec = mixed_spec(10);
    spec.classes[0].projects = weighted(vec![("a".to_owned(), 0.0)]);
    assert!(spec.validate().is_err(), "all-zero weights");

    let mut spec = mixed_spec(10);
    spec.classes[0].mean_interarrival_ms = Some(5.0);
    assert!(spec.validate().is_err(), "weight and own rate");
    assert!(mixed_spec(10).validate().is_ok());
}

// ---------------------------------------------------------------- transforms

#[test]
fn assign_images_follows_zipf_per_job_or_per_project() {
    let jobs = generate(&mixed_spec(20_000), 3).unwrap();
    let imaged = assign_images(jobs.clone(), 4, 1.0, ImagesBy::Job, 5, false).unwrap();
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for j in &imaged {
        *counts.entry(j.image.clone().expect("every job gets one")).or_default() += 1;
    }
    // Zipf with exponent 1 over 4 images: weights 1, 1/2, 1/3, 1/4 of 25/12.
    for (k, weight) in [1.0, 0.5, 1.0 / 3.0, 0.25].into_iter().enumerate() {
        let expected = weight / (25.0 / 12.0);
        let got = share(counts[&format!("image-{k}")], 20_000);
        assert!((got - expected).abs() < 0.02, "image-{k}: {got} vs {expected}");
    }
    assert_eq!(imaged, assign_images(jobs.clone(), 4, 1.0, ImagesBy::Job, 5, false).unwrap());
    // By project: every job of a project has the project's image.
    let by_project = assign_images(jobs.clone(), 64, 0.0, ImagesBy::Project, 5, false).unwrap();
    let mut of_project: BTreeMap<&str, &str> = BTreeMap::new();
    for j in &by_project {
        let image = j.image.as_deref().unwrap();
        assert_eq!(*of_project.entry(&j.project).or_insert(image), image, "{}", j.project);
    }
    // Images given by the trace are kept unless overwrite is set.
    let mut pre = jobs.clone();
    pre[0].image = Some("registry.example/own:1".into());
    assert_eq!(assign_images(pre.clone(), 4, 1.0, ImagesBy::Job, 5, false).unwrap()[0].image, pre[0].image);
    for (count, s) in [(0, 1.0), (4097, 1.0), (4, -1.0), (4, f64::NAN)] {
        let err = assign_images(jobs.clone(), count, s, ImagesBy::Job, 5, false).unwrap_err().to_string();
        assert!(err.contains("assign-images"), "{err}");
    }
}

#[test]
fn assign_tiers_shares_determinism_and_stability() {
    let mut spec = mixed_spec(10_000);
    for c in &mut spec.classes {
        c.tier = None;
    }
    let jobs = generate(&spec, 3).unwrap();
    let shares = vec![("high".to_owned(), 1.0), ("medium".to_owned(), 2.0), ("low".to_owned(), 7.0)];
    let tiered = assign_tiers(jobs.clone(), &shares, 99, false).unwrap();
    let t = tier_counts(&tiered);
    assert_eq!(t.values().sum::<usize>(), 10_000);
    for (tier, expected) in [("high", 0.1), ("medium", 0.2), ("low", 0.7)] {
        let got = share(t[tier], 10_000);
        assert!((got - expected).abs() < 0.03, "{tier}: {got}");
    }
    assert_eq!(tiered, assign_tiers(jobs.clone(), &shares, 99, false).unwrap());
    let other = assign_tiers(jobs.clone(), &shares, 100, false).unwrap();
    assert_ne!(tiered, other);

    // A job's tier depends on its name, not its position: a subset gets the same tiers.
    let subset = window(jobs.clone(), 1_000_000, 20_000_000);
    let subset_tiered = assign_tiers(subset, &shares, 99, false).unwrap();
    let full: HashMap<&str, &Option<String>> = tiered.iter().map(|j| (j.name.as_str(), &j.tier)).collect();
    assert!(!subset_tiered.is_empty());
    for j in &subset_tiered {
        assert_eq!(&j.tier, full[j.name.as_str()]);
    }

    // Existing tiers are kept unless overwrite is set.
    let mut pre = jobs.clone();
    pre[0].tier = Some("gold".into());
    let kept = assign_tiers(pre.clone(), &shares, 99, false).unwrap();
    assert_eq!(kept[0].tier.as_deref(), Some("gold"));
    assert_eq!(kept[1..], tiered[1..]);
    let over = assign_tiers(pre, &shares, 99, true).unwrap();
    assert_eq!(over, tiered);

    // A zero share is never drawn; bad shares are errors.
    let with_zero = vec![("never".to_owned(), 0.0), ("always".to_owned(), 1.0)];
    let all = assign_tiers(jobs.clone(), &with_zero, 5, false).unwrap();
    assert!(all.iter().all(|j| j.tier.as_deref() == Some("always")));
    assert!(assign_tiers(jobs.clone(), &[("x".into(), -1.0)], 5, false).is_err());
    assert!(assign_tiers(jobs, &[], 5, false).is_err());
}

#[test]
fn compress_window_take_normalise() {
    let (jobs, _) =
        load_philly_chronus(fixture("chronus_mix1_head300.csv"), &TierMap::chronus_default(), &GangSplit::default())
            .unwrap();
    let c = compress_time(jobs.clone(), 2.0);
    assert_eq!(c.len(), jobs.len());
    let orig: HashMap<&str, &TraceJob> = jobs.iter().map(|j| (j.name.as_str(), j)).collect();
    for j in &c {
        let o = orig[j.name.as_str()];
        assert_eq!(j.submit_ms, o.submit_ms.div_ceil(2).max(o.submit_ms / 2));
        assert_eq!(j.duration_ms, o.duration_ms, "durations unchanged");
    }
    assert_eq!(c.last().unwrap().submit_ms, 19_893_000 / 2);
    // 0.5 stretches time; 1.0 is the identity.
    assert_eq!(compress_time(jobs.clone(), 1.0), jobs);
    assert_eq!(compress_time(jobs.clone(), 0.5).last().unwrap().submit_ms, 2 * 19_893_000);

    let w = window(jobs.clone(), 3_600_000, 7_200_000);
    assert!(!w.is_empty());
    assert!(w.iter().all(|j| (3_600_000..7_200_000).contains(&j.submit_ms)));
    let expected = jobs.iter().filter(|j| (3_600_000..7_200_000).contains(&j.submit_ms)).count();
    assert_eq!(w.len(), expected);
    let n = normalise_start(w.clone());
    assert_eq!(n[0].submit_ms, 0);
    assert_eq!(n.last().unwrap().submit_ms, w.last().unwrap().submit_ms - w[0].submit_ms);

    let mut shuffled = jobs.clone();
    shuffled.reverse();
    assert_eq!(sort_jobs(shuffled), jobs);

    let t = take(jobs.clone(), 10);
    assert_eq!(t[..], jobs[..10]);
    assert_eq!(take(jobs.clone(), 10_000), jobs);
}

// ---------------------------------------------------------------- scenario specs

#[test]
fn trace_source_from_yaml_resolves_relative_paths() {
    let yaml = r#"
source:
  kind: philly-pollux
  path: philly_pollux_sample.csv
  from: 2017-10-15 00:00:00
  to: 2017-11-01 00:00:00
  gang_split: { gpus_per_node: 4 }
transforms:
  - { op: compress-time, factor: 2 }
  - { op: assign-tiers, shares: { high: 1, low: 3 } }
  - { op: take, jobs: 100 }
"#;
    let spec: WorkloadSpec = serde_saphyr::from_str(yaml).unwrap();
    assert!(matches!(spec.source, TraceSource::PhillyPollux { gang_split: GangSplit { gpus_per_node: 4 }, .. }));
    let (jobs, report) = spec.load(&fixtures(), 11).unwrap();
    check_invariants(&jobs, &report);
    assert_eq!(jobs.len(), 100);
    assert_eq!(report.rows_read, 418);
    assert_eq!(report.skipped_count(reason::OUTSIDE_WINDOW), 299);
    assert_eq!(report.skipped_count(reason::DROPPED_BY_TAKE), 19);
    assert_eq!(jobs[0].name, "pollux-000278");
    assert!(jobs.iter().all(|j| j.tier.is_some()));
    assert!(jobs.iter().all(|j| j.gpus_per_replica <= 4));
    assert_eq!(spec.load(&fixtures(), 11).unwrap().0, jobs);

    let chronus = r#"{"source": {"kind": "philly-chronus", "path": "chronus_mix2_head100.csv",
        "tiers": {"strict": "s", "soft": "m", "best": "b"}, "max_jobs": 40}}"#;
    let spec: WorkloadSpec = serde_json::from_str(chronus).unwrap();
    let (jobs, report) = spec.load(&fixtures(), 0).unwrap();
    check_invariants(&jobs, &report);
    assert_eq!(jobs.len(), 40);
    assert_eq!(report.skipped_count(reason::BEYOND_MAX_JOBS), 60);
    assert!(jobs.iter().all(|j| matches!(j.tier.as_deref(), Some("s" | "m" | "b"))));

    let openb = format!(
        r#"{{"kind": "openb-pods", "path": {:?}, "skip_unscheduled": true}}"#,
        fixture("openb_pods_sample.csv")
    );
    let source: TraceSource = serde_json::from_str(&openb).unwrap();
    let (jobs, report) = source.load(Path::new("/nonexistent"), 0).unwrap();
    check_invariants(&jobs, &report);
    assert_eq!(jobs.len(), 92, "absolute paths ignore base_dir");

    // A command-line override of the trace file.
    let mut source = source;
    assert!(source.set_path(PathBuf::from("elsewhere.csv")));
    assert_eq!(source.path(), Some(Path::new("elsewhere.csv")));
    let err = source.load(&fixtures(), 0).unwrap_err();
    assert!(matches!(err, WorkloadError::Io { ref path, .. } if path.ends_with("fixtures/elsewhere.csv")), "{err:?}");
    let mut synthetic = TraceSource::Synthetic(mixed_spec(3));
    assert!(!synthetic.set_path(PathBuf::from("x.csv")));
    assert_eq!(synthetic.path(), None);
}

#[test]
fn synthetic_source_from_yaml_matches_generate() {
    let yaml = r#"
kind: synthetic
jobs: 500
mean_interarrival_ms: 30000
classes:
  - name_prefix: train
    tier: low
    weight: 3
    duration: { kind: log-normal, median_ms: 1800000, p90_ms: 14400000, max_ms: 604800000 }
    gpus: [{ value: 1, weight: 8 }, { value: 8, weight: 1 }]
    replicas: [{ value: 1 }, { value: 4, weight: 0.1 }]
    projects: [{ value: team-a, weight: 2 }, { value: team-b }]
    checkpoint_interval_ms: 600000
  - name_prefix: infer
    tier: high
    weight: 1
    duration: { kind: fixed, ms: 600000 }
    gpus: [{ value: 1 }]
    projects: [{ value: serving }]
"#;
    let source: TraceSource = serde_saphyr::from_str(yaml).unwrap();
    let TraceSource::Synthetic(spec) = &source else { panic!("{source:?}") };
    let (jobs, report) = source.load(Path::new("."), 5).unwrap();
    assert_eq!(jobs, generate(spec, 5).unwrap());
    assert_eq!((report.rows_read, report.jobs_loaded), (500, 500));
    assert!(
        jobs.iter()
            .filter(|j| j.name.starts_with("infer-"))
            .all(|j| j.duration_ms == 600_000 && j.project == "serving")
    );

    // Unknown fields are rejected at every level.
    for bad in [
        yaml.replace("jobs: 500", "jobs: 500\nseed: 1"),
        yaml.replace("tier: low", "tier: low\n    priority: 3"),
        yaml.replace("kind: fixed, ms", "kind: fixed, millis"),
        yaml.replace("{ value: serving }", "{ value: serving, share: 1 }"),
    ] {
        assert!(serde_saphyr::from_str::<TraceSource>(&bad).is_err(), "accepted:\n{bad}");
    }
    let bad_source = r#"{"kind": "philly-pollux", "path": "x.csv", "window": 3}"#;
    assert!(serde_json::from_str::<TraceSource>(bad_source).is_err());
    let bad_transform = r#"{"op": "take", "jobs": 3, "n": 4}"#;
    assert!(serde_json::from_str::<Transform>(bad_transform).is_err());
    let bad_split = r#"{"gpus_per_node": 8, "gpus": 8}"#;
    assert!(serde_json::from_str::<GangSplit>(bad_split).is_err());
}

// ---------------------------------------------------------------- full trace (opt-in)

/// Loads the full Pollux trace when `FAIRWAY_SHARED_TRACES` is set (to the traces folder, or to
/// anything else for the default `/work/shared/traces`). The fixture tests cover the same code.
#[test]
fn full_pollux_trace_when_available() {
    let Some(root) = std::env::var_os("FAIRWAY_SHARED_TRACES") else {
        eprintln!("skipped: set FAIRWAY_SHARED_TRACES to load the full philly-pollux trace");
        return;
    };
    let root = PathBuf::from(root);
    let root = if root.is_dir() { root } else { PathBuf::from("/work/shared/traces") };
    let path = root.join("philly-pollux/philly.csv");
    let started = std::time::Instant::now();
    let (jobs, report) = load_philly_pollux(&path, &GangSplit::default(), &PolluxFilter::default()).unwrap();
    eprintln!("full pollux: {} jobs in {:.1} ms", jobs.len(), started.elapsed().as_secs_f64() * 1e3);
    check_invariants(&jobs, &report);
    assert_eq!(jobs.len(), 82_247);
    // Multi-node jobs: 12, 16, 24, 32, 64 and 128 GPUs.
    assert_eq!(report.adjusted_count(reason::GANG_SPLIT), 289);
    // 2017-09-04 10:30:41 to 2017-12-22 08:02:11.
    let span = (civil::date(2017, 12, 22).at(8, 2, 11, 0)).duration_since(civil::date(2017, 9, 4).at(10, 30, 41, 0));
    assert_eq!(jobs.last().unwrap().submit_ms as i128, span.as_millis());
    let gpu_hours: f64 = jobs.iter().map(|j| j.total_gpus() as f64 * j.duration_ms as f64 / 3.6e6).sum();
    assert!((gpu_hours - 978_078.47).abs() < 0.01, "{gpu_hours}");
    let vcs: BTreeSet<&str> = jobs.iter().map(|j| j.project.as_str()).collect();
    assert_eq!(vcs.len(), 15);

    let quotas = load_philly_vc_quotas(root.join("philly-pollux/philly_vc.csv"), 8).unwrap();
    let in_quota = jobs.iter().filter(|j| quotas.contains_key(&j.project)).count();
    assert_eq!(in_quota, 82_229);

    let window = PolluxFilter {
        from: Some(civil::date(2017, 10, 3).at(0, 0, 0, 0)),
        to: Some(civil::date(2017, 12, 1).at(0, 0, 0, 0)),
        max_jobs: None,
    };
    let (busy, _) = load_philly_pollux(&path, &GangSplit::default(), &window).unwrap();
    assert_eq!(busy.len(), 66_886, "the busy window of the trace README");
}

/// The packing benchmark reads every openb pod-list variant: the default's columns, lists
/// with GPU-model constraints (`gpu_spec` naming one model or several), lists whose time,
/// phase and `qos` columns are empty, and lists without those columns at all.
#[test]
fn pack_loaders_read_every_openb_variant() {
    use fairway_sim::workload::{load_pack_nodes, load_pack_pods};
    let pods = load_pack_pods(fixture("openb_pods_sample.csv")).unwrap();
    assert_eq!(pods.len(), 104);
    assert_eq!((pods[1].num_gpu, pods[1].gpu_milli, pods[1].cpu_milli), (1, 460, 6000));
    let spec = temp_csv(
        "pack-gpuspec",
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n\
         p0,8000,30000,1,1000,V100M16|V100M32,,,,,\n\
         p1,4000,15000,1,500,,BE,Running,1,2,1\n\
         p2,88000,300000,8,1000,G2,LS,Pending,5,,\n\
         p3,2000,4000,0,0,,,,,,\n",
    );
    let pods = load_pack_pods(&spec).unwrap();
    assert_eq!(pods[0].gpu_models, ["V100M16", "V100M32"]);
    assert!(pods[1].gpu_models.is_empty());
    assert_eq!((pods[2].num_gpu, pods[2].gpu_models.as_slice()), (8, ["G2".to_owned()].as_slice()));
    assert_eq!((pods[3].num_gpu, pods[3].gpu_milli), (0, 0));
    let bare = temp_csv("pack-bare", "name,cpu_milli,memory_mib,num_gpu,gpu_milli\nq,1000,100,1,250\n");
    assert_eq!(load_pack_pods(&bare).unwrap()[0].gpu_milli, 250);

    let nodes = load_pack_nodes(fixture("openb_nodes_sample.csv")).unwrap();
    assert_eq!(nodes.len(), 20);
    assert_eq!(nodes[1].model.as_deref(), Some("G2"));
    let all =
        temp_csv("pack-all-nodes", "sn,cpu_milli,memory_mib,gpu,model\ncpu0,32000,262144,0,\ngpu0,96000,393216,8,G2\n");
    let nodes = load_pack_nodes(&all).unwrap();
    assert_eq!((nodes[0].gpus, nodes[0].model.as_deref()), (0, None));
}

#[test]
fn pack_loaders_name_the_bad_field() {
    use fairway_sim::workload::{load_pack_nodes, load_pack_pods};
    let header = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n";
    for (row, field, reason) in [
        ("p,1,1,1,1001,", "gpu_milli", "≤ 1000"),
        ("p,1,1,2,500,", "gpu_milli", "whole GPUs"),
        ("p,1,1,0,300,", "gpu_milli", "must be 0"),
        ("p,1,1,1,0,", "gpu_milli", "≥ 1"),
        ("p,1,1,17,1000,", "num_gpu", "more than 16"),
        ("p,-4,1,1,100,", "cpu_milli", "not a non-negative"),
    ] {
        let path = temp_csv("pack-bad-pod", &format!("{header}{row}\n"));
        let err = load_pack_pods(&path).unwrap_err().to_string();
        assert!(err.contains(&format!("field `{field}`")) && err.contains(reason), "{row}: {err}");
    }
    let dup = temp_csv("pack-dup-pod", &format!("{header}p,1,1,1,100,\np,1,1,1,100,\n"));
    assert!(load_pack_pods(&dup).unwrap_err().to_string().contains("duplicate name `p`"));
    let no_col = temp_csv("pack-no-milli", "name,cpu_milli,memory_mib,num_gpu\np,1,1,1\n");
    assert!(load_pack_pods(&no_col).unwrap_err().to_string().contains("gpu_milli"));
    let no_model = temp_csv("pack-no-model", "sn,cpu_milli,memory_mib,gpu,model\nn,1,1,2,\n");
    let err = load_pack_nodes(&no_model).unwrap_err().to_string();
    assert!(err.contains("field `model`") && err.contains("must name their model"), "{err}");
}
