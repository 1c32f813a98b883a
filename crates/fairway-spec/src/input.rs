//! From raw bytes to one untyped value per document, within budgets: the input is
//! untrusted (users submit it), so size, document count, nesting and alias expansion are
//! all bounded before anything is built from it.

use serde_saphyr::budget::BudgetBreach;

use crate::error::{SpecError, SpecErrors};
use crate::value::{StrictValue, depth, quote};

/// Budgets for one input. The defaults suit hand-written job files and generated batches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseLimits {
    /// Largest input accepted, in bytes.
    pub input_bytes_max: usize,
    /// Most documents (`---`-separated YAML, or concatenated JSON values) in one input.
    pub documents_max: usize,
    /// Deepest nesting of mappings and lists. A Kubernetes Job nests about 10 deep. Values
    /// above [`DEPTH_CAP`] act as `DEPTH_CAP`: reading recurses once per level.
    pub depth_max: usize,
    /// Most YAML nodes in the whole input, after alias expansion.
    pub nodes_max: usize,
    /// Most YAML events replayed by aliases (`*anchor`) in the whole input: stops
    /// "billion laughs" inputs that are small on disk and huge in memory.
    pub alias_replay_events_max: usize,
}

/// How to read an input, beyond its budgets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseOptions {
    /// `true` (the default): every job names its tenant, as a file read by the simulator or
    /// a server without authentication needs (native `tenant.project`; a Kubernetes Job
    /// defaults to namespace `default`). `false`: the tenant comes from elsewhere (the
    /// server's caller), so a job may leave out its user and project, which then stay
    /// empty; [`crate::TenantOrigin`] tells which parts were written.
    pub tenant_required: bool,
    /// `false` (the default): fairway runs each job itself, as a process or a container it
    /// starts, so a Kubernetes Job is held to what the standalone server can run. `true`: the
    /// jobs run in a Kubernetes cluster, which runs their containers; fairway only admits and
    /// places them. A `batch/v1` Job is then read by Kubernetes's own rules wherever the
    /// standalone server's are about launching it: `args` without `command` (the image's
    /// entrypoint runs with them), any environment variable name Kubernetes takes
    /// (`CUDA_VISIBLE_DEVICES`, `FAIRWAY_*`, `my.var`; a repeated name keeps its last value),
    /// any `workingDir` and image reference, a `backoffLimit` above 100, and a name made only
    /// of digits. Resources, priority, gang size and fairway's own labels and annotations are
    /// read the same either way, and so are native jobs and priority classes.
    pub for_cluster: bool,
}

impl ParseOptions {
    /// For the Kubernetes controller: each Job is read as Kubernetes runs it
    /// ([`ParseOptions::for_cluster`]), and names its tenant (its namespace, `default` when
    /// left out).
    pub fn cluster() -> ParseOptions {
        ParseOptions { for_cluster: true, ..ParseOptions::default() }
    }
}

impl Default for ParseOptions {
    fn default() -> ParseOptions {
        ParseOptions { tenant_required: true, for_cluster: false }
    }
}

/// The deepest nesting read whatever the limits say (serde_json's own recursion limit).
pub const DEPTH_CAP: usize = 128;

impl ParseLimits {
    fn depth_limit(&self) -> usize {
        self.depth_max.min(DEPTH_CAP)
    }
}

impl Default for ParseLimits {
    fn default() -> ParseLimits {
        ParseLimits {
            input_bytes_max: 1 << 20,
            documents_max: 1000,
            depth_max: 64,
            nodes_max: 250_000,
            alias_replay_events_max: 100_000,
        }
    }
}

/// Splits `bytes` into documents. Errors here concern the whole input (document 0).
pub(crate) fn documents(bytes: &[u8], limits: &ParseLimits) -> Result<Vec<StrictValue>, SpecErrors> {
    if bytes.len() > limits.input_bytes_max {
        return Err(SpecError::input(format!(
            "input is {} bytes, more than the limit of {} bytes",
            bytes.len(),
            limits.input_bytes_max
        ))
        .into());
    }
    let text = utf8(bytes)?;
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let values = if looks_like_json(text) { json_or_yaml(text, limits)? } else { yaml(text, limits)? };
    check_shape(&values, limits)?;
    Ok(values)
}

fn utf8(bytes: &[u8]) -> Result<&str, SpecErrors> {
    std::str::from_utf8(bytes).map_err(|e| {
        SpecError::input(format!("input is not valid UTF-8: invalid byte sequence at byte offset {}", e.valid_up_to()))
            .into()
    })
}

/// JSON documents start with `{` or `[`; so do some YAML flow documents, which is why a
/// JSON failure falls back to YAML (JSON is YAML, but JSON's own errors are clearer).
fn looks_like_json(text: &str) -> bool {
    matches!(text.trim_start().as_bytes().first(), Some(b'{' | b'['))
}

fn json_or_yaml(text: &str, limits: &ParseLimits) -> Result<Vec<StrictValue>, SpecErrors> {
    match json(text, limits) {
        Ok(values) => Ok(values),
        Err(JsonFailure::Limit(errors)) => Err(errors),
        Err(JsonFailure::Syntax(json_error)) => yaml(text, limits).map_err(|yaml_errors| {
            let yaml_reason = yaml_errors
                .iter()
                .map(|e| e.reason.strip_prefix(INVALID_YAML).unwrap_or(&e.reason))
                .collect::<Vec<_>>()
                .join("; ");
            SpecError::input(format!("not valid JSON ({}) nor YAML ({yaml_reason})", json_reason(&json_error))).into()
        }),
    }
}

enum JsonFailure {
    Syntax(serde_json::Error),
    Limit(SpecErrors),
}

/// Concatenated JSON values (as in JSON Lines) are separate documents.
fn json(text: &str, limits: &ParseLimits) -> Result<Vec<StrictValue>, JsonFailure> {
    let mut values = Vec::new();
    for item in serde_json::Deserializer::from_str(text).into_iter::<StrictValue>() {
        values.push(item.map_err(JsonFailure::Syntax)?);
        if values.len() > limits.documents_max {
            return Err(JsonFailure::Limit(too_many_documents(limits).into()));
        }
    }
    Ok(values)
}

/// serde_json's message with its position moved to the front, as in the YAML messages.
/// Only syntax errors reach here: the value visitor records every other problem itself,
/// so the message is about the text (`expected `,` or `}``, `EOF while parsing a string`);
/// its programmer's "EOF" is said in the words of the YAML messages.
fn json_reason(e: &serde_json::Error) -> String {
    let message = e.to_string();
    let position = format!(" at line {} column {}", e.line(), e.column());
    let what = message.strip_suffix(&position).unwrap_or(&message);
    let what = match what {
        // A number that overflows a 64-bit float: say it in the words of the YAML check.
        "number out of range" => "a number is too large to represent".to_owned(),
        other => other.replace("EOF while parsing", "the input ends in the middle of"),
    };
    if e.line() == 0 { what } else { format!("line {}, column {}: {what}", e.line(), e.column()) }
}

const INVALID_YAML: &str = "invalid YAML: ";

fn yaml(text: &str, limits: &ParseLimits) -> Result<Vec<StrictValue>, SpecErrors> {
    let options = yaml_options(limits);
    let parsed: Result<Vec<StrictValue>, _> =
        serde_saphyr::from_str_multiple_with_options::<StrictValue, Vec<_>>(text, options);
    match parsed {
        Ok(values) => Ok(values),
        Err(e) => match e.without_snippet() {
            serde_saphyr::Error::Budget { breach: BudgetBreach::Documents { .. }, .. } => {
                Err(too_many_documents(limits).into())
            }
            serde_saphyr::Error::Budget { breach: BudgetBreach::Depth { .. }, .. } => Err(too_deep(0, limits).into()),
            other => Err(SpecError::input(format!("{INVALID_YAML}{}", yaml_reason(other, limits))).into()),
        },
    }
}

/// The parser's error in fairway's words, with its line and column. serde-saphyr's own
/// messages are written for the programmer who configured it ("set DuplicateKeyPolicy in
/// Options", "use Option<String>"), so each kind an input can cause is worded here; the
/// scanner's syntax messages ("unclosed quote", "mapping values are not allowed in this
/// context") are about the text and are kept.
fn yaml_reason(e: &serde_saphyr::Error, limits: &ParseLimits) -> String {
    use serde_saphyr::Error as E;
    let what = match e {
        E::AliasError { error, .. } => return yaml_reason(error, limits),
        E::ExternalMessage { msg, .. } => plain_or(msg, "the text is not valid YAML"),
        E::Message { msg, .. } => plain_or(msg, "the text is not valid YAML"),
        E::Eof { .. } => "the input ends in the middle of a value".to_owned(),
        E::UnknownAnchor { .. } => {
            "an alias (*name) refers to an anchor (&name) that is not defined before it".to_owned()
        }
        E::UnsupportedTag { tag, .. } => {
            format!("unsupported tag {}: fairway reads plain YAML values, remove the tag", quote(tag))
        }
        E::InvalidBinaryBase64 { .. } => "a !!binary value is not valid base64".to_owned(),
        E::BinaryNotUtf8 { .. } => "a !!binary value does not decode to UTF-8 text".to_owned(),
        E::NullIntoString { .. } => "a mapping key is null; keys must be strings".to_owned(),
        E::Unexpected { expected: "string scalar", .. } => {
            "a mapping key is a list or a mapping; keys must be strings".to_owned()
        }
        E::MergeValueNotMapOrSeqOfMaps { .. } => {
            "a merge key (<<) must be given a mapping or a list of mappings".to_owned()
        }
        E::NonFiniteFloat { value, .. } => format!("not a finite number: got {value}"),
        E::DuplicateMappingKey { key: Some(key), .. } => format!("duplicate key {}", quote(key)),
        E::DuplicateMappingKey { key: None, .. } => "duplicate key".to_owned(),
        E::AliasReplayLimitExceeded { .. }
        | E::AliasExpansionLimitExceeded { .. }
        | E::AliasReplayStackDepthExceeded { .. }
        | E::AliasReplayCounterOverflow { .. } => format!(
            "aliases (*name) expand to too much: the limit is {} replayed events",
            limits.alias_replay_events_max
        ),
        E::Budget { breach, .. } => budget_reason(breach, limits),
        _ => "the text is not valid YAML".to_owned(),
    };
    match e.location() {
        Some(at) if at.line() > 0 => format!("line {}, column {}: {what}", at.line(), at.column()),
        _ => what,
    }
}

fn budget_reason(breach: &BudgetBreach, limits: &ParseLimits) -> String {
    match breach {
        BudgetBreach::Nodes { .. } => format!("too many YAML nodes: the limit is {}", limits.nodes_max),
        BudgetBreach::Aliases { .. } | BudgetBreach::AliasAnchorRatio { .. } => {
            "too many aliases (*name) for the anchors they refer to".to_owned()
        }
        BudgetBreach::Documents { .. } => format!("too many documents: the limit is {}", limits.documents_max),
        BudgetBreach::Depth { .. } => format!("nests deeper than the limit of {}", limits.depth_limit()),
        _ => "the input is too large or too complex to read".to_owned(),
    }
}

/// Words that only make sense to a Rust programmer. A message containing one is replaced:
/// a user cannot act on it, and it must not leak the parser's internals.
const INTERNAL_WORDS: &[&str] = &[
    "Option", "serde", "Value", "u8", "u16", "u32", "u64", "u128", "i8", "i16", "i32", "i64", "i128", "f32", "f64",
    "struct", "enum", "usize", "String", "Vec<",
];

fn plain_or(message: &str, fallback: &str) -> String {
    let leaks = INTERNAL_WORDS.iter().any(|word| message.contains(word));
    if leaks || message.is_empty() { fallback.to_owned() } else { message.to_owned() }
}

fn yaml_options(limits: &ParseLimits) -> serde_saphyr::Options {
    let budget = serde_saphyr::budget! {
        max_documents: limits.documents_max,
        max_depth: limits.depth_limit(),
        max_nodes: limits.nodes_max,
    };
    let mut options = serde_saphyr::options! {
        budget: budget,
        // YAML 1.2 booleans only: `no` or `on` stay strings instead of turning into
        // booleans (the "Norway problem"); a boolean field given `yes` gets a clear error.
        strict_booleans: true,
        // `010` and `007` stay strings (a project named "010"), as in YAML 1.1 tools,
        // instead of turning into numbers that would be reported as 10.
        leading_zero_numbers_as_strings: true,
        // `1_000` is a number in YAML 1.1 only; under YAML 1.2 it is the string "1_000".
        underscored_numbers_as_strings: true,
        // A tag fairway does not know (`!secret`, `!include`) would otherwise be dropped,
        // and the value read as if it had none: a silent misread.
        reject_unsupported_tags: true,
        // Messages go into one-line errors; a source snippet would break them up.
        with_snippet: false,
    };
    // Repeated keys and NaN or infinities reach the value visitor, which records them with
    // their field path, so that they are reported with the document's other errors.
    options.duplicate_keys = serde_saphyr::DuplicateKeyPolicy::PassThrough;
    options.non_finite_float_policy = serde_saphyr::NonFiniteFloatPolicy::PassThrough;
    options.alias_limits.max_total_replayed_events = limits.alias_replay_events_max;
    options
}

fn too_many_documents(limits: &ParseLimits) -> SpecError {
    SpecError::input(format!("too many documents: the limit is {}", limits.documents_max))
}

fn too_deep(document: usize, limits: &ParseLimits) -> SpecError {
    SpecError::new(document, "", format!("nests deeper than the limit of {}", limits.depth_limit()))
}

/// Limits that the parsers do not enforce themselves (serde_json nests up to 128 deep
/// whatever `depth_max` says; YAML counts documents only approximately).
fn check_shape(values: &[StrictValue], limits: &ParseLimits) -> Result<(), SpecErrors> {
    if values.len() > limits.documents_max {
        return Err(too_many_documents(limits).into());
    }
    let errors: Vec<SpecError> = values
        .iter()
        .enumerate()
        .filter(|(_, v)| depth(&v.value) > limits.depth_limit())
        .map(|(i, _)| too_deep(i + 1, limits))
        .collect();
    if errors.is_empty() { Ok(()) } else { Err(SpecErrors(errors)) }
}
