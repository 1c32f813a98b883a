//! Name rules. Job and priority class names follow Kubernetes's DNS-1123 subdomain rule so
//! that a name valid here is valid as a Kubernetes object name, and vice versa.

/// `[a-z0-9]([-a-z0-9.]*[a-z0-9])?`, at most 253 characters. `Err` says what is wrong.
pub(crate) fn dns_subdomain(name: &str) -> Result<(), String> {
    check_dns(name, 253, true)
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, at most 63 characters (a Kubernetes namespace).
pub(crate) fn dns_label(name: &str) -> Result<(), String> {
    check_dns(name, 63, false)
}

fn check_dns(name: &str, max_len: usize, dots: bool) -> Result<(), String> {
    let pattern = if dots { "[a-z0-9]([-a-z0-9.]*[a-z0-9])?" } else { "[a-z0-9]([-a-z0-9]*[a-z0-9])?" };
    if name.is_empty() {
        return Err("must not be empty".to_owned());
    }
    if name.len() > max_len {
        return Err(format!("must be at most {max_len} characters, got {}", name.len()));
    }
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    let inner_ok = name.chars().all(|c| alnum(c) || c == '-' || (dots && c == '.'));
    let ends_ok = name.starts_with(alnum) && name.ends_with(alnum);
    if inner_ok && ends_ok {
        Ok(())
    } else {
        Err(format!("must match {pattern} (lowercase letters, digits, '-'), got {}", crate::value::quote(name)))
    }
}

/// Users, projects and GPU models: free-form but printable, short, without whitespace, so
/// that they survive logs, metrics labels and command lines unchanged.
pub(crate) fn token(name: &str) -> Result<(), String> {
    const MAX_LEN: usize = 253;
    if name.is_empty() {
        return Err("must not be empty".to_owned());
    }
    if name.len() > MAX_LEN {
        return Err(format!("must be at most {MAX_LEN} bytes, got {}", name.len()));
    }
    if name.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!("must not contain whitespace or control characters, got {}", crate::value::quote(name)));
    }
    Ok(())
}

/// Environment variable names: anything but `=` and NUL can be set by execve, but
/// control characters and an empty name only cause trouble.
pub(crate) fn env_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("environment variable name must not be empty".to_owned());
    }
    if name.contains('=') || name.chars().any(char::is_control) {
        return Err(format!(
            "environment variable name must not contain '=' or control characters, got {}",
            crate::value::quote(name)
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns_names() {
        for ok in ["a", "ctr-model", "paddle-high-priority-training", "a.b-c", "0"] {
            assert_eq!(dns_subdomain(ok), Ok(()), "{ok}");
        }
        for bad in ["", "-a", "a-", "A", "a_b", "a b", ".a", "a.", "é"] {
            assert!(dns_subdomain(bad).is_err(), "{bad}");
        }
        assert!(dns_subdomain(&"a".repeat(253)).is_ok());
        assert!(dns_subdomain(&"a".repeat(254)).is_err());
        assert!(dns_label("a.b").is_err());
        assert!(dns_label(&"a".repeat(64)).is_err());
    }

    #[test]
    fn tokens() {
        assert!(token("alice@corp").is_ok());
        assert!(token("NVIDIA-A100-SXM4-80GB").is_ok());
        assert!(token("").is_err());
        assert!(token("a b").is_err());
        assert!(token("a\u{7}").is_err());
    }
}
