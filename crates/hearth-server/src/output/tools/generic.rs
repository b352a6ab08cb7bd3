//! Tool calls for chat templates that do not render tools: a system message lists the functions and asks for
//! `{"tool_calls": [{"name": .., "arguments": {..}}]}` as the whole answer when calling them (`chat::tools::generic`).
//! An answer that is that JSON object is a list of calls; anything else is text.

use super::Call;
use serde_json::Value;

/// The calls of a whole answer, if the answer is a `{"tool_calls": [...]}` object.
pub fn parse(text: &str) -> Option<Vec<Call>> {
    let v: Value = serde_json::from_str(text.trim()).ok()?;
    let list = v.as_object().filter(|o| o.len() == 1)?.get("tool_calls")?.as_array()?;
    let calls: Option<Vec<Call>> = list.iter().map(super::call_of).collect();
    calls.filter(|c| !c.is_empty())
}
