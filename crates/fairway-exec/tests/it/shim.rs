//! The shim protocol end to end: launch, log, exit.json, spawn errors, signals.

use std::fs;
use std::os::unix::process::ExitStatusExt;

use fairway_exec::{
    ExecError, JOB_STARTED_FILE, LAUNCH_FILE, LaunchSpec, PreemptNotice, SHIM_LOG_FILE, Signal, is_same_process_alive,
    job_ran, launch, process_start_ticks, read_exit, read_preempt_notice, signal_group, write_preempt_notice,
};

use crate::support::*;

#[test]
fn output_lands_in_the_log_and_exit_json_records_the_code() {
    let dir = tempfile::tempdir().unwrap();
    let mut spec = spec(dir.path(), &[]);
    spec.argv = sh("echo to-stdout; echo to-stderr >&2; exit 0");
    spec.log_path = dir.path().join("logs").join("job-7").join("job.log"); // directories made by the shim
    let mut launched = launch(&spec).unwrap();
    assert_eq!(process_start_ticks(launched.pid), Some(launched.start_ticks));

    let exit = wait_exit(&mut launched, &spec);
    assert_eq!((exit.code, exit.signal, exit.spawn_error.as_deref()), (Some(0), None, None));
    assert!(exit.success());
    assert!(exit.finished_at_unix_ms > 1_600_000_000_000);
    let log = read_log(&spec);
    assert!(log.contains("to-stdout\n") && log.contains("to-stderr\n"), "log: {log:?}");
    // launch.json is the spec, for the shim and for people debugging a run.
    let written: LaunchSpec = serde_json::from_slice(&fs::read(spec.run_dir.join(LAUNCH_FILE)).unwrap()).unwrap();
    assert_eq!(written, spec);
    // The shim is gone (and reaped): not alive under its pid and start time.
    assert!(!is_same_process_alive(launched.pid, launched.start_ticks));
}

/// A restarted server tells a run whose job ran (and may have been lost) from one whose
/// launch it never finished by what the shim leaves in the run directory.
#[test]
fn the_run_directory_says_whether_the_job_ran() {
    let dir = tempfile::tempdir().unwrap();
    let mut spec = spec(dir.path(), &[]);
    spec.argv = sh("sleep 30");
    assert!(!job_ran(&spec.run_dir), "nothing launched yet");
    let mut launched = launch(&spec).unwrap();
    let started = std::time::Instant::now();
    while !spec.run_dir.join(JOB_STARTED_FILE).exists() {
        assert!(started.elapsed() < std::time::Duration::from_secs(30), "the shim never started the job");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    // Killed with its shim: no exit.json, but the job ran.
    signal_group(launched.pid, Signal::Kill).unwrap();
    wait_shim(&mut launched);
    assert!(read_exit(&spec.run_dir).unwrap().is_none());
    assert!(job_ran(&spec.run_dir));
    // Only the shim's own files count: the server's launch.json alone is a job that never ran.
    for entry in fs::read_dir(&spec.run_dir).unwrap().flatten() {
        if entry.file_name() != LAUNCH_FILE {
            fs::remove_file(entry.path()).unwrap();
        }
    }
    assert!(!job_ran(&spec.run_dir));
    spec.argv = sh("exit 4");
    let mut again = launch(&spec).unwrap();
    wait_shim(&mut again);
    assert_eq!(read_exit(&spec.run_dir).unwrap().unwrap().code, Some(4));
    assert!(job_ran(&spec.run_dir));
}

#[test]
fn non_zero_exit_is_recorded_and_mirrored() {
    let dir = tempfile::tempdir().unwrap();
    let mut spec = spec(dir.path(), &[]);
    spec.argv = sh("echo failing; exit 3");
    let mut launched = launch(&spec).unwrap();
    let status = wait_shim(&mut launched);
    assert_eq!(status.code(), Some(3));
    let exit = read_exit(&spec.run_dir).unwrap().unwrap();
    assert_eq!((exit.code, exit.signal), (Some(3), None));
    assert!(!exit.success());
}

#[test]
fn missing_program_is_a_spawn_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let spec = spec(dir.path(), &["fairway-no-such-program-xyz", "--flag"]);
    let mut launched = launch(&spec).unwrap();
    let status = wait_shim(&mut launched);
    assert_eq!(status.code(), Some(fairway_exec::SHIM_EXIT_SPAWN_FAILED));
    let exit = read_exit(&spec.run_dir).unwrap().unwrap();
    assert_eq!((exit.code, exit.signal), (None, None));
    let error = exit.spawn_error.expect("spawn_error");
    assert!(error.contains("fairway-no-such-program-xyz") && error.contains("No such file"), "{error}");
    // The raw file carries the field by name, for the server and for people.
    let raw: serde_json::Value = serde_json::from_slice(&fs::read(spec.run_dir.join("exit.json")).unwrap()).unwrap();
    assert!(raw["spawn_error"].is_string() && raw["code"].is_null());
    // The shim's own log says the same.
    let shim_log = fs::read_to_string(spec.run_dir.join(SHIM_LOG_FILE)).unwrap();
    assert!(shim_log.contains("fairway-no-such-program-xyz"), "{shim_log}");
}

#[test]
fn missing_working_directory_is_a_spawn_error() {
    let dir = tempfile::tempdir().unwrap();
    let mut spec = spec(dir.path(), &["true"]);
    spec.cwd = Some(dir.path().join("nope"));
    let mut launched = launch(&spec).unwrap();
    wait_shim(&mut launched);
    let error = read_exit(&spec.run_dir).unwrap().unwrap().spawn_error.expect("spawn_error");
    assert!(error.contains("working directory") && error.contains("nope"), "{error}");
}

#[test]
fn env_and_cwd_reach_the_job_and_the_server_env_is_inherited() {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work dir");
    fs::create_dir(&work).unwrap();
    let mut spec = spec(dir.path(), &[]);
    spec.argv = sh(
        r#"echo "foo=$FAIRWAY_TEST_FOO"; echo "cvd=$CUDA_VISIBLE_DEVICES"; pwd -P; [ -n "$PATH" ] && echo has-path"#,
    );
    spec.cwd = Some(work.clone());
    spec.env.insert("FAIRWAY_TEST_FOO".into(), "bar baz".into());
    spec.env.insert("CUDA_VISIBLE_DEVICES".into(), "2,3".into());
    let mut launched = launch(&spec).unwrap();
    assert_eq!(wait_exit(&mut launched, &spec).code, Some(0));
    let expected = format!("foo=bar baz\ncvd=2,3\n{}\nhas-path\n", work.canonicalize().unwrap().display());
    assert_eq!(read_log(&spec), expected);
}

#[test]
fn sigterm_to_the_group_reaches_the_job_and_the_shim_records_its_exit() {
    let dir = tempfile::tempdir().unwrap();
    let mut spec = spec(dir.path(), &[]);
    spec.argv = sh(r#"trap 'echo got-term; exit 143' TERM; echo ready; while :; do sleep 0.05; done"#);
    let mut launched = launch(&spec).unwrap();
    wait_for("the job to start", || read_log(&spec).contains("ready"));
    assert!(is_same_process_alive(launched.pid, launched.start_ticks));
    signal_group(launched.pid, Signal::Term).unwrap();
    let exit = wait_exit(&mut launched, &spec);
    assert_eq!((exit.code, exit.signal), (Some(143), None));
    assert!(read_log(&spec).contains("got-term\n"));
    wait_for("the group to be gone", || live_group_members(launched.pid).is_empty());
}

#[test]
fn sigterm_default_action_kills_a_job_without_a_handler() {
    // The shim's handlers must not be inherited as "ignore": `sleep` has no handler of its own.
    let dir = tempfile::tempdir().unwrap();
    let mut spec = spec(dir.path(), &[]);
    spec.argv = sh("echo ready; exec sleep 30");
    let mut launched = launch(&spec).unwrap();
    wait_for("the job to start", || read_log(&spec).contains("ready"));
    signal_group(launched.pid, Signal::Term).unwrap();
    let exit = wait_exit(&mut launched, &spec);
    assert_eq!((exit.code, exit.signal), (None, Some(15)));
}

#[test]
fn sigkill_of_the_group_leaves_no_exit_json_and_no_process() {
    let dir = tempfile::tempdir().unwrap();
    let mut spec = spec(dir.path(), &[]);
    spec.argv = sh("echo ready; sleep 30; echo never");
    let mut launched = launch(&spec).unwrap();
    wait_for("the job to start", || read_log(&spec).contains("ready"));
    assert!(live_group_members(launched.pid).len() >= 2, "shim and job share the group");
    signal_group(launched.pid, Signal::Kill).unwrap();
    let status = wait_shim(&mut launched);
    assert_eq!(status.signal(), Some(9));
    assert_eq!(read_exit(&spec.run_dir).unwrap(), None);
    assert!(!is_same_process_alive(launched.pid, launched.start_ticks));
    wait_for("the group to be gone", || live_group_members(launched.pid).is_empty());
    // Signalling a group that is gone is fine.
    signal_group(launched.pid, Signal::Kill).unwrap();
}

#[test]
fn launch_rejects_unusable_specs_and_names_a_missing_shim() {
    let dir = tempfile::tempdir().unwrap();
    let empty = spec(dir.path(), &[]);
    assert!(matches!(launch(&empty), Err(ExecError::InvalidSpec(m)) if m.contains("argv is empty")));
    let mut no_log = spec(dir.path(), &["true"]);
    no_log.log_files_max = 0;
    assert!(matches!(launch(&no_log), Err(ExecError::InvalidSpec(m)) if m.contains("log_files_max")));
    let mut nul = spec(dir.path(), &["true"]);
    nul.env.insert("A".into(), "x\0y".into());
    assert!(matches!(launch(&nul), Err(ExecError::InvalidSpec(m)) if m.contains("NUL")));
    let mut no_shim = spec(dir.path(), &["true"]);
    no_shim.shim_exe = dir.path().join("no-such-shim");
    let err = launch(&no_shim).unwrap_err();
    assert!(matches!(err, ExecError::SpawnShim { .. }), "{err:?}");
    assert!(err.to_string().contains("no-such-shim"), "{err}");
}

#[test]
fn a_leftover_exit_json_is_removed_before_the_next_launch() {
    let dir = tempfile::tempdir().unwrap();
    let mut first = spec(dir.path(), &[]);
    first.argv = sh("exit 4");
    let mut launched = launch(&first).unwrap();
    assert_eq!(wait_exit(&mut launched, &first).code, Some(4));
    let mut second = first.clone();
    second.argv = sh("echo ready; sleep 30");
    let mut launched = launch(&second).unwrap();
    assert_eq!(read_exit(&second.run_dir).unwrap(), None);
    signal_group(launched.pid, Signal::Kill).unwrap();
    wait_shim(&mut launched);
}

#[test]
fn preempt_notice_is_written_atomically_as_json() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("preempt.json");
    let notice = PreemptNotice {
        deadline_unix_ms: 1_767_225_630_000,
        preemptor_job_id: Some(42),
        grace_seconds: 30,
        reason: "preempted by job 42 (priority high)".into(),
        cause: Some("priority".into()),
    };
    write_preempt_notice(&path, &notice).unwrap();
    let raw: serde_json::Value = serde_json::from_slice(&fs::read(&path).unwrap()).unwrap();
    assert_eq!(raw["deadline_unix_ms"], 1_767_225_630_000u64);
    assert_eq!(raw["preemptor_job_id"], 42);
    assert_eq!(raw["cause"], "priority");
    assert_eq!(read_preempt_notice(&path).unwrap(), Some(notice.clone()));
    // A notice written before `cause` existed still reads.
    let older = r#"{"deadline_unix_ms":1,"preemptor_job_id":null,"grace_seconds":0,"reason":"r"}"#;
    fs::write(&path, older).unwrap();
    assert_eq!(read_preempt_notice(&path).unwrap().map(|n| n.cause), Some(None));
    // Overwriting leaves exactly one file: no temporary file behind.
    write_preempt_notice(&path, &PreemptNotice { grace_seconds: 5, ..notice }).unwrap();
    let names: Vec<_> = fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names, vec![std::ffi::OsString::from("preempt.json")]);
    assert_eq!(read_preempt_notice(&dir.path().join("absent.json")).unwrap(), None);
}
