//! Reading untyped documents (`serde_json::Value`) field by field, recording every problem
//! with its path instead of stopping at the first, and noticing fields nobody read.

use std::collections::BTreeMap;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

use crate::error::Issues;
use crate::path::Path;

/// A `serde_json::Value` deserialized strictly: duplicate mapping keys and non-finite
/// numbers are errors rather than a silent "last one wins" or a `null`. Works with any
/// self-describing format (JSON and YAML here).
pub(crate) struct StrictValue(pub(crate) Value);

impl<'de> Deserialize<'de> for StrictValue {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(StrictVisitor).map(StrictValue)
    }
}

struct StrictVisitor;

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a YAML or JSON value")
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    // Integers beyond 64 bits are out of range for every field; keep them as (finite)
    // floats so that the field check reports them with their magnitude.
    fn visit_i128<E: de::Error>(self, v: i128) -> Result<Value, E> {
        match i64::try_from(v) {
            Ok(small) => Ok(Value::from(small)),
            Err(_) => self.visit_f64(v as f64),
        }
    }
    fn visit_u128<E: de::Error>(self, v: u128) -> Result<Value, E> {
        match u64::try_from(v) {
            Ok(small) => Ok(Value::from(small)),
            Err(_) => self.visit_f64(v as f64),
        }
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| E::custom(format!("number {v} is not supported (not finite)")))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_bytes<E: de::Error>(self, _v: &[u8]) -> Result<Value, E> {
        Err(E::custom("binary values are not supported"))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_some<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(StrictVisitor)
    }
    fn visit_newtype_struct<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(StrictVisitor)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(StrictValue(item)) = seq.next_element()? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let StrictValue(value) = map.next_value()?;
            if out.contains_key(&key) {
                return Err(de::Error::custom(format!("duplicate key {key:?}")));
            }
            out.insert(key, value);
        }
        Ok(Value::Object(out))
    }
}

/// How deep a value nests (a scalar is 1).
pub(crate) fn depth(value: &Value) -> usize {
    match value {
        Value::Array(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
        Value::Object(map) => 1 + map.values().map(depth).max().unwrap_or(0),
        _ => 1,
    }
}

/// A short rendering of a value for "got ..." in error messages.
pub(crate) fn describe(value: &Value) -> String {
    const MAX_CHARS: usize = 60;
    match value {
        Value::Null => "null".to_owned(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) if s.chars().count() > MAX_CHARS => {
            let cut: String = s.chars().take(MAX_CHARS).collect();
            format!("{}…", quote(&cut))
        }
        Value::String(s) => quote(s),
        Value::Array(_) => "a list".to_owned(),
        Value::Object(_) => "a mapping".to_owned(),
    }
}

/// JSON-style quoting, which escapes control characters in hostile strings.
pub(crate) fn quote(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| String::from("\"?\""))
}

/// A mapping being read. Keys are marked as they are taken, so whatever is left can be
/// reported: as errors in fairway's own formats (a typo must not pass unnoticed), as
/// warnings in Kubernetes objects (which carry many fields fairway has no use for).
pub(crate) struct Obj<'a> {
    map: &'a Map<String, Value>,
    path: Path,
    taken: Vec<&'a str>,
}

impl<'a> Obj<'a> {
    /// `None` (with an error recorded) when `value` is not a mapping.
    pub(crate) fn new(value: &'a Value, path: Path, issues: &mut Issues) -> Option<Obj<'a>> {
        match value {
            Value::Object(map) => Some(Obj { map, path, taken: Vec::new() }),
            other => {
                issues.error(&path, format!("must be a mapping, got {}", describe(other)));
                None
            }
        }
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    pub(crate) fn has(&self, key: &str) -> bool {
        self.map.get(key).is_some_and(|v| !v.is_null())
    }

    /// The value under `key` and its path. An explicit `null` counts as absent, as it does
    /// for the Kubernetes API server.
    pub(crate) fn take(&mut self, key: &str) -> Option<(&'a Value, Path)> {
        let (k, v) = self.map.get_key_value(key)?;
        self.taken.push(k.as_str());
        if v.is_null() { None } else { Some((v, self.path.field(key))) }
    }

    /// Like [`Obj::take`] but records "required" when the field is missing.
    pub(crate) fn require(&mut self, key: &str, issues: &mut Issues) -> Option<(&'a Value, Path)> {
        let found = self.take(key);
        if found.is_none() {
            issues.error(&self.path.field(key), "required field is missing");
        }
        found
    }

    /// The fields not taken, in key order (independent of the map's iteration order).
    pub(crate) fn rest(&self) -> Vec<(&'a str, &'a Value, Path)> {
        let mut rest: Vec<(&'a str, &'a Value, Path)> = self
            .map
            .iter()
            .filter(|(k, _)| !self.taken.contains(&k.as_str()))
            .map(|(k, v)| (k.as_str(), v, self.path.field(k)))
            .collect();
        rest.sort_by(|a, b| a.0.cmp(b.0));
        rest
    }

    /// Every field not taken becomes an "ignored" warning.
    pub(crate) fn warn_rest(self, issues: &mut Issues) {
        for (_, _, path) in self.rest() {
            issues.ignored(&path);
        }
    }

    /// Every field not taken becomes an "unknown field" error listing the known ones.
    pub(crate) fn reject_rest(self, issues: &mut Issues, known: &[&str]) {
        for (_, _, path) in self.rest() {
            issues.error(&path, format!("unknown field; expected one of: {}", known.join(", ")));
        }
    }
}

pub(crate) fn string(value: &Value, path: &Path, issues: &mut Issues) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        other => {
            issues.error(path, format!("must be a string, got {}", describe(other)));
            None
        }
    }
}

pub(crate) fn boolean(value: &Value, path: &Path, issues: &mut Issues) -> Option<bool> {
    match value {
        Value::Bool(b) => Some(*b),
        other => {
            issues.error(path, format!("must be true or false, got {}", describe(other)));
            None
        }
    }
}

/// The value as an exact integer, if it is one (floats never are, even `2.0`: a JSON
/// writer that emits floats for counts is more likely confused than precise).
pub(crate) fn exact_integer(value: &Value) -> Option<i128> {
    match value {
        Value::Number(n) => n.as_i64().map(i128::from).or_else(|| n.as_u64().map(i128::from)),
        _ => None,
    }
}

/// An integer in `lo..=hi`; otherwise records "must be {expectation}, got ...".
pub(crate) fn integer_in(
    value: &Value,
    path: &Path,
    issues: &mut Issues,
    (lo, hi): (i128, i128),
    expectation: &str,
) -> Option<i128> {
    match exact_integer(value) {
        Some(n) if (lo..=hi).contains(&n) => Some(n),
        _ => {
            issues.error(path, format!("must be {expectation}, got {}", describe(value)));
            None
        }
    }
}

/// An unsigned integer in `lo..=hi`.
pub(crate) fn uint_in(
    value: &Value,
    path: &Path,
    issues: &mut Issues,
    (lo, hi): (u64, u64),
    expectation: &str,
) -> Option<u64> {
    let n = integer_in(value, path, issues, (i128::from(lo), i128::from(hi)), expectation)?;
    u64::try_from(n).ok()
}

/// A list of strings, e.g. an argv.
pub(crate) fn string_list(value: &Value, path: &Path, issues: &mut Issues) -> Option<Vec<String>> {
    let Value::Array(items) = value else {
        issues.error(path, format!("must be a list of strings, got {}", describe(value)));
        return None;
    };
    let mut out = Vec::with_capacity(items.len());
    let mut ok = true;
    for (i, item) in items.iter().enumerate() {
        match item {
            Value::String(s) => out.push(s.clone()),
            other => {
                ok = false;
                issues.error(&path.index(i), format!("must be a string, got {}", describe(other)));
            }
        }
    }
    ok.then_some(out)
}

/// A mapping of strings to strings (labels, annotations, native env).
pub(crate) fn string_map(
    value: &Value,
    path: &Path,
    issues: &mut Issues,
    hint: &str,
) -> Option<BTreeMap<String, String>> {
    let Value::Object(map) = value else {
        issues.error(path, format!("must be a mapping of strings, got {}", describe(value)));
        return None;
    };
    let mut out = BTreeMap::new();
    let mut ok = true;
    for (k, v) in map {
        match v {
            Value::String(s) => {
                out.insert(k.clone(), s.clone());
            }
            other => {
                ok = false;
                issues.error(&path.field(k), format!("must be a string{hint}, got {}", describe(other)));
            }
        }
    }
    ok.then_some(out)
}
