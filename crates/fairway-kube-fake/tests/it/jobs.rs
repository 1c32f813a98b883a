//! The stock Job controller: suspend and resume, parallelism and completions, backoffLimit,
//! conditions of other controllers kept, deletion propagation.

use std::time::Duration;

use fairway_kube_fake::gpu_node;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, PropagationPolicy};
use serde_json::json;

use crate::common::{auto_bind, bind, eventually, fake, job, job_value};

fn condition(job: &Job, kind: &str) -> Option<(String, String)> {
    job.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == kind)
        .map(|c| (c.status.clone(), c.reason.clone().unwrap_or_default()))
}

async fn job_pods(client: &kube::Client, name: &str) -> Vec<Pod> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.list(&ListParams::default().labels(&format!("batch.kubernetes.io/job-name={name}"))).await.unwrap().items
}

#[tokio::test]
async fn unsuspend_makes_pods_and_suspend_deletes_them_with_their_grace_period() {
    let cluster = fake().await;
    let client = cluster.client();
    Api::<Node>::all(client.clone())
        .create(&PostParams::default(), &gpu_node("gpu-0", 8, "H100", 64_000, 1024))
        .await
        .unwrap();
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    let mut manifest = job_value("train", &["sleep", "100000"], 2, 2, true);
    // Stops 20 s (0.2 s scaled) after SIGTERM, within its 30 s grace period.
    manifest["spec"]["template"]["metadata"] = json!({"annotations": {"fake.fairway.dev/stop-seconds": "20"}});
    jobs.create(&PostParams::default(), &serde_json::from_value(manifest).unwrap()).await.unwrap();
    let suspended = eventually(Duration::from_secs(5), "Suspended=True", || async {
        let j = jobs.get("train").await.unwrap();
        (condition(&j, "Suspended") == Some(("True".into(), "JobSuspended".into()))).then_some(j)
    })
    .await;
    assert!(suspended.status.as_ref().unwrap().start_time.is_none());
    assert!(job_pods(&client, "train").await.is_empty());

    // Another controller's condition, on the status subresource.
    let foreign = json!({"status": {"conditions": [{"type": "FairwayAdmitted", "status": "False", "reason": "Queued", "message": "waiting", "lastTransitionTime": "2025-01-01T00:00:00Z"}]}});
    jobs.patch_status("train", &PatchParams::default(), &Patch::Strategic(foreign)).await.unwrap();

    jobs.patch("train", &PatchParams::default(), &Patch::Merge(json!({"spec": {"suspend": false}}))).await.unwrap();
    let pods = eventually(Duration::from_secs(5), "two pods", || async {
        let pods = job_pods(&client, "train").await;
        (pods.len() == 2).then_some(pods)
    })
    .await;
    let resumed = jobs.get("train").await.unwrap();
    assert_eq!(condition(&resumed, "Suspended"), Some(("False".into(), "JobResumed".into())));
    assert!(resumed.status.as_ref().unwrap().start_time.is_some());
    for p in &pods {
        let labels = p.metadata.labels.as_ref().unwrap();
        assert_eq!(labels["job-name"], "train");
        assert_eq!(labels["batch.kubernetes.io/controller-uid"], resumed.metadata.uid.clone().unwrap());
        let owner = &p.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!((owner.kind.as_str(), owner.controller), ("Job", Some(true)));
        assert!(p.metadata.name.as_ref().unwrap().starts_with("train-"));
        bind(&client, "default", p.metadata.name.as_ref().unwrap(), "gpu-0").await.unwrap();
    }
    eventually(Duration::from_secs(5), "two ready pods", || async {
        let j = jobs.get("train").await.unwrap();
        let s = j.status.unwrap();
        (s.active == Some(2) && s.ready == Some(2)).then_some(())
    })
    .await;

    jobs.patch("train", &PatchParams::default(), &Patch::Merge(json!({"spec": {"suspend": true}}))).await.unwrap();
    let terminating = eventually(Duration::from_secs(5), "terminating pods", || async {
        let j = jobs.get("train").await.unwrap();
        let s = j.status.clone().unwrap();
        (s.terminating == Some(2)).then_some(j)
    })
    .await;
    assert_eq!(terminating.status.as_ref().unwrap().active, None, "active counts pods not being deleted");
    assert_eq!(condition(&terminating, "Suspended"), Some(("True".into(), "JobSuspended".into())));
    let deleting = job_pods(&client, "train").await;
    assert_eq!(deleting.len(), 2, "the pods stay during their grace period");
    assert!(
        deleting
            .iter()
            .all(|p| p.metadata.deletion_timestamp.is_some() && p.metadata.deletion_grace_period_seconds == Some(30))
    );
    eventually(Duration::from_secs(5), "the pods to go", || async {
        job_pods(&client, "train").await.is_empty().then_some(())
    })
    .await;
    let done = eventually(Duration::from_secs(5), "terminating 0", || async {
        let j = jobs.get("train").await.unwrap();
        (j.status.as_ref().unwrap().terminating == Some(0)).then_some(j)
    })
    .await;
    let status = done.status.as_ref().unwrap();
    assert_eq!(status.failed, None, "pods deleted by a suspension are not failures");
    assert_eq!(
        condition(&done, "FairwayAdmitted"),
        Some(("False".into(), "Queued".into())),
        "a foreign condition is kept"
    );
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let reasons: Vec<String> = events
        .list(&ListParams::default().fields("involvedObject.name=train"))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|e| e.reason)
        .collect();
    for want in ["Suspended", "Resumed", "SuccessfulCreate", "SuccessfulDelete"] {
        assert!(reasons.iter().any(|r| r == want), "no {want} event in {reasons:?}");
    }
    cluster.shutdown().await;
}

#[tokio::test]
async fn parallelism_four_completions_eight() {
    let cluster = fake().await;
    let client = cluster.client();
    Api::<Node>::all(client.clone())
        .create(&PostParams::default(), &gpu_node("gpu-0", 8, "H100", 64_000, 1024))
        .await
        .unwrap();
    let (binder, most) = auto_bind(client.clone(), "gpu-0");
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    jobs.create(&PostParams::default(), &job("batch", &["sleep", "20"], 4, 8, false)).await.unwrap();
    let done = eventually(Duration::from_secs(20), "Complete", || async {
        let j = jobs.get("batch").await.unwrap();
        (condition(&j, "Complete").is_some()).then_some(j)
    })
    .await;
    binder.abort();
    let status = done.status.as_ref().unwrap();
    assert_eq!(status.succeeded, Some(8));
    assert_eq!(condition(&done, "Complete"), Some(("True".into(), "CompletionsReached".into())));
    assert_eq!(condition(&done, "SuccessCriteriaMet"), Some(("True".into(), "CompletionsReached".into())));
    assert!(status.completion_time.is_some());
    let pods = job_pods(&client, "batch").await;
    assert_eq!(pods.len(), 8);
    assert!(pods.iter().all(|p| p.status.as_ref().unwrap().phase.as_deref() == Some("Succeeded")));
    let most = most.load(std::sync::atomic::Ordering::Relaxed);
    assert!((1..=4).contains(&most), "at most parallelism pods at once, saw {most}");
    cluster.shutdown().await;
}

#[tokio::test]
async fn failures_beyond_the_backoff_limit_fail_the_job() {
    let cluster = fake().await;
    let client = cluster.client();
    Api::<Node>::all(client.clone())
        .create(&PostParams::default(), &gpu_node("gpu-0", 8, "H100", 64_000, 1024))
        .await
        .unwrap();
    let (binder, _) = auto_bind(client.clone(), "gpu-0");
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    let mut manifest = job_value("flaky", &["sh", "-c", "sleep 1; exit 3"], 1, 1, false);
    manifest["spec"]["backoffLimit"] = json!(2);
    jobs.create(&PostParams::default(), &serde_json::from_value(manifest).unwrap()).await.unwrap();
    let failed = eventually(Duration::from_secs(20), "Failed", || async {
        let j = jobs.get("flaky").await.unwrap();
        condition(&j, "Failed").is_some().then_some(j)
    })
    .await;
    binder.abort();
    assert_eq!(condition(&failed, "Failed"), Some(("True".into(), "BackoffLimitExceeded".into())));
    assert_eq!(condition(&failed, "FailureTarget"), Some(("True".into(), "BackoffLimitExceeded".into())));
    assert_eq!(failed.status.as_ref().unwrap().failed, Some(3), "backoffLimit 2: the third failure fails it");
    let pods = job_pods(&client, "flaky").await;
    assert_eq!(pods.len(), 3);
    for p in pods {
        let terminated = p.status.unwrap().container_statuses.unwrap()[0].state.clone().unwrap().terminated.unwrap();
        assert_eq!(terminated.exit_code, 3);
    }
    cluster.shutdown().await;
}

#[tokio::test]
async fn deleting_a_job_deletes_or_orphans_its_pods() {
    let cluster = fake().await;
    let client = cluster.client();
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    for name in ["background", "orphan", "foreground"] {
        jobs.create(&PostParams::default(), &job(name, &["sleep", "100"], 2, 2, false)).await.unwrap();
    }
    for name in ["background", "orphan", "foreground"] {
        eventually(Duration::from_secs(5), "pods", || async {
            (job_pods(&client, name).await.len() == 2).then_some(())
        })
        .await;
    }
    jobs.delete(
        "background",
        &DeleteParams { propagation_policy: Some(PropagationPolicy::Background), ..Default::default() },
    )
    .await
    .unwrap();
    eventually(Duration::from_secs(5), "the pods to go", || async {
        job_pods(&client, "background").await.is_empty().then_some(())
    })
    .await;

    // batch/v1 still orphans by default.
    jobs.delete("orphan", &DeleteParams::default()).await.unwrap();
    let orphans = job_pods(&client, "orphan").await;
    assert_eq!(orphans.len(), 2);
    assert!(orphans.iter().all(|p| p.metadata.owner_references.as_ref().is_none_or(Vec::is_empty)));

    let answer = jobs.delete("foreground", &DeleteParams::foreground()).await.unwrap();
    assert!(answer.is_left(), "the Job is returned while its deletion is under way");
    eventually(Duration::from_secs(5), "the Job to go after its pods", || async {
        let gone = jobs.get_opt("foreground").await.unwrap().is_none();
        gone.then_some(())
    })
    .await;
    assert!(job_pods(&client, "foreground").await.is_empty());
    cluster.shutdown().await;
}

#[tokio::test]
async fn indexed_jobs_run_each_index_once() {
    let cluster = fake().await;
    let client = cluster.client();
    Api::<Node>::all(client.clone())
        .create(&PostParams::default(), &gpu_node("gpu-0", 8, "H100", 64_000, 1024))
        .await
        .unwrap();
    let (binder, most) = auto_bind(client.clone(), "gpu-0");
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    let mut manifest = job_value("indexed", &["sleep", "10"], 2, 3, false);
    manifest["spec"]["completionMode"] = json!("Indexed");
    jobs.create(&PostParams::default(), &serde_json::from_value(manifest).unwrap()).await.unwrap();
    let done = eventually(Duration::from_secs(20), "Complete", || async {
        let j = jobs.get("indexed").await.unwrap();
        condition(&j, "Complete").is_some().then_some(j)
    })
    .await;
    binder.abort();
    let status = done.status.unwrap();
    assert_eq!((status.succeeded, status.completed_indexes.as_deref()), (Some(3), Some("0-2")));
    let mut indexes: Vec<String> = job_pods(&client, "indexed")
        .await
        .iter()
        .map(|p| p.metadata.annotations.as_ref().unwrap()["batch.kubernetes.io/job-completion-index"].clone())
        .collect();
    indexes.sort();
    assert_eq!(indexes, vec!["0", "1", "2"]);
    assert!(most.load(std::sync::atomic::Ordering::Relaxed) <= 2);
    cluster.shutdown().await;
}

#[tokio::test]
async fn a_job_past_its_active_deadline_fails_and_its_pods_are_deleted() {
    let cluster = fake().await;
    let client = cluster.client();
    Api::<Node>::all(client.clone())
        .create(&PostParams::default(), &gpu_node("gpu-0", 8, "H100", 64_000, 1024))
        .await
        .unwrap();
    let (binder, _) = auto_bind(client.clone(), "gpu-0");
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    let mut manifest = job_value("late", &["sleep", "100000"], 1, 1, false);
    // 30 s: 0.3 s on this clock.
    manifest["spec"]["activeDeadlineSeconds"] = json!(30);
    jobs.create(&PostParams::default(), &serde_json::from_value(manifest).unwrap()).await.unwrap();
    let started = std::time::Instant::now();
    let failed = eventually(Duration::from_secs(10), "Failed", || async {
        let j = jobs.get("late").await.unwrap();
        condition(&j, "Failed").is_some().then_some(j)
    })
    .await;
    binder.abort();
    assert!(started.elapsed() >= Duration::from_millis(250), "{:?}", started.elapsed());
    assert_eq!(condition(&failed, "Failed"), Some(("True".into(), "DeadlineExceeded".into())));
    eventually(Duration::from_secs(5), "its pod to go", || async {
        job_pods(&client, "late").await.is_empty().then_some(())
    })
    .await;
    cluster.shutdown().await;
}
