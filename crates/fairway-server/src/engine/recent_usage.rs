//! Fair sharing's memory across restarts: each account's recent average holding
//! (`fairway_core::RecentUsage`) is saved in the store now and then, at shutdown and before
//! a rebuild, and handed back to the core once the jobs are restored. A tenant that burst
//! before a restart still yields after it; what happened since the last save (at most
//! `RECENT_USAGE_SAVE_EVERY_MS`) is what a crash forgets.

use fairway_core::{Event, RecentUsage, Time};
use fairway_store::RecentUsageRow;

use super::{AccountKind, Engine};
use crate::ServerError;

/// How often, at most, the recent averages are saved while the server runs. With a
/// half-life of hours or days a minute's drift does not change who goes first.
pub(crate) const RECENT_USAGE_SAVE_EVERY_MS: u64 = 60_000;

impl Engine {
    /// Writes every account's recent average as of `now` (nothing with fair sharing off).
    /// A failed write degrades the engine like any other (`Engine::write`).
    pub(crate) fn save_recent_usage(&mut self, now: u64) {
        if self.config.file.fair_share.is_none() {
            return;
        }
        let rows: Vec<RecentUsageRow> = self
            .core
            .recent_usage(Time(now))
            .into_iter()
            .filter_map(|(account, recent)| {
                let (kind, name) = self.interner.account_name(account)?;
                // Cohorts are charged too, but never ordered by share.
                matches!(kind, AccountKind::User | AccountKind::Project).then(|| RecentUsageRow {
                    account_kind: kind.as_str().to_owned(),
                    account: name.to_owned(),
                    gpu_milli: recent.gpu_milli,
                    cpu_millis: recent.cpu_millis,
                    memory_mib: recent.memory_mib,
                    as_of_ms: now,
                })
            })
            .collect();
        let _ = self.write("fair sharing's recent usage", |tx| tx.replace_recent_usage(&rows));
    }

    /// Hands the saved recent averages back to the core, after every job is restored (the
    /// core lets them decay from when they were saved toward what each account holds now).
    pub(crate) fn restore_recent_usage(&mut self) -> Result<(), ServerError> {
        if self.config.file.fair_share.is_none() {
            return Ok(());
        }
        let now = Time(self.now_ms());
        for row in self.store.recent_usage()? {
            let Some(kind) = AccountKind::parse(&row.account_kind) else { continue };
            let account = self.account(kind, &row.account).map_err(|e| ServerError::Config(e.message))?;
            let recent =
                RecentUsage { gpu_milli: row.gpu_milli, cpu_millis: row.cpu_millis, memory_mib: row.memory_mib };
            self.core
                .apply(Event::RestoreRecentUsage { account, recent, as_of: Time(row.as_of_ms) }, now)
                .map_err(|e| ServerError::Config(e.to_string()))?;
        }
        Ok(())
    }
}
