//! The victim index: what the victim search reads, kept in step with every start, stop and
//! checkpoint report, and only when the policy preempts.
//!
//! - Per node, the running preemptible jobs with a replica there, in (priority, id) order,
//!   each with what it frees on that node and what its lost work is computed from
//!   ([`VictimEntry`]). A one-replica preemptor's search reads only these lists: it finds
//!   for each node the priority level at which the node first makes room, and then weighs
//!   victims on just the nodes that make room at the lowest such level.
//! - Per priority, how many preemptible jobs and GPUs run: the cheap test that comes before
//!   any search, and the candidate bound of rule 6.

use std::collections::BTreeMap;

use crate::ids::JobIx;
use crate::model::{Job, last_progress_saved, reported_saved_at};
use crate::types::{AccountId, GpuSet, JobId, Priority, Resources, Time};

/// A running preemptible job as the victim search sees it on one node. The search reads
/// every entry of every node it weighs, so what it reads is kept flat, and in front: the
/// level and room first, then what the lost work is computed from; the ids last.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub(crate) struct VictimEntry {
    pub priority: Priority,
    /// GPUs of the whole job (what its lost work is weighted by).
    pub gpus_total: u32,
    /// What it frees on this node: its replicas here (a share's GPU as `slots` says).
    pub freed: Resources,
    /// Its GPUs on this node.
    pub slots: GpuSet,
    /// The thousandths of its one GPU a share takes; 0 for whole GPUs.
    pub share_milli: u32,
    /// Its project, whose fair share ranks it among victims of its level (rule 2b); kept
    /// here so that the search need not read the job.
    pub project: AccountId,
    /// Not a victim before this (rule 1: its minimum run, its hourly maximum of preemptions).
    pub protected_until: Time,
    /// Where in its checkpoint interval the run started (its start modulo the interval; 0
    /// without one): the time since the interval's last boundary is then the distance from
    /// this phase to `now`'s (see `LostClock`).
    pub started_phase_ms: u64,
    /// The job's checkpoint interval hint; 0 when it has none.
    pub checkpoint_interval_ms: u64,
    /// The latest checkpoint reported during this run, or its start.
    pub reported_saved_at: Time,
    pub id: JobId,
    pub ix: JobIx,
    /// Its user, beside `project` its other account (`JobSpec::accounts`): a search for a
    /// job over a cap tests both without reading the job (it fills what was padding).
    pub user: AccountId,
}

impl VictimEntry {
    /// The entry of `job`, running since `started_at`, on a node where it holds `freed` on
    /// `slots`.
    pub fn new(job: &Job, ix: JobIx, started_at: Time, freed: Resources, slots: GpuSet) -> VictimEntry {
        // An interval of 0 is no hint, as none (`last_progress_saved`).
        let interval = job.spec.checkpoint_interval_ms.unwrap_or(0);
        VictimEntry {
            priority: job.spec.priority,
            ix,
            id: job.spec.id,
            // A share frees no GPU as the search counts (see `Resources::without_shares`).
            freed: freed.without_shares(),
            slots,
            share_milli: job.spec.per_replica.gpu_milli,
            project: job.spec.project,
            user: job.spec.user,
            started_phase_ms: started_at.millis().checked_rem(interval).unwrap_or(0),
            checkpoint_interval_ms: interval,
            reported_saved_at: reported_saved_at(job.last_checkpoint, started_at),
            protected_until: job.protected_until(started_at),
            gpus_total: job.spec.gpu_slots(),
        }
    }

    /// The most whole GPUs its going may free on this node: its whole GPUs, or for a share
    /// the GPU it shares (free only if the others on it go too). What the necessary
    /// conditions and wake-ups count, which must not count less than a search may find.
    pub fn gpus_freed_at_most(&self) -> u32 {
        self.freed.gpus + u32::from(self.share_milli > 0)
    }

    /// The list order: rule 2 (lowest priority first), then id.
    pub fn key(&self) -> (Priority, JobId) {
        (self.priority, self.id)
    }

    /// GPU-time lost since the run's last saved progress if it stopped at `now`: the
    /// time since the later of the reported save and the interval's last boundary, that is
    /// the shorter of the two times since (the free `lost_gpu_ms`, without going through
    /// the boundary's time: the one-replica search asks this of every victim of every
    /// node's room level).
    pub fn lost_gpu_ms(&self, now: Time) -> u64 {
        self.lost_gpu_ms_by(&mut LostClock::new(now))
    }

    /// `lost_gpu_ms` at the clock's `now`, its phase in this entry's interval from the clock.
    pub fn lost_gpu_ms_by(&self, clock: &mut LostClock) -> u64 {
        let interval = self.checkpoint_interval_ms;
        let since_reported = clock.now.ms_since(self.reported_saved_at);
        let since_saved = match interval {
            0 => since_reported,
            _ => {
                let now_phase = clock.phase_in(interval);
                // The run's phase is `now`'s less the time since the last boundary, modulo
                // the interval (a run never starts after `now`).
                let since_boundary = if now_phase >= self.started_phase_ms {
                    now_phase - self.started_phase_ms
                } else {
                    now_phase + interval - self.started_phase_ms
                };
                since_boundary.min(since_reported)
            }
        };
        since_saved * u64::from(self.gpus_total.max(1))
    }
}

/// `now` and its phase in the checkpoint interval last asked about. The one-replica search
/// weighs the lost work of every node's lowest victims at one `now`, nearly all with one
/// interval: one division then serves the whole search, where one per victim was a tenth
/// of its time.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LostClock {
    now: Time,
    interval_ms: u64,
    now_phase_ms: u64,
}

impl LostClock {
    pub fn new(now: Time) -> LostClock {
        LostClock { now, interval_ms: 0, now_phase_ms: 0 }
    }

    pub fn now(&self) -> Time {
        self.now
    }

    /// `now` modulo `interval_ms` (not 0).
    fn phase_in(&mut self, interval_ms: u64) -> u64 {
        if interval_ms != self.interval_ms {
            self.interval_ms = interval_ms;
            self.now_phase_ms = self.now.millis() % interval_ms;
        }
        self.now_phase_ms
    }
}

/// GPU-time a run started at `started_at` loses if it stops at `now` (see
/// `last_progress_saved`).
pub(crate) fn lost_gpu_ms(
    checkpoint_interval_ms: Option<u64>,
    last_checkpoint: Option<Time>,
    started_at: Time,
    gpus_total: u32,
    now: Time,
) -> u64 {
    let saved = last_progress_saved(checkpoint_interval_ms, last_checkpoint, started_at, now);
    lost_since(saved, gpus_total, now)
}

/// The time since progress was last saved, times the job's GPUs (at least one, so
/// CPU-only work counts too).
fn lost_since(saved: Time, gpus_total: u32, now: Time) -> u64 {
    now.ms_since(saved) * u64::from(gpus_total.max(1))
}

/// Running preemptible work at one priority.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Tally {
    pub jobs: u32,
    pub gpus: u32,
}

/// The per-priority part of the victim index (the per-node lists live on the nodes).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct VictimTallies {
    /// Running preemptible jobs and their GPUs by priority (no empty levels).
    pub preemptible: BTreeMap<Priority, Tally>,
}

impl VictimTallies {
    pub fn add(&mut self, priority: Priority, gpus: u32) {
        let tally = self.preemptible.entry(priority).or_default();
        tally.jobs += 1;
        tally.gpus += gpus;
    }

    pub fn remove(&mut self, priority: Priority, gpus: u32) {
        let tally = self.preemptible.get_mut(&priority).expect("tallied at start");
        tally.jobs -= 1;
        tally.gpus -= gpus;
        if tally.jobs == 0 {
            self.preemptible.remove(&priority);
        }
    }

    /// GPUs held by running preemptible jobs at or below `level`: with the GPUs free, what a
    /// victim search at that level could have at most (`SearchView::enough_gpus_below`, and
    /// the wake of a group whose search failed for want of it).
    pub fn preemptible_gpus_at_or_below(&self, level: Priority) -> u32 {
        self.preemptible.range(..=level).map(|(_, t)| t.gpus).sum()
    }

    /// Running preemptible jobs below `priority`.
    pub fn preemptible_jobs_below(&self, priority: Priority) -> u64 {
        self.preemptible.range(..priority).map(|(_, t)| u64::from(t.jobs)).sum()
    }
}

/// Insert an entry in its place in a node's list.
pub(crate) fn insert_entry(list: &mut Vec<VictimEntry>, entry: VictimEntry) {
    let at = list.partition_point(|e| e.key() < entry.key());
    debug_assert!(list.get(at).is_none_or(|e| e.key() != entry.key()), "{} listed twice", entry.id);
    list.insert(at, entry);
}

/// Remove a job's entry from a node's list.
pub(crate) fn remove_entry(list: &mut Vec<VictimEntry>, key: (Priority, JobId)) {
    let at = list.binary_search_by_key(&key, VictimEntry::key).expect("a running victim is listed");
    list.remove(at);
}

/// A job's entry in a node's list, to update its checkpoint.
pub(crate) fn entry_mut(list: &mut [VictimEntry], key: (Priority, JobId)) -> Option<&mut VictimEntry> {
    let at = list.binary_search_by_key(&key, VictimEntry::key).ok()?;
    Some(&mut list[at])
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// An entry's lost work is what the job's own formula gives: the time since the
        /// later of its reported save and its interval's last boundary, times its GPUs.
        #[test]
        fn an_entrys_lost_work_is_the_jobs(
            interval in prop_oneof![Just(0u64), 1..5_000u64],
            started in 0..20_000u64,
            reported_after in prop_oneof![Just(None), (0..20_000u64).prop_map(Some)],
            now_after in 0..40_000u64,
            gpus in 0..9u32,
            other_interval in 1..5_000u64,
        ) {
            let started_at = Time(started);
            let now = Time(started + now_after);
            let last_checkpoint = reported_after.map(|r| Time(started + r));
            let entry = VictimEntry {
                priority: 0,
                gpus_total: gpus,
                freed: Resources::ZERO,
                slots: GpuSet::EMPTY,
                share_milli: 0,
                project: AccountId(0),
                protected_until: started_at,
                started_phase_ms: if interval > 0 { started % interval } else { 0 },
                checkpoint_interval_ms: interval,
                reported_saved_at: reported_saved_at(last_checkpoint, started_at),
                id: JobId(1),
                ix: crate::ids::JobIx(0),
                user: AccountId(0),
            };
            let expected = lost_gpu_ms(Some(interval).filter(|i| *i > 0), last_checkpoint, started_at, gpus, now);
            prop_assert_eq!(entry.lost_gpu_ms(now), expected);
            // With a clock that was last asked about another interval, and then again.
            let mut clock = LostClock::new(now);
            let other = VictimEntry {
                checkpoint_interval_ms: other_interval,
                started_phase_ms: started % other_interval,
                ..entry
            };
            let _ = other.lost_gpu_ms_by(&mut clock);
            prop_assert_eq!(entry.lost_gpu_ms_by(&mut clock), expected);
            prop_assert_eq!(entry.lost_gpu_ms_by(&mut clock), expected);
        }
    }
}
