//! Start-up: classes, quotas, and every job the store says is not finished.
//!
//! A pending job returns to its original queue position (its submit time and id). A run the
//! store says is live is looked for: by the recorded supervisor pids *and* their start times
//! (a reused pid is not our process), or, when the server died before recording them, by
//! scanning `/proc` for a shim of the run's directory. A live run is re-adopted and keeps
//! its GPUs; a finished one is judged from its `exit.json`; one that never started is
//! requeued without counting against anything; one that vanished is judged by the restart
//! policy (`retries`).

use std::path::{Path, PathBuf};

use fairway_core::{Event, PreemptionPolicy, RestoredJob, RestoredRun, Time};
use fairway_exec::{ExitRecord, LAUNCH_FILE};
use fairway_spec::ResolvedJob;
use fairway_store::{JobRow, JobState, NewEvent};

use super::runs::parse_placement;
use super::submit::new_active;
use super::{AccountKind, Engine, core_id, now_ms, tier_label};
use crate::ServerError;
use crate::executor::{ExecCommand, ProcessRecord, RunExit};

impl Engine {
    /// Built-ins, then the config file's classes, then classes submitted earlier.
    pub(crate) fn load_classes(&mut self) -> Result<(), ServerError> {
        for c in self.config.file.priority_classes.clone() {
            let policy = match c.preemption_policy.as_deref() {
                Some("Never") => PreemptionPolicy::Never,
                _ => PreemptionPolicy::PreemptLowerPriority,
            };
            self.classes
                .add(&c.name, c.value, c.global_default, policy, &c.description)
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
                row.description.as_deref().unwrap_or(""),
            ) {
                tracing::warn!("stored priority class {} conflicts with the config and is ignored: {e}", row.name);
            }
        }
        Ok(())
    }

    /// The config file's quotas win over stored ones for the same account (the file is
    /// declarative); quotas set through the API persist for the others.
    pub(crate) fn load_quotas(&mut self) -> Result<(), ServerError> {
        let rows: Vec<fairway_store::QuotaRow> = self
            .config
            .file
            .quotas
            .iter()
            .map(|q| {
                let (kind, account) = match (&q.project, &q.user) {
                    (Some(p), _) => ("project", p.clone()),
                    (None, Some(u)) => ("user", u.clone()),
                    (None, None) => unreachable!("checked when the config was read"),
                };
                fairway_store::QuotaRow {
                    account_kind: kind.into(),
                    account,
                    gpus_max: q.gpus_max,
                    cpu_millis_max: q.cpu_millis_max,
                    memory_mib_max: q.memory_mib_max,
                }
            })
            .collect();
        self.write(|tx| rows.iter().try_for_each(|r| tx.set_quota(r)))?;
        for row in self.store.quotas()? {
            let kind = AccountKind::parse(&row.account_kind).unwrap_or(AccountKind::Project);
            let account = self.account(kind, &row.account).map_err(|e| ServerError::Config(e.message))?;
            let quota = fairway_core::Quota {
                gpus_max: row.gpus_max,
                cpu_millis_max: row.cpu_millis_max,
                memory_mib_max: row.memory_mib_max,
            };
            self.core
                .apply(Event::SetQuota { account, quota: Some(quota) }, Time(now_ms()))
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
        for row in rows {
            let id = row.id;
            let resolved = match resolved_from_row(&row) {
                Ok(r) => r,
                Err(e) => {
                    tracing::error!(id, "stored job cannot be read back; marking it failed: {e}");
                    let event = lost_event(id, format!("its stored spec cannot be read: {e}"));
                    self.write(|tx| tx.set_state(id, JobState::Failed, &event))?;
                    continue;
                }
            };
            if let Some(exit) = self.recover_job(row, resolved)? {
                ended.push((id, exit));
            }
        }
        // Runs that ended while the server was down are judged once everything is restored,
        // through the same path as any other end of a run.
        for (id, exit) in ended {
            let run = self.jobs[&id].run;
            self.run_ended(id, run, exit, now_ms());
        }
        self.touch();
        Ok(())
    }

    /// Restores one job; returns how its run ended if it ended while the server was down.
    fn recover_job(&mut self, row: JobRow, resolved: ResolvedJob) -> Result<Option<RunExit>, ServerError> {
        let id = row.id;
        let spec = self.core_spec(id, &resolved).map_err(|e| ServerError::Config(e.message))?;
        let mut active = new_active(resolved, row.submitted_at_ms);
        active.run = row.restart_count;
        active.failures = row.failures;
        active.first_started_at_ms = row.first_started_at_ms;
        active.last_checkpoint_ms = row.last_checkpoint_ms;
        let restored = RestoredJob {
            spec,
            submitted_at: Time(row.submitted_at_ms),
            runtime_done_ms: row.runtime_done_ms,
            preemptions: row.preemptions,
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
            self.restore_pending(id, restored, active, &tier, was)?;
            return Ok(None);
        };
        let replica_dirs: Vec<PathBuf> =
            (0..placement.replicas().len()).map(|i| run_dir.join(format!("replica-{i}"))).collect();
        let processes = live_processes(&row, &replica_dirs);
        let running =
            RestoredJob { running: Some(RestoredRun { placement, started_at: Time(started_at) }), ..restored.clone() };
        if let Err(e) = self.core.apply(Event::Restore(running), Time(now_ms())) {
            // The node layout changed under the run (a smaller --gpus): it cannot keep its
            // GPUs. Stop what is left of it and queue it again.
            tracing::warn!(id, "run cannot be restored where it ran: {e}");
            for p in &processes {
                let _ = fairway_exec::signal_group(p.pid, fairway_exec::Signal::Kill);
            }
            let event = lost_event(id, format!("its run could not be restored ({e}); back in the queue"));
            self.write(|tx| tx.end_run(id, &requeue_end(), &event))?;
            self.restore_pending(id, restored, active, &tier, JobState::Pending)?;
            return Ok(None);
        }
        active.in_flight = true;
        active.started_at_ms = Some(started_at);
        active.recovered_preempting = was == JobState::Preempting;
        active.state = was;
        self.metrics.job_state(&tier, was, 1);
        let run = active.run;
        self.jobs.insert(id, active);
        if !processes.is_empty() {
            let container = self.container_of(id);
            let _ = self.exec.send(ExecCommand::Adopt { job: id, run, replicas: processes, grace_ms, container });
            if was == JobState::Stopping && self.stopped_by_cancel(id)? {
                self.core
                    .apply(Event::Cancel(core_id(id)), Time(now_ms()))
                    .map_err(|e| ServerError::Config(e.to_string()))?;
            }
            return Ok(None);
        }
        Ok(Some(ended_run(&replica_dirs)))
    }

    fn restore_pending(
        &mut self,
        id: i64,
        restored: RestoredJob,
        mut active: super::ActiveJob,
        tier: &str,
        was: JobState,
    ) -> Result<(), ServerError> {
        self.core.apply(Event::Restore(restored), Time(now_ms())).map_err(|e| ServerError::Config(e.to_string()))?;
        if was != JobState::Pending {
            let event = lost_event(id, "no run to restore; back in the queue".into());
            self.write(|tx| tx.set_state(id, JobState::Pending, &event))?;
        }
        active.state = JobState::Pending;
        self.metrics.job_state(tier, JobState::Pending, 1);
        self.jobs.insert(id, active);
        Ok(())
    }

    fn stopped_by_cancel(&self, id: i64) -> Result<bool, ServerError> {
        let events = self.store.events(id)?;
        Ok(events.iter().rev().find(|e| e.kind == "stopping").is_some_and(|e| e.reason.as_deref() == Some("cancelled")))
    }
}

/// The stored spec back as a resolved job, without consulting today's classes: the
/// priority, class and preemption policy are those it was accepted with.
fn resolved_from_row(row: &JobRow) -> Result<ResolvedJob, String> {
    let value: serde_json::Value = serde_json::from_str(&row.spec_json).map_err(|e| e.to_string())?;
    let doc = fairway_spec::parse_native_job(&value, 1, "").map_err(|e| e.to_string())?;
    let preemption_policy = doc.preemption_policy.map(PreemptionPolicy::from).unwrap_or_default();
    Ok(ResolvedJob { doc, priority: row.priority, priority_class: row.priority_class.clone(), preemption_policy })
}

/// The run's supervisors that still live: the recorded ones (pid and start time must both
/// match), or, if none were recorded, shims found in `/proc` by their run directory.
fn live_processes(row: &JobRow, replica_dirs: &[PathBuf]) -> Vec<ProcessRecord> {
    let recorded: Vec<ProcessRecord> =
        row.processes_json.as_deref().and_then(|j| serde_json::from_str(j).ok()).unwrap_or_default();
    let candidates = if recorded.is_empty() { find_shims(replica_dirs) } else { recorded };
    let alive: Vec<ProcessRecord> =
        candidates.into_iter().filter(|p| fairway_exec::is_same_process_alive(p.pid, p.start_ticks)).collect();
    alive
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

/// How a run whose supervisors are all gone ended, from what they left behind.
fn ended_run(replica_dirs: &[PathBuf]) -> RunExit {
    if !replica_dirs.iter().any(|d| d.join(LAUNCH_FILE).exists()) {
        return RunExit::NotStarted;
    }
    let records: Vec<Option<ExitRecord>> =
        replica_dirs.iter().map(|d| fairway_exec::read_exit(d).ok().flatten()).collect();
    if let Some(failed) = records.iter().flatten().find(|r| !r.success()) {
        return RunExit::Exited(failed.clone());
    }
    match records.iter().all(Option::is_some) {
        true => RunExit::Exited(records[0].clone().expect("all present")),
        false => RunExit::Lost,
    }
}

fn lost_event(id: i64, message: String) -> NewEvent {
    NewEvent { job_id: id, at_ms: now_ms(), kind: "recovered".into(), reason: Some("server_restart".into()), message }
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
    }
}
