//! The pending queue, kept as equivalence groups.
//!
//! Jobs with the same priority, shape (GPU model, per-replica resources, replicas),
//! accounts, preemption policy, standing against protection (rule 1's override) and run-time
//! limit (`GroupKey`) get the same answer from a cycle, so a cycle asks once
//! per group and stops at the first failure: every later member would fail the same way
//! (free room only shrinks during a cycle). A failed group goes to sleep, with its verdict
//! as every member's pending reason, indexed by what would wake it. Events mark what
//! changed; the next cycle wakes only the groups indexed under it. A cycle's cost is thus
//! proportional to the groups woken and the jobs started, not to the number of groups or
//! the queue depth (Kueue's equivalence hashing and requeue-on-event, Volcano's skipping of
//! unchanged unschedulable jobs).
//!
//! What wakes a group ([`WakeOn`]):
//! - for a group over quota, its account's usage dropping far enough ([`QuotaWake`]): the
//!   usage that counts is what the account holds beyond its own preemptible work below the
//!   group's priority (work the group could preempt to get back under the cap). That figure
//!   falls only when something of the account's is uncharged, never when a job of the
//!   account starts (a start below the group adds as much preemptible work as it charges),
//!   so only uncharges are looked at; or the cap changing. A group whose own preemptible
//!   work would bring it under its cap, and whose search still failed, waits on anything
//!   uncharged from, or any cap change of, its project, its user and its project's cohort
//!   (a cohort's capacity grows when a member joins or raises its nominal quota);
//! - room on one node for one of its replicas ([`RoomWake::Fits`]), or room counting what
//!   lower-priority preemptible work on that node would free ([`RoomWake::Reclaim`]), for a
//!   group that found no room. Room on a node grows only when something leaves it (an exit,
//!   a hold given up) or the node is added or uncordoned, and a group that failed had room
//!   on no node; so only the nodes that grew since can have room now, and only they are
//!   looked at. A preemptible job starting below a group never helps it: the GPUs it takes
//!   were free and the same GPUs become reclaimable. Several groups may want the same freed
//!   GPUs, so such wakes are lazy: the groups become candidates, in queue order, and the
//!   walk asks each one again only if a grown node still has room for it when its turn comes.
//!   A victim search can also fail within its bounds (victims per preemption, candidates) or
//!   by the order it takes victims in, with room enough: a node removed or drained changes
//!   what it sees, so that wakes every group that waits on victims; and where there are more
//!   candidates than a search examines, a victim leaving any node changes which it examines,
//!   so such a group waits for any growth of room instead;
//! - for a group whose project's cohort lends too little ([`CohortWake`]), the cohort no
//!   longer short for it, or (for one that could not reclaim) its project back within its
//!   nominal quota with it, so that it may reclaim. Both change only when the cohort's
//!   charge falls or a member's settled usage does (an uncharge, or a charge moved to a
//!   preemptor's hold, see `ledger.rs`), which the event handlers and the cycle record as
//!   an uncharge of the cohort; each sleeper on the cohort is then tested exactly. A start
//!   makes no cohort less short, so it wakes none of them (it wakes the groups that wait on
//!   the cohort to preempt or reclaim: what it charges they may take);
//! - for a group of a member of a cohort that found no room and nothing to preempt, and
//!   may not reclaim because its project would go over its nominal quota with it, its
//!   project back within (`CohortWake` with `short` false, scenario 148). That changes
//!   only when the project's settled usage falls, which the ledger notes
//!   (`Ledger::take_settled_fell`); only that project's sleepers are then tested, exactly;
//! - the GPUs free on the nodes of its model plus those held by preemptible work at or
//!   below a level, summed over the cluster, covering the group's GPUs
//!   ([`RoomWake::Total`]), for a group short of its cohort whose victim search could not
//!   succeed even with all the work it may take gone (its first necessary condition). A
//!   start never raises that sum (a run below the level takes free GPUs and makes as many
//!   preemptible, one at or above it only takes them), so it is worked out only when room
//!   grew, once per model and level. Any uncharge from its cohort, start in it or growth
//!   of room would wake it to fail the same way: on a cohort of many members that is
//!   nearly every event;
//! - for a group that may reclaim (its project within its nominal quota with the job) and
//!   whose search failed because no node could hold its replicas even with every run it may
//!   take gone, or whose project is within its nominal quota but found no member borrowing:
//!   room on a grown node counting its free GPUs, the preemptible runs below the group's
//!   priority and those of its priority of the other members that borrow
//!   ([`RoomWake::Borrowed`]); or a member of its cohort beginning to borrow (its runs of
//!   that priority become what the group may take). A node's free GPUs plus what the group
//!   may take there grow only so: something leaving the node, the node added or
//!   uncordoned, a run's protection ending (its nodes count as grown), or a member
//!   beginning to borrow; a start takes free GPUs and adds at most as many. A grown node
//!   that has fewer GPUs free or held by runs at or below the group's priority than one
//!   replica needs cannot hold it however the runs are counted, so a growth asks only the
//!   groups below that, per level (the index is by cohort, priority and GPUs per replica).
//!   The ledger notes
//!   when a member's settled usage crosses its nominal quota; a start in the walk that makes
//!   a member borrow wakes these groups at once (those the walk has yet to reach are asked
//!   in the same cycle). Waking them at any growth of room, or any charge or uncharge of
//!   their cohort, would wake them at nearly every event on a cohort of many members. A
//!   member joining, or a nominal quota changing, may make a member borrow with nothing
//!   charged: a cap change of their cohort wakes them outright, and any change of nominal
//!   quotas wakes every group asleep on room that may preempt (`Changes::nominal_changed`:
//!   who may reclaim from whom changed);
//! - a node added or uncordoned ([`RoomWake::Nodes`]), for a group no node can ever hold;
//! - any growth of room ([`RoomWake::Any`]), for a group that could get back under its cap
//!   by preempting its own account's work but found no room;
//! - a time ([`WakeOn::at`]), for a group whose head may not preempt yet (rule 1's
//!   preemption delay): from then on its head may, whatever else changed.
//!
//! A wake that turns out needless costs one evaluation, never a wrong decision; a wake
//! missed would leave a job waiting forever, so the conditions err on the side of waking
//! (the room checks count GPUs only), and the property test's oracle looks for misses.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap, VecDeque};
use std::ops::Bound::{Excluded, Included, Unbounded};

use crate::decision::PendingReason;
use crate::ids::{GroupIx, GroupKey, QueueKey};
use crate::types::{AccountId, GpuModel, JobId, NodeId, Priority, Time};

/// Why a group's head could not start, and what would make it worth asking again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Verdict {
    pub reasons: Reasons,
    pub wake: Wake,
}

impl Verdict {
    /// Under strict order (backfill off), does this failure block the jobs behind it? A job
    /// waiting for its own quota (or its cohort's) does not, nor one that no node can ever hold (it would
    /// block the queue forever). Decided by the reason, so that a dormant verdict blocks
    /// exactly when a fresh one would.
    pub fn blocks_strict_order(&self) -> bool {
        !matches!(
            self.reasons.first(),
            PendingReason::OverQuota { .. } | PendingReason::CohortExhausted { .. } | PendingReason::NeverFits { .. }
        )
    }
}

/// A verdict's reasons: one, and at most one more (why the job may not preempt either).
/// Held inline, so a verdict costs no allocation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Reasons {
    first: PendingReason,
    second: Option<PendingReason>,
}

impl Reasons {
    pub fn one(reason: PendingReason) -> Reasons {
        Reasons { first: reason, second: None }
    }

    pub fn push(&mut self, reason: PendingReason) {
        assert!(self.second.is_none(), "a verdict has at most two reasons");
        self.second = Some(reason);
    }

    pub fn first(&self) -> &PendingReason {
        &self.first
    }

    pub fn iter(&self) -> impl Iterator<Item = &PendingReason> {
        std::iter::once(&self.first).chain(self.second.as_ref())
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
    /// An account's usage drops far enough, or the account's cap changes (up to three: a
    /// job's project, its user, and its project's cohort).
    pub quota: [Option<QuotaWake>; 3],
    /// The group's cohort is no longer short for its jobs, or they may now reclaim (see
    /// [`CohortWake`]).
    pub cohort_short: Option<CohortWake>,
    pub room: RoomWake,
    /// A time: the group's head may preempt from then on (rule 1's preemption delay), or a
    /// reservation that holds it back is expected to start.
    pub at: Option<Time>,
    /// The reservations change (see `plan.rs`): a group a reservation held back.
    pub plan: bool,
}

/// When a group over `account`'s cap may fit under it: once the GPUs the account holds,
/// less its own preemptible work below `level`, are at most `base_gpus_max` (the cap less
/// what the job asks). `level` is the group's priority if it may preempt, else the lowest
/// priority (nothing is below it). GPUs only: the condition is necessary, not sufficient.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct QuotaWake {
    pub account: AccountId,
    pub level: Priority,
    pub base_gpus_max: i64,
}

/// When a group whose cohort is short may do better: once the cohort is no longer short
/// for its jobs, or, for a group that could not reclaim when it went to sleep
/// (`reclaims` false), once it may (its project back within its nominal quota with the
/// job: a reclaim also takes runs of its own priority). Both change only when the cohort's
/// charge or a member's settled usage falls, which the scheduler records as an uncharge
/// of the cohort (an uncharge proper, a member's charge following into its cohort, or a
/// charge moved to a preemptor's hold: `Scheduler::cohort_may_ease`); that is when they
/// are tested, exactly (`WakeChecks::cohort_wait_over`). A cap change of the cohort wakes
/// the group outright. A group whose cohort was not short (it found no room, and may not
/// reclaim: its project would go over its nominal quota with the job) waits for the
/// second alone (`short` false).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CohortWake {
    pub cohort: AccountId,
    pub reclaims: bool,
    /// Was the cohort short for the job when it went to sleep?
    pub short: bool,
}

/// Which growth of room wakes a group.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum RoomWake {
    /// None: room is not what it waits for.
    #[default]
    Never,
    /// A node of its model that grew has free GPUs for one replica.
    Fits,
    /// A node of its model that grew has GPUs for one replica, free or held by preemptible
    /// work below the group's priority.
    Reclaim,
    /// A node is added or uncordoned (node sizes are what it waits for).
    Nodes,
    /// Any growth of room anywhere.
    Any,
    /// A node of its model that grew has GPUs for one replica, free or held by preemptible
    /// work below the group's priority or of its priority and another member of `cohort`
    /// that borrows (what it may reclaim); or a member of `cohort` began to borrow. For a
    /// group that may reclaim and whose victim search failed because no node could hold
    /// its replicas even with all that work gone.
    Borrowed { cohort: AccountId },
    /// The GPUs free on the nodes of its model and those held by preemptible work at or
    /// below `level` anywhere, together, cover all of its GPUs (see
    /// `WakeChecks::gpus_at_or_below`): for a group whose victim search could not succeed
    /// even with all the work it may take gone.
    Total { level: Priority },
}

/// What the wake-up pass asks of the rest of the scheduler (the ledger, the nodes, the
/// victim tallies) about the sleeping groups it may wake.
pub(crate) trait WakeChecks {
    /// What counts against `account`'s cap for a group at `level` (see [`QuotaWake`]).
    fn quota_base_gpus(&self, account: AccountId, level: Priority) -> i64;
    /// Is the group's wait on its cohort over (see [`CohortWake`])?
    fn cohort_wait_over(&self, gk: &GroupKey, wait: CohortWake) -> bool;
    /// GPUs free on the nodes of `model` plus GPUs held by preemptible work at or below
    /// `priority` on any node. The sum falls when work at or above `priority` starts and
    /// holds when preemptible work below it starts (it takes free GPUs and makes as many
    /// reclaimable); it grows only when something leaves a node or a node is added, which
    /// is when room grows.
    fn gpus_at_or_below(&self, model: Option<GpuModel>, priority: Priority) -> u32;
    /// May a job of `gk` reclaim a run of its own priority from `owner`: is `owner` another
    /// member of `cohort` that borrows now?
    fn may_reclaim_from(&self, gk: &GroupKey, cohort: AccountId, owner: AccountId) -> bool;
}

/// What the cycle knows of the nodes that grew since the last one: the room checks of the
/// lazy wakes (counting GPUs only, so that they err on the side of waking).
pub(crate) trait GrownRoom {
    /// The most GPUs free on one grown node (any model).
    fn free_gpus_max(&self) -> u32;
    /// The most GPUs free or held by preemptible work below `priority` on one grown node.
    fn reclaimable_gpus_max(&self, priority: Priority) -> u32;
    /// Does one grown node of the group's model have room for one of its replicas, as
    /// `room` counts room? (`RoomWake::Borrowed` asks `admits_reclaim`.)
    fn admits(&self, gk: &GroupKey, room: RoomWake) -> bool;
    /// `RoomWake::Borrowed`'s room: free GPUs and those of preemptible runs below the
    /// group's priority, or of its priority where `may_take` their project.
    fn admits_reclaim(&self, gk: &GroupKey, may_take: &dyn Fn(AccountId) -> bool) -> bool;
}

/// A group's members, ascending. Members join at the back (a job submitted later sorts
/// later in its group) and leave from the front (the walk starts heads), so a sorted ring
/// buffer does both in constant time, where a tree costs a search and often an allocation
/// (on the Philly replay the member sets were 2% of the loop). A key out of order (a
/// requeued job returns to its place) is put in place by moving the shorter side, which
/// is short when the key is near either end; a list where a key would move more than
/// `MEMBERS_SHIFT_MAX` others becomes a tree for good (shortest-first order can put
/// every key anywhere in a group), so that no insertion costs more than a tree's.
#[derive(Clone, Debug)]
pub(crate) enum Members {
    Ring(VecDeque<QueueKey>),
    Tree(BTreeSet<QueueKey>),
}

/// The most members an insertion or removal may move in a `Members::Ring`.
const MEMBERS_SHIFT_MAX: usize = 64;

impl Default for Members {
    fn default() -> Members {
        Members::Ring(VecDeque::new())
    }
}

impl Members {
    pub fn first(&self) -> Option<&QueueKey> {
        match self {
            Members::Ring(ring) => ring.front(),
            Members::Tree(tree) => tree.first(),
        }
    }

    pub fn len(&self) -> usize {
        match self {
            Members::Ring(ring) => ring.len(),
            Members::Tree(tree) => tree.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Adds `key`; false if it is there already.
    pub fn insert(&mut self, key: QueueKey) -> bool {
        let ring = match self {
            Members::Tree(tree) => return tree.insert(key),
            Members::Ring(ring) => ring,
        };
        if ring.back().is_none_or(|last| *last < key) {
            ring.push_back(key);
            return true;
        }
        let at = match ring.binary_search(&key) {
            Ok(_) => return false,
            Err(at) => at,
        };
        if at.min(ring.len() - at) <= MEMBERS_SHIFT_MAX {
            ring.insert(at, key);
        } else {
            self.become_tree().insert(key);
        }
        true
    }

    /// The members as a tree, for good (see `MEMBERS_SHIFT_MAX`).
    fn become_tree(&mut self) -> &mut BTreeSet<QueueKey> {
        if let Members::Ring(ring) = self {
            *self = Members::Tree(ring.drain(..).collect());
        }
        match self {
            Members::Tree(tree) => tree,
            Members::Ring(_) => unreachable!("just made a tree"),
        }
    }

    pub fn pop_first(&mut self) -> Option<QueueKey> {
        let first = match self {
            Members::Ring(ring) => ring.pop_front(),
            Members::Tree(tree) => tree.pop_first(),
        };
        self.ring_again_if_empty();
        first
    }

    /// An emptied tree becomes a ring again: its slot's next group starts afresh.
    fn ring_again_if_empty(&mut self) {
        if matches!(self, Members::Tree(tree) if tree.is_empty()) {
            *self = Members::default();
        }
    }

    /// Removes `key`; false if it was not there.
    pub fn remove(&mut self, key: &QueueKey) -> bool {
        let ring = match self {
            Members::Tree(tree) => {
                let was = tree.remove(key);
                self.ring_again_if_empty();
                return was;
            }
            Members::Ring(ring) => ring,
        };
        let Ok(at) = ring.binary_search(key) else { return false };
        if at.min(ring.len() - at) <= MEMBERS_SHIFT_MAX {
            ring.remove(at);
        } else {
            self.become_tree().remove(key);
        }
        true
    }

    /// The member after `key` in order.
    pub fn after(&self, key: &QueueKey) -> Option<&QueueKey> {
        match self {
            Members::Ring(ring) => ring.get(ring.partition_point(|k| k <= key)),
            Members::Tree(tree) => tree.range((Excluded(*key), Unbounded)).next(),
        }
    }

    pub fn iter(&self) -> Box<dyn Iterator<Item = &QueueKey> + '_> {
        match self {
            Members::Ring(ring) => Box::new(ring.iter()),
            Members::Tree(tree) => Box::new(tree.iter()),
        }
    }
}

#[derive(Clone, Debug)]
pub(crate) struct Group {
    pub key: GroupKey,
    pub members: Members,
    /// The last answer for the group (kept while awake again, as the members' reason).
    pub verdict: Option<Verdict>,
    /// Asleep: indexed under `verdict`'s wake conditions, not considered by cycles.
    pub asleep: bool,
    /// The wake conditions it is indexed under: `verdict`'s while asleep. A group the walk
    /// wakes keeps its entries until it fails again, when the same conditions need no new
    /// entries, or the walk ends (`wake_lazily`).
    indexed: Option<WakeOn>,
}

impl Group {
    pub fn head(&self) -> QueueKey {
        *self.members.first().expect("groups are never empty")
    }

    fn blocks_strict_order(&self) -> bool {
        self.verdict.as_ref().is_some_and(Verdict::blocks_strict_order)
    }
}

/// What changed since the last cycle's wake-up pass.
#[derive(Clone, Debug, Default)]
pub(crate) struct Changes {
    /// Accounts something was uncharged from, and cohorts that may have eased without an
    /// uncharge (`Scheduler::cohort_may_ease`), with repeats.
    pub uncharged: Vec<AccountId>,
    /// Accounts whose cap changed.
    pub caps: Vec<AccountId>,
    /// Cohorts work was charged to (a start): what a member waiting on the cohort may
    /// preempt or reclaim grew, but no cohort is less short for it.
    pub cohort_charged: Vec<AccountId>,
    /// Nodes where room grew (with repeats).
    pub grown: Vec<NodeId>,
    /// A node was added or uncordoned.
    pub nodes_changed: bool,
    /// A node was removed or drained: its victims are gone from every search.
    pub nodes_lost: bool,
    /// The reservations changed.
    pub plan_changed: bool,
    /// Cohorts one of whose members began to borrow (with repeats).
    pub borrowing_began: Vec<AccountId>,
    /// Members of cohorts whose settled usage fell (with repeats).
    pub settled_fell: Vec<AccountId>,
    /// A project joined or left a cohort, or its nominal quota changed: which jobs may
    /// reclaim, and from whom, changed with no charge or room noted.
    pub nominal_changed: bool,
    /// Scratch for `wake_for`, kept between cycles.
    woken: Vec<GroupIx>,
}

impl Changes {
    /// Room grew on a node: something left it, or it was added or uncordoned.
    pub fn room_grew(&mut self, node: NodeId) {
        self.grown.push(node);
    }

    /// Nothing recorded: a wake-up pass would wake no group.
    pub fn is_empty(&self) -> bool {
        self.uncharged.is_empty()
            && self.caps.is_empty()
            && self.cohort_charged.is_empty()
            && self.grown.is_empty()
            && !self.nodes_changed
            && !self.nodes_lost
            && !self.plan_changed
            && self.borrowing_began.is_empty()
            && self.settled_fell.is_empty()
            && !self.nominal_changed
    }
}

#[derive(Clone, Debug, Default)]
pub(crate) struct PendingQueue {
    /// Pending jobs queued (in all groups, and holding).
    len: usize,
    /// The groups by slot. A slot whose group emptied is vacant (no members; in `vacant`)
    /// and is reused in place: groups come and go with every arrival and start, and a group
    /// moved in and out of its slot costs a copy of the whole verdict each time.
    groups: Vec<Group>,
    vacant: Vec<GroupIx>,
    /// Lookups only (a fixed-key hasher; never iterated).
    by_key: HashMap<GroupKey, GroupIx, foldhash::fast::FixedState>,
    /// Heads of the awake groups, in scheduling order: what the next cycle considers.
    pub awake: BTreeSet<(QueueKey, GroupIx)>,
    /// Heads of sleeping groups whose verdict blocks strict order: under strict order the
    /// first of them blocks every job behind it.
    pub asleep_blocking: BTreeSet<(QueueKey, GroupIx)>,
    /// Sleeping groups by what wakes them.
    by_quota: BTreeSet<(AccountId, Priority, i64, GroupIx)>,
    /// `WakeOn::cohort_short`, by cohort.
    by_cohort_short: BTreeSet<(AccountId, GroupIx)>,
    /// `WakeOn::cohort_short` of a group whose cohort was not short (`CohortWake::short`
    /// false), by project: only its project's settled usage falling can end that wait.
    by_nominal_wait: BTreeSet<(AccountId, GroupIx)>,
    /// `RoomWake::Total`, by GPU model, priority and GPUs in all.
    by_total: BTreeSet<(Option<GpuModel>, Priority, u32, GroupIx)>,
    /// `RoomWake::Fits`, by GPUs per replica.
    by_room_fits: BTreeSet<(u32, GroupIx)>,
    /// `RoomWake::Reclaim`, by priority and GPUs per replica.
    by_reclaim: BTreeSet<(Priority, u32, GroupIx)>,
    /// The priorities in `by_reclaim`, with how many groups each: the wake-up pass looks at
    /// each level once without searching the index for the next.
    reclaim_levels: BTreeMap<Priority, u32>,
    by_nodes: BTreeSet<GroupIx>,
    by_room_any: BTreeSet<GroupIx>,
    /// `RoomWake::Borrowed`, by cohort, priority and GPUs per replica: the wake-up pass
    /// reads, per cohort and level, only the groups a grown node could hold with every run
    /// at or below their level gone (`find_candidates`).
    by_borrowed: BTreeSet<(AccountId, Priority, u32, GroupIx)>,
    /// `WakeOn::plan`.
    by_plan: BTreeSet<GroupIx>,
    /// `WakeOn::at`, by time.
    by_time: BTreeSet<(Time, GroupIx)>,
    /// Preemptors holding GPUs while their victims terminate. They leave their group (the
    /// walk has nothing to ask them; they start when their victims are gone), but keep
    /// their place in the queue's order, and under strict order the first of them blocks
    /// every job behind it.
    pub holding: BTreeSet<QueueKey>,
    /// How many live groups there are at each rank (a group's members share its rank;
    /// holding jobs are in none): the best rank queued, which a preemptor must beat to move
    /// off its hold (cycle step 3b). Sorted by rank, counts above zero; a vector, as a queue
    /// has a few distinct ranks. Changed only when a group gets its first member or loses
    /// its last.
    groups_by_rank: Vec<(Reverse<Priority>, u32)>,
    /// Sleeping groups that room on a grown node may concern, in queue order: the walk
    /// asks each again if a grown node still has room for it when its turn comes.
    pub candidates: Vec<(QueueKey, GroupIx)>,
    /// Groups the walk woke with `wake_lazily`, for `settle_lazy_wakes`.
    lazily_woken: Vec<GroupIx>,
}

impl PendingQueue {
    /// Queue a job in the group of `gk`, creating the group if needed; returns the group.
    pub fn insert(&mut self, key: QueueKey, gk: GroupKey) -> GroupIx {
        let gix = match self.by_key.get(&gk) {
            Some(&gix) => gix,
            None => self.new_group(gk),
        };
        // The slot itself: a new group has no member yet.
        let group = &mut self.groups[gix.0 as usize];
        let old_head = group.members.first().copied();
        let fresh = group.members.insert(key);
        assert!(fresh, "{} queued twice", key.id);
        self.len += 1;
        match old_head {
            None => {
                match self.groups_by_rank.binary_search_by_key(&key.rank, |&(rank, _)| rank) {
                    Ok(at) => self.groups_by_rank[at].1 += 1,
                    Err(at) => self.groups_by_rank.insert(at, (key.rank, 1)),
                }
                self.awake.insert((key, gix));
            }
            Some(old) if key < old => self.move_head(gix, old, key),
            Some(_) => {}
        }
        gix
    }

    /// A new group of `key`, in a vacant slot if there is one (its emptied member set keeps
    /// its allocation); its first member is inserted by the caller.
    fn new_group(&mut self, key: GroupKey) -> GroupIx {
        let gix = match self.vacant.pop() {
            Some(gix) => {
                let group = &mut self.groups[gix.0 as usize];
                debug_assert!(
                    group.members.is_empty() && !group.asleep && group.verdict.is_none() && group.indexed.is_none()
                );
                group.key = key;
                gix
            }
            None => {
                self.groups.push(Group {
                    key,
                    members: Members::default(),
                    verdict: None,
                    asleep: false,
                    indexed: None,
                });
                GroupIx(self.groups.len() as u32 - 1)
            }
        };
        self.by_key.insert(key, gix);
        gix
    }

    /// Is the group of `gk` no longer at `gix` (it emptied and its slot was freed)?
    pub fn is_gone(&self, gix: GroupIx, gk: &GroupKey) -> bool {
        self.live(gix).is_none_or(|g| g.key != *gk)
    }

    /// The group in slot `gix`, unless the slot is vacant.
    fn live(&self, gix: GroupIx) -> Option<&Group> {
        self.groups.get(gix.0 as usize).filter(|g| !g.members.is_empty())
    }

    /// The head of the group in slot `gix`, unless the slot is vacant.
    pub fn live_head(&self, gix: GroupIx) -> Option<QueueKey> {
        self.live(gix).map(Group::head)
    }

    pub fn group(&self, gix: GroupIx) -> &Group {
        self.live(gix).expect("a live group")
    }

    fn group_mut(&mut self, gix: GroupIx) -> &mut Group {
        let group = &mut self.groups[gix.0 as usize];
        assert!(!group.members.is_empty(), "a live group");
        group
    }

    /// Live groups with their slots (slot order: callers must not decide from it).
    pub fn groups(&self) -> impl Iterator<Item = (GroupIx, &Group)> {
        let live = self.groups.iter().enumerate().filter(|(_, g)| !g.members.is_empty());
        live.map(|(i, g)| (GroupIx(i as u32), g))
    }

    pub fn remove(&mut self, key: &QueueKey, gix: GroupIx) {
        self.len -= 1;
        let group = self.group_mut(gix);
        let old_head = group.head();
        // A start takes the head (the walk asks heads only): no search for it.
        let was = if old_head == *key { group.members.pop_first().is_some() } else { group.members.remove(key) };
        assert!(was, "{} was not queued", key.id);
        if group.members.is_empty() {
            if !group.asleep {
                self.awake.remove(&(old_head, gix));
            } else if group.blocks_strict_order() {
                self.asleep_blocking.remove(&(old_head, gix));
            }
            let at = self.groups_by_rank.binary_search_by_key(&key.rank, |&(rank, _)| rank);
            let at = at.expect("a live group's rank is counted");
            match &mut self.groups_by_rank[at].1 {
                1 => {
                    self.groups_by_rank.remove(at);
                }
                count => *count -= 1,
            }
            self.unindex(gix);
            // The slot becomes vacant (`live`), its group's state cleared for reuse.
            let group = &mut self.groups[gix.0 as usize];
            group.verdict = None;
            group.asleep = false;
            self.by_key.remove(&group.key);
            self.vacant.push(gix);
        } else if old_head == *key {
            let new_head = group.head();
            self.move_head(gix, old_head, new_head);
        }
    }

    /// Keep the head sets in step when a group's first member changes.
    fn move_head(&mut self, gix: GroupIx, old: QueueKey, new: QueueKey) {
        let group = self.group(gix);
        let set = if !group.asleep {
            &mut self.awake
        } else if group.blocks_strict_order() {
            &mut self.asleep_blocking
        } else {
            return;
        };
        let was = set.remove(&(old, gix));
        debug_assert!(was, "head of group {gix:?} not indexed");
        set.insert((new, gix));
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// The best rank of a job in a group (holding jobs aside), if any is queued.
    pub fn best_queued_rank(&self) -> Option<Reverse<Priority>> {
        self.groups_by_rank.first().map(|&(rank, _)| rank)
    }

    /// A queued job starts holding GPUs for its victims: out of its group, into `holding`.
    pub fn hold(&mut self, key: &QueueKey, gix: GroupIx) {
        self.remove(key, gix);
        self.holding.insert(*key);
        self.len += 1;
    }

    /// A holding job gives up its hold: back into its group (`gk`), at its place.
    pub fn unhold(&mut self, key: &QueueKey, gk: GroupKey) -> GroupIx {
        let was = self.holding.remove(key);
        assert!(was, "{} was not holding", key.id);
        self.len -= 1;
        self.insert(*key, gk)
    }

    /// A holding job leaves the queue to run on what it held.
    pub fn leave_hold(&mut self, key: &QueueKey) {
        let was = self.holding.remove(key);
        assert!(was, "{} was not holding", key.id);
        self.len -= 1;
    }

    /// Pending jobs in scheduling order: a merge of the groups' member lists, lazily, so
    /// that a caller who stops early pays for what it read.
    pub fn in_order(&self) -> impl Iterator<Item = JobId> + '_ {
        // The holding jobs are one more sorted list, under a slot no group has.
        const HOLDING: GroupIx = GroupIx(u32::MAX);
        let next_of = |gix: GroupIx, key: QueueKey| {
            if gix == HOLDING {
                self.holding.range((Excluded(key), Unbounded)).next()
            } else {
                self.group(gix).members.after(&key)
            }
        };
        let mut heads: BinaryHeap<Reverse<(QueueKey, GroupIx)>> =
            self.groups().map(|(gix, g)| Reverse((g.head(), gix))).collect();
        heads.extend(self.holding.first().map(|&k| Reverse((k, HOLDING))));
        std::iter::from_fn(move || {
            let Reverse((key, gix)) = heads.pop()?;
            if let Some(&next) = next_of(gix, key) {
                heads.push(Reverse((next, gix)));
            }
            Some(key.id)
        })
    }

    /// Record a group's failure: it sleeps unless told to try again next cycle.
    pub fn fail(&mut self, gix: GroupIx, verdict: Verdict) {
        let group = self.group_mut(gix);
        debug_assert!(!group.asleep, "only awake groups are considered");
        let sleeps = match verdict.wake {
            Wake::On(on) => Some(on),
            Wake::NextCycle => None,
        };
        group.verdict = Some(verdict);
        if let Some(on) = sleeps {
            let (head, blocks, indexed) = (group.head(), group.blocks_strict_order(), group.indexed);
            group.asleep = true;
            self.awake.remove(&(head, gix));
            if blocks {
                self.asleep_blocking.insert((head, gix));
            }
            // Woken by the walk and failing as before (the next member of a group whose head
            // just started, most often): its entries are still in place.
            if indexed != Some(on) {
                self.unindex(gix);
                self.index(gix, on);
            }
        }
    }

    /// A group's head started or is preempting: its old verdict no longer holds.
    pub fn clear_verdict(&mut self, gix: GroupIx) {
        if let Some(group) = self.groups.get_mut(gix.0 as usize).filter(|g| !g.members.is_empty()) {
            group.verdict = None;
        }
    }

    /// Enter the group in the wake indexes under `on` (its head's place in
    /// `asleep_blocking` is kept apart, by `fail` and the wakes).
    fn index(&mut self, gix: GroupIx, on: WakeOn) {
        let group = &mut self.groups[gix.0 as usize];
        debug_assert!(group.indexed.is_none(), "indexed twice");
        group.indexed = Some(on);
        let gk = group.key;
        for q in on.quota.iter().flatten() {
            self.by_quota.insert((q.account, q.level, q.base_gpus_max, gix));
        }
        match on.cohort_short {
            Some(c) if c.short => {
                self.by_cohort_short.insert((c.cohort, gix));
            }
            Some(_) => {
                self.by_nominal_wait.insert((gk.project, gix));
            }
            None => {}
        }
        if let Some(at) = on.at {
            self.by_time.insert((at, gix));
        }
        if on.plan {
            self.by_plan.insert(gix);
        }
        match on.room {
            RoomWake::Never => {}
            RoomWake::Fits => {
                self.by_room_fits.insert((gk.per_replica.gpus, gix));
            }
            RoomWake::Reclaim => {
                self.by_reclaim.insert((gk.priority, gk.per_replica.gpus, gix));
                *self.reclaim_levels.entry(gk.priority).or_default() += 1;
            }
            RoomWake::Nodes => {
                self.by_nodes.insert(gix);
            }
            RoomWake::Any => {
                self.by_room_any.insert(gix);
            }
            RoomWake::Borrowed { cohort } => {
                self.by_borrowed.insert((cohort, gk.priority, gk.per_replica.gpus, gix));
            }
            RoomWake::Total { level } => {
                self.by_total.insert((gk.model, level, gk.total_gpus(), gix));
            }
        }
    }

    /// Undo `index`, if the group is indexed.
    fn unindex(&mut self, gix: GroupIx) {
        // The slot itself: `remove` unindexes a group whose last member just left.
        let group = &mut self.groups[gix.0 as usize];
        let Some(on) = group.indexed.take() else { return };
        let gk = group.key;
        for q in on.quota.iter().flatten() {
            self.by_quota.remove(&(q.account, q.level, q.base_gpus_max, gix));
        }
        match on.cohort_short {
            Some(c) if c.short => {
                self.by_cohort_short.remove(&(c.cohort, gix));
            }
            Some(_) => {
                self.by_nominal_wait.remove(&(gk.project, gix));
            }
            None => {}
        }
        if let Some(at) = on.at {
            self.by_time.remove(&(at, gix));
        }
        if on.plan {
            self.by_plan.remove(&gix);
        }
        match on.room {
            RoomWake::Never => {}
            RoomWake::Fits => {
                self.by_room_fits.remove(&(gk.per_replica.gpus, gix));
            }
            RoomWake::Reclaim => {
                self.by_reclaim.remove(&(gk.priority, gk.per_replica.gpus, gix));
                match self.reclaim_levels.get_mut(&gk.priority) {
                    Some(1) => {
                        self.reclaim_levels.remove(&gk.priority);
                    }
                    Some(n) => *n -= 1,
                    None => unreachable!("an indexed level is counted"),
                }
            }
            RoomWake::Nodes => {
                self.by_nodes.remove(&gix);
            }
            RoomWake::Any => {
                self.by_room_any.remove(&gix);
            }
            RoomWake::Borrowed { cohort } => {
                self.by_borrowed.remove(&(cohort, gk.priority, gk.per_replica.gpus, gix));
            }
            RoomWake::Total { level } => {
                self.by_total.remove(&(gk.model, level, gk.total_gpus(), gix));
            }
        }
    }

    pub fn wake(&mut self, gix: GroupIx) {
        self.rouse(gix);
        self.unindex(gix);
    }

    /// Wake a group the walk asks at once, leaving its wake entries in place: if it fails
    /// again as before, they stand; `settle_lazy_wakes` drops those of the groups still
    /// awake when the walk ends. Nothing reads the wake indexes during the walk (but
    /// `asleep_blocking`, kept exact here).
    pub fn wake_lazily(&mut self, gix: GroupIx) {
        self.rouse(gix);
        self.lazily_woken.push(gix);
    }

    /// A sleeping group is awake again: out of `asleep_blocking`, its head into `awake`
    /// (its wake entries are the caller's to drop).
    fn rouse(&mut self, gix: GroupIx) {
        let group = self.group_mut(gix);
        debug_assert!(group.asleep, "only sleeping groups wake");
        let (head, blocks) = (group.head(), group.blocks_strict_order());
        group.asleep = false;
        if blocks {
            self.asleep_blocking.remove(&(head, gix));
        }
        self.awake.insert((head, gix));
    }

    /// The walk is over: the groups it woke that are still awake leave the wake indexes.
    pub fn settle_lazy_wakes(&mut self) {
        while let Some(gix) = self.lazily_woken.pop() {
            if self.live(gix).is_some_and(|g| !g.asleep) {
                self.unindex(gix);
            }
        }
    }

    /// Wake the sleeping groups that `changes` may concern: at once those woken by an
    /// account, a victim, a node added, any growth, or a time up to `now`; lazily (as `candidates`, in queue
    /// order) those that room on a grown node may concern. `changes` is emptied, keeping
    /// its allocations for the next cycle.
    pub fn wake_for(&mut self, now: Time, changes: &mut Changes, grown: &dyn GrownRoom, checks: &dyn WakeChecks) {
        let room_grew = !changes.grown.is_empty();
        changes.grown.clear();
        let woken = &mut changes.woken;
        woken.clear();
        self.nominal_woken(&mut changes.settled_fell, &changes.caps, checks, woken);
        self.quota_woken(&mut changes.caps, &mut changes.cohort_charged, &mut changes.uncharged, checks, woken);
        if room_grew {
            woken.extend(self.by_room_any.iter().copied());
            self.total_woken(checks, woken);
        }
        woken.extend(self.by_time.range(..=(now, GroupIx(u32::MAX))).map(|(_, gix)| *gix));
        if std::mem::take(&mut changes.nodes_changed) {
            woken.extend(self.by_nodes.iter().copied());
        }
        if std::mem::take(&mut changes.plan_changed) {
            woken.extend(self.by_plan.iter().copied());
        }
        self.borrowed_in_any(&mut changes.borrowing_began, woken);
        // A victim search is exact about room but takes victims in an order and within
        // bounds: with a node's victims gone, a search that failed may find another set.
        // Likewise when which jobs may reclaim, and from whom, changed (scenario 151).
        let nodes_lost = std::mem::take(&mut changes.nodes_lost);
        if nodes_lost || std::mem::take(&mut changes.nominal_changed) {
            woken.extend(self.by_reclaim.iter().map(|(.., gix)| *gix));
            woken.extend(self.by_room_any.iter().copied());
            woken.extend(self.by_borrowed.iter().map(|(.., gix)| *gix));
        }
        // A group indexed several ways may be named twice; sorting makes waking order-free.
        woken.sort_unstable();
        woken.dedup();
        for i in 0..changes.woken.len() {
            self.wake(changes.woken[i]);
        }
        self.candidates.clear();
        if room_grew {
            self.find_candidates(grown, checks);
        }
    }

    /// The groups over quota that `caps` (changed caps), `cohort_charged` (cohorts work was
    /// charged to) and `uncharged` (accounts something was uncharged from) let under their
    /// cap, and the groups whose cohort is no longer short, into `woken`; the lists are
    /// emptied.
    fn quota_woken(
        &self,
        caps: &mut Vec<AccountId>,
        cohort_charged: &mut Vec<AccountId>,
        uncharged: &mut Vec<AccountId>,
        checks: &dyn WakeChecks,
        woken: &mut Vec<GroupIx>,
    ) {
        for list in [&mut *caps, &mut *cohort_charged, &mut *uncharged] {
            list.sort_unstable();
            list.dedup();
        }
        let of_account = |a: AccountId| (Included((a, Priority::MIN, i64::MIN, GroupIx(0))), Unbounded);
        let all_of = |a: AccountId| {
            self.by_quota.range(of_account(a)).take_while(move |(account, ..)| *account == a).map(|(.., gix)| *gix)
        };
        let of_cohort = |c: AccountId| self.by_cohort_short.range((c, GroupIx(0))..=(c, GroupIx(u32::MAX)));
        for account in caps.drain(..) {
            woken.extend(all_of(account));
            woken.extend(of_cohort(account).map(|(_, gix)| *gix));
            // A member that joins a cohort, or whose nominal quota falls, may borrow at
            // once, with no charge noted (scenario 150).
            woken.extend(self.borrowed_in(account));
        }
        // A charge makes no cohort less short: those waiting for that alone sleep on.
        for account in cohort_charged.drain(..) {
            woken.extend(all_of(account));
        }
        for account in uncharged.drain(..) {
            woken.extend(of_cohort(account).map(|(_, gix)| *gix).filter(|gix| self.cohort_wait_over(*gix, checks)));
            // Per level of the account's sleeping groups: those whose threshold the usage
            // that counts at that level now meets.
            let mut from = of_account(account).0;
            while let Some(&(a, level, ..)) =
                self.by_quota.range((from, Unbounded)).next().filter(|(a, ..)| *a == account)
            {
                let base = checks.quota_base_gpus(a, level);
                let met = self.by_quota.range((a, level, base, GroupIx(0))..=(a, level, i64::MAX, GroupIx(u32::MAX)));
                woken.extend(met.map(|(.., gix)| *gix));
                match level.checked_add(1) {
                    Some(next) => from = Included((a, next, i64::MIN, GroupIx(0))),
                    None => break,
                }
            }
        }
    }

    /// The groups waiting for their project to get back within its nominal quota
    /// (`CohortWake::short` false) whose project's settled usage fell (`settled_fell`,
    /// emptied) and that now may reclaim, tested exactly; and those whose project's cap
    /// changed (`caps`), outright.
    fn nominal_woken(
        &self,
        settled_fell: &mut Vec<AccountId>,
        caps: &[AccountId],
        checks: &dyn WakeChecks,
        woken: &mut Vec<GroupIx>,
    ) {
        settled_fell.sort_unstable();
        settled_fell.dedup();
        let of_project = |p: AccountId| self.by_nominal_wait.range((p, GroupIx(0))..=(p, GroupIx(u32::MAX)));
        for &project in settled_fell.iter() {
            woken.extend(of_project(project).map(|(_, gix)| *gix).filter(|gix| self.cohort_wait_over(*gix, checks)));
        }
        settled_fell.clear();
        for &account in caps {
            woken.extend(of_project(account).map(|(_, gix)| *gix));
        }
    }

    /// The groups waiting on `RoomWake::Total` whose sum now covers them, into `woken`: one
    /// sum and one range per (model, priority) of the index.
    fn total_woken(&self, checks: &dyn WakeChecks, woken: &mut Vec<GroupIx>) {
        let mut next = self.by_total.first().map(|&(model, priority, ..)| (model, priority));
        while let Some((model, priority)) = next {
            let have = checks.gpus_at_or_below(model, priority);
            let covered =
                self.by_total.range((model, priority, 0, GroupIx(0))..=(model, priority, have, GroupIx(u32::MAX)));
            woken.extend(covered.map(|(.., gix)| *gix));
            let after = (Excluded((model, priority, u32::MAX, GroupIx(u32::MAX))), Unbounded);
            next = self.by_total.range(after).next().map(|&(model, priority, ..)| (model, priority));
        }
    }

    /// The sleeping groups that room on a grown node may let in, by head.
    fn find_candidates(&mut self, grown: &dyn GrownRoom, checks: &dyn WakeChecks) {
        let mut candidates = std::mem::take(&mut self.candidates);
        let head = |gix: GroupIx| (self.group(gix).head(), gix);
        let free_max = grown.free_gpus_max();
        for &(_, gix) in self.by_room_fits.range(..=(free_max, GroupIx(u32::MAX))) {
            if grown.admits(&self.group(gix).key, RoomWake::Fits) {
                candidates.push(head(gix));
            }
        }
        // One range per priority level of the index: groups at `p` needing at most what
        // some grown node could reclaim for `p`.
        for &p in self.reclaim_levels.keys() {
            let reclaimable = grown.reclaimable_gpus_max(p);
            for &(_, _, gix) in self.by_reclaim.range((p, 0, GroupIx(0))..=(p, reclaimable, GroupIx(u32::MAX))) {
                if grown.admits(&self.group(gix).key, RoomWake::Reclaim) {
                    candidates.push(head(gix));
                }
            }
        }
        // Per cohort and level `p`: a grown node holds a replica only with its free GPUs
        // and those of runs at or below `p` (`admits_reclaim` counts some of those), so the
        // groups needing more per replica than any grown node has so are passed over.
        let mut from = Unbounded;
        while let Some(&(cohort, p, ..)) = self.by_borrowed.range((from, Unbounded)).next() {
            let at_or_below_p = p.checked_add(1).map_or(u32::MAX, |above| grown.reclaimable_gpus_max(above));
            let level = (cohort, p, 0, GroupIx(0))..=(cohort, p, at_or_below_p, GroupIx(u32::MAX));
            for &(.., gix) in self.by_borrowed.range(level) {
                let gk = &self.group(gix).key;
                if grown.admits_reclaim(gk, &|owner| checks.may_reclaim_from(gk, cohort, owner)) {
                    candidates.push(head(gix));
                }
            }
            from = Excluded((cohort, p, u32::MAX, GroupIx(u32::MAX)));
        }
        candidates.sort_unstable();
        self.candidates = candidates;
    }

    /// How a sleeping group's room wake counts room (for the walk's second look).
    pub fn room_wake(&self, gix: GroupIx) -> RoomWake {
        match self.group(gix).verdict.as_ref().map(|v| v.wake) {
            Some(Wake::On(on)) => on.room,
            _ => RoomWake::Never,
        }
    }

    /// Is the cohort wait of the sleeping group at `gix` over (`WakeChecks::cohort_wait_over`)?
    fn cohort_wait_over(&self, gix: GroupIx, checks: &dyn WakeChecks) -> bool {
        let group = self.group(gix);
        group.indexed.and_then(|on| on.cohort_short).is_some_and(|c| checks.cohort_wait_over(&group.key, c))
    }

    /// The groups waiting for a member of one of `cohorts` (emptied) to begin to borrow,
    /// appended to `woken`.
    fn borrowed_in_any(&self, cohorts: &mut Vec<AccountId>, woken: &mut Vec<GroupIx>) {
        cohorts.sort_unstable();
        cohorts.dedup();
        for cohort in cohorts.drain(..) {
            woken.extend(self.borrowed_in(cohort));
        }
    }

    /// The groups waiting for a member of `cohort` to begin to borrow (`RoomWake::Borrowed`).
    fn borrowed_in(&self, cohort: AccountId) -> impl Iterator<Item = GroupIx> + '_ {
        let all = (cohort, Priority::MIN, 0, GroupIx(0))..=(cohort, Priority::MAX, u32::MAX, GroupIx(u32::MAX));
        self.by_borrowed.range(all).map(|(.., gix)| *gix)
    }

    /// Wake now the groups waiting for a member of one of `cohorts` to begin to borrow
    /// (`RoomWake::Borrowed`), during a walk: those it asked already this cycle and that
    /// sleep again are left, as are those it woke lazily (their turn comes, or came). The
    /// groups woken go into `woken`; `cohorts` is emptied.
    pub fn wake_borrowed(&mut self, cohorts: &mut Vec<AccountId>, woken: &mut Vec<GroupIx>) {
        woken.clear();
        self.borrowed_in_any(cohorts, woken);
        woken.retain(|gix| self.is_asleep(*gix));
        for &gix in woken.iter() {
            self.wake(gix);
        }
    }

    /// The first time a sleeping group wakes at (rule 1's preemption delay).
    pub fn first_timed_wake(&self) -> Option<Time> {
        self.by_time.first().map(|(t, _)| *t)
    }

    pub fn is_asleep(&self, gix: GroupIx) -> bool {
        self.live(gix).is_some_and(|g| g.asleep)
    }

    /// The sleeping groups held for a reservation (`WakeOn::plan`), each with its head and
    /// the job whose reservation it would delay.
    pub fn held_for_reservations(&self) -> impl Iterator<Item = (GroupIx, QueueKey, JobId)> + '_ {
        self.by_plan.iter().filter_map(|&gix| {
            let group = self.group(gix);
            match group.verdict.as_ref()?.reasons.first() {
                &PendingReason::HeldForReservation { job, .. } => Some((gix, group.head(), job)),
                _ => None,
            }
        })
    }
}

impl PendingQueue {
    /// The queue's indexes agree with its groups: every job in exactly one group, every
    /// awake group's head in `awake`, every sleeping group with a sleeping verdict and
    /// indexed under it, nothing indexed that is not a group.
    pub fn check(&self) -> Result<(), String> {
        let mut members = 0;
        let mut awake = 0;
        let mut asleep_blocking = 0;
        let vacant: BTreeSet<GroupIx> = self.vacant.iter().copied().collect();
        let empty = self.groups.iter().enumerate().filter(|(_, g)| g.members.is_empty());
        if vacant.len() != self.vacant.len() || !empty.map(|(i, _)| GroupIx(i as u32)).eq(vacant.iter().copied()) {
            return Err("the vacant slots are not exactly the empty ones".into());
        }
        if let Some(gix) = vacant.iter().find(|g| {
            let group = &self.groups[g.0 as usize];
            group.asleep || group.verdict.is_some() || group.indexed.is_some()
        }) {
            return Err(format!("vacant slot {gix:?} kept its group's state"));
        }
        for (gix, group) in self.groups() {
            if self.by_key.get(&group.key) != Some(&gix) {
                return Err(format!("group {gix:?} is not found by its key"));
            }
            members += group.members.len();
            if !group.members.iter().zip(group.members.iter().skip(1)).all(|(a, b)| a < b) {
                return Err(format!("group {gix:?}'s members are not in strictly ascending order"));
            }
            let head = group.head();
            if !group.asleep {
                awake += 1;
                if !self.awake.contains(&(head, gix)) {
                    return Err(format!("awake group of {} not in the awake set", head.id));
                }
                if group.indexed.is_some() {
                    return Err(format!("awake group of {} still indexed under its old wake conditions", head.id));
                }
                continue;
            }
            let Some(Verdict { wake: Wake::On(on), .. }) = &group.verdict else {
                return Err(format!("group of {} asleep without a wake condition", head.id));
            };
            if group.indexed != Some(*on) {
                return Err(format!("group of {} asleep, indexed under other conditions than its verdict's", head.id));
            }
            let gk = &group.key;
            let quota_indexed =
                on.quota.iter().flatten().all(|q| self.by_quota.contains(&(q.account, q.level, q.base_gpus_max, gix)));
            if !quota_indexed {
                return Err(format!("group of {} is not indexed under its accounts", head.id));
            }
            let cohort_indexed = |c: CohortWake| match c.short {
                true => self.by_cohort_short.contains(&(c.cohort, gix)),
                false => self.by_nominal_wait.contains(&(gk.project, gix)),
            };
            if on.cohort_short.is_some_and(|c| !cohort_indexed(c)) {
                return Err(format!("group of {} is not indexed under its cohort", head.id));
            }
            let indexed = on.quota.iter().any(Option::is_some)
                || on.cohort_short.is_some()
                || matches!(on.room, RoomWake::Total { level }
                    if self.by_total.contains(&(gk.model, level, gk.total_gpus(), gix)))
                || (on.room == RoomWake::Fits && self.by_room_fits.contains(&(gk.per_replica.gpus, gix)))
                || (on.room == RoomWake::Reclaim && self.by_reclaim.contains(&(gk.priority, gk.per_replica.gpus, gix)))
                || (on.room == RoomWake::Nodes && self.by_nodes.contains(&gix))
                || (on.room == RoomWake::Any && self.by_room_any.contains(&gix))
                || matches!(on.room, RoomWake::Borrowed { cohort }
                    if self.by_borrowed.contains(&(cohort, gk.priority, gk.per_replica.gpus, gix)))
                || (on.plan && self.by_plan.contains(&gix));
            if !indexed {
                return Err(format!("group of {} asleep but nothing wakes it", head.id));
            }
            if group.blocks_strict_order() {
                asleep_blocking += 1;
                if !self.asleep_blocking.contains(&(head, gix)) {
                    return Err(format!("blocking group of {} not in the blocking set", head.id));
                }
            }
        }
        if members + self.holding.len() != self.len {
            return Err(format!(
                "{} jobs counted as queued, {members} in groups, {} holding",
                self.len,
                self.holding.len()
            ));
        }
        let mut by_rank: BTreeMap<Reverse<Priority>, u32> = BTreeMap::new();
        for (_, group) in self.groups() {
            if group.members.iter().any(|m| m.rank != group.head().rank) {
                return Err(format!("the group of {} mixes ranks", group.head().id));
            }
            *by_rank.entry(group.head().rank).or_default() += 1;
        }
        if !by_rank.iter().map(|(&rank, &count)| (rank, count)).eq(self.groups_by_rank.iter().copied()) {
            return Err(format!("groups by rank counted {:?}, the queue holds {by_rank:?}", self.groups_by_rank));
        }
        if self.by_key.len() != self.groups().count() {
            return Err("the group map names groups that are gone".into());
        }
        if awake != self.awake.len() || asleep_blocking != self.asleep_blocking.len() {
            return Err("head sets name groups that are gone".into());
        }
        let asleep = |gix: &GroupIx| self.is_asleep(*gix);
        let stale = self.by_quota.iter().any(|(.., g)| !asleep(g))
            || self.by_cohort_short.iter().any(|(_, g)| !asleep(g))
            || self.by_nominal_wait.iter().any(|(_, g)| !asleep(g))
            || self.by_total.iter().any(|(.., g)| !asleep(g))
            || self.by_room_fits.iter().any(|(_, g)| !asleep(g))
            || self.by_reclaim.iter().any(|(_, _, g)| !asleep(g))
            || self.by_nodes.iter().any(|g| !asleep(g))
            || self.by_room_any.iter().any(|g| !asleep(g))
            || self.by_borrowed.iter().any(|(.., g)| !asleep(g))
            || self.by_plan.iter().any(|g| !asleep(g));
        if stale {
            return Err("a wake index names a group that is not asleep".into());
        }
        let mut levels: BTreeMap<Priority, u32> = BTreeMap::new();
        for (p, ..) in &self.by_reclaim {
            *levels.entry(*p).or_default() += 1;
        }
        if levels != self.reclaim_levels {
            return Err(format!("reclaim levels counted {:?}, indexed {levels:?}", self.reclaim_levels));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::JobIx;
    use proptest::prelude::*;

    fn key(n: u64) -> QueueKey {
        QueueKey { rank: Reverse(0), expected_ms: n / 7, submitted_at: Time(n / 3), id: JobId(n), ix: JobIx(n as u32) }
    }

    proptest! {
        /// A member list answers as an ordered set does, whatever the order of insertions
        /// and removals (appends, keys near either end, keys deep inside that turn it into
        /// a tree, and lists emptied and filled again).
        #[test]
        fn members_are_an_ordered_set(ops in prop::collection::vec((0u8..5, 0u64..400), 1..600)) {
            let mut members = Members::default();
            let mut reference = BTreeSet::new();
            let mut next = 400;
            for (op, n) in ops {
                match op {
                    0 | 1 => {
                        next += 1;
                        prop_assert_eq!(members.insert(key(next)), reference.insert(key(next)));
                    }
                    2 => prop_assert_eq!(members.insert(key(n)), reference.insert(key(n))),
                    3 => prop_assert_eq!(members.remove(&key(n)), reference.remove(&key(n))),
                    _ => prop_assert_eq!(members.pop_first(), reference.pop_first()),
                }
                prop_assert_eq!(members.len(), reference.len());
                prop_assert_eq!(members.first(), reference.first());
                prop_assert!(members.iter().eq(reference.iter()));
                let probe = key(n);
                prop_assert_eq!(members.after(&probe), reference.range((Excluded(probe), Unbounded)).next());
                if members.is_empty() {
                    prop_assert!(matches!(members, Members::Ring(_)), "an emptied list is a ring again");
                }
            }
        }
    }

    /// Keys inserted far from both ends turn a ring into a tree; keys near the ends do not.
    #[test]
    fn a_ring_becomes_a_tree_only_past_the_shift_bound() {
        let mut members = Members::default();
        for n in (0..1_000).map(|n| n * 2) {
            assert!(members.insert(key(n)));
        }
        assert!(members.insert(key(2 * (MEMBERS_SHIFT_MAX as u64) - 1)), "near the front");
        assert!(members.insert(key(2_000 - 2 * MEMBERS_SHIFT_MAX as u64 + 1)), "near the back");
        assert!(matches!(members, Members::Ring(_)));
        assert!(members.insert(key(1_001)), "in the middle");
        assert!(matches!(members, Members::Tree(_)));
        assert_eq!(members.len(), 1_003);
    }
}
