//! Watches: a chunked stream of `{"type": …, "object": …}` lines read from the resource's
//! history. Each watch keeps a cursor (the resourceVersion up to which it has sent
//! everything) and reads the shared history under the lock, copying only `Arc`s; the
//! object bytes were serialized once when written. A cursor older than the history's floor
//! gets an `ERROR` event with a 410 Status, as the real server sends for an expired
//! resourceVersion. Bookmarks carry the cursor; one is also sent when `timeoutSeconds`
//! ends the watch.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use serde_json::json;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::Shared;
use crate::errors::ApiError;
use crate::kinds::Kind;
use crate::select::{FieldSelector, LabelSelector};
use crate::store::{Change, EventType, Obj};

/// What fault injection tells open watches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Signal {
    None,
    /// End with an ERROR 410 (their resourceVersion is gone).
    Expire,
    /// Break the connection.
    Drop,
}

pub(crate) struct WatchReq {
    pub kind: Kind,
    pub ns: Option<String>,
    pub labels: LabelSelector,
    pub fields: FieldSelector,
    /// `None`: start with the current objects as ADDED (resourceVersion unset or "0").
    pub since: Option<u64>,
    pub bookmarks: bool,
    pub timeout: Duration,
    /// `sendInitialEvents=true`: a bookmark marks the end of the initial objects.
    pub initial_events: bool,
}

impl WatchReq {
    fn matches(&self, obj: &Obj) -> bool {
        let v = &obj.value;
        if let Some(ns) = &self.ns
            && crate::store::meta_str(v, "namespace") != ns
        {
            return false;
        }
        self.labels.matches_object(v) && self.fields.matches(v)
    }

    /// The event this watch sees for a change, if any (an update leaving the selection is
    /// a DELETED, one entering it an ADDED).
    fn project<'a>(&self, change: &'a Change) -> Option<(EventType, &'a Obj)> {
        let now = self.matches(&change.obj);
        match change.ty {
            EventType::Added => now.then_some((EventType::Added, &change.obj)),
            EventType::Deleted => now.then_some((EventType::Deleted, &change.obj)),
            EventType::Modified => {
                let before = change.prev.as_ref().is_some_and(|p| self.matches(p));
                match (before, now) {
                    (true, true) => Some((EventType::Modified, &change.obj)),
                    (false, true) => Some((EventType::Added, &change.obj)),
                    (true, false) => Some((EventType::Deleted, &change.obj)),
                    (false, false) => None,
                }
            }
        }
    }
}

fn line(ty: EventType, obj: &Obj, out: &mut Vec<u8>) {
    out.extend_from_slice(b"{\"type\":\"");
    out.extend_from_slice(ty.wire().as_bytes());
    out.extend_from_slice(b"\",\"object\":");
    out.extend_from_slice(&obj.json);
    out.extend_from_slice(b"}\n");
}

fn bookmark(kind: Kind, rv: u64, initial_end: bool) -> Bytes {
    let mut metadata = json!({"resourceVersion": rv.to_string()});
    if initial_end {
        metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    let event = json!({"type": "BOOKMARK", "object": {"kind": kind.info().kind, "apiVersion": kind.api_version(), "metadata": metadata}});
    let mut bytes = serde_json::to_vec(&event).expect("JSON");
    bytes.push(b'\n');
    Bytes::from(bytes)
}

fn expired(cursor: u64, floor: u64) -> Bytes {
    let status = ApiError::gone(format!("too old resource version: {cursor} ({floor})")).status();
    let mut bytes = serde_json::to_vec(&json!({"type": "ERROR", "object": status})).expect("JSON");
    bytes.push(b'\n');
    Bytes::from(bytes)
}

/// Counts open watches for `Stats`.
struct Guard(Arc<Shared>);

impl Drop for Guard {
    fn drop(&mut self) {
        self.0.watches_open.fetch_sub(1, Ordering::Relaxed);
    }
}

struct State {
    shared: Arc<Shared>,
    req: WatchReq,
    cursor: u64,
    initial: VecDeque<Obj>,
    initial_end_due: bool,
    first_error: Option<Bytes>,
    notify: watch::Receiver<u64>,
    signal: watch::Receiver<(u64, Signal)>,
    shutdown: watch::Receiver<bool>,
    deadline: Instant,
    next_bookmark: Instant,
    done: bool,
    _guard: Guard,
}

/// Starts a watch: the response streams until the timeout, a fault, or shutdown.
pub(crate) fn start(shared: Arc<Shared>, req: WatchReq) -> Response {
    shared.watches_open.fetch_add(1, Ordering::Relaxed);
    let guard = Guard(shared.clone());
    let (cursor, initial, first_error, notify) = {
        let world = shared.world.lock().expect("the world's lock is never poisoned");
        let table = world.table(req.kind);
        let notify = table.notify.subscribe();
        match req.since {
            Some(rv) if rv < table.floor => (rv, VecDeque::new(), Some(expired(rv, table.floor)), notify),
            Some(rv) => (rv, VecDeque::new(), None, notify),
            None => {
                let initial: VecDeque<Obj> = table.objects.values().filter(|o| req.matches(o)).cloned().collect();
                (world.rv, initial, None, notify)
            }
        }
    };
    let now = Instant::now();
    let state = State {
        signal: shared.watch_signal.subscribe(),
        shutdown: shared.shutdown.subscribe(),
        deadline: now + req.timeout,
        next_bookmark: now + shared.config.bookmark_interval,
        initial_end_due: req.initial_events,
        shared,
        req,
        cursor,
        initial,
        first_error,
        notify,
        done: false,
        _guard: guard,
    };
    let stream = futures_util::stream::unfold(state, |mut st| async move {
        let item = next(&mut st).await?;
        Some((item, st))
    });
    let mut response = Response::new(Body::from_stream(stream));
    *response.status_mut() = StatusCode::OK;
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

async fn next(st: &mut State) -> Option<Result<Bytes, std::io::Error>> {
    if st.done {
        return None;
    }
    if let Some(e) = st.first_error.take() {
        st.done = true;
        return Some(Ok(e));
    }
    if !st.initial.is_empty() {
        let mut out = Vec::new();
        for obj in st.initial.drain(..st.initial.len().min(256)) {
            line(EventType::Added, &obj, &mut out);
        }
        return Some(Ok(Bytes::from(out)));
    }
    if st.initial_end_due {
        st.initial_end_due = false;
        return Some(Ok(bookmark(st.req.kind, st.cursor, true)));
    }
    loop {
        // A busy watch still honours faults, its timeout and shutdown.
        if st.signal.has_changed().unwrap_or(false) {
            let (_, signal) = *st.signal.borrow_and_update();
            if let Some(item) = on_signal(st, signal) {
                return item;
            }
        }
        if *st.shutdown.borrow() {
            st.done = true;
            return None;
        }
        if Instant::now() >= st.deadline {
            st.done = true;
            return st.req.bookmarks.then(|| Ok(bookmark(st.req.kind, st.cursor, false)));
        }
        st.notify.borrow_and_update();
        let (changes, floor) = {
            let world = st.shared.world.lock().expect("the world's lock is never poisoned");
            let table = world.table(st.req.kind);
            if st.cursor < table.floor {
                (None, table.floor)
            } else {
                let start = table.history.partition_point(|c| c.rv <= st.cursor);
                let changes: Vec<Arc<Change>> = table.history.range(start..).take(512).cloned().collect();
                // Everything of this kind up to the global resourceVersion is sent once the
                // history is read to its end.
                if start + changes.len() == table.history.len() {
                    st.cursor = st.cursor.max(world.rv);
                }
                (Some(changes), table.floor)
            }
        };
        let Some(changes) = changes else {
            st.done = true;
            return Some(Ok(expired(st.cursor, floor)));
        };
        if let Some(last) = changes.last() {
            st.cursor = st.cursor.max(last.rv);
            let mut out = Vec::new();
            for change in &changes {
                if let Some((ty, obj)) = st.req.project(change) {
                    line(ty, obj, &mut out);
                }
            }
            if !out.is_empty() {
                return Some(Ok(Bytes::from(out)));
            }
            continue;
        }
        let bookmark_at = st.next_bookmark;
        tokio::select! {
            changed = st.notify.changed() => {
                if changed.is_err() {
                    st.done = true;
                    return None;
                }
            }
            _ = tokio::time::sleep_until(bookmark_at), if st.req.bookmarks => {
                st.next_bookmark = Instant::now() + st.shared.config.bookmark_interval;
                return Some(Ok(bookmark(st.req.kind, st.cursor, false)));
            }
            _ = tokio::time::sleep_until(st.deadline) => {
                st.done = true;
                return st.req.bookmarks.then(|| Ok(bookmark(st.req.kind, st.cursor, false)));
            }
            changed = st.signal.changed() => {
                if changed.is_err() {
                    st.done = true;
                    return None;
                }
                let (_, signal) = *st.signal.borrow_and_update();
                if let Some(item) = on_signal(st, signal) {
                    return item;
                }
            }
            _ = st.shutdown.changed() => {
                st.done = true;
                return None;
            }
        }
    }
}

/// What a fault does to an open watch: `Some(item)` ends it with that item.
fn on_signal(st: &mut State, signal: Signal) -> Option<Option<Result<Bytes, std::io::Error>>> {
    match signal {
        Signal::Expire => {
            st.done = true;
            Some(Some(Ok(expired(st.cursor, st.cursor + 1))))
        }
        Signal::Drop => {
            st.done = true;
            Some(Some(Err(std::io::Error::other("watch connection dropped by fault injection"))))
        }
        Signal::None => None,
    }
}
