//! Prometheus metrics (OpenMetrics text at `/metrics`), fed by the engine.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use fairway_store::JobState;

use crate::api::{CohortList, QuotaList};

/// A queue: a priority tier and a tenant (the standalone server's project, the controller's
/// namespace).
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
pub struct QueueLabels {
    pub tier: String,
    pub tenant: String,
}

/// A preemption: the victim's queue, and why it gave way (`PreemptCause::label`:
/// `priority`, or `reclaim` by another member of its cohort).
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
pub struct PreemptionLabels {
    pub tier: String,
    pub tenant: String,
    pub cause: String,
}

/// A notification's receiver, how it went out (`email`, `webhook`), and how that went
/// (`sent`, `failed` after its retries, `dropped` unsent because a bound was reached).
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
pub struct NotificationLabels {
    pub receiver: String,
    pub channel: String,
    pub outcome: String,
}

/// Keeps the `max` longest-waiting of `(waited ms, id, job)`, longest first; ties by id, so
/// that the per-job series kept do not flicker between refreshes (both drivers' opt-in
/// `fairway_job_pending_seconds`).
pub fn keep_longest_waiting<K: Ord, T>(jobs: &mut Vec<(u64, K, T)>, max: usize) {
    jobs.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    jobs.truncate(max);
}

/// GPUs each member lends, in member order: what the cohort's members borrow (each its use
/// beyond its nominal GPUs) is shared among the members with an idle guarantee (nominal less
/// use, at most the member's lending limit) in proportion to it. A borrowed GPU is lent by
/// no one member in particular, so this is an attribution; the members' lent GPUs add up to
/// what the cohort borrows. Members that name no nominal GPUs neither borrow nor lend.
pub fn lent_gpus(members: &[crate::api::CohortMemberView]) -> Vec<f64> {
    let borrowed: u64 =
        members.iter().filter_map(|m| Some(u64::from(m.gpus_used.saturating_sub(m.member.nominal.gpus?)))).sum();
    let idle: Vec<u64> = members
        .iter()
        .map(|m| {
            let Some(nominal) = m.member.nominal.gpus else { return 0 };
            let idle = nominal.saturating_sub(m.gpus_used);
            let limit = m.member.lending_limit.and_then(|l| l.gpus).unwrap_or(u32::MAX);
            u64::from(idle.min(limit))
        })
        .collect();
    let idle_total: u64 = idle.iter().sum();
    idle.iter()
        .map(|&i| if idle_total == 0 { 0.0 } else { borrowed.min(idle_total) as f64 * i as f64 / idle_total as f64 })
        .collect()
}

/// Each queue's first pending job among the first `FORECAST_JOBS_MAX` the core would ask
/// (`Scheduler::pending_by_rank`),
/// and when the forecast expects it to start, in seconds from `now_ms` (queues whose head
/// has no expected time are left out). `queue_of` names a pending job's queue. Both drivers'
/// `fairway_queue_head_start_estimate_seconds`.
pub fn queue_heads(
    core: &fairway_core::Scheduler,
    now_ms: u64,
    mut queue_of: impl FnMut(fairway_core::JobId) -> Option<QueueLabels>,
) -> Vec<(QueueLabels, u64)> {
    let mut heads: BTreeMap<fairway_core::JobId, QueueLabels> = BTreeMap::new();
    let mut seen: BTreeSet<QueueLabels> = BTreeSet::new();
    for id in core.pending_by_rank(fairway_core::Time(now_ms)).into_iter().take(crate::api::FORECAST_JOBS_MAX) {
        let Some(queue) = queue_of(id) else { continue };
        if seen.insert(queue.clone()) {
            heads.insert(id, queue);
        }
    }
    let wanted: BTreeSet<fairway_core::JobId> = heads.keys().copied().collect();
    if wanted.is_empty() {
        return Vec::new();
    }
    core.forecast_jobs(fairway_core::Time(now_ms), &wanted, crate::api::FORECAST_JOBS_MAX)
        .into_iter()
        .filter_map(|e| {
            let at = e.start.at()?;
            Some((heads.remove(&e.job)?, at.millis().saturating_sub(now_ms) / 1000))
        })
        .collect()
}

/// An account: `user` or `project` (a namespace, in a cluster), and its name.
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
pub struct AccountLabels {
    pub kind: String,
    pub account: String,
}

/// A project in a cohort.
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
pub struct CohortMemberLabels {
    pub cohort: String,
    pub project: String,
}

/// A pending job as the queue gauges count it.
#[derive(Clone, Copy, Debug)]
pub struct Queued<'a> {
    pub tier: &'a str,
    pub tenant: &'a str,
    /// How long it has waited since it last entered the queue (its submission, or its
    /// requeue after a preemption or a failed run), milliseconds.
    pub waiting_ms: u64,
    /// Why it waits: its first reason's label (`PendingReason::label`), `retry_backoff`
    /// for a job waiting out a failed run's backoff, `not_yet_considered` before a cycle
    /// has looked at it.
    pub reason: &'a str,
}

/// The reason label a pending job counts under in `fairway_pending_jobs_by_reason`, from
/// its status in the core: its first reason, or `not_yet_considered`.
pub fn pending_reason_label(status: Option<fairway_core::JobStatus<'_>>) -> &'static str {
    match status {
        Some(fairway_core::JobStatus::Pending { reasons, .. }) => {
            reasons.first().map_or("not_yet_considered", fairway_core::PendingReason::label)
        }
        _ => "not_yet_considered",
    }
}

/// A priority tier and a reason jobs wait for.
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
pub struct TierReasonLabels {
    pub tier: String,
    pub reason: String,
}

/// One pending job (opt-in series, `metrics.pending_job_series_max`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
pub struct PendingJobLabels {
    pub tier: String,
    pub tenant: String,
    pub job_name: String,
    pub job_id: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TierStateLabels {
    pub tier: String,
    pub state: String,
}

/// The label sets a group of gauge families set from snapshots has series for: a new
/// snapshot removes, from every family of the group, the series of what it no longer holds.
/// The others keep theirs throughout, so a scrape never sees a series vanish for a moment.
struct Series<L>(Mutex<BTreeSet<L>>);

impl<L: Ord> Series<L> {
    fn new() -> Series<L> {
        Series(Mutex::new(BTreeSet::new()))
    }

    /// `fresh` is what the new snapshot set; `remove` drops one label set from the group.
    fn replace(&self, fresh: BTreeSet<L>, remove: impl Fn(&L)) {
        let mut known = self.0.lock().expect("not poisoned");
        known.difference(&fresh).for_each(remove);
        *known = fresh;
    }
}

impl<L: Ord + Clone + std::hash::Hash + Eq> Series<L> {
    /// A group of one gauge family: sets `family` to `values`; series not among them go.
    fn set_gauge(&self, family: &Family<L, Gauge>, values: impl IntoIterator<Item = (L, i64)>) {
        let mut fresh = BTreeSet::new();
        for (labels, value) in values {
            family.get_or_create(&labels).set(value);
            fresh.insert(labels);
        }
        self.replace(fresh, |gone| {
            family.remove(gone);
        });
    }
}

pub struct Metrics {
    pub registry: Registry,
    /// Unfinished jobs by tier and state (`pending`, `running`, `preempting`, `stopping`).
    pub jobs: Family<TierStateLabels, Gauge>,
    /// Each wait in the queue before a run starts (the first, and each after a preemption
    /// or a retry), per tier and tenant.
    pub wait: Family<QueueLabels, Histogram>,
    /// Pending jobs per queue, as of the last refresh.
    pub queue_pending: Family<QueueLabels, Gauge>,
    /// Per queue, how long its longest-waiting pending job has waited since it last entered
    /// the queue, as of the last refresh.
    pub queue_oldest_pending_seconds: Family<QueueLabels, Gauge>,
    /// The queues the two gauges above have series for.
    queues: Series<QueueLabels>,
    /// Pending jobs per tier by why they wait (their first reason), as of the last refresh:
    /// the fleet's answer to "why is my job pending?".
    pub pending_by_reason: Family<TierReasonLabels, Gauge>,
    /// The (tier, reason) pairs the gauge above has series for.
    reasons: Series<TierReasonLabels>,
    /// GPUs held by each queue's placed jobs (running, or stopping but not yet gone), as of
    /// the last refresh.
    pub queue_gpus_allocated: Family<QueueLabels, Gauge>,
    /// The queues the gauge above has series for.
    holding_queues: Series<QueueLabels>,
    /// Per cohort member: the GPUs it uses, its nominal GPU quota (where it names GPUs), and
    /// what it uses beyond that (borrowed from the other members' idle guarantees).
    pub cohort_member_gpus_used: Family<CohortMemberLabels, Gauge>,
    pub cohort_member_gpus_nominal: Family<CohortMemberLabels, Gauge>,
    pub cohort_member_gpus_borrowed: Family<CohortMemberLabels, Gauge>,
    /// What of its idle guarantee the others use ([`lent_gpus`]).
    pub cohort_member_gpus_lent: Family<CohortMemberLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    /// The members the three gauges above have series for.
    cohort_members: Series<CohortMemberLabels>,
    /// How long each of the longest-waiting pending jobs has waited (opt-in).
    pub job_pending_seconds: Family<PendingJobLabels, Gauge>,
    /// The jobs the gauge above has series for.
    pending_jobs: Series<PendingJobLabels>,
    /// GPU-hours of work preempted runs lost (since their last reported checkpoint, or their
    /// start), by the victim's tier and tenant. The standalone server's: a cluster reports no
    /// checkpoints.
    pub queue_gpu_hours_lost: Family<QueueLabels, Counter<f64, std::sync::atomic::AtomicU64>>,
    /// Jobs asked to stop for a preemptor, by the victim's tier and tenant and the cause.
    pub queue_preemptions: Family<PreemptionLabels, Counter>,
    /// GPUs each account holds (running, terminating and held for its preemptors), as of the
    /// last refresh: accounts with a quota, and those holding something.
    pub quota_gpus_used: Family<AccountLabels, Gauge>,
    /// Each capped account's GPU cap, as of the last refresh.
    pub quota_gpus_max: Family<AccountLabels, Gauge>,
    /// With fair sharing on, each listed account's share (`QuotaView::fair_share`).
    pub quota_fair_share: Family<AccountLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    /// The accounts the two gauges above have series for.
    accounts: Series<AccountLabels>,
    /// Finished jobs by tier and final state.
    pub finished: Family<TierStateLabels, Counter>,
    pub gpus_total: Gauge,
    pub gpus_allocated: Gauge,
    pub preemptions: Counter,
    /// Preemptors that started on GPUs freed elsewhere before their victims had stopped
    /// (the core's cycle step 3b): preemptions that, looking back, were not needed.
    pub preemptors_moved: Counter,
    /// Starts a cycle took back before any was carried out, as a preemptor of the same
    /// cycle chose them alone as its victims (the core's preemption rule 8).
    pub starts_taken_back: Counter,
    pub starts: Counter,
    pub submissions: Counter,
    pub cycle_seconds: Histogram,
    /// Seconds until the first pending job of each queue is expected to start.
    pub head_start_estimate: Family<QueueLabels, Gauge>,
    /// The queues the gauge above has series for.
    head_queues: Series<QueueLabels>,
    /// Notices of the server's own `notify:` rules (the standalone server's).
    pub notifications: Family<NotificationLabels, Counter>,
}

/// Wait buckets: from a second to a day, the range "why is my job pending" lives in.
const WAIT_BUCKETS: [f64; 14] =
    [1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0, 14400.0, 43200.0, 86400.0];

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("fairway");
        let jobs = Family::<TierStateLabels, Gauge>::default();
        let wait = Family::<QueueLabels, Histogram>::new_with_constructor(|| Histogram::new(WAIT_BUCKETS));
        let finished = Family::<TierStateLabels, Counter>::default();
        let cycle_seconds = Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(0.0001, 4.0, 10));
        let m = Metrics {
            jobs: jobs.clone(),
            wait: wait.clone(),
            queue_pending: Family::default(),
            queue_oldest_pending_seconds: Family::default(),
            queues: Series::new(),
            pending_by_reason: Family::default(),
            reasons: Series::new(),
            queue_gpus_allocated: Family::default(),
            holding_queues: Series::new(),
            cohort_member_gpus_used: Family::default(),
            cohort_member_gpus_nominal: Family::default(),
            cohort_member_gpus_borrowed: Family::default(),
            cohort_member_gpus_lent: Family::default(),
            cohort_members: Series::new(),
            job_pending_seconds: Family::default(),
            pending_jobs: Series::new(),
            queue_preemptions: Family::default(),
            queue_gpu_hours_lost: Family::default(),
            quota_gpus_used: Family::default(),
            quota_gpus_max: Family::default(),
            quota_fair_share: Family::default(),
            accounts: Series::new(),
            finished: finished.clone(),
            gpus_total: Gauge::default(),
            gpus_allocated: Gauge::default(),
            preemptions: Counter::default(),
            preemptors_moved: Counter::default(),
            starts_taken_back: Counter::default(),
            starts: Counter::default(),
            submissions: Counter::default(),
            cycle_seconds: cycle_seconds.clone(),
            head_start_estimate: Family::default(),
            head_queues: Series::new(),
            notifications: Family::default(),
            registry: Registry::default(),
        };
        registry.register("jobs", "Unfinished jobs by priority tier and state", jobs);
        registry.register(
            "job_wait_seconds",
            "Time each run waited in the queue before it started (the first wait, and each after a preemption or a retry), by priority tier and tenant",
            wait,
        );
        registry.register("queue_pending_jobs", "Pending jobs, by priority tier and tenant", m.queue_pending.clone());
        registry.register(
            "pending_jobs_by_reason",
            "Pending jobs, by priority tier and the first reason each waits (over_quota, no_fit, held_for_reservation, ...)",
            m.pending_by_reason.clone(),
        );
        registry.register(
            "queue_oldest_pending_seconds",
            "How long the longest-waiting pending job of each priority tier and tenant has waited since it last entered the queue",
            m.queue_oldest_pending_seconds.clone(),
        );
        registry.register(
            "queue_gpus_allocated",
            "GPUs held by the placed jobs (running, or stopping) of each priority tier and tenant",
            m.queue_gpus_allocated.clone(),
        );
        registry.register(
            "cohort_member_gpus_used",
            "GPUs each project of a cohort uses",
            m.cohort_member_gpus_used.clone(),
        );
        registry.register(
            "cohort_member_gpus_nominal",
            "Each cohort member's nominal GPU quota (its guarantee, lent to the others while idle)",
            m.cohort_member_gpus_nominal.clone(),
        );
        registry.register(
            "cohort_member_gpus_borrowed",
            "GPUs each cohort member uses beyond its nominal quota, borrowed from the others' idle guarantees (what a member under its own may reclaim)",
            m.cohort_member_gpus_borrowed.clone(),
        );
        registry.register(
            "cohort_member_gpus_lent",
            "GPUs of each cohort member's idle guarantee that the others use: what the cohort borrows, shared among the members with idle guarantee in proportion to it",
            m.cohort_member_gpus_lent.clone(),
        );
        registry.register(
            "job_pending_seconds",
            "How long each of the longest-waiting pending jobs has waited since it last entered the queue (only with metrics.pending_job_series_max)",
            m.job_pending_seconds.clone(),
        );
        registry.register(
            "queue_preemptions",
            "Jobs asked to stop for higher-priority work or a cohort's reclaim, by the victim's priority tier and tenant and the cause (priority or reclaim)",
            m.queue_preemptions.clone(),
        );
        registry.register(
            "queue_gpu_hours_lost",
            "GPU-hours of work lost by preempted runs since their last reported checkpoint (or their start), by the victim's priority tier and tenant",
            m.queue_gpu_hours_lost.clone(),
        );
        registry.register(
            "quota_gpus_used",
            "GPUs each user or project holds, for accounts with a quota and those holding something",
            m.quota_gpus_used.clone(),
        );
        registry.register("quota_gpus_max", "Each capped user's or project's GPU quota", m.quota_gpus_max.clone());
        registry.register(
            "quota_fair_share",
            "With fair sharing on, each listed user's or project's share: the largest of its GPUs', CPU's and memory's (held now plus its recent average) over the cluster's, divided by its weight; a tier serves the least first",
            m.quota_fair_share.clone(),
        );
        registry.register("jobs_finished", "Jobs that finished, by priority tier and final state", finished);
        registry.register("gpus", "GPUs the server schedules", m.gpus_total.clone());
        registry.register("gpus_allocated", "GPUs assigned to jobs", m.gpus_allocated.clone());
        registry.register("preemptions", "Jobs asked to stop for higher-priority work", m.preemptions.clone());
        registry.register(
            "preemptors_moved",
            "Preemptors that started on GPUs freed elsewhere before their victims had stopped (the victims stop all the same)",
            m.preemptors_moved.clone(),
        );
        registry.register(
            "starts_taken_back",
            "Starts a cycle took back before carrying them out, as a preemptor of the same cycle chose them alone as victims",
            m.starts_taken_back.clone(),
        );
        registry.register("job_starts", "Runs started", m.starts.clone());
        registry.register("submissions", "Jobs accepted", m.submissions.clone());
        registry.register("scheduling_cycle_seconds", "Duration of one scheduling cycle", cycle_seconds);
        registry.register(
            "queue_head_start_estimate_seconds",
            "Seconds until the first pending job of each priority tier and tenant is expected to start (as of the last refresh: each second in the server, each scrape in the controller)",
            m.head_start_estimate.clone(),
        );
        registry.register(
            "notifications",
            "Notices of the server's own notify rules, by receiver, channel (email, webhook) and outcome (sent, failed after retries, dropped at a bound)",
            m.notifications.clone(),
        );
        Metrics { registry, ..m }
    }

    pub fn job_state(&self, tier: &str, state: JobState, delta: i64) {
        if state.is_finished() {
            return;
        }
        self.jobs.get_or_create(&TierStateLabels { tier: tier.into(), state: state.as_str().into() }).inc_by(delta);
    }

    /// Forgets every job gauge (the engine rebuilds them from the store).
    pub fn reset_job_gauges(&self) {
        self.jobs.clear();
    }

    /// Set the queue gauges from the jobs pending now: a queue with none loses its series.
    pub fn set_queues<'a>(&self, pending: impl IntoIterator<Item = Queued<'a>>) {
        let mut now: BTreeMap<(&str, &str), (i64, u64)> = BTreeMap::new();
        let mut by_reason: BTreeMap<(&str, &str), i64> = BTreeMap::new();
        for q in pending {
            let (count, oldest) = now.entry((q.tier, q.tenant)).or_default();
            *count += 1;
            *oldest = (*oldest).max(q.waiting_ms);
            *by_reason.entry((q.tier, q.reason)).or_default() += 1;
        }
        self.reasons.set_gauge(
            &self.pending_by_reason,
            by_reason
                .into_iter()
                .map(|((tier, reason), count)| (TierReasonLabels { tier: tier.into(), reason: reason.into() }, count)),
        );
        let mut fresh = BTreeSet::new();
        for ((tier, tenant), (count, oldest_ms)) in now {
            let labels = QueueLabels { tier: tier.into(), tenant: tenant.into() };
            self.queue_pending.get_or_create(&labels).set(count);
            self.queue_oldest_pending_seconds.get_or_create(&labels).set((oldest_ms / 1000) as i64);
            fresh.insert(labels);
        }
        self.queues.replace(fresh, |gone| {
            self.queue_pending.remove(gone);
            self.queue_oldest_pending_seconds.remove(gone);
        });
    }

    /// Set the allocation gauge from the placed jobs now, each as (tier, tenant, GPUs): a
    /// queue holding nothing loses its series.
    pub fn set_queue_gpus<'a>(&self, placed: impl IntoIterator<Item = (&'a str, &'a str, u32)>) {
        let mut now: BTreeMap<(&str, &str), i64> = BTreeMap::new();
        for (tier, tenant, gpus) in placed {
            *now.entry((tier, tenant)).or_default() += i64::from(gpus);
        }
        self.holding_queues.set_gauge(
            &self.queue_gpus_allocated,
            now.into_iter()
                .map(|((tier, tenant), gpus)| (QueueLabels { tier: tier.into(), tenant: tenant.into() }, gpus)),
        );
    }

    /// Set each queue's head estimate (seconds from now): queues not listed lose their series.
    pub fn set_head_estimates(&self, heads: impl IntoIterator<Item = (QueueLabels, u64)>) {
        self.head_queues
            .set_gauge(&self.head_start_estimate, heads.into_iter().map(|(l, seconds)| (l, seconds as i64)));
    }

    /// Set the per-job gauge to these jobs (the longest-waiting ones, as many as the
    /// config allows, each with how long it has waited in ms): the others lose their series.
    pub fn set_pending_jobs(&self, jobs: impl IntoIterator<Item = (PendingJobLabels, u64)>) {
        self.pending_jobs.set_gauge(&self.job_pending_seconds, jobs.into_iter().map(|(l, ms)| (l, (ms / 1000) as i64)));
    }

    /// Set the cohort gauges from the cohorts now (`GET /v1/cohorts`'s list): a member no
    /// longer listed, or listed as left out (not in effect), has no series.
    pub fn set_cohorts(&self, cohorts: &CohortList) {
        let mut fresh = BTreeSet::new();
        for c in cohorts.cohorts.iter().filter(|c| c.left_out.is_none()) {
            let members: Vec<_> = c.members.iter().filter(|m| m.left_out.is_none()).cloned().collect();
            let lent = lent_gpus(&members);
            for (m, lent) in members.iter().zip(lent) {
                let labels = CohortMemberLabels { cohort: c.name.clone(), project: m.member.project.clone() };
                self.cohort_member_gpus_used.get_or_create(&labels).set(i64::from(m.gpus_used));
                match m.member.nominal.gpus {
                    Some(nominal) => {
                        self.cohort_member_gpus_nominal.get_or_create(&labels).set(i64::from(nominal));
                        let borrowed = m.gpus_used.saturating_sub(nominal);
                        self.cohort_member_gpus_borrowed.get_or_create(&labels).set(i64::from(borrowed));
                        self.cohort_member_gpus_lent.get_or_create(&labels).set(lent);
                    }
                    None => {
                        self.cohort_member_gpus_nominal.remove(&labels);
                        self.cohort_member_gpus_borrowed.remove(&labels);
                        self.cohort_member_gpus_lent.remove(&labels);
                    }
                }
                fresh.insert(labels);
            }
        }
        self.cohort_members.replace(fresh, |gone| {
            self.cohort_member_gpus_used.remove(gone);
            self.cohort_member_gpus_nominal.remove(gone);
            self.cohort_member_gpus_borrowed.remove(gone);
            self.cohort_member_gpus_lent.remove(gone);
        });
    }

    /// Set the quota gauges from the accounts' use and caps now (`GET /v1/quotas`'s list):
    /// an account no longer listed loses its series, an uncapped one has no cap series.
    pub fn set_quotas(&self, quotas: &QuotaList) {
        let mut fresh = BTreeSet::new();
        for q in &quotas.quotas {
            let labels = AccountLabels { kind: q.kind.clone(), account: q.account.clone() };
            self.quota_gpus_used.get_or_create(&labels).set(i64::from(q.gpus_used));
            match q.gpus_max {
                Some(max) => {
                    self.quota_gpus_max.get_or_create(&labels).set(i64::from(max));
                }
                None => {
                    self.quota_gpus_max.remove(&labels);
                }
            }
            match q.fair_share {
                Some(share) => {
                    self.quota_fair_share.get_or_create(&labels).set(share);
                }
                None => {
                    self.quota_fair_share.remove(&labels);
                }
            }
            fresh.insert(labels);
        }
        self.accounts.replace(fresh, |gone| {
            self.quota_gpus_used.remove(gone);
            self.quota_gpus_max.remove(gone);
            self.quota_fair_share.remove(gone);
        });
    }

    /// A job of `tier` and `tenant` was asked to stop for a preemptor, for `cause` (the
    /// unlabelled `preemptions` total is the driver's to count).
    pub fn preempted(&self, tier: &str, tenant: &str, cause: fairway_core::PreemptCause) {
        let labels = PreemptionLabels { tier: tier.into(), tenant: tenant.into(), cause: cause.label().into() };
        self.queue_preemptions.get_or_create(&labels).inc();
    }

    /// A preempted run of `tier` and `tenant` lost this much work.
    pub fn notified(&self, receiver: &str, channel: &str, outcome: &str) {
        let labels = NotificationLabels { receiver: receiver.into(), channel: channel.into(), outcome: outcome.into() };
        self.notifications.get_or_create(&labels).inc();
    }

    /// Alerts left untracked because the firing set was full.
    pub fn notifications_dropped(&self, count: u64) {
        let labels =
            NotificationLabels { receiver: String::new(), channel: "firing_set".into(), outcome: "dropped".into() };
        self.notifications.get_or_create(&labels).inc_by(count);
    }

    pub fn lost(&self, tier: &str, tenant: &str, gpu_hours: f64) {
        self.queue_gpu_hours_lost
            .get_or_create(&QueueLabels { tier: tier.into(), tenant: tenant.into() })
            .inc_by(gpu_hours);
    }

    pub fn wait_seconds(&self, tier: &str, tenant: &str, seconds: f64) {
        self.wait.get_or_create(&QueueLabels { tier: tier.into(), tenant: tenant.into() }).observe(seconds);
    }

    pub fn finished(&self, tier: &str, state: JobState) {
        self.finished.get_or_create(&TierStateLabels { tier: tier.into(), state: state.as_str().into() }).inc();
    }

    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry).expect("writing to a String");
        out
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::CohortMemberView;

    fn member(project: &str, nominal: Option<u32>, used: u32, lending_limit: Option<u32>) -> CohortMemberView {
        CohortMemberView {
            member: fairway_spec::MemberDoc {
                project: project.into(),
                nominal: fairway_spec::LimitsDoc { gpus: nominal, ..Default::default() },
                borrowing_limit: None,
                lending_limit: lending_limit
                    .map(|gpus| fairway_spec::LimitsDoc { gpus: Some(gpus), ..Default::default() }),
            },
            gpus_used: used,
            gpu_milli_used: u64::from(used) * 1000,
            cpu_millis_used: 0,
            memory_mib_used: 0,
            borrowing: false,
            left_out: None,
        }
    }

    #[test]
    fn what_the_cohort_borrows_is_lent_by_the_idle_in_proportion() {
        // vision borrows 6 (uses 10 of 4); speech has 6 idle, nlp 2 idle but lends at most
        // 1, ops names no GPUs: 7 lendable, so speech lends 6/7 of 6 and nlp 1/7 of 6.
        let members = [
            member("vision", Some(4), 10, None),
            member("speech", Some(8), 2, None),
            member("nlp", Some(4), 2, Some(1)),
            member("ops", None, 3, None),
        ];
        let lent = lent_gpus(&members);
        let want = [0.0, 36.0 / 7.0, 6.0 / 7.0, 0.0];
        for (got, want) in lent.iter().zip(want) {
            assert!((got - want).abs() < 1e-9, "{lent:?}");
        }
        assert!((lent.iter().sum::<f64>() - 6.0).abs() < 1e-9, "lent adds up to what is borrowed");
        // Nothing borrowed: nothing lent; nothing idle: nothing lent.
        assert_eq!(lent_gpus(&[member("a", Some(4), 1, None), member("b", Some(4), 4, None)]), [0.0, 0.0]);
        assert_eq!(lent_gpus(&[member("a", Some(4), 4, None)]), [0.0]);
    }

    /// A cohort or member not in effect (`left_out`) has no series, and lends nothing to
    /// the attribution of what the others borrow.
    #[test]
    fn what_is_left_out_has_no_cohort_series() {
        use crate::api::{CohortList, CohortView};
        let left_out = |m: CohortMemberView| CohortMemberView { left_out: Some("why".into()), ..m };
        let view = |name: &str, members: Vec<CohortMemberView>, left: Option<&str>| CohortView {
            name: name.into(),
            members,
            capacity: fairway_spec::LimitsDoc::default(),
            gpus_in_use: 0,
            gpu_milli_in_use: 0,
            cpu_millis_in_use: 0,
            memory_mib_in_use: 0,
            left_out: left.map(Into::into),
        };
        let lab = view(
            "lab",
            vec![
                member("vision", Some(2), 4, None),
                member("speech", Some(4), 0, None),
                left_out(member("ops", Some(4), 0, None)),
            ],
            None,
        );
        let other = view("other", vec![member("nlp", Some(1), 0, None)], Some("conflicts"));
        let metrics = Metrics::new();
        metrics.set_cohorts(&CohortList { cohorts: vec![lab, other] });
        let text = metrics.encode();
        assert!(text.contains("fairway_cohort_member_gpus_lent{cohort=\"lab\",project=\"speech\"} 2.0"), "{text}");
        assert!(!text.contains("project=\"ops\"") && !text.contains("project=\"nlp\""), "{text}");
    }
}
