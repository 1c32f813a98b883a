//! The pending queue, kept as equivalence groups.
//!
//! Jobs with the same priority, shape (GPU model, per-replica resources, replicas),
//! accounts and preemption policy get the same answer from a cycle, so a cycle asks once
//! per group and stops at the first failure: every later member would fail the same way
//! (free room only shrinks during a cycle). A failed group stays dormant, with its
//! verdict as every member's pending reason, until something it waits for changes (free
//! GPUs, new victim candidates, its account's usage or quota). This keeps a cycle's cost
//! proportional to groups and starts, not to queue depth (Kueue's equivalence hashing,
//! Volcano's skipping of unchanged unschedulable jobs).

use std::collections::{BTreeMap, BTreeSet};

use crate::decision::PendingReason;
use crate::state::QueueKey;
use crate::types::{AccountId, GpuModel, Priority, Resources};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct GroupKey {
    pub priority: Priority,
    pub model: Option<GpuModel>,
    pub per_replica: Resources,
    pub replicas: u32,
    pub user: AccountId,
    pub project: AccountId,
    pub may_preempt: bool,
}

/// Why a group's head could not start, and what would make it worth asking again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Verdict {
    pub reasons: Vec<PendingReason>,
    pub wake: Wake,
}

impl Verdict {
    /// Under strict order (backfill off), does this failure block the jobs behind it? A job
    /// waiting for its own quota does not, nor one that no node can ever hold (it would
    /// block the queue forever). Decided by the reason, so that a dormant verdict blocks
    /// exactly when a fresh one would. (Fix: dormant quota verdicts blocked the queue from
    /// the second cycle on, and never-fits verdicts blocked it.)
    pub fn blocks_strict_order(&self) -> bool {
        !matches!(self.reasons.first(), Some(PendingReason::OverQuota { .. } | PendingReason::NeverFits { .. }))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Wake {
    /// Ask again next cycle (a per-cycle budget ran out).
    NextCycle,
    /// Ask again when the usage or cap of one of the group's accounts changes; `seq` is the
    /// sum of their `seq`s. (Fix: it used to watch only the first account over its cap, so
    /// a job waiting on its user as well as its project missed changes of the user.)
    Quota { seq: u64 },
    /// Over quota, and the search among the account's own work failed: ask again when the
    /// accounts change or, as for `Capacity`, when room or victims do (the search can fail
    /// for want of room, not only of quota).
    QuotaOrCapacity { seq: u64, capacity_seq: u64, victim_seq: u64 },
    /// Ask again when free room grows enough, or new victim candidates start.
    Capacity { capacity_seq: u64, victim_seq: u64 },
}

#[derive(Clone, Debug, Default)]
pub(crate) struct Group {
    pub members: BTreeSet<QueueKey>,
    pub verdict: Option<Verdict>,
}

#[derive(Clone, Debug, Default)]
pub(crate) struct PendingQueue {
    /// Every pending job in scheduling order.
    pub all: BTreeSet<QueueKey>,
    pub groups: BTreeMap<GroupKey, Group>,
}

impl PendingQueue {
    pub fn insert(&mut self, key: QueueKey, group: GroupKey) {
        let fresh = self.all.insert(key);
        assert!(fresh, "{} queued twice", key.id);
        self.groups.entry(group).or_default().members.insert(key);
    }

    pub fn remove(&mut self, key: &QueueKey, group: &GroupKey) {
        let was = self.all.remove(key);
        assert!(was, "{} was not queued", key.id);
        let g = self.groups.get_mut(group).expect("queued job has a group");
        g.members.remove(key);
        if g.members.is_empty() {
            self.groups.remove(group);
        }
    }

    pub fn len(&self) -> usize {
        self.all.len()
    }
}
