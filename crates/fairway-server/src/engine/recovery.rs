//! Start-up (and rebuild after the store was unwritable): classes, quotas, and every job
//! the store says is not finished.
//!
//! 1. A pending job returns to its original queue position (its submit time and id); one
//!    waiting out a retry's backoff waits out the rest of it first.
//! 2. A run the store says is live is looked for: by the recorded supervisor pids *and*
//!    their start times (a reused pid is not our process), or, when the server died before
//!    recording them, by scanning `/proc` for a shim of the run's directory. A live run is
//!    re-adopted and keeps its GPUs; if it was being stopped, it stays on its way out with
//!    its original deadline (no fresh grace period), and a preemptor gets its hold back.
//! 3. A run whose supervisors are gone is judged from its `exit.json`, like any run's end;
//!    whatever its processes left behind (children that outlived the shim) is killed first,
//!    so that nothing of it keeps using GPUs another job is about to get. One that never
//!    started is requeued without counting against anything.
//! 4. A gang starts whole or not at all. A replica whose shim neither runs nor left a sign
//!    that the job started (`job-started`, `exit.json`) was never launched: the server died
//!    while launching the gang. The replicas that did start are killed and the run is
//!    judged not started. A replica that ended while the server was down is judged with the
//!    live ones: one that failed stops its gang.

use std::path::{Path, PathBuf};

use fairway_core::{Event, PreemptionPolicy, RestoredHold, RestoredJob, RestoredRun, RestoredStop, StopCause, Time};
use fairway_exec::ExitRecord;
use fairway_spec::{PreemptionProtection, ResolvedJob};
use fairway_store::{JobRow, JobState, NewEvent, StopRow};

use super::runs::{StoredHold, parse_placement, placement_of};
use super::submit::new_active;
use super::{AccountKind, Engine, core_id, tier_label};
use crate::ServerError;
use crate::executor::{ExecCommand, ProcessRecord, RunExit};

/// A run found ended at recovery, to judge once every job is back.
struct Ended {
    id: i64,
    exit: RunExit,
    killed: bool,
}

impl Engine {
    /// Built-ins, then the config file's classes, then classes submitted earlier.
    pub(crate) fn load_classes(&mut self) -> Result<(), ServerError> {
        for c in self.config.file.priority_classes.clone() {
            let policy = match c.preemption_policy.as_deref() {
                Some("Never") => PreemptionPolicy::Never,
                _ => PreemptionPolicy::PreemptLowerPriority,
            };
            self.classes
                .add(&c.name, c.value, c.global_default, policy, c.protection(), &c.description)
                .map_err(|e| ServerError::Config(format!("priority class {}: {e}", c.name)))?;
        }
        for row in self.store.priority_classes()? {
            let policy = if row.preemption_policy == "Never" {
                PreemptionPolicy::Never
            } else {
                PreemptionPolicy::PreemptLowerPriority
            };
            if let Err(e) = self.classes.add(
                &row.name,
                row.value,
                row.global_default,
                policy,
                PreemptionProtection {
                    min_run_seconds: row.min_run_before_preemption_seconds,
                    preemptions_per_hour_max: row.preemptions_per_hour_max,
                    overrides_protection: row.overrides_preemption_protection,
                    preemption_delay_seconds: row.preemption_delay_seconds,
                },
                row.description.as_deref().unwrap_or(""),
            ) {
                tracing::warn!("stored priority class {} conflicts with the config and is ignored: {e}", row.name);
            }
        }
        Ok(())
    }

    /// The stored quotas (the config file's were written over them at start-up).
    pub(crate) fn load_quotas(&mut self) -> Result<(), ServerError> {
        for row in self.store.quotas()? {
            let kind = AccountKind::parse(&row.account_kind).unwrap_or(AccountKind::Project);
            let account = self.account(kind, &row.account).map_err(|e| ServerError::Config(e.message))?;
            let quota = fairway_core::Quota {
                gpus_max: row.gpus_max,
                cpu_millis_max: row.cpu_millis_max,
                memory_mib_max: row.memory_mib_max,
            };
            self.core
                .apply(Event::SetQuota { account, quota: Some(quota) }, Time(self.now_ms()))
                .map_err(|e| ServerError::Config(e.to_string()))?;
        }
        Ok(())
    }

    /// The stored fair-share weights (the config file's were written over them at start-up).
    pub(crate) fn load_weights(&mut self) -> Result<(), ServerError> {
        for row in self.store.fair_share_weights()? {
            let Some(kind) = AccountKind::parse(&row.account_kind) else { continue };
            let account = self.account(kind, &row.account).map_err(|e| ServerError::Config(e.message))?;
            self.core
                .apply(Event::SetFairShareWeight { account, weight: row.weight }, Time(self.now_ms()))
                .map_err(|e| ServerError::Config(e.to_string()))?;
        }
        Ok(())
    }

    pub(crate) fn recover(&mut self) -> Result<(), ServerError> {
        let rows = self.store.unfinished_jobs()?;
        if !rows.is_empty() {
            tracing::info!(jobs = rows.len(), "restoring unfinished jobs from the store");
        }
        let mut ended = Vec::new();
        let mut holds = Vec::new();
        for row in rows {
            let id = row.id;
            let resolved = match resolved_from_row(&row) {
                Ok(r) => r,
                Err(e) => {
                    tracing::error!(id, "stored job cannot be read back; marking it failed: {e}");
                    let event = recovered_event(id, format!("its stored spec cannot be read: {e}"), self.now_ms());
                    let _ =
                        self.write("a job that cannot be read back", |tx| tx.set_state(id, JobState::Failed, &event));
                    continue;
                }
            };
            if let Some(hold) = row.hold_json.as_deref().filter(|_| row.state == JobState::Pending) {
                holds.push((id, hold.to_owned()));
            }
            if let Some(end) = self.recover_job(row, resolved)? {
                ended.push(end);
            }
        }
        // Holds after every job is back: they name victims restored after them.
        for (id, json) in holds {
            self.restore_hold(id, &json);
        }
        // Runs that ended while the server was down are judged through the same path as any
        // other end of a run.
        for Ended { id, exit, killed } in ended {
            let run = self.jobs[&id].run;
            self.run_ended(id, run, exit, killed, self.now_ms());
        }
        self.touch();
        Ok(())
    }

    /// When the job was chosen as a victim, from its `preempted` events, if its class caps
    /// preemptions an hour (rule 1): the last ones, up to the cap.
    fn recent_preemptions(&self, row: &JobRow) -> Result<Vec<u64>, ServerError> {
        let Some(max) = row.preemptions_per_hour_max else { return Ok(Vec::new()) };
        if row.preemptions == 0 && row.stop.as_ref().is_none_or(|s| s.cause != "preempted") {
            return Ok(Vec::new());
        }
        let mut times: Vec<u64> =
            self.store.events(row.id)?.into_iter().filter(|e| e.kind == "preempted").map(|e| e.at_ms).collect();
        times.sort_unstable();
        let excess = times.len().saturating_sub(max as usize);
        times.drain(..excess);
        Ok(times)
    }

    /// Restores one job; returns how its run ended if it ended while the server was down.
    fn recover_job(&mut self, row: JobRow, resolved: ResolvedJob) -> Result<Option<Ended>, ServerError> {
        let id = row.id;
        let spec = self.core_spec(id, &resolved).map_err(|e| ServerError::Config(e.message))?;
        let mut active = new_active(resolved, row.submitted_at_ms);
        active.run = row.restart_count;
        active.failures = row.failures;
        active.preemptions = row.preemptions;
        active.preempted_at_ms = self.recent_preemptions(&row)?;
        active.runtime_done_ms = row.runtime_done_ms;
        active.first_started_at_ms = row.first_started_at_ms;
        active.last_checkpoint_ms = row.last_checkpoint_ms;
        active.pending_since_ms = row.pending_since_ms;
        let restored = RestoredJob {
            spec,
            submitted_at: Time(row.submitted_at_ms),
            runtime_done_ms: row.runtime_done_ms,
            preemptions: row.preemptions,
            preempted_at: active.preempted_at_ms.iter().copied().map(Time).collect(),
            last_checkpoint: row.last_checkpoint_ms.map(Time),
            running: None,
        };
        let tier = tier_label(&active.resolved);
        let grace_ms = active.resolved.doc.preemption_grace_seconds * 1000;
        let was = row.state;
        let live_run = match (&row.placement_json, &row.run_dir, row.started_at_ms) {
            (Some(p), Some(dir), Some(started)) if was != JobState::Pending => {
                parse_placement(p).map(|placement| (placement, PathBuf::from(dir), started))
            }
            _ => None,
        };
        let Some((placement, run_dir, started_at)) = live_run else {
            self.restore_pending(id, restored, active, &tier, was, row.retry_at_ms)?;
            return Ok(None);
        };
        let replica_dirs: Vec<PathBuf> =
            (0..placement.replicas().len()).map(|i| run_dir.join(format!("replica-{i}"))).collect();
        let processes = live_processes(&row, &replica_dirs);
        // The replicas whose supervisors are gone.
        let gone: Vec<&PathBuf> = replica_dirs.iter().filter(|d| !processes.iter().any(|p| p.run_dir == **d)).collect();
        // A gang starts whole or not at all: if the old server died before it launched every
        // replica, the run never started. What did start is stopped and the run is judged
        // not started (requeued, counting against nothing).
        let launch_unfinished = gone.iter().any(|d| !fairway_exec::job_ran(d));
        let stopping = row.stop.as_ref().and_then(restored_stop);
        let run = RestoredRun { placement, started_at: Time(started_at), stopping };
        let running = RestoredJob { running: Some(run), ..restored.clone() };
        if let Err(e) = self.core.apply(Event::Restore(running), Time(self.now_ms())) {
            // The node layout changed under the run (a smaller --gpus): it cannot keep its
            // GPUs. Stop what is left of it and queue it again.
            tracing::warn!(id, "run cannot be restored where it ran: {e}");
            self.kill_run(id, row.restart_count, &processes);
            let event =
                recovered_event(id, format!("its run could not be restored ({e}); back in the queue"), self.now_ms());
            let _ = self.write("a run that cannot be restored", |tx| tx.end_run(id, &requeue_end(), &event));
            active.pending_since_ms = Some(self.now_ms());
            self.restore_pending(id, restored, active, &tier, JobState::Pending, None)?;
            return Ok(None);
        }
        active.in_flight = true;
        active.started_at_ms = Some(started_at);
        active.stop_requested_at_ms = row.stop.as_ref().map(|s| s.requested_at_ms);
        active.state = was;
        self.metrics.job_state(&tier, was, 1);
        let run = active.run;
        self.jobs.insert(id, active);
        if launch_unfinished {
            tracing::warn!(id, "the run's launch was not finished before the restart: it did not start");
            self.kill_run(id, run, &processes);
            return Ok(Some(Ended { id, exit: RunExit::NotStarted, killed: false }));
        }
        // What the replicas whose supervisors are gone recorded as they ended.
        let ended: Vec<Option<ExitRecord>> = gone.iter().map(|d| fairway_exec::read_exit(d).ok().flatten()).collect();
        if !processes.is_empty() {
            // They ended while the server was down: the executor judges them with the live
            // ones (one that failed stops the gang).
            let container = self.container_of(id);
            let kill_at_unix_ms = row.stop.as_ref().map(|s| s.kill_at_ms);
            let _ = self.exec.send(ExecCommand::Adopt {
                job: id,
                run,
                replicas: processes,
                ended,
                grace_ms,
                container,
                kill_at_unix_ms,
            });
            return Ok(None);
        }
        self.kill_leftovers(id, run);
        let killed = row.stop.as_ref().is_some_and(|s| s.kill_at_ms <= self.now_ms());
        let exit = ended_run(ended);
        Ok(Some(Ended { id, killed: killed && exit == RunExit::Lost, exit }))
    }

    fn restore_pending(
        &mut self,
        id: i64,
        restored: RestoredJob,
        mut active: super::ActiveJob,
        tier: &str,
        was: JobState,
        retry_at_ms: Option<u64>,
    ) -> Result<(), ServerError> {
        match retry_at_ms.filter(|at| *at > self.now_ms()) {
            // Still waiting out its backoff: it joins the queue when that is over.
            Some(at) => {
                active.retry_at_ms = Some(at);
                self.backoff.insert((at, id));
            }
            None => {
                self.core
                    .apply(Event::Restore(restored), Time(self.now_ms()))
                    .map_err(|e| ServerError::Config(e.to_string()))?;
            }
        }
        if was != JobState::Pending {
            let event = recovered_event(id, "no run to restore; back in the queue".into(), self.now_ms());
            let _ = self.write("a requeue at recovery", |tx| tx.set_state(id, JobState::Pending, &event));
        }
        active.state = JobState::Pending;
        self.metrics.job_state(tier, JobState::Pending, 1);
        self.jobs.insert(id, active);
        Ok(())
    }

    /// A pending preemptor's stored hold, given back to the core if it still holds.
    fn restore_hold(&mut self, id: i64, json: &str) {
        let Ok(hold) = serde_json::from_str::<StoredHold>(json) else { return };
        let Some(placement) = placement_of(hold.placement) else { return };
        let victims = hold.victims.iter().map(|v| core_id(*v)).collect();
        let hold = RestoredHold { preemptor: core_id(id), placement, victims };
        if let Err(e) = self.core.apply(Event::RestoreHold(hold), Time(self.now_ms())) {
            tracing::info!(id, "the hold of a preemptor is not restored: {e}");
        }
    }

    /// Kills a run that will not be re-adopted: its live supervisors' process groups, then
    /// whatever else it left running.
    fn kill_run(&self, id: i64, run: u32, processes: &[ProcessRecord]) {
        for p in processes {
            let _ = fairway_exec::signal_group(p.pid, fairway_exec::Signal::Kill);
        }
        self.kill_leftovers(id, run);
    }

    /// Kills what a finished run left running: its processes carry the job's checkpoint
    /// directory and run number in their environment, even those that left its process
    /// group. An image job's container is removed too.
    fn kill_leftovers(&self, id: i64, run: u32) {
        let checkpoint = super::jobdirs::JobDirs::of(&self.job_dir(id)).checkpoint.display().to_string();
        let run = run.to_string();
        let pids = fairway_exec::processes_with_env(&[
            ("FAIRWAY_CHECKPOINT_DIR", &checkpoint),
            ("FAIRWAY_RESTART_COUNT", &run),
        ]);
        if !pids.is_empty() {
            tracing::warn!(id, ?pids, "killing processes a finished run left behind");
            fairway_exec::kill_processes(&pids);
        }
        if let Some(c) = self.container_of(id)
            && let Err(e) = fairway_exec::remove_container(&c.runtime, &c.name)
        {
            tracing::warn!(id, "cannot remove container {}: {e}", c.name);
        }
    }

    /// Makes the store's paths absolute (stores of servers started with a relative
    /// `--data-dir`).
    pub(crate) fn absolutize_paths(&mut self) -> Result<(), ServerError> {
        let data_dir = self.config.data_dir.clone();
        let mut tx = self.store.transaction()?;
        let changed = tx.absolutize_run_dirs(&data_dir)?;
        tx.commit()?;
        if changed > 0 {
            tracing::info!(changed, "run directories recorded relative to the old working directory made absolute");
        }
        Ok(())
    }
}

fn restored_stop(stop: &StopRow) -> Option<RestoredStop> {
    Some(match stop.cause.as_str() {
        "preempted" => {
            RestoredStop::Preempted { preemptor: core_id(stop.preemptor_id?), deadline: Time(stop.kill_at_ms) }
        }
        "cancelled" => RestoredStop::Stopped(StopCause::Cancelled),
        "runtime_limit" => RestoredStop::Stopped(StopCause::RuntimeLimit),
        _ => return None,
    })
}

/// The stored spec back as a resolved job, without consulting today's classes: the
/// priority, class, preemption policy and protection are those it was accepted with.
fn resolved_from_row(row: &JobRow) -> Result<ResolvedJob, String> {
    let value: serde_json::Value = serde_json::from_str(&row.spec_json).map_err(|e| e.to_string())?;
    let doc = fairway_spec::parse_native_job(&value, 1, "").map_err(|e| e.to_string())?;
    let preemption_policy = doc.preemption_policy.map(PreemptionPolicy::from).unwrap_or_default();
    let protection = PreemptionProtection {
        min_run_seconds: row.min_run_before_preemption_seconds,
        preemptions_per_hour_max: row.preemptions_per_hour_max,
        overrides_protection: row.overrides_preemption_protection,
        preemption_delay_seconds: row.preemption_delay_seconds,
    };
    Ok(ResolvedJob {
        doc,
        priority: row.priority,
        priority_class: row.priority_class.clone(),
        preemption_policy,
        protection,
    })
}

/// The run's supervisors that still live: the recorded ones (pid and start time must both
/// match), or, if none were recorded, shims found in `/proc` by their run directory.
fn live_processes(row: &JobRow, replica_dirs: &[PathBuf]) -> Vec<ProcessRecord> {
    let recorded: Vec<ProcessRecord> =
        row.processes_json.as_deref().and_then(|j| serde_json::from_str(j).ok()).unwrap_or_default();
    let candidates = if recorded.is_empty() { find_shims(replica_dirs) } else { recorded };
    candidates.into_iter().filter(|p| fairway_exec::is_same_process_alive(p.pid, p.start_ticks)).collect()
}

/// Shims whose command line is `… __shim <dir>` for one of `dirs`.
fn find_shims(dirs: &[PathBuf]) -> Vec<ProcessRecord> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    let mut found = Vec::new();
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else { continue };
        let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        let Some(i) = args.iter().position(|a| *a == fairway_exec::SHIM_SUBCOMMAND.as_bytes()) else { continue };
        let Some(dir) = args.get(i + 1).and_then(|a| std::str::from_utf8(a).ok()) else { continue };
        if let Some(run_dir) = dirs.iter().find(|d| Path::new(dir) == d.as_path())
            && let Some(start_ticks) = fairway_exec::process_start_ticks(pid)
        {
            found.push(ProcessRecord { pid, start_ticks, run_dir: run_dir.clone() });
        }
    }
    found.sort_by(|a, b| a.run_dir.cmp(&b.run_dir));
    found
}

/// How a run whose supervisors are all gone ended, from what each replica recorded (every
/// replica ran: a run with one that never did was judged not started before).
fn ended_run(records: Vec<Option<ExitRecord>>) -> RunExit {
    if let Some(failed) = records.iter().flatten().find(|r| !r.success()) {
        return RunExit::Exited(failed.clone());
    }
    match records.iter().all(Option::is_some) {
        true => RunExit::Exited(records[0].clone().expect("all present")),
        false => RunExit::Lost,
    }
}

fn recovered_event(id: i64, message: String, at_ms: u64) -> NewEvent {
    NewEvent { job_id: id, at_ms, kind: "recovered".into(), reason: Some("server_restart".into()), message }
}

fn requeue_end() -> fairway_store::RunEnd {
    fairway_store::RunEnd {
        state: JobState::Pending,
        runtime_ms: 0,
        will_restart: false,
        preempted: false,
        failed: false,
        exit_code: None,
        exit_signal: None,
        retry_at_ms: None,
    }
}
