//! Names to the core's small integer ids. Drivers share one interner so that the same
//! name always maps to the same id; ids are handed out in first-seen order, which keeps
//! runs reproducible.

use std::collections::BTreeMap;

use fairway_core::{AccountId, GpuModel};

/// The id spaces are full (a limit of the core's id types, not of this crate).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InternError {
    #[error("too many distinct accounts (users and projects): the limit is {max}")]
    TooManyAccounts { max: u64 },
    #[error("too many distinct GPU models: the limit is {max}")]
    TooManyGpuModels { max: u64 },
}

/// Interns account names (users and projects share one space: a user and a project with
/// the same name are the same account) and GPU model names.
#[derive(Clone, Debug, Default)]
pub struct Interner {
    accounts: Names,
    gpu_models: Names,
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

    /// The account id of `name`, new ids in first-seen order.
    pub fn account(&mut self, name: &str) -> Result<AccountId, InternError> {
        let max = u32::MAX as usize;
        let i = self.accounts.intern(name, max).ok_or(InternError::TooManyAccounts { max: max as u64 })?;
        u32::try_from(i).map(AccountId).map_err(|_| InternError::TooManyAccounts { max: max as u64 })
    }

    /// The GPU model id of `name`, new ids in first-seen order.
    pub fn gpu_model(&mut self, name: &str) -> Result<GpuModel, InternError> {
        let max = usize::from(u16::MAX);
        let i = self.gpu_models.intern(name, max).ok_or(InternError::TooManyGpuModels { max: max as u64 })?;
        u16::try_from(i).map(GpuModel).map_err(|_| InternError::TooManyGpuModels { max: max as u64 })
    }

    /// The id of an account already seen, without adding one.
    pub fn account_id(&self, name: &str) -> Option<AccountId> {
        let i = *self.accounts.by_name.get(name)?;
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

/// Ids an [`Interner`] hands out.
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
        assert_eq!(names.account("ads"), Ok(AccountId(0)));
        assert_eq!(names.account("alice"), Ok(AccountId(1)));
        assert_eq!(names.account("ads"), Ok(AccountId(0)));
        assert_eq!(names.gpu_model("H100"), Ok(GpuModel(0)));
        assert_eq!(names.name_of(AccountId(1)), Some("alice"));
        assert_eq!(names.name_of(GpuModel(0)), Some("H100"));
        assert_eq!(names.name_of(GpuModel(1)), None);
        assert_eq!(names.gpu_model_id("A100"), None);
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
