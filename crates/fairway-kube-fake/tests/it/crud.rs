//! Create, get, update, patch, delete for each kind, with the real server's answers.

use fairway_kube_fake::gpu_node;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::common::{fake, job};

#[tokio::test]
async fn nodes_round_trip_with_their_status() {
    let cluster = fake().await;
    let nodes: Api<Node> = Api::all(cluster.client());
    let created = nodes.create(&PostParams::default(), &gpu_node("gpu-0", 8, "H100", 96_000, 1024)).await.unwrap();
    let meta = &created.metadata;
    assert!(meta.uid.is_some() && meta.creation_timestamp.is_some());
    let rv: u64 = meta.resource_version.as_deref().unwrap().parse().unwrap();
    let got = nodes.get("gpu-0").await.unwrap();
    assert_eq!(got.status.as_ref().unwrap().allocatable.as_ref().unwrap()["nvidia.com/gpu"].0, "8");
    let patched = nodes
        .patch("gpu-0", &PatchParams::default(), &Patch::Merge(json!({"spec": {"unschedulable": true}})))
        .await
        .unwrap();
    assert_eq!(patched.spec.unwrap().unschedulable, Some(true));
    let rv2: u64 = patched.metadata.resource_version.unwrap().parse().unwrap();
    assert!(rv2 > rv);
    let e = nodes.create(&PostParams::default(), &gpu_node("gpu-0", 8, "H100", 96_000, 1024)).await.unwrap_err();
    assert!(matches!(e, kube::Error::Api(s) if s.code == 409 && s.reason == "AlreadyExists"));
    nodes.delete("gpu-0", &DeleteParams::default()).await.unwrap();
    let e = nodes.get("gpu-0").await.unwrap_err();
    assert!(matches!(e, kube::Error::Api(s) if s.code == 404 && s.message == "nodes \"gpu-0\" not found"));
    cluster.shutdown().await;
}

#[tokio::test]
async fn a_job_is_defaulted_and_gets_its_selector() {
    let cluster = fake().await;
    let jobs: Api<Job> = Api::namespaced(cluster.client(), "default");
    let created = jobs.create(&PostParams::default(), &job("a", &["sleep", "1"], 1, 1, true)).await.unwrap();
    let spec = created.spec.unwrap();
    assert_eq!(spec.backoff_limit, Some(6));
    let uid = created.metadata.uid.unwrap();
    assert_eq!(spec.selector.unwrap().match_labels.unwrap()["batch.kubernetes.io/controller-uid"], uid);
    let labels = spec.template.metadata.unwrap().labels.unwrap();
    assert_eq!(labels["job-name"], "a");
    assert_eq!(labels["batch.kubernetes.io/job-name"], "a");
    assert_eq!(created.metadata.generation, Some(1));
    let list = jobs.list(&ListParams::default()).await.unwrap();
    assert_eq!(list.items.len(), 1);
    cluster.shutdown().await;
}

#[tokio::test]
async fn namespaces_must_exist() {
    let cluster = fake().await;
    let pods: Api<Pod> = Api::namespaced(cluster.client(), "nowhere");
    let pod: Pod = serde_json::from_value(
        json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i"}]}}),
    )
    .unwrap();
    let e = pods.create(&PostParams::default(), &pod).await.unwrap_err();
    assert!(matches!(e, kube::Error::Api(s) if s.code == 404 && s.message == "namespaces \"nowhere\" not found"));
    let namespaces: Api<Namespace> = Api::all(cluster.client());
    namespaces
        .create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "nowhere"}})).unwrap())
        .await
        .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    cluster.shutdown().await;
}

fn ar(group: &str, version: &str, kind: &str, plural: &str) -> kube::discovery::ApiResource {
    let api_version = if group.is_empty() { version.to_owned() } else { format!("{group}/{version}") };
    kube::discovery::ApiResource {
        group: group.into(),
        version: version.into(),
        api_version,
        kind: kind.into(),
        plural: plural.into(),
    }
}

/// Every kind: create, get, list, merge patch, stale PUT (409), fresh PUT, status (where it
/// has one), delete, 404.
#[tokio::test]
async fn every_kind_round_trips() {
    use kube::api::DynamicObject;
    let cluster = fake().await;
    let client = cluster.client();
    let kinds: Vec<(kube::discovery::ApiResource, bool, bool, serde_json::Value)> = vec![
        (ar("", "v1", "Namespace", "namespaces"), false, true, json!({"metadata": {"name": "x"}})),
        (ar("", "v1", "Node", "nodes"), false, true, json!({"metadata": {"name": "x"}, "spec": {}})),
        (
            ar("", "v1", "Pod", "pods"),
            true,
            true,
            json!({"metadata": {"name": "x"}, "spec": {"containers": [{"name": "c", "image": "i"}]}}),
        ),
        (
            ar("", "v1", "ResourceQuota", "resourcequotas"),
            true,
            true,
            json!({"metadata": {"name": "x"}, "spec": {"hard": {"pods": "3"}}}),
        ),
        (
            ar("", "v1", "Event", "events"),
            true,
            false,
            json!({"metadata": {"name": "x"}, "involvedObject": {"kind": "Pod", "name": "p"}, "reason": "R", "message": "m"}),
        ),
        (
            ar("", "v1", "Secret", "secrets"),
            true,
            false,
            json!({"metadata": {"name": "x"}, "data": {"tls.crt": "Y2VydA=="}}),
        ),
        (ar("", "v1", "ConfigMap", "configmaps"), true, false, json!({"metadata": {"name": "x"}, "data": {"a": "b"}})),
        (
            ar("scheduling.k8s.io", "v1", "PriorityClass", "priorityclasses"),
            false,
            false,
            json!({"metadata": {"name": "x"}, "value": 100}),
        ),
        (
            ar("batch", "v1", "Job", "jobs"),
            true,
            true,
            serde_json::to_value(job("x", &["sleep", "1"], 1, 1, true)).unwrap(),
        ),
        (
            ar("coordination.k8s.io", "v1", "Lease", "leases"),
            true,
            false,
            json!({"metadata": {"name": "x"}, "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}}),
        ),
        (
            ar("admissionregistration.k8s.io", "v1", "MutatingWebhookConfiguration", "mutatingwebhookconfigurations"),
            false,
            false,
            json!({"metadata": {"name": "x"}, "webhooks": []}),
        ),
        (
            ar("kubeflow.org", "v1", "PaddleJob", "paddlejobs"),
            true,
            true,
            json!({"metadata": {"name": "x"}, "spec": {"runPolicy": {"suspend": true}, "paddleReplicaSpecs": {"Worker": {"replicas": 2}}}}),
        ),
    ];
    for (resource, namespaced, has_status, object) in kinds {
        let kind = resource.kind.clone();
        let api: Api<DynamicObject> = if namespaced {
            Api::namespaced_with(client.clone(), "default", &resource)
        } else {
            Api::all_with(client.clone(), &resource)
        };
        let mut object = object;
        object["apiVersion"] = json!(resource.api_version);
        object["kind"] = json!(kind);
        let object: DynamicObject = serde_json::from_value(object).unwrap();
        let created = api.create(&PostParams::default(), &object).await.unwrap_or_else(|e| panic!("{kind}: {e}"));
        assert_eq!(created.metadata.namespace.is_some(), namespaced, "{kind}");
        let got = api.get("x").await.unwrap();
        assert_eq!(got.metadata.uid, created.metadata.uid, "{kind}");
        assert!(
            api.list(&ListParams::default())
                .await
                .unwrap()
                .items
                .iter()
                .any(|o| o.metadata.name.as_deref() == Some("x")),
            "{kind}"
        );
        let patched = api
            .patch("x", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"round": "trip"}}})))
            .await
            .unwrap();
        assert_eq!(patched.metadata.labels.as_ref().unwrap()["round"], "trip", "{kind}");
        // A stale write loses: the optimistic concurrency leases rely on.
        let mut stale = got.clone();
        stale.metadata.annotations = Some([("a".to_owned(), "b".to_owned())].into());
        let e = api.replace("x", &PostParams::default(), &stale).await.unwrap_err();
        assert!(matches!(e, kube::Error::Api(ref s) if s.code == 409), "{kind}: {e:?}");
        let mut fresh = api.get("x").await.unwrap();
        fresh.metadata.annotations = Some([("a".to_owned(), "b".to_owned())].into());
        api.replace("x", &PostParams::default(), &fresh).await.unwrap_or_else(|e| panic!("{kind}: {e}"));
        if has_status {
            let status = api
                .patch_status(
                    "x",
                    &PatchParams::default(),
                    &Patch::Merge(json!({"status": {"marker": "set"}, "spec": {"ignored": true}})),
                )
                .await
                .unwrap();
            assert_eq!(status.data["status"]["marker"], "set", "{kind}");
            assert!(status.data["spec"].get("ignored").is_none(), "{kind}: the status subresource changes status only");
            let main = api
                .patch("x", &PatchParams::default(), &Patch::Merge(json!({"status": {"marker": "main"}})))
                .await
                .unwrap();
            assert_eq!(main.data["status"]["marker"], "set", "{kind}: the main resource ignores status");
        }
        if kind == "Namespace" {
            continue; // deleted by the namespace controller once empty, tested with namespaces
        }
        api.delete("x", &DeleteParams::background()).await.unwrap_or_else(|e| panic!("{kind}: {e}"));
        let e = api.get("x").await.unwrap_err();
        assert!(matches!(e, kube::Error::Api(ref s) if s.code == 404), "{kind}: {e:?}");
    }
    cluster.shutdown().await;
}

#[tokio::test]
async fn discovery_and_version_describe_what_is_served() {
    let cluster = fake().await;
    let client = cluster.client();
    let version = client.apiserver_version().await.unwrap();
    assert_eq!((version.major.as_str(), version.minor.as_str()), ("1", "33"));
    for aggregated in [false, true] {
        let discovery = kube::Discovery::new(client.clone());
        let discovery =
            if aggregated { discovery.run_aggregated().await.unwrap() } else { discovery.run().await.unwrap() };
        for (group, kind, plural) in [
            ("", "Pod", "pods"),
            ("batch", "Job", "jobs"),
            ("kubeflow.org", "PaddleJob", "paddlejobs"),
            ("coordination.k8s.io", "Lease", "leases"),
            ("scheduling.k8s.io", "PriorityClass", "priorityclasses"),
        ] {
            let g = discovery.get(group).unwrap_or_else(|| panic!("group {group:?} (aggregated: {aggregated})"));
            let (resource, caps) =
                g.recommended_kind(kind).unwrap_or_else(|| panic!("{kind} (aggregated: {aggregated})"));
            assert_eq!(resource.plural, plural);
            assert!(caps.supports_operation(kube::discovery::verbs::WATCH));
        }
    }
    // Without the CRD, PaddleJobs are not served.
    let bare =
        crate::common::fake_with(fairway_kube_fake::FakeConfig { paddlejobs: false, ..Default::default() }).await;
    let discovery = kube::Discovery::new(bare.client()).run().await.unwrap();
    assert!(discovery.get("kubeflow.org").is_none());
    let e = bare
        .client()
        .request::<serde_json::Value>(http::Request::get("/apis/kubeflow.org/v1/paddlejobs").body(vec![]).unwrap())
        .await
        .unwrap_err();
    assert!(matches!(e, kube::Error::Api(ref s) if s.code == 404), "{e:?}");
    bare.shutdown().await;
    cluster.shutdown().await;
}

#[tokio::test]
async fn the_kubeconfig_points_at_the_fake() {
    let cluster = fake().await;
    let kubeconfig = kube::config::Kubeconfig::from_yaml(&cluster.kubeconfig_yaml()).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await.unwrap();
    assert_eq!(config.cluster_url.to_string().trim_end_matches('/'), cluster.url());
    let client = kube::Client::try_from(config).unwrap();
    let namespaces: Api<Namespace> = Api::all(client);
    let names: Vec<String> = namespaces
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    assert_eq!(names, vec!["default", "kube-node-lease", "kube-public", "kube-system"]);
    cluster.shutdown().await;
}
