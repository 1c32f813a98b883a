//! Fair sharing inside a priority tier: which tenant's job a cycle asks first among jobs of
//! the same priority.
//!
//! # The formula
//!
//! For each account (a project, and a user inside it) and each resource r (GPUs, CPU,
//! memory), with `C_r` the capacity of all nodes and `w` the account's weight (default 1):
//!
//! - `alloc_r` is what the account's jobs hold now (running, and terminating until they exit);
//! - `past_r` is `alloc_r` smoothed over time with half-life `H`: between two changes of
//!   `alloc_r`, `past_r(t) = alloc_r + (past_r(t0) - alloc_r) * 2^(-(t - t0) / H)`. It is the
//!   account's recent average holding, in the same unit as `alloc_r` (an account that held
//!   `A` for long has `past_r = A`; one that stopped `H` ago has half of it left). With
//!   `H = 0` it equals `alloc_r`;
//! - `share = max_r ((alloc_r + past_r) / C_r) / w`: weighted dominant-resource share of
//!   what it holds now plus what it held recently.
//!
//! Within one priority, a cycle asks the job whose project has the least share first, then
//! (within a project, or between projects of equal share) the one whose user has the least
//! share, then queue order (submit time, id). A start raises its accounts' `alloc` at once,
//! so the next job asked is chosen with that start counted: a tenant that floods a tier
//! gets its turn after each other tenant's, not before all of them. Priorities still come
//! first: fair sharing never lets a lower-priority job start before a higher one that can.
//!
//! Properties (tests: core scenarios 84 to 87, this module's unit tests, and the
//! simulator's `fair_share_weights_hold_over_time`): weights are respected over time
//! (a tenant of weight 2 holds about twice what one of weight 1 holds when both always
//! wait), the half-life behaves (a tenant that burst yields to one that did not, and the
//! memory halves every `H`), a newcomer is not starved (its first job goes before the next
//! job of a tenant already holding GPUs), and a tenant alone still gets everything.
//!
//! The arithmetic is `f64`, done in the same order on every run: the same events give the
//! same shares, so decisions stay deterministic.

use std::cell::Cell;
use std::collections::{BTreeMap, HashMap};

use crate::types::{AccountId, RecentUsage, Resources, Time};

/// What a tenant holds and held, for its share.
#[derive(Clone, Debug, Default)]
struct Usage {
    alloc: Resources,
    /// `past_r` as of `at`, per resource (GPUs, CPU, memory).
    past: [f64; 3],
    at: Time,
    /// The share last worked out, and for when: a cycle reads the same account's share at
    /// the same `now` many times (its jobs ranked, reservations compared, victims weighed),
    /// and each reading would otherwise decay `past` again (an `exp2`) and look up the
    /// weight. Cleared by every change of the usage, the weights or the capacity; the same
    /// arithmetic gives the same bits, so it never changes a decision.
    memo: Cell<Option<(Time, f64)>>,
}

/// The memo is a cache, not state: two ledgers are equal when their usage is.
impl PartialEq for Usage {
    fn eq(&self, other: &Usage) -> bool {
        (self.alloc, self.past, self.at) == (other.alloc, other.past, other.at)
    }
}

/// A job's place among the jobs of its priority: (project share, user share) as ordered
/// bits (`FairShares::share_bits`; shares are never negative, so their IEEE bits order as
/// the numbers do).
pub(crate) type FairKey = (u64, u64);

/// The fair-share ledger: per account, its holding and its recent average holding.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct FairShares {
    /// Off: nothing is tracked (the policy orders a priority by submit time).
    enabled: bool,
    half_life_ms: u64,
    capacity: Resources,
    /// Hashed with a fixed key: read and changed at every start and exit, never listed in
    /// an order a decision reads (`holdings` is compared as a set).
    accounts: HashMap<AccountId, Usage, foldhash::fast::FixedState>,
    weights: BTreeMap<AccountId, u32>,
}

fn as_f64(r: Resources) -> [f64; 3] {
    [f64::from(r.gpus), r.cpu_millis as f64, r.memory_mib as f64]
}

/// `past` carried forward from `usage.at` to `now` (never backwards: a `now` before the
/// last change counts as that change's time).
fn past_at(half_life_ms: u64, usage: &Usage, now: Time) -> [f64; 3] {
    let alloc = as_f64(usage.alloc);
    if half_life_ms == 0 {
        return alloc;
    }
    // No time passed (several changes at one instant, the common case): nothing decayed.
    if now <= usage.at {
        return usage.past;
    }
    let elapsed = now.ms_since(usage.at) as f64;
    let keep = (-elapsed / half_life_ms as f64).exp2();
    let mut past = [0.0; 3];
    for r in 0..3 {
        past[r] = (alloc[r] + (usage.past[r] - alloc[r]) * keep).max(0.0);
    }
    past
}

impl FairShares {
    /// Fair sharing with this half-life, or (`None`) off.
    pub fn new(half_life_ms: Option<u64>) -> FairShares {
        FairShares { enabled: half_life_ms.is_some(), half_life_ms: half_life_ms.unwrap_or(0), ..FairShares::default() }
    }

    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// A node joins (`add`) or leaves the capacity of all nodes, the shares' denominators.
    pub fn change_capacity(&mut self, node: Resources, add: bool) {
        self.capacity = if add { self.capacity.plus(node) } else { self.capacity.minus(node) };
        self.forget_shares();
    }

    /// Every memo of a share goes (the capacity or a weight changed).
    fn forget_shares(&mut self) {
        for usage in self.accounts.values_mut() {
            usage.memo.set(None);
        }
    }

    /// An account's weight; 1 unless set. A weight of 0 is refused by the caller.
    pub fn set_weight(&mut self, account: AccountId, weight: u32) {
        debug_assert!(weight > 0, "weights are positive");
        if weight == 1 {
            self.weights.remove(&account);
        } else {
            self.weights.insert(account, weight);
        }
        self.forget_shares();
    }

    pub fn weight(&self, account: AccountId) -> u32 {
        self.weights.get(&account).copied().unwrap_or(1)
    }

    /// The accounts now hold `delta` more (`add`) or less.
    pub fn change(&mut self, accounts: impl Iterator<Item = AccountId>, delta: Resources, add: bool, now: Time) {
        if !self.enabled {
            return;
        }
        let half_life_ms = self.half_life_ms;
        for account in accounts {
            let usage = self.accounts.entry(account).or_insert(Usage { at: now, ..Usage::default() });
            let now = now.max(usage.at);
            usage.past = past_at(half_life_ms, usage, now);
            usage.alloc = if add { usage.alloc.plus(delta) } else { usage.alloc.minus(delta) };
            usage.at = now;
            usage.memo.set(None);
            let settled = usage.alloc == Resources::ZERO && usage.past.iter().all(|p| *p < 1e-9);
            if settled {
                self.accounts.remove(&account);
            }
        }
    }

    /// The account's share at `now` (see the formula above).
    pub fn share(&self, account: AccountId, now: Time) -> f64 {
        let Some(usage) = self.accounts.get(&account) else { return 0.0 };
        if let Some((_, share)) = usage.memo.get().filter(|(at, _)| *at == now) {
            return share;
        }
        let share = self.share_of(account, usage, now);
        usage.memo.set(Some((now, share)));
        share
    }

    /// `share` worked out.
    fn share_of(&self, account: AccountId, usage: &Usage, now: Time) -> f64 {
        let past = past_at(self.half_life_ms, usage, now);
        let alloc = as_f64(usage.alloc);
        let capacity = as_f64(self.capacity);
        let mut dominant: f64 = 0.0;
        for r in 0..3 {
            if capacity[r] > 0.0 {
                dominant = dominant.max((alloc[r] + past[r]) / capacity[r]);
            }
        }
        dominant / f64::from(self.weight(account))
    }

    /// The account's share as ordered bits (0 with fair sharing off): what rule 2b of the
    /// preemption order compares.
    pub fn share_bits(&self, account: AccountId, now: Time) -> u64 {
        if !self.enabled {
            return 0;
        }
        self.share(account, now).max(0.0).to_bits()
    }

    /// A job's place among the jobs of its priority (`FairKey`): its project's share, then
    /// its user's, as ordered bits.
    pub(crate) fn key(&self, project: AccountId, user: AccountId, now: Time) -> FairKey {
        (self.share_bits(project, now), self.share_bits(user, now))
    }

    /// Every account's recent average (`past_r`) at `now`, in whole units, leaving out those
    /// that round to nothing; in account order.
    pub fn recent_usage(&self, now: Time) -> Vec<(AccountId, RecentUsage)> {
        if !self.enabled {
            return Vec::new();
        }
        let mut out: Vec<(AccountId, RecentUsage)> = self
            .accounts
            .iter()
            .map(|(account, usage)| {
                let past = past_at(self.half_life_ms, usage, now);
                let recent = RecentUsage {
                    gpu_milli: (past[0] * 1000.0).round() as u64,
                    cpu_millis: past[1].round() as u64,
                    memory_mib: past[2].round() as u64,
                };
                (*account, recent)
            })
            .filter(|(_, recent)| *recent != RecentUsage::default())
            .collect();
        out.sort_unstable_by_key(|(account, _)| *account);
        out
    }

    /// An account's recent average as saved at `as_of` (`Event::RestoreRecentUsage`): it
    /// replaces what the account's restored runs gave it, and from `as_of` on moves toward
    /// what the account holds now.
    pub fn restore_recent(&mut self, account: AccountId, recent: RecentUsage, as_of: Time) {
        if !self.enabled {
            return;
        }
        let past = [recent.gpu_milli as f64 / 1000.0, recent.cpu_millis as f64, recent.memory_mib as f64];
        let usage = self.accounts.entry(account).or_insert(Usage { at: as_of, ..Usage::default() });
        usage.past = past;
        usage.at = as_of;
        usage.memo.set(None);
        if usage.alloc == Resources::ZERO && recent == RecentUsage::default() {
            self.accounts.remove(&account);
        }
    }

    /// Accounts holding something, with what they hold, in no particular order.
    pub fn holdings(&self) -> impl Iterator<Item = (AccountId, Resources)> + '_ {
        self.accounts.iter().filter(|(_, u)| u.alloc != Resources::ZERO).map(|(a, u)| (*a, u.alloc))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: u64 = 3_600_000;

    fn shares() -> FairShares {
        let mut f = FairShares::new(Some(H));
        f.change_capacity(Resources::new(8, 0, 0), true);
        f
    }

    #[test]
    fn the_memory_of_a_burst_halves_every_half_life() {
        let mut f = shares();
        let a = AccountId(1);
        f.change([a].into_iter(), Resources::gpus(8), true, Time(0));
        // Held for ten half-lives: the average has nearly caught up with the holding.
        f.change([a].into_iter(), Resources::gpus(8), false, Time(10 * H));
        let right_after = f.share(a, Time(10 * H));
        assert!((right_after - 1.0).abs() < 0.001, "{right_after}");
        let one_later = f.share(a, Time(11 * H));
        assert!((one_later - right_after / 2.0).abs() < 1e-9, "{one_later} vs {right_after}");
        let two_later = f.share(a, Time(12 * H));
        assert!((two_later - right_after / 4.0).abs() < 1e-9, "{two_later}");
    }

    #[test]
    fn a_weight_divides_the_share() {
        let mut f = shares();
        let (a, b) = (AccountId(1), AccountId(2));
        f.set_weight(b, 2);
        f.change([a, b].into_iter(), Resources::gpus(4), true, Time(0));
        assert_eq!(f.share(a, Time(0)), 2.0 * f.share(b, Time(0)));
    }

    /// A recent average handed back after a restart decays from when it was saved toward
    /// what the account holds now, by the formula: `A + (P - A) * 2^(-t / H)`.
    #[test]
    fn a_restored_recent_average_decays_toward_what_is_held_now() {
        let mut f = shares();
        let a = AccountId(1);
        // Restored runs: the account holds 2 GPUs now (at 10 H).
        f.change([a].into_iter(), Resources::gpus(2), true, Time(10 * H));
        // Saved at 9 H: a recent average of 6 GPUs.
        f.restore_recent(a, RecentUsage { gpu_milli: 6_000, ..RecentUsage::default() }, Time(9 * H));
        let past_at = |t: u64| f.share(a, Time(t)) * 8.0 - 2.0;
        // One half-life after it was saved: 2 + (6 - 2) / 2 = 4.
        assert!((past_at(10 * H) - 4.0).abs() < 1e-9, "{}", past_at(10 * H));
        assert!((past_at(11 * H) - 3.0).abs() < 1e-9, "{}", past_at(11 * H));
        // What is listed to save again is that average, in thousandths of a GPU.
        assert_eq!(f.recent_usage(Time(11 * H)), [(a, RecentUsage { gpu_milli: 3_000, ..RecentUsage::default() })]);
        // Nothing held and nothing remembered: the account is forgotten.
        let b = AccountId(2);
        f.restore_recent(b, RecentUsage::default(), Time(9 * H));
        assert_eq!(f.share(b, Time(10 * H)), 0.0);
        assert!(f.recent_usage(Time(10 * H)).iter().all(|(account, _)| *account != b));
        // Fair sharing off: nothing is listed or taken.
        let mut off = FairShares::new(None);
        off.restore_recent(a, RecentUsage { gpu_milli: 6_000, ..RecentUsage::default() }, Time(0));
        assert!(off.recent_usage(Time(0)).is_empty());
    }

    /// The share read twice at one instant is remembered; a change of the holding, the
    /// weight or the capacity at that same instant is seen at the next reading.
    #[test]
    fn a_remembered_share_never_outlives_a_change() {
        let mut f = shares();
        let a = AccountId(1);
        f.change([a].into_iter(), Resources::gpus(4), true, Time(H));
        // Half of the 8 GPUs held, and (held since H only) none of it remembered yet.
        assert_eq!(f.share(a, Time(H)), 0.5);
        assert_eq!(f.share(a, Time(H)), 0.5);
        f.change([a].into_iter(), Resources::gpus(2), true, Time(H));
        assert_eq!(f.share(a, Time(H)), 0.75);
        f.set_weight(a, 3);
        assert_eq!(f.share(a, Time(H)), 0.25);
        f.change_capacity(Resources::new(8, 0, 0), true);
        assert_eq!(f.share(a, Time(H)), 0.125);
        f.restore_recent(a, RecentUsage { gpu_milli: 2_000, ..RecentUsage::default() }, Time(H));
        // (6 held + 2 remembered) / 16 GPUs / weight 3.
        assert!((f.share(a, Time(H)) - 8.0 / 48.0).abs() < 1e-12, "{}", f.share(a, Time(H)));
        // Another instant is worked out afresh: one half-life on, the average is halfway
        // from 2 to the 6 held.
        assert!((f.share(a, Time(2 * H)) - 10.0 / 48.0).abs() < 1e-12, "{}", f.share(a, Time(2 * H)));
    }

    #[test]
    fn without_a_half_life_the_share_is_what_is_held_now() {
        let mut f = FairShares::new(Some(0));
        f.change_capacity(Resources::new(8, 64_000, 0), true);
        let a = AccountId(1);
        f.change([a].into_iter(), Resources::new(1, 32_000, 0), true, Time(0));
        // CPU dominates: 32 of 64 cores, held now and (no history) as the average.
        assert_eq!(f.share(a, Time(5)), 1.0);
        f.change([a].into_iter(), Resources::new(1, 32_000, 0), false, Time(9));
        assert_eq!(f.share(a, Time(9)), 0.0);
    }
}
