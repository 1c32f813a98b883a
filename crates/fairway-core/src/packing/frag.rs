//! Fragmentation as FGD defines it (Weng et al., ATC'23, §3): the free GPU thousandths of a
//! node that a typical ask could not use, weighted by how common each typical ask is.
//!
//! For a node with free GPUs `f_1..f_n` (thousandths, summing to `F`) and a typical ask `t`
//! with weight `p_t`:
//! - if `t` fits the node's GPUs and CPU, the fragment is the free thousandths on GPUs too
//!   small for one of its shares: `Σ f_i where f_i < t.gpu_milli`;
//! - otherwise (it lacks GPUs, CPU, or the model, or it takes no GPU at all) all of `F` is
//!   fragment to it.
//!
//! The node's fragmentation is `Σ_t p_t × fragment_t`, and the cluster's is the sum over
//! nodes; the fragmentation ratio is that over all free GPU thousandths.

use std::cmp::Reverse;

use super::{Ask, ModelSet, NodeRoom};

/// One typical ask and its weight (its share of the asks the model was built from,
/// renormalised over the typical ones).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TypicalShape {
    pub cpu_milli: u64,
    pub gpu_count: u8,
    pub gpu_milli: u16,
    pub models: ModelSet,
    pub weight: f64,
}

/// The typical asks of a workload: what fragmentation is measured against.
#[derive(Clone, Debug, PartialEq)]
pub struct WorkloadModel {
    shapes: Vec<TypicalShape>,
    /// The distinct CPU asks of `shapes`, ascending: a node's fragmentation depends on its
    /// free CPU only through which of them it can hold.
    cpu_steps: Vec<u64>,
}

/// A node's free GPU thousandths split the way FGD's reference counts them, each weighted
/// by the typical asks' weights: `[lack both, lack GPU, satisfied, lack CPU, CPU-only fits,
/// CPU-only lacks CPU, model not allowed]`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct FragBreakdown(pub [f64; 7]);

const Q1_LACK_BOTH: usize = 0;
const Q2_LACK_GPU: usize = 1;
const Q3_SATISFIED: usize = 2;
const Q4_LACK_CPU: usize = 3;
const XL_CPU_ONLY_FITS: usize = 4;
const XR_CPU_ONLY_LACKS_CPU: usize = 5;
const NO_ACCESS: usize = 6;

impl FragBreakdown {
    /// Everything but the satisfied part, summed in the reference's order.
    pub fn fragmented(&self) -> f64 {
        let mut out = 0.0;
        for (i, v) in self.0.iter().enumerate() {
            if i != Q3_SATISFIED {
                out += v;
            }
        }
        out
    }
}

/// What the typical asks group asks by: CPU, GPU share, GPU count and models.
type AskKind = (u64, u16, u8, ModelSet);

/// Asks counted by [`AskKind`], kept as asks come and go (the scheduler learns its model
/// again every few hundred arrivals from a window of the latest ones: counting the window
/// afresh each time cost 2% of a Philly replay). A fast hash: its order decides nothing.
#[derive(Clone, Debug, Default)]
pub(crate) struct AskCounts {
    by_kind: super::FastMap<AskKind, u64>,
}

impl AskCounts {
    fn kind(a: &Ask) -> AskKind {
        (a.cpu_milli, a.gpu_milli, a.gpu_count, a.models)
    }

    pub(crate) fn add(&mut self, a: &Ask) {
        *self.by_kind.entry(Self::kind(a)).or_default() += 1;
    }

    /// Forgets one ask counted before.
    pub(crate) fn remove(&mut self, a: &Ask) {
        let kind = Self::kind(a);
        let n = self.by_kind.get_mut(&kind).expect("an ask counted before");
        *n -= 1;
        if *n == 0 {
            self.by_kind.remove(&kind);
        }
    }
}

impl WorkloadModel {
    /// The typical asks of `asks`: asks grouped by CPU, GPU count, GPU share and models
    /// (memory is not part of the measure), most frequent first (ties: the larger ask
    /// first), kept until they cover `coverage_percent` of all asks, weights renormalised
    /// to sum to 1. The paper uses 95.
    pub fn from_asks<'a>(asks: impl IntoIterator<Item = &'a Ask>, coverage_percent: u32) -> WorkloadModel {
        let mut counts = AskCounts::default();
        for a in asks {
            counts.add(a);
        }
        WorkloadModel::from_counts(&counts, coverage_percent)
    }

    /// [`WorkloadModel::from_asks`] of the asks `counts` counts.
    pub(crate) fn from_counts(counts: &AskCounts, coverage_percent: u32) -> WorkloadModel {
        let total: u64 = counts.by_kind.values().sum();
        // The ranking below, not the map's order, decides the model.
        let mut ranked: Vec<(AskKind, u64)> = counts.by_kind.iter().map(|(k, n)| (*k, *n)).collect();
        ranked.sort_unstable_by_key(|&(key, n)| Reverse((n, key)));
        let total_f = total as f64;
        let wanted = f64::from(coverage_percent) * total_f / 100.0;
        let mut covered = 0.0;
        let mut kept = 0;
        while covered < wanted && kept < ranked.len() {
            covered += ranked[kept].1 as f64;
            kept += 1;
        }
        // The reference divides by the total first and then renormalises by the covered share;
        // the same two steps keep the weights bit for bit.
        let renormalise = kept < ranked.len();
        let shapes = ranked[..kept]
            .iter()
            .map(|&((cpu_milli, gpu_milli, gpu_count, models), n)| {
                let mut weight = n as f64 / total_f;
                if renormalise {
                    weight /= covered / total_f;
                }
                TypicalShape { cpu_milli, gpu_count, gpu_milli, models, weight }
            })
            .collect();
        WorkloadModel::new(shapes)
    }

    /// A model from typical asks given directly.
    pub fn new(shapes: Vec<TypicalShape>) -> WorkloadModel {
        let mut cpu_steps: Vec<u64> = shapes.iter().map(|s| s.cpu_milli).collect();
        cpu_steps.sort_unstable();
        cpu_steps.dedup();
        WorkloadModel { shapes, cpu_steps }
    }

    pub fn shapes(&self) -> &[TypicalShape] {
        &self.shapes
    }

    /// How many typical CPU asks fit in `cpu_milli_free`: all a node's fragmentation needs
    /// to know of its CPU.
    pub(super) fn cpu_step(&self, cpu_milli_free: u64) -> u16 {
        self.cpu_steps.partition_point(|&c| c <= cpu_milli_free) as u16
    }

    /// The node's fragmentation (see the module docs).
    pub fn node_frag(&self, node: &NodeRoom) -> f64 {
        self.breakdown(node).fragmented()
    }

    /// The node's free GPU thousandths by category (see [`FragBreakdown`]).
    pub fn breakdown(&self, node: &NodeRoom) -> FragBreakdown {
        let mut out = FragBreakdown::default();
        let free = node.gpu_free();
        let left: u64 = free.iter().map(|&f| u64::from(f)).sum();
        for t in &self.shapes {
            let cpu_ok = node.cpu_milli_free >= t.cpu_milli;
            let category = if t.gpu_milli == 0 {
                if cpu_ok { XL_CPU_ONLY_FITS } else { XR_CPU_ONLY_LACKS_CPU }
            } else if !t.models.admits(node.model) {
                NO_ACCESS
            } else {
                let holding = free.iter().filter(|&&f| f >= t.gpu_milli).count();
                match (holding >= usize::from(t.gpu_count), cpu_ok) {
                    (true, true) => Q3_SATISFIED,
                    (true, false) => Q4_LACK_CPU,
                    (false, true) => Q2_LACK_GPU,
                    (false, false) => Q1_LACK_BOTH,
                }
            };
            if category == Q3_SATISFIED {
                let too_small: u64 = free.iter().filter(|&&f| f < t.gpu_milli).map(|&f| u64::from(f)).sum();
                out.0[Q2_LACK_GPU] += t.weight * too_small as f64;
                out.0[Q3_SATISFIED] += t.weight * (left - too_small) as f64;
            } else {
                out.0[category] += t.weight * left as f64;
            }
        }
        out
    }
}
