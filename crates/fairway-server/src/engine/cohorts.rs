//! Cohorts: projects that lend each other idle nominal quota (see `docs/cohorts.md`). The
//! config file's cohorts win at start-up; `PUT`/`DELETE /v1/cohorts/{name}` change them
//! otherwise, and every change is checked with all the other cohorts before anything is
//! stored or applied: a project in two cohorts, a lending limit above a nominal quota and
//! the like are refused with the field and the reason, and change nothing.

use fairway_core::{AccountId, Event, NominalQuota, Time};
use fairway_spec::{CohortDoc, MemberDoc, resolve_cohorts};
use fairway_store::CohortRow;

use super::{AccountKind, Engine};
use crate::api::{CohortList, CohortMemberView, CohortSpec, CohortView};
use crate::error::{ApiError, ServerError};

impl Engine {
    /// The config file's cohorts, written over the stored ones of the same name at start-up.
    pub(crate) fn write_config_cohorts(&mut self) -> Result<(), ServerError> {
        let rows: Vec<CohortRow> = self.config.file.cohorts.iter().map(row_of).collect::<Result<_, _>>()?;
        let stored: Vec<(String, String)> = self
            .store
            .cohorts()?
            .into_iter()
            .filter_map(|row| {
                Some((row.name, members_text(&serde_json::from_str::<Vec<MemberDoc>>(&row.members_json).ok()?)))
            })
            .collect();
        let config: Vec<(String, String)> =
            self.config.file.cohorts.iter().map(|c| (c.name.clone(), members_text(&c.members))).collect();
        for line in super::admin::replaced_at_startup("cohort", &stored, &config) {
            tracing::warn!("{line}");
        }
        let mut tx = self.store.transaction()?;
        for row in &rows {
            tx.set_cohort(row)?;
        }
        tx.commit()?;
        Ok(())
    }

    /// The stored cohorts into the core: the config's first, then each other one that holds
    /// with those already taken (one made through the API that now conflicts with the config
    /// is left out, with a warning).
    pub(crate) fn load_cohorts(&mut self) -> Result<(), ServerError> {
        let from_config: Vec<&str> = self.config.file.cohorts.iter().map(|c| c.name.as_str()).collect();
        let mut stored = Vec::new();
        for row in self.store.cohorts()? {
            let members: Vec<MemberDoc> = serde_json::from_str(&row.members_json)
                .map_err(|e| ServerError::Config(format!("stored cohort {}: {e}", row.name)))?;
            stored.push(CohortDoc { name: row.name, members });
        }
        stored.sort_by_key(|c| !from_config.contains(&c.name.as_str()));
        let mut taken: Vec<CohortDoc> = Vec::new();
        self.cohorts_left_out.clear();
        for cohort in stored {
            taken.push(cohort);
            if let Err(e) = resolve_cohorts(&taken, "cohorts", &mut self.interner) {
                let left_out = taken.pop().expect("just pushed");
                // Usually the config file's cohorts, which go first; a cohort once in the
                // config and since removed from it stays stored, and counts as any other.
                // The other cohort is named; its index in this start-up's list means nothing
                // to the reader.
                let reason = e.reason.split(" (at cohorts[").next().unwrap_or(&e.reason);
                let why = format!(
                    "left out at start-up, where the config file's cohorts go first and the others by name: {reason}"
                );
                tracing::warn!("stored cohort {}: {why}", left_out.name);
                self.cohorts_left_out.insert(left_out.name, why);
            }
        }
        let places =
            resolve_cohorts(&taken, "cohorts", &mut self.interner).map_err(|e| ServerError::Config(e.to_string()))?;
        for (project, nominal) in places {
            self.apply_place(project, Some(nominal)).map_err(|e| ServerError::Config(e.message))?;
        }
        // A quota set through the API may now be below a guarantee the config file sets:
        // said, not refused (the server must start; the API refuses such changes).
        for cohort in &taken {
            if let Err(e) = self.check_guarantees(&cohort.members) {
                tracing::warn!("cohort {}: {}", cohort.name, e.message);
            }
        }
        Ok(())
    }

    /// `PUT` (with `spec`) or `DELETE` `/v1/cohorts/{name}`.
    pub(crate) fn set_cohort(&mut self, name: &str, spec: Option<CohortSpec>) -> Result<Option<CohortView>, ApiError> {
        if let Err(reason) = fairway_spec::check_account_name(name) {
            return Err(ApiError::bad_request(format!("name: {reason}")));
        }
        let mut all = self.stored_cohorts()?;
        let exists = all.iter().any(|c| c.name == name);
        // A cohort left out at start-up places nobody: its members' places, if any, are
        // another cohort's, and the others are checked without it.
        let in_effect = !self.cohorts_left_out.contains_key(name);
        let before: Vec<String> = all
            .iter()
            .find(|c| c.name == name && in_effect)
            .map(|c| c.members.iter().map(|m| m.project.clone()).collect())
            .unwrap_or_default();
        all.retain(|c| c.name != name && !self.cohorts_left_out.contains_key(&c.name));
        if let Some(spec) = &spec {
            all.push(CohortDoc { name: name.to_string(), members: spec.members.clone() });
        } else if !exists {
            return Err(ApiError::not_found_message(format!("cohort {name} does not exist")));
        }
        // The whole set, checked before anything changes: the field names this cohort's
        // place in the request where the problem is there.
        let places = resolve_cohorts(&all, "cohorts", &mut self.interner).map_err(|e| {
            let field = e.field.replacen(&format!("cohorts[{}]", all.len() - 1), "", 1);
            let field =
                if spec.is_some() && field != e.field { field.trim_start_matches('.').to_string() } else { e.field };
            ApiError::bad_request(format!("{field}: {}", e.reason))
        })?;
        if let Some(spec) = &spec {
            self.check_guarantees(&spec.members)?;
        }
        let row = spec.as_ref().map(|s| row_of(&CohortDoc { name: name.to_string(), members: s.members.clone() }));
        let row = row.transpose().map_err(|e| ApiError::internal(e.to_string()))?;
        self.write("a cohort", |tx| match &row {
            Some(row) => tx.set_cohort(row),
            None => tx.delete_cohort(name).map(|_| ()),
        })
        .map_err(|e| ApiError::store_unavailable(&e.to_string()))?;
        // Set again so that it holds, or deleted: either way no longer left out.
        self.cohorts_left_out.remove(name);
        for project in &before {
            if !spec.as_ref().is_some_and(|s| s.members.iter().any(|m| &m.project == project)) {
                let id = self.account(AccountKind::Project, project)?;
                self.apply_place(id, None)?;
            }
        }
        let cohort = self.account(AccountKind::Cohort, name)?;
        for (project, nominal) in places.into_iter().filter(|(_, n)| n.cohort == cohort) {
            self.apply_place(project, Some(nominal))?;
        }
        self.touch();
        Ok(spec.map(|_| self.cohort_view(&all.into_iter().find(|c| c.name == name).expect("just added"))))
    }

    /// No member may keep unlent more than its project's hard quota lets it use
    /// (`fairway_spec::GuaranteeBeyondCap`).
    fn check_guarantees(&self, members: &[MemberDoc]) -> Result<(), ApiError> {
        for (j, m) in members.iter().enumerate() {
            let cap =
                self.interner.account_id(AccountKind::Project, &m.project).and_then(|id| self.core.account_usage(id).1);
            if let Some(beyond) = cap.and_then(|cap| m.guarantee_beyond(cap)) {
                let reason = beyond.reason(&m.project, "`fairway quota`");
                return Err(ApiError::bad_request(format!("members[{j}].lending_limit.{}: {reason}", beyond.resource)));
            }
        }
        Ok(())
    }

    /// The place of `project` in the cohorts in effect, as stored, with its cohort's name.
    pub(crate) fn member_in_effect(&self, project: &str) -> Result<Option<(String, MemberDoc)>, ApiError> {
        let cohorts = self.stored_cohorts()?;
        Ok(cohorts.into_iter().filter(|c| !self.cohorts_left_out.contains_key(&c.name)).find_map(|c| {
            let name = c.name;
            c.members.into_iter().find(|m| m.project == project).map(|m| (name, m))
        }))
    }

    fn apply_place(&mut self, project: AccountId, nominal: Option<NominalQuota>) -> Result<(), ApiError> {
        self.core
            .apply(Event::SetNominalQuota { project, nominal }, Time(self.now_ms()))
            .map_err(|e| ApiError::bad_request(e.to_string()))
    }

    fn stored_cohorts(&self) -> Result<Vec<CohortDoc>, ApiError> {
        let rows = self.store.cohorts().map_err(|e| ApiError::store_unavailable(&e.to_string()))?;
        rows.into_iter()
            .map(|row| {
                let members = serde_json::from_str(&row.members_json)
                    .map_err(|e| ApiError::internal(format!("stored cohort {}: {e}", row.name)))?;
                Ok(CohortDoc { name: row.name, members })
            })
            .collect()
    }

    pub(crate) fn cohorts_view(&mut self) -> CohortList {
        let cohorts = self.stored_cohorts().unwrap_or_default();
        CohortList { cohorts: cohorts.iter().map(|c| self.cohort_view(c)).collect() }
    }

    fn cohort_view(&mut self, cohort: &CohortDoc) -> CohortView {
        let members = cohort
            .members
            .iter()
            .map(|m| {
                let id = self.account(AccountKind::Project, &m.project).ok();
                CohortMemberView::of(&self.core, m, id)
            })
            .collect();
        match self.cohorts_left_out.get(&cohort.name) {
            Some(why) => CohortView::left_out(&cohort.name, members, why),
            None => {
                let id = self.account(AccountKind::Cohort, &cohort.name).ok();
                CohortView::of(&self.core, &cohort.name, members, id)
            }
        }
    }
}

/// Members as the CLI takes them: `vision:4, nlp:4:lend=2`.
fn members_text(members: &[MemberDoc]) -> String {
    let text = |m: &MemberDoc| {
        let mut out = format!("{}:{}", m.project, m.nominal.gpus.map_or("-".into(), |g| g.to_string()));
        if let Some(g) = m.borrowing_limit.and_then(|l| l.gpus) {
            out.push_str(&format!(":borrow={g}"));
        }
        if let Some(g) = m.lending_limit.and_then(|l| l.gpus) {
            out.push_str(&format!(":lend={g}"));
        }
        out
    };
    members.iter().map(text).collect::<Vec<_>>().join(", ")
}

fn row_of(cohort: &CohortDoc) -> Result<CohortRow, ServerError> {
    let members_json = serde_json::to_string(&cohort.members)
        .map_err(|e| ServerError::Config(format!("cohort {}: {e}", cohort.name)))?;
    Ok(CohortRow { name: cohort.name.clone(), members_json })
}
