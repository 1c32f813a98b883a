//! Lists: pagination with `limit`/`continue`, selectors, 409 on a stale update.

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::common::fake;

pub fn pod(name: &str, labels: serde_json::Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]},
    }))
    .unwrap()
}

#[tokio::test]
async fn twelve_hundred_pods_list_in_pages_of_five_hundred() {
    let cluster = fake().await;
    let pods: Api<Pod> = Api::namespaced(cluster.client(), "default");
    futures_util::stream::iter(0..1200)
        .map(|i| {
            let pods = pods.clone();
            async move {
                let labels = json!({"parity": if i % 2 == 0 { "even" } else { "odd" }});
                pods.create(&PostParams::default(), &pod(&format!("p-{i:04}"), labels)).await.unwrap();
            }
        })
        .buffer_unordered(16)
        .collect::<Vec<_>>()
        .await;
    let mut names = Vec::new();
    let mut params = ListParams::default().limit(500);
    let mut pages = Vec::new();
    let mut rvs = Vec::new();
    loop {
        let page = pods.list(&params).await.unwrap();
        pages.push((page.items.len(), page.metadata.remaining_item_count));
        rvs.push(page.metadata.resource_version.clone().unwrap());
        names.extend(page.items.iter().map(|p| p.metadata.name.clone().unwrap()));
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => break,
        }
    }
    assert_eq!(pages, vec![(500, Some(700)), (500, Some(200)), (200, None)]);
    assert!(rvs.iter().all(|rv| rv == &rvs[0]), "every page has the first page's resourceVersion: {rvs:?}");
    let expected: Vec<String> = (0..1200).map(|i| format!("p-{i:04}")).collect();
    assert_eq!(names, expected, "in key order, each once");
    // Selectors: label and field, all namespaces.
    let all: Api<Pod> = Api::all(cluster.client());
    let odd = all.list(&ListParams::default().labels("parity=odd")).await.unwrap();
    assert_eq!(odd.items.len(), 600);
    let one = all.list(&ListParams::default().fields("metadata.name=p-0007")).await.unwrap();
    assert_eq!(one.items.len(), 1);
    let unbound =
        all.list(&ListParams::default().fields("spec.nodeName=").labels("parity in (even)").limit(100)).await.unwrap();
    assert_eq!(unbound.items.len(), 100);
    assert!(unbound.metadata.continue_.is_some());
    assert_eq!(unbound.metadata.remaining_item_count, None, "not given with selectors, as the real server");
    let e = all.list(&ListParams::default().fields("spec.image=x")).await.unwrap_err();
    assert!(matches!(e, kube::Error::Api(s) if s.code == 400));
    cluster.shutdown().await;
}

#[tokio::test]
async fn a_stale_update_is_a_conflict() {
    let cluster = fake().await;
    let pods: Api<Pod> = Api::namespaced(cluster.client(), "default");
    let created = pods.create(&PostParams::default(), &pod("p", json!({"a": "1"}))).await.unwrap();
    let mut stale = created.clone();
    pods.patch("p", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"a": "2"}}}))).await.unwrap();
    stale.metadata.labels = Some([("a".to_owned(), "3".to_owned())].into());
    let e = pods.replace("p", &PostParams::default(), &stale).await.unwrap_err();
    match e {
        kube::Error::Api(s) => {
            assert_eq!((s.code, s.reason.as_str()), (409, "Conflict"));
            assert!(s.message.contains("the object has been modified"), "{}", s.message);
        }
        other => panic!("expected a 409, got {other:?}"),
    }
    // Read again and write: accepted.
    let mut fresh = pods.get("p").await.unwrap();
    fresh.metadata.labels = Some([("a".to_owned(), "3".to_owned())].into());
    let replaced = pods.replace("p", &PostParams::default(), &fresh).await.unwrap();
    assert_eq!(replaced.metadata.labels.unwrap()["a"], "3");
    // A no-op write does not bump the resourceVersion.
    let again = pods.replace("p", &PostParams::default(), &pods.get("p").await.unwrap()).await.unwrap();
    assert_eq!(again.metadata.resource_version, pods.get("p").await.unwrap().metadata.resource_version);
    cluster.shutdown().await;
}
