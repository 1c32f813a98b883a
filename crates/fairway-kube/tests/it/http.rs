//! The read-only API on an engine fed here (no cluster): what `fairway ls` and `describe`
//! read of pending workloads.

use std::sync::{Arc, Mutex};

use fairway_kube::controller::now_ms;
use fairway_kube::engine::{Change, Input, Stream};
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

/// `train` admitted on the only node `n1`, then `eval` and `report` queued behind it (see
/// below), under `settings`; the API serving the engine, and when `train` was admitted.
async fn train_eval_report(settings: fairway_kube::Settings, now: u64) -> (String, u64) {
    let mut h = Harness::with_settings(settings);
    // The API forecasts from the clock: the engine's cycles are before it.
    h.now = now - 1_000;
    let train = job_at("train", now, 60_000, Some(3600));
    h.start(vec![node("n1", 8)], vec![class("low", 1000)], vec![train], vec![], vec![]);
    h.cycle();
    let admitted_ms = h.now;
    h.feed(Input::Workload(Change::Applied(Workload::from_job(&job_at("eval", now, 50_000, Some(1800))).unwrap())));
    h.feed(Input::Workload(Change::Applied(Workload::from_job(&job_at("report", now, 40_000, None)).unwrap())));
    h.cycle();
    (serve(h.engine).await, admitted_ms)
}

/// `GET /v1/jobs` on the API at `url`.
async fn job_list(url: &str) -> JobList {
    // reqwest is built without a crypto provider of its own; plain HTTP needs none to
    // run, but the client needs one to be built (another test may have installed it).
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new().get(format!("{url}/v1/jobs")).send().await.unwrap().json().await.unwrap()
}

/// `train` holds the only node for at most its activeDeadlineSeconds (an hour) from its
/// admission; `eval` (half an hour at most) is first in line and expected when `train`
/// ends, `report` second and expected when `eval` ends. The API gives each pending job its
/// position and expected start, in the list and alone; a running job has neither.
#[tokio::test]
async fn pending_jobs_have_their_queue_position_and_expected_start() {
    let now = now_ms();
    let (url, admitted_ms) = train_eval_report(fairway_kube::Settings::default(), now).await;
    let list = job_list(&url).await;
    // After `job_list`, which installs the TLS provider a client needs.
    let http = reqwest::Client::new();
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

/// `GET path` on the API: the status and the body as JSON.
async fn get_json(http: &reqwest::Client, url: &str, path: &str) -> (u16, serde_json::Value) {
    let response = http.get(format!("{url}{path}")).send().await.unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}: {text}")))
}

/// The API shows the managed workloads the core does not hold, as `fairway ls` lists them
/// all: one the engine refused (its PriorityClass is missing), one that finished, and,
/// while the controller still lists the cluster after a restart, every workload it has
/// read so far. Each is listed, described and explained (`why`) with its state and reason.
#[tokio::test]
async fn workloads_outside_the_queue_are_listed_described_and_explained() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let http = reqwest::Client::new();
    let mut h = Harness::new();
    let mut done = job("ml", "done", "low", 1, 1, 0, None);
    let condition = k8s_openapi::api::batch::v1::JobCondition {
        type_: "Complete".into(),
        status: "True".into(),
        ..Default::default()
    };
    done.status =
        Some(k8s_openapi::api::batch::v1::JobStatus { conditions: Some(vec![condition]), ..Default::default() });
    let gold = job("ml", "gold", "gold", 1, 1, 0, None);
    h.start(vec![node("n1", 8)], vec![class("low", 1000)], vec![done, gold], vec![], vec![]);
    h.cycle();
    let url = serve(h.engine).await;
    let (status, list) = get_json(&http, &url, "/v1/jobs").await;
    assert_eq!(status, 200, "{list}");
    let find = |name: &str| list["jobs"].as_array().unwrap().iter().find(|j| j["name"] == name).cloned().unwrap();
    let (done, gold) = (find("done"), find("gold"));
    assert_eq!(done["state"], "succeeded", "{done}");
    assert_eq!(gold["state"], "pending", "{gold}");
    let (status, detail) = get_json(&http, &url, &format!("/v1/jobs/{}", done["id"])).await;
    assert_eq!((status, &detail["job"]["state"]), (200, &serde_json::json!("succeeded")), "{detail}");
    let (status, why) = get_json(&http, &url, &format!("/v1/jobs/{}/why", gold["id"])).await;
    assert_eq!(status, 200, "{why}");
    let reason = &why["reasons"][0];
    assert_eq!(reason["code"], "invalid", "{why}");
    assert!(reason["message"].as_str().unwrap().contains("no PriorityClass \"gold\""), "{why}");
    let (status, dashboard) = get_json(&http, &url, "/v1/dashboard").await;
    assert_eq!(status, 200, "{dashboard}");

    // A controller that has read the Jobs but not yet the other kinds queues nothing yet.
    let mut h = Harness::new();
    h.feed(Input::Listing(Stream::Jobs));
    h.feed(Input::Workload(Change::Applied(Workload::from_job(&job("ml", "early", "low", 1, 1, 0, None)).unwrap())));
    h.feed(Input::Listed(Stream::Jobs));
    let url = serve(h.engine).await;
    let (status, list) = get_json(&http, &url, "/v1/jobs").await;
    assert_eq!(status, 200, "{list}");
    let early = &list["jobs"][0];
    assert_eq!((&early["name"], &early["state"]), (&serde_json::json!("early"), &serde_json::json!("pending")));
    let (status, why) = get_json(&http, &url, &format!("/v1/jobs/{}/why", early["id"])).await;
    assert_eq!((status, &why["reasons"][0]["code"]), (200, &serde_json::json!("starting")), "{why}");
    let (status, health) = get_json(&http, &url, "/healthz").await;
    assert_eq!((status, &health["status"]), (200, &serde_json::json!("starting")), "{health}");
}

/// With reservations on, the first job that cannot be admitted reserves the node for when
/// `train` is expected to end (its activeDeadlineSeconds from its admission): the API shows
/// the reservation on the job that holds it, and on no other.
#[tokio::test]
async fn the_job_holding_a_reservation_shows_it() {
    let now = now_ms();
    let settings =
        fairway_kube::Settings::parse("reservations: { count: 1, default_runtime_seconds: 3600 }\n").unwrap();
    let (url, admitted_ms) = train_eval_report(settings, now).await;
    let list = job_list(&url).await;
    let find = |name: &str| -> JobView { list.jobs.iter().find(|j| j.name == name).cloned().unwrap() };
    let reservation = find("eval").reservation.expect("eval holds the reservation");
    assert_eq!(reservation.at_ms, admitted_ms + 3_600_000);
    let nodes: Vec<(String, u32, u32)> = reservation.nodes.into_iter().map(|n| (n.node, n.replicas, n.gpus)).collect();
    assert_eq!(nodes, [("n1".to_owned(), 1, 8)]);
    let eval = find("eval").id;
    let why: serde_json::Value =
        reqwest::Client::new().get(format!("{url}/v1/jobs/{eval}/why")).send().await.unwrap().json().await.unwrap();
    assert_eq!(why["reservation"]["at_ms"].as_u64(), Some(admitted_ms + 3_600_000), "{why}");
    // Its place in the queue, as in its job view (no fair sharing here: no shares).
    assert_eq!(why["queue_position"].as_u64(), find("eval").queue_position, "{why}");
    assert!(why["queue_position"].as_u64().is_some() && why.get("fair_share").is_none(), "{why}");
    // And when it is expected to start: its reservation's time.
    let expected = (why["start_estimate"]["kind"].as_str(), why["start_estimate"]["at_ms"].as_u64());
    assert_eq!(expected, (Some("at"), Some(admitted_ms + 3_600_000)), "{why}");
    assert_eq!((find("train").reservation, find("report").reservation), (None, None));
    // The node list shows the reservation on its node.
    let nodes: serde_json::Value =
        reqwest::Client::new().get(format!("{url}/v1/nodes")).send().await.unwrap().json().await.unwrap();
    let n1 = nodes["nodes"].as_array().unwrap().iter().find(|n| n["name"] == "n1").expect("n1 listed");
    let on_node = &n1["reservations"][0];
    assert_eq!(
        (on_node["job"].as_i64(), on_node["gpus"].as_u64(), on_node["at_ms"].as_u64()),
        (Some(eval), Some(8), Some(admitted_ms + 3_600_000)),
        "{nodes}"
    );
}
