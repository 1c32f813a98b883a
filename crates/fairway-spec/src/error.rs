//! Errors and warnings, each tied to a document and a field path.

use std::fmt;

use crate::path::Path;

/// One problem in the input. `document` is the 1-based position of the document in the
/// input (empty documents are not counted); 0 means the input as a whole (size, encoding,
/// syntax). `path` is empty when the problem is about the whole document.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct SpecError {
    pub document: usize,
    pub path: String,
    pub reason: String,
}

impl SpecError {
    pub fn new(document: usize, path: impl Into<String>, reason: impl Into<String>) -> SpecError {
        SpecError { document, path: path.into(), reason: reason.into() }
    }

    /// An error about the input as a whole.
    pub(crate) fn input(reason: impl Into<String>) -> SpecError {
        SpecError::new(0, "", reason)
    }
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_location(f, self.document, &self.path)?;
        f.write_str(&self.reason)
    }
}

/// Every problem found, in input order. Never empty when returned as an error.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct SpecErrors(pub Vec<SpecError>);

impl SpecErrors {
    pub fn iter(&self) -> std::slice::Iter<'_, SpecError> {
        self.0.iter()
    }
    pub fn len(&self) -> usize {
        self.0.len()
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl From<SpecError> for SpecErrors {
    fn from(error: SpecError) -> SpecErrors {
        SpecErrors(vec![error])
    }
}

impl fmt::Display for SpecErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl<'a> IntoIterator for &'a SpecErrors {
    type Item = &'a SpecError;
    type IntoIter = std::slice::Iter<'a, SpecError>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

/// Something in the input that fairway accepted but will not act on, e.g. a Kubernetes
/// field it does not use. Reported so that nothing is silently misread.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Warning {
    pub document: usize,
    pub path: String,
    pub message: String,
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_location(f, self.document, &self.path)?;
        f.write_str(&self.message)
    }
}

fn write_location(f: &mut fmt::Formatter<'_>, document: usize, path: &str) -> fmt::Result {
    if document == 0 {
        f.write_str("input: ")?;
    } else {
        write!(f, "document {document}: ")?;
    }
    if !path.is_empty() {
        write!(f, "{path}: ")?;
    }
    Ok(())
}

/// The message of every warning about a field fairway does not read.
pub(crate) const IGNORED: &str = "ignored: fairway does not use this field";

/// Collects the problems of one document while it is read, so that one pass reports all.
#[derive(Debug)]
pub(crate) struct Issues {
    document: usize,
    pub(crate) errors: Vec<SpecError>,
    pub(crate) warnings: Vec<Warning>,
}

impl Issues {
    pub(crate) fn new(document: usize) -> Issues {
        Issues { document, errors: Vec::new(), warnings: Vec::new() }
    }

    pub(crate) fn document(&self) -> usize {
        self.document
    }

    pub(crate) fn error(&mut self, path: &Path, reason: impl Into<String>) {
        self.errors.push(SpecError::new(self.document, path.as_str(), reason));
    }

    pub(crate) fn warn(&mut self, path: &Path, message: impl Into<String>) {
        self.warnings.push(Warning {
            document: self.document,
            path: path.as_str().to_owned(),
            message: message.into(),
        });
    }

    pub(crate) fn ignored(&mut self, path: &Path) {
        self.warn(path, IGNORED);
    }

    /// `Ok(value)` when nothing went wrong; the warnings are dropped on error.
    pub(crate) fn finish<T>(self, value: Option<T>) -> Result<(T, Vec<Warning>), SpecErrors> {
        match value {
            Some(v) if self.errors.is_empty() => Ok((v, self.warnings)),
            // A reader that returns no value always records why; guard against a silent
            // failure all the same.
            _ if self.errors.is_empty() => {
                Err(SpecErrors(vec![SpecError::new(self.document, "", "document could not be read")]))
            }
            _ => Err(SpecErrors(self.errors)),
        }
    }
}
