//! The placement policy a driver's configuration names (`placement:`): the same names in the
//! server's configuration, the controller's settings and the simulator's scenarios.

use fairway_core::packing::{PackPolicy, UnknownPolicy};

/// The name under `placement:` that selects the core's own scoring (`Policy::scoring`)
/// instead of a packing policy.
pub const CORE_SCORING: &str = "core";

/// A `placement:` that names no policy: the field and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct PlacementError {
    pub field: String,
    pub reason: String,
}

/// The core's `Policy::packing` for a configured name: a policy of `docs/placement.md`
/// (`fairway`, the default; `fgd`; the paper's baselines), or `core` for the core's own
/// scoring (`None`). The error names `field`.
pub fn placement_of(name: &str, field: &str) -> Result<Option<PackPolicy>, PlacementError> {
    if name == CORE_SCORING {
        return Ok(None);
    }
    name.parse().map(Some).map_err(|e: UnknownPolicy| PlacementError {
        field: field.to_owned(),
        reason: format!("{e} (or {CORE_SCORING}: the core's own scoring)"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_policy_and_core_are_named_and_anything_else_is_refused_by_field() {
        for policy in PackPolicy::ALL {
            assert_eq!(placement_of(policy.name(), "placement"), Ok(Some(policy)));
        }
        assert_eq!(placement_of("core", "placement"), Ok(None));
        let err = placement_of("tightest", "policies[2].placement").unwrap_err();
        assert_eq!(err.field, "policies[2].placement");
        let text = err.to_string();
        assert!(text.starts_with("policies[2].placement: "), "{text}");
        assert!(text.contains("tightest") && text.contains("fairway") && text.contains("core"), "{text}");
    }
}
