//! Outputs of a scheduling cycle and the reasons a job is pending.

use std::fmt;

use crate::types::{AccountId, GpuModel, JobId, Placement, Priority, ResourceKind, Time};

/// An instruction for the driver. Decisions are already applied to the core's state when
/// they are returned: the driver carries them out and reports back with events.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Start every replica of `job` on the given GPUs.
    Start { job: JobId, placement: Placement },
    /// Ask `victim` to stop for `preemptor`: notice, SIGTERM, and SIGKILL at `deadline`.
    /// The driver reports `Exited` when it is gone; the victim is then requeued. `cause`
    /// says why the victim gives way, for its owner to read.
    Preempt { victim: JobId, preemptor: JobId, deadline: Time, cause: PreemptCause },
    /// Stop a job for good (cancelled, or its run-time limit reached). The driver kills it
    /// and reports `Exited`; the job does not come back.
    Stop { job: JobId, cause: StopCause },
    /// The job's node went away; the driver should kill what is left of it. It is already
    /// back in the queue.
    Requeued { job: JobId, cause: RequeueCause },
}

/// Why a victim gives way to its preemptor: the two ways a job may preempt
/// (`preemption.rs`, eligibility). A victim of lower priority gives way by priority even
/// when its preemptor also reclaims from others in the same plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PreemptCause {
    /// The preemptor's priority is above the victim's.
    Priority,
    /// Both have the same priority: the preemptor's project, within its nominal quota in
    /// `cohort`, takes back GPUs that the victim's project, another member, borrows.
    Reclaim { cohort: AccountId },
}

impl PreemptCause {
    /// A short stable label for metrics and machine-readable notices.
    pub fn label(&self) -> &'static str {
        match self {
            PreemptCause::Priority => "priority",
            PreemptCause::Reclaim { .. } => "reclaim",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopCause {
    Cancelled,
    RuntimeLimit,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RequeueCause {
    NodeRemoved,
}

/// Which of an account's limits an `OverQuota` reason names: a user who set no quota must
/// learn that the limit is their cohort's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LimitSource {
    /// Its hard quota (absolute, as a Kubernetes ResourceQuota).
    Quota,
    /// Its nominal quota plus its borrowing limit in `cohort` (below its hard quota, if it
    /// has one).
    BorrowingLimit { cohort: AccountId },
}

/// Why a job is not running, in machine-readable form. `describe`/`why` and the metrics
/// are built from these; `Display` gives the human sentence.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PendingReason {
    /// Starting the job would take `account` over its cap for `resource`: its hard quota,
    /// or for a project in a cohort its nominal quota plus borrowing limit, whichever is
    /// lower. The figures of this reason and of `CohortExhausted` are amounts
    /// (`ResourceKind::amount`: thousandths of a GPU for GPUs, so that shares show as they
    /// are), written by `ResourceKind::format_amount`.
    /// `limit_from` says which of the two `limit` is.
    OverQuota {
        account: AccountId,
        resource: ResourceKind,
        requested: u64,
        used: u64,
        limit: u64,
        limit_from: LimitSource,
    },
    /// Starting the job would make its project borrow more than `cohort` lends: of the
    /// cohort's `limit` (its members' nominal quotas), `used` is in use or set aside for
    /// members that do not lend it (see `ledger.rs`). `project` is the job's, for
    /// `Scheduler::cohort_most` (a job asking more than that waits for the cohort to change).
    CohortExhausted {
        cohort: AccountId,
        project: AccountId,
        resource: ResourceKind,
        requested: u64,
        used: u64,
        limit: u64,
    },
    /// The job can never start on these nodes, even empty: one replica needs more than any
    /// node of the model has, or the gang has more replicas than all of them together can
    /// hold (`replicas_max`, the most the empty nodes hold, below `replicas`). For a replica
    /// too large, `resource` is the first dimension in which it asks more (`requested`)
    /// than the largest such node has (`largest`, 0 when there is no such node); `None`
    /// when every dimension fits some node but no node has them all, or the replica fits
    /// and the gang does not.
    NeverFits {
        gpus_per_replica: u32,
        gpu_model: Option<GpuModel>,
        resource: Option<ResourceKind>,
        requested: u64,
        largest: u64,
        replicas: u32,
        replicas_max: u32,
    },
    /// No placement now: `gpus_free_max` is the most free GPUs on one schedulable node
    /// of the model, `nodes_matching` how many such nodes there are.
    NoFit { gpus_per_replica: u32, replicas: u32, gpu_model: Option<GpuModel>, gpus_free_max: u32, nodes_matching: u32 },
    /// No placement now for a share of one GPU (`gpu_milli` thousandths): `share_free_max`
    /// is the most thousandths free on one GPU of a schedulable node of the model (1000
    /// when a GPU is free), `nodes_matching` how many such nodes there are.
    NoShareFit { gpu_milli: u32, gpu_model: Option<GpuModel>, share_free_max: u32, nodes_matching: u32 },
    /// Victims were asked to stop for this job; their GPUs are held for it.
    WaitingForPreemption { victims: Vec<JobId> },
    /// No lower-priority, preemptible work could free enough room.
    NoPreemptionCandidates,
    /// Lower-priority work would free enough room, but rule 1 protects it (a minimum run,
    /// an hourly maximum of preemptions); `until`: when the first lower-priority run's
    /// protection ends, and the job is looked at again.
    VictimsProtected { until: Time },
    /// Its class's preemption delay (rule 1) has not passed since it entered the queue: it
    /// waits for free GPUs until `until`, and may preempt from then on.
    PreemptionDelayed { until: Time },
    /// The job's `preemptionPolicy` is `Never`, so it waits for free GPUs.
    PreemptionDisabled,
    /// A job ahead in the queue is waiting for GPUs and the policy does not backfill.
    BlockedBehind { job: JobId, priority: Priority },
    /// The per-cycle preemption budget was spent on jobs ahead of this one.
    PreemptionBudgetExhausted,
    /// Submitted since the last cycle, or not reached by it (start limit).
    NotYetConsidered,
    /// It would fit now, but starting it would delay the reservation of `job`, ranked above
    /// it, expected to start by `at` (see `plan.rs`: it would run past then on the room the
    /// reservation needs).
    HeldForReservation { job: JobId, at: Time },
}

impl PendingReason {
    /// A short stable label for metrics.
    pub fn label(&self) -> &'static str {
        match self {
            PendingReason::OverQuota { .. } => "over_quota",
            PendingReason::CohortExhausted { .. } => "cohort_exhausted",
            PendingReason::NeverFits { .. } => "never_fits",
            PendingReason::NoFit { .. } | PendingReason::NoShareFit { .. } => "no_fit",
            PendingReason::WaitingForPreemption { .. } => "waiting_for_preemption",
            PendingReason::NoPreemptionCandidates => "no_preemption_candidates",
            PendingReason::VictimsProtected { .. } => "victims_protected",
            PendingReason::PreemptionDelayed { .. } => "preemption_delayed",
            PendingReason::PreemptionDisabled => "preemption_disabled",
            PendingReason::BlockedBehind { .. } => "blocked_behind_higher_priority",
            PendingReason::PreemptionBudgetExhausted => "preemption_budget_exhausted",
            PendingReason::NotYetConsidered => "not_yet_considered",
            PendingReason::HeldForReservation { .. } => "held_for_reservation",
        }
    }
}

impl fmt::Display for PendingReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PendingReason::OverQuota { account, resource, requested, used, limit, limit_from } => {
                let [requested, used, limit] = [requested, used, limit].map(|a| resource.format_amount(*a));
                let (what, whose) = match limit_from {
                    LimitSource::Quota => ("over quota", String::new()),
                    LimitSource::BorrowingLimit { cohort } => ("over its borrowing limit", format!(" in {cohort}")),
                };
                write!(f, "{what}: {account} uses {used} of {limit} {}{whose}, job asks {requested}", resource.name())
            }
            PendingReason::CohortExhausted { cohort, resource, requested, used, limit, .. } => {
                let [requested, used, limit] = [requested, used, limit].map(|a| resource.format_amount(*a));
                write!(
                    f,
                    "cohort exhausted: {used} of {cohort}'s {limit} {} are in use or set aside for their owners, job asks {requested}",
                    resource.name()
                )
            }
            PendingReason::NeverFits { gpus_per_replica, gpu_model, replicas, replicas_max, .. }
                if *replicas_max > 0 =>
            {
                write!(
                    f,
                    "the nodes{} can never hold {replicas} replicas of {gpus_per_replica} GPUs at once: at most {replicas_max} when empty",
                    model_suffix(*gpu_model)
                )
            }
            PendingReason::NeverFits { gpus_per_replica, gpu_model, resource, requested, largest, .. } => {
                match resource {
                    Some(ResourceKind::Gpu) => write!(
                        f,
                        "no node{} can ever hold a replica of {gpus_per_replica} GPUs (the largest has {largest})",
                        model_suffix(*gpu_model)
                    ),
                    Some(kind) => write!(
                        f,
                        "no node{} can ever hold a replica: it asks {requested} {}, the largest node has {largest}",
                        model_suffix(*gpu_model),
                        kind.name()
                    ),
                    None => write!(
                        f,
                        "no node{} has at once all that a replica asks ({gpus_per_replica} GPUs and its CPU and memory)",
                        model_suffix(*gpu_model)
                    ),
                }
            }
            PendingReason::NoFit { gpus_per_replica, replicas, gpu_model, gpus_free_max, nodes_matching } => write!(
                f,
                "no room: needs {replicas}x{gpus_per_replica} GPUs{}; most free on one node is {gpus_free_max} (of {nodes_matching} nodes)",
                model_suffix(*gpu_model)
            ),
            PendingReason::NoShareFit { gpu_milli, gpu_model, share_free_max, nodes_matching } => write!(
                f,
                "no room: needs {gpu_milli}/1000 of one GPU{}; the most free on one GPU is {share_free_max}/1000 (of {nodes_matching} nodes)",
                model_suffix(*gpu_model)
            ),
            PendingReason::WaitingForPreemption { victims } => {
                write!(f, "waiting for preemption of")?;
                for v in victims {
                    write!(f, " {v}")?;
                }
                Ok(())
            }
            PendingReason::NoPreemptionCandidates => {
                write!(f, "no lower-priority preemptible jobs would free enough room")
            }
            PendingReason::VictimsProtected { until } => write!(
                f,
                "the lower-priority work that would make room is protected from preemption (its class's minimum run or hourly limit); the first protection ends at {until}"
            ),
            PendingReason::PreemptionDelayed { until } => write!(
                f,
                "waits for free GPUs before preempting (its class's preemption delay, or that of the job ahead of it with the same tier, tenant and shape); may preempt from {until}"
            ),
            PendingReason::PreemptionDisabled => write!(f, "preemptionPolicy is Never: waits for free GPUs"),
            PendingReason::BlockedBehind { job, priority } => {
                write!(f, "blocked behind {job} (priority {priority}) which is waiting for GPUs")
            }
            PendingReason::PreemptionBudgetExhausted => write!(f, "preemption budget of this cycle spent"),
            PendingReason::NotYetConsidered => write!(f, "not yet considered by a scheduling cycle"),
            PendingReason::HeldForReservation { job, at } => {
                write!(f, "held for a reservation: it would delay {job}, ranked above it, expected to start by {at}")
            }
        }
    }
}

fn model_suffix(model: Option<GpuModel>) -> String {
    match model {
        Some(m) => format!(" of {m}"),
        None => String::new(),
    }
}
