//! `fairway sim`.

use std::io::Write;

use anyhow::Context;
use fairway_sim::engine::{CheckLevel, EngineConfig, simulate};
use fairway_sim::metrics::{RunResult, SimReport};
use fairway_sim::report::{render_table, write_report};
use fairway_sim::scenario::{self, Overrides};
use fairway_sim::sweep::SeedSweep;
use indicatif::{ProgressBar, ProgressStyle};

use crate::{Check, Output, SimArgs, progress_wanted};

pub fn run(args: &SimArgs) -> anyhow::Result<()> {
    if let Some(n) = args.seeds {
        return sweep(args, n);
    }
    let (scenario, runs) = run_scenario(args, args.seed)?;
    let report = SimReport::from_runs(&scenario.name, scenario.seed, &runs);
    let anomalies = if args.sharing_anomaly { sharing_anomalies(args, &scenario, &runs)? } else { Vec::new() };
    let mut stdout = std::io::stdout().lock();
    match args.output {
        Output::Json if args.sharing_anomaly => {
            let mut doc: serde_json::Value = serde_json::from_str(&report.to_json()).context("the report as JSON")?;
            doc["sharing_anomaly"] = anomaly_json(&anomalies);
            writeln!(stdout, "{}", serde_json::to_string_pretty(&doc)?)?;
        }
        Output::Table => {
            writeln!(
                stdout,
                "scenario {} (seed {}): {} jobs on {} GPUs in {} nodes",
                scenario.name,
                scenario.seed,
                scenario.jobs.len(),
                scenario.capacity_gpus(),
                scenario.nodes.len()
            )?;
            write!(stdout, "{}", render_table(&report))?;
        }
        Output::Json => write!(stdout, "{}", report.to_json())?,
    }
    if args.sharing_anomaly && args.output == Output::Table {
        write!(stdout, "{}", anomaly_table(&anomalies))?;
    }
    if let Some(dir) = &args.report {
        let files = write_report(dir, &report, &runs).with_context(|| format!("report in {}", dir.display()))?;
        if args.output == Output::Table {
            writeln!(stdout, "report: {}", files[0].display())?;
        }
    }
    Ok(())
}

/// `--seeds N`: the scenario with seeds `first..first + N`, summarised per figure.
fn sweep(args: &SimArgs, n: u32) -> anyhow::Result<()> {
    let first = match args.seed {
        Some(s) => s,
        None => {
            let overrides = Overrides { max_jobs: Some(0), ..Overrides::default() };
            scenario::load(&args.scenario, &overrides)
                .with_context(|| format!("scenario {}", args.scenario.display()))?
                .seed
        }
    };
    let seeds: Vec<u64> = (0..u64::from(n)).map(|i| first.wrapping_add(i)).collect();
    let mut reports = Vec::with_capacity(seeds.len());
    for &seed in &seeds {
        let (scenario, runs) = run_scenario(args, Some(seed))?;
        reports.push(SimReport::from_runs(&scenario.name, scenario.seed, &runs));
    }
    let sweep = SeedSweep::from_reports(&seeds, &reports);
    let mut stdout = std::io::stdout().lock();
    match args.output {
        Output::Table => write!(stdout, "{}", sweep.to_table())?,
        Output::Json => write!(stdout, "{}", sweep.to_json())?,
    }
    Ok(())
}

/// Loads the scenario with `seed` and runs each of its policies.
fn run_scenario(args: &SimArgs, seed: Option<u64>) -> anyhow::Result<(scenario::Scenario, Vec<RunResult>)> {
    let overrides = Overrides {
        seed,
        nodes: args.nodes,
        time_compression: args.time_compression,
        max_jobs: args.max_jobs,
        policies: args.policy.clone(),
        // A path given on the command line is relative to where the command runs, not to
        // the scenario file.
        trace_path: args.trace.as_ref().map(std::path::absolute).transpose().context("--trace")?,
    };
    let scenario =
        scenario::load(&args.scenario, &overrides).with_context(|| format!("scenario {}", args.scenario.display()))?;
    let show_progress = progress_wanted(args.no_progress);
    let mut runs: Vec<RunResult> = Vec::new();
    for sim_policy in &scenario.policies {
        let name = &sim_policy.name;
        let config = engine_config(args, &scenario, sim_policy);
        let bar = progress_bar(show_progress, name, scenario.jobs.len());
        let mut tick = |done: usize, _total: usize| bar.set_position(done as u64);
        let run = simulate(name, &scenario.jobs, &scenario.nodes, &sim_policy.quotas, &config, &mut tick)
            .with_context(|| format!("policy {name}"))?;
        bar.finish_and_clear();
        runs.push(run);
    }
    Ok((scenario, runs))
}

/// Per policy with cohorts, each member's sharing anomaly (`fairway_sim::anomaly`).
fn sharing_anomalies(
    args: &SimArgs,
    scenario: &scenario::Scenario,
    runs: &[RunResult],
) -> anyhow::Result<Vec<(String, Vec<fairway_sim::anomaly::Anomaly>)>> {
    let mut out = Vec::new();
    for (sim_policy, run) in scenario.policies.iter().zip(runs).filter(|(p, _)| !p.nominals.is_empty()) {
        let config = engine_config(args, scenario, sim_policy);
        let anomalies = fairway_sim::anomaly::sharing_anomaly(scenario, sim_policy, run, &config)
            .with_context(|| format!("policy {}: runs alone", sim_policy.name))?;
        out.push((sim_policy.name.clone(), anomalies));
    }
    Ok(out)
}

fn anomaly_table(all: &[(String, Vec<fairway_sim::anomaly::Anomaly>)]) -> String {
    let mut text = String::from(
        "\nSharing anomaly (mean wait in minutes: shared, alone on a private cluster of its nominal quota;\n\
         over the jobs that start in both, so a tenant's jobs and shared wait may differ from the table above)\n",
    );
    text += &format!(
        "{:<16} {:<16} {:>8} {:>6} {:>10} {:>10} {:>10}\n",
        "policy", "tenant", "nominal", "jobs", "shared", "alone", "anomaly"
    );
    for (policy, anomalies) in all {
        for a in anomalies {
            text += &format!(
                "{policy:<16} {:<16} {:>8} {:>6} {:>10.2} {:>10.2} {:>10.2}\n",
                a.tenant,
                a.nominal_gpus,
                a.jobs,
                a.shared_wait_mean_s / 60.0,
                a.alone_wait_mean_s / 60.0,
                a.anomaly_s() / 60.0
            );
        }
    }
    text
}

fn anomaly_json(all: &[(String, Vec<fairway_sim::anomaly::Anomaly>)]) -> serde_json::Value {
    let round = |v: f64| (v * 1000.0).round() / 1000.0;
    serde_json::Value::Array(
        all.iter()
            .map(|(policy, anomalies)| {
                serde_json::json!({
                    "policy": policy,
                    "tenants": anomalies.iter().map(|a| serde_json::json!({
                        "tenant": a.tenant,
                        "nominal_gpus": a.nominal_gpus,
                        "jobs": a.jobs,
                        "shared_wait_seconds_mean": round(a.shared_wait_mean_s),
                        "alone_wait_seconds_mean": round(a.alone_wait_mean_s),
                        "anomaly_seconds": round(a.anomaly_s()),
                    })).collect::<Vec<_>>(),
                })
            })
            .collect(),
    )
}

fn engine_config(args: &SimArgs, scenario: &scenario::Scenario, sim_policy: &scenario::SimPolicy) -> EngineConfig {
    let mut config = scenario.engine_config(sim_policy, check_level(args));
    if args.eta {
        config.eta_jobs_max = fairway_sim::engine::ETA_JOBS_MAX;
    }
    config
}

fn check_level(args: &SimArgs) -> CheckLevel {
    match args.check {
        _ if args.no_check => CheckLevel::Off,
        Check::Amortised => CheckLevel::Amortised,
        Check::EveryCycle => CheckLevel::EveryCycle,
        Check::Off => CheckLevel::Off,
    }
}

fn progress_bar(show: bool, policy: &str, jobs: usize) -> ProgressBar {
    if !show {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(jobs as u64);
    let style = ProgressStyle::with_template("{prefix:>10} [{bar:40}] {pos}/{len} jobs submitted ({elapsed})")
        .expect("valid template")
        .progress_chars("=> ");
    bar.set_style(style);
    bar.set_prefix(policy.to_string());
    bar
}
