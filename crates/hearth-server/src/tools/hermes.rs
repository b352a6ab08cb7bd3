//! Hermes-style calls (Hermes 2/3, Qwen 2.5/3, SmolLM3): each call is a JSON object between two tags,
//! `<tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>`; text may come before and between calls.

pub const START: &str = "<tool_call>";
pub const END: &str = "</tool_call>";

/// The call inside one pair of tags (`body`: the text between them), if it is one.
pub fn parse_body(body: &str) -> Option<super::Call> {
    let v: serde_json::Value = serde_json::from_str(body.trim()).ok()?;
    super::call_of(&v)
}
