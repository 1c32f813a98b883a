//! A minimal Kubeflow training operator for `kubeflow.org/v1` PaddleJobs, as its user sees
//! it, so that a PaddleJob the controller admits runs on the fake as on a cluster with the
//! operator installed:
//!
//! - an unsuspended PaddleJob gets one pod per replica of each replica type, all at once,
//!   named `NAME-TYPE-INDEX` (`train-master-0`, `train-worker-1`), labelled
//!   `training.kubeflow.org/job-name`, `replica-type` (lower case), `replica-index`,
//!   `operator-name: paddlejob-controller` (and `job-role: master` on masters), owned by the
//!   PaddleJob; a missing pod (deleted by someone) is made again once the old one is gone;
//! - `spec.runPolicy.suspend: true` deletes the pods (their grace period applies) and sets
//!   `Suspended=True` (reason `PaddleJobSuspended`); resuming sets it `False`
//!   (`PaddleJobResumed`) and resets `status.startTime`;
//! - `status.replicaStatuses.{TYPE}.{active, succeeded, failed}`, `startTime`,
//!   `completionTime`; conditions `Created`, `Running`, then `Succeeded` (every Master
//!   replica succeeded, or every Worker when there is no Master) or `Failed` (a replica
//!   failed; with restartPolicy `OnFailure` the kubelet restarts it instead);
//! - `runPolicy.cleanPodPolicy` when it finishes: `All` deletes every pod, `Running` the
//!   pods still running, `None` (the default) none.
//!
//! Not emulated: Services per replica, the `PADDLE_*` environment, `backoffLimit`,
//! `activeDeadlineSeconds`, elastic policies, scheduling gangs (Fairway binds the pods).

use std::collections::HashSet;

use serde_json::{Value, json};

use crate::ctl::{Owner, PodCreate};
use crate::errors::ApiError;
use crate::kinds::Kind;
use crate::ops::{DeleteOpts, condition_true, is_deleting, set_condition};
use crate::store::{EventType, Key, Obj, World, meta_str, now_rfc3339};

pub(crate) const JOB_NAME_LABEL: &str = "training.kubeflow.org/job-name";
const REPLICA_TYPE: &str = "training.kubeflow.org/replica-type";
const REPLICA_INDEX: &str = "training.kubeflow.org/replica-index";
const COMPONENT: &str = "paddlejob-controller";

/// The operator's memory of one PaddleJob.
#[derive(Debug, Default)]
pub(crate) struct PaddleMem {
    uid: String,
    pending_creates: u32,
    /// Pods the operator deleted: their ends are not failures.
    ours: HashSet<String>,
}

/// The PaddleJob that controls a pod: (name, uid).
pub(crate) fn paddle_owner(v: &Value) -> Option<(String, String)> {
    crate::ctl::controller_owner(v, "PaddleJob", "kubeflow.org/")
}

fn finished(v: &Value) -> bool {
    condition_true(v, "Succeeded") || condition_true(v, "Failed")
}

fn phase(p: &Obj) -> &str {
    p.value.pointer("/status/phase").and_then(Value::as_str).unwrap_or("Pending")
}

fn terminal(p: &Obj) -> bool {
    matches!(phase(p), "Succeeded" | "Failed")
}

/// Brings one PaddleJob up to date.
pub(crate) fn sync(world: &mut World, key: &Key) {
    let Some(job) = world.get(Kind::PaddleJob, key).cloned() else {
        world.ctl.paddles.remove(key);
        return;
    };
    let v = &job.value;
    let uid = meta_str(v, "uid").to_owned();
    let mut mem = world.ctl.paddles.remove(key).unwrap_or_default();
    if mem.uid != uid {
        mem = PaddleMem { uid: uid.clone(), ..PaddleMem::default() };
    }
    if !finished(v) {
        sync_job(world, key, &job, &mut mem);
    }
    world.ctl.paddles.insert(key.clone(), mem);
}

fn sync_job(world: &mut World, key: &Key, job: &Obj, mem: &mut PaddleMem) {
    let v = &job.value;
    let name = meta_str(v, "name").to_owned();
    let replica_specs: Vec<(String, i64, Value)> = v
        .pointer("/spec/paddleReplicaSpecs")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .map(|(t, s)| (t.clone(), s.get("replicas").and_then(Value::as_i64).unwrap_or(1).max(0), s.clone()))
        .collect();
    let suspend = v.pointer("/spec/runPolicy/suspend").and_then(Value::as_bool).unwrap_or(false);
    let pods = crate::ctl::controlled_pods(world, &mem.uid, paddle_owner);
    let mut new = v.clone();
    if new.get("status").is_none_or(|s| !s.is_object()) {
        new["status"] = json!({});
    }
    let mut events: Vec<(bool, String, String)> = Vec::new();
    if set_condition(&mut new, "Created", "True", "PaddleJobCreated", &format!("PaddleJob {name} is created.")) {
        events.push((false, "PaddleJobCreated".into(), format!("PaddleJob {name} is created.")));
    }
    let active = |p: &&Obj| !terminal(p) && !is_deleting(&p.value);
    if suspend {
        let running: Vec<Obj> = pods.iter().filter(active).cloned().collect();
        for p in &running {
            mem.ours.insert(meta_str(&p.value, "uid").to_owned());
            let _ = world.delete(Kind::Pod, &Key::of(&p.value), &DeleteOpts::default());
        }
        let message = format!("PaddleJob {name} is suspended.");
        if set_condition(&mut new, "Suspended", "True", "PaddleJobSuspended", &message) {
            events.push((false, "PaddleJobSuspended".into(), message));
        }
        if condition_true(&new, "Running") {
            set_condition(
                &mut new,
                "Running",
                "False",
                "PaddleJobSuspended",
                &format!("PaddleJob {name} is suspended."),
            );
        }
    } else {
        if condition_true(&new, "Suspended") {
            let message = format!("PaddleJob {name} is resumed.");
            set_condition(&mut new, "Suspended", "False", "PaddleJobResumed", &message);
            events.push((false, "PaddleJobResumed".into(), message));
            new["status"]["startTime"] = json!(now_rfc3339());
        }
        if new.pointer("/status/startTime").is_none_or(Value::is_null) {
            new["status"]["startTime"] = json!(now_rfc3339());
        }
        if mem.pending_creates == 0 {
            for (rtype, replicas, spec) in &replica_specs {
                for index in 0..*replicas {
                    let pod_name = format!("{name}-{}-{index}", rtype.to_lowercase());
                    if world.get(Kind::Pod, &Key::new(&key.ns, &pod_name)).is_some() {
                        continue;
                    }
                    mem.pending_creates += 1;
                    let pod = pod_from_template(v, rtype, index, spec, &pod_name);
                    world.ctl.creates.push(PodCreate {
                        owner: Owner::PaddleJob,
                        key: key.clone(),
                        uid: mem.uid.clone(),
                        pod,
                    });
                }
            }
        }
    }
    // Replica statuses and the outcome.
    let mut statuses = serde_json::Map::new();
    let mut failed_replicas = Vec::new();
    let mut all_running = !replica_specs.is_empty() && mem.pending_creates == 0;
    let mut done_by_type = std::collections::BTreeMap::new();
    for (rtype, replicas, _) in &replica_specs {
        let label = rtype.to_lowercase();
        let mine: Vec<&Obj> = pods
            .iter()
            .filter(|p| {
                p.value.pointer("/metadata/labels").and_then(|l| l.get(REPLICA_TYPE)).and_then(Value::as_str)
                    == Some(label.as_str())
            })
            .collect();
        let n_active = mine.iter().filter(|p| active(p)).count() as i64;
        let n_succeeded = mine.iter().filter(|p| phase(p) == "Succeeded").count() as i64;
        let n_failed =
            mine.iter().filter(|p| phase(p) == "Failed" && !mem.ours.contains(meta_str(&p.value, "uid"))).count()
                as i64;
        if n_failed > 0 {
            failed_replicas.push(format!("{n_failed} {rtype} replica(s)"));
        }
        if mine.iter().filter(|p| active(p) && phase(p) == "Running").count() as i64 != *replicas {
            all_running = false;
        }
        done_by_type.insert(rtype.clone(), n_succeeded >= *replicas);
        let mut s = json!({"active": n_active, "succeeded": n_succeeded, "failed": n_failed});
        for field in ["active", "succeeded", "failed"] {
            if s[field] == json!(0)
                && let Some(m) = s.as_object_mut()
            {
                m.remove(field);
            }
        }
        statuses.insert(rtype.clone(), s);
    }
    new["status"]["replicaStatuses"] = Value::Object(statuses);
    let succeeded = match done_by_type.get("Master") {
        Some(master_done) => *master_done,
        None => done_by_type.get("Worker").copied().unwrap_or(false),
    };
    let mut finished_now = false;
    if !suspend && !failed_replicas.is_empty() {
        let message = format!("PaddleJob {name} is failed because {} failed.", failed_replicas.join(" and "));
        set_condition(&mut new, "Running", "False", "PaddleJobFailed", &message);
        set_condition(&mut new, "Failed", "True", "PaddleJobFailed", &message);
        events.push((true, "PaddleJobFailed".into(), message));
        finished_now = true;
    } else if !suspend && succeeded {
        let message = format!("PaddleJob {name} is successfully completed.");
        set_condition(&mut new, "Running", "False", "PaddleJobSucceeded", &message);
        set_condition(&mut new, "Succeeded", "True", "PaddleJobSucceeded", &message);
        events.push((false, "PaddleJobSucceeded".into(), message));
        finished_now = true;
    } else if !suspend && all_running {
        set_condition(&mut new, "Running", "True", "PaddleJobRunning", &format!("PaddleJob {name} is running."));
    }
    if finished_now {
        new["status"]["completionTime"] = json!(now_rfc3339());
        let policy = v.pointer("/spec/runPolicy/cleanPodPolicy").and_then(Value::as_str).unwrap_or("None");
        for p in &pods {
            let clean = match policy {
                "All" => true,
                "Running" => active(&p),
                _ => false,
            };
            if clean && !is_deleting(&p.value) {
                mem.ours.insert(meta_str(&p.value, "uid").to_owned());
                let _ = world.delete(Kind::Pod, &Key::of(&p.value), &DeleteOpts::default());
            }
        }
    }
    if new != *v {
        world.commit(Kind::PaddleJob, key, new.clone(), EventType::Modified);
    }
    for (warning, reason, message) in events {
        world.record_event(Kind::PaddleJob, &new, warning, &reason, &message, COMPONENT);
    }
}

fn pod_from_template(job: &Value, rtype: &str, index: i64, spec: &Value, pod_name: &str) -> Value {
    let name = meta_str(job, "name");
    let template = spec.get("template").cloned().unwrap_or_else(|| json!({}));
    let mut meta = template.get("metadata").cloned().filter(Value::is_object).unwrap_or_else(|| json!({}));
    let mut pod_spec = template.get("spec").cloned().unwrap_or_else(|| json!({}));
    meta["name"] = json!(pod_name);
    if let Some(m) = meta.as_object_mut() {
        m.remove("namespace");
        m.remove("generateName");
    }
    if meta.get("labels").is_none_or(|l| !l.is_object()) {
        meta["labels"] = json!({});
    }
    let labels = &mut meta["labels"];
    labels[JOB_NAME_LABEL] = json!(name);
    labels["training.kubeflow.org/operator-name"] = json!(COMPONENT);
    labels[REPLICA_TYPE] = json!(rtype.to_lowercase());
    labels[REPLICA_INDEX] = json!(index.to_string());
    if rtype == "Master" {
        labels["training.kubeflow.org/job-role"] = json!("master");
    }
    meta["ownerReferences"] = json!([{
        "apiVersion": "kubeflow.org/v1", "kind": "PaddleJob", "name": name, "uid": meta_str(job, "uid"),
        "controller": true, "blockOwnerDeletion": true,
    }]);
    let restart = match spec.get("restartPolicy").and_then(Value::as_str) {
        Some("OnFailure") => "OnFailure",
        Some("Always") => "Always",
        _ => "Never",
    };
    pod_spec["restartPolicy"] = json!(restart);
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": pod_spec})
}

/// The end of a create the operator asked for.
pub(crate) fn created(world: &mut World, key: &Key, uid: &str, result: Result<Obj, ApiError>) {
    let Some(mut mem) = world.ctl.paddles.remove(key) else { return };
    if mem.uid == uid {
        mem.pending_creates = mem.pending_creates.saturating_sub(1);
        if let (Err(e), Some(job)) = (&result, world.get(Kind::PaddleJob, key).map(|j| j.value.clone())) {
            world.record_event(
                Kind::PaddleJob,
                &job,
                true,
                "FailedCreatePod",
                &format!("Error creating: {}", e.message),
                COMPONENT,
            );
            // Retried at the next change of the PaddleJob or its pods, or after a second.
            world.ctl.at(
                tokio::time::Instant::now() + std::time::Duration::from_secs(1),
                crate::ctl::Target::Paddle(key.clone()),
            );
        }
    }
    world.ctl.paddles.insert(key.clone(), mem);
    world.ctl.dirty_paddles.insert(key.clone());
    world.wake.notify_one();
}
