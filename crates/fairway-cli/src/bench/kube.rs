//! `fairway bench kube`: the Kubernetes controller's figures against the in-tree fake API
//! server (`fairway-kube-fake`, with its Job controller and kubelets), which runs in this
//! process while the controller runs as its own process (`fairway kube`), so that its
//! memory is its own:
//!
//! - `admissions`: N nodes and M Jobs already queued (explicit opt-in: suspended, pods
//!   pointed at Fairway) when the controller starts. From the first admission to the last
//!   of the wave that fills the cluster, admissions per second end to end: the core's
//!   decision, the Job unsuspended, the Job controller's pods created, every one bound to
//!   its node. `startup` is from the process's start to the first admission (listing the
//!   cluster and rebuilding the core).
//! - `preemption`: the cluster full, a high Job of one node's GPUs is created, one at a
//!   time: from just before its create request to its victims seen suspended (the first
//!   victim's watch event), and to the high Job's pods bound (the victims' grace periods,
//!   scaled down by the fake, included).
//! - `memory`: the controller's peak resident memory (`VmHWM`).
//!
//! Admissions and preemptions are observed through watches, as any client sees them.

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use fairway_kube_fake::{FakeCluster, FakeConfig, gpu_node};
use futures_util::{StreamExt, TryStreamExt};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::{Api, PostParams};
use kube::runtime::watcher;
use serde::Serialize;

use super::{Latency, Percentiles};
use crate::Output;

#[derive(clap::Args, Clone)]
pub struct KubeBenchArgs {
    /// GPU nodes in the cluster.
    #[arg(long, default_value_t = 1000)]
    pub nodes: u32,
    /// GPUs of each node.
    #[arg(long, default_value_t = 8)]
    pub gpus_per_node: u32,
    /// Jobs queued before the controller starts (1, 2, 4 or 8 GPUs; low and medium).
    #[arg(long, default_value_t = 10_000)]
    pub jobs: u32,
    /// High Jobs created one at a time on the full cluster.
    #[arg(long, default_value_t = 20)]
    pub preemptions: u32,
    /// Namespaces the Jobs are spread over.
    #[arg(long, default_value_t = 10)]
    pub namespaces: u32,
    /// Output format on stdout.
    #[arg(long, short = 'o', value_enum, default_value_t = Output::Table)]
    pub output: Output,
}

/// Goals of issue 11, section 5.
const TARGET_ADMISSIONS_PER_S: f64 = 500.0;
const TARGET_PREEMPT_P50_MS: f64 = 200.0;
const TARGET_MEMORY_MIB: f64 = 500.0;
/// The fake runs grace periods and sleeps this much faster (a 30 s grace lasts 0.3 s).
const TIME_SCALE: f64 = 0.01;
/// The wave of admissions is over when no pod was bound for this long.
const QUIET: Duration = Duration::from_secs(3);
const STEP_TIMEOUT: Duration = Duration::from_secs(300);

#[derive(Serialize)]
pub struct KubeReport {
    pub schema_version: u32,
    pub cpus: usize,
    pub nodes: u32,
    pub gpus: u32,
    pub jobs: u32,
    pub admissions: Admissions,
    pub preemption_victims_suspended: Latency,
    pub preemptor_bound: Latency,
    pub memory: Memory,
    /// What the fake served (requests by verb and resource), for the record.
    pub api_requests: BTreeMap<String, u64>,
    /// Nodes whose pods ask more than they have (must be empty).
    pub double_booked: Vec<String>,
}

#[derive(Serialize)]
pub struct Admissions {
    /// Jobs admitted in the wave (every pod bound).
    pub jobs: usize,
    pub pods: usize,
    pub gpus: u64,
    /// From the first admission to the last pod of the wave bound.
    pub seconds: f64,
    pub jobs_per_s: f64,
    /// From the controller's start to its first admission.
    pub startup_seconds: f64,
    pub target_jobs_per_s: f64,
    pub met: bool,
}

#[derive(Serialize)]
pub struct Memory {
    pub peak_rss_mib: f64,
    pub rss_mib_at_end: f64,
    pub target_mib: f64,
    pub met: bool,
}

pub fn run(args: &KubeBenchArgs) -> Result<()> {
    if args.nodes == 0 || args.gpus_per_node == 0 || args.jobs == 0 || args.namespaces == 0 {
        bail!("--nodes, --gpus-per-node, --jobs and --namespaces must be at least 1");
    }
    if !(1..=64).contains(&args.gpus_per_node) {
        bail!("--gpus-per-node: 1 to 64");
    }
    if cfg!(debug_assertions) {
        eprintln!("bench: this is a debug build; the figures mean little (cargo build --release)");
    }
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    let report = runtime.block_on(measure(args))?;
    runtime.shutdown_timeout(Duration::from_secs(1));
    match args.output {
        Output::Json => println!("{}", serde_json::to_string_pretty(&report)?),
        Output::Table => print_table(&report),
    }
    if !report.double_booked.is_empty() {
        bail!("nodes were overcommitted: {}", report.double_booked.join("; "));
    }
    Ok(())
}

/// What the watches saw: when each Job was first seen unsuspended, each pod bound, each
/// preemption recorded on a victim.
#[derive(Default)]
struct Seen {
    admitted_at: HashMap<String, Instant>,
    /// Job → (pods wanted, pods bound, when the last was bound).
    bound: HashMap<String, (u32, u32, Option<Instant>)>,
    bound_pods: HashMap<String, Instant>,
    last_bound: Option<Instant>,
    /// Preemptor `namespace/name` → when the first of its victims was seen suspended.
    preempted_for: HashMap<String, Instant>,
}

async fn measure(args: &KubeBenchArgs) -> Result<KubeReport> {
    let progress = args.output == Output::Table;
    let note = |what: &str| {
        if progress {
            eprintln!("bench: {what}");
        }
    };
    let config =
        FakeConfig { time_scale: TIME_SCALE, events: false, watch_history: 1_000_000, ..FakeConfig::default() };
    let cluster = FakeCluster::start(config).await.context("starting the fake API server")?;
    let client = cluster.client();
    note(&format!("cluster: {} nodes of {} GPUs, {} queued Jobs", args.nodes, args.gpus_per_node, args.jobs));
    populate(&client, args).await?;

    let seen = Arc::new(Mutex::new(Seen::default()));
    let watches = tokio::spawn(watch(client.clone(), seen.clone()));

    let dir = tempfile_dir()?;
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(&kubeconfig, cluster.kubeconfig_yaml())?;
    let settings = dir.join("config.yaml");
    std::fs::write(&settings, "leader_election: { enabled: false }\n")?;
    note("admissions: starting the controller");
    let started = Instant::now();
    let mut controller = Controller::spawn(&kubeconfig, &settings)?;

    // The wave: until no pod was bound for QUIET after the first admission.
    let deadline = Instant::now() + STEP_TIMEOUT;
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        controller.check_alive()?;
        let s = seen.lock().expect("not poisoned");
        if let Some(last) = s.last_bound
            && last.elapsed() > QUIET
        {
            break;
        }
        if Instant::now() > deadline {
            bail!("no admission wave ended within {STEP_TIMEOUT:?}");
        }
    }
    let admissions = {
        let s = seen.lock().expect("not poisoned");
        let first = s.admitted_at.values().min().copied().context("nothing was admitted")?;
        let complete: Vec<(&String, Instant)> = s
            .bound
            .iter()
            .filter(|(_, (want, got, _))| got >= want && *want > 0)
            .filter_map(|(k, (_, _, at))| Some((k, (*at)?)))
            .collect();
        let last = complete.iter().map(|(_, at)| *at).max().unwrap_or(first);
        let seconds = last.duration_since(first).as_secs_f64().max(1e-9);
        let pods = complete.iter().map(|(k, _)| s.bound[*k].0 as usize).sum();
        let gpus = complete.iter().map(|(k, _)| u64::from(s.bound[*k].0) * job_gpus_of(k)).sum();
        let jobs_per_s = complete.len() as f64 / seconds;
        Admissions {
            jobs: complete.len(),
            pods,
            gpus,
            seconds,
            jobs_per_s,
            startup_seconds: first.duration_since(started).as_secs_f64(),
            target_jobs_per_s: TARGET_ADMISSIONS_PER_S,
            met: jobs_per_s >= TARGET_ADMISSIONS_PER_S,
        }
    };
    note(&format!("admissions: {} Jobs in {:.2} s", admissions.jobs, admissions.seconds));

    note(&format!("preemption: {} high Jobs one at a time", args.preemptions));
    let mut suspended_ms = Vec::new();
    let mut bound_ms = Vec::new();
    for i in 0..args.preemptions {
        let name = format!("urgent-{i}");
        let key = format!("team-0/{name}");
        let job = bench_job("team-0", &name, "high", args.gpus_per_node);
        let jobs: Api<Job> = Api::namespaced(client.clone(), "team-0");
        let t0 = Instant::now();
        jobs.create(&PostParams::default(), &job).await.with_context(|| format!("creating {key}"))?;
        let deadline = t0 + Duration::from_secs(60);
        let (mut victims_at, mut bound_at) = (None, None);
        while victims_at.is_none() || bound_at.is_none() {
            tokio::time::sleep(Duration::from_millis(1)).await;
            controller.check_alive()?;
            let s = seen.lock().expect("not poisoned");
            victims_at = victims_at.or_else(|| s.preempted_for.get(&key).copied());
            bound_at = bound_at
                .or_else(|| s.bound.get(&key).and_then(|(want, got, at)| (got >= want).then_some(*at)).flatten());
            if Instant::now() > deadline {
                bail!("{key}: no victim suspended and its pod bound within 60 s");
            }
        }
        suspended_ms.push(victims_at.expect("set").duration_since(t0).as_secs_f64() * 1000.0);
        bound_ms.push(bound_at.expect("set").duration_since(t0).as_secs_f64() * 1000.0);
    }
    let victims = Percentiles::of(suspended_ms.clone());
    let memory = controller.memory()?;
    controller.stop();
    watches.abort();
    let report = KubeReport {
        schema_version: 1,
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        nodes: args.nodes,
        gpus: args.nodes * args.gpus_per_node,
        jobs: args.jobs,
        admissions,
        preemption_victims_suspended: Latency {
            samples: suspended_ms.len(),
            ms: victims,
            target_p50_ms: Some(TARGET_PREEMPT_P50_MS),
            met: Some(victims.p50 <= TARGET_PREEMPT_P50_MS),
        },
        preemptor_bound: Latency {
            samples: bound_ms.len(),
            ms: Percentiles::of(bound_ms),
            target_p50_ms: None,
            met: None,
        },
        memory,
        api_requests: cluster.stats().requests,
        double_booked: cluster.double_booked(),
    };
    cluster.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(report)
}

/// GPUs per pod of a bench Job, from its name (`team-N/q-SIZE-I`).
fn job_gpus_of(key: &str) -> u64 {
    key.rsplit('/').next().and_then(|n| n.split('-').nth(1)).and_then(|g| g.parse().ok()).unwrap_or(0)
}

fn tempfile_dir() -> Result<std::path::PathBuf> {
    let dir = std::env::temp_dir().join(format!("fairway-bench-kube-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

/// Namespaces, priority classes, nodes and the queued Jobs, created through the API.
async fn populate(client: &kube::Client, args: &KubeBenchArgs) -> Result<()> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    for n in 0..args.namespaces {
        namespaces.create(&PostParams::default(), &yaml(&format!("metadata: {{ name: team-{n} }}\n"))?).await?;
    }
    let classes: Api<PriorityClass> = Api::all(client.clone());
    for (name, value) in [("low", 1000), ("medium", 100_000), ("high", 1_000_000)] {
        classes
            .create(&PostParams::default(), &yaml(&format!("metadata: {{ name: {name} }}\nvalue: {value}\n"))?)
            .await?;
    }
    let nodes: Api<Node> = Api::all(client.clone());
    let width = args.nodes.to_string().len();
    futures_util::stream::iter(0..args.nodes)
        .map(|i| {
            let nodes = nodes.clone();
            let node =
                gpu_node(&format!("gpu-{i:0width$}"), args.gpus_per_node, "NVIDIA-H100-80GB-HBM3", 96_000, 1_048_576);
            async move { nodes.create(&PostParams::default(), &node).await.map(|_| ()) }
        })
        .buffer_unordered(32)
        .try_collect::<()>()
        .await
        .context("creating nodes")?;
    // Sizes 1, 1, 1, 1, 2, 2, 4, 8 (one node's worth at most); one Job in ten is medium.
    let sizes = [1, 1, 1, 1, 2, 2, 4, 8];
    futures_util::stream::iter(0..args.jobs)
        .map(|i| {
            let ns = format!("team-{}", i % args.namespaces);
            let gpus = sizes[i as usize % sizes.len()].min(args.gpus_per_node);
            let class = if i % 10 == 9 { "medium" } else { "low" };
            let job = bench_job(&ns, &format!("q-{gpus}-{i}"), class, gpus);
            let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
            async move { jobs.create(&PostParams::default(), &job).await.map(|_| ()) }
        })
        .buffer_unordered(32)
        .try_collect::<()>()
        .await
        .context("creating Jobs")?;
    Ok(())
}

/// A Job opted in explicitly: suspended, labelled, its pods pointed at Fairway, running
/// until deleted, with the default 30 s grace period.
fn bench_job(namespace: &str, name: &str, class: &str, gpus: u32) -> Job {
    let text = format!(
        "metadata: {{ name: {name}, namespace: {namespace}, labels: {{ fairway.dev/queue: {namespace} }} }}\n\
         spec:\n  suspend: true\n  template:\n    spec:\n      schedulerName: fairway\n      priorityClassName: {class}\n\
         \x20     restartPolicy: Never\n\
         \x20     containers: [{{ name: train, image: paddle, command: [sleep, \"100000000\"], resources: {{ limits: {{ nvidia.com/gpu: \"{gpus}\" }} }} }}]\n"
    );
    yaml(&text).expect("a well-formed Job")
}

fn yaml<T: serde::de::DeserializeOwned>(text: &str) -> Result<T> {
    serde_saphyr::from_str(text).map_err(|e| anyhow::anyhow!("{e}"))
}

/// Jobs and pods through two watches, recording when things are first seen.
async fn watch(client: kube::Client, seen: Arc<Mutex<Seen>>) {
    let jobs = watcher(Api::<Job>::all(client.clone()), watcher::Config::default()).for_each(|event| {
        let seen = seen.clone();
        async move {
            let (watcher::Event::Apply(job) | watcher::Event::InitApply(job)) = event.unwrap_or(watcher::Event::Init)
            else {
                return;
            };
            let key = format!(
                "{}/{}",
                job.metadata.namespace.as_deref().unwrap_or(""),
                job.metadata.name.as_deref().unwrap_or("")
            );
            let spec = job.spec.as_ref();
            let suspended = spec.and_then(|s| s.suspend).unwrap_or(false);
            let mut s = seen.lock().expect("not poisoned");
            let now = Instant::now();
            if !suspended {
                s.admitted_at.entry(key.clone()).or_insert(now);
                let want = spec.and_then(|s| s.parallelism).unwrap_or(1).max(0) as u32;
                s.bound.entry(key).or_insert((want, 0, None)).0 = want;
            } else if let Some(by) = job.metadata.annotations.as_ref().and_then(|a| a.get("fairway.dev/preempted-by")) {
                s.preempted_for.entry(by.clone()).or_insert(now);
            }
        }
    });
    let pods = watcher(Api::<Pod>::all(client), watcher::Config::default()).for_each(|event| {
        let seen = seen.clone();
        async move {
            let (watcher::Event::Apply(pod) | watcher::Event::InitApply(pod)) = event.unwrap_or(watcher::Event::Init)
            else {
                return;
            };
            let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.as_ref()) else { return };
            let _ = node;
            let Some(uid) = pod.metadata.uid.clone() else { return };
            let Some(job) = pod.metadata.labels.as_ref().and_then(|l| l.get("batch.kubernetes.io/job-name")) else {
                return;
            };
            let key = format!("{}/{job}", pod.metadata.namespace.as_deref().unwrap_or(""));
            let mut s = seen.lock().expect("not poisoned");
            let now = Instant::now();
            if s.bound_pods.insert(uid, now).is_none() {
                let entry = s.bound.entry(key).or_insert((1, 0, None));
                entry.1 += 1;
                entry.2 = Some(now);
                s.last_bound = Some(now);
            }
        }
    });
    tokio::join!(jobs, pods);
}

/// `fairway kube` as a child process.
struct Controller {
    child: Child,
}

impl Controller {
    fn spawn(kubeconfig: &std::path::Path, settings: &std::path::Path) -> Result<Controller> {
        let exe = std::env::current_exe().context("finding the fairway executable")?;
        let mut child = Command::new(exe)
            .args(["kube", "--listen", "127.0.0.1:0", "--no-leader-election", "--kubeconfig"])
            .arg(kubeconfig)
            .arg("--config")
            .arg(settings)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context("starting fairway kube")?;
        let mut stdout = BufReader::new(child.stdout.take().context("its stdout")?);
        let mut line = String::new();
        while !line.contains("read-only API on") {
            line.clear();
            if stdout.read_line(&mut line)? == 0 {
                bail!("fairway kube exited before it listened");
            }
        }
        std::thread::spawn(move || std::io::copy(&mut stdout, &mut std::io::sink()));
        Ok(Controller { child })
    }

    fn check_alive(&mut self) -> Result<()> {
        if let Some(status) = self.child.try_wait()? {
            bail!("fairway kube exited: {status}");
        }
        Ok(())
    }

    fn memory(&self) -> Result<Memory> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .context("reading the controller's /proc status")?;
        let kib = |key: &str| -> f64 {
            status
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        let peak = kib("VmHWM:") / 1024.0;
        Ok(Memory {
            peak_rss_mib: peak,
            rss_mib_at_end: kib("VmRSS:") / 1024.0,
            target_mib: TARGET_MEMORY_MIB,
            met: peak <= TARGET_MEMORY_MIB,
        })
    }

    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        self.stop();
    }
}

fn print_table(r: &KubeReport) {
    let met = |m: bool| if m { "met" } else { "NOT met" };
    println!("Kubernetes controller against the fake API server ({} CPUs)", r.cpus);
    println!("  cluster            {} nodes, {} GPUs, {} Jobs queued at start", r.nodes, r.gpus, r.jobs);
    let a = &r.admissions;
    println!(
        "  admissions         {} Jobs ({} pods, {} GPUs) in {:.2} s: {:.0} Jobs/s end to end (goal >= {:.0}: {})",
        a.jobs,
        a.pods,
        a.gpus,
        a.seconds,
        a.jobs_per_s,
        a.target_jobs_per_s,
        met(a.met)
    );
    println!("  startup            {:.2} s from the process's start to its first admission", a.startup_seconds);
    let v = &r.preemption_victims_suspended;
    println!(
        "  high Job -> victims suspended   p50 {:.0} ms, p90 {:.0} ms, max {:.0} ms ({} samples; goal p50 <= {:.0} ms: {})",
        v.ms.p50,
        v.ms.p90,
        v.ms.max,
        v.samples,
        TARGET_PREEMPT_P50_MS,
        met(v.met == Some(true))
    );
    let b = &r.preemptor_bound;
    println!(
        "  high Job -> its pod bound       p50 {:.0} ms, p90 {:.0} ms, max {:.0} ms (the victims stop at once on SIGTERM)",
        b.ms.p50, b.ms.p90, b.ms.max
    );
    let m = &r.memory;
    println!(
        "  controller memory  peak {:.0} MiB resident, {:.0} MiB at the end (goal <= {:.0} MiB: {})",
        m.peak_rss_mib,
        m.rss_mib_at_end,
        m.target_mib,
        met(m.met)
    );
    println!("  double-booked nodes {}", r.double_booked.len());
}
