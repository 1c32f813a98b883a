//! # Scenario files
//!
//! A scenario is a YAML file of steps run in order against a cluster through the Kubernetes
//! API only (a `kube::Client`), so that the same file runs against the fake or a real
//! cluster. Steps marked *fake only* need the fake (they create nodes, change what only a
//! kubelet would, or inject faults) and are refused with a clear message elsewhere.
//!
//! ```yaml
//! name: a queued Job is admitted, runs and completes     # required
//! description: free text                                # optional
//! defaults:                                             # optional
//!   timeout: 30s        # of each `wait` (default 30s)
//!   namespace: team-a   # of names without `namespace/` and of applied objects (default `default`)
//! steps:
//!   - nodes: {count: 2, prefix: gpu-, gpus: 8, product: NVIDIA-H100-80GB-HBM3, cpu: 96, memory: 1Ti}  # fake only
//!   - apply: |                  # inline YAML documents, created or (if they exist) merge-patched
//!       apiVersion: v1
//!       kind: Namespace
//!       metadata: {name: team-a}
//!   - apply: {file: train.yaml} # a file relative to the scenario
//!   - expect:                   # checks now; `wait` checks until they hold or `timeout`
//!       job: train              # or `paddlejob:`, `pod:`, `node:`; `namespace/name` or `name`
//!       suspend: true
//!       conditions: [{type: Suspended, status: "True", reason: JobSuspended}]
//!       pods: {total: 0}
//!   - controller: start         # start | stop | restart: the caller's ControllerHooks
//!   - wait:
//!       job: train
//!       timeout: 20s
//!       suspend: false
//!       pods: {running: 2, bound: 2, on_nodes: [gpu-0, gpu-1]}
//!   - wait:
//!       job: train
//!       conditions: [{type: Complete, status: "True", reason: CompletionsReached}]
//!       event: {reason: Completed, message: "completed"}
//!   - patch: {kind: Job, name: train, type: merge, patch: {metadata: {labels: {seen: "yes"}}}}
//!   - inject: {fault: conflict, count: 1, resource: jobs, verb: patch}   # fake only
//!   - patch: {kind: Job, name: train, patch: {spec: {suspend: true}}, expect_status: 409}
//!   - node: {name: gpu-0, cordon: true}        # cordon: true|false works anywhere
//!   - node: {name: gpu-1, ready: false}        # fake only
//!   - sleep: 500ms
//!   - delete: {kind: Job, name: train, propagation: Background}
//!   - wait: {pod: train-xxxxx, gone: true}
//!   - node: {name: gpu-1, delete: true}        # fake only
//! ```
//!
//! Steps:
//! - `apply`: a string of YAML documents, `{documents: string}` or `{file: path}`; each
//!   document is created, or merge-patched with itself if it exists. Kinds are resolved by
//!   discovery.
//! - `patch`: `{kind, apiVersion?, name, type: merge|strategic|json (default merge),
//!   subresource?: status, patch}`.
//! - `delete`: `{kind, apiVersion?, name, propagation?: Background|Foreground|Orphan,
//!   grace_seconds?}`.
//! - `apply`, `patch`, `delete` take `expect_status: CODE`: the write must then fail with
//!   that HTTP code.
//! - `wait` and `expect`: an object (`job`, `paddlejob`, `pod` or `node`) and checks, all
//!   of which must hold:
//!   - `gone: true|false`: the object does not (does) exist;
//!   - `suspend`: a Job's `spec.suspend` (a PaddleJob's `spec.runPolicy.suspend`);
//!   - `conditions`: each `{type, status?, reason?, message?}` is among
//!     `status.conditions` (`message`: contained in the condition's);
//!   - `pods` (Jobs and PaddleJobs; by the `batch.kubernetes.io/job-name` or
//!     `training.kubeflow.org/job-name` label): `total` (all), `pending`, `running`,
//!     `succeeded`, `failed` (by phase, pods not being deleted), `terminating` (being
//!     deleted, not terminal), `bound` (neither terminal nor being deleted, with a node),
//!     `on_nodes` (every such bound pod is on one of these nodes);
//!   - `phase`, `node_name` (pods); `unschedulable` (nodes);
//!   - `event: {reason?, message?, type?}`: a core/v1 Event about the object.
//! - `sleep`: a duration (`500ms`, `2s`, `1m`, or seconds as a number).
//! - `controller: start|stop|restart`: delegated to the [`ControllerHooks`] given, whose
//!   `check` also runs after every step (the caller's checks on the controller).
//! - `nodes` (fake only): `{count, prefix?: node-, gpus, product?, cpu?: cores, memory?:
//!   quantity, labels?}`: GPU nodes `prefix0`, `prefix1`, … (see [`crate::gpu_node`]).
//! - `node: {name, cordon|ready|delete}`: `cordon` sets `spec.unschedulable`; `ready` (fake
//!   only) sets the Ready condition; `delete: true` (fake only) deletes the node.
//! - `inject` (fake only): `{fault: conflict|too_many_requests|internal|expire_watches|
//!   drop_watches, count?, resource?, verb?: create|update|patch|delete,
//!   retry_after_seconds?}` (see [`crate::Fault`]).
//!
//! A failed step says which step, what was expected and what the cluster showed.

use std::collections::HashMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::time::Duration;

use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams, PropagationPolicy};
use kube::core::GroupVersionKind;
use kube::discovery::{ApiResource, Scope};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::{FakeCluster, Fault, FaultError, WriteVerb};

/// What a scenario's `controller:` steps call. The fake does not know the controller: the
/// caller starts and stops it (in-process or otherwise).
pub trait ControllerHooks: Send {
    fn start(&mut self) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send + '_>>;
    fn stop(&mut self) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send + '_>>;
    /// The caller's own checks on the controller, run after every step that passed (for
    /// instance: its API answers in whatever state the step left the cluster). None by
    /// default.
    fn check(&mut self) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send + '_>> {
        Box::pin(async { Ok(()) })
    }
}

/// Where a scenario runs.
pub enum Cluster<'a> {
    /// The fake: every step runs.
    Fake(&'a FakeCluster),
    /// A real cluster: fake-only steps are refused.
    Real(kube::Client),
}

#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{what}: {message}")]
    Parse { what: String, message: String },
    #[error("step {index} ({step}): {message}")]
    Step { index: usize, step: String, message: String },
}

/// What a run did.
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    pub steps: usize,
    pub elapsed: Duration,
}

/// A parsed scenario.
#[derive(Debug)]
pub struct Scenario {
    pub name: String,
    pub description: Option<String>,
    timeout: Duration,
    namespace: String,
    steps: Vec<Step>,
    base: PathBuf,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    name: String,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    defaults: Defaults,
    steps: Vec<Step>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Defaults {
    timeout: Option<Seconds>,
    namespace: Option<String>,
}

/// A duration: `500ms`, `2s`, `1m`, `1h`, or a number of seconds.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
enum Seconds {
    Number(f64),
    Text(String),
}

impl Seconds {
    fn duration(&self) -> Result<Duration, String> {
        let seconds = match self {
            Seconds::Number(n) => *n,
            Seconds::Text(t) => {
                let t = t.trim();
                let (number, unit) = if let Some(n) = t.strip_suffix("ms") {
                    (n, 0.001)
                } else if let Some(n) = t.strip_suffix('s') {
                    (n, 1.0)
                } else if let Some(n) = t.strip_suffix('m') {
                    (n, 60.0)
                } else if let Some(n) = t.strip_suffix('h') {
                    (n, 3600.0)
                } else {
                    (t, 1.0)
                };
                number.trim().parse::<f64>().map_err(|_| format!("{t:?} is not a duration (500ms, 2s, 1m)"))? * unit
            }
        };
        if !(seconds.is_finite() && seconds >= 0.0) {
            return Err(format!("{seconds} is not a duration"));
        }
        Ok(Duration::from_secs_f64(seconds))
    }
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
enum Step {
    Apply(Apply),
    Patch(PatchStep),
    Delete(DeleteStep),
    Wait(Check),
    Expect(Check),
    Sleep(Seconds),
    Controller(ControllerOp),
    Nodes(NodesStep),
    Node(NodeStep),
    Inject(InjectStep),
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Apply {
    Inline(String),
    File {
        file: String,
        #[serde(default)]
        expect_status: Option<u16>,
    },
    Documents {
        documents: String,
        #[serde(default)]
        expect_status: Option<u16>,
    },
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PatchStep {
    kind: String,
    #[serde(default, rename = "apiVersion")]
    api_version: Option<String>,
    name: String,
    #[serde(default, rename = "type")]
    patch_type: Option<String>,
    #[serde(default)]
    subresource: Option<String>,
    patch: Value,
    #[serde(default)]
    expect_status: Option<u16>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DeleteStep {
    kind: String,
    #[serde(default, rename = "apiVersion")]
    api_version: Option<String>,
    name: String,
    #[serde(default)]
    propagation: Option<String>,
    #[serde(default)]
    grace_seconds: Option<u32>,
    #[serde(default)]
    expect_status: Option<u16>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
enum ControllerOp {
    Start,
    Stop,
    Restart,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct NodesStep {
    count: u32,
    #[serde(default)]
    prefix: Option<String>,
    gpus: u32,
    #[serde(default)]
    product: Option<String>,
    #[serde(default)]
    cpu: Option<f64>,
    #[serde(default)]
    memory: Option<String>,
    #[serde(default)]
    labels: HashMap<String, String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct NodeStep {
    name: String,
    #[serde(default)]
    cordon: Option<bool>,
    #[serde(default)]
    ready: Option<bool>,
    #[serde(default)]
    delete: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct InjectStep {
    fault: String,
    #[serde(default)]
    count: Option<u32>,
    #[serde(default)]
    resource: Option<String>,
    #[serde(default)]
    verb: Option<String>,
    #[serde(default)]
    retry_after_seconds: Option<u32>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Check {
    #[serde(default)]
    timeout: Option<Seconds>,
    #[serde(default)]
    job: Option<String>,
    #[serde(default)]
    paddlejob: Option<String>,
    #[serde(default)]
    pod: Option<String>,
    #[serde(default)]
    node: Option<String>,
    #[serde(default)]
    gone: Option<bool>,
    #[serde(default)]
    suspend: Option<bool>,
    #[serde(default)]
    conditions: Option<Vec<ConditionCheck>>,
    #[serde(default)]
    pods: Option<PodsCheck>,
    #[serde(default)]
    phase: Option<String>,
    #[serde(default)]
    node_name: Option<String>,
    #[serde(default)]
    unschedulable: Option<bool>,
    #[serde(default)]
    event: Option<EventCheck>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConditionCheck {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    message: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct PodsCheck {
    #[serde(default)]
    total: Option<usize>,
    #[serde(default)]
    pending: Option<usize>,
    #[serde(default)]
    running: Option<usize>,
    #[serde(default)]
    succeeded: Option<usize>,
    #[serde(default)]
    failed: Option<usize>,
    #[serde(default)]
    terminating: Option<usize>,
    #[serde(default)]
    bound: Option<usize>,
    #[serde(default)]
    on_nodes: Option<Vec<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct EventCheck {
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    message: Option<String>,
    #[serde(default, rename = "type")]
    kind: Option<String>,
}

impl Scenario {
    /// Reads a scenario file; `apply: {file: …}` paths are relative to its directory.
    pub fn from_file(path: &Path) -> Result<Scenario, ScenarioError> {
        let text =
            std::fs::read_to_string(path).map_err(|source| ScenarioError::Read { path: path.to_owned(), source })?;
        let base = path.parent().map(Path::to_owned).unwrap_or_default();
        Scenario::parse(&text, &base).map_err(|e| match e {
            ScenarioError::Parse { message, .. } => ScenarioError::Parse { what: path.display().to_string(), message },
            other => other,
        })
    }

    /// Parses a scenario; `base` is the directory file paths are relative to.
    pub fn parse(text: &str, base: &Path) -> Result<Scenario, ScenarioError> {
        let parse_error = |message: String| ScenarioError::Parse { what: "scenario".into(), message };
        let file: File = serde_saphyr::from_str(text).map_err(|e| parse_error(e.to_string()))?;
        let timeout = match &file.defaults.timeout {
            Some(t) => t.duration().map_err(|e| parse_error(format!("defaults.timeout: {e}")))?,
            None => Duration::from_secs(30),
        };
        for (i, step) in file.steps.iter().enumerate() {
            if let Step::Wait(c) | Step::Expect(c) = step {
                let objects = [&c.job, &c.paddlejob, &c.pod, &c.node].iter().filter(|o| o.is_some()).count();
                if objects != 1 {
                    return Err(parse_error(format!(
                        "step {}: a check names exactly one object (job, paddlejob, pod or node), found {objects}",
                        i + 1
                    )));
                }
                if let Some(t) = &c.timeout {
                    t.duration().map_err(|e| parse_error(format!("step {}: timeout: {e}", i + 1)))?;
                }
            }
            if let Step::Sleep(s) = step {
                s.duration().map_err(|e| parse_error(format!("step {}: sleep: {e}", i + 1)))?;
            }
        }
        Ok(Scenario {
            name: file.name,
            description: file.description,
            timeout,
            namespace: file.defaults.namespace.unwrap_or_else(|| "default".into()),
            steps: file.steps,
            base: base.to_owned(),
        })
    }

    /// Runs the steps in order; stops at the first that fails.
    pub async fn run(
        &self,
        cluster: Cluster<'_>,
        mut controller: Option<&mut dyn ControllerHooks>,
    ) -> Result<Report, ScenarioError> {
        let started = std::time::Instant::now();
        let (client, fake) = match cluster {
            Cluster::Fake(f) => (f.client(), Some(f)),
            Cluster::Real(c) => (c, None),
        };
        let mut runner = Runner { client, fake, resources: HashMap::new(), scenario: self };
        for (i, step) in self.steps.iter().enumerate() {
            let index = i + 1;
            let fail = |message: String| ScenarioError::Step { index, step: summary(step), message };
            tracing::info!(scenario = %self.name, step = index, "{}", summary(step));
            match step {
                Step::Controller(op) => {
                    let hooks = controller.as_deref_mut().ok_or_else(|| {
                        fail("the scenario starts or stops a controller, and none was given to the runner".into())
                    })?;
                    let result = match op {
                        ControllerOp::Start => hooks.start().await,
                        ControllerOp::Stop => hooks.stop().await,
                        ControllerOp::Restart => match hooks.stop().await {
                            Ok(()) => hooks.start().await,
                            Err(e) => Err(e),
                        },
                    };
                    result.map_err(|e| fail(format!("the controller failed: {e}")))?;
                }
                other => runner.step(other).await.map_err(fail)?,
            }
            if let Some(hooks) = controller.as_deref_mut() {
                hooks.check().await.map_err(|e| fail(format!("after the step: {e}")))?;
            }
        }
        Ok(Report { steps: self.steps.len(), elapsed: started.elapsed() })
    }
}

/// A step in a few words, for messages.
fn summary(step: &Step) -> String {
    match step {
        Step::Apply(Apply::File { file, .. }) => format!("apply {file}"),
        Step::Apply(_) => "apply".into(),
        Step::Patch(p) => format!("patch {} {}", p.kind, p.name),
        Step::Delete(d) => format!("delete {} {}", d.kind, d.name),
        Step::Wait(c) => format!("wait for {}", object_words(c)),
        Step::Expect(c) => format!("expect {}", object_words(c)),
        Step::Sleep(s) => format!("sleep {s:?}"),
        Step::Controller(op) => format!("controller {op:?}").to_lowercase(),
        Step::Nodes(n) => format!("nodes: {} × {} GPUs", n.count, n.gpus),
        Step::Node(n) => format!("node {}", n.name),
        Step::Inject(i) => format!("inject {}", i.fault),
    }
}

fn object_words(c: &Check) -> String {
    if let Some(j) = &c.job {
        format!("job {j}")
    } else if let Some(j) = &c.paddlejob {
        format!("paddlejob {j}")
    } else if let Some(p) = &c.pod {
        format!("pod {p}")
    } else {
        format!("node {}", c.node.as_deref().unwrap_or_default())
    }
}

fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    let api_version = if group.is_empty() { version.to_owned() } else { format!("{group}/{version}") };
    ApiResource { group: group.into(), version: version.into(), api_version, kind: kind.into(), plural: plural.into() }
}

/// The apiVersion of the kinds a scenario may name without one.
fn default_api_version(kind: &str) -> Option<&'static str> {
    Some(match kind {
        "Job" => "batch/v1",
        "PaddleJob" => "kubeflow.org/v1",
        "PriorityClass" => "scheduling.k8s.io/v1",
        "Lease" => "coordination.k8s.io/v1",
        "MutatingWebhookConfiguration" => "admissionregistration.k8s.io/v1",
        "Pod" | "Node" | "Namespace" | "ResourceQuota" | "Event" | "Secret" | "ConfigMap" | "Service" => "v1",
        _ => return None,
    })
}

struct Runner<'a> {
    client: kube::Client,
    fake: Option<&'a FakeCluster>,
    resources: HashMap<(String, String), (ApiResource, bool)>,
    scenario: &'a Scenario,
}

/// `ns/name` or `name` (in the default namespace).
fn split_name<'n>(text: &'n str, default_ns: &'n str) -> (&'n str, &'n str) {
    text.split_once('/').unwrap_or((default_ns, text))
}

fn api_status(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

/// A write's outcome against `expect_status`.
fn judge<T>(result: Result<T, kube::Error>, expect_status: Option<u16>, what: &str) -> Result<(), String> {
    match (result, expect_status) {
        (Ok(_), None) => Ok(()),
        (Ok(_), Some(code)) => Err(format!("expected {what} to fail with {code}; it succeeded")),
        (Err(e), Some(code)) if api_status(&e) == Some(code) => Ok(()),
        (Err(e), Some(code)) => Err(format!("expected {what} to fail with {code}; it failed with: {e}")),
        (Err(e), None) => Err(format!("{what} failed: {e}")),
    }
}

impl Runner<'_> {
    fn fake_only(&self, what: &str) -> Result<&FakeCluster, String> {
        self.fake.ok_or_else(|| format!("{what} runs on the fake only: this step cannot run against a real cluster"))
    }

    async fn resolve(&mut self, api_version: &str, kind: &str) -> Result<(ApiResource, bool), String> {
        let key = (api_version.to_owned(), kind.to_owned());
        if let Some(r) = self.resources.get(&key) {
            return Ok(r.clone());
        }
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let gvk = GroupVersionKind::gvk(group, version, kind);
        let (ar, caps) = kube::discovery::pinned_kind(&self.client, &gvk)
            .await
            .map_err(|e| format!("the cluster does not serve {kind} ({api_version}): {e}"))?;
        let namespaced = caps.scope == Scope::Namespaced;
        self.resources.insert(key, (ar.clone(), namespaced));
        Ok((ar, namespaced))
    }

    async fn api_for(&mut self, api_version: Option<&str>, kind: &str, ns: &str) -> Result<Api<DynamicObject>, String> {
        let api_version = match api_version {
            Some(v) => v.to_owned(),
            None => default_api_version(kind).ok_or_else(|| format!("give the apiVersion of kind {kind}"))?.to_owned(),
        };
        let (ar, namespaced) = self.resolve(&api_version, kind).await?;
        Ok(if namespaced {
            Api::namespaced_with(self.client.clone(), ns, &ar)
        } else {
            Api::all_with(self.client.clone(), &ar)
        })
    }

    async fn step(&mut self, step: &Step) -> Result<(), String> {
        let default_ns = self.scenario.namespace.clone();
        match step {
            Step::Apply(apply) => {
                let (text, expect_status) = match apply {
                    Apply::Inline(text) => (text.clone(), None),
                    Apply::Documents { documents, expect_status } => (documents.clone(), *expect_status),
                    Apply::File { file, expect_status } => {
                        let path = self.scenario.base.join(file);
                        let text = std::fs::read_to_string(&path)
                            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
                        (text, *expect_status)
                    }
                };
                let documents: Vec<Value> =
                    serde_saphyr::from_multiple(&text).map_err(|e| format!("the documents are not valid YAML: {e}"))?;
                for doc in documents.into_iter().filter(|d| !d.is_null()) {
                    match (self.apply(doc, &default_ns).await, expect_status) {
                        (Ok(()), None) => {}
                        (Ok(()), Some(code)) => {
                            return Err(format!("expected the apply to fail with {code}; it succeeded"));
                        }
                        (Err((_, got)), Some(code)) if got == Some(code) => {}
                        (Err((message, _)), _) => return Err(message),
                    }
                }
                Ok(())
            }
            Step::Patch(p) => {
                let (ns, name) = split_name(&p.name, &default_ns);
                let api = self.api_for(p.api_version.as_deref(), &p.kind, ns).await?;
                let params = PatchParams::default();
                let patch = match p.patch_type.as_deref().unwrap_or("merge") {
                    "merge" => Patch::Merge(p.patch.clone()),
                    "strategic" => Patch::Strategic(p.patch.clone()),
                    "json" => Patch::Json::<Value>(
                        serde_json::from_value(p.patch.clone()).map_err(|e| format!("not a JSON patch: {e}"))?,
                    ),
                    other => return Err(format!("unknown patch type {other:?}: merge, strategic or json")),
                };
                let result = match p.subresource.as_deref() {
                    None => api.patch(name, &params, &patch).await,
                    Some("status") => api.patch_status(name, &params, &patch).await,
                    Some(other) => return Err(format!("cannot patch subresource {other:?}: only status")),
                };
                judge(result, p.expect_status, &format!("patching {} {}", p.kind, p.name))
            }
            Step::Delete(d) => {
                let (ns, name) = split_name(&d.name, &default_ns);
                let api = self.api_for(d.api_version.as_deref(), &d.kind, ns).await?;
                let propagation = match d.propagation.as_deref() {
                    None => None,
                    Some("Background") => Some(PropagationPolicy::Background),
                    Some("Foreground") => Some(PropagationPolicy::Foreground),
                    Some("Orphan") => Some(PropagationPolicy::Orphan),
                    Some(other) => {
                        return Err(format!("unknown propagation {other:?}: Background, Foreground or Orphan"));
                    }
                };
                let params = DeleteParams {
                    propagation_policy: propagation,
                    grace_period_seconds: d.grace_seconds,
                    ..DeleteParams::default()
                };
                judge(api.delete(name, &params).await, d.expect_status, &format!("deleting {} {}", d.kind, d.name))
            }
            Step::Wait(check) => {
                let timeout = match &check.timeout {
                    Some(t) => t.duration()?,
                    None => self.scenario.timeout,
                };
                let deadline = tokio::time::Instant::now() + timeout;
                loop {
                    let verdict = self.check(check).await;
                    match verdict {
                        Ok(()) => return Ok(()),
                        Err(why) if tokio::time::Instant::now() >= deadline => {
                            return Err(format!("still not so after {timeout:?}: {why}"));
                        }
                        Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                    }
                }
            }
            Step::Expect(check) => self.check(check).await,
            Step::Sleep(s) => {
                tokio::time::sleep(s.duration()?).await;
                Ok(())
            }
            Step::Controller(_) => unreachable!("run() handles controller steps"),
            Step::Nodes(n) => {
                self.fake_only("creating nodes")?;
                let memory_mib = match &n.memory {
                    Some(m) => {
                        let milli =
                            crate::quantity::parse(m).ok_or_else(|| format!("memory {m:?} is not a quantity"))?;
                        (milli / 1000 / (1024 * 1024)) as u64
                    }
                    None => 512 * 1024,
                };
                let cpu_millis = (n.cpu.unwrap_or(96.0) * 1000.0) as u64;
                let product = n.product.as_deref().unwrap_or("NVIDIA-H100-80GB-HBM3");
                let prefix = n.prefix.as_deref().unwrap_or("node-");
                let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(self.client.clone());
                for i in 0..n.count {
                    let mut node = crate::gpu_node(&format!("{prefix}{i}"), n.gpus, product, cpu_millis, memory_mib);
                    let labels = node.metadata.labels.get_or_insert_with(Default::default);
                    for (k, v) in &n.labels {
                        labels.insert(k.clone(), v.clone());
                    }
                    nodes
                        .create(&PostParams::default(), &node)
                        .await
                        .map_err(|e| format!("creating node {prefix}{i}: {e}"))?;
                }
                Ok(())
            }
            Step::Node(n) => {
                let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(self.client.clone());
                let params = PatchParams::default();
                if let Some(cordon) = n.cordon {
                    nodes
                        .patch(&n.name, &params, &Patch::Merge(json!({"spec": {"unschedulable": cordon}})))
                        .await
                        .map_err(|e| format!("cordoning {}: {e}", n.name))?;
                }
                if let Some(ready) = n.ready {
                    self.fake_only("changing a node's Ready condition")?;
                    let condition = json!({"type": "Ready", "status": if ready { "True" } else { "False" },
                        "reason": if ready { "KubeletReady" } else { "KubeletNotReady" }});
                    nodes
                        .patch_status(
                            &n.name,
                            &params,
                            &Patch::Strategic(json!({"status": {"conditions": [condition]}})),
                        )
                        .await
                        .map_err(|e| format!("marking {} ready={ready}: {e}", n.name))?;
                }
                if n.delete == Some(true) {
                    self.fake_only("deleting a node")?;
                    nodes
                        .delete(&n.name, &DeleteParams::default())
                        .await
                        .map_err(|e| format!("deleting {}: {e}", n.name))?;
                }
                Ok(())
            }
            Step::Inject(i) => {
                let fake = self.fake_only("fault injection")?;
                let count = i.count.unwrap_or(1);
                let error = match i.fault.as_str() {
                    "expire_watches" => {
                        fake.inject(Fault::ExpireWatches);
                        return Ok(());
                    }
                    "drop_watches" => {
                        fake.inject(Fault::DropWatches);
                        return Ok(());
                    }
                    "conflict" => FaultError::Conflict,
                    "too_many_requests" => {
                        FaultError::TooManyRequests { retry_after_seconds: i.retry_after_seconds.unwrap_or(1) }
                    }
                    "internal" => FaultError::Internal,
                    other => {
                        return Err(format!(
                            "unknown fault {other:?}: conflict, too_many_requests, internal, expire_watches or drop_watches"
                        ));
                    }
                };
                let verb = match i.verb.as_deref() {
                    None => None,
                    Some("create") => Some(WriteVerb::Create),
                    Some("update") => Some(WriteVerb::Update),
                    Some("patch") => Some(WriteVerb::Patch),
                    Some("delete") => Some(WriteVerb::Delete),
                    Some(other) => return Err(format!("unknown verb {other:?}: create, update, patch or delete")),
                };
                fake.inject(Fault::FailWrites { error, count, resource: i.resource.clone(), verb });
                Ok(())
            }
        }
    }

    /// Creates a document, or merge-patches it onto the existing object.
    async fn apply(&mut self, doc: Value, default_ns: &str) -> Result<(), (String, Option<u16>)> {
        let api_version = doc.get("apiVersion").and_then(Value::as_str).unwrap_or_default().to_owned();
        let kind = doc.get("kind").and_then(Value::as_str).unwrap_or_default().to_owned();
        let name = doc.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default().to_owned();
        if api_version.is_empty() || kind.is_empty() {
            return Err(("a document has no apiVersion or kind".into(), None));
        }
        let ns = doc.pointer("/metadata/namespace").and_then(Value::as_str).unwrap_or(default_ns).to_owned();
        let api = self.api_for(Some(&api_version), &kind, &ns).await.map_err(|e| (e, None))?;
        let object: DynamicObject =
            serde_json::from_value(doc.clone()).map_err(|e| (format!("{kind} {name} is not an object: {e}"), None))?;
        match api.create(&PostParams::default(), &object).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 && s.reason == "AlreadyExists" && !name.is_empty() => {
                let mut patch = doc.clone();
                if let Some(meta) = patch.get_mut("metadata").and_then(Value::as_object_mut) {
                    meta.remove("namespace");
                }
                api.patch(&name, &PatchParams::default(), &Patch::Merge(patch))
                    .await
                    .map(|_| ())
                    .map_err(|e| (format!("updating {kind} {name}: {e}"), api_status(&e)))
            }
            Err(e) => Err((format!("creating {kind} {name}: {e}"), api_status(&e))),
        }
    }

    /// Checks once: `Err` says what was expected and what the cluster showed.
    async fn check(&mut self, check: &Check) -> Result<(), String> {
        let default_ns = self.scenario.namespace.clone();
        let (ar, label, text) = if let Some(j) = &check.job {
            (resource("batch", "v1", "Job", "jobs"), Some("batch.kubernetes.io/job-name"), j)
        } else if let Some(j) = &check.paddlejob {
            (resource("kubeflow.org", "v1", "PaddleJob", "paddlejobs"), Some("training.kubeflow.org/job-name"), j)
        } else if let Some(p) = &check.pod {
            (resource("", "v1", "Pod", "pods"), None, p)
        } else {
            (resource("", "v1", "Node", "nodes"), None, check.node.as_ref().expect("checked when parsed"))
        };
        let cluster_scoped = check.node.is_some();
        let (ns, name) = if cluster_scoped { ("", text.as_str()) } else { split_name(text, &default_ns) };
        let api: Api<DynamicObject> = if cluster_scoped {
            Api::all_with(self.client.clone(), &ar)
        } else {
            Api::namespaced_with(self.client.clone(), ns, &ar)
        };
        let object = api.get_opt(name).await.map_err(|e| format!("reading {} {text}: {e}", ar.kind))?;
        let object = object.map(|o| serde_json::to_value(o).expect("objects serialize"));
        let mut expected = Vec::new();
        let mut shown = Vec::new();
        let mut ok = true;
        let mut expect = |holds: bool, want: String, saw: String| {
            if !holds {
                ok = false;
                expected.push(want);
                shown.push(saw);
            }
        };
        let what = if cluster_scoped { format!("{} {name}", ar.kind) } else { format!("{} {ns}/{name}", ar.kind) };
        if let Some(gone) = check.gone {
            expect(
                object.is_none() == gone,
                if gone { format!("{what} gone") } else { format!("{what} to exist") },
                if object.is_none() { format!("no {what}") } else { format!("{what} exists") },
            );
        }
        let Some(object) = object else {
            let needs_object = check.suspend.is_some()
                || check.conditions.is_some()
                || check.pods.is_some()
                || check.phase.is_some()
                || check.node_name.is_some()
                || check.unschedulable.is_some()
                || check.event.is_some();
            if needs_object {
                return Err(format!("{what} does not exist"));
            }
            return if ok {
                Ok(())
            } else {
                Err(format!("expected {}; the cluster showed {}", expected.join(", "), shown.join(", ")))
            };
        };
        if let Some(want) = check.suspend {
            let pointer = if check.paddlejob.is_some() { "/spec/runPolicy/suspend" } else { "/spec/suspend" };
            let got = object.pointer(pointer).and_then(Value::as_bool).unwrap_or(false);
            expect(got == want, format!("suspend {want}"), format!("suspend {got}"));
        }
        if let Some(conditions) = &check.conditions {
            let have: Vec<&Value> =
                object.pointer("/status/conditions").and_then(Value::as_array).into_iter().flatten().collect();
            for c in conditions {
                let found = have.iter().any(|h| {
                    let field = |f: &str| h.get(f).and_then(Value::as_str).unwrap_or_default();
                    field("type") == c.kind
                        && c.status.as_deref().is_none_or(|s| field("status") == s)
                        && c.reason.as_deref().is_none_or(|r| field("reason") == r)
                        && c.message.as_deref().is_none_or(|m| field("message").contains(m))
                });
                let mut want = format!("condition {}", c.kind);
                for (label, v) in [("status", &c.status), ("reason", &c.reason), ("message containing", &c.message)] {
                    if let Some(v) = v {
                        want.push_str(&format!(" {label} {v:?}"));
                    }
                }
                expect(found, want, format!("conditions [{}]", describe_conditions(&have)));
            }
        }
        if let Some(phase) = &check.phase {
            let got = object.pointer("/status/phase").and_then(Value::as_str).unwrap_or("(none)");
            expect(got == phase, format!("phase {phase}"), format!("phase {got}"));
        }
        if let Some(node) = &check.node_name {
            let got = object.pointer("/spec/nodeName").and_then(Value::as_str).unwrap_or("(unbound)");
            expect(got == node, format!("bound to {node}"), format!("bound to {got}"));
        }
        if let Some(want) = check.unschedulable {
            let got = object.pointer("/spec/unschedulable").and_then(Value::as_bool).unwrap_or(false);
            expect(got == want, format!("unschedulable {want}"), format!("unschedulable {got}"));
        }
        if let Some(pods_check) = &check.pods {
            let label =
                label.ok_or_else(|| format!("`pods` checks a Job's or a PaddleJob's pods, not a {}", ar.kind))?;
            let pods: Api<DynamicObject> =
                Api::namespaced_with(self.client.clone(), ns, &resource("", "v1", "Pod", "pods"));
            let list = pods
                .list(&ListParams::default().labels(&format!("{label}={name}")))
                .await
                .map_err(|e| format!("listing the pods of {what}: {e}"))?;
            let pods: Vec<Value> =
                list.items.into_iter().map(|p| serde_json::to_value(p).expect("objects serialize")).collect();
            let tally = Tally::of(&pods);
            let saw = tally.describe();
            for (label, want, got) in [
                ("pods", pods_check.total, tally.total),
                ("pending", pods_check.pending, tally.pending),
                ("running", pods_check.running, tally.running),
                ("succeeded", pods_check.succeeded, tally.succeeded),
                ("failed", pods_check.failed, tally.failed),
                ("terminating", pods_check.terminating, tally.terminating),
                ("bound", pods_check.bound, tally.bound.len()),
            ] {
                if let Some(want) = want {
                    expect(got == want, format!("{want} {label}"), saw.clone());
                }
            }
            if let Some(nodes) = &pods_check.on_nodes {
                let stray: Vec<&String> = tally.bound.iter().filter(|n| !nodes.contains(n)).collect();
                expect(stray.is_empty(), format!("bound pods on {} only", nodes.join(", ")), saw.clone());
            }
        }
        if let Some(event) = &check.event {
            let events: Api<DynamicObject> = Api::namespaced_with(
                self.client.clone(),
                if ns.is_empty() { "default" } else { ns },
                &resource("", "v1", "Event", "events"),
            );
            let list = events
                .list(
                    &ListParams::default()
                        .fields(&format!("involvedObject.name={name},involvedObject.kind={}", ar.kind)),
                )
                .await
                .map_err(|e| format!("listing the events of {what}: {e}"))?;
            let seen: Vec<Value> =
                list.items.into_iter().map(|e| serde_json::to_value(e).expect("objects serialize")).collect();
            let found = seen.iter().any(|e| {
                let field = |f: &str| e.get(f).and_then(Value::as_str).unwrap_or_default();
                event.reason.as_deref().is_none_or(|r| field("reason") == r)
                    && event.message.as_deref().is_none_or(|m| field("message").contains(m))
                    && event.kind.as_deref().is_none_or(|t| field("type") == t)
            });
            let mut want = "an event".to_owned();
            for (label, v) in [("type", &event.kind), ("reason", &event.reason), ("message containing", &event.message)]
            {
                if let Some(v) = v {
                    want.push_str(&format!(" {label} {v:?}"));
                }
            }
            let described: Vec<String> = seen
                .iter()
                .map(|e| {
                    format!(
                        "{} {:?}",
                        e.get("reason").and_then(Value::as_str).unwrap_or_default(),
                        e.get("message").and_then(Value::as_str).unwrap_or_default()
                    )
                })
                .collect();
            expect(found, want, format!("events [{}]", described.join("; ")));
        }
        if ok {
            Ok(())
        } else {
            Err(format!("expected {} of {what}; the cluster showed {}", expected.join(", "), shown.join(", ")))
        }
    }
}

fn describe_conditions(conditions: &[&Value]) -> String {
    conditions
        .iter()
        .map(|c| {
            let field = |f: &str| c.get(f).and_then(Value::as_str).unwrap_or_default();
            let mut text = format!("{}={}", field("type"), field("status"));
            if !field("reason").is_empty() {
                text.push_str(&format!(" ({})", field("reason")));
            }
            if !field("message").is_empty() {
                text.push_str(&format!(" {:?}", field("message")));
            }
            text
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// A Job's pods, counted as the checks count them.
#[derive(Default)]
struct Tally {
    total: usize,
    pending: usize,
    running: usize,
    succeeded: usize,
    failed: usize,
    terminating: usize,
    /// The node of each bound pod that is neither terminal nor being deleted.
    bound: Vec<String>,
}

impl Tally {
    fn of(pods: &[Value]) -> Tally {
        let mut t = Tally { total: pods.len(), ..Tally::default() };
        for p in pods {
            let phase = p.pointer("/status/phase").and_then(Value::as_str).unwrap_or("Pending");
            let terminal = matches!(phase, "Succeeded" | "Failed");
            let deleting = p.pointer("/metadata/deletionTimestamp").is_some_and(|d| !d.is_null());
            if deleting && !terminal {
                t.terminating += 1;
                continue;
            }
            match phase {
                "Running" => t.running += 1,
                "Succeeded" => t.succeeded += 1,
                "Failed" => t.failed += 1,
                _ => t.pending += 1,
            }
            if !terminal
                && let Some(node) = p.pointer("/spec/nodeName").and_then(Value::as_str).filter(|n| !n.is_empty())
            {
                t.bound.push(node.to_owned());
            }
        }
        t.bound.sort();
        t
    }

    fn describe(&self) -> String {
        let mut parts = vec![format!("{} pods", self.total)];
        for (n, label) in [
            (self.pending, "pending"),
            (self.running, "running"),
            (self.succeeded, "succeeded"),
            (self.failed, "failed"),
            (self.terminating, "terminating"),
        ] {
            if n > 0 {
                parts.push(format!("{n} {label}"));
            }
        }
        if self.bound.is_empty() {
            parts.push("none bound".into());
        } else {
            parts.push(format!("bound to {}", self.bound.join(", ")));
        }
        format!("({})", parts.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse() {
        assert_eq!(Seconds::Text("500ms".into()).duration().unwrap(), Duration::from_millis(500));
        assert_eq!(Seconds::Text("2m".into()).duration().unwrap(), Duration::from_secs(120));
        assert_eq!(Seconds::Number(1.5).duration().unwrap(), Duration::from_millis(1500));
        assert!(Seconds::Text("soon".into()).duration().is_err());
    }

    #[test]
    fn the_documented_example_parses() {
        let doc = include_str!("scenario.rs");
        let example: String = doc
            .lines()
            .skip_while(|l| !l.starts_with("//! ```yaml"))
            .skip(1)
            .take_while(|l| !l.starts_with("//! ```"))
            .map(|l| l.strip_prefix("//! ").or_else(|| l.strip_prefix("//!")).unwrap_or(l))
            .collect::<Vec<_>>()
            .join("\n");
        let scenario = Scenario::parse(&example, Path::new(".")).unwrap();
        assert_eq!(scenario.steps.len(), 16);
        assert_eq!(scenario.namespace, "team-a");
    }

    #[test]
    fn a_check_names_one_object() {
        let text = "name: x\nsteps:\n  - expect: {job: a, pod: b}\n";
        let e = Scenario::parse(text, Path::new(".")).unwrap_err();
        assert!(e.to_string().contains("exactly one object"), "{e}");
        let e = Scenario::parse("name: x\nsteps:\n  - frobnicate: 1\n", Path::new(".")).unwrap_err();
        assert!(matches!(e, ScenarioError::Parse { .. }));
    }

    #[test]
    fn pods_are_tallied_as_the_checks_say() {
        let pods = vec![
            json!({"status": {"phase": "Running"}, "spec": {"nodeName": "n1"}}),
            json!({"status": {"phase": "Running"}, "spec": {"nodeName": "n2"}, "metadata": {"deletionTimestamp": "t"}}),
            json!({"status": {"phase": "Pending"}, "spec": {}}),
            json!({"status": {"phase": "Succeeded"}, "spec": {"nodeName": "n1"}}),
        ];
        let t = Tally::of(&pods);
        assert_eq!((t.total, t.running, t.terminating, t.pending, t.succeeded), (4, 1, 1, 1, 1));
        assert_eq!(t.bound, vec!["n1"]);
        assert_eq!(t.describe(), "(4 pods, 1 pending, 1 running, 1 succeeded, 1 terminating, bound to n1)");
    }
}
