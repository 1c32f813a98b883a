//! The patch types of `PATCH`: JSON patch (RFC 6902), merge patch (RFC 7386) and a strategic
//! merge patch that merges the lists Kubernetes declares with a merge key (conditions by
//! `type`, containers by `name`, …) and the `finalizers` set, and replaces every other list
//! as a merge patch does. Server-side apply is approximated by a merge patch (no managed
//! fields, no conflicts): see the crate documentation.

use serde_json::{Map, Value};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PatchType {
    Json,
    Merge,
    Strategic,
    Apply,
}

impl PatchType {
    pub(crate) fn from_content_type(content_type: &str) -> Option<PatchType> {
        let essence = content_type.split(';').next().unwrap_or_default().trim();
        match essence {
            "application/json-patch+json" => Some(PatchType::Json),
            "application/merge-patch+json" => Some(PatchType::Merge),
            "application/strategic-merge-patch+json" => Some(PatchType::Strategic),
            "application/apply-patch+yaml" | "application/apply-patch+json" => Some(PatchType::Apply),
            _ => None,
        }
    }
}

/// Applies `patch` to `target`; the error is the message of a 422 (JSON patch) or 400.
pub(crate) fn apply(kind: PatchType, target: &mut Value, patch: &Value) -> Result<(), String> {
    match kind {
        PatchType::Json => {
            let p: json_patch::Patch =
                serde_json::from_value(patch.clone()).map_err(|e| format!("invalid JSON patch: {e}"))?;
            json_patch::patch(target, &p).map_err(|e| format!("the JSON patch cannot be applied: {e}"))
        }
        PatchType::Merge | PatchType::Apply => {
            if !patch.is_object() {
                return Err("a merge patch must be a JSON object".into());
            }
            json_patch::merge(target, patch);
            Ok(())
        }
        PatchType::Strategic => {
            if !patch.is_object() {
                return Err("a strategic merge patch must be a JSON object".into());
            }
            strategic(target, patch, "");
            Ok(())
        }
    }
}

/// The merge key Kubernetes declares for a list field (`patchMergeKey`), by field name.
fn merge_key(field: &str) -> Option<&'static str> {
    Some(match field {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "env"
        | "volumes"
        | "imagePullSecrets"
        | "resourceClaims"
        | "schedulingGates" => "name",
        "volumeMounts" => "mountPath",
        "ports" => "containerPort",
        "conditions" => "type",
        "ownerReferences" => "uid",
        "hostAliases" => "ip",
        "topologySpreadConstraints" => "topologyKey",
        "taints" => "key",
        "addresses" => "type",
        _ => return None,
    })
}

/// Lists of plain values that a strategic patch merges as sets.
fn is_primitive_set(field: &str) -> bool {
    field == "finalizers"
}

fn strategic(target: &mut Value, patch: &Value, _field: &str) {
    let Some(patch_map) = patch.as_object() else {
        *target = patch.clone();
        return;
    };
    if patch_map.get("$patch").and_then(Value::as_str) == Some("replace") {
        let mut replacement = patch_map.clone();
        replacement.remove("$patch");
        *target = Value::Object(replacement);
        return;
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let target_map = target.as_object_mut().expect("made an object above");
    for (key, value) in patch_map {
        if key == "$patch" || key == "$retainKeys" || key.starts_with("$setElementOrder/") {
            continue;
        }
        if let Some(field) = key.strip_prefix("$deleteFromPrimitiveList/") {
            if let (Some(Value::Array(list)), Some(remove)) = (target_map.get_mut(field), value.as_array()) {
                list.retain(|item| !remove.contains(item));
            }
            continue;
        }
        if value.is_null() {
            target_map.remove(key);
            continue;
        }
        match (target_map.get_mut(key), value) {
            (Some(existing @ Value::Object(_)), Value::Object(_)) => strategic(existing, value, key),
            (Some(Value::Array(existing)), Value::Array(items)) => {
                if let Some(merge_key) = merge_key(key) {
                    merge_list(existing, items, merge_key, key);
                } else if is_primitive_set(key) {
                    for item in items {
                        if !existing.contains(item) {
                            existing.push(item.clone());
                        }
                    }
                } else {
                    *existing = items.clone();
                }
            }
            _ => {
                let mut fresh = value.clone();
                strip_directives(&mut fresh);
                target_map.insert(key.clone(), fresh);
            }
        }
    }
}

fn merge_list(existing: &mut Vec<Value>, items: &[Value], merge_key: &str, field: &str) {
    if items.iter().any(|i| i.get("$patch").and_then(Value::as_str) == Some("replace")) {
        *existing = items.iter().filter(|i| i.get("$patch").is_none()).cloned().collect();
        return;
    }
    for item in items {
        let Some(key_value) = item.get(merge_key) else {
            existing.push(item.clone());
            continue;
        };
        let position = existing.iter().position(|e| e.get(merge_key) == Some(key_value));
        let delete = item.get("$patch").and_then(Value::as_str) == Some("delete");
        match (position, delete) {
            (Some(i), true) => {
                existing.remove(i);
            }
            (None, true) => {}
            (Some(i), false) => strategic(&mut existing[i], item, field),
            (None, false) => {
                let mut fresh = item.clone();
                strip_directives(&mut fresh);
                existing.push(fresh);
            }
        }
    }
}

fn strip_directives(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.retain(|k, _| !k.starts_with('$'));
            for v in map.values_mut() {
                strip_directives(v);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(strip_directives),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn strategic_patches_merge_conditions_by_type_and_keep_the_others() {
        let mut job = json!({"status": {"conditions": [
            {"type": "Suspended", "status": "True"},
            {"type": "Mine", "status": "False"},
        ]}});
        let patch = json!({"status": {"conditions": [{"type": "Mine", "status": "True", "reason": "R"}]}});
        apply(PatchType::Strategic, &mut job, &patch).unwrap();
        assert_eq!(
            job["status"]["conditions"],
            json!([{"type": "Suspended", "status": "True"}, {"type": "Mine", "status": "True", "reason": "R"}])
        );
        // A merge patch replaces the list.
        apply(PatchType::Merge, &mut job, &patch).unwrap();
        assert_eq!(job["status"]["conditions"].as_array().unwrap().len(), 1);
    }

    #[test]
    fn strategic_patches_delete_elements_and_merge_finalizers() {
        let mut pod = json!({"metadata": {"finalizers": ["a"]}, "spec": {"containers": [{"name": "x", "image": "i"}, {"name": "y"}]}});
        let patch = json!({
            "metadata": {"finalizers": ["b"]},
            "spec": {"containers": [{"name": "y", "$patch": "delete"}, {"name": "x", "image": "j"}]}
        });
        apply(PatchType::Strategic, &mut pod, &patch).unwrap();
        assert_eq!(pod["metadata"]["finalizers"], json!(["a", "b"]));
        assert_eq!(pod["spec"]["containers"], json!([{"name": "x", "image": "j"}]));
        let patch = json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}});
        apply(PatchType::Strategic, &mut pod, &patch).unwrap();
        assert_eq!(pod["metadata"]["finalizers"], json!(["b"]));
    }

    #[test]
    fn json_patches_apply_and_fail_on_a_missing_path() {
        let mut v = json!({"spec": {"suspend": true}});
        apply(PatchType::Json, &mut v, &json!([{"op": "replace", "path": "/spec/suspend", "value": false}])).unwrap();
        assert_eq!(v, json!({"spec": {"suspend": false}}));
        assert!(apply(PatchType::Json, &mut v, &json!([{"op": "remove", "path": "/nope"}])).is_err());
    }
}
