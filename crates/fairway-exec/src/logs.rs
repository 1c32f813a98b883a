//! Job logs: the shim's rotating writer, and the server's readers (`tail_lines`, `LogFollower`).
//!
//! One job's output is one stream spread over files, newest first: `job.log` (being written),
//! `job.log.1`, `job.log.2`, … up to `log_files_max` files of at most `log_bytes_max` bytes.
//! Rotation renames (`job.log` → `job.log.1`, …) and creates a new `job.log`, so an open reader
//! keeps its file and can finish it.

use std::ffi::OsString;
use std::fs::{self, File};
use std::io::{self, Write};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};

use crate::ExecError;

/// The most bytes [`tail_lines`] returns (and reads): the end of the last lines if longer.
pub const TAIL_BYTES_MAX: u64 = 4 * 1024 * 1024;
/// The default limit on the bytes one [`LogFollower::poll`] returns.
pub const FOLLOW_POLL_BYTES_MAX: usize = 1024 * 1024;
/// The most rotated files the readers look at.
const ROTATED_FILES_SCAN_MAX: u32 = 1024;
const READ_BLOCK_BYTES: u64 = 64 * 1024;

/// The path of the `index`-th log file: `log_path` itself for 0, else `<log_path>.<index>`.
pub fn rotated_path(log_path: &Path, index: u32) -> PathBuf {
    if index == 0 {
        return log_path.to_owned();
    }
    let mut name = OsString::from(log_path.as_os_str());
    name.push(format!(".{index}"));
    PathBuf::from(name)
}

/// The shim's writer: appends, and rotates before a write would pass `bytes_max`. A chunk that
/// does not fit is split after its last newline that fits, so lines stay whole unless a single
/// line is longer than `bytes_max`.
pub(crate) struct RotatingWriter {
    path: PathBuf,
    bytes_max: u64,
    files_max: u32,
    file: File,
    size: u64,
}

impl RotatingWriter {
    /// Opens (appending to) `path`; `bytes_max` and `files_max` must be at least 1.
    pub(crate) fn open(path: &Path, bytes_max: u64, files_max: u32) -> io::Result<Self> {
        assert!(bytes_max > 0 && files_max > 0, "log limits must be positive");
        let file = open_append(path)?;
        let size = file.metadata()?.len();
        Ok(RotatingWriter { path: path.to_owned(), bytes_max, files_max, file, size })
    }

    pub(crate) fn write_all(&mut self, mut data: &[u8]) -> io::Result<()> {
        while !data.is_empty() {
            let room = self.bytes_max.saturating_sub(self.size);
            if data.len() as u64 <= room {
                self.file.write_all(data)?;
                self.size += data.len() as u64;
                return Ok(());
            }
            let room = usize::try_from(room).unwrap_or(usize::MAX);
            let cut = match data[..room].iter().rposition(|&b| b == b'\n') {
                Some(newline) => newline + 1,
                // One line longer than a whole file: split it.
                None if self.size == 0 => room,
                None => 0,
            };
            self.file.write_all(&data[..cut])?;
            data = &data[cut..];
            self.rotate()?;
        }
        Ok(())
    }

    fn rotate(&mut self) -> io::Result<()> {
        if self.files_max == 1 {
            remove_if_present(&self.path)?;
        } else {
            remove_if_present(&rotated_path(&self.path, self.files_max - 1))?;
            for index in (0..self.files_max - 1).rev() {
                match fs::rename(rotated_path(&self.path, index), rotated_path(&self.path, index + 1)) {
                    Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                    _ => {}
                }
            }
        }
        self.file = open_append(&self.path)?;
        self.size = 0;
        Ok(())
    }
}

fn open_append(path: &Path) -> io::Result<File> {
    fs::OpenOptions::new().create(true).append(true).open(path)
}

fn remove_if_present(path: &Path) -> io::Result<()> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

type FileId = (u64, u64);

fn file_id(meta: &fs::Metadata) -> FileId {
    (meta.dev(), meta.ino())
}

/// Opens a log file with its identity and length; `None` if it does not exist.
fn open_log_file(path: &Path) -> Result<Option<(File, FileId, u64)>, ExecError> {
    match File::open(path).and_then(|file| file.metadata().map(|meta| (file, meta))) {
        Ok((file, meta)) => Ok(Some((file, file_id(&meta), meta.len()))),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(ExecError::io(format!("opening {}", path.display()), e)),
    }
}

/// The rotated files (`.1`, `.2`, … until two in a row are missing: a rotation in progress
/// leaves one gap at a time), newest first, without the ones in `skip` (a file seen twice
/// because a rotation happened while listing).
fn open_rotated(log_path: &Path, skip: &mut Vec<FileId>) -> Result<Vec<(File, u64)>, ExecError> {
    let mut files = Vec::new();
    let mut missing_in_a_row = 0;
    for index in 1..=ROTATED_FILES_SCAN_MAX {
        let Some((file, id, len)) = open_log_file(&rotated_path(log_path, index))? else {
            missing_in_a_row += 1;
            if missing_in_a_row == 2 {
                break;
            }
            continue;
        };
        missing_in_a_row = 0;
        if !skip.contains(&id) {
            skip.push(id);
            files.push((file, len));
        }
    }
    Ok(files)
}

/// The last `n` lines of the job's log, reading back into rotated files when the current one
/// holds fewer; at most [`TAIL_BYTES_MAX`] bytes (the end of them). A last line without a
/// newline counts as a line. Empty when no log file exists yet. Invalid UTF-8 is replaced.
pub fn tail_lines(log_path: &Path, n: usize) -> Result<String, ExecError> {
    let mut sources = Vec::new();
    let mut seen = Vec::new();
    if let Some((file, id, len)) = open_log_file(log_path)? {
        seen.push(id);
        sources.push((file, len));
    }
    sources.extend(open_rotated(log_path, &mut seen)?);
    let bytes = tail_of(&sources, n, TAIL_BYTES_MAX)
        .map_err(|e| ExecError::io(format!("reading {}", log_path.display()), e))?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// The last `n` lines of the stream made of `sources` (newest first, each read up to its
/// given length), reading backwards block by block.
fn tail_of(sources: &[(File, u64)], n: usize, bytes_max: u64) -> io::Result<Vec<u8>> {
    if n == 0 {
        return Ok(Vec::new());
    }
    let mut blocks: Vec<Vec<u8>> = Vec::new(); // newest first
    let mut ends_with_newline = None;
    let mut newlines = 0;
    let mut total = 0u64;
    'files: for (file, len) in sources {
        let mut end = *len;
        while end > 0 {
            let start = end.saturating_sub(READ_BLOCK_BYTES);
            let mut block = vec![0u8; (end - start) as usize];
            let got = read_at_most(file, &mut block, start)?;
            block.truncate(got);
            end = start;
            if block.is_empty() {
                continue;
            }
            ends_with_newline.get_or_insert(block.last() == Some(&b'\n'));
            newlines += block.iter().filter(|&&b| b == b'\n').count();
            total += block.len() as u64;
            blocks.push(block);
            if newlines > n || total >= bytes_max {
                break 'files;
            }
        }
    }
    let mut data: Vec<u8> = blocks.into_iter().rev().flatten().collect();
    // The cut is after the newline that ends the line before the n lines we keep.
    let wanted = n + usize::from(ends_with_newline.unwrap_or(false));
    let cut = data.iter().enumerate().rev().filter(|(_, b)| **b == b'\n').nth(wanted - 1).map_or(0, |(i, _)| i + 1);
    data.drain(..cut);
    let excess = data.len().saturating_sub(usize::try_from(bytes_max).unwrap_or(usize::MAX));
    data.drain(..excess);
    Ok(data)
}

/// Reads into `buf` from `offset` until it is full or the file ends; returns the bytes read.
fn read_at_most(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match file.read_at(&mut buf[got..], offset + got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

/// Where a [`LogFollower`] starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FollowFrom {
    /// Only what is written from now on.
    End,
    /// The last `n` lines (as [`tail_lines`]), then what is written from now on.
    TailLines(usize),
}

struct Followed {
    file: File,
    id: FileId,
    offset: u64,
}

/// Follows a job's log like `tail -f` across rotations: each [`poll`](Self::poll) returns the
/// bytes written since the last one. When the file it reads has been rotated away, it reads
/// that file to its end first, then continues with the next newer file (however many rotations
/// happened in between, as long as the files are still kept).
pub struct LogFollower {
    path: PathBuf,
    current: Option<Followed>,
    /// While no file is followed yet: the files that existed at [`LogFollower::new`], whose
    /// content is not new.
    preexisting: Vec<FileId>,
    pending: Vec<u8>,
    poll_bytes_max: usize,
}

impl LogFollower {
    /// Starts following `log_path`, which need not exist yet: when it appears, everything
    /// written to it is new, including files it was rotated into before the first poll.
    pub fn new(log_path: &Path, from: FollowFrom) -> Result<Self, ExecError> {
        let mut seen = Vec::new();
        let mut sources = Vec::new();
        let current = open_log_file(log_path)?.map(|(file, id, len)| {
            seen.push(id);
            if let Ok(clone) = file.try_clone() {
                sources.push((clone, len));
            }
            Followed { file, id, offset: len }
        });
        sources.extend(open_rotated(log_path, &mut seen)?);
        let pending = match from {
            FollowFrom::End => Vec::new(),
            FollowFrom::TailLines(n) => tail_of(&sources, n, TAIL_BYTES_MAX)
                .map_err(|e| ExecError::io(format!("reading {}", log_path.display()), e))?,
        };
        Ok(LogFollower {
            path: log_path.to_owned(),
            current,
            preexisting: seen,
            pending,
            poll_bytes_max: FOLLOW_POLL_BYTES_MAX,
        })
    }

    /// Sets the most bytes one poll returns (at least 1); the rest comes with the next polls.
    pub fn with_poll_bytes_max(mut self, poll_bytes_max: usize) -> Self {
        self.poll_bytes_max = poll_bytes_max.max(1);
        self
    }

    /// The bytes written since the last poll (empty when nothing new), at most the poll limit.
    pub fn poll(&mut self) -> Result<Vec<u8>, ExecError> {
        let limit = self.poll_bytes_max;
        let take = self.pending.len().min(limit);
        let mut out: Vec<u8> = self.pending.drain(..take).collect();
        // Each pass either returns or moves to a newer file, so this bound is never reached
        // unless files are rotated faster than they can be opened.
        for _ in 0..2 * ROTATED_FILES_SCAN_MAX {
            if out.len() >= limit {
                break;
            }
            if self.current.is_none() {
                match self.first_new_file()? {
                    Some(first) => self.current = Some(first),
                    None => break,
                }
            }
            self.read_current(&mut out, limit)?;
            let current = self.current.as_mut().expect("set above");
            if out.len() >= limit {
                break;
            }
            match fs::metadata(&self.path) {
                Ok(meta) if file_id(&meta) == current.id => {
                    if meta.len() < current.offset {
                        // Truncated in place (not by the shim, which renames): start over.
                        current.offset = 0;
                        continue;
                    }
                    break;
                }
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(ExecError::io(format!("reading {}", self.path.display()), e)),
            }
            // Rotated away. Writes to the old file all happened before the rename we just
            // observed, so one more read finishes it.
            self.read_current(&mut out, limit)?;
            if out.len() >= limit {
                break;
            }
            match self.successor()? {
                Some(next) => self.current = Some(next),
                None => break, // mid-rotation: try again next poll
            }
        }
        Ok(out)
    }

    fn read_current(&mut self, out: &mut Vec<u8>, limit: usize) -> Result<(), ExecError> {
        let Some(current) = &mut self.current else { return Ok(()) };
        while out.len() < limit {
            let want = (limit - out.len()).min(READ_BLOCK_BYTES as usize);
            let start = out.len();
            out.resize(start + want, 0);
            let got = read_at_most(&current.file, &mut out[start..], current.offset)
                .map_err(|e| ExecError::io(format!("reading {}", self.path.display()), e))?;
            out.truncate(start + got);
            current.offset += got as u64;
            if got < want {
                break;
            }
        }
        Ok(())
    }

    /// The file written after the current one: if the current one is now `<log>.k`, that is
    /// `<log>.(k-1)`; if it has been rotated out entirely, the oldest one still kept.
    fn successor(&self) -> Result<Option<Followed>, ExecError> {
        let Some(current) = &self.current else { return Ok(None) };
        let files = self.list_files()?;
        let next = match files.iter().position(|(_, id)| *id == current.id) {
            Some(0) => return Ok(None),
            Some(position) => files[position - 1],
            None => match files.last() {
                Some(oldest) => *oldest,
                None => return Ok(None),
            },
        };
        self.open_listed(next)
    }

    /// The oldest file that did not exist when following began: everything in it is new, and
    /// so is everything in the files after it (the job may have rotated before the first poll).
    fn first_new_file(&self) -> Result<Option<Followed>, ExecError> {
        let files = self.list_files()?;
        match files.iter().rev().find(|(_, id)| !self.preexisting.contains(id)) {
            Some(oldest_new) => self.open_listed(*oldest_new),
            None => Ok(None),
        }
    }

    /// `(index, id)` of the log files, newest first.
    fn list_files(&self) -> Result<Vec<(u32, FileId)>, ExecError> {
        let mut files = Vec::new();
        let mut missing_in_a_row = 0;
        for index in 0..=ROTATED_FILES_SCAN_MAX {
            match fs::metadata(rotated_path(&self.path, index)) {
                Ok(meta) => {
                    missing_in_a_row = 0;
                    files.push((index, file_id(&meta)));
                }
                // A rotation in progress leaves one gap at a time; two in a row is the end.
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    missing_in_a_row += 1;
                    if missing_in_a_row == 2 {
                        break;
                    }
                }
                Err(e) => return Err(ExecError::io(format!("reading {}", self.path.display()), e)),
            }
        }
        Ok(files)
    }

    /// Opens a listed file from its start, unless it was rotated again since the listing.
    fn open_listed(&self, (index, listed): (u32, FileId)) -> Result<Option<Followed>, ExecError> {
        match open_log_file(&rotated_path(&self.path, index))? {
            Some((file, id, _)) if id == listed => Ok(Some(Followed { file, id, offset: 0 })),
            _ => Ok(None),
        }
    }
}
