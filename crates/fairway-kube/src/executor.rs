//! Carries out the engine's actions against the API server, as Kubernetes expects of a
//! controller: every write is idempotent (a merge patch of the state wanted, a bind that is
//! already done counts as done), a 409 is read again and retried, 429 and 5xx back off
//! exponentially, 404 means the object is gone (its watch says so too). Admissions, binds
//! and suspensions run many at a time; conditions and Events are paced and never ahead of
//! them.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Binding, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tokio::sync::{Semaphore, mpsc};

use crate::engine::{Action, Target};
use crate::workload::{
    ADMISSION, Admission, Kind, PREEMPTED_AT, PREEMPTED_BY, PREEMPTION_DEADLINE, PREEMPTION_HOLD, paddle_resource,
};

/// Tries of a condition or Event before it is given up; after as many tries an urgent
/// write is logged (and goes on).
const TRIES_MAX: u32 = 8;
/// The longest wait between two tries.
const RETRY_WAIT_MAX: Duration = Duration::from_secs(30);

/// What the executor has done, for metrics and benchmarks.
#[derive(Default)]
pub struct ExecutorStats {
    pub writes: AtomicU64,
    pub retries: AtomicU64,
    pub failures: AtomicU64,
}

#[derive(Clone)]
pub struct Executor {
    client: kube::Client,
    urgent: Arc<Semaphore>,
    /// Writes to one workload run in the order they were asked (an admission after a
    /// release must land after it); writes to different ones run side by side.
    queues: Arc<std::sync::Mutex<std::collections::HashMap<String, std::collections::VecDeque<Action>>>>,
    background: mpsc::Sender<Action>,
    pub stats: Arc<ExecutorStats>,
    manager: String,
}

impl Executor {
    /// Starts the executor on the current runtime.
    pub fn start(client: kube::Client, in_flight_max: usize, status_per_second_max: u32) -> Executor {
        let (tx, rx) = mpsc::channel(100_000);
        let executor = Executor {
            client,
            urgent: Arc::new(Semaphore::new(in_flight_max)),
            queues: Arc::default(),
            background: tx,
            stats: Arc::default(),
            manager: "fairway".into(),
        };
        tokio::spawn(executor.clone().pace_background(rx, status_per_second_max));
        executor
    }

    /// Hands out actions: urgent ones start at once (bounded in flight), background ones
    /// queue (dropped, with a log line, if the queue is full: they are said again when the
    /// reason changes).
    pub fn submit(&self, actions: Vec<Action>) {
        for action in actions {
            if action.is_background() {
                if self.background.try_send(action).is_err() {
                    tracing::debug!("status queue full: an update is dropped");
                }
                continue;
            }
            let Some(key) = ordering_key(&action) else {
                let this = self.clone();
                tokio::spawn(async move {
                    let Ok(_permit) = this.urgent.clone().acquire_owned().await else { return };
                    this.run(action).await;
                });
                continue;
            };
            let first = {
                let mut queues = self.queues.lock().expect("not poisoned");
                match queues.get_mut(&key) {
                    Some(queue) => {
                        queue.push_back(action);
                        None
                    }
                    None => {
                        queues.insert(key.clone(), std::collections::VecDeque::new());
                        Some(action)
                    }
                }
            };
            if let Some(action) = first {
                let this = self.clone();
                tokio::spawn(async move { this.drain(key, action).await });
            }
        }
    }

    /// Runs a workload's writes one after another until none is left.
    async fn drain(self, key: String, first: Action) {
        let mut next = Some(first);
        while let Some(action) = next {
            if let Ok(_permit) = self.urgent.clone().acquire_owned().await {
                self.run(action).await;
            }
            let mut queues = self.queues.lock().expect("not poisoned");
            next = queues.get_mut(&key).and_then(std::collections::VecDeque::pop_front);
            if next.is_none() {
                queues.remove(&key);
            }
        }
    }

    async fn pace_background(self, mut rx: mpsc::Receiver<Action>, per_second: u32) {
        let gap = Duration::from_secs_f64(1.0 / f64::from(per_second.max(1)));
        while let Some(action) = rx.recv().await {
            self.run(action).await;
            tokio::time::sleep(gap).await;
        }
    }

    /// Carries one action out. Admissions, binds, suspensions and releases are retried
    /// until they are done (a controller that gave up on one would leave the core and the
    /// cluster disagreeing until a restart); conditions and Events, [`TRIES_MAX`] times
    /// (they are said again when the reason changes). A write the API server refuses for
    /// good (403, 422, …) is logged and counted, never retried.
    async fn run(&self, action: Action) {
        let persistent = !action.is_background();
        let mut wait = Duration::from_millis(50);
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            self.stats.writes.fetch_add(1, Ordering::Relaxed);
            let retry_after = match self.once(&action).await {
                Ok(()) => return,
                Err(kube::Error::Api(status)) if status.code == 404 => return,
                Err(kube::Error::Api(status)) if matches!(status.code, 409 | 429 | 500..=599) => {
                    status.details.as_ref().map_or(0, |d| d.retry_after_seconds)
                }
                Err(e) if is_transport(&e) => 0,
                Err(e) => {
                    self.stats.failures.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!("{}: refused: {e}", describe(&action));
                    return;
                }
            };
            if !persistent && attempt >= TRIES_MAX {
                self.stats.failures.fetch_add(1, Ordering::Relaxed);
                tracing::debug!("{}: given up after {attempt} tries", describe(&action));
                return;
            }
            if attempt == TRIES_MAX {
                tracing::warn!("{}: still failing after {attempt} tries; retrying", describe(&action));
            }
            self.stats.retries.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(wait.max(Duration::from_secs(u64::from(retry_after)))).await;
            wait = (wait * 2).min(RETRY_WAIT_MAX);
        }
    }

    async fn once(&self, action: &Action) -> Result<(), kube::Error> {
        match action {
            Action::Admit { target, nodes, at_ms } => {
                let admission = serde_json::to_string(&Admission { nodes: nodes.clone(), at_ms: Some(*at_ms) })
                    .expect("plain data");
                let mut patch = target.kind.suspend_patch(false);
                patch["metadata"] = json!({"annotations": {
                    ADMISSION: admission, PREEMPTED_BY: null, PREEMPTION_DEADLINE: null, PREEMPTION_HOLD: null
                }});
                self.patch(target, patch).await
            }
            Action::Suspend { target, preemption } => {
                let mut patch = target.kind.suspend_patch(true);
                if let Some(p) = preemption {
                    let hold = serde_json::to_string(&p.hold).expect("plain data");
                    let history: Vec<String> = p.history.iter().map(u64::to_string).collect();
                    patch["metadata"] = json!({"annotations": {
                        PREEMPTED_BY: p.by, PREEMPTION_DEADLINE: p.deadline_ms.to_string(), PREEMPTION_HOLD: hold,
                        PREEMPTED_AT: history.join(",")
                    }});
                }
                self.patch(target, patch).await
            }
            Action::Release { target } => {
                let patch = json!({"metadata": {"annotations": {
                    ADMISSION: null, PREEMPTED_BY: null, PREEMPTION_DEADLINE: null, PREEMPTION_HOLD: null
                }}});
                self.patch(target, patch).await
            }
            Action::Bind { namespace, pod, uid, node } => self.bind(namespace, pod, uid, node).await,
            Action::Condition { target, admitted, reason, message } => {
                self.condition(target, *admitted, reason, message).await
            }
            Action::Event { target, warning, reason, message } => self.event(target, *warning, reason, message).await,
            Action::SaveRecentUsage { namespace, json } => {
                crate::recent_usage::save(&self.client, namespace, json).await
            }
        }
    }

    async fn patch(&self, target: &Target, patch: Value) -> Result<(), kube::Error> {
        let params = PatchParams::default();
        match target.kind {
            Kind::Job => {
                let api: Api<Job> = Api::namespaced(self.client.clone(), &target.namespace);
                api.patch(&target.name, &params, &Patch::Merge(&patch)).await.map(|_| ())
            }
            Kind::PaddleJob => {
                let api: Api<DynamicObject> =
                    Api::namespaced_with(self.client.clone(), &target.namespace, &paddle_resource());
                api.patch(&target.name, &params, &Patch::Merge(&patch)).await.map(|_| ())
            }
        }
    }

    async fn bind(&self, namespace: &str, pod: &str, uid: &str, node: &str) -> Result<(), kube::Error> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let binding = Binding {
            metadata: ObjectMeta {
                name: Some(pod.to_owned()),
                namespace: Some(namespace.to_owned()),
                ..ObjectMeta::default()
            },
            target: ObjectReference {
                kind: Some("Node".into()),
                api_version: Some("v1".into()),
                name: Some(node.to_owned()),
                ..ObjectReference::default()
            },
        };
        let body = serde_json::to_vec(&binding).expect("plain data");
        let request = http_post(&format!("/api/v1/namespaces/{namespace}/pods/{pod}/binding"), body);
        match self.client.request::<Value>(request).await {
            Ok(_) => Ok(()),
            // Already bound: done if to this node (a retry, or a restart). Not bound at all:
            // the conflict was something else, and the bind is tried again.
            Err(kube::Error::Api(status)) if status.code == 409 => match pods.get_opt(pod).await? {
                Some(p) if p.metadata.uid.as_deref() != Some(uid) => Ok(()),
                Some(p) => match p.spec.as_ref().and_then(|s| s.node_name.as_deref()) {
                    Some(bound) if bound == node => Ok(()),
                    Some(bound) => {
                        tracing::warn!("pod {namespace}/{pod} is bound to {bound}, not {node}");
                        Ok(())
                    }
                    None => Err(kube::Error::Api(status)),
                },
                None => Ok(()),
            },
            Err(e) => Err(e),
        }
    }

    /// The `FairwayAdmitted` condition, beside the Job controller's own.
    async fn condition(&self, target: &Target, admitted: bool, reason: &str, message: &str) -> Result<(), kube::Error> {
        let now = jiff::Timestamp::now().to_string();
        let condition = json!({
            "type": crate::workload::AdmittedCondition::TYPE,
            "status": if admitted { "True" } else { "False" },
            "reason": reason,
            "message": message,
            "lastProbeTime": now,
            "lastTransitionTime": now,
        });
        // Read, replace our condition, write back with the resourceVersion: a 409 retries.
        let path = match target.kind {
            Kind::Job => format!("/apis/batch/v1/namespaces/{}/jobs/{}/status", target.namespace, target.name),
            Kind::PaddleJob => {
                format!("/apis/kubeflow.org/v1/namespaces/{}/paddlejobs/{}/status", target.namespace, target.name)
            }
        };
        let get = http::Request::get(&path).body(Vec::new()).expect("valid request");
        let mut object: Value = self.client.request(get).await?;
        let conditions = object.pointer_mut("/status/conditions").and_then(Value::as_array_mut);
        match conditions {
            Some(list) => {
                list.retain(|c| c["type"] != crate::workload::AdmittedCondition::TYPE);
                list.push(condition);
            }
            None => {
                if object.get("status").is_none_or(Value::is_null) {
                    object["status"] = json!({});
                }
                object["status"]["conditions"] = json!([condition]);
            }
        }
        let body = serde_json::to_vec(&object).expect("plain data");
        let put =
            http::Request::put(&path).header("content-type", "application/json").body(body).expect("valid request");
        self.client.request::<Value>(put).await.map(|_| ())
    }

    async fn event(&self, target: &Target, warning: bool, reason: &str, message: &str) -> Result<(), kube::Error> {
        let now = jiff::Timestamp::now();
        let event = json!({
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": format!("{}.", target.name), "namespace": target.namespace},
            "involvedObject": {
                "apiVersion": target.kind.api_version(),
                "kind": target.kind.as_str(),
                "name": target.name,
                "namespace": target.namespace,
                "uid": target.uid,
            },
            "reason": reason,
            "message": truncate(message, 1024),
            "type": if warning { "Warning" } else { "Normal" },
            "source": {"component": self.manager},
            "reportingComponent": self.manager,
            "reportingInstance": self.manager,
            "firstTimestamp": now.to_string(),
            "lastTimestamp": now.to_string(),
            "count": 1,
        });
        let api: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(self.client.clone(), &target.namespace);
        let event: k8s_openapi::api::core::v1::Event = serde_json::from_value(event).expect("a valid Event");
        api.create(&PostParams::default(), &event).await.map(|_| ())
    }
}

/// The workload whose writes must stay in order; `None` for writes that need no order
/// (binding different pods).
fn ordering_key(action: &Action) -> Option<String> {
    match action {
        Action::Admit { target, .. } | Action::Suspend { target, .. } | Action::Release { target } => {
            Some(target.uid.clone())
        }
        _ => None,
    }
}

fn http_post(path: &str, body: Vec<u8>) -> http::Request<Vec<u8>> {
    http::Request::post(path).header("content-type", "application/json").body(body).expect("valid request")
}

fn is_transport(e: &kube::Error) -> bool {
    matches!(e, kube::Error::HyperError(_) | kube::Error::Service(_))
}

fn truncate(text: &str, bytes_max: usize) -> String {
    if text.len() <= bytes_max {
        return text.to_owned();
    }
    let mut end = bytes_max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

fn describe(action: &Action) -> String {
    match action {
        Action::Admit { target, .. } => format!("admitting {}/{}", target.namespace, target.name),
        Action::Bind { namespace, pod, node, .. } => format!("binding {namespace}/{pod} to {node}"),
        Action::Suspend { target, .. } => format!("suspending {}/{}", target.namespace, target.name),
        Action::Release { target } => format!("releasing {}/{}", target.namespace, target.name),
        Action::Condition { target, .. } => format!("the condition of {}/{}", target.namespace, target.name),
        Action::Event { target, .. } => format!("an event of {}/{}", target.namespace, target.name),
        Action::SaveRecentUsage { namespace, .. } => {
            format!("saving fair sharing's recent usage in {namespace}/{}", crate::recent_usage::CONFIGMAP_NAME)
        }
    }
}
