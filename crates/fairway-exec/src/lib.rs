//! # fairway-exec
//!
//! The standalone server's executor layer: it finds GPUs, launches jobs under a supervising
//! shim, signals them, tells whether they still run, and reads their logs. It holds no
//! scheduling logic: the server decides what runs where and calls this crate to carry it out.
//! Linux only (it reads `/proc`).
//!
//! ## The shim protocol
//!
//! Every job runs under a small supervisor, the *shim* (`fairway __shim <run_dir>`, like
//! conmon or containerd-shim), so the server can die and restart without losing the job's exit
//! status or its output.
//!
//! 1. The server creates a per-run directory and calls [`launch`], which writes
//!    `run_dir/launch.json` (a [`LaunchSpec`]) and starts `<shim_exe> __shim <run_dir>` as the
//!    leader of a new process group (`process_group(0)`; no `pre_exec`), stdin `/dev/null`,
//!    its own stdout/stderr appended to `run_dir/shim.log`. The shim's pid is the group id.
//!    The server stores the pid with its start time ([`Launched::start_ticks`]).
//! 2. The shim ([`run_shim`]) starts the job (`argv`, `cwd`, the inherited environment plus
//!    `env`) in the same group, stdin `/dev/null`, stdout and stderr piped, and copies both into
//!    one log, `log_path`, as the bytes arrive. The log rotates to `log_path.1`, `.2`, … keeping
//!    at most `log_files_max` files of at most `log_bytes_max` bytes.
//! 3. Signals go to the whole group ([`signal_group`]):
//!    - **SIGTERM** (and SIGINT, SIGHUP) reach the job with their default action; the shim has
//!      handlers that do nothing (handlers, unlike `SIG_IGN`, are reset in the exec'd job), so it
//!      survives and records how the job ended.
//!    - **SIGKILL** kills the job and the shim: no `exit.json` is written.
//! 4. When the job exits, the shim drains its output (for at most 2 s more), writes
//!    `run_dir/exit.json` atomically (temporary file + rename) and exits:
//!    ```json
//!    { "code": 0, "signal": null, "finished_at_unix_ms": 1767225600000 }
//!    { "code": null, "signal": 15, "finished_at_unix_ms": 1767225600000 }
//!    { "code": null, "signal": null, "finished_at_unix_ms": 1767225600000,
//!      "spawn_error": "cannot start \"trian.py\": No such file or directory (os error 2)" }
//!    ```
//!    `spawn_error` means the job never ran (argv\[0\] not found, bad `cwd`, log not writable).
//! 5. The server learns the outcome with [`read_exit`]. With no `exit.json`, the job is running
//!    while [`is_same_process_alive`]`(pid, start_ticks)` holds; once that is false (after a
//!    restart, or the shim's own zombie) the job was killed or lost.
//!
//! The shim's exit code mirrors the job's (code, or 128 + signal), 127 when the job could not
//! start and 125 when the shim itself failed; `exit.json` is the record to trust.
//!
//! ## Files a job sees
//!
//! The server puts these in [`LaunchSpec::env`]; this crate reads and writes them:
//! - `FAIRWAY_CHECKPOINT_DIR`: the job reports a finished checkpoint by writing
//!   `.fairway-checkpoint` there ([`checkpoint_marker_time`]).
//! - `FAIRWAY_PREEMPT_NOTICE_FILE`: written by [`write_preempt_notice`] before SIGTERM.
//! - `FAIRWAY_RESTART_COUNT`, `CUDA_VISIBLE_DEVICES`: read by the job (see the example trainer,
//!   [`run_example_trainer`]).

#![warn(missing_docs)]

mod checkpoint;
mod container;
mod error;
mod fsutil;
mod gpus;
mod launch;
mod logs;
mod process;
mod shim;
mod trainer;

pub use checkpoint::{CHECKPOINT_MARKER_FILE, checkpoint_marker_time, write_checkpoint_marker};
pub use container::{
    CONTAINER_CHECKPOINT_DIR, CONTAINER_NOTICE_DIR, ContainerRun, ContainerRuntime, RuntimeKind, container_argv,
    container_name, detect_runtime, detect_runtime_in, image_present, pull_image, remove_container,
};
pub use error::ExecError;
pub use gpus::{
    GpuDevice, GpuLayout, GpuSource, NodeDevices, SIMULATED_GPUS_PER_NODE_MAX, SIMULATED_NODES_MAX, SimulatedGpus,
    discover, hostname, machine_resources, short_model_name,
};
pub use launch::{
    EXIT_FILE, ExitRecord, JOB_STARTED_FILE, LAUNCH_FILE, LaunchSpec, Launched, PreemptNotice, RunAs, SHIM_LOG_FILE,
    SHIM_SUBCOMMAND, job_ran, launch, read_exit, read_preempt_notice, write_preempt_notice,
};
pub use logs::{FOLLOW_POLL_BYTES_MAX, FollowFrom, LogFollower, TAIL_BYTES_MAX, rotated_path, tail_lines};
pub use process::{
    Signal, is_same_process_alive, kill_processes, process_start_ticks, processes_with_env, signal_group,
};
pub use shim::{SHIM_EXIT_SHIM_FAILED, SHIM_EXIT_SPAWN_FAILED, run_shim};
pub use trainer::{TRAINER_EXIT_TERMINATED, TRAINER_STATE_FILE, TrainerArgs, run_example_trainer};
