//! Checks against the cluster's shape: GPU model known, replica fits on a node.

use std::collections::BTreeMap;

use fairway_spec::{ClusterShape, ModelShape, validate_against_cluster};

use crate::support::*;

fn cluster() -> ClusterShape {
    let shape =
        |gpus, cpu_millis_max, memory_mib_max| ModelShape { gpus_per_node_max: gpus, cpu_millis_max, memory_mib_max };
    ClusterShape {
        models: BTreeMap::from([
            ("A100".to_owned(), shape(8, 96_000, 1_000_000)),
            ("T4".to_owned(), shape(4, 200_000, 500_000)),
        ]),
    }
}

fn check(input: &str) -> Vec<(usize, String, String)> {
    let parsed = parse_ok(input);
    match validate_against_cluster(&parsed.jobs, &cluster()) {
        Ok(()) => Vec::new(),
        Err(errors) => errors.0.into_iter().map(|e| (e.document, e.path, e.reason)).collect(),
    }
}

#[test]
fn jobs_that_fit_pass() {
    assert_eq!(check(NATIVE_JOB), []);
    assert_eq!(check(ARTICLE_JOB), []);
}

#[test]
fn an_unknown_gpu_model_is_reported_with_the_known_ones() {
    let got = check(&NATIVE_JOB.replace("gpu_model: A100", "gpu_model: H100"));
    assert_eq!(
        got,
        [(1, "resources.gpu_model".into(), r#"unknown GPU model "H100"; the cluster has: A100, T4"#.into())]
    );

    let k8s =
        ARTICLE_JOB.replace("      restartPolicy: Never\n", "      nodeSelector: { nvidia.com/gpu.product: H100 }\n");
    let got = check(&k8s);
    assert_eq!(got[0].1, r#"spec.template.spec.nodeSelector["nvidia.com/gpu.product"]"#);
}

#[test]
fn a_replica_larger_than_any_node_is_reported() {
    let got = check(&NATIVE_JOB.replace("gpus: 2", "gpus: 16"));
    assert_eq!(got, [(1, "resources.gpus".into(), "a replica needs 16 GPUs but the largest A100 node has 8".into())]);

    let got = check(&NATIVE_JOB.replace("cpu_millis: 8000", "cpu_millis: 100000"));
    assert_eq!(got[0].1, "resources.cpu_millis");

    // No model named: the largest node of any model bounds the replica.
    let got = check(&ARTICLE_JOB.replace("nvidia.com/gpu: 1", "nvidia.com/gpu: 9"));
    assert_eq!(
        got,
        [(
            1,
            r#"spec.template.spec.containers[0].resources.limits["nvidia.com/gpu"]"#.into(),
            "a replica needs 9 GPUs but the largest node of any model has 8".into()
        )]
    );
}

#[test]
fn without_a_model_the_dimensions_must_fit_one_model_together() {
    // 8 GPUs fit only A100, 150 cores only T4: no single model has both.
    let input = NATIVE_JOB
        .replace("gpu_model: A100, ", "")
        .replace("gpus: 2", "gpus: 8")
        .replace("cpu_millis: 8000", "cpu_millis: 150000");
    let got = check(&input);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].1, "resources.gpus");
    assert!(got[0].2.contains("no GPU model's nodes have all three"), "{got:?}");
}

#[test]
fn every_job_is_checked() {
    let a = NATIVE_JOB.replace("gpus: 2", "gpus: 16");
    let b = NATIVE_JOB.replace("name: ctr-model", "name: other").replace("gpu_model: A100", "gpu_model: V100");
    let got = check(&format!("{a}---\n{b}"));
    let located: Vec<(usize, &str)> = got.iter().map(|(d, p, _)| (*d, p.as_str())).collect();
    assert_eq!(located, [(1, "resources.gpus"), (2, "resources.gpu_model")]);
}
