//! The quota ledger: per account, its cap, what is charged to it, what a lowered cap
//! grandfathered, and, while it has a cap, its running preemptible GPUs by priority. It owns
//! the invariant "usage within quota": every charge and uncharge goes through it, a charge
//! moved between two jobs keeps what was grandfathered (`grandfathered_of` /
//! `keep_grandfathered`), what a preemptor's hold charges is computed here (`hold_charges`),
//! and `check` compares the ledger with what the jobs add up to.
//!
//! The ledger knows accounts, not jobs: callers name the accounts a job is charged to
//! (`JobSpec::accounts`, and the cohort of the job's project, see `Ledger::cohort_of`) and
//! the resources. It imports only `types`.
//!
//! # Cohorts: nominal quota, borrowing and lending
//!
//! A project may have a place in a cohort ([`NominalQuota`]). Per dimension the cohort
//! governs (one any member names), with `n` a member's nominal quota, `g` the part of it it
//! does not lend (its guarantee: nominal less lending limit) and `u` what is charged to it:
//!
//! 1. **Borrowing limit.** A member's usage stays within `n + borrowing_limit`, a cap like a
//!    hard quota (and like one, a job over it may preempt only its project's own
//!    lower-priority work).
//! 2. **The cohort lends only what its members lend.** What members use beyond their
//!    guarantees stays within what they lend: `Σ max(0, u − g) ≤ Σ (n − g)`, or equally
//!    `C + U ≤ Σ n` with `C = Σ u` (the cohort account's charge) and `U = Σ max(0, g − u)`
//!    (guarantees set aside unused). This is the cohort account's cap: its *level* `C + U`
//!    stays within its capacity `Σ n`. Without lending limits `U` is 0 and the rule is
//!    `Σ u ≤ Σ n`: idle nominal quota is used by whoever needs it.
//! 3. **Hard caps stay absolute**: a project's `Quota` holds whatever its cohort lends.
//!
//! **Moved to a hold.** A preemptor's hold is charged to its cohort in full, and its victims
//! of the same cohort stop counting there as they are asked to stop: their cohort charge
//! moves to the hold, and `U` counts their project's usage without them (its *settled*
//! usage: `moving` aside, and each of its preemptors' holds counted in full, `hold_shortfall`
//! being what a hold is not charged to the project while the project's own victims still
//! leave). The cohort's level is then what it will be once they are gone,
//! which the victim search made fit: the guarantee a victim's project gets back as it
//! leaves is already counted, so no start in the grace period can take it. A hold given up
//! while they still terminate leaves them moved out: they leave all the same, and counting
//! them again would let the level (and what a lowered capacity grandfathered) grow. They
//! count again if their preemptor's project leaves the cohort (`recount_cohorts`): they
//! were moved as its work, and the cohort keeps nothing of it. The move keeps that project
//! (`MovedToHold`), since the preemptor may be gone (cancelled) before its victims are
//! (scenario 140). The level counts the victims gone, but they hold their GPUs until they
//! exit: while any are on their way out, a start must also fit with them counted
//! (`over_cohort_now`, see `docs/cohorts.md`). A move lowers the cohort's charge with nothing uncharged, so the
//! scheduler records it as an uncharge of the cohort for the groups waiting on it
//! (`queue::CohortWake`, scenario 142). A cohort's level rises only when a
//! job starts or a hold is made, both checked against the cap; a job leaving lowers `C` by
//! what it held and raises `U` by at most that.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::decision::LimitSource;
use crate::types::{AccountId, NominalQuota, Priority, Quota, ResourceKind, Resources};

/// A quota account: its cap and what is charged to it. Charged = what its jobs hold
/// (running, and terminating until they exit, as a Kubernetes ResourceQuota counts a pod
/// in its grace period) plus what its preemptors' holds charge. A hold and its own
/// account's victims together charge the larger of the two (see [`hold_charges`]), never
/// both: a job may preempt its account's lower-priority work to stay within the cap.
#[derive(Clone, Debug, Default)]
pub(crate) struct Account {
    pub quota: Option<Quota>,
    /// A project's place in a cohort.
    pub nominal: Option<NominalQuota>,
    /// Set when the account is a cohort.
    pub cohort: Option<Cohort>,
    pub charged: Resources,
    /// For a member of a cohort: what of `charged` is terminating for a preemptor of its
    /// cohort, its cohort charge moved to that hold (see the module doc).
    pub moving: Resources,
    /// What its preemptors' holds are not charged to it while its own victims still leave
    /// (`hold_charges`): counted in its settled usage, which takes the holds in full.
    pub hold_shortfall: Resources,
    /// Its preemptors' holds at their full size: what of its settled usage is not on any
    /// GPU yet (`Ledger::over_cohort_now`).
    pub holds: Resources,
    /// For a member of a cohort, `charged − moving + hold_shortfall`, kept as they change
    /// (`resettle`): the wake-up pass and the cohort checks read it at nearly every event.
    /// Other accounts work it out when asked (nothing asks at each event): keeping it
    /// would cost every charge of a cluster without cohorts.
    settled: Resources,
    /// Usage (for a cohort, its level) above a lowered cap that was already there when the
    /// cap changed: allowed to drain, never to grow.
    pub grandfathered: Resources,
    /// The account's running preemptible jobs by priority, their GPUs and how many (no
    /// empty levels: a level has a job, perhaps of no GPU), kept while the account has a
    /// cap and the policy preempts: what a job of the account over the cap could preempt to
    /// get back under it (see `QuotaWake`), and what the other members of a cohort may
    /// reclaim from it while it borrows (`Ledger::borrowers_at`).
    pub preemptible: BTreeMap<Priority, PreemptibleRuns>,
}

/// An account's running preemptible jobs at one priority.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct PreemptibleRuns {
    pub gpus: u32,
    pub jobs: u32,
}

/// A cohort's members and what rule 2 of the module doc reads.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Cohort {
    pub members: BTreeSet<AccountId>,
    /// The sum of the members' nominal quotas, per dimension a member names (`None`: not
    /// governed).
    pub capacity: Quota,
    /// `U`: the members' guarantees set aside unused, `Σ max(0, g − u)`.
    pub unused_guarantee: Resources,
}

/// Is `settled` (a member's usage as its cohort counts it) above the member's nominal quota
/// `n` in some dimension `cohort` governs?
fn over_nominal(n: &NominalQuota, settled: Resources, cohort: &Cohort) -> bool {
    ResourceKind::ALL
        .into_iter()
        .any(|k| cohort.capacity.limit(k).is_some() && k.amount(settled) > k.amount_of_limit(n.nominal_of(k)))
}

/// By how much starting `extra` for `member` (of nominal quota `n`) would take its cohort's
/// level above the cohort's capacity (or what a lowered capacity grandfathered), per
/// dimension the cohort governs (0 where it stays within): rule 2.
fn short_by(member: &Account, n: &NominalQuota, cohort_account: &Account, extra: Resources) -> Resources {
    let cohort = cohort_account.cohort.as_ref().expect("a member's cohort is a cohort");
    let (level, settled) = (cohort_account.level(), member.settled());
    Resources::from_amounts(|k| {
        let Some(capacity) = cohort.capacity.limit(k).map(|c| k.amount_of_limit(c)) else { return 0 };
        // The job uses first what the project set aside unused: that part adds nothing.
        let unused_own = k.amount_of_limit(n.guaranteed_of(k)).saturating_sub(k.amount(settled));
        let after = k.amount(level) + k.amount(extra) - k.amount(extra).min(unused_own);
        after.saturating_sub(capacity.max(k.amount(cohort_account.grandfathered)))
    })
}

impl Account {
    /// The account's cap in `kind`: its hard quota and, for a member of a cohort, its
    /// borrowing limit, whichever is lower; for a cohort, its capacity.
    pub fn cap(&self, kind: ResourceKind) -> Option<u64> {
        if let Some(cohort) = &self.cohort {
            return cohort.capacity.limit(kind);
        }
        let hard = self.quota.and_then(|q| q.limit(kind));
        let borrowing = self.nominal.and_then(|n| n.usage_cap(kind));
        match (hard, borrowing) {
            (Some(h), Some(b)) => Some(h.min(b)),
            (h, b) => h.or(b),
        }
    }

    /// Which limit `cap` is in `kind` for an account that is not a cohort: its borrowing
    /// limit where that is lower than its hard quota (or it has none), else its quota.
    pub fn limit_source(&self, kind: ResourceKind) -> LimitSource {
        let hard = self.quota.and_then(|q| q.limit(kind));
        match self.nominal.and_then(|n| Some((n.cohort, n.usage_cap(kind)?))) {
            Some((cohort, borrowing)) if hard.is_none_or(|h| borrowing < h) => LimitSource::BorrowingLimit { cohort },
            _ => LimitSource::Quota,
        }
    }

    /// `cap` in the unit usage is added up in (see `ResourceKind::amount`).
    pub fn cap_amount(&self, kind: ResourceKind) -> Option<u64> {
        self.cap(kind).map(|c| kind.amount_of_limit(c))
    }

    /// Has it a cap in some dimension (or is it a cohort)?
    pub fn has_cap(&self) -> bool {
        ResourceKind::ALL.into_iter().any(|kind| self.cap(kind).is_some())
    }

    /// Is it a quota account the ledger watches: capped, a member of a cohort or a cohort?
    fn limited(&self) -> bool {
        self.quota.is_some() || self.nominal.is_some() || self.cohort.is_some()
    }

    /// What its cap is compared with: what is charged, and for a cohort the guarantees its
    /// members set aside unused as well.
    pub fn level(&self) -> Resources {
        match &self.cohort {
            Some(c) => self.charged.plus(c.unused_guarantee),
            None => self.charged,
        }
    }

    /// The first dimension in which charging `extra` more would break the cap (not for a
    /// cohort: see `Ledger::over_cohort`).
    pub fn over_quota(&self, extra: Resources) -> Option<(ResourceKind, u64, u64, LimitSource)> {
        debug_assert!(self.cohort.is_none(), "a cohort's level depends on which member is charged");
        let after = self.charged.plus(extra);
        let kind =
            ResourceKind::ALL.into_iter().find(|&k| self.cap_amount(k).is_some_and(|cap| k.amount(after) > cap))?;
        let limit = self.cap_amount(kind).expect("exceeded a limit it has");
        Some((kind, kind.amount(self.charged), limit, self.limit_source(kind)))
    }

    fn charge(&mut self, r: Resources) {
        self.charged = self.charged.plus(r);
    }

    fn uncharge(&mut self, r: Resources) {
        self.charged = self.charged.minus(r);
        self.grandfathered = self.grandfathered.min_by_amount(self.level());
    }

    /// What is charged, less what is moving to a hold of its cohort, plus what its holds
    /// are not charged: a member's usage as its cohort counts it.
    pub fn settled(&self) -> Resources {
        if self.nominal.is_some() { self.settled } else { self.settled_afresh() }
    }

    fn settled_afresh(&self) -> Resources {
        self.charged.minus(self.moving).plus(self.hold_shortfall)
    }

    /// `settled` kept up to date, for a member, after `charged`, `moving`,
    /// `hold_shortfall` or its membership changed (`Ledger::change_account`, which every
    /// such change goes through, and `set_nominal`).
    fn resettle(&mut self) {
        if self.nominal.is_some() {
            self.settled = self.settled_afresh();
        }
    }

    /// A member's guarantee set aside unused, `max(0, g − u)` per dimension.
    fn unused_guarantee(&self) -> Resources {
        let Some(n) = self.nominal else { return Resources::ZERO };
        let settled = self.settled();
        Resources::from_amounts(|k| k.amount_of_limit(n.guaranteed_of(k)).saturating_sub(k.amount(settled)))
    }

    /// Is a member using more than its nominal quota in some dimension its cohort governs?
    pub fn borrowing(&self, cohort: &Cohort) -> bool {
        self.nominal.is_some_and(|n| over_nominal(&n, self.settled(), cohort))
    }

    /// Would a member still be within its nominal quota with `extra` more, in every
    /// dimension its cohort governs?
    pub fn within_nominal_with(&self, cohort: &Cohort, extra: Resources) -> bool {
        let Some(n) = self.nominal else { return false };
        let after = self.settled().plus(extra);
        ResourceKind::ALL
            .into_iter()
            .all(|k| cohort.capacity.limit(k).is_none() || k.amount(after) <= k.amount_of_limit(n.nominal_of(k)))
    }

    /// The GPUs the account holds beyond its own preemptible work below `level`.
    pub fn base_gpus(&self, level: Priority) -> i64 {
        let below: u32 = self.preemptible.range(..level).map(|(_, runs)| runs.gpus).sum();
        i64::from(self.charged.gpus) - i64::from(below)
    }

    /// Within cap, or within what the cap grandfathered.
    pub fn within_quota(&self) -> bool {
        let level = self.level();
        ResourceKind::ALL.into_iter().all(|kind| match self.cap_amount(kind) {
            None => true,
            Some(limit) => kind.amount(level) <= limit.max(kind.amount(self.grandfathered)),
        })
    }
}

/// The accounts a job is charged to: its project, its user (when another), its project's
/// cohort (when it has one).
pub(crate) const CHARGED_ACCOUNTS_MAX: usize = 3;

/// What a lowered cap grandfathered for a job's accounts, saved before a charge moves
/// between jobs.
pub(crate) type Grandfathered = [Option<(AccountId, Resources)>; CHARGED_ACCOUNTS_MAX];

/// The accounts by id. Every start and every exit charges or uncharges two or three of
/// them, so they are found by hashing (a tree's search was 2% of the Philly replay); the
/// ids are kept in order beside, for what lists them (checks, cohort upkeep), and
/// accounts are never dropped.
#[derive(Clone, Debug, Default)]
struct Accounts {
    /// A fixed-key hasher: runs are reproducible down to memory layout.
    by_id: HashMap<AccountId, Account, foldhash::fast::FixedState>,
    ids: BTreeSet<AccountId>,
}

impl Accounts {
    fn get(&self, id: &AccountId) -> Option<&Account> {
        self.by_id.get(id)
    }

    fn get_mut(&mut self, id: &AccountId) -> Option<&mut Account> {
        self.by_id.get_mut(id)
    }

    fn contains_key(&self, id: &AccountId) -> bool {
        self.by_id.contains_key(id)
    }

    /// The account, created empty if new.
    fn get_or_default(&mut self, id: AccountId) -> &mut Account {
        self.by_id.entry(id).or_insert_with(|| {
            self.ids.insert(id);
            Account::default()
        })
    }

    fn len(&self) -> usize {
        self.by_id.len()
    }

    /// In id order.
    fn iter(&self) -> impl Iterator<Item = (&AccountId, &Account)> {
        self.ids.iter().map(|id| (id, &self.by_id[id]))
    }

    /// In id order.
    fn keys(&self) -> impl Iterator<Item = &AccountId> {
        self.ids.iter()
    }

    fn values(&self) -> impl Iterator<Item = &Account> {
        self.by_id.values()
    }
}

impl std::ops::Index<&AccountId> for Accounts {
    type Output = Account;

    fn index(&self, id: &AccountId) -> &Account {
        self.get(id).expect("a known account")
    }
}

/// A member's figures before and after a change of what is charged to it (or moving, or
/// its holds' shortfall), for its cohort to follow.
struct MemberChange {
    member: AccountId,
    nominal: NominalQuota,
    unused_before: Resources,
    unused_now: Resources,
    settled_before: Resources,
    settled_now: Resources,
}

#[derive(Clone, Debug, Default)]
pub(crate) struct Ledger {
    accounts: Accounts,
    /// Accounts with a cap: while there are none, nothing is over quota and quota checks
    /// are skipped.
    capped: usize,
    /// Cohorts one of whose members began to borrow (with repeats), since the scheduler
    /// last took them (`take_borrowing_began`): the runs of the member's own priority
    /// became what the others may reclaim (see `queue::RoomWake::Borrowed`).
    borrowing_began: Vec<AccountId>,
    /// Members whose settled usage fell in some dimension (with repeats), since the
    /// scheduler last took them (`take_settled_fell`): a job of theirs that may not reclaim
    /// because it would take its project over its nominal quota may now (see
    /// `queue::CohortWake`).
    settled_fell: Vec<AccountId>,
    /// What every member's `moving` adds up to: while nothing moves to a hold,
    /// `over_cohort_now` has nothing to add and returns at once.
    moving_total: Resources,
}

impl Ledger {
    /// The cohorts one of whose members began to borrow since the last call, into `out`.
    pub fn take_borrowing_began(&mut self, out: &mut Vec<AccountId>) {
        out.append(&mut self.borrowing_began);
    }

    /// The members whose settled usage fell since the last call, into `out`.
    pub fn take_settled_fell(&mut self, out: &mut Vec<AccountId>) {
        out.append(&mut self.settled_fell);
    }

    /// Does any account have a cap (or a place in a cohort)?
    pub fn any_capped(&self) -> bool {
        self.capped > 0
    }

    /// The cohort of a project, if it has a place in one.
    pub fn cohort_of(&self, project: AccountId) -> Option<AccountId> {
        if self.capped == 0 {
            return None;
        }
        self.get(project)?.nominal.map(|n| n.cohort)
    }

    /// A cohort's members and figures (`None` if `cohort` is not one).
    pub fn cohort(&self, cohort: AccountId) -> Option<&Cohort> {
        self.get(cohort)?.cohort.as_ref()
    }

    /// See [`crate::Scheduler::cohort_most`].
    pub fn cohort_most(&self, project: AccountId, kind: ResourceKind) -> Option<u64> {
        let n = self.get(project)?.nominal?;
        let cohort = self.cohort(n.cohort)?;
        let capacity = kind.amount_of_limit(cohort.capacity.limit(kind)?);
        let kept_by_others: u64 = (cohort.members.iter())
            .filter(|&&m| m != project)
            .filter_map(|&m| self.get(m)?.nominal)
            .map(|other| kind.amount_of_limit(other.guaranteed_of(kind)))
            .sum();
        Some(capacity.saturating_sub(kept_by_others))
    }

    /// The first dimension in which starting `extra` for `project` would take its cohort
    /// over rule 2 (see the module doc): `(cohort, resource, level, capacity)`.
    pub fn over_cohort(&self, project: AccountId, extra: Resources) -> Option<(AccountId, ResourceKind, u64, u64)> {
        let (cohort, short) = self.cohort_shortage(project, extra)?;
        let kind = ResourceKind::ALL.into_iter().find(|&k| k.amount(short) > 0)?;
        let account = self.get(cohort).expect("a member's cohort is known");
        let capacity = account.cap_amount(kind).expect("a cohort is short only where it has a capacity");
        Some((cohort, kind, kind.amount(account.level()), capacity))
    }

    /// A start of `extra` for `project` within its cohort's level, as rule 2 counts it (the
    /// victims moved to holds gone, the holds in full: `over_cohort`), that would still take
    /// the cohort beyond what its members lend while those victims are on their way out:
    /// they hold their GPUs until they exit. Counted as the GPUs are held now
    /// (`level_on_gpus`: running and leaving work, not the holds yet, each member at least
    /// its guarantee). On a cluster whose GPUs are all the cohort's such a start finds no
    /// free GPUs anyway; on a larger one it would, and the members would hold more than
    /// they lend for the victims' grace period. A hold turned into its run adds its size
    /// the same way. `(cohort, resource, level on GPUs, capacity)`.
    pub fn over_cohort_now(&self, project: AccountId, extra: Resources) -> Option<(AccountId, ResourceKind, u64, u64)> {
        if self.moving_total == Resources::ZERO {
            return None;
        }
        let member = self.get(project)?;
        let n = member.nominal?;
        let cohort_account = self.get(n.cohort).expect("a member's cohort is known");
        let cohort = cohort_account.cohort.as_ref().expect("a member's cohort is a cohort");
        ResourceKind::ALL.into_iter().find_map(|k| {
            let capacity = cohort.capacity.limit(k).map(|c| k.amount_of_limit(c))?;
            let allowed = capacity.max(k.amount(cohort_account.grandfathered));
            let now = self.level_on_gpus(cohort, k);
            let g = k.amount_of_limit(n.guaranteed_of(k));
            let held = on_gpus(member, k);
            let adds = (held + k.amount(extra)).max(g) - held.max(g);
            // Only what the start adds counts against it: a level above what the cohort
            // lends already (victims on their way out) holds back no job that adds nothing.
            (adds > 0 && now + adds > allowed).then_some((n.cohort, k, now, capacity))
        })
    }

    /// A cohort's level in `kind`, or as the GPUs are held now (`over_cohort_now`) where
    /// that is more, while victims moved to holds are on their way out.
    pub fn cohort_level_now(&self, cohort: AccountId, kind: ResourceKind) -> Option<u64> {
        let account = self.get(cohort)?;
        let c = account.cohort.as_ref()?;
        let level = kind.amount(account.level());
        Some(if self.moving_total == Resources::ZERO { level } else { level.max(self.level_on_gpus(c, kind)) })
    }

    /// `Σ max(u, g)` over the members, `u` what each holds on GPUs now (`on_gpus`).
    fn level_on_gpus(&self, cohort: &Cohort, k: ResourceKind) -> u64 {
        cohort
            .members
            .iter()
            .filter_map(|m| {
                let a = &self.accounts[m];
                Some(on_gpus(a, k).max(k.amount_of_limit(a.nominal?.guaranteed_of(k))))
            })
            .sum()
    }

    /// A preemptor's hold of `project`, at its full size, is made (`made`) or given up.
    pub fn shift_holds(&mut self, project: AccountId, total: Resources, made: bool) {
        let a = self.accounts.get_or_default(project);
        a.holds = if made { a.holds.plus(total) } else { a.holds.minus(total) };
    }

    /// What `project`'s holds add up to, at their full sizes.
    pub fn holds(&self, project: AccountId) -> Resources {
        self.get(project).map_or(Resources::ZERO, |a| a.holds)
    }

    /// For a member of a cohort: its cohort, and by how much starting `extra` for `project`
    /// would take the cohort's level above its capacity (or what a lowered capacity
    /// grandfathered), per dimension (0 where it stays within). `None` for a non-member.
    pub fn cohort_shortage(&self, project: AccountId, extra: Resources) -> Option<(AccountId, Resources)> {
        let member = self.get(project)?;
        let n = member.nominal?;
        let cohort_account = self.get(n.cohort).expect("a member's cohort is known");
        Some((n.cohort, short_by(member, &n, cohort_account, extra)))
    }

    /// Is a wait of a group of `project` needing `extra` over (`WakeChecks::cohort_wait_over`,
    /// with the same answers, read with one look-up of the member and one of its cohort: it
    /// is asked at most uncharges of a cohort)? With `short`: it starts within its cohort's
    /// capacity (or is not a member), or, unless it `reclaims` already, it may now reclaim
    /// (rule 1: within its nominal quota with `extra`). Without: it is a member of `cohort`
    /// and may now reclaim.
    pub fn cohort_wait_over(
        &self,
        project: AccountId,
        cohort: AccountId,
        extra: Resources,
        short: bool,
        reclaims: bool,
    ) -> bool {
        let Some(member) = self.get(project) else { return short };
        let Some(n) = member.nominal else { return short };
        if !short && n.cohort != cohort {
            return false;
        }
        let cohort_account = self.get(n.cohort).expect("a member's cohort is known");
        let c = cohort_account.cohort.as_ref().expect("a member's cohort is a cohort");
        if !short {
            return member.within_nominal_with(c, extra);
        }
        let fits = short_by(member, &n, cohort_account, extra) == Resources::ZERO;
        fits || (!reclaims && member.within_nominal_with(c, extra))
    }

    /// What each member would give back to its cohort's level if its running work of
    /// `taken` left, at most: `max(0, u − g)` per dimension, `u` counting `extra` more for
    /// `project` (the preemptor's own, as if it had started). Rule 2 in victims' terms.
    pub fn member_givable(&self, member: AccountId, project: AccountId, extra: Resources) -> Resources {
        let Some(a) = self.get(member) else { return Resources::ZERO };
        let Some(n) = a.nominal else { return Resources::ZERO };
        let u = if member == project { a.settled().plus(extra) } else { a.settled() };
        Resources::from_amounts(|k| k.amount(u).saturating_sub(k.amount_of_limit(n.guaranteed_of(k))))
    }

    pub fn get(&self, account: AccountId) -> Option<&Account> {
        self.accounts.get(&account)
    }

    /// Accounts in id order.
    pub fn iter(&self) -> impl Iterator<Item = (AccountId, &Account)> {
        self.accounts.iter().map(|(id, a)| (*id, a))
    }

    /// What is charged to an account and its cap.
    pub fn usage(&self, account: AccountId) -> (Resources, Option<Quota>) {
        self.get(account).map_or((Resources::ZERO, None), |a| (a.charged, a.quota))
    }

    /// The account's GPU cap, if it has one.
    pub fn gpus_cap(&self, account: AccountId) -> Option<u32> {
        self.get(account).and_then(|a| a.cap(ResourceKind::Gpu)).map(|cap| u32::try_from(cap).unwrap_or(u32::MAX))
    }

    /// What the over-quota wakes look at: the GPUs `account` holds beyond its own
    /// preemptible work below `level`.
    pub fn base_gpus(&self, account: AccountId, level: Priority) -> i64 {
        self.get(account).map_or(0, |a| a.base_gpus(level))
    }

    /// The first dimension in which charging `extra` more to `account` would break its cap:
    /// `(resource, used, limit)`.
    pub fn over_quota(&self, account: AccountId, extra: Resources) -> Option<(ResourceKind, u64, u64, LimitSource)> {
        self.get(account)?.over_quota(extra)
    }

    pub fn charge(&mut self, account: AccountId, r: Resources) {
        let a = self.accounts.get_or_default(account);
        let change = Self::change_account(account, a, |a| a.charge(r));
        self.cohort_follows(change);
    }

    pub fn uncharge(&mut self, account: AccountId, r: Resources) {
        let a = self.accounts.get_mut(&account).expect("uncharging an account that was charged");
        let change = Self::change_account(account, a, |a| a.uncharge(r));
        self.cohort_follows(change);
    }

    /// Change a known account; if it is a member of a cohort, its cohort's `U` follows.
    fn change_member(&mut self, account: AccountId, change: impl FnOnce(&mut Account)) {
        let a = self.accounts.get_mut(&account).expect("a known account");
        let change = Self::change_account(account, a, change);
        self.cohort_follows(change);
    }

    /// Change an account; for a member of a cohort, (its cohort, its unused guarantee
    /// before, after).
    fn change_account(id: AccountId, a: &mut Account, change: impl FnOnce(&mut Account)) -> Option<MemberChange> {
        let Some(n) = a.nominal else {
            change(a);
            return None;
        };
        let (unused_before, settled_before) = (a.unused_guarantee(), a.settled());
        change(a);
        a.resettle();
        Some(MemberChange {
            member: id,
            nominal: n,
            unused_before,
            unused_now: a.unused_guarantee(),
            settled_before,
            settled_now: a.settled(),
        })
    }

    /// A victim of `project` terminating for a preemptor of `cohort` moves its cohort charge
    /// `r` to the hold, for good: it stays moved until it exits (see the module doc).
    pub fn move_to_hold(&mut self, project: AccountId, cohort: AccountId, r: Resources) {
        assert!(self.accounts.contains_key(&project), "a victim's project is charged");
        self.change_member(project, |a| a.moving = a.moving.plus(r));
        self.moving_total = self.moving_total.plus(r);
        self.uncharge(cohort, r);
    }

    /// A moved victim of `project` has left (its project charge is uncharged by the caller).
    pub fn settle_moved(&mut self, project: AccountId, r: Resources) {
        assert!(self.accounts.contains_key(&project), "a victim's project is charged");
        self.change_member(project, |a| a.moving = a.moving.minus(r));
        self.moving_total = self.moving_total.minus(r);
    }

    /// Set a member's `moving` to what its moved victims add up to (after membership changed).
    pub fn set_moving(&mut self, project: AccountId, r: Resources) {
        if let Some(was) = self.accounts.get(&project).map(|a| a.moving) {
            self.change_member(project, |a| a.moving = r);
            self.moving_total = self.moving_total.minus(was).plus(r);
        }
    }

    /// What of a member's charge is moving to holds of its cohort.
    pub fn moving(&self, project: AccountId) -> Resources {
        self.get(project).map_or(Resources::ZERO, |a| a.moving)
    }

    /// A hold of a preemptor of `project` is charged `more` less (made, or its victims leave
    /// more slowly) or `less` less than before: its settled usage follows.
    pub fn shift_hold_shortfall(&mut self, project: AccountId, more: Resources, less: Resources) {
        self.accounts.get_or_default(project);
        self.change_member(project, |a| a.hold_shortfall = a.hold_shortfall.plus(more).minus(less));
    }

    /// What a project's holds are not charged to it.
    pub fn hold_shortfall(&self, project: AccountId) -> Resources {
        self.get(project).map_or(Resources::ZERO, |a| a.hold_shortfall)
    }

    /// The accounts with something moving to a hold, in id order.
    pub fn moving_projects(&self) -> Vec<AccountId> {
        self.accounts.iter().filter(|(_, a)| a.moving != Resources::ZERO).map(|(id, _)| *id).collect()
    }

    /// A member's charge changed (`change_account`): its cohort's `U` follows.
    fn cohort_follows(&mut self, change: Option<MemberChange>) {
        let Some(MemberChange { member, nominal, unused_before, unused_now, settled_before, settled_now }) = change
        else {
            return;
        };
        if ResourceKind::ALL.into_iter().any(|k| k.amount(settled_now) < k.amount(settled_before)) {
            self.settled_fell.push(member);
        }
        let cohort_id = nominal.cohort;
        let cohort = self.accounts.get_mut(&cohort_id).expect("a member's cohort is known");
        let c = cohort.cohort.as_mut().expect("a member's cohort is a cohort");
        if settled_now != settled_before
            && !over_nominal(&nominal, settled_before, c)
            && over_nominal(&nominal, settled_now, c)
        {
            self.borrowing_began.push(cohort_id);
        }
        if unused_now == unused_before {
            return;
        }
        // What a lowered capacity grandfathered shrinks when the cohort's own charge does,
        // which follows in the same move: a member's charge and the cohort's do not happen at
        // once, and in between the level is not what either leaves it.
        c.unused_guarantee = c.unused_guarantee.minus(unused_before).plus(unused_now);
    }

    /// Set (or with `None` clear) a cap. Whatever is charged now may stay under a lowered
    /// cap; it may only shrink. `preemptible_now` counts the account's running preemptible
    /// GPUs by priority, tallied from then on while it has a cap.
    pub fn set_quota(
        &mut self,
        id: AccountId,
        quota: Option<Quota>,
        preemptible_now: impl FnOnce() -> BTreeMap<Priority, PreemptibleRuns>,
    ) {
        let account = self.accounts.get_or_default(id);
        let was = account.limited();
        account.quota = quota;
        account.grandfathered = account.level();
        self.limited_changed(id, was, preemptible_now);
    }

    /// Keep the count of watched accounts and their tallies of preemptible work in step
    /// with a change that made `id` watched or not.
    fn limited_changed(
        &mut self,
        id: AccountId,
        was: bool,
        preemptible_now: impl FnOnce() -> BTreeMap<Priority, PreemptibleRuns>,
    ) {
        let account = self.accounts.get_mut(&id).expect("just set");
        match (was, account.limited()) {
            (false, true) => {
                self.capped += 1;
                if account.cohort.is_none() {
                    account.preemptible = preemptible_now();
                }
            }
            (true, false) => {
                self.capped -= 1;
                account.preemptible.clear();
            }
            _ => {}
        }
    }

    /// Give a project a place in a cohort, or with `None` take it out of its cohort. The
    /// cohorts concerned (before and after) get their members, capacity and `U` anew; the
    /// caller recounts their charges (`set_cohort_charge`) when membership changed, and
    /// whatever is used now may stay under a lowered cap, as with `set_quota`.
    /// `preemptible_now` counts the project's running preemptible GPUs by priority.
    pub fn set_nominal(
        &mut self,
        project: AccountId,
        nominal: Option<NominalQuota>,
        preemptible_now: impl FnOnce() -> BTreeMap<Priority, PreemptibleRuns>,
    ) {
        let account = self.accounts.get_or_default(project);
        let was = account.limited();
        let before = account.nominal.map(|n| n.cohort);
        account.nominal = nominal;
        account.resettle();
        account.grandfathered = account.level();
        self.limited_changed(project, was, preemptible_now);
        if let Some(cohort) = before {
            self.accounts
                .get_mut(&cohort)
                .expect("a member's cohort is known")
                .cohort
                .as_mut()
                .expect("a cohort")
                .members
                .remove(&project);
        }
        if let Some(n) = nominal {
            let was = self.accounts.get(&n.cohort).is_some_and(Account::limited);
            let cohort = self.accounts.get_or_default(n.cohort);
            cohort.cohort.get_or_insert_with(Cohort::default).members.insert(project);
            self.limited_changed(n.cohort, was, BTreeMap::new);
        }
        for cohort in before.into_iter().chain(nominal.map(|n| n.cohort)) {
            self.refresh_cohort(cohort);
        }
    }

    /// A cohort's capacity and `U` from its members; a cohort left without members stops
    /// being one (the caller has recounted its charge to nothing).
    fn refresh_cohort(&mut self, id: AccountId) {
        let members: Vec<AccountId> =
            self.accounts[&id].cohort.as_ref().expect("a cohort").members.iter().copied().collect();
        let (capacity, unused) = self.cohort_figures(&members);
        let account = self.accounts.get_mut(&id).expect("known");
        let c = account.cohort.as_mut().expect("a cohort");
        c.capacity = capacity;
        c.unused_guarantee = unused;
        account.grandfathered = account.level();
        if members.is_empty() {
            account.cohort = None;
            self.limited_changed(id, true, BTreeMap::new);
        }
    }

    /// Capacity and `U` of a cohort of `members`, summed afresh.
    fn cohort_figures(&self, members: &[AccountId]) -> (Quota, Resources) {
        let mut capacity = Quota::default();
        let mut unused = Resources::ZERO;
        for m in members {
            let a = &self.accounts[m];
            let n = a.nominal.expect("a member has a nominal quota");
            let gpus = sum_named(capacity.gpus_max.map(u64::from), n.nominal.gpus_max.map(u64::from));
            capacity.gpus_max = gpus.map(|g| u32::try_from(g).unwrap_or(u32::MAX));
            capacity.cpu_millis_max = sum_named(capacity.cpu_millis_max, n.nominal.cpu_millis_max);
            capacity.memory_mib_max = sum_named(capacity.memory_mib_max, n.nominal.memory_mib_max);
            unused = unused.plus(a.unused_guarantee());
        }
        (capacity, unused)
    }

    /// Set a cohort's charge to what its members' jobs add up to (after membership changed),
    /// keeping what is there now under a lowered cap.
    pub fn set_cohort_charge(&mut self, cohort: AccountId, charged: Resources) {
        let Some(account) = self.accounts.get_mut(&cohort) else { return };
        account.charged = charged;
        account.grandfathered = account.level();
    }

    /// The members of `cohort` other than `except` that borrow now: those a member within
    /// its nominal quota may reclaim from.
    pub fn borrowers(&self, cohort: AccountId, except: AccountId) -> impl Iterator<Item = AccountId> + '_ {
        self.cohort(cohort).into_iter().flat_map(move |c| self.borrowing_members(c, except).map(|(m, _)| m))
    }

    /// Is `member` a member of `cohort` (`c` its figures) that borrows now?
    pub fn borrows_in(&self, member: AccountId, cohort: AccountId, c: &Cohort) -> bool {
        self.cohort_of(member) == Some(cohort) && self.get(member).is_some_and(|a| a.borrowing(c))
    }

    /// Would `member` still borrow (use more than its nominal quota in a dimension its
    /// cohort governs) without `less` of what it uses now? Preemption rule 8 asks it of a
    /// project whose start of the cycle it would take back beside an older run it reclaims.
    pub fn borrows_without(&self, member: AccountId, less: Resources) -> bool {
        let Some(account) = self.get(member) else { return false };
        let Some(n) = account.nominal else { return false };
        let Some(c) = self.cohort(n.cohort) else { return false };
        over_nominal(&n, account.settled().saturating_minus(less), c)
    }

    /// Whether one of `borrowers` runs preemptible work at `priority`.
    pub fn borrowers_at(&self, cohort: AccountId, priority: Priority, except: AccountId) -> bool {
        let Some(c) = self.cohort(cohort) else { return false };
        self.borrowing_members(c, except).any(|(_, a)| a.preemptible.contains_key(&priority))
    }

    /// `borrowers` of a cohort at hand, with their accounts (each looked up once).
    fn borrowing_members<'a>(
        &'a self,
        c: &'a Cohort,
        except: AccountId,
    ) -> impl Iterator<Item = (AccountId, &'a Account)> + 'a {
        c.members.iter().filter(move |m| **m != except).map(|m| (*m, &self.accounts[m])).filter(|(_, a)| a.borrowing(c))
    }

    /// A restored run or hold may hold more than a cap now allows: keep it, as a lowered
    /// cap does.
    pub fn grandfather_if_over(&mut self, account: AccountId) {
        let account = self.accounts.get_mut(&account).expect("charged by start or reserve");
        if !account.within_quota() {
            account.grandfathered = account.level();
        }
    }

    /// What a lowered cap grandfathered for `accounts`, before a charge moves between jobs
    /// (a victim to its preemptor's hold, a hold to the running job): see
    /// `keep_grandfathered`.
    pub fn grandfathered_of(&self, accounts: impl Iterator<Item = AccountId>) -> Grandfathered {
        let mut out = [None; CHARGED_ACCOUNTS_MAX];
        for (slot, account) in out.iter_mut().zip(accounts) {
            *slot = self.get(account).map(|a| (account, a.grandfathered));
        }
        out
    }

    /// Restore what `grandfathered_of` saw, as far as the accounts still use it. A move
    /// uncharges, which would shrink what was grandfathered, then charges again, which would
    /// then break the quota invariant.
    pub fn keep_grandfathered(&mut self, saved: Grandfathered) {
        for (account, g) in saved.into_iter().flatten() {
            let a = self.accounts.get_mut(&account).expect("saved from an account");
            a.grandfathered = g.min_by_amount(a.level());
        }
    }

    /// A preemptible job of `gpus` at `priority` started (`true`) or stopped running:
    /// tallied on each of its capped accounts.
    pub fn tally_preemptible(
        &mut self,
        accounts: impl Iterator<Item = AccountId>,
        priority: Priority,
        gpus: u32,
        running: bool,
    ) {
        if self.capped == 0 {
            return;
        }
        for account in accounts {
            let account = self.accounts.get_mut(&account).expect("charged at start");
            if !account.limited() || account.cohort.is_some() {
                continue;
            }
            if running {
                let tally = account.preemptible.entry(priority).or_default();
                tally.gpus += gpus;
                tally.jobs += 1;
            } else {
                let tally = account.preemptible.get_mut(&priority).expect("tallied at start");
                tally.gpus -= gpus;
                tally.jobs -= 1;
                if tally.jobs == 0 {
                    account.preemptible.remove(&priority);
                }
            }
        }
    }

    /// The accounts it knows, in id order: what `check` expects its figures in.
    pub fn account_ids(&self) -> Vec<AccountId> {
        self.accounts.keys().copied().collect()
    }

    /// Does the ledger tally the account's preemptible work: capped or a member of a
    /// cohort? (`false` for an account it does not know, and for a cohort.)
    pub fn is_capped(&self, account: AccountId) -> bool {
        self.get(account).is_some_and(|a| a.limited() && a.cohort.is_none())
    }

    /// The ledger against what the jobs add up to: `charged` and `preemptible` per account,
    /// in the order of `account_ids` (`preemptible` counted for capped accounts only), the
    /// count of capped accounts, and every account within its cap or what the cap
    /// grandfathered.
    pub fn check(
        &self,
        charged: &[Resources],
        preemptible: &[BTreeMap<Priority, PreemptibleRuns>],
    ) -> Result<(), String> {
        assert_eq!(
            (charged.len(), preemptible.len()),
            (self.accounts.len(), self.accounts.len()),
            "one figure per account"
        );
        let capped = self.accounts.values().filter(|a| a.limited()).count();
        if capped != self.capped {
            return Err(format!("{} accounts counted as capped, {capped} have a quota", self.capped));
        }
        self.check_cohorts()?;
        let moving = self.accounts.values().fold(Resources::ZERO, |sum, a| sum.plus(a.moving));
        if !moving.same_amounts(self.moving_total) {
            return Err(format!(
                "{} counted as moving to holds, the members' figures make {moving}",
                self.moving_total
            ));
        }
        for (((id, account), expected), own) in self.accounts.iter().zip(charged).zip(preemptible) {
            let settled = account.settled_afresh();
            if account.nominal.is_some() && account.settled != settled {
                return Err(format!("{id} keeps {} as its settled usage, its figures make {settled}", account.settled));
            }
            if !account.charged.same_amounts(*expected) {
                return Err(format!("{id} charged {} but its jobs add up to {expected}", account.charged));
            }
            if account.preemptible != *own {
                return Err(format!("{id} tallies {:?} preemptible runs, its jobs {own:?}", account.preemptible));
            }
            if !account.within_quota() {
                return Err(format!("{id} charged {} over its quota {:?}", account.charged, account.quota));
            }
        }
        Ok(())
    }

    /// Every cohort's members are the projects that name it, and its capacity and `U` are
    /// what they add up to now.
    fn check_cohorts(&self) -> Result<(), String> {
        for (id, account) in self.accounts.iter() {
            if let Some(n) = account.nominal {
                let listed = self.cohort(n.cohort).is_some_and(|c| c.members.contains(id));
                if !listed {
                    return Err(format!("{id} names {} as its cohort, which does not list it", n.cohort));
                }
            }
            let Some(c) = &account.cohort else { continue };
            for m in &c.members {
                if self.get(*m).and_then(|a| a.nominal).map(|n| n.cohort) != Some(*id) {
                    return Err(format!("cohort {id} lists {m}, which is not its member"));
                }
            }
            let members: Vec<AccountId> = c.members.iter().copied().collect();
            let (capacity, unused) = self.cohort_figures(&members);
            if capacity != c.capacity || !unused.same_amounts(c.unused_guarantee) {
                return Err(format!(
                    "cohort {id} records capacity {:?} and unused guarantees {}, its members add up to {capacity:?} and {unused}",
                    c.capacity, c.unused_guarantee
                ));
            }
        }
        Ok(())
    }

    /// For the invariant tests: break the ledger on purpose.
    #[cfg(test)]
    pub fn account_mut(&mut self, account: AccountId) -> &mut Account {
        self.accounts.get_mut(&account).expect("known")
    }

    /// Test only: an account's kept settled usage one GPU off its figures, as a change that
    /// forgot `Account::resettle` would leave it.
    #[cfg(test)]
    pub fn skew_settled(&mut self, account: AccountId) {
        let a = self.accounts.get_mut(&account).expect("known");
        a.settled.gpus += 1;
    }
}

/// What a hold for a preemptor charges each of its accounts (`accounts`, in
/// `JobSpec::accounts` order): its gang's `total`, less, per account and per resource, what
/// its victims still `leaving` (each with its accounts and total) hold of that account.
/// Those victims stay charged until they exit, so the account is charged the larger of the
/// two, never both: the GPUs are the victims' now and the preemptor's later.
pub(crate) fn hold_charges<L: Iterator<Item = AccountId>>(
    accounts: impl Iterator<Item = AccountId>,
    total: Resources,
    leaving: impl Iterator<Item = (L, Resources)> + Clone,
) -> [Resources; CHARGED_ACCOUNTS_MAX] {
    let mut charges = [Resources::ZERO; CHARGED_ACCOUNTS_MAX];
    for (k, account) in accounts.enumerate() {
        let theirs = leaving
            .clone()
            .filter_map(|(mut of, r)| of.any(|a| a == account).then_some(r))
            .fold(Resources::ZERO, Resources::plus);
        charges[k] = total.saturating_minus_by_amount(theirs);
    }
    charges
}

/// What a member holds on GPUs now, in `k`: its settled usage with what moves out of it back
/// (those victims still hold their GPUs) and its holds not yet on any GPU.
fn on_gpus(a: &Account, k: ResourceKind) -> u64 {
    (k.amount(a.settled()) + k.amount(a.moving)).saturating_sub(k.amount(a.holds))
}

/// The sum of two optional limits where either names one (a member that names none counts 0).
fn sum_named(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(0).saturating_add(b.unwrap_or(0))),
    }
}
