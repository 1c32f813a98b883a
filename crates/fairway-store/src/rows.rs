//! Row types: what the store reads and writes, as plain data.

use rusqlite::Row;
use serde::{Deserialize, Serialize};

use crate::{Result, StoreError};

/// A job's lifecycle state as stored. `preempting` and `stopping` still hold GPUs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JobState {
    Pending,
    Running,
    Preempting,
    Stopping,
    Succeeded,
    Failed,
    Cancelled,
}

impl JobState {
    pub const ALL: [JobState; 7] = [
        JobState::Pending,
        JobState::Running,
        JobState::Preempting,
        JobState::Stopping,
        JobState::Succeeded,
        JobState::Failed,
        JobState::Cancelled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Pending => "pending",
            JobState::Running => "running",
            JobState::Preempting => "preempting",
            JobState::Stopping => "stopping",
            JobState::Succeeded => "succeeded",
            JobState::Failed => "failed",
            JobState::Cancelled => "cancelled",
        }
    }

    pub fn parse(s: &str) -> Option<JobState> {
        JobState::ALL.into_iter().find(|st| st.as_str() == s)
    }

    /// Finished for good: the job will not run again.
    pub fn is_finished(self) -> bool {
        matches!(self, JobState::Succeeded | JobState::Failed | JobState::Cancelled)
    }
}

/// A submission, before it has an id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewJob {
    pub name: String,
    pub user: String,
    pub project: String,
    pub priority: i32,
    pub priority_class: Option<String>,
    /// The server's wire spec, opaque to the store.
    pub spec_json: String,
    pub submitted_at_ms: u64,
    /// Rule 1's protection, from the job's class when it was accepted.
    pub min_run_before_preemption_seconds: u64,
    pub preemptions_per_hour_max: Option<u32>,
    pub overrides_preemption_protection: bool,
    pub preemption_delay_seconds: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct JobRow {
    pub id: i64,
    pub name: String,
    pub user: String,
    pub project: String,
    pub priority: i32,
    pub priority_class: Option<String>,
    pub spec_json: String,
    pub state: JobState,
    pub submitted_at_ms: u64,
    pub first_started_at_ms: Option<u64>,
    pub started_at_ms: Option<u64>,
    pub finished_at_ms: Option<u64>,
    pub placement_json: Option<String>,
    pub run_dir: Option<String>,
    /// The run's supervisor processes (one per replica), as the server wrote them.
    pub processes_json: Option<String>,
    /// Runs started after the first.
    pub restart_count: u32,
    pub preemptions: u32,
    pub failures: u32,
    pub runtime_done_ms: u64,
    pub last_checkpoint_ms: Option<u64>,
    pub exit_code: Option<i32>,
    pub exit_signal: Option<i32>,
    /// Set while the server has asked the run to stop: why, when, and when it is killed.
    pub stop: Option<StopRow>,
    /// After a failed run with retries left: not to be started before this time (backoff).
    pub retry_at_ms: Option<u64>,
    /// A pending preemptor's hold: the GPUs reserved for it while its victims leave, and
    /// those victims (the server's opaque JSON).
    pub hold_json: Option<String>,
    /// Time spent pending before the current state: the first wait and every re-wait after
    /// a preemption or a retry.
    pub waited_ms: u64,
    /// Since when it waits, while pending.
    pub pending_since_ms: Option<u64>,
    /// Rule 1's protection, from the job's class when it was accepted.
    pub min_run_before_preemption_seconds: u64,
    pub preemptions_per_hour_max: Option<u32>,
    pub overrides_preemption_protection: bool,
    pub preemption_delay_seconds: u64,
}

impl JobRow {
    /// All the time it has spent waiting, up to `now` if it waits now.
    pub fn wait_ms(&self, now_ms: u64) -> u64 {
        self.waited_ms + self.pending_since_ms.map_or(0, |since| now_ms.saturating_sub(since))
    }
}

/// A stop under way: the run was asked to end (`preempted`, `cancelled`, `runtime_limit`).
/// Stored so that a restart keeps the original deadline instead of granting a fresh grace
/// period, and judges the run's exit as the stop it was.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct StopRow {
    pub cause: String,
    pub requested_at_ms: u64,
    pub kill_at_ms: u64,
    /// The job the GPUs are freed for, when preempted.
    pub preemptor_id: Option<i64>,
}

/// The start of a run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunRow {
    pub started_at_ms: u64,
    pub placement_json: String,
    pub run_dir: String,
}

/// The end of a run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunEnd {
    /// `pending` when it will run again, else a finished state.
    pub state: JobState,
    pub runtime_ms: u64,
    pub will_restart: bool,
    pub preempted: bool,
    pub failed: bool,
    pub exit_code: Option<i32>,
    pub exit_signal: Option<i32>,
    /// When the job may run again, if it must wait (a retry's backoff).
    pub retry_at_ms: Option<u64>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewEvent {
    pub job_id: i64,
    pub at_ms: u64,
    /// A stable, machine-readable kind: `submitted`, `started`, `preempting`, `requeued`, …
    pub kind: String,
    /// A machine-readable reason label, where one applies.
    pub reason: Option<String>,
    pub message: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct EventRow {
    pub id: i64,
    pub job_id: i64,
    pub at_ms: u64,
    pub kind: String,
    pub reason: Option<String>,
    pub message: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuotaRow {
    /// `user` or `project`.
    pub account_kind: String,
    pub account: String,
    pub gpus_max: Option<u32>,
    pub cpu_millis_max: Option<u64>,
    pub memory_mib_max: Option<u64>,
}

/// An account's recent average holding for fair sharing (`fairway_core::RecentUsage`), as
/// of `as_of_ms`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecentUsageRow {
    /// `user` or `project`.
    pub account_kind: String,
    pub account: String,
    pub gpu_milli: u64,
    pub cpu_millis: u64,
    pub memory_mib: u64,
    pub as_of_ms: u64,
}

/// An account's fair-share weight (other than the default 1).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WeightRow {
    /// `user` or `project`.
    pub account_kind: String,
    pub account: String,
    pub weight: u32,
}

/// A cohort and its members, as JSON (`fairway_spec::MemberDoc` list; the store does not
/// read it).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CohortRow {
    pub name: String,
    pub members_json: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PriorityClassRow {
    pub name: String,
    pub value: i32,
    pub preemption_policy: String,
    pub global_default: bool,
    pub description: Option<String>,
    pub min_run_before_preemption_seconds: u64,
    pub preemptions_per_hour_max: Option<u32>,
    pub overrides_preemption_protection: bool,
    pub preemption_delay_seconds: u64,
}

/// What a token may do. `admin` may do everything; `submitter` submits jobs and manages
/// its own; `viewer` only reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Viewer,
    Submitter,
    Admin,
}

impl Role {
    pub const ALL: [Role; 3] = [Role::Viewer, Role::Submitter, Role::Admin];

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Submitter => "submitter",
            Role::Admin => "admin",
        }
    }

    pub fn parse(s: &str) -> Option<Role> {
        Role::ALL.into_iter().find(|r| r.as_str() == s)
    }
}

/// A new bearer token. Only its SHA-256 digest is stored: the secret is shown once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewToken {
    pub name: String,
    /// Lowercase hex of SHA-256 of the secret.
    pub secret_sha256: String,
    pub user: String,
    pub project: String,
    pub role: Role,
    pub created_at_ms: u64,
    pub expires_at_ms: Option<u64>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TokenRow {
    pub id: i64,
    pub name: String,
    pub secret_sha256: String,
    pub user: String,
    pub project: String,
    pub role: Role,
    pub created_at_ms: u64,
    pub expires_at_ms: Option<u64>,
    pub revoked_at_ms: Option<u64>,
}

/// Per-project settings an admin sets through the API.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProjectRow {
    pub name: String,
    /// The highest priority class the project's tokens may use; `None`: the server default.
    pub priority_class_max: Option<String>,
}

/// Which jobs to list. Every field narrows; `limit` caps the answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobFilter {
    pub states: Vec<JobState>,
    pub user: Option<String>,
    pub project: Option<String>,
    pub priority_class: Option<String>,
    pub priority_min: Option<i32>,
    pub name: Option<String>,
    /// Only jobs with a smaller id (the cursor of the previous page).
    pub before_id: Option<i64>,
    pub limit: u32,
}

impl Default for JobFilter {
    fn default() -> Self {
        JobFilter {
            states: Vec::new(),
            user: None,
            project: None,
            priority_class: None,
            priority_min: None,
            name: None,
            before_id: None,
            limit: 1000,
        }
    }
}

impl JobFilter {
    pub(crate) fn where_clause(&self) -> (String, Vec<rusqlite::types::Value>) {
        use rusqlite::types::Value;
        let mut terms = Vec::new();
        let mut args: Vec<Value> = Vec::new();
        if !self.states.is_empty() {
            let marks: Vec<String> = self
                .states
                .iter()
                .map(|s| {
                    args.push(Value::Text(s.as_str().into()));
                    format!("?{}", args.len())
                })
                .collect();
            terms.push(format!("state IN ({})", marks.join(", ")));
        }
        let mut eq = |column: &str, value: &Option<String>| {
            if let Some(v) = value {
                args.push(Value::Text(v.clone()));
                terms.push(format!("{column} = ?{}", args.len()));
            }
        };
        eq("user", &self.user);
        eq("project", &self.project);
        eq("priority_class", &self.priority_class);
        eq("name", &self.name);
        if let Some(p) = self.priority_min {
            args.push(Value::Integer(p.into()));
            terms.push(format!("priority >= ?{}", args.len()));
        }
        if let Some(id) = self.before_id {
            args.push(Value::Integer(id));
            terms.push(format!("id < ?{}", args.len()));
        }
        let clause = if terms.is_empty() { String::new() } else { format!("WHERE {}", terms.join(" AND ")) };
        (clause, args)
    }
}

pub(crate) const JOB_COLUMNS: &str = "id, name, user, project, priority, priority_class, spec_json, state, \
    submitted_at_ms, first_started_at_ms, started_at_ms, finished_at_ms, placement_json, run_dir, \
    processes_json, restart_count, preemptions, failures, runtime_done_ms, last_checkpoint_ms, exit_code, exit_signal, \
    stop_cause, stop_requested_at_ms, kill_at_ms, preemptor_id, retry_at_ms, hold_json, waited_ms, pending_since_ms, \
    min_run_before_preemption_seconds, preemptions_per_hour_max, overrides_preemption_protection, preemption_delay_seconds";

/// Reads one job row; a state the schema should have prevented is reported, not guessed.
pub(crate) fn job_row(r: &Row<'_>) -> rusqlite::Result<Result<JobRow>> {
    let id: i64 = r.get(0)?;
    let state: String = r.get(7)?;
    let Some(state) = JobState::parse(&state) else {
        return Ok(Err(StoreError::Corrupt { id, column: "state", value: state }));
    };
    let u = |v: Option<i64>| v.map(|v| v as u64);
    Ok(Ok(JobRow {
        id,
        name: r.get(1)?,
        user: r.get(2)?,
        project: r.get(3)?,
        priority: r.get(4)?,
        priority_class: r.get(5)?,
        spec_json: r.get(6)?,
        state,
        submitted_at_ms: r.get::<_, i64>(8)? as u64,
        first_started_at_ms: u(r.get(9)?),
        started_at_ms: u(r.get(10)?),
        finished_at_ms: u(r.get(11)?),
        placement_json: r.get(12)?,
        run_dir: r.get(13)?,
        processes_json: r.get(14)?,
        restart_count: r.get(15)?,
        preemptions: r.get(16)?,
        failures: r.get(17)?,
        runtime_done_ms: r.get::<_, i64>(18)? as u64,
        last_checkpoint_ms: u(r.get(19)?),
        exit_code: r.get(20)?,
        exit_signal: r.get(21)?,
        stop: match r.get::<_, Option<String>>(22)? {
            Some(cause) => Some(StopRow {
                cause,
                requested_at_ms: r.get::<_, Option<i64>>(23)?.unwrap_or(0) as u64,
                kill_at_ms: r.get::<_, Option<i64>>(24)?.unwrap_or(0) as u64,
                preemptor_id: r.get(25)?,
            }),
            None => None,
        },
        retry_at_ms: u(r.get(26)?),
        hold_json: r.get(27)?,
        waited_ms: r.get::<_, i64>(28)? as u64,
        pending_since_ms: u(r.get(29)?),
        min_run_before_preemption_seconds: r.get::<_, i64>(30)? as u64,
        preemptions_per_hour_max: r.get(31)?,
        overrides_preemption_protection: r.get(32)?,
        preemption_delay_seconds: r.get::<_, i64>(33)? as u64,
    }))
}

pub(crate) fn event_row(r: &Row<'_>) -> rusqlite::Result<EventRow> {
    Ok(EventRow {
        id: r.get(0)?,
        job_id: r.get(1)?,
        at_ms: r.get::<_, i64>(2)? as u64,
        kind: r.get(3)?,
        reason: r.get(4)?,
        message: r.get(5)?,
    })
}

pub(crate) fn quota_row(r: &Row<'_>) -> rusqlite::Result<QuotaRow> {
    Ok(QuotaRow {
        account_kind: r.get(0)?,
        account: r.get(1)?,
        gpus_max: r.get(2)?,
        cpu_millis_max: r.get::<_, Option<i64>>(3)?.map(|v| v as u64),
        memory_mib_max: r.get::<_, Option<i64>>(4)?.map(|v| v as u64),
    })
}

pub(crate) fn class_row(r: &Row<'_>) -> rusqlite::Result<PriorityClassRow> {
    Ok(PriorityClassRow {
        name: r.get(0)?,
        value: r.get(1)?,
        preemption_policy: r.get(2)?,
        global_default: r.get(3)?,
        description: r.get(4)?,
        min_run_before_preemption_seconds: r.get::<_, i64>(5)? as u64,
        preemptions_per_hour_max: r.get(6)?,
        overrides_preemption_protection: r.get(7)?,
        preemption_delay_seconds: r.get::<_, i64>(8)? as u64,
    })
}

pub(crate) const TOKEN_COLUMNS: &str =
    "id, name, secret_sha256, user, project, role, created_at_ms, expires_at_ms, revoked_at_ms";

pub(crate) fn token_row(r: &Row<'_>) -> rusqlite::Result<Result<TokenRow>> {
    let id: i64 = r.get(0)?;
    let role: String = r.get(5)?;
    let Some(role) = Role::parse(&role) else {
        return Ok(Err(StoreError::Corrupt { id, column: "role", value: role }));
    };
    let u = |v: Option<i64>| v.map(|v| v as u64);
    Ok(Ok(TokenRow {
        id,
        name: r.get(1)?,
        secret_sha256: r.get(2)?,
        user: r.get(3)?,
        project: r.get(4)?,
        role,
        created_at_ms: r.get::<_, i64>(6)? as u64,
        expires_at_ms: u(r.get(7)?),
        revoked_at_ms: u(r.get(8)?),
    }))
}
