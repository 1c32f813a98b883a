//! Policy knobs and limits. The simulator's `fifo`, `priority` and `fairway` presets are
//! three values of [`Policy`].

use crate::packing::PackPolicy;

/// How the queue is ordered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueueOrder {
    /// Submit time, then id: priorities are ignored.
    Fifo,
    /// Priority (higher first), then submit time, then id.
    Priority,
    /// Priority (higher first), then the shortest expected run first (the job's run-time
    /// limit or its own estimate; a job with neither goes after those with one), then
    /// submit time, then id. With true durations as estimates this is the shortest-job-first
    /// oracle the simulator compares policies with.
    PriorityShortestFirst,
}

/// How a node is chosen among the feasible ones. Add a variant and its `score` arm in
/// `placement.rs` to add a policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScoringPolicy {
    /// Fewest GPUs left free after placement: keeps whole nodes free for big jobs.
    BestFit,
    /// Most GPUs left free: spreads load (useful for thermals or noisy neighbours).
    Spread,
}

impl ScoringPolicy {
    pub fn name(self) -> &'static str {
        match self {
            ScoringPolicy::BestFit => "best-fit",
            ScoringPolicy::Spread => "spread",
        }
    }
    pub fn from_name(name: &str) -> Option<ScoringPolicy> {
        match name {
            "best-fit" => Some(ScoringPolicy::BestFit),
            "spread" => Some(ScoringPolicy::Spread),
            _ => None,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Policy {
    pub order: QueueOrder,
    pub preemption: bool,
    /// When false, a job that cannot start blocks every job behind it (strict order).
    /// When true, later jobs may start on GPUs the blocked job cannot use.
    pub backfill: bool,
    pub scoring: ScoringPolicy,
    /// A placement policy of `docs/placement.md` (FGD's and the paper's baselines, and
    /// Fairway's own) for one-replica jobs placed on free room; `None`: `scoring` places
    /// them. Gangs, and nodes of more than 16 GPUs, are placed by `scoring` either way. The
    /// presets use Fairway's own (`PackPolicy::DEFAULT`: it packs tighter than FGD on
    /// openb), which falls back to `scoring` until the first submission has taught it the
    /// typical asks.
    pub packing: Option<PackPolicy>,
    /// Image locality: among the nodes a one-replica job's GPUs fit equally well, one that
    /// holds the job's image wins unless another is tighter in CPU and memory by more than
    /// this many thousandths of a node's capacity (best-fit's tie-breakers; see
    /// `placement.rs`). It never outweighs priority or the GPU fit; with a packing policy it
    /// breaks ties of its score only. 0: off.
    pub image_locality_permille: u32,
    /// Fair sharing between tenants inside one priority (see `fairshare.rs`); `None`: jobs
    /// of one priority go in submit order. Applies with backfill only: under strict order
    /// the queue's order is the submit order by definition.
    pub fair_share: Option<FairSharing>,
    /// Reservations with backfill (see `plan.rs`); `None`: a job that cannot start reserves
    /// nothing, and any job behind it that fits starts. Applies with backfill only.
    pub reservations: Option<Reservations>,
    /// How long runs are expected to last, for reservations and start-time estimates (see
    /// `estimate.rs`).
    pub estimates: RuntimeEstimates,
}

/// How the core expects a run to last when the job has no limit of its own (see
/// `estimate.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RuntimeEstimates {
    /// Expected run time of a job with no limit, no estimate of its own and no history to
    /// learn from (and how much longer it runs, each time it runs past that).
    pub default_runtime_ms: u64,
    /// Completed runs remembered per project and per user, to learn run times from (0: none;
    /// every estimate is then the job's own or the default).
    pub history_runs_max: u32,
}

impl Default for RuntimeEstimates {
    fn default() -> RuntimeEstimates {
        RuntimeEstimates { default_runtime_ms: 3_600_000, history_runs_max: 64 }
    }
}

/// Reservations for the jobs that cannot start (see `plan.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reservations {
    /// How many pending jobs hold a reservation at once, the highest ranked (1: EASY).
    pub count_max: u32,
}

/// Fair sharing inside a priority tier.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FairSharing {
    /// How fast past usage is forgotten: what a tenant held counts half as much this long
    /// after (0: only what it holds now counts).
    pub half_life_ms: u64,
}

/// The presets' image-locality weight: a node holding the image wins over one up to a tenth
/// of a node's CPU tighter.
pub const IMAGE_LOCALITY_PERMILLE_DEFAULT: u32 = 100;

impl Policy {
    /// Strict first-come first-served: no priorities, no preemption, no backfill.
    pub fn fifo() -> Policy {
        Policy {
            order: QueueOrder::Fifo,
            preemption: false,
            backfill: false,
            scoring: ScoringPolicy::BestFit,
            packing: Some(PackPolicy::DEFAULT),
            image_locality_permille: IMAGE_LOCALITY_PERMILLE_DEFAULT,
            fair_share: None,
            reservations: None,
            estimates: RuntimeEstimates::default(),
        }
    }
    /// Priority order with backfill, but nothing is ever preempted.
    pub fn priority() -> Policy {
        Policy {
            order: QueueOrder::Priority,
            preemption: false,
            backfill: true,
            scoring: ScoringPolicy::BestFit,
            packing: Some(PackPolicy::DEFAULT),
            image_locality_permille: IMAGE_LOCALITY_PERMILLE_DEFAULT,
            fair_share: None,
            reservations: None,
            estimates: RuntimeEstimates::default(),
        }
    }
    /// Priority order, backfill and graceful preemption.
    pub fn fairway() -> Policy {
        Policy {
            order: QueueOrder::Priority,
            preemption: true,
            backfill: true,
            scoring: ScoringPolicy::BestFit,
            packing: Some(PackPolicy::DEFAULT),
            image_locality_permille: IMAGE_LOCALITY_PERMILLE_DEFAULT,
            fair_share: None,
            reservations: None,
            estimates: RuntimeEstimates::default(),
        }
    }
}

impl Default for Policy {
    fn default() -> Policy {
        Policy::fairway()
    }
}

/// Limits on everything the core does in one cycle or holds at once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Jobs started in one cycle.
    pub starts_per_cycle_max: u32,
    /// Pending jobs that may try preemption in one cycle (searches are the costly part).
    pub preemption_attempts_per_cycle_max: u32,
    /// Victims one preemptor may take.
    pub victims_per_preemption_max: u32,
    /// Victims all preemptors together may take in one cycle (rule 7 of the preemption
    /// order): a preemptor whose set would go beyond waits for the next cycle.
    pub victims_per_cycle_max: u32,
    /// Running jobs examined as victim candidates for one preemptor.
    pub victim_candidates_max: u32,
    /// Steps of the branch and bound of one victim search over the whole cluster (a gang's,
    /// or a job's bound by quota); past them it settles for the best set it has found or
    /// a fallback's (see `preemption.rs`, "Where the search is exact").
    pub wide_search_steps_max: u32,
    /// Feasible nodes scored for one replica.
    pub candidate_nodes_scored_max: u32,
    /// Jobs held (pending and running). Submits beyond it are refused.
    pub jobs_max: u32,
    /// Replicas in one gang.
    pub replicas_max: u32,
    /// GPUs on one node (slots are tracked in a 64-bit mask).
    pub gpus_per_node_max: u32,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            starts_per_cycle_max: 10_000,
            preemption_attempts_per_cycle_max: 64,
            victims_per_preemption_max: 32,
            victims_per_cycle_max: 256,
            victim_candidates_max: 4_096,
            wide_search_steps_max: 2_000,
            candidate_nodes_scored_max: 64,
            jobs_max: 1_000_000,
            replicas_max: 1_024,
            gpus_per_node_max: 64,
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Config {
    pub policy: Policy,
    pub limits: Limits,
}
