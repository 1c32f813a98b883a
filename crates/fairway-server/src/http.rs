//! The HTTP API (`/v1`, documented in `docs/openapi.yaml`). Handlers parse and check
//! input, then either read the store (lists, history) or ask the engine; they never decide.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use fairway_spec::ParseLimits;
use fairway_store::{JobFilter, JobRow, JobState, Store};
use serde::Deserialize;
use tokio::sync::oneshot;

use crate::api::*;
use crate::engine::{Cluster, Command, LiveView, log_path};
use crate::error::ApiError;
use crate::metrics::Metrics;

/// The OpenAPI document, served at `/openapi.yaml`.
pub const OPENAPI: &str = include_str!("../../../docs/openapi.yaml");

/// Every route, for the test that checks the OpenAPI document lists each one.
pub const ROUTES: &[(&str, &str)] = &[
    ("post", "/v1/jobs"),
    ("get", "/v1/jobs"),
    ("get", "/v1/jobs/{id}"),
    ("delete", "/v1/jobs/{id}"),
    ("post", "/v1/jobs/{id}/cancel"),
    ("get", "/v1/jobs/{id}/logs"),
    ("get", "/v1/jobs/{id}/events"),
    ("get", "/v1/jobs/{id}/why"),
    ("post", "/v1/jobs/{id}/checkpoint"),
    ("get", "/v1/nodes"),
    ("get", "/v1/priority-classes"),
    ("get", "/v1/quotas"),
    ("put", "/v1/quotas/{kind}/{account}"),
    ("delete", "/v1/quotas/{kind}/{account}"),
    ("get", "/healthz"),
    ("get", "/metrics"),
    ("get", "/openapi.yaml"),
];

#[derive(Clone)]
pub struct AppState {
    pub engine: Sender<Command>,
    pub readers: Readers,
    pub cluster: Arc<Cluster>,
    pub metrics: Arc<Metrics>,
    pub data_dir: PathBuf,
    pub body_bytes_max: usize,
    pub list_jobs_max: u32,
}

/// Read-only store connections for the handlers (WAL lets them read beside the writer).
#[derive(Clone)]
pub struct Readers {
    path: PathBuf,
    idle: Arc<Mutex<Vec<Store>>>,
}

impl Readers {
    pub fn new(path: PathBuf) -> Readers {
        Readers { path, idle: Arc::new(Mutex::new(Vec::new())) }
    }

    /// Runs `f` on a pooled connection, off the async threads.
    async fn with<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Store) -> fairway_store::Result<T> + Send + 'static,
    ) -> Result<T, ApiError> {
        let this = self.clone();
        tokio::task::spawn_blocking(move || {
            let store = match this.idle.lock().expect("not poisoned").pop() {
                Some(s) => s,
                None => Store::open_reader(&this.path).map_err(ApiError::store)?,
            };
            let out = f(&store).map_err(ApiError::store);
            this.idle.lock().expect("not poisoned").push(store);
            out
        })
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?
    }
}

pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/v1/jobs", post(submit).get(list_jobs))
        .route("/v1/jobs/{id}", get(get_job).delete(cancel))
        .route("/v1/jobs/{id}/cancel", post(cancel))
        .route("/v1/jobs/{id}/logs", get(logs))
        .route("/v1/jobs/{id}/events", get(events))
        .route("/v1/jobs/{id}/why", get(why))
        .route("/v1/jobs/{id}/checkpoint", post(checkpoint))
        .route("/v1/nodes", get(nodes))
        .route("/v1/priority-classes", get(classes))
        .route("/v1/quotas", get(quotas))
        .route("/v1/quotas/{kind}/{account}", put(set_quota).delete(delete_quota))
        .route("/healthz", get(health))
        .route("/metrics", get(metrics))
        .route("/openapi.yaml", get(openapi))
        .fallback(|| async {
            ApiError::bad_request("no such route; see /openapi.yaml").with_status(StatusCode::NOT_FOUND)
        })
        .with_state(state)
}

impl ApiError {
    fn with_status(mut self, status: StatusCode) -> ApiError {
        if status == StatusCode::NOT_FOUND {
            self.code = "not_found";
        }
        self.status = status;
        self
    }
}

/// Sends a command and waits for the engine's answer.
async fn ask<T>(state: &AppState, make: impl FnOnce(oneshot::Sender<T>) -> Command) -> Result<T, ApiError> {
    let (tx, rx) = oneshot::channel();
    state.engine.send(make(tx)).map_err(|_| ApiError::unavailable())?;
    rx.await.map_err(|_| ApiError::unavailable())
}

async fn read_body(state: &AppState, request: Request) -> Result<Bytes, ApiError> {
    axum::body::to_bytes(request.into_body(), state.body_bytes_max)
        .await
        .map_err(|_| ApiError::payload_too_large(state.body_bytes_max))
}

// ---- jobs ------------------------------------------------------------------------------

async fn submit(State(state): State<AppState>, request: Request) -> Result<Response, ApiError> {
    let bytes = read_body(&state, request).await?;
    let limits = ParseLimits { input_bytes_max: state.body_bytes_max, ..ParseLimits::default() };
    let parsed = fairway_spec::parse_documents(&bytes, &limits).map_err(ApiError::invalid_spec)?;
    if parsed.jobs.is_empty() && parsed.priority_classes.is_empty() {
        return Err(ApiError::bad_request("the body holds no job and no priority class"));
    }
    let response = ask(&state, |reply| Command::Submit { parsed, reply }).await??;
    Ok((StatusCode::CREATED, Json(response)).into_response())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    state: Option<String>,
    user: Option<String>,
    project: Option<String>,
    priority_class: Option<String>,
    priority_min: Option<i32>,
    name: Option<String>,
    limit: Option<u32>,
}

async fn list_jobs(
    State(state): State<AppState>,
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<JobList>, ApiError> {
    let Query(q) = query.map_err(|e| ApiError::bad_request(format!("query: {}", e.body_text())))?;
    let mut states = Vec::new();
    for s in q.state.iter().flat_map(|s| s.split(',')).filter(|s| !s.is_empty()) {
        states.push(JobState::parse(s).ok_or_else(|| {
            ApiError::bad_request(format!(
                "state: {s:?} is not one of pending, running, preempting, stopping, succeeded, failed, cancelled"
            ))
        })?);
    }
    let limit = q.limit.unwrap_or(1000).min(state.list_jobs_max);
    let filter = JobFilter {
        states,
        user: q.user,
        project: q.project,
        priority_class: q.priority_class,
        priority_min: q.priority_min,
        name: q.name,
        limit,
    };
    let rows = state.readers.with(move |s| s.jobs(&filter)).await?;
    let live = live_of(&state, &rows).await?;
    let jobs = rows.iter().map(|r| job_view(&state, r, live.get(&r.id))).collect();
    Ok(Json(JobList { jobs }))
}

/// Live facts for the unfinished jobs among `rows`.
async fn live_of(state: &AppState, rows: &[JobRow]) -> Result<BTreeMap<i64, LiveView>, ApiError> {
    let ids: Vec<i64> = rows.iter().filter(|r| !r.state.is_finished()).map(|r| r.id).collect();
    if ids.is_empty() {
        return Ok(BTreeMap::new());
    }
    ask(state, |reply| Command::Live { ids, reply }).await
}

async fn job_row(state: &AppState, id: i64) -> Result<JobRow, ApiError> {
    state.readers.with(move |s| s.job(id)).await?.ok_or_else(|| ApiError::not_found(id))
}

async fn get_job(State(state): State<AppState>, Path(id): Path<String>) -> Result<Json<JobDetail>, ApiError> {
    let id = job_id(&id)?;
    let row = job_row(&state, id).await?;
    let events = state.readers.with(move |s| s.events(id)).await?;
    let live = live_of(&state, std::slice::from_ref(&row)).await?;
    let spec = serde_json::from_str(&row.spec_json).unwrap_or(serde_json::Value::Null);
    Ok(Json(JobDetail {
        job: job_view(&state, &row, live.get(&id)),
        spec,
        events: events.into_iter().map(event_view).collect(),
    }))
}

async fn cancel(State(state): State<AppState>, Path(id): Path<String>) -> Result<Json<CancelResponse>, ApiError> {
    let id = job_id(&id)?;
    Ok(Json(ask(&state, |reply| Command::Cancel { id, reply }).await??))
}

async fn events(State(state): State<AppState>, Path(id): Path<String>) -> Result<Json<EventList>, ApiError> {
    let id = job_id(&id)?;
    job_row(&state, id).await?;
    let events = state.readers.with(move |s| s.events(id)).await?;
    Ok(Json(EventList { events: events.into_iter().map(event_view).collect() }))
}

async fn why(State(state): State<AppState>, Path(id): Path<String>) -> Result<Json<WhyView>, ApiError> {
    let id = job_id(&id)?;
    let row = job_row(&state, id).await?;
    let live = live_of(&state, std::slice::from_ref(&row)).await?;
    let reasons = live.get(&id).map(|l| l.reasons.clone()).unwrap_or_default();
    Ok(Json(WhyView { id, state: row.state, reasons }))
}

async fn checkpoint(
    State(state): State<AppState>,
    Path(id): Path<String>,
    request: Request,
) -> Result<StatusCode, ApiError> {
    let id = job_id(&id)?;
    let bytes = read_body(&state, request).await?;
    let report: CheckpointReport = if bytes.iter().all(u8::is_ascii_whitespace) {
        CheckpointReport::default()
    } else {
        serde_json::from_slice(&bytes).map_err(|e| ApiError::bad_request(format!("body: {e}")))?
    };
    ask(&state, |reply| Command::Checkpoint { id, at_ms: report.at_ms, reply }).await??;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LogsQuery {
    tail: Option<usize>,
    follow: Option<bool>,
    replica: Option<u32>,
}

/// Lines kept by `tail` at most; following streams without a limit.
const LOG_TAIL_LINES_MAX: usize = 100_000;

async fn logs(
    State(state): State<AppState>,
    Path(id): Path<String>,
    query: Result<Query<LogsQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let id = job_id(&id)?;
    let Query(q) = query.map_err(|e| ApiError::bad_request(format!("query: {}", e.body_text())))?;
    let row = job_row(&state, id).await?;
    let replica = q.replica.unwrap_or(0);
    let path = log_path(&state.data_dir, id, replica);
    let tail = q.tail.unwrap_or(LOG_TAIL_LINES_MAX).min(LOG_TAIL_LINES_MAX);
    let text_plain = [(header::CONTENT_TYPE, "text/plain; charset=utf-8")];
    if !q.follow.unwrap_or(false) || row.state.is_finished() {
        let text = if path.exists() {
            fairway_exec::tail_lines(&path, tail).map_err(|e| ApiError::internal(e.to_string()))?
        } else {
            String::new()
        };
        return Ok((text_plain, text).into_response());
    }
    let follower = fairway_exec::LogFollower::new(&path, fairway_exec::FollowFrom::TailLines(tail))
        .map_err(|e| ApiError::internal(e.to_string()))?;
    Ok((text_plain, Body::from_stream(follow_stream(state, id, follower))).into_response())
}

/// New log bytes as they come, until the job is finished and the log drained.
fn follow_stream(
    state: AppState,
    id: i64,
    follower: fairway_exec::LogFollower,
) -> impl futures_util::Stream<Item = Result<Bytes, std::io::Error>> {
    futures_util::stream::unfold(Some((state, follower)), move |s| async move {
        let (state, mut follower) = s?;
        loop {
            let bytes = follower.poll().map_err(|e| std::io::Error::other(e.to_string()));
            match bytes {
                Err(e) => return Some((Err(e), None)),
                Ok(b) if !b.is_empty() => return Some((Ok(Bytes::from(b)), Some((state, follower)))),
                Ok(_) => {}
            }
            let finished =
                state.readers.with(move |s| s.job(id)).await.ok().flatten().is_none_or(|r| r.state.is_finished());
            if finished {
                // One last read: the shim drains the job's output before the run ends.
                let rest = follower.poll().unwrap_or_default();
                return (!rest.is_empty()).then(|| (Ok(Bytes::from(rest)), None));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
}

// ---- cluster, quotas, health ---------------------------------------------------------------

async fn nodes(State(state): State<AppState>) -> Result<Json<NodeList>, ApiError> {
    Ok(Json(ask(&state, |reply| Command::Nodes { reply }).await?))
}

async fn classes(State(state): State<AppState>) -> Result<Json<PriorityClassList>, ApiError> {
    Ok(Json(ask(&state, |reply| Command::Classes { reply }).await?))
}

async fn quotas(State(state): State<AppState>) -> Result<Json<QuotaList>, ApiError> {
    Ok(Json(ask(&state, |reply| Command::Quotas { reply }).await?))
}

async fn set_quota(
    State(state): State<AppState>,
    Path((kind, account)): Path<(String, String)>,
    request: Request,
) -> Result<Json<QuotaView>, ApiError> {
    let bytes = read_body(&state, request).await?;
    let quota: QuotaSpec = serde_json::from_slice(&bytes).map_err(|e| ApiError::bad_request(format!("body: {e}")))?;
    let view = ask(&state, |reply| Command::SetQuota { kind, account, quota: Some(quota), reply }).await??;
    view.map(Json).ok_or_else(|| ApiError::internal("quota not set"))
}

async fn delete_quota(
    State(state): State<AppState>,
    Path((kind, account)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    ask(&state, |reply| Command::SetQuota { kind, account, quota: None, reply }).await??;
    Ok(StatusCode::NO_CONTENT)
}

async fn health(State(state): State<AppState>) -> Result<Json<Health>, ApiError> {
    Ok(Json(ask(&state, |reply| Command::Health { reply }).await?))
}

async fn metrics(State(state): State<AppState>) -> Response {
    let content_type = "application/openmetrics-text; version=1.0.0; charset=utf-8";
    ([(header::CONTENT_TYPE, content_type)], state.metrics.encode()).into_response()
}

async fn openapi() -> Response {
    ([(header::CONTENT_TYPE, "application/yaml")], OPENAPI).into_response()
}

// ---- views -----------------------------------------------------------------------------

fn job_id(text: &str) -> Result<i64, ApiError> {
    text.parse::<i64>()
        .ok()
        .filter(|id| *id > 0)
        .ok_or_else(|| ApiError::bad_request(format!("id: {text:?} is not a job id (a positive integer)")))
}

fn event_view(e: fairway_store::EventRow) -> EventView {
    EventView { at_ms: e.at_ms, kind: e.kind, reason: e.reason, message: e.message }
}

pub(crate) fn job_view(state: &AppState, row: &JobRow, live: Option<&LiveView>) -> JobView {
    let spec: serde_json::Value = serde_json::from_str(&row.spec_json).unwrap_or_default();
    let resources = &spec["resources"];
    let now = crate::engine::now_ms();
    let waited_until = row.first_started_at_ms.or(row.finished_at_ms).unwrap_or(now);
    let placement = row
        .placement_json
        .as_deref()
        .and_then(crate::engine::parse_placement)
        .map(|p| {
            p.replicas()
                .iter()
                .map(|r| ReplicaView {
                    node: state.cluster.node_name(r.node).to_owned(),
                    gpus: r.gpus.iter().collect(),
                })
                .collect()
        })
        .unwrap_or_default();
    JobView {
        id: row.id,
        name: row.name.clone(),
        user: row.user.clone(),
        project: row.project.clone(),
        priority: row.priority,
        priority_class: row.priority_class.clone(),
        state: row.state,
        gpus_per_replica: resources["gpus"].as_u64().unwrap_or(0) as u32,
        replicas: spec["replicas"].as_u64().unwrap_or(1) as u32,
        gpu_model: resources["gpu_model"].as_str().map(str::to_owned),
        submitted_at_ms: row.submitted_at_ms,
        first_started_at_ms: row.first_started_at_ms,
        started_at_ms: row.started_at_ms,
        finished_at_ms: row.finished_at_ms,
        wait_seconds: waited_until.saturating_sub(row.submitted_at_ms) as f64 / 1000.0,
        restart_count: row.restart_count,
        preemptions: row.preemptions,
        failures: row.failures,
        retries: spec["retries"].as_u64().unwrap_or(0) as u32,
        last_checkpoint_ms: row.last_checkpoint_ms,
        exit_code: row.exit_code,
        exit_signal: row.exit_signal,
        placement,
        reasons: live.map(|l| l.reasons.clone()).unwrap_or_default(),
        preemption: live.and_then(|l| l.preemption.clone()),
        queue_position: live.and_then(|l| l.queue_position),
    }
}
