//! The victim search: which running jobs give way to a pending one.
//!
//! # Preemption order
//!
//! 1. **Eligibility.** Only running jobs that are preemptible and of *strictly lower*
//!    priority are candidates; equal or higher priority is never preempted, but for
//!    reclaim below. A job whose `preemptionPolicy` is `Never` preempts nobody. A job over
//!    its account's quota (its hard cap, or its nominal quota plus borrowing limit) may
//!    preempt only lower-priority work charged to that same account, and only if that
//!    brings it back within the cap. A job whose project would borrow more than its cohort
//!    lends (see `ledger.rs`) may preempt lower-priority work only as far as that gives
//!    back to the cohort what it lacks. **Reclaim:** a job whose project stays within its
//!    nominal quota with it may also preempt work *of its own priority* of the other
//!    members of its cohort that use more than their nominal quota, to make room in the
//!    cohort or on the nodes (Kueue's `reclaimWithinCohort`, up to equal priority: a tier
//!    above still goes first). A cohort gets back from a member only what the member uses
//!    beyond its guarantee. Reclaim is graceful like any preemption (notice, grace,
//!    requeue), and it cannot thrash: the borrower it preempts is over its nominal quota,
//!    so it may not reclaim back. Each victim is told which way it gives way
//!    (`PreemptCause`: priority when below its preemptor, else reclaim; scenario 162). **No thrashing:** a run younger than its class's
//!    minimum run (`min_run_before_preemption_ms`) is not a candidate, nor a job preempted
//!    its class's `preemptions_per_hour_max` times in the last hour; when that protection
//!    ends, the job's nodes count as grown, so a waiting preemptor looks again (and
//!    `Scheduler::next_wakeup` names that time to the driver). A job whose class
//!    overrides protection (`overrides_protection`, for work that must start now) is not
//!    held back by it, as a last resort: it takes protected runs only when no set of
//!    unprotected ones makes room. On the preemptor's side, a job whose class sets a
//!    preemption delay (`preemption_delay_ms`) preempts only once it has waited that long
//!    since it last entered the queue (its submit, or its requeue after being preempted);
//!    until then it waits for free GPUs (`preemption_delayed`), and its group wakes when the
//!    delay ends. On a busy cluster GPUs free every few seconds, so most such waits end
//!    with nobody preempted, and a victim requeued does not at once take the GPUs of jobs
//!    below it (a cascade). Within an equivalence group, jobs are asked in queue order: a
//!    job behind a member still in its delay waits for it (see `queue.rs`).
//! 2. **Lowest priority first.** A set whose highest-priority victim is lower wins.
//!
//!    2b. **The tenant furthest above its fair share gives first** (with fair sharing on,
//!    see `fairshare.rs`). Then the set whose victims at that highest priority belong to
//!    projects of higher share wins, compared by the least share among them: a tier that
//!    must give way takes from the tenant holding most for its weight. Without fair
//!    sharing every share counts as 0 and the rule decides nothing.
//! 3. **Least work lost.** Then the set losing the least GPU-time since each victim's last
//!    checkpoint (reported, or implied by its checkpoint interval, or its start), summed
//!    over the set: not the cheapest victims taken one by one until the job fits, but the
//!    cheapest set (one victim of 16 GPU-minutes beats two of 3 and 15).
//! 4. **Fewest GPUs freed beyond need.** Then the set that frees the fewest GPUs beyond
//!    what the job needs (on the chosen node for one replica, a reclaim for room included;
//!    on all usable nodes for a gang, or a job over its quota or short of its cohort); every
//!    victim of the chosen set is needed (the set is minimal).
//! 5. **Stable ties.** Then fewer victims, then the set with the most recently submitted
//!    victims (compared highest id first), then the lowest node id.
//! 6. **Bounded.** At most `victims_per_preemption_max` victims and
//!    `victim_candidates_max` candidates examined (the first ones by priority, then id);
//!    beyond that the job does not preempt.
//! 7. **Budgeted per cycle.** At most `victims_per_cycle_max` victims in one cycle, over all
//!    preemptors, and at most `preemption_attempts_per_cycle_max` searches: a preemptor
//!    whose set would go beyond what is left waits (`preemption_budget_exhausted`) and
//!    `Scheduler::next_wakeup` asks for the next cycle 1 ms later; a preemptor behind it
//!    that needs fewer victims may still take what is left.
//! 8. **A start of the same cycle is taken back, not stopped.** Where a victim of the
//!    chosen set runs from a start this very cycle made (no driver has heard of it yet),
//!    it is not told to stop: such starts are taken back (`Scheduler::take_back_start`;
//!    their decisions leave the cycle's outcome, `CycleOutcome::taken_back` names them),
//!    the jobs wait in their places in the queue as if they had not started, and the
//!    preemptor starts at once on what it would have held, without a grace period. The
//!    usual case is a borrower that starts on free GPUs and is reclaimed further down the
//!    same walk by a member within its nominal quota (scenario 177); another, a preemptor
//!    started on its hold and taken by a higher tier that arrived at the same instant
//!    (scenario 114). Nothing counts a start taken back as a run, a preemption (rule 1's
//!    hourly count included) or a requeue. Where the set also stops runs of earlier
//!    cycles, the starts are taken back all the same and only those runs are stopped: a
//!    start taken back frees what stopping it would, and the preemptor holds its GPUs as
//!    free ones while it waits for the rest. The rest stands without the starts: a run below
//!    the preemptor (scenario 180), and a run reclaimed from a project that borrows as much
//!    with the starts taken back (scenario 181), or from the project of one of the starts
//!    where that project still borrows without them (scenario 182: its runs are a
//!    borrower's whatever the cycle started, and what the set counts back from it is the
//!    same). But a set that reclaims an older run from a project that borrows only with
//!    the starts is carried out whole (scenario 175): it was chosen because of them, and
//!    without them that run could not be reclaimed. So is a set with a start of a project
//!    that an earlier preemptor of the cycle reclaimed from (scenario 183): that reclaim
//!    may have found the project borrowing only with the start. The cycle then asks the
//!    ready preemptors again and walks the queue again (step 4h), as the taken-back jobs
//!    and any room they leave were passed by both (scenario 184).
//!
//! **Where the search is exact.** For a job of one replica (the usual preemptor, and one
//! that reclaims only for room on the nodes, its cohort lending enough), rules 2 to
//! 6 are applied exactly (rule 2b by trying the highest floor of share first: every set
//! found at a floor has exactly that least share, so rules 3 to 5 then decide as usual):
//! every node's best set is found by `search::best_set_on_node` (a dynamic program over the GPUs freed, or, when CPU or memory must be freed too, a branch
//! and bound of at most `search::BRANCH_STEPS_MAX` steps per node, past which it takes the
//! candidates in rule order and drops those not needed). A gang (several replicas, on any
//! usable nodes), a job over its account's quota (which must also win back what the cap
//! needs) and a job its cohort does not lend enough to (reclaiming or not) are searched
//! over the whole cluster by `search::best_wide_set`: the same rules,
//! with rule 4 counting the GPUs left free on all usable nodes, exact within
//! `Limits::wide_search_steps_max` steps of a branch and bound (2,000 by default). Tests
//! compare every search of the property test with a brute-force search over all sets.
//! **Approximation, past the step bound only** (large clusters with many candidates): of
//! two sets, the one that ranks first by rules 2 to 5 (either, if only one exists): the best
//! set the branch and bound found within its steps, and a fallback's. The fallback of a
//! gang clears whole nodes, cheapest first by rules 2 and 3 per replica gained; that of a
//! job over its quota, or short of its cohort, takes its candidates in rule order until it
//! fits within the cap (or the cohort) and on the nodes. Each set then drops the victims it
//! does not need, most costly first. Both keep rules 1, 2 and 6 and give a minimal set,
//! but not always the one that loses the least work. Neither alone is enough: the set in
//! rule order spreads a one-replica job's victims over the nodes and may find none within
//! the victim bound where the branch and bound found one.
//!
//! Every rule has its own scenario test in `tests/scenarios/` (reclaim: 91, 95, 97; rule 4
//! for a reclaim for room: 139, rule 6: 141).

use std::cmp::Reverse;
use std::collections::BTreeMap;

use crate::cluster::{Node, Nodes};
use crate::config::Config;
use crate::fairshare::FairShares;
use crate::ids::{JobIx, NodeIx};
use crate::jobs::JobStore;
use crate::ledger::Ledger;
use crate::model::JobState;
use crate::placement::{Candidate, choose_nodes};
use crate::scheduler::Scheduler;
use smallvec::SmallVec;

use crate::search::{
    Buffers, Exactness, NodeCandidate, SearchRecord, SearchRoom, SetCost, WideCandidate, WideSearch, WideSearchRecord,
    best_set_on_node_with, best_wide_set,
};
use crate::types::{AccountId, GpuModel, GpuSet, JobId, NodeId, Priority, Resources, Time};
use crate::victims::{LostClock, VictimEntry, VictimTallies};

/// The plan's victims as indices into `victims`, ascending (a wide search's candidates are
/// in the same order as its victims, so a plan maps back to them).
fn indices_of(victims: &[Victim], plan: &VictimPlan) -> Vec<usize> {
    let index_of = |id: JobId| victims.iter().position(|v| v.id == id).expect("a plan's victims are candidates");
    let mut set: Vec<usize> = plan.victims.iter().map(|&(id, _)| index_of(id)).collect();
    set.sort_unstable();
    set
}

/// Whose work a preemptor may take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PreemptionScope {
    /// Any lower-priority work (the job is within quota).
    Any,
    /// Only work charged to this account (the job is over that account's quota).
    Account(AccountId),
    /// Any lower-priority work, and with `reclaim` (the job's project stays within its
    /// nominal quota) work of its own priority of the other members of its cohort that
    /// borrow; the job must also come within what its cohort lends (rule 1).
    Cohort { reclaim: bool },
}

/// See `SearchView::fit_check`.
struct FitCheck {
    needs: Vec<QuotaNeed>,
    /// The usable nodes in id order: id and capacity.
    nodes: Vec<(NodeId, Resources)>,
    /// Each node's room as the search counts it (GPU by GPU where a GPU is shared or the job
    /// asks for a share), in the order of `nodes`.
    rooms: Vec<SearchRoom>,
}

/// What a preemptor's victims must give back to one account for the job to fit within its
/// cap: a project's or user's (its hard quota or borrowing limit) or its cohort's.
#[derive(Clone, Debug, PartialEq, Eq)]
struct QuotaNeed {
    account: AccountId,
    need: Resources,
    /// For a cohort: its members, each with the most its victims give back (what it uses
    /// beyond its guarantee, see `Ledger::member_givable`), by account.
    member_caps: Vec<(AccountId, Resources)>,
}

/// The victims and where the preemptor will run once they are gone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct VictimPlan {
    /// By id.
    pub victims: Vec<(JobId, JobIx)>,
    pub chosen: Vec<(NodeId, u32)>,
}

/// A running job considered as a victim.
#[derive(Clone, Debug)]
struct Victim {
    id: JobId,
    ix: JobIx,
    priority: Priority,
    lost_gpu_ms: u64,
    total: Resources,
    /// Resources it frees on each node the job could use, with its GPUs there (whole GPUs in
    /// `Resources`; a share's GPU only in the set).
    frees: Frees,
    /// The thousandths of its one GPU it takes as a share; 0 when it takes GPUs whole.
    share_milli: u32,
}

/// What a victim frees on each node, by node: most victims run on one node, and that case
/// is kept free of allocation.
type Frees = SmallVec<[(NodeId, Resources, GpuSet); 1]>;

impl Victim {
    /// Rules 2, 3 and 5: the order in which victims are taken.
    fn order_key(&self) -> (Priority, u64, Reverse<JobId>) {
        (self.priority, self.lost_gpu_ms, Reverse(self.id))
    }
}

/// A victim as the single-replica search sees it on one node.
#[derive(Clone, Copy, Debug)]
struct NodeVictim {
    id: JobId,
    ix: JobIx,
    priority: Priority,
    lost_gpu_ms: u64,
    /// What it frees on that node.
    freed: Resources,
    tenant_share: u64,
    slots: GpuSet,
    share_milli: u32,
}

/// What rules 2b and 3 can tell of a node's sets at the level where it makes room, before
/// they are weighed: the highest tenant share among its victims there (0 without fair
/// sharing), and the least work lost by a victim of that share there. A set whose least
/// share at the level is that share takes only victims of that share there, so it loses at
/// least that work (`best_set_at_level`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct LevelKey {
    share_max: u64,
    lost_min: u64,
}

impl LevelKey {
    /// The key with one more victim of the level, of `share`, weighed in: its lost work
    /// (`lost`) is read only where its share is not below the highest so far.
    fn with(key: Option<LevelKey>, share: u64, lost: impl FnOnce() -> u64) -> Option<LevelKey> {
        match key {
            Some(k) if share < k.share_max => Some(k),
            Some(k) if share == k.share_max => Some(LevelKey { share_max: share, lost_min: k.lost_min.min(lost()) }),
            _ => Some(LevelKey { share_max: share, lost_min: lost() }),
        }
    }

    /// Weighed first: the highest share, then the least lost work.
    fn order(self) -> (Reverse<u64>, u64) {
        (Reverse(self.share_max), self.lost_min)
    }

    /// Whether no set on a node of this key can rank before `best` (rules 2b, 3).
    fn cannot_beat(self, best: &SetCost) -> bool {
        self.share_max < best.top_share || (self.share_max == best.top_share && self.lost_min > best.lost_gpu_ms)
    }
}

/// The best set on one node so far, and the node.
struct NodeSet {
    cost: SetCost,
    node: NodeId,
}

/// Buffers the victim search reuses from one search to the next.
#[derive(Clone, Debug, Default)]
pub(crate) struct SearchScratch {
    /// (level at which the node first makes room, node position, its `LevelKey` there
    /// once weighed: by the walk that found the level, or by `best_set_at_level`).
    ready: Vec<(Priority, u32, Option<LevelKey>)>,
    /// Projects' shares as rule 2b reads them, for one search.
    shares: Vec<(AccountId, u64)>,
    /// A node's victims up to the level, in the order of rules 2, 3, 5.
    on_node: Vec<NodeVictim>,
    /// The node's victims as the node search takes them, and the best set so far.
    candidates: Vec<NodeCandidate>,
    best: Vec<NodeVictim>,
    node_search: Buffers,
    /// One-replica searches as they were, when asked for (`Scheduler::record_searches`).
    pub(crate) records: Option<Vec<SearchRecord>>,
    /// Searches over the whole cluster (gangs, jobs over quota), likewise.
    pub(crate) wide_records: Option<Vec<WideSearchRecord>>,
    /// Search as if no run were protected (rule 1): to tell a job that protection, not a
    /// lack of victims, keeps it waiting.
    pub(crate) protection_waived: bool,
}

/// Rule 6's candidate bound as it applies to one search.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CandidateCut {
    /// Every candidate may be examined.
    None,
    /// Candidates up to this one (in (priority, id) order) may be examined.
    At(Priority, JobId),
    /// None may.
    All,
}

impl CandidateCut {
    fn admits(self, entry: &VictimEntry) -> bool {
        match self {
            CandidateCut::None => true,
            CandidateCut::At(p, id) => entry.key() <= (p, id),
            CandidateCut::All => false,
        }
    }
}

/// A node's offer to a gang: (cost by rules 2 and 3, victims to take, replicas gained).
type NodeOffer<'a> = ((Priority, u64, NodeId), Vec<&'a Victim>, u32);

/// What the victim search reads of the scheduler's state, borrowed read-only: the search is
/// a pure function of this view, the preemptor and `now`. It returns a plan and changes
/// nothing; the cycle carries the plan out.
#[derive(Clone, Copy)]
pub(crate) struct SearchView<'a> {
    pub config: &'a Config,
    pub nodes: &'a Nodes,
    pub jobs: &'a JobStore,
    pub ledger: &'a Ledger,
    pub tallies: &'a VictimTallies,
    pub fair: &'a FairShares,
}

impl Scheduler {
    /// The view the victim search reads, and the buffers it reuses (borrowed beside the
    /// view, not moved out and back: the scratch is large).
    pub(crate) fn search_parts(&mut self) -> (SearchView<'_>, &mut SearchScratch) {
        let view = SearchView {
            config: &self.config,
            nodes: &self.nodes,
            jobs: &self.jobs,
            ledger: &self.ledger,
            tallies: &self.tallies,
            fair: &self.fair,
        };
        (view, &mut self.search_scratch)
    }
}

impl SearchView<'_> {
    /// The victims of `ix`, by the rules above; rule 1 is waived when the caller asks (to
    /// learn whether protection is all that stands in the way), and for a job whose class
    /// overrides it when no unprotected set makes room.
    pub(crate) fn find_victims(
        &self,
        ix: JobIx,
        scope: PreemptionScope,
        now: Time,
        scratch: &mut SearchScratch,
    ) -> Option<VictimPlan> {
        let plan = self.find_victims_by_rules(ix, scope, now, scratch);
        if plan.is_some() || scratch.protection_waived || !self.jobs[ix].spec.overrides_protection {
            return plan;
        }
        // The override is a last resort: protected runs are taken only when no set of
        // unprotected ones makes room.
        scratch.protection_waived = true;
        let plan = self.find_victims_by_rules(ix, scope, now, scratch);
        scratch.protection_waived = false;
        plan
    }

    fn find_victims_by_rules(
        &self,
        ix: JobIx,
        scope: PreemptionScope,
        now: Time,
        scratch: &mut SearchScratch,
    ) -> Option<VictimPlan> {
        let job = &self.jobs[ix];
        // Candidates are below the job, or at its priority too when it reclaims.
        let reclaim = matches!(scope, PreemptionScope::Cohort { reclaim: true });
        let enough_gpus = self.enough_gpus_below(ix, reclaim);
        match (scope, job.spec.replicas) {
            (PreemptionScope::Any, 1) => {
                return enough_gpus.then(|| self.best_single_node_set(ix, now, scratch)).flatten();
            }
            // Room alone: the set lies on one node, as for any job of one replica.
            (PreemptionScope::Cohort { reclaim: true }, 1) if self.cohort_need(ix).is_none() => {
                return enough_gpus.then(|| self.best_reclaim_set(ix, now, scratch)).flatten();
            }
            _ => {}
        }
        // Cheap necessary conditions end most searches that cannot succeed. While searches
        // are recorded (the property test), the search runs anyway and must agree.
        let room_possible = enough_gpus && self.gang_could_fit(ix, reclaim, now, scratch.protection_waived);
        if !room_possible && scratch.wide_records.is_none() {
            return None;
        }
        let plan = self.wide_set(ix, scope, now, scratch);
        assert!(room_possible || plan.is_none(), "a set was found where the necessary conditions ruled one out");
        plan
    }

    /// Rules 2 to 6 over the whole cluster, for a gang or a job that must give back quota.
    fn wide_set(
        &self,
        ix: JobIx,
        scope: PreemptionScope,
        now: Time,
        scratch: &mut SearchScratch,
    ) -> Option<VictimPlan> {
        let job = &self.jobs[ix];
        let reclaim = matches!(scope, PreemptionScope::Cohort { reclaim: true });
        // Nothing preemptible runs below it and it may not reclaim at its own priority: no
        // candidate (a tenant's lowest tier over its share asks this at every wake).
        if !reclaim && self.tallies.preemptible.range(..job.spec.priority).next().is_none() {
            return None;
        }
        let victims = self.victim_candidates(ix, scope, now, scratch.protection_waived);
        if victims.is_empty() {
            return None;
        }
        let search = self.wide_search(ix, scope, &victims, now);
        let (set, exactness) = best_wide_set(&search);
        let plan = match exactness {
            Exactness::Exact => set.as_ref().map(|set| {
                let taken: Vec<&Victim> = set.iter().map(|&i| &victims[i]).collect();
                let chosen = self.fits_without(ix, scope, &taken).expect("the set the search chose makes room");
                let mut ids: Vec<(JobId, JobIx)> = taken.iter().map(|v| (v.id, v.ix)).collect();
                ids.sort_unstable();
                VictimPlan { victims: ids, chosen }
            }),
            Exactness::StepsExhausted => self.past_the_step_bound(ix, scope, &search, &victims, set.as_deref()),
        };
        let waived = scratch.protection_waived;
        if let Some(records) = scratch.wide_records.as_mut().filter(|_| !waived) {
            let taken = plan.as_ref().map(|plan| indices_of(&victims, plan));
            let preemptor = self.jobs[ix].spec.id;
            records.push(WideSearchRecord { preemptor, search, chosen: set, exactness, taken });
        }
        plan
    }

    /// A wide search that ran out of steps: the better by the rules of the best set it had
    /// found (made minimal) and the fallback's (a gang clears whole nodes; a job bound by
    /// quota takes its candidates in rule order), either if only one makes room. Neither
    /// alone is enough: the fallback in rule order spreads a one-replica job's victims over
    /// many nodes and may find no set within the victim bound where the search found one,
    /// and the search's set is only the best of the part it walked.
    fn past_the_step_bound(
        &self,
        ix: JobIx,
        scope: PreemptionScope,
        search: &WideSearch,
        victims: &[Victim],
        found: Option<&[usize]>,
    ) -> Option<VictimPlan> {
        let max_victims = self.config.limits.victims_per_preemption_max as usize;
        let check = self.fit_check(ix, scope);
        let found =
            found.and_then(|set| self.minimise(ix, &check, set.iter().map(|&i| &victims[i]).collect(), max_victims));
        let fallback = match scope {
            PreemptionScope::Any => self.node_by_node_set(ix, &check, victims),
            PreemptionScope::Account(_) | PreemptionScope::Cohort { .. } => self.greedy_set(ix, &check, victims),
        };
        let rank = |plan: &VictimPlan| search.rank_of(&indices_of(victims, plan));
        match (found, fallback) {
            (Some(a), Some(b)) => Some(if rank(&b) < rank(&a) { b } else { a }),
            (a, b) => a.or(b),
        }
    }

    /// The search over the whole cluster for a gang or a job over its quota: every usable
    /// node with what it has free, and what each candidate frees there and gives back to
    /// each of the job's capped accounts.
    fn wide_search(&self, ix: JobIx, scope: PreemptionScope, victims: &[Victim], now: Time) -> WideSearch {
        let job = &self.jobs[ix];
        // Nodes are in id order, so the usable ones are too.
        let mut usable: Vec<&Node> = Vec::with_capacity(self.nodes.len());
        usable.extend(self.nodes.iter().filter(|n| n.usable_by(job.spec.gpu_model)));
        let position = |node: NodeId| usable.binary_search_by_key(&node, |n| n.spec.id).ok();
        let needs = self.quota_needs(ix, scope);
        let members = needs.iter().find(|n| !n.member_caps.is_empty()).map(|n| &n.member_caps);
        let group = |project: AccountId| members.and_then(|m| m.iter().position(|(a, _)| *a == project)).unwrap_or(0);
        // Victims of one project share its fair share: each project's is worked out once.
        let mut shares: Vec<(AccountId, u64)> = Vec::new();
        let candidates = victims
            .iter()
            .map(|v| (v, self.jobs[v.ix].spec.project))
            .map(|(v, project)| WideCandidate {
                id: v.id,
                priority: v.priority,
                lost_gpu_ms: v.lost_gpu_ms,
                tenant_share: self.share_cached(&mut shares, project, now),
                frees: v
                    .frees
                    .as_slice()
                    .iter()
                    .filter_map(|&(node, r, slots)| Some((position(node)?, r, slots)))
                    .collect(),
                share_milli: v.share_milli,
                quota_frees: needs
                    .iter()
                    .map(|n| if self.charged_to(v.ix, n.account) { v.total } else { Resources::ZERO })
                    .collect(),
                group: group(project),
            })
            .collect();
        WideSearch {
            available: usable.iter().map(|n| search_room(n, job.spec.per_replica)).collect(),
            per_replica: job.spec.per_replica,
            replicas: job.spec.replicas,
            quota_caps: needs.iter().map(|n| n.member_caps.iter().map(|(_, cap)| *cap).collect()).collect(),
            quota_needs: needs.into_iter().map(|n| n.need).collect(),
            candidates,
            victims_max: self.config.limits.victims_per_preemption_max as usize,
            steps_max: self.config.limits.wide_search_steps_max,
        }
    }

    /// Is the job at `vix` charged to `account` (its project, its user or its cohort)?
    fn charged_to(&self, vix: JobIx, account: AccountId) -> bool {
        let job = &self.jobs[vix];
        job.accounts().any(|a| a == account) || self.ledger.cohort_of(job.spec.project) == Some(account)
    }

    /// What the job's victims must give back for it to fit: for a job over a cap
    /// (`Account` scope), each capped account of the job (every one, not only the one in
    /// scope: a job over both its project's and its user's caps needs both fixed) and its
    /// cohort if it is short; for `Cohort` scope, its cohort if it is short.
    fn quota_needs(&self, ix: JobIx, scope: PreemptionScope) -> Vec<QuotaNeed> {
        let job = &self.jobs[ix];
        let total = job.spec.total();
        let mut needs: Vec<QuotaNeed> = Vec::new();
        if let PreemptionScope::Account(_) = scope {
            needs.extend(job.accounts().filter_map(|account| {
                let a = self.ledger.get(account)?;
                if !a.has_cap() {
                    return None;
                }
                let need = Resources::from_amounts(|k| {
                    a.cap(k).map_or(0, |limit| {
                        (k.amount(a.charged) + k.amount(total)).saturating_sub(k.amount_of_limit(limit))
                    })
                });
                Some(QuotaNeed { account, need, member_caps: Vec::new() })
            }));
        }
        if scope != PreemptionScope::Any {
            needs.extend(self.cohort_need(ix));
        }
        needs
    }

    /// What the job's cohort must get back for the job to start (rule 2 of `ledger.rs`), if
    /// it is short: what starting the job would take its level above its capacity (or what
    /// a lowered capacity grandfathered), and what each member can give back.
    fn cohort_need(&self, ix: JobIx) -> Option<QuotaNeed> {
        let job = &self.jobs[ix];
        let (project, total) = (job.spec.project, job.spec.total());
        let (cohort, need) =
            self.ledger.cohort_shortage(project, total).filter(|(_, need)| *need != Resources::ZERO)?;
        let members = &self.ledger.cohort(cohort).expect("a member's cohort").members;
        let member_caps = members.iter().map(|&m| (m, self.ledger.member_givable(m, project, total))).collect();
        Some(QuotaNeed { account: cohort, need, member_caps })
    }

    /// Every running preemptible job below `priority` (or at it too, with `inclusive`), by
    /// (priority, id): the lists of all nodes (schedulable or not) merged, a gang once.
    fn running_up_to(&self, priority: Priority, inclusive: bool) -> Vec<(Priority, JobId, JobIx)> {
        let mut all = self.entries_up_to_where(priority, inclusive, |_| true);
        all.sort_unstable();
        all.dedup();
        all
    }

    /// The entries of all nodes below `priority` (or at it too, with `inclusive`) that
    /// `keep` admits, in no order and a gang once per node: filtering the entries before
    /// anything sorts them leaves only those kept (a job over its cap keeps a quarter of
    /// them on Philly's VCs with hard caps).
    fn entries_up_to_where(
        &self,
        priority: Priority,
        inclusive: bool,
        mut keep: impl FnMut(&VictimEntry) -> bool,
    ) -> Vec<(Priority, JobId, JobIx)> {
        let below = |p: Priority| p < priority || (inclusive && p == priority);
        // Room for a few per node at once, so that most searches never grow it (grown entry
        // by entry from a filter, it would be reallocated several times a search).
        let mut all: Vec<(Priority, JobId, JobIx)> = Vec::with_capacity(4 * self.nodes.len());
        for node in self.nodes.iter() {
            let entries = node.victims.iter().take_while(|e| below(e.priority)).filter(|e| keep(e));
            all.extend(entries.map(|e| (e.priority, e.id, e.ix)));
        }
        all
    }

    /// May a job of `project` reclaim from a running job of `owner` (its project), of its
    /// own priority? Only from another member of its cohort that borrows now. The answer
    /// depends on the victim's project alone (victim entries carry it, so a caller walking
    /// them reads no job), and a search asks it of every equal-priority candidate: each
    /// project is looked up in the ledger once per search.
    fn reclaim_check(&self, project: AccountId) -> impl FnMut(AccountId) -> bool + '_ {
        let cohort = self.ledger.cohort_of(project).and_then(|id| Some((id, self.ledger.cohort(id)?)));
        // The answers so far, each in the slot its project's id picks (one comparison to find
        // it; a project whose slot another took is asked of the ledger again). The gang test
        // asks this of every entry of the job's priority on every node.
        let mut known = [None::<(AccountId, bool)>; 16];
        move |owner| {
            let Some((id, cohort)) = cohort else { return false };
            if owner == project {
                return false;
            }
            let slot = &mut known[owner.0 as usize % 16];
            if let Some((_, answer)) = slot.filter(|(a, _)| *a == owner) {
                return answer;
            }
            let answer = self.borrows_in(owner, id, cohort);
            *slot = Some((owner, answer));
            answer
        }
    }

    /// Is `owner` a member of the cohort `id` that borrows now? Kept out of line, so that
    /// `reclaim_check`'s look-up, the usual path, is small enough to inline where it is asked.
    #[inline(never)]
    fn borrows_in(&self, owner: AccountId, id: AccountId, cohort: &crate::ledger::Cohort) -> bool {
        self.ledger.borrows_in(owner, id, cohort)
    }

    /// Rule 1 and the candidate bound; sorted by rules 2, 3 and 5.
    fn victim_candidates(&self, ix: JobIx, scope: PreemptionScope, now: Time, waived: bool) -> Vec<Victim> {
        let job = &self.jobs[ix];
        let limit = self.config.limits.victim_candidates_max as usize;
        let reclaim = matches!(scope, PreemptionScope::Cohort { reclaim: true });
        let cohort = self.ledger.cohort_of(job.spec.project);
        let mut reclaimable = self.reclaim_check(job.spec.project);
        let account = match scope {
            PreemptionScope::Account(account) => Some(account),
            PreemptionScope::Any | PreemptionScope::Cohort { .. } => None,
        };
        // Rule 1 on each entry: its level (its own only where it may be reclaimed), its
        // protection, and in `Account` scope its accounts (`JobSpec::accounts`).
        let mut running = self.entries_up_to_where(job.spec.priority, reclaim, |e| {
            (e.priority < job.spec.priority || reclaimable(e.project))
                && (waived || e.protected_until <= now)
                && account.is_none_or(|a| e.project == a || e.user == a)
        });
        // Rule 6 examines the first candidates by (priority, id); where there are no more
        // than it examines, their order is the final sort's alone.
        if running.len() > limit {
            running.sort_unstable();
            running.dedup();
        }
        let mut out = Vec::with_capacity(running.len().min(limit));
        for (priority, vid, vix) in running {
            if out.len() >= limit {
                break;
            }
            let victim = &self.jobs[vix];
            let JobState::Running { started_at, .. } = victim.state else { unreachable!("victims run") };
            debug_assert!(
                waived || victim.protected_until(started_at) <= now,
                "an entry's protection is its job's for the run"
            );
            let frees = self.frees_of(job.spec.gpu_model, vix);
            // A victim on no node the job can use frees nothing for it, unless the job
            // needs the victim's quota rather than its GPUs.
            let gives_quota = match scope {
                PreemptionScope::Any => false,
                PreemptionScope::Account(_) => true,
                PreemptionScope::Cohort { .. } => cohort.is_some_and(|c| self.charged_to(vix, c)),
            };
            if frees.as_slice().is_empty() && !gives_quota {
                continue;
            }
            out.push(Victim {
                id: vid,
                ix: vix,
                priority,
                lost_gpu_ms: victim.lost_gpu_ms(now),
                total: victim.spec.total(),
                frees,
                share_milli: victim.spec.per_replica.gpu_milli,
            });
        }
        // Keys end in the job id, so they are unique but for a gang listed on several of
        // its nodes, whose copies end side by side: an unstable sort is still deterministic.
        out.sort_unstable_by_key(Victim::order_key);
        out.dedup_by_key(|v| v.id);
        out
    }

    /// Rule 2b's figure for a victim of `project`: its fair share now (0 without fair
    /// sharing), remembered per project for one search (`cache` is emptied by the search
    /// that owns it).
    fn share_cached(&self, cache: &mut Vec<(AccountId, u64)>, project: AccountId, now: Time) -> u64 {
        if !self.fair.enabled() {
            return 0;
        }
        if let Some(&(_, share)) = cache.iter().find(|(a, _)| *a == project) {
            return share;
        }
        let share = self.fair.share_bits(project, now);
        cache.push((project, share));
        share
    }

    /// What a running job frees on each node a job of `model` could use, by node id.
    /// Replicas are listed node by node, so merging neighbours is enough.
    fn frees_of(&self, model: Option<GpuModel>, vix: JobIx) -> Frees {
        let victim = &self.jobs[vix];
        let JobState::Running { placement, .. } = &victim.state else { unreachable!("victims run") };
        // A share frees no whole GPU by itself: the searches count its thousandths on its GPU
        // (`SearchRoom`), where the GPU is whole again once every share on it goes.
        let per_replica = victim.spec.per_replica.without_shares();
        let usable = |node_id: NodeId| self.nodes.by_id(node_id).usable_by(model);
        // One replica, the usual victim: no merging or sorting to do (a search over the
        // cluster asks this of every candidate).
        if let [only] = placement.replicas() {
            return match usable(only.node) {
                true => Frees::from_buf([(only.node, per_replica, only.gpus)]),
                false => Frees::new(),
            };
        }
        let mut frees = Frees::new();
        for replica in placement.replicas().iter().filter(|r| usable(r.node)) {
            match frees.iter_mut().find(|(n, _, _)| *n == replica.node) {
                Some((_, r, slots)) => {
                    *r = r.plus(per_replica);
                    *slots = slots.union(replica.gpus);
                }
                None => frees.push((replica.node, per_replica, replica.gpus)),
            }
        }
        frees.sort_by_key(|(n, _, _)| *n);
        frees
    }

    /// A necessary condition, cheap to check: lower-priority preemptible work runs (on any
    /// node; at the job's priority too with `inclusive`), and it plus free GPUs could cover
    /// the job's GPUs at all. Costs one step per priority level.
    ///
    /// Some such work must run: a search is for a job that does not fit, so every set has a
    /// victim. Without this, a job of the lowest tier on a cluster whose free GPUs, scattered
    /// over the nodes, would cover it walks every node's list to find nothing.
    fn enough_gpus_below(&self, ix: JobIx, inclusive: bool) -> bool {
        let job = &self.jobs[ix];
        let priority = job.spec.priority;
        let level = if inclusive { Some(priority) } else { priority.checked_sub(1) };
        let Some(level) = level.filter(|&l| self.tallies.preemptible.range(..=l).next().is_some()) else {
            return false;
        };
        let have = self.nodes.index.total_free(job.spec.gpu_model) + self.tallies.preemptible_gpus_at_or_below(level);
        have >= job.spec.total().gpus
    }

    /// Could the usable nodes hold all of the job's replicas with every run it may take
    /// (below its priority, and with `reclaims` those of its priority that it may reclaim)
    /// and that rule 1 does not protect gone, counting GPUs only? Every victim search for it
    /// needs that (see `Scheduler::no_node_holds`).
    pub(crate) fn room_possible(&self, ix: JobIx, reclaims: bool, now: Time) -> bool {
        self.gang_could_fit(ix, reclaims, now, false)
    }

    /// A necessary condition, cheap next to a search over the whole cluster: counting every
    /// preemptible job below it (with `inclusive`, at its priority too where it may reclaim)
    /// that rule 1 does not protect (unless `waived`) as gone, the usable nodes could hold
    /// all its replicas (GPUs only; a share also fits a GPU already shared with room for it).
    fn gang_could_fit(&self, ix: JobIx, inclusive: bool, now: Time, waived: bool) -> bool {
        let job = &self.jobs[ix];
        let (priority, model, gpus) =
            (job.spec.priority, job.spec.gpu_model, job.spec.per_replica.as_whole_gpus().gpus);
        let Some(replicas_max) = job.spec.replicas.checked_sub(1) else { return true };
        if gpus == 0 {
            return true;
        }
        let share = job.spec.per_replica.is_share().then_some(job.spec.per_replica.gpu_milli);
        let at_or_below = |p: Priority| p < priority || (inclusive && p == priority);
        let mut hosted = 0;
        let mut reclaimable = self.reclaim_check(job.spec.project);
        for node in self.nodes.iter().filter(|n| n.usable_by(model)) {
            if share.is_some_and(|milli| node.share_fit(milli).is_some()) {
                return true;
            }
            let up_to_level = || node.victims.iter().take_while(|e| at_or_below(e.priority));
            // Most nodes of a busy cluster cannot make room for one replica even with every
            // entry up to the level gone: a plain sum rules them out before rule 1's tests.
            if node.available_gpus() + up_to_level().map(VictimEntry::gpus_freed_at_most).sum::<u32>() < gpus {
                continue;
            }
            let below: u32 = up_to_level()
                .filter(|e| waived || e.protected_until <= now)
                .filter(|e| e.priority < priority || reclaimable(e.project))
                .map(VictimEntry::gpus_freed_at_most)
                .sum();
            hosted += (node.available_gpus() + below) / gpus;
            if hosted > replicas_max {
                return true;
            }
        }
        false
    }

    /// Rule 6's candidate bound for a one-replica preemptor: candidates are taken lowest
    /// priority first, then by id, across the cluster, counting those on a node the job can
    /// use, and the search looks at no more than `victim_candidates_max` of them. Cheap
    /// when the tally shows fewer candidates than that (the usual case); otherwise the
    /// cluster's candidates are listed in order to find the last one examined. Where the job
    /// reclaims, the runs of its own priority of `borrowers` are candidates too.
    fn candidate_cut(&self, ix: JobIx, borrowers: Option<&[AccountId]>) -> CandidateCut {
        let job = &self.jobs[ix];
        let priority = job.spec.priority;
        let limit = self.config.limits.victim_candidates_max;
        let at_level = match borrowers {
            Some(_) => self.tallies.preemptible.get(&priority).map_or(0, |t| u64::from(t.jobs)),
            None => 0,
        };
        if self.tallies.preemptible_jobs_below(priority) + at_level <= u64::from(limit) {
            return CandidateCut::None;
        }
        if limit == 0 {
            return CandidateCut::All;
        }
        let candidate = |p: Priority, vix: JobIx| {
            p < priority || borrowers.is_some_and(|b| b.contains(&self.jobs[vix].spec.project))
        };
        let mut counted = 0;
        for (p, id, vix) in self.running_up_to(priority, borrowers.is_some()) {
            if candidate(p, vix) && !self.frees_of(job.spec.gpu_model, vix).as_slice().is_empty() {
                counted += 1;
                if counted == limit {
                    return CandidateCut::At(p, id);
                }
            }
        }
        CandidateCut::None
    }

    /// One replica: for each node, the cheapest minimal set on that node; then the best node.
    ///
    /// Rule 2 puts first the node whose set has the lowest highest priority, and a node's
    /// minimal set reaches exactly up to the priority level at which the node's victims
    /// first make room. So each usable node's list is walked once, lowest priority first,
    /// adding up what it would free until it makes room; the nodes that make room at the
    /// lowest level have their minimal sets built and ranked by rules 3–5. If every one of
    /// them breaks the victim bound, each is weighed again at its next level, with the nodes
    /// that first make room there, and so on.
    fn best_single_node_set(&self, ix: JobIx, now: Time, scratch: &mut SearchScratch) -> Option<VictimPlan> {
        let priority = self.jobs[ix].spec.priority;
        let waived = scratch.protection_waived;
        // The tests copy what they read: they run on every entry a search walks.
        let counts = move |e: &VictimEntry| waived || e.protected_until <= now;
        // Without a cut (the usual case) the test of each entry is one comparison.
        match self.candidate_cut(ix, None) {
            CandidateCut::All => None,
            CandidateCut::None => self.single_node_search_of(ix, move |e| e.priority < priority, counts, now, scratch),
            cut => {
                let examined = move |e: &VictimEntry| e.priority < priority && cut.admits(e);
                self.single_node_search_of(ix, examined, counts, now, scratch)
            }
        }
    }

    /// `best_single_node_set` for a job of one replica that reclaims with no need of its
    /// cohort's (room on the nodes only): its own priority's runs are candidates too, but
    /// only those of the cohort's members that borrow now (rule 1). Its set lies on one
    /// node like any one-replica job's, and rule 4 counts on that node.
    fn best_reclaim_set(&self, ix: JobIx, now: Time, scratch: &mut SearchScratch) -> Option<VictimPlan> {
        let priority = self.jobs[ix].spec.priority;
        let waived = scratch.protection_waived;
        let borrowers = &self.borrowers_beside(self.jobs[ix].spec.project);
        let counts = move |e: &VictimEntry| {
            (waived || e.protected_until <= now) && (e.priority < priority || borrowers.contains(&e.project))
        };
        match self.candidate_cut(ix, Some(borrowers)) {
            CandidateCut::All => None,
            cut => {
                let examined = move |e: &VictimEntry| e.priority <= priority && cut.admits(e);
                self.single_node_search_of(ix, examined, counts, now, scratch)
            }
        }
    }

    /// The other members of `project`'s cohort that borrow now (whose runs of its priority it
    /// may reclaim).
    fn borrowers_beside(&self, project: AccountId) -> Vec<AccountId> {
        self.ledger.cohort_of(project).map(|c| self.ledger.borrowers(c, project).collect()).unwrap_or_default()
    }

    /// The search as an outside check needs it: every usable node with what it has free and
    /// the candidates it examined that count, and what was chosen.
    fn search_record(
        &self,
        ix: JobIx,
        examined: impl Fn(&VictimEntry) -> bool,
        counts: impl Fn(&VictimEntry) -> bool,
        now: Time,
        plan: &Option<VictimPlan>,
    ) -> SearchRecord {
        let job = &self.jobs[ix];
        let nodes = self
            .nodes
            .iter()
            .filter(|n| n.usable_by(job.spec.gpu_model))
            .map(|n| {
                let candidates = n
                    .victims
                    .iter()
                    .take_while(|e| examined(e))
                    .filter(|e| counts(e))
                    .map(|e| NodeCandidate {
                        id: e.id,
                        priority: e.priority,
                        lost_gpu_ms: e.lost_gpu_ms(now),
                        freed: e.freed,
                        tenant_share: self.fair.share_bits(e.project, now),
                        slots: e.slots,
                        share_milli: e.share_milli,
                    })
                    .collect();
                (n.spec.id, search_room(n, job.spec.per_replica), candidates)
            })
            .collect();
        let chosen = plan.as_ref().map(|p| (p.chosen[0].0, p.victims.iter().map(|(id, _)| *id).collect()));
        SearchRecord {
            preemptor: job.spec.id,
            demand: job.spec.per_replica,
            victims_max: self.config.limits.victims_per_preemption_max as usize,
            nodes,
            chosen,
        }
    }

    /// The search over the candidates `examined` admits (a prefix of each node's list) that
    /// `count` (see `room_level`), recorded where searches are.
    fn single_node_search_of(
        &self,
        ix: JobIx,
        examined: impl Fn(&VictimEntry) -> bool + Copy,
        counts: impl Fn(&VictimEntry) -> bool + Copy,
        now: Time,
        scratch: &mut SearchScratch,
    ) -> Option<VictimPlan> {
        let plan = self.single_node_search_in(ix, (examined, counts), now, scratch);
        if let Some(records) = scratch.records.as_mut().filter(|_| !scratch.protection_waived) {
            records.push(self.search_record(ix, examined, counts, now, &plan));
        }
        plan
    }

    /// The search itself (`single_node_search_of` records it where searches are recorded).
    fn single_node_search_in(
        &self,
        ix: JobIx,
        (examined, counts): (impl Fn(&VictimEntry) -> bool + Copy, impl Fn(&VictimEntry) -> bool + Copy),
        now: Time,
        scratch: &mut SearchScratch,
    ) -> Option<VictimPlan> {
        let job = &self.jobs[ix];
        let (demand, model) = (job.spec.per_replica, job.spec.gpu_model);
        scratch.shares.clear();
        let mut clock = LostClock::new(now);
        // Without fair sharing every share is 0: the walk is built without reading them.
        let mut first = if self.fair.enabled() {
            let mut shares = std::mem::take(&mut scratch.shares);
            let share_of = |e: &VictimEntry| self.share_cached(&mut shares, e.project, now);
            let first =
                self.find_room_levels(&mut scratch.ready, (demand, model), (examined, counts), share_of, &mut clock);
            scratch.shares = shares;
            first
        } else {
            self.find_room_levels(&mut scratch.ready, (demand, model), (examined, counts), |_| 0, &mut clock)
        };
        // The lowest level first. If every node there broke the victim bound, each of them
        // is weighed again at its next level (a set that tops out higher may have fewer
        // victims), with the nodes that first make room there.
        loop {
            let (level, first_position) = match first.take() {
                Some((level, position)) => (level, Some(position)),
                None => (scratch.ready.iter().map(|(l, _, _)| *l).min()?, None),
            };
            let mut ready = std::mem::take(&mut scratch.ready);
            let at = (level, first_position);
            let plan = self.best_set_at_level(&mut ready, at, demand, examined, counts, &mut clock, scratch);
            scratch.ready = ready;
            if plan.is_some() {
                return plan;
            }
            let nodes = &self.nodes;
            scratch.ready.retain_mut(|(l, position, key)| {
                if *l != level {
                    return true;
                }
                match next_level(nodes.at(NodeIx(*position)), level, examined, counts) {
                    Some(next) => {
                        *l = next;
                        *key = None;
                        true
                    }
                    None => false,
                }
            });
        }
    }

    /// Every usable node's level where it first makes room, with its key there, into
    /// `ready` (emptied first); and the lowest level with the node of the first key there
    /// (the lowest position among equals). Keys are known for the lowest level only: the
    /// levels after it are weighed afresh.
    // Inlined into its two callers (with shares read, and all 0): out of line or left to
    // the compiler, the replays with cohorts took 0.4% more instructions (callgrind).
    #[inline(always)]
    fn find_room_levels(
        &self,
        ready: &mut Vec<(Priority, u32, Option<LevelKey>)>,
        (demand, model): (Resources, Option<GpuModel>),
        (examined, counts): (impl Fn(&VictimEntry) -> bool + Copy, impl Fn(&VictimEntry) -> bool + Copy),
        mut share_of: impl FnMut(&VictimEntry) -> u64,
        clock: &mut LostClock,
    ) -> Option<(Priority, u32)> {
        ready.clear();
        let mut first: Option<(Priority, (Reverse<u64>, u64), u32)> = None;
        for (i, node) in self.nodes.iter().enumerate() {
            if node.usable_by(model)
                && let Some((level, key)) = room_level(node, demand, (examined, counts), &mut share_of, clock)
            {
                ready.push((level, i as u32, Some(key)));
                let order = (level, key.order(), i as u32);
                if first.is_none_or(|f| order < f) {
                    first = Some(order);
                }
            }
        }
        first.map(|(level, _, position)| (level, position))
    }

    /// Among the nodes of `ready` that first make room at `level`, the best minimal set
    /// within the victim bound, by rules 2b–5.
    ///
    /// Rule 2 is settled here (every set tops out at `level`). Each node's `LevelKey` bounds
    /// what its sets can be: their least tenant share at the level is at most its highest
    /// (rule 2b), and with that share they lose at least the least a victim of that share
    /// loses there (rule 3). The node with the first key is weighed first; then every other
    /// node whose key could beat the best set found so far (no set elsewhere can win).
    /// Ties are broken exactly as if every node were weighed in id order: the best is the
    /// least by (cost, node id), whatever the order of weighing.
    ///
    /// `first` is that node when the walk that found the levels already knows it, with
    /// every key (the usual case); otherwise the keys at `level` are weighed here.
    #[allow(clippy::too_many_arguments)]
    fn best_set_at_level(
        &self,
        ready: &mut [(Priority, u32, Option<LevelKey>)],
        (level, first): (Priority, Option<u32>),
        demand: Resources,
        examined: impl Fn(&VictimEntry) -> bool + Copy,
        counts: impl Fn(&VictimEntry) -> bool + Copy,
        clock: &mut LostClock,
        scratch: &mut SearchScratch,
    ) -> Option<VictimPlan> {
        let now = clock.now();
        let first = match first {
            Some(position) => position,
            None => {
                let shares = &mut scratch.shares;
                let mut share_of = |e: &VictimEntry| self.share_cached(shares, e.project, now);
                for (_, position, key) in ready.iter_mut().filter(|(l, _, key)| *l == level && key.is_none()) {
                    let at_level = counted_at_level(self.nodes.at(NodeIx(*position)), level, &examined, &counts);
                    *key = Some(level_key(at_level, &mut share_of, clock));
                }
                let at_level = ready.iter().filter(|(l, _, _)| *l == level);
                let keyed = at_level
                    .map(|(_, position, key)| (key.expect("every key at the level is weighed").order(), *position));
                keyed.min().expect("a level of a ready node").1
            }
        };
        let mut best: Option<NodeSet> = None;
        self.weigh_node(first, level, demand, (examined, counts), clock, scratch, &mut best);
        for &(l, position, key) in ready.iter() {
            if l != level || position == first {
                continue;
            }
            let key = key.expect("every key at the level is weighed");
            if best.as_ref().is_some_and(|b| key.cannot_beat(&b.cost)) {
                continue;
            }
            self.weigh_node(position, level, demand, (examined, counts), clock, scratch, &mut best);
        }
        self.plan_of(best, scratch)
    }

    /// Weighs the best minimal set on the node at `position` (its victims up to `level`)
    /// against `best`, and keeps it (in `scratch.best`) if it ranks first: rules 2 to 5 (the
    /// cost), then the lowest node id.
    #[allow(clippy::too_many_arguments)]
    fn weigh_node(
        &self,
        position: u32,
        level: Priority,
        demand: Resources,
        (examined, counts): (impl Fn(&VictimEntry) -> bool, impl Fn(&VictimEntry) -> bool),
        clock: &mut LostClock,
        scratch: &mut SearchScratch,
        best: &mut Option<NodeSet>,
    ) {
        let now = clock.now();
        let max_victims = self.config.limits.victims_per_preemption_max as usize;
        let node = self.nodes.at(NodeIx(position));
        scratch.on_node.clear();
        let eligible = node.victims.iter().take_while(|e| e.priority <= level && examined(e));
        let shares = &mut scratch.shares;
        scratch.on_node.extend(eligible.filter(|e| counts(e)).map(|e| NodeVictim {
            id: e.id,
            ix: e.ix,
            priority: e.priority,
            lost_gpu_ms: e.lost_gpu_ms_by(clock),
            freed: e.freed,
            tenant_share: self.share_cached(shares, e.project, now),
            slots: e.slots,
            share_milli: e.share_milli,
        }));
        scratch.candidates.clear();
        scratch.candidates.extend(scratch.on_node.iter().map(|v| NodeCandidate {
            id: v.id,
            priority: v.priority,
            lost_gpu_ms: v.lost_gpu_ms,
            freed: v.freed,
            tenant_share: v.tenant_share,
            slots: v.slots,
            share_milli: v.share_milli,
        }));
        let Some(set) = best_set_on_node_with(
            &mut scratch.node_search,
            &search_room(node, demand),
            demand,
            &scratch.candidates,
            max_victims,
        ) else {
            return;
        };
        let better =
            best.as_ref().is_none_or(|b| set.cost.cmp(&b.cost).then_with(|| node.spec.id.cmp(&b.node)).is_lt());
        if better {
            scratch.best.clear();
            scratch.best.extend(set.victims.iter().map(|&i| scratch.on_node[i]));
            *best = Some(NodeSet { cost: set.cost, node: node.spec.id });
        }
    }

    /// The plan of the best set weighed (in `scratch.best`).
    fn plan_of(&self, best: Option<NodeSet>, scratch: &SearchScratch) -> Option<VictimPlan> {
        let best = best?;
        let mut victims: Vec<(JobId, JobIx)> = scratch.best.iter().map(|v| (v.id, v.ix)).collect();
        victims.sort_unstable();
        Some(VictimPlan { victims, chosen: vec![(best.node, 1)] })
    }

    /// A gang: clear whole nodes, cheapest nodes first, so the gang lands on few nodes and
    /// takes few victims; then drop every victim that is not needed (most costly first).
    fn node_by_node_set(&self, ix: JobIx, check: &FitCheck, victims: &[Victim]) -> Option<VictimPlan> {
        let job = &self.jobs[ix];
        let per_replica = job.spec.per_replica.as_whole_gpus();
        let max_victims = self.config.limits.victims_per_preemption_max as usize;
        let mut by_node: BTreeMap<NodeId, Vec<&Victim>> = BTreeMap::new();
        for v in victims {
            for &(node, _, _) in v.frees.as_slice() {
                by_node.entry(node).or_default().push(v);
            }
        }
        // Per node: the victims (in order) needed to host as many replicas as it can, and
        // how many replicas that adds. Cost: rules 2 and 3 over that prefix.
        let mut offers: Vec<NodeOffer> = Vec::new();
        let mut hosted_free = 0u32;
        for node in self.nodes.iter() {
            if !node.usable_by(job.spec.gpu_model) {
                continue;
            }
            let fits = |room: Resources| {
                Candidate { node: node.spec.id, available: room, capacity: node.spec.capacity }
                    .replicas_fitting(per_replica)
            };
            let mut room = node.available();
            let before = fits(room);
            hosted_free += before;
            let Some(on_node) = by_node.get(&node.spec.id) else { continue };
            let mut prefix = Vec::new();
            let mut best = (before, 0usize);
            for v in on_node {
                // Counted whole: a share frees no GPU here (only `minimise`'s check counts it).
                let freed = v
                    .frees
                    .as_slice()
                    .iter()
                    .find(|(n, _, _)| *n == node.spec.id)
                    .map(|(_, r, _)| *r)
                    .unwrap_or_default();
                room = room.plus(freed);
                prefix.push(*v);
                let k = fits(room);
                if k > best.0 {
                    best = (k, prefix.len());
                }
            }
            prefix.truncate(best.1);
            if best.0 > before {
                let cost = (
                    prefix.iter().map(|v| v.priority).max().unwrap_or(Priority::MIN),
                    prefix.iter().map(|v| v.lost_gpu_ms).sum::<u64>() / u64::from(best.0 - before),
                    node.spec.id,
                );
                offers.push((cost, prefix, best.0 - before));
            }
        }
        offers.sort_unstable_by_key(|a| a.0);
        let mut taken: Vec<&Victim> = Vec::new();
        let mut hosted = hosted_free;
        for (_, prefix, gained) in &offers {
            if hosted >= job.spec.replicas {
                break;
            }
            for v in prefix {
                if !taken.iter().any(|t| t.id == v.id) {
                    taken.push(v);
                }
            }
            hosted += gained;
        }
        if hosted < job.spec.replicas || taken.len() > max_victims.saturating_mul(2) {
            return None;
        }
        self.minimise(ix, check, taken, max_victims)
    }

    /// Drop every victim the job does not need, most costly first; `None` if what is left
    /// does not fit or exceeds the victim bound. `check` is the job's `fit_check`.
    fn minimise(&self, ix: JobIx, check: &FitCheck, mut taken: Vec<&Victim>, max_victims: usize) -> Option<VictimPlan> {
        self.fits_with(ix, check, &taken)?;
        taken.sort_unstable_by_key(|v| v.order_key());
        let mut i = taken.len();
        while i > 0 {
            i -= 1;
            let mut fewer = taken.clone();
            fewer.remove(i);
            if self.fits_with(ix, check, &fewer).is_some() {
                taken = fewer;
            }
        }
        if taken.len() > max_victims {
            return None;
        }
        let chosen = self.fits_with(ix, check, &taken).expect("minimal set still fits");
        let mut ids: Vec<(JobId, JobIx)> = taken.iter().map(|v| (v.id, v.ix)).collect();
        ids.sort_unstable();
        Some(VictimPlan { victims: ids, chosen })
    }

    /// Quota-bound preemptors: take the account's victims in order until the job fits within
    /// its cap and on the nodes, then drop every victim that is not needed.
    fn greedy_set(&self, ix: JobIx, check: &FitCheck, victims: &[Victim]) -> Option<VictimPlan> {
        let max_victims = self.config.limits.victims_per_preemption_max as usize;
        // The bound applies to the final, minimal set (rule 6); while collecting, allow twice
        // as many so that victims that free nothing useful do not end the search early.
        let longest = victims.len().min(max_victims.saturating_mul(2));
        let prefix = |len: usize| victims[..len].iter().collect::<Vec<&Victim>>();
        let fits = |len: usize| self.fits_with(ix, check, &prefix(len)).is_some();
        if longest == 0 || !fits(longest) {
            return None;
        }
        // The shortest prefix that fits, found by halving: a longer prefix frees as much
        // room and gives back as much quota or more, so fitting never stops once it starts.
        let (mut short, mut long) = (0, longest);
        while long - short > 1 {
            let mid = short + (long - short) / 2;
            if fits(mid) {
                long = mid;
            } else {
                short = mid;
            }
        }
        self.minimise(ix, check, prefix(long), max_victims)
    }

    /// Where the job would go if `gone` had left, respecting quota (and its cohort) for a
    /// bound preemptor.
    fn fits_without(&self, ix: JobIx, scope: PreemptionScope, gone: &[&Victim]) -> Option<Vec<(NodeId, u32)>> {
        self.fits_with(ix, &self.fit_check(ix, scope), gone)
    }

    /// What `fits_with` reads of the scheduler for the job at `ix`, for asking it of many
    /// sets in turn: its quota needs and the usable nodes as they are, in id order.
    fn fit_check(&self, ix: JobIx, scope: PreemptionScope) -> FitCheck {
        let spec = &self.jobs[ix].spec;
        // Sized for every node: a filtered list would grow by doubling, one copy per step.
        let (mut nodes, mut rooms) = (Vec::with_capacity(self.nodes.len()), Vec::with_capacity(self.nodes.len()));
        for n in self.nodes.iter().filter(|n| n.usable_by(spec.gpu_model)) {
            nodes.push((n.spec.id, n.spec.capacity));
            rooms.push(search_room(n, spec.per_replica));
        }
        FitCheck { needs: self.quota_needs(ix, scope), nodes, rooms }
    }

    /// `fits_without`, with what it reads of the scheduler read once (`fit_check`).
    fn fits_with(&self, ix: JobIx, check: &FitCheck, gone: &[&Victim]) -> Option<Vec<(NodeId, u32)>> {
        let job = &self.jobs[ix];
        for need in &check.needs {
            let of = |v: &&&Victim| self.charged_to(v.ix, need.account);
            let freed = if need.member_caps.is_empty() {
                gone.iter().filter(of).fold(Resources::ZERO, |acc, v| acc.plus(v.total))
            } else {
                need.member_caps.iter().fold(Resources::ZERO, |acc, &(member, cap)| {
                    let taken = gone
                        .iter()
                        .filter(|v| self.jobs[v.ix].spec.project == member)
                        .fold(Resources::ZERO, |t, v| t.plus(v.total));
                    acc.plus(taken.min_by_amount(cap))
                })
            };
            if !need.need.within_by_amount(freed) {
                return None;
            }
        }
        let mut rooms = check.rooms.clone();
        for v in gone {
            for &(node, r, slots) in v.frees.as_slice() {
                if let Ok(at) = check.nodes.binary_search_by_key(&node, |&(id, _)| id) {
                    rooms[at].add_freed(r, slots, v.share_milli);
                }
            }
        }
        // Each node as the search counts it: its whole GPUs, or for a share one GPU when the
        // share fits on one of them.
        let per_replica = job.spec.per_replica;
        let candidates: Vec<Candidate> = check
            .nodes
            .iter()
            .zip(&rooms)
            .map(|(&(node, capacity), room)| {
                let gpus = if per_replica.is_share() { u32::from(room.fits(per_replica)) } else { room.whole_gpus() };
                Candidate { node, available: Resources { gpus, ..room.free }, capacity }
            })
            .collect();
        choose_nodes(&candidates, per_replica.as_whole_gpus(), job.spec.replicas, self.config.policy.scoring)
    }
}

/// What a node has free as the one-node search counts it for `demand`: GPU by GPU when a
/// GPU is shared there or `demand` is a share (see `SearchRoom`), else whole.
fn search_room(node: &Node, demand: Resources) -> SearchRoom {
    let free = node.available();
    if counts_whole(node, demand) {
        return SearchRoom::whole(free);
    }
    SearchRoom { free, slot_free: node.slot_free(), held: node.held }
}

/// Does the search count `node`'s room for `demand` in whole GPUs (no GPU of it shared, and
/// `demand` asks for whole ones)? Else GPU by GPU (see `SearchRoom`).
fn counts_whole(node: &Node, demand: Resources) -> bool {
    node.shared.is_empty() && !demand.is_share()
}

/// The next priority level above `after` among a node's examined candidates that has a
/// candidate that `counts`.
fn next_level(
    node: &Node,
    after: Priority,
    examined: impl Fn(&VictimEntry) -> bool,
    counts: impl Fn(&VictimEntry) -> bool,
) -> Option<Priority> {
    node.victims.iter().take_while(|e| examined(e)).find(|e| e.priority > after && counts(e)).map(|e| e.priority)
}

/// A node's examined candidates at `level` that `counts`.
fn counted_at_level<'a>(
    node: &'a Node,
    level: Priority,
    examined: &'a impl Fn(&VictimEntry) -> bool,
    counts: &'a impl Fn(&VictimEntry) -> bool,
) -> impl Iterator<Item = &'a VictimEntry> + 'a {
    let examined_here = node.victims.iter().take_while(move |e| examined(e));
    examined_here.filter(move |e| e.priority == level && counts(e))
}

/// The priority level at which a node first has room for `demand`, taking the examined
/// candidates of its list (lowest priority first) level by level, those that do not
/// `count` (protected at `now`, or not a borrower's where the job reclaims) freeing
/// nothing; `None` if they never make room. With it, the least work lost by a candidate of
/// that level that counts (the node's bound in `best_set_at_level`). A node's list is in
/// (priority, id) order and `examined` holds for a prefix of it.
fn room_level(
    node: &Node,
    demand: Resources,
    (examined, counts): (impl Fn(&VictimEntry) -> bool, impl Fn(&VictimEntry) -> bool + Copy),
    share_of: &mut impl FnMut(&VictimEntry) -> u64,
    clock: &mut LostClock,
) -> Option<(Priority, LevelKey)> {
    if counts_whole(node, demand) {
        return room_level_whole(node, demand, (examined, counts), share_of, clock);
    }
    let mut room = search_room(node, demand);
    let entries = &node.victims;
    let mut level_start = 0;
    for (i, e) in entries.iter().enumerate() {
        if !examined(e) {
            break;
        }
        if counts(e) {
            room.add_freed(e.freed, e.slots, e.share_milli);
        }
        let level_ends = entries.get(i + 1).is_none_or(|next| next.priority != e.priority || !examined(next));
        if level_ends {
            // The lost work is weighed only at the level that makes room: most nodes a
            // search walks make room at their first level or never.
            if room.fits(demand) {
                let counted = entries[level_start..=i].iter().filter(|e| counts(e));
                return Some((e.priority, level_key(counted, share_of, clock)));
            }
            level_start = i + 1;
        }
    }
    None
}

/// `room_level` where the room counts whole GPUs (`counts_whole`), the common case: the
/// same walk, level by level, over plain sums.
fn room_level_whole(
    node: &Node,
    demand: Resources,
    (examined, counts): (impl Fn(&VictimEntry) -> bool, impl Fn(&VictimEntry) -> bool),
    share_of: &mut impl FnMut(&VictimEntry) -> u64,
    clock: &mut LostClock,
) -> Option<(Priority, LevelKey)> {
    let free = node.available();
    let (mut gpus, mut cpu_millis, mut memory_mib) = (free.gpus, free.cpu_millis, free.memory_mib);
    let entries = node.victims.as_slice();
    let mut i = 0;
    while let Some(first) = entries.get(i).filter(|e| examined(e)) {
        let level = first.priority;
        // The key is weighed in the same walk: most nodes make room at their first level,
        // and a second walk of it cost more than the lost work weighed at levels that don't.
        let mut key = None;
        while let Some(e) = entries.get(i).filter(|e| e.priority == level && examined(e)) {
            if counts(e) {
                gpus += e.freed.gpus;
                cpu_millis += e.freed.cpu_millis;
                memory_mib += e.freed.memory_mib;
                key = LevelKey::with(key, share_of(e), || e.lost_gpu_ms_by(clock));
            }
            i += 1;
        }
        if demand.gpus <= gpus && demand.cpu_millis <= cpu_millis && demand.memory_mib <= memory_mib {
            return Some((level, key.expect("a node that makes room at a level has a victim there")));
        }
    }
    None
}

/// The `LevelKey` of a node's candidates that count at the level where it makes room.
fn level_key<'a>(
    counted: impl Iterator<Item = &'a VictimEntry>,
    share_of: &mut impl FnMut(&VictimEntry) -> u64,
    clock: &mut LostClock,
) -> LevelKey {
    let key = counted.fold(None, |key, e| LevelKey::with(key, share_of(e), || e.lost_gpu_ms_by(clock)));
    key.expect("a node that makes room at a level has a victim there")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::search::{NodeCandidate, SearchRoom, SetCost};

    /// `LevelKey`'s promise, checked against every set: on a node whose victims first make
    /// room at a level, every set that makes room has a least share at that level no higher
    /// than the key's share, and one whose least share is the key's loses at least the
    /// key's lost work. `best_set_at_level` skips nodes on it.
    #[test]
    fn a_level_key_bounds_every_set_on_its_node() {
        let mut rng = crate::test_rng::TestRng::new(11);
        let mut next = |below: u64| rng.below(below);
        let mut sets_checked = 0;
        for case in 0..400 {
            let count = 1 + next(7) as usize;
            let mut candidates: Vec<NodeCandidate> = (0..count)
                .map(|i| NodeCandidate {
                    id: JobId(i as u64),
                    priority: next(3) as Priority,
                    lost_gpu_ms: next(100),
                    freed: Resources::gpus(1 + next(3) as u32),
                    tenant_share: next(4),
                    slots: GpuSet::default(),
                    share_milli: 0,
                })
                .collect();
            candidates.sort_by_key(|c| (c.priority, c.id));
            let room = SearchRoom::whole(Resources::gpus(next(2) as u32));
            let demand = Resources::gpus(1 + next(6) as u32);
            // The level at which the node first makes room: all victims up to it taken.
            let fits_up_to = |level: Priority| {
                let mut after = room.clone();
                candidates
                    .iter()
                    .filter(|c| c.priority <= level)
                    .for_each(|c| after.add_freed(c.freed, c.slots, c.share_milli));
                after.fits(demand)
            };
            let Some(level) = candidates.iter().map(|c| c.priority).find(|&p| fits_up_to(p)) else { continue };
            if room.fits(demand) {
                continue;
            }
            let at_level = candidates.iter().filter(|c| c.priority == level);
            let key = at_level
                .fold(None, |key, c| LevelKey::with(key, c.tenant_share, || c.lost_gpu_ms))
                .expect("a victim at the level");
            let up_to_level: Vec<&NodeCandidate> = candidates.iter().filter(|c| c.priority <= level).collect();
            for mask in 1u32..(1 << up_to_level.len()) {
                let set: Vec<NodeCandidate> =
                    (0..up_to_level.len()).filter(|i| mask & (1 << i) != 0).map(|i| *up_to_level[i]).collect();
                let mut after = room.clone();
                set.iter().for_each(|c| after.add_freed(c.freed, c.slots, c.share_milli));
                if !after.fits(demand) {
                    continue;
                }
                let cost = SetCost::of(&set, &room, demand);
                sets_checked += 1;
                assert_eq!(cost.top_priority, level, "case {case}: a set that makes room reaches the level");
                assert!(cost.top_share <= key.share_max, "case {case}: {cost:?} above {key:?}");
                if cost.top_share == key.share_max {
                    assert!(cost.lost_gpu_ms >= key.lost_min, "case {case}: {cost:?} loses less than {key:?}");
                }
                // What the search skips on: a node of this key cannot beat a set it bounds.
                let better = SetCost { top_share: cost.top_share, lost_gpu_ms: cost.lost_gpu_ms + 1, ..cost.clone() };
                assert!(!key.cannot_beat(&better), "case {case}: {key:?} would skip a node whose set {cost:?} wins");
                if cost.top_share > 0 {
                    let lower = SetCost { top_share: cost.top_share - 1, lost_gpu_ms: 0, ..cost.clone() };
                    assert!(!key.cannot_beat(&lower), "case {case}: {key:?} would skip a node whose set {cost:?} wins");
                }
            }
        }
        assert!(sets_checked > 1000, "the cases reach enough sets: {sets_checked}");
    }
}
