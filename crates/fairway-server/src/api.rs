//! The HTTP API's wire types: what the server sends and the CLI reads. They are plain data
//! with serde on both sides, documented in `docs/openapi.yaml`; changing a field's meaning
//! is a breaking change of `/v1`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub use fairway_store::{JobState, Role};

/// Every error answer: `{"error": {...}}` with a stable `code`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorDetail {
    /// Stable, machine-readable: `invalid_spec`, `not_found`, `payload_too_large`,
    /// `queue_full`, `conflict`, `unsupported`, `internal`, …
    pub code: String,
    pub message: String,
    /// One entry per problem in a submission, each naming its document and field.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub details: Vec<FieldError>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FieldError {
    /// 1-based document number in the submitted body.
    pub document: usize,
    /// The field path, e.g. `resources.gpus` or `spec.template.spec.containers[0].image`.
    pub path: String,
    pub reason: String,
}

/// The answer to a submission (201).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubmitResponse {
    pub jobs: Vec<SubmittedJob>,
    /// Priority classes the submission added (or confirmed unchanged).
    #[serde(default)]
    pub priority_classes: Vec<String>,
    #[serde(default)]
    pub warnings: Vec<FieldError>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubmittedJob {
    pub id: i64,
    pub name: String,
    pub project: String,
}

/// A job as `get`/`list` show it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobView {
    pub id: i64,
    pub name: String,
    pub user: String,
    pub project: String,
    pub priority: i32,
    /// The class the priority came from, if any.
    pub priority_class: Option<String>,
    pub state: JobState,
    pub gpus_per_replica: u32,
    /// A share of one GPU, in thousandths (`resources.gpu_milli`); `gpus_per_replica` is
    /// then the 1 GPU it shares.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_milli: Option<u32>,
    pub replicas: u32,
    pub gpu_model: Option<String>,
    pub submitted_at_ms: u64,
    pub first_started_at_ms: Option<u64>,
    pub started_at_ms: Option<u64>,
    pub finished_at_ms: Option<u64>,
    /// Time spent waiting: the first wait and every wait after a preemption or a failed run
    /// (up to now while it waits).
    pub wait_seconds: f64,
    /// Runs after the first.
    pub restart_count: u32,
    pub preemptions: u32,
    pub failures: u32,
    /// Failed runs allowed before the job is marked failed; preemptions do not count.
    pub retries: u32,
    pub last_checkpoint_ms: Option<u64>,
    pub exit_code: Option<i32>,
    pub exit_signal: Option<i32>,
    /// Where it runs (running, preempting, stopping).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub placement: Vec<ReplicaView>,
    /// Why it is not running (pending jobs), from the core's last cycle.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reasons: Vec<ReasonView>,
    /// Set while it is being preempted: for whom, and when it is killed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preemption: Option<PreemptionView>,
    /// Its place in the scheduling order among pending jobs (1 goes first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_position: Option<u64>,
    /// When it is expected to start (pending jobs), from the core's forecast.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_estimate: Option<StartEstimateView>,
    /// The GPUs it has reserved (pending jobs that hold a reservation; `reservations` in the
    /// configuration): when, and on which nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reservation: Option<ReservationView>,
    /// With fair sharing on, a pending job's project's and user's shares now: within its
    /// priority the job whose project (then user) has the least goes first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fair_share: Option<FairShareView>,
}

/// A pending job's place in fair sharing (docs/fair-sharing.md): its project's and its
/// user's weighted dominant shares (held now plus recent average), rounded to 4 decimals.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct FairShareView {
    pub project: f64,
    pub user: f64,
}

impl FairShareView {
    /// `job`'s shares in `core` at `now`, if it is pending and fair sharing is on (both
    /// drivers' job views).
    pub fn of_job(
        core: &fairway_core::Scheduler,
        job: fairway_core::JobId,
        now: fairway_core::Time,
    ) -> Option<FairShareView> {
        if !matches!(core.job_status(job)?, fairway_core::JobStatus::Pending { .. }) {
            return None;
        }
        let spec = core.job_spec(job)?;
        let round = |s: f64| (s * 10_000.0).round() / 10_000.0;
        Some(FairShareView {
            project: round(core.fair_share(spec.project, now)?),
            user: round(core.fair_share(spec.user, now)?),
        })
    }
}

/// A pending job's reservation (docs/reservations.md): the GPUs it needs are expected to be
/// free at `at_ms` on these nodes, and no job ranked below it may start now where it would
/// run past then on them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReservationView {
    pub at_ms: u64,
    pub nodes: Vec<ReservedNodeView>,
}

/// What a reservation holds on one node: its replicas there and their GPUs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReservedNodeView {
    pub node: String,
    pub replicas: u32,
    pub gpus: u32,
}

impl ReservationView {
    /// The reservation `job` holds in `core` now, if any (both drivers' job views);
    /// `node_name` names the core's nodes.
    pub fn of_job<'a>(
        core: &fairway_core::Scheduler,
        job: fairway_core::JobId,
        node_name: impl Fn(fairway_core::NodeId) -> &'a str,
    ) -> Option<ReservationView> {
        let planned = core.reservation_of(job)?;
        let per_replica = core.job_spec(job)?.per_replica;
        let nodes = planned
            .nodes
            .iter()
            .map(|(node, held)| {
                // Replicas counted by the first dimension a replica asks for (a share of one
                // GPU asks no whole GPU).
                let dimensions = [
                    (u64::from(held.gpus), u64::from(per_replica.gpus)),
                    (u64::from(held.gpu_milli), u64::from(per_replica.gpu_milli)),
                    (held.cpu_millis, per_replica.cpu_millis),
                    (held.memory_mib, per_replica.memory_mib),
                ];
                let replicas =
                    dimensions.into_iter().find(|&(_, per)| per > 0).map_or(1, |(held, per)| (held / per) as u32);
                ReservedNodeView { node: node_name(*node).to_owned(), replicas, gpus: held.gpus }
            })
            .collect();
        Some(ReservationView { at_ms: planned.at.millis(), nodes })
    }
}

/// Pending jobs a query's forecast covers, in queue order, in both drivers
/// (`Scheduler::forecast_jobs`): jobs ranked further get their position and `not_forecast`.
/// The forecast replays the queue, so its cost grows with this.
pub const FORECAST_JOBS_MAX: usize = 1_000;

/// A pending job's expected start (see the core's `forecast.rs`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StartEstimateView {
    /// `at`: expected to start at `at_ms`; `not_before`: not before `at_ms` (the forecast
    /// stopped looking there); `not_placeable`: no node it may use can hold it, or it asks
    /// more than a cap allows; `not_forecast`: ranked beyond the jobs forecast.
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at_ms: Option<u64>,
}

impl StartEstimateView {
    pub fn of(start: fairway_core::StartEstimate) -> StartEstimateView {
        use fairway_core::StartEstimate::*;
        let (kind, at_ms) = match start {
            At(t) => ("at", Some(t.millis())),
            NotBefore(t) => ("not_before", Some(t.millis())),
            NotPlaceable => ("not_placeable", None),
            NotForecast => ("not_forecast", None),
        };
        StartEstimateView { kind: kind.to_owned(), at_ms }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicaView {
    pub node: String,
    pub gpus: Vec<u32>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PreemptionView {
    pub preemptor: i64,
    pub deadline_ms: u64,
}

/// One machine-readable reason and its sentence.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReasonView {
    /// Stable label, e.g. `over_quota`, `no_fit`, `waiting_for_preemption`.
    pub code: String,
    pub message: String,
    /// Structured fields of the reason (jobs named by id, accounts by name).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub data: BTreeMap<String, serde_json::Value>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobList {
    pub jobs: Vec<JobView>,
    /// How many jobs match the query in all (the page shows at most its limit).
    #[serde(default)]
    pub total: u64,
    /// Pass as `cursor` to get the next (older) page; absent on the last page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<i64>,
}

/// A job with its full spec and event history (`describe`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobDetail {
    pub job: JobView,
    pub spec: serde_json::Value,
    pub events: Vec<EventView>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventView {
    pub at_ms: u64,
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub message: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventList {
    pub events: Vec<EventView>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WhyView {
    pub id: i64,
    pub state: JobState,
    pub reasons: Vec<ReasonView>,
    /// The GPUs it has reserved, if it holds a reservation (as in its job view).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reservation: Option<ReservationView>,
    /// Its place among pending jobs (1 goes first), as in its job view.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_position: Option<u64>,
    /// With fair sharing on, its project's and user's shares (as in its job view).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fair_share: Option<FairShareView>,
    /// When it is expected to start, while pending (as in its job view).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_estimate: Option<StartEstimateView>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeList {
    pub nodes: Vec<NodeView>,
    /// `nvml` or `simulated`.
    pub gpu_source: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeView {
    pub name: String,
    pub gpu_model: String,
    pub gpus_total: u32,
    pub gpus_allocated: u32,
    pub cpu_millis: u64,
    pub memory_mib: u64,
    pub schedulable: bool,
    pub gpus: Vec<GpuView>,
    /// GPUs pending jobs have reserved here (`docs/reservations.md`): free ones among them
    /// are kept for the job, not lent to backfill that could delay it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reservations: Vec<NodeReservationView>,
}

/// GPUs a pending job has reserved on one node, from when it is expected to start there.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeReservationView {
    pub job: i64,
    pub gpus: u32,
    pub at_ms: u64,
}

/// Every reservation the core holds, by node, for the node lists of both drivers.
pub fn node_reservations(
    core: &fairway_core::Scheduler,
) -> std::collections::BTreeMap<fairway_core::NodeId, Vec<NodeReservationView>> {
    let mut by_node: std::collections::BTreeMap<_, Vec<NodeReservationView>> = Default::default();
    for planned in core.reservations() {
        for (node, held) in &planned.nodes {
            let view = NodeReservationView { job: planned.job.0 as i64, gpus: held.gpus, at_ms: planned.at.millis() };
            by_node.entry(*node).or_default().push(view);
        }
    }
    by_node
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuView {
    pub index: u32,
    /// The job on it, if any (a shared GPU: its largest share's job).
    pub job: Option<i64>,
    /// The preemptor it is held for while victims terminate, if any.
    pub held_for: Option<i64>,
    /// The shares of one GPU on it, by job id (empty unless the GPU is shared).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shares: Vec<ShareView>,
}

impl GpuView {
    /// A free GPU.
    pub fn free(index: u32) -> GpuView {
        GpuView { index, job: None, held_for: None, shares: Vec::new() }
    }

    /// Job `job` runs on it (with `share`, its share of it) or, `held`, it is held for the
    /// job while victims terminate. A shared GPU's `job` is its largest share's (the first
    /// among equals).
    pub fn occupy(&mut self, job: i64, held: bool, share: Option<u32>) {
        match (held, share) {
            (true, _) => self.held_for = Some(job),
            (false, None) => self.job = Some(job),
            (false, Some(gpu_milli)) => {
                if self.shares.iter().all(|s| s.gpu_milli < gpu_milli) {
                    self.job = Some(job);
                }
                self.shares.push(ShareView { job, gpu_milli });
            }
        }
    }
}

/// A job's share of one GPU.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShareView {
    pub job: i64,
    /// Thousandths of the GPU.
    pub gpu_milli: u32,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PriorityClassList {
    pub priority_classes: Vec<PriorityClassView>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PriorityClassView {
    pub name: String,
    pub value: i32,
    pub preemption_policy: String,
    pub global_default: bool,
    /// Rule 1 of the preemption order; 0 and absent when the class has no protection.
    #[serde(default)]
    pub min_run_before_preemption_seconds: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preemptions_per_hour_max: Option<u32>,
    /// The class's jobs may preempt runs that rule 1 protects.
    #[serde(default)]
    pub overrides_preemption_protection: bool,
    /// Rule 1, the preemptor's side: the class's jobs wait this long for free GPUs before
    /// they preempt; 0 when they preempt at once.
    #[serde(default)]
    pub preemption_delay_seconds: u64,
    pub description: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct QuotaList {
    pub quotas: Vec<QuotaView>,
}

/// An account's cap and what it holds now. Accounts without a cap are listed when they hold
/// something.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct QuotaView {
    /// `user` or `project`.
    pub kind: String,
    pub account: String,
    pub gpus_max: Option<u32>,
    pub cpu_millis_max: Option<u64>,
    pub memory_mib_max: Option<u64>,
    /// GPUs held, shares of one GPU rounded up to whole GPUs (`gpu_milli_used` is exact).
    pub gpus_used: u32,
    /// GPUs held in thousandths, whole GPUs and shares together: what the cap counts.
    #[serde(default)]
    pub gpu_milli_used: u64,
    pub cpu_millis_used: u64,
    pub memory_mib_used: u64,
    /// With fair sharing on: the account's share (docs/fair-sharing.md), what orders the
    /// tenants of a tier, least first: the largest of its GPUs', CPU's and memory's (held
    /// now plus its recent average) over the cluster's, divided by its weight.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fair_share: Option<f64>,
    /// With fair sharing on: the account's weight (1 unless set), which divides its share.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fair_share_weight: Option<u32>,
}

/// `PUT /v1/fair-share-weights/{kind}/{account}`: an account's fair-share weight, from 1
/// (the default) to `fairway_spec::FAIR_SHARE_WEIGHT_MAX`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FairShareWeightSpec {
    pub weight: u32,
}

/// An account's fair-share weight as set.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FairShareWeightView {
    /// `user` or `project`.
    pub kind: String,
    pub account: String,
    pub weight: u32,
}

impl QuotaView {
    /// An account's view: what it holds (`used`, from `Scheduler::account_usage`) against
    /// its quota.
    pub fn of(
        kind: &str,
        account: &str,
        used: fairway_core::Resources,
        quota: Option<fairway_core::Quota>,
    ) -> QuotaView {
        QuotaView {
            kind: kind.into(),
            account: account.into(),
            gpus_max: quota.and_then(|q| q.gpus_max),
            cpu_millis_max: quota.and_then(|q| q.cpu_millis_max),
            memory_mib_max: quota.and_then(|q| q.memory_mib_max),
            gpus_used: gpus_rounded_up(used),
            gpu_milli_used: used.gpu_milli_total(),
            cpu_millis_used: used.cpu_millis,
            memory_mib_used: used.memory_mib,
            fair_share: None,
            fair_share_weight: None,
        }
    }

    /// With the account's fair share (`Scheduler::fair_share`), rounded to 4 decimals.
    pub fn with_fair_share(self, share: Option<f64>) -> QuotaView {
        QuotaView { fair_share: share.map(|s| (s * 10_000.0).round() / 10_000.0), ..self }
    }

    /// With fair sharing on (`share` given): the account's weight too.
    pub fn with_fair_share_of(
        self,
        core: &fairway_core::Scheduler,
        account: fairway_core::AccountId,
        now: fairway_core::Time,
    ) -> QuotaView {
        let share = core.fair_share(account, now);
        let weight = share.is_some().then(|| core.fair_share_weight(account));
        QuotaView { fair_share_weight: weight, ..self.with_fair_share(share) }
    }
}

/// Whole GPUs and shares, shares rounded up to whole GPUs.
fn gpus_rounded_up(r: fairway_core::Resources) -> u32 {
    u32::try_from(fairway_core::ResourceKind::Gpu.of(r)).unwrap_or(u32::MAX)
}

/// `PUT /v1/quotas/{kind}/{account}` body. Absent fields are unlimited.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuotaSpec {
    pub gpus_max: Option<u32>,
    pub cpu_millis_max: Option<u64>,
    pub memory_mib_max: Option<u64>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CohortList {
    pub cohorts: Vec<CohortView>,
}

/// A cohort: its members' nominal quotas, what they use and borrow, and the cohort's level
/// against its capacity (see `docs/cohorts.md`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CohortView {
    pub name: String,
    pub members: Vec<CohortMemberView>,
    /// The members' nominal quotas added up, per resource they name.
    pub capacity: fairway_spec::LimitsDoc,
    /// What the members use, plus the guarantees (nominal less lending limit) they leave
    /// unused: the cohort lends nothing beyond `capacity` of it. Shares of one GPU are
    /// rounded up to whole GPUs (`gpu_milli_in_use` is exact).
    pub gpus_in_use: u32,
    /// The same GPUs in thousandths.
    #[serde(default)]
    pub gpu_milli_in_use: u64,
    pub cpu_millis_in_use: u64,
    pub memory_mib_in_use: u64,
    /// Set when the cohort is stored but not in effect, with why: one made through the API
    /// that conflicts with the config file's cohorts at start-up. It lends and guarantees
    /// nothing (its capacity and use are empty, no member borrows through it) until it is
    /// set again so that it holds, or deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub left_out: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CohortMemberView {
    #[serde(flatten)]
    pub member: fairway_spec::MemberDoc,
    /// GPUs its project uses, shares rounded up to whole GPUs (`gpu_milli_used` is exact).
    pub gpus_used: u32,
    /// The same GPUs in thousandths.
    #[serde(default)]
    pub gpu_milli_used: u64,
    pub cpu_millis_used: u64,
    pub memory_mib_used: u64,
    /// Uses more than its nominal quota: a member within its own may reclaim from it.
    pub borrowing: bool,
    /// Set when this member's place does not hold with the other members' (the controller:
    /// its namespace's annotations), with why: the project is then in no cohort, and its
    /// use is not shown here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub left_out: Option<String>,
}

impl CohortView {
    /// A cohort's view from the core: its level and capacity (`None`: the cohort has no
    /// account yet, so it holds nothing).
    pub fn of(
        core: &fairway_core::Scheduler,
        name: &str,
        members: Vec<CohortMemberView>,
        cohort: Option<fairway_core::AccountId>,
    ) -> CohortView {
        let (level, capacity) = cohort.and_then(|id| core.cohort_usage(id)).unwrap_or_default();
        CohortView {
            name: name.to_owned(),
            members,
            capacity: fairway_spec::LimitsDoc {
                gpus: capacity.gpus_max,
                cpu_millis: capacity.cpu_millis_max,
                memory_mib: capacity.memory_mib_max,
            },
            gpus_in_use: gpus_rounded_up(level),
            gpu_milli_in_use: level.gpu_milli_total(),
            cpu_millis_in_use: level.cpu_millis,
            memory_mib_in_use: level.memory_mib,
            left_out: None,
        }
    }

    /// A stored cohort not in effect (see `left_out`): its members as stored, with what their
    /// projects use, none borrowing through it.
    pub fn left_out(name: &str, members: Vec<CohortMemberView>, why: &str) -> CohortView {
        CohortView {
            name: name.to_owned(),
            members: members.into_iter().map(|m| CohortMemberView { borrowing: false, ..m }).collect(),
            capacity: fairway_spec::LimitsDoc::default(),
            gpus_in_use: 0,
            gpu_milli_in_use: 0,
            cpu_millis_in_use: 0,
            memory_mib_in_use: 0,
            left_out: Some(why.to_owned()),
        }
    }
}

impl CohortMemberView {
    /// A member's view from the core: what its project uses and whether it borrows
    /// (`None`: the project has no account yet, so it holds nothing).
    pub fn of(
        core: &fairway_core::Scheduler,
        member: &fairway_spec::MemberDoc,
        project: Option<fairway_core::AccountId>,
    ) -> CohortMemberView {
        let used = project.map(|id| core.account_usage(id).0).unwrap_or_default();
        CohortMemberView {
            member: member.clone(),
            gpus_used: gpus_rounded_up(used),
            gpu_milli_used: used.gpu_milli_total(),
            cpu_millis_used: used.cpu_millis,
            memory_mib_used: used.memory_mib,
            borrowing: project.is_some_and(|id| core.borrowing(id)),
            left_out: None,
        }
    }

    /// A member whose place does not hold (see `left_out`): as annotated, using nothing here.
    pub fn left_out(member: &fairway_spec::MemberDoc, why: &str) -> CohortMemberView {
        CohortMemberView {
            member: member.clone(),
            gpus_used: 0,
            gpu_milli_used: 0,
            cpu_millis_used: 0,
            memory_mib_used: 0,
            borrowing: false,
            left_out: Some(why.to_owned()),
        }
    }
}

/// `PUT /v1/cohorts/{name}` body: the cohort's members, replacing the old list.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CohortSpec {
    pub members: Vec<fairway_spec::MemberDoc>,
}

/// `POST /v1/jobs/{id}/checkpoint` body: the job saved its progress at `at_ms` (now if absent).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointReport {
    pub at_ms: Option<u64>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CancelResponse {
    pub id: i64,
    /// The state after the request: `cancelled` for a pending job, `stopping` for one that
    /// still has to exit, unchanged for a finished one.
    pub state: JobState,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Health {
    /// `ok`, or `degraded` when the store cannot be written (see `problem`): the server then
    /// refuses changes until it can, and starts nothing.
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
    pub version: String,
    pub jobs_pending: u64,
    pub jobs_running: u64,
    pub gpus_total: u32,
    pub gpus_allocated: u32,
    /// `docker`, `podman`, or none.
    pub container_runtime: Option<String>,
    /// Configured images to keep warm and whether each is present.
    pub images: Vec<ImageView>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageView {
    pub image: String,
    /// `present`, `pulling`, `failed: …`, or `no container runtime`.
    pub status: String,
}

/// `POST /v1/tokens` body.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewTokenRequest {
    pub user: String,
    pub project: String,
    /// `viewer`, `submitter` (default) or `admin`.
    pub role: Option<Role>,
    /// A label for listings; default `<user>@<project>` (its first 253 bytes).
    pub name: Option<String>,
    /// The token stops working after this long; default: never.
    pub expires_in_seconds: Option<u64>,
}

/// A token as listed: never its secret.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenView {
    pub id: i64,
    pub name: String,
    pub user: String,
    pub project: String,
    pub role: Role,
    pub created_at_ms: u64,
    pub expires_at_ms: Option<u64>,
    pub revoked_at_ms: Option<u64>,
}

/// The answer to `POST /v1/tokens`: the secret, shown this once.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenCreated {
    pub token: TokenView,
    pub secret: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenList {
    pub tokens: Vec<TokenView>,
}

/// `GET /v1/whoami`: the caller, as its token says.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WhoAmI {
    pub token_id: i64,
    pub token_name: String,
    pub user: String,
    pub project: String,
    pub role: Role,
    /// The highest priority class this caller may submit at (`None`: any, as an admin).
    pub priority_class_max: Option<String>,
}

/// `PUT /v1/projects/{name}` body.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProjectSpec {
    /// The highest priority class the project's tokens may use; absent: the server default.
    pub priority_class_max: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProjectView {
    pub name: String,
    /// What applies now: the project's own setting, the config file's, or the default.
    pub priority_class_max: String,
    /// Where that comes from: `project`, `config` or `default`.
    pub priority_class_max_source: String,
    /// The Unix user its jobs run as (config file only), if not the server's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_as: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProjectList {
    pub projects: Vec<ProjectView>,
}
