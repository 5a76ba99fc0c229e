//! Grammar (stub until llguidance lands).
/// Spec.
#[derive(Clone, Debug)]
pub enum GrammarSpec {
    /// obj
    JsonObject,
    /// schema
    JsonSchema(serde_json::Value),
}
/// Error.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct GrammarError(String);
/// Tok.
#[derive(Clone)]
pub struct GrammarTokenizer;
/// Constraint.
pub struct Constraint;
impl GrammarTokenizer {
    /// new
    pub fn new(_t: &strata_models::Tokenizer) -> Result<Self, GrammarError> {
        Ok(GrammarTokenizer)
    }
    /// c
    pub fn constraint(&self, _s: &GrammarSpec) -> Result<Constraint, GrammarError> {
        Err(GrammarError("not yet".into()))
    }
}
/// parse
pub fn from_response_format(v: &serde_json::Value) -> Result<Option<GrammarSpec>, GrammarError> {
    match v.get("type").and_then(|t| t.as_str()) {
        Some("text") | None => Ok(None),
        Some("json_object") => Ok(Some(GrammarSpec::JsonObject)),
        _ => Err(GrammarError("bad".into())),
    }
}
