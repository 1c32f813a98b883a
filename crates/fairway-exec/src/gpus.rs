//! GPU discovery: real GPUs through NVML, or a simulated layout from `--gpus N|NODESxGPUS`.

use std::fs;

use crate::ExecError;

/// The most simulated nodes `--gpus NODESxGPUS` accepts.
pub const SIMULATED_NODES_MAX: u32 = 4096;
/// The most GPUs per simulated node `--gpus` accepts.
pub const SIMULATED_GPUS_PER_NODE_MAX: u32 = 64;

/// The devices the server can place jobs on, node by node.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct GpuLayout {
    /// The nodes, in a stable order (`node-0`, `node-1`, … when simulated).
    pub nodes: Vec<NodeDevices>,
}

impl GpuLayout {
    /// Total GPUs over all nodes.
    pub fn gpu_count(&self) -> usize {
        self.nodes.iter().map(|n| n.gpus.len()).sum()
    }
}

/// One node's devices and its CPU and memory capacity.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct NodeDevices {
    /// Node name: the host name for NVML, `node-<i>` when simulated.
    pub name: String,
    /// The GPU model as NVML reports it (e.g. `NVIDIA A100-SXM4-80GB`), or the configured model
    /// name when simulated. See [`short_model_name`].
    pub gpu_model: String,
    /// The node's GPUs, by local index.
    pub gpus: Vec<GpuDevice>,
    /// CPU capacity in millicores.
    pub cpu_millis: u64,
    /// Memory capacity in MiB.
    pub memory_mib: u64,
}

/// One GPU.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct GpuDevice {
    /// Local index on its node: what `CUDA_VISIBLE_DEVICES` gets.
    pub index: u32,
    /// NVML's UUID (`GPU-…`); `None` when simulated.
    pub uuid: Option<String>,
    /// Device memory in MiB; `None` when simulated.
    pub memory_mib: Option<u64>,
}

/// Where a [`GpuLayout`] came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GpuSource {
    /// Real devices, found through NVML.
    Nvml,
    /// Made up from `--gpus`; jobs get `CUDA_VISIBLE_DEVICES` but no real device.
    Simulated,
}

/// A simulated cluster shape, parsed from the `--gpus` flag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SimulatedGpus {
    /// Number of nodes, `1..=SIMULATED_NODES_MAX`.
    pub nodes: u32,
    /// GPUs on each node, `1..=SIMULATED_GPUS_PER_NODE_MAX`.
    pub gpus_per_node: u32,
}

impl SimulatedGpus {
    /// Parses `N` (one node with N GPUs) or `NODESxGPUS` (e.g. `16x8`: 16 nodes of 8 GPUs).
    /// Surrounding whitespace is ignored and `X` works like `x`.
    pub fn parse(value: &str) -> Result<Self, ExecError> {
        let bad = |reason: String| ExecError::InvalidGpuFlag { value: value.to_owned(), reason };
        let trimmed = value.trim();
        let (nodes, gpus) = match trimmed.split_once(['x', 'X']) {
            Some((nodes, gpus)) => (parse_count(nodes, "NODES").map_err(bad)?, parse_count(gpus, "GPUS").map_err(bad)?),
            None => (1, parse_count(trimmed, "N").map_err(bad)?),
        };
        if nodes > SIMULATED_NODES_MAX {
            return Err(bad(format!("{nodes} nodes is more than the limit of {SIMULATED_NODES_MAX}")));
        }
        if gpus > SIMULATED_GPUS_PER_NODE_MAX {
            return Err(bad(format!("{gpus} GPUs per node is more than the limit of {SIMULATED_GPUS_PER_NODE_MAX}")));
        }
        Ok(SimulatedGpus { nodes, gpus_per_node: gpus })
    }
}

fn parse_count(text: &str, what: &str) -> Result<u32, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err(format!("{what} is missing"));
    }
    if !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("{what} {text:?} is not a whole number"));
    }
    match text.parse::<u32>() {
        Ok(0) => Err(format!("{what} must be at least 1")),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("{what} {text} is too large")),
    }
}

/// Finds the GPUs to schedule on.
///
/// - With `simulated`, builds nodes `node-0`, `node-1`, … with `gpus_per_node` GPUs each, named
///   `model_name`. **Each simulated node reports this machine's full CPU and memory** (see
///   [`machine_resources`]), not a share of it: simulation exists to exercise GPU scheduling, and
///   dividing a laptop's 8 cores over 16 nodes would make ordinary CPU requests unplaceable.
/// - Otherwise asks NVML (feature `nvml`) for one node named after this host. If NVML cannot be
///   loaded, returns [`ExecError::NvmlUnavailable`] with the loader's message and the hint to
///   pass `--gpus N`; the server decides whether to fall back.
pub fn discover(simulated: Option<&SimulatedGpus>, model_name: &str) -> Result<(GpuLayout, GpuSource), ExecError> {
    let (cpu_millis, memory_mib) = machine_resources();
    if let Some(sim) = simulated {
        let nodes = (0..sim.nodes)
            .map(|n| NodeDevices {
                name: format!("node-{n}"),
                gpu_model: model_name.to_owned(),
                gpus: (0..sim.gpus_per_node).map(|index| GpuDevice { index, uuid: None, memory_mib: None }).collect(),
                cpu_millis,
                memory_mib,
            })
            .collect();
        return Ok((GpuLayout { nodes }, GpuSource::Simulated));
    }
    let node = discover_nvml(hostname(), cpu_millis, memory_mib)?;
    Ok((GpuLayout { nodes: vec![node] }, GpuSource::Nvml))
}

#[cfg(feature = "nvml")]
fn discover_nvml(name: String, cpu_millis: u64, memory_mib: u64) -> Result<NodeDevices, ExecError> {
    use nvml_wrapper::Nvml;
    let nvml = Nvml::init().map_err(|e| ExecError::NvmlUnavailable { message: e.to_string() })?;
    let nvml_err = |what: &str, e: nvml_wrapper::error::NvmlError| ExecError::Nvml { message: format!("{what}: {e}") };
    let count = nvml.device_count().map_err(|e| nvml_err("device count", e))?;
    if count == 0 {
        return Err(ExecError::Nvml { message: "NVML found no GPUs on this machine".to_owned() });
    }
    let mut gpus = Vec::with_capacity(count as usize);
    let mut gpu_model = String::new();
    for index in 0..count {
        let device = nvml.device_by_index(index).map_err(|e| nvml_err(&format!("device {index}"), e))?;
        let model = device.name().map_err(|e| nvml_err(&format!("device {index} name"), e))?;
        if index == 0 {
            gpu_model = model;
        } else if model != gpu_model {
            // One node has one model in the scheduler's view; a mixed machine is rare and is
            // scheduled as its first device's model.
            tracing::warn!(index, %model, first = %gpu_model, "mixed GPU models on one node; using the first");
        }
        gpus.push(GpuDevice {
            index,
            uuid: device.uuid().ok(),
            memory_mib: device.memory_info().ok().map(|m| m.total / (1024 * 1024)),
        });
    }
    Ok(NodeDevices { name, gpu_model, gpus, cpu_millis, memory_mib })
}

#[cfg(not(feature = "nvml"))]
fn discover_nvml(_name: String, _cpu_millis: u64, _memory_mib: u64) -> Result<NodeDevices, ExecError> {
    Err(ExecError::NvmlUnavailable { message: "fairway was built without the `nvml` feature".to_owned() })
}

/// This machine's CPU (available parallelism × 1000 millicores) and memory (`MemTotal` from
/// `/proc/meminfo`, in MiB; 0 if unreadable).
pub fn machine_resources() -> (u64, u64) {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get() as u64);
    let memory_mib = fs::read_to_string("/proc/meminfo").ok().and_then(|text| parse_mem_total_mib(&text)).unwrap_or(0);
    (cpus * 1000, memory_mib)
}

fn parse_mem_total_mib(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024)
}

/// This machine's host name (from `/proc/sys/kernel/hostname`, else `localhost`).
pub fn hostname() -> String {
    fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".to_owned())
}

/// Shortens an NVML product name to the model people write in job specs:
/// `NVIDIA A100-SXM4-80GB` → `A100`, `NVIDIA H100 80GB HBM3` → `H100`,
/// `Tesla V100-SXM2-16GB` → `V100`, `NVIDIA GeForce RTX 4090` → `RTX4090`,
/// `NVIDIA RTX A6000` → `A6000`. Names it does not recognise come back trimmed.
pub fn short_model_name(full: &str) -> String {
    const VENDOR_WORDS: [&str; 5] = ["NVIDIA", "Tesla", "GeForce", "Quadro", "TITAN"];
    let mut words = full.split_whitespace().filter(|w| !VENDOR_WORDS.contains(w)).peekable();
    let Some(first) = words.next() else {
        return full.trim().to_owned();
    };
    let first = first.split('-').next().unwrap_or(first);
    if first == "RTX" || first == "GTX" {
        return match words.next().map(|w| w.split('-').next().unwrap_or(w)) {
            Some(second) if second.starts_with(|c: char| c.is_ascii_digit()) => format!("{first}{second}"),
            Some(second) => second.to_owned(),
            None => first.to_owned(),
        };
    }
    first.to_owned()
}

#[cfg(test)]
mod tests {
    #[test]
    fn mem_total() {
        assert_eq!(super::parse_mem_total_mib("MemFree: 1 kB\nMemTotal:       16318480 kB\n"), Some(15936));
        assert_eq!(super::parse_mem_total_mib("nothing"), None);
    }
}
