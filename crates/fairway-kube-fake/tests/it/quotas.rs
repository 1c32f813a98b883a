//! Namespaced ResourceQuotas (admission and status.used) and PriorityClass admission.

use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Event, Namespace, Pod, ResourceQuota};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::common::{eventually, fake, job};

async fn namespace(client: &kube::Client, name: &str) {
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &ns).await.unwrap();
}

fn used(q: &ResourceQuota, resource: &str) -> Option<String> {
    q.status.as_ref()?.used.as_ref()?.get(resource).map(|q| q.0.clone())
}

#[tokio::test]
async fn a_quota_holds_back_pods_beyond_it_and_counts_them() {
    let cluster = fake().await;
    let client = cluster.client();
    namespace(&client, "team-a").await;
    let quotas: Api<ResourceQuota> = Api::namespaced(client.clone(), "team-a");
    let quota = json!({"metadata": {"name": "gpus"}, "spec": {"hard": {"requests.nvidia.com/gpu": "2", "pods": "10"}}});
    quotas.create(&PostParams::default(), &serde_json::from_value(quota).unwrap()).await.unwrap();
    let jobs: Api<Job> = Api::namespaced(client.clone(), "team-a");
    jobs.create(&PostParams::default(), &job("wide", &["sleep", "100000"], 3, 3, false)).await.unwrap();
    let events: Api<Event> = Api::namespaced(client.clone(), "team-a");
    let failed = eventually(Duration::from_secs(5), "a FailedCreate event", || async {
        let list = events.list(&ListParams::default().fields("reason=FailedCreate")).await.unwrap();
        list.items.into_iter().next()
    })
    .await;
    let message = failed.message.unwrap();
    assert!(
        message.contains("exceeded quota: gpus, requested: requests.nvidia.com/gpu=1, used: requests.nvidia.com/gpu=2, limited: requests.nvidia.com/gpu=2"),
        "{message}"
    );
    let pods: Api<Pod> = Api::namespaced(client.clone(), "team-a");
    assert_eq!(pods.list(&ListParams::default()).await.unwrap().items.len(), 2);
    let q = eventually(Duration::from_secs(5), "status.used", || async {
        let q = quotas.get("gpus").await.unwrap();
        (used(&q, "requests.nvidia.com/gpu").as_deref() == Some("2")).then_some(q)
    })
    .await;
    assert_eq!(used(&q, "pods").as_deref(), Some("2"));
    assert_eq!(q.status.unwrap().hard.unwrap()["requests.nvidia.com/gpu"].0, "2");
    // More room: the Job controller's retry gets the third pod in.
    quotas
        .patch(
            "gpus",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"hard": {"requests.nvidia.com/gpu": "3"}}})),
        )
        .await
        .unwrap();
    eventually(Duration::from_secs(10), "the third pod", || async {
        (pods.list(&ListParams::default()).await.unwrap().items.len() == 3).then_some(())
    })
    .await;
    eventually(Duration::from_secs(5), "status.used 3", || async {
        (used(&quotas.get("gpus").await.unwrap(), "requests.nvidia.com/gpu").as_deref() == Some("3")).then_some(())
    })
    .await;
    cluster.shutdown().await;
}

#[tokio::test]
async fn pods_take_their_priority_from_their_class_and_scoped_quotas_count_only_theirs() {
    let cluster = fake().await;
    let client = cluster.client();
    namespace(&client, "team-a").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "team-a");
    let pod = |name: &str, class: &str| -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"priorityClassName": class, "containers": [{"name": "c", "image": "i", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
        }))
        .unwrap()
    };
    match pods.create(&PostParams::default(), &pod("p", "high")).await.unwrap_err() {
        kube::Error::Api(s) => {
            assert_eq!(s.code, 403);
            assert_eq!(s.message, "pods \"p\" is forbidden: no PriorityClass with name high was found");
        }
        other => panic!("expected a 403, got {other:?}"),
    }
    let classes: Api<PriorityClass> = Api::all(client.clone());
    for (name, value) in [("high", 1000), ("low", 10)] {
        let class = json!({"metadata": {"name": name}, "value": value});
        classes.create(&PostParams::default(), &serde_json::from_value(class).unwrap()).await.unwrap();
    }
    let quota = json!({"metadata": {"name": "high-only"}, "spec": {
        "hard": {"requests.nvidia.com/gpu": "1"},
        "scopeSelector": {"matchExpressions": [{"scopeName": "PriorityClass", "operator": "In", "values": ["high"]}]},
    }});
    Api::<ResourceQuota>::namespaced(client.clone(), "team-a")
        .create(&PostParams::default(), &serde_json::from_value(quota).unwrap())
        .await
        .unwrap();
    let high = pods.create(&PostParams::default(), &pod("h1", "high")).await.unwrap();
    let spec = high.spec.unwrap();
    assert_eq!((spec.priority, spec.preemption_policy.as_deref()), (Some(1000), Some("PreemptLowerPriority")));
    for i in 0..3 {
        pods.create(&PostParams::default(), &pod(&format!("l{i}"), "low")).await.unwrap();
    }
    let e = pods.create(&PostParams::default(), &pod("h2", "high")).await.unwrap_err();
    assert!(matches!(e, kube::Error::Api(s) if s.code == 403 && s.message.contains("exceeded quota: high-only")));
    cluster.shutdown().await;
}
