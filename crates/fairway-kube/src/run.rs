//! `fairway kube`: the whole controller in one process: the webhook and the read-only API
//! on every replica, the watches and the engine on the leader.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Arc;

use tokio::sync::oneshot;

use crate::KubeError;
use crate::controller::{Controller, shared_engine};
use crate::http::ApiState;
use crate::leader::Leadership;
use crate::settings::Settings;

/// Where the process listens, once it does (ports given as 0 are resolved).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Listening {
    pub api: SocketAddr,
    pub metrics: Option<SocketAddr>,
    pub webhook: Option<SocketAddr>,
}

/// Runs until `shutdown` resolves, or until leadership is lost (an error: the process
/// should exit so that Kubernetes restarts it as a follower).
pub async fn run(
    settings: Settings,
    client: kube::Client,
    shutdown: impl Future<Output = ()>,
) -> Result<(), KubeError> {
    run_with(settings, client, shutdown, |_| {}).await
}

/// [`run`], telling `listening` where it listens before it starts watching.
pub async fn run_with(
    settings: Settings,
    client: kube::Client,
    shutdown: impl Future<Output = ()>,
    listening: impl FnOnce(Listening),
) -> Result<(), KubeError> {
    let engine = shared_engine(&settings);
    let metrics = Arc::new(crate::http::KubeMetrics::new());
    let tokens = match &settings.api_tokens_file {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|source| KubeError::Io { what: format!("reading {}", path.display()), source })?;
            let set: BTreeSet<String> =
                text.lines().map(str::trim).filter(|l| !l.is_empty()).map(str::to_owned).collect();
            Some(Arc::new(set))
        }
        None => None,
    };
    let role = crate::leader::Role::new(&settings.leader_election);
    let state = ApiState { engine: engine.clone(), metrics, tokens, role: role.clone() };
    let api = crate::http::router(state.clone());
    let api_addr: SocketAddr =
        settings.listen.parse().map_err(|_| KubeError::Config(format!("listen: {:?}", settings.listen)))?;
    let api_tls = match &settings.tls {
        Some(t) => Some(fairway_server::listen::tls_acceptor(&t.cert_file, &t.key_file).map_err(KubeError::Config)?),
        None => None,
    };
    let (api_stop, api_stopped) = oneshot::channel();
    let listener = bind(api_addr).await?;
    let api_bound = listener.local_addr().unwrap_or(api_addr);
    tracing::info!("read-only API on {api_bound}");
    let api_task = tokio::spawn(fairway_server::listen::serve(listener, api, listen_config(api_tls), api_stopped));

    let mut metrics_bound = None;
    let mut metrics_task = None;
    let mut metrics_stop = None;
    if let Some(listen) = &settings.metrics_listen {
        let addr: SocketAddr = listen.parse().map_err(|_| KubeError::Config(format!("metrics_listen: {listen:?}")))?;
        let (stop, stopped) = oneshot::channel();
        let listener = bind(addr).await?;
        metrics_bound = Some(listener.local_addr().unwrap_or(addr));
        tracing::info!("metrics on {}", listener.local_addr().map_or(addr, |a| a));
        metrics_task = Some(tokio::spawn(fairway_server::listen::serve(
            listener,
            crate::http::metrics_router(state),
            listen_config(None),
            stopped,
        )));
        metrics_stop = Some(stop);
    }
    let mut webhook_bound = None;
    let mut bundle_task = None;
    let mut webhook_task = None;
    let mut webhook_stop = None;
    if let Some(w) = &settings.webhook {
        let addr: SocketAddr =
            w.listen.parse().map_err(|_| KubeError::Config(format!("webhook.listen: {:?}", w.listen)))?;
        let tls = match (&w.cert_file, &w.key_file) {
            (Some(cert), Some(key)) => fairway_server::listen::tls_acceptor(cert, key).map_err(KubeError::Config)?,
            _ => {
                let made = crate::certs::ensure(&client, &w.managed_cert).await?;
                bundle_task = Some(tokio::spawn(crate::certs::keep_ca_bundle(
                    client.clone(),
                    w.managed_cert.clone(),
                    made.ca_pem.clone(),
                )));
                fairway_server::listen::tls_acceptor_pem(made.cert_pem.as_bytes(), made.key_pem.as_bytes()).map_err(
                    |e| {
                        KubeError::Config(format!(
                            "the webhook certificate in Secret {}/{}: {e}",
                            w.managed_cert.namespace, w.managed_cert.secret_name
                        ))
                    },
                )?
            }
        };
        let (stop, stopped) = oneshot::channel();
        let listener = bind(addr).await?;
        webhook_bound = Some(listener.local_addr().unwrap_or(addr));
        tracing::info!("admission webhook on {}", listener.local_addr().map_or(addr, |a| a));
        let router = crate::webhook::router(crate::webhook::Mutation {
            scheduler_name: settings.scheduler_name.clone(),
            gpu_resource: settings.gpu_resource.clone(),
        });
        webhook_task =
            Some(tokio::spawn(fairway_server::listen::serve(listener, router, listen_config(Some(tls)), stopped)));
        webhook_stop = Some(stop);
    }

    listening(Listening { api: api_bound, metrics: metrics_bound, webhook: webhook_bound });
    let identity = settings
        .leader_election
        .identity
        .clone()
        .or_else(|| std::env::var("POD_NAME").ok())
        .unwrap_or_else(|| format!("fairway-{}", std::process::id()));
    let leading = async {
        let leadership = settings
            .leader_election
            .enabled
            .then(|| Leadership::new(client.clone(), &settings.leader_election, identity.clone(), role.clone()));
        if let Some(l) = &leadership {
            tracing::info!(identity, "waiting to lead");
            l.acquire().await;
            tracing::info!(identity, "leading");
        }
        let controller = Controller::start(client.clone(), settings.clone(), engine.clone());
        match &leadership {
            Some(l) => l.keep().await,
            None => std::future::pending().await,
        }
        controller.shutdown().await;
    };
    let result = tokio::select! {
        () = shutdown => Ok(()),
        () = leading => Err(KubeError::Config("lost the leader Lease; exiting so that a new leader takes over".into())),
    };
    // Shut down while leading: fair sharing's memory is saved for the next leader. Not
    // when leadership was lost: another leader may already have written newer figures.
    if result.is_ok() && role.acts() {
        save_recent_usage(&client, &settings, &engine).await;
    }
    if let Some(task) = bundle_task {
        task.abort();
    }
    let _ = api_stop.send(());
    let _ = api_task.await;
    if let (Some(stop), Some(task)) = (metrics_stop, metrics_task) {
        let _ = stop.send(());
        let _ = task.await;
    }
    if let (Some(stop), Some(task)) = (webhook_stop, webhook_task) {
        let _ = stop.send(());
        let _ = task.await;
    }
    result
}

/// Saves fair sharing's recent averages now (`recent_usage.rs`), if the engine has any, for
/// a few seconds at most.
async fn save_recent_usage(client: &kube::Client, settings: &Settings, engine: &crate::controller::SharedEngine) {
    let now = crate::controller::now_ms();
    let Some(saved) = engine.lock().expect("not poisoned").recent_usage_document(now) else { return };
    let namespace = &settings.leader_election.namespace;
    let json = saved.to_json();
    let write = crate::recent_usage::save(client, namespace, &json);
    match tokio::time::timeout(std::time::Duration::from_secs(5), write).await {
        Ok(Ok(())) => tracing::info!(accounts = saved.accounts.len(), "fair sharing's recent usage saved"),
        Ok(Err(e)) => tracing::warn!("saving fair sharing's recent usage: {e}"),
        Err(_) => tracing::warn!("saving fair sharing's recent usage: no answer within 5 s"),
    }
}

fn listen_config(tls: Option<tokio_rustls::TlsAcceptor>) -> fairway_server::listen::ListenConfig {
    fairway_server::listen::ListenConfig {
        connections_max: 1024,
        header_read_timeout: std::time::Duration::from_secs(10),
        tls,
    }
}

async fn bind(addr: SocketAddr) -> Result<tokio::net::TcpListener, KubeError> {
    tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| KubeError::Io { what: format!("listening on {addr}"), source })
}
