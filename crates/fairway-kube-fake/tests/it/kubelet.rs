//! The kubelets: run times and exit codes from the pod's command, SIGTERM and grace
//! periods, NotReady nodes, the binding subresource, double booking.

use std::time::Duration;

use fairway_kube_fake::gpu_node;
use futures_util::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use serde_json::{Value, json};

use crate::common::{bind, eventually, fake};

fn pod_on(name: &str, node: Option<&str>, command: Value, annotations: Value, grace: i64) -> Pod {
    let mut v = json!({
        "metadata": {"name": name, "annotations": annotations},
        "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": grace,
                 "containers": [{"name": "main", "image": "busybox:1.36", "command": command,
                                 "resources": {"limits": {"nvidia.com/gpu": "4"}}}]},
    });
    if let Some(n) = node {
        v["spec"]["nodeName"] = json!(n);
    }
    serde_json::from_value(v).unwrap()
}

async fn node(client: &kube::Client, name: &str) {
    Api::<Node>::all(client.clone())
        .create(&PostParams::default(), &gpu_node(name, 8, "H100", 64_000, 1024))
        .await
        .unwrap();
}

fn phase(p: &Pod) -> String {
    p.status.as_ref().and_then(|s| s.phase.clone()).unwrap_or_default()
}

fn exit_code(p: &Pod) -> Option<i32> {
    p.status.as_ref()?.container_statuses.as_ref()?[0].state.as_ref()?.terminated.as_ref().map(|t| t.exit_code)
}

#[tokio::test]
async fn pods_run_their_sleep_and_end_with_their_exit_code() {
    let cluster = fake().await;
    let client = cluster.client();
    node(&client, "gpu-0").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.create(&PostParams::default(), &pod_on("ok", Some("gpu-0"), json!(["sleep", "50"]), json!({}), 30))
        .await
        .unwrap();
    pods.create(
        &PostParams::default(),
        &pod_on("bad", Some("gpu-0"), json!(["sh", "-c", "sleep 50; exit 3"]), json!({}), 30),
    )
    .await
    .unwrap();
    pods.create(
        &PostParams::default(),
        &pod_on(
            "annotated",
            Some("gpu-0"),
            json!(["python", "train.py"]),
            json!({"fake.fairway.dev/run-seconds": "50", "fake.fairway.dev/exit-code": "7"}),
            30,
        ),
    )
    .await
    .unwrap();
    pods.create(
        &PostParams::default(),
        &pod_on("forever", Some("gpu-0"), json!(["python", "serve.py"]), json!({}), 30),
    )
    .await
    .unwrap();
    let running = eventually(Duration::from_secs(5), "Running", || async {
        let p = pods.get("ok").await.unwrap();
        (phase(&p) == "Running").then_some(p)
    })
    .await;
    let status = running.status.unwrap();
    assert!(status.start_time.is_some() && status.pod_ip.is_some());
    assert!(status.container_statuses.unwrap()[0].state.as_ref().unwrap().running.is_some());
    for (name, want_phase, code) in [("ok", "Succeeded", 0), ("bad", "Failed", 3), ("annotated", "Failed", 7)] {
        let p = eventually(Duration::from_secs(5), name, || async {
            let p = pods.get(name).await.unwrap();
            (phase(&p) == want_phase).then_some(p)
        })
        .await;
        assert_eq!(exit_code(&p), Some(code), "{name}");
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(phase(&pods.get("forever").await.unwrap()), "Running", "runs until deleted");
    cluster.shutdown().await;
}

/// Deletes a pod and returns its last state before it went (from a watch), and how long
/// it took to go.
async fn delete_and_follow(pods: &Api<Pod>, name: &str) -> (Pod, Duration) {
    let rv = pods.get(name).await.unwrap().metadata.resource_version.unwrap();
    let mut stream =
        pods.watch(&WatchParams::default().fields(&format!("metadata.name={name}")), &rv).await.unwrap().boxed();
    let started = std::time::Instant::now();
    pods.delete(name, &DeleteParams::default()).await.unwrap();
    let mut last = None;
    while let Some(event) = stream.try_next().await.unwrap() {
        match event {
            WatchEvent::Modified(p) => last = Some(p),
            WatchEvent::Deleted(p) => return (last.unwrap_or(p), started.elapsed()),
            _ => {}
        }
    }
    panic!("the watch ended before {name} was deleted");
}

#[tokio::test]
async fn a_deleted_pod_stops_after_its_stop_seconds_or_its_grace_period() {
    let cluster = fake().await;
    let client = cluster.client();
    node(&client, "gpu-0").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    // Stops 10 s after SIGTERM (0.1 s), within a 100 s grace period: exits 143.
    pods.create(
        &PostParams::default(),
        &pod_on(
            "polite",
            Some("gpu-0"),
            json!(["sleep", "100000"]),
            json!({"fake.fairway.dev/stop-seconds": "10"}),
            100,
        ),
    )
    .await
    .unwrap();
    // Would take 1000 s; killed when its 30 s grace period (0.3 s) ends: exits 137.
    pods.create(
        &PostParams::default(),
        &pod_on(
            "stubborn",
            Some("gpu-0"),
            json!(["sleep", "100000"]),
            json!({"fake.fairway.dev/stop-seconds": "1000"}),
            30,
        ),
    )
    .await
    .unwrap();
    for name in ["polite", "stubborn"] {
        eventually(Duration::from_secs(5), "Running", || async {
            (phase(&pods.get(name).await.unwrap()) == "Running").then_some(())
        })
        .await;
    }
    let (last, took) = delete_and_follow(&pods, "polite").await;
    assert_eq!((phase(&last), exit_code(&last)), ("Failed".into(), Some(143)));
    // The exit code says which came first; the time, that the stop took its 0.1 s.
    assert!(took >= Duration::from_millis(90) && took < Duration::from_secs(5), "{took:?}");
    let (last, took) = delete_and_follow(&pods, "stubborn").await;
    assert_eq!((phase(&last), exit_code(&last)), ("Failed".into(), Some(137)));
    assert!(took >= Duration::from_millis(280) && took < Duration::from_secs(5), "{took:?}");
    // A pod that is not bound goes at once.
    pods.create(&PostParams::default(), &pod_on("pending", None, json!(["sleep", "1"]), json!({}), 30)).await.unwrap();
    let answer = pods.delete("pending", &DeleteParams::default()).await.unwrap();
    assert!(answer.is_left());
    assert!(pods.get_opt("pending").await.unwrap().is_none());
    cluster.shutdown().await;
}

#[tokio::test]
async fn binding_sets_the_node_once_and_not_ready_nodes_stand_still() {
    let cluster = fake().await;
    let client = cluster.client();
    node(&client, "gpu-0").await;
    node(&client, "gpu-1").await;
    let nodes: Api<Node> = Api::all(client.clone());
    let not_ready =
        json!({"status": {"conditions": [{"type": "Ready", "status": "False", "reason": "KubeletNotReady"}]}});
    nodes.patch_status("gpu-1", &PatchParams::default(), &Patch::Merge(not_ready)).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.create(&PostParams::default(), &pod_on("p", None, json!(["sleep", "10"]), json!({}), 30)).await.unwrap();
    bind(&client, "default", "p", "gpu-1").await.unwrap();
    let bound = pods.get("p").await.unwrap();
    assert_eq!(bound.spec.as_ref().unwrap().node_name.as_deref(), Some("gpu-1"));
    let scheduled = bound
        .status
        .as_ref()
        .unwrap()
        .conditions
        .as_ref()
        .unwrap()
        .iter()
        .any(|c| c.type_ == "PodScheduled" && c.status == "True");
    assert!(scheduled);
    match bind(&client, "default", "p", "gpu-0").await.unwrap_err() {
        kube::Error::Api(s) => {
            assert_eq!(s.code, 409);
            assert!(s.message.contains("is already assigned to node \"gpu-1\""), "{}", s.message);
        }
        other => panic!("expected a 409, got {other:?}"),
    }
    // A pod can't be moved by an update either.
    let e = pods
        .patch("p", &PatchParams::default(), &Patch::Merge(json!({"spec": {"nodeName": "gpu-0"}})))
        .await
        .unwrap_err();
    assert!(matches!(e, kube::Error::Api(s) if s.code == 422));
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(phase(&pods.get("p").await.unwrap()), "Pending", "its kubelet is not ready");
    let ready = json!({"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]}});
    nodes.patch_status("gpu-1", &PatchParams::default(), &Patch::Merge(ready)).await.unwrap();
    eventually(Duration::from_secs(5), "Succeeded", || async {
        (phase(&pods.get("p").await.unwrap()) == "Succeeded").then_some(())
    })
    .await;
    cluster.shutdown().await;
}

#[tokio::test]
async fn double_booked_nodes_are_reported_and_deleted_nodes_lose_their_pods() {
    let cluster = fake().await;
    let client = cluster.client();
    node(&client, "gpu-0").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    for name in ["a", "b"] {
        pods.create(&PostParams::default(), &pod_on(name, Some("gpu-0"), json!(["sleep", "100000"]), json!({}), 30))
            .await
            .unwrap();
    }
    assert!(cluster.double_booked().is_empty(), "4 + 4 GPUs on an 8-GPU node");
    pods.create(&PostParams::default(), &pod_on("c", Some("gpu-0"), json!(["sleep", "100000"]), json!({}), 30))
        .await
        .unwrap();
    let report = cluster.double_booked();
    assert_eq!(report.len(), 1, "{report:?}");
    assert!(report[0].starts_with("gpu-0: nvidia.com/gpu requested 12, allocatable 8"), "{report:?}");
    Api::<Node>::all(client.clone()).delete("gpu-0", &DeleteParams::default()).await.unwrap();
    eventually(Duration::from_secs(5), "the pods of the deleted node to go", || async {
        pods.list(&Default::default()).await.unwrap().items.is_empty().then_some(())
    })
    .await;
    cluster.shutdown().await;
}
