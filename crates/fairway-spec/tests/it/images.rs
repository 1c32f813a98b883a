//! `image` is passed to `docker run`, so it must be an image reference and nothing else:
//! never an option such as `--privileged`.

use crate::support::*;

const DIGEST: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

fn native_image_errors(image: &str) -> Vec<String> {
    let input = native_with("image", &serde_json::to_string(image).unwrap());
    match parse(&input) {
        Ok(parsed) => {
            assert_eq!(parsed.jobs[0].image.as_deref(), Some(image));
            Vec::new()
        }
        Err(errors) => errors.iter().map(|e| format!("{}: {}", e.path, e.reason)).collect(),
    }
}

fn kube_image_errors(image: &str) -> Vec<String> {
    let quoted = serde_json::to_string(image).unwrap();
    let input = article_job_with(
        "image: registry.baidubce.com/paddlepaddle/paddle:2.6-gpu-cuda11.8-cudnn8",
        &format!("image: {quoted}"),
    );
    match parse(&input) {
        Ok(_) => Vec::new(),
        Err(errors) => errors.iter().map(|e| format!("{}: {}", e.path, e.reason)).collect(),
    }
}

#[test]
fn image_references_docker_accepts_are_accepted() {
    let good = [
        "ubuntu".to_owned(),
        "ubuntu:24.04".to_owned(),
        "pytorch/pytorch:2.4.0-cuda12.1-cudnn9-runtime".to_owned(),
        "nvcr.io/nvidia/pytorch:24.05-py3".to_owned(),
        "paddlepaddle/paddle:2.6-gpu".to_owned(),
        "registry.baidubce.com/paddlepaddle/paddle:2.6-gpu-cuda11.8-cudnn8".to_owned(),
        format!("localhost:5000/team/img@{DIGEST}"),
        format!("img:latest@{DIGEST}"),
        "localhost/img".to_owned(),
        "localhost:5000/img:v1".to_owned(),
        "ghcr.io/org/sub/group/img:Tag_With.Mixed-Case".to_owned(),
        "my-registry.example.com:443/a__b/c.d/e---f:_private".to_owned(),
        "[::1]:5000/img:1".to_owned(),
        "registry.example/trainer:1".to_owned(),
        "a".to_owned(),
        "0/1/2".to_owned(),
        format!("{}:{}", "a".repeat(255), "t".repeat(128)),
    ];
    for image in &good {
        assert_eq!(native_image_errors(image), Vec::<String>::new(), "native {image}");
        assert_eq!(kube_image_errors(image), Vec::<String>::new(), "kubernetes {image}");
    }
}

#[test]
fn anything_else_is_refused_with_the_part_that_is_wrong() {
    let bad: [(String, &str); 20] = [
        ("--privileged".into(), r#""--privileged" is not an image reference: it starts with "-""#),
        ("--volume=/:/host".into(), r#""--volume=/:/host" is not an image reference: it starts with "-""#),
        ("-it".into(), r#"it starts with "-""#),
        ("UPPER/case".into(), r#"uppercase letters are not allowed in a repository name ("UPPER")"#),
        ("team/Img".into(), r#"uppercase letters are not allowed in a repository name ("Img")"#),
        ("a b".into(), "it contains whitespace or a control character"),
        ("img\n--privileged".into(), "it contains whitespace or a control character"),
        ("img:tag:tag".into(), r#"it has more than one ":" (a reference has at most one tag)"#),
        (
            "img@sha256:short".into(),
            r#"the digest must have 64 lowercase hexadecimal digits after sha256:, got "short""#,
        ),
        (format!("img@{}", DIGEST.to_uppercase().replace("SHA256", "sha256")), "64 lowercase hexadecimal digits"),
        ("img@md5:0123".into(), r#"the digest "md5:0123" must be sha256: followed by 64 hexadecimal digits"#),
        (format!("img@{DIGEST}@{DIGEST}"), r#"it has more than one "@""#),
        ("".into(), r#"must be an image reference such as "ubuntu:24.04", got an empty string"#),
        (":tag".into(), r#"it has no repository name (it starts with ":" or "@")"#),
        ("img:".into(), r#"the tag after ":" is empty"#),
        ("img:-x".into(), r#"the tag "-x" must start with a letter, a digit or "_""#),
        ("team//img".into(), r#"the repository path has an empty part"#),
        ("team/img..x".into(), r#"the repository name part "img..x" must start and end with a letter or digit"#),
        ("localhost:port/img".into(), r#"the registry port "port" must be a number"#),
        (format!("{}:t", "a".repeat(256)), "the name is 256 characters long, more than the limit of 255"),
    ];
    let mut failures = Vec::new();
    for (image, reason) in &bad {
        for (format, errors, path) in [
            ("native", native_image_errors(image), "image"),
            ("kubernetes", kube_image_errors(image), "spec.template.spec.containers[0].image"),
        ] {
            let expected_start = format!("{path}: ");
            if !errors.iter().any(|e| e.starts_with(&expected_start) && e.contains(reason)) {
                failures.push(format!("{format} {image:?}: wanted {path}: ...{reason}..., got {errors:?}"));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn a_long_tag_is_refused() {
    let image = format!("img:{}", "t".repeat(129));
    let expected = format!(
        "image: {} is not an image reference: the tag is 129 characters long, more than the limit of 128",
        serde_json::to_string(&image).unwrap()
    );
    assert_eq!(native_image_errors(&image), [expected]);
}
