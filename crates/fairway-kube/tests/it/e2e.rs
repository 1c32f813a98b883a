//! The controller end to end: `fairway_kube::run::run` (API, webhook with its own
//! certificate, watches, engine, executor) against the fake API server with its Job
//! controller and kubelets, driven by the scenario files in `tests/scenarios/` (which name
//! only Kubernetes objects, so that they could run against a real cluster). After every
//! scenario no node was found holding more GPUs than it has.
//!
//! "Killing" the controller drops its tokio runtime: every task and connection ends where
//! it stands, as with `kill -9` (the CLI's tests kill a real `fairway kube` process).

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::time::Duration;

use fairway_kube::Settings;
use fairway_kube::run::Listening;
use fairway_kube_fake::scenario::{Cluster, ControllerHooks, Scenario};
use fairway_kube_fake::{FakeCluster, FakeConfig};
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use kube::api::{Api, PostParams};

/// Durations read from objects (sleeps, grace periods, stop times) run 10× faster.
const TIME_SCALE: f64 = 0.1;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A free loopback port (for the webhook, whose URL the webhook configuration must name
/// before the controller starts).
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// The controller as a test runs it: the shipped settings but for addresses, leader
/// election off (one replica), the webhook certificate made by the controller itself for
/// the shipped Service's name; then `more` (YAML lines).
fn test_settings(webhook_port: u16, more: &str) -> Settings {
    let text = format!(
        "listen: 127.0.0.1:0\n\
         webhook:\n  listen: 127.0.0.1:{webhook_port}\n\
         leader_election: {{ enabled: false }}\n{more}"
    );
    Settings::parse(&text).unwrap()
}

/// The shipped namespace (`deploy/kubernetes/namespace.yaml`) and webhook configuration
/// (`webhook.yaml`), unmodified: the fake sends the webhook's calls for the Service
/// `fairway-system/fairway-webhook` to `port` and verifies the certificate for the
/// Service's DNS name, as the API server does; the controller writes the `caBundle`.
pub async fn install_webhook(cluster: &FakeCluster, port: u16) {
    let text = std::fs::read_to_string(repo_root().join("deploy/kubernetes/namespace.yaml")).unwrap();
    let namespace: k8s_openapi::api::core::v1::Namespace = serde_saphyr::from_str(&text).unwrap();
    let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(cluster.client());
    api.create(&PostParams::default(), &namespace).await.unwrap();
    let text = std::fs::read_to_string(repo_root().join("deploy/kubernetes/webhook.yaml")).unwrap();
    let config: MutatingWebhookConfiguration = serde_saphyr::from_str(&text).unwrap();
    let service = config.webhooks.as_ref().unwrap()[0].client_config.service.clone().expect("a Service");
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    cluster.expose_service(&service.namespace, &service.name, addr);
    let api: Api<MutatingWebhookConfiguration> = Api::all(cluster.client());
    api.create(&PostParams::default(), &config).await.unwrap();
}

/// The controller in its own runtime, started and killed by the scenario.
pub struct InProcess {
    kube_config: kube::Config,
    settings: Settings,
    runtime: Option<tokio::runtime::Runtime>,
    listening: Option<Listening>,
    /// Asks the running controller to shut down as on SIGTERM, and tells when it has.
    shutdown: Option<(tokio::sync::oneshot::Sender<()>, tokio::sync::oneshot::Receiver<()>)>,
    pub starts: u32,
}

impl InProcess {
    pub fn new(cluster: &FakeCluster, settings: Settings) -> InProcess {
        InProcess {
            kube_config: cluster.kube_config(),
            settings,
            runtime: None,
            listening: None,
            shutdown: None,
            starts: 0,
        }
    }

    /// Shuts the controller down as `fairway kube` does on SIGTERM (unlike `kill`), and
    /// waits until it has.
    pub async fn shut_down(&mut self) -> Result<(), String> {
        let (stop, stopped) = self.shutdown.take().ok_or("not running")?;
        let _ = stop.send(());
        tokio::time::timeout(Duration::from_secs(20), stopped)
            .await
            .map_err(|_| "the controller did not shut down within 20 s".to_owned())?
            .map_err(|_| "the controller ended without saying so".to_owned())?;
        self.kill();
        Ok(())
    }

    pub async fn start_now(&mut self) -> Result<(), String> {
        assert!(self.runtime.is_none(), "started twice");
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        let (config, settings) = (self.kube_config.clone(), self.settings.clone());
        let (exited, exit) = tokio::sync::oneshot::channel::<String>();
        let (listening, listens) = tokio::sync::oneshot::channel::<Listening>();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (done, finished) = tokio::sync::oneshot::channel::<()>();
        runtime.spawn(async move {
            let client = kube::Client::try_from(config).expect("a plain-HTTP client");
            let told = move |at| {
                let _ = listening.send(at);
            };
            // Only a shutdown asked for: a dropped sender is a kill, not a SIGTERM.
            let shutdown = async {
                if stopped.await.is_err() {
                    std::future::pending::<()>().await;
                }
            };
            let outcome = fairway_kube::run::run_with(settings, client, shutdown, told).await;
            let _ = exited.send(outcome.err().map_or_else(|| "it returned".to_owned(), |e| e.to_string()));
            let _ = done.send(());
        });
        self.shutdown = Some((stop, finished));
        self.runtime = Some(runtime);
        self.starts += 1;
        // Jobs created before the webhook answers would be refused (failurePolicy: Fail):
        // the listeners, webhook included, are up when it says where they are.
        tokio::select! {
            at = listens => {
                self.listening = Some(at.map_err(|_| "the controller stopped before it listened".to_owned())?);
                Ok(())
            }
            error = exit => Err(format!("the controller stopped: {}", error.unwrap_or_default())),
            () = tokio::time::sleep(Duration::from_secs(20)) => Err("the controller never listened".to_owned()),
        }
    }

    /// The read-only API's base URL, once started.
    pub fn api_url(&self) -> String {
        format!("http://{}", self.listening.expect("started").api)
    }

    /// Every read endpoint of a running controller answers, whatever state the cluster is
    /// in: the job list, each job alone and its `why`, the dashboard, nodes, quotas,
    /// cohorts, classes, metrics and health. A handler that panics fails this at once: the
    /// workloads a step leaves in odd states (refused, paused, finished, mid-restart) are
    /// what the API most easily gets wrong.
    pub async fn check_api(&self) -> Result<(), String> {
        let Some(listening) = self.listening else { return Ok(()) };
        let base = format!("http://{}", listening.api);
        let http = reqwest::Client::builder().timeout(Duration::from_secs(10)).build().map_err(|e| e.to_string())?;
        let get = async |path: String| -> Result<String, String> {
            let response = http.get(format!("{base}{path}")).send().await.map_err(|e| format!("GET {path}: {e}"))?;
            let status = response.status();
            let text = response.text().await.map_err(|e| format!("GET {path}: {e}"))?;
            match status.is_success() {
                true => Ok(text),
                false => Err(format!("GET {path}: {status}: {text}")),
            }
        };
        let list_jobs = async || -> Result<Vec<String>, String> {
            let list = get("/v1/jobs".into()).await?;
            let list: fairway_server::api::JobList = serde_json::from_str(&list).map_err(|e| format!("{e}: {list}"))?;
            Ok(list.jobs.into_iter().map(|job| job.id.to_string()).collect())
        };
        for id in list_jobs().await? {
            for path in [format!("/v1/jobs/{id}"), format!("/v1/jobs/{id}/why")] {
                if let Err(e) = get(path).await {
                    // A workload deleted by the step may go between the list and the read:
                    // only one still listed must be readable.
                    if list_jobs().await?.contains(&id) {
                        return Err(e);
                    }
                }
            }
        }
        for path in
            ["/v1/dashboard", "/v1/nodes", "/v1/quotas", "/v1/cohorts", "/v1/priority-classes", "/metrics", "/healthz"]
        {
            get(path.into()).await?;
        }
        Ok(())
    }

    pub fn kill(&mut self) {
        self.listening = None;
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
        self.shutdown = None;
    }
}

impl Drop for InProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

impl ControllerHooks for InProcess {
    fn start(&mut self) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send + '_>> {
        Box::pin(self.start_now())
    }

    fn stop(&mut self) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send + '_>> {
        self.kill();
        Box::pin(async { Ok(()) })
    }

    fn check(&mut self) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send + '_>> {
        Box::pin(self.check_api())
    }
}

/// Runs `tests/scenarios/<name>.yaml` on a fresh fake with the webhook installed, then
/// checks that no node was ever left holding more than it has.
async fn run_scenario(name: &str) {
    run_scenario_with(name, "").await;
}

/// [`run_scenario`] with the controller's settings given `more` (YAML lines).
async fn run_scenario_with(name: &str, more: &str) {
    run_scenario_then(name, more, &[]).await;
}

/// [`run_scenario_with`], and at its end the controller's metrics have each of `lines`.
async fn run_scenario_then(name: &str, more: &str, lines: &[&str]) {
    let cluster = FakeCluster::start(FakeConfig { time_scale: TIME_SCALE, ..FakeConfig::default() }).await.unwrap();
    let port = free_port();
    install_webhook(&cluster, port).await;
    let mut controller = InProcess::new(&cluster, test_settings(port, more));
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/scenarios/{name}.yaml"));
    let scenario = Scenario::from_file(&path).unwrap_or_else(|e| panic!("{e}"));
    let mut outcome = scenario.run(Cluster::Fake(&cluster), Some(&mut controller)).await.map_err(|e| e.to_string());
    if outcome.is_ok() && !lines.is_empty() {
        let metrics = reqwest::get(format!("{}/metrics", controller.api_url())).await.unwrap().text().await.unwrap();
        if let Some(line) = lines.iter().find(|&&line| !metrics.lines().any(|l| l == line)) {
            outcome = Err(format!("{line} missing from the metrics:\n{metrics}"));
        }
    }
    controller.kill();
    if let Err(e) = outcome {
        panic!("{}: {e}", scenario.name);
    }
    assert_eq!(cluster.double_booked(), Vec::<String>::new(), "{}", scenario.name);
    cluster.shutdown().await;
}

macro_rules! scenarios {
    ($($name:ident),* $(,)?) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            run_scenario(&stringify!($name).replace('_', "-")).await;
        }
    )*};
}

scenarios!(
    article,
    preemption_with_grace,
    quota_blocks_critical,
    gang_all_or_nothing,
    unmanaged_pods_occupy,
    cordon_and_node_loss,
    restart_mid_preemption,
    conflicts_and_expired_watches,
    paddlejob,
    opt_in_without_webhook,
    pause_and_resume,
    cohort_reclaim,
);

/// `tests/scenarios/reservation-with-backfill.yaml`, with one reservation (without it the
/// gang says no reservation and the Job without a deadline is admitted).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reservation_with_backfill() {
    run_scenario_with("reservation-with-backfill", "reservations: { count: 1, default_runtime_seconds: 3600 }\n").await;
}

/// `tests/scenarios/preemptor-moves-to-freed-gpus.yaml`; the metrics count the preemptor
/// that moved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preemptor_moves_to_freed_gpus() {
    let lines = ["fairway_preemptors_moved_total 1", "fairway_preemptions_total 1"];
    run_scenario_then("preemptor-moves-to-freed-gpus", "", &lines).await;
}

/// `tests/scenarios/fair-sharing.yaml`, with fair sharing on (without it the older Job of
/// the namespace already holding GPUs goes first).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_sharing() {
    run_scenario_with("fair-sharing", "fair_share: { half_life_seconds: 0 }\n").await;
}

/// `tests/scenarios/fair-sharing-frees-a-held-job.yaml`, with fair sharing and one
/// reservation (without the core's wake of held jobs that shares move above the holder,
/// speech's Job waits for the reservation's time).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_sharing_frees_a_held_job() {
    let settings = "fair_share: { half_life_seconds: 0 }\nreservations: { count: 1, default_runtime_seconds: 3600 }\n";
    run_scenario_with("fair-sharing-frees-a-held-job", settings).await;
}

/// Two replicas with leader election: one acts (a Job is admitted once), the other says who
/// leads; when the leader dies, the other takes over within the Lease's duration and acts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_one_leads_and_the_other_takes_over_when_it_dies() {
    use k8s_openapi::api::batch::v1::Job;
    use k8s_openapi::api::core::v1::Node;
    let cluster = FakeCluster::start(FakeConfig { time_scale: TIME_SCALE, ..FakeConfig::default() }).await.unwrap();
    let client = cluster.client();
    let api = |name: &str| -> (Api<Job>, Job) {
        let job: Job = serde_saphyr::from_str(&format!(
            "metadata: {{ name: {name}, namespace: default, labels: {{ fairway.dev/queue: default }} }}\n\
             spec:\n  suspend: true\n  template:\n    spec:\n      schedulerName: fairway\n      restartPolicy: Never\n\
             \x20     containers: [{{ name: c, image: x, command: [sleep, \"3600\"], resources: {{ limits: {{ nvidia.com/gpu: \"1\" }} }} }}]\n"
        ))
        .unwrap();
        (Api::namespaced(client.clone(), "default"), job)
    };
    let nodes: Api<Node> = Api::all(client.clone());
    nodes
        .create(&PostParams::default(), &fairway_kube_fake::gpu_node("gpu-0", 8, "H100", 96_000, 1_048_576))
        .await
        .unwrap();
    let namespace: k8s_openapi::api::core::v1::Namespace =
        serde_saphyr::from_str("metadata: { name: fairway-system }\n").unwrap();
    Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace)
        .await
        .unwrap();
    let replica = |identity: &str| {
        let text = format!("listen: 127.0.0.1:0\nleader_election: {{ lease_seconds: 2, identity: {identity} }}\n");
        InProcess::new(&cluster, Settings::parse(&text).unwrap())
    };
    let (mut a, mut b) = (replica("replica-a"), replica("replica-b"));
    a.start_now().await.unwrap();
    b.start_now().await.unwrap();
    let admitted = |name: &'static str| {
        let (jobs, _) = api(name);
        async move {
            let deadline = std::time::Instant::now() + Duration::from_secs(20);
            loop {
                let job = jobs.get(name).await.unwrap();
                if job.spec.unwrap().suspend == Some(false) {
                    return;
                }
                assert!(std::time::Instant::now() < deadline, "{name} was never admitted");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    let (jobs, first) = api("first");
    jobs.create(&PostParams::default(), &first).await.unwrap();
    admitted("first").await;
    // The Lease names the leader; the other replica's API says so instead of answering.
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> = Api::namespaced(client.clone(), "fairway-system");
    let holder = leases.get("fairway-controller").await.unwrap().spec.unwrap().holder_identity.unwrap();
    let (leader, follower) = if holder == "replica-a" { (&mut a, &mut b) } else { (&mut b, &mut a) };
    let http = reqwest::Client::new();
    let answer = http.get(format!("{}/v1/jobs", follower.api_url())).send().await.unwrap();
    assert_eq!(answer.status(), 503);
    let body = answer.text().await.unwrap();
    assert!(body.contains("not_leader") && body.contains(&format!("pod {holder}")), "{body}");
    let answer = http.get(format!("{}/v1/jobs", leader.api_url())).send().await.unwrap();
    assert_eq!(answer.status(), 200);
    assert!(answer.text().await.unwrap().contains("\"first\""));
    let health: serde_json::Value =
        http.get(format!("{}/healthz", follower.api_url())).send().await.unwrap().json().await.unwrap();
    assert_eq!(health["status"], "standby", "{health}");
    // The leader dies: the follower takes over once the Lease has not been renewed for its
    // 2 s, and acts.
    leader.kill();
    let (_, second) = api("second");
    jobs.create(&PostParams::default(), &second).await.unwrap();
    admitted("second").await;
    let holder_now = leases.get("fairway-controller").await.unwrap().spec.unwrap().holder_identity.unwrap();
    assert_ne!(holder_now, holder);
    // Each Job has one pod: nothing was admitted twice.
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), "default");
    assert_eq!(pods.list(&Default::default()).await.unwrap().items.len(), 2);
    follower.kill();
    cluster.shutdown().await;
}

/// Fair sharing's memory across a restart (`recent_usage.rs`), against the fake API server.
/// With a half-life of a minute, sweep's Job holds the one GPU and completes; the controller
/// is shut down as on SIGTERM and saves each namespace's recent average in the ConfigMap
/// `fairway-system/fairway-fair-share`. The next controller reads it back: with a Job of
/// another namespace on the GPU, sweep queues a Job and then nlp one; when the GPU frees,
/// nlp's is admitted first, though sweep's is older (without the memory both namespaces
/// would hold nothing, and the older would go first).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_sharing_remembers_who_burst_across_a_controller_restart() {
    use fairway_kube::recent_usage::{CONFIGMAP_NAME, DATA_KEY, SavedRecentUsage};
    let cluster = FakeCluster::start(FakeConfig { time_scale: TIME_SCALE, ..FakeConfig::default() }).await.unwrap();
    let port = free_port();
    install_webhook(&cluster, port).await;
    let mut controller = InProcess::new(&cluster, test_settings(port, "fair_share: { half_life_seconds: 60 }\n"));
    let job = |namespace: &str, name: &str, seconds: u32| {
        format!(
            "apiVersion: batch/v1\nkind: Job\nmetadata: {{name: {name}, namespace: {namespace}}}\n\
             spec:\n  template:\n    spec:\n      priorityClassName: medium\n      restartPolicy: Never\n\
             \x20     containers: [{{name: train, image: pytorch, command: [sleep, \"{seconds}\"], \
             resources: {{limits: {{nvidia.com/gpu: 1}}}}}}]\n"
        )
    };
    let namespaces = ["sweep", "nlp", "other"]
        .map(|ns| {
            format!(
                "apiVersion: v1\nkind: Namespace\nmetadata: {{name: {ns}, labels: {{fairway.dev/managed: \"true\"}}}}\n"
            )
        })
        .join("---\n");
    let indent = |text: &str| text.lines().map(|l| format!("      {l}\n")).collect::<String>();
    let before = format!(
        "name: sweep bursts before the restart\nsteps:\n\
         \x20 - nodes: {{count: 1, prefix: gpu-, gpus: 1}}\n\
         \x20 - apply: {{file: ../../../../deploy/kubernetes/priorityclasses.yaml}}\n\
         \x20 - apply: |\n{}\
         \x20 - controller: start\n\
         \x20 - apply: |\n{}\
         \x20 - wait: {{job: sweep/burst, conditions: [{{type: Complete, status: \"True\"}}]}}\n",
        indent(&namespaces),
        indent(&job("sweep", "burst", 40)),
    );
    let scenarios = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scenarios");
    let scenario = Scenario::parse(&before, &scenarios).unwrap_or_else(|e| panic!("{e}"));
    scenario.run(Cluster::Fake(&cluster), Some(&mut controller)).await.unwrap_or_else(|e| panic!("{e}"));
    controller.shut_down().await.unwrap();

    let maps: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(cluster.client(), "fairway-system");
    let map = maps.get(CONFIGMAP_NAME).await.expect("saved at shutdown");
    let text = map.data.as_ref().and_then(|d| d.get(DATA_KEY)).expect("the document");
    let saved = SavedRecentUsage::parse(text).unwrap();
    let sweep = saved.accounts.iter().find(|a| a.kind == "project" && a.account == "sweep");
    assert!(sweep.is_some_and(|a| a.gpu_milli > 0), "sweep held the GPU lately: {saved:?}");

    let after = format!(
        "name: nlp goes first after the restart\nsteps:\n\
         \x20 - controller: start\n\
         \x20 - apply: |\n{}\
         \x20 - wait: {{job: other/blocker, suspend: false, pods: {{running: 1}}}}\n\
         \x20 - apply: |\n{}\
         \x20 - sleep: 1.1s\n\
         \x20 - apply: |\n{}\
         \x20 - wait: {{job: nlp/light, suspend: false, pods: {{running: 1}}}}\n\
         \x20 - expect: {{job: sweep/queued, suspend: true, pods: {{total: 0}}}}\n",
        indent(&job("other", "blocker", 60)),
        indent(&job("sweep", "queued", 3600)),
        indent(&job("nlp", "light", 3600)),
    );
    let scenario = Scenario::parse(&after, &scenarios).unwrap_or_else(|e| panic!("{e}"));
    let outcome = scenario.run(Cluster::Fake(&cluster), Some(&mut controller)).await;
    controller.kill();
    outcome.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(cluster.double_booked(), Vec::<String>::new());
    cluster.shutdown().await;
}
