//! Inputs that trip the YAML and JSON parsers get messages in the user's terms, at the
//! field they concern where there is one, never the parsers' own wording for programmers
//! (`set DuplicateKeyPolicy in Options`, `use Option<String>`) nor Rust type names.

use fairway_spec::{ParseLimits, ParseOptions, SpecErrors, parse_documents_with};

use crate::support::*;

struct Case {
    name: &'static str,
    input: String,
    document: usize,
    path: &'static str,
    reason: &'static str,
}

fn case(
    name: &'static str,
    input: impl Into<String>,
    document: usize,
    path: &'static str,
    reason: &'static str,
) -> Case {
    Case { name, input: input.into(), document, path, reason }
}

/// Words a user cannot act on. Every message in this file is checked for all of them.
const INTERNAL: &[&str] = &[
    "Options",
    "Option<",
    "serde",
    "saphyr",
    "DuplicateKeyPolicy",
    "configured policy",
    "Value",
    "u32",
    "u64",
    "i32",
    "i64",
    "f64",
    "usize",
];

fn cases() -> Vec<Case> {
    vec![
        case("duplicate key at the top", "name: a\nname: b\n", 1, "name", r#"duplicate key "name""#),
        case(
            "duplicate key nested, flow style",
            NATIVE_JOB
                .replace("tenant: { user: alice, project: ads }", "tenant: { user: alice, user: bob, project: ads }"),
            1,
            "tenant.user",
            r#"duplicate key "user""#,
        ),
        case(
            "duplicate key nested, block style",
            article_job_with("  name: paddle-high-priority-training\n", "  name: a\n  name: b\n"),
            1,
            "metadata.name",
            r#"duplicate key "name""#,
        ),
        case(
            "duplicate key in a list item",
            article_job_with("      - name: paddle-trainer\n", "      - name: a\n        name: b\n"),
            1,
            "spec.template.spec.containers[0].name",
            r#"duplicate key "name""#,
        ),
        case(
            "duplicate key in the second document",
            format!("{NATIVE_JOB}---\n{}", NATIVE_JOB.replace("replicas: 1", "replicas: 1\nreplicas: 2")),
            2,
            "replicas",
            r#"duplicate key "replicas""#,
        ),
        case(
            "duplicate key in JSON, nested",
            r#"{"name": "x", "tenant": {"project": "a", "project": "b"}, "resources": {"gpus": 1}, "image": "i"}"#,
            1,
            "tenant.project",
            r#"duplicate key "project""#,
        ),
        case("YAML .inf", NATIVE_JOB.replace("gpus: 2", "gpus: .inf"), 1, "resources.gpus", "not a finite number"),
        case(
            "YAML .nan",
            NATIVE_JOB.replace("gpus: 2", "gpus: .nan"),
            1,
            "resources.gpus",
            "not a finite number: got NaN",
        ),
        case("YAML -.inf", native_with("priority", "-.inf"), 1, "priority", "not a finite number: got -infinity"),
        case(
            "YAML 1e400",
            native_with("max_runtime_seconds", "1e400"),
            1,
            "max_runtime_seconds",
            "not a finite number",
        ),
        case(
            "JSON 1e400",
            r#"{"name": "x", "tenant": {"project": "a"}, "resources": {"gpus": 1e400}, "image": "i"}"#,
            1,
            "resources.gpus",
            "not a finite number",
        ),
        case(
            "non-finite env value",
            NATIVE_JOB.replace("EPOCHS: \"3\"", "EPOCHS: .inf"),
            1,
            "env.EPOCHS",
            "not a finite number",
        ),
        case("non-finite list item", native_with("command", "[python, .nan]"), 1, "command[1]", "not a finite number"),
        case(
            "huge integer",
            NATIVE_JOB.replace("gpus: 2", "gpus: 99999999999999999999999"),
            1,
            "resources.gpus",
            "must be a positive integer, got a number too large to hold exactly (about 1e+23)",
        ),
        case("negative count", NATIVE_JOB.replace("gpus: 2", "gpus: -3"), 1, "resources.gpus", "got -3"),
        case(
            "negative memory",
            NATIVE_JOB.replace("memory_mib: 65536", "memory_mib: -1"),
            1,
            "resources.memory_mib",
            "must be a non-negative integer number of MiB, got -1",
        ),
        case("fraction for an integer", native_with("retries", "1.5"), 1, "retries", "got 1.5"),
        case("fraction for a priority", native_with("priority", "2.5"), 1, "priority", "got 2.5"),
        case(
            "top-level list",
            "- name: a\n- name: b\n",
            1,
            "",
            "must be a mapping (a job or a priority class), got a list",
        ),
        case("top-level scalar", "hello\n", 1, "", r#"must be a mapping (a job or a priority class), got "hello""#),
        case("top-level NaN", ".nan\n", 1, "", "not a finite number"),
        case(
            "tabs for indentation",
            "name: a\ntenant:\n\tproject: x\n",
            0,
            "",
            "invalid YAML: line 3, column 2: tabs disallowed",
        ),
        case("unclosed quote", "name: \"a\n", 0, "", "invalid YAML: line 1, column 7: unclosed quote"),
        case("unclosed bracket", "name: [a\n", 0, "", "invalid YAML: line 1, column 7: unclosed bracket '['"),
        case(
            "alias to a missing anchor",
            "name: *nope\n",
            0,
            "",
            "line 1, column 7: an alias (*name) refers to an anchor (&name) that is not defined before it",
        ),
        case(
            "custom tag",
            native_with("image", "!secret img"),
            0,
            "",
            r#"unsupported tag "!secret": fairway reads plain YAML values, remove the tag"#,
        ),
        case("binary not UTF-8", "name: !!binary //79\n", 0, "", "a !!binary value does not decode to UTF-8 text"),
        case("null key", "~: a\n", 0, "", "line 1, column 1: a mapping key is null; keys must be strings"),
        case("list as a key", "? [a]\n: b\n", 0, "", "a mapping key is a list or a mapping; keys must be strings"),
        case(
            "merge key given a scalar",
            "a: 1\n<<: 3\n",
            0,
            "",
            "a merge key (<<) must be given a mapping or a list of mappings",
        ),
        case(
            "unclosed JSON",
            r#"{"name": "a""#,
            0,
            "",
            "not valid JSON (line 1, column 12: the input ends in the middle of an object) nor YAML (line 1, column 1: unclosed bracket '{')",
        ),
    ]
}

fn parse_with(input: &str, tenant_required: bool) -> Result<(), SpecErrors> {
    parse_documents_with(
        input.as_bytes(),
        &ParseLimits::default(),
        &ParseOptions { tenant_required, ..ParseOptions::default() },
    )
    .map(|_| ())
}

#[test]
fn parser_problems_are_reported_in_user_terms() {
    let mut failures = Vec::new();
    for c in cases() {
        let Err(errors) = parse_with(&c.input, true) else {
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
        for e in &errors {
            if let Some(word) = INTERNAL.iter().find(|w| e.to_string().contains(*w)) {
                failures.push(format!("{}: internal text {word:?} in {e}", c.name));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn a_raw_problem_is_reported_once_and_with_the_other_errors_of_its_document() {
    // The NaN stands where a GPU count should be: one error says so, not a second one
    // about the count; the bad name is reported as well.
    let input = NATIVE_JOB.replace("gpus: 2", "gpus: .nan").replace("name: ctr-model", "name: Bad_Name");
    let errors = parse_err(&input);
    let located: Vec<(&str, &str)> = errors.iter().map(|e| (e.path.as_str(), e.reason.as_str())).collect();
    assert_eq!(
        located,
        [
            ("resources.gpus", "not a finite number: got NaN (.nan)"),
            ("name", r#"must match [a-z0-9]([-a-z0-9.]*[a-z0-9])? (lowercase letters, digits, '-'), got "Bad_Name""#),
        ]
    );
}

#[test]
fn a_duplicate_key_keeps_the_first_value_and_hides_nothing_else() {
    let input = NATIVE_JOB.replace("replicas: 1", "replicas: 1\nreplicas: 0\nretries: 200");
    let errors = parse_err(&input);
    let located: Vec<(&str, &str)> = errors.iter().map(|e| (e.path.as_str(), e.reason.as_str())).collect();
    assert_eq!(
        located,
        [
            ("replicas", r#"duplicate key "replicas": a key may appear only once in a mapping"#),
            ("retries", "must be an integer between 0 and 100, got 200"),
        ]
    );
}

#[test]
fn empty_inputs_and_documents_are_not_errors() {
    // The caller decides what an input with no document means (the server refuses it).
    for empty in ["", "\n", "# only a comment\n", "---\n", "---\n---\n", "~\n", "\u{feff}"] {
        let parsed = parse_ok(empty);
        assert!(parsed.jobs.is_empty() && parsed.priority_classes.is_empty(), "{empty:?}");
    }
}

#[test]
fn yaml_1_1_underscored_numbers_stay_strings() {
    // YAML 1.2 has no `1_000`: it is the string "1_000", so a count written that way is
    // refused rather than read as 1000.
    let errors = parse_err(&NATIVE_JOB.replace("gpus: 2", "gpus: 1_000"));
    assert_eq!(errors.0[0].reason, r#"must be a positive integer, got "1_000""#);
    let job = &parse_ok(&NATIVE_JOB.replace("EPOCHS: \"3\"", "EPOCHS: 1_000")).jobs[0];
    assert_eq!(job.env["EPOCHS"], "1_000");
}
