//! The priority class registry: built-ins, the global default, user classes.

use fairway_core::PreemptionPolicy;
use fairway_spec::{
    ParseLimits, PreemptionPolicyDoc, PreemptionProtection, PriorityClasses, ResolvedJob, load, parse_documents,
    parse_priority_class,
};
use serde_json::json;

use crate::support::*;

fn none() -> PreemptionProtection {
    PreemptionProtection::default()
}

/// A one-GPU job at `priority` (a class name or a bare value), resolved with `classes`.
fn job_at(priority: &str, classes: &mut PriorityClasses) -> ResolvedJob {
    let doc = format!(
        "name: j\ntenant: {{ user: u, project: p }}\npriority: {priority}\nresources: {{ gpus: 1 }}\ncommand: [\"true\"]\n"
    );
    let (mut jobs, _) = load(doc.as_bytes(), classes).unwrap();
    jobs.remove(0)
}

fn names_and_values(classes: &PriorityClasses) -> Vec<(String, i32)> {
    classes.iter().map(|c| (c.name.clone(), c.value)).collect()
}

#[test]
fn built_in_classes_and_their_default() {
    let classes = PriorityClasses::builtin();
    assert_eq!(
        names_and_values(&classes),
        [
            ("critical".into(), 10_000_000),
            ("high".into(), 1_000_000),
            ("medium".into(), 100_000),
            ("low".into(), 1_000)
        ]
    );
    assert_eq!(classes.default_class().name, "medium");
    assert_eq!(classes.iter().filter(|c| c.global_default).count(), 1);
    assert!(classes.iter().all(|c| c.builtin && c.preemption_policy == PreemptionPolicy::PreemptLowerPriority));
    assert_eq!(classes.resolve("high").map(|c| c.value), Some(1_000_000));
    assert!(classes.resolve("High").is_none());
    assert_eq!(PriorityClasses::default(), classes);
}

#[test]
fn a_job_without_a_class_gets_the_default() {
    let input = NATIVE_JOB.replace("priority: high\n", "");
    let (jobs, _) = load(input.as_bytes(), &mut PriorityClasses::builtin()).unwrap();
    assert_eq!(jobs[0].priority, 100_000);
    assert_eq!(jobs[0].priority_class.as_deref(), Some("medium"));
}

#[test]
fn user_classes_sort_by_value_then_name() {
    let input = "apiVersion: fairway/v1\nkind: PriorityClass\nname: b-tie\nvalue: 1000\n---\napiVersion: fairway/v1\nkind: PriorityClass\nname: a-tie\nvalue: 1000\n---\napiVersion: fairway/v1\nkind: PriorityClass\nname: floor\nvalue: -5\n";
    let mut classes = PriorityClasses::builtin();
    load(input.as_bytes(), &mut classes).unwrap();
    let names: Vec<String> = names_and_values(&classes).into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["critical", "high", "medium", "a-tie", "b-tie", "low", "floor"]);
    assert!(!classes.resolve("a-tie").unwrap().builtin);
}

#[test]
fn a_new_global_default_replaces_the_old_one() {
    let class = ARTICLE_CLASS.replace("globalDefault: false", "globalDefault: true");
    let input = format!("{class}---\n{}", NATIVE_JOB.replace("priority: high\n", ""));
    let mut classes = PriorityClasses::builtin();
    let (jobs, _) = load(input.as_bytes(), &mut classes).unwrap();
    assert_eq!(classes.default_class().name, "high-priority");
    assert!(!classes.resolve("medium").unwrap().global_default);
    assert_eq!(classes.iter().filter(|c| c.global_default).count(), 1);
    assert_eq!(jobs[0].priority_class.as_deref(), Some("high-priority"));
}

#[test]
fn two_global_defaults_in_one_input_are_an_error() {
    let a = ARTICLE_CLASS.replace("globalDefault: false", "globalDefault: true");
    let b = a.replace("high-priority", "also-default");
    let mut classes = PriorityClasses::builtin();
    let errors = load(format!("{a}---\n{b}").as_bytes(), &mut classes).unwrap_err();
    let [e] = errors.0.as_slice() else { panic!("{errors}") };
    assert_eq!((e.document, e.path.as_str()), (2, "globalDefault"));
    assert_eq!(classes.default_class().name, "medium");
}

#[test]
fn reloading_the_same_classes_is_harmless_and_redefining_is_not() {
    let mut classes = PriorityClasses::builtin();
    load(ARTICLE_CLASS.as_bytes(), &mut classes).unwrap();
    let after_first = classes.clone();
    load(ARTICLE_CLASS.as_bytes(), &mut classes).unwrap();
    assert_eq!(classes, after_first);
    let errors = load(ARTICLE_CLASS.replace("1000000", "7").as_bytes(), &mut classes).unwrap_err();
    assert!(errors.0[0].reason.contains("already defined with value 1000000"), "{errors}");
    assert_eq!(classes, after_first);
}

#[test]
fn the_class_decides_the_preemption_policy_unless_the_job_overrides() {
    let never = "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: { name: polite }\nvalue: 5000\npreemptionPolicy: Never\n";
    let job = NATIVE_JOB.replace("priority: high", "priority: polite");
    let overriding = job.replace("name: ctr-model", "name: pushy") + "preemption_policy: PreemptLowerPriority\n";
    let bare_value = job.replace("name: ctr-model", "name: bare").replace("priority: polite", "priority: 4242");
    let input = format!("{never}---\n{job}---\n{overriding}---\n{bare_value}");
    let (jobs, _) = load(input.as_bytes(), &mut PriorityClasses::builtin()).unwrap();
    let got: Vec<(i32, PreemptionPolicy, Option<&str>)> =
        jobs.iter().map(|j| (j.priority, j.preemption_policy, j.priority_class.as_deref())).collect();
    assert_eq!(
        got,
        [
            (5000, PreemptionPolicy::Never, Some("polite")),
            (5000, PreemptionPolicy::PreemptLowerPriority, Some("polite")),
            (4242, PreemptionPolicy::PreemptLowerPriority, None),
        ]
    );
}

#[test]
fn classes_from_a_config_use_the_compact_form() {
    let config = json!([
        { "name": "batch", "value": 500, "preemptionPolicy": "Never", "description": "overnight" },
        { "name": "urgent", "value": 5_000_000, "globalDefault": true },
    ]);
    let docs: Vec<_> = config
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
        .map(|(i, v)| parse_priority_class(v, 1, &format!("priority_classes[{i}]")).unwrap())
        .collect();
    assert_eq!(docs[0].preemption_policy, PreemptionPolicyDoc::Never);
    assert_eq!(docs[0].description.as_deref(), Some("overnight"));
    let mut classes = PriorityClasses::builtin();
    classes.register_all(&docs).unwrap();
    assert_eq!(classes.default_class().name, "urgent");
    assert_eq!(classes.resolve("batch").unwrap().preemption_policy, PreemptionPolicy::Never);

    let bad = json!({ "name": "x", "value": 2_000_000_000_i64, "globalDefualt": true });
    let errors = parse_priority_class(&bad, 1, "priority_classes[2]").unwrap_err();
    let paths: Vec<&str> = errors.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(paths, ["priority_classes[2].value", "priority_classes[2].globalDefualt"]);
}

#[test]
fn priority_class_docs_round_trip_through_serde() {
    let doc =
        parse_priority_class(&json!({ "name": "batch", "value": 500, "preemptionPolicy": "Never" }), 1, "").unwrap();
    let text = serde_json::to_string(&doc).unwrap();
    assert_eq!(text, r#"{"name":"batch","value":500,"globalDefault":false,"preemptionPolicy":"Never"}"#);
    let back: fairway_spec::PriorityClassDoc = serde_json::from_str(&text).unwrap();
    assert_eq!((back.name, back.value, back.preemption_policy), (doc.name, doc.value, doc.preemption_policy));
    let invalid = serde_json::from_str::<fairway_spec::PriorityClassDoc>(r#"{"name":"Bad Name","value":1}"#);
    assert!(invalid.unwrap_err().to_string().contains("name: must match"));
}

#[test]
fn drivers_can_add_classes_field_by_field() {
    let mut classes = PriorityClasses::with_builtins();
    classes.add("nightly", 500, false, PreemptionPolicy::Never, none(), "overnight batch").unwrap();
    let nightly = classes.resolve_priority("nightly").unwrap();
    assert_eq!((nightly.value, nightly.preemption_policy), (500, PreemptionPolicy::Never));
    assert_eq!(nightly.description, "overnight batch");
    assert!(
        classes.add("high", 3, false, PreemptionPolicy::Never, none(), "").unwrap_err().contains("already defined")
    );
    assert!(classes.add("Bad", 3, false, PreemptionPolicy::Never, none(), "").unwrap_err().contains("must match"));
    assert!(
        classes
            .add("huge", i32::MAX, false, PreemptionPolicy::Never, none(), "")
            .unwrap_err()
            .contains("at most 1000000000")
    );
    classes.add("everyday", 200_000, true, PreemptionPolicy::PreemptLowerPriority, none(), "").unwrap();
    assert_eq!(classes.default_class().name, "everyday");
    let miss = classes.resolve_priority("gold").unwrap_err();
    assert_eq!(miss, r#"unknown priority class "gold"; known classes: critical, high, everyday, medium, low, nightly"#);
}

#[test]
fn a_class_carries_rule_1_protection_in_both_forms() {
    let compact = json!({
        "name": "batch", "value": 500, "minRunBeforePreemptionSeconds": 300, "preemptionsPerHourMax": 3
    });
    let doc = parse_priority_class(&compact, 1, "").unwrap();
    let want = PreemptionProtection { min_run_seconds: 300, preemptions_per_hour_max: Some(3), ..none() };
    assert_eq!(doc.protection, want);
    let text = serde_json::to_string(&doc).unwrap();
    assert!(text.contains(r#""minRunBeforePreemptionSeconds":300,"preemptionsPerHourMax":3"#), "{text}");
    let back: fairway_spec::PriorityClassDoc = serde_json::from_str(&text).unwrap();
    assert_eq!(back.protection, want);

    let kube = b"apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata:\n  name: batch\n  annotations:\n    fairway.dev/min-run-before-preemption-seconds: \"300\"\n    fairway.dev/preemptions-per-hour-max: \"3\"\n    team: ads\nvalue: 500\n";
    let parsed = parse_documents(kube, &ParseLimits::default()).unwrap();
    assert_eq!(parsed.priority_classes[0].protection, want);
    let warned: Vec<&str> = parsed.warnings.iter().map(|w| w.path.as_str()).collect();
    assert_eq!(warned, ["metadata.annotations.team"], "only the annotation fairway does not use is ignored");

    // A job of the class gets it; a job with a bare value gets none.
    let mut classes = PriorityClasses::builtin();
    classes.register(&doc).unwrap();
    assert_eq!(job_at("batch", &mut classes).protection, want);
    assert_eq!(job_at("500", &mut classes).protection, none());

    // Registering it again with another protection is a redefinition.
    let other =
        parse_priority_class(&json!({ "name": "batch", "value": 500, "minRunBeforePreemptionSeconds": 60 }), 1, "")
            .unwrap();
    let err = classes.register(&other).unwrap_err();
    assert!(err.reason.contains("a minimum run of 300 s and at most 3 preemptions an hour"), "{}", err.reason);
}

#[test]
fn bad_protection_names_the_field_and_the_reason() {
    let cases: [(serde_json::Value, &str, &str); 6] = [
        (
            json!({ "name": "b", "value": 1, "preemptionDelaySeconds": 90000 }),
            "preemptionDelaySeconds",
            "from 0 to 86400",
        ),
        (
            json!({ "name": "b", "value": 1, "preemptionDelaySeconds": "10s" }),
            "preemptionDelaySeconds",
            "preemptionPolicy: Never",
        ),
        (json!({ "name": "b", "value": 1, "preemptionsPerHourMax": 0 }), "preemptionsPerHourMax", "preemptible: false"),
        (json!({ "name": "b", "value": 1, "preemptionsPerHourMax": 5000 }), "preemptionsPerHourMax", "from 1 to 3600"),
        (
            json!({ "name": "b", "value": 1, "minRunBeforePreemptionSeconds": -1 }),
            "minRunBeforePreemptionSeconds",
            "from 0 to 604800",
        ),
        (
            json!({ "name": "b", "value": 1, "minRunBeforePreemptionSeconds": 1e9 }),
            "minRunBeforePreemptionSeconds",
            "from 0 to 604800",
        ),
    ];
    for (input, path, reason) in cases {
        let errors = parse_priority_class(&input, 1, "").unwrap_err();
        assert_eq!(errors.0.len(), 1, "{input}: {errors}");
        assert_eq!(errors.0[0].path, path, "{input}");
        assert!(errors.0[0].reason.contains(reason), "{input}: {}", errors.0[0].reason);
    }
    let kube = b"apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata:\n  name: b\n  annotations:\n    fairway.dev/preemptions-per-hour-max: \"lots\"\nvalue: 5\n";
    let errors = parse_documents(kube, &ParseLimits::default()).unwrap_err();
    assert_eq!(errors.0[0].path, r#"metadata.annotations["fairway.dev/preemptions-per-hour-max"]"#);
    assert!(errors.0[0].reason.contains(r#"got "lots""#), "{}", errors.0[0].reason);
    // Drivers that hold annotations as a map get the annotation's name in the reason.
    let err = fairway_spec::protection_from_annotations(|k| (k == fairway_spec::MIN_RUN_ANNOTATION).then_some("1w"))
        .unwrap_err();
    assert!(err.starts_with("annotation fairway.dev/min-run-before-preemption-seconds: "), "{err}");
    let mut classes = PriorityClasses::builtin();
    let bad = PreemptionProtection { preemptions_per_hour_max: Some(0), ..none() };
    let err = classes.add("b", 5, false, PreemptionPolicy::PreemptLowerPriority, bad, "").unwrap_err();
    assert!(err.starts_with("preemptionsPerHourMax: "), "{err}");
}

#[test]
fn a_built_in_class_may_be_given_a_protection_once() {
    let mut classes = PriorityClasses::builtin();
    let guard = PreemptionProtection { min_run_seconds: 30, preemptions_per_hour_max: Some(2), ..none() };
    classes.add("low", 1_000, false, PreemptionPolicy::PreemptLowerPriority, guard, "").unwrap();
    assert_eq!(classes.resolve("low").unwrap().protection, guard);
    assert!(classes.resolve("low").unwrap().builtin);
    // The same again is harmless; another protection, or another value, is a redefinition.
    classes.add("low", 1_000, false, PreemptionPolicy::PreemptLowerPriority, guard, "").unwrap();
    let other = PreemptionProtection { min_run_seconds: 60, ..guard };
    let err = classes.add("low", 1_000, false, PreemptionPolicy::PreemptLowerPriority, other, "").unwrap_err();
    assert!(err.contains("already defined"), "{err}");
    let err = classes.add("medium", 5, false, PreemptionPolicy::PreemptLowerPriority, guard, "").unwrap_err();
    assert!(err.contains("already defined"), "{err}");
}

#[test]
fn critical_overrides_protection_and_any_class_may_be_told_to() {
    let classes = PriorityClasses::builtin();
    let critical = classes.resolve("critical").unwrap().protection;
    assert!(critical.overrides_protection && critical.min_run_seconds == 0);
    assert!(classes.iter().filter(|c| c.name != "critical").all(|c| c.protection.is_none()));
    let doc =
        parse_priority_class(&json!({ "name": "urgent", "value": 9, "overridesProtection": true }), 1, "").unwrap();
    assert!(doc.protection.overrides_protection);
    let text = serde_json::to_string(&doc).unwrap();
    assert!(text.contains(r#""overridesProtection":true"#), "{text}");
    let kube = b"apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata:\n  name: urgent\n  annotations:\n    fairway.dev/overrides-preemption-protection: \"true\"\nvalue: 9\n";
    let parsed = parse_documents(kube, &ParseLimits::default()).unwrap();
    assert!(parsed.priority_classes[0].protection.overrides_protection);
    let bad = b"apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata:\n  name: urgent\n  annotations:\n    fairway.dev/overrides-preemption-protection: \"yes\"\nvalue: 9\n";
    let errors = parse_documents(bad, &ParseLimits::default()).unwrap_err();
    assert!(errors.0[0].reason.contains(r#"must be "true" or "false", got "yes""#), "{}", errors.0[0].reason);
    // The built-in critical may be given a minimum run once, as the others may.
    let mut classes = PriorityClasses::builtin();
    let guard = PreemptionProtection { min_run_seconds: 60, ..PreemptionProtection::overriding() };
    classes.add("critical", 10_000_000, false, PreemptionPolicy::PreemptLowerPriority, guard, "").unwrap();
    assert_eq!(classes.resolve("critical").unwrap().protection, guard);
}

#[test]
fn a_class_may_delay_its_jobs_preemptions_in_every_form() {
    let doc =
        parse_priority_class(&json!({ "name": "batch", "value": 500, "preemptionDelaySeconds": 20 }), 1, "").unwrap();
    let want = PreemptionProtection { preemption_delay_seconds: 20, ..none() };
    assert_eq!(doc.protection, want);
    let text = serde_json::to_string(&doc).unwrap();
    assert!(text.contains(r#""preemptionDelaySeconds":20"#), "{text}");
    let back: fairway_spec::PriorityClassDoc = serde_json::from_str(&text).unwrap();
    assert_eq!(back.protection, want);

    let kube = b"apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata:\n  name: batch\n  annotations:\n    fairway.dev/preemption-delay-seconds: \"20\"\nvalue: 500\n";
    let parsed = parse_documents(kube, &ParseLimits::default()).unwrap();
    assert_eq!(parsed.priority_classes[0].protection, want);
    assert!(parsed.warnings.is_empty(), "{:?}", parsed.warnings);
    let bad = b"apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata:\n  name: batch\n  annotations:\n    fairway.dev/preemption-delay-seconds: \"2d\"\nvalue: 500\n";
    let errors = parse_documents(bad, &ParseLimits::default()).unwrap_err();
    assert_eq!(errors.0[0].path, r#"metadata.annotations["fairway.dev/preemption-delay-seconds"]"#);
    let err = fairway_spec::protection_from_annotations(|k| {
        (k == fairway_spec::PREEMPTION_DELAY_ANNOTATION).then_some("86401")
    })
    .unwrap_err();
    assert!(err.starts_with("annotation fairway.dev/preemption-delay-seconds: must be"), "{err}");

    // A job of the class gets it, in milliseconds in the core's spec.
    let mut classes = PriorityClasses::builtin();
    classes.register(&doc).unwrap();
    let job = job_at("batch", &mut classes);
    assert_eq!(job.protection, want);
    let core = job.to_core(fairway_core::JobId(1), &mut fairway_spec::Interner::new()).unwrap();
    assert_eq!(core.preemption_delay_ms, 20_000);
    // Described in the registry's own words.
    let other = parse_priority_class(&json!({ "name": "batch", "value": 500 }), 1, "").unwrap();
    let err = classes.register(&other).unwrap_err();
    assert!(err.reason.contains("preempts after 20 s of waiting"), "{}", err.reason);
}
