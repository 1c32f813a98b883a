//! The core's state: jobs, their queue keys, states and reservations.

use crate::decision::StopCause;
use crate::ids::{GroupIx, GroupKey, QueueKey};
use crate::types::{AccountId, JobId, JobSpec, Placement, PreemptionPolicy, Resources, Time};

/// GPUs held for a preemptor while its victims terminate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Reservation {
    pub placement: Placement,
    pub victims: Vec<JobId>,
    /// Victims still terminating for this preemptor: counted down as they exit, so that
    /// readiness is known without looking at them every cycle.
    pub waiting: u32,
    /// What the hold charges each of the preemptor's accounts, in `Job::accounts` order:
    /// the gang's total less what its victims still terminating hold of the same account
    /// (they stay charged until they exit; see `ledger::hold_charges`).
    pub charged: [Resources; crate::ledger::CHARGED_ACCOUNTS_MAX],
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum JobState {
    Pending {
        reservation: Option<Reservation>,
    },
    Running {
        placement: Placement,
        started_at: Time,
    },
    /// Asked to stop; its GPUs stay assigned until the driver reports the exit.
    Terminating {
        placement: Placement,
        started_at: Time,
        why: Termination,
    },
}

/// Where a victim's cohort charge went: to the hold of a preemptor of `cohort`, a job of
/// `preemptor_project`. The project is kept with the move because the preemptor may be
/// gone (cancelled) before its victim is, and the victim counts again in the cohort if
/// that project leaves it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct MovedToHold {
    pub cohort: AccountId,
    pub preemptor_project: AccountId,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Termination {
    /// Preempted for `preemptor`: requeued on exit.
    Preempted { preemptor: JobId, deadline: Time },
    /// Stopped for good: removed on exit.
    Stopped(StopCause),
}

/// The window of `preemptions_per_hour_max`.
pub(crate) const HOUR_MS: u64 = 3_600_000;

#[derive(Clone, Debug)]
pub(crate) struct Job {
    pub spec: JobSpec,
    pub key: QueueKey,
    pub state: JobState,
    /// Run time of finished runs (for the run-time limit).
    pub runtime_done_ms: u64,
    pub last_checkpoint: Option<Time>,
    /// The equivalence group it queues in while queued (see `queue.rs`).
    pub queued_in: Option<GroupIx>,
    pub preemptions: u32,
    /// When it was last chosen as a victim (at most `preemptions_per_hour_max` kept, oldest
    /// first).
    pub preempted_at: Vec<Time>,
    /// Cancelled while terminating for preemption: remove instead of requeue on exit.
    pub cancelled: bool,
    /// When it last entered the queue: its submit, or its last requeue (rule 1's
    /// preemption delay counts from then).
    pub queued_at: Time,
    /// Terminating for a preemptor of its own project's cohort: its charge to that cohort
    /// has moved to the preemptor's hold (see `ledger.rs`, "moved to a hold").
    pub moved_to_hold: Option<MovedToHold>,
    /// While running: when its run is expected to end, as `estimate.rs` said at its start
    /// or when it last ran past that (see `Scheduler::expected_end`).
    pub expected_end: Time,
    /// The cycle (`Counters::cycles`) that last started it: a start chosen as a victim in
    /// the cycle that made it is taken back, not preempted (`Scheduler::take_back_start`).
    pub started_in_cycle: u64,
}

impl Job {
    /// The accounts this job is charged to (see `JobSpec::accounts`).
    pub fn accounts(&self) -> impl Iterator<Item = AccountId> + use<> {
        self.spec.accounts()
    }

    /// The equivalence group of jobs that get the same answer from a cycle as this one.
    pub fn group_key(&self) -> GroupKey {
        let spec = &self.spec;
        GroupKey {
            priority: spec.priority,
            model: spec.gpu_model,
            per_replica: spec.per_replica,
            replicas: spec.replicas,
            user: spec.user,
            project: spec.project,
            may_preempt: spec.preemption_policy == PreemptionPolicy::PreemptLowerPriority,
            overrides_protection: spec.overrides_protection,
            // What a reservation's backfill test reads of the job: how long it may run (a
            // requeued job under a total limit may have less left than its group's head; it
            // then waits with the head, which delays no reservation).
            run_limit_ms: match (spec.max_runtime_ms.or(spec.runtime_estimate_ms), spec.max_total_runtime_ms) {
                (None, None) => None,
                (a, b) => Some(a.unwrap_or(u64::MAX).min(b.unwrap_or(u64::MAX)).saturating_add(spec.grace_ms)),
            },
        }
    }

    /// Until when a run started at `started_at` may not be preempted (rule 1): its minimum
    /// run, and, if it was preempted its hourly maximum of times, an hour after the oldest of
    /// those. `started_at` itself when nothing protects it.
    pub fn protected_until(&self, started_at: Time) -> Time {
        let min_run = started_at.plus_ms(self.spec.min_run_before_preemption_ms);
        let capped = self.spec.preemptions_per_hour_max.and_then(|max| {
            let max = max as usize;
            let recent = &self.preempted_at;
            (recent.len() >= max && max > 0).then(|| recent[recent.len() - max].plus_ms(HOUR_MS))
        });
        capped.map_or(min_run, |c| c.max(min_run))
    }

    /// From when it may preempt (rule 1's preemption delay): `queued_at` itself when its
    /// class sets no delay.
    pub fn may_preempt_from(&self) -> Time {
        self.queued_at.plus_ms(self.spec.preemption_delay_ms)
    }

    /// Remember that it was chosen as a victim at `now` (for `protected_until`).
    pub fn record_preemption(&mut self, now: Time) {
        let Some(max) = self.spec.preemptions_per_hour_max else { return };
        self.preempted_at.push(now);
        let excess = self.preempted_at.len().saturating_sub(max as usize);
        self.preempted_at.drain(..excess);
    }

    /// A placed job's key in `Scheduler::run_ends` and its nodes' lists of ends: a running
    /// job's `expected_end`, a preempted one's grace deadline, a stopped one's start (it is
    /// expected to leave at once).
    pub fn end_key(&self) -> Time {
        match &self.state {
            JobState::Running { .. } => self.expected_end,
            JobState::Terminating { why: Termination::Preempted { deadline, .. }, .. } => *deadline,
            JobState::Terminating { started_at, .. } => *started_at,
            JobState::Pending { .. } => unreachable!("a pending job is not placed"),
        }
    }

    /// GPU-time lost if the job, now running, stopped at `now` (0 when it does not run).
    pub fn lost_gpu_ms(&self, now: Time) -> u64 {
        match self.state {
            JobState::Running { started_at, .. } => crate::victims::lost_gpu_ms(
                self.spec.checkpoint_interval_ms,
                self.last_checkpoint,
                started_at,
                self.spec.total().gpus,
                now,
            ),
            _ => 0,
        }
    }

    /// When a run started at `started_at` reaches a run-time limit: its own (per run), or
    /// the job's total less what its earlier runs used, whichever comes first.
    pub fn runtime_deadline(&self, started_at: Time) -> Option<Time> {
        let per_run = self.spec.max_runtime_ms;
        let total_left = self.spec.max_total_runtime_ms.map(|total| total.saturating_sub(self.runtime_done_ms));
        let left = match (per_run, total_left) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        left.map(|ms| started_at.plus_ms(ms))
    }
}

/// When a run started at `started_at` last had its progress saved, as of `now`: the latest
/// checkpoint reported during the run, or the one its interval hint implies, or its start.
pub(crate) fn last_progress_saved(
    checkpoint_interval_ms: Option<u64>,
    last_checkpoint: Option<Time>,
    started_at: Time,
    now: Time,
) -> Time {
    let reported = reported_saved_at(last_checkpoint, started_at);
    let Some(interval) = checkpoint_interval_ms.filter(|i| *i > 0) else {
        return reported;
    };
    let ran = now.ms_since(started_at);
    // Gang and quota searches ask this of every candidate they weigh: most runs are in
    // their first intervals, where subtracting spares a division.
    let since_boundary = if ran < interval {
        ran
    } else if ran - interval < interval {
        ran - interval
    } else {
        ran % interval
    };
    started_at.plus_ms(ran - since_boundary).max(reported)
}

/// The latest checkpoint reported during a run started at `started_at`, or its start.
pub(crate) fn reported_saved_at(last_checkpoint: Option<Time>, started_at: Time) -> Time {
    last_checkpoint.filter(|t| *t >= started_at).unwrap_or(started_at)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The hint's boundary, however it is computed, is the last whole interval since the
    /// start: checked against the plain formula on each side of the first boundaries, far
    /// beyond them, and with intervals too large to double.
    #[test]
    fn saved_by_hint_is_the_last_whole_interval() {
        let start = Time(5_000);
        for interval in [1, 7, 1_000, 1_800_000, u64::MAX / 2 + 3, u64::MAX - 5_000] {
            let rans = [0, 1, interval - 1, interval, interval + 1, 2 * (interval % (u64::MAX / 4)), 123_456_789];
            for ran in rans.into_iter().chain([u64::MAX - 5_000]) {
                let now = start.plus_ms(ran);
                let expected = start.plus_ms(ran - ran % interval);
                assert_eq!(
                    last_progress_saved(Some(interval), None, start, now),
                    expected,
                    "interval {interval}, ran {ran}"
                );
            }
        }
        // No hint (or a zero one): the start, unless a checkpoint was reported since.
        assert_eq!(last_progress_saved(None, None, start, Time(9_000)), start);
        assert_eq!(last_progress_saved(Some(0), Some(Time(7_000)), start, Time(9_000)), Time(7_000));
        assert_eq!(last_progress_saved(Some(1_000), Some(Time(4_000)), start, Time(9_500)), Time(9_000));
    }
}
