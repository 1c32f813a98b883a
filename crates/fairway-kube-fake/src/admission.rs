//! What the API server does to an object besides storing it: defaulting (when a request is
//! decoded, before webhooks), the create strategies (status reset, a Job's selector and
//! template labels), validation (422, with the real field paths), and the immutability
//! rules of updates that a controller can trip over (a pod's spec; a Job's template, except
//! the scheduling directives of a suspended Job that has not started).

use serde_json::{Map, Value, json};

use crate::kinds::Kind;
use crate::quantity;

pub(crate) const JOB_NAME_LABEL: &str = "batch.kubernetes.io/job-name";
pub(crate) const CONTROLLER_UID_LABEL: &str = "batch.kubernetes.io/controller-uid";
pub(crate) const LEGACY_JOB_NAME_LABEL: &str = "job-name";
pub(crate) const LEGACY_CONTROLLER_UID_LABEL: &str = "controller-uid";
pub(crate) const COMPLETION_INDEX: &str = "batch.kubernetes.io/job-completion-index";

type Causes = Vec<(String, String)>;

/// The defaulting functions of the types served.
pub(crate) fn default(kind: Kind, v: &mut Value) {
    match kind {
        Kind::Pod => {
            if let Some(spec) = v.get_mut("spec") {
                default_pod_spec(spec);
            }
        }
        Kind::Job => default_job(v),
        Kind::PriorityClass => set_default(v, "preemptionPolicy", json!("PreemptLowerPriority")),
        Kind::Secret => set_default(v, "type", json!("Opaque")),
        Kind::Namespace if v.pointer("/spec/finalizers").is_none() => {
            v["spec"] = json!({"finalizers": ["kubernetes"]});
        }
        Kind::MutatingWebhookConfiguration => {
            for hook in v.get_mut("webhooks").and_then(Value::as_array_mut).into_iter().flatten() {
                set_default(hook, "failurePolicy", json!("Fail"));
                set_default(hook, "matchPolicy", json!("Equivalent"));
                set_default(hook, "namespaceSelector", json!({}));
                set_default(hook, "objectSelector", json!({}));
                set_default(hook, "timeoutSeconds", json!(10));
                set_default(hook, "reinvocationPolicy", json!("Never"));
                for rule in hook.get_mut("rules").and_then(Value::as_array_mut).into_iter().flatten() {
                    set_default(rule, "scope", json!("*"));
                }
            }
        }
        _ => {}
    }
}

fn set_default(v: &mut Value, field: &str, value: Value) {
    if let Some(map) = v.as_object_mut()
        && map.get(field).is_none_or(Value::is_null)
    {
        map.insert(field.to_owned(), value);
    }
}

fn default_job(v: &mut Value) {
    let Some(spec) = v.get_mut("spec").and_then(Value::as_object_mut) else { return };
    let has = |spec: &Map<String, Value>, f: &str| spec.get(f).is_some_and(|x| !x.is_null());
    if !has(spec, "completions") && !has(spec, "parallelism") {
        spec.insert("completions".into(), json!(1));
        spec.insert("parallelism".into(), json!(1));
    }
    if !has(spec, "parallelism") {
        spec.insert("parallelism".into(), json!(1));
    }
    if !has(spec, "backoffLimit") {
        let limit = if has(spec, "backoffLimitPerIndex") { i32::MAX as i64 } else { 6 };
        spec.insert("backoffLimit".into(), json!(limit));
    }
    if !has(spec, "completionMode") {
        spec.insert("completionMode".into(), json!("NonIndexed"));
    }
    if !has(spec, "suspend") {
        spec.insert("suspend".into(), json!(false));
    }
    if !has(spec, "podReplacementPolicy") {
        let policy = if has(spec, "podFailurePolicy") { "Failed" } else { "TerminatingOrFailed" };
        spec.insert("podReplacementPolicy".into(), json!(policy));
    }
    if let Some(template_spec) = spec.get_mut("template").and_then(|t| t.get_mut("spec")) {
        default_pod_spec(template_spec);
    }
}

fn default_pod_spec(spec: &mut Value) {
    set_default(spec, "restartPolicy", json!("Always"));
    set_default(spec, "terminationGracePeriodSeconds", json!(30));
    set_default(spec, "dnsPolicy", json!("ClusterFirst"));
    set_default(spec, "schedulerName", json!("default-scheduler"));
    set_default(spec, "securityContext", json!({}));
    for list in ["containers", "initContainers"] {
        for c in spec.get_mut(list).and_then(Value::as_array_mut).into_iter().flatten() {
            set_default(c, "terminationMessagePath", json!("/dev/termination-log"));
            set_default(c, "terminationMessagePolicy", json!("File"));
            let image = c.get("image").and_then(Value::as_str).unwrap_or_default();
            let tag_latest = !image.contains('@')
                && image.rsplit('/').next().is_none_or(|last| !last.contains(':') || last.ends_with(":latest"));
            set_default(c, "imagePullPolicy", json!(if tag_latest { "Always" } else { "IfNotPresent" }));
            set_default(c, "resources", json!({}));
            // Requests default to limits (extended resources such as GPUs must be equal).
            let limits = c.pointer("/resources/limits").and_then(Value::as_object).cloned();
            if let Some(limits) = limits {
                let resources = c["resources"].as_object_mut().expect("defaulted above");
                let requests = resources.entry("requests").or_insert_with(|| json!({}));
                if let Some(requests) = requests.as_object_mut() {
                    for (name, q) in limits {
                        requests.entry(name).or_insert(q);
                    }
                }
            }
        }
    }
}

/// The QoS class of a pod spec.
pub(crate) fn qos_class(spec: &Value) -> &'static str {
    let containers: Vec<&Value> = spec.get("containers").and_then(Value::as_array).into_iter().flatten().collect();
    let mut any = false;
    let mut guaranteed = !containers.is_empty();
    for c in &containers {
        let requests = c.pointer("/resources/requests").and_then(Value::as_object);
        let limits = c.pointer("/resources/limits").and_then(Value::as_object);
        if requests.is_some_and(|r| !r.is_empty()) || limits.is_some_and(|l| !l.is_empty()) {
            any = true;
        }
        for r in ["cpu", "memory"] {
            let limit = limits.and_then(|l| l.get(r)).and_then(Value::as_str).and_then(quantity::parse);
            let request = requests.and_then(|l| l.get(r)).and_then(Value::as_str).and_then(quantity::parse);
            if limit.is_none() || request != limit {
                guaranteed = false;
            }
        }
    }
    if !any {
        "BestEffort"
    } else if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

/// The create strategy: what the server sets or clears whatever the request said.
pub(crate) fn prepare_create(kind: Kind, v: &mut Value) {
    let info = kind.info();
    if info.status && kind != Kind::Node && kind != Kind::Service {
        v["status"] = json!({});
    }
    match kind {
        Kind::Pod => {
            let qos = v.get("spec").map(qos_class).unwrap_or("BestEffort");
            v["status"] = json!({"phase": "Pending", "qosClass": qos});
        }
        Kind::Namespace => {
            v["status"] = json!({"phase": "Active"});
            let name = v.pointer("/metadata/name").cloned().unwrap_or(Value::Null);
            let meta = v["metadata"].as_object_mut().expect("checked by the caller");
            let labels = meta.entry("labels").or_insert_with(|| json!({}));
            if let Some(labels) = labels.as_object_mut() {
                labels.insert("kubernetes.io/metadata.name".into(), name);
            }
        }
        Kind::Job => {
            let manual = v.pointer("/spec/manualSelector").and_then(Value::as_bool) == Some(true);
            if !manual {
                let uid = v.pointer("/metadata/uid").cloned().unwrap_or(Value::Null);
                let name = v.pointer("/metadata/name").cloned().unwrap_or(Value::Null);
                if let Some(spec) = v.get_mut("spec").and_then(Value::as_object_mut) {
                    spec.insert("selector".into(), json!({"matchLabels": {CONTROLLER_UID_LABEL: uid}}));
                    let template = spec.entry("template").or_insert_with(|| json!({}));
                    if template.get("metadata").is_none_or(Value::is_null) {
                        template["metadata"] = json!({});
                    }
                    let tmeta = template["metadata"].as_object_mut().expect("made above");
                    let labels = tmeta.entry("labels").or_insert_with(|| json!({}));
                    if let Some(labels) = labels.as_object_mut() {
                        labels.insert(CONTROLLER_UID_LABEL.into(), uid.clone());
                        labels.insert(JOB_NAME_LABEL.into(), name.clone());
                        labels.insert(LEGACY_CONTROLLER_UID_LABEL.into(), uid);
                        labels.insert(LEGACY_JOB_NAME_LABEL.into(), name);
                    }
                }
            }
        }
        Kind::Service => {
            if v.pointer("/spec/type").is_none() {
                v["spec"]["type"] = json!("ClusterIP");
            }
            v["status"] = json!({"loadBalancer": {}});
        }
        _ => {}
    }
}

/// DNS-1123 subdomain (`max` 253) or label (`max` 63, no dots).
fn dns_name(name: &str, max: usize, dots: bool) -> Option<String> {
    let ok_char = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || (dots && c == '.');
    let alnum = |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    if name.len() > max {
        return Some(format!("must be no more than {max} characters"));
    }
    if !name.chars().all(ok_char) || !alnum(name.chars().next()) || !alnum(name.chars().last()) {
        let what = if dots { "a lowercase RFC 1123 subdomain" } else { "a lowercase RFC 1123 label" };
        return Some(format!(
            "Invalid value: {name:?}: {what} must consist of lower case alphanumeric characters, '-'{} and must start and end with an alphanumeric character",
            if dots { " or '.'" } else { "" }
        ));
    }
    None
}

/// Validation of a new object (the parts a controller can get wrong).
pub(crate) fn validate(kind: Kind, v: &Value) -> Causes {
    let mut causes = Causes::new();
    let name = v.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default();
    let (max, dots) = match kind {
        Kind::Namespace | Kind::Service => (63, false),
        Kind::Job => (63, true),
        _ => (253, true),
    };
    if let Some(problem) = dns_name(name, max, dots) {
        causes.push(("metadata.name".into(), problem));
    }
    match kind {
        Kind::Pod => validate_pod_spec(v.get("spec"), "spec", &mut causes, false),
        Kind::Job => {
            let spec = v.get("spec");
            for field in ["parallelism", "completions", "backoffLimit", "activeDeadlineSeconds"] {
                if let Some(n) = spec.and_then(|s| s.get(field)).and_then(Value::as_i64)
                    && n < 0
                {
                    causes.push((
                        format!("spec.{field}"),
                        format!("Invalid value: {n}: must be greater than or equal to 0"),
                    ));
                }
            }
            if spec.and_then(|s| s.get("completionMode")).and_then(Value::as_str) == Some("Indexed")
                && spec.and_then(|s| s.get("completions")).is_none_or(Value::is_null)
            {
                causes.push(("spec.completions".into(), "Required value: when completion mode is Indexed".into()));
            }
            validate_pod_spec(spec.and_then(|s| s.pointer("/template/spec")), "spec.template.spec", &mut causes, true);
        }
        Kind::PriorityClass if !v.get("value").is_some_and(Value::is_i64) => {
            causes.push(("value".into(), "Required value".into()));
        }
        Kind::Secret if v.get("type").and_then(Value::as_str) == Some("kubernetes.io/tls") => {
            for key in ["tls.crt", "tls.key"] {
                let present = v.pointer("/data").and_then(|d| d.get(key)).is_some()
                    || v.pointer("/stringData").and_then(|d| d.get(key)).is_some();
                if !present {
                    causes.push((format!("data[{key}]"), "Required value".into()));
                }
            }
        }
        Kind::ResourceQuota => {
            for (r, q) in v.pointer("/spec/hard").and_then(Value::as_object).into_iter().flatten() {
                if q.as_str().and_then(quantity::parse).is_none() && !q.is_number() {
                    causes.push((format!("spec.hard[{r}]"), format!("Invalid value: {q}: must be a quantity")));
                }
            }
        }
        _ => {}
    }
    causes
}

fn validate_pod_spec(spec: Option<&Value>, path: &str, causes: &mut Causes, in_job: bool) {
    let Some(spec) = spec else {
        causes.push((path.to_owned(), "Required value".into()));
        return;
    };
    let containers = spec.get("containers").and_then(Value::as_array);
    if containers.is_none_or(Vec::is_empty) {
        causes.push((format!("{path}.containers"), "Required value".into()));
    }
    for (i, c) in containers.into_iter().flatten().enumerate() {
        if c.get("name").and_then(Value::as_str).is_none_or(str::is_empty) {
            causes.push((format!("{path}.containers[{i}].name"), "Required value".into()));
        }
        if c.get("image").and_then(Value::as_str).is_none_or(str::is_empty) {
            causes.push((format!("{path}.containers[{i}].image"), "Required value".into()));
        }
    }
    let restart = spec.get("restartPolicy").and_then(Value::as_str).unwrap_or_default();
    if in_job && !matches!(restart, "Never" | "OnFailure") {
        causes.push((
            format!("{path}.restartPolicy"),
            format!("Unsupported value: {restart:?}: supported values: \"OnFailure\", \"Never\""),
        ));
    } else if !matches!(restart, "Always" | "Never" | "OnFailure") {
        causes.push((
            format!("{path}.restartPolicy"),
            format!("Unsupported value: {restart:?}: supported values: \"Always\", \"OnFailure\", \"Never\""),
        ));
    }
}

/// The pod spec fields an update may change.
fn pod_spec_masked(spec: &Value) -> Value {
    let mut s = spec.clone();
    if let Some(map) = s.as_object_mut() {
        map.remove("activeDeadlineSeconds");
        map.remove("tolerations");
        map.remove("schedulingGates");
        for list in ["containers", "initContainers"] {
            for c in map.get_mut(list).and_then(Value::as_array_mut).into_iter().flatten() {
                if let Some(c) = c.as_object_mut() {
                    c.remove("image");
                }
            }
        }
    }
    s
}

/// The template fields of a suspended, never-started Job that may change (Kubernetes'
/// mutable scheduling directives).
fn template_masked(template: &Value) -> Value {
    let mut t = template.clone();
    if let Some(meta) = t.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("labels");
        meta.remove("annotations");
    }
    if let Some(spec) = t.get_mut("spec").and_then(Value::as_object_mut) {
        for f in ["nodeSelector", "tolerations", "affinity", "schedulingGates"] {
            spec.remove(f);
        }
    }
    t
}

/// Validation of an update of the main resource.
pub(crate) fn validate_update(kind: Kind, old: &Value, new: &Value) -> Causes {
    let mut causes = Causes::new();
    match kind {
        Kind::Pod => {
            let (a, b) = (old.get("spec").map(pod_spec_masked), new.get("spec").map(pod_spec_masked));
            if a != b {
                causes.push((
                    "spec".into(),
                    "Forbidden: pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)".into(),
                ));
            }
        }
        Kind::Job => {
            for field in ["selector", "completionMode", "managedBy", "podFailurePolicy", "completions"] {
                let (a, b) = (old.pointer(&format!("/spec/{field}")), new.pointer(&format!("/spec/{field}")));
                if a != b && !(field == "completions" && elastic_indexed(old, new)) {
                    causes.push((format!("spec.{field}"), "Invalid value: field is immutable".into()));
                }
            }
            let (a, b) = (old.pointer("/spec/template"), new.pointer("/spec/template"));
            if a != b {
                let suspended = old.pointer("/spec/suspend").and_then(Value::as_bool) == Some(true);
                let not_started = old.pointer("/status/startTime").is_none_or(Value::is_null);
                let directives_only = a.map(template_masked) == b.map(template_masked);
                if !(suspended && not_started && directives_only) {
                    causes.push(("spec.template".into(), "Invalid value: field is immutable".into()));
                }
            }
        }
        Kind::PriorityClass if old.get("value") != new.get("value") => {
            causes.push(("value".into(), "Forbidden: may not be changed in an update.".into()));
        }
        _ => {}
    }
    causes
}

/// An Indexed Job may change completions together with parallelism, to the same value.
fn elastic_indexed(old: &Value, new: &Value) -> bool {
    new.pointer("/spec/completionMode").and_then(Value::as_str) == Some("Indexed")
        && old.pointer("/spec/completionMode") == new.pointer("/spec/completionMode")
        && new.pointer("/spec/completions") == new.pointer("/spec/parallelism")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_defaults_follow_the_api_server() {
        let mut job = json!({"spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox:1"}]}}}});
        default(Kind::Job, &mut job);
        assert_eq!(job["spec"]["completions"], 1);
        assert_eq!(job["spec"]["parallelism"], 1);
        assert_eq!(job["spec"]["backoffLimit"], 6);
        assert_eq!(job["spec"]["suspend"], false);
        assert_eq!(job["spec"]["template"]["spec"]["terminationGracePeriodSeconds"], 30);
        assert_eq!(job["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"], "IfNotPresent");
        let mut work_queue = json!({"spec": {"parallelism": 3, "template": {"spec": {}}}});
        default(Kind::Job, &mut work_queue);
        assert!(work_queue["spec"].get("completions").is_none());
    }

    #[test]
    fn requests_default_to_limits_and_set_the_qos_class() {
        let mut pod = json!({"spec": {"containers": [{"name": "c", "image": "i", "resources": {"limits": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "2"}}}]}});
        default(Kind::Pod, &mut pod);
        assert_eq!(pod["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"], "2");
        assert_eq!(qos_class(&pod["spec"]), "Guaranteed");
        assert_eq!(qos_class(&json!({"containers": [{"name": "c"}]})), "BestEffort");
    }

    #[test]
    fn a_suspended_unstarted_job_may_change_its_node_selector_only() {
        let old = json!({"spec": {"suspend": true, "template": {"spec": {"nodeSelector": {"a": "1"}, "containers": []}}}, "status": {}});
        let mut new = old.clone();
        new["spec"]["template"]["spec"]["nodeSelector"] = json!({"a": "2"});
        assert!(validate_update(Kind::Job, &old, &new).is_empty());
        let mut started = old.clone();
        started["status"]["startTime"] = json!("2024-01-01T00:00:00Z");
        assert_eq!(validate_update(Kind::Job, &started, &new).len(), 1);
        let mut image = old.clone();
        image["spec"]["template"]["spec"]["containers"] = json!([{"image": "x"}]);
        assert_eq!(validate_update(Kind::Job, &old, &image)[0].0, "spec.template");
    }
}
