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

/// A container image (its reference, interned by the driver): what a job runs and what a
/// node may hold already, so that the job starts without a pull.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ImageId(pub u32);

impl fmt::Display for ImageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "image#{}", self.0)
    }
}

/// Priority value, as in a Kubernetes `PriorityClass`: higher runs first.
pub type Priority = i32;

/// Resources of one replica, or of a node, or a quota.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Resources {
    /// Whole GPUs.
    pub gpus: u32,
    pub cpu_millis: u64,
    pub memory_mib: u64,
    /// Thousandths of one GPU taken as a share (openb's `gpu_milli`), apart from `gpus`:
    /// - in a replica's demand, the share of one GPU it asks for: 1 to 999, with `gpus` 0
    ///   (a replica takes a share of one GPU, or whole GPUs, or none);
    /// - in what accounts, jobs and nodes hold, the shares summed (one share may sit beside
    ///   another on a GPU, so this may pass 1000);
    /// - in a node's room (`Node::available`), the largest share one more replica may take
    ///   on one GPU: 1000 while a whole GPU is free, so `fits_in` answers for shares too.
    pub gpu_milli: u32,
}

impl Resources {
    pub const ZERO: Resources = Resources { gpus: 0, cpu_millis: 0, memory_mib: 0, gpu_milli: 0 };

    pub fn new(gpus: u32, cpu_millis: u64, memory_mib: u64) -> Resources {
        Resources { gpus, cpu_millis, memory_mib, gpu_milli: 0 }
    }
    /// A share of one GPU: `gpu_milli` thousandths (see the field).
    pub fn share(gpu_milli: u32, cpu_millis: u64, memory_mib: u64) -> Resources {
        Resources { gpus: 0, cpu_millis, memory_mib, gpu_milli }
    }
    /// Is this a demand for a share of one GPU?
    pub fn is_share(self) -> bool {
        self.gpu_milli > 0
    }
    /// GPU slots a replica of this demand lists in its placement: one for a share.
    pub fn slots_per_replica(self) -> u32 {
        if self.is_share() { 1 } else { self.gpus }
    }
    /// A demand as the victim search, the reservation plan and the start-time forecast see
    /// it: a share asks for a whole GPU there, since they count GPUs freed whole (a share
    /// preemptor frees a whole GPU and holds it; see `preemption.rs`).
    pub fn as_whole_gpus(self) -> Resources {
        if self.is_share() { Resources { gpus: 1, gpu_milli: 0, ..self } } else { self }
    }
    /// Without the shares: what a share victim frees as the victim search counts it (its
    /// CPU and memory; its GPU comes back only when every share on it goes).
    pub fn without_shares(self) -> Resources {
        Resources { gpu_milli: 0, ..self }
    }
    /// GPUs in thousandths, whole and shared together.
    pub fn gpu_milli_total(self) -> u64 {
        u64::from(self.gpus) * 1000 + u64::from(self.gpu_milli)
    }
    pub fn gpus(gpus: u32) -> Resources {
        Resources { gpus, ..Resources::ZERO }
    }
    /// From an amount per dimension (see [`ResourceKind::amount`]: GPUs in thousandths).
    pub fn from_amounts(of: impl Fn(ResourceKind) -> u64) -> Resources {
        let milli = of(ResourceKind::Gpu);
        Resources {
            gpus: u32::try_from(milli / 1000).unwrap_or(u32::MAX),
            cpu_millis: of(ResourceKind::Cpu),
            memory_mib: of(ResourceKind::Memory),
            gpu_milli: (milli % 1000) as u32,
        }
    }
    /// From a figure per dimension (GPUs saturating at `u32::MAX`).
    pub fn from_fn(of: impl Fn(ResourceKind) -> u64) -> Resources {
        let gpus = u32::try_from(of(ResourceKind::Gpu)).unwrap_or(u32::MAX);
        Resources::new(gpus, of(ResourceKind::Cpu), of(ResourceKind::Memory))
    }
    pub fn times(self, n: u32) -> Resources {
        Resources {
            gpus: self.gpus * n,
            cpu_millis: self.cpu_millis * u64::from(n),
            memory_mib: self.memory_mib * u64::from(n),
            gpu_milli: self.gpu_milli * n,
        }
    }
    pub fn plus(self, other: Resources) -> Resources {
        Resources {
            gpus: self.gpus + other.gpus,
            cpu_millis: self.cpu_millis + other.cpu_millis,
            memory_mib: self.memory_mib + other.memory_mib,
            gpu_milli: self.gpu_milli + other.gpu_milli,
        }
    }
    /// Subtraction that panics on underflow: usage accounting must never go negative.
    ///
    /// Whole GPUs and shares are taken apart where each suffices; otherwise whole GPUs are
    /// broken into thousandths (a quota's charge less its own victims' may mix the two).
    pub fn minus(self, other: Resources) -> Resources {
        let (gpus, gpu_milli) = match (self.gpus.checked_sub(other.gpus), self.gpu_milli.checked_sub(other.gpu_milli)) {
            (Some(g), Some(m)) => (g, m),
            _ => {
                let milli =
                    self.gpu_milli_total().checked_sub(other.gpu_milli_total()).expect("gpu accounting underflow");
                split_milli(milli)
            }
        };
        Resources {
            gpus,
            cpu_millis: self.cpu_millis.checked_sub(other.cpu_millis).expect("cpu accounting underflow"),
            memory_mib: self.memory_mib.checked_sub(other.memory_mib).expect("memory accounting underflow"),
            gpu_milli,
        }
    }
    /// Subtraction down to zero, dimension by dimension (shares apart from whole GPUs: in a
    /// node's room `gpu_milli` is not a sum, see the field).
    pub fn saturating_minus(self, other: Resources) -> Resources {
        Resources {
            gpus: self.gpus.saturating_sub(other.gpus),
            cpu_millis: self.cpu_millis.saturating_sub(other.cpu_millis),
            memory_mib: self.memory_mib.saturating_sub(other.memory_mib),
            gpu_milli: self.gpu_milli.saturating_sub(other.gpu_milli),
        }
    }
    /// Subtraction down to zero by [`ResourceKind::amount`] (GPUs as thousandths, whole and
    /// shared together): for usage, where a whole GPU covers a share.
    pub fn saturating_minus_by_amount(self, other: Resources) -> Resources {
        Resources::from_amounts(|k| k.amount(self).saturating_sub(k.amount(other)))
    }
    /// The larger of each dimension (not `Ord::max`, which compares whole values).
    pub fn max_each(self, other: Resources) -> Resources {
        Resources {
            gpus: self.gpus.max(other.gpus),
            cpu_millis: self.cpu_millis.max(other.cpu_millis),
            memory_mib: self.memory_mib.max(other.memory_mib),
            gpu_milli: self.gpu_milli.max(other.gpu_milli),
        }
    }
    /// The smaller of each dimension (not `Ord::min`, which compares whole values).
    pub fn min_each(self, other: Resources) -> Resources {
        Resources {
            gpus: self.gpus.min(other.gpus),
            cpu_millis: self.cpu_millis.min(other.cpu_millis),
            memory_mib: self.memory_mib.min(other.memory_mib),
            gpu_milli: self.gpu_milli.min(other.gpu_milli),
        }
    }
    /// How many of `per` fit in these resources (`u32::MAX` when `per` is zero).
    pub fn count_fitting(self, per: Resources) -> u32 {
        let by = |have: u64, need: u64| have.checked_div(need).unwrap_or(u64::MAX);
        let n = by(u64::from(self.gpus), u64::from(per.gpus))
            .min(by(self.cpu_millis, per.cpu_millis))
            .min(by(self.memory_mib, per.memory_mib))
            .min(by(u64::from(self.gpu_milli), u64::from(per.gpu_milli)));
        n.min(u64::from(u32::MAX)) as u32
    }
    /// `count_fitting(per).min(max)`, without dividing when the answer is 0 or `max`: the
    /// searches and the reservations' plan ask it of a node at every step, and it is nearly
    /// always one of those.
    pub fn count_fitting_up_to(self, per: Resources, max: u32) -> u32 {
        if max == 0 || !per.fits_in(self) {
            return 0;
        }
        let holds_max = |have: u64, need: u64| need.saturating_mul(u64::from(max)) <= have;
        if holds_max(u64::from(self.gpus), u64::from(per.gpus))
            && holds_max(self.cpu_millis, per.cpu_millis)
            && holds_max(self.memory_mib, per.memory_mib)
            && holds_max(u64::from(self.gpu_milli), u64::from(per.gpu_milli))
        {
            return max;
        }
        self.count_fitting(per).min(max)
    }
    /// `fits_in` by [`ResourceKind::amount`] (GPUs as thousandths, whole and shared
    /// together): how usage is compared with what a quota needs, since a whole GPU freed
    /// covers a share needed.
    pub fn within_by_amount(self, other: Resources) -> bool {
        ResourceKind::ALL.into_iter().all(|k| k.amount(self) <= k.amount(other))
    }
    /// Equal by amount: the same usage, however whole GPUs and shares are split.
    pub fn same_amounts(self, other: Resources) -> bool {
        ResourceKind::ALL.into_iter().all(|k| k.amount(self) == k.amount(other))
    }
    /// `min_each` by amount.
    pub fn min_by_amount(self, other: Resources) -> Resources {
        Resources::from_amounts(|k| k.amount(self).min(k.amount(other)))
    }
    /// `minus` by amount (panics on underflow, as `minus`).
    pub fn minus_by_amount(self, other: Resources) -> Resources {
        Resources::from_amounts(|k| k.amount(self).checked_sub(k.amount(other)).expect("quota accounting underflow"))
    }
    /// True when every dimension of `self` is at most the same dimension of `other`.
    pub fn fits_in(self, other: Resources) -> bool {
        self.gpus <= other.gpus
            && self.cpu_millis <= other.cpu_millis
            && self.memory_mib <= other.memory_mib
            && self.gpu_milli <= other.gpu_milli
    }
}

/// Thousandths of GPUs as (whole GPUs, the rest).
fn split_milli(milli: u64) -> (u32, u32) {
    (u32::try_from(milli / 1000).unwrap_or(u32::MAX), (milli % 1000) as u32)
}

impl fmt::Display for Resources {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.gpu_milli == 0 {
            write!(f, "{} GPU, {}m CPU, {} MiB", self.gpus, self.cpu_millis, self.memory_mib)
        } else {
            let milli = self.gpu_milli_total();
            write!(f, "{}.{:03} GPU, {}m CPU, {} MiB", milli / 1000, milli % 1000, self.cpu_millis, self.memory_mib)
        }
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
    /// The figure of `r` in this dimension. GPUs count shares rounded up to whole GPUs
    /// (`gpus + ⌈gpu_milli / 1000⌉`): against a cap in whole GPUs, that is exact (shares
    /// summing to at most `cap × 1000` thousandths pass, one more thousandth does not).
    pub fn of(self, r: Resources) -> u64 {
        match self {
            ResourceKind::Gpu => u64::from(r.gpus) + u64::from(r.gpu_milli).div_ceil(1000),
            ResourceKind::Cpu => r.cpu_millis,
            ResourceKind::Memory => r.memory_mib,
        }
    }
    /// The figure of `r` in this dimension in the unit quotas are added up in: thousandths
    /// for GPUs (whole GPUs and shares together), so sums and differences of usage are exact.
    pub fn amount(self, r: Resources) -> u64 {
        match self {
            ResourceKind::Gpu => r.gpu_milli_total(),
            _ => self.of(r),
        }
    }
    /// A limit in this dimension (whole GPUs for GPUs) in the unit of [`ResourceKind::amount`].
    pub fn amount_of_limit(self, limit: u64) -> u64 {
        match self {
            ResourceKind::Gpu => limit.saturating_mul(1000),
            _ => limit,
        }
    }
    /// An amount back in the unit of limits, rounded up: how much of a limit it takes.
    pub fn limit_units(self, amount: u64) -> u64 {
        match self {
            ResourceKind::Gpu => amount.div_ceil(1000),
            _ => amount,
        }
    }
    /// An amount (see [`ResourceKind::amount`]) in this dimension's unit, as people read
    /// it: GPUs with up to three decimals (`2`, `0.6`, `1.25`), others as they are.
    pub fn format_amount(self, amount: u64) -> String {
        match self {
            ResourceKind::Gpu if !amount.is_multiple_of(1000) => {
                let decimals = format!("{:03}", amount % 1000);
                format!("{}.{}", amount / 1000, decimals.trim_end_matches('0'))
            }
            ResourceKind::Gpu => (amount / 1000).to_string(),
            _ => amount.to_string(),
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
    /// The container image it runs, if any: placement prefers nodes that hold it already
    /// (`Policy::image_locality_permille`).
    pub image: Option<ImageId>,
    /// Gang size: all replicas start together or none does. At least 1.
    pub replicas: u32,
    /// Time between SIGTERM and SIGKILL when preempted.
    pub grace_ms: u64,
    /// Run-time limit of each run, as Slurm's `--time` and a Job's `activeDeadlineSeconds`
    /// (whose clock restarts when a suspended Job resumes): a run is stopped when it has
    /// lasted this long; a preempted job's next run gets it whole again.
    pub max_runtime_ms: Option<u64>,
    /// Run-time limit summed over all of the job's runs; the run that reaches it is stopped.
    pub max_total_runtime_ms: Option<u64>,
    /// How long a run is expected to last when a limit exists that the core does not
    /// enforce itself (Kubernetes enforces a Job's `activeDeadlineSeconds`): what
    /// reservations count on (see `plan.rs`); unused when `max_runtime_ms` is set.
    pub runtime_estimate_ms: Option<u64>,
    /// How often the job checkpoints; the core uses it to estimate work lost by preemption
    /// when the job reports no checkpoints itself.
    pub checkpoint_interval_ms: Option<u64>,
    /// Preemption rule 1: a run younger than this is not a victim (a job that just resumed
    /// would otherwise be the cheapest to preempt again). Set from its priority class.
    pub min_run_before_preemption_ms: u64,
    /// Preemption rule 1: a job chosen as a victim this many times in the last hour is not a
    /// victim again until the oldest of those is an hour old. Set from its priority class.
    pub preemptions_per_hour_max: Option<u32>,
    /// Preemption rule 1 does not hold against this job: it may preempt runs that a minimum
    /// run or an hourly cap protects (for a class of work that must start now). Set from its
    /// priority class.
    pub overrides_protection: bool,
    /// Preemption rule 1, the preemptor's side: a pending job preempts only once it has
    /// waited this long since it last entered the queue (its submit, or its requeue after a
    /// preemption); until then it waits for GPUs to free on their own, as YuniKorn's
    /// preemption delay does. On a busy cluster GPUs free every few seconds, so most such
    /// waits end without anyone losing work, and a victim requeued does not at once take
    /// the GPUs of jobs below it (a cascade). Set from its priority class.
    pub preemption_delay_ms: u64,
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
            image: None,
            replicas: 1,
            grace_ms: 30_000,
            max_runtime_ms: None,
            max_total_runtime_ms: None,
            runtime_estimate_ms: None,
            checkpoint_interval_ms: None,
            min_run_before_preemption_ms: 0,
            preemptions_per_hour_max: None,
            overrides_protection: false,
            preemption_delay_ms: 0,
        }
    }
    /// GPUs the gang takes whole or a share of, when running: what the victim index tallies
    /// (an upper bound of the GPUs its going frees whole).
    pub fn gpu_slots(&self) -> u32 {
        self.per_replica.slots_per_replica() * self.replicas
    }
    /// Everything the gang holds when running.
    pub fn total(&self) -> Resources {
        self.per_replica.times(self.replicas)
    }
    /// The accounts the job is charged to: its project, then its user (once if the same).
    /// The iterator owns its two ids, so callers may change state while using it.
    pub fn accounts(&self) -> impl Iterator<Item = AccountId> + use<> {
        let (u, p) = (self.user, self.project);
        std::iter::once(p).chain((u != p).then_some(u))
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
    /// The first dimension in which `usage` is above its limit.
    pub fn first_exceeded(&self, usage: Resources) -> Option<ResourceKind> {
        ResourceKind::ALL.into_iter().find(|&kind| self.limit(kind).is_some_and(|limit| kind.of(usage) > limit))
    }
}

/// An account's recent average holding for fair sharing (`past_r` in `fairshare.rs`'s
/// formula), in whole units: what a driver saves so that a restarted core still remembers
/// who burst lately (`Scheduler::recent_usage`, `Event::RestoreRecentUsage`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RecentUsage {
    /// Thousandths of a GPU.
    pub gpu_milli: u64,
    pub cpu_millis: u64,
    pub memory_mib: u64,
}

/// A project's place in a cohort (Kueue's ClusterQueue in a cohort), per dimension: the
/// nominal quota it is guaranteed, how far beyond it it may borrow what other members do not
/// use, and how much of its nominal quota it lends while it does not use it.
///
/// A dimension the project's `nominal` leaves out counts as a nominal quota of 0 there if
/// another member of the cohort names it (the cohort governs a dimension any member names).
/// The rules are in `ledger.rs`; drivers check that members name the same dimensions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NominalQuota {
    /// The cohort, interned as an account (usage is charged to it).
    pub cohort: AccountId,
    pub nominal: Quota,
    /// How far above `nominal` the project may go (`None` dimension: as far as the cohort
    /// lends).
    pub borrowing_limit: Quota,
    /// How much of `nominal` the project lends to the cohort (`None` dimension: all of it);
    /// at most `nominal`.
    pub lending_limit: Quota,
}

impl NominalQuota {
    /// The nominal quota in `kind` (0 where it names none).
    pub fn nominal_of(&self, kind: ResourceKind) -> u64 {
        self.nominal.limit(kind).unwrap_or(0)
    }

    /// What of the nominal quota no other member may use: the part not lent.
    pub fn guaranteed_of(&self, kind: ResourceKind) -> u64 {
        let nominal = self.nominal_of(kind);
        nominal - self.lending_limit.limit(kind).map_or(nominal, |lent| lent.min(nominal))
    }

    /// The project's own cap from borrowing (nominal plus borrowing limit), if it has one.
    pub fn usage_cap(&self, kind: ResourceKind) -> Option<u64> {
        self.borrowing_limit.limit(kind).map(|b| self.nominal_of(kind).saturating_add(b))
    }

    /// The first reason this cannot be a project's place in a cohort, if there is one.
    pub fn invalid(&self, project: AccountId) -> Option<String> {
        if self.cohort == project {
            return Some("a project cannot be its own cohort".into());
        }
        ResourceKind::ALL.into_iter().find_map(|kind| {
            match (self.nominal.limit(kind), self.lending_limit.limit(kind)) {
                (None, Some(_)) => Some(format!("lending_limit.{} set without a nominal quota for it", kind.name())),
                (Some(nominal), Some(lent)) if lent > nominal => {
                    Some(format!("lending_limit.{} {lent} is above the nominal quota {nominal}", kind.name()))
                }
                _ => None,
            }
        })
    }
}

/// A set of GPU slots on one node, as a 64-bit mask: slot `i` is bit `i`. Nodes hold at most
/// [`GpuSet::SLOTS_MAX`] GPUs, so a set is a plain `Copy` value and placing, freeing and
/// checking slots are bit operations, never allocations. Iteration is in ascending order.
#[derive(Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GpuSet(u64);

/// Why a list of GPU indices is not a [`GpuSet`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GpuSetError {
    #[error("GPU index {0} is out of range (a node has at most 64 GPUs)")]
    OutOfRange(u32),
    #[error("GPU index {0} is listed twice")]
    Duplicate(u32),
}

impl GpuSet {
    pub const EMPTY: GpuSet = GpuSet(0);
    /// The most GPU slots a node may have.
    pub const SLOTS_MAX: u32 = 64;

    /// Slots `0..count`: every slot of a node with `count` GPUs.
    pub fn first(count: u32) -> GpuSet {
        assert!(count <= Self::SLOTS_MAX, "a node has at most 64 GPU slots");
        GpuSet(if count == 64 { u64::MAX } else { (1u64 << count) - 1 })
    }

    /// The set of the given indices; each must be below 64 and listed once.
    pub fn from_indices(indices: impl IntoIterator<Item = u32>) -> Result<GpuSet, GpuSetError> {
        let mut set = GpuSet::EMPTY;
        for i in indices {
            if i >= Self::SLOTS_MAX {
                return Err(GpuSetError::OutOfRange(i));
            }
            if set.contains(i) {
                return Err(GpuSetError::Duplicate(i));
            }
            set.0 |= 1 << i;
        }
        Ok(set)
    }

    pub const fn from_bits(bits: u64) -> GpuSet {
        GpuSet(bits)
    }
    pub const fn bits(self) -> u64 {
        self.0
    }
    pub const fn len(self) -> u32 {
        self.0.count_ones()
    }
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }
    pub const fn contains(self, index: u32) -> bool {
        index < 64 && self.0 & (1 << index) != 0
    }
    pub const fn union(self, other: GpuSet) -> GpuSet {
        GpuSet(self.0 | other.0)
    }
    pub const fn intersection(self, other: GpuSet) -> GpuSet {
        GpuSet(self.0 & other.0)
    }
    /// The slots of `self` not in `other`.
    pub const fn minus(self, other: GpuSet) -> GpuSet {
        GpuSet(self.0 & !other.0)
    }
    pub const fn is_disjoint(self, other: GpuSet) -> bool {
        self.0 & other.0 == 0
    }
    /// The `count` lowest slots of the set, or all of them if it has fewer.
    pub fn lowest(self, count: u32) -> GpuSet {
        let mut rest = self.0;
        let mut out = 0u64;
        for _ in 0..count {
            if rest == 0 {
                break;
            }
            let bit = rest & rest.wrapping_neg();
            out |= bit;
            rest &= !bit;
        }
        GpuSet(out)
    }
    /// Slot indices, ascending.
    pub fn iter(self) -> impl Iterator<Item = u32> + Clone {
        let mut rest = self.0;
        std::iter::from_fn(move || {
            (rest != 0).then(|| {
                let i = rest.trailing_zeros();
                rest &= rest - 1;
                i
            })
        })
    }
}

impl fmt::Debug for GpuSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

impl fmt::Display for GpuSet {
    /// `0,1,5`
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (k, g) in self.iter().enumerate() {
            if k > 0 {
                write!(f, ",")?;
            }
            write!(f, "{g}")?;
        }
        Ok(())
    }
}

/// One replica's place: a node and the GPU slots on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplicaPlacement {
    pub node: NodeId,
    pub gpus: GpuSet,
}

/// Where every replica of a job runs, in replica order. Most jobs have one replica: that
/// case is held inline, so a placement and its copies cost no allocation.
#[derive(Clone, PartialEq, Eq)]
pub struct Placement {
    replicas: Replicas,
}

#[derive(Clone, PartialEq, Eq)]
enum Replicas {
    One([ReplicaPlacement; 1]),
    Many(Vec<ReplicaPlacement>),
}

impl Placement {
    pub fn new(replicas: Vec<ReplicaPlacement>) -> Placement {
        match replicas.as_slice() {
            [only] => Placement::one(*only),
            _ => Placement { replicas: Replicas::Many(replicas) },
        }
    }
    pub fn one(replica: ReplicaPlacement) -> Placement {
        Placement { replicas: Replicas::One([replica]) }
    }
    pub fn replicas(&self) -> &[ReplicaPlacement] {
        match &self.replicas {
            Replicas::One(one) => one,
            Replicas::Many(many) => many,
        }
    }
    /// For tests of the invariant checks, which break placements on purpose.
    #[cfg(test)]
    pub(crate) fn replicas_mut(&mut self) -> &mut Vec<ReplicaPlacement> {
        if let Replicas::One([only]) = self.replicas {
            self.replicas = Replicas::Many(vec![only]);
        }
        match &mut self.replicas {
            Replicas::Many(many) => many,
            Replicas::One(_) => unreachable!("converted above"),
        }
    }
    /// Distinct nodes, ascending.
    pub fn nodes(&self) -> Vec<NodeId> {
        let mut nodes: Vec<NodeId> = self.replicas().iter().map(|r| r.node).collect();
        nodes.sort();
        nodes.dedup();
        nodes
    }
}

impl Default for Placement {
    fn default() -> Placement {
        Placement { replicas: Replicas::Many(Vec::new()) }
    }
}

impl fmt::Debug for Placement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.replicas()).finish()
    }
}

impl fmt::Display for Placement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.replicas().iter().enumerate() {
            if i > 0 {
                write!(f, " ")?;
            }
            write!(f, "{}[{}]", r.node, r.gpus)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shortcut agrees with counting by division, capped, on every small case: zero
    /// demands, exact multiples, one short of them, and caps of 0, 1 and more.
    #[test]
    fn counting_up_to_a_cap_is_counting_then_capping() {
        let values = [0u64, 1, 2, 3, 4, 7, 8, 9, 16];
        let mut checked = 0;
        for (have_gpus, need_gpus) in values.iter().flat_map(|a| values.iter().map(move |b| (*a, *b))) {
            for (have_cpu, need_cpu) in [(0u64, 0u64), (1000, 500), (999, 500), (4000, 1000), (0, 1)] {
                for max in [0u32, 1, 2, 3, 8] {
                    let have = Resources::new(have_gpus as u32, have_cpu, 64);
                    let per = Resources::new(need_gpus as u32, need_cpu, 16);
                    let by_division = have.count_fitting(per).min(max);
                    assert_eq!(have.count_fitting_up_to(per, max), by_division, "{have:?} / {per:?} up to {max}");
                    checked += 1;
                }
            }
        }
        assert_eq!(checked, 81 * 5 * 5);
    }

    #[test]
    fn amounts_read_as_gpus_with_decimals_and_others_as_they_are() {
        let gpu = |a| ResourceKind::Gpu.format_amount(a);
        assert_eq!([gpu(0), gpu(2000), gpu(600), gpu(1250), gpu(1005)], ["0", "2", "0.6", "1.25", "1.005"]);
        assert_eq!(ResourceKind::Cpu.format_amount(1500), "1500");
        let share = Resources { gpu_milli: 250, ..Resources::new(0, 0, 0) };
        assert_eq!(ResourceKind::Gpu.format_amount(ResourceKind::Gpu.amount(share)), "0.25");
    }

    #[test]
    fn gpu_sets_are_slot_masks() {
        let set = GpuSet::from_indices([5, 0, 63]).unwrap();
        assert_eq!(set.iter().collect::<Vec<_>>(), vec![0, 5, 63]);
        assert_eq!(set.len(), 3);
        assert_eq!(set.to_string(), "0,5,63");
        assert_eq!(set.lowest(2), GpuSet::from_indices([0, 5]).unwrap());
        assert_eq!(set.lowest(9), set);
        assert_eq!(GpuSet::first(64).len(), 64);
        assert_eq!(GpuSet::first(3).minus(set), GpuSet::from_indices([1, 2]).unwrap());
        assert_eq!(GpuSet::from_indices([64]), Err(GpuSetError::OutOfRange(64)));
        assert_eq!(GpuSet::from_indices([1, 1]), Err(GpuSetError::Duplicate(1)));
    }

    #[test]
    fn one_replica_placements_are_inline() {
        let r = ReplicaPlacement { node: NodeId(3), gpus: GpuSet::from_indices([1, 2]).unwrap() };
        assert_eq!(Placement::new(vec![r]), Placement::one(r));
        assert_eq!(Placement::one(r).to_string(), "node#3[1,2]");
        let two = Placement::new(vec![r, ReplicaPlacement { node: NodeId(1), gpus: GpuSet::first(1) }]);
        assert_eq!(two.replicas().len(), 2);
        assert_eq!(two.nodes(), vec![NodeId(1), NodeId(3)]);
    }
}
