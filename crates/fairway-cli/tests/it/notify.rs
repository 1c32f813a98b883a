//! The server's own notifications (config `notify:`), with no Prometheus: e-mail through a
//! real SMTP server on loopback (`python3-aiosmtpd`, which the test script installs) and a
//! webhook. A medium job waits past its rule's threshold (2 s here, 30 minutes in the
//! article) and the admins get one e-mail naming it, then one when it starts; a preempted
//! job's team hears of it by webhook; a failed job is reported once.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use fairway_server::api::JobState;

use crate::loopback::{free_port, mails, smtp_server, wait_until, webhook};
use crate::server::{FAIRWAY, InProcess, trainer_job};

/// The webhook bodies for `receiver` with `status`, as JSON.
fn calls(hooks: &Arc<Mutex<Vec<String>>>, receiver: &str, status: &str) -> Vec<serde_json::Value> {
    let bodies = hooks.lock().unwrap().clone();
    bodies
        .iter()
        .filter_map(|b| serde_json::from_str::<serde_json::Value>(b).ok())
        .filter(|v| v["receiver"] == receiver && v["status"] == status)
        .collect()
}

fn names_job(call: &serde_json::Value, id: i64) -> bool {
    call["alerts"].as_array().unwrap().iter().any(|a| a["labels"]["job_id"].as_str() == Some(id.to_string().as_str()))
}

#[test]
fn notify_rules_mail_the_admins_and_call_webhooks_once_per_alert() {
    let work = tempfile::tempdir().unwrap();
    let dir = work.path();
    let smtp_port = free_port();
    let (hook_port, hooks) = webhook();
    let maildir = dir.join("maildir");
    let log = dir.join("smtp.log");
    let logs = [log.clone()];
    let _smtp = smtp_server(smtp_port, &maildir, &log);
    let config = format!(
        "notify:\n  smtp: {{ host: 127.0.0.1, port: {smtp_port}, security: none, from: 'Fairway <fairway@example.org>' }}\n  \
         receivers:\n    - {{ name: admins, email_to: [gpu-admins@example.org], webhook_url: 'http://127.0.0.1:{hook_port}/admins' }}\n    \
         - {{ name: vision-team, webhook_url: 'http://127.0.0.1:{hook_port}/vision' }}\n  \
         rules:\n    - {{ name: medium-waiting, when: pending, tier: medium, pending_seconds: 2, receiver: admins }}\n    \
         - {{ name: job-failed, when: failed, receiver: admins }}\n    \
         - {{ name: vision-preempted, when: preempted, tenant: vision, preemptions_min: 1, receiver: vision-team }}\n"
    );
    let server = InProcess::start("2", &config);
    let api = &server.api;
    let mail_about = |words: &[&str]| {
        wait_until(&format!("an e-mail with {words:?}"), &logs, || {
            mails(&maildir).into_iter().find(|m| words.iter().all(|w| m.contains(w)))
        })
    };

    // Two long medium jobs fill both GPUs; `ctr-model` (medium too) waits.
    let long = api.run_long_jobs("vision", "medium", &["nightly", "sweep"]);
    let waiting = api.submit(&trainer_job("ctr-model", "ads", "medium", 1, 2, 10))[0];
    let fired = mail_about(&["[Fairway FIRING] medium-waiting: job ctr-model", "gpu-admins@example.org"]);
    assert!(fired.contains(&format!("- ctr-model (#{waiting}): tier medium, tenant ads")), "{fired}");
    assert!(fired.contains("why: "), "the scheduler's reason: {fired}");
    let call = wait_until("the admins' webhook", &logs, || {
        calls(&hooks, "admins", "firing").into_iter().find(|c| names_job(c, waiting))
    });
    assert_eq!(call["alerts"][0]["labels"]["alertname"], "medium-waiting");
    assert_eq!(call["alerts"][0]["labels"]["tenant"], "ads");

    // Still waiting three evaluations later: nothing sent again.
    std::thread::sleep(Duration::from_secs(3));
    let about_it = |status: &str| {
        let subject = format!("[Fairway {status}] medium-waiting: job ctr-model");
        mails(&maildir).iter().filter(|m| m.contains(&subject)).count()
    };
    assert_eq!(about_it("FIRING"), 1);
    assert_eq!(calls(&hooks, "admins", "firing").iter().filter(|c| names_job(c, waiting)).count(), 1);

    // A high job preempts one of vision's: vision's team is told, by webhook only.
    let urgent = api.submit(&trainer_job("urgent", "ads", "high", 1, 2, 10))[0];
    api.wait_state(urgent, JobState::Succeeded);
    let call = wait_until("vision's webhook", &logs, || calls(&hooks, "vision-team", "firing").into_iter().next());
    let victim: i64 = call["alerts"][0]["labels"]["job_id"].as_str().unwrap().parse().unwrap();
    assert!(long.contains(&victim), "{call}");
    assert_eq!(
        call["alerts"][0]["annotations"]["summary"].as_str().unwrap().split(" (#").next(),
        Some(format!("job {}", if victim == long[0] { "nightly" } else { "sweep" }).as_str())
    );

    // The other vision job is cancelled: ctr-model starts and the alert resolves, once.
    let other = if victim == long[0] { long[1] } else { long[0] };
    api.json("POST", &format!("/v1/jobs/{other}/cancel"), None);
    api.wait_state(waiting, JobState::Succeeded);
    let resolved = mail_about(&["[Fairway RESOLVED] medium-waiting: job ctr-model"]);
    assert!(resolved.contains("no longer pending"), "{resolved}");
    wait_until("the resolved webhook", &logs, || {
        calls(&hooks, "admins", "resolved").into_iter().find(|c| names_job(c, waiting))
    });

    // A job that fails with no retries left: one e-mail.
    let broken = api.submit(&format!(
        "name: broken\ntenant: {{ project: ads }}\npriority: high\nresources: {{ gpus: 1 }}\n\
         command: [{FAIRWAY:?}, example-trainer, --steps, \"10\", --step-ms, \"1\", --fail-at-step, \"3\"]\n"
    ))[0];
    api.wait_state(broken, JobState::Failed);
    let failed = mail_about(&["[Fairway FIRING] job-failed: job broken"]);
    assert!(failed.contains("failed (exit code 1)") || failed.contains("failed ("), "{failed}");

    // The preempted vision job is cancelled: its team hears that the alert resolved.
    api.json("POST", &format!("/v1/jobs/{victim}/cancel"), None);
    wait_until("vision's resolved webhook", &logs, || {
        calls(&hooks, "vision-team", "resolved").into_iter().find(|c| names_job(c, victim))
    });
    assert_eq!(about_it("FIRING"), 1);
    assert_eq!(about_it("RESOLVED"), 1);
    assert!(
        mails(&maildir).iter().all(|m| !m.contains("vision-preempted")),
        "vision's team has no e-mail address: nothing about its rule is mailed"
    );
    let (_, metrics) = api.request("GET", "/metrics", None);
    let metrics = String::from_utf8(metrics).unwrap();
    let sent = metrics
        .lines()
        .find(|l| {
            l.starts_with("fairway_notifications_total{")
                && l.contains("channel=\"email\"")
                && l.contains("outcome=\"sent\"")
        })
        .unwrap_or_else(|| panic!("{metrics}"));
    let count: f64 = sent.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(count >= 3.0, "{sent}");
}
