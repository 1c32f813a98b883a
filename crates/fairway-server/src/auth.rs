//! Who is asking: bearer tokens and what each may do.
//!
//! A token is `fwt_` and 64 hex digits (256 random bits). The store keeps only its SHA-256
//! digest; the secret is shown once, when it is created. Every token names a user, a project
//! and a role:
//!
//! | role | may |
//! | --- | --- |
//! | `viewer` | read its project's jobs, events, reasons and logs; nodes, classes, its own quotas |
//! | `submitter` | as viewer, and submit jobs as its own user and project, cancel and report checkpoints of its own jobs |
//! | `admin` | everything: any tenant, quotas, priority classes, projects, tokens |
//!
//! The tenant of a submitted job comes from the token, never from the spec: a spec that
//! names another user or project is refused (an admin may submit for anyone). Env values of
//! a job are shown only to its owner and admins.
//!
//! The cache below is what the HTTP layer checks on every request; the engine, which owns
//! the store's writer, updates it after each committed change.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use fairway_store::{Role, TokenRow};
use ring::rand::SecureRandom;

use crate::clock::{Clock, SystemClock};

/// The prefix of every token: recognisable in logs and by secret scanners.
pub const TOKEN_PREFIX: &str = "fwt_";

/// The caller of one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    pub token_id: i64,
    pub token_name: String,
    pub user: String,
    pub project: String,
    pub role: Role,
}

impl Identity {
    pub fn is_admin(&self) -> bool {
        self.role == Role::Admin
    }

    pub fn may_submit(&self) -> bool {
        self.role >= Role::Submitter
    }

    /// Whether the caller may see a job of `project` (its spec, events, logs).
    pub fn sees(&self, project: &str) -> bool {
        self.is_admin() || self.project == project
    }

    /// Whether the caller may change (cancel, report checkpoints of) a job of this tenant.
    pub fn owns(&self, user: &str, project: &str) -> bool {
        self.is_admin() || (self.role >= Role::Submitter && self.user == user && self.project == project)
    }

    /// Whether the caller may see env values of a job of this tenant.
    pub fn sees_secrets_of(&self, user: &str, project: &str) -> bool {
        self.is_admin() || (self.user == user && self.project == project)
    }
}

/// Why a presented token is not accepted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    Missing,
    Malformed,
    Unknown,
    Revoked,
    Expired,
}

impl Refusal {
    pub fn message(self) -> &'static str {
        match self {
            Refusal::Missing => {
                "this server needs a bearer token (Authorization: Bearer fwt_...); an admin creates one with \
                 `fairway token create`, and the server's own user finds the admin token in <data dir>/admin.token"
            }
            Refusal::Malformed => "the Authorization header is not `Bearer fwt_<64 hex digits>`",
            Refusal::Unknown => "the bearer token is not known to this server",
            Refusal::Revoked => "the bearer token was revoked",
            Refusal::Expired => "the bearer token has expired",
        }
    }
}

#[derive(Clone, Debug)]
struct Entry {
    identity: Identity,
    expires_at_ms: Option<u64>,
    revoked: bool,
}

/// Tokens by digest, shared by the HTTP layer (reads) and the engine (writes).
#[derive(Clone)]
pub struct Tokens {
    by_digest: Arc<RwLock<HashMap<String, Entry>>>,
    /// What expiry is checked against.
    clock: Arc<dyn Clock>,
}

impl Default for Tokens {
    fn default() -> Tokens {
        Tokens::new(Arc::new(SystemClock))
    }
}

impl Tokens {
    pub fn new(clock: Arc<dyn Clock>) -> Tokens {
        Tokens { by_digest: Arc::default(), clock }
    }

    /// Replaces the whole set with the store's rows.
    pub fn load(&self, rows: &[TokenRow]) {
        let mut map = self.by_digest.write().expect("not poisoned");
        map.clear();
        for row in rows {
            map.insert(row.secret_sha256.clone(), entry(row));
        }
    }

    /// Adds or updates one token (after its row was committed).
    pub fn upsert(&self, row: &TokenRow) {
        self.by_digest.write().expect("not poisoned").insert(row.secret_sha256.clone(), entry(row));
    }

    /// Checks an `Authorization` header value.
    pub fn authenticate(&self, header: Option<&str>) -> Result<Identity, Refusal> {
        let header = header.ok_or(Refusal::Missing)?;
        let secret = header.strip_prefix("Bearer ").map(str::trim).ok_or(Refusal::Malformed)?;
        if !is_well_formed(secret) {
            return Err(Refusal::Malformed);
        }
        let map = self.by_digest.read().expect("not poisoned");
        let entry = map.get(&digest(secret)).ok_or(Refusal::Unknown)?;
        if entry.revoked {
            return Err(Refusal::Revoked);
        }
        if entry.expires_at_ms.is_some_and(|t| t <= self.clock.now_ms()) {
            return Err(Refusal::Expired);
        }
        Ok(entry.identity.clone())
    }
}

fn entry(row: &TokenRow) -> Entry {
    Entry {
        identity: Identity {
            token_id: row.id,
            token_name: row.name.clone(),
            user: row.user.clone(),
            project: row.project.clone(),
            role: row.role,
        },
        expires_at_ms: row.expires_at_ms,
        revoked: row.revoked_at_ms.is_some(),
    }
}

/// Lowercase hex of the SHA-256 of a token: what the store keeps.
pub fn digest(secret: &str) -> String {
    hex(ring::digest::digest(&ring::digest::SHA256, secret.as_bytes()).as_ref())
}

/// A new secret from the operating system's random source.
pub fn new_secret() -> String {
    let mut bytes = [0u8; 32];
    ring::rand::SystemRandom::new().fill(&mut bytes).expect("the OS random source works");
    format!("{TOKEN_PREFIX}{}", hex(&bytes))
}

/// `fwt_` and 64 lowercase hex digits.
pub fn is_well_formed(secret: &str) -> bool {
    secret
        .strip_prefix(TOKEN_PREFIX)
        .is_some_and(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: i64, secret: &str, role: Role) -> TokenRow {
        TokenRow {
            id,
            name: format!("t{id}"),
            secret_sha256: digest(secret),
            user: "alice".into(),
            project: "vision".into(),
            role,
            created_at_ms: 0,
            expires_at_ms: None,
            revoked_at_ms: None,
        }
    }

    #[test]
    fn secrets_are_random_well_formed_and_stored_only_as_digests() {
        let (a, b) = (new_secret(), new_secret());
        assert_ne!(a, b);
        assert!(is_well_formed(&a) && is_well_formed(&b), "{a}");
        assert_eq!(digest(&a).len(), 64);
        assert!(!digest(&a).contains(&a[4..]));
        // The SHA-256 of "abc", from FIPS 180-2.
        assert_eq!(digest("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    }

    #[test]
    fn authentication_checks_format_existence_revocation_and_expiry() {
        let tokens = Tokens::default();
        let (good, revoked, expired) = (new_secret(), new_secret(), new_secret());
        tokens.load(&[
            row(1, &good, Role::Submitter),
            TokenRow { revoked_at_ms: Some(1), ..row(2, &revoked, Role::Admin) },
            TokenRow { expires_at_ms: Some(1), ..row(3, &expired, Role::Admin) },
        ]);
        let who = tokens.authenticate(Some(&format!("Bearer {good}"))).unwrap();
        assert_eq!((who.token_id, who.user.as_str(), who.role), (1, "alice", Role::Submitter));
        assert_eq!(tokens.authenticate(None), Err(Refusal::Missing));
        assert_eq!(tokens.authenticate(Some(&good)), Err(Refusal::Malformed));
        assert_eq!(tokens.authenticate(Some("Bearer fwt_123")), Err(Refusal::Malformed));
        assert_eq!(tokens.authenticate(Some(&format!("Bearer {}", new_secret()))), Err(Refusal::Unknown));
        assert_eq!(tokens.authenticate(Some(&format!("Bearer {revoked}"))), Err(Refusal::Revoked));
        assert_eq!(tokens.authenticate(Some(&format!("Bearer {expired}"))), Err(Refusal::Expired));
    }

    #[test]
    fn roles_decide_what_a_caller_may_do() {
        let who = |role| Identity {
            token_id: 1,
            token_name: "t".into(),
            user: "alice".into(),
            project: "vision".into(),
            role,
        };
        let viewer = who(Role::Viewer);
        assert!(viewer.sees("vision") && !viewer.sees("ads"));
        assert!(!viewer.may_submit() && !viewer.owns("alice", "vision"));
        let submitter = who(Role::Submitter);
        assert!(submitter.owns("alice", "vision") && !submitter.owns("bob", "vision"));
        assert!(!submitter.owns("alice", "ads") && submitter.sees_secrets_of("alice", "vision"));
        assert!(!submitter.sees_secrets_of("bob", "vision"));
        let admin = who(Role::Admin);
        assert!(admin.owns("bob", "ads") && admin.sees("ads") && admin.sees_secrets_of("bob", "ads"));
    }
}
