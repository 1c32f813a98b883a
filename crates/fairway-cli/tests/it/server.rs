//! The standalone server end to end: a real server on an ephemeral loopback port, real
//! SQLite, real `fairway example-trainer` processes under real shims, real signals.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fairway_server::api::{JobDetail, JobList, JobState, JobView, NodeList, SubmitResponse};
use serde_json::Value;

pub const FAIRWAY: &str = env!("CARGO_BIN_EXE_fairway");
/// Generous: the CI machine has two busy cores.
const WAIT_MAX: Duration = Duration::from_secs(60);

/// A blocking HTTP client for the tests.
pub struct Api {
    pub base: String,
    /// The bearer token it sends (the server's admin token unless told otherwise).
    pub token: Option<String>,
    rt: tokio::runtime::Runtime,
    http: reqwest::Client,
}

/// The admin token a server wrote into its data directory.
pub fn admin_token(data_dir: &Path) -> String {
    std::fs::read_to_string(data_dir.join("admin.token")).expect("the server writes admin.token").trim().to_owned()
}

impl Api {
    pub fn new(base: String, token: Option<String>) -> Api {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let _ = rustls::crypto::ring::default_provider().install_default();
        // No pooled connections: a connection the server closed after refusing an oversized
        // body must not be reused by the next request.
        let http = reqwest::Client::builder().pool_max_idle_per_host(0).build().unwrap();
        Api { base, token, rt, http }
    }

    /// The same server, another token.
    pub fn as_token(&self, token: &str) -> Api {
        Api::new(self.base.clone(), Some(token.to_owned()))
    }

    /// A request with a YAML body (the API's inputs read JSON too, JSON being YAML).
    pub fn request(&self, method: &str, path: &str, body: Option<Vec<u8>>) -> (u16, Vec<u8>) {
        let headers: &[(&str, &str)] = if body.is_some() { &[("content-type", "application/yaml")] } else { &[] };
        self.request_with(method, path, body, headers)
    }

    /// A request with exactly these extra headers.
    pub fn request_with(
        &self,
        method: &str,
        path: &str,
        body: Option<Vec<u8>>,
        headers: &[(&str, &str)],
    ) -> (u16, Vec<u8>) {
        let url = format!("{}{path}", self.base);
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        self.rt.block_on(async {
            let mut req = self.http.request(method, &url);
            if let Some(token) = &self.token {
                req = req.bearer_auth(token);
            }
            for (name, value) in headers {
                req = req.header(*name, *value);
            }
            if let Some(body) = body {
                req = req.body(body);
            }
            match req.send().await {
                Ok(resp) => {
                    let status = resp.status().as_u16();
                    (status, resp.bytes().await.map(|b| b.to_vec()).unwrap_or_default())
                }
                Err(_) => (0, Vec::new()),
            }
        })
    }

    pub fn json(&self, method: &str, path: &str, body: Option<&str>) -> (u16, Value) {
        let (status, bytes) = self.request(method, path, body.map(|b| b.as_bytes().to_vec()));
        (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
    }

    pub fn submit(&self, yaml: &str) -> Vec<i64> {
        let (status, bytes) = self.request("POST", "/v1/jobs", Some(yaml.as_bytes().to_vec()));
        assert_eq!(status, 201, "{}", String::from_utf8_lossy(&bytes));
        let answer: SubmitResponse = serde_json::from_slice(&bytes).unwrap();
        answer.jobs.iter().map(|j| j.id).collect()
    }

    pub fn job(&self, id: i64) -> JobDetail {
        let (status, bytes) = self.request("GET", &format!("/v1/jobs/{id}"), None);
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&bytes));
        serde_json::from_slice(&bytes).unwrap()
    }

    pub fn jobs(&self, query: &str) -> Vec<JobView> {
        let (status, bytes) = self.request("GET", &format!("/v1/jobs?{query}"), None);
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&bytes));
        serde_json::from_slice::<JobList>(&bytes).unwrap().jobs
    }

    pub fn log(&self, id: i64) -> String {
        String::from_utf8(self.request("GET", &format!("/v1/jobs/{id}/logs"), None).1).unwrap()
    }

    /// Polls `f` until it returns `Some`, or fails the test with `what`.
    pub fn wait_for<T>(&self, what: &str, mut f: impl FnMut(&Api) -> Option<T>) -> T {
        let start = Instant::now();
        loop {
            if let Some(v) = f(self) {
                return v;
            }
            assert!(start.elapsed() < WAIT_MAX, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Submits one long 1-GPU trainer per name and waits until each runs.
    pub fn run_long_jobs(&self, project: &str, priority: &str, names: &[&str]) -> Vec<i64> {
        let ids: Vec<i64> =
            names.iter().map(|name| self.submit(&trainer_job(name, project, priority, 1, 100_000, 50))[0]).collect();
        for &id in &ids {
            self.wait_state(id, JobState::Running);
        }
        ids
    }

    pub fn wait_state(&self, id: i64, state: JobState) -> JobDetail {
        self.wait_for(&format!("job {id} to be {}", state.as_str()), |api| {
            let job = api.job(id);
            (job.job.state == state).then_some(job)
        })
    }
}

/// A server running in this test process.
pub struct InProcess {
    pub api: Api,
    pub data_dir: tempfile::TempDir,
    rt: Option<tokio::runtime::Runtime>,
    server: Option<fairway_server::RunningServer>,
    config: fairway_server::ServerConfig,
}

impl InProcess {
    pub fn start(gpus: &str, config_yaml: &str) -> InProcess {
        InProcess::start_with_clock(gpus, config_yaml, std::sync::Arc::new(fairway_server::clock::SystemClock))
    }

    /// A server whose scheduling reads `clock` (a test's own, to drive time).
    pub fn start_with_clock(
        gpus: &str,
        config_yaml: &str,
        clock: std::sync::Arc<dyn fairway_server::clock::Clock>,
    ) -> InProcess {
        let data_dir = tempfile::tempdir().unwrap();
        let mut config = fairway_server::ServerConfig::new(data_dir.path().to_path_buf());
        config.listen = "127.0.0.1:0".parse().unwrap();
        config.simulated_gpus = Some(gpus.into());
        config.gpu_model = "A100".into();
        config.tick_ms = 100;
        config.shim_exe = PathBuf::from(FAIRWAY);
        config.file = fairway_server::ConfigFile::parse(config_yaml).unwrap();
        // Tests must not leave records in the home directory of whoever runs them.
        config.registry_dir = None;
        // The same answers on machines with and without a container runtime.
        config.file.container_runtime.get_or_insert_with(|| "none".into());
        config.clock = clock;
        InProcess::serve(data_dir, config)
    }

    fn serve(data_dir: tempfile::TempDir, config: fairway_server::ServerConfig) -> InProcess {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let server = rt.block_on(fairway_server::start(config.clone())).unwrap();
        let api = Api::new(format!("http://{}", server.addr), Some(admin_token(data_dir.path())));
        InProcess { api, data_dir, rt: Some(rt), server: Some(server), config }
    }

    /// Shuts the server down as `fairway serve` does on SIGTERM (running jobs keep running)
    /// and starts a new one on the same data directory and settings.
    pub fn restart(self) -> InProcess {
        let file = self.config.file.clone();
        self.restart_with(file)
    }

    /// `restart`, with the config file `config_yaml` instead (an operator's edit).
    pub fn restart_with_config(self, config_yaml: &str) -> InProcess {
        let mut file = fairway_server::ConfigFile::parse(config_yaml).unwrap();
        file.container_runtime.get_or_insert_with(|| "none".into());
        self.restart_with(file)
    }

    fn restart_with(mut self, file: fairway_server::ConfigFile) -> InProcess {
        if let (Some(rt), Some(server)) = (self.rt.take(), self.server.take()) {
            rt.block_on(server.shutdown());
            rt.shutdown_timeout(Duration::from_secs(1));
        }
        let data_dir = std::mem::replace(&mut self.data_dir, tempfile::tempdir().unwrap());
        let mut config = self.config.clone();
        config.file = file;
        drop(self);
        InProcess::serve(data_dir, config)
    }
}

impl Drop for InProcess {
    fn drop(&mut self) {
        if let (Some(rt), Some(server)) = (self.rt.take(), self.server.take()) {
            rt.block_on(server.shutdown());
            rt.shutdown_timeout(Duration::from_secs(1));
        }
        kill_jobs_under(self.data_dir.path());
    }
}

/// Kills every shim left running for a data directory (tests must not leak processes).
pub fn kill_jobs_under(data_dir: &Path) {
    let Ok(entries) = std::fs::read_dir("/proc") else { return };
    let needle = data_dir.display().to_string();
    for entry in entries.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else { continue };
        let cmdline = String::from_utf8_lossy(&cmdline);
        if cmdline.contains("__shim") && cmdline.contains(&needle) {
            // A shim leads its job's process group; signal_group refuses 0 and 1.
            let _ = fairway_exec::signal_group(pid, fairway_exec::Signal::Kill);
        }
    }
}

/// A native job running the example trainer.
pub fn trainer_job(name: &str, project: &str, priority: &str, gpus: u32, steps: u64, step_ms: u64) -> String {
    format!(
        "---\nname: {name}\ntenant: {{ user: {project}-user, project: {project} }}\npriority: {priority}\n\
         resources: {{ gpus: {gpus} }}\n\
         command: [{FAIRWAY:?}, example-trainer, --steps, \"{steps}\", --checkpoint-every, \"5\", --step-ms, \"{step_ms}\"]\n\
         preemption_grace_seconds: 20\n"
    )
}

#[test]
fn high_priority_preempts_low_which_checkpoints_and_resumes() {
    let server = InProcess::start("2", "");
    let api = &server.api;
    let low = api.submit(&trainer_job("nightly", "vision", "low", 2, 80, 40))[0];
    api.wait_for("the low job to checkpoint", |api| api.log(low).contains("checkpoint saved at step 5").then_some(()));

    let high = api.submit(&trainer_job("ctr-model", "ads", "high", 2, 5, 20))[0];
    let high_done = api.wait_state(high, JobState::Succeeded);
    assert!(high_done.job.wait_seconds < 20.0, "high waited {}s", high_done.job.wait_seconds);
    let low_done = api.wait_state(low, JobState::Succeeded);
    assert_eq!((low_done.job.preemptions, low_done.job.restart_count, low_done.job.failures), (1, 1, 0));
    let log = api.log(low);
    assert!(log.contains("got SIGTERM"), "{log}");
    let resumed = log.lines().find(|l| l.starts_with("resumed from step")).unwrap_or_else(|| panic!("{log}"));
    assert!(resumed.ends_with("(restart 1)"), "{resumed}");
    let step: u64 = resumed.split_whitespace().nth(3).unwrap().parse().unwrap();
    assert!(step >= 5, "resumed from step {step}");
    let kinds: Vec<&str> = low_done.events.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(kinds, ["submitted", "started", "preempted", "requeued", "started", "succeeded"]);
    let preempting = &low_done.events[2];
    assert_eq!(preempting.reason.as_deref(), Some("preempted"));
    assert!(
        preempting.message.contains(&format!("preempted by ctr-model (job {high}), priority high")),
        "{preempting:?}"
    );
    // The victim exited after SIGTERM within its grace period, and the high job started on
    // its GPUs right after: its start follows the victim's exit, nothing else ran between.
    let requeued_at = low_done.events[3].at_ms;
    let high_started_at = high_done.job.first_started_at_ms.unwrap();
    assert!(high_started_at >= requeued_at && high_started_at - preempting.at_ms < 20_000);
    let high_kinds: Vec<&str> = high_done.events.iter().map(|e| e.kind.as_str()).collect();
    assert!(high_kinds.starts_with(&["submitted", "preempting"]), "{high_kinds:?}");
    assert!(
        high_done.events[1].message.contains(&format!("preempting nightly (job {low})")),
        "{:?}",
        high_done.events[1]
    );
    // Waits count every wait: the victim's second start says how long it waited again.
    let restarted = &low_done.events[4];
    assert!(restarted.message.contains("after waiting") && restarted.message.contains("again"), "{restarted:?}");
    // The preemption counts against the victim's queue (low, vision), and in the total.
    let (_, metrics) = api.request("GET", "/metrics", None);
    let metrics = String::from_utf8(metrics).unwrap();
    for line in [
        "fairway_queue_preemptions_total{tier=\"low\",tenant=\"vision\",cause=\"priority\"} 1",
        "fairway_preemptions_total 1",
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} missing from\n{metrics}");
    }
    assert!(!metrics.contains("fairway_queue_preemptions_total{tier=\"high\""), "{metrics}");
    // The work it lost: its 2 GPUs since its last checkpoint, at most its whole first run.
    let lost: f64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("fairway_queue_gpu_hours_lost_total{tier=\"low\",tenant=\"vision\"} "))
        .unwrap_or_else(|| panic!("no lost work for low/vision in\n{metrics}"))
        .parse()
        .unwrap();
    let first_run_hours = (requeued_at - low_done.events[1].at_ms) as f64 / 3_600_000.0;
    assert!((0.0..=2.0 * first_run_hours).contains(&lost), "lost {lost} GPU-h in a run of {first_run_hours} h");
}

#[test]
fn a_failing_job_is_retried_after_a_backoff_then_failed() {
    let server = InProcess::start("1", "retry_backoff: { initial_seconds: 2, max_seconds: 2 }\n");
    let api = &server.api;
    let job = format!(
        "name: flaky\ntenant: {{ project: p }}\nresources: {{ gpus: 1 }}\nretries: 1\n\
         command: [{FAIRWAY:?}, example-trainer, --steps, \"10\", --step-ms, \"1\", --fail-at-step, \"3\"]\n"
    );
    let id = api.submit(&job)[0];
    // Between the runs it waits out its backoff, and says so.
    let waiting = api.wait_for("the backoff to show", |api| {
        let job = api.job(id).job;
        job.reasons.iter().find(|r| r.code == "retry_backoff").cloned()
    });
    assert!(waiting.message.contains("returns to the queue in"), "{waiting:?}");
    let done = api.wait_state(id, JobState::Failed);
    assert_eq!((done.job.failures, done.job.restart_count, done.job.preemptions), (2, 1, 0));
    let kinds: Vec<&str> = done.events.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(kinds, ["submitted", "started", "retrying", "started", "failed"]);
    assert!(done.events[2].message.contains("runs again in 2s"), "{:?}", done.events[2]);
    assert!(done.events[3].at_ms >= done.events[2].at_ms + 2000, "retried before its backoff: {:?}", done.events);
    assert_eq!(done.job.exit_code, Some(1));
}

#[test]
fn quotas_bad_input_and_oversized_bodies_through_the_api() {
    let server = InProcess::start("4", "quotas:\n  - { project: ads, gpus_max: 2 }\n");
    let api = &server.api;
    let a = api.submit(&trainer_job("a", "ads", "critical", 2, 200, 50))[0];
    let b = api.submit(&trainer_job("b", "ads", "critical", 2, 5, 10))[0];
    api.wait_state(a, JobState::Running);
    let pending = api.wait_for("b to be held by the quota", |api| {
        let j = api.job(b).job;
        (j.reasons.first().map(|r| r.code.as_str()) == Some("over_quota")).then_some(j)
    });
    assert_eq!(pending.state, JobState::Pending);
    assert_eq!(pending.reasons[0].data["account"], "ads");
    assert_eq!(pending.reasons[0].message, "over quota: project ads uses 2 of its 2 GPUs; the job asks 2");
    assert_eq!(pending.reasons[0].data["limit_from"], "quota");
    let (status, quotas) = api.json("GET", "/v1/quotas", None);
    assert_eq!(status, 200);
    let ads = quotas["quotas"].as_array().unwrap().iter().find(|q| q["account"] == "ads").unwrap().clone();
    assert_eq!((ads["gpus_used"].as_u64(), ads["gpus_max"].as_u64()), (Some(2), Some(2)));

    // Raising the cap through the API lets b start.
    let (status, view) = api.json("PUT", "/v1/quotas/project/ads", Some(r#"{"gpus_max": 4}"#));
    assert_eq!(status, 200, "{view}");
    api.wait_for("b to leave the queue", |api| (api.job(b).job.state != JobState::Pending).then_some(()));
    let (status, err) = api.json("PUT", "/v1/quotas/team/ads", Some(r#"{"gpus_max": 4}"#));
    assert_eq!((status, err["error"]["code"].as_str()), (400, Some("bad_request")), "{err}");
    let (status, err) = api.json("PUT", "/v1/quotas/project/ads", Some(r#"{"gpu_max": 4}"#));
    assert_eq!(status, 400, "{err}");
    assert!(err["error"]["message"].as_str().unwrap().contains("gpu_max"), "{err}");

    // Bad submissions: 4xx with the document and field path, and nothing stored.
    let before = api.jobs("limit=10000").len();
    let cases = [
        ("name: x\ntenant: { project: p }\nresources: { gpus: 0 }\ncommand: [\"true\"]\n", "resources.gpus", 400),
        ("name: x\ntenant: { project: p }\nresources: { gpus: 9 }\ncommand: [\"true\"]\n", "resources.gpus", 422),
        (
            "name: x\ntenant: { project: p }\npriority: urgent\nresources: { gpus: 1 }\ncommand: [\"true\"]\n",
            "priority",
            400,
        ),
        (
            "name: x\ntenant: { project: p }\nresources: { gpus: 1, gpu_model: H100 }\ncommand: [\"true\"]\n",
            "resources.gpu_model",
            422,
        ),
        (
            "name: ok\ntenant: { project: p }\nresources: { gpus: 1 }\ncommand: [\"true\"]\n---\nname: x\ntenant: { project: p }\nresources: { gpus: 1 }\nreplica: 2\ncommand: [\"true\"]\n",
            "replica",
            400,
        ),
        (
            "name: x\ntenant: { project: p }\nresources: { gpus: 1 }\nimage: pytorch/pytorch\ncommand: [python]\n",
            "image",
            422,
        ),
        (
            "name: x\ntenant: { project: p }\nresources: { gpus: 1 }\npreemption_grace_seconds: 601\ncommand: [x]\n",
            "preemption_grace_seconds",
            400,
        ),
        // A gang larger than the whole (empty) cluster would wait forever.
        ("name: x\ntenant: { project: p }\nresources: { gpus: 4 }\nreplicas: 2\ncommand: [x]\n", "replicas", 422),
    ];
    for (body, path, want) in cases {
        let (status, err) = api.json("POST", "/v1/jobs", Some(body));
        assert_eq!(status, want, "{body}: {err}");
        let code = match want {
            400 => "invalid_spec",
            _ => err["error"]["code"].as_str().filter(|c| ["unschedulable", "unsupported"].contains(c)).unwrap_or("?"),
        };
        assert_eq!(err["error"]["code"], code, "{err}");
        let details = err["error"]["details"].as_array().unwrap();
        assert!(details.iter().any(|d| d["path"] == path), "{body}: want {path} in {err}");
    }
    let (status, _) = api.request("POST", "/v1/jobs", Some(vec![0xff, 0xfe, b'\n']));
    assert_eq!(status, 400);
    let huge = vec![b'#'; (1 << 20) + 1];
    let (status, body) = api.request("POST", "/v1/jobs", Some(huge));
    let err: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!((status, err["error"]["code"].as_str()), (413, Some("payload_too_large")));
    assert_eq!(api.jobs("limit=10000").len(), before, "a refused submission stored nothing");
    let (status, err) = api.json("GET", "/v1/jobs/999999", None);
    assert_eq!((status, err["error"]["code"].as_str()), (404, Some("not_found")));
    let (status, _) = api.json("GET", "/v1/jobs?state=sleeping", None);
    assert_eq!(status, 400);
}

#[test]
fn metrics_openapi_nodes_and_health() {
    let server = InProcess::start("2x4", "");
    let api = &server.api;
    let id = api.submit(&trainer_job("m", "p", "medium", 4, 100, 50))[0];
    let job = api.wait_state(id, JobState::Running).job;
    assert_eq!(job.placement.len(), 1, "a 4-GPU replica sits on one node");
    let (status, bytes) = api.request("GET", "/v1/nodes", None);
    assert_eq!(status, 200);
    let nodes: NodeList = serde_json::from_slice(&bytes).unwrap();
    assert_eq!((nodes.nodes.len(), nodes.gpu_source.as_str()), (2, "simulated"));
    let busy: u32 = nodes.nodes.iter().map(|n| n.gpus_allocated).sum();
    assert_eq!(busy, 4);
    let (status, metrics) = api.request("GET", "/metrics", None);
    let metrics = String::from_utf8(metrics).unwrap();
    assert_eq!(status, 200);
    for needle in [
        "fairway_jobs{tier=\"medium\",state=\"running\"} 1",
        "fairway_job_wait_seconds_count{tier=\"medium\",tenant=\"p\"} 1",
        "fairway_gpus 8",
        "fairway_preemptions_total 0",
        "fairway_scheduling_cycle_seconds_count",
    ] {
        assert!(metrics.contains(needle), "{needle} missing from\n{metrics}");
    }
    // Two more 4-GPU jobs: one fills the other node, the last waits for m (100 s) or the
    // second, and its queue's head-of-queue estimate is a metric.
    let second = api.submit(&trainer_job("m2", "p", "medium", 4, 100, 50))[0];
    api.wait_state(second, JobState::Running);
    let waiting = api.submit(&trainer_job("m3", "p", "medium", 4, 100, 50))[0];
    let estimate = api.job(waiting).job.start_estimate.expect("a pending job has an estimate");
    assert_eq!(estimate.kind, "at");
    let deadline = Instant::now() + Duration::from_secs(20);
    let gauge = loop {
        let (_, metrics) = api.request("GET", "/metrics", None);
        let metrics = String::from_utf8(metrics).unwrap();
        let line = metrics
            .lines()
            .find(|l| l.starts_with("fairway_queue_head_start_estimate_seconds{tier=\"medium\",tenant=\"p\"}"));
        if let Some(line) = line {
            break line.rsplit(' ').next().unwrap().parse::<u64>().unwrap();
        }
        assert!(Instant::now() < deadline, "no head-of-queue estimate in\n{metrics}");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(gauge <= 3_600, "the medium head is expected within the default hour, got {gauge} s");
    api.json("POST", &format!("/v1/jobs/{second}/cancel"), None);
    api.json("POST", &format!("/v1/jobs/{waiting}/cancel"), None);
    let (status, spec) = api.request("GET", "/openapi.yaml", None);
    assert_eq!(status, 200);
    let spec = String::from_utf8(spec).unwrap();
    for (method, path) in fairway_server::http::ROUTES {
        let at = spec.find(&format!("\n  {path}:\n")).unwrap_or_else(|| panic!("{path} missing from openapi.yaml"));
        let section = &spec[at..];
        let end = section[1..].find("\n  /").map_or(section.len(), |e| e + 1);
        assert!(section[..end].contains(&format!("\n    {method}:")), "{method} {path} missing from openapi.yaml");
    }
    let (status, health) = api.json("GET", "/healthz", None);
    assert_eq!((status, health["gpus_total"].as_u64()), (200, Some(8)));
    api.json("POST", &format!("/v1/jobs/{id}/cancel"), None);
    let cancelled = api.wait_state(id, JobState::Cancelled);
    assert_eq!(cancelled.events.last().unwrap().kind, "cancelled");
}

/// `fairway serve` as a child process, for kill -9. Killed when dropped, so that a failing
/// test leaves no server behind.
pub struct ServeProcess {
    pub child: Child,
    pub base: String,
}

impl Drop for ServeProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve(data_dir: &Path) -> ServeProcess {
    serve_with(data_dir, &["--gpus", "4"], None)
}

/// `fairway serve` on `data_dir` with `args` (GPUs, config), from `cwd` if given; its
/// registry record stays in a directory of the test's.
pub fn serve_with(data_dir: &Path, args: &[&str], cwd: Option<&Path>) -> ServeProcess {
    let mut command = Command::new(FAIRWAY);
    command
        .args(["serve", "--gpu-model", "A100", "--listen", "127.0.0.1:0", "--tick-ms", "100"])
        .args(args)
        .arg("--data-dir")
        .arg(data_dir)
        .env("XDG_STATE_HOME", std::env::temp_dir().join(format!("fairway-test-state-{}", std::process::id())))
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    if let Some(cwd) = cwd {
        command.current_dir(cwd);
    }
    let mut child = command.spawn().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    // Keep reading: a server whose stdout is closed would fail to print when it stops.
    std::thread::spawn(move || std::io::copy(&mut stdout, &mut std::io::sink()));
    let base =
        line.split_whitespace().find(|w| w.starts_with("http://")).unwrap_or_else(|| panic!("{line}")).to_owned();
    ServeProcess { child, base }
}

#[test]
fn kill_9_loses_no_acknowledged_job_and_readopts_running_ones() {
    let data_dir = tempfile::tempdir().unwrap();
    let mut first = serve(data_dir.path());
    let token = Some(admin_token(data_dir.path()));
    let api = Api::new(first.base.clone(), token.clone());
    let running: Vec<i64> =
        (0..2).map(|i| api.submit(&trainer_job(&format!("long-{i}"), "p", "medium", 2, 150, 40))[0]).collect();
    for &id in &running {
        api.wait_state(id, JobState::Running);
    }
    let before: Vec<JobView> = running.iter().map(|&id| api.job(id).job).collect();
    // Three jobs that cannot start while the long runs hold their GPUs: their queue order is
    // priority first, then submission (p1 before p3 although both are low).
    let p1 = api.submit(&trainer_job("p1", "p", "low", 4, 3, 10))[0];
    let p2 = api.submit(&(trainer_job("p2", "p", "medium", 4, 3, 10) + "preemption_policy: Never\n"))[0];
    let p3 = api.submit(&trainer_job("p3", "p", "low", 4, 3, 10))[0];
    let queue_order = |api: &Api| {
        let mut positioned: Vec<(u64, i64)> =
            [p1, p2, p3].iter().map(|&id| (api.job(id).job.queue_position.expect("pending"), id)).collect();
        positioned.sort();
        positioned.into_iter().map(|(_, id)| id).collect::<Vec<_>>()
    };
    assert_eq!(queue_order(&api), [p2, p1, p3]);
    // Each has an expected start, in queue order: a job ranked lower never goes first in
    // the forecast when all three need what the long runs hold.
    let expected_starts: Vec<u64> = [p2, p1, p3]
        .iter()
        .map(|&id| {
            let e = api.job(id).job.start_estimate.expect("a pending job has an estimate");
            assert_eq!(e.kind, "at", "{e:?}");
            e.at_ms.expect("a time")
        })
        .collect();
    assert!(expected_starts.is_sorted(), "{expected_starts:?}");
    assert!(before.iter().all(|j| j.start_estimate.is_none()), "running jobs have no estimate");

    // Submissions in flight while the server dies: every one answered 201 must survive.
    let base = first.base.clone();
    let submitter_token = token.clone();
    let submitter = std::thread::spawn(move || {
        let api = Api::new(base, submitter_token);
        let mut acknowledged = Vec::new();
        for i in 0.. {
            let (status, bytes) = api.request(
                "POST",
                "/v1/jobs",
                Some(trainer_job(&format!("q-{i}"), "p", "low", 1, 3, 10).into_bytes()),
            );
            if status != 201 {
                break;
            }
            let answer: SubmitResponse = serde_json::from_slice(&bytes).unwrap();
            acknowledged.push(answer.jobs[0].id);
        }
        acknowledged
    });
    std::thread::sleep(Duration::from_millis(300));
    first.child.kill().unwrap();
    first.child.wait().unwrap();
    let acknowledged = submitter.join().unwrap();
    assert!(!acknowledged.is_empty(), "some submissions were acknowledged before the kill");

    let mut second = serve(data_dir.path());
    let api = Api::new(second.base.clone(), token.clone());
    for &id in &acknowledged {
        let (status, _) = api.request("GET", &format!("/v1/jobs/{id}"), None);
        assert_eq!(status, 200, "acknowledged job {id} lost");
    }
    assert_eq!(queue_order(&api), [p2, p1, p3], "pending jobs keep their order across the restart");
    for old in &before {
        let now = api.job(old.id).job;
        assert_eq!(now.state, JobState::Running, "job {} re-adopted", old.id);
        assert_eq!(
            (now.placement.clone(), now.started_at_ms, now.restart_count),
            (old.placement.clone(), old.started_at_ms, 0)
        );
    }
    // Nothing runs twice on one GPU while the adopted runs hold theirs.
    let nodes: NodeList = serde_json::from_slice(&api.request("GET", "/v1/nodes", None).1).unwrap();
    let running_now = api.jobs("state=running,preempting,stopping");
    let mut gpus: Vec<(String, u32)> = running_now
        .iter()
        .flat_map(|j| j.placement.iter().flat_map(|r| r.gpus.iter().map(|g| (r.node.clone(), *g))))
        .collect();
    let n = gpus.len();
    gpus.sort();
    gpus.dedup();
    assert_eq!(gpus.len(), n, "a GPU is assigned twice: {running_now:?}");
    assert!(nodes.nodes[0].gpus_allocated <= 4);

    for &id in running.iter().chain(&acknowledged).chain(&[p1, p2, p3]) {
        api.wait_state(id, JobState::Succeeded);
    }
    for &id in &running {
        let log = api.log(id);
        assert!(!log.contains("resumed from step"), "re-adopted, not restarted: {log}");
        assert_eq!(log.matches("starting from step 0").count(), 1, "{log}");
    }
    second.child.kill().unwrap();
    second.child.wait().unwrap();
    kill_jobs_under(data_dir.path());
}

fn cli(server: &InProcess, args: &[&str], stdin: Option<&str>) -> (i32, String, String) {
    cli_as(&server.api.base, server.api.token.as_deref(), args, stdin)
}

/// The `fairway` CLI against `base` with `token` in its environment, nothing from the
/// environment of the test (no server, token or home of the person running it).
fn cli_as(base: &str, token: Option<&str>, args: &[&str], stdin: Option<&str>) -> (i32, String, String) {
    use std::io::Write;
    let mut command = Command::new(FAIRWAY);
    command.env_remove("FAIRWAY_TOKEN").env_remove("FAIRWAY_TOKEN_FILE").env("HOME", "/nonexistent");
    if let Some(token) = token {
        command.env("FAIRWAY_TOKEN", token);
    }
    let mut child = command
        .args(["--server", base])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    if let Some(text) = stdin {
        input.write_all(text.as_bytes()).unwrap();
    }
    drop(input);
    let out = child.wait_with_output().unwrap();
    let text = |b: Vec<u8>| String::from_utf8(b).unwrap();
    (out.status.code().unwrap_or(-1), text(out.stdout), text(out.stderr))
}

#[test]
fn cli_submit_ls_describe_logs_cancel_against_a_live_server() {
    let server = InProcess::start("2", "");
    let base = &server;
    let (code, out, err) = cli(base, &["submit", "-f", "-"], Some(&trainer_job("busy", "vision", "low", 2, 400, 50)));
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("job/busy submitted (id 1)"), "{out}");
    server.api.wait_state(1, JobState::Running);
    // A medium job that may not preempt: it waits, and says why.
    let waiting = trainer_job("waiting", "ads", "medium", 2, 5, 10) + "preemption_policy: Never\n";
    let (code, out, err) = cli(base, &["submit", "-f", "-"], Some(&waiting));
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("job/waiting submitted (id 2)"), "{out}");
    server.api.wait_for("a reason for the waiting job", |api| (!api.job(2).job.reasons.is_empty()).then_some(()));

    let (code, out, err) = cli(base, &["ls"], None);
    assert_eq!(code, 0, "{err}");
    let busy = out.lines().find(|l| l.contains("busy")).unwrap_or_else(|| panic!("{out}"));
    assert!(busy.contains("running") && busy.contains("vision"), "{busy}");
    let waiting = out.lines().find(|l| l.contains("waiting")).unwrap_or_else(|| panic!("{out}"));
    assert!(waiting.contains("pending") && waiting.contains("no_fit") && waiting.contains("+1 more"), "{waiting}");

    let (code, out, err) = cli(base, &["describe", "waiting"], None);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("preemption_disabled") && out.contains("submitted"), "{out}");

    server.api.wait_for("the busy job's output", |api| api.log(1).contains("step 2/400").then_some(()));
    let (code, out, err) = cli(base, &["logs", "busy", "--tail", "50"], None);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("starting from step 0") && out.contains("step 1/400"), "{out}");

    let (code, out, err) = cli(base, &["cancel", "busy"], None);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains('1'), "{out}");
    server.api.wait_state(1, JobState::Cancelled);
    server.api.wait_state(2, JobState::Succeeded);
    let (code, out, _) = cli(base, &["ls", "-A", "-o", "json"], None);
    assert_eq!(code, 0);
    let list: JobList = serde_json::from_str(&out).unwrap();
    let states: Vec<(String, JobState)> = list.jobs.into_iter().map(|j| (j.name, j.state)).collect();
    assert_eq!(states, [("waiting".to_string(), JobState::Succeeded), ("busy".to_string(), JobState::Cancelled)]);

    let (code, _, err) = cli(base, &["describe", "nope"], None);
    assert_eq!(code, 1);
    assert!(err.contains("nope"), "{err}");
    let (code, _, err) = cli(
        base,
        &["submit", "-f", "-"],
        Some("name: x\ntenant: { project: p }\nresources: { gpus: 3 }\ncommand: [a]\n"),
    );
    assert_eq!(code, 1);
    assert!(err.contains("resources.gpus"), "{err}");
}

/// Processes whose command line contains `needle`.
pub fn processes_with(needle: &str) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else { continue };
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        let zombie = stat.rsplit(')').next().is_some_and(|rest| rest.trim_start().starts_with('Z'));
        if !zombie && String::from_utf8_lossy(&cmdline).replace('\0', " ").contains(needle) {
            found.push(pid);
        }
    }
    found
}

#[test]
fn children_left_behind_by_a_finished_job_are_killed() {
    let server = InProcess::start("1", "");
    let api = &server.api;
    // The job's shell exits at once, leaving a background child in its process group.
    let marker = format!("{}.{}", std::process::id(), 4242);
    let job = format!(
        "name: leaky\ntenant: {{ project: p }}\nresources: {{ gpus: 1 }}\nshell: true\n\
         command: [\"sleep {marker} & echo started\"]\n"
    );
    let id = api.submit(&job)[0];
    api.wait_state(id, JobState::Succeeded);
    assert!(processes_with(&format!("sleep {marker}")).is_empty(), "a leftover process still runs");
}

/// Rule 1 from the server's config: a class with a minimum run protects a fresh run; the
/// high job waits, says why and until when, and preempts once the minimum run is over.
/// Waits until `GET /v1/jobs/{job}/why` gives a reason with `code`, and returns it.
/// A preemptor does not wait out its victim's grace period when a GPU frees elsewhere first
/// (the core's cycle step 3b): on two 1-GPU nodes, `nightly` (low; it ignores SIGTERM and
/// has a 10-minute grace period) and `short` (medium, a few seconds) run; `urgent` (high)
/// preempts `nightly` and starts on `short`'s GPU when `short` ends, while `nightly` is
/// still stopping. (That `nightly` stops all the same and is requeued is the core's
/// scenario 155; its kill at the end of a grace period, the preemption test above.)
#[test]
fn a_preemptor_starts_where_a_gpu_frees_before_its_victim_has_stopped() {
    let server = InProcess::start("2x1", "");
    let api = &server.api;
    let stubborn = "---\nname: nightly\ntenant: { user: vision-user, project: vision }\npriority: low\n\
                    resources: { gpus: 1 }\ncommand: [sh, -c, \"trap '' TERM; echo ignoring SIGTERM; sleep 3600\"]\n\
                    preemption_grace_seconds: 600\n";
    let nightly = api.submit(stubborn)[0];
    let short = api.submit(&trainer_job("short", "ads", "medium", 1, 40, 100))[0];
    // Its shell ignores SIGTERM only once it has run the trap.
    api.wait_for("nightly to ignore SIGTERM", |api| api.log(nightly).contains("ignoring SIGTERM").then_some(()));
    let short_node = api.wait_state(short, JobState::Running).job.placement[0].node.clone();
    let urgent = api.submit(&trainer_job("urgent", "ads", "high", 1, 100, 50))[0];
    wait_for_reason(api, urgent, "waiting_for_preemption");

    let urgent_view = api.wait_state(urgent, JobState::Running);
    assert_eq!(urgent_view.job.placement[0].node, short_node, "urgent runs on the GPU short freed");
    api.wait_state(short, JobState::Succeeded);
    let victim = api.job(nightly).job;
    assert_eq!(victim.state, JobState::Preempting, "the victim is still stopping");
    assert_eq!(victim.preemption.as_ref().map(|p| p.preemptor), Some(urgent), "{victim:?}");
    let started = urgent_view.events.iter().find(|e| e.kind == "started").expect("a started event");
    assert!(
        started.message.contains(&format!("on GPUs that freed before nightly (job {nightly}) had stopped")),
        "{started:?}"
    );
    let metrics = String::from_utf8(api.request("GET", "/metrics", None).1).unwrap();
    for line in ["fairway_preemptors_moved_total 1", "fairway_preemptions_total 1"] {
        assert!(metrics.lines().any(|l| l == line), "{line} missing from\n{metrics}");
    }
}

fn wait_for_reason(api: &Api, job: i64, code: &str) -> Value {
    api.wait_for(&format!("job {job} to say {code}"), |api| {
        let (_, why) = api.json("GET", &format!("/v1/jobs/{job}/why"), None);
        why["reasons"].as_array()?.iter().find(|r| r["code"] == code).cloned()
    })
}

/// Reservations with backfill (`reservations:` in the config, docs/reservations.md): on two
/// nodes of 4 GPUs, a 4-GPU and a 2-GPU run with limits hold six; a gang of two 4-GPU
/// replicas then reserves both nodes for when they are expected to end. Of two 1-GPU jobs
/// ranked below it, the one without a limit (expected to run the default 600 s) would run
/// past that and is held for the reservation; the one with a 30 s limit ends before and
/// starts at once on the free GPUs. Every pending job has its place and expected start.
#[test]
fn a_reservation_holds_a_long_job_back_and_lets_a_short_one_through() {
    let config = "reservations: { count: 1, default_runtime_seconds: 600 }\n";
    let server = InProcess::start("2x4", config);
    let api = &server.api;
    let limited = |name: &str, gpus: u32, seconds: u32| {
        trainer_job(name, "vision", "low", gpus, 100_000, 50) + &format!("max_runtime_seconds: {seconds}\n")
    };
    let whole = api.submit(&limited("whole-node", 4, 300))[0];
    let half = api.submit(&limited("half-node", 2, 300))[0];
    let starts: Vec<u64> =
        [whole, half].iter().map(|&id| api.wait_state(id, JobState::Running).job.started_at_ms.unwrap()).collect();
    let gang = api.submit(&(trainer_job("gang", "speech", "low", 4, 10, 10) + "replicas: 2\n"))[0];
    let long = api.submit(&trainer_job("long", "speech", "low", 1, 10, 10))[0];
    let short = api.submit(&limited("short", 1, 30))[0];

    // Both runs end at their limit plus the 20 s grace of the stop there.
    let expected_at = starts.iter().max().unwrap() + 320_000;
    let held = wait_for_reason(api, long, "held_for_reservation");
    assert_eq!(
        (held["data"]["job"].as_i64(), held["data"]["at_ms"].as_u64()),
        (Some(gang), Some(expected_at)),
        "{held}"
    );
    let message = held["message"].as_str().unwrap();
    assert!(message.contains(&format!("gang (job {gang})")), "{message}");
    assert!(
        message.contains(&format!("expected to start at {}:", fairway_server::clock::time_text(expected_at))),
        "{message}"
    );
    api.wait_state(short, JobState::Running);

    let gang_view = api.job(gang).job;
    assert_eq!(gang_view.queue_position, Some(1));
    assert_eq!(gang_view.start_estimate.as_ref().and_then(|e| e.at_ms), Some(expected_at), "{gang_view:?}");
    // The gang's reservation itself: one replica of 4 GPUs on each node, by then.
    let (status, nodes) = api.json("GET", "/v1/nodes", None);
    assert_eq!(status, 200);
    let names: Vec<&str> = nodes["nodes"].as_array().unwrap().iter().map(|n| n["name"].as_str().unwrap()).collect();
    let reservation = gang_view.reservation.as_ref().expect("the gang holds the reservation");
    assert_eq!(reservation.at_ms, expected_at);
    let reserved: Vec<(&str, u32, u32)> =
        reservation.nodes.iter().map(|n| (n.node.as_str(), n.replicas, n.gpus)).collect();
    assert_eq!(reserved, names.iter().map(|&n| (n, 1, 4)).collect::<Vec<_>>());
    // The node list says the same, node by node: why free GPUs there may stay idle.
    for node in nodes["nodes"].as_array().unwrap() {
        let on_node = &node["reservations"];
        assert_eq!(on_node.as_array().map(Vec::len), Some(1), "{node}");
        let one = &on_node[0];
        assert_eq!(
            (one["job"].as_i64(), one["gpus"].as_u64(), one["at_ms"].as_u64()),
            (Some(gang), Some(4), Some(expected_at)),
            "{node}"
        );
    }
    let (code, out, err) = cli(&server, &["nodes"], None);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.matches(&format!("4 for job {gang} in ")).count(), 2, "{out}");
    let (status, why) = api.json("GET", &format!("/v1/jobs/{gang}/why"), None);
    assert_eq!((status, why["reservation"]["at_ms"].as_u64()), (200, Some(expected_at)), "{why}");
    assert_eq!(why["start_estimate"]["at_ms"].as_u64(), Some(expected_at), "{why}");
    // The fleet's view of why jobs wait: one held for the reservation, the gang for room.
    let by_reason = |metrics: &str| -> Vec<String> {
        let prefix = "fairway_pending_jobs_by_reason{tier=\"low\",reason=";
        let mut lines: Vec<String> =
            metrics.lines().filter_map(|l| l.strip_prefix(prefix)).map(str::to_owned).collect();
        lines.sort_unstable();
        lines
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    let want = ["\"held_for_reservation\"} 1", "\"no_fit\"} 1"];
    loop {
        let metrics = String::from_utf8(api.request("GET", "/metrics", None).1).unwrap();
        if by_reason(&metrics) == want {
            break;
        }
        assert!(Instant::now() < deadline, "{:?} in\n{metrics}", by_reason(&metrics));
        std::thread::sleep(Duration::from_millis(100));
    }
    let long_view = api.job(long).job;
    assert_eq!(long_view.reservation, None, "held, not holding");
    assert_eq!(long_view.queue_position, Some(2));
    let long_at = long_view.start_estimate.as_ref().and_then(|e| e.at_ms).expect("an expected start");
    assert_eq!(long_at, expected_at + 600_000, "after the gang's expected 600 s: {long_view:?}");
    for id in [whole, half, gang, long, short] {
        api.json("POST", &format!("/v1/jobs/{id}/cancel"), None);
    }
}

#[test]
fn a_class_minimum_run_protects_a_fresh_run_from_preemption() {
    let config = "priority_classes:\n  - { name: guarded, value: 500, min_run_before_preemption_seconds: 3, \
                  preemptions_per_hour_max: 2 }\n";
    let server = InProcess::start("1", config);
    let api = &server.api;
    let (status, classes) = api.json("GET", "/v1/priority-classes", None);
    assert_eq!(status, 200);
    let guarded = classes["priority_classes"].as_array().unwrap().iter().find(|c| c["name"] == "guarded").cloned();
    let guarded = guarded.expect("the config's class is listed");
    assert_eq!(
        (&guarded["min_run_before_preemption_seconds"], &guarded["preemptions_per_hour_max"]),
        (&3.into(), &2.into())
    );

    let low = api.submit(&trainer_job("nightly", "vision", "guarded", 1, 400, 50))[0];
    let started = api.wait_state(low, JobState::Running).job.started_at_ms.unwrap();
    let high = api.submit(&trainer_job("ctr-model", "ads", "high", 1, 2, 10))[0];
    let protected = wait_for_reason(api, high, "victims_protected");
    let until = protected["data"]["until_ms"].as_u64().unwrap_or_else(|| panic!("{protected}"));
    assert_eq!(until, started + 3_000, "protected until the end of the minimum run: {protected}");
    let message = protected["message"].as_str().unwrap();
    assert!(message.ends_with(&format!("ends at {}", fairway_server::clock::time_text(until))), "{message}");
    let high_done = api.wait_state(high, JobState::Succeeded);
    let preempted = api.job(low).events.into_iter().find(|e| e.kind == "preempted").expect("preempted after all");
    assert!(preempted.at_ms >= started + 3_000, "preempted {} ms into its run", preempted.at_ms - started);
    assert!(high_done.job.first_started_at_ms.unwrap() >= started + 3_000);
}

#[test]
fn a_class_preemption_delay_makes_its_jobs_wait_before_preempting() {
    let config = "priority_classes:\n  - { name: patient, value: 500000, preemption_delay_seconds: 2 }\n";
    let server = InProcess::start("1", config);
    let api = &server.api;
    let (_, classes) = api.json("GET", "/v1/priority-classes", None);
    let patient = classes["priority_classes"].as_array().unwrap().iter().find(|c| c["name"] == "patient").cloned();
    assert_eq!(patient.expect("the config's class is listed")["preemption_delay_seconds"], 2);

    let low = api.submit(&trainer_job("nightly", "vision", "low", 1, 400, 50))[0];
    api.wait_state(low, JobState::Running);
    let urgent = api.submit(&trainer_job("ctr-model", "ads", "patient", 1, 2, 10))[0];
    let submitted = api.job(urgent).job.submitted_at_ms;
    let delayed = wait_for_reason(api, urgent, "preemption_delayed");
    assert_eq!(delayed["data"]["until_ms"].as_u64(), Some(submitted + 2_000), "{delayed}");
    let message = delayed["message"].as_str().unwrap();
    let when = fairway_server::clock::time_text(submitted + 2_000);
    assert!(message.ends_with(&format!("may preempt from {when}")) && when.ends_with('Z'), "{message}");
    let done = api.wait_state(urgent, JobState::Succeeded);
    let preempted = api.job(low).events.into_iter().find(|e| e.kind == "preempted").expect("preempted after all");
    assert!(preempted.at_ms >= submitted + 2_000, "preempted {} ms after the submit", preempted.at_ms - submitted);
    assert!(done.job.first_started_at_ms.unwrap() >= submitted + 2_000);
}

/// The server's clock drives its decisions: an hour's preemption delay and a token's
/// expiry, tested in seconds with a clock the test moves.
#[test]
fn a_test_clock_drives_an_hour_long_delay_and_a_tokens_expiry() {
    let clock = std::sync::Arc::new(fairway_server::clock::ManualClock::from_now());
    let config = "priority_classes:\n  - { name: patient, value: 500000, preemption_delay_seconds: 3600 }\n";
    let server = InProcess::start_with_clock("1", config, clock.clone());
    let api = &server.api;
    let body = serde_json::json!({"user": "ann", "project": "ads", "expires_in_seconds": 60}).to_string();
    let (status, created) = api.json("POST", "/v1/tokens", Some(&body));
    assert_eq!(status, 201, "{created}");
    let ann = Api::new(api.base.clone(), Some(created["secret"].as_str().unwrap().to_owned()));
    assert_eq!(ann.request("GET", "/v1/jobs", None).0, 200);

    let low = api.submit(&trainer_job("nightly", "vision", "low", 1, 400, 50))[0];
    api.wait_state(low, JobState::Running);
    let urgent = api.submit(&trainer_job("ctr-model", "ads", "patient", 1, 2, 10))[0];
    let submitted = api.job(urgent).job.submitted_at_ms;
    let delayed = wait_for_reason(api, urgent, "preemption_delayed");
    assert_eq!(delayed["data"]["until_ms"].as_u64(), Some(submitted + 3_600_000), "{delayed}");

    clock.advance(3_600_000);
    let done = api.wait_state(urgent, JobState::Succeeded);
    assert!(done.job.first_started_at_ms.unwrap() >= submitted + 3_600_000);
    assert!(api.job(low).events.iter().any(|e| e.kind == "preempted" && e.at_ms >= submitted + 3_600_000));
    let (status, answer) = ann.json("GET", "/v1/jobs", None);
    assert_eq!(status, 401, "the token expired an hour ago by the server's clock: {answer}");
}

/// The queue gauges an alert reads (the article's: a medium job pending over 30 minutes),
/// with a clock the test moves: on one GPU a medium job of vision runs, and a medium job of
/// vision and one of ads wait (same tier: nothing is preempted). 31 minutes later each
/// queue's longest wait is 1,860 s and its pending count 1, the one per-job series the config
/// asks for names vision's job, and vision's quota gauges show it at its cap; once ads's job is cancelled its queue loses its series, and vision's goes on
/// counting.
#[test]
fn queue_gauges_show_how_long_each_tier_and_tenant_has_waited() {
    let clock = std::sync::Arc::new(fairway_server::clock::ManualClock::from_now());
    let server = InProcess::start_with_clock("1", "metrics: { pending_job_series_max: 1 }\n", clock.clone());
    let api = &server.api;
    let running = api.submit(&trainer_job("nightly", "vision", "medium", 1, 100_000, 50))[0];
    api.wait_state(running, JobState::Running);
    let retrain = api.submit(&trainer_job("retrain", "vision", "medium", 1, 2, 10))[0];
    let ads = api.submit(&trainer_job("ctr", "ads", "medium", 1, 2, 10))[0];
    let gauge = |metrics: &str, name: &str, tenant: &str| -> Option<i64> {
        let prefix = format!("{name}{{tier=\"medium\",tenant=\"{tenant}\"}} ");
        metrics.lines().find_map(|l| l.strip_prefix(prefix.as_str())).map(|v| v.parse().unwrap())
    };
    let scrape_until = |what: &str, done: &dyn Fn(&str) -> bool| -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let (_, metrics) = api.request("GET", "/metrics", None);
            let metrics = String::from_utf8(metrics).unwrap();
            if done(&metrics) {
                return metrics;
            }
            assert!(Instant::now() < deadline, "{what}, in\n{metrics}");
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    let (status, body) = api.json("PUT", "/v1/quotas/project/vision", Some(r#"{"gpus_max": 1}"#));
    assert_eq!(status, 200, "{body}");
    clock.advance(1_860_000);
    let oldest = "fairway_queue_oldest_pending_seconds";
    let metrics = scrape_until("no 31-minute wait", &|m| gauge(m, oldest, "vision") == Some(1_860));
    assert_eq!(gauge(&metrics, oldest, "ads"), Some(1_860));
    for tenant in ["vision", "ads"] {
        assert_eq!(gauge(&metrics, "fairway_queue_pending_jobs", tenant), Some(1), "{tenant}");
    }
    assert_eq!(gauge(&metrics, "fairway_queue_pending_jobs", "nobody"), None);
    // The GPU each queue holds: vision's running job; ads holds nothing (no series).
    assert_eq!(gauge(&metrics, "fairway_queue_gpus_allocated", "vision"), Some(1));
    assert_eq!(gauge(&metrics, "fairway_queue_gpus_allocated", "ads"), None);
    // One per-job series, as configured: of the two that waited as long, the first by id.
    let per_job: Vec<&str> = metrics.lines().filter(|l| l.starts_with("fairway_job_pending_seconds{")).collect();
    let want = format!(
        "fairway_job_pending_seconds{{tier=\"medium\",tenant=\"vision\",job_name=\"retrain\",job_id=\"{retrain}\"}} 1860"
    );
    assert_eq!(per_job, [want.as_str()]);
    // Quota use against the cap, per account: vision at its cap of 1 GPU, its user holding
    // the same GPU without a cap, ads holding nothing and capped by nothing (no series).
    let account = |name: &str, kind: &str, account: &str| {
        let prefix = format!("{name}{{kind=\"{kind}\",account=\"{account}\"}} ");
        metrics.lines().find_map(|l| l.strip_prefix(prefix.as_str())).map(|v| v.parse::<i64>().unwrap())
    };
    assert_eq!(account("fairway_quota_gpus_used", "project", "vision"), Some(1));
    assert_eq!(account("fairway_quota_gpus_max", "project", "vision"), Some(1));
    assert_eq!(account("fairway_quota_gpus_used", "user", "vision-user"), Some(1));
    assert_eq!(account("fairway_quota_gpus_max", "user", "vision-user"), None);
    assert_eq!(account("fairway_quota_gpus_used", "project", "ads"), None);

    api.json("POST", &format!("/v1/jobs/{ads}/cancel"), None);
    api.wait_state(ads, JobState::Cancelled);
    clock.advance(1_000);
    let metrics = scrape_until("ads's queue kept its series", &|m| gauge(m, oldest, "ads").is_none());
    assert_eq!(gauge(&metrics, oldest, "vision"), Some(1_861));
    assert_eq!(gauge(&metrics, "fairway_queue_pending_jobs", "ads"), None);
}

/// Fair sharing from the config file: on 2 GPUs the sweep holds one with a long job and
/// one with a short one, and queues another; nlp queues one after it. When the short job
/// ends, the freed GPU goes to nlp's job (nlp holds nothing, the sweep a GPU), though the
/// sweep's was submitted first.
#[test]
fn fair_sharing_in_the_config_serves_the_tenant_holding_least_first() {
    let config = "fair_share: { half_life_seconds: 0, weights: [{ project: nlp, weight: 2 }] }\n";
    let server = InProcess::start("2", config);
    let api = &server.api;
    let long = api.submit(&trainer_job("long", "sweep", "medium", 1, 200, 50))[0];
    let short = api.submit(&trainer_job("short", "sweep", "medium", 1, 100, 50))[0];
    api.wait_state(long, JobState::Running);
    api.wait_state(short, JobState::Running);
    let queued = api.submit(&trainer_job("queued", "sweep", "medium", 1, 2, 10))[0];
    let light = api.submit(&trainer_job("light", "nlp", "medium", 1, 2, 10))[0];
    // While both wait (the short job runs 5 s), nlp's job, submitted last but holding
    // least, is first in line.
    let positions = [light, queued].map(|id| api.job(id).job.queue_position);
    // And `fairway why` says where the sweep's job stands, and what ranks it there.
    let (code, why, err) = cli(&server, &["why", &queued.to_string()], None);
    assert_eq!(api.job(short).job.state, JobState::Running, "positions read while both waited");
    assert_eq!(positions, [Some(1), Some(2)], "nlp's job first, then the sweep's");
    assert_eq!(code, 0, "{err}");
    let line =
        "it is number 2 in the queue; fair sharing ranks it by its project's share 2.0000, then its user's 2.0000";
    assert!(why.contains(line), "{why}");
    // Each account's share, by the documented formula: with a half-life of 0 what it held
    // recently is what it holds, so (held + held) / capacity over its weight. The sweep's
    // project and user hold both GPUs: 2; nlp holds nothing: 0.
    let (_, quotas) = api.json("GET", "/v1/quotas", None);
    let share = |kind: &str, account: &str| {
        let q = quotas["quotas"].as_array().unwrap().iter().find(|q| q["kind"] == kind && q["account"] == account);
        q.and_then(|q| q["fair_share"].as_f64())
    };
    assert_eq!((share("project", "sweep"), share("user", "sweep-user")), (Some(2.0), Some(2.0)), "{quotas}");
    // Each pending job shows its own tenant's shares, which say why nlp's goes first.
    let shares = [queued, light].map(|id| api.job(id).job.fair_share.map(|f| (f.project, f.user)));
    assert_eq!(shares, [Some((2.0, 2.0)), Some((0.0, 0.0))]);
    // The gauges are refreshed at the server's tick.
    let line = "fairway_quota_fair_share{kind=\"project\",account=\"sweep\"} 2.0";
    api.wait_for(line, |api| {
        let (_, metrics) = api.request("GET", "/metrics", None);
        String::from_utf8(metrics).unwrap().lines().any(|l| l == line).then_some(())
    });
    let light_started = api.wait_state(light, JobState::Succeeded).job.first_started_at_ms.unwrap();
    let queued_started = api.wait_state(queued, JobState::Succeeded).job.first_started_at_ms.unwrap();
    assert!(queued_started >= light_started, "nlp's job started at {light_started}, the sweep's at {queued_started}");
    let short_ended = api.job(short).job.finished_at_ms.expect("the short job ended");
    assert!(light_started >= short_ended, "nlp's job took the GPU the short job freed");
}

/// An account's entry in `GET /v1/quotas`, if it is listed.
fn quota_entry(api: &Api, kind: &str, account: &str) -> Option<serde_json::Value> {
    let (_, quotas) = api.json("GET", "/v1/quotas", None);
    quotas["quotas"].as_array().unwrap().iter().find(|q| q["kind"] == kind && q["account"] == account).cloned()
}

/// Fair sharing remembers across a restart (docs/fair-sharing.md, core scenario 164): the
/// sweep's project held the only GPU for a while, and the server was then restarted. Its
/// recent average was saved at shutdown and handed back, so `GET /v1/quotas` still lists
/// it though it holds nothing, and nlp's job, submitted after the sweep's, goes first. A
/// server that forgot would rank both at a share of 0 and take the sweep's, submitted first.
#[test]
fn fair_sharing_remembers_who_burst_across_a_restart() {
    let share = |api: &Api, kind: &str, account: &str| quota_entry(api, kind, account)?["fair_share"].as_f64();
    let server = InProcess::start("1", "fair_share: { half_life_seconds: 60 }\n");
    let burst = server.api.submit(&trainer_job("burst", "sweep", "medium", 1, 20, 100))[0];
    server.api.wait_state(burst, JobState::Succeeded);
    let before = share(&server.api, "project", "sweep").expect("the sweep's project is listed after its run");
    assert!(before > 0.0, "the sweep's project held the GPU lately: share {before}");

    let server = server.restart();
    let api = &server.api;
    let after = share(api, "project", "sweep").expect("the sweep's recent average survives the restart");
    assert!(after > 0.0 && after <= before, "share {after} after the restart, {before} before");
    assert!(share(api, "user", "sweep-user").is_some_and(|s| s > 0.0), "the sweep's user too");
    let blocker = api.submit(&trainer_job("blocker", "other", "medium", 1, 100_000, 50))[0];
    api.wait_state(blocker, JobState::Running);
    let queued = api.submit(&trainer_job("queued", "sweep", "medium", 1, 2, 10))[0];
    let light = api.submit(&trainer_job("light", "nlp", "medium", 1, 2, 10))[0];
    let positions = [light, queued].map(|id| api.job(id).job.queue_position);
    assert_eq!(positions, [Some(1), Some(2)], "nlp's job first, then the sweep's");
    for id in [blocker, queued, light] {
        api.json("POST", &format!("/v1/jobs/{id}/cancel"), None);
    }
}

/// Fair-share weights set at run time (docs/fair-sharing.md): the config weighs ads 3; the
/// API weighs nlp 4, which divides its share at once (`GET /v1/quotas`; the CLI says so), and
/// a restart keeps it. A weight the API gives ads is undone at the next start: the file wins,
/// as for quotas. Deleting nlp's weight puts it back to 1.
#[test]
fn fair_share_weights_are_set_at_run_time_and_kept_across_a_restart() {
    let config = "fair_share: { half_life_seconds: 0, weights: [{ project: ads, weight: 3 }] }\n";
    let server = InProcess::start("2", config);
    let api = &server.api;
    let nlp = api.submit(&trainer_job("bert", "nlp", "medium", 1, 100_000, 50))[0];
    api.wait_state(nlp, JobState::Running);
    let project = |api: &Api, account: &str| {
        quota_entry(api, "project", account).map(|q| (q["fair_share"].as_f64(), q["fair_share_weight"].as_u64()))
    };
    // nlp holds 1 of 2 GPUs; with a half-life of 0, (1 + 1) / 2 over its weight.
    assert_eq!(project(api, "nlp"), Some((Some(1.0), Some(1))));
    assert_eq!(project(api, "ads"), Some((Some(0.0), Some(3))), "a weighted account is listed");
    let (code, out, err) = cli(&server, &["quota", "weight", "project", "nlp", "4"], None);
    assert_eq!((code, out.as_str()), (0, "weight/project/nlp set: 4\n"), "{err}");
    assert_eq!(project(api, "nlp"), Some((Some(0.25), Some(4))));
    let (status, view) = api.json("PUT", "/v1/fair-share-weights/project/ads", Some(r#"{"weight": 5}"#));
    assert_eq!((status, view["weight"].as_u64()), (200, Some(5)), "{view}");

    let server = server.restart();
    let api = &server.api;
    assert_eq!(project(api, "nlp"), Some((Some(0.25), Some(4))), "the API's weight is kept");
    assert_eq!(project(api, "ads"), Some((Some(0.0), Some(3))), "the file's weight wins at start-up");
    assert_eq!(api.request("DELETE", "/v1/fair-share-weights/project/nlp", None).0, 204);
    assert_eq!(project(api, "nlp"), Some((Some(1.0), Some(1))));
    api.json("POST", &format!("/v1/jobs/{nlp}/cancel"), None);
}

/// Fair sharing with a reservation (docs/reservations.md, rule 5; core scenario 161): a job
/// held for a reservation is asked again when shares alone move it above the holder. On 6
/// GPUs, speech and vision each run 2 (vision's with a 100 s limit). Vision's 4-GPU job,
/// submitted first at equal shares, reserves the node for when vision's run ends; speech's
/// 1-GPU job, with no limit, would run past that and is held for it. Vision then starts a
/// 1-GPU job with a 30 s limit, which ends before the reservation's time: it delays nothing,
/// but vision now holds 3 GPUs to speech's 2, so speech's job ranks first and starts at the
/// next cycle, long before the reservation's time.
#[test]
fn a_job_held_for_a_reservation_starts_once_shares_rank_it_above_the_holder() {
    let config = "fair_share: { half_life_seconds: 0 }\nreservations: { count: 1, default_runtime_seconds: 600 }\n";
    let server = InProcess::start("6", config);
    let api = &server.api;
    let long = |name: &str, project: &str, gpus: u32| trainer_job(name, project, "medium", gpus, 100_000, 50);
    let limited =
        |name: &str, gpus: u32, seconds: u32| long(name, "vision", gpus) + &format!("max_runtime_seconds: {seconds}\n");
    let speech_run = api.submit(&long("speech-run", "speech", 2))[0];
    let vision_run = api.submit(&limited("vision-run", 2, 100))[0];
    for id in [speech_run, vision_run] {
        api.wait_state(id, JobState::Running);
    }
    let big = api.submit(&long("vision-big", "vision", 4))[0];
    let small = api.submit(&long("speech-small", "speech", 1))[0];
    let held = wait_for_reason(api, small, "held_for_reservation");
    assert_eq!(held["data"]["job"].as_i64(), Some(big), "{held}");
    let reserved_at = held["data"]["at_ms"].as_u64().expect("the reservation's time");

    let short = api.submit(&limited("vision-short", 1, 30))[0];
    let short_started = api.wait_state(short, JobState::Running).job.started_at_ms.unwrap();
    let small_started = api.wait_state(small, JobState::Running).job.started_at_ms.unwrap();
    assert!(
        small_started >= short_started,
        "speech's job started at {small_started}, vision's short one at {short_started}"
    );
    assert!(
        small_started < reserved_at,
        "speech's job started at {small_started}, not before the reservation at {reserved_at}"
    );
    assert_eq!(api.job(big).job.state, JobState::Pending, "the 4-GPU job still waits for room");
    for id in [speech_run, vision_run, big, small, short] {
        api.json("POST", &format!("/v1/jobs/{id}/cancel"), None);
    }
}

/// A job over its cohort's borrowing limit is told that limit, with the cohort, where the
/// project has no quota at all: "over quota … of its 1 GPUs" would send its owner to
/// `fairway quota`, which lists nothing for it.
#[test]
fn a_job_over_its_borrowing_limit_is_told_which_limit_and_cohort() {
    let config = "cohorts:\n  - name: lab\n    members:\n      \
                  - { project: vision, nominal: { gpus: 1 }, borrowing_limit: { gpus: 0 } }\n      \
                  - { project: speech, nominal: { gpus: 1 } }\n";
    let server = InProcess::start("2", config);
    let api = &server.api;
    let first = api.submit(&trainer_job("v1", "vision", "medium", 1, 400, 50))[0];
    let second = api.submit(&trainer_job("v2", "vision", "medium", 1, 400, 50))[0];
    api.wait_state(first, JobState::Running);
    let reason = api.wait_for("v2 to wait over the borrowing limit", |api| {
        api.job(second).job.reasons.into_iter().find(|r| r.code == "over_quota")
    });
    assert_eq!(
        reason.message,
        "over its borrowing limit: project vision uses 1 of the 1 GPUs it may use in cohort lab \
         (its nominal quota plus borrowing limit); the job asks 1"
    );
    assert_eq!(
        (reason.data["limit_from"].as_str(), reason.data["cohort"].as_str()),
        (Some("borrowing_limit"), Some("lab"))
    );
    for id in [first, second] {
        api.json("POST", &format!("/v1/jobs/{id}/cancel"), None);
    }
}

/// A job asking more than its project can ever hold in its cohort (the members' nominal
/// quotas less what the others keep unlent) is told so: not a wait for work to end. Speech
/// keeps 1 of its 2 GPUs unlent, so vision can hold at most 3 of lab's 4, however idle the
/// cluster; a 3-GPU job is told only that the cohort lends no more while speech runs.
#[test]
fn a_job_larger_than_its_cohort_can_ever_lend_is_told_so() {
    let config = "cohorts:\n  - name: lab\n    members:\n      \
                  - { project: vision, nominal: { gpus: 2 } }\n      \
                  - { project: speech, nominal: { gpus: 2 }, lending_limit: { gpus: 1 } }\n";
    let server = InProcess::start("8", config);
    let api = &server.api;
    let huge = api.submit(&trainer_job("huge", "vision", "medium", 4, 400, 50))[0];
    let reason = api.wait_for("the 4-GPU job to wait on the cohort", |api| {
        api.job(huge).job.reasons.into_iter().find(|r| r.code == "cohort_exhausted")
    });
    assert_eq!(
        reason.message,
        "cohort lab lends no more: 1 of its 4 GPUs are in use or kept for their owners; the job asks 4; \
         project vision can never hold more than 3 GPUs in cohort lab (its members' nominal quotas, less what \
         the others keep unlent), so it waits until the cohort changes"
    );
    assert_eq!(reason.data["most"].as_u64(), Some(3));
    let s1 = api.submit(&trainer_job("s1", "speech", "medium", 2, 400, 50))[0];
    api.wait_state(s1, JobState::Running);
    let fits_later = api.submit(&trainer_job("v3", "vision", "medium", 3, 400, 50))[0];
    let reason = api.wait_for("the 3-GPU job to wait on the cohort", |api| {
        api.job(fits_later).job.reasons.into_iter().find(|r| r.code == "cohort_exhausted")
    });
    assert_eq!(
        reason.message,
        "cohort lab lends no more: 2 of its 4 GPUs are in use or kept for their owners; the job asks 3"
    );
    for id in [huge, s1, fits_later] {
        api.json("POST", &format!("/v1/jobs/{id}/cancel"), None);
    }
}

/// A cohort of vision and speech, each with a nominal quota of 1 GPU.
const VISION_AND_SPEECH_COHORT: &str = "cohorts:\n  - name: lab\n    members:\n      \
                                         - { project: vision, nominal: { gpus: 1 } }\n      \
                                         - { project: speech, nominal: { gpus: 1 } }\n";

/// Preemption rule 8 on a real server: a borrower that one cycle would start and a member
/// within its nominal quota would reclaim in the same cycle is never launched. Vision and
/// speech (one GPU each) each run a job; vision's v2 and speech's s1 queue together. When
/// speech's s0 ends, the cycle meets v2 first (it borrows speech's idle GPU) and then s1,
/// which would reclaim it: v2's start is taken back, s1 starts at once, and v2 starts only
/// once s1 is done, with no preemption on its record.
#[test]
fn a_borrower_one_cycle_would_start_and_reclaim_is_never_launched() {
    let server = InProcess::start("2", VISION_AND_SPEECH_COHORT);
    let api = &server.api;
    let v1 = api.submit(&trainer_job("v1", "vision", "medium", 1, 400, 50))[0];
    let s0 = api.submit(&trainer_job("s0", "speech", "medium", 1, 40, 50))[0];
    api.wait_state(v1, JobState::Running);
    api.wait_state(s0, JobState::Running);
    let both = trainer_job("v2", "vision", "medium", 1, 5, 20) + &trainer_job("s1", "speech", "medium", 1, 5, 20);
    let ids = api.submit(&both);
    let (v2, s1) = (ids[0], ids[1]);
    api.wait_state(s1, JobState::Succeeded);
    let done = api.wait_state(v2, JobState::Succeeded);
    let kinds: Vec<&str> = done.events.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(kinds.iter().filter(|k| **k == "started").count(), 1, "v2 started once: {kinds:?}");
    assert!(!kinds.contains(&"preempted"), "{kinds:?}");
    assert_eq!(done.job.preemptions, 0);
    let (_, metrics) = api.request("GET", "/metrics", None);
    let metrics = String::from_utf8(metrics).unwrap();
    for line in ["fairway_starts_taken_back_total 1", "fairway_preemptions_total 0"] {
        assert!(metrics.lines().any(|l| l == line), "{line} missing from\n{metrics}");
    }
}

/// Cohorts on the real server: vision (nominal 1 GPU) borrows speech's idle GPU from the
/// cohort in the config; speech's job, of the same priority and within speech's nominal
/// quota, takes it back by preempting one of vision's (graceful: SIGTERM, checkpoint,
/// requeue). The API shows the members and what they use; a bad change is refused with the
/// field and changes nothing; a deleted cohort lends nothing more.
#[test]
fn a_cohort_lends_idle_quota_and_its_owner_reclaims_it() {
    let server = InProcess::start("2", VISION_AND_SPEECH_COHORT);
    let api = &server.api;
    let first = api.submit(&trainer_job("v1", "vision", "medium", 1, 400, 50))[0];
    let second = api.submit(&trainer_job("v2", "vision", "medium", 1, 400, 50))[0];
    api.wait_state(first, JobState::Running);
    api.wait_state(second, JobState::Running);
    let (status, list) = api.json("GET", "/v1/cohorts", None);
    assert_eq!(status, 200, "{list}");
    let lab = &list["cohorts"][0];
    assert_eq!(
        (lab["name"].as_str(), lab["capacity"]["gpus"].as_u64(), lab["gpus_in_use"].as_u64()),
        (Some("lab"), Some(2), Some(2))
    );
    let vision = lab["members"].as_array().unwrap().iter().find(|m| m["project"] == "vision").unwrap();
    assert_eq!((vision["gpus_used"].as_u64(), vision["borrowing"].as_bool()), (Some(2), Some(true)), "{lab}");
    // The metrics say the same: vision uses 2 of its nominal 1, so borrows 1, which speech
    // lends (its idle GPU).
    let want = [
        "fairway_cohort_member_gpus_used{cohort=\"lab\",project=\"vision\"} 2",
        "fairway_cohort_member_gpus_nominal{cohort=\"lab\",project=\"vision\"} 1",
        "fairway_cohort_member_gpus_borrowed{cohort=\"lab\",project=\"vision\"} 1",
        "fairway_cohort_member_gpus_borrowed{cohort=\"lab\",project=\"speech\"} 0",
        "fairway_cohort_member_gpus_lent{cohort=\"lab\",project=\"speech\"} 1.0",
        "fairway_cohort_member_gpus_lent{cohort=\"lab\",project=\"vision\"} 0.0",
    ];
    api.wait_for("the cohort gauges", |api| {
        let (_, metrics) = api.request("GET", "/metrics", None);
        let metrics = String::from_utf8(metrics).unwrap();
        want.iter().all(|w| metrics.lines().any(|l| l == *w)).then_some(())
    });
    // A tenant sees the cohorts its project is in, and may not change them.
    let member = api.as_token(&crate::security::token(api, "sue", "speech", "submitter"));
    let outsider = api.as_token(&crate::security::token(api, "oz", "ops", "submitter"));
    assert_eq!(member.json("GET", "/v1/cohorts", None).1["cohorts"].as_array().unwrap().len(), 1);
    assert_eq!(outsider.json("GET", "/v1/cohorts", None).1["cohorts"].as_array().unwrap().len(), 0);
    let (status, err) = member.json("PUT", "/v1/cohorts/lab", Some(r#"{"members": []}"#));
    assert_eq!((status, err["error"]["code"].as_str()), (403, Some("forbidden")), "{err}");

    let reclaiming = api.submit(&trainer_job("s1", "speech", "medium", 1, 5, 20))[0];
    let done = api.wait_state(reclaiming, JobState::Succeeded);
    assert!(done.job.wait_seconds < 20.0, "speech waited {}s for its own quota", done.job.wait_seconds);
    let preempted: Vec<_> = [first, second].iter().map(|&id| api.job(id)).filter(|v| v.job.preemptions > 0).collect();
    assert_eq!(preempted.len(), 1, "one of vision's borrowed jobs gave its GPU back");
    // The victim, its notice and the metrics say it was a reclaim, not a higher priority.
    let victim = &preempted[0];
    let event = victim.events.iter().find(|e| e.kind == "preempted").expect("a preempted event");
    assert_eq!(event.reason.as_deref(), Some("reclaimed"), "{event:?}");
    assert!(
        event.message.starts_with(&format!("reclaimed by s1 (job {reclaiming}) of project speech in cohort lab"))
            && event.message.contains("project vision uses more than its nominal quota"),
        "{event:?}"
    );
    let preempting = done.events.iter().find(|e| e.kind == "preempting").expect("a preempting event");
    let expected = format!("reclaiming {} (job {}) in cohort lab to make room", victim.job.name, victim.job.id);
    assert!(preempting.message.starts_with(&expected), "{preempting:?}");
    let (_, log) = api.request("GET", &format!("/v1/jobs/{}/logs", victim.job.id), None);
    let log = String::from_utf8(log).unwrap();
    assert!(log.contains("preempt notice:") && log.contains("cause: reclaim, reason: reclaimed by s1"), "{log}");
    let (_, metrics) = api.request("GET", "/metrics", None);
    let metrics = String::from_utf8(metrics).unwrap();
    let line = "fairway_queue_preemptions_total{tier=\"medium\",tenant=\"vision\",cause=\"reclaim\"} 1";
    assert!(metrics.lines().any(|l| l == line), "{line} missing from\n{metrics}");
    assert!(!metrics.contains("cause=\"priority\""), "{metrics}");

    // A bad change is refused with the field, and the cohort is as it was.
    let bad = r#"{"members": [{"project": "vision", "nominal": {"gpus": 1}, "lending_limit": {"gpus": 2}}]}"#;
    let (status, err) = api.json("PUT", "/v1/cohorts/lab", Some(bad));
    assert_eq!(status, 400, "{err}");
    let message = err["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("members[0].lending_limit.gpus") && message.contains("more than the nominal quota 1"),
        "{err}"
    );
    let (_, after) = api.json("GET", "/v1/cohorts", None);
    assert_eq!(after["cohorts"][0]["members"].as_array().unwrap().len(), 2, "{after}");
    let (status, err) =
        api.json("PUT", "/v1/cohorts/other", Some(r#"{"members": [{"project": "vision", "nominal": {"gpus": 1}}]}"#));
    assert_eq!(status, 400, "{err}");
    let message = err["error"]["message"].as_str().unwrap();
    assert!(message.contains("\"vision\" is already a member of cohort \"lab\""), "{err}");

    // A good change applies at once; deleting the cohort ends the lending.
    let (status, view) =
        api.json("PUT", "/v1/cohorts/lab", Some(r#"{"members": [{"project": "vision", "nominal": {"gpus": 2}}]}"#));
    assert_eq!((status, view["capacity"]["gpus"].as_u64()), (200, Some(2)), "{view}");
    let (status, _) = api.json("DELETE", "/v1/cohorts/lab", None);
    assert_eq!(status, 204);
    let (_, gone) = api.json("GET", "/v1/cohorts", None);
    assert_eq!(gone["cohorts"].as_array().unwrap().len(), 0, "{gone}");
    let (status, _) = api.json("DELETE", "/v1/cohorts/lab", None);
    assert_eq!(status, 404);
}

/// The cohort and quota rules of `docs/cohorts.md`, checked against a model kept here: a
/// random sequence of cohort and quota changes (valid and not), with restarts between (some
/// with a config file whose cohort takes a project from a stored one, which is then left
/// out), is accepted exactly where the model's own reading of the rules accepts it, and
/// what the server lists after each step is the model's state: a refused change stores
/// nothing.
#[test]
fn random_cohort_and_quota_changes_follow_the_documented_rules() {
    use std::collections::BTreeMap;
    #[derive(Clone, Debug, PartialEq)]
    struct Member {
        project: String,
        nominal: u32,
        lend: Option<u32>,
        borrow: Option<u32>,
    }
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = |n: u64| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state % n
    };
    let projects = ["a", "b", "c", "d"];
    let names = ["x", "y"];
    let mut cohorts: BTreeMap<String, Vec<Member>> = BTreeMap::new();
    let mut left_out: std::collections::BTreeSet<String> = Default::default();
    let mut quotas: BTreeMap<String, u32> = BTreeMap::new();
    let mut server = InProcess::start("2x4", "");
    let (mut accepted, mut refused, mut restarts_leaving_out) = (0, 0, 0);
    for step in 0..300 {
        if step % 15 == 14 {
            // The config's cohort z is written over the stored z; then each stored cohort,
            // the config's first and the rest by name, is in effect unless it shares a
            // project with one taken before it.
            let config = match next(2) {
                0 => {
                    // Mostly a project a stored cohort holds, to take it from that one.
                    let held: Vec<&str> = cohorts
                        .iter()
                        .filter(|(n, _)| *n != "z")
                        .flat_map(|(_, ms)| ms.iter())
                        .map(|m| m.project.as_str())
                        .collect();
                    let project = match (held.is_empty(), next(4)) {
                        (false, 0..=2) => held[next(held.len() as u64) as usize],
                        _ => projects[next(4) as usize],
                    }
                    .to_string();
                    cohorts.insert(
                        "z".into(),
                        vec![Member { project: project.clone(), nominal: 2, lend: None, borrow: None }],
                    );
                    format!(
                        "cohorts:\n  - name: z\n    members:\n      - {{ project: {project}, nominal: {{ gpus: 2 }} }}\n"
                    )
                }
                _ => String::new(),
            };
            let mut order: Vec<&String> = cohorts.keys().collect();
            // false sorts first: the config's z.
            order.sort_by_key(|n| n.as_str() != "z" || config.is_empty());
            let mut taken: Vec<&str> = Vec::new();
            left_out.clear();
            for name in order {
                let members = &cohorts[name];
                if members.iter().any(|m| taken.contains(&m.project.as_str())) {
                    left_out.insert(name.clone());
                } else {
                    taken.extend(members.iter().map(|m| m.project.as_str()));
                }
            }
            restarts_leaving_out += usize::from(!left_out.is_empty());
            server = server.restart_with_config(&config);
        }
        let api = &server.api;
        let name = names[next(2) as usize].to_string();
        let (what, status, valid) = match next(10) {
            0..=4 => {
                let count = next(3) as usize; // 0 members is refused
                let members: Vec<Member> = (0..count)
                    .map(|_| {
                        let nominal = next(5) as u32;
                        let lend = (next(2) == 0).then(|| next(u64::from(nominal) + 2) as u32);
                        let borrow = (next(3) == 0).then(|| next(3) as u32);
                        Member { project: projects[next(4) as usize].into(), nominal, lend, borrow }
                    })
                    .collect();
                let body: Vec<Value> = members
                    .iter()
                    .map(|m| {
                        let mut v = serde_json::json!({ "project": m.project, "nominal": { "gpus": m.nominal } });
                        if let Some(l) = m.lend {
                            v["lending_limit"] = serde_json::json!({ "gpus": l });
                        }
                        if let Some(b) = m.borrow {
                            v["borrowing_limit"] = serde_json::json!({ "gpus": b });
                        }
                        v
                    })
                    .collect();
                let body = serde_json::json!({ "members": body }).to_string();
                let (status, _) = api.json("PUT", &format!("/v1/cohorts/{name}"), Some(&body));
                // The rules, read independently of the server's code.
                let in_other = |p: &str| {
                    cohorts
                        .iter()
                        .any(|(n, ms)| *n != name && !left_out.contains(n) && ms.iter().any(|m| m.project == p))
                };
                let valid = !members.is_empty()
                    && members.iter().enumerate().all(|(i, m)| {
                        !members[..i].iter().any(|o| o.project == m.project)
                            && !in_other(&m.project)
                            && m.lend.is_none_or(|l| l <= m.nominal)
                            && m.lend.is_none_or(|l| quotas.get(&m.project).is_none_or(|&q| m.nominal - l <= q))
                    });
                if valid {
                    cohorts.insert(name.clone(), members.clone());
                    left_out.remove(&name);
                }
                (format!("PUT cohort {name} {members:?}"), status, valid)
            }
            5 => {
                let (status, _) = api.json("DELETE", &format!("/v1/cohorts/{name}"), None);
                let valid = cohorts.remove(&name).is_some();
                left_out.remove(&name);
                (format!("DELETE cohort {name}"), status, valid)
            }
            6..=8 => {
                let project = projects[next(4) as usize];
                let gpus = next(5) as u32;
                let (status, _) = api.json(
                    "PUT",
                    &format!("/v1/quotas/project/{project}"),
                    Some(&format!("{{\"gpus_max\": {gpus}}}")),
                );
                let guarantee = cohorts
                    .iter()
                    .filter(|(n, _)| !left_out.contains(*n))
                    .flat_map(|(_, ms)| ms)
                    .find(|m| m.project == project)
                    .and_then(|m| m.lend.map(|l| m.nominal - l))
                    .unwrap_or(0);
                let valid = guarantee <= gpus;
                if valid {
                    quotas.insert(project.into(), gpus);
                }
                (format!("PUT quota {project} {gpus} (guarantee {guarantee})"), status, valid)
            }
            _ => {
                let project = projects[next(4) as usize];
                let (status, _) = api.json("DELETE", &format!("/v1/quotas/project/{project}"), None);
                quotas.remove(project);
                (format!("DELETE quota {project}"), status, true)
            }
        };
        let ok = (200..300).contains(&status);
        let expected_refusal = if what.starts_with("DELETE cohort") { 404 } else { 400 };
        assert!(ok == valid && (ok || status == expected_refusal), "step {step}: {what}: status {status}");
        if ok {
            accepted += 1
        } else {
            refused += 1
        }
        // What the server lists is the model.
        let (_, list) = api.json("GET", "/v1/cohorts", None);
        let listed: BTreeMap<String, Vec<Member>> = list["cohorts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                let name = c["name"].as_str().unwrap();
                assert_eq!(c.get("left_out").is_some(), left_out.contains(name), "step {step}: {c}");
                let members = c["members"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|m| Member {
                        project: m["project"].as_str().unwrap().into(),
                        nominal: m["nominal"]["gpus"].as_u64().unwrap() as u32,
                        lend: m["lending_limit"]["gpus"].as_u64().map(|v| v as u32),
                        borrow: m["borrowing_limit"]["gpus"].as_u64().map(|v| v as u32),
                    })
                    .collect();
                (c["name"].as_str().unwrap().to_string(), members)
            })
            .collect();
        assert_eq!(listed, cohorts, "step {step}: after {what}");
        for project in projects {
            let cap = quota_entry(api, "project", project).and_then(|q| q["gpus_max"].as_u64()).map(|v| v as u32);
            assert_eq!(cap, quotas.get(project).copied(), "step {step}: {project}'s quota after {what}");
        }
    }
    assert!(accepted > 80 && refused > 40, "both ways exercised: {accepted} accepted, {refused} refused");
    assert!(restarts_leaving_out >= 2, "{restarts_leaving_out} restarts left a cohort out");
}

/// A member's guarantee (nominal less lending limit: kept for it alone) may not exceed its
/// project's hard quota, which would leave the difference idle: a quota below it and a
/// cohort above it are refused with the field, and nothing changes.
#[test]
fn a_guarantee_above_the_hard_quota_is_refused_either_way() {
    let config = "cohorts:\n  - name: lab\n    members:\n      \
                  - { project: vision, nominal: { gpus: 4 }, lending_limit: { gpus: 1 } }\n      \
                  - { project: speech, nominal: { gpus: 4 } }\n";
    let server = InProcess::start("2x4", config);
    let api = &server.api;
    let (status, err) = api.json("PUT", "/v1/quotas/project/vision", Some(r#"{"gpus_max": 2}"#));
    assert_eq!(status, 400, "{err}");
    let message = err["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("gpus_max: 2 is below the 3 gpus project vision keeps unlent in cohort lab"),
        "{message}"
    );
    assert!(quota_entry(api, "project", "vision").is_none_or(|q| q["gpus_max"].is_null()), "nothing stored");
    let (status, view) = api.json("PUT", "/v1/quotas/project/vision", Some(r#"{"gpus_max": 3}"#));
    assert_eq!(status, 200, "a quota of 3 holds the guarantee of 3: {view}");
    // speech has no quota: any guarantee holds; vision's may not grow past 3.
    let keep_all = r#"{"members": [{"project": "vision", "nominal": {"gpus": 4}, "lending_limit": {"gpus": 0}}, {"project": "speech", "nominal": {"gpus": 4}, "lending_limit": {"gpus": 0}}]}"#;
    let (status, err) = api.json("PUT", "/v1/cohorts/lab", Some(keep_all));
    assert_eq!(status, 400, "{err}");
    let message = err["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("members[0].lending_limit.gpus: project vision keeps 4 gpus of its nominal 4 unlent"),
        "{message}"
    );
    let (_, list) = api.json("GET", "/v1/cohorts", None);
    assert_eq!(list["cohorts"][0]["members"][0]["lending_limit"]["gpus"].as_u64(), Some(1), "unchanged: {list}");
}

/// A cohort made through the API that the config file's cohorts contradict at the next
/// start-up (speech put in lab) is kept, said to be left out with why, and stands in the
/// way of nothing: other cohorts change without it, and deleting it takes no place from
/// the members of the cohort in effect. Set again so that it holds, it is in effect again.
#[test]
fn a_stored_cohort_the_config_contradicts_is_left_out_and_blocks_nothing() {
    let server = InProcess::start("2", "");
    let members =
        r#"{"members": [{"project": "speech", "nominal": {"gpus": 1}}, {"project": "nlp", "nominal": {"gpus": 1}}]}"#;
    let (status, view) = server.api.json("PUT", "/v1/cohorts/other", Some(members));
    assert_eq!(status, 200, "{view}");
    let lab = "cohorts:\n  - name: lab\n    members:\n      - { project: vision, nominal: { gpus: 1 } }\n      \
               - { project: speech, nominal: { gpus: 1 } }\n";
    let server = server.restart_with_config(lab);
    let api = &server.api;
    let cohort = |api: &Api, name: &str| {
        let (status, list) = api.json("GET", "/v1/cohorts", None);
        assert_eq!(status, 200, "{list}");
        list["cohorts"].as_array().unwrap().iter().find(|c| c["name"] == name).cloned()
    };
    let lab_view = cohort(api, "lab").expect("the config's cohort");
    assert_eq!((lab_view["capacity"]["gpus"].as_u64(), lab_view.get("left_out")), (Some(2), None), "{lab_view}");
    let other = cohort(api, "other").expect("the stored cohort is kept");
    let why = other["left_out"].as_str().unwrap_or_else(|| panic!("not said to be left out: {other}"));
    assert!(why.ends_with("\"speech\" is already a member of cohort \"lab\""), "{why}");
    assert_eq!(other["capacity"]["gpus"].as_u64(), None, "a left-out cohort lends nothing: {other}");
    let (code, out, err) = cli(&server, &["quota", "cohorts"], None);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("other (left out)") && out.contains("cohort other is stored but not in effect"), "{out}");

    // Other cohorts change as if it were not there.
    let (status, view) =
        api.json("PUT", "/v1/cohorts/third", Some(r#"{"members": [{"project": "x", "nominal": {"gpus": 1}}]}"#));
    assert_eq!(status, 200, "a new cohort is not refused for the left-out one's sake: {view}");
    let grown = r#"{"members": [{"project": "vision", "nominal": {"gpus": 1}}, {"project": "speech", "nominal": {"gpus": 1}}, {"project": "y", "nominal": {"gpus": 1}}]}"#;
    let (status, view) = api.json("PUT", "/v1/cohorts/lab", Some(grown));
    assert_eq!((status, view["capacity"]["gpus"].as_u64()), (200, Some(3)), "{view}");
    // Deleting it takes speech's place in lab from nobody.
    let (status, _) = api.json("DELETE", "/v1/cohorts/other", None);
    assert_eq!(status, 204);
    assert_eq!(cohort(api, "lab").unwrap()["capacity"]["gpus"].as_u64(), Some(3), "speech keeps its place in lab");
    assert!(cohort(api, "other").is_none());
    // Made again so that it holds, it is in effect.
    let (status, view) =
        api.json("PUT", "/v1/cohorts/other", Some(r#"{"members": [{"project": "nlp", "nominal": {"gpus": 1}}]}"#));
    assert_eq!((status, view["capacity"]["gpus"].as_u64(), view.get("left_out")), (200, Some(1), None), "{view}");
}

#[test]
fn a_bad_protection_in_the_config_names_the_field() {
    let cases = [
        (
            "priority_classes:\n  - { name: g, value: 5, preemptions_per_hour_max: 0 }\n",
            "priority_classes[0].preemptions_per_hour_max",
        ),
        (
            "priority_classes:\n  - { name: g, value: 5, min_run_before_preemption_seconds: 999999999 }\n",
            "priority_classes[0].min_run_before_preemption_seconds",
        ),
        (
            "priority_classes:\n  - { name: g, value: 5, preemption_delay_seconds: 90000 }\n",
            "priority_classes[0].preemption_delay_seconds",
        ),
        ("metrics: { pending_job_series_max: 10001 }\n", "metrics.pending_job_series_max"),
        ("metrics: { per_job: true }\n", "per_job"),
    ];
    for (yaml, field) in cases {
        let err = fairway_server::ConfigFile::parse(yaml).unwrap_err().to_string();
        assert!(err.contains(field), "{yaml}: {err}");
    }
}
