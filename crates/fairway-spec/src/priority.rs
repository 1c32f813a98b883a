//! Priority classes: a registry with fairway's built-in classes, and the readers of the two
//! ways to write a class (Kubernetes and compact). The class as read is in `model.rs`.

use std::collections::BTreeMap;

use fairway_core::{PreemptionPolicy, Priority};
use serde::Deserialize;
use serde_json::Value;

use crate::error::{Issues, SpecError, SpecErrors};
use crate::model::{
    Field, MIN_RUN_EXPECTATION, MIN_RUN_SECONDS_MAX, Origin, PER_HOUR_EXPECTATION, PREEMPTION_DELAY_EXPECTATION,
    PREEMPTION_DELAY_SECONDS_MAX, PREEMPTIONS_PER_HOUR_MAX, PreemptionPolicyDoc, PreemptionProtection,
    PriorityClassDoc, SourceFormat,
};
use crate::names;
use crate::path::Path;
use crate::value::{self, Obj, describe, quote};

/// Kubernetes reserves values above this for its `system-` classes.
pub const USER_PRIORITY_MAX: i64 = 1_000_000_000;

/// The annotations that carry [`PreemptionProtection`] on a Kubernetes PriorityClass,
/// whose schema has no such fields.
pub const MIN_RUN_ANNOTATION: &str = "fairway.dev/min-run-before-preemption-seconds";
pub const PREEMPTIONS_PER_HOUR_ANNOTATION: &str = "fairway.dev/preemptions-per-hour-max";
/// `"true"`: the class's jobs may preempt runs that rule 1 protects.
pub const OVERRIDES_PROTECTION_ANNOTATION: &str = "fairway.dev/overrides-preemption-protection";
/// The PriorityClass annotation for rule 1's preemption delay (whole seconds, as a string).
pub const PREEMPTION_DELAY_ANNOTATION: &str = "fairway.dev/preemption-delay-seconds";

/// A class in a [`PriorityClasses`] registry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PriorityClass {
    pub name: String,
    pub value: Priority,
    /// Exactly one class of a registry is the global default.
    pub global_default: bool,
    pub preemption_policy: PreemptionPolicy,
    pub protection: PreemptionProtection,
    pub description: String,
    /// One of fairway's own classes rather than one from the input or a config.
    pub builtin: bool,
}

/// The priority classes jobs can name. Starts with the built-ins; inputs and configs add
/// more. Never empty and always has exactly one global default.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PriorityClasses {
    /// Sorted by value descending, then name: the order of [`PriorityClasses::iter`].
    classes: Vec<PriorityClass>,
}

impl Default for PriorityClasses {
    fn default() -> PriorityClasses {
        PriorityClasses::builtin()
    }
}

impl PriorityClasses {
    /// `critical` 10,000,000; `high` 1,000,000; `medium` 100,000 (the global default);
    /// `low` 1,000. All preempt lower priorities; `critical` also preempts runs that rule 1
    /// protects (it is the work that must start now).
    pub fn builtin() -> PriorityClasses {
        let class = |name: &str, value, global_default, description: &str| PriorityClass {
            name: name.to_owned(),
            value,
            global_default,
            preemption_policy: PreemptionPolicy::PreemptLowerPriority,
            protection: builtin_protection(name),
            description: description.to_owned(),
            builtin: true,
        };
        PriorityClasses {
            classes: vec![
                class("critical", 10_000_000, false, "Work that must run now; preempts every other class."),
                class(
                    "high",
                    1_000_000,
                    false,
                    "Business-critical training (the value of the article's high-priority class).",
                ),
                class("medium", 100_000, true, "The default for jobs that name no class."),
                class("low", 1_000, false, "Best-effort and exploratory work; preempted first."),
            ],
        }
    }

    /// Same as [`PriorityClasses::builtin`].
    pub fn with_builtins() -> PriorityClasses {
        PriorityClasses::builtin()
    }

    pub fn resolve(&self, name: &str) -> Option<&PriorityClass> {
        self.classes.iter().find(|c| c.name == name)
    }

    /// Like [`PriorityClasses::resolve`], with the reason for a miss, which lists the known
    /// classes: `unknown priority class "gold"; known classes: critical, high, medium, low`.
    pub fn resolve_priority(&self, name: &str) -> Result<&PriorityClass, String> {
        self.resolve(name).ok_or_else(|| self.unknown_class(name))
    }

    pub(crate) fn unknown_class(&self, name: &str) -> String {
        let known: Vec<&str> = self.classes.iter().map(|c| c.name.as_str()).collect();
        format!("unknown priority class {}; known classes: {}", quote(name), known.join(", "))
    }

    /// Adds one class given field by field (from a driver's own config), with the same
    /// rules as [`PriorityClasses::register`]. The `Err` is the reason. Adding classes one
    /// at a time cannot see "two defaults in one input": the later default simply wins; use
    /// [`PriorityClasses::register_all`] for that check.
    pub fn add(
        &mut self,
        name: &str,
        value: Priority,
        global_default: bool,
        preemption_policy: PreemptionPolicy,
        protection: PreemptionProtection,
        description: &str,
    ) -> Result<(), String> {
        protection.check().map_err(|(field, reason)| format!("{field}: {reason}"))?;
        let doc = PriorityClassDoc {
            name: name.to_owned(),
            value,
            global_default,
            preemption_policy: preemption_policy.into(),
            protection,
            description: Some(description.to_owned()).filter(|d| !d.is_empty()),
            origin: Origin::default(),
        };
        self.register(&doc).map_err(|e| e.reason)
    }

    /// The class of jobs that name none.
    pub fn default_class(&self) -> &PriorityClass {
        // Built-ins are never removed and a default is only ever moved, so the fallback
        // is unreachable; it exists to keep this total.
        self.classes.iter().find(|c| c.global_default).unwrap_or(&self.classes[0])
    }

    /// Every class, by value descending, then name.
    pub fn iter(&self) -> std::slice::Iter<'_, PriorityClass> {
        self.classes.iter()
    }

    /// Adds one class. Registering a class again with the same value, policy and protection
    /// is a no-op (so reloading a file is harmless); a built-in class may be given a
    /// protection once (same value and policy); any other redefinition is an error. A class with
    /// `global_default` becomes the default in place of the previous one.
    pub fn register(&mut self, doc: &PriorityClassDoc) -> Result<(), SpecError> {
        check_user_class(doc)?;
        let policy = PreemptionPolicy::from(doc.preemption_policy);
        match self.resolve(&doc.name) {
            // A built-in class may be given rule 1's protection (by a config), once.
            Some(existing)
                if existing.builtin
                    && existing.value == doc.value
                    && existing.preemption_policy == policy
                    && existing.protection == builtin_protection(&existing.name) =>
            {
                let name = existing.name.clone();
                let class = self.classes.iter_mut().find(|c| c.name == name).expect("just resolved");
                class.protection = doc.protection;
            }
            Some(existing)
                if existing.value != doc.value
                    || existing.preemption_policy != policy
                    || existing.protection != doc.protection =>
            {
                return Err(doc.origin.error(
                    Field::Name,
                    format!(
                        "priority class {} is already defined with value {}, policy {:?} and {}; a class cannot be redefined",
                        quote(&doc.name),
                        existing.value,
                        existing.preemption_policy,
                        describe_protection(&existing.protection),
                    ),
                ));
            }
            Some(_) => {}
            None => self.classes.push(PriorityClass {
                name: doc.name.clone(),
                value: doc.value,
                global_default: false,
                preemption_policy: policy,
                protection: doc.protection,
                description: doc.description.clone().unwrap_or_default(),
                builtin: false,
            }),
        }
        if doc.global_default {
            for c in &mut self.classes {
                c.global_default = c.name == doc.name;
            }
        }
        self.classes.sort_by(|a, b| b.value.cmp(&a.value).then_with(|| a.name.cmp(&b.name)));
        Ok(())
    }

    /// Adds the classes of one input, all or none. Two classes with one name, or two
    /// global defaults, in the same input are errors.
    pub fn register_all(&mut self, docs: &[PriorityClassDoc]) -> Result<(), SpecErrors> {
        let mut staged = self.clone();
        let mut errors = Vec::new();
        let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
        let mut default: Option<&PriorityClassDoc> = None;
        for doc in docs {
            if let Some(first) = seen.insert(&doc.name, doc.origin.document) {
                let reason =
                    format!("duplicate priority class {}: already defined in document {first}", quote(&doc.name));
                errors.push(doc.origin.error(Field::Name, reason));
                continue;
            }
            if doc.global_default {
                if let Some(first) = default {
                    let reason = format!(
                        "only one class may be the global default; {} in document {} already is",
                        quote(&first.name),
                        first.origin.document
                    );
                    errors.push(doc.origin.error(Field::GlobalDefault, reason));
                    continue;
                }
                default = Some(doc);
            }
            if let Err(e) = staged.register(doc) {
                errors.push(e);
            }
        }
        if errors.is_empty() {
            *self = staged;
            Ok(())
        } else {
            Err(SpecErrors(errors))
        }
    }
}

/// A built-in class's protection as shipped.
fn builtin_protection(name: &str) -> PreemptionProtection {
    if name == "critical" { PreemptionProtection::overriding() } else { PreemptionProtection::default() }
}

/// `no protection`, or `a minimum run of 300 s and at most 3 preemptions an hour`, with
/// `, overriding protection` when it does.
fn describe_protection(p: &PreemptionProtection) -> String {
    let min_run = (p.min_run_seconds > 0).then(|| format!("a minimum run of {} s", p.min_run_seconds));
    let per_hour = p.preemptions_per_hour_max.map(|n| format!("at most {n} preemptions an hour"));
    let text = match (min_run, per_hour) {
        (None, None) => "no protection".to_owned(),
        (Some(a), None) | (None, Some(a)) => a,
        (Some(a), Some(b)) => format!("{a} and {b}"),
    };
    let text = if p.overrides_protection { format!("{text}, overriding protection") } else { text };
    match p.preemption_delay_seconds {
        0 => text,
        delay => format!("{text}; preempts after {delay} s of waiting"),
    }
}

/// The rules Kubernetes applies to user-created classes.
fn check_user_class(doc: &PriorityClassDoc) -> Result<(), SpecError> {
    names::dns_subdomain(&doc.name).map_err(|reason| doc.origin.error(Field::Name, reason))?;
    if i64::from(doc.value) > USER_PRIORITY_MAX {
        return Err(doc.origin.error(Field::Value, value_too_high(&doc.value.to_string())));
    }
    Ok(())
}

fn value_too_high(got: &str) -> String {
    format!("must be at most {USER_PRIORITY_MAX} (higher values are reserved for Kubernetes system classes), got {got}")
}

/// Keys of the compact form.
const COMPACT_FIELDS: &[&str] = &[
    "name",
    "value",
    "globalDefault",
    "preemptionPolicy",
    "minRunBeforePreemptionSeconds",
    "preemptionsPerHourMax",
    "overridesProtection",
    "preemptionDelaySeconds",
    "description",
];

/// Reads a priority class in the compact form used in configs and scenario files:
/// `{ name: batch, value: 500, globalDefault: false, preemptionPolicy: Never,
/// minRunBeforePreemptionSeconds: 300, preemptionsPerHourMax: 3, description: ... }` (the
/// Kubernetes field names, with `name` at the top, and the protection of rule 1). An
/// `apiVersion: fairway/v1` / `kind: PriorityClass` envelope is allowed. Unknown fields are
/// errors. Paths in errors start with `path_prefix`.
pub fn parse_priority_class(value: &Value, document: usize, path_prefix: &str) -> Result<PriorityClassDoc, SpecErrors> {
    let mut issues = Issues::new(document);
    let class = Obj::new(value, Path::root(path_prefix), &mut issues).and_then(|mut obj| {
        crate::envelope::take_envelope(&mut obj, "PriorityClass", &mut issues)?;
        Some(read_compact(obj, &mut issues))
    });
    issues.finish(class).map(|(class, _)| class)
}

/// The compact form; `obj`'s envelope, if any, is already taken.
pub(crate) fn read_compact(mut obj: Obj<'_>, issues: &mut Issues) -> PriorityClassDoc {
    let mut origin = Origin { document: issues.document(), format: SourceFormat::Native, ..Origin::default() };
    let name = read_name(&mut obj, "name", &mut origin, issues);
    let mut class = read_body(&mut obj, name, origin, issues);
    class.protection = PreemptionProtection {
        min_run_seconds: obj
            .take("minRunBeforePreemptionSeconds")
            .and_then(|(v, path)| value::uint_in(v, &path, issues, (0, MIN_RUN_SECONDS_MAX), MIN_RUN_EXPECTATION))
            .unwrap_or(0),
        preemptions_per_hour_max: obj.take("preemptionsPerHourMax").and_then(|(v, path)| per_hour(v, &path, issues)),
        overrides_protection: obj
            .take("overridesProtection")
            .and_then(|(v, path)| value::boolean(v, &path, issues))
            .unwrap_or(false),
        preemption_delay_seconds: obj
            .take("preemptionDelaySeconds")
            .and_then(|(v, path)| {
                value::uint_in(v, &path, issues, (0, PREEMPTION_DELAY_SECONDS_MAX), PREEMPTION_DELAY_EXPECTATION)
            })
            .unwrap_or(0),
    };
    let mut known = COMPACT_FIELDS.to_vec();
    known.extend(["apiVersion", "kind"]);
    obj.reject_rest(issues, &known);
    class
}

/// A `scheduling.k8s.io/v1` PriorityClass; `obj`'s envelope is already taken. Rule 1's
/// protection comes from two annotations ([`MIN_RUN_ANNOTATION`],
/// [`PREEMPTIONS_PER_HOUR_ANNOTATION`]; Kubernetes annotations are strings). Fields
/// fairway does not use (labels, other annotations, status) become warnings.
pub(crate) fn read_kube(mut obj: Obj<'_>, issues: &mut Issues) -> PriorityClassDoc {
    let mut origin =
        Origin { document: issues.document(), format: SourceFormat::KubernetesPriorityClass, ..Origin::default() };
    let mut protection = PreemptionProtection::default();
    let name = match obj.require("metadata", issues) {
        Some((meta, path)) => Obj::new(meta, path, issues).map(|mut meta| {
            let name = read_name(&mut meta, "name", &mut origin, issues);
            if let Some((annotations, path)) = meta.take("annotations")
                && let Some(mut annotations) = Obj::new(annotations, path, issues)
            {
                protection = read_protection_annotations(&mut annotations, issues);
                annotations.warn_rest(issues);
            }
            meta.warn_rest(issues);
            name
        }),
        None => None,
    };
    let mut class = read_body(&mut obj, name.flatten(), origin, issues);
    class.protection = protection;
    obj.warn_rest(issues);
    class
}

/// Rule 1's protection from a PriorityClass's annotations, looked up by key (for drivers
/// that hold the annotations as a map). The `Err` names the annotation and the reason.
pub fn protection_from_annotations<'a>(get: impl Fn(&str) -> Option<&'a str>) -> Result<PreemptionProtection, String> {
    let read = |key: &str| -> Result<Option<u64>, String> {
        get(key)
            .map(|text| annotation_number(key, text).map_err(|reason| format!("annotation {key}: {reason}")))
            .transpose()
    };
    let overrides = match get(OVERRIDES_PROTECTION_ANNOTATION) {
        None => false,
        Some(text) => {
            annotation_bool(text).map_err(|reason| format!("annotation {OVERRIDES_PROTECTION_ANNOTATION}: {reason}"))?
        }
    };
    Ok(PreemptionProtection {
        min_run_seconds: read(MIN_RUN_ANNOTATION)?.unwrap_or(0),
        preemptions_per_hour_max: read(PREEMPTIONS_PER_HOUR_ANNOTATION)?.map(|n| n as u32),
        overrides_protection: overrides,
        preemption_delay_seconds: read(PREEMPTION_DELAY_ANNOTATION)?.unwrap_or(0),
    })
}

/// `"true"` or `"false"`; the `Err` is the reason.
fn annotation_bool(text: &str) -> Result<bool, String> {
    match text.trim() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(format!("must be \"true\" or \"false\", got {}", quote(text))),
    }
}

/// One protection annotation's value; the `Err` is the reason.
fn annotation_number(key: &str, text: &str) -> Result<u64, String> {
    let (expectation, lo, hi) = match key {
        MIN_RUN_ANNOTATION => (MIN_RUN_EXPECTATION, 0, MIN_RUN_SECONDS_MAX),
        PREEMPTION_DELAY_ANNOTATION => (PREEMPTION_DELAY_EXPECTATION, 0, PREEMPTION_DELAY_SECONDS_MAX),
        _ => (PER_HOUR_EXPECTATION, 1, PREEMPTIONS_PER_HOUR_MAX),
    };
    match text.trim().parse::<u64>() {
        Ok(n) if (lo..=hi).contains(&n) => Ok(n),
        _ => Err(format!("{expectation}, got {}", quote(text))),
    }
}

fn read_protection_annotations(annotations: &mut Obj<'_>, issues: &mut Issues) -> PreemptionProtection {
    let mut read = |key: &str| -> Option<u64> {
        let (v, path) = annotations.take(key)?;
        let text = value::string(v, &path, issues)?;
        annotation_number(key, &text).map_err(|reason| issues.error(&path, reason)).ok()
    };
    let min_run_seconds = read(MIN_RUN_ANNOTATION).unwrap_or(0);
    let preemptions_per_hour_max = read(PREEMPTIONS_PER_HOUR_ANNOTATION).map(|n| n as u32);
    let preemption_delay_seconds = read(PREEMPTION_DELAY_ANNOTATION).unwrap_or(0);
    let overrides_protection = annotations
        .take(OVERRIDES_PROTECTION_ANNOTATION)
        .and_then(|(v, path)| {
            let text = value::string(v, &path, issues)?;
            annotation_bool(&text).map_err(|reason| issues.error(&path, reason)).ok()
        })
        .unwrap_or(false);
    PreemptionProtection { min_run_seconds, preemptions_per_hour_max, overrides_protection, preemption_delay_seconds }
}

fn per_hour(v: &Value, path: &Path, issues: &mut Issues) -> Option<u32> {
    value::uint_in(v, path, issues, (1, PREEMPTIONS_PER_HOUR_MAX), PER_HOUR_EXPECTATION).map(|n| n as u32)
}

fn read_name(obj: &mut Obj<'_>, key: &str, origin: &mut Origin, issues: &mut Issues) -> Option<String> {
    let (v, path) = obj.require(key, issues)?;
    origin.paths.insert(Field::Name, path.as_str().to_owned());
    let name = value::string(v, &path, issues)?;
    match names::dns_subdomain(&name) {
        Ok(()) => Some(name),
        Err(reason) => {
            issues.error(&path, reason);
            None
        }
    }
}

/// `value`, `globalDefault`, `preemptionPolicy`, `description`: the same in both forms.
fn read_body(obj: &mut Obj<'_>, name: Option<String>, mut origin: Origin, issues: &mut Issues) -> PriorityClassDoc {
    origin.paths.insert(Field::Value, obj.path().field("value").as_str().to_owned());
    origin.paths.insert(Field::GlobalDefault, obj.path().field("globalDefault").as_str().to_owned());
    let value = obj.require("value", issues).and_then(|(v, path)| class_value(v, &path, issues));
    let global_default = obj.take("globalDefault").and_then(|(v, path)| value::boolean(v, &path, issues));
    let preemption_policy = obj.take("preemptionPolicy").and_then(|(v, path)| policy(v, &path, issues));
    let description = obj.take("description").and_then(|(v, path)| value::string(v, &path, issues));
    PriorityClassDoc {
        name: name.unwrap_or_default(),
        value: value.unwrap_or_default(),
        global_default: global_default.unwrap_or(false),
        preemption_policy: preemption_policy.unwrap_or_default(),
        protection: PreemptionProtection::default(),
        description,
        origin,
    }
}

fn class_value(v: &Value, path: &Path, issues: &mut Issues) -> Option<Priority> {
    let Some(n) = value::exact_integer(v) else {
        issues.error(path, format!("must be an integer, got {}", describe(v)));
        return None;
    };
    let Ok(n) = Priority::try_from(n) else {
        issues.error(path, format!("must fit in a 32-bit signed integer, got {n}"));
        return None;
    };
    if i64::from(n) > USER_PRIORITY_MAX {
        issues.error(path, value_too_high(&n.to_string()));
        return None;
    }
    Some(n)
}

/// `PreemptLowerPriority` or `Never`, spelled as Kubernetes spells them.
pub(crate) fn policy(v: &Value, path: &Path, issues: &mut Issues) -> Option<PreemptionPolicyDoc> {
    match v.as_str() {
        Some("PreemptLowerPriority") => Some(PreemptionPolicyDoc::PreemptLowerPriority),
        Some("Never") => Some(PreemptionPolicyDoc::Never),
        _ => {
            issues.error(path, format!("must be PreemptLowerPriority or Never, got {}", describe(v)));
            None
        }
    }
}

/// Reads the compact form with all of [`parse_priority_class`]'s checks.
impl<'de> Deserialize<'de> for PriorityClassDoc {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let strict = value::StrictValue::deserialize(deserializer)?;
        let v = strict.into_value(0, "").map_err(serde::de::Error::custom)?;
        parse_priority_class(&v, 0, "").map_err(serde::de::Error::custom)
    }
}
