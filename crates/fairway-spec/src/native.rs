//! fairway's native job format: the fields users write by hand, nothing more. Unknown
//! fields are errors here (a misspelt `replica:` must not silently run one replica).

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use crate::envelope::take_envelope;
use crate::error::{Issues, SpecErrors};
use crate::image;
use crate::input::ParseOptions;
use crate::model::{Field, JobDoc, Origin, PriorityRef, ResourcesDoc, SourceFormat, TenantOrigin};
use crate::names;
use crate::path::Path;
use crate::priority::policy;
use crate::value::{self, Obj, describe, uint_in};

const FIELDS: &[&str] = &[
    "name",
    "tenant",
    "priority",
    "resources",
    "replicas",
    "image",
    "image_optional",
    "command",
    "shell",
    "working_dir",
    "env",
    "max_runtime_seconds",
    "max_total_runtime_seconds",
    "retries",
    "preemptible",
    "preemption_grace_seconds",
    "checkpoint_interval_seconds",
    "preemption_policy",
];
const RESOURCE_FIELDS: &[&str] = &["gpus", "gpu_milli", "gpu_model", "cpu_millis", "memory_mib"];

/// Gang size bounds: a gang must start all at once, and past this no cluster does that.
pub(crate) const REPLICAS: (u64, u64) = (1, 1024);
pub(crate) const REPLICAS_EXPECTATION: &str = "an integer between 1 and 1024";
/// Any duration beyond ~31,000 years is a mistake; the bound keeps milliseconds in a u64.
pub(crate) const SECONDS_MAX: u64 = 1_000_000_000_000;
pub(crate) const DEFAULT_GRACE_SECONDS: u64 = 30;
/// Runs after the first one, for a job that keeps failing.
pub(crate) const RETRIES: (u64, u64) = (0, 100);
pub(crate) const RETRIES_EXPECTATION: &str = "an integer between 0 and 100";
const ENV_HINT: &str = " (quote numbers and booleans, e.g. \"3\")";

/// Reads one native job. `document` and `path_prefix` place errors: a scenario file that
/// embeds jobs under `jobs:` passes its own document number and `jobs[3]`. An
/// `apiVersion: fairway/v1` / `kind: Job` envelope is allowed.
///
/// The tenant is required, as with [`crate::ParseOptions::default`].
pub fn parse_native_job(value: &Value, document: usize, path_prefix: &str) -> Result<JobDoc, SpecErrors> {
    let mut issues = Issues::new(document);
    let job = Obj::new(value, Path::root(path_prefix), &mut issues).and_then(|mut obj| {
        take_envelope(&mut obj, "Job", &mut issues)?;
        Some(read(obj, &ParseOptions::default(), &mut issues))
    });
    issues.finish(job).map(|(job, _)| job)
}

/// The native fields of `obj` (its envelope already taken). Whatever fails is recorded in
/// `issues` and replaced by a placeholder; callers discard the job when `issues` has errors.
pub(crate) fn read(mut obj: Obj<'_>, options: &ParseOptions, issues: &mut Issues) -> JobDoc {
    let mut origin = native_origin(obj.path(), issues.document());
    let name = obj.require("name", issues).and_then(|(v, path)| job_name(v, &path, issues));
    let tenant_field = if options.tenant_required { obj.require("tenant", issues) } else { obj.take("tenant") };
    let tenant = match tenant_field {
        Some((v, path)) => tenant(v, path, options, issues),
        None => Tenant::default(),
    };
    origin.tenant = tenant.origin;
    let priority = obj.take("priority").map_or(Some(PriorityRef::Default), |(v, path)| priority_ref(v, &path, issues));
    let resources = obj.require("resources", issues).and_then(|(v, path)| resources(v, path, issues));
    let replicas_path = obj.path().field("replicas");
    let replicas = obj.take("replicas").map_or(Some(1), |(v, path)| replicas(v, &path, issues));
    if let (Some(r), Some(n)) = (&resources, replicas)
        && r.gpu_milli.is_some()
        && n > 1
    {
        issues.error(
            &replicas_path,
            "a share of one GPU (resources.gpu_milli) is for one-replica jobs; a gang takes whole GPUs",
        );
    }
    let image_given = obj.has("image");
    let image = obj.take("image").and_then(|(v, path)| image_reference(v, &path, issues));
    let image_optional = obj.take("image_optional").map_or(Some(false), |(v, path)| value::boolean(v, &path, issues));
    let command_given = obj.has("command");
    let command = obj.take("command").and_then(|(v, path)| value::string_list(v, &path, issues));
    let shell = obj.take("shell").map_or(Some(false), |(v, path)| value::boolean(v, &path, issues));
    let run = Run { image_given, image_optional: image_optional.unwrap_or(false), shell: shell.unwrap_or(false) };
    if let Err(reason) = check_command(command_given, command.as_deref(), run) {
        issues.error(&obj.path().field("command"), reason);
    }
    let working_dir = obj.take("working_dir").and_then(|(v, path)| working_dir(v, &path, issues));
    let env = obj.take("env").and_then(|(v, path)| env_map(v, &path, issues));
    let max_runtime_seconds = obj.take("max_runtime_seconds").and_then(|(v, path)| positive_seconds(v, &path, issues));
    let max_total_runtime_seconds =
        obj.take("max_total_runtime_seconds").and_then(|(v, path)| positive_seconds(v, &path, issues));
    let retries = obj.take("retries").map_or(Some(0), |(v, path)| retries(v, &path, issues));
    let preemptible = obj.take("preemptible").and_then(|(v, path)| value::boolean(v, &path, issues));
    let grace = obj.take("preemption_grace_seconds").and_then(|(v, path)| seconds(v, &path, issues));
    let checkpoint = obj.take("checkpoint_interval_seconds").and_then(|(v, path)| positive_seconds(v, &path, issues));
    let preemption_policy = obj.take("preemption_policy").and_then(|(v, path)| policy(v, &path, issues));
    obj.reject_rest(issues, FIELDS);
    let job = JobDoc {
        name: name.unwrap_or_default(),
        user: tenant.user.unwrap_or_default(),
        project: tenant.project.unwrap_or_default(),
        priority: priority.unwrap_or(PriorityRef::Default),
        resources: resources.unwrap_or_default(),
        replicas: replicas.unwrap_or(1),
        image,
        image_optional: image_optional.unwrap_or(false),
        command: command.unwrap_or_default(),
        shell: shell.unwrap_or(false),
        working_dir,
        env: env.unwrap_or_default(),
        max_runtime_seconds,
        max_total_runtime_seconds,
        retries: retries.unwrap_or(0),
        preemptible: preemptible.unwrap_or(true),
        preemption_grace_seconds: grace.unwrap_or(DEFAULT_GRACE_SECONDS),
        checkpoint_interval_seconds: checkpoint,
        preemption_policy,
        origin,
    };
    check_totals(&job, issues);
    job
}

fn native_origin(root: &Path, document: usize) -> Origin {
    let resources = root.field("resources");
    let paths = [
        (Field::Name, root.field("name")),
        (Field::Priority, root.field("priority")),
        (Field::Replicas, root.field("replicas")),
        (Field::Gpus, resources.field("gpus")),
        (Field::GpuMilli, resources.field("gpu_milli")),
        (Field::GpuModel, resources.field("gpu_model")),
        (Field::Cpu, resources.field("cpu_millis")),
        (Field::Memory, resources.field("memory_mib")),
        (Field::WorkingDir, root.field("working_dir")),
        (Field::Shell, root.field("shell")),
        (Field::Retries, root.field("retries")),
        (Field::ImageOptional, root.field("image_optional")),
    ];
    Origin {
        document,
        format: SourceFormat::Native,
        paths: paths.into_iter().map(|(f, p)| (f, p.as_str().to_owned())).collect(),
        tenant: TenantOrigin::default(),
    }
}

/// What decides which commands are valid.
#[derive(Clone, Copy)]
struct Run {
    image_given: bool,
    image_optional: bool,
    shell: bool,
}

/// The one problem with `command`, if any, given how the job runs. `given`: the field is
/// present; `command`: its value, `None` when invalid (and already reported).
fn check_command(given: bool, command: Option<&[String]>, run: Run) -> Result<(), String> {
    const SHELL: &str = "the job runs /bin/sh -c <string>";
    const FALLBACK: &str = "a plain-process fallback needs a command";
    if !given {
        let why = if !run.image_given {
            "required unless image is given".to_owned()
        } else if run.shell {
            format!("shell is true: {SHELL}")
        } else if run.image_optional {
            format!("image_optional is true: {FALLBACK}")
        } else {
            return Ok(());
        };
        return Err(format!("required field is missing ({why})"));
    }
    let Some(command) = command else { return Ok(()) };
    if run.shell && command.len() != 1 {
        let got = if command.is_empty() { "an empty list".to_owned() } else { format!("{} strings", command.len()) };
        return Err(format!("must be exactly one string when shell is true ({SHELL}), got {got}"));
    }
    if command.is_empty() && !run.image_given {
        return Err("must not be empty unless image is given".to_owned());
    }
    if command.is_empty() && run.image_optional {
        return Err(format!("must not be empty when image_optional is true: {FALLBACK}"));
    }
    Ok(())
}

/// An absolute path.
pub(crate) fn working_dir(v: &Value, path: &Path, issues: &mut Issues) -> Option<String> {
    let dir = value::string(v, path, issues)?;
    match names::absolute_path(&dir) {
        Ok(()) => Some(dir),
        Err(reason) => {
            issues.error(path, reason);
            None
        }
    }
}

pub(crate) fn retries(v: &Value, path: &Path, issues: &mut Issues) -> Option<u32> {
    let n = uint_in(v, path, issues, RETRIES, RETRIES_EXPECTATION)?;
    u32::try_from(n).ok()
}

/// Reports a gang whose totals overflow the core's integer types.
pub(crate) fn check_totals(job: &JobDoc, issues: &mut Issues) {
    if let Err((field, reason)) = job.check_totals() {
        issues.errors.push(job.origin.error(field, reason));
    }
}

/// A tenant as read: each part, and where it was written.
#[derive(Default)]
struct Tenant {
    user: Option<String>,
    project: Option<String>,
    origin: TenantOrigin,
}

/// `tenant: { user, project }`. With the tenant required, the project is required and the
/// user defaults to it; otherwise both may be left out, and stay empty for the server.
fn tenant(v: &Value, path: Path, options: &ParseOptions, issues: &mut Issues) -> Tenant {
    let Some(mut obj) = Obj::new(v, path, issues) else { return Tenant::default() };
    let project_field = if options.tenant_required { obj.require("project", issues) } else { obj.take("project") };
    let mut origin = TenantOrigin::default();
    let project = project_field.and_then(|(v, path)| {
        origin.project = Some(path.as_str().to_owned());
        token(v, &path, issues)
    });
    let user = match obj.take("user") {
        Some((v, path)) => {
            origin.user = Some(path.as_str().to_owned());
            token(v, &path, issues)
        }
        None if options.tenant_required => project.clone(),
        None => None,
    };
    obj.reject_rest(issues, &["user", "project"]);
    Tenant { user, project, origin }
}

fn resources(v: &Value, path: Path, issues: &mut Issues) -> Option<ResourcesDoc> {
    let mut obj = Obj::new(v, path, issues)?;
    // A share of one GPU (`gpu_milli`) needs no `gpus`; with one, it must be 1.
    let gpu_milli = obj.take("gpu_milli").and_then(|(v, path)| {
        let milli = uint_in(v, &path, issues, (1, 999), "thousandths of one GPU, 1 to 999 (whole GPUs: gpus)")?;
        Some((u32::try_from(milli).ok()?, path))
    });
    let gpus = match &gpu_milli {
        None => obj.require("gpus", issues).and_then(|(v, path)| gpu_count(v, &path, issues)),
        Some((_, milli_path)) => match obj.take("gpus") {
            None => Some(1),
            Some((v, path)) => match gpu_count(v, &path, issues) {
                Some(1) => Some(1),
                Some(n) => {
                    issues.error(
                        milli_path,
                        format!("a share is part of one GPU: with gpu_milli, gpus must be 1 or left out, got {n}"),
                    );
                    None
                }
                None => None,
            },
        },
    };
    let gpu_milli = gpu_milli.map(|(milli, _)| milli);
    let gpu_model = obj.take("gpu_model").and_then(|(v, path)| token(v, &path, issues));
    let cpu = obj.take("cpu_millis").map_or(Some(0), |(v, path)| {
        uint_in(v, &path, issues, (0, u64::MAX), "a non-negative integer number of millicores")
    });
    let memory = obj
        .take("memory_mib")
        .map_or(Some(0), |(v, path)| uint_in(v, &path, issues, (0, u64::MAX), "a non-negative integer number of MiB"));
    obj.reject_rest(issues, RESOURCE_FIELDS);
    Some(ResourcesDoc { gpus: gpus?, gpu_milli, gpu_model, cpu_millis: cpu?, memory_mib: memory? })
}

pub(crate) fn gpu_count(v: &Value, path: &Path, issues: &mut Issues) -> Option<u32> {
    let n = uint_in(v, path, issues, (1, u64::from(u32::MAX)), "a positive integer")?;
    u32::try_from(n).ok()
}

pub(crate) fn replicas(v: &Value, path: &Path, issues: &mut Issues) -> Option<u32> {
    let n = uint_in(v, path, issues, REPLICAS, REPLICAS_EXPECTATION)?;
    u32::try_from(n).ok()
}

pub(crate) fn seconds(v: &Value, path: &Path, issues: &mut Issues) -> Option<u64> {
    uint_in(v, path, issues, (0, SECONDS_MAX), "a non-negative integer number of seconds")
}

pub(crate) fn positive_seconds(v: &Value, path: &Path, issues: &mut Issues) -> Option<u64> {
    uint_in(v, path, issues, (1, SECONDS_MAX), "a positive integer number of seconds")
}

/// A class name, or a bare integer value.
fn priority_ref(v: &Value, path: &Path, issues: &mut Issues) -> Option<PriorityRef> {
    match v {
        Value::String(name) if !name.is_empty() => Some(PriorityRef::Class(name.clone())),
        Value::Number(_) => match value::exact_integer(v).and_then(|n| i32::try_from(n).ok()) {
            Some(n) => Some(PriorityRef::Value(n)),
            None => {
                issues.error(path, format!("must be an integer that fits in 32 bits, got {}", describe(v)));
                None
            }
        },
        other => {
            issues.error(path, format!("must be a priority class name or an integer value, got {}", describe(other)));
            None
        }
    }
}

/// A job name: a DNS-1123 subdomain name that is not all digits.
pub(crate) fn job_name(v: &Value, path: &Path, issues: &mut Issues) -> Option<String> {
    let name = value::string(v, path, issues)?;
    match names::job_name(&name) {
        Ok(()) => Some(name),
        Err(reason) => {
            issues.error(path, reason);
            None
        }
    }
}

/// A container image reference, as `docker run` takes it.
pub(crate) fn image_reference(v: &Value, path: &Path, issues: &mut Issues) -> Option<String> {
    let reference = value::string(v, path, issues)?;
    match image::check_reference(&reference) {
        Ok(()) => Some(reference),
        Err(reason) => {
            issues.error(path, reason);
            None
        }
    }
}

/// A user, project or GPU model name.
pub(crate) fn token(v: &Value, path: &Path, issues: &mut Issues) -> Option<String> {
    let s = value::string(v, path, issues)?;
    match names::token(&s) {
        Ok(()) => Some(s),
        Err(reason) => {
            issues.error(path, reason);
            None
        }
    }
}

/// `env: { NAME: "value" }`. Values must be strings: YAML turns `3` into a number and
/// `true` into a boolean, and guessing how to print them back would be a silent misread.
/// Each entry's name and value are checked, so one bad entry does not hide another's.
fn env_map(v: &Value, path: &Path, issues: &mut Issues) -> Option<BTreeMap<String, String>> {
    let Value::Object(entries) = v else {
        issues.error(path, format!("must be a mapping of strings, got {}", describe(v)));
        return None;
    };
    let mut env = BTreeMap::new();
    let mut ok = true;
    for (name, value) in entries {
        let entry_path = path.field(name);
        if let Err(reason) = names::env_name(name) {
            ok = false;
            issues.error(&entry_path, reason);
        }
        match value {
            Value::String(s) => {
                env.insert(name.clone(), s.clone());
            }
            other => {
                ok = false;
                issues.error(&entry_path, format!("must be a string{ENV_HINT}, got {}", describe(other)));
            }
        }
    }
    ok.then_some(env)
}

/// The hint appended to "must be a string" for environment values.
pub(crate) fn env_hint() -> &'static str {
    ENV_HINT
}

/// Reads the native format with all of [`crate::parse_native_job`]'s checks. Paths in the
/// error are relative to the job; use `parse_native_job` directly for exact paths.
impl<'de> Deserialize<'de> for JobDoc {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let strict = crate::value::StrictValue::deserialize(deserializer)?;
        let value = strict.into_value(0, "").map_err(serde::de::Error::custom)?;
        parse_native_job(&value, 0, "").map_err(|e: SpecErrors| serde::de::Error::custom(e))
    }
}
