//! Shared-GPU placement: the node model with GPU shares, the placement policies, and the
//! fragmentation measure they are judged by.
//!
//! A GPU is 1000 thousandths ("milli"). A replica asks for `gpu_count` GPUs of `gpu_milli`
//! each: one share of one GPU (`1 × 460`), or whole GPUs on one node (`4 × 1000`), or none.
//! Shares on one GPU add up to at most 1000; a whole GPU is never shared; CPU and memory of
//! a node are never overcommitted. [`NodeRoom`] keeps those rules ([`NodeRoom::take`]
//! refuses anything that breaks them) and [`Packer`] places asks one at a time with a named
//! [`PackPolicy`] (docs/placement.md has every policy's formula).
//!
//! Pure and deterministic like the rest of the core: the one policy that draws lots
//! (`random`) takes its entropy from the caller, and ties between nodes break by a rank the
//! caller gives each node.

mod frag;
mod packer;
mod policy;
#[cfg(test)]
mod tests;

pub(crate) use frag::AskCounts;
pub use frag::{FragBreakdown, TypicalShape, WorkloadModel};
pub(crate) use packer::{FastMap, FragCache, score_node};
pub use packer::{PackError, PackStats, Packer, Placement};
pub(crate) use policy::KindCounts;
pub use policy::{PackPolicy, UnknownPolicy};

use crate::types::GpuModel;

/// Thousandths of one GPU: a whole GPU.
pub const MILLI_PER_GPU: u16 = 1000;
/// GPUs one node may have (the largest servers sold carry 16).
pub const NODE_GPUS_MAX: usize = 16;

/// The GPU models a replica may run on: a set of [`GpuModel`]s below 64; empty means any.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ModelSet(u64);

impl ModelSet {
    pub const ANY: ModelSet = ModelSet(0);
    /// Highest model id a set can hold, plus one.
    pub const MODELS_MAX: u16 = 64;

    /// The set of `models`; `None` when one of them is [`Self::MODELS_MAX`] or above.
    pub fn of(models: impl IntoIterator<Item = GpuModel>) -> Option<ModelSet> {
        let mut bits = 0u64;
        for m in models {
            if m.0 >= Self::MODELS_MAX {
                return None;
            }
            bits |= 1 << m.0;
        }
        Some(ModelSet(bits))
    }
    pub fn is_any(self) -> bool {
        self.0 == 0
    }
    /// Whether a node with GPUs of `model` (or none) qualifies.
    pub fn admits(self, model: Option<GpuModel>) -> bool {
        match model {
            _ if self.is_any() => true,
            None => false,
            Some(m) => m.0 < Self::MODELS_MAX && self.0 & (1 << m.0) != 0,
        }
    }
}

/// What one replica asks of one node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ask {
    pub cpu_milli: u64,
    pub memory_mib: u64,
    /// GPUs: 0 (CPU only), 1 (a share or a whole GPU), or more (whole GPUs on one node).
    pub gpu_count: u8,
    /// Thousandths of each GPU: 1–1000 when `gpu_count > 0`, 1000 when `gpu_count > 1`, else 0.
    pub gpu_milli: u16,
    pub models: ModelSet,
}

/// Why an [`Ask`] or a node description is refused: which field, and why (`field: reason`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ShapeError {
    MilliAboveWhole(u32),
    MilliMissing(u32),
    MilliWithoutGpus(u32),
    SharedMultiGpu { count: u32, milli: u32 },
    TooManyGpus(u64),
}

impl ShapeError {
    /// The field at fault: `gpu_milli` or `gpu_count`.
    pub fn field(&self) -> &'static str {
        match self {
            ShapeError::TooManyGpus(_) => "gpu_count",
            _ => "gpu_milli",
        }
    }

    /// Why, without the field's name.
    pub fn reason(&self) -> String {
        match self {
            ShapeError::MilliAboveWhole(m) => format!("must be ≤ 1000 (thousandths of one GPU), not {m}"),
            ShapeError::MilliMissing(count) => format!("must be ≥ 1 when gpu_count is {count}"),
            ShapeError::MilliWithoutGpus(m) => format!("must be 0 when gpu_count is 0, not {m}"),
            ShapeError::SharedMultiGpu { count, milli } => {
                format!("a request for {count} GPUs must take whole GPUs (1000), not {milli}")
            }
            ShapeError::TooManyGpus(n) => format!("{n} is more than {NODE_GPUS_MAX}, the most GPUs a node may have"),
        }
    }
}

impl std::fmt::Display for ShapeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field(), self.reason())
    }
}

impl std::error::Error for ShapeError {}

impl Ask {
    /// A checked ask. The counts are taken wide so that any input value is checked, not cut.
    pub fn new(
        cpu_milli: u64,
        memory_mib: u64,
        gpu_count: u32,
        gpu_milli: u32,
        models: ModelSet,
    ) -> Result<Ask, ShapeError> {
        if gpu_count as usize > NODE_GPUS_MAX {
            return Err(ShapeError::TooManyGpus(gpu_count.into()));
        }
        if gpu_milli > u32::from(MILLI_PER_GPU) {
            return Err(ShapeError::MilliAboveWhole(gpu_milli));
        }
        match gpu_count {
            0 if gpu_milli != 0 => return Err(ShapeError::MilliWithoutGpus(gpu_milli)),
            1.. if gpu_milli == 0 => return Err(ShapeError::MilliMissing(gpu_count)),
            2.. if gpu_milli != u32::from(MILLI_PER_GPU) => {
                return Err(ShapeError::SharedMultiGpu { count: gpu_count, milli: gpu_milli });
            }
            _ => {}
        }
        // Both fit: at most 16 GPUs and 1000 thousandths, checked above.
        Ok(Ask { cpu_milli, memory_mib, gpu_count: gpu_count as u8, gpu_milli: gpu_milli as u16, models })
    }
    /// All its GPU thousandths (`gpu_count × gpu_milli`).
    pub fn gpu_milli_total(&self) -> u64 {
        u64::from(self.gpu_count) * u64::from(self.gpu_milli)
    }
    /// A share of one GPU (less than a whole one).
    pub fn is_share(&self) -> bool {
        self.gpu_count == 1 && self.gpu_milli < MILLI_PER_GPU
    }
    /// Which group of asks it belongs to for `gpu-clustering`: CPU only, a share, or k whole GPUs.
    pub fn kind(&self) -> AskKind {
        match self.gpu_count {
            0 => AskKind::CpuOnly,
            _ if self.is_share() => AskKind::Share,
            k => AskKind::Whole(k),
        }
    }
}

/// The three kinds of ask (see [`Ask::kind`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AskKind {
    CpuOnly,
    Share,
    Whole(u8),
}

/// Which GPUs of a node an ask takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GpuPick {
    /// A CPU-only ask.
    None,
    /// A share of the GPU with this index.
    Share(u8),
    /// Whole GPUs: bit `i` is GPU `i`.
    Whole(u16),
}

impl GpuPick {
    /// The device indices it takes, ascending.
    pub fn devices(self) -> impl Iterator<Item = u8> {
        let (mask, single) = match self {
            GpuPick::None => (0u16, None),
            GpuPick::Share(i) => (0, Some(i)),
            GpuPick::Whole(m) => (m, None),
        };
        single.into_iter().chain((0..NODE_GPUS_MAX as u8).filter(move |i| mask & (1 << i) != 0))
    }
}

/// What a node has, and what is free of it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct NodeRoom {
    pub cpu_milli_capacity: u64,
    pub cpu_milli_free: u64,
    pub memory_mib_capacity: u64,
    pub memory_mib_free: u64,
    pub model: Option<GpuModel>,
    gpus: u8,
    /// Free thousandths of each GPU, by device index.
    gpu_free: [u16; NODE_GPUS_MAX],
}

/// Why [`NodeRoom::take`] or [`NodeRoom::give_back`] refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RoomError {
    #[error("the node has {free} millicores free, the ask needs {asked}")]
    Cpu { free: u64, asked: u64 },
    #[error("the node has {free} MiB free, the ask needs {asked}")]
    Memory { free: u64, asked: u64 },
    #[error("the node's GPU model is not one the ask allows")]
    Model,
    #[error("GPU {device}: {free} thousandths free, the ask needs {asked}")]
    Gpu { device: u8, free: u16, asked: u16 },
    #[error("the pick does not match the ask ({0})")]
    Pick(&'static str),
    #[error("giving back more than the node has: {0}")]
    Overflow(&'static str),
}

impl NodeRoom {
    /// An empty node. Fails if it has more than [`NODE_GPUS_MAX`] GPUs.
    pub fn new(cpu_milli: u64, memory_mib: u64, gpus: usize, model: Option<GpuModel>) -> Result<NodeRoom, ShapeError> {
        if gpus > NODE_GPUS_MAX {
            return Err(ShapeError::TooManyGpus(gpus as u64));
        }
        let mut gpu_free = [0; NODE_GPUS_MAX];
        gpu_free[..gpus].fill(MILLI_PER_GPU);
        Ok(NodeRoom {
            cpu_milli_capacity: cpu_milli,
            cpu_milli_free: cpu_milli,
            memory_mib_capacity: memory_mib,
            memory_mib_free: memory_mib,
            model,
            gpus: gpus as u8,
            gpu_free,
        })
    }
    /// A node with `gpu_free` thousandths free on its GPUs (each at most 1000; at most
    /// [`NODE_GPUS_MAX`] GPUs) and the CPU and memory given free.
    pub fn with_free(
        capacity: (u64, u64),
        free: (u64, u64),
        model: Option<GpuModel>,
        gpu_free: &[u16],
    ) -> Result<NodeRoom, ShapeError> {
        let mut room = NodeRoom::new(capacity.0, capacity.1, gpu_free.len(), model)?;
        room.cpu_milli_free = free.0.min(capacity.0);
        room.memory_mib_free = free.1.min(capacity.1);
        for (slot, &f) in room.gpu_free.iter_mut().zip(gpu_free) {
            *slot = f.min(MILLI_PER_GPU);
        }
        Ok(room)
    }
    pub fn gpus(&self) -> usize {
        self.gpus.into()
    }
    /// Free thousandths of each GPU, by device index.
    pub fn gpu_free(&self) -> &[u16] {
        &self.gpu_free[..self.gpus()]
    }
    pub fn gpu_free_total(&self) -> u64 {
        self.gpu_free().iter().map(|&f| u64::from(f)).sum()
    }
    pub fn whole_gpus_free(&self) -> usize {
        self.gpu_free().iter().filter(|&&f| f == MILLI_PER_GPU).count()
    }
    /// Whether nothing of it is taken.
    pub fn is_idle(&self) -> bool {
        self.cpu_milli_free == self.cpu_milli_capacity
            && self.memory_mib_free == self.memory_mib_capacity
            && self.whole_gpus_free() == self.gpus()
    }

    /// Whether `ask` fits: CPU, memory, an allowed model, and GPUs (one GPU with the share
    /// free, or `gpu_count` whole free GPUs).
    pub fn fits(&self, ask: &Ask) -> bool {
        self.cpu_milli_free >= ask.cpu_milli && self.memory_mib_free >= ask.memory_mib && self.fits_gpus(ask)
    }

    fn fits_gpus(&self, ask: &Ask) -> bool {
        match ask.gpu_count {
            0 => true,
            _ if !ask.models.admits(self.model) => false,
            1 => self.gpu_free().iter().any(|&f| f >= ask.gpu_milli),
            k => self.whole_gpus_free() >= usize::from(k),
        }
    }

    /// The first `gpu_count` wholly free GPUs (by index); `None` if there are fewer.
    pub fn first_whole(&self, count: u8) -> Option<GpuPick> {
        let mut mask = 0u16;
        let mut left = count;
        for (i, &f) in self.gpu_free().iter().enumerate() {
            if left == 0 {
                break;
            }
            if f == MILLI_PER_GPU {
                mask |= 1 << i;
                left -= 1;
            }
        }
        (left == 0).then_some(GpuPick::Whole(mask))
    }

    /// The tightest GPU that holds a share of `milli` (least free; lowest index among equals).
    pub fn tightest_share(&self, milli: u16) -> Option<GpuPick> {
        let mut best: Option<(u16, usize)> = None;
        for (i, &f) in self.gpu_free().iter().enumerate() {
            if f >= milli && best.is_none_or(|(bf, _)| f < bf) {
                best = Some((f, i));
            }
        }
        best.map(|(_, i)| GpuPick::Share(i as u8))
    }

    /// The default GPUs for `ask` on this node: the tightest GPU for a share, the first free
    /// GPUs for whole ones. `None` if it does not fit.
    pub fn default_pick(&self, ask: &Ask) -> Option<GpuPick> {
        if !self.fits(ask) {
            return None;
        }
        match ask.gpu_count {
            0 => Some(GpuPick::None),
            _ if ask.is_share() => self.tightest_share(ask.gpu_milli),
            k => self.first_whole(k),
        }
    }

    /// Takes `ask` with the GPUs of `pick`, or says why it cannot (and changes nothing).
    pub fn take(&mut self, ask: &Ask, pick: GpuPick) -> Result<(), RoomError> {
        self.check_take(ask, pick)?;
        self.cpu_milli_free -= ask.cpu_milli;
        self.memory_mib_free -= ask.memory_mib;
        for d in pick.devices() {
            self.gpu_free[usize::from(d)] -= ask.gpu_milli;
        }
        Ok(())
    }

    fn check_take(&self, ask: &Ask, pick: GpuPick) -> Result<(), RoomError> {
        if self.cpu_milli_free < ask.cpu_milli {
            return Err(RoomError::Cpu { free: self.cpu_milli_free, asked: ask.cpu_milli });
        }
        if self.memory_mib_free < ask.memory_mib {
            return Err(RoomError::Memory { free: self.memory_mib_free, asked: ask.memory_mib });
        }
        if ask.gpu_count > 0 && !ask.models.admits(self.model) {
            return Err(RoomError::Model);
        }
        self.check_pick_shape(ask, pick)?;
        for d in pick.devices() {
            let free = self.gpu_free[usize::from(d)];
            if free < ask.gpu_milli {
                return Err(RoomError::Gpu { device: d, free, asked: ask.gpu_milli });
            }
        }
        Ok(())
    }

    fn check_pick_shape(&self, ask: &Ask, pick: GpuPick) -> Result<(), RoomError> {
        let count = pick.devices().count();
        let in_range = pick.devices().all(|d| usize::from(d) < self.gpus());
        match pick {
            _ if !in_range => Err(RoomError::Pick("a GPU index beyond the node's GPUs")),
            GpuPick::None if ask.gpu_count != 0 => Err(RoomError::Pick("no GPU for a GPU ask")),
            GpuPick::Share(_) if !ask.is_share() => Err(RoomError::Pick("one share for an ask of whole GPUs")),
            GpuPick::Whole(_) if ask.is_share() || count != usize::from(ask.gpu_count) => {
                Err(RoomError::Pick("whole GPUs other than the ask's count"))
            }
            _ => Ok(()),
        }
    }

    /// Gives back what [`Self::take`] took (a departure).
    pub fn give_back(&mut self, ask: &Ask, pick: GpuPick) -> Result<(), RoomError> {
        self.check_pick_shape(ask, pick)?;
        if self.cpu_milli_free + ask.cpu_milli > self.cpu_milli_capacity {
            return Err(RoomError::Overflow("CPU"));
        }
        if self.memory_mib_free + ask.memory_mib > self.memory_mib_capacity {
            return Err(RoomError::Overflow("memory"));
        }
        if pick.devices().any(|d| self.gpu_free[usize::from(d)] + ask.gpu_milli > MILLI_PER_GPU) {
            return Err(RoomError::Overflow("a GPU"));
        }
        self.cpu_milli_free += ask.cpu_milli;
        self.memory_mib_free += ask.memory_mib;
        for d in pick.devices() {
            self.gpu_free[usize::from(d)] += ask.gpu_milli;
        }
        Ok(())
    }

    /// Free thousandths per GPU, largest first (what fragmentation depends on).
    fn sorted_free_desc(&self) -> [u16; NODE_GPUS_MAX] {
        let mut s = self.gpu_free;
        s[..self.gpus()].sort_unstable_by(|a, b| b.cmp(a));
        s
    }
}
