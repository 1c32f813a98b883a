//! The manifests under `deploy/kubernetes`, read as the API server reads them and checked
//! against the code they deploy.
//!
//! Every document of every YAML file is read into its `k8s-openapi` type by its
//! `apiVersion` and `kind`, and written back: a field the type does not have (a misspelt
//! `imagePullPolcy`, a `livenessProbe` one level too deep) is an error, where `k8s-openapi`
//! alone would drop it without a word and the API server would either refuse the file or,
//! worse, apply it without the field. Kinds of other projects (cert-manager, Kubeflow, the
//! Prometheus Operator, kustomize) are read as JSON values and their fields checked against
//! the fields those kinds have. An unknown kind is an error.
//!
//! Then the manifests are held to the code: the settings file parses with
//! `Settings::parse` and every path and port it names is mounted or exposed; the webhook
//! is called for exactly the kinds `webhook.rs` mutates; the RBAC rules grant exactly what
//! the controller calls (the list is below, with the code that needs each); the example
//! workloads are admitted by the engine; the article's manifests are verbatim. And
//! `docs/kubernetes.md` is held to both: it names every manifest and every setting, and
//! its walk-through quotes the Events the engine writes for it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use fairway_kube::Settings;
use fairway_kube::engine::{Action, Change, Engine, Input, Stream};
use fairway_kube::webhook::{Mutation, patch_for};
use fairway_kube::workload::{Workload, paddle_resource};
use k8s_openapi::Resource;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{
    ConfigMap, Container, LimitRange, Namespace, Node, PodSpec, PodTemplateSpec, ResourceQuota, Secret, Service,
    ServiceAccount,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, Subject};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

// ---- reading -----------------------------------------------------------------------

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn deploy_dir() -> PathBuf {
    repo().join("deploy/kubernetes")
}

/// Where a document comes from: its file (relative to `deploy/kubernetes`) and number.
#[derive(Clone, Debug)]
struct Source {
    file: String,
    document: usize,
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "deploy/kubernetes/{} document {}", self.file, self.document)
    }
}

/// A document, read into its type. (Some kinds, Jobs and Secrets, are only read, to be
/// checked: nothing else looks at them.)
#[derive(Clone, Debug)]
#[allow(clippy::large_enum_variant, dead_code)]
enum Object {
    Namespace(Namespace),
    ServiceAccount(ServiceAccount),
    ClusterRole(ClusterRole),
    ClusterRoleBinding(ClusterRoleBinding),
    Role(Role),
    RoleBinding(RoleBinding),
    ConfigMap(ConfigMap),
    Secret(Secret),
    Deployment(Deployment),
    DaemonSet(DaemonSet),
    Service(Service),
    PodDisruptionBudget(PodDisruptionBudget),
    MutatingWebhookConfiguration(MutatingWebhookConfiguration),
    PriorityClass(PriorityClass),
    ResourceQuota(ResourceQuota),
    LimitRange(LimitRange),
    Job(Job),
    /// A kind of another project (cert-manager, Kubeflow, the Prometheus Operator,
    /// kustomize), already checked by [`check_foreign`].
    Foreign(Value),
}

/// Every YAML file under `deploy/kubernetes`, sorted, relative to it.
fn yaml_files() -> Vec<String> {
    fn walk(dir: &Path, base: &Path, out: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, base, out);
            } else if path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
                out.push(path.strip_prefix(base).unwrap().to_string_lossy().replace('\\', "/"));
            }
        }
    }
    let mut out = Vec::new();
    walk(&deploy_dir(), &deploy_dir(), &mut out);
    out.sort();
    out
}

fn read_text(file: &str) -> String {
    std::fs::read_to_string(deploy_dir().join(file)).unwrap_or_else(|e| panic!("deploy/kubernetes/{file}: {e}"))
}

/// The documents of a YAML text (empty ones skipped), as JSON values.
fn documents(text: &str) -> Result<Vec<Value>, String> {
    serde_saphyr::from_multiple::<Value>(text).map_err(|e| e.to_string())
}

/// `value` read as a `T` and written back; the fields `T` does not have are an error.
fn strict<T: DeserializeOwned + Serialize>(value: &Value, what: &str) -> Result<T, String> {
    let typed: T = serde_json::from_value(value.clone()).map_err(|e| format!("{what}: {e}"))?;
    let back = serde_json::to_value(&typed).map_err(|e| format!("{what}: {e}"))?;
    let mut unknown = Vec::new();
    unread(value, &back, "", &mut unknown);
    if unknown.is_empty() {
        Ok(typed)
    } else {
        Err(format!(
            "{what}: fields that {} does not have (misspelt?): {}",
            std::any::type_name::<T>(),
            unknown.join(", ")
        ))
    }
}

/// The paths of `original` that are not in `reread`.
fn unread(original: &Value, reread: &Value, path: &str, out: &mut Vec<String>) {
    match (original, reread) {
        (Value::Object(a), Value::Object(b)) => {
            for (key, value) in a {
                let here = if path.is_empty() { key.clone() } else { format!("{path}.{key}") };
                match b.get(key) {
                    Some(again) => unread(value, again, &here, out),
                    None if value.is_null() => out.push(format!("{here} (null: remove it or give a value)")),
                    None => out.push(here),
                }
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            if a.len() != b.len() {
                out.push(format!("{path} (list of {} read as {})", a.len(), b.len()));
            }
            for (i, (value, again)) in a.iter().zip(b).enumerate() {
                unread(value, again, &format!("{path}[{i}]"), out);
            }
        }
        _ => {}
    }
}

/// One document into its type, by `apiVersion` and `kind`.
fn read_document(value: &Value, what: &str) -> Result<Object, String> {
    let api_version = value["apiVersion"].as_str().unwrap_or_default();
    let kind = value["kind"].as_str().unwrap_or_default();
    macro_rules! typed {
        ($($ty:ident),* $(,)?) => {
            $(
                if api_version == <$ty as Resource>::API_VERSION && kind == <$ty as Resource>::KIND {
                    return strict::<$ty>(value, what).map(Object::$ty);
                }
            )*
        };
    }
    typed!(
        Namespace,
        ServiceAccount,
        ClusterRole,
        ClusterRoleBinding,
        Role,
        RoleBinding,
        ConfigMap,
        Secret,
        Deployment,
        DaemonSet,
        Service,
        PodDisruptionBudget,
        MutatingWebhookConfiguration,
        PriorityClass,
        ResourceQuota,
        LimitRange,
        Job,
    );
    check_foreign(value, api_version, kind, what).map(|()| Object::Foreign(value.clone()))
}

/// The keys of `value` (an object) outside `allowed`, as errors.
fn only_keys(value: &Value, allowed: &[&str], path: &str, errors: &mut Vec<String>) {
    match value.as_object() {
        Some(map) => {
            for key in map.keys().filter(|k| !allowed.contains(&k.as_str())) {
                errors.push(format!("{path}.{key}: not a field here (known: {})", allowed.join(", ")));
            }
        }
        None => errors.push(format!("{path}: must be a mapping")),
    }
}

fn items<'a>(value: &'a Value, path: &str, errors: &mut Vec<String>) -> &'a [Value] {
    match value.as_array() {
        Some(list) => list,
        None => {
            errors.push(format!("{path}: must be a list"));
            &[]
        }
    }
}

/// The kinds of other projects, with the fields each has (those these manifests may use).
fn check_foreign(value: &Value, api_version: &str, kind: &str, what: &str) -> Result<(), String> {
    let mut errors = Vec::new();
    let e = &mut errors;
    let spec = &value["spec"];
    let standard = ["apiVersion", "kind", "metadata", "spec"];
    if kind != "Kustomization"
        && let Err(err) = strict::<ObjectMeta>(&value["metadata"], "metadata")
    {
        e.push(err);
    }
    match (api_version, kind) {
        ("cert-manager.io/v1", "Issuer") => {
            only_keys(value, &standard, "", e);
            only_keys(spec, &["selfSigned", "ca"], "spec", e);
            if spec.get("ca").is_some() {
                only_keys(&spec["ca"], &["secretName"], "spec.ca", e);
            }
        }
        ("cert-manager.io/v1", "Certificate") => {
            only_keys(value, &standard, "", e);
            let fields = [
                "secretName",
                "commonName",
                "dnsNames",
                "isCA",
                "duration",
                "renewBefore",
                "privateKey",
                "usages",
                "issuerRef",
            ];
            only_keys(spec, &fields, "spec", e);
            only_keys(&spec["issuerRef"], &["name", "kind", "group"], "spec.issuerRef", e);
            if spec.get("privateKey").is_some() {
                only_keys(
                    &spec["privateKey"],
                    &["algorithm", "size", "encoding", "rotationPolicy"],
                    "spec.privateKey",
                    e,
                );
            }
            if spec["secretName"].as_str().is_none() {
                e.push("spec.secretName: required".into());
            }
        }
        ("kubeflow.org/v1", "PaddleJob") => {
            only_keys(value, &standard, "", e);
            only_keys(spec, &["runPolicy", "paddleReplicaSpecs", "elasticPolicy"], "spec", e);
            if spec.get("runPolicy").is_some() {
                let run_policy = [
                    "suspend",
                    "cleanPodPolicy",
                    "ttlSecondsAfterFinished",
                    "activeDeadlineSeconds",
                    "backoffLimit",
                    "schedulingPolicy",
                ];
                only_keys(&spec["runPolicy"], &run_policy, "spec.runPolicy", e);
            }
            only_keys(&spec["paddleReplicaSpecs"], &["Master", "Worker"], "spec.paddleReplicaSpecs", e);
            for (role, replica) in spec["paddleReplicaSpecs"].as_object().into_iter().flatten() {
                let path = format!("spec.paddleReplicaSpecs.{role}");
                only_keys(replica, &["replicas", "restartPolicy", "template"], &path, e);
                if let Err(err) = strict::<PodTemplateSpec>(&replica["template"], &format!("{path}.template")) {
                    e.push(err);
                }
            }
        }
        ("monitoring.coreos.com/v1", "ServiceMonitor") => {
            only_keys(value, &standard, "", e);
            only_keys(spec, &["selector", "endpoints", "namespaceSelector", "jobLabel"], "spec", e);
            if let Err(err) = strict::<LabelSelector>(&spec["selector"], "spec.selector") {
                e.push(err);
            }
            for (i, endpoint) in items(&spec["endpoints"], "spec.endpoints", e).iter().enumerate() {
                let fields = ["port", "path", "interval", "scrapeTimeout", "scheme"];
                only_keys(endpoint, &fields, &format!("spec.endpoints[{i}]"), e);
            }
        }
        ("monitoring.coreos.com/v1", "PrometheusRule") => {
            only_keys(value, &standard, "", e);
            only_keys(spec, &["groups"], "spec", e);
            for (i, group) in items(&spec["groups"], "spec.groups", e).iter().enumerate() {
                only_keys(group, &["name", "interval", "rules"], &format!("spec.groups[{i}]"), e);
                for (j, rule) in items(&group["rules"], &format!("spec.groups[{i}].rules"), e).iter().enumerate() {
                    let fields = ["alert", "record", "expr", "for", "labels", "annotations"];
                    only_keys(rule, &fields, &format!("spec.groups[{i}].rules[{j}]"), e);
                }
            }
        }
        ("kustomize.config.k8s.io/v1beta1", "Kustomization") => {
            only_keys(value, &["apiVersion", "kind", "resources", "images", "namespace", "labels"], "", e);
        }
        _ => return Err(format!("{what}: unknown kind {kind:?} of apiVersion {api_version:?}: add it to this test")),
    }
    if errors.is_empty() { Ok(()) } else { Err(format!("{what}: {}", errors.join("; "))) }
}

/// The objects of one kind, with where each comes from.
macro_rules! all {
    ($m:expr, $kind:ident) => {
        $m.objects
            .iter()
            .filter_map(|(s, o)| match o {
                Object::$kind(x) => Some((s, x)),
                _ => None,
            })
            .collect::<Vec<_>>()
    };
}

/// The object of one kind with this name.
macro_rules! named {
    ($m:expr, $kind:ident, $name:expr) => {{
        let name: &str = $name;
        all!($m, $kind)
            .into_iter()
            .map(|(_, x)| x)
            .find(|x| x.metadata.name.as_deref() == Some(name))
            .unwrap_or_else(|| panic!("no {} named {name:?} in deploy/kubernetes", stringify!($kind)))
    }};
}

/// Every document of every file, read.
struct Manifests {
    objects: Vec<(Source, Object)>,
}

impl Manifests {
    /// Every document, or every problem found.
    fn read() -> Result<Manifests, Vec<String>> {
        let mut objects = Vec::new();
        let mut errors = Vec::new();
        for file in yaml_files() {
            let values = match documents(&read_text(&file)) {
                Ok(values) => values,
                Err(e) => {
                    errors.push(format!("deploy/kubernetes/{file}: {e}"));
                    continue;
                }
            };
            if values.is_empty() {
                errors.push(format!("deploy/kubernetes/{file}: no document"));
            }
            for (i, value) in values.iter().enumerate() {
                let source = Source { file: file.clone(), document: i + 1 };
                match read_document(value, &source.to_string()) {
                    Ok(object) => objects.push((source, object)),
                    Err(e) => errors.push(e),
                }
            }
        }
        if errors.is_empty() { Ok(Manifests { objects }) } else { Err(errors) }
    }

    fn load() -> Manifests {
        Manifests::read().unwrap_or_else(|errors| panic!("the manifests do not read:\n{}", errors.join("\n")))
    }

    fn foreign(&self, kind: &str) -> Vec<(&Source, &Value)> {
        self.objects
            .iter()
            .filter_map(|(s, o)| match o {
                Object::Foreign(v) if v["kind"] == kind => Some((s, v)),
                _ => None,
            })
            .collect()
    }

    /// The settings file of the ConfigMap the Deployment mounts.
    fn settings(&self) -> Settings {
        let deployment = self.deployment();
        let (config_map, key) = config_source(&deployment).expect("the Deployment mounts its --config file");
        let map = named!(self, ConfigMap, &config_map);
        let text = map
            .data
            .as_ref()
            .and_then(|d| d.get(&key))
            .unwrap_or_else(|| panic!("ConfigMap {config_map} has no {key}"));
        Settings::parse(text).unwrap_or_else(|e| panic!("ConfigMap {config_map}, key {key}: {e}"))
    }

    fn deployment(&self) -> Deployment {
        let list = all!(self, Deployment);
        let [(_, d)] = list.as_slice() else { panic!("one Deployment expected, got {}", list.len()) };
        (*d).clone()
    }
}

// ---- helpers -----------------------------------------------------------------------

fn pod_spec(template: &PodTemplateSpec) -> &PodSpec {
    template.spec.as_ref().expect("a pod template has a spec")
}

fn controller_pod(d: &Deployment) -> &PodSpec {
    pod_spec(&d.spec.as_ref().expect("spec").template)
}

fn controller_container(d: &Deployment) -> &Container {
    let pod = controller_pod(d);
    let [c] = pod.containers.as_slice() else { panic!("the controller's pod has one container") };
    c
}

/// The command line, command and args together.
fn argv(c: &Container) -> Vec<String> {
    c.command.iter().flatten().chain(c.args.iter().flatten()).cloned().collect()
}

/// Where a file the container reads comes from: (volume kind, object name, key, optional).
fn file_source(pod: &PodSpec, c: &Container, path: &Path) -> Option<(&'static str, String, String, bool)> {
    for mount in c.volume_mounts.iter().flatten() {
        let mount_path = Path::new(&mount.mount_path);
        let key = match &mount.sub_path {
            Some(sub) if mount_path == path => sub.clone(),
            Some(_) => continue,
            None => match path.strip_prefix(mount_path) {
                Ok(rest) if rest.components().count() == 1 => rest.to_string_lossy().into_owned(),
                _ => continue,
            },
        };
        let volume = pod.volumes.iter().flatten().find(|v| v.name == mount.name)?;
        if let Some(cm) = &volume.config_map {
            return Some(("ConfigMap", cm.name.clone(), key, cm.optional.unwrap_or(false)));
        }
        if let Some(secret) = &volume.secret {
            return Some(("Secret", secret.secret_name.clone()?, key, secret.optional.unwrap_or(false)));
        }
        return None;
    }
    None
}

/// The ConfigMap and key of the `--config` file.
fn config_source(d: &Deployment) -> Option<(String, String)> {
    let c = controller_container(d);
    let args = argv(c);
    let path = args.iter().skip_while(|a| *a != "--config").nth(1)?;
    match file_source(controller_pod(d), c, Path::new(path))? {
        ("ConfigMap", name, key, _) => Some((name, key)),
        _ => None,
    }
}

fn port_of(listen: &str) -> i32 {
    listen.rsplit_once(':').and_then(|(_, p)| p.parse().ok()).unwrap_or_else(|| panic!("{listen:?} has no port"))
}

/// A port by number or by the container's name for it.
fn resolve_port(c: &Container, port: &IntOrString) -> i32 {
    match port {
        IntOrString::Int(n) => *n,
        IntOrString::String(name) => {
            c.ports
                .iter()
                .flatten()
                .find(|p| p.name.as_deref() == Some(name))
                .unwrap_or_else(|| panic!("the container has no port named {name:?}"))
                .container_port
        }
    }
}

fn selects(selector: &BTreeMap<String, String>, labels: &BTreeMap<String, String>) -> bool {
    !selector.is_empty() && selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

fn labels(meta: &Option<ObjectMeta>) -> BTreeMap<String, String> {
    meta.as_ref().and_then(|m| m.labels.clone()).unwrap_or_default()
}

/// JSON Patch `add` operations (what the webhook answers) applied to a document.
fn apply_patch(mut object: Value, ops: &[Value]) -> Value {
    for op in ops {
        assert_eq!(op["op"], "add", "{op}");
        let path = op["path"].as_str().unwrap();
        let (parent, key) = path.rsplit_once('/').unwrap();
        let key = key.replace("~1", "/").replace("~0", "~");
        let target = object.pointer_mut(parent).unwrap_or_else(|| panic!("{path}: no parent to add to"));
        target
            .as_object_mut()
            .unwrap_or_else(|| panic!("{path}: the parent is not a mapping"))
            .insert(key, op["value"].clone());
    }
    object
}

/// The one document of an example file.
fn example(file: &str) -> Value {
    let docs = documents(&read_text(file)).unwrap();
    let [doc] = docs.as_slice() else { panic!("{file}: one document expected") };
    doc.clone()
}

/// The article's PriorityClass, as published.
const ARTICLE_CLASS: &str = "apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata:
  name: high-priority
value: 1000000
globalDefault: false
description: 用于关键业务模型训练，数值越大优先级越高。
";

/// The article's Job, as published.
const ARTICLE_JOB: &str = r#"apiVersion: batch/v1
kind: Job
metadata:
  name: paddle-high-priority-training
spec:
  template:
    spec:
      priorityClassName: high-priority
      containers:
      - name: paddle-trainer
        image: registry.baidubce.com/paddlepaddle/paddle:2.6-gpu-cuda11.8-cudnn8
        command: ["python", "train_ctr.py"]
        resources:
          limits:
            nvidia.com/gpu: 1
      restartPolicy: Never
"#;

// ---- the reader itself -------------------------------------------------------------

#[test]
fn every_document_reads_as_its_kind_with_no_unknown_field() {
    let files = yaml_files();
    for expected in [
        "namespace.yaml",
        "serviceaccount.yaml",
        "rbac.yaml",
        "config.yaml",
        "deployment.yaml",
        "service.yaml",
        "webhook.yaml",
        "priorityclasses.yaml",
        "resourcequota-example.yaml",
        "image-prepull.yaml",
        "cert-manager.yaml",
        "kustomization.yaml",
        "examples/article-priorityclass.yaml",
        "examples/article-job.yaml",
        "examples/explicit-job.yaml",
        "examples/paddlejob.yaml",
    ] {
        assert!(files.iter().any(|f| f == expected), "deploy/kubernetes/{expected} is missing");
    }
    let m = Manifests::load();
    assert!(m.objects.len() >= 30, "only {} documents read", m.objects.len());
}

#[test]
fn the_reader_refuses_a_misspelt_field_and_an_unknown_kind() {
    let read = |yaml: &str| read_document(&documents(yaml).unwrap()[0], "test");
    let err = read("apiVersion: v1\nkind: Namespace\nmetadata: { name: x, lables: { a: b } }\n").unwrap_err();
    assert!(err.contains("metadata.lables"), "{err}");
    let err = read(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: { name: x }\nspec:\n  selector: {}\n  template:\n    spec:\n      \
         containers: [{ name: c, image: i, imagePullPolcy: Always }]\n",
    )
    .unwrap_err();
    assert!(err.contains("spec.template.spec.containers[0].imagePullPolcy"), "{err}");
    let err = read("apiVersion: v1\nkind: Frobnicator\nmetadata: { name: x }\n").unwrap_err();
    assert!(err.contains("unknown kind"), "{err}");
    let err = read("apiVersion: cert-manager.io/v1\nkind: Certificate\nmetadata: { name: x }\nspec: { secretName: s, dnsName: [a], issuerRef: { name: i } }\n").unwrap_err();
    assert!(err.contains("spec.dnsName"), "{err}");
    let err = documents("a: 1\na: 2\n").unwrap_err();
    assert!(err.to_lowercase().contains("duplicate"), "{err}");
}

// ---- the controller ----------------------------------------------------------------

#[test]
fn the_settings_file_parses_and_every_file_it_names_is_mounted() {
    let m = Manifests::load();
    let settings = m.settings();
    let d = m.deployment();
    let (pod, c) = (controller_pod(&d), controller_container(&d));
    assert_eq!(argv(c).get(1..3), Some(&["kube".to_owned(), "--config".to_owned()][..]), "{:?}", argv(c));

    // The API's tokens: a Secret the pod cannot start without (the controller refuses to
    // start without the file it names).
    let tokens = settings.api_tokens_file.as_ref().expect("the API is not open: api_tokens_file is set");
    let source = file_source(pod, c, tokens).unwrap_or_else(|| panic!("{} is not mounted", tokens.display()));
    assert_eq!(source, ("Secret", "fairway-api-tokens".to_owned(), "tokens".to_owned(), false));

    let webhook = settings.webhook.as_ref().expect("the webhook is served");
    match (&webhook.cert_file, &webhook.key_file) {
        (Some(cert), Some(key)) => {
            // cert-manager or by hand: the kubernetes.io/tls Secret's two keys.
            let cert = file_source(pod, c, cert).expect("cert_file is mounted");
            let key = file_source(pod, c, key).expect("key_file is mounted");
            assert_eq!((cert.0, cert.1.as_str(), cert.2.as_str()), ("Secret", "fairway-webhook-tls", "tls.crt"));
            assert_eq!((key.0, key.1.as_str(), key.2.as_str()), ("Secret", "fairway-webhook-tls", "tls.key"));
        }
        _ => {
            // The controller makes its own: its Secret is in its own namespace, for the
            // Service and the webhook configuration of these manifests.
            let managed = &webhook.managed_cert;
            let namespace = d.metadata.namespace.as_deref().unwrap();
            assert_eq!(managed.namespace, namespace);
            named!(m, Service, &managed.service_name);
            named!(m, MutatingWebhookConfiguration, &managed.webhook_configuration);
        }
    }
    // The certificate from cert-manager (or made by hand) is mounted whichever is used.
    let secrets = pod.volumes.iter().flatten().filter_map(|v| v.secret.as_ref());
    let tls = secrets.into_iter().find(|s| s.secret_name.as_deref() == Some("fairway-webhook-tls"));
    assert!(tls.is_some(), "the Deployment mounts the Secret fairway-webhook-tls");
    assert_eq!(settings.leader_election.namespace, d.metadata.namespace.clone().unwrap());
    assert!(settings.leader_election.enabled, "two replicas need leader election");
}

#[test]
fn the_deployment_runs_two_locked_down_replicas_with_probes_and_their_own_identity() {
    let m = Manifests::load();
    let settings = m.settings();
    let d = m.deployment();
    let spec = d.spec.as_ref().unwrap();
    assert_eq!(spec.replicas, Some(2));
    let (pod, c) = (controller_pod(&d), controller_container(&d));
    let pod_labels = labels(&spec.template.metadata);
    assert!(selects(spec.selector.match_labels.as_ref().unwrap(), &pod_labels));

    // Leader identity: the pod's name.
    let pod_name = c.env.iter().flatten().find(|e| e.name == "POD_NAME").expect("POD_NAME is set");
    let field = pod_name.value_from.as_ref().and_then(|v| v.field_ref.as_ref()).map(|f| f.field_path.as_str());
    assert_eq!(field, Some("metadata.name"));

    // Ports: each listen address of the settings has its named container port.
    let port = |name: &str| resolve_port(c, &IntOrString::String(name.into()));
    assert_eq!(port("api"), port_of(&settings.listen));
    assert_eq!(port("metrics"), port_of(settings.metrics_listen.as_deref().expect("metrics_listen is set")));
    assert_eq!(port("webhook"), port_of(&settings.webhook.as_ref().unwrap().listen));
    for (what, probe) in [("liveness", &c.liveness_probe), ("readiness", &c.readiness_probe)] {
        let get = probe.as_ref().and_then(|p| p.http_get.as_ref()).unwrap_or_else(|| panic!("a {what} probe"));
        assert_eq!(get.path.as_deref(), Some("/healthz"), "{what}");
        assert_eq!(resolve_port(c, &get.port), port("metrics"), "{what}: on the port without a token");
    }

    // Locked down.
    let sc = c.security_context.as_ref().expect("a container securityContext");
    assert_eq!(sc.allow_privilege_escalation, Some(false));
    assert_eq!(sc.read_only_root_filesystem, Some(true));
    assert_eq!(sc.capabilities.as_ref().and_then(|c| c.drop.clone()), Some(vec!["ALL".to_owned()]));
    let pod_sc = pod.security_context.as_ref().expect("a pod securityContext");
    assert_eq!(pod_sc.run_as_non_root, Some(true));
    assert!(pod_sc.run_as_user.is_some_and(|u| u > 0));

    // The two replicas on different nodes.
    let anti = pod.affinity.as_ref().and_then(|a| a.pod_anti_affinity.as_ref()).expect("pod anti-affinity");
    let terms: Vec<_> = anti
        .preferred_during_scheduling_ignored_during_execution
        .iter()
        .flatten()
        .map(|w| &w.pod_affinity_term)
        .chain(anti.required_during_scheduling_ignored_during_execution.iter().flatten())
        .collect();
    assert!(terms.iter().any(|t| t.topology_key == "kubernetes.io/hostname"
        && t.label_selector.as_ref().and_then(|s| s.match_labels.as_ref()).is_some_and(|s| selects(s, &pod_labels))));

    // Sized for the controller's figures: at most 500 MiB at 1,000 nodes and 10,000 queued
    // Jobs, with room for a relist.
    let resources = c.resources.as_ref().expect("resources");
    let mib = |map: &Option<BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>| {
        fairway_spec::quantity::memory_mib(&map.as_ref().and_then(|m| m.get("memory")).expect("memory").0).unwrap()
    };
    let (request, limit) = (mib(&resources.requests), mib(&resources.limits));
    assert!(request >= 500 && limit >= request, "memory request {request} MiB, limit {limit} MiB");
    for map in [&resources.requests, &resources.limits] {
        assert!(map.as_ref().is_some_and(|m| m.contains_key("cpu")), "cpu requests and limits");
    }

    // Its identity is the ServiceAccount the RBAC bindings name.
    let account = pod.service_account_name.as_deref().expect("serviceAccountName");
    let namespace = d.metadata.namespace.as_deref().unwrap();
    named!(m, ServiceAccount, account);
    let subject = Subject {
        kind: "ServiceAccount".into(),
        name: account.into(),
        namespace: Some(namespace.into()),
        ..Subject::default()
    };
    for (_, b) in all!(m, ClusterRoleBinding) {
        assert_eq!(b.subjects.as_deref(), Some(std::slice::from_ref(&subject)));
        named!(m, ClusterRole, &b.role_ref.name);
    }
    for (_, b) in all!(m, RoleBinding) {
        assert_eq!(b.subjects.as_deref(), Some(std::slice::from_ref(&subject)));
        named!(m, Role, &b.role_ref.name);
    }
    // Its priority class exists, and no Job uses a class this high.
    let class = named!(m, PriorityClass, pod.priority_class_name.as_deref().expect("priorityClassName"));
    assert!(class.value > 10_000_000 && class.global_default != Some(true));

    // At least one replica through voluntary disruptions.
    let pdb = all!(m, PodDisruptionBudget);
    let [(_, pdb)] = pdb.as_slice() else { panic!("one PodDisruptionBudget") };
    let pdb_spec = pdb.spec.as_ref().unwrap();
    assert_eq!(pdb_spec.min_available, Some(IntOrString::Int(1)));
    assert!(selects(pdb_spec.selector.as_ref().unwrap().match_labels.as_ref().unwrap(), &pod_labels));
}

#[test]
fn every_pod_of_the_controllers_namespace_meets_the_restricted_pod_security_level() {
    let m = Manifests::load();
    let restricted: BTreeSet<String> = all!(m, Namespace)
        .iter()
        .filter(|(_, n)| {
            n.metadata.labels.as_ref().and_then(|l| l.get("pod-security.kubernetes.io/enforce")).map(String::as_str)
                == Some("restricted")
        })
        .map(|(_, n)| n.metadata.name.clone().unwrap())
        .collect();
    assert!(restricted.contains("fairway-system"));
    let mut pods: Vec<(String, &PodSpec)> = Vec::new();
    for (s, d) in all!(m, Deployment) {
        if restricted.contains(d.metadata.namespace.as_deref().unwrap_or_default()) {
            pods.push((s.to_string(), pod_spec(&d.spec.as_ref().unwrap().template)));
        }
    }
    for (s, d) in all!(m, DaemonSet) {
        if restricted.contains(d.metadata.namespace.as_deref().unwrap_or_default()) {
            pods.push((s.to_string(), pod_spec(&d.spec.as_ref().unwrap().template)));
        }
    }
    assert!(pods.len() >= 2);
    for (source, pod) in pods {
        let psc = pod.security_context.as_ref();
        let seccomp = psc.and_then(|s| s.seccomp_profile.as_ref()).map(|p| p.type_.as_str());
        for c in pod.containers.iter().chain(pod.init_containers.iter().flatten()) {
            let csc = c.security_context.as_ref();
            let what = format!("{source}: container {}", c.name);
            assert_eq!(csc.and_then(|s| s.allow_privilege_escalation), Some(false), "{what}");
            assert_eq!(csc.and_then(|s| s.capabilities.as_ref()?.drop.clone()), Some(vec!["ALL".to_owned()]), "{what}");
            assert!(
                csc.and_then(|s| s.run_as_non_root).or(psc.and_then(|s| s.run_as_non_root)) == Some(true),
                "{what}"
            );
            let seccomp = csc.and_then(|s| s.seccomp_profile.as_ref()).map(|p| p.type_.as_str()).or(seccomp);
            assert!(matches!(seccomp, Some("RuntimeDefault" | "Localhost")), "{what}: seccompProfile");
            assert_ne!(csc.and_then(|s| s.privileged), Some(true), "{what}");
        }
    }
}

#[test]
fn the_services_expose_the_ports_the_settings_listen_on() {
    let m = Manifests::load();
    let settings = m.settings();
    let d = m.deployment();
    let c = controller_container(&d);
    let pod_labels = labels(&d.spec.as_ref().unwrap().template.metadata);
    let webhook = all!(m, MutatingWebhookConfiguration);
    let service_ref =
        webhook[0].1.webhooks.as_ref().unwrap()[0].client_config.service.clone().expect("called through a Service");
    let service_port = |service: &Service, name: &str| {
        let spec = service.spec.as_ref().unwrap();
        assert!(
            selects(spec.selector.as_ref().unwrap(), &pod_labels),
            "{:?} selects the controller's pods",
            service.metadata.name
        );
        let port = spec
            .ports
            .iter()
            .flatten()
            .find(|p| p.name.as_deref() == Some(name))
            .unwrap_or_else(|| panic!("port {name}"));
        (port.port, resolve_port(c, port.target_port.as_ref().unwrap_or(&IntOrString::Int(port.port))))
    };
    let webhook_service = named!(m, Service, &service_ref.name);
    assert_eq!(webhook_service.metadata.namespace, Some(service_ref.namespace.clone()));
    assert_eq!(
        service_port(webhook_service, "webhook"),
        (service_ref.port.unwrap_or(443), port_of(&settings.webhook.as_ref().unwrap().listen))
    );
    assert_eq!(service_ref.port, Some(443));
    let main = named!(m, Service, "fairway");
    assert_eq!(service_port(main, "metrics"), (8080, port_of(settings.metrics_listen.as_deref().unwrap())));
    assert_eq!(service_port(main, "api"), (7733, port_of(&settings.listen)));
}

#[test]
fn the_webhook_is_called_for_exactly_the_kinds_the_controller_mutates() {
    let m = Manifests::load();
    let settings = m.settings();
    let configs = all!(m, MutatingWebhookConfiguration);
    let [(_, config)] = configs.as_slice() else { panic!("one MutatingWebhookConfiguration") };
    let [hook] = config.webhooks.as_deref().unwrap() else { panic!("one webhook") };

    // What the API server sends: the resources of the two kinds `webhook.rs` mutates.
    let paddle = paddle_resource();
    let mut sent = BTreeSet::new();
    for rule in hook.rules.iter().flatten() {
        assert_eq!(rule.operations.as_deref(), Some(&["CREATE".to_owned()][..]), "only creations are mutated");
        assert_eq!(rule.scope.as_deref(), Some("Namespaced"));
        for group in rule.api_groups.iter().flatten() {
            for version in rule.api_versions.iter().flatten() {
                for resource in rule.resources.iter().flatten() {
                    sent.insert((group.clone(), version.clone(), resource.clone()));
                }
            }
        }
    }
    let handled = BTreeSet::from([
        (Job::GROUP.to_owned(), Job::VERSION.to_owned(), Job::URL_PATH_SEGMENT.to_owned()),
        (paddle.group.clone(), paddle.version.clone(), paddle.plural.clone()),
    ]);
    assert_eq!(sent, handled);

    // And the controller does mutate each of them: suspended, and its pods left to Fairway.
    let mutation =
        Mutation { scheduler_name: settings.scheduler_name.clone(), gpu_resource: settings.gpu_resource.clone() };
    let mut paddle_job = example("examples/paddlejob.yaml");
    paddle_job["spec"].as_object_mut().unwrap().remove("runPolicy");
    for (_, role) in paddle_job["spec"]["paddleReplicaSpecs"].as_object_mut().unwrap() {
        role["template"]["spec"].as_object_mut().unwrap().remove("schedulerName");
    }
    for object in [example("examples/article-job.yaml"), paddle_job] {
        let patched = apply_patch(object.clone(), &patch_for(&object, &mutation));
        let suspend = patched.pointer("/spec/suspend").or(patched.pointer("/spec/runPolicy/suspend"));
        assert_eq!(suspend, Some(&json!(true)), "{}", object["kind"]);
        assert!(patched.to_string().contains(&format!("\"schedulerName\":\"{}\"", settings.scheduler_name)));
    }

    // Called through the Service, at the path `webhook::router` serves.
    let service = hook.client_config.service.as_ref().expect("a Service, not a URL");
    assert_eq!(service.path.as_deref(), Some("/mutate"));
    assert!(hook.client_config.url.is_none());

    // For the namespaces the settings say, never for a Job that opts out, and the opt-out
    // label is the one `webhook.rs` honours too.
    let (key, value) = settings.managed_label().unwrap();
    let namespaces = hook.namespace_selector.as_ref().and_then(|s| s.match_labels.clone()).unwrap_or_default();
    assert_eq!(namespaces, BTreeMap::from([(key.to_owned(), value.to_owned())]));
    let objects = hook.object_selector.as_ref().and_then(|s| s.match_expressions.clone()).unwrap_or_default();
    let [opt_out] = objects.as_slice() else { panic!("one objectSelector expression") };
    assert_eq!((opt_out.key.as_str(), opt_out.operator.as_str()), ("fairway.dev/managed", "NotIn"));
    assert_eq!(opt_out.values.as_deref(), Some(&["false".to_owned()][..]));
    let mut opted_out = example("examples/article-job.yaml");
    opted_out["metadata"]["labels"] = json!({"fairway.dev/managed": "false"});
    assert!(patch_for(&opted_out, &mutation).is_empty());

    // The documented settings.
    assert_eq!(hook.failure_policy.as_deref(), Some("Fail"));
    assert_eq!(hook.side_effects, "None");
    assert_eq!(hook.admission_review_versions, ["v1"]);
    assert_eq!(hook.timeout_seconds, Some(5));
    assert_eq!(hook.reinvocation_policy.as_deref(), Some("Never"));
    assert!(hook.client_config.ca_bundle.is_none(), "the caBundle is filled in, never committed");
    let inject = config.metadata.annotations.as_ref().and_then(|a| a.get("cert-manager.io/inject-ca-from"));
    assert!(inject.is_some(), "cert-manager's CA injector is told which Certificate");
}

/// (API group, resource, verb, resource name): one permission. `None`: any name.
type Grant = (String, String, String, Option<String>);

fn grants(rules: &[PolicyRule]) -> BTreeSet<Grant> {
    let mut out = BTreeSet::new();
    for rule in rules {
        let names: Vec<Option<String>> = match &rule.resource_names {
            Some(names) if !names.is_empty() => names.iter().cloned().map(Some).collect(),
            _ => vec![None],
        };
        for group in rule.api_groups.iter().flatten() {
            for resource in rule.resources.iter().flatten() {
                for verb in &rule.verbs {
                    for name in &names {
                        out.insert((group.clone(), resource.clone(), verb.clone(), name.clone()));
                    }
                }
            }
        }
    }
    out
}

fn grant(group: &str, resource: &str, verb: &str, name: Option<&str>) -> Grant {
    (group.into(), resource.into(), verb.into(), name.map(str::to_owned))
}

/// What the controller calls cluster-wide, and the code that calls it
/// (crates/fairway-kube/src). The ClusterRole must grant exactly these.
const CLUSTER_CALLS: &[(&str, &str, &str)] = &[
    // controller.rs: one watcher per kind (a list, then a watch from its resourceVersion).
    ("", "nodes", "list"),
    ("", "nodes", "watch"),
    ("", "pods", "list"),
    ("", "pods", "watch"),
    ("", "namespaces", "list"),
    ("", "namespaces", "watch"),
    ("", "resourcequotas", "list"),
    ("", "resourcequotas", "watch"),
    ("scheduling.k8s.io", "priorityclasses", "list"),
    ("scheduling.k8s.io", "priorityclasses", "watch"),
    ("batch", "jobs", "list"),
    ("batch", "jobs", "watch"),
    ("kubeflow.org", "paddlejobs", "list"),
    ("kubeflow.org", "paddlejobs", "watch"),
    // executor.rs, bind: POST pods/{name}/binding; on a 409, GET of the pod.
    ("", "pods/binding", "create"),
    ("", "pods", "get"),
    // executor.rs, Admit, Suspend and Release: JSON merge patches of the workload.
    ("batch", "jobs", "patch"),
    ("kubeflow.org", "paddlejobs", "patch"),
    // executor.rs, the FairwayAdmitted condition: GET of the status subresource, then PUT.
    ("batch", "jobs/status", "get"),
    ("batch", "jobs/status", "update"),
    ("kubeflow.org", "paddlejobs/status", "get"),
    ("kubeflow.org", "paddlejobs/status", "update"),
    // executor.rs, Events on workloads: POST.
    ("", "events", "create"),
];

/// The settings the shipped file offers in comments (`#   key: value`, to turn on) are
/// valid settings too: uncommented, the file still parses, and turns them on.
#[test]
fn the_settings_offered_in_comments_parse_when_uncommented() {
    let m = Manifests::load();
    let deployment = m.deployment();
    let (config_map, key) = config_source(&deployment).expect("the Deployment mounts its --config file");
    let map = named!(m, ConfigMap, &config_map);
    let text = map.data.as_ref().and_then(|d| d.get(&key)).expect("the settings").clone();
    // Top-level keys only: those under `webhook:` are alternatives, not additions.
    let offered: Vec<&str> = text.lines().filter_map(|l| l.strip_prefix("#   ")).collect();
    assert!(!offered.is_empty(), "the file offers optional settings in comments");
    let uncommented = format!("{text}\n{}\n", offered.join("\n"));
    let settings = Settings::parse(&uncommented).unwrap_or_else(|e| panic!("{e}\n{uncommented}"));
    assert!(settings.fair_share.is_some_and(|f| !f.user_weights.is_empty()) && settings.reservations.is_some());
}

#[test]
fn the_rbac_rules_grant_exactly_what_the_controller_calls() {
    let m = Manifests::load();
    let settings = m.settings();
    let namespace = m.deployment().metadata.namespace.unwrap();
    let managed_cert = settings.webhook.as_ref().filter(|w| w.cert_file.is_none()).map(|w| w.managed_cert.clone());

    let mut cluster: BTreeSet<Grant> = CLUSTER_CALLS.iter().map(|(g, r, v)| grant(g, r, v, None)).collect();
    // certs.rs, only when the controller makes its own certificate: the caBundle of its
    // webhook configuration, read and then replaced (PUT).
    if let Some(m) = &managed_cert {
        for verb in ["get", "update"] {
            cluster.insert(grant(
                "admissionregistration.k8s.io",
                "mutatingwebhookconfigurations",
                verb,
                Some(&m.webhook_configuration),
            ));
        }
    }
    let roles = all!(m, ClusterRole);
    let [(_, role)] = roles.as_slice() else { panic!("one ClusterRole") };
    let granted = grants(role.rules.as_deref().unwrap_or_default());
    let missing: Vec<_> = cluster.difference(&granted).collect();
    let extra: Vec<_> = granted.difference(&cluster).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "ClusterRole: missing {missing:?}, more than the code calls {extra:?}"
    );

    // In the controller's namespace only. leader.rs: the Lease read (GET), made the first
    // time (POST: a create cannot be limited by name), renewed or taken over (PUT).
    let lease = settings.leader_election.lease_name.as_str();
    let mut local = BTreeSet::from([
        grant("coordination.k8s.io", "leases", "get", Some(lease)),
        grant("coordination.k8s.io", "leases", "update", Some(lease)),
        grant("coordination.k8s.io", "leases", "create", None),
    ]);
    // recent_usage.rs, with fair sharing on (a setting of config.yaml, so granted whether or
    // not the shipped settings turn it on): the ConfigMap of fair sharing's memory, read by a
    // new leader, replaced by the leader, made the first time.
    local.insert(grant("", "configmaps", "get", Some(fairway_kube::recent_usage::CONFIGMAP_NAME)));
    local.insert(grant("", "configmaps", "update", Some(fairway_kube::recent_usage::CONFIGMAP_NAME)));
    local.insert(grant("", "configmaps", "create", None));
    // certs.rs: the Secret of the certificate it makes, read by every replica, made once.
    if let Some(m) = &managed_cert {
        assert_eq!(m.namespace, namespace);
        local.insert(grant("", "secrets", "get", Some(&m.secret_name)));
        local.insert(grant("", "secrets", "create", None));
    }
    assert_eq!(settings.leader_election.namespace, namespace);
    let roles = all!(m, Role);
    let [(_, role)] = roles.as_slice() else { panic!("one Role") };
    assert_eq!(role.metadata.namespace.as_deref(), Some(namespace.as_str()));
    let granted = grants(role.rules.as_deref().unwrap_or_default());
    let missing: Vec<_> = local.difference(&granted).collect();
    let extra: Vec<_> = granted.difference(&local).collect();
    assert!(missing.is_empty() && extra.is_empty(), "Role: missing {missing:?}, more than the code calls {extra:?}");
}

#[test]
fn the_priority_classes_are_the_four_tiers_and_the_articles_and_none_is_the_default() {
    let m = Manifests::load();
    let classes: Vec<&PriorityClass> =
        all!(m, PriorityClass).into_iter().filter(|(s, _)| s.file == "priorityclasses.yaml").map(|(_, c)| c).collect();
    let names: BTreeMap<&str, i32> = classes.iter().map(|c| (c.metadata.name.as_deref().unwrap(), c.value)).collect();
    // The standalone server's built-in tiers, with the same values.
    let builtin = fairway_spec::PriorityClasses::builtin();
    for tier in ["critical", "high", "medium", "low"] {
        assert_eq!(names.get(tier), builtin.resolve(tier).map(|c| &c.value), "{tier}");
    }
    assert_eq!(names.get("high-priority"), Some(&1_000_000));
    assert_eq!(names.len(), 5);
    for (_, class) in all!(m, PriorityClass) {
        assert_eq!(
            class.global_default,
            Some(false),
            "{:?}: globalDefault would change every pod",
            class.metadata.name
        );
    }
    // The article's class, verbatim, in both places.
    assert!(read_text("priorityclasses.yaml").contains(ARTICLE_CLASS));
    assert_eq!(read_text("examples/article-priorityclass.yaml"), ARTICLE_CLASS);
}

#[test]
fn the_quota_example_caps_each_team_namespace_as_fairway_reads_it() {
    let m = Manifests::load();
    let settings = m.settings();
    let (key, value) = settings.managed_label().unwrap();
    let quotas: Vec<&ResourceQuota> = all!(m, ResourceQuota)
        .into_iter()
        .filter(|(s, _)| s.file == "resourcequota-example.yaml")
        .map(|(_, q)| q)
        .collect();
    let teams: BTreeSet<&str> = quotas.iter().map(|q| q.metadata.namespace.as_deref().unwrap()).collect();
    assert_eq!(teams, BTreeSet::from(["ads", "vision"]));
    for quota in quotas {
        let team = quota.metadata.namespace.as_deref().unwrap();
        let namespace = named!(m, Namespace, team);
        assert_eq!(
            namespace.metadata.labels.as_ref().and_then(|l| l.get(key)).map(String::as_str),
            Some(value),
            "{team} opts in"
        );
        let caps = fairway_kube::objects::quota_of(quota, &settings);
        assert!(
            caps.gpus_max.is_some() && caps.cpu_millis_max.is_some() && caps.memory_mib_max.is_some(),
            "{team}: {caps:?}"
        );
        assert!(
            quota
                .spec
                .as_ref()
                .and_then(|s| s.hard.as_ref())
                .is_some_and(|h| h.contains_key(&format!("requests.{}", settings.gpu_resource))),
            "{team}: a cap on requests.{}",
            settings.gpu_resource
        );
        // Its cpu and memory caps need defaults for Jobs that leave them out.
        let limits =
            all!(m, LimitRange).into_iter().map(|(_, l)| l).find(|l| l.metadata.namespace.as_deref() == Some(team));
        let defaults =
            limits.and_then(|l| l.spec.as_ref()?.limits.first()?.default_request.clone()).unwrap_or_default();
        assert!(defaults.contains_key("cpu") && defaults.contains_key("memory"), "{team}: LimitRange defaults");
    }
}

#[test]
fn the_prepull_daemonset_keeps_the_articles_image_on_gpu_nodes() {
    let m = Manifests::load();
    let settings = m.settings();
    let sets = all!(m, DaemonSet);
    let [(_, set)] = sets.as_slice() else { panic!("one DaemonSet") };
    let pod = pod_spec(&set.spec.as_ref().unwrap().template);
    let article = example("examples/article-job.yaml");
    let image = article.pointer("/spec/template/spec/containers/0/image").and_then(Value::as_str).unwrap();
    let init = pod.init_containers.as_deref().unwrap_or_default();
    assert!(init.iter().any(|c| c.image.as_deref() == Some(image)), "an init container pulls {image}");
    for c in init {
        assert_eq!(argv(c), ["true"], "{}: runs nothing and exits", c.name);
    }
    let [main] = pod.containers.as_slice() else { panic!("one container") };
    assert!(main.image.as_deref().unwrap().starts_with("registry.k8s.io/pause:"));
    for c in pod.containers.iter().chain(init) {
        let r = c.resources.as_ref().unwrap();
        assert!(r.requests.is_some() && r.limits.is_some(), "{}: small, bounded", c.name);
        assert!(!r.limits.as_ref().unwrap().contains_key(&settings.gpu_resource), "{}: asks for no GPU", c.name);
    }
    // GPU nodes only, tainted or not.
    let required = pod
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref()?.required_during_scheduling_ignored_during_execution.as_ref());
    assert!(required.is_some() || pod.node_selector.is_some(), "GPU nodes only");
    assert!(pod.tolerations.iter().flatten().any(|t| t.key.as_deref() == Some(settings.gpu_resource.as_str())));
}

#[test]
fn the_cert_manager_certificate_is_the_secret_and_the_name_the_webhook_uses() {
    let m = Manifests::load();
    let settings = m.settings();
    let issuers: BTreeMap<&str, &Value> =
        m.foreign("Issuer").into_iter().map(|(_, v)| (v["metadata"]["name"].as_str().unwrap(), v)).collect();
    let certificates = m.foreign("Certificate");
    let serving: Vec<&Value> =
        certificates.iter().map(|(_, c)| *c).filter(|c| c["spec"]["isCA"] != json!(true)).collect();
    let [serving] = serving.as_slice() else { panic!("one serving Certificate") };
    assert_eq!(serving["spec"]["secretName"], "fairway-webhook-tls", "the Secret the Deployment mounts");
    let config = all!(m, MutatingWebhookConfiguration);
    let service = config[0].1.webhooks.as_ref().unwrap()[0].client_config.service.clone().unwrap();
    let dns = format!("{}.{}.svc", service.name, service.namespace);
    assert!(serving["spec"]["dnsNames"].as_array().unwrap().contains(&json!(dns)), "the certificate is for {dns}");
    if let Some(w) = settings.webhook.as_ref().filter(|w| w.cert_file.is_none()) {
        assert_eq!(w.managed_cert.service_name, service.name, "the controller's own certificate is for the same name");
    }
    let inject = config[0].1.metadata.annotations.as_ref().unwrap()["cert-manager.io/inject-ca-from"].clone();
    assert_eq!(
        inject,
        format!(
            "{}/{}",
            serving["metadata"]["namespace"].as_str().unwrap(),
            serving["metadata"]["name"].as_str().unwrap()
        )
    );
    // Every issuer named exists; the CA issuer signs with the CA certificate's Secret.
    for (_, certificate) in &certificates {
        let issuer = certificate["spec"]["issuerRef"]["name"].as_str().unwrap();
        assert!(issuers.contains_key(issuer), "no Issuer {issuer}");
    }
    let ca_secret = &issuers[serving["spec"]["issuerRef"]["name"].as_str().unwrap()]["spec"]["ca"]["secretName"];
    assert!(
        certificates.iter().any(|(_, c)| c["spec"]["isCA"] == json!(true) && c["spec"]["secretName"] == *ca_secret)
    );
}

#[test]
fn the_kustomization_installs_the_controller_and_names_what_it_leaves_out() {
    let m = Manifests::load();
    let kustomizations = m.foreign("Kustomization");
    let [(_, k)] = kustomizations.as_slice() else { panic!("one kustomization.yaml") };
    let listed: BTreeSet<String> =
        k["resources"].as_array().unwrap().iter().map(|r| r.as_str().unwrap().to_owned()).collect();
    // Applied on their own: they need other projects' CRDs, or are examples to adapt.
    let optional =
        BTreeSet::from(["cert-manager.yaml", "monitoring.yaml", "image-prepull.yaml", "resourcequota-example.yaml"]);
    let text = read_text("kustomization.yaml");
    for file in yaml_files() {
        let top = !file.contains('/') && file != "kustomization.yaml";
        if top && !optional.contains(file.as_str()) {
            assert!(listed.contains(&file), "{file} is not in kustomization.yaml");
        }
        if optional.contains(file.as_str()) {
            assert!(!listed.contains(&file) && text.contains(&file), "{file}: said to be applied on its own");
        }
    }
    for file in &listed {
        assert!(deploy_dir().join(file).is_file(), "kustomization.yaml lists {file}, which does not exist");
    }
}

#[test]
fn the_alerts_use_metrics_the_controller_exports_and_scrape_its_service() {
    let m = Manifests::load();
    let metrics = fairway_kube::http::KubeMetrics::new();
    // A family without series is not written out: give each one a series.
    metrics.server.job_state("medium", fairway_server::api::JobState::Pending, 1);
    metrics.server.set_queues([fairway_server::metrics::Queued {
        tier: "medium",
        tenant: "ads",
        waiting_ms: 1,
        reason: "no_fit",
    }]);
    let capped = fairway_server::api::QuotaView {
        kind: "project".into(),
        account: "ads".into(),
        gpus_max: Some(8),
        cpu_millis_max: None,
        memory_mib_max: None,
        gpus_used: 8,
        gpu_milli_used: 8000,
        cpu_millis_used: 0,
        memory_mib_used: 0,
        fair_share: Some(0.5),
        fair_share_weight: Some(1),
    };
    metrics.server.set_quotas(&fairway_server::api::QuotaList { quotas: vec![capped] });
    // The per-job series are the server's (opt-in), under the same registry.
    let job = fairway_server::metrics::PendingJobLabels {
        tier: "medium".into(),
        tenant: "ads".into(),
        job_name: "ctr-model".into(),
        job_id: "7".into(),
    };
    metrics.server.set_pending_jobs([(job, 1_000)]);
    metrics.server.set_queue_gpus([("medium", "ads", 8)]);
    let exported = metrics.encode();
    let mut used = 0;
    // The rules for any Prometheus (deploy/prometheus), and the cluster's PrometheusRule: an
    // alert of the same name on Fairway's metrics reads the same expression in both (how a
    // target is found, `up`, differs).
    let text = std::fs::read_to_string(repo().join("deploy/prometheus/fairway-rules.yaml")).unwrap();
    let [plain] = documents(&text).unwrap().try_into().expect("one document");
    let plain_groups = plain["groups"].as_array().unwrap().clone();
    let exprs: BTreeMap<String, String> = plain_groups
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap().iter())
        .map(|a| (a["alert"].as_str().unwrap().to_owned(), a["expr"].as_str().unwrap().to_owned()))
        .filter(|(_, expr)| expr.contains("fairway_"))
        .collect();
    assert!(exprs.contains_key("FairwayMediumJobWaiting"), "the article's alert");
    let cluster_groups = m.foreign("PrometheusRule").into_iter().flat_map(|(_, rule)| {
        let groups = rule["spec"]["groups"].as_array().unwrap().clone();
        for alert in groups.iter().flat_map(|g| g["rules"].as_array().unwrap().iter()) {
            if let Some(expr) = exprs.get(alert["alert"].as_str().unwrap()) {
                assert_eq!(alert["expr"].as_str(), Some(expr.as_str()), "{}", alert["alert"]);
            }
        }
        groups
    });
    let all_groups: Vec<serde_json::Value> = plain_groups.iter().cloned().chain(cluster_groups).collect();
    assert!(all_groups.len() >= 2, "the plain rules and the PrometheusRule");
    for group in &all_groups {
        {
            for alert in group["rules"].as_array().unwrap() {
                let expr = alert["expr"].as_str().unwrap();
                for word in
                    expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).filter(|w| w.starts_with("fairway_"))
                {
                    assert!(
                        exported.contains(&format!("{word} ")),
                        "{}: {word} is not a metric the controller exports",
                        alert["alert"]
                    );
                    used += 1;
                }
            }
        }
    }
    assert!(used >= 2);
    let monitors = m.foreign("ServiceMonitor");
    let [(_, monitor)] = monitors.as_slice() else { panic!("one ServiceMonitor") };
    let selector: BTreeMap<String, String> =
        serde_json::from_value(monitor["spec"]["selector"]["matchLabels"].clone()).unwrap();
    let scraped: Vec<&Service> = all!(m, Service)
        .into_iter()
        .map(|(_, s)| s)
        .filter(|s| selects(&selector, s.metadata.labels.as_ref().unwrap()))
        .collect();
    let [service] = scraped.as_slice() else { panic!("the ServiceMonitor selects one Service, got {}", scraped.len()) };
    let port = monitor["spec"]["endpoints"][0]["port"].as_str().unwrap();
    let ports = service.spec.as_ref().unwrap().ports.as_ref().unwrap();
    assert!(ports.iter().any(|p| p.name.as_deref() == Some(port) && p.port == 8080), "it scrapes the metrics port");
}

#[test]
fn the_image_is_built_for_the_user_and_path_the_deployment_runs() {
    let m = Manifests::load();
    let d = m.deployment();
    let dockerfile = read_text("Dockerfile");
    assert!(dockerfile.contains("cargo build --release --locked -p fairway-cli"));
    let user = dockerfile.lines().find_map(|l| l.strip_prefix("USER ")).expect("a USER line");
    let uid: i64 = user.split(':').next().unwrap().trim().parse().expect("a numeric USER");
    assert_eq!(controller_pod(&d).security_context.as_ref().unwrap().run_as_user, Some(uid));
    let binary = &argv(controller_container(&d))[0];
    assert!(dockerfile.contains(&format!("COPY --from=build /out/fairway {binary}")), "{binary}");
    let ignore = std::fs::read_to_string(deploy_dir().join("Dockerfile.dockerignore")).unwrap();
    assert!(ignore.lines().any(|l| l.trim() == "target/"), "the build context leaves target/ out");
}

// ---- the examples, through the engine ------------------------------------------------

/// An 8-GPU node, and the engine with every class, namespace and quota of the manifests.
fn engine_with(m: &Manifests, workload: Workload) -> Vec<Action> {
    let settings = m.settings();
    let mut engine = Engine::new(settings);
    let now = 1_800_000_000_000;
    for stream in Stream::ALL {
        engine.apply(Input::Listing(stream), now);
    }
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": "gpu-1", "labels": {"nvidia.com/gpu.product": "A100"}},
        "status": {
            "allocatable": {"nvidia.com/gpu": "8", "cpu": "128", "memory": "1Ti"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }))
    .unwrap();
    engine.apply(Input::Node(Change::Applied(node)), now);
    for (_, class) in all!(m, PriorityClass) {
        engine.apply(Input::Class(Change::Applied(class.clone())), now);
    }
    for (_, namespace) in all!(m, Namespace) {
        engine.apply(Input::Namespace(Change::Applied(namespace.clone())), now);
    }
    for (_, quota) in all!(m, ResourceQuota) {
        let mut quota = quota.clone();
        quota.metadata.uid = Some(format!("uid-quota-{}", quota.metadata.namespace.clone().unwrap()));
        engine.apply(Input::Quota(Change::Applied(quota)), now);
    }
    engine.apply(Input::Workload(Change::Applied(workload)), now);
    for stream in Stream::ALL {
        engine.apply(Input::Listed(stream), now);
    }
    engine.cycle(now + 1);
    engine.publish_status(now + 1);
    engine.take_actions()
}

/// What the API server adds to an object it stores.
fn stored(mut object: Value, namespace: &str) -> Value {
    let name = object["metadata"]["name"].as_str().unwrap().to_owned();
    let meta = object["metadata"].as_object_mut().unwrap();
    meta.insert("namespace".into(), json!(namespace));
    meta.insert("uid".into(), json!(format!("uid-{name}")));
    meta.insert("creationTimestamp".into(), json!("2027-01-15T08:00:00Z"));
    object
}

fn admitted_replicas(actions: &[Action], name: &str) -> Option<usize> {
    actions.iter().find_map(|a| match a {
        Action::Admit { target, nodes, .. } if target.name == name => Some(nodes.len()),
        _ => None,
    })
}

#[test]
fn the_examples_are_admitted_by_the_engine() {
    let m = Manifests::load();
    let settings = m.settings();
    let mutation =
        Mutation { scheduler_name: settings.scheduler_name.clone(), gpu_resource: settings.gpu_resource.clone() };

    // The article's Job as written is not Fairway's: the webhook makes it so.
    let article = stored(example("examples/article-job.yaml"), "ads");
    let plain: Job = serde_json::from_value(article.clone()).unwrap();
    let plain = Workload::from_job(&plain).unwrap();
    assert_eq!((plain.suspended, plain.scheduler_name.as_deref()), (false, None));
    let job: Job = serde_json::from_value(apply_patch(article.clone(), &patch_for(&article, &mutation))).unwrap();
    let actions = engine_with(&m, Workload::from_job(&job).unwrap());
    assert_eq!(admitted_replicas(&actions, "paddle-high-priority-training"), Some(1), "{actions:?}");

    // The Job that opts in by itself.
    let explicit: Job = serde_json::from_value(stored(example("examples/explicit-job.yaml"), "research")).unwrap();
    let workload = Workload::from_job(&explicit).unwrap();
    assert!(workload.suspended && workload.scheduler_name.as_deref() == Some(settings.scheduler_name.as_str()));
    let actions = engine_with(&m, workload);
    assert_eq!(admitted_replicas(&actions, "nightly-retrain"), Some(2), "{actions:?}");

    // The same Job in a namespace whose quota it exceeds waits, and says why, as the guide
    // quotes it.
    let over: Job = serde_json::from_value(stored(example("examples/explicit-job.yaml"), "ads")).unwrap();
    let actions = engine_with(&m, Workload::from_job(&over).unwrap());
    assert_eq!(admitted_replicas(&actions, "nightly-retrain"), None);
    let mut engine_status = Vec::new();
    for a in &actions {
        if let Action::Condition { reason, message, .. } = a {
            engine_status.push((reason.clone(), message.clone()));
        }
    }
    let guide = std::fs::read_to_string(repo().join("docs/kubernetes.md")).unwrap();
    let over_quota = engine_status.iter().find(|(reason, _)| reason == "OverQuota");
    let (_, message) = over_quota.unwrap_or_else(|| panic!("no OverQuota condition: {engine_status:?}"));
    // The reason, and after it the estimate the guide quotes on its own.
    let (reason, estimate) = message.split_once("; position ").unwrap_or_else(|| panic!("no estimate: {message}"));
    assert!(guide.contains(reason), "the guide does not quote the OverQuota reason: {reason}");
    let estimate = format!("; position {estimate}");
    assert!(guide.contains(&estimate), "the guide does not quote the estimate: {estimate}");

    // The PaddleJob: one gang of its replicas.
    let paddle: kube::api::DynamicObject =
        serde_json::from_value(stored(example("examples/paddlejob.yaml"), "ads")).unwrap();
    let workload = Workload::from_paddle(&paddle).unwrap();
    assert!(workload.suspended && workload.scheduler_name.as_deref() == Some(settings.scheduler_name.as_str()));
    let actions = engine_with(&m, workload);
    assert_eq!(admitted_replicas(&actions, "ctr-collective"), Some(2), "{actions:?}");
}

// ---- the guide ---------------------------------------------------------------------

#[test]
fn the_articles_manifests_are_verbatim_in_the_examples_and_the_guide() {
    assert_eq!(read_text("examples/article-job.yaml"), ARTICLE_JOB);
    assert_eq!(read_text("examples/article-priorityclass.yaml"), ARTICLE_CLASS);
    let guide = std::fs::read_to_string(repo().join("docs/kubernetes.md")).unwrap();
    assert!(guide.contains(ARTICLE_JOB), "docs/kubernetes.md shows the article's Job verbatim");
    assert!(guide.contains(ARTICLE_CLASS), "docs/kubernetes.md shows the article's PriorityClass verbatim");
}

#[test]
fn the_guide_names_every_manifest_and_every_setting() {
    let guide = std::fs::read_to_string(repo().join("docs/kubernetes.md")).unwrap();
    for file in yaml_files().into_iter().chain(["Dockerfile".to_owned()]) {
        let name = file.rsplit('/').next().unwrap();
        assert!(guide.contains(name), "docs/kubernetes.md does not mention {file}");
    }
    // The settings' keys, as the parser knows them: an unknown key's error lists them.
    let sections = [
        ("", "x: 1\n"),
        ("tls.", "tls: { x: 1 }\n"),
        ("webhook.", "webhook: { listen: \"0.0.0.0:1\", x: 1 }\n"),
        ("webhook.managed_cert.", "webhook: { listen: \"0.0.0.0:1\", managed_cert: { x: 1 } }\n"),
        ("leader_election.", "leader_election: { x: 1 }\n"),
    ];
    for (section, text) in sections {
        let err = Settings::parse(text).unwrap_err();
        let listed = err.split("expected one of ").nth(1).and_then(|rest| rest.lines().next());
        let keys: Vec<&str> = listed.unwrap_or_else(|| panic!("{section}: no key list in {err}")).split(", ").collect();
        assert!(keys.len() >= 2, "{section}: {keys:?}");
        for key in keys {
            let key = format!("{section}{}", key.trim_matches('`'));
            let documented = guide.contains(&format!("`{key}`")) || guide.contains(&format!("`{key}."));
            assert!(documented, "docs/kubernetes.md does not document the setting `{key}`");
        }
    }
}

/// The walk-through's objects as the watches would report them, step by step.
struct Walk {
    engine: Engine,
    now: u64,
}

impl Walk {
    fn feed(&mut self, input: Input) {
        self.engine.apply(input, self.now);
    }

    fn cycle(&mut self) -> Vec<Action> {
        self.now += 1000;
        self.engine.cycle(self.now);
        self.engine.publish_status(self.now);
        self.engine.take_actions()
    }

    fn job(&mut self, object: &Value) {
        let job: Job = serde_json::from_value(object.clone()).unwrap();
        self.feed(Input::Workload(Change::Applied(Workload::from_job(&job).unwrap())));
    }
}

fn nightly_pod(name: &str, node: Option<&str>) -> k8s_openapi::api::core::v1::Pod {
    let mut pod = json!({
        "metadata": {
            "name": name, "namespace": "research", "uid": format!("pod-{name}"),
            "ownerReferences": [{
                "apiVersion": "batch/v1", "kind": "Job", "name": "nightly-retrain",
                "uid": "uid-nightly-retrain", "controller": true,
            }],
        },
        "spec": {
            "schedulerName": "fairway",
            "containers": [{"name": "trainer", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "4"}}}],
        },
        "status": {"phase": "Running"},
    });
    if let Some(node) = node {
        pod["spec"]["nodeName"] = json!(node);
    }
    serde_json::from_value(pod).unwrap()
}

/// Fairway's Events in a list of actions: (workload, reason, message).
fn events(actions: &[Action]) -> Vec<(String, String, String)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Event { target, reason, message, .. } => {
                Some((target.name.clone(), reason.clone(), message.clone()))
            }
            _ => None,
        })
        .collect()
}

#[test]
fn the_guides_walk_through_is_what_the_engine_says() {
    let m = Manifests::load();
    let settings = m.settings();
    let mutation =
        Mutation { scheduler_name: settings.scheduler_name.clone(), gpu_resource: settings.gpu_resource.clone() };
    let guide = std::fs::read_to_string(repo().join("docs/kubernetes.md")).unwrap();
    let mut said = Vec::new();
    let mut w = Walk { engine: Engine::new(settings), now: 1_800_000_000_000 };
    for stream in Stream::ALL {
        w.feed(Input::Listing(stream));
    }
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": "gpu-node-1", "labels": {"nvidia.com/gpu.product": "A100"}},
        "status": {
            "allocatable": {"nvidia.com/gpu": "8", "cpu": "128", "memory": "1Ti"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }))
    .unwrap();
    w.feed(Input::Node(Change::Applied(node)));
    for (_, class) in all!(m, PriorityClass) {
        w.feed(Input::Class(Change::Applied(class.clone())));
    }
    for (_, quota) in all!(m, ResourceQuota) {
        w.feed(Input::Quota(Change::Applied(quota.clone())));
    }
    for stream in Stream::ALL {
        w.feed(Input::Listed(stream));
    }

    // 1. The nightly training is admitted on both halves of the node; its pods are bound.
    let nightly = stored(example("examples/explicit-job.yaml"), "research");
    w.job(&nightly);
    let actions = w.cycle();
    let nodes = vec!["gpu-node-1".to_owned(); 2];
    let at_ms = actions
        .iter()
        .find_map(|a| match a {
            Action::Admit { target, nodes: n, at_ms } if target.name == "nightly-retrain" && *n == nodes => {
                Some(*at_ms)
            }
            _ => None,
        })
        .expect("nightly-retrain admitted on gpu-node-1");
    let admission = serde_json::to_string(&fairway_kube::workload::Admission { nodes, at_ms: Some(at_ms) }).unwrap();
    assert!(
        guide.contains(&format!("`fairway.dev/admission: {admission}`")),
        "the guide shows the annotation {admission}"
    );
    said.extend(events(&actions));
    let mut admitted = nightly.clone();
    admitted["spec"]["suspend"] = json!(false);
    admitted["metadata"]["annotations"]["fairway.dev/admission"] = json!(admission);
    w.job(&admitted);
    for pod in ["nightly-retrain-a", "nightly-retrain-b"] {
        w.feed(Input::Pod(Change::Applied(nightly_pod(pod, None))));
    }
    let binds = w.cycle().iter().filter(|a| matches!(a, Action::Bind { node, .. } if node == "gpu-node-1")).count();
    assert_eq!(binds, 2);
    for pod in ["nightly-retrain-a", "nightly-retrain-b"] {
        w.feed(Input::Pod(Change::Applied(nightly_pod(pod, Some("gpu-node-1")))));
    }
    w.cycle();

    // 2. The article's Job, through the webhook: the nightly training is preempted, with
    // its 60 s of grace, and its GPUs are held.
    let article = stored(example("examples/article-job.yaml"), "ads");
    w.job(&apply_patch(article.clone(), &patch_for(&article, &mutation)));
    let start = w.now;
    let actions = w.cycle();
    let preemption = actions.iter().find_map(|a| match a {
        Action::Suspend { target, preemption: Some(p) } if target.name == "nightly-retrain" => Some(p.clone()),
        _ => None,
    });
    let fairway_kube::workload::Preemption { by, deadline_ms: deadline, hold, history } =
        preemption.expect("the nightly training is suspended for the article's Job");
    assert_eq!(by, "ads/paddle-high-priority-training");
    assert!(
        history.len() == 1 && (start..=w.now).contains(&history[0]),
        "the preemption is recorded for rule 1's hourly cap: {history:?}"
    );
    assert_eq!(hold, ["gpu-node-1"], "where the preemptor's GPU is held");
    let recorded = serde_json::to_string(&hold).unwrap();
    assert!(guide.contains(&format!("`fairway.dev/preemption-hold: {recorded}`")), "the guide shows {recorded}");
    assert!(deadline >= start + 60_000 && deadline <= w.now + 60_000, "60 s of grace");
    assert!(!actions.iter().any(|a| matches!(a, Action::Admit { .. })), "held, not admitted, while the victim stops");
    said.extend(events(&actions));

    // 3-4. The Job controller deletes the victim's pods; once gone, the article's Job runs
    // and the victim waits again.
    let mut suspended = admitted.clone();
    suspended["spec"]["suspend"] = json!(true);
    w.job(&suspended);
    assert!(events(&w.cycle()).is_empty());
    for pod in ["nightly-retrain-a", "nightly-retrain-b"] {
        w.feed(Input::Pod(Change::Deleted(nightly_pod(pod, Some("gpu-node-1")))));
    }
    let actions = w.cycle();
    assert!(actions.iter().any(|a| matches!(a, Action::Release { target } if target.name == "nightly-retrain")));
    assert_eq!(admitted_replicas(&actions, "paddle-high-priority-training"), Some(1));
    said.extend(events(&actions));

    // Every Event Fairway wrote is in the guide, as it wrote it.
    let reasons: Vec<(&str, &str)> = said.iter().map(|(n, r, _)| (n.as_str(), r.as_str())).collect();
    assert_eq!(
        reasons,
        [
            ("nightly-retrain", "Admitted"),
            ("nightly-retrain", "Preempted"),
            ("paddle-high-priority-training", "Preempting"),
            ("paddle-high-priority-training", "Pending"),
            ("nightly-retrain", "Pending"),
            ("paddle-high-priority-training", "Admitted"),
        ]
    );
    for (workload, reason, message) in &said {
        assert!(guide.contains(message.as_str()), "the guide does not show {workload}'s {reason} Event: {message}");
    }
}
