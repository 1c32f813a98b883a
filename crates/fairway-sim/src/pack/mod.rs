//! The packing benchmark of FGD (Weng et al., ATC'23), run the way its reference simulator
//! (`hkust-adsl/kubernetes-scheduler-simulator`) runs it:
//!
//! 1. Pods are sorted by name and shuffled with the seed.
//! 2. The workload is resampled to `target_percent` of the cluster's GPU capacity: random
//!    pods (with replacement, from the list sorted by name) are appended while the next one's
//!    per-GPU share still fits under the target (the reference's test), or random pods are
//!    removed while the total is above it.
//! 3. Nodes get a random rank (the reference prefixes each name with a random permutation
//!    and breaks score ties by name).
//! 4. Pods arrive one by one and never leave; each is placed by the policy or fails.
//! 5. After each arrival the GPU allocation ratio (allocated GPU thousandths over all) and
//!    the fragmentation ratio (fragmented free thousandths over all free, against the
//!    typical pods of the whole list covering 95% of it) are recorded against the arrived
//!    load (GPU thousandths asked so far over all). The curve's value at load `k`% is the
//!    mean over arrivals whose load rounds to `k` (half to even), or, where none does, to
//!    `k − 1 ..= k + 1`, each value rounded to hundredths as the reference logs them.
//!
//! Every run draws from `ChaCha8Rng::seed_from_u64(seed)` in that order: the shuffle, the
//! resampling, the node ranks, then one 64-bit word per pod (the `random` policy's draws).

mod report;

use std::collections::BTreeMap;
use std::time::Instant;

use fairway_core::GpuModel;
use fairway_core::packing::{Ask, AskKind, ModelSet, NodeRoom, PackPolicy, Packer, WorkloadModel};
use rand::seq::SliceRandom;
use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

pub use report::{write_csv, write_svg, write_table};

use crate::workload::{PackNodeRow, PackPodRow};

/// Share of the pods (by count) the typical pods must cover, as in the paper.
pub const TYPICAL_COVERAGE_PERCENT: u32 = 95;
/// Seeds the published figures use: 42 to 51.
pub const PUBLISHED_FIRST_SEED: u64 = 42;
/// Most seeds one experiment may run.
pub const SEEDS_MAX: u32 = 1000;
/// Highest resampling target, in percent of the cluster's GPU capacity.
pub const TARGET_PERCENT_MAX: u32 = 1000;

/// Why the inputs cannot be packed.
#[derive(Debug, thiserror::Error)]
pub enum PackInputError {
    #[error("nodes: the list has no node with GPUs")]
    NoGpus,
    #[error("pods: the list has no pod asking for GPUs (resampling to a share of GPU capacity needs some)")]
    NoGpuPods,
    #[error("pods: {name}: {source}")]
    Pod { name: String, source: fairway_core::packing::ShapeError },
    #[error("nodes: {name}: {source}")]
    Node { name: String, source: fairway_core::packing::ShapeError },
    #[error("GPU models: more than {} distinct models in the node and pod lists", ModelSet::MODELS_MAX)]
    TooManyModels,
    #[error("target_percent: must be 1–{TARGET_PERCENT_MAX}, got {0}")]
    Target(u32),
    #[error("seeds: must be 1–{SEEDS_MAX}, got {0}")]
    Seeds(u32),
    #[error("policies: none given")]
    NoPolicy,
}

/// The node and pod lists, converted to the core's types.
pub struct PackInput {
    /// Nodes sorted by name.
    rooms: Vec<NodeRoom>,
    /// Pods sorted by name.
    asks: Vec<Ask>,
    model: WorkloadModel,
    gpus_total: u64,
}

impl PackInput {
    pub fn new(mut nodes: Vec<PackNodeRow>, mut pods: Vec<PackPodRow>) -> Result<PackInput, PackInputError> {
        nodes.sort_by(|a, b| a.name.cmp(&b.name));
        pods.sort_by(|a, b| a.name.cmp(&b.name));
        let mut models: BTreeMap<String, GpuModel> = BTreeMap::new();
        let mut intern = |name: &str| -> Result<GpuModel, PackInputError> {
            let next = models.len();
            if next >= usize::from(ModelSet::MODELS_MAX) && !models.contains_key(name) {
                return Err(PackInputError::TooManyModels);
            }
            Ok(*models.entry(name.to_owned()).or_insert(GpuModel(next as u16)))
        };
        let mut rooms = Vec::with_capacity(nodes.len());
        for n in &nodes {
            let model = n.model.as_deref().map(&mut intern).transpose()?;
            let room = NodeRoom::new(n.cpu_milli, n.memory_mib, n.gpus as usize, model)
                .map_err(|source| PackInputError::Node { name: n.name.clone(), source })?;
            rooms.push(room);
        }
        let mut asks = Vec::with_capacity(pods.len());
        for p in &pods {
            let ids = p.gpu_models.iter().map(|m| intern(m)).collect::<Result<Vec<_>, _>>()?;
            let models = ModelSet::of(ids).ok_or(PackInputError::TooManyModels)?;
            let ask = Ask::new(p.cpu_milli, p.memory_mib, p.num_gpu, p.gpu_milli, models)
                .map_err(|source| PackInputError::Pod { name: p.name.clone(), source })?;
            asks.push(ask);
        }
        let gpus_total: u64 = rooms.iter().map(|r| r.gpus() as u64).sum();
        if gpus_total == 0 {
            return Err(PackInputError::NoGpus);
        }
        if asks.iter().all(|a| a.gpu_count == 0) {
            return Err(PackInputError::NoGpuPods);
        }
        let model = WorkloadModel::from_asks(&asks, TYPICAL_COVERAGE_PERCENT);
        Ok(PackInput { rooms, asks, model, gpus_total })
    }

    pub fn nodes(&self) -> usize {
        self.rooms.len()
    }
    pub fn pods(&self) -> usize {
        self.asks.len()
    }
    pub fn gpus_total(&self) -> u64 {
        self.gpus_total
    }
    pub fn typical_shapes(&self) -> usize {
        self.model.shapes().len()
    }
    /// GPU thousandths the list asks for, in percent of the cluster's.
    pub fn asked_percent(&self) -> f64 {
        let asked: u64 = self.asks.iter().map(Ask::gpu_milli_total).sum();
        asked as f64 / (self.gpus_total * 1000) as f64 * 100.0
    }
}

/// What to run.
#[derive(Clone, Debug)]
pub struct PackConfig {
    pub policies: Vec<PackPolicy>,
    pub seeds: Vec<u64>,
    pub target_percent: u32,
    /// Threads to run on (runs are independent; results do not depend on it).
    pub threads: usize,
}

impl PackConfig {
    /// All policies, the published seeds 42–51, 130%.
    pub fn published() -> PackConfig {
        PackConfig {
            policies: PackPolicy::ALL.to_vec(),
            seeds: (PUBLISHED_FIRST_SEED..PUBLISHED_FIRST_SEED + 10).collect(),
            target_percent: 130,
            threads: 1,
        }
    }

    fn check(&self) -> Result<(), PackInputError> {
        if self.policies.is_empty() {
            return Err(PackInputError::NoPolicy);
        }
        if self.seeds.is_empty() || self.seeds.len() > SEEDS_MAX as usize {
            return Err(PackInputError::Seeds(self.seeds.len() as u32));
        }
        if self.target_percent == 0 || self.target_percent > TARGET_PERCENT_MAX {
            return Err(PackInputError::Target(self.target_percent));
        }
        Ok(())
    }
}

/// One policy on one seed.
#[derive(Clone, Debug, Serialize)]
pub struct PackRun {
    pub policy: String,
    pub seed: u64,
    /// Pods that arrived (after resampling).
    pub pods: usize,
    pub placed: usize,
    pub failed: usize,
    /// GPU thousandths of the pods that failed.
    pub failed_gpu_milli: u64,
    /// Failed pods by kind: `cpu-only`, `share`, `1-gpu`, `2-gpu`, ...
    pub failed_by_kind: BTreeMap<String, usize>,
    /// `curve[k]`: the point at arrived load `k`% (`k` = 0 ..= target); `None` where no
    /// arrival came near.
    pub curve: Vec<Option<CurvePoint>>,
    /// The GPU allocation ratio after the last pod, in percent.
    pub final_alloc_percent: f64,
    /// Node scores computed (work, for benchmarks).
    pub scored: u64,
    /// Wall time of the run (not serialised: the report is deterministic).
    #[serde(skip)]
    pub seconds: f64,
}

/// The curves' values at one arrived load.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct CurvePoint {
    /// GPU thousandths allocated over all, in percent.
    pub alloc_percent: f64,
    /// Fragmented free GPU thousandths over all free ones, in percent.
    pub frag_percent: f64,
}

/// A whole experiment: every policy on every seed.
#[derive(Clone, Debug, Serialize)]
pub struct PackReport {
    pub nodes: usize,
    pub gpus: u64,
    pub pods_in_list: usize,
    pub asked_percent: f64,
    pub typical_shapes: usize,
    pub target_percent: u32,
    pub seeds: Vec<u64>,
    /// Runs by policy (in the order asked), then seed.
    pub runs: Vec<PackRun>,
    /// Wall time of the whole experiment (not serialised: the report is deterministic).
    #[serde(skip)]
    pub seconds: f64,
}

impl PackReport {
    /// Runs of `policy`, by seed.
    pub fn runs_of<'a>(&'a self, policy: &'a str) -> impl Iterator<Item = &'a PackRun> + 'a {
        self.runs.iter().filter(move |r| r.policy == policy)
    }
    /// The policies, in the order run.
    pub fn policies(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        for r in &self.runs {
            if !out.contains(&r.policy.as_str()) {
                out.push(&r.policy);
            }
        }
        out
    }
    /// `policy`'s curve at load `k`%, one value per seed that has a point there.
    pub fn values_at(&self, policy: &str, k: usize, value: impl Fn(&CurvePoint) -> f64) -> Vec<f64> {
        self.runs_of(policy).filter_map(|r| r.curve.get(k).copied().flatten().map(|p| value(&p))).collect()
    }
    /// Mean over seeds of `policy`'s curve at load `k`%, where every seed has a point.
    pub fn mean_at(&self, policy: &str, k: usize, value: impl Fn(&CurvePoint) -> f64) -> Option<f64> {
        let points = self.values_at(policy, k, value);
        (!points.is_empty() && points.len() == self.runs_of(policy).count())
            .then(|| points.iter().sum::<f64>() / points.len() as f64)
    }
}

/// Runs every policy on every seed.
pub fn run(input: &PackInput, config: &PackConfig) -> Result<PackReport, PackInputError> {
    config.check()?;
    let started = Instant::now();
    let jobs: Vec<(PackPolicy, u64)> =
        config.policies.iter().flat_map(|&p| config.seeds.iter().map(move |&s| (p, s))).collect();
    let threads = config.threads.clamp(1, jobs.len());
    let mut runs: Vec<Option<PackRun>> = vec![None; jobs.len()];
    std::thread::scope(|scope| {
        let chunks: Vec<_> = (0..threads)
            .map(|t| {
                let jobs = &jobs;
                scope.spawn(move || {
                    // Interleaved, so that slow policies spread over the threads.
                    (t..jobs.len())
                        .step_by(threads)
                        .map(|i| (i, run_one(input, jobs[i].0, jobs[i].1, config.target_percent)))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        for handle in chunks {
            for (i, r) in handle.join().expect("a packing run panicked") {
                runs[i] = Some(r);
            }
        }
    });
    Ok(PackReport {
        nodes: input.nodes(),
        gpus: input.gpus_total,
        pods_in_list: input.pods(),
        asked_percent: input.asked_percent(),
        typical_shapes: input.typical_shapes(),
        target_percent: config.target_percent,
        seeds: config.seeds.clone(),
        runs: runs.into_iter().map(|r| r.expect("every run finished")).collect(),
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// Steps 1–3: the pods in arrival order and the nodes' ranks for one seed.
pub fn arrivals(input: &PackInput, rng: &mut ChaCha8Rng, target_percent: u32) -> (Vec<Ask>, Vec<u32>) {
    let mut pods = input.asks.clone();
    pods.shuffle(rng);
    let target_milli = f64::from(target_percent) / 100.0 * (input.gpus_total * 1000) as f64;
    let mut total: u64 = pods.iter().map(Ask::gpu_milli_total).sum();
    if (total as f64) == target_milli {
        // Exactly on target: nothing to resample (and nothing drawn).
    } else if (total as f64) > target_milli {
        while (total as f64) > target_milli && !pods.is_empty() {
            let i = rng.random_range(0..pods.len());
            total -= pods.remove(i).gpu_milli_total();
        }
    } else {
        loop {
            let ask = input.asks[rng.random_range(0..input.asks.len())];
            // The reference compares the next pod's per-GPU share, not its total, here.
            if (total + u64::from(ask.gpu_milli)) as f64 > target_milli {
                break;
            }
            total += ask.gpu_milli_total();
            pods.push(ask);
        }
    }
    let mut ranks: Vec<u32> = (0..input.rooms.len() as u32).collect();
    ranks.shuffle(rng);
    (pods, ranks)
}

/// One policy on one seed (steps 1–5).
pub fn run_one(input: &PackInput, policy: PackPolicy, seed: u64, target_percent: u32) -> PackRun {
    let started = Instant::now();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let (pods, ranks) = arrivals(input, &mut rng, target_percent);
    let mut packer = Packer::new(policy, input.rooms.clone(), ranks, Some(input.model.clone()))
        .expect("ranks are a permutation and the model is given");
    let capacity_milli = input.gpus_total * 1000;
    let mut curve = CurveBuckets::new(target_percent);
    let mut arrived: u64 = 0;
    let mut allocated: u64 = 0;
    let (mut placed, mut failed_gpu_milli) = (0, 0);
    let mut failed_by_kind: BTreeMap<String, usize> = BTreeMap::new();
    curve.record(arrived, allocated, packer.frag_total(), capacity_milli, capacity_milli);
    for ask in &pods {
        arrived += ask.gpu_milli_total();
        match packer.place(ask, rng.next_u64()) {
            Some(_) => {
                placed += 1;
                allocated += ask.gpu_milli_total();
            }
            None => {
                failed_gpu_milli += ask.gpu_milli_total();
                *failed_by_kind.entry(kind_name(ask)).or_default() += 1;
            }
        }
        curve.record(arrived, allocated, packer.frag_total(), capacity_milli - allocated, capacity_milli);
    }
    PackRun {
        policy: policy.name().to_owned(),
        seed,
        pods: pods.len(),
        placed,
        failed: pods.len() - placed,
        failed_gpu_milli,
        failed_by_kind,
        curve: curve.finish(),
        final_alloc_percent: allocated as f64 / capacity_milli as f64 * 100.0,
        scored: packer.stats().scored,
        seconds: started.elapsed().as_secs_f64(),
    }
}

fn kind_name(ask: &Ask) -> String {
    match ask.kind() {
        AskKind::CpuOnly => "cpu-only".to_owned(),
        AskKind::Share => "share".to_owned(),
        AskKind::Whole(k) => format!("{k}-gpu"),
    }
}

/// Sums per whole percent of arrived load (step 5).
struct CurveBuckets {
    /// `(count, Σ alloc %, Σ frag %)` per rounded load percent, 0 ..= target + 1.
    buckets: Vec<(u64, f64, f64)>,
}

impl CurveBuckets {
    fn new(target_percent: u32) -> Self {
        CurveBuckets { buckets: vec![(0, 0.0, 0.0); target_percent as usize + 2] }
    }

    fn record(&mut self, arrived: u64, allocated: u64, frag: f64, idle: u64, capacity: u64) {
        let load = round_half_even(arrived as f64 / capacity as f64 * 100.0);
        let Some(b) = usize::try_from(load as i64).ok().and_then(|i| self.buckets.get_mut(i)) else { return };
        let alloc = round2(allocated as f64 / capacity as f64 * 100.0);
        let frag = if idle == 0 { 0.0 } else { round2(frag / idle as f64 * 100.0) };
        b.0 += 1;
        b.1 += alloc;
        b.2 += frag;
    }

    fn finish(self) -> Vec<Option<CurvePoint>> {
        let last = self.buckets.len() - 2;
        (0..=last)
            .map(|k| {
                let near = if self.buckets[k].0 > 0 { k..=k } else { k.saturating_sub(1)..=k + 1 };
                let (n, a, f) = self.buckets[near].iter().fold((0, 0.0, 0.0), |s, b| (s.0 + b.0, s.1 + b.1, s.2 + b.2));
                (n > 0).then(|| CurvePoint { alloc_percent: round2(a / n as f64), frag_percent: round2(f / n as f64) })
            })
            .collect()
    }
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// Rounds to the nearest integer, halves to even (Python's `round`).
fn round_half_even(x: f64) -> f64 {
    let r = x.round();
    if (x - x.trunc()).abs() == 0.5 { 2.0 * (x / 2.0).round() } else { r }
}

#[cfg(test)]
mod tests;
