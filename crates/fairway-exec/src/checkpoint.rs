//! The checkpoint report file: how a job tells the server when it last checkpointed.
//!
//! The job writes (or just touches) `$FAIRWAY_CHECKPOINT_DIR/.fairway-checkpoint` after each
//! checkpoint it has fully saved. If the file holds a Unix timestamp in milliseconds (decimal,
//! surrounding whitespace ignored), that is the checkpoint time; otherwise the file's mtime is.
//! The server uses it to tell how much work a preemption would lose.

use std::fs;
use std::path::Path;

use crate::ExecError;
use crate::fsutil::{unix_ms, write_atomic};

/// The marker's file name inside the checkpoint directory.
pub const CHECKPOINT_MARKER_FILE: &str = ".fairway-checkpoint";

/// When the job last reported a checkpoint, in Unix milliseconds; `None` if it never did.
pub fn checkpoint_marker_time(checkpoint_dir: &Path) -> Option<u64> {
    let path = checkpoint_dir.join(CHECKPOINT_MARKER_FILE);
    let meta = fs::metadata(&path).ok()?;
    let content = fs::read_to_string(&path).unwrap_or_default();
    match content.trim().parse::<u64>() {
        Ok(ms) => Some(ms),
        Err(_) => meta.modified().ok().map(unix_ms),
    }
}

/// Writes the marker with `at_unix_ms` (what a job does after saving a checkpoint), atomically.
pub fn write_checkpoint_marker(checkpoint_dir: &Path, at_unix_ms: u64) -> Result<(), ExecError> {
    write_atomic(&checkpoint_dir.join(CHECKPOINT_MARKER_FILE), format!("{at_unix_ms}\n").as_bytes())
}
