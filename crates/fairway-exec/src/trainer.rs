//! The example trainer (`fairway example-trainer`): a fake training loop that checkpoints,
//! resumes and handles SIGTERM the way a well-behaved preemptible job should. No GPU, no Python.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::fsutil::{now_unix_ms, read_json_opt, write_json_atomic};
use crate::{read_preempt_notice, write_checkpoint_marker};

/// The trainer's state file in the checkpoint directory: `{"step": N}`.
pub const TRAINER_STATE_FILE: &str = "trainer.json";
/// The exit code after a SIGTERM with the checkpoint saved (128 + 15, as a shell reports it).
pub const TRAINER_EXIT_TERMINATED: i32 = 143;
/// The longest the trainer sleeps before looking at the SIGTERM flag again.
const SLEEP_SLICE: Duration = Duration::from_millis(10);

/// The trainer's options.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TrainerArgs {
    /// Steps in the whole run.
    pub steps: u64,
    /// Save a checkpoint every this many steps (0: only on SIGTERM).
    pub checkpoint_every: u64,
    /// How long one step takes, in milliseconds.
    pub step_ms: u64,
    /// Exit with code 1 on reaching this step, on every attempt that reaches it.
    pub fail_at_step: Option<u64>,
}

impl Default for TrainerArgs {
    fn default() -> Self {
        TrainerArgs { steps: 100, checkpoint_every: 10, step_ms: 100, fail_at_step: None }
    }
}

impl TrainerArgs {
    /// Parses `--steps N --checkpoint-every K --step-ms M --fail-at-step F` (each optional,
    /// defaults from [`Default`]); for binaries without clap.
    pub fn parse_args<I: IntoIterator<Item = String>>(args: I) -> Result<Self, String> {
        let mut parsed = TrainerArgs::default();
        let mut args = args.into_iter();
        while let Some(flag) = args.next() {
            let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
            let number: u64 = value.parse().map_err(|_| format!("{flag}: {value:?} is not a whole number"))?;
            match flag.as_str() {
                "--steps" => parsed.steps = number,
                "--checkpoint-every" => parsed.checkpoint_every = number,
                "--step-ms" => parsed.step_ms = number,
                "--fail-at-step" => parsed.fail_at_step = Some(number),
                _ => return Err(format!("unknown option {flag}")),
            }
        }
        Ok(parsed)
    }
}

#[derive(serde::Serialize, serde::Deserialize)]
struct TrainerState {
    step: u64,
}

/// Runs the example trainer; returns the process exit code.
///
/// Checkpoints go to `$FAIRWAY_CHECKPOINT_DIR` (else `./checkpoint`): `trainer.json` holds the
/// last saved step, and `.fairway-checkpoint` is touched after each save. It resumes from
/// `trainer.json`, prints `step i/N loss=…` per step, and on SIGTERM (checked between steps and
/// during the step's sleep) prints the preemption notice's deadline if
/// `$FAIRWAY_PREEMPT_NOTICE_FILE` exists, saves the last finished step and exits 143. Exits 0
/// after `done`, 1 at `fail_at_step` or when it cannot save.
pub fn run_example_trainer(args: TrainerArgs) -> i32 {
    let term = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        if let Err(e) = signal_hook::flag::register(sig, Arc::clone(&term)) {
            eprintln!("cannot install the signal handler: {e}");
            return 1;
        }
    }
    let dir = std::env::var_os("FAIRWAY_CHECKPOINT_DIR").map_or_else(|| PathBuf::from("checkpoint"), PathBuf::from);
    if let Err(e) = fs::create_dir_all(&dir) {
        eprintln!("cannot create checkpoint directory {}: {e}", dir.display());
        return 1;
    }
    let restart: u64 = std::env::var("FAIRWAY_RESTART_COUNT").ok().and_then(|v| v.parse().ok()).unwrap_or(0);
    let mut done = match read_json_opt::<TrainerState>(&dir.join(TRAINER_STATE_FILE)) {
        Ok(Some(state)) => {
            println!("resumed from step {} (restart {restart})", state.step);
            state.step
        }
        Ok(None) => {
            println!("starting from step 0 (restart {restart})");
            0
        }
        Err(e) => {
            eprintln!("cannot resume: {e}");
            return 1;
        }
    };
    while done < args.steps {
        let step = done + 1;
        if !sleep_unless(&term, Duration::from_millis(args.step_ms)) {
            return on_sigterm(&dir, done);
        }
        if args.fail_at_step == Some(step) {
            eprintln!("simulated failure at step {step}");
            return 1;
        }
        println!("step {step}/{} loss={:.4}", args.steps, fake_loss(step));
        done = step;
        if args.checkpoint_every > 0 && step % args.checkpoint_every == 0 {
            if let Err(e) = save(&dir, step) {
                eprintln!("checkpoint failed: {e}");
                return 1;
            }
            println!("checkpoint saved at step {step}");
        }
        if term.load(Ordering::Relaxed) {
            return on_sigterm(&dir, done);
        }
    }
    println!("done");
    0
}

/// Sleeps `duration` in slices; false if `term` was set meanwhile.
fn sleep_unless(term: &AtomicBool, duration: Duration) -> bool {
    let end = Instant::now() + duration;
    loop {
        if term.load(Ordering::Relaxed) {
            return false;
        }
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return true;
        }
        std::thread::sleep(left.min(SLEEP_SLICE));
    }
}

fn on_sigterm(dir: &Path, done: u64) -> i32 {
    println!("got SIGTERM after step {done}");
    if let Some(path) = std::env::var_os("FAIRWAY_PREEMPT_NOTICE_FILE") {
        match read_preempt_notice(Path::new(&path)) {
            Ok(Some(notice)) => println!(
                "preempt notice: deadline_unix_ms={} ({} ms from now), cause: {}, reason: {}",
                notice.deadline_unix_ms,
                notice.deadline_unix_ms.saturating_sub(now_unix_ms()),
                notice.cause.as_deref().unwrap_or("unknown"),
                notice.reason
            ),
            Ok(None) => {}
            Err(e) => eprintln!("cannot read the preempt notice: {e}"),
        }
    }
    match save(dir, done) {
        Ok(()) => {
            println!("checkpoint saved at step {done}");
            TRAINER_EXIT_TERMINATED
        }
        Err(e) => {
            eprintln!("checkpoint failed: {e}");
            1
        }
    }
}

fn save(dir: &Path, step: u64) -> Result<(), crate::ExecError> {
    write_json_atomic(&dir.join(TRAINER_STATE_FILE), &TrainerState { step })?;
    write_checkpoint_marker(dir, now_unix_ms())
}

/// A loss curve that falls with the step and wiggles, the same on every run.
fn fake_loss(step: u64) -> f64 {
    let wiggle = ((step * 7919) % 13) as f64 / 13.0;
    2.5 / (1.0 + 0.05 * step as f64) + 0.02 * wiggle
}
