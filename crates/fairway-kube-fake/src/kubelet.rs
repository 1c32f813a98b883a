//! The kubelets: a pod bound to a ready node starts (after `FakeConfig::kubelet_start_delay`),
//! runs for the time its command says, and ends Succeeded or Failed with its exit code. A
//! pod being deleted is stopped (SIGTERM: it ends after `fake.fairway.dev/stop-seconds`, or is
//! killed when its grace period ends, whichever comes first), its terminal status is
//! written, then it is removed. Pods on a NotReady node stand still until it is Ready again
//! (a kubelet that cannot reach the API server reports nothing).
//!
//! The sync of a pod is idempotent and driven by the clock: it compares now with the
//! instants in its [`PodRun`] and arms a timer for the next one, so stale timers are
//! harmless and a node coming back catches up at once.

use serde_json::{Value, json};
use tokio::time::Instant;

use crate::ctl::{Target, scaled};
use crate::kinds::Kind;
use crate::ops::set_condition;
use crate::store::{EventType, Key, World, meta_str, node_ready, now_rfc3339};

/// Annotation: the seconds a pod runs, when its command does not say.
pub const RUN_SECONDS: &str = "fake.fairway.dev/run-seconds";
/// Annotation: its exit code, when its command does not say (default 0).
pub const EXIT_CODE: &str = "fake.fairway.dev/exit-code";
/// Annotation: the seconds it takes to stop after SIGTERM (default 0).
pub const STOP_SECONDS: &str = "fake.fairway.dev/stop-seconds";

/// What a pod's main container does: run for `seconds` (forever if `None`), then exit.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Program {
    pub seconds: Option<f64>,
    pub exit_code: i32,
}

/// The kubelet's memory of one pod.
#[derive(Clone, Debug)]
pub(crate) struct PodRun {
    uid: String,
    start_at: Instant,
    started: Option<Instant>,
    finish_at: Option<Instant>,
    exit_code: i32,
    /// When a deletion's SIGTERM or SIGKILL ends it, and its exit code then.
    kill: Option<(Instant, i32)>,
    armed: Option<Instant>,
}

/// Reads the program from the first container (`sleep N`; `sh -c "sleep N; exit C"`;
/// `exit C`), else from the annotations, else it runs until deleted.
pub(crate) fn program(pod: &Value) -> Program {
    let container = pod.pointer("/spec/containers/0");
    let argv: Vec<String> = ["command", "args"]
        .iter()
        .flat_map(|f| container.and_then(|c| c.get(*f)).and_then(Value::as_array).into_iter().flatten())
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect();
    if let Some(p) = from_argv(&argv) {
        return p;
    }
    let annotation = |k: &str| pod.pointer("/metadata/annotations").and_then(|a| a.get(k)).and_then(Value::as_str);
    Program {
        seconds: annotation(RUN_SECONDS).and_then(|s| s.trim().parse::<f64>().ok()),
        exit_code: annotation(EXIT_CODE).and_then(|s| s.trim().parse().ok()).unwrap_or(0),
    }
}

fn from_argv(argv: &[String]) -> Option<Program> {
    let first = argv.first()?.rsplit('/').next().unwrap_or_default();
    match first {
        "sleep" if argv.len() == 2 => Some(Program { seconds: Some(sleep_seconds(&argv[1])?), exit_code: 0 }),
        "sh" | "bash" | "ash" if argv.len() == 3 && argv[1] == "-c" => script(&argv[2]),
        _ => None,
    }
}

/// `sleep N; exit C`, `sleep N && exit C`, `exit C`, `true`, `false`.
fn script(text: &str) -> Option<Program> {
    let mut seconds = 0.0;
    for statement in text.split([';', '\n']).flat_map(|s| s.split("&&")) {
        let words: Vec<&str> = statement.split_whitespace().collect();
        match words.as_slice() {
            [] | ["true"] => {}
            ["false"] => return Some(Program { seconds: Some(seconds), exit_code: 1 }),
            ["sleep", n] => seconds += sleep_seconds(n)?,
            ["exit"] => return Some(Program { seconds: Some(seconds), exit_code: 0 }),
            ["exit", c] => return Some(Program { seconds: Some(seconds), exit_code: c.parse().ok()? }),
            _ => return None,
        }
    }
    Some(Program { seconds: Some(seconds), exit_code: 0 })
}

/// `sleep`'s argument: seconds, with GNU's optional s/m/h/d suffix; `infinity` is `None`.
fn sleep_seconds(arg: &str) -> Option<f64> {
    if arg == "infinity" {
        return Some(f64::INFINITY);
    }
    let (number, unit) = match arg.char_indices().last()? {
        (i, 's') => (&arg[..i], 1.0),
        (i, 'm') => (&arg[..i], 60.0),
        (i, 'h') => (&arg[..i], 3600.0),
        (i, 'd') => (&arg[..i], 86_400.0),
        _ => (arg, 1.0),
    };
    let n: f64 = number.parse().ok()?;
    (n >= 0.0).then_some(n * unit)
}

fn stop_seconds(pod: &Value) -> f64 {
    pod.pointer("/metadata/annotations")
        .and_then(|a| a.get(STOP_SECONDS))
        .and_then(Value::as_str)
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0.0)
}

fn terminal(phase: &str) -> bool {
    matches!(phase, "Succeeded" | "Failed")
}

/// Brings one pod up to date.
pub(crate) fn sync(world: &mut World, key: &Key, now: Instant) {
    let Some(pod) = world.get(Kind::Pod, key).cloned() else {
        world.ctl.kubelet.remove(key);
        return;
    };
    let v = &pod.value;
    let node_name = v.pointer("/spec/nodeName").and_then(Value::as_str).unwrap_or_default().to_owned();
    if node_name.is_empty() {
        return;
    }
    let Some(node) = world.get(Kind::Node, &Key::new("", &node_name)).cloned() else { return };
    if !node_ready(&node.value) {
        return;
    }
    let uid = meta_str(v, "uid").to_owned();
    let phase = v.pointer("/status/phase").and_then(Value::as_str).unwrap_or("Pending").to_owned();
    let deleting = crate::ops::is_deleting(v);
    if terminal(&phase) {
        world.ctl.kubelet.remove(key);
        if deleting {
            world.finish_delete(Kind::Pod, key);
        }
        return;
    }
    let start_delay = world.config.kubelet_start_delay;
    let run = world.ctl.kubelet.entry(key.clone()).or_insert_with(|| PodRun {
        uid: uid.clone(),
        start_at: now + start_delay,
        started: None,
        finish_at: None,
        exit_code: 0,
        kill: None,
        armed: None,
    });
    if run.uid != uid {
        *run = PodRun {
            uid,
            start_at: now + start_delay,
            started: None,
            finish_at: None,
            exit_code: 0,
            kill: None,
            armed: None,
        };
    }
    if run.armed.is_some_and(|a| a <= now) {
        run.armed = None;
    }
    let mut run = run.clone();
    if deleting && run.started.is_none() {
        // Deleted before its container started: nothing to stop.
        world.ctl.kubelet.remove(key);
        world.finish_delete(Kind::Pod, key);
        return;
    }
    if run.started.is_none() {
        if now < run.start_at {
            let at = run.start_at;
            arm(world, key, &mut run, at);
            return;
        }
        let program = program(v);
        run.started = Some(now);
        run.exit_code = program.exit_code;
        run.finish_at = program.seconds.filter(|s| s.is_finite()).map(|s| now + scaled(world, s));
        start(world, key, &node.value);
        if world.config.events {
            world.record_event(
                Kind::Pod,
                &world.get(Kind::Pod, key).expect("just written").value.clone(),
                false,
                "Started",
                "Started container",
                "kubelet",
            );
        }
    }
    if deleting && run.kill.is_none() {
        let grace = v.pointer("/metadata/deletionGracePeriodSeconds").and_then(Value::as_i64).unwrap_or(0) as f64;
        let stop = stop_seconds(v);
        let (after, code) = if stop <= grace { (stop, 143) } else { (grace, 137) };
        run.kill = Some((now + scaled(world, after), code));
        if world.config.events {
            let value = world.get(Kind::Pod, key).expect("present").value.clone();
            let name = v.pointer("/spec/containers/0/name").and_then(Value::as_str).unwrap_or_default();
            world.record_event(Kind::Pod, &value, false, "Killing", &format!("Stopping container {name}"), "kubelet");
        }
    }
    let ends = [run.finish_at.map(|f| (f, run.exit_code)), run.kill].into_iter().flatten().min_by_key(|(at, _)| *at);
    match ends {
        Some((at, code)) if at <= now => {
            let restart = v.pointer("/spec/restartPolicy").and_then(Value::as_str).unwrap_or("Always");
            let restarts = !deleting && (restart == "Always" || (restart == "OnFailure" && code != 0));
            if restarts {
                let count = restart_container(world, key, code);
                // The container's back-off: 10 s doubling, at most 5 minutes.
                let backoff = (10.0 * 2f64.powi(count.saturating_sub(1).min(5) as i32)).min(300.0);
                let program = program(v);
                run.started = Some(now);
                run.finish_at =
                    program.seconds.filter(|s| s.is_finite()).map(|s| now + scaled(world, backoff) + scaled(world, s));
                if let Some(f) = run.finish_at {
                    arm(world, key, &mut run, f);
                }
                world.ctl.kubelet.insert(key.clone(), run);
                return;
            }
            finish(world, key, code);
            world.ctl.kubelet.remove(key);
            if deleting {
                world.finish_delete(Kind::Pod, key);
            }
        }
        Some((at, _)) => {
            arm(world, key, &mut run, at);
            world.ctl.kubelet.insert(key.clone(), run);
        }
        None => {
            world.ctl.kubelet.insert(key.clone(), run);
        }
    }
}

fn arm(world: &mut World, key: &Key, run: &mut PodRun, at: Instant) {
    if run.armed != Some(at) {
        run.armed = Some(at);
        world.ctl.at(at, Target::Pod(key.clone()));
    }
    world.ctl.kubelet.insert(key.clone(), run.clone());
}

fn container_names(pod: &Value) -> Vec<(String, String)> {
    pod.pointer("/spec/containers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|c| {
            (
                c.get("name").and_then(Value::as_str).unwrap_or_default().to_owned(),
                c.get("image").and_then(Value::as_str).unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

/// The status of a started pod.
fn start(world: &mut World, key: &Key, node: &Value) {
    let n = world.next_seq();
    let Some(pod) = world.get(Kind::Pod, key).cloned() else { return };
    let mut v = pod.value.clone();
    let now = now_rfc3339();
    let uid = meta_str(&v, "uid").to_owned();
    let host_ip = node
        .pointer("/status/addresses")
        .and_then(Value::as_array)
        .and_then(|a| a.iter().find(|x| x.get("type").and_then(Value::as_str) == Some("InternalIP")))
        .and_then(|x| x.get("address"))
        .and_then(Value::as_str)
        .unwrap_or("10.0.0.1")
        .to_owned();
    let pod_ip = format!("10.{}.{}.{}", 64 + (n >> 16) % 64, (n >> 8) % 256, n % 256);
    let statuses: Vec<Value> = container_names(&v)
        .into_iter()
        .map(|(name, image)| {
            json!({
                "name": name, "image": image, "imageID": format!("{image}@sha256:fake"),
                "containerID": format!("fake://{uid}-{name}"), "ready": true, "started": true, "restartCount": 0,
                "state": {"running": {"startedAt": now}}, "lastState": {},
            })
        })
        .collect();
    if v.get("status").is_none_or(|s| !s.is_object()) {
        v["status"] = json!({});
    }
    let status = &mut v["status"];
    status["phase"] = json!("Running");
    status["startTime"] = json!(now);
    status["hostIP"] = json!(host_ip);
    status["hostIPs"] = json!([{"ip": host_ip}]);
    status["podIP"] = json!(pod_ip);
    status["podIPs"] = json!([{"ip": pod_ip}]);
    status["containerStatuses"] = json!(statuses);
    for c in ["PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled"] {
        set_condition(&mut v, c, "True", "", "");
    }
    world.commit(Kind::Pod, key, v, EventType::Modified);
}

/// A container that exits and is started again (restartPolicy Always, or OnFailure after a
/// failure): the pod stays Running, `restartCount` goes up. Returns the new count.
fn restart_container(world: &mut World, key: &Key, code: i32) -> u32 {
    let Some(pod) = world.get(Kind::Pod, key).cloned() else { return 0 };
    let mut v = pod.value.clone();
    let now = now_rfc3339();
    let mut count = 0;
    if let Some(first) = v.pointer_mut("/status/containerStatuses/0") {
        count = first.get("restartCount").and_then(Value::as_u64).unwrap_or(0) as u32 + 1;
        let started = first.pointer("/state/running/startedAt").cloned().unwrap_or(Value::Null);
        first["restartCount"] = json!(count);
        first["lastState"] = json!({"terminated": {
            "exitCode": code, "reason": if code == 0 { "Completed" } else { "Error" },
            "startedAt": started, "finishedAt": now,
        }});
        first["state"] = json!({"running": {"startedAt": now}});
    }
    world.commit(Kind::Pod, key, v, EventType::Modified);
    count
}

/// The terminal status: Succeeded for exit code 0, else Failed.
fn finish(world: &mut World, key: &Key, code: i32) {
    let Some(pod) = world.get(Kind::Pod, key).cloned() else { return };
    let mut v = pod.value.clone();
    let now = now_rfc3339();
    let uid = meta_str(&v, "uid").to_owned();
    let started = v.pointer("/status/startTime").cloned().unwrap_or_else(|| json!(now));
    let statuses: Vec<Value> = container_names(&v)
        .into_iter()
        .enumerate()
        .map(|(i, (name, image))| {
            // Other containers exit with the first, killed alike or cleanly.
            let exit = if i == 0 || code == 137 || code == 143 { code } else { 0 };
            let restarts = v
                .pointer(&format!("/status/containerStatuses/{i}/restartCount"))
                .and_then(Value::as_u64)
                .unwrap_or(0);
            json!({
                "name": name, "image": image, "imageID": format!("{image}@sha256:fake"),
                "containerID": format!("fake://{uid}-{name}"), "ready": false, "started": false, "restartCount": restarts,
                "state": {"terminated": {
                    "exitCode": exit, "reason": if exit == 0 { "Completed" } else { "Error" },
                    "startedAt": started, "finishedAt": now, "containerID": format!("fake://{uid}-{name}"),
                }},
                "lastState": {},
            })
        })
        .collect();
    v["status"]["phase"] = json!(if code == 0 { "Succeeded" } else { "Failed" });
    v["status"]["containerStatuses"] = json!(statuses);
    for c in ["Ready", "ContainersReady"] {
        set_condition(&mut v, c, "False", "PodCompleted", "");
    }
    set_condition(&mut v, "PodReadyToStartContainers", "False", "", "");
    world.commit(Kind::Pod, key, v, EventType::Modified);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(command: Value, annotations: Value) -> Value {
        json!({"metadata": {"annotations": annotations}, "spec": {"containers": [{"name": "c", "image": "i", "command": command}]}})
    }

    #[test]
    fn programs_come_from_the_command_then_the_annotations() {
        assert_eq!(program(&pod(json!(["sleep", "100"]), json!({}))), Program { seconds: Some(100.0), exit_code: 0 });
        assert_eq!(program(&pod(json!(["sleep", "2m"]), json!({}))), Program { seconds: Some(120.0), exit_code: 0 });
        assert_eq!(
            program(&pod(json!(["sh", "-c", "sleep 5; exit 3"]), json!({}))),
            Program { seconds: Some(5.0), exit_code: 3 }
        );
        assert_eq!(
            program(&pod(json!(["/bin/sh", "-c", "exit 2"]), json!({}))),
            Program { seconds: Some(0.0), exit_code: 2 }
        );
        assert_eq!(
            program(&pod(json!(["python", "train.py"]), json!({RUN_SECONDS: "7", EXIT_CODE: "1"}))),
            Program { seconds: Some(7.0), exit_code: 1 }
        );
        assert_eq!(program(&pod(json!(["python"]), json!({}))), Program { seconds: None, exit_code: 0 });
        assert_eq!(program(&pod(json!(["sh", "-c", "python x.py"]), json!({}))).seconds, None);
    }
}
