//! Start-time estimates: when each pending job is expected to start, and its place in the
//! queue (`Scheduler::forecast`).
//!
//! The forecast plays the queue forward from `now`, as the scheduler would if nothing new
//! arrived and every run lasted as expected (`estimate.rs`):
//! 1. **Room.** Each schedulable node has its free room now, and gets back what each job
//!    running or terminating on it holds when that job is expected to end; GPUs held for a
//!    preemptor go to it, not back to the free room.
//! 2. **Usage.** Each account with a cap (a hard quota, a borrowing limit) and each member
//!    of a cohort has what is charged to it now, and is uncharged when each job charged to
//!    it is expected to end. A cohort's level at any time is what its members use, each at
//!    least its guarantee (the part of its nominal quota it does not lend: set aside while
//!    unused, `ledger.rs` rule 2), and a job of a member fits where that level, with the
//!    job counted, stays within the cohort's capacity over its whole run.
//! 3. **Holds.** A job waiting for its victims starts when the last of them is expected to
//!    be gone, and then keeps its GPUs for its expected run.
//! 4. **Reservations.** A job holding a reservation (`plan.rs`) starts at its reservation's
//!    time, on its nodes, unless a job ranked above it takes that room first: such a job is
//!    not bound by the reservation (a cycle asks it first), so where it fits only on the
//!    reservation's room, the reservations in its way give way (the lowest-ranked first,
//!    and only those it needs) and their jobs are played forward as any other (step 5), not
//!    before their reservation's time (the earliest their room was expected). So is the job
//!    of a reservation whose room is no longer there (the plan is brought up to date at the
//!    start of the next cycle, after this cycle's starts and holds).
//! 5. **Everyone else** is played forward as the cycle treats it. From `now`, at each time
//!    room frees or usage falls, the jobs not yet started are taken in the order of step 6, and
//!    each one starts if its replicas fit in the room left for its whole expected run
//!    (placed as the policy places them; a reservation's room is left to it) and every
//!    capped account it is charged to stays within its cap. A job that does not fit but
//!    may preempt takes the room of jobs started before it in the forecast at a lower
//!    priority (the most recently started of the lowest priority first, at most
//!    `Limits::victims_per_preemption_max`); they go back to waiting. Under strict order
//!    (no backfill) a job that does not fit stops the walk at that time, as it stops the
//!    cycle. A job's estimate is the first time it starts.
//! 6. **Position**: a job's rank in the order the next cycle considers the queue, 1 for the
//!    first; jobs waiting for their victims count. That is queue order, but with fair
//!    sharing each priority's tenants by their shares now, least first
//!    (`Scheduler::pending_by_rank`).
//!
//! What it cannot know, and so does not claim:
//! - jobs yet to arrive: a higher-priority job submitted later goes ahead;
//! - preemptions to come: a job that will preempt once a run's protection or its own
//!   preemption delay ends is forecast to wait for that run to end;
//! - how fair sharing's order moves: a cycle counts each start before it chooses the next
//!   job, so a tenant's share rises as its jobs start; the forecast orders each tier by the
//!   shares now, a tenant's jobs all before those of any tenant holding more;
//! - reclaims to come: a member within its nominal quota is forecast to wait for the
//!   borrowers' runs to end, as a preemption to come (above).
//!
//! Limits: `jobs_max` jobs forecast per call (the rest get their position only), and
//! [`FORECAST_TIMES_MAX`] times played forward per call (a job not started by the last one
//! is "not before" it).

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound::{Excluded, Unbounded};

use crate::cluster::PlacedEnd;
use crate::fairshare::FairKey;
use crate::ids::{GroupKey, JobIx};
use crate::model::JobState;
use crate::placement::{Candidate, choose_nodes};
use crate::scheduler::Scheduler;
use crate::types::{AccountId, GpuModel, JobId, NodeId, Priority, ResourceKind, Resources, Time};

/// Times a forecast plays forward: every time room frees or usage falls is one.
pub const FORECAST_TIMES_MAX: usize = 4_096;

/// When a pending job is expected to start.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum StartEstimate {
    /// At this time (`now`: it starts at the next cycle, or waits only for its victims).
    At(Time),
    /// Not before this time: the forecast stopped looking there (`FORECAST_TIMES_MAX`).
    NotBefore(Time),
    /// At no time the forecast sees: no node it may use holds it, or it asks more than a cap
    /// of its accounts allows, even once everything running has ended.
    NotPlaceable,
    /// Not forecast: ranked beyond the jobs a call forecasts (`jobs_max`).
    NotForecast,
}

impl StartEstimate {
    /// The time, for `At`.
    pub fn at(self) -> Option<Time> {
        match self {
            StartEstimate::At(t) => Some(t),
            _ => None,
        }
    }
}

/// A pending job's place in the queue and expected start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Estimate {
    pub job: JobId,
    /// 1 for the job the next cycle considers first.
    pub position: u32,
    pub start: StartEstimate,
}

impl Scheduler {
    /// Every pending job's position and expected start, in queue order; the first
    /// `jobs_max` are forecast (module doc).
    pub fn forecast(&self, now: Time, jobs_max: usize) -> Vec<Estimate> {
        self.forecast_where(now, jobs_max, None)
    }

    /// The estimates of the `wanted` jobs that are pending, in queue order: the same as
    /// `forecast` gives them, played forward only until they have all started; the queue
    /// beyond the first `jobs_max` is read only as far as the last wanted job.
    pub fn forecast_jobs(&self, now: Time, wanted: &BTreeSet<JobId>, jobs_max: usize) -> Vec<Estimate> {
        self.forecast_where(now, jobs_max, Some(wanted))
    }

    /// The pending jobs in the order a cycle would ask them now (step 6): queue order, but
    /// with fair sharing (and backfill) each priority's jobs by their project's and then
    /// user's share now, least first, each tenant's in queue order (`PlanRank`). A cycle
    /// counts each start before it chooses the next job; this order counts none.
    pub fn pending_by_rank(&self, now: Time) -> Vec<JobId> {
        if !self.orders_by_share() {
            return self.queue.in_order().collect();
        }
        // Many jobs share a tenant: each tenant's key is worked out once.
        let mut keys: BTreeMap<(AccountId, AccountId), FairKey> = BTreeMap::new();
        let mut ranked: Vec<crate::plan::PlanRank> = self
            .queue
            .in_order()
            .map(|id| {
                let job = &self.jobs[self.jobs.ix_of(id).expect("a queued job exists")];
                let (project, user) = (job.spec.project, job.spec.user);
                let shares = *keys.entry((project, user)).or_insert_with(|| self.fair.key(project, user, now));
                (job.key.rank, shares, job.key)
            })
            .collect();
        ranked.sort_unstable();
        ranked.into_iter().map(|(.., key)| key.id).collect()
    }

    fn forecast_where(&self, now: Time, jobs_max: usize, wanted: Option<&BTreeSet<JobId>>) -> Vec<Estimate> {
        // Step 6: positions. Every job forecast counts, wanted or not: a job ranked lower
        // may start first and delay one ranked higher.
        let mut wanted_unseen = wanted.map_or(usize::MAX, BTreeSet::len);
        // Queue order is read lazily, as far as needed; the order by share is sorted whole.
        let in_order: Box<dyn Iterator<Item = JobId> + '_> = match self.orders_by_share() {
            true => Box::new(self.pending_by_rank(now).into_iter()),
            false => Box::new(self.queue.in_order()),
        };
        let order: Vec<(JobId, JobIx)> = in_order
            .enumerate()
            .take_while(|&(rank, id)| {
                let more = rank < jobs_max || wanted_unseen > 0;
                if wanted.is_some_and(|w| w.contains(&id)) {
                    wanted_unseen -= 1;
                }
                more
            })
            .map(|(_, id)| (id, self.jobs.ix_of(id).expect("a queued job exists")))
            .collect();
        let mut world = World::new(self, now);
        let jobs: Vec<Queued> = order
            .iter()
            .take(jobs_max)
            .map(|&(_, ix)| {
                let run_ms = self.expected_run_ms(ix).max(1);
                let group = self.jobs[ix].group_key();
                Queued {
                    ix,
                    run_ms,
                    may_preempt: self.config.policy.preemption && group.may_preempt,
                    key: (group, run_ms),
                    gpus: i64::from(self.jobs[ix].spec.total().gpus),
                }
            })
            .collect();
        for (rank, &(id, ix)) in order.iter().enumerate().take(jobs_max) {
            if let Some(&at) = world.gave_way.get(&id) {
                world.not_before.insert(rank, at);
            }
            // Few jobs start at a known time: look among the reservations only for those.
            if world.fixed.contains_key(&id)
                && let Some(r) = world.reserved.iter_mut().find(|r| r.ix == ix)
            {
                r.rank = rank;
            }
        }
        let mut starts: Vec<StartEstimate> = vec![StartEstimate::NotForecast; order.len()];
        let mut waiting = Waiting::default();
        // Jobs wanted that have not started yet in the forecast: it ends when none is left.
        let mut wanted_left = 0usize;
        for (rank, &(id, ix)) in order.iter().enumerate().take(jobs_max) {
            starts[rank] = match world.fixed.get(&id).copied() {
                Some(at) => StartEstimate::At(at),
                None if !world.could_ever_start(self, ix) => StartEstimate::NotPlaceable,
                None => {
                    waiting.insert(rank, jobs[rank].gpus);
                    if wanted.is_none_or(|w| w.contains(&id)) {
                        wanted_left += 1;
                    }
                    StartEstimate::NotPlaceable
                }
            };
        }
        let first_starts = |starts: &mut [StartEstimate], ranks: &[usize], t: Time, left: &mut usize| {
            for &rank in ranks {
                if starts[rank] == StartEstimate::NotPlaceable {
                    starts[rank] = StartEstimate::At(t);
                    if wanted.is_none_or(|w| w.contains(&order[rank].0)) {
                        *left -= 1;
                    }
                }
            }
        };
        // Step 5, one time after another.
        let mut t = now;
        let mut times = 0;
        let (mut started, mut released) = (Vec::new(), Vec::new());
        // A wanted job's reservation may still give way while a job ranked above waits.
        let may_give_way = |world: &World, waiting: &Waiting, t: Time| {
            let first_waiting = waiting.first();
            world.reserved.iter().any(|r| {
                !r.released
                    && r.rank < jobs.len()
                    && t < r.until
                    && first_waiting.is_some_and(|w| w < r.rank)
                    && wanted.is_none_or(|w| w.contains(&order[r.rank].0))
            })
        };
        while wanted_left > 0 || may_give_way(&world, &waiting, t) {
            world.walk(self, t, &jobs, &mut waiting, &mut started, &mut released);
            // A reservation that gave way: its job waits like any other from then on.
            for &rank in &released {
                starts[rank] = StartEstimate::NotPlaceable;
                if wanted.is_none_or(|w| w.contains(&order[rank].0)) {
                    wanted_left += 1;
                }
            }
            released.clear();
            first_starts(&mut starts, &started, t, &mut wanted_left);
            started.clear();
            times += 1;
            let next = world.times.range((Excluded(t), Unbounded)).next().copied();
            match next {
                Some(next) if times < FORECAST_TIMES_MAX => t = next,
                Some(next) => {
                    for rank in waiting.iter() {
                        if starts[rank] == StartEstimate::NotPlaceable {
                            starts[rank] = StartEstimate::NotBefore(next);
                        }
                    }
                    break;
                }
                None => break,
            }
        }
        order
            .iter()
            .zip(starts)
            .enumerate()
            .filter(|(_, ((id, _), _))| wanted.is_none_or(|w| w.contains(id)))
            .map(|(rank, (&(job, _), start))| Estimate {
                job,
                position: u32::try_from(rank + 1).unwrap_or(u32::MAX),
                start,
            })
            .collect()
    }
}

/// The jobs not started in the forecast, by rank, and by the GPUs they need (a handful of
/// distinct sizes): a walk looks only at those that may fit in what is free.
#[derive(Default)]
struct Waiting {
    by_gpus: BTreeMap<i64, BTreeSet<usize>>,
}

impl Waiting {
    fn insert(&mut self, rank: usize, gpus: i64) {
        self.by_gpus.entry(gpus).or_default().insert(rank);
    }

    fn remove(&mut self, rank: usize, gpus: i64) {
        if let Some(ranks) = self.by_gpus.get_mut(&gpus) {
            ranks.remove(&rank);
            if ranks.is_empty() {
                self.by_gpus.remove(&gpus);
            }
        }
    }

    /// The first rank after `after` of a job needing at most `gpus_max` GPUs.
    fn next_after(&self, after: Option<usize>, gpus_max: i64) -> Option<usize> {
        let from = after.map_or(0, |r| r + 1);
        self.by_gpus.range(..=gpus_max).filter_map(|(_, ranks)| ranks.range(from..).next().copied()).min()
    }

    fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.by_gpus.values().flatten().copied()
    }

    /// The first rank waiting.
    fn first(&self) -> Option<usize> {
        self.by_gpus.values().filter_map(|ranks| ranks.first().copied()).min()
    }
}

/// A queued job as the forecast reads it, computed once per forecast.
struct Queued {
    ix: JobIx,
    run_ms: u64,
    key: (GroupKey, u64),
    gpus: i64,
    may_preempt: bool,
}

/// An account's usage or a job's charge in amounts (`ResourceKind::amount`).
fn usage_of(r: Resources) -> Amount {
    Amount(ResourceKind::ALL.map(|k| k.amount(r) as i64))
}

/// Is `level` within `cap` in every dimension that has one?
fn within(cap: [Option<u64>; 3], level: Amount) -> bool {
    (0..3).all(|k| cap[k].is_none_or(|cap| level.0[k] <= cap as i64))
}

/// Far enough to mean "for good".
const FOREVER: Time = Time(u64::MAX);

/// GPUs, CPU and memory, signed: a node's CPU may be over-booked while victims leave.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Amount([i64; 3]);

impl Amount {
    /// GPUs with shares rounded up (`ResourceKind::of`): the forecast counts a share whole.
    fn of(r: Resources) -> Amount {
        Amount([ResourceKind::Gpu.of(r) as i64, r.cpu_millis as i64, r.memory_mib as i64])
    }

    fn negated(self) -> Amount {
        Amount(self.0.map(|v| -v))
    }

    fn plus(self, other: Amount) -> Amount {
        Amount(std::array::from_fn(|k| self.0[k] + other.0[k]))
    }

    fn min_each(self, other: Amount) -> Amount {
        Amount(std::array::from_fn(|k| self.0[k].min(other.0[k])))
    }

    fn max_each(self, other: Amount) -> Amount {
        Amount(std::array::from_fn(|k| self.0[k].max(other.0[k])))
    }

    /// As resources, what is below zero counting as none.
    fn clamped(self) -> Resources {
        let [g, c, m] = self.0.map(|v| v.max(0) as u64);
        Resources::new(u32::try_from(g).unwrap_or(u32::MAX), c, m)
    }
}

/// A step function of time from `now` on: `value[k]` holds from `at[k]` until `at[k + 1]`.
#[derive(Clone, Debug)]
struct Steps {
    at: Vec<Time>,
    value: Vec<Amount>,
}

impl Steps {
    fn new(now: Time, value: Amount) -> Steps {
        Steps { at: vec![now], value: vec![value] }
    }

    /// The step in force at `t` (not before the first).
    fn index(&self, t: Time) -> usize {
        self.at.partition_point(|&a| a <= t).saturating_sub(1)
    }

    /// The step that begins at `t`, made if need be.
    fn split(&mut self, t: Time) -> usize {
        let k = self.index(t);
        if self.at[k] >= t {
            return k;
        }
        self.at.insert(k + 1, t);
        self.value.insert(k + 1, self.value[k]);
        k + 1
    }

    /// Add `d` over `[from, until)`.
    fn add(&mut self, from: Time, until: Time, d: Amount) {
        if from >= until {
            return;
        }
        let first = self.split(from);
        let end = if until == FOREVER { self.at.len() } else { self.split(until) };
        for v in &mut self.value[first..end] {
            *v = v.plus(d);
        }
    }

    /// The value at `t`.
    fn at(&self, t: Time) -> Amount {
        self.value[self.index(t)]
    }

    /// The least of each dimension over `[from, until)`.
    fn min_over(&self, from: Time, until: Time) -> Amount {
        self.fold_over(from, until, Amount::min_each)
    }

    /// The most of each dimension over `[from, until)`.
    fn max_over(&self, from: Time, until: Time) -> Amount {
        self.fold_over(from, until, Amount::max_each)
    }

    fn fold_over(&self, from: Time, until: Time, f: fn(Amount, Amount) -> Amount) -> Amount {
        let k = self.index(from);
        let mut out = self.value[k];
        for j in k + 1..self.at.len() {
            if self.at[j] >= until {
                break;
            }
            out = f(out, self.value[j]);
        }
        out
    }
}

/// A capped account, or a member of a cohort, in the forecast: usage and caps in amounts
/// (`ResourceKind::amount`: thousandths of a GPU), exact as the ledger's, so that shares of
/// one GPU add up as they do there.
struct Usage {
    steps: Steps,
    cap: [Option<u64>; 3],
}

/// A cohort in the forecast (step 2): its capacity, and each member with its guarantee.
struct CohortCaps {
    /// Its capacity, in amounts (`ResourceKind::amount`).
    cap: [Option<u64>; 3],
    /// Each member with its guarantee, in amounts.
    members: Vec<(AccountId, Amount)>,
    /// What its members without a guarantee use together, kept as their charges change
    /// (`World::charge`): most members lend all they do not use, so the level at a time is
    /// this plus the few members with a guarantee, each at least at it.
    lending_all: Steps,
}

impl CohortCaps {
    fn guarantee_of(&self, member: AccountId) -> Amount {
        self.members.iter().find(|(m, _)| *m == member).map_or(Amount::default(), |(_, g)| *g)
    }

    fn guaranteed(&self) -> impl Iterator<Item = (AccountId, Amount)> + '_ {
        self.members.iter().copied().filter(|(_, g)| *g != Amount::default())
    }
}

/// The room and usage the forecast plays forward.
struct World {
    /// Schedulable nodes, in id order.
    nodes: Vec<NodeId>,
    room: Vec<Steps>,
    /// The GPUs of all of them together: a job needing more over a window fits nowhere.
    gpus_total: Steps,
    accounts: BTreeMap<AccountId, Usage>,
    /// Cohorts, checked by their members' usage instead of their own (step 2).
    cohorts: BTreeMap<AccountId, CohortCaps>,
    /// The members of cohorts that lend all they do not use, with their cohort: their
    /// charges move its `lending_all`.
    lending_all_in: BTreeMap<AccountId, AccountId>,
    /// When room may grow or usage fall: the candidate start times.
    times: BTreeSet<Time>,
    /// Starts known before the walk: jobs waiting for their victims, and reservations.
    fixed: BTreeMap<JobId, Time>,
    /// The reservations of step 4 that hold, in plan order.
    reserved: Vec<Reserved>,
    /// Jobs whose reservation gave way, by rank: not started before its time.
    not_before: BTreeMap<usize, Time>,
    /// Jobs whose reservation's room was gone before the walk, with its time.
    gave_way: BTreeMap<JobId, Time>,
    /// Jobs started in the forecast and not preempted in it, by rank: what a later
    /// preemptor may take back.
    started: BTreeMap<usize, Started>,
    /// GPUs those of them that may be preempted hold, by priority.
    preemptible_gpus: BTreeMap<Priority, i64>,
    /// Where the last job started took its room (scratch).
    last_room: Vec<(usize, Resources)>,
    /// The nodes a job could start on (scratch).
    candidates: Vec<Candidate>,
    /// Shapes (model, replica, replicas) some set of the nodes holds, as found.
    placeable: BTreeMap<(Option<GpuModel>, Resources, u32), bool>,
    /// Within one walk, the shapes that found no room, with the shortest run that did not
    /// (cleared when room grows: at each time, and when a preemption gives some back).
    no_room: BTreeMap<(Option<GpuModel>, Resources, u32), u64>,
}

/// A reservation of step 4 in the forecast.
struct Reserved {
    ix: JobIx,
    /// Its job's rank (`usize::MAX` until the order is known, and for a job not forecast).
    rank: usize,
    at: Time,
    until: Time,
    /// (node position, what it reserves there).
    room: Vec<(usize, Resources)>,
    /// It gave way to a job ranked above its own (step 4).
    released: bool,
}

/// A job started in the forecast.
struct Started {
    ix: JobIx,
    from: Time,
    until: Time,
    /// (node position, what it holds there).
    room: Vec<(usize, Resources)>,
}

impl World {
    /// Steps 1 to 4 of the module doc.
    fn new(s: &Scheduler, now: Time) -> World {
        let usable: Vec<&crate::cluster::Node> = s.nodes.iter().filter(|n| n.schedulable).collect();
        let mut world = World {
            nodes: usable.iter().map(|n| n.spec.id).collect(),
            room: Vec::with_capacity(usable.len()),
            gpus_total: Steps::new(now, Amount::default()),
            accounts: BTreeMap::new(),
            cohorts: BTreeMap::new(),
            lending_all_in: BTreeMap::new(),
            times: BTreeSet::new(),
            fixed: BTreeMap::new(),
            reserved: Vec::new(),
            not_before: BTreeMap::new(),
            gave_way: BTreeMap::new(),
            started: BTreeMap::new(),
            preemptible_gpus: BTreeMap::new(),
            last_room: Vec::new(),
            candidates: Vec::new(),
            placeable: BTreeMap::new(),
            no_room: BTreeMap::new(),
        };
        // 2. Capped accounts and members of cohorts with what is charged now; cohorts with
        // their members' guarantees.
        for (id, account) in s.ledger.iter() {
            let cap = ResourceKind::ALL.map(|kind| account.cap_amount(kind));
            if let Some(cohort) = &account.cohort {
                let guarantee = |member: AccountId| {
                    let n = s.ledger.get(member).and_then(|m| m.nominal);
                    Amount(ResourceKind::ALL.map(|k| n.map_or(0, |n| k.amount_of_limit(n.guaranteed_of(k)) as i64)))
                };
                let members: Vec<(AccountId, Amount)> = cohort.members.iter().map(|&m| (m, guarantee(m))).collect();
                let used = |m: AccountId| usage_of(s.ledger.get(m).map_or(Resources::ZERO, |a| a.charged));
                let lend_all: Vec<AccountId> =
                    members.iter().filter(|(_, g)| *g == Amount::default()).map(|&(m, _)| m).collect();
                let lending_all = lend_all.iter().fold(Amount::default(), |sum, &m| sum.plus(used(m)));
                world.lending_all_in.extend(lend_all.into_iter().map(|m| (m, id)));
                world.cohorts.insert(id, CohortCaps { cap, members, lending_all: Steps::new(now, lending_all) });
            } else if account.has_cap() || account.nominal.is_some() {
                world.accounts.insert(id, Usage { steps: Steps::new(now, usage_of(account.charged)), cap });
            }
        }
        // 1. Free room now, and what each job there gives back when it ends.
        let mut ended: BTreeMap<JobIx, Time> = BTreeMap::new();
        for node in &usable {
            let cap = node.spec.capacity;
            let free = Amount([
                i64::from(node.available_gpus()),
                cap.cpu_millis as i64 - (node.used.cpu_millis + node.reserved.cpu_millis) as i64,
                cap.memory_mib as i64 - (node.used.memory_mib + node.reserved.memory_mib) as i64,
            ]);
            let mut steps = Steps::new(now, free);
            world.gpus_total.add(now, FOREVER, Amount([free.0[0], 0, 0]));
            for &ix in &node.placed {
                let job = &s.jobs[ix];
                let (JobState::Running { placement, .. } | JobState::Terminating { placement, .. }) = &job.state else {
                    continue;
                };
                let end = *ended.entry(ix).or_insert_with(|| s.expected_end(ix, now));
                let here = placement.replicas().iter().filter(|r| r.node == node.spec.id);
                let freed = PlacedEnd::new(ix, end, job.spec.per_replica, here).gives_back(node.held);
                steps.add(end, FOREVER, Amount::of(freed));
                world.gpus_total.add(end, FOREVER, Amount([i64::from(freed.gpus), 0, 0]));
                world.times.insert(end);
            }
            world.room.push(steps);
        }
        // 2 (cont.). Each running job's charges end with it.
        for (&ix, &end) in &ended {
            world.charge(s, ix, end, FOREVER, true);
        }
        // 3. Jobs waiting for their victims.
        for &ix in s.reserving.values() {
            let job = &s.jobs[ix];
            let JobState::Pending { reservation: Some(r) } = &job.state else { continue };
            let start = s
                .still_terminating(job.spec.id, &r.victims)
                .iter()
                .filter_map(|v| s.jobs.ix_of(*v))
                .map(|v| ended.get(&v).copied().unwrap_or_else(|| s.expected_end(v, now)))
                .fold(now, Time::max);
            let until = start.plus_ms(s.expected_run_ms(ix));
            for (node, count) in crate::scheduler::replicas_per_node(&r.placement) {
                if let Some(i) = world.node_index(node) {
                    let held = Amount::of(job.spec.per_replica.as_whole_gpus().times(count));
                    world.room[i].add(until, FOREVER, held);
                    world.gpus_total.add(until, FOREVER, Amount([held.0[0], 0, 0]));
                }
            }
            // Its hold is charged now; its run ends the charge.
            world.charge(s, ix, until, FOREVER, true);
            world.times.insert(until);
            world.fixed.insert(job.spec.id, start);
        }
        // 4. Reservations, in plan order, where their room is still there.
        for p in &s.plan {
            let until = p.at.plus_ms(s.expected_run_ms(p.ix));
            let room: Vec<(usize, Resources)> =
                p.nodes.iter().filter_map(|&(node, reserved, _)| Some((world.node_index(node)?, reserved))).collect();
            if room.iter().any(|&(i, r)| world.room[i].at(p.at).0[0] < i64::from(r.gpus)) {
                world.gave_way.insert(p.id, p.at);
                world.times.insert(p.at);
                continue;
            }
            for &(i, r) in &room {
                world.take_room(i, p.at, until, r);
            }
            world.charge(s, p.ix, p.at, until, false);
            world.times.insert(until);
            world.fixed.insert(p.id, p.at);
            world.reserved.push(Reserved { ix: p.ix, rank: usize::MAX, at: p.at, until, room, released: false });
        }
        world
    }

    fn node_index(&self, node: NodeId) -> Option<usize> {
        self.nodes.binary_search(&node).ok()
    }

    /// Charge (or, `uncharge`, give back) the job's total to its capped accounts over
    /// `[from, until)`.
    fn charge(&mut self, s: &Scheduler, ix: JobIx, from: Time, until: Time, uncharge: bool) {
        let total = usage_of(s.jobs[ix].spec.total());
        let d = if uncharge { total.negated() } else { total };
        for account in s.charged_accounts(ix) {
            let Some(usage) = self.accounts.get_mut(&account) else { continue };
            usage.steps.add(from, until, d);
            if let Some(cohort) = self.lending_all_in.get(&account).and_then(|c| self.cohorts.get_mut(c)) {
                cohort.lending_all.add(from, until, d);
            }
        }
    }

    fn take_room(&mut self, i: usize, from: Time, until: Time, r: Resources) {
        let d = Amount::of(r).negated();
        self.room[i].add(from, until, d);
        self.gpus_total.add(from, until, Amount([d.0[0], 0, 0]));
    }

    /// Could the job start at all, once everything running has ended: a node set of its
    /// model that holds it, and no cap below what it asks?
    fn could_ever_start(&mut self, s: &Scheduler, ix: JobIx) -> bool {
        let spec = &s.jobs[ix].spec;
        let asks = usage_of(spec.total());
        let capped = s.charged_accounts(ix).filter_map(|a| self.accounts.get(&a));
        if capped.into_iter().any(|u| (0..3).any(|k| u.cap[k].is_some_and(|cap| asks.0[k] > cap as i64))) {
            return false;
        }
        // Once everything has ended, the other members' guarantees are still set aside.
        let alone = |m: AccountId, g: Amount| if m == spec.project { asks.max_each(g) } else { g };
        let cohort = s.ledger.cohort_of(spec.project).and_then(|c| self.cohorts.get(&c));
        if cohort.is_some_and(|c| {
            !within(c.cap, c.members.iter().fold(Amount::default(), |sum, &(m, g)| sum.plus(alone(m, g))))
        }) {
            return false;
        }
        let shape = (spec.gpu_model, spec.per_replica.as_whole_gpus(), spec.replicas);
        if let Some(&known) = self.placeable.get(&shape) {
            return known;
        }
        let candidates: Vec<Candidate> = self
            .nodes
            .iter()
            .map(|&id| s.nodes.get(id).expect("a schedulable node"))
            .filter(|n| spec.gpu_model.is_none_or(|m| m == n.spec.gpu_model))
            .map(|n| Candidate { node: n.spec.id, available: n.spec.capacity, capacity: n.spec.capacity })
            .collect();
        let placeable = choose_nodes(&candidates, shape.1, spec.replicas, s.config.policy.scoring).is_some();
        self.placeable.insert(shape, placeable);
        placeable
    }

    /// Step 5 at time `t`: the waiting jobs in queue order, each started if it fits; the
    /// ranks of those started go to `started`, and of those whose reservation gave way to
    /// a job ranked above (step 4) to `released` (they wait from then on).
    fn walk(
        &mut self,
        s: &Scheduler,
        t: Time,
        jobs: &[Queued],
        waiting: &mut Waiting,
        started: &mut Vec<usize>,
        released: &mut Vec<usize>,
    ) {
        let strict = !s.config.policy.backfill;
        let ended: Vec<usize> = self.started.iter().filter(|(_, v)| v.until <= t).map(|(&rank, _)| rank).collect();
        for rank in ended {
            self.remove_started(s, rank);
        }
        self.no_room.clear();
        // Jobs alike in everything the forecast reads fail alike at one time.
        let mut failed: BTreeSet<(GroupKey, u64)> = BTreeSet::new();
        // In priority order, the jobs after one rank no higher: they may preempt no more.
        let by_priority = s.config.policy.order != crate::config::QueueOrder::Fifo;
        let mut after = None;
        let mut reclaimable_after: i64 = self.preemptible_gpus.values().sum();
        loop {
            // Room at `t` bounds the room over a run: only jobs that need no more GPUs than
            // are free then, with what they may preempt, can start (under strict order the
            // next job, whatever it needs: if it cannot start, nothing behind it does).
            // What reservations hold then may go to a job ranked above theirs (step 4): to
            // the next job, at most what those ranked below the next rank hold.
            let free_now = self.gpus_total.at(t).0[0];
            let first_rank = after.map_or(0, |a| a + 1);
            let gpus_max =
                if strict { i64::MAX } else { free_now + self.reserved_gpus_at(t, first_rank) + reclaimable_after };
            let Some(rank) = waiting.next_after(after, gpus_max) else { break };
            after = Some(rank);
            let free = free_now + self.reserved_gpus_at(t, rank);
            let job = &jobs[rank];
            let priority = s.jobs[job.ix].spec.priority;
            let reclaimable: i64 = match job.may_preempt {
                true => self.preemptible_gpus.range(..priority).map(|(_, g)| g).sum(),
                false => 0,
            };
            reclaimable_after = match by_priority {
                true => reclaimable,
                false => self.preemptible_gpus.values().sum(),
            };
            if failed.contains(&job.key) || self.not_before.get(&rank).is_some_and(|&at| t < at) {
                continue;
            }
            let until = t.plus_ms(job.run_ms);
            let fits = job.gpus <= free + reclaimable
                && (self.start_if_fits(s, job.ix, t, until)
                    || self.start_on_reserved(s, rank, t, until, waiting, jobs, released)
                    || (job.may_preempt && reclaimable > 0 && self.preempt_for(s, job.ix, t, until, waiting, jobs)));
            if fits {
                let room = std::mem::take(&mut self.last_room);
                self.add_started(s, rank, Started { ix: job.ix, from: t, until, room });
                waiting.remove(rank, job.gpus);
                started.push(rank);
            } else {
                failed.insert(job.key);
                if strict {
                    return;
                }
            }
        }
    }

    /// Start the job at `t` if it fits for its whole run; its room in `last_room`.
    fn start_if_fits(&mut self, s: &Scheduler, ix: JobIx, t: Time, until: Time) -> bool {
        let spec = &s.jobs[ix].spec;
        let (per_replica, replicas, total) = (spec.per_replica.as_whole_gpus(), spec.replicas, spec.total());
        if !self.caps_allow(s, ix, t, until) {
            return false;
        }
        let shape = (spec.gpu_model, per_replica, replicas);
        let run_ms = until.ms_since(t);
        // Room only shrinks while a walk starts jobs: a shape that found none for a run
        // finds none for a run as long or longer.
        if self.no_room.get(&shape).is_some_and(|&shortest| shortest <= run_ms)
            || i64::from(total.gpus) > self.gpus_total.min_over(t, until).0[0]
        {
            return false;
        }
        let mut candidates = std::mem::take(&mut self.candidates);
        candidates.clear();
        let asks_one = Amount::of(per_replica);
        for (i, &id) in self.nodes.iter().enumerate() {
            // Room at `t` bounds the room over the run.
            let now = self.room[i].at(t);
            if (0..3).any(|k| now.0[k] < asks_one.0[k]) {
                continue;
            }
            let node = s.nodes.get(id).expect("a schedulable node");
            if spec.gpu_model.is_some_and(|m| m != node.spec.gpu_model) {
                continue;
            }
            let available = self.room[i].min_over(t, until).clamped();
            if per_replica.fits_in(available) {
                candidates.push(Candidate { node: id, available, capacity: node.spec.capacity });
            }
        }
        let chosen = choose_nodes(&candidates, per_replica, replicas, s.config.policy.scoring);
        self.candidates = candidates;
        let Some(chosen) = chosen else {
            let shortest = self.no_room.entry(shape).or_insert(run_ms);
            *shortest = (*shortest).min(run_ms);
            return false;
        };
        self.last_room.clear();
        for (node, count) in chosen {
            let i = self.node_index(node).expect("chosen among them");
            let r = per_replica.times(count);
            self.take_room(i, t, until, r);
            self.last_room.push((i, r));
        }
        self.charge(s, ix, t, until, false);
        if until != FOREVER {
            self.times.insert(until);
        }
        true
    }

    /// GPUs that the reservations still holding at `t`, of jobs ranked below `rank`, take
    /// then: what they may give to the job at `rank` (step 4).
    fn reserved_gpus_at(&self, t: Time, rank: usize) -> i64 {
        let active = self
            .reserved
            .iter()
            .filter(|r| !r.released && r.rank > rank && r.rank != usize::MAX && r.at <= t && t < r.until);
        active.flat_map(|r| r.room.iter()).map(|(_, room)| i64::from(room.gpus)).sum()
    }

    /// Step 4: the job at `rank` does not fit at `t` around the reservations: release, one
    /// at a time, those of jobs ranked below it that its run overlaps (the lowest-ranked
    /// first), until it fits; their jobs wait from then on (`released`). Nothing changes if
    /// it does not fit even then.
    #[allow(clippy::too_many_arguments)]
    fn start_on_reserved(
        &mut self,
        s: &Scheduler,
        rank: usize,
        t: Time,
        until: Time,
        waiting: &mut Waiting,
        jobs: &[Queued],
        released: &mut Vec<usize>,
    ) -> bool {
        let mut below: Vec<usize> = (0..self.reserved.len())
            .filter(|&k| {
                let r = &self.reserved[k];
                !r.released && r.rank > rank && r.rank < jobs.len() && r.at < until && t < r.until
            })
            .collect();
        below.sort_by_key(|&k| std::cmp::Reverse(self.reserved[k].rank));
        let ix = jobs[rank].ix;
        for (n, &k) in below.iter().enumerate() {
            self.release(s, k, false);
            if self.start_if_fits(s, ix, t, until) {
                // Those it did not need hold again, the highest-ranked first (plan order).
                for &k in below[..=n].iter().rev() {
                    if self.room_still_there(s, k) {
                        self.release(s, k, true);
                        continue;
                    }
                    // Its job waits, but not to start before its reservation's time: that
                    // was the earliest its room was expected to be free.
                    let holder = self.reserved[k].rank;
                    waiting.insert(holder, jobs[holder].gpus);
                    self.not_before.insert(holder, self.reserved[k].at);
                    self.times.insert(self.reserved[k].at);
                    released.push(holder);
                }
                return true;
            }
        }
        for &k in &below {
            self.release(s, k, true);
        }
        false
    }

    /// Whether released reservation `k` could hold again: its room on its nodes and its
    /// accounts' caps over its run.
    fn room_still_there(&self, s: &Scheduler, k: usize) -> bool {
        let r = &self.reserved[k];
        let room_ok = r.room.iter().all(|&(i, room)| {
            let left = self.room[i].min_over(r.at, r.until);
            let asks = Amount::of(room);
            (0..3).all(|d| left.0[d] >= asks.0[d])
        });
        room_ok && self.caps_allow(s, r.ix, r.at, r.until)
    }

    /// Would each capped account the job at `ix` is charged to, and its project's cohort
    /// (step 2), stay within its cap over `[from, until)` with the job counted?
    fn caps_allow(&self, s: &Scheduler, ix: JobIx, from: Time, until: Time) -> bool {
        let spec = &s.jobs[ix].spec;
        let asks = usage_of(spec.total());
        // A member of a cohort without a cap of its own is kept for its cohort only.
        let capped = |u: &&Usage| u.cap.iter().any(Option::is_some);
        let accounts_ok = s.charged_accounts(ix).all(|a| {
            self.accounts.get(&a).filter(capped).is_none_or(|u| within(u.cap, u.steps.max_over(from, until).plus(asks)))
        });
        accounts_ok
            && s.charged_accounts(ix).filter_map(|a| self.cohorts.get(&a)).all(|c| {
                let allows = self.cohort_allows(c, spec.project, asks, from, until);
                #[cfg(debug_assertions)]
                assert_eq!(allows, self.cohort_allows_from_members(c, spec.project, asks, from, until));
                allows
            })
    }

    /// `cohort_allows` worked out from every member's usage at every time one changes,
    /// without the kept level: the debug builds' check of the kept one.
    #[cfg(debug_assertions)]
    fn cohort_allows_from_members(
        &self,
        cohort: &CohortCaps,
        project: AccountId,
        asks: Amount,
        from: Time,
        until: Time,
    ) -> bool {
        let usage = |m: AccountId| self.accounts.get(&m).map(|u| &u.steps);
        let mut times = vec![from];
        for &(m, _) in &cohort.members {
            times.extend(
                usage(m).into_iter().flat_map(|steps| steps.at.iter().copied()).filter(|&at| from < at && at < until),
            );
        }
        times.sort_unstable();
        times.dedup();
        times.into_iter().all(|t| {
            let level = cohort.members.iter().fold(Amount::default(), |sum, &(m, guarantee)| {
                let used = usage(m).map_or(Amount::default(), |steps| steps.at(t));
                let used = if m == project { used.plus(asks) } else { used };
                // A member lending all counts what it uses as is: below none where a hold
                // and its victims, charged the larger of the two, are both given back.
                sum.plus(if guarantee == Amount::default() { used } else { used.max_each(guarantee) })
            });
            within(cohort.cap, level)
        })
    }

    /// Would the cohort's level (its members' usage, each at least its guarantee) stay
    /// within its capacity over `[from, until)` with `asks` more charged to `project`? The
    /// level changes only where a member's usage does.
    fn cohort_allows(&self, cohort: &CohortCaps, project: AccountId, asks: Amount, from: Time, until: Time) -> bool {
        let usage = |m: AccountId| self.accounts.get(&m).map(|u| &u.steps);
        // No member keeps a guarantee (the usual case): the job adds all it asks.
        if cohort.guaranteed().next().is_none() {
            return within(cohort.cap, cohort.lending_all.max_over(from, until).plus(asks));
        }
        // Otherwise each member that does counts at least its guarantee, and the job first
        // uses what of its project's its project leaves unused: the level changes where
        // the members lending all or one of those members change.
        let mut times = vec![from];
        let changes = cohort.guaranteed().filter_map(|(m, _)| usage(m)).chain([&cohort.lending_all]);
        times.extend(changes.flat_map(|steps| steps.at.iter().copied()).filter(|&at| from < at && at < until));
        times.sort_unstable();
        times.dedup();
        let lends_all = cohort.guarantee_of(project) == Amount::default();
        times.into_iter().all(|t| {
            let guaranteed = cohort.guaranteed().fold(Amount::default(), |sum, (m, g)| {
                let used = usage(m).map_or(Amount::default(), |steps| steps.at(t));
                let used = if m == project { used.plus(asks) } else { used };
                sum.plus(used.max_each(g))
            });
            let level = cohort.lending_all.at(t).plus(guaranteed);
            within(cohort.cap, if lends_all { level.plus(asks) } else { level })
        })
    }

    /// Give reservation `k`'s room and charges back (or, `undo`, take them again).
    fn release(&mut self, s: &Scheduler, k: usize, undo: bool) {
        let (ix, at, until) = (self.reserved[k].ix, self.reserved[k].at, self.reserved[k].until);
        let room = std::mem::take(&mut self.reserved[k].room);
        for &(i, r) in &room {
            match undo {
                true => self.take_room(i, at, until, r),
                false => {
                    self.room[i].add(at, until, Amount::of(r));
                    self.gpus_total.add(at, until, Amount([i64::from(r.gpus), 0, 0]));
                }
            }
        }
        self.charge(s, ix, at, until, !undo);
        self.reserved[k].room = room;
        self.reserved[k].released = !undo;
        self.no_room.clear();
    }

    /// A job that does not fit at `t` and may preempt: take back, one at a time, what jobs
    /// started in the forecast at a lower priority hold (the lowest priority, the most
    /// recently started first) until it fits; they wait again. Nothing changes if it does
    /// not fit even then.
    fn preempt_for(
        &mut self,
        s: &Scheduler,
        ix: JobIx,
        t: Time,
        until: Time,
        waiting: &mut Waiting,
        jobs: &[Queued],
    ) -> bool {
        let job = &s.jobs[ix].spec;
        let mut victims: Vec<usize> = self
            .started
            .iter()
            .filter(|(_, v)| {
                let spec = &s.jobs[v.ix].spec;
                spec.preemptible && spec.priority < job.priority && v.until > t
            })
            .map(|(&rank, _)| rank)
            .collect();
        victims.sort_by_key(|&rank| {
            let v = &self.started[&rank];
            (s.jobs[v.ix].spec.priority, std::cmp::Reverse(v.from), rank)
        });
        victims.truncate(s.config.limits.victims_per_preemption_max as usize);
        let mut taken = Vec::new();
        for rank in victims {
            let v = self.remove_started(s, rank);
            self.give_back(s, &v, t, false);
            self.no_room.clear();
            taken.push((rank, v));
            if self.start_if_fits(s, ix, t, until) {
                for (rank, _) in &taken {
                    waiting.insert(*rank, jobs[*rank].gpus);
                }
                return true;
            }
        }
        for (rank, v) in taken {
            self.give_back(s, &v, t, true);
            self.add_started(s, rank, v);
        }
        false
    }

    fn add_started(&mut self, s: &Scheduler, rank: usize, v: Started) {
        let spec = &s.jobs[v.ix].spec;
        if spec.preemptible {
            *self.preemptible_gpus.entry(spec.priority).or_default() += i64::from(spec.gpu_slots());
        }
        self.started.insert(rank, v);
    }

    fn remove_started(&mut self, s: &Scheduler, rank: usize) -> Started {
        let v = self.started.remove(&rank).expect("a started job");
        let spec = &s.jobs[v.ix].spec;
        if spec.preemptible
            && let Some(gpus) = self.preemptible_gpus.get_mut(&spec.priority)
        {
            *gpus -= i64::from(spec.gpu_slots());
            if *gpus == 0 {
                self.preemptible_gpus.remove(&spec.priority);
            }
        }
        v
    }

    /// A job started in the forecast leaves at `t` (or, `undo`, comes back).
    fn give_back(&mut self, s: &Scheduler, v: &Started, t: Time, undo: bool) {
        let from = t.max(v.from);
        for &(i, r) in &v.room {
            if undo {
                self.take_room(i, from, v.until, r);
            } else {
                self.room[i].add(from, v.until, Amount::of(r));
                self.gpus_total.add(from, v.until, Amount([i64::from(r.gpus), 0, 0]));
            }
        }
        self.charge(s, v.ix, from, v.until, !undo);
    }
}
