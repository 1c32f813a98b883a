//! Label selectors (the query-string grammar and `metav1.LabelSelector` objects) and field
//! selectors, matched against stored objects.

use serde_json::{Map, Value};

use crate::errors::ApiError;
use crate::kinds::Kind;

#[derive(Clone, Debug, PartialEq)]
enum Requirement {
    Exists(String),
    NotExists(String),
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
}

/// A parsed label selector; empty matches everything.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct LabelSelector {
    requirements: Vec<Requirement>,
}

impl LabelSelector {
    /// Parses `a=b,c!=d,e in (x,y),f notin (z),g,!h`.
    pub(crate) fn parse(text: &str) -> Result<LabelSelector, ApiError> {
        let bad = |why: &str| ApiError::bad_request(format!("unable to parse requirement: {why} in {text:?}"));
        let mut requirements = Vec::new();
        for part in split_top_level(text) {
            let part = part.trim();
            if part.is_empty() {
                continue;
            }
            if let Some(key) = part.strip_prefix('!') {
                requirements.push(Requirement::NotExists(valid_key(key.trim()).map_err(|w| bad(&w))?));
                continue;
            }
            if let Some((key, rest)) = split_word(part, " notin ") {
                requirements
                    .push(Requirement::NotIn(valid_key(key).map_err(|w| bad(&w))?, set(rest).map_err(|w| bad(&w))?));
            } else if let Some((key, rest)) = split_word(part, " in ") {
                requirements
                    .push(Requirement::In(valid_key(key).map_err(|w| bad(&w))?, set(rest).map_err(|w| bad(&w))?));
            } else if let Some((key, value)) = part.split_once("!=") {
                requirements
                    .push(Requirement::NotEquals(valid_key(key.trim()).map_err(|w| bad(&w))?, value.trim().to_owned()));
            } else if let Some((key, value)) = part.split_once("==").or_else(|| part.split_once('=')) {
                requirements
                    .push(Requirement::Equals(valid_key(key.trim()).map_err(|w| bad(&w))?, value.trim().to_owned()));
            } else {
                requirements.push(Requirement::Exists(valid_key(part).map_err(|w| bad(&w))?));
            }
        }
        Ok(LabelSelector { requirements })
    }

    /// A `metav1.LabelSelector` object (`matchLabels`, `matchExpressions` with `In`,
    /// `NotIn`, `Exists`, `DoesNotExist`). `null` or absent matches everything.
    pub(crate) fn from_object(selector: Option<&Value>) -> Result<LabelSelector, String> {
        let mut requirements = Vec::new();
        let Some(selector) = selector.filter(|s| !s.is_null()) else { return Ok(LabelSelector::default()) };
        if let Some(labels) = selector.get("matchLabels").and_then(Value::as_object) {
            for (k, v) in labels {
                requirements.push(Requirement::Equals(k.clone(), v.as_str().unwrap_or_default().to_owned()));
            }
        }
        for e in selector.get("matchExpressions").and_then(Value::as_array).into_iter().flatten() {
            let key = e.get("key").and_then(Value::as_str).ok_or("a matchExpression has no key")?.to_owned();
            let values: Vec<String> = e
                .get("values")
                .and_then(Value::as_array)
                .map(|v| v.iter().filter_map(Value::as_str).map(str::to_owned).collect())
                .unwrap_or_default();
            let op = e.get("operator").and_then(Value::as_str).unwrap_or_default();
            requirements.push(match op {
                "In" => Requirement::In(key, values),
                "NotIn" => Requirement::NotIn(key, values),
                "Exists" => Requirement::Exists(key),
                "DoesNotExist" => Requirement::NotExists(key),
                other => return Err(format!("{other:?} is not a valid label selector operator")),
            });
        }
        Ok(LabelSelector { requirements })
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    pub(crate) fn matches(&self, labels: Option<&Map<String, Value>>) -> bool {
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        self.requirements.iter().all(|r| match r {
            Requirement::Exists(k) => get(k).is_some(),
            Requirement::NotExists(k) => get(k).is_none(),
            Requirement::Equals(k, v) => get(k) == Some(v.as_str()),
            Requirement::NotEquals(k, v) => get(k) != Some(v.as_str()),
            Requirement::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            Requirement::NotIn(k, vs) => get(k).is_none_or(|x| vs.iter().all(|v| v != x)),
        })
    }

    pub(crate) fn matches_object(&self, object: &Value) -> bool {
        self.is_empty() || self.matches(object.pointer("/metadata/labels").and_then(Value::as_object))
    }
}

/// Commas separate requirements, except inside `( )`.
fn split_top_level(text: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
}

/// `key in (a,b)` → (`key`, `(a,b)`), for the operator word surrounded by spaces.
fn split_word<'a>(part: &'a str, word: &str) -> Option<(&'a str, &'a str)> {
    let at = part.find(word)?;
    Some((part[..at].trim(), part[at + word.len()..].trim()))
}

fn set(text: &str) -> Result<Vec<String>, String> {
    let inner = text
        .trim()
        .strip_prefix('(')
        .and_then(|t| t.strip_suffix(')'))
        .ok_or_else(|| format!("expected a parenthesized set of values, found {text:?}"))?;
    Ok(inner.split(',').map(|v| v.trim().to_owned()).filter(|v| !v.is_empty()).collect())
}

fn valid_key(key: &str) -> Result<String, String> {
    let ok = !key.is_empty()
        && key.len() <= 316
        && key.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'));
    if ok { Ok(key.to_owned()) } else { Err(format!("invalid label key {key:?}")) }
}

/// A parsed field selector: `field=value`, `field==value`, `field!=value`, comma-separated.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct FieldSelector {
    terms: Vec<(String, bool, String)>,
}

impl FieldSelector {
    pub(crate) fn parse(kind: Kind, text: &str) -> Result<FieldSelector, ApiError> {
        let mut terms = Vec::new();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (field, equal, value) = if let Some((f, v)) = part.split_once("!=") {
                (f, false, v)
            } else if let Some((f, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
                (f, true, v)
            } else {
                return Err(ApiError::bad_request(format!("invalid selector: '{text}'; can't understand '{part}'")));
            };
            let field = field.trim();
            if !supported_field(kind, field) {
                return Err(ApiError::bad_request(format!("field label not supported: {field}")));
            }
            terms.push((field.to_owned(), equal, value.trim().to_owned()));
        }
        Ok(FieldSelector { terms })
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }

    /// The value a term on `metadata.namespace` asks for, if any: lists use it to scan one
    /// namespace only.
    pub(crate) fn namespace(&self) -> Option<&str> {
        self.terms.iter().find(|(f, eq, _)| *eq && f == "metadata.namespace").map(|(_, _, v)| v.as_str())
    }

    /// The node a term on `spec.nodeName` asks for (pods), for the by-node index.
    pub(crate) fn node_name(&self) -> Option<&str> {
        self.terms.iter().find(|(f, eq, v)| *eq && f == "spec.nodeName" && !v.is_empty()).map(|(_, _, v)| v.as_str())
    }

    pub(crate) fn matches(&self, object: &Value) -> bool {
        self.terms.iter().all(|(field, equal, value)| (field_value(object, field) == *value) == *equal)
    }
}

fn supported_field(kind: Kind, field: &str) -> bool {
    if matches!(field, "metadata.name" | "metadata.namespace") {
        return true;
    }
    match kind {
        Kind::Pod => matches!(
            field,
            "spec.nodeName"
                | "spec.schedulerName"
                | "spec.restartPolicy"
                | "spec.serviceAccountName"
                | "status.phase"
                | "status.podIP"
                | "status.nominatedNodeName"
        ),
        Kind::Node => field == "spec.unschedulable",
        Kind::Event => matches!(
            field,
            "involvedObject.kind"
                | "involvedObject.namespace"
                | "involvedObject.name"
                | "involvedObject.uid"
                | "involvedObject.apiVersion"
                | "involvedObject.resourceVersion"
                | "involvedObject.fieldPath"
                | "reason"
                | "reportingComponent"
                | "source"
                | "type"
        ),
        Kind::Job => field == "status.successful",
        Kind::Namespace => field == "status.phase",
        Kind::Secret => field == "type",
        _ => false,
    }
}

/// A field's value as the API server's field-label functions give it: missing is `""`.
fn field_value(object: &Value, field: &str) -> String {
    if field == "source" {
        return object.pointer("/source/component").and_then(Value::as_str).unwrap_or_default().to_owned();
    }
    if field == "status.successful" {
        return object.pointer("/status/succeeded").map(|v| v.to_string()).unwrap_or_else(|| "0".into());
    }
    let pointer = format!("/{}", field.replace('.', "/"));
    match object.pointer(&pointer) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Bool(b)) => b.to_string(),
        Some(Value::Number(n)) => n.to_string(),
        Some(Value::Null) | None => {
            if field == "spec.unschedulable" {
                "false".into()
            } else {
                String::new()
            }
        }
        Some(other) => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap()
    }

    #[test]
    fn label_selectors_parse_and_match_each_operator() {
        let l = labels(json!({"app": "a", "tier": "gpu"}));
        let cases = [
            ("app=a", true),
            ("app==a", true),
            ("app!=a", false),
            ("app", true),
            ("!app", false),
            ("!missing", true),
            ("tier in (gpu, cpu)", true),
            ("tier notin (gpu,cpu)", false),
            ("missing notin (x)", true),
            ("app=a,tier in (cpu)", false),
            ("", true),
        ];
        for (text, want) in cases {
            assert_eq!(LabelSelector::parse(text).unwrap().matches(Some(&l)), want, "{text}");
        }
        assert!(LabelSelector::parse("a in b").is_err());
    }

    #[test]
    fn selector_objects_match_expressions() {
        let s = LabelSelector::from_object(Some(&json!({
            "matchLabels": {"team": "a"},
            "matchExpressions": [{"key": "env", "operator": "NotIn", "values": ["prod"]}]
        })))
        .unwrap();
        assert!(s.matches(Some(&labels(json!({"team": "a", "env": "dev"})))));
        assert!(!s.matches(Some(&labels(json!({"team": "a", "env": "prod"})))));
        assert!(!s.matches(None));
    }

    #[test]
    fn field_selectors_read_fields_and_refuse_unknown_ones() {
        let pod = json!({"metadata": {"name": "p"}, "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}});
        let f = FieldSelector::parse(Kind::Pod, "spec.nodeName=n1,status.phase!=Failed").unwrap();
        assert!(f.matches(&pod));
        assert!(FieldSelector::parse(Kind::Pod, "spec.nodeName=").unwrap().matches(&json!({"spec": {}})));
        let e = FieldSelector::parse(Kind::Pod, "spec.image=x").unwrap_err();
        assert_eq!(e.code, 400);
    }
}
