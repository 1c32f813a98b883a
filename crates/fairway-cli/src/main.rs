//! `fairway`: the command-line entry point. Thin: parsing and printing only; the work is in
//! the library crates.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

mod sim;

#[derive(Parser)]
#[command(name = "fairway", version, about = "Priority- and quota-aware scheduler for shared GPU clusters")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Replay a workload through the scheduler with a virtual clock and compare policies.
    Sim(SimArgs),
}

#[derive(clap::Args)]
pub struct SimArgs {
    /// Scenario file (YAML): cluster, classes, quotas, workload, policies.
    pub scenario: PathBuf,
    /// Only these policies (comma-separated names from the scenario).
    #[arg(long, value_delimiter = ',')]
    pub policy: Option<Vec<String>>,
    /// Seed for the synthetic generator and tier assignment (default: the scenario's).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Shrink the cluster to its first N nodes.
    #[arg(long)]
    pub nodes: Option<u32>,
    /// Compress time: divide submit times by this factor (2 doubles the arrival rate).
    #[arg(long)]
    pub time_compression: Option<f64>,
    /// Keep only the first N jobs.
    #[arg(long)]
    pub max_jobs: Option<usize>,
    /// Use this trace file instead of the scenario's.
    #[arg(long)]
    pub trace: Option<PathBuf>,
    /// Output format on stdout.
    #[arg(long, short = 'o', value_enum, default_value_t = Output::Table)]
    pub output: Output,
    /// Also write a report (markdown + SVG plots) into this folder.
    #[arg(long)]
    pub report: Option<PathBuf>,
    /// Skip the invariant check after every cycle (faster; the check is on by default).
    #[arg(long)]
    pub no_check: bool,
    /// No progress bar.
    #[arg(long)]
    pub no_progress: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Output {
    Table,
    Json,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Sim(args) => sim::run(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            let mut stderr = std::io::stderr().lock();
            let _ = writeln!(stderr, "error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

/// Show a progress bar only to a person watching.
pub fn progress_wanted(disabled: bool) -> bool {
    !disabled && std::io::stderr().is_terminal()
}
