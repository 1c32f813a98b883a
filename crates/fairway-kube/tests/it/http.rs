//! The read-only API on an engine fed here (no cluster): what `fairway ls` and `describe`
//! read of pending workloads.

use std::sync::{Arc, Mutex};

use fairway_kube::controller::now_ms;
use fairway_kube::engine::{Change, Input};
use fairway_kube::http::{ApiState, KubeMetrics, router};
use fairway_kube::leader::Role;
use fairway_kube::workload::Workload;
use fairway_server::api::{JobDetail, JobList, JobView, StartEstimateView};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::engine::{Harness, class, job, node};

/// A Job created `ago_ms` before `now`, with an activeDeadlineSeconds if given.
fn job_at(name: &str, now: u64, ago_ms: u64, deadline_s: Option<i64>) -> Job {
    let mut j = job("ml", name, "low", 8, 1, 0, None);
    let created = k8s_openapi::jiff::Timestamp::from_millisecond((now - ago_ms) as i64).unwrap();
    j.metadata.creation_timestamp = Some(Time(created));
    j.spec.as_mut().unwrap().active_deadline_seconds = deadline_s;
    j
}

/// The API serving `engine` on a loopback port: its base URL.
async fn serve(engine: fairway_kube::engine::Engine) -> String {
    let state = ApiState {
        engine: Arc::new(Mutex::new(engine)),
        metrics: Arc::new(KubeMetrics::new()),
        tokens: None,
        role: Arc::new(Role::default()),
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let at = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router(state)).await });
    format!("http://{at}")
}

/// `train` holds the only node for at most its activeDeadlineSeconds (an hour) from its
/// admission; `eval` (half an hour at most) is first in line and expected when `train`
/// ends, `report` second and expected when `eval` ends. The API gives each pending job its
/// position and expected start, in the list and alone; a running job has neither.
#[tokio::test]
async fn pending_jobs_have_their_queue_position_and_expected_start() {
    let now = now_ms();
    let mut h = Harness::new();
    // The API forecasts from the clock: the engine's cycles are before it.
    h.now = now - 1_000;
    let train = job_at("train", now, 60_000, Some(3600));
    h.start(vec![node("n1", 8)], vec![class("low", 1000)], vec![train], vec![], vec![]);
    h.cycle();
    let admitted_ms = h.now;
    h.feed(Input::Workload(Change::Applied(Workload::from_job(&job_at("eval", now, 50_000, Some(1800))).unwrap())));
    h.feed(Input::Workload(Change::Applied(Workload::from_job(&job_at("report", now, 40_000, None)).unwrap())));
    h.cycle();
    let url = serve(h.engine).await;

    // reqwest is built without a crypto provider of its own; plain HTTP needs none to
    // run, but the client needs one to be built (another test may have installed it).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let http = reqwest::Client::new();
    let list: JobList = http.get(format!("{url}/v1/jobs")).send().await.unwrap().json().await.unwrap();
    let find = |name: &str| -> JobView { list.jobs.iter().find(|j| j.name == name).cloned().unwrap() };
    let at = |ms: u64| Some(StartEstimateView { kind: "at".into(), at_ms: Some(ms) });
    let (train, eval, report) = (find("train"), find("eval"), find("report"));
    assert_eq!((train.queue_position, train.start_estimate), (None, None), "running");
    assert_eq!((eval.queue_position, eval.start_estimate.clone()), (Some(1), at(admitted_ms + 3_600_000)));
    assert_eq!((report.queue_position, report.start_estimate), (Some(2), at(admitted_ms + 3_600_000 + 1_800_000)));

    let detail: JobDetail = http.get(format!("{url}/v1/jobs/{}", eval.id)).send().await.unwrap().json().await.unwrap();
    assert_eq!((detail.job.queue_position, detail.job.start_estimate), (Some(1), eval.start_estimate));
    let detail: JobDetail = http.get(format!("{url}/v1/jobs/{}", train.id)).send().await.unwrap().json().await.unwrap();
    assert_eq!((detail.job.queue_position, detail.job.start_estimate), (None, None));
}
