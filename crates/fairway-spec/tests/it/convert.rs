//! From documents to the core's `JobSpec`, and the serde-friendly embedding of native jobs.

use fairway_core::{AccountId, GpuModel, ImageId, JobId, JobSpec, PreemptionPolicy, Resources};
use fairway_spec::{AccountKind, Interner, JobDoc, PriorityClasses, PriorityRef, load, parse_native_job};
use serde::Deserialize;
use serde_json::json;

use crate::support::*;

/// A share of one GPU: `gpu_milli` alone (or with `gpus: 1`) converts to the core's share,
/// and the document keeps both figures.
#[test]
fn a_share_of_one_gpu_converts_to_a_core_share() {
    for resources in ["{ gpu_milli: 250, cpu_millis: 4000 }", "{ gpus: 1, gpu_milli: 250, cpu_millis: 4000 }"] {
        let input = NATIVE_JOB.replace("{ gpus: 2, gpu_model: A100, cpu_millis: 8000, memory_mib: 65536 }", resources);
        let (jobs, _) = load(input.as_bytes(), &mut PriorityClasses::builtin()).unwrap();
        assert_eq!((jobs[0].doc.resources.gpus, jobs[0].doc.resources.gpu_milli), (1, Some(250)), "{resources}");
        let spec = jobs[0].to_core(JobId(1), &mut Interner::new()).unwrap();
        assert_eq!(spec.per_replica, Resources::share(250, 4000, 0), "{resources}");
        assert_eq!(spec.total().gpu_milli_total(), 250);
    }
}

#[test]
fn a_native_job_converts_field_by_field() {
    let (jobs, warnings) = load(NATIVE_JOB.as_bytes(), &mut PriorityClasses::builtin()).unwrap();
    assert!(warnings.is_empty());
    let mut interner = Interner::new();
    let spec = jobs[0].to_core(JobId(3), &mut interner).unwrap();
    assert_eq!(
        spec,
        JobSpec {
            id: JobId(3),
            user: AccountId(0),
            project: AccountId(1),
            priority: 1_000_000,
            preemption_policy: PreemptionPolicy::PreemptLowerPriority,
            preemptible: true,
            per_replica: Resources::new(2, 8000, 65536),
            gpu_model: Some(GpuModel(0)),
            image: Some(ImageId(0)),
            replicas: 1,
            grace_ms: 30_000,
            max_runtime_ms: Some(7_200_000),
            max_total_runtime_ms: Some(36_000_000),
            runtime_estimate_ms: None,
            checkpoint_interval_ms: Some(600_000),
            min_run_before_preemption_ms: 0,
            preemptions_per_hour_max: None,
            overrides_protection: false,
            preemption_delay_ms: 0,
        }
    );
    assert_eq!(interner.account_name(spec.user), Some((AccountKind::User, "alice")));
    assert_eq!(interner.account_name(spec.project), Some((AccountKind::Project, "ads")));
    assert_eq!(interner.name_of(GpuModel(0)), Some("A100"));
}

#[test]
fn defaults_of_the_native_format() {
    let input = "name: tiny\ntenant: { project: ads }\nresources: { gpus: 1 }\nimage: img:1\n";
    let (jobs, _) = load(input.as_bytes(), &mut PriorityClasses::builtin()).unwrap();
    let doc = &jobs[0].doc;
    assert_eq!(doc.user, "ads");
    assert_eq!(doc.priority, PriorityRef::Default);
    assert_eq!(doc.replicas, 1);
    assert!(doc.command.is_empty());
    assert!(doc.preemptible);
    assert_eq!(doc.preemption_grace_seconds, 30);
    assert_eq!((doc.working_dir.as_deref(), doc.shell, doc.retries, doc.image_optional), (None, false, 0, false));
    assert_eq!((doc.resources.cpu_millis, doc.resources.memory_mib), (0, 0));
    let mut interner = Interner::new();
    let spec = jobs[0].to_core(JobId(0), &mut interner).unwrap();
    // The user defaults to the project's name: the same name, two accounts.
    assert_ne!(spec.user, spec.project);
    assert_eq!(interner.account_name(spec.user), Some((AccountKind::User, "ads")));
    assert_eq!(spec.priority, 100_000);
    assert_eq!(spec.max_runtime_ms, None);
}

#[test]
fn a_shared_interner_keeps_ids_stable_across_jobs() {
    let second = NATIVE_JOB
        .replace("name: ctr-model", "name: two")
        .replace("user: alice", "user: bob")
        .replace("gpu_model: A100", "gpu_model: H100");
    let third = NATIVE_JOB.replace("name: ctr-model", "name: three");
    let input = format!("{NATIVE_JOB}---\n{second}---\n{third}");
    let (jobs, _) = load(input.as_bytes(), &mut PriorityClasses::builtin()).unwrap();
    let mut interner = Interner::new();
    let specs: Vec<JobSpec> =
        jobs.iter().enumerate().map(|(i, j)| j.to_core(JobId(i as u64), &mut interner).unwrap()).collect();
    let ids: Vec<(u32, u32, Option<u16>)> =
        specs.iter().map(|s| (s.user.0, s.project.0, s.gpu_model.map(|m| m.0))).collect();
    // alice=0, ads=1, bob=2; A100=0, H100=1.
    assert_eq!(ids, [(0, 1, Some(0)), (2, 1, Some(1)), (0, 1, Some(0))]);
}

#[test]
fn to_core_on_a_doc_reports_an_unknown_class() {
    let doc = &parse_ok(&NATIVE_JOB.replace("priority: high", "priority: gold")).jobs[0];
    let e = doc.to_core(JobId(1), &PriorityClasses::builtin(), &mut Interner::new()).unwrap_err();
    assert_eq!((e.document, e.path.as_str()), (1, "priority"));
    let ok = parse_ok(NATIVE_JOB).jobs[0].to_core(JobId(1), &PriorityClasses::builtin(), &mut Interner::new()).unwrap();
    assert_eq!(ok.priority, 1_000_000);
}

#[test]
fn gangs_too_large_for_the_core_are_rejected() {
    let input = NATIVE_JOB.replace("gpus: 2", "gpus: 5000000").replace("replicas: 1", "replicas: 1024");
    let errors = parse_err(&input);
    assert_eq!(errors.0[0].path, "resources.gpus");
    assert!(errors.0[0].reason.contains("too large"), "{errors}");
}

/// A scenario file as the simulator might write it: native jobs embedded in a list.
#[derive(Deserialize)]
struct Scenario {
    jobs: Vec<serde_json::Value>,
}

#[test]
fn embedded_native_jobs_report_paths_under_a_prefix() {
    let scenario: Scenario = serde_json::from_value(json!({
        "jobs": [
            { "name": "ok", "tenant": { "project": "ads" }, "resources": { "gpus": 1 }, "image": "img" },
            { "name": "bad", "tenant": { "project": "ads" }, "resources": { "gpus": 0 }, "image": "img" },
        ]
    }))
    .unwrap();
    let results: Vec<_> =
        scenario.jobs.iter().enumerate().map(|(i, v)| parse_native_job(v, 1, &format!("jobs[{i}]"))).collect();
    assert_eq!(results[0].as_ref().map(|j| j.name.as_str()), Ok("ok"));
    let errors = results[1].as_ref().unwrap_err();
    assert_eq!(errors.to_string(), "document 1: jobs[1].resources.gpus: must be a positive integer, got 0");
}

#[test]
fn job_docs_deserialize_with_validation_and_serialize_to_the_native_format() {
    #[derive(Deserialize)]
    struct Typed {
        jobs: Vec<JobDoc>,
    }
    let yaml = format!("jobs:\n- {}", NATIVE_JOB.trim_end().replace('\n', "\n  "));
    let typed: Typed = serde_saphyr::from_str(&yaml).unwrap();
    let original = &typed.jobs[0];
    assert_eq!(original.name, "ctr-model");

    let json = serde_json::to_value(original).unwrap();
    assert_eq!(json["tenant"], json!({ "user": "alice", "project": "ads" }));
    assert_eq!(json["priority"], json!("high"));
    assert_eq!(json["resources"], json!({ "gpus": 2, "gpu_model": "A100", "cpu_millis": 8000, "memory_mib": 65536 }));
    let back = parse_native_job(&json, 0, "").unwrap();
    assert_eq!(&back, original);

    let invalid = serde_json::from_value::<JobDoc>(
        json!({ "name": "x", "tenant": { "project": "p" }, "resources": { "gpus": "two" }, "image": "i" }),
    );
    assert!(invalid.unwrap_err().to_string().contains("resources.gpus: must be a positive integer"));
}
