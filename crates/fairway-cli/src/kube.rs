//! `fairway kube`: the Kubernetes controller in the foreground.

use std::path::PathBuf;

use anyhow::{Context, Result};

#[derive(clap::Args)]
pub struct KubeArgs {
    /// The kubeconfig to use (default: `KUBECONFIG`, then `~/.kube/config`, then the pod's
    /// service account when running in a cluster).
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use (default: its current context).
    #[arg(long, value_name = "NAME")]
    pub context: Option<String>,
    /// Configuration file (YAML): listen addresses, the webhook, GPU resource and labels,
    /// leader election (see docs/kubernetes.md).
    #[arg(long, env = "FAIRWAY_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The read-only API's address (overrides the config's `listen`).
    #[arg(long, value_name = "HOST:PORT")]
    pub listen: Option<String>,
    /// Act at once, without the leader Lease (a single replica).
    #[arg(long)]
    pub no_leader_election: bool,
}

pub fn run(args: &KubeArgs) -> Result<()> {
    crate::serve::init_logging();
    let mut settings = match &args.config {
        Some(path) => fairway_kube::Settings::load(path)?,
        None => fairway_kube::Settings::default(),
    };
    if let Some(listen) = &args.listen {
        settings.listen.clone_from(listen);
    }
    if args.no_leader_election {
        settings.leader_election.enabled = false;
    }
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    let result = runtime.block_on(async {
        let config = match &args.kubeconfig {
            Some(path) => {
                let kubeconfig = kube::config::Kubeconfig::read_from(path)
                    .with_context(|| format!("reading the kubeconfig {}", path.display()))?;
                let options = kube::config::KubeConfigOptions { context: args.context.clone(), ..Default::default() };
                kube::Config::from_custom_kubeconfig(kubeconfig, &options).await?
            }
            None if args.context.is_some() => {
                let options = kube::config::KubeConfigOptions { context: args.context.clone(), ..Default::default() };
                kube::Config::from_kubeconfig(&options).await?
            }
            None => kube::Config::infer().await.context("finding a kubeconfig (give --kubeconfig)")?,
        };
        let client = kube::Client::try_from(config).context("creating the Kubernetes client")?;
        let scheme = if settings.tls.is_some() { "https" } else { "http" };
        fairway_kube::run::run_with(settings, client, crate::serve::wait_for_signal(), |at| {
            // One line, flushed: scripts and tests read the address from it.
            println!("fairway kube: controller started; read-only API on {scheme}://{}", at.api);
            if let Some(metrics) = at.metrics {
                println!("fairway kube: metrics on http://{metrics}/metrics");
            }
        })
        .await?;
        println!("fairway kube: stopped");
        Ok::<(), anyhow::Error>(())
    });
    runtime.shutdown_timeout(std::time::Duration::from_millis(500));
    result
}
