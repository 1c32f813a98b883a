//! Shared inputs and helpers.

use fairway_spec::{ParseLimits, Parsed, SpecErrors, parse_documents};

/// The PriorityClass from the article, verbatim.
pub const ARTICLE_CLASS: &str = "apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata:
  name: high-priority
value: 1000000
globalDefault: false
description: 用于关键业务模型训练，数值越大优先级越高。
";

/// The Job from the article, verbatim.
pub const ARTICLE_JOB: &str = r#"apiVersion: batch/v1
kind: Job
metadata:
  name: paddle-high-priority-training
spec:
  template:
    spec:
      priorityClassName: high-priority
      containers:
      - name: paddle-trainer
        image: registry.baidubce.com/paddlepaddle/paddle:2.6-gpu-cuda11.8-cudnn8
        command: ["python", "train_ctr.py"]
        resources:
          limits:
            nvidia.com/gpu: 1
      restartPolicy: Never
"#;

/// A valid native job, for tests that tweak one field.
pub const NATIVE_JOB: &str = "name: ctr-model
tenant: { user: alice, project: ads }
priority: high
resources: { gpus: 2, gpu_model: A100, cpu_millis: 8000, memory_mib: 65536 }
replicas: 1
image: paddlepaddle/paddle:2.6-gpu
command: [python, train_ctr.py]
env: { EPOCHS: \"3\" }
max_runtime_seconds: 7200
max_total_runtime_seconds: 36000
preemptible: true
preemption_grace_seconds: 30
checkpoint_interval_seconds: 600
";

/// A native job with `field: value` replacing or adding one line (removing it when `value`
/// is empty).
pub fn native_with(field: &str, value: &str) -> String {
    let mut lines: Vec<String> =
        NATIVE_JOB.lines().filter(|l| !l.starts_with(&format!("{field}:"))).map(str::to_owned).collect();
    if !value.is_empty() {
        lines.push(format!("{field}: {value}"));
    }
    lines.join("\n") + "\n"
}

/// The article's Job with one line replaced.
pub fn article_job_with(from: &str, to: &str) -> String {
    assert!(ARTICLE_JOB.contains(from), "{from}");
    ARTICLE_JOB.replace(from, to)
}

pub fn parse(input: &str) -> Result<Parsed, SpecErrors> {
    parse_documents(input.as_bytes(), &ParseLimits::default())
}

pub fn parse_ok(input: &str) -> Parsed {
    match parse(input) {
        Ok(parsed) => parsed,
        Err(errors) => panic!("expected input to parse, got:\n{errors}"),
    }
}

pub fn parse_err(input: &str) -> SpecErrors {
    match parse(input) {
        Ok(parsed) => panic!("expected errors, got {parsed:#?}"),
        Err(errors) => errors,
    }
}
