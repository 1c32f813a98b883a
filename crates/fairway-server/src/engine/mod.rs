//! The engine: one thread that owns the scheduling core and the store's writer. Everything
//! that changes state goes through its command channel, so the core sees one ordered stream
//! of events, exactly as in the simulator. The HTTP handlers never decide anything inline:
//! they send a command and wait for the answer.
//!
//! One turn of the loop:
//! 1. Wait for a command, or for the tick (run-time limits, checkpoint markers).
//! 2. Take every command already queued (up to a batch limit).
//! 3. Submissions of the batch: validate each, write all valid ones in one transaction,
//!    commit (durable), then hand them to the core and answer 201.
//! 4. Other commands in arrival order: run ends, launches, cancels, checkpoints, quotas.
//! 5. On a tick: read checkpoint markers of running jobs.
//! 6. If anything changed (or on a tick): run one core cycle; write its decisions in one
//!    transaction, commit, then give them to the executor.
//! 7. Once a second: refresh the gauges and the head-of-queue estimates, and check the
//!    `notify:` rules (`notices.rs`). Once a minute, with fair sharing: save each account's
//!    recent average (`recent_usage.rs`; also at shutdown).
//! 8. Answer the queries of the batch (after the cycle, so reasons are fresh).
//!
//! **When the store cannot be written** (disk full, I/O error), nothing is carried out that
//! was not recorded first: the decisions of that cycle are dropped, no process is started
//! or signalled for them, and the engine turns *degraded*. While degraded it refuses every
//! change with 503 `store_unavailable`, runs no cycle, answers queries, and says why in
//! `/healthz`. On each tick it tries a small write; once one succeeds it rebuilds its whole
//! state from the store exactly as a restart would (re-adopting live runs, judging runs
//! that ended meanwhile from their exit records) and resumes. Memory and store thus never
//! stay out of step.

mod admin;
mod cohorts;
mod jobdirs;
mod notices;
mod recent_usage;
mod recovery;
mod runs;
mod submit;
mod views;

pub(crate) use runs::parse_placement;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use crate::metrics::{PendingJobLabels, QueueLabels, Queued};
use fairway_core::{AccountId, Config, Event, JobId, Limits, NodeId, NodeSpec, Resources, Scheduler, Time};
use fairway_exec::{ContainerRuntime, GpuLayout, GpuSource};
use fairway_spec::{ClusterShape, Interner, ModelShape, PriorityClasses, ResolvedJob};
use fairway_store::{JobState, Store};
use tokio::sync::mpsc::UnboundedSender;
use tokio::sync::oneshot;

use crate::api::{
    CancelResponse, CohortList, CohortSpec, CohortView, Health, NewTokenRequest, NodeList, PreemptionView,
    PriorityClassList, ProjectList, ProjectSpec, ProjectView, QuotaList, QuotaSpec, QuotaView, ReasonView,
    SubmitResponse, TokenCreated,
};
use crate::auth::{Identity, Tokens};
use crate::config::ServerConfig;
use crate::error::ApiError;
use crate::executor::{ExecCommand, ProcessRecord, RunExit};
use crate::metrics::Metrics;

/// Commands taken per loop turn: bounds the latency of the turn and the size of a commit.
const BATCH_MAX: usize = 512;

pub type Reply<T> = oneshot::Sender<Result<T, ApiError>>;

/// What the engine is asked to do.
pub enum Command {
    Submit {
        parsed: fairway_spec::Parsed,
        who: Identity,
        reply: Reply<SubmitResponse>,
    },
    Cancel {
        id: i64,
        reply: Reply<CancelResponse>,
    },
    Checkpoint {
        id: i64,
        at_ms: Option<u64>,
        reply: Reply<()>,
    },
    SetQuota {
        kind: String,
        account: String,
        quota: Option<QuotaSpec>,
        reply: Reply<Option<QuotaView>>,
    },
    /// Set an account's fair-share weight, or (`None`) put it back to 1.
    SetWeight {
        kind: String,
        account: String,
        weight: Option<u32>,
        reply: Reply<crate::api::FairShareWeightView>,
    },
    /// Replace a cohort's members, or (`None`) delete the cohort.
    SetCohort {
        name: String,
        spec: Option<CohortSpec>,
        reply: Reply<Option<CohortView>>,
    },
    Cohorts {
        reply: oneshot::Sender<CohortList>,
    },
    /// Live facts of jobs (reasons, preemption) the store does not hold.
    Live {
        ids: Vec<i64>,
        reply: oneshot::Sender<BTreeMap<i64, LiveView>>,
    },
    Nodes {
        reply: oneshot::Sender<NodeList>,
    },
    Quotas {
        reply: oneshot::Sender<QuotaList>,
    },
    Classes {
        reply: oneshot::Sender<PriorityClassList>,
    },
    Projects {
        reply: oneshot::Sender<ProjectList>,
    },
    SetProject {
        name: String,
        spec: ProjectSpec,
        reply: Reply<ProjectView>,
    },
    CreateToken {
        spec: NewTokenRequest,
        reply: Reply<TokenCreated>,
    },
    RevokeToken {
        id: i64,
        reply: Reply<()>,
    },
    Health {
        reply: oneshot::Sender<Health>,
    },
    /// What the dashboard's snapshot is made from (`crate::dashboard`).
    Dashboard {
        reply: oneshot::Sender<crate::dashboard::Inputs>,
    },
    /// From the executor: a run's supervisors are up.
    Launched {
        job: i64,
        run: u32,
        processes: Vec<ProcessRecord>,
    },
    /// From the executor: a run is over. `killed`: it was still running at its deadline.
    RunEnded {
        job: i64,
        run: u32,
        exit: RunExit,
        killed: bool,
    },
    Shutdown,
}

impl From<crate::executor::ExecEvent> for Command {
    fn from(event: crate::executor::ExecEvent) -> Command {
        match event {
            crate::executor::ExecEvent::Launched { job, run, processes } => Command::Launched { job, run, processes },
            crate::executor::ExecEvent::RunEnded { job, run, exit, killed } => {
                Command::RunEnded { job, run, exit, killed }
            }
        }
    }
}

/// What only the engine knows about a job right now.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LiveView {
    pub reasons: Vec<ReasonView>,
    pub preemption: Option<PreemptionView>,
    pub queue_position: Option<u64>,
    pub start_estimate: Option<crate::api::StartEstimateView>,
    pub reservation: Option<crate::api::ReservationView>,
    pub fair_share: Option<crate::api::FairShareView>,
}

/// A job the engine still schedules (not finished).
pub(crate) struct ActiveJob {
    pub resolved: ResolvedJob,
    pub state: JobState,
    pub submitted_at_ms: u64,
    pub first_started_at_ms: Option<u64>,
    /// The number of the current (or next) run, from 0: its restart count.
    pub run: u32,
    /// A run is launched or being launched.
    pub in_flight: bool,
    pub started_at_ms: Option<u64>,
    pub failures: u32,
    pub preemptions: u32,
    /// When it was chosen as a victim within the last hour, oldest first, if its class caps
    /// preemptions an hour (rule 1): handed back to the core when it is restored.
    pub preempted_at_ms: Vec<u64>,
    /// Run time of finished runs.
    pub runtime_done_ms: u64,
    /// Since when it waits, while pending (submission, or the end of its last run).
    pub pending_since_ms: Option<u64>,
    pub last_checkpoint_ms: Option<u64>,
    /// When the server asked the current run to stop (preemption, cancel, run-time limit):
    /// an exit after this is that stop, whatever its status, unless the job reported that it
    /// had completed.
    pub stop_requested_at_ms: Option<u64>,
    /// Waiting out a retry's backoff: not in the core until then.
    pub retry_at_ms: Option<u64>,
}

impl ActiveJob {
    /// Keeps `now` among the recent preemptions if the class caps them (rule 1), dropping
    /// those beyond the cap: the core looks at no more.
    pub fn remember_preemption(&mut self, now: u64) {
        let Some(max) = self.resolved.protection.preemptions_per_hour_max else { return };
        self.preempted_at_ms.push(now);
        let excess = self.preempted_at_ms.len().saturating_sub(max as usize);
        self.preempted_at_ms.drain(..excess);
    }
}

/// The cluster as the server runs it: node `i` is the core's `NodeId(i)`.
pub struct Cluster {
    pub layout: GpuLayout,
    pub source: GpuSource,
    pub shape: ClusterShape,
}

impl Cluster {
    pub fn new(layout: GpuLayout, source: GpuSource) -> Cluster {
        let mut shape = ClusterShape::default();
        for node in &layout.nodes {
            let m = shape.models.entry(node.gpu_model.clone()).or_insert(ModelShape::default());
            m.gpus_per_node_max = m.gpus_per_node_max.max(node.gpus.len() as u32);
            m.cpu_millis_max = m.cpu_millis_max.max(node.cpu_millis);
            m.memory_mib_max = m.memory_mib_max.max(node.memory_mib);
        }
        Cluster { layout, source, shape }
    }

    pub fn node_name(&self, node: NodeId) -> &str {
        self.layout.nodes.get(node.0 as usize).map_or("?", |n| n.name.as_str())
    }
}

pub struct Engine {
    pub(crate) core: Scheduler,
    pub(crate) store: Store,
    pub(crate) interner: Interner,
    pub(crate) classes: PriorityClasses,
    pub(crate) cluster: Arc<Cluster>,
    pub(crate) jobs: BTreeMap<i64, ActiveJob>,
    pub(crate) config: ServerConfig,
    pub(crate) exec: UnboundedSender<ExecCommand>,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) runtime: Option<ContainerRuntime>,
    pub(crate) images: Arc<RwLock<Vec<crate::api::ImageView>>>,
    pub(crate) tokens: Tokens,
    /// A copy of `classes` for the HTTP handlers, updated whenever `classes` changes.
    pub(crate) shared_classes: Arc<RwLock<PriorityClasses>>,
    /// Per-project settings from the store (what the API set; the config file's values are
    /// written there at start-up).
    pub(crate) projects: BTreeMap<String, fairway_store::ProjectRow>,
    /// Jobs waiting out a retry's backoff, by the time they return to the queue.
    pub(crate) backoff: std::collections::BTreeSet<(u64, i64)>,
    /// The Unix identity each project's jobs run as (config `projects[].run_as`).
    pub(crate) run_as: BTreeMap<String, fairway_exec::RunAs>,
    /// Stored cohorts not in effect, by name, with why: made through the API, they conflict
    /// with the config file's cohorts at start-up (`cohorts.rs`). Kept in the store, shown
    /// with the reason, and ignored when other cohorts change.
    pub(crate) cohorts_left_out: BTreeMap<String, String>,
    /// Why the store cannot be written, while it cannot (see the module doc).
    pub(crate) degraded: Option<String>,
    /// Something changed since the last cycle.
    dirty: bool,
    last_tick: Instant,
    /// When the head-of-queue start estimates were last refreshed (ms).
    head_estimates_at_ms: Option<u64>,
    /// When fair sharing's recent averages were last saved (ms; `recent_usage.rs`).
    recent_usage_saved_at_ms: Option<u64>,
    /// The `notify:` rules and what fires now.
    pub(crate) notifier: crate::notify::Evaluator,
    /// Where notices go to be sent; `None` without rules.
    pub(crate) notices: Option<tokio::sync::mpsc::Sender<crate::notify::Notice>>,
}

/// How often, at most, the metric of each queue's head-of-queue expected start is
/// refreshed: each refresh forecasts the queue (its first `FORECAST_JOBS_MAX` jobs at most,
/// as far as the last queue's head).
const HEAD_ESTIMATES_EVERY_MS: u64 = 1_000;

/// Everything the engine needs to start.
pub struct EngineParts {
    pub config: ServerConfig,
    pub store: Store,
    pub cluster: Arc<Cluster>,
    pub exec: UnboundedSender<ExecCommand>,
    pub metrics: Arc<Metrics>,
    pub runtime: Option<ContainerRuntime>,
    pub images: Arc<RwLock<Vec<crate::api::ImageView>>>,
    pub tokens: Tokens,
    pub classes: Arc<RwLock<PriorityClasses>>,
    /// The sending task's queue (`crate::notify::deliver::spawn`), with `notify:` rules.
    pub notices: Option<tokio::sync::mpsc::Sender<crate::notify::Notice>>,
}

impl Engine {
    /// Milliseconds since the Unix epoch, from the config's clock: the core's time in the
    /// server (see `crate::clock`).
    pub(crate) fn now_ms(&self) -> u64 {
        self.config.clock.now_ms()
    }

    /// Builds the core from the store: nodes, classes, quotas, then every unfinished job
    /// (pending ones at their original positions, live runs re-adopted).
    pub fn start(parts: EngineParts) -> Result<Engine, crate::ServerError> {
        let notifier = crate::notify::Evaluator::new(&parts.config.file.notify);
        let mut engine = Engine {
            core: new_core(&parts.config),
            store: parts.store,
            interner: Interner::new(),
            classes: PriorityClasses::builtin(),
            cluster: parts.cluster,
            jobs: BTreeMap::new(),
            config: parts.config,
            exec: parts.exec,
            metrics: parts.metrics,
            runtime: parts.runtime,
            images: parts.images,
            tokens: parts.tokens,
            shared_classes: parts.classes,
            projects: BTreeMap::new(),
            backoff: std::collections::BTreeSet::new(),
            run_as: BTreeMap::new(),
            cohorts_left_out: BTreeMap::new(),
            degraded: None,
            dirty: true,
            last_tick: Instant::now(),
            head_estimates_at_ms: None,
            recent_usage_saved_at_ms: None,
            notifier,
            notices: parts.notices,
        };
        // A store that cannot be written is refused now, before anything is restored.
        let now = engine.now_ms();
        engine.store.probe_write(now)?;
        engine.run_as = resolve_run_as(&engine.config)?;
        engine.bootstrap_admin_token()?;
        engine.write_config_settings()?;
        engine.write_config_cohorts()?;
        engine.absolutize_paths()?;
        engine.load()?;
        Ok(engine)
    }

    /// Everything in memory, from the store: nodes, classes, quotas, projects, tokens, and
    /// every unfinished job. The same at start-up and after the store was unwritable.
    fn load(&mut self) -> Result<(), crate::ServerError> {
        self.add_nodes()?;
        self.load_classes()?;
        self.share_classes();
        self.load_quotas()?;
        self.load_cohorts()?;
        self.load_weights()?;
        self.projects = self.store.projects()?.into_iter().map(|p| (p.name.clone(), p)).collect();
        self.tokens.load(&self.store.tokens()?);
        self.recover()?;
        self.restore_recent_usage()
    }

    /// Gives the HTTP handlers the classes as they are now.
    pub(crate) fn share_classes(&self) {
        *self.shared_classes.write().expect("not poisoned") = self.classes.clone();
    }

    /// Drops every in-memory fact and loads them again from the store: what a restart
    /// would build, without stopping any process.
    pub(crate) fn rebuild(&mut self) -> Result<(), crate::ServerError> {
        // What fair sharing remembers is in memory only until saved: saved now (the store
        // took a write), it survives the rebuild.
        self.save_recent_usage(self.now_ms());
        self.core = new_core(&self.config);
        self.interner = Interner::new();
        self.classes = PriorityClasses::builtin();
        self.jobs.clear();
        self.backoff.clear();
        self.metrics.reset_job_gauges();
        self.load()?;
        self.touch();
        Ok(())
    }

    fn add_nodes(&mut self) -> Result<(), crate::ServerError> {
        let now = Time(self.now_ms());
        for (i, node) in self.cluster.layout.nodes.iter().enumerate() {
            let gpu_model = self
                .interner
                .gpu_model(&node.gpu_model)
                .map_err(|e| crate::ServerError::Config(format!("GPU model {}: {e}", node.gpu_model)))?;
            let capacity = Resources::new(node.gpus.len() as u32, node.cpu_millis, node.memory_mib);
            let spec = NodeSpec { id: NodeId(i as u32), gpu_model, capacity };
            self.core.apply(Event::NodeAdded(spec), now).map_err(|e| crate::ServerError::Config(e.to_string()))?;
        }
        let (total, _) = self.core.gpu_totals();
        self.metrics.gpus_total.set(i64::from(total));
        Ok(())
    }

    /// The account of a user or a project. Users and projects are separate namespaces: a
    /// quota on project `ads` does not cap a user called `ads`.
    pub(crate) fn account(&mut self, kind: AccountKind, name: &str) -> Result<AccountId, ApiError> {
        account_in(&mut self.interner, kind, name)
    }

    pub(crate) fn account_name(&self, id: AccountId) -> (String, String) {
        match self.interner.account_name(id) {
            Some((kind, name)) => (kind.as_str().to_owned(), name.to_owned()),
            None => ("?".to_owned(), "?".to_owned()),
        }
    }

    /// Records that the store could not be written: see the module doc.
    pub(crate) fn degrade(&mut self, what: &str, error: &fairway_store::StoreError) {
        if self.degraded.is_none() {
            tracing::error!(
                "cannot record {what}: {error}; refusing changes and starting nothing until the store can be written"
            );
        }
        self.degraded = Some(format!("cannot write the store: {error}"));
    }

    /// On a tick while degraded: if the store takes a write again, rebuild from it.
    fn try_recover_store(&mut self) {
        if self.store.probe_write(self.now_ms()).is_err() {
            return;
        }
        let problem = self.degraded.take();
        match self.rebuild() {
            Ok(()) if self.degraded.is_none() => {
                tracing::info!("the store can be written again; state rebuilt from it ({problem:?} is over)");
            }
            Ok(()) => {}
            Err(e) => {
                tracing::error!("rebuilding from the store failed: {e}");
                self.degraded = Some(format!("rebuilding from the store failed: {e}"));
            }
        }
    }

    /// Runs the loop until `Shutdown` or until every sender is gone.
    pub fn run(mut self, commands: Receiver<Command>) {
        loop {
            let tick = Duration::from_millis(self.config.tick_ms);
            let timeout = tick.saturating_sub(self.last_tick.elapsed());
            let first = match commands.recv_timeout(timeout) {
                Ok(Command::Shutdown) | Err(RecvTimeoutError::Disconnected) => break,
                Ok(c) => Some(c),
                Err(RecvTimeoutError::Timeout) => None,
            };
            let mut batch: Vec<Command> = first.into_iter().collect();
            let mut shutdown = false;
            while batch.len() < BATCH_MAX {
                match commands.try_recv() {
                    Ok(Command::Shutdown) => {
                        shutdown = true;
                        break;
                    }
                    Ok(c) => batch.push(c),
                    Err(_) => break,
                }
            }
            if shutdown {
                break;
            }
            self.turn(batch);
        }
        if self.degraded.is_none() {
            self.save_recent_usage(self.now_ms());
        }
    }

    /// One turn of the loop (steps 3–8 of the module recipe).
    fn turn(&mut self, batch: Vec<Command>) {
        let ticked = self.last_tick.elapsed() >= Duration::from_millis(self.config.tick_ms);
        if ticked {
            self.last_tick = Instant::now();
            if self.degraded.is_some() {
                self.try_recover_store();
            }
        }
        if let Some(problem) = self.degraded.clone() {
            self.turn_degraded(batch, &problem);
            return;
        }
        let now = self.now_ms();
        let (submissions, rest): (Vec<Command>, Vec<Command>) =
            batch.into_iter().partition(|c| matches!(c, Command::Submit { .. }));
        if !submissions.is_empty() {
            self.submit_batch(submissions, now);
        }
        let mut queries = Vec::new();
        for command in rest {
            match command {
                Command::RunEnded { job, run, exit, killed } => self.run_ended(job, run, exit, killed, now),
                Command::Launched { job, run, processes } => self.launched(job, run, &processes),
                Command::Cancel { id, reply } => {
                    let _ = reply.send(self.cancel(id, now));
                }
                Command::Checkpoint { id, at_ms, reply } => {
                    let _ = reply.send(self.checkpoint(id, at_ms.unwrap_or(now).min(now)));
                }
                Command::SetQuota { kind, account, quota, reply } => {
                    let _ = reply.send(self.set_quota(&kind, &account, quota));
                }
                Command::SetCohort { name, spec, reply } => {
                    let _ = reply.send(self.set_cohort(&name, spec));
                }
                Command::SetWeight { kind, account, weight, reply } => {
                    let _ = reply.send(self.set_fair_share_weight(&kind, &account, weight));
                }
                Command::SetProject { name, spec, reply } => {
                    let _ = reply.send(self.set_project(&name, spec));
                }
                Command::CreateToken { spec, reply } => {
                    let _ = reply.send(self.create_token(spec, now));
                }
                Command::RevokeToken { id, reply } => {
                    let _ = reply.send(self.revoke_token(id, now));
                }
                query => queries.push(query),
            }
        }
        if ticked && self.degraded.is_none() {
            self.poll_checkpoint_markers();
        }
        self.end_backoffs(now);
        if self.degraded.is_some() {
            // A write failed this turn: no cycle on a state the store does not have.
        } else if self.dirty || ticked || self.core.next_wakeup().is_some_and(|t| t.millis() <= now) {
            self.dirty = false;
            self.cycle(self.now_ms());
            let (_, allocated) = self.core.gpu_totals();
            self.metrics.gpus_allocated.set(i64::from(allocated));
        }
        if self.degraded.is_none() && self.head_estimates_at_ms.is_none_or(|at| now >= at + HEAD_ESTIMATES_EVERY_MS) {
            self.head_estimates_at_ms = Some(now);
            self.refresh_head_estimates(now);
            self.refresh_gauges(now);
            self.evaluate_notify_rules(now);
        }
        let save_due =
            self.recent_usage_saved_at_ms.is_none_or(|at| now >= at + recent_usage::RECENT_USAGE_SAVE_EVERY_MS);
        if self.degraded.is_none() && save_due {
            self.recent_usage_saved_at_ms = Some(now);
            self.save_recent_usage(now);
        }
        for query in queries {
            self.answer(query);
        }
    }

    /// A turn while the store cannot be written: changes are refused, executor reports are
    /// dropped (the rebuild judges runs from what they left on disk), queries are answered.
    fn turn_degraded(&mut self, batch: Vec<Command>, problem: &str) {
        fn refuse<T>(reply: Reply<T>, problem: &str) {
            let _ = reply.send(Err(ApiError::store_unavailable(problem)));
        }
        for command in batch {
            match command {
                Command::Submit { reply, .. } => refuse(reply, problem),
                Command::Cancel { reply, .. } => refuse(reply, problem),
                Command::Checkpoint { reply, .. } => refuse(reply, problem),
                Command::SetQuota { reply, .. } => refuse(reply, problem),
                Command::SetCohort { reply, .. } => refuse(reply, problem),
                Command::SetWeight { reply, .. } => refuse(reply, problem),
                Command::SetProject { reply, .. } => refuse(reply, problem),
                Command::CreateToken { reply, .. } => refuse(reply, problem),
                Command::RevokeToken { reply, .. } => refuse(reply, problem),
                Command::RunEnded { .. } | Command::Launched { .. } | Command::Shutdown => {}
                query => self.answer(query),
            }
        }
    }

    fn cycle(&mut self, now: u64) {
        let started = Instant::now();
        let moved_before = self.core.counters().preemptors_moved;
        let outcome = self.core.cycle(Time(now));
        self.metrics.cycle_seconds.observe(started.elapsed().as_secs_f64());
        self.metrics.preemptors_moved.inc_by(self.core.counters().preemptors_moved - moved_before);
        self.metrics.starts_taken_back.inc_by(outcome.taken_back.len() as u64);
        if !outcome.decisions.is_empty() {
            self.carry_out(outcome.decisions, now);
        }
    }

    /// The metric of each queue's first pending job's expected start, in seconds from now
    /// (queues whose head has no estimate are left out).
    fn refresh_head_estimates(&mut self, now: u64) {
        let heads = crate::metrics::queue_heads(&self.core, now, |id| {
            let job = self.jobs.get(&(id.0 as i64))?;
            Some(QueueLabels { tier: tier_label(&job.resolved), tenant: job.resolved.doc.project.clone() })
        });
        self.metrics.set_head_estimates(heads);
    }

    /// The gauge families set from snapshots (`metrics.rs`): per queue, what waits and
    /// for how long (jobs in the core's queue and those waiting out a retry's backoff) and
    /// the GPUs held; the opt-in per-job series; each account's quota use; each cohort.
    fn refresh_gauges(&mut self, now: u64) {
        let waited = |j: &ActiveJob| j.pending_since_ms.map_or(0, |since| now.saturating_sub(since));
        let mut pending: Vec<(u64, i64, &ActiveJob)> =
            self.jobs.iter().filter(|(_, j)| j.state == JobState::Pending).map(|(&id, j)| (waited(j), id, j)).collect();
        self.metrics.set_queues(pending.iter().map(|&(waiting_ms, id, j)| Queued {
            tier: tier_name(&j.resolved),
            tenant: &j.resolved.doc.project,
            waiting_ms,
            reason: match j.retry_at_ms {
                Some(_) => "retry_backoff",
                None => crate::metrics::pending_reason_label(self.core.job_status(core_id(id))),
            },
        }));
        let placed = self.jobs.iter().filter_map(|(&id, j)| {
            let held = matches!(j.state, JobState::Running | JobState::Preempting | JobState::Stopping);
            let gpus = self.core.job_spec(core_id(id)).filter(|_| held)?.total().gpus;
            Some((tier_name(&j.resolved), j.resolved.doc.project.as_str(), gpus))
        });
        self.metrics.set_queue_gpus(placed);
        let wanted = self.config.file.metrics.pending_job_series_max as usize;
        if wanted > 0 {
            crate::metrics::keep_longest_waiting(&mut pending, wanted);
            self.metrics.set_pending_jobs(pending.into_iter().map(|(waiting_ms, id, j)| {
                let labels = PendingJobLabels {
                    tier: tier_name(&j.resolved).into(),
                    tenant: j.resolved.doc.project.clone(),
                    job_name: j.resolved.doc.name.clone(),
                    job_id: id.to_string(),
                };
                (labels, waiting_ms)
            }));
        }
        let quotas = self.quotas_view();
        self.metrics.set_quotas(&quotas);
        let cohorts = self.cohorts_view();
        self.metrics.set_cohorts(&cohorts);
    }

    /// Marks that the next turn must run a cycle.
    pub(crate) fn touch(&mut self) {
        self.dirty = true;
    }

    /// Moves a job between live states, keeping the gauges in step.
    pub(crate) fn set_live_state(&mut self, id: i64, state: JobState) {
        let Some(job) = self.jobs.get_mut(&id) else { return };
        let tier = tier_label(&job.resolved);
        self.metrics.job_state(&tier, job.state, -1);
        job.state = state;
        self.metrics.job_state(&tier, state, 1);
    }

    /// Forgets a finished job.
    pub(crate) fn finish(&mut self, id: i64) {
        if let Some(job) = self.jobs.remove(&id) {
            self.metrics.job_state(&tier_label(&job.resolved), job.state, -1);
        }
    }

    // ---- paths -----------------------------------------------------------------------

    pub(crate) fn job_dir(&self, id: i64) -> PathBuf {
        job_dir(&self.config.data_dir, id)
    }

    /// Who a project's jobs run as; `None`: the server's own user.
    pub(crate) fn run_as_of(&self, project: &str) -> Option<fairway_exec::RunAs> {
        self.run_as.get(project).copied()
    }
}

/// Each `run_as` user of the config, looked up once: a server that is not root cannot
/// switch users, and an unknown user is a configuration error, both refused at start.
fn resolve_run_as(config: &ServerConfig) -> Result<BTreeMap<String, fairway_exec::RunAs>, crate::ServerError> {
    let mut out = BTreeMap::new();
    for (i, project) in config.file.projects.iter().enumerate() {
        let Some(name) = &project.run_as else { continue };
        if !nix::unistd::geteuid().is_root() {
            return Err(crate::ServerError::Config(format!(
                "projects[{i}].run_as: only a server running as root can run jobs as another user ({name:?})"
            )));
        }
        let user = nix::unistd::User::from_name(name)
            .ok()
            .flatten()
            .ok_or_else(|| crate::ServerError::Config(format!("projects[{i}].run_as: no Unix user {name:?}")))?;
        out.insert(project.name.clone(), fairway_exec::RunAs { uid: user.uid.as_raw(), gid: user.gid.as_raw() });
    }
    Ok(out)
}

fn new_core(config: &ServerConfig) -> Scheduler {
    let limits = Limits {
        jobs_max: config.file.limits.jobs_active_max,
        victims_per_cycle_max: config.file.limits.preemption_victims_per_cycle_max,
        ..Limits::default()
    };
    let mut policy = fairway_core::Policy::fairway();
    policy.fair_share = config.file.fair_share.as_ref().and_then(|f| f.to_core().ok());
    if let Some((reservations, default_runtime_ms)) =
        config.file.reservations.and_then(|r| r.to_core("reservations").ok())
    {
        policy.reservations = Some(reservations);
        policy.estimates.default_runtime_ms = default_runtime_ms;
    }
    // Checked when the configuration loaded.
    if let Some(Ok(packing)) =
        config.file.placement.as_deref().map(|name| fairway_spec::placement_of(name, "placement"))
    {
        policy.packing = packing;
    }
    Scheduler::new(Config { policy, limits })
}

/// Where a job keeps its checkpoint directory, logs and run directories.
pub fn job_dir(data_dir: &Path, id: i64) -> PathBuf {
    data_dir.join("jobs").join(id.to_string())
}

/// A replica's log file.
pub fn log_path(data_dir: &Path, id: i64, replica: u32) -> PathBuf {
    job_dir(data_dir, id).join("logs").join(format!("replica-{replica}.log"))
}

pub(crate) fn account_in(interner: &mut Interner, kind: AccountKind, name: &str) -> Result<AccountId, ApiError> {
    interner.account_of(kind, name).map_err(|e| ApiError::internal(format!("account {name}: {e}")))
}

/// Users and projects are separate account namespaces, as `fairway-spec` decides.
pub use fairway_spec::AccountKind;

/// The metrics label of a job's tier: its class name, or `custom` for a bare value.
pub(crate) fn tier_label(job: &ResolvedJob) -> String {
    tier_name(job).into()
}

/// The priority tier a job is counted under in metrics: its class, or `custom`.
pub(crate) fn tier_name(job: &ResolvedJob) -> &str {
    job.priority_class.as_deref().unwrap_or("custom")
}

pub(crate) fn core_id(id: i64) -> JobId {
    JobId(id as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_configured_placement_reaches_the_core_and_fairway_is_the_default() {
        use fairway_core::packing::PackPolicy;
        let packing = |text: &str| {
            let mut config = ServerConfig::new(PathBuf::from("/nonexistent"));
            config.file = crate::config::ConfigFile::parse(text).unwrap();
            new_core(&config).config().policy.packing
        };
        assert_eq!(packing(""), Some(PackPolicy::Fairway));
        assert_eq!(packing("placement: best-fit\n"), Some(PackPolicy::BestFit));
        assert_eq!(packing("placement: core\n"), None);
    }
}
