//! Mutating webhooks: a real HTTPS webhook (self-signed, trusted through caBundle) that
//! suspends Jobs and names pods' scheduler; denial; failurePolicy Fail and Ignore.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Json;
use axum::routing::post;
use base64::Engine;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::discovery::ApiResource;
use serde_json::{Value, json};

use crate::common::{eventually, fake, job};

/// The requests the webhook saw: (operation, kind, namespace).
type Seen = Arc<Mutex<Vec<(String, String, String)>>>;

/// An HTTPS webhook on 127.0.0.1: Jobs get `spec.suspend: true` (or are denied when labelled
/// `deny`), pods get `schedulerName: fairway`. Returns its URL, CA (PEM) and what it saw.
async fn webhook() -> (String, String, Seen, tokio::task::JoinHandle<()>) {
    let certified =
        rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned(), "webhook.default.svc".to_owned()]).unwrap();
    let ca_pem = certified.cert.pem();
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(certified.signing_key.serialize_der().into());
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![certified.cert.der().clone()], key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let seen: Seen = Arc::default();
    let record = seen.clone();
    let app = axum::Router::new().route(
        "/mutate",
        post(move |Json(review): Json<Value>| {
            let record = record.clone();
            async move {
                let request = &review["request"];
                let kind = request["kind"]["kind"].as_str().unwrap_or_default().to_owned();
                record.lock().unwrap().push((
                    request["operation"].as_str().unwrap_or_default().to_owned(),
                    kind.clone(),
                    request["namespace"].as_str().unwrap_or_default().to_owned(),
                ));
                let uid = request["uid"].clone();
                let denied = request.pointer("/object/metadata/labels/deny").is_some();
                let response = if denied {
                    json!({"uid": uid, "allowed": false, "status": {"code": 403, "message": "no thanks"}})
                } else {
                    let patch = if kind == "Job" {
                        json!([{"op": "add", "path": "/spec/suspend", "value": true}])
                    } else {
                        json!([{"op": "add", "path": "/spec/schedulerName", "value": "fairway"}])
                    };
                    let patch = base64::engine::general_purpose::STANDARD.encode(serde_json::to_vec(&patch).unwrap());
                    json!({"uid": uid, "allowed": true, "patchType": "JSONPatch", "patch": patch})
                };
                Json(json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}))
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("https://{}/mutate", listener.local_addr().unwrap());
    let task = tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else { return };
            let acceptor = acceptor.clone();
            let app = app.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else { return };
                let service = hyper_util::service::TowerToHyperService::new(app);
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                    .await;
            });
        }
    });
    (url, ca_pem, seen, task)
}

fn configuration(url: &str, ca_pem: &str, policy: &str) -> DynamicObject {
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "fairway"},
        "webhooks": [
            {
                "name": "jobs.fairway.dev",
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
                "failurePolicy": policy,
                "clientConfig": {"url": url, "caBundle": ca},
                "namespaceSelector": {"matchExpressions": [{"key": "fairway.dev/queue", "operator": "Exists"}]},
                "rules": [{"operations": ["CREATE"], "apiGroups": ["batch"], "apiVersions": ["v1"], "resources": ["jobs"]}],
            },
            {
                "name": "pods.fairway.dev",
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
                "failurePolicy": policy,
                "clientConfig": {"url": url, "caBundle": ca},
                "namespaceSelector": {"matchLabels": {"fairway.dev/queue": "gpu"}},
                "objectSelector": {"matchExpressions": [{"key": "job-name", "operator": "Exists"}]},
                "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}],
            },
        ],
    }))
    .unwrap()
}

fn configurations(client: &kube::Client) -> Api<DynamicObject> {
    let resource = ApiResource {
        group: "admissionregistration.k8s.io".into(),
        version: "v1".into(),
        api_version: "admissionregistration.k8s.io/v1".into(),
        kind: "MutatingWebhookConfiguration".into(),
        plural: "mutatingwebhookconfigurations".into(),
    };
    Api::all_with(client.clone(), &resource)
}

#[tokio::test]
async fn a_webhook_suspends_jobs_and_names_the_scheduler_of_their_pods() {
    let cluster = fake().await;
    let client = cluster.client();
    let (url, ca, seen, server) = webhook().await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns = json!({"metadata": {"name": "team-a", "labels": {"fairway.dev/queue": "gpu"}}});
    namespaces.create(&PostParams::default(), &serde_json::from_value(ns).unwrap()).await.unwrap();
    configurations(&client).create(&PostParams::default(), &configuration(&url, &ca, "Fail")).await.unwrap();

    let jobs: Api<Job> = Api::namespaced(client.clone(), "team-a");
    let created = jobs.create(&PostParams::default(), &job("train", &["sleep", "1"], 1, 1, false)).await.unwrap();
    assert_eq!(created.spec.as_ref().unwrap().suspend, Some(true), "the webhook suspended it");
    assert_eq!(seen.lock().unwrap().clone(), vec![("CREATE".to_owned(), "Job".to_owned(), "team-a".to_owned())]);

    // Not in a selected namespace: not called.
    let elsewhere: Api<Job> = Api::namespaced(client.clone(), "default");
    let plain = elsewhere.create(&PostParams::default(), &job("plain", &["sleep", "1"], 1, 1, false)).await.unwrap();
    assert_eq!(plain.spec.as_ref().unwrap().suspend, Some(false));

    // Denied: the webhook's message and code.
    let mut denied = job("denied", &["sleep", "1"], 1, 1, false);
    denied.metadata.labels = Some([("deny".to_owned(), "yes".to_owned())].into());
    match jobs.create(&PostParams::default(), &denied).await.unwrap_err() {
        kube::Error::Api(s) => {
            assert_eq!(s.code, 403);
            assert_eq!(s.message, "admission webhook \"jobs.fairway.dev\" denied the request: no thanks");
        }
        other => panic!("expected a denial, got {other:?}"),
    }
    assert!(jobs.get_opt("denied").await.unwrap().is_none());

    // The Job controller's pods go through the pod webhook too.
    jobs.patch("train", &PatchParams::default(), &Patch::Merge(json!({"spec": {"suspend": false}}))).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "team-a");
    let pod = eventually(Duration::from_secs(5), "the Job's pod", || async {
        pods.list(&ListParams::default()).await.unwrap().items.into_iter().next()
    })
    .await;
    assert_eq!(pod.spec.unwrap().scheduler_name.as_deref(), Some("fairway"));
    server.abort();
    cluster.shutdown().await;
}

#[tokio::test]
async fn failure_policy_decides_when_the_webhook_is_down() {
    let cluster = fake().await;
    let client = cluster.client();
    let (url, ca, _, server) = webhook().await;
    server.abort();
    let _ = server.await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns = json!({"metadata": {"name": "team-a", "labels": {"fairway.dev/queue": "gpu"}}});
    namespaces.create(&PostParams::default(), &serde_json::from_value(ns).unwrap()).await.unwrap();
    let configs = configurations(&client);
    configs.create(&PostParams::default(), &configuration(&url, &ca, "Fail")).await.unwrap();
    let jobs: Api<Job> = Api::namespaced(client.clone(), "team-a");
    match jobs.create(&PostParams::default(), &job("train", &["sleep", "1"], 1, 1, false)).await.unwrap_err() {
        kube::Error::Api(s) => {
            assert_eq!((s.code, s.reason.as_str()), (500, "InternalError"));
            assert!(s.message.contains("failed calling webhook \"jobs.fairway.dev\""), "{}", s.message);
        }
        other => panic!("expected a 500, got {other:?}"),
    }
    let mut ignore = configs.get("fairway").await.unwrap();
    for hook in ignore.data["webhooks"].as_array_mut().unwrap() {
        hook["failurePolicy"] = json!("Ignore");
    }
    configs.replace("fairway", &PostParams::default(), &ignore).await.unwrap();
    let created = jobs.create(&PostParams::default(), &job("train", &["sleep", "1"], 1, 1, false)).await.unwrap();
    assert_eq!(created.spec.unwrap().suspend, Some(false), "created as it was, unmutated");
    cluster.shutdown().await;
}

#[tokio::test]
async fn a_webhook_behind_a_service_is_reached_where_the_test_exposes_it() {
    let cluster = fake().await;
    let client = cluster.client();
    let (url, ca, seen, server) = webhook().await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns = json!({"metadata": {"name": "team-a", "labels": {"fairway.dev/queue": "gpu"}}});
    namespaces.create(&PostParams::default(), &serde_json::from_value(ns).unwrap()).await.unwrap();
    let mut config = configuration(&url, &ca, "Fail");
    for hook in config.data["webhooks"].as_array_mut().unwrap() {
        hook["clientConfig"] = json!({
            "service": {"namespace": "default", "name": "webhook", "path": "/mutate", "port": 443},
            "caBundle": hook["clientConfig"]["caBundle"].clone(),
        });
    }
    configurations(&client).create(&PostParams::default(), &config).await.unwrap();
    let jobs: Api<Job> = Api::namespaced(client.clone(), "team-a");
    match jobs.create(&PostParams::default(), &job("train", &["sleep", "1"], 1, 1, false)).await.unwrap_err() {
        kube::Error::Api(s) => {
            assert_eq!(s.code, 500);
            assert!(s.message.contains("service default/webhook is not reachable"), "{}", s.message);
        }
        other => panic!("expected a 500, got {other:?}"),
    }
    // Reached as https://webhook.default.svc: the certificate is checked for that name.
    let addr: std::net::SocketAddr = url.trim_start_matches("https://").trim_end_matches("/mutate").parse().unwrap();
    cluster.expose_service("default", "webhook", addr);
    let created = jobs.create(&PostParams::default(), &job("train", &["sleep", "1"], 1, 1, false)).await.unwrap();
    assert_eq!(created.spec.unwrap().suspend, Some(true));
    assert_eq!(seen.lock().unwrap().len(), 1);
    server.abort();
    cluster.shutdown().await;
}
