//! Tool calls for chat templates that do not render tools: a system message lists the functions and asks for
//! `{"tool_calls": [{"name": .., "arguments": {..}}]}` as the whole answer when calling them. An answer that is
//! that JSON object is a list of calls; anything else is text.

use super::{Call, ToolChoice, Tools};
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

/// The calls of a whole answer, if the answer is a `{"tool_calls": [...]}` object.
pub fn parse(text: &str) -> Option<Vec<Call>> {
    let v: Value = serde_json::from_str(text.trim()).ok()?;
    let list = v.as_object().filter(|o| o.len() == 1)?.get("tool_calls")?.as_array()?;
    let calls: Option<Vec<Call>> = list.iter().map(super::call_of).collect();
    calls.filter(|c| !c.is_empty())
}
