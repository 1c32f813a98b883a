//! The server's side of the shim protocol: write `launch.json`, start the shim in its own
//! process group, read `exit.json` back, write the preemption notice.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use crate::fsutil::{read_json_opt, write_json_atomic};
use crate::{ExecError, process_start_ticks};

/// The shim's input, in `run_dir/launch.json`.
pub const LAUNCH_FILE: &str = "launch.json";
/// The shim's output when the job has exited, in `run_dir/exit.json`.
pub const EXIT_FILE: &str = "exit.json";
/// The shim's own stdout and stderr (its diagnostics, never the job's output), in `run_dir`.
pub const SHIM_LOG_FILE: &str = "shim.log";
/// Written by the shim, in `run_dir`, just before it starts the job: a run directory
/// without it (and without `exit.json`) is one whose job never ran, as when the server died
/// while launching it.
pub const JOB_STARTED_FILE: &str = "job-started";
/// The subcommand the shim executable must dispatch to [`crate::run_shim`].
pub const SHIM_SUBCOMMAND: &str = "__shim";

/// Everything the shim needs to run one job. The server builds it; [`launch`] writes it to
/// `run_dir/launch.json` for the shim.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LaunchSpec {
    /// The job, for diagnostics.
    pub job_id: u64,
    /// The per-run directory (the server chooses it; created if missing). The shim reads
    /// `launch.json` and writes `exit.json` and `shim.log` here.
    pub run_dir: PathBuf,
    /// The job's combined stdout+stderr log (its directory is created if missing). Rotated
    /// copies are `<log_path>.1`, `.2`, …
    pub log_path: PathBuf,
    /// The most bytes in one log file before it is rotated (at least 1).
    pub log_bytes_max: u64,
    /// The most log files kept, the current one included (at least 1).
    pub log_files_max: u32,
    /// The command: `argv[0]` is looked up on the job's `PATH`.
    pub argv: Vec<String>,
    /// The job's working directory; the shim's (the server's) when `None`.
    pub cwd: Option<PathBuf>,
    /// Environment added to the inherited one: `FAIRWAY_*`, `CUDA_VISIBLE_DEVICES`, the job's own.
    pub env: BTreeMap<String, String>,
    /// The executable that runs the shim as `<shim_exe> __shim <run_dir>`, usually the
    /// `fairway` binary itself (`std::env::current_exe()`).
    pub shim_exe: PathBuf,
    /// The Unix user and group the job runs as (the shim stays the server's user, to write
    /// the log and exit record). Switching needs a root server; `None`: the shim's own user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_as: Option<RunAs>,
}

/// A Unix identity to run a job as.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RunAs {
    /// The user id.
    pub uid: u32,
    /// The primary group id. Supplementary groups are dropped.
    pub gid: u32,
}

impl LaunchSpec {
    /// Checks what the shim cannot recover from.
    pub fn validate(&self) -> Result<(), ExecError> {
        let bad = |what: &str| Err(ExecError::InvalidSpec(format!("job {}: {what}", self.job_id)));
        if self.argv.first().is_none_or(|a| a.is_empty()) {
            return bad("argv is empty");
        }
        if self.log_bytes_max == 0 {
            return bad("log_bytes_max must be at least 1");
        }
        if self.log_files_max == 0 {
            return bad("log_files_max must be at least 1");
        }
        if let Some(key) = self.env.keys().find(|k| k.is_empty() || k.contains(['=', '\0'])) {
            return bad(&format!("bad environment variable name {key:?}"));
        }
        if let Some(key) = self.env.iter().find(|(_, v)| v.contains('\0')).map(|(k, _)| k) {
            return bad(&format!("environment variable {key} contains a NUL byte"));
        }
        if self.argv.iter().any(|a| a.contains('\0')) {
            return bad("argv contains a NUL byte");
        }
        Ok(())
    }
}

/// A started shim.
#[derive(Debug)]
pub struct Launched {
    /// The shim's pid, which is also the process group id of the shim and the job.
    pub pid: u32,
    /// The shim's start time (`/proc/<pid>/stat` field 22); store it with the pid and use
    /// [`crate::is_same_process_alive`] after a server restart.
    pub start_ticks: u64,
    /// The shim process. The server must reap it (`wait`/`try_wait`, or hand it to a thread),
    /// or it stays a zombie after exiting; a zombie counts as not alive.
    pub child: Child,
}

/// Writes `run_dir/launch.json` and starts `<shim_exe> __shim <run_dir>` as the leader of a
/// new process group, with stdin from `/dev/null` and stdout/stderr into `run_dir/shim.log`.
/// The job itself is started by the shim; if that fails (say `argv[0]` is not found), the shim
/// records it as `spawn_error` in `exit.json`.
pub fn launch(spec: &LaunchSpec) -> Result<Launched, ExecError> {
    spec.validate()?;
    fs::create_dir_all(&spec.run_dir)
        .map_err(|e| ExecError::io(format!("creating run directory {}", spec.run_dir.display()), e))?;
    // Leftovers from an earlier attempt in the same directory would read as this run's.
    for leftover in [EXIT_FILE, JOB_STARTED_FILE] {
        let path = spec.run_dir.join(leftover);
        match fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(ExecError::io(format!("removing {}", path.display()), e)),
        }
    }
    write_json_atomic(&spec.run_dir.join(LAUNCH_FILE), spec)?;
    let shim_log_path = spec.run_dir.join(SHIM_LOG_FILE);
    let shim_log = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&shim_log_path)
        .map_err(|e| ExecError::io(format!("opening {}", shim_log_path.display()), e))?;
    let shim_err = shim_log.try_clone().map_err(|e| ExecError::io("duplicating the shim log handle", e))?;
    let child = Command::new(&spec.shim_exe)
        .arg(SHIM_SUBCOMMAND)
        .arg(&spec.run_dir)
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(shim_log)
        .stderr(shim_err)
        .spawn()
        .map_err(|source| ExecError::SpawnShim { exe: spec.shim_exe.clone(), source })?;
    let pid = child.id();
    // The pid cannot be reused before we reap it, so this read cannot see another process.
    let start_ticks = process_start_ticks(pid).ok_or_else(|| {
        ExecError::io(format!("reading /proc/{pid}/stat of the new shim"), std::io::Error::other("not readable"))
    })?;
    tracing::debug!(job_id = spec.job_id, pid, run_dir = %spec.run_dir.display(), "started shim");
    Ok(Launched { pid, start_ticks, child })
}

/// How a job ended, as the shim recorded it in `exit.json`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ExitRecord {
    /// The exit code, when the job exited normally.
    pub code: Option<i32>,
    /// The signal number, when a signal killed the job (15 = SIGTERM, 9 = SIGKILL).
    pub signal: Option<i32>,
    /// When the shim saw the job end (or fail to start).
    pub finished_at_unix_ms: u64,
    /// Set when the job never started: the OS error and `argv[0]` (or the working directory or
    /// log file that was unusable). `code` and `signal` are then `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spawn_error: Option<String>,
}

impl ExitRecord {
    /// Whether the job ran and exited with code 0.
    pub fn success(&self) -> bool {
        self.code == Some(0) && self.spawn_error.is_none()
    }
}

/// Did the shim of `run_dir` get as far as starting the job (or recording why it could not)?
/// `false` for a launch the server never finished.
pub fn job_ran(run_dir: &Path) -> bool {
    run_dir.join(JOB_STARTED_FILE).exists() || run_dir.join(EXIT_FILE).exists()
}

/// Reads `run_dir/exit.json`: `Ok(None)` while the job runs, and for good when the group was
/// killed with SIGKILL (the shim died with the job: the server reads that as killed/lost once
/// [`crate::is_same_process_alive`] says the shim is gone).
pub fn read_exit(run_dir: &Path) -> Result<Option<ExitRecord>, ExecError> {
    read_json_opt(&run_dir.join(EXIT_FILE))
}

/// The notice a job may read before it is preempted; the server writes it where
/// `FAIRWAY_PREEMPT_NOTICE_FILE` points, then sends SIGTERM.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PreemptNotice {
    /// When the server will send SIGKILL if the job is still running.
    pub deadline_unix_ms: u64,
    /// The job that needs the GPUs, if the preemption is for a job (not, say, a drain).
    pub preemptor_job_id: Option<u64>,
    /// The grace period the deadline was computed from.
    pub grace_seconds: u64,
    /// Why, for people: `preempted by job 42 (priority high)`.
    pub reason: String,
    /// Why, for programs: `priority` (the preemptor's priority is higher) or `reclaim` (a
    /// member of the job's cohort takes back what the job's project borrows). Optional, so
    /// that a notice without it still reads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<String>,
}

/// Writes `notice` as JSON to `path` atomically (temporary file + rename), so a job polling
/// the file never reads half of it.
pub fn write_preempt_notice(path: &Path, notice: &PreemptNotice) -> Result<(), ExecError> {
    write_json_atomic(path, notice)
}

/// Reads a preemption notice; `Ok(None)` if the file does not exist.
pub fn read_preempt_notice(path: &Path) -> Result<Option<PreemptNotice>, ExecError> {
    read_json_opt(path)
}
