//! Kubernetes resource quantities (`500m`, `2`, `16Gi`, `1e3`) as whole milli-units, enough
//! to add pod requests, compare them with quotas and node allocatable, and write
//! `status.used` back in the style of the quota's own figures.

/// A quantity in milli-units (`1` cpu = 1000; `1Gi` = 1024³ × 1000).
pub(crate) type Milli = i128;

/// Parses a quantity; `None` if it is not one. Fractions below a milli-unit round up, as
/// the API server rounds CPU.
pub(crate) fn parse(text: &str) -> Option<Milli> {
    let s = text.trim();
    if s.is_empty() {
        return None;
    }
    let (negative, s) = match s.as_bytes()[0] {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let number_end = s.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(s.len());
    let (number, suffix) = s.split_at(number_end);
    if number.is_empty() || number == "." || number.matches('.').count() > 1 {
        return None;
    }
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    // Scale: value = digits × 10^decimal_exp × 1024^binary_exp, in milli-units.
    let (decimal_exp, binary_exp): (i32, u32) = match suffix {
        "" => (0, 0),
        "m" => (-3, 0),
        "k" => (3, 0),
        "M" => (6, 0),
        "G" => (9, 0),
        "T" => (12, 0),
        "P" => (15, 0),
        "E" => (18, 0),
        "Ki" => (0, 1),
        "Mi" => (0, 2),
        "Gi" => (0, 3),
        "Ti" => (0, 4),
        "Pi" => (0, 5),
        "Ei" => (0, 6),
        other if other.starts_with(['e', 'E']) => (other[1..].parse::<i32>().ok()?, 0),
        _ => return None,
    };
    let digits: String = format!("{whole}{fraction}");
    let mantissa: i128 = if digits.is_empty() { 0 } else { digits.parse().ok()? };
    // milli-units: × 10^3, the fraction's digits divide.
    let exp10 = decimal_exp + 3 - fraction.len() as i32;
    let mut value = mantissa.checked_mul(1024i128.checked_pow(binary_exp)?)?;
    if exp10 >= 0 {
        value = value.checked_mul(10i128.checked_pow(exp10 as u32)?)?;
    } else {
        let div = 10i128.checked_pow((-exp10) as u32)?;
        value = (value + div - 1) / div;
    }
    Some(if negative { -value } else { value })
}

/// Whether a quantity was written with a binary suffix (`Gi`): `status.used` is then
/// written the same way.
pub(crate) fn is_binary(text: &str) -> bool {
    text.trim_end().ends_with('i')
}

/// Writes a quantity: `1500m`, `3`, or with the largest binary suffix that divides it
/// when `binary` (`3Gi`), as the API server's canonical forms.
pub(crate) fn format(value: Milli, binary: bool) -> String {
    if value % 1000 != 0 {
        return format!("{value}m");
    }
    let units = value / 1000;
    if binary && units != 0 {
        const SUFFIXES: [&str; 6] = ["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
        let mut best: Option<(i128, &str)> = None;
        let mut scale: i128 = 1;
        for suffix in SUFFIXES {
            scale *= 1024;
            if units % scale == 0 {
                best = Some((units / scale, suffix));
            } else {
                break;
            }
        }
        if let Some((n, suffix)) = best {
            return format!("{n}{suffix}");
        }
    }
    units.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_parse_to_milli_units() {
        assert_eq!(parse("500m"), Some(500));
        assert_eq!(parse("2"), Some(2000));
        assert_eq!(parse("0.5"), Some(500));
        assert_eq!(parse("1Gi"), Some(1024 * 1024 * 1024 * 1000));
        assert_eq!(parse("1k"), Some(1_000_000));
        assert_eq!(parse("1e3"), Some(1_000_000));
        assert_eq!(parse("0.0001"), Some(1), "rounds up below a milli-unit");
        assert_eq!(parse("-1"), Some(-1000));
        assert_eq!(parse("abc"), None);
        assert_eq!(parse("1.2.3"), None);
        assert_eq!(parse("5X"), None);
    }

    #[test]
    fn quantities_format_in_the_quotas_style() {
        assert_eq!(format(1500, false), "1500m");
        assert_eq!(format(3000, false), "3");
        assert_eq!(format(3 * 1024 * 1024 * 1024 * 1000, true), "3Gi");
        assert_eq!(format(1536 * 1024 * 1000, true), "1536Ki");
        assert_eq!(format(1000, true), "1");
        assert_eq!(format(0, true), "0");
    }
}
