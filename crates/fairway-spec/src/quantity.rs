//! Kubernetes resource quantities: `500m`, `2`, `1.5`, `16Gi`, `1G`, `1e3`.
//!
//! Arithmetic is exact (integers, no floats), so `0.1` CPU is exactly 100 millicores and
//! `1G` of memory rounds up to 954 MiB, as the Kubernetes API does when it scales values.

/// Why a quantity string was rejected.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    #[error("is not a Kubernetes quantity (a number with an optional suffix: m, k, M, G, Ki, Mi, Gi, ...)")]
    Syntax,
    #[error("must not be negative")]
    Negative,
    #[error("has too many significant digits")]
    TooManyDigits,
    #[error("is too large")]
    TooLarge,
    #[error("must be a whole number")]
    NotWhole,
}

/// CPU in millicores, rounded up: `"500m"` → 500, `"2"` → 2000, `"1.5"` → 1500.
pub fn cpu_millis(text: &str) -> Result<u64, QuantityError> {
    scale(parse(text)?, 3, 0, Rounding::Up)
}

/// Memory in MiB, rounded up: `"16Gi"` → 16384, `"1G"` → 954, `"1048576"` → 1.
pub fn memory_mib(text: &str) -> Result<u64, QuantityError> {
    scale(parse(text)?, 0, 20, Rounding::Up)
}

/// A count that must come out whole, such as `nvidia.com/gpu`: `"2"` → 2, `"1.5"` → error.
pub fn whole_count(text: &str) -> Result<u64, QuantityError> {
    scale(parse(text)?, 0, 0, Rounding::Exact)
}

/// The value is `mantissa × 10^pow10 × 2^pow2`.
#[derive(Debug, PartialEq, Eq)]
struct Parsed {
    negative: bool,
    mantissa: u128,
    pow10: i64,
    pow2: u32,
}

#[derive(Clone, Copy)]
enum Rounding {
    Up,
    Exact,
}

/// Significant digits kept exactly; 30 fit in a u128 with room for a suffix's scaling.
const DIGITS_MAX: usize = 30;
/// Exponents beyond this are absurd for any resource and would only waste work.
const EXPONENT_MAX: i64 = 1000;

fn parse(text: &str) -> Result<Parsed, QuantityError> {
    let (negative, unsigned) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    let number_len = unsigned.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(unsigned.len());
    let (number, suffix) = unsigned.split_at(number_len);
    let (int_part, frac_part) = number.split_once('.').unwrap_or((number, ""));
    if int_part.is_empty() && frac_part.is_empty() || frac_part.contains('.') {
        return Err(QuantityError::Syntax);
    }
    let (suffix_pow10, pow2) = suffix_scale(suffix)?;
    let (mantissa, digits_pow10) = mantissa(int_part, frac_part)?;
    Ok(Parsed { negative, mantissa, pow10: digits_pow10 + suffix_pow10, pow2 })
}

/// The digits as an integer and the power of ten that puts the decimal point back.
fn mantissa(int_part: &str, frac_part: &str) -> Result<(u128, i64), QuantityError> {
    let frac_len = i64::try_from(frac_part.len()).map_err(|_| QuantityError::TooManyDigits)?;
    let all = format!("{int_part}{frac_part}");
    let significant = all.trim_start_matches('0');
    let trimmed = significant.trim_end_matches('0');
    let trailing_zeros = i64::try_from(significant.len() - trimmed.len()).map_err(|_| QuantityError::TooManyDigits)?;
    if trimmed.len() > DIGITS_MAX {
        return Err(QuantityError::TooManyDigits);
    }
    let value = if trimmed.is_empty() { 0 } else { trimmed.parse::<u128>().map_err(|_| QuantityError::Syntax)? };
    Ok((value, trailing_zeros - frac_len))
}

/// `(power of ten, power of two)` of a suffix.
fn suffix_scale(suffix: &str) -> Result<(i64, u32), QuantityError> {
    let scale = match suffix {
        "" => (0, 0),
        "n" => (-9, 0),
        "u" => (-6, 0),
        "m" => (-3, 0),
        "k" => (3, 0),
        "M" => (6, 0),
        "G" => (9, 0),
        "T" => (12, 0),
        "P" => (15, 0),
        "E" => (18, 0),
        "Ki" => (0, 10),
        "Mi" => (0, 20),
        "Gi" => (0, 30),
        "Ti" => (0, 40),
        "Pi" => (0, 50),
        "Ei" => (0, 60),
        // "1E" is exa, "1E3" and "1e3" are exponents.
        _ => match suffix.strip_prefix(['e', 'E']) {
            Some(exponent) => (parse_exponent(exponent)?, 0),
            None => return Err(QuantityError::Syntax),
        },
    };
    Ok(scale)
}

fn parse_exponent(text: &str) -> Result<i64, QuantityError> {
    let digits = text.strip_prefix(['+', '-']).unwrap_or(text);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(QuantityError::Syntax);
    }
    let significant = digits.trim_start_matches('0');
    if significant.len() > 6 {
        return Err(QuantityError::TooLarge);
    }
    let magnitude: i64 =
        if significant.is_empty() { 0 } else { significant.parse().map_err(|_| QuantityError::Syntax)? };
    if magnitude > EXPONENT_MAX {
        return Err(QuantityError::TooLarge);
    }
    Ok(if text.starts_with('-') { -magnitude } else { magnitude })
}

/// `value × 10^shift10 / 2^div2`, as a u64, rounded as asked.
fn scale(q: Parsed, shift10: i64, div2: u32, rounding: Rounding) -> Result<u64, QuantityError> {
    if q.mantissa == 0 {
        return Ok(0);
    }
    if q.negative {
        return Err(QuantityError::Negative);
    }
    let pow10 = q.pow10 + shift10;
    let up = u32::try_from(pow10.max(0)).map_err(|_| QuantityError::TooLarge)?;
    let numerator = 10u128
        .checked_pow(up)
        .and_then(|p| q.mantissa.checked_mul(p))
        .and_then(|n| n.checked_mul(1u128.checked_shl(q.pow2)?))
        .ok_or(QuantityError::TooLarge)?;
    let down = u32::try_from((-pow10).max(0)).unwrap_or(u32::MAX);
    // A denominator past u128 means the value is a positive sliver below 1.
    let Some(denominator) = 10u128.checked_pow(down).and_then(|p| p.checked_mul(1u128.checked_shl(div2)?)) else {
        return match rounding {
            Rounding::Up => Ok(1),
            Rounding::Exact => Err(QuantityError::NotWhole),
        };
    };
    let (whole, remainder) = (numerator / denominator, numerator % denominator);
    let rounded = match rounding {
        Rounding::Up => whole + u128::from(remainder > 0),
        Rounding::Exact if remainder == 0 => whole,
        Rounding::Exact => return Err(QuantityError::NotWhole),
    };
    u64::try_from(rounded).map_err(|_| QuantityError::TooLarge)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu() {
        let cases = [
            ("500m", 500),
            ("2", 2000),
            ("1.5", 1500),
            ("0.1", 100),
            ("1u", 1),
            ("100n", 1),
            ("0", 0),
            ("1e3", 1_000_000),
            ("+1", 1000),
            (".5", 500),
            ("2.", 2000),
            ("1k", 1_000_000),
        ];
        for (text, want) in cases {
            assert_eq!(cpu_millis(text), Ok(want), "{text}");
        }
    }

    #[test]
    fn memory() {
        let cases = [
            ("16Gi", 16384),
            ("512Mi", 512),
            ("1G", 954),
            ("1048576", 1),
            ("1", 1),
            ("0", 0),
            ("1Ki", 1),
            ("1.5Gi", 1536),
            ("1E", 953_674_316_407),
            ("1e9", 954),
            ("1Ei", 1 << 40),
        ];
        for (text, want) in cases {
            assert_eq!(memory_mib(text), Ok(want), "{text}");
        }
    }

    #[test]
    fn rejects() {
        assert_eq!(cpu_millis("-1"), Err(QuantityError::Negative));
        assert_eq!(cpu_millis(""), Err(QuantityError::Syntax));
        assert_eq!(cpu_millis("."), Err(QuantityError::Syntax));
        assert_eq!(cpu_millis("1.2.3"), Err(QuantityError::Syntax));
        assert_eq!(cpu_millis("two"), Err(QuantityError::Syntax));
        assert_eq!(cpu_millis("1 Gi"), Err(QuantityError::Syntax));
        assert_eq!(cpu_millis("1e"), Err(QuantityError::Syntax));
        assert_eq!(cpu_millis("1gi"), Err(QuantityError::Syntax));
        assert_eq!(memory_mib("1e400"), Err(QuantityError::TooLarge));
        assert_eq!(memory_mib("1e99999999"), Err(QuantityError::TooLarge));
        assert_eq!(memory_mib("99999999999999999999Ei"), Err(QuantityError::TooLarge));
        assert_eq!(memory_mib(&"1".repeat(40)), Err(QuantityError::TooManyDigits));
        assert_eq!(memory_mib("1e-900"), Ok(1));
        assert_eq!(whole_count("1.5"), Err(QuantityError::NotWhole));
        assert_eq!(whole_count("2"), Ok(2));
        assert_eq!(whole_count("1e-900"), Err(QuantityError::NotWhole));
    }
}
