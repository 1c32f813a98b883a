//! The controller's tasks: one watch per kind feeding one engine task, which alone owns the
//! core; the executor carrying out what the engine decides; the read-only API; the webhook;
//! and the Lease that makes one replica the leader.
//!
//! Watches use `kube::runtime::watcher`: a list, then a watch from the list's
//! resourceVersion, with bookmarks; an expired resourceVersion (410) means a fresh list,
//! which the engine turns into "what was not listed again is gone".

use std::sync::{Arc, Mutex};

/// A new, empty engine to share.
pub fn shared_engine(settings: &Settings) -> SharedEngine {
    Arc::new(Mutex::new(Engine::new(settings.clone())))
}
use std::time::Duration;

use futures_util::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, ResourceQuota};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::{Api, DynamicObject};
use kube::runtime::watcher::{self, Event as WatchEvent};
use tokio::sync::{mpsc, watch};

use crate::engine::{Change, Engine, Input, Stream};
use crate::executor::Executor;
use crate::settings::Settings;
use crate::workload::{Workload, paddle_resource};

/// How long the engine gathers inputs before a cycle, at most: a burst of watch events is
/// one cycle, not one each.
const BATCH_WINDOW: Duration = Duration::from_millis(5);
/// A cycle at least this often, for timers.
const TICK: Duration = Duration::from_secs(1);

/// The engine, shared with the read-only API (which only reads it).
pub type SharedEngine = Arc<Mutex<Engine>>;

/// A running controller.
pub struct Controller {
    pub engine: SharedEngine,
    pub executor: Executor,
    stop: watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Controller {
    /// Starts the watches, the engine and the executor on the current runtime. Call once
    /// this replica leads.
    pub fn start(client: kube::Client, settings: Settings, engine: SharedEngine) -> Controller {
        *engine.lock().expect("not poisoned") = Engine::new(settings.clone());
        let executor =
            Executor::start(client.clone(), settings.writes_in_flight_max, settings.status_writes_per_second_max);
        let (tx, rx) = mpsc::unbounded_channel();
        let (stop, stopped) = watch::channel(false);
        let mut tasks = vec![
            tokio::spawn(watch_kind::<Node, _>(
                Api::all(client.clone()),
                Stream::Nodes,
                tx.clone(),
                stopped.clone(),
                |c| Some(Input::Node(c)),
            )),
            tokio::spawn(watch_kind::<Pod, _>(
                Api::all(client.clone()),
                Stream::Pods,
                tx.clone(),
                stopped.clone(),
                |c| Some(Input::Pod(c)),
            )),
            tokio::spawn(watch_kind::<PriorityClass, _>(
                Api::all(client.clone()),
                Stream::Classes,
                tx.clone(),
                stopped.clone(),
                |c| Some(Input::Class(c)),
            )),
            tokio::spawn(watch_kind::<ResourceQuota, _>(
                Api::all(client.clone()),
                Stream::Quotas,
                tx.clone(),
                stopped.clone(),
                |c| Some(Input::Quota(c)),
            )),
            tokio::spawn(watch_kind::<Namespace, _>(
                Api::all(client.clone()),
                Stream::Namespaces,
                tx.clone(),
                stopped.clone(),
                |c| Some(Input::Namespace(c)),
            )),
            tokio::spawn(watch_jobs(Api::all(client.clone()), tx.clone(), stopped.clone())),
            tokio::spawn(watch_paddle(client.clone(), tx.clone(), stopped.clone())),
        ];
        let saved = settings.fair_share.is_some().then(|| (client.clone(), settings.leader_election.namespace.clone()));
        tasks.push(tokio::spawn(run_engine(engine.clone(), rx, executor.clone(), stopped, saved)));
        Controller { engine, executor, stop, tasks }
    }

    /// Stops every task (the cluster keeps its state; a new controller rebuilds from it).
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        for task in self.tasks {
            task.abort();
            let _ = task.await;
        }
    }
}

/// The engine task: gathers inputs, applies them, runs a cycle, hands out actions. With
/// `saved_in` (fair sharing on), first reads the recent averages an earlier leader saved
/// there (`recent_usage.rs`), before any input: the engine hands them to the core when it
/// rebuilds it from the cluster.
async fn run_engine(
    engine: SharedEngine,
    mut rx: mpsc::UnboundedReceiver<Input>,
    executor: Executor,
    mut stopped: watch::Receiver<bool>,
    saved_in: Option<(kube::Client, String)>,
) {
    if let Some((client, namespace)) = saved_in
        && let Some(saved) = crate::recent_usage::load(&client, &namespace).await
    {
        tracing::info!(accounts = saved.accounts.len(), "fair sharing's recent usage read back");
        engine.lock().expect("not poisoned").set_saved_recent_usage(saved);
    }
    let mut tick = tokio::time::interval(TICK);
    loop {
        let first = tokio::select! {
            input = rx.recv() => match input {
                Some(input) => Some(input),
                None => return,
            },
            _ = tick.tick() => None,
            _ = stopped.changed() => return,
        };
        let mut batch: Vec<Input> = first.into_iter().collect();
        let deadline = tokio::time::Instant::now() + BATCH_WINDOW;
        while let Ok(Some(input)) = tokio::time::timeout_at(deadline, rx.recv()).await {
            batch.push(input);
            if batch.len() >= 10_000 {
                break;
            }
        }
        let actions = {
            let mut e = engine.lock().expect("not poisoned");
            let now = now_ms();
            for input in batch {
                e.apply(input, now);
            }
            let started = std::time::Instant::now();
            e.cycle(now);
            e.observe_cycle(started.elapsed().as_secs_f64());
            e.publish_status(now);
            e.take_actions()
        };
        executor.submit(actions);
    }
}

/// Feeds one kind's watch into the engine's channel.
async fn watch_kind<K, F>(
    api: Api<K>,
    stream: Stream,
    tx: mpsc::UnboundedSender<Input>,
    mut stopped: watch::Receiver<bool>,
    wrap: F,
) where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
    K::DynamicType: Default,
    F: Fn(Change<K>) -> Option<Input> + Send + 'static,
{
    let config = watcher::Config::default().any_semantic();
    let mut events = watcher::watcher(api, config).boxed();
    loop {
        let event = tokio::select! {
            e = events.next() => e,
            _ = stopped.changed() => return,
        };
        let Some(event) = event else { return };
        let input = match event {
            Ok(WatchEvent::Init) => Input::Listing(stream),
            Ok(WatchEvent::InitApply(o) | WatchEvent::Apply(o)) => match wrap(Change::Applied(o)) {
                Some(input) => input,
                None => continue,
            },
            Ok(WatchEvent::Delete(o)) => match wrap(Change::Deleted(o)) {
                Some(input) => input,
                None => continue,
            },
            Ok(WatchEvent::InitDone) => Input::Listed(stream),
            Err(e) => {
                tracing::warn!(?stream, "watch: {e}; it is started again");
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        if tx.send(input).is_err() {
            return;
        }
    }
}

async fn watch_jobs(api: Api<Job>, tx: mpsc::UnboundedSender<Input>, stopped: watch::Receiver<bool>) {
    watch_kind::<Job, _>(api, Stream::Jobs, tx, stopped, |change| match change {
        Change::Applied(job) => Workload::from_job(&job).map(|w| Input::Workload(Change::Applied(w))),
        Change::Deleted(job) => Workload::from_job(&job).map(|w| Input::Workload(Change::Deleted(w))),
    })
    .await;
}

async fn watch_paddle(client: kube::Client, tx: mpsc::UnboundedSender<Input>, stopped: watch::Receiver<bool>) {
    let resource = paddle_resource();
    let api: Api<DynamicObject> = Api::all_with(client, &resource);
    let config = watcher::Config::default().any_semantic();
    let mut events = watcher::watcher(api, config).boxed();
    let mut stopped = stopped;
    let mut warned = false;
    loop {
        let event = tokio::select! {
            e = events.next() => e,
            _ = stopped.changed() => return,
        };
        let Some(event) = event else { return };
        let input = match event {
            Ok(WatchEvent::Init) => Input::Listing(Stream::PaddleJobs),
            Ok(WatchEvent::InitApply(o) | WatchEvent::Apply(o)) => match Workload::from_paddle(&o) {
                Some(w) => Input::Workload(Change::Applied(w)),
                None => continue,
            },
            Ok(WatchEvent::Delete(o)) => match Workload::from_paddle(&o) {
                Some(w) => Input::Workload(Change::Deleted(w)),
                None => continue,
            },
            Ok(WatchEvent::InitDone) => Input::Listed(Stream::PaddleJobs),
            Err(e) => {
                // No PaddleJob CRD in the cluster: nothing to watch; say it once, and count
                // the kind as listed so that the rest is not held up.
                if !warned {
                    tracing::info!("PaddleJobs are not watched ({e}); Jobs are");
                    warned = true;
                    let _ = tx.send(Input::Listing(Stream::PaddleJobs));
                    let _ = tx.send(Input::Listed(Stream::PaddleJobs));
                }
                tokio::time::sleep(Duration::from_secs(30)).await;
                continue;
            }
        };
        if tx.send(input).is_err() {
            return;
        }
    }
}

pub fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}
