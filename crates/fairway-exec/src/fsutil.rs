//! Small file helpers shared by the modules: atomic writes and the wall clock.

use std::fs;
use std::io::Write;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::ExecError;

/// Writes `bytes` to `path` atomically: a temporary file in the same directory, fsync, then
/// rename over `path`, so a reader sees the old content or the new, never a torn file.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), ExecError> {
    let file_name =
        path.file_name().ok_or_else(|| ExecError::InvalidSpec(format!("{} has no file name", path.display())))?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(file_name);
    tmp_name.push(format!(".tmp.{}", std::process::id()));
    let tmp = path.with_file_name(tmp_name);
    let result = (|| {
        let mut file = fs::File::create(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        fs::rename(&tmp, path)
    })();
    result.map_err(|e| {
        let _ = fs::remove_file(&tmp);
        ExecError::io(format!("writing {}", path.display()), e)
    })
}

/// Serialises `value` as pretty JSON and writes it with [`write_atomic`].
pub(crate) fn write_json_atomic<T: serde::Serialize>(path: &Path, value: &T) -> Result<(), ExecError> {
    let mut bytes =
        serde_json::to_vec_pretty(value).map_err(|source| ExecError::Json { path: path.to_owned(), source })?;
    bytes.push(b'\n');
    write_atomic(path, &bytes)
}

/// Reads a JSON file; `Ok(None)` when it does not exist.
pub(crate) fn read_json_opt<T: serde::de::DeserializeOwned>(path: &Path) -> Result<Option<T>, ExecError> {
    let bytes = match fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(ExecError::io(format!("reading {}", path.display()), e)),
    };
    serde_json::from_slice(&bytes).map(Some).map_err(|source| ExecError::Json { path: path.to_owned(), source })
}

/// Milliseconds since the Unix epoch of `time` (0 before the epoch).
pub(crate) fn unix_ms(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Milliseconds since the Unix epoch, now.
pub(crate) fn now_unix_ms() -> u64 {
    unix_ms(SystemTime::now())
}
