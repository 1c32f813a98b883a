//! The data directory: one owner at a time, one absolute path, and the files a local CLI
//! uses to find the server's admin token.
//!
//! - `fairway.lock`: an exclusive `flock` held for the server's whole life, holding the
//!   owner's pid. A second server on the same directory would restore the same queue and
//!   launch the same jobs twice; it is refused, naming the holder. The lock dies with the
//!   process (even on `kill -9`), so a crashed server never blocks the next start.
//! - `server.json`: the owner's pid and listen address, so that a CLI on this machine can
//!   check that the server it is about to send the admin token to is the one that owns this
//!   directory (see `docs/server.md`, Security).
//! - `admin.token` (mode 0600): the admin token, created at first start.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};
use serde::{Deserialize, Serialize};

use crate::ServerError;

pub const LOCK_FILE: &str = "fairway.lock";
pub const SERVER_FILE: &str = "server.json";
pub const ADMIN_TOKEN_FILE: &str = "admin.token";

/// How long a start waits for a lock that someone holds briefly (a CLI checking whether a
/// server runs takes a shared lock for an instant).
const LOCK_WAIT: Duration = Duration::from_secs(2);

/// The data directory, owned by this process until dropped.
#[derive(Debug)]
pub struct DataDir {
    /// Absolute and free of symlinks: every path derived from it (run directories, the
    /// checkpoint directory a job is given) means the same thing from any working directory.
    pub path: PathBuf,
    _lock: Flock<File>,
}

/// What `server.json` says.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerFile {
    pub pid: u32,
    /// `host:port` the server listens on.
    pub listen: String,
    pub tls: bool,
}

impl DataDir {
    /// Creates the directory if needed (mode 0700: it holds the store, the jobs' logs and
    /// the admin token), resolves it to an absolute path, and takes the lock.
    pub fn open(path: &Path) -> Result<DataDir, ServerError> {
        let io = |what: &str, source| ServerError::Io { what: format!("{what} {}", path.display()), source };
        if !path.exists() {
            std::fs::create_dir_all(path).map_err(|e| io("creating", e))?;
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700))
                .map_err(|e| io("restricting the permissions of", e))?;
        }
        let path = path.canonicalize().map_err(|e| io("resolving", e))?;
        let lock = lock(&path.join(LOCK_FILE))?;
        Ok(DataDir { path, _lock: lock })
    }

    /// Writes `server.json` once the listen address is known.
    pub fn write_server_file(&self, info: &ServerFile) -> Result<(), ServerError> {
        let text = serde_json::to_string_pretty(info).expect("plain data");
        write_private(&self.path.join(SERVER_FILE), text.as_bytes())
    }
}

/// Takes the exclusive lock, writing this process's pid into the file; a held lock is an
/// error naming the holder's pid.
fn lock(path: &Path) -> Result<Flock<File>, ServerError> {
    let io = |source| ServerError::Io { what: format!("opening the lock file {}", path.display()), source };
    let started = Instant::now();
    loop {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(path)
            .map_err(io)?;
        match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(mut locked) => {
                locked.set_len(0).map_err(io)?;
                locked.rewind().map_err(io)?;
                writeln!(locked, "{}", std::process::id()).map_err(io)?;
                locked.sync_all().map_err(io)?;
                return Ok(locked);
            }
            Err((mut file, Errno::EWOULDBLOCK)) => {
                if started.elapsed() < LOCK_WAIT {
                    std::thread::sleep(Duration::from_millis(50));
                    continue;
                }
                let mut text = String::new();
                let _ = file.read_to_string(&mut text);
                let holder = text.trim();
                let dir = path.parent().unwrap_or(path).display();
                return Err(ServerError::Config(match holder.parse::<u32>() {
                    Ok(pid) => format!(
                        "the data directory {dir} is in use by another Fairway server (pid {pid}); \
                         stop that server first, or give this one another --data-dir"
                    ),
                    Err(_) => format!("the data directory {dir} is locked by another process; stop it first"),
                }));
            }
            Err((_, errno)) => return Err(io(std::io::Error::from(errno))),
        }
    }
}

/// Whether a server holds the lock of `data_dir` now: a shared lock cannot be taken while
/// it does. Taken and released at once when no server holds it.
pub fn server_holds_lock(data_dir: &Path) -> bool {
    let Ok(file) = File::open(data_dir.join(LOCK_FILE)) else { return false };
    match Flock::lock(file, FlockArg::LockSharedNonblock) {
        Ok(_released_on_drop) => false,
        Err((_, errno)) => errno == Errno::EWOULDBLOCK,
    }
}

/// Keeps the data directory to its owner: 0700, or 0711 when jobs run as other users
/// (`run_as`), who must pass through it to their own checkpoint directories but may list
/// nothing. `jobs/` gets the same mode.
pub fn restrict(data_dir: &Path, run_as_configured: bool) -> Result<(), ServerError> {
    let mode = if run_as_configured { 0o711 } else { 0o700 };
    let jobs = data_dir.join("jobs");
    std::fs::create_dir_all(&jobs)
        .map_err(|source| ServerError::Io { what: format!("creating {}", jobs.display()), source })?;
    for dir in [data_dir, jobs.as_path()] {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode))
            .map_err(|source| ServerError::Io { what: format!("restricting {}", dir.display()), source })?;
    }
    Ok(())
}

/// The store holds every job's spec and env: readable by its owner only. SQLite gives its
/// `-wal` and `-shm` files the database file's mode.
pub fn restrict_store_files(db_path: &Path) -> Result<(), ServerError> {
    for suffix in ["", "-wal", "-shm"] {
        let path = PathBuf::from(format!("{}{suffix}", db_path.display()));
        if path.exists() {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
                .map_err(|source| ServerError::Io { what: format!("restricting {}", path.display()), source })?;
        }
    }
    Ok(())
}

/// What a server records in its user's registry so that `fairway` on this machine finds
/// its data directory (and so its admin token) from the port alone.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Registration {
    data_dir: PathBuf,
}

/// The registry file of a port: `<registry_dir>/port-<port>.json`.
pub fn registry_file(registry_dir: &Path, port: u16) -> PathBuf {
    registry_dir.join(format!("port-{port}.json"))
}

/// Records `data_dir` for the port of `addr`; `None` (and a warning) if that cannot be done,
/// which only costs CLIs the automatic lookup.
pub fn register(registry_dir: &Path, addr: std::net::SocketAddr, data_dir: &Path) -> Option<PathBuf> {
    let file = registry_file(registry_dir, addr.port());
    let text = serde_json::to_string(&Registration { data_dir: data_dir.to_owned() }).expect("plain data");
    let written = std::fs::create_dir_all(registry_dir)
        .map_err(|e| e.to_string())
        .and_then(|()| write_private(&file, text.as_bytes()).map_err(|e| e.to_string()));
    match written {
        Ok(()) => Some(file),
        Err(e) => {
            tracing::warn!("cannot record this server in {}: {e}", registry_dir.display());
            None
        }
    }
}

/// The data directory a registry file names.
pub fn read_registry(file: &Path) -> Option<PathBuf> {
    let text = std::fs::read_to_string(file).ok()?;
    serde_json::from_str::<Registration>(&text).ok().map(|r| r.data_dir)
}

/// Reads `server.json` of a data directory.
pub fn read_server_file(data_dir: &Path) -> Option<ServerFile> {
    let text = std::fs::read_to_string(data_dir.join(SERVER_FILE)).ok()?;
    serde_json::from_str(&text).ok()
}

/// Writes a file only its owner may read, atomically (a reader never sees half of it).
pub fn write_private(path: &Path, bytes: &[u8]) -> Result<(), ServerError> {
    let io = |source| ServerError::Io { what: format!("writing {}", path.display()), source };
    let tmp = path.with_extension("tmp");
    let _ = std::fs::remove_file(&tmp);
    let mut file = OpenOptions::new().write(true).create_new(true).mode(0o600).open(&tmp).map_err(io)?;
    file.write_all(bytes).map_err(io)?;
    file.sync_all().map_err(io)?;
    std::fs::rename(&tmp, path).map_err(io)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_owner_is_refused_naming_the_first() {
        let dir = tempfile::tempdir().unwrap();
        let first = DataDir::open(dir.path()).unwrap();
        assert!(server_holds_lock(&first.path));
        let err = DataDir::open(dir.path()).unwrap_err().to_string();
        assert!(err.contains(&format!("pid {}", std::process::id())), "{err}");
        drop(first);
        assert!(!server_holds_lock(dir.path()));
        DataDir::open(dir.path()).expect("free again once the owner is gone");
    }

    #[test]
    fn a_new_directory_is_private_and_its_path_absolute() {
        let dir = tempfile::tempdir().unwrap();
        let inside = dir.path().join("a/b");
        let opened = DataDir::open(&inside).unwrap();
        assert!(opened.path.is_absolute());
        let mode = std::fs::metadata(&opened.path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        write_private(&opened.path.join("x"), b"secret").unwrap();
        let mode = std::fs::metadata(opened.path.join("x")).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }
}
