//! Shared helpers: launch specs, waiting with timeouts, process-group inspection.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use fairway_exec::{ExitRecord, LaunchSpec, Launched, Signal, read_exit, signal_group};

/// Generous: the tests take milliseconds, but the machine is shared.
pub const TIMEOUT: Duration = Duration::from_secs(20);

pub fn helper_exe() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_fairway-exec-helper"))
}

/// A spec for `argv` with its run directory and log under `dir`.
pub fn spec(dir: &Path, argv: &[&str]) -> LaunchSpec {
    LaunchSpec {
        job_id: 7,
        run_dir: dir.join("run"),
        log_path: dir.join("run").join("job.log"),
        log_bytes_max: 1024 * 1024,
        log_files_max: 3,
        argv: argv.iter().map(|s| s.to_string()).collect(),
        cwd: None,
        env: BTreeMap::new(),
        run_as: None,
        shim_exe: helper_exe(),
    }
}

pub fn sh(script: &str) -> Vec<String> {
    vec!["sh".to_owned(), "-c".to_owned(), script.to_owned()]
}

/// Polls `cond` every 5 ms until it holds; panics with `what` after [`TIMEOUT`].
pub fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < TIMEOUT, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Waits for the shim to exit (killing its group on timeout) and returns its status.
pub fn wait_shim(launched: &mut Launched) -> ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(status) = launched.child.try_wait().expect("try_wait") {
            return status;
        }
        if start.elapsed() > TIMEOUT {
            let _ = signal_group(launched.pid, Signal::Kill);
            panic!("shim {} did not exit in time", launched.pid);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Waits for the shim and returns its exit record, which must exist.
pub fn wait_exit(launched: &mut Launched, spec: &LaunchSpec) -> ExitRecord {
    wait_shim(launched);
    read_exit(&spec.run_dir).expect("read exit.json").expect("exit.json written")
}

pub fn read_log(spec: &LaunchSpec) -> String {
    fs::read_to_string(&spec.log_path).unwrap_or_default()
}

/// Pids of processes in group `pgid` that are not zombies.
pub fn live_group_members(pgid: u32) -> Vec<u32> {
    let mut pids = Vec::new();
    for entry in fs::read_dir("/proc").expect("read /proc").flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
        let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        let Some(close) = stat.rfind(')') else { continue };
        let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
        // fields[0] is field 3 (state), fields[2] is field 5 (pgrp).
        if fields.len() > 2 && fields[2] == pgid.to_string() && fields[0] != "Z" {
            pids.push(pid);
        }
    }
    pids
}

/// The lines `line 000 abcdefghij` … as the test jobs print them (19 bytes each).
pub fn numbered_lines(count: usize) -> Vec<String> {
    (0..count).map(|i| format!("line {i:03} abcdefghij\n")).collect()
}

/// A shell loop printing [`numbered_lines`]`(count)`, pausing `pause` seconds every `batch`.
pub fn print_lines_script(count: usize, batch: usize, pause: &str) -> String {
    format!(
        "i=0; while [ $i -lt {count} ]; do printf 'line %03d abcdefghij\\n' $i; i=$((i+1)); \
         if [ $((i % {batch})) -eq 0 ]; then sleep {pause}; fi; done"
    )
}
