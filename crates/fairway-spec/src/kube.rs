//! `batch/v1` Job → [`JobDoc`]. Kubernetes objects carry many fields fairway has no use
//! for; each one present becomes a warning with its path, so nothing is silently dropped,
//! and nothing fairway does read is guessed at.

use std::collections::BTreeMap;
use std::collections::btree_map::Entry;

use serde_json::Value;

use crate::error::{IGNORED, Issues};
use crate::input::ParseOptions;
use crate::model::{Field, JobDoc, Origin, PriorityRef, ResourcesDoc, SourceFormat};
use crate::names;
use crate::native::{self, DEFAULT_GRACE_SECONDS, SECONDS_MAX};
use crate::path::Path;
use crate::quantity::{self, QuantityError};
use crate::value::{self, Obj, describe, quote};

const FAIRWAY_PREFIX: &str = "fairway.dev/";
const USER_KEY: &str = "fairway.dev/user";
const CHECKPOINT_KEY: &str = "fairway.dev/checkpoint-interval-seconds";
const PREEMPTIBLE_KEY: &str = "fairway.dev/preemptible";
const GPU_RESOURCE: &str = "nvidia.com/gpu";
const GPU_PRODUCT_LABEL: &str = "nvidia.com/gpu.product";
const DEFAULT_NAMESPACE: &str = "default";
/// Kubernetes's default `spec.backoffLimit`, kept for Jobs that leave it out, so that a Job
/// is retried as often as Kubernetes would (the native default is 0).
pub(crate) const DEFAULT_BACKOFF_LIMIT: u32 = 6;
/// The largest `spec.backoffLimit` Kubernetes takes (an int32), read for a cluster.
const CLUSTER_BACKOFF_LIMIT_MAX: u64 = 2_147_483_647;

/// Reads a Job whose envelope (`apiVersion`, `kind`) is already taken. Failures are in
/// `issues`; the returned job is then a placeholder to discard. With
/// [`ParseOptions::for_cluster`], the rules about launching the job are Kubernetes's.
pub(crate) fn read_job(mut obj: Obj<'_>, options: &ParseOptions, issues: &mut Issues) -> JobDoc {
    let mut job = JobDoc {
        name: String::new(),
        user: String::new(),
        // Without a required tenant the server fills in the caller's project instead.
        project: if options.tenant_required { DEFAULT_NAMESPACE.to_owned() } else { String::new() },
        priority: PriorityRef::Default,
        resources: ResourcesDoc::default(),
        replicas: 1,
        image: None,
        image_optional: false,
        command: Vec::new(),
        shell: false,
        working_dir: None,
        env: BTreeMap::new(),
        max_runtime_seconds: None,
        max_total_runtime_seconds: None,
        retries: DEFAULT_BACKOFF_LIMIT,
        preemptible: true,
        preemption_grace_seconds: DEFAULT_GRACE_SECONDS,
        checkpoint_interval_seconds: None,
        preemption_policy: None,
        origin: Origin { document: issues.document(), format: SourceFormat::KubernetesJob, ..Origin::default() },
    };
    job.origin.paths.insert(Field::Priority, pod_spec_path(obj.path()).field("priorityClassName").as_str().to_owned());
    job.origin.paths.insert(Field::Replicas, obj.path().field("spec").field("parallelism").as_str().to_owned());
    job.origin.paths.insert(Field::Retries, obj.path().field("spec").field("backoffLimit").as_str().to_owned());
    let working_dir = pod_spec_path(obj.path()).field("containers").index(0).field("workingDir");
    job.origin.paths.insert(Field::WorkingDir, working_dir.as_str().to_owned());
    if let Some((v, path)) = obj.require("metadata", issues) {
        read_metadata(v, path, options, &mut job, issues);
    }
    if let Some((v, path)) = obj.require("spec", issues) {
        read_job_spec(v, path, options, &mut job, issues);
    }
    obj.warn_rest(issues);
    native::check_totals(&job, issues);
    job
}

fn pod_spec_path(root: &Path) -> Path {
    root.field("spec").field("template").field("spec")
}

fn read_metadata(v: &Value, path: Path, options: &ParseOptions, job: &mut JobDoc, issues: &mut Issues) {
    let Some(mut meta) = Obj::new(v, path, issues) else { return };
    let name_path = meta.path().field("name");
    job.origin.paths.insert(Field::Name, name_path.as_str().to_owned());
    if !meta.has("name") && meta.has("generateName") {
        issues
            .error(&name_path, "required field is missing (generateName is not supported: fairway needs a fixed name)");
    } else if let Some((v, path)) = meta.require("name", issues) {
        job.name = job_name(v, &path, options, issues).unwrap_or_default();
    }
    if let Some((v, path)) = meta.take("namespace") {
        job.origin.tenant.project = Some(path.as_str().to_owned());
        job.project = namespace(v, &path, issues).unwrap_or_default();
    }
    let labels = meta.take("labels").map(|(v, path)| fairway_keys(v, &path, "label", &[USER_KEY], issues));
    let annotations = meta
        .take("annotations")
        .map(|(v, path)| fairway_keys(v, &path, "annotation", &[USER_KEY, CHECKPOINT_KEY, PREEMPTIBLE_KEY], issues));
    let labels = labels.unwrap_or_default();
    let annotations = annotations.unwrap_or_default();
    meta.warn_rest(issues);
    let user = user(&labels, &annotations, issues);
    job.origin.tenant.user =
        [&labels, &annotations].iter().find_map(|found| found.get(USER_KEY)).map(|(_, path)| path.as_str().to_owned());
    job.user = match user {
        Some(user) => user,
        // As Kubernetes has it, the namespace stands for the user too, unless the tenant
        // comes from the caller: then a namespace alone says nothing about the user.
        None if options.tenant_required => job.project.clone(),
        None => String::new(),
    };
    if let Some((v, path)) = annotations.get(CHECKPOINT_KEY) {
        job.checkpoint_interval_seconds = seconds_annotation(v, path, issues);
    }
    if let Some((v, path)) = annotations.get(PREEMPTIBLE_KEY) {
        job.preemptible = bool_annotation(v, path, issues).unwrap_or(true);
    }
}

/// A DNS-1123 subdomain, as Kubernetes has it. The standalone server also refuses a name
/// made only of digits, which its CLI would take for a job id.
fn job_name(v: &Value, path: &Path, options: &ParseOptions, issues: &mut Issues) -> Option<String> {
    if options.for_cluster { checked(v, path, issues, names::dns_subdomain) } else { native::job_name(v, path, issues) }
}

fn namespace(v: &Value, path: &Path, issues: &mut Issues) -> Option<String> {
    checked(v, path, issues, names::dns_label)
}

/// A string that passes `check`; otherwise `check`'s reason is recorded at `path`.
fn checked(v: &Value, path: &Path, issues: &mut Issues, check: fn(&str) -> Result<(), String>) -> Option<String> {
    let s = value::string(v, path, issues)?;
    match check(&s) {
        Ok(()) => Some(s),
        Err(reason) => {
            issues.error(path, reason);
            None
        }
    }
}

type Found<'a> = BTreeMap<&'static str, (&'a Value, Path)>;

/// Labels or annotations: fairway's own keys (`known`) are collected, an unknown key under
/// `fairway.dev/` is an error (most likely a typo), any other key is ignored with a warning.
fn fairway_keys<'a>(v: &'a Value, path: &Path, what: &str, known: &[&'static str], issues: &mut Issues) -> Found<'a> {
    let mut found = Found::new();
    let Some(obj) = Obj::new(v, path.clone(), issues) else { return found };
    for (key, value, key_path) in obj.rest() {
        if let Some(&k) = known.iter().find(|k| **k == key) {
            found.insert(k, (value, key_path));
        } else if key.starts_with(FAIRWAY_PREFIX) {
            issues.error(&key_path, format!("unknown fairway {what}; fairway reads: {}", known.join(", ")));
        } else {
            issues.ignored(&key_path);
        }
    }
    found
}

/// `fairway.dev/user` from a label or an annotation (which must agree when both are set).
fn user(labels: &Found<'_>, annotations: &Found<'_>, issues: &mut Issues) -> Option<String> {
    let from_label = labels.get(USER_KEY).and_then(|(v, path)| native::token(v, path, issues));
    let from_annotation = annotations.get(USER_KEY).and_then(|(v, path)| native::token(v, path, issues));
    match (from_label, from_annotation) {
        (Some(l), Some(a)) if l != a => {
            if let Some((_, path)) = annotations.get(USER_KEY) {
                issues.error(path, format!("conflicts with the label {USER_KEY} ({})", quote(&l)));
            }
            Some(l)
        }
        (l, a) => l.or(a),
    }
}

fn seconds_annotation(v: &Value, path: &Path, issues: &mut Issues) -> Option<u64> {
    let parsed = v.as_str().and_then(|s| s.parse::<u64>().ok()).filter(|n| (1..=SECONDS_MAX).contains(n));
    if parsed.is_none() {
        issues
            .error(path, format!("must be a string holding a positive integer number of seconds, got {}", describe(v)));
    }
    parsed
}

fn bool_annotation(v: &Value, path: &Path, issues: &mut Issues) -> Option<bool> {
    match v.as_str() {
        Some("true") => Some(true),
        Some("false") => Some(false),
        _ => {
            issues.error(path, format!("must be \"true\" or \"false\", got {}", describe(v)));
            None
        }
    }
}

fn read_job_spec(v: &Value, path: Path, options: &ParseOptions, job: &mut JobDoc, issues: &mut Issues) {
    let Some(mut spec) = Obj::new(v, path, issues) else { return };
    if let Some((v, path)) = spec.take("parallelism") {
        job.replicas = native::replicas(v, &path, issues).unwrap_or(1);
    }
    if let Some((v, path)) = spec.take("activeDeadlineSeconds") {
        job.max_runtime_seconds = native::positive_seconds(v, &path, issues);
    }
    if let Some((v, path)) = spec.take("backoffLimit") {
        job.retries = backoff_limit(v, &path, options, issues).unwrap_or(DEFAULT_BACKOFF_LIMIT);
    }
    if let Some((v, path)) = spec.require("template", issues) {
        read_template(v, path, options, job, issues);
    }
    spec.warn_rest(issues);
}

/// The standalone server runs a failed job again at most 100 times; in a cluster
/// Kubernetes's Job controller does, as often as the Job says.
fn backoff_limit(v: &Value, path: &Path, options: &ParseOptions, issues: &mut Issues) -> Option<u32> {
    if !options.for_cluster {
        return native::retries(v, path, issues);
    }
    let n = value::uint_in(v, path, issues, (0, CLUSTER_BACKOFF_LIMIT_MAX), "a non-negative 32-bit integer")?;
    u32::try_from(n).ok()
}

fn read_template(v: &Value, path: Path, options: &ParseOptions, job: &mut JobDoc, issues: &mut Issues) {
    let Some(mut template) = Obj::new(v, path, issues) else { return };
    if let Some((meta, path)) = template.take("metadata") {
        let has_fairway_keys = ["labels", "annotations"].iter().any(|k| {
            meta.get(k).and_then(Value::as_object).is_some_and(|m| m.keys().any(|key| key.starts_with(FAIRWAY_PREFIX)))
        });
        if has_fairway_keys {
            issues.warn(&path, format!("{IGNORED} (fairway reads {FAIRWAY_PREFIX} labels and annotations from the Job's metadata, not the pod template's)"));
        } else {
            issues.ignored(&path);
        }
    }
    if let Some((v, path)) = template.require("spec", issues) {
        read_pod_spec(v, path, options, job, issues);
    }
    template.warn_rest(issues);
}

fn read_pod_spec(v: &Value, path: Path, options: &ParseOptions, job: &mut JobDoc, issues: &mut Issues) {
    let Some(mut pod) = Obj::new(v, path, issues) else { return };
    // An empty name is no name, as for the Kubernetes API server (the field is omitempty):
    // the default class, not a class called "".
    let class = pod.take("priorityClassName").and_then(|(v, path)| value::string(v, &path, issues));
    if let Some(name) = class.filter(|name| !name.is_empty()) {
        job.priority = PriorityRef::Class(name);
    }
    if let Some((v, path)) = pod.take("terminationGracePeriodSeconds") {
        job.preemption_grace_seconds = native::seconds(v, &path, issues).unwrap_or(DEFAULT_GRACE_SECONDS);
    }
    if let Some((v, path)) = pod.take("nodeSelector") {
        job.origin.paths.insert(Field::GpuModel, path.key(GPU_PRODUCT_LABEL).as_str().to_owned());
        read_node_selector(v, &path, job, issues);
    }
    if let Some((v, path)) = pod.require("containers", issues) {
        read_containers(v, path, options, job, issues);
    }
    pod.warn_rest(issues);
}

fn read_node_selector(v: &Value, path: &Path, job: &mut JobDoc, issues: &mut Issues) {
    let Some(obj) = Obj::new(v, path.clone(), issues) else { return };
    for (key, value, key_path) in obj.rest() {
        if key == GPU_PRODUCT_LABEL {
            job.resources.gpu_model = native::token(value, &key_path, issues);
        } else {
            issues.ignored(&key_path);
        }
    }
}

/// What one container asks for: an amount and where it was written.
#[derive(Default)]
struct Asks {
    gpus: Option<(u64, Path)>,
    /// A GPU amount was written but is invalid (and already reported).
    gpus_invalid: bool,
    cpu: Option<(u64, Path)>,
    memory: Option<(u64, Path)>,
}

fn read_containers(v: &Value, path: Path, options: &ParseOptions, job: &mut JobDoc, issues: &mut Issues) {
    let Value::Array(items) = v else {
        issues.error(&path, format!("must be a list of containers, got {}", describe(v)));
        return;
    };
    if items.is_empty() {
        issues.error(&path, "must list at least one container");
        return;
    }
    let mut asks = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let Some(mut container) = Obj::new(item, path.index(i), issues) else { continue };
        // The name only identifies the container to Kubernetes; accepting it silently
        // avoids a warning on every job.
        container.take("name");
        if i == 0 {
            read_main_container(&mut container, options, job, issues);
        }
        if let Some((v, path)) = container.take("resources") {
            asks.push(read_resources(v, path, issues));
        }
        container.warn_rest(issues);
    }
    sum_asks(&asks, &path, job, issues);
}

/// Image, argv, working directory and environment come from the first container only; the
/// same fields in other containers are warned about as ignored. In a cluster Kubernetes
/// runs the container: `args` alone leave the command empty (the image's entrypoint runs
/// with them), and the image and working directory are kept as written.
fn read_main_container(container: &mut Obj<'_>, options: &ParseOptions, job: &mut JobDoc, issues: &mut Issues) {
    if let Some((v, path)) = container.require("image", issues) {
        job.image = if options.for_cluster {
            checked(v, &path, issues, names::not_empty)
        } else {
            native::image_reference(v, &path, issues)
        };
    }
    let command = container.take("command").and_then(|(v, path)| value::string_list(v, &path, issues));
    let args = container.take("args").map(|(v, path)| (value::string_list(v, &path, issues), path));
    match (command, args) {
        (Some(command), Some((Some(args), _))) => job.command = command.into_iter().chain(args).collect(),
        (Some(command), _) => job.command = command,
        (None, Some((Some(_), path))) if !container.has("command") && !options.for_cluster => issues.error(
            &path,
            "args without command is not supported: fairway runs an explicit argv, not the image's entrypoint; add command",
        ),
        _ => {}
    }
    if let Some((v, path)) = container.take("workingDir") {
        job.working_dir =
            if options.for_cluster { value::string(v, &path, issues) } else { native::working_dir(v, &path, issues) };
    }
    if let Some((v, path)) = container.take("env") {
        job.env = read_env(v, &path, options, issues);
    }
}

/// `env`. In a cluster a name may repeat, as in Kubernetes: the last value is the one set.
fn read_env(v: &Value, path: &Path, options: &ParseOptions, issues: &mut Issues) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    let Value::Array(items) = v else {
        issues.error(path, format!("must be a list of {{name, value}} entries, got {}", describe(v)));
        return env;
    };
    for (i, item) in items.iter().enumerate() {
        let Some(mut entry) = Obj::new(item, path.index(i), issues) else { continue };
        let name_path = entry.path().field("name");
        let name = entry.require("name", issues).and_then(|(v, path)| env_name(v, &path, options, issues));
        let value = entry.take("value").map_or(Some(String::new()), |(v, path)| env_value(v, &path, issues));
        let from_elsewhere = entry.take("valueFrom");
        if let Some((_, path)) = &from_elsewhere {
            issues.warn(path, format!("{IGNORED} (the variable is not set)"));
        }
        entry.warn_rest(issues);
        if let (Some(name), Some(value), None) = (name, value, from_elsewhere) {
            match env.entry(name) {
                Entry::Occupied(mut taken) if options.for_cluster => {
                    let key = quote(taken.key());
                    issues.warn(
                        &name_path,
                        format!("repeats environment variable {key}: the last value is set, as in Kubernetes"),
                    );
                    taken.insert(value);
                }
                Entry::Occupied(taken) => {
                    issues.error(&name_path, format!("duplicate environment variable {}", quote(taken.key())));
                }
                Entry::Vacant(free) => {
                    free.insert(value);
                }
            }
        }
    }
    env
}

/// The standalone server's rule (a shell name, none it sets itself), or in a cluster
/// Kubernetes's: the device plugin and the user own `CUDA_VISIBLE_DEVICES` and the like.
fn env_name(v: &Value, path: &Path, options: &ParseOptions, issues: &mut Issues) -> Option<String> {
    let rule = if options.for_cluster { names::kube_env_name } else { names::env_name };
    checked(v, path, issues, rule)
}

fn env_value(v: &Value, path: &Path, issues: &mut Issues) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        other => {
            issues.error(path, format!("must be a string{}, got {}", native::env_hint(), describe(other)));
            None
        }
    }
}

/// One container's `resources`. GPUs: limits and requests must agree (Kubernetes requires
/// it for extended resources). CPU and memory: the request is what a node must have free;
/// a limit alone stands for the request, as in Kubernetes.
fn read_resources(v: &Value, path: Path, issues: &mut Issues) -> Asks {
    let Some(mut obj) = Obj::new(v, path, issues) else { return Asks::default() };
    let limits = obj.take("limits").map(|(v, path)| read_amounts(v, &path, issues)).unwrap_or_default();
    let requests = obj.take("requests").map(|(v, path)| read_amounts(v, &path, issues)).unwrap_or_default();
    obj.warn_rest(issues);
    // `match` with a guard rather than a let chain: the workspace's MSRV predates them.
    match (&limits.gpus, &requests.gpus) {
        (Some((l, _)), Some((r, r_path))) if l != r => {
            issues.error(r_path, format!("must equal the limit for {GPU_RESOURCE} ({l}), got {r}"));
        }
        _ => {}
    }
    for (limit, request, what) in [(&limits.cpu, &requests.cpu, "cpu"), (&limits.memory, &requests.memory, "memory")] {
        match (limit, request) {
            (Some((l, _)), Some((r, r_path))) if r > l => {
                issues.error(r_path, format!("must not exceed the {what} limit"));
            }
            _ => {}
        }
    }
    Asks {
        gpus_invalid: limits.gpus_invalid || requests.gpus_invalid,
        gpus: limits.gpus.or(requests.gpus),
        cpu: requests.cpu.or(limits.cpu),
        memory: requests.memory.or(limits.memory),
    }
}

/// `limits` or `requests`: GPU, CPU and memory amounts; other resources are ignored.
fn read_amounts(v: &Value, path: &Path, issues: &mut Issues) -> Asks {
    let mut asks = Asks::default();
    let Some(obj) = Obj::new(v, path.clone(), issues) else { return asks };
    for (key, value, key_path) in obj.rest() {
        match key {
            GPU_RESOURCE => {
                asks.gpus = gpu_amount(value, &key_path, issues).map(|n| (n, key_path));
                asks.gpus_invalid = asks.gpus.is_none();
            }
            "cpu" => asks.cpu = amount(value, &key_path, issues, quantity::cpu_millis).map(|n| (n, key_path)),
            "memory" => asks.memory = amount(value, &key_path, issues, quantity::memory_mib).map(|n| (n, key_path)),
            _ => issues.ignored(&key_path),
        }
    }
    asks
}

/// Quantities are strings in Kubernetes; YAML and JSON writers also emit bare numbers.
fn quantity_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

fn amount(v: &Value, path: &Path, issues: &mut Issues, parse: fn(&str) -> Result<u64, QuantityError>) -> Option<u64> {
    let Some(text) = quantity_text(v) else {
        issues.error(path, format!("must be a quantity such as \"500m\" or \"16Gi\", got {}", describe(v)));
        return None;
    };
    match parse(&text) {
        Ok(n) => Some(n),
        Err(e) => {
            issues.error(path, format!("{e}, got {}", describe(v)));
            None
        }
    }
}

/// A whole, non-negative GPU count (0 is allowed per container; the total must be ≥ 1).
fn gpu_amount(v: &Value, path: &Path, issues: &mut Issues) -> Option<u64> {
    let counted = quantity_text(v).map(|t| quantity::whole_count(&t));
    match counted {
        Some(Ok(n)) if n <= u64::from(u32::MAX) => Some(n),
        Some(Ok(_) | Err(QuantityError::TooLarge | QuantityError::TooManyDigits)) => {
            issues.error(path, format!("is too large, got {}", describe(v)));
            None
        }
        _ => {
            issues.error(path, format!("must be a positive integer, got {}", describe(v)));
            None
        }
    }
}

/// Adds up the containers' asks into the per-replica resources.
fn sum_asks(asks: &[Asks], containers: &Path, job: &mut JobDoc, issues: &mut Issues) {
    let gpus = total(asks.iter().map(|a| &a.gpus), containers, Field::Gpus, job, issues);
    let cpu = total(asks.iter().map(|a| &a.cpu), containers, Field::Cpu, job, issues);
    let memory = total(asks.iter().map(|a| &a.memory), containers, Field::Memory, job, issues);
    job.resources.cpu_millis = cpu;
    job.resources.memory_mib = memory;
    match u32::try_from(gpus) {
        // An invalid amount is already reported; "missing" on top would mislead.
        Ok(0) if asks.iter().any(|a| a.gpus_invalid) => {}
        Ok(0) => no_gpus(asks, containers, issues),
        Ok(n) => job.resources.gpus = n,
        Err(_) => issues.error(containers, "the containers' GPUs add up to too many"),
    }
}

/// Sums one resource over the containers and records where it was asked for: the one
/// field when a single container asks, the container list when several do.
fn total<'a>(
    asks: impl Iterator<Item = &'a Option<(u64, Path)>>,
    containers: &Path,
    field: Field,
    job: &mut JobDoc,
    issues: &mut Issues,
) -> u64 {
    let asked: Vec<&(u64, Path)> = asks.flatten().filter(|(n, _)| *n > 0).collect();
    let path = match asked.as_slice() {
        [(_, path)] => path.as_str().to_owned(),
        _ => containers.as_str().to_owned(),
    };
    job.origin.paths.insert(field, path);
    asked.iter().try_fold(0u64, |sum, (n, _)| sum.checked_add(*n)).unwrap_or_else(|| {
        issues.error(containers, format!("the containers' {} add up to too much", field.native_path()));
        0
    })
}

fn no_gpus(asks: &[Asks], containers: &Path, issues: &mut Issues) {
    match asks.iter().find_map(|a| a.gpus.as_ref()) {
        Some((n, path)) => issues.error(path, format!("must be a positive integer, got {n}")),
        None => issues.error(
            &containers.index(0).field("resources").field("limits").key(GPU_RESOURCE),
            "required field is missing (fairway schedules GPU jobs: set nvidia.com/gpu in a container's limits)",
        ),
    }
}
