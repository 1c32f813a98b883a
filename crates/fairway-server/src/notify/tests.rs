use super::deliver::{email_text, webhook_body};
use super::*;
use crate::config::ConfigFile;

const RECEIVERS: &str = "  smtp: { host: 127.0.0.1, security: none, from: fairway@example.org }\n  \
    receivers:\n    - { name: admins, email_to: [gpu-admins@example.org], webhook_url: 'http://127.0.0.1:9/hook' }\n    \
    - { name: ads-team, webhook_url: 'https://hooks.example.org/ads' }\n";

fn evaluator(rules: &str) -> Evaluator {
    let file = ConfigFile::parse(&format!("notify:\n{RECEIVERS}  rules:\n{rules}")).unwrap();
    Evaluator::new(&file.notify)
}

fn job<'a>(id: i64, name: &'a str, tier: &'a str, tenant: &'a str, pending_since_ms: Option<u64>) -> JobFacts<'a> {
    JobFacts { id, name, tier, tenant, user: "alice", pending_since_ms, preemptions: 0 }
}

fn no_reason(_: i64) -> Option<String> {
    None
}

/// (job id, status) of each alert of each notice, with the notice's rule.
fn summary(notices: &[Notice]) -> Vec<(String, Status, Vec<i64>)> {
    notices.iter().map(|n| (n.rule.clone(), n.status, n.alerts.iter().map(|a| a.job_id).collect())).collect()
}

const MEDIUM_30M: &str =
    "    - { name: medium-waiting, when: pending, tier: medium, pending_seconds: 1800, receiver: admins }\n";

#[test]
fn a_pending_rule_fires_once_past_its_threshold_and_resolves_when_the_job_starts() {
    let mut e = evaluator(MEDIUM_30M);
    let submitted = 1_000_000;
    let waiting = |at: Option<u64>| [job(7, "ctr-model", "medium", "ads", at)];
    // 29 min 59 s: not yet.
    assert!(e.evaluate(submitted + 1_799_000, waiting(Some(submitted)), no_reason).is_empty());
    // 30 min: fires, with the scheduler's reason.
    let fired = e.evaluate(submitted + 1_800_000, waiting(Some(submitted)), |id| Some(format!("reason of #{id}")));
    assert_eq!(summary(&fired), [("medium-waiting".to_owned(), Status::Firing, vec![7])]);
    let alert = &fired[0].alerts[0];
    assert_eq!(alert.summary, "job ctr-model (#7) pending for 30m");
    assert_eq!(alert.description, "pending for 30m; why: reason of #7");
    assert_eq!(alert.starts_at_ms, submitted);
    assert_eq!(fired[0].receiver, 0);
    // Still waiting an hour later: nothing new (one alert, sent once).
    for minutes in [31, 45, 90] {
        assert!(e.evaluate(submitted + minutes * 60_000, waiting(Some(submitted)), no_reason).is_empty());
    }
    assert_eq!(e.firing(), 1);
    // It starts: resolved, once.
    let now = submitted + 95 * 60_000;
    let resolved = e.evaluate(now, waiting(None), no_reason);
    assert_eq!(summary(&resolved), [("medium-waiting".to_owned(), Status::Resolved, vec![7])]);
    assert_eq!(resolved[0].alerts[0].ends_at_ms, Some(now));
    assert!(resolved[0].alerts[0].description.contains("after 1h 35m"), "{:?}", resolved[0].alerts[0]);
    assert!(e.evaluate(now + 1000, waiting(None), no_reason).is_empty());
    assert_eq!(e.firing(), 0);
    // Preempted and waiting again: a new wait, timed from its return to the queue.
    let back = now + 60_000;
    assert!(e.evaluate(back + 1_000_000, waiting(Some(back)), no_reason).is_empty());
    let again = e.evaluate(back + 1_800_000, waiting(Some(back)), no_reason);
    assert_eq!(summary(&again), [("medium-waiting".to_owned(), Status::Firing, vec![7])]);
}

#[test]
fn an_alert_resolves_when_its_job_is_gone() {
    let mut e = evaluator(MEDIUM_30M);
    let fired = e.evaluate(2_000_000, [job(3, "a", "medium", "ads", Some(0))], no_reason);
    assert_eq!(fired.len(), 1);
    let resolved = e.evaluate(2_001_000, [], no_reason);
    assert_eq!(summary(&resolved), [("medium-waiting".to_owned(), Status::Resolved, vec![3])]);
}

#[test]
fn tier_and_tenant_select_the_jobs() {
    let rules = "    - { name: medium-waiting, when: pending, tier: medium, pending_seconds: 60, receiver: admins }\n    \
                 - { name: ads-waiting, when: pending, tenant: ads, pending_seconds: 120, receiver: ads-team }\n";
    let mut e = evaluator(rules);
    let jobs = [
        job(1, "m-ads", "medium", "ads", Some(0)),
        job(2, "m-vision", "medium", "vision", Some(0)),
        job(3, "h-ads", "high", "ads", Some(0)),
        job(4, "l-vision", "low", "vision", Some(0)),
    ];
    let fired = e.evaluate(60_000, jobs, no_reason);
    assert_eq!(summary(&fired), [("medium-waiting".to_owned(), Status::Firing, vec![1, 2])]);
    let fired = e.evaluate(120_000, jobs, no_reason);
    assert_eq!(summary(&fired), [("ads-waiting".to_owned(), Status::Firing, vec![1, 3])]);
    assert_eq!(fired[0].receiver, 1);
    assert_eq!(e.firing(), 4);
}

#[test]
fn a_preempted_rule_fires_at_its_count_and_resolves_when_the_job_finishes() {
    let mut e = evaluator("    - { name: thrashing, when: preempted, preemptions_min: 3, receiver: admins }\n");
    let with = |n| JobFacts { preemptions: n, ..job(9, "sweep", "low", "vision", None) };
    assert!(e.evaluate(1000, [with(2)], no_reason).is_empty());
    let fired = e.evaluate(2000, [with(3)], no_reason);
    assert_eq!(summary(&fired), [("thrashing".to_owned(), Status::Firing, vec![9])]);
    assert_eq!(fired[0].alerts[0].summary, "job sweep (#9) preempted 3 times");
    assert!(e.evaluate(3000, [with(4)], no_reason).is_empty(), "sent once");
    let resolved = e.evaluate(4000, [], no_reason);
    assert_eq!(summary(&resolved), [("thrashing".to_owned(), Status::Resolved, vec![9])]);
}

#[test]
fn a_failed_rule_sends_each_failure_once_and_tracks_nothing() {
    let rules = "    - { name: failed, when: failed, receiver: admins }\n    \
                 - { name: ads-failed, when: failed, tenant: ads, receiver: ads-team }\n";
    let mut e = evaluator(rules);
    let vision = job(1, "nightly", "low", "vision", None);
    let sent = e.job_failed(5000, &vision, "failed (exit code 1)");
    assert_eq!(summary(&sent), [("failed".to_owned(), Status::Firing, vec![1])]);
    assert_eq!(sent[0].alerts[0].description, "failed (exit code 1)");
    let ads = job(2, "ctr", "high", "ads", None);
    let sent = e.job_failed(6000, &ads, "failed (signal 9)");
    assert_eq!(
        summary(&sent),
        [("failed".to_owned(), Status::Firing, vec![2]), ("ads-failed".to_owned(), Status::Firing, vec![2])]
    );
    assert_eq!(e.firing(), 0);
    assert!(e.evaluate(7000, [vision, ads], no_reason).is_empty(), "failed rules are not states");
}

#[test]
fn many_alerts_at_once_make_one_notice_listing_at_most_its_bound() {
    let mut e = evaluator(MEDIUM_30M);
    let names: Vec<String> = (0..ALERTS_PER_NOTICE_MAX + 7).map(|i| format!("job-{i}")).collect();
    let jobs: Vec<JobFacts<'_>> =
        names.iter().enumerate().map(|(i, n)| job(i as i64, n, "medium", "ads", Some(0))).collect();
    let fired = e.evaluate(1_800_000, jobs.iter().copied(), no_reason);
    assert_eq!(fired.len(), 1);
    assert_eq!((fired[0].alerts.len(), fired[0].truncated), (ALERTS_PER_NOTICE_MAX, 7));
    let (subject, body) = email_text(&fired[0]);
    assert_eq!(subject, format!("[Fairway FIRING:{}] medium-waiting: {} jobs", jobs.len(), jobs.len()));
    assert!(body.contains("- and 7 more"), "{body}");
    let hook = webhook_body(&fired[0], &e.receivers[0]);
    assert_eq!(hook["truncatedAlerts"], 7);
    assert_eq!(hook["alerts"].as_array().unwrap().len(), ALERTS_PER_NOTICE_MAX);
    assert_eq!(e.firing(), jobs.len(), "every alert is tracked, listed or not");
}

#[test]
fn the_firing_set_is_bounded() {
    let mut e = evaluator("    - { name: any-waiting, when: pending, pending_seconds: 1, receiver: admins }\n");
    let jobs: Vec<JobFacts<'_>> = (0..FIRING_MAX as i64 + 5).map(|i| job(i, "j", "low", "ads", Some(0))).collect();
    e.evaluate(1000, jobs.iter().copied(), no_reason);
    assert_eq!((e.firing(), e.take_dropped()), (FIRING_MAX, 5));
    assert_eq!(e.take_dropped(), 0);
}

#[test]
fn the_email_and_the_webhook_name_the_job_and_its_tenant() {
    let mut e = evaluator(MEDIUM_30M);
    let fired = e.evaluate(
        1_764_000_000_000 + 1_860_000,
        [job(12, "ctr-model", "medium", "ads", Some(1_764_000_000_000))],
        |_| Some("waiting for 1 GPU".into()),
    );
    let (subject, body) = email_text(&fired[0]);
    assert_eq!(subject, "[Fairway FIRING] medium-waiting: job ctr-model (#12) pending for 31m");
    assert!(
        body.starts_with("Rule medium-waiting (jobs (tier medium) pending longer than 30m) fires for 1 job(s)."),
        "{body}"
    );
    assert!(body.contains("- ctr-model (#12): tier medium, tenant ads, user alice\n"), "{body}");
    assert!(body.contains("why: waiting for 1 GPU"), "{body}");
    assert!(body.contains("since 2025-11-24T16:00:00Z"), "{body}");
    let hook = webhook_body(&fired[0], &e.receivers[0]);
    assert_eq!(hook["version"], "4");
    assert_eq!(hook["status"], "firing");
    assert_eq!(hook["receiver"], "admins");
    let alert = &hook["alerts"][0];
    assert_eq!(alert["labels"]["alertname"], "medium-waiting");
    assert_eq!(alert["labels"]["job_name"], "ctr-model");
    assert_eq!(alert["labels"]["job_id"], "12");
    assert_eq!(alert["labels"]["tenant"], "ads");
    assert_eq!(alert["labels"]["tier"], "medium");
    assert_eq!(alert["startsAt"], "2025-11-24T16:00:00Z");
    assert_eq!(alert["endsAt"], "0001-01-01T00:00:00Z");
}

#[test]
fn bad_notify_settings_name_the_field_and_the_reason() {
    let smtp = "  smtp: { host: 127.0.0.1, security: none, from: fairway@example.org }\n";
    let admins = "  receivers: [{ name: admins, email_to: [a@example.org] }]\n";
    let cases = [
        (
            format!("{smtp}{admins}  rules: [{{ name: r, when: waiting, receiver: admins }}]\n"),
            "notify.rules[0].when: \"waiting\" is not pending, failed or preempted",
        ),
        (
            format!("{smtp}{admins}  rules: [{{ name: r, when: pending, receiver: admins }}]\n"),
            "notify.rules[0].pending_seconds: required with when: pending",
        ),
        (
            format!("{smtp}{admins}  rules: [{{ name: r, when: pending, pending_seconds: 0, receiver: admins }}]\n"),
            "notify.rules[0].pending_seconds: from 1 to",
        ),
        (
            format!("{smtp}{admins}  rules: [{{ name: r, when: failed, pending_seconds: 5, receiver: admins }}]\n"),
            "notify.rules[0].pending_seconds: only with when: pending",
        ),
        (
            format!("{smtp}{admins}  rules: [{{ name: r, when: preempted, receiver: admins }}]\n"),
            "notify.rules[0].preemptions_min: required with when: preempted",
        ),
        (
            format!("{smtp}{admins}  rules: [{{ name: r, when: failed, receiver: ops }}]\n"),
            "notify.rules[0].receiver: \"ops\" is not among notify.receivers",
        ),
        (
            format!("{smtp}{admins}  rules: [{{ name: r, when: failed, tier: urgent, receiver: admins }}]\n"),
            "notify.rules[0].tier: \"urgent\" is not a priority class",
        ),
        (
            format!(
                "{smtp}{admins}  rules:\n    - {{ name: r, when: failed, receiver: admins }}\n    - {{ name: r, when: failed, receiver: admins }}\n"
            ),
            "notify.rules[1].name: \"r\" is given twice",
        ),
        (
            format!("{smtp}{admins}  rules: [{{ name: 'two words', when: failed, receiver: admins }}]\n"),
            "notify.rules[0].name: \"two words\" must be",
        ),
        (admins.to_owned(), "notify.receivers[0].email_to: e-mail needs notify.smtp"),
        (
            format!("{smtp}  receivers: [{{ name: admins }}]\n"),
            "notify.receivers[0]: give email_to, webhook_url, or both",
        ),
        (
            format!("{smtp}  receivers: [{{ name: admins, email_to: ['not an address'] }}]\n"),
            "notify.receivers[0].email_to[0]: \"not an address\" is not an address",
        ),
        (
            format!("{smtp}  receivers: [{{ name: admins, webhook_url: 'ftp://example.org/x' }}]\n"),
            "notify.receivers[0].webhook_url: \"ftp://example.org/x\" must be an http:// or https:// URL",
        ),
        (
            format!("{smtp}  receivers: [{{ name: admins, webhook_url: 'https://u:p@example.org/x' }}]\n"),
            "notify.receivers[0].webhook_url: must not carry a user or password",
        ),
        (
            "  smtp: { host: mail.example.org, security: none, username: u, password_file: /p, from: f@example.org }\n"
                .to_owned(),
            "notify.smtp.security: none would send the password in clear text to mail.example.org",
        ),
        (
            "  smtp: { host: mail.example.org, username: u, from: f@example.org }\n".to_owned(),
            "notify.smtp.password_file: required with username",
        ),
        (
            "  smtp: { host: mail.example.org, security: ssl, from: f@example.org }\n".to_owned(),
            "notify.smtp.security: \"ssl\" is not",
        ),
        (
            "  smtp: { host: mail.example.org, from: nobody }\n".to_owned(),
            "notify.smtp.from: \"nobody\" is not an address",
        ),
        (
            "  smtp: { host: 'mail example', from: f@example.org }\n".to_owned(),
            "notify.smtp.host: \"mail example\" is not",
        ),
    ];
    for (yaml, expected) in cases {
        let error = ConfigFile::parse(&format!("notify:\n{yaml}")).unwrap_err();
        assert!(error.contains(expected), "{yaml}\nexpected {expected:?}\ngot {error:?}");
    }
    // A class of the config file is a tier a rule may name.
    let classes = "priority_classes: [{ name: urgent, value: 5000000 }]\n";
    let ok = format!(
        "{classes}notify:\n{smtp}{admins}  rules: [{{ name: r, when: failed, tier: urgent, receiver: admins }}]\n"
    );
    ConfigFile::parse(&ok).unwrap();
}

#[test]
fn durations_read_as_people_write_them() {
    let cases =
        [(0, "0s"), (45_000, "45s"), (60_000, "1m"), (123_000, "2m 3s"), (3_600_000, "1h"), (3_900_000, "1h 5m")];
    for (ms, text) in cases {
        assert_eq!(duration_text(ms), text);
    }
}
