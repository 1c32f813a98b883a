//! `fairway serve`: the standalone server in the foreground.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::{Context, Result};
use fairway_server::{ConfigFile, ServerConfig};

#[derive(clap::Args)]
pub struct ServeArgs {
    /// Where the store, logs and checkpoints live.
    #[arg(long, env = "FAIRWAY_DATA_DIR", value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// Address to listen on (loopback unless told otherwise; port 0 picks a free port).
    #[arg(long, value_name = "HOST:PORT")]
    pub listen: Option<SocketAddr>,
    /// Configuration file (YAML): priority classes, quotas, images, limits.
    #[arg(long, env = "FAIRWAY_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Simulated GPUs instead of NVML: `8` (one node) or `16x8` (16 nodes of 8).
    #[arg(long, value_name = "N|NODESxGPUS")]
    pub gpus: Option<String>,
    /// Model name of simulated GPUs.
    #[arg(long, value_name = "NAME")]
    pub gpu_model: Option<String>,
    /// Milliseconds between scheduling ticks when no event arrives.
    #[arg(long, default_value_t = 1000, value_name = "MS")]
    pub tick_ms: u64,
    /// TLS certificate chain (PEM) for the API; with --tls-key. Overrides the config's `tls`.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The certificate's private key (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Allow a non-loopback --listen without TLS: bearer tokens then cross the network in
    /// clear text. Only for a network you trust completely.
    #[arg(long)]
    pub insecure: bool,
}

/// Merges the file and the flags (flags win) into the server's settings.
pub fn config(args: &ServeArgs) -> Result<ServerConfig> {
    let file = match &args.config {
        Some(path) => ConfigFile::load(path)?,
        None => ConfigFile::default(),
    };
    let data_dir = args.data_dir.clone().or(file.data_dir.clone()).unwrap_or_else(|| PathBuf::from("fairway-data"));
    let mut config = ServerConfig::new(data_dir);
    if let Some(listen) = args.listen {
        config.listen = listen;
    } else if let Some(listen) = &file.listen {
        config.listen = listen.parse().with_context(|| format!("config listen: {listen:?} is not HOST:PORT"))?;
    }
    config.simulated_gpus = args.gpus.clone().or(file.gpus.clone());
    config.gpu_model = args.gpu_model.clone().or(file.gpu_model.clone()).unwrap_or_else(|| "GPU".into());
    config.tick_ms = args.tick_ms.max(10);
    config.insecure = args.insecure;
    config.file = file;
    if let (Some(cert_file), Some(key_file)) = (&args.tls_cert, &args.tls_key) {
        config.file.tls =
            Some(fairway_server::config::TlsConfig { cert_file: cert_file.clone(), key_file: key_file.clone() });
    }
    Ok(config)
}

pub fn run(args: &ServeArgs) -> Result<()> {
    init_logging();
    let config = config(args)?;
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    let result = runtime.block_on(async {
        let mut server = fairway_server::start(config).await?;
        let scheme = if server.tls { "https" } else { "http" };
        println!(
            "fairway: listening on {scheme}://{} (data in {}; admin token in {})",
            server.addr,
            server.data_dir.display(),
            server.data_dir.join(fairway_server::datadir::ADMIN_TOKEN_FILE).display()
        );
        tokio::select! {
            () = wait_for_signal() => {}
            () = server.engine_stopped() => {
                anyhow::bail!("the scheduling engine stopped unexpectedly (see the log above); running jobs keep running and are re-adopted at the next start");
            }
        }
        println!("fairway: stopping; running jobs keep running and are re-adopted at the next start");
        server.shutdown().await;
        Ok(())
    });
    // Threads still waiting on job processes (one per running replica) must not keep the
    // server alive until the jobs end: those jobs are re-adopted by the next start.
    runtime.shutdown_timeout(std::time::Duration::from_millis(500));
    result
}

/// Logs to stderr; `RUST_LOG` filters (default: info).
pub fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}

pub async fn wait_for_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("signal handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
