//! The example trainer under the shim: checkpoint, SIGTERM, save, 143, resume, finish.

use std::fs;
use std::process::Command;

use fairway_exec::{
    PreemptNotice, Signal, TRAINER_STATE_FILE, TrainerArgs, checkpoint_marker_time, launch, signal_group,
    write_checkpoint_marker, write_preempt_notice,
};

use crate::support::*;

fn trainer_argv(steps: u64, checkpoint_every: u64, step_ms: u64) -> Vec<String> {
    let exe = helper_exe().display().to_string();
    [exe, "example-trainer".into(), "--steps".into(), steps.to_string(), "--checkpoint-every".into()]
        .into_iter()
        .chain([checkpoint_every.to_string(), "--step-ms".into(), step_ms.to_string()])
        .collect()
}

/// The last `step i/N` the trainer printed.
fn last_step(log: &str) -> u64 {
    log.lines()
        .filter_map(|l| l.strip_prefix("step ")?.split('/').next()?.parse().ok())
        .next_back()
        .expect("a step line")
}

#[test]
fn trainer_checkpoints_stops_on_sigterm_and_resumes_after_restart() {
    let dir = tempfile::tempdir().unwrap();
    let checkpoint_dir = dir.path().join("ckpt");
    let notice_path = dir.path().join("preempt.json");
    let mut first = spec(&dir.path().join("attempt-0"), &[]);
    first.argv = trainer_argv(100_000, 5, 2);
    first.env.insert("FAIRWAY_CHECKPOINT_DIR".into(), checkpoint_dir.display().to_string());
    first.env.insert("FAIRWAY_RESTART_COUNT".into(), "0".into());
    first.env.insert("FAIRWAY_PREEMPT_NOTICE_FILE".into(), notice_path.display().to_string());
    let mut launched = launch(&first).unwrap();
    wait_for("a periodic checkpoint", || read_log(&first).contains("checkpoint saved at step 10\n"));
    assert!(checkpoint_marker_time(&checkpoint_dir).is_some());

    let notice = PreemptNotice {
        deadline_unix_ms: 1_900_000_000_000,
        preemptor_job_id: Some(9),
        grace_seconds: 30,
        reason: "preempted by job 9".into(),
        cause: Some("priority".into()),
    };
    write_preempt_notice(&notice_path, &notice).unwrap();
    signal_group(launched.pid, Signal::Term).unwrap();
    let exit = wait_exit(&mut launched, &first);
    assert_eq!((exit.code, exit.signal), (Some(143), None));

    let log = read_log(&first);
    assert!(log.starts_with("starting from step 0 (restart 0)\n"), "{log}");
    assert!(log.contains("got SIGTERM") && log.contains("deadline_unix_ms=1900000000000"), "{log}");
    let saved = last_step(&log);
    assert!(saved >= 10);
    assert!(log.ends_with(&format!("checkpoint saved at step {saved}\n")), "{log}");
    let state: serde_json::Value =
        serde_json::from_slice(&fs::read(checkpoint_dir.join(TRAINER_STATE_FILE)).unwrap()).unwrap();
    assert_eq!(state["step"], saved);

    let mut second = spec(&dir.path().join("attempt-1"), &[]);
    second.argv = trainer_argv(saved + 7, 5, 1);
    second.env = first.env.clone();
    second.env.insert("FAIRWAY_RESTART_COUNT".into(), "1".into());
    let mut launched = launch(&second).unwrap();
    let exit = wait_exit(&mut launched, &second);
    assert_eq!(exit.code, Some(0));
    let log = read_log(&second);
    assert!(log.starts_with(&format!("resumed from step {saved} (restart 1)\n")), "{log}");
    assert!(log.contains(&format!("\nstep {}/{}", saved + 1, saved + 7)), "{log}");
    assert!(!log.contains("\nstep 1/"), "{log}");
    assert!(log.ends_with("done\n"), "{log}");
}

#[test]
fn trainer_fails_at_the_requested_step() {
    let dir = tempfile::tempdir().unwrap();
    let output = Command::new(helper_exe())
        .args(["example-trainer", "--steps", "10", "--step-ms", "1", "--fail-at-step", "3"])
        .env("FAIRWAY_CHECKPOINT_DIR", dir.path())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert!(stdout.contains("step 2/10 loss=") && !stdout.contains("step 3/10"), "{stdout}");
    assert!(String::from_utf8(output.stderr).unwrap().contains("simulated failure at step 3"));
}

#[test]
fn trainer_args_parse() {
    let args = |s: &str| TrainerArgs::parse_args(s.split_whitespace().map(String::from));
    assert_eq!(
        args("--steps 5 --checkpoint-every 2 --step-ms 7 --fail-at-step 4").unwrap(),
        TrainerArgs { steps: 5, checkpoint_every: 2, step_ms: 7, fail_at_step: Some(4) }
    );
    assert_eq!(args("").unwrap(), TrainerArgs::default());
    assert!(args("--steps").unwrap_err().contains("needs a value"));
    assert!(args("--steps x").unwrap_err().contains("not a whole number"));
    assert!(args("--speed 1").unwrap_err().contains("unknown option --speed"));
}

#[test]
fn checkpoint_marker_content_or_mtime() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(checkpoint_marker_time(dir.path()), None);
    write_checkpoint_marker(dir.path(), 1_234_567).unwrap();
    assert_eq!(checkpoint_marker_time(dir.path()), Some(1_234_567));
    // A plain touch: the mtime counts.
    fs::write(dir.path().join(fairway_exec::CHECKPOINT_MARKER_FILE), "").unwrap();
    let now_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64;
    let at = checkpoint_marker_time(dir.path()).unwrap();
    assert!(at.abs_diff(now_ms) < 60_000, "{at} vs {now_ms}");
}
