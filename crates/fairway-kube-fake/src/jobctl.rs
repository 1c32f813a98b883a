//! The stock Job controller as a user of Kubernetes 1.33 sees it:
//!
//! - an unsuspended Job keeps `min(parallelism, completions − succeeded)` active pods
//!   (work-queue Jobs without `completions`: `parallelism` until one succeeds; Indexed
//!   Jobs: one pod per missing index), made from its template with the Job's labels, an
//!   owner reference and, for Indexed Jobs, the completion index; pods it cannot create
//!   (quota, a webhook) are retried with back-off and a `FailedCreate` event;
//! - failed pods are replaced after a back-off (10 s doubling, scaled); a pod deleted by
//!   someone else counts as failed as soon as it is terminating (podReplacementPolicy
//!   `TerminatingOrFailed`, the default) and is replaced at once;
//! - `status.active` (not terminating), `ready`, `terminating`, `succeeded`, `failed`,
//!   `startTime`, `completedIndexes`;
//! - `Complete` once enough pods succeeded (after the interim `SuccessCriteriaMet`, both with
//!   reason `CompletionsReached`), `Failed` when failures exceed `backoffLimit` (reason
//!   `BackoffLimitExceeded`) or `activeDeadlineSeconds` passes (`DeadlineExceeded`), after
//!   the interim `FailureTarget` and once the Job's remaining pods have terminated;
//! - suspending deletes the active pods with their grace period (their failures do not
//!   count), sets `Suspended=True` (reason `JobSuspended`); resuming sets `Suspended=False`
//!   (`JobResumed`) and resets `startTime`;
//! - conditions of other types, and every field it does not own, are kept as they are;
//! - Jobs whose `spec.managedBy` names another controller are left alone.
//!
//! Pods are counted when they are seen terminal (or removed), once each, under the world's
//! lock: what the real controller's tracking finalizers ensure. The finalizer itself is not
//! put on pods.

use std::collections::{BTreeSet, HashSet};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::time::Instant;

use crate::admission::COMPLETION_INDEX;
use crate::ctl::{Owner, PodCreate, Target, job_owner, scaled};
use crate::errors::ApiError;
use crate::kinds::Kind;
use crate::ops::{DeleteOpts, condition, condition_true, is_deleting, set_condition};
use crate::store::{EventType, Key, Obj, World, meta_str, now_rfc3339};

const COMPONENT: &str = "job-controller";

#[derive(Debug)]
struct Removed {
    uid: String,
    phase: String,
    index: Option<i64>,
}

/// The controller's memory of one Job.
#[derive(Debug, Default)]
pub(crate) struct JobMem {
    pub uid: String,
    /// Pods already counted into `succeeded`/`failed`.
    counted: HashSet<String>,
    /// Pods this controller deleted: their ends are not failures.
    ours: HashSet<String>,
    /// Pods gone since the last sync.
    removed: Vec<Removed>,
    pending_creates: u32,
    failures_in_a_row: u32,
    create_errors: u32,
    next_create_at: Option<Instant>,
    started_at: Option<Instant>,
}

impl JobMem {
    pub(crate) fn pod_removed(&mut self, pod: &Value) {
        self.removed.push(Removed {
            uid: meta_str(pod, "uid").to_owned(),
            phase: pod.pointer("/status/phase").and_then(Value::as_str).unwrap_or_default().to_owned(),
            index: completion_index(pod),
        });
    }
}

fn completion_index(pod: &Value) -> Option<i64> {
    pod.pointer("/metadata/annotations")
        .and_then(|a| a.get(COMPLETION_INDEX))
        .and_then(Value::as_str)
        .and_then(|s| s.parse().ok())
}

fn int(v: &Value, pointer: &str) -> Option<i64> {
    v.pointer(pointer).and_then(Value::as_i64)
}

pub(crate) fn finished(job: &Value) -> bool {
    condition_true(job, "Complete") || condition_true(job, "Failed")
}

/// `0-2,5` ⇄ {0, 1, 2, 5}.
fn parse_indexes(text: &str) -> BTreeSet<i64> {
    let mut out = BTreeSet::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                if let (Ok(a), Ok(b)) = (a.parse::<i64>(), b.parse::<i64>()) {
                    out.extend(a..=b);
                }
            }
            None => {
                if let Ok(a) = part.parse() {
                    out.insert(a);
                }
            }
        }
    }
    out
}

fn format_indexes(set: &BTreeSet<i64>) -> String {
    let mut parts = Vec::new();
    let mut iter = set.iter().copied().peekable();
    while let Some(start) = iter.next() {
        let mut end = start;
        while iter.peek() == Some(&(end + 1)) {
            end = iter.next().expect("peeked");
        }
        parts.push(if start == end { start.to_string() } else { format!("{start}-{end}") });
    }
    parts.join(",")
}

/// Brings one Job up to date.
pub(crate) fn sync(world: &mut World, key: &Key, now: Instant) {
    let Some(job) = world.get(Kind::Job, key).cloned() else {
        world.ctl.jobs.remove(key);
        return;
    };
    let v = &job.value;
    if v.pointer("/spec/managedBy").and_then(Value::as_str).is_some_and(|m| m != "kubernetes.io/job-controller") {
        return;
    }
    let uid = meta_str(v, "uid").to_owned();
    let mut mem = world.ctl.jobs.remove(key).unwrap_or_default();
    if mem.uid != uid {
        let removed = if mem.uid.is_empty() { std::mem::take(&mut mem.removed) } else { Vec::new() };
        mem = JobMem { uid: uid.clone(), removed, ..JobMem::default() };
    }
    if finished(v) {
        world.ctl.jobs.insert(key.clone(), mem);
        return;
    }
    sync_job(world, key, &job, &mut mem, now);
    // Writes above may have noted removals for this Job in a fresh entry: keep them.
    if let Some(extra) = world.ctl.jobs.remove(key)
        && (extra.uid.is_empty() || extra.uid == mem.uid)
    {
        mem.removed.extend(extra.removed);
    }
    world.ctl.jobs.insert(key.clone(), mem);
}

struct Spec {
    parallelism: i64,
    completions: Option<i64>,
    backoff_limit: i64,
    suspend: bool,
    indexed: bool,
    replace_failed_only: bool,
    on_failure: bool,
    deadline: Option<i64>,
}

fn spec_of(v: &Value) -> Spec {
    Spec {
        parallelism: int(v, "/spec/parallelism").unwrap_or(1).max(0),
        completions: int(v, "/spec/completions"),
        backoff_limit: int(v, "/spec/backoffLimit").unwrap_or(6),
        suspend: v.pointer("/spec/suspend").and_then(Value::as_bool).unwrap_or(false),
        indexed: v.pointer("/spec/completionMode").and_then(Value::as_str) == Some("Indexed"),
        replace_failed_only: v.pointer("/spec/podReplacementPolicy").and_then(Value::as_str) == Some("Failed"),
        on_failure: v.pointer("/spec/template/spec/restartPolicy").and_then(Value::as_str) == Some("OnFailure"),
        deadline: int(v, "/spec/activeDeadlineSeconds"),
    }
}

fn sync_job(world: &mut World, key: &Key, job: &Obj, mem: &mut JobMem, now: Instant) {
    let v = &job.value;
    let spec = spec_of(v);
    let pods = crate::ctl::controlled_pods(world, &mem.uid, job_owner);
    let status = v.get("status").cloned().unwrap_or_else(|| json!({}));
    let mut succeeded = int(&status, "/succeeded").unwrap_or(0);
    let mut failed = int(&status, "/failed").unwrap_or(0);
    let mut completed = parse_indexes(status.get("completedIndexes").and_then(Value::as_str).unwrap_or_default());
    let mut new_failures = 0u32;
    let mut new_success = false;
    // Count what ended.
    for r in std::mem::take(&mut mem.removed) {
        if mem.counted.remove(&r.uid) {
            continue;
        }
        let ours = mem.ours.remove(&r.uid);
        if r.phase == "Succeeded" {
            succeeded += 1;
            new_success = true;
            if let Some(ix) = r.index {
                completed.insert(ix);
            }
        } else if !ours {
            failed += 1;
            new_failures += 1;
        }
    }
    for p in &pods {
        let pv = &p.value;
        let uid = meta_str(pv, "uid");
        if mem.counted.contains(uid) {
            continue;
        }
        let phase = pv.pointer("/status/phase").and_then(Value::as_str).unwrap_or_default();
        let ours = mem.ours.contains(uid);
        if phase == "Succeeded" {
            mem.counted.insert(uid.to_owned());
            succeeded += 1;
            new_success = true;
            if let Some(ix) = completion_index(pv) {
                completed.insert(ix);
            }
        } else if phase == "Failed" {
            mem.counted.insert(uid.to_owned());
            if !ours {
                failed += 1;
                new_failures += 1;
            }
        } else if is_deleting(pv) && !ours && !spec.replace_failed_only {
            mem.counted.insert(uid.to_owned());
            failed += 1;
            new_failures += 1;
        }
    }
    if spec.indexed {
        if let Some(c) = spec.completions {
            completed.retain(|ix| *ix < c);
        }
        succeeded = completed.len() as i64;
    }
    if new_success {
        mem.failures_in_a_row = 0;
    }
    if new_failures > 0 {
        mem.failures_in_a_row += new_failures;
        let backoff = (10.0 * 2f64.powi(mem.failures_in_a_row.saturating_sub(1).min(6) as i32)).min(360.0);
        mem.next_create_at = Some(now + scaled(world, backoff));
    }
    let terminal =
        |p: &Obj| matches!(p.value.pointer("/status/phase").and_then(Value::as_str), Some("Succeeded" | "Failed"));
    let mut active: Vec<Obj> = pods.iter().filter(|p| !terminal(p) && !is_deleting(&p.value)).cloned().collect();
    let mut terminating = pods.iter().filter(|p| !terminal(p) && is_deleting(&p.value)).count() as i64;
    let restarts: i64 = if spec.on_failure {
        active
            .iter()
            .flat_map(|p| {
                p.value.pointer("/status/containerStatuses").and_then(Value::as_array).cloned().unwrap_or_default()
            })
            .filter_map(|c| c.get("restartCount").and_then(Value::as_i64))
            .sum()
    } else {
        0
    };

    let mut new = v.clone();
    if new.get("status").is_none_or(|s| !s.is_object()) {
        new["status"] = json!({});
    }
    if new.pointer("/status/startTime").is_none_or(Value::is_null) && !spec.suspend {
        new["status"]["startTime"] = json!(now_rfc3339());
        mem.started_at = Some(now);
    }
    let mut events: Vec<(bool, String, String)> = Vec::new();

    // Has it failed?
    let mut failure: Option<(&str, &str)> = None;
    if failed > spec.backoff_limit || (spec.on_failure && restarts > 0 && restarts >= spec.backoff_limit) {
        failure = Some(("BackoffLimitExceeded", "Job has reached the specified backoff limit"));
    } else if let Some(deadline) = spec.deadline
        && !spec.suspend
    {
        let started = mem.started_at.or_else(|| started_from_status(&new, now));
        mem.started_at = started;
        if let Some(started) = started {
            let end = started + scaled(world, deadline as f64);
            if now >= end {
                failure = Some(("DeadlineExceeded", "Job was active longer than specified deadline"));
            } else {
                world.ctl.at(end, Target::Job(key.clone()));
            }
        }
    }
    if let Some((reason, message)) = failure {
        let deleted = delete_pods(world, mem, &active, &mut events);
        terminating += deleted;
        active.clear();
        set_condition(&mut new, "FailureTarget", "True", reason, message);
        if terminating == 0 {
            set_condition(&mut new, "Failed", "True", reason, message);
            events.push((true, reason.to_owned(), message.to_owned()));
        }
    } else {
        if mem.pending_creates == 0 {
            if spec.suspend {
                let deleted = delete_pods(world, mem, &active, &mut events);
                terminating += deleted;
                active.clear();
            } else {
                manage(
                    world,
                    key,
                    v,
                    &spec,
                    mem,
                    &mut active,
                    &mut terminating,
                    &completed,
                    succeeded,
                    now,
                    &mut events,
                );
            }
        }
        let complete = match spec.completions {
            Some(c) => succeeded >= c && active.is_empty() && mem.pending_creates == 0,
            None => succeeded > 0 && active.is_empty() && mem.pending_creates == 0,
        };
        if complete {
            let (reason, message) = ("CompletionsReached", "Reached expected number of succeeded pods");
            set_condition(&mut new, "SuccessCriteriaMet", "True", reason, message);
            if terminating == 0 {
                set_condition(&mut new, "Complete", "True", reason, message);
                new["status"]["completionTime"] = json!(now_rfc3339());
                events.push((false, "Completed".into(), "Job completed".into()));
            }
        } else if spec.suspend {
            if set_condition(&mut new, "Suspended", "True", "JobSuspended", "Job suspended") {
                events.push((false, "Suspended".into(), "Job suspended".into()));
            }
        } else if condition(&new, "Suspended").is_some()
            && set_condition(&mut new, "Suspended", "False", "JobResumed", "Job resumed")
        {
            events.push((false, "Resumed".into(), "Job resumed".into()));
            new["status"]["startTime"] = json!(now_rfc3339());
            mem.started_at = Some(now);
            if let Some(deadline) = spec.deadline {
                world.ctl.at(now + scaled(world, deadline as f64), Target::Job(key.clone()));
            }
        }
    }
    let ready = active.iter().filter(|p| condition_true(&p.value, "Ready")).count() as i64;
    let status = &mut new["status"];
    status["active"] = json!(active.len());
    status["ready"] = json!(ready);
    status["terminating"] = json!(terminating);
    status["succeeded"] = json!(succeeded);
    status["failed"] = json!(failed);
    status["uncountedTerminatedPods"] = json!({});
    if spec.indexed {
        status["completedIndexes"] = json!(format_indexes(&completed));
    }
    for field in ["active", "succeeded", "failed"] {
        // These counters are `omitempty` in the API: zero is absent.
        if status[field] == json!(0)
            && let Some(m) = status.as_object_mut()
        {
            m.remove(field);
        }
    }
    if new != *v {
        world.commit(Kind::Job, key, new.clone(), EventType::Modified);
    }
    for (warning, reason, message) in events {
        world.record_event(Kind::Job, &new, warning, &reason, &message, COMPONENT);
    }
}

fn started_from_status(job: &Value, now: Instant) -> Option<Instant> {
    let text = job.pointer("/status/startTime").and_then(Value::as_str)?;
    let start: jiff::Timestamp = text.parse().ok()?;
    let elapsed = jiff::Timestamp::now().duration_since(start);
    let elapsed = Duration::try_from(elapsed).unwrap_or(Duration::ZERO);
    Some(now.checked_sub(elapsed).unwrap_or(now))
}

/// Creates or deletes pods to reach the number wanted.
#[allow(clippy::too_many_arguments)]
fn manage(
    world: &mut World,
    key: &Key,
    job: &Value,
    spec: &Spec,
    mem: &mut JobMem,
    active: &mut Vec<Obj>,
    terminating: &mut i64,
    completed: &BTreeSet<i64>,
    succeeded: i64,
    now: Instant,
    events: &mut Vec<(bool, String, String)>,
) {
    let counting_terminating = if spec.replace_failed_only { *terminating } else { 0 };
    let want = if spec.indexed {
        let c = spec.completions.unwrap_or(0);
        spec.parallelism.min(c - completed.len() as i64).max(0)
    } else {
        match spec.completions {
            Some(c) => spec.parallelism.min(c - succeeded).max(0),
            None if succeeded > 0 => 0,
            None => spec.parallelism,
        }
    };
    let have = active.len() as i64 + counting_terminating;
    if have > want {
        let excess = (active.len() as i64 - want).max(0) as usize;
        // Unbound pods go first, then not-ready ones, then the newest.
        let mut order: Vec<Obj> = active.clone();
        order.sort_by_key(|p| {
            let bound = p.value.pointer("/spec/nodeName").and_then(Value::as_str).is_some_and(|n| !n.is_empty());
            let ready = condition_true(&p.value, "Ready");
            (bound, ready, std::cmp::Reverse(meta_str(&p.value, "creationTimestamp").to_owned()))
        });
        let victims: Vec<Obj> = order.into_iter().take(excess).collect();
        let deleted = delete_pods(world, mem, &victims, events);
        *terminating += deleted;
        let gone: HashSet<&str> = victims.iter().map(|p| meta_str(&p.value, "uid")).collect();
        active.retain(|p| !gone.contains(meta_str(&p.value, "uid")));
        return;
    }
    if have == want {
        return;
    }
    if let Some(at) = mem.next_create_at
        && now < at
    {
        world.ctl.at(at, Target::Job(key.clone()));
        return;
    }
    let count = (want - have) as usize;
    let indexes: Vec<Option<i64>> = if spec.indexed {
        let busy: HashSet<i64> = active.iter().filter_map(|p| completion_index(&p.value)).collect();
        (0..spec.completions.unwrap_or(0))
            .filter(|ix| !completed.contains(ix) && !busy.contains(ix))
            .take(count)
            .map(Some)
            .collect()
    } else {
        vec![None; count]
    };
    for ix in indexes {
        let pod = pod_from_template(job, ix);
        mem.pending_creates += 1;
        world.ctl.creates.push(PodCreate { owner: Owner::Job, key: key.clone(), uid: mem.uid.clone(), pod });
    }
}

/// Deletes pods as the controller does (their own grace period); returns how many.
fn delete_pods(world: &mut World, mem: &mut JobMem, pods: &[Obj], events: &mut Vec<(bool, String, String)>) -> i64 {
    let mut n = 0;
    for p in pods {
        let key = Key::of(&p.value);
        mem.ours.insert(meta_str(&p.value, "uid").to_owned());
        if world.delete(Kind::Pod, &key, &DeleteOpts::default()).is_ok() {
            n += 1;
            events.push((false, "SuccessfulDelete".into(), format!("Deleted pod: {}", key.name)));
        }
    }
    n
}

/// A pod from the Job's template.
fn pod_from_template(job: &Value, index: Option<i64>) -> Value {
    let name = meta_str(job, "name");
    let template = job.pointer("/spec/template").cloned().unwrap_or_else(|| json!({}));
    let mut meta = template.get("metadata").cloned().filter(Value::is_object).unwrap_or_else(|| json!({}));
    let mut spec = template.get("spec").cloned().unwrap_or_else(|| json!({}));
    let base: String = name.chars().take(58).collect();
    meta["generateName"] = json!(match index {
        Some(ix) => format!("{base}-{ix}-"),
        None => format!("{base}-"),
    });
    if let Some(m) = meta.as_object_mut() {
        m.remove("name");
        m.remove("namespace");
    }
    meta["ownerReferences"] = json!([{
        "apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": meta_str(job, "uid"),
        "controller": true, "blockOwnerDeletion": true,
    }]);
    if let Some(ix) = index {
        for field in ["labels", "annotations"] {
            if meta.get(field).is_none_or(|x| !x.is_object()) {
                meta[field] = json!({});
            }
            meta[field][COMPLETION_INDEX] = json!(ix.to_string());
        }
        spec["hostname"] = json!(format!("{name}-{ix}"));
        for c in spec.get_mut("containers").and_then(Value::as_array_mut).into_iter().flatten() {
            let env = c.as_object_mut().map(|c| c.entry("env").or_insert_with(|| json!([])));
            if let Some(Value::Array(env)) = env {
                env.push(json!({"name": "JOB_COMPLETION_INDEX", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": format!("metadata.annotations['{COMPLETION_INDEX}']")}}}));
            }
        }
    }
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec})
}

/// The end of a create the controller asked for.
pub(crate) fn created(world: &mut World, job_key: &Key, job_uid: &str, result: Result<Obj, ApiError>) {
    let Some(mut mem) = world.ctl.jobs.remove(job_key) else { return };
    if mem.uid != job_uid {
        world.ctl.jobs.insert(job_key.clone(), mem);
        return;
    }
    mem.pending_creates = mem.pending_creates.saturating_sub(1);
    let job = world.get(Kind::Job, job_key).map(|j| j.value.clone());
    match result {
        Ok(pod) => {
            mem.create_errors = 0;
            if let Some(job) = &job {
                world.record_event(
                    Kind::Job,
                    job,
                    false,
                    "SuccessfulCreate",
                    &format!("Created pod: {}", meta_str(&pod.value, "name")),
                    COMPONENT,
                );
            }
        }
        Err(e) => {
            mem.create_errors += 1;
            // The controller's rate-limited queue: 100 ms doubling, at most 10 s (real time).
            let wait = Duration::from_millis(100 * 2u64.pow(mem.create_errors.min(7)));
            let at = Instant::now() + wait.min(Duration::from_secs(10));
            mem.next_create_at = Some(mem.next_create_at.map_or(at, |n| n.max(at)));
            world.ctl.at(at, Target::Job(job_key.clone()));
            if let Some(job) = &job {
                world.record_event(
                    Kind::Job,
                    job,
                    true,
                    "FailedCreate",
                    &format!("Error creating: {}", e.message),
                    COMPONENT,
                );
            }
        }
    }
    world.ctl.jobs.insert(job_key.clone(), mem);
    world.ctl.dirty_jobs.insert(job_key.clone());
    world.wake.notify_one();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completed_indexes_round_trip() {
        let set = parse_indexes("0-2,5,7-8");
        assert_eq!(set.iter().copied().collect::<Vec<_>>(), vec![0, 1, 2, 5, 7, 8]);
        assert_eq!(format_indexes(&set), "0-2,5,7-8");
        assert_eq!(format_indexes(&BTreeSet::new()), "");
    }
}
