//! The leaf of the core's module graph: the slots and keys every other module addresses
//! jobs, nodes and queue groups by. It imports nothing of the core but `types`, so that
//! the modules above it (`model`, `jobs`, `cluster`, `victims`, `queue`, `search`,
//! `preemption`, the scheduler) can name each other's things without importing in a circle.

use std::cmp::Reverse;

use crate::types::{AccountId, GpuModel, JobId, Priority, Resources, Time};

/// A job's slot in the `JobStore` (`jobs.rs`). Valid while the job is held; a slot is
/// reused after its job leaves, so indexes must drop a job's slot when it goes (the
/// invariant checks look for stale ones).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct JobIx(pub u32);

/// A node's position in `Nodes` (`cluster.rs`, id order). Valid until a node is added or
/// removed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct NodeIx(pub u32);

/// A group's slot in the queue (`queue.rs`). Indexes name groups by it (4 bytes instead of
/// a 56-byte key); a slot is reused once its group empties.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct GroupIx(pub u32);

/// What makes jobs equivalent for a cycle (Kueue's equivalence classes): jobs with the same
/// key get the same answer from placement, quota and the victim search.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct GroupKey {
    pub priority: Priority,
    pub model: Option<GpuModel>,
    pub per_replica: Resources,
    pub replicas: u32,
    pub user: AccountId,
    pub project: AccountId,
    pub may_preempt: bool,
    /// Rule 1's protection does not hold against it: its search may take what another's may
    /// not (scenario 134).
    pub overrides_protection: bool,
    /// A run-time limit and its grace, when the job has a limit (see `Job::group_key`).
    pub run_limit_ms: Option<u64>,
}

impl GroupKey {
    /// What a job of the group takes in all, as `JobSpec::total` counts it.
    pub fn total(&self) -> Resources {
        self.per_replica.times(self.replicas)
    }

    pub fn total_gpus(&self) -> u32 {
        self.total().gpus
    }
}

/// A pending job's place in the queue. Ordering: rank (negated priority, or 0 under FIFO),
/// then the expected run under shortest-first order (0 otherwise), then submit time, then
/// id. A requeued job keeps its key, so it returns to its place.
/// The key also carries the job's slot, so that whoever holds a key reaches the job without
/// a search; ids are unique, so the slot never decides an order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct QueueKey {
    pub rank: Reverse<Priority>,
    pub expected_ms: u64,
    pub submitted_at: Time,
    pub id: JobId,
    pub ix: JobIx,
}
