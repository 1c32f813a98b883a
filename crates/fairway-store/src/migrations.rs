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
