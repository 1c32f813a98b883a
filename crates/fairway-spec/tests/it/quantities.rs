//! Kubernetes quantities, as they map to millicores and MiB.

use fairway_spec::quantity::{QuantityError, cpu_millis, memory_mib, whole_count};

use crate::support::*;

#[test]
fn cpu_quantities() {
    let table = [
        ("500m", 500),
        ("2", 2000),
        ("1.5", 1500),
        ("0.25", 250),
        ("100m", 100),
        ("1", 1000),
        ("0.0001", 1),
        ("1k", 1_000_000),
        ("2e3", 2_000_000),
        ("250000u", 250),
    ];
    for (text, millis) in table {
        assert_eq!(cpu_millis(text), Ok(millis), "{text}");
    }
}

#[test]
fn memory_quantities_round_up_to_mib() {
    let table = [
        ("16Gi", 16 * 1024),
        ("512Mi", 512),
        ("1Gi", 1024),
        ("1G", 954),
        ("1M", 1),
        ("1000Mi", 1000),
        ("134217728", 128),
        ("134217729", 129),
        ("1", 1),
        ("0", 0),
        ("1.5Gi", 1536),
        ("64Ki", 1),
        ("2Ti", 2 * 1024 * 1024),
        ("1e6", 1),
    ];
    for (text, mib) in table {
        assert_eq!(memory_mib(text), Ok(mib), "{text}");
    }
}

#[test]
fn invalid_quantities() {
    let table = [
        ("", QuantityError::Syntax),
        ("two", QuantityError::Syntax),
        ("1 Gi", QuantityError::Syntax),
        ("1GB", QuantityError::Syntax),
        ("1mi", QuantityError::Syntax),
        ("--1", QuantityError::Syntax),
        ("-500m", QuantityError::Negative),
        ("1e999", QuantityError::TooLarge),
        ("20000000Ei", QuantityError::TooLarge),
    ];
    for (text, error) in table {
        assert_eq!(memory_mib(text), Err(error), "{text}");
    }
    assert_eq!(whole_count("0.5"), Err(QuantityError::NotWhole));
    assert_eq!(whole_count("3"), Ok(3));
}

#[test]
fn numbers_in_yaml_are_quantities_too() {
    let input = ARTICLE_JOB
        .replace("nvidia.com/gpu: 1", "nvidia.com/gpu: 1\n            cpu: 0.5\n            memory: 1073741824");
    let job = &parse_ok(&input).jobs[0];
    assert_eq!((job.resources.cpu_millis, job.resources.memory_mib), (500, 1024));
}
