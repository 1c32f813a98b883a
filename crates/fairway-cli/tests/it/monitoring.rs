//! The monitoring path end to end, with the real programs from Debian (the test script
//! installs them): Prometheus scrapes a running server with a token and evaluates the
//! shipped rules (the article's threshold shortened from 30 minutes to 2 seconds);
//! Alertmanager delivers the firing alert, and its resolution, by e-mail to an SMTP server
//! on loopback (`python3-aiosmtpd`, writing a maildir) and to a webhook; and every query of
//! the shipped Grafana dashboard returns data from that Prometheus.

use fairway_server::api::JobState;

use crate::loopback::{free_port, mails, smtp_server, spawn, wait_until, webhook};
use crate::server::{InProcess, admin_token, trainer_job};

#[test]
fn a_medium_job_waiting_too_long_reaches_an_admin_by_mail_and_webhook_and_resolves() {
    let server = InProcess::start("2", "metrics: { pending_job_series_max: 10 }\n");
    let api = &server.api;
    let work = tempfile::tempdir().unwrap();
    let dir = work.path();
    let (prometheus_port, alertmanager_port, smtp_port) = (free_port(), free_port(), free_port());
    let (webhook_port, hooks) = webhook();

    // The shipped rules, the 30 minutes shortened to 2 seconds.
    let rules = std::fs::read_to_string(crate::docs::repo().join("deploy/prometheus/fairway-rules.yaml")).unwrap();
    assert!(rules.contains("> 1800"), "the article's threshold");
    std::fs::write(dir.join("rules.yaml"), rules.replace("> 1800", "> 2")).unwrap();
    std::fs::write(dir.join("token"), admin_token(server.data_dir.path())).unwrap();
    let target = api.base.trim_start_matches("http://");
    std::fs::write(
        dir.join("prometheus.yml"),
        format!(
            "global: {{ scrape_interval: 1s, evaluation_interval: 1s }}\n\
             rule_files: [{rules}]\n\
             alerting:\n  alertmanagers:\n    - static_configs: [{{ targets: ['127.0.0.1:{alertmanager_port}'] }}]\n\
             scrape_configs:\n  - job_name: fairway\n    authorization: {{ credentials_file: {token} }}\n    \
             static_configs: [{{ targets: ['{target}'] }}]\n",
            rules = dir.join("rules.yaml").display(),
            token = dir.join("token").display(),
        ),
    )
    .unwrap();
    std::fs::write(
        dir.join("alertmanager.yml"),
        format!(
            "route:\n  receiver: admins\n  group_by: [alertname, job_name]\n  group_wait: 1s\n  group_interval: 1s\n  \
             repeat_interval: 1h\n\
             receivers:\n  - name: admins\n    email_configs:\n      - to: gpu-admins@example.org\n        \
             from: fairway-alerts@example.org\n        smarthost: 127.0.0.1:{smtp_port}\n        require_tls: false\n        \
             send_resolved: true\n    webhook_configs:\n      - url: http://127.0.0.1:{webhook_port}/alerts\n        \
             send_resolved: true\n"
        ),
    )
    .unwrap();
    let maildir = dir.join("maildir");
    let logs = ["prometheus.log", "alertmanager.log", "smtp.log"].map(|name| dir.join(name));
    let _smtp = smtp_server(smtp_port, &maildir, &dir.join("smtp.log"));
    let _alertmanager = spawn(
        "prometheus-alertmanager",
        &[
            format!("--config.file={}", dir.join("alertmanager.yml").display()),
            format!("--storage.path={}", dir.join("am-data").display()),
            format!("--web.listen-address=127.0.0.1:{alertmanager_port}"),
            "--cluster.listen-address=".into(),
        ],
        &dir.join("alertmanager.log"),
    );
    let _prometheus = spawn(
        "prometheus",
        &[
            format!("--config.file={}", dir.join("prometheus.yml").display()),
            format!("--storage.tsdb.path={}", dir.join("tsdb").display()),
            format!("--web.listen-address=127.0.0.1:{prometheus_port}"),
        ],
        &dir.join("prometheus.log"),
    );

    // Two GPUs, two long medium jobs; a short high job preempts one of them (which resumes
    // when it is done); then another medium job, `ctr-model`, waits (same tier: nothing is
    // preempted for it). Ads has a quota, for the dashboard's quota panel.
    let (status, body) = api.json("PUT", "/v1/quotas/project/ads", Some(r#"{"gpus_max": 4}"#));
    assert_eq!(status, 200, "{body}");
    let long = api.run_long_jobs("vision", "medium", &["nightly", "sweep"]);
    let urgent = api.submit(&trainer_job("urgent", "ads", "high", 1, 2, 10))[0];
    api.wait_state(urgent, JobState::Succeeded);
    for &id in &long {
        api.wait_state(id, JobState::Running);
    }
    let waiting = api.submit(&trainer_job("ctr-model", "ads", "medium", 1, 2, 10))[0];

    // The named alert's e-mail in a state (`FIRING`, `RESOLVED`), and its webhook call
    // (`firing`, `resolved`), each about `ctr-model`.
    let mail = |state: &str| {
        wait_until(&format!("the {state} e-mail"), &logs, || {
            mails(&maildir).into_iter().find(|m| m.contains("FairwayMediumJobWaitingNamed") && m.contains(state))
        })
    };
    let hook_call = |status: &str| {
        let status_field = format!("\"status\":\"{status}\"");
        wait_until(&format!("the {status} webhook"), &logs, || {
            hooks.lock().unwrap().iter().find(|b| b.contains(&status_field) && b.contains("ctr-model")).cloned()
        })
    };
    let fired = mail("FIRING");
    assert!(fired.contains("ctr-model") && fired.contains("gpu-admins@example.org"), "{fired}");
    let hook = hook_call("firing");
    let hook: serde_json::Value = serde_json::from_str(&hook).unwrap();
    let named = hook["alerts"].as_array().unwrap().iter().find(|a| a["labels"]["job_name"] == "ctr-model").unwrap();
    assert_eq!(named["labels"]["tenant"], "ads");
    assert_eq!(named["labels"]["job_id"], waiting.to_string());

    // Every query of the dashboard answers with data while the job waits.
    let dashboard = std::fs::read_to_string(crate::docs::repo().join("deploy/grafana/fairway-dashboard.json")).unwrap();
    let dashboard: serde_json::Value = serde_json::from_str(&dashboard).unwrap();
    let exprs: Vec<String> = dashboard["panels"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["targets"].as_array().unwrap().iter().map(|t| t["expr"].as_str().unwrap().to_owned()))
        .collect();
    assert!(exprs.len() >= 9, "{exprs:?}");
    let rt = tokio::runtime::Runtime::new().unwrap();
    for expr in &exprs {
        let answer = wait_until(&format!("data for the dashboard's {expr}"), &logs, || {
            let base = format!("http://127.0.0.1:{prometheus_port}/api/v1/query");
            let url = reqwest::Url::parse_with_params(&base, &[("query", expr)]).unwrap();
            let text = rt.block_on(async { reqwest::get(url).await.ok()?.text().await.ok() })?;
            let answer: serde_json::Value = serde_json::from_str(&text).ok()?;
            (answer["status"] == "success" && !answer["data"]["result"].as_array()?.is_empty()).then_some(answer)
        });
        assert_eq!(answer["data"]["resultType"], "vector", "{expr}: {answer}");
    }

    // Its wait ends (cancelled here): the alert resolves, and both receivers are told.
    api.json("POST", &format!("/v1/jobs/{waiting}/cancel"), None);
    api.wait_state(waiting, JobState::Cancelled);
    let resolved = mail("RESOLVED");
    assert!(resolved.contains("ctr-model"), "{resolved}");
    hook_call("resolved");
}
