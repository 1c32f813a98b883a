//! The write verbs as the API server runs them: decode-time defaulting, then mutating
//! webhooks (outside the world's lock, since they are HTTP calls), then the world's own
//! create/update under the lock. Without a matching webhook a write takes the lock once.

use std::sync::Arc;

use serde_json::Value;

use crate::Shared;
use crate::admission;
use crate::errors::ApiError;
use crate::kinds::Kind;
use crate::ops::Sub;
use crate::patch::{self, PatchType};
use crate::store::{Key, Obj, World};
use crate::webhook::{self, Hook, Op, Write};

fn lock(shared: &Shared) -> std::sync::MutexGuard<'_, World> {
    shared.world.lock().expect("the world's lock is never poisoned")
}

fn hooks_for(world: &mut World, write: &Write<'_>, v: &Value) -> Vec<Hook> {
    let all = world.hooks();
    if all.is_empty() {
        return Vec::new();
    }
    webhook::matching(world, &all, write, v)
}

fn sub_name(sub: Sub) -> Option<&'static str> {
    match sub {
        Sub::Main => None,
        Sub::Status => Some("status"),
    }
}

pub(crate) async fn create(shared: &Arc<Shared>, kind: Kind, ns: &str, mut value: Value) -> Result<Obj, ApiError> {
    admission::default(kind, &mut value);
    let write = Write { kind, sub: None, ns, old: None, op: Op::Create };
    let hooks = hooks_for(&mut lock(shared), &write, &value);
    if !hooks.is_empty() {
        value = webhook::admit(shared, &hooks, &write, value).await?;
        // The patched object is decoded again, with its defaults.
        admission::default(kind, &mut value);
    }
    lock(shared).create(kind, ns, value)
}

/// PUT: `body` is the object wanted, its `metadata.resourceVersion` the one its writer read.
pub(crate) async fn update(
    shared: &Arc<Shared>,
    kind: Kind,
    key: &Key,
    mut body: Value,
    sub: Sub,
) -> Result<Obj, ApiError> {
    if sub == Sub::Main {
        admission::default(kind, &mut body);
    }
    let expect = body.pointer("/metadata/resourceVersion").and_then(Value::as_str).map(str::to_owned);
    for _ in 0..5 {
        let (old, hooks) = {
            let mut world = lock(shared);
            let old = world.get(kind, key).cloned().ok_or_else(|| ApiError::not_found(kind, &key.name))?;
            let write = Write { kind, sub: sub_name(sub), ns: &key.ns, old: Some(&old.value), op: Op::Update };
            let hooks = hooks_for(&mut world, &write, &body);
            if hooks.is_empty() {
                return world.update(kind, key, body, sub, expect.as_deref());
            }
            (old, hooks)
        };
        if let Some(rv) = expect.as_deref().filter(|rv| !rv.is_empty())
            && rv != old.rv.to_string()
        {
            return Err(ApiError::conflict(kind, &key.name));
        }
        let write = Write { kind, sub: sub_name(sub), ns: &key.ns, old: Some(&old.value), op: Op::Update };
        let mutated = webhook::admit(shared, &hooks, &write, body.clone()).await?;
        match lock(shared).update(kind, key, mutated, sub, Some(&old.rv.to_string())) {
            // Someone wrote in between: an unconditional update tries again.
            Err(e) if e.code == 409 && expect.as_deref().is_none_or(str::is_empty) => continue,
            other => return other,
        }
    }
    Err(ApiError::conflict(kind, &key.name))
}

/// PATCH (server-side apply creates a missing object). Returns the object and whether it
/// was created.
pub(crate) async fn patch(
    shared: &Arc<Shared>,
    kind: Kind,
    key: &Key,
    ptype: PatchType,
    patch_body: Value,
    sub: Sub,
) -> Result<(Obj, bool), ApiError> {
    for _ in 0..5 {
        let missing = lock(shared).get(kind, key).is_none();
        if missing && ptype == PatchType::Apply && sub == Sub::Main {
            let mut value = patch_body.clone();
            if kind.info().namespaced && value.pointer("/metadata/namespace").is_none() {
                value["metadata"]["namespace"] = Value::String(key.ns.clone());
            }
            return create(shared, kind, &key.ns, value).await.map(|o| (o, true));
        }
        let (old, patched, hooks) = {
            let mut world = lock(shared);
            let old = world.get(kind, key).cloned().ok_or_else(|| ApiError::not_found(kind, &key.name))?;
            let mut patched = old.value.clone();
            patch::apply(ptype, &mut patched, &patch_body).map_err(|why| match ptype {
                PatchType::Json => ApiError::invalid(kind, &key.name, &[(String::new(), why)]),
                _ => ApiError::bad_request(why),
            })?;
            // A resourceVersion in the patch is a precondition.
            let rv = patched.pointer("/metadata/resourceVersion").and_then(Value::as_str).unwrap_or_default();
            if !rv.is_empty() && rv != old.rv.to_string() {
                return Err(ApiError::conflict(kind, &key.name));
            }
            if sub == Sub::Main {
                admission::default(kind, &mut patched);
            }
            let write = Write { kind, sub: sub_name(sub), ns: &key.ns, old: Some(&old.value), op: Op::Update };
            let hooks = hooks_for(&mut world, &write, &patched);
            if hooks.is_empty() {
                return world.update(kind, key, patched, sub, Some(&old.rv.to_string())).map(|o| (o, false));
            }
            (old, patched, hooks)
        };
        let write = Write { kind, sub: sub_name(sub), ns: &key.ns, old: Some(&old.value), op: Op::Update };
        let mutated = webhook::admit(shared, &hooks, &write, patched).await?;
        match lock(shared).update(kind, key, mutated, sub, Some(&old.rv.to_string())) {
            Err(e) if e.code == 409 => continue,
            other => return other.map(|o| (o, false)),
        }
    }
    Err(ApiError::conflict(kind, &key.name))
}
