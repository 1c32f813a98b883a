//! Nodes, their GPU slots, and an index of schedulable nodes by free GPU count so that
//! placement never scans the whole cluster.

use std::collections::{BTreeMap, BTreeSet};

use crate::types::{GpuModel, JobId, NodeId, NodeSpec, Resources};

/// One node's live state.
#[derive(Clone, Debug)]
pub(crate) struct Node {
    pub spec: NodeSpec,
    pub schedulable: bool,
    /// Which job runs on each GPU slot (running or terminating).
    pub gpu_owner: Vec<Option<JobId>>,
    /// Which preemptor each slot is held for while its victims terminate.
    pub gpu_reserved: Vec<Option<JobId>>,
    /// Resources of jobs placed here (running or terminating).
    pub used: Resources,
    /// Resources held for preemptors.
    pub reserved: Resources,
    /// Slots neither owned nor held, as last counted by `recount` (every change of the
    /// slots goes through `Scheduler::with_node`, which recounts; checked as an invariant).
    gpus_available: u32,
}

impl Node {
    pub fn new(spec: NodeSpec) -> Node {
        let slots = spec.capacity.gpus as usize;
        Node {
            spec,
            schedulable: true,
            gpu_owner: vec![None; slots],
            gpu_reserved: vec![None; slots],
            used: Resources::ZERO,
            reserved: Resources::ZERO,
            gpus_available: slots as u32,
        }
    }

    /// GPU slots neither used nor held: what a new job may take right now.
    pub fn available_gpus(&self) -> u32 {
        self.gpus_available
    }

    /// Count the free slots again after they changed; returns the new count.
    pub fn recount(&mut self) -> u32 {
        self.gpus_available = self.count_available_gpus();
        self.gpus_available
    }

    /// Tests of the invariant check: pretend the count is `gpus`.
    #[cfg(test)]
    pub fn recount_as(&mut self, gpus: u32) {
        self.gpus_available = gpus;
    }

    /// Free slots, counted one by one.
    pub fn count_available_gpus(&self) -> u32 {
        self.gpu_owner.iter().zip(&self.gpu_reserved).filter(|(o, r)| o.is_none() && r.is_none()).count() as u32
    }

    /// What a new job may take right now. CPU and memory held for a preemptor count as
    /// taken even while a terminating victim still uses them: conservative, never double-booked.
    pub fn available(&self) -> Resources {
        let cap = self.spec.capacity;
        Resources {
            gpus: self.available_gpus(),
            cpu_millis: cap.cpu_millis.saturating_sub(self.used.cpu_millis + self.reserved.cpu_millis),
            memory_mib: cap.memory_mib.saturating_sub(self.used.memory_mib + self.reserved.memory_mib),
        }
    }

    /// Lowest-index slots that are free and either unheld or held for `holder`.
    pub fn pick_slots(&self, count: u32, holder: Option<JobId>) -> Vec<u8> {
        let mut slots = Vec::with_capacity(count as usize);
        for (i, (owner, held)) in self.gpu_owner.iter().zip(&self.gpu_reserved).enumerate() {
            if slots.len() == count as usize {
                break;
            }
            if owner.is_none() && (held.is_none() || *held == holder) {
                slots.push(i as u8);
            }
        }
        slots
    }
}

/// Schedulable nodes bucketed by model and available GPU count. Buckets are ordered sets,
/// so iteration (and hence every placement) is deterministic.
#[derive(Clone, Debug, Default)]
pub(crate) struct FreeIndex {
    /// model -> available GPUs -> nodes.
    buckets: BTreeMap<GpuModel, Vec<BTreeSet<NodeId>>>,
}

impl FreeIndex {
    pub fn insert(&mut self, model: GpuModel, level: u32, node: NodeId, gpus_per_node_max: u32) {
        let levels = self.buckets.entry(model).or_insert_with(|| vec![BTreeSet::new(); gpus_per_node_max as usize + 1]);
        let fresh = levels[level as usize].insert(node);
        debug_assert!(fresh, "{node} indexed twice");
    }

    pub fn remove(&mut self, model: GpuModel, level: u32, node: NodeId) {
        let removed = self.buckets.get_mut(&model).is_some_and(|levels| levels[level as usize].remove(&node));
        debug_assert!(removed, "{node} missing from index at level {level}");
    }

    /// Models a job may use, ascending.
    pub fn models(&self, wanted: Option<GpuModel>) -> impl Iterator<Item = (&GpuModel, &Vec<BTreeSet<NodeId>>)> {
        self.buckets.iter().filter(move |(m, _)| wanted.is_none_or(|w| w == **m))
    }

    /// Nodes of the wanted model(s) with exactly `level` GPUs available, by model then id.
    pub fn at_level(&self, wanted: Option<GpuModel>, level: u32) -> impl Iterator<Item = NodeId> + '_ {
        self.models(wanted).flat_map(move |(_, levels)| levels.get(level as usize).into_iter().flatten().copied())
    }

    /// (most GPUs available on one node, number of schedulable nodes) for the model(s).
    pub fn summary(&self, wanted: Option<GpuModel>) -> (u32, u32) {
        let mut max = 0;
        let mut count = 0;
        for (_, levels) in self.models(wanted) {
            for (level, nodes) in levels.iter().enumerate() {
                if !nodes.is_empty() {
                    max = max.max(level as u32);
                    count += nodes.len() as u32;
                }
            }
        }
        (max, count)
    }

    /// GPUs available on all schedulable nodes of the model(s).
    pub fn total_free(&self, wanted: Option<GpuModel>) -> u32 {
        self.models(wanted)
            .flat_map(|(_, levels)| levels.iter().enumerate())
            .map(|(level, nodes)| level as u32 * nodes.len() as u32)
            .sum()
    }

    pub fn level_max(&self) -> u32 {
        self.buckets.values().map(|l| l.len() as u32 - 1).max().unwrap_or(0)
    }
}
