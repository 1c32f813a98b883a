//! `fairway bench sim`: how fast the simulator replays a scenario, measured on this machine.
//!
//! The scenario is loaded once (timed: reading and parsing the trace, building the jobs),
//! then every policy is replayed `--repeat` times with the checks off, exactly as
//! `fairway sim --check off` replays it, and once more with the default checks. Figures
//! per policy:
//!
//! - `events`: what the simulator fed the core: every submission and every reported exit
//!   (finished work, a victim leaving at its deadline, a kill). `cycles`: core cycles run
//!   (one per distinct event time).
//! - `loop_seconds`: the replay itself (the event loop and every core cycle), the median of
//!   the repeats; `events_per_s` divides `events` by it.
//! - `checked_loop_seconds`: one replay with the default checks (`--check amortised`: the
//!   driver's ledger on every decision, the core's whole-state check amortised).
//! - `whole_seconds`: what `fairway sim --policy P` (default checks) costs end to end:
//!   loading, the checked replay and the summary of its metrics.
//!
//! Every repeat must give the same result as the first (the simulator is deterministic);
//! a difference is an error, not a figure.

use std::time::Instant;

use anyhow::{Context, Result, bail};
use fairway_sim::engine::{CheckLevel, EngineConfig, simulate};
use fairway_sim::metrics::SimReport;
use fairway_sim::scenario::{self, Overrides};
use serde::Serialize;

use crate::Output;

/// The targets of issue 2, section 5.
const TARGET_EVENTS_PER_S: f64 = 1_000_000.0;
const TARGET_WHOLE_SECONDS: f64 = 2.0;

#[derive(clap::Args, Clone)]
pub struct SimBenchArgs {
    /// Scenario file (YAML), as for `fairway sim`.
    pub scenario: std::path::PathBuf,
    /// Only these policies (comma-separated names from the scenario).
    #[arg(long, value_delimiter = ',')]
    pub policy: Option<Vec<String>>,
    /// Replays of each policy; the median is reported.
    #[arg(long, default_value_t = 3)]
    pub repeat: u32,
    /// Keep only the first N jobs.
    #[arg(long)]
    pub max_jobs: Option<usize>,
    /// Use this trace file instead of the scenario's.
    #[arg(long)]
    pub trace: Option<std::path::PathBuf>,
    /// Output format on stdout.
    #[arg(long, short = 'o', value_enum, default_value_t = Output::Table)]
    pub output: Output,
}

#[derive(Serialize)]
pub struct SimBenchReport {
    pub schema_version: u32,
    pub scenario: String,
    pub jobs: usize,
    pub gpus: u32,
    pub load_seconds: f64,
    pub policies: Vec<PolicyFigures>,
}

#[derive(Serialize)]
pub struct PolicyFigures {
    pub policy: String,
    pub events: u64,
    pub cycles: u64,
    pub repeats: u32,
    pub loop_seconds: f64,
    pub loop_seconds_min: f64,
    pub events_per_s: f64,
    pub cycles_per_s: f64,
    pub checked_loop_seconds: f64,
    pub summary_seconds: f64,
    pub whole_seconds: f64,
    pub target_events_per_s: f64,
    pub target_whole_seconds: f64,
    /// `RunResult::decisions_digest` as 16 hex digits: equal across builds that decide alike.
    pub decisions_digest: String,
    /// The work the replay asked of the core: pending jobs it looked at, and victim searches.
    pub jobs_considered: u64,
    pub preemption_searches: u64,
    pub preemptions: u64,
}

pub fn run(args: &SimBenchArgs) -> Result<()> {
    if args.repeat == 0 {
        bail!("--repeat must be at least 1");
    }
    if cfg!(debug_assertions) {
        eprintln!("bench: this is a debug build; the figures mean little (cargo build --release)");
    }
    let overrides = Overrides {
        max_jobs: args.max_jobs,
        policies: args.policy.clone(),
        trace_path: args.trace.as_ref().map(std::path::absolute).transpose().context("--trace")?,
        ..Overrides::default()
    };
    let loading = Instant::now();
    let scenario =
        scenario::load(&args.scenario, &overrides).with_context(|| format!("scenario {}", args.scenario.display()))?;
    let load_seconds = loading.elapsed().as_secs_f64();
    let mut policies = Vec::new();
    for sim_policy in &scenario.policies {
        let name = &sim_policy.name;
        let config = scenario.engine_config(sim_policy, CheckLevel::Off);
        let mut seconds = Vec::new();
        let mut first = None;
        for _ in 0..args.repeat {
            let started = Instant::now();
            let run = simulate(name, &scenario.jobs, &scenario.nodes, &sim_policy.quotas, &config, &mut |_, _| {})
                .with_context(|| format!("policy {name}"))?;
            seconds.push(started.elapsed().as_secs_f64());
            match &first {
                None => first = Some(run),
                Some(f) if *f != run => bail!("policy {name}: a repeat gave a different result (nondeterminism)"),
                Some(_) => {}
            }
        }
        let run = first.expect("at least one repeat");
        let checked_config = EngineConfig { check: CheckLevel::Amortised, ..config.clone() };
        let started = Instant::now();
        let checked =
            simulate(name, &scenario.jobs, &scenario.nodes, &sim_policy.quotas, &checked_config, &mut |_, _| {})
                .with_context(|| format!("policy {name}, checked"))?;
        let checked_loop_seconds = started.elapsed().as_secs_f64();
        if checked != run {
            bail!("policy {name}: the checked replay gave a different result");
        }
        let summarising = Instant::now();
        let report = SimReport::from_runs(&scenario.name, scenario.seed, std::slice::from_ref(&run));
        let _ = std::hint::black_box(report.to_json());
        let summary_seconds = summarising.elapsed().as_secs_f64();
        seconds.sort_by(f64::total_cmp);
        let loop_seconds = seconds[seconds.len() / 2];
        policies.push(PolicyFigures {
            policy: name.clone(),
            events: run.events_processed,
            cycles: run.cycles,
            repeats: args.repeat,
            loop_seconds,
            loop_seconds_min: seconds[0],
            events_per_s: run.events_processed as f64 / loop_seconds,
            cycles_per_s: run.cycles as f64 / loop_seconds,
            checked_loop_seconds,
            summary_seconds,
            whole_seconds: load_seconds + checked_loop_seconds + summary_seconds,
            target_events_per_s: TARGET_EVENTS_PER_S,
            target_whole_seconds: TARGET_WHOLE_SECONDS,
            decisions_digest: format!("{:016x}", run.decisions_digest()),
            jobs_considered: run.core_counters.jobs_considered,
            preemption_searches: run.core_counters.preemption_searches,
            preemptions: run.core_counters.preemptions,
        });
    }
    let report = SimBenchReport {
        schema_version: 1,
        scenario: scenario.name.clone(),
        jobs: scenario.jobs.len(),
        gpus: scenario.capacity_gpus(),
        load_seconds,
        policies,
    };
    match args.output {
        Output::Json => println!("{}", serde_json::to_string_pretty(&report)?),
        Output::Table => print_table(&report),
    }
    Ok(())
}

fn print_table(r: &SimBenchReport) {
    println!("scenario {}: {} jobs on {} GPUs; loading took {:.3} s", r.scenario, r.jobs, r.gpus, r.load_seconds);
    println!(
        "{:<10} {:>9} {:>9} {:>9} {:>13} {:>10} {:>9} {:>9}  {:<16}",
        "policy", "events", "cycles", "loop s", "events/s", "checked s", "whole s", "targets", "decisions digest"
    );
    for p in &r.policies {
        let met = |ok: bool| if ok { "✓" } else { "✗" };
        println!(
            "{:<10} {:>9} {:>9} {:>9.3} {:>13.0} {:>10.3} {:>9.3} {:>4} {:>4}  {}",
            p.policy,
            p.events,
            p.cycles,
            p.loop_seconds,
            p.events_per_s,
            p.checked_loop_seconds,
            p.whole_seconds,
            met(p.events_per_s >= p.target_events_per_s),
            met(p.whole_seconds < p.target_whole_seconds),
            p.decisions_digest,
        );
    }
    println!(
        "targets: ≥ {:.0} events/s in the loop; whole run (default checks) < {:.0} s",
        TARGET_EVENTS_PER_S, TARGET_WHOLE_SECONDS
    );
}
