//! The workloads Fairway schedules, behind one adapter: `batch/v1 Job` and Kubeflow's
//! `kubeflow.org/v1 PaddleJob`. A kind is a few functions: read the object into a
//! [`Workload`] (with its spec shaped as a `batch/v1` Job, so that the job-spec reader of
//! `fairway-spec` validates it exactly as the standalone server does), and say where its
//! `suspend` flag lives. A further kind is another such adapter.

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{ApiResource, DynamicObject};
use serde_json::{Value, json};

use crate::settings::Settings;

/// The annotation that records an admission: the nodes of its replicas, in order. Kept
/// until the workload's pods are gone, so that a restarted controller knows where it runs.
pub const ADMISSION: &str = "fairway.dev/admission";
/// Set with `suspend: true` when Fairway preempts a workload: for whom, and until when its
/// pods may take to stop (Unix ms), so that a restart keeps both.
pub const PREEMPTED_BY: &str = "fairway.dev/preempted-by";
pub const PREEMPTION_DEADLINE: &str = "fairway.dev/preemption-deadline";
/// Also set then: the nodes of the preemptor's replicas (JSON list), where the GPUs it
/// waits for are held for it, so that a restarted controller holds them still.
pub const PREEMPTION_HOLD: &str = "fairway.dev/preemption-hold";
/// Also set then, and kept after: when it was preempted in the last hour (Unix ms,
/// comma-separated, oldest first), so that a restarted controller still applies its
/// class's cap on preemptions an hour (rule 1).
pub const PREEMPTED_AT: &str = "fairway.dev/preempted-at";
/// Set by the workload itself (or its tooling) when it saves a checkpoint: the time (Unix
/// ms, or RFC 3339), so that a preemption counts as lost only the work after it
/// (`fairway_queue_gpu_hours_lost_total`), as a checkpoint report does on the server.
pub const CHECKPOINTED_AT: &str = "fairway.dev/checkpointed-at";
/// The label of the explicit opt-in (without the webhook).
pub const QUEUE_LABEL: &str = "fairway.dev/queue";
/// On a namespace, `"true"` opts it in (the webhook's `namespaceSelector`); on a workload,
/// `"false"` opts it out.
pub const MANAGED_LABEL: &str = "fairway.dev/managed";
/// Annotation: `"true"` pauses a managed workload (it leaves the queue, or stops if it
/// runs, and keeps its place for when the annotation goes).
pub const PAUSED: &str = "fairway.dev/paused";
/// On a Namespace: its fair-share weight inside a priority (a whole number from 1 to
/// `FAIR_SHARE_WEIGHT_MAX`; 1 without it).
pub const FAIR_SHARE_WEIGHT: &str = "fairway.dev/fair-share-weight";
pub use fairway_spec::FAIR_SHARE_WEIGHT_MAX;

/// A namespace's fair-share weight from its annotation, or why the annotation is not one.
pub fn fair_share_weight(annotations: Option<&BTreeMap<String, String>>) -> Result<u32, String> {
    let Some(value) = annotations.and_then(|a| a.get(FAIR_SHARE_WEIGHT)) else { return Ok(1) };
    match value.trim().parse::<u32>() {
        Ok(w) if (1..=FAIR_SHARE_WEIGHT_MAX).contains(&w) => Ok(w),
        _ => {
            Err(format!("{FAIR_SHARE_WEIGHT}: must be a whole number from 1 to {FAIR_SHARE_WEIGHT_MAX}, got {value:?}"))
        }
    }
}

/// On a Namespace: the cohort its project belongs to (see `docs/cohorts.md` and
/// `docs/kubernetes.md`); with it, the nominal quota (`NOMINAL_GPUS` required,
/// `NOMINAL_CPU` and `NOMINAL_MEMORY` as Kubernetes quantities) and the GPU borrowing and
/// lending limits.
pub const COHORT: &str = "fairway.dev/cohort";
pub const NOMINAL_GPUS: &str = "fairway.dev/nominal-gpus";
pub const NOMINAL_CPU: &str = "fairway.dev/nominal-cpu";
pub const NOMINAL_MEMORY: &str = "fairway.dev/nominal-memory";
pub const BORROWING_LIMIT_GPUS: &str = "fairway.dev/borrowing-limit-gpus";
pub const LENDING_LIMIT_GPUS: &str = "fairway.dev/lending-limit-gpus";

/// The cohort a namespace's annotation names, as written (empty: none), even where its
/// other annotations cannot be read: to list it there, with why it is not in.
pub fn cohort_named(annotations: Option<&BTreeMap<String, String>>) -> Option<String> {
    let cohort = annotations?.get(COHORT)?.trim();
    (!cohort.is_empty()).then(|| cohort.to_owned())
}

/// A namespace's place in a cohort from its annotations (`None` without `COHORT`), or why
/// the annotations are not one. Whether the cohort's members agree is checked with all of
/// them (`fairway_spec::resolve_cohorts`).
pub fn cohort_member(
    namespace: &str,
    annotations: Option<&BTreeMap<String, String>>,
) -> Result<Option<(String, fairway_spec::MemberDoc)>, String> {
    let get = |key: &str| annotations.and_then(|a| a.get(key)).map(|v| v.trim());
    let Some(cohort) = get(COHORT) else {
        for key in [NOMINAL_GPUS, NOMINAL_CPU, NOMINAL_MEMORY, BORROWING_LIMIT_GPUS, LENDING_LIMIT_GPUS] {
            if get(key).is_some() {
                return Err(format!("{key} is set without {COHORT}"));
            }
        }
        return Ok(None);
    };
    if cohort.is_empty() {
        return Err(format!("{COHORT}: must name a cohort"));
    }
    // The rule every driver applies to cohort names, said with the annotation's key.
    fairway_spec::check_account_name(cohort).map_err(|reason| format!("{COHORT}: {reason}"))?;
    let gpus = |key: &str| -> Result<Option<u32>, String> {
        get(key)
            .map(|v| v.parse::<u32>().map_err(|_| format!("{key}: must be a whole number of GPUs, got {v:?}")))
            .transpose()
    };
    let quantity = |key: &str, parse: fn(&str) -> Result<u64, fairway_spec::quantity::QuantityError>| {
        get(key).map(|v| parse(v).map_err(|e| format!("{key}: {e}"))).transpose()
    };
    let nominal = fairway_spec::LimitsDoc {
        gpus: Some(gpus(NOMINAL_GPUS)?.ok_or_else(|| format!("{NOMINAL_GPUS}: required with {COHORT}"))?),
        cpu_millis: quantity(NOMINAL_CPU, fairway_spec::quantity::cpu_millis)?,
        memory_mib: quantity(NOMINAL_MEMORY, fairway_spec::quantity::memory_mib)?,
    };
    let gpus_only = |g: Option<u32>| g.map(|g| fairway_spec::LimitsDoc { gpus: Some(g), ..Default::default() });
    let member = fairway_spec::MemberDoc {
        project: namespace.to_owned(),
        nominal,
        borrowing_limit: gpus_only(gpus(BORROWING_LIMIT_GPUS)?),
        lending_limit: gpus_only(gpus(LENDING_LIMIT_GPUS)?),
    };
    Ok(Some((cohort.to_owned(), member)))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    Job,
    PaddleJob,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Job => "Job",
            Kind::PaddleJob => "PaddleJob",
        }
    }

    pub fn api_version(self) -> &'static str {
        match self {
            Kind::Job => "batch/v1",
            Kind::PaddleJob => "kubeflow.org/v1",
        }
    }

    /// A merge patch that sets the workload's `suspend` flag.
    pub fn suspend_patch(self, suspend: bool) -> Value {
        match self {
            Kind::Job => json!({"spec": {"suspend": suspend}}),
            Kind::PaddleJob => json!({"spec": {"runPolicy": {"suspend": suspend}}}),
        }
    }
}

/// The PaddleJob custom resource.
pub fn paddle_resource() -> ApiResource {
    ApiResource {
        group: "kubeflow.org".into(),
        version: "v1".into(),
        api_version: "kubeflow.org/v1".into(),
        kind: "PaddleJob".into(),
        plural: "paddlejobs".into(),
    }
}

/// How a workload ended, from its conditions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Finished {
    Succeeded,
    Failed,
}

/// A workload as the engine sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct Workload {
    pub kind: Kind,
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// `metadata.creationTimestamp` in Unix ms: its place in the queue.
    pub created_ms: u64,
    pub suspended: bool,
    pub finished: Option<Finished>,
    /// Every pod template names this scheduler.
    pub scheduler_name: Option<String>,
    /// Has the explicit opt-in label.
    pub queue_label: bool,
    /// Labelled `fairway.dev/managed: "false"`: the webhook leaves it alone.
    pub opted_out: bool,
    /// Its `FairwayAdmitted` condition as last written (by any leader), so that a new
    /// leader does not say it again.
    pub admitted_condition: Option<AdmittedCondition>,
    pub annotations: BTreeMap<String, String>,
    /// The spec as a `batch/v1` Job document, for `fairway-spec`.
    pub as_job: Value,
}

impl Workload {
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// The nodes of its replicas, if Fairway admitted it.
    pub fn admission(&self) -> Option<Vec<String>> {
        serde_json::from_str::<Admission>(self.annotations.get(ADMISSION)?).ok().map(|a| a.nodes)
    }

    /// Paused by its owner (the [`PAUSED`] annotation).
    pub fn paused(&self) -> bool {
        self.annotations.get(PAUSED).is_some_and(|v| v == "true")
    }

    /// When Fairway admitted it, if recorded.
    pub fn admitted_at_ms(&self) -> Option<u64> {
        serde_json::from_str::<Admission>(self.annotations.get(ADMISSION)?).ok()?.at_ms
    }

    /// When it last saved a checkpoint, as it says ([`CHECKPOINTED_AT`]); `None` if unset or
    /// unreadable.
    pub fn checkpointed_at_ms(&self) -> Option<u64> {
        let text = self.annotations.get(CHECKPOINTED_AT)?.trim();
        if let Ok(ms) = text.parse::<u64>() {
            return Some(ms);
        }
        let at: jiff::Timestamp = text.parse().ok()?;
        u64::try_from(at.as_millisecond()).ok()
    }

    /// When it was preempted in the last hour, as recorded ([`PREEMPTED_AT`]); unreadable
    /// entries are skipped.
    pub fn preempted_at_ms(&self) -> Vec<u64> {
        let Some(text) = self.annotations.get(PREEMPTED_AT) else { return Vec::new() };
        text.split(',').filter_map(|t| t.trim().parse().ok()).collect()
    }

    /// Who it was preempted for, until when its pods may stop, and where the preemptor's
    /// GPUs are held, if it was preempted.
    pub fn preemption(&self) -> Option<Preemption> {
        let by = self.annotations.get(PREEMPTED_BY)?.clone();
        let deadline_ms = self.annotations.get(PREEMPTION_DEADLINE)?.parse().ok()?;
        // Older records have no hold: the preemptor then simply queues after a restart.
        let hold = self.annotations.get(PREEMPTION_HOLD).and_then(|h| serde_json::from_str(h).ok()).unwrap_or_default();
        Some(Preemption { by, deadline_ms, hold, history: self.preempted_at_ms() })
    }

    pub fn from_job(job: &Job) -> Option<Workload> {
        let meta = &job.metadata;
        let spec = job.spec.as_ref()?;
        let conditions = job.status.as_ref().and_then(|s| s.conditions.as_ref());
        let finished = conditions.and_then(|c| {
            c.iter().filter(|c| c.status == "True").find_map(|c| match c.type_.as_str() {
                "Complete" => Some(Finished::Succeeded),
                "Failed" => Some(Finished::Failed),
                _ => None,
            })
        });
        let mut as_job = serde_json::to_value(job).ok()?;
        let admitted_condition = AdmittedCondition::from_status(&as_job);
        clean_for_reader(&mut as_job);
        Some(Workload {
            kind: Kind::Job,
            admitted_condition,
            namespace: meta.namespace.clone().unwrap_or_default(),
            name: meta.name.clone()?,
            uid: meta.uid.clone()?,
            created_ms: created_ms(meta),
            suspended: spec.suspend.unwrap_or(false),
            finished,
            scheduler_name: spec.template.spec.as_ref().and_then(|s| s.scheduler_name.clone()),
            queue_label: meta.labels.as_ref().is_some_and(|l| l.contains_key(QUEUE_LABEL)),
            opted_out: opted_out(meta),
            annotations: meta.annotations.clone().unwrap_or_default(),
            as_job,
        })
    }

    /// A PaddleJob as a Job: its replica specs are one gang (`parallelism` = all replicas);
    /// the pod template is the worker's (or the first), with per-replica resources the
    /// largest of any replica spec (limits and requests), since the core gives all replicas
    /// of a gang one shape.
    pub fn from_paddle(object: &DynamicObject) -> Option<Workload> {
        let meta = &object.metadata;
        let spec = object.data.get("spec")?;
        let replica_specs = spec.get("paddleReplicaSpecs")?.as_object()?;
        let mut replicas = 0u64;
        let mut template: Option<Value> = None;
        let mut largest = LargestResources::default();
        for (role, rs) in replica_specs {
            replicas += rs.get("replicas").and_then(Value::as_u64).unwrap_or(1);
            let Some(t) = rs.get("template") else { continue };
            if template.is_none() || role == "Worker" {
                template = Some(t.clone());
            }
            largest.add_pod(t);
        }
        let mut template = template?;
        if let Some(containers) = template.pointer_mut("/spec/containers").and_then(Value::as_array_mut)
            && let Some(first) = containers.first_mut()
        {
            first["resources"] = largest.into_resources();
            containers.truncate(1);
        }
        let scheduler_name = template.pointer("/spec/schedulerName").and_then(Value::as_str).map(str::to_owned);
        let conditions = object.data.pointer("/status/conditions").and_then(Value::as_array);
        let finished = conditions.and_then(|c| {
            c.iter().filter(|c| c["status"] == "True").find_map(|c| match c["type"].as_str() {
                Some("Succeeded") => Some(Finished::Succeeded),
                Some("Failed") => Some(Finished::Failed),
                _ => None,
            })
        });
        let mut job_meta = serde_json::to_value(meta).ok()?;
        if let Some(m) = job_meta.as_object_mut() {
            m.retain(|k, _| matches!(k.as_str(), "name" | "namespace" | "labels" | "annotations"));
        }
        let as_job = json!({
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": job_meta,
            "spec": {"parallelism": replicas, "template": template},
        });
        let mut as_job = as_job;
        clean_for_reader(&mut as_job);
        Some(Workload {
            kind: Kind::PaddleJob,
            admitted_condition: AdmittedCondition::from_status(&object.data),
            namespace: meta.namespace.clone().unwrap_or_default(),
            name: meta.name.clone()?,
            uid: meta.uid.clone()?,
            created_ms: created_ms(meta),
            suspended: spec.pointer("/runPolicy/suspend").and_then(Value::as_bool).unwrap_or(false),
            finished,
            scheduler_name,
            queue_label: meta.labels.as_ref().is_some_and(|l| l.contains_key(QUEUE_LABEL)),
            opted_out: opted_out(meta),
            annotations: meta.annotations.clone().unwrap_or_default(),
            as_job,
        })
    }
}

/// The `FairwayAdmitted` condition of a workload's status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdmittedCondition {
    pub admitted: bool,
    pub reason: String,
    pub message: String,
}

impl AdmittedCondition {
    pub const TYPE: &str = "FairwayAdmitted";

    fn from_status(object: &Value) -> Option<AdmittedCondition> {
        let conditions = object.pointer("/status/conditions")?.as_array()?;
        let c = conditions.iter().find(|c| c["type"] == AdmittedCondition::TYPE)?;
        Some(AdmittedCondition {
            admitted: c["status"] == "True",
            reason: c["reason"].as_str().unwrap_or_default().to_owned(),
            message: c["message"].as_str().unwrap_or_default().to_owned(),
        })
    }
}

/// Extended resources and pod annotations by which device plugins and schedulers that share
/// GPUs ask for part of one: a Job naming one is refused while `gpu_share` is off, rather
/// than given a whole GPU it did not ask for or none at all.
pub const GPU_SHARE_HINTS: &[&str] = &[
    "nvidia.com/gpucores",
    "nvidia.com/gpumem",
    "nvidia.com/gpumem-percentage",
    "volcano.sh/vgpu-cores",
    "volcano.sh/vgpu-memory",
    "aliyun.com/gpu-mem",
    "gpu-fraction",
    "gpu-memory",
];

/// A Job's share of one GPU in thousandths, from its pod template (`None`: whole GPUs), or
/// why it cannot have one: with `gpu_share` set, the containers' `gpu_share.resource` adds up
/// to the share (`units_per_gpu` or more: a whole GPU); it must come with one
/// `gpu_resource` and one pod. Without it, a template asking for a share by any of
/// [`GPU_SHARE_HINTS`] is refused.
pub fn gpu_share_of(as_job: &Value, replicas: u32, settings: &Settings) -> Result<Option<u32>, String> {
    let template = as_job.pointer("/spec/template").unwrap_or(&Value::Null);
    let containers: Vec<&Value> =
        template.pointer("/spec/containers").and_then(Value::as_array).into_iter().flatten().collect();
    let asked = |key: &str| -> u128 {
        containers
            .iter()
            .map(|c| {
                let of = |map: &str| c.pointer(&format!("/resources/{map}")).and_then(|m| m.get(key)).cloned();
                of("requests").or_else(|| of("limits")).map_or(0, |v| {
                    let text = v.as_str().map(str::to_owned).unwrap_or_else(|| v.to_string());
                    Quantity::of(key, text).amount
                })
            })
            .sum()
    };
    let annotations = template.pointer("/metadata/annotations").and_then(Value::as_object);
    let hint = GPU_SHARE_HINTS
        .iter()
        .find(|h| asked(h) > 0 || annotations.is_some_and(|a| a.contains_key(**h)))
        .filter(|h| settings.gpu_share.as_ref().is_none_or(|s| s.resource != **h));
    let Some(share) = &settings.gpu_share else {
        return match hint {
            Some(h) => Err(format!(
                "asks for a share of one GPU by {h}, and this controller shares no GPU: set gpu_share in its settings \
                 to the extended resource your device plugin shares GPUs by, or ask for whole {}",
                settings.gpu_resource
            )),
            None => Ok(None),
        };
    };
    if let Some(h) = hint {
        return Err(format!("asks for a share of one GPU by {h}; this cluster reads shares from {}", share.resource));
    }
    let units = asked(&share.resource);
    if units == 0 || units >= u128::from(share.units_per_gpu) {
        return Ok(None);
    }
    let gpus = asked(&settings.gpu_resource);
    if gpus != 1 {
        return Err(format!(
            "{}: a share of one GPU comes with {} 1, got {gpus}",
            share.resource, settings.gpu_resource
        ));
    }
    if replicas != 1 {
        return Err(format!("{}: a share of one GPU is for one-pod Jobs; a gang takes whole GPUs", share.resource));
    }
    let milli = (units * 1000 / u128::from(share.units_per_gpu)).max(1);
    Ok(Some(milli as u32))
}

fn opted_out(meta: &ObjectMeta) -> bool {
    meta.labels.as_ref().and_then(|l| l.get(MANAGED_LABEL)).map(String::as_str) == Some("false")
}

/// A resource limit and how large it is, to keep the largest of several replica specs.
#[derive(Clone, Debug)]
struct Quantity {
    text: String,
    amount: u128,
}

impl Quantity {
    fn of(key: &str, text: String) -> Quantity {
        let amount = match key {
            "cpu" => fairway_spec::quantity::cpu_millis(&text).map(u128::from).unwrap_or(0),
            "memory" => fairway_spec::quantity::memory_mib(&text).map(u128::from).unwrap_or(0),
            _ => fairway_spec::quantity::whole_count(&text).map(u128::from).unwrap_or(0),
        };
        Quantity { text, amount }
    }
}

/// The largest `resources.limits` and `resources.requests` per resource over the containers
/// of several pod templates, each map on its own: the one shape of a gang's replicas.
#[derive(Default)]
struct LargestResources {
    limits: BTreeMap<String, Quantity>,
    requests: BTreeMap<String, Quantity>,
}

impl LargestResources {
    fn add_pod(&mut self, template: &Value) {
        for container in template.pointer("/spec/containers").and_then(Value::as_array).into_iter().flatten() {
            let limits = amounts(container.pointer("/resources/limits"));
            let mut requests = amounts(container.pointer("/resources/requests"));
            // As in Kubernetes, a limit alone stands for the request: a Master asking one GPU
            // by requests and limits and a Worker asking two by limits fold to two of each.
            for (key, limit) in &limits {
                requests.entry(key.clone()).or_insert_with(|| limit.clone());
            }
            keep_largest(&mut self.limits, limits);
            keep_largest(&mut self.requests, requests);
        }
    }

    /// The folded container's `resources`. A limit below the largest request (another
    /// container's, with no limit or a larger one) is raised to it: Kubernetes refuses a
    /// request above its limit.
    fn into_resources(self) -> Value {
        let LargestResources { mut limits, requests } = self;
        for (key, limit) in &mut limits {
            if let Some(request) = requests.get(key).filter(|r| r.amount > limit.amount) {
                *limit = request.clone();
            }
        }
        let texts = |map: BTreeMap<String, Quantity>| -> serde_json::Map<String, Value> {
            map.into_iter().map(|(key, q)| (key, Value::String(q.text))).collect()
        };
        json!({"limits": texts(limits), "requests": texts(requests)})
    }
}

/// A `limits` or `requests` map, read.
fn amounts(map: Option<&Value>) -> BTreeMap<String, Quantity> {
    let entries = map.and_then(Value::as_object).into_iter().flatten();
    entries
        .map(|(key, value)| {
            let text = value.as_str().map(str::to_owned).unwrap_or_else(|| value.to_string());
            (key.clone(), Quantity::of(key, text))
        })
        .collect()
}

/// Keeps in `into` the larger amount of each resource.
fn keep_largest(into: &mut BTreeMap<String, Quantity>, from: BTreeMap<String, Quantity>) {
    for (key, q) in from {
        let kept = into.entry(key).or_insert_with(|| q.clone());
        if q.amount > kept.amount {
            *kept = q;
        }
    }
}

/// A preemption as recorded on its victim.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Preemption {
    /// The preemptor, `namespace/name`.
    pub by: String,
    /// Unix ms: when the victim's pods are past their grace period.
    pub deadline_ms: u64,
    /// The nodes of the preemptor's replicas, one per replica.
    pub hold: Vec<String>,
    /// When the victim was preempted in the last hour, this time included (Unix ms).
    pub history: Vec<u64>,
}

/// The admission annotation's content.
#[derive(serde::Serialize, serde::Deserialize)]
pub struct Admission {
    pub nodes: Vec<String>,
    /// When it was admitted, Unix ms: after a restart, how long it has run (for the
    /// least-work-lost rule). Absent in records of older versions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at_ms: Option<u64>,
}

fn created_ms(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> u64 {
    meta.creation_timestamp.as_ref().map_or(0, |t| u64::try_from(t.0.as_millisecond()).unwrap_or(0))
}

/// Drops what the API server adds and the job-spec reader does not read (status, server
/// fields of metadata), so that its warnings are about what the user wrote.
fn clean_for_reader(job: &mut Value) {
    if let Some(obj) = job.as_object_mut() {
        obj.remove("status");
    }
    if let Some(meta) = job.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.retain(|k, _| matches!(k.as_str(), "name" | "namespace" | "labels" | "annotations"));
        if let Some(annotations) = meta.get_mut("annotations").and_then(Value::as_object_mut) {
            // Ours, the workload's checkpoint report, and the API server's own (kubectl's
            // last-applied configuration).
            annotations.retain(|k, _| {
                !k.starts_with("fairway.dev/admission")
                    && !k.starts_with("fairway.dev/preempt")
                    && k != PAUSED
                    && k != CHECKPOINTED_AT
                    && !k.starts_with("kubectl.kubernetes.io/")
            });
        }
        if let Some(labels) = meta.get_mut("labels").and_then(Value::as_object_mut) {
            labels.retain(|k, _| k != QUEUE_LABEL && k != MANAGED_LABEL);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paddle(replica_specs: Value) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "kubeflow.org/v1",
            "kind": "PaddleJob",
            "metadata": {"name": "p", "namespace": "ads", "uid": "uid-p"},
            "spec": {"paddleReplicaSpecs": replica_specs},
        }))
        .unwrap()
    }

    fn role(replicas: u64, resources: Value) -> Value {
        json!({"replicas": replicas, "template": {"spec": {
            "containers": [{"name": "c", "image": "paddle", "resources": resources}],
        }}})
    }

    fn folded_resources(w: &Workload) -> &Value {
        let containers = w.as_job.pointer("/spec/template/spec/containers").and_then(Value::as_array).unwrap();
        assert_eq!(containers.len(), 1);
        &containers[0]["resources"]
    }

    #[test]
    fn requests_and_limits_of_every_role_are_folded() {
        let object = paddle(json!({
            "Master": role(1, json!({"requests": {"cpu": "8", "memory": "32Gi"}})),
            "Worker": role(3, json!({"limits": {"nvidia.com/gpu": "4"}, "requests": {"cpu": "2"}})),
        }));
        let w = Workload::from_paddle(&object).unwrap();
        assert_eq!(w.as_job["spec"]["parallelism"], 4);
        assert_eq!(
            *folded_resources(&w),
            json!({
                "limits": {"nvidia.com/gpu": "4"},
                "requests": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "4"},
            })
        );
        // The job-spec reader sees both: GPUs from the limits, CPU and memory from the requests.
        let bytes = serde_json::to_vec(&w.as_job).unwrap();
        let parsed = fairway_spec::parse_documents(&bytes, &fairway_spec::ParseLimits::default()).unwrap();
        let resources = &parsed.jobs[0].resources;
        assert_eq!((resources.gpus, resources.cpu_millis, resources.memory_mib), (4, 8000, 32 * 1024));
        assert_eq!(parsed.jobs[0].replicas, 4);
    }

    #[test]
    fn the_largest_of_each_map_is_kept_and_stays_valid() {
        let object = paddle(json!({
            "Master": role(1, json!({"limits": {"nvidia.com/gpu": 1, "cpu": "4"}, "requests": {"nvidia.com/gpu": 1}})),
            "Worker": role(2, json!({"limits": {"nvidia.com/gpu": "2", "memory": "1Gi"}, "requests": {"cpu": "6"}})),
        }));
        let w = Workload::from_paddle(&object).unwrap();
        // GPUs: the Worker's limit stands for its request, so both maps say 2; CPU: the
        // Master's limit of 4 is raised to the Worker's request of 6.
        assert_eq!(
            *folded_resources(&w),
            json!({
                "limits": {"nvidia.com/gpu": "2", "cpu": "6", "memory": "1Gi"},
                "requests": {"nvidia.com/gpu": "2", "cpu": "6", "memory": "1Gi"},
            })
        );
        let bytes = serde_json::to_vec(&w.as_job).unwrap();
        let parsed = fairway_spec::parse_documents(&bytes, &fairway_spec::ParseLimits::default()).unwrap();
        let resources = &parsed.jobs[0].resources;
        assert_eq!((resources.gpus, resources.cpu_millis, resources.memory_mib), (2, 6000, 1024));
    }
}
