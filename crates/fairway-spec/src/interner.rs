//! Names to the core's small integer ids. Drivers share one interner so that the same
//! name always maps to the same id; ids are handed out in first-seen order, which keeps
//! runs reproducible.

use std::collections::BTreeMap;

use fairway_core::{AccountId, GpuModel, ImageId};

/// The id spaces are full (a limit of the core's id types, not of this crate).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InternError {
    #[error("too many distinct accounts (users and projects): the limit is {max}")]
    TooManyAccounts { max: u64 },
    #[error("too many distinct GPU models: the limit is {max}")]
    TooManyGpuModels { max: u64 },
    #[error("too many distinct container images: the limit is {max}")]
    TooManyImages { max: u64 },
}

/// Whose account: users and projects are separate namespaces. A user and a project with the
/// same name are two accounts, so that a quota on project `ads` never caps a user called
/// `ads`. Every driver names accounts through [`Interner::account_of`], so the rule is
/// decided here, once.
///
/// Cohorts (groups of projects that lend each other idle nominal quota) are a third
/// namespace: usage is charged to them, so they are accounts to the core.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AccountKind {
    User,
    Project,
    Cohort,
}

impl AccountKind {
    pub fn as_str(self) -> &'static str {
        match self {
            AccountKind::User => "user",
            AccountKind::Project => "project",
            AccountKind::Cohort => "cohort",
        }
    }

    pub fn parse(s: &str) -> Option<AccountKind> {
        match s {
            "user" => Some(AccountKind::User),
            "project" => Some(AccountKind::Project),
            "cohort" => Some(AccountKind::Cohort),
            _ => None,
        }
    }
}

/// Interns accounts (users and projects, each in its own namespace: see [`AccountKind`])
/// and GPU model names.
#[derive(Clone, Debug, Default)]
pub struct Interner {
    accounts: Names,
    gpu_models: Names,
    images: Names,
}

#[derive(Clone, Debug, Default)]
struct Names {
    by_id: Vec<String>,
    by_name: BTreeMap<String, usize>,
}

impl Names {
    /// The index of `name`, adding it if new and if `max` allows.
    fn intern(&mut self, name: &str, max: usize) -> Option<usize> {
        if let Some(&i) = self.by_name.get(name) {
            return Some(i);
        }
        let i = self.by_id.len();
        if i > max {
            return None;
        }
        self.by_id.push(name.to_owned());
        self.by_name.insert(name.to_owned(), i);
        Some(i)
    }
}

impl Interner {
    pub fn new() -> Interner {
        Interner::default()
    }

    /// The account of a user or a project, new ids in first-seen order.
    pub fn account_of(&mut self, kind: AccountKind, name: &str) -> Result<AccountId, InternError> {
        let max = u32::MAX as usize;
        let key = account_key(kind, name);
        let i = self.accounts.intern(&key, max).ok_or(InternError::TooManyAccounts { max: max as u64 })?;
        u32::try_from(i).map(AccountId).map_err(|_| InternError::TooManyAccounts { max: max as u64 })
    }

    /// The kind and name of an account this interner handed out.
    pub fn account_name(&self, id: AccountId) -> Option<(AccountKind, &str)> {
        let key = id.name_in(self)?;
        let (kind, name) = key.split_once(':')?;
        Some((AccountKind::parse(kind)?, name))
    }

    /// The GPU model id of `name`, new ids in first-seen order.
    pub fn gpu_model(&mut self, name: &str) -> Result<GpuModel, InternError> {
        let max = usize::from(u16::MAX);
        let i = self.gpu_models.intern(name, max).ok_or(InternError::TooManyGpuModels { max: max as u64 })?;
        u16::try_from(i).map(GpuModel).map_err(|_| InternError::TooManyGpuModels { max: max as u64 })
    }

    /// The id of a container image, by its canonical reference (`canonical_reference`: the
    /// same image however written), new ids in first-seen order.
    pub fn image(&mut self, reference: &str) -> Result<ImageId, InternError> {
        let max = 1usize << 24;
        let canonical = crate::image::canonical_reference(reference);
        let i = self.images.intern(&canonical, max).ok_or(InternError::TooManyImages { max: max as u64 })?;
        Ok(ImageId(i as u32))
    }

    /// The id of an account already seen, without adding one.
    pub fn account_id(&self, kind: AccountKind, name: &str) -> Option<AccountId> {
        let i = *self.accounts.by_name.get(&account_key(kind, name))?;
        u32::try_from(i).ok().map(AccountId)
    }

    /// The id of a GPU model already seen, without adding one.
    pub fn gpu_model_id(&self, name: &str) -> Option<GpuModel> {
        let i = *self.gpu_models.by_name.get(name)?;
        u16::try_from(i).ok().map(GpuModel)
    }

    /// The name behind an id this interner handed out: `name_of(AccountId(0))`,
    /// `name_of(GpuModel(2))`.
    pub fn name_of<I: Interned>(&self, id: I) -> Option<&str> {
        id.name_in(self)
    }
}

/// How an account is keyed: `user:alice`, `project:ads` (names cannot hold a `:` in front
/// of the kind, so the two never meet).
fn account_key(kind: AccountKind, name: &str) -> String {
    format!("{}:{name}", kind.as_str())
}

/// Ids an [`Interner`] hands out; an account's name is its key (`project:ads`).
pub trait Interned: Copy {
    fn name_in(self, interner: &Interner) -> Option<&str>;
}

impl Interned for AccountId {
    fn name_in(self, interner: &Interner) -> Option<&str> {
        interner.accounts.by_id.get(usize::try_from(self.0).ok()?).map(String::as_str)
    }
}

impl Interned for GpuModel {
    fn name_in(self, interner: &Interner) -> Option<&str> {
        interner.gpu_models.by_id.get(usize::from(self.0)).map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_seen_order_and_reverse_lookup() {
        let mut names = Interner::new();
        assert_eq!(names.account_of(AccountKind::Project, "ads"), Ok(AccountId(0)));
        assert_eq!(names.account_of(AccountKind::User, "alice"), Ok(AccountId(1)));
        assert_eq!(names.account_of(AccountKind::Project, "ads"), Ok(AccountId(0)));
        assert_eq!(names.gpu_model("H100"), Ok(GpuModel(0)));
        assert_eq!(names.name_of(AccountId(1)), Some("user:alice"));
        assert_eq!(names.account_name(AccountId(1)), Some((AccountKind::User, "alice")));
        assert_eq!(names.account_id(AccountKind::Project, "ads"), Some(AccountId(0)));
        assert_eq!(names.name_of(GpuModel(0)), Some("H100"));
        assert_eq!(names.name_of(GpuModel(1)), None);
        assert_eq!(names.gpu_model_id("A100"), None);
    }

    /// A user and a project with the same name are two accounts, whichever driver asks.
    #[test]
    fn users_and_projects_are_separate_namespaces() {
        let mut names = Interner::new();
        let project = names.account_of(AccountKind::Project, "ads").unwrap();
        let user = names.account_of(AccountKind::User, "ads").unwrap();
        assert_ne!(project, user);
        assert_eq!(names.account_name(user), Some((AccountKind::User, "ads")));
        assert_eq!(names.account_id(AccountKind::User, "nobody"), None);
        // A name may itself hold a colon: the kind is whatever comes before the first one.
        let odd = names.account_of(AccountKind::User, "a:b").unwrap();
        assert_eq!(names.account_name(odd), Some((AccountKind::User, "a:b")));
    }

    #[test]
    fn gpu_model_space_is_bounded() {
        let mut names = Interner::new();
        for i in 0..=u32::from(u16::MAX) {
            assert!(names.gpu_model(&i.to_string()).is_ok());
        }
        assert_eq!(names.gpu_model("one-too-many"), Err(InternError::TooManyGpuModels { max: 65535 }));
        assert_eq!(names.gpu_model("0"), Ok(GpuModel(0)));
    }
}
