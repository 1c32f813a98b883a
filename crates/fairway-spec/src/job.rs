//! The job as fairway reads it from any input format, and its conversion to the core's
//! `JobSpec`.

use std::collections::BTreeMap;

use fairway_core::{JobId, JobSpec, PreemptionPolicy, Priority, Resources};
use serde::{Deserialize, Serialize};

use crate::error::{SpecError, SpecErrors};
use crate::interner::{AccountKind, Interner};
use crate::priority::{PreemptionPolicyDoc, PreemptionProtection, PriorityClasses};

/// A job as written by a user, validated field by field but not yet tied to a registry of
/// priority classes or to a cluster. Serializes to the native format; deserializes from it
/// (through [`crate::parse_native_job`], so the same rules apply): a job read for a cluster
/// may not read back, since it keeps what only Kubernetes runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobDoc {
    /// DNS-1123 subdomain, unique per project within one input.
    pub name: String,
    pub user: String,
    pub project: String,
    pub priority: PriorityRef,
    /// Per replica.
    pub resources: ResourcesDoc,
    /// Gang size, 1..=1024.
    pub replicas: u32,
    /// A reference `docker run` takes; as written in a Job read with
    /// [`crate::ParseOptions::for_cluster`] (those rules below say "for a cluster").
    pub image: Option<String>,
    /// When no container runtime is available, run `command` as a plain process rather than
    /// refuse the job. `command` is then non-empty.
    pub image_optional: bool,
    /// Argv. Empty only when `image` is set (the image's own entrypoint runs). For a cluster,
    /// a Job's `args` without `command` leave it empty too (Kubernetes runs the entrypoint
    /// with them).
    pub command: Vec<String>,
    /// Run `command`, then exactly one string, as `/bin/sh -c <string>`.
    pub shell: bool,
    /// Absolute, without NUL, at most 4096 bytes (for a cluster: as written). `None`: the
    /// server's choice.
    pub working_dir: Option<String>,
    /// Names match `[A-Za-z_][A-Za-z0-9_]*`; none the server sets itself (`FAIRWAY_*`,
    /// `CUDA_VISIBLE_DEVICES`, `NVIDIA_VISIBLE_DEVICES`). For a cluster: any name Kubernetes
    /// takes (printable ASCII other than `=`).
    pub env: BTreeMap<String, String>,
    /// Limit of each run (a preempted job's next run has it whole again).
    pub max_runtime_seconds: Option<u64>,
    /// Limit over all of the job's runs together.
    pub max_total_runtime_seconds: Option<u64>,
    /// How many times a failed run (non-zero exit not caused by preemption) is run again
    /// before the job is marked failed, 0..=100 (for a cluster: up to 2^31 − 1, Kubernetes's
    /// `backoffLimit`). Preemptions never count.
    pub retries: u32,
    pub preemptible: bool,
    pub preemption_grace_seconds: u64,
    pub checkpoint_interval_seconds: Option<u64>,
    /// Overrides the priority class's policy when set.
    pub preemption_policy: Option<PreemptionPolicyDoc>,
    /// Where the job came from, for error messages after parsing.
    pub origin: Origin,
}

/// How a job names its priority.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum PriorityRef {
    /// No priority given: the registry's global default class.
    #[serde(skip)]
    Default,
    /// A priority class, resolved against a [`PriorityClasses`] registry.
    Class(String),
    /// A bare value (any Kubernetes priority value); the preemption policy then defaults
    /// to `PreemptLowerPriority`.
    Value(i32),
}

/// The class name, the bare value, or `(default class)`.
impl std::fmt::Display for PriorityRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PriorityRef::Default => f.write_str("(default class)"),
            PriorityRef::Class(name) => f.write_str(name),
            PriorityRef::Value(v) => write!(f, "{v}"),
        }
    }
}

/// Resources of one replica.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ResourcesDoc {
    /// At least 1.
    pub gpus: u32,
    /// `None`: any model.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_model: Option<String>,
    pub cpu_millis: u64,
    pub memory_mib: u64,
}

/// Which format a document was written in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum SourceFormat {
    #[default]
    Native,
    KubernetesJob,
    KubernetesPriorityClass,
}

/// Fields whose input path later checks (priority resolution, cluster fit, duplicate
/// names, the server's run-time checks) point at.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Field {
    Name,
    Priority,
    Gpus,
    GpuModel,
    Cpu,
    Memory,
    Replicas,
    Value,
    GlobalDefault,
    /// Kubernetes: `containers[0].workingDir`.
    WorkingDir,
    /// Not mapped from Kubernetes: always the native path.
    Shell,
    /// Kubernetes: `spec.backoffLimit`.
    Retries,
    /// Not mapped from Kubernetes: always the native path.
    ImageOptional,
}

impl Field {
    /// The field's path in the native job format or the compact priority class format.
    pub fn native_path(self) -> &'static str {
        match self {
            Field::Name => "name",
            Field::Priority => "priority",
            Field::Gpus => "resources.gpus",
            Field::GpuModel => "resources.gpu_model",
            Field::Cpu => "resources.cpu_millis",
            Field::Memory => "resources.memory_mib",
            Field::Replicas => "replicas",
            Field::Value => "value",
            Field::GlobalDefault => "globalDefault",
            Field::WorkingDir => "working_dir",
            Field::Shell => "shell",
            Field::Retries => "retries",
            Field::ImageOptional => "image_optional",
        }
    }
}

/// Where a document came from: its 1-based position in the input and the input path of
/// the fields later checks report on.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Origin {
    pub document: usize,
    pub format: SourceFormat,
    pub paths: BTreeMap<Field, String>,
    /// Which parts of the tenant the document wrote, and where.
    pub tenant: TenantOrigin,
}

/// Where a job's user and project were written: the input path of each, or `None` when
/// the document did not write it (it was defaulted, or left empty for the server to fill
/// in from the caller). A server that takes the tenant from the caller's credentials uses
/// this to refuse a spec that names another tenant, pointing at the field.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TenantOrigin {
    /// Native `tenant.user`; Kubernetes `metadata.labels["fairway.dev/user"]` or
    /// `metadata.annotations["fairway.dev/user"]`.
    pub user: Option<String>,
    /// Native `tenant.project`; Kubernetes `metadata.namespace`.
    pub project: Option<String>,
}

impl Origin {
    /// The input path of `field`; its native-format path when the document was built by hand.
    pub fn path(&self, field: Field) -> String {
        self.paths.get(&field).cloned().unwrap_or_else(|| field.native_path().to_owned())
    }

    pub(crate) fn error(&self, field: Field, reason: impl Into<String>) -> SpecError {
        SpecError::new(self.document, self.path(field), reason)
    }
}

/// A job whose priority is resolved against a registry of classes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResolvedJob {
    pub doc: JobDoc,
    pub priority: Priority,
    /// The class the priority came from; `None` for a bare value.
    pub priority_class: Option<String>,
    pub preemption_policy: PreemptionPolicy,
    /// Rule 1's protection, from its class (none for a bare value).
    pub protection: PreemptionProtection,
}

impl JobDoc {
    /// Looks up the job's priority class. Fails when the class is unknown.
    pub fn resolve(&self, classes: &PriorityClasses) -> Result<ResolvedJob, SpecError> {
        let (priority, priority_class, class_policy, protection) = match &self.priority {
            PriorityRef::Value(v) => {
                (*v, None, PreemptionPolicy::PreemptLowerPriority, PreemptionProtection::default())
            }
            by_class => {
                let c = match by_class {
                    PriorityRef::Class(name) => classes
                        .resolve(name)
                        .ok_or_else(|| self.origin.error(Field::Priority, classes.unknown_class(name)))?,
                    _ => classes.default_class(),
                };
                (c.value, Some(c.name.clone()), c.preemption_policy, c.protection)
            }
        };
        let preemption_policy = self.preemption_policy.map_or(class_policy, PreemptionPolicy::from);
        Ok(ResolvedJob { doc: self.clone(), priority, priority_class, preemption_policy, protection })
    }

    /// Resolves the priority and converts to the core's job. Seconds become milliseconds.
    pub fn to_core(&self, id: JobId, classes: &PriorityClasses, interner: &mut Interner) -> Result<JobSpec, SpecError> {
        self.resolve(classes)?.to_core(id, interner)
    }

    /// The gang's total resources, or the field whose product overflows the core's types.
    pub(crate) fn check_totals(&self) -> Result<(), (Field, String)> {
        let r = &self.resources;
        let n = self.replicas;
        let too_large = |what: &str| format!("{what} per replica × {n} replicas is too large");
        r.gpus.checked_mul(n).ok_or_else(|| (Field::Gpus, too_large("gpus")))?;
        r.cpu_millis.checked_mul(u64::from(n)).ok_or_else(|| (Field::Cpu, too_large("cpu")))?;
        r.memory_mib.checked_mul(u64::from(n)).ok_or_else(|| (Field::Memory, too_large("memory")))?;
        Ok(())
    }
}

impl ResolvedJob {
    /// The core's job. Fails only when the interner's id space is full or when a
    /// hand-built document's gang is too large for the core's integer types.
    pub fn to_core(&self, id: JobId, interner: &mut Interner) -> Result<JobSpec, SpecError> {
        let doc = &self.doc;
        doc.check_totals().map_err(|(field, reason)| doc.origin.error(field, reason))?;
        if doc.replicas == 0 || doc.resources.gpus == 0 {
            let field = if doc.replicas == 0 { Field::Replicas } else { Field::Gpus };
            return Err(doc.origin.error(field, "must be at least 1"));
        }
        let user = interner
            .account_of(AccountKind::User, &doc.user)
            .map_err(|e| doc.origin.error(Field::Name, e.to_string()))?;
        let project = interner
            .account_of(AccountKind::Project, &doc.project)
            .map_err(|e| doc.origin.error(Field::Name, e.to_string()))?;
        let gpu_model = match &doc.resources.gpu_model {
            Some(model) => {
                Some(interner.gpu_model(model).map_err(|e| doc.origin.error(Field::GpuModel, e.to_string()))?)
            }
            None => None,
        };
        Ok(JobSpec {
            id,
            user,
            project,
            priority: self.priority,
            preemption_policy: self.preemption_policy,
            preemptible: doc.preemptible,
            per_replica: Resources::new(doc.resources.gpus, doc.resources.cpu_millis, doc.resources.memory_mib),
            gpu_model,
            replicas: doc.replicas,
            grace_ms: secs_to_ms(doc.preemption_grace_seconds),
            max_runtime_ms: doc.max_runtime_seconds.map(secs_to_ms),
            max_total_runtime_ms: doc.max_total_runtime_seconds.map(secs_to_ms),
            min_run_before_preemption_ms: secs_to_ms(self.protection.min_run_seconds),
            preemptions_per_hour_max: self.protection.preemptions_per_hour_max,
            overrides_protection: self.protection.overrides_protection,
            checkpoint_interval_ms: doc.checkpoint_interval_seconds.map(secs_to_ms),
        })
    }
}

/// Parsing bounds every duration far below overflow; saturating only guards hand-built docs.
fn secs_to_ms(secs: u64) -> u64 {
    secs.saturating_mul(1000)
}

/// The native format, as serialized. Field order and omissions follow the user reference.
#[derive(Serialize)]
struct NativeOut<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "TenantOut::is_empty")]
    tenant: TenantOut<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    priority: Option<&'a PriorityRef>,
    resources: &'a ResourcesDoc,
    replicas: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    image: Option<&'a str>,
    // The fields added for the server are omitted at their defaults, so that jobs that do
    // not use them serialize exactly as before.
    #[serde(skip_serializing_if = "is_false")]
    image_optional: bool,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    command: &'a [String],
    #[serde(skip_serializing_if = "is_false")]
    shell: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    working_dir: Option<&'a str>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    env: &'a BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_runtime_seconds: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_total_runtime_seconds: Option<u64>,
    #[serde(skip_serializing_if = "is_zero")]
    retries: u32,
    preemptible: bool,
    preemption_grace_seconds: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    checkpoint_interval_seconds: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    preemption_policy: Option<PreemptionPolicyDoc>,
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// Empty parts are left out: a job read without its tenant (the server fills it in) then
/// serializes to a document that reads back the same.
#[derive(Serialize)]
struct TenantOut<'a> {
    #[serde(skip_serializing_if = "str::is_empty")]
    user: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    project: &'a str,
}

impl TenantOut<'_> {
    fn is_empty(&self) -> bool {
        self.user.is_empty() && self.project.is_empty()
    }
}

impl Serialize for JobDoc {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        NativeOut {
            name: &self.name,
            tenant: TenantOut { user: &self.user, project: &self.project },
            priority: match &self.priority {
                PriorityRef::Default => None,
                other => Some(other),
            },
            resources: &self.resources,
            replicas: self.replicas,
            image: self.image.as_deref(),
            image_optional: self.image_optional,
            command: &self.command,
            shell: self.shell,
            working_dir: self.working_dir.as_deref(),
            env: &self.env,
            max_runtime_seconds: self.max_runtime_seconds,
            max_total_runtime_seconds: self.max_total_runtime_seconds,
            retries: self.retries,
            preemptible: self.preemptible,
            preemption_grace_seconds: self.preemption_grace_seconds,
            checkpoint_interval_seconds: self.checkpoint_interval_seconds,
            preemption_policy: self.preemption_policy,
        }
        .serialize(serializer)
    }
}

/// Reads the native format with all of [`crate::parse_native_job`]'s checks. Paths in the
/// error are relative to the job; use `parse_native_job` directly for exact paths.
impl<'de> Deserialize<'de> for JobDoc {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let strict = crate::value::StrictValue::deserialize(deserializer)?;
        let value = strict.into_value(0, "").map_err(serde::de::Error::custom)?;
        crate::native::parse_native_job(&value, 0, "").map_err(|e: SpecErrors| serde::de::Error::custom(e))
    }
}
