//! Fault injection: write errors by resource and verb, 429 with Retry-After, stats.

use fairway_kube_fake::{Fault, WriteVerb};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::common::{bind, fake, job};
use crate::lists::pod;

fn code(e: kube::Error) -> u16 {
    match e {
        kube::Error::Api(s) => s.code,
        other => panic!("expected an API error, got {other:?}"),
    }
}

#[tokio::test]
async fn write_faults_hit_the_writes_they_name_and_only_as_often_as_asked() {
    let cluster = fake().await;
    let client = cluster.client();
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    jobs.create(&PostParams::default(), &job("j", &["sleep", "1"], 1, 1, true)).await.unwrap();
    cluster.inject(Fault::conflicts(2).on("jobs").verb(WriteVerb::Patch));
    let patch = Patch::Merge(json!({"metadata": {"labels": {"x": "1"}}}));
    // Another verb, another resource: untouched.
    jobs.create(&PostParams::default(), &job("k", &["sleep", "1"], 1, 1, true)).await.unwrap();
    assert_eq!(code(jobs.patch("j", &PatchParams::default(), &patch).await.unwrap_err()), 409);
    // `jobs` covers its subresources.
    assert_eq!(
        code(jobs.patch_status("j", &PatchParams::default(), &Patch::Merge(json!({"status": {}}))).await.unwrap_err()),
        409
    );
    jobs.patch("j", &PatchParams::default(), &patch).await.unwrap();
    assert_eq!(jobs.get("j").await.unwrap().metadata.labels.unwrap()["x"], "1");

    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.create(&PostParams::default(), &pod("p", json!({}))).await.unwrap();
    cluster.inject(Fault::internal_errors(1).on("pods/binding"));
    assert_eq!(code(bind(&client, "default", "p", "n").await.unwrap_err()), 500);
    bind(&client, "default", "p", "n").await.unwrap();

    // 429 carries Retry-After (kube reports the status; the header is checked raw).
    cluster.inject(Fault::throttled(1, 7));
    let raw = reqwest::Client::new()
        .post(format!("{}/api/v1/namespaces/default/pods", cluster.url()))
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&pod("q", json!({}))).unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(raw.status().as_u16(), 429);
    assert_eq!(raw.headers()["retry-after"], "7");
    let body: serde_json::Value = raw.json().await.unwrap();
    assert_eq!((body["kind"].as_str(), body["reason"].as_str()), (Some("Status"), Some("TooManyRequests")));
    pods.create(&PostParams::default(), &pod("q", json!({}))).await.unwrap();

    let stats = cluster.stats();
    assert_eq!(stats.requests["patch jobs"], 2);
    assert_eq!(stats.requests["patch jobs/status"], 1);
    assert_eq!(stats.requests["create pods/binding"], 2);
    assert_eq!(stats.objects["jobs"], 2);
    assert_eq!(stats.objects["pods"], 2);
    assert!(stats.writes > 0 && stats.resource_version >= stats.writes);
    cluster.shutdown().await;
}
