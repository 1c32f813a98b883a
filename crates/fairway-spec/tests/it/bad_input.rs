//! Each bad input is reported with its document, exact field path and reason.

use fairway_spec::{PriorityClasses, load};

use crate::support::*;

struct Case {
    name: &'static str,
    input: Vec<u8>,
    document: usize,
    path: &'static str,
    reason: &'static str,
}

fn case(
    name: &'static str,
    input: impl Into<Vec<u8>>,
    document: usize,
    path: &'static str,
    reason: &'static str,
) -> Case {
    Case { name, input: input.into(), document, path, reason }
}

const GPU_LIMIT: &str = r#"spec.template.spec.containers[0].resources.limits["nvidia.com/gpu"]"#;

fn cases() -> Vec<Case> {
    let mut non_utf8 = b"name: ctr-model\n".to_vec();
    non_utf8.extend_from_slice(&[b'#', 0xff, 0xfe, b'\n']);
    let oversized = format!("{NATIVE_JOB}# {}\n", "x".repeat(1 << 20));
    let too_many = "a: 1\n---\n".repeat(1001);
    vec![
        case(
            "unknown class, native",
            native_with("priority", "urgent"),
            1,
            "priority",
            r#"unknown priority class "urgent"; known classes: critical, high, medium, low"#,
        ),
        case(
            "unknown class, kubernetes",
            article_job_with("high-priority", "gold"),
            1,
            "spec.template.spec.priorityClassName",
            r#"unknown priority class "gold""#,
        ),
        case(
            "gpus 0, native",
            NATIVE_JOB.replace("gpus: 2", "gpus: 0"),
            1,
            "resources.gpus",
            "must be a positive integer, got 0",
        ),
        case(
            "gpu_milli 1000, native",
            NATIVE_JOB.replace("gpus: 2", "gpu_milli: 1000"),
            1,
            "resources.gpu_milli",
            "thousandths of one GPU, 1 to 999",
        ),
        case(
            "gpu_milli 0, native",
            NATIVE_JOB.replace("gpus: 2", "gpu_milli: 0"),
            1,
            "resources.gpu_milli",
            "thousandths of one GPU, 1 to 999",
        ),
        case(
            "gpu_milli with 2 GPUs, native",
            NATIVE_JOB.replace("gpus: 2", "gpus: 2, gpu_milli: 500"),
            1,
            "resources.gpu_milli",
            "a share is part of one GPU: with gpu_milli, gpus must be 1 or left out, got 2",
        ),
        case(
            "gpu_milli in a gang, native",
            NATIVE_JOB.replace("gpus: 2", "gpu_milli: 500").replace("replicas: 1", "replicas: 2"),
            1,
            "replicas",
            "a share of one GPU (resources.gpu_milli) is for one-replica jobs",
        ),
        case(
            "gpus -1, native",
            NATIVE_JOB.replace("gpus: 2", "gpus: -1"),
            1,
            "resources.gpus",
            "must be a positive integer, got -1",
        ),
        case(
            "gpus \"two\", native",
            NATIVE_JOB.replace("gpus: 2", "gpus: two"),
            1,
            "resources.gpus",
            r#"must be a positive integer, got "two""#,
        ),
        case(
            "gpus 1.5, native",
            NATIVE_JOB.replace("gpus: 2", "gpus: 1.5"),
            1,
            "resources.gpus",
            "must be a positive integer, got 1.5",
        ),
        case(
            "gpus 0, kubernetes",
            article_job_with("nvidia.com/gpu: 1", "nvidia.com/gpu: 0"),
            1,
            GPU_LIMIT,
            "must be a positive integer, got 0",
        ),
        case(
            "gpus -1, kubernetes",
            article_job_with("nvidia.com/gpu: 1", "nvidia.com/gpu: -1"),
            1,
            GPU_LIMIT,
            "must be a positive integer, got -1",
        ),
        case(
            "gpus \"two\", kubernetes",
            article_job_with("nvidia.com/gpu: 1", "nvidia.com/gpu: two"),
            1,
            GPU_LIMIT,
            r#"must be a positive integer, got "two""#,
        ),
        case(
            "no gpus, kubernetes",
            article_job_with("nvidia.com/gpu: 1", "cpu: 1"),
            1,
            GPU_LIMIT,
            "required field is missing",
        ),
        case("missing name, native", native_with("name", ""), 1, "name", "required field is missing"),
        case(
            "missing name, kubernetes",
            article_job_with("  name: paddle-high-priority-training\n", "  namespace: ads\n"),
            1,
            "metadata.name",
            "required field is missing",
        ),
        case("invalid name", native_with("name", "Ctr_Model"), 1, "name", "must match [a-z0-9]([-a-z0-9.]*[a-z0-9])?"),
        case("name too long", native_with("name", &"a".repeat(254)), 1, "name", "at most 253 characters"),
        case(
            "duplicate names",
            format!("{NATIVE_JOB}---\n{NATIVE_JOB}"),
            2,
            "name",
            r#"duplicate job name "ctr-model" in project "ads": already used in document 1"#,
        ),
        case("missing tenant", native_with("tenant", ""), 1, "tenant", "required field is missing"),
        case(
            "missing project",
            native_with("tenant", "{ user: alice }"),
            1,
            "tenant.project",
            "required field is missing",
        ),
        case(
            "missing command and image",
            native_with("image", "").replace("command: [python, train_ctr.py]\n", ""),
            1,
            "command",
            "required unless image is given",
        ),
        case("replicas 0", native_with("replicas", "0"), 1, "replicas", "must be an integer between 1 and 1024, got 0"),
        case(
            "replicas 2000",
            native_with("replicas", "2000"),
            1,
            "replicas",
            "must be an integer between 1 and 1024, got 2000",
        ),
        case("replicas as a string", native_with("replicas", "\"3\""), 1, "replicas", r#"got "3""#),
        case(
            "parallelism 0",
            article_job_with("spec:\n  template:", "spec:\n  parallelism: 0\n  template:"),
            1,
            "spec.parallelism",
            "must be an integer between 1 and 1024, got 0",
        ),
        case(
            "command as a string",
            native_with("command", "python train.py"),
            1,
            "command",
            r#"must be a list of strings, got "python train.py""#,
        ),
        case(
            "preemptible yes",
            native_with("preemptible", "yes"),
            1,
            "preemptible",
            r#"must be true or false, got "yes""#,
        ),
        case(
            "env value not a string",
            native_with("env", "{ EPOCHS: 3 }"),
            1,
            "env.EPOCHS",
            "must be a string (quote numbers and booleans",
        ),
        case("env value a boolean", native_with("env", "{ DEBUG: true }"), 1, "env.DEBUG", "got true"),
        case(
            "kubernetes env value not a string",
            article_job_with("        resources:", "        env: [{ name: EPOCHS, value: 3 }]\n        resources:"),
            1,
            "spec.template.spec.containers[0].env[0].value",
            "must be a string",
        ),
        case(
            "unknown native field",
            native_with("replica", "4"),
            1,
            "replica",
            "unknown field; expected one of: name, tenant",
        ),
        case("negative grace", native_with("preemption_grace_seconds", "-5"), 1, "preemption_grace_seconds", "got -5"),
        case(
            "bad preemption policy",
            native_with("preemption_policy", "Sometimes"),
            1,
            "preemption_policy",
            "must be PreemptLowerPriority or Never",
        ),
        case("non-UTF-8 bytes", non_utf8, 0, "", "not valid UTF-8: invalid byte sequence at byte offset 17"),
        case("oversized input", oversized, 0, "", "more than the limit of 1048576 bytes"),
        case("too many documents", too_many, 0, "", "too many documents: the limit is 1000"),
        case(
            "unknown apiVersion",
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: { name: x }\n",
            1,
            "apiVersion",
            r#"unknown apiVersion "apps/v1""#,
        ),
        case(
            "unknown kind",
            "apiVersion: batch/v1\nkind: CronJob\nmetadata: { name: x }\n",
            1,
            "kind",
            r#"unknown kind "CronJob" for apiVersion batch/v1"#,
        ),
        case(
            "kind without apiVersion",
            "kind: Job\nmetadata: { name: x }\n",
            1,
            "apiVersion",
            "required field is missing",
        ),
        case(
            "document not a mapping",
            "- a\n- b\n",
            1,
            "",
            "must be a mapping (a job or a priority class), got a list",
        ),
        case(
            "class value too high",
            ARTICLE_CLASS.replace("1000000", "2000000000"),
            1,
            "value",
            "must be at most 1000000000",
        ),
        case(
            "class value beyond i32",
            ARTICLE_CLASS.replace("1000000", "3000000000"),
            1,
            "value",
            "must fit in a 32-bit signed integer",
        ),
        case(
            "class value not an integer",
            ARTICLE_CLASS.replace("1000000", "high"),
            1,
            "value",
            r#"must be an integer, got "high""#,
        ),
        case(
            "class redefines a built-in",
            ARTICLE_CLASS.replace("high-priority", "high").replace("1000000", "5"),
            1,
            "metadata.name",
            r#"priority class "high" is already defined with value 1000000"#,
        ),
        case(
            "duplicate class",
            format!("{ARTICLE_CLASS}---\n{ARTICLE_CLASS}"),
            2,
            "metadata.name",
            r#"duplicate priority class "high-priority": already defined in document 1"#,
        ),
        case(
            "two global defaults",
            format!(
                "{}---\n{}",
                ARTICLE_CLASS.replace("globalDefault: false", "globalDefault: true"),
                ARTICLE_CLASS.replace("high-priority", "other").replace("globalDefault: false", "globalDefault: true")
            ),
            2,
            "globalDefault",
            r#"only one class may be the global default; "high-priority" in document 1 already is"#,
        ),
        case(
            "args without command",
            article_job_with("command: [\"python\", \"train_ctr.py\"]", "args: [\"--epochs\", \"3\"]"),
            1,
            "spec.template.spec.containers[0].args",
            "args without command is not supported",
        ),
        case(
            "no containers",
            article_job_with(
                "      containers:\n      - name: paddle-trainer\n",
                "      containers: []\n      x:\n      - name: paddle-trainer\n",
            ),
            1,
            "spec.template.spec.containers",
            "must list at least one container",
        ),
        case(
            "bad cpu quantity",
            article_job_with("nvidia.com/gpu: 1", "nvidia.com/gpu: 1\n            cpu: two"),
            1,
            "spec.template.spec.containers[0].resources.limits.cpu",
            "is not a Kubernetes quantity",
        ),
        case(
            "negative memory",
            article_job_with("nvidia.com/gpu: 1", "nvidia.com/gpu: 1\n            memory: -1Gi"),
            1,
            "spec.template.spec.containers[0].resources.limits.memory",
            "must not be negative",
        ),
        case(
            "gpu request differs from limit",
            article_job_with(
                "nvidia.com/gpu: 1",
                "nvidia.com/gpu: 1\n          requests:\n            nvidia.com/gpu: 2",
            ),
            1,
            r#"spec.template.spec.containers[0].resources.requests["nvidia.com/gpu"]"#,
            "must equal the limit",
        ),
        case(
            "unknown fairway annotation",
            article_job_with(
                "  name: paddle-high-priority-training\n",
                "  name: paddle-high-priority-training\n  annotations: { fairway.dev/preemptable: \"false\" }\n",
            ),
            1,
            r#"metadata.annotations["fairway.dev/preemptable"]"#,
            "unknown fairway annotation",
        ),
        case(
            "preemptible annotation not a boolean string",
            article_job_with(
                "  name: paddle-high-priority-training\n",
                "  name: paddle-high-priority-training\n  annotations: { fairway.dev/preemptible: \"no\" }\n",
            ),
            1,
            r#"metadata.annotations["fairway.dev/preemptible"]"#,
            r#"must be "true" or "false", got "no""#,
        ),
        case(
            "invalid namespace",
            article_job_with(
                "  name: paddle-high-priority-training\n",
                "  name: paddle-high-priority-training\n  namespace: Ads.Team\n",
            ),
            1,
            "metadata.namespace",
            "must match",
        ),
        case("duplicate YAML key", "name: a\nname: b\n", 1, "name", "duplicate key \"name\""),
        case("YAML syntax error", "name: [unclosed\n", 0, "", "invalid YAML"),
        case("JSON syntax error", "{\"name\": \"x\"\n", 0, "", "not valid JSON"),
        case("JSON duplicate key", "{\"name\": \"a\", \"name\": \"b\"}", 1, "name", "duplicate key \"name\""),
        case(
            "job name only digits, native",
            native_with("name", "\"42\""),
            1,
            "name",
            r#""42" is only digits and would read as a job id; add a letter"#,
        ),
        case(
            "job name only digits, kubernetes",
            article_job_with("name: paddle-high-priority-training", "name: \"1\""),
            1,
            "metadata.name",
            r#""1" is only digits and would read as a job id; add a letter"#,
        ),
        case(
            "image that is an option, native",
            native_with("image", "\"--privileged\""),
            1,
            "image",
            r#""--privileged" is not an image reference: it starts with "-""#,
        ),
        case(
            "image that is an option, kubernetes",
            article_job_with(
                "image: registry.baidubce.com/paddlepaddle/paddle:2.6-gpu-cuda11.8-cudnn8",
                "image: \"--volume=/:/host\"",
            ),
            1,
            "spec.template.spec.containers[0].image",
            r#""--volume=/:/host" is not an image reference: it starts with "-""#,
        ),
    ]
}

#[test]
fn each_bad_input_reports_its_path_and_reason() {
    let mut failures = Vec::new();
    for c in cases() {
        let outcome = load(&c.input, &mut PriorityClasses::builtin());
        let Err(errors) = outcome else {
            failures.push(format!("{}: accepted", c.name));
            continue;
        };
        let hit = errors.iter().any(|e| e.document == c.document && e.path == c.path && e.reason.contains(c.reason));
        if !hit {
            failures.push(format!(
                "{}: wanted document {} path {:?} reason containing {:?}, got:\n  {}",
                c.name,
                c.document,
                c.path,
                c.reason,
                errors.to_string().replace('\n', "\n  ")
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn error_display_names_document_path_and_reason() {
    let bad_job = article_job_with("nvidia.com/gpu: 1", "nvidia.com/gpu: -1");
    let input = format!("{ARTICLE_CLASS}---\n{bad_job}");
    let errors = parse_err(&input);
    assert_eq!(
        errors.to_string(),
        r#"document 2: spec.template.spec.containers[0].resources.limits["nvidia.com/gpu"]: must be a positive integer, got -1"#
    );
}

#[test]
fn every_problem_is_reported_at_once() {
    let input = "name: Bad_Name\ntenant: { project: ads }\nresources: { gpus: 0, cpu_millis: lots }\nreplicas: 0\ncommand: [python]\nenv: { A: 1 }\n";
    let errors = parse_err(input);
    let paths: Vec<&str> = errors.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(paths, ["name", "resources.gpus", "resources.cpu_millis", "replicas", "env.A"]);
    assert!(errors.iter().all(|e| e.document == 1));
}

#[test]
fn errors_in_several_documents_are_all_reported_in_order() {
    let input = format!("{}---\n{ARTICLE_CLASS}---\n{}", native_with("replicas", "0"), native_with("name", "x_y"));
    let errors = parse_err(&input);
    let located: Vec<(usize, &str)> = errors.iter().map(|e| (e.document, e.path.as_str())).collect();
    assert_eq!(located, [(1, "replicas"), (3, "name")]);
}

#[test]
fn a_failed_load_leaves_the_registry_unchanged() {
    let input = format!("{ARTICLE_CLASS}---\n{}", native_with("priority", "nope"));
    let mut classes = PriorityClasses::builtin();
    assert!(load(input.as_bytes(), &mut classes).is_err());
    assert_eq!(classes, PriorityClasses::builtin());
}
