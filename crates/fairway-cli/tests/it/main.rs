//! The `fairway` binary end to end.

use std::path::PathBuf;
use std::process::{Command, Output};

fn fairway(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_fairway")).args(args).output().expect("runs")
}

fn scenario(name: &str) -> String {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fairway-sim/tests/scenarios").join(name);
    root.to_string_lossy().into_owned()
}

#[test]
fn sim_json_is_byte_identical_across_runs_and_parses() {
    let path = scenario("pollux-fixture.yaml");
    let a = fairway(&["sim", &path, "-o", "json", "--no-progress"]);
    let b = fairway(&["sim", &path, "-o", "json", "--no-progress"]);
    assert!(a.status.success(), "{}", String::from_utf8_lossy(&a.stderr));
    assert_eq!(a.stdout, b.stdout);
    let doc: serde_json::Value = serde_json::from_slice(&a.stdout).expect("valid JSON");
    assert_eq!(doc["schema_version"], 2);
    let policies: Vec<&str> =
        doc["policies"].as_array().unwrap().iter().map(|p| p["policy"].as_str().unwrap()).collect();
    assert_eq!(policies, ["fifo", "priority", "fairway"]);
}

/// The checks watch a run, they never steer it: every level gives the same document.
#[test]
fn sim_check_levels_give_the_same_output() {
    let path = scenario("pollux-fixture.yaml");
    let run = |extra: &[&str]| {
        let out = fairway(&[&["sim", path.as_str(), "-o", "json", "--no-progress"], extra].concat());
        assert!(out.status.success(), "{extra:?}: {}", String::from_utf8_lossy(&out.stderr));
        out.stdout
    };
    let default = run(&[]);
    assert_eq!(run(&["--check", "amortised"]), default);
    assert_eq!(run(&["--check", "every-cycle"]), default);
    assert_eq!(run(&["--check", "off"]), default);
    assert_eq!(run(&["--no-check"]), default);
    let out = fairway(&["sim", &path, "--check", "sometimes"]);
    assert!(!out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("--check") && err.contains("sometimes"), "{err}");
}

/// `--seeds N`: N runs with consecutive seeds; each figure's spread is computed from the
/// single-seed documents, checked here from outside.
#[test]
fn sim_seeds_reports_every_figure_over_the_seeds() {
    let path = scenario("pollux-fixture.yaml");
    let out = fairway(&["sim", &path, "--seed", "11", "--seeds", "3", "-o", "json", "--no-progress"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let sweep: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(sweep["seeds"], serde_json::json!([11, 12, 13]));
    let singles: Vec<serde_json::Value> = (11..14)
        .map(|seed| {
            let one = fairway(&["sim", &path, "--seed", &seed.to_string(), "-o", "json", "--no-progress"]);
            serde_json::from_slice(&one.stdout).unwrap()
        })
        .collect();
    let figure =
        |name: &str| sweep["figures"].as_array().unwrap().iter().find(|f| f["figure"] == name).cloned().unwrap();
    let preemptions = figure("preemptions");
    let fairway_at = sweep["policies"].as_array().unwrap().iter().position(|p| p == "fairway").unwrap();
    let values: Vec<f64> =
        singles.iter().map(|d| d["policies"][fairway_at]["cluster"]["preemptions_total"].as_f64().unwrap()).collect();
    let spread = &preemptions["policies"][fairway_at];
    let mean = values.iter().sum::<f64>() / 3.0;
    assert!((spread["mean"].as_f64().unwrap() - mean).abs() < 1e-3, "{spread} vs {values:?}");
    assert_eq!(spread["min"].as_f64().unwrap(), values.iter().copied().fold(f64::MAX, f64::min));
    assert_eq!(spread["max"].as_f64().unwrap(), values.iter().copied().fold(f64::MIN, f64::max));
    let var = values.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / 2.0;
    assert!((spread["std"].as_f64().unwrap() - var.sqrt()).abs() < 1e-3, "{spread}");
    let wait = figure("high: wait to first start, mean");
    let high_waits: Vec<f64> = singles
        .iter()
        .map(|d| d["policies"][fairway_at]["tiers"]["high"]["wait_seconds"]["mean"].as_f64().unwrap() / 60.0)
        .collect();
    let mean = high_waits.iter().sum::<f64>() / 3.0;
    assert!((wait["policies"][fairway_at]["mean"].as_f64().unwrap() - mean).abs() < 2e-3, "{wait}");
    // The table names the seeds and shows mean ± std for each policy.
    let table = fairway(&["sim", &path, "--seed", "11", "--seeds", "3", "--no-progress"]);
    let text = String::from_utf8(table.stdout).unwrap();
    assert!(text.contains("over 3 seeds (seeds 11..=13)") && text.contains(" ± "), "{text}");
    let bad = fairway(&["sim", &path, "--seeds", "0"]);
    assert!(!bad.status.success() && String::from_utf8_lossy(&bad.stderr).contains("--seeds"));
}

#[test]
fn sim_table_and_policy_filter() {
    let out = fairway(&["sim", &scenario("tiny-preemption.yaml"), "--policy", "fairway", "--no-progress"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("Tier high") && text.contains("fairway"), "{text}");
    assert!(!text.contains("\nfifo "), "{text}");
}

#[test]
fn errors_exit_non_zero_and_name_the_problem() {
    let out = fairway(&["sim", &scenario("tiny-preemption.yaml"), "--policy", "nope"]);
    assert!(!out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("--policy") && err.contains("nope"), "{err}");
    let out = fairway(&["sim", "/nonexistent/scenario.yaml"]);
    assert!(!out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    // The file is named once, with what went wrong.
    assert!(err.starts_with("error: scenario /nonexistent/scenario.yaml: cannot read: "), "{err}");
    assert_eq!(err.matches("/nonexistent/scenario.yaml").count(), 1, "{err}");
}

#[test]
fn report_writes_markdown_and_plots() {
    let tmp = tempfile::Builder::new().prefix("fairway-cli-report-").tempdir().unwrap();
    let dir = tmp.path().join("report");
    let out = fairway(&["sim", &scenario("tiny-preemption.yaml"), "--report", dir.to_str().unwrap(), "--no-progress"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for f in ["report.md", "gpu-utilization.svg", "wait-cdf-high.svg", "wait-cdf-low.svg"] {
        assert!(dir.join(f).is_file(), "{f} missing");
    }
}

mod bench;
mod browser;
mod catalogue;
mod client;
mod containers;
mod dashboard;
mod demo;
mod docs;
mod fake_server;
mod http_fuzz;
mod kube;
mod lifecycle;
mod loopback;
mod monitoring;
mod notify;
mod security;
mod server;

/// `--sharing-anomaly` adds each cohort member's run alone to the document.
#[test]
fn sim_sharing_anomaly_reports_each_member() {
    let tmp = tempfile::Builder::new().prefix("fairway-cli-anomaly-").tempdir().unwrap();
    let dir = tmp.path();
    let path = dir.join("anomaly.yaml");
    let mut text = String::from(
        "name: anomaly\nseed: 1\ncluster:\n  nodes: [{ name: n, gpus: 8, gpu_model: A100 }]\njob_defaults: { grace_seconds: 0 }\n\
         cohorts:\n  - name: lab\n    members:\n      - { project: vision, nominal: { gpus: 4 } }\n      - { project: speech, nominal: { gpus: 4 } }\njobs:\n",
    );
    for i in 0..6 {
        text += &format!(
            "  - {{ name: speech-{i}, tenant: {{ project: speech }}, resources: {{ gpus: 1 }}, command: [x], submit_seconds: 0, duration_seconds: 100 }}\n"
        );
    }
    text += "policies: [fairway]\n";
    std::fs::write(&path, text).unwrap();
    let out = fairway(&["sim", path.to_str().unwrap(), "-o", "json", "--no-progress", "--sharing-anomaly"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("valid JSON");
    let speech = &doc["sharing_anomaly"][0]["tenants"][0];
    assert_eq!(speech["tenant"], "speech");
    // Alone on 4 GPUs, 2 of its 6 jobs wait 100 s (33.3 s on average); shared, it borrows
    // vision's idle GPUs and none waits.
    assert_eq!(speech["shared_wait_seconds_mean"], 0.0);
    assert_eq!(speech["alone_wait_seconds_mean"], 33.333);
    assert_eq!(speech["anomaly_seconds"], -33.333);
}

fn openb_fixture(name: &str) -> String {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fairway-sim/tests/fixtures").join(name);
    root.to_string_lossy().into_owned()
}

/// `fairway pack` on the committed openb excerpts: the table names every policy, the CSV has
/// one row per policy × seed × load level, JSON is the same on every run, the report folder
/// gets the CSV, JSON and both charts.
#[test]
fn pack_compares_policies_in_every_output() {
    let (nodes, pods) = (openb_fixture("openb_nodes_sample.csv"), openb_fixture("openb_pods_sample.csv"));
    let base = ["pack", "--nodes", nodes.as_str(), "--pods", pods.as_str(), "--seeds", "3"];
    let table = fairway(&base);
    assert!(table.status.success(), "{}", String::from_utf8_lossy(&table.stderr));
    let text = String::from_utf8(table.stdout).unwrap();
    for policy in ["random", "dot-product", "gpu-clustering", "gpu-packing", "best-fit", "fgd", "fairway"] {
        assert!(text.lines().any(|l| l.starts_with(policy)), "{policy} missing:\n{text}");
    }
    assert!(String::from_utf8_lossy(&table.stderr).contains("21 runs (7 policies × 3 seeds)"));

    let csv = fairway(&[&base[..], &["--policy", "fgd,best-fit", "-o", "csv"]].concat());
    let csv = String::from_utf8(csv.stdout).unwrap();
    let mut lines = csv.lines();
    assert_eq!(lines.next(), Some("policy,seed,arrived_percent,gpu_alloc_percent,frag_percent"));
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert!(rows.iter().all(|r| r.len() == 5 && ["fgd", "best-fit"].contains(&r[0])));
    for (policy, seed) in [("fgd", "42"), ("best-fit", "44")] {
        let levels: Vec<u32> =
            rows.iter().filter(|r| r[0] == policy && r[1] == seed).map(|r| r[2].parse().unwrap()).collect();
        assert_eq!(levels.first(), Some(&0));
        assert_eq!(levels.last(), Some(&130), "the curve reaches the target");
        assert!(levels.windows(2).all(|w| w[0] < w[1]));
    }

    let json = |extra: &[&str]| fairway(&[&base[..], &["-o", "json"], extra].concat()).stdout;
    let a = json(&[]);
    assert_eq!(a, json(&["--threads", "1"]), "the same seeds give the same document on any number of threads");
    let doc: serde_json::Value = serde_json::from_slice(&a).unwrap();
    assert_eq!(doc["runs"].as_array().unwrap().len(), 21);
    assert_eq!(doc["target_percent"], 130);

    let dir = std::env::temp_dir().join(format!("fairway-pack-report-{}", std::process::id()));
    let out = fairway(&[&base[..], &["--policy", "fgd", "--report", dir.to_str().unwrap()]].concat());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for file in ["pack.csv", "pack.json", "pack-alloc.svg", "pack-frag.svg"] {
        let body = std::fs::read_to_string(dir.join(file)).unwrap();
        assert!(!body.is_empty(), "{file}");
    }
    assert!(std::fs::read_to_string(dir.join("pack-alloc.svg")).unwrap().contains("<svg"));
    let _ = std::fs::remove_dir_all(&dir);

    let bad = fairway(&[&base[..], &["--policy", "worst-fit"]].concat());
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("worst-fit"));
}
