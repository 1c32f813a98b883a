//! A catalogue of bad inputs, over the HTTP API and the CLI, against one live server.
//!
//! Each case states its input, the status (HTTP) or exit code (CLI: 2 for usage errors,
//! 1 for refused requests), the error `code` (HTTP), and what the error must name: the field
//! or parameter at fault. Every error answer must be an `ErrorBody` in plain words (no Rust
//! type names, no parser's wording), and after every case the server's state — jobs and
//! their states, quotas, tokens, projects, priority classes — must be what it was before.
//!
//! "What the error says" is what a person is shown: for HTTP the message and, for a
//! submission, one line per problem (`details`, as the CLI prints them); for the CLI its
//! standard error.

use std::process::{Command, Stdio};

use fairway_server::api::{ErrorBody, JobState, TokenCreated};
use serde_json::{Value, json};

use crate::server::{Api, InProcess};

const FAIRWAY: &str = env!("CARGO_BIN_EXE_fairway");

/// Who makes a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Who {
    Admin,
    /// A submitter of project `vision` (cap: the default `high`).
    Alice,
    /// A viewer of project `vision`.
    Viewer,
    /// No token at all.
    Anonymous,
    /// A token that was revoked.
    Revoked,
    /// Well formed, but no such token.
    Unknown,
}

struct HttpCase {
    who: Who,
    method: &'static str,
    path: String,
    headers: Vec<(&'static str, String)>,
    body: Option<Vec<u8>>,
    status: u16,
    code: &'static str,
    /// Each must appear in what the error says.
    needles: Vec<&'static str>,
}

impl HttpCase {
    fn label(&self) -> String {
        let body = self.body.as_deref().map(|b| String::from_utf8_lossy(&b[..b.len().min(120)]).into_owned());
        format!("{:?} {} {} {:?} body {:?}", self.who, self.method, self.path, self.headers, body)
    }
}

fn http(
    who: Who,
    method: &'static str,
    path: impl Into<String>,
    body: Option<&[u8]>,
    status: u16,
    code: &'static str,
    needles: &[&'static str],
) -> HttpCase {
    let headers = match body {
        Some(b) if b.first() == Some(&b'{') || b.first() == Some(&b'[') => {
            vec![("content-type", "application/json".to_owned())]
        }
        Some(_) => vec![("content-type", "application/yaml".to_owned())],
        None => Vec::new(),
    };
    HttpCase {
        who,
        method,
        path: path.into(),
        headers,
        body: body.map(<[u8]>::to_vec),
        status,
        code,
        needles: needles.to_vec(),
    }
}

/// A submission that fails to parse or validate: 400 `invalid_spec`.
fn invalid(who: Who, body: &str, needles: &[&'static str]) -> HttpCase {
    http(who, "POST", "/v1/jobs", Some(body.as_bytes()), 400, "invalid_spec", needles)
}

/// A submission refused with another status.
fn refused(who: Who, body: &str, status: u16, code: &'static str, needles: &[&'static str]) -> HttpCase {
    http(who, "POST", "/v1/jobs", Some(body.as_bytes()), status, code, needles)
}

fn get(who: Who, path: impl Into<String>, status: u16, code: &'static str, needles: &[&'static str]) -> HttpCase {
    http(who, "GET", path, None, status, code, needles)
}

/// A native job: `name: x`, one GPU, a command, and `extra`.
fn job(extra: &str) -> String {
    format!("name: x\nresources: {{ gpus: 1 }}\ncommand: [\"true\"]\n{extra}")
}

/// A native job with these resources.
fn job_resources(resources: &str) -> String {
    format!("name: x\nresources: {resources}\ncommand: [\"true\"]\n")
}

/// A Kubernetes Job: `meta` inside `metadata`, `spec` inside the Job's `spec`, `pod` inside
/// the pod template's spec, `container` inside its only container.
fn kube(meta: &str, spec: &str, pod: &str, container: &str) -> String {
    format!(
        "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: k\n{meta}spec:\n{spec}  template:\n    spec:\n{pod}      \
         containers:\n      - name: c\n        image: pytorch/pytorch\n        command: [python]\n        resources: \
         {{ limits: {{ nvidia.com/gpu: 1 }} }}\n{container}"
    )
}

/// A Kubernetes PriorityClass.
fn kube_class(name: &str, rest: &str) -> String {
    format!("apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {{ name: {name} }}\n{rest}")
}

struct CliCase {
    who: Who,
    args: Vec<String>,
    stdin: Option<String>,
    code: i32,
    needles: Vec<&'static str>,
}

fn cli(who: Who, args: &[&str], code: i32, needles: &[&'static str]) -> CliCase {
    CliCase { who, args: args.iter().map(|a| (*a).to_owned()).collect(), stdin: None, code, needles: needles.to_vec() }
}

fn cli_stdin(who: Who, args: &[&str], stdin: &str, code: i32, needles: &[&'static str]) -> CliCase {
    CliCase { stdin: Some(stdin.to_owned()), ..cli(who, args, code, needles) }
}

/// The server and what the cases refer to.
struct Fixture {
    server: InProcess,
    alice: Api,
    viewer: Api,
    anonymous: Api,
    revoked: Api,
    unknown: Api,
    tokens: Vec<(Who, String)>,
    /// alice's gang of two replicas, running.
    sleeper: i64,
    /// bob's job in alice's project, running.
    bobs: i64,
    /// A job of project ads, running.
    ads: i64,
    /// The admin's own token's id.
    admin_token_id: i64,
    /// A scratch directory for files the CLI reads.
    dir: tempfile::TempDir,
}

impl Fixture {
    fn api(&self, who: Who) -> &Api {
        match who {
            Who::Admin => &self.server.api,
            Who::Alice => &self.alice,
            Who::Viewer => &self.viewer,
            Who::Anonymous => &self.anonymous,
            Who::Revoked => &self.revoked,
            Who::Unknown => &self.unknown,
        }
    }

    fn token(&self, who: Who) -> Option<&str> {
        self.tokens.iter().find(|(w, _)| *w == who).map(|(_, t)| t.as_str())
    }
}

fn make_token(api: &Api, user: &str, project: &str, role: &str) -> TokenCreated {
    let body = json!({"user": user, "project": project, "role": role}).to_string();
    let (status, answer) = api.json("POST", "/v1/tokens", Some(&body));
    assert_eq!(status, 201, "{answer}");
    serde_json::from_value(answer).unwrap()
}

fn sleeper_job(name: &str, tenant: &str, extra: &str) -> String {
    format!("name: {name}\ntenant: {tenant}\nresources: {{ gpus: 1 }}\nshell: true\ncommand: [\"sleep 600\"]\n{extra}")
}

fn setup() -> Fixture {
    // Two nodes of four A100s; project ads may hold one GPU.
    // Fair sharing with a half-life of 0: the quota list shows shares and weights, which stay
    // as they are while nothing starts or ends.
    let server =
        InProcess::start("2x4", "quotas:\n  - { project: ads, gpus_max: 1 }\nfair_share: { half_life_seconds: 0 }\n");
    let admin = &server.api;
    let alice = make_token(admin, "alice", "vision", "submitter").secret;
    let viewer = make_token(admin, "carol", "vision", "viewer").secret;
    let revoked = make_token(admin, "dave", "vision", "submitter");
    assert_eq!(admin.request("DELETE", &format!("/v1/tokens/{}", revoked.token.id), None).0, 204);
    let unknown = format!("fwt_{}", "0".repeat(64));

    let sleeper = admin.submit(&sleeper_job("sleeper", "{ user: alice, project: vision }", "replicas: 2\n"))[0];
    let bobs = admin.submit(&sleeper_job("bobs", "{ user: bob, project: vision }", ""))[0];
    admin.submit(&sleeper_job("twin", "{ user: alice, project: vision }", ""));
    admin.submit(&sleeper_job("twin", "{ user: alice, project: vision }", ""));
    let ads = admin.submit(&sleeper_job("adsjob", "{ user: ads-user, project: ads }", ""))[0];
    // Over its project's quota: pending for as long as adsjob runs.
    admin.submit(&sleeper_job("ads-waiting", "{ user: ads-user, project: ads }", ""));
    let class = "{ apiVersion: fairway/v1, kind: PriorityClass, name: nightly, value: 500 }\n";
    let (status, answer) = admin.request("POST", "/v1/jobs", Some(class.as_bytes().to_vec()));
    assert_eq!(status, 201, "{}", String::from_utf8_lossy(&answer));
    let (status, answer) = admin.json("PUT", "/v1/projects/ads", Some(r#"{"priority_class_max": "medium"}"#));
    assert_eq!(status, 200, "{answer}");
    let (status, answer) = admin.json("PUT", "/v1/quotas/user/alice", Some(r#"{"gpus_max": 6}"#));
    assert_eq!(status, 200, "{answer}");
    admin.wait_for("the setup jobs to settle", |api| {
        let jobs = api.jobs("limit=100");
        let running = jobs.iter().filter(|j| j.state == JobState::Running).count();
        let waiting = jobs.iter().any(|j| j.name == "ads-waiting" && j.state == JobState::Pending);
        (running == 5 && waiting).then_some(())
    });
    let (_, me) = admin.json("GET", "/v1/whoami", None);
    let admin_token_id = me["token_id"].as_i64().unwrap();

    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("empty.yaml"), "").unwrap();
    std::fs::write(dir.path().join("blank.yaml"), "\n  \n").unwrap();
    std::fs::write(dir.path().join("bad.yaml"), "name: [unclosed\n").unwrap();
    let tokens = vec![
        (Who::Admin, admin.token.clone().unwrap()),
        (Who::Alice, alice.clone()),
        (Who::Viewer, viewer.clone()),
        (Who::Revoked, revoked.secret.clone()),
        (Who::Unknown, unknown.clone()),
    ];
    Fixture {
        alice: admin.as_token(&alice),
        viewer: admin.as_token(&viewer),
        anonymous: Api::new(admin.base.clone(), None),
        revoked: admin.as_token(&revoked.secret),
        unknown: admin.as_token(&unknown),
        tokens,
        sleeper,
        bobs,
        ads,
        admin_token_id,
        dir,
        server,
    }
}

/// What a case must leave unchanged, as the admin sees it.
fn snapshot(api: &Api) -> Value {
    let get = |path: &str| {
        let (status, body) = api.json("GET", path, None);
        assert_eq!(status, 200, "GET {path}: {body}");
        body
    };
    let jobs = get("/v1/jobs?limit=10000");
    let jobs: Vec<Value> =
        jobs["jobs"].as_array().unwrap().iter().map(|j| json!([j["id"], j["name"], j["state"]])).collect();
    json!({
        "jobs": jobs,
        "quotas": get("/v1/quotas"),
        "tokens": get("/v1/tokens"),
        "projects": get("/v1/projects"),
        "priority_classes": get("/v1/priority-classes"),
    })
}

/// Words that give away a library or Rust underneath instead of speaking to the user.
const LIBRARY_TEXT: &[&str] = &[
    "serde",
    "saphyr",
    "Failed to deserialize",
    "DuplicateKeyPolicy",
    "configured policy",
    "invalid type:",
    "invalid value:",
    "invalid digit found in string",
    "unknown variant",
    "Option<",
    "EOF",
    "invalid length",
    "..=",
    "?:",
    "QuotaSpec",
    "ProjectSpec",
    "NewTokenRequest",
    "CheckpointReport",
    "Query",
    "String",
    "struct ",
    "document 0",
];

const RUST_TYPES: &[&str] =
    &["u8", "u16", "u32", "u64", "u128", "usize", "i8", "i16", "i32", "i64", "i128", "isize", "f32", "f64"];

fn library_text(text: &str) -> Option<String> {
    if let Some(found) = LIBRARY_TEXT.iter().find(|w| text.contains(**w)) {
        return Some((*found).to_owned());
    }
    text.split(|c: char| !c.is_ascii_alphanumeric()).find(|word| RUST_TYPES.contains(word)).map(str::to_owned)
}

/// What the error said, or why the case failed.
fn run_http(fx: &Fixture, case: &HttpCase) -> Result<String, String> {
    let headers: Vec<(&str, &str)> = case.headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let (status, bytes) = fx.api(case.who).request_with(case.method, &case.path, case.body.clone(), &headers);
    let text = String::from_utf8_lossy(&bytes);
    if status != case.status {
        return Err(format!("status {status}, want {}: {text}", case.status));
    }
    let value: Value = serde_json::from_slice(&bytes).map_err(|_| format!("not JSON: {text}"))?;
    let keys = |v: &Value| v.as_object().map(|o| o.keys().cloned().collect::<Vec<_>>()).unwrap_or_default();
    let top = keys(&value);
    let inner = keys(&value["error"]);
    if top != ["error"] || !inner.iter().all(|k| ["code", "message", "details"].contains(&k.as_str())) {
        return Err(format!("not an ErrorBody: {text}"));
    }
    let body: ErrorBody = serde_json::from_value(value).map_err(|e| format!("not an ErrorBody ({e}): {text}"))?;
    if body.error.code != case.code {
        return Err(format!("code {:?}, want {:?}: {text}", body.error.code, case.code));
    }
    let mut said = body.error.message.clone();
    for d in &body.error.details {
        said.push('\n');
        said.push_str(&fairway_server::where_and_why(d));
    }
    if let Some(missing) = case.needles.iter().find(|n| !said.contains(**n)) {
        return Err(format!("does not say {missing:?}: {said}"));
    }
    if let Some(found) = library_text(&said) {
        return Err(format!("library text {found:?}: {said}"));
    }
    Ok(said)
}

fn run_cli(fx: &Fixture, case: &CliCase) -> Result<String, String> {
    use std::io::Write;
    let mut command = Command::new(FAIRWAY);
    for var in ["FAIRWAY_TOKEN", "FAIRWAY_TOKEN_FILE", "FAIRWAY_CA_CERT", "FAIRWAY_DATA_DIR", "FAIRWAY_CONFIG"] {
        command.env_remove(var);
    }
    command
        .env("FAIRWAY_SERVER", &fx.server.api.base)
        .env("HOME", fx.dir.path().join("home"))
        .env("XDG_CONFIG_HOME", fx.dir.path().join("config"))
        .env("XDG_STATE_HOME", fx.dir.path().join("state"))
        .current_dir(fx.dir.path());
    if let Some(token) = fx.token(case.who) {
        command.env("FAIRWAY_TOKEN", token);
    }
    let mut child =
        command.args(&case.args).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let mut input = child.stdin.take().unwrap();
    if let Some(text) = &case.stdin {
        input.write_all(text.as_bytes()).unwrap();
    }
    drop(input);
    let out = child.wait_with_output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let code = out.status.code().unwrap_or(-1);
    if code != case.code {
        return Err(format!("exit {code}, want {}: {stderr}{stdout}", case.code));
    }
    if !stdout.is_empty() {
        return Err(format!("printed to stdout on failure: {stdout}"));
    }
    if let Some(missing) = case.needles.iter().find(|n| !stderr.contains(**n)) {
        return Err(format!("does not say {missing:?}: {stderr}"));
    }
    if let Some(found) = library_text(&stderr) {
        return Err(format!("library text {found:?}: {stderr}"));
    }
    Ok(stderr.into_owned())
}

fn http_cases(fx: &Fixture) -> Vec<HttpCase> {
    use Who::*;
    let (sleeper, bobs, ads) = (fx.sleeper, fx.bobs, fx.ads);
    let deep = format!("{{\"name\": {}1{}}}", "[".repeat(100), "]".repeat(100));
    let deep_yaml = format!("name: x\nenv: {}1{}\n", "[".repeat(100), "]".repeat(100));
    let many_docs = "a: 1\n---\n".repeat(1001);
    let huge_json = format!("{{\"gpus_max\": 1{}}}", " ".repeat(2 << 20));
    let huge = format!("name: x\n#{}\n", "x".repeat(1 << 20));
    let long_name = format!("name: {}\nresources: {{ gpus: 1 }}\ncommand: [\"true\"]\n", "a".repeat(254));
    let mut cases = vec![
        // ---- the input as a whole --------------------------------------------------------
        invalid(Alice, "name: \"x\nresources: { gpus: 1 }\n", &["input: invalid YAML", "line"]),
        invalid(Alice, "{\"name\": \"x\", \"resources\": {\"gpus\": 1},", &["input: not valid JSON"]),
        invalid(Alice, "name: x\nresources: { gpus: 1 }\ncommand: [\"true\"]\nname: y\n", &["name", "duplicate key"]),
        invalid(
            Alice,
            "{\"name\": \"x\", \"resources\": {\"gpus\": 1, \"gpus\": 2}, \"command\": [\"true\"]}",
            &["resources.gpus", "duplicate key"],
        ),
        invalid(Alice, &job_resources("{ gpus: .nan }"), &["resources.gpus", "not a finite number"]),
        invalid(
            Alice,
            "{\"name\": \"x\", \"resources\": {\"gpus\": 1e400}, \"command\": [\"true\"]}",
            &["resources.gpus"],
        ),
        invalid(Alice, &deep, &["document 1", "deeper than the limit of 64"]),
        invalid(Alice, &deep_yaml, &["deeper than the limit of 64"]),
        invalid(Alice, &many_docs, &["input: too many documents", "1000"]),
        refused(Alice, &huge, 413, "payload_too_large", &["limit of 1048576 bytes"]),
        http(Alice, "POST", "/v1/jobs", Some(b""), 400, "bad_request", &["input:", "no job"]),
        http(Alice, "POST", "/v1/jobs", Some(b"# only a comment\n---\n"), 400, "bad_request", &["input:", "no job"]),
        http(Alice, "POST", "/v1/jobs", Some(b"name: \xff\xfe\n"), 400, "invalid_spec", &["input:", "UTF-8"]),
        invalid(Alice, "- name: x\n- name: y\n", &["document 1", "mapping"]),
        invalid(Alice, "\"just a string\"\n", &["document 1", "mapping"]),
        invalid(Alice, &job("apiVersion: fairway/v2\nkind: Job\n"), &["apiVersion"]),
        invalid(Alice, "apiVersion: batch/v1\nkind: CronJob\nmetadata: { name: k }\n", &["kind", "CronJob"]),
        invalid(Alice, &job("token: !secret abc\n"), &["tag"]),
        // ---- every field of a native job -----------------------------------------------
        invalid(Alice, "resources: { gpus: 1 }\ncommand: [\"true\"]\n", &["name"]),
        invalid(Alice, "name: \"42\"\nresources: { gpus: 1 }\ncommand: [\"true\"]\n", &["name", "only digits"]),
        invalid(Alice, "name: Big_Job\nresources: { gpus: 1 }\ncommand: [\"true\"]\n", &["name"]),
        invalid(Alice, &long_name, &["name", "253"]),
        invalid(Alice, "name: 7\nresources: { gpus: 1 }\ncommand: [\"true\"]\n", &["name"]),
        invalid(Alice, &job("tenant: { project: \"has space\" }\n"), &["tenant.project"]),
        invalid(Alice, &job("tenant: vision\n"), &["tenant"]),
        invalid(Alice, &job("tenant: { user: \"\", project: vision }\n"), &["tenant.user"]),
        invalid(Alice, &job("tenant: { project: vision, team: x }\n"), &["tenant.team"]),
        refused(Alice, &job("tenant: { user: bob }\n"), 403, "forbidden", &["tenant.user", "bob"]),
        refused(Alice, &job("tenant: { project: ads }\n"), 403, "forbidden", &["tenant.project", "ads"]),
        refused(Alice, &job("priority: critical\n"), 403, "forbidden", &["priority", "high"]),
        refused(Alice, &job("priority: 2000000000\n"), 403, "forbidden", &["priority"]),
        invalid(Alice, &job("priority: urgent\n"), &["priority", "urgent", "known classes"]),
        invalid(Alice, &job("priority: 99999999999\n"), &["priority"]),
        invalid(Alice, &job("priority: [high]\n"), &["priority"]),
        invalid(Alice, "name: x\ncommand: [\"true\"]\n", &["resources"]),
        invalid(Alice, &job_resources("{ gpus: 0 }"), &["resources.gpus"]),
        invalid(Alice, &job_resources("{ gpus: -1 }"), &["resources.gpus"]),
        invalid(Alice, &job_resources("{ gpus: two }"), &["resources.gpus"]),
        invalid(Alice, &job_resources("{ gpus: 1.5 }"), &["resources.gpus"]),
        invalid(Alice, &job_resources("{ gpus: 1, cpu_millis: -5 }"), &["resources.cpu_millis"]),
        invalid(Alice, &job_resources("{ gpus: 1, memory_mib: lots }"), &["resources.memory_mib"]),
        invalid(Alice, &job_resources("{ gpus: 1, gpu_model: \"\" }"), &["resources.gpu_model"]),
        invalid(Alice, &job_resources("{ gpu: 1 }"), &["resources.gpu"]),
        refused(Alice, &job_resources("{ gpus: 5 }"), 422, "unschedulable", &["resources.gpus"]),
        refused(
            Alice,
            &job_resources("{ gpus: 1, gpu_model: H100 }"),
            422,
            "unschedulable",
            &["resources.gpu_model", "A100"],
        ),
        refused(Alice, &job_resources("{ gpus: 1, cpu_millis: 999999999 }"), 422, "unschedulable", &["cpu"]),
        invalid(Alice, &job("replicas: 0\n"), &["replicas"]),
        invalid(Alice, &job("replicas: 2000\n"), &["replicas", "1024"]),
        invalid(Alice, &job("replica: 2\n"), &["replica"]),
        refused(
            Alice,
            &job_resources("{ gpus: 4 }").replace("name: x\n", "name: x\nreplicas: 3\n"),
            422,
            "unschedulable",
            &["replicas", "at most 2"],
        ),
        refused(
            Alice,
            &job_resources("{ gpus: 3 }").replace("name: x\n", "name: x\nreplicas: 3\n"),
            422,
            "unschedulable",
            &["replicas"],
        ),
        invalid(Alice, &job("image: \"--privileged\"\n"), &["image", "starts with \"-\""]),
        invalid(Alice, &job("image: \"--volume=/:/host\"\n"), &["image"]),
        invalid(Alice, &job("image: \"PyTorch/PyTorch\"\n"), &["image", "uppercase"]),
        invalid(Alice, &job("image: \"pytorch/pytorch latest\"\n"), &["image"]),
        invalid(Alice, &job("image: \"a:b:c\"\n"), &["image"]),
        invalid(Alice, &job("image: \"pytorch@sha256:short\"\n"), &["image", "64"]),
        refused(Alice, &job("image: pytorch/pytorch\n"), 422, "unsupported", &["image", "container runtime"]),
        invalid(Alice, &job("image: pytorch/pytorch\nimage_optional: \"yes\"\n"), &["image_optional"]),
        invalid(Alice, "name: x\nresources: { gpus: 1 }\nimage: pytorch/pytorch\nimage_optional: true\n", &["command"]),
        invalid(Alice, "name: x\nresources: { gpus: 1 }\n", &["command"]),
        invalid(Alice, "name: x\nresources: { gpus: 1 }\ncommand: []\n", &["command"]),
        invalid(Alice, "name: x\nresources: { gpus: 1 }\ncommand: python train.py\n", &["command"]),
        invalid(Alice, "name: x\nresources: { gpus: 1 }\ncommand: [python, 3]\n", &["command[1]"]),
        invalid(Alice, "name: x\nresources: { gpus: 1 }\ncommand: [a, b]\nshell: true\n", &["command", "one string"]),
        invalid(Alice, &job("shell: 1\n"), &["shell"]),
        invalid(Alice, &job("working_dir: data/run\n"), &["working_dir", "absolute"]),
        invalid(
            Alice,
            &job("env: { CUDA_VISIBLE_DEVICES: \"0\", EPOCHS: 3, DEBUG: true, FAIRWAY_JOB_ID: \"1\", \"1BAD\": x }\n"),
            &[
                "env.CUDA_VISIBLE_DEVICES",
                "reserved",
                "env.EPOCHS",
                "env.DEBUG",
                "env.FAIRWAY_JOB_ID",
                "1BAD",
                "5 problems",
            ],
        ),
        invalid(Alice, &job("env: [A=1]\n"), &["env"]),
        invalid(Alice, &job("max_runtime_seconds: 0\n"), &["max_runtime_seconds"]),
        invalid(Alice, &job("max_runtime_seconds: 10000000000000\n"), &["max_runtime_seconds"]),
        invalid(Alice, &job("max_total_runtime_seconds: 0\n"), &["max_total_runtime_seconds"]),
        invalid(Alice, &job("max_total_runtime_seconds: \"1h\"\n"), &["max_total_runtime_seconds"]),
        invalid(Alice, &job("retries: 101\n"), &["retries", "100"]),
        invalid(Alice, &job("retries: -1\n"), &["retries"]),
        invalid(Alice, &job("preemptible: yes\n"), &["preemptible", "true"]),
        invalid(Alice, &job("preemption_grace_seconds: -1\n"), &["preemption_grace_seconds"]),
        invalid(Alice, &job("preemption_grace_seconds: 601\n"), &["preemption_grace_seconds", "600"]),
        invalid(Alice, &job("checkpoint_interval_seconds: 0\n"), &["checkpoint_interval_seconds"]),
        invalid(Alice, &job("preemption_policy: Sometimes\n"), &["preemption_policy", "Never"]),
        invalid(Alice, &format!("{}---\n{}", job(""), job("")), &["name", "\"x\""]),
        invalid(
            Alice,
            &format!("{}---\n{}", job("").replace("name: x", "name: ok"), job("replica: 2\n")),
            &["document 2", "replica"],
        ),
        // ---- Kubernetes batch/v1 Job --------------------------------------------------
        invalid(Alice, &kube("", "", "", "").replace("  name: k\n", "  generateName: k-\n"), &["metadata.name"]),
        invalid(Alice, &kube("", "", "", "").replace("name: k", "name: \"42\""), &["metadata.name", "only digits"]),
        refused(Alice, &kube("  namespace: ads\n", "", "", ""), 403, "forbidden", &["metadata.namespace", "ads"]),
        refused(
            Alice,
            &kube("  labels: { fairway.dev/user: bob }\n", "", "", ""),
            403,
            "forbidden",
            &["fairway.dev/user", "bob"],
        ),
        invalid(Alice, &kube("  labels: { fairway.dev/usr: bob }\n", "", "", ""), &["fairway.dev/usr"]),
        invalid(Alice, &kube("", "  parallelism: 0\n", "", ""), &["spec.parallelism"]),
        invalid(
            Alice,
            &kube("  annotations: { fairway.dev/preemptible: maybe }\n", "", "", ""),
            &["metadata.annotations[\"fairway.dev/preemptible\"]"],
        ),
        refused(
            Alice,
            &kube("", "", "      nodeSelector: { nvidia.com/gpu.product: H100 }\n", ""),
            422,
            "unschedulable",
            &["nodeSelector[\"nvidia.com/gpu.product\"]", "H100", "A100"],
        ),
        invalid(
            Alice,
            &kube("", "", "", "").replace(
                "limits: { nvidia.com/gpu: 1 }",
                "limits: { nvidia.com/gpu: 2 }, requests: { nvidia.com/gpu: 1 }",
            ),
            &["nvidia.com/gpu"],
        ),
        invalid(Alice, &kube("", "  backoffLimit: 101\n", "", ""), &["spec.backoffLimit"]),
        invalid(Alice, &kube("", "  activeDeadlineSeconds: -3\n", "", ""), &["spec.activeDeadlineSeconds"]),
        invalid(Alice, &kube("", "", "      priorityClassName: urgent\n", ""), &["priorityClassName", "urgent"]),
        refused(
            Alice,
            &kube("", "", "      priorityClassName: critical\n", ""),
            403,
            "forbidden",
            &["priorityClassName"],
        ),
        invalid(
            Alice,
            &kube("", "", "      terminationGracePeriodSeconds: x\n", ""),
            &["terminationGracePeriodSeconds"],
        ),
        invalid(
            Alice,
            &kube("", "", "", "").replace("nvidia.com/gpu: 1", "nvidia.com/gpu: -1"),
            &["containers[0].resources.limits[\"nvidia.com/gpu\"]"],
        ),
        invalid(Alice, &kube("", "", "", "").replace("        image: pytorch/pytorch\n", ""), &["containers[0].image"]),
        invalid(
            Alice,
            &kube("", "", "", "").replace("image: pytorch/pytorch", "image: \"--privileged\""),
            &["containers[0].image"],
        ),
        invalid(
            Alice,
            &kube("", "", "", "").replace("        command: [python]\n", "        args: [train.py]\n"),
            &["args"],
        ),
        invalid(Alice, &kube("", "", "", "        workingDir: relative\n"), &["workingDir"]),
        invalid(
            Alice,
            &kube(
                "",
                "",
                "",
                "        env: [{ name: A, value: \"1\" }, { name: A, value: \"2\" }, { name: B, value: 3 }]\n",
            ),
            &["env[1]", "env[2]"],
        ),
        invalid(
            Alice,
            &kube("", "", "", "").replace("limits: { nvidia.com/gpu: 1 }", "limits: { nvidia.com/gpu: 1, cpu: lots }"),
            &["cpu"],
        ),
        invalid(Alice, &kube("", "", "", "").replace("spec:\n  template", "spec: 5\nx:\n  template"), &["spec"]),
        // ---- priority classes ----------------------------------------------------------
        refused(Alice, &kube_class("mine", "value: 1000\n"), 403, "forbidden", &["metadata.name", "admin"]),
        invalid(Admin, &kube_class("huge", "value: 2000000000\n"), &["value", "1000000000"]),
        invalid(Admin, &kube_class("novalue", ""), &["value"]),
        invalid(Admin, &kube_class("high", "value: 5\n"), &["high"]),
        invalid(Admin, &kube_class("Bad_Name", "value: 5\n"), &["metadata.name"]),
        invalid(Admin, &kube_class("p", "value: 5\npreemptionPolicy: Maybe\n"), &["preemptionPolicy"]),
        invalid(Admin, "{ apiVersion: fairway/v1, kind: PriorityClass, name: c, valu: 5 }\n", &["valu"]),
        invalid(
            Admin,
            &format!(
                "{}---\n{}",
                kube_class("d1", "value: 5\nglobalDefault: true\n"),
                kube_class("d2", "value: 6\nglobalDefault: true\n")
            ),
            &["globalDefault"],
        ),
        // ---- query parameters -----------------------------------------------------------
        get(Alice, "/v1/jobs?limit=abc", 400, "bad_request", &["query parameter limit"]),
        get(Alice, "/v1/jobs?limit=0", 400, "bad_request", &["limit"]),
        get(Alice, "/v1/jobs?limit=-1", 400, "bad_request", &["query parameter limit", "negative"]),
        get(Alice, "/v1/jobs?limit=99999999999", 400, "bad_request", &["query parameter limit", "too large"]),
        get(Alice, "/v1/jobs?state=running,bogus", 400, "bad_request", &["query parameter state", "bogus"]),
        get(Alice, "/v1/jobs?priority_min=-abc", 400, "bad_request", &["query parameter priority_min", "-abc"]),
        get(Alice, "/v1/jobs?state=sleeping", 400, "bad_request", &["state", "sleeping"]),
        get(Alice, "/v1/jobs?color=red", 400, "bad_request", &["color"]),
        get(Alice, "/v1/jobs?cursor=x", 400, "bad_request", &["query parameter cursor"]),
        get(Alice, "/v1/jobs?priority_min=high", 400, "bad_request", &["query parameter priority_min"]),
        get(Alice, "/v1/jobs?project=ads", 403, "forbidden", &["query parameter project", "ads"]),
        get(
            Alice,
            format!("/v1/jobs/{sleeper}/logs?replica=2"),
            400,
            "bad_request",
            &["query parameter replica", "2 replicas"],
        ),
        get(Alice, format!("/v1/jobs/{sleeper}/logs?replica=-1"), 400, "bad_request", &["query parameter replica"]),
        get(Alice, format!("/v1/jobs/{sleeper}/logs?tail=many"), 400, "bad_request", &["query parameter tail"]),
        get(Alice, format!("/v1/jobs/{sleeper}/logs?follow=maybe"), 400, "bad_request", &["query parameter follow"]),
        get(Alice, format!("/v1/jobs/{sleeper}/logs?lines=5"), 400, "bad_request", &["lines"]),
        // ---- path ids -------------------------------------------------------------------
        get(Alice, "/v1/jobs/abc", 400, "bad_request", &["id", "abc"]),
        get(Alice, "/v1/jobs/0", 400, "bad_request", &["id", "\"0\""]),
        get(Alice, "/v1/jobs/-1", 400, "bad_request", &["id", "-1"]),
        get(Alice, "/v1/jobs/99999999999999999999", 400, "bad_request", &["id"]),
        get(Alice, "/v1/jobs/abc/events", 400, "bad_request", &["id"]),
        get(Alice, "/v1/jobs/0/why", 400, "bad_request", &["id"]),
        get(Alice, "/v1/jobs/999999", 404, "not_found", &["999999"]),
        get(Alice, format!("/v1/jobs/{ads}"), 404, "not_found", &["does not exist"]),
        get(Alice, format!("/v1/jobs/{ads}/logs"), 404, "not_found", &["does not exist"]),
        http(Alice, "DELETE", format!("/v1/jobs/{ads}"), None, 404, "not_found", &["does not exist"]),
        http(Alice, "POST", format!("/v1/jobs/{bobs}/cancel"), None, 403, "forbidden", &["bob", "owner"]),
        http(Viewer, "POST", format!("/v1/jobs/{sleeper}/cancel"), None, 403, "forbidden", &["owner"]),
        http(
            Alice,
            "POST",
            format!("/v1/jobs/{sleeper}/checkpoint"),
            Some(b"{\"at\": 5}"),
            400,
            "bad_request",
            &["at"],
        ),
        http(
            Alice,
            "POST",
            format!("/v1/jobs/{sleeper}/checkpoint"),
            Some(b"{\"at_ms\": -1}"),
            400,
            "bad_request",
            &["at_ms"],
        ),
        http(
            Alice,
            "POST",
            format!("/v1/jobs/{sleeper}/checkpoint"),
            Some(b"{\"at_ms\": \"now\"}"),
            400,
            "bad_request",
            &["at_ms"],
        ),
        // ---- methods, routes, content types, origins --------------------------------------
        http(Alice, "PATCH", "/v1/jobs", None, 405, "method_not_allowed", &["method"]),
        http(Alice, "PUT", format!("/v1/jobs/{sleeper}"), None, 405, "method_not_allowed", &["method"]),
        http(Admin, "DELETE", "/v1/whoami", None, 405, "method_not_allowed", &["method"]),
        http(Admin, "POST", "/v1/quotas", None, 405, "method_not_allowed", &["method"]),
        get(Alice, "/v1/nope", 404, "not_found", &["no such route"]),
        get(Alice, "/", 404, "not_found", &["no such route"]),
        get(Alice, "/v2/jobs", 404, "not_found", &["no such route"]),
        get(Anonymous, "/v1/nope", 401, "unauthenticated", &["bearer token"]),
        // ---- who is asking ---------------------------------------------------------------
        get(Anonymous, "/v1/jobs", 401, "unauthenticated", &["bearer token"]),
        refused(Anonymous, &job(""), 401, "unauthenticated", &["bearer token"]),
        get(Unknown, "/v1/whoami", 401, "unauthenticated", &["not known"]),
        get(Revoked, "/v1/jobs", 401, "unauthenticated", &["revoked"]),
        refused(Revoked, &job(""), 401, "unauthenticated", &["revoked"]),
        refused(Viewer, &job(""), 403, "forbidden", &["viewer"]),
        // ---- quotas --------------------------------------------------------------------
        http(Admin, "PUT", "/v1/quotas/team/x", Some(b"{\"gpus_max\": 1}"), 400, "bad_request", &["kind", "team"]),
        http(Admin, "DELETE", "/v1/quotas/team/x", None, 400, "bad_request", &["kind", "team"]),
        http(Admin, "PUT", "/v1/quotas/project/ads", Some(b"{\"gpu_max\": 4}"), 400, "bad_request", &["gpu_max"]),
        http(Admin, "PUT", "/v1/quotas/project/ads", Some(b"{\"gpus_max\": -1}"), 400, "bad_request", &["gpus_max"]),
        http(
            Admin,
            "PUT",
            "/v1/quotas/project/ads",
            Some(b"{\"gpus_max\": \"four\"}"),
            400,
            "bad_request",
            &["gpus_max"],
        ),
        http(Admin, "PUT", "/v1/quotas/project/ads", Some(b"{\"gpus_max\": 1.5}"), 400, "bad_request", &["gpus_max"]),
        http(
            Admin,
            "PUT",
            "/v1/quotas/project/ads",
            Some(b"{\"gpus_max\": 99999999999}"),
            400,
            "bad_request",
            &["gpus_max"],
        ),
        http(
            Admin,
            "PUT",
            "/v1/quotas/project/ads",
            Some(b"{\"gpus_max\": 1, \"gpus_max\": 2}"),
            400,
            "bad_request",
            &["gpus_max"],
        ),
        http(Admin, "PUT", "/v1/quotas/project/ads", Some(b"[1]"), 400, "bad_request", &["body", "JSON object"]),
        http(Admin, "PUT", "/v1/quotas/project/ads", Some(b"\"x\""), 400, "bad_request", &["body", "JSON object"]),
        http(Admin, "PUT", "/v1/quotas/project/ads", Some(b"{} {}"), 400, "bad_request", &["body"]),
        http(Admin, "PUT", "/v1/quotas/project/ads", Some(b"gpus_max: 3\n"), 400, "bad_request", &["body"]),
        http(Admin, "PUT", "/v1/quotas/project/ads", Some(b"{\"gpus_max\": 3"), 400, "bad_request", &["body"]),
        http(Admin, "PUT", "/v1/quotas/project/ads", None, 400, "bad_request", &["body", "empty"]),
        http(Admin, "PUT", "/v1/quotas/project/", Some(b"{\"gpus_max\": 1}"), 404, "not_found", &["no such route"]),
        http(Admin, "PUT", "/v1/quotas/project/ads", Some(huge_json.as_bytes()), 413, "payload_too_large", &["limit"]),
        get(Alice, "/v1/jobs?limit=", 400, "bad_request", &["query parameter limit"]),
        http(
            Admin,
            "PUT",
            "/v1/quotas/project/has%20space",
            Some(b"{\"gpus_max\": 1}"),
            400,
            "bad_request",
            &["account"],
        ),
        http(Alice, "PUT", "/v1/quotas/project/vision", Some(b"{\"gpus_max\": 8}"), 403, "forbidden", &["admin"]),
        http(Alice, "DELETE", "/v1/quotas/project/ads", None, 403, "forbidden", &["admin"]),
        // ---- fair-share weights --------------------------------------------------------
        http(
            Admin,
            "PUT",
            "/v1/fair-share-weights/project/ads",
            Some(b"{\"weight\": 0}"),
            400,
            "bad_request",
            &["weight", "from 1 to 1000000", "got 0"],
        ),
        http(
            Admin,
            "PUT",
            "/v1/fair-share-weights/user/alice",
            Some(b"{\"weight\": 1000001}"),
            400,
            "bad_request",
            &["weight", "1000001"],
        ),
        http(
            Admin,
            "PUT",
            "/v1/fair-share-weights/project/ads",
            Some(b"{\"weight\": -2}"),
            400,
            "bad_request",
            &["weight"],
        ),
        http(
            Admin,
            "PUT",
            "/v1/fair-share-weights/project/ads",
            Some(b"{\"weight\": 1.5}"),
            400,
            "bad_request",
            &["weight"],
        ),
        http(
            Admin,
            "PUT",
            "/v1/fair-share-weights/project/ads",
            Some(b"{\"wieght\": 2}"),
            400,
            "bad_request",
            &["wieght"],
        ),
        http(Admin, "PUT", "/v1/fair-share-weights/project/ads", None, 400, "bad_request", &["body", "empty"]),
        http(
            Admin,
            "PUT",
            "/v1/fair-share-weights/cohort/lab",
            Some(b"{\"weight\": 2}"),
            400,
            "bad_request",
            &["kind"],
        ),
        http(Admin, "DELETE", "/v1/fair-share-weights/team/x", None, 400, "bad_request", &["kind", "team"]),
        http(
            Alice,
            "PUT",
            "/v1/fair-share-weights/project/vision",
            Some(b"{\"weight\": 9}"),
            403,
            "forbidden",
            &["admin"],
        ),
        http(Viewer, "DELETE", "/v1/fair-share-weights/project/vision", None, 403, "forbidden", &["admin"]),
        // ---- projects ------------------------------------------------------------------
        http(
            Admin,
            "PUT",
            "/v1/projects/vision",
            Some(b"{\"priority_class_max\": \"nope\"}"),
            400,
            "bad_request",
            &["priority_class_max", "nope"],
        ),
        http(
            Admin,
            "PUT",
            "/v1/projects/vision",
            Some(b"{\"priority_class_max\": 5}"),
            400,
            "bad_request",
            &["priority_class_max"],
        ),
        http(Admin, "PUT", "/v1/projects/vision", Some(b"{\"max\": \"high\"}"), 400, "bad_request", &["max"]),
        http(Admin, "PUT", "/v1/projects/has%20space", Some(b"{}"), 400, "bad_request", &["name"]),
        http(
            Alice,
            "PUT",
            "/v1/projects/vision",
            Some(b"{\"priority_class_max\": \"critical\"}"),
            403,
            "forbidden",
            &["admin"],
        ),
        // ---- tokens --------------------------------------------------------------------
        http(Admin, "POST", "/v1/tokens", Some(b"{\"user\": \"\", \"project\": \"p\"}"), 400, "bad_request", &["user"]),
        http(
            Admin,
            "POST",
            "/v1/tokens",
            Some(b"{\"user\": \"u\", \"project\": \"a b\"}"),
            400,
            "bad_request",
            &["project"],
        ),
        http(Admin, "POST", "/v1/tokens", Some(b"{\"user\": \"u\"}"), 400, "bad_request", &["project"]),
        http(
            Admin,
            "POST",
            "/v1/tokens",
            Some(b"{\"user\": \"u\", \"project\": \"p\", \"role\": \"boss\"}"),
            400,
            "bad_request",
            &["role", "boss"],
        ),
        http(
            Admin,
            "POST",
            "/v1/tokens",
            Some(b"{\"user\": \"u\", \"project\": \"p\", \"expires_in_seconds\": 0}"),
            400,
            "bad_request",
            &["expires_in_seconds"],
        ),
        http(
            Admin,
            "POST",
            "/v1/tokens",
            Some(b"{\"user\": \"u\", \"project\": \"p\", \"expires_in_seconds\": -5}"),
            400,
            "bad_request",
            &["expires_in_seconds"],
        ),
        http(
            Admin,
            "POST",
            "/v1/tokens",
            Some(b"{\"user\": \"u\", \"project\": \"p\", \"scope\": \"all\"}"),
            400,
            "bad_request",
            &["scope"],
        ),
        http(Admin, "POST", "/v1/tokens", Some(b"{\"user\": 5, \"project\": \"p\"}"), 400, "bad_request", &["user"]),
        http(Alice, "POST", "/v1/tokens", Some(b"{\"user\": \"u\", \"project\": \"p\"}"), 403, "forbidden", &["admin"]),
        get(Alice, "/v1/tokens", 403, "forbidden", &["admin"]),
        http(Admin, "DELETE", "/v1/tokens/abc", None, 400, "bad_request", &["id", "abc"]),
        http(Admin, "DELETE", "/v1/tokens/0", None, 400, "bad_request", &["id"]),
        http(Admin, "DELETE", "/v1/tokens/999999", None, 404, "not_found", &["999999"]),
        http(Alice, "DELETE", format!("/v1/tokens/{}", fx.admin_token_id), None, 403, "forbidden", &["admin"]),
    ];
    // Content types and origins: the guard refuses before anything is read.
    let with_headers = |method: &'static str,
                        path: &str,
                        body: &[u8],
                        headers: &[(&'static str, &str)],
                        status,
                        code,
                        needles: &[&'static str]| {
        let mut case = http(Alice, method, path, Some(body), status, code, needles);
        case.headers = headers.iter().map(|(k, v)| (*k, (*v).to_owned())).collect();
        case
    };
    let body = job("");
    let host = fx.server.api.base.trim_start_matches("http://").to_owned();
    cases.extend([
        with_headers(
            "POST",
            "/v1/jobs",
            body.as_bytes(),
            &[("content-type", "text/plain")],
            415,
            "unsupported_media_type",
            &["text/plain"],
        ),
        with_headers("POST", "/v1/jobs", body.as_bytes(), &[], 415, "unsupported_media_type", &["Content-Type"]),
        with_headers(
            "POST",
            "/v1/jobs",
            body.as_bytes(),
            &[("content-type", "application/x-www-form-urlencoded")],
            415,
            "unsupported_media_type",
            &["application/x-www-form-urlencoded"],
        ),
        with_headers(
            "PUT",
            "/v1/quotas/project/ads",
            b"gpus_max=9",
            &[("content-type", "multipart/form-data; boundary=x")],
            415,
            "unsupported_media_type",
            &["multipart/form-data"],
        ),
        with_headers(
            "POST",
            "/v1/jobs",
            body.as_bytes(),
            &[("content-type", "application/yaml"), ("origin", "http://evil.example")],
            403,
            "cross_origin",
            &["http://evil.example"],
        ),
        with_headers(
            "POST",
            &format!("/v1/jobs/{sleeper}/cancel"),
            b"",
            &[("origin", &format!("https://{host}.evil.example"))],
            403,
            "cross_origin",
            &["evil.example"],
        ),
        with_headers(
            "DELETE",
            &format!("/v1/jobs/{sleeper}"),
            b"",
            &[("sec-fetch-site", "cross-site")],
            403,
            "cross_origin",
            &["cross-site"],
        ),
        with_headers(
            "POST",
            "/v1/jobs",
            body.as_bytes(),
            &[("content-type", "application/yaml"), ("origin", "null")],
            403,
            "cross_origin",
            &["null"],
        ),
    ]);
    cases
}

fn cli_cases(fx: &Fixture) -> Vec<CliCase> {
    use Who::*;
    let sleeper = fx.sleeper.to_string();
    let dir = fx.dir.path();
    let empty = dir.join("empty.yaml").display().to_string();
    let blank = dir.join("blank.yaml").display().to_string();
    let bad = dir.join("bad.yaml").display().to_string();
    let missing = dir.join("missing.yaml").display().to_string();
    let folder = dir.display().to_string();
    vec![
        // ---- usage errors (clap and the CLI's own checks): exit 2 ------------------------
        cli(Admin, &["ls", "--bogus"], 2, &["--bogus"]),
        cli(Admin, &["launch"], 2, &["launch"]),
        cli(Admin, &["--server", "not a url", "ls"], 2, &["--server", "not a url"]),
        cli(Admin, &["--server", "ftp://example.com", "ls"], 2, &["--server", "http://"]),
        cli(Admin, &["--server", "http://", "ls"], 2, &["--server"]),
        cli(Admin, &["--server", "localhost:7733", "whoami"], 2, &["--server"]),
        cli(Admin, &["submit"], 2, &["--file"]),
        cli(Admin, &["ls", "--state", "sleeping"], 2, &["--state", "sleeping"]),
        cli(Admin, &["ls", "--limit", "abc"], 2, &["--limit", "abc"]),
        cli(Admin, &["ls", "--limit", "-1"], 2, &["--limit", "between 1 and"]),
        cli(Admin, &["ls", "--limit", "0"], 2, &["--limit", "between 1 and"]),
        cli(Admin, &["ls", "--cursor", "soon"], 2, &["--cursor", "soon"]),
        cli(Admin, &["ls", "-A", "--state", "failed"], 2, &["--state"]),
        cli(Admin, &["ls", "-o", "xml"], 2, &["--output", "xml"]),
        cli(Admin, &["logs"], 2, &["<JOB>"]),
        cli(Admin, &["logs", &sleeper, "--tail", "-5"], 2, &["--tail"]),
        cli(Admin, &["logs", &sleeper, "--replica", "one"], 2, &["--replica", "one"]),
        cli(Admin, &["token", "create", "--user", "u", "--project", "p", "--role", "boss"], 2, &["--role", "boss"]),
        cli(
            Admin,
            &["token", "create", "--user", "u", "--project", "p", "--expires-in", "5w"],
            2,
            &["--expires-in", "5w", "unit"],
        ),
        cli(Admin, &["token", "create", "--user", "u", "--project", "p", "--expires-in", "0"], 2, &["--expires-in"]),
        cli(Admin, &["token", "create", "--project", "p"], 2, &["--user"]),
        cli(Admin, &["token", "revoke", "abc"], 2, &["<ID>", "abc"]),
        cli(Admin, &["quota", "set", "team", "x", "--gpus", "1"], 2, &["team", "user", "project"]),
        cli(Admin, &["quota", "set", "project", "x", "--gpus", "-1"], 2, &["--gpus", "between 0 and"]),
        cli(Admin, &["quota", "set", "project", "x", "--memory-mib", "-1"], 2, &["--memory-mib", "-1"]),
        cli(Admin, &["token", "revoke", "-3"], 1, &["id", "-3"]),
        cli(Admin, &["quota", "set", "project", "x", "--gpus", "four"], 2, &["--gpus", "four"]),
        cli(Admin, &["quota", "delete", "team", "x"], 2, &["team"]),
        cli(Admin, &["quota", "weight", "team", "x", "2"], 2, &["team"]),
        cli(Admin, &["quota", "weight", "project", "x", "two"], 2, &["two"]),
        cli(Admin, &["quota", "weight", "project", "x", "-1"], 2, &["-1"]),
        cli(Admin, &["quota", "weight", "project", "x"], 2, &["<WEIGHT>"]),
        cli(Admin, &["quota", "set", "project", "", "--gpus", "1"], 2, &["<ACCOUNT>"]),
        cli(Admin, &["quota", "delete", "user", ""], 2, &["<ACCOUNT>"]),
        cli(Admin, &["quota", "weight", "project", "", "2"], 2, &["<ACCOUNT>"]),
        cli(Admin, &["quota", "cohort", "set", "", "--member", "vision:1"], 2, &["<NAME>"]),
        cli(Admin, &["quota", "cohort", "delete", ""], 2, &["<NAME>"]),
        cli(Admin, &["project", "set", "", "--priority-class-max", "high"], 2, &["<NAME>"]),
        cli(Admin, &["--token", "x", "--token-file", "/tmp/t", "whoami"], 2, &["--token"]),
        cli(Admin, &["completions", "tcsh"], 2, &["tcsh"]),
        // ---- refused requests and inputs the CLI cannot read: exit 1 ---------------------
        cli(Admin, &["submit", "-f", &missing], 1, &["missing.yaml"]),
        cli(Admin, &["submit", "-f", &empty], 1, &["empty.yaml", "empty"]),
        cli(Admin, &["submit", "-f", &blank], 1, &["blank.yaml", "empty"]),
        cli(Admin, &["submit", "-f", &folder], 1, &["cannot read"]),
        cli_stdin(Admin, &["submit", "-f", "-"], "", 1, &["stdin", "empty"]),
        cli(Admin, &["submit", "-f", &bad], 1, &["input: invalid YAML"]),
        cli_stdin(Alice, &["submit", "-f", "-"], &job("priority: critical\n"), 1, &["priority", "high"]),
        cli_stdin(Alice, &["submit", "-f", "-"], &job_resources("{ gpus: 0 }"), 1, &["resources.gpus"]),
        cli_stdin(
            Alice,
            &["submit", "-f", "-"],
            &job("env: { CUDA_VISIBLE_DEVICES: \"0\", EPOCHS: 3 }\n"),
            1,
            &["env.CUDA_VISIBLE_DEVICES", "env.EPOCHS"],
        ),
        cli_stdin(Alice, &["submit", "-f", "-"], &job("image: \"--privileged\"\n"), 1, &["image", "--privileged"]),
        cli(Admin, &["logs", "sleeper", "--replica", "5"], 1, &["replica", "2 replicas"]),
        cli(Admin, &["cancel", "nope"], 1, &["nope"]),
        cli(Admin, &["cancel", "twin"], 1, &["twin", "2 jobs"]),
        cli(Admin, &["describe", "twin"], 1, &["twin", "2 jobs"]),
        cli(Admin, &["cancel", ""], 1, &["empty"]),
        cli(Admin, &["describe", "999999"], 1, &["999999"]),
        cli(Admin, &["describe", "0"], 1, &["id", "\"0\""]),
        cli(Admin, &["why", "job/"], 1, &["empty"]),
        cli(Alice, &["describe", "adsjob"], 1, &["adsjob"]),
        cli(Alice, &["cancel", &fx.ads.to_string()], 1, &["does not exist"]),
        cli(Alice, &["cancel", "bobs"], 1, &["bob", "owner"]),
        cli(Alice, &["ls", "--project", "ads"], 1, &["project", "ads"]),
        cli(Admin, &["token", "create", "--user", "", "--project", "p"], 1, &["user"]),
        cli(Alice, &["token", "create", "--user", "u", "--project", "p"], 1, &["admin"]),
        cli(Admin, &["token", "revoke", "999999"], 1, &["999999"]),
        cli(Admin, &["project", "set", "vision", "--priority-class-max", "nope"], 1, &["priority_class_max", "nope"]),
        cli(Alice, &["quota", "set", "project", "vision", "--gpus", "8"], 1, &["admin"]),
        cli(Alice, &["quota", "weight", "project", "vision", "8"], 1, &["admin"]),
        cli(Admin, &["quota", "weight", "project", "x", "0"], 1, &["weight", "got 0"]),
        cli(Admin, &["quota", "cohort", "set", "lab", "--member", "vision:4:lend=1:lend=2"], 1, &["lend", "twice"]),
        cli(
            Admin,
            &["quota", "cohort", "set", "a b", "--member", "vision:4"],
            1,
            &["name: must not contain whitespace", "\"a b\""],
        ),
        cli(Anonymous, &["whoami"], 1, &["token"]),
        cli(Anonymous, &["ui"], 1, &["token"]),
        cli(Unknown, &["whoami"], 1, &["not known"]),
        cli(Revoked, &["ui"], 1, &["revoked"]),
        cli(Revoked, &["ls"], 1, &["revoked"]),
        cli(Admin, &["--token", "not-a-token", "whoami"], 1, &["Authorization"]),
        cli(Anonymous, &["--token-file", &missing, "whoami"], 1, &["missing.yaml"]),
        cli(Admin, &["--ca-cert", &missing, "whoami"], 1, &["--ca-cert"]),
        cli_stdin(Anonymous, &["login"], "hunter2\n", 1, &["not a Fairway token"]),
        cli_stdin(Anonymous, &["login"], &format!("fwt_{}\n", "0".repeat(64)), 1, &["not known"]),
        cli(Anonymous, &["--token-file", &missing, "login"], 1, &["missing.yaml"]),
        cli(Admin, &["--server", "http://127.0.0.1:9", "ls"], 1, &["cannot reach", "127.0.0.1:9"]),
    ]
}

fn unchanged(before: &Value, after: &Value) -> Result<(), String> {
    if before == after { Ok(()) } else { Err(format!("state changed:\n before {before}\n after  {after}")) }
}

#[test]
fn every_bad_input_is_refused_clearly_and_changes_nothing() {
    let fx = setup();
    let admin = &fx.server.api;
    // CATALOGUE_SHOW=1 prints what every case said, to read the messages.
    let show = std::env::var_os("CATALOGUE_SHOW").is_some();
    let mut failures = Vec::new();
    let http = http_cases(&fx);
    for (i, case) in http.iter().enumerate() {
        let before = snapshot(admin);
        let result = run_http(&fx, case);
        let after = snapshot(admin);
        match result.and_then(|said| unchanged(&before, &after).map(|()| said)) {
            Ok(said) if show => eprintln!("HTTP case {i}: {}\n  {said}\n", case.label()),
            Ok(_) => {}
            Err(e) => failures.push(format!("HTTP case {i}: {}\n  {e}", case.label())),
        }
    }
    let cli = cli_cases(&fx);
    for (i, case) in cli.iter().enumerate() {
        let before = snapshot(admin);
        let result = run_cli(&fx, case);
        let after = snapshot(admin);
        let label = format!("CLI case {i}: {:?} {:?} stdin {:?}", case.who, case.args, case.stdin);
        match result.and_then(|said| unchanged(&before, &after).map(|()| said)) {
            Ok(said) if show => eprintln!("{label}\n  {said}\n"),
            Ok(_) => {}
            Err(e) => failures.push(format!("{label}\n  {e}")),
        }
    }
    assert!(http.len() >= 60 && cli.len() >= 30, "{} HTTP and {} CLI cases", http.len(), cli.len());
    assert!(
        failures.is_empty(),
        "{} of {} HTTP and {} CLI cases failed:\n\n{}",
        failures.len(),
        http.len(),
        cli.len(),
        failures.join("\n\n")
    );
}
