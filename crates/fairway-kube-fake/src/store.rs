//! The world: every object, one global resourceVersion, each resource's watch history, and
//! the indexes the controllers need. Everything changes through [`World::commit`], which
//! bumps the resourceVersion, serializes the object once (lists and watches send those
//! bytes as they are, so a watch fan-out copies no object), records the change in the
//! resource's history, keeps the indexes and tells the controllers what became dirty.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::fmt;
use std::sync::Arc;

use axum::body::Bytes;
use serde_json::{Value, json};
use tokio::sync::{Notify, watch};

use crate::FakeConfig;
use crate::ctl::CtlState;
use crate::kinds::Kind;
use crate::quota::QuotaBook;
use crate::webhook::Hook;

/// An object's address: its namespace (empty for cluster-scoped kinds) and name, ordered as
/// etcd orders keys, which is the order of lists.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Key {
    pub ns: String,
    pub name: String,
}

impl Key {
    pub(crate) fn new(ns: &str, name: &str) -> Key {
        Key { ns: ns.to_owned(), name: name.to_owned() }
    }

    pub(crate) fn of(object: &Value) -> Key {
        Key::new(meta_str(object, "namespace"), meta_str(object, "name"))
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.ns.is_empty() { write!(f, "{}", self.name) } else { write!(f, "{}/{}", self.ns, self.name) }
    }
}

/// One version of an object, immutable once stored: shared by the table, the watch history
/// and every response that sends it.
pub(crate) struct Stored {
    pub value: Value,
    pub json: Bytes,
    pub rv: u64,
}

pub(crate) type Obj = Arc<Stored>;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub(crate) fn wire(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One entry of a resource's watch history. `prev` is the version it replaced, so that a
/// watch with a selector can turn an update that leaves (enters) the selection into a
/// DELETED (ADDED), as the real server does.
pub(crate) struct Change {
    pub rv: u64,
    pub ty: EventType,
    pub obj: Obj,
    pub prev: Option<Obj>,
}

pub(crate) struct Table {
    pub objects: BTreeMap<Key, Obj>,
    /// The last changes, oldest first, at most `FakeConfig::watch_history`.
    pub history: VecDeque<Arc<Change>>,
    /// A watch may resume from any resourceVersion at or after this one; older ones are
    /// gone (410). It is the last change dropped from the history.
    pub floor: u64,
    /// The resourceVersion of the last change: what watches of this kind wait on.
    pub notify: watch::Sender<u64>,
}

pub(crate) struct World {
    pub config: Arc<FakeConfig>,
    pub rv: u64,
    pub tables: Vec<Table>,
    /// For uids, generated names and addresses: a counter, so that runs are repeatable.
    seq: u64,
    pub writes: u64,
    pub by_uid: HashMap<String, (Kind, Key)>,
    /// Owner uid → the objects whose ownerReferences name it.
    pub dependents: HashMap<String, BTreeSet<(Kind, Key)>>,
    /// Node name → the pods bound to it.
    pub pods_by_node: HashMap<String, BTreeSet<Key>>,
    pub quota: QuotaBook,
    pub ctl: CtlState,
    pub webhooks: Arc<Vec<Hook>>,
    webhooks_stale: bool,
    /// Events in creation order, to drop the oldest beyond `FakeConfig::events_max`.
    events_order: VecDeque<Key>,
    pub wake: Arc<Notify>,
}

impl World {
    pub(crate) fn new(config: Arc<FakeConfig>, wake: Arc<Notify>) -> World {
        let tables = Kind::ALL
            .iter()
            .map(|_| Table {
                objects: BTreeMap::new(),
                history: VecDeque::new(),
                floor: 0,
                notify: watch::channel(0).0,
            })
            .collect();
        let mut world = World {
            config,
            rv: 0,
            tables,
            seq: 0,
            writes: 0,
            by_uid: HashMap::new(),
            dependents: HashMap::new(),
            pods_by_node: HashMap::new(),
            quota: QuotaBook::default(),
            ctl: CtlState::default(),
            webhooks: Arc::new(Vec::new()),
            webhooks_stale: false,
            events_order: VecDeque::new(),
            wake,
        };
        world.seed();
        world
    }

    /// What every cluster has from the start: its namespaces and system priority classes.
    fn seed(&mut self) {
        for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
            let object = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}, "spec": {"finalizers": ["kubernetes"]}});
            self.create(Kind::Namespace, "", object).expect("a fresh world takes its namespaces");
        }
        for (name, value) in [("system-cluster-critical", 2_000_000_000i64), ("system-node-critical", 2_000_001_000)] {
            let object = json!({
                "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name},
                "value": value, "description": "Used for system critical pods that must not be moved from their current node.",
                "preemptionPolicy": "PreemptLowerPriority",
            });
            self.create(Kind::PriorityClass, "", object).expect("a fresh world takes its priority classes");
        }
    }

    pub(crate) fn table(&self, kind: Kind) -> &Table {
        &self.tables[kind.index()]
    }

    pub(crate) fn get(&self, kind: Kind, key: &Key) -> Option<&Obj> {
        self.tables[kind.index()].objects.get(key)
    }

    pub(crate) fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    /// A uid in the usual 8-4-4-4-12 form, from the counter.
    pub(crate) fn new_uid(&mut self) -> String {
        let n = self.next_seq();
        format!("00000000-0000-4000-8000-{n:012x}")
    }

    /// The five characters `generateName` appends, from the counter (in the alphabet of the
    /// real server, which avoids vowels and look-alike digits).
    pub(crate) fn name_suffix(&mut self) -> String {
        const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
        let mut n = self.next_seq();
        let mut s = [b'b'; 5];
        for c in s.iter_mut().rev() {
            *c = ALPHABET[(n % ALPHABET.len() as u64) as usize];
            n /= ALPHABET.len() as u64;
        }
        String::from_utf8(s.to_vec()).expect("ASCII")
    }

    /// Stores a new version of an object (or removes it, for `Deleted`, `value` then being
    /// its last state) under a fresh resourceVersion, and returns the stored version.
    pub(crate) fn commit(&mut self, kind: Kind, key: &Key, mut value: Value, ty: EventType) -> Obj {
        self.rv += 1;
        self.writes += 1;
        let rv = self.rv;
        if let Some(meta) = value.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.insert("resourceVersion".into(), Value::String(rv.to_string()));
        }
        let json = Bytes::from(serde_json::to_vec(&value).expect("a JSON value serializes"));
        let obj = Arc::new(Stored { value, json, rv });
        let history_max = self.config.watch_history.max(1);
        let table = &mut self.tables[kind.index()];
        let prev = match ty {
            EventType::Deleted => table.objects.remove(key),
            EventType::Added | EventType::Modified => table.objects.insert(key.clone(), obj.clone()),
        };
        table.history.push_back(Arc::new(Change { rv, ty, obj: obj.clone(), prev: prev.clone() }));
        while table.history.len() > history_max {
            if let Some(dropped) = table.history.pop_front() {
                table.floor = dropped.rv;
            }
        }
        table.notify.send_replace(rv);
        let current = (ty != EventType::Deleted).then(|| obj.clone());
        self.reindex(kind, key, prev, current);
        if kind == Kind::Event && ty == EventType::Added {
            self.events_order.push_back(key.clone());
            self.trim_events();
        }
        obj
    }

    /// Keeps the indexes and tells the controllers what changed.
    fn reindex(&mut self, kind: Kind, key: &Key, prev: Option<Obj>, new: Option<Obj>) {
        let prev_v = prev.as_deref().map(|o| &o.value);
        let new_v = new.as_deref().map(|o| &o.value);
        // uid index
        match (prev_v, new_v) {
            (Some(p), None) => {
                self.by_uid.remove(meta_str(p, "uid"));
            }
            (None, Some(n)) => {
                self.by_uid.insert(meta_str(n, "uid").to_owned(), (kind, key.clone()));
            }
            _ => {}
        }
        // owner index
        let owners_before = owner_uids(prev_v);
        let owners_after = owner_uids(new_v);
        if owners_before != owners_after {
            for uid in owners_before.difference(&owners_after) {
                if let Some(set) = self.dependents.get_mut(uid) {
                    set.remove(&(kind, key.clone()));
                    if set.is_empty() {
                        self.dependents.remove(uid);
                    }
                }
            }
            for uid in owners_after.difference(&owners_before) {
                self.dependents.entry(uid.clone()).or_default().insert((kind, key.clone()));
            }
        }
        // a removed owner: its dependents are the garbage collector's
        if let (Some(p), None) = (prev_v, new_v) {
            let uid = meta_str(p, "uid");
            if self.dependents.contains_key(uid) {
                self.ctl.gc.insert(uid.to_owned());
            }
        }
        match kind {
            Kind::Pod => {
                let node_before = prev_v.and_then(|v| v.pointer("/spec/nodeName")).and_then(Value::as_str);
                let node_after = new_v.and_then(|v| v.pointer("/spec/nodeName")).and_then(Value::as_str);
                if node_before != node_after {
                    if let Some(n) = node_before
                        && let Some(set) = self.pods_by_node.get_mut(n)
                    {
                        set.remove(key);
                        if set.is_empty() {
                            self.pods_by_node.remove(n);
                        }
                    }
                    if let Some(n) = node_after {
                        self.pods_by_node.entry(n.to_owned()).or_default().insert(key.clone());
                    }
                }
                crate::quota::on_pod(self, key, prev_v, new_v);
                self.ctl.pod_changed(key, prev_v, new_v);
            }
            Kind::ResourceQuota => crate::quota::on_quota(self, key, new_v),
            Kind::Job => {
                self.ctl.dirty_jobs.insert(key.clone());
            }
            Kind::PaddleJob => {
                self.ctl.dirty_paddles.insert(key.clone());
            }
            Kind::Node => {
                let ready_before = prev_v.map(node_ready);
                let ready_after = new_v.map(node_ready);
                if ready_before != ready_after {
                    self.ctl.dirty_nodes.insert(key.name.clone());
                }
            }
            Kind::Namespace if new_v.is_some_and(|v| v.pointer("/metadata/deletionTimestamp").is_some()) => {
                self.ctl.namespaces_deleting.insert(key.name.clone());
            }
            Kind::MutatingWebhookConfiguration => self.webhooks_stale = true,
            _ => {}
        }
        if let Some(n) = new_v
            && n.pointer("/metadata/deletionTimestamp").is_some()
            && has_finalizer(n, "foregroundDeletion")
        {
            self.ctl.foreground.insert((kind, key.clone()));
        }
        self.wake.notify_one();
    }

    fn trim_events(&mut self) {
        while self.events_order.len() > self.config.events_max {
            let Some(oldest) = self.events_order.pop_front() else { break };
            if let Some(obj) = self.get(Kind::Event, &oldest).cloned() {
                self.commit(Kind::Event, &oldest, obj.value.clone(), EventType::Deleted);
            }
        }
    }

    /// The mutating webhooks, rebuilt after their configurations changed.
    pub(crate) fn hooks(&mut self) -> Arc<Vec<Hook>> {
        if self.webhooks_stale {
            let configs: Vec<Value> =
                self.table(Kind::MutatingWebhookConfiguration).objects.values().map(|o| o.value.clone()).collect();
            self.webhooks = Arc::new(crate::webhook::compile(&configs));
            self.webhooks_stale = false;
        }
        self.webhooks.clone()
    }

    /// Forgets every resource's watch history: any watch resuming from before now gets 410.
    pub(crate) fn expire_history(&mut self) {
        let rv = self.rv;
        for table in &mut self.tables {
            table.history.clear();
            table.floor = rv;
        }
    }

    /// Records a core/v1 Event about `object`, as a controller's event recorder does.
    pub(crate) fn record_event(
        &mut self,
        kind: Kind,
        object: &Value,
        warning: bool,
        reason: &str,
        message: &str,
        component: &str,
    ) {
        if !self.config.events {
            return;
        }
        let ns = meta_str(object, "namespace").to_owned();
        let ns = if ns.is_empty() { "default".to_owned() } else { ns };
        let name = format!("{}.{:x}", meta_str(object, "name"), 0x1800_0000_0000u64 + self.next_seq());
        let now = now_rfc3339();
        let uid = self.new_uid();
        let event = json!({
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": ns, "uid": uid, "creationTimestamp": now},
            "involvedObject": {
                "apiVersion": kind.api_version(),
                "kind": kind.info().kind,
                "name": meta_str(object, "name"),
                "namespace": meta_str(object, "namespace"),
                "uid": meta_str(object, "uid"),
                "resourceVersion": meta_str(object, "resourceVersion"),
            },
            "reason": reason,
            "message": message,
            "type": if warning { "Warning" } else { "Normal" },
            "source": {"component": component},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
            "eventTime": null,
            "reportingComponent": component,
            "reportingInstance": "",
        });
        let key = Key::new(&ns, &name);
        self.commit(Kind::Event, &key, event, EventType::Added);
    }
}

pub(crate) fn meta_str<'a>(object: &'a Value, field: &str) -> &'a str {
    object.get("metadata").and_then(|m| m.get(field)).and_then(Value::as_str).unwrap_or_default()
}

pub(crate) fn owner_uids(object: Option<&Value>) -> BTreeSet<String> {
    object
        .and_then(|o| o.pointer("/metadata/ownerReferences"))
        .and_then(Value::as_array)
        .map(|refs| refs.iter().filter_map(|r| r.get("uid").and_then(Value::as_str)).map(str::to_owned).collect())
        .unwrap_or_default()
}

pub(crate) fn has_finalizer(object: &Value, finalizer: &str) -> bool {
    object
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .is_some_and(|f| f.iter().any(|x| x.as_str() == Some(finalizer)))
}

/// A node without a Ready condition counts as ready (a test's bare node); `False` and
/// `Unknown` do not.
pub(crate) fn node_ready(node: &Value) -> bool {
    node.pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|c| c.iter().find(|c| c.get("type").and_then(Value::as_str) == Some("Ready")))
        .is_none_or(|c| c.get("status").and_then(Value::as_str) == Some("True"))
}

/// Now as `metav1.Time` writes it: RFC 3339 in whole seconds.
pub(crate) fn now_rfc3339() -> String {
    let now = jiff::Timestamp::now();
    jiff::Timestamp::from_second(now.as_second()).unwrap_or(now).to_string()
}

pub(crate) fn plus_seconds_rfc3339(seconds: i64) -> String {
    let now = jiff::Timestamp::now();
    let t = jiff::Timestamp::from_second(now.as_second().saturating_add(seconds)).unwrap_or(now);
    t.to_string()
}
