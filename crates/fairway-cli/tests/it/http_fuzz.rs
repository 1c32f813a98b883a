//! What fuzzing the HTTP API against `docs/openapi.yaml` found (Schemathesis,
//! `scripts/fuzz-http`; the log is in `fuzz/README.md`), kept as tests.

use std::collections::{BTreeMap, BTreeSet};

use fairway_server::api::{JobState, TokenCreated};
use serde_json::{Value, json};

use crate::server::{Api, InProcess};

/// The status codes the OpenAPI document lists, by `(method, path)` as in `http::ROUTES`.
fn documented_statuses() -> BTreeMap<(String, String), BTreeSet<u16>> {
    let doc: Value = serde_saphyr::from_str(fairway_server::http::OPENAPI).expect("the OpenAPI document is YAML");
    let mut statuses = BTreeMap::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for (method, operation) in item.as_object().expect("a path item") {
            let Some(responses) = operation.get("responses").and_then(Value::as_object) else { continue };
            let codes = responses.keys().map(|code| code.parse::<u16>().expect("a status code")).collect();
            statuses.insert((method.clone(), path.clone()), codes);
        }
    }
    statuses
}

/// A token made by the admin.
fn token(api: &Api, user: &str, project: &str, role: &str) -> TokenCreated {
    let body = json!({"user": user, "project": project, "role": role}).to_string();
    let (status, answer) = api.json("POST", "/v1/tokens", Some(&body));
    assert_eq!(status, 201, "{answer}");
    serde_json::from_value(answer).unwrap()
}

/// The fuzzer's first finding: answers the server gives on every route (401 without a
/// token, 403 for a role or another origin, 415 for a form body, 413 for a large body, 409
/// for a checkpoint of a finished job) that the document did not list. Each is asked for
/// here, and must be both what the server answers and what the document says it may.
#[test]
fn every_status_the_server_answers_is_in_the_openapi_document() {
    let server = InProcess::start("4", "");
    let admin = &server.api;
    let documented = documented_statuses();
    let anonymous = Api::new(admin.base.clone(), None);
    let viewer = admin.as_token(&token(admin, "carol", "vision", "viewer").secret);
    let alice = admin.as_token(&token(admin, "alice", "vision", "submitter").secret);
    // A finished job of alice's project, which the viewer may see but not change.
    let spec = "name: done\ntenant: { user: alice, project: vision }\nresources: { gpus: 1 }\ncommand: [\"true\"]\n";
    let done = admin.submit(spec)[0];
    admin.wait_state(done, JobState::Succeeded);

    let concrete = |path: &str| {
        path.replace("/v1/tokens/{id}", "/v1/tokens/999")
            .replace("{id}", &done.to_string())
            .replace("{kind}/{account}", "project/vision")
            .replace("{name}", "vision")
    };
    let json_type: &[(&str, &str)] = &[("content-type", "application/json")];
    let form: &[(&str, &str)] = &[("content-type", "application/x-www-form-urlencoded")];
    let other_origin: &[(&str, &str)] = &[("content-type", "application/json"), ("origin", "http://evil.example")];
    let empty = || Some(b"{}".to_vec());
    let mut cases: Vec<Case> = Vec::new();
    for &(method, path) in fairway_server::http::ROUTES {
        let changes = matches!(method, "post" | "put" | "delete");
        let url = concrete(path);
        if !["/healthz", "/openapi.yaml"].contains(&path) {
            let body = if changes { empty() } else { None };
            cases.push(Case { api: &anonymous, method, path, url: url.clone(), body, headers: json_type, want: 401 });
        }
        if changes {
            let body = Some(b"a=b".to_vec());
            cases.push(Case { api: admin, method, path, url: url.clone(), body, headers: form, want: 415 });
            cases.push(Case { api: admin, method, path, url, body: empty(), headers: other_origin, want: 403 });
        }
    }
    // What a role may not do.
    for (method, path) in [
        ("get", "/v1/tokens"),
        ("post", "/v1/tokens"),
        ("delete", "/v1/tokens/{id}"),
        ("put", "/v1/quotas/{kind}/{account}"),
        ("delete", "/v1/quotas/{kind}/{account}"),
        ("put", "/v1/fair-share-weights/{kind}/{account}"),
        ("delete", "/v1/fair-share-weights/{kind}/{account}"),
        ("put", "/v1/projects/{name}"),
        ("put", "/v1/cohorts/{name}"),
        ("delete", "/v1/cohorts/{name}"),
        ("post", "/v1/jobs"),
        ("post", "/v1/jobs/{id}/cancel"),
        ("delete", "/v1/jobs/{id}"),
        ("post", "/v1/jobs/{id}/checkpoint"),
    ] {
        let body = if method == "get" { None } else { empty() };
        cases.push(Case { api: &viewer, method, path, url: concrete(path), body, headers: json_type, want: 403 });
    }
    let url = "/v1/jobs?project=ads".to_owned();
    cases.push(Case { api: &alice, method: "get", path: "/v1/jobs", url, body: None, headers: &[], want: 403 });
    // Bodies over the limit, on every route that reads one.
    for (method, path) in [
        ("post", "/v1/jobs"),
        ("post", "/v1/jobs/{id}/checkpoint"),
        ("put", "/v1/quotas/{kind}/{account}"),
        ("put", "/v1/projects/{name}"),
        ("put", "/v1/cohorts/{name}"),
        ("post", "/v1/tokens"),
    ] {
        let body = Some(vec![b' '; (1 << 20) + 1]);
        cases.push(Case { api: admin, method, path, url: concrete(path), body, headers: json_type, want: 413 });
    }
    // A checkpoint of a finished job.
    let (method, path) = ("post", "/v1/jobs/{id}/checkpoint");
    cases.push(Case { api: admin, method, path, url: concrete(path), body: empty(), headers: json_type, want: 409 });

    for case in cases {
        let Case { api, method, path, url, body, headers, want } = case;
        let (status, answer) = api.request_with(&method.to_uppercase(), &url, body, headers);
        let answer = String::from_utf8_lossy(&answer);
        assert_eq!(status, want, "{method} {url}: {answer}");
        let error: Value = serde_json::from_str(&answer).unwrap_or(Value::Null);
        let shaped = error["error"]["code"].is_string() && error["error"]["message"].is_string();
        assert!(shaped, "{method} {url}: not an ErrorBody: {answer}");
        let listed = &documented[&(method.to_owned(), path.to_owned())];
        assert!(listed.contains(&status), "{method} {path} answers {status}, which docs/openapi.yaml does not list");
    }
}

/// One request of the table above: `path` as the document names it, `url` as sent.
struct Case<'a> {
    api: &'a Api,
    method: &'a str,
    path: &'a str,
    url: String,
    body: Option<Vec<u8>>,
    headers: &'a [(&'a str, &'a str)],
    want: u16,
}

/// A token created without a name is labelled `<user>@<project>`; with long names that
/// label was longer than a name may be, and the request was refused for a `name` the caller
/// never gave. The label is now cut to 253 bytes, on a character boundary.
#[test]
fn a_token_for_long_names_gets_its_default_label_cut() {
    let server = InProcess::start("1", "");
    let admin = &server.api;
    let user = "u".repeat(200);
    let project = "€".repeat(80);
    let created = token(admin, &user, &project, "viewer");
    // 201 bytes of "u…@", then as many 3-byte "€" as fit in the 52 bytes left.
    assert_eq!(created.token.name, format!("{user}@{}", "€".repeat(17)));
    assert_eq!(created.token.project, project);
    let (status, me) = admin.as_token(&created.secret).json("GET", "/v1/whoami", None);
    assert_eq!((status, me["token_name"].as_str()), (200, Some(created.token.name.as_str())), "{me}");
    // A name the caller gives is still held to the limit, and the error names it.
    let long = json!({"user": "a", "project": "b", "name": "n".repeat(254)}).to_string();
    let (status, err) = admin.json("POST", "/v1/tokens", Some(&long));
    assert_eq!(status, 400, "{err}");
    assert!(err["error"]["message"].as_str().unwrap().starts_with("name: "), "{err}");
}
