//! `fairway bench soak`: the server under fire, checked from outside after every round.
//!
//! Each round starts `fairway serve` (a real child process) on the same data directory,
//! then, all at once, several clients submit jobs (random priority, size and gangs), one
//! cancels acknowledged jobs at random, one changes quotas, and after a random moment the
//! server is killed with SIGKILL. Then the checks, from outside the server:
//!
//! 1. **No job runs twice**: no two live processes carry the same job id and replica index
//!    in their environment (`FAIRWAY_JOB_ID`, `FAIRWAY_REPLICA_INDEX`), whatever the
//!    server thinks.
//! 2. **No GPU is double-booked**: no two live job processes have the same GPU of the same
//!    node (`FAIRWAY_NODE`, `CUDA_VISIBLE_DEVICES`).
//!
//! and, once the next round's server is up:
//!
//! 3. **No acknowledged job is lost**: every job answered 201 exists.
//! 4. **Pending order holds**: the pending jobs' queue positions follow priority, then
//!    submission time, then id.
//! 5. **Nodes and jobs agree** on who holds which GPU.
//!
//! At the end every acknowledged job must finish (succeeded or cancelled; jobs are short
//! sleeps that never fail). The seed makes the workload and the kill moments repeatable;
//! the server's timing does not.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use fairway_server::api::{JobList, JobState};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

use crate::Output;

#[derive(clap::Args, Clone)]
pub struct SoakArgs {
    /// Rounds of load and `kill -9`.
    #[arg(long, default_value_t = 10)]
    pub rounds: u32,
    /// Seed of the workload and of the kill moments.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Simulated GPUs: `N` or `NODESxGPUS`.
    #[arg(long, default_value = "2x4")]
    pub gpus: String,
    /// Concurrent submitting clients.
    #[arg(long, default_value_t = 3)]
    pub submitters: usize,
    /// Longest load before the kill, in milliseconds (the kill comes at a random moment up to
    /// this).
    #[arg(long, default_value_t = 2000)]
    pub round_ms_max: u64,
    /// Keep the data here instead of a temporary directory that is removed.
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    #[arg(long, short = 'o', value_enum, default_value_t = Output::Table)]
    pub output: Output,
}

/// Everything `-o json` prints.
#[derive(Serialize, Default)]
pub struct SoakReport {
    pub schema_version: u32,
    pub rounds: u32,
    pub seed: u64,
    pub submissions_acknowledged: usize,
    pub submissions_refused: usize,
    pub cancels: usize,
    pub quota_changes: usize,
    /// Acknowledged jobs missing after a restart.
    pub jobs_lost: usize,
    /// Times a (job, replica) had two live processes.
    pub jobs_run_twice: usize,
    /// Times a GPU was held by two live job processes.
    pub gpus_double_booked: usize,
    /// Pending jobs out of order after a restart.
    pub pending_out_of_order: usize,
    /// Times nodes and jobs disagreed on a GPU.
    pub nodes_jobs_disagreements: usize,
    /// Acknowledged jobs that ended other than succeeded or cancelled, or never ended.
    pub jobs_ended_badly: usize,
    /// Most live job processes seen at a check.
    pub live_processes_max: usize,
    /// From the server's start to its first answer, slowest round (ms).
    pub restart_ms_max: u64,
    pub seconds: f64,
}

impl SoakReport {
    pub fn clean(&self) -> bool {
        self.jobs_lost == 0
            && self.jobs_run_twice == 0
            && self.gpus_double_booked == 0
            && self.pending_out_of_order == 0
            && self.nodes_jobs_disagreements == 0
            && self.jobs_ended_badly == 0
    }
}

/// Counts shared by the load's tasks.
#[derive(Default)]
struct Load {
    acknowledged: BTreeSet<i64>,
    refused: usize,
    cancels: usize,
    quota_changes: usize,
}

pub fn run(args: &SoakArgs) -> Result<()> {
    if args.rounds == 0 || args.submitters == 0 || args.round_ms_max < 100 {
        bail!("--rounds and --submitters must be at least 1, --round-ms-max at least 100");
    }
    let (root, temporary) = match &args.data_dir {
        Some(dir) => (dir.clone(), false),
        None => (std::env::temp_dir().join(format!("fairway-soak-{}", fairway_server::clock::wall_ms())), true),
    };
    std::fs::create_dir_all(&root).with_context(|| format!("creating {}", root.display()))?;
    let exe = std::env::current_exe().context("finding the fairway executable")?;
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    let result = runtime.block_on(soak(args, &root, &exe));
    runtime.shutdown_timeout(Duration::from_secs(1));
    kill_jobs_under(&root.join("data"));
    if temporary {
        let _ = std::fs::remove_dir_all(&root);
    }
    let report = result?;
    match args.output {
        Output::Json => println!("{}", serde_json::to_string_pretty(&report)?),
        Output::Table => print_report(&report),
    }
    if !report.clean() {
        bail!("the soak found problems (see above)");
    }
    Ok(())
}

async fn soak(args: &SoakArgs, root: &Path, exe: &Path) -> Result<SoakReport> {
    let started = Instant::now();
    let data = root.join("data");
    let mut rng = ChaCha8Rng::seed_from_u64(args.seed);
    let load = Arc::new(Mutex::new(Load::default()));
    let mut report = SoakReport { schema_version: 1, rounds: args.rounds, seed: args.seed, ..SoakReport::default() };
    for round in 1..=args.rounds {
        let (mut server, client) = Server::start(exe, root, &data, &args.gpus, &mut report).await?;
        let acknowledged = load.lock().expect("not poisoned").acknowledged.clone();
        check_server(&client, &acknowledged, &mut report).await?;
        let run_for = Duration::from_millis(rng.random_range(100..=args.round_ms_max));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut tasks = Vec::new();
        for i in 0..args.submitters {
            let seed = rng.random::<u64>();
            tasks.push(tokio::spawn(submitter(client.clone(), load.clone(), stop.clone(), seed, round, i)));
        }
        tasks.push(tokio::spawn(canceller(client.clone(), load.clone(), stop.clone(), rng.random::<u64>())));
        tasks.push(tokio::spawn(quota_changer(client.clone(), load.clone(), stop.clone(), rng.random::<u64>())));
        tokio::time::sleep(run_for).await;
        server.kill();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for task in tasks {
            let _ = task.await;
        }
        check_processes(&data, &mut report);
        if args.output == Output::Table {
            let l = load.lock().expect("not poisoned");
            eprintln!(
                "soak: round {round}/{}: killed after {} ms; {} jobs acknowledged so far",
                args.rounds,
                run_for.as_millis(),
                l.acknowledged.len()
            );
        }
    }
    // The last restart: everything acknowledged must be there and must finish.
    let (mut server, client) = Server::start(exe, root, &data, &args.gpus, &mut report).await?;
    let acknowledged = load.lock().expect("not poisoned").acknowledged.clone();
    check_server(&client, &acknowledged, &mut report).await?;
    report.jobs_ended_badly = drain(&client, &acknowledged).await?;
    check_processes(&data, &mut report);
    server.kill();
    let l = load.lock().expect("not poisoned");
    report.submissions_acknowledged = l.acknowledged.len();
    report.submissions_refused = l.refused;
    report.cancels = l.cancels;
    report.quota_changes = l.quota_changes;
    report.seconds = started.elapsed().as_secs_f64();
    Ok(report)
}

/// `fairway serve` as a child process on the soak's data directory.
struct Server {
    child: Child,
}

impl Server {
    async fn start(
        exe: &Path,
        root: &Path,
        data: &Path,
        gpus: &str,
        report: &mut SoakReport,
    ) -> Result<(Server, Client)> {
        let started = Instant::now();
        let mut child = Command::new(exe)
            .args(["serve", "--gpus", gpus, "--listen", "127.0.0.1:0", "--tick-ms", "50", "--data-dir"])
            .arg(data)
            .env("XDG_STATE_HOME", root.join("state"))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .context("starting fairway serve")?;
        let mut stdout = BufReader::new(child.stdout.take().expect("piped"));
        let mut line = String::new();
        stdout.read_line(&mut line).context("reading the server's first line")?;
        std::thread::spawn(move || std::io::copy(&mut stdout, &mut std::io::sink()));
        let Some(base) = line.split_whitespace().find(|w| w.starts_with("http://")) else {
            let _ = child.kill();
            bail!("the server did not start: {line:?}");
        };
        let token = std::fs::read_to_string(data.join(fairway_server::datadir::ADMIN_TOKEN_FILE))?;
        let client = Client::new(base, token.trim())?;
        client.get::<serde_json::Value>("/v1/whoami").await.context("the restarted server does not answer")?;
        report.restart_ms_max = report.restart_ms_max.max(started.elapsed().as_millis() as u64);
        Ok((Server { child }, client))
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

#[derive(Clone)]
struct Client {
    http: reqwest::Client,
    base: String,
}

impl Client {
    fn new(base: &str, token: &str) -> Result<Client> {
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert(reqwest::header::AUTHORIZATION, format!("Bearer {token}").parse()?);
        headers.insert(reqwest::header::CONTENT_TYPE, reqwest::header::HeaderValue::from_static("application/yaml"));
        let http = reqwest::Client::builder().default_headers(headers).timeout(Duration::from_secs(30)).build()?;
        Ok(Client { http, base: base.trim_end_matches('/').to_owned() })
    }

    async fn get<T: serde::de::DeserializeOwned>(&self, path: &str) -> Result<T> {
        let response = self.http.get(format!("{}{path}", self.base)).send().await?;
        if !response.status().is_success() {
            bail!("GET {path}: {}", response.status());
        }
        Ok(response.json().await?)
    }
}

async fn submitter(
    client: Client,
    load: Arc<Mutex<Load>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
    seed: u64,
    round: u32,
    who: usize,
) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut n = 0;
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        // A steady stream, not a flood: the jobs submitted must also be able to finish.
        tokio::time::sleep(Duration::from_millis(rng.random_range(20..150))).await;
        n += 1;
        let priority = ["low", "medium", "high"][rng.random_range(0..3)];
        let gpus = rng.random_range(1..=4);
        let replicas = if rng.random_ratio(1, 6) { 2 } else { 1 };
        let project = ["a", "b"][rng.random_range(0..2)];
        let seconds = rng.random_range(1..=8) as f64 / 10.0;
        let body = format!(
            "name: r{round}-c{who}-{n}\ntenant: {{ project: {project} }}\npriority: {priority}\n\
             resources: {{ gpus: {gpus} }}\nreplicas: {replicas}\nshell: true\n\
             command: [\"exec sleep {seconds}\"]\npreemption_grace_seconds: 2\n"
        );
        match client.http.post(format!("{}/v1/jobs", client.base)).body(body).send().await {
            Ok(response) if response.status() == reqwest::StatusCode::CREATED => {
                let Ok(answer) = response.json::<fairway_server::api::SubmitResponse>().await else { break };
                load.lock().expect("not poisoned").acknowledged.extend(answer.jobs.iter().map(|j| j.id));
            }
            Ok(_) => load.lock().expect("not poisoned").refused += 1,
            // The server was killed: this round's load is over.
            Err(_) => break,
        }
    }
}

async fn canceller(client: Client, load: Arc<Mutex<Load>>, stop: Arc<std::sync::atomic::AtomicBool>, seed: u64) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_millis(rng.random_range(20..80))).await;
        let id = {
            let l = load.lock().expect("not poisoned");
            if l.acknowledged.is_empty() {
                continue;
            }
            *l.acknowledged.iter().nth(rng.random_range(0..l.acknowledged.len())).expect("in range")
        };
        match client.http.post(format!("{}/v1/jobs/{id}/cancel", client.base)).send().await {
            Ok(r) if r.status().is_success() => load.lock().expect("not poisoned").cancels += 1,
            Ok(_) => {}
            Err(_) => break,
        }
    }
}

async fn quota_changer(client: Client, load: Arc<Mutex<Load>>, stop: Arc<std::sync::atomic::AtomicBool>, seed: u64) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_millis(rng.random_range(100..300))).await;
        let project = ["a", "b"][rng.random_range(0..2)];
        let url = format!("{}/v1/quotas/project/{project}", client.base);
        let sent = if rng.random_ratio(1, 4) {
            client.http.delete(url).send().await
        } else {
            client.http.put(url).body(format!("{{\"gpus_max\": {}}}", rng.random_range(2..=8))).send().await
        };
        match sent {
            Ok(r) if r.status().is_success() => load.lock().expect("not poisoned").quota_changes += 1,
            Ok(_) => {}
            Err(_) => break,
        }
    }
}

/// Checks 1 and 2: the live job processes, as their environments say.
fn check_processes(data: &Path, report: &mut SoakReport) {
    let processes = job_processes(data);
    report.live_processes_max = report.live_processes_max.max(processes.len());
    let mut replicas: BTreeMap<(String, String), usize> = BTreeMap::new();
    let mut gpus: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
    for env in &processes {
        let get = |k: &str| env.get(k).cloned().unwrap_or_default();
        *replicas.entry((get("FAIRWAY_JOB_ID"), get("FAIRWAY_REPLICA_INDEX"))).or_default() += 1;
        for gpu in get("CUDA_VISIBLE_DEVICES").split(',').filter(|g| !g.is_empty()) {
            gpus.entry((get("FAIRWAY_NODE"), gpu.to_owned())).or_default().insert(get("FAIRWAY_JOB_ID"));
        }
    }
    for ((job, replica), count) in &replicas {
        if *count > 1 {
            eprintln!("soak: job {job} replica {replica} runs {count} times");
            report.jobs_run_twice += 1;
        }
    }
    for ((node, gpu), jobs) in &gpus {
        if jobs.len() > 1 {
            eprintln!("soak: GPU {gpu} of {node} is held by jobs {jobs:?}");
            report.gpus_double_booked += 1;
        }
    }
}

/// The environment of every live process of a job of this data directory.
fn job_processes(data: &Path) -> Vec<BTreeMap<String, String>> {
    let prefix = data.join("jobs").display().to_string();
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    let mut out = Vec::new();
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
        if stat.rsplit(')').next().is_some_and(|rest| rest.trim_start().starts_with('Z')) || pid == std::process::id() {
            continue;
        }
        let Ok(environ) = std::fs::read(entry.path().join("environ")) else { continue };
        let env: BTreeMap<String, String> = environ
            .split(|b| *b == 0)
            .filter_map(|kv| std::str::from_utf8(kv).ok()?.split_once('=').map(|(k, v)| (k.to_owned(), v.to_owned())))
            .filter(|(k, _)| k.starts_with("FAIRWAY_") || k == "CUDA_VISIBLE_DEVICES")
            .collect();
        if env.get("FAIRWAY_CHECKPOINT_DIR").is_some_and(|d| d.starts_with(&prefix))
            && env.contains_key("FAIRWAY_JOB_ID")
        {
            out.push(env);
        }
    }
    out
}

/// Checks 3 to 5, on a server that just started.
async fn check_server(client: &Client, acknowledged: &BTreeSet<i64>, report: &mut SoakReport) -> Result<()> {
    let all: JobList = client.get("/v1/jobs?limit=10000").await?;
    if all.next_cursor.is_some() {
        bail!("more than 10,000 jobs: use fewer rounds");
    }
    let known: BTreeSet<i64> = all.jobs.iter().map(|j| j.id).collect();
    for id in acknowledged.difference(&known) {
        eprintln!("soak: acknowledged job {id} is lost");
        report.jobs_lost += 1;
    }
    let mut positioned: Vec<(u64, i32, u64, i64)> = all
        .jobs
        .iter()
        .filter(|j| j.state == JobState::Pending)
        .filter_map(|j| Some((j.queue_position?, j.priority, j.submitted_at_ms, j.id)))
        .collect();
    positioned.sort();
    for pair in positioned.windows(2) {
        let key = |&(_, priority, at, id): &(u64, i32, u64, i64)| (std::cmp::Reverse(priority), at, id);
        if key(&pair[0]) > key(&pair[1]) {
            eprintln!("soak: pending order broken: {:?} before {:?}", pair[0], pair[1]);
            report.pending_out_of_order += 1;
        }
    }
    check_nodes_agree(client, report).await
}

/// Check 5. Jobs keep starting and ending while it looks, so it compares the nodes with the
/// jobs only when the jobs read before and after the nodes are the same; a disagreement is
/// counted only if it is seen that way every time.
async fn check_nodes_agree(client: &Client, report: &mut SoakReport) -> Result<()> {
    let mut disagreement = None;
    for _ in 0..50 {
        let before = gpus_by_jobs(client).await?;
        let by_nodes = gpus_by_nodes(client).await?;
        if gpus_by_jobs(client).await? != before {
            continue;
        }
        if by_nodes == before {
            return Ok(());
        }
        disagreement = Some(format!("{by_nodes:?} vs {before:?}"));
    }
    match disagreement {
        Some(what) => {
            eprintln!("soak: nodes and jobs disagree: {what}");
            report.nodes_jobs_disagreements += 1;
        }
        None => eprintln!("soak: the jobs never stood still long enough to compare them with the nodes"),
    }
    Ok(())
}

type GpuHolders = BTreeSet<(String, u64, i64)>;

async fn gpus_by_nodes(client: &Client) -> Result<GpuHolders> {
    let nodes: serde_json::Value = client.get("/v1/nodes").await?;
    let mut held = BTreeSet::new();
    for node in nodes["nodes"].as_array().into_iter().flatten() {
        for gpu in node["gpus"].as_array().into_iter().flatten() {
            if let Some(job) = gpu["job"].as_i64() {
                let name = node["name"].as_str().unwrap_or_default().to_owned();
                held.insert((name, gpu["index"].as_u64().unwrap_or(0), job));
            }
        }
    }
    Ok(held)
}

async fn gpus_by_jobs(client: &Client) -> Result<GpuHolders> {
    let list: JobList = client.get("/v1/jobs?state=running,preempting,stopping&limit=10000").await?;
    let mut held = BTreeSet::new();
    for job in &list.jobs {
        for replica in &job.placement {
            held.extend(replica.gpus.iter().map(|g| (replica.node.clone(), u64::from(*g), job.id)));
        }
    }
    Ok(held)
}

/// Waits for every acknowledged job to end; returns how many did not end well.
async fn drain(client: &Client, acknowledged: &BTreeSet<i64>) -> Result<usize> {
    // Quotas set by the load could hold jobs back for good: lift them.
    for project in ["a", "b"] {
        let _ = client.http.delete(format!("{}/v1/quotas/project/{project}", client.base)).send().await;
    }
    let started = Instant::now();
    loop {
        let all: JobList = client.get("/v1/jobs?limit=10000").await?;
        let states: BTreeMap<i64, JobState> = all.jobs.iter().map(|j| (j.id, j.state)).collect();
        let open = acknowledged.iter().filter(|id| states.get(id).is_some_and(|s| !s.is_finished())).count();
        if open == 0 {
            let bad: Vec<(i64, JobState)> = acknowledged
                .iter()
                .filter_map(|id| states.get(id).map(|s| (*id, *s)))
                .filter(|(_, s)| !matches!(s, JobState::Succeeded | JobState::Cancelled))
                .collect();
            for (id, state) in &bad {
                eprintln!("soak: job {id} ended {}", state.as_str());
                // Its history says why: the report must be enough to find the cause.
                if let Ok(history) =
                    client.get::<fairway_server::api::EventList>(&format!("/v1/jobs/{id}/events")).await
                {
                    for e in history.events {
                        eprintln!("soak:   {} {} {}", e.at_ms, e.kind, e.message);
                    }
                }
            }
            return Ok(bad.len());
        }
        if started.elapsed() > Duration::from_secs(600) {
            eprintln!("soak: {open} jobs still not finished after 10 minutes");
            return Ok(open);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn kill_jobs_under(data: &Path) {
    let needle = data.join("jobs").display().to_string();
    let Ok(entries) = std::fs::read_dir("/proc") else { return };
    for entry in entries.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else { continue };
        let cmdline = String::from_utf8_lossy(&cmdline);
        if cmdline.contains(fairway_exec::SHIM_SUBCOMMAND) && cmdline.contains(&needle) {
            let _ = fairway_exec::signal_group(pid, fairway_exec::Signal::Kill);
        }
    }
}

fn print_report(r: &SoakReport) {
    println!("soak: {} rounds of load and kill -9 (seed {}), {:.1} s", r.rounds, r.seed, r.seconds);
    println!("  submissions acknowledged   {}", r.submissions_acknowledged);
    println!("  submissions refused        {}", r.submissions_refused);
    println!("  cancels                    {}", r.cancels);
    println!("  quota changes              {}", r.quota_changes);
    println!("  live job processes (max)   {}", r.live_processes_max);
    println!("  restart to first answer    {} ms (slowest)", r.restart_ms_max);
    println!("  jobs lost                  {}", r.jobs_lost);
    println!("  jobs run twice             {}", r.jobs_run_twice);
    println!("  GPUs double-booked         {}", r.gpus_double_booked);
    println!("  pending out of order       {}", r.pending_out_of_order);
    println!("  nodes/jobs disagreements   {}", r.nodes_jobs_disagreements);
    println!("  jobs ended badly           {}", r.jobs_ended_badly);
}
