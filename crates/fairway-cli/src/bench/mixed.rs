//! `fairway bench mixed`: a mixed four-tier workload replayed in real time against the
//! standalone server, to measure thrashing (issue 12, section 2).
//!
//! The workload is seeded: `--jobs` jobs (default 200) arrive as a Poisson process; each is
//! `critical`, `high`, `medium` or `low` (10/20/30/40%), asks for 1 to 8 GPUs (uniform) and
//! runs the example trainer for 5 to 60 s (uniform) in 100 ms steps, checkpointing every
//! second and on SIGTERM, so that a preempted job resumes where it saved. The server has
//! `--gpus` simulated GPUs (default 16 nodes of 8) and real processes under real shims.
//!
//! Rule 1 (`--min-run-seconds`, `--preemptions-per-hour-max`) is given to the
//! `--protected-tiers` (default `medium` and `low`) through the server's config, as an
//! operator would, and rule 1's preemption delay (`--preemption-delay-seconds`) to the
//! `--delayed-tiers` (default `high` and `medium`); rule 7 through
//! `limits.preemption_victims_per_cycle_max`. Everything is read back from the API once
//! every job has succeeded: preemptions per job, the age of each run when it was preempted
//! (from the job's `started` and `preempted` events), the wait to the first start and the
//! total time queued per tier.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use fairway_server::api::{JobDetail, JobList, JobState};
use fairway_sim::metrics::{CountStats, nearest_rank};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

use super::{Bench, Percentiles, bench_root};
use crate::Output;

#[derive(clap::Args, Clone)]
pub struct MixedBenchArgs {
    /// Jobs in the workload.
    #[arg(long, default_value_t = 200)]
    pub jobs: usize,
    /// Simulated GPUs: `NODESxGPUS` or `N`.
    #[arg(long, default_value = "16x8")]
    pub gpus: String,
    /// Mean arrivals per second (exponential gaps).
    #[arg(long, default_value_t = 1.5)]
    pub arrivals_per_second: f64,
    /// Seed of the workload.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Rule 1 for the `--protected-tiers`: a run younger than this is not preempted (0: none).
    #[arg(long, default_value_t = 0)]
    pub min_run_seconds: u64,
    /// Rule 1 for the `--protected-tiers`: preemptions of one job in any hour (0: no cap).
    #[arg(long, default_value_t = 0)]
    pub preemptions_per_hour_max: u32,
    /// The tiers rule 1 is given to (`critical` is never preempted: nothing outranks it).
    #[arg(long, value_delimiter = ',', default_value = "medium,low")]
    pub protected_tiers: Vec<String>,
    /// Rule 1 for the `--delayed-tiers`: their jobs wait this long for free GPUs before they
    /// preempt (0: at once).
    #[arg(long, default_value_t = 0)]
    pub preemption_delay_seconds: u64,
    /// The tiers the preemption delay is given to (`low` preempts nobody: nothing is below it).
    #[arg(long, value_delimiter = ',', default_value = "high,medium")]
    pub delayed_tiers: Vec<String>,
    /// Rule 7: victims in one scheduling cycle (default: the server's).
    #[arg(long)]
    pub victims_per_cycle_max: Option<u32>,
    /// Also write the workload as CSV (name, tier, gpus, submit and run seconds), to replay
    /// it on another scheduler.
    #[arg(long, value_name = "FILE")]
    pub workload_csv: Option<PathBuf>,
    /// Keep the server's data here instead of a temporary directory that is removed.
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// Output format on stdout.
    #[arg(long, short = 'o', value_enum, default_value_t = Output::Table)]
    pub output: Output,
}

const TIERS: [(&str, u32); 4] = [("critical", 10), ("high", 20), ("medium", 30), ("low", 40)];
/// Steps of the example trainer, and how often it checkpoints (in steps).
const STEP_MS: u64 = 100;
const CHECKPOINT_EVERY_STEPS: u64 = 10;
/// Longest the whole workload may take once submitted.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(1800);

/// One job of the workload.
#[derive(Clone, Debug, Serialize)]
struct MixedJob {
    name: String,
    tier: &'static str,
    gpus: u32,
    submit_ms: u64,
    run_ms: u64,
}

/// Everything `-o json` prints.
#[derive(Serialize)]
pub struct MixedReport {
    schema_version: u32,
    jobs: usize,
    gpus: String,
    seed: u64,
    min_run_seconds: u64,
    preemptions_per_hour_max: u32,
    protected_tiers: Vec<String>,
    preemption_delay_seconds: u64,
    delayed_tiers: Vec<String>,
    victims_per_cycle_max: Option<u32>,
    /// From the first submission until the last job succeeded.
    makespan_seconds: f64,
    preemptions: u64,
    /// Preemptions per job, over all jobs.
    preemptions_per_job: CountStats,
    /// Preempted runs younger than 5 s and than 1 s when chosen.
    victims_younger_than_5s: u64,
    victims_younger_than_1s: u64,
    /// Per tier, highest first.
    tiers: Vec<TierFigures>,
}

#[derive(Serialize)]
struct TierFigures {
    tier: &'static str,
    jobs: usize,
    preemptions: u64,
    /// Submit → first start, milliseconds.
    first_wait_ms: Percentiles,
    first_wait_ms_mean: f64,
    /// Every pending interval, re-waits after a preemption included, milliseconds.
    queued_ms: Percentiles,
    queued_ms_mean: f64,
}

pub fn run(args: &MixedBenchArgs) -> Result<()> {
    if args.jobs == 0 || args.arrivals_per_second.is_nan() || args.arrivals_per_second <= 0.0 {
        bail!("--jobs and --arrivals-per-second must be above 0");
    }
    let unknown_tier = |t: &&String| !["high", "medium", "low"].contains(&t.as_str());
    if let Some(t) = args.protected_tiers.iter().find(unknown_tier) {
        bail!("--protected-tiers: {t:?} is not high, medium or low");
    }
    if let Some(t) = args.delayed_tiers.iter().find(unknown_tier) {
        bail!("--delayed-tiers: {t:?} is not high, medium or low");
    }
    let workload = workload(args);
    if let Some(path) = &args.workload_csv {
        write_csv(path, &workload)?;
    }
    let (root, temporary) = bench_root(args.data_dir.as_deref(), "fairway-bench-mixed")?;
    let exe = std::env::current_exe().context("finding the fairway executable")?;
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    let _ = rustls::crypto::ring::default_provider().install_default();
    if cfg!(debug_assertions) {
        eprintln!("bench: this is a debug build; the figures mean little (cargo build --release)");
    }
    let result = runtime.block_on(replay(args, &workload, &root, &exe));
    runtime.shutdown_timeout(Duration::from_secs(1));
    if temporary {
        let _ = std::fs::remove_dir_all(&root);
    }
    let report = result?;
    match args.output {
        Output::Json => println!("{}", serde_json::to_string_pretty(&report)?),
        Output::Table => print_table(&report),
    }
    Ok(())
}

/// The seeded workload, in submission order.
fn workload(args: &MixedBenchArgs) -> Vec<MixedJob> {
    let mut rng = ChaCha8Rng::seed_from_u64(args.seed);
    let weight_total: u32 = TIERS.iter().map(|(_, w)| w).sum();
    let mut at_ms = 0.0f64;
    (0..args.jobs)
        .map(|i| {
            let u: f64 = rng.random_range(f64::EPSILON..1.0);
            at_ms += -u.ln() / args.arrivals_per_second * 1000.0;
            let mut pick = rng.random_range(0..weight_total);
            let tier = TIERS
                .iter()
                .find(|(_, w)| {
                    let hit = pick < *w;
                    pick = pick.saturating_sub(*w);
                    hit
                })
                .map_or("low", |(t, _)| t);
            let gpus = rng.random_range(1..=8u32);
            let run_ms = rng.random_range(50..=600u64) * STEP_MS;
            MixedJob { name: format!("{tier}-{i:03}"), tier, gpus, submit_ms: at_ms as u64, run_ms }
        })
        .collect()
}

fn write_csv(path: &std::path::Path, jobs: &[MixedJob]) -> Result<()> {
    let mut text = String::from("name,tier,gpus,submit_seconds,run_seconds\n");
    for j in jobs {
        text += &format!(
            "{},{},{},{:.3},{:.1}\n",
            j.name,
            j.tier,
            j.gpus,
            j.submit_ms as f64 / 1000.0,
            j.run_ms as f64 / 1000.0
        );
    }
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

/// The server's config: rule 1 on the protected and the delayed tiers, rule 7 if asked.
fn config(args: &MixedBenchArgs) -> Result<fairway_server::ConfigFile> {
    let mut classes = String::new();
    let protects = args.min_run_seconds > 0 || args.preemptions_per_hour_max > 0;
    for (name, value) in [("high", 1_000_000), ("medium", 100_000), ("low", 1_000)] {
        let mut fields = String::new();
        if protects && args.protected_tiers.iter().any(|t| t == name) {
            fields += &format!(", min_run_before_preemption_seconds: {}", args.min_run_seconds);
            if args.preemptions_per_hour_max > 0 {
                fields += &format!(", preemptions_per_hour_max: {}", args.preemptions_per_hour_max);
            }
        }
        if args.preemption_delay_seconds > 0 && args.delayed_tiers.iter().any(|t| t == name) {
            fields += &format!(", preemption_delay_seconds: {}", args.preemption_delay_seconds);
        }
        if !fields.is_empty() {
            classes += &format!("  - {{ name: {name}, value: {value}{fields} }}\n");
        }
    }
    let mut yaml = String::new();
    if !classes.is_empty() {
        yaml += "priority_classes:\n";
        yaml += &classes;
    }
    if let Some(n) = args.victims_per_cycle_max {
        yaml += &format!("limits: {{ preemption_victims_per_cycle_max: {n} }}\n");
    }
    fairway_server::ConfigFile::parse(&yaml).map_err(|e| anyhow::anyhow!("bench config: {e}"))
}

fn job_yaml(job: &MixedJob, exe: &std::path::Path) -> String {
    let steps = job.run_ms / STEP_MS;
    format!(
        "---\nname: {}\ntenant: {{ user: bench, project: bench }}\npriority: {}\nresources: {{ gpus: {} }}\n\
         command: [{exe:?}, example-trainer, --steps, \"{steps}\", --checkpoint-every, \"{CHECKPOINT_EVERY_STEPS}\", \
         --step-ms, \"{STEP_MS}\"]\npreemption_grace_seconds: 10\n",
        job.name, job.tier, job.gpus
    )
}

async fn replay(
    args: &MixedBenchArgs,
    workload: &[MixedJob],
    root: &std::path::Path,
    exe: &std::path::Path,
) -> Result<MixedReport> {
    let bench = Bench::start_with(root, &args.gpus, exe, config(args)?).await?;
    let progress = args.output == Output::Table;
    let start = Instant::now();
    let mut ids = Vec::with_capacity(workload.len());
    for job in workload {
        let due = Duration::from_millis(job.submit_ms);
        if let Some(wait) = due.checked_sub(start.elapsed()) {
            tokio::time::sleep(wait).await;
        }
        ids.push(bench.submit(job_yaml(job, exe)).await?[0]);
    }
    if progress {
        eprintln!(
            "bench: {} jobs submitted in {:.0} s; waiting for them to finish",
            ids.len(),
            start.elapsed().as_secs_f64()
        );
    }
    let done = loop {
        let list: JobList = bench
            .http
            .get(format!("{}/v1/jobs?limit=10000", bench.base))
            .send()
            .await?
            .json()
            .await
            .context("listing the jobs")?;
        let finished = list.jobs.iter().filter(|j| j.state == JobState::Succeeded).count();
        if let Some(bad) = list.jobs.iter().find(|j| matches!(j.state, JobState::Failed | JobState::Cancelled)) {
            bail!("job {} ended {}", bad.name, bad.state.as_str());
        }
        if finished == ids.len() {
            break start.elapsed();
        }
        if start.elapsed() > DRAIN_TIMEOUT {
            bail!("only {finished} of {} jobs finished within {} s", ids.len(), DRAIN_TIMEOUT.as_secs());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let mut details = Vec::with_capacity(ids.len());
    for &id in &ids {
        details.push(bench.job(id).await?);
    }
    bench.stop().await;
    Ok(report(args, workload, &details, done))
}

fn report(args: &MixedBenchArgs, workload: &[MixedJob], details: &[JobDetail], makespan: Duration) -> MixedReport {
    let mut per_job: Vec<u32> = details.iter().map(|d| d.job.preemptions).collect();
    let (mut young_5s, mut young_1s) = (0, 0);
    for d in details {
        let mut started_at = None;
        for e in &d.events {
            match e.kind.as_str() {
                "started" => started_at = Some(e.at_ms),
                "preempted" => {
                    let age = started_at.map_or(u64::MAX, |s| e.at_ms.saturating_sub(s));
                    young_5s += u64::from(age < 5_000);
                    young_1s += u64::from(age < 1_000);
                }
                _ => {}
            }
        }
    }
    let mut by_tier: BTreeMap<&str, Vec<&JobDetail>> = BTreeMap::new();
    for (job, d) in workload.iter().zip(details) {
        by_tier.entry(job.tier).or_default().push(d);
    }
    let tiers = TIERS
        .iter()
        .filter_map(|(tier, _)| {
            let jobs = by_tier.get(tier)?;
            let first: Vec<f64> = jobs
                .iter()
                .map(|d| {
                    d.job.first_started_at_ms.unwrap_or(d.job.submitted_at_ms).saturating_sub(d.job.submitted_at_ms)
                        as f64
                })
                .collect();
            let queued: Vec<f64> = jobs.iter().map(|d| d.job.wait_seconds * 1000.0).collect();
            Some(TierFigures {
                tier,
                jobs: jobs.len(),
                preemptions: jobs.iter().map(|d| u64::from(d.job.preemptions)).sum(),
                first_wait_ms_mean: mean(&first),
                first_wait_ms: Percentiles::of(first),
                queued_ms_mean: mean(&queued),
                queued_ms: Percentiles::of(queued),
            })
        })
        .collect();
    per_job.sort_unstable();
    MixedReport {
        schema_version: 1,
        jobs: details.len(),
        gpus: args.gpus.clone(),
        seed: args.seed,
        min_run_seconds: args.min_run_seconds,
        preemptions_per_hour_max: args.preemptions_per_hour_max,
        protected_tiers: args.protected_tiers.clone(),
        preemption_delay_seconds: args.preemption_delay_seconds,
        delayed_tiers: args.delayed_tiers.clone(),
        victims_per_cycle_max: args.victims_per_cycle_max,
        makespan_seconds: makespan.as_secs_f64(),
        preemptions: per_job.iter().map(|&n| u64::from(n)).sum(),
        preemptions_per_job: CountStats {
            p50: nearest_rank(&per_job, 50).unwrap_or(0),
            p99: nearest_rank(&per_job, 99).unwrap_or(0),
            max: per_job.last().copied().unwrap_or(0),
        },
        victims_younger_than_5s: young_5s,
        victims_younger_than_1s: young_1s,
        tiers,
    }
}

fn mean(v: &[f64]) -> f64 {
    if v.is_empty() { 0.0 } else { v.iter().sum::<f64>() / v.len() as f64 }
}

fn print_table(r: &MixedReport) {
    println!(
        "{} jobs on {} GPUs (seed {}), rule 1 on {}: min run {} s, {} preemptions/h; delay {} s on {}; makespan {:.0} s",
        r.jobs,
        r.gpus,
        r.seed,
        r.protected_tiers.join("/"),
        r.min_run_seconds,
        if r.preemptions_per_hour_max == 0 { "no cap".to_owned() } else { r.preemptions_per_hour_max.to_string() },
        r.preemption_delay_seconds,
        r.delayed_tiers.join("/"),
        r.makespan_seconds
    );
    println!(
        "preemptions {} (per job p50 {} p99 {} max {}); victims younger than 5 s: {}, than 1 s: {}",
        r.preemptions,
        r.preemptions_per_job.p50,
        r.preemptions_per_job.p99,
        r.preemptions_per_job.max,
        r.victims_younger_than_5s,
        r.victims_younger_than_1s
    );
    println!(
        "{:<9} {:>5} {:>11} {:>14} {:>14} {:>14} {:>14}",
        "tier", "jobs", "preemptions", "first mean", "first p50", "first max", "queued mean"
    );
    for t in &r.tiers {
        println!(
            "{:<9} {:>5} {:>11} {:>11.1} ms {:>11.1} ms {:>11.1} ms {:>11.1} ms",
            t.tier,
            t.jobs,
            t.preemptions,
            t.first_wait_ms_mean,
            t.first_wait_ms.p50,
            t.first_wait_ms.max,
            t.queued_ms_mean
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(jobs: usize, seed: u64) -> MixedBenchArgs {
        MixedBenchArgs {
            jobs,
            gpus: "16x8".into(),
            arrivals_per_second: 1.5,
            seed,
            min_run_seconds: 0,
            preemptions_per_hour_max: 0,
            protected_tiers: vec!["medium".into(), "low".into()],
            preemption_delay_seconds: 0,
            delayed_tiers: vec!["high".into(), "medium".into()],
            victims_per_cycle_max: None,
            workload_csv: None,
            data_dir: None,
            output: Output::Table,
        }
    }

    #[test]
    fn the_workload_is_seeded_and_within_its_ranges() {
        let a = workload(&args(2_000, 7));
        assert_eq!(
            a.iter().map(|j| (j.submit_ms, j.gpus, j.run_ms)).collect::<Vec<_>>(),
            workload(&args(2_000, 7)).iter().map(|j| (j.submit_ms, j.gpus, j.run_ms)).collect::<Vec<_>>()
        );
        assert_ne!(a[0].run_ms + a[1].run_ms, workload(&args(2, 8)).iter().map(|j| j.run_ms).sum::<u64>());
        assert!(a.iter().all(|j| (1..=8).contains(&j.gpus) && (5_000..=60_000).contains(&j.run_ms)));
        assert!(a.windows(2).all(|w| w[0].submit_ms <= w[1].submit_ms));
        // Poisson at 1.5/s: 2,000 arrivals take about 1,333 s.
        let span_s = a.last().unwrap().submit_ms as f64 / 1000.0;
        assert!((1_200.0..1_470.0).contains(&span_s), "{span_s}");
        // Tiers near their weights (10/20/30/40%).
        for (tier, weight) in TIERS {
            let share = a.iter().filter(|j| j.tier == tier).count() as f64 / a.len() as f64;
            assert!((share - f64::from(weight) / 100.0).abs() < 0.04, "{tier}: {share}");
        }
    }

    #[test]
    fn rule_1_and_rule_7_reach_the_servers_config() {
        let mut a = args(1, 1);
        assert!(config(&a).unwrap().priority_classes.is_empty());
        a.min_run_seconds = 10;
        a.preemptions_per_hour_max = 2;
        a.victims_per_cycle_max = Some(4);
        let file = config(&a).unwrap();
        let low = file.priority_classes.iter().find(|c| c.name == "low").unwrap();
        assert_eq!((low.min_run_before_preemption_seconds, low.preemptions_per_hour_max), (10, Some(2)));
        assert!(!file.priority_classes.iter().any(|c| c.name == "high"), "high is not protected by default");
        a.protected_tiers.push("high".into());
        assert!(config(&a).unwrap().priority_classes.iter().any(|c| c.name == "high"));
        assert_eq!(file.limits.preemption_victims_per_cycle_max, 4);
        // The delay goes to its own tiers, beside any protection.
        a.preemption_delay_seconds = 15;
        let file = config(&a).unwrap();
        let delay =
            |name: &str| file.priority_classes.iter().find(|c| c.name == name).map(|c| c.preemption_delay_seconds);
        assert_eq!((delay("high"), delay("medium"), delay("low")), (Some(15), Some(15), Some(0)));
    }
}
