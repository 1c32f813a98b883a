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
    assert_eq!(doc["schema_version"], 1);
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
    assert!(String::from_utf8(out.stderr).unwrap().contains("/nonexistent/scenario.yaml"));
}

#[test]
fn report_writes_markdown_and_plots() {
    let dir = std::env::temp_dir().join(format!("fairway-cli-report-{}", std::process::id()));
    let out = fairway(&["sim", &scenario("tiny-preemption.yaml"), "--report", dir.to_str().unwrap(), "--no-progress"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for f in ["report.md", "gpu-utilization.svg", "wait-cdf-high.svg", "wait-cdf-low.svg"] {
        assert!(dir.join(f).is_file(), "{f} missing");
    }
}

mod bench;
mod catalogue;
mod client;
mod containers;
mod demo;
mod docs;
mod fake_server;
mod http_fuzz;
mod kube;
mod lifecycle;
mod security;
mod server;
