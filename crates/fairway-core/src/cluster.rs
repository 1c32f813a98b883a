//! Nodes, their GPU slots, and an index of schedulable nodes by free GPU count so that
//! placement never scans the whole cluster.
//!
//! Nodes are kept in a vector sorted by id; a node's position there ([`NodeIx`]) is what
//! the free index and the per-search scratch use. Positions change only when a node is
//! added or removed (rare), and the index is then rebuilt; everything that outlives a cycle
//! names nodes by [`NodeId`].

use crate::ids::{JobIx, NodeIx};
use crate::types::{GpuModel, GpuSet, NodeId, NodeSpec, ReplicaPlacement, Resources, Time};
use crate::victims::VictimEntry;

/// One node's live state.
///
/// Laid out by hand: the one-replica victim search reads, for every node it weighs, the
/// fields up to `shared` (its victim list, model, room, whether a GPU is shared), so they
/// come first and share two cache lines; the rest follows.
#[derive(Clone, Debug)]
#[repr(C, align(64))]
pub(crate) struct Node {
    /// Running preemptible jobs with a replica here, in (priority, id) order: the victim
    /// search's view of the node (see `victims.rs`). Empty when the policy never preempts.
    pub victims: Vec<VictimEntry>,
    pub spec: NodeSpec,
    /// What a new job may take right now (`available`), worked out by `Nodes::update` after
    /// every change: the searches ask it of every node; `check_invariants` works it out again.
    room: Resources,
    pub schedulable: bool,
    /// Slots carrying shares of jobs that take part of one GPU (they are in `owned` too:
    /// a whole-GPU job never lands there).
    pub shared: GpuSet,
    /// Resources of jobs placed here (running or terminating).
    pub used: Resources,
    /// Resources held for preemptors.
    pub reserved: Resources,
    /// Slots assigned to placed jobs (running or terminating).
    pub owned: GpuSet,
    /// Slots held for preemptors while their victims terminate (a held slot may still be
    /// owned by a victim).
    pub held: GpuSet,
    /// Jobs with a replica here (running or terminating), each once, in no order.
    pub placed: Vec<JobIx>,
    /// With reservations on, each placed job's expected end (its key in
    /// `Scheduler::run_ends`) and what it holds here, sorted by end: what a reservation
    /// reads of the node without looking at the jobs, in the order it reads it.
    pub ends: Vec<PlacedEnd>,
    /// `Nodes::version` at its last change other than to its victim list: unique to this
    /// state of this node.
    pub version: u64,
    /// Per slot, the thousandths its shares take (0 on slots not in `shared`); at most 1000.
    pub shares: Vec<u16>,
    /// The container images it holds, sorted (`Event::NodeImages`).
    pub images: Vec<crate::types::ImageId>,
}

/// A placed job's expected end and what it holds on one node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PlacedEnd {
    pub job: JobIx,
    pub end: Time,
    /// Its slots here.
    pub slots: GpuSet,
    /// What its replicas here take (GPUs included).
    pub room: Resources,
}

impl PlacedEnd {
    /// The job at `job`, of `per_replica` per replica, with `here` of its replicas on one
    /// node.
    pub fn new<'a>(
        job: JobIx,
        end: Time,
        per_replica: Resources,
        here: impl IntoIterator<Item = &'a ReplicaPlacement>,
    ) -> PlacedEnd {
        let (mut count, mut slots) = (0u32, GpuSet::EMPTY);
        for r in here {
            count += 1;
            slots = slots.union(r.gpus);
        }
        PlacedEnd { job, end, slots, room: per_replica.times(count) }
    }

    /// What the node's free room gets back when the job exits: its CPU and memory, and its
    /// slots but those `held` for a preemptor (they go to the preemptor; a hold counts its
    /// own CPU and memory apart).
    ///
    /// A share gives back no GPU: its slot is free only when every share on it is gone, and
    /// the plan and the forecast do not follow slots (they count it whole until then).
    pub fn gives_back(&self, held: GpuSet) -> Resources {
        debug_assert!(
            self.room.is_share() || self.slots.len() == self.room.gpus,
            "a whole-GPU job's slots are its GPUs"
        );
        let gpus = match self.room.is_share() {
            true => 0,
            // Its whole GPUs are its slots: counted only when some are held, which is rare
            // (a reservation reads every end of every node that changed).
            false if self.slots.is_disjoint(held) => self.room.gpus,
            false => self.slots.minus(held).len(),
        };
        Resources { gpus, ..self.room.without_shares() }
    }

    /// Put it in `ends`, which is sorted by end, after those that end at the same time.
    pub fn insert_sorted(self, ends: &mut Vec<PlacedEnd>) {
        let at = ends.partition_point(|e| e.end <= self.end);
        ends.insert(at, self);
    }
}

impl Node {
    pub fn new(spec: NodeSpec) -> Node {
        Node {
            room: Resources { gpu_milli: if spec.capacity.gpus > 0 { 1000 } else { 0 }, ..spec.capacity },
            schedulable: true,
            owned: GpuSet::EMPTY,
            held: GpuSet::EMPTY,
            used: Resources::ZERO,
            reserved: Resources::ZERO,
            placed: Vec::new(),
            victims: Vec::new(),
            ends: Vec::new(),
            version: 0,
            shared: GpuSet::EMPTY,
            shares: vec![0; spec.capacity.gpus as usize],
            images: Vec::new(),
            spec,
        }
    }

    /// Slots neither owned nor held: what a new job may take right now.
    pub fn free_slots(&self) -> GpuSet {
        self.slots().minus(self.owned.union(self.held))
    }

    /// Every slot of the node: one per GPU, from 0.
    fn slots(&self) -> GpuSet {
        GpuSet::first(self.spec.capacity.gpus)
    }

    /// Whether a job of `model` (any, with `None`) may start here.
    pub fn usable_by(&self, model: Option<GpuModel>) -> bool {
        self.schedulable && model.is_none_or(|m| m == self.spec.gpu_model)
    }

    pub fn available_gpus(&self) -> u32 {
        self.room.gpus
    }

    /// Does the room kept agree with the slots and resources it is worked out from?
    pub fn room_agrees(&self) -> bool {
        self.room == self.room_now()
    }

    /// What a new job may take right now. CPU and memory held for a preemptor count as
    /// taken even while a terminating victim still uses them: conservative, never double-booked.
    pub fn available(&self) -> Resources {
        self.room
    }

    /// `available`, worked out from the slots and what is used and reserved.
    fn room_now(&self) -> Resources {
        let cap = self.spec.capacity;
        let gpus = self.free_slots().len();
        Resources {
            gpus,
            cpu_millis: cap.cpu_millis.saturating_sub(self.used.cpu_millis + self.reserved.cpu_millis),
            memory_mib: cap.memory_mib.saturating_sub(self.used.memory_mib + self.reserved.memory_mib),
            gpu_milli: if gpus > 0 { 1000 } else { self.share_room_max() },
        }
    }

    /// Shared slots a new share may join: not held for a preemptor, not full.
    fn share_slots_open(&self) -> impl Iterator<Item = (u32, u32)> + '_ {
        self.shared
            .minus(self.held)
            .iter()
            .map(|s| (s, 1000 - u32::from(self.shares[s as usize])))
            .filter(|&(_, free)| free > 0)
    }

    /// Does it hold `image`? (No image asked: no.)
    pub fn holds(&self, image: Option<crate::types::ImageId>) -> bool {
        image.is_some_and(|i| self.images.binary_search(&i).is_ok())
    }

    /// Each GPU's free thousandths: 1000 for a free GPU, `1000 − shares` for a shared one,
    /// 0 for one taken whole or held for a preemptor.
    pub fn slot_free(&self) -> Vec<u16> {
        (0..self.spec.capacity.gpus).map(|s| self.slot_free_of(s)).collect()
    }

    /// One GPU's free thousandths, as [`Node::slot_free`] gives them.
    pub fn slot_free_of(&self, slot: u32) -> u16 {
        match () {
            _ if self.held.contains(slot) => 0,
            _ if self.shared.contains(slot) => 1000 - self.shares[slot as usize],
            _ if self.owned.contains(slot) => 0,
            _ => 1000,
        }
    }

    /// Has a shared slot room for another share?
    pub fn shared_open(&self) -> bool {
        self.share_slots_open().next().is_some()
    }

    /// The largest share a new replica may take on a slot already shared (0 if none).
    pub fn share_room_max(&self) -> u32 {
        self.share_slots_open().map(|(_, free)| free).max().unwrap_or(0)
    }

    /// The shared slot where a share of `milli` fits tightest, with what it leaves there
    /// (ties: the lowest slot).
    pub fn share_fit(&self, milli: u32) -> Option<(u32, u32)> {
        self.share_slots_open()
            .filter(|&(_, free)| free >= milli)
            .map(|(s, free)| (s, free - milli))
            .min_by_key(|&(s, left)| (left, s))
    }

    /// The slot a share of `milli` goes on: the tightest shared slot where it fits, else the
    /// lowest free slot (a whole GPU is broken only when no shared one has room).
    pub fn pick_share_slot(&self, milli: u32) -> Option<u32> {
        self.share_fit(milli).map(|(s, _)| s).or_else(|| self.free_slots().iter().next())
    }

    /// Add a share of `milli` on `slot` (which must be free or shared, not held, with room).
    pub fn take_share(&mut self, slot: u32, milli: u32) {
        let one = GpuSet::from_bits(1 << slot);
        assert!(
            self.shared.contains(slot) || self.owned.is_disjoint(one),
            "GPU {slot} on {} is taken whole; it cannot be shared",
            self.spec.id
        );
        assert!(self.held.is_disjoint(one), "GPU {slot} on {} is held for another job", self.spec.id);
        let after = u32::from(self.shares[slot as usize]) + milli;
        assert!(after <= 1000, "GPU {slot} on {} would be shared beyond 1000 thousandths ({after})", self.spec.id);
        self.shares[slot as usize] = after as u16;
        self.shared = self.shared.union(one);
        self.owned = self.owned.union(one);
    }

    /// Take back a share of `milli` from `slot`; the slot is free again when its last
    /// share leaves.
    pub fn give_back_share(&mut self, slot: u32, milli: u32) {
        let used = u32::from(self.shares[slot as usize]);
        assert!(
            self.shared.contains(slot) && used >= milli,
            "releasing a share of GPU {slot} on {} it does not hold",
            self.spec.id
        );
        self.shares[slot as usize] = (used - milli) as u16;
        if used == milli {
            let one = GpuSet::from_bits(1 << slot);
            self.shared = self.shared.minus(one);
            self.owned = self.owned.minus(one);
        }
    }

    /// Note a job placed here (once, however many of its replicas land here).
    pub fn place(&mut self, job: JobIx) {
        if !self.placed.contains(&job) {
            self.placed.push(job);
        }
    }

    /// Forget a job that leaves (called once per replica: the first call removes it).
    pub fn unplace(&mut self, job: JobIx) {
        if let Some(i) = self.placed.iter().position(|j| *j == job) {
            self.placed.swap_remove(i);
        }
    }

    /// The lowest-index free slots.
    pub fn pick_slots(&self, count: u32) -> GpuSet {
        self.free_slots().lowest(count)
    }

    /// Slots for one replica of `per_replica`: whole free GPUs, or the one a share goes on.
    pub fn pick_for(&self, per_replica: Resources) -> GpuSet {
        if per_replica.is_share() {
            self.pick_share_slot(per_replica.gpu_milli).map_or(GpuSet::EMPTY, |s| GpuSet::from_bits(1 << s))
        } else {
            self.pick_slots(per_replica.gpus)
        }
    }

    /// Put a replica of `per_replica` on `slots` (free, unheld; for a share, one slot free
    /// or shared with room).
    pub fn take(&mut self, slots: GpuSet, per_replica: Resources) {
        if per_replica.is_share() {
            let [slot] = [slots.iter().next().expect("a share names its slot")];
            assert_eq!(slots.len(), 1, "a share takes one GPU");
            self.take_share(slot, per_replica.gpu_milli);
        } else {
            assert!(self.owned.is_disjoint(slots), "GPUs {slots} on {} assigned twice", self.spec.id);
            assert!(self.held.is_disjoint(slots), "GPUs {slots} on {} held for another job", self.spec.id);
            self.owned = self.owned.union(slots);
        }
        self.used = self.used.plus(per_replica);
    }

    /// Take a replica of `per_replica` off `slots`.
    pub fn give_back(&mut self, slots: GpuSet, per_replica: Resources) {
        if per_replica.is_share() {
            let slot = slots.iter().next().expect("a share names its slot");
            self.give_back_share(slot, per_replica.gpu_milli);
        } else {
            assert_eq!(self.owned.intersection(slots), slots, "releasing GPUs {slots} on {} not owned", self.spec.id);
            self.owned = self.owned.minus(slots);
        }
        self.used = self.used.minus(per_replica);
    }
}

/// The cluster's nodes, in id order, with the free index kept in step.
#[derive(Clone, Debug, Default)]
pub(crate) struct Nodes {
    nodes: Vec<Node>,
    /// The nodes' ids in the same order: the lookup by id probes this compact array, not
    /// the nodes themselves (one cache line holds sixteen ids).
    ids: Vec<NodeId>,
    /// The nodes' `Node::version`s in the same order, likewise compact: a reservation's plan
    /// that walks every node reads them, and the nodes themselves only where one changed.
    versions: Vec<u64>,
    /// How many nodes have more GPUs than the packing policies model
    /// (`packing::NODE_GPUS_MAX`): placement leaves those to the core's scoring.
    beyond_packing: u32,
    pub index: FreeIndex,
    /// Bumped by every change to a node other than its victim list (its list of ends
    /// included): what a reservation's plan reads of the nodes is as it was while this
    /// stays the same.
    version: u64,
    /// The changes since `log_from`, oldest first: each one's `version` and the position of
    /// the node it changed. A reservation's plan reads only the nodes changed since it
    /// last looked (`changed_since`) instead of comparing every node's version at every
    /// cycle. Bounded: when it holds twice as many changes as there are nodes (at least
    /// `CHANGE_LOG_MIN`), its older half goes, and a reader that looked before then walks
    /// every node, which costs no more.
    change_log: Vec<(u64, u32)>,
    /// Every change with a later version is in `change_log`. Adding or removing a node moves
    /// positions: the log starts again from that change.
    log_from: u64,
    /// Whether changes are logged at all (where nothing reads the log, none is kept and
    /// `log_from` follows `version`).
    logging: bool,
}

fn beyond_packing(node: &Node) -> bool {
    node.spec.capacity.gpus as usize > crate::packing::NODE_GPUS_MAX
}

/// The fewest changes `Nodes::change_log` keeps before it drops its older half.
const CHANGE_LOG_MIN: usize = 64;

impl Nodes {
    /// No nodes; changes logged for `changed_since` or not.
    pub fn with_change_log(logging: bool) -> Nodes {
        Nodes { logging, ..Nodes::default() }
    }

    pub fn version(&self) -> u64 {
        self.version
    }

    /// Whether some node has more GPUs than the packing policies model.
    pub fn any_beyond_packing(&self) -> bool {
        self.beyond_packing > 0
    }

    /// The positions of the nodes changed since `version` (a node changed more than once
    /// may come more than once, though not twice in a row), or `None` when that is not
    /// known: changes are not logged (`with_change_log`), the log no longer reaches back
    /// that far, or a node was added or removed since.
    pub fn changed_since(&self, version: u64) -> Option<impl Iterator<Item = u32> + '_> {
        if version < self.log_from {
            return None;
        }
        let from = self.change_log.partition_point(|&(v, _)| v <= version);
        Some(self.change_log[from..].iter().map(|&(_, position)| position))
    }

    /// Bump the version for a change to the node at `ix` and log it. Inlined: it runs at
    /// every change to a node, and without a log it is two stores.
    #[inline(always)]
    fn record_change(&mut self, ix: NodeIx) -> u64 {
        self.version += 1;
        self.versions[ix.0 as usize] = self.version;
        if !self.logging {
            self.log_from = self.version;
            return self.version;
        }
        // A node changed again with no other change between (a start places a job, then
        // lists its end): one entry, at the later version, says the same.
        if let Some(last) = self.change_log.last_mut().filter(|last| last.1 == ix.0) {
            last.0 = self.version;
            return self.version;
        }
        let kept_max = 2 * self.nodes.len().max(CHANGE_LOG_MIN);
        if self.change_log.len() == kept_max {
            let dropped = kept_max / 2;
            self.log_from = self.change_log[dropped - 1].0;
            self.change_log.drain(..dropped);
        }
        self.change_log.push((self.version, ix.0));
        self.version
    }

    /// Bump the version for a change that moves positions: the log starts again.
    fn record_layout_change(&mut self) -> u64 {
        self.version += 1;
        self.change_log.clear();
        self.log_from = self.version;
        self.version
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn ix_of(&self, id: NodeId) -> Option<NodeIx> {
        // Drivers usually number nodes from 0 without gaps: then a node's id is its position.
        let at = id.0 as usize;
        if self.ids.get(at) == Some(&id) {
            return Some(NodeIx(id.0));
        }
        self.ids.binary_search(&id).ok().map(|i| NodeIx(i as u32))
    }

    /// The id and version arrays say what the nodes say, and the nodes are in id order.
    pub fn check_ids(&self) -> Result<(), String> {
        let ids: Vec<NodeId> = self.nodes.iter().map(|n| n.spec.id).collect();
        if ids != self.ids || !ids.is_sorted_by(|a, b| a < b) {
            return Err(format!("node ids {:?} out of step with the nodes {:?}", self.ids, ids));
        }
        let versions: Vec<u64> = self.nodes.iter().map(|n| n.version).collect();
        if versions != self.versions {
            return Err(format!("node versions {:?} out of step with the nodes {:?}", self.versions, versions));
        }
        // Every node changed since the log starts has its last change there.
        let mut logged_last = vec![self.log_from; versions.len()];
        for &(version, position) in &self.change_log {
            match logged_last.get_mut(position as usize) {
                Some(last) => *last = version,
                None => return Err(format!("the change log names position {position} of {}", versions.len())),
            }
        }
        for (position, (&version, &logged)) in versions.iter().zip(&logged_last).enumerate() {
            if version > self.log_from && version != logged {
                return Err(format!(
                    "node at position {position} changed at version {version}, the change log (from \
                     version {}) last at {logged}",
                    self.log_from
                ));
            }
        }
        Ok(())
    }

    /// The nodes' ids and versions, in node order (see `versions`).
    pub fn ids_and_versions(&self) -> impl Iterator<Item = (NodeId, u64)> + '_ {
        self.ids.iter().copied().zip(self.versions.iter().copied())
    }

    pub fn get(&self, id: NodeId) -> Option<&Node> {
        self.ix_of(id).map(|ix| &self.nodes[ix.0 as usize])
    }

    /// The node of a placement (placements name known nodes).
    pub fn by_id(&self, id: NodeId) -> &Node {
        self.get(id).expect("placement names a known node")
    }

    /// For tests of the invariant checks, which break nodes on purpose (the index is not
    /// kept in step).
    #[cfg(test)]
    pub fn get_mut_for_tests(&mut self, id: NodeId) -> &mut Node {
        let ix = self.ix_of(id).expect("known node");
        &mut self.nodes[ix.0 as usize]
    }

    /// A node's list of expected ends (changing it leaves the free index as it is).
    pub fn ends_mut(&mut self, id: NodeId) -> &mut Vec<PlacedEnd> {
        let ix = self.ix_of(id).expect("placement names a known node");
        let version = self.record_change(ix);
        let node = &mut self.nodes[ix.0 as usize];
        node.version = version;
        &mut node.ends
    }

    /// A node's images (changing them leaves the free index as it is: they are a preference).
    pub fn images_mut(&mut self, id: NodeId) -> &mut Vec<crate::types::ImageId> {
        let ix = self.ix_of(id).expect("a known node");
        &mut self.nodes[ix.0 as usize].images
    }

    /// A node's victim list (changing it leaves the free index as it is).
    pub fn victims_mut(&mut self, id: NodeId) -> &mut Vec<VictimEntry> {
        let ix = self.ix_of(id).expect("placement names a known node");
        &mut self.nodes[ix.0 as usize].victims
    }

    pub fn at(&self, ix: NodeIx) -> &Node {
        &self.nodes[ix.0 as usize]
    }

    /// Nodes in id order.
    pub fn iter(&self) -> std::slice::Iter<'_, Node> {
        self.nodes.iter()
    }

    /// Add a node. Nodes usually come in id order: then no position moves and the index
    /// takes the node as it is (its bit sets grow by doubling); otherwise it is rebuilt.
    pub fn add(&mut self, mut node: Node) {
        node.version = self.record_layout_change();
        self.beyond_packing += u32::from(beyond_packing(&node));
        let at = self.nodes.partition_point(|n| n.spec.id < node.spec.id);
        let (model, gpus, level, schedulable, node_open) =
            (node.spec.gpu_model, node.spec.capacity.gpus, node.available_gpus(), node.schedulable, node.shared_open());
        self.ids.insert(at, node.spec.id);
        self.versions.insert(at, node.version);
        self.nodes.insert(at, node);
        let appended = at + 1 == self.nodes.len();
        if appended && self.index.has_room_for(self.nodes.len(), gpus) {
            self.index.ensure_model(model);
            if schedulable {
                self.index.insert(model, level, NodeIx(at as u32));
                self.index.set_shared_open(model, NodeIx(at as u32), node_open);
            }
        } else {
            self.rebuild_index();
        }
    }

    pub fn remove(&mut self, id: NodeId) -> Option<Node> {
        let ix = self.ix_of(id)?;
        self.record_layout_change();
        self.ids.remove(ix.0 as usize);
        self.versions.remove(ix.0 as usize);
        let node = self.nodes.remove(ix.0 as usize);
        self.beyond_packing -= u32::from(beyond_packing(&node));
        self.rebuild_index();
        Some(node)
    }

    /// Change a node and keep the free index in step.
    pub fn update<R>(&mut self, id: NodeId, f: impl FnOnce(&mut Node) -> R) -> R {
        let ix = self.ix_of(id).expect("placement names a known node");
        let version = self.record_change(ix);
        let node = &mut self.nodes[ix.0 as usize];
        node.version = version;
        let (before, was_schedulable, was_open) = (node.room.gpus, node.schedulable, node.shared_open());
        let out = f(node);
        node.room = node.room_now();
        let (after, schedulable, open) = (node.room.gpus, node.schedulable, node.shared_open());
        let model = node.spec.gpu_model;
        if (before, was_schedulable) != (after, schedulable) {
            if was_schedulable {
                self.index.remove(model, before, ix);
            }
            if schedulable {
                self.index.insert(model, after, ix);
            }
        }
        if (was_open && was_schedulable) != (open && schedulable) {
            self.index.set_shared_open(model, ix, open && schedulable);
        }
        out
    }

    fn rebuild_index(&mut self) {
        let mut models: Vec<GpuModel> = self.nodes.iter().map(|n| n.spec.gpu_model).collect();
        models.sort_unstable();
        models.dedup();
        let largest = self.nodes.iter().map(|n| n.spec.capacity.gpus).max().unwrap_or(0);
        self.index = FreeIndex::new(&models, largest, self.nodes.len());
        for (i, node) in self.nodes.iter().enumerate() {
            if node.schedulable {
                self.index.insert(node.spec.gpu_model, node.available_gpus(), NodeIx(i as u32));
                self.index.set_shared_open(node.spec.gpu_model, NodeIx(i as u32), node.shared_open());
            }
        }
    }
}

/// Schedulable nodes bucketed by model and available GPU count: one bit set over node
/// positions per (model, level), so iteration (and hence every placement) is in (model,
/// id) order, and moving a node between levels allocates nothing.
#[derive(Clone, Debug, Default)]
pub(crate) struct FreeIndex {
    /// Ascending by model.
    models: Vec<ModelLevels>,
    /// Words per level.
    words: usize,
    /// Levels kept: one more than the GPUs of the largest node (no node is ever above).
    levels: usize,
}

#[derive(Clone, Debug)]
struct ModelLevels {
    model: GpuModel,
    /// `levels × words` bits: node position `i` at level `l` is bit `i % 64` of word
    /// `l * words + i / 64`.
    bits: Vec<u64>,
    /// Nodes per level.
    counts: Vec<u32>,
    /// The levels with a node: bit `l % 64` of word `l / 64` is set iff `counts[l] > 0`.
    /// Placement walks the levels above a job's ask, and most are empty in a busy cluster.
    occupied: Vec<u64>,
    /// `words` bits: the nodes with a shared slot that has room for another share (at any
    /// level), which a share tries before it breaks a whole GPU.
    shared_open: Vec<u64>,
    shared_open_count: u32,
}

impl ModelLevels {
    /// The bits of the nodes at `level`, or `None` when it has none.
    fn level_bits(&self, level: u32, words: usize) -> Option<&[u64]> {
        let level = level as usize;
        self.counts.get(level).is_some_and(|c| *c > 0).then(|| &self.bits[level * words..(level + 1) * words])
    }

    fn new(model: GpuModel, levels: usize, words: usize) -> ModelLevels {
        ModelLevels {
            model,
            bits: vec![0; levels * words],
            counts: vec![0; levels],
            occupied: vec![0; levels.div_ceil(64)],
            shared_open: vec![0; words],
            shared_open_count: 0,
        }
    }
}

/// The positions of the set bits of `words`, ascending.
fn bit_positions(words: &[u64]) -> impl Iterator<Item = NodeIx> + '_ {
    words.iter().enumerate().flat_map(|(w, &bits)| {
        let mut rest = bits;
        std::iter::from_fn(move || {
            (rest != 0).then(|| {
                let i = rest.trailing_zeros();
                rest &= rest - 1;
                NodeIx(w as u32 * 64 + i)
            })
        })
    })
}

impl FreeIndex {
    fn new(models: &[GpuModel], gpus_largest_node: u32, nodes: usize) -> FreeIndex {
        let levels = gpus_largest_node as usize + 1;
        // Room to double before the next rebuild.
        let words = nodes.div_ceil(64).max(1).next_power_of_two();
        let models = models.iter().map(|&model| ModelLevels::new(model, levels, words)).collect();
        FreeIndex { models, words, levels }
    }

    /// Can a node at position `nodes - 1` with `gpus` GPUs be indexed without a rebuild?
    fn has_room_for(&self, nodes: usize, gpus: u32) -> bool {
        nodes <= self.words * 64 && (gpus as usize) < self.levels
    }

    fn ensure_model(&mut self, model: GpuModel) {
        if let Err(at) = self.models.binary_search_by_key(&model, |m| m.model) {
            self.models.insert(at, ModelLevels::new(model, self.levels, self.words));
        }
    }

    fn model_mut(&mut self, model: GpuModel) -> &mut ModelLevels {
        let i = self.models.binary_search_by_key(&model, |m| m.model).expect("indexed model");
        &mut self.models[i]
    }

    pub fn insert(&mut self, model: GpuModel, level: u32, node: NodeIx) {
        let words = self.words;
        let m = self.model_mut(model);
        let (word, bit) = (level as usize * words + node.0 as usize / 64, 1u64 << (node.0 % 64));
        debug_assert!(m.bits[word] & bit == 0, "{node:?} indexed twice");
        m.bits[word] |= bit;
        m.counts[level as usize] += 1;
        m.occupied[level as usize / 64] |= 1 << (level % 64);
    }

    pub fn remove(&mut self, model: GpuModel, level: u32, node: NodeIx) {
        let words = self.words;
        let m = self.model_mut(model);
        let (word, bit) = (level as usize * words + node.0 as usize / 64, 1u64 << (node.0 % 64));
        debug_assert!(m.bits[word] & bit != 0, "{node:?} missing from index at level {level}");
        m.bits[word] &= !bit;
        m.counts[level as usize] -= 1;
        if m.counts[level as usize] == 0 {
            m.occupied[level as usize / 64] &= !(1 << (level % 64));
        }
    }

    /// Note whether a node has a shared slot open to another share.
    pub fn set_shared_open(&mut self, model: GpuModel, node: NodeIx, open: bool) {
        let m = self.model_mut(model);
        let (word, bit) = (node.0 as usize / 64, 1u64 << (node.0 % 64));
        let was = m.shared_open[word] & bit != 0;
        if was != open {
            m.shared_open[word] ^= bit;
            if open {
                m.shared_open_count += 1;
            } else {
                m.shared_open_count -= 1;
            }
        }
    }

    /// Nodes of the wanted model(s) with a shared slot open to another share, by model
    /// then id.
    pub fn shared_open(&self, wanted: Option<GpuModel>) -> impl Iterator<Item = NodeIx> + '_ {
        self.models(wanted).filter(|m| m.shared_open_count > 0).flat_map(|m| bit_positions(&m.shared_open))
    }

    /// Models a job may use, ascending.
    fn models(&self, wanted: Option<GpuModel>) -> impl Iterator<Item = &ModelLevels> {
        self.models.iter().filter(move |m| wanted.is_none_or(|w| w == m.model))
    }

    /// Is any node of the wanted model(s) at `level`?
    pub fn any_at_level(&self, wanted: Option<GpuModel>, level: u32) -> bool {
        self.models(wanted).any(|m| m.counts.get(level as usize).is_some_and(|c| *c > 0))
    }

    /// Nodes of the wanted model(s) with exactly `level` GPUs available, by model then id.
    pub fn at_level(&self, wanted: Option<GpuModel>, level: u32) -> impl Iterator<Item = NodeIx> + '_ {
        let words = self.words;
        self.models(wanted).filter_map(move |m| m.level_bits(level, words)).flat_map(bit_positions)
    }

    /// Calls `visit` on the nodes `at_level` yields, in the same order, until it returns
    /// true (then true). Plain loops: packed placement walks levels for every placement,
    /// and the nested iterators of `at_level` cost a tenth of its time.
    pub fn visit_level(&self, wanted: Option<GpuModel>, level: u32, mut visit: impl FnMut(NodeIx) -> bool) -> bool {
        let words = self.words;
        for level_bits in self.models(wanted).filter_map(|m| m.level_bits(level, words)) {
            for (w, &bits) in level_bits.iter().enumerate() {
                let mut rest = bits;
                while rest != 0 {
                    let i = rest.trailing_zeros();
                    rest &= rest - 1;
                    if visit(NodeIx(w as u32 * 64 + i)) {
                        return true;
                    }
                }
            }
        }
        false
    }

    /// Calls `visit` on the levels from `lowest` up where a node of the wanted model(s) is,
    /// ascending, until it returns true (then true).
    pub fn visit_occupied_levels(
        &self,
        wanted: Option<GpuModel>,
        lowest: u32,
        mut visit: impl FnMut(u32) -> bool,
    ) -> bool {
        let first_word = lowest as usize / 64;
        for w in first_word..self.levels.div_ceil(64) {
            let mut rest = self.models(wanted).fold(0u64, |bits, m| bits | m.occupied[w]);
            if w == first_word {
                rest &= u64::MAX << (lowest % 64);
            }
            while rest != 0 {
                let level = w as u32 * 64 + rest.trailing_zeros();
                rest &= rest - 1;
                if visit(level) {
                    return true;
                }
            }
        }
        false
    }

    /// (most GPUs available on one node, number of schedulable nodes) for the model(s).
    pub fn summary(&self, wanted: Option<GpuModel>) -> (u32, u32) {
        let mut max = 0;
        let mut count = 0;
        for m in self.models(wanted) {
            for (level, &n) in m.counts.iter().enumerate() {
                if n > 0 {
                    max = max.max(level as u32);
                    count += n;
                }
            }
        }
        (max, count)
    }

    /// GPUs available on all schedulable nodes of the model(s).
    pub fn total_free(&self, wanted: Option<GpuModel>) -> u32 {
        self.models(wanted).flat_map(|m| m.counts.iter().enumerate()).map(|(level, &n)| level as u32 * n).sum()
    }

    /// The highest level a node can be at: the GPUs of the largest node.
    pub fn level_max(&self) -> u32 {
        self.levels.saturating_sub(1) as u32
    }

    /// The index agrees with the nodes: each schedulable node once, at its level, and the
    /// per-level counts count the bits.
    pub fn check<'a>(&self, nodes: impl Iterator<Item = &'a Node>) -> Result<(), String> {
        let mut listed_total = 0;
        let mut open_total = 0;
        for m in &self.models {
            let open: u32 = m.shared_open.iter().map(|w| w.count_ones()).sum();
            if open != m.shared_open_count {
                return Err(format!(
                    "free index counts {} nodes with a shared GPU open, lists {open}",
                    m.shared_open_count
                ));
            }
            open_total += open;
            for level in 0..self.levels {
                let listed: u32 =
                    m.bits[level * self.words..(level + 1) * self.words].iter().map(|w| w.count_ones()).sum();
                if listed != m.counts[level] {
                    return Err(format!(
                        "free index counts {} nodes at level {level}, lists {listed}",
                        m.counts[level]
                    ));
                }
                let occupied = m.occupied[level / 64] & (1 << (level % 64)) != 0;
                if occupied != (listed > 0) {
                    return Err(format!(
                        "free index marks level {level} occupied: {occupied}, lists {listed} nodes there"
                    ));
                }
                listed_total += listed;
            }
        }
        let (mut schedulable, mut schedulable_open) = (0, 0);
        for (i, node) in nodes.enumerate() {
            if !node.schedulable {
                continue;
            }
            schedulable += 1;
            schedulable_open += u32::from(node.shared_open());
            let level = node.available_gpus() as usize;
            let at_level = self
                .models
                .binary_search_by_key(&node.spec.gpu_model, |m| m.model)
                .is_ok_and(|k| self.models[k].bits[level * self.words + i / 64] & (1 << (i % 64)) != 0);
            if !at_level {
                return Err(format!("{} is not indexed at its level {level}", node.spec.id));
            }
            let listed_open = self
                .models
                .binary_search_by_key(&node.spec.gpu_model, |m| m.model)
                .is_ok_and(|k| self.models[k].shared_open[i / 64] & (1 << (i % 64)) != 0);
            if listed_open != node.shared_open() {
                return Err(format!(
                    "{} is listed with a shared GPU open: {listed_open}, has one: {}",
                    node.spec.id,
                    node.shared_open()
                ));
            }
        }
        if open_total != schedulable_open {
            return Err(format!(
                "free index lists {open_total} nodes with a shared GPU open, {schedulable_open} schedulable ones have one"
            ));
        }
        if listed_total != schedulable {
            return Err(format!("free index lists {listed_total} nodes, {schedulable} are schedulable"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(id: u32, model: u16, gpus: u32) -> Node {
        Node::new(NodeSpec { id: NodeId(id), gpu_model: GpuModel(model), capacity: Resources::gpus(gpus) })
    }

    /// `visit_level` visits what `at_level` yields, in its order, and stops when asked.
    #[test]
    fn visiting_a_level_is_walking_it() {
        let mut nodes = Nodes::default();
        // 150 nodes (three words of bits), two models, taken down to mixed levels.
        for id in 0..150 {
            nodes.add(node(id, (id % 3 == 0) as u16, 8));
            let taken = GpuSet::first(id % 9);
            nodes.update(NodeId(id), |n| n.owned = taken);
        }
        for wanted in [None, Some(GpuModel(0)), Some(GpuModel(1))] {
            for level in 0..=nodes.index.level_max() {
                let walked: Vec<NodeIx> = nodes.index.at_level(wanted, level).collect();
                let mut visited = Vec::new();
                assert!(!nodes.index.visit_level(wanted, level, |ix| {
                    visited.push(ix);
                    false
                }));
                assert_eq!(visited, walked, "{wanted:?} at level {level}");
                if let Some(&third) = walked.get(2) {
                    let mut seen = Vec::new();
                    assert!(nodes.index.visit_level(wanted, level, |ix| {
                        seen.push(ix);
                        ix == third
                    }));
                    assert_eq!(seen, walked[..3], "stops at the node that asks");
                }
            }
        }
    }

    /// `visit_occupied_levels` visits, ascending, exactly the levels from its lowest where
    /// `at_level` yields a node, across the two words of levels a 64-GPU node needs, and
    /// stops when asked.
    #[test]
    fn the_occupied_levels_are_those_with_a_node() {
        let mut nodes = Nodes::default();
        for id in 0..40 {
            let gpus = if id % 5 == 0 { 64 } else { 8 };
            nodes.add(node(id, (id % 3 == 0) as u16, gpus));
            let taken = GpuSet::first((id * 7) % (gpus + 1));
            nodes.update(NodeId(id), |n| n.owned = taken);
        }
        nodes.update(NodeId(7), |n| n.schedulable = false);
        for wanted in [None, Some(GpuModel(0)), Some(GpuModel(1))] {
            for lowest in [0, 1, 5, 8, 9, 63, 64] {
                let expected: Vec<u32> = (lowest..=nodes.index.level_max())
                    .filter(|&l| nodes.index.at_level(wanted, l).next().is_some())
                    .collect();
                let mut visited = Vec::new();
                assert!(!nodes.index.visit_occupied_levels(wanted, lowest, |l| {
                    visited.push(l);
                    false
                }));
                assert_eq!(visited, expected, "{wanted:?} from level {lowest}");
                if let Some(&second) = expected.get(1) {
                    let mut seen = Vec::new();
                    assert!(nodes.index.visit_occupied_levels(wanted, lowest, |l| {
                        seen.push(l);
                        l == second
                    }));
                    assert_eq!(seen, expected[..2], "stops at the level that asks");
                }
            }
        }
        assert_eq!(nodes.index.check(nodes.iter()), Ok(()));
    }

    /// The room kept follows every change made through `update`, and a change made around
    /// it is caught.
    #[test]
    fn the_room_kept_follows_the_slots_and_resources() {
        let mut nodes = Nodes::default();
        let capacity = Resources::new(8, 16_000, 64_000);
        nodes.add(Node::new(NodeSpec { id: NodeId(1), gpu_model: GpuModel(0), capacity }));
        nodes.update(NodeId(1), |n| n.owned = GpuSet::first(3));
        nodes.update(NodeId(1), |n| n.held = GpuSet::first(5).minus(GpuSet::first(2)));
        let n = nodes.by_id(NodeId(1));
        assert_eq!((n.available_gpus(), n.free_slots().len()), (3, 3));
        assert!(n.room_agrees());
        let mut stale = n.clone();
        stale.owned = GpuSet::first(6);
        assert!(!stale.room_agrees(), "a slot change made around `update` is caught");
        let mut stale = n.clone();
        stale.used.cpu_millis += 1;
        assert!(!stale.room_agrees(), "a resource change made around `update` is caught");
    }

    #[test]
    fn the_free_index_lists_nodes_by_model_then_id() {
        let mut nodes = Nodes::default();
        for (id, model) in [(70, 1), (3, 0), (130, 0), (9, 1)] {
            nodes.add(node(id, model, 8));
        }
        fn ids(nodes: &Nodes, level: u32) -> Vec<u32> {
            nodes.index.at_level(None, level).map(|ix| nodes.at(ix).spec.id.0).collect()
        }
        assert_eq!(ids(&nodes, 8), vec![3, 130, 9, 70]);
        nodes.update(NodeId(130), |n| n.owned = GpuSet::first(3));
        assert_eq!(ids(&nodes, 8), vec![3, 9, 70]);
        assert_eq!(ids(&nodes, 5), vec![130]);
        assert_eq!(nodes.index.summary(Some(GpuModel(0))), (8, 2));
        assert_eq!(nodes.index.total_free(None), 29);
        nodes.update(NodeId(3), |n| n.schedulable = false);
        assert_eq!(ids(&nodes, 8), vec![9, 70]);
        assert_eq!(nodes.index.check(nodes.iter()), Ok(()));
        nodes.remove(NodeId(9));
        assert_eq!(ids(&nodes, 8), vec![70]);
    }

    /// `changed_since` says exactly which nodes changed after a version, as an outside
    /// ledger of the changes does (a node changed twice in a row named once), or that it
    /// cannot: only when the version is older than
    /// the changes it keeps, or a node was added or removed since. It keeps at least the
    /// last `max(nodes, CHANGE_LOG_MIN)` changes, and `check_ids` agrees with it.
    #[test]
    fn the_change_log_names_every_node_changed_since_a_version() {
        let mut unlogged = Nodes::default();
        unlogged.add(node(0, 0, 8));
        let before = unlogged.version();
        unlogged.update(NodeId(0), |n| n.owned = GpuSet::first(1));
        assert!(unlogged.changed_since(before).is_none(), "nothing is logged unless asked");
        assert_eq!(unlogged.changed_since(unlogged.version()).map(|c| c.count()), Some(0));
        let mut nodes = Nodes::with_change_log(true);
        for id in 0..10 {
            nodes.add(node(id, 0, 8));
        }
        // The ledger: every change's version and position, and the last layout change.
        let mut ledger: Vec<(u64, u32)> = Vec::new();
        let mut layout_at = nodes.version();
        let mut seed = 7u64;
        for step in 0..2_000u64 {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            let position = (seed >> 33) as u32 % nodes.len() as u32;
            let id = nodes.at(NodeIx(position)).spec.id;
            match step % 701 {
                // Now and then a node comes or goes: positions move.
                13 => {
                    nodes.remove(id);
                    layout_at = nodes.version();
                }
                14 => {
                    nodes.add(node(1_000 + step as u32, 0, 8));
                    layout_at = nodes.version();
                }
                k if k % 2 == 0 => {
                    nodes.update(id, |n| n.owned = GpuSet::first((seed >> 50) as u32 % 9));
                    ledger.push((nodes.version(), position));
                }
                _ => {
                    nodes.ends_mut(id).clear();
                    ledger.push((nodes.version(), position));
                }
            }
            assert_eq!(nodes.check_ids(), Ok(()));
            let now = nodes.version();
            let kept_at_least = nodes.len().max(CHANGE_LOG_MIN) as u64;
            for back in [0u64, 1, 2, 5, 30, 64, 100, 200, 400] {
                let since = now.saturating_sub(back);
                let expected: Vec<u32> = ledger.iter().filter(|(v, _)| *v > since).map(|(_, p)| *p).collect();
                let known = since >= layout_at && (expected.len() as u64) < kept_at_least;
                match nodes.changed_since(since) {
                    Some(changed) => {
                        assert!(since >= layout_at, "no positions across a layout change (step {step})");
                        // The same nodes; a node changed again with no other change
                        // between is named once.
                        let mut changed: Vec<u32> = changed.collect();
                        assert!(changed.windows(2).all(|w| w[0] != w[1]), "{changed:?} (step {step})");
                        let mut expected = expected;
                        changed.sort_unstable();
                        changed.dedup();
                        expected.sort_unstable();
                        expected.dedup();
                        assert_eq!(changed, expected, "since {since} (step {step})");
                    }
                    None => {
                        assert!(!known, "the last {} changes are kept (step {step}, since {since})", expected.len())
                    }
                }
            }
        }
    }
}
