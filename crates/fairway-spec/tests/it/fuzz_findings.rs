//! What fuzzing the parser found (`fuzz/README.md` keeps the log), each kept as a test, and
//! the fuzz target's round-trip property on the inputs of this suite.

use fairway_spec::{JobDoc, Origin, ParseLimits, ParseOptions, PriorityRef, parse_documents_with};

use crate::support::*;

fn without_origin(job: &JobDoc) -> JobDoc {
    JobDoc { origin: Origin::default(), ..job.clone() }
}

/// A parsed job written back in the native format, as JSON and as YAML, reads back equal.
fn assert_round_trips(job: &JobDoc, options: &ParseOptions) {
    let json = serde_json::to_string(job).unwrap();
    let yaml = serde_saphyr::to_string(job).unwrap();
    for text in [json, yaml] {
        let again = match parse_documents_with(text.as_bytes(), &ParseLimits::default(), options) {
            Ok(parsed) => parsed.jobs,
            Err(e) => panic!("{} written back does not read back: {e}\n{text}", job.name),
        };
        assert_eq!(again.iter().map(without_origin).collect::<Vec<_>>(), [without_origin(job)], "{text}");
    }
}

#[test]
fn an_empty_kubernetes_priority_class_name_means_the_default_class() {
    // Found 2026-12-02: `priorityClassName: ""` became a class named "", which the native
    // format (rightly) refuses, so the job did not survive being stored and read back.
    // Kubernetes treats an empty name as none.
    let input = ARTICLE_JOB.replace("priorityClassName: high-priority", "priorityClassName: \"\"");
    let job = &parse_ok(&input).jobs[0];
    assert_eq!(job.priority, PriorityRef::Default);
    assert_round_trips(job, &ParseOptions::default());
}

#[test]
fn jobs_of_every_shape_round_trip_through_the_native_format() {
    let kube_everything = r##"apiVersion: batch/v1
kind: Job
metadata:
  name: everything
  namespace: ads
  labels: { fairway.dev/user: alice }
  annotations: { fairway.dev/checkpoint-interval-seconds: "600", fairway.dev/preemptible: "false" }
spec:
  parallelism: 2
  backoffLimit: 0
  activeDeadlineSeconds: 7200
  template:
    spec:
      priorityClassName: high
      terminationGracePeriodSeconds: 0
      nodeSelector: { nvidia.com/gpu.product: A100 }
      containers:
      - image: "localhost:5000/team/img:v1"
        command: ["yes", "010", "1_000", "~", ".nan", "- a", "a: b", "#x", "\t", "\u0085", ""]
        args: ["--flag"]
        workingDir: /work
        env: [{ name: NO, value: "no" }, { name: EMPTY }]
        resources: { limits: { nvidia.com/gpu: 1, cpu: 1500m, memory: 1G } }
      - image: sidecar
        resources: { limits: { nvidia.com/gpu: 1 } }
"##;
    let native_everything = format!(
        "{NATIVE_JOB}shell: false\nimage_optional: true\nworking_dir: /a b\nretries: 100\npreemption_policy: Never\n"
    );
    let inputs = [
        NATIVE_JOB.to_owned(),
        native_everything,
        native_with("priority", "-2147483648"),
        native_with("command", "[\"echo $HOME | tr a-z A-Z\"]\nshell: true"),
        ARTICLE_JOB.to_owned(),
        kube_everything.to_owned(),
    ];
    for input in &inputs {
        for tenant_required in [true, false] {
            let options = ParseOptions { tenant_required, ..ParseOptions::default() };
            let parsed = parse_documents_with(input.as_bytes(), &ParseLimits::default(), &options).unwrap();
            for job in &parsed.jobs {
                assert_round_trips(job, &options);
            }
        }
    }
    let no_tenant = ParseOptions { tenant_required: false, ..ParseOptions::default() };
    for tenant in ["", "{ project: ads }", "{ user: alice }"] {
        let input = native_with("tenant", tenant);
        let parsed = parse_documents_with(input.as_bytes(), &ParseLimits::default(), &no_tenant).unwrap();
        assert_round_trips(&parsed.jobs[0], &no_tenant);
    }
}
