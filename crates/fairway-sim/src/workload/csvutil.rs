//! Small helpers shared by the CSV loaders: column lookup by header name and field parsing
//! with errors that name the file, line and field.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use csv::StringRecord;

use super::WorkloadError;

/// A column found in the header.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Col {
    pub idx: usize,
    pub name: &'static str,
}

/// The names one file has given so far, each with the row it first appeared on.
#[derive(Default)]
pub(crate) struct UniqueNames(HashMap<String, u64>);

impl UniqueNames {
    /// The row's name in `col` (not empty), or a duplicate-name error naming both lines.
    pub fn claim(&mut self, row: &Row<'_>, col: Col) -> Result<String, WorkloadError> {
        let name = row.non_empty(col)?;
        if let Some(&first) = self.0.get(name) {
            return Err(row.duplicate(name.to_owned(), first));
        }
        self.0.insert(name.to_owned(), row.byte);
        Ok(name.to_owned())
    }
}

/// A CSV file with a header row, read record by record.
pub(crate) struct CsvFile {
    path: PathBuf,
    reader: csv::Reader<File>,
    headers: StringRecord,
}

impl CsvFile {
    pub fn open(path: &Path) -> Result<Self, WorkloadError> {
        let file = File::open(path).map_err(|source| WorkloadError::Io { path: path.to_owned(), source })?;
        let mut reader = csv::ReaderBuilder::new().has_headers(true).trim(csv::Trim::All).from_reader(file);
        let headers = reader.headers().map_err(|e| csv_error(path, e))?.clone();
        Ok(Self { path: path.to_owned(), reader, headers })
    }

    /// A required column.
    pub fn col(&self, name: &'static str) -> Result<Col, WorkloadError> {
        self.headers
            .iter()
            .position(|h| h == name)
            .map(|idx| Col { idx, name })
            .ok_or_else(|| WorkloadError::MissingColumn { path: self.path.clone(), column: name.to_owned() })
    }

    /// An optional column.
    pub fn col_opt(&self, name: &'static str) -> Option<Col> {
        self.headers.iter().position(|h| h == name).map(|idx| Col { idx, name })
    }

    /// Reads the next data row into `rec`; `Ok(None)` at the end of the file.
    pub fn next<'a>(&'a mut self, rec: &'a mut StringRecord) -> Result<Option<Row<'a>>, WorkloadError> {
        match self.reader.read_record(rec) {
            Ok(false) => Ok(None),
            Ok(true) => {
                let byte = rec.position().map_or(0, csv::Position::byte);
                Ok(Some(Row { path: &self.path, byte, rec }))
            }
            Err(e) => Err(csv_error(&self.path, e)),
        }
    }
}

fn csv_error(path: &Path, e: csv::Error) -> WorkloadError {
    if e.is_io_error() {
        match e.into_kind() {
            csv::ErrorKind::Io(source) => WorkloadError::Io { path: path.to_owned(), source },
            _ => unreachable!("is_io_error() was true"),
        }
    } else {
        WorkloadError::Csv {
            path: path.to_owned(),
            line: e.position().map_or(0, |p| line_at(path, p.byte())),
            source: e,
        }
    }
}

/// The 1-based line number of the record that starts at `byte` (as reported by the CSV reader).
///
/// The reader reports the position *before* any blank lines it skips, so the line is found by
/// counting newlines in the file up to the record's first character. It reads the file, so it is
/// only called on error paths.
pub(crate) fn line_at(path: &Path, byte: u64) -> u64 {
    let Ok(bytes) = std::fs::read(path) else {
        return 0;
    };
    let mut end = usize::try_from(byte).unwrap_or(usize::MAX).min(bytes.len());
    while end < bytes.len() && matches!(bytes[end], b'\r' | b'\n') {
        end += 1;
    }
    1 + bytes[..end].iter().filter(|&&b| b == b'\n').count() as u64
}

/// One data row.
pub(crate) struct Row<'a> {
    pub path: &'a Path,
    /// Byte offset where the reader started reading this row (see [`line_at`]).
    pub byte: u64,
    rec: &'a StringRecord,
}

impl Row<'_> {
    /// 1-based line number of the row (the header is line 1). Reads the file: error paths only.
    pub fn line(&self) -> u64 {
        line_at(self.path, self.byte)
    }

    /// A duplicate-name error for this row; `first_byte` is the [`Row::byte`] of the first row.
    pub fn duplicate(&self, name: String, first_byte: u64) -> WorkloadError {
        WorkloadError::DuplicateName {
            path: self.path.to_owned(),
            line: self.line(),
            name,
            first_line: line_at(self.path, first_byte),
        }
    }

    pub fn str(&self, col: Col) -> &str {
        self.rec.get(col.idx).unwrap_or("")
    }

    pub fn error(&self, col: Col, reason: impl Into<String>) -> WorkloadError {
        WorkloadError::Field {
            path: self.path.to_owned(),
            line: self.line(),
            field: col.name.to_owned(),
            value: self.str(col).to_owned(),
            reason: reason.into(),
        }
    }

    /// A non-empty string.
    pub fn non_empty(&self, col: Col) -> Result<&str, WorkloadError> {
        let s = self.str(col);
        if s.is_empty() { Err(self.error(col, "must not be empty")) } else { Ok(s) }
    }

    pub fn u64(&self, col: Col) -> Result<u64, WorkloadError> {
        self.str(col).parse::<u64>().map_err(|e| self.error(col, format!("not a non-negative integer ({e})")))
    }

    pub fn u32(&self, col: Col) -> Result<u32, WorkloadError> {
        self.str(col).parse::<u32>().map_err(|e| self.error(col, format!("not a non-negative 32-bit integer ({e})")))
    }

    /// Seconds (integer or decimal, ≥ 0) as whole milliseconds, rounded to nearest.
    pub fn seconds_as_ms(&self, col: Col) -> Result<u64, WorkloadError> {
        let s = self.str(col);
        if let Ok(secs) = s.parse::<u64>() {
            return secs.checked_mul(1000).ok_or_else(|| self.error(col, "too large"));
        }
        let secs: f64 = s.parse().map_err(|e| self.error(col, format!("not a number of seconds ({e})")))?;
        if !secs.is_finite() || secs < 0.0 {
            return Err(self.error(col, "must be a finite number of seconds ≥ 0"));
        }
        let ms = (secs * 1000.0).round();
        if ms >= u64::MAX as f64 {
            return Err(self.error(col, "too large"));
        }
        Ok(ms as u64)
    }

    /// A run time in seconds (> 0) as milliseconds; a positive run time under half a millisecond
    /// becomes 1 ms.
    pub fn duration_ms(&self, col: Col) -> Result<u64, WorkloadError> {
        let s = self.str(col);
        let positive = s.parse::<f64>().is_ok_and(|v| v > 0.0);
        let ms = self.seconds_as_ms(col)?;
        if !positive {
            return Err(self.error(col, "run time must be > 0"));
        }
        Ok(ms.max(1))
    }
}

/// Zero-padded width for row-derived names: at least 6 digits.
pub(crate) fn name_width(max_index: u64) -> usize {
    max_index.to_string().len().max(6)
}
