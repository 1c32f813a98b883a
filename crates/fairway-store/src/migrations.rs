//! Numbered schema migrations. Each runs once, in order, in its own transaction, and sets
//! `PRAGMA user_version` to its number. Never edit a released migration: add the next one.

use std::path::Path;

use rusqlite::Connection;

use crate::{Result, StoreError};

/// The newest schema this build writes.
pub const SCHEMA_VERSION: u32 = MIGRATIONS.len() as u32;

const MIGRATIONS: &[&str] = &[
    // 1: jobs, their event log, quotas, submitted priority classes.
    "CREATE TABLE jobs (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        name TEXT NOT NULL,
        user TEXT NOT NULL,
        project TEXT NOT NULL,
        priority INTEGER NOT NULL,
        priority_class TEXT,
        spec_json TEXT NOT NULL,
        state TEXT NOT NULL CHECK (state IN
            ('pending', 'running', 'preempting', 'stopping', 'succeeded', 'failed', 'cancelled')),
        submitted_at_ms INTEGER NOT NULL,
        first_started_at_ms INTEGER,
        started_at_ms INTEGER,
        finished_at_ms INTEGER,
        placement_json TEXT,
        run_dir TEXT,
        processes_json TEXT,
        restart_count INTEGER NOT NULL DEFAULT 0,
        preemptions INTEGER NOT NULL DEFAULT 0,
        failures INTEGER NOT NULL DEFAULT 0,
        runtime_done_ms INTEGER NOT NULL DEFAULT 0,
        last_checkpoint_ms INTEGER,
        exit_code INTEGER,
        exit_signal INTEGER
    );
    CREATE INDEX jobs_by_state ON jobs (state, id);
    CREATE INDEX jobs_by_project ON jobs (project, id);
    CREATE INDEX jobs_by_user ON jobs (user, id);
    CREATE TABLE job_events (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        job_id INTEGER NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
        at_ms INTEGER NOT NULL,
        kind TEXT NOT NULL,
        reason TEXT,
        message TEXT NOT NULL
    );
    CREATE INDEX job_events_by_job ON job_events (job_id, id);
    CREATE TABLE quotas (
        account_kind TEXT NOT NULL CHECK (account_kind IN ('user', 'project')),
        account TEXT NOT NULL,
        gpus_max INTEGER,
        cpu_millis_max INTEGER,
        memory_mib_max INTEGER,
        PRIMARY KEY (account_kind, account)
    );
    CREATE TABLE priority_classes (
        name TEXT PRIMARY KEY,
        value INTEGER NOT NULL,
        preemption_policy TEXT NOT NULL,
        global_default INTEGER NOT NULL,
        description TEXT
    );",
    // 2: identities (bearer tokens, stored as SHA-256 digests), per-project settings, and
    //    what a restart needs to honour a stop already under way (its deadline and cause)
    //    and a retry's backoff.
    "CREATE TABLE tokens (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        name TEXT NOT NULL,
        secret_sha256 TEXT NOT NULL UNIQUE,
        user TEXT NOT NULL,
        project TEXT NOT NULL,
        role TEXT NOT NULL CHECK (role IN ('admin', 'submitter', 'viewer')),
        created_at_ms INTEGER NOT NULL,
        expires_at_ms INTEGER,
        revoked_at_ms INTEGER
    );
    CREATE TABLE projects (
        name TEXT PRIMARY KEY,
        priority_class_max TEXT
    );
    CREATE TABLE server_state (
        key TEXT PRIMARY KEY,
        value TEXT NOT NULL
    );
    ALTER TABLE jobs ADD COLUMN stop_cause TEXT;
    ALTER TABLE jobs ADD COLUMN stop_requested_at_ms INTEGER;
    ALTER TABLE jobs ADD COLUMN kill_at_ms INTEGER;
    ALTER TABLE jobs ADD COLUMN preemptor_id INTEGER;
    ALTER TABLE jobs ADD COLUMN retry_at_ms INTEGER;
    ALTER TABLE jobs ADD COLUMN hold_json TEXT;
    ALTER TABLE jobs ADD COLUMN waited_ms INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE jobs ADD COLUMN pending_since_ms INTEGER;
    UPDATE jobs SET pending_since_ms = submitted_at_ms WHERE state = 'pending' AND first_started_at_ms IS NULL;
    UPDATE jobs SET waited_ms = first_started_at_ms - submitted_at_ms WHERE first_started_at_ms IS NOT NULL;",
    // 3: rule 1 of the preemption order per priority class (a minimum run, a cap on
    //    preemptions an hour, and whether the class overrides both), on the classes and on
    //    each job as it was accepted. Rows from before have no protection, as they had none.
    "ALTER TABLE priority_classes ADD COLUMN min_run_before_preemption_seconds INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE priority_classes ADD COLUMN preemptions_per_hour_max INTEGER;
    ALTER TABLE priority_classes ADD COLUMN overrides_preemption_protection INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE jobs ADD COLUMN min_run_before_preemption_seconds INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE jobs ADD COLUMN preemptions_per_hour_max INTEGER;
    ALTER TABLE jobs ADD COLUMN overrides_preemption_protection INTEGER NOT NULL DEFAULT 0;",
    // 4: rule 1's preemption delay per priority class (how long a job waits for free GPUs
    //    before it preempts), on the classes and on each job as it was accepted. Rows from
    //    before have none, as they had none.
    "ALTER TABLE priority_classes ADD COLUMN preemption_delay_seconds INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE jobs ADD COLUMN preemption_delay_seconds INTEGER NOT NULL DEFAULT 0;",
    // 5: cohorts (projects lending each other idle nominal quota): per cohort, its members
    //    as the API and the config write them (a JSON list, checked as a whole on the way in).
    "CREATE TABLE cohorts (
        name TEXT PRIMARY KEY,
        members_json TEXT NOT NULL
    );",
    // 6: fair sharing's memory: each account's recent average holding, saved now and then
    //    and at shutdown so that a restarted server still knows who burst lately. All rows
    //    are written at once, as of one time.
    "CREATE TABLE recent_usage (
        account_kind TEXT NOT NULL CHECK (account_kind IN ('user', 'project')),
        account TEXT NOT NULL,
        gpu_milli INTEGER NOT NULL,
        cpu_millis INTEGER NOT NULL,
        memory_mib INTEGER NOT NULL,
        as_of_ms INTEGER NOT NULL,
        PRIMARY KEY (account_kind, account)
    );",
    // 7: fair-share weights other than 1, set through the API (and the config file's,
    //    written over them at start-up).
    "CREATE TABLE fair_share_weights (
        account_kind TEXT NOT NULL CHECK (account_kind IN ('user', 'project')),
        account TEXT NOT NULL,
        weight INTEGER NOT NULL CHECK (weight >= 1),
        PRIMARY KEY (account_kind, account)
    );",
];

pub(crate) fn migrate(conn: &mut Connection, path: &Path) -> Result<()> {
    let found: u32 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    if found > SCHEMA_VERSION {
        return Err(StoreError::TooNew { path: path.display().to_string(), found, supported: SCHEMA_VERSION });
    }
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(found as usize) {
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Exclusive)?;
        tx.execute_batch(sql)?;
        tx.pragma_update(None, "user_version", i as u32 + 1)?;
        tx.commit()?;
    }
    Ok(())
}
