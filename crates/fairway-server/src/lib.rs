//! # fairway-server
//!
//! The standalone server (`fairway serve`): the scheduling core driven by real events, an
//! embedded SQLite store, jobs as real processes on local (or simulated) GPUs, an HTTP API
//! and Prometheus metrics. One binary, zero setup.
//!
//! Threads and tasks:
//! - the **engine** thread ([`engine`]) owns the core and the store's writer; every change
//!   goes through its command channel, in order;
//! - the **executor** task ([`executor`]) launches, watches and signals processes;
//! - the **HTTP** tasks ([`http`]) parse requests, read the store, and ask the engine.

pub mod api;
pub mod auth;
pub mod clock;
pub mod config;
pub mod crash;
pub mod dashboard;
pub mod datadir;
pub mod engine;
mod error;
pub mod executor;
pub mod http;
pub mod listen;
pub mod metrics;
pub mod notify;

use std::net::SocketAddr;
use std::sync::{Arc, RwLock};

use fairway_exec::{GpuLayout, GpuSource, SimulatedGpus};
use fairway_store::Store;
use tokio::sync::oneshot;

pub use config::{ConfigFile, ServerConfig};
pub use error::{ApiError, ServerError, parse_json, parse_query, where_and_why};

use crate::api::ImageView;
use crate::engine::{Cluster, Command, Engine, EngineParts};
use crate::metrics::Metrics;

/// A started server. Dropping it does not stop it; call [`RunningServer::shutdown`].
pub struct RunningServer {
    /// The address it listens on (the real port when asked for port 0).
    pub addr: SocketAddr,
    /// The data directory, absolute; locked until the server is shut down.
    pub data_dir: std::path::PathBuf,
    /// Whether the API is served over TLS.
    pub tls: bool,
    engine: std::sync::mpsc::Sender<Command>,
    registry_file: Option<std::path::PathBuf>,
    http_stop: Option<oneshot::Sender<()>>,
    http_done: tokio::task::JoinHandle<()>,
    engine_done: std::thread::JoinHandle<()>,
    /// Fires when the engine thread ends, however it ends.
    engine_exited: Option<oneshot::Receiver<()>>,
}

/// Sends on drop: tells the server the engine thread ended, even by a panic.
struct ExitSignal(Option<oneshot::Sender<()>>);

impl Drop for ExitSignal {
    fn drop(&mut self) {
        if let Some(tx) = self.0.take() {
            let _ = tx.send(());
        }
    }
}

impl RunningServer {
    /// Stops taking requests and stops the engine, within a few seconds whatever the jobs
    /// do: open requests get [`listen`]'s short drain, the engine finishes its turn. Running
    /// jobs keep running: a server started later on the same data directory re-adopts them.
    /// The data directory's lock is released when the engine (which owns it) is gone.
    pub async fn shutdown(mut self) {
        if let Some(stop) = self.http_stop.take() {
            let _ = stop.send(());
        }
        let _ = self.http_done.await;
        let _ = self.engine.send(Command::Shutdown);
        let _ = tokio::task::spawn_blocking(move || self.engine_done.join()).await;
        if let Some(file) = &self.registry_file
            && datadir::read_registry(file).is_some_and(|dir| dir == self.data_dir)
        {
            let _ = std::fs::remove_file(file);
        }
    }

    /// Resolves if the engine thread ends before [`RunningServer::shutdown`]: a bug (it
    /// panicked). The server cannot schedule any more and should exit.
    pub async fn engine_stopped(&mut self) {
        match self.engine_exited.as_mut() {
            Some(rx) => {
                let _ = rx.await;
            }
            None => std::future::pending().await,
        }
    }
}

/// Takes the data directory, opens the store, finds the GPUs, recovers jobs, and starts the
/// engine, the executor and the HTTP server. Must run inside a tokio runtime.
pub async fn start(mut config: ServerConfig) -> Result<RunningServer, ServerError> {
    let tls = tls_of(&config)?;
    let data_dir = datadir::DataDir::open(&config.data_dir)?;
    config.data_dir = data_dir.path.clone();
    datadir::restrict(&data_dir.path, !config.file.projects.iter().all(|p| p.run_as.is_none()))?;
    let store = Store::open(&config.db_path())?;
    datadir::restrict_store_files(&config.db_path())?;
    let (layout, source) = discover_gpus(&config)?;
    tracing::info!(
        gpus = layout.gpu_count(),
        nodes = layout.nodes.len(),
        source = ?source,
        "GPUs found"
    );
    let cluster = Arc::new(Cluster::new(layout, source));
    let metrics = Arc::new(Metrics::new());
    let runtime = choose_runtime(config.file.container_runtime.as_deref())?;
    match &runtime {
        Some(r) => tracing::info!("container runtime: {}", r.path.display()),
        None => tracing::info!("no container runtime: image jobs are refused unless image_optional"),
    }
    let images = Arc::new(RwLock::new(Vec::new()));
    prepull_images(&config.file.images, runtime.clone(), images.clone());

    let (engine_tx, engine_rx) = std::sync::mpsc::channel();
    let to_engine = engine_tx.clone();
    let exec = executor::spawn(
        Box::new(move |event| {
            let _ = to_engine.send(engine::Command::from(event));
        }),
        config.clock.clone(),
    );
    let tokens = auth::Tokens::new(config.clock.clone());
    let classes = Arc::new(RwLock::new(fairway_spec::PriorityClasses::builtin()));
    let parts = EngineParts {
        config: config.clone(),
        store,
        cluster: cluster.clone(),
        exec,
        metrics: metrics.clone(),
        runtime,
        images,
        tokens: tokens.clone(),
        classes: classes.clone(),
        notices: start_notify(&config, &metrics)?,
    };
    let engine = Engine::start(parts)?;

    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|source| ServerError::Io { what: format!("listening on {}", config.listen), source })?;
    let addr = listener.local_addr().map_err(|source| ServerError::Io { what: "local address".into(), source })?;
    let server_file = datadir::ServerFile { pid: std::process::id(), listen: addr.to_string(), tls: tls.is_some() };
    data_dir.write_server_file(&server_file)?;
    let registry_file = config.registry_dir.as_deref().and_then(|dir| datadir::register(dir, addr, &data_dir.path));

    let (exited_tx, engine_exited) = oneshot::channel();
    let engine_done = std::thread::Builder::new()
        .name("fairway-engine".into())
        .spawn(move || {
            let _signal = ExitSignal(Some(exited_tx));
            // The engine holds the data directory (and its lock) for as long as it runs.
            let _data_dir = data_dir;
            engine.run(engine_rx)
        })
        .map_err(|source| ServerError::Io { what: "starting the engine thread".into(), source })?;

    let limits = &config.file.limits;
    let state = http::AppState {
        engine: engine_tx.clone(),
        readers: http::Readers::new(config.db_path()),
        cluster,
        metrics,
        data_dir: config.data_dir.clone(),
        tokens,
        classes,
        body_bytes_max: limits.request_body_bytes_max,
        body_read_timeout: std::time::Duration::from_secs(limits.body_read_timeout_seconds),
        list_jobs_max: limits.list_jobs_max,
        clock: config.clock.clone(),
    };
    let listen_config = listen::ListenConfig {
        connections_max: limits.connections_max,
        header_read_timeout: std::time::Duration::from_secs(limits.header_read_timeout_seconds),
        tls: tls.clone(),
    };
    let (http_stop, stopped) = oneshot::channel::<()>();
    let app = http::router(state);
    let http_done = tokio::spawn(listen::serve(listener, app, listen_config, stopped));
    Ok(RunningServer {
        addr,
        data_dir: config.data_dir.clone(),
        tls: tls.is_some(),
        engine: engine_tx,
        registry_file,
        http_stop: Some(http_stop),
        http_done,
        engine_done,
        engine_exited: Some(engine_exited),
    })
}

/// TLS from the config, and the rule that needs it: bearer tokens must not cross a network
/// in clear text, so a non-loopback listen address needs TLS unless `--insecure` says
/// otherwise, knowingly.
/// The task that sends the `notify:` rules' notices, if there are rules.
fn start_notify(
    config: &ServerConfig,
    metrics: &Arc<Metrics>,
) -> Result<Option<tokio::sync::mpsc::Sender<notify::Notice>>, ServerError> {
    let settings = &config.file.notify;
    if settings.rules.is_empty() {
        return Ok(None);
    }
    let smtp = settings.smtp.as_ref().map(notify::deliver::Smtp::load).transpose().map_err(ServerError::Config)?;
    let receivers = notify::receivers(settings);
    tracing::info!(rules = settings.rules.len(), receivers = receivers.len(), "notify rules on");
    Ok(Some(notify::deliver::spawn(smtp, receivers, metrics.clone())))
}

fn tls_of(config: &ServerConfig) -> Result<Option<tokio_rustls::TlsAcceptor>, ServerError> {
    let acceptor = match &config.file.tls {
        Some(tls) => Some(listen::tls_acceptor(&tls.cert_file, &tls.key_file).map_err(ServerError::Config)?),
        None => None,
    };
    if acceptor.is_none() && !config.listen.ip().is_loopback() && !config.insecure {
        return Err(ServerError::Config(format!(
            "listening on {} (not loopback) needs TLS: give `tls: {{ cert_file, key_file }}` in the config \
             (or --tls-cert and --tls-key), or pass --insecure to send tokens in clear text anyway",
            config.listen
        )));
    }
    if acceptor.is_none() && !config.listen.ip().is_loopback() {
        tracing::warn!(
            "listening on {} without TLS (--insecure): bearer tokens cross the network in clear text",
            config.listen
        );
    }
    Ok(acceptor)
}

fn discover_gpus(config: &ServerConfig) -> Result<(GpuLayout, GpuSource), ServerError> {
    let simulated = config.simulated_gpus.as_deref().map(SimulatedGpus::parse).transpose()?;
    // The exec error already says how to run without NVIDIA GPUs (--gpus N).
    fairway_exec::discover(simulated.as_ref(), &config.gpu_model).map_err(|e| ServerError::Config(e.to_string()))
}

/// The container runtime to use: the configured one, or one found on the PATH whose daemon
/// answers (a docker CLI without a daemon would only make image jobs fail later).
fn choose_runtime(setting: Option<&str>) -> Result<Option<fairway_exec::ContainerRuntime>, ServerError> {
    let runtime = match setting.unwrap_or("auto") {
        "none" => return Ok(None),
        "auto" => match fairway_exec::detect_runtime() {
            Some(r) => r,
            None => return Ok(None),
        },
        path if std::path::Path::new(path).is_file() => {
            fairway_exec::ContainerRuntime::from_configured(std::path::Path::new(path))
        }
        path => {
            return Err(ServerError::Config(format!(
                "container_runtime: {path:?} is not auto, none, or an existing docker/podman executable"
            )));
        }
    };
    let answers = std::process::Command::new(&runtime.path)
        .args(["version", "--format", "{{.Server.Version}}"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !answers {
        tracing::warn!("{} found but its daemon does not answer; image jobs are refused", runtime.path.display());
        return Ok(None);
    }
    Ok(Some(runtime))
}

/// Pulls the configured images in the background and records whether each is present.
fn prepull_images(
    images: &[String],
    runtime: Option<fairway_exec::ContainerRuntime>,
    status: Arc<RwLock<Vec<ImageView>>>,
) {
    let set = |image: &str, s: String| {
        let mut all = status.write().expect("not poisoned");
        match all.iter_mut().find(|v| v.image == image) {
            Some(v) => v.status = s,
            None => all.push(ImageView { image: image.to_owned(), status: s }),
        }
    };
    let Some(runtime) = runtime else {
        for image in images {
            set(image, "no container runtime".into());
        }
        return;
    };
    for image in images {
        set(image, "pulling".into());
    }
    let images = images.to_vec();
    std::thread::spawn(move || {
        for image in images {
            let s = if fairway_exec::image_present(&runtime, &image) {
                "present".to_owned()
            } else {
                match fairway_exec::pull_image(&runtime, &image) {
                    Ok(()) => "present".to_owned(),
                    Err(e) => format!("failed: {e}"),
                }
            };
            let mut all = status.write().expect("not poisoned");
            if let Some(v) = all.iter_mut().find(|v| v.image == image) {
                v.status = s;
            }
        }
    });
}
