//! The mutating admission webhook: a Job (or PaddleJob) created in a namespace that opted
//! in is created suspended, with its pods pointed at Fairway (`schedulerName`), so that it
//! waits for Fairway's admission and its pods go exactly where the core decided.
//!
//! The API server calls it only for namespaces its `namespaceSelector` matches (see
//! `deploy/kubernetes/webhook.yaml`); every replica of the controller serves it, leader or
//! not. A Job that opts out (label `fairway.dev/managed: "false"`) is left alone, and so is
//! one that asks for no GPUs: Fairway schedules GPU work; a CPU-only Job in the same
//! namespace goes to the default scheduler as if Fairway were not there.
//! `failurePolicy: Fail` is the documented setting: a Job created while no replica answers
//! is refused rather than run unscheduled.

use axum::Json;
use axum::routing::post;
use base64::Engine as _;
use serde_json::{Value, json};

/// What the webhook needs to know.
#[derive(Clone, Debug)]
pub struct Mutation {
    /// Written as the pods' `schedulerName`.
    pub scheduler_name: String,
    /// The extended resource of GPUs: a workload none of whose containers asks for it is
    /// left alone.
    pub gpu_resource: String,
}

/// `POST /mutate`.
pub fn router(mutation: Mutation) -> axum::Router {
    axum::Router::new().route("/mutate", post(move |review: Json<Value>| mutate(review, mutation.clone())))
}

async fn mutate(Json(review): Json<Value>, mutation: Mutation) -> Json<Value> {
    Json(answer(&review, &mutation))
}

/// The AdmissionReview answer for a request: allowed, with the patch that suspends the
/// workload and names Fairway's scheduler.
pub fn answer(review: &Value, mutation: &Mutation) -> Value {
    let request = &review["request"];
    let uid = request["uid"].clone();
    let patch = patch_for(&request["object"], mutation);
    let mut response = json!({"uid": uid, "allowed": true});
    if !patch.is_empty() {
        let bytes = serde_json::to_vec(&patch).expect("plain data");
        response["patchType"] = json!("JSONPatch");
        response["patch"] = json!(base64::engine::general_purpose::STANDARD.encode(bytes));
    }
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response})
}

/// JSON Patch operations for one object.
pub fn patch_for(object: &Value, mutation: &Mutation) -> Vec<Value> {
    let opted_out = object["metadata"]["labels"][crate::workload::MANAGED_LABEL].as_str() == Some("false");
    if opted_out || !asks_for(&object["spec"], &mutation.gpu_resource) {
        return Vec::new();
    }
    let scheduler_name = mutation.scheduler_name.as_str();
    let scheduler = |path: String| json!({"op": "add", "path": path, "value": scheduler_name});
    match object["kind"].as_str() {
        Some("Job") if object.pointer("/spec/template/spec").is_some() => vec![
            json!({"op": "add", "path": "/spec/suspend", "value": true}),
            scheduler("/spec/template/spec/schedulerName".into()),
        ],
        Some("PaddleJob") => {
            let mut ops = Vec::new();
            if object.pointer("/spec/runPolicy").is_none() {
                ops.push(json!({"op": "add", "path": "/spec/runPolicy", "value": {}}));
            }
            ops.push(json!({"op": "add", "path": "/spec/runPolicy/suspend", "value": true}));
            for role in object
                .pointer("/spec/paddleReplicaSpecs")
                .and_then(Value::as_object)
                .into_iter()
                .flatten()
                .map(|(k, _)| k)
            {
                let role = role.replace('~', "~0").replace('/', "~1");
                ops.push(scheduler(format!("/spec/paddleReplicaSpecs/{role}/template/spec/schedulerName")));
            }
            ops
        }
        _ => Vec::new(),
    }
}

/// Whether some container (or init container) under `spec` requests or limits `resource`
/// at more than zero.
pub fn asks_for(spec: &Value, resource: &str) -> bool {
    match spec {
        Value::Object(map) => {
            let here = map.get("resources").is_some_and(|r| {
                ["limits", "requests"].iter().any(|k| r[k].get(resource).is_some_and(|q| !is_zero(q)))
            });
            here || map.values().any(|v| asks_for(v, resource))
        }
        Value::Array(items) => items.iter().any(|v| asks_for(v, resource)),
        _ => false,
    }
}

fn is_zero(quantity: &Value) -> bool {
    match quantity {
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.trim().trim_start_matches('0').is_empty() || s.trim().parse::<f64>() == Ok(0.0),
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mutation() -> Mutation {
        Mutation { scheduler_name: "fairway".into(), gpu_resource: "nvidia.com/gpu".into() }
    }

    fn gpu_container(gpus: Value) -> Value {
        json!({"name": "train", "image": "pytorch", "resources": {"limits": {"nvidia.com/gpu": gpus}}})
    }

    #[test]
    fn a_job_is_suspended_and_pointed_at_fairway() {
        let review = json!({"request": {"uid": "abc", "object": {
            "kind": "Job", "metadata": {"name": "x"}, "spec": {"template": {"spec": {"containers": [gpu_container(json!(2))]}}}
        }}});
        let answer = answer(&review, &mutation());
        assert_eq!(answer["response"]["uid"], "abc");
        assert_eq!(answer["response"]["allowed"], true);
        let patch =
            base64::engine::general_purpose::STANDARD.decode(answer["response"]["patch"].as_str().unwrap()).unwrap();
        let ops: Vec<Value> = serde_json::from_slice(&patch).unwrap();
        assert_eq!(ops[0], json!({"op": "add", "path": "/spec/suspend", "value": true}));
        assert_eq!(ops[1]["path"], "/spec/template/spec/schedulerName");
    }

    #[test]
    fn a_paddle_job_suspends_through_its_run_policy_and_every_role_is_pointed_at_fairway() {
        let worker = json!({"template": {"spec": {"containers": [gpu_container(json!("1"))]}}});
        let object = json!({"kind": "PaddleJob", "spec": {"paddleReplicaSpecs": {"Master": {}, "Worker": worker}}});
        let ops = patch_for(&object, &mutation());
        let paths: Vec<&str> = ops.iter().map(|o| o["path"].as_str().unwrap()).collect();
        assert_eq!(
            paths,
            [
                "/spec/runPolicy",
                "/spec/runPolicy/suspend",
                "/spec/paddleReplicaSpecs/Master/template/spec/schedulerName",
                "/spec/paddleReplicaSpecs/Worker/template/spec/schedulerName"
            ]
        );
    }

    #[test]
    fn an_opted_out_job_is_left_alone() {
        let object = json!({"kind": "Job", "metadata": {"labels": {"fairway.dev/managed": "false"}},
            "spec": {"template": {"spec": {"containers": [gpu_container(json!(1))]}}}});
        assert!(patch_for(&object, &mutation()).is_empty());
    }

    #[test]
    fn a_job_without_gpus_is_left_to_the_default_scheduler() {
        let cpu = json!({"name": "etl", "image": "python", "resources": {"limits": {"cpu": "2"}}});
        for containers in
            [json!([cpu]), json!([gpu_container(json!("0"))]), json!([gpu_container(json!(0))]), json!([])]
        {
            let object = json!({"kind": "Job", "spec": {"template": {"spec": {"containers": containers}}}});
            assert!(patch_for(&object, &mutation()).is_empty(), "{object}");
        }
        // A GPU asked by a request alone, or by an init container, counts.
        let init = json!({"kind": "Job", "spec": {"template": {"spec": {"containers": [cpu],
            "initContainers": [{"name": "warm", "resources": {"requests": {"nvidia.com/gpu": "1"}}}]}}}});
        assert_eq!(patch_for(&init, &mutation()).len(), 2);
    }
}
