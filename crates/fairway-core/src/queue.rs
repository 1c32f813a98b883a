//! The pending queue, kept as equivalence groups.
//!
//! Jobs with the same priority, shape (GPU model, per-replica resources, replicas),
//! accounts and preemption policy get the same answer from a cycle, so a cycle asks once
//! per group and stops at the first failure: every later member would fail the same way
//! (free room only shrinks during a cycle). A failed group goes to sleep, with its verdict
//! as every member's pending reason, indexed by what would wake it (free room for one of
//! its replicas, any change of free room, a victim starting below its priority, a change
//! of one of its accounts). Events mark what changed; the next cycle wakes only the
//! groups indexed under it. A cycle's cost is thus proportional to the groups woken and the
//! jobs started, not to the number of groups or the queue depth (Kueue's equivalence
//! hashing and requeue-on-event, Volcano's skipping of unchanged unschedulable jobs).
//!
//! A wake that turns out needless costs one evaluation, never a wrong decision; a wake
//! missed would leave a job waiting forever, so the indexes err on the side of waking.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound::{Excluded, Included, Unbounded};

use crate::decision::PendingReason;
use crate::state::QueueKey;
use crate::types::{AccountId, GpuModel, Priority, Resources};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct GroupKey {
    pub priority: Priority,
    pub model: Option<GpuModel>,
    pub per_replica: Resources,
    pub replicas: u32,
    pub user: AccountId,
    pub project: AccountId,
    pub may_preempt: bool,
}

impl GroupKey {
    /// The accounts its jobs are charged to (once if the same).
    fn accounts(&self) -> impl Iterator<Item = AccountId> + use<> {
        let (u, p) = (self.user, self.project);
        std::iter::once(p).chain((u != p).then_some(u))
    }
}

/// Why a group's head could not start, and what would make it worth asking again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Verdict {
    pub reasons: Vec<PendingReason>,
    pub wake: Wake,
}

impl Verdict {
    /// Under strict order (backfill off), does this failure block the jobs behind it? A job
    /// waiting for its own quota does not, nor one that no node can ever hold (it would
    /// block the queue forever). Decided by the reason, so that a dormant verdict blocks
    /// exactly when a fresh one would. (Fix: dormant quota verdicts blocked the queue from
    /// the second cycle on, and never-fits verdicts blocked it.)
    pub fn blocks_strict_order(&self) -> bool {
        !matches!(self.reasons.first(), Some(PendingReason::OverQuota { .. } | PendingReason::NeverFits { .. }))
    }
}

/// What wakes a failed group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Wake {
    /// Ask again next cycle (a per-cycle budget ran out): the group stays awake.
    NextCycle,
    /// Sleep until one of these changes.
    On(WakeOn),
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct WakeOn {
    /// The usage or cap of one of the group's accounts changes.
    pub accounts: bool,
    pub room: RoomWake,
    /// A preemptible job starts below the group's priority (a new victim candidate).
    pub victims: bool,
}

/// Which growth of free room wakes a group.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum RoomWake {
    /// None: room is not what it waits for.
    #[default]
    Never,
    /// Growth after which some node of its model has free GPUs for one replica.
    Fits,
    /// Any growth (a preemptor's victims plus free room may now suffice; a node that was
    /// drained may be back).
    Any,
}

#[derive(Clone, Debug, Default)]
pub(crate) struct Group {
    pub members: BTreeSet<QueueKey>,
    /// The last answer for the group (kept while awake again, as the members' reason).
    pub verdict: Option<Verdict>,
    /// Asleep: indexed under `verdict`'s wake conditions, not considered by cycles.
    pub asleep: bool,
}

impl Group {
    fn head(&self) -> QueueKey {
        *self.members.first().expect("groups are never empty")
    }

    fn blocks_strict_order(&self) -> bool {
        self.verdict.as_ref().is_some_and(Verdict::blocks_strict_order)
    }
}

/// What changed since the last cycle's wake-up pass.
#[derive(Clone, Debug, Default)]
pub(crate) struct Changes {
    pub accounts: Vec<AccountId>,
    pub room_grew: bool,
    /// The lowest priority at which a preemptible job started.
    pub victim_priority_min: Option<Priority>,
}

impl Changes {
    pub fn victim_started(&mut self, priority: Priority) {
        self.victim_priority_min = Some(self.victim_priority_min.map_or(priority, |p| p.min(priority)));
    }
}

#[derive(Clone, Debug, Default)]
pub(crate) struct PendingQueue {
    /// Every pending job in scheduling order.
    pub all: BTreeSet<QueueKey>,
    pub groups: BTreeMap<GroupKey, Group>,
    /// Heads of the awake groups, in scheduling order: what the next cycle considers.
    pub awake: BTreeSet<(QueueKey, GroupKey)>,
    /// Heads of sleeping groups whose verdict blocks strict order: under strict order the
    /// first of them blocks every job behind it.
    pub asleep_blocking: BTreeSet<(QueueKey, GroupKey)>,
    /// Sleeping groups by what wakes them.
    by_account: BTreeSet<(AccountId, GroupKey)>,
    /// `RoomWake::Fits`, by GPUs per replica.
    by_room_fits: BTreeSet<(u32, GroupKey)>,
    by_room_any: BTreeSet<GroupKey>,
    /// By the group's priority: a victim starting at `p` wakes those above `p`.
    by_victims: BTreeSet<(Priority, GroupKey)>,
}

impl PendingQueue {
    pub fn insert(&mut self, key: QueueKey, gk: GroupKey) {
        let fresh = self.all.insert(key);
        assert!(fresh, "{} queued twice", key.id);
        let group = self.groups.entry(gk).or_default();
        let old_head = group.members.first().copied();
        group.members.insert(key);
        match old_head {
            None => {
                self.awake.insert((key, gk));
            }
            Some(old) if key < old => self.move_head(gk, old, key),
            Some(_) => {}
        }
    }

    pub fn remove(&mut self, key: &QueueKey, gk: &GroupKey) {
        let was = self.all.remove(key);
        assert!(was, "{} was not queued", key.id);
        let group = self.groups.get_mut(gk).expect("queued job has a group");
        let old_head = group.head();
        group.members.remove(key);
        if group.members.is_empty() {
            if group.asleep {
                self.unindex(*gk, old_head);
            } else {
                self.awake.remove(&(old_head, *gk));
            }
            self.groups.remove(gk);
        } else if old_head == *key {
            let new_head = group.head();
            self.move_head(*gk, old_head, new_head);
        }
    }

    /// Keep the head sets in step when a group's first member changes.
    fn move_head(&mut self, gk: GroupKey, old: QueueKey, new: QueueKey) {
        let group = &self.groups[&gk];
        let set = if !group.asleep {
            &mut self.awake
        } else if group.blocks_strict_order() {
            &mut self.asleep_blocking
        } else {
            return;
        };
        let was = set.remove(&(old, gk));
        debug_assert!(was, "head of {gk:?} not indexed");
        set.insert((new, gk));
    }

    pub fn len(&self) -> usize {
        self.all.len()
    }

    /// Record a group's failure: it sleeps unless told to try again next cycle.
    pub fn fail(&mut self, gk: GroupKey, verdict: Verdict) {
        let group = self.groups.get_mut(&gk).expect("group of a pending job");
        debug_assert!(!group.asleep, "only awake groups are considered");
        let sleeps = matches!(verdict.wake, Wake::On(_));
        group.verdict = Some(verdict);
        if sleeps {
            let head = group.head();
            group.asleep = true;
            self.awake.remove(&(head, gk));
            self.index(gk);
        }
    }

    /// A group's head started or is preempting: its old verdict no longer holds.
    pub fn clear_verdict(&mut self, gk: &GroupKey) {
        if let Some(group) = self.groups.get_mut(gk) {
            group.verdict = None;
        }
    }

    fn index(&mut self, gk: GroupKey) {
        let group = &self.groups[&gk];
        let Some(Verdict { wake: Wake::On(on), .. }) = group.verdict.as_ref() else { unreachable!("asleep") };
        let on = *on;
        if group.blocks_strict_order() {
            self.asleep_blocking.insert((group.head(), gk));
        }
        if on.accounts {
            self.by_account.extend(gk.accounts().map(|a| (a, gk)));
        }
        match on.room {
            RoomWake::Never => {}
            RoomWake::Fits => {
                self.by_room_fits.insert((gk.per_replica.gpus, gk));
            }
            RoomWake::Any => {
                self.by_room_any.insert(gk);
            }
        }
        if on.victims {
            self.by_victims.insert((gk.priority, gk));
        }
    }

    /// Undo `index`; `head` is the group's head when it was last indexed.
    fn unindex(&mut self, gk: GroupKey, head: QueueKey) {
        let group = &self.groups[&gk];
        let Some(Verdict { wake: Wake::On(on), .. }) = group.verdict.as_ref() else { unreachable!("asleep") };
        let on = *on;
        if group.blocks_strict_order() {
            self.asleep_blocking.remove(&(head, gk));
        }
        if on.accounts {
            for a in gk.accounts() {
                self.by_account.remove(&(a, gk));
            }
        }
        match on.room {
            RoomWake::Never => {}
            RoomWake::Fits => {
                self.by_room_fits.remove(&(gk.per_replica.gpus, gk));
            }
            RoomWake::Any => {
                self.by_room_any.remove(&gk);
            }
        }
        if on.victims {
            self.by_victims.remove(&(gk.priority, gk));
        }
    }

    fn wake(&mut self, gk: GroupKey) {
        self.unindex(gk, self.groups[&gk].head());
        let group = self.groups.get_mut(&gk).expect("indexed groups exist");
        group.asleep = false;
        self.awake.insert((group.head(), gk));
    }

    /// Wake the sleeping groups that `changes` may concern. `free_gpus_max(model)` is the
    /// most GPUs free on one schedulable node of the model (or any model for `None`).
    /// `changes` is emptied, keeping its allocation for the next cycle.
    pub fn wake_for(&mut self, changes: &mut Changes, mut free_gpus_max: impl FnMut(Option<GpuModel>) -> u32) {
        let mut woken: Vec<GroupKey> = Vec::new();
        changes.accounts.sort_unstable();
        changes.accounts.dedup();
        for account in changes.accounts.drain(..) {
            let range = (Included((account, GroupKey::MIN)), Unbounded);
            woken.extend(self.by_account.range(range).take_while(|(a, _)| *a == account).map(|(_, gk)| *gk));
        }
        if std::mem::take(&mut changes.room_grew) {
            woken.extend(self.by_room_any.iter().copied());
            let any_model_max = free_gpus_max(None);
            for &(gpus, gk) in self.by_room_fits.range(..=(any_model_max, GroupKey::MAX)) {
                if gk.model.is_none() || gpus <= free_gpus_max(gk.model) {
                    woken.push(gk);
                }
            }
        }
        if let Some(p) = changes.victim_priority_min.take() {
            let range = (Excluded((p, GroupKey::MAX)), Unbounded);
            woken.extend(self.by_victims.range(range).map(|(_, gk)| *gk));
        }
        // A group indexed several ways may be named twice; sorting makes waking order-free.
        woken.sort_unstable();
        woken.dedup();
        for gk in woken {
            self.wake(gk);
        }
    }
}

impl GroupKey {
    const MIN: GroupKey = GroupKey {
        priority: Priority::MIN,
        model: None,
        per_replica: Resources::ZERO,
        replicas: 0,
        user: AccountId(0),
        project: AccountId(0),
        may_preempt: false,
    };
    const MAX: GroupKey = GroupKey {
        priority: Priority::MAX,
        model: Some(GpuModel(u16::MAX)),
        per_replica: Resources { gpus: u32::MAX, cpu_millis: u64::MAX, memory_mib: u64::MAX },
        replicas: u32::MAX,
        user: AccountId(u32::MAX),
        project: AccountId(u32::MAX),
        may_preempt: true,
    };
}

impl PendingQueue {
    /// The queue's indexes agree with its groups: every job in exactly one group, every
    /// awake group's head in `awake`, every sleeping group with a sleeping verdict and
    /// indexed under it, nothing indexed that is not a group.
    pub fn check(&self) -> Result<(), String> {
        let members: usize = self.groups.values().map(|g| g.members.len()).sum();
        if members != self.all.len() {
            return Err(format!("{} jobs queued but {members} in groups", self.all.len()));
        }
        let mut awake = 0;
        let mut asleep_blocking = 0;
        for (gk, group) in &self.groups {
            let head = group.head();
            if !group.asleep {
                awake += 1;
                if !self.awake.contains(&(head, *gk)) {
                    return Err(format!("awake group of {} not in the awake set", head.id));
                }
                continue;
            }
            let Some(Verdict { wake: Wake::On(on), .. }) = &group.verdict else {
                return Err(format!("group of {} asleep without a wake condition", head.id));
            };
            let indexed = (on.accounts && gk.accounts().all(|a| self.by_account.contains(&(a, *gk))))
                || (on.room == RoomWake::Fits && self.by_room_fits.contains(&(gk.per_replica.gpus, *gk)))
                || (on.room == RoomWake::Any && self.by_room_any.contains(gk))
                || (on.victims && self.by_victims.contains(&(gk.priority, *gk)));
            if !indexed {
                return Err(format!("group of {} asleep but nothing wakes it", head.id));
            }
            if group.blocks_strict_order() {
                asleep_blocking += 1;
                if !self.asleep_blocking.contains(&(head, *gk)) {
                    return Err(format!("blocking group of {} not in the blocking set", head.id));
                }
            }
        }
        if awake != self.awake.len() || asleep_blocking != self.asleep_blocking.len() {
            return Err("head sets name groups that are gone".into());
        }
        let asleep = |gk: &GroupKey| self.groups.get(gk).is_some_and(|g| g.asleep);
        let stale = self.by_account.iter().any(|(_, gk)| !asleep(gk))
            || self.by_room_fits.iter().any(|(_, gk)| !asleep(gk))
            || self.by_room_any.iter().any(|gk| !asleep(gk))
            || self.by_victims.iter().any(|(_, gk)| !asleep(gk));
        if stale {
            return Err("a wake index names a group that is not asleep".into());
        }
        Ok(())
    }
}
