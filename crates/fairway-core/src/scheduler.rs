//! The [`Scheduler`]: state plus the event handlers. The cycle is in `cycle.rs`, the
//! victim search in `preemption.rs`, the invariant checks in `invariants.rs`.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet};

use crate::cluster::{FreeIndex, Node};
use crate::config::{Config, QueueOrder};
use crate::decision::{Decision, PendingReason, RequeueCause, StopCause};
use crate::event::{Event, ExitOutcome};
use crate::queue::{Changes, GroupKey, PendingQueue};
use crate::state::{Account, Job, JobState, QueueKey, Reservation, Termination};
use crate::types::{
    AccountId, JobId, JobSpec, NodeId, NodeSpec, Placement, PreemptionPolicy, Priority, Quota, ReplicaPlacement,
    Resources, Time,
};

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
        }
    }
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
    pub requeues: u64,
    pub finished: u64,
    /// Victim searches run (successful or not).
    pub preemption_searches: u64,
    /// Pending jobs considered by cycles.
    pub jobs_considered: u64,
}

/// What the victim search needs of a running job (copied from the job when it starts, and
/// kept in step with its checkpoint reports; checked as an invariant).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RunningEntry {
    pub preemptible: bool,
    pub per_replica: Resources,
    /// The node of a one-replica job; `None` for a gang (whose placement the search reads).
    pub node: Option<NodeId>,
    pub gpus_total: u32,
    pub started_at: Time,
    pub checkpoint_interval_ms: Option<u64>,
    pub last_checkpoint: Option<Time>,
}

impl RunningEntry {
    /// The entry of a job that runs since `started_at` on `placement`.
    pub fn of(job: &Job, placement: &Placement, started_at: Time) -> RunningEntry {
        let node = match placement.replicas.as_slice() {
            [only] => Some(only.node),
            _ => None,
        };
        RunningEntry {
            preemptible: job.spec.preemptible,
            per_replica: job.spec.per_replica,
            node,
            gpus_total: job.spec.total().gpus,
            started_at,
            checkpoint_interval_ms: job.spec.checkpoint_interval_ms,
            last_checkpoint: job.last_checkpoint,
        }
    }

    /// GPU-time lost since the run's last saved progress if it stopped at `now`.
    pub fn lost_gpu_ms(&self, now: Time) -> u64 {
        let saved =
            crate::state::last_progress_saved(self.checkpoint_interval_ms, self.last_checkpoint, self.started_at, now);
        now.ms_since(saved) * u64::from(self.gpus_total.max(1))
    }
}

pub struct Scheduler {
    pub(crate) config: Config,
    pub(crate) nodes: BTreeMap<NodeId, Node>,
    pub(crate) index: FreeIndex,
    /// Boxed: B-tree nodes then move pointers, not whole jobs, when they split or merge.
    pub(crate) jobs: BTreeMap<JobId, Box<Job>>,
    /// Pending jobs in scheduling order, grouped by equivalence.
    pub(crate) queue: PendingQueue,
    /// Running (not terminating) jobs, lowest priority first: the victim candidates, with
    /// what the victim search needs of each, so that it reads no job while it scans.
    pub(crate) running: BTreeMap<(Priority, JobId), RunningEntry>,
    /// GPUs of running preemptible jobs by priority: the victim search's cheap first test.
    pub(crate) preemptible_gpus: BTreeMap<Priority, u32>,
    /// Jobs asked to stop that still hold their GPUs.
    pub(crate) terminating: BTreeSet<JobId>,
    /// Pending jobs that hold a reservation.
    pub(crate) reserving: BTreeSet<JobId>,
    /// Run-time limit deadlines of running jobs.
    pub(crate) runtime_deadlines: BTreeSet<(Time, JobId)>,
    pub(crate) accounts: BTreeMap<AccountId, Account>,
    /// Decisions produced by events (stops, requeues), handed out by the next cycle.
    pub(crate) outbox: Vec<Decision>,
    pub(crate) counters: Counters,
    /// What changed since the last cycle woke sleeping groups (room, accounts, victims).
    pub(crate) changes: Changes,
    /// Under strict order, the job that blocked the last cycle's walk.
    pub(crate) blocked_by: Option<(QueueKey, Priority)>,
}

impl Scheduler {
    pub fn new(config: Config) -> Scheduler {
        Scheduler {
            config,
            nodes: BTreeMap::new(),
            index: FreeIndex::default(),
            jobs: BTreeMap::new(),
            queue: PendingQueue::default(),
            running: BTreeMap::new(),
            preemptible_gpus: BTreeMap::new(),
            terminating: BTreeSet::new(),
            reserving: BTreeSet::new(),
            runtime_deadlines: BTreeSet::new(),
            accounts: BTreeMap::new(),
            outbox: Vec::new(),
            counters: Counters::default(),
            changes: Changes::default(),
            blocked_by: None,
        }
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// Apply one event at time `now`. On error nothing has changed.
    pub fn apply(&mut self, event: Event, now: Time) -> Result<(), CoreError> {
        match event {
            Event::Submit(spec) => self.submit(spec, now),
            Event::Restore(job) => self.restore(job),
            Event::Cancel(job) => self.cancel(job),
            Event::Exited { job, outcome } => self.exited(job, outcome, now),
            Event::CheckpointReported { job: id, at } => {
                let job = self.jobs.get_mut(&id).ok_or(CoreError::UnknownJob(id))?;
                job.last_checkpoint = Some(job.last_checkpoint.map_or(at, |t| t.max(at)));
                let (priority, last_checkpoint) = (job.spec.priority, job.last_checkpoint);
                if let Some(entry) = self.running.get_mut(&(priority, id)) {
                    entry.last_checkpoint = last_checkpoint;
                }
                Ok(())
            }
            Event::NodeAdded(spec) => self.add_node(spec),
            Event::NodeRemoved(node) => self.remove_node(node, now),
            Event::NodeDrained(node) => self.set_schedulable(node, false),
            Event::NodeUncordoned(node) => self.set_schedulable(node, true),
            Event::SetQuota { account, quota } => {
                self.set_quota(account, quota);
                Ok(())
            }
        }
    }

    // ---- queries -------------------------------------------------------------------

    pub fn job_status(&self, id: JobId) -> Option<JobStatus<'_>> {
        let job = self.jobs.get(&id)?;
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

    /// Why a pending job is not running, as of the last cycle (empty for other states or
    /// unknown jobs).
    pub fn why(&self, id: JobId) -> Vec<PendingReason> {
        let Some(job) = self.jobs.get(&id) else { return Vec::new() };
        let JobState::Pending { reservation } = &job.state else { return Vec::new() };
        if let Some(r) = reservation {
            return vec![PendingReason::WaitingForPreemption { victims: self.still_terminating(id, &r.victims) }];
        }
        if let Some((blocker, priority)) = self.blocked_by
            && job.key > blocker
        {
            return vec![PendingReason::BlockedBehind { job: blocker.id, priority }];
        }
        match self.queue.groups.get(&job.group).and_then(|g| g.verdict.as_ref()) {
            Some(verdict) => verdict.reasons.clone(),
            None => vec![PendingReason::NotYetConsidered],
        }
    }

    /// The victims still terminating for `preemptor`. A victim that exited was requeued and
    /// may already run again elsewhere, or be terminating for another preemptor: it holds
    /// nothing of `preemptor`'s any more. (Fix: this used to test for any `Terminating`,
    /// and the preemptor's readiness for `Pending` victims, so a victim restarted elsewhere
    /// during the grace period left its preemptor waiting forever.)
    pub(crate) fn still_terminating(&self, preemptor: JobId, victims: &[JobId]) -> Vec<JobId> {
        victims
            .iter()
            .copied()
            .filter(|v| {
                self.jobs.get(v).is_some_and(|j| {
                    matches!(j.state, JobState::Terminating { why: Termination::Preempted { preemptor: p, .. }, .. } if p == preemptor)
                })
            })
            .collect()
    }

    /// Pending jobs in the order the next cycle considers them.
    pub fn pending(&self) -> impl Iterator<Item = JobId> + '_ {
        self.queue.all.iter().map(|k| k.id)
    }

    pub fn pending_count(&self) -> usize {
        self.queue.len()
    }

    pub fn job_count(&self) -> usize {
        self.jobs.len()
    }

    pub fn job_spec(&self, id: JobId) -> Option<&JobSpec> {
        self.jobs.get(&id).map(|j| &j.spec)
    }

    /// Times this job has been preempted so far.
    pub fn preemptions_of(&self, id: JobId) -> Option<u32> {
        self.jobs.get(&id).map(|j| j.preemptions)
    }

    /// GPUs on nodes (schedulable or not) and GPUs assigned to jobs.
    pub fn gpu_totals(&self) -> (u32, u32) {
        let total = self.nodes.values().map(|n| n.spec.capacity.gpus).sum();
        let used = self.nodes.values().map(|n| n.gpu_owner.iter().filter(|o| o.is_some()).count() as u32).sum();
        (total, used)
    }

    /// What is charged to an account and its cap.
    pub fn account_usage(&self, account: AccountId) -> (Resources, Option<Quota>) {
        self.accounts.get(&account).map_or((Resources::ZERO, None), |a| (a.charged, a.quota))
    }

    /// The earliest time the core wants a cycle even if no event arrives (a run-time limit).
    pub fn next_wakeup(&self) -> Option<Time> {
        self.runtime_deadlines.first().map(|(t, _)| *t)
    }

    // ---- event handlers --------------------------------------------------------------

    pub(crate) fn submit(&mut self, spec: JobSpec, now: Time) -> Result<(), CoreError> {
        if self.jobs.contains_key(&spec.id) {
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
        if spec.per_replica.gpus > self.config.limits.gpus_per_node_max {
            return invalid(format!("{} GPUs per replica above the per-node limit", spec.per_replica.gpus));
        }
        let rank = match self.config.policy.order {
            QueueOrder::Fifo => Reverse(0),
            QueueOrder::Priority => Reverse(spec.priority),
        };
        let key = QueueKey { rank, submitted_at: now, id: spec.id };
        let group = GroupKey {
            priority: spec.priority,
            model: spec.gpu_model,
            per_replica: spec.per_replica,
            replicas: spec.replicas,
            user: spec.user,
            project: spec.project,
            may_preempt: spec.preemption_policy == PreemptionPolicy::PreemptLowerPriority,
        };
        let job = Job {
            spec,
            key,
            group,
            state: JobState::Pending { reservation: None },
            runtime_done_ms: 0,
            last_checkpoint: None,
            preemptions: 0,
            cancelled: false,
        };
        self.queue.insert(key, group);
        self.jobs.insert(key.id, Box::new(job));
        Ok(())
    }

    fn cancel(&mut self, id: JobId) -> Result<(), CoreError> {
        let job = self.jobs.get_mut(&id).ok_or(CoreError::UnknownJob(id))?;
        match &mut job.state {
            JobState::Pending { .. } => {
                self.drop_reservation(id);
                let job = self.jobs.remove(&id).expect("checked above");
                self.queue.remove(&job.key, &job.group);
            }
            JobState::Running { .. } => {
                self.begin_termination(id, Termination::Stopped(StopCause::Cancelled));
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
        let job = self.jobs.get(&id).ok_or(CoreError::UnknownJob(id))?;
        let requeue = match (&job.state, outcome) {
            (JobState::Pending { .. }, _) => return Err(CoreError::NotRunning(id)),
            (_, ExitOutcome::Succeeded) => false,
            (JobState::Running { .. }, ExitOutcome::Failed) => false,
            (JobState::Running { .. }, ExitOutcome::Requeue) => true,
            (JobState::Terminating { why: Termination::Preempted { .. }, .. }, _) => !job.cancelled,
            (JobState::Terminating { why: Termination::Stopped(_), .. }, _) => false,
        };
        let was_preempted = matches!(job.state, JobState::Terminating { why: Termination::Preempted { .. }, .. });
        self.release(id, now);
        if requeue {
            let job = self.jobs.get_mut(&id).expect("still held");
            if was_preempted {
                job.preemptions += 1;
            }
            self.requeue(id);
        } else {
            self.jobs.remove(&id);
            self.counters.finished += 1;
        }
        Ok(())
    }

    fn add_node(&mut self, spec: NodeSpec) -> Result<(), CoreError> {
        if self.nodes.contains_key(&spec.id) {
            return Err(CoreError::DuplicateNode(spec.id));
        }
        if spec.capacity.gpus > self.config.limits.gpus_per_node_max {
            return Err(CoreError::InvalidNode {
                node: spec.id,
                reason: format!(
                    "{} GPUs above the per-node limit {}",
                    spec.capacity.gpus, self.config.limits.gpus_per_node_max
                ),
            });
        }
        let node = Node::new(spec);
        self.index.insert(
            node.spec.gpu_model,
            node.available_gpus(),
            node.spec.id,
            self.config.limits.gpus_per_node_max,
        );
        self.nodes.insert(node.spec.id, node);
        self.changes.room_grew = true;
        Ok(())
    }

    fn remove_node(&mut self, id: NodeId, now: Time) -> Result<(), CoreError> {
        let node = self.nodes.get(&id).ok_or(CoreError::UnknownNode(id))?;
        let mut lost: Vec<JobId> = node.gpu_owner.iter().flatten().copied().collect();
        let mut held: Vec<JobId> = node.gpu_reserved.iter().flatten().copied().collect();
        // CPU-only replicas own no slot: find every job placed on the node.
        for (jid, job) in &self.jobs {
            if let JobState::Running { placement, .. } | JobState::Terminating { placement, .. } = &job.state
                && placement.replicas.iter().any(|r| r.node == id)
            {
                lost.push(*jid);
            }
        }
        // Fix: likewise, a CPU-only preemptor holds no slot; its hold on the node was kept and
        // named a removed node.
        for jid in &self.reserving {
            if let JobState::Pending { reservation: Some(r) } = &self.jobs[jid].state
                && r.placement.replicas.iter().any(|r| r.node == id)
            {
                held.push(*jid);
            }
        }
        lost.sort();
        lost.dedup();
        held.sort();
        held.dedup();
        for job in held {
            self.drop_reservation(job);
        }
        for job in lost {
            let stopped = matches!(self.jobs[&job].state, JobState::Terminating { why: Termination::Stopped(_), .. });
            self.release(job, now);
            if stopped || self.jobs[&job].cancelled {
                self.jobs.remove(&job);
            } else {
                self.requeue(job);
                self.outbox.push(Decision::Requeued { job, cause: RequeueCause::NodeRemoved });
            }
        }
        let node = self.nodes.remove(&id).expect("checked above");
        if node.schedulable {
            self.index.remove(node.spec.gpu_model, node.available_gpus(), id);
        }
        Ok(())
    }

    fn set_schedulable(&mut self, id: NodeId, schedulable: bool) -> Result<(), CoreError> {
        let node = self.nodes.get_mut(&id).ok_or(CoreError::UnknownNode(id))?;
        if node.schedulable == schedulable {
            return Ok(());
        }
        node.schedulable = schedulable;
        self.changes.room_grew = true;
        let (model, level) = (node.spec.gpu_model, node.available_gpus());
        if schedulable {
            self.index.insert(model, level, id, self.config.limits.gpus_per_node_max);
        } else {
            self.index.remove(model, level, id);
        }
        Ok(())
    }

    fn set_quota(&mut self, id: AccountId, quota: Option<Quota>) {
        let account = self.accounts.entry(id).or_default();
        account.quota = quota;
        // Whatever runs now may keep running under a lowered cap; it may only shrink.
        account.grandfathered = account.charged;
        self.changes.accounts.push(id);
    }

    // ---- state transitions shared by the handlers and the cycle ----------------------

    /// Change a node's slots and keep the free index in step.
    pub(crate) fn with_node<R>(&mut self, id: NodeId, f: impl FnOnce(&mut Node) -> R) -> R {
        let node = self.nodes.get_mut(&id).expect("placement names a known node");
        let before = node.available_gpus();
        let out = f(node);
        let after = node.recount();
        if node.schedulable && before != after {
            let model = node.spec.gpu_model;
            self.index.remove(model, before, id);
            self.index.insert(model, after, id, self.config.limits.gpus_per_node_max);
        }
        out
    }

    /// Put a pending job on its placement and charge its accounts.
    pub(crate) fn start(&mut self, id: JobId, placement: Placement, now: Time) {
        let job = self.jobs.get(&id).expect("starting a known job");
        let per_replica = job.spec.per_replica;
        let (key, group, priority) = (job.key, job.group, job.spec.priority);
        let deadline = job.runtime_deadline(now);
        let accounts = job.accounts();
        let total = job.spec.total();
        let entry = RunningEntry::of(job, &placement, now);
        assert!(
            matches!(job.state, JobState::Pending { reservation: None }),
            "{id} must be pending without reservation"
        );
        for replica in &placement.replicas {
            self.with_node(replica.node, |node| {
                for &slot in &replica.gpu_indices {
                    let slot = slot as usize;
                    assert!(node.gpu_owner[slot].is_none(), "GPU {slot} on {} assigned twice", replica.node);
                    assert!(node.gpu_reserved[slot].is_none_or(|h| h == id), "GPU {slot} held for another job");
                    node.gpu_owner[slot] = Some(id);
                    node.gpu_reserved[slot] = None;
                }
                node.used = node.used.plus(per_replica);
            });
        }
        self.charge(accounts, total);
        self.queue.remove(&key, &group);
        self.add_running(priority, id, entry);
        if let Some(deadline) = deadline {
            self.runtime_deadlines.insert((deadline, id));
        }
        let job = self.jobs.get_mut(&id).expect("known");
        job.state = JobState::Running { placement, started_at: now };
        self.counters.starts += 1;
    }

    /// Move a running job to terminating: it stops being charged and stops being a victim
    /// candidate, but keeps its GPUs until it exits.
    pub(crate) fn begin_termination(&mut self, id: JobId, why: Termination) {
        let job = self.jobs.get_mut(&id).expect("known");
        let JobState::Running { placement, started_at } =
            std::mem::replace(&mut job.state, JobState::Pending { reservation: None })
        else {
            panic!("{id} must be running to terminate");
        };
        let total = job.spec.total();
        let priority = job.spec.priority;
        let deadline = job.runtime_deadline(started_at);
        job.state = JobState::Terminating { placement, started_at, why };
        let accounts = job.accounts();
        self.uncharge(accounts, total);
        self.remove_running(priority, id);
        if let Some(deadline) = deadline {
            self.runtime_deadlines.remove(&(deadline, id));
        }
        self.terminating.insert(id);
    }

    /// Free a running or terminating job's GPUs and uncharge it if still charged.
    /// Leaves the job in `Pending` (not queued); the caller requeues or removes it.
    pub(crate) fn release(&mut self, id: JobId, now: Time) {
        let job = self.jobs.get_mut(&id).expect("known");
        let state = std::mem::replace(&mut job.state, JobState::Pending { reservation: None });
        let (placement, started_at, charged) = match state {
            JobState::Running { placement, started_at } => (placement, started_at, true),
            JobState::Terminating { placement, started_at, .. } => (placement, started_at, false),
            JobState::Pending { .. } => panic!("{id} holds nothing to release"),
        };
        let deadline = job.runtime_deadline(started_at);
        job.runtime_done_ms += now.ms_since(started_at);
        let per_replica = job.spec.per_replica;
        let total = job.spec.total();
        let priority = job.spec.priority;
        let accounts = job.accounts();
        for replica in &placement.replicas {
            self.with_node(replica.node, |node| {
                for &slot in &replica.gpu_indices {
                    assert_eq!(node.gpu_owner[slot as usize], Some(id), "releasing a GPU {id} does not own");
                    node.gpu_owner[slot as usize] = None;
                }
                node.used = node.used.minus(per_replica);
            });
        }
        self.changes.room_grew = true;
        if charged {
            self.uncharge(accounts, total);
            self.remove_running(priority, id);
            if let Some(deadline) = deadline {
                self.runtime_deadlines.remove(&(deadline, id));
            }
        } else {
            self.terminating.remove(&id);
        }
    }

    /// Index a job that starts running as a victim candidate.
    fn add_running(&mut self, priority: Priority, id: JobId, entry: RunningEntry) {
        if entry.preemptible {
            if entry.gpus_total > 0 {
                *self.preemptible_gpus.entry(priority).or_default() += entry.gpus_total;
            }
            self.changes.victim_started(priority);
        }
        let fresh = self.running.insert((priority, id), entry).is_none();
        debug_assert!(fresh, "{id} indexed as running twice");
    }

    fn remove_running(&mut self, priority: Priority, id: JobId) {
        let entry = self.running.remove(&(priority, id)).expect("running job is indexed");
        if entry.preemptible && entry.gpus_total > 0 {
            let tally = self.preemptible_gpus.get_mut(&priority).expect("tallied at start");
            *tally -= entry.gpus_total;
            if *tally == 0 {
                self.preemptible_gpus.remove(&priority);
            }
        }
    }

    /// Charge a gang's total to each of its accounts (running jobs and held reservations).
    fn charge(&mut self, accounts: impl Iterator<Item = AccountId>, total: Resources) {
        for account in accounts {
            self.accounts.entry(account).or_default().charge(total);
            self.changes.accounts.push(account);
        }
    }

    fn uncharge(&mut self, accounts: impl Iterator<Item = AccountId>, total: Resources) {
        for account in accounts {
            self.accounts.get_mut(&account).expect("uncharging an account that was charged").uncharge(total);
            self.changes.accounts.push(account);
        }
    }

    /// Back into the queue at the job's original position.
    pub(crate) fn requeue(&mut self, id: JobId) {
        let job = self.jobs.get(&id).expect("known");
        debug_assert!(matches!(job.state, JobState::Pending { reservation: None }));
        self.queue.insert(job.key, job.group);
        self.counters.requeues += 1;
    }

    /// Hold slots (and CPU/memory) for a pending preemptor and charge its accounts.
    pub(crate) fn reserve(&mut self, id: JobId, reservation: Reservation) {
        let job = self.jobs.get(&id).expect("known");
        let per_replica = job.spec.per_replica;
        let total = job.spec.total();
        let accounts = job.accounts();
        for replica in &reservation.placement.replicas {
            self.with_node(replica.node, |node| {
                for &slot in &replica.gpu_indices {
                    assert!(node.gpu_reserved[slot as usize].is_none(), "GPU {slot} held twice");
                    node.gpu_reserved[slot as usize] = Some(id);
                }
                node.reserved = node.reserved.plus(per_replica);
            });
        }
        self.charge(accounts, total);
        self.reserving.insert(id);
        self.jobs.get_mut(&id).expect("known").state = JobState::Pending { reservation: Some(reservation) };
    }

    /// Give up a pending job's reservation, if it has one.
    pub(crate) fn drop_reservation(&mut self, id: JobId) -> Option<Reservation> {
        let job = self.jobs.get_mut(&id)?;
        let JobState::Pending { reservation } = &mut job.state else { return None };
        let reservation = reservation.take()?;
        let per_replica = job.spec.per_replica;
        let total = job.spec.total();
        let accounts = job.accounts();
        for replica in &reservation.placement.replicas {
            self.with_node(replica.node, |node| {
                for &slot in &replica.gpu_indices {
                    debug_assert_eq!(node.gpu_reserved[slot as usize], Some(id));
                    node.gpu_reserved[slot as usize] = None;
                }
                node.reserved = node.reserved.minus(per_replica);
            });
        }
        self.uncharge(accounts, total);
        self.reserving.remove(&id);
        self.changes.room_grew = true;
        Some(reservation)
    }

    /// Turn `(node, replicas)` choices into slot assignments for `id`.
    pub(crate) fn assign_slots(&self, id: JobId, chosen: &[(NodeId, u32)], per_replica_gpus: u32) -> Placement {
        let mut replicas = Vec::new();
        for &(node_id, count) in chosen {
            let node = &self.nodes[&node_id];
            let slots = node.pick_slots(count * per_replica_gpus, Some(id));
            assert_eq!(slots.len() as u32, count * per_replica_gpus, "chosen node lacks the slots");
            let g = per_replica_gpus as usize;
            for i in 0..count as usize {
                replicas.push(ReplicaPlacement { node: node_id, gpu_indices: slots[i * g..(i + 1) * g].to_vec() });
            }
        }
        Placement { replicas }
    }
}
