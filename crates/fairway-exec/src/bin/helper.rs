//! Test support for `fairway-exec`: runs the shim and the example trainer as real processes,
//! the way the `fairway` binary's hidden `__shim` and `example-trainer` subcommands do.
//!
//! ```text
//! fairway-exec-helper __shim <run_dir>
//! fairway-exec-helper example-trainer [--steps N] [--checkpoint-every K] [--step-ms M] [--fail-at-step F]
//! ```

use std::path::Path;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let code = match args.first().map(String::as_str) {
        Some(fairway_exec::SHIM_SUBCOMMAND) if args.len() == 2 => fairway_exec::run_shim(Path::new(&args[1])),
        Some("example-trainer") => match fairway_exec::TrainerArgs::parse_args(args[1..].iter().cloned()) {
            Ok(trainer_args) => fairway_exec::run_example_trainer(trainer_args),
            Err(e) => {
                eprintln!("example-trainer: {e}");
                2
            }
        },
        _ => {
            eprintln!("usage: fairway-exec-helper __shim <run_dir> | example-trainer [options]");
            2
        }
    };
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}
