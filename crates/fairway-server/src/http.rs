//! The HTTP API (`/v1`, documented in `docs/openapi.yaml`). Handlers parse and check
//! input, then either read the store (lists, history) or ask the engine; they never decide.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Extension, Path, RawQuery, Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use fairway_spec::ParseLimits;
use fairway_store::{JobFilter, JobRow, JobState, Store};
use serde::Deserialize;
use tokio::sync::oneshot;

use crate::api::*;
use crate::auth::{Identity, Tokens};
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
    ("put", "/v1/fair-share-weights/{kind}/{account}"),
    ("delete", "/v1/fair-share-weights/{kind}/{account}"),
    ("get", "/v1/cohorts"),
    ("put", "/v1/cohorts/{name}"),
    ("delete", "/v1/cohorts/{name}"),
    ("get", "/v1/projects"),
    ("put", "/v1/projects/{name}"),
    ("get", "/v1/tokens"),
    ("post", "/v1/tokens"),
    ("delete", "/v1/tokens/{id}"),
    ("get", "/v1/whoami"),
    ("get", "/healthz"),
    ("get", "/metrics"),
    ("get", "/openapi.yaml"),
    ("get", "/v1/dashboard"),
];

#[derive(Clone)]
pub struct AppState {
    pub engine: Sender<Command>,
    pub readers: Readers,
    pub cluster: Arc<Cluster>,
    pub metrics: Arc<Metrics>,
    pub data_dir: PathBuf,
    pub tokens: Tokens,
    /// The engine's priority classes, to check submissions against before asking it.
    pub classes: Arc<std::sync::RwLock<fairway_spec::PriorityClasses>>,
    pub body_bytes_max: usize,
    pub body_read_timeout: Duration,
    pub list_jobs_max: u32,
    /// The server's clock (what job views compute ages against).
    pub clock: Arc<dyn crate::clock::Clock>,
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
        .route("/v1/fair-share-weights/{kind}/{account}", put(set_weight).delete(delete_weight))
        .route("/v1/cohorts", get(cohorts))
        .route("/v1/cohorts/{name}", put(set_cohort).delete(delete_cohort))
        .route("/v1/projects", get(projects))
        .route("/v1/projects/{name}", put(set_project))
        .route("/v1/tokens", get(tokens).post(create_token))
        .route("/v1/tokens/{id}", axum::routing::delete(revoke_token))
        .route("/v1/whoami", get(whoami))
        .route("/v1/dashboard", get(dashboard))
        .route("/ui", get(page))
        .route("/ui/", get(page))
        .route("/ui/{asset}", get(page))
        .route("/healthz", get(health))
        .route("/metrics", get(metrics))
        .route("/openapi.yaml", get(openapi))
        .fallback(|| async {
            ApiError::bad_request("no such route; see /openapi.yaml").with_status(StatusCode::NOT_FOUND)
        })
        .method_not_allowed_fallback(|| async { ApiError::method_not_allowed() })
        .layer(axum::middleware::from_fn_with_state(state.clone(), guard))
        .with_state(state)
}

/// Routes anyone may read: liveness and the API's description.
const PUBLIC: &[&str] = &["/healthz", "/openapi.yaml"];

/// Runs before every handler: (1) a request that changes state must come from no browser
/// origin or this server's own, and carry JSON or YAML (or no body) — so no web page can
/// submit a job through a visitor's browser; (2) every route but [`PUBLIC`] needs a valid
/// bearer token, whose [`Identity`] the handlers receive.
async fn guard(State(state): State<AppState>, mut request: Request, next: Next) -> Response {
    let changes = !matches!(*request.method(), Method::GET | Method::HEAD);
    if changes && let Err(e) = same_origin(request.headers()).and_then(|()| json_or_yaml(request.headers())) {
        return e.into_response();
    }
    let path = request.uri().path();
    if PUBLIC.contains(&path) || crate::dashboard::ASSET_PATHS.contains(&path) {
        return next.run(request).await;
    }
    let header = request.headers().get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
    match state.tokens.authenticate(header) {
        Ok(identity) => {
            request.extensions_mut().insert(identity);
            next.run(request).await
        }
        Err(refusal) => {
            let mut response = ApiError::unauthenticated(refusal.message()).into_response();
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, header::HeaderValue::from_static("Bearer realm=\"fairway\""));
            response
        }
    }
}

/// A browser names the page's origin in `Origin` (and says `Sec-Fetch-Site`); other clients
/// send neither. Only the server's own origin may change anything.
fn same_origin(headers: &HeaderMap) -> Result<(), ApiError> {
    if let Some(site) = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok())
        && !matches!(site, "same-origin" | "none")
    {
        return Err(ApiError::cross_origin(&format!("Sec-Fetch-Site: {site}")));
    }
    let Some(origin) = headers.get(header::ORIGIN) else { return Ok(()) };
    let origin = origin.to_str().unwrap_or("(not text)");
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok()).unwrap_or("");
    let origin_host = origin.split_once("://").map(|(_, rest)| rest.trim_end_matches('/'));
    if host.is_empty() || origin_host != Some(host) {
        return Err(ApiError::cross_origin(origin));
    }
    Ok(())
}

/// A body, if any, is JSON or YAML: `text/plain` and form encodings are what a cross-site
/// form can send without asking.
fn json_or_yaml(headers: &HeaderMap) -> Result<(), ApiError> {
    let has_body = headers.contains_key(header::TRANSFER_ENCODING)
        || headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).is_some_and(|n| n.trim() != "0");
    let Some(content_type) = headers.get(header::CONTENT_TYPE) else {
        return if has_body { Err(ApiError::unsupported_media_type("(none)")) } else { Ok(()) };
    };
    let text = content_type.to_str().unwrap_or("");
    let essence = text.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    let accepted = ["application/json", "application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml"];
    if accepted.contains(&essence.as_str()) { Ok(()) } else { Err(ApiError::unsupported_media_type(text)) }
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

/// How long a handler waits for the engine before answering 503: the engine answers in
/// milliseconds unless the machine is in trouble, and a client must not hang forever.
const ENGINE_ANSWER_TIMEOUT: Duration = Duration::from_secs(30);

/// Sends a command and waits for the engine's answer.
async fn ask<T>(state: &AppState, make: impl FnOnce(oneshot::Sender<T>) -> Command) -> Result<T, ApiError> {
    let (tx, rx) = oneshot::channel();
    state.engine.send(make(tx)).map_err(|_| ApiError::unavailable())?;
    match tokio::time::timeout(ENGINE_ANSWER_TIMEOUT, rx).await {
        Ok(answer) => answer.map_err(|_| ApiError::unavailable()),
        Err(_) => Err(ApiError::new_unavailable("the scheduling engine did not answer in time")),
    }
}

/// The whole body, within the size limit and the read deadline.
async fn read_body(state: &AppState, request: Request) -> Result<Bytes, ApiError> {
    let read = axum::body::to_bytes(request.into_body(), state.body_bytes_max);
    match tokio::time::timeout(state.body_read_timeout, read).await {
        Ok(Ok(bytes)) => Ok(bytes),
        Ok(Err(e)) if is_length_limit(&e) => Err(ApiError::payload_too_large(state.body_bytes_max)),
        Ok(Err(_)) => Err(ApiError::bad_request("body: the connection failed while the body was read")),
        Err(_) => Err(ApiError::timeout("sending the request body")),
    }
}

fn is_length_limit(e: &axum::Error) -> bool {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cause {
        if c.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        cause = c.source();
    }
    false
}

use crate::error::parse_json as json_body;
use crate::error::parse_query as query;

// ---- jobs ------------------------------------------------------------------------------

async fn submit(
    State(state): State<AppState>,
    Extension(who): Extension<Identity>,
    request: Request,
) -> Result<Response, ApiError> {
    if !who.may_submit() {
        return Err(ApiError::forbidden(format!(
            "token {:?} is a viewer token: it may not submit jobs",
            who.token_name
        )));
    }
    let bytes = read_body(&state, request).await?;
    let limits = ParseLimits { input_bytes_max: state.body_bytes_max, ..ParseLimits::default() };
    // Parsed here, off the engine's thread, and checked against the classes it has now so
    // that every problem is reported at once; the engine checks classes again under its own
    // lock of time (one may have been added since).
    let classes = state.classes.read().expect("not poisoned").clone();
    let options = fairway_spec::ParseOptions { tenant_required: false, ..fairway_spec::ParseOptions::default() };
    let resolved =
        fairway_spec::parse_and_resolve(&bytes, &limits, &classes, &options).map_err(ApiError::invalid_spec)?;
    let parsed = resolved.parsed;
    if parsed.jobs.is_empty() && parsed.priority_classes.is_empty() {
        return Err(ApiError::bad_request("input: the body holds no job and no priority class"));
    }
    let response = ask(&state, |reply| Command::Submit { parsed, who, reply }).await??;
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
    cursor: Option<i64>,
}

async fn list_jobs(
    State(state): State<AppState>,
    Extension(who): Extension<Identity>,
    RawQuery(raw): RawQuery,
) -> Result<Json<JobList>, ApiError> {
    let mut q: ListQuery = query(raw.as_deref())?;
    // A non-admin sees its own project's jobs, and asking for another's is an error rather
    // than an empty list that would look like "none there".
    if !who.is_admin() {
        match &q.project {
            Some(p) if *p != who.project => {
                return Err(ApiError::forbidden(format!(
                    "query parameter project: your token may see project {:?} only, not {p:?}",
                    who.project
                )));
            }
            _ => q.project = Some(who.project.clone()),
        }
    }
    let mut states = Vec::new();
    for s in q.state.iter().flat_map(|s| s.split(',')).filter(|s| !s.is_empty()) {
        states.push(JobState::parse(s).ok_or_else(|| {
            ApiError::bad_request(format!(
                "query parameter state: {s:?} is not one of pending, running, preempting, stopping, succeeded, \
                 failed, cancelled"
            ))
        })?);
    }
    if q.limit == Some(0) {
        return Err(ApiError::bad_request("query parameter limit: must be at least 1"));
    }
    let limit = q.limit.unwrap_or(1000).min(state.list_jobs_max);
    let filter = JobFilter {
        states,
        user: q.user,
        project: q.project,
        priority_class: q.priority_class,
        priority_min: q.priority_min,
        name: q.name,
        before_id: q.cursor,
        limit,
    };
    let (rows, total) = state.readers.with(move |s| Ok((s.jobs(&filter)?, s.count_jobs(&filter)?))).await?;
    let live = live_of(&state, &rows).await?;
    let jobs: Vec<JobView> = rows.iter().map(|r| job_view(&state, r, live.get(&r.id))).collect();
    // A full page may have more behind it; the last page says so by having no cursor.
    let next_cursor = (rows.len() == limit as usize).then(|| rows.last().map(|r| r.id)).flatten();
    Ok(Json(JobList { jobs, total, next_cursor }))
}

/// Live facts for the unfinished jobs among `rows`.
async fn live_of(state: &AppState, rows: &[JobRow]) -> Result<BTreeMap<i64, LiveView>, ApiError> {
    let ids: Vec<i64> = rows.iter().filter(|r| !r.state.is_finished()).map(|r| r.id).collect();
    if ids.is_empty() {
        return Ok(BTreeMap::new());
    }
    ask(state, |reply| Command::Live { ids, reply }).await
}

/// A job the caller may see: others' jobs are "not found", so that ids do not reveal
/// whether another project's job exists.
async fn job_row(state: &AppState, who: &Identity, id: i64) -> Result<JobRow, ApiError> {
    match state.readers.with(move |s| s.job(id)).await? {
        Some(row) if who.sees(&row.project) => Ok(row),
        _ => Err(ApiError::not_found(id)),
    }
}

/// A job the caller may change: its owner or an admin.
async fn owned_job_row(state: &AppState, who: &Identity, id: i64, what: &str) -> Result<JobRow, ApiError> {
    let row = job_row(state, who, id).await?;
    if !who.owns(&row.user, &row.project) {
        return Err(ApiError::forbidden(format!(
            "job {id} belongs to user {:?} of project {:?}: only its owner or an admin may {what} it",
            row.user, row.project
        )));
    }
    Ok(row)
}

async fn get_job(
    State(state): State<AppState>,
    Extension(who): Extension<Identity>,
    Path(id): Path<String>,
) -> Result<Json<JobDetail>, ApiError> {
    let id = job_id(&id)?;
    let row = job_row(&state, &who, id).await?;
    let events = state.readers.with(move |s| s.events(id)).await?;
    let live = live_of(&state, std::slice::from_ref(&row)).await?;
    let mut spec = serde_json::from_str(&row.spec_json).unwrap_or(serde_json::Value::Null);
    if !who.sees_secrets_of(&row.user, &row.project) {
        redact_env(&mut spec);
    }
    Ok(Json(JobDetail {
        job: job_view(&state, &row, live.get(&id)),
        spec,
        events: events.into_iter().map(event_view).collect(),
    }))
}

/// Env values may hold credentials: others in the project see the names only.
fn redact_env(spec: &mut serde_json::Value) {
    if let Some(env) = spec.get_mut("env").and_then(|e| e.as_object_mut()) {
        for value in env.values_mut() {
            *value = serde_json::Value::String("(hidden: only the job's owner and admins see env values)".into());
        }
    }
}

async fn cancel(
    State(state): State<AppState>,
    Extension(who): Extension<Identity>,
    Path(id): Path<String>,
) -> Result<Json<CancelResponse>, ApiError> {
    let id = job_id(&id)?;
    owned_job_row(&state, &who, id, "cancel").await?;
    Ok(Json(ask(&state, |reply| Command::Cancel { id, reply }).await??))
}

async fn events(
    State(state): State<AppState>,
    Extension(who): Extension<Identity>,
    Path(id): Path<String>,
) -> Result<Json<EventList>, ApiError> {
    let id = job_id(&id)?;
    job_row(&state, &who, id).await?;
    let events = state.readers.with(move |s| s.events(id)).await?;
    Ok(Json(EventList { events: events.into_iter().map(event_view).collect() }))
}

async fn why(
    State(state): State<AppState>,
    Extension(who): Extension<Identity>,
    Path(id): Path<String>,
) -> Result<Json<WhyView>, ApiError> {
    let id = job_id(&id)?;
    let row = job_row(&state, &who, id).await?;
    let live = live_of(&state, std::slice::from_ref(&row)).await?;
    let live = live.get(&id).cloned().unwrap_or_default();
    Ok(Json(WhyView {
        id,
        state: row.state,
        reasons: live.reasons,
        reservation: live.reservation,
        queue_position: live.queue_position,
        fair_share: live.fair_share,
        start_estimate: live.start_estimate,
    }))
}

async fn checkpoint(
    State(state): State<AppState>,
    Extension(who): Extension<Identity>,
    Path(id): Path<String>,
    request: Request,
) -> Result<StatusCode, ApiError> {
    let id = job_id(&id)?;
    owned_job_row(&state, &who, id, "report checkpoints of").await?;
    let bytes = read_body(&state, request).await?;
    let report: CheckpointReport =
        if bytes.iter().all(u8::is_ascii_whitespace) { CheckpointReport::default() } else { json_body(&bytes)? };
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
    Extension(who): Extension<Identity>,
    Path(id): Path<String>,
    RawQuery(raw): RawQuery,
) -> Result<Response, ApiError> {
    let id = job_id(&id)?;
    let q: LogsQuery = query(raw.as_deref())?;
    let row = job_row(&state, &who, id).await?;
    let replica = q.replica.unwrap_or(0);
    let replicas = serde_json::from_str::<serde_json::Value>(&row.spec_json)
        .ok()
        .and_then(|spec| spec["replicas"].as_u64())
        .unwrap_or(1);
    if u64::from(replica) >= replicas {
        return Err(ApiError::bad_request(format!(
            "query parameter replica: job {id} has {replicas} replica{} (0 to {}), not {replica}",
            if replicas == 1 { "" } else { "s" },
            replicas - 1
        )));
    }
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

/// Quotas: an admin sees every account; anyone else sees its own user and project.
async fn quotas(
    State(state): State<AppState>,
    Extension(who): Extension<Identity>,
) -> Result<Json<QuotaList>, ApiError> {
    let mut list = ask(&state, |reply| Command::Quotas { reply }).await?;
    if !who.is_admin() {
        list.quotas.retain(|q| match q.kind.as_str() {
            "user" => q.account == who.user,
            _ => q.account == who.project,
        });
    }
    Ok(Json(list))
}

fn admin_only(who: &Identity, what: &str) -> Result<(), ApiError> {
    if who.is_admin() {
        return Ok(());
    }
    Err(ApiError::forbidden(format!("only an admin token may {what}; this one is a {} token", who.role.as_str())))
}

async fn set_quota(
    State(state): State<AppState>,
    Extension(who): Extension<Identity>,
    Path((kind, account)): Path<(String, String)>,
    request: Request,
) -> Result<Json<QuotaView>, ApiError> {
    admin_only(&who, "set quotas")?;
    let bytes = read_body(&state, request).await?;
    let quota: QuotaSpec = json_body(&bytes)?;
    let view = ask(&state, |reply| Command::SetQuota { kind, account, quota: Some(quota), reply }).await??;
    view.map(Json).ok_or_else(|| ApiError::internal("quota not set"))
}

async fn delete_quota(
    State(state): State<AppState>,
    Extension(who): Extension<Identity>,
    Path((kind, account)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    admin_only(&who, "delete quotas")?;
    ask(&state, |reply| Command::SetQuota { kind, account, quota: None, reply }).await??;
    Ok(StatusCode::NO_CONTENT)
}

async fn set_weight(
    State(state): State<AppState>,
    Extension(who): Extension<Identity>,
    Path((kind, account)): Path<(String, String)>,
    request: Request,
) -> Result<Json<FairShareWeightView>, ApiError> {
    admin_only(&who, "set fair-share weights")?;
    let bytes = read_body(&state, request).await?;
    let spec: FairShareWeightSpec = json_body(&bytes)?;
    let weight = Some(spec.weight);
    Ok(Json(ask(&state, |reply| Command::SetWeight { kind, account, weight, reply }).await??))
}

async fn delete_weight(
    State(state): State<AppState>,
    Extension(who): Extension<Identity>,
    Path((kind, account)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    admin_only(&who, "set fair-share weights")?;
    ask(&state, |reply| Command::SetWeight { kind, account, weight: None, reply }).await??;
    Ok(StatusCode::NO_CONTENT)
}

/// Cohorts: an admin sees every one; anyone else those its project is a member of.
async fn cohorts(
    State(state): State<AppState>,
    Extension(who): Extension<Identity>,
) -> Result<Json<CohortList>, ApiError> {
    let mut list = ask(&state, |reply| Command::Cohorts { reply }).await?;
    if !who.is_admin() {
        list.cohorts.retain(|c| c.members.iter().any(|m| m.member.project == who.project));
    }
    Ok(Json(list))
}

async fn set_cohort(
    State(state): State<AppState>,
    Extension(who): Extension<Identity>,
    Path(name): Path<String>,
    request: Request,
) -> Result<Json<CohortView>, ApiError> {
    admin_only(&who, "change cohorts")?;
    let bytes = read_body(&state, request).await?;
    let spec: CohortSpec = json_body(&bytes)?;
    let view = ask(&state, |reply| Command::SetCohort { name, spec: Some(spec), reply }).await??;
    view.map(Json).ok_or_else(|| ApiError::internal("cohort not set"))
}

async fn delete_cohort(
    State(state): State<AppState>,
    Extension(who): Extension<Identity>,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    admin_only(&who, "delete cohorts")?;
    ask(&state, |reply| Command::SetCohort { name, spec: None, reply }).await??;
    Ok(StatusCode::NO_CONTENT)
}

async fn projects(
    State(state): State<AppState>,
    Extension(who): Extension<Identity>,
) -> Result<Json<ProjectList>, ApiError> {
    let mut list = ask(&state, |reply| Command::Projects { reply }).await?;
    if !who.is_admin() {
        list.projects.retain(|p| p.name == who.project);
    }
    Ok(Json(list))
}

async fn set_project(
    State(state): State<AppState>,
    Extension(who): Extension<Identity>,
    Path(name): Path<String>,
    request: Request,
) -> Result<Json<ProjectView>, ApiError> {
    admin_only(&who, "change projects")?;
    let bytes = read_body(&state, request).await?;
    let spec: ProjectSpec = json_body(&bytes)?;
    Ok(Json(ask(&state, |reply| Command::SetProject { name, spec, reply }).await??))
}

async fn tokens(
    State(state): State<AppState>,
    Extension(who): Extension<Identity>,
) -> Result<Json<TokenList>, ApiError> {
    admin_only(&who, "list tokens")?;
    let rows = state.readers.with(|s| s.tokens()).await?;
    Ok(Json(TokenList { tokens: rows.iter().map(token_view).collect() }))
}

async fn create_token(
    State(state): State<AppState>,
    Extension(who): Extension<Identity>,
    request: Request,
) -> Result<Response, ApiError> {
    admin_only(&who, "create tokens")?;
    let bytes = read_body(&state, request).await?;
    let spec: NewTokenRequest = json_body(&bytes)?;
    let created = ask(&state, |reply| Command::CreateToken { spec, reply }).await??;
    Ok((StatusCode::CREATED, Json(created)).into_response())
}

async fn revoke_token(
    State(state): State<AppState>,
    Extension(who): Extension<Identity>,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    let id = id
        .parse::<i64>()
        .ok()
        .filter(|id| *id > 0)
        .ok_or_else(|| ApiError::bad_request(format!("id: {id:?} is not a token id (a positive integer)")))?;
    // Anyone may revoke their own token (a leaked token should die fast); only an admin
    // may revoke others'.
    if id != who.token_id {
        admin_only(&who, "revoke other tokens")?;
    }
    ask(&state, |reply| Command::RevokeToken { id, reply }).await??;
    Ok(StatusCode::NO_CONTENT)
}

async fn whoami(State(state): State<AppState>, Extension(who): Extension<Identity>) -> Result<Json<WhoAmI>, ApiError> {
    let priority_class_max = if who.is_admin() {
        None
    } else {
        let project = who.project.clone();
        let list = ask(&state, |reply| Command::Projects { reply }).await?;
        Some(list.projects.into_iter().find(|p| p.name == project).map(|p| p.priority_class_max).unwrap_or_default())
    };
    Ok(Json(WhoAmI {
        token_id: who.token_id,
        token_name: who.token_name,
        user: who.user,
        project: who.project,
        role: who.role,
        priority_class_max,
    }))
}

pub(crate) fn token_view(row: &fairway_store::TokenRow) -> TokenView {
    TokenView {
        id: row.id,
        name: row.name.clone(),
        user: row.user.clone(),
        project: row.project.clone(),
        role: row.role,
        created_at_ms: row.created_at_ms,
        expires_at_ms: row.expires_at_ms,
        revoked_at_ms: row.revoked_at_ms,
    }
}

async fn health(State(state): State<AppState>) -> Result<Json<Health>, ApiError> {
    Ok(Json(ask(&state, |reply| Command::Health { reply }).await?))
}

async fn metrics(State(state): State<AppState>) -> Response {
    let content_type = "application/openmetrics-text; version=1.0.0; charset=utf-8";
    ([(header::CONTENT_TYPE, content_type)], state.metrics.encode()).into_response()
}

/// The dashboard's snapshot, cut to what the caller may see.
async fn dashboard(State(state): State<AppState>, Extension(who): Extension<Identity>) -> Result<Response, ApiError> {
    let inputs = ask(&state, |reply| Command::Dashboard { reply }).await?;
    let view = tokio::task::spawn_blocking(move || crate::dashboard::assemble(inputs).for_viewer(&who))
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?;
    Ok(Json(view).into_response())
}

/// The dashboard's page, script, style and icon (no data in them: no token needed).
async fn page(request: Request) -> Response {
    crate::dashboard::asset(request.uri().path())
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
    let now = state.clock.now_ms();
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
        gpu_milli: resources["gpu_milli"].as_u64().map(|m| m as u32),
        replicas: spec["replicas"].as_u64().unwrap_or(1) as u32,
        gpu_model: resources["gpu_model"].as_str().map(str::to_owned),
        submitted_at_ms: row.submitted_at_ms,
        first_started_at_ms: row.first_started_at_ms,
        started_at_ms: row.started_at_ms,
        finished_at_ms: row.finished_at_ms,
        wait_seconds: row.wait_ms(now) as f64 / 1000.0,
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
        start_estimate: live.and_then(|l| l.start_estimate.clone()),
        reservation: live.and_then(|l| l.reservation.clone()),
        fair_share: live.and_then(|l| l.fair_share),
    }
}
