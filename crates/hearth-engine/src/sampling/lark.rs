//! Lark text (llguidance's grammar dialect) shared by the grammar compiler and the GBNF converter.

/// `s` as a Lark string literal.
pub fn lark_string(s: &str) -> String {
    serde_json::Value::String(s.to_string()).to_string()
}
