//! ResourceQuota: admission of pods against `spec.hard` (403 `exceeded quota`, or `must
//! specify` for compute resources the quota limits), and `status.used` kept from the pods
//! that count (not terminal; terminating ones count until they are gone, as in
//! Kubernetes). Usage is kept incrementally per quota, so admitting a pod costs the number
//! of quotas in its namespace, not its number of pods. Scopes: `scopeSelector` on
//! `PriorityClass`, and the `Terminating`/`NotTerminating`/`BestEffort`/`NotBestEffort`
//! scopes.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde_json::{Value, json};

use crate::kinds::Kind;
use crate::quantity::{self, Milli};
use crate::store::{EventType, Key, World};

/// What a counted pod charges.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Charge {
    pub requests: BTreeMap<String, Milli>,
    pub limits: BTreeMap<String, Milli>,
    priority_class: String,
    terminating: bool,
    best_effort: bool,
}

#[derive(Clone, Debug, PartialEq)]
struct Compiled {
    hard: BTreeMap<String, (Milli, bool)>,
    scopes: Vec<String>,
    priority: Vec<(String, Vec<String>)>,
}

struct QuotaState {
    compiled: Compiled,
    used: BTreeMap<String, Milli>,
}

#[derive(Default)]
pub(crate) struct QuotaBook {
    charges: HashMap<Key, Charge>,
    quotas: HashMap<Key, QuotaState>,
    by_ns: HashMap<String, BTreeSet<String>>,
    /// Quotas whose `status` may be behind.
    pub dirty: BTreeSet<Key>,
}

/// A pod's effective requests and limits: the sum over its containers, or the largest init
/// container if larger, plus its overhead.
pub(crate) fn pod_resources(spec: Option<&Value>) -> (BTreeMap<String, Milli>, BTreeMap<String, Milli>) {
    let mut out = (BTreeMap::new(), BTreeMap::new());
    let Some(spec) = spec else { return out };
    for (which, field) in [(0, "requests"), (1, "limits")] {
        let mut sum: BTreeMap<String, Milli> = BTreeMap::new();
        let read = |c: &Value| -> Vec<(String, Milli)> {
            c.pointer(&format!("/resources/{field}"))
                .and_then(Value::as_object)
                .into_iter()
                .flatten()
                .filter_map(|(r, q)| Some((r.clone(), quantity_of(q)?)))
                .collect()
        };
        for c in spec.get("containers").and_then(Value::as_array).into_iter().flatten() {
            for (r, q) in read(c) {
                *sum.entry(r).or_default() += q;
            }
        }
        for c in spec.get("initContainers").and_then(Value::as_array).into_iter().flatten() {
            for (r, q) in read(c) {
                let e = sum.entry(r).or_default();
                *e = (*e).max(q);
            }
        }
        for (r, q) in spec.get("overhead").and_then(Value::as_object).into_iter().flatten() {
            if let Some(q) = quantity_of(q) {
                *sum.entry(r.clone()).or_default() += q;
            }
        }
        if which == 0 {
            out.0 = sum;
        } else {
            out.1 = sum;
        }
    }
    out
}

pub(crate) fn quantity_of(q: &Value) -> Option<Milli> {
    match q {
        Value::String(s) => quantity::parse(s),
        Value::Number(n) => n.as_f64().map(|f| (f * 1000.0).ceil() as Milli),
        _ => None,
    }
}

fn terminal(pod: &Value) -> bool {
    matches!(pod.pointer("/status/phase").and_then(Value::as_str), Some("Succeeded" | "Failed"))
}

fn charge_of(pod: &Value) -> Charge {
    let spec = pod.get("spec");
    let (requests, limits) = pod_resources(spec);
    Charge {
        best_effort: requests.is_empty() && limits.is_empty(),
        requests,
        limits,
        priority_class: spec
            .and_then(|s| s.get("priorityClassName"))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        terminating: spec.and_then(|s| s.get("activeDeadlineSeconds")).is_some_and(|v| !v.is_null()),
    }
}

/// What a quota resource name counts of one pod; `None` for names the fake does not track.
fn amount(charge: &Charge, resource: &str) -> Option<Milli> {
    if matches!(resource, "pods" | "count/pods") {
        return Some(1000);
    }
    if let Some(r) = resource.strip_prefix("requests.") {
        return Some(charge.requests.get(r).copied().unwrap_or(0));
    }
    if let Some(r) = resource.strip_prefix("limits.") {
        return Some(charge.limits.get(r).copied().unwrap_or(0));
    }
    if matches!(resource, "cpu" | "memory" | "ephemeral-storage") {
        return Some(charge.requests.get(resource).copied().unwrap_or(0));
    }
    None
}

fn compile(quota: &Value) -> Compiled {
    let hard = quota
        .pointer("/spec/hard")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(r, q)| {
            let binary = q.as_str().is_some_and(quantity::is_binary);
            Some((r.clone(), (quantity_of(q)?, binary)))
        })
        .collect();
    let scopes = quota
        .pointer("/spec/scopes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect();
    let mut priority = Vec::new();
    for e in quota.pointer("/spec/scopeSelector/matchExpressions").and_then(Value::as_array).into_iter().flatten() {
        let scope = e.get("scopeName").and_then(Value::as_str).unwrap_or_default();
        let op = e.get("operator").and_then(Value::as_str).unwrap_or_default().to_owned();
        let values = e
            .get("values")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect();
        if scope == "PriorityClass" {
            priority.push((op, values));
        }
    }
    Compiled { hard, scopes, priority }
}

fn in_scope(q: &Compiled, c: &Charge) -> bool {
    let scopes_ok = q.scopes.iter().all(|s| match s.as_str() {
        "Terminating" => c.terminating,
        "NotTerminating" => !c.terminating,
        "BestEffort" => c.best_effort,
        "NotBestEffort" => !c.best_effort,
        "PriorityClass" => !c.priority_class.is_empty(),
        _ => true,
    });
    scopes_ok
        && q.priority.iter().all(|(op, values)| match op.as_str() {
            "In" => values.contains(&c.priority_class),
            "NotIn" => !values.contains(&c.priority_class),
            "Exists" => !c.priority_class.is_empty(),
            "DoesNotExist" => c.priority_class.is_empty(),
            _ => true,
        })
}

fn add(state: &mut QuotaState, c: &Charge, sign: Milli) {
    for r in state.compiled.hard.keys() {
        if let Some(a) = amount(c, r) {
            *state.used.entry(r.clone()).or_default() += sign * a;
        }
    }
}

/// Keeps usage when a pod changes.
pub(crate) fn on_pod(world: &mut World, key: &Key, _prev: Option<&Value>, new: Option<&Value>) {
    let book = &mut world.quota;
    let old = book.charges.remove(key);
    let fresh = new.filter(|p| !terminal(p)).map(charge_of);
    if old == fresh {
        if let Some(c) = fresh {
            book.charges.insert(key.clone(), c);
        }
        return;
    }
    if let Some(names) = book.by_ns.get(&key.ns) {
        for name in names {
            let qkey = Key::new(&key.ns, name);
            let Some(state) = book.quotas.get_mut(&qkey) else { continue };
            let mut touched = false;
            if let Some(c) = &old
                && in_scope(&state.compiled, c)
            {
                add(state, c, -1);
                touched = true;
            }
            if let Some(c) = &fresh
                && in_scope(&state.compiled, c)
            {
                add(state, c, 1);
                touched = true;
            }
            if touched {
                book.dirty.insert(qkey);
            }
        }
    }
    if let Some(c) = fresh {
        book.charges.insert(key.clone(), c);
    }
}

/// Compiles a created or changed quota (recounting its usage if its spec changed).
pub(crate) fn on_quota(world: &mut World, key: &Key, new: Option<&Value>) {
    let Some(quota) = new else {
        world.quota.quotas.remove(key);
        if let Some(set) = world.quota.by_ns.get_mut(&key.ns) {
            set.remove(&key.name);
        }
        return;
    };
    let compiled = compile(quota);
    if world.quota.quotas.get(key).is_some_and(|s| s.compiled == compiled) {
        return;
    }
    let mut state = QuotaState { compiled, used: BTreeMap::new() };
    for r in state.compiled.hard.keys() {
        if amount(&Charge::default(), r).is_some() {
            state.used.insert(r.clone(), 0);
        }
    }
    let pods = &world.tables[Kind::Pod.index()].objects;
    let range = pods.range(Key::new(&key.ns, "")..).take_while(|(k, _)| k.ns == key.ns);
    for (pod_key, _) in range {
        if let Some(c) = world.quota.charges.get(pod_key)
            && in_scope(&state.compiled, c)
        {
            add(&mut state, c, 1);
        }
    }
    world.quota.quotas.insert(key.clone(), state);
    world.quota.by_ns.entry(key.ns.clone()).or_default().insert(key.name.clone());
    world.quota.dirty.insert(key.clone());
}

/// Quota admission of a new pod: `Err(message)` for a 403.
pub(crate) fn admit(world: &World, ns: &str, pod: &Value) -> Result<(), String> {
    let Some(names) = world.quota.by_ns.get(ns) else { return Ok(()) };
    let charge = charge_of(pod);
    for name in names {
        let Some(state) = world.quota.quotas.get(&Key::new(ns, name)) else { continue };
        if !in_scope(&state.compiled, &charge) {
            continue;
        }
        let mut missing = Vec::new();
        for r in state.compiled.hard.keys() {
            let (field, resource) = match r.as_str() {
                "cpu" | "requests.cpu" => ("requests", "cpu"),
                "memory" | "requests.memory" => ("requests", "memory"),
                "limits.cpu" => ("limits", "cpu"),
                "limits.memory" => ("limits", "memory"),
                _ => continue,
            };
            let all_set = pod
                .pointer("/spec/containers")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .all(|c| c.pointer(&format!("/resources/{field}/{resource}")).is_some());
            if !all_set {
                missing.push(r.clone());
            }
        }
        if !missing.is_empty() {
            return Err(format!("failed quota: {name}: must specify {}", missing.join(",")));
        }
        let mut requested = Vec::new();
        let mut used = Vec::new();
        let mut limited = Vec::new();
        for (r, (hard, binary)) in &state.compiled.hard {
            let Some(a) = amount(&charge, r) else { continue };
            let u = state.used.get(r).copied().unwrap_or(0);
            if a > 0 && u + a > *hard {
                requested.push(format!("{r}={}", quantity::format(a, *binary)));
                used.push(format!("{r}={}", quantity::format(u, *binary)));
                limited.push(format!("{r}={}", quantity::format(*hard, *binary)));
            }
        }
        if !requested.is_empty() {
            return Err(format!(
                "exceeded quota: {name}, requested: {}, used: {}, limited: {}",
                requested.join(","),
                used.join(","),
                limited.join(",")
            ));
        }
    }
    Ok(())
}

/// Writes `status.hard` and `status.used` of the quotas whose usage moved.
pub(crate) fn write_status(world: &mut World, budget: usize) {
    let keys: Vec<Key> = world.quota.dirty.iter().take(budget).cloned().collect();
    for key in keys {
        world.quota.dirty.remove(&key);
        let (Some(obj), Some(state)) = (world.get(Kind::ResourceQuota, &key), world.quota.quotas.get(&key)) else {
            continue;
        };
        let hard = obj.value.pointer("/spec/hard").cloned().unwrap_or_else(|| json!({}));
        let used: serde_json::Map<String, Value> = state
            .used
            .iter()
            .map(|(r, u)| {
                let binary = state.compiled.hard.get(r).is_some_and(|(_, b)| *b);
                (r.clone(), Value::String(quantity::format(*u, binary)))
            })
            .collect();
        let status = json!({"hard": hard, "used": used});
        if obj.value.get("status") == Some(&status) {
            continue;
        }
        let mut value = obj.value.clone();
        value["status"] = status;
        world.commit(Kind::ResourceQuota, &key, value, EventType::Modified);
    }
}
