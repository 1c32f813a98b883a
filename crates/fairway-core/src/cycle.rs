//! The scheduling cycle: one numbered recipe, run by every driver the same way.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::ops::Bound::{Excluded, Included, Unbounded};

use crate::cluster::{Node, Nodes};
use crate::decision::{Decision, PendingReason, PreemptCause, StopCause};
use crate::fairshare::FairKey;
use crate::free_room::FreeRoom;
use crate::ids::{GroupIx, GroupKey, JobIx, NodeIx, QueueKey};
use crate::ledger::Ledger;
use crate::model::{JobState, Reservation, Termination};
use crate::preemption::{PreemptionScope, VictimPlan};
use crate::queue::{CohortWake, GrownRoom, QuotaWake, Reasons, RoomWake, Verdict, Wake, WakeChecks, WakeOn};
use crate::scheduler::Scheduler;
use crate::types::{
    AccountId, GpuModel, GpuSet, JobId, Placement, Priority, ReplicaPlacement, ResourceKind, Resources, Time,
};
use crate::victims::VictimTallies;

/// What one cycle did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CycleOutcome {
    /// To carry out in order. Already applied to the core's state.
    pub decisions: Vec<Decision>,
    /// Jobs whose start this cycle made and took back, as a victim set of them alone was
    /// chosen later in the cycle (step 4f): their starts are not among the decisions, and
    /// they are pending, unless a later walk of the cycle started them again. Nothing for a
    /// driver to do; for metrics and checks.
    pub taken_back: Vec<JobId>,
    pub stats: CycleStats,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CycleStats {
    /// Pending jobs looked at.
    pub jobs_considered: u32,
    pub started: u32,
    pub victims_preempted: u32,
    pub preemption_searches: u32,
    /// Pending jobs left at the end of the cycle.
    pub pending: u32,
}

/// Jobs with the same shape get the same answer from placement within one cycle, because
/// free room only shrinks during a cycle. Kueue calls this equivalence hashing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Shape {
    model: Option<GpuModel>,
    per_replica: Resources,
    replicas: u32,
}

/// Per-cycle memory of answers already computed. A cycle meets few distinct shapes, so small
/// vectors searched linearly beat hashing; they are only looked up, never iterated. Kept by
/// the scheduler and emptied at the start of each cycle, so that it allocates once.
#[derive(Clone, Debug, Default)]
pub(crate) struct CycleMemo {
    no_fit: Memo<Shape, ()>,
    /// Highest priority at which an unrestricted victim search for the shape failed, by
    /// whether the searching job overrides protection (rule 1: it may take protected runs,
    /// so another's failure says nothing of its search).
    no_victims: Memo<(Shape, bool), Priority>,
    never_fits: Memo<Shape, bool>,
    /// Second looks that found no room, as (model, room, priority, GPUs per replica): room
    /// only shrinks during a walk, so a candidate of the same model and room wanting as
    /// many GPUs or more at the same priority or lower finds none either.
    no_room: Vec<(Option<GpuModel>, RoomWake, Priority, u32)>,
}

#[derive(Clone, Debug)]
struct Memo<K, V>(Vec<(K, V)>);

impl<K, V> Default for Memo<K, V> {
    fn default() -> Self {
        Memo(Vec::new())
    }
}

impl CycleMemo {
    fn clear(&mut self) {
        self.no_fit.0.clear();
        self.no_victims.0.clear();
        self.never_fits.0.clear();
        self.no_room.clear();
    }
}

impl<K: PartialEq + Copy, V: Copy> Memo<K, V> {
    fn get(&self, key: &K) -> Option<V> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| *v)
    }
    fn insert(&mut self, key: K, value: V) {
        match self.0.iter_mut().find(|(k, _)| *k == key) {
            Some((_, v)) => *v = value,
            None => self.0.push((key, value)),
        }
    }
    fn get_or_insert_with(&mut self, key: K, make: impl FnOnce() -> V) -> V {
        if let Some(v) = self.get(&key) {
            return v;
        }
        let v = make();
        self.0.push((key, v));
        v
    }
}

/// What one cycle may still spend on preemption: searches (`preemption_attempts_per_cycle_max`)
/// and victims (`victims_per_cycle_max`, rule 7).
struct PreemptionBudget {
    searches_left: u32,
    victims_left: u32,
}

impl PreemptionBudget {
    /// One search, if both budgets allow one (a search is useless without a victim left).
    fn take_search(&mut self) -> bool {
        let ok = self.searches_left > 0 && self.victims_left > 0;
        self.searches_left = self.searches_left.saturating_sub(1);
        ok
    }

    /// The plan's victims, if the cycle's victim budget still covers them all.
    fn take_victims(&mut self, plan: &VictimPlan) -> bool {
        let n = plan.victims.len() as u32;
        let ok = n <= self.victims_left;
        if ok {
            self.victims_left -= n;
        }
        ok
    }
}

/// Where the walk's next job comes from.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum From {
    Awake,
    Candidate,
}

/// Fair sharing's order inside one priority (see `fairshare.rs`): the level's awake heads
/// and lazy candidates, least share first, then queue order. A start only raises shares
/// within a cycle, so an entry whose share has changed since it was pushed is pushed again
/// with its new share when it comes up (it can only move back).
#[derive(Default)]
pub(crate) struct FairLevel {
    /// The level being walked.
    rank: Option<Reverse<Priority>>,
    heap: BinaryHeap<Reverse<(FairKey, QueueKey, GroupIx, From)>>,
    /// Accounts' shares as of this cycle, until one of their jobs starts.
    shares: Vec<(AccountId, u64)>,
}

impl FairLevel {
    /// Empty for a new walk (the buffers are kept: a walk with fair sharing on runs at
    /// every cycle).
    fn clear(&mut self) {
        self.rank = None;
        self.heap.clear();
        self.shares.clear();
    }

    /// A start changed these accounts' shares.
    fn forget(&mut self, accounts: [AccountId; 2]) {
        self.shares.retain(|(a, _)| !accounts.contains(a));
    }
}

/// The nodes that grew since the last cycle (schedulable ones, by position), for the lazy
/// room wakes of `queue.rs`.
struct GrownNodes<'a> {
    nodes: &'a Nodes,
    grown: &'a [NodeIx],
}

impl GrownNodes<'_> {
    fn iter(&self) -> impl Iterator<Item = &Node> {
        self.grown.iter().map(|&ix| self.nodes.at(ix))
    }
}

/// GPUs on `node` free or held by preemptible work below `priority`, or of `priority` where
/// `may_take` its project (`RoomWake::Borrowed`).
fn reclaimable_by(node: &Node, priority: Priority, may_take: &dyn Fn(AccountId) -> bool) -> u32 {
    node.available_gpus()
        + node
            .victims
            .iter()
            .take_while(|e| e.priority <= priority)
            .filter(|e| e.priority < priority || may_take(e.project))
            .map(crate::victims::VictimEntry::gpus_freed_at_most)
            .sum::<u32>()
}

impl GrownRoom for GrownNodes<'_> {
    fn free_gpus_max(&self) -> u32 {
        self.iter().map(Node::available_gpus).max().unwrap_or(0)
    }

    fn reclaimable_gpus_max(&self, priority: Priority) -> u32 {
        self.iter().map(|n| reclaimable_by(n, priority, &|_| false)).max().unwrap_or(0)
    }

    fn admits(&self, gk: &GroupKey, room: RoomWake) -> bool {
        let need = gk.per_replica.gpus;
        self.iter().filter(|n| gk.model.is_none_or(|m| m == n.spec.gpu_model)).any(|n| match room {
            RoomWake::Fits => n.available_gpus() >= need,
            RoomWake::Reclaim => reclaimable_by(n, gk.priority, &|_| false) >= need,
            RoomWake::Never | RoomWake::Nodes | RoomWake::Any | RoomWake::Total { .. } | RoomWake::Borrowed { .. } => {
                true
            }
        })
    }

    fn admits_reclaim(&self, gk: &GroupKey, may_take: &dyn Fn(AccountId) -> bool) -> bool {
        let need = gk.per_replica.gpus;
        self.iter()
            .filter(|n| gk.model.is_none_or(|m| m == n.spec.gpu_model))
            .any(|n| reclaimable_by(n, gk.priority, may_take) >= need)
    }
}

/// The grown nodes as they stand when the cycle starts, summed up once for the wake-up
/// pass (which asks about many groups): per node its model, free GPUs, and the GPUs its
/// preemptible work frees at or below each priority level. Kept by the scheduler so that
/// its buffers are reused.
#[derive(Clone, Debug, Default)]
pub(crate) struct GrownSnapshot {
    /// (model, free GPUs, range of `levels`, range of `entries`)
    nodes: Vec<(GpuModel, u32, std::ops::Range<usize>, std::ops::Range<usize>)>,
    /// (priority, GPUs freed by preemptible work at or below it), ascending, per node.
    levels: Vec<(Priority, u32)>,
    /// (priority, project, GPUs freed) of each preemptible run, ascending, per node: what
    /// `RoomWake::Borrowed` asks, whose answer depends on the run's project.
    entries: Vec<(Priority, AccountId, u32)>,
}

impl GrownSnapshot {
    fn take(&mut self, grown: &GrownNodes<'_>) {
        self.nodes.clear();
        self.levels.clear();
        self.entries.clear();
        for node in grown.iter() {
            let start = self.levels.len();
            let entries_start = self.entries.len();
            let mut sum = 0;
            for e in &node.victims {
                sum += e.gpus_freed_at_most();
                self.entries.push((e.priority, e.project, e.gpus_freed_at_most()));
                let same_level = self.levels.len() > start && self.levels.last().is_some_and(|(p, _)| *p == e.priority);
                match self.levels.last_mut() {
                    Some((_, s)) if same_level => *s = sum,
                    _ => self.levels.push((e.priority, sum)),
                }
            }
            let entries = entries_start..self.entries.len();
            self.nodes.push((node.spec.gpu_model, node.available_gpus(), start..self.levels.len(), entries));
        }
    }

    fn reclaimable(&self, free: u32, levels: &std::ops::Range<usize>, priority: Priority) -> u32 {
        let levels = &self.levels[levels.clone()];
        let below = levels.partition_point(|(p, _)| *p < priority);
        free + below.checked_sub(1).map_or(0, |i| levels[i].1)
    }
}

impl GrownRoom for GrownSnapshot {
    fn free_gpus_max(&self) -> u32 {
        self.nodes.iter().map(|(_, free, ..)| *free).max().unwrap_or(0)
    }

    fn reclaimable_gpus_max(&self, priority: Priority) -> u32 {
        self.nodes.iter().map(|(_, free, levels, _)| self.reclaimable(*free, levels, priority)).max().unwrap_or(0)
    }

    fn admits(&self, gk: &GroupKey, room: RoomWake) -> bool {
        let need = gk.per_replica.gpus;
        self.nodes.iter().filter(|(model, ..)| gk.model.is_none_or(|m| m == *model)).any(|(_, free, levels, _)| {
            match room {
                RoomWake::Fits => *free >= need,
                RoomWake::Reclaim => self.reclaimable(*free, levels, gk.priority) >= need,
                RoomWake::Never
                | RoomWake::Nodes
                | RoomWake::Any
                | RoomWake::Total { .. }
                | RoomWake::Borrowed { .. } => true,
            }
        })
    }

    fn admits_reclaim(&self, gk: &GroupKey, may_take: &dyn Fn(AccountId) -> bool) -> bool {
        let need = gk.per_replica.gpus;
        let p = gk.priority;
        self.nodes.iter().filter(|(model, ..)| gk.model.is_none_or(|m| m == *model)).any(|(_, free, _, entries)| {
            let runs = self.entries[entries.clone()].iter().take_while(|(priority, ..)| *priority <= p);
            let taken: u32 =
                runs.filter(|(priority, project, _)| *priority < p || may_take(*project)).map(|e| e.2).sum();
            free + taken >= need
        })
    }
}

/// The wake-up pass's questions, answered from the scheduler's state.
struct SchedulerChecks<'a> {
    ledger: &'a Ledger,
    nodes: &'a Nodes,
    tallies: &'a VictimTallies,
}

impl WakeChecks for SchedulerChecks<'_> {
    fn quota_base_gpus(&self, account: AccountId, level: Priority) -> i64 {
        self.ledger.base_gpus(account, level)
    }

    fn cohort_wait_over(&self, gk: &GroupKey, wait: CohortWake) -> bool {
        self.ledger.cohort_wait_over(gk.project, wait.cohort, gk.total(), wait.short, wait.reclaims)
    }

    fn gpus_at_or_below(&self, model: Option<GpuModel>, priority: Priority) -> u32 {
        gpus_at_or_below(self.nodes, self.tallies, model, priority)
    }

    fn may_reclaim_from(&self, gk: &GroupKey, cohort: AccountId, owner: AccountId) -> bool {
        may_reclaim_from(self.ledger, gk.project, cohort, owner)
    }
}

/// May a job of `project`, a member of `cohort`, reclaim a run of its own priority from
/// `owner`: is `owner` another member of `cohort` that borrows now (rule 1)?
fn may_reclaim_from(ledger: &Ledger, project: AccountId, cohort: AccountId, owner: AccountId) -> bool {
    owner != project && ledger.cohort(cohort).is_some_and(|c| ledger.borrows_in(owner, cohort, c))
}

/// Would `project`, a member of `cohort`, stay within its nominal quota with `total` more
/// (a reclaim's first condition, rule 1)?
fn may_reclaim_with(ledger: &Ledger, project: AccountId, cohort: AccountId, total: Resources) -> bool {
    let c = ledger.cohort(cohort).expect("a member's cohort");
    ledger.get(project).expect("a member is known").within_nominal_with(c, total)
}

/// GPUs free on the nodes of `model` plus those held by preemptible work at or below
/// `priority` (see `WakeChecks::gpus_at_or_below`).
fn gpus_at_or_below(nodes: &Nodes, tallies: &VictimTallies, model: Option<GpuModel>, priority: Priority) -> u32 {
    nodes.index.total_free(model) + tallies.preemptible_gpus_at_or_below(priority)
}

/// What a victim search within the cycle's budget came to.
enum Searched {
    /// A set was found and carried out: the job preempts, or started at once.
    Done(Considered),
    /// The budget (rule 7) could not serve it.
    OverBudget,
    NoSet,
}

/// A wake on anything uncharged from `account`, or its cap changing.
fn any_uncharge(account: AccountId) -> QuotaWake {
    QuotaWake { account, level: Priority::MIN, base_gpus_max: i64::MAX }
}

/// What considering one job came to.
enum Considered {
    Started,
    /// Victims were asked to stop; the job holds their GPUs.
    Preempting,
    /// Cannot start: the group's verdict.
    Failed(Verdict),
}

impl Scheduler {
    /// Run one scheduling cycle at `now`.
    ///
    /// 1. Hand out decisions that events produced since the last cycle (stops, requeues).
    /// 2. Stop running jobs whose run-time limit has passed.
    /// 3. Start preemptors whose victims have all exited, on the GPUs held for them.
    ///    b. A preemptor still waiting for its victims that ranks above every queued job
    ///    starts at once on room that freed elsewhere, if that crosses no quota and moves no
    ///    cohort's level; its victims go on terminating (`move_waiting_preemptors`).
    /// 4. With reservations, bring them up to date (see `plan.rs`). Walk the pending queue in
    ///    order (priority, then submit time, then id), asking each equivalence group once per
    ///    failure (see `queue.rs`); nothing to walk when no group is awake and nothing that
    ///    wakes one happened (scenario 136); for each job:
    ///    a. groups that failed before and whose wait cannot be over stay dormant (those
    ///    that room on a grown node may concern get a second look when reached; with fair
    ///    sharing, one held for a reservation wakes when shares now rank it above the
    ///    holder: `wake_outranking_held`); with
    ///    backfill off, the first job that cannot start blocks every job behind it;
    ///    b. a job holding GPUs while its victims terminate is not asked again (step 3
    ///    starts it), but with backfill off it blocks every job behind it;
    ///    c. a job that could never fit on any node says so;
    ///    d. a job over its account's quota waits, unless it can preempt its own
    ///    account's lower-priority work (step f, restricted to that account); a job whose
    ///    project would borrow more than its cohort lends waits, unless it can preempt
    ///    lower-priority work (and, within its nominal quota, borrowers of its own
    ///    priority) that gives back enough to the cohort (see `ledger.rs`);
    ///    e. place on free GPUs if possible and start, unless it would delay a reservation
    ///    ranked above it (`plan.rs`: with fair sharing, by share inside a priority; then
    ///    elsewhere, or it is held back);
    ///    f. otherwise, if the policy and the job allow, preempt lower-priority work
    ///    (see `preemption.rs` for the order) and hold the freed GPUs for the job; failing
    ///    that, a job within its project's nominal quota reclaims from the members of its
    ///    cohort that borrow, its own priority included; victims that started in this cycle
    ///    have their starts taken back instead, unless the set reclaims an older run of a
    ///    project that borrows only with them or the cycle reclaimed from their project
    ///    before, and where no other victim is left the job starts at once (rule 8);
    ///    g. otherwise record why it is pending, and with reservations let it reserve if it
    ///    ranks among the first that cannot start;
    ///    h. after a walk that took a start back, ask the ready preemptors again (step 3)
    ///    and walk again (the job back in the queue, and room it leaves, were passed), on
    ///    what is left of the cycle's preemption budget (rule 7), which each start taken
    ///    back spends, so the walks end.
    /// 5. Check the invariants (debug builds; the simulator checks them in every build).
    pub fn cycle(&mut self, now: Time) -> CycleOutcome {
        let mut out = CycleOutcome::default();
        self.cycle_into(now, &mut out);
        out
    }

    /// `cycle`, writing into `out` (emptied first) so that a driver running many cycles
    /// reuses one buffer of decisions.
    pub fn cycle_into(&mut self, now: Time, out: &mut CycleOutcome) {
        self.counters.cycles += 1;
        out.decisions.clear();
        out.decisions.append(&mut self.outbox);
        out.taken_back.clear();
        out.stats = CycleStats::default();
        self.budget_spent_at = None;
        self.reclaimed_in_cycle.clear();
        if self.config.policy.packing.is_some() {
            self.arrivals.refresh();
        }
        self.enforce_runtime_limits(now, out);
        self.end_protections(now);
        self.start_ready_preemptors(now, out);
        self.move_waiting_preemptors(now, out);
        let limits = &self.config.limits;
        let mut budget = PreemptionBudget {
            searches_left: limits.preemption_attempts_per_cycle_max,
            victims_left: limits.victims_per_cycle_max,
        };
        // 4h. A start taken back (preemption rule 8) left a job back in the queue, and maybe
        // room, that the walk had passed: walk again, on what is left of the cycle's
        // preemption budget. Each start taken back spends that budget (its victim set was
        // charged to it), so the walks end: at most `victims_per_cycle_max` more. Ready
        // preemptors that step 3 left waiting on their cohort are asked first, as at step
        // 3: the start taken back may have been what held them (scenario 184).
        loop {
            let taken_back = self.counters.starts_taken_back;
            self.walk_queue(now, &mut budget, out);
            if self.counters.starts_taken_back == taken_back {
                break;
            }
            self.start_ready_preemptors(now, out);
        }
        // The walk's starts may have left a reservation's job short of its quota.
        if out.stats.started > 0 {
            self.drop_reservations_held_by_caps();
        }
        out.stats.pending = self.queue.len() as u32;
        self.counters.preemption_searches += u64::from(out.stats.preemption_searches);
        self.counters.jobs_considered += u64::from(out.stats.jobs_considered);
        debug_assert_eq!(self.check_invariants(), Ok(()));
    }

    /// Step 2.
    fn enforce_runtime_limits(&mut self, now: Time, out: &mut CycleOutcome) {
        while let Some(&(deadline, job, ix)) = self.runtime_deadlines.first() {
            if deadline > now {
                break;
            }
            self.begin_termination(ix, Termination::Stopped(StopCause::RuntimeLimit));
            out.decisions.push(Decision::Stop { job, cause: StopCause::RuntimeLimit });
        }
    }

    /// Step 3.
    fn start_ready_preemptors(&mut self, now: Time, out: &mut CycleOutcome) {
        // In id order, as every cycle before saw them (`reserving` is by id).
        let mut waiting = Vec::new();
        while let Some(id) = self.ready_preemptors.pop_first() {
            let ix = self.reserving[&id];
            if !self.start_ready_preemptor(ix, now, out) {
                waiting.push(id);
            }
        }
        self.ready_preemptors.extend(waiting);
    }

    /// The ready preemptor at `ix` (its victims all gone) starts on what it holds, unless
    /// victims moved to holds of its cohort are on their way out where the cohort is beyond
    /// what it lends with them (`Ledger::over_cohort_now`): they leave within their grace
    /// period, and it stays ready. Whether it started.
    fn start_ready_preemptor(&mut self, ix: JobIx, now: Time, out: &mut CycleOutcome) -> bool {
        let spec = &self.jobs[ix].spec;
        if self.ledger.over_cohort_now(spec.project, spec.total()).is_some() {
            return false;
        }
        // Turning the hold into the running job moves a charge, it adds nothing: what a
        // quota lowered meanwhile grandfathered must survive the uncharge of the hold and
        // the charge of the start.
        let id = spec.id;
        let grandfathered = self.grandfathered_of_job(ix);
        let placement = self.start_on_hold(ix, now);
        self.ledger.keep_grandfathered(grandfathered);
        out.decisions.push(Decision::Start { job: id, placement });
        out.stats.started += 1;
        true
    }

    /// Step 3b: a preemptor still waiting for its victims starts at once where room freed
    /// meanwhile (a job ended elsewhere), instead of waiting out their grace period; its
    /// victims go on terminating and are requeued as before (they were told to stop, and
    /// cannot be told otherwise). Only a preemptor that ranks above every queued job may
    /// move (the room is the walk's to give in rank order otherwise), and only where the
    /// move crosses no quota, borrowing limit or cohort (`may_move_off_hold`).
    /// kube-scheduler does the same: a preemptor's nominated node is a hint, and it goes
    /// wherever it fits first.
    fn move_waiting_preemptors(&mut self, now: Time, out: &mut CycleOutcome) {
        // Only nodes that grew since the last cycle are looked at: room that stayed free did
        // not hold the job when it preempted. (A holder skipped then for its rank waits for
        // the next growth or for its victims, at most their grace period.)
        if self.queue.holding.is_empty() || self.changes.grown.is_empty() {
            return;
        }
        let best_queued = self.queue.best_queued_rank();
        // Holders in queue order, without a list: a start changes the holding set.
        let mut after: Option<QueueKey> = None;
        loop {
            let from = after.as_ref().map_or(Unbounded, Excluded);
            let Some(&key) = self.queue.holding.range((from, Unbounded)).next() else { break };
            if best_queued.is_some_and(|rank| key.rank >= rank) {
                break;
            }
            after = Some(key);
            let spec = &self.jobs[key.ix].spec;
            let shape = Shape { model: spec.gpu_model, per_replica: spec.per_replica, replicas: spec.replicas };
            // Any new placement puts a replica on a grown node: otherwise it fitted before.
            if !self.grown_node_holds_one(shape) || !self.may_move_off_hold(key.ix) {
                continue;
            }
            let Some(placement) = self.place_on_free_room(key.ix, shape) else { continue };
            let grandfathered = self.grandfathered_of_job(key.ix);
            self.start_off_hold(key.ix, placement.clone(), now);
            self.ledger.keep_grandfathered(grandfathered);
            out.decisions.push(Decision::Start { job: key.id, placement });
            out.stats.started += 1;
        }
    }

    /// Has a node that grew since the last cycle room for one replica of `shape` now?
    fn grown_node_holds_one(&self, shape: Shape) -> bool {
        let grown = self.changes.grown.iter().filter_map(|&id| self.nodes.ix_of(id)).map(|ix| self.nodes.at(ix));
        grown
            .filter(|n| n.schedulable && shape.model.is_none_or(|m| m == n.spec.gpu_model))
            .any(|n| n.available_gpus() >= shape.per_replica.gpus)
    }

    /// May the holder at `ix` leave its hold for room elsewhere (step 3b)? Its victims keep
    /// their GPUs until they exit and it runs on others, so the move charges each account
    /// what its victims of that account still hold (the hold was charged less by that): an
    /// account with a cap must have that room, and a member of a cohort must have nothing to
    /// add (its cohort's level would move). A victim of its cohort has moved its cohort
    /// charge to the hold: after a move the cohort would count that victim nowhere.
    fn may_move_off_hold(&self, ix: JobIx) -> bool {
        let job = &self.jobs[ix];
        let JobState::Pending { reservation: Some(hold) } = &job.state else { return false };
        // Step 3 started the holders whose victims are gone, but those its cohort holds back
        // while victims moved to holds leave (`Ledger::over_cohort_now`): a move would add
        // as much.
        if hold.waiting == 0 {
            return false;
        }
        let (id, total, project) = (job.spec.id, job.spec.total(), job.spec.project);
        let member = self.ledger.cohort_of(project).is_some();
        // Only a member's victims move their cohort charge to its hold.
        let moved_to_hold = |v: &JobId| {
            self.jobs.get(*v).is_some_and(|victim| {
                victim.moved_to_hold.is_some()
                    && matches!(victim.state, JobState::Terminating { why: Termination::Preempted { preemptor, .. }, .. } if preemptor == id)
            })
        };
        if member && (hold.victims.iter().any(moved_to_hold) || self.ledger.over_cohort_now(project, total).is_some()) {
            return false;
        }
        self.charged_accounts(ix).zip(hold.charged).all(|(account, charged)| {
            let more = total.minus(charged);
            more == Resources::ZERO
                || (!(member && account == project) && self.ledger.over_quota(account, more).is_none())
        })
    }

    /// Step 2b: running jobs whose protection from preemption (rule 1) has ended are victims
    /// again: their nodes count as grown, so that preemptors asleep on room look again.
    fn end_protections(&mut self, now: Time) {
        while let Some(&(until, _, ix)) = self.protection_ends.first() {
            if until > now {
                break;
            }
            self.protection_ends.pop_first();
            if let JobState::Running { placement, .. } = &self.jobs[ix].state {
                for replica in placement.replicas() {
                    self.changes.room_grew(replica.node);
                }
            }
        }
    }

    /// Step 4: walk the queue in order, one equivalence group at a time (see `queue.rs`).
    fn walk_queue(&mut self, now: Time, budget: &mut PreemptionBudget, out: &mut CycleOutcome) {
        self.blocked_by = None;
        self.ledger.take_borrowing_began(&mut self.changes.borrowing_began);
        self.ledger.take_settled_fell(&mut self.changes.settled_fell);
        // Nothing awake, nothing that wakes a group, and no reservation to bring up to date
        // (a fifth of Philly's cycles: a job joins a sleeping group): the walk would ask no
        // one. Under strict order it would still name the first blocker.
        if self.queue.awake.is_empty()
            && self.changes.is_empty()
            && self.queue.first_timed_wake().is_none_or(|at| at > now)
            && self.plan.is_empty()
            && self.hosting.is_empty()
        {
            if !self.config.policy.backfill {
                self.blocked_by = self.first_blocker();
            }
            return;
        }
        // 4a. Wake the sleeping groups that what changed since the last cycle may concern.
        self.grown_nodes.clear();
        for &id in &self.changes.grown {
            if let Some(ix) = self.nodes.ix_of(id).filter(|ix| self.nodes.at(*ix).schedulable) {
                self.grown_nodes.push(ix);
            }
        }
        self.grown_nodes.sort_unstable();
        self.grown_nodes.dedup();
        self.grown_snapshot.take(&GrownNodes { nodes: &self.nodes, grown: &self.grown_nodes });
        self.refresh_plan(now);
        self.wake_outranking_held(now);
        let checks = SchedulerChecks { ledger: &self.ledger, nodes: &self.nodes, tallies: &self.tallies };
        self.queue.wake_for(now, &mut self.changes, &self.grown_snapshot, &checks);
        let candidates = std::mem::take(&mut self.queue.candidates);
        let mut memo = std::mem::take(&mut self.cycle_memo);
        memo.clear();
        // The fair order's buffers are kept where it is on; otherwise it stays empty.
        let mut level = match self.fair.enabled() {
            true => std::mem::take(&mut self.fair_level),
            false => FairLevel::default(),
        };
        level.clear();
        let reached = self.walk_heads(&candidates, &mut memo, &mut level, budget, now, out);
        self.cycle_memo = memo;
        if self.fair.enabled() {
            self.fair_level = level;
        }
        // Candidates the walk did not reach (it stopped early) wake now, to be asked next
        // cycle as if woken at once.
        for &(_, gix) in &candidates[reached..] {
            if self.queue.is_asleep(gix) {
                self.queue.wake(gix);
            }
        }
        self.queue.candidates = candidates;
        self.queue.settle_lazy_wakes();
    }

    /// The walk proper: awake heads and lazy candidates in queue order; returns how many
    /// candidates it reached.
    fn walk_heads(
        &mut self,
        candidates: &[(QueueKey, GroupIx)],
        memo: &mut CycleMemo,
        level: &mut FairLevel,
        budget: &mut PreemptionBudget,
        now: Time,
        out: &mut CycleOutcome,
    ) -> usize {
        let strict = !self.config.policy.backfill;
        let first_blocker = |s: &Scheduler| if strict { s.first_blocker() } else { None };
        let mut blocker = first_blocker(self);
        // Awake heads are taken in order from the queue's own set (a start, or a preemption
        // that makes the head hold GPUs, moves a group's head later, where the walk finds it
        // again); candidates come from their own list.
        let mut last_head: Option<(QueueKey, GroupIx)> = None;
        let mut next_candidate = 0;
        let fair = self.orders_by_share();
        loop {
            let next = if fair {
                self.next_fair(level, candidates, &mut next_candidate, now)
            } else {
                let next_head = match last_head {
                    None => self.queue.awake.first(),
                    Some(last) => self.queue.awake.range((Excluded(last), Unbounded)).next(),
                }
                .copied();
                let candidate = candidates.get(next_candidate).copied();
                match (next_head, candidate) {
                    (None, None) => None,
                    (Some(h), Some(c)) if c < h => Some((c.0, c.1, From::Candidate)),
                    (Some(h), _) => Some((h.0, h.1, From::Awake)),
                    (None, Some(c)) => Some((c.0, c.1, From::Candidate)),
                }
            };
            let Some((key, gix, from)) = next else { break };
            if blocker.is_some_and(|(k, _)| k < key) {
                break;
            }
            if out.stats.started >= self.config.limits.starts_per_cycle_max {
                if fair {
                    // Candidates the fair order took in but did not reach wake as if
                    // unreached (see `walk_queue`).
                    let current = (from == From::Candidate).then_some(Reverse(((0, 0), key, gix, from)));
                    for Reverse((.., gix, from)) in level.heap.drain().chain(current) {
                        if from == From::Candidate && self.queue.is_asleep(gix) {
                            self.queue.wake(gix);
                        }
                    }
                }
                break;
            }
            match from {
                From::Awake => {}
                From::Candidate => {
                    if !fair {
                        next_candidate += 1;
                    }
                    if !self.queue.is_asleep(gix) {
                        // Woken meanwhile (`wake_reclaimers`; and gone if its last job
                        // started since): the walk finds it among the awake (the fair
                        // order, which took in its level's heads already, takes it now).
                        if fair
                            && let Some(head) = self.queue.live_head(gix)
                            && self.queue.awake.contains(&(head, gix))
                        {
                            self.push_fair(level, head, gix, From::Awake, now);
                        }
                        continue;
                    }
                    // Second look: does a grown node still have room for it now?
                    let room = self.queue.room_wake(gix);
                    let gk = &self.queue.group(gix).key;
                    let grown = GrownNodes { nodes: &self.nodes, grown: &self.grown_nodes };
                    if let RoomWake::Borrowed { cohort } = room {
                        // What it may take depends on its project: nothing to remember.
                        let ledger = &self.ledger;
                        if !grown.admits_reclaim(gk, &|owner| may_reclaim_from(ledger, gk.project, cohort, owner)) {
                            continue;
                        }
                    } else {
                        let (model, priority, need) = (gk.model, gk.priority, gk.per_replica.gpus);
                        let known_short = memo
                            .no_room
                            .iter()
                            .any(|&(m, r, p, g)| m == model && r == room && p >= priority && g <= need);
                        if known_short || !grown.admits(gk, room) {
                            if !known_short {
                                memo.no_room.push((model, room, priority, need));
                            }
                            continue;
                        }
                    }
                    self.queue.wake_lazily(gix);
                    blocker = first_blocker(self);
                }
            }
            last_head = Some((key, gix));
            out.stats.jobs_considered += 1;
            let gk = self.queue.group(gix).key;
            let taken_back = self.counters.starts_taken_back;
            let considered = self.consider(key.ix, &gk, now, memo, budget, out);
            if self.counters.starts_taken_back != taken_back {
                // Room grew within the walk (what the taken-back runs held beyond the hold):
                // what the memo says failed may not now.
                memo.clear();
            }
            match considered {
                considered @ (Considered::Started | Considered::Preempting) => {
                    // Something changed for this group: its old verdict no longer holds. The
                    // job left the group (it runs, or holds GPUs): its next member is the
                    // group's new head, found again in `awake`; or the group is gone.
                    if !self.queue.is_gone(gix, &gk) {
                        self.queue.clear_verdict(gix);
                        // The group's next member, if any, is the level's to order again.
                        if fair {
                            level.forget([gk.project, gk.user]);
                            if !self.queue.is_asleep(gix) {
                                self.push_fair(level, self.queue.group(gix).head(), gix, From::Awake, now);
                            }
                        }
                    }
                    if strict && matches!(considered, Considered::Preempting) {
                        self.blocked_by = Some((key, gk.priority));
                        return next_candidate;
                    }
                    if self.wake_reclaimers(fair.then_some(&mut *level), now) {
                        blocker = first_blocker(self);
                    }
                }
                Considered::Failed(verdict) => {
                    let blocks = strict && verdict.blocks_strict_order();
                    self.queue.fail(gix, verdict);
                    if blocks {
                        self.blocked_by = Some((key, gk.priority));
                        return next_candidate;
                    }
                }
            }
        }
        if strict {
            self.blocked_by = self.blocked_by.or(blocker);
        }
        next_candidate
    }

    /// A start or a preemption of the walk made a member of a cohort begin to borrow: the
    /// groups waiting for that (`RoomWake::Borrowed`) wake at once, so that those the walk
    /// has yet to reach are asked in this cycle, after what made the member borrow, as they
    /// would be had an event woken them; the others are asked next cycle. Under fair order
    /// those of the level being walked join it. Whether it woke any (under strict order,
    /// the first blocker may have changed).
    fn wake_reclaimers(&mut self, level: Option<&mut FairLevel>, now: Time) -> bool {
        self.ledger.take_borrowing_began(&mut self.changes.borrowing_began);
        if self.changes.borrowing_began.is_empty() {
            return false;
        }
        let mut woken = std::mem::take(&mut self.reclaimers_woken);
        self.queue.wake_borrowed(&mut self.changes.borrowing_began, &mut woken);
        if let Some(level) = level {
            for &gix in &woken {
                let head = self.queue.group(gix).head();
                if level.rank == Some(head.rank) {
                    self.push_fair(level, head, gix, From::Awake, now);
                }
            }
        }
        let any = !woken.is_empty();
        self.reclaimers_woken = woken;
        any
    }

    /// Under strict order the first sleeping group that blocks, or the first job holding
    /// GPUs for its victims, blocks everything behind it: that one, with its priority.
    fn first_blocker(&self) -> Option<(QueueKey, Priority)> {
        let asleep = self.queue.asleep_blocking.first().map(|&(k, gix)| (k, self.queue.group(gix).key.priority));
        let holding = self.queue.holding.first().map(|&k| (k, self.jobs[k.ix].spec.priority));
        [asleep, holding].into_iter().flatten().min_by_key(|(k, _)| *k)
    }

    /// The next job of the fair order (see `FairLevel`), loading the next priority level
    /// when the current one is done.
    fn next_fair(
        &mut self,
        level: &mut FairLevel,
        candidates: &[(QueueKey, GroupIx)],
        next_candidate: &mut usize,
        now: Time,
    ) -> Option<(QueueKey, GroupIx, From)> {
        loop {
            if level.heap.is_empty() {
                self.load_fair_level(level, candidates, next_candidate, now)?;
            }
            let Reverse((fair_key, key, gix, from)) = level.heap.pop()?;
            if from == From::Awake && !self.queue.awake.contains(&(key, gix)) {
                continue; // No longer this group's awake head.
            }
            if from == From::Candidate && self.queue.live_head(gix).is_none() {
                continue; // Woken meanwhile (`wake_reclaimers`), and its last job started.
            }
            if self.fair_key(&mut level.shares, gix, now) != fair_key {
                self.push_fair(level, key, gix, from, now);
                continue;
            }
            return Some((key, gix, from));
        }
    }

    /// Take in the next priority level: its awake heads and its candidates.
    fn load_fair_level(
        &self,
        level: &mut FairLevel,
        candidates: &[(QueueKey, GroupIx)],
        next_candidate: &mut usize,
        now: Time,
    ) -> Option<()> {
        let after = |rank: Reverse<Priority>| match level.rank {
            None => true,
            Some(done) => rank > done,
        };
        let lowest_key = |rank| QueueKey { rank, expected_ms: 0, submitted_at: Time(0), id: JobId(0), ix: JobIx(0) };
        let first_head = match level.rank {
            None => self.queue.awake.first().copied(),
            Some(Reverse(p)) => {
                let next = p.checked_sub(1).map(|q| (lowest_key(Reverse(q)), GroupIx(0)));
                next.and_then(|from| self.queue.awake.range((Included(from), Unbounded)).next().copied())
            }
        }
        .filter(|(k, _)| after(k.rank));
        let first_candidate = candidates.get(*next_candidate).filter(|(k, _)| after(k.rank)).copied();
        let rank = match (first_head, first_candidate) {
            (None, None) => return None,
            (Some(h), Some(c)) => h.0.rank.min(c.0.rank),
            (Some(h), None) => h.0.rank,
            (None, Some(c)) => c.0.rank,
        };
        level.rank = Some(rank);
        let heads = self.queue.awake.range((Included((lowest_key(rank), GroupIx(0))), Unbounded));
        for &(key, gix) in heads.take_while(|(k, _)| k.rank == rank) {
            self.push_fair(level, key, gix, From::Awake, now);
        }
        while let Some(&(key, gix)) = candidates.get(*next_candidate).filter(|(k, _)| k.rank == rank) {
            *next_candidate += 1;
            self.push_fair(level, key, gix, From::Candidate, now);
        }
        Some(())
    }

    /// Whether the walk orders each priority level by share: fair sharing on, and backfill
    /// (under strict order the queue's order is the order by definition).
    pub(crate) fn orders_by_share(&self) -> bool {
        self.fair.enabled() && self.config.policy.backfill
    }

    /// Put a head or a candidate in the fair order, with its group's shares now.
    fn push_fair(&self, level: &mut FairLevel, key: QueueKey, gix: GroupIx, from: From, now: Time) {
        let fair_key = self.fair_key(&mut level.shares, gix, now);
        level.heap.push(Reverse((fair_key, key, gix, from)));
    }

    /// A group's place in the fair order now: its project's share, then its user's.
    fn fair_key(&self, shares: &mut Vec<(AccountId, u64)>, gix: GroupIx, now: Time) -> FairKey {
        let gk = &self.queue.group(gix).key;
        let mut share = |account: AccountId| match shares.iter().find(|(a, _)| *a == account) {
            Some(&(_, bits)) => bits,
            None => {
                let bits = self.fair.share_bits(account, now);
                shares.push((account, bits));
                bits
            }
        };
        (share(gk.project), share(gk.user))
    }

    /// Steps 4c–4g for one job.
    // Out of line: inlined into the walk, it costs Philly's replay 1.3% more instructions
    // (callgrind).
    #[inline(never)]
    fn consider(
        &mut self,
        ix: JobIx,
        gk: &GroupKey,
        now: Time,
        memo: &mut CycleMemo,
        budget: &mut PreemptionBudget,
        out: &mut CycleOutcome,
    ) -> Considered {
        debug_assert!(matches!(self.jobs[ix].state, JobState::Pending { reservation: None }), "holders are not walked");
        let shape = Shape { model: gk.model, per_replica: gk.per_replica, replicas: gk.replicas };
        let may_preempt = self.config.policy.preemption && gk.may_preempt;
        // Rule 1's preemption delay: until it passes, the job waits as one that may not
        // preempt, and its group wakes when it does.
        let delayed_until = Some(self.jobs[ix].may_preempt_from()).filter(|until| may_preempt && *until > now);
        let preempt_capable = may_preempt && delayed_until.is_none();
        let overrides = self.jobs[ix].spec.overrides_protection;
        // c.
        let never = memo.never_fits.get_or_insert_with(shape, || {
            self.replicas_fit_max(shape.model, shape.per_replica, shape.replicas) < shape.replicas
        });
        if never {
            let reason = self.never_fits_reason(shape);
            // Node sizes are what it waits for: a node added or back from a drain.
            let wake = Wake::On(WakeOn { room: RoomWake::Nodes, ..WakeOn::default() });
            return Considered::Failed(Verdict { reasons: Reasons::one(reason), wake });
        }
        // d. A cap, not room, holds it: a reservation it has goes (`plan.rs`).
        if let Some((cohort, reason, reclaim)) = self.cohort_shortfall(ix) {
            self.leave_plan(ix);
            let mut reasons = Reasons::one(reason);
            // Without preempting, only its cohort's shortage ending lets it in (whether it
            // may reclaim is moot: `reclaims: true` leaves that test aside).
            let cohort_short = Some(CohortWake { cohort, reclaims: true, short: true });
            let mut wake = Wake::On(WakeOn { cohort_short, at: delayed_until, ..WakeOn::default() });
            if let Some(until) = delayed_until {
                reasons.push(PendingReason::PreemptionDelayed { until });
            }
            if preempt_capable {
                match self.preempt_within(ix, PreemptionScope::Cohort { reclaim }, now, budget, out) {
                    Searched::Done(considered) => return considered,
                    Searched::OverBudget => wake = self.defer_for_budget(&mut reasons, now),
                    Searched::NoSet => {
                        let c = CohortWake { cohort, reclaims: reclaim, short: true };
                        wake = self.cohort_search_failed(ix, gk, c, now);
                    }
                }
            }
            return Considered::Failed(Verdict { reasons, wake });
        }
        if let Some((account, reason)) = self.quota_shortfall(ix) {
            self.leave_plan(ix);
            let mut reasons = Reasons::one(reason);
            let quota = self.quota_wake(account, gk, preempt_capable);
            let mut wake =
                Wake::On(WakeOn { quota: [Some(quota), None, None], at: delayed_until, ..WakeOn::default() });
            if let Some(until) = delayed_until {
                reasons.push(PendingReason::PreemptionDelayed { until });
            }
            // A failed search, or a spent budget, must not leave the group dormant until the
            // account changes: room appearing (or the next cycle's budget) can let the same
            // search succeed.
            if preempt_capable {
                if budget.take_search() {
                    out.stats.preemption_searches += 1;
                    match self.search(ix, PreemptionScope::Account(account), now) {
                        Some(plan) if budget.take_victims(&plan) => {
                            return self.carry_out_preemption(ix, plan, now, out);
                        }
                        Some(_) => {
                            let wake = self.defer_for_budget(&mut reasons, now);
                            return Considered::Failed(Verdict { reasons, wake });
                        }
                        None => {}
                    }
                    // If its own preemptible work could bring it under this cap, something
                    // else stopped it (its other account's cap, its cohort, room): it asks
                    // again when anything is uncharged from, or the cap changes of, any of
                    // those accounts, or room grows.
                    if self.ledger.base_gpus(account, quota.level) <= quota.base_gpus_max {
                        let user = (gk.user != gk.project).then(|| any_uncharge(gk.user));
                        let cohort = self.ledger.cohort_of(gk.project).map(any_uncharge);
                        wake = Wake::On(WakeOn {
                            quota: [Some(any_uncharge(gk.project)), user, cohort],
                            room: RoomWake::Any,
                            ..WakeOn::default()
                        });
                    }
                } else {
                    wake = self.defer_for_budget(&mut reasons, now);
                }
            }
            return Considered::Failed(Verdict { reasons, wake });
        }
        // e. (A start on free room, not a preemption, waits while victims moved to holds of
        // its cohort are on their way out, where it would take the cohort beyond what its
        // members lend until they exit: `Ledger::over_cohort_now`. Preempting would not
        // help, they hold their GPUs; it keeps any reservation it has, and waits within a
        // grace period.)
        if memo.no_fit.get(&shape).is_none()
            && let Some((cohort, reason)) = self.cohort_over_now_reason(&self.jobs[ix].spec)
            && self.place_on_free_room(ix, shape).is_some()
        {
            let cohort_short = Some(CohortWake { cohort, reclaims: true, short: true });
            return Considered::Failed(Verdict {
                reasons: Reasons::one(reason),
                wake: Wake::On(WakeOn { cohort_short, ..WakeOn::default() }),
            });
        }
        if !self.plan.is_empty() && memo.no_fit.get(&shape).is_none() {
            match self.start_around_plan(ix, shape, now, out) {
                Some(considered) => return considered,
                None => {
                    memo.no_fit.insert(shape, ());
                }
            }
        }
        if memo.no_fit.get(&shape).is_none() {
            if let Some(placement) = self.place_on_free_room(ix, shape) {
                let id = self.jobs[ix].spec.id;
                self.start(ix, placement.clone(), now);
                out.decisions.push(Decision::Start { job: id, placement });
                out.stats.started += 1;
                return Considered::Started;
            }
            memo.no_fit.insert(shape, ());
        }
        // f.
        let mut reasons = Reasons::one(self.no_fit_reason(shape));
        let mut wake = Wake::On(WakeOn { at: delayed_until, ..self.wake_on_room(preempt_capable) });
        if !self.config.policy.preemption {
            // The policy never preempts: nothing to add.
        } else if let Some(until) = delayed_until {
            reasons.push(PendingReason::PreemptionDelayed { until });
        } else if !preempt_capable {
            reasons.push(PendingReason::PreemptionDisabled);
        } else if memo.no_victims.get(&(shape, overrides)).is_some_and(|p| p >= gk.priority) && !self.may_reclaim(ix) {
            // The search would fail as the remembered one did: the answer it would give.
            self.no_victims_found(ix, gk.priority, now, &mut reasons, &mut wake);
        } else if !budget.take_search() {
            wake = self.defer_for_budget(&mut reasons, now);
        } else {
            out.stats.preemption_searches += 1;
            match self.search(ix, PreemptionScope::Any, now) {
                Some(plan) if budget.take_victims(&plan) => {
                    return self.carry_out_preemption(ix, plan, now, out);
                }
                Some(_) => wake = self.defer_for_budget(&mut reasons, now),
                None if self.may_reclaim(ix) => {
                    match self.preempt_within(ix, PreemptionScope::Cohort { reclaim: true }, now, budget, out) {
                        Searched::Done(considered) => return considered,
                        Searched::OverBudget => wake = self.defer_for_budget(&mut reasons, now),
                        Searched::NoSet => {
                            reasons.push(PendingReason::NoPreemptionCandidates);
                            let cohort = self.ledger.cohort_of(gk.project).expect("a member may reclaim");
                            wake = match self.no_node_holds(ix, true, cohort, now) {
                                // Its cohort is not short: room alone stands in its way.
                                Some(room) => Wake::On(WakeOn { room, ..WakeOn::default() }),
                                None => {
                                    let quota = [Some(any_uncharge(cohort)), None, None];
                                    Wake::On(WakeOn { quota, room: RoomWake::Any, ..WakeOn::default() })
                                }
                            };
                        }
                    }
                }
                None => {
                    memo.no_victims.insert((shape, overrides), gk.priority);
                    self.no_victims_found(ix, gk.priority, now, &mut reasons, &mut wake);
                }
            }
        }
        // g.
        if self.config.policy.reservations.is_some() && self.config.policy.backfill {
            self.maybe_reserve(ix, now);
        }
        Considered::Failed(Verdict { reasons, wake })
    }

    /// Step d when the job's victim search failed: what wakes its group.
    ///
    /// Most such searches fail because even with every preemptible run at or below its
    /// priority gone the GPUs would not cover the job (the search's first necessary
    /// condition, `enough_gpus_below`, at its widest): then only GPUs that others free, or
    /// its cohort's shortage ending, change its answer. Next most fail because no node
    /// could hold its replicas even with all it may take gone (`no_node_holds`): then only
    /// a node growing or, where it reclaims, a member beginning to borrow can change that,
    /// besides its cohort's shortage ending. Otherwise anything charged to or uncharged
    /// from the cohort, or room growing (a victim's protection ending), may let the same
    /// search succeed.
    fn cohort_search_failed(&mut self, ix: JobIx, gk: &GroupKey, c: CohortWake, now: Time) -> Wake {
        // What its search may take: runs below its priority, and of its own where it reclaims.
        let level = if c.reclaims { gk.priority } else { gk.priority.saturating_sub(1) };
        if gpus_at_or_below(&self.nodes, &self.tallies, gk.model, level) < gk.total_gpus() {
            return Wake::On(WakeOn { cohort_short: Some(c), room: RoomWake::Total { level }, ..WakeOn::default() });
        }
        if let Some(room) = self.no_node_holds(ix, c.reclaims, c.cohort, now) {
            return Wake::On(WakeOn { cohort_short: Some(c), room, ..WakeOn::default() });
        }
        let quota = [Some(any_uncharge(c.cohort)), None, None];
        Wake::On(WakeOn { quota, room: RoomWake::Any, ..WakeOn::default() })
    }

    /// After a failed victim search in `cohort` (reclaiming or not): if the nodes could not
    /// hold the job's replicas even with every run it may take gone, counting GPUs only
    /// (the search's necessary condition, `SearchView::room_possible`), the room wake under
    /// which they might: no search can succeed before a node's free GPUs plus what it may
    /// take there grow. That sum grows only when something leaves the node (or the node is
    /// added or uncordoned, or a run's protection ends: the node counts as grown), or, for
    /// a reclaim, when a member of the cohort begins to borrow (its runs of the job's
    /// priority become what it may take); a run starting on the node takes free GPUs and
    /// adds at most as many. `None` when they could (the search failed for another reason:
    /// its cohort's needs, CPU or memory, its bounds).
    fn no_node_holds(&mut self, ix: JobIx, reclaims: bool, cohort: AccountId, now: Time) -> Option<RoomWake> {
        if self.search_parts().0.room_possible(ix, reclaims, now) {
            return None;
        }
        Some(if reclaims { RoomWake::Borrowed { cohort } } else { RoomWake::Reclaim })
    }

    /// Step f when an unrestricted victim search for the job fails (or would fail, as the
    /// memo knows): why, and what wakes its group.
    fn no_victims_found(&mut self, ix: JobIx, priority: Priority, now: Time, reasons: &mut Reasons, wake: &mut Wake) {
        reasons.push(match self.protected_victims_until(ix, now) {
            Some(until) => PendingReason::VictimsProtected { until },
            None => PendingReason::NoPreemptionCandidates,
        });
        // With more candidates than a search examines (rule 6), a victim leaving any node
        // changes which ones it examines: any growth wakes it.
        let candidates = self.tallies.preemptible_jobs_below(priority);
        if candidates > u64::from(self.config.limits.victim_candidates_max) {
            *wake = Wake::On(WakeOn { room: RoomWake::Any, ..WakeOn::default() });
        }
        // A member of a cohort reclaims runs of its own priority from the members that
        // borrow if it stays within its nominal quota with the job. Within it, none borrows
        // now (else it would have tried): it waits for one to begin as well, with room
        // counting what it could then take (scenario 146). Beyond it, it waits for its
        // project to get back within it as well (scenario 148).
        let (project, total) = (self.jobs[ix].spec.project, self.jobs[ix].spec.total());
        if let Wake::On(on) = wake
            && let Some(cohort) = self.ledger.cohort_of(project)
        {
            if !may_reclaim_with(&self.ledger, project, cohort, total) {
                on.cohort_short = Some(CohortWake { cohort, reclaims: false, short: false });
            } else if on.room == RoomWake::Reclaim {
                on.room = RoomWake::Borrowed { cohort };
            }
        }
    }

    /// Step e with reservations (see `plan.rs`): start on free room that delays no
    /// reservation ranked above the job (`Started`), or say that one holds it back
    /// (`Failed`); `None` when there is no free room for it at all.
    fn start_around_plan(&mut self, ix: JobIx, shape: Shape, now: Time, out: &mut CycleOutcome) -> Option<Considered> {
        let free = self.free_room().with_image(self.jobs[ix].spec.image);
        let mut gpus = None;
        let mut chosen = match shape.replicas {
            1 => free.place_one_with_gpus(shape.model, shape.per_replica).map(|(node, g)| {
                gpus = g;
                vec![(node, 1)]
            }),
            _ => free.place(shape.model, shape.per_replica, shape.replicas),
        }?;
        if let Some(p) = self.delays_reservation(ix, &chosen, now) {
            let (job, at) = (p.id, p.at);
            match self.place_around_plan(ix, now) {
                Some(other) => {
                    chosen = other;
                    gpus = None;
                }
                None => {
                    let reasons = Reasons::one(PendingReason::HeldForReservation { job, at });
                    // Room elsewhere, the reservation's start, or the plan changing.
                    let wake = Wake::On(WakeOn { room: RoomWake::Fits, at: Some(at), plan: true, ..WakeOn::default() });
                    return Some(Considered::Failed(Verdict { reasons, wake }));
                }
            }
        }
        let placement = match (&chosen[..], gpus) {
            ([(node, 1)], Some(g)) => self.assign_one(*node, Some(g), shape.per_replica),
            _ => self.assign_slots(&chosen, shape.per_replica),
        };
        let id = self.jobs[ix].spec.id;
        self.plan_started(ix, &chosen);
        self.start(ix, placement.clone(), now);
        out.decisions.push(Decision::Start { job: id, placement });
        out.stats.started += 1;
        Some(Considered::Started)
    }

    /// A victim search in `scope` within the cycle's budget (rule 7), carried out if it
    /// finds a set.
    fn preempt_within(
        &mut self,
        ix: JobIx,
        scope: PreemptionScope,
        now: Time,
        budget: &mut PreemptionBudget,
        out: &mut CycleOutcome,
    ) -> Searched {
        if !budget.take_search() {
            return Searched::OverBudget;
        }
        out.stats.preemption_searches += 1;
        match self.search(ix, scope, now) {
            Some(plan) if budget.take_victims(&plan) => Searched::Done(self.carry_out_preemption(ix, plan, now, out)),
            Some(_) => Searched::OverBudget,
            None => Searched::NoSet,
        }
    }

    /// Rule 1's reclaim: is the job's project within its nominal quota with the job, in a
    /// cohort one of whose other members borrows with running work of the job's priority?
    fn may_reclaim(&self, ix: JobIx) -> bool {
        let job = &self.jobs[ix];
        let Some(cohort) = self.ledger.cohort_of(job.spec.project) else { return false };
        let c = self.ledger.cohort(cohort).expect("a member's cohort");
        let member = self.ledger.get(job.spec.project).expect("a member is known");
        member.within_nominal_with(c, job.spec.total())
            && self.ledger.borrowers_at(cohort, job.spec.priority, job.spec.project)
    }

    /// A preemptor the cycle's budget (rule 7) cannot serve: it says so, and the core asks
    /// the driver for the next cycle (`next_wakeup`) instead of leaving it to the next event.
    fn defer_for_budget(&mut self, reasons: &mut Reasons, now: Time) -> Wake {
        reasons.push(PendingReason::PreemptionBudgetExhausted);
        self.budget_spent_at = Some(now);
        Wake::NextCycle
    }

    /// What wakes a group that found no room: room for one replica on a node that grew,
    /// counting what lower-priority preemptible work there would free if the group may
    /// preempt (see `queue.rs`).
    fn wake_on_room(&self, preempt_capable: bool) -> WakeOn {
        let room = if preempt_capable { RoomWake::Reclaim } else { RoomWake::Fits };
        WakeOn { room, ..WakeOn::default() }
    }

    /// When a group over `account`'s cap may fit under it (see `QuotaWake`).
    fn quota_wake(&self, account: AccountId, gk: &GroupKey, preempt_capable: bool) -> QuotaWake {
        let level = if preempt_capable { gk.priority } else { Priority::MIN };
        let cap = self.ledger.gpus_cap(account);
        let asks = gk.total_gpus();
        let base_gpus_max = cap.map_or(i64::MAX, |cap| i64::from(cap) - i64::from(asks));
        QuotaWake { account, level, base_gpus_max }
    }

    /// A victim search, with the scheduler's scratch buffers.
    fn search(&mut self, ix: JobIx, scope: PreemptionScope, now: Time) -> Option<VictimPlan> {
        let (view, scratch) = self.search_parts();
        view.find_victims(ix, scope, now, scratch)
    }

    /// When a failed search failed only because rule 1 protects the victims it would take:
    /// the time the first lower-priority run's protection ends, when the job is looked at
    /// again. A second search, only while some run is protected.
    fn protected_victims_until(&mut self, ix: JobIx, now: Time) -> Option<Time> {
        if self.protection_ends.last().is_none_or(|(until, ..)| *until <= now) {
            return None;
        }
        let (view, scratch) = self.search_parts();
        scratch.protection_waived = true;
        let plan = view.find_victims(ix, PreemptionScope::Any, now, scratch);
        scratch.protection_waived = false;
        plan?;
        let priority = self.jobs[ix].spec.priority;
        self.protection_ends
            .iter()
            .find(|&&(until, _, vix)| until > now && self.jobs[vix].spec.priority < priority)
            .map(|&(until, ..)| until)
    }

    /// When starting the job would make its project borrow more than its cohort lends (and
    /// no account of its own is over its cap: that comes first): the cohort, why, and
    /// whether the project stays within its nominal quota (it may reclaim).
    fn cohort_shortfall(&self, ix: JobIx) -> Option<(AccountId, PendingReason, bool)> {
        if !self.ledger.any_capped() {
            return None;
        }
        let job = &self.jobs[ix];
        let total = job.spec.total();
        let (cohort, resource, used, limit) = self.ledger.over_cohort(job.spec.project, total)?;
        if self.quota_shortfall(ix).is_some() {
            return None;
        }
        let reclaim = may_reclaim_with(&self.ledger, job.spec.project, cohort, total);
        let requested = resource.amount(total);
        let project = job.spec.project;
        Some((cohort, PendingReason::CohortExhausted { cohort, project, resource, requested, used, limit }, reclaim))
    }

    /// What of its quota or its cohort holds the pending job at `ix` back now (step 4d), if
    /// anything does.
    pub(crate) fn cap_shortfall(&self, ix: JobIx) -> Option<PendingReason> {
        self.cohort_shortfall(ix).map(|(_, reason, _)| reason).or_else(|| self.quota_shortfall(ix).map(|(_, r)| r))
    }

    /// For the tests: `cap_shortfall` of a job held in the queue.
    #[doc(hidden)]
    pub fn held_back_by_caps(&self, job: crate::types::JobId) -> Option<PendingReason> {
        let ix = self.jobs.ix_of(job)?;
        matches!(self.jobs[ix].state, JobState::Pending { reservation: None }).then(|| self.cap_shortfall(ix))?
    }

    /// The first of the job's accounts that starting it would take over quota.
    fn quota_shortfall(&self, ix: JobIx) -> Option<(AccountId, PendingReason)> {
        if !self.ledger.any_capped() {
            return None;
        }
        let job = &self.jobs[ix];
        let total = job.spec.total();
        job.accounts().find_map(|account| {
            let (resource, used, limit, limit_from) = self.ledger.over_quota(account, total)?;
            let requested = resource.amount(total);
            Some((account, PendingReason::OverQuota { account, resource, requested, used, limit, limit_from }))
        })
    }

    /// How many replicas of `per_replica` the nodes of the model hold when empty (each node
    /// as many as fit in every dimension), counted up to `cap`: a gang of more can never
    /// start. Drained nodes count: they come back.
    pub fn replicas_fit_max(&self, model: Option<GpuModel>, per_replica: Resources, cap: u32) -> u32 {
        // A share needs a node with a GPU; one replica is all a share job has.
        let per_replica = per_replica.as_whole_gpus();
        let per_dimension = |capacity: u64, asked: u64| capacity.checked_div(asked).unwrap_or(u64::MAX);
        let mut total: u64 = 0;
        for n in self.nodes.iter().filter(|n| model.is_none_or(|m| m == n.spec.gpu_model)) {
            let c = n.spec.capacity;
            let fit = per_dimension(u64::from(c.gpus), u64::from(per_replica.gpus))
                .min(per_dimension(c.cpu_millis, per_replica.cpu_millis))
                .min(per_dimension(c.memory_mib, per_replica.memory_mib));
            total = total.saturating_add(fit);
            if total >= u64::from(cap) {
                return cap;
            }
        }
        total as u32
    }

    /// Why no node of the model can hold a replica of `shape`: the first dimension in which
    /// even the largest node is too small, if there is one.
    fn never_fits_reason(&self, shape: Shape) -> PendingReason {
        let nodes = self.nodes.iter().filter(|n| shape.model.is_none_or(|m| m == n.spec.gpu_model));
        let largest = nodes.fold(Resources::ZERO, |l, n| Resources {
            gpus: l.gpus.max(n.spec.capacity.gpus),
            cpu_millis: l.cpu_millis.max(n.spec.capacity.cpu_millis),
            memory_mib: l.memory_mib.max(n.spec.capacity.memory_mib),
            gpu_milli: 0,
        });
        let short = ResourceKind::ALL.into_iter().find(|k| k.of(shape.per_replica) > k.of(largest));
        PendingReason::NeverFits {
            gpus_per_replica: shape.per_replica.slots_per_replica(),
            gpu_model: shape.model,
            resource: short,
            requested: short.map_or(0, |k| k.of(shape.per_replica)),
            largest: short.map_or(0, |k| k.of(largest)),
            replicas: shape.replicas,
            replicas_max: self.replicas_fit_max(shape.model, shape.per_replica, shape.replicas),
        }
    }

    fn no_fit_reason(&self, shape: Shape) -> PendingReason {
        if shape.per_replica.is_share() {
            return self.no_share_fit(shape.per_replica.gpu_milli, shape.model);
        }
        let (gpus_free_max, nodes_matching) = self.nodes.index.summary(shape.model);
        PendingReason::NoFit {
            gpus_per_replica: shape.per_replica.gpus,
            replicas: shape.replicas,
            gpu_model: shape.model,
            gpus_free_max,
            nodes_matching,
        }
    }

    /// Why a share finds no room: the most free on one GPU of the model's nodes (a free GPU
    /// counts 1000; else the shared GPUs that are open).
    pub(crate) fn no_share_fit(&self, gpu_milli: u32, model: Option<GpuModel>) -> PendingReason {
        let (gpus_free_max, nodes_matching) = self.nodes.index.summary(model);
        let share_free_max = if gpus_free_max > 0 {
            1000
        } else {
            self.nodes.index.shared_open(model).map(|ix| self.nodes.at(ix).share_room_max()).max().unwrap_or(0)
        };
        PendingReason::NoShareFit { gpu_milli, gpu_model: model, share_free_max, nodes_matching }
    }

    /// Where the job at `ix` fits on free GPUs now, by the policy's placement.
    fn place_on_free_room(&self, ix: JobIx, shape: Shape) -> Option<Placement> {
        let per_replica = shape.per_replica;
        match shape.replicas {
            1 => self
                .free_room()
                .with_image(self.jobs[ix].spec.image)
                .place_one_with_gpus(shape.model, per_replica)
                .map(|(node, gpus)| self.assign_one(node, gpus, per_replica)),
            _ => self
                .free_room()
                .place(shape.model, per_replica, shape.replicas)
                .map(|c| self.assign_slots(&c, per_replica)),
        }
    }

    /// The read-only view free-room placement walks.
    fn free_room(&self) -> FreeRoom<'_> {
        FreeRoom {
            packing: self.config.policy.packing.map(|p| (p, &self.jobs, &self.arrivals)),
            image: None,
            image_permille: self.config.policy.image_locality_permille,
            nodes: &self.nodes,
            scoring: self.config.policy.scoring,
            scored_max: self.config.limits.candidate_nodes_scored_max as usize,
        }
    }

    /// Carries out a victim plan: its victims are told to stop, and the job holds the GPUs
    /// they free (cycle step 4f). Victims that run from a start this cycle made are not told
    /// anything where rule 8 allows (`takes_back_starts`): those starts are taken back
    /// (`take_back_starts`), and the job holds their GPUs as free ones. Where no other
    /// victim is left, it starts at once on what it holds, as a preemptor does whose victims
    /// have left.
    fn carry_out_preemption(&mut self, ix: JobIx, plan: VictimPlan, now: Time, out: &mut CycleOutcome) -> Considered {
        let (id, per_replica) = (self.jobs[ix].spec.id, self.jobs[ix].spec.per_replica);
        let placement = self.assign_reserved_slots(&plan, per_replica);
        let (taken_back, stopped): (Vec<_>, Vec<_>) = match self.takes_back_starts(ix, &plan) {
            true => plan.victims.into_iter().partition(|&(_, vix)| self.started_this_cycle(vix)),
            false => (Vec::new(), plan.victims),
        };
        // The victims' charges move to the hold where they share an account, as when
        // victims exit: what a lowered cap grandfathered stays so.
        let grandfathered = (!taken_back.is_empty()).then(|| self.grandfathered_of_job(ix));
        self.take_back_starts(&taken_back, now, out);
        for &(victim, vix) in &stopped {
            let deadline = now.plus_ms(self.jobs[vix].spec.grace_ms);
            self.begin_termination(vix, Termination::Preempted { preemptor: id, deadline });
            // After the victim left the index: its protection is computed from it again at
            // its next start.
            self.jobs[vix].record_preemption(now);
            let cause = self.preempt_cause(ix, vix);
            out.decisions.push(Decision::Preempt { victim, preemptor: id, deadline, cause });
            out.stats.victims_preempted += 1;
            self.counters.preemptions += 1;
            if let PreemptCause::Reclaim { .. } = cause {
                self.counters.reclaims += 1;
                self.reclaimed_in_cycle.push(self.jobs[vix].spec.project);
            }
        }
        let victims: Vec<crate::types::JobId> = stopped.iter().map(|(v, _)| *v).collect();
        let waiting = victims.len() as u32;
        self.reserve(ix, Reservation { placement, victims, waiting, charged: Default::default() });
        if let Some(grandfathered) = grandfathered {
            self.ledger.keep_grandfathered(grandfathered);
        }
        // A preemptor starts at once only on what starts taken back left it: one whose plan
        // freed no GPUs it could take now starts at the next cycle, as ever.
        if waiting > 0 || taken_back.is_empty() {
            return Considered::Preempting;
        }
        match self.start_ready_preemptor(ix, now, out) {
            true => Considered::Started,
            false => Considered::Preempting,
        }
    }

    /// Whether rule 8 takes back the plan's victims that run from starts of this cycle
    /// instead of stopping them: where there are some, unless an older victim is reclaimed
    /// from the project of one of those starts that would not borrow without them. A start
    /// taken back frees what stopping it would, so the rest of the set stands: a victim
    /// below the job whatever the cycle started, a reclaimed one whose project borrows as
    /// much with the starts taken back as with them, and one reclaimed from the starts' own
    /// project where it still borrows without them (each of its runs is then a borrower's,
    /// and what the set counts back from it is the same). But where the project borrows
    /// only with those starts, the set was chosen because of them: it is carried out whole.
    /// So is a set with a start of a project that an earlier preemptor of the cycle
    /// reclaimed from: that reclaim may have counted on the start to find the project
    /// borrowing, and a start taken back is one it never made.
    fn takes_back_starts(&self, ix: JobIx, plan: &VictimPlan) -> bool {
        let priority = self.jobs[ix].spec.priority;
        let started = |vix: JobIx| self.started_this_cycle(vix);
        if !plan.victims.iter().any(|&(_, vix)| started(vix)) {
            return false;
        }
        let reclaimed_before = |vix: JobIx| self.reclaimed_in_cycle.contains(&self.jobs[vix].spec.project);
        if plan.victims.iter().any(|&(_, vix)| started(vix) && reclaimed_before(vix)) {
            return false;
        }
        // What the plan's starts of `project` use, if it has any.
        let starts_of = |project| {
            let mut starts = plan.victims.iter().filter(|&&(_, s)| started(s) && self.jobs[s].spec.project == project);
            let first = starts.next()?;
            Some(starts.fold(self.jobs[first.1].spec.total(), |sum, &(_, s)| sum.plus(self.jobs[s].spec.total())))
        };
        let reclaim_that_needs_a_start = |vix: JobIx| {
            let victim = &self.jobs[vix].spec;
            if started(vix) || victim.priority < priority {
                return false;
            }
            starts_of(victim.project).is_some_and(|starts| !self.ledger.borrows_without(victim.project, starts))
        };
        !plan.victims.iter().any(|&(_, vix)| reclaim_that_needs_a_start(vix))
    }

    /// Victims that run from starts this cycle made: instead of being started only to be
    /// stopped, they are not started (`take_back_start`; no driver has heard of them, and
    /// their decisions leave the outcome) and wait in their places in the queue. A borrower
    /// started, then reclaimed further down the walk by a member within its nominal quota; a
    /// preemptor started on its hold, then taken by a higher tier that arrived at the same
    /// instant.
    fn take_back_starts(&mut self, victims: &[(crate::types::JobId, JobIx)], now: Time, out: &mut CycleOutcome) {
        for &(victim, vix) in victims {
            self.take_back_start(vix, now);
            let at = out.decisions.iter().rposition(|d| matches!(d, Decision::Start { job, .. } if *job == victim));
            out.decisions.remove(at.expect("a start of this cycle is among its decisions"));
            out.stats.started -= 1;
            out.taken_back.push(victim);
        }
    }

    /// Why the job at `vix` gives way to the one at `ix`: by priority when it is below, or
    /// else a reclaim within the preemptor's cohort (the only way to preempt at one's own
    /// priority; the search took it as a candidate only so).
    fn preempt_cause(&self, ix: JobIx, vix: JobIx) -> PreemptCause {
        let (job, victim) = (&self.jobs[ix].spec, &self.jobs[vix].spec);
        if victim.priority < job.priority {
            return PreemptCause::Priority;
        }
        debug_assert_eq!(victim.priority, job.priority, "a victim is never above its preemptor");
        let cohort = self.ledger.cohort_of(job.project).expect("a job preempts at its own priority only to reclaim");
        PreemptCause::Reclaim { cohort }
    }

    /// Slots for a preemptor, from what each GPU of a chosen node has free once the victims
    /// are gone (`slot_free_after`): for whole GPUs, the free ones first, then those the
    /// victims free, lowest first; for a share, the GPU where it fits tightest.
    fn assign_reserved_slots(&self, plan: &VictimPlan, per_replica: Resources) -> Placement {
        let mut replicas = Vec::with_capacity(plan.chosen.iter().map(|(_, count)| *count as usize).sum());
        for &(node_id, count) in &plan.chosen {
            let node = self.nodes.by_id(node_id);
            let after = self.slot_free_after(node, &plan.victims);
            if per_replica.is_share() {
                assert_eq!(count, 1, "a share is one replica");
                let slot = (0..after.len() as u32)
                    .filter(|&s| u32::from(after[s as usize]) >= per_replica.gpu_milli)
                    .min_by_key(|&s| (after[s as usize], s))
                    .unwrap_or_else(|| panic!("victim plan does not free room for a share on {node_id}"));
                replicas.push(ReplicaPlacement { node: node_id, gpus: GpuSet::from_bits(1 << slot) });
                continue;
            }
            let need = count * per_replica.gpus;
            let whole_after = (0..after.len() as u32)
                .filter(|&s| after[s as usize] >= 1000)
                .fold(GpuSet::EMPTY, |set, s| set.union(GpuSet::from_bits(1 << s)));
            let free = node.free_slots().lowest(need);
            let mut slots = free.union(whole_after.minus(free).lowest(need - free.len()));
            assert_eq!(slots.len(), need, "victim plan does not free enough GPUs on {node_id}");
            for _ in 0..count {
                let gpus = slots.lowest(per_replica.gpus);
                slots = slots.minus(gpus);
                replicas.push(ReplicaPlacement { node: node_id, gpus });
            }
        }
        Placement::new(replicas)
    }

    /// Each GPU of `node`'s thousandths free once `victims` are gone: 0 for a GPU held for
    /// a preemptor or taken whole by a job that stays, 1000 less the shares that stay on a
    /// shared one, 1000 for a free one.
    fn slot_free_after(&self, node: &crate::cluster::Node, victims: &[(crate::types::JobId, JobIx)]) -> Vec<u16> {
        let mut after = node.slot_free();
        for &(_, vix) in victims {
            let victim = &self.jobs[vix];
            let JobState::Running { placement, .. } = &victim.state else { continue };
            let share = victim.spec.per_replica.gpu_milli;
            for slot in crate::scheduler::slots_on(placement, node.spec.id).minus(node.held).iter() {
                after[slot as usize] += if share > 0 { share as u16 } else { 1000 };
            }
        }
        after
    }
}
