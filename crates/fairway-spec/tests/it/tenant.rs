//! The tenant may come from the caller: with `tenant_required: false` a job may leave out
//! its user and project, and the job records which parts it wrote, and where.

use fairway_spec::{JobDoc, ParseLimits, ParseOptions, Parsed, SpecErrors, TenantOrigin, parse_documents_with};
use serde_json::json;

use crate::support::*;

const USER_LABEL: &str = r#"metadata.labels["fairway.dev/user"]"#;
const USER_ANNOTATION: &str = r#"metadata.annotations["fairway.dev/user"]"#;

fn parse_tenant(input: &str, tenant_required: bool) -> Result<Parsed, SpecErrors> {
    parse_documents_with(
        input.as_bytes(),
        &ParseLimits::default(),
        &ParseOptions { tenant_required, ..ParseOptions::default() },
    )
}

fn only_job(input: &str, tenant_required: bool) -> JobDoc {
    match parse_tenant(input, tenant_required) {
        Ok(mut parsed) if parsed.jobs.len() == 1 => parsed.jobs.remove(0),
        other => panic!("expected one job, got {other:?}"),
    }
}

fn origin(user: Option<&str>, project: Option<&str>) -> TenantOrigin {
    TenantOrigin { user: user.map(str::to_owned), project: project.map(str::to_owned) }
}

/// What a job ends up with: (user, project, where each was written).
fn tenant_of(job: &JobDoc) -> (&str, &str, &TenantOrigin) {
    (&job.user, &job.project, &job.origin.tenant)
}

fn kube_metadata(extra: &str) -> String {
    article_job_with(
        "  name: paddle-high-priority-training\n",
        &format!("  name: paddle-high-priority-training\n{extra}"),
    )
}

#[test]
fn the_default_options_require_the_tenant() {
    assert_eq!(ParseOptions::default(), ParseOptions { tenant_required: true, for_cluster: false });
    let errors = parse_err(&native_with("tenant", ""));
    assert_eq!(errors.to_string(), "document 1: tenant: required field is missing");
}

#[test]
fn native_tenant_parts_and_where_they_were_written() {
    struct Case {
        tenant: &'static str,
        required: bool,
        user: &'static str,
        project: &'static str,
        written: TenantOrigin,
    }
    let both = origin(Some("tenant.user"), Some("tenant.project"));
    let cases = [
        Case { tenant: "", required: false, user: "", project: "", written: origin(None, None) },
        Case { tenant: "{}", required: false, user: "", project: "", written: origin(None, None) },
        Case {
            tenant: "{ project: ads }",
            required: false,
            user: "",
            project: "ads",
            written: origin(None, Some("tenant.project")),
        },
        Case {
            tenant: "{ user: alice }",
            required: false,
            user: "alice",
            project: "",
            written: origin(Some("tenant.user"), None),
        },
        Case {
            tenant: "{ user: alice, project: ads }",
            required: false,
            user: "alice",
            project: "ads",
            written: both.clone(),
        },
        // Required: as before, the user defaults to the project, and is not "written".
        Case {
            tenant: "{ project: ads }",
            required: true,
            user: "ads",
            project: "ads",
            written: origin(None, Some("tenant.project")),
        },
        Case { tenant: "{ user: alice, project: ads }", required: true, user: "alice", project: "ads", written: both },
    ];
    for c in cases {
        let job = only_job(&native_with("tenant", c.tenant), c.required);
        assert_eq!(tenant_of(&job), (c.user, c.project, &c.written), "tenant: {} required: {}", c.tenant, c.required);
    }
}

#[test]
fn a_required_tenant_still_needs_its_project() {
    let errors = parse_tenant(&native_with("tenant", "{ user: alice }"), true).unwrap_err();
    assert_eq!(errors.to_string(), "document 1: tenant.project: required field is missing");
}

#[test]
fn tenant_parts_are_validated_when_given() {
    let errors = parse_tenant(&native_with("tenant", r#"{ user: "", project: "a b" }"#), false).unwrap_err();
    let paths: Vec<&str> = errors.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(paths, ["tenant.project", "tenant.user"]);
}

#[test]
fn kubernetes_tenant_parts_and_where_they_were_written() {
    struct Case {
        metadata: String,
        required: bool,
        user: &'static str,
        project: &'static str,
        written: TenantOrigin,
    }
    let namespace = "  namespace: ads\n".to_owned();
    let label = "  labels: { fairway.dev/user: alice }\n".to_owned();
    let annotation = "  annotations: { fairway.dev/user: alice }\n".to_owned();
    let cases = [
        Case { metadata: String::new(), required: false, user: "", project: "", written: origin(None, None) },
        Case {
            metadata: namespace.clone(),
            required: false,
            user: "",
            project: "ads",
            written: origin(None, Some("metadata.namespace")),
        },
        Case {
            metadata: label.clone(),
            required: false,
            user: "alice",
            project: "",
            written: origin(Some(USER_LABEL), None),
        },
        Case {
            metadata: annotation.clone(),
            required: false,
            user: "alice",
            project: "",
            written: origin(Some(USER_ANNOTATION), None),
        },
        Case {
            metadata: format!("{namespace}{label}"),
            required: false,
            user: "alice",
            project: "ads",
            written: origin(Some(USER_LABEL), Some("metadata.namespace")),
        },
        // Required: as before, namespace `default`, and the user defaults to the namespace.
        Case {
            metadata: String::new(),
            required: true,
            user: "default",
            project: "default",
            written: origin(None, None),
        },
        Case {
            metadata: namespace,
            required: true,
            user: "ads",
            project: "ads",
            written: origin(None, Some("metadata.namespace")),
        },
        Case {
            metadata: format!("{label}{annotation}"),
            required: true,
            user: "alice",
            project: "default",
            written: origin(Some(USER_LABEL), None),
        },
    ];
    for c in cases {
        let job = only_job(&kube_metadata(&c.metadata), c.required);
        assert_eq!(
            tenant_of(&job),
            (c.user, c.project, &c.written),
            "metadata: {:?} required: {}",
            c.metadata,
            c.required
        );
    }
}

#[test]
fn names_are_unique_among_the_jobs_that_name_no_project() {
    let job =
        |name: &str, tenant: &str| native_with("tenant", tenant).replace("name: ctr-model", &format!("name: {name}"));
    let input = format!("{}---\n{}---\n{}", job("x", ""), job("x", "{ project: ads }"), job("x", "{ user: bob }"));
    let errors = parse_tenant(&input, false).unwrap_err();
    assert_eq!(
        errors.to_string(),
        r#"document 3: name: duplicate job name "x" among the jobs that name no project: already used in document 1"#
    );
    let distinct = format!("{}---\n{}", job("x", ""), job("y", ""));
    assert_eq!(parse_tenant(&distinct, false).unwrap().jobs.len(), 2);
}

#[test]
fn a_job_without_a_tenant_serializes_without_one_and_reads_back() {
    for (tenant, written) in [("", json!(null)), ("{ project: ads }", json!({ "project": "ads" }))] {
        let job = only_job(&native_with("tenant", tenant), false);
        let value = serde_json::to_value(&job).unwrap();
        assert_eq!(value.get("tenant").cloned().unwrap_or(json!(null)), written, "tenant: {tenant}");
        let again = only_job(&value.to_string(), false);
        assert_eq!((again.user.as_str(), again.project.as_str()), (job.user.as_str(), job.project.as_str()));
    }
}
