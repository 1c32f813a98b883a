//! A job's directories under `<data dir>/jobs/<id>/`, and who may enter them.
//!
//! | path | mode | what |
//! | --- | --- | --- |
//! | `checkpoint/` | 0700, owned by the job's user | `$FAIRWAY_CHECKPOINT_DIR`, kept across runs |
//! | `notice/` | 0755 | `$FAIRWAY_PREEMPT_NOTICE_FILE` (mounted read-only into containers) |
//! | `logs/` | 0700 | the replicas' logs, written by the shim |
//! | `runs/<n>/` | 0700 | each run's launch and exit records |
//!
//! The job directory itself is 0700, or 0711 when the job runs as another user (`run_as`),
//! who must pass through it to reach its checkpoint directory but may list nothing.

use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use fairway_exec::RunAs;

use super::runs::COMPLETION_FILE;

pub(crate) struct JobDirs {
    pub checkpoint: PathBuf,
    pub notice_file: PathBuf,
    pub logs: PathBuf,
}

impl JobDirs {
    pub fn of(job_dir: &Path) -> JobDirs {
        JobDirs {
            checkpoint: job_dir.join("checkpoint"),
            notice_file: job_dir.join("notice").join("preempt-notice.json"),
            logs: job_dir.join("logs"),
        }
    }
}

/// Creates the directories of a job about to run, with the modes above; clears what an
/// earlier run left that this run must not read as its own (a notice, a completion mark).
pub(crate) fn prepare(job_dir: &Path, run_as: Option<RunAs>) -> io::Result<JobDirs> {
    let dirs = JobDirs::of(job_dir);
    let notice_dir = dirs.notice_file.parent().expect("in its own directory");
    for dir in [job_dir, &dirs.checkpoint, notice_dir, &dirs.logs] {
        std::fs::create_dir_all(dir)?;
    }
    let job_mode = if run_as.is_some() { 0o711 } else { 0o700 };
    std::fs::set_permissions(job_dir, std::fs::Permissions::from_mode(job_mode))?;
    std::fs::set_permissions(&dirs.checkpoint, std::fs::Permissions::from_mode(0o700))?;
    std::fs::set_permissions(notice_dir, std::fs::Permissions::from_mode(0o755))?;
    std::fs::set_permissions(&dirs.logs, std::fs::Permissions::from_mode(0o700))?;
    if let Some(user) = run_as {
        std::os::unix::fs::chown(&dirs.checkpoint, Some(user.uid), Some(user.gid))?;
    }
    remove_if_there(&dirs.notice_file)?;
    remove_if_there(&dirs.checkpoint.join(COMPLETION_FILE))?;
    Ok(dirs)
}

fn remove_if_there(path: &Path) -> io::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}
