//! `fairway bench server` runs end to end with tiny counts. Figures are not checked: timing
//! depends on the machine; `docs/benchmarks.md` records them.

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
