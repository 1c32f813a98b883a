//! Runs: carrying out the core's decisions, and judging how runs end.
//!
//! The store is written before the executor acts: a run is `running` in the store before its
//! process exists, and a stop (its cause and deadline) is recorded before the signal. So
//! after a crash the store never forgets a process that might exist, and a restart keeps a
//! stop's deadline. If the write fails, nothing of that cycle is carried out (see the
//! engine's module doc).
//!
//! How a run's end is judged (`judge`):
//! 1. The server asked the run to stop (preemption, cancel, run-time limit): the exit is
//!    that stop, whatever its status, unless the job completed first: it exited 0 before
//!    the stop was asked, or it touched `$FAIRWAY_COMPLETION_FILE` before exiting 0. The
//!    usual `trap 'save; exit 0' TERM` pattern thus requeues a preempted job instead of
//!    marking it done.
//! 2. Otherwise exit 0 succeeds, and anything else fails; a failure with retries left runs
//!    again after a backoff (`retry_backoff`), keeping its queue position.

use std::collections::BTreeMap;
use std::path::PathBuf;

use fairway_core::{Decision, Event, ExitOutcome, JobStatus, PendingReason, Placement, PreemptCause, StopCause, Time};
use fairway_exec::{ContainerRun, LaunchSpec, PreemptNotice};
use fairway_store::{JobState, NewEvent, RunEnd, RunRow, StopRow, Tx};

use super::{AccountKind, Engine, core_id, tier_label, tier_name};
use crate::api::{CancelResponse, FairShareWeightView, QuotaSpec, QuotaView};
use crate::error::ApiError;
use crate::executor::{ExecCommand, ProcessRecord, RunExit};

/// The file a job touches to say it completed (see the module doc); in its checkpoint
/// directory, which image jobs see mounted.
pub const COMPLETION_FILE: &str = ".fairway-complete";

/// One store write of a cycle's decisions.
enum Write {
    Running(i64, RunRow, NewEvent),
    Stopping(i64, JobState, StopRow, NewEvent),
    Hold(i64, Option<String>),
    Event(NewEvent),
}

/// How the engine judges a finished run.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    Succeeded,
    /// Failed; `retry` when the job's retry budget allows another run.
    Failed {
        retry: bool,
        why: String,
    },
    /// Preempted: back to the queue; never counts against retries.
    Preempted {
        why: String,
    },
    Cancelled {
        why: String,
    },
    RuntimeLimit {
        why: String,
    },
    /// The run never started because the server died first: run it again, nothing counts.
    NotStarted,
}

/// A preemptor's hold as stored (`hold_json`), for a restart to give it back.
#[derive(serde::Serialize, serde::Deserialize)]
pub(crate) struct StoredHold {
    pub placement: Vec<(u32, Vec<u32>)>,
    pub victims: Vec<i64>,
}

/// An account's weight in the store: only those other than the default 1 are kept.
pub(crate) fn store_weight(tx: &mut Tx<'_>, row: &fairway_store::WeightRow) -> fairway_store::Result<()> {
    match row.weight {
        1 => tx.delete_fair_share_weight(&row.account_kind, &row.account).map(|_| ()),
        _ => tx.set_fair_share_weight(row),
    }
}

impl Engine {
    /// Step 6: write every decision in one transaction, commit, then tell the executor.
    pub(crate) fn carry_out(&mut self, decisions: Vec<Decision>, now: u64) {
        let mut commands = Vec::new();
        let mut writes = Vec::new();
        let mut preemptors: BTreeMap<i64, Vec<(i64, PreemptCause)>> = BTreeMap::new();
        for decision in decisions {
            match decision {
                Decision::Start { job, placement } => {
                    let id = job.0 as i64;
                    let (row, command, event) = self.start_run(id, &placement, now);
                    writes.push(Write::Running(id, row, event));
                    commands.push(command);
                }
                Decision::Preempt { victim, preemptor, deadline, cause } => {
                    let (victim, preemptor) = (victim.0 as i64, preemptor.0 as i64);
                    let (event, stop, command) = self.preempt(victim, preemptor, deadline, cause, now);
                    writes.push(Write::Stopping(victim, JobState::Preempting, stop, event));
                    preemptors.entry(preemptor).or_default().push((victim, cause));
                    commands.extend(command);
                    self.set_live_state(victim, JobState::Preempting);
                    self.metrics.preemptions.inc();
                    if let Some(job) = self.jobs.get(&victim) {
                        self.metrics.preempted(tier_name(&job.resolved), &job.resolved.doc.project, cause);
                    }
                }
                Decision::Stop { job, cause } => {
                    let id = job.0 as i64;
                    // A cancel's Stop waits in the core for the next cycle: a run that ended
                    // in the same turn, after the cancel, has been judged, and the job is gone.
                    if !self.jobs.contains_key(&id) {
                        tracing::debug!(id, "stop of a job whose run has already ended");
                        continue;
                    }
                    let (event, stop, command) = self.stop(id, cause, now);
                    writes.push(Write::Stopping(id, JobState::Stopping, stop, event));
                    commands.extend(command);
                    self.set_live_state(id, JobState::Stopping);
                }
                Decision::Requeued { job, cause } => {
                    // Nodes are never removed in standalone mode; kept total for safety.
                    tracing::warn!(job = job.0, ?cause, "requeued by the core");
                }
            }
        }
        for (preemptor, victims) in preemptors {
            writes.push(Write::Event(NewEvent {
                job_id: preemptor,
                at_ms: now,
                kind: "preempting".into(),
                reason: Some("waiting_for_preemption".into()),
                message: self.preempting_text(&victims),
            }));
            writes.push(Write::Hold(preemptor, self.hold_json(preemptor)));
        }
        let written = self.write("the decisions of a cycle", |tx| {
            for write in &writes {
                match write {
                    Write::Running(id, row, event) => tx.set_running(*id, row, event)?,
                    Write::Stopping(id, state, stop, event) => tx.set_stopping(*id, *state, stop, event)?,
                    Write::Hold(id, hold) => tx.set_hold(*id, hold.as_deref())?,
                    Write::Event(event) => tx.event(event)?,
                }
            }
            Ok(())
        });
        if written.is_err() {
            // Nothing unrecorded is carried out: no process starts, no victim is signalled.
            // The engine is degraded now and rebuilds from the store once it can write.
            return;
        }
        for command in commands {
            let _ = self.exec.send(command);
        }
    }

    /// `name (job 12)` for each id: people know their jobs by name.
    pub(crate) fn names_of(&self, ids: &[i64]) -> Vec<String> {
        ids.iter().map(|id| self.name_of(*id)).collect()
    }

    pub(crate) fn name_of(&self, id: i64) -> String {
        match self.jobs.get(&id) {
            Some(job) => format!("{} (job {id})", job.resolved.doc.name),
            None => format!("job {id}"),
        }
    }

    /// The jobs still stopping for preemptor `id`, in id order: a preemptor that starts while
    /// some are starts on GPUs freed elsewhere (the core's cycle step 3b).
    fn victims_still_stopping(&self, id: i64) -> Vec<i64> {
        let preempting = self.jobs.iter().filter(|(_, job)| job.state == JobState::Preempting);
        preempting
            .map(|(&victim, _)| victim)
            .filter(|&victim| {
                matches!(self.core.job_status(core_id(victim)), Some(JobStatus::Preempting { preemptor, .. }) if preemptor == core_id(id))
            })
            .collect()
    }

    /// What the store keeps of a pending preemptor's hold.
    fn hold_json(&self, preemptor: i64) -> Option<String> {
        let Some(JobStatus::Pending { reserved: Some(placement), reasons }) = self.core.job_status(core_id(preemptor))
        else {
            return None;
        };
        let victims = reasons
            .iter()
            .find_map(|r| match r {
                PendingReason::WaitingForPreemption { victims } => Some(victims.iter().map(|v| v.0 as i64).collect()),
                _ => None,
            })
            .unwrap_or_default();
        let placement = placement.replicas().iter().map(|r| (r.node.0, r.gpus.iter().collect())).collect();
        Some(serde_json::to_string(&StoredHold { placement, victims }).expect("plain data"))
    }

    /// Prepares a run: its store row, the executor's launch, and the `started` event.
    fn start_run(&mut self, id: i64, placement: &Placement, now: u64) -> (RunRow, ExecCommand, NewEvent) {
        let still_stopping = self.victims_still_stopping(id);
        let job = self.jobs.get_mut(&id).expect("the core starts only known jobs");
        job.in_flight = true;
        job.started_at_ms = Some(now);
        job.stop_requested_at_ms = None;
        let first = job.first_started_at_ms.is_none();
        job.first_started_at_ms.get_or_insert(now);
        // Every wait counts: the first one, and each after a preemption or a retry.
        let wait_s = job.pending_since_ms.take().map_or(0, |since| now.saturating_sub(since)) as f64 / 1000.0;
        self.metrics.wait_seconds(tier_name(&job.resolved), &job.resolved.doc.project, wait_s);
        let run = job.run;
        let grace_ms = job.resolved.doc.preemption_grace_seconds * 1000;
        let run_dir = self.job_dir(id).join("runs").join(run.to_string());
        let replicas = self.launch_specs(id, placement, &run_dir);
        let placement_text = self.placement_text(placement);
        let mut message = if first {
            format!("started on {placement_text} after waiting {wait_s:.1}s")
        } else {
            format!("run {} started on {placement_text} after waiting {wait_s:.1}s again (restart {run})", run + 1)
        };
        if !still_stopping.is_empty() {
            // It did not wait for its victims: GPUs freed elsewhere first.
            let names = self.names_of(&still_stopping).join(", ");
            message += &format!(", on GPUs that freed before {names} had stopped (they stop all the same)");
        }
        let row = RunRow {
            started_at_ms: now,
            placement_json: placement_json(placement),
            run_dir: run_dir.display().to_string(),
        };
        self.set_live_state(id, JobState::Running);
        self.metrics.starts.inc();
        let event = NewEvent { job_id: id, at_ms: now, kind: "started".into(), reason: None, message };
        let container = self.container_of(id);
        (row, ExecCommand::Start { job: id, run, replicas, grace_ms, container }, event)
    }

    /// The container of an image job run through a runtime.
    pub(crate) fn container_of(&self, id: i64) -> Option<crate::executor::Container> {
        match (&self.jobs.get(&id)?.resolved.doc.image, &self.runtime) {
            (Some(_), Some(runtime)) => Some(crate::executor::Container {
                runtime: runtime.clone(),
                name: fairway_exec::container_name(id as u64),
            }),
            _ => None,
        }
    }

    /// One launch per replica: argv (through a container runtime for image jobs), the
    /// environment the job is promised, its logs and run directory.
    fn launch_specs(&self, id: i64, placement: &Placement, run_dir: &std::path::Path) -> Vec<LaunchSpec> {
        let job = &self.jobs[&id];
        let doc = &job.resolved.doc;
        let run_as = self.run_as_of(&doc.project);
        let dirs = match super::jobdirs::prepare(&self.job_dir(id), run_as) {
            Ok(dirs) => dirs,
            Err(e) => {
                // The shim reports what it cannot do (an unwritable log, say) as a failed start.
                tracing::error!(id, "cannot prepare the job's directories: {e}");
                super::jobdirs::JobDirs::of(&self.job_dir(id))
            }
        };
        let limits = &self.config.file.limits;
        let replicas = placement.replicas().len();
        placement
            .replicas()
            .iter()
            .enumerate()
            .map(|(i, replica)| {
                let devices: Vec<String> = replica.gpus.iter().map(|g| g.to_string()).collect();
                let mut env = doc.env.clone();
                env.insert("CUDA_VISIBLE_DEVICES".into(), devices.join(","));
                env.insert("NVIDIA_VISIBLE_DEVICES".into(), devices.join(","));
                // A share of one GPU: its device is shared with other jobs' shares. The
                // figure is advisory: nothing enforces it unless MPS or MIG does.
                if let Some(milli) = doc.resources.gpu_milli {
                    env.insert("FAIRWAY_GPU_SHARE_MILLI".into(), milli.to_string());
                }
                env.insert("FAIRWAY_JOB_ID".into(), id.to_string());
                env.insert("FAIRWAY_JOB_NAME".into(), doc.name.clone());
                env.insert("FAIRWAY_RESTART_COUNT".into(), job.run.to_string());
                env.insert("FAIRWAY_CHECKPOINT_DIR".into(), dirs.checkpoint.display().to_string());
                env.insert(
                    "FAIRWAY_COMPLETION_FILE".into(),
                    dirs.checkpoint.join(COMPLETION_FILE).display().to_string(),
                );
                env.insert("FAIRWAY_PREEMPT_NOTICE_FILE".into(), dirs.notice_file.display().to_string());
                env.insert("FAIRWAY_REPLICA_INDEX".into(), i.to_string());
                env.insert("FAIRWAY_REPLICAS".into(), replicas.to_string());
                env.insert("FAIRWAY_NODE".into(), self.cluster.node_name(replica.node).to_owned());
                let argv = self.argv(id, doc, replica.gpus.iter().collect(), &env);
                LaunchSpec {
                    job_id: id as u64,
                    run_dir: run_dir.join(format!("replica-{i}")),
                    log_path: super::log_path(&self.config.data_dir, id, i as u32),
                    log_bytes_max: limits.log_bytes_max,
                    log_files_max: limits.log_files_max,
                    argv,
                    cwd: doc.working_dir.as_ref().map(PathBuf::from),
                    env,
                    shim_exe: self.config.shim_exe.clone(),
                    run_as,
                }
            })
            .collect()
    }

    fn argv(&self, id: i64, doc: &fairway_spec::JobDoc, gpus: Vec<u32>, env: &BTreeMap<String, String>) -> Vec<String> {
        let command = if doc.shell {
            vec!["/bin/sh".into(), "-c".into(), doc.command.first().cloned().unwrap_or_default()]
        } else {
            doc.command.clone()
        };
        match (&doc.image, &self.runtime) {
            (Some(image), Some(runtime)) => {
                let dirs = super::jobdirs::JobDirs::of(&self.job_dir(id));
                let run = ContainerRun {
                    name: fairway_exec::container_name(id as u64),
                    image: image.clone(),
                    gpu_indices: gpus,
                    real_gpus: self.cluster.source == fairway_exec::GpuSource::Nvml,
                    checkpoint_dir: Some(dirs.checkpoint),
                    container_checkpoint_dir: fairway_exec::CONTAINER_CHECKPOINT_DIR.into(),
                    notice_file: Some(dirs.notice_file),
                    env: env.clone(),
                    argv: command,
                    workdir: doc.working_dir.clone(),
                };
                fairway_exec::container_argv(runtime, &run)
            }
            // No runtime: validation let it through only with image_optional.
            _ => command,
        }
    }

    /// What a preemptor's event says of its victims: those it outranks, and those it
    /// reclaims from in its cohort (one cohort: its project's).
    fn preempting_text(&self, victims: &[(i64, PreemptCause)]) -> String {
        let (mut outranked, mut reclaimed, mut cohort_of_reclaims) = (Vec::new(), Vec::new(), None);
        for &(victim, cause) in victims {
            match cause {
                PreemptCause::Priority => outranked.push(victim),
                PreemptCause::Reclaim { cohort } => {
                    reclaimed.push(victim);
                    cohort_of_reclaims = Some(cohort);
                }
            }
        }
        let mut parts = Vec::new();
        if !outranked.is_empty() {
            parts.push(format!("preempting {}", self.names_of(&outranked).join(", ")));
        }
        if let Some(cohort) = cohort_of_reclaims {
            let (_, cohort) = self.account_name(cohort);
            parts.push(format!("reclaiming {} in cohort {cohort}", self.names_of(&reclaimed).join(", ")));
        }
        format!("{} to make room; their GPUs are held for this job", parts.join(" and "))
    }

    /// Why a victim gives way, for its owner: the preemptor and its tier, or for a reclaim
    /// the cohort and the two projects (the victim's borrows what the preemptor's takes back).
    fn preemption_text(&self, victim: i64, preemptor: i64, cause: PreemptCause) -> String {
        let preemptor_name = self.name_of(preemptor);
        let project_of = |id: i64| self.jobs.get(&id).map(|j| j.resolved.doc.project.clone()).unwrap_or_default();
        match cause {
            PreemptCause::Priority => {
                let tier = self.jobs.get(&preemptor).map(|j| tier_label(&j.resolved)).unwrap_or_default();
                format!("preempted by {preemptor_name}, priority {tier}")
            }
            PreemptCause::Reclaim { cohort } => {
                let (_, cohort) = self.account_name(cohort);
                format!(
                    "reclaimed by {preemptor_name} of project {} in cohort {cohort}: project {} uses more than its nominal quota there, which {} takes back at the same priority",
                    project_of(preemptor),
                    project_of(victim),
                    project_of(preemptor),
                )
            }
        }
    }

    fn preempt(
        &mut self,
        victim: i64,
        preemptor: i64,
        deadline: Time,
        cause: PreemptCause,
        now: u64,
    ) -> (NewEvent, StopRow, Option<ExecCommand>) {
        let reason = self.preemption_text(victim, preemptor, cause);
        let path = super::jobdirs::JobDirs::of(&self.job_dir(victim)).notice_file;
        let job = self.jobs.get_mut(&victim).expect("the core preempts only known jobs");
        job.stop_requested_at_ms = Some(now);
        job.remember_preemption(now);
        let grace_s = deadline.millis().saturating_sub(now) / 1000;
        let event = NewEvent {
            job_id: victim,
            at_ms: now,
            kind: "preempted".into(),
            reason: Some(
                match cause {
                    PreemptCause::Priority => "preempted",
                    PreemptCause::Reclaim { .. } => "reclaimed",
                }
                .into(),
            ),
            message: format!("{reason}: notice written, SIGTERM now, SIGKILL in {grace_s}s if still running"),
        };
        let notice = PreemptNotice {
            deadline_unix_ms: deadline.millis(),
            preemptor_job_id: Some(preemptor as u64),
            grace_seconds: grace_s,
            reason,
            cause: Some(cause.label().into()),
        };
        let stop = StopRow {
            cause: "preempted".into(),
            requested_at_ms: now,
            kill_at_ms: deadline.millis(),
            preemptor_id: Some(preemptor),
        };
        let command = job.in_flight.then(|| ExecCommand::Terminate {
            job: victim,
            run: job.run,
            notice: Some((path, notice)),
            kill_at_unix_ms: deadline.millis(),
        });
        (event, stop, command)
    }

    fn stop(&mut self, id: i64, cause: StopCause, now: u64) -> (NewEvent, StopRow, Option<ExecCommand>) {
        let job = self.jobs.get_mut(&id).expect("the core stops only known jobs");
        job.stop_requested_at_ms = Some(now);
        let grace_ms = job.resolved.doc.preemption_grace_seconds * 1000;
        let (reason, message) = match cause {
            StopCause::Cancelled => ("cancelled", format!("cancelled: SIGTERM now, SIGKILL in {}s", grace_ms / 1000)),
            StopCause::RuntimeLimit => {
                let doc = &job.resolved.doc;
                let limit = match (doc.max_runtime_seconds, doc.max_total_runtime_seconds) {
                    (Some(run), Some(total)) => format!("run-time limit ({run}s per run, {total}s over all runs)"),
                    (Some(run), None) => format!("run-time limit of {run}s per run"),
                    (None, Some(total)) => format!("run-time limit of {total}s over all runs"),
                    (None, None) => "run-time limit".to_owned(),
                };
                ("runtime_limit", format!("{limit} reached: SIGTERM now, SIGKILL in {}s", grace_ms / 1000))
            }
        };
        let event = NewEvent { job_id: id, at_ms: now, kind: "stopping".into(), reason: Some(reason.into()), message };
        let stop =
            StopRow { cause: reason.into(), requested_at_ms: now, kill_at_ms: now + grace_ms, preemptor_id: None };
        let command = job.in_flight.then(|| ExecCommand::Terminate {
            job: id,
            run: job.run,
            notice: None,
            kill_at_unix_ms: now + grace_ms,
        });
        (event, stop, command)
    }

    /// The executor launched a run: remember its processes for re-adoption.
    pub(crate) fn launched(&mut self, id: i64, run: u32, processes: &[ProcessRecord]) {
        if !self.jobs.get(&id).is_some_and(|j| j.run == run && j.in_flight) {
            return;
        }
        let json = serde_json::to_string(processes).expect("plain data");
        // On failure the engine degrades; the rebuild finds the shims by their run directory.
        let _ = self.write("the processes of a run", |tx| tx.set_processes(id, &json));
    }

    /// A run ended: judge it, tell the core, record it.
    pub(crate) fn run_ended(&mut self, id: i64, run: u32, exit: RunExit, killed: bool, now: u64) {
        let Some(job) = self.jobs.get(&id).filter(|j| j.run == run && j.in_flight) else { return };
        let verdict = self.judge(id, &exit, killed);
        let outcome = match &verdict {
            Verdict::Succeeded => ExitOutcome::Succeeded,
            Verdict::Preempted { .. } | Verdict::NotStarted => ExitOutcome::Requeue,
            // A retry waits out its backoff outside the core, which forgets the job until then.
            Verdict::Failed { .. } | Verdict::Cancelled { .. } | Verdict::RuntimeLimit { .. } => ExitOutcome::Failed,
        };
        let runtime_ms = job.started_at_ms.map_or(0, |s| now.saturating_sub(s));
        let failures = job.failures + u32::from(matches!(verdict, Verdict::Failed { .. }));
        // A preempted run loses what it did since its last reported checkpoint (or its start).
        if let (Verdict::Preempted { .. }, Some(started)) = (&verdict, job.started_at_ms) {
            let saved = job.last_checkpoint_ms.filter(|&c| c >= started).unwrap_or(started);
            let gpus = self.core.job_spec(core_id(id)).map_or(0, |spec| spec.total().gpus);
            let lost_hours = f64::from(gpus) * now.saturating_sub(saved) as f64 / 3_600_000.0;
            self.metrics.lost(tier_name(&job.resolved), &job.resolved.doc.project, lost_hours);
        }
        if let Err(e) = self.core.apply(Event::Exited { job: core_id(id), outcome }, Time(now)) {
            tracing::error!(id, "core refused an exit: {e}");
            return;
        }
        // A job cancelled during its preemption is gone from the core although requeued.
        let requeued = matches!(self.core.job_status(core_id(id)), Some(JobStatus::Pending { .. }));
        let retry_at_ms = matches!(verdict, Verdict::Failed { retry: true, .. })
            .then(|| now + self.config.file.retry_backoff.delay_ms(failures));
        let waits = requeued || retry_at_ms.is_some();
        let (state, kind, reason, message) = describe_end(&verdict, requeued, retry_at_ms, now);
        let end = RunEnd {
            state,
            runtime_ms,
            will_restart: waits && verdict != Verdict::NotStarted,
            preempted: matches!(verdict, Verdict::Preempted { .. }),
            failed: matches!(verdict, Verdict::Failed { .. }),
            exit_code: exit_code(&exit),
            exit_signal: exit_signal(&exit),
            retry_at_ms,
        };
        let event = NewEvent { job_id: id, at_ms: now, kind: kind.into(), reason: reason.map(Into::into), message };
        // On failure the engine degrades; the rebuild judges the run again from its exit record.
        let _ = self.write("the end of a run", |tx| tx.end_run(id, &end, &event));
        let job = self.jobs.get_mut(&id).expect("checked above");
        job.in_flight = false;
        job.started_at_ms = None;
        job.stop_requested_at_ms = None;
        job.runtime_done_ms += runtime_ms;
        job.failures = failures;
        job.preemptions += u32::from(end.preempted);
        if end.will_restart {
            job.run += 1;
        }
        if waits {
            job.pending_since_ms = Some(now);
            job.retry_at_ms = retry_at_ms;
            if let Some(at) = retry_at_ms {
                self.backoff.insert((at, id));
            }
            self.set_live_state(id, JobState::Pending);
        } else {
            self.metrics.finished(&tier_label(&self.jobs[&id].resolved), state);
            if state == JobState::Failed {
                self.notify_failed(id, &event.message, now);
            }
            self.finish(id);
        }
        self.touch();
    }

    /// Jobs whose backoff is over go back to the queue, at their original position.
    pub(crate) fn end_backoffs(&mut self, now: u64) {
        while let Some(&(at, id)) = self.backoff.first() {
            if at > now {
                break;
            }
            self.backoff.pop_first();
            if let Err(e) = self.requeue_after_backoff(id) {
                tracing::error!(id, "cannot queue the job again after its backoff: {e}");
            }
        }
    }

    fn requeue_after_backoff(&mut self, id: i64) -> Result<(), ApiError> {
        let Some(resolved) = self.jobs.get(&id).map(|j| j.resolved.clone()) else { return Ok(()) };
        let spec = self.core_spec(id, &resolved)?;
        let job = &self.jobs[&id];
        let restored = fairway_core::RestoredJob {
            spec,
            submitted_at: Time(job.submitted_at_ms),
            runtime_done_ms: job.runtime_done_ms,
            preemptions: job.preemptions,
            preempted_at: job.preempted_at_ms.iter().copied().map(Time).collect(),
            last_checkpoint: job.last_checkpoint_ms.map(Time),
            running: None,
        };
        self.core
            .apply(Event::Restore(restored), Time(self.now_ms()))
            .map_err(|e| ApiError::internal(e.to_string()))?;
        if let Some(job) = self.jobs.get_mut(&id) {
            job.retry_at_ms = None;
        }
        self.touch();
        Ok(())
    }

    fn judge(&self, id: i64, exit: &RunExit, killed: bool) -> Verdict {
        let job = &self.jobs[&id];
        if *exit == RunExit::NotStarted {
            return Verdict::NotStarted;
        }
        let success = matches!(exit, RunExit::Exited(r) if r.success());
        let completed = success && self.completed_before_stop(id, exit);
        let why = || exit_text(exit, killed);
        match self.core.job_status(core_id(id)) {
            Some(JobStatus::Preempting { .. }) if !completed => Verdict::Preempted { why: why() },
            Some(JobStatus::Stopping { cause: StopCause::Cancelled, .. }) if !completed => {
                Verdict::Cancelled { why: why() }
            }
            Some(JobStatus::Stopping { cause: StopCause::RuntimeLimit, .. }) if !completed => {
                Verdict::RuntimeLimit { why: why() }
            }
            _ if success => Verdict::Succeeded,
            _ => Verdict::Failed { retry: job.failures < job.resolved.doc.retries, why: why() },
        }
    }

    /// A job asked to stop still succeeds if it finished first: it exited before the stop
    /// was asked, or it says so through its completion file.
    fn completed_before_stop(&self, id: i64, exit: &RunExit) -> bool {
        let Some(asked) = self.jobs[&id].stop_requested_at_ms else { return true };
        let exited_before = matches!(exit, RunExit::Exited(r) if r.finished_at_unix_ms < asked);
        exited_before || super::jobdirs::JobDirs::of(&self.job_dir(id)).checkpoint.join(COMPLETION_FILE).exists()
    }

    /// Cancels a job: a pending one at once, a running one through a `Stop` decision.
    pub(crate) fn cancel(&mut self, id: i64, now: u64) -> Result<CancelResponse, ApiError> {
        let Some(job) = self.jobs.get(&id) else {
            let row = self.store.job(id).map_err(ApiError::store)?.ok_or_else(|| ApiError::not_found(id))?;
            return Ok(CancelResponse { id, state: row.state });
        };
        let was_pending = !job.in_flight;
        let in_backoff = job.retry_at_ms.is_some();
        if was_pending {
            let event = NewEvent {
                job_id: id,
                at_ms: now,
                kind: "cancelled".into(),
                reason: Some("cancelled".into()),
                message: "cancelled while pending".into(),
            };
            self.write("a cancellation", |tx| tx.set_state(id, JobState::Cancelled, &event))
                .map_err(|e| ApiError::store_unavailable(&e.to_string()))?;
            if in_backoff {
                self.backoff.retain(|(_, j)| *j != id);
            } else {
                self.core
                    .apply(Event::Cancel(core_id(id)), Time(now))
                    .map_err(|e| ApiError::internal(e.to_string()))?;
            }
            self.metrics.finished(&tier_label(&self.jobs[&id].resolved), JobState::Cancelled);
            self.finish(id);
            self.touch();
            return Ok(CancelResponse { id, state: JobState::Cancelled });
        }
        self.core.apply(Event::Cancel(core_id(id)), Time(now)).map_err(|e| ApiError::internal(e.to_string()))?;
        self.touch();
        Ok(CancelResponse { id, state: JobState::Stopping })
    }

    pub(crate) fn checkpoint(&mut self, id: i64, at_ms: u64) -> Result<(), ApiError> {
        let Some(job) = self.jobs.get_mut(&id) else {
            return match self.store.job(id).map_err(ApiError::store)? {
                Some(_) => Err(ApiError::conflict(format!("job {id} is finished"))),
                None => Err(ApiError::not_found(id)),
            };
        };
        if job.last_checkpoint_ms.is_some_and(|t| t >= at_ms) {
            return Ok(());
        }
        self.write("a checkpoint", |tx| tx.set_checkpoint(id, at_ms))
            .map_err(|e| ApiError::store_unavailable(&e.to_string()))?;
        let job = self.jobs.get_mut(&id).expect("checked above");
        job.last_checkpoint_ms = Some(at_ms);
        if job.retry_at_ms.is_none() {
            self.core
                .apply(Event::CheckpointReported { job: core_id(id), at: Time(at_ms) }, Time(self.now_ms()))
                .map_err(|e| ApiError::internal(e.to_string()))?;
        }
        Ok(())
    }

    /// Step 5: jobs report checkpoints by touching a marker in their checkpoint directory.
    pub(crate) fn poll_checkpoint_markers(&mut self) {
        let running: Vec<(i64, Option<u64>)> =
            self.jobs.iter().filter(|(_, j)| j.in_flight).map(|(id, j)| (*id, j.last_checkpoint_ms)).collect();
        for (id, last) in running {
            let dir = super::jobdirs::JobDirs::of(&self.job_dir(id)).checkpoint;
            if let Some(at) = fairway_exec::checkpoint_marker_time(&dir)
                && last.is_none_or(|l| at > l)
                && let Err(e) = self.checkpoint(id, at.min(self.now_ms()))
            {
                tracing::warn!(id, "checkpoint marker: {e}");
            }
        }
    }

    pub(crate) fn set_quota(
        &mut self,
        kind: &str,
        account: &str,
        quota: Option<QuotaSpec>,
    ) -> Result<Option<QuotaView>, ApiError> {
        let (kind, id) = self.account_of_request(kind, account)?;
        let core_quota = quota.as_ref().map(|q| fairway_core::Quota {
            gpus_max: q.gpus_max,
            cpu_millis_max: q.cpu_millis_max,
            memory_mib_max: q.memory_mib_max,
        });
        if let (AccountKind::Project, Some(cap)) = (kind, core_quota) {
            self.check_quota_above_guarantee(account, cap)?;
        }
        let row = quota.as_ref().map(|q| fairway_store::QuotaRow {
            account_kind: kind.as_str().into(),
            account: account.into(),
            gpus_max: q.gpus_max,
            cpu_millis_max: q.cpu_millis_max,
            memory_mib_max: q.memory_mib_max,
        });
        self.write("a quota", |tx| match &row {
            Some(row) => tx.set_quota(row),
            None => tx.delete_quota(kind.as_str(), account).map(|_| ()),
        })
        .map_err(|e| ApiError::store_unavailable(&e.to_string()))?;
        self.core
            .apply(Event::SetQuota { account: id, quota: core_quota }, Time(self.now_ms()))
            .map_err(|e| ApiError::internal(e.to_string()))?;
        self.touch();
        Ok(row.map(|_| self.quota_view(kind, account, id)))
    }

    /// A project's hard quota may not be below what it keeps unlent in its cohort
    /// (`fairway_spec::GuaranteeBeyondCap`).
    fn check_quota_above_guarantee(&self, project: &str, cap: fairway_core::Quota) -> Result<(), ApiError> {
        let Some((cohort, member)) = self.member_in_effect(project)? else { return Ok(()) };
        match member.guarantee_beyond(cap) {
            None => Ok(()),
            Some(beyond) => {
                let reason = beyond.quota_reason(project, &cohort);
                Err(ApiError::bad_request(format!("{}_max: {reason}", beyond.resource)))
            }
        }
    }

    pub(crate) fn quota_view(&self, kind: AccountKind, account: &str, id: fairway_core::AccountId) -> QuotaView {
        let (used, quota) = self.core.account_usage(id);
        QuotaView::of(kind.as_str(), account, used, quota).with_fair_share_of(&self.core, id, Time(self.now_ms()))
    }

    /// `PUT`/`DELETE /v1/fair-share-weights/{kind}/{account}`: an account's weight, stored
    /// and then given to the core (`None`, or 1: back to the default).
    pub(crate) fn set_fair_share_weight(
        &mut self,
        kind: &str,
        account: &str,
        weight: Option<u32>,
    ) -> Result<FairShareWeightView, ApiError> {
        let (kind, id) = self.account_of_request(kind, account)?;
        let weight = weight.unwrap_or(1);
        fairway_spec::check_fair_share_weight("weight", weight).map_err(ApiError::bad_request)?;
        let row = fairway_store::WeightRow { account_kind: kind.as_str().into(), account: account.into(), weight };
        self.write("a fair-share weight", |tx| store_weight(tx, &row))
            .map_err(|e| ApiError::store_unavailable(&e.to_string()))?;
        self.core
            .apply(Event::SetFairShareWeight { account: id, weight }, Time(self.now_ms()))
            .map_err(|e| ApiError::internal(e.to_string()))?;
        self.touch();
        Ok(FairShareWeightView { kind: kind.as_str().into(), account: account.into(), weight })
    }

    /// A request's account: its kind (user or project) and a valid name.
    fn account_of_request(
        &mut self,
        kind: &str,
        account: &str,
    ) -> Result<(AccountKind, fairway_core::AccountId), ApiError> {
        let kind = super::AccountKind::parse(kind)
            .filter(|k| *k != super::AccountKind::Cohort)
            .ok_or_else(|| ApiError::bad_request(format!("kind: {kind:?} is not user or project")))?;
        if let Err(reason) = fairway_spec::check_account_name(account) {
            return Err(ApiError::bad_request(format!("account: {reason}")));
        }
        Ok((kind, self.account(kind, account)?))
    }

    /// Runs `f` in one committed transaction. A failure (a full disk, an I/O error) makes
    /// the engine degraded: see the module doc of `engine`.
    pub(crate) fn write<T>(
        &mut self,
        what: &str,
        f: impl FnOnce(&mut Tx<'_>) -> fairway_store::Result<T>,
    ) -> fairway_store::Result<T> {
        let result = (|| {
            let mut tx = self.store.transaction()?;
            let out = f(&mut tx)?;
            tx.commit()?;
            Ok(out)
        })();
        if let Err(e) = &result {
            self.degrade(what, e);
        }
        result
    }

    pub(crate) fn placement_text(&self, placement: &Placement) -> String {
        placement
            .replicas()
            .iter()
            .map(|r| format!("{} GPUs {}", self.cluster.node_name(r.node), r.gpus))
            .collect::<Vec<_>>()
            .join("; ")
    }
}

fn describe_end(
    verdict: &Verdict,
    requeued: bool,
    retry_at_ms: Option<u64>,
    now: u64,
) -> (JobState, &'static str, Option<&'static str>, String) {
    match verdict {
        Verdict::Succeeded => (JobState::Succeeded, "succeeded", None, "exited with code 0".into()),
        Verdict::Preempted { why } if requeued => (
            JobState::Pending,
            "requeued",
            Some("preempted"),
            format!("preempted ({why}); back in the queue at its original position"),
        ),
        Verdict::Preempted { why } | Verdict::Cancelled { why } => {
            (JobState::Cancelled, "cancelled", Some("cancelled"), format!("cancelled ({why})"))
        }
        Verdict::RuntimeLimit { why } => {
            (JobState::Failed, "failed", Some("runtime_limit"), format!("stopped at its run-time limit ({why})"))
        }
        Verdict::Failed { retry: true, why } => {
            let wait_s = retry_at_ms.unwrap_or(now).saturating_sub(now) / 1000;
            (JobState::Pending, "retrying", Some("failed"), format!("failed ({why}); runs again in {wait_s}s"))
        }
        Verdict::Failed { retry: false, why } => {
            (JobState::Failed, "failed", Some("failed"), format!("failed ({why})"))
        }
        Verdict::NotStarted => (
            JobState::Pending,
            "requeued",
            Some("not_started"),
            "the server stopped before the run started; back in the queue".into(),
        ),
    }
}

/// `[[node, [gpu, …]], …]`: compact and independent of core types.
pub(crate) fn placement_json(placement: &Placement) -> String {
    let replicas: Vec<(u32, Vec<u32>)> =
        placement.replicas().iter().map(|r| (r.node.0, r.gpus.iter().collect())).collect();
    serde_json::to_string(&replicas).expect("plain data")
}

/// The inverse of `placement_json`; `None` for text it did not write (GPU indices must be
/// below 64 and listed once).
pub(crate) fn parse_placement(json: &str) -> Option<Placement> {
    let replicas: Vec<(u32, Vec<u32>)> = serde_json::from_str(json).ok()?;
    placement_of(replicas)
}

pub(crate) fn placement_of(replicas: Vec<(u32, Vec<u32>)>) -> Option<Placement> {
    let replicas = replicas
        .into_iter()
        .map(|(node, gpus)| {
            let gpus = fairway_core::GpuSet::from_indices(gpus).ok()?;
            Some(fairway_core::ReplicaPlacement { node: fairway_core::NodeId(node), gpus })
        })
        .collect::<Option<Vec<_>>>()?;
    Some(Placement::new(replicas))
}

fn exit_text(exit: &RunExit, killed: bool) -> String {
    if killed {
        return "killed after its grace period".into();
    }
    match exit {
        RunExit::Exited(r) => match (&r.spawn_error, r.code, r.signal) {
            (Some(e), _, _) => format!("could not start: {e}"),
            (None, Some(code), _) => format!("exit code {code}"),
            (None, None, Some(sig)) => format!("killed by signal {sig}"),
            (None, None, None) => "exited".into(),
        },
        RunExit::Lost => "its process disappeared without an exit status".into(),
        RunExit::LaunchFailed(e) => format!("could not launch: {e}"),
        RunExit::NotStarted => "never started".into(),
    }
}

fn exit_code(exit: &RunExit) -> Option<i32> {
    match exit {
        RunExit::Exited(r) => r.code,
        _ => None,
    }
}

fn exit_signal(exit: &RunExit) -> Option<i32> {
    match exit {
        RunExit::Exited(r) => r.signal,
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, RwLock};

    use fairway_store::{JobState, Role, Store};
    use tokio::sync::mpsc::UnboundedReceiver;
    use tokio::sync::oneshot;

    use crate::auth::{Identity, Tokens};
    use crate::config::ServerConfig;
    use crate::engine::{Cluster, Command, Engine, EngineParts};
    use crate::executor::{ExecCommand, RunExit};

    /// An engine on a fresh data directory with one simulated GPU. What it asks of the
    /// executor stays in the returned channel: nothing is launched.
    fn engine(dir: &std::path::Path) -> (Engine, UnboundedReceiver<ExecCommand>) {
        let mut config = ServerConfig::new(dir.to_path_buf());
        config.registry_dir = None;
        let simulated = fairway_exec::SimulatedGpus::parse("1").unwrap();
        let (layout, source) = fairway_exec::discover(Some(&simulated), "A100").unwrap();
        let (exec, asked) = tokio::sync::mpsc::unbounded_channel();
        let parts = EngineParts {
            store: Store::open(&config.db_path()).unwrap(),
            cluster: Arc::new(Cluster::new(layout, source)),
            exec,
            metrics: Arc::new(crate::metrics::Metrics::new()),
            runtime: None,
            images: Arc::default(),
            tokens: Tokens::default(),
            classes: Arc::new(RwLock::new(fairway_spec::PriorityClasses::builtin())),
            notices: None,
            config,
        };
        (Engine::start(parts).unwrap(), asked)
    }

    /// Found by fuzzing the API: a cancel leaves the core's `Stop` for the next cycle; when
    /// the run's end came in the same turn, after the cancel, the engine finished the job
    /// and then panicked on that `Stop` ("the core stops only known jobs"), which stopped
    /// the server.
    #[test]
    fn a_run_that_ends_in_the_turn_of_its_cancel_is_cancelled() {
        let dir = tempfile::tempdir().unwrap();
        let (mut engine, mut asked) = engine(dir.path());
        let who = Identity {
            token_id: 1,
            token_name: "admin".into(),
            user: "u".into(),
            project: "p".into(),
            role: Role::Admin,
        };
        let spec = b"name: gone\nresources: { gpus: 1 }\ncommand: [/nonexistent]\n";
        let options = fairway_spec::ParseOptions { tenant_required: false, ..fairway_spec::ParseOptions::default() };
        let classes = fairway_spec::PriorityClasses::builtin();
        let parsed = fairway_spec::parse_and_resolve(spec, &Default::default(), &classes, &options).unwrap().parsed;
        let (reply, submitted) = oneshot::channel();
        engine.turn(vec![Command::Submit { parsed, who, reply }]);
        let id = submitted.blocking_recv().unwrap().unwrap().jobs[0].id;
        assert!(matches!(asked.try_recv(), Ok(ExecCommand::Start { job, run: 0, .. }) if job == id), "started");

        let (reply, cancelled) = oneshot::channel();
        let ended = RunExit::LaunchFailed("cannot start \"/nonexistent\"".into());
        engine.turn(vec![
            Command::Cancel { id, reply },
            Command::RunEnded { job: id, run: 0, exit: ended, killed: false },
        ]);
        assert_eq!(cancelled.blocking_recv().unwrap().unwrap().state, JobState::Stopping);
        assert_eq!(engine.store.job(id).unwrap().unwrap().state, JobState::Cancelled);
        assert!(!engine.jobs.contains_key(&id));
        assert!(asked.try_recv().is_err(), "nothing left to signal");
    }
}
