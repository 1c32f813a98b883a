//! Cohorts as users write them (`cohorts:` in a simulator scenario and in the server's
//! configuration), checked and converted to the core's [`NominalQuota`] per project.
//!
//! ```yaml
//! cohorts:
//!   - name: research
//!     members:
//!       - project: vision
//!         nominal: { gpus: 16 }
//!         borrowing_limit: { gpus: 8 }    # at most 24 GPUs in all
//!       - project: speech
//!         nominal: { gpus: 16 }
//!         lending_limit: { gpus: 4 }      # lends at most 4; 12 stay speech's alone
//! ```
//!
//! The rules are the core's (`ledger.rs` in `fairway-core`); see `docs/cohorts.md`.

use fairway_core::{AccountId, NominalQuota, Quota, ResourceKind};
use serde::{Deserialize, Serialize};

use crate::span::{Hours, span_ms};

use crate::interner::{AccountKind, Interner};

/// Members per cohort, and cohorts, at most: a configuration is read by hand.
pub const COHORT_MEMBERS_MAX: usize = 1_000;
pub const COHORTS_MAX: usize = 1_000;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CohortDoc {
    pub name: String,
    pub members: Vec<MemberDoc>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemberDoc {
    pub project: String,
    pub nominal: LimitsDoc,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub borrowing_limit: Option<LimitsDoc>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lending_limit: Option<LimitsDoc>,
}

/// Per resource; a resource left out is not limited by this entry.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsDoc {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_millis: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_mib: Option<u64>,
}

impl LimitsDoc {
    fn to_core(self) -> Quota {
        Quota { gpus_max: self.gpus, cpu_millis_max: self.cpu_millis, memory_mib_max: self.memory_mib }
    }

    fn names(self, kind: ResourceKind) -> bool {
        self.to_core().limit(kind).is_some()
    }
}

/// A cohort configuration that cannot hold: the field (`cohorts[0].members[1].lending_limit.gpus`)
/// and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct CohortError {
    pub field: String,
    pub reason: String,
}

/// Every member's place in its cohort, checked as a whole: names not empty, a cohort
/// once, a project in one cohort only, every member of a cohort naming the same resources
/// in `nominal` (a cohort governs what its members name), lending limits within nominal
/// quotas and naming only resources the nominal quota names, borrowing and lending limits
/// naming only resources the cohort governs. `field` prefixes the error's field path.
pub fn resolve_cohorts(
    docs: &[CohortDoc],
    field: &str,
    interner: &mut Interner,
) -> Result<Vec<(AccountId, NominalQuota)>, CohortError> {
    let err = |field: String, reason: String| Err(CohortError { field, reason });
    if docs.len() > COHORTS_MAX {
        return err(field.to_string(), format!("at most {COHORTS_MAX} cohorts, got {}", docs.len()));
    }
    let mut out: Vec<(AccountId, NominalQuota)> = Vec::new();
    let mut seen_cohorts: Vec<&str> = Vec::new();
    let mut seen_projects: Vec<(&str, &str, String)> = Vec::new();
    for (i, c) in docs.iter().enumerate() {
        let at = format!("{field}[{i}]");
        if let Err(reason) = crate::names::token(&c.name) {
            return err(format!("{at}.name"), reason);
        }
        if seen_cohorts.contains(&c.name.as_str()) {
            return err(format!("{at}.name"), format!("cohort {:?} is named twice", c.name));
        }
        seen_cohorts.push(&c.name);
        if c.members.is_empty() {
            return err(format!("{at}.members"), "a cohort needs at least one member".into());
        }
        if c.members.len() > COHORT_MEMBERS_MAX {
            return err(format!("{at}.members"), format!("at most {COHORT_MEMBERS_MAX} members"));
        }
        let cohort = interner
            .account_of(AccountKind::Cohort, &c.name)
            .map_err(|e| CohortError { field: format!("{at}.name"), reason: e.to_string() })?;
        let governs = |kind: ResourceKind| c.members.iter().any(|m| m.nominal.names(kind));
        for (j, m) in c.members.iter().enumerate() {
            let at = format!("{at}.members[{j}]");
            if let Err(reason) = crate::names::token(&m.project) {
                return err(format!("{at}.project"), reason);
            }
            if let Some((_, other_cohort, other)) = seen_projects.iter().find(|(p, _, _)| *p == m.project) {
                // Named by its cohort: through the API the other cohort's index is not the caller's.
                let reason = format!("{:?} is already a member of cohort {other_cohort:?} (at {other})", m.project);
                return err(format!("{at}.project"), reason);
            }
            seen_projects.push((&m.project, &c.name, at.clone()));
            for kind in ResourceKind::ALL {
                let name = doc_name(kind);
                if governs(kind) && !m.nominal.names(kind) {
                    return err(
                        format!("{at}.nominal.{name}"),
                        format!("another member of cohort {:?} names it; every member must", c.name),
                    );
                }
                let lend = m.lending_limit.unwrap_or_default().to_core().limit(kind);
                match (m.nominal.to_core().limit(kind), lend) {
                    (None, Some(_)) => {
                        return err(format!("{at}.lending_limit.{name}"), "no nominal quota to lend from".into());
                    }
                    (Some(nominal), Some(lent)) if lent > nominal => {
                        return err(
                            format!("{at}.lending_limit.{name}"),
                            format!("{lent} is more than the nominal quota {nominal}"),
                        );
                    }
                    _ => {}
                }
                if m.borrowing_limit.is_some_and(|b| b.names(kind)) && !governs(kind) {
                    return err(
                        format!("{at}.borrowing_limit.{name}"),
                        format!("cohort {:?} has no nominal quota of it to borrow from", c.name),
                    );
                }
            }
            let project = interner
                .account_of(AccountKind::Project, &m.project)
                .map_err(|e| CohortError { field: format!("{at}.project"), reason: e.to_string() })?;
            out.push((
                project,
                NominalQuota {
                    cohort,
                    nominal: m.nominal.to_core(),
                    borrowing_limit: m.borrowing_limit.unwrap_or_default().to_core(),
                    lending_limit: m.lending_limit.unwrap_or_default().to_core(),
                },
            ));
        }
    }
    Ok(out)
}

impl MemberDoc {
    /// Where the member keeps more of its nominal quota unlent (its guarantee: nominal less
    /// lending limit, which no other member may use) than `hard_cap`, its project's hard
    /// quota, lets the project use: the guarantee beyond the quota would sit idle, used by
    /// no one. The first such resource, as a [`GuaranteeBeyondCap`].
    pub fn guarantee_beyond(&self, hard_cap: Quota) -> Option<GuaranteeBeyondCap> {
        // The core's rule (`NominalQuota::guaranteed_of`); the cohort does not enter it.
        let place = NominalQuota {
            cohort: AccountId(0),
            nominal: self.nominal.to_core(),
            borrowing_limit: Quota::default(),
            lending_limit: self.lending_limit.unwrap_or_default().to_core(),
        };
        guarantee_beyond_cap(&place, hard_cap)
    }
}

/// [`MemberDoc::guarantee_beyond`] for a place already resolved (the simulator's, after its
/// policies' overrides).
pub fn guarantee_beyond_cap(place: &NominalQuota, hard_cap: Quota) -> Option<GuaranteeBeyondCap> {
    ResourceKind::ALL.into_iter().find_map(|kind| {
        let guarantee = place.guaranteed_of(kind);
        let cap = hard_cap.limit(kind)?;
        (guarantee > cap).then_some(GuaranteeBeyondCap {
            resource: doc_name(kind),
            guarantee,
            nominal: place.nominal_of(kind),
            cap,
        })
    })
}

/// A member's guarantee above its project's hard quota (see [`MemberDoc::guarantee_beyond`]):
/// an impossible combination, refused where both are set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GuaranteeBeyondCap {
    /// The resource as the documents name it: `gpus`, `cpu_millis`, `memory_mib`.
    pub resource: &'static str,
    pub guarantee: u64,
    pub nominal: u64,
    pub cap: u64,
}

impl GuaranteeBeyondCap {
    /// Why a hard quota is refused, for `project`, whose place is in `cohort`.
    pub fn quota_reason(&self, project: &str, cohort: &str) -> String {
        let GuaranteeBeyondCap { resource, guarantee, nominal, cap } = *self;
        format!(
            "{cap} is below the {guarantee} {resource} project {project} keeps unlent in cohort {cohort} (of its \
             nominal {nominal}): those beyond the quota would sit idle; set at least {guarantee}, or let it lend more"
        )
    }

    /// Why a cohort member is refused, for `project`, whose hard quota is at `cap_field`.
    pub fn reason(&self, project: &str, cap_field: &str) -> String {
        let GuaranteeBeyondCap { resource, guarantee, nominal, cap } = *self;
        format!(
            "project {project} keeps {guarantee} {resource} of its nominal {nominal} unlent, more than its hard \
             quota of {cap} ({cap_field}) lets it use: the {} beyond would sit idle; lend at least {} more, or \
             raise the quota",
            guarantee - cap,
            guarantee - cap
        )
    }
}

/// A resource as the documents spell it.
fn doc_name(kind: ResourceKind) -> &'static str {
    match kind {
        ResourceKind::Gpu => "gpus",
        ResourceKind::Cpu => "cpu_millis",
        ResourceKind::Memory => "memory_mib",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The member as written and its resolved place agree on a guarantee beyond a hard
    /// quota, over every combination of small nominal quotas, lending limits and caps; and
    /// both agree with the rule worked out by hand: nominal less lent, over the cap.
    #[test]
    fn a_guarantee_beyond_the_cap_is_the_same_written_or_resolved() {
        for nominal in 0..4u32 {
            for lent in [None, Some(0), Some(1), Some(2), Some(5)] {
                for cap in [None, Some(0), Some(1), Some(3)] {
                    let member = MemberDoc {
                        project: "p".into(),
                        nominal: LimitsDoc { gpus: Some(nominal), ..LimitsDoc::default() },
                        borrowing_limit: None,
                        lending_limit: lent.map(|l| LimitsDoc { gpus: Some(l), ..LimitsDoc::default() }),
                    };
                    if lent.is_some_and(|l| l > nominal) {
                        continue; // refused by `resolve_cohorts` before this applies
                    }
                    let doc = CohortDoc { name: "c".into(), members: vec![member.clone()] };
                    let (_, place) = resolve_cohorts(&[doc], "cohorts", &mut Interner::new()).unwrap()[0];
                    let hard = Quota { gpus_max: cap, ..Quota::default() };
                    let written = member.guarantee_beyond(hard);
                    assert_eq!(written, guarantee_beyond_cap(&place, hard), "{nominal} {lent:?} {cap:?}");
                    let guarantee = lent.map_or(0, |l| nominal - l);
                    let expected = cap.filter(|&c| guarantee > c).map(|c| (u64::from(guarantee), u64::from(c)));
                    assert_eq!(written.map(|b| (b.guarantee, b.cap)), expected, "{nominal} {lent:?} {cap:?}");
                }
            }
        }
    }

    fn parse(yaml: &str) -> Result<Vec<(AccountId, NominalQuota)>, CohortError> {
        let docs: Vec<CohortDoc> = serde_saphyr::from_str(yaml).expect("well-formed");
        resolve_cohorts(&docs, "cohorts", &mut Interner::new())
    }

    #[test]
    fn members_get_their_place() {
        let out = parse(
            "- name: lab\n  members:\n  - { project: vision, nominal: { gpus: 4 }, borrowing_limit: { gpus: 2 } }\n  - { project: speech, nominal: { gpus: 4 }, lending_limit: { gpus: 1 } }\n",
        )
        .unwrap();
        assert_eq!(out.len(), 2);
        let (vision, speech) = (out[0].1, out[1].1);
        assert_eq!(vision.cohort, speech.cohort);
        assert_eq!((vision.nominal.gpus_max, vision.borrowing_limit.gpus_max), (Some(4), Some(2)));
        assert_eq!(speech.guaranteed_of(ResourceKind::Gpu), 3);
    }

    #[test]
    fn reservations_default_to_one_and_the_cores_hour() {
        let doc: ReservationsDoc = serde_saphyr::from_str("{}").unwrap();
        let (core, default_runtime_ms) = doc.to_core("reservations").unwrap();
        assert_eq!((core.count_max, default_runtime_ms), (1, 3_600_000));
        let doc: ReservationsDoc = serde_saphyr::from_str("{ count: 2, default_runtime_seconds: 600 }").unwrap();
        assert_eq!(doc.to_core("reservations").unwrap(), (fairway_core::Reservations { count_max: 2 }, 600_000));
        let doc: ReservationsDoc = serde_saphyr::from_str("{ count: 2, default_runtime_hours: 0.25 }").unwrap();
        assert_eq!(doc.to_core("reservations").unwrap(), (fairway_core::Reservations { count_max: 2 }, 900_000));
    }

    #[test]
    fn a_reservations_default_runtime_is_refused_with_the_field_and_unit() {
        let cases = [
            ("{ count: 0 }", "reservations.count"),
            ("{ default_runtime_seconds: 0 }", "reservations.default_runtime_seconds"),
            ("{ default_runtime_hours: 9000 }", "reservations.default_runtime_hours"),
            ("{ default_runtime_hours: 1, default_runtime_seconds: 60 }", "reservations.default_runtime_seconds"),
        ];
        for (yaml, field) in cases {
            let doc: ReservationsDoc = serde_saphyr::from_str(yaml).unwrap();
            assert_eq!(doc.to_core("reservations").unwrap_err().field, field, "{yaml}");
        }
    }

    #[test]
    fn impossible_cohorts_are_refused_with_the_field() {
        let cases = [
            ("- name: lab\n  members: []\n", "cohorts[0].members", "at least one member"),
            (
                "- name: lab\n  members:\n  - { project: a, nominal: { gpus: 4 }, lending_limit: { gpus: 5 } }\n",
                "cohorts[0].members[0].lending_limit.gpus",
                "more than the nominal quota 4",
            ),
            (
                "- name: lab\n  members:\n  - { project: a, nominal: { gpus: 4 }, lending_limit: { cpu_millis: 5 } }\n",
                "cohorts[0].members[0].lending_limit.cpu_millis",
                "no nominal quota",
            ),
            (
                "- name: lab\n  members:\n  - { project: a, nominal: { gpus: 4 } }\n  - { project: b, nominal: { cpu_millis: 4000 } }\n",
                "cohorts[0].members[0].nominal.cpu_millis",
                "every member must",
            ),
            (
                "- name: lab\n  members:\n  - { project: a, nominal: { gpus: 4 } }\n- name: lab2\n  members:\n  - { project: a, nominal: { gpus: 4 } }\n",
                "cohorts[1].members[0].project",
                "already a member of cohort \"lab\" (at cohorts[0].members[0])",
            ),
            (
                "- name: lab\n  members:\n  - { project: a, nominal: { gpus: 4 } }\n- name: lab\n  members:\n  - { project: b, nominal: { gpus: 4 } }\n",
                "cohorts[1].name",
                "named twice",
            ),
            (
                "- name: lab\n  members:\n  - { project: a, nominal: { gpus: 4 }, borrowing_limit: { memory_mib: 5 } }\n",
                "cohorts[0].members[0].borrowing_limit.memory_mib",
                "no nominal quota of it",
            ),
        ];
        for (yaml, field, reason) in cases {
            let e = parse(yaml).unwrap_err();
            assert_eq!(e.field, field, "{yaml}");
            assert!(e.reason.contains(reason), "{yaml}: {}", e.reason);
        }
    }
}

/// `reservations:` in a simulator scenario's policy, the server's configuration and the
/// controller's settings: how many pending jobs that cannot start reserve the GPUs they need
/// (1: EASY backfill), and how long a job without a run-time limit is expected to run, in
/// seconds or in hours (see the core's `plan.rs`; the core's default, an hour, when left
/// out).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReservationsDoc {
    #[serde(default = "one_reservation")]
    pub count: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_runtime_seconds: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_runtime_hours: Option<Hours>,
}

fn one_reservation() -> u32 {
    1
}

/// The largest fair-share weight a project or user may have (the least is 1, the default),
/// wherever it is set: the server's file and API, a Namespace's annotation.
pub const FAIR_SHARE_WEIGHT_MAX: u32 = 1_000_000;

/// A fair-share weight, or why it is not one (`field` names it).
pub fn check_fair_share_weight(field: &str, weight: u32) -> Result<u32, String> {
    match (1..=FAIR_SHARE_WEIGHT_MAX).contains(&weight) {
        true => Ok(weight),
        false => Err(format!("{field}: must be a whole number from 1 to {FAIR_SHARE_WEIGHT_MAX}, got {weight}")),
    }
}

/// The most reservations at once, and the longest default estimate (a year).
pub const RESERVATIONS_MAX: u32 = 64;
pub const DEFAULT_RUNTIME_SECONDS_MAX: u64 = 365 * 24 * 3600;

impl ReservationsDoc {
    /// Checked, as the core's, and with the default run-time estimate it sets (in ms); the
    /// error names the field under `field`.
    pub fn to_core(self, field: &str) -> Result<(fairway_core::Reservations, u64), CohortError> {
        if !(1..=RESERVATIONS_MAX).contains(&self.count) {
            return Err(CohortError {
                field: format!("{field}.count"),
                reason: format!("must be from 1 to {RESERVATIONS_MAX}, got {}", self.count),
            });
        }
        let default_runtime_ms = span_ms(
            field,
            "default_runtime",
            self.default_runtime_seconds,
            self.default_runtime_hours,
            1000..=DEFAULT_RUNTIME_SECONDS_MAX * 1000,
        )?
        .unwrap_or(fairway_core::RuntimeEstimates::default().default_runtime_ms);
        Ok((fairway_core::Reservations { count_max: self.count }, default_runtime_ms))
    }
}
