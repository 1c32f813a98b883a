//! Arbitrary bytes through the spec reader, with the tenant required and not. Beyond "never
//! panics", each run checks properties that must hold for every input:
//!
//! 1. every error renders as `input: ...` (document 0) or `document N: ...`, and its reason,
//!    with the user's own quoted text taken out, holds no library or Rust type name;
//! 2. resolving against the built-in classes reports every error plain parsing reports
//!    (and, when parsing succeeds, only unknown classes on top);
//! 3. a parsed job written back as JSON, and as YAML, reads back equal (its origin aside;
//!    standalone mode only);
//!    a parsed priority class written back reads back equal;
//! 4. an input accepted with the tenant required is accepted without it, and one accepted
//!    for the standalone server is accepted in cluster mode (which only relaxes rules);
//! 5. every resolved job converts to the core's job.

#![no_main]

use fairway_core::JobId;
use fairway_spec::{
    Interner, JobDoc, Origin, ParseLimits, ParseOptions, Parsed, PriorityClassDoc, PriorityClasses, SpecError,
    SpecErrors, parse_and_resolve, parse_documents_with, parse_priority_class,
};
use libfuzzer_sys::fuzz_target;

/// Text that only makes sense to the programmer of a library, never to a user.
const INTERNAL: &[&str] = &[
    "Options",
    "Option<",
    "serde",
    "saphyr",
    "DuplicateKeyPolicy",
    "configured policy",
    "Value(",
    "u32",
    "u64",
    "i32",
    "i64",
    "f64",
    "usize",
];

fuzz_target!(|data: &[u8]| {
    let standalone = |tenant_required| ParseOptions { tenant_required, ..ParseOptions::default() };
    let strict = check(data, &standalone(true));
    let relaxed = check(data, &standalone(false));
    let cluster = check(data, &ParseOptions::cluster());
    if strict {
        assert!(relaxed, "accepted with the tenant required but refused without it");
        assert!(cluster, "accepted for the standalone server but refused in cluster mode");
    }
});

/// Runs every property for one setting of the options; `true` when the input parsed.
fn check(data: &[u8], options: &ParseOptions) -> bool {
    let limits = ParseLimits::default();
    let parsed = parse_documents_with(data, &limits, options);
    let resolved = parse_and_resolve(data, &limits, &PriorityClasses::builtin(), options);
    if let Err(errors) = &resolved {
        errors.iter().for_each(check_message);
    }
    match parsed {
        Err(errors) => {
            errors.iter().for_each(check_message);
            let resolve_errors = resolved.as_ref().expect_err("parsing failed but resolving succeeded");
            for e in &errors {
                assert!(resolve_errors.0.contains(e), "resolving lost the error {e:?}; it reported {resolve_errors:?}");
            }
            false
        }
        Ok(parsed) => {
            // Cluster mode accepts what the native format does not (an entrypoint without a
            // command, any image string): its jobs are never written back as native jobs.
            if !options.for_cluster {
                check_round_trips(&parsed, options);
            }
            match resolved {
                Ok(resolved) => {
                    assert_eq!(resolved.parsed, parsed);
                    assert_eq!(resolved.jobs.len(), parsed.jobs.len());
                    let mut interner = Interner::new();
                    for (i, job) in resolved.jobs.iter().enumerate() {
                        if let Err(e) = job.to_core(JobId(i as u64 + 1), &mut interner) {
                            panic!("a resolved job does not convert: {e}");
                        }
                    }
                }
                Err(errors) => only_unknown_classes(&errors),
            }
            true
        }
    }
}

fn only_unknown_classes(errors: &SpecErrors) {
    for e in errors {
        assert!(e.reason.starts_with("unknown priority class"), "parsed, yet resolving reported {e:?}");
    }
}

fn check_message(e: &SpecError) {
    let shown = e.to_string();
    let location = if e.document == 0 { "input: ".to_owned() } else { format!("document {}: ", e.document) };
    assert!(shown.starts_with(&location), "{shown:?} does not start with {location:?}");
    assert!(!e.reason.is_empty(), "an error without a reason: {e:?}");
    let own_words = without_quoted(&e.reason);
    for word in INTERNAL {
        assert!(!own_words.contains(word), "internal text {word:?} in {shown:?}");
    }
}

/// The reason with every JSON-quoted string (the user's own text, echoed) taken out.
fn without_quoted(reason: &str) -> String {
    let mut out = String::new();
    let mut chars = reason.chars();
    while let Some(c) = chars.next() {
        if c != '"' {
            out.push(c);
            continue;
        }
        while let Some(q) = chars.next() {
            match q {
                '\\' => {
                    chars.next();
                }
                '"' => break,
                _ => {}
            }
        }
    }
    out
}

fn check_round_trips(parsed: &Parsed, options: &ParseOptions) {
    for job in &parsed.jobs {
        let json = serde_json::to_string(job).expect("a job serializes to JSON");
        assert_eq!(without_origin(&read_back(&json, options)), without_origin(job), "JSON round trip: {json}");
        let yaml = serde_saphyr::to_string(job).expect("a job serializes to YAML");
        assert_eq!(without_origin(&read_back(&yaml, options)), without_origin(job), "YAML round trip: {yaml}");
    }
    for class in &parsed.priority_classes {
        let value = serde_json::to_value(class).expect("a class serializes");
        match parse_priority_class(&value, 1, "") {
            Ok(again) => assert_eq!(class_without_origin(&again), class_without_origin(class), "{value}"),
            Err(e) => panic!("a parsed class written back does not read back: {e}\n{value}"),
        }
    }
}

fn read_back(text: &str, options: &ParseOptions) -> JobDoc {
    match parse_documents_with(text.as_bytes(), &ParseLimits::default(), options) {
        Ok(mut again) if again.jobs.len() == 1 => again.jobs.remove(0),
        Ok(again) => panic!("a job written back reads as {} jobs:\n{text}", again.jobs.len()),
        Err(e) => panic!("a job written back does not read back: {e}\n{text}"),
    }
}

fn without_origin(job: &JobDoc) -> JobDoc {
    JobDoc { origin: Origin::default(), ..job.clone() }
}

fn class_without_origin(class: &PriorityClassDoc) -> PriorityClassDoc {
    PriorityClassDoc { origin: Origin::default(), ..class.clone() }
}
