//! The engine: the core driven by what the cluster says. No IO: watch events come in as
//! [`Input`]s, the core's decisions go out as [`Action`]s for the executor to carry out
//! against the API server, and what those writes change comes back through the watches.
//! Tested without a cluster.
//!
//! One step:
//! 1. `apply(input)`: update the mirror of the cluster (nodes, pods, workloads, priority
//!    classes, quotas, namespaces) and tell the core what changed. Until every watch has
//!    listed its objects once, nothing reaches the core; then `reconcile_all` rebuilds the
//!    core from the cluster (the `Restore` path) in a fixed order: nodes, classes, quotas,
//!    admitted workloads where they run, workloads being preempted (with their deadline),
//!    pods Fairway does not account for (as occupants), then pending workloads by creation
//!    time. Nothing is admitted twice: an admission is recorded on the workload itself.
//! 2. `cycle(now)`: one core cycle; its decisions become actions:
//!    - **Start** → `Admit`: record the placement on the workload and unsuspend it; the
//!      stock Job controller creates the pods, which are then bound to the chosen nodes
//!      (`Bind`), one per replica slot.
//!    - **Preempt** → `Suspend` the victim, recording for whom and its deadline: the Job
//!      controller deletes its pods with their `terminationGracePeriodSeconds`; once they
//!      are gone the victim goes back to the queue (its original place) and the preemptor's
//!      hold becomes its start.
//!    - **Requeued** (its node is gone) → `Suspend`; its pods elsewhere become occupants
//!      until they are gone.
//!
//!    With fair sharing, once a minute: `SaveRecentUsage`, each account's recent average for
//!    the next leader (`recent_usage.rs`; handed to the core at the rebuild of step 1).
//! 3. `status()`: the reasons of workloads whose answer to "why is it pending" changed, as
//!    conditions and Events (the executor paces them; they never delay an admission).
//!
//! **Occupants.** Every pod bound to a node and not terminated that no running managed
//! workload accounts for (another scheduler's pods, a workload Fairway does not manage, the
//! leftovers of a requeued one) is in the core as a running, non-preemptible job of its
//! namespace: its GPUs, CPU and memory are never given twice, and it counts against the
//! namespace's ResourceQuota as Kubernetes counts it.
//!
//! **Ends.** A workload leaves its GPUs only when its last pod is gone: finished
//! (`Complete`/`Failed`), preempted, or deleted. GPUs are never handed on while a pod of
//! the last holder may still run on them.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use fairway_core::{
    Config, Decision, Estimate, Event, ExitOutcome, GpuSet, JobId, JobSpec, JobStatus, Limits, NodeId, NodeSpec,
    PendingReason, Placement, PreemptCause, PreemptionPolicy, Quota, ReplicaPlacement, RestoredJob, RestoredRun,
    RestoredStop, Scheduler, StartEstimate, Time,
};
use fairway_server::api::FORECAST_JOBS_MAX;
use fairway_server::clock::time_text;
use fairway_spec::{AccountKind, Interner, ParseLimits, ParseOptions, PreemptionProtection, PriorityRef, ResolvedJob};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, ResourceQuota};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use serde_json::Value;

use crate::objects::{ClassInfo, NodeInfo, PodInfo, combine_quotas, quota_of};
use crate::settings::Settings;
use crate::workload::{Kind, Preemption, Workload};

/// Which watch an input comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Stream {
    Nodes,
    Pods,
    Jobs,
    PaddleJobs,
    Classes,
    Quotas,
    Namespaces,
}

impl Stream {
    pub const ALL: [Stream; 7] = [
        Stream::Nodes,
        Stream::Pods,
        Stream::Jobs,
        Stream::PaddleJobs,
        Stream::Classes,
        Stream::Quotas,
        Stream::Namespaces,
    ];
}

/// What a watch reports (kube's `watcher::Event`, with the object already read). Objects
/// travel by value: each is moved once, from its watch to the engine.
#[derive(Clone, Debug)]
#[allow(clippy::large_enum_variant)]
pub enum Input {
    /// A (re)list begins: objects not listed again before `Listed` are gone.
    Listing(Stream),
    /// The (re)list is complete.
    Listed(Stream),
    Node(Change<Node>),
    Pod(Change<Pod>),
    Workload(Change<Workload>),
    Class(Change<PriorityClass>),
    Quota(Change<ResourceQuota>),
    Namespace(Change<Namespace>),
}

#[derive(Clone, Debug)]
pub enum Change<T> {
    Applied(T),
    Deleted(T),
}

/// A workload to write to.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Target {
    pub kind: Kind,
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

/// What the executor is asked to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Record the placement (nodes per replica) and when (Unix ms), and unsuspend.
    Admit { target: Target, nodes: Vec<String>, at_ms: u64 },
    /// Bind a pod of an admitted workload to its node.
    Bind { namespace: String, pod: String, uid: String, node: String },
    /// Suspend: for a preemptor (`preemption`: who, the deadline, where its GPUs are held;
    /// recorded on the victim), or because it must not run unadmitted (`None`).
    Suspend { target: Target, preemption: Option<Preemption> },
    /// It waits again: forget its admission and preemption.
    Release { target: Target },
    /// The `FairwayAdmitted` condition.
    Condition { target: Target, admitted: bool, reason: String, message: String },
    /// An Event on the workload.
    Event { target: Target, warning: bool, reason: String, message: String },
    /// Fair sharing's recent averages (`recent_usage.rs`), into the ConfigMap of the
    /// controller's namespace.
    SaveRecentUsage { namespace: String, json: String },
}

impl Action {
    /// Status, events and fair sharing's memory: paced, and never ahead of admissions.
    pub fn is_background(&self) -> bool {
        matches!(self, Action::Condition { .. } | Action::Event { .. } | Action::SaveRecentUsage { .. })
    }
}

/// A managed workload the engine follows.
#[derive(Clone, Debug)]
struct Tracked {
    w: Workload,
    id: JobId,
    in_core: bool,
    /// Why it cannot be scheduled at all (its spec, its class), published once.
    refused: Option<String>,
    /// The node of each replica, once admitted, and the pod in it.
    slots: Vec<Slot>,
    /// Deleted by the user: it goes once its pods are gone.
    deleted: bool,
    /// Admitted, and not yet seen unsuspended: an older view of it (still suspended) is
    /// not someone suspending it.
    awaiting_admission: bool,
    /// Since when it waits (its creation, or its last requeue), Unix ms.
    queued_since_ms: u64,
    /// When it was preempted in the last hour (rule 1's hourly cap), oldest first: read
    /// from its annotation when first seen, then kept here and written with each preemption.
    preempted_at_ms: Vec<u64>,
}

/// The window of rule 1's cap on preemptions an hour.
const HOUR_MS: u64 = 3_600_000;

/// What was last said about a workload, to say it again only when it changes.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Said {
    /// Whether admitted, the reason and its message without the estimate: an Event is
    /// written only when this changes. The position and the expected start move with every
    /// job that starts ahead, and an Event each time would bury the ones that explain.
    reason: String,
    /// All of it, the estimate included: the condition is written when this changes.
    condition: String,
}

impl Said {
    /// From a `FairwayAdmitted` condition as written (an earlier leader's, say).
    fn of(admitted: bool, reason: &str, message: &str) -> Said {
        Said {
            reason: format!("{admitted}|{reason}|{}", without_estimate(message)),
            condition: format!("{admitted}|{reason}|{message}"),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Slot {
    node: String,
    pod: Option<String>,
}

/// The engine's counters, for metrics and benchmarks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EngineStats {
    /// Workloads queued (first time only).
    pub submissions: u64,
    pub admissions: u64,
    pub preemptions: u64,
    /// Preemptors admitted on GPUs freed elsewhere before their victims had stopped.
    pub preemptors_moved: u64,
    /// Admissions a cycle took back before carrying them out (the core's preemption rule 8).
    pub starts_taken_back: u64,
    pub binds: u64,
    pub occupants: u64,
}

pub struct Engine {
    settings: Settings,
    core: Scheduler,
    interner: Interner,
    nodes: BTreeMap<String, (NodeId, NodeInfo)>,
    node_names: BTreeMap<NodeId, String>,
    next_node: u32,
    /// Each node as the core has it (it may lag the node as seen, see `sync_node`).
    core_nodes: BTreeMap<NodeId, CoreNode>,
    /// Nodes whose size changed while work ran on them: resized once idle.
    resize_pending: BTreeSet<NodeId>,
    pods: HashMap<String, PodInfo>,
    pods_by_owner: HashMap<String, BTreeSet<String>>,
    workloads: HashMap<String, Tracked>,
    /// Workloads asking for GPUs that are not Fairway's (no `schedulerName`), by uid:
    /// those in opted-in namespaces escaped the webhook (made before the namespace was
    /// labelled, or before Fairway was installed) and are said once.
    unmanaged: BTreeMap<String, Unmanaged>,
    /// The uid of every tracked workload by its id (`job_id_of_uid`), in the core or not
    /// (refused, finished, or read before the start).
    uid_of: HashMap<JobId, String>,
    /// Occupant pods in the core, by pod uid.
    occupants: HashMap<String, JobId>,
    classes: BTreeMap<String, ClassInfo>,
    quotas: BTreeMap<String, BTreeMap<String, Quota>>,
    namespaces: BTreeMap<String, BTreeMap<String, String>>,
    /// Namespaces' fair-share weights other than 1 (their annotation).
    weights: BTreeMap<String, u32>,
    /// Namespaces' places in cohorts, from their annotations (`workload::cohort_member`).
    members: BTreeMap<String, (String, fairway_spec::MemberDoc)>,
    /// The places given to the core (namespaces whose cohort holds together).
    places: BTreeMap<String, fairway_core::NominalQuota>,
    /// Namespaces whose annotated place does not hold with the others', with why: in no
    /// cohort, and listed so (the owner of a namespace does not read the controller's log).
    places_left_out: BTreeMap<String, String>,
    /// Namespaces that name a cohort in annotations that cannot be read (a nominal quota
    /// that is not a number, ...), with the cohort they name, an empty place and why: in no
    /// cohort, and listed so under that cohort, as the ones above.
    members_unreadable: BTreeMap<String, (String, fairway_spec::MemberDoc, String)>,
    listed: BTreeSet<Stream>,
    /// Objects seen during a relist, by stream, to drop the rest at its end.
    relisting: BTreeMap<Stream, BTreeSet<String>>,
    /// The core was rebuilt from the cluster once every watch had listed.
    started: bool,
    dirty: bool,
    actions: Vec<Action>,
    /// What was last published per workload uid.
    published: HashMap<String, Said>,
    /// Workloads whose status may have changed since the last publication.
    touched: BTreeSet<String>,
    /// When every workload's status was last looked at (reasons' figures change without
    /// anything happening to the workload itself).
    swept_ms: u64,
    stats: EngineStats,
    observations: std::collections::VecDeque<Observation>,
    /// Fair sharing's recent averages as an earlier leader saved them, handed to the core
    /// once the workloads are restored (`recent_usage.rs`).
    saved_recent_usage: Option<crate::recent_usage::SavedRecentUsage>,
    /// When the recent averages were last handed out to be saved (ms).
    recent_usage_saved_at_ms: Option<u64>,
}

/// What metrics need beyond the counters, drained by whoever exports them.
#[derive(Clone, Debug, PartialEq)]
pub enum Observation {
    /// Admitted after waiting this long since it was (last) queued.
    Waited { tier: String, tenant: String, seconds: f64 },
    /// It ended (not a requeue).
    Finished { tier: String, succeeded: bool },
    /// It was asked to stop for a preemptor (priority or a cohort's reclaim: `cause`).
    Preempted { tier: String, tenant: String, cause: PreemptCause },
    /// A preempted run ended: the GPU-hours of work since its last checkpoint (or its
    /// admission) to the end of its last pod.
    Lost { tier: String, tenant: String, gpu_hours: f64 },
    /// One cycle of the core took this long (measured by the driver: the engine reads no
    /// clock).
    Cycle { seconds: f64 },
}

/// Observations kept until they are taken; the oldest go beyond (metrics not scraped).
const OBSERVATIONS_MAX: usize = 100_000;

/// The priority tier a workload is counted under in metrics.
pub fn tier_of(w: &Workload) -> &str {
    w.as_job.pointer("/spec/template/spec/priorityClassName").and_then(Value::as_str).unwrap_or("custom")
}

/// A workload asking for GPUs that Fairway does not schedule.
#[derive(Clone, Debug)]
struct Unmanaged {
    target: Target,
    /// Its Warning was published.
    said: bool,
}

/// A node as the core has it.
#[derive(Clone, Debug)]
struct CoreNode {
    capacity: fairway_core::Resources,
    gpu_model: String,
    drained: bool,
    /// The images last told to the core.
    images: Vec<String>,
}

/// Bit that marks an occupant's job id (managed workloads never have it).
const OCCUPANT: u64 = 1 << 62;
/// Job ids are 53 bits: they travel in JSON as exact numbers.
const ID_BITS: u64 = (1 << 53) - 1;

impl Engine {
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    pub fn new(settings: Settings) -> Engine {
        let limits = Limits::default();
        let core = Scheduler::new(Config { policy: policy_of(&settings), limits });
        Engine {
            settings,
            core,
            interner: Interner::new(),
            nodes: BTreeMap::new(),
            node_names: BTreeMap::new(),
            next_node: 0,
            core_nodes: BTreeMap::new(),
            resize_pending: BTreeSet::new(),
            pods: HashMap::new(),
            pods_by_owner: HashMap::new(),
            workloads: HashMap::new(),
            unmanaged: BTreeMap::new(),
            uid_of: HashMap::new(),
            occupants: HashMap::new(),
            classes: BTreeMap::new(),
            quotas: BTreeMap::new(),
            namespaces: BTreeMap::new(),
            weights: BTreeMap::new(),
            members: BTreeMap::new(),
            places: BTreeMap::new(),
            places_left_out: BTreeMap::new(),
            members_unreadable: BTreeMap::new(),
            listed: BTreeSet::new(),
            relisting: BTreeMap::new(),
            started: false,
            dirty: true,
            actions: Vec::new(),
            published: HashMap::new(),
            touched: BTreeSet::new(),
            swept_ms: 0,
            stats: EngineStats::default(),
            observations: std::collections::VecDeque::new(),
            saved_recent_usage: None,
            recent_usage_saved_at_ms: None,
        }
    }

    /// Fair sharing's recent averages as an earlier leader saved them: given to the core
    /// when it is rebuilt from the cluster (before that; ignored with fair sharing off).
    pub fn set_saved_recent_usage(&mut self, saved: crate::recent_usage::SavedRecentUsage) {
        self.saved_recent_usage = Some(saved);
    }

    /// The document of fair sharing's recent averages as of `now` (`recent_usage.rs`):
    /// `None` before the core is rebuilt from the cluster, or with fair sharing off.
    pub fn recent_usage_document(&self, now: u64) -> Option<crate::recent_usage::SavedRecentUsage> {
        if !self.started || self.settings.fair_share.is_none() {
            return None;
        }
        let accounts = self
            .core
            .recent_usage(Time(now))
            .into_iter()
            .filter_map(|(account, recent)| {
                let (kind @ (AccountKind::User | AccountKind::Project), name) = self.interner.account_name(account)?
                else {
                    return None;
                };
                Some(crate::recent_usage::SavedAccount {
                    kind: kind.as_str().to_owned(),
                    account: name.to_owned(),
                    gpu_milli: recent.gpu_milli,
                    cpu_millis: recent.cpu_millis,
                    memory_mib: recent.memory_mib,
                })
            })
            .collect();
        Some(crate::recent_usage::SavedRecentUsage::new(now, accounts))
    }

    /// Once the workloads are back in the core: the saved recent averages.
    fn restore_recent_usage(&mut self, now: u64) {
        let Some(saved) = self.saved_recent_usage.take() else { return };
        if self.settings.fair_share.is_none() {
            return;
        }
        for a in &saved.accounts {
            let Some(kind) = a.account_kind() else { continue };
            let Ok(account) = self.interner.account_of(kind, &a.account) else { continue };
            let event = Event::RestoreRecentUsage { account, recent: a.recent(), as_of: Time(saved.as_of_ms) };
            self.core_apply(event, now);
        }
    }

    /// Once a minute with fair sharing: the recent averages, to be saved.
    fn save_recent_usage_if_due(&mut self, now: u64) {
        let due = self.recent_usage_saved_at_ms.is_none_or(|at| now >= at + crate::recent_usage::SAVE_EVERY_MS);
        if !due {
            return;
        }
        let Some(saved) = self.recent_usage_document(now) else { return };
        self.recent_usage_saved_at_ms = Some(now);
        let namespace = self.settings.leader_election.namespace.clone();
        self.actions.push(Action::SaveRecentUsage { namespace, json: saved.to_json() });
    }

    pub fn stats(&self) -> EngineStats {
        self.stats
    }

    /// Waits, ends and cycle times since the last call.
    pub fn take_observations(&mut self) -> Vec<Observation> {
        self.observations.drain(..).collect()
    }

    /// The driver timed a cycle.
    pub fn observe_cycle(&mut self, seconds: f64) {
        self.observe(Observation::Cycle { seconds });
    }

    fn observe(&mut self, o: Observation) {
        if self.observations.len() >= OBSERVATIONS_MAX {
            self.observations.pop_front();
        }
        self.observations.push_back(o);
    }

    pub fn core(&self) -> &Scheduler {
        &self.core
    }

    /// Whether every watch has listed and the core was rebuilt from the cluster.
    pub fn started(&self) -> bool {
        self.started
    }

    /// The core's job id of a workload uid (a 53-bit hash: stable across restarts).
    pub fn job_id_of_uid(uid: &str) -> JobId {
        JobId(fnv1a(uid.as_bytes()) & ID_BITS)
    }

    /// A tracked workload by its id, whether the core holds it or not (refused, finished,
    /// or read before the start).
    pub fn workload(&self, id: JobId) -> Option<&Workload> {
        self.tracked(id).map(|t| &t.w)
    }

    /// Why the engine refused a tracked workload, if it did.
    pub fn refusal(&self, id: JobId) -> Option<&str> {
        self.tracked(id).and_then(|t| t.refused.as_deref())
    }

    fn tracked(&self, id: JobId) -> Option<&Tracked> {
        self.uid_of.get(&id).and_then(|uid| self.workloads.get(uid))
    }

    /// Every managed workload, with its id and whether the engine refused it (and why).
    pub fn workloads(&self) -> impl Iterator<Item = (JobId, &Workload, Option<&str>)> {
        self.workloads.values().map(|t| (t.id, &t.w, t.refused.as_deref()))
    }

    /// The namespaces the annotations put in a cohort, each with its cohort's name and its
    /// place, by namespace, and why it is left out where its place does not hold with the
    /// others' (it is then in no cohort).
    pub fn cohort_members(&self) -> impl Iterator<Item = (&str, &fairway_spec::MemberDoc, Option<&str>)> {
        let read = self.members.iter().filter_map(|(ns, (cohort, member))| {
            let left_out = self.places_left_out.get(ns).map(String::as_str);
            (self.places.contains_key(ns) || left_out.is_some()).then_some((cohort.as_str(), member, left_out))
        });
        let unreadable =
            self.members_unreadable.values().map(|(cohort, member, why)| (cohort.as_str(), member, Some(why.as_str())));
        read.chain(unreadable)
    }

    /// Since when a managed workload waits (its creation, or its last requeue), Unix ms.
    pub fn queued_since_ms(&self, id: JobId) -> Option<u64> {
        self.tracked(id).map(|t| t.queued_since_ms)
    }

    pub fn node_name(&self, id: NodeId) -> Option<&str> {
        self.node_names.get(&id).map(String::as_str)
    }

    pub fn nodes(&self) -> impl Iterator<Item = (&NodeId, &NodeInfo)> {
        self.nodes.values().map(|(id, info)| (id, info))
    }

    pub fn interner(&self) -> &Interner {
        &self.interner
    }

    /// Namespaces with a ResourceQuota.
    pub fn quota_namespaces(&self) -> impl Iterator<Item = String> + '_ {
        self.quotas.iter().filter(|(_, q)| !q.is_empty()).map(|(ns, _)| ns.clone())
    }

    /// The cluster's priority classes.
    pub fn classes(&self) -> impl Iterator<Item = (&String, &ClassInfo)> {
        self.classes.iter()
    }

    /// The actions produced since the last call.
    pub fn take_actions(&mut self) -> Vec<Action> {
        std::mem::take(&mut self.actions)
    }

    /// Whether a cycle is due.
    pub fn dirty(&self) -> bool {
        self.dirty
    }

    // ---- step 1: inputs --------------------------------------------------------------

    pub fn apply(&mut self, input: Input, now: u64) {
        match input {
            Input::Listing(stream) => {
                self.relisting.insert(stream, BTreeSet::new());
            }
            Input::Listed(stream) => self.listed(stream, now),
            Input::Node(change) => self.node_change(change, now),
            Input::Pod(change) => self.pod_change(change, now),
            Input::Workload(change) => self.workload_change(change, now),
            Input::Class(change) => self.class_change(change, now),
            Input::Quota(change) => self.quota_change(change, now),
            Input::Namespace(change) => {
                self.namespace_change(change, now);
                if self.started {
                    self.say_unmanaged();
                }
            }
        }
    }

    fn seen(&mut self, stream: Stream, key: &str) {
        if let Some(seen) = self.relisting.get_mut(&stream) {
            seen.insert(key.to_owned());
        }
    }

    /// A (re)list ended: what it did not list is gone.
    fn listed(&mut self, stream: Stream, now: u64) {
        let seen = self.relisting.remove(&stream).unwrap_or_default();
        let gone: Vec<String> = match stream {
            Stream::Nodes => self.nodes.keys().filter(|k| !seen.contains(*k)).cloned().collect(),
            Stream::Pods => self.pods.keys().filter(|k| !seen.contains(*k)).cloned().collect(),
            Stream::Jobs | Stream::PaddleJobs => {
                let kind = if stream == Stream::Jobs { Kind::Job } else { Kind::PaddleJob };
                self.unmanaged.retain(|uid, u| u.target.kind != kind || seen.contains(uid));
                self.workloads
                    .values()
                    .filter(|t| t.w.kind == kind && !seen.contains(&t.w.uid))
                    .map(|t| t.w.uid.clone())
                    .collect()
            }
            Stream::Classes => self.classes.keys().filter(|k| !seen.contains(*k)).cloned().collect(),
            Stream::Quotas => self
                .quotas
                .iter()
                .flat_map(|(ns, qs)| qs.keys().map(move |n| format!("{ns}/{n}")))
                .filter(|k| !seen.contains(k))
                .collect(),
            Stream::Namespaces => self.namespaces.keys().filter(|k| !seen.contains(*k)).cloned().collect(),
        };
        for key in gone {
            match stream {
                Stream::Nodes => self.node_gone(&key, now),
                Stream::Pods => self.pod_gone(&key, now),
                Stream::Jobs | Stream::PaddleJobs => self.workload_gone(&key, now),
                Stream::Classes => {
                    self.classes.remove(&key);
                }
                Stream::Quotas => {
                    if let Some((ns, name)) = key.split_once('/') {
                        let ns = ns.to_owned();
                        if let Some(qs) = self.quotas.get_mut(&ns) {
                            qs.remove(name);
                        }
                        self.push_quota(&ns, now);
                    }
                }
                Stream::Namespaces => {
                    self.namespaces.remove(&key);
                    self.set_member(&key, None, now);
                }
            }
        }
        self.listed.insert(stream);
        if !self.started && Stream::ALL.iter().all(|s| self.listed.contains(s)) {
            self.reconcile_all(now);
        }
    }

    fn node_change(&mut self, change: Change<Node>, now: u64) {
        let (node, deleted) = match change {
            Change::Applied(n) => (n, false),
            Change::Deleted(n) => (n, true),
        };
        let Some(info) = NodeInfo::of(&node, &self.settings) else { return };
        self.seen(Stream::Nodes, &info.name);
        if deleted {
            self.node_gone(&info.name.clone(), now);
            return;
        }
        match self.nodes.get(&info.name) {
            Some((_, old)) if *old == info => {}
            Some((id, _)) => {
                let id = *id;
                self.nodes.insert(info.name.clone(), (id, info));
                if self.started {
                    self.sync_node(id, now);
                }
            }
            None => {
                let id = NodeId(self.next_node);
                self.next_node += 1;
                self.nodes.insert(info.name.clone(), (id, info.clone()));
                self.node_names.insert(id, info.name.clone());
                if self.started {
                    self.core_node_added(id, &info, now);
                    // Pods bound to it before it was seen can now be accounted for.
                    self.account_unaccounted_pods(now);
                }
            }
        }
    }

    /// Brings the core's node in line with the node as last seen. The core's nodes do not
    /// change size: a node whose GPUs, CPU, memory or GPU model changed is taken out and in
    /// again, but only once nothing runs on it. Until then it takes no new work and keeps
    /// what runs there: a device plugin that restarts (its GPUs at 0 for a moment, then
    /// back) requeues nobody, and if the node comes back as it was, nothing happened.
    fn sync_node(&mut self, id: NodeId, now: u64) {
        let Some(info) = self.node_names.get(&id).and_then(|n| self.nodes.get(n)).map(|(_, i)| i.clone()) else {
            return;
        };
        let Some(core) = self.core_nodes.get(&id).cloned() else {
            self.core_node_added(id, &info, now);
            return;
        };
        if core.capacity != info.capacity || core.gpu_model != info.gpu_model {
            if self.core.node_idle(id) == Some(true) {
                self.resize_pending.remove(&id);
                self.core_node_removed(id, now);
                self.core_node_added(id, &info, now);
            } else {
                self.resize_pending.insert(id);
                self.set_core_drained(id, true, now);
            }
            return;
        }
        self.resize_pending.remove(&id);
        self.set_core_drained(id, info.drained, now);
        self.set_core_images(id, &info.images, now);
    }

    fn set_core_drained(&mut self, id: NodeId, drained: bool, now: u64) {
        let Some(core) = self.core_nodes.get_mut(&id) else { return };
        if core.drained == drained {
            return;
        }
        core.drained = drained;
        let event = if drained { Event::NodeDrained(id) } else { Event::NodeUncordoned(id) };
        self.core_apply(event, now);
    }

    fn node_gone(&mut self, name: &str, now: u64) {
        let Some((id, _)) = self.nodes.remove(name) else { return };
        if self.started {
            self.core_node_removed(id, now);
        }
    }

    fn core_node_added(&mut self, id: NodeId, info: &NodeInfo, now: u64) {
        let Ok(gpu_model) = self.interner.gpu_model(&info.gpu_model) else { return };
        let spec = NodeSpec { id, gpu_model, capacity: info.capacity };
        self.core_apply(Event::NodeAdded(spec), now);
        let core =
            CoreNode { capacity: info.capacity, gpu_model: info.gpu_model.clone(), drained: false, images: vec![] };
        self.core_nodes.insert(id, core);
        self.set_core_drained(id, info.drained, now);
        self.set_core_images(id, &info.images, now);
    }

    /// Tell the core which images a node holds now (image locality), when that changed.
    fn set_core_images(&mut self, id: NodeId, images: &[String], now: u64) {
        let Some(core) = self.core_nodes.get_mut(&id) else { return };
        if core.images == images {
            return;
        }
        core.images = images.to_vec();
        let ids = images.iter().filter_map(|i| self.interner.image(i).ok()).collect();
        self.core_apply(Event::NodeImages { node: id, images: ids }, now);
    }

    fn core_node_removed(&mut self, id: NodeId, now: u64) {
        // Occupants on it are gone with it: the core removes them from the node and requeues
        // them as if they were jobs; they are not, so they leave the core.
        let on_node: Vec<(String, JobId)> = self
            .occupants
            .iter()
            .filter(|(_, job)| {
                matches!(self.core.job_status(**job), Some(JobStatus::Running { placement, .. })
                    if placement.replicas().iter().any(|r| r.node == id))
            })
            .map(|(p, j)| (p.clone(), *j))
            .collect();
        self.core_apply(Event::NodeRemoved(id), now);
        self.core_nodes.remove(&id);
        self.resize_pending.remove(&id);
        for (pod, job) in on_node {
            self.occupants.remove(&pod);
            let _ = self.core.apply(Event::Cancel(job), Time(now));
        }
    }

    fn pod_change(&mut self, change: Change<Pod>, now: u64) {
        let (pod, deleted) = match change {
            Change::Applied(p) => (p, false),
            Change::Deleted(p) => (p, true),
        };
        let Some(info) = PodInfo::of(&pod, &self.settings) else { return };
        self.seen(Stream::Pods, &info.uid);
        if deleted {
            self.pod_gone(&info.uid.clone(), now);
            return;
        }
        if let Some(owner) = &info.owner_uid {
            self.pods_by_owner.entry(owner.clone()).or_default().insert(info.uid.clone());
        }
        let uid = info.uid.clone();
        self.pods.insert(uid.clone(), info);
        if self.started {
            self.pod_updated(&uid, now);
        }
    }

    fn pod_gone(&mut self, uid: &str, now: u64) {
        let Some(info) = self.pods.remove(uid) else { return };
        if let Some(owner) = &info.owner_uid
            && let Some(set) = self.pods_by_owner.get_mut(owner)
        {
            set.remove(uid);
            if set.is_empty() {
                self.pods_by_owner.remove(owner);
            }
        }
        if !self.started {
            return;
        }
        self.occupant_gone(uid, now);
        if let Some(owner) = info.owner_uid {
            self.free_slot(&owner, uid);
            self.check_workload(&owner, now);
        }
    }

    /// A pod changed: bind it, free its slot, or account for it as an occupant.
    fn pod_updated(&mut self, uid: &str, now: u64) {
        let info = self.pods[uid].clone();
        let covered = info.owner_uid.as_deref().is_some_and(|o| self.covers(o));
        if covered {
            let owner = info.owner_uid.clone().expect("covered");
            if info.terminal {
                self.free_slot(&owner, uid);
            } else if info.node.is_none() && !info.deleting {
                self.bind(&owner, &info);
            }
            self.check_workload(&owner, now);
        } else if info.terminal || info.node.is_none() {
            self.occupant_gone(uid, now);
            if let Some(owner) = &info.owner_uid {
                self.check_workload(owner, now);
            }
        } else {
            self.ensure_occupant(uid, now);
        }
    }

    /// Whether a workload's pods are accounted for by its own placement in the core.
    fn covers(&self, owner: &str) -> bool {
        let Some(t) = self.workloads.get(owner) else { return false };
        t.in_core
            && matches!(
                self.core.job_status(t.id),
                Some(JobStatus::Running { .. } | JobStatus::Preempting { .. } | JobStatus::Stopping { .. })
            )
    }

    /// Binds an unbound pod of an admitted workload to the first replica slot without one.
    fn bind(&mut self, owner: &str, pod: &PodInfo) {
        let Some(t) = self.workloads.get_mut(owner) else { return };
        if t.slots.iter().any(|s| s.pod.as_deref() == Some(pod.uid.as_str())) {
            return;
        }
        let Some(slot) = t.slots.iter_mut().find(|s| s.pod.is_none()) else { return };
        slot.pod = Some(pod.uid.clone());
        self.stats.binds += 1;
        self.actions.push(Action::Bind {
            namespace: pod.namespace.clone(),
            pod: pod.name.clone(),
            uid: pod.uid.clone(),
            node: slot.node.clone(),
        });
    }

    /// A pod of an admitted workload ended or went: its slot takes the next pod waiting to
    /// be bound, if any (the Job controller may have made the replacement while the old
    /// pod was still terminating, when no slot was free).
    fn free_slot(&mut self, owner: &str, pod: &str) {
        let Some(t) = self.workloads.get_mut(owner) else { return };
        let mut freed = false;
        for slot in t.slots.iter_mut().filter(|s| s.pod.as_deref() == Some(pod)) {
            slot.pod = None;
            freed = true;
        }
        if !freed || !self.covers(owner) {
            return;
        }
        let waiting: Vec<PodInfo> = self
            .pods_by_owner
            .get(owner)
            .into_iter()
            .flatten()
            .filter_map(|p| self.pods.get(p))
            .filter(|p| p.uid != pod && p.node.is_none() && !p.terminal && !p.deleting)
            .cloned()
            .collect();
        for p in waiting {
            self.bind(owner, &p);
        }
    }

    /// Pods that hold a node's resources and that no running workload accounts for.
    fn ensure_occupant(&mut self, uid: &str, now: u64) {
        if self.occupants.contains_key(uid) {
            return;
        }
        let info = &self.pods[uid];
        let Some(node_name) = &info.node else { return };
        let Some((node, _)) = self.nodes.get(node_name).map(|(id, info)| (*id, info.clone())) else { return };
        let free = self.core.node_free_slots(node).unwrap_or(GpuSet::EMPTY);
        if free.len() < info.requests.gpus {
            tracing::warn!(
                pod = %format!("{}/{}", info.namespace, info.name),
                node = %node_name,
                "a pod holds GPUs that Fairway had given to others: the node is overcommitted until one of them ends"
            );
            return;
        }
        let gpus = free.lowest(info.requests.gpus);
        let id = JobId((fnv1a(uid.as_bytes()) & ID_BITS) | OCCUPANT);
        let Ok(project) = self.interner.account_of(AccountKind::Project, &info.namespace) else { return };
        let mut spec = JobSpec::new(id, i32::MAX, info.requests);
        spec.preemptible = false;
        spec.preemption_policy = PreemptionPolicy::Never;
        spec.user = project;
        spec.project = project;
        let restored = RestoredJob {
            spec,
            submitted_at: Time(now),
            runtime_done_ms: 0,
            preemptions: 0,
            preempted_at: Vec::new(),
            last_checkpoint: None,
            running: Some(RestoredRun {
                placement: Placement::new(vec![ReplicaPlacement { node, gpus }]),
                started_at: Time(now),
                stopping: None,
            }),
        };
        match self.core.apply(Event::Restore(restored), Time(now)) {
            Ok(()) => {
                self.occupants.insert(uid.to_owned(), id);
                self.stats.occupants += 1;
                self.dirty = true;
            }
            Err(e) => tracing::warn!("cannot account for pod {uid}: {e}"),
        }
    }

    fn occupant_gone(&mut self, uid: &str, now: u64) {
        if let Some(id) = self.occupants.remove(uid) {
            self.core_apply(Event::Exited { job: id, outcome: ExitOutcome::Succeeded }, now);
        }
    }

    /// Pods bound before their node was known.
    fn account_unaccounted_pods(&mut self, now: u64) {
        let candidates: Vec<String> = self
            .pods
            .values()
            .filter(|p| p.node.is_some() && !p.terminal && !self.occupants.contains_key(&p.uid))
            .filter(|p| !p.owner_uid.as_deref().is_some_and(|o| self.covers(o)))
            .map(|p| p.uid.clone())
            .collect();
        for uid in candidates {
            self.ensure_occupant(&uid, now);
        }
    }

    fn workload_change(&mut self, change: Change<Workload>, now: u64) {
        let (w, deleted) = match change {
            Change::Applied(w) => (w, false),
            Change::Deleted(w) => (w, true),
        };
        let stream = if w.kind == Kind::Job { Stream::Jobs } else { Stream::PaddleJobs };
        self.seen(stream, &w.uid);
        if deleted {
            self.unmanaged.remove(&w.uid);
            self.workload_gone(&w.uid.clone(), now);
            return;
        }
        if !self.is_managed(&w) && !self.workloads.contains_key(&w.uid) {
            self.unmanaged_change(&w);
            return;
        }
        self.unmanaged.remove(&w.uid);
        let uid = w.uid.clone();
        match self.workloads.get_mut(&uid) {
            Some(t) => {
                if !w.suspended {
                    t.awaiting_admission = false;
                }
                t.w = w;
            }
            None => {
                // What an earlier leader said is not said again (unless it changes).
                if let Some(c) = &w.admitted_condition {
                    self.published.entry(uid.clone()).or_insert_with(|| Said::of(c.admitted, &c.reason, &c.message));
                }
                let id = Engine::job_id_of_uid(&uid);
                let preempted_at_ms = w.preempted_at_ms();
                self.uid_of.insert(id, uid.clone());
                self.workloads.insert(
                    uid.clone(),
                    Tracked {
                        w,
                        id,
                        in_core: false,
                        refused: None,
                        slots: Vec::new(),
                        deleted: false,
                        awaiting_admission: false,
                        queued_since_ms: 0,
                        preempted_at_ms,
                    },
                );
            }
        }
        if self.started {
            self.check_workload(&uid, now);
        }
    }

    fn workload_gone(&mut self, uid: &str, now: u64) {
        let Some(t) = self.workloads.get_mut(uid) else { return };
        t.deleted = true;
        if !self.started {
            return;
        }
        let (id, in_core) = (t.id, t.in_core);
        if in_core {
            // Pending: gone at once. Running or stopping: gone once its pods are.
            self.core_apply(Event::Cancel(id), now);
        }
        self.check_workload(uid, now);
    }

    /// Follows a workload Fairway does not schedule, to say so if it escaped the webhook.
    fn unmanaged_change(&mut self, w: &Workload) {
        if w.finished.is_some()
            || w.opted_out
            || !crate::webhook::asks_for(&w.as_job["spec"], &self.settings.gpu_resource)
        {
            self.unmanaged.remove(&w.uid);
            return;
        }
        self.unmanaged.entry(w.uid.clone()).or_insert_with(|| Unmanaged { target: target_of(w), said: false });
        if self.started {
            self.say_unmanaged();
        }
    }

    /// A Warning on each workload of an opted-in namespace that Fairway does not schedule
    /// (once per workload and controller): it runs outside priorities, preemption and
    /// quotas, and nothing else would tell its owner.
    fn say_unmanaged(&mut self) {
        let scheduler = self.settings.scheduler_name.clone();
        let mut said = Vec::new();
        for (uid, u) in &self.unmanaged {
            if u.said || !self.namespace_opted_in(&u.target.namespace) {
                continue;
            }
            said.push(uid.clone());
            let (field, suspend) = match u.target.kind {
                Kind::Job => ("spec.template.spec.schedulerName", "spec.suspend"),
                Kind::PaddleJob => ("each role's template.spec.schedulerName", "spec.runPolicy.suspend"),
            };
            self.actions.push(Action::Event {
                target: u.target.clone(),
                warning: true,
                reason: "NotManaged".into(),
                message: format!(
                    "asks for GPUs in a namespace managed by Fairway but was not handed to it \
                     (made before the namespace was labelled or before Fairway was installed): \
                     kube-scheduler places it, outside Fairway's priorities, preemption and quotas; \
                     recreate it, or set {field}: {scheduler} and {suspend}: true"
                ),
            });
        }
        for uid in said {
            if let Some(u) = self.unmanaged.get_mut(&uid) {
                u.said = true;
            }
        }
    }

    /// Workloads asking for GPUs in opted-in namespaces that Fairway does not schedule.
    pub fn unmanaged_in_managed_namespaces(&self) -> usize {
        self.unmanaged.values().filter(|u| self.namespace_opted_in(&u.target.namespace)).count()
    }

    /// Is this workload Fairway's to schedule?
    fn is_managed(&self, w: &Workload) -> bool {
        w.scheduler_name.as_deref() == Some(self.settings.scheduler_name.as_str())
    }

    /// Brings one workload's place in the core in line with the cluster.
    fn check_workload(&mut self, uid: &str, now: u64) {
        let Some(t) = self.workloads.get(uid) else { return };
        self.touched.insert(uid.to_owned());
        let (id, in_core, live) = (t.id, t.in_core, self.live_pods(uid));
        if !in_core {
            if t.deleted {
                if live == 0 {
                    self.forget(uid);
                }
                return;
            }
            if t.w.paused() && !t.w.suspended && t.w.finished.is_none() {
                // Paused, and unsuspended by someone else: it does not run unadmitted.
                let target = target_of(&t.w);
                self.actions.push(Action::Suspend { target, preemption: None });
            }
            if t.w.finished.is_none() && t.refused.is_none() && !t.w.paused() {
                self.submit(uid, now);
            }
            return;
        }
        let status = self.core.job_status(id).map(|s| match s {
            JobStatus::Pending { .. } => 'p',
            JobStatus::Running { .. } => 'r',
            JobStatus::Preempting { .. } => 'x',
            JobStatus::Stopping { .. } => 's',
        });
        let t = &self.workloads[uid];
        match status {
            None => {
                // The core let it go (a pending one cancelled).
                let deleted = t.deleted;
                self.workloads.get_mut(uid).expect("present").in_core = false;
                if deleted && live == 0 {
                    self.forget(uid);
                }
            }
            Some('p') if t.w.paused() && !t.deleted => {
                // Paused while it waits: out of the queue (a hold it had is let go).
                self.core_apply(Event::Cancel(id), now);
                self.check_workload(uid, now);
            }
            Some('r') if t.w.paused() && !t.w.suspended && t.w.finished.is_none() => {
                // Paused while it runs: it stops as a victim does, and then leaves the queue.
                let target = target_of(&t.w);
                self.actions.push(Action::Suspend { target, preemption: None });
            }
            Some('p') if !t.w.suspended && !t.deleted => {
                // Unsuspended by someone else: Fairway admits it.
                let target = target_of(&t.w);
                self.actions.push(Action::Suspend { target, preemption: None });
            }
            Some('r') if t.w.finished.is_some() && live == 0 => {
                let outcome = match t.w.finished {
                    Some(crate::workload::Finished::Succeeded) => ExitOutcome::Succeeded,
                    _ => ExitOutcome::Failed,
                };
                self.exited(uid, outcome, now);
            }
            Some('r') if t.w.suspended && live == 0 && !t.awaiting_admission && t.w.admission().is_some() => {
                // Suspended under it by someone else, and its pods are gone: it waits again.
                self.exited(uid, ExitOutcome::Requeue, now);
            }
            Some('x') if live == 0 => self.exited(uid, ExitOutcome::Requeue, now),
            Some('s') if live == 0 => self.exited(uid, ExitOutcome::Failed, now),
            _ => {}
        }
    }

    /// Pods of a workload that still hold resources.
    fn live_pods(&self, uid: &str) -> usize {
        self.pods_by_owner
            .get(uid)
            .map_or(0, |pods| pods.iter().filter(|p| self.pods.get(*p).is_some_and(|p| !p.terminal)).count())
    }

    fn exited(&mut self, uid: &str, outcome: ExitOutcome, now: u64) {
        let t = self.workloads.get_mut(uid).expect("checked");
        let id = t.id;
        t.slots.clear();
        let lost = self.lost_work(uid, now);
        if self.core.apply(Event::Exited { job: id, outcome }, Time(now)).is_err() {
            return;
        }
        if let Some(lost) = lost {
            self.observe(lost);
        }
        self.dirty = true;
        let requeued = matches!(self.core.job_status(id), Some(JobStatus::Pending { .. }));
        let t = self.workloads.get_mut(uid).expect("checked");
        if requeued {
            t.queued_since_ms = now;
            let paused = t.w.paused();
            self.actions.push(Action::Release { target: target_of(&t.w) });
            if paused {
                // Stopped because it was paused: it leaves the queue before a cycle can
                // admit it again.
                self.check_workload(uid, now);
            }
        } else {
            if matches!(outcome, ExitOutcome::Succeeded | ExitOutcome::Failed) && t.w.finished.is_some() {
                let end = Observation::Finished {
                    tier: tier_of(&t.w).to_owned(),
                    succeeded: outcome == ExitOutcome::Succeeded,
                };
                self.observe(end);
            }
            let t = self.workloads.get_mut(uid).expect("checked");
            t.in_core = false;
            if t.deleted || t.w.finished.is_some() {
                // Finished: nothing more to do; deleted: forgotten with its last pod.
                if t.deleted {
                    self.forget(uid);
                }
            }
        }
    }

    /// If the workload is being preempted: the work its run loses, from its last
    /// checkpoint (or its admission) to `now`, in GPU-hours.
    fn lost_work(&self, uid: &str, now: u64) -> Option<Observation> {
        let t = &self.workloads[uid];
        if !matches!(self.core.job_status(t.id), Some(JobStatus::Preempting { .. })) {
            return None;
        }
        let gpus = self.core.job_spec(t.id)?.total().gpus;
        let started = t.w.admitted_at_ms().unwrap_or(now).min(now);
        let saved = t.w.checkpointed_at_ms().filter(|&c| c >= started && c <= now).unwrap_or(started);
        let gpu_hours = f64::from(gpus) * (now - saved) as f64 / 3_600_000.0;
        Some(Observation::Lost { tier: tier_of(&t.w).into(), tenant: t.w.namespace.clone(), gpu_hours })
    }

    fn forget(&mut self, uid: &str) {
        if let Some(t) = self.workloads.remove(uid) {
            // Ids are hashes of uids: another uid may have taken this one's.
            if self.uid_of.get(&t.id).is_some_and(|u| u == uid) {
                self.uid_of.remove(&t.id);
            }
            self.published.remove(uid);
        }
    }

    /// A managed workload enters the core, pending, at its creation time.
    fn submit(&mut self, uid: &str, now: u64) {
        let (w, id) = (self.workloads[uid].w.clone(), self.workloads[uid].id);
        let preempted_at_ms = self.workloads[uid].preempted_at_ms.clone();
        let spec = match self.core_spec(&w, id) {
            Ok(spec) => spec,
            Err(why) => {
                let t = self.workloads.get_mut(uid).expect("present");
                let target = target_of(&t.w);
                t.refused = Some(why.clone());
                self.actions.push(Action::Event {
                    target: target.clone(),
                    warning: true,
                    reason: "Unschedulable".into(),
                    message: why.clone(),
                });
                self.actions.push(Action::Condition {
                    target,
                    admitted: false,
                    reason: "Invalid".into(),
                    message: why,
                });
                return;
            }
        };
        let restored = RestoredJob {
            spec,
            submitted_at: Time(w.created_ms),
            runtime_done_ms: 0,
            preemptions: 0,
            preempted_at: preempted_at_ms.iter().copied().map(Time).collect(),
            last_checkpoint: None,
            running: None,
        };
        let suspended = w.suspended;
        let target = target_of(&w);
        match self.core.apply(Event::Restore(restored), Time(now)) {
            Ok(()) => {
                let t = self.workloads.get_mut(uid).expect("present");
                t.in_core = true;
                t.queued_since_ms = w.created_ms;
                self.stats.submissions += 1;
                self.dirty = true;
                if !suspended {
                    self.actions.push(Action::Suspend { target, preemption: None });
                }
            }
            Err(e) => tracing::warn!("cannot queue {}: {e}", target.name),
        }
    }

    /// The core's job of a workload: read as the standalone server reads a `batch/v1` Job,
    /// with its priority from the cluster's PriorityClasses.
    fn core_spec(&mut self, w: &Workload, id: JobId) -> Result<JobSpec, String> {
        let as_job = placement_constraints(&w.as_job, &self.settings.gpu_model_labels)?;
        let bytes = serde_json::to_vec(&as_job).map_err(|e| e.to_string())?;
        let parsed = fairway_spec::parse_documents_with(&bytes, &ParseLimits::default(), &ParseOptions::cluster())
            .map_err(|errors| {
                errors.iter().map(|e| format!("{}: {}", e.path, e.reason)).collect::<Vec<_>>().join("; ")
            })?;
        let mut doc = parsed.jobs.into_iter().next().ok_or("not a job")?;
        doc.resources.gpu_milli = crate::workload::gpu_share_of(&as_job, doc.replicas, &self.settings)?;
        let class = match &doc.priority {
            PriorityRef::Class(name) => match self.classes.get_key_value(name) {
                Some(found) => Some(found),
                None => return Err(format!("priorityClassName: no PriorityClass {name:?} in the cluster")),
            },
            // Kubernetes: the global default class, else priority 0.
            _ => self.classes.iter().find(|(_, c)| c.global_default),
        };
        let (priority, class, policy, protection) = match class {
            Some((name, c)) => {
                let protection = c.protection.clone().map_err(|e| format!("PriorityClass {name:?}: {e}"))?;
                (c.value, Some(name.clone()), c.policy, protection)
            }
            None => (0, None, PreemptionPolicy::PreemptLowerPriority, PreemptionProtection::default()),
        };
        let preemption_policy = doc.preemption_policy.map_or(policy, PreemptionPolicy::from);
        let resolved = ResolvedJob { doc, priority, priority_class: class, preemption_policy, protection };
        let mut spec = resolved.to_core(id, &mut self.interner).map_err(|e| format!("{}: {}", e.path, e.reason))?;
        // Kubernetes enforces activeDeadlineSeconds itself: to the core it is what a run is
        // expected to last at most (reservations count on it).
        spec.runtime_estimate_ms = spec.max_runtime_ms.take();
        // The project is the namespace: its ResourceQuota is its cap.
        spec.project = self.interner.account_of(AccountKind::Project, &w.namespace).map_err(|e| e.to_string())?;
        if let Some(user) = resolved_user(&resolved) {
            spec.user = self.interner.account_of(AccountKind::User, user).map_err(|e| e.to_string())?;
        } else {
            spec.user = spec.project;
        }
        Ok(spec)
    }

    fn class_change(&mut self, change: Change<PriorityClass>, now: u64) {
        match change {
            Change::Applied(c) => {
                let Some(name) = c.metadata.name.clone() else { return };
                self.seen(Stream::Classes, &name);
                let new = ClassInfo::of(&c);
                if self.classes.insert(name.clone(), new).is_none() && self.started {
                    // Workloads refused for naming it may now be queued.
                    let waiting: Vec<String> = self
                        .workloads
                        .values()
                        .filter(|t| t.refused.as_deref().is_some_and(|r| r.contains(&format!("{name:?}"))))
                        .map(|t| t.w.uid.clone())
                        .collect();
                    for uid in waiting {
                        self.workloads.get_mut(&uid).expect("present").refused = None;
                        self.check_workload(&uid, now);
                    }
                }
            }
            Change::Deleted(c) => {
                if let Some(name) = &c.metadata.name {
                    self.classes.remove(name);
                }
            }
        }
    }

    fn quota_change(&mut self, change: Change<ResourceQuota>, now: u64) {
        let (q, deleted) = match change {
            Change::Applied(q) => (q, false),
            Change::Deleted(q) => (q, true),
        };
        let (Some(ns), Some(name)) = (q.metadata.namespace.clone(), q.metadata.name.clone()) else { return };
        self.seen(Stream::Quotas, &format!("{ns}/{name}"));
        let entry = self.quotas.entry(ns.clone()).or_default();
        if deleted {
            entry.remove(&name);
        } else {
            entry.insert(name, quota_of(&q, &self.settings));
        }
        if self.started {
            self.push_quota(&ns, now);
        }
    }

    /// A namespace's caps, as the core's quota of its project.
    fn push_quota(&mut self, namespace: &str, now: u64) {
        let quota = self.namespace_quota(namespace);
        let Ok(account) = self.interner.account_of(AccountKind::Project, namespace) else { return };
        self.core_apply(Event::SetQuota { account, quota }, now);
        self.warn_guarantee_beyond_quota(namespace, quota);
    }

    /// A namespace's ResourceQuotas as one set of caps, if it has any.
    fn namespace_quota(&self, namespace: &str) -> Option<fairway_core::Quota> {
        self.quotas.get(namespace).and_then(|qs| combine_quotas(qs.values()))
    }

    /// A namespace in a cohort that keeps unlent more than its ResourceQuota lets it use
    /// (`fairway_spec::GuaranteeBeyondCap`) is told in the log: the server refuses that
    /// combination, but here both are objects others own, so both stand and the guarantee
    /// beyond the quota sits idle.
    fn warn_guarantee_beyond_quota(&self, namespace: &str, quota: Option<fairway_core::Quota>) {
        if !self.places.contains_key(namespace) {
            return;
        }
        let (Some((cohort, member)), Some(quota)) = (self.members.get(namespace), quota) else { return };
        if let Some(beyond) = member.guarantee_beyond(quota) {
            let reason = beyond.reason(namespace, "its ResourceQuota");
            tracing::warn!(namespace = %namespace, cohort = %cohort, "{reason}");
        }
    }

    fn namespace_change(&mut self, change: Change<Namespace>, now: u64) {
        match change {
            Change::Applied(n) => {
                let Some(name) = n.metadata.name.clone() else { return };
                self.seen(Stream::Namespaces, &name);
                let weight = crate::workload::fair_share_weight(n.metadata.annotations.as_ref()).unwrap_or_else(|e| {
                    tracing::warn!(namespace = %name, "fair-share weight 1 instead: {e}");
                    1
                });
                self.set_weight(&name, weight, now);
                let member = match crate::workload::cohort_member(&name, n.metadata.annotations.as_ref()) {
                    Ok(member) => {
                        self.members_unreadable.remove(&name);
                        member
                    }
                    Err(e) => {
                        tracing::warn!(namespace = %name, "in no cohort instead: {e}");
                        match crate::workload::cohort_named(n.metadata.annotations.as_ref()) {
                            Some(cohort) => {
                                // Nothing of its place is shown: what could be read may mislead.
                                let place = fairway_spec::MemberDoc {
                                    project: name.clone(),
                                    nominal: fairway_spec::LimitsDoc::default(),
                                    borrowing_limit: None,
                                    lending_limit: None,
                                };
                                self.members_unreadable.insert(name.clone(), (cohort, place, e));
                            }
                            None => {
                                self.members_unreadable.remove(&name);
                            }
                        }
                        None
                    }
                };
                self.set_member(&name, member, now);
                self.namespaces.insert(name, n.metadata.labels.unwrap_or_default());
            }
            Change::Deleted(n) => {
                if let Some(name) = &n.metadata.name {
                    self.set_weight(name, 1, now);
                    self.set_member(name, None, now);
                    self.members_unreadable.remove(name);
                    self.namespaces.remove(name);
                }
            }
        }
    }

    /// A namespace's place in a cohort as its annotations say, kept and (once started) the
    /// cohorts given to the core anew.
    fn set_member(&mut self, namespace: &str, member: Option<(String, fairway_spec::MemberDoc)>, now: u64) {
        let changed = match member {
            Some(m) => self.members.insert(namespace.to_owned(), m.clone()).is_none_or(|was| was != m),
            None => self.members.remove(namespace).is_some(),
        };
        if self.started && changed {
            self.push_places(now);
        }
    }

    /// The cohorts the namespaces' annotations make, checked together: a namespace whose
    /// place does not hold with those before it (by name; a lending limit above its nominal
    /// quota, a resource the other members do not name) is left out with a warning. Only
    /// the places that changed go to the core.
    fn push_places(&mut self, now: u64) {
        self.places_left_out.clear();
        let mut docs: Vec<fairway_spec::CohortDoc> = Vec::new();
        for (cohort, member) in self.members.values() {
            let at = match docs.iter().position(|c| &c.name == cohort) {
                Some(i) => i,
                None => {
                    docs.push(fairway_spec::CohortDoc { name: cohort.clone(), members: Vec::new() });
                    docs.len() - 1
                }
            };
            docs[at].members.push(member.clone());
            if let Err(e) = fairway_spec::resolve_cohorts(&docs, "cohorts", &mut self.interner) {
                tracing::warn!(namespace = %member.project, cohort = %cohort, "in no cohort instead: {e}");
                self.places_left_out.insert(member.project.clone(), e.reason.clone());
                docs[at].members.pop();
                if docs[at].members.is_empty() {
                    docs.remove(at);
                }
            }
        }
        let resolved = fairway_spec::resolve_cohorts(&docs, "cohorts", &mut self.interner).unwrap_or_default();
        let mut places: BTreeMap<String, fairway_core::NominalQuota> = BTreeMap::new();
        for (doc_member, (_, nominal)) in docs.iter().flat_map(|c| c.members.iter()).zip(resolved) {
            places.insert(doc_member.project.clone(), nominal);
        }
        let before = std::mem::take(&mut self.places);
        for ns in before.keys().filter(|ns| !places.contains_key(*ns)) {
            let Ok(project) = self.interner.account_of(AccountKind::Project, ns) else { continue };
            self.core_apply(Event::SetNominalQuota { project, nominal: None }, now);
        }
        let mut changed = Vec::new();
        for (ns, nominal) in &places {
            if before.get(ns) != Some(nominal) {
                let Ok(project) = self.interner.account_of(AccountKind::Project, ns) else { continue };
                self.core_apply(Event::SetNominalQuota { project, nominal: Some(*nominal) }, now);
                changed.push(ns.clone());
            }
        }
        self.places = places;
        for ns in changed {
            self.warn_guarantee_beyond_quota(&ns, self.namespace_quota(&ns));
        }
    }

    /// A namespace's fair-share weight, kept and (once started) given to the core.
    fn set_weight(&mut self, namespace: &str, weight: u32, now: u64) {
        let was = self.weights.get(namespace).copied().unwrap_or(1);
        if weight == 1 {
            self.weights.remove(namespace);
        } else {
            self.weights.insert(namespace.to_owned(), weight);
        }
        if self.started && was != weight {
            self.push_weight(namespace, now);
        }
    }

    fn push_weight(&mut self, namespace: &str, now: u64) {
        let weight = self.weights.get(namespace).copied().unwrap_or(1);
        let Ok(account) = self.interner.account_of(AccountKind::Project, namespace) else { return };
        self.core_apply(Event::SetFairShareWeight { account, weight }, now);
    }

    /// The users' weights from the settings (checked when they were read).
    fn push_user_weights(&mut self, now: u64) {
        let weights = self.settings.fair_share.as_ref().map(|f| f.user_weights.clone()).unwrap_or_default();
        for w in weights {
            let Ok(account) = self.interner.account_of(AccountKind::User, &w.user) else { continue };
            self.core_apply(Event::SetFairShareWeight { account, weight: w.weight }, now);
        }
    }

    /// Whether new Jobs of a namespace are managed (the webhook asks).
    pub fn namespace_opted_in(&self, namespace: &str) -> bool {
        let Some((key, value)) = self.settings.managed_label() else { return false };
        self.namespaces.get(namespace).is_some_and(|labels| labels.get(key).map(String::as_str) == Some(value))
    }

    // ---- the rebuild --------------------------------------------------------------

    /// Every watch has listed: the core is built from the cluster (module doc, step 1).
    fn reconcile_all(&mut self, now: u64) {
        self.started = true;
        self.say_unmanaged();
        let nodes: Vec<(NodeId, NodeInfo)> = self.nodes.values().cloned().collect();
        for (id, info) in &nodes {
            self.core_node_added(*id, info, now);
        }
        let namespaces: Vec<String> = self.quotas.keys().cloned().collect();
        for ns in namespaces {
            self.push_quota(&ns, now);
        }
        let weighted: Vec<String> = self.weights.keys().cloned().collect();
        for ns in weighted {
            self.push_weight(&ns, now);
        }
        self.push_user_weights(now);
        self.push_places(now);
        // Admitted workloads where they run, and those being preempted with their deadline;
        // in creation order so that the result does not depend on hash order.
        let mut order: Vec<(u64, String)> =
            self.workloads.values().map(|t| (t.w.created_ms, t.w.uid.clone())).collect();
        order.sort();
        for (_, uid) in &order {
            self.restore_running(uid, now);
        }
        self.account_unaccounted_pods(now);
        for (_, uid) in &order {
            self.check_workload(uid, now);
        }
        self.restore_holds(now);
        self.restore_recent_usage(now);
        self.dirty = true;
    }

    /// Preemptors whose victims are still on their way out get their GPUs held again, as
    /// recorded on the victims: without it, a restart mid-preemption would let the pending
    /// preemptor look for GPUs anew, and preempt someone else.
    fn restore_holds(&mut self, now: u64) {
        // Preemptor → (the nodes of its hold, its victims), from the victims the core now
        // has on their way out for it.
        let mut holds: BTreeMap<JobId, (Vec<String>, Vec<JobId>)> = BTreeMap::new();
        for t in self.workloads.values() {
            let Some(p) = t.w.preemption() else { continue };
            if !t.in_core || p.hold.is_empty() {
                continue;
            }
            if let Some(JobStatus::Preempting { preemptor, .. }) = self.core.job_status(t.id) {
                let entry = holds.entry(preemptor).or_insert_with(|| (p.hold.clone(), Vec::new()));
                entry.1.push(t.id);
            }
        }
        for (preemptor, (nodes, mut victims)) in holds {
            victims.sort();
            let Some(placement) = self.hold_placement(preemptor, &nodes, &victims) else { continue };
            let hold = fairway_core::RestoredHold { preemptor, placement, victims };
            if let Err(e) = self.core.apply(Event::RestoreHold(hold), Time(now)) {
                tracing::info!(preemptor = preemptor.0, "a preemptor's hold is not restored: {e}");
            }
        }
    }

    /// The GPU slots of a hold on `nodes` (one per replica): the victims' slots on each node
    /// first, then free ones. `None` if the preemptor is not pending or they do not suffice.
    fn hold_placement(&self, preemptor: JobId, nodes: &[String], victims: &[JobId]) -> Option<Placement> {
        if !matches!(self.core.job_status(preemptor), Some(JobStatus::Pending { .. })) {
            return None;
        }
        let uid = self.uid_of.get(&preemptor)?;
        let spec = self.core_spec_cached(uid)?;
        let mut victim_slots: BTreeMap<NodeId, GpuSet> = BTreeMap::new();
        for v in victims {
            if let Some(JobStatus::Preempting { placement, .. }) = self.core.job_status(*v) {
                for r in placement.replicas() {
                    let slots = victim_slots.entry(r.node).or_insert(GpuSet::EMPTY);
                    *slots = slots.union(r.gpus);
                }
            }
        }
        let mut taken: BTreeMap<NodeId, GpuSet> = BTreeMap::new();
        let mut replicas = Vec::new();
        for name in nodes {
            let (id, _) = self.nodes.get(name)?;
            let used = taken.get(id).copied().unwrap_or(GpuSet::EMPTY);
            let theirs = victim_slots.get(id).copied().unwrap_or(GpuSet::EMPTY).minus(used);
            let free = self.core.node_free_slots(*id)?.minus(used);
            let from_victims = theirs.lowest(theirs.len().min(spec));
            let rest = spec - from_victims.len();
            if free.len() < rest {
                return None;
            }
            let gpus = from_victims.union(free.lowest(rest));
            taken.insert(*id, used.union(gpus));
            replicas.push(ReplicaPlacement { node: *id, gpus });
        }
        Some(Placement::new(replicas))
    }

    /// GPUs per replica of a workload in the core.
    fn core_spec_cached(&self, uid: &str) -> Option<u32> {
        let id = self.workloads.get(uid)?.id;
        self.core.job_spec(id).map(|s| s.per_replica.gpus)
    }

    /// A workload Fairway admitted before a restart, and that has live pods: back where it
    /// runs (from its admission annotation), on its way out if it was being preempted.
    fn restore_running(&mut self, uid: &str, now: u64) {
        let t = &self.workloads[uid];
        if t.w.finished.is_some() || t.refused.is_some() {
            return;
        }
        let Some(nodes) = t.w.admission() else { return };
        let live = self.live_pods(uid);
        let preemption = t.w.preemption();
        let (suspended, deleted) = (t.w.suspended, t.deleted);
        if suspended && live == 0 {
            // Its pods are gone: it only waits again (check_workload queues it).
            self.actions.push(Action::Release { target: target_of(&t.w) });
            return;
        }
        let (w, id) = (t.w.clone(), t.id);
        let Ok(spec) = self.core_spec(&w, id) else { return };
        let Some(placement) = self.placement_on(&nodes, spec.per_replica.gpus) else {
            tracing::warn!(workload = %self.workloads[uid].w.key(), "its admission names nodes that are gone or full; it is requeued");
            let target = target_of(&self.workloads[uid].w);
            self.actions.push(Action::Suspend { target, preemption: None });
            return;
        };
        let stopping = match preemption {
            Some(p) => {
                let preemptor = self.workloads.values().find(|o| o.w.key() == p.by).map(|o| o.id);
                Some(match preemptor {
                    Some(id) => RestoredStop::Preempted { preemptor: id, deadline: Time(p.deadline_ms) },
                    None => RestoredStop::Stopped(fairway_core::StopCause::Cancelled),
                })
            }
            None if suspended || deleted => Some(RestoredStop::Stopped(fairway_core::StopCause::Cancelled)),
            None => None,
        };
        let t = &self.workloads[uid];
        let restored = RestoredJob {
            spec,
            submitted_at: Time(t.w.created_ms),
            runtime_done_ms: 0,
            preemptions: 0,
            preempted_at: t.preempted_at_ms.iter().copied().map(Time).collect(),
            last_checkpoint: None,
            // It has run since its admission (older records: since now).
            running: Some(RestoredRun {
                placement,
                started_at: Time(t.w.admitted_at_ms().unwrap_or(now).min(now)),
                stopping,
            }),
        };
        match self.core.apply(Event::Restore(restored), Time(now)) {
            Ok(()) => {
                let slots: Vec<Slot> = nodes.iter().map(|n| Slot { node: n.clone(), pod: None }).collect();
                let t = self.workloads.get_mut(uid).expect("present");
                t.in_core = true;
                t.slots = slots;
                // Its bound pods take their slots back; unbound ones get bound.
                let pods: Vec<PodInfo> = self
                    .pods_by_owner
                    .get(uid)
                    .into_iter()
                    .flatten()
                    .filter_map(|p| self.pods.get(p))
                    .filter(|p| !p.terminal)
                    .cloned()
                    .collect();
                for pod in pods {
                    let t = self.workloads.get_mut(uid).expect("present");
                    match &pod.node {
                        Some(node) => {
                            if let Some(slot) = t.slots.iter_mut().find(|s| s.pod.is_none() && s.node == *node) {
                                slot.pod = Some(pod.uid.clone());
                            }
                        }
                        None if !pod.deleting => self.bind(uid, &pod),
                        None => {}
                    }
                }
            }
            Err(e) => tracing::warn!("cannot restore {}: {e}", self.workloads[uid].w.key()),
        }
    }

    /// Slots on the named nodes for one replica each.
    fn placement_on(&self, nodes: &[String], gpus_per_replica: u32) -> Option<Placement> {
        let mut taken: BTreeMap<NodeId, GpuSet> = BTreeMap::new();
        let mut replicas = Vec::new();
        for name in nodes {
            let (id, _) = self.nodes.get(name)?;
            let free = self.core.node_free_slots(*id)?.minus(taken.get(id).copied().unwrap_or(GpuSet::EMPTY));
            if free.len() < gpus_per_replica {
                return None;
            }
            let gpus = free.lowest(gpus_per_replica);
            *taken.entry(*id).or_insert(GpuSet::EMPTY) = taken.get(id).copied().unwrap_or(GpuSet::EMPTY).union(gpus);
            replicas.push(ReplicaPlacement { node: *id, gpus });
        }
        Some(Placement::new(replicas))
    }

    // ---- step 2: the cycle ---------------------------------------------------------------

    pub fn cycle(&mut self, now: u64) {
        if !self.started {
            return;
        }
        self.dirty = false;
        let resizing: Vec<NodeId> = self.resize_pending.iter().copied().collect();
        for id in resizing {
            self.sync_node(id, now);
        }
        let moved_before = self.core.counters().preemptors_moved;
        let outcome = self.core.cycle(Time(now));
        self.stats.preemptors_moved += self.core.counters().preemptors_moved - moved_before;
        self.stats.starts_taken_back += outcome.taken_back.len() as u64;
        for decision in outcome.decisions {
            self.decided(decision, now);
        }
        self.save_recent_usage_if_due(now);
    }

    /// Per preemptor, the workloads still stopping for it (`namespace/name`, in key order).
    fn victims_still_stopping(&self) -> BTreeMap<JobId, Vec<String>> {
        let mut stopping: BTreeMap<JobId, Vec<String>> = BTreeMap::new();
        for t in self.workloads.values().filter(|t| t.in_core) {
            if let Some(JobStatus::Preempting { preemptor, .. }) = self.core.job_status(t.id) {
                stopping.entry(preemptor).or_default().push(t.w.key());
            }
        }
        for names in stopping.values_mut() {
            names.sort_unstable();
        }
        stopping
    }

    /// Why a victim gives way, for its owner (`by`: the preemptor, `namespace/name`): by
    /// priority, or to a reclaim within the cohort its namespace borrows in.
    fn preemption_text(&self, by: &str, victim: JobId, preemptor: JobId, cause: PreemptCause) -> String {
        match cause {
            PreemptCause::Priority => format!("preempted by {by}"),
            PreemptCause::Reclaim { cohort } => {
                let cohort = self.cohort_name(cohort);
                let namespace = |id: JobId| self.workload(id).map_or("?", |w| w.namespace.as_str());
                format!(
                    "reclaimed by {by} in cohort {cohort}: namespace {} uses more than its nominal quota there, which {} takes back at the same priority",
                    namespace(victim),
                    namespace(preemptor)
                )
            }
        }
    }

    /// A cohort's name as its Namespaces' annotations give it.
    fn cohort_name(&self, cohort: fairway_core::AccountId) -> &str {
        self.interner.account_name(cohort).map_or("?", |(_, name)| name)
    }

    fn decided(&mut self, decision: Decision, now: u64) {
        match decision {
            Decision::Start { job, placement } => {
                let Some(uid) = self.uid_of.get(&job).cloned() else { return };
                let nodes: Vec<String> =
                    placement.replicas().iter().filter_map(|r| self.node_names.get(&r.node).cloned()).collect();
                let t = self.workloads.get_mut(&uid).expect("uid_of is in step");
                t.slots = nodes.iter().map(|n| Slot { node: n.clone(), pod: None }).collect();
                t.awaiting_admission = true;
                let waited = Observation::Waited {
                    tier: tier_of(&t.w).to_owned(),
                    tenant: t.w.namespace.clone(),
                    seconds: now.saturating_sub(t.queued_since_ms) as f64 / 1000.0,
                };
                let target = target_of(&t.w);
                self.observe(waited);
                self.stats.admissions += 1;
                self.touched.insert(uid.clone());
                self.actions.push(Action::Admit { target: target.clone(), nodes: nodes.clone(), at_ms: now });
                // Pods that already exist (the Job controller was quick, or a restart) are bound.
                let pods: Vec<PodInfo> = self
                    .pods_by_owner
                    .get(&uid)
                    .into_iter()
                    .flatten()
                    .filter_map(|p| self.pods.get(p))
                    .filter(|p| !p.terminal && p.node.is_none() && !p.deleting)
                    .cloned()
                    .collect();
                for pod in pods {
                    self.occupant_gone(&pod.uid, now);
                    self.bind(&uid, &pod);
                }
            }
            Decision::Preempt { victim, preemptor, deadline, cause } => {
                let Some(uid) = self.uid_of.get(&victim).cloned() else { return };
                let by = self.workload(preemptor).map(Workload::key).unwrap_or_default();
                let why = self.preemption_text(&by, victim, preemptor, cause);
                self.touched.insert(uid.clone());
                if let Some(p) = self.uid_of.get(&preemptor) {
                    self.touched.insert(p.clone());
                }
                // Where the preemptor's GPUs are held (the cycle's decisions are applied:
                // this is its final hold).
                let hold: Vec<String> = match self.core.job_status(preemptor) {
                    Some(JobStatus::Pending { reserved: Some(placement), .. }) => {
                        placement.replicas().iter().filter_map(|r| self.node_names.get(&r.node).cloned()).collect()
                    }
                    _ => Vec::new(),
                };
                let t = self.workloads.get_mut(&uid).expect("tracked");
                t.preempted_at_ms.retain(|&at| now.saturating_sub(at) < HOUR_MS);
                t.preempted_at_ms.push(now);
                let history = t.preempted_at_ms.clone();
                let t = &self.workloads[&uid];
                let target = target_of(&t.w);
                let preempted =
                    Observation::Preempted { tier: tier_of(&t.w).into(), tenant: t.w.namespace.clone(), cause };
                self.stats.preemptions += 1;
                self.actions.push(Action::Suspend {
                    target: target.clone(),
                    preemption: Some(Preemption { by: by.clone(), deadline_ms: deadline.millis(), hold, history }),
                });
                let grace = deadline.millis().saturating_sub(now) / 1000;
                self.actions.push(Action::Event {
                    target,
                    warning: false,
                    reason: "Preempted".into(),
                    message: format!("{why}: suspended; its pods get {grace}s to stop; it queues again at its place"),
                });
                if let Some(p) = self.workload(preemptor).map(target_of) {
                    self.actions.push(Action::Event {
                        target: p,
                        warning: false,
                        reason: "Preempting".into(),
                        message: match cause {
                            PreemptCause::Priority => {
                                format!("preempting {}; its GPUs are held for this job", t.w.key())
                            }
                            PreemptCause::Reclaim { cohort } => format!(
                                "reclaiming {} in cohort {}; its GPUs are held for this job",
                                t.w.key(),
                                self.cohort_name(cohort)
                            ),
                        },
                    });
                }
                self.observe(preempted);
            }
            Decision::Stop { .. } => {
                // Deletion (the only stop in Kubernetes mode) is under way: the garbage
                // collector deletes the pods; the job leaves once they are gone.
            }
            Decision::Requeued { job, .. } => {
                let Some(uid) = self.uid_of.get(&job).cloned() else { return };
                let t = self.workloads.get_mut(&uid).expect("uid_of is in step");
                t.slots.clear();
                let target = target_of(&t.w);
                self.actions.push(Action::Suspend { target, preemption: None });
                // What still runs of it elsewhere holds its GPUs until it is gone.
                let pods: Vec<String> = self.pods_by_owner.get(&uid).into_iter().flatten().cloned().collect();
                for pod in pods {
                    if self.pods.get(&pod).is_some_and(|p| !p.terminal && p.node.is_some()) {
                        self.ensure_occupant(&pod, now);
                    }
                }
            }
        }
    }

    // ---- step 3: status --------------------------------------------------------------

    /// How often every workload's reason is looked at again.
    const SWEEP_MS: u64 = 10_000;

    /// Conditions and Events for workloads whose reason changed since it was last said:
    /// those touched since the last call, and every one once per [`Self::SWEEP_MS`]. A
    /// pending workload's condition also gives its place in the queue and when it is
    /// expected to start, from one forecast per call.
    pub fn publish_status(&mut self, now: u64) {
        let mut out = Vec::new();
        let uids: Vec<String> = if now.saturating_sub(self.swept_ms) >= Self::SWEEP_MS {
            self.swept_ms = now;
            self.touched.clear();
            self.workloads.keys().cloned().collect()
        } else {
            std::mem::take(&mut self.touched).into_iter().collect()
        };
        // What to say of each, and the pending jobs among them: their estimates come from
        // one forecast once all are known.
        struct Saying {
            uid: String,
            admitted: bool,
            reason: String,
            message: String,
            /// A pending job: its estimate goes in the condition.
            pending: Option<JobId>,
        }
        let mut sayings: Vec<Saying> = Vec::new();
        // Per preemptor, its victims still stopping (read once, when an admitted one is said).
        let mut stopping_for: Option<BTreeMap<JobId, Vec<String>>> = None;
        for uid in uids {
            let Some(t) = self.workloads.get(&uid) else { continue };
            if !t.in_core {
                if t.w.paused() && !t.deleted && t.w.finished.is_none() && t.refused.is_none() {
                    let message = format!(
                        "paused (annotation {}); remove it to queue the job again at its place",
                        crate::workload::PAUSED
                    );
                    sayings.push(Saying { uid, admitted: false, reason: "Paused".to_owned(), message, pending: None });
                }
                continue;
            }
            let (admitted, reason, message, pending) = match self.core.job_status(t.id) {
                Some(JobStatus::Pending { reasons, reserved }) => {
                    if reserved.is_some() || reasons.is_empty() {
                        let first = reasons.first().map(|r| self.reason_text(r)).unwrap_or_default();
                        (false, "WaitingForPreemption".to_owned(), first, Some(t.id))
                    } else {
                        let text: Vec<String> = reasons.iter().map(|r| self.reason_text(r)).collect();
                        (false, camel(reasons[0].label()), text.join("; "), Some(t.id))
                    }
                }
                Some(JobStatus::Running { .. }) => {
                    let nodes: Vec<&str> = t.slots.iter().map(|s| s.node.as_str()).collect();
                    let mut message = format!("admitted by Fairway; runs on {}", nodes.join(", "));
                    let stopping = stopping_for.get_or_insert_with(|| self.victims_still_stopping());
                    if let Some(victims) = stopping.get(&t.id) {
                        // Admitted on GPUs freed elsewhere before its victims had gone (the
                        // core's cycle step 3b).
                        message += &format!(", on GPUs that freed before {} had stopped", victims.join(", "));
                    }
                    (true, "Admitted".to_owned(), message, None)
                }
                _ => continue,
            };
            sayings.push(Saying { uid, admitted, reason, message, pending });
        }
        let wanted: BTreeSet<JobId> = sayings.iter().filter_map(|s| s.pending).collect();
        let estimates = if wanted.is_empty() { BTreeMap::new() } else { self.start_estimates(now, Some(&wanted)) };
        for s in sayings {
            let estimate = s.pending.and_then(|id| estimates.get(&id)).map(|e| estimate_text(e, now));
            let estimate = match (estimate, s.pending.and_then(|id| self.reservation_text(id))) {
                (Some(e), Some(r)) => Some(format!("{e}; {r}")),
                (e, _) => e,
            };
            self.say(&s.uid, &mut out, s.admitted, &s.reason, s.message, estimate);
        }
        self.actions.extend(out);
    }

    /// Where a pending job that holds a reservation has its GPUs reserved, as its condition
    /// says it (the time is its expected start, said before it).
    fn reservation_text(&self, id: JobId) -> Option<String> {
        let planned = self.core.reservation_of(id)?;
        let nodes: Vec<&str> = planned.nodes.iter().map(|(n, _)| self.node_name(*n).unwrap_or("?")).collect();
        Some(format!("the GPUs it needs are reserved for it on {}", nodes.join(", ")))
    }

    /// Pending jobs' places in the queue and expected starts, by job, from one forecast:
    /// of every pending job (`wanted: None`), or of those wanted. Jobs ranked beyond
    /// [`FORECAST_JOBS_MAX`] have their position and [`StartEstimate::NotForecast`].
    pub fn start_estimates(&self, now: u64, wanted: Option<&BTreeSet<JobId>>) -> BTreeMap<JobId, Estimate> {
        // Only as far as the wanted jobs need: cheaper than the whole queue's forecast
        // when few are wanted, and the same estimates for them.
        let estimates = match wanted {
            None => self.core.forecast(Time(now), FORECAST_JOBS_MAX),
            Some(wanted) => self.core.forecast_jobs(Time(now), wanted, FORECAST_JOBS_MAX),
        };
        estimates.into_iter().map(|e| (e.job, e)).collect()
    }

    /// The condition, unless that is what was said last, and an Event, unless its reason
    /// is what was said last. `estimate` (`estimate_text`) is in the condition only: an
    /// Event records a reason as it changed, and the estimate would go stale in it.
    fn say(
        &mut self,
        uid: &str,
        out: &mut Vec<Action>,
        admitted: bool,
        reason: &str,
        message: String,
        estimate: Option<String>,
    ) {
        let condition = match estimate {
            Some(e) if message.is_empty() => e,
            Some(e) => format!("{message}; {e}"),
            None => message.clone(),
        };
        let said = Said::of(admitted, reason, &condition);
        let before = self.published.insert(uid.to_owned(), said.clone());
        if before.as_ref() == Some(&said) {
            return;
        }
        let target = target_of(&self.workloads[uid].w);
        out.push(Action::Condition { target: target.clone(), admitted, reason: reason.to_owned(), message: condition });
        if before.is_some_and(|b| b.reason == said.reason) {
            return;
        }
        let event_reason = match (admitted, reason) {
            (true, _) => "Admitted",
            (false, "Paused") => "Paused",
            (false, _) => "Pending",
        };
        out.push(Action::Event { target, warning: false, reason: event_reason.into(), message });
    }

    /// A reason in words, with workloads named `namespace/name`.
    pub fn reason_text(&self, reason: &PendingReason) -> String {
        let name = |id: JobId| self.workload(id).map_or_else(|| format!("job {}", id.0), Workload::key);
        let model = |m: Option<fairway_core::GpuModel>| {
            m.and_then(|m| self.interner.name_of(m)).map(|m| format!(" of {m}")).unwrap_or_default()
        };
        // In the ResourceQuota's own units and names.
        let unit_and_name = |resource: &fairway_core::ResourceKind| match resource {
            fairway_core::ResourceKind::Gpu => ("", self.settings.gpu_resource.as_str()),
            fairway_core::ResourceKind::Cpu => ("m", "cpu"),
            fairway_core::ResourceKind::Memory => ("Mi", "memory"),
        };
        match reason {
            PendingReason::OverQuota { account, resource, requested, used, limit, limit_from } => {
                let (unit, name) = unit_and_name(resource);
                let [requested, used, limit] = [requested, used, limit].map(|a| resource.format_amount(*a));
                let namespace = self.interner.account_name(*account).map_or("?", |(_, name)| name);
                match limit_from {
                    fairway_core::LimitSource::Quota => format!(
                        "over quota: namespace {namespace} uses {used}{unit} of its {limit}{unit} {name} (ResourceQuota); it asks {requested}{unit}"
                    ),
                    // Only GPUs have a borrowing limit here (the annotations).
                    fairway_core::LimitSource::BorrowingLimit { cohort } => format!(
                        "over its borrowing limit: namespace {namespace} uses {used}{unit} of the {limit}{unit} {name} it may use in cohort {} (its {} plus {}); it asks {requested}{unit}",
                        self.interner.account_name(*cohort).map_or("?", |(_, name)| name),
                        crate::workload::NOMINAL_GPUS,
                        crate::workload::BORROWING_LIMIT_GPUS,
                    ),
                }
            }
            PendingReason::CohortExhausted { cohort, project, resource, requested, used, limit } => {
                let cohort_name = self.interner.account_name(*cohort).map_or("?", |(_, name)| name);
                let (unit, name) = unit_and_name(resource);
                // Asking more than the namespace can ever hold there is not a wait for work
                // to end, and says so.
                let never = match self.core.cohort_most(*project, *resource) {
                    Some(most) if most < *requested => format!(
                        "; namespace {} can never hold more than {}{unit} {name} in cohort {cohort_name} (the members' nominal quotas, less what the others keep unlent), so it waits until the cohort changes",
                        self.interner.account_name(*project).map_or("?", |(_, name)| name),
                        resource.format_amount(most),
                    ),
                    _ => String::new(),
                };
                let [requested, used, limit] = [requested, used, limit].map(|a| resource.format_amount(*a));
                format!(
                    "cohort {cohort_name} lends no more: {used}{unit} of its {limit}{unit} {name} are in use or kept for their owners (namespaces' {} annotations); it asks {requested}{unit}{never}",
                    crate::workload::COHORT
                )
            }
            PendingReason::NoFit { gpus_per_replica, replicas, gpu_model, gpus_free_max, nodes_matching } => format!(
                "no node with {gpus_per_replica} free GPUs{} for each of its {replicas} replica(s): the most free on one node is {gpus_free_max} (of {nodes_matching} nodes)",
                model(*gpu_model)
            ),
            PendingReason::NoShareFit { gpu_milli, gpu_model, share_free_max, nodes_matching } => format!(
                "no GPU{} with {gpu_milli}/1000 free for its share: the most free on one GPU is {share_free_max}/1000 (of {nodes_matching} nodes)",
                model(*gpu_model)
            ),
            PendingReason::WaitingForPreemption { victims } => {
                let names: Vec<String> = victims.iter().map(|v| name(*v)).collect();
                format!("waiting for the preemption of {}; their GPUs are held for it", names.join(", "))
            }
            PendingReason::BlockedBehind { job, priority } => {
                format!("behind higher priority: {} (priority {priority}) waits for GPUs first", name(*job))
            }
            PendingReason::HeldForReservation { job, at } => format!(
                "held for the reservation of {}, expected to start by {}: it would run past then on the GPUs it needs",
                name(*job),
                time_text(at.millis())
            ),
            PendingReason::VictimsProtected { until } => format!(
                "the lower-priority work that would make room is protected from preemption until {}",
                time_text(until.millis())
            ),
            PendingReason::PreemptionDelayed { until } => format!(
                "waits for free GPUs before preempting (its PriorityClass's preemption delay) until {}",
                time_text(until.millis())
            ),
            other => other.to_string(),
        }
    }

    // ---- helpers ------------------------------------------------------------------

    fn core_apply(&mut self, event: Event, now: u64) {
        if let Err(e) = self.core.apply(event, Time(now)) {
            tracing::debug!("core: {e}");
        }
        self.dirty = true;
    }
}

/// The user a Job names (`fairway.dev/user`), or none: the namespace is then the user too.
fn resolved_user(job: &ResolvedJob) -> Option<&str> {
    (job.doc.user != job.doc.project && !job.doc.user.is_empty()).then_some(job.doc.user.as_str())
}

/// The pod template's node constraints, as far as Fairway can honour them. Fairway binds
/// pods itself, so nothing else would check them: a constraint it cannot keep is refused
/// (the workload stays suspended, with a condition saying why) rather than silently broken.
/// - `nodeSelector` on a GPU model label (any of `gpu_model_labels`) selects the model: it is
///   handed to the job-spec reader under the label it reads;
/// - any other `nodeSelector` key, and required node affinity, are refused;
/// - preferred affinity, pod (anti-)affinity and topology spread are preferences: ignored.
///
/// Tolerations need nothing: tainted nodes are out of Fairway's pool (`objects`).
pub fn placement_constraints(as_job: &Value, gpu_model_labels: &[String]) -> Result<Value, String> {
    const READER_LABEL: &str = "nvidia.com/gpu.product";
    let pod = "spec.template.spec";
    let mut out = as_job.clone();
    if let Some(selector) = as_job.pointer("/spec/template/spec/nodeSelector").and_then(Value::as_object) {
        let mut model: Option<(&String, &Value)> = None;
        for (key, value) in selector {
            if gpu_model_labels.iter().any(|l| l == key) || key == READER_LABEL {
                if let Some((first, v)) = model.filter(|(_, v)| *v != value) {
                    return Err(format!(
                        "{pod}.nodeSelector: {key:?} and {first:?} ask for different GPU models ({value} and {v})"
                    ));
                }
                model = Some((key, value));
            } else {
                return Err(format!(
                    "{pod}.nodeSelector.{key}: Fairway places the pods itself and selects nodes by GPU model only ({}); \
                     remove it, or label the Job fairway.dev/managed=false to leave it to the default scheduler",
                    gpu_model_labels.join(", ")
                ));
            }
        }
        let selector =
            out.pointer_mut("/spec/template/spec/nodeSelector").and_then(Value::as_object_mut).expect("read above");
        selector.clear();
        if let Some((_, value)) = model {
            selector.insert(READER_LABEL.to_owned(), value.clone());
        }
    }
    if as_job
        .pointer("/spec/template/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution")
        .is_some()
    {
        return Err(format!(
            "{pod}.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution: Fairway places the pods itself \
             and cannot keep required node affinity; select the GPU model with nodeSelector, or label the Job \
             fairway.dev/managed=false to leave it to the default scheduler"
        ));
    }
    if let Some(spec) = out.pointer_mut("/spec/template/spec").and_then(Value::as_object_mut) {
        // Read here, not by the job-spec reader (which would only warn about them).
        for key in ["affinity", "tolerations", "topologySpreadConstraints"] {
            spec.remove(key);
        }
    }
    Ok(out)
}

/// A pending workload's place in the queue and expected start, as its condition says them.
/// Times are to the minute (UTC), so that the condition is written again only when the
/// estimate moves by a minute or more, not at every forecast.
fn estimate_text(e: &Estimate, now: u64) -> String {
    const MINUTE_MS: u64 = 60_000;
    let place = format!("{ESTIMATE_MARK}{} in the queue", e.position);
    match e.start {
        // The forecast says `now` for a job it expects at the next cycle (or once victims
        // already past their deadline are gone): a time would then move with the clock.
        StartEstimate::At(t) if t.millis() < now.saturating_add(MINUTE_MS) => {
            format!("{place}, expected to start shortly")
        }
        StartEstimate::At(t) => {
            let nearest = t.millis().saturating_add(MINUTE_MS / 2) / MINUTE_MS * MINUTE_MS;
            format!("{place}, expected to start at {}", minute_text(nearest))
        }
        // Rounded down: "not before" stays true.
        StartEstimate::NotBefore(t) => {
            format!("{place}, expected to start not before {}", minute_text(t.millis() / MINUTE_MS * MINUTE_MS))
        }
        StartEstimate::NotPlaceable => {
            format!("{place}; no start can be estimated: it could not start even once everything running now has ended")
        }
        StartEstimate::NotForecast => {
            format!("{place}; no start is estimated for jobs beyond the first {FORECAST_JOBS_MAX} in the queue")
        }
    }
}

/// Where the estimate begins in a message (`estimate_text`); no reason's text has it.
const ESTIMATE_MARK: &str = "position ";

/// A condition's message without its estimate.
fn without_estimate(message: &str) -> &str {
    if message.starts_with(ESTIMATE_MARK) {
        return "";
    }
    match message.rfind(&format!("; {ESTIMATE_MARK}")) {
        Some(at) => &message[..at],
        None => message,
    }
}

/// Unix ms, a whole minute, as RFC 3339 to the minute: `2026-12-03T10:40Z`.
fn minute_text(ms: u64) -> String {
    i64::try_from(ms)
        .ok()
        .and_then(|ms| jiff::Timestamp::from_millisecond(ms).ok())
        .map_or_else(|| format!("{ms} ms"), |t| t.strftime("%Y-%m-%dT%H:%MZ").to_string())
}

pub fn target_of(w: &Workload) -> Target {
    Target { kind: w.kind, namespace: w.namespace.clone(), name: w.name.clone(), uid: w.uid.clone() }
}

/// `over_quota` → `OverQuota`: reasons as Kubernetes spells them.
fn camel(label: &str) -> String {
    label
        .split('_')
        .map(|w| {
            let mut c = w.chars();
            c.next().map(|f| f.to_uppercase().collect::<String>() + c.as_str()).unwrap_or_default()
        })
        .collect()
}

/// FNV-1a, 64 bits: a stable hash of a uid (the standard library's hasher is seeded).
fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// The core's policy: the `fairway` preset, with fair sharing between namespaces if set.
fn policy_of(settings: &Settings) -> fairway_core::Policy {
    let mut policy = fairway_core::Policy::fairway();
    policy.fair_share = settings.fair_share.as_ref().and_then(|f| f.to_core().ok());
    if let Some((reservations, default_runtime_ms)) = settings.reservations.and_then(|r| r.to_core("reservations").ok())
    {
        policy.reservations = Some(reservations);
        policy.estimates.default_runtime_ms = default_runtime_ms;
    }
    // Checked when the settings loaded.
    if let Some(Ok(packing)) = settings.placement.as_deref().map(|name| fairway_spec::placement_of(name, "placement")) {
        policy.packing = packing;
    }
    policy
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_placement_setting_reaches_the_core_and_fairway_is_the_default() {
        use fairway_core::packing::PackPolicy;
        let packing = |text: &str| policy_of(&Settings::parse(text).unwrap()).packing;
        assert_eq!(packing(""), Some(PackPolicy::Fairway));
        assert_eq!(packing("placement: fgd\n"), Some(PackPolicy::Fgd));
        assert_eq!(packing("placement: core\n"), None);
    }

    /// 2027-01-15T09:10:00Z.
    const T: u64 = 1_800_004_200_000;
    const NOW: u64 = T - 3_600_000;

    fn said(position: u32, start: StartEstimate) -> String {
        estimate_text(&Estimate { job: JobId(1), position, start }, NOW)
    }

    #[test]
    fn an_expected_start_is_to_the_nearest_minute_and_not_before_to_the_minute_below() {
        let at = |ms| said(3, StartEstimate::At(Time(ms)));
        assert_eq!(at(T), "position 3 in the queue, expected to start at 2027-01-15T09:10Z");
        assert_eq!(at(T + 29_999), at(T));
        assert_eq!(at(T - 30_000), at(T));
        assert_eq!(at(T + 30_000), "position 3 in the queue, expected to start at 2027-01-15T09:11Z");
        assert_eq!(
            said(3, StartEstimate::NotBefore(Time(T + 59_999))),
            "position 3 in the queue, expected to start not before 2027-01-15T09:10Z"
        );
    }

    #[test]
    fn a_start_within_the_minute_is_shortly_so_it_does_not_move_with_the_clock() {
        assert_eq!(said(1, StartEstimate::At(Time(NOW))), "position 1 in the queue, expected to start shortly");
        assert_eq!(said(1, StartEstimate::At(Time(NOW + 59_999))), said(1, StartEstimate::At(Time(NOW))));
        assert!(said(1, StartEstimate::At(Time(NOW + 60_000))).ends_with("at 2027-01-15T08:11Z"));
    }

    #[test]
    fn the_estimate_comes_off_a_message_whole() {
        let reason = "no node with 8 free GPUs for each of its 1 replica(s)";
        for start in [StartEstimate::At(Time(T)), StartEstimate::NotPlaceable, StartEstimate::NotForecast] {
            let message = format!("{reason}; {}", said(1_234, start));
            assert_eq!(without_estimate(&message), reason);
            assert_eq!(without_estimate(&said(1_234, start)), "");
        }
        assert_eq!(without_estimate(reason), reason);
    }
}
