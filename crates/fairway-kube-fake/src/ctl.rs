//! The cluster's own controllers, run as one task beside the API: the Job controller
//! (`jobctl.rs`), the PaddleJob operator (`paddle.rs`), the kubelets (`kubelet.rs`), the garbage collector (owner references,
//! foreground deletion), the pod GC (pods of deleted nodes), the namespace controller and the
//! quota status writer. Writes mark what they make dirty; the task wakes, takes the world's
//! lock for a bounded batch of work at a time, and sleeps until the next write or timer.
//! Pods the Job controller creates go through the API path (webhooks, admission), outside
//! the lock, as the real controller's creates do.

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;

use crate::jobctl::JobMem;
use crate::kinds::Kind;
use crate::kubelet::PodRun;
use crate::ops::{DeleteOpts, has_foreground, is_deleting};
use crate::paddle::{PaddleMem, paddle_owner};
use crate::store::{EventType, Key, World, meta_str};
use crate::{Shared, api};

/// What a timer wakes: the sync of a pod (kubelet), a Job or a PaddleJob.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Target {
    Pod(Key),
    Job(Key),
    Paddle(Key),
}

/// Which controller asked for a pod.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Owner {
    Job,
    PaddleJob,
}

/// A pod a controller creates, through the API path.
pub(crate) struct PodCreate {
    pub owner: Owner,
    pub key: Key,
    pub uid: String,
    pub pod: Value,
}

#[derive(Default)]
pub(crate) struct CtlState {
    pub dirty_jobs: BTreeSet<Key>,
    pub dirty_paddles: BTreeSet<Key>,
    pub dirty_pods: BTreeSet<Key>,
    pub dirty_nodes: BTreeSet<String>,
    /// uids of removed owners whose dependents are to be collected.
    pub gc: BTreeSet<String>,
    /// Owners being deleted in the foreground.
    pub foreground: BTreeSet<(Kind, Key)>,
    pub namespaces_deleting: BTreeSet<String>,
    timers: BinaryHeap<Reverse<(Instant, u64, Target)>>,
    timer_seq: u64,
    pub kubelet: HashMap<Key, PodRun>,
    pub jobs: HashMap<Key, JobMem>,
    pub paddles: HashMap<Key, PaddleMem>,
    pub creates: Vec<PodCreate>,
}

impl CtlState {
    pub(crate) fn at(&mut self, when: Instant, target: Target) {
        self.timer_seq += 1;
        self.timers.push(Reverse((when, self.timer_seq, target)));
    }

    pub(crate) fn next_timer(&self) -> Option<Instant> {
        self.timers.peek().map(|Reverse((at, _, _))| *at)
    }

    /// Marks who cares about a pod's change: its kubelet, its Job.
    pub(crate) fn pod_changed(&mut self, key: &Key, prev: Option<&Value>, new: Option<&Value>) {
        let bound = |v: &Value| v.pointer("/spec/nodeName").and_then(Value::as_str).is_some_and(|n| !n.is_empty());
        if new.is_some_and(bound) || prev.is_some_and(bound) {
            self.dirty_pods.insert(key.clone());
        }
        if let Some((job, uid)) = new.or(prev).and_then(job_owner) {
            let job_key = Key::new(&key.ns, &job);
            if new.is_none()
                && let Some(p) = prev
            {
                let mem = self.jobs.entry(job_key.clone()).or_default();
                if mem.uid.is_empty() || mem.uid == uid {
                    mem.uid = uid;
                    mem.pod_removed(p);
                }
            }
            self.dirty_jobs.insert(job_key);
        }
        if let Some((paddle, _)) = new.or(prev).and_then(paddle_owner) {
            self.dirty_paddles.insert(Key::new(&key.ns, &paddle));
        }
    }

    fn pending(&self) -> bool {
        !(self.dirty_jobs.is_empty()
            && self.dirty_paddles.is_empty()
            && self.dirty_pods.is_empty()
            && self.dirty_nodes.is_empty()
            && self.gc.is_empty()
            && self.creates.is_empty())
    }
}

/// The Job that controls an object, by its controller ownerReference: (name, uid).
pub(crate) fn job_owner(v: &Value) -> Option<(String, String)> {
    controller_owner(v, "Job", "batch/")
}

/// The owner of `kind` (an apiVersion starting with `api_prefix`) that controls an object,
/// by its controller ownerReference: (name, uid).
pub(crate) fn controller_owner(v: &Value, kind: &str, api_prefix: &str) -> Option<(String, String)> {
    v.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)?
        .iter()
        .find(|r| {
            r.get("controller").and_then(Value::as_bool) == Some(true)
                && r.get("kind").and_then(Value::as_str) == Some(kind)
                && r.get("apiVersion").and_then(Value::as_str).is_some_and(|a| a.starts_with(api_prefix))
        })
        .map(|r| {
            (
                r.get("name").and_then(Value::as_str).unwrap_or_default().to_owned(),
                r.get("uid").and_then(Value::as_str).unwrap_or_default().to_owned(),
            )
        })
}

/// The pods that the object `uid` controls (`owner` reads a pod's controller).
pub(crate) fn controlled_pods(
    world: &World,
    uid: &str,
    owner: fn(&Value) -> Option<(String, String)>,
) -> Vec<crate::store::Obj> {
    world
        .dependents
        .get(uid)
        .into_iter()
        .flatten()
        .filter(|(k, _)| *k == Kind::Pod)
        .filter_map(|(_, k)| world.get(Kind::Pod, k).cloned())
        .filter(|p| owner(&p.value).is_some_and(|(_, u)| u == uid))
        .collect()
}

/// Scales a duration read from an object (a sleep, a grace period, a deadline).
pub(crate) fn scaled(world: &World, seconds: f64) -> Duration {
    Duration::from_secs_f64((seconds * world.config.time_scale).max(0.0))
}

/// The controllers' task.
pub(crate) async fn run(shared: Arc<Shared>) {
    let mut shutdown = shared.shutdown.subscribe();
    loop {
        let (next, creates, more) = {
            let mut world = shared.world.lock().expect("the world's lock is never poisoned");
            let more = step(&mut world, Instant::now(), 256);
            (world.ctl.next_timer(), std::mem::take(&mut world.ctl.creates), more)
        };
        for create in creates {
            tokio::spawn(create_pod(shared.clone(), create));
        }
        if more {
            tokio::task::yield_now().await;
            continue;
        }
        let sleep = tokio::time::sleep_until(next.unwrap_or_else(|| Instant::now() + Duration::from_secs(3600)));
        tokio::select! {
            _ = shared.wake.notified() => {}
            _ = sleep => {}
            _ = shutdown.changed() => return,
        }
        if *shutdown.borrow() {
            return;
        }
    }
}

/// One bounded batch of work. Returns whether work is left.
pub(crate) fn step(world: &mut World, now: Instant, budget: usize) -> bool {
    while let Some(Reverse((at, _, _))) = world.ctl.timers.peek() {
        if *at > now {
            break;
        }
        let Some(Reverse((_, _, target))) = world.ctl.timers.pop() else { break };
        match target {
            Target::Pod(key) => {
                world.ctl.dirty_pods.insert(key);
            }
            Target::Job(key) => {
                world.ctl.dirty_jobs.insert(key);
            }
            Target::Paddle(key) => {
                world.ctl.dirty_paddles.insert(key);
            }
        }
    }
    let nodes: Vec<String> = std::mem::take(&mut world.ctl.dirty_nodes).into_iter().collect();
    for node in nodes {
        node_changed(world, &node);
    }
    collect_garbage(world, budget);
    let pods: Vec<Key> = take(&mut world.ctl.dirty_pods, budget);
    if world.config.kubelet {
        for key in pods {
            crate::kubelet::sync(world, &key, now);
        }
    }
    let jobs: Vec<Key> = take(&mut world.ctl.dirty_jobs, budget);
    if world.config.job_controller {
        for key in jobs {
            crate::jobctl::sync(world, &key, now);
        }
    }
    let paddles: Vec<Key> = take(&mut world.ctl.dirty_paddles, budget);
    if world.config.paddle_operator {
        for key in paddles {
            crate::paddle::sync(world, &key);
        }
    }
    crate::quota::write_status(world, budget);
    world.ctl.pending() || !world.quota.dirty.is_empty()
}

fn take(set: &mut BTreeSet<Key>, n: usize) -> Vec<Key> {
    let mut out = Vec::with_capacity(n.min(set.len()));
    while out.len() < n {
        let Some(k) = set.pop_first() else { break };
        out.push(k);
    }
    out
}

/// A node's readiness changed, or it is gone (then the pod GC deletes its pods, marking
/// running ones Failed with a DisruptionTarget condition first, as Kubernetes 1.26+ does).
fn node_changed(world: &mut World, node: &str) {
    let pods: Vec<Key> = world.pods_by_node.get(node).map(|s| s.iter().cloned().collect()).unwrap_or_default();
    if world.get(Kind::Node, &Key::new("", node)).is_some() {
        world.ctl.dirty_pods.extend(pods);
        return;
    }
    for key in pods {
        let Some(pod) = world.get(Kind::Pod, &key).cloned() else { continue };
        let phase = pod.value.pointer("/status/phase").and_then(Value::as_str).unwrap_or_default();
        if !matches!(phase, "Succeeded" | "Failed") {
            let mut value = pod.value.clone();
            value["status"]["phase"] = "Failed".into();
            crate::ops::set_condition(
                &mut value,
                "DisruptionTarget",
                "True",
                "DeletionByPodGC",
                "PodGC: node no longer exists",
            );
            world.commit(Kind::Pod, &key, value, EventType::Modified);
        }
        world.ctl.kubelet.remove(&key);
        let obj = world.get(Kind::Pod, &key).cloned().expect("just written");
        world.commit(Kind::Pod, &key, obj.value.clone(), EventType::Deleted);
    }
}

/// The garbage collector: dependents of removed owners go (or lose the dangling reference
/// if another owner remains); owners deleted in the foreground go once their dependents
/// have; namespaces being deleted are emptied, then go.
fn collect_garbage(world: &mut World, budget: usize) {
    let uids: Vec<String> = std::mem::take(&mut world.ctl.gc).into_iter().collect();
    let mut done = 0;
    for uid in uids {
        if done >= budget {
            world.ctl.gc.insert(uid);
            continue;
        }
        let deps: Vec<(Kind, Key)> =
            world.dependents.get(&uid).map(|s| s.iter().cloned().collect()).unwrap_or_default();
        for (kind, key) in deps {
            done += 1;
            let Some(obj) = world.get(kind, &key).cloned() else { continue };
            let owners = crate::store::owner_uids(Some(&obj.value));
            let living = owners.iter().any(|o| o != &uid && world.by_uid.contains_key(o));
            if living {
                let mut value = obj.value.clone();
                if let Some(refs) = value.pointer_mut("/metadata/ownerReferences").and_then(Value::as_array_mut) {
                    refs.retain(|r| r.get("uid").and_then(Value::as_str) != Some(uid.as_str()));
                }
                world.commit(kind, &key, value, EventType::Modified);
            } else if !is_deleting(&obj.value) {
                let _ = world.delete(kind, &key, &DeleteOpts::default());
            }
        }
    }
    let owners: Vec<(Kind, Key)> = world.ctl.foreground.iter().cloned().collect();
    for (kind, key) in owners {
        let Some(obj) = world.get(kind, &key).cloned() else {
            world.ctl.foreground.remove(&(kind, key));
            continue;
        };
        if !has_foreground(&obj.value) {
            world.ctl.foreground.remove(&(kind, key));
            continue;
        }
        let uid = meta_str(&obj.value, "uid").to_owned();
        let deps: Vec<(Kind, Key)> =
            world.dependents.get(&uid).map(|s| s.iter().cloned().collect()).unwrap_or_default();
        if deps.is_empty() {
            let mut value = obj.value.clone();
            if let Some(list) = value.pointer_mut("/metadata/finalizers").and_then(Value::as_array_mut) {
                list.retain(|f| f.as_str() != Some("foregroundDeletion"));
            }
            world.ctl.foreground.remove(&(kind, key.clone()));
            let _ = world.update(kind, &key, value, crate::ops::Sub::Main, None);
            continue;
        }
        for (dkind, dkey) in deps {
            if let Some(d) = world.get(dkind, &dkey).cloned()
                && !is_deleting(&d.value)
            {
                let _ = world.delete(dkind, &dkey, &DeleteOpts::default());
            }
        }
    }
    let namespaces: Vec<String> = world.ctl.namespaces_deleting.iter().cloned().collect();
    for ns in namespaces {
        let mut left = 0;
        for kind in Kind::ALL.into_iter().filter(|k| k.info().namespaced) {
            let keys: Vec<Key> = world
                .table(kind)
                .objects
                .range(Key::new(&ns, "")..)
                .take_while(|(k, _)| k.ns == ns)
                .map(|(k, _)| k.clone())
                .collect();
            left += keys.len();
            for key in keys {
                if let Some(obj) = world.get(kind, &key).cloned()
                    && !is_deleting(&obj.value)
                {
                    let _ = world.delete(
                        kind,
                        &key,
                        &DeleteOpts { propagation: Some("Background".into()), ..DeleteOpts::default() },
                    );
                }
            }
        }
        if left == 0 {
            world.ctl.namespaces_deleting.remove(&ns);
            let key = Key::new("", &ns);
            if let Some(obj) = world.get(Kind::Namespace, &key).cloned() {
                world.commit(Kind::Namespace, &key, obj.value.clone(), EventType::Deleted);
            }
        }
    }
}

/// A pod a controller creates, through the API path (webhooks, admission).
async fn create_pod(shared: Arc<Shared>, create: PodCreate) {
    let result = api::create(&shared, Kind::Pod, &create.key.ns, create.pod).await;
    let mut world = shared.world.lock().expect("the world's lock is never poisoned");
    match create.owner {
        Owner::Job => crate::jobctl::created(&mut world, &create.key, &create.uid, result),
        Owner::PaddleJob => crate::paddle::created(&mut world, &create.key, &create.uid, result),
    }
}
