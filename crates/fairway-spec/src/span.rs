//! Spans of time a file may give in seconds or in hours.
//!
//! The simulator's scenarios speak hours (a trace lasts months), the server's configuration
//! and the controller's settings seconds. Each reads both spellings of the same field, one at
//! a time, so that a policy tried in the simulator is copied into a server's configuration as
//! it is: `fair_share: { half_life_hours: 24 }` and `{ half_life_seconds: 86400 }` are one
//! setting everywhere.

use std::ops::RangeInclusive;

use serde::{Deserialize, Serialize};

use crate::CohortError;

/// Hours as a file writes them (`0.5`, `24`). Compared by value, bit for bit, so that a
/// configuration holding one can still be compared whole.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Hours(pub f64);

impl PartialEq for Hours {
    fn eq(&self, other: &Self) -> bool {
        self.0.to_bits() == other.0.to_bits()
    }
}

impl Eq for Hours {}

const MS_PER_SECOND: u64 = 1000;
const MS_PER_HOUR: f64 = 3_600_000.0;

/// The span `{field}.{stem}_seconds` or `{field}.{stem}_hours` gives, in milliseconds;
/// `None` where the file gives neither. Refused: both at once, hours that are not a
/// number, and a span outside `range_ms` (the error says the bounds in the unit the file
/// used).
pub fn span_ms(
    field: &str,
    stem: &str,
    seconds: Option<u64>,
    hours: Option<Hours>,
    range_ms: RangeInclusive<u64>,
) -> Result<Option<u64>, CohortError> {
    let refuse = |unit: &str, reason: String| CohortError { field: format!("{field}.{stem}_{unit}"), reason };
    match (seconds, hours) {
        (None, None) => Ok(None),
        (Some(_), Some(_)) => Err(CohortError {
            field: format!("{field}.{stem}_seconds"),
            reason: format!("give {stem}_seconds or {stem}_hours, not both"),
        }),
        (Some(seconds), None) => {
            let ms = seconds.saturating_mul(MS_PER_SECOND);
            match range_ms.contains(&ms) {
                true => Ok(Some(ms)),
                false => Err(refuse(
                    "seconds",
                    format!(
                        "must be from {} to {}, got {seconds}",
                        range_ms.start() / MS_PER_SECOND,
                        range_ms.end() / MS_PER_SECOND
                    ),
                )),
            }
        }
        (None, Some(Hours(hours))) => {
            let ms = hours * MS_PER_HOUR;
            let (low, high) = (*range_ms.start() as f64, *range_ms.end() as f64);
            match hours.is_finite() && (low..=high).contains(&ms) {
                true => Ok(Some(ms.round() as u64)),
                false => Err(refuse(
                    "hours",
                    format!("must be from {} to {}, got {}", low / MS_PER_HOUR, high / MS_PER_HOUR, shown(hours)),
                )),
            }
        }
    }
}

/// A number as a user would write it: `1e300`, not three hundred digits.
fn shown(x: f64) -> String {
    if x.abs() >= 1e9 { format!("{x:e}") } else { format!("{x}") }
}

/// The longest fair-share half-life accepted: ten years.
pub const HALF_LIFE_SECONDS_MAX: u64 = 10 * 365 * 24 * 3600;

/// The fair-share half-life `{field}.half_life_seconds` or `{field}.half_life_hours` gives
/// (0: only current holdings count), in milliseconds; a day where neither is given, so that
/// a team that burst yesterday yields today.
pub fn half_life_ms(field: &str, seconds: Option<u64>, hours: Option<Hours>) -> Result<u64, CohortError> {
    let span = span_ms(field, "half_life", seconds, hours, 0..=HALF_LIFE_SECONDS_MAX * MS_PER_SECOND)?;
    Ok(span.unwrap_or(HALF_LIFE_DEFAULT_MS))
}

/// A day.
const HALF_LIFE_DEFAULT_MS: u64 = 24 * 3600 * MS_PER_SECOND;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn either_unit_gives_the_same_span() {
        let range = 0..=u64::MAX / 2;
        assert_eq!(span_ms("f", "t", Some(5400), None, range.clone()), Ok(Some(5_400_000)));
        assert_eq!(span_ms("f", "t", None, Some(Hours(1.5)), range.clone()), Ok(Some(5_400_000)));
        assert_eq!(span_ms("f", "t", None, None, range), Ok(None));
    }

    #[test]
    fn a_span_out_of_bounds_or_given_twice_names_its_field_and_unit() {
        let range = 1000..=7_200_000;
        let cases = [
            (Some(1), Some(Hours(1.0)), "f.t_seconds", "give t_seconds or t_hours, not both"),
            (Some(0), None, "f.t_seconds", "must be from 1 to 7200, got 0"),
            (Some(7201), None, "f.t_seconds", "must be from 1 to 7200, got 7201"),
            (None, Some(Hours(2.5)), "f.t_hours", "must be from 0.0002777777777777778 to 2, got 2.5"),
            (None, Some(Hours(-1.0)), "f.t_hours", "must be from"),
            (None, Some(Hours(f64::NAN)), "f.t_hours", "got NaN"),
            (None, Some(Hours(f64::INFINITY)), "f.t_hours", "got inf"),
            (None, Some(Hours(1e300)), "f.t_hours", "got 1e300"),
        ];
        for (seconds, hours, field, reason) in cases {
            let e = span_ms("f", "t", seconds, hours, range.clone()).unwrap_err();
            assert_eq!(e.field, field, "{seconds:?} {hours:?}");
            assert!(e.reason.contains(reason), "{seconds:?} {hours:?}: {}", e.reason);
        }
    }

    #[test]
    fn a_half_life_defaults_to_a_day_and_may_be_zero() {
        assert_eq!(half_life_ms("fair_share", None, None), Ok(86_400_000));
        assert_eq!(half_life_ms("fair_share", Some(0), None), Ok(0));
        assert_eq!(half_life_ms("fair_share", None, Some(Hours(0.0))), Ok(0));
        assert_eq!(half_life_ms("fair_share", None, Some(Hours(24.0))), Ok(86_400_000));
        let e = half_life_ms("fair_share", Some(HALF_LIFE_SECONDS_MAX + 1), None).unwrap_err();
        assert_eq!(e.field, "fair_share.half_life_seconds");
    }
}
