//! The accept loop: every connection is bounded before a byte of it reaches a handler.
//!
//! - At most `connections_max` connections at once; one more is closed at once (its client
//!   sees a reset, not a hang), so a flood of idle sockets cannot exhaust file descriptors.
//! - A TLS handshake must finish within [`TLS_HANDSHAKE_TIMEOUT`].
//! - Request headers must arrive within `header_read_timeout`, counted from when the server
//!   starts waiting for them: from the connection's start, and on a kept-alive connection from
//!   the end of the previous response (hyper's HTTP/1 header timer), so an idle or half-sent
//!   connection is closed.
//! - Bodies are read by the handlers within a deadline of their own (see `http.rs`).
//!
//! HTTP/1.1 only: the CLI and Prometheus speak it, and HTTP/2's own idle rules would need
//! bounds of their own.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, oneshot};

/// How long a client has to finish the TLS handshake.
pub const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long open requests (a `logs -f` stream never ends by itself) may run after shutdown.
const SHUTDOWN_DRAIN: Duration = Duration::from_secs(2);

#[derive(Clone)]
pub struct ListenConfig {
    pub connections_max: usize,
    pub header_read_timeout: Duration,
    pub tls: Option<tokio_rustls::TlsAcceptor>,
}

/// Serves `app` on `listener` until `stop` fires, then drains open requests briefly.
pub async fn serve(listener: TcpListener, app: Router, config: ListenConfig, mut stop: oneshot::Receiver<()>) {
    let graceful = GracefulShutdown::new();
    let permits = Arc::new(Semaphore::new(config.connections_max));
    let mut refused: u64 = 0;
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let stream = match accepted {
                    Ok((stream, _peer)) => stream,
                    Err(e) => {
                        // Out of file descriptors, mostly: wait instead of spinning.
                        tracing::warn!("accept: {e}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let Ok(permit) = permits.clone().try_acquire_owned() else {
                    refused += 1;
                    if refused.is_power_of_two() {
                        tracing::warn!(
                            connections_max = config.connections_max,
                            refused,
                            "connection limit reached: closing new connections"
                        );
                    }
                    drop(stream);
                    continue;
                };
                let _ = stream.set_nodelay(true);
                let watcher = graceful.watcher();
                let (app, config) = (app.clone(), config.clone());
                tokio::spawn(async move {
                    let _permit = permit;
                    let mut http = hyper::server::conn::http1::Builder::new();
                    http.timer(TokioTimer::new()).header_read_timeout(config.header_read_timeout);
                    let service = TowerToHyperService::new(app);
                    match config.tls {
                        Some(acceptor) => {
                            let Ok(Ok(tls)) = tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await
                            else {
                                return;
                            };
                            let _ = watcher.watch(http.serve_connection(TokioIo::new(tls), service)).await;
                        }
                        None => {
                            let _ = watcher.watch(http.serve_connection(TokioIo::new(stream), service)).await;
                        }
                    }
                });
            }
            _ = &mut stop => break,
        }
    }
    drop(listener);
    let _ = tokio::time::timeout(SHUTDOWN_DRAIN, graceful.shutdown()).await;
}

/// A TLS acceptor from PEM files: the certificate chain and its private key.
pub fn tls_acceptor(cert: &std::path::Path, key: &std::path::Path) -> Result<tokio_rustls::TlsAcceptor, String> {
    let cert_pem = std::fs::read(cert).map_err(|e| format!("tls.cert_file {}: {e}", cert.display()))?;
    let key_pem = std::fs::read(key).map_err(|e| format!("tls.key_file {}: {e}", key.display()))?;
    acceptor(
        &cert_pem,
        &key_pem,
        &format!("tls.cert_file {}", cert.display()),
        &format!("tls.key_file {}", key.display()),
    )
}

/// A TLS acceptor from PEM text held in memory (a certificate the process made itself).
pub fn tls_acceptor_pem(cert_pem: &[u8], key_pem: &[u8]) -> Result<tokio_rustls::TlsAcceptor, String> {
    acceptor(cert_pem, key_pem, "certificate", "key")
}

/// `cert_what` and `key_what` name the two in errors.
fn acceptor(
    cert_pem: &[u8],
    key_pem: &[u8],
    cert_what: &str,
    key_what: &str,
) -> Result<tokio_rustls::TlsAcceptor, String> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    let certs: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(cert_pem).collect::<Result<_, _>>().map_err(|e| format!("{cert_what}: {e}"))?;
    if certs.is_empty() {
        return Err(format!("{cert_what}: no certificate in it"));
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| format!("{key_what}: {e}"))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("tls: {e}"))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| format!("tls: the key does not fit the certificate or is unusable: {e}"))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}
