//! Reading untyped documents (`serde_json::Value`) field by field, recording every problem
//! with its path instead of stopping at the first, and noticing fields nobody read.

use std::fmt;

use serde::Deserialize;
use serde::de::{self, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

use crate::error::{Issues, SpecError, SpecErrors};
use crate::path::Path;

/// A `serde_json::Value` deserialized strictly: duplicate mapping keys and non-finite
/// numbers are recorded as problems, with where they are, rather than a silent "last one
/// wins" or a `null`. Recording instead of failing lets a document report them together with
/// its other errors, at their field paths, in fairway's own words (a deserializer error
/// would stop at the first and carry the parser's wording). Works with any self-describing
/// format (JSON and YAML here).
pub(crate) struct StrictValue {
    pub(crate) value: Value,
    pub(crate) problems: Vec<RawProblem>,
}

/// A problem in the raw value, before any field is read. Its path is kept as steps from
/// the problem up to the document root, the order in which the visitor learns them.
#[derive(Clone, Debug)]
pub(crate) struct RawProblem {
    steps_up: Vec<Step>,
    pub(crate) reason: String,
}

#[derive(Clone, Debug)]
enum Step {
    Key(String),
    Index(usize),
}

impl RawProblem {
    fn here(reason: String) -> RawProblem {
        RawProblem { steps_up: Vec::new(), reason }
    }

    fn under(mut self, step: Step) -> RawProblem {
        self.steps_up.push(step);
        self
    }

    /// The problem's path below `root`.
    pub(crate) fn path(&self, root: &Path) -> Path {
        self.steps_up.iter().rev().fold(root.clone(), |path, step| match step {
            Step::Key(key) => path.field(key),
            Step::Index(i) => path.index(*i),
        })
    }
}

impl StrictValue {
    fn plain(value: Value) -> StrictValue {
        StrictValue { value, problems: Vec::new() }
    }

    /// The value, or its problems as errors of `document` (paths below `path_prefix`).
    pub(crate) fn into_value(self, document: usize, path_prefix: &str) -> Result<Value, SpecErrors> {
        if self.problems.is_empty() {
            return Ok(self.value);
        }
        let root = Path::root(path_prefix);
        let errors = self.problems.iter().map(|p| SpecError::new(document, p.path(&root).as_str(), &p.reason));
        Err(SpecErrors(errors.collect()))
    }
}

impl<'de> Deserialize<'de> for StrictValue {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(StrictVisitor)
    }
}

struct StrictVisitor;

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = StrictValue;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a YAML or JSON value")
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<StrictValue, E> {
        Ok(StrictValue::plain(Value::Bool(v)))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<StrictValue, E> {
        Ok(StrictValue::plain(Value::from(v)))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<StrictValue, E> {
        Ok(StrictValue::plain(Value::from(v)))
    }
    // Integers beyond 64 bits are out of range for every field; keep them as (finite)
    // floats so that the field check reports them with their magnitude.
    fn visit_i128<E: de::Error>(self, v: i128) -> Result<StrictValue, E> {
        match i64::try_from(v) {
            Ok(small) => self.visit_i64(small),
            Err(_) => self.visit_f64(v as f64),
        }
    }
    fn visit_u128<E: de::Error>(self, v: u128) -> Result<StrictValue, E> {
        match u64::try_from(v) {
            Ok(small) => self.visit_u64(small),
            Err(_) => self.visit_f64(v as f64),
        }
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<StrictValue, E> {
        match Number::from_f64(v) {
            Some(n) => Ok(StrictValue::plain(Value::Number(n))),
            // Null stands in for the number: the field reads as absent, and the problem,
            // reported at this path, replaces whatever the field check says about it.
            None => Ok(StrictValue { value: Value::Null, problems: vec![RawProblem::here(non_finite(v))] }),
        }
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<StrictValue, E> {
        Ok(StrictValue::plain(Value::String(v.to_owned())))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<StrictValue, E> {
        Ok(StrictValue::plain(Value::String(v)))
    }
    fn visit_bytes<E: de::Error>(self, _v: &[u8]) -> Result<StrictValue, E> {
        Ok(StrictValue {
            value: Value::Null,
            problems: vec![RawProblem::here("binary values are not supported; write text".to_owned())],
        })
    }
    fn visit_unit<E: de::Error>(self) -> Result<StrictValue, E> {
        Ok(StrictValue::plain(Value::Null))
    }
    fn visit_none<E: de::Error>(self) -> Result<StrictValue, E> {
        Ok(StrictValue::plain(Value::Null))
    }
    fn visit_some<D: de::Deserializer<'de>>(self, d: D) -> Result<StrictValue, D::Error> {
        d.deserialize_any(StrictVisitor)
    }
    fn visit_newtype_struct<D: de::Deserializer<'de>>(self, d: D) -> Result<StrictValue, D::Error> {
        d.deserialize_any(StrictVisitor)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<StrictValue, A::Error> {
        let mut items = Vec::new();
        let mut problems = Vec::new();
        while let Some(item) = seq.next_element::<StrictValue>()? {
            let index = items.len();
            problems.extend(item.problems.into_iter().map(|p| p.under(Step::Index(index))));
            items.push(item.value);
        }
        Ok(StrictValue { value: Value::Array(items), problems })
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<StrictValue, A::Error> {
        let mut out = Map::new();
        let mut problems = Vec::new();
        while let Some(key) = map.next_key::<String>()? {
            let item: StrictValue = map.next_value()?;
            if out.contains_key(&key) {
                // The first value stays; the repeated one is not read further.
                let reason = format!("duplicate key {}: a key may appear only once in a mapping", quote(&key));
                problems.push(RawProblem::here(reason).under(Step::Key(key)));
                continue;
            }
            problems.extend(item.problems.into_iter().map(|p| p.under(Step::Key(key.clone()))));
            out.insert(key, item.value);
        }
        Ok(StrictValue { value: Value::Object(out), problems })
    }
}

/// Why a NaN or an infinity is refused, in the words YAML users write them.
fn non_finite(v: f64) -> String {
    if v.is_nan() {
        "not a finite number: got NaN (.nan)".to_owned()
    } else {
        let sign = if v < 0.0 { "-" } else { "" };
        format!(
            "not a finite number: got {sign}infinity ({sign}.inf, or a number too large to represent such as {sign}1e400)"
        )
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
        // A float this large was most likely written as a long integer; its digits past
        // the 17th are lost, so say so instead of echoing an exponent the user never wrote.
        Value::Number(n) if n.as_f64().is_some_and(|f| !n.is_i64() && !n.is_u64() && f.abs() >= 9.2e18) => {
            format!("a number too large to hold exactly (about {n})")
        }
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
