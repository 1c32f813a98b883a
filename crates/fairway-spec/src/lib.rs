//! # fairway-spec
//!
//! What users write, read strictly: fairway's native job format, Kubernetes
//! `scheduling.k8s.io/v1` PriorityClass and `batch/v1` Job, in YAML or JSON, one or many
//! documents per input. Parsing validates every field and reports every problem at once,
//! each with its document, field path and reason; fields fairway does not use become
//! warnings, never silent misreads. Conversion to the core's [`fairway_core::JobSpec`] is
//! a separate, explicit step ([`ResolvedJob::to_core`]), because the core types are not
//! wire types. See `docs/job-spec.md` for the user reference.
//!
//! ```
//! use fairway_spec::{Interner, PriorityClasses, load};
//! use fairway_core::JobId;
//!
//! let yaml = b"name: ctr\ntenant: { project: ads }\npriority: high\nresources: { gpus: 2 }\ncommand: [python, train.py]\n";
//! let mut classes = PriorityClasses::builtin();
//! let (jobs, warnings) = load(yaml, &mut classes).unwrap();
//! assert!(warnings.is_empty());
//! let spec = jobs[0].to_core(JobId(1), &mut Interner::new()).unwrap();
//! assert_eq!(spec.priority, 1_000_000);
//! ```

mod cluster;
mod document;
mod error;
mod input;
mod interner;
mod job;
mod kube;
mod names;
mod native;
mod path;
mod priority;
pub mod quantity;
mod value;

use std::collections::BTreeMap;

pub use cluster::{ClusterShape, ModelShape, validate_against_cluster};
pub use error::{SpecError, SpecErrors, Warning};
pub use input::{DEPTH_CAP, ParseLimits};
pub use interner::{InternError, Interned, Interner};
pub use job::{Field, JobDoc, Origin, PriorityRef, ResolvedJob, ResourcesDoc, SourceFormat};
pub use native::parse_native_job;
pub use priority::{
    PreemptionPolicyDoc, PriorityClass, PriorityClassDoc, PriorityClasses, USER_PRIORITY_MAX, parse_priority_class,
};

use document::Doc;
use error::Issues;
use path::Path;

/// The documents of one input, validated, in input order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Parsed {
    pub jobs: Vec<JobDoc>,
    pub priority_classes: Vec<PriorityClassDoc>,
    pub warnings: Vec<Warning>,
}

/// Reads every document of `bytes` (YAML or JSON). Checks everything that needs no
/// registry and no cluster: types, required fields, names, ranges, duplicate job names
/// (per project), and the input's own priority classes (duplicates, two global defaults,
/// redefining a built-in class). Returns all errors, or the documents and warnings.
pub fn parse_documents(bytes: &[u8], limits: &ParseLimits) -> Result<Parsed, SpecErrors> {
    let values = input::documents(bytes, limits)?;
    let mut parsed = Parsed::default();
    let mut errors = Vec::new();
    for (i, value) in values.iter().enumerate() {
        let mut issues = Issues::new(i + 1);
        let doc = document::read(value, Path::root(""), &mut issues);
        if !issues.has_errors() {
            match doc {
                Some(Doc::Job(job)) => parsed.jobs.push(*job),
                Some(Doc::Class(class)) => parsed.priority_classes.push(class),
                None => {}
            }
        }
        errors.append(&mut issues.errors);
        parsed.warnings.append(&mut issues.warnings);
    }
    errors.extend(duplicate_jobs(&parsed.jobs));
    // The built-ins are in every registry, so checking against them alone is already
    // valid for any registry the classes are later added to.
    if let Err(SpecErrors(class_errors)) = PriorityClasses::builtin().register_all(&parsed.priority_classes) {
        errors.extend(class_errors);
    }
    if errors.is_empty() { Ok(parsed) } else { Err(SpecErrors(sorted(errors))) }
}

/// Parses with the default limits, adds the input's priority classes to `classes`, and
/// resolves every job's priority against the result. On error, `classes` is unchanged.
pub fn load(bytes: &[u8], classes: &mut PriorityClasses) -> Result<(Vec<ResolvedJob>, Vec<Warning>), SpecErrors> {
    load_with_limits(bytes, &ParseLimits::default(), classes)
}

/// [`load`] with explicit limits.
pub fn load_with_limits(
    bytes: &[u8],
    limits: &ParseLimits,
    classes: &mut PriorityClasses,
) -> Result<(Vec<ResolvedJob>, Vec<Warning>), SpecErrors> {
    let parsed = parse_documents(bytes, limits)?;
    let mut staged = classes.clone();
    staged.register_all(&parsed.priority_classes)?;
    let mut jobs = Vec::with_capacity(parsed.jobs.len());
    let mut errors = Vec::new();
    for job in &parsed.jobs {
        match job.resolve(&staged) {
            Ok(resolved) => jobs.push(resolved),
            Err(e) => errors.push(e),
        }
    }
    if !errors.is_empty() {
        return Err(SpecErrors(errors));
    }
    *classes = staged;
    Ok((jobs, parsed.warnings))
}

/// A name may repeat across projects (as across Kubernetes namespaces), not within one.
fn duplicate_jobs(jobs: &[JobDoc]) -> Vec<SpecError> {
    let mut first_seen: BTreeMap<(&str, &str), usize> = BTreeMap::new();
    let mut errors = Vec::new();
    for job in jobs {
        let key = (job.project.as_str(), job.name.as_str());
        match first_seen.get(&key) {
            Some(first) => errors.push(job.origin.error(
                Field::Name,
                format!(
                    "duplicate job name {} in project {}: already used in document {first}",
                    value::quote(&job.name),
                    value::quote(&job.project)
                ),
            )),
            None => {
                first_seen.insert(key, job.origin.document);
            }
        }
    }
    errors
}

/// Document order first; within a document, the order the checks ran (stable sort).
fn sorted(mut errors: Vec<SpecError>) -> Vec<SpecError> {
    errors.sort_by_key(|e| e.document);
    errors
}
