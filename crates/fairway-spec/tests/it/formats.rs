//! YAML and JSON, one or many documents, and the input budgets.

use fairway_spec::{ParseLimits, PriorityRef, parse_documents};

use crate::support::*;

const ARTICLE_JOB_JSON: &str = r#"{
	"apiVersion": "batch/v1",
	"kind": "Job",
	"metadata": { "name": "paddle-high-priority-training" },
	"spec": {
		"template": {
			"spec": {
				"priorityClassName": "high-priority",
				"containers": [{
					"name": "paddle-trainer",
					"image": "registry.baidubce.com/paddlepaddle/paddle:2.6-gpu-cuda11.8-cudnn8",
					"command": ["python", "train_ctr.py"],
					"resources": { "limits": { "nvidia.com/gpu": 1 } }
				}],
				"restartPolicy": "Never"
			}
		}
	}
}"#;

#[test]
fn json_reads_like_yaml() {
    // Tab-indented on purpose: JSON allows tabs where YAML indentation does not.
    let from_json = parse_ok(ARTICLE_JOB_JSON);
    let from_yaml = parse_ok(ARTICLE_JOB);
    assert_eq!(from_json, from_yaml);
}

#[test]
fn concatenated_json_values_are_documents() {
    let class = r#"{"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "high-priority"}, "value": 1000000}"#;
    let parsed = parse_ok(&format!("{class}\n{ARTICLE_JOB_JSON}\n"));
    assert_eq!(parsed.priority_classes.len(), 1);
    assert_eq!(parsed.jobs.len(), 1);
    assert_eq!(parsed.jobs[0].origin.document, 2);
    assert_eq!(parsed.warnings[0].document, 2);
}

#[test]
fn multi_document_yaml_keeps_document_order_and_numbers() {
    let input = format!("{ARTICLE_CLASS}---\n{ARTICLE_JOB}---\n{NATIVE_JOB}");
    let parsed = parse_ok(&input);
    assert_eq!(parsed.priority_classes[0].origin.document, 1);
    let docs: Vec<(usize, &str)> = parsed.jobs.iter().map(|j| (j.origin.document, j.name.as_str())).collect();
    assert_eq!(docs, [(2, "paddle-high-priority-training"), (3, "ctr-model")]);
}

#[test]
fn empty_documents_are_skipped_and_not_counted() {
    let input = format!("---\n# nothing here\n---\n{NATIVE_JOB}---\n");
    let parsed = parse_ok(&input);
    assert_eq!(parsed.jobs[0].origin.document, 1);
}

#[test]
fn a_byte_order_mark_is_accepted() {
    let mut input = "\u{feff}".to_owned();
    input.push_str(ARTICLE_JOB_JSON);
    assert_eq!(parse_ok(&input).jobs.len(), 1);
}

#[test]
fn fairway_v1_envelope_is_optional_for_native_documents() {
    let with_envelope = format!("apiVersion: fairway/v1\nkind: Job\n{NATIVE_JOB}");
    assert_eq!(parse_ok(&with_envelope).jobs, parse_ok(NATIVE_JOB).jobs);
    let compact_class =
        "apiVersion: fairway/v1\nkind: PriorityClass\nname: batch\nvalue: 500\npreemptionPolicy: Never\n";
    let parsed = parse_ok(compact_class);
    assert_eq!(parsed.priority_classes[0].name, "batch");
    assert_eq!(parsed.priority_classes[0].value, 500);
}

#[test]
fn yaml_1_1_booleans_and_leading_zeros_stay_strings() {
    // The "Norway problem": `no` must not turn into false; `010` must not turn into 10.
    let input =
        NATIVE_JOB.replace("EPOCHS: \"3\"", "COUNTRY: no, CODE: 010").replace("priority: high", "priority: 100");
    let job = &parse_ok(&input).jobs[0];
    assert_eq!(job.env["COUNTRY"], "no");
    assert_eq!(job.env["CODE"], "010");
    assert_eq!(job.priority, PriorityRef::Value(100));
}

#[test]
fn limits_are_configurable() {
    let limits = ParseLimits { input_bytes_max: 100, documents_max: 2, depth_max: 3, ..ParseLimits::default() };
    let errors = parse_documents(NATIVE_JOB.as_bytes(), &limits).unwrap_err();
    assert!(errors.0[0].reason.contains("more than the limit of 100 bytes"), "{errors}");
    let three = "a: 1\n---\na: 1\n---\na: 1\n";
    let errors = parse_documents(three.as_bytes(), &limits).unwrap_err();
    assert!(errors.0[0].reason.contains("too many documents: the limit is 2"), "{errors}");
    let three_json = "{}\n{}\n{}";
    let errors = parse_documents(three_json.as_bytes(), &limits).unwrap_err();
    assert!(errors.0[0].reason.contains("too many documents: the limit is 2"), "{errors}");
    let deep = "a: { b: { c: { d: 1 } } }";
    let errors = parse_documents(deep.as_bytes(), &limits).unwrap_err();
    assert!(errors.0[0].reason.contains("nests deeper than the limit of 3"), "{errors}");
    let deep_json = r#"{"a": {"b": {"c": {"d": 1}}}}"#;
    let errors = parse_documents(deep_json.as_bytes(), &limits).unwrap_err();
    assert!(errors.0[0].reason.contains("nests deeper than the limit of 3"), "{errors}");
}

#[test]
fn alias_bombs_are_stopped() {
    let mut bomb = String::from("a: &a [x, x, x, x, x, x, x, x, x, x]\n");
    for (name, prev) in ["b", "c", "d", "e", "f", "g", "h"].iter().zip(["a", "b", "c", "d", "e", "f", "g"]) {
        let refs = vec![format!("*{prev}"); 10].join(", ");
        bomb.push_str(&format!("{name}: &{name} [{refs}]\n"));
    }
    let errors = parse_err(&bomb);
    assert_eq!(errors.0[0].document, 0);
    assert!(errors.0[0].reason.contains("alias"), "{errors}");
}

#[test]
fn hostile_bytes_never_panic() {
    let inputs: [&[u8]; 8] = [
        b"",
        b"\x00\x01\x02",
        b"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[",
        b"name: x\nresources: { gpus: 99999999999999999999999999 }\n",
        b"apiVersion: 3\nkind: [x]\n",
        b"{\"metadata\": null, \"spec\": null}",
        b"apiVersion: batch/v1\nkind: Job\nmetadata: 3\nspec: { template: { spec: { containers: [3, {resources: {limits: []}}] } } }\n",
        b"? [a, b]\n: c\n",
    ];
    for input in inputs {
        let _ = parse_documents(input, &ParseLimits::default());
    }
}
