//! The shim: the small supervisor each job runs under (`fairway __shim <run_dir>`). It owns the
//! job's pipes and exit status, so the server can restart without losing either.

use std::io::{self, Read};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::AtomicBool;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crate::fsutil::{now_unix_ms, read_json_opt, write_json_atomic};
use crate::launch::{EXIT_FILE, JOB_STARTED_FILE, LAUNCH_FILE};
use crate::logs::RotatingWriter;
use crate::{ExitRecord, LaunchSpec};

/// Writes a line to the shim's own log (its stderr, `shim.log` in the run directory). Never
/// panics as `eprintln!` does when the write fails: on a full disk the shim must live on to
/// record the job's exit once there is room.
macro_rules! note {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

/// The shim's exit code when the job could not be started (as a shell's 127).
pub const SHIM_EXIT_SPAWN_FAILED: i32 = 127;
/// The shim's exit code when the shim itself failed (unreadable `launch.json`, cannot write
/// `exit.json`); see `shim.log`.
pub const SHIM_EXIT_SHIM_FAILED: i32 = 125;

/// How long the shim keeps draining the job's pipes after the job exited. Pipes stay open while
/// a background process the job started still holds them; the exit must be recorded anyway.
const DRAIN_AFTER_EXIT: Duration = Duration::from_secs(2);
const READ_CHUNK_BYTES: usize = 64 * 1024;

/// The body of the hidden `fairway __shim <run_dir>` subcommand; returns the process exit code.
///
/// Reads `run_dir/launch.json`, starts the job with stdout and stderr piped into one rotated
/// log, survives SIGTERM/SIGINT/SIGHUP (sent to the whole group for the job's benefit), waits
/// for the job, and writes `run_dir/exit.json` atomically. Its own exit code mirrors the job's
/// (the code, or 128 + signal), except [`SHIM_EXIT_SPAWN_FAILED`] and [`SHIM_EXIT_SHIM_FAILED`];
/// the server should trust `exit.json`, not this code.
pub fn run_shim(run_dir: &Path) -> i32 {
    // Handlers, unlike SIG_IGN, are reset to the default action in the exec'd job, so the job
    // still dies on (or handles) these signals while the shim lives on to record the exit.
    let received = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT, signal_hook::consts::SIGHUP] {
        if let Err(e) = signal_hook::flag::register(sig, Arc::clone(&received)) {
            note!("fairway shim: cannot install a handler for signal {sig}: {e}");
            return SHIM_EXIT_SHIM_FAILED;
        }
    }
    let spec: LaunchSpec = match read_json_opt(&run_dir.join(LAUNCH_FILE)) {
        Ok(Some(spec)) => spec,
        Ok(None) => {
            note!("fairway shim: {} does not exist", run_dir.join(LAUNCH_FILE).display());
            return SHIM_EXIT_SHIM_FAILED;
        }
        Err(e) => {
            note!("fairway shim: {e}");
            return SHIM_EXIT_SHIM_FAILED;
        }
    };
    let (record, code) = match supervise(&spec) {
        Ok(status) => (
            ExitRecord {
                code: status.code(),
                signal: status.signal(),
                finished_at_unix_ms: now_unix_ms(),
                spawn_error: None,
            },
            status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0)),
        ),
        Err(message) => {
            note!("fairway shim: job {}: {message}", spec.job_id);
            let record =
                ExitRecord { code: None, signal: None, finished_at_unix_ms: now_unix_ms(), spawn_error: Some(message) };
            (record, SHIM_EXIT_SPAWN_FAILED)
        }
    };
    match write_exit_record(run_dir, &record) {
        Ok(()) => code,
        Err(e) => {
            note!("fairway shim: job {}: {e}", spec.job_id);
            SHIM_EXIT_SHIM_FAILED
        }
    }
}

/// How long the shim keeps trying to record an exit it could not write (a full disk): while
/// it lives, the server sees the run as running, and reads the record once it lands, instead
/// of judging a finished job lost.
const EXIT_RECORD_RETRY_FOR: Duration = Duration::from_secs(600);

fn write_exit_record(run_dir: &Path, record: &ExitRecord) -> Result<(), crate::ExecError> {
    let started = Instant::now();
    let mut wait = Duration::from_millis(100);
    loop {
        match write_json_atomic(&run_dir.join(EXIT_FILE), record) {
            Ok(()) => return Ok(()),
            Err(e) if started.elapsed() >= EXIT_RECORD_RETRY_FOR => return Err(e),
            Err(e) => {
                if wait == Duration::from_millis(100) {
                    note!("fairway shim: cannot record the exit yet, retrying: {e}");
                }
                thread::sleep(wait);
                wait = (wait * 2).min(Duration::from_secs(5));
            }
        }
    }
}

/// Starts the job, copies its output into the log, and waits for it. `Err` is a message for
/// `spawn_error`: the job did not start.
fn supervise(spec: &LaunchSpec) -> Result<ExitStatus, String> {
    let argv0 = spec.argv.first().filter(|a| !a.is_empty()).ok_or("argv is empty")?;
    if spec.log_bytes_max == 0 || spec.log_files_max == 0 {
        return Err("log_bytes_max and log_files_max must be at least 1".to_owned());
    }
    if let Some(cwd) = spec.cwd.as_ref().filter(|cwd| !cwd.is_dir()) {
        return Err(format!("working directory {} does not exist or is not a directory", cwd.display()));
    }
    if let Some(parent) = spec.log_path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)
            .map_err(|e| format!("cannot create log directory {}: {e}", parent.display()))?;
    }
    let log = RotatingWriter::open(&spec.log_path, spec.log_bytes_max, spec.log_files_max)
        .map_err(|e| format!("cannot open log {}: {e}", spec.log_path.display()))?;
    let mut command = Command::new(argv0);
    command.args(&spec.argv[1..]).envs(&spec.env).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    if let Some(cwd) = &spec.cwd {
        command.current_dir(cwd);
    }
    if let Some(run_as) = spec.run_as {
        // std drops the supplementary groups when a root process sets the uid.
        std::os::unix::process::CommandExt::uid(&mut command, run_as.uid);
        std::os::unix::process::CommandExt::gid(&mut command, run_as.gid);
    }
    // Before the job can run: a restarted server that finds neither this nor `exit.json`
    // knows the job never ran. Without it the run would only be judged lost, never run twice.
    if let Err(e) = std::fs::File::create(spec.run_dir.join(JOB_STARTED_FILE)) {
        note!("fairway shim: job {}: cannot write {JOB_STARTED_FILE}: {e}", spec.job_id);
    }
    let mut child = command.spawn().map_err(|e| format!("cannot start {argv0:?}: {e}"))?;

    let log = Arc::new(Mutex::new(log));
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let stdout = child.stdout.take().map(|r| Box::new(r) as Box<dyn Read + Send>);
    let stderr = child.stderr.take().map(|r| Box::new(r) as Box<dyn Read + Send>);
    let mut copiers = 0;
    for reader in [stdout, stderr].into_iter().flatten() {
        let (log, done_tx) = (Arc::clone(&log), done_tx.clone());
        thread::spawn(move || {
            copy_into_log(reader, &log);
            let _ = done_tx.send(());
        });
        copiers += 1;
    }
    let status = loop {
        match child.wait() {
            Ok(status) => break status,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            // Not our child any more cannot happen; report rather than spin.
            Err(e) => return Err(format!("waiting for {argv0:?} failed: {e}")),
        }
    };
    let deadline = Instant::now() + DRAIN_AFTER_EXIT;
    for _ in 0..copiers {
        if done_rx.recv_timeout(deadline.saturating_duration_since(Instant::now())).is_err() {
            note!("fairway shim: job {}: output still open after the job exited; not waiting for it", spec.job_id);
            break;
        }
    }
    Ok(status)
}

/// Copies one pipe into the shared log, chunk by chunk as the job writes, so followers see
/// progress at once. Keeps draining after a log write error, so the job never blocks on a
/// full pipe.
fn copy_into_log(mut reader: Box<dyn Read + Send>, log: &Mutex<RotatingWriter>) {
    let mut buf = vec![0u8; READ_CHUNK_BYTES];
    let mut reported = false;
    loop {
        let n = match reader.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                note!("fairway shim: reading job output failed: {e}");
                return;
            }
        };
        let mut log = log.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let (Err(e), false) = (log.write_all(&buf[..n]), reported) {
            note!("fairway shim: writing the job log failed (output is dropped until it works again): {e}");
            reported = true;
        }
    }
}
