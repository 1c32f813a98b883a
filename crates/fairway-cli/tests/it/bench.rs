//! `fairway bench server` and `fairway bench sim` run end to end with tiny counts. Figures
//! are not checked: timing depends on the machine; `docs/benchmarks.md` records them.

use std::process::Command;

#[test]
fn bench_server_runs_and_names_its_figures() {
    let out = Command::new(env!("CARGO_BIN_EXE_fairway"))
        .args(["bench", "server", "--gpus", "1", "--clients", "4", "--submissions", "50", "--starts", "2"])
        .args(["--rounds", "2", "--short-jobs", "5"])
        .output()
        .expect("runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let figures = ["submit_throughput", "submit_throughput_multi", "start_latency", "preempt_signal_latency"];
    for figure in figures.into_iter().chain(["preemptor_start_latency", "short_job_throughput", "probe_exec"]) {
        assert!(stdout.lines().any(|l| l.starts_with(&format!("{figure} "))), "{figure} missing:\n{stdout}");
    }
}

/// `fairway bench sim` replays what `fairway sim` replays: per policy, the same events and
/// cycles as the simulator's own JSON reports, and figures derived from them.
#[test]
fn bench_sim_counts_what_sim_replays() {
    let scenario = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fairway-sim/tests/scenarios/pollux-fixture.yaml")
        .to_string_lossy()
        .into_owned();
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_fairway")).args(args).output().expect("runs");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice::<serde_json::Value>(&out.stdout).expect("JSON")
    };
    let bench = run(&["bench", "sim", &scenario, "--repeat", "2", "-o", "json"]);
    let sim = run(&["sim", &scenario, "--no-progress", "-o", "json"]);
    let bench_policies = bench["policies"].as_array().expect("policies");
    let sim_policies = sim["policies"].as_array().expect("policies");
    assert_eq!(bench_policies.len(), sim_policies.len());
    for (b, s) in bench_policies.iter().zip(sim_policies) {
        assert_eq!(b["policy"], s["policy"]);
        assert_eq!(b["events"], s["cluster"]["events_processed"], "{}", b["policy"]);
        assert_eq!(b["cycles"], s["cluster"]["cycles"], "{}", b["policy"]);
        let (events, seconds) = (b["events"].as_f64().unwrap(), b["loop_seconds"].as_f64().unwrap());
        assert!(events > 0.0 && seconds > 0.0);
        assert!((b["events_per_s"].as_f64().unwrap() - events / seconds).abs() < 1e-6 * events / seconds);
        let checked = b["checked_loop_seconds"].as_f64().unwrap();
        assert!(checked > 0.0 && b["whole_seconds"].as_f64().unwrap() >= checked);
        // Only the policy that preempts searches for victims; every policy looks at jobs.
        let preempts = b["policy"] == "fairway";
        assert_eq!(b["preemption_searches"].as_u64().unwrap() > 0, preempts, "{}", b["policy"]);
        assert_eq!(b["preemptions"].as_u64().unwrap() > 0, preempts, "{}", b["policy"]);
        assert!(b["jobs_considered"].as_u64().unwrap() > 0);
        assert_eq!(b["decisions_digest"].as_str().unwrap().len(), 16);
    }
    // The digest tells schedules apart: the trace excerpt is scheduled differently by FIFO
    // and by priority with preemption.
    let digest =
        |policy: &str| bench_policies.iter().find(|b| b["policy"] == policy).unwrap()["decisions_digest"].clone();
    assert_ne!(digest("fifo"), digest("fairway"));
    // And it is reproducible: a second run of the benchmark gives the same digests.
    let again = run(&["bench", "sim", &scenario, "--repeat", "1", "-o", "json"]);
    for (a, b) in again["policies"].as_array().unwrap().iter().zip(bench_policies) {
        assert_eq!(a["decisions_digest"], b["decisions_digest"]);
    }
}

#[test]
fn bench_sim_refuses_zero_repeats() {
    let out = Command::new(env!("CARGO_BIN_EXE_fairway"))
        .args(["bench", "sim", "examples/article-8xA100.yaml", "--repeat", "0"])
        .output()
        .expect("runs");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--repeat"));
}

/// The soak, briefly, as CI runs it: a few rounds of load ended by `kill -9` of the server,
/// each checked from outside (the benchmark runs it long: docs/benchmarks.md).
#[test]
fn a_brief_soak_finds_nothing_lost_run_twice_or_double_booked() {
    let out = Command::new(env!("CARGO_BIN_EXE_fairway"))
        .args(["bench", "soak", "--rounds", "3", "--seed", "7", "--round-ms-max", "800", "-o", "json"])
        .output()
        .expect("runs");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|_| {
        panic!("{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
    });
    assert!(out.status.success(), "{report}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(report["submissions_acknowledged"].as_u64().unwrap() > 0, "{report}");
    for problem in ["jobs_lost", "jobs_run_twice", "gpus_double_booked", "pending_out_of_order", "jobs_ended_badly"] {
        assert_eq!(report[problem], 0, "{problem}: {report}");
    }
}

/// `fairway bench kube` runs a real `fairway kube` process against the in-tree fake API
/// server: a tiny cluster, every queued Job that fits admitted, each high Job preempting.
#[test]
fn bench_kube_runs_the_controller_against_the_fake_and_names_its_figures() {
    let out = Command::new(env!("CARGO_BIN_EXE_fairway"))
        .args([
            "bench",
            "kube",
            "--nodes",
            "4",
            "--jobs",
            "40",
            "--preemptions",
            "2",
            "--namespaces",
            "2",
            "-o",
            "json",
        ])
        .output()
        .expect("runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(
        (report["nodes"].as_u64(), report["gpus"].as_u64(), report["jobs"].as_u64()),
        (Some(4), Some(32), Some(40))
    );
    let admissions = &report["admissions"];
    // 32 GPUs hold some of the 40 queued Jobs of 1 to 8 GPUs, never more GPUs than there are.
    let admitted = admissions["jobs"].as_u64().unwrap();
    assert!((4..40).contains(&admitted), "{admissions}");
    assert!(admissions["gpus"].as_u64().unwrap() <= 32, "{admissions}");
    assert!(admissions["pods"].as_u64().unwrap() >= admitted, "{admissions}");
    for latency in ["preemption_victims_suspended", "preemptor_bound"] {
        assert_eq!(report[latency]["samples"].as_u64(), Some(2), "{latency}: {}", report[latency]);
    }
    assert!(report["memory"]["peak_rss_mib"].as_f64().unwrap() > 0.0);
    assert!(report["api_requests"].as_object().is_some_and(|r| !r.is_empty()));
    assert_eq!(report["double_booked"], serde_json::json!([]));
}
