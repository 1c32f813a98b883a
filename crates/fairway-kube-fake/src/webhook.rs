//! Mutating admission webhooks: which webhooks a write matches (rules on operation, group,
//! version, resource and scope; `namespaceSelector`; `objectSelector`), and calling them
//! with an `admission.k8s.io/v1` AdmissionReview over HTTPS trusting only the webhook's
//! `caBundle`, applying the JSONPatch they return, refusing on `allowed: false`, and
//! following `failurePolicy` when a call fails. Configurations are called in name order,
//! their webhooks in list order, each once (no reinvocation). `matchConditions` are not
//! evaluated (a webhook with them is called as if they held).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use base64::Engine;
use serde_json::{Value, json};

use crate::Shared;
use crate::errors::ApiError;
use crate::kinds::Kind;
use crate::select::LabelSelector;
use crate::store::{Key, World};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Op {
    Create,
    Update,
}

impl Op {
    fn wire(self) -> &'static str {
        match self {
            Op::Create => "CREATE",
            Op::Update => "UPDATE",
        }
    }
}

#[derive(Clone, Debug)]
struct Rule {
    operations: Vec<String>,
    groups: Vec<String>,
    versions: Vec<String>,
    resources: Vec<String>,
    scope: String,
}

/// One webhook of a MutatingWebhookConfiguration, compiled.
#[derive(Clone, Debug)]
pub(crate) struct Hook {
    pub name: String,
    rules: Vec<Rule>,
    namespace_selector: Result<LabelSelector, String>,
    object_selector: Result<LabelSelector, String>,
    fail_closed: bool,
    timeout: Duration,
    url: Option<String>,
    service: Option<ServiceRef>,
    ca_bundle: Option<Vec<u8>>,
}

/// Webhook clients are kept by caBundle and Service route (host name → address).
pub(crate) type ClientKey = (Vec<u8>, Option<(String, SocketAddr)>);

/// `clientConfig.service`.
#[derive(Clone, Debug)]
struct ServiceRef {
    namespace: String,
    name: String,
    path: String,
}

fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).map(str::to_owned).collect()
}

/// The webhooks of the configurations, in the order they are called.
pub(crate) fn compile(configs: &[Value]) -> Vec<Hook> {
    let mut hooks = Vec::new();
    for config in configs {
        for w in config.get("webhooks").and_then(Value::as_array).into_iter().flatten() {
            let rules = w
                .get("rules")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(|r| Rule {
                    operations: strings(r.get("operations")),
                    groups: strings(r.get("apiGroups")),
                    versions: strings(r.get("apiVersions")),
                    resources: strings(r.get("resources")),
                    scope: r.get("scope").and_then(Value::as_str).unwrap_or("*").to_owned(),
                })
                .collect();
            let client = w.get("clientConfig");
            let ca_bundle = client
                .and_then(|c| c.get("caBundle"))
                .and_then(Value::as_str)
                .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok());
            let service = client.and_then(|c| c.get("service")).map(|s| {
                let text = |f: &str| s.get(f).and_then(Value::as_str).unwrap_or_default().to_owned();
                ServiceRef { namespace: text("namespace"), name: text("name"), path: text("path") }
            });
            hooks.push(Hook {
                name: w.get("name").and_then(Value::as_str).unwrap_or_default().to_owned(),
                rules,
                namespace_selector: LabelSelector::from_object(w.get("namespaceSelector")),
                object_selector: LabelSelector::from_object(w.get("objectSelector")),
                fail_closed: w.get("failurePolicy").and_then(Value::as_str) != Some("Ignore"),
                timeout: Duration::from_secs(
                    w.get("timeoutSeconds").and_then(Value::as_u64).unwrap_or(10).clamp(1, 30),
                ),
                url: client.and_then(|c| c.get("url")).and_then(Value::as_str).map(str::to_owned),
                service,
                ca_bundle,
            });
        }
    }
    hooks
}

fn listed(list: &[String], value: &str) -> bool {
    list.iter().any(|x| x == "*" || x == value)
}

fn resource_matches(list: &[String], plural: &str, sub: Option<&str>) -> bool {
    list.iter().any(|r| {
        let (rp, rs) = r.split_once('/').map_or((r.as_str(), None), |(p, s)| (p, Some(s)));
        let plural_ok = rp == "*" || rp == plural;
        let sub_ok = match (rs, sub) {
            (None, None) => true,
            (Some("*"), _) => true,
            (Some(a), Some(b)) => a == b,
            _ => false,
        };
        plural_ok && sub_ok
    })
}

/// A write, as webhooks see it.
pub(crate) struct Write<'a> {
    pub kind: Kind,
    pub sub: Option<&'a str>,
    pub ns: &'a str,
    pub old: Option<&'a Value>,
    pub op: Op,
}

/// The webhooks a write matches.
pub(crate) fn matching(world: &World, hooks: &[Hook], write: &Write<'_>, object: &Value) -> Vec<Hook> {
    let Write { kind, sub, ns, old, op } = *write;
    let info = kind.info();
    let ns_labels = if kind == Kind::Namespace {
        object.pointer("/metadata/labels").and_then(Value::as_object).cloned()
    } else if info.namespaced {
        world
            .get(Kind::Namespace, &Key::new("", ns))
            .and_then(|n| n.value.pointer("/metadata/labels"))
            .and_then(Value::as_object)
            .cloned()
    } else {
        None
    };
    hooks
        .iter()
        .filter(|h| {
            h.rules.iter().any(|r| {
                listed(&r.operations, op.wire())
                    && listed(&r.groups, info.group)
                    && listed(&r.versions, info.version)
                    && resource_matches(&r.resources, info.plural, sub)
                    && match r.scope.as_str() {
                        "Namespaced" => info.namespaced,
                        "Cluster" => !info.namespaced,
                        _ => true,
                    }
            })
        })
        .filter(|h| match &h.namespace_selector {
            // Cluster-scoped objects (other than namespaces) are not selected by namespace.
            Ok(s) => (!info.namespaced && kind != Kind::Namespace) || s.matches(ns_labels.as_ref()),
            Err(_) => true,
        })
        .filter(|h| match &h.object_selector {
            Ok(s) => s.matches_object(object) || old.is_some_and(|o| s.matches_object(o)),
            Err(_) => true,
        })
        .cloned()
        .collect()
}

/// Calls the webhooks in turn; returns the object as they left it.
pub(crate) async fn admit(
    shared: &Arc<Shared>,
    hooks: &[Hook],
    write: &Write<'_>,
    mut object: Value,
) -> Result<Value, ApiError> {
    let Write { kind, sub, ns, old, op } = *write;
    let info = kind.info();
    for hook in hooks {
        let uid = format!("00000000-0000-4000-9000-{:012x}", shared.review_seq.fetch_add(1, Ordering::Relaxed) + 1);
        let gvk = json!({"group": info.group, "version": info.version, "kind": info.kind});
        let gvr = json!({"group": info.group, "version": info.version, "resource": info.plural});
        let mut request = json!({
            "uid": uid,
            "kind": gvk, "resource": gvr, "requestKind": gvk, "requestResource": gvr,
            "name": object.pointer("/metadata/name").cloned().unwrap_or(json!("")),
            "operation": op.wire(),
            "userInfo": {"username": "system:admin", "groups": ["system:masters", "system:authenticated"]},
            "object": object,
            "oldObject": old.cloned().unwrap_or(Value::Null),
            "dryRun": false,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": if op == Op::Create { "CreateOptions" } else { "UpdateOptions" }},
        });
        if info.namespaced {
            request["namespace"] = json!(ns);
        }
        if let Some(sub) = sub {
            request["subResource"] = json!(sub);
        }
        let review = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request});
        let failure = |why: String| ApiError::internal(format!("failed calling webhook \"{}\": {why}", hook.name));
        let response = match call(shared, hook, &review).await {
            Ok(r) => r,
            Err(why) if hook.fail_closed => return Err(failure(why)),
            Err(why) => {
                tracing::debug!(webhook = %hook.name, "webhook failed and is ignored: {why}");
                continue;
            }
        };
        if response.get("uid").and_then(Value::as_str) != Some(uid.as_str()) {
            let why = format!("expected response.uid={uid:?}, got {:?}", response.get("uid"));
            if hook.fail_closed {
                return Err(failure(why));
            }
            continue;
        }
        if response.get("allowed").and_then(Value::as_bool) != Some(true) {
            let result = response.get("status").cloned().unwrap_or_else(|| json!({}));
            let code = result.get("code").and_then(Value::as_u64).unwrap_or(400).max(400) as u16;
            let message = result.get("message").and_then(Value::as_str).unwrap_or_default();
            let denied = format!("admission webhook \"{}\" denied the request", hook.name);
            let text = if message.is_empty() {
                format!("{denied} without explanation")
            } else {
                format!("{denied}: {message}")
            };
            let reason = match code {
                403 => "Forbidden",
                404 => "NotFound",
                409 => "Conflict",
                422 => "Invalid",
                _ => "BadRequest",
            };
            return Err(ApiError::new(code, reason, text));
        }
        if let Some(patch) = response.get("patch").and_then(Value::as_str) {
            let applied = base64::engine::general_purpose::STANDARD
                .decode(patch)
                .map_err(|e| format!("the response's patch is not base64: {e}"))
                .and_then(|bytes| {
                    serde_json::from_slice::<Value>(&bytes)
                        .map_err(|e| format!("the response's patch is not JSON: {e}"))
                })
                .and_then(|p| crate::patch::apply(crate::patch::PatchType::Json, &mut object, &p));
            if let Err(why) = applied
                && hook.fail_closed
            {
                return Err(failure(why));
            }
        }
    }
    Ok(object)
}

async fn call(shared: &Shared, hook: &Hook, review: &Value) -> Result<Value, String> {
    // A Service is reached where `FakeCluster::expose_service` says, under its cluster DNS
    // name, so that the serving certificate is checked against that name as a real API
    // server checks it.
    let (url, route) = match (&hook.url, &hook.service) {
        (Some(url), _) => (url.clone(), None),
        (None, Some(s)) => {
            let key = format!("{}/{}", s.namespace, s.name);
            let addr = shared.services.lock().expect("never poisoned").get(&key).copied().ok_or_else(|| {
                format!(
                    "failed to call webhook: service {key} is not reachable from the fake API server: expose it with FakeCluster::expose_service, or give the webhook a clientConfig.url"
                )
            })?;
            let host = format!("{}.{}.svc", s.name, s.namespace);
            let path = if s.path.starts_with('/') { s.path.clone() } else { format!("/{}", s.path) };
            (format!("https://{host}:{}{path}", addr.port()), Some((host, addr)))
        }
        (None, None) => return Err("the webhook has no clientConfig".into()),
    };
    let url = &url;
    let client = webhook_client(shared, hook.ca_bundle.as_deref(), route)?;
    let response = client
        .post(url)
        .timeout(hook.timeout)
        .json(review)
        .send()
        .await
        .map_err(|e| format!("failed to call webhook: Post {url:?}: {}", error_chain(&e)))?;
    let status = response.status();
    let body: Value = response.json().await.map_err(|e| format!("failed to read the webhook's response: {e}"))?;
    if !status.is_success() {
        return Err(format!("the webhook answered {status}"));
    }
    body.get("response").cloned().ok_or_else(|| "the AdmissionReview has no response".into())
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// One HTTPS client per caBundle (and Service route), trusting that bundle only.
fn webhook_client(
    shared: &Shared,
    ca: Option<&[u8]>,
    route: Option<(String, SocketAddr)>,
) -> Result<reqwest::Client, String> {
    let key = (ca.map(<[u8]>::to_vec).unwrap_or_default(), route.clone());
    let mut clients = shared.webhook_clients.lock().expect("never poisoned");
    if let Some(c) = clients.get(&key) {
        return Ok(c.clone());
    }
    let mut builder = reqwest::Client::builder().http1_only();
    if let Some((host, addr)) = route {
        builder = builder.resolve(&host, addr);
    }
    if let Some(pem) = ca {
        let certs = reqwest::Certificate::from_pem_bundle(pem).map_err(|e| format!("the caBundle is not PEM: {e}"))?;
        builder = builder.tls_certs_only(certs);
    }
    let client = builder.build().map_err(|e| format!("cannot build an HTTPS client: {e}"))?;
    clients.insert(key, client.clone());
    Ok(client)
}
