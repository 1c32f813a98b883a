//! What fairway reads, as plain data: a job and a priority class as written (validated
//! field by field, not yet tied to a registry or a cluster), where each field came from, and
//! how they serialize. Above the leaves (`value`, `path`, `error`, `envelope`) and below
//! the format parsers (`native`, `kube`, `priority`), the document reader and the
//! resolution (`job`): each of those imports this, and this imports none of them.

use std::collections::BTreeMap;

use fairway_core::{PreemptionPolicy, Priority};
use serde::{Deserialize, Serialize};

use crate::error::SpecError;

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
    /// A priority class, resolved against a [`crate::PriorityClasses`] registry.
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
    /// At least 1 (1 for a share of one GPU).
    pub gpus: u32,
    /// A share of one GPU, in thousandths (1 to 999): the replica runs beside other shares
    /// on the one GPU `gpus` then counts. `None`: whole GPUs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_milli: Option<u32>,
    /// `None`: any model.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_model: Option<String>,
    pub cpu_millis: u64,
    pub memory_mib: u64,
}

impl ResourcesDoc {
    /// The core's resources of one replica: whole GPUs, or a share of one GPU.
    pub fn per_replica(&self) -> fairway_core::Resources {
        let r = fairway_core::Resources::new(self.gpus, self.cpu_millis, self.memory_mib);
        match self.gpu_milli {
            Some(milli) => fairway_core::Resources::share(milli, r.cpu_millis, r.memory_mib),
            None => r,
        }
    }
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
    GpuMilli,
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
            Field::GpuMilli => "resources.gpu_milli",
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

/// `preemptionPolicy` as written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum PreemptionPolicyDoc {
    #[default]
    PreemptLowerPriority,
    Never,
}

impl From<PreemptionPolicyDoc> for PreemptionPolicy {
    fn from(p: PreemptionPolicyDoc) -> PreemptionPolicy {
        match p {
            PreemptionPolicyDoc::PreemptLowerPriority => PreemptionPolicy::PreemptLowerPriority,
            PreemptionPolicyDoc::Never => PreemptionPolicy::Never,
        }
    }
}

impl From<PreemptionPolicy> for PreemptionPolicyDoc {
    fn from(p: PreemptionPolicy) -> PreemptionPolicyDoc {
        match p {
            PreemptionPolicy::PreemptLowerPriority => PreemptionPolicyDoc::PreemptLowerPriority,
            PreemptionPolicy::Never => PreemptionPolicyDoc::Never,
        }
    }
}

/// Rule 1 of the preemption order, per class: how long a run of the class is safe from
/// preemption once started, how often one job of the class may be preempted in any hour,
/// and, on the preemptor's side, how long a job of the class waits for free GPUs before it
/// preempts. Jobs keep the protection of the class they were accepted with.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PreemptionProtection {
    /// A run younger than this is not a victim (0: no minimum).
    pub min_run_seconds: u64,
    /// A job chosen as a victim this many times in the last hour is not a victim again
    /// until the oldest of those is an hour old (`None`: no cap).
    pub preemptions_per_hour_max: Option<u32>,
    /// Jobs of this class may preempt runs that rule 1 protects (work that must start now;
    /// the built-in `critical` does).
    #[serde(default)]
    pub overrides_protection: bool,
    /// A job of the class preempts only once it has waited this long since it entered the
    /// queue (its submit, or its requeue after being preempted) (0: at once).
    #[serde(default)]
    pub preemption_delay_seconds: u64,
}

/// Longest `minRunBeforePreemptionSeconds`: a week. Longer is a class that should not be
/// preemptible at all (`preemptible: false` on its jobs).
pub const MIN_RUN_SECONDS_MAX: u64 = 7 * 24 * 3600;
/// Longest `preemptionDelaySeconds`: a day. Longer is a class that should not preempt at
/// all (`preemptionPolicy: Never`).
pub const PREEMPTION_DELAY_SECONDS_MAX: u64 = 24 * 3600;
/// Highest `preemptionsPerHourMax` (one a second).
pub const PREEMPTIONS_PER_HOUR_MAX: u64 = 3600;

impl PreemptionProtection {
    /// No minimum run, no cap, no override.
    pub fn is_none(&self) -> bool {
        *self == PreemptionProtection::default()
    }

    /// Only the override: what the built-in `critical` class has.
    pub fn overriding() -> PreemptionProtection {
        PreemptionProtection { overrides_protection: true, ..PreemptionProtection::default() }
    }

    /// The same bounds as the parsers, for protections given field by field (a driver's
    /// own config); the `Err` names the field (compact spelling) and the reason.
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        if self.min_run_seconds > MIN_RUN_SECONDS_MAX {
            let reason = format!("must be at most {MIN_RUN_SECONDS_MAX} (a week), got {}", self.min_run_seconds);
            return Err(("minRunBeforePreemptionSeconds", reason));
        }
        if self.preemption_delay_seconds > PREEMPTION_DELAY_SECONDS_MAX {
            return Err((
                "preemptionDelaySeconds",
                format!("{PREEMPTION_DELAY_EXPECTATION}, got {}", self.preemption_delay_seconds),
            ));
        }
        match self.preemptions_per_hour_max {
            Some(n) if n == 0 || u64::from(n) > PREEMPTIONS_PER_HOUR_MAX => {
                Err(("preemptionsPerHourMax", format!("{}, got {n}", PER_HOUR_EXPECTATION)))
            }
            _ => Ok(()),
        }
    }
}

pub(crate) const PER_HOUR_EXPECTATION: &str =
    "must be from 1 to 3600 (jobs that may never be preempted set preemptible: false)";
pub(crate) const MIN_RUN_EXPECTATION: &str = "must be a whole number of seconds from 0 to 604800 (a week)";
pub(crate) const PREEMPTION_DELAY_EXPECTATION: &str = "must be a whole number of seconds from 0 to 86400 (a day; a class that should never preempt sets preemptionPolicy: Never)";

/// A priority class as found in the input, validated but not yet registered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PriorityClassDoc {
    pub name: String,
    pub value: Priority,
    pub global_default: bool,
    pub preemption_policy: PreemptionPolicyDoc,
    pub protection: PreemptionProtection,
    pub description: Option<String>,
    pub origin: Origin,
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

/// The compact form, as serialized.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct CompactOut<'a> {
    name: &'a str,
    value: Priority,
    global_default: bool,
    preemption_policy: PreemptionPolicyDoc,
    #[serde(skip_serializing_if = "is_zero_u64")]
    min_run_before_preemption_seconds: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    preemptions_per_hour_max: Option<u32>,
    #[serde(skip_serializing_if = "is_false")]
    overrides_protection: bool,
    #[serde(skip_serializing_if = "is_zero_u64")]
    preemption_delay_seconds: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<&'a str>,
}

fn is_zero_u64(n: &u64) -> bool {
    *n == 0
}

impl Serialize for PriorityClassDoc {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        CompactOut {
            name: &self.name,
            value: self.value,
            global_default: self.global_default,
            preemption_policy: self.preemption_policy,
            min_run_before_preemption_seconds: self.protection.min_run_seconds,
            preemptions_per_hour_max: self.protection.preemptions_per_hour_max,
            overrides_protection: self.protection.overrides_protection,
            preemption_delay_seconds: self.protection.preemption_delay_seconds,
            description: self.description.as_deref(),
        }
        .serialize(serializer)
    }
}
