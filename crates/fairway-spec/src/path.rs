//! Field paths as users read them in error messages: `spec.template.spec.containers[0]`,
//! `resources.limits["nvidia.com/gpu"]`.

use std::fmt;

/// A path from the document root (or from a caller-chosen prefix) to one field.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Path(String);

impl Path {
    /// The root of a document; `prefix` is prepended to every path (empty for a whole document,
    /// `jobs[3]` for a job embedded in a scenario file).
    pub fn root(prefix: &str) -> Path {
        Path(prefix.to_owned())
    }

    /// A child field. Keys that are not plain identifiers (dots, slashes) are bracketed and
    /// quoted so the path stays unambiguous: `limits["nvidia.com/gpu"]`.
    pub fn field(&self, key: &str) -> Path {
        if is_identifier(key) {
            if self.0.is_empty() { Path(key.to_owned()) } else { Path(format!("{}.{key}", self.0)) }
        } else {
            self.key(key)
        }
    }

    /// A child under a bracketed, quoted key, whatever its spelling.
    pub fn key(&self, key: &str) -> Path {
        // JSON quoting escapes quotes, backslashes and control characters in hostile keys.
        let quoted = serde_json::to_string(key).unwrap_or_else(|_| String::from("\"?\""));
        Path(format!("{}[{quoted}]", self.0))
    }

    /// A list element.
    pub fn index(&self, i: usize) -> Path {
        Path(format!("{}[{i}]", self.0))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn is_identifier(key: &str) -> bool {
    let mut chars = key.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

#[cfg(test)]
mod tests {
    use super::Path;

    #[test]
    fn renders_fields_indices_and_odd_keys() {
        let p = Path::root("").field("spec").field("containers").index(0).field("nvidia.com/gpu");
        assert_eq!(p.as_str(), r#"spec.containers[0]["nvidia.com/gpu"]"#);
        assert_eq!(Path::root("jobs[2]").field("name").as_str(), "jobs[2].name");
        assert_eq!(Path::root("").key("a\"b").as_str(), r#"["a\"b"]"#);
    }
}
