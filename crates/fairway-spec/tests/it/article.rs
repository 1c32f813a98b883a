//! The article's PriorityClass and Job, exactly as published.

use fairway_core::{JobId, PreemptionPolicy};
use fairway_spec::{AccountKind, Interner, PreemptionPolicyDoc, PriorityClasses, PriorityRef, SourceFormat, load};

use crate::support::*;

#[test]
fn article_priority_class_parses_to_its_values() {
    let parsed = parse_ok(ARTICLE_CLASS);
    assert!(parsed.jobs.is_empty());
    assert_eq!(parsed.warnings, vec![]);
    let [class] = parsed.priority_classes.as_slice() else { panic!("one class expected: {parsed:?}") };
    assert_eq!(class.name, "high-priority");
    assert_eq!(class.value, 1_000_000);
    assert!(!class.global_default);
    assert_eq!(class.preemption_policy, PreemptionPolicyDoc::PreemptLowerPriority);
    assert_eq!(class.description.as_deref(), Some("用于关键业务模型训练，数值越大优先级越高。"));
    assert_eq!(class.origin.document, 1);
    assert_eq!(class.origin.format, SourceFormat::KubernetesPriorityClass);
}

#[test]
fn article_job_parses_to_the_expected_model() {
    let parsed = parse_ok(ARTICLE_JOB);
    let [job] = parsed.jobs.as_slice() else { panic!("one job expected: {parsed:?}") };
    assert_eq!(job.name, "paddle-high-priority-training");
    assert_eq!(job.project, "default");
    assert_eq!(job.user, "default");
    assert_eq!(job.priority, PriorityRef::Class("high-priority".into()));
    assert_eq!(job.resources.gpus, 1);
    assert_eq!(job.resources.gpu_model, None);
    assert_eq!(job.resources.cpu_millis, 0);
    assert_eq!(job.resources.memory_mib, 0);
    assert_eq!(job.replicas, 1);
    assert_eq!(job.image.as_deref(), Some("registry.baidubce.com/paddlepaddle/paddle:2.6-gpu-cuda11.8-cudnn8"));
    assert_eq!(job.command, ["python", "train_ctr.py"]);
    assert!(job.env.is_empty());
    assert!(job.preemptible);
    assert_eq!(job.preemption_grace_seconds, 30);
    assert_eq!(job.max_runtime_seconds, None);
    // No backoffLimit: Kubernetes's default of 6 retries, not the native 0.
    assert_eq!(job.retries, 6);
    assert_eq!(job.working_dir, None);
    assert!(!job.shell);
    assert!(!job.image_optional);
    assert_eq!(job.origin.format, SourceFormat::KubernetesJob);
    // restartPolicy is the one field of the article's Job that fairway does not use.
    let warned: Vec<&str> = parsed.warnings.iter().map(|w| w.path.as_str()).collect();
    assert_eq!(warned, ["spec.template.spec.restartPolicy"]);
}

#[test]
fn article_job_alone_names_an_unknown_class() {
    let errors = load(ARTICLE_JOB.as_bytes(), &mut PriorityClasses::builtin()).unwrap_err();
    let [e] = errors.0.as_slice() else { panic!("{errors}") };
    assert_eq!(e.document, 1);
    assert_eq!(e.path, "spec.template.spec.priorityClassName");
    assert!(e.reason.contains(r#"unknown priority class "high-priority""#), "{e}");
    assert!(e.reason.contains("critical, high, medium, low"), "{e}");
}

#[test]
fn article_class_and_job_in_one_file_resolve_and_convert() {
    let input = format!("{ARTICLE_CLASS}---\n{ARTICLE_JOB}");
    let mut classes = PriorityClasses::builtin();
    let (jobs, warnings) = load(input.as_bytes(), &mut classes).unwrap();
    assert_eq!(warnings.len(), 1);
    assert_eq!(warnings[0].document, 2);
    assert_eq!(
        warnings[0].to_string(),
        "document 2: spec.template.spec.restartPolicy: ignored: fairway does not use this field"
    );
    let [job] = jobs.as_slice() else { panic!("{jobs:?}") };
    assert_eq!(job.priority, 1_000_000);
    assert_eq!(job.priority_class.as_deref(), Some("high-priority"));
    assert_eq!(job.preemption_policy, PreemptionPolicy::PreemptLowerPriority);
    assert_eq!(classes.resolve("high-priority").map(|c| c.value), Some(1_000_000));

    let mut interner = Interner::new();
    let spec = job.to_core(JobId(7), &mut interner).unwrap();
    assert_eq!(spec.id, JobId(7));
    assert_eq!(spec.priority, 1_000_000);
    assert_eq!(spec.per_replica.gpus, 1);
    assert_eq!(spec.replicas, 1);
    assert_eq!(spec.grace_ms, 30_000);
    assert_eq!(spec.gpu_model, None);
    // The user defaults to the namespace's name, but users and projects are separate
    // account namespaces: two accounts.
    assert_eq!(interner.account_name(spec.project), Some((AccountKind::Project, "default")));
    assert_eq!(interner.account_name(spec.user), Some((AccountKind::User, "default")));
    assert_ne!(spec.user, spec.project);
}
