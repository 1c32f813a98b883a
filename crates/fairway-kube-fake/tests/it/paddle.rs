//! PaddleJobs: stored as a custom resource and run by the fake's minimal training operator.

use std::time::Duration;

use fairway_kube_fake::gpu_node;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::discovery::ApiResource;
use serde_json::{Value, json};

use crate::common::{auto_bind, eventually, fake};

fn paddle_api(client: &kube::Client) -> Api<DynamicObject> {
    let resource = ApiResource {
        group: "kubeflow.org".into(),
        version: "v1".into(),
        api_version: "kubeflow.org/v1".into(),
        kind: "PaddleJob".into(),
        plural: "paddlejobs".into(),
    };
    Api::namespaced_with(client.clone(), "default", &resource)
}

fn paddle_job(name: &str, master_command: Value, worker_command: Value) -> DynamicObject {
    let template = |command: Value| {
        json!({"spec": {"containers": [{"name": "paddle", "image": "paddlepaddle/paddle:2.6", "command": command,
            "resources": {"limits": {"nvidia.com/gpu": "2"}}}]}})
    };
    serde_json::from_value(json!({
        "apiVersion": "kubeflow.org/v1",
        "kind": "PaddleJob",
        "metadata": {"name": name},
        "spec": {
            "runPolicy": {"suspend": true, "cleanPodPolicy": "Running"},
            "paddleReplicaSpecs": {
                "Master": {"replicas": 1, "restartPolicy": "Never", "template": template(master_command)},
                "Worker": {"replicas": 2, "restartPolicy": "Never", "template": template(worker_command)},
            },
        },
    }))
    .unwrap()
}

fn condition(job: &DynamicObject, kind: &str) -> Option<(String, String)> {
    let c = job.data.pointer("/status/conditions")?.as_array()?.iter().find(|c| c["type"] == kind)?;
    Some((c["status"].as_str()?.to_owned(), c["reason"].as_str().unwrap_or_default().to_owned()))
}

async fn pods_of(client: &kube::Client, name: &str) -> Vec<Pod> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.list(&ListParams::default().labels(&format!("training.kubeflow.org/job-name={name}"))).await.unwrap().items
}

#[tokio::test]
async fn a_paddle_job_runs_its_replicas_and_succeeds_with_its_master() {
    let cluster = fake().await;
    let client = cluster.client();
    Api::<Node>::all(client.clone())
        .create(&PostParams::default(), &gpu_node("gpu-0", 8, "H100", 64_000, 1024))
        .await
        .unwrap();
    let jobs = paddle_api(&client);
    jobs.create(&PostParams::default(), &paddle_job("ernie", json!(["sleep", "20"]), json!(["sleep", "100000"])))
        .await
        .unwrap();
    eventually(Duration::from_secs(5), "Created", || async {
        condition(&jobs.get("ernie").await.unwrap(), "Created").is_some().then_some(())
    })
    .await;
    assert!(pods_of(&client, "ernie").await.is_empty(), "suspended: no pods");
    let (binder, _) = auto_bind(client.clone(), "gpu-0");
    jobs.patch("ernie", &PatchParams::default(), &Patch::Merge(json!({"spec": {"runPolicy": {"suspend": false}}})))
        .await
        .unwrap();
    let running = eventually(Duration::from_secs(5), "Running", || async {
        let j = jobs.get("ernie").await.unwrap();
        (condition(&j, "Running") == Some(("True".into(), "PaddleJobRunning".into()))).then_some(j)
    })
    .await;
    assert_eq!(running.data["status"]["replicaStatuses"], json!({"Master": {"active": 1}, "Worker": {"active": 2}}));
    let mut names: Vec<String> =
        pods_of(&client, "ernie").await.into_iter().map(|p| p.metadata.name.unwrap()).collect();
    names.sort();
    assert_eq!(names, vec!["ernie-master-0", "ernie-worker-0", "ernie-worker-1"]);
    // The master ends after 20 s (0.2 s): the job succeeds, and cleanPodPolicy Running
    // deletes the workers still running.
    let done = eventually(Duration::from_secs(10), "Succeeded", || async {
        let j = jobs.get("ernie").await.unwrap();
        condition(&j, "Succeeded").is_some().then_some(j)
    })
    .await;
    assert_eq!(condition(&done, "Running"), Some(("False".into(), "PaddleJobSucceeded".into())));
    assert!(done.data["status"]["completionTime"].is_string());
    eventually(Duration::from_secs(5), "the workers to go", || async {
        (pods_of(&client, "ernie").await.len() == 1).then_some(())
    })
    .await;
    binder.abort();
    cluster.shutdown().await;
}

#[tokio::test]
async fn a_paddle_job_is_suspended_and_fails_with_a_worker() {
    let cluster = fake().await;
    let client = cluster.client();
    Api::<Node>::all(client.clone())
        .create(&PostParams::default(), &gpu_node("gpu-0", 8, "H100", 64_000, 1024))
        .await
        .unwrap();
    let jobs = paddle_api(&client);
    jobs.create(
        &PostParams::default(),
        &paddle_job("flaky", json!(["sleep", "100000"]), json!(["sh", "-c", "sleep 50; exit 1"])),
    )
    .await
    .unwrap();
    jobs.patch("flaky", &PatchParams::default(), &Patch::Merge(json!({"spec": {"runPolicy": {"suspend": false}}})))
        .await
        .unwrap();
    eventually(Duration::from_secs(5), "three pods", || async {
        (pods_of(&client, "flaky").await.len() == 3).then_some(())
    })
    .await;
    jobs.patch("flaky", &PatchParams::default(), &Patch::Merge(json!({"spec": {"runPolicy": {"suspend": true}}})))
        .await
        .unwrap();
    let suspended = eventually(Duration::from_secs(5), "Suspended and no pods", || async {
        let j = jobs.get("flaky").await.unwrap();
        (condition(&j, "Suspended").is_some() && pods_of(&client, "flaky").await.is_empty()).then_some(j)
    })
    .await;
    assert_eq!(condition(&suspended, "Suspended"), Some(("True".into(), "PaddleJobSuspended".into())));
    let (binder, _) = auto_bind(client.clone(), "gpu-0");
    jobs.patch("flaky", &PatchParams::default(), &Patch::Merge(json!({"spec": {"runPolicy": {"suspend": false}}})))
        .await
        .unwrap();
    let failed = eventually(Duration::from_secs(10), "Failed", || async {
        let j = jobs.get("flaky").await.unwrap();
        condition(&j, "Failed").is_some().then_some(j)
    })
    .await;
    binder.abort();
    assert_eq!(condition(&failed, "Suspended"), Some(("False".into(), "PaddleJobResumed".into())));
    let message = failed.data["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Failed")
        .unwrap()["message"]
        .clone();
    let message = message.as_str().unwrap();
    assert!(
        message.starts_with("PaddleJob flaky is failed because ") && message.ends_with(" Worker replica(s) failed."),
        "{message}"
    );
    // cleanPodPolicy Running: the master, still running, is deleted.
    eventually(Duration::from_secs(5), "the master to go", || async {
        pods_of(&client, "flaky")
            .await
            .iter()
            .all(|p| p.metadata.name.as_deref() != Some("flaky-master-0"))
            .then_some(())
    })
    .await;
    cluster.shutdown().await;
}
