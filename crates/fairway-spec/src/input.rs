//! From raw bytes to one untyped value per document, within budgets: the input is
//! untrusted (users submit it), so size, document count, nesting and alias expansion are
//! all bounded before anything is built from it.

use serde_json::Value;
use serde_saphyr::budget::BudgetBreach;

use crate::error::{SpecError, SpecErrors};
use crate::value::{StrictValue, depth};

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
pub(crate) fn documents(bytes: &[u8], limits: &ParseLimits) -> Result<Vec<Value>, SpecErrors> {
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

fn json_or_yaml(text: &str, limits: &ParseLimits) -> Result<Vec<Value>, SpecErrors> {
    match json(text, limits) {
        Ok(values) => Ok(values),
        Err(JsonFailure::Limit(errors)) => Err(errors),
        Err(JsonFailure::Syntax(json_error)) => yaml(text, limits).map_err(|yaml_errors| {
            let yaml_reason = yaml_errors.iter().map(|e| e.reason.as_str()).collect::<Vec<_>>().join("; ");
            SpecError::input(format!("not valid JSON ({json_error}) nor YAML ({yaml_reason})")).into()
        }),
    }
}

enum JsonFailure {
    Syntax(serde_json::Error),
    Limit(SpecErrors),
}

/// Concatenated JSON values (as in JSON Lines) are separate documents.
fn json(text: &str, limits: &ParseLimits) -> Result<Vec<Value>, JsonFailure> {
    let mut values = Vec::new();
    for item in serde_json::Deserializer::from_str(text).into_iter::<StrictValue>() {
        let StrictValue(value) = item.map_err(JsonFailure::Syntax)?;
        values.push(value);
        if values.len() > limits.documents_max {
            return Err(JsonFailure::Limit(too_many_documents(limits).into()));
        }
    }
    Ok(values)
}

fn yaml(text: &str, limits: &ParseLimits) -> Result<Vec<Value>, SpecErrors> {
    let options = yaml_options(limits);
    let parsed: Result<Vec<StrictValue>, _> =
        serde_saphyr::from_str_multiple_with_options::<StrictValue, Vec<_>>(text, options);
    match parsed {
        Ok(values) => Ok(values.into_iter().map(|StrictValue(v)| v).collect()),
        Err(serde_saphyr::Error::Budget { breach: BudgetBreach::Documents { .. }, .. }) => {
            Err(too_many_documents(limits).into())
        }
        Err(serde_saphyr::Error::Budget { breach: BudgetBreach::Depth { .. }, .. }) => Err(too_deep(0, limits).into()),
        Err(e) => Err(SpecError::input(format!("invalid YAML: {e}")).into()),
    }
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
        // Messages go into one-line errors; a source snippet would break them up.
        with_snippet: false,
    };
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
fn check_shape(values: &[Value], limits: &ParseLimits) -> Result<(), SpecErrors> {
    if values.len() > limits.documents_max {
        return Err(too_many_documents(limits).into());
    }
    let errors: Vec<SpecError> = values
        .iter()
        .enumerate()
        .filter(|(_, v)| depth(v) > limits.depth_limit())
        .map(|(i, _)| too_deep(i + 1, limits))
        .collect();
    if errors.is_empty() { Ok(()) } else { Err(SpecErrors(errors)) }
}
