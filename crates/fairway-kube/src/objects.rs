//! What the controller reads from Kubernetes objects, as plain data: the wire types stay
//! here, at the edge; the engine sees only these.

use std::collections::BTreeMap;

use fairway_core::{PreemptionPolicy, Quota, Resources};
use fairway_spec::PreemptionProtection;
use k8s_openapi::api::core::v1::{Node, Pod, ResourceQuota};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::settings::Settings;

/// A node as the core needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeInfo {
    pub name: String,
    pub gpu_model: String,
    pub capacity: Resources,
    /// Cordoned, not Ready, or tainted: no new work is placed on it.
    pub drained: bool,
    /// The first `NoSchedule`/`NoExecute` taint that keeps Fairway's pods off it
    /// (`key=value:Effect`), if any.
    pub taint: Option<String>,
    /// The container images it holds (`status.images[].names`), canonical references
    /// (`fairway_spec::canonical_reference`), sorted, at most
    /// `fairway_core::event::IMAGES_PER_NODE_MAX`.
    pub images: Vec<String>,
}

impl NodeInfo {
    pub fn of(node: &Node, settings: &Settings) -> Option<NodeInfo> {
        let name = node.metadata.name.clone()?;
        let status = node.status.as_ref();
        let allocatable = status.and_then(|s| s.allocatable.as_ref());
        let get = |key: &str| allocatable.and_then(|a| a.get(key));
        let reported =
            get(&settings.gpu_resource).and_then(|q| fairway_spec::quantity::whole_count(&q.0).ok()).unwrap_or(0);
        // A device plugin that shares GPUs may report each one several times.
        let gpus = reported / settings.gpu_share.as_ref().map_or(1, |s| u64::from(s.splits_per_gpu));
        let cpu_millis = get("cpu").and_then(|q| fairway_spec::quantity::cpu_millis(&q.0).ok()).unwrap_or(0);
        let memory_mib = get("memory").and_then(|q| memory_mib_down(&q.0)).unwrap_or(0);
        let labels = node.metadata.labels.as_ref();
        let gpu_model = settings
            .gpu_model_labels
            .iter()
            .find_map(|key| labels.and_then(|l| l.get(key)).filter(|v| !v.is_empty()).cloned())
            .unwrap_or_else(|| settings.gpu_model_default.clone());
        let cordoned = node.spec.as_ref().and_then(|s| s.unschedulable).unwrap_or(false);
        let ready = status
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
            .is_some_and(|c| c.status == "True");
        let taint = foreign_taint(node, settings);
        let mut images: Vec<String> = status
            .and_then(|s| s.images.as_ref())
            .into_iter()
            .flatten()
            .flat_map(|i| i.names.iter().flatten())
            .map(|n| fairway_spec::canonical_reference(n))
            .collect();
        images.sort_unstable();
        images.dedup();
        images.truncate(fairway_core::event::IMAGES_PER_NODE_MAX);
        Some(NodeInfo {
            name,
            gpu_model,
            // The core's GPU slots are a 64-bit mask; a node claiming more is capped, not lost.
            capacity: Resources::new(u32::try_from(gpus).unwrap_or(u32::MAX).min(64), cpu_millis, memory_mib),
            drained: cordoned || !ready || taint.is_some(),
            taint,
            images,
        })
    }
}

/// A taint that repels Fairway's pods. Fairway binds pods itself, so the default
/// scheduler's taint check never runs for them: a node tainted `NoSchedule` or `NoExecute`
/// is kept out of Fairway's pool altogether (the way to set GPU nodes aside for other work).
/// A taint keyed by the GPU resource is the exception: GPU pods tolerate it (Kubernetes'
/// `ExtendedResourceToleration` adds that toleration), and it is how GPU nodes are commonly
/// kept for GPU work.
fn foreign_taint(node: &Node, settings: &Settings) -> Option<String> {
    let taints = node.spec.as_ref()?.taints.as_ref()?;
    taints
        .iter()
        .filter(|t| t.effect == "NoSchedule" || t.effect == "NoExecute")
        .find(|t| t.key != settings.gpu_resource)
        .map(|t| match &t.value {
            Some(v) if !v.is_empty() => format!("{}={}:{}", t.key, v, t.effect),
            _ => format!("{}:{}", t.key, t.effect),
        })
}

/// Memory rounded down to MiB: what a node offers is never overstated.
fn memory_mib_down(text: &str) -> Option<u64> {
    let bytes = bytes_of(text)?;
    Some(bytes / (1024 * 1024))
}

/// A quantity of bytes (`512Gi`, `64G`, `1000000`); `None` if it is not one.
fn bytes_of(text: &str) -> Option<u64> {
    let units: [(&str, u64); 12] = [
        ("Ki", 1 << 10),
        ("Mi", 1 << 20),
        ("Gi", 1 << 30),
        ("Ti", 1 << 40),
        ("Pi", 1 << 50),
        ("Ei", 1 << 60),
        ("k", 1_000),
        ("M", 1_000_000),
        ("G", 1_000_000_000),
        ("T", 1_000_000_000_000),
        ("P", 1_000_000_000_000_000),
        ("E", 1_000_000_000_000_000_000),
    ];
    for (suffix, scale) in units {
        if let Some(n) = text.strip_suffix(suffix) {
            return n.parse::<u64>().ok()?.checked_mul(scale);
        }
    }
    text.parse::<u64>().ok()
}

/// What a pod holds, and whose it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodInfo {
    pub uid: String,
    pub namespace: String,
    pub name: String,
    /// The uid of the controller that owns it (a Job, a PaddleJob), if any.
    pub owner_uid: Option<String>,
    pub node: Option<String>,
    pub scheduler_name: Option<String>,
    /// Requests summed over containers (init containers: the largest, as Kubernetes counts).
    pub requests: Resources,
    /// Succeeded or Failed: it holds nothing any more.
    pub terminal: bool,
    /// Being deleted (it still holds what it has until it is gone).
    pub deleting: bool,
}

impl PodInfo {
    pub fn of(pod: &Pod, settings: &Settings) -> Option<PodInfo> {
        let meta = &pod.metadata;
        let spec = pod.spec.as_ref();
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("Pending");
        let owner_uid = meta
            .owner_references
            .as_ref()
            .and_then(|o| o.iter().find(|r| r.controller == Some(true)))
            .map(|r| r.uid.clone());
        let mut requests = Resources::ZERO;
        let mut init_max = Resources::ZERO;
        if let Some(spec) = spec {
            for c in &spec.containers {
                requests = requests.plus(container_requests(c.resources.as_ref(), settings));
            }
            for c in spec.init_containers.iter().flatten() {
                let r = container_requests(c.resources.as_ref(), settings);
                init_max = init_max.max_each(r);
            }
        }
        let requests = requests.max_each(init_max);
        Some(PodInfo {
            uid: meta.uid.clone()?,
            namespace: meta.namespace.clone().unwrap_or_default(),
            name: meta.name.clone()?,
            owner_uid,
            node: spec.and_then(|s| s.node_name.clone()).filter(|n| !n.is_empty()),
            scheduler_name: spec.and_then(|s| s.scheduler_name.clone()),
            requests,
            terminal: matches!(phase, "Succeeded" | "Failed"),
            deleting: meta.deletion_timestamp.is_some(),
        })
    }
}

/// A container's requests (limits where a request is missing, as Kubernetes defaults them).
fn container_requests(
    resources: Option<&k8s_openapi::api::core::v1::ResourceRequirements>,
    settings: &Settings,
) -> Resources {
    let Some(r) = resources else { return Resources::ZERO };
    let get = |key: &str| -> Option<&Quantity> {
        r.requests.as_ref().and_then(|m| m.get(key)).or_else(|| r.limits.as_ref().and_then(|m| m.get(key)))
    };
    let gpus = get(&settings.gpu_resource).and_then(|q| fairway_spec::quantity::whole_count(&q.0).ok()).unwrap_or(0);
    Resources::new(
        u32::try_from(gpus).unwrap_or(u32::MAX),
        get("cpu").and_then(|q| fairway_spec::quantity::cpu_millis(&q.0).ok()).unwrap_or(0),
        get("memory").and_then(|q| fairway_spec::quantity::memory_mib(&q.0).ok()).unwrap_or(0),
    )
}

/// The hard caps of one ResourceQuota: `requests.<gpu>` (also `limits.<gpu>`), `requests.cpu`
/// (or `cpu`, `limits.cpu`), `requests.memory` (or `memory`, `limits.memory`); the smallest
/// of each kind applies, as Kubernetes enforces every one.
pub fn quota_of(quota: &ResourceQuota, settings: &Settings) -> Quota {
    let hard = quota.spec.as_ref().and_then(|s| s.hard.as_ref());
    let smallest = |keys: &[String], parse: &dyn Fn(&str) -> Option<u64>| -> Option<u64> {
        keys.iter().filter_map(|k| hard.and_then(|h| h.get(k.as_str())).and_then(|q| parse(&q.0))).min()
    };
    let gpu = &settings.gpu_resource;
    let gpus = smallest(&[format!("requests.{gpu}"), format!("limits.{gpu}")], &|t| {
        fairway_spec::quantity::whole_count(t).ok()
    });
    let cpu = smallest(&["requests.cpu".into(), "cpu".into(), "limits.cpu".into()], &|t| {
        fairway_spec::quantity::cpu_millis(t).ok()
    });
    let memory = smallest(&["requests.memory".into(), "memory".into(), "limits.memory".into()], &memory_mib_down);
    Quota { gpus_max: gpus.map(|g| u32::try_from(g).unwrap_or(u32::MAX)), cpu_millis_max: cpu, memory_mib_max: memory }
}

/// The caps of a namespace with several quotas: the smallest of each.
pub fn combine_quotas<'a>(quotas: impl IntoIterator<Item = &'a Quota>) -> Option<Quota> {
    let mut out: Option<Quota> = None;
    let min = |a: Option<u64>, b: Option<u64>| match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    for q in quotas {
        out = Some(match out {
            None => *q,
            Some(o) => Quota {
                gpus_max: min(o.gpus_max.map(u64::from), q.gpus_max.map(u64::from)).map(|g| g as u32),
                cpu_millis_max: min(o.cpu_millis_max, q.cpu_millis_max),
                memory_mib_max: min(o.memory_mib_max, q.memory_mib_max),
            },
        });
    }
    out.filter(|q| q.gpus_max.is_some() || q.cpu_millis_max.is_some() || q.memory_mib_max.is_some())
}

/// A PriorityClass as the controller resolves it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClassInfo {
    pub value: i32,
    pub global_default: bool,
    pub policy: PreemptionPolicy,
    /// Rule 1, from the class's annotations; `Err` (the reason, naming the annotation)
    /// refuses the workloads of the class until the class is fixed.
    pub protection: Result<PreemptionProtection, String>,
}

impl ClassInfo {
    pub fn of(class: &PriorityClass) -> ClassInfo {
        ClassInfo {
            value: class.value,
            global_default: class.global_default.unwrap_or(false),
            policy: match class.preemption_policy.as_deref() {
                Some("Never") => PreemptionPolicy::Never,
                _ => PreemptionPolicy::PreemptLowerPriority,
            },
            protection: fairway_spec::protection_from_annotations(|key| {
                class.metadata.annotations.as_ref()?.get(key).map(String::as_str)
            }),
        }
    }
}

/// Labels as a map, for matching.
pub fn labels_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> BTreeMap<String, String> {
    meta.labels.clone().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_quantities_round_down_to_mib() {
        assert_eq!(memory_mib_down("512Gi"), Some(512 * 1024));
        assert_eq!(memory_mib_down("1G"), Some(953));
        assert_eq!(memory_mib_down("1048575"), Some(0));
        assert_eq!(memory_mib_down("lots"), None);
    }

    #[test]
    fn quotas_take_the_smallest_cap_of_each_kind() {
        let a = Quota { gpus_max: Some(8), cpu_millis_max: None, memory_mib_max: Some(100) };
        let b = Quota { gpus_max: Some(4), cpu_millis_max: Some(2000), memory_mib_max: None };
        let c = combine_quotas([&a, &b]).unwrap();
        assert_eq!((c.gpus_max, c.cpu_millis_max, c.memory_mib_max), (Some(4), Some(2000), Some(100)));
        assert_eq!(combine_quotas([&Quota::default()]), None);
    }
}
