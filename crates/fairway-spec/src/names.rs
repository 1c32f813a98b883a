//! Name rules. Job and priority class names follow Kubernetes's DNS-1123 subdomain rule so
//! that a name valid here is valid as a Kubernetes object name, and vice versa.

/// `[a-z0-9]([-a-z0-9.]*[a-z0-9])?`, at most 253 characters. `Err` says what is wrong.
pub(crate) fn dns_subdomain(name: &str) -> Result<(), String> {
    check_dns(name, 253, true)
}

/// A job name: a DNS-1123 subdomain that is not made only of digits. The CLI takes a job
/// as an id or a name, so a job named `42` would be ambiguous.
pub(crate) fn job_name(name: &str) -> Result<(), String> {
    dns_subdomain(name)?;
    if name.chars().all(|c| c.is_ascii_digit()) {
        return Err(format!("{} is only digits and would read as a job id; add a letter", crate::value::quote(name)));
    }
    Ok(())
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

/// Users, projects, cohorts and GPU models: free-form but printable, short, without
/// whitespace, so that they survive logs, metrics labels, URL paths and command lines
/// unchanged. Every driver checks account and cohort names with this one rule (as
/// `fairway_spec::check_account_name`), so a name one surface accepts, every other does.
pub fn token(name: &str) -> Result<(), String> {
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

/// Variables the server sets for every job: its GPUs, and its own `FAIRWAY_` variables
/// (`FAIRWAY_JOB_ID`, `FAIRWAY_RESTART_COUNT`, `FAIRWAY_CHECKPOINT_DIR`,
/// `FAIRWAY_PREEMPT_NOTICE_FILE`, and any it adds later).
pub(crate) const RESERVED_ENV_PREFIX: &str = "FAIRWAY_";
pub(crate) const RESERVED_ENV_NAMES: &[&str] = &["CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES"];

/// Environment variable names: `[A-Za-z_][A-Za-z0-9_]*` (what a shell can expand), and none
/// of the names the server sets itself.
pub(crate) fn env_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("environment variable name must not be empty".to_owned());
    }
    let mut chars = name.chars();
    let valid = chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !valid {
        return Err(format!(
            "environment variable name must match [A-Za-z_][A-Za-z0-9_]*, got {}",
            crate::value::quote(name)
        ));
    }
    if name.starts_with(RESERVED_ENV_PREFIX) {
        return Err(format!(
            "environment variable {} is reserved: the server sets the {RESERVED_ENV_PREFIX} variables itself",
            crate::value::quote(name)
        ));
    }
    if RESERVED_ENV_NAMES.contains(&name) {
        return Err(format!(
            "environment variable {} is reserved: the server sets it to the GPUs it assigns to the job",
            crate::value::quote(name)
        ));
    }
    Ok(())
}

/// Environment variable names as Kubernetes takes them (`RelaxedEnvironmentVariableValidation`,
/// on by default since Kubernetes 1.32): not empty, printable ASCII other than `=`. For jobs
/// that Kubernetes runs: no name is reserved, the device plugin and the user own them.
pub(crate) fn kube_env_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("environment variable name must not be empty".to_owned());
    }
    if name.chars().any(|c| !(c.is_ascii_graphic() || c == ' ') || c == '=') {
        return Err(format!(
            "environment variable name must be printable ASCII characters other than '=', got {}",
            crate::value::quote(name)
        ));
    }
    Ok(())
}

/// Any string but the empty one.
pub(crate) fn not_empty(s: &str) -> Result<(), String> {
    if s.is_empty() { Err("must not be empty".to_owned()) } else { Ok(()) }
}

/// Longest working directory accepted, in bytes (Linux's `PATH_MAX`).
pub(crate) const PATH_MAX: usize = 4096;

/// A working directory: absolute, without NUL (which no path can hold), at most
/// [`PATH_MAX`] bytes. Relative paths are refused rather than resolved against a directory
/// the user cannot see (the server's own).
pub(crate) fn absolute_path(path: &str) -> Result<(), String> {
    if path.contains('\0') {
        return Err(format!("must not contain NUL characters, got {}", crate::value::quote(path)));
    }
    if path.len() > PATH_MAX {
        return Err(format!("must be at most {PATH_MAX} bytes, got {}", path.len()));
    }
    if !path.starts_with('/') {
        return Err(format!("must be an absolute path (starting with /), got {}", crate::value::quote(path)));
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

    #[test]
    fn env_names() {
        for ok in ["A", "_", "EPOCHS", "lower_case", "A1_B2", "FAIRWAYX", "fairway_job_id", "CUDA_VISIBLE_DEVICES_X"] {
            assert_eq!(env_name(ok), Ok(()), "{ok}");
        }
        for bad in ["", "1A", "A-B", "A.B", "A=B", "A B", "É", "A\u{7}"] {
            assert!(env_name(bad).unwrap_err().contains("must"), "{bad}");
        }
        for reserved in ["FAIRWAY_", "FAIRWAY_JOB_ID", "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES"] {
            assert!(env_name(reserved).unwrap_err().contains("is reserved"), "{reserved}");
        }
    }

    #[test]
    fn kube_env_names() {
        for ok in ["A", "CUDA_VISIBLE_DEVICES", "FAIRWAY_JOB_ID", "my.env-name", "1A", "A B", "~!@#$%^&*()"] {
            assert_eq!(kube_env_name(ok), Ok(()), "{ok}");
        }
        assert!(kube_env_name("").unwrap_err().contains("must not be empty"));
        for bad in ["A=B", "=", "É", "A\u{7}", "A\tB", "A\u{7f}"] {
            assert!(kube_env_name(bad).unwrap_err().contains("printable ASCII"), "{bad}");
        }
    }

    #[test]
    fn absolute_paths() {
        assert_eq!(absolute_path("/"), Ok(()));
        assert_eq!(absolute_path("/data/run 1"), Ok(()));
        assert_eq!(absolute_path(&format!("/{}", "a".repeat(PATH_MAX - 1))), Ok(()));
        assert!(absolute_path(&format!("/{}", "a".repeat(PATH_MAX))).unwrap_err().contains("at most 4096 bytes"));
        assert!(absolute_path("").unwrap_err().contains("absolute"));
        assert!(absolute_path("data").unwrap_err().contains("absolute"));
        assert!(absolute_path("~/data").unwrap_err().contains("absolute"));
        assert!(absolute_path("/a\0b").unwrap_err().contains("NUL"));
    }
}
