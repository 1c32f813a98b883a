//! `--gpus` parsing, simulated layouts, NVML fallback, model names.

use fairway_exec::{ExecError, GpuSource, SimulatedGpus, discover, short_model_name};

#[test]
fn simulated_gpus_parse() {
    let parse = |s: &str| SimulatedGpus::parse(s).unwrap();
    assert_eq!(parse("8"), SimulatedGpus { nodes: 1, gpus_per_node: 8 });
    assert_eq!(parse("16x8"), SimulatedGpus { nodes: 16, gpus_per_node: 8 });
    assert_eq!(parse(" 2X4 "), SimulatedGpus { nodes: 2, gpus_per_node: 4 });
    assert_eq!(parse("4096x64"), SimulatedGpus { nodes: 4096, gpus_per_node: 64 });
}

#[test]
fn simulated_gpus_errors_name_the_value_and_the_expected_form() {
    let cases = [
        ("", "N is missing"),
        ("0", "N must be at least 1"),
        ("-1", "not a whole number"),
        ("eight", "not a whole number"),
        ("x8", "NODES is missing"),
        ("8x", "GPUS is missing"),
        ("2x0", "GPUS must be at least 1"),
        ("2x3x4", "not a whole number"),
        ("4097x1", "more than the limit of 4096"),
        ("65", "more than the limit of 64"),
        ("1x65", "more than the limit of 64"),
        ("99999999999", "too large"),
    ];
    for (value, reason) in cases {
        let err = SimulatedGpus::parse(value).unwrap_err();
        assert!(matches!(err, ExecError::InvalidGpuFlag { .. }), "{value}: {err:?}");
        let message = err.to_string();
        assert!(message.contains(&format!("{value:?}")), "{message}");
        assert!(message.contains(reason), "{value}: {message}");
        assert!(message.contains("expected N or NODESxGPUS"), "{message}");
    }
}

#[test]
fn simulated_layout_has_named_nodes_with_local_indices() {
    let (layout, source) = discover(Some(&SimulatedGpus::parse("16x8").unwrap()), "A100").unwrap();
    assert_eq!(source, GpuSource::Simulated);
    assert_eq!(layout.nodes.len(), 16);
    assert_eq!(layout.gpu_count(), 128);
    for (n, node) in layout.nodes.iter().enumerate() {
        assert_eq!(node.name, format!("node-{n}"));
        assert_eq!(node.gpu_model, "A100");
        assert_eq!(node.gpus.iter().map(|g| g.index).collect::<Vec<_>>(), (0..8).collect::<Vec<_>>());
        assert!(node.gpus.iter().all(|g| g.uuid.is_none() && g.memory_mib.is_none()));
        // Each simulated node gets the machine's totals (documented on `discover`).
        assert_eq!((node.cpu_millis, node.memory_mib), fairway_exec::machine_resources());
        assert!(node.cpu_millis >= 1000 && node.memory_mib > 0);
    }
}

#[test]
fn without_simulation_nvml_is_used_or_its_absence_is_explained() {
    match discover(None, "ignored") {
        Ok((layout, source)) => {
            assert_eq!(source, GpuSource::Nvml);
            assert_eq!(layout.nodes.len(), 1);
            assert!(layout.gpu_count() > 0);
            assert!(layout.nodes[0].gpus.iter().all(|g| g.uuid.is_some()));
        }
        Err(err) => {
            assert!(matches!(err, ExecError::NvmlUnavailable { .. } | ExecError::Nvml { .. }), "{err:?}");
            assert!(err.to_string().contains("NVML"), "{err}");
            if let ExecError::NvmlUnavailable { .. } = err {
                assert!(err.to_string().contains("--gpus N"), "{err}");
            }
        }
    }
}

#[test]
fn short_model_names() {
    for (full, short) in [
        ("NVIDIA A100-SXM4-80GB", "A100"),
        ("NVIDIA A100 80GB PCIe", "A100"),
        ("NVIDIA H100 80GB HBM3", "H100"),
        ("NVIDIA H200", "H200"),
        ("Tesla V100-SXM2-16GB", "V100"),
        ("NVIDIA GeForce RTX 4090", "RTX4090"),
        ("NVIDIA RTX A6000", "A6000"),
        ("NVIDIA L40S", "L40S"),
        ("  custom  ", "custom"),
    ] {
        assert_eq!(short_model_name(full), short, "{full}");
    }
}
