//! Carries out the engine's decisions on real processes: launch a run's replicas (each under
//! its shim), watch them, signal them, and report back how the run ended. It decides nothing:
//! what runs where, and what an exit means, is the engine's business.
//!
//! A run ends when all its replicas have exited. When one replica of a gang fails, the others
//! are stopped (SIGTERM, then SIGKILL after the job's grace period): a gang lives and dies whole.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use fairway_exec::{ExitRecord, LaunchSpec, PreemptNotice, Signal};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};

use crate::clock::Clock;

/// How often adopted processes (not our children) are checked for liveness.
const ADOPTED_POLL: Duration = Duration::from_millis(100);

/// One replica's supervisor, as stored for re-adoption after a restart.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessRecord {
    pub pid: u32,
    pub start_ticks: u64,
    pub run_dir: PathBuf,
}

/// An image job's container, to remove if its run must be killed.
#[derive(Clone, Debug)]
pub struct Container {
    pub runtime: fairway_exec::ContainerRuntime,
    pub name: String,
}

/// What the engine asks for.
#[derive(Debug)]
pub enum ExecCommand {
    /// Launch every replica of a run. `container`: the runtime and container name of an
    /// image job, removed when the run is killed (SIGKILL stops the `docker run` client,
    /// not the container).
    Start { job: i64, run: u32, replicas: Vec<LaunchSpec>, grace_ms: u64, container: Option<Container> },
    /// Watch a run started by an earlier server process (or, after the engine rebuilt its
    /// state, one this executor already watches: then nothing changes). `kill_at_unix_ms`:
    /// the run was being stopped; SIGTERM again (the old server may have died before
    /// sending it) and SIGKILL at that same deadline.
    Adopt {
        job: i64,
        run: u32,
        replicas: Vec<ProcessRecord>,
        /// The other replicas, whose supervisors ended while the server was down: what each
        /// recorded (`None`: nothing, lost).
        ended: Vec<Option<ExitRecord>>,
        grace_ms: u64,
        container: Option<Container>,
        kill_at_unix_ms: Option<u64>,
    },
    /// SIGTERM now (after writing the notice, if any), SIGKILL at `kill_at_unix_ms`.
    Terminate { job: i64, run: u32, notice: Option<(PathBuf, PreemptNotice)>, kill_at_unix_ms: u64 },
}

/// How a run ended, for the engine to judge.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RunExit {
    /// Every replica exited; the first that did not succeed, or the last one.
    Exited(ExitRecord),
    /// A replica's supervisor vanished without recording an exit (SIGKILL, reboot).
    Lost,
    /// The run never started: its supervisors could not be launched.
    LaunchFailed(String),
    /// Found at recovery: the server stopped after recording the run and before launching it.
    NotStarted,
}

/// Internal: what replica watchers tell the executor loop.
enum Watch {
    ReplicaExited {
        job: i64,
        run: u32,
        replica: usize,
        record: Option<ExitRecord>,
    },
    /// `deadline`: the end of a grace period the engine gave (not a gang member's failure).
    KillNow {
        job: i64,
        run: u32,
        deadline: bool,
    },
}

struct Run {
    run: u32,
    container: Option<Container>,
    replicas: Vec<ReplicaState>,
    grace_ms: u64,
    /// Set once the run was told to stop (by the engine or because a gang member failed).
    terminating: bool,
    /// Set once SIGKILL was sent at the end of a grace period.
    killed: bool,
    /// The first replica outcome that was not a success.
    first_failure: Option<RunExit>,
    last_record: Option<ExitRecord>,
}

struct ReplicaState {
    pgid: u32,
    done: bool,
}

/// What the executor reports: its own events, which whoever spawned it turns into its own
/// messages (the engine's `Command`), so that the executor knows nothing of the engine.
#[derive(Debug)]
pub enum ExecEvent {
    /// A run's supervisors are up.
    Launched { job: i64, run: u32, processes: Vec<ProcessRecord> },
    /// A run is over. `killed`: it was still running at its deadline.
    RunEnded { job: i64, run: u32, exit: RunExit, killed: bool },
}

/// Where the executor's events go. Sending never blocks; a receiver that is gone (the
/// engine has stopped) drops them.
pub type Report = Box<dyn Fn(ExecEvent) + Send + Sync>;

pub struct Executor {
    runs: BTreeMap<i64, Run>,
    report: Report,
    watch_tx: UnboundedSender<Watch>,
    /// The server's clock, which kill deadlines are set in.
    clock: Arc<dyn Clock>,
}

/// Starts the executor loop on the current tokio runtime; its events go to `report`, and
/// kill deadlines are read against `clock` (the engine's).
pub fn spawn(report: Report, clock: Arc<dyn Clock>) -> UnboundedSender<ExecCommand> {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let (watch_tx, watch_rx) = tokio::sync::mpsc::unbounded_channel();
    let executor = Executor { runs: BTreeMap::new(), report, watch_tx, clock };
    tokio::spawn(executor.run(rx, watch_rx));
    tx
}

impl Executor {
    async fn run(mut self, mut commands: UnboundedReceiver<ExecCommand>, mut watches: UnboundedReceiver<Watch>) {
        loop {
            tokio::select! {
                command = commands.recv() => match command {
                    Some(command) => self.handle(command),
                    None => break,
                },
                Some(watch) = watches.recv() => self.watched(watch),
            }
        }
    }

    fn handle(&mut self, command: ExecCommand) {
        match command {
            ExecCommand::Start { job, run, replicas, grace_ms, container } => {
                self.start(job, run, replicas, grace_ms, container)
            }
            ExecCommand::Adopt { job, run, replicas, ended, grace_ms, container, kill_at_unix_ms } => {
                if self.runs.get(&job).is_some_and(|r| r.run == run) {
                    return;
                }
                self.adopt(job, run, replicas, ended, grace_ms, container);
                if let Some(kill_at) = kill_at_unix_ms {
                    self.terminate(job, run, None, kill_at);
                }
            }
            ExecCommand::Terminate { job, run, notice, kill_at_unix_ms } => {
                self.terminate(job, run, notice, kill_at_unix_ms)
            }
        }
    }

    fn start(&mut self, job: i64, run: u32, replicas: Vec<LaunchSpec>, grace_ms: u64, container: Option<Container>) {
        let mut launched = Vec::new();
        let mut records = Vec::new();
        for spec in &replicas {
            match fairway_exec::launch(spec) {
                Ok(l) => {
                    records.push(ProcessRecord {
                        pid: l.pid,
                        start_ticks: l.start_ticks,
                        run_dir: spec.run_dir.clone(),
                    });
                    launched.push(l);
                }
                Err(e) => {
                    // A gang starts whole or not at all: stop what did start.
                    for l in &launched {
                        let _ = fairway_exec::signal_group(l.pid, Signal::Kill);
                    }
                    for mut l in launched {
                        let _ = l.child.wait();
                    }
                    let exit = RunExit::LaunchFailed(e.to_string());
                    (self.report)(ExecEvent::RunEnded { job, run, exit, killed: false });
                    return;
                }
            }
        }
        (self.report)(ExecEvent::Launched { job, run, processes: records.clone() });
        let states = launched.iter().map(|l| ReplicaState { pgid: l.pid, done: false }).collect();
        self.runs.insert(job, Run { container, ..new_run(run, states, grace_ms) });
        for (replica, (l, record)) in launched.into_iter().zip(records).enumerate() {
            let watch = self.watch_tx.clone();
            let mut child = l.child;
            tokio::task::spawn_blocking(move || {
                let _ = child.wait();
                sweep_group(record.pid);
                let record = fairway_exec::read_exit(&record.run_dir).ok().flatten();
                let _ = watch.send(Watch::ReplicaExited { job, run, replica, record });
            });
        }
    }

    fn adopt(
        &mut self,
        job: i64,
        run: u32,
        replicas: Vec<ProcessRecord>,
        ended: Vec<Option<ExitRecord>>,
        grace_ms: u64,
        container: Option<Container>,
    ) {
        // The ended replicas come last, done: `signal_live` never signals them.
        let live = replicas.len();
        let states = replicas
            .iter()
            .map(|r| ReplicaState { pgid: r.pid, done: false })
            .chain(ended.iter().map(|_| ReplicaState { pgid: 0, done: true }))
            .collect();
        self.runs.insert(job, Run { container, ..new_run(run, states, grace_ms) });
        for (k, record) in ended.into_iter().enumerate() {
            self.replica_exited(job, run, live + k, record);
        }
        for (replica, record) in replicas.into_iter().enumerate() {
            let watch = self.watch_tx.clone();
            tokio::spawn(async move {
                while fairway_exec::is_same_process_alive(record.pid, record.start_ticks) {
                    tokio::time::sleep(ADOPTED_POLL).await;
                }
                sweep_group(record.pid);
                let exit = fairway_exec::read_exit(&record.run_dir).ok().flatten();
                let _ = watch.send(Watch::ReplicaExited { job, run, replica, record: exit });
            });
        }
    }

    fn terminate(&mut self, job: i64, run: u32, notice: Option<(PathBuf, PreemptNotice)>, kill_at_unix_ms: u64) {
        let Some(state) = self.runs.get_mut(&job).filter(|r| r.run == run) else { return };
        if let Some((path, notice)) = notice
            && let Err(e) = fairway_exec::write_preempt_notice(&path, &notice)
        {
            tracing::warn!(job, "cannot write the preemption notice: {e}");
        }
        state.terminating = true;
        signal_live(state, Signal::Term);
        let delay = Duration::from_millis(kill_at_unix_ms.saturating_sub(self.clock.now_ms()));
        let watch = self.watch_tx.clone();
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let _ = watch.send(Watch::KillNow { job, run, deadline: true });
        });
    }

    fn watched(&mut self, watch: Watch) {
        match watch {
            Watch::KillNow { job, run, deadline } => {
                if let Some(state) = self.runs.get_mut(&job).filter(|r| r.run == run) {
                    state.killed |= deadline;
                    signal_live(state, Signal::Kill);
                    if let Some(c) = state.container.clone() {
                        tokio::task::spawn_blocking(move || {
                            if let Err(e) = fairway_exec::remove_container(&c.runtime, &c.name) {
                                tracing::warn!(job, "cannot remove container {}: {e}", c.name);
                            }
                        });
                    }
                }
            }
            Watch::ReplicaExited { job, run, replica, record } => self.replica_exited(job, run, replica, record),
        }
    }

    fn replica_exited(&mut self, job: i64, run: u32, replica: usize, record: Option<ExitRecord>) {
        let Some(state) = self.runs.get_mut(&job).filter(|r| r.run == run) else { return };
        state.replicas[replica].done = true;
        let outcome = match record {
            Some(r) if r.success() => {
                state.last_record = Some(r);
                None
            }
            Some(r) => Some(RunExit::Exited(r)),
            None => Some(RunExit::Lost),
        };
        if let Some(failure) = outcome {
            if state.first_failure.is_none() {
                state.first_failure = Some(failure);
            }
            if !state.terminating && state.replicas.len() > 1 {
                // One gang member failed: the others cannot make progress alone.
                state.terminating = true;
                signal_live(state, Signal::Term);
                let (watch, grace) = (self.watch_tx.clone(), state.grace_ms);
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(grace)).await;
                    let _ = watch.send(Watch::KillNow { job, run, deadline: false });
                });
            }
        }
        if state.replicas.iter().all(|r| r.done) {
            let state = self.runs.remove(&job).expect("present");
            let exit = state.first_failure.or(state.last_record.map(RunExit::Exited)).unwrap_or(RunExit::Lost);
            let killed = state.killed;
            (self.report)(ExecEvent::RunEnded { job, run, exit, killed });
        }
    }
}

/// Kills what is left of a replica's process group once its shim is gone: a job's children
/// that outlived it must not keep using GPUs the scheduler now hands to someone else. Safe
/// after the shim is reaped: Linux does not reuse a pid while a group still bears its number.
fn sweep_group(pgid: u32) {
    if let Err(e) = fairway_exec::signal_group(pgid, Signal::Kill) {
        tracing::warn!(pgid, "cannot sweep the process group: {e}");
    }
}

fn new_run(run: u32, replicas: Vec<ReplicaState>, grace_ms: u64) -> Run {
    Run {
        run,
        container: None,
        replicas,
        grace_ms,
        terminating: false,
        killed: false,
        first_failure: None,
        last_record: None,
    }
}

fn signal_live(run: &Run, signal: Signal) {
    for r in run.replicas.iter().filter(|r| !r.done) {
        if let Err(e) = fairway_exec::signal_group(r.pgid, signal) {
            tracing::warn!(pgid = r.pgid, "cannot signal the process group: {e}");
        }
    }
}
