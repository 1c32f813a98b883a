//! The dashboard at size (issue 14, section 5): a standalone server with 1,000 simulated
//! nodes of 8 GPUs, 10,000 pending jobs and 100 running 8-GPU jobs (real processes), and:
//!
//! - the page's first paint with data in Debian's headless Chromium (through chromedriver):
//!   from navigation start to the `fairway-first-render` mark the page sets two frames
//!   after it first draws a snapshot, over fresh navigations;
//! - `GET /v1/dashboard` (the snapshot the page polls): time and size;
//! - `GET /metrics` (a Prometheus scrape): time and size, with the opt-in per-job series at
//!   its most (`metrics.pending_job_series_max: 10000`, one series per pending job): the
//!   largest scrape a server can be asked for.
//!
//! Run: `cargo bench -p fairway-cli --bench dashboard` (release build; needs `chromium` and
//! `chromium-driver`, which `scripts/test` installs). Figures: docs/benchmarks.md.

use std::time::{Duration, Instant};

use fantoccini::Locator;

#[path = "../tests/it/browser.rs"]
mod browser;

const FAIRWAY: &str = env!("CARGO_BIN_EXE_fairway");
const NODES: u32 = 1_000;
const PENDING: usize = 10_000;
const RUNNING: usize = 100;
const NAVIGATIONS: usize = 7;
const SNAPSHOTS: usize = 10;
const SCRAPES: usize = 20;

fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let data = tempfile::tempdir().unwrap();
    let mut config = fairway_server::ServerConfig::new(data.path().to_path_buf());
    config.listen = "127.0.0.1:0".parse().unwrap();
    config.simulated_gpus = Some(format!("{NODES}x8"));
    config.gpu_model = "A100".into();
    config.shim_exe = FAIRWAY.into();
    config.registry_dir = None;
    // The backlog's project may hold nothing: its jobs stay pending, each with its reason.
    config.file = fairway_server::ConfigFile::parse(
        "container_runtime: none\nquotas: [{ project: backlog, gpus_max: 0 }]\nlimits: { jobs_per_submission_max: 1000 }\n\
         metrics: { pending_job_series_max: 10000 }\n",
    )
    .unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = rt.block_on(fairway_server::start(config)).unwrap();
    let base = format!("http://{}", server.addr);
    let token = std::fs::read_to_string(data.path().join("admin.token")).unwrap().trim().to_owned();
    let http = reqwest::Client::new();
    let submit = |yaml: String| {
        let response = rt.block_on(
            http.post(format!("{base}/v1/jobs"))
                .bearer_auth(&token)
                .header("content-type", "application/yaml")
                .body(yaml)
                .send(),
        );
        let response = response.unwrap();
        assert!(response.status().is_success(), "{:?}", rt.block_on(response.text()));
    };
    let tiers = ["critical", "high", "medium", "low"];
    for batch in 0..PENDING / 1000 {
        let yaml: String = (0..1000)
            .map(|i| {
                let n = batch * 1000 + i;
                format!(
                    "---\nname: backlog-{n}\ntenant: {{ user: user-{}, project: backlog }}\npriority: {}\n\
                     resources: {{ gpus: {} }}\ncommand: [\"true\"]\n",
                    n % 20,
                    tiers[n % 4],
                    1 << (n % 4)
                )
            })
            .collect();
        submit(yaml);
    }
    let yaml: String = (0..RUNNING)
        .map(|n| {
            format!(
                "---\nname: train-{n}\ntenant: {{ user: user-{}, project: team-{} }}\npriority: medium\n\
                 resources: {{ gpus: 8 }}\ncommand: [\"sleep\", \"3600\"]\n",
                n % 7,
                n % 5
            )
        })
        .collect();
    submit(yaml);
    let get = |path: &str| {
        let started = Instant::now();
        let response = rt.block_on(http.get(format!("{base}{path}")).bearer_auth(&token).send()).unwrap();
        assert!(response.status().is_success());
        let bytes = rt.block_on(response.bytes()).unwrap().len();
        (started.elapsed().as_secs_f64() * 1000.0, bytes)
    };
    // Until every running job runs.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let response = rt.block_on(http.get(format!("{base}/v1/dashboard")).bearer_auth(&token).send()).unwrap();
        let snapshot: serde_json::Value = rt.block_on(response.json()).unwrap();
        if snapshot["placed_total"] == RUNNING && snapshot["pending_total"] == PENDING {
            break;
        }
        assert!(Instant::now() < deadline, "the jobs did not settle: {}", snapshot["placed_total"]);
        std::thread::sleep(Duration::from_millis(500));
    }

    let snapshots: Vec<(f64, usize)> = (0..SNAPSHOTS).map(|_| get("/v1/dashboard")).collect();
    let scrapes: Vec<(f64, usize)> = (0..SCRAPES).map(|_| get("/metrics")).collect();
    let text = rt.block_on(async {
        http.get(format!("{base}/metrics")).bearer_auth(&token).send().await.unwrap().text().await.unwrap()
    });
    let per_job = text.lines().filter(|l| l.starts_with("fairway_job_pending_seconds{")).count();
    let paints = rt.block_on(first_paints(&base, &token));

    println!("dashboard benchmark: {NODES} nodes x 8 GPUs, {PENDING} pending jobs, {RUNNING} running 8-GPU jobs");
    report("first paint with data (Chromium)", paints.iter().map(|&ms| (ms, 0)).collect(), false);
    report("GET /v1/dashboard", snapshots, true);
    report(&format!("GET /metrics ({per_job} per-job series)"), scrapes, true);

    rt.block_on(async {
        let list = http.get(format!("{base}/v1/jobs?state=running&limit=1000")).bearer_auth(&token).send().await;
        let list: serde_json::Value = list.unwrap().json().await.unwrap();
        for job in list["jobs"].as_array().unwrap() {
            let id = job["id"].as_i64().unwrap();
            let _ = http
                .post(format!("{base}/v1/jobs/{id}/cancel"))
                .bearer_auth(&token)
                .header("content-type", "application/json")
                .send()
                .await;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
        server.shutdown().await;
    });
}

/// Milliseconds from navigation start to the page's first painted snapshot, per navigation.
async fn first_paints(base: &str, token: &str) -> Vec<f64> {
    let log = tempfile::NamedTempFile::new().unwrap();
    let browser = browser::Browser::start(log.path()).await;
    let c = &browser.client;
    let mut paints = Vec::new();
    for _ in 0..NAVIGATIONS {
        c.goto("about:blank").await.unwrap();
        c.goto(&format!("{base}/ui/#token={token}")).await.unwrap();
        c.wait().at_most(Duration::from_secs(60)).for_element(Locator::Css("a.gpu")).await.unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        let ms = loop {
            let mark = c
                .execute("const m = performance.getEntriesByName('fairway-first-render'); return m.length ? m[0].startTime : null;", vec![])
                .await
                .unwrap();
            if let Some(ms) = mark.as_f64() {
                break ms;
            }
            assert!(Instant::now() < deadline, "no first-render mark");
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        paints.push(ms);
    }
    browser.close().await;
    paints
}

fn report(what: &str, mut samples: Vec<(f64, usize)>, sized: bool) {
    samples.sort_by(|a, b| a.0.total_cmp(&b.0));
    let median = samples[samples.len() / 2].0;
    let max = samples.last().unwrap().0;
    let size = if sized { format!(", {} KiB", samples[0].1 / 1024) } else { String::new() };
    println!("  {what}: median {median:.1} ms, max {max:.1} ms over {} runs{size}", samples.len());
}
