//! `ParseOptions::cluster()`: Kubernetes runs the Job's container, so the rules about
//! launching it are Kubernetes's own. Each case is refused by default (as the standalone
//! server, which runs the job itself, must) and accepted for a cluster; everything else is
//! read the same either way.

use std::collections::BTreeMap;

use fairway_core::{JobId, PreemptionPolicy, Resources};
use fairway_spec::{
    Interner, JobDoc, ParseLimits, ParseOptions, Parsed, PriorityClasses, SpecErrors, parse_and_resolve,
    parse_documents_with,
};

use crate::support::*;

const CONTAINER_0: &str = "spec.template.spec.containers[0]";
const COMMAND: &str = "        command: [\"python\", \"train_ctr.py\"]\n";

fn parse_with(input: &str, options: &ParseOptions) -> Result<Parsed, SpecErrors> {
    parse_documents_with(input.as_bytes(), &ParseLimits::default(), options)
}

fn cluster_job(input: &str) -> (JobDoc, Parsed) {
    match parse_with(input, &ParseOptions::cluster()) {
        Ok(parsed) if parsed.jobs.len() == 1 => (parsed.jobs[0].clone(), parsed),
        other => panic!("expected one job for a cluster, got {other:?}\n{input}"),
    }
}

/// The article's Job with its container's `command` line replaced by `lines`.
fn container_with(lines: &str) -> String {
    article_job_with(COMMAND, lines)
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

fn env_of(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
}

/// A Job the standalone server refuses and Kubernetes runs.
struct Case {
    what: &'static str,
    input: String,
    /// The default reading's errors, exactly.
    refused: Vec<String>,
    /// What the cluster reading yields.
    check: fn(&JobDoc),
}

fn cases() -> Vec<Case> {
    let sha512 = format!("busybox@sha512:{}", "ab".repeat(64));
    vec![
        Case {
            what: "args without command: the image's entrypoint runs with them",
            input: container_with("        args: [\"--epochs\", \"3\"]\n"),
            refused: strings(&[
                "spec.template.spec.containers[0].args: args without command is not supported: fairway runs an explicit argv, not the image's entrypoint; add command",
            ]),
            check: |job| {
                assert!(job.command.is_empty());
                assert!(job.image.as_deref().unwrap().starts_with("registry.baidubce.com/"));
            },
        },
        Case {
            what: "env names the standalone server sets itself",
            input: container_with(&format!(
                "{COMMAND}        env:\n        - {{ name: CUDA_VISIBLE_DEVICES, value: \"0,1\" }}\n        - {{ name: NVIDIA_VISIBLE_DEVICES, value: all }}\n        - {{ name: FAIRWAY_JOB_ID, value: \"7\" }}\n"
            )),
            refused: strings(&[
                "spec.template.spec.containers[0].env[0].name: environment variable \"CUDA_VISIBLE_DEVICES\" is reserved: the server sets it to the GPUs it assigns to the job",
                "spec.template.spec.containers[0].env[1].name: environment variable \"NVIDIA_VISIBLE_DEVICES\" is reserved: the server sets it to the GPUs it assigns to the job",
                "spec.template.spec.containers[0].env[2].name: environment variable \"FAIRWAY_JOB_ID\" is reserved: the server sets the FAIRWAY_ variables itself",
            ]),
            check: |job| {
                let expected = env_of(&[
                    ("CUDA_VISIBLE_DEVICES", "0,1"),
                    ("FAIRWAY_JOB_ID", "7"),
                    ("NVIDIA_VISIBLE_DEVICES", "all"),
                ]);
                assert_eq!(job.env, expected);
            },
        },
        Case {
            what: "env names no shell expands, as Kubernetes takes them",
            input: container_with(&format!(
                "{COMMAND}        env:\n        - {{ name: my.env-name, value: a }}\n        - {{ name: 1ST, value: b }}\n"
            )),
            refused: strings(&[
                "spec.template.spec.containers[0].env[0].name: environment variable name must match [A-Za-z_][A-Za-z0-9_]*, got \"my.env-name\"",
                "spec.template.spec.containers[0].env[1].name: environment variable name must match [A-Za-z_][A-Za-z0-9_]*, got \"1ST\"",
            ]),
            check: |job| assert_eq!(job.env, env_of(&[("1ST", "b"), ("my.env-name", "a")])),
        },
        Case {
            what: "a repeated env name: the last value is set",
            input: container_with(&format!(
                "{COMMAND}        env:\n        - {{ name: EPOCHS, value: \"3\" }}\n        - {{ name: EPOCHS, value: \"5\" }}\n"
            )),
            refused: strings(&[
                "spec.template.spec.containers[0].env[1].name: duplicate environment variable \"EPOCHS\"",
            ]),
            check: |job| assert_eq!(job.env, env_of(&[("EPOCHS", "5")])),
        },
        Case {
            what: "a relative working directory, resolved by the container runtime",
            input: container_with(&format!("{COMMAND}        workingDir: data/ctr\n")),
            refused: strings(&[
                "spec.template.spec.containers[0].workingDir: must be an absolute path (starting with /), got \"data/ctr\"",
            ]),
            check: |job| assert_eq!(job.working_dir.as_deref(), Some("data/ctr")),
        },
        Case {
            what: "an image reference the kubelet pulls but docker run's grammar refuses",
            input: article_job_with(
                "registry.baidubce.com/paddlepaddle/paddle:2.6-gpu-cuda11.8-cudnn8",
                &format!("\"{sha512}\""),
            ),
            refused: vec![format!(
                "{CONTAINER_0}.image: \"{sha512}\" is not an image reference: the digest \"{}\" must be sha256: followed by 64 hexadecimal digits",
                &sha512["busybox@".len()..]
            )],
            check: |job| assert!(job.image.as_deref().unwrap().starts_with("busybox@sha512:abab")),
        },
        Case {
            what: "a backoffLimit above 100: Kubernetes's Job controller retries",
            input: article_job_with("spec:\n  template:", "spec:\n  backoffLimit: 1000\n  template:"),
            refused: strings(&["spec.backoffLimit: must be an integer between 0 and 100, got 1000"]),
            check: |job| assert_eq!(job.retries, 1000),
        },
        Case {
            what: "the largest backoffLimit Kubernetes takes",
            input: article_job_with("spec:\n  template:", "spec:\n  backoffLimit: 2147483647\n  template:"),
            refused: strings(&["spec.backoffLimit: must be an integer between 0 and 100, got 2147483647"]),
            check: |job| assert_eq!(job.retries, 2_147_483_647),
        },
        Case {
            what: "a name made only of digits: the CLI's ambiguity, not Kubernetes's",
            input: article_job_with("name: paddle-high-priority-training", "name: \"20260101\""),
            refused: strings(&["metadata.name: \"20260101\" is only digits and would read as a job id; add a letter"]),
            check: |job| assert_eq!(job.name, "20260101"),
        },
    ]
}

#[test]
fn refused_for_the_standalone_server_and_accepted_for_a_cluster() {
    for case in cases() {
        let errors = match parse_with(&case.input, &ParseOptions::default()) {
            Ok(parsed) => panic!("{}: expected the default reading to refuse it, got {parsed:?}", case.what),
            Err(errors) => errors,
        };
        let got: Vec<String> = errors.iter().map(|e| format!("{}: {}", e.path, e.reason)).collect();
        assert_eq!(got, case.refused, "{}", case.what);
        let (job, _) = cluster_job(&case.input);
        (case.check)(&job);
        // Nothing else changes: the job's shape is the article's.
        assert_eq!((job.resources.gpus, job.replicas, job.project.as_str()), (1, 1, "default"), "{}", case.what);
    }
}

#[test]
fn a_repeated_env_name_is_a_warning_for_a_cluster() {
    let input = container_with(&format!(
        "{COMMAND}        env:\n        - {{ name: EPOCHS, value: \"3\" }}\n        - {{ name: EPOCHS, value: \"5\" }}\n"
    ));
    let (_, parsed) = cluster_job(&input);
    let warnings: Vec<String> = parsed.warnings.iter().map(|w| format!("{}: {}", w.path, w.message)).collect();
    assert_eq!(
        warnings,
        [
            format!(
                "{CONTAINER_0}.env[1].name: repeats environment variable \"EPOCHS\": the last value is set, as in Kubernetes"
            ),
            "spec.template.spec.restartPolicy: ignored: fairway does not use this field".to_owned(),
        ]
    );
}

#[test]
fn the_cluster_options() {
    assert_eq!(ParseOptions::cluster(), ParseOptions { tenant_required: true, for_cluster: true });
    assert!(!ParseOptions::default().for_cluster);
}

/// What Kubernetes itself refuses stays refused, with the field and the reason.
#[test]
fn a_cluster_still_refuses_what_kubernetes_refuses() {
    let cases: [(String, &[&str]); 6] = [
        (
            container_with(&format!(
                "{COMMAND}        env:\n        - {{ name: \"A=B\", value: x }}\n        - {{ name: \"\", value: y }}\n"
            )),
            &[
                "spec.template.spec.containers[0].env[0].name: environment variable name must be printable ASCII characters other than '=', got \"A=B\"",
                "spec.template.spec.containers[0].env[1].name: environment variable name must not be empty",
            ],
        ),
        (
            article_job_with("registry.baidubce.com/paddlepaddle/paddle:2.6-gpu-cuda11.8-cudnn8", "\"\""),
            &["spec.template.spec.containers[0].image: must not be empty"],
        ),
        (
            article_job_with("spec:\n  template:", "spec:\n  backoffLimit: 2147483648\n  template:"),
            &["spec.backoffLimit: must be a non-negative 32-bit integer, got 2147483648"],
        ),
        (
            article_job_with("spec:\n  template:", "spec:\n  backoffLimit: -1\n  template:"),
            &["spec.backoffLimit: must be a non-negative 32-bit integer, got -1"],
        ),
        (
            article_job_with("name: paddle-high-priority-training", "name: Paddle_Training"),
            &[
                "metadata.name: must match [a-z0-9]([-a-z0-9.]*[a-z0-9])? (lowercase letters, digits, '-'), got \"Paddle_Training\"",
            ],
        ),
        (
            container_with(&format!("{COMMAND}        workingDir: 42\n")),
            &["spec.template.spec.containers[0].workingDir: must be a string, got 42"],
        ),
    ];
    for (input, expected) in cases {
        let errors = match parse_with(&input, &ParseOptions::cluster()) {
            Ok(parsed) => panic!("expected errors, got {parsed:?}\n{input}"),
            Err(errors) => errors,
        };
        let got: Vec<String> = errors.iter().map(|e| format!("{}: {}", e.path, e.reason)).collect();
        assert_eq!(got, expected, "{input}");
    }
}

/// Fairway's own rules (what it schedules, its labels) are not about launching the job.
#[test]
fn a_cluster_keeps_the_scheduling_rules() {
    let cases: [(String, &str); 3] = [
        (
            article_job_with("            nvidia.com/gpu: 1\n", "            cpu: \"2\"\n"),
            "spec.template.spec.containers[0].resources.limits[\"nvidia.com/gpu\"]: required field is missing (fairway schedules GPU jobs: set nvidia.com/gpu in a container's limits)",
        ),
        (
            article_job_with("spec:\n  template:", "spec:\n  parallelism: 2000\n  template:"),
            "spec.parallelism: must be an integer between 1 and 1024, got 2000",
        ),
        (
            article_job_with(
                "  name: paddle-high-priority-training\n",
                "  name: paddle-high-priority-training\n  annotations: { fairway.dev/prio: x }\n",
            ),
            "metadata.annotations[\"fairway.dev/prio\"]: unknown fairway annotation; fairway reads: fairway.dev/user, fairway.dev/checkpoint-interval-seconds, fairway.dev/preemptible",
        ),
    ];
    for (input, expected) in cases {
        for options in [ParseOptions::default(), ParseOptions::cluster()] {
            let errors = parse_with(&input, &options).unwrap_err();
            let got: Vec<String> = errors.iter().map(|e| format!("{}: {}", e.path, e.reason)).collect();
            assert_eq!(got, [expected], "{options:?}");
        }
    }
}

/// Native jobs are fairway's own format, run by the server: read the same either way.
#[test]
fn native_jobs_are_read_the_same_for_a_cluster() {
    let input = native_with("env", "{ CUDA_VISIBLE_DEVICES: \"0\" }");
    for options in [ParseOptions::default(), ParseOptions::cluster()] {
        let errors = parse_with(&input, &options).unwrap_err();
        assert_eq!(
            errors.to_string(),
            "document 1: env.CUDA_VISIBLE_DEVICES: environment variable \"CUDA_VISIBLE_DEVICES\" is reserved: the server sets it to the GPUs it assigns to the job"
        );
    }
}

/// Jobs valid for the standalone server read the same for a cluster.
#[test]
fn valid_jobs_read_the_same_either_way() {
    let inputs = [
        ARTICLE_JOB.to_owned(),
        container_with("        command: [\"python\"]\n        args: [\"train.py\"]\n        workingDir: /data\n"),
        article_job_with("spec:\n  template:", "spec:\n  parallelism: 4\n  backoffLimit: 2\n  template:"),
        NATIVE_JOB.to_owned(),
        ARTICLE_CLASS.to_owned(),
    ];
    for input in inputs {
        let standalone = parse_with(&input, &ParseOptions::default()).unwrap();
        let cluster = parse_with(&input, &ParseOptions::cluster()).unwrap();
        assert_eq!(standalone, cluster, "{input}");
    }
}

/// A Job using every relaxed rule, read for a cluster, down to the core's job.
#[test]
fn what_a_cluster_reading_yields() {
    let input = r#"apiVersion: batch/v1
kind: Job
metadata:
  name: "2026"
  namespace: ads
  labels: { team: ranking }
  annotations:
    fairway.dev/user: alice
    fairway.dev/checkpoint-interval-seconds: "600"
    fairway.dev/preemptible: "false"
spec:
  parallelism: 4
  backoffLimit: 500
  activeDeadlineSeconds: 7200
  template:
    spec:
      priorityClassName: high
      terminationGracePeriodSeconds: 120
      nodeSelector: { nvidia.com/gpu.product: A100 }
      containers:
      - name: trainer
        image: nvcr.io/nvidia/pytorch@sha512:ABCDEF
        args: ["--epochs", "3"]
        workingDir: workspace
        env:
        - { name: NVIDIA_VISIBLE_DEVICES, value: all }
        - { name: FAIRWAY_RUN, value: "1" }
        resources:
          requests: { cpu: "8", memory: 64Gi, nvidia.com/gpu: 2 }
          limits: { nvidia.com/gpu: 2, memory: 64Gi }
      - name: sidecar
        image: fluentd
        resources:
          requests: { cpu: 500m, memory: 512Mi }
      restartPolicy: Never
"#;
    let (job, parsed) = cluster_job(input);
    assert!(parse_with(input, &ParseOptions::default()).is_err());
    assert_eq!((job.name.as_str(), job.user.as_str(), job.project.as_str()), ("2026", "alice", "ads"));
    assert_eq!((job.resources.gpus, job.resources.gpu_model.as_deref()), (2, Some("A100")));
    assert_eq!((job.resources.cpu_millis, job.resources.memory_mib), (8_500, 65_536 + 512));
    assert_eq!((job.replicas, job.retries), (4, 500));
    assert_eq!((job.preemption_grace_seconds, job.max_runtime_seconds), (120, Some(7200)));
    assert_eq!((job.preemptible, job.checkpoint_interval_seconds), (false, Some(600)));
    assert_eq!(job.image.as_deref(), Some("nvcr.io/nvidia/pytorch@sha512:ABCDEF"));
    assert!(job.command.is_empty());
    assert_eq!(job.working_dir.as_deref(), Some("workspace"));
    assert_eq!(job.env, env_of(&[("FAIRWAY_RUN", "1"), ("NVIDIA_VISIBLE_DEVICES", "all")]));
    let warned: Vec<&str> = parsed.warnings.iter().map(|w| w.path.as_str()).collect();
    assert_eq!(
        warned,
        ["metadata.labels.team", "spec.template.spec.containers[1].image", "spec.template.spec.restartPolicy",]
    );

    let registry = PriorityClasses::builtin();
    let resolved =
        parse_and_resolve(input.as_bytes(), &ParseLimits::default(), &registry, &ParseOptions::cluster()).unwrap();
    let resolved = &resolved.jobs[0];
    assert_eq!(resolved.priority_class.as_deref(), Some("high"));
    let spec = resolved.to_core(JobId(9), &mut Interner::new()).unwrap();
    assert_eq!(spec.priority, 1_000_000);
    assert_eq!(spec.preemption_policy, PreemptionPolicy::PreemptLowerPriority);
    assert_eq!(spec.per_replica, Resources::new(2, 8_500, 65_536 + 512));
    assert_eq!(spec.replicas, 4);
    assert_eq!(
        (spec.grace_ms, spec.max_runtime_ms, spec.checkpoint_interval_ms),
        (120_000, Some(7_200_000), Some(600_000))
    );
    assert!(!spec.preemptible);
    assert!(spec.gpu_model.is_some());
}
