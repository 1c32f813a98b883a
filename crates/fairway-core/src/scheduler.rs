//! The [`Scheduler`]: state plus the event handlers. The cycle is in `cycle.rs`, the
//! victim search in `preemption.rs`, the invariant checks in `invariants.rs`.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet};

use crate::cluster::{Node, Nodes};
use crate::config::{Config, QueueOrder};
use crate::decision::{Decision, PendingReason, RequeueCause, StopCause};
use crate::event::{Event, ExitOutcome};
use crate::fairshare::FairShares;
use crate::ids::{JobIx, QueueKey};
use crate::jobs::JobStore;
use crate::ledger::{self, CHARGED_ACCOUNTS_MAX, Grandfathered, Ledger};
use crate::model::{self, Job, JobState, MovedToHold, Reservation, Termination};
use crate::preemption::SearchScratch;
use crate::queue::{Changes, PendingQueue};
use crate::types::{
    AccountId, GpuSet, JobId, JobSpec, NodeId, NodeSpec, NominalQuota, Placement, Priority, Quota, RecentUsage,
    ReplicaPlacement, Resources, Time,
};
use crate::victims::{self, VictimEntry, VictimTallies};

/// Errors for events that do not fit the core's state: driver bugs or races, never user
/// input problems (those are caught by `fairway-spec`).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CoreError {
    #[error("{0} is already known")]
    DuplicateJob(JobId),
    #[error("{0} is not known")]
    UnknownJob(JobId),
    #[error("{0} is not running, so it cannot exit")]
    NotRunning(JobId),
    #[error("{0} is already known")]
    DuplicateNode(NodeId),
    #[error("{0} is not known")]
    UnknownNode(NodeId),
    #[error("invalid job {job}: {reason}")]
    InvalidJob { job: JobId, reason: String },
    #[error("invalid node {node}: {reason}")]
    InvalidNode { node: NodeId, reason: String },
    #[error("queue full: {jobs_max} jobs held")]
    QueueFull { jobs_max: u32 },
    #[error("invalid fair-share weight for {account}: {reason}")]
    InvalidWeight { account: AccountId, reason: String },
    #[error("invalid nominal quota for {project}: {reason}")]
    InvalidNominalQuota { project: AccountId, reason: String },
}

impl CoreError {
    /// A stable label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            CoreError::DuplicateJob(_) => "duplicate_job",
            CoreError::UnknownJob(_) => "unknown_job",
            CoreError::NotRunning(_) => "not_running",
            CoreError::DuplicateNode(_) => "duplicate_node",
            CoreError::UnknownNode(_) => "unknown_node",
            CoreError::InvalidJob { .. } => "invalid_job",
            CoreError::InvalidNode { .. } => "invalid_node",
            CoreError::QueueFull { .. } => "queue_full",
            CoreError::InvalidWeight { .. } => "invalid_weight",
            CoreError::InvalidNominalQuota { .. } => "invalid_nominal_quota",
        }
    }
}

/// A pending job's reservation (see `Scheduler::reservations`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedStart {
    pub job: JobId,
    /// When the GPUs it needs are expected to be free.
    pub at: Time,
    /// What it reserves on each node it would start on.
    pub nodes: Vec<(NodeId, Resources)>,
}

/// A job's state as the outside world sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JobStatus<'a> {
    Pending { reasons: Vec<PendingReason>, reserved: Option<&'a Placement> },
    Running { placement: &'a Placement, started_at: Time },
    Preempting { placement: &'a Placement, preemptor: JobId, deadline: Time },
    Stopping { placement: &'a Placement, cause: StopCause },
}

/// Counters since creation; drivers turn them into metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    pub cycles: u64,
    pub starts: u64,
    pub preemptions: u64,
    /// Preemptions of them that were reclaims in a cohort (`PreemptCause::Reclaim`).
    pub reclaims: u64,
    pub requeues: u64,
    pub finished: u64,
    /// Victim searches run (successful or not).
    pub preemption_searches: u64,
    /// Pending jobs considered by cycles.
    pub jobs_considered: u64,
    /// Preemptors that started on room freed elsewhere before their victims had gone.
    pub preemptors_moved: u64,
    /// Starts taken back in the cycle that made them, their job chosen as a victim there
    /// (not counted in `starts` or `preemptions`).
    pub starts_taken_back: u64,
}

pub struct Scheduler {
    pub(crate) config: Config,
    /// In id order, with the free index.
    pub(crate) nodes: Nodes,
    pub(crate) jobs: JobStore,
    /// Pending jobs in scheduling order, grouped by equivalence.
    pub(crate) queue: PendingQueue,
    /// Running preemptible work by priority, for the victim search's first tests; with the
    /// nodes' victim lists, the victim index (`victims.rs`). Kept only when the policy preempts.
    pub(crate) tallies: VictimTallies,
    /// Scratch space of the victim search, kept between searches.
    pub(crate) search_scratch: SearchScratch,
    /// Recent arrivals' asks, for the packing policies that learn the typical asks
    /// (`Policy::packing`: FGD, Fairway).
    pub(crate) arrivals: crate::free_room::Arrivals,
    /// The nodes where room grew since the last cycle (positions), for this cycle's wakes.
    pub(crate) grown_nodes: Vec<crate::ids::NodeIx>,
    /// The cycle's memo of answers, kept for its allocations.
    pub(crate) cycle_memo: crate::cycle::CycleMemo,
    /// The fair order's buffers, kept from one walk to the next (see `cycle.rs`).
    pub(crate) fair_level: crate::cycle::FairLevel,
    /// Scratch for the groups `wake_reclaimers` wakes, kept between cycles.
    pub(crate) reclaimers_woken: Vec<crate::ids::GroupIx>,
    /// The grown nodes summed up for the wake-up pass, kept for its allocations.
    pub(crate) grown_snapshot: crate::cycle::GrownSnapshot,
    /// Jobs asked to stop that still hold their GPUs.
    pub(crate) terminating: BTreeSet<JobIx>,
    /// Pending jobs that hold a reservation, in id order (the order they start in).
    pub(crate) reserving: BTreeMap<JobId, JobIx>,
    /// Those of them whose victims have all exited: the next cycle starts them.
    pub(crate) ready_preemptors: BTreeSet<JobId>,
    /// Run-time limit deadlines of running jobs.
    pub(crate) runtime_deadlines: BTreeSet<(Time, JobId, JobIx)>,
    /// When running victims stop being protected from preemption (rule 1): each end is
    /// room a waiting preemptor may take, so the nodes count as grown then.
    pub(crate) protection_ends: BTreeSet<(Time, JobId, JobIx)>,
    /// The quota ledger (owns "usage within quota").
    pub(crate) ledger: Ledger,
    /// What each account holds and held recently, for fair sharing inside a priority.
    pub(crate) fair: FairShares,
    /// Decisions produced by events (stops, requeues), handed out by the next cycle.
    pub(crate) outbox: Vec<Decision>,
    pub(crate) counters: Counters,
    /// What changed since the last cycle woke sleeping groups (room, accounts, victims).
    pub(crate) changes: Changes,
    /// Under strict order, the job that blocked the last cycle's walk.
    pub(crate) blocked_by: Option<(QueueKey, Priority)>,
    /// When the last cycle left a preemptor waiting for a per-cycle budget (searches or
    /// victims, rule 7): it wants the next cycle soon, not at the next event.
    pub(crate) budget_spent_at: Option<Time>,
    /// The projects whose runs this cycle reclaimed so far (preemption rule 8 keeps their
    /// starts of the cycle: those reclaims may have counted on them).
    pub(crate) reclaimed_in_cycle: Vec<AccountId>,
    /// Reservations of pending jobs that cannot start, in queue order (see `plan.rs`).
    pub(crate) plan: Vec<crate::plan::Planned>,
    /// Completed run times per tenant, to estimate run times from (see `estimate.rs`).
    pub(crate) history: crate::estimate::RunHistory,
    /// Running jobs by when their runs are expected to end (`Job::expected_end`, see
    /// `plan.rs`), to revise those past it. Kept only when the policy makes reservations
    /// (`tracks_run_ends`), with each node's list of its placed jobs' ends (`Node::ends`:
    /// terminating jobs too, a preempted one at its grace deadline, one stopped at its
    /// start).
    pub(crate) run_ends: crate::plan::RunEnds,
    /// Scratch of `revise_run_ends`: the entries of `run_ends` due.
    pub(crate) run_ends_due: Vec<crate::plan::RunEnd>,
    /// Bumped by every change to `run_ends`.
    pub(crate) run_ends_version: u64,
    /// The (`Nodes::version`, `run_ends_version`) the plan was last computed from.
    pub(crate) plan_read: Option<(u64, u64)>,
    /// Per reservation's job, what its last computation learnt of each node (`plan.rs`).
    pub(crate) hosting: BTreeMap<JobId, crate::plan::Hosting>,
    /// Those of reservations gone, kept for the next (see `plan.rs`).
    pub(crate) spare_hostings: Vec<crate::plan::Hosting>,
    /// An empty plan whose buffer the next `refresh_plan` fills (see `plan.rs`).
    pub(crate) plan_spare: Vec<crate::plan::Planned>,
}

impl Scheduler {
    pub fn new(config: Config) -> Scheduler {
        let fair = FairShares::new(config.policy.fair_share.map(|f| f.half_life_ms));
        // Only a reservation's plan reads the nodes' change log.
        let nodes = Nodes::with_change_log(config.policy.reservations.is_some());
        Scheduler {
            config,
            nodes,
            jobs: JobStore::default(),
            queue: PendingQueue::default(),
            tallies: VictimTallies::default(),
            search_scratch: SearchScratch::default(),
            arrivals: Default::default(),
            plan: Vec::new(),
            history: Default::default(),
            run_ends: Default::default(),
            run_ends_due: Vec::new(),
            run_ends_version: 0,
            plan_read: None,
            hosting: BTreeMap::new(),
            spare_hostings: Vec::new(),
            plan_spare: Vec::new(),
            grown_nodes: Vec::new(),
            cycle_memo: Default::default(),
            fair_level: Default::default(),
            reclaimers_woken: Vec::new(),
            grown_snapshot: Default::default(),
            terminating: BTreeSet::new(),
            reserving: BTreeMap::new(),
            ready_preemptors: BTreeSet::new(),
            runtime_deadlines: BTreeSet::new(),
            protection_ends: BTreeSet::new(),
            ledger: Ledger::default(),
            fair,
            outbox: Vec::new(),
            counters: Counters::default(),
            changes: Changes::default(),
            blocked_by: None,
            budget_spent_at: None,
            reclaimed_in_cycle: Vec::new(),
        }
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// From now on, keep a record of every victim search (for tests that check the choice
    /// against a reference; costs a copy of the candidates per search).
    pub fn record_searches(&mut self) {
        self.search_scratch.records.get_or_insert_with(Vec::new);
        self.search_scratch.wide_records.get_or_insert_with(Vec::new);
    }

    /// The one-replica searches recorded since the last call.
    pub fn take_search_records(&mut self) -> Vec<crate::search::SearchRecord> {
        self.search_scratch.records.as_mut().map(std::mem::take).unwrap_or_default()
    }

    /// The searches over the whole cluster (gangs, jobs over quota) recorded since the last
    /// call.
    pub fn take_wide_search_records(&mut self) -> Vec<crate::search::WideSearchRecord> {
        self.search_scratch.wide_records.as_mut().map(std::mem::take).unwrap_or_default()
    }

    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// Apply one event at time `now`. On error nothing has changed.
    pub fn apply(&mut self, event: Event, now: Time) -> Result<(), CoreError> {
        match event {
            Event::Submit(spec) => self.submit(spec, now),
            Event::Restore(job) => self.restore(job),
            Event::RestoreHold(hold) => self.restore_hold(hold),
            Event::Cancel(job) => self.cancel(job),
            Event::Exited { job, outcome } => self.exited(job, outcome, now),
            Event::CheckpointReported { job: id, at } => {
                let ix = self.jobs.ix_of(id).ok_or(CoreError::UnknownJob(id))?;
                let job = &mut self.jobs[ix];
                job.last_checkpoint = Some(job.last_checkpoint.map_or(at, |t| t.max(at)));
                self.checkpoint_victim_entries(ix);
                Ok(())
            }
            Event::NodeAdded(spec) => self.add_node(spec),
            Event::NodeRemoved(node) => self.remove_node(node, now),
            Event::NodeDrained(node) => self.set_schedulable(node, false),
            Event::NodeUncordoned(node) => self.set_schedulable(node, true),
            Event::NodeImages { node, images } => self.set_node_images(node, images),
            Event::SetQuota { account, quota } => {
                self.set_quota(account, quota);
                Ok(())
            }
            Event::SetNominalQuota { project, nominal } => self.set_nominal_quota(project, nominal),
            Event::SetFairShareWeight { account, weight } => {
                if weight == 0 {
                    let reason = "weight: must be at least 1, got 0".to_string();
                    return Err(CoreError::InvalidWeight { account, reason });
                }
                self.fair.set_weight(account, weight);
                Ok(())
            }
            Event::RestoreRecentUsage { account, recent, as_of } => {
                self.fair.restore_recent(account, recent, as_of);
                Ok(())
            }
        }
    }

    // ---- queries -------------------------------------------------------------------

    pub fn job_status(&self, id: JobId) -> Option<JobStatus<'_>> {
        let job = self.jobs.get(id)?;
        Some(match &job.state {
            JobState::Pending { reservation } => {
                JobStatus::Pending { reasons: self.why(id), reserved: reservation.as_ref().map(|r| &r.placement) }
            }
            JobState::Running { placement, started_at } => JobStatus::Running { placement, started_at: *started_at },
            JobState::Terminating { placement, why: Termination::Preempted { preemptor, deadline }, .. } => {
                JobStatus::Preempting { placement, preemptor: *preemptor, deadline: *deadline }
            }
            JobState::Terminating { placement, why: Termination::Stopped(cause), .. } => {
                JobStatus::Stopping { placement, cause: *cause }
            }
        })
    }

    /// `CohortExhausted` as it stands now, where the job's cohort is beyond what its members
    /// lend with the victims moved to holds still on their way out.
    pub(crate) fn cohort_over_now_reason(&self, spec: &JobSpec) -> Option<(AccountId, PendingReason)> {
        let (project, total) = (spec.project, spec.total());
        let (cohort, resource, used, limit) = self.ledger.over_cohort_now(project, total)?;
        let requested = resource.amount(total);
        Some((cohort, PendingReason::CohortExhausted { cohort, project, resource, requested, used, limit }))
    }

    /// Why a pending job is not running, as of the last cycle (empty for other states or
    /// unknown jobs).
    pub fn why(&self, id: JobId) -> Vec<PendingReason> {
        let Some(job) = self.jobs.get(id) else { return Vec::new() };
        let JobState::Pending { reservation } = &job.state else { return Vec::new() };
        if let Some(r) = reservation {
            let victims = self.still_terminating(id, &r.victims);
            // Its victims gone, it waits for victims moved to holds of its cohort to leave
            // (`Ledger::over_cohort_now`): the cohort's level as they count.
            if victims.is_empty()
                && let Some((_, reason)) = self.cohort_over_now_reason(&job.spec)
            {
                return vec![reason];
            }
            return vec![PendingReason::WaitingForPreemption { victims }];
        }
        if let Some((blocker, priority)) = self.blocked_by
            && job.key > blocker
        {
            return vec![PendingReason::BlockedBehind { job: blocker.id, priority }];
        }
        match job.queued_in.and_then(|gix| self.queue.group(gix).verdict.as_ref()) {
            Some(verdict) => verdict.reasons.iter().map(|r| self.live_reason(r)).collect(),
            None => vec![PendingReason::NotYetConsidered],
        }
    }

    /// A verdict's reason with its figures as of now: a group sleeps until something that
    /// concerns it changes, so the free room it saw when it failed may have changed since.
    fn live_reason(&self, reason: &PendingReason) -> PendingReason {
        match *reason {
            PendingReason::NoFit { gpus_per_replica, replicas, gpu_model, .. } => {
                let (gpus_free_max, nodes_matching) = self.nodes.index.summary(gpu_model);
                PendingReason::NoFit { gpus_per_replica, replicas, gpu_model, gpus_free_max, nodes_matching }
            }
            PendingReason::NoShareFit { gpu_milli, gpu_model, .. } => self.no_share_fit(gpu_milli, gpu_model),
            PendingReason::OverQuota { account, resource, requested, used, limit, limit_from } => {
                let now = self.ledger.get(account);
                let used = now.map_or(used, |a| resource.amount(a.charged));
                let limit_now = now.and_then(|a| Some((a.cap_amount(resource)?, a.limit_source(resource))));
                let (limit, limit_from) = limit_now.unwrap_or((limit, limit_from));
                PendingReason::OverQuota { account, resource, requested, used, limit, limit_from }
            }
            PendingReason::CohortExhausted { cohort, project, resource, requested, used, limit } => {
                let now = self.ledger.get(cohort).filter(|a| a.cohort.is_some());
                // Counting the victims moved to holds still on their way out, which may be
                // what holds it back (`Ledger::over_cohort_now`).
                let used = self.ledger.cohort_level_now(cohort, resource).unwrap_or(used);
                let limit = now.and_then(|a| a.cap_amount(resource)).unwrap_or(limit);
                PendingReason::CohortExhausted { cohort, project, resource, requested, used, limit }
            }
            ref other => other.clone(),
        }
    }

    /// The victims still terminating for `preemptor`. A victim that exited was requeued and
    /// may already run again elsewhere, or be terminating for another preemptor: it holds
    /// nothing of `preemptor`'s any more, and must not keep the preemptor waiting.
    pub(crate) fn still_terminating(&self, preemptor: JobId, victims: &[JobId]) -> Vec<JobId> {
        victims
            .iter()
            .copied()
            .filter(|v| {
                self.jobs.get(*v).is_some_and(|j| {
                    matches!(j.state, JobState::Terminating { why: Termination::Preempted { preemptor: p, .. }, .. } if p == preemptor)
                })
            })
            .collect()
    }

    /// Pending jobs in the order the next cycle considers them.
    pub fn pending(&self) -> impl Iterator<Item = JobId> + '_ {
        self.queue.in_order()
    }

    /// The reservations of jobs that cannot start (see `plan.rs`), in queue order, as the
    /// last cycle left them: each job, when it is expected to start, and what it reserves on
    /// which nodes.
    pub fn reservations(&self) -> Vec<PlannedStart> {
        self.plan
            .iter()
            .map(|p| PlannedStart { job: p.id, at: p.at, nodes: p.nodes.iter().map(|&(n, r, _)| (n, r)).collect() })
            .collect()
    }

    /// The reservation a pending job holds now, if it holds one (the plan is at most
    /// `reservations.count` long).
    pub fn reservation_of(&self, job: JobId) -> Option<PlannedStart> {
        self.plan.iter().find(|p| p.id == job).map(|p| PlannedStart {
            job: p.id,
            at: p.at,
            nodes: p.nodes.iter().map(|&(n, r, _)| (n, r)).collect(),
        })
    }

    pub fn pending_count(&self) -> usize {
        self.queue.len()
    }

    pub fn job_count(&self) -> usize {
        self.jobs.len()
    }

    pub fn job_spec(&self, id: JobId) -> Option<&JobSpec> {
        self.jobs.get(id).map(|j| &j.spec)
    }

    /// Times this job has been preempted so far.
    pub fn preemptions_of(&self, id: JobId) -> Option<u32> {
        self.jobs.get(id).map(|j| j.preemptions)
    }

    /// GPUs on nodes (schedulable or not) and GPUs assigned to jobs.
    pub fn gpu_totals(&self) -> (u32, u32) {
        let total = self.nodes.iter().map(|n| n.spec.capacity.gpus).sum();
        let used = self.nodes.iter().map(|n| n.owned.len()).sum();
        (total, used)
    }

    /// A node's GPU slots that no job owns and none is held for: where a driver may restore
    /// a job it found running without the core (another scheduler's pod). `None` for an
    /// unknown node.
    pub fn node_free_slots(&self, node: NodeId) -> Option<GpuSet> {
        self.nodes.get(node).map(|n| n.free_slots())
    }

    /// Whether nothing runs, terminates or is held on a node (`None` for an unknown node).
    pub fn node_idle(&self, node: NodeId) -> Option<bool> {
        self.nodes.get(node).map(|n| n.owned.is_empty() && n.held.is_empty() && n.used == Resources::ZERO)
    }

    /// What is charged to an account and its cap.
    pub fn account_usage(&self, account: AccountId) -> (Resources, Option<Quota>) {
        self.ledger.usage(account)
    }

    /// The most of `kind` a member of a cohort can ever hold there, whatever else runs: the
    /// cohort's capacity less what its other members keep unlent (their guarantees). A job
    /// held by `PendingReason::CohortExhausted` that asks more (in the same unit as that
    /// reason's amounts) waits until the cohort changes, not until work ends. `None` for a
    /// project in no cohort, or a resource its cohort does not govern.
    pub fn cohort_most(&self, project: AccountId, kind: crate::types::ResourceKind) -> Option<u64> {
        self.ledger.cohort_most(project, kind)
    }

    /// With fair sharing on, an account's share at `now` (`fairshare.rs`): the weighted
    /// dominant share of what it holds plus what it held recently, the figure that orders
    /// the tenants of a tier (least first). `None` with fair sharing off.
    pub fn fair_share(&self, account: AccountId, now: Time) -> Option<f64> {
        self.fair.enabled().then(|| self.fair.share(account, now))
    }

    /// An account's fair-share weight (1 unless set; kept with fair sharing off too).
    pub fn fair_share_weight(&self, account: AccountId) -> u32 {
        self.fair.weight(account)
    }

    /// With fair sharing on, every account's recent average holding at `now` that is not
    /// nil, in account order: what a driver saves to hand back after a restart
    /// (`Event::RestoreRecentUsage`). Empty with fair sharing off.
    pub fn recent_usage(&self, now: Time) -> Vec<(AccountId, RecentUsage)> {
        self.fair.recent_usage(now)
    }

    /// A cohort's level (what its members use, and what their guarantees set aside unused)
    /// and capacity (their nominal quotas); `None` if `cohort` has no members.
    pub fn cohort_usage(&self, cohort: AccountId) -> Option<(Resources, Quota)> {
        let account = self.ledger.get(cohort)?;
        Some((account.level(), account.cohort.as_ref()?.capacity))
    }

    /// Does a project in a cohort use more than its nominal quota (what others may reclaim)?
    pub fn borrowing(&self, project: AccountId) -> bool {
        let Some(cohort) = self.ledger.cohort_of(project).and_then(|c| self.ledger.cohort(c)) else { return false };
        self.ledger.get(project).is_some_and(|a| a.borrowing(cohort))
    }

    /// The earliest time the core wants a cycle even if no event arrives: a run-time limit,
    /// a running job's protection from preemption ending (a preemptor may be waiting), a
    /// waiting job's preemption delay ending, or, 1 ms after a cycle whose preemption budget
    /// ran out, the next cycle.
    pub fn next_wakeup(&self) -> Option<Time> {
        let deadline = self.runtime_deadlines.first().map(|(t, ..)| *t);
        let protection = self.protection_ends.first().map(|(t, ..)| *t);
        let delay = self.queue.first_timed_wake();
        let budget = self.budget_spent_at.map(|t| t.plus_ms(1));
        [deadline, protection, delay, budget].into_iter().flatten().min()
    }

    // ---- event handlers --------------------------------------------------------------

    pub(crate) fn submit(&mut self, spec: JobSpec, now: Time) -> Result<(), CoreError> {
        if self.jobs.contains(spec.id) {
            return Err(CoreError::DuplicateJob(spec.id));
        }
        if self.jobs.len() >= self.config.limits.jobs_max as usize {
            return Err(CoreError::QueueFull { jobs_max: self.config.limits.jobs_max });
        }
        let invalid = |reason: String| Err(CoreError::InvalidJob { job: spec.id, reason });
        if spec.replicas == 0 {
            return invalid("replicas must be at least 1".into());
        }
        if spec.replicas > self.config.limits.replicas_max {
            return invalid(format!("replicas {} above the limit {}", spec.replicas, self.config.limits.replicas_max));
        }
        if spec.per_replica.is_share() {
            if spec.per_replica.gpu_milli >= 1000 {
                return invalid(format!(
                    "gpu_milli: {} is not below 1000: a share is part of one GPU (whole GPUs: gpus)",
                    spec.per_replica.gpu_milli
                ));
            }
            if spec.per_replica.gpus > 0 {
                return invalid("gpu_milli: a replica asks for a share of one GPU or for whole GPUs, not both".into());
            }
            if spec.replicas > 1 {
                return invalid(
                    "gpu_milli: a share of one GPU is for one-replica jobs; a gang takes whole GPUs".into(),
                );
            }
        }
        if spec.per_replica.gpus > self.gpus_per_node_max() {
            return invalid(format!("{} GPUs per replica above the per-node limit", spec.per_replica.gpus));
        }
        let (rank, expected_ms) = match self.config.policy.order {
            QueueOrder::Fifo => (Reverse(0), 0),
            QueueOrder::Priority => (Reverse(spec.priority), 0),
            QueueOrder::PriorityShortestFirst => {
                (Reverse(spec.priority), spec.max_runtime_ms.or(spec.runtime_estimate_ms).unwrap_or(u64::MAX))
            }
        };
        if self.config.policy.packing.is_some_and(|p| p.needs_workload_model())
            && let Some(ask) = crate::free_room::ask_of(spec.per_replica, spec.gpu_model)
        {
            self.arrivals.note(ask);
        }
        let ix = self.jobs.next_ix();
        let key = QueueKey { rank, expected_ms, submitted_at: now, id: spec.id, ix };
        let job = Job {
            spec,
            key,
            queued_in: None,
            state: JobState::Pending { reservation: None },
            runtime_done_ms: 0,
            last_checkpoint: None,
            preemptions: 0,
            preempted_at: Vec::new(),
            cancelled: false,
            queued_at: now,
            moved_to_hold: None,
            expected_end: Time::ZERO,
            started_in_cycle: 0,
        };
        let gk = job.group_key();
        self.jobs.insert(job);
        self.jobs[ix].queued_in = Some(self.queue.insert(key, gk));
        Ok(())
    }

    /// GPUs one node may have: the configured limit, and never more than a slot mask holds.
    pub(crate) fn gpus_per_node_max(&self) -> u32 {
        self.config.limits.gpus_per_node_max.min(GpuSet::SLOTS_MAX)
    }

    fn cancel(&mut self, id: JobId) -> Result<(), CoreError> {
        let ix = self.jobs.ix_of(id).ok_or(CoreError::UnknownJob(id))?;
        let job = &mut self.jobs[ix];
        match &mut job.state {
            JobState::Pending { .. } => {
                self.drop_reservation(ix);
                let job = self.jobs.remove(ix);
                self.queue.remove(&job.key, job.queued_in.expect("a pending job is queued"));
            }
            JobState::Running { .. } => {
                self.begin_termination(ix, Termination::Stopped(StopCause::Cancelled));
                self.outbox.push(Decision::Stop { job: id, cause: StopCause::Cancelled });
            }
            JobState::Terminating { why, .. } => {
                // Already going away: make sure it does not come back.
                job.cancelled = true;
                if matches!(why, Termination::Preempted { .. }) {
                    self.outbox.push(Decision::Stop { job: id, cause: StopCause::Cancelled });
                }
            }
        }
        Ok(())
    }

    fn exited(&mut self, id: JobId, outcome: ExitOutcome, now: Time) -> Result<(), CoreError> {
        let ix = self.jobs.ix_of(id).ok_or(CoreError::UnknownJob(id))?;
        let job = &self.jobs[ix];
        let requeue = match (&job.state, outcome) {
            (JobState::Pending { .. }, _) => return Err(CoreError::NotRunning(id)),
            (_, ExitOutcome::Succeeded) => false,
            (JobState::Running { .. }, ExitOutcome::Failed) => false,
            (JobState::Running { .. }, ExitOutcome::Requeue) => true,
            (JobState::Terminating { why: Termination::Preempted { .. }, .. }, _) => !job.cancelled,
            (JobState::Terminating { why: Termination::Stopped(_), .. }, _) => false,
        };
        let was_preempted = matches!(job.state, JobState::Terminating { why: Termination::Preempted { .. }, .. });
        self.release(ix, now);
        // A stop asked since the last cycle (a cancel) is moot once the job has exited: the
        // driver must not be told to stop a job that is gone (a cancel and the run's end can
        // arrive in one turn).
        self.outbox.retain(|d| !matches!(d, Decision::Stop { job, .. } if *job == id));
        if requeue {
            if was_preempted {
                self.jobs[ix].preemptions += 1;
            }
            self.requeue(ix, now);
        } else {
            if outcome == ExitOutcome::Succeeded {
                self.learn_run_time(ix);
            }
            self.jobs.discard(ix);
            self.counters.finished += 1;
        }
        Ok(())
    }

    fn add_node(&mut self, spec: NodeSpec) -> Result<(), CoreError> {
        if self.nodes.get(spec.id).is_some() {
            return Err(CoreError::DuplicateNode(spec.id));
        }
        let gpus_max = self.gpus_per_node_max();
        if spec.capacity.gpus > gpus_max {
            return Err(CoreError::InvalidNode {
                node: spec.id,
                reason: format!("{} GPUs above the per-node limit {gpus_max}", spec.capacity.gpus),
            });
        }
        let id = spec.id;
        self.fair.change_capacity(spec.capacity, true);
        self.nodes.add(Node::new(spec));
        self.changes.room_grew(id);
        self.changes.nodes_changed = true;
        Ok(())
    }

    fn remove_node(&mut self, id: NodeId, now: Time) -> Result<(), CoreError> {
        if self.nodes.get(id).is_none() {
            return Err(CoreError::UnknownNode(id));
        }
        // Every job placed on the node (the node lists them, CPU-only replicas too), and every
        // preemptor holding room there (a CPU-only hold has no slot, so look at the holds).
        let on_node = |p: &Placement| p.replicas().iter().any(|r| r.node == id);
        let mut lost: Vec<(JobId, JobIx)> =
            self.nodes.by_id(id).placed.iter().map(|&ix| (self.jobs[ix].spec.id, ix)).collect();
        let held: Vec<JobIx> = self
            .reserving
            .values()
            .copied()
            .filter(|&ix| matches!(&self.jobs[ix].state, JobState::Pending { reservation: Some(r) } if on_node(&r.placement)))
            .collect();
        lost.sort_unstable();
        for ix in held {
            self.drop_reservation(ix);
        }
        for (job, ix) in lost {
            let stopped = matches!(self.jobs[ix].state, JobState::Terminating { why: Termination::Stopped(_), .. });
            self.release(ix, now);
            if stopped || self.jobs[ix].cancelled {
                self.jobs.discard(ix);
            } else {
                self.requeue(ix, now);
                self.outbox.push(Decision::Requeued { job, cause: RequeueCause::NodeRemoved });
            }
        }
        let removed = self.nodes.remove(id).expect("checked above");
        self.fair.change_capacity(removed.spec.capacity, false);
        self.changes.nodes_lost = true;
        Ok(())
    }

    /// A node's images, sorted (a preference only: nobody wakes for it).
    fn set_node_images(&mut self, id: NodeId, mut images: Vec<crate::types::ImageId>) -> Result<(), CoreError> {
        if self.nodes.get(id).is_none() {
            return Err(CoreError::UnknownNode(id));
        }
        if images.len() > crate::event::IMAGES_PER_NODE_MAX {
            let reason = format!("images: {} above the limit {}", images.len(), crate::event::IMAGES_PER_NODE_MAX);
            return Err(CoreError::InvalidNode { node: id, reason });
        }
        images.sort_unstable();
        images.dedup();
        self.nodes.images_mut(id).clone_from(&images);
        Ok(())
    }

    fn set_schedulable(&mut self, id: NodeId, schedulable: bool) -> Result<(), CoreError> {
        let node = self.nodes.get(id).ok_or(CoreError::UnknownNode(id))?;
        if node.schedulable == schedulable {
            return Ok(());
        }
        self.nodes.update(id, |node| node.schedulable = schedulable);
        if schedulable {
            self.changes.room_grew(id);
            self.changes.nodes_changed = true;
        } else {
            self.changes.nodes_lost = true;
        }
        Ok(())
    }

    fn set_quota(&mut self, id: AccountId, quota: Option<Quota>) {
        let (nodes, jobs) = (&self.nodes, &self.jobs);
        self.ledger.set_quota(id, quota, || preemptible_runs_of(nodes, jobs, id));
        self.changes.caps.push(id);
    }

    fn set_nominal_quota(&mut self, project: AccountId, nominal: Option<NominalQuota>) -> Result<(), CoreError> {
        let invalid = |reason: String| Err(CoreError::InvalidNominalQuota { project, reason });
        if let Some(n) = &nominal {
            if let Some(reason) = n.invalid(project) {
                return invalid(reason);
            }
            if self.ledger.cohort(project).is_some() {
                return invalid(format!("{project} is a cohort; a cohort cannot be a member of another"));
            }
            if self.ledger.get(n.cohort).is_some_and(|a| a.nominal.is_some()) {
                return invalid(format!("{} is a project in a cohort; it cannot be a cohort too", n.cohort));
            }
            let charged = self.jobs.iter().any(|j| j.spec.accounts().any(|a| a == n.cohort));
            if charged {
                return invalid(format!("{} is a project or user with jobs; it cannot be a cohort", n.cohort));
            }
        }
        let before = self.ledger.cohort_of(project);
        let (nodes, jobs) = (&self.nodes, &self.jobs);
        self.ledger.set_nominal(project, nominal, || preemptible_runs_of(nodes, jobs, project));
        let after = nominal.map(|n| n.cohort);
        if before != after {
            self.recount_cohorts(&[before, after]);
        }
        self.changes.caps.extend([Some(project), before, after].into_iter().flatten());
        self.changes.nominal_changed = true;
        Ok(())
    }

    /// After a project changed cohort: what `cohorts` are charged, summed afresh from the
    /// jobs (running and terminating, and holds, whose charges to a cohort depend on their
    /// victims' cohorts).
    fn recount_cohorts(&mut self, cohorts: &[Option<AccountId>]) {
        // Which victims are moved to a hold now: those of a preemptor of their project's
        // cohort that holds GPUs for them (see `move_victims_to_hold`); and those of a hold
        // given up, while their project stays in the cohort they moved out of and their
        // preemptor's too (they count as its work; a preemptor gone from the cohort takes
        // nothing of it, so they count as their own project's again).
        let preemptor_of = |j: &Job| match j.state {
            JobState::Terminating { why: Termination::Preempted { preemptor, .. }, .. } => self.jobs.get(preemptor),
            _ => None,
        };
        let holds_for = |p: &Job, victim: JobId| matches!(&p.state, JobState::Pending { reservation: Some(r) } if r.victims.contains(&victim));
        let moved: Vec<(JobId, Option<MovedToHold>)> = self
            .jobs
            .iter()
            .map(|j| {
                let cohort = self.ledger.cohort_of(j.spec.project);
                let preemptor = preemptor_of(j);
                // The preemptor's project: as the move recorded it where the preemptor is
                // gone (cancelled while its victim still terminates).
                let preemptor_project =
                    preemptor.map(|p| p.spec.project).or(j.moved_to_hold.map(|m| m.preemptor_project));
                let preemptor_in_cohort = preemptor_project.is_none_or(|p| self.ledger.cohort_of(p) == cohort);
                let holding = preemptor.is_some_and(|p| holds_for(p, j.spec.id));
                let was_moved_here = j.moved_to_hold.is_some_and(|m| Some(m.cohort) == cohort);
                let same = cohort.is_some() && preemptor_in_cohort && (holding || was_moved_here);
                let now = cohort.zip(preemptor_project).filter(|_| same);
                (
                    j.spec.id,
                    j.moved_to_hold,
                    now.map(|(cohort, preemptor_project)| MovedToHold { cohort, preemptor_project }),
                )
            })
            .filter(|(_, was, now)| was != now)
            .map(|(id, _, now)| (id, now))
            .collect();
        for (id, m) in moved {
            let ix = self.jobs.ix_of(id).expect("listed above");
            self.jobs[ix].moved_to_hold = m;
        }
        let mut moving: BTreeMap<AccountId, Resources> = BTreeMap::new();
        for job in self.jobs.iter().filter(|j| j.moved_to_hold.is_some()) {
            let m = moving.entry(job.spec.project).or_default();
            *m = m.plus(job.spec.total());
        }
        let members: Vec<AccountId> = cohorts
            .iter()
            .flatten()
            .filter_map(|c| self.ledger.cohort(*c))
            .flat_map(|c| c.members.iter().copied())
            .collect();
        let projects: BTreeSet<AccountId> = members.into_iter().chain(self.ledger.moving_projects()).collect();
        for project in projects {
            self.ledger.set_moving(project, moving.get(&project).copied().unwrap_or_default());
        }
        let mut sums: BTreeMap<AccountId, Resources> =
            cohorts.iter().flatten().map(|c| (*c, Resources::ZERO)).collect();
        let reserving: Vec<JobIx> = self.reserving.values().copied().collect();
        for ix in reserving {
            let JobState::Pending { reservation: Some(r) } = &self.jobs[ix].state else { unreachable!("reserving") };
            let charged = self.hold_charges(ix, &r.victims);
            let JobState::Pending { reservation: Some(r) } = &mut self.jobs[ix].state else {
                unreachable!("read above")
            };
            r.charged = charged;
            for (k, account) in self.charged_accounts(ix).enumerate() {
                if let Some(sum) = sums.get_mut(&account) {
                    *sum = sum.plus(charged[k]);
                }
            }
        }
        for job in self.jobs.iter() {
            if matches!(job.state, JobState::Running { .. } | JobState::Terminating { .. })
                && job.moved_to_hold.is_none()
                && let Some(sum) = self.ledger.cohort_of(job.spec.project).and_then(|c| sums.get_mut(&c))
            {
                *sum = sum.plus(job.spec.total());
            }
        }
        for (cohort, charged) in sums {
            self.ledger.set_cohort_charge(cohort, charged);
        }
    }

    /// The accounts a job is charged to: its own (`Job::accounts`) and its project's cohort,
    /// unless its charge to the cohort has moved to its preemptor's hold.
    pub(crate) fn charged_accounts(&self, ix: JobIx) -> impl Iterator<Item = AccountId> + use<> {
        let job = &self.jobs[ix];
        let cohort = self.ledger.cohort_of(job.spec.project).filter(|_| job.moved_to_hold.is_none());
        job.spec.accounts().chain(cohort)
    }

    /// The victims of a preemptor's hold that are of its own cohort and still terminating
    /// for it move their cohort charge to the hold (see `ledger.rs`).
    fn move_victims_to_hold(&mut self, ix: JobIx) {
        let preemptor_project = self.jobs[ix].spec.project;
        let Some(cohort) = self.ledger.cohort_of(preemptor_project) else { return };
        let JobState::Pending { reservation: Some(r) } = &self.jobs[ix].state else { return };
        for vid in self.still_terminating(self.jobs[ix].spec.id, &r.victims) {
            let vix = self.jobs.ix_of(vid).expect("a terminating victim is held");
            let victim = &self.jobs[vix];
            if victim.moved_to_hold.is_none() && self.ledger.cohort_of(victim.spec.project) == Some(cohort) {
                self.ledger.move_to_hold(victim.spec.project, cohort, victim.spec.total());
                self.jobs[vix].moved_to_hold = Some(MovedToHold { cohort, preemptor_project });
                // The cohort's charge fell, and the victim's project's settled usage.
                self.cohort_may_ease(cohort);
            }
        }
    }

    /// A cohort may be less short for a member's waiting jobs, or they may now reclaim,
    /// though nothing was uncharged from it (a charge moved to a hold, a hold's shortfall
    /// shrank): its sleepers on it are tested again (see `queue::CohortWake`).
    fn cohort_may_ease(&mut self, cohort: AccountId) {
        self.changes.uncharged.push(cohort);
    }

    /// A victim moved out of its cohort has left: the move is settled, and the jobs of the
    /// cohort that waited for it to go (`Ledger::over_cohort_now`) are asked again.
    fn settle_moved_victim(&mut self, vix: JobIx) {
        if let Some(m) = self.jobs[vix].moved_to_hold.take() {
            let (project, total) = (self.jobs[vix].spec.project, self.jobs[vix].spec.total());
            self.ledger.settle_moved(project, total);
            self.cohort_may_ease(m.cohort);
        }
    }

    // ---- state transitions shared by the handlers and the cycle ----------------------

    /// Put a pending job on its placement and charge its accounts.
    pub(crate) fn start(&mut self, ix: JobIx, placement: Placement, now: Time) {
        let job = &self.jobs[ix];
        assert!(
            matches!(job.state, JobState::Pending { reservation: None }),
            "{} must be pending without reservation",
            job.spec.id
        );
        let (id, key, per_replica) = (job.spec.id, job.key, job.spec.per_replica);
        let queued_in = job.queued_in;
        let deadline = job.runtime_deadline(now);
        let accounts = self.charged_accounts(ix);
        let total = job.spec.total();
        for replica in placement.replicas() {
            self.nodes.update(replica.node, |node| {
                node.take(replica.gpus, per_replica);
                node.place(ix);
            });
        }
        self.charge(accounts, total);
        if let Some(cohort) = self.ledger.cohort_of(self.jobs[ix].spec.project) {
            // Work charged to a cohort may be what a member waiting on it can now preempt
            // or reclaim: its sleepers that may take it look again.
            self.changes.cohort_charged.push(cohort);
        }
        self.fair.change(self.jobs[ix].accounts(), total, true, now);
        match queued_in {
            Some(gix) => self.queue.remove(&key, gix),
            // A preemptor starting on what it held (`start_on_hold`).
            None => self.queue.leave_hold(&key),
        }
        if let Some(deadline) = deadline {
            self.runtime_deadlines.insert((deadline, id, ix));
        }
        let expected_end = now.plus_ms(self.expected_run_ms(ix));
        let job = &mut self.jobs[ix];
        job.queued_in = None;
        job.state = JobState::Running { placement, started_at: now };
        job.expected_end = expected_end;
        job.started_in_cycle = self.counters.cycles;
        if self.tracks_run_ends() {
            self.index_run_end(ix);
        }
        if self.tracks_victims() {
            self.index_victim(ix);
        }
        self.counters.starts += 1;
    }

    /// Whether the policy preempts, and so the victim candidates are indexed.
    pub(crate) fn tracks_victims(&self) -> bool {
        self.config.policy.preemption
    }

    /// Whether the policy makes reservations, and so placed jobs are indexed by expected
    /// end (`run_ends`).
    pub(crate) fn tracks_run_ends(&self) -> bool {
        self.config.policy.reservations.is_some()
    }

    /// Move a running job to terminating: it stops being a victim candidate, but keeps its
    /// GPUs, and its charge, until it exits.
    pub(crate) fn begin_termination(&mut self, ix: JobIx, why: Termination) {
        if self.tracks_victims() {
            self.unindex_victim(ix);
        }
        if self.tracks_run_ends() {
            self.unindex_run_end(ix);
        }
        let job = &mut self.jobs[ix];
        let JobState::Running { placement, started_at } =
            std::mem::replace(&mut job.state, JobState::Pending { reservation: None })
        else {
            panic!("{} must be running to terminate", job.spec.id);
        };
        let id = job.spec.id;
        let deadline = job.runtime_deadline(started_at);
        job.state = JobState::Terminating { placement, started_at, why };
        if let Some(deadline) = deadline {
            self.runtime_deadlines.remove(&(deadline, id, ix));
        }
        if self.tracks_run_ends() {
            self.index_run_end(ix);
        }
        self.terminating.insert(ix);
    }

    /// Free a running or terminating job's GPUs and uncharge it. Leaves the job in
    /// `Pending` (not queued); the caller requeues or removes it.
    pub(crate) fn release(&mut self, ix: JobIx, now: Time) {
        if self.tracks_victims() && matches!(self.jobs[ix].state, JobState::Running { .. }) {
            self.unindex_victim(ix);
        }
        if self.tracks_run_ends() {
            self.unindex_run_end(ix);
        }
        let job = &mut self.jobs[ix];
        let state = std::mem::replace(&mut job.state, JobState::Pending { reservation: None });
        let (placement, started_at, running, preemptor) = match state {
            JobState::Running { placement, started_at } => (placement, started_at, true, None),
            JobState::Terminating { placement, started_at, why } => {
                let preemptor = match why {
                    Termination::Preempted { preemptor, .. } => Some(preemptor),
                    Termination::Stopped(_) => None,
                };
                (placement, started_at, false, preemptor)
            }
            JobState::Pending { .. } => panic!("{} holds nothing to release", job.spec.id),
        };
        let deadline = job.runtime_deadline(started_at);
        job.runtime_done_ms += now.ms_since(started_at);
        let (id, per_replica, total) = (job.spec.id, job.spec.per_replica, job.spec.total());
        let accounts = self.charged_accounts(ix);
        for replica in placement.replicas() {
            self.nodes.update(replica.node, |node| {
                node.give_back(replica.gpus, per_replica);
                node.unplace(ix);
            });
            self.changes.room_grew(replica.node);
        }
        if running {
            if let Some(deadline) = deadline {
                self.runtime_deadlines.remove(&(deadline, id, ix));
            }
        } else {
            self.terminating.remove(&ix);
        }
        self.fair.change(self.jobs[ix].accounts(), total, false, now);
        self.settle_moved_victim(ix);
        match preemptor {
            None => self.uncharge(accounts, total),
            // A victim's charge moves to its preemptor's hold where they share an account: a
            // move, not growth, so it keeps what a lowered cap grandfathered.
            Some(preemptor) => {
                let grandfathered = self.grandfathered_of_job(ix);
                self.uncharge(accounts, total);
                self.victim_gone(preemptor, id);
                self.ledger.keep_grandfathered(grandfathered);
            }
        }
    }

    /// A victim of `preemptor` exited: one fewer to wait for, if the preemptor's hold is
    /// the one it was asked to stop for. (A hold given up, when a node went away, and made
    /// again elsewhere has other victims; one of the first may still be on its way out.)
    /// Its charge on the accounts they share grows back by what the victim held there.
    fn victim_gone(&mut self, preemptor: JobId, victim: JobId) {
        let Some(pix) = self.jobs.ix_of(preemptor) else { return };
        let JobState::Pending { reservation: Some(r) } = &self.jobs[pix].state else { return };
        if !r.victims.contains(&victim) {
            return;
        }
        let (was, now) = (r.charged, self.hold_charges(pix, &r.victims));
        let project = self.jobs[pix].spec.project;
        let less = now[0].minus(was[0]);
        self.ledger.shift_hold_shortfall(project, Resources::ZERO, less);
        // The preemptor's project's settled usage fell: it may now reclaim.
        if let Some(cohort) = self.ledger.cohort_of(project).filter(|_| less != Resources::ZERO) {
            self.cohort_may_ease(cohort);
        }
        let JobState::Pending { reservation: Some(r) } = &mut self.jobs[pix].state else { unreachable!("read above") };
        r.charged = now;
        r.waiting -= 1;
        if r.waiting == 0 {
            self.ready_preemptors.insert(preemptor);
        }
        for (k, account) in self.charged_accounts(pix).enumerate() {
            // Holds only grow back as victims leave: `hold_charges` subtracts fewer victims.
            self.ledger.charge(account, now[k].minus(was[k]));
        }
    }

    /// What a hold for the preemptor at `ix` charges each of its accounts (see
    /// `ledger::hold_charges`): its victims in `victims` still terminating for it count.
    pub(crate) fn hold_charges(&self, ix: JobIx, victims: &[JobId]) -> [Resources; CHARGED_ACCOUNTS_MAX] {
        let job = &self.jobs[ix];
        let id = job.spec.id;
        let leaving = victims
            .iter()
            .filter_map(|v| self.jobs.get(*v))
            .filter(move |v| {
                matches!(v.state, JobState::Terminating { why: Termination::Preempted { preemptor, .. }, .. } if preemptor == id)
            })
            .map(|v| (v.accounts(), v.spec.total()));
        // A hold is charged to the cohort in full: its victims of the same cohort move their
        // cohort charge to it (`move_victims_to_hold`) instead of staying charged beside it.
        ledger::hold_charges(self.charged_accounts(ix), job.spec.total(), leaving)
    }

    /// What a lowered cap grandfathered for the job's accounts (see `Ledger::grandfathered_of`).
    pub(crate) fn grandfathered_of_job(&self, ix: JobIx) -> Grandfathered {
        self.ledger.grandfathered_of(self.charged_accounts(ix))
    }

    /// Index a job that has just started running, if it may be preempted: tally it and list
    /// it as a victim candidate on each of its nodes.
    fn index_victim(&mut self, ix: JobIx) {
        let job = &self.jobs[ix];
        let JobState::Running { placement, started_at } = &job.state else { unreachable!("just started") };
        let (priority, gpus) = (job.spec.priority, job.spec.gpu_slots());
        if !job.spec.preemptible {
            return;
        }
        self.tallies.add(priority, gpus);
        self.ledger.tally_preemptible(job.accounts(), priority, gpus, true);
        let base = VictimEntry::new(job, ix, *started_at, Resources::ZERO, GpuSet::EMPTY);
        if base.protected_until > *started_at {
            self.protection_ends.insert((base.protected_until, base.id, ix));
        }
        let per_replica = job.spec.per_replica.without_shares();
        for (node, replicas) in replicas_per_node(placement) {
            let slots = slots_on(placement, node);
            let entry = VictimEntry { freed: per_replica.times(replicas), slots, ..base };
            victims::insert_entry(self.nodes.victims_mut(node), entry);
        }
    }

    /// Undo `index_victim` for a job that stops running.
    fn unindex_victim(&mut self, ix: JobIx) {
        let job = &self.jobs[ix];
        let JobState::Running { placement, .. } = &job.state else { unreachable!("running") };
        let (priority, gpus) = (job.spec.priority, job.spec.gpu_slots());
        if !job.spec.preemptible {
            return;
        }
        self.tallies.remove(priority, gpus);
        self.ledger.tally_preemptible(job.accounts(), priority, gpus, false);
        let key = (priority, job.spec.id);
        let JobState::Running { started_at, .. } = job.state else { unreachable!("running") };
        self.protection_ends.remove(&(job.protected_until(started_at), job.spec.id, ix));
        for (node, _) in replicas_per_node(placement) {
            victims::remove_entry(self.nodes.victims_mut(node), key);
        }
    }

    /// Keep a running victim's entries in step with its latest checkpoint.
    fn checkpoint_victim_entries(&mut self, ix: JobIx) {
        let job = &self.jobs[ix];
        let JobState::Running { placement, started_at } = &job.state else { return };
        if !self.tracks_victims() || !job.spec.preemptible {
            return;
        }
        let key = (job.spec.priority, job.spec.id);
        let reported = model::reported_saved_at(job.last_checkpoint, *started_at);
        for (node, _) in replicas_per_node(placement) {
            if let Some(entry) = victims::entry_mut(self.nodes.victims_mut(node), key) {
                entry.reported_saved_at = reported;
            }
        }
    }

    /// Charge a gang's total to each of its accounts (running jobs and held reservations).
    fn charge(&mut self, accounts: impl Iterator<Item = AccountId>, total: Resources) {
        // A charge never lets a job over a cap in (see `QuotaWake`): nothing to record.
        for account in accounts {
            self.ledger.charge(account, total);
        }
    }

    fn uncharge(&mut self, accounts: impl Iterator<Item = AccountId>, total: Resources) {
        for account in accounts {
            self.ledger.uncharge(account, total);
            // Only a group over some cap sleeps on its accounts.
            if self.ledger.any_capped() {
                self.changes.uncharged.push(account);
            }
        }
    }

    /// Back into the queue at the job's original position.
    pub(crate) fn requeue(&mut self, ix: JobIx, now: Time) {
        self.jobs[ix].queued_at = now;
        self.enqueue(ix);
        self.counters.requeues += 1;
    }

    /// Put a pending job that holds nothing back in its group, at its place (its key).
    fn enqueue(&mut self, ix: JobIx) {
        let job = &self.jobs[ix];
        debug_assert!(matches!(job.state, JobState::Pending { reservation: None }));
        let (key, gk) = (job.key, job.group_key());
        self.jobs[ix].queued_in = Some(self.queue.insert(key, gk));
    }

    /// Whether the job at `ix` runs from a start the current cycle made (its decision is
    /// still in the cycle's outcome, not yet carried out by any driver).
    pub(crate) fn started_this_cycle(&self, ix: JobIx) -> bool {
        let job = &self.jobs[ix];
        matches!(job.state, JobState::Running { .. }) && job.started_in_cycle == self.counters.cycles
    }

    /// Undo a start the current cycle made (`started_this_cycle`): the job gives its GPUs
    /// and charges back at once and returns to its place in the queue, as if it had not
    /// started. No driver has heard of the start: the caller drops its decision. Nothing
    /// counts it as a run, a preemption or a requeue, and rule 1's delay still counts from
    /// when it entered the queue (`queued_at` is left as it was).
    pub(crate) fn take_back_start(&mut self, ix: JobIx, now: Time) {
        debug_assert!(self.started_this_cycle(ix));
        self.release(ix, now);
        self.enqueue(ix);
        self.counters.starts -= 1;
        self.counters.starts_taken_back += 1;
    }

    /// Hold slots (and CPU/memory) for a pending preemptor and charge its accounts (see
    /// `hold_charges`; the victims must already be terminating).
    pub(crate) fn reserve(&mut self, ix: JobIx, mut reservation: Reservation) {
        reservation.charged = self.hold_charges(ix, &reservation.victims);
        let job = &self.jobs[ix];
        let (id, per_replica) = (job.spec.id, job.spec.per_replica);
        let accounts = self.charged_accounts(ix);
        for replica in reservation.placement.replicas() {
            self.nodes.update(replica.node, |node| {
                assert!(node.held.is_disjoint(replica.gpus), "GPUs {} on {} held twice", replica.gpus, replica.node);
                node.held = node.held.union(replica.gpus);
                node.reserved = node.reserved.plus(per_replica);
            });
        }
        for (k, account) in accounts.enumerate() {
            self.ledger.charge(account, reservation.charged[k]);
        }
        self.ledger.shift_holds(job.spec.project, job.spec.total(), true);
        // The project's slot is the first.
        let shortfall = job.spec.total().minus(reservation.charged[0]);
        self.ledger.shift_hold_shortfall(job.spec.project, shortfall, Resources::ZERO);
        self.reserving.insert(id, ix);
        if reservation.waiting == 0 {
            self.ready_preemptors.insert(id);
        }
        let job = &mut self.jobs[ix];
        job.state = JobState::Pending { reservation: Some(reservation) };
        let gix = job.queued_in.take().expect("a pending job is queued");
        self.queue.hold(&job.key, gix);
        self.move_victims_to_hold(ix);
        // A reservation's job that holds GPUs now waits for its victims instead.
        self.leave_plan(ix);
    }

    /// Give up a pending job's reservation, if it has one: the job goes back to its group.
    pub(crate) fn drop_reservation(&mut self, ix: JobIx) -> Option<Reservation> {
        let reservation = self.release_hold(ix)?;
        let job = &mut self.jobs[ix];
        job.queued_in = Some(self.queue.unhold(&job.key, job.group_key()));
        Some(reservation)
    }

    /// A preemptor whose victims are gone starts on the GPUs it held, leaving the queue from
    /// its hold, not by way of its group.
    pub(crate) fn start_on_hold(&mut self, ix: JobIx, now: Time) -> Placement {
        let reservation = self.release_hold(ix).expect("a ready preemptor holds a reservation");
        self.start(ix, reservation.placement.clone(), now);
        reservation.placement
    }

    /// A preemptor still waiting for its victims starts on `placement`, room that freed
    /// elsewhere (cycle step 3b): its hold is released, and its victims go on terminating
    /// (their exits find it no longer holding, `victim_gone`) and are requeued as ever.
    pub(crate) fn start_off_hold(&mut self, ix: JobIx, placement: Placement, now: Time) {
        self.release_hold(ix).expect("a preemptor moving off its hold holds one");
        self.start(ix, placement, now);
        self.counters.preemptors_moved += 1;
    }

    /// Undo a reservation's holds and charges; the job stays out of its group. Its nodes
    /// count as grown whatever comes next: what it held no one could take, and even when
    /// the job starts there, a running preemptible job is room a group above it may reclaim
    /// (scenario 114).
    fn release_hold(&mut self, ix: JobIx) -> Option<Reservation> {
        let job = &mut self.jobs[ix];
        let JobState::Pending { reservation } = &mut job.state else { return None };
        let reservation = reservation.take()?;
        let (id, per_replica) = (job.spec.id, job.spec.per_replica);
        // Victims still terminating stay moved out of their cohort until they exit: they
        // leave whatever becomes of the hold, and counting them again would let the
        // cohort's level (and what a lowered capacity grandfathered) grow (scenario 115).
        let accounts = self.charged_accounts(ix);
        for replica in reservation.placement.replicas() {
            self.nodes.update(replica.node, |node| {
                debug_assert_eq!(node.held.intersection(replica.gpus), replica.gpus);
                node.held = node.held.minus(replica.gpus);
                node.reserved = node.reserved.minus(per_replica);
            });
            self.changes.room_grew(replica.node);
        }
        // The member's hold shortfall is taken back first, so that its cohort's `U` is where
        // the release leaves it when the hold's charges are taken back: otherwise the
        // cohort's level dips in between, and what its cap grandfathered shrinks below what
        // it still holds (scenario 113).
        let (project, total) = (self.jobs[ix].spec.project, self.jobs[ix].spec.total());
        self.ledger.shift_hold_shortfall(project, Resources::ZERO, total.minus(reservation.charged[0]));
        self.ledger.shift_holds(project, total, false);
        for (k, account) in accounts.enumerate() {
            self.uncharge(std::iter::once(account), reservation.charged[k]);
        }
        self.reserving.remove(&id);
        self.ready_preemptors.remove(&id);
        Some(reservation)
    }

    /// One replica on `node`: on the GPUs a packing policy chose, else as `assign_slots`.
    pub(crate) fn assign_one(&self, node: NodeId, gpus: Option<GpuSet>, per_replica: Resources) -> Placement {
        match gpus {
            Some(gpus) => {
                assert_eq!(gpus.len(), per_replica.slots_per_replica(), "a packing policy picked the wrong GPUs");
                Placement::one(ReplicaPlacement { node, gpus })
            }
            None => self.assign_slots(&[(node, 1)], per_replica),
        }
    }

    /// Turn `(node, replicas)` choices into slot assignments: the lowest free slots, or for
    /// a share (one replica) the slot `Node::pick_share_slot` names.
    pub(crate) fn assign_slots(&self, chosen: &[(NodeId, u32)], per_replica: Resources) -> Placement {
        if let [(node, 1)] = chosen {
            let gpus = self.nodes.by_id(*node).pick_for(per_replica);
            assert_eq!(gpus.len(), per_replica.slots_per_replica(), "chosen node lacks the slots");
            return Placement::one(ReplicaPlacement { node: *node, gpus });
        }
        assert!(!per_replica.is_share(), "a share is one replica");
        let per_replica_gpus = per_replica.gpus;
        let mut replicas = Vec::new();
        for &(node_id, count) in chosen {
            let mut slots = self.nodes.by_id(node_id).pick_slots(count * per_replica_gpus);
            assert_eq!(slots.len(), count * per_replica_gpus, "chosen node lacks the slots");
            for _ in 0..count {
                let gpus = slots.lowest(per_replica_gpus);
                slots = slots.minus(gpus);
                replicas.push(ReplicaPlacement { node: node_id, gpus });
            }
        }
        Placement::new(replicas)
    }
}

/// A placement's GPUs on one node.
pub(crate) fn slots_on(placement: &Placement, node: NodeId) -> GpuSet {
    placement.replicas().iter().filter(|r| r.node == node).fold(GpuSet::EMPTY, |s, r| s.union(r.gpus))
}

/// A placement's nodes with the number of replicas on each, in replica order (replicas are
/// listed node by node, so equal neighbours are merged).
pub(crate) fn replicas_per_node(placement: &Placement) -> impl Iterator<Item = (NodeId, u32)> + '_ {
    let replicas = placement.replicas();
    let mut i = 0;
    std::iter::from_fn(move || {
        let node = replicas.get(i)?.node;
        let start = i;
        while replicas.get(i).is_some_and(|r| r.node == node) {
            i += 1;
        }
        Some((node, (i - start) as u32))
    })
}

/// `account`'s running preemptible jobs by priority, counted afresh from the victim lists (a
/// gang once).
fn preemptible_runs_of(
    nodes: &Nodes,
    jobs: &JobStore,
    account: AccountId,
) -> BTreeMap<Priority, crate::ledger::PreemptibleRuns> {
    let mut running: Vec<(JobId, Priority, JobIx)> = nodes
        .iter()
        .flat_map(|n| n.victims.iter().map(|e| (e.id, e.priority, e.ix)))
        .filter(|(.., ix)| jobs[*ix].accounts().any(|a| a == account))
        .collect();
    running.sort_unstable();
    running.dedup();
    let mut tally: BTreeMap<Priority, crate::ledger::PreemptibleRuns> = BTreeMap::new();
    for (_, priority, ix) in running {
        let runs = tally.entry(priority).or_default();
        runs.gpus += jobs[ix].spec.gpu_slots();
        runs.jobs += 1;
    }
    tally
}
