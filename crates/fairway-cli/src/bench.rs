//! `fairway bench server`: the standalone server's figures, measured on this machine
//! (`fairway bench sim`, the simulator's, is in `bench/sim.rs`).
//!
//! Each measurement starts a fresh server in this process, as `fairway demo` does (a
//! temporary data directory, simulated GPUs, jobs as real processes under real shims), and
//! talks to it over HTTP on loopback like any client:
//!
//! - `submit_throughput`: concurrent clients POST single-job submissions to a server whose
//!   GPUs are all held by a placeholder job, so every submission queues and no process
//!   starts. A 201 means the job is committed to SQLite (`synchronous=FULL`).
//! - `submit_throughput_multi`: the same with ten jobs per submission (jobs/s).
//! - `start_latency`: on an idle server, one job at a time: from just before the POST to the
//!   job's own first clock reading (`date +%s%N`, run without a shell).
//! - `preempt_signal_latency`: low-priority victims hold every GPU; a high-priority job
//!   arrives: from just before its POST to the moment a victim's shell trap runs on SIGTERM
//!   (`date +%s%N` in the trap).
//! - `preemptor_start_latency`: the same rounds, from just before the POST to the
//!   high-priority job's own first clock reading: the victim's trap and exit, the shim's exit
//!   record, the engine's next cycle and the launch (Slurm's "submit → preempting job runs").
//! - `short_job_throughput`: short jobs (`true`) submitted at once to an idle server, from
//!   the first POST until the last one finished: starts and ends per second with every GPU
//!   cycling.
//! - `probe_exec`: what the probe itself costs (spawning `date +%s%N` here until its clock
//!   reading), included in both latencies above.
//!
//! The jobs run on this machine, so their wall-clock timestamps compare directly with ours.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use fairway_server::ServerConfig;
use fairway_server::api::{JobDetail, JobState, SubmitResponse};
use serde::Serialize;

use crate::Output;

#[cfg(feature = "kube")]
mod kube;
mod mixed;
mod sim;
mod soak;

#[derive(clap::Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub command: BenchCommand,
}

#[derive(clap::Subcommand)]
pub enum BenchCommand {
    /// The standalone server: durable submissions/s, submit → start, and submit → victim
    /// signalled (each on a fresh in-process server with simulated GPUs; release build
    /// expected).
    Server(ServerBenchArgs),
    /// The simulator: events per second through the core, and a whole trace end to end
    /// (load, replay, summary) for each policy of a scenario (release build expected).
    Sim(sim::SimBenchArgs),
    /// A mixed 4-tier workload replayed in real time against the standalone server (by
    /// default 200 jobs of 1-8 GPUs and 5-60 s on 16x8 simulated GPUs, Poisson arrivals):
    /// preemptions (per job, of young runs), waits per tier; with and without rule 1.
    Mixed(mixed::MixedBenchArgs),
    /// Rounds of concurrent submissions, cancels and quota changes ended by `kill -9` of the
    /// server, checked from outside after each: nothing acknowledged lost, no job running
    /// twice, no GPU double-booked, pending order kept. Exits 1 if anything was found.
    Soak(soak::SoakArgs),
    /// The Kubernetes controller (`fairway kube`, a child process) against the in-tree fake
    /// API server: admissions per second end to end, high Job -> victims suspended, and the
    /// controller's memory (release build expected).
    #[cfg(feature = "kube")]
    Kube(kube::KubeBenchArgs),
}

#[derive(clap::Args, Clone)]
pub struct ServerBenchArgs {
    /// Simulated GPUs of each server (one node).
    #[arg(long, default_value_t = 4)]
    pub gpus: u32,
    /// Concurrent clients submitting.
    #[arg(long, default_value_t = 16)]
    pub clients: usize,
    /// Single-job submissions in the throughput measurement, all clients together.
    #[arg(long, default_value_t = 20_000)]
    pub submissions: usize,
    /// Jobs per submission in the multi-document throughput measurement (0: skip it). The
    /// number of jobs submitted is the same as with single-job submissions.
    #[arg(long, default_value_t = 10)]
    pub jobs_per_submission: usize,
    /// Jobs started one after another in the start-latency measurement.
    #[arg(long, default_value_t = 50)]
    pub starts: usize,
    /// Preemptions in the preemption-latency measurement.
    #[arg(long, default_value_t = 30)]
    pub rounds: usize,
    /// Short jobs in the short-job throughput measurement (0: skip it).
    #[arg(long, default_value_t = 400)]
    pub short_jobs: usize,
    /// Keep the servers' data here instead of a temporary directory that is removed.
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// Output format on stdout.
    #[arg(long, short = 'o', value_enum, default_value_t = Output::Table)]
    pub output: Output,
}

/// Longest wait for anything one step of a measurement expects (a job to start, finish, …).
const STEP_TIMEOUT: Duration = Duration::from_secs(60);
/// How often files and job states are polled. The figures come from timestamps the jobs
/// take themselves, so polling adds nothing to them.
const POLL: Duration = Duration::from_millis(1);

/// The targets of issue 3, section 6.
const TARGET_SUBMISSIONS_PER_S: f64 = 2_000.0;
const TARGET_START_P50_MS: f64 = 50.0;
const TARGET_PREEMPT_P50_MS: f64 = 100.0;

/// Everything `-o json` prints.
#[derive(Serialize)]
pub struct Report {
    pub schema_version: u32,
    pub gpus: u32,
    pub cpus: usize,
    pub submit_throughput: Throughput,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub submit_throughput_multi: Option<Throughput>,
    pub start_latency: Latency,
    pub preempt_signal_latency: Latency,
    pub preemptor_start_latency: Latency,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub short_job_throughput: Option<ShortJobs>,
    pub probe_exec: Latency,
}

#[derive(Serialize)]
pub struct ShortJobs {
    pub jobs: usize,
    pub gpus: u32,
    pub seconds: f64,
    /// Jobs started and finished per second.
    pub jobs_per_s: f64,
}

#[derive(Serialize)]
pub struct Throughput {
    pub clients: usize,
    pub requests: usize,
    pub jobs_per_request: usize,
    pub seconds: f64,
    pub requests_per_s: f64,
    pub jobs_per_s: f64,
    /// Request latency seen by the clients.
    pub latency_ms: Percentiles,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_jobs_per_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub met: Option<bool>,
}

#[derive(Serialize)]
pub struct Latency {
    pub samples: usize,
    pub ms: Percentiles,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_p50_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub met: Option<bool>,
}

#[derive(Serialize, Clone, Copy, Default)]
pub struct Percentiles {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
}

impl Percentiles {
    fn of(mut ms: Vec<f64>) -> Percentiles {
        if ms.is_empty() {
            return Percentiles::default();
        }
        ms.sort_by(f64::total_cmp);
        let at = |p: f64| ms[((p * ms.len() as f64).ceil() as usize).clamp(1, ms.len()) - 1];
        Percentiles { p50: at(0.5), p90: at(0.9), p99: at(0.99), max: ms[ms.len() - 1] }
    }
}

pub fn run(args: &BenchArgs) -> Result<()> {
    match &args.command {
        BenchCommand::Server(a) => server(a),
        BenchCommand::Sim(a) => sim::run(a),
        BenchCommand::Soak(a) => soak::run(a),
        BenchCommand::Mixed(a) => mixed::run(a),
        #[cfg(feature = "kube")]
        BenchCommand::Kube(a) => kube::run(a),
    }
}

fn server(args: &ServerBenchArgs) -> Result<()> {
    if args.gpus == 0 || args.clients == 0 || args.submissions == 0 || args.starts == 0 || args.rounds == 0 {
        bail!("--gpus, --clients, --submissions, --starts and --rounds must be at least 1");
    }
    let (root, temporary) = bench_root(args.data_dir.as_deref(), "fairway-bench")?;
    let exe = std::env::current_exe().context("finding the fairway executable")?;
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    let _ = rustls::crypto::ring::default_provider().install_default();
    let progress = args.output == Output::Table;
    if cfg!(debug_assertions) {
        eprintln!("bench: this is a debug build; the figures mean little (cargo build --release)");
    }
    let result = runtime.block_on(async {
        let note = |what: &str| {
            if progress {
                eprintln!("bench: {what}");
            }
        };
        note(&format!("submit_throughput ({} submissions, {} clients)", args.submissions, args.clients));
        let (single, multi) = throughput(args, &root.join("throughput"), &exe).await?;
        note(&format!("start_latency ({} jobs)", args.starts));
        let start = start_latency(args, &root.join("start"), &exe).await?;
        note(&format!("preempt_signal_latency ({} rounds)", args.rounds));
        let (preempt, preemptor) = preempt_latency(args, &root.join("preempt"), &exe).await?;
        let short = if args.short_jobs > 0 {
            note(&format!("short_job_throughput ({} jobs)", args.short_jobs));
            Some(short_jobs(args, &root.join("short"), &exe).await?)
        } else {
            None
        };
        let probe = probe_exec(args.starts.max(args.rounds))?;
        Ok::<_, anyhow::Error>(Report {
            schema_version: 1,
            gpus: args.gpus,
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            submit_throughput: single,
            submit_throughput_multi: multi,
            start_latency: start,
            preempt_signal_latency: preempt,
            preemptor_start_latency: preemptor,
            short_job_throughput: short,
            probe_exec: probe,
        })
    });
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

/// Where a bench keeps its servers' data: `--data-dir` if given (it must be new or empty: a
/// store left by an earlier run would be recovered, its jobs re-run), else a new temporary
/// directory named after `prefix`, to be removed (`true`). Created either way.
fn bench_root(data_dir: Option<&Path>, prefix: &str) -> Result<(PathBuf, bool)> {
    let (root, temporary) = match data_dir {
        Some(dir) => {
            if std::fs::read_dir(dir).is_ok_and(|mut d| d.next().is_some()) {
                bail!("--data-dir {} is not empty; give a new or empty directory", dir.display());
            }
            (dir.to_path_buf(), false)
        }
        None => (std::env::temp_dir().join(format!("{prefix}-{}", fairway_server::clock::wall_ms())), true),
    };
    std::fs::create_dir_all(&root).with_context(|| format!("creating {}", root.display()))?;
    Ok((root, temporary))
}

// ---- one server per measurement ----------------------------------------------------------

struct Bench {
    server: Option<fairway_server::RunningServer>,
    base: String,
    data_dir: PathBuf,
    http: reqwest::Client,
}

impl Bench {
    async fn start(data_dir: &Path, gpus: u32, exe: &Path) -> Result<Bench> {
        Bench::start_with(data_dir, &gpus.to_string(), exe, fairway_server::ConfigFile::default()).await
    }

    /// A server with `gpus` as `--gpus` takes it (`N` or `NODESxGPUS`) and this config file.
    async fn start_with(data_dir: &Path, gpus: &str, exe: &Path, file: fairway_server::ConfigFile) -> Result<Bench> {
        std::fs::create_dir_all(data_dir).with_context(|| format!("creating {}", data_dir.display()))?;
        let mut config = ServerConfig::new(data_dir.to_path_buf());
        config.listen = "127.0.0.1:0".parse().expect("valid");
        config.simulated_gpus = Some(gpus.to_owned());
        config.gpu_model = "A100".into();
        config.shim_exe = exe.to_path_buf();
        config.file = file;
        config.file.container_runtime = Some("none".into());
        config.registry_dir = None;
        let server = fairway_server::start(config).await?;
        let base = format!("http://{}", server.addr);
        let token = std::fs::read_to_string(server.data_dir.join(fairway_server::datadir::ADMIN_TOKEN_FILE))
            .context("reading the admin token")?;
        // Every request as the admin, every body as YAML: what the CLI sends.
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert(reqwest::header::AUTHORIZATION, format!("Bearer {}", token.trim()).parse()?);
        headers.insert(reqwest::header::CONTENT_TYPE, reqwest::header::HeaderValue::from_static("application/yaml"));
        let http = reqwest::Client::builder().pool_max_idle_per_host(64).default_headers(headers).build()?;
        Ok(Bench { server: Some(server), base, data_dir: data_dir.to_path_buf(), http })
    }

    async fn submit(&self, body: String) -> Result<Vec<i64>> {
        submit(&self.http, &self.base, body).await
    }

    async fn job(&self, id: i64) -> Result<JobDetail> {
        let response = self.http.get(format!("{}/v1/jobs/{id}", self.base)).send().await?;
        if !response.status().is_success() {
            bail!("GET job {id}: {}", response.text().await.unwrap_or_default());
        }
        Ok(response.json().await?)
    }

    async fn wait_state(&self, id: i64, done: impl Fn(JobState) -> bool, what: &str) -> Result<()> {
        let start = Instant::now();
        loop {
            if done(self.job(id).await?.job.state) {
                return Ok(());
            }
            if start.elapsed() > STEP_TIMEOUT {
                bail!("job {id} did not {what} within {}s", STEP_TIMEOUT.as_secs());
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    fn checkpoint_dir(&self, id: i64) -> PathBuf {
        fairway_server::engine::job_dir(&self.data_dir, id).join("checkpoint")
    }

    /// Stops the server, then kills what its jobs left running (the server leaves running
    /// jobs for the next start to re-adopt; a benchmark has no next start).
    async fn stop(mut self) {
        if let Some(server) = self.server.take() {
            server.shutdown().await;
        }
        // The executor may still be launching a run the engine decided just before it
        // stopped: look twice.
        kill_shims_under(&self.data_dir);
        tokio::time::sleep(Duration::from_millis(200)).await;
        kill_shims_under(&self.data_dir);
    }
}

async fn submit(http: &reqwest::Client, base: &str, body: String) -> Result<Vec<i64>> {
    let response = http.post(format!("{base}/v1/jobs")).body(body).send().await?;
    if response.status() != reqwest::StatusCode::CREATED {
        bail!("submission refused ({}): {}", response.status(), response.text().await.unwrap_or_default());
    }
    let answer: SubmitResponse = response.json().await?;
    Ok(answer.jobs.iter().map(|j| j.id).collect())
}

/// Kills every shim (and so its job's process group) started for `data_dir`. Only through
/// `signal_group`, which refuses pgid 0 and 1.
fn kill_shims_under(data_dir: &Path) {
    let Ok(entries) = std::fs::read_dir("/proc") else { return };
    let needle = data_dir.join("jobs").display().to_string();
    for entry in entries.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else { continue };
        let cmdline = String::from_utf8_lossy(&cmdline);
        if cmdline.contains(fairway_exec::SHIM_SUBCOMMAND) && cmdline.contains(&needle) {
            // A shim leads its job's process group.
            let _ = fairway_exec::signal_group(pid, fairway_exec::Signal::Kill);
        }
    }
}

fn job_yaml(name: &str, priority: &str, gpus: u32, command: &str, shell: bool) -> String {
    format!(
        "---\nname: {name}\ntenant: {{ user: bench, project: bench }}\npriority: {priority}\n\
         resources: {{ gpus: {gpus} }}\nshell: {shell}\ncommand: {command}\npreemption_grace_seconds: 30\n"
    )
}

fn unix_ns() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos())
}

/// Reads a `date +%s%N` line: `None` until it is complete.
fn read_stamp(path: &Path) -> Option<u128> {
    let text = std::fs::read_to_string(path).ok()?;
    let line = text.strip_suffix('\n')?;
    line.trim().parse().ok()
}

async fn wait_stamp(path: &Path, what: &str) -> Result<u128> {
    let start = Instant::now();
    loop {
        if let Some(ns) = read_stamp(path) {
            return Ok(ns);
        }
        if start.elapsed() > STEP_TIMEOUT {
            bail!("{what}: {} did not appear within {}s", path.display(), STEP_TIMEOUT.as_secs());
        }
        tokio::time::sleep(POLL).await;
    }
}

fn ms_between(from_ns: u128, to_ns: u128) -> f64 {
    to_ns.saturating_sub(from_ns) as f64 / 1e6
}

// ---- submit_throughput -------------------------------------------------------------------

async fn throughput(args: &ServerBenchArgs, dir: &Path, exe: &Path) -> Result<(Throughput, Option<Throughput>)> {
    let bench = Bench::start(dir, args.gpus, exe).await?;
    let result = async {
        // A critical placeholder holds every GPU: submissions queue behind it and, being
        // lower priority, cannot preempt it.
        let holder = bench.submit(job_yaml("holder", "critical", args.gpus, "[sleep, \"100000\"]", false)).await?[0];
        bench.wait_state(holder, |s| s == JobState::Running, "start").await?;
        let single = submit_load(&bench, args.clients, args.submissions, 1).await?;
        let multi = if args.jobs_per_submission > 1 {
            let requests = args.submissions.div_ceil(args.jobs_per_submission);
            Some(submit_load(&bench, args.clients, requests, args.jobs_per_submission).await?)
        } else {
            None
        };
        let running = bench.job(holder).await?.job.state;
        if running != JobState::Running {
            bail!("the placeholder job is {} instead of running: the measurement is void", running.as_str());
        }
        Ok((single, multi))
    }
    .await;
    bench.stop().await;
    result
}

async fn submit_load(bench: &Bench, clients: usize, requests: usize, jobs_per_request: usize) -> Result<Throughput> {
    let bodies: Vec<String> = (0..requests)
        .map(|i| {
            (0..jobs_per_request)
                .map(|j| job_yaml(&format!("queued-{i}-{j}"), "low", 1, "[\"true\"]", false))
                .collect::<String>()
        })
        .collect();
    let bodies = Arc::new(bodies);
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let (http, base, bodies, next) = (bench.http.clone(), bench.base.clone(), bodies.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(body) = bodies.get(i) else { break };
                let t0 = Instant::now();
                let ids = submit(&http, &base, body.clone()).await?;
                latencies.push(t0.elapsed().as_secs_f64() * 1e3);
                if ids.len() != jobs_per_request {
                    bail!("{} jobs acknowledged for a submission of {jobs_per_request}", ids.len());
                }
            }
            Ok::<_, anyhow::Error>(latencies)
        }));
    }
    let mut latencies = Vec::with_capacity(requests);
    for task in tasks {
        latencies.extend(task.await??);
    }
    let seconds = started.elapsed().as_secs_f64();
    let jobs_per_s = (requests * jobs_per_request) as f64 / seconds;
    let target = (jobs_per_request == 1).then_some(TARGET_SUBMISSIONS_PER_S);
    Ok(Throughput {
        clients,
        requests,
        jobs_per_request,
        seconds,
        requests_per_s: requests as f64 / seconds,
        jobs_per_s,
        latency_ms: Percentiles::of(latencies),
        target_jobs_per_s: target,
        met: target.map(|t| jobs_per_s >= t),
    })
}

// ---- start_latency -----------------------------------------------------------------------

async fn start_latency(args: &ServerBenchArgs, dir: &Path, exe: &Path) -> Result<Latency> {
    let bench = Bench::start(dir, args.gpus, exe).await?;
    let result = async {
        let mut samples = Vec::with_capacity(args.starts);
        for i in 0..args.starts {
            // No shell: the job is `date` itself, printing its first clock reading into the
            // job's log (through the shim's pipe).
            let body = job_yaml(&format!("start-{i}"), "medium", 1, "[date, \"+%s%N\"]", false);
            let t0 = unix_ns();
            let id = bench.submit(body).await?[0];
            let log = fairway_server::engine::log_path(&bench.data_dir, id, 0);
            let stamp = wait_stamp(&log, "start_latency").await?;
            samples.push(ms_between(t0, stamp));
            bench.wait_state(id, JobState::is_finished, "finish").await?;
        }
        Ok(latency(samples, TARGET_START_P50_MS))
    }
    .await;
    bench.stop().await;
    result
}

// ---- preempt_signal_latency --------------------------------------------------------------

/// A victim: notes each run's readiness and the moment its trap runs. Ready means the trap is
/// installed *and* `sleep` has been exec'd (its `comm` reads `sleep`) in the job's process
/// group: a SIGTERM before that would be caught by the forked shell's inherited handler and
/// lost, and the `sleep` would hold the job's output pipe open after the shell exits (the shim
/// then waits its 2 s drain limit) and outlive the run.
const VICTIM: &str = concat!(
    r#"trap 'date +%s%N > "$FAIRWAY_CHECKPOINT_DIR/term-$FAIRWAY_RESTART_COUNT"; exit 143' TERM; "#,
    r#"sleep 100000 & pid=$!; until read c < /proc/$pid/comm && [ "$c" = sleep ]; do :; done; "#,
    r#": > "$FAIRWAY_CHECKPOINT_DIR/ready-$FAIRWAY_RESTART_COUNT"; wait $pid"#
);

async fn preempt_latency(args: &ServerBenchArgs, dir: &Path, exe: &Path) -> Result<(Latency, Latency)> {
    let bench = Bench::start(dir, args.gpus, exe).await?;
    let result = async {
        let command = serde_json::to_string(&[VICTIM])?;
        let victims = bench
            .submit((0..args.gpus).map(|i| job_yaml(&format!("victim-{i}"), "low", 1, &command, true)).collect())
            .await?;
        // The run of each victim the next preemption will meet.
        let mut runs = vec![0u32; victims.len()];
        let mut samples = Vec::with_capacity(args.rounds);
        let mut preemptor_samples = Vec::with_capacity(args.rounds);
        for round in 0..args.rounds {
            // Every victim's current run is up, its trap installed.
            for (id, run) in victims.iter().zip(&runs) {
                let ready = bench.checkpoint_dir(*id).join(format!("ready-{run}"));
                let start = Instant::now();
                while !ready.exists() {
                    if start.elapsed() > STEP_TIMEOUT {
                        bail!("victim {id} run {run} did not start within {}s", STEP_TIMEOUT.as_secs());
                    }
                    tokio::time::sleep(POLL).await;
                }
            }
            let body = job_yaml(&format!("urgent-{round}"), "high", 1, "[date, \"+%s%N\"]", false);
            let t0 = unix_ns();
            let urgent = bench.submit(body).await?[0];
            let start = Instant::now();
            let (victim, stamp) = 'found: loop {
                for (v, (id, run)) in victims.iter().zip(&runs).enumerate() {
                    if let Some(ns) = read_stamp(&bench.checkpoint_dir(*id).join(format!("term-{run}"))) {
                        break 'found (v, ns);
                    }
                }
                if start.elapsed() > STEP_TIMEOUT {
                    bail!("no victim got SIGTERM within {}s of job {urgent}", STEP_TIMEOUT.as_secs());
                }
                tokio::time::sleep(POLL).await;
            };
            samples.push(ms_between(t0, stamp));
            runs[victim] += 1;
            let log = fairway_server::engine::log_path(&bench.data_dir, urgent, 0);
            preemptor_samples.push(ms_between(t0, wait_stamp(&log, "preemptor_start_latency").await?));
            bench.wait_state(urgent, JobState::is_finished, "finish").await?;
        }
        // Stop the victims through the server, so that none is being relaunched as it stops.
        for id in &victims {
            let response = bench.http.post(format!("{}/v1/jobs/{id}/cancel", bench.base)).send().await?;
            if !response.status().is_success() {
                bail!("cancelling victim {id}: {}", response.text().await.unwrap_or_default());
            }
        }
        for id in &victims {
            bench.wait_state(*id, JobState::is_finished, "stop").await?;
        }
        let preemptor = Latency {
            samples: preemptor_samples.len(),
            ms: Percentiles::of(preemptor_samples),
            target_p50_ms: None,
            met: None,
        };
        Ok((latency(samples, TARGET_PREEMPT_P50_MS), preemptor))
    }
    .await;
    bench.stop().await;
    result
}

// ---- short_job_throughput ----------------------------------------------------------------

async fn short_jobs(args: &ServerBenchArgs, dir: &Path, exe: &Path) -> Result<ShortJobs> {
    let bench = Bench::start(dir, args.gpus, exe).await?;
    let result = async {
        let bodies: Vec<String> = (0..args.short_jobs)
            .collect::<Vec<_>>()
            .chunks(100)
            .map(|chunk| {
                chunk.iter().map(|i| job_yaml(&format!("short-{i}"), "medium", 1, "[\"true\"]", false)).collect()
            })
            .collect();
        let started = Instant::now();
        let mut ids = Vec::with_capacity(args.short_jobs);
        for body in bodies {
            ids.extend(bench.submit(body).await?);
        }
        let unfinished = format!("{}/v1/jobs?state=pending,running,preempting,stopping&limit=1", bench.base);
        loop {
            let list: fairway_server::api::JobList = bench.http.get(&unfinished).send().await?.json().await?;
            if list.jobs.is_empty() {
                break;
            }
            if started.elapsed() > STEP_TIMEOUT * 5 {
                bail!("{} short jobs did not finish within {}s", args.short_jobs, (STEP_TIMEOUT * 5).as_secs());
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let seconds = started.elapsed().as_secs_f64();
        let bad = format!("{}/v1/jobs?state=failed,cancelled&limit=1", bench.base);
        let list: fairway_server::api::JobList = bench.http.get(&bad).send().await?.json().await?;
        if let Some(job) = list.jobs.first() {
            bail!("short job {} ended {}", job.id, job.state.as_str());
        }
        Ok(ShortJobs { jobs: ids.len(), gpus: args.gpus, seconds, jobs_per_s: ids.len() as f64 / seconds })
    }
    .await;
    bench.stop().await;
    result
}

fn latency(samples: Vec<f64>, target_p50_ms: f64) -> Latency {
    let n = samples.len();
    let ms = Percentiles::of(samples);
    Latency { samples: n, ms, target_p50_ms: Some(target_p50_ms), met: Some(ms.p50 <= target_p50_ms) }
}

// ---- probe_exec --------------------------------------------------------------------------

/// What the probe costs: spawning `date +%s%N` from here until its clock reading.
fn probe_exec(samples: usize) -> Result<Latency> {
    let mut ms = Vec::with_capacity(samples);
    for _ in 0..samples {
        let t0 = unix_ns();
        let out = std::process::Command::new("date").arg("+%s%N").output().context("running date")?;
        let stamp: u128 = String::from_utf8_lossy(&out.stdout).trim().parse().context("date's output")?;
        ms.push(ms_between(t0, stamp));
    }
    Ok(Latency { samples, ms: Percentiles::of(ms), target_p50_ms: None, met: None })
}

// ---- printing ----------------------------------------------------------------------------

fn print_table(r: &Report) {
    println!("Standalone server on this machine ({} CPUs), {} simulated GPUs, loopback HTTP\n", r.cpus, r.gpus);
    println!("{:<26} {:>22} {:>10} {:>10} {:>10} {:>10}  target", "figure", "value", "p50", "p90", "p99", "max");
    let verdict = |met: Option<bool>| match met {
        Some(true) => "✓",
        Some(false) => "✗",
        None => "",
    };
    let throughput = |name: &str, t: &Throughput| {
        let unit = if t.jobs_per_request == 1 { "submissions/s" } else { "jobs/s" };
        let target = t.target_jobs_per_s.map_or(String::new(), |v| format!("≥ {v:.0}/s {}", verdict(t.met)));
        let l = t.latency_ms;
        println!(
            "{name:<26} {:>22} {:>10} {:>10} {:>10} {:>10}  {target}",
            format!("{:.0} {unit}", t.jobs_per_s),
            ms(l.p50),
            ms(l.p90),
            ms(l.p99),
            ms(l.max)
        );
    };
    throughput("submit_throughput", &r.submit_throughput);
    if let Some(m) = &r.submit_throughput_multi {
        throughput("submit_throughput_multi", m);
    }
    let latency = |name: &str, l: &Latency| {
        let target = l.target_p50_ms.map_or(String::new(), |v| format!("p50 ≤ {v:.0} ms {}", verdict(l.met)));
        let n = format!("{} samples", l.samples);
        let p = l.ms;
        println!(
            "{name:<26} {n:>22} {:>10} {:>10} {:>10} {:>10}  {target}",
            ms(p.p50),
            ms(p.p90),
            ms(p.p99),
            ms(p.max)
        );
    };
    latency("start_latency", &r.start_latency);
    latency("preempt_signal_latency", &r.preempt_signal_latency);
    latency("preemptor_start_latency", &r.preemptor_start_latency);
    if let Some(s) = &r.short_job_throughput {
        let value = format!("{:.0} jobs/s", s.jobs_per_s);
        println!(
            "{:<26} {value:>22}  ({} jobs of `true` on {} GPUs in {:.2}s)",
            "short_job_throughput", s.jobs, s.gpus, s.seconds
        );
    }
    latency("probe_exec", &r.probe_exec);
    let t = &r.submit_throughput;
    println!(
        "\nsubmit_throughput: {} submissions by {} clients in {:.2}s; latencies are per request.",
        t.requests, t.clients, t.seconds
    );
    println!("The latencies include probe_exec (the `date` exec that takes the timestamp).");
}

fn ms(v: f64) -> String {
    format!("{v:.1} ms")
}

#[cfg(test)]
mod tests {
    use super::Percentiles;

    #[test]
    fn percentiles_are_nearest_rank() {
        let p = Percentiles::of((1..=100).rev().map(f64::from).collect());
        assert_eq!((p.p50, p.p90, p.p99, p.max), (50.0, 90.0, 99.0, 100.0));
        let one = Percentiles::of(vec![7.0]);
        assert_eq!((one.p50, one.max), (7.0, 7.0));
        assert_eq!(Percentiles::of(Vec::new()).max, 0.0);
    }
}
