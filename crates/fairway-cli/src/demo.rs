//! `fairway demo`: the article's story on this machine, with real processes.
//!
//! A server starts in-process on a fresh data directory with 8 simulated GPUs. Four
//! low-priority trainings fill them; a high-priority job arrives; two trainings get the
//! notice and SIGTERM, save a checkpoint and yield; the high job starts at once on their
//! GPUs; when it is done the two resume from their checkpoints. Everything goes through the
//! HTTP API, as a user's client would. The data directory is left for inspection.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use fairway_server::ServerConfig;
use fairway_server::api::{JobDetail, JobList, JobState, SubmitResponse};

#[derive(clap::Args)]
pub struct DemoArgs {
    /// Milliseconds per training step (the demo takes about 100 steps of the slowest job).
    #[arg(long, default_value_t = 200)]
    pub step_ms: u64,
    /// Where to keep the server's data (default: a new temporary directory).
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<std::path::PathBuf>,
}

/// The whole demo must end well within two minutes; past this something is wrong.
const DEMO_TIMEOUT: Duration = Duration::from_secs(110);

pub fn run(args: &DemoArgs) -> Result<()> {
    let data_dir = match &args.data_dir {
        Some(dir) => dir.clone(),
        None => tempfile_dir()?,
    };
    let mut config = ServerConfig::new(data_dir.clone());
    config.listen = "127.0.0.1:0".parse().expect("valid");
    config.simulated_gpus = Some("8".into());
    config.gpu_model = "A100".into();
    config.tick_ms = 200;
    // A throwaway server: no record for CLIs to find it by.
    config.registry_dir = None;
    let exe = std::env::current_exe().context("finding the fairway executable")?;
    config.shim_exe = exe.clone();
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    runtime.block_on(async move {
        let server = fairway_server::start(config).await?;
        let base = format!("http://{}", server.addr);
        let data_dir = server.data_dir.clone();
        println!("Fairway demo: a server on {base} with 8 simulated A100 GPUs (data in {})", data_dir.display());
        println!(
            "(the jobs are real processes: `fairway example-trainer`, checkpointing into FAIRWAY_CHECKPOINT_DIR)\n"
        );
        let token = std::fs::read_to_string(data_dir.join(fairway_server::datadir::ADMIN_TOKEN_FILE))
            .context("reading the demo server's admin token")?;
        let result = story(&base, token.trim(), &exe.display().to_string(), args.step_ms).await;
        server.shutdown().await;
        result?;
        println!("\nThe data directory is kept: {}", data_dir.display());
        println!("Look at it again with a server on it (the CLI finds that server's admin token by itself):");
        println!("  {}", inspect_hint(&data_dir).join("\n  "));
        Ok(())
    })
}

/// The closing hint: the commands, as a user would type them, to look at the demo's jobs.
pub fn inspect_hint(data_dir: &std::path::Path) -> [String; 3] {
    [
        format!("fairway serve --data-dir {} --gpus 8 --gpu-model A100 --listen 127.0.0.1:7799 &", data_dir.display()),
        "fairway --server http://127.0.0.1:7799 ls -A".to_owned(),
        "kill %1".to_owned(),
    ]
}

fn tempfile_dir() -> Result<std::path::PathBuf> {
    let stamp = fairway_server::clock::wall_ms();
    let dir = std::env::temp_dir().join(format!("fairway-demo-{stamp}"));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

fn job_yaml(name: &str, project: &str, priority: &str, gpus: u32, steps: u64, step_ms: u64, exe: &str) -> String {
    format!(
        "---\nname: {name}\ntenant: {{ user: {project}-bot, project: {project} }}\npriority: {priority}\n\
         resources: {{ gpus: {gpus}, gpu_model: A100 }}\n\
         command: [{exe:?}, example-trainer, --steps, \"{steps}\", --checkpoint-every, \"5\", --step-ms, \"{step_ms}\"]\n\
         preemption_grace_seconds: 10\ncheckpoint_interval_seconds: 1\n"
    )
}

async fn story(base: &str, token: &str, exe: &str, step_ms: u64) -> Result<()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    // As the admin, with YAML bodies: what the CLI sends.
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(reqwest::header::AUTHORIZATION, format!("Bearer {token}").parse()?);
    headers.insert(reqwest::header::CONTENT_TYPE, reqwest::header::HeaderValue::from_static("application/yaml"));
    let http = reqwest::Client::builder().default_headers(headers).build()?;
    let started = Instant::now();
    let low: String =
        (1..=4).map(|i| job_yaml(&format!("nightly-retrain-{i}"), "vision", "low", 2, 60, step_ms, exe)).collect();
    let low_ids = submit(&http, base, &low).await?;
    println!("[{:>5.1}s] submitted 4 low-priority trainings of 2 GPUs each (vision)", secs(started));
    wait_until(&http, base, started, |jobs| jobs.iter().filter(|j| j.state == JobState::Running).count() == 4).await?;
    println!("[{:>5.1}s] all 8 GPUs busy", secs(started));
    tokio::time::sleep(Duration::from_millis(step_ms * 12)).await;

    let high = job_yaml("ctr-model", "ads", "high", 4, 25, step_ms, exe);
    let high_id = submit(&http, base, &high).await?[0];
    println!("[{:>5.1}s] submitted the urgent ctr-model: high priority, 4 GPUs (ads)", secs(started));
    wait_until(&http, base, started, |jobs| jobs.iter().any(|j| j.id == high_id && j.state != JobState::Pending))
        .await?;
    println!("[{:>5.1}s] ctr-model is running", secs(started));
    let all: Vec<i64> = low_ids.iter().copied().chain([high_id]).collect();
    wait_until(&http, base, started, |jobs| jobs.iter().all(|j| !all.contains(&j.id))).await?;
    println!("[{:>5.1}s] every job finished\n", secs(started));

    let mut details = Vec::new();
    for id in &all {
        details.push(get::<JobDetail>(&http, &format!("{base}/v1/jobs/{id}")).await?);
    }
    print_timeline(&details);
    print_summary(&details);
    print_resumes(&http, base, &details).await?;
    let high = details.iter().find(|d| d.job.id == high_id).expect("fetched");
    if high.job.state != JobState::Succeeded || details.iter().any(|d| d.job.state != JobState::Succeeded) {
        bail!("not every job succeeded; see the timeline above");
    }
    Ok(())
}

fn secs(since: Instant) -> f64 {
    since.elapsed().as_secs_f64()
}

async fn submit(http: &reqwest::Client, base: &str, body: &str) -> Result<Vec<i64>> {
    let response = http.post(format!("{base}/v1/jobs")).body(body.to_owned()).send().await?;
    if !response.status().is_success() {
        bail!("submission refused: {}", response.text().await.unwrap_or_default());
    }
    let answer: SubmitResponse = response.json().await?;
    Ok(answer.jobs.iter().map(|j| j.id).collect())
}

async fn get<T: serde::de::DeserializeOwned>(http: &reqwest::Client, url: &str) -> Result<T> {
    let response = http.get(url).send().await?;
    if !response.status().is_success() {
        bail!("GET {url}: {}", response.text().await.unwrap_or_default());
    }
    Ok(response.json().await?)
}

/// Polls the unfinished jobs until `done` holds for them.
async fn wait_until(
    http: &reqwest::Client,
    base: &str,
    started: Instant,
    done: impl Fn(&[fairway_server::api::JobView]) -> bool,
) -> Result<()> {
    let url = format!("{base}/v1/jobs?state=pending,running,preempting,stopping");
    loop {
        let list: JobList = get(http, &url).await?;
        if done(&list.jobs) {
            return Ok(());
        }
        if started.elapsed() > DEMO_TIMEOUT {
            bail!("the demo did not finish within {}s", DEMO_TIMEOUT.as_secs());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn print_timeline(details: &[JobDetail]) {
    let t0 = details.iter().map(|d| d.job.submitted_at_ms).min().unwrap_or(0);
    let mut lines: Vec<(u64, i64, String)> = Vec::new();
    for d in details {
        for e in &d.events {
            lines.push((e.at_ms, d.job.id, format!("{:<18} {:<10} {}", d.job.name, e.kind, e.message)));
        }
    }
    lines.sort();
    println!("What happened (from each job's event log):");
    for (at, _, text) in lines {
        println!("  {:>6.1}s  {text}", (at - t0) as f64 / 1000.0);
    }
    println!();
}

fn print_summary(details: &[JobDetail]) {
    println!(
        "{:<18} {:<9} {:>5} {:>9} {:>11} {:>8}  state",
        "job", "priority", "GPUs", "wait (s)", "preempted", "restarts"
    );
    for d in details {
        let j = &d.job;
        println!(
            "{:<18} {:<9} {:>5} {:>9.2} {:>11} {:>8}  {}",
            j.name,
            j.priority_class.as_deref().unwrap_or("-"),
            j.gpus_per_replica * j.replicas,
            j.wait_seconds,
            j.preemptions,
            j.restart_count,
            j.state.as_str()
        );
    }
    let mut by_class: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    for d in details {
        by_class.entry(d.job.priority_class.as_deref().unwrap_or("-")).or_default().push(d.job.wait_seconds);
    }
    for (class, waits) in by_class {
        println!("mean wait of {class} jobs: {:.2}s", waits.iter().sum::<f64>() / waits.len() as f64);
    }
    println!();
}

/// Shows that the preempted trainings resumed from their checkpoints.
async fn print_resumes(http: &reqwest::Client, base: &str, details: &[JobDetail]) -> Result<()> {
    for d in details.iter().filter(|d| d.job.preemptions > 0) {
        let url = format!("{base}/v1/jobs/{}/logs", d.job.id);
        let log = http.get(&url).send().await?.text().await?;
        let mut after_term = false;
        for line in log.lines() {
            let keep = line.contains("SIGTERM")
                || line.contains("preempt notice")
                || line.starts_with("resumed")
                || (after_term && line.starts_with("checkpoint saved"));
            if keep {
                println!("  {}: {line}", d.job.name);
            }
            after_term = line.contains("SIGTERM") || (after_term && !line.starts_with("checkpoint saved"));
        }
    }
    Ok(())
}
