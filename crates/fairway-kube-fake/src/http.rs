//! The REST surface: paths (`/api/v1/...`, `/apis/{group}/{version}/...`, namespaced and
//! all-namespaces), verbs, query parameters, bodies, and the responses and `Status` errors
//! of the real server; discovery (`/api`, `/apis`, the aggregated form too) and `/version`.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::Response;
use base64::Engine;
use serde_json::{Value, json};

use crate::errors::ApiError;
use crate::kinds::Kind;
use crate::ops::{DeleteOpts, ListReq, Sub};
use crate::patch::PatchType;
use crate::select::{FieldSelector, LabelSelector};
use crate::store::{Key, Obj};
use crate::watch::{self, WatchReq};
use crate::{Shared, WriteVerb, api};

pub(crate) fn router(shared: Arc<Shared>) -> Router {
    Router::new().fallback(handle).with_state(shared)
}

async fn handle(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    match dispatch(&shared, request).await {
        Ok(response) => response,
        Err(e) => error_response(&e),
    }
}

pub(crate) fn error_response(e: &ApiError) -> Response {
    let body = serde_json::to_vec(&e.status()).expect("JSON");
    let mut response =
        json_response(StatusCode::from_u16(e.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR), body.into());
    if let Some(seconds) = e.retry_after
        && let Ok(v) = HeaderValue::from_str(&seconds.to_string())
    {
        response.headers_mut().insert(header::RETRY_AFTER, v);
    }
    response
}

fn json_response(code: StatusCode, body: Bytes) -> Response {
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = code;
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

fn value_response(code: StatusCode, v: &Value) -> Response {
    json_response(code, serde_json::to_vec(v).expect("JSON").into())
}

fn obj_response(code: StatusCode, obj: &Obj) -> Response {
    json_response(code, obj.json.clone())
}

fn success(code: u16) -> Response {
    value_response(
        StatusCode::from_u16(code).unwrap_or(StatusCode::OK),
        &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": code}),
    )
}

/// A request on a resource.
struct Target {
    kind: Kind,
    ns: Option<String>,
    name: Option<String>,
    sub: Option<String>,
    /// POST /api/v1/namespaces/{ns}/bindings (the older form of pods/binding).
    legacy_binding: bool,
}

enum Route {
    Version,
    Health,
    CoreVersions,
    CoreResources,
    Groups,
    Group(String),
    GroupResources(String, String),
    Resource(Target),
}

fn route(shared: &Shared, path: &str) -> Option<Route> {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    match segments.as_slice() {
        ["version"] => Some(Route::Version),
        ["healthz" | "livez" | "readyz"] => Some(Route::Health),
        ["api"] => Some(Route::CoreVersions),
        ["api", "v1"] => Some(Route::CoreResources),
        ["api", "v1", rest @ ..] => resource(shared, "", "v1", rest),
        ["apis"] => Some(Route::Groups),
        ["apis", g] => served_groups(shared).iter().any(|(x, _)| x == g).then(|| Route::Group((*g).to_owned())),
        ["apis", g, v] => served_groups(shared)
            .iter()
            .any(|(x, y)| x == g && y == v)
            .then(|| Route::GroupResources((*g).to_owned(), (*v).to_owned())),
        ["apis", g, v, rest @ ..] => resource(shared, g, v, rest),
        _ => None,
    }
}

fn served(shared: &Shared, kind: Kind) -> bool {
    kind != Kind::PaddleJob || shared.config.paddlejobs
}

fn resource(shared: &Shared, group: &str, version: &str, rest: &[&str]) -> Option<Route> {
    let find = |plural: &str| Kind::find(group, version, plural).filter(|k| served(shared, *k));
    if rest.len() >= 3 && rest[0] == "namespaces" {
        if group.is_empty() && rest[2] == "bindings" && rest.len() == 3 {
            return Some(Route::Resource(Target {
                kind: Kind::Pod,
                ns: Some(rest[1].to_owned()),
                name: None,
                sub: Some("binding".into()),
                legacy_binding: true,
            }));
        }
        if let Some(kind) = find(rest[2]).filter(|k| k.info().namespaced) {
            if rest.len() > 5 {
                return None;
            }
            return Some(Route::Resource(Target {
                kind,
                ns: Some(rest[1].to_owned()),
                name: rest.get(3).map(|s| (*s).to_owned()),
                sub: rest.get(4).map(|s| (*s).to_owned()),
                legacy_binding: false,
            }));
        }
    }
    let kind = find(rest.first()?)?;
    if rest.len() > 3 || (kind.info().namespaced && rest.len() > 1) {
        return None;
    }
    Some(Route::Resource(Target {
        kind,
        ns: None,
        name: rest.get(1).map(|s| (*s).to_owned()),
        sub: rest.get(2).map(|s| (*s).to_owned()),
        legacy_binding: false,
    }))
}

#[derive(Default)]
struct Query {
    watch: bool,
    labels: Option<String>,
    fields: Option<String>,
    limit: Option<usize>,
    cont: Option<String>,
    rv: Option<String>,
    rv_match: Option<String>,
    timeout: Option<u64>,
    bookmarks: bool,
    initial_events: bool,
    grace: Option<i64>,
    propagation: Option<String>,
    dry_run: bool,
}

fn parse_query(text: Option<&str>) -> Result<Query, ApiError> {
    let mut q = Query::default();
    let truthy = |v: &str| matches!(v, "true" | "1" | "True");
    for (k, v) in form_urlencoded::parse(text.unwrap_or_default().as_bytes()) {
        let number = |what: &str| -> Result<u64, ApiError> {
            v.parse().map_err(|_| ApiError::bad_request(format!("invalid {what}: {v:?} is not a number")))
        };
        match k.as_ref() {
            "watch" => q.watch = truthy(&v),
            "labelSelector" => q.labels = Some(v.into_owned()),
            "fieldSelector" => q.fields = Some(v.into_owned()),
            "limit" => q.limit = Some(number("limit")? as usize).filter(|l| *l > 0),
            "continue" => q.cont = Some(v.into_owned()).filter(|c| !c.is_empty()),
            "resourceVersion" => q.rv = Some(v.into_owned()),
            "resourceVersionMatch" => q.rv_match = Some(v.into_owned()).filter(|m| !m.is_empty()),
            "timeoutSeconds" => q.timeout = Some(number("timeoutSeconds")?),
            "allowWatchBookmarks" => q.bookmarks = truthy(&v),
            "sendInitialEvents" => q.initial_events = truthy(&v),
            "gracePeriodSeconds" => {
                q.grace =
                    Some(v.parse().map_err(|_| ApiError::bad_request(format!("invalid gracePeriodSeconds: {v:?}")))?)
            }
            "propagationPolicy" => q.propagation = Some(v.into_owned()),
            "dryRun" => q.dry_run = !v.is_empty(),
            _ => {}
        }
    }
    Ok(q)
}

fn parse_rv(text: &str) -> Result<u64, ApiError> {
    text.parse().map_err(|_| ApiError::bad_request(format!("invalid resource version: {text:?}")))
}

#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct ContinueToken {
    v: String,
    rv: u64,
    ns: String,
    name: String,
}

fn encode_continue(rv: u64, key: &Key) -> String {
    let token = ContinueToken { v: "meta.k8s.io/v1".into(), rv, ns: key.ns.clone(), name: key.name.clone() };
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(serde_json::to_vec(&token).expect("JSON"))
}

fn decode_continue(text: &str) -> Result<ContinueToken, ApiError> {
    let bad = |why: String| ApiError::bad_request(format!("continue key is not valid: {why}"));
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(text.trim_end_matches('='))
        .map_err(|e| bad(e.to_string()))?;
    serde_json::from_slice(&bytes).map_err(|e| bad(e.to_string()))
}

/// Reads a request body as JSON (or YAML, which server-side apply sends).
fn parse_body(bytes: &[u8], content_type: &str) -> Result<Value, ApiError> {
    if bytes.is_empty() {
        return Ok(Value::Null);
    }
    match serde_json::from_slice(bytes) {
        Ok(v) => Ok(v),
        Err(e) if content_type.contains("yaml") => {
            let text = std::str::from_utf8(bytes).map_err(|_| ApiError::bad_request("the body is not UTF-8"))?;
            serde_saphyr::from_str::<Value>(text)
                .map_err(|y| ApiError::bad_request(format!("the body is not valid YAML: {y} ({e})")))
        }
        Err(e) => Err(ApiError::bad_request(format!("the body of the request is not valid JSON: {e}"))),
    }
}

fn header_str(headers: &HeaderMap, name: header::HeaderName) -> &str {
    headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or_default()
}

async fn dispatch(shared: &Arc<Shared>, request: Request) -> Result<Response, ApiError> {
    let (parts, body) = request.into_parts();
    let path = parts.uri.path().to_owned();
    let Some(route) = route(shared, &path) else {
        return Err(ApiError::not_served(&path));
    };
    let aggregated = header_str(&parts.headers, header::ACCEPT).contains("as=APIGroupDiscoveryList");
    let target = match route {
        Route::Version => return Ok(value_response(StatusCode::OK, &crate::discovery::version())),
        Route::Health => return Ok(json_response(StatusCode::OK, Bytes::from_static(b"ok"))),
        Route::CoreVersions if aggregated => return Ok(crate::discovery::aggregated(shared, true)),
        Route::CoreVersions => return Ok(value_response(StatusCode::OK, &crate::discovery::core_versions(shared))),
        Route::CoreResources => {
            return Ok(value_response(StatusCode::OK, &crate::discovery::resources(shared, "", "v1")));
        }
        Route::Groups if aggregated => return Ok(crate::discovery::aggregated(shared, false)),
        Route::Groups => return Ok(value_response(StatusCode::OK, &crate::discovery::groups(shared))),
        Route::Group(g) => return Ok(value_response(StatusCode::OK, &crate::discovery::group(&g))),
        Route::GroupResources(g, v) => {
            return Ok(value_response(StatusCode::OK, &crate::discovery::resources(shared, &g, &v)));
        }
        Route::Resource(t) => t,
    };
    let query = parse_query(parts.uri.query())?;
    if query.dry_run {
        return Err(ApiError::bad_request("dryRun is not supported by the fake API server"));
    }
    let content_type = header_str(&parts.headers, header::CONTENT_TYPE).to_owned();
    let body = axum::body::to_bytes(body, 64 << 20)
        .await
        .map_err(|e| ApiError::bad_request(format!("cannot read the request body: {e}")))?;
    let kind = target.kind;
    let info = kind.info();
    let resource = match &target.sub {
        Some(sub) => format!("{}/{sub}", info.plural),
        None => info.plural.to_owned(),
    };
    let sub = match target.sub.as_deref() {
        None => Sub::Main,
        Some("status") if info.status => Sub::Status,
        Some("binding" | "eviction") if kind == Kind::Pod => Sub::Main,
        Some(_) => return Err(ApiError::not_served(&path)),
    };
    let ns = target.ns.clone().unwrap_or_default();
    let method = parts.method.clone();
    let verb = match (&method, &target.name, target.sub.as_deref()) {
        (&Method::GET, None, _) if query.watch => "watch",
        (&Method::GET, None, _) => "list",
        (&Method::GET, Some(_), Some("binding" | "eviction")) => {
            return Err(ApiError::method_not_allowed("GET is not allowed here"));
        }
        (&Method::GET, Some(_), _) => "get",
        (&Method::POST, None, Some("binding")) if target.legacy_binding => "create",
        (&Method::POST, None, None) => "create",
        (&Method::POST, Some(_), Some("binding" | "eviction")) => "create",
        (&Method::PUT, Some(_), s) if s != Some("binding") && s != Some("eviction") => "update",
        (&Method::PATCH, Some(_), s) if s != Some("binding") && s != Some("eviction") => "patch",
        (&Method::DELETE, Some(_), None) => "delete",
        (&Method::DELETE, None, None) => "deletecollection",
        _ => return Err(ApiError::method_not_allowed(format!("{method} is not supported on {resource}"))),
    };
    shared.count(verb, &resource);
    let write_verb = match verb {
        "create" => Some(WriteVerb::Create),
        "update" => Some(WriteVerb::Update),
        "patch" => Some(WriteVerb::Patch),
        "delete" | "deletecollection" => Some(WriteVerb::Delete),
        _ => None,
    };
    if let Some(w) = write_verb
        && let Some(e) = shared.take_fault(w, &resource, target.name.as_deref().unwrap_or_default())
    {
        return Err(e);
    }
    let key = |name: &str| Key::new(if info.namespaced { &ns } else { "" }, name);
    match verb {
        "get" => {
            let name = target.name.as_deref().unwrap_or_default();
            let world = shared.lock();
            let obj = world.get(kind, &key(name)).cloned().ok_or_else(|| ApiError::not_found(kind, name))?;
            Ok(obj_response(StatusCode::OK, &obj))
        }
        "list" => list(shared, kind, target.ns.as_deref(), &query),
        "watch" => watch_request(shared, kind, target.ns, &query),
        "create" => {
            let value = parse_body(&body, &content_type)?;
            match target.sub.as_deref() {
                Some("binding") => {
                    let name = target
                        .name
                        .clone()
                        .or_else(|| value.pointer("/metadata/name").and_then(Value::as_str).map(str::to_owned))
                        .unwrap_or_default();
                    shared.lock().bind(&ns, &name, &value)?;
                    Ok(success(201))
                }
                Some(_) => {
                    let name = target.name.as_deref().unwrap_or_default();
                    let opts = value.get("deleteOptions").map(DeleteOpts::from_body).unwrap_or_default();
                    shared.lock().delete(Kind::Pod, &key(name), &opts)?;
                    Ok(success(201))
                }
                None => {
                    let obj = api::create(shared, kind, &ns, value).await?;
                    Ok(obj_response(StatusCode::CREATED, &obj))
                }
            }
        }
        "update" => {
            let name = target.name.as_deref().unwrap_or_default();
            let value = parse_body(&body, &content_type)?;
            let obj = api::update(shared, kind, &key(name), value, sub).await?;
            Ok(obj_response(StatusCode::OK, &obj))
        }
        "patch" => {
            let name = target.name.as_deref().unwrap_or_default();
            let ptype = PatchType::from_content_type(&content_type)
                .ok_or_else(|| ApiError::unsupported_media_type(&content_type))?;
            let value = parse_body(&body, &content_type)?;
            let (obj, created) = api::patch(shared, kind, &key(name), ptype, value, sub).await?;
            Ok(obj_response(if created { StatusCode::CREATED } else { StatusCode::OK }, &obj))
        }
        "delete" => {
            let name = target.name.as_deref().unwrap_or_default();
            let opts = delete_opts(&body, &query)?;
            let (obj, gone) = shared.lock().delete(kind, &key(name), &opts)?;
            Ok(obj_response(if gone { StatusCode::OK } else { StatusCode::ACCEPTED }, &obj))
        }
        _ => {
            let opts = delete_opts(&body, &query)?;
            let labels = LabelSelector::parse(query.labels.as_deref().unwrap_or_default())?;
            let fields = FieldSelector::parse(kind, query.fields.as_deref().unwrap_or_default())?;
            let mut world = shared.lock();
            let page = world.list(
                kind,
                &ListReq {
                    ns: target.ns.as_deref(),
                    labels: &labels,
                    fields: &fields,
                    limit: None,
                    after: None,
                    resource_version: None,
                },
            );
            for obj in page.items {
                let _ = world.delete(kind, &Key::of(&obj.value), &opts);
            }
            Ok(success(200))
        }
    }
}

fn delete_opts(body: &[u8], query: &Query) -> Result<DeleteOpts, ApiError> {
    let mut opts = match parse_body(body, "application/json")? {
        Value::Null => DeleteOpts::default(),
        v => DeleteOpts::from_body(&v),
    };
    if opts.grace.is_none() {
        opts.grace = query.grace;
    }
    if opts.propagation.is_none() {
        opts.propagation = query.propagation.clone();
    }
    Ok(opts)
}

fn list(shared: &Arc<Shared>, kind: Kind, ns: Option<&str>, query: &Query) -> Result<Response, ApiError> {
    let labels = LabelSelector::parse(query.labels.as_deref().unwrap_or_default())?;
    let fields = FieldSelector::parse(kind, query.fields.as_deref().unwrap_or_default())?;
    let token = query.cont.as_deref().map(decode_continue).transpose()?;
    let limit = query.limit.map(|l| l.min(shared.config.list_page_max.max(1)));
    let page = {
        let world = shared.lock();
        if query.rv_match.as_deref() == Some("Exact")
            && let Some(rv) = query.rv.as_deref()
        {
            let rv = parse_rv(rv)?;
            if rv != world.rv {
                return Err(ApiError::gone(format!(
                    "too old resource version: {rv} ({}): the fake serves lists at the current resourceVersion only",
                    world.rv
                )));
            }
        }
        world.list(
            kind,
            &ListReq {
                ns,
                labels: &labels,
                fields: &fields,
                limit,
                after: token.as_ref().map(|t| Key::new(&t.ns, &t.name)),
                resource_version: token.as_ref().map(|t| t.rv),
            },
        )
    };
    let info = kind.info();
    let mut meta = json!({"resourceVersion": page.resource_version.to_string()});
    if let Some(next) = &page.next {
        meta["continue"] = json!(encode_continue(page.resource_version, next));
    }
    if let Some(remaining) = page.remaining {
        meta["remainingItemCount"] = json!(remaining);
    }
    let head = format!(
        "{{\"kind\":\"{}List\",\"apiVersion\":\"{}\",\"metadata\":{},\"items\":[",
        info.kind,
        kind.api_version(),
        serde_json::to_string(&meta).expect("JSON")
    );
    let size = head.len() + page.items.iter().map(|o| o.json.len() + 1).sum::<usize>() + 2;
    let mut out = Vec::with_capacity(size);
    out.extend_from_slice(head.as_bytes());
    for (i, obj) in page.items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(&obj.json);
    }
    out.extend_from_slice(b"]}");
    Ok(json_response(StatusCode::OK, Bytes::from(out)))
}

fn watch_request(shared: &Arc<Shared>, kind: Kind, ns: Option<String>, query: &Query) -> Result<Response, ApiError> {
    let labels = LabelSelector::parse(query.labels.as_deref().unwrap_or_default())?;
    let fields = FieldSelector::parse(kind, query.fields.as_deref().unwrap_or_default())?;
    let since = match query.rv.as_deref() {
        None | Some("") | Some("0") => None,
        Some(rv) if query.initial_events => {
            parse_rv(rv)?;
            None
        }
        Some(rv) => Some(parse_rv(rv)?),
    };
    let timeout = Duration::from_secs(query.timeout.unwrap_or(shared.config.watch_timeout.as_secs()).max(1));
    Ok(watch::start(
        shared.clone(),
        WatchReq {
            kind,
            ns,
            labels,
            fields,
            since,
            bookmarks: query.bookmarks,
            timeout,
            initial_events: query.initial_events,
        },
    ))
}

/// The groups served other than the core one: (group, version).
pub(crate) fn served_groups(shared: &Shared) -> Vec<(String, String)> {
    let mut groups: Vec<(String, String)> = Vec::new();
    for kind in Kind::ALL {
        let info = kind.info();
        if info.group.is_empty() || !served(shared, kind) {
            continue;
        }
        let gv = (info.group.to_owned(), info.version.to_owned());
        if !groups.contains(&gv) {
            groups.push(gv);
        }
    }
    groups
}

pub(crate) fn served_kinds(shared: &Shared) -> Vec<Kind> {
    Kind::ALL.into_iter().filter(|k| served(shared, *k)).collect()
}

/// axum needs the handler's future to be `Send`: no lock guard may live across an await.
/// This fails to compile, naming the guard, when one does.
#[cfg(test)]
#[allow(dead_code)]
fn assert_send(shared: Arc<Shared>, r: Request) {
    fn is_send<T: Send>(_: T) {}
    is_send(dispatch(&shared, r));
    is_send(api::create(&shared, Kind::Pod, "", Value::Null));
    is_send(api::update(&shared, Kind::Pod, &Key::new("", ""), Value::Null, Sub::Main));
    is_send(api::patch(&shared, Kind::Pod, &Key::new("", ""), PatchType::Json, Value::Null, Sub::Main));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continue_tokens_round_trip() {
        let token = encode_continue(42, &Key::new("ns", "a-b"));
        let back = decode_continue(&token).unwrap();
        assert_eq!((back.rv, back.ns.as_str(), back.name.as_str()), (42, "ns", "a-b"));
        assert_eq!(decode_continue("!!").unwrap_err().code, 400);
    }
}
