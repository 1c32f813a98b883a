//! The envelope of a document (`apiVersion`, `kind`), read before its body: a leaf the
//! format parsers (`native`, `priority`) and the document dispatcher (`document`) share, so
//! that none of them imports another to read it.

use crate::error::Issues;
use crate::value::{self, Obj, quote};

pub(crate) const FAIRWAY_V1: &str = "fairway/v1";

/// A string field, if present: `Some(None)` when absent, `None` (with an error recorded)
/// when not a string.
pub(crate) fn take_string(obj: &mut Obj<'_>, key: &str, issues: &mut Issues) -> Option<Option<String>> {
    match obj.take(key) {
        None => Some(None),
        Some((v, path)) => value::string(v, &path, issues).map(Some),
    }
}

/// For documents embedded in fairway's own files, where the envelope is optional: if
/// present it must be `fairway/v1` and `kind`. `None` (with errors recorded) otherwise.
pub(crate) fn take_envelope(obj: &mut Obj<'_>, kind: &str, issues: &mut Issues) -> Option<()> {
    let api_path = obj.path().field("apiVersion");
    let kind_path = obj.path().field("kind");
    let api = take_string(obj, "apiVersion", issues)?;
    let got_kind = take_string(obj, "kind", issues)?;
    match (api.as_deref(), got_kind.as_deref()) {
        (None, None) => Some(()),
        (Some(FAIRWAY_V1), Some(k)) if k == kind => Some(()),
        (Some(FAIRWAY_V1), got) => {
            let got = got.map_or_else(|| "nothing".to_owned(), quote);
            issues.error(&kind_path, format!("must be {kind} here, got {got}"));
            None
        }
        (None, Some(_)) => {
            issues.error(&api_path, "required field is missing (a document with kind needs an apiVersion)");
            None
        }
        (Some(api), _) => {
            issues.error(&api_path, format!("must be {FAIRWAY_V1} here, got {}", quote(api)));
            None
        }
    }
}
