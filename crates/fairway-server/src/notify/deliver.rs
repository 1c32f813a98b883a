//! Sending notices: e-mail through the configured relay (lettre) and webhooks (reqwest), on
//! a task of the server's runtime, so that a slow relay never holds the engine. The engine
//! hands notices over a bounded queue; a full queue drops the notice (counted).

use std::sync::Arc;
use std::time::Duration;

use lettre::message::{Mailbox, header::ContentType};
use lettre::transport::smtp::authentication::Credentials;
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};
use serde_json::json;
use tokio::sync::mpsc;

use super::{Notice, Receiver, Status};
use crate::config::SmtpConfig;
use crate::metrics::Metrics;

/// Notices waiting to be sent, at most.
pub const QUEUE_MAX: usize = 1024;
/// How long one SMTP session or webhook call may take.
const TIMEOUT: Duration = Duration::from_secs(10);
/// Waits before the second and third tries of a delivery that failed.
const RETRY_AFTER: [Duration; 2] = [Duration::from_secs(2), Duration::from_secs(10)];

/// How mail leaves: the relay and the sender, the password read from its file.
#[derive(Clone)]
pub struct Smtp {
    pub host: String,
    pub port: u16,
    pub security: Security,
    pub credentials: Option<(String, String)>,
    pub from: Mailbox,
}

impl std::fmt::Debug for Smtp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the password.
        f.debug_struct("Smtp")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("security", &self.security)
            .field("username", &self.credentials.as_ref().map(|c| &c.0))
            .field("from", &self.from.to_string())
            .finish()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Security {
    StartTls,
    Tls,
    None,
}

impl Smtp {
    /// From a checked config, reading the password file.
    pub fn load(config: &SmtpConfig) -> Result<Smtp, String> {
        let security = security_of(config.security.as_deref())?;
        let credentials = match (&config.username, &config.password_file) {
            (Some(user), Some(path)) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| format!("notify.smtp.password_file: cannot read {}: {e}", path.display()))?;
                let password = text.lines().next().unwrap_or("").to_owned();
                Some((user.clone(), password))
            }
            _ => None,
        };
        let port = config.port.unwrap_or(match security {
            Security::StartTls => 587,
            Security::Tls => 465,
            Security::None => 25,
        });
        let from = config.from.parse().map_err(|e| format!("notify.smtp.from: {e}"))?;
        Ok(Smtp { host: config.host.clone(), port, security, credentials, from })
    }

    fn transport(&self) -> Result<AsyncSmtpTransport<Tokio1Executor>, String> {
        let builder = match self.security {
            Security::StartTls => AsyncSmtpTransport::<Tokio1Executor>::starttls_relay(&self.host),
            Security::Tls => AsyncSmtpTransport::<Tokio1Executor>::relay(&self.host),
            Security::None => Ok(AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(&self.host)),
        };
        let mut builder = builder.map_err(|e| e.to_string())?.port(self.port).timeout(Some(TIMEOUT));
        if let Some((user, password)) = &self.credentials {
            builder = builder.credentials(Credentials::new(user.clone(), password.clone()));
        }
        Ok(builder.build())
    }
}

fn security_of(text: Option<&str>) -> Result<Security, String> {
    match text.unwrap_or("starttls") {
        "starttls" => Ok(Security::StartTls),
        "tls" => Ok(Security::Tls),
        "none" => Ok(Security::None),
        other => Err(format!("security: {other:?} is not starttls, tls or none")),
    }
}

fn is_loopback(host: &str) -> bool {
    host == "localhost" || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// The field (under `notify.smtp`) and the reason, for what cannot work.
pub(super) fn check_smtp(smtp: &SmtpConfig) -> Result<(), String> {
    let host_ok = !smtp.host.is_empty()
        && smtp.host.len() <= 253
        && smtp.host.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | ':'));
    if !host_ok {
        return Err(format!("host: {:?} is not a host name or address", smtp.host));
    }
    let security = security_of(smtp.security.as_deref())?;
    if smtp.port == Some(0) {
        return Err("port: must be from 1 to 65535".into());
    }
    match (&smtp.username, &smtp.password_file) {
        (Some(_), None) => return Err("password_file: required with username".into()),
        (None, Some(_)) => return Err("username: required with password_file".into()),
        (Some(_), Some(_)) if security == Security::None && !is_loopback(&smtp.host) => {
            return Err(format!(
                "security: none would send the password in clear text to {}; use starttls or tls",
                smtp.host
            ));
        }
        _ => {}
    }
    smtp.from.parse::<Mailbox>().map(|_| ()).map_err(|e| format!("from: {:?} is not an address: {e}", smtp.from))
}

pub(super) fn check_address(address: &str) -> Result<(), String> {
    address.parse::<Mailbox>().map(|_| ()).map_err(|e| format!("{address:?} is not an address: {e}"))
}

pub(super) fn check_webhook_url(url: &str) -> Result<(), String> {
    let parsed = reqwest::Url::parse(url).map_err(|e| format!("{url:?} is not a URL: {e}"))?;
    if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
        return Err(format!("{url:?} must be an http:// or https:// URL with a host"));
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err("must not carry a user or password (they would show in logs)".into());
    }
    Ok(())
}

/// The subject and the plain-text body of a notice's e-mail.
pub fn email_text(notice: &Notice) -> (String, String) {
    let count = notice.alerts.len() + notice.truncated;
    let status = match notice.status {
        Status::Firing => "FIRING",
        Status::Resolved => "RESOLVED",
    };
    let subject = match (&notice.alerts[..], notice.truncated) {
        ([one], 0) => format!("[Fairway {status}] {}: {}", notice.rule, one.summary),
        _ => format!("[Fairway {status}:{count}] {}: {count} jobs", notice.rule),
    };
    let mut body = match notice.status {
        Status::Firing => format!("Rule {} ({}) fires for {count} job(s).\n\n", notice.rule, notice.rule_text),
        Status::Resolved => format!("Rule {} ({}) resolved for {count} job(s).\n\n", notice.rule, notice.rule_text),
    };
    for a in &notice.alerts {
        body += &format!("- {} (#{}): tier {}, tenant {}, user {}\n", a.job_name, a.job_id, a.tier, a.tenant, a.user);
        body += &format!("  {}\n", a.description);
        match a.ends_at_ms {
            Some(end) => body += &format!("  from {} to {}\n", timestamp(a.starts_at_ms), timestamp(end)),
            None => body += &format!("  since {}\n", timestamp(a.starts_at_ms)),
        }
    }
    if notice.truncated > 0 {
        body += &format!("- and {} more (at most {} are listed)\n", notice.truncated, super::ALERTS_PER_NOTICE_MAX);
    }
    body += "\nSent by the Fairway server (config: notify.rules). `fairway describe <id>` shows a job's history.\n";
    (subject, body)
}

/// The webhook's body: Alertmanager's webhook JSON (version 4).
pub fn webhook_body(notice: &Notice, receiver: &Receiver) -> serde_json::Value {
    let alerts: Vec<serde_json::Value> = notice
        .alerts
        .iter()
        .map(|a| {
            json!({
                "status": notice.status.as_str(),
                "labels": {
                    "alertname": notice.rule,
                    "tier": a.tier,
                    "tenant": a.tenant,
                    "user": a.user,
                    "job_name": a.job_name,
                    "job_id": a.job_id.to_string(),
                },
                "annotations": { "summary": a.summary, "description": a.description },
                "startsAt": timestamp(a.starts_at_ms),
                "endsAt": a.ends_at_ms.map_or_else(|| "0001-01-01T00:00:00Z".to_owned(), timestamp),
                "generatorURL": "",
                "fingerprint": format!("{}/{}", notice.rule, a.job_id),
            })
        })
        .collect();
    json!({
        "version": "4",
        "groupKey": format!("{{}}:{{alertname=\"{}\"}}", notice.rule),
        "truncatedAlerts": notice.truncated,
        "status": notice.status.as_str(),
        "receiver": receiver.name,
        "groupLabels": { "alertname": notice.rule },
        "commonLabels": { "alertname": notice.rule },
        "commonAnnotations": { "summary": notice.rule_text },
        "externalURL": "",
        "alerts": alerts,
    })
}

fn timestamp(ms: u64) -> String {
    jiff::Timestamp::from_millisecond(ms as i64).map_or_else(|_| ms.to_string(), |t| t.to_string())
}

/// Starts the sending task; returns the queue the engine hands notices to.
pub fn spawn(smtp: Option<Smtp>, receivers: Vec<Receiver>, metrics: Arc<Metrics>) -> mpsc::Sender<Notice> {
    let (tx, mut rx) = mpsc::channel::<Notice>(QUEUE_MAX);
    let _ = rustls::crypto::ring::default_provider().install_default();
    tokio::spawn(async move {
        let transport = smtp.as_ref().map(Smtp::transport);
        let http = reqwest::Client::builder()
            .timeout(TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| e.to_string());
        while let Some(notice) = rx.recv().await {
            let receiver = &receivers[notice.receiver];
            if !receiver.email_to.is_empty() {
                let outcome = match (&smtp, &transport) {
                    (Some(smtp), Some(Ok(transport))) => {
                        retrying("e-mail", receiver, || send_email(transport, smtp, receiver, &notice)).await
                    }
                    (_, Some(Err(e))) => Err(e.clone()),
                    _ => Err("no notify.smtp".into()),
                };
                metrics.notified(&receiver.name, "email", if outcome.is_ok() { "sent" } else { "failed" });
            }
            if let Some(url) = &receiver.webhook_url {
                let outcome = match &http {
                    Ok(http) => retrying("webhook", receiver, || send_webhook(http, url, receiver, &notice)).await,
                    Err(e) => Err(e.clone()),
                };
                metrics.notified(&receiver.name, "webhook", if outcome.is_ok() { "sent" } else { "failed" });
            }
        }
    });
    tx
}

async fn retrying<F, Fut>(what: &str, receiver: &Receiver, mut attempt: F) -> Result<(), String>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    let mut result = attempt().await;
    for wait in RETRY_AFTER {
        let Err(e) = &result else { break };
        tracing::warn!(receiver = receiver.name, "{what} not delivered, trying again in {wait:?}: {e}");
        tokio::time::sleep(wait).await;
        result = attempt().await;
    }
    if let Err(e) = &result {
        tracing::error!(receiver = receiver.name, "{what} not delivered after {} tries: {e}", RETRY_AFTER.len() + 1);
    }
    result
}

async fn send_email(
    transport: &AsyncSmtpTransport<Tokio1Executor>,
    smtp: &Smtp,
    receiver: &Receiver,
    notice: &Notice,
) -> Result<(), String> {
    let (subject, body) = email_text(notice);
    let mut message = Message::builder().from(smtp.from.clone()).subject(subject).header(ContentType::TEXT_PLAIN);
    for to in &receiver.email_to {
        message = message.to(to.parse().map_err(|e| format!("{to}: {e}"))?);
    }
    let message = message.body(body).map_err(|e| e.to_string())?;
    transport.send(message).await.map(|_| ()).map_err(|e| e.to_string())
}

async fn send_webhook(http: &reqwest::Client, url: &str, receiver: &Receiver, notice: &Notice) -> Result<(), String> {
    let response = http.post(url).json(&webhook_body(notice, receiver)).send().await.map_err(|e| e.to_string())?;
    if response.status().is_success() { Ok(()) } else { Err(format!("{url} answered {}", response.status())) }
}
