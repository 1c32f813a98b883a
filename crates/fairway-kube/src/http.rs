//! The read-only API: what `fairway ls`, `why`, `describe`, `nodes`, `quota` and
//! `priority-classes` read from the standalone server, with the same wire types
//! (`fairway_server::api`), built from the engine. Kubernetes is the source of truth for
//! everything that changes (submitting, cancelling, quotas, classes): those routes answer
//! 405 and say to use `kubectl`. `/metrics` has the server's metric names.
//!
//! Access: with `api_tokens_file`, a bearer token from that file; without, anyone who can
//! reach the listen address (loopback by default: `kubectl port-forward`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, RawQuery, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use fairway_core::{Estimate, JobId, JobStatus};
use fairway_server::api::*;
use fairway_server::metrics::{Metrics, PendingJobLabels, QueueLabels, Queued};
use serde::Deserialize;

use crate::controller::{SharedEngine, now_ms};
use crate::engine::{Engine, Observation};

/// The server's metrics (same names, so dashboards and alerts carry over) and those only a
/// cluster has.
pub struct KubeMetrics {
    pub server: Metrics,
    /// Workloads asking for GPUs in opted-in namespaces that Fairway does not schedule.
    pub unmanaged_gpu_workloads: prometheus_client::metrics::gauge::Gauge,
}

impl KubeMetrics {
    pub fn new() -> KubeMetrics {
        let mut server = Metrics::new();
        let unmanaged_gpu_workloads = prometheus_client::metrics::gauge::Gauge::default();
        server.registry.register(
            "unmanaged_gpu_workloads",
            "Workloads asking for GPUs in namespaces managed by Fairway that it does not schedule (they escaped the webhook)",
            unmanaged_gpu_workloads.clone(),
        );
        KubeMetrics { server, unmanaged_gpu_workloads }
    }

    pub fn encode(&self) -> String {
        self.server.encode()
    }
}

impl Default for KubeMetrics {
    fn default() -> Self {
        KubeMetrics::new()
    }
}

#[derive(Clone)]
pub struct ApiState {
    pub engine: SharedEngine,
    pub metrics: Arc<KubeMetrics>,
    /// Accepted bearer tokens; `None`: no token needed.
    pub tokens: Option<Arc<BTreeSet<String>>>,
    /// Whether this replica leads: a follower's engine is empty, so it does not answer
    /// `/v1` (it says who leads).
    pub role: Arc<crate::leader::Role>,
}

pub fn router(state: ApiState) -> axum::Router {
    axum::Router::new()
        .route("/v1/jobs", get(list_jobs).post(read_only))
        .route("/v1/jobs/{id}", get(get_job).delete(read_only))
        .route("/v1/jobs/{id}/why", get(why))
        .route("/v1/jobs/{id}/events", get(events))
        .route("/v1/jobs/{id}/cancel", axum::routing::post(read_only))
        .route("/v1/nodes", get(nodes))
        .route("/v1/quotas", get(quotas))
        .route("/v1/quotas/{kind}/{account}", axum::routing::put(read_only).delete(read_only))
        .route("/v1/priority-classes", get(classes))
        .route("/v1/cohorts", get(cohorts))
        .route("/v1/dashboard", get(dashboard))
        .route("/ui", get(page))
        .route("/ui/", get(page))
        .route("/ui/{asset}", get(page))
        .route("/healthz", get(health))
        .route("/metrics", get(metrics))
        .fallback(|| async { error(StatusCode::NOT_FOUND, "not_found", "no such route") })
        .layer(axum::middleware::from_fn_with_state(state.clone(), guard))
        .with_state(state)
}

/// `/metrics` and `/healthz` only, open: for Prometheus and the kubelet's probes.
pub fn metrics_router(state: ApiState) -> axum::Router {
    axum::Router::new()
        .route("/healthz", get(health))
        .route("/metrics", get(metrics))
        .fallback(|| async { error(StatusCode::NOT_FOUND, "not_found", "only /metrics and /healthz here") })
        .with_state(ApiState { tokens: None, ..state })
}

fn error(status: StatusCode, code: &str, message: &str) -> Response {
    let body = ErrorBody { error: ErrorDetail { code: code.into(), message: message.into(), details: Vec::new() } };
    (status, Json(body)).into_response()
}

async fn guard(State(state): State<ApiState>, request: Request, next: Next) -> Response {
    let path = request.uri().path();
    let open = path == "/healthz" || path == "/metrics";
    // The dashboard's page holds no data: served to anyone (its snapshot is not).
    if fairway_server::dashboard::ASSET_PATHS.contains(&path) {
        return next.run(request).await;
    }
    if !open && !state.role.acts() {
        let namespace = &state.role.namespace;
        let message = match state.role.leader() {
            Some(pod) => format!(
                "this replica is not the leader; the leader is pod {pod}: reach it with \
                 kubectl port-forward -n {namespace} pod/{pod} 7733"
            ),
            None => "this replica is not the leader, and no leader is known yet; try again shortly".to_owned(),
        };
        return error(StatusCode::SERVICE_UNAVAILABLE, "not_leader", &message);
    }
    let Some(tokens) = &state.tokens else { return next.run(request).await };
    if path == "/healthz" {
        return next.run(request).await;
    }
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    match presented {
        Some(token) if tokens.contains(token) => next.run(request).await,
        _ => {
            error(StatusCode::UNAUTHORIZED, "unauthenticated", "this API needs a bearer token from its api_tokens_file")
        }
    }
}

async fn read_only() -> Response {
    error(
        StatusCode::METHOD_NOT_ALLOWED,
        "read_only",
        "in Kubernetes mode the cluster is the source of truth: submit, cancel and set quotas with kubectl \
         (Jobs, ResourceQuotas, PriorityClasses)",
    )
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    state: Option<String>,
    project: Option<String>,
    user: Option<String>,
    name: Option<String>,
    priority_class: Option<String>,
    limit: Option<u32>,
    cursor: Option<i64>,
}

async fn list_jobs(State(state): State<ApiState>, RawQuery(raw): RawQuery) -> Response {
    let q: ListQuery = match fairway_server::parse_query(raw.as_deref()) {
        Ok(q) => q,
        Err(e) => return e.into_response(),
    };
    let states: Vec<String> =
        q.state.iter().flat_map(|s| s.split(',')).filter(|s| !s.is_empty()).map(str::to_owned).collect();
    let engine = state.engine.lock().expect("not poisoned");
    let now = now_ms();
    // One forecast for the whole list: every pending job's position and expected start.
    let estimates = engine.start_estimates(now, None);
    let mut jobs: Vec<JobView> = engine
        .workloads()
        .map(|(id, _, _)| view(&engine, id, now, &estimates))
        .filter(|j| states.is_empty() || states.iter().any(|s| s == j.state.as_str()))
        .filter(|j| q.project.as_ref().is_none_or(|p| *p == j.project))
        .filter(|j| q.user.as_ref().is_none_or(|u| *u == j.user))
        .filter(|j| q.name.as_ref().is_none_or(|n| *n == j.name))
        .filter(|j| q.priority_class.is_none() || q.priority_class == j.priority_class)
        .filter(|j| q.cursor.is_none_or(|c| j.id < c))
        .collect();
    let total = jobs.len() as u64;
    jobs.sort_by_key(|j| std::cmp::Reverse(j.id));
    let limit = q.limit.unwrap_or(1000).clamp(1, 10_000) as usize;
    let next_cursor = (jobs.len() > limit).then(|| jobs[limit - 1].id);
    jobs.truncate(limit);
    Json(JobList { jobs, total, next_cursor }).into_response()
}

fn job_id(text: &str) -> Option<JobId> {
    text.parse::<u64>().ok().map(JobId)
}

async fn get_job(State(state): State<ApiState>, Path(id): Path<String>) -> Response {
    let engine = state.engine.lock().expect("not poisoned");
    let Some(id) = job_id(&id).filter(|id| engine.workload(*id).is_some()) else {
        return error(StatusCode::NOT_FOUND, "not_found", &format!("no workload with id {id}"));
    };
    let w = engine.workload(id).expect("checked");
    let now = now_ms();
    Json(JobDetail { job: one_view(&engine, id, now), spec: w.as_job.clone(), events: Vec::new() }).into_response()
}

/// One workload's view, with its place and expected start if it is pending: the forecast
/// only when it has something to say.
fn one_view(engine: &Engine, id: JobId, now: u64) -> JobView {
    let estimates = match engine.core().job_status(id) {
        Some(JobStatus::Pending { .. }) => engine.start_estimates(now, Some(&BTreeSet::from([id]))),
        _ => BTreeMap::new(),
    };
    view(engine, id, now, &estimates)
}

async fn why(State(state): State<ApiState>, Path(id): Path<String>) -> Response {
    let engine = state.engine.lock().expect("not poisoned");
    let Some(id) = job_id(&id).filter(|id| engine.workload(*id).is_some()) else {
        return error(StatusCode::NOT_FOUND, "not_found", &format!("no workload with id {id}"));
    };
    let job = one_view(&engine, id, now_ms());
    let why = WhyView {
        id: job.id,
        state: job.state,
        reasons: job.reasons,
        reservation: job.reservation,
        queue_position: job.queue_position,
        fair_share: job.fair_share,
        start_estimate: job.start_estimate,
    };
    Json(why).into_response()
}

async fn events(State(state): State<ApiState>, Path(id): Path<String>) -> Response {
    let engine = state.engine.lock().expect("not poisoned");
    if job_id(&id).filter(|id| engine.workload(*id).is_some()).is_none() {
        return error(StatusCode::NOT_FOUND, "not_found", &format!("no workload with id {id}"));
    }
    // The history is in the cluster: `kubectl describe` and `kubectl get events` show it.
    Json(EventList { events: Vec::new() }).into_response()
}

/// A workload as the standalone server shows a job; `estimates` (`Engine::start_estimates`)
/// give pending ones their position and expected start.
fn view(engine: &Engine, id: JobId, now: u64, estimates: &BTreeMap<JobId, Estimate>) -> JobView {
    let w = engine.workload(id).expect("asked for a known workload");
    let spec = engine.core().job_spec(id);
    let status = engine.core().job_status(id);
    let (state, placement, reasons, preemption) = match &status {
        Some(JobStatus::Pending { reasons, .. }) => {
            let reasons = reasons
                .iter()
                .map(|r| ReasonView { code: r.label().into(), message: engine.reason_text(r), data: BTreeMap::new() })
                .collect();
            (JobState::Pending, None, reasons, None)
        }
        Some(JobStatus::Running { placement, .. }) => (JobState::Running, Some(*placement), Vec::new(), None),
        Some(JobStatus::Preempting { placement, preemptor, deadline }) => (
            JobState::Preempting,
            Some(*placement),
            Vec::new(),
            Some(PreemptionView { preemptor: preemptor.0 as i64, deadline_ms: deadline.millis() }),
        ),
        Some(JobStatus::Stopping { placement, .. }) => (JobState::Stopping, Some(*placement), Vec::new(), None),
        None => {
            let state = match w.finished {
                Some(crate::workload::Finished::Succeeded) => JobState::Succeeded,
                Some(crate::workload::Finished::Failed) => JobState::Failed,
                None => JobState::Pending,
            };
            let reason =
                |code: &str, message: String| vec![ReasonView { code: code.into(), message, data: BTreeMap::new() }];
            let reasons = match engine.refusal(id) {
                Some(why) => reason("invalid", why.to_owned()),
                // Read before the controller has listed every kind: it enters the queue
                // once the listing is complete.
                None if state == JobState::Pending && !engine.started() => reason(
                    "starting",
                    "the controller is still reading the cluster; this workload is queued once it has read everything"
                        .to_owned(),
                ),
                None => Vec::new(),
            };
            (state, None, reasons, None)
        }
    };
    let placement = placement
        .map(|p| {
            p.replicas()
                .iter()
                .map(|r| ReplicaView {
                    node: engine.node_name(r.node).unwrap_or("?").to_owned(),
                    gpus: r.gpus.iter().collect(),
                })
                .collect()
        })
        .unwrap_or_default();
    let user = spec.and_then(|s| engine.interner().account_name(s.user)).map_or(w.namespace.as_str(), |(_, name)| name);
    JobView {
        id: id.0 as i64,
        name: w.name.clone(),
        user: user.to_owned(),
        project: w.namespace.clone(),
        priority: spec.map_or(0, |s| s.priority),
        priority_class: w
            .as_job
            .pointer("/spec/template/spec/priorityClassName")
            .and_then(|v| v.as_str())
            .map(str::to_owned),
        state,
        gpus_per_replica: spec.map_or(0, |s| s.per_replica.slots_per_replica()),
        gpu_milli: spec.map(|s| s.per_replica.gpu_milli).filter(|m| *m > 0),
        replicas: spec.map_or(1, |s| s.replicas),
        gpu_model: spec.and_then(|s| s.gpu_model).and_then(|m| engine.interner().name_of(m)).map(str::to_owned),
        submitted_at_ms: w.created_ms,
        first_started_at_ms: None,
        started_at_ms: None,
        finished_at_ms: None,
        wait_seconds: if state == JobState::Pending { now.saturating_sub(w.created_ms) as f64 / 1000.0 } else { 0.0 },
        restart_count: 0,
        preemptions: engine.core().preemptions_of(id).unwrap_or(0),
        failures: 0,
        retries: 0,
        last_checkpoint_ms: None,
        exit_code: None,
        exit_signal: None,
        placement,
        reasons,
        preemption,
        queue_position: estimates.get(&id).map(|e| u64::from(e.position)),
        start_estimate: estimates.get(&id).map(|e| StartEstimateView::of(e.start)),
        reservation: ReservationView::of_job(engine.core(), id, |n| engine.node_name(n).unwrap_or("?")),
        fair_share: fairway_server::api::FairShareView::of_job(engine.core(), id, fairway_core::Time(now)),
    }
}

async fn nodes(State(state): State<ApiState>) -> Response {
    let engine = state.engine.lock().expect("not poisoned");
    Json(node_list(&engine)).into_response()
}

async fn cohorts(State(state): State<ApiState>) -> Response {
    let engine = state.engine.lock().expect("not poisoned");
    Json(cohort_list(&engine)).into_response()
}

/// The dashboard's snapshot (the same page and code as the standalone server's), read-only:
/// the cluster is changed with kubectl.
async fn dashboard(State(state): State<ApiState>) -> Response {
    let inputs = {
        let engine = state.engine.lock().expect("not poisoned");
        dashboard_inputs(&engine, now_ms())
    };
    Json(fairway_server::dashboard::assemble(inputs).read_only()).into_response()
}

/// Every workload as the dashboard lists it: positions from the core's order, the first
/// pending ones with their forecast.
fn dashboard_inputs(engine: &Engine, now: u64) -> fairway_server::dashboard::Inputs {
    use fairway_server::dashboard::{DashJob, Inputs, PENDING_LISTED_MAX};
    let order = engine.core().pending_by_rank(fairway_core::Time(now));
    let positions: BTreeMap<JobId, u64> = order.iter().enumerate().map(|(i, id)| (*id, i as u64 + 1)).collect();
    let listed: BTreeSet<JobId> = order.iter().take(PENDING_LISTED_MAX.min(FORECAST_JOBS_MAX)).copied().collect();
    let estimates = engine.start_estimates(now, Some(&listed));
    let jobs = engine
        .workloads()
        .filter(|(id, ..)| engine.core().job_status(*id).is_some())
        .map(|(id, ..)| DashJob::from_view(&view(engine, id, now, &estimates), positions.get(&id).copied()))
        .collect();
    Inputs {
        now_ms: now,
        driver: "kubernetes",
        jobs,
        nodes: node_list(engine),
        quotas: quota_list(engine).quotas,
        cohorts: cohort_list(engine).cohorts,
    }
}

async fn page(request: Request) -> Response {
    fairway_server::dashboard::asset(request.uri().path())
}

/// Each node and who holds each of its GPUs (or is held for).
fn node_list(engine: &Engine) -> NodeList {
    let mut views: BTreeMap<fairway_core::NodeId, NodeView> = engine
        .nodes()
        .map(|(id, info)| {
            (
                *id,
                NodeView {
                    name: info.name.clone(),
                    gpu_model: info.gpu_model.clone(),
                    gpus_total: info.capacity.gpus,
                    gpus_allocated: 0,
                    cpu_millis: info.capacity.cpu_millis,
                    memory_mib: info.capacity.memory_mib,
                    schedulable: !info.drained,
                    gpus: (0..info.capacity.gpus).map(GpuView::free).collect(),
                    reservations: Vec::new(),
                },
            )
        })
        .collect();
    for (node, reservations) in fairway_server::api::node_reservations(engine.core()) {
        if let Some(view) = views.get_mut(&node) {
            view.reservations = reservations;
        }
    }
    let ids: Vec<JobId> = engine.workloads().map(|(id, ..)| id).collect();
    for id in ids {
        let (placement, held) = match engine.core().job_status(id) {
            Some(
                JobStatus::Running { placement, .. }
                | JobStatus::Preempting { placement, .. }
                | JobStatus::Stopping { placement, .. },
            ) => (placement, false),
            Some(JobStatus::Pending { reserved: Some(placement), .. }) => (placement, true),
            _ => continue,
        };
        let share = engine.core().job_spec(id).map(|s| s.per_replica.gpu_milli).filter(|&m| m > 0);
        for r in placement.replicas() {
            let Some(node) = views.get_mut(&r.node) else { continue };
            for g in r.gpus.iter() {
                if let Some(gpu) = node.gpus.get_mut(g as usize) {
                    gpu.occupy(id.0 as i64, held, share);
                }
            }
        }
    }
    let (_, _) = engine.core().gpu_totals();
    for node in views.values_mut() {
        node.gpus_allocated = node.gpus.iter().filter(|g| g.job.is_some()).count() as u32;
    }
    NodeList { nodes: views.into_values().collect(), gpu_source: "kubernetes".into() }
}

async fn quotas(State(state): State<ApiState>) -> Response {
    let engine = state.engine.lock().expect("not poisoned");
    Json(quota_list(&engine)).into_response()
}

/// The cohorts the namespaces' annotations make: each member's use and whether it borrows,
/// and each cohort's level and capacity.
pub fn cohort_list(engine: &Engine) -> CohortList {
    let mut by_cohort: BTreeMap<&str, Vec<(&fairway_spec::MemberDoc, Option<&str>)>> = BTreeMap::new();
    for (cohort, member, left_out) in engine.cohort_members() {
        by_cohort.entry(cohort).or_default().push((member, left_out));
    }
    let id = |kind, name: &str| engine.interner().account_id(kind, name);
    let cohorts = by_cohort
        .into_iter()
        .map(|(name, members)| {
            let members = members
                .into_iter()
                .map(|(m, left_out)| match left_out {
                    Some(why) => CohortMemberView::left_out(m, why),
                    None => CohortMemberView::of(engine.core(), m, id(fairway_spec::AccountKind::Project, &m.project)),
                })
                .collect();
            CohortView::of(engine.core(), name, members, id(fairway_spec::AccountKind::Cohort, name))
        })
        .collect();
    CohortList { cohorts }
}

/// Each namespace with workloads, a ResourceQuota or (with fair sharing) a recent average:
/// its use and its cap.
fn quota_list(engine: &Engine) -> QuotaList {
    let now = fairway_core::Time(now_ms());
    let mut namespaces: BTreeSet<String> = engine.workloads().map(|(_, w, _)| w.namespace.clone()).collect();
    namespaces.extend(engine.quota_namespaces());
    for (account, _) in engine.core().recent_usage(now) {
        if let Some((fairway_spec::AccountKind::Project, ns)) = engine.interner().account_name(account) {
            namespaces.insert(ns.to_owned());
        }
    }
    let quotas = namespaces
        .into_iter()
        .filter_map(|ns| {
            let account = engine.interner().account_id(fairway_spec::AccountKind::Project, &ns)?;
            let (used, quota) = engine.core().account_usage(account);
            Some(QuotaView::of("project", &ns, used, quota).with_fair_share_of(engine.core(), account, now))
        })
        .collect();
    QuotaList { quotas }
}

async fn classes(State(state): State<ApiState>) -> Response {
    let engine = state.engine.lock().expect("not poisoned");
    let mut priority_classes: Vec<PriorityClassView> = engine
        .classes()
        .map(|(name, c)| PriorityClassView {
            name: name.clone(),
            value: c.value,
            preemption_policy: format!("{:?}", c.policy),
            global_default: c.global_default,
            min_run_before_preemption_seconds: c.protection.as_ref().map_or(0, |p| p.min_run_seconds),
            preemptions_per_hour_max: c.protection.as_ref().ok().and_then(|p| p.preemptions_per_hour_max),
            overrides_preemption_protection: c.protection.as_ref().is_ok_and(|p| p.overrides_protection),
            preemption_delay_seconds: c.protection.as_ref().map_or(0, |p| p.preemption_delay_seconds),
            description: None,
        })
        .collect();
    priority_classes.sort_by(|a, b| b.value.cmp(&a.value).then_with(|| a.name.cmp(&b.name)));
    Json(PriorityClassList { priority_classes }).into_response()
}

async fn health(State(state): State<ApiState>) -> Response {
    let engine = state.engine.lock().expect("not poisoned");
    let (total, allocated) = engine.core().gpu_totals();
    let pending = engine.core().pending_count() as u64;
    let (status, problem) = if !state.role.acts() {
        let leader = state.role.leader().unwrap_or_else(|| "not known yet".into());
        ("standby", Some(format!("a follower: the leader is {leader}")))
    } else if engine.started() {
        ("ok", None)
    } else {
        ("starting", Some("listing the cluster's objects".to_owned()))
    };
    let running = engine
        .workloads()
        .filter(|(id, ..)| {
            matches!(
                engine.core().job_status(*id),
                Some(JobStatus::Running { .. } | JobStatus::Preempting { .. } | JobStatus::Stopping { .. })
            )
        })
        .count();
    Json(Health {
        status: status.into(),
        problem,
        version: env!("CARGO_PKG_VERSION").into(),
        jobs_pending: pending,
        jobs_running: running as u64,
        gpus_total: total,
        gpus_allocated: allocated,
        container_runtime: None,
        images: Vec::new(),
    })
    .into_response()
}

async fn metrics(State(state): State<ApiState>) -> Response {
    {
        let mut engine = state.engine.lock().expect("not poisoned");
        refresh_metrics(&mut engine, &state.metrics);
    }
    let content_type = "application/openmetrics-text; version=1.0.0; charset=utf-8";
    ([(header::CONTENT_TYPE, content_type)], state.metrics.encode()).into_response()
}

/// The gauges, from the engine as it is now (what a scrape does first).
pub fn refresh_metrics(engine: &mut Engine, kube_metrics: &KubeMetrics) {
    kube_metrics.unmanaged_gpu_workloads.set(engine.unmanaged_in_managed_namespaces() as i64);
    let metrics = &kube_metrics.server;
    metrics.reset_job_gauges();
    let now = now_ms();
    let mut queued = Vec::new();
    let mut placed = Vec::new();
    // (waited ms, id, labels) of every pending workload, for the opt-in per-job series.
    let per_job = engine.settings().metrics.pending_job_series_max as usize;
    let mut waiting: Vec<(u64, JobId, PendingJobLabels)> = Vec::new();
    for (id, w, _) in engine.workloads() {
        let tier = crate::engine::tier_of(w);
        if let (
            Some(JobStatus::Running { .. } | JobStatus::Preempting { .. } | JobStatus::Stopping { .. }),
            Some(spec),
        ) = (engine.core().job_status(id), engine.core().job_spec(id))
        {
            placed.push((tier, w.namespace.as_str(), spec.total().gpus));
        }
        if let status @ Some(JobStatus::Pending { .. }) = engine.core().job_status(id) {
            let since = engine.queued_since_ms(id).unwrap_or(now);
            let reason = fairway_server::metrics::pending_reason_label(status);
            queued.push(Queued { tier, tenant: &w.namespace, waiting_ms: now.saturating_sub(since), reason });
            if per_job > 0 {
                let labels = PendingJobLabels {
                    tier: tier.to_owned(),
                    tenant: w.namespace.clone(),
                    job_name: w.name.clone(),
                    job_id: id.0.to_string(),
                };
                waiting.push((now.saturating_sub(since), id, labels));
            }
        }
        let state = match engine.core().job_status(id) {
            Some(JobStatus::Pending { .. }) => JobState::Pending,
            Some(JobStatus::Running { .. }) => JobState::Running,
            Some(JobStatus::Preempting { .. }) => JobState::Preempting,
            Some(JobStatus::Stopping { .. }) => JobState::Stopping,
            None => continue,
        };
        metrics.job_state(tier, state, 1);
    }
    metrics.set_queues(queued);
    metrics.set_queue_gpus(placed);
    if per_job > 0 {
        fairway_server::metrics::keep_longest_waiting(&mut waiting, per_job);
        metrics.set_pending_jobs(waiting.into_iter().map(|(ms, _, labels)| (labels, ms)));
    }
    let heads = fairway_server::metrics::queue_heads(engine.core(), now, |id| {
        let w = engine.workload(id)?;
        Some(QueueLabels { tier: crate::engine::tier_of(w).to_owned(), tenant: w.namespace.clone() })
    });
    metrics.set_head_estimates(heads);
    metrics.set_quotas(&quota_list(engine));
    metrics.set_cohorts(&cohort_list(engine));
    let (total, allocated) = engine.core().gpu_totals();
    metrics.gpus_total.set(i64::from(total));
    metrics.gpus_allocated.set(i64::from(allocated));
    let stats = engine.stats();
    let set = |counter: &prometheus_client::metrics::counter::Counter, value: u64| {
        let have = counter.get();
        if value > have {
            counter.inc_by(value - have);
        }
    };
    set(&metrics.preemptions, stats.preemptions);
    set(&metrics.preemptors_moved, stats.preemptors_moved);
    set(&metrics.starts_taken_back, stats.starts_taken_back);
    set(&metrics.starts, stats.admissions);
    set(&metrics.submissions, stats.submissions);
    for o in engine.take_observations() {
        match o {
            Observation::Waited { tier, tenant, seconds } => metrics.wait_seconds(&tier, &tenant, seconds),
            Observation::Finished { tier, succeeded } => {
                metrics.finished(&tier, if succeeded { JobState::Succeeded } else { JobState::Failed });
            }
            Observation::Cycle { seconds } => metrics.cycle_seconds.observe(seconds),
            Observation::Preempted { tier, tenant, cause } => metrics.preempted(&tier, &tenant, cause),
            Observation::Lost { tier, tenant, gpu_hours } => metrics.lost(&tier, &tenant, gpu_hours),
        }
    }
}
