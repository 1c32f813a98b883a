//! The quota ledger: per account, its cap, what is charged to it, what a lowered cap
//! grandfathered, and, while it has a cap, its running preemptible GPUs by priority. It owns
//! the invariant "usage within quota": every charge and uncharge goes through it, a charge
//! moved between two jobs keeps what was grandfathered (`grandfathered_of` /
//! `keep_grandfathered`), what a preemptor's hold charges is computed here (`hold_charges`),
//! and `check` compares the ledger with what the jobs add up to.
//!
//! The ledger knows accounts, not jobs: callers name the accounts a job is charged to
//! (`JobSpec::accounts`) and the resources. It imports only `types`.

use std::collections::BTreeMap;

use crate::types::{AccountId, Priority, Quota, ResourceKind, Resources};

/// A quota account: its cap and what is charged to it. Charged = what its jobs hold
/// (running, and terminating until they exit, as a Kubernetes ResourceQuota counts a pod
/// in its grace period) plus what its preemptors' holds charge. A hold and its own
/// account's victims together charge the larger of the two (see [`hold_charges`]), never
/// both: a job may preempt its account's lower-priority work to stay within the cap.
#[derive(Clone, Debug, Default)]
pub(crate) struct Account {
    pub quota: Option<Quota>,
    pub charged: Resources,
    /// Usage above a lowered cap that was already running when the cap changed: allowed
    /// to drain, never to grow.
    pub grandfathered: Resources,
    /// GPUs of the account's running preemptible jobs by priority (no empty levels), kept
    /// while the account has a cap and the policy preempts: what a job of the account over
    /// the cap could preempt to get back under it (see `QuotaWake`).
    pub preemptible_gpus: BTreeMap<Priority, u32>,
}

impl Account {
    /// The first dimension in which charging `extra` more would break the cap.
    pub fn over_quota(&self, extra: Resources) -> Option<(ResourceKind, u64, u64)> {
        let quota = self.quota?;
        let kind = quota.first_exceeded(self.charged.plus(extra))?;
        Some((kind, kind.of(self.charged), quota.limit(kind).expect("exceeded a limit it has")))
    }

    fn charge(&mut self, r: Resources) {
        self.charged = self.charged.plus(r);
    }

    fn uncharge(&mut self, r: Resources) {
        self.charged = self.charged.minus(r);
        self.grandfathered = self.grandfathered.min_each(self.charged);
    }

    /// The GPUs the account holds beyond its own preemptible work below `level`.
    pub fn base_gpus(&self, level: Priority) -> i64 {
        let below: u32 = self.preemptible_gpus.range(..level).map(|(_, g)| *g).sum();
        i64::from(self.charged.gpus) - i64::from(below)
    }

    /// Within cap, or within what the cap grandfathered.
    pub fn within_quota(&self) -> bool {
        let Some(quota) = self.quota else { return true };
        ResourceKind::ALL.into_iter().all(|kind| match quota.limit(kind) {
            None => true,
            Some(limit) => kind.of(self.charged) <= limit.max(kind.of(self.grandfathered)),
        })
    }
}

/// What a lowered cap grandfathered for a job's (at most two) accounts, saved before a
/// charge moves between jobs.
pub(crate) type Grandfathered = [Option<(AccountId, Resources)>; 2];

#[derive(Clone, Debug, Default)]
pub(crate) struct Ledger {
    accounts: BTreeMap<AccountId, Account>,
    /// Accounts with a cap: while there are none, nothing is over quota and quota checks
    /// are skipped.
    capped: usize,
}

impl Ledger {
    /// Does any account have a cap?
    pub fn any_capped(&self) -> bool {
        self.capped > 0
    }

    pub fn get(&self, account: AccountId) -> Option<&Account> {
        self.accounts.get(&account)
    }

    /// Accounts in id order.
    #[cfg(test)]
    pub fn iter(&self) -> impl Iterator<Item = (AccountId, &Account)> {
        self.accounts.iter().map(|(id, a)| (*id, a))
    }

    /// What is charged to an account and its cap.
    pub fn usage(&self, account: AccountId) -> (Resources, Option<Quota>) {
        self.get(account).map_or((Resources::ZERO, None), |a| (a.charged, a.quota))
    }

    /// The account's GPU cap, if it has one.
    pub fn gpus_cap(&self, account: AccountId) -> Option<u32> {
        self.get(account).and_then(|a| a.quota).and_then(|q| q.gpus_max)
    }

    /// What the over-quota wakes look at: the GPUs `account` holds beyond its own
    /// preemptible work below `level`.
    pub fn base_gpus(&self, account: AccountId, level: Priority) -> i64 {
        self.get(account).map_or(0, |a| a.base_gpus(level))
    }

    /// The first dimension in which charging `extra` more to `account` would break its cap:
    /// `(resource, used, limit)`.
    pub fn over_quota(&self, account: AccountId, extra: Resources) -> Option<(ResourceKind, u64, u64)> {
        self.get(account)?.over_quota(extra)
    }

    pub fn charge(&mut self, account: AccountId, r: Resources) {
        self.accounts.entry(account).or_default().charge(r);
    }

    pub fn uncharge(&mut self, account: AccountId, r: Resources) {
        self.accounts.get_mut(&account).expect("uncharging an account that was charged").uncharge(r);
    }

    /// Set (or with `None` clear) a cap. Whatever is charged now may stay under a lowered
    /// cap; it may only shrink. `preemptible_now` counts the account's running preemptible
    /// GPUs by priority, tallied from then on while it has a cap.
    pub fn set_quota(
        &mut self,
        id: AccountId,
        quota: Option<Quota>,
        preemptible_now: impl FnOnce() -> BTreeMap<Priority, u32>,
    ) {
        let account = self.accounts.entry(id).or_default();
        let (was_capped, capped) = (account.quota.is_some(), quota.is_some());
        account.quota = quota;
        account.grandfathered = account.charged;
        match (was_capped, capped) {
            (false, true) => {
                self.capped += 1;
                self.accounts.get_mut(&id).expect("just set").preemptible_gpus = preemptible_now();
            }
            (true, false) => {
                self.capped -= 1;
                self.accounts.get_mut(&id).expect("just set").preemptible_gpus.clear();
            }
            _ => {}
        }
    }

    /// A restored run or hold may hold more than a cap now allows: keep it, as a lowered
    /// cap does.
    pub fn grandfather_if_over(&mut self, account: AccountId) {
        let account = self.accounts.get_mut(&account).expect("charged by start or reserve");
        if !account.within_quota() {
            account.grandfathered = account.charged;
        }
    }

    /// What a lowered cap grandfathered for `accounts`, before a charge moves between jobs
    /// (a victim to its preemptor's hold, a hold to the running job): see
    /// `keep_grandfathered`.
    pub fn grandfathered_of(&self, accounts: impl Iterator<Item = AccountId>) -> Grandfathered {
        let mut out = [None; 2];
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
            a.grandfathered = g.min_each(a.charged);
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
        if self.capped == 0 || gpus == 0 {
            return;
        }
        for account in accounts {
            let account = self.accounts.get_mut(&account).expect("charged at start");
            if account.quota.is_none() {
                continue;
            }
            if running {
                *account.preemptible_gpus.entry(priority).or_default() += gpus;
            } else {
                let tally = account.preemptible_gpus.get_mut(&priority).expect("tallied at start");
                *tally -= gpus;
                if *tally == 0 {
                    account.preemptible_gpus.remove(&priority);
                }
            }
        }
    }

    /// The accounts it knows, in id order: what `check` expects its figures in.
    pub fn account_ids(&self) -> Vec<AccountId> {
        self.accounts.keys().copied().collect()
    }

    /// Is the account capped? (`false` for an account it does not know.)
    pub fn is_capped(&self, account: AccountId) -> bool {
        self.get(account).is_some_and(|a| a.quota.is_some())
    }

    /// The ledger against what the jobs add up to: `charged` and `preemptible` per account,
    /// in the order of `account_ids` (`preemptible` counted for capped accounts only), the
    /// count of capped accounts, and every account within its cap or what the cap
    /// grandfathered.
    pub fn check(&self, charged: &[Resources], preemptible: &[BTreeMap<Priority, u32>]) -> Result<(), String> {
        assert_eq!(
            (charged.len(), preemptible.len()),
            (self.accounts.len(), self.accounts.len()),
            "one figure per account"
        );
        let capped = self.accounts.values().filter(|a| a.quota.is_some()).count();
        if capped != self.capped {
            return Err(format!("{} accounts counted as capped, {capped} have a quota", self.capped));
        }
        for (((id, account), expected), own) in self.accounts.iter().zip(charged).zip(preemptible) {
            if account.charged != *expected {
                return Err(format!("{id} charged {} but its jobs add up to {expected}", account.charged));
            }
            if account.preemptible_gpus != *own {
                return Err(format!("{id} tallies {:?} preemptible GPUs, its jobs {own:?}", account.preemptible_gpus));
            }
            if !account.within_quota() {
                return Err(format!("{id} charged {} over its quota {:?}", account.charged, account.quota));
            }
        }
        Ok(())
    }

    /// For the invariant tests: break the ledger on purpose.
    #[cfg(test)]
    pub fn account_mut(&mut self, account: AccountId) -> &mut Account {
        self.accounts.get_mut(&account).expect("known")
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
) -> [Resources; 2] {
    let mut charges = [Resources::ZERO; 2];
    for (k, account) in accounts.enumerate() {
        let theirs = leaving
            .clone()
            .filter_map(|(mut of, r)| of.any(|a| a == account).then_some(r))
            .fold(Resources::ZERO, Resources::plus);
        charges[k] = total.saturating_minus(theirs);
    }
    charges
}
