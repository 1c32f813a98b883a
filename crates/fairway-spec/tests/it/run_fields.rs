//! The fields that say how a job runs as a process: `working_dir`, `shell`, `retries`,
//! `image_optional`, and the names `env` may use.

use std::collections::BTreeMap;

use fairway_spec::{Field, JobDoc, SpecError, parse_native_job};
use serde_json::json;

use crate::support::*;

const COMMAND_LINE: &str = "command: [python, train_ctr.py]\n";
const CONTAINER_0: &str = "spec.template.spec.containers[0]";

fn only_job(input: &str) -> JobDoc {
    let parsed = parse_ok(input);
    let [job] = parsed.jobs.as_slice() else { panic!("one job expected: {parsed:?}") };
    job.clone()
}

/// The native job with `field: value` and no command.
fn native_without_command(field: &str, value: &str) -> String {
    native_with(field, value).replace(COMMAND_LINE, "")
}

/// The article's Job with lines added to its container, before `command`.
fn article_container_with(lines: &str) -> String {
    article_job_with("        command:", &format!("{lines}        command:"))
}

#[test]
fn native_defaults() {
    let job = only_job(NATIVE_JOB);
    assert_eq!(job.working_dir, None);
    assert!(!job.shell);
    assert_eq!(job.retries, 0);
    assert!(!job.image_optional);
}

#[test]
fn native_accepted_forms() {
    let job = only_job(&native_with("working_dir", "/workspace/ctr run"));
    assert_eq!(job.working_dir.as_deref(), Some("/workspace/ctr run"));
    assert_eq!(only_job(&native_with("working_dir", "/")).working_dir.as_deref(), Some("/"));
    let longest = format!("/{}", "a".repeat(4095));
    assert_eq!(only_job(&native_with("working_dir", &longest)).working_dir, Some(longest));

    let job = only_job(&(native_with("command", "[\"python train.py > train.log 2>&1\"]") + "shell: true\n"));
    assert!(job.shell);
    assert_eq!(job.command, ["python train.py > train.log 2>&1"]);
    assert!(!only_job(&native_with("shell", "false")).shell);

    for n in [0, 3, 100] {
        assert_eq!(only_job(&native_with("retries", &n.to_string())).retries, n);
    }

    let job = only_job(&native_with("image_optional", "true"));
    assert!(job.image_optional);
    assert_eq!(job.command, ["python", "train_ctr.py"]);
    // Without an image a command is required anyway; the flag is then harmless.
    let no_image = native_with("image", "") + "image_optional: true\n";
    assert!(only_job(&no_image).image_optional);
    // A shell command with an image: the container runs /bin/sh -c.
    let shell_in_image = native_with("command", "[\"cd /data && python train.py\"]") + "shell: true\n";
    assert_eq!(only_job(&shell_in_image).image.as_deref(), Some("paddlepaddle/paddle:2.6-gpu"));

    // The example in docs/job-spec.md.
    let documented = "name: nightly-eval\ntenant: { project: ads }\nresources: { gpus: 1 }\ncommand: [\"cd data && python eval.py > eval.log 2>&1\"]\nshell: true\nworking_dir: /home/alice/ctr\nretries: 2\n";
    let job = only_job(documented);
    assert_eq!((job.shell, job.working_dir.as_deref(), job.retries), (true, Some("/home/alice/ctr"), 2));

    let job = only_job(&native_with("env", "{ _PRIVATE: a, lower_case: b, FAIRWAYX: c, CUDA_HOME: /usr/local/cuda }"));
    assert_eq!(job.env.keys().collect::<Vec<_>>(), ["CUDA_HOME", "FAIRWAYX", "_PRIVATE", "lower_case"]);
}

#[test]
fn native_origin_paths() {
    let job = only_job(NATIVE_JOB);
    let paths: Vec<String> =
        [Field::WorkingDir, Field::Shell, Field::Retries, Field::ImageOptional].map(|f| job.origin.path(f)).into();
    assert_eq!(paths, ["working_dir", "shell", "retries", "image_optional"]);
    let embedded = serde_json::to_value(&job).unwrap();
    let job = parse_native_job(&embedded, 1, "jobs[2]").unwrap();
    assert_eq!(job.origin.path(Field::Retries), "jobs[2].retries");
}

#[test]
fn kubernetes_backoff_limit_is_retries_with_the_kubernetes_default() {
    let parsed = parse_ok(ARTICLE_JOB);
    assert_eq!(parsed.jobs[0].retries, 6);
    let with_limit = article_job_with("spec:\n  template:", "spec:\n  backoffLimit: 2\n  template:");
    let parsed = parse_ok(&with_limit);
    assert_eq!(parsed.jobs[0].retries, 2);
    // Read, so no longer warned about: the article's only warning remains.
    let warned: Vec<&str> = parsed.warnings.iter().map(|w| w.path.as_str()).collect();
    assert_eq!(warned, ["spec.template.spec.restartPolicy"]);
    let none = article_job_with("spec:\n  template:", "spec:\n  backoffLimit: 0\n  template:");
    assert_eq!(parse_ok(&none).jobs[0].retries, 0);
    assert_eq!(parsed.jobs[0].origin.path(Field::Retries), "spec.backoffLimit");
}

#[test]
fn kubernetes_working_dir_maps_and_the_rest_is_not_mapped() {
    let parsed = parse_ok(&article_container_with("        workingDir: /workspace\n"));
    let [job] = parsed.jobs.as_slice() else { panic!("{parsed:?}") };
    assert_eq!(job.working_dir.as_deref(), Some("/workspace"));
    assert_eq!(parsed.warnings.len(), 1, "{:?}", parsed.warnings);
    assert_eq!(job.origin.path(Field::WorkingDir), format!("{CONTAINER_0}.workingDir"));
    assert!(!job.shell);
    assert!(!job.image_optional);
    assert_eq!(parse_ok(ARTICLE_JOB).jobs[0].working_dir, None);
}

#[test]
fn new_fields_serialize_to_the_native_format_and_back() {
    let input = native_with("command", "[\"python train.py\"]")
        + "shell: true\nworking_dir: /workspace\nretries: 3\nimage_optional: true\n";
    let job = only_job(&input);
    let out = serde_json::to_value(&job).unwrap();
    assert_eq!(
        (&out["shell"], &out["working_dir"], &out["retries"], &out["image_optional"]),
        (&json!(true), &json!("/workspace"), &json!(3), &json!(true))
    );
    assert_eq!(parse_native_job(&out, 1, "").unwrap(), job);
    // At their defaults they are left out: a job that does not use them serializes as before.
    let plain = serde_json::to_value(only_job(NATIVE_JOB)).unwrap();
    for field in ["shell", "working_dir", "retries", "image_optional"] {
        assert!(plain.get(field).is_none(), "{field} in {plain}");
    }
    // A Kubernetes job keeps its retries through the native format.
    let kube = &parse_ok(ARTICLE_JOB).jobs[0];
    let out = serde_json::to_value(kube).unwrap();
    assert_eq!(out["retries"], json!(6));
    assert_eq!(parse_native_job(&out, 1, "").unwrap().retries, 6);
}

/// Each bad value: exactly one error, in document 1, with this path and this reason.
fn bad_cases() -> Vec<(&'static str, String, String, &'static str)> {
    vec![
        (
            "relative working_dir",
            native_with("working_dir", "data/run"),
            "working_dir".into(),
            r#"must be an absolute path (starting with /), got "data/run""#,
        ),
        (
            "empty working_dir",
            native_with("working_dir", "\"\""),
            "working_dir".into(),
            r#"must be an absolute path (starting with /), got """#,
        ),
        (
            "working_dir with NUL",
            native_with("working_dir", r#""/data\0x""#),
            "working_dir".into(),
            r#"must not contain NUL characters, got "/data\u0000x""#,
        ),
        (
            "working_dir too long",
            native_with("working_dir", &format!("/{}", "a".repeat(4096))),
            "working_dir".into(),
            "must be at most 4096 bytes, got 4097",
        ),
        ("working_dir not a string", native_with("working_dir", "3"), "working_dir".into(), "must be a string, got 3"),
        (
            "relative workingDir, kubernetes",
            article_container_with("        workingDir: work\n"),
            format!("{CONTAINER_0}.workingDir"),
            r#"must be an absolute path (starting with /), got "work""#,
        ),
        (
            "shell with two command elements",
            native_with("shell", "true"),
            "command".into(),
            "must be exactly one string when shell is true (the job runs /bin/sh -c <string>), got 2 strings",
        ),
        (
            "shell with an empty command",
            native_with("command", "[]") + "shell: true\n",
            "command".into(),
            "must be exactly one string when shell is true (the job runs /bin/sh -c <string>), got an empty list",
        ),
        (
            "shell without a command",
            native_without_command("shell", "true"),
            "command".into(),
            "required field is missing (shell is true: the job runs /bin/sh -c <string>)",
        ),
        ("shell not a boolean", native_with("shell", "yes"), "shell".into(), r#"must be true or false, got "yes""#),
        (
            "retries 101",
            native_with("retries", "101"),
            "retries".into(),
            "must be an integer between 0 and 100, got 101",
        ),
        ("retries -1", native_with("retries", "-1"), "retries".into(), "must be an integer between 0 and 100, got -1"),
        (
            "retries as a string",
            native_with("retries", "\"3\""),
            "retries".into(),
            r#"must be an integer between 0 and 100, got "3""#,
        ),
        (
            "retries 1.5",
            native_with("retries", "1.5"),
            "retries".into(),
            "must be an integer between 0 and 100, got 1.5",
        ),
        (
            "backoffLimit 101, kubernetes",
            article_job_with("spec:\n  template:", "spec:\n  backoffLimit: 101\n  template:"),
            "spec.backoffLimit".into(),
            "must be an integer between 0 and 100, got 101",
        ),
        (
            "image_optional without a command",
            native_without_command("image_optional", "true"),
            "command".into(),
            "required field is missing (image_optional is true: a plain-process fallback needs a command)",
        ),
        (
            "image_optional with an empty command",
            native_with("command", "[]") + "image_optional: true\n",
            "command".into(),
            "must not be empty when image_optional is true: a plain-process fallback needs a command",
        ),
        (
            "image_optional not a boolean",
            native_with("image_optional", "\"true\""),
            "image_optional".into(),
            r#"must be true or false, got "true""#,
        ),
        (
            "reserved env CUDA_VISIBLE_DEVICES",
            native_with("env", "{ CUDA_VISIBLE_DEVICES: \"0\" }"),
            "env.CUDA_VISIBLE_DEVICES".into(),
            r#"environment variable "CUDA_VISIBLE_DEVICES" is reserved: the server sets it to the GPUs it assigns to the job"#,
        ),
        (
            "reserved env NVIDIA_VISIBLE_DEVICES",
            native_with("env", "{ NVIDIA_VISIBLE_DEVICES: all }"),
            "env.NVIDIA_VISIBLE_DEVICES".into(),
            r#"environment variable "NVIDIA_VISIBLE_DEVICES" is reserved: the server sets it to the GPUs it assigns to the job"#,
        ),
        (
            "reserved env FAIRWAY_ prefix",
            native_with("env", "{ FAIRWAY_JOB_ID: \"7\" }"),
            "env.FAIRWAY_JOB_ID".into(),
            r#"environment variable "FAIRWAY_JOB_ID" is reserved: the server sets the FAIRWAY_ variables itself"#,
        ),
        (
            "env name with a dash",
            native_with("env", "{ MY-VAR: x }"),
            "env.MY-VAR".into(),
            r#"environment variable name must match [A-Za-z_][A-Za-z0-9_]*, got "MY-VAR""#,
        ),
        (
            "env name starting with a digit",
            native_with("env", "{ 1ST: x }"),
            r#"env["1ST"]"#.into(),
            r#"environment variable name must match [A-Za-z_][A-Za-z0-9_]*, got "1ST""#,
        ),
        (
            "env name invalid, kubernetes",
            article_container_with("        env: [{ name: my.var, value: x }]\n"),
            format!("{CONTAINER_0}.env[0].name"),
            r#"environment variable name must match [A-Za-z_][A-Za-z0-9_]*, got "my.var""#,
        ),
        (
            "env name reserved, kubernetes",
            article_container_with("        env: [{ name: FAIRWAY_CHECKPOINT_DIR, value: /x }]\n"),
            format!("{CONTAINER_0}.env[0].name"),
            r#"environment variable "FAIRWAY_CHECKPOINT_DIR" is reserved: the server sets the FAIRWAY_ variables itself"#,
        ),
    ]
}

#[test]
fn each_bad_value_is_one_error_with_its_path_and_reason() {
    let mut failures = Vec::new();
    for (name, input, path, reason) in bad_cases() {
        let wanted = vec![SpecError::new(1, path, reason)];
        match parse(&input) {
            Ok(_) => failures.push(format!("{name}: accepted")),
            Err(errors) if errors.0 == wanted => {}
            Err(errors) => failures.push(format!(
                "{name}: wanted {}, got:\n  {}",
                wanted[0],
                errors.to_string().replace('\n', "\n  ")
            )),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn a_misspelt_new_field_is_an_unknown_field() {
    let errors = parse_err(&native_with("working_directory", "/x"));
    assert_eq!(errors.0[0].path, "working_directory");
    let expected = "image, image_optional, command, shell, working_dir, env, max_runtime_seconds, max_total_runtime_seconds, retries, preemptible";
    assert!(errors.0[0].reason.contains(expected), "{errors}");
}

#[test]
fn kubernetes_env_keeps_valid_names() {
    let job = only_job(&article_container_with("        env: [{ name: _X1, value: a }, { name: lower, value: b }]\n"));
    assert_eq!(job.env, BTreeMap::from([("_X1".to_owned(), "a".to_owned()), ("lower".to_owned(), "b".to_owned())]));
}
