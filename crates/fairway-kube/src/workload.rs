//! The workloads Fairway schedules, behind one adapter: `batch/v1 Job` and Kubeflow's
//! `kubeflow.org/v1 PaddleJob`. A kind is a few functions: read the object into a
//! [`Workload`] (with its spec shaped as a `batch/v1` Job, so that the job-spec reader of
//! `fairway-spec` validates it exactly as the standalone server does), and say where its
//! `suspend` flag lives. A further kind is another such adapter.

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::Job;
use kube::api::{ApiResource, DynamicObject};
use serde_json::{Value, json};

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
/// The label of the explicit opt-in (without the webhook).
pub const QUEUE_LABEL: &str = "fairway.dev/queue";

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

    /// Who it was preempted for, until when its pods may stop, and where the preemptor's
    /// GPUs are held, if it was preempted.
    pub fn preemption(&self) -> Option<Preemption> {
        let by = self.annotations.get(PREEMPTED_BY)?.clone();
        let deadline_ms = self.annotations.get(PREEMPTION_DEADLINE)?.parse().ok()?;
        // Older records have no hold: the preemptor then simply queues after a restart.
        let hold = self.annotations.get(PREEMPTION_HOLD).and_then(|h| serde_json::from_str(h).ok()).unwrap_or_default();
        Some(Preemption { by, deadline_ms, hold })
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
        clean_for_reader(&mut as_job);
        Some(Workload {
            kind: Kind::Job,
            namespace: meta.namespace.clone().unwrap_or_default(),
            name: meta.name.clone()?,
            uid: meta.uid.clone()?,
            created_ms: created_ms(meta),
            suspended: spec.suspend.unwrap_or(false),
            finished,
            scheduler_name: spec.template.spec.as_ref().and_then(|s| s.scheduler_name.clone()),
            queue_label: meta.labels.as_ref().is_some_and(|l| l.contains_key(QUEUE_LABEL)),
            annotations: meta.annotations.clone().unwrap_or_default(),
            as_job,
        })
    }

    /// A PaddleJob as a Job: its replica specs are one gang (`parallelism` = all replicas);
    /// the pod template is the worker's (or the first), with per-replica resources the
    /// largest of any replica spec, since the core gives all replicas of a gang one shape.
    pub fn from_paddle(object: &DynamicObject) -> Option<Workload> {
        let meta = &object.metadata;
        let spec = object.data.get("spec")?;
        let replica_specs = spec.get("paddleReplicaSpecs")?.as_object()?;
        let mut replicas = 0u64;
        let mut template: Option<Value> = None;
        let mut largest: BTreeMap<String, Quantity> = BTreeMap::new();
        for (role, rs) in replica_specs {
            replicas += rs.get("replicas").and_then(Value::as_u64).unwrap_or(1);
            let Some(t) = rs.get("template") else { continue };
            if template.is_none() || role == "Worker" {
                template = Some(t.clone());
            }
            for container in t.pointer("/spec/containers").and_then(Value::as_array).into_iter().flatten() {
                for (key, value) in
                    container.pointer("/resources/limits").and_then(Value::as_object).into_iter().flatten()
                {
                    let q = Quantity::of(key, value.as_str().map(str::to_owned).unwrap_or_else(|| value.to_string()));
                    let entry = largest.entry(key.clone()).or_insert_with(|| q.clone());
                    if q.amount > entry.amount {
                        *entry = q;
                    }
                }
            }
        }
        let mut template = template?;
        if let Some(containers) = template.pointer_mut("/spec/containers").and_then(Value::as_array_mut)
            && let Some(first) = containers.first_mut()
        {
            let limits: serde_json::Map<String, Value> =
                largest.into_iter().map(|(k, q)| (k, Value::String(q.text))).collect();
            first["resources"] = json!({"limits": limits});
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
            namespace: meta.namespace.clone().unwrap_or_default(),
            name: meta.name.clone()?,
            uid: meta.uid.clone()?,
            created_ms: created_ms(meta),
            suspended: spec.pointer("/runPolicy/suspend").and_then(Value::as_bool).unwrap_or(false),
            finished,
            scheduler_name,
            queue_label: meta.labels.as_ref().is_some_and(|l| l.contains_key(QUEUE_LABEL)),
            annotations: meta.annotations.clone().unwrap_or_default(),
            as_job,
        })
    }
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

/// A preemption as recorded on its victim.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Preemption {
    /// The preemptor, `namespace/name`.
    pub by: String,
    /// Unix ms: when the victim's pods are past their grace period.
    pub deadline_ms: u64,
    /// The nodes of the preemptor's replicas, one per replica.
    pub hold: Vec<String>,
}

/// The admission annotation's content.
#[derive(serde::Serialize, serde::Deserialize)]
pub struct Admission {
    pub nodes: Vec<String>,
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
            // Ours and the API server's own (kubectl's last-applied configuration).
            annotations.retain(|k, _| {
                !k.starts_with("fairway.dev/admission")
                    && !k.starts_with("fairway.dev/preempt")
                    && !k.starts_with("kubectl.kubernetes.io/")
            });
        }
        if let Some(labels) = meta.get_mut("labels").and_then(Value::as_object_mut) {
            labels.retain(|k, _| k != QUEUE_LABEL);
        }
    }
}
