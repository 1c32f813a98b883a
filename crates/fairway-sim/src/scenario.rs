//! Scenario files: the cluster, priority classes, quotas, workload, cost model and the
//! policies to compare. This is a wire format: it converts explicitly into core types.
//!
//! ```yaml
//! name: article-8xA100
//! seed: 42
//! cluster:
//!   nodes: [{ name: a100, count: 1, gpus: 8, gpu_model: A100, cpu_millis: 96000, memory_mib: 1048576 }]
//! priority_classes: [{ name: nightly, value: 500 }]     # added to critical/high/medium/low
//! preemption_protection:                                # per tier (preemption rule 1)
//!   low: { min_run_seconds: 300, preemptions_per_hour_max: 3 }
//!   high: { overrides_protection: true }                # may preempt protected runs
//!   medium: { preemption_delay_seconds: 60 }            # waits a minute before preempting
//! quotas: [{ project: vision, gpus_max: 6 }]            # hard caps (ResourceQuota)
//! cohorts:                                              # nominal quotas lent within a cohort
//!   - name: lab
//!     members:
//!       - { project: vision, nominal: { gpus: 4 }, borrowing_limit: { gpus: 2 } }
//!       - { project: speech, nominal: { gpus: 4 }, lending_limit: { gpus: 1 } }
//! workload: { source: { kind: synthetic, ... }, transforms: [...] }   # or `jobs:` (native specs)
//! job_defaults: { checkpoint_interval_seconds: 1800, grace_seconds: 30 }
//! cost_model:
//!   restart_overhead_seconds: 60
//!   image_pull_seconds: 180                             # the image model (crate::images):
//!   node_image_cache_max: 8                             #   pulls, node caches, and
//!   prepulled_images: [image-0]                         #   images warm on every node
//! policies:
//!   - fairway                                           # a preset: fifo, priority, fairway
//!   - name: fair                                        # or a custom policy
//!     order: priority                                   # fifo, priority, or sjf-oracle: priority,
//!                                                       # then the shortest true duration first
//!     preemption: true
//!     fair_share:                                       # fair sharing inside a priority
//!       half_life_hours: 24                             # 0: only current holdings count; a day
//!                                                       # when left out; or half_life_seconds
//!       weights: [{ project: vision, weight: 2 }]       # 1 unless named
//!     nominal_quotas: hard_caps                         # cohort (default), hard_caps, ignore
//!     cohorts: [...]                                    # this policy's own, as `cohorts:`
//!     reservations: { count: 1, default_runtime_hours: 4 }   # EASY backfill (plan.rs); or
//!                                                       # default_runtime_seconds; an hour if neither
//!     image_locality_permille: 0                        # 0: placement ignores images
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use fairway_core::{
    AccountId, Config, FairSharing, GpuModel, ImageId, JobId, JobSpec, Limits, NodeId, NodeSpec, NominalQuota, Policy,
    PreemptionPolicy, QueueOrder, Quota, ResourceKind, Resources, ScoringPolicy,
};
use fairway_spec::{
    AccountKind, CohortDoc, Interner, Origin, PreemptionPolicyDoc, PriorityClassDoc, PriorityClasses, PriorityRef,
    resolve_cohorts,
};
use serde::Deserialize;

use crate::engine::{CheckLevel, CostModel, EngineConfig, SimJob};
use crate::images::ImagePulls;
use crate::workload::{LoadReport, TraceJob, WorkloadSpec, load_openb_nodes, load_philly_vc_quotas};

/// Largest scenario file read, in bytes.
pub const SCENARIO_BYTES_MAX: usize = 4 << 20;

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScenarioFile {
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub seed: u64,
    pub cluster: ClusterSpec,
    #[serde(default)]
    pub priority_classes: Vec<ClassSpec>,
    /// Per tier: how long a run is safe from preemption, and how often a job may be
    /// preempted in an hour (preemption rule 1).
    #[serde(default)]
    pub preemption_protection: BTreeMap<String, ProtectionSpec>,
    #[serde(default)]
    pub quotas: Vec<QuotaSpec>,
    #[serde(default)]
    pub quotas_from_philly_vc: Option<PhillyVcQuotas>,
    /// Nominal quotas lent within cohorts (see `docs/cohorts.md`).
    #[serde(default)]
    pub cohorts: Vec<CohortDoc>,
    #[serde(default)]
    pub workload: Option<WorkloadSpec>,
    /// Native job specs, each with `submit_seconds` and `duration_seconds` added.
    #[serde(default)]
    pub jobs: Vec<serde_json::Value>,
    #[serde(default)]
    pub job_defaults: JobDefaults,
    #[serde(default)]
    pub cost_model: CostSpec,
    #[serde(default = "default_policies")]
    pub policies: Vec<PolicySpec>,
    /// The placement policy of `docs/placement.md` every policy places one-replica jobs by
    /// (`random`, `dot-product`, `gpu-clustering`, `gpu-packing`, `best-fit`, `fgd`,
    /// `fairway`), unless a custom policy names its own; `core`: the core's own scoring (a
    /// policy's `scoring`, best-fit unless it says); none: `fairway`, the default.
    #[serde(default)]
    pub placement: Option<String>,
    #[serde(default)]
    pub limits: LimitsSpec,
    #[serde(default)]
    pub horizon_seconds: Option<u64>,
}

fn default_policies() -> Vec<PolicySpec> {
    ["fifo", "priority", "fairway"].into_iter().map(|p| PolicySpec::Preset(p.to_string())).collect()
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterSpec {
    #[serde(default)]
    pub nodes: Vec<NodeGroup>,
    /// Nodes from the Alibaba openb node list.
    #[serde(default)]
    pub openb_nodes: Option<PathBuf>,
    /// Keep only the first N nodes (as `--nodes N`, which wins over it).
    #[serde(default)]
    pub nodes_max: Option<u32>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeGroup {
    pub name: String,
    #[serde(default = "one")]
    pub count: u32,
    pub gpus: u32,
    pub gpu_model: String,
    #[serde(default)]
    pub cpu_millis: u64,
    #[serde(default)]
    pub memory_mib: u64,
}

fn one() -> u32 {
    1
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClassSpec {
    pub name: String,
    pub value: i32,
    #[serde(default)]
    pub global_default: bool,
    #[serde(default)]
    pub preemption_policy: Option<String>,
    #[serde(default)]
    pub description: String,
}

#[derive(Clone, Copy, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProtectionSpec {
    #[serde(default)]
    pub min_run_seconds: u64,
    #[serde(default)]
    pub preemptions_per_hour_max: Option<u32>,
    /// The tier's jobs may preempt runs that rule 1 protects.
    #[serde(default)]
    pub overrides_protection: bool,
    /// The tier's jobs wait this long for free GPUs before they preempt.
    #[serde(default)]
    pub preemption_delay_seconds: u64,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuotaSpec {
    #[serde(default)]
    pub project: Option<String>,
    #[serde(default)]
    pub user: Option<String>,
    #[serde(default)]
    pub gpus_max: Option<u32>,
    #[serde(default)]
    pub cpu_millis_max: Option<u64>,
    #[serde(default)]
    pub memory_mib_max: Option<u64>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PhillyVcQuotas {
    pub path: PathBuf,
    #[serde(default = "eight")]
    pub gpus_per_node: u32,
    /// Multiply each VC's quota (e.g. 0.1 when the cluster is shrunk to a tenth).
    #[serde(default = "unit")]
    pub scale: f64,
    /// `hard` (default): each VC's quota is a hard cap. `nominal`: a nominal quota in one
    /// cohort of all VCs (named by `cohort`), lent while idle.
    #[serde(default, rename = "as")]
    pub as_: Option<String>,
    #[serde(default)]
    pub cohort: Option<String>,
}

fn eight() -> u32 {
    8
}
fn unit() -> f64 {
    1.0
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobDefaults {
    /// Tier of jobs whose trace gives none (default: the global default class).
    #[serde(default)]
    pub tier: Option<String>,
    #[serde(default)]
    pub checkpoint_interval_seconds: Option<u64>,
    #[serde(default = "thirty")]
    pub grace_seconds: u64,
    #[serde(default = "yes")]
    pub preemptible: bool,
}

impl Default for JobDefaults {
    fn default() -> JobDefaults {
        JobDefaults { tier: None, checkpoint_interval_seconds: None, grace_seconds: 30, preemptible: true }
    }
}

fn thirty() -> u64 {
    30
}
fn yes() -> bool {
    true
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CostSpec {
    #[serde(default = "sixty")]
    pub restart_overhead_seconds: u64,
    #[serde(default)]
    pub checkpoint_on_preempt: bool,
    /// The image model (see `crate::images`): how long a node takes to pull an image it
    /// lacks. Unset: images cost nothing (and `restart_overhead_seconds` covers them).
    #[serde(default)]
    pub image_pull_seconds: Option<u64>,
    /// Images a node keeps besides the pre-pulled ones (default 8).
    #[serde(default)]
    pub node_image_cache_max: Option<u32>,
    /// Images on every node from the start, never removed.
    #[serde(default)]
    pub prepulled_images: Vec<String>,
}

impl Default for CostSpec {
    fn default() -> CostSpec {
        CostSpec {
            restart_overhead_seconds: 60,
            checkpoint_on_preempt: false,
            image_pull_seconds: None,
            node_image_cache_max: None,
            prepulled_images: Vec::new(),
        }
    }
}

/// A node's image cache unless the scenario says otherwise.
pub const NODE_IMAGE_CACHE_DEFAULT: u32 = 8;
/// The longest image pull accepted: an hour.
pub const IMAGE_PULL_SECONDS_MAX: u64 = 3_600;

fn sixty() -> u64 {
    60
}

#[derive(Clone, Debug)]
pub enum PolicySpec {
    /// `fifo`, `priority` or `fairway`.
    Preset(String),
    Custom(Box<CustomPolicy>),
}

/// A name is a preset, a mapping a custom policy. Not `#[serde(untagged)]`: that reports
/// any mistake inside a custom policy as "did not match any variant", without the field.
impl<'de> Deserialize<'de> for PolicySpec {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct PolicyVisitor;
        impl<'de> serde::de::Visitor<'de> for PolicyVisitor {
            type Value = PolicySpec;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a preset's name (fifo, priority, fairway) or a custom policy (a mapping with name, order, preemption)")
            }
            fn visit_str<E: serde::de::Error>(self, name: &str) -> Result<PolicySpec, E> {
                Ok(PolicySpec::Preset(name.to_string()))
            }
            fn visit_map<M: serde::de::MapAccess<'de>>(self, map: M) -> Result<PolicySpec, M::Error> {
                let custom = CustomPolicy::deserialize(serde::de::value::MapAccessDeserializer::new(map))?;
                Ok(PolicySpec::Custom(Box::new(custom)))
            }
        }
        deserializer.deserialize_any(PolicyVisitor)
    }
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CustomPolicy {
    pub name: String,
    /// `fifo` or `priority`.
    pub order: String,
    pub preemption: bool,
    #[serde(default = "yes")]
    pub backfill: bool,
    #[serde(default = "best_fit")]
    pub scoring: String,
    /// Quotas for this policy's run instead of the scenario's (e.g. GPUs set aside by caps,
    /// the usual practice before a priority-aware scheduler).
    #[serde(default)]
    pub quotas: Option<Vec<QuotaSpec>>,
    /// Fair sharing between tenants inside one priority (needs `backfill`).
    #[serde(default)]
    pub fair_share: Option<FairShareSpec>,
    /// Cohorts for this policy's run instead of the scenario's.
    #[serde(default)]
    pub cohorts: Option<Vec<CohortDoc>>,
    /// Reservations with backfill (needs `backfill`): the highest-ranked jobs that cannot
    /// start reserve the GPUs they need (see the core's `plan.rs`).
    #[serde(default)]
    pub reservations: Option<fairway_spec::ReservationsDoc>,
    /// Its placement policy, instead of the scenario's `placement`.
    #[serde(default)]
    pub placement: Option<String>,
    /// Image locality for this policy's placement, in thousandths of a node's capacity (see
    /// `Policy::image_locality_permille`; default the presets' 100; 0: off).
    #[serde(default)]
    pub image_locality_permille: Option<u32>,
    /// What the scenario's nominal quotas (its cohorts) are to this policy: `cohort`
    /// (default: lent and borrowed within each cohort), `hard_caps` (each member's nominal
    /// quota is its hard cap, nothing is lent: the article's ResourceQuota set-aside) or
    /// `ignore`.
    #[serde(default)]
    pub nominal_quotas: Option<String>,
}

/// `fair_share:` of a custom policy.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FairShareSpec {
    /// Past usage counts half as much this long after (0: only current holdings; a day
    /// when left out), in hours or in seconds (`fairway_spec::half_life_ms`), as in the
    /// server's configuration.
    #[serde(default)]
    pub half_life_hours: Option<fairway_spec::Hours>,
    #[serde(default)]
    pub half_life_seconds: Option<u64>,
    /// Weights (1 unless named), by project or user name.
    #[serde(default)]
    pub weights: Vec<WeightSpec>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WeightSpec {
    #[serde(default)]
    pub project: Option<String>,
    #[serde(default)]
    pub user: Option<String>,
    pub weight: u32,
}

fn best_fit() -> String {
    "best-fit".into()
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsSpec {
    pub victims_per_preemption_max: Option<u32>,
    pub preemption_attempts_per_cycle_max: Option<u32>,
    pub victims_per_cycle_max: Option<u32>,
    pub starts_per_cycle_max: Option<u32>,
    pub candidate_nodes_scored_max: Option<u32>,
}

/// A scenario error, naming the field and the reason.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    // The path is not in the message: callers name the scenario file once, as for
    // `Invalid`, whose field is inside it.
    #[error("cannot read")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("larger than {SCENARIO_BYTES_MAX} bytes")]
    TooLarge { path: PathBuf },
    #[error("{message}")]
    Parse { path: PathBuf, message: String },
    #[error("{field}: {reason}")]
    Invalid { field: String, reason: String },
    #[error("workload")]
    Workload(#[from] crate::workload::WorkloadError),
    /// The job-spec errors are the message; they are not repeated as a source.
    #[error("{0}")]
    Spec(fairway_spec::SpecErrors),
}

/// A number as a user would write it: `1e300`, not three hundred digits.
fn shown(x: f64) -> String {
    if x.abs() >= 1e9 { format!("{x:e}") } else { format!("{x}") }
}

fn invalid(field: impl Into<String>, reason: impl Into<String>) -> ScenarioError {
    ScenarioError::Invalid { field: field.into(), reason: reason.into() }
}

/// Overrides from the command line.
#[derive(Clone, Debug, Default)]
pub struct Overrides {
    pub seed: Option<u64>,
    /// Keep only the first N nodes.
    pub nodes: Option<u32>,
    /// Divide submit times by this factor (after the scenario's own transforms).
    pub time_compression: Option<f64>,
    pub max_jobs: Option<usize>,
    /// Only these policies, by name.
    pub policies: Option<Vec<String>>,
    /// Replace the trace source's path.
    pub trace_path: Option<PathBuf>,
}

/// One policy to run, with the quotas it runs under.
#[derive(Clone, Debug)]
pub struct SimPolicy {
    pub name: String,
    pub policy: Policy,
    pub quotas: Vec<(AccountId, Quota)>,
    /// Fair-share weights (accounts not named weigh 1).
    pub weights: Vec<(AccountId, u32)>,
    /// Projects' places in cohorts.
    pub nominals: Vec<(AccountId, NominalQuota)>,
}

/// A scenario resolved into core types, ready to simulate.
#[derive(Clone, Debug)]
pub struct Scenario {
    pub name: String,
    pub description: String,
    pub seed: u64,
    pub nodes: Vec<NodeSpec>,
    pub jobs: Vec<SimJob>,
    pub policies: Vec<SimPolicy>,
    pub limits: Limits,
    pub cost: CostModel,
    pub horizon_ms: Option<u64>,
    pub load_report: LoadReport,
    /// The image model, if the cost model sets `image_pull_seconds`.
    pub images: Option<ImagePulls>,
}

impl Scenario {
    pub fn config_for(&self, policy: &Policy) -> Config {
        Config { policy: policy.clone(), limits: self.limits.clone() }
    }

    /// How the engine runs one of the scenario's policies: its core config, the cost
    /// model and horizon, and the policy's weights and places in cohorts.
    pub fn engine_config(&self, policy: &SimPolicy, check: CheckLevel) -> EngineConfig {
        EngineConfig {
            core: self.config_for(&policy.policy),
            cost: self.cost,
            check,
            horizon_ms: self.horizon_ms,
            weights: policy.weights.clone(),
            nominals: policy.nominals.clone(),
            eta_jobs_max: 0,
            images: self.images.clone(),
        }
    }
    pub fn capacity_gpus(&self) -> u32 {
        self.nodes.iter().map(|n| n.capacity.gpus).sum()
    }
}

/// Read and resolve a scenario file.
pub fn load(path: &Path, overrides: &Overrides) -> Result<Scenario, ScenarioError> {
    let bytes = std::fs::read(path).map_err(|source| ScenarioError::Io { path: path.into(), source })?;
    if bytes.len() > SCENARIO_BYTES_MAX {
        return Err(ScenarioError::TooLarge { path: path.into() });
    }
    let text = std::str::from_utf8(&bytes)
        .map_err(|e| ScenarioError::Parse { path: path.into(), message: format!("not UTF-8: {e}") })?;
    let file: ScenarioFile =
        fairway_spec::from_yaml(text).map_err(|message| ScenarioError::Parse { path: path.into(), message })?;
    let base_dir = path.parent().unwrap_or(Path::new("."));
    resolve(file, base_dir, overrides)
}

pub fn resolve(mut file: ScenarioFile, base_dir: &Path, overrides: &Overrides) -> Result<Scenario, ScenarioError> {
    let seed = overrides.seed.unwrap_or(file.seed);
    let mut names = Names::default();
    let classes = priority_classes(&file.priority_classes)?;
    let nodes = nodes(&file.cluster, base_dir, overrides.nodes.or(file.cluster.nodes_max), &mut names)?;
    let (quotas, nominals) = quotas(&file, base_dir, &mut names)?;
    let mut policies = policies(&file.policies, overrides.policies.as_deref(), &quotas, &nominals, &mut names)?;
    let placement =
        |name: &str, field: String| fairway_spec::placement_of(name, &field).map_err(|e| invalid(e.field, e.reason));
    let scenario_placement = file.placement.as_deref().map(|p| placement(p, "placement".into())).transpose()?;
    for p in &mut policies {
        let own = file.policies.iter().enumerate().find_map(|(i, spec)| match spec {
            PolicySpec::Custom(c) if c.name == p.name => c.placement.as_deref().map(|name| (i, name)),
            _ => None,
        });
        p.policy.packing = match own {
            Some((i, name)) => placement(name, format!("policies[{i}].placement"))?,
            // Neither names one: the presets' default, Fairway's own.
            None => scenario_placement.unwrap_or(Policy::fairway().packing),
        };
    }
    let trace_override = overrides.trace_path.clone().zip(file.workload.as_mut());
    if trace_override.is_some_and(|(path, workload)| !workload.source.set_path(path)) {
        return Err(invalid("--trace", "the scenario's workload is synthetic, not a trace file"));
    }
    let (trace_jobs, load_report) = match (&file.workload, file.jobs.is_empty()) {
        (Some(w), true) => w.load(base_dir, seed)?,
        (None, false) => native_jobs(&file.jobs)?,
        (Some(_), false) => return Err(invalid("jobs", "give either `workload` or `jobs`, not both")),
        (None, true) => return Err(invalid("workload", "a scenario needs `workload` or `jobs`")),
    };
    let mut trace_jobs = trace_jobs;
    if let Some(factor) = overrides.time_compression {
        if !(factor.is_finite() && factor > 0.0) {
            return Err(invalid("--time-compression", format!("must be a positive number, got {}", shown(factor))));
        }
        trace_jobs = crate::workload::compress_time(trace_jobs, factor);
    }
    if let Some(max) = overrides.max_jobs {
        trace_jobs.truncate(max);
    }
    for (tier, p) in &file.preemption_protection {
        if classes.resolve(tier).is_none() {
            return Err(invalid(format!("preemption_protection.{tier}"), unknown_tier(&classes, tier)));
        }
        if p.preemptions_per_hour_max == Some(0) {
            return Err(invalid(
                format!("preemption_protection.{tier}.preemptions_per_hour_max"),
                "must be at least 1 (to never preempt a tier, mark its jobs not preemptible)".to_owned(),
            ));
        }
        if p.preemption_delay_seconds > fairway_spec::PREEMPTION_DELAY_SECONDS_MAX {
            return Err(invalid(
                format!("preemption_protection.{tier}.preemption_delay_seconds"),
                format!(
                    "must be at most {} (a day), got {}",
                    fairway_spec::PREEMPTION_DELAY_SECONDS_MAX,
                    p.preemption_delay_seconds
                ),
            ));
        }
    }
    let jobs = sim_jobs(&trace_jobs, &file.job_defaults, &classes, &file.preemption_protection, &mut names)?;
    let images = image_model(&file.cost_model, &mut names)?;
    Ok(Scenario {
        name: file.name,
        description: file.description,
        seed,
        nodes,
        jobs,
        policies,
        limits: limits(&file.limits),
        cost: CostModel {
            restart_overhead_ms: file.cost_model.restart_overhead_seconds * 1000,
            checkpoint_on_preempt: file.cost_model.checkpoint_on_preempt,
        },
        horizon_ms: file.horizon_seconds.map(|s| s * 1000),
        load_report,
        images,
    })
}

/// The cost model's image fields, checked: `None` without `image_pull_seconds`.
fn image_model(cost: &CostSpec, names: &mut Names) -> Result<Option<ImagePulls>, ScenarioError> {
    let Some(pull_seconds) = cost.image_pull_seconds else {
        let stray = if cost.node_image_cache_max.is_some() {
            Some("node_image_cache_max")
        } else {
            (!cost.prepulled_images.is_empty()).then_some("prepulled_images")
        };
        return match stray {
            Some(field) => Err(invalid(
                format!("cost_model.{field}"),
                "needs cost_model.image_pull_seconds (the image model is off without it)",
            )),
            None => Ok(None),
        };
    };
    if !(1..=IMAGE_PULL_SECONDS_MAX).contains(&pull_seconds) {
        return Err(invalid(
            "cost_model.image_pull_seconds",
            format!("must be from 1 to {IMAGE_PULL_SECONDS_MAX} seconds, got {pull_seconds}"),
        ));
    }
    let node_cache_max = cost.node_image_cache_max.unwrap_or(NODE_IMAGE_CACHE_DEFAULT);
    if !(1..=crate::images::NODE_IMAGE_CACHE_MAX).contains(&node_cache_max) {
        return Err(invalid(
            "cost_model.node_image_cache_max",
            format!("must be from 1 to {}, got {node_cache_max}", crate::images::NODE_IMAGE_CACHE_MAX),
        ));
    }
    if cost.prepulled_images.len() > fairway_core::event::IMAGES_PER_NODE_MAX / 2 {
        return Err(invalid(
            "cost_model.prepulled_images",
            format!(
                "at most {} images, got {}",
                fairway_core::event::IMAGES_PER_NODE_MAX / 2,
                cost.prepulled_images.len()
            ),
        ));
    }
    let mut prepulled = Vec::with_capacity(cost.prepulled_images.len());
    for (i, name) in cost.prepulled_images.iter().enumerate() {
        let field = format!("cost_model.prepulled_images[{i}]");
        fairway_spec::check_image_reference(name).map_err(|reason| invalid(field.clone(), reason))?;
        prepulled.push(names.image(name, &field)?);
    }
    prepulled.sort_unstable();
    prepulled.dedup();
    Ok(Some(ImagePulls { pull_ms: pull_seconds * 1000, node_cache_max, prepulled }))
}

/// Names to core ids. Users and projects share the account id space, so each gets a prefix.
#[derive(Default)]
struct Names(Interner);

impl Names {
    fn project(&mut self, name: &str) -> Result<AccountId, ScenarioError> {
        self.0.account_of(AccountKind::Project, name).map_err(|e| invalid("accounts", e.to_string()))
    }
    fn user(&mut self, name: &str) -> Result<AccountId, ScenarioError> {
        self.0.account_of(AccountKind::User, name).map_err(|e| invalid("accounts", e.to_string()))
    }
    fn gpu_model(&mut self, name: &str) -> Result<GpuModel, ScenarioError> {
        self.0.gpu_model(name).map_err(|e| invalid("gpu_model", e.to_string()))
    }
    fn image(&mut self, name: &str, field: &str) -> Result<ImageId, ScenarioError> {
        self.0.image(name).map_err(|e| invalid(field, e.to_string()))
    }
    fn known_gpu_model(&self, name: &str) -> Option<GpuModel> {
        self.0.gpu_model_id(name)
    }
}

fn priority_classes(specs: &[ClassSpec]) -> Result<PriorityClasses, ScenarioError> {
    let mut classes = PriorityClasses::builtin();
    for (i, c) in specs.iter().enumerate() {
        let policy = match c.preemption_policy.as_deref() {
            None | Some("PreemptLowerPriority") => PreemptionPolicyDoc::PreemptLowerPriority,
            Some("Never") => PreemptionPolicyDoc::Never,
            Some(other) => {
                return Err(invalid(
                    format!("priority_classes[{i}].preemption_policy"),
                    format!("must be PreemptLowerPriority or Never, got {other:?}"),
                ));
            }
        };
        let doc = PriorityClassDoc {
            name: c.name.clone(),
            value: c.value,
            global_default: c.global_default,
            preemption_policy: policy,
            // Rule 1 is given per tier, built-in or not, by `preemption_protection`; a class
            // of the scenario has none of its own.
            protection: Default::default(),
            description: (!c.description.is_empty()).then(|| c.description.clone()),
            origin: Origin::default(),
        };
        classes.register(&doc).map_err(|e| invalid(format!("priority_classes[{i}]"), e.reason))?;
    }
    Ok(classes)
}

fn nodes(
    cluster: &ClusterSpec,
    base_dir: &Path,
    keep: Option<u32>,
    names: &mut Names,
) -> Result<Vec<NodeSpec>, ScenarioError> {
    let mut out = Vec::new();
    for (i, group) in cluster.nodes.iter().enumerate() {
        if group.gpus == 0 || group.gpus > 64 {
            return Err(invalid(format!("cluster.nodes[{i}].gpus"), format!("must be 1..=64, got {}", group.gpus)));
        }
        let model = names.gpu_model(&group.gpu_model)?;
        for _ in 0..group.count {
            let id = NodeId(out.len() as u32);
            out.push(NodeSpec {
                id,
                gpu_model: model,
                capacity: Resources::new(group.gpus, group.cpu_millis, group.memory_mib),
            });
        }
    }
    if let Some(path) = &cluster.openb_nodes {
        for node in load_openb_nodes(base_dir.join(path))? {
            let id = NodeId(out.len() as u32);
            let model = names.gpu_model(&node.gpu_model)?;
            out.push(NodeSpec {
                id,
                gpu_model: model,
                capacity: Resources::new(node.gpus, node.cpu_millis, node.memory_mib),
            });
        }
    }
    if let Some(n) = keep {
        if n == 0 {
            return Err(invalid("--nodes / cluster.nodes_max", "must be at least 1"));
        }
        out.truncate(n as usize);
    }
    if out.is_empty() {
        return Err(invalid("cluster", "has no nodes"));
    }
    Ok(out)
}

/// Hard caps, and places in cohorts.
type Quotas = (Vec<(AccountId, Quota)>, Vec<(AccountId, NominalQuota)>);

fn quotas(file: &ScenarioFile, base_dir: &Path, names: &mut Names) -> Result<Quotas, ScenarioError> {
    let mut out: BTreeMap<AccountId, Quota> = BTreeMap::new();
    let mut cohorts = file.cohorts.clone();
    if let Some(vc) = &file.quotas_from_philly_vc {
        let nominal = match vc.as_.as_deref() {
            None | Some("hard") => false,
            Some("nominal") => true,
            Some(other) => {
                return Err(invalid("quotas_from_philly_vc.as", format!("must be hard or nominal, got {other:?}")));
            }
        };
        if vc.cohort.is_some() && !nominal {
            return Err(invalid("quotas_from_philly_vc.cohort", "only with as: nominal"));
        }
        let mut members = Vec::new();
        for (project, gpus) in load_philly_vc_quotas(base_dir.join(&vc.path), vc.gpus_per_node)? {
            let scaled = ((f64::from(gpus) * vc.scale).round() as u32).max(1);
            if nominal {
                let gpus = fairway_spec::LimitsDoc { gpus: Some(scaled), ..Default::default() };
                members.push(fairway_spec::MemberDoc {
                    project,
                    nominal: gpus,
                    borrowing_limit: None,
                    lending_limit: None,
                });
            } else {
                out.insert(names.project(&project)?, Quota::gpus(scaled));
            }
        }
        if nominal {
            let name = vc.cohort.clone().unwrap_or_else(|| "philly".to_string());
            cohorts.push(CohortDoc { name, members });
        }
    }
    out.extend(quota_list(&file.quotas, "quotas", names)?);
    let nominals = resolve_cohorts(&cohorts, "cohorts", &mut names.0).map_err(|e| invalid(e.field, e.reason))?;
    Ok((out.into_iter().collect(), nominals))
}

/// No member of a cohort may keep unlent more than its project's hard quota lets it use:
/// that guarantee would sit idle (`fairway_spec::GuaranteeBeyondCap`). Checked per policy,
/// on the quotas and places it runs under (`nominal_quotas: hard_caps` and `ignore` leave
/// no places).
fn check_guarantees(
    quotas: &[(AccountId, Quota)],
    nominals: &[(AccountId, NominalQuota)],
    field: &str,
    names: &Names,
) -> Result<(), ScenarioError> {
    for (project, place) in nominals {
        let Some((_, cap)) = quotas.iter().find(|(a, _)| a == project) else { continue };
        if let Some(beyond) = fairway_spec::guarantee_beyond_cap(place, *cap) {
            let name = names.0.account_name(*project).map_or("?", |(_, name)| name);
            return Err(invalid(field, beyond.reason(name, "quotas")));
        }
    }
    Ok(())
}

/// What `nominal_quotas: hard_caps` makes of places in cohorts: each member's nominal quota
/// as a hard cap, lower than a hard quota it has already where both name a resource.
fn nominal_as_hard_caps(quotas: &mut Vec<(AccountId, Quota)>, nominals: &[(AccountId, NominalQuota)]) {
    for (project, n) in nominals {
        let cap = match quotas.iter_mut().find(|(a, _)| a == project) {
            Some((_, q)) => q,
            None => {
                quotas.push((*project, Quota::default()));
                &mut quotas.last_mut().expect("just pushed").1
            }
        };
        let lower = |a: Option<u64>, b: Option<u64>| match (a, b) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let of = |q: &Quota, k: ResourceKind| q.limit(k);
        let gpus = lower(of(cap, ResourceKind::Gpu), of(&n.nominal, ResourceKind::Gpu));
        cap.gpus_max = gpus.map(|g| u32::try_from(g).unwrap_or(u32::MAX));
        cap.cpu_millis_max = lower(cap.cpu_millis_max, n.nominal.cpu_millis_max);
        cap.memory_mib_max = lower(cap.memory_mib_max, n.nominal.memory_mib_max);
    }
    quotas.sort_by_key(|(a, _)| *a);
}

/// A custom policy's reservations, checked, with the default run-time estimate (ms).
fn reservations(
    spec: fairway_spec::ReservationsDoc,
    backfill: bool,
    field: &str,
) -> Result<(fairway_core::Reservations, u64), ScenarioError> {
    let checked = spec.to_core(field).map_err(|e| invalid(e.field, e.reason))?;
    if !backfill {
        return Err(invalid(field, "needs backfill: true (under strict order nothing passes a waiting job anyway)"));
    }
    Ok(checked)
}

/// A custom policy's fair sharing, checked.
fn fair_sharing(spec: &FairShareSpec, backfill: bool, field: &str) -> Result<FairSharing, ScenarioError> {
    let half_life_ms = fairway_spec::half_life_ms(field, spec.half_life_seconds, spec.half_life_hours)
        .map_err(|e| invalid(e.field, e.reason))?;
    if !backfill {
        return Err(invalid(
            field,
            "needs backfill: true (under strict order a priority is served in submit order by definition)",
        ));
    }
    Ok(FairSharing { half_life_ms })
}

/// The account a list entry names: exactly one of `project` and `user`.
fn named_account(
    project: &Option<String>,
    user: &Option<String>,
    field: &str,
    names: &mut Names,
) -> Result<AccountId, ScenarioError> {
    match (project, user) {
        (Some(p), None) => names.project(p),
        (None, Some(u)) => names.user(u),
        _ => Err(invalid(field, "name exactly one of `project` or `user`")),
    }
}

fn weight_list(specs: &[WeightSpec], field: &str, names: &mut Names) -> Result<Vec<(AccountId, u32)>, ScenarioError> {
    let mut out: Vec<(AccountId, u32)> = Vec::new();
    for (i, w) in specs.iter().enumerate() {
        let account = named_account(&w.project, &w.user, &format!("{field}[{i}]"), names)?;
        if w.weight == 0 {
            return Err(invalid(format!("{field}[{i}].weight"), "must be at least 1, got 0"));
        }
        if out.iter().any(|(a, _)| *a == account) {
            return Err(invalid(format!("{field}[{i}]"), "names an account already weighted"));
        }
        out.push((account, w.weight));
    }
    Ok(out)
}

fn quota_list(specs: &[QuotaSpec], field: &str, names: &mut Names) -> Result<Vec<(AccountId, Quota)>, ScenarioError> {
    let mut out = Vec::new();
    for (i, q) in specs.iter().enumerate() {
        let account = named_account(&q.project, &q.user, &format!("{field}[{i}]"), names)?;
        out.push((
            account,
            Quota { gpus_max: q.gpus_max, cpu_millis_max: q.cpu_millis_max, memory_mib_max: q.memory_mib_max },
        ));
    }
    Ok(out)
}

/// Native job specs with `submit_seconds` and `duration_seconds`.
fn native_jobs(values: &[serde_json::Value]) -> Result<(Vec<TraceJob>, LoadReport), ScenarioError> {
    let mut jobs = Vec::with_capacity(values.len());
    for (i, value) in values.iter().enumerate() {
        let field = |f: &str| format!("jobs[{i}].{f}");
        let mut value = value.clone();
        let obj = value.as_object_mut().ok_or_else(|| invalid(format!("jobs[{i}]"), "must be a mapping"))?;
        let mut take_secs = |name: &str| -> Result<u64, ScenarioError> {
            let v = obj.remove(name).ok_or_else(|| invalid(field(name), "required"))?;
            v.as_u64().ok_or_else(|| invalid(field(name), format!("must be a whole number of seconds, got {v}")))
        };
        let submit_s = take_secs("submit_seconds")?;
        let duration_s = take_secs("duration_seconds")?;
        if duration_s == 0 {
            return Err(invalid(field("duration_seconds"), "must be positive"));
        }
        let doc = fairway_spec::parse_native_job(&value, 0, &format!("jobs[{i}]")).map_err(ScenarioError::Spec)?;
        jobs.push(TraceJob {
            name: doc.name.clone(),
            submit_ms: submit_s * 1000,
            duration_ms: duration_s * 1000,
            gpus_per_replica: if doc.resources.gpu_milli.is_some() { 0 } else { doc.resources.gpus },
            gpu_milli: doc.resources.gpu_milli.unwrap_or(0),
            replicas: doc.replicas,
            user: doc.user.clone(),
            project: doc.project.clone(),
            tier: match &doc.priority {
                PriorityRef::Default => None,
                PriorityRef::Class(name) => Some(name.clone()),
                PriorityRef::Value(v) => Some(v.to_string()),
            },
            gpu_model: doc.resources.gpu_model.clone(),
            cpu_millis: doc.resources.cpu_millis,
            memory_mib: doc.resources.memory_mib,
            checkpoint_interval_ms: doc.checkpoint_interval_seconds.map(|s| s * 1000),
            image: doc.image.clone(),
        });
    }
    let mut names: Vec<&str> = jobs.iter().map(|j| j.name.as_str()).collect();
    names.sort();
    if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
        return Err(invalid("jobs", format!("duplicate job name {:?}", w[0])));
    }
    let jobs = crate::workload::sort_jobs(jobs);
    let n = jobs.len() as u64;
    Ok((jobs, LoadReport { rows_read: n, jobs_loaded: n, ..LoadReport::default() }))
}

/// One `Arc<str>` per distinct tier or tenant name, shared by every job that has it.
#[derive(Default)]
struct SharedStrings(BTreeMap<String, Arc<str>>);

impl SharedStrings {
    fn get(&mut self, name: &str) -> Arc<str> {
        if let Some(s) = self.0.get(name) {
            return s.clone();
        }
        let s: Arc<str> = Arc::from(name);
        self.0.insert(name.to_owned(), s.clone());
        s
    }
}

fn sim_jobs(
    trace: &[TraceJob],
    defaults: &JobDefaults,
    classes: &PriorityClasses,
    protection: &BTreeMap<String, ProtectionSpec>,
    names: &mut Names,
) -> Result<Vec<SimJob>, ScenarioError> {
    let default_tier = match &defaults.tier {
        Some(t) => t.clone(),
        None => classes.default_class().name.clone(),
    };
    let mut out = Vec::with_capacity(trace.len());
    let mut shared = SharedStrings::default();
    for (i, t) in trace.iter().enumerate() {
        let tier = t.tier.clone().unwrap_or_else(|| default_tier.clone());
        let (priority, preemption_policy) = tier_priority(classes, &tier)
            .ok_or_else(|| invalid(format!("job {:?}.tier", t.name), unknown_tier(classes, &tier)))?;
        let rule_1 = tier_protection(classes, protection, &tier);
        let gpu_model =
            match &t.gpu_model {
                None => None,
                Some(m) => Some(names.known_gpu_model(m).ok_or_else(|| {
                    invalid(format!("job {:?}.gpu_model", t.name), format!("no node has model {m:?}"))
                })?),
            };
        let spec = JobSpec {
            id: JobId(i as u64),
            user: names.user(&t.user)?,
            project: names.project(&t.project)?,
            priority,
            preemption_policy,
            preemptible: defaults.preemptible,
            per_replica: Resources {
                gpu_milli: t.gpu_milli,
                ..Resources::new(t.gpus_per_replica, t.cpu_millis, t.memory_mib)
            },
            gpu_model,
            image: t.image.as_deref().map(|i| names.image(i, &format!("job {:?}.image", t.name))).transpose()?,
            replicas: t.replicas,
            grace_ms: defaults.grace_seconds * 1000,
            max_runtime_ms: None,
            max_total_runtime_ms: None,
            runtime_estimate_ms: None,
            checkpoint_interval_ms: t.checkpoint_interval_ms.or(defaults.checkpoint_interval_seconds.map(|s| s * 1000)),
            min_run_before_preemption_ms: rule_1.min_run_seconds * 1000,
            preemptions_per_hour_max: rule_1.preemptions_per_hour_max,
            overrides_protection: rule_1.overrides_protection,
            preemption_delay_ms: rule_1.preemption_delay_seconds * 1000,
        };
        out.push(SimJob {
            spec,
            name: Arc::from(t.name.as_str()),
            tier: shared.get(&tier),
            tenant: shared.get(&t.project),
            submit_ms: t.submit_ms,
            work_ms: t.duration_ms,
        });
    }
    Ok(out)
}

/// A tier is a class name, or a bare priority value (as a native job may give).
fn tier_priority(classes: &PriorityClasses, tier: &str) -> Option<(i32, PreemptionPolicy)> {
    match classes.resolve(tier) {
        Some(class) => Some((class.value, class.preemption_policy)),
        None => tier.parse::<i32>().ok().map(|v| (v, PreemptionPolicy::PreemptLowerPriority)),
    }
}

/// Rule 1 for a tier: the scenario's `preemption_protection` entry if it has one, else the
/// class's own (the built-in `critical` overrides protection).
fn tier_protection(classes: &PriorityClasses, given: &BTreeMap<String, ProtectionSpec>, tier: &str) -> ProtectionSpec {
    given.get(tier).copied().unwrap_or_else(|| {
        let class = classes.resolve(tier).map(|c| c.protection).unwrap_or_default();
        ProtectionSpec {
            min_run_seconds: class.min_run_seconds,
            preemptions_per_hour_max: class.preemptions_per_hour_max,
            overrides_protection: class.overrides_protection,
            preemption_delay_seconds: class.preemption_delay_seconds,
        }
    })
}

fn unknown_tier(classes: &PriorityClasses, tier: &str) -> String {
    let known: Vec<&str> = classes.iter().map(|c| c.name.as_str()).collect();
    format!("unknown priority class {tier:?} (known: {})", known.join(", "))
}

fn policies(
    specs: &[PolicySpec],
    only: Option<&[String]>,
    scenario_quotas: &[(AccountId, Quota)],
    scenario_nominals: &[(AccountId, NominalQuota)],
    names: &mut Names,
) -> Result<Vec<SimPolicy>, ScenarioError> {
    let mut out: Vec<SimPolicy> = Vec::new();
    for (i, spec) in specs.iter().enumerate() {
        let mut quotas = scenario_quotas.to_vec();
        let mut weights = Vec::new();
        let mut nominals = scenario_nominals.to_vec();
        let (name, policy) = match spec {
            PolicySpec::Preset(name) => match name.as_str() {
                "fifo" => (name.clone(), Policy::fifo()),
                "priority" => (name.clone(), Policy::priority()),
                "fairway" => (name.clone(), Policy::fairway()),
                other => {
                    return Err(invalid(
                        format!("policies[{i}]"),
                        format!("unknown preset {other:?} (fifo, priority, fairway)"),
                    ));
                }
            },
            PolicySpec::Custom(c) => {
                let order = match c.order.as_str() {
                    "fifo" => QueueOrder::Fifo,
                    "priority" => QueueOrder::Priority,
                    "sjf-oracle" => QueueOrder::PriorityShortestFirst,
                    other => {
                        return Err(invalid(
                            format!("policies[{i}].order"),
                            format!("must be fifo, priority or sjf-oracle, got {other:?}"),
                        ));
                    }
                };
                let scoring = ScoringPolicy::from_name(&c.scoring).ok_or_else(|| {
                    invalid(
                        format!("policies[{i}].scoring"),
                        format!("must be best-fit or spread, got {:?}", c.scoring),
                    )
                })?;
                if let Some(own) = &c.quotas {
                    quotas = quota_list(own, &format!("policies[{i}].quotas"), names)?;
                }
                if let Some(own) = &c.cohorts {
                    nominals = resolve_cohorts(own, &format!("policies[{i}].cohorts"), &mut names.0)
                        .map_err(|e| invalid(e.field, e.reason))?;
                }
                match c.nominal_quotas.as_deref() {
                    None | Some("cohort") => {}
                    Some("hard_caps") => nominal_as_hard_caps(&mut quotas, &std::mem::take(&mut nominals)),
                    Some("ignore") => nominals.clear(),
                    Some(other) => {
                        return Err(invalid(
                            format!("policies[{i}].nominal_quotas"),
                            format!("must be cohort, hard_caps or ignore, got {other:?}"),
                        ));
                    }
                }
                let fair_share = match &c.fair_share {
                    None => None,
                    Some(f) => {
                        let field = format!("policies[{i}].fair_share");
                        weights = weight_list(&f.weights, &format!("{field}.weights"), names)?;
                        Some(fair_sharing(f, c.backfill, &field)?)
                    }
                };
                let mut estimates = fairway_core::RuntimeEstimates::default();
                let reservations = match &c.reservations {
                    None => None,
                    Some(r) => {
                        let (r, default_runtime_ms) =
                            reservations(*r, c.backfill, &format!("policies[{i}].reservations"))?;
                        estimates.default_runtime_ms = default_runtime_ms;
                        Some(r)
                    }
                };
                let image_locality_permille =
                    c.image_locality_permille.unwrap_or(fairway_core::config::IMAGE_LOCALITY_PERMILLE_DEFAULT);
                if image_locality_permille > 1000 {
                    return Err(invalid(
                        format!("policies[{i}].image_locality_permille"),
                        format!("must be from 0 to 1000 thousandths of a node, got {image_locality_permille}"),
                    ));
                }
                let policy = Policy {
                    order,
                    preemption: c.preemption,
                    backfill: c.backfill,
                    scoring,
                    packing: None,
                    image_locality_permille,
                    fair_share,
                    reservations,
                    estimates,
                };
                (c.name.clone(), policy)
            }
        };
        check_guarantees(&quotas, &nominals, &format!("policies[{i}]"), names)?;
        if out.iter().any(|p| p.name == name) {
            return Err(invalid(format!("policies[{i}]"), format!("duplicate policy name {name:?}")));
        }
        out.push(SimPolicy { name, policy, quotas, weights, nominals });
    }
    if let Some(only) = only {
        for name in only {
            if !out.iter().any(|p| p.name == *name) {
                let known: Vec<&str> = out.iter().map(|p| p.name.as_str()).collect();
                return Err(invalid("--policy", format!("{name:?} is not in the scenario ({})", known.join(", "))));
            }
        }
        out.retain(|p| only.contains(&p.name));
    }
    Ok(out)
}

fn limits(spec: &LimitsSpec) -> Limits {
    let mut l = Limits::default();
    if let Some(v) = spec.victims_per_preemption_max {
        l.victims_per_preemption_max = v;
    }
    if let Some(v) = spec.preemption_attempts_per_cycle_max {
        l.preemption_attempts_per_cycle_max = v;
    }
    if let Some(v) = spec.victims_per_cycle_max {
        l.victims_per_cycle_max = v;
    }
    if let Some(v) = spec.starts_per_cycle_max {
        l.starts_per_cycle_max = v;
    }
    if let Some(v) = spec.candidate_nodes_scored_max {
        l.candidate_nodes_scored_max = v;
    }
    l
}
