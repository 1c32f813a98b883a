//! Watches through `kube::runtime::watcher` and raw watch streams: events, 410 and relists,
//! bookmarks.

use std::time::Duration;

use fairway_kube_fake::{FakeConfig, Fault};
use futures_util::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::runtime::watcher::{self, Event};
use serde_json::json;
use tokio::sync::mpsc;

use crate::common::{eventually, fake, fake_with};
use crate::lists::pod;

/// What a watcher saw, in words: `init`, `+name`, `-name`, `done`.
async fn watch_into(api: Api<Pod>) -> mpsc::UnboundedReceiver<String> {
    let (tx, rx) = mpsc::unbounded_channel();
    let mut stream = watcher::watcher(api, watcher::Config::default().page_size(2)).boxed();
    tokio::spawn(async move {
        while let Some(event) = stream.next().await {
            let word = match event {
                Ok(Event::Init) => "init".to_owned(),
                Ok(Event::InitApply(p)) => format!("={}", p.metadata.name.unwrap()),
                Ok(Event::InitDone) => "done".to_owned(),
                Ok(Event::Apply(p)) => format!(
                    "+{}:{}",
                    p.metadata.name.unwrap(),
                    p.metadata.labels.unwrap_or_default().get("v").cloned().unwrap_or_default()
                ),
                Ok(Event::Delete(p)) => format!("-{}", p.metadata.name.unwrap()),
                Err(e) => format!("error {e}"),
            };
            if tx.send(word).is_err() {
                return;
            }
        }
    });
    rx
}

async fn expect_word(rx: &mut mpsc::UnboundedReceiver<String>, want: &str) -> Vec<String> {
    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let word = tokio::time::timeout_at(deadline, rx.recv())
            .await
            .unwrap_or_else(|_| panic!("no {want:?} within 10 s; saw {seen:?}"))
            .expect("the watcher runs");
        seen.push(word.clone());
        if word == want {
            return seen;
        }
    }
}

#[tokio::test]
async fn a_watcher_sees_changes_and_relists_after_its_history_expires() {
    let cluster = fake().await;
    let pods: Api<Pod> = Api::namespaced(cluster.client(), "default");
    for name in ["a", "b", "c"] {
        pods.create(&PostParams::default(), &pod(name, json!({"v": "0"}))).await.unwrap();
    }
    let mut rx = watch_into(pods.clone()).await;
    let initial = expect_word(&mut rx, "done").await;
    assert_eq!(initial, vec!["init", "=a", "=b", "=c", "done"], "listed in pages of two");
    pods.create(&PostParams::default(), &pod("d", json!({"v": "0"}))).await.unwrap();
    expect_word(&mut rx, "+d:0").await;
    pods.patch("a", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"v": "1"}}}))).await.unwrap();
    expect_word(&mut rx, "+a:1").await;
    pods.delete("b", &DeleteParams::default()).await.unwrap();
    expect_word(&mut rx, "-b").await;
    assert_eq!(cluster.stats().watches_open, 1);

    // Expired: the watcher gets a 410, lists again, and goes on.
    cluster.inject(Fault::ExpireWatches);
    let relist = expect_word(&mut rx, "done").await;
    assert!(relist.iter().any(|w| w.starts_with("error") && w.contains("too old resource version")), "{relist:?}");
    assert!(relist.ends_with(&["init".into(), "=a".into(), "=c".into(), "=d".into(), "done".into()]), "{relist:?}");
    pods.create(&PostParams::default(), &pod("e", json!({"v": "0"}))).await.unwrap();
    expect_word(&mut rx, "+e:0").await;

    // Dropped connections: the watcher resumes from where it was, without a relist.
    cluster.inject(Fault::DropWatches);
    tokio::time::sleep(Duration::from_millis(300)).await;
    pods.patch("c", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"v": "2"}}}))).await.unwrap();
    let after_drop = expect_word(&mut rx, "+c:2").await;
    assert!(!after_drop.contains(&"init".to_owned()), "resumed, not relisted: {after_drop:?}");
    let stats = cluster.stats();
    assert!(stats.requests["list pods"] >= 4, "{:?}", stats.requests);
    assert!(stats.requests["watch pods"] >= 3, "{:?}", stats.requests);
    cluster.shutdown().await;
}

#[tokio::test]
async fn watches_get_bookmarks_and_410_beyond_the_history() {
    let cluster = fake_with(FakeConfig {
        watch_history: 5,
        bookmark_interval: Duration::from_millis(100),
        ..FakeConfig::default()
    })
    .await;
    let pods: Api<Pod> = Api::namespaced(cluster.client(), "default");
    let first = pods.create(&PostParams::default(), &pod("p-0", json!({}))).await.unwrap();
    let first_rv = first.metadata.resource_version.unwrap();
    for i in 1..10 {
        pods.create(&PostParams::default(), &pod(&format!("p-{i}"), json!({}))).await.unwrap();
    }
    // From an old resourceVersion: an ERROR event with a 410 Status.
    let mut old = pods.watch(&WatchParams::default(), &first_rv).await.unwrap().boxed();
    match old.try_next().await.unwrap() {
        Some(WatchEvent::Error(e)) => assert_eq!((e.code, e.reason.as_str()), (410, "Expired")),
        other => panic!("expected a 410, got {other:?}"),
    }
    // From a recent one: the changes after it, then bookmarks carrying the newest one.
    let list = pods.list(&Default::default()).await.unwrap();
    let rv = list.metadata.resource_version.unwrap();
    let recent: u64 = rv.parse::<u64>().unwrap() - 2;
    let mut stream = pods.watch(&WatchParams::default().timeout(2), &recent.to_string()).await.unwrap().boxed();
    let mut added = Vec::new();
    let bookmark = loop {
        match stream.try_next().await.unwrap() {
            Some(WatchEvent::Added(p)) => added.push(p.metadata.name.unwrap()),
            Some(WatchEvent::Bookmark(b)) => break b,
            other => panic!("unexpected {other:?}"),
        }
    };
    assert_eq!(added, vec!["p-8", "p-9"]);
    assert_eq!(bookmark.metadata.resource_version, rv);
    // `timeoutSeconds` ends the stream (after a last bookmark).
    let rest: Vec<_> =
        tokio::time::timeout(Duration::from_secs(5), stream.collect::<Vec<_>>()).await.expect("the watch ends");
    assert!(rest.iter().all(|e| matches!(e, Ok(WatchEvent::Bookmark(_)))));
    eventually(Duration::from_secs(2), "the watches to be closed", || async {
        (cluster.stats().watches_open == 0).then_some(())
    })
    .await;
    cluster.shutdown().await;
}

#[tokio::test]
async fn a_selected_watch_sees_objects_leave_and_enter_its_selection() {
    let cluster = fake().await;
    let pods: Api<Pod> = Api::namespaced(cluster.client(), "default");
    let created = pods.create(&PostParams::default(), &pod("p", json!({"team": "a"}))).await.unwrap();
    let rv = created.metadata.resource_version.unwrap();
    let mut stream = pods.watch(&WatchParams::default().labels("team=a"), &rv).await.unwrap().boxed();
    pods.patch("p", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"team": "b"}}})))
        .await
        .unwrap();
    assert!(matches!(stream.try_next().await.unwrap(), Some(WatchEvent::Deleted(_))));
    pods.patch("p", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"team": "a"}}})))
        .await
        .unwrap();
    assert!(matches!(stream.try_next().await.unwrap(), Some(WatchEvent::Added(_))));
    cluster.shutdown().await;
}
