//! The verbs on the world, under its lock: create, update (PUT, patch results, status),
//! delete (grace periods, finalizers, propagation), bind, list. Webhooks are called before
//! these, outside the lock (see `api.rs`).

use std::ops::Bound;

use serde_json::{Value, json};

use crate::admission;
use crate::errors::ApiError;
use crate::kinds::Kind;
use crate::select::{FieldSelector, LabelSelector};
use crate::store::{EventType, Key, Obj, World, has_finalizer, meta_str, now_rfc3339, plus_seconds_rfc3339};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Sub {
    Main,
    Status,
}

/// `DeleteOptions` as the fake reads them (from the query string or the body).
#[derive(Clone, Debug, Default)]
pub(crate) struct DeleteOpts {
    pub grace: Option<i64>,
    pub propagation: Option<String>,
    pub uid: Option<String>,
    pub resource_version: Option<String>,
}

impl DeleteOpts {
    pub(crate) fn from_body(body: &Value) -> DeleteOpts {
        let mut o = DeleteOpts {
            grace: body.get("gracePeriodSeconds").and_then(Value::as_i64),
            propagation: body.get("propagationPolicy").and_then(Value::as_str).map(str::to_owned),
            uid: body.pointer("/preconditions/uid").and_then(Value::as_str).map(str::to_owned),
            resource_version: body.pointer("/preconditions/resourceVersion").and_then(Value::as_str).map(str::to_owned),
        };
        if o.propagation.is_none() {
            match body.get("orphanDependents").and_then(Value::as_bool) {
                Some(true) => o.propagation = Some("Orphan".into()),
                Some(false) => o.propagation = Some("Background".into()),
                None => {}
            }
        }
        o
    }
}

/// One page of a list.
pub(crate) struct Page {
    pub items: Vec<Obj>,
    pub resource_version: u64,
    /// The key to continue after, if more may follow.
    pub next: Option<Key>,
    pub remaining: Option<u64>,
}

pub(crate) struct ListReq<'a> {
    pub ns: Option<&'a str>,
    pub labels: &'a LabelSelector,
    pub fields: &'a FieldSelector,
    pub limit: Option<usize>,
    pub after: Option<Key>,
    /// The resourceVersion of the first page, for the next ones.
    pub resource_version: Option<u64>,
}

impl World {
    pub(crate) fn create(&mut self, kind: Kind, ns: &str, mut v: Value) -> Result<Obj, ApiError> {
        let info = kind.info();
        if !v.is_object() {
            return Err(ApiError::bad_request("the body of the request is not a JSON object"));
        }
        check_type(kind, &v)?;
        v["apiVersion"] = json!(kind.api_version());
        v["kind"] = json!(info.kind);
        if v.get("metadata").is_none_or(|m| !m.is_object()) {
            v["metadata"] = json!({});
        }
        let body_ns = meta_str(&v, "namespace").to_owned();
        if info.namespaced {
            if !body_ns.is_empty() && body_ns != ns {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
            v["metadata"]["namespace"] = json!(ns);
            match self.get(Kind::Namespace, &Key::new("", ns)) {
                None => return Err(ApiError::namespace_not_found(ns)),
                Some(n) if n.value.pointer("/metadata/deletionTimestamp").is_some() => {
                    return Err(ApiError::forbidden(
                        kind,
                        meta_str(&v, "name"),
                        &format!("unable to create new content in namespace {ns} because it is being terminated"),
                    ));
                }
                Some(_) => {}
            }
        } else if let Some(meta) = v["metadata"].as_object_mut() {
            meta.remove("namespace");
        }
        let ns = if info.namespaced { ns } else { "" };
        if meta_str(&v, "name").is_empty() {
            let prefix = meta_str(&v, "generateName").to_owned();
            if prefix.is_empty() {
                return Err(ApiError::invalid(
                    kind,
                    "",
                    &[("metadata.name".into(), "Required value: name or generateName is required".into())],
                ));
            }
            let name = loop {
                let candidate = format!("{prefix}{}", self.name_suffix());
                if self.get(kind, &Key::new(ns, &candidate)).is_none() {
                    break candidate;
                }
            };
            v["metadata"]["name"] = json!(name);
        }
        let name = meta_str(&v, "name").to_owned();
        let key = Key::new(ns, &name);
        if self.get(kind, &key).is_some() {
            return Err(ApiError::already_exists(kind, &name));
        }
        let uid = self.new_uid();
        {
            let meta = v["metadata"].as_object_mut().expect("made an object above");
            for f in ["deletionTimestamp", "deletionGracePeriodSeconds", "resourceVersion", "managedFields", "selfLink"]
            {
                meta.remove(f);
            }
            meta.insert("uid".into(), json!(uid));
            meta.insert("creationTimestamp".into(), json!(now_rfc3339()));
            if info.generation {
                meta.insert("generation".into(), json!(1));
            } else {
                meta.remove("generation");
            }
        }
        admission::prepare_create(kind, &mut v);
        let causes = admission::validate(kind, &v);
        if !causes.is_empty() {
            return Err(ApiError::invalid(kind, &name, &causes));
        }
        if kind == Kind::Pod {
            self.admit_priority(&mut v).map_err(|why| ApiError::forbidden(kind, &name, &why))?;
            crate::quota::admit(self, ns, &v).map_err(|why| ApiError::forbidden(kind, &name, &why))?;
        }
        Ok(self.commit(kind, &key, v, EventType::Added))
    }

    /// The Priority admission plugin: `spec.priority` and `spec.preemptionPolicy` from the
    /// pod's PriorityClass (or the global default class).
    fn admit_priority(&self, pod: &mut Value) -> Result<(), String> {
        let named = pod.pointer("/spec/priorityClassName").and_then(Value::as_str).unwrap_or_default().to_owned();
        let classes = &self.table(Kind::PriorityClass).objects;
        let class = if named.is_empty() {
            classes.values().find(|c| c.value.get("globalDefault").and_then(Value::as_bool) == Some(true))
        } else {
            Some(
                classes
                    .get(&Key::new("", &named))
                    .ok_or_else(|| format!("no PriorityClass with name {named} was found"))?,
            )
        };
        let (name, value, policy) = match class {
            Some(c) => (
                meta_str(&c.value, "name").to_owned(),
                c.value.get("value").and_then(Value::as_i64).unwrap_or(0),
                c.value.get("preemptionPolicy").and_then(Value::as_str).unwrap_or("PreemptLowerPriority").to_owned(),
            ),
            None => (String::new(), 0, "PreemptLowerPriority".to_owned()),
        };
        if let Some(given) = pod.pointer("/spec/priority").and_then(Value::as_i64)
            && given != value
        {
            return Err(format!(
                "the integer value of priority ({given}) must not be provided in pod spec; priority admission controller computed {value} from the given PriorityClass name"
            ));
        }
        let spec = &mut pod["spec"];
        spec["priority"] = json!(value);
        spec["preemptionPolicy"] = json!(policy);
        if !name.is_empty() {
            spec["priorityClassName"] = json!(name);
        }
        Ok(())
    }

    /// An update with `new` as the object wanted (a PUT body, or a patch's result).
    /// `expect_rv`: the resourceVersion the writer read (a stale one is 409).
    pub(crate) fn update(
        &mut self,
        kind: Kind,
        key: &Key,
        mut new: Value,
        sub: Sub,
        expect_rv: Option<&str>,
    ) -> Result<Obj, ApiError> {
        let info = kind.info();
        let old = self.get(kind, key).cloned().ok_or_else(|| ApiError::not_found(kind, &key.name))?;
        if !new.is_object() {
            return Err(ApiError::bad_request("the body of the request is not a JSON object"));
        }
        check_type(kind, &new)?;
        if let Some(rv) = expect_rv.filter(|rv| !rv.is_empty())
            && rv != old.rv.to_string()
        {
            return Err(ApiError::conflict(kind, &key.name));
        }
        let body_name = meta_str(&new, "name");
        if !body_name.is_empty() && body_name != key.name {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({})",
                key.name
            )));
        }
        let body_ns = meta_str(&new, "namespace");
        if info.namespaced && !body_ns.is_empty() && body_ns != key.ns {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        let mut result = match sub {
            Sub::Status => {
                let mut r = old.value.clone();
                match new.get("status") {
                    Some(s) if !s.is_null() => r["status"] = s.clone(),
                    _ => {
                        if let Some(m) = r.as_object_mut() {
                            m.remove("status");
                        }
                    }
                }
                r
            }
            Sub::Main => {
                new["apiVersion"] = json!(kind.api_version());
                new["kind"] = json!(info.kind);
                if new.get("metadata").is_none_or(|m| !m.is_object()) {
                    new["metadata"] = json!({});
                }
                let meta = new["metadata"].as_object_mut().expect("made an object above");
                for f in [
                    "uid",
                    "creationTimestamp",
                    "deletionTimestamp",
                    "deletionGracePeriodSeconds",
                    "generation",
                    "name",
                    "namespace",
                ] {
                    match old.value.pointer(&format!("/metadata/{f}")) {
                        Some(v) => meta.insert(f.into(), v.clone()),
                        None => meta.remove(f),
                    };
                }
                meta.remove("managedFields");
                meta.remove("selfLink");
                if info.status {
                    match old.value.get("status") {
                        Some(s) => new["status"] = s.clone(),
                        None => {
                            if let Some(m) = new.as_object_mut() {
                                m.remove("status");
                            }
                        }
                    }
                }
                if info.generation && spec_part(&old.value) != spec_part(&new) {
                    let g = old.value.pointer("/metadata/generation").and_then(Value::as_i64).unwrap_or(0);
                    new["metadata"]["generation"] = json!(g + 1);
                }
                let mut causes = admission::validate(kind, &new);
                causes.extend(admission::validate_update(kind, &old.value, &new));
                if !causes.is_empty() {
                    return Err(ApiError::invalid(kind, &key.name, &causes));
                }
                new
            }
        };
        result["metadata"]["resourceVersion"] = json!(old.rv.to_string());
        if result == old.value {
            return Ok(old);
        }
        let deleting = result.pointer("/metadata/deletionTimestamp").is_some();
        let grace_done =
            result.pointer("/metadata/deletionGracePeriodSeconds").and_then(Value::as_i64).unwrap_or(0) == 0;
        let no_finalizers = result.pointer("/metadata/finalizers").and_then(Value::as_array).is_none_or(Vec::is_empty);
        if deleting && grace_done && no_finalizers {
            return Ok(self.commit(kind, key, result, EventType::Deleted));
        }
        Ok(self.commit(kind, key, result, EventType::Modified))
    }

    /// DELETE. Returns the object (its last state, or its state while its deletion is under
    /// way) and whether it is gone.
    pub(crate) fn delete(&mut self, kind: Kind, key: &Key, opts: &DeleteOpts) -> Result<(Obj, bool), ApiError> {
        let obj = self.get(kind, key).cloned().ok_or_else(|| ApiError::not_found(kind, &key.name))?;
        let v = &obj.value;
        if let Some(uid) = &opts.uid
            && uid != meta_str(v, "uid")
        {
            return Err(ApiError::conflict_with(
                kind,
                &key.name,
                &format!("Precondition failed: UID in precondition: {uid}, UID in object meta: {}", meta_str(v, "uid")),
            ));
        }
        if let Some(rv) = &opts.resource_version
            && *rv != obj.rv.to_string()
        {
            return Err(ApiError::conflict_with(
                kind,
                &key.name,
                &format!(
                    "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                    obj.rv
                ),
            ));
        }
        let mut grace = 0;
        if kind == Kind::Pod {
            let bound = v.pointer("/spec/nodeName").and_then(Value::as_str).is_some_and(|n| !n.is_empty());
            let terminal = matches!(v.pointer("/status/phase").and_then(Value::as_str), Some("Succeeded" | "Failed"));
            let default = v.pointer("/spec/terminationGracePeriodSeconds").and_then(Value::as_i64).unwrap_or(30);
            grace = opts.grace.unwrap_or(default).max(0);
            if !bound || terminal {
                grace = 0;
            }
        }
        let propagation = opts
            .propagation
            .clone()
            .unwrap_or_else(|| if kind == Kind::Job { "Orphan".into() } else { "Background".into() });
        if !matches!(propagation.as_str(), "Orphan" | "Background" | "Foreground") {
            return Err(ApiError::bad_request(format!(
                "propagationPolicy: Unsupported value: {propagation:?}: supported values: \"Foreground\", \"Background\", \"Orphan\""
            )));
        }
        let already = v.pointer("/metadata/deletionTimestamp").is_some();
        if already {
            // A shorter grace period shortens a deletion under way; nothing else changes it.
            let current = v.pointer("/metadata/deletionGracePeriodSeconds").and_then(Value::as_i64).unwrap_or(0);
            if kind == Kind::Pod && grace < current {
                return self.start_graceful(kind, key, &obj, grace);
            }
            return Ok((obj, false));
        }
        if kind == Kind::Namespace {
            // The namespace controller empties it, then it goes (see ctl.rs).
            if matches!(key.name.as_str(), "default" | "kube-system" | "kube-public") {
                return Err(ApiError::forbidden(kind, &key.name, "this namespace may not be deleted"));
            }
            let mut value = obj.value.clone();
            value["metadata"]["deletionTimestamp"] = json!(now_rfc3339());
            value["metadata"]["deletionGracePeriodSeconds"] = json!(0);
            value["status"]["phase"] = json!("Terminating");
            return Ok((self.commit(kind, key, value, EventType::Modified), false));
        }
        let uid = meta_str(v, "uid").to_owned();
        if propagation == "Orphan" {
            self.orphan_dependents(&uid);
        }
        if propagation == "Foreground" && self.dependents.contains_key(&uid) {
            let mut value = obj.value.clone();
            let finalizers = value["metadata"]
                .as_object_mut()
                .expect("stored objects have metadata")
                .entry("finalizers")
                .or_insert_with(|| json!([]));
            if let Some(list) = finalizers.as_array_mut() {
                list.push(json!("foregroundDeletion"));
            }
            value["metadata"]["deletionTimestamp"] = json!(now_rfc3339());
            value["metadata"]["deletionGracePeriodSeconds"] = json!(0);
            let obj = self.commit(kind, key, value, EventType::Modified);
            return Ok((obj, false));
        }
        if grace > 0 {
            return self.start_graceful(kind, key, &obj, grace);
        }
        Ok(self.finish_delete(kind, key))
    }

    fn start_graceful(&mut self, kind: Kind, key: &Key, obj: &Obj, grace: i64) -> Result<(Obj, bool), ApiError> {
        if grace == 0 {
            return Ok(self.finish_delete(kind, key));
        }
        let mut value = obj.value.clone();
        value["metadata"]["deletionTimestamp"] = json!(plus_seconds_rfc3339(grace));
        value["metadata"]["deletionGracePeriodSeconds"] = json!(grace);
        Ok((self.commit(kind, key, value, EventType::Modified), false))
    }

    /// The end of a deletion (grace period over, or none): the object goes, unless
    /// finalizers hold it (then it waits for them with a grace period of 0).
    pub(crate) fn finish_delete(&mut self, kind: Kind, key: &Key) -> (Obj, bool) {
        let obj = self.get(kind, key).cloned().expect("the caller found it");
        let finalizers =
            obj.value.pointer("/metadata/finalizers").and_then(Value::as_array).is_some_and(|f| !f.is_empty());
        let mut value = obj.value.clone();
        if finalizers {
            let meta = &mut value["metadata"];
            if meta.get("deletionTimestamp").is_none() {
                meta["deletionTimestamp"] = json!(now_rfc3339());
            }
            meta["deletionGracePeriodSeconds"] = json!(0);
            if value == obj.value {
                return (obj, false);
            }
            return (self.commit(kind, key, value, EventType::Modified), false);
        }
        (self.commit(kind, key, value, EventType::Deleted), true)
    }

    /// Orphan propagation: the dependents lose their reference to the owner.
    fn orphan_dependents(&mut self, owner_uid: &str) {
        let Some(deps) = self.dependents.get(owner_uid).cloned() else { return };
        for (kind, key) in deps {
            let Some(obj) = self.get(kind, &key).cloned() else { continue };
            let mut value = obj.value.clone();
            if let Some(refs) = value.pointer_mut("/metadata/ownerReferences").and_then(Value::as_array_mut) {
                refs.retain(|r| r.get("uid").and_then(Value::as_str) != Some(owner_uid));
            }
            self.commit(kind, &key, value, EventType::Modified);
        }
    }

    /// POST pods/{name}/binding: the scheduler's write.
    pub(crate) fn bind(&mut self, ns: &str, pod_name: &str, binding: &Value) -> Result<(), ApiError> {
        let target = binding.pointer("/target/name").and_then(Value::as_str).unwrap_or_default();
        if target.is_empty() {
            return Err(ApiError::invalid(Kind::Pod, pod_name, &[("target.name".into(), "Required value".into())]));
        }
        if let Some(kind) = binding.pointer("/target/kind").and_then(Value::as_str)
            && !kind.is_empty()
            && kind != "Node"
        {
            return Err(ApiError::invalid(
                Kind::Pod,
                pod_name,
                &[("target.kind".into(), format!("Unsupported value: {kind:?}: supported values: \"Node\""))],
            ));
        }
        let key = Key::new(ns, pod_name);
        let pod = self.get(Kind::Pod, &key).cloned().ok_or_else(|| ApiError::not_found(Kind::Pod, pod_name))?;
        let conflict = |why: String| {
            ApiError::new(
                409,
                "Conflict",
                format!("Operation cannot be fulfilled on pods/binding \"{pod_name}\": {why}"),
            )
        };
        if let Some(uid) = binding.pointer("/metadata/uid").and_then(Value::as_str)
            && !uid.is_empty()
            && uid != meta_str(&pod.value, "uid")
        {
            return Err(conflict(format!(
                "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                meta_str(&pod.value, "uid")
            )));
        }
        if pod.value.pointer("/metadata/deletionTimestamp").is_some() {
            return Err(conflict(format!("pod {pod_name} is being deleted, cannot be assigned to a host")));
        }
        if let Some(node) = pod.value.pointer("/spec/nodeName").and_then(Value::as_str).filter(|n| !n.is_empty()) {
            return Err(conflict(format!("pod {pod_name} is already assigned to node \"{node}\"")));
        }
        let mut value = pod.value.clone();
        value["spec"]["nodeName"] = json!(target);
        if let Some(annotations) = binding.pointer("/metadata/annotations").and_then(Value::as_object) {
            let meta = value["metadata"].as_object_mut().expect("stored objects have metadata");
            let into = meta.entry("annotations").or_insert_with(|| json!({}));
            if let Some(into) = into.as_object_mut() {
                for (k, v) in annotations {
                    into.insert(k.clone(), v.clone());
                }
            }
        }
        set_condition(&mut value, "PodScheduled", "True", "", "");
        self.commit(Kind::Pod, &key, value, EventType::Modified);
        Ok(())
    }

    /// One page of a list. Pages after the first continue from the current state after
    /// the last key sent, under the first page's resourceVersion (see the crate doc).
    pub(crate) fn list(&self, kind: Kind, req: &ListReq<'_>) -> Page {
        let table = self.table(kind);
        let ns = req.ns.or(req.fields.namespace());
        let lower = match (&req.after, ns) {
            (Some(after), _) => Bound::Excluded(after.clone()),
            (None, Some(ns)) => Bound::Included(Key::new(ns, "")),
            (None, None) => Bound::Unbounded,
        };
        let in_ns = |k: &Key| ns.is_none_or(|ns| k.ns == ns);
        let mut items = Vec::new();
        let mut next = None;
        let filtered = !req.labels.is_empty() || !req.fields.is_empty();
        // Pods on one node: the by-node index rather than a scan.
        if kind == Kind::Pod
            && let Some(node) = req.fields.node_name()
        {
            let keys = self.pods_by_node.get(node);
            for key in keys.into_iter().flatten() {
                if req.after.as_ref().is_some_and(|a| key <= a) || !in_ns(key) {
                    continue;
                }
                let Some(obj) = table.objects.get(key) else { continue };
                if req.labels.matches_object(&obj.value) && req.fields.matches(&obj.value) {
                    if req.limit.is_some_and(|l| items.len() >= l) {
                        next = items.last().map(|o: &Obj| Key::of(&o.value));
                        break;
                    }
                    items.push(obj.clone());
                }
            }
            return Page { items, resource_version: req.resource_version.unwrap_or(self.rv), next, remaining: None };
        }
        let mut range = table.objects.range((lower, Bound::Unbounded));
        let mut last: Option<&Key> = None;
        for (key, obj) in range.by_ref() {
            if !in_ns(key) {
                break;
            }
            if filtered && !(req.labels.matches_object(&obj.value) && req.fields.matches(&obj.value)) {
                last = Some(key);
                continue;
            }
            items.push(obj.clone());
            last = Some(key);
            if req.limit.is_some_and(|l| items.len() >= l) {
                break;
            }
        }
        let mut remaining = None;
        if req.limit.is_some_and(|l| items.len() >= l) {
            let rest = range.take_while(|(k, _)| in_ns(k)).count() as u64;
            if rest > 0 {
                next = last.cloned();
                if !filtered {
                    remaining = Some(rest);
                }
            }
        }
        Page { items, resource_version: req.resource_version.unwrap_or(self.rv), next, remaining }
    }
}

/// Everything but metadata and status: what bumps `generation`.
fn spec_part(v: &Value) -> Value {
    let mut s = v.clone();
    if let Some(m) = s.as_object_mut() {
        m.remove("metadata");
        m.remove("status");
    }
    s
}

/// A body's `apiVersion`/`kind`, when given, must be the resource's.
fn check_type(kind: Kind, v: &Value) -> Result<(), ApiError> {
    let api_version = v.get("apiVersion").and_then(Value::as_str).unwrap_or_default();
    let k = v.get("kind").and_then(Value::as_str).unwrap_or_default();
    if (!api_version.is_empty() && api_version != kind.api_version()) || (!k.is_empty() && k != kind.info().kind) {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({api_version}) does not match the expected API version ({}) or the kind ({k}) is not {}",
            kind.api_version(),
            kind.info().kind
        )));
    }
    Ok(())
}

/// Sets (or adds) a condition of `status.conditions`, keeping its transition time when its
/// status does not change. Returns whether anything changed.
pub(crate) fn set_condition(object: &mut Value, kind: &str, status: &str, reason: &str, message: &str) -> bool {
    if object.get("status").is_none_or(|s| !s.is_object()) {
        object["status"] = json!({});
    }
    let conditions =
        object["status"].as_object_mut().expect("made above").entry("conditions").or_insert_with(|| json!([]));
    if !conditions.is_array() {
        *conditions = json!([]);
    }
    let list = conditions.as_array_mut().expect("made above");
    let now = now_rfc3339();
    let mut fresh = json!({"type": kind, "status": status, "lastProbeTime": null, "lastTransitionTime": now});
    if !reason.is_empty() {
        fresh["reason"] = json!(reason);
    }
    if !message.is_empty() {
        fresh["message"] = json!(message);
    }
    match list.iter_mut().find(|c| c.get("type").and_then(Value::as_str) == Some(kind)) {
        Some(existing) => {
            let same_status = existing.get("status").and_then(Value::as_str) == Some(status);
            let same_text = existing.get("reason").and_then(Value::as_str).unwrap_or_default() == reason
                && existing.get("message").and_then(Value::as_str).unwrap_or_default() == message;
            if same_status && same_text {
                return false;
            }
            if same_status {
                fresh["lastTransitionTime"] = existing.get("lastTransitionTime").cloned().unwrap_or(Value::Null);
            }
            *existing = fresh;
        }
        None => list.push(fresh),
    }
    true
}

pub(crate) fn condition<'a>(object: &'a Value, kind: &str) -> Option<&'a Value> {
    object
        .pointer("/status/conditions")
        .and_then(Value::as_array)?
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(kind))
}

pub(crate) fn condition_true(object: &Value, kind: &str) -> bool {
    condition(object, kind).and_then(|c| c.get("status")).and_then(Value::as_str) == Some("True")
}

pub(crate) fn is_deleting(v: &Value) -> bool {
    v.pointer("/metadata/deletionTimestamp").is_some_and(|t| !t.is_null())
}

pub(crate) fn has_foreground(v: &Value) -> bool {
    has_finalizer(v, "foregroundDeletion")
}
