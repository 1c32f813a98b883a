//! Who may do what, against a real server: browsers from other origins, tokens and their
//! roles, tenants from the token, priority caps, and what the data directory gives away.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use fairway_server::api::{JobState, TokenCreated};
use serde_json::{Value, json};

use crate::server::{Api, InProcess, processes_with};

const FAIRWAY: &str = env!("CARGO_BIN_EXE_fairway");

/// A token made by the admin.
pub(crate) fn token(api: &Api, user: &str, project: &str, role: &str) -> String {
    let body = json!({"user": user, "project": project, "role": role}).to_string();
    let (status, answer) = api.json("POST", "/v1/tokens", Some(&body));
    assert_eq!(status, 201, "{answer}");
    let created: TokenCreated = serde_json::from_value(answer).unwrap();
    created.secret
}

/// A job that runs `sleep` long enough to be looked at, with a marker in its command line.
fn sleeper(name: &str, extra: &str) -> String {
    format!("name: {name}\nresources: {{ gpus: 1 }}\nshell: true\ncommand: [\"sleep 30\"]\n{extra}")
}

#[test]
fn a_web_page_cannot_submit_through_a_browser() {
    let server = InProcess::start("2", "");
    let api = &server.api;
    let marker = format!("{}.{}", std::process::id(), 7171);
    let body = format!(
        "name: evil\ntenant: {{ project: p }}\nresources: {{ gpus: 1 }}\nshell: true\ncommand: [\"sleep {marker}\"]\n"
    );
    // What a form or a no-cors fetch on http://evil.example can send: text/plain, its Origin.
    let cases: [&[(&str, &str)]; 5] = [
        &[("content-type", "text/plain"), ("origin", "http://evil.example")],
        &[("content-type", "application/yaml"), ("origin", "http://evil.example")],
        &[("content-type", "application/x-www-form-urlencoded")],
        &[("content-type", "text/plain")],
        &[("content-type", "application/yaml"), ("sec-fetch-site", "cross-site")],
    ];
    for headers in cases {
        let (status, answer) = api.request_with("POST", "/v1/jobs", Some(body.clone().into_bytes()), headers);
        let answer: Value = serde_json::from_slice(&answer).unwrap();
        let code = answer["error"]["code"].as_str().unwrap_or("?");
        assert!(
            matches!((status, code), (403, "cross_origin") | (415, "unsupported_media_type")),
            "{headers:?}: {answer}"
        );
    }
    // Even with the admin's own token a cross-origin cancel is refused.
    let id = api.submit(&sleeper("mine", "tenant: { project: p }\n"))[0];
    let (status, _) =
        api.request_with("POST", &format!("/v1/jobs/{id}/cancel"), None, &[("origin", "http://localhost:8080")]);
    assert_eq!(status, 403);
    // Same origin and the CLI (no Origin at all) are fine.
    let host = api.base.trim_start_matches("http://").to_owned();
    let (status, _) = api.request_with(
        "POST",
        "/v1/jobs",
        Some(sleeper("same-origin", "tenant: { project: p }\n").into_bytes()),
        &[("content-type", "application/yaml; charset=utf-8"), ("origin", &format!("http://{host}"))],
    );
    assert_eq!(status, 201);
    std::thread::sleep(Duration::from_millis(500));
    assert!(processes_with(&format!("sleep {marker}")).is_empty(), "the cross-origin job ran");
    let names: Vec<String> = api.jobs("limit=100").into_iter().map(|j| j.name).collect();
    assert_eq!(names, ["same-origin", "mine"], "nothing else was stored");
}

#[test]
fn every_route_but_health_needs_a_valid_token() {
    let server = InProcess::start("1", "");
    let anonymous = Api::new(server.api.base.clone(), None);
    let routes = [
        ("GET", "/v1/jobs"),
        ("POST", "/v1/jobs"),
        ("GET", "/metrics"),
        ("GET", "/v1/nodes"),
        ("GET", "/v1/dashboard"),
    ];
    for (method, path) in routes {
        let (status, body) = anonymous.request(method, path, None);
        let body: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!((status, body["error"]["code"].as_str()), (401, Some("unauthenticated")), "{method} {path}");
    }
    assert_eq!(anonymous.request("GET", "/healthz", None).0, 200);
    assert_eq!(anonymous.request("GET", "/openapi.yaml", None).0, 200);
    // The dashboard's page holds no data: it loads, and asks for a token itself.
    assert_eq!(anonymous.request("GET", "/ui/", None).0, 200);
    let forged = format!("fwt_{}", "0".repeat(64));
    for bad in [forged.as_str(), "fwt_short", "not-a-token"] {
        let (status, body) = server.api.as_token(bad).json("GET", "/v1/jobs", None);
        assert_eq!(status, 401, "{bad}: {body}");
    }
    let expiring = json!({"user": "eve", "project": "p", "expires_in_seconds": 1}).to_string();
    let (_, answer) = server.api.json("POST", "/v1/tokens", Some(&expiring));
    let secret = answer["secret"].as_str().unwrap().to_owned();
    assert_eq!(server.api.as_token(&secret).json("GET", "/v1/whoami", None).0, 200);
    std::thread::sleep(Duration::from_millis(1100));
    let (status, body) = server.api.as_token(&secret).json("GET", "/v1/whoami", None);
    assert!(status == 401 && body["error"]["message"].as_str().unwrap().contains("expired"), "{body}");
}

#[test]
fn tenants_come_from_tokens_and_roles_limit_what_they_do() {
    let server = InProcess::start("4", "");
    let admin = &server.api;
    let alice = admin.as_token(&token(admin, "alice", "vision", "submitter"));
    let bob = admin.as_token(&token(admin, "bob", "vision", "submitter"));
    let carol = admin.as_token(&token(admin, "carol", "vision", "viewer"));
    let dave = admin.as_token(&token(admin, "dave", "ads", "submitter"));

    // A job without a tenant is the token's.
    let id = alice.submit(&sleeper("a1", "env: { WANDB_API_KEY: \"s3cret\" }\n"))[0];
    let job = alice.job(id).job;
    assert_eq!((job.user.as_str(), job.project.as_str()), ("alice", "vision"));
    assert_eq!(alice.job(id).spec["env"]["WANDB_API_KEY"], "s3cret", "the owner sees its env");

    // Naming another tenant, a priority class, a priority above the project's: refused,
    // every problem at once, nothing stored.
    let refused = [
        ("tenant: { user: bob, project: vision }\n", "tenant.user"),
        ("tenant: { project: ads }\n", "tenant.project"),
        ("priority: critical\n", "priority"),
        ("priority: 2147483647\n", "priority"),
    ];
    for (extra, path) in refused {
        let (status, err) = alice.json("POST", "/v1/jobs", Some(&sleeper("x", extra)));
        assert_eq!((status, err["error"]["code"].as_str()), (403, Some("forbidden")), "{extra}: {err}");
        assert!(err["error"]["details"].as_array().unwrap().iter().any(|d| d["path"] == path), "{extra}: {err}");
    }
    let class = "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: { name: mine }\nvalue: 1000000000\nglobalDefault: true\n";
    let (status, err) = alice.json("POST", "/v1/jobs", Some(class));
    assert_eq!(status, 403, "{err}");
    let (_, classes) = admin.json("GET", "/v1/priority-classes", None);
    assert!(!classes.to_string().contains("\"mine\""), "the class was not added: {classes}");
    assert_eq!(admin.jobs("limit=100").len(), 1, "nothing else was stored");

    // The admin raises vision's cap; then critical is fine.
    let (status, view) = alice.json("PUT", "/v1/projects/vision", Some(r#"{"priority_class_max": "critical"}"#));
    assert_eq!(status, 403, "{view}");
    let (status, view) = admin.json("PUT", "/v1/projects/vision", Some(r#"{"priority_class_max": "critical"}"#));
    assert_eq!((status, view["priority_class_max"].as_str()), (200, Some("critical")), "{view}");
    alice.submit(&sleeper("a2", "priority: critical\n"));
    let (_, me) = alice.json("GET", "/v1/whoami", None);
    assert_eq!((me["user"].as_str(), me["priority_class_max"].as_str()), (Some("alice"), Some("critical")));

    // A project member sees the job without its env values, and may not cancel it.
    let seen = bob.job(id);
    assert_ne!(seen.spec["env"]["WANDB_API_KEY"], "s3cret");
    let (status, err) = bob.json("POST", &format!("/v1/jobs/{id}/cancel"), None);
    assert_eq!(status, 403, "{err}");
    let (status, _) = carol.json("POST", "/v1/jobs", Some(&sleeper("c", "")));
    assert_eq!(status, 403, "a viewer may not submit");
    assert_eq!(carol.jobs("").len(), 2, "a viewer sees its project's jobs");

    // Another project sees nothing of it, not even that it exists.
    assert_eq!(dave.request("GET", &format!("/v1/jobs/{id}"), None).0, 404);
    assert_eq!(dave.request("GET", &format!("/v1/jobs/{id}/logs"), None).0, 404);
    assert_eq!(dave.request("POST", &format!("/v1/jobs/{id}/cancel"), None).0, 404);
    assert!(dave.jobs("").is_empty());
    assert_eq!(dave.request("GET", "/v1/jobs?project=vision", None).0, 403);
    let (status, quotas) = dave.json("PUT", "/v1/quotas/project/vision", Some(r#"{"gpus_max": 0}"#));
    assert_eq!(status, 403, "{quotas}");
    assert_eq!(dave.json("GET", "/v1/tokens", None).0, 403);

    // The owner cancels; a revoked token stops working at once, on every route.
    assert_eq!(alice.json("POST", &format!("/v1/jobs/{id}/cancel"), None).0, 200);
    let (_, list) = admin.json("GET", "/v1/tokens", None);
    let alice_id =
        list["tokens"].as_array().unwrap().iter().find(|t| t["user"] == "alice").unwrap()["id"].as_i64().unwrap();
    assert!(!list.to_string().contains(alice.token.as_deref().unwrap()), "listings never show secrets");
    assert_eq!(admin.request("DELETE", &format!("/v1/tokens/{alice_id}"), None).0, 204);
    assert_eq!(alice.json("GET", "/v1/whoami", None).0, 401);
    assert_eq!(alice.json("GET", "/v1/jobs", None).0, 401);
    admin.wait_state(id, JobState::Cancelled);
}

#[test]
fn the_data_directory_keeps_its_secrets_to_its_owner() {
    let server = InProcess::start("1", "");
    let alice = token(&server.api, "alice", "vision", "submitter");
    let dir = server.data_dir.path();
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(dir), 0o700);
    assert_eq!(mode(&dir.join("admin.token")), 0o600);
    assert_eq!(mode(&dir.join("fairway.db")), 0o600);
    // Tokens are stored as digests: neither secret appears anywhere in the store's files.
    for file in ["fairway.db", "fairway.db-wal"] {
        let bytes = std::fs::read(dir.join(file)).unwrap_or_default();
        let text = String::from_utf8_lossy(&bytes);
        assert!(!text.contains(&alice[4..]), "{file} holds a token secret");
        assert!(!text.contains(&server.api.token.as_deref().unwrap()[4..]), "{file} holds the admin secret");
    }
}

#[test]
fn the_cli_finds_the_admin_token_only_for_the_live_server_that_owns_it() {
    let home = tempfile::tempdir().unwrap();
    let data = home.path().join("data");
    let state = home.path().join("state");
    let mut serve = std::process::Command::new(FAIRWAY)
        .args(["serve", "--gpus", "1", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(&data)
        .env("XDG_STATE_HOME", &state)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(serve.stdout.take().unwrap()), &mut line).unwrap();
    let base = line.split_whitespace().find(|w| w.starts_with("http://")).unwrap().to_owned();
    let whoami = |base: &str| {
        std::process::Command::new(FAIRWAY)
            .args(["--server", base, "whoami"])
            .env_remove("FAIRWAY_TOKEN")
            .env_remove("FAIRWAY_TOKEN_FILE")
            .env_remove("FAIRWAY_DATA_DIR")
            .env("XDG_STATE_HOME", &state)
            .env("XDG_CONFIG_HOME", home.path().join("config"))
            .current_dir(home.path())
            .output()
            .unwrap()
    };
    let out = whoami(&base);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && text.contains("role admin"), "{text}{}", String::from_utf8_lossy(&out.stderr));

    // The server dies; something else takes its port. The CLI must not hand it the token.
    serve.kill().unwrap();
    serve.wait().unwrap();
    let addr = base.trim_start_matches("http://");
    let squatter = std::net::TcpListener::bind(addr).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let (mut stream, _) = squatter.accept().unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut request = vec![0u8; 8192];
        let n = stream.read(&mut request).unwrap_or(0);
        let _ = stream.write_all(b"HTTP/1.1 401 Unauthorized\r\ncontent-length: 0\r\n\r\n");
        tx.send(String::from_utf8_lossy(&request[..n]).to_lowercase()).unwrap();
    });
    let out = whoami(&base);
    assert!(!out.status.success());
    let request = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    assert!(request.starts_with("get /v1/whoami"), "{request}");
    assert!(!request.contains("authorization"), "the token went to a stranger: {request}");
    crate::server::kill_jobs_under(&data);
}

#[test]
fn tls_is_required_off_loopback_and_works_with_a_private_ca() {
    // Without TLS, a non-loopback address is refused, saying what to do.
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(FAIRWAY)
        .args(["serve", "--gpus", "1", "--listen", "0.0.0.0:0", "--data-dir"])
        .arg(dir.path().join("d"))
        .env("XDG_STATE_HOME", dir.path())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("needs TLS") && err.contains("--insecure"), "{err}");

    // With a certificate from a private CA: the CLI trusts it through --ca-cert.
    let names = vec!["localhost".to_string(), "127.0.0.1".to_string()];
    let ca = rcgen::generate_simple_self_signed(names).unwrap();
    let (cert, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
    std::fs::write(&cert, ca.cert.pem()).unwrap();
    std::fs::write(&key, ca.signing_key.serialize_pem()).unwrap();
    let config = format!("tls: {{ cert_file: {:?}, key_file: {:?} }}\n", cert.display(), key.display());
    let server = InProcess::start("1", &config);
    let base = server.api.base.replace("http://", "https://");
    let cli = |extra: &[&str]| {
        std::process::Command::new(FAIRWAY)
            .args(["--server", &base])
            .args(extra)
            .env("FAIRWAY_TOKEN", server.api.token.as_deref().unwrap())
            .env("HOME", dir.path())
            .output()
            .unwrap()
    };
    let out = cli(&["whoami"]);
    assert!(!out.status.success(), "an unknown CA is not trusted");
    let out = cli(&["--ca-cert", cert.to_str().unwrap(), "whoami"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // Plain HTTP on the TLS port gets nothing.
    let plain = Api::new(server.api.base.clone(), server.api.token.clone());
    assert_eq!(plain.request("GET", "/v1/whoami", None).0, 0);
}

/// Reads until the peer closes (`Ok(true)`) or `within` passes (`Ok(false)`).
fn closed_within(stream: &mut TcpStream, within: Duration) -> bool {
    stream.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
    let start = Instant::now();
    let mut buf = [0u8; 4096];
    while start.elapsed() < within {
        match stream.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(_) => return true,
        }
    }
    false
}

#[test]
fn idle_half_sent_and_surplus_connections_are_closed() {
    let config = "limits: { connections_max: 8, header_read_timeout_seconds: 1, body_read_timeout_seconds: 1 }\n";
    let server = InProcess::start("1", config);
    let addr = server.api.base.trim_start_matches("http://").to_owned();
    let mut idle: Vec<TcpStream> = (0..4).map(|_| TcpStream::connect(&addr).unwrap()).collect();
    let mut half: Vec<TcpStream> = (0..4)
        .map(|_| {
            let mut s = TcpStream::connect(&addr).unwrap();
            s.write_all(b"GET /v1/jobs HTTP/1.1\r\nHost: x\r\n").unwrap();
            s
        })
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    // The ninth connection is over the cap: closed at once.
    let mut surplus = TcpStream::connect(&addr).unwrap();
    assert!(closed_within(&mut surplus, Duration::from_secs(1)), "a connection over the cap was kept");
    // Idle and half-sent ones go after the header timeout.
    for s in idle.iter_mut().chain(half.iter_mut()) {
        assert!(closed_within(s, Duration::from_secs(5)), "an idle or half-sent connection was kept");
    }
    // A body that stops halfway: 408, and the connection closes.
    let mut slow = TcpStream::connect(&addr).unwrap();
    let token = server.api.token.clone().unwrap();
    let head = format!(
        "POST /v1/jobs HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\ncontent-type: application/yaml\r\ncontent-length: 100\r\n\r\nname: x\n"
    );
    slow.write_all(head.as_bytes()).unwrap();
    slow.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut answer = String::new();
    let _ = slow.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    // A kept-alive connection idle past the timeout is closed too; the server still answers.
    assert_eq!(server.api.request("GET", "/v1/whoami", None).0, 200);
}

#[test]
fn image_strings_never_become_runtime_options() {
    let server = InProcess::start("1", "");
    for image in ["--privileged", "--volume=/:/host", "-v/:/host"] {
        let body = format!("name: x\nresources: {{ gpus: 1 }}\nimage: {image:?}\ncommand: [x]\n");
        let (status, err) = server.api.json("POST", "/v1/jobs", Some(&body));
        assert_eq!(status, 400, "{image}: {err}");
        assert!(err["error"]["details"][0]["path"] == "image", "{err}");
    }
}

#[test]
fn jobs_of_a_project_run_as_its_unix_user_when_the_server_is_root() {
    let dir = tempfile::tempdir().unwrap();
    let config = "projects:\n  - { name: vision, run_as: nobody }\n";
    if !nix::unistd::geteuid().is_root() {
        // Only root can switch users: a non-root server refuses the setting at start.
        let mut c = fairway_server::ServerConfig::new(dir.path().to_path_buf());
        c.file = fairway_server::ConfigFile::parse(config).unwrap();
        c.simulated_gpus = Some("1".into());
        c.registry_dir = None;
        let rt = tokio::runtime::Runtime::new().unwrap();
        let err = rt.block_on(fairway_server::start(c)).err().expect("refused").to_string();
        assert!(err.contains("run_as") && err.contains("root"), "{err}");
        return;
    }
    let server = InProcess::start("1", config);
    let nobody = nix::unistd::User::from_name("nobody").unwrap().expect("Debian has nobody");
    let job = "name: who\ntenant: { project: vision }\nresources: { gpus: 1 }\nshell: true\n\
               command: [\"id -u; touch $FAIRWAY_CHECKPOINT_DIR/written && echo wrote\"]\n";
    let id = server.api.submit(job)[0];
    server.api.wait_state(id, JobState::Succeeded);
    let log = server.api.log(id);
    assert!(log.starts_with(&format!("{}\n", nobody.uid)), "{log}");
    assert!(log.contains("wrote"), "its checkpoint directory is its own: {log}");
    // A job of another project still runs as the server's user.
    let other = server.api.submit(&job.replace("vision", "ads"))[0];
    server.api.wait_state(other, JobState::Succeeded);
    assert!(server.api.log(other).starts_with(&format!("{}\n", nix::unistd::geteuid())));
}
