//! Every problem of every document at once: errors in one field do not hide errors in
//! another, and priority classes are resolved even in documents that have other errors.

use fairway_spec::{
    ParseLimits, ParseOptions, PriorityClasses, PriorityRef, ResolvedInput, SpecErrors, load, parse_and_resolve,
};

use crate::support::*;

const GPU_LIMIT: &str = r#"spec.template.spec.containers[0].resources.limits["nvidia.com/gpu"]"#;
const CLASS_NAME: &str = "spec.template.spec.priorityClassName";

fn resolve(input: &str, classes: &PriorityClasses) -> Result<ResolvedInput, SpecErrors> {
    parse_and_resolve(input.as_bytes(), &ParseLimits::default(), classes, &ParseOptions::default())
}

fn located(errors: &SpecErrors) -> Vec<(usize, &str)> {
    errors.iter().map(|e| (e.document, e.path.as_str())).collect()
}

#[test]
fn every_env_entry_is_checked_whatever_the_others_hold() {
    let input = native_with("env", r#"{ A: 1, FAIRWAY_X: "y", "1B": "z", CUDA_VISIBLE_DEVICES: true, OK: "fine" }"#);
    let errors = parse_err(&input);
    let env_errors: Vec<(&str, &str)> = errors.iter().map(|e| (e.path.as_str(), e.reason.as_str())).collect();
    assert_eq!(
        env_errors,
        [
            (r#"env["1B"]"#, r#"environment variable name must match [A-Za-z_][A-Za-z0-9_]*, got "1B""#),
            ("env.A", r#"must be a string (quote numbers and booleans, e.g. "3"), got 1"#),
            (
                "env.CUDA_VISIBLE_DEVICES",
                r#"environment variable "CUDA_VISIBLE_DEVICES" is reserved: the server sets it to the GPUs it assigns to the job"#
            ),
            ("env.CUDA_VISIBLE_DEVICES", r#"must be a string (quote numbers and booleans, e.g. "3"), got true"#),
            (
                "env.FAIRWAY_X",
                r#"environment variable "FAIRWAY_X" is reserved: the server sets the FAIRWAY_ variables itself"#
            ),
        ]
    );
}

#[test]
fn an_unknown_kubernetes_class_is_reported_with_the_documents_other_errors() {
    let input = article_job_with("nvidia.com/gpu: 1", "nvidia.com/gpu: -1").replace("high-priority", "gold");
    let errors = resolve(&input, &PriorityClasses::builtin()).unwrap_err();
    assert_eq!(located(&errors), [(1, GPU_LIMIT), (1, CLASS_NAME)]);
    assert_eq!(errors.0[1].reason, r#"unknown priority class "gold"; known classes: critical, high, medium, low"#);
}

#[test]
fn an_unknown_native_class_is_reported_with_the_documents_other_errors() {
    let input = native_with("priority", "urgent").replace("replicas: 1", "replicas: 0");
    let errors = resolve(&input, &PriorityClasses::builtin()).unwrap_err();
    assert_eq!(located(&errors), [(1, "priority"), (1, "replicas")]);
    // `load` (the simulator's entry point) reports both as well.
    let loaded = load(input.as_bytes(), &mut PriorityClasses::builtin()).unwrap_err();
    assert_eq!(loaded, errors);
}

#[test]
fn errors_of_all_documents_come_sorted_by_document_then_path() {
    let input = format!(
        "{}---\n{}---\n{}",
        native_with("priority", "gold").replace("gpus: 2", "gpus: 0"),
        article_job_with("high-priority", "silver"),
        native_with("replicas", "0").replace("name: ctr-model", "name: X"),
    );
    let errors = resolve(&input, &PriorityClasses::builtin()).unwrap_err();
    assert_eq!(
        located(&errors),
        [(1, "priority"), (1, "resources.gpus"), (2, CLASS_NAME), (3, "name"), (3, "replicas")]
    );
}

#[test]
fn a_class_defined_in_the_input_is_not_unknown_even_when_it_is_broken() {
    // The class's own error says what is wrong with it; "unknown class" on the job that
    // names it would send the user looking for a typo that is not there.
    let broken_class = ARTICLE_CLASS.replace("value: 1000000", "value: high");
    let job = article_job_with("nvidia.com/gpu: 1", "nvidia.com/gpu: 0");
    let errors = resolve(&format!("{broken_class}---\n{job}"), &PriorityClasses::builtin()).unwrap_err();
    assert_eq!(located(&errors), [(1, "value"), (2, GPU_LIMIT)]);
}

#[test]
fn a_class_that_fails_to_register_is_not_unknown_either() {
    let redefined = ARTICLE_CLASS.replace("high-priority", "high").replace("1000000", "5");
    let job = ARTICLE_JOB.replace("high-priority", "high");
    let errors = resolve(&format!("{redefined}---\n{job}"), &PriorityClasses::builtin()).unwrap_err();
    assert_eq!(located(&errors), [(1, "metadata.name")]);
    assert!(errors.0[0].reason.contains("cannot be redefined"), "{errors}");
}

#[test]
fn resolving_uses_the_registry_given_and_returns_it_with_the_inputs_classes() {
    let mut registry = PriorityClasses::builtin();
    registry.add("gold", 5_000, false, fairway_core::PreemptionPolicy::Never, Default::default(), "").unwrap();
    let input = format!("{ARTICLE_CLASS}---\n{ARTICLE_JOB}---\n{}", native_with("priority", "gold"));
    let resolved = resolve(&input, &registry).unwrap();
    let priorities: Vec<(i32, Option<&str>)> =
        resolved.jobs.iter().map(|j| (j.priority, j.priority_class.as_deref())).collect();
    assert_eq!(priorities, [(1_000_000, Some("high-priority")), (5_000, Some("gold"))]);
    assert_eq!(resolved.parsed.jobs.len(), 2);
    assert!(resolved.classes.resolve("high-priority").is_some());
    assert!(registry.resolve("high-priority").is_none(), "the registry given is not changed");
    assert_eq!(resolved.jobs[1].doc.priority, PriorityRef::Class("gold".into()));
}

#[test]
fn a_class_in_a_document_with_errors_is_resolved_against_the_registry_too() {
    let mut registry = PriorityClasses::builtin();
    registry.add("gold", 5_000, false, fairway_core::PreemptionPolicy::Never, Default::default(), "").unwrap();
    let input = native_with("priority", "gold").replace("gpus: 2", "gpus: 0");
    let errors = resolve(&input, &registry).unwrap_err();
    assert_eq!(located(&errors), [(1, "resources.gpus")]);
}
