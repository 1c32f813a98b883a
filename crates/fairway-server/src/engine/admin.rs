//! Identities and per-project settings: the admin token of first start, tokens, and the
//! highest priority class each project may use.

use fairway_store::{NewToken, ProjectRow, Role};

use super::Engine;
use crate::ServerError;
use crate::api::{NewTokenRequest, ProjectList, ProjectSpec, ProjectView, TokenCreated};
use crate::auth;
use crate::datadir::{ADMIN_TOKEN_FILE, write_private};
use crate::error::ApiError;

/// The class non-admin tokens may use at most, unless the config says otherwise:
/// `critical` is for admins to grant.
pub const DEFAULT_PRIORITY_CLASS_MAX: &str = "high";
/// Longest user, project or token name.
const NAME_BYTES_MAX: usize = 253;

impl Engine {
    /// Makes sure `admin.token` in the data directory holds a working admin token: at first
    /// start, or when the file was deleted or its token revoked, a new one is made. Whoever
    /// can read the data directory can therefore always get admin access back, and nobody
    /// else can.
    pub(crate) fn bootstrap_admin_token(&mut self) -> Result<(), ServerError> {
        let path = self.config.data_dir.join(ADMIN_TOKEN_FILE);
        if let Ok(text) = std::fs::read_to_string(&path) {
            let secret = text.trim();
            let digest = auth::digest(secret);
            let usable = self.store.tokens()?.iter().any(|t| {
                t.secret_sha256 == digest
                    && t.role == Role::Admin
                    && t.revoked_at_ms.is_none()
                    && t.expires_at_ms.is_none_or(|e| e > self.now_ms())
            });
            if auth::is_well_formed(secret) && usable {
                return Ok(());
            }
        }
        let secret = auth::new_secret();
        let token = NewToken {
            name: "admin (data directory)".into(),
            secret_sha256: auth::digest(&secret),
            user: server_user(),
            project: "default".into(),
            role: Role::Admin,
            created_at_ms: self.now_ms(),
            expires_at_ms: None,
        };
        let mut tx = self.store.transaction()?;
        tx.insert_token(&token)?;
        tx.commit()?;
        write_private(&path, format!("{secret}\n").as_bytes())?;
        tracing::info!("admin token written to {} (readable by this user only)", path.display());
        Ok(())
    }

    /// The config file's quotas and per-project priority caps win at start-up; what was set
    /// through the API persists otherwise. The config's class names are checked here.
    pub(crate) fn write_config_settings(&mut self) -> Result<(), ServerError> {
        let classes = self.classes_with_config()?;
        let default = self.config.file.priority_class_max.clone().unwrap_or(DEFAULT_PRIORITY_CLASS_MAX.into());
        if classes.resolve(&default).is_none() {
            return Err(ServerError::Config(format!("priority_class_max: {default:?} is not a priority class")));
        }
        let mut rows = Vec::new();
        for (i, p) in self.config.file.projects.iter().enumerate() {
            if let Some(max) = &p.priority_class_max {
                if classes.resolve(max).is_none() {
                    return Err(ServerError::Config(format!(
                        "projects[{i}].priority_class_max: {max:?} is not a priority class"
                    )));
                }
                rows.push(ProjectRow { name: p.name.clone(), priority_class_max: Some(max.clone()) });
            }
        }
        let quotas: Vec<fairway_store::QuotaRow> = self
            .config
            .file
            .quotas
            .iter()
            .map(|q| {
                let (kind, account) = match (&q.project, &q.user) {
                    (Some(p), _) => ("project", p.clone()),
                    (None, Some(u)) => ("user", u.clone()),
                    (None, None) => unreachable!("checked when the config was read"),
                };
                fairway_store::QuotaRow {
                    account_kind: kind.into(),
                    account,
                    gpus_max: q.gpus_max,
                    cpu_millis_max: q.cpu_millis_max,
                    memory_mib_max: q.memory_mib_max,
                }
            })
            .collect();
        let weights: Vec<fairway_store::WeightRow> = self
            .config
            .file
            .fair_share
            .iter()
            .flat_map(|f| &f.weights)
            .map(|w| {
                let (kind, account) = match (&w.project, &w.user) {
                    (Some(p), _) => ("project", p.clone()),
                    (None, Some(u)) => ("user", u.clone()),
                    (None, None) => unreachable!("checked when the config was read"),
                };
                fairway_store::WeightRow { account_kind: kind.into(), account, weight: w.weight }
            })
            .collect();
        self.say_what_the_config_replaces(&quotas, &weights)?;
        let mut tx = self.store.transaction()?;
        for row in &rows {
            tx.set_project(row)?;
        }
        for quota in &quotas {
            tx.set_quota(quota)?;
        }
        for weight in &weights {
            super::runs::store_weight(&mut tx, weight)?;
        }
        tx.commit()?;
        Ok(())
    }

    /// A quota or weight set through the API that the config file's replaces now is said in
    /// the log: the change was made on purpose, and goes at this start-up without a word
    /// otherwise.
    fn say_what_the_config_replaces(
        &self,
        quotas: &[fairway_store::QuotaRow],
        weights: &[fairway_store::WeightRow],
    ) -> Result<(), ServerError> {
        let key = |kind: &str, account: &str| format!("{kind} {account}");
        let caps = |q: &fairway_store::QuotaRow| {
            let or_none = |v: Option<String>| v.unwrap_or_else(|| "unlimited".into());
            format!(
                "gpus_max {}, cpu_millis_max {}, memory_mib_max {}",
                or_none(q.gpus_max.map(|v| v.to_string())),
                or_none(q.cpu_millis_max.map(|v| v.to_string())),
                or_none(q.memory_mib_max.map(|v| v.to_string()))
            )
        };
        let stored: Vec<_> = self.store.quotas()?.iter().map(|q| (key(&q.account_kind, &q.account), caps(q))).collect();
        let config: Vec<_> = quotas.iter().map(|q| (key(&q.account_kind, &q.account), caps(q))).collect();
        for line in replaced_at_startup("quota", &stored, &config) {
            tracing::warn!("{line}");
        }
        let weight = |w: &fairway_store::WeightRow| (key(&w.account_kind, &w.account), w.weight.to_string());
        let stored: Vec<_> = self.store.fair_share_weights()?.iter().map(weight).collect();
        let config: Vec<_> = weights.iter().map(weight).collect();
        for line in replaced_at_startup("fair-share weight", &stored, &config) {
            tracing::warn!("{line}");
        }
        Ok(())
    }

    /// The built-in classes, the config's and the stored ones, as `load_classes` builds them.
    fn classes_with_config(&mut self) -> Result<fairway_spec::PriorityClasses, ServerError> {
        self.classes = fairway_spec::PriorityClasses::builtin();
        self.load_classes()?;
        Ok(std::mem::replace(&mut self.classes, fairway_spec::PriorityClasses::builtin()))
    }

    /// The highest class `project` may use, and where that comes from.
    pub(crate) fn priority_class_max(&self, project: &str) -> (String, &'static str) {
        let from_config = self.config.file.projects.iter().any(|p| p.name == project && p.priority_class_max.is_some());
        match self.projects.get(project).and_then(|p| p.priority_class_max.clone()) {
            Some(max) if from_config => (max, "config"),
            Some(max) => (max, "project"),
            None => match &self.config.file.priority_class_max {
                Some(max) => (max.clone(), "config"),
                None => (DEFAULT_PRIORITY_CLASS_MAX.into(), "default"),
            },
        }
    }

    /// The priority value `project`'s tokens may use at most.
    pub(crate) fn priority_value_max(&self, project: &str) -> (String, i32) {
        let (name, _) = self.priority_class_max(project);
        // Checked to exist when it was set; a class cannot be removed.
        let value = self.classes.resolve(&name).map_or(i32::MIN, |c| c.value);
        (name, value)
    }

    pub(crate) fn projects_view(&self) -> ProjectList {
        let mut names: std::collections::BTreeSet<String> = self.projects.keys().cloned().collect();
        names.extend(self.config.file.projects.iter().map(|p| p.name.clone()));
        names.extend(self.jobs.values().map(|j| j.resolved.doc.project.clone()));
        ProjectList { projects: names.into_iter().map(|n| self.project_view(&n)).collect() }
    }

    fn project_view(&self, name: &str) -> ProjectView {
        let (max, source) = self.priority_class_max(name);
        let run_as = self.config.file.projects.iter().find(|p| p.name == name).and_then(|p| p.run_as.clone());
        ProjectView { name: name.into(), priority_class_max: max, priority_class_max_source: source.into(), run_as }
    }

    pub(crate) fn set_project(&mut self, name: &str, spec: ProjectSpec) -> Result<ProjectView, ApiError> {
        check_name("name", name)?;
        if let Some(max) = &spec.priority_class_max
            && self.classes.resolve(max).is_none()
        {
            let known: Vec<&str> = self.classes.iter().map(|c| c.name.as_str()).collect();
            return Err(ApiError::bad_request(format!(
                "priority_class_max: {max:?} is not a priority class (known: {})",
                known.join(", ")
            )));
        }
        let row = ProjectRow { name: name.into(), priority_class_max: spec.priority_class_max };
        self.write("a project setting", |tx| tx.set_project(&row))
            .map_err(|e| ApiError::store_unavailable(&e.to_string()))?;
        self.projects.insert(name.into(), row);
        Ok(self.project_view(name))
    }

    pub(crate) fn create_token(&mut self, spec: NewTokenRequest, now: u64) -> Result<TokenCreated, ApiError> {
        check_name("user", &spec.user)?;
        check_name("project", &spec.project)?;
        let name = match &spec.name {
            Some(name) => name.clone(),
            // The default label may be longer than a name can be when user and project are
            // long: it is cut, rather than refused as if the caller had given it.
            None => {
                let mut label = format!("{}@{}", spec.user, spec.project);
                let mut end = label.len().min(NAME_BYTES_MAX);
                while !label.is_char_boundary(end) {
                    end -= 1;
                }
                label.truncate(end);
                label
            }
        };
        check_name("name", &name)?;
        let expires_at_ms = match spec.expires_in_seconds {
            Some(0) => return Err(ApiError::bad_request("expires_in_seconds: must be at least 1")),
            Some(s) => Some(now.saturating_add(s.saturating_mul(1000))),
            None => None,
        };
        let secret = auth::new_secret();
        let token = NewToken {
            name,
            secret_sha256: auth::digest(&secret),
            user: spec.user,
            project: spec.project,
            role: spec.role.unwrap_or(Role::Submitter),
            created_at_ms: now,
            expires_at_ms,
        };
        let id = self
            .write("a new token", |tx| tx.insert_token(&token))
            .map_err(|e| ApiError::store_unavailable(&e.to_string()))?;
        let row = fairway_store::TokenRow {
            id,
            name: token.name,
            secret_sha256: token.secret_sha256,
            user: token.user,
            project: token.project,
            role: token.role,
            created_at_ms: now,
            expires_at_ms,
            revoked_at_ms: None,
        };
        self.tokens.upsert(&row);
        Ok(TokenCreated { token: crate::http::token_view(&row), secret })
    }

    pub(crate) fn revoke_token(&mut self, id: i64, now: u64) -> Result<(), ApiError> {
        let rows = self.store.tokens().map_err(ApiError::store)?;
        let Some(row) = rows.into_iter().find(|t| t.id == id) else {
            return Err(ApiError::not_found_message(format!("token {id} does not exist")));
        };
        if row.revoked_at_ms.is_some() {
            return Ok(());
        }
        self.write("a revocation", |tx| tx.revoke_token(id, now))
            .map_err(|e| ApiError::store_unavailable(&e.to_string()))?;
        self.tokens.upsert(&fairway_store::TokenRow { revoked_at_ms: Some(now), ..row });
        Ok(())
    }
}

/// A user, project or token name: what the job-spec reader accepts for users and projects.
fn check_name(field: &str, name: &str) -> Result<(), ApiError> {
    fairway_spec::check_account_name(name).map_err(|reason| ApiError::bad_request(format!("{field}: {reason}")))
}

/// The Unix user the server runs as: the admin token's user.
fn server_user() -> String {
    nix::unistd::User::from_uid(nix::unistd::getuid())
        .ok()
        .flatten()
        .map_or_else(|| format!("uid-{}", nix::unistd::getuid()), |u| u.name)
}

/// What the config file's settings replace at start-up, one line each: a stored value (set
/// through the API, which persists otherwise) of the same name that differs. Settings
/// stored with no value in the file stay, and are not named.
pub(crate) fn replaced_at_startup(what: &str, stored: &[(String, String)], config: &[(String, String)]) -> Vec<String> {
    config
        .iter()
        .filter_map(|(name, value)| {
            let (_, before) = stored.iter().find(|(n, _)| n == name)?;
            (before != value).then(|| {
                format!("{what} {name}: the config file's ({value}) replaces the one set through the API ({before})")
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::replaced_at_startup;

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
    }

    #[test]
    fn the_config_names_only_what_it_changes() {
        let stored = pairs(&[("project ads", "4"), ("project nlp", "2"), ("user bob", "3")]);
        let config = pairs(&[("project ads", "6"), ("project nlp", "2"), ("project vision", "1")]);
        assert_eq!(
            replaced_at_startup("quota", &stored, &config),
            ["quota project ads: the config file's (6) replaces the one set through the API (4)"]
        );
        assert!(replaced_at_startup("quota", &[], &config).is_empty());
        assert!(replaced_at_startup("quota", &stored, &[]).is_empty());
    }
}
