//! Helpers shared by the tests: a started fake, object builders, polling.

use std::future::Future;
use std::time::Duration;

use fairway_kube_fake::{FakeCluster, FakeConfig};
use k8s_openapi::api::batch::v1::Job;
use serde_json::{Value, json};

/// A fake with a fast clock: a `sleep 100` lasts 1 s.
pub async fn fake() -> FakeCluster {
    fake_with(FakeConfig { time_scale: 0.01, bookmark_interval: Duration::from_millis(200), ..FakeConfig::default() })
        .await
}

pub async fn fake_with(config: FakeConfig) -> FakeCluster {
    FakeCluster::start(config).await.expect("the fake starts")
}

/// A Job whose pods run `command`, with `parallelism`/`completions`.
pub fn job(name: &str, command: &[&str], parallelism: i32, completions: i32, suspend: bool) -> Job {
    serde_json::from_value(job_value(name, command, parallelism, completions, suspend)).expect("a valid Job")
}

pub fn job_value(name: &str, command: &[&str], parallelism: i32, completions: i32, suspend: bool) -> Value {
    json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "parallelism": parallelism,
            "completions": completions,
            "suspend": suspend,
            "template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "main", "image": "busybox:1.36", "command": command,
                    "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
            }},
        },
    })
}

/// Polls `check` until it returns `Some`, or panics after `timeout` with `what`.
pub async fn eventually<T, F, Fut>(timeout: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        if tokio::time::Instant::now() > deadline {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Binds a pod to a node through the Binding subresource, as a scheduler does.
pub async fn bind(client: &kube::Client, ns: &str, pod: &str, node: &str) -> Result<(), kube::Error> {
    let body = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": pod}, "target": {"apiVersion": "v1", "kind": "Node", "name": node}});
    let request = http::Request::post(format!("/api/v1/namespaces/{ns}/pods/{pod}/binding"))
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&body).unwrap())
        .unwrap();
    client.request::<Value>(request).await.map(|_| ())
}

/// A scheduler for tests: binds every unbound pod to `node`, every 10 ms, and records the
/// most pods it saw bound and not terminal at once.
pub fn auto_bind(
    client: kube::Client,
    node: &str,
) -> (tokio::task::JoinHandle<()>, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use k8s_openapi::api::core::v1::Pod;
    use std::sync::atomic::Ordering;
    let node = node.to_owned();
    let most = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = most.clone();
    let task = tokio::spawn(async move {
        let pods: kube::Api<Pod> = kube::Api::all(client.clone());
        loop {
            if let Ok(list) = pods.list(&Default::default()).await {
                let mut running = 0;
                for p in &list.items {
                    let phase = p.status.as_ref().and_then(|s| s.phase.clone()).unwrap_or_default();
                    let bound = p.spec.as_ref().and_then(|s| s.node_name.clone()).is_some();
                    if bound && phase != "Succeeded" && phase != "Failed" && p.metadata.deletion_timestamp.is_none() {
                        running += 1;
                    }
                    if !bound && p.metadata.deletion_timestamp.is_none() {
                        let ns = p.metadata.namespace.clone().unwrap();
                        let name = p.metadata.name.clone().unwrap();
                        if bind(&client, &ns, &name, &node).await.is_ok() {
                            running += 1;
                        }
                    }
                }
                seen.fetch_max(running, Ordering::Relaxed);
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
    (task, most)
}
