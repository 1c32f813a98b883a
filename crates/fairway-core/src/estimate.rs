//! How long runs are expected to last: what reservations (`plan.rs`) and start-time
//! estimates (`forecast.rs`) count on.
//!
//! A job's run is expected to last, in this order of preference:
//! 1. until its run-time limit (`max_runtime_ms`, or what its total limit leaves), plus the
//!    grace period of the stop there: the core stops it then;
//! 2. its own estimate (`JobSpec::runtime_estimate_ms`: a Kubernetes Job's
//!    `activeDeadlineSeconds`), and past it one more such period at a time;
//! 3. what its tenant's completed jobs ran: the **median remaining run** of the runs
//!    remembered (at most `RuntimeEstimates::history_runs_max` per tenant, the latest) that
//!    lasted longer than this job has run so far (all its runs together). The tenant is
//!    its user within its project when that user has at least [`HISTORY_RUNS_MIN`] runs
//!    remembered, else its project when the project has; a job that has run longer than
//!    every one of them is expected to run as long again as it has so far;
//! 4. `RuntimeEstimates::default_runtime_ms`, and past it one more such period at a time.
//!
//! Rule 3 conditions on what is known: a job that has run 5 hours is not expected to end
//! at the tenant's median of 1 hour, but at the median of the runs that went past 5 hours.
//! The history lives in the core's memory: a driver that restarts the core starts it empty.
//!
//! A running job keeps the end these rules gave it when it started (`Job::expected_end`)
//! until it runs past it; from then on it is expected to end where the rules place it as
//! of the moment asked, and reservations store that as its new end (`plan.rs`). An end
//! that moves only when passed lets reservations keep running jobs sorted by it instead of
//! weighing every one of them again at each cycle.

use std::collections::{HashMap, VecDeque};

use crate::ids::JobIx;
use crate::model::{JobState, Termination};
use crate::scheduler::Scheduler;
use crate::types::{AccountId, Time};

/// Runs a tenant must have completed before rule 3 uses them.
pub const HISTORY_RUNS_MIN: usize = 3;

/// Completed run times per tenant (rule 3).
#[derive(Clone, Debug, Default)]
pub(crate) struct RunHistory {
    /// Keyed by (project, user); `user: None` holds the project's runs. Looked up at every
    /// start and every revised end with reservations on, never listed: hashed, with a
    /// fixed-key hasher (runs are reproducible down to memory layout).
    runs: HashMap<(AccountId, Option<AccountId>), Runs, foldhash::fast::FixedState>,
}

/// One tenant's latest runs, in the order they completed and sorted.
#[derive(Clone, Debug, Default)]
struct Runs {
    latest: VecDeque<u64>,
    sorted: Vec<u64>,
}

impl RunHistory {
    /// A job of `user` in `project` completed after running `ran_ms` in all.
    pub fn record(&mut self, project: AccountId, user: AccountId, ran_ms: u64, runs_max: u32) {
        if runs_max == 0 {
            return;
        }
        for key in [(project, Some(user)), (project, None)] {
            let runs = self.runs.entry(key).or_default();
            if runs.latest.len() >= runs_max as usize
                && let Some(oldest) = runs.latest.pop_front()
            {
                let at = runs.sorted.partition_point(|&r| r < oldest);
                runs.sorted.remove(at);
            }
            runs.latest.push_back(ran_ms);
            let at = runs.sorted.partition_point(|&r| r < ran_ms);
            runs.sorted.insert(at, ran_ms);
        }
    }

    /// Rule 3: how much longer a job of `user` in `project` that has run `ran_ms` is
    /// expected to run, or `None` when its tenant has too few runs remembered.
    pub fn remaining_ms(&self, project: AccountId, user: AccountId, ran_ms: u64) -> Option<u64> {
        let sorted = &[(project, Some(user)), (project, None)]
            .into_iter()
            .filter_map(|key| self.runs.get(&key))
            .find(|runs| runs.sorted.len() >= HISTORY_RUNS_MIN)?
            .sorted;
        let longer = &sorted[sorted.partition_point(|&r| r <= ran_ms)..];
        if longer.is_empty() {
            return Some(ran_ms.max(1));
        }
        // The lower median: an actual remaining run, never an average of two.
        Some(longer[(longer.len() - 1) / 2] - ran_ms)
    }
}

impl Scheduler {
    /// When a running or terminating job is expected to end, as of `now` (module doc): a
    /// running job when it was expected to at its start, until it runs past that; then as
    /// the rules say of it at `now`.
    pub(crate) fn expected_end(&self, ix: JobIx, now: Time) -> Time {
        let job = &self.jobs[ix];
        match &job.state {
            JobState::Running { .. } if job.expected_end > now => job.expected_end,
            JobState::Running { started_at, .. } => match job.runtime_deadline(*started_at) {
                Some(deadline) => deadline.plus_ms(job.spec.grace_ms).max(now),
                None => {
                    let ran = now.ms_since(*started_at);
                    now.plus_ms(self.unlimited_remaining_ms(ix, ran))
                }
            },
            JobState::Terminating { why: Termination::Preempted { deadline, .. }, .. } => (*deadline).max(now),
            JobState::Terminating { started_at, .. } => now.max(*started_at),
            JobState::Pending { .. } => now,
        }
    }

    /// How long a pending job is expected to hold its GPUs once started (module doc).
    pub(crate) fn expected_run_ms(&self, ix: JobIx) -> u64 {
        let job = &self.jobs[ix];
        match job.runtime_deadline(Time::ZERO) {
            Some(d) => d.millis() + job.spec.grace_ms,
            None => self.unlimited_remaining_ms(ix, 0),
        }
    }

    /// Rules 2 to 4 for a job without a limit that has run `ran_ms` in its current run (or
    /// is about to start one: 0).
    fn unlimited_remaining_ms(&self, ix: JobIx, ran_ms: u64) -> u64 {
        let job = &self.jobs[ix];
        let one_more_period = |period: u64| {
            let period = period.max(1);
            (ran_ms / period + 1) * period - ran_ms
        };
        if let Some(own) = job.spec.runtime_estimate_ms {
            return one_more_period(own);
        }
        let ran_in_all = job.runtime_done_ms + ran_ms;
        match self.history.remaining_ms(job.spec.project, job.spec.user, ran_in_all) {
            Some(remaining) => remaining.max(1),
            None => one_more_period(self.config.policy.estimates.default_runtime_ms),
        }
    }

    /// A job completed: its run time is history (rule 3).
    pub(crate) fn learn_run_time(&mut self, ix: JobIx) {
        let job = &self.jobs[ix];
        let runs_max = self.config.policy.estimates.history_runs_max;
        self.history.record(job.spec.project, job.spec.user, job.runtime_done_ms, runs_max);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: AccountId = AccountId(1);
    const U: AccountId = AccountId(2);
    const V: AccountId = AccountId(3);

    fn history(runs: &[(AccountId, u64)]) -> RunHistory {
        let mut h = RunHistory::default();
        for &(user, ms) in runs {
            h.record(P, user, ms, 4);
        }
        h
    }

    #[test]
    fn too_few_runs_teach_nothing() {
        assert_eq!(history(&[(U, 10), (U, 20)]).remaining_ms(P, U, 0), None);
    }

    #[test]
    fn the_median_of_the_runs_longer_than_what_it_ran() {
        let h = history(&[(U, 10), (U, 40), (U, 100)]);
        assert_eq!(h.remaining_ms(P, U, 0), Some(40));
        // Past 10: the runs of 40 and 100 remain, 30 and 90 to go; the lower median.
        assert_eq!(h.remaining_ms(P, U, 10), Some(30));
        // Past every run: as long again.
        assert_eq!(h.remaining_ms(P, U, 150), Some(150));
    }

    #[test]
    fn a_user_with_few_runs_gets_the_projects() {
        let h = history(&[(U, 10), (U, 20), (U, 30), (V, 1000)]);
        assert_eq!(h.remaining_ms(P, V, 0), Some(20), "V has one run; P has 10, 20, 30, 1000");
        assert_eq!(h.remaining_ms(P, U, 0), Some(20));
    }

    #[test]
    fn only_the_latest_runs_are_kept() {
        let h = history(&[(U, 1), (U, 1), (U, 1), (U, 50), (U, 50), (U, 50), (U, 50)]);
        assert_eq!(h.remaining_ms(P, U, 0), Some(50));
    }

    #[test]
    fn nothing_is_kept_when_the_history_is_off() {
        let mut h = RunHistory::default();
        for _ in 0..5 {
            h.record(P, U, 10, 0);
        }
        assert_eq!(h.remaining_ms(P, U, 0), None);
    }
}
