//! The client commands without a server: what a user sees when something is wrong before or
//! instead of a request.

use std::process::{Command, Output};

use crate::fake_server::{FakeServer, Reply};

fn fairway(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_fairway")).args(args).env_remove("FAIRWAY_SERVER").output().expect("runs")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Nothing listens on port 1 of the loopback address, so connecting is refused at once.
const DEAD_SERVER: &str = "http://127.0.0.1:1";

#[test]
fn unreachable_server_exits_1_with_a_hint() {
    for args in [
        &["ls", "--server", DEAD_SERVER][..],
        &["--server", DEAD_SERVER, "nodes"],
        &["describe", "12", "--server", DEAD_SERVER],
        &["quota", "set", "project", "ads", "--gpus", "8", "--server", DEAD_SERVER],
    ] {
        let out = fairway(args);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(
            err.starts_with("error: cannot reach the Fairway server at http://127.0.0.1:1: ")
                && err.contains("(is `fairway serve` running? set --server or FAIRWAY_SERVER)"),
            "{args:?}: {err}"
        );
        assert!(out.stdout.is_empty());
    }
}

#[test]
fn server_comes_from_the_environment() {
    let out = Command::new(env!("CARGO_BIN_EXE_fairway"))
        .args(["priority-classes"])
        .env("FAIRWAY_SERVER", "http://127.0.0.1:1/")
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("cannot reach the Fairway server at http://127.0.0.1:1:"), "{}", stderr(&out));
}

#[test]
fn submit_names_a_missing_file() {
    let out = fairway(&["submit", "-f", "missing.yaml", "--server", DEAD_SERVER]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(err.starts_with("error: cannot read missing.yaml: "), "{err}");
    assert!(!err.contains("cannot reach"), "the file is read before any request: {err}");
}

#[test]
fn usage_errors_exit_2() {
    for args in [
        &["submit"][..],
        &["ls", "--state", "sleeping"],
        &["ls", "-A", "--state", "failed"],
        &["ls", "-o", "xml"],
        &["ls", "--server", "not a url"],
        &["quota", "set", "team", "ads"],
        &["cancel"],
        &["logs"],
        &["completions", "tcsh"],
        &["no-such-command"],
    ] {
        let out = fairway(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
    }
}

#[test]
fn completions_cover_the_commands() {
    let out = fairway(&["completions", "bash"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let script = String::from_utf8(out.stdout).unwrap();
    for word in ["fairway", "submit", "describe", "priority-classes", "example-trainer"] {
        assert!(script.contains(word), "{word} missing");
    }
    for shell in ["zsh", "fish", "elvish", "powershell"] {
        let out = fairway(&["completions", shell]);
        assert!(out.status.success() && !out.stdout.is_empty(), "{shell}");
    }
}

#[test]
fn example_trainer_runs_and_can_fail_on_purpose() {
    let tmp = tempdir("trainer");
    let dir = tmp.path();
    let run = |extra: &[&str]| {
        let mut args = vec!["example-trainer", "--steps", "3", "--checkpoint-every", "1", "--step-ms", "1"];
        args.extend_from_slice(extra);
        Command::new(env!("CARGO_BIN_EXE_fairway"))
            .args(&args)
            .env("FAIRWAY_CHECKPOINT_DIR", dir)
            // Jobs inherit the server's environment; a bad value there is not the trainer's business.
            .env("FAIRWAY_SERVER", "not a url")
            .output()
            .expect("runs")
    };
    let ok = run(&[]);
    assert_eq!(ok.status.code(), Some(0), "{}", stderr(&ok));
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).unwrap();
    let failed = run(&["--fail-at-step", "2"]);
    assert_eq!(failed.status.code(), Some(1), "{}", stderr(&failed));
    let _ = std::fs::remove_dir_all(dir);
}

/// A job as the server shows it.
fn job_json(id: i64, name: &str, state: &str) -> serde_json::Value {
    serde_json::json!({
        "id": id, "name": name, "user": "alice", "project": "ads", "priority": 1000,
        "priority_class": "high", "state": state, "gpus_per_replica": 2, "replicas": 1,
        "gpu_model": null, "submitted_at_ms": 1_767_225_600_000u64, "first_started_at_ms": null,
        "started_at_ms": null, "finished_at_ms": null, "wait_seconds": 1.5, "restart_count": 0,
        "preemptions": 0, "failures": 0, "retries": 0, "last_checkpoint_ms": null,
        "exit_code": null, "exit_signal": null,
    })
}

fn error_json(code: &str, message: &str, details: serde_json::Value) -> serde_json::Value {
    serde_json::json!({ "error": { "code": code, "message": message, "details": details } })
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn against(server: &FakeServer, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_fairway")).args(args).env("FAIRWAY_SERVER", &server.url).output().expect("runs")
}

#[test]
fn submit_sends_the_file_and_prints_jobs_and_warnings() {
    let server = FakeServer::start(vec![(
        "POST /v1/jobs",
        Reply::json(
            201,
            serde_json::json!({
                "jobs": [{ "id": 7, "name": "ctr-model", "project": "ads" }],
                "priority_classes": ["urgent"],
                "warnings": [{ "document": 2, "path": "image", "reason": "ignored without a container runtime" }],
            }),
        ),
    )]);
    let dir = tempdir("submit");
    let file = dir.path().join("jobs.yaml");
    let text = "name: ctr-model\ntenant: { project: ads }\nresources: { gpus: 2 }\ncommand: [sleep, '1']\n";
    std::fs::write(&file, text).unwrap();
    let out = against(&server, &["submit", "-f", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "job/ctr-model submitted (id 7)\npriorityclass/urgent configured\n");
    assert_eq!(stderr(&out), "warning: document 2, image: ignored without a container runtime\n");
    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].line, "POST /v1/jobs");
    assert_eq!(requests[0].content_type.as_deref(), Some("application/yaml"));
    assert_eq!(requests[0].body, text.as_bytes());

    let out = against(&server, &["submit", "-f", file.to_str().unwrap(), "-o", "json"]);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(doc["jobs"][0]["id"], 7);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn server_errors_print_message_and_details() {
    let two = error_json(
        "invalid_spec",
        "invalid submission: 2 problems",
        serde_json::json!([
            { "document": 1, "path": "resources.gpus", "reason": "must be at least 1" },
            { "document": 2, "path": "name", "reason": "required" },
        ]),
    );
    let one = error_json(
        "invalid_spec",
        "invalid submission: document 1, name: required",
        serde_json::json!([{ "document": 1, "path": "name", "reason": "required" }]),
    );
    let cases = [
        (
            two,
            "error: invalid submission: 2 problems\n  document 1, resources.gpus: must be at least 1\n  document 2, name: required\n",
        ),
        (one, "error: invalid submission: document 1, name: required\n"),
    ];
    for (body, want) in cases {
        let server = FakeServer::start(vec![("POST /v1/jobs", Reply::json(400, body))]);
        let out = Command::new(env!("CARGO_BIN_EXE_fairway"))
            .args(["submit", "-f", "-", "--server", &server.url])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .and_then(|mut child| {
                use std::io::Write;
                child.stdin.take().unwrap().write_all(b"{\"name\": \"x\"}\n")?;
                child.wait_with_output()
            })
            .expect("runs");
        assert_eq!(out.status.code(), Some(1));
        assert_eq!(stderr(&out), want);
        assert_eq!(server.requests()[0].body, b"{\"name\": \"x\"}\n", "stdin is sent as is");
    }
}

#[test]
fn ls_asks_for_unfinished_jobs_and_prints_a_table() {
    let list = serde_json::json!({ "jobs": [job_json(5, "train", "running")] });
    let server = FakeServer::start(vec![(
        "GET /v1/jobs?state=pending%2Crunning%2Cpreempting%2Cstopping&project=ads",
        Reply::json(200, list),
    )]);
    let out = against(&server, &["ls", "--project", "ads"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    let rows: Vec<Vec<&str>> = text.lines().map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(rows[0], ["ID", "NAME", "PROJECT", "USER", "PRIORITY", "STATE", "GPUS", "AGE", "WAIT", "ETA", "REASON"]);
    // The age depends on today's date.
    assert_eq!(
        [&rows[1][..7], &rows[1][8..]].concat(),
        ["5", "train", "ads", "alice", "high", "running", "2", "1s", "-", "-"]
    );
    assert_eq!(server.requests().len(), 1);

    let out = against(&server, &["list", "--project", "ads", "-o", "yaml"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).contains("name: train"), "{}", stdout(&out));
}

#[test]
fn jobs_are_named_by_id_or_unique_name() {
    let server = FakeServer::start(vec![
        (
            "GET /v1/jobs?name=train",
            Reply::json(
                200,
                serde_json::json!({ "jobs": [job_json(5, "train", "running"), job_json(3, "train", "failed")] }),
            ),
        ),
        ("GET /v1/jobs?name=eval", Reply::json(200, serde_json::json!({ "jobs": [job_json(8, "eval", "pending")] }))),
        ("GET /v1/jobs?name=nope", Reply::json(200, serde_json::json!({ "jobs": [] }))),
        (
            "GET /v1/jobs/8",
            Reply::json(
                200,
                serde_json::json!({ "job": job_json(8, "eval", "pending"), "spec": { "name": "eval" }, "events": [] }),
            ),
        ),
        ("GET /v1/jobs/99", Reply::json(404, error_json("not_found", "job 99 does not exist", serde_json::json!([])))),
        ("GET /v1/jobs/8/logs?follow=false&tail=2", Reply::text("b\nc\n")),
    ]);
    let out = against(&server, &["describe", "train"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr(&out),
        "error: 2 jobs are named \"train\"; name one by its id: 5 (running, project ads), 3 (failed, project ads)\n"
    );
    let out = against(&server, &["describe", "nope"]);
    assert_eq!((out.status.code(), stderr(&out).as_str()), (Some(1), "error: no job named \"nope\"\n"));
    let out = against(&server, &["describe", "99"]);
    assert_eq!((out.status.code(), stderr(&out).as_str()), (Some(1), "error: job 99 does not exist\n"));

    let out = against(&server, &["describe", "job/eval"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.starts_with("Name:            eval\nID:              8\n"), "{text}");
    assert!(text.contains("\nSpec:\n  name: eval\n") && text.ends_with("Events:\n  <none>\n"), "{text}");

    let out = against(&server, &["logs", "eval", "--tail", "2"]);
    assert_eq!((out.status.code(), stdout(&out).as_str()), (Some(0), "b\nc\n"), "{}", stderr(&out));
}

#[test]
fn answers_that_are_not_error_bodies_still_read_well() {
    let server = FakeServer::start(vec![]);
    let out = against(&server, &["why", "9"]);
    assert_eq!(
        (out.status.code(), stderr(&out).as_str()),
        (Some(1), "error: the server answered 404 Not Found: no route\n")
    );
}

#[test]
fn quota_set_and_cancel_send_the_right_requests() {
    let view = serde_json::json!({
        "kind": "project", "account": "ads", "gpus_max": 8, "cpu_millis_max": null, "memory_mib_max": null,
        "gpus_used": 0, "cpu_millis_used": 0, "memory_mib_used": 0,
    });
    let server = FakeServer::start(vec![
        ("PUT /v1/quotas/project/ads", Reply::json(200, view)),
        ("POST /v1/jobs/4/cancel", Reply::json(200, serde_json::json!({ "id": 4, "state": "cancelled" }))),
        ("POST /v1/jobs/5/cancel", Reply::json(200, serde_json::json!({ "id": 5, "state": "succeeded" }))),
    ]);
    let out = against(&server, &["quota", "set", "project", "ads", "--gpus", "8"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "quota/project/ads set: gpus 8, cpu unlimited, memory unlimited\n");
    let sent: serde_json::Value = serde_json::from_slice(&server.requests()[0].body).unwrap();
    assert_eq!(sent, serde_json::json!({ "gpus_max": 8, "cpu_millis_max": null, "memory_mib_max": null }));

    let out = against(&server, &["cancel", "4", "job/5", "6"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(stdout(&out), "job/4 cancelled\njob/5 already succeeded\n");
    assert_eq!(
        stderr(&out),
        "error: 6: the server answered 404 Not Found: no route\nerror: 1 of 3 jobs could not be cancelled\n"
    );
}

#[test]
fn quota_cohort_sends_its_members_and_lists_cohorts() {
    let view = serde_json::json!({
        "name": "lab", "capacity": { "gpus": 8 }, "gpus_in_use": 5, "cpu_millis_in_use": 0, "memory_mib_in_use": 0,
        "members": [
            { "project": "vision", "nominal": { "gpus": 4 }, "borrowing_limit": { "gpus": 2 },
              "gpus_used": 5, "cpu_millis_used": 0, "memory_mib_used": 0, "borrowing": true },
            { "project": "speech", "nominal": { "gpus": 4 }, "lending_limit": { "gpus": 1 },
              "gpus_used": 0, "cpu_millis_used": 0, "memory_mib_used": 0, "borrowing": false },
            // Its borrowing limit was lowered below what it runs: 5 used of 3 allowed.
            { "project": "nlp", "nominal": { "gpus": 2 }, "borrowing_limit": { "gpus": 1 },
              "gpus_used": 5, "cpu_millis_used": 0, "memory_mib_used": 0, "borrowing": true },
            // The controller's namespace whose annotations do not hold with the others'.
            { "project": "ops", "nominal": { "gpus": 1 }, "lending_limit": { "gpus": 3 },
              "gpus_used": 0, "cpu_millis_used": 0, "memory_mib_used": 0, "borrowing": false,
              "left_out": "3 is more than the nominal quota 1" },
        ],
    });
    let server = FakeServer::start(vec![
        ("PUT /v1/cohorts/lab", Reply::json(200, view.clone())),
        ("GET /v1/cohorts", Reply::json(200, serde_json::json!({ "cohorts": [view] }))),
    ]);
    let out = against(
        &server,
        &["quota", "cohort", "set", "lab", "--member", "vision:4:borrow=2", "--member", "speech:4:lend=1"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let sent: serde_json::Value = serde_json::from_slice(&server.requests()[0].body).unwrap();
    assert_eq!(
        sent,
        serde_json::json!({ "members": [
            { "project": "vision", "nominal": { "gpus": 4 }, "borrowing_limit": { "gpus": 2 } },
            { "project": "speech", "nominal": { "gpus": 4 }, "lending_limit": { "gpus": 1 } },
        ] })
    );
    let out = against(&server, &["quota", "cohorts"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let table = stdout(&out);
    let vision = table.lines().find(|l| l.contains("vision")).unwrap_or_else(|| panic!("{table}"));
    for cell in ["lab", "5/8", "5/4", "+2", "yes"] {
        assert!(vision.split_whitespace().any(|c| c == cell), "{cell} missing: {table}");
    }
    assert!(vision.trim_end().ends_with("yes"), "within its limit: {table}");
    let nlp = table.lines().find(|l| l.contains("nlp")).unwrap_or_else(|| panic!("{table}"));
    assert!(nlp.trim_end().ends_with("yes, 2 over its limit"), "{table}");
    let ops = table.lines().find(|l| l.contains("ops")).unwrap_or_else(|| panic!("{table}"));
    assert!(ops.contains("ops (left out)"), "{table}");
    assert!(
        table.contains("ops is in no cohort: its place in lab does not hold (3 is more than the nominal quota 1)"),
        "{table}"
    );
    // The list as a document, as `fairway quota -o json` gives the quotas.
    let out = against(&server, &["quota", "cohorts", "-o", "json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let doc: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(doc["cohorts"][0]["members"][3]["left_out"], "3 is more than the nominal quota 1", "{doc}");
    // A member the CLI cannot read is refused before anything is sent.
    let out = against(&server, &["quota", "cohort", "set", "lab", "--member", "vision:four"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("GPUS must be a whole number"), "{}", stderr(&out));
    assert_eq!(server.requests().len(), 3);
    // `--file` takes the members as a list, as the request's body, or as one cohort of the
    // config file; each sends the same members.
    let dir = tempdir("cohort-file");
    let list = "- { project: vision, nominal: { gpus: 4 }, borrowing_limit: { gpus: 2 } }\n\
                - { project: speech, nominal: { gpus: 4 }, lending_limit: { gpus: 1 } }\n";
    let indented: String = list.lines().map(|l| format!("  {l}\n")).collect();
    let forms = [list.to_string(), format!("members:\n{indented}"), format!("name: lab\nmembers:\n{indented}")];
    for (i, form) in forms.iter().enumerate() {
        let path = dir.path().join(format!("members-{i}.yaml"));
        std::fs::write(&path, form).unwrap();
        let out = against(&server, &["quota", "cohort", "set", "lab", "--file", path.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(0), "{form}: {}", stderr(&out));
        let sent: serde_json::Value = serde_json::from_slice(&server.requests().last().unwrap().body).unwrap();
        assert_eq!(
            sent,
            serde_json::json!({ "members": [
            { "project": "vision", "nominal": { "gpus": 4 }, "borrowing_limit": { "gpus": 2 } },
            { "project": "speech", "nominal": { "gpus": 4 }, "lending_limit": { "gpus": 1 } },
        ] }),
            "{form}"
        );
    }
    // Another cohort's file, a mistake inside and a form it is not: refused, nothing sent.
    let sent_before = server.requests().len();
    let bad = [
        (format!("name: research\nmembers:\n{indented}"), "name: the file is cohort \"research\", not \"lab\""),
        (
            "members:\n  - { project: a, nominal: { gpu: 2 } }\n".to_string(),
            "members[0].nominal.gpu: line 2 column 30: unknown field `gpu`",
        ),
        ("7\n".to_string(), "expected a list of members, or a mapping with `members`"),
    ];
    for (i, (form, said)) in bad.iter().enumerate() {
        let path = dir.path().join(format!("bad-{i}.yaml"));
        std::fs::write(&path, form).unwrap();
        let out = against(&server, &["quota", "cohort", "set", "lab", "--file", path.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(1), "{form}");
        assert!(stderr(&out).contains(said), "{form}: {}", stderr(&out));
    }
    assert_eq!(server.requests().len(), sent_before);
}

/// A folder removed when the test ends.
fn tempdir(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new().prefix(&format!("fairway-cli-{name}-")).tempdir().unwrap()
}

#[test]
fn logs_follow_streams_and_ctrl_c_exits_0() {
    use std::io::Read;

    let server =
        FakeServer::start(vec![("GET /v1/jobs/8/logs?follow=true", Reply { hold: true, ..Reply::text("step 1\n") })]);
    let mut child = Command::new(env!("CARGO_BIN_EXE_fairway"))
        .args(["logs", "8", "-f", "--server", &server.url])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("runs");
    // The first chunk arrives while the response is still open.
    let mut stdout = child.stdout.take().unwrap();
    let mut got = vec![0; 7];
    stdout.read_exact(&mut got).expect("the first chunk");
    assert_eq!(got, b"step 1\n");
    let kill = Command::new("kill").args(["-INT", &child.id().to_string()]).status().expect("kill runs");
    assert!(kill.success());
    let out = child.wait_with_output().expect("exits");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}
