//! The store against a real SQLite file in a temporary directory.

use fairway_store::*;

fn new_job(name: &str, project: &str, priority: i32, at: u64) -> NewJob {
    NewJob {
        name: name.into(),
        user: "alice".into(),
        project: project.into(),
        priority,
        priority_class: Some("medium".into()),
        spec_json: format!("{{\"name\":\"{name}\"}}"),
        submitted_at_ms: at,
        min_run_before_preemption_seconds: 0,
        preemptions_per_hour_max: None,
        overrides_preemption_protection: false,
        preemption_delay_seconds: 0,
    }
}

fn event(job_id: i64, at_ms: u64, kind: &str) -> NewEvent {
    NewEvent { job_id, at_ms, kind: kind.into(), reason: None, message: format!("{kind} message") }
}

#[test]
fn migrates_a_new_file_and_reopens_it_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fairway.db");
    let mut store = Store::open(&path).unwrap();
    assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
    let mut tx = store.transaction().unwrap();
    let id = tx.insert_job(&new_job("a", "ads", 10, 1_000)).unwrap();
    tx.commit().unwrap();
    drop(store);
    let store = Store::open(&path).unwrap();
    assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
    let row = store.job(id).unwrap().expect("job survives reopening");
    assert_eq!((row.name.as_str(), row.state, row.submitted_at_ms), ("a", JobState::Pending, 1_000));
    let journal: String =
        rusqlite::Connection::open(&path).unwrap().query_row("PRAGMA journal_mode", [], |r| r.get(0)).unwrap();
    assert_eq!(journal, "wal");
}

/// A file written by the release before migration 3 (rule 1's protection): made here by
/// dropping the columns that migration adds and setting its version back.
#[test]
fn a_version_2_file_is_upgraded_and_its_rows_get_no_protection() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fairway.db");
    let mut store = Store::open(&path).unwrap();
    let mut tx = store.transaction().unwrap();
    let protected = NewJob {
        min_run_before_preemption_seconds: 60,
        preemptions_per_hour_max: Some(2),
        ..new_job("a", "ads", 10, 1_000)
    };
    let id = tx.insert_job(&protected).unwrap();
    tx.commit().unwrap();
    let row = store.job(id).unwrap().unwrap();
    assert_eq!((row.min_run_before_preemption_seconds, row.preemptions_per_hour_max), (60, Some(2)));
    drop(store);
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch(
        "ALTER TABLE jobs DROP COLUMN min_run_before_preemption_seconds;
         ALTER TABLE jobs DROP COLUMN preemptions_per_hour_max;
         ALTER TABLE priority_classes DROP COLUMN min_run_before_preemption_seconds;
         ALTER TABLE priority_classes DROP COLUMN preemptions_per_hour_max;
         ALTER TABLE priority_classes DROP COLUMN overrides_preemption_protection;
         ALTER TABLE jobs DROP COLUMN overrides_preemption_protection;
         ALTER TABLE priority_classes DROP COLUMN preemption_delay_seconds;
         ALTER TABLE jobs DROP COLUMN preemption_delay_seconds;
         DROP TABLE cohorts;
         DROP TABLE recent_usage;
         DROP TABLE fair_share_weights;
         PRAGMA user_version = 2;",
    )
    .unwrap();
    drop(conn);
    let store = Store::open(&path).unwrap();
    assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
    let row = store.job(id).unwrap().expect("the job survives the upgrade");
    assert_eq!((row.name.as_str(), row.submitted_at_ms), ("a", 1_000));
    assert_eq!((row.min_run_before_preemption_seconds, row.preemptions_per_hour_max), (0, None));
}

/// A file written by the release before migration 4 (rule 1's preemption delay).
#[test]
fn a_version_3_file_is_upgraded_and_keeps_its_protection_without_a_delay() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fairway.db");
    let mut store = Store::open(&path).unwrap();
    let mut tx = store.transaction().unwrap();
    let job =
        NewJob { min_run_before_preemption_seconds: 60, preemption_delay_seconds: 9, ..new_job("a", "ads", 10, 1) };
    let id = tx.insert_job(&job).unwrap();
    tx.commit().unwrap();
    assert_eq!(store.job(id).unwrap().unwrap().preemption_delay_seconds, 9);
    drop(store);
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch(
        "ALTER TABLE priority_classes DROP COLUMN preemption_delay_seconds;
         ALTER TABLE jobs DROP COLUMN preemption_delay_seconds;
         DROP TABLE cohorts;
         DROP TABLE recent_usage;
         DROP TABLE fair_share_weights;
         PRAGMA user_version = 3;",
    )
    .unwrap();
    drop(conn);
    let store = Store::open(&path).unwrap();
    assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
    let row = store.job(id).unwrap().expect("the job survives the upgrade");
    assert_eq!((row.min_run_before_preemption_seconds, row.preemption_delay_seconds), (60, 0));
}

/// A store at `path` with one job, taken back to schema `version` by dropping the `tables`
/// later migrations made, then opened again: upgraded, with the job kept.
fn upgraded_from(path: &std::path::Path, version: u32, tables: &[&str]) -> Store {
    let mut store = Store::open(path).unwrap();
    let mut tx = store.transaction().unwrap();
    let id = tx.insert_job(&new_job("a", "ads", 10, 1)).unwrap();
    tx.commit().unwrap();
    drop(store);
    let conn = rusqlite::Connection::open(path).unwrap();
    let drops: String = tables.iter().map(|t| format!("DROP TABLE {t}; ")).collect();
    conn.execute_batch(&format!("{drops}PRAGMA user_version = {version};")).unwrap();
    drop(conn);
    let store = Store::open(path).unwrap();
    assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
    assert!(store.job(id).unwrap().is_some(), "the job survives the upgrade");
    store
}

#[test]
fn a_version_4_file_is_upgraded_and_cohorts_are_kept_replaced_and_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let mut store =
        upgraded_from(&dir.path().join("fairway.db"), 4, &["cohorts", "recent_usage", "fair_share_weights"]);
    assert!(store.cohorts().unwrap().is_empty());
    let row = |name: &str, json: &str| CohortRow { name: name.into(), members_json: json.into() };
    let mut tx = store.transaction().unwrap();
    tx.set_cohort(&row("lab", "[1]")).unwrap();
    tx.set_cohort(&row("ads", "[2]")).unwrap();
    tx.set_cohort(&row("lab", "[3]")).unwrap();
    tx.commit().unwrap();
    assert_eq!(store.cohorts().unwrap(), [row("ads", "[2]"), row("lab", "[3]")]);
    let mut tx = store.transaction().unwrap();
    assert!(tx.delete_cohort("ads").unwrap());
    assert!(!tx.delete_cohort("ads").unwrap());
    tx.commit().unwrap();
    assert_eq!(store.cohorts().unwrap(), [row("lab", "[3]")]);
}

#[test]
fn a_version_5_file_is_upgraded_and_recent_usage_is_replaced_as_a_whole() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = upgraded_from(&dir.path().join("fairway.db"), 5, &["recent_usage", "fair_share_weights"]);
    assert!(store.recent_usage().unwrap().is_empty());
    let row = |kind: &str, account: &str, gpu_milli: u64, as_of_ms: u64| RecentUsageRow {
        account_kind: kind.into(),
        account: account.into(),
        gpu_milli,
        cpu_millis: 2 * gpu_milli,
        memory_mib: 3 * gpu_milli,
        as_of_ms,
    };
    let mut tx = store.transaction().unwrap();
    tx.replace_recent_usage(&[row("user", "alice", 1500, 10), row("project", "ads", 4000, 10)]).unwrap();
    tx.commit().unwrap();
    assert_eq!(store.recent_usage().unwrap(), [row("project", "ads", 4000, 10), row("user", "alice", 1500, 10)]);
    // The next save replaces every row: an account no longer listed is forgotten.
    let mut tx = store.transaction().unwrap();
    tx.replace_recent_usage(&[row("project", "ads", 2000, 20)]).unwrap();
    tx.commit().unwrap();
    assert_eq!(store.recent_usage().unwrap(), [row("project", "ads", 2000, 20)]);
    // A rolled-back save changes nothing.
    let mut tx = store.transaction().unwrap();
    tx.replace_recent_usage(&[]).unwrap();
    drop(tx);
    assert_eq!(store.recent_usage().unwrap(), [row("project", "ads", 2000, 20)]);
}

#[test]
fn a_version_6_file_is_upgraded_and_weights_are_set_replaced_and_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = upgraded_from(&dir.path().join("fairway.db"), 6, &["fair_share_weights"]);
    assert!(store.fair_share_weights().unwrap().is_empty());
    let row = |kind: &str, account: &str, weight: u32| WeightRow {
        account_kind: kind.into(),
        account: account.into(),
        weight,
    };
    let mut tx = store.transaction().unwrap();
    tx.set_fair_share_weight(&row("user", "ana", 3)).unwrap();
    tx.set_fair_share_weight(&row("project", "ads", 2)).unwrap();
    tx.set_fair_share_weight(&row("user", "ana", 5)).unwrap();
    tx.commit().unwrap();
    assert_eq!(store.fair_share_weights().unwrap(), [row("project", "ads", 2), row("user", "ana", 5)]);
    let mut tx = store.transaction().unwrap();
    assert!(tx.delete_fair_share_weight("project", "ads").unwrap());
    assert!(!tx.delete_fair_share_weight("project", "ads").unwrap());
    tx.commit().unwrap();
    assert_eq!(store.fair_share_weights().unwrap(), [row("user", "ana", 5)]);
    // The schema refuses a weight below 1 whatever the caller checked.
    let mut tx = store.transaction().unwrap();
    assert!(tx.set_fair_share_weight(&row("user", "bo", 0)).is_err());
}

#[test]
fn refuses_a_store_from_a_newer_fairway() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fairway.db");
    drop(Store::open(&path).unwrap());
    rusqlite::Connection::open(&path).unwrap().pragma_update(None, "user_version", SCHEMA_VERSION + 1).unwrap();
    let err = Store::open(&path).err().expect("newer schema refused");
    assert!(matches!(err, StoreError::TooNew { found, .. } if found == SCHEMA_VERSION + 1), "{err}");
    assert!(err.to_string().contains("upgrade Fairway"), "{err}");
}

#[test]
fn ids_grow_and_a_dropped_transaction_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(&dir.path().join("s.db")).unwrap();
    let mut tx = store.transaction().unwrap();
    let a = tx.insert_job(&new_job("a", "p", 1, 1)).unwrap();
    let b = tx.insert_job(&new_job("b", "p", 1, 2)).unwrap();
    tx.commit().unwrap();
    assert!(b > a);
    let mut tx = store.transaction().unwrap();
    tx.insert_job(&new_job("c", "p", 1, 3)).unwrap();
    drop(tx);
    let all = store.jobs(&JobFilter::default()).unwrap();
    assert_eq!(all.iter().map(|j| j.name.as_str()).collect::<Vec<_>>(), ["b", "a"], "newest first, c rolled back");
    let mut tx = store.transaction().unwrap();
    let d = tx.insert_job(&new_job("d", "p", 1, 4)).unwrap();
    tx.commit().unwrap();
    assert_eq!(store.job(d).unwrap().unwrap().name, "d");
    assert!(store.job(a).unwrap().is_some() && d > b);
}

#[test]
fn a_run_and_its_end_update_counters_and_the_event_log() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(&dir.path().join("s.db")).unwrap();
    let mut tx = store.transaction().unwrap();
    let id = tx.insert_job(&new_job("train", "ads", 1000, 10)).unwrap();
    let run = RunRow { started_at_ms: 20, placement_json: "[[0,[0,1]]]".into(), run_dir: "/tmp/r1".into() };
    tx.set_running(id, &run, &event(id, 20, "started")).unwrap();
    tx.set_processes(id, "[[4242,99]]").unwrap();
    tx.commit().unwrap();
    let row = store.job(id).unwrap().unwrap();
    assert_eq!(
        (row.state, row.processes_json.as_deref(), row.first_started_at_ms),
        (JobState::Running, Some("[[4242,99]]"), Some(20))
    );

    let mut tx = store.transaction().unwrap();
    let end = RunEnd {
        state: JobState::Pending,
        runtime_ms: 500,
        will_restart: true,
        preempted: true,
        failed: false,
        exit_code: Some(143),
        exit_signal: None,
        retry_at_ms: None,
    };
    tx.end_run(id, &end, &event(id, 520, "requeued")).unwrap();
    tx.set_checkpoint(id, 510).unwrap();
    tx.set_checkpoint(id, 505).unwrap();
    tx.set_running(id, &RunRow { started_at_ms: 600, ..run }, &event(id, 600, "started")).unwrap();
    tx.commit().unwrap();
    let row = store.job(id).unwrap().unwrap();
    assert_eq!(row.state, JobState::Running);
    assert_eq!((row.restart_count, row.preemptions, row.failures, row.runtime_done_ms), (1, 1, 0, 500));
    assert_eq!(row.first_started_at_ms, Some(20), "the first start is kept for the wait time");
    assert_eq!((row.waited_ms, row.pending_since_ms), (10 + 80, None), "waits add up: 10-20, then 520-600");
    assert_eq!(row.last_checkpoint_ms, Some(510), "checkpoint times only move forward");
    assert_eq!(row.processes_json, None, "a new run has no process until it is spawned");

    let mut tx = store.transaction().unwrap();
    let done = RunEnd {
        state: JobState::Succeeded,
        runtime_ms: 100,
        will_restart: false,
        preempted: false,
        failed: false,
        exit_code: Some(0),
        exit_signal: None,
        retry_at_ms: None,
    };
    tx.end_run(id, &done, &event(id, 700, "succeeded")).unwrap();
    tx.commit().unwrap();
    let row = store.job(id).unwrap().unwrap();
    assert_eq!((row.state, row.finished_at_ms, row.runtime_done_ms), (JobState::Succeeded, Some(700), 600));
    let kinds: Vec<String> = store.events(id).unwrap().into_iter().map(|e| e.kind).collect();
    assert_eq!(kinds, ["submitted", "started", "requeued", "started", "succeeded"]);
    assert!(store.unfinished_jobs().unwrap().is_empty());
}

#[test]
fn filters_and_unfinished_jobs_in_submission_order() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(&dir.path().join("s.db")).unwrap();
    let mut tx = store.transaction().unwrap();
    let a = tx.insert_job(&new_job("a", "ads", 1_000_000, 1)).unwrap();
    let b = tx.insert_job(&new_job("b", "vision", 1000, 2)).unwrap();
    let c = tx.insert_job(&new_job("c", "ads", 1000, 3)).unwrap();
    tx.set_state(b, JobState::Cancelled, &event(b, 4, "cancelled")).unwrap();
    tx.commit().unwrap();
    let names = |f: JobFilter| store.jobs(&f).unwrap().into_iter().map(|j| j.name).collect::<Vec<_>>();
    assert_eq!(names(JobFilter { project: Some("ads".into()), ..JobFilter::default() }), ["c", "a"]);
    assert_eq!(names(JobFilter { states: vec![JobState::Cancelled], ..JobFilter::default() }), ["b"]);
    assert_eq!(names(JobFilter { priority_min: Some(1_000_000), ..JobFilter::default() }), ["a"]);
    assert_eq!(names(JobFilter { limit: 1, ..JobFilter::default() }), ["c"]);
    let unfinished: Vec<i64> = store.unfinished_jobs().unwrap().into_iter().map(|j| j.id).collect();
    assert_eq!(unfinished, [a, c]);
    assert_eq!(store.job(b).unwrap().unwrap().finished_at_ms, Some(4));
    let counts = store.state_counts().unwrap();
    assert_eq!(counts, [(JobState::Cancelled, 1), (JobState::Pending, 2)]);
}

#[test]
fn quotas_and_priority_classes_upsert() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(&dir.path().join("s.db")).unwrap();
    let q = QuotaRow {
        account_kind: "project".into(),
        account: "ads".into(),
        gpus_max: Some(4),
        cpu_millis_max: None,
        memory_mib_max: None,
    };
    let mut tx = store.transaction().unwrap();
    tx.set_quota(&q).unwrap();
    tx.set_quota(&QuotaRow { gpus_max: Some(6), ..q.clone() }).unwrap();
    tx.upsert_priority_class(&PriorityClassRow {
        name: "urgent".into(),
        value: 5_000_000,
        preemption_policy: "PreemptLowerPriority".into(),
        global_default: false,
        description: None,
        min_run_before_preemption_seconds: 300,
        preemptions_per_hour_max: Some(3),
        overrides_preemption_protection: true,
        preemption_delay_seconds: 15,
    })
    .unwrap();
    tx.commit().unwrap();
    assert_eq!(store.quotas().unwrap(), [QuotaRow { gpus_max: Some(6), ..q }]);
    let class = &store.priority_classes().unwrap()[0];
    assert_eq!(
        (
            class.min_run_before_preemption_seconds,
            class.preemptions_per_hour_max,
            class.overrides_preemption_protection,
            class.preemption_delay_seconds
        ),
        (300, Some(3), true, 15)
    );
    assert_eq!(store.priority_classes().unwrap()[0].value, 5_000_000);
    let mut tx = store.transaction().unwrap();
    assert!(tx.delete_quota("project", "ads").unwrap());
    assert!(!tx.delete_quota("project", "ads").unwrap());
    tx.commit().unwrap();
    assert!(store.quotas().unwrap().is_empty());
}

#[test]
fn a_reader_sees_committed_writes_while_the_writer_is_open() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    let mut writer = Store::open(&path).unwrap();
    let reader = Store::open_reader(&path).unwrap();
    let mut tx = writer.transaction().unwrap();
    let id = tx.insert_job(&new_job("a", "p", 1, 1)).unwrap();
    assert!(reader.job(id).unwrap().is_none(), "uncommitted work is invisible");
    tx.commit().unwrap();
    assert_eq!(reader.job(id).unwrap().unwrap().name, "a");
}

#[test]
fn a_stop_under_way_and_a_backoff_are_kept_until_the_next_run() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(&dir.path().join("s.db")).unwrap();
    let mut tx = store.transaction().unwrap();
    let id = tx.insert_job(&new_job("train", "ads", 1000, 10)).unwrap();
    let run = RunRow { started_at_ms: 20, placement_json: "[[0,[0]]]".into(), run_dir: "/tmp/r".into() };
    tx.set_running(id, &run, &event(id, 20, "started")).unwrap();
    let stop = StopRow { cause: "preempted".into(), requested_at_ms: 30, kill_at_ms: 60, preemptor_id: Some(9) };
    tx.set_stopping(id, JobState::Preempting, &stop, &event(id, 30, "preempted")).unwrap();
    tx.commit().unwrap();
    let row = store.job(id).unwrap().unwrap();
    assert_eq!((row.state, row.stop.clone()), (JobState::Preempting, Some(stop)));
    assert_eq!(store.unfinished_jobs().unwrap().len(), 1);

    let mut tx = store.transaction().unwrap();
    let end = RunEnd {
        state: JobState::Pending,
        runtime_ms: 15,
        will_restart: true,
        preempted: false,
        failed: true,
        exit_code: Some(1),
        exit_signal: None,
        retry_at_ms: Some(10_035),
    };
    tx.end_run(id, &end, &event(id, 35, "retrying")).unwrap();
    tx.set_hold(id, Some("{}")).unwrap();
    tx.commit().unwrap();
    let row = store.job(id).unwrap().unwrap();
    assert_eq!((row.stop.clone(), row.retry_at_ms, row.pending_since_ms), (None, Some(10_035), Some(35)));
    assert_eq!(row.wait_ms(100), 10 + 65, "the first wait and the re-wait up to now");
    let mut tx = store.transaction().unwrap();
    tx.set_running(id, &RunRow { started_at_ms: 10_040, ..run }, &event(id, 10_040, "started")).unwrap();
    tx.commit().unwrap();
    let row = store.job(id).unwrap().unwrap();
    assert_eq!((row.retry_at_ms, row.hold_json.clone(), row.waited_ms), (None, None, 10 + 10_005));
}

#[test]
fn tokens_are_stored_as_digests_revoked_once_and_projects_keep_their_caps() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(&dir.path().join("s.db")).unwrap();
    let token = NewToken {
        name: "alice@vision".into(),
        secret_sha256: "ab".repeat(32),
        user: "alice".into(),
        project: "vision".into(),
        role: Role::Submitter,
        created_at_ms: 5,
        expires_at_ms: Some(99),
    };
    let mut tx = store.transaction().unwrap();
    let id = tx.insert_token(&token).unwrap();
    assert!(tx.insert_token(&token).is_err(), "a digest is stored once");
    tx.commit().unwrap();
    let mut tx = store.transaction().unwrap();
    assert!(tx.revoke_token(id, 7).unwrap());
    assert!(!tx.revoke_token(id, 8).unwrap(), "revoked once");
    assert!(!tx.revoke_token(id + 100, 8).unwrap());
    tx.set_project(&ProjectRow { name: "vision".into(), priority_class_max: Some("high".into()) }).unwrap();
    tx.set_project(&ProjectRow { name: "vision".into(), priority_class_max: Some("critical".into()) }).unwrap();
    tx.commit().unwrap();
    let rows = store.tokens().unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!((rows[0].role, rows[0].revoked_at_ms, rows[0].expires_at_ms), (Role::Submitter, Some(7), Some(99)));
    assert_eq!(store.projects().unwrap()[0].priority_class_max.as_deref(), Some("critical"));
}

#[test]
fn pages_follow_a_cursor_and_the_count_ignores_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(&dir.path().join("s.db")).unwrap();
    let mut tx = store.transaction().unwrap();
    for i in 0..25 {
        tx.insert_job(&new_job(&format!("j{i}"), "p", 1, i)).unwrap();
    }
    tx.commit().unwrap();
    let mut seen = Vec::new();
    let mut cursor = None;
    loop {
        let filter = JobFilter { before_id: cursor, limit: 10, ..JobFilter::default() };
        assert_eq!(store.count_jobs(&filter).unwrap(), 25);
        let page = store.jobs(&filter).unwrap();
        seen.extend(page.iter().map(|j| j.id));
        if page.len() < 10 {
            break;
        }
        cursor = page.last().map(|j| j.id);
    }
    let mut want: Vec<i64> = (1..=25).collect();
    want.reverse();
    assert_eq!(seen, want, "every job once, newest first");
}

#[test]
fn relative_run_directories_are_made_absolute_under_the_data_directory() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(&dir.path().join("s.db")).unwrap();
    let mut tx = store.transaction().unwrap();
    let a = tx.insert_job(&new_job("a", "p", 1, 1)).unwrap();
    let b = tx.insert_job(&new_job("b", "p", 1, 2)).unwrap();
    let rel = format!("fairway-data/jobs/{a}/runs/0");
    tx.set_running(
        a,
        &RunRow { started_at_ms: 3, placement_json: "[]".into(), run_dir: rel.clone() },
        &event(a, 3, "s"),
    )
    .unwrap();
    tx.set_processes(a, &format!("[{{\"pid\":7,\"start_ticks\":1,\"run_dir\":\"{rel}/replica-0\"}}]")).unwrap();
    let odd = RunRow { started_at_ms: 3, placement_json: "[]".into(), run_dir: "elsewhere/x".into() };
    tx.set_running(b, &odd, &event(b, 3, "s")).unwrap();
    tx.commit().unwrap();
    let data = std::path::Path::new("/srv/fairway");
    let mut tx = store.transaction().unwrap();
    assert_eq!(tx.absolutize_run_dirs(data).unwrap(), 1);
    tx.commit().unwrap();
    let row = store.job(a).unwrap().unwrap();
    assert_eq!(row.run_dir.as_deref(), Some(format!("/srv/fairway/jobs/{a}/runs/0").as_str()));
    assert!(row.processes_json.unwrap().contains(&format!("/srv/fairway/jobs/{a}/runs/0/replica-0")));
    assert_eq!(store.job(b).unwrap().unwrap().run_dir.as_deref(), Some("elsewhere/x"), "not ours: left alone");
    let mut tx = store.transaction().unwrap();
    assert_eq!(tx.absolutize_run_dirs(data).unwrap(), 0, "idempotent");
}
