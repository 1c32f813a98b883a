//! `fairway kube` as a real process against the fake API server (in this test's process),
//! and the `fairway` CLI against it: `ls`, `why`, `describe`, `nodes`, `quota` and the
//! metrics read the controller as they read the standalone server; changes are refused as
//! read-only. The controller is killed with SIGKILL in the middle of a preemption and
//! started again: nothing is admitted twice, the victims keep their deadline, and the GPUs
//! stay held for the preemptor.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fairway_kube_fake::{FakeCluster, FakeConfig, gpu_node};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, ResourceQuota};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::{Api, ListParams, PostParams};

const FAIRWAY: &str = env!("CARGO_BIN_EXE_fairway");

struct Controller {
    child: Child,
    base: String,
}

impl Drop for Controller {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_controller(kubeconfig: &Path, config: &Path) -> Controller {
    let mut child = Command::new(FAIRWAY)
        .args(["kube", "--listen", "127.0.0.1:0", "--no-leader-election", "--kubeconfig"])
        .arg(kubeconfig)
        .arg("--config")
        .arg(config)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    loop {
        line.clear();
        assert!(stdout.read_line(&mut line).unwrap() > 0, "fairway kube exited before it listened");
        if line.contains("read-only API on") {
            break;
        }
    }
    std::thread::spawn(move || std::io::copy(&mut stdout, &mut std::io::sink()));
    let base = line.split_whitespace().find(|w| w.starts_with("http://")).unwrap().to_owned();
    Controller { child, base }
}

/// The controller's dashboard snapshot (no token: this one asks for none).
fn dashboard_of(rt: &tokio::runtime::Runtime, base: &str) -> serde_json::Value {
    let text = rt.block_on(async { reqwest::get(format!("{base}/v1/dashboard")).await.unwrap().text().await.unwrap() });
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

fn cli(base: &str, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(FAIRWAY).args(["--server", base]).args(args).output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn cli_ok(base: &str, args: &[&str]) -> String {
    let (ok, out, err) = cli(base, args);
    assert!(ok, "fairway {args:?} failed: {err}");
    out
}

fn yaml<T: serde::de::DeserializeOwned>(text: &str) -> T {
    serde_saphyr::from_str(text).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

fn job(name: &str, class: &str, gpus: u32, stop_seconds: u32) -> Job {
    yaml(&format!(
        "metadata: {{ name: {name}, namespace: ads }}\n\
         spec:\n  template:\n    metadata: {{ annotations: {{ fake.fairway.dev/stop-seconds: \"{stop_seconds}\" }} }}\n\
         \x20   spec:\n      priorityClassName: {class}\n      restartPolicy: Never\n      terminationGracePeriodSeconds: 300\n\
         \x20     containers: [{{ name: train, image: paddle, command: [sleep, \"3600\"], resources: {{ limits: {{ nvidia.com/gpu: \"{gpus}\" }} }} }}]\n"
    ))
}

/// Polls `f` until it gives a value, for at most 30 s.
fn wait_for<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    wait_for_seen(what, || f().ok_or_else(String::new))
}

/// Polls `f` until it gives `Ok`, for at most 30 s; a timeout shows the last `Err` (what
/// was seen instead).
fn wait_for_seen<T>(what: &str, mut f: impl FnMut() -> Result<T, String>) -> T {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let seen = match f() {
            Ok(v) => return v,
            Err(seen) => seen,
        };
        assert!(Instant::now() < deadline, "timed out waiting for {what}; last seen:\n{seen}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn the_cli_reads_the_controller_and_a_kill_9_mid_preemption_admits_nothing_twice() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let cluster = rt.block_on(FakeCluster::start(FakeConfig { time_scale: 0.1, ..FakeConfig::default() })).unwrap();
    let client = rt.block_on(async { cluster.client() });
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, cluster.kubeconfig_yaml()).unwrap();
    // Jobs opt in explicitly here (the webhook is tested with the scenarios): no webhook.
    let config = dir.path().join("config.yaml");
    // Fair sharing on (one namespace: it decides nothing here) for the shares it reports.
    let settings = "leader_election: { enabled: false }\nmetrics: { pending_job_series_max: 5 }\n\
                    fair_share: { half_life_seconds: 0 }\n";
    std::fs::write(&config, settings).unwrap();

    rt.block_on(async {
        let nodes: Api<Node> = Api::all(client.clone());
        nodes
            .create(&PostParams::default(), &gpu_node("gpu-0", 8, "NVIDIA-H100-80GB-HBM3", 96_000, 1_048_576))
            .await
            .unwrap();
        let namespaces: Api<Namespace> = Api::all(client.clone());
        namespaces.create(&PostParams::default(), &yaml("metadata: { name: ads }\n")).await.unwrap();
        let classes: Api<PriorityClass> = Api::all(client.clone());
        for (name, value) in [("low", 1000), ("high", 1_000_000)] {
            classes
                .create(&PostParams::default(), &yaml(&format!("metadata: {{ name: {name} }}\nvalue: {value}\n")))
                .await
                .unwrap();
        }
        let quotas: Api<ResourceQuota> = Api::namespaced(client.clone(), "ads");
        let quota = "metadata: { name: gpus, namespace: ads }\nspec: { hard: { requests.nvidia.com/gpu: \"16\" } }\n";
        quotas.create(&PostParams::default(), &yaml(quota)).await.unwrap();
    });
    let jobs: Api<Job> = Api::namespaced(client.clone(), "ads");
    let create = |j: Job| {
        let mut j = j;
        // The explicit opt-in: suspended, labelled, pods pointed at Fairway.
        j.metadata.labels = Some([("fairway.dev/queue".to_owned(), "ads".to_owned())].into());
        let spec = j.spec.as_mut().unwrap();
        spec.suspend = Some(true);
        spec.template.spec.as_mut().unwrap().scheduler_name = Some("fairway".into());
        rt.block_on(jobs.create(&PostParams::default(), &j)).unwrap();
    };
    let suspended = |name: &str| rt.block_on(jobs.get(name)).unwrap().spec.unwrap().suspend == Some(true);
    let pods: Api<Pod> = Api::namespaced(client.clone(), "ads");
    let live_pods_of = |name: &str| -> Vec<Pod> {
        let list = rt
            .block_on(pods.list(&ListParams::default().labels(&format!("batch.kubernetes.io/job-name={name}"))))
            .unwrap();
        list.items
            .into_iter()
            .filter(|p| !matches!(p.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Succeeded" | "Failed")))
            .collect()
    };

    let mut controller = start_controller(&kubeconfig, &config);
    // The victims take 80 s (8 s here) to stop, within their 300 s of grace.
    create(job("low-a", "low", 4, 80));
    create(job("low-b", "low", 4, 80));
    for name in ["low-a", "low-b"] {
        wait_for(name, || {
            (!suspended(name) && live_pods_of(name).iter().any(|p| p.spec.as_ref().unwrap().node_name.is_some()))
                .then_some(())
        });
    }

    // The CLI reads the controller.
    let base = controller.base.clone();
    let ls = cli_ok(&base, &["ls"]);
    for name in ["low-a", "low-b"] {
        assert!(ls.lines().any(|l| l.contains(name) && l.contains("running")), "{ls}");
    }
    let nodes = cli_ok(&base, &["nodes"]);
    assert!(nodes.contains("gpu-0") && nodes.contains("NVIDIA-H100-80GB-HBM3"), "{nodes}");
    let quota = cli_ok(&base, &["quota"]);
    assert!(quota.contains("ads") && quota.contains("16"), "{quota}");
    // ads holds the node's 8 GPUs: with a half-life of 0, (8 + 8) / 8.
    assert!(quota.lines().next().is_some_and(|l| l.ends_with("FAIR SHARE   WEIGHT")), "{quota}");
    assert!(quota.lines().any(|l| l.starts_with("project") && l.ends_with("2.000        1")), "{quota}");
    let describe = cli_ok(&base, &["describe", "ads/low-a"]);
    assert!(describe.contains("low-a") && describe.contains("gpu-0"), "{describe}");
    // The dashboard's snapshot: the same shape as the server's, read-only.
    let dashboard = dashboard_of(&rt, &base);
    assert_eq!(
        (dashboard["driver"].as_str(), dashboard["viewer"]["role"].as_str()),
        (Some("kubernetes"), Some("read-only"))
    );
    let mut placed: Vec<&str> =
        dashboard["placed"].as_array().unwrap().iter().map(|j| j["name"].as_str().unwrap()).collect();
    placed.sort_unstable();
    assert_eq!(placed, ["low-a", "low-b"]);
    assert!(dashboard["placed"].as_array().unwrap().iter().all(|j| j["may_cancel"] == false && j["tier"] == "low"));
    let mut holders: Vec<&str> =
        dashboard["nodes"][0]["gpus"].as_array().unwrap().iter().filter_map(|g| g["job_name"].as_str()).collect();
    holders.sort_unstable();
    assert_eq!(holders, ["low-a", "low-a", "low-a", "low-a", "low-b", "low-b", "low-b", "low-b"]);
    // Kubernetes is the source of truth: changes are refused, with the reason.
    let (ok, _, err) = cli(&base, &["cancel", "ads/low-a"]);
    assert!(!ok && err.contains("the cluster is the source of truth"), "{err}");

    // A high Job preempts both.
    create(job("urgent", "high", 8, 0));
    wait_for("the victims to be suspended", || (suspended("low-a") && suspended("low-b")).then_some(()));
    // Both preemptions count against the victims' queue (low, their namespace).
    wait_for("the preemptions in the metrics", || {
        let metrics =
            rt.block_on(async { reqwest::get(format!("{base}/metrics")).await.unwrap().text().await.unwrap() });
        metrics
            .lines()
            .any(|l| l == "fairway_queue_preemptions_total{tier=\"low\",tenant=\"ads\",cause=\"priority\"} 2")
            .then_some(())
    });
    let why = cli_ok(&base, &["why", "ads/urgent"]);
    assert!(
        why.contains("waiting for the preemption of") && why.contains("ads/low-a") && why.contains("ads/low-b"),
        "{why}"
    );

    // Killed mid-preemption, started again.
    let pid = controller.child.id() as i32;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL).unwrap();
    controller.child.wait().unwrap();
    let bindings_before = cluster.stats().requests.get("create pods/binding").copied().unwrap_or(0);
    controller = start_controller(&kubeconfig, &config);
    let base = controller.base.clone();
    // Rebuilt from the cluster: the victims on their way out, their GPUs held for urgent.
    let why = wait_for_seen("the rebuilt controller to answer", || {
        let (ok, out, err) = cli(&base, &["why", "ads/urgent"]);
        if ok && out.contains("waiting for the preemption") { Ok(out) } else { Err(format!("{out}{err}")) }
    });
    assert!(why.contains("ads/low-a") && why.contains("ads/low-b"), "{why}");
    assert!(suspended("urgent"), "admitted while its victims' pods still run");
    // Once their pods are gone, urgent runs; one pod, bound once.
    wait_for("urgent to run", || {
        let live = live_pods_of("urgent");
        (!suspended("urgent")
            && live.len() == 1
            && live[0].spec.as_ref().unwrap().node_name.as_deref() == Some("gpu-0"))
        .then_some(())
    });
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(live_pods_of("urgent").len(), 1);
    assert!(live_pods_of("low-a").is_empty() && live_pods_of("low-b").is_empty());
    let bindings = cluster.stats().requests.get("create pods/binding").copied().unwrap_or(0) - bindings_before;
    assert_eq!(bindings, 1, "one pod bound after the restart: urgent's");
    assert_eq!(cluster.double_booked(), Vec::<String>::new());
    let ls = cli_ok(&base, &["ls"]);
    assert!(ls.lines().any(|l| l.contains("urgent") && l.contains("running")), "{ls}");
    assert!(ls.lines().any(|l| l.contains("low-a") && l.contains("pending")), "{ls}");
    // A victim back in the queue says where it stands, and the share that ranks it: ads holds
    // the node's 8 GPUs through urgent, (8 + 8) / 8 with a half-life of 0.
    let why = cli_ok(&base, &["why", "ads/low-a"]);
    assert!(why.contains("in the queue; fair sharing ranks it by its project's share 2.0000"), "{why}");
    let why = cli_ok(&base, &["why", "ads/low-a"]);
    assert!(why.contains("no node with 4 free GPUs"), "{why}");
    // The dashboard: urgent on the GPUs, the victims first in the queue with that reason.
    let dashboard = dashboard_of(&rt, &base);
    let pending = dashboard["pending"].as_array().unwrap();
    // In queue order (the two were requeued together: either may lead).
    let positions: Vec<u64> = pending.iter().map(|j| j["position"].as_u64().unwrap()).collect();
    assert_eq!(positions, [1, 2]);
    let mut names: Vec<&str> = pending.iter().map(|j| j["name"].as_str().unwrap()).collect();
    names.sort_unstable();
    assert_eq!(names, ["low-a", "low-b"]);
    assert!(pending[0]["reason"].as_str().unwrap().contains("no node with 4 free GPUs"), "{dashboard}");
    let queue = &dashboard["queues"].as_array().unwrap().iter().find(|q| q["tier"] == "low").unwrap();
    assert_eq!((queue["tenant"].as_str(), queue["pending"].as_u64()), (Some("ads"), Some(2)));
    // And in a real browser, with no token (this controller asks for none).
    rt.block_on(async {
        let logs = tempfile::tempdir().unwrap();
        let browser = crate::browser::Browser::start(&logs.path().join("chromedriver.log")).await;
        let c = &browser.client;
        c.goto(&format!("{base}/ui/")).await.unwrap();
        crate::dashboard::wait_true(c, "urgent on eight GPUs", "document.querySelectorAll('a.gpu').length === 8 && document.querySelector('a.gpu').textContent.startsWith('urgent')").await;
        assert_eq!(c.find(fantoccini::Locator::Css("#who")).await.unwrap().text().await.unwrap(), "read-only view");
        c.goto(&format!("{base}/ui/#/queues")).await.unwrap();
        crate::dashboard::wait_true(c, "the victims in the queue", "document.querySelectorAll('#pending tbody tr').length === 2").await;
        let cancel = c.find_all(fantoccini::Locator::Css("button.danger")).await.unwrap();
        assert!(cancel.is_empty(), "nothing to cancel from a read-only view");
        let errors = crate::dashboard::console_errors(c).await;
        assert!(errors.is_empty(), "console errors: {errors:#?}");
        browser.close().await;
    });

    // The metrics are the standalone server's names.
    let metrics = rt.block_on(async { reqwest::get(format!("{base}/metrics")).await.unwrap().text().await.unwrap() });
    for name in ["fairway_jobs{", "fairway_preemptions_total", "fairway_gpus_allocated 8"] {
        assert!(metrics.contains(name), "{name} missing from:\n{metrics}");
    }
    // The two requeued victims wait in the low tier of their namespace (the tenant); the
    // whole test takes well under a minute.
    let queue = |name: &str| {
        let prefix = format!("{name}{{tier=\"low\",tenant=\"ads\"}} ");
        metrics.lines().find_map(|l| l.strip_prefix(prefix.as_str())).map(|v| v.parse::<i64>().unwrap())
    };
    assert_eq!(queue("fairway_queue_pending_jobs"), Some(2), "{metrics}");
    // Both wait for room (their first reason), counted by tier and reason.
    let by_reason: Vec<&str> = metrics.lines().filter(|l| l.starts_with("fairway_pending_jobs_by_reason{")).collect();
    assert_eq!(by_reason, ["fairway_pending_jobs_by_reason{tier=\"low\",reason=\"no_fit\"} 2"], "{metrics}");
    let oldest = queue("fairway_queue_oldest_pending_seconds").expect("the low queue's longest wait");
    assert!((0..=60).contains(&oldest), "waited {oldest} s since the requeue");
    // Their queue's head is expected once urgent's run ends (by the default estimate of an
    // hour, since it names no deadline).
    let head = queue("fairway_queue_head_start_estimate_seconds").expect("the low queue's expected start");
    assert!((3_000..=3_600).contains(&head), "expected in {head} s");
    // The victims' runs, which reported no checkpoint, lost all their work: 4 GPUs each from
    // admission to the end of their pods, counted by the leader that saw them end.
    let lost = metrics
        .lines()
        .find_map(|l| l.strip_prefix("fairway_queue_gpu_hours_lost_total{tier=\"low\",tenant=\"ads\"} "))
        .map(|v| v.parse::<f64>().unwrap())
        .expect("the victims' lost work");
    assert!(lost > 0.0 && lost < 8.0 / 60.0, "{lost} GPU-h lost by two 4-GPU runs of under a minute");
    // The opt-in per-job series name each waiting workload.
    for name in ["low-a", "low-b"] {
        let series = format!("fairway_job_pending_seconds{{tier=\"low\",tenant=\"ads\",job_name=\"{name}\",job_id=");
        assert!(metrics.lines().any(|l| l.starts_with(&series)), "{series} missing from:\n{metrics}");
    }
    // Counts start at zero with each leader: the new one preempted nothing.
    assert!(!metrics.contains("fairway_queue_preemptions_total{"), "{metrics}");
    // The new leader admitted urgent: one wait, counted for its tier and namespace.
    assert!(
        metrics.lines().any(|l| l == "fairway_job_wait_seconds_count{tier=\"high\",tenant=\"ads\"} 1"),
        "{metrics}"
    );
    // What each queue holds: urgent's 8 GPUs in the high tier; the low tier nothing.
    assert!(metrics.lines().any(|l| l == "fairway_queue_gpus_allocated{tier=\"high\",tenant=\"ads\"} 8"), "{metrics}");
    assert!(!metrics.contains("fairway_queue_gpus_allocated{tier=\"low\""), "{metrics}");
    // The namespace's ResourceQuota (16 GPUs) against what it holds: urgent's 8.
    for (name, want) in
        [("fairway_quota_gpus_used", "8"), ("fairway_quota_gpus_max", "16"), ("fairway_quota_fair_share", "2.0")]
    {
        let line = format!("{name}{{kind=\"project\",account=\"ads\"}} {want}");
        assert!(metrics.lines().any(|l| l == line), "{line} missing from:\n{metrics}");
    }
    drop(controller);
    rt.block_on(cluster.shutdown());
}
