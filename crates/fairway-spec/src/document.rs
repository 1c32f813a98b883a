//! One document of the input: which format it is, by `apiVersion` and `kind`.

use serde_json::Value;

use crate::envelope::{FAIRWAY_V1, take_string};
use crate::error::Issues;
use crate::input::ParseOptions;
use crate::model::JobDoc;
use crate::model::PriorityClassDoc;
use crate::path::Path;
use crate::priority;
use crate::value::{self, Obj, quote};
use crate::{kube, native};

const BATCH_V1: &str = "batch/v1";
const SCHEDULING_V1: &str = "scheduling.k8s.io/v1";

/// What one document holds.
pub(crate) enum Doc {
    Job(Box<JobDoc>),
    Class(PriorityClassDoc),
}

/// Reads a document of any supported format. `None` when it could not be read at all
/// (the reasons are in `issues`).
pub(crate) fn read(value: &Value, root: Path, options: &ParseOptions, issues: &mut Issues) -> Option<Doc> {
    if !value.is_object() {
        // Say what a document holds: "must be a mapping" alone puzzles someone who wrote a
        // list of jobs, or a bare word.
        issues.error(&root, format!("must be a mapping (a job or a priority class), got {}", value::describe(value)));
        return None;
    }
    let mut obj = Obj::new(value, root, issues)?;
    let api = take_string(&mut obj, "apiVersion", issues)?;
    let kind = take_string(&mut obj, "kind", issues)?;
    let api_path = obj.path().field("apiVersion");
    let kind_path = obj.path().field("kind");
    match (api.as_deref(), kind.as_deref()) {
        (None, None) => Some(Doc::Job(Box::new(native::read(obj, options, issues)))),
        (None, Some(_)) => {
            issues.error(&api_path, "required field is missing (a document with kind needs an apiVersion)");
            None
        }
        (Some(FAIRWAY_V1), Some("Job")) => Some(Doc::Job(Box::new(native::read(obj, options, issues)))),
        (Some(FAIRWAY_V1), Some("PriorityClass")) => Some(Doc::Class(priority::read_compact(obj, issues))),
        (Some(BATCH_V1), Some("Job")) => Some(Doc::Job(Box::new(kube::read_job(obj, options, issues)))),
        (Some(SCHEDULING_V1), Some("PriorityClass")) => Some(Doc::Class(priority::read_kube(obj, issues))),
        (Some(api @ (FAIRWAY_V1 | BATCH_V1 | SCHEDULING_V1)), kind) => {
            let expected = kinds_of(api);
            match kind {
                None => issues.error(&kind_path, format!("required field is missing (expected {expected})")),
                Some(kind) => issues.error(
                    &kind_path,
                    format!("unknown kind {} for apiVersion {api}; expected {expected}", quote(kind)),
                ),
            }
            None
        }
        (Some(api), _) => {
            issues.error(
                &api_path,
                format!(
                    "unknown apiVersion {}; fairway reads {FAIRWAY_V1} (Job, PriorityClass), {BATCH_V1} (Job) and {SCHEDULING_V1} (PriorityClass)",
                    quote(api)
                ),
            );
            None
        }
    }
}

fn kinds_of(api: &str) -> &'static str {
    match api {
        FAIRWAY_V1 => "Job or PriorityClass",
        BATCH_V1 => "Job",
        _ => "PriorityClass",
    }
}
