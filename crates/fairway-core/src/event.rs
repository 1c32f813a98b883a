//! Inputs to the core. Drivers turn what happened (an API call, a process exit, a trace row)
//! into one of these and hand it to [`crate::Scheduler::apply`] with the current time.

use crate::decision::StopCause;
use crate::types::{
    AccountId, ImageId, JobId, JobSpec, NodeId, NodeSpec, NominalQuota, Placement, Quota, RecentUsage, Time,
};

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// A new job enters the queue. Its queue position is its submit time, then its id.
    Submit(JobSpec),
    /// A job a driver already knew before it (re)started the core, e.g. after a daemon
    /// restart: pending at its original queue position, or running where it runs now.
    Restore(RestoredJob),
    /// After every job is restored: a pending preemptor's hold on the GPUs of its victims,
    /// as it was (see [`RestoredHold`]).
    RestoreHold(RestoredHold),
    /// Remove a job wherever it is. A running job gets a `Stop` decision.
    Cancel(JobId),
    /// A job the core started (or asked to stop) has exited.
    Exited {
        job: JobId,
        outcome: ExitOutcome,
    },
    /// The job saved a checkpoint at the given time (progress up to then is safe).
    CheckpointReported {
        job: JobId,
        at: Time,
    },
    NodeAdded(NodeSpec),
    /// The node is gone: jobs on it are requeued (their processes are lost with it).
    NodeRemoved(NodeId),
    /// No new work is placed on the node; running work continues.
    NodeDrained(NodeId),
    /// Undo a drain.
    NodeUncordoned(NodeId),
    /// The container images a node holds now (all of them: the list replaces the last one;
    /// at most [`IMAGES_PER_NODE_MAX`]). Placement prefers a node holding a job's image.
    NodeImages {
        node: NodeId,
        images: Vec<ImageId>,
    },
    /// Set (or with `None` clear) an account's hard cap. Lowering a cap evicts nobody.
    SetQuota {
        account: AccountId,
        quota: Option<Quota>,
    },
    /// Give a project a place in a cohort (nominal quota, borrowing and lending limits), or
    /// with `None` take it out of its cohort; see `ledger.rs`. As with `SetQuota`, a lower
    /// nominal quota evicts nobody by itself, but a member within its nominal quota may then
    /// reclaim what others borrow (rule 1 in `preemption.rs`).
    SetNominalQuota {
        project: AccountId,
        nominal: Option<NominalQuota>,
    },
    /// Set an account's fair-share weight (1 unless set; at least 1): inside one priority, a
    /// tenant of weight 2 is served as if it held half of what it holds (see `fairshare.rs`).
    /// Without fair sharing in the policy the weight is kept but changes nothing.
    SetFairShareWeight {
        account: AccountId,
        weight: u32,
    },
    /// After a restart, once every job is restored: an account's recent average holding as
    /// the driver saved it at `as_of` (`Scheduler::recent_usage`), so that a tenant that
    /// burst before the restart still yields after it. From `as_of` on it moves toward
    /// what the account holds now, as if it had held that since: the runs a restarted
    /// driver adopts ran on meanwhile. Without fair sharing in the policy it is ignored.
    RestoreRecentUsage {
        account: AccountId,
        recent: RecentUsage,
        as_of: Time,
    },
}

/// The most images a node may report (`Event::NodeImages`).
pub const IMAGES_PER_NODE_MAX: usize = 4096;

/// How a job's process ended, as the driver saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitOutcome {
    /// Ran to completion. The job leaves the core.
    Succeeded,
    /// Failed and the driver will not retry it. The job leaves the core.
    Failed,
    /// Put the job back in the queue at its original position (a retry, or a process lost
    /// outside the core's knowledge). A job the core was preempting is always requeued,
    /// whatever outcome the driver reports, unless the outcome is `Succeeded`.
    Requeue,
}

/// What a driver remembers of a job across a restart of the core.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RestoredJob {
    pub spec: JobSpec,
    /// Its original submit time: its place in the queue.
    pub submitted_at: Time,
    /// Run time of finished runs (for the run-time limit).
    pub runtime_done_ms: u64,
    pub preemptions: u32,
    /// When it was chosen as a victim, as far as the driver knows (the last hour is enough):
    /// rule 1's hourly cap counts them across the restart, and a pending job's preemption
    /// delay counts from the last of them (about when it re-entered the queue).
    pub preempted_at: Vec<Time>,
    pub last_checkpoint: Option<Time>,
    /// `Some` when its process is still alive: it keeps its GPUs.
    pub running: Option<RestoredRun>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RestoredRun {
    pub placement: Placement,
    pub started_at: Time,
    /// Set when it had been asked to stop: it stays on its way out, with its original
    /// deadline, instead of counting as running (and being chosen as a victim again).
    pub stopping: Option<RestoredStop>,
}

/// A stop under way when the driver restarted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RestoredStop {
    /// Preempted for `preemptor`: requeued when it exits.
    Preempted { preemptor: JobId, deadline: Time },
    /// Stopped for good: removed when it exits.
    Stopped(StopCause),
}

/// A preemptor's hold as it was: the slots reserved for it and the victims it waits for.
/// Restored only if every slot is free or owned by one of those victims still on its way
/// out for it, and none is held for another job; otherwise the preemptor simply queues.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RestoredHold {
    pub preemptor: JobId,
    pub placement: Placement,
    pub victims: Vec<JobId>,
}
