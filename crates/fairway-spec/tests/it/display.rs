//! How errors and warnings read: `input: <reason>` for the input as a whole,
//! `document N: <reason>` for a whole document, `document N: <path>: <reason>` for a field.

use fairway_spec::{ParseLimits, SpecError, SpecErrors, Warning, parse_documents};

use crate::support::*;

#[test]
fn each_kind_of_location_renders_as_documented() {
    assert_eq!(SpecError::new(0, "", "too big").to_string(), "input: too big");
    assert_eq!(SpecError::new(3, "", "must be a mapping").to_string(), "document 3: must be a mapping");
    assert_eq!(SpecError::new(2, "spec.parallelism", "too many").to_string(), "document 2: spec.parallelism: too many");
    // A job embedded in another file (the simulator's scenarios) is read as document 0
    // with a path prefix: the path still shows.
    assert_eq!(SpecError::new(0, "jobs[1].name", "bad").to_string(), "input: jobs[1].name: bad");
    let warning = Warning { document: 1, path: "status".into(), message: "ignored".into() };
    assert_eq!(warning.to_string(), "document 1: status: ignored");
    let whole = Warning { document: 0, path: String::new(), message: "odd".into() };
    assert_eq!(whole.to_string(), "input: odd");
}

#[test]
fn errors_about_the_whole_input_say_input() {
    let mut non_utf8 = b"name: ctr-model\n".to_vec();
    non_utf8.extend_from_slice(&[b'#', 0xff, 0xfe, b'\n']);
    let shown = |bytes: &[u8]| parse_documents(bytes, &ParseLimits::default()).unwrap_err().to_string();
    assert_eq!(shown(&non_utf8), "input: input is not valid UTF-8: invalid byte sequence at byte offset 17");
    assert_eq!(shown(b"name: \"a\n"), "input: invalid YAML: line 1, column 7: unclosed quote");
    let tiny = ParseLimits { input_bytes_max: 4, ..ParseLimits::default() };
    let too_large = parse_documents(b"name: x\n", &tiny).unwrap_err();
    assert_eq!(too_large.to_string(), "input: input is 8 bytes, more than the limit of 4 bytes");
}

#[test]
fn errors_about_a_whole_document_name_only_the_document() {
    let errors = parse_err(&format!("{NATIVE_JOB}---\n- a\n"));
    assert_eq!(errors.to_string(), "document 2: must be a mapping (a job or a priority class), got a list");
}

#[test]
fn several_errors_render_one_per_line() {
    let errors = SpecErrors(vec![SpecError::new(0, "", "a"), SpecError::new(1, "", "b"), SpecError::new(1, "x", "c")]);
    assert_eq!(errors.to_string(), "input: a\ndocument 1: b\ndocument 1: x: c");
}
