//! The request side of the generic tool-call form (for templates that do not render tools): the system text that
//! lists the functions and asks for `{"tool_calls": [...]}` (read back by `output::tools::generic`).

use super::{ToolChoice, Tools};
use serde_json::Value;

/// The system text that describes the tools.
pub fn instructions(t: &Tools) -> String {
    let list: Vec<Value> =
        t.callable().map(|(name, params)| serde_json::json!({"name": name, "parameters": params})).collect();
    let when = match &t.choice {
        ToolChoice::Auto => "When a function helps to answer, call it",
        ToolChoice::Required => "Answer by calling one or more of these functions",
        ToolChoice::Named(_) => "Answer by calling this function",
    };
    format!(
        "You can call these functions:\n{}\n{when}: reply with only a JSON object of the form \
         {{\"tool_calls\": [{{\"name\": \"<function name>\", \"arguments\": {{<arguments>}}}}]}}.",
        Value::Array(list)
    )
}
