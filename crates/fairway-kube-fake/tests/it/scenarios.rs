//! Scenario files end to end, with a toy controller that unsuspends queued Jobs and binds
//! their pods round robin to schedulable nodes.

use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use fairway_kube_fake::scenario::{Cluster, ControllerHooks, Scenario, ScenarioError};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;

use crate::common::{bind, fake};

struct Toy {
    client: kube::Client,
    task: Option<tokio::task::JoinHandle<()>>,
    starts: Arc<AtomicUsize>,
}

impl Toy {
    fn new(client: kube::Client) -> Toy {
        Toy { client, task: None, starts: Arc::default() }
    }
}

async fn toy_loop(client: kube::Client) {
    let jobs: Api<Job> = Api::all(client.clone());
    let pods: Api<Pod> = Api::all(client.clone());
    let nodes: Api<Node> = Api::all(client.clone());
    let mut turn = 0usize;
    loop {
        let queued =
            jobs.list(&ListParams::default().labels("fairway.dev/queue")).await.map(|l| l.items).unwrap_or_default();
        for job in queued {
            if job.spec.as_ref().and_then(|s| s.suspend) == Some(true) {
                let ns = job.metadata.namespace.clone().unwrap();
                let api: Api<Job> = Api::namespaced(client.clone(), &ns);
                let _ = api
                    .patch(
                        job.metadata.name.as_deref().unwrap(),
                        &PatchParams::default(),
                        &Patch::Merge(json!({"spec": {"suspend": false}})),
                    )
                    .await;
            }
        }
        let schedulable: Vec<String> = nodes
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default()
            .into_iter()
            .filter(|n| n.spec.as_ref().and_then(|s| s.unschedulable) != Some(true))
            .filter_map(|n| n.metadata.name)
            .collect();
        let unbound =
            pods.list(&ListParams::default().fields("spec.nodeName=")).await.map(|l| l.items).unwrap_or_default();
        for pod in unbound {
            if schedulable.is_empty() || pod.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let node = &schedulable[turn % schedulable.len()];
            turn += 1;
            let _ =
                bind(&client, pod.metadata.namespace.as_deref().unwrap(), pod.metadata.name.as_deref().unwrap(), node)
                    .await;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

impl ControllerHooks for Toy {
    fn start(&mut self) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send + '_>> {
        Box::pin(async move {
            if self.task.is_some() {
                return Err("already started".into());
            }
            self.starts.fetch_add(1, Ordering::Relaxed);
            self.task = Some(tokio::spawn(toy_loop(self.client.clone())));
            Ok(())
        })
    }

    fn stop(&mut self) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send + '_>> {
        Box::pin(async move {
            let task = self.task.take().ok_or("not started")?;
            task.abort();
            let _ = task.await;
            Ok(())
        })
    }
}

fn scenario_dir() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/scenarios")
}

#[tokio::test]
async fn the_admit_scenario_runs_end_to_end() {
    let cluster = fake().await;
    let scenario = Scenario::from_file(&scenario_dir().join("admit.yaml")).unwrap();
    let mut toy = Toy::new(cluster.client());
    let starts = toy.starts.clone();
    let report = scenario.run(Cluster::Fake(&cluster), Some(&mut toy)).await.unwrap();
    assert_eq!(report.steps, 17);
    assert_eq!(starts.load(Ordering::Relaxed), 2, "started, then restarted");
    assert!(toy.task.is_none(), "stopped by the scenario");
    assert!(cluster.double_booked().is_empty());
    cluster.shutdown().await;
}

fn step_error(e: ScenarioError) -> (usize, String) {
    match e {
        ScenarioError::Step { index, message, .. } => (index, message),
        other => panic!("expected a step error, got {other}"),
    }
}

#[tokio::test]
async fn failed_checks_say_what_was_expected_and_what_the_cluster_showed() {
    let cluster = fake().await;
    let text = r#"
name: wrong expectations
defaults: {namespace: default}
steps:
  - apply: |
      apiVersion: batch/v1
      kind: Job
      metadata: {name: j}
      spec:
        suspend: true
        template:
          spec:
            restartPolicy: Never
            containers: [{name: c, image: busybox, command: [sleep, "1"]}]
  - expect:
      job: j
      suspend: false
      pods: {running: 3}
"#;
    let scenario = Scenario::parse(text, Path::new(".")).unwrap();
    let (index, message) = step_error(scenario.run(Cluster::Fake(&cluster), None).await.unwrap_err());
    assert_eq!(index, 2);
    assert_eq!(
        message,
        "expected suspend false, 3 running of Job default/j; the cluster showed suspend true, (0 pods, none bound)"
    );

    let text = r#"
name: a wait that times out
steps:
  - wait:
      job: j
      timeout: 300ms
      conditions: [{type: Complete, status: "True"}]
"#;
    let scenario = Scenario::parse(text, Path::new(".")).unwrap();
    let (index, message) = step_error(scenario.run(Cluster::Fake(&cluster), None).await.unwrap_err());
    assert_eq!(index, 1);
    assert!(message.starts_with("still not so after 300ms: expected condition Complete status \"True\" of Job default/j; the cluster showed conditions [Suspended=True (JobSuspended) \"Job suspended\"]"), "{message}");

    let text = "name: events\nsteps:\n  - expect: {job: j, event: {reason: Preempted}}\n";
    let scenario = Scenario::parse(text, Path::new(".")).unwrap();
    let (_, message) = step_error(scenario.run(Cluster::Fake(&cluster), None).await.unwrap_err());
    assert!(message.starts_with("expected an event reason \"Preempted\" of Job default/j; the cluster showed events [Suspended \"Job suspended\"]"), "{message}");
    cluster.shutdown().await;
}

#[tokio::test]
async fn fake_only_steps_and_controller_steps_are_refused_when_they_cannot_run() {
    let cluster = fake().await;
    let scenario = Scenario::parse("name: nodes\nsteps:\n  - nodes: {count: 1, gpus: 8}\n", Path::new(".")).unwrap();
    // As if against a real cluster: only the API.
    let (_, message) = step_error(scenario.run(Cluster::Real(cluster.client()), None).await.unwrap_err());
    assert_eq!(message, "creating nodes runs on the fake only: this step cannot run against a real cluster");
    let scenario =
        Scenario::parse("name: inject\nsteps:\n  - inject: {fault: expire_watches}\n", Path::new(".")).unwrap();
    let (_, message) = step_error(scenario.run(Cluster::Real(cluster.client()), None).await.unwrap_err());
    assert!(message.starts_with("fault injection runs on the fake only"), "{message}");
    let scenario = Scenario::parse("name: c\nsteps:\n  - controller: start\n", Path::new(".")).unwrap();
    let (_, message) = step_error(scenario.run(Cluster::Fake(&cluster), None).await.unwrap_err());
    assert!(message.contains("none was given"), "{message}");
    // Cordoning is an ordinary API write: it runs anywhere.
    let scenario = Scenario::parse(
        "name: c\nsteps:\n  - nodes: {count: 1, gpus: 8}\n  - node: {name: node-0, cordon: true}\n  - expect: {node: node-0, unschedulable: true}\n",
        Path::new("."),
    )
    .unwrap();
    scenario.run(Cluster::Fake(&cluster), None).await.unwrap();
    cluster.shutdown().await;
}
