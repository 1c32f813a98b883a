//! Plain value types of the core. None of them is `Serialize`: wire formats live in
//! `fairway-spec` and convert explicitly into these.

use std::fmt;

/// Milliseconds on the driver's clock. The core never reads a clock: every entry point
/// takes `now: Time`. The simulator's clock starts at 0; the daemon uses Unix epoch millis.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Time(pub u64);

impl Time {
    pub const ZERO: Time = Time(0);
    pub fn from_secs(secs: u64) -> Time {
        Time(secs.saturating_mul(1000))
    }
    pub fn millis(self) -> u64 {
        self.0
    }
    pub fn plus_ms(self, ms: u64) -> Time {
        Time(self.0.saturating_add(ms))
    }
    pub fn ms_since(self, earlier: Time) -> u64 {
        self.0.saturating_sub(earlier.0)
    }
}

impl fmt::Display for Time {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.0;
        if ms.is_multiple_of(1000) { write!(f, "{}s", ms / 1000) } else { write!(f, "{}.{:03}s", ms / 1000, ms % 1000) }
    }
}

/// A job's stable identity. Ties anywhere in the core are broken by it, so drivers must
/// hand out ids in submission order (the simulator and the daemon both do).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct JobId(pub u64);

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "job#{}", self.0)
    }
}

/// A node's stable identity, chosen by the driver. Ties between nodes break by it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeId(pub u32);

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "node#{}", self.0)
    }
}

/// A quota account: a user or a project (queue/namespace). Drivers intern names to ids.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AccountId(pub u32);

impl fmt::Display for AccountId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "account#{}", self.0)
    }
}

/// A GPU model (A100, H100, ...), interned by the driver. Jobs that name no model run on any.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GpuModel(pub u16);

impl fmt::Display for GpuModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "gpu-model#{}", self.0)
    }
}

/// Priority value, as in a Kubernetes `PriorityClass`: higher runs first.
pub type Priority = i32;

/// Resources of one replica, or of a node, or a quota.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Resources {
    pub gpus: u32,
    pub cpu_millis: u64,
    pub memory_mib: u64,
}

impl Resources {
    pub const ZERO: Resources = Resources { gpus: 0, cpu_millis: 0, memory_mib: 0 };

    pub fn new(gpus: u32, cpu_millis: u64, memory_mib: u64) -> Resources {
        Resources { gpus, cpu_millis, memory_mib }
    }
    pub fn gpus(gpus: u32) -> Resources {
        Resources { gpus, ..Resources::ZERO }
    }
    pub fn times(self, n: u32) -> Resources {
        Resources {
            gpus: self.gpus * n,
            cpu_millis: self.cpu_millis * u64::from(n),
            memory_mib: self.memory_mib * u64::from(n),
        }
    }
    pub fn plus(self, other: Resources) -> Resources {
        Resources {
            gpus: self.gpus + other.gpus,
            cpu_millis: self.cpu_millis + other.cpu_millis,
            memory_mib: self.memory_mib + other.memory_mib,
        }
    }
    /// Subtraction that panics on underflow: usage accounting must never go negative.
    pub fn minus(self, other: Resources) -> Resources {
        Resources {
            gpus: self.gpus.checked_sub(other.gpus).expect("gpu accounting underflow"),
            cpu_millis: self.cpu_millis.checked_sub(other.cpu_millis).expect("cpu accounting underflow"),
            memory_mib: self.memory_mib.checked_sub(other.memory_mib).expect("memory accounting underflow"),
        }
    }
    pub fn saturating_minus(self, other: Resources) -> Resources {
        Resources {
            gpus: self.gpus.saturating_sub(other.gpus),
            cpu_millis: self.cpu_millis.saturating_sub(other.cpu_millis),
            memory_mib: self.memory_mib.saturating_sub(other.memory_mib),
        }
    }
    /// True when every dimension of `self` is at most the same dimension of `other`.
    pub fn fits_in(self, other: Resources) -> bool {
        self.gpus <= other.gpus && self.cpu_millis <= other.cpu_millis && self.memory_mib <= other.memory_mib
    }
}

impl fmt::Display for Resources {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} GPU, {}m CPU, {} MiB", self.gpus, self.cpu_millis, self.memory_mib)
    }
}

/// Which resource a limit or a shortage is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ResourceKind {
    Gpu,
    Cpu,
    Memory,
}

impl ResourceKind {
    pub fn name(self) -> &'static str {
        match self {
            ResourceKind::Gpu => "gpu",
            ResourceKind::Cpu => "cpu_millis",
            ResourceKind::Memory => "memory_mib",
        }
    }
    pub fn of(self, r: Resources) -> u64 {
        match self {
            ResourceKind::Gpu => u64::from(r.gpus),
            ResourceKind::Cpu => r.cpu_millis,
            ResourceKind::Memory => r.memory_mib,
        }
    }
    pub const ALL: [ResourceKind; 3] = [ResourceKind::Gpu, ResourceKind::Cpu, ResourceKind::Memory];
}

/// Whether a job may preempt others (Kubernetes `preemptionPolicy`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum PreemptionPolicy {
    #[default]
    PreemptLowerPriority,
    Never,
}

/// What the core needs to know about a job. Built by drivers from wire specs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobSpec {
    pub id: JobId,
    pub user: AccountId,
    pub project: AccountId,
    pub priority: Priority,
    pub preemption_policy: PreemptionPolicy,
    /// May this job be preempted by higher-priority work?
    pub preemptible: bool,
    /// Resources of one replica. A replica always runs on a single node.
    pub per_replica: Resources,
    /// `None`: any model.
    pub gpu_model: Option<GpuModel>,
    /// Gang size: all replicas start together or none does. At least 1.
    pub replicas: u32,
    /// Time between SIGTERM and SIGKILL when preempted.
    pub grace_ms: u64,
    /// Run-time limit (accumulated over runs); the core stops the job when it is reached.
    pub max_runtime_ms: Option<u64>,
    /// How often the job checkpoints; the core uses it to estimate work lost by preemption
    /// when the job reports no checkpoints itself.
    pub checkpoint_interval_ms: Option<u64>,
}

impl JobSpec {
    /// A one-replica, preemptible job with the given GPUs and priority; a builder base for tests.
    pub fn new(id: JobId, priority: Priority, per_replica: Resources) -> JobSpec {
        JobSpec {
            id,
            user: AccountId(0),
            project: AccountId(0),
            priority,
            preemption_policy: PreemptionPolicy::PreemptLowerPriority,
            preemptible: true,
            per_replica,
            gpu_model: None,
            replicas: 1,
            grace_ms: 30_000,
            max_runtime_ms: None,
            checkpoint_interval_ms: None,
        }
    }
    /// Everything the gang holds when running.
    pub fn total(&self) -> Resources {
        self.per_replica.times(self.replicas)
    }
}

/// A node as the driver describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeSpec {
    pub id: NodeId,
    pub gpu_model: GpuModel,
    pub capacity: Resources,
}

/// Hard caps of one account (ResourceQuota semantics): they hold even for the top tier.
/// A `None` dimension is unlimited.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Quota {
    pub gpus_max: Option<u32>,
    pub cpu_millis_max: Option<u64>,
    pub memory_mib_max: Option<u64>,
}

impl Quota {
    pub fn gpus(gpus_max: u32) -> Quota {
        Quota { gpus_max: Some(gpus_max), ..Quota::default() }
    }
    pub fn limit(&self, kind: ResourceKind) -> Option<u64> {
        match kind {
            ResourceKind::Gpu => self.gpus_max.map(u64::from),
            ResourceKind::Cpu => self.cpu_millis_max,
            ResourceKind::Memory => self.memory_mib_max,
        }
    }
}

/// One replica's place: a node and the GPU indices on it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplicaPlacement {
    pub node: NodeId,
    pub gpu_indices: Vec<u8>,
}

/// Where every replica of a job runs, in replica order.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Placement {
    pub replicas: Vec<ReplicaPlacement>,
}

impl Placement {
    /// Distinct nodes, ascending.
    pub fn nodes(&self) -> Vec<NodeId> {
        let mut nodes: Vec<NodeId> = self.replicas.iter().map(|r| r.node).collect();
        nodes.sort();
        nodes.dedup();
        nodes
    }
}

impl fmt::Display for Placement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.replicas.iter().enumerate() {
            if i > 0 {
                write!(f, " ")?;
            }
            write!(f, "{}[", r.node)?;
            for (k, g) in r.gpu_indices.iter().enumerate() {
                if k > 0 {
                    write!(f, ",")?;
                }
                write!(f, "{g}")?;
            }
            write!(f, "]")?;
        }
        Ok(())
    }
}
