//! The discrete-event loop: a virtual clock drives `fairway-core` exactly as the daemon
//! does (events in, one cycle, decisions out), and a cost model plays the jobs.
//!
//! Loop, per distinct event time `t`:
//! 1. submit every job arriving at `t`;
//! 2. report every exit due at `t` (finished work, victims at their deadline, kills);
//! 3. run one core cycle at `t`;
//! 4. carry out its decisions: a start schedules the job's finish (plus restart overhead
//!    when it resumes), a preemption schedules the victim's exit at its deadline;
//! 5. when start-time estimates are measured, forecast the jobs submitted at `t` that still
//!    wait (`EngineConfig::eta_jobs_max`);
//! 6. check the invariants (see [`CheckLevel`]) and record GPU use.
//!
//! Cost of a preemption: the victim holds its GPUs for the grace period, loses the work
//! done since its last checkpoint, and pays `restart_overhead` when it resumes.
//!
//! Images (when `EngineConfig::images` is set, see [`crate::images`]): a start on a node
//! without the job's image waits for a pull there before the job makes progress (and
//! before any restart overhead); the nodes report their images to the core as pulls end,
//! so that placement can prefer nodes holding a job's image.

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap};
use std::sync::Arc;

use fairway_core::{
    AccountId, Config, CoreError, CycleOutcome, Decision, Event, ExitOutcome, JobId, JobSpec, NodeSpec, NominalQuota,
    QueueOrder, Quota, Scheduler, Time,
};

use crate::audit::Audit;
use crate::images::{Caches, ImagePulls};
use crate::metrics::{JobRecord, RunResult, SubmitEta, UtilSample};

/// One job as the simulator plays it.
#[derive(Clone, Debug, PartialEq)]
pub struct SimJob {
    /// `spec.id` must equal the job's index in the workload.
    pub spec: JobSpec,
    /// Shared with the run's records (a run copies no strings).
    pub name: Arc<str>,
    pub tier: Arc<str>,
    pub tenant: Arc<str>,
    pub submit_ms: u64,
    /// Run time when run alone.
    pub work_ms: u64,
}

/// What a preemption costs in the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CostModel {
    /// Time a resumed job spends before making progress again (reload, warm-up; and image
    /// pulls when the run has no image model, see `EngineConfig::images`).
    pub restart_overhead_ms: u64,
    /// When true, a victim saves all its progress on SIGTERM; otherwise it keeps only what
    /// its periodic checkpoints saved.
    pub checkpoint_on_preempt: bool,
}

impl Default for CostModel {
    fn default() -> CostModel {
        CostModel { restart_overhead_ms: 60_000, checkpoint_on_preempt: false }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct EngineConfig {
    pub core: Config,
    pub cost: CostModel,
    pub check: CheckLevel,
    /// Stop the clock here, if set.
    pub horizon_ms: Option<u64>,
    /// Fair-share weights of accounts (1 for the others), set before the first event.
    pub weights: Vec<(AccountId, u32)>,
    /// Projects' places in cohorts, likewise.
    pub nominals: Vec<(AccountId, NominalQuota)>,
    /// Measure start-time estimates: after each cycle, the jobs submitted at its time that
    /// still wait get the core's forecast (`Scheduler::forecast_jobs`), over at most this
    /// many queued jobs; 0: not measured.
    pub eta_jobs_max: usize,
    /// The image model: pull times and node caches (see [`crate::images`]); `None`: images
    /// cost nothing and nodes report none.
    pub images: Option<ImagePulls>,
}

/// The core's configuration for a run: as given, except that a run in which nothing reads
/// run-time estimates (no reservations, no start-time estimates measured) keeps no history
/// of run times, which only estimates read (`fairway_core::RuntimeEstimates`); the
/// decisions are the same either way.
fn core_config(config: &EngineConfig) -> Config {
    let mut core = config.core.clone();
    if core.policy.reservations.is_none() && config.eta_jobs_max == 0 {
        core.policy.estimates.history_runs_max = 0;
    }
    core
}

/// Queued jobs the simulator's forecasts cover by default (see `EngineConfig::eta_jobs_max`).
pub const ETA_JOBS_MAX: usize = 2_000;

/// How much checking a run does. Two checks exist:
///
/// - the driver's ledger ([`crate::audit`]): every decision, as it is carried out, against
///   the rules a user holds the scheduler to (whole gangs, no GPU twice, quotas, allowed
///   preemptions). Its cost is proportional to the decisions, so it sees every cycle of
///   any trace;
/// - the core's whole-state check (`Scheduler::check_invariants`): its internal indexes
///   against its jobs and nodes. Its cost grows with the cluster and the running jobs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CheckLevel {
    /// The ledger on every decision; the whole-state check after the first cycle, the last
    /// one, and in between whenever as many cycles have run since the previous one as a
    /// `WHOLE_CHECK_SPREAD`-th of the state it walks (nodes + placed jobs). Its cost is so
    /// amortised to a constant per cycle, whatever the cluster's size; small scenarios are
    /// still checked after every cycle.
    #[default]
    Amortised,
    /// The ledger, and the whole-state check after every cycle (tests, debugging).
    EveryCycle,
    /// No checks beyond conservation at the end (benchmarks of the replay alone).
    Off,
}

/// See [`CheckLevel::Amortised`]: with 8, the whole-state check costs about as much per
/// cycle as walking eight items of state.
const WHOLE_CHECK_SPREAD: usize = 8;

#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("the core refused an event at {at}: {source}")]
    Core { at: Time, source: CoreError },
    #[error("invariant broken after the cycle at {at}: {what}")]
    Invariant { at: Time, what: String },
    #[error("the cycle at {at} decided what the rules forbid: {what}")]
    Decision { at: Time, what: String },
    #[error("workload: job {index} has id {id}, expected ids in workload order")]
    JobIds { index: usize, id: JobId },
    #[error("workload: jobs must be sorted by submit time (job {index})")]
    Unsorted { index: usize },
    #[error("conservation broken at the end: {0}")]
    Conservation(String),
}

/// Where a job is in its life, from the simulator's side.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    NotSubmitted,
    Queued,
    Running,
    /// Asked to stop for a preemptor; exits at the deadline.
    Yielding,
    /// Asked to stop for good.
    Stopping,
    Finished,
    Failed,
}

#[derive(Clone, Debug)]
struct Live {
    phase: Phase,
    /// Bumped at every start; events of older runs are stale.
    epoch: u32,
    started_ms: u64,
    /// When this run starts making progress (after any restart overhead).
    progress_from_ms: u64,
    remaining_ms: u64,
    first_start_ms: Option<u64>,
    finish_ms: Option<u64>,
    preemptions: u32,
    lost_gpu_ms: u64,
    /// GPUs of the whole gang, in thousandths.
    gpu_milli: u64,
    /// Since when it waits, while queued.
    queued_since_ms: u64,
    /// Every finished pending interval: the first wait and each re-wait.
    queued_ms: u64,
    /// The start-time estimate it got when submitted.
    eta: SubmitEta,
    /// How long this run waits for its image before it makes progress.
    image_wait_ms: u64,
    /// GPU-ms held while waiting for images, over every run.
    image_wait_gpu_ms: u64,
}

impl Live {
    /// The run ends at `t`: the part of it spent waiting for the image (all of the wait, or
    /// up to `t` if it ends before its pull does), its GPU time counted apart.
    fn end_image_wait(&mut self, t: u64) -> u64 {
        let wait_ms = self.image_wait_ms.min(t - self.started_ms);
        self.image_wait_gpu_ms += self.gpu_milli * wait_ms / 1000;
        wait_ms
    }
}

/// A job's image pulls, with the image model (apart from `Live`, which every run walks).
#[derive(Clone, Debug, Default)]
struct JobImages {
    /// Each start's wait for its image.
    waits_ms: Vec<u64>,
    /// The nodes its run acquired its image on.
    nodes: Vec<u32>,
}

/// Timed events; at equal times finishes come before victims' exits, so a victim that
/// completes during its grace period counts as finished.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Due {
    Finish,
    YieldDeadline,
    Kill,
    /// A pull ended on a node (the index is the node's, the epoch 0).
    ImagePulled,
}

type Timed = Reverse<(u64, Due, usize, u32)>;

/// Progress callback: `(jobs submitted so far, jobs in total)`.
pub type Progress<'a> = &'a mut dyn FnMut(usize, usize);

/// Run one policy over the workload.
pub fn simulate(
    policy: &str,
    jobs: &[SimJob],
    nodes: &[NodeSpec],
    quotas: &[(AccountId, Quota)],
    config: &EngineConfig,
    progress: Progress<'_>,
) -> Result<RunResult, SimError> {
    check_workload(jobs)?;
    let mut sim = Sim::new(
        jobs,
        config,
        (config.check != CheckLevel::Off).then(|| Audit::new(nodes, quotas, &config.nominals, jobs.len())),
    );
    for node in nodes {
        sim.core
            .apply(Event::NodeAdded(node.clone()), Time::ZERO)
            .map_err(|source| SimError::Core { at: Time::ZERO, source })?;
    }
    if let Some(model) = &config.images {
        let ids_end = nodes.iter().map(|n| n.id.0 as usize + 1).max().unwrap_or(0);
        sim.caches = Some(Caches::new(model, ids_end));
        sim.job_images = vec![JobImages::default(); jobs.len()];
        if !model.prepulled.is_empty() {
            for node in nodes {
                sim.report_images(node.id.0 as usize, 0)?;
            }
        }
    }
    for (account, quota) in quotas {
        sim.core
            .apply(Event::SetQuota { account: *account, quota: Some(*quota) }, Time::ZERO)
            .expect("quotas always apply");
    }
    for &(project, nominal) in &config.nominals {
        sim.core
            .apply(Event::SetNominalQuota { project, nominal: Some(nominal) }, Time::ZERO)
            .map_err(|source| SimError::Core { at: Time::ZERO, source })?;
    }
    for &(account, weight) in &config.weights {
        sim.core
            .apply(Event::SetFairShareWeight { account, weight }, Time::ZERO)
            .map_err(|source| SimError::Core { at: Time::ZERO, source })?;
    }
    let capacity_gpus = nodes.iter().map(|n| n.capacity.gpus).sum();
    // Submit times apart from the jobs: the loop reads one per event, and a job is large.
    let arrivals: Vec<u64> = jobs.iter().map(|j| j.submit_ms).collect();
    let mut next_arrival = 0usize;
    let mut last_progress = 0usize;
    let mut outcome = CycleOutcome::default();
    while let Some(t) = sim.next_time(arrivals.get(next_arrival).copied()) {
        if config.horizon_ms.is_some_and(|h| t > h) {
            break;
        }
        let now = Time(t);
        // 1.
        let arrived_from = next_arrival;
        while arrivals.get(next_arrival) == Some(&t) {
            sim.submit(next_arrival, now)?;
            next_arrival += 1;
        }
        // 2.
        sim.report_exits_due(t)?;
        // 3.
        sim.core.cycle_into(now, &mut outcome);
        sim.cycles += 1;
        // 4.
        for decision in outcome.decisions.drain(..) {
            sim.carry_out(decision, t).map_err(|what| SimError::Decision { at: now, what })?;
        }
        // 5.
        if config.eta_jobs_max > 0 {
            sim.estimate_starts(arrived_from..next_arrival, now, config.eta_jobs_max);
        }
        // 6.
        if sim.whole_check_due() {
            sim.check_whole(now)?;
        }
        sim.record_util(t);
        if next_arrival - last_progress >= 4096 {
            progress(next_arrival, jobs.len());
            last_progress = next_arrival;
        }
    }
    progress(next_arrival, jobs.len());
    if sim.check != CheckLevel::Off && sim.cycles_since_whole_check > 0 {
        sim.check_whole(Time(sim.clock_ms))?;
    }
    let end_ms = sim.clock_ms;
    sim.check_conservation(config.horizon_ms.is_some())?;
    Ok(sim.into_result(policy, capacity_gpus, end_ms))
}

fn check_workload(jobs: &[SimJob]) -> Result<(), SimError> {
    for (index, job) in jobs.iter().enumerate() {
        if job.spec.id != JobId(index as u64) {
            return Err(SimError::JobIds { index, id: job.spec.id });
        }
        if index > 0 && jobs[index - 1].submit_ms > job.submit_ms {
            return Err(SimError::Unsorted { index });
        }
    }
    Ok(())
}

struct Sim<'a> {
    jobs: &'a [SimJob],
    cost: CostModel,
    core: Scheduler,
    live: Vec<Live>,
    timers: BinaryHeap<Timed>,
    /// GPUs allocated now, in thousandths.
    gpu_milli_allocated: u64,
    util: Vec<UtilSample>,
    clock_ms: u64,
    events: u64,
    cycles: u64,
    check: CheckLevel,
    /// The driver's ledger, unless checks are off.
    audit: Option<Audit>,
    /// Cycles run since the core's whole-state check last ran (`u64::MAX` before the first
    /// cycle, so that the first is checked).
    cycles_since_whole_check: u64,
    /// The nodes' images by node id, with the image model.
    caches: Option<Caches>,
    /// Per job, with the image model (empty without).
    job_images: Vec<JobImages>,
}

impl<'a> Sim<'a> {
    fn new(jobs: &'a [SimJob], config: &EngineConfig, audit: Option<Audit>) -> Sim<'a> {
        let live = jobs
            .iter()
            .map(|j| Live {
                phase: Phase::NotSubmitted,
                epoch: 0,
                started_ms: 0,
                progress_from_ms: 0,
                remaining_ms: j.work_ms,
                first_start_ms: None,
                finish_ms: None,
                preemptions: 0,
                lost_gpu_ms: 0,
                gpu_milli: j.spec.total().gpu_milli_total(),
                queued_since_ms: 0,
                queued_ms: 0,
                eta: SubmitEta::NotMeasured,
                image_wait_ms: 0,
                image_wait_gpu_ms: 0,
            })
            .collect();
        Sim {
            jobs,
            cost: config.cost,
            core: Scheduler::new(core_config(config)),
            live,
            timers: BinaryHeap::new(),
            gpu_milli_allocated: 0,
            util: vec![UtilSample { t_ms: 0, gpu_milli_allocated: 0 }],
            clock_ms: 0,
            events: 0,
            cycles: 0,
            check: config.check,
            audit,
            cycles_since_whole_check: u64::MAX,
            caches: None,
            job_images: Vec::new(),
        }
    }

    /// Counts the cycle just run; true when the whole-state check should follow it.
    fn whole_check_due(&mut self) -> bool {
        self.cycles_since_whole_check = self.cycles_since_whole_check.saturating_add(1);
        match (self.check, &self.audit) {
            (CheckLevel::EveryCycle, _) => true,
            (CheckLevel::Amortised, Some(audit)) => {
                let spread = (audit.state_size() / WHOLE_CHECK_SPREAD).max(1) as u64;
                self.cycles_since_whole_check >= spread
            }
            _ => false,
        }
    }

    fn check_whole(&mut self, now: Time) -> Result<(), SimError> {
        self.cycles_since_whole_check = 0;
        self.core.check_invariants().map_err(|what| SimError::Invariant { at: now, what })
    }

    /// The next time anything happens: the next arrival (`arrival`), a timer, or a core
    /// wake-up.
    fn next_time(&self, arrival: Option<u64>) -> Option<u64> {
        let timer = self.timers.peek().map(|Reverse((t, ..))| *t);
        let wakeup = self.core.next_wakeup().map(|t| t.millis()).filter(|t| *t > self.clock_ms);
        // Pairwise: asked once per cycle, where an iterator over the three cost a tenth of
        // the loop's own work.
        let earliest = |a: Option<u64>, b: Option<u64>| match (a, b) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        earliest(earliest(arrival, timer), wakeup)
    }

    fn submit(&mut self, index: usize, now: Time) -> Result<(), SimError> {
        self.clock_ms = now.millis();
        self.events += 1;
        self.live[index].phase = Phase::Queued;
        self.live[index].queued_since_ms = now.millis();
        let mut spec = self.jobs[index].spec.clone();
        if self.core.config().policy.order == QueueOrder::PriorityShortestFirst {
            // The shortest-job-first oracle: it knows each job's true duration.
            spec.runtime_estimate_ms = Some(self.jobs[index].work_ms);
        }
        self.core.apply(Event::Submit(spec), now).map_err(|source| SimError::Core { at: now, source })
    }

    fn report_exits_due(&mut self, t: u64) -> Result<(), SimError> {
        self.clock_ms = t;
        while let Some(&Reverse((due_at, due, index, epoch))) = self.timers.peek() {
            if due_at > t {
                break;
            }
            self.timers.pop();
            if due == Due::ImagePulled {
                self.report_images(index, t)?;
                continue;
            }
            if self.live[index].epoch != epoch {
                continue; // A timer of an earlier run.
            }
            let outcome = match (due, self.live[index].phase) {
                (Due::Finish, Phase::Running | Phase::Yielding) => self.finish(index, t),
                (Due::YieldDeadline, Phase::Yielding) => self.yield_gpus(index, t),
                (Due::Kill, Phase::Stopping) => self.kill(index, t),
                _ => continue, // Already handled by an earlier timer at the same time.
            };
            if let Some(audit) = &mut self.audit {
                audit.exited(index, &self.jobs[index].spec);
            }
            self.release_image(index, t);
            self.events += 1;
            self.core
                .apply(Event::Exited { job: JobId(index as u64), outcome }, Time(t))
                .map_err(|source| SimError::Core { at: Time(t), source })?;
        }
        Ok(())
    }

    fn finish(&mut self, index: usize, t: u64) -> ExitOutcome {
        let live = &mut self.live[index];
        // The final run's restart overhead is lost too (the overhead of a preempted run is
        // counted when it yields); its wait for the image is counted apart.
        let image_wait_ms = live.end_image_wait(t);
        live.lost_gpu_ms += live.gpu_milli * (live.progress_from_ms - live.started_ms - image_wait_ms) / 1000;
        live.phase = Phase::Finished;
        live.finish_ms = Some(t);
        live.remaining_ms = 0;
        self.gpu_milli_allocated -= live.gpu_milli;
        ExitOutcome::Succeeded
    }

    /// A victim leaves at its deadline keeping only checkpointed progress.
    fn yield_gpus(&mut self, index: usize, t: u64) -> ExitOutcome {
        let interval = self.jobs[index].spec.checkpoint_interval_ms;
        let save_all = self.cost.checkpoint_on_preempt;
        let live = &mut self.live[index];
        let progress = t.saturating_sub(live.progress_from_ms).min(live.remaining_ms);
        let saved = match interval {
            _ if save_all => progress,
            Some(i) if i > 0 => progress - progress % i,
            _ => 0,
        };
        live.remaining_ms -= saved;
        // Any wait for the image is counted apart from what the preemption lost.
        let image_wait_ms = live.end_image_wait(t);
        live.lost_gpu_ms += live.gpu_milli * (t - live.started_ms - saved - image_wait_ms) / 1000;
        live.preemptions += 1;
        live.phase = Phase::Queued;
        live.queued_since_ms = t;
        self.gpu_milli_allocated -= live.gpu_milli;
        ExitOutcome::Requeue
    }

    fn kill(&mut self, index: usize, t: u64) -> ExitOutcome {
        let live = &mut self.live[index];
        live.end_image_wait(t);
        live.phase = Phase::Failed;
        self.gpu_milli_allocated -= live.gpu_milli;
        ExitOutcome::Failed
    }

    /// Acts on one decision, after the ledger (when on) has checked it.
    fn carry_out(&mut self, decision: Decision, t: u64) -> Result<(), String> {
        match decision {
            Decision::Start { job, placement } => {
                let index = job.0 as usize;
                if let Some(audit) = &mut self.audit {
                    audit.start(index, &self.jobs[index].spec, &placement)?;
                }
                let overhead =
                    if self.live[index].first_start_ms.is_some() { self.cost.restart_overhead_ms } else { 0 };
                let image_wait_ms = self.acquire_image(index, &placement, t).map_err(|e| e.to_string())?;
                let live = &mut self.live[index];
                debug_assert_eq!(live.phase, Phase::Queued);
                live.phase = Phase::Running;
                live.queued_ms += t - live.queued_since_ms;
                live.epoch += 1;
                live.started_ms = t;
                live.image_wait_ms = image_wait_ms;
                live.progress_from_ms = t + image_wait_ms + overhead;
                live.first_start_ms.get_or_insert(t);
                self.gpu_milli_allocated += live.gpu_milli;
                let finish_at = live.progress_from_ms + live.remaining_ms;
                self.timers.push(Reverse((finish_at, Due::Finish, index, live.epoch)));
            }
            Decision::Preempt { victim, preemptor, deadline, cause } => {
                let index = victim.0 as usize;
                if let Some(audit) = &self.audit {
                    let by = preemptor.0 as usize;
                    audit.preempt(index, &self.jobs[index].spec, by, &self.jobs[by].spec, cause)?;
                    if self.live[index].phase != Phase::Running {
                        return Err(format!("{victim} preempted again, or while it stops"));
                    }
                }
                let live = &mut self.live[index];
                live.phase = Phase::Yielding;
                self.timers.push(Reverse((deadline.millis().max(t), Due::YieldDeadline, index, live.epoch)));
            }
            Decision::Stop { job, .. } => {
                let index = job.0 as usize;
                let live = &mut self.live[index];
                if matches!(live.phase, Phase::Running | Phase::Yielding) {
                    live.phase = Phase::Stopping;
                    self.timers.push(Reverse((t, Due::Kill, index, live.epoch)));
                }
            }
            Decision::Requeued { job, .. } => {
                // The simulator removes no nodes, but stay correct if a scenario ever does.
                let index = job.0 as usize;
                if let Some(audit) = &mut self.audit {
                    audit.exited(index, &self.jobs[index].spec);
                }
                self.release_image(index, t);
                let live = &mut self.live[index];
                live.end_image_wait(t);
                live.phase = Phase::Queued;
                live.queued_since_ms = t;
                live.epoch += 1;
                self.gpu_milli_allocated -= live.gpu_milli;
            }
        }
        Ok(())
    }

    /// With the image model, a start takes the job's image on each of its nodes: how long it
    /// waits for the slowest (0 without the model or an image). Pulls it begins are reported
    /// to the core when they end; removals now.
    fn acquire_image(&mut self, index: usize, placement: &fairway_core::Placement, t: u64) -> Result<u64, SimError> {
        let (Some(caches), Some(image)) = (&mut self.caches, self.jobs[index].spec.image) else {
            return Ok(0);
        };
        let mut nodes: Vec<u32> = placement.replicas().iter().map(|r| r.node.0).collect();
        nodes.sort_unstable();
        nodes.dedup();
        let mut ready_ms = t;
        let mut removed_on = Vec::new();
        for &node in &nodes {
            let got = caches.acquire(node as usize, image, t);
            ready_ms = ready_ms.max(got.ready_ms);
            if got.pulled {
                self.timers.push(Reverse((got.ready_ms, Due::ImagePulled, node as usize, 0)));
            }
            if got.removed {
                removed_on.push(node as usize);
            }
        }
        for node in removed_on {
            self.report_images(node, t)?;
        }
        let images = &mut self.job_images[index];
        images.nodes = nodes;
        images.waits_ms.push(ready_ms - t);
        Ok(ready_ms - t)
    }

    /// The run of job `index` ended at `t`: its nodes no longer use its image.
    fn release_image(&mut self, index: usize, t: u64) {
        let (Some(caches), Some(image)) = (&mut self.caches, self.jobs[index].spec.image) else { return };
        for node in std::mem::take(&mut self.job_images[index].nodes) {
            caches.release(node as usize, image, t);
        }
    }

    /// Tells the core which images node `node` holds at `t` (image rule 4).
    fn report_images(&mut self, node: usize, t: u64) -> Result<(), SimError> {
        let caches = self.caches.as_ref().expect("only the image model reports images");
        let images = caches.held(node, t);
        self.events += 1;
        self.core
            .apply(Event::NodeImages { node: fairway_core::NodeId(node as u32), images }, Time(t))
            .map_err(|source| SimError::Core { at: Time(t), source })
    }

    /// The estimates of the jobs just submitted: a job the cycle started got its start; the
    /// others, what the forecast says.
    fn estimate_starts(&mut self, arrived: std::ops::Range<usize>, now: Time, jobs_max: usize) {
        let mut waiting = BTreeSet::new();
        for index in arrived {
            match self.live[index].first_start_ms {
                Some(t) => self.live[index].eta = SubmitEta::At(t),
                None => {
                    // Unless the forecast gives a time (not for jobs ranked beyond its limit).
                    self.live[index].eta = SubmitEta::Unknown;
                    waiting.insert(JobId(index as u64));
                }
            }
        }
        if waiting.is_empty() {
            return;
        }
        for e in self.core.forecast_jobs(now, &waiting, jobs_max) {
            self.live[e.job.0 as usize].eta = match e.start.at() {
                Some(t) => SubmitEta::At(t.millis()),
                None => SubmitEta::Unknown,
            };
        }
    }

    fn record_util(&mut self, t: u64) {
        let last = self.util.last().expect("starts with a sample");
        if last.gpu_milli_allocated == self.gpu_milli_allocated {
            return;
        }
        if last.t_ms == t {
            self.util.pop();
        }
        self.util.push(UtilSample { t_ms: t, gpu_milli_allocated: self.gpu_milli_allocated });
    }

    /// Every job ends exactly once: finished, or still waiting/running only if the run was
    /// cut by a horizon or the job can never be placed.
    fn check_conservation(&self, cut: bool) -> Result<(), SimError> {
        let running =
            self.live.iter().filter(|l| matches!(l.phase, Phase::Running | Phase::Yielding | Phase::Stopping));
        let allocated: u64 = running.clone().map(|l| l.gpu_milli).sum();
        if allocated != self.gpu_milli_allocated {
            return Err(SimError::Conservation(format!(
                "{} thousandths of GPUs recorded as allocated, running jobs hold {allocated}",
                self.gpu_milli_allocated
            )));
        }
        if !cut && running.count() > 0 {
            return Err(SimError::Conservation("jobs still running after the last event".into()));
        }
        for (i, live) in self.live.iter().enumerate() {
            let done = matches!(live.phase, Phase::Finished | Phase::Failed);
            if done != live.finish_ms.is_some() && live.phase != Phase::Failed {
                return Err(SimError::Conservation(format!("job {i} ended inconsistently")));
            }
            if !cut && live.phase == Phase::NotSubmitted {
                return Err(SimError::Conservation(format!("job {i} never submitted")));
            }
        }
        Ok(())
    }

    fn into_result(mut self, policy: &str, capacity_gpus: u32, end_ms: u64) -> RunResult {
        let mut waits = self.job_images.iter_mut().map(|i| std::mem::take(&mut i.waits_ms));
        let records = self
            .jobs
            .iter()
            .zip(&self.live)
            .map(|(job, live)| JobRecord {
                name: job.name.clone(),
                tier: job.tier.clone(),
                tenant: job.tenant.clone(),
                gpu_milli: live.gpu_milli,
                submit_ms: job.submit_ms,
                first_start_ms: live.first_start_ms,
                finish_ms: live.finish_ms,
                work_ms: job.work_ms,
                preemptions: live.preemptions,
                lost_gpu_ms: live.lost_gpu_ms,
                eta_at_submit: live.eta,
                image_waits_ms: waits.next().unwrap_or_default(),
                image_wait_gpu_ms: live.image_wait_gpu_ms,
                queued_ms: match live.phase {
                    Phase::Queued => live.queued_ms + end_ms.saturating_sub(live.queued_since_ms),
                    _ => live.queued_ms,
                },
            })
            .collect();
        let placement = self.core.config().policy.packing.map_or(fairway_spec::CORE_SCORING, |p| p.name());
        RunResult {
            policy: policy.to_string(),
            placement: placement.to_owned(),
            capacity_gpus,
            records,
            util: self.util,
            events_processed: self.events,
            cycles: self.cycles,
            end_ms,
            core_counters: self.core.counters(),
        }
    }
}
