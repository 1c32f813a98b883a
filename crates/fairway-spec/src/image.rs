//! Container image references, checked before they reach `docker run`'s command line.
//!
//! The grammar is Docker's (the `distribution/reference` package), restricted to what a
//! job needs:
//!
//! ```text
//! reference  := name [ ":" tag ] [ "@" digest ]
//! name       := [ host [ ":" port ] "/" ] component ( "/" component )*    at most 255 characters
//! component  := [a-z0-9]+ ( ( "." | "_" | "__" | "-"+ ) [a-z0-9]+ )*
//! tag        := [A-Za-z0-9_] [A-Za-z0-9_.-]{0,127}
//! digest     := "sha256:" [a-f0-9]{64}
//! ```
//!
//! As in Docker, the first part of a name is a registry host only if it holds a `.` or a
//! `:` or is `localhost` (`nvcr.io/nvidia/pytorch`, `localhost:5000/team/img`); otherwise
//! it is part of the repository (`pytorch/pytorch`). Stricter than Docker: an all-uppercase
//! first part (`UPPER/case`) is read as a repository, and refused, rather than as a host.
//!
//! Written by hand rather than taken from a crate: the grammar is short, and the crates
//! that parse it answer "invalid reference" where a user needs to know which part is wrong.
//! The first check matters most: a reference starting with `-` would be read by `docker
//! run` as an option (`--privileged`, `--volume=/:/host`).

use crate::value::quote;

/// Docker's limit on the name (host and repository path).
const NAME_MAX: usize = 255;
/// Docker's limit on a tag.
const TAG_MAX: usize = 128;
const DIGEST_PREFIX: &str = "sha256:";
const DIGEST_HEX_LEN: usize = 64;

/// A reference as a container runtime names it, so that the same image matches however it
/// is written: Docker Hub's host (`docker.io/`) and its `library/` for one-part names are
/// added, and `:latest` when neither tag nor digest is given (`pytorch/pytorch` and
/// `docker.io/pytorch/pytorch:latest` are one image). What image locality compares.
pub fn canonical_reference(reference: &str) -> String {
    let (name, rest) = split_name(reference);
    let first = name.split('/').next().unwrap_or("");
    let has_host = name.contains('/') && (first.contains('.') || first.contains(':') || first == "localhost");
    let mut out = String::with_capacity(reference.len() + 24);
    if !has_host {
        out.push_str("docker.io/");
        if !name.contains('/') {
            out.push_str("library/");
        }
    }
    out.push_str(name);
    if rest.is_empty() {
        out.push_str(":latest");
    } else {
        out.push_str(rest);
    }
    out
}

/// A reference's name, and its `:tag` and/or `@digest` (empty when it has neither). A `:`
/// before the last `/` is a registry's port, not a tag.
fn split_name(reference: &str) -> (&str, &str) {
    let last_slash = reference.rfind('/').map_or(0, |i| i + 1);
    match reference[last_slash..].find([':', '@']) {
        Some(i) => reference.split_at(last_slash + i),
        None => (reference, ""),
    }
}

/// `Ok` for a valid reference; otherwise the reason, naming the reference and the part
/// that is wrong.
pub fn check_reference(reference: &str) -> Result<(), String> {
    if reference.is_empty() {
        return Err("must be an image reference such as \"ubuntu:24.04\", got an empty string".to_owned());
    }
    why_invalid(reference).map_or(Ok(()), |why| Err(format!("{} is not an image reference: {why}", quote(reference))))
}

fn why_invalid(reference: &str) -> Option<String> {
    if reference.starts_with('-') {
        return Some("it starts with \"-\"".to_owned());
    }
    if reference.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Some("it contains whitespace or a control character".to_owned());
    }
    let (name_and_tag, digest) = match reference.split_once('@') {
        Some((name_and_tag, digest)) => (name_and_tag, Some(digest)),
        None => (reference, None),
    };
    // The tag separator is the first ':' after the last '/': a ':' before it separates a
    // registry host from its port.
    let last_part_start = name_and_tag.rfind('/').map_or(0, |slash| slash + 1);
    let (name, tag) = match name_and_tag[last_part_start..].find(':') {
        Some(colon) => {
            let at = last_part_start + colon;
            (&name_and_tag[..at], Some(&name_and_tag[at + 1..]))
        }
        None => (name_and_tag, None),
    };
    name_problem(name).or_else(|| tag.and_then(tag_problem)).or_else(|| digest.and_then(digest_problem))
}

fn name_problem(name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("it has no repository name (it starts with \":\" or \"@\")".to_owned());
    }
    if name.len() > NAME_MAX {
        return Some(format!("the name is {} characters long, more than the limit of {NAME_MAX}", name.len()));
    }
    let (host, path) = match name.split_once('/') {
        Some((first, rest)) if first.contains(['.', ':']) || first == "localhost" => (Some(first), rest),
        _ => (None, name),
    };
    if let Some(problem) = host.and_then(host_problem) {
        return Some(problem);
    }
    path.split('/').find_map(component_problem)
}

/// `host[:port]`, the host a DNS name or a bracketed IPv6 address.
fn host_problem(host_and_port: &str) -> Option<String> {
    // `None` for the host when it is an IPv6 address, checked here.
    let (host, port) = if let Some(bracketed) = host_and_port.strip_prefix('[') {
        let Some((ipv6, rest)) = bracketed.split_once(']') else {
            return Some("the registry host starts with \"[\" but has no \"]\"".to_owned());
        };
        if ipv6.is_empty() || !ipv6.chars().all(|c| c.is_ascii_hexdigit() || c == ':' || c == '.') {
            return Some(format!("the registry host {} is not an IPv6 address", quote(&format!("[{ipv6}]"))));
        }
        match rest.strip_prefix(':') {
            Some(port) => (None, Some(port)),
            None if rest.is_empty() => (None, None),
            None => return Some(format!("unexpected {} after the registry host [{ipv6}]", quote(rest))),
        }
    } else {
        match host_and_port.split_once(':') {
            Some((host, port)) => (Some(host), Some(port)),
            None => (Some(host_and_port), None),
        }
    };
    let not_a_port = |port: &&str| port.is_empty() || port.len() > 5 || !port.chars().all(|c| c.is_ascii_digit());
    if let Some(port) = port.filter(not_a_port) {
        return Some(format!("the registry port {} must be a number", quote(port)));
    }
    let label_ok = |label: &str| {
        !label.is_empty()
            && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
            && !label.starts_with('-')
            && !label.ends_with('-')
    };
    if let Some(host) = host.filter(|host| !host.split('.').all(label_ok)) {
        return Some(format!(
            "the registry host {} is not a host name (letters, digits and \"-\", in parts separated by \".\")",
            quote(host)
        ));
    }
    None
}

/// One `/`-separated part of the repository path.
fn component_problem(component: &str) -> Option<String> {
    if component.is_empty() {
        return Some("the repository path has an empty part (\"//\", or a \"/\" at an end)".to_owned());
    }
    if component.chars().any(|c| c.is_ascii_uppercase()) {
        return Some(format!("uppercase letters are not allowed in a repository name ({})", quote(component)));
    }
    let allowed = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '_' | '-');
    if let Some(bad) = component.chars().find(|c| !allowed(*c)) {
        return Some(format!(
            "{} is not allowed in a repository name ({}): use lowercase letters, digits, \".\", \"_\" and \"-\"",
            quote(&bad.to_string()),
            quote(component)
        ));
    }
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    let separators_ok = component
        .split(alnum)
        .filter(|separator| !separator.is_empty())
        .all(|separator| matches!(separator, "." | "_" | "__") || separator.chars().all(|c| c == '-'));
    if !component.starts_with(alnum) || !component.ends_with(alnum) || !separators_ok {
        return Some(format!(
            "the repository name part {} must start and end with a letter or digit, and separate them by one \".\", one or two \"_\", or dashes",
            quote(component)
        ));
    }
    None
}

fn tag_problem(tag: &str) -> Option<String> {
    if tag.contains(':') {
        return Some("it has more than one \":\" (a reference has at most one tag)".to_owned());
    }
    if tag.is_empty() {
        return Some("the tag after \":\" is empty".to_owned());
    }
    if tag.len() > TAG_MAX {
        return Some(format!("the tag is {} characters long, more than the limit of {TAG_MAX}", tag.len()));
    }
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    if !tag.starts_with(word) {
        return Some(format!("the tag {} must start with a letter, a digit or \"_\"", quote(tag)));
    }
    if !tag.chars().all(|c| word(c) || c == '.' || c == '-') {
        return Some(format!("the tag {} may hold only letters, digits, \"_\", \".\" and \"-\"", quote(tag)));
    }
    None
}

fn digest_problem(digest: &str) -> Option<String> {
    if digest.contains('@') {
        return Some("it has more than one \"@\" (a reference has at most one digest)".to_owned());
    }
    let Some(hex) = digest.strip_prefix(DIGEST_PREFIX) else {
        return Some(format!(
            "the digest {} must be {DIGEST_PREFIX} followed by {DIGEST_HEX_LEN} hexadecimal digits",
            quote(digest)
        ));
    };
    if hex.len() != DIGEST_HEX_LEN || !hex.chars().all(|c| c.is_ascii_digit() || matches!(c, 'a'..='f')) {
        return Some(format!(
            "the digest must have {DIGEST_HEX_LEN} lowercase hexadecimal digits after {DIGEST_PREFIX}, got {}",
            quote(hex)
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::check_reference;

    #[test]
    fn separators_between_letters_and_digits() {
        for ok in ["a.b", "a_b", "a__b", "a-b", "a---b", "a.b_c__d-e"] {
            assert_eq!(check_reference(ok), Ok(()), "{ok}");
        }
        for bad in ["a..b", "a___b", "a._b", "a-.b", ".a", "a.", "_a", "a-"] {
            assert!(check_reference(bad).is_err(), "{bad}");
        }
    }
}

#[cfg(test)]
mod canonical_tests {
    use super::canonical_reference;

    #[test]
    fn references_name_one_image_however_written() {
        for (given, canonical) in [
            ("ubuntu", "docker.io/library/ubuntu:latest"),
            ("ubuntu:24.04", "docker.io/library/ubuntu:24.04"),
            ("pytorch/pytorch", "docker.io/pytorch/pytorch:latest"),
            ("docker.io/pytorch/pytorch:2.4", "docker.io/pytorch/pytorch:2.4"),
            ("nvcr.io/nvidia/pytorch:24.05-py3", "nvcr.io/nvidia/pytorch:24.05-py3"),
            ("localhost:5000/team/img", "localhost:5000/team/img:latest"),
            ("localhost/img", "localhost/img:latest"),
        ] {
            assert_eq!(canonical_reference(given), canonical, "{given}");
        }
        let digest = format!("img@sha256:{}", "a".repeat(64));
        assert_eq!(canonical_reference(&digest), format!("docker.io/library/{digest}"));
    }
}
