//! # fairway-kube-fake
//!
//! A fake Kubernetes API server for Fairway's controller tests and benchmarks: the subset of
//! the REST API the controller uses, served over plain HTTP on `127.0.0.1:0` to the real
//! `kube` client, with the stock Job controller and kubelets simulated, so that the same
//! manifests and [`scenario`] files behave alike here and on a real cluster.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use fairway_kube_fake::{FakeCluster, FakeConfig, gpu_node};
//! use k8s_openapi::api::core::v1::Node;
//! use kube::api::{Api, PostParams};
//!
//! let cluster = FakeCluster::start(FakeConfig { time_scale: 0.01, ..FakeConfig::default() }).await?;
//! let nodes: Api<Node> = Api::all(cluster.client());
//! nodes.create(&PostParams::default(), &gpu_node("gpu-0", 8, "NVIDIA-H100-80GB-HBM3", 96_000, 1_048_576)).await?;
//! // … run the controller against cluster.kube_config(), create Jobs, watch them …
//! assert!(cluster.double_booked().is_empty());
//! cluster.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! ## Served
//!
//! Core v1 `namespaces`, `nodes` (+`status`), `pods` (+`status`, `binding`, `eviction`),
//! `resourcequotas` (+`status`, `status.used` kept), `events`, `secrets`, `configmaps`,
//! `services`; `scheduling.k8s.io/v1` `priorityclasses`; `batch/v1` `jobs` (+`status`);
//! `coordination.k8s.io/v1` `leases`; `admissionregistration.k8s.io/v1`
//! `mutatingwebhookconfigurations` (and the webhooks are called); `kubeflow.org/v1`
//! `paddlejobs` (+`status`; [`FakeConfig::paddlejobs`]); discovery (plain and
//! aggregated), `/version`, `/healthz`. Every resource has the all-namespaces and (when
//! namespaced) the namespaced paths; verbs get, list, watch, create, update, patch, delete and
//! deletecollection. No authentication: any token is accepted.
//!
//! ## Faithful
//!
//! One global resourceVersion; every write bumps it, an update that changes nothing does
//! not. Lists carry the current one, paginate with `limit`/`continue`, and give
//! `remainingItemCount` without selectors. Watches resume from any resourceVersion within the
//! resource's history ([`FakeConfig::watch_history`] changes per resource, as the real watch
//! cache keeps per resource); an older one gets an `ERROR` event with a 410 `Expired`
//! Status. `resourceVersion` unset or `"0"` starts with the current objects as ADDED;
//! `sendInitialEvents=true` ends those with the `k8s.io/initial-events-end` bookmark.
//! Bookmarks every [`FakeConfig::bookmark_interval`] and when `timeoutSeconds` ends the
//! watch; an update that makes an object leave (enter) a watch's selection is a DELETED
//! (ADDED) there. Label selectors (`=`, `==`, `!=`, `in`, `notin`, `key`, `!key`), field
//! selectors (`metadata.name`, `metadata.namespace`; pods: `spec.nodeName`,
//! `spec.schedulerName`, `status.phase`, …; events: `involvedObject.*`, `reason`, `type`).
//!
//! Writes: `generateName`; 409 `AlreadyExists`; 409 `Conflict` on a stale
//! `metadata.resourceVersion` in a PUT, or a patch that carries one; the main resource ignores
//! `status` and the `status` subresource changes nothing else; `generation` bumps on spec
//! changes (Jobs, PaddleJobs, webhook configurations); `uid`, `creationTimestamp`,
//! `resourceVersion` as strings. Patches: JSON patch, merge patch, strategic merge patch
//! (see simplifications) and server-side apply (idem). Defaulting as the real server's (a
//! Job's `parallelism`, `completions`, `backoffLimit`, `suspend`, `podReplacementPolicy`; a
//! pod's `terminationGracePeriodSeconds`, `schedulerName`, requests from limits…); a Job's
//! selector and template labels; validation of what a controller can get wrong (422 with
//! field paths: names, a Job's `restartPolicy`, a pod spec changed after creation, a Job's
//! immutable template except the scheduling directives of a suspended Job without
//! `startTime`, a PriorityClass's value). Namespaces must exist (404) and not be terminating
//! (403). Pods get `spec.priority`/`preemptionPolicy` from their PriorityClass (403 if it
//! does not exist) and are admitted against the namespace's ResourceQuotas (403 `exceeded
//! quota`, or `must specify` for limited compute resources).
//!
//! Deletion: pods bound to a node and not terminal get `deletionTimestamp` and
//! `deletionGracePeriodSeconds` (`gracePeriodSeconds` or their
//! `terminationGracePeriodSeconds`) and are finished by their kubelet; finalizers hold any
//! object until they are removed; propagation `Background` (the default, but `Orphan` for
//! Jobs, as batch/v1 still defaults to), `Foreground` (owner kept with the
//! `foregroundDeletion` finalizer until its dependents are gone) and `Orphan` (owner
//! references removed). The garbage collector removes dependents of removed owners; the pod
//! GC removes pods of deleted nodes (marking them Failed with a `DisruptionTarget` condition
//! first); a deleted namespace is emptied, then goes.
//!
//! The Job controller and kubelets: see the `jobctl` and `kubelet` modules (in short: the
//! stock Job controller of 1.33 as its user sees it; a kubelet that runs `sleep N`, `sh -c
//! "sleep N; exit C"`, or what the `fake.fairway.dev/run-seconds` and `exit-code` annotations
//! say; SIGTERM ends a pod after `fake.fairway.dev/stop-seconds` or its grace period,
//! whichever comes first). [`FakeConfig::time_scale`] scales every duration read from an
//! object (sleeps, grace periods, stop seconds, `activeDeadlineSeconds`, back-offs).
//!
//! PaddleJobs are run by a minimal Kubeflow training operator ([`FakeConfig::paddle_operator`]):
//! one pod per replica (`NAME-master-0`, `NAME-worker-1`, labelled
//! `training.kubeflow.org/job-name`), `runPolicy.suspend` deletes them, conditions `Created`,
//! `Running`, `Succeeded`/`Failed`, `Suspended`, and `replicaStatuses`; see the `paddle`
//! module.
//!
//! Mutating webhooks: see the `webhook` module; a webhook given as a Service is reached
//! where [`FakeCluster::expose_service`] says. Fault injection: [`Fault`].
//!
//! ## Simplified
//!
//! - Pages after the first are read from the current state (after the last key sent) under
//!   the first page's resourceVersion, not from a snapshot: an object changed between pages
//!   shows its newer version; the watch that follows from the list's resourceVersion repeats
//!   such changes, so a reflector converges as on a real server. Continue tokens do not
//!   expire. `resourceVersionMatch=Exact` is served only for the current resourceVersion
//!   (else 410). `limit` is honoured even with `resourceVersion=0`.
//! - Strategic merge patch: lists with a Kubernetes merge key (`conditions` by `type`,
//!   `containers`/`env`/`volumes`/… by `name`, `ownerReferences` by `uid`, …) merge by key,
//!   with `$patch: delete`/`replace` and `$deleteFromPrimitiveList`; `finalizers` merge as a
//!   set; every other list is replaced, as in a merge patch. `$retainKeys` and
//!   `$setElementOrder` are ignored.
//! - Server-side apply is a merge patch of the applied object (created if missing): no
//!   `managedFields`, no field ownership, no conflicts. `managedFields` are never written.
//! - No schema validation or pruning of unknown fields; PaddleJobs are stored as given (the
//!   operator reads what it needs).
//! - `dryRun` is refused (400). Quota `status.used` is written shortly after the change, not
//!   within the admission; quota resources other than `pods`, `count/pods`, `cpu`,
//!   `memory`, `ephemeral-storage`, `requests.*` and `limits.*` are not enforced.
//! - No scheduler: pods stay Pending until bound (the Binding subresource, or created with
//!   `spec.nodeName`). Node allocatable is not enforced; [`FakeCluster::double_booked`]
//!   reports overcommitted nodes.
//! - The Job controller does not put the `batch.kubernetes.io/job-tracking` finalizer on pods
//!   (it counts them exactly under the lock instead), supports neither `podFailurePolicy`,
//!   `successPolicy`, `backoffLimitPerIndex` nor `ttlSecondsAfterFinished`, and deletes
//!   excess pods unbound first, then not ready, then newest.
//! - No node lifecycle controller: pods on a NotReady node keep their phase (and are not
//!   evicted) until it is Ready again.
//! - Events are recorded one object per occurrence (no aggregation, no series) and the
//!   oldest are dropped beyond [`FakeConfig::events_max`]; only core/v1 Events are served
//!   (not `events.k8s.io/v1`).

mod admission;
mod api;
mod ctl;
mod discovery;
mod errors;
mod http;
mod jobctl;
mod kinds;
mod kubelet;
mod ops;
mod paddle;
mod patch;
mod quantity;
mod quota;
pub mod scenario;
mod select;
mod store;
mod watch;
mod webhook;

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use serde_json::json;
use tokio::sync::{Notify, watch as channel};
use tokio::task::JoinHandle;

pub use errors::FakeError;
pub use kubelet::{EXIT_CODE, RUN_SECONDS, STOP_SECONDS};

use errors::ApiError;
use kinds::Kind;
use store::World;

/// How the fake behaves. `FakeConfig::default()` suits tests; benchmarks may raise
/// `watch_history`.
#[derive(Clone, Debug)]
pub struct FakeConfig {
    /// Changes kept per resource for watches to resume from (the real server's watch cache).
    pub watch_history: usize,
    /// How often a watch that asked for bookmarks gets one.
    pub bookmark_interval: Duration,
    /// A watch's length when the request gives no `timeoutSeconds`.
    pub watch_timeout: Duration,
    /// From a pod's binding to its start (not scaled).
    pub kubelet_start_delay: Duration,
    /// Scales every duration read from objects: sleeps, grace periods, stop seconds,
    /// `activeDeadlineSeconds`, back-offs. `0.01`: a 100 s sleep lasts 1 s.
    pub time_scale: f64,
    /// The largest page a list returns, whatever its `limit` (a list without `limit` is
    /// whole, as on a real server).
    pub list_page_max: usize,
    /// Record Events (Job controller, kubelet).
    pub events: bool,
    /// Events kept; the oldest are deleted beyond.
    pub events_max: usize,
    /// Run the stock Job controller.
    pub job_controller: bool,
    /// Run the kubelets.
    pub kubelet: bool,
    /// Serve the PaddleJob custom resource (as if its CRD were installed).
    pub paddlejobs: bool,
    /// Run a minimal Kubeflow training operator for PaddleJobs (pods per replica, suspend,
    /// status); see the crate documentation.
    pub paddle_operator: bool,
}

impl Default for FakeConfig {
    fn default() -> FakeConfig {
        FakeConfig {
            watch_history: 10_000,
            bookmark_interval: Duration::from_secs(5),
            watch_timeout: Duration::from_secs(1800),
            kubelet_start_delay: Duration::from_millis(10),
            time_scale: 1.0,
            list_page_max: 5000,
            events: true,
            events_max: 100_000,
            job_controller: true,
            kubelet: true,
            paddlejobs: true,
            paddle_operator: true,
        }
    }
}

/// The verbs a write fault can be limited to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteVerb {
    /// POST, including `pods/binding` and `pods/eviction`.
    Create,
    /// PUT.
    Update,
    Patch,
    /// DELETE of one object or a collection.
    Delete,
}

/// The answer a write fault gives instead of carrying the write out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultError {
    /// 409 `Conflict`, as for a stale resourceVersion.
    Conflict,
    /// 429 `TooManyRequests` with `Retry-After`.
    TooManyRequests { retry_after_seconds: u32 },
    /// 500 `InternalError`.
    Internal,
}

/// Fault injection, through [`FakeCluster::inject`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The next `count` write requests that match answer `error` and change nothing.
    /// `resource`: a plural (`"jobs"`, which also matches its subresources such as
    /// `jobs/status`) or `"plural/subresource"` (`"pods/binding"`); `None` matches all.
    /// `verb`: `None` matches all. Faults apply to API requests only, not to the fake's own
    /// controllers.
    FailWrites { error: FaultError, count: u32, resource: Option<String>, verb: Option<WriteVerb> },
    /// Forgets every resource's watch history and ends open watches with an ERROR 410: any
    /// watch from an older resourceVersion gets 410, so watchers list again.
    ExpireWatches,
    /// Breaks every open watch connection (clients resume from their last resourceVersion).
    DropWatches,
}

impl Fault {
    /// The next `count` writes answer 409 Conflict.
    pub fn conflicts(count: u32) -> Fault {
        Fault::FailWrites { error: FaultError::Conflict, count, resource: None, verb: None }
    }

    /// The next `count` writes answer 429 with `Retry-After: retry_after_seconds`.
    pub fn throttled(count: u32, retry_after_seconds: u32) -> Fault {
        Fault::FailWrites {
            error: FaultError::TooManyRequests { retry_after_seconds },
            count,
            resource: None,
            verb: None,
        }
    }

    /// The next `count` writes answer 500.
    pub fn internal_errors(count: u32) -> Fault {
        Fault::FailWrites { error: FaultError::Internal, count, resource: None, verb: None }
    }

    /// Limits a write fault to a resource (`"jobs"`, `"pods/binding"`).
    pub fn on(mut self, resource: &str) -> Fault {
        if let Fault::FailWrites { resource: r, .. } = &mut self {
            *r = Some(resource.to_owned());
        }
        self
    }

    /// Limits a write fault to a verb.
    pub fn verb(mut self, verb: WriteVerb) -> Fault {
        if let Fault::FailWrites { verb: v, .. } = &mut self {
            *v = Some(verb);
        }
        self
    }
}

/// What the fake has served and holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Requests by `"verb resource"`: `"list pods"`, `"watch jobs"`, `"create pods/binding"`,
    /// `"patch jobs/status"`.
    pub requests: BTreeMap<String, u64>,
    /// Writes committed (by clients and by the fake's controllers).
    pub writes: u64,
    /// Watches open now.
    pub watches_open: usize,
    /// Objects held, by resource (plural).
    pub objects: BTreeMap<String, usize>,
    /// The current resourceVersion.
    pub resource_version: u64,
}

struct ArmedFault {
    error: FaultError,
    left: u32,
    resource: Option<String>,
    verb: Option<WriteVerb>,
}

/// State shared by the HTTP handlers, the watches and the controllers.
pub(crate) struct Shared {
    pub world: Mutex<World>,
    pub wake: Arc<Notify>,
    pub config: Arc<FakeConfig>,
    pub addr: SocketAddr,
    requests: Mutex<HashMap<String, u64>>,
    pub watches_open: AtomicUsize,
    faults: Mutex<Vec<ArmedFault>>,
    pub watch_signal: channel::Sender<(u64, watch::Signal)>,
    pub shutdown: channel::Sender<bool>,
    pub webhook_clients: Mutex<HashMap<webhook::ClientKey, reqwest::Client>>,
    /// Where webhooks given as a Service (`namespace/name`) are reached.
    pub services: Mutex<HashMap<String, SocketAddr>>,
    pub review_seq: AtomicU64,
}

impl Shared {
    pub(crate) fn lock(&self) -> MutexGuard<'_, World> {
        self.world.lock().expect("the world's lock is never poisoned")
    }

    fn count(&self, verb: &str, resource: &str) {
        let mut requests = self.requests.lock().expect("never poisoned");
        let key = format!("{verb} {resource}");
        *requests.entry(key).or_default() += 1;
    }

    /// The error of the first armed fault matching this write, if any (using it up).
    fn take_fault(&self, verb: WriteVerb, resource: &str, name: &str) -> Option<ApiError> {
        let mut faults = self.faults.lock().expect("never poisoned");
        let position = faults.iter().position(|f| {
            f.left > 0
                && f.verb.is_none_or(|v| v == verb)
                && f.resource.as_deref().is_none_or(|r| {
                    r == resource
                        || (!r.contains('/') && resource.strip_prefix(r).is_some_and(|rest| rest.starts_with('/')))
                })
        })?;
        let fault = &mut faults[position];
        fault.left -= 1;
        let error = fault.error;
        if fault.left == 0 {
            faults.remove(position);
        }
        Some(match error {
            FaultError::Conflict => {
                let plural = resource.split('/').next().unwrap_or(resource);
                let kind = Kind::by_plural(plural).unwrap_or(Kind::Pod);
                ApiError::conflict(kind, name)
            }
            FaultError::TooManyRequests { retry_after_seconds } => ApiError::too_many_requests(retry_after_seconds),
            FaultError::Internal => ApiError::internal("injected fault"),
        })
    }
}

/// A running fake API server with its controllers.
pub struct FakeCluster {
    shared: Arc<Shared>,
    server: Option<JoinHandle<()>>,
    controllers: Option<JoinHandle<()>>,
}

impl FakeCluster {
    /// Binds `127.0.0.1:0` and serves on the current tokio runtime (multi-threaded or not).
    pub async fn start(config: FakeConfig) -> Result<FakeCluster, FakeError> {
        // reqwest (webhook calls) is built without a crypto provider: install ring's, as
        // everywhere else in Fairway. Failing means one is installed already.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.map_err(FakeError::Bind)?;
        let addr = listener.local_addr().map_err(FakeError::Bind)?;
        let config = Arc::new(config);
        let wake = Arc::new(Notify::new());
        let shared = Arc::new(Shared {
            world: Mutex::new(World::new(config.clone(), wake.clone())),
            wake,
            config,
            addr,
            requests: Mutex::new(HashMap::new()),
            watches_open: AtomicUsize::new(0),
            faults: Mutex::new(Vec::new()),
            watch_signal: channel::channel((0, watch::Signal::None)).0,
            shutdown: channel::channel(false).0,
            webhook_clients: Mutex::new(HashMap::new()),
            services: Mutex::new(HashMap::new()),
            review_seq: AtomicU64::new(0),
        });
        let app = http::router(shared.clone());
        let mut stop = shared.shutdown.subscribe();
        let server = tokio::spawn(async move {
            let stopped = async move {
                let _ = stop.wait_for(|s| *s).await;
            };
            if let Err(e) = axum::serve(listener, app).with_graceful_shutdown(stopped).await {
                tracing::warn!("the fake API server stopped: {e}");
            }
        });
        let controllers = tokio::spawn(ctl::run(shared.clone()));
        Ok(FakeCluster { shared, server: Some(server), controllers: Some(controllers) })
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.shared.addr)
    }

    /// A client configuration for the fake (namespace `default`, no credentials).
    pub fn kube_config(&self) -> kube::Config {
        let uri = self.url().parse().expect("an http URL with an IP address and port is a URI");
        kube::Config::new(uri)
    }

    /// A client of the fake.
    pub fn client(&self) -> kube::Client {
        kube::Client::try_from(self.kube_config()).expect("a plain-HTTP client needs no TLS setup and cannot fail")
    }

    /// A kubeconfig file pointing at the fake (for tools and subprocesses).
    pub fn kubeconfig_yaml(&self) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fairway-fake\n  cluster:\n    server: {}\ncontexts:\n- name: fairway-fake\n  context:\n    cluster: fairway-fake\n    user: fairway-fake\n    namespace: default\ncurrent-context: fairway-fake\nusers:\n- name: fairway-fake\n  user:\n    token: fake\n",
            self.url()
        )
    }

    /// Makes webhooks whose `clientConfig` names the Service `namespace/name` reach
    /// `addr` (a webhook server the test runs), as `https://NAME.NAMESPACE.svc:PORT/PATH`
    /// with that name resolving to `addr`: the serving certificate is verified for the
    /// Service's DNS name, as the real API server verifies it. The Service's own port is
    /// not used (the fake has no Services network).
    pub fn expose_service(&self, namespace: &str, name: &str, addr: SocketAddr) {
        self.shared.services.lock().expect("never poisoned").insert(format!("{namespace}/{name}"), addr);
    }

    /// Injects a fault (see [`Fault`]).
    pub fn inject(&self, fault: Fault) {
        match fault {
            Fault::FailWrites { error, count, resource, verb } => {
                if count > 0 {
                    self.shared.faults.lock().expect("never poisoned").push(ArmedFault {
                        error,
                        left: count,
                        resource,
                        verb,
                    });
                }
            }
            Fault::ExpireWatches => {
                self.shared.lock().expire_history();
                self.shared.watch_signal.send_modify(|(epoch, signal)| {
                    *epoch += 1;
                    *signal = watch::Signal::Expire;
                });
            }
            Fault::DropWatches => {
                self.shared.watch_signal.send_modify(|(epoch, signal)| {
                    *epoch += 1;
                    *signal = watch::Signal::Drop;
                });
            }
        }
    }

    /// Requests served, writes, open watches, objects held.
    pub fn stats(&self) -> Stats {
        let requests =
            self.shared.requests.lock().expect("never poisoned").iter().map(|(k, v)| (k.clone(), *v)).collect();
        let world = self.shared.lock();
        let objects = Kind::ALL
            .into_iter()
            .map(|k| (k.info().plural.to_owned(), world.table(k).objects.len()))
            .filter(|(_, n)| *n > 0)
            .collect();
        Stats {
            requests,
            writes: world.writes,
            watches_open: self.shared.watches_open.load(Ordering::Relaxed),
            objects,
            resource_version: world.rv,
        }
    }

    /// The nodes whose bound, non-terminal pods request more of a resource than the node's
    /// `status.allocatable` (`nvidia.com/gpu`, `cpu`, `memory`, …), one line each:
    /// `"gpu-3: nvidia.com/gpu requested 9, allocatable 8 (team-a/x-abcde, …)"`. Empty when
    /// no node is overcommitted.
    pub fn double_booked(&self) -> Vec<String> {
        let world = self.shared.lock();
        let mut out = Vec::new();
        for (node_key, node) in &world.table(Kind::Node).objects {
            let allocatable: BTreeMap<String, quantity::Milli> = node
                .value
                .pointer("/status/allocatable")
                .and_then(serde_json::Value::as_object)
                .into_iter()
                .flatten()
                .filter_map(|(r, q)| Some((r.clone(), quota::quantity_of(q)?)))
                .collect();
            let mut used: BTreeMap<String, quantity::Milli> = BTreeMap::new();
            let mut pods = Vec::new();
            for pod_key in world.pods_by_node.get(&node_key.name).into_iter().flatten() {
                let Some(pod) = world.get(Kind::Pod, pod_key) else { continue };
                let phase = pod.value.pointer("/status/phase").and_then(serde_json::Value::as_str).unwrap_or_default();
                if matches!(phase, "Succeeded" | "Failed") {
                    continue;
                }
                pods.push(pod_key.to_string());
                for (r, q) in quota::pod_resources(pod.value.get("spec")).0 {
                    *used.entry(r).or_default() += q;
                }
            }
            for (r, q) in &used {
                if let Some(a) = allocatable.get(r)
                    && q > a
                {
                    out.push(format!(
                        "{}: {r} requested {}, allocatable {} ({})",
                        node_key.name,
                        quantity::format(*q, false),
                        quantity::format(*a, false),
                        pods.join(", ")
                    ));
                }
            }
        }
        out
    }

    /// Stops serving (open watches end) and the controllers.
    pub async fn shutdown(mut self) {
        let _ = self.shared.shutdown.send(true);
        self.shared.wake.notify_one();
        if let Some(controllers) = self.controllers.take() {
            let _ = controllers.await;
        }
        if let Some(mut server) = self.server.take()
            && tokio::time::timeout(Duration::from_secs(5), &mut server).await.is_err()
        {
            server.abort();
        }
    }
}

impl Drop for FakeCluster {
    fn drop(&mut self) {
        // A cluster dropped without `shutdown` still stops serving.
        let _ = self.shared.shutdown.send(true);
    }
}

/// A GPU node as a kubelet with the NVIDIA device plugin registers it: `status.capacity` and
/// `allocatable` with `nvidia.com/gpu`, `cpu` (millicores) and `memory` (MiB), the GPU
/// feature-discovery labels (`nvidia.com/gpu.product`, `nvidia.com/gpu.count`,
/// `nvidia.com/gpu.present`), `kubernetes.io/hostname`, condition `Ready=True`, an
/// InternalIP address. Create it with the API (`Api::<Node>::create`): the fake keeps a
/// node's status on create, as the real server does for kubelets.
pub fn gpu_node(name: &str, gpus: u32, product: &str, cpu_millis: u64, memory_mib: u64) -> Node {
    let cpu = if cpu_millis.is_multiple_of(1000) { (cpu_millis / 1000).to_string() } else { format!("{cpu_millis}m") };
    let resources = json!({"cpu": cpu, "memory": format!("{memory_mib}Mi"), "nvidia.com/gpu": gpus.to_string(), "pods": "110", "ephemeral-storage": "500Gi"});
    let hash = name.bytes().fold(0u32, |h, b| h.wrapping_mul(31).wrapping_add(u32::from(b)));
    let ip = format!("10.0.{}.{}", (hash >> 8) % 256, hash % 254 + 1);
    let value = json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "nvidia.com/gpu.product": product,
                "nvidia.com/gpu.count": gpus.to_string(),
                "nvidia.com/gpu.present": "true",
            },
        },
        "spec": {},
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [{
                "type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status",
                "lastHeartbeatTime": store::now_rfc3339(), "lastTransitionTime": store::now_rfc3339(),
            }],
            "addresses": [{"type": "InternalIP", "address": ip}, {"type": "Hostname", "address": name}],
            "nodeInfo": {
                "architecture": "amd64", "bootID": "", "containerRuntimeVersion": "containerd://1.7.0",
                "kernelVersion": "6.8.0", "kubeProxyVersion": "", "kubeletVersion": "v1.33.0",
                "machineID": "", "operatingSystem": "linux", "osImage": "fake", "systemUUID": "",
            },
        },
    });
    serde_json::from_value(value).expect("a well-formed Node")
}
