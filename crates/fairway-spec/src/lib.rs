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
mod cohorts;
mod document;
mod envelope;
mod error;
mod image;
pub use image::{canonical_reference, check_reference as check_image_reference};
mod input;
mod interner;
mod job;
mod kube;
mod model;
mod names;
mod native;
mod path;
mod placement;
pub use placement::{CORE_SCORING, PlacementError, placement_of};
mod priority;
pub mod quantity;
mod span;
mod value;

use std::collections::{BTreeMap, BTreeSet};

pub use cluster::{ClusterShape, ModelShape, validate_against_cluster};
pub use cohorts::{
    COHORT_MEMBERS_MAX, COHORTS_MAX, CohortDoc, CohortError, DEFAULT_RUNTIME_SECONDS_MAX, FAIR_SHARE_WEIGHT_MAX,
    GuaranteeBeyondCap, LimitsDoc, MemberDoc, RESERVATIONS_MAX, ReservationsDoc, check_fair_share_weight,
    guarantee_beyond_cap, resolve_cohorts,
};
pub use error::{SpecError, SpecErrors, Warning};
pub use names::token as check_account_name;
pub use span::{HALF_LIFE_SECONDS_MAX, Hours, half_life_ms, span_ms};

pub use input::{DEPTH_CAP, ParseLimits, ParseOptions};
pub use interner::{AccountKind, InternError, Interned, Interner};
pub use job::ResolvedJob;
pub use model::{
    Field, JobDoc, MIN_RUN_SECONDS_MAX, Origin, PREEMPTION_DELAY_SECONDS_MAX, PREEMPTIONS_PER_HOUR_MAX,
    PreemptionPolicyDoc, PreemptionProtection, PriorityClassDoc, PriorityRef, ResourcesDoc, SourceFormat, TenantOrigin,
};
pub use native::parse_native_job;
pub use priority::{
    MIN_RUN_ANNOTATION, OVERRIDES_PROTECTION_ANNOTATION, PREEMPTION_DELAY_ANNOTATION, PREEMPTIONS_PER_HOUR_ANNOTATION,
    PriorityClass, PriorityClasses, USER_PRIORITY_MAX, parse_priority_class, protection_from_annotations,
};

use document::Doc;
use error::Issues;
use path::Path;

/// A YAML parser's error as a message to put after a file's name: the parser starts it
/// with "error: ", which the program's own "error: " prefix would repeat.
fn yaml_error_message(error: &impl std::fmt::Display) -> String {
    let message = error.to_string();
    match message.strip_prefix("error: ") {
        Some(rest) => rest.to_string(),
        None => message,
    }
}

/// A configuration file (the server's, the controller's settings, a scenario, a cohort's
/// members) read from YAML, or the message to put after the file's name: the field it
/// stopped at, as a path (`cohorts[0].members[1].nominal.gpus`), then the parser's line,
/// column, reason and snippet. The parser alone names only the line and column.
pub fn from_yaml<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, String> {
    let mut path = None;
    let parsed = serde_saphyr::with_deserializer_from_str(text, |deserializer| {
        serde_path_to_error::deserialize(deserializer).map_err(|e| {
            path = Some(e.path().to_string());
            e.into_inner()
        })
    });
    parsed.map_err(|e| {
        let message = yaml_error_message(&e);
        match path.filter(|p| p != ".") {
            Some(path) => format!("{path}: {message}"),
            None => message,
        }
    })
}

/// The documents of one input, validated, in input order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Parsed {
    pub jobs: Vec<JobDoc>,
    pub priority_classes: Vec<PriorityClassDoc>,
    pub warnings: Vec<Warning>,
}

/// An input read and checked against a registry of priority classes: what
/// [`parse_and_resolve`] returns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResolvedInput {
    /// The documents, as [`parse_documents_with`] returns them.
    pub parsed: Parsed,
    /// Every job of `parsed.jobs`, in the same order, with its priority resolved.
    pub jobs: Vec<ResolvedJob>,
    /// The registry given, with the input's classes added: what the registry becomes once
    /// the input is accepted. The registry given is not changed.
    pub classes: PriorityClasses,
}

/// Reads every document of `bytes` (YAML or JSON), with the default [`ParseOptions`]
/// (every job names its tenant). See [`parse_documents_with`].
pub fn parse_documents(bytes: &[u8], limits: &ParseLimits) -> Result<Parsed, SpecErrors> {
    parse_documents_with(bytes, limits, &ParseOptions::default())
}

/// Reads every document of `bytes` (YAML or JSON). Checks everything that needs no
/// registry and no cluster: types, required fields, names, ranges, duplicate job names
/// (per project), and the input's own priority classes (duplicates, two global defaults,
/// redefining a built-in class). Returns all errors (by document, then in the order of the
/// document's fields), or the documents and warnings.
pub fn parse_documents_with(bytes: &[u8], limits: &ParseLimits, options: &ParseOptions) -> Result<Parsed, SpecErrors> {
    let docs = read_documents(bytes, limits, options)?;
    let (parsed, mut errors) = collect(&docs);
    errors.extend(duplicate_jobs(&parsed.jobs));
    // The built-ins are in every registry, so checking against them alone is already
    // valid for any registry the classes are later added to.
    if let Err(SpecErrors(class_errors)) = PriorityClasses::builtin().register_all(&parsed.priority_classes) {
        errors.extend(class_errors);
    }
    if errors.is_empty() {
        Ok(parsed)
    } else {
        errors.sort_by_key(|e| e.document);
        Err(SpecErrors(errors))
    }
}

/// Reads every document of `bytes` and resolves every job's priority against `classes`
/// with the input's own classes added. Returns every error of every document at once,
/// sorted by document, then path: a job that names an unknown class gets that error (at
/// `priority`, or `spec.template.spec.priorityClassName`) even when its document has other
/// errors too. `classes` itself is never changed; on success, [`ResolvedInput::classes`]
/// is the registry to keep.
///
/// ```
/// use fairway_spec::{ParseLimits, ParseOptions, PriorityClasses, parse_and_resolve};
///
/// let registry = PriorityClasses::builtin();
/// // The tenant comes from the caller, so the job need not name it.
/// let options = ParseOptions { tenant_required: false, ..ParseOptions::default() };
/// let ok = b"name: ctr\npriority: high\nresources: { gpus: 2 }\nimage: ubuntu:24.04\n";
/// let resolved = parse_and_resolve(ok, &ParseLimits::default(), &registry, &options).unwrap();
/// assert_eq!(resolved.jobs[0].priority, 1_000_000);
/// assert_eq!(resolved.jobs[0].doc.origin.tenant.project, None);
///
/// let bad = b"name: ctr\npriority: gold\nresources: { gpus: 0 }\nimage: ubuntu\n";
/// let errors = parse_and_resolve(bad, &ParseLimits::default(), &registry, &options).unwrap_err();
/// assert_eq!(
///     errors.to_string(),
///     "document 1: priority: unknown priority class \"gold\"; known classes: critical, high, medium, low\n\
///      document 1: resources.gpus: must be a positive integer, got 0"
/// );
/// ```
pub fn parse_and_resolve(
    bytes: &[u8],
    limits: &ParseLimits,
    classes: &PriorityClasses,
    options: &ParseOptions,
) -> Result<ResolvedInput, SpecErrors> {
    let docs = read_documents(bytes, limits, options)?;
    let (parsed, mut errors) = collect(&docs);
    errors.extend(duplicate_jobs(&parsed.jobs));
    let mut staged = classes.clone();
    // The registry holds the built-ins, so this also catches a built-in redefined.
    if let Err(SpecErrors(class_errors)) = staged.register_all(&parsed.priority_classes) {
        errors.extend(class_errors);
    }
    // A class defined in the input, even in a document with errors (or one whose
    // registration failed), is not "unknown": its own errors say what is wrong with it.
    let defined_here: BTreeSet<&str> = docs
        .iter()
        .filter_map(|d| match &d.doc {
            Some(Doc::Class(class)) if !class.name.is_empty() => Some(class.name.as_str()),
            _ => None,
        })
        .collect();
    let mut jobs = Vec::with_capacity(parsed.jobs.len());
    for read in &docs {
        let Some(Doc::Job(job)) = &read.doc else { continue };
        match job.resolve(&staged) {
            Ok(resolved) if read.errors.is_empty() => jobs.push(resolved),
            Ok(_) => {}
            Err(e) => {
                let defined = matches!(&job.priority, PriorityRef::Class(name) if defined_here.contains(name.as_str()));
                if !defined && !read.covers(&e.path) {
                    errors.push(e);
                }
            }
        }
    }
    if errors.is_empty() {
        Ok(ResolvedInput { parsed, jobs, classes: staged })
    } else {
        errors.sort_by(|a, b| (a.document, &a.path).cmp(&(b.document, &b.path)));
        Err(SpecErrors(errors))
    }
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
    let resolved = parse_and_resolve(bytes, limits, classes, &ParseOptions::default())?;
    *classes = resolved.classes;
    Ok((resolved.jobs, resolved.parsed.warnings))
}

/// One document as read, kept even when it has errors.
struct ReadDocument {
    /// `None` when the document could not be read at all (not a mapping, unknown kind).
    doc: Option<Doc>,
    errors: Vec<SpecError>,
    warnings: Vec<Warning>,
    /// Where the raw value had problems (a duplicate key, a NaN): any other error at or
    /// under these paths is a consequence and is not reported.
    problem_paths: Vec<String>,
}

impl ReadDocument {
    /// Whether `path` is at or under a path where the raw value had a problem.
    fn covers(&self, path: &str) -> bool {
        self.problem_paths.iter().any(|problem| is_at_or_under(path, problem))
    }
}

fn is_at_or_under(path: &str, ancestor: &str) -> bool {
    match path.strip_prefix(ancestor) {
        Some(rest) => ancestor.is_empty() || rest.is_empty() || rest.starts_with(['.', '[']),
        None => false,
    }
}

fn read_documents(bytes: &[u8], limits: &ParseLimits, options: &ParseOptions) -> Result<Vec<ReadDocument>, SpecErrors> {
    let values = input::documents(bytes, limits)?;
    let root = Path::root("");
    let docs = values
        .iter()
        .enumerate()
        .map(|(i, value)| {
            let document = i + 1;
            let mut issues = Issues::new(document);
            let doc = document::read(&value.value, root.clone(), options, &mut issues);
            let problems: Vec<SpecError> =
                value.problems.iter().map(|p| SpecError::new(document, p.path(&root).as_str(), &p.reason)).collect();
            let problem_paths = problems.iter().map(|e| e.path.clone()).collect();
            let mut read = ReadDocument { doc, errors: problems, warnings: issues.warnings, problem_paths };
            let field_errors: Vec<SpecError> = issues.errors.into_iter().filter(|e| !read.covers(&e.path)).collect();
            read.errors.extend(field_errors);
            read
        })
        .collect();
    Ok(docs)
}

/// The documents without errors, in input order, and the errors of the others.
fn collect(docs: &[ReadDocument]) -> (Parsed, Vec<SpecError>) {
    let mut parsed = Parsed::default();
    let mut errors = Vec::new();
    for read in docs {
        if read.errors.is_empty() {
            match &read.doc {
                Some(Doc::Job(job)) => parsed.jobs.push((**job).clone()),
                Some(Doc::Class(class)) => parsed.priority_classes.push(class.clone()),
                None => {}
            }
        }
        errors.extend(read.errors.iter().cloned());
        parsed.warnings.extend(read.warnings.iter().cloned());
    }
    (parsed, errors)
}

/// A name may repeat across projects (as across Kubernetes namespaces), not within one.
/// Jobs that name no project (the caller's, filled in by the server) count as one project.
fn duplicate_jobs(jobs: &[JobDoc]) -> Vec<SpecError> {
    let mut first_seen: BTreeMap<(&str, &str), usize> = BTreeMap::new();
    let mut errors = Vec::new();
    for job in jobs {
        let key = (job.project.as_str(), job.name.as_str());
        match first_seen.get(&key) {
            Some(first) => {
                let within = if job.project.is_empty() {
                    "among the jobs that name no project".to_owned()
                } else {
                    format!("in project {}", value::quote(&job.project))
                };
                errors.push(job.origin.error(
                    Field::Name,
                    format!(
                        "duplicate job name {} {within}: already used in document {first}",
                        value::quote(&job.name)
                    ),
                ));
            }
            None => {
                first_seen.insert(key, job.origin.document);
            }
        }
    }
    errors
}

#[cfg(test)]
mod tests {
    use super::from_yaml;

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Doc {
        members: Vec<Member>,
    }

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Member {
        gpus: u32,
    }

    #[test]
    fn a_yaml_error_names_the_field_then_the_place() {
        assert_eq!(from_yaml::<Doc>("members: [{ gpus: 2 }]\n").map(|d| d.members[0].gpus), Ok(2));
        let err = from_yaml::<Doc>("members:\n  - { gpus: 2 }\n  - { gpus: -1 }\n").unwrap_err();
        assert!(err.starts_with("members[1].gpus: line 3 column 13: invalid u32"), "{err}");
        let err = from_yaml::<Doc>("members: [{ gpu: 2 }]\n").unwrap_err();
        assert!(err.starts_with("members[0].gpu: line 1 column 13: unknown field `gpu`"), "{err}");
        // An error at the top names no field, and the parser's "error: " is not repeated.
        let err = from_yaml::<Doc>("7\n").unwrap_err();
        assert!(err.starts_with("line 1 column 1: "), "{err}");
        assert!(!from_yaml::<Doc>("members: [\n").unwrap_err().starts_with("error: "));
    }
}
