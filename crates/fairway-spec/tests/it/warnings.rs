//! Fields fairway does not use are reported as warnings, each with its path; the fields it
//! does use are all read.

use std::collections::BTreeMap;

use fairway_spec::{PriorityRef, SourceFormat};

use crate::support::*;

const BUSY_JOB: &str = r#"apiVersion: batch/v1
kind: Job
metadata:
  name: train
  namespace: ads
  uid: 0b5e-11
  labels:
    app: ctr
    fairway.dev/user: alice
  annotations:
    fairway.dev/checkpoint-interval-seconds: "600"
    fairway.dev/preemptible: "false"
    owner: team-ads
spec:
  parallelism: 4
  completions: 4
  backoffLimit: 2
  activeDeadlineSeconds: 7200
  template:
    metadata:
      labels: { app: ctr }
    spec:
      priorityClassName: high
      terminationGracePeriodSeconds: 60
      nodeSelector:
        nvidia.com/gpu.product: A100
        zone: a
      restartPolicy: Never
      volumes: [{ name: data, emptyDir: {} }]
      containers:
      - name: trainer
        image: img:1
        imagePullPolicy: Always
        workingDir: /workspace
        command: [python, train.py]
        args: [--epochs, "3"]
        env:
        - { name: EPOCHS, value: "3" }
        - name: POD
          valueFrom: { fieldRef: { fieldPath: metadata.name } }
        resources:
          limits: { nvidia.com/gpu: 2, cpu: "8", memory: 64Gi, ephemeral-storage: 10Gi }
          requests: { cpu: 4000m, memory: 32Gi }
        volumeMounts: [{ name: data, mountPath: /data }]
      - name: sidecar
        image: logger:1
        command: [tail]
        workingDir: /var/log
        env: [{ name: A, value: b }]
        resources:
          limits: { nvidia.com/gpu: 1, cpu: 500m, memory: 512Mi }
status: {}
"#;

#[test]
fn every_unused_field_is_a_warning_with_its_path() {
    let parsed = parse_ok(BUSY_JOB);
    let warned: Vec<&str> = parsed.warnings.iter().map(|w| w.path.as_str()).collect();
    assert_eq!(
        warned,
        [
            "metadata.labels.app",
            "metadata.annotations.owner",
            "metadata.uid",
            "spec.template.metadata",
            "spec.template.spec.nodeSelector.zone",
            "spec.template.spec.containers[0].env[1].valueFrom",
            "spec.template.spec.containers[0].resources.limits.ephemeral-storage",
            "spec.template.spec.containers[0].imagePullPolicy",
            "spec.template.spec.containers[0].volumeMounts",
            "spec.template.spec.containers[1].command",
            "spec.template.spec.containers[1].env",
            "spec.template.spec.containers[1].image",
            "spec.template.spec.containers[1].workingDir",
            "spec.template.spec.restartPolicy",
            "spec.template.spec.volumes",
            "spec.completions",
            "status",
        ]
    );
    assert!(parsed.warnings.iter().all(|w| w.document == 1));
    assert!(
        parsed
            .warnings
            .iter()
            .filter(|w| !w.path.ends_with("valueFrom"))
            .all(|w| w.message == "ignored: fairway does not use this field")
    );
    assert_eq!(parsed.warnings[5].message, "ignored: fairway does not use this field (the variable is not set)");
}

#[test]
fn every_used_field_is_read() {
    let parsed = parse_ok(BUSY_JOB);
    let [job] = parsed.jobs.as_slice() else { panic!("{parsed:?}") };
    assert_eq!(job.name, "train");
    assert_eq!(job.project, "ads");
    assert_eq!(job.user, "alice");
    assert_eq!(job.priority, PriorityRef::Class("high".into()));
    // GPUs and requests add up over containers; a request wins over a limit.
    assert_eq!(job.resources.gpus, 3);
    assert_eq!(job.resources.cpu_millis, 4500);
    assert_eq!(job.resources.memory_mib, 32 * 1024 + 512);
    assert_eq!(job.resources.gpu_model.as_deref(), Some("A100"));
    assert_eq!(job.replicas, 4);
    assert_eq!(job.image.as_deref(), Some("img:1"));
    assert_eq!(job.command, ["python", "train.py", "--epochs", "3"]);
    assert_eq!(job.env, BTreeMap::from([("EPOCHS".to_owned(), "3".to_owned())]));
    assert_eq!(job.working_dir.as_deref(), Some("/workspace"));
    assert_eq!(job.max_runtime_seconds, Some(7200));
    assert_eq!(job.retries, 2);
    assert!(!job.preemptible);
    assert_eq!(job.preemption_grace_seconds, 60);
    assert_eq!(job.checkpoint_interval_seconds, Some(600));
    assert_eq!(job.origin.format, SourceFormat::KubernetesJob);
    // Several containers ask for GPUs: later checks point at the container list.
    assert_eq!(job.origin.path(fairway_spec::Field::Gpus), "spec.template.spec.containers");
}

#[test]
fn fairway_keys_in_the_pod_template_get_a_pointed_warning() {
    let input = BUSY_JOB.replace("labels: { app: ctr }", "labels: { fairway.dev/user: bob }");
    let parsed = parse_ok(&input);
    let w = parsed.warnings.iter().find(|w| w.path == "spec.template.metadata").unwrap();
    assert!(w.message.contains("from the Job's metadata, not the pod template's"), "{w}");
    assert_eq!(parsed.jobs[0].user, "alice");
}

#[test]
fn user_comes_from_the_annotation_or_else_the_namespace() {
    let annotated = BUSY_JOB
        .replace("    fairway.dev/user: alice\n", "")
        .replace("    owner: team-ads\n", "    fairway.dev/user: carol\n");
    assert_eq!(parse_ok(&annotated).jobs[0].user, "carol");
    let anonymous = BUSY_JOB.replace("    fairway.dev/user: alice\n", "");
    assert_eq!(parse_ok(&anonymous).jobs[0].user, "ads");
    let conflicting = BUSY_JOB.replace("    owner: team-ads\n", "    fairway.dev/user: carol\n");
    let errors = parse_err(&conflicting);
    assert_eq!(errors.0[0].path, r#"metadata.annotations["fairway.dev/user"]"#);
    assert!(errors.0[0].reason.contains("conflicts with the label"), "{errors}");
}

#[test]
fn priority_class_metadata_fairway_does_not_use_is_warned() {
    let input = ARTICLE_CLASS.replace("  name: high-priority\n", "  name: high-priority\n  labels: { tier: gold }\n")
        + "status: {}\n";
    let parsed = parse_ok(&input);
    let warned: Vec<&str> = parsed.warnings.iter().map(|w| w.path.as_str()).collect();
    assert_eq!(warned, ["metadata.labels", "status"]);
}

#[test]
fn native_jobs_have_no_warnings_and_reject_unknown_fields() {
    assert!(parse_ok(NATIVE_JOB).warnings.is_empty());
    let errors = parse_err(&NATIVE_JOB.replace("replicas: 1", "replicas: 1\nrestartPolicy: Never"));
    assert_eq!(errors.0[0].path, "restartPolicy");
}
