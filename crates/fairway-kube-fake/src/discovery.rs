//! Discovery documents, from the kinds table: `/api`, `/api/v1`, `/apis`, `/apis/{group}`,
//! `/apis/{group}/{version}`, the aggregated form (`apidiscovery.k8s.io/v2`) when asked for
//! by `Accept`, and `/version`.

use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use serde_json::{Value, json};

use crate::Shared;
use crate::http::{served_groups, served_kinds};
use crate::kinds::Kind;

pub(crate) fn version() -> Value {
    json!({
        "major": "1",
        "minor": "33",
        "emulationMajor": "1",
        "emulationMinor": "33",
        "minCompatibilityMajor": "1",
        "minCompatibilityMinor": "32",
        "gitVersion": "v1.33.0-fairway-fake",
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2025-04-23T00:00:00Z",
        "goVersion": "go1.24.2",
        "compiler": "gc",
        "platform": "linux/amd64",
    })
}

pub(crate) fn core_versions(shared: &Shared) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": shared.addr.to_string()}],
    })
}

fn group_doc(group: &str, version: &str) -> Value {
    let gv = json!({"groupVersion": format!("{group}/{version}"), "version": version});
    json!({"name": group, "versions": [gv], "preferredVersion": gv})
}

pub(crate) fn groups(shared: &Shared) -> Value {
    let groups: Vec<Value> = served_groups(shared).iter().map(|(g, v)| group_doc(g, v)).collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

pub(crate) fn group(group: &str) -> Value {
    let version = Kind::ALL.into_iter().map(Kind::info).find(|i| i.group == group).map_or("v1", |i| i.version);
    let mut doc = group_doc(group, version);
    doc["kind"] = json!("APIGroup");
    doc["apiVersion"] = json!("v1");
    doc
}

/// The subresources of a kind: (name, kind, verbs).
fn subresources(kind: Kind) -> Vec<(&'static str, &'static str, &'static [&'static str])> {
    let mut subs = Vec::new();
    if kind.info().status {
        subs.push(("status", kind.info().kind, &["get", "patch", "update"][..]));
    }
    if kind == Kind::Pod {
        subs.push(("binding", "Binding", &["create"][..]));
        subs.push(("eviction", "Eviction", &["create"][..]));
    }
    subs
}

pub(crate) fn resources(shared: &Shared, group: &str, version: &str) -> Value {
    let mut list = Vec::new();
    for kind in served_kinds(shared) {
        let info = kind.info();
        if info.group != group || info.version != version {
            continue;
        }
        list.push(json!({
            "name": info.plural, "singularName": info.singular, "namespaced": info.namespaced,
            "kind": info.kind, "verbs": info.verbs, "shortNames": info.short_names,
        }));
        for (sub, sub_kind, verbs) in subresources(kind) {
            let mut doc = json!({
                "name": format!("{}/{sub}", info.plural), "singularName": "", "namespaced": info.namespaced,
                "kind": sub_kind, "verbs": verbs,
            });
            if sub == "eviction" {
                doc["group"] = json!("policy");
                doc["version"] = json!("v1");
            }
            list.push(doc);
        }
    }
    let gv = if group.is_empty() { version.to_owned() } else { format!("{group}/{version}") };
    json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": list})
}

/// `APIGroupDiscoveryList` for `/api` (`core`) or `/apis`.
pub(crate) fn aggregated(shared: &Shared, core: bool) -> Response {
    let mut items = Vec::new();
    let groups: Vec<(String, String)> =
        if core { vec![(String::new(), "v1".to_owned())] } else { served_groups(shared) };
    for (group, version) in groups {
        let resources: Vec<Value> = served_kinds(shared)
            .into_iter()
            .filter(|k| k.info().group == group && k.info().version == version)
            .map(|kind| {
                let info = kind.info();
                let gvk = json!({"group": info.group, "version": info.version, "kind": info.kind});
                let subs: Vec<Value> = subresources(kind)
                    .into_iter()
                    .map(|(sub, sub_kind, verbs)| {
                        json!({"subresource": sub, "responseKind": {"group": "", "version": "v1", "kind": sub_kind}, "verbs": verbs})
                    })
                    .collect();
                json!({
                    "resource": info.plural, "responseKind": gvk,
                    "scope": if info.namespaced { "Namespaced" } else { "Cluster" },
                    "singularResource": info.singular, "verbs": info.verbs, "shortNames": info.short_names,
                    "subresources": subs,
                })
            })
            .collect();
        items.push(json!({
            "metadata": {"name": group, "creationTimestamp": null},
            "versions": [{"version": version, "resources": resources, "freshness": "Current"}],
        }));
    }
    let doc = json!({"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2", "metadata": {}, "items": items});
    let mut response = Response::new(Body::from(serde_json::to_vec(&doc).expect("JSON")));
    *response.status_mut() = StatusCode::OK;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"),
    );
    response
}
