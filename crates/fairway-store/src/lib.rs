//! # fairway-store
//!
//! The standalone server's embedded store: one SQLite file in WAL mode with
//! `synchronous=FULL`, so a transaction is on disk when `commit` returns and the API may
//! answer. It holds jobs (their wire spec as opaque JSON, their lifecycle columns), an
//! append-only event log per job, quotas and submitted priority classes.
//!
//! The store knows nothing of scheduling: the server decides, the store remembers. Rows are
//! wire types; the server converts them to core types explicitly.
//!
//! Schema changes are numbered migrations in [`migrations`] (`PRAGMA user_version`); a file
//! written by a newer Fairway is refused rather than misread.

mod migrations;
mod rows;

use std::path::Path;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags, OptionalExtension, params};

pub use migrations::SCHEMA_VERSION;
pub use rows::{
    CohortRow, EventRow, JobFilter, JobRow, JobState, NewEvent, NewJob, NewToken, PriorityClassRow, ProjectRow,
    QuotaRow, RecentUsageRow, Role, RunEnd, RunRow, StopRow, TokenRow, WeightRow,
};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("store {path}: {source}")]
    Open { path: String, source: rusqlite::Error },
    #[error(
        "store {path} has schema version {found}, newer than this Fairway understands ({supported}); upgrade Fairway"
    )]
    TooNew { path: String, found: u32, supported: u32 },
    #[error("store: {0}")]
    Sql(#[from] rusqlite::Error),
    #[error("store: job {id}: column {column} holds {value:?}, which is not a valid value")]
    Corrupt { id: i64, column: &'static str, value: String },
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// One connection to the store file. The server keeps one writer (its engine thread) and a
/// few readers for the API; WAL lets readers run beside the writer.
pub struct Store {
    conn: Connection,
}

impl Store {
    /// Opens (creating if needed) the store and brings its schema up to date.
    pub fn open(path: &Path) -> Result<Store> {
        let conn = Connection::open(path).map_err(|source| open_error(path, source))?;
        configure(&conn).map_err(|source| open_error(path, source))?;
        let mut store = Store { conn };
        migrations::migrate(&mut store.conn, path)?;
        Ok(store)
    }

    /// A read-only connection to a store the writer has already opened (and migrated).
    pub fn open_reader(path: &Path) -> Result<Store> {
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX | OpenFlags::SQLITE_OPEN_URI;
        let conn = Connection::open_with_flags(path, flags).map_err(|source| open_error(path, source))?;
        conn.busy_timeout(Duration::from_secs(5)).map_err(|source| open_error(path, source))?;
        let store = Store { conn };
        let found = store.schema_version()?;
        if found > SCHEMA_VERSION {
            return Err(StoreError::TooNew { path: path.display().to_string(), found, supported: SCHEMA_VERSION });
        }
        Ok(store)
    }

    pub fn schema_version(&self) -> Result<u32> {
        Ok(self.conn.query_row("PRAGMA user_version", [], |r| r.get(0))?)
    }

    /// A small committed write: whether the store takes writes now (after a disk-full or
    /// I/O error, before trusting it again).
    pub fn probe_write(&mut self, now_ms: u64) -> Result<()> {
        let tx = self.transaction()?;
        tx.tx
            .prepare_cached(
                "INSERT INTO server_state (key, value) VALUES ('probe', ?1)
                 ON CONFLICT (key) DO UPDATE SET value = ?1",
            )?
            .execute(params![now_ms.to_string()])?;
        tx.commit()
    }

    /// Starts a write transaction (`BEGIN IMMEDIATE`): everything in it lands together.
    pub fn transaction(&mut self) -> Result<Tx<'_>> {
        let tx = self.conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        Ok(Tx { tx })
    }

    // ---- reads ----------------------------------------------------------------------

    pub fn job(&self, id: i64) -> Result<Option<JobRow>> {
        let sql = format!("SELECT {} FROM jobs WHERE id = ?1", rows::JOB_COLUMNS);
        self.conn.query_row(&sql, [id], rows::job_row).optional()?.transpose()
    }

    /// Jobs matching `filter`, newest first, at most `filter.limit`.
    pub fn jobs(&self, filter: &JobFilter) -> Result<Vec<JobRow>> {
        let (clause, args) = filter.where_clause();
        let sql = format!("SELECT {} FROM jobs {clause} ORDER BY id DESC LIMIT {}", rows::JOB_COLUMNS, filter.limit);
        let mut stmt = self.conn.prepare(&sql)?;
        let rows = stmt.query_map(rusqlite::params_from_iter(args), rows::job_row)?;
        rows.map(|r| r?).collect()
    }

    /// How many jobs match `filter` (its `limit` and `before_id` aside).
    pub fn count_jobs(&self, filter: &JobFilter) -> Result<u64> {
        let filter = JobFilter { before_id: None, ..filter.clone() };
        let (clause, args) = filter.where_clause();
        let sql = format!("SELECT count(*) FROM jobs {clause}");
        let n: i64 = self.conn.query_row(&sql, rusqlite::params_from_iter(args), |r| r.get(0))?;
        Ok(n as u64)
    }

    /// Every token, revoked and expired ones included, in id order.
    pub fn tokens(&self) -> Result<Vec<TokenRow>> {
        let sql = format!("SELECT {} FROM tokens ORDER BY id", rows::TOKEN_COLUMNS);
        let mut stmt = self.conn.prepare(&sql)?;
        let rows = stmt.query_map([], rows::token_row)?;
        rows.map(|r| r?).collect()
    }

    pub fn projects(&self) -> Result<Vec<ProjectRow>> {
        let mut stmt = self.conn.prepare("SELECT name, priority_class_max FROM projects ORDER BY name")?;
        let rows = stmt.query_map([], |r| Ok(ProjectRow { name: r.get(0)?, priority_class_max: r.get(1)? }))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Jobs that are not finished (pending, running, stopping), in submission order: what
    /// a restarting server hands back to the core.
    pub fn unfinished_jobs(&self) -> Result<Vec<JobRow>> {
        let sql = format!(
            "SELECT {} FROM jobs WHERE state IN ('pending', 'running', 'preempting', 'stopping') ORDER BY id",
            rows::JOB_COLUMNS
        );
        let mut stmt = self.conn.prepare(&sql)?;
        let rows = stmt.query_map([], rows::job_row)?;
        rows.map(|r| r?).collect()
    }

    /// A job's event log, oldest first.
    pub fn events(&self, job: i64) -> Result<Vec<EventRow>> {
        let mut stmt = self
            .conn
            .prepare("SELECT id, job_id, at_ms, kind, reason, message FROM job_events WHERE job_id = ?1 ORDER BY id")?;
        let rows = stmt.query_map([job], rows::event_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    pub fn quotas(&self) -> Result<Vec<QuotaRow>> {
        let mut stmt = self.conn.prepare(
            "SELECT account_kind, account, gpus_max, cpu_millis_max, memory_mib_max FROM quotas ORDER BY account_kind, account",
        )?;
        let rows = stmt.query_map([], rows::quota_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Fair sharing's saved recent averages (`Tx::replace_recent_usage`), by account.
    pub fn recent_usage(&self) -> Result<Vec<RecentUsageRow>> {
        let mut stmt = self.conn.prepare(
            "SELECT account_kind, account, gpu_milli, cpu_millis, memory_mib, as_of_ms FROM recent_usage
             ORDER BY account_kind, account",
        )?;
        let rows = stmt.query_map([], |r| {
            Ok(RecentUsageRow {
                account_kind: r.get(0)?,
                account: r.get(1)?,
                gpu_milli: r.get::<_, i64>(2)? as u64,
                cpu_millis: r.get::<_, i64>(3)? as u64,
                memory_mib: r.get::<_, i64>(4)? as u64,
                as_of_ms: r.get::<_, i64>(5)? as u64,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Fair-share weights other than 1, by account.
    pub fn fair_share_weights(&self) -> Result<Vec<WeightRow>> {
        let mut stmt = self
            .conn
            .prepare("SELECT account_kind, account, weight FROM fair_share_weights ORDER BY account_kind, account")?;
        let rows = stmt.query_map([], |r| {
            Ok(WeightRow { account_kind: r.get(0)?, account: r.get(1)?, weight: r.get::<_, i64>(2)? as u32 })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    pub fn cohorts(&self) -> Result<Vec<CohortRow>> {
        let mut stmt = self.conn.prepare("SELECT name, members_json FROM cohorts ORDER BY name")?;
        let rows = stmt.query_map([], |r| Ok(CohortRow { name: r.get(0)?, members_json: r.get(1)? }))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    pub fn priority_classes(&self) -> Result<Vec<PriorityClassRow>> {
        let mut stmt = self.conn.prepare(
            "SELECT name, value, preemption_policy, global_default, description, min_run_before_preemption_seconds,
               preemptions_per_hour_max, overrides_preemption_protection, preemption_delay_seconds
             FROM priority_classes ORDER BY name",
        )?;
        let rows = stmt.query_map([], rows::class_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Counts of jobs per state.
    pub fn state_counts(&self) -> Result<Vec<(JobState, u64)>> {
        let mut stmt = self.conn.prepare("SELECT state, count(*) FROM jobs GROUP BY state ORDER BY state")?;
        let rows = stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)? as u64)))?;
        let mut out = Vec::new();
        for row in rows {
            let (state, n) = row?;
            let state =
                JobState::parse(&state).ok_or(StoreError::Corrupt { id: 0, column: "state", value: state.clone() })?;
            out.push((state, n));
        }
        Ok(out)
    }
}

/// A write transaction. Dropped without [`Tx::commit`], it rolls back.
pub struct Tx<'a> {
    tx: rusqlite::Transaction<'a>,
}

impl Tx<'_> {
    /// Inserts a job as pending with its `submitted` event; returns its id. Ids are never
    /// reused, even after the newest job is deleted (AUTOINCREMENT).
    pub fn insert_job(&mut self, job: &NewJob) -> Result<i64> {
        self.tx
            .prepare_cached(
                "INSERT INTO jobs (name, user, project, priority, priority_class, spec_json, state, submitted_at_ms,
                   pending_since_ms, min_run_before_preemption_seconds, preemptions_per_hour_max,
                   overrides_preemption_protection, preemption_delay_seconds)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'pending', ?7, ?7, ?8, ?9, ?10, ?11)",
            )?
            .execute(params![
                job.name,
                job.user,
                job.project,
                job.priority,
                job.priority_class,
                job.spec_json,
                job.submitted_at_ms as i64,
                job.min_run_before_preemption_seconds as i64,
                job.preemptions_per_hour_max,
                job.overrides_preemption_protection,
                job.preemption_delay_seconds as i64,
            ])?;
        let id = self.tx.last_insert_rowid();
        self.event(&NewEvent {
            job_id: id,
            at_ms: job.submitted_at_ms,
            kind: "submitted".into(),
            reason: None,
            message: format!("submitted by {} to project {} at priority {}", job.user, job.project, job.priority),
        })?;
        Ok(id)
    }

    /// Appends to a job's event log.
    pub fn event(&mut self, event: &NewEvent) -> Result<()> {
        self.tx
            .prepare_cached(
                "INSERT INTO job_events (job_id, at_ms, kind, reason, message) VALUES (?1, ?2, ?3, ?4, ?5)",
            )?
            .execute(params![event.job_id, event.at_ms as i64, event.kind, event.reason, event.message])?;
        Ok(())
    }

    /// Moves a job to `state` (and records why in its log).
    pub fn set_state(&mut self, id: i64, state: JobState, event: &NewEvent) -> Result<()> {
        let finished = state.is_finished().then_some(event.at_ms as i64);
        self.tx
            .prepare_cached(
                "UPDATE jobs SET state = ?2, finished_at_ms = coalesce(?3, finished_at_ms),
                   waited_ms = waited_ms + CASE WHEN ?3 IS NOT NULL AND pending_since_ms IS NOT NULL
                     THEN max(0, ?3 - pending_since_ms) ELSE 0 END,
                   pending_since_ms = CASE WHEN ?2 = 'pending' THEN coalesce(pending_since_ms, ?4)
                     WHEN ?3 IS NOT NULL THEN NULL ELSE pending_since_ms END
                 WHERE id = ?1",
            )?
            .execute(params![id, state.as_str(), finished, event.at_ms as i64])?;
        self.event(event)
    }

    /// A run began: the job holds `placement_json` from `started_at_ms`.
    pub fn set_running(&mut self, id: i64, run: &RunRow, event: &NewEvent) -> Result<()> {
        self.tx
            .prepare_cached(
                "UPDATE jobs SET state = 'running', started_at_ms = ?2,
                   first_started_at_ms = coalesce(first_started_at_ms, ?2), placement_json = ?3, run_dir = ?4,
                   waited_ms = waited_ms + max(0, ?2 - coalesce(pending_since_ms, ?2)), pending_since_ms = NULL,
                   processes_json = NULL, exit_code = NULL, exit_signal = NULL, retry_at_ms = NULL,
                   stop_cause = NULL, stop_requested_at_ms = NULL, kill_at_ms = NULL, preemptor_id = NULL,
                   hold_json = NULL
                 WHERE id = ?1",
            )?
            .execute(params![id, run.started_at_ms as i64, run.placement_json, run.run_dir])?;
        self.event(event)
    }

    /// The run was asked to stop (`state` is `preempting` or `stopping`): records why and
    /// its deadline, so that a restart keeps both.
    pub fn set_stopping(&mut self, id: i64, state: JobState, stop: &StopRow, event: &NewEvent) -> Result<()> {
        self.tx
            .prepare_cached(
                "UPDATE jobs SET state = ?2, stop_cause = ?3, stop_requested_at_ms = ?4, kill_at_ms = ?5, preemptor_id = ?6
                 WHERE id = ?1",
            )?
            .execute(params![
                id,
                state.as_str(),
                stop.cause,
                stop.requested_at_ms as i64,
                stop.kill_at_ms as i64,
                stop.preemptor_id
            ])?;
        self.event(event)
    }

    /// A pending preemptor's hold (opaque JSON), or `None` when it has none any more.
    pub fn set_hold(&mut self, id: i64, hold_json: Option<&str>) -> Result<()> {
        self.tx.prepare_cached("UPDATE jobs SET hold_json = ?2 WHERE id = ?1")?.execute(params![id, hold_json])?;
        Ok(())
    }

    /// The run's supervisor processes, once spawned (opaque JSON of the server's).
    pub fn set_processes(&mut self, id: i64, processes_json: &str) -> Result<()> {
        self.tx
            .prepare_cached("UPDATE jobs SET processes_json = ?2 WHERE id = ?1")?
            .execute(params![id, processes_json])?;
        Ok(())
    }

    /// A run ended. Counters add up over runs; `runtime_ms` is this run's length.
    pub fn end_run(&mut self, id: i64, end: &RunEnd, event: &NewEvent) -> Result<()> {
        let finished = end.state.is_finished().then_some(event.at_ms as i64);
        self.tx
            .prepare_cached(
                "UPDATE jobs SET state = ?2, runtime_done_ms = runtime_done_ms + ?3,
                   restart_count = restart_count + ?4, preemptions = preemptions + ?5, failures = failures + ?6,
                   exit_code = ?7, exit_signal = ?8, processes_json = NULL, placement_json = NULL,
                   finished_at_ms = coalesce(?9, finished_at_ms), retry_at_ms = ?10,
                   pending_since_ms = CASE WHEN ?2 = 'pending' THEN ?11 ELSE NULL END,
                   stop_cause = NULL, stop_requested_at_ms = NULL, kill_at_ms = NULL, preemptor_id = NULL
                 WHERE id = ?1",
            )?
            .execute(params![
                id,
                end.state.as_str(),
                end.runtime_ms as i64,
                u32::from(end.will_restart),
                u32::from(end.preempted),
                u32::from(end.failed),
                end.exit_code,
                end.exit_signal,
                finished,
                end.retry_at_ms.map(|t| t as i64),
                event.at_ms as i64,
            ])?;
        self.event(event)
    }

    pub fn set_checkpoint(&mut self, id: i64, at_ms: u64) -> Result<()> {
        self.tx
            .prepare_cached(
                "UPDATE jobs SET last_checkpoint_ms = max(coalesce(last_checkpoint_ms, 0), ?2) WHERE id = ?1",
            )?
            .execute(params![id, at_ms as i64])?;
        Ok(())
    }

    pub fn set_quota(&mut self, quota: &QuotaRow) -> Result<()> {
        self.tx
            .prepare_cached(
                "INSERT INTO quotas (account_kind, account, gpus_max, cpu_millis_max, memory_mib_max) VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT (account_kind, account) DO UPDATE SET gpus_max = ?3, cpu_millis_max = ?4, memory_mib_max = ?5",
            )?
            .execute(params![
                quota.account_kind,
                quota.account,
                quota.gpus_max,
                quota.cpu_millis_max.map(|v| v as i64),
                quota.memory_mib_max.map(|v| v as i64)
            ])?;
        Ok(())
    }

    pub fn delete_quota(&mut self, account_kind: &str, account: &str) -> Result<bool> {
        let n = self
            .tx
            .prepare_cached("DELETE FROM quotas WHERE account_kind = ?1 AND account = ?2")?
            .execute(params![account_kind, account])?;
        Ok(n > 0)
    }

    pub fn set_cohort(&mut self, cohort: &CohortRow) -> Result<()> {
        self.tx
            .prepare_cached(
                "INSERT INTO cohorts (name, members_json) VALUES (?1, ?2)
                 ON CONFLICT (name) DO UPDATE SET members_json = ?2",
            )?
            .execute(params![cohort.name, cohort.members_json])?;
        Ok(())
    }

    /// Fair sharing's recent averages, all of them at once: what was saved before is
    /// replaced, accounts left out are forgotten.
    pub fn replace_recent_usage(&mut self, rows: &[RecentUsageRow]) -> Result<()> {
        self.tx.execute("DELETE FROM recent_usage", [])?;
        let mut insert = self.tx.prepare_cached(
            "INSERT INTO recent_usage (account_kind, account, gpu_milli, cpu_millis, memory_mib, as_of_ms)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )?;
        for row in rows {
            insert.execute(params![
                row.account_kind,
                row.account,
                row.gpu_milli as i64,
                row.cpu_millis as i64,
                row.memory_mib as i64,
                row.as_of_ms as i64
            ])?;
        }
        Ok(())
    }

    pub fn set_fair_share_weight(&mut self, row: &WeightRow) -> Result<()> {
        self.tx
            .prepare_cached(
                "INSERT INTO fair_share_weights (account_kind, account, weight) VALUES (?1, ?2, ?3)
                 ON CONFLICT (account_kind, account) DO UPDATE SET weight = ?3",
            )?
            .execute(params![row.account_kind, row.account, i64::from(row.weight)])?;
        Ok(())
    }

    /// The account's weight back to the default (1); `false` if it had none other.
    pub fn delete_fair_share_weight(&mut self, account_kind: &str, account: &str) -> Result<bool> {
        let n = self
            .tx
            .prepare_cached("DELETE FROM fair_share_weights WHERE account_kind = ?1 AND account = ?2")?
            .execute(params![account_kind, account])?;
        Ok(n > 0)
    }

    pub fn delete_cohort(&mut self, name: &str) -> Result<bool> {
        let n = self.tx.prepare_cached("DELETE FROM cohorts WHERE name = ?1")?.execute(params![name])?;
        Ok(n > 0)
    }

    pub fn upsert_priority_class(&mut self, class: &PriorityClassRow) -> Result<()> {
        self.tx
            .prepare_cached(
                "INSERT INTO priority_classes (name, value, preemption_policy, global_default, description,
                   min_run_before_preemption_seconds, preemptions_per_hour_max, overrides_preemption_protection,
                   preemption_delay_seconds)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
                 ON CONFLICT (name) DO UPDATE SET value = ?2, preemption_policy = ?3, global_default = ?4, description = ?5,
                   min_run_before_preemption_seconds = ?6, preemptions_per_hour_max = ?7,
                   overrides_preemption_protection = ?8, preemption_delay_seconds = ?9",
            )?
            .execute(params![
                class.name,
                class.value,
                class.preemption_policy,
                class.global_default,
                class.description,
                class.min_run_before_preemption_seconds as i64,
                class.preemptions_per_hour_max,
                class.overrides_preemption_protection,
                class.preemption_delay_seconds as i64,
            ])?;
        Ok(())
    }

    /// Stores a new token; returns its id.
    pub fn insert_token(&mut self, token: &NewToken) -> Result<i64> {
        self.tx
            .prepare_cached(
                "INSERT INTO tokens (name, secret_sha256, user, project, role, created_at_ms, expires_at_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            )?
            .execute(params![
                token.name,
                token.secret_sha256,
                token.user,
                token.project,
                token.role.as_str(),
                token.created_at_ms as i64,
                token.expires_at_ms.map(|t| t as i64)
            ])?;
        Ok(self.tx.last_insert_rowid())
    }

    /// Revokes a token; `false` if there is no such token or it was already revoked.
    pub fn revoke_token(&mut self, id: i64, at_ms: u64) -> Result<bool> {
        let n = self
            .tx
            .prepare_cached("UPDATE tokens SET revoked_at_ms = ?2 WHERE id = ?1 AND revoked_at_ms IS NULL")?
            .execute(params![id, at_ms as i64])?;
        Ok(n > 0)
    }

    pub fn set_project(&mut self, project: &ProjectRow) -> Result<()> {
        self.tx
            .prepare_cached(
                "INSERT INTO projects (name, priority_class_max) VALUES (?1, ?2)
                 ON CONFLICT (name) DO UPDATE SET priority_class_max = ?2",
            )?
            .execute(params![project.name, project.priority_class_max])?;
        Ok(())
    }

    /// Makes run directories and recorded processes absolute: stores written by servers
    /// started with a relative data directory (`./fairway-data`) hold paths relative to
    /// wherever that server ran. A relative `run_dir` that ends in `jobs/<id>/runs/<n>` is
    /// rewritten under `data_dir`; returns how many jobs changed.
    pub fn absolutize_run_dirs(&mut self, data_dir: &Path) -> Result<usize> {
        let rows: Vec<(i64, String, Option<String>)> = {
            let mut stmt = self.tx.prepare(
                "SELECT id, run_dir, processes_json FROM jobs WHERE run_dir IS NOT NULL AND run_dir NOT LIKE '/%'",
            )?;
            stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?.collect::<Result<_, _>>()?
        };
        let mut changed = 0;
        for (id, run_dir, processes) in rows {
            let Some(absolute) = absolute_run_dir(data_dir, id, &run_dir) else { continue };
            let processes = processes.map(|p| absolutize_processes(&p, &run_dir, &absolute));
            self.tx
                .prepare_cached("UPDATE jobs SET run_dir = ?2, processes_json = ?3 WHERE id = ?1")?
                .execute(params![id, absolute, processes])?;
            changed += 1;
        }
        Ok(changed)
    }

    /// Makes everything in the transaction durable.
    pub fn commit(self) -> Result<()> {
        Ok(self.tx.commit()?)
    }
}

/// `data_dir/jobs/<id>/runs/<n>` for a relative run directory that names the job's own
/// run; `None` for anything else (left as it is).
fn absolute_run_dir(data_dir: &Path, id: i64, run_dir: &str) -> Option<String> {
    let parts: Vec<&str> = run_dir.split('/').filter(|p| !p.is_empty() && *p != ".").collect();
    let [.., jobs, job, runs, run] = parts.as_slice() else { return None };
    let ours = *jobs == "jobs" && *job == id.to_string() && *runs == "runs" && run.parse::<u32>().is_ok();
    ours.then(|| data_dir.join("jobs").join(job).join("runs").join(run).display().to_string())
}

/// The recorded processes (opaque JSON) with `old` run-directory prefixes replaced.
fn absolutize_processes(json: &str, old: &str, new: &str) -> String {
    let Ok(mut value) = serde_json::from_str::<serde_json::Value>(json) else { return json.to_owned() };
    if let Some(list) = value.as_array_mut() {
        for record in list {
            if let Some(dir) = record.get("run_dir").and_then(|d| d.as_str())
                && let Some(rest) = dir.strip_prefix(old)
            {
                record["run_dir"] = serde_json::Value::String(format!("{new}{rest}"));
            }
        }
    }
    value.to_string()
}

fn configure(conn: &Connection) -> rusqlite::Result<()> {
    // WAL: readers never block the writer. FULL: the WAL is synced at every commit, so an
    // acknowledged submission survives a crash or power loss.
    let mode: String = conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(rusqlite::Error::InvalidParameterName(format!("journal_mode is {mode}, WAL required")));
    }
    conn.execute_batch("PRAGMA synchronous = FULL; PRAGMA foreign_keys = ON;")?;
    conn.busy_timeout(Duration::from_secs(5))?;
    Ok(())
}

fn open_error(path: &Path, source: rusqlite::Error) -> StoreError {
    StoreError::Open { path: path.display().to_string(), source }
}
