//! What a request's tools ask for: `tools` / `tool_choice` / `parallel_tool_calls` checked and resolved against the
//! format the chat template speaks (`output::tools::Format`), the grammar that enforces `required` and a named
//! function and guides `auto` ([`grammar`]), and for templates that do not render tools the system text that
//! describes them ([`generic`], [`pythonic`]). Reading the calls back out of the answer is `output::tools`.

pub mod generic;
pub mod grammar;
mod loose;
pub mod pythonic;

use super::request::FieldNames;
use crate::error::{ApiError, ApiResult};
use crate::output::tools::{Declared, Format, Offered};
use crate::wire::chat::Conversation;
use serde_json::{json, Value};

/// `tool_choice`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolChoice {
    /// The model decides (its output is parsed; nothing is enforced).
    Auto,
    /// At least one call, enforced by a grammar.
    Required,
    /// A call of this function, enforced.
    Named(String),
}

/// The tools of a request that offers them (`tool_choice` other than `none`).
#[derive(Debug, Clone, PartialEq)]
pub struct Tools {
    pub format: Format,
    pub choice: ToolChoice,
    pub parallel: bool,
    /// Each function's name and parameter schema.
    pub functions: Vec<(String, Value)>,
    /// Whether the chat template renders `tools` itself (it mentions them).
    pub in_template: bool,
}

impl Tools {
    /// The request's tools, or None when it offers none or `tool_choice` is `none`; `fields` names a tool's
    /// parameter schema as the request's API spells it.
    pub fn resolve(c: &Conversation, template: &str, fields: &FieldNames) -> ApiResult<Option<Tools>> {
        let Some(list) = c.tools.as_ref().filter(|l| !l.is_empty()) else {
            if c.tool_choice
                .as_ref()
                .is_some_and(|t| !t.is_null() && t.as_str() != Some("none") && t.as_str() != Some("auto"))
            {
                return Err(ApiError::param("tool_choice", "`tool_choice` needs `tools`"));
            }
            return Ok(None);
        };
        let mut functions = Vec::with_capacity(list.len());
        for (i, t) in list.iter().enumerate() {
            let f = t.get("function");
            let name = f.and_then(|f| f.get("name")).and_then(Value::as_str);
            let (Some(name), Some("function")) = (name, t.get("type").and_then(Value::as_str)) else {
                return Err(ApiError::param(
                    "tools",
                    format!("`tools[{i}]` must be {{\"type\": \"function\", \"function\": {{\"name\": ..., \"parameters\": ...}}}}"),
                ));
            };
            if name.is_empty() || functions.iter().any(|(n, _): &(String, Value)| n == name) {
                return Err(ApiError::param(
                    "tools",
                    format!("`tools[{i}]`: function names must be non-empty and unique"),
                ));
            }
            let params = match f.and_then(|f| f.get("parameters")) {
                None | Some(Value::Null) => json!({"type": "object"}),
                Some(p @ Value::Object(_)) => p.clone(),
                Some(_) => {
                    let at = fields.tool_schema_at(i);
                    return Err(ApiError::param(&at, format!("`{at}` must be a JSON schema object")));
                }
            };
            functions.push((name.to_string(), params));
        }
        let choice = match &c.tool_choice {
            None | Some(Value::Null) => ToolChoice::Auto,
            Some(Value::String(s)) if s == "auto" => ToolChoice::Auto,
            Some(Value::String(s)) if s == "none" => return Ok(None),
            Some(Value::String(s)) if s == "required" => ToolChoice::Required,
            Some(v @ Value::Object(_)) => {
                let name = v.get("function").and_then(|f| f.get("name")).and_then(Value::as_str);
                match name {
                    Some(n) if functions.iter().any(|(f, _)| f == n) => ToolChoice::Named(n.to_string()),
                    Some(n) => return Err(ApiError::param("tool_choice", format!("`tool_choice` names `{n}`, which is not in `tools`"))),
                    None => {
                        return Err(ApiError::param(
                            "tool_choice",
                            "`tool_choice` must be `auto`, `none`, `required` or {\"type\": \"function\", \"function\": {\"name\": ...}}",
                        ))
                    }
                }
            }
            Some(_) => {
                return Err(ApiError::param(
                    "tool_choice",
                    "`tool_choice` must be `auto`, `none`, `required` or {\"type\": \"function\", \"function\": {\"name\": ...}}",
                ))
            }
        };
        let parallel = match &c.parallel_tool_calls {
            None | Some(Value::Null) => true,
            Some(Value::Bool(b)) => *b,
            Some(_) => return Err(ApiError::param("parallel_tool_calls", "`parallel_tool_calls` must be a boolean")),
        };
        let in_template = template.contains("tools");
        let format = Format::of_template(template);
        Ok(Some(Tools { format, choice, parallel, functions, in_template }))
    }

    /// What the answer side reads calls by: the format, and every function in `tools`.
    pub fn offered(&self) -> Offered {
        Offered { format: self.format, functions: self.functions.iter().map(|(n, p)| Declared::new(n, p)).collect() }
    }

    /// For templates that do not render tools: the system text that describes them (generic, and pythonic for
    /// Gemma's own templates).
    pub fn instructions(&self) -> Option<String> {
        match self.format {
            Format::Generic => Some(generic::instructions(self)),
            Format::Pythonic if !self.in_template => Some(pythonic::instructions(self)),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn described_in_the_prompt_where_the_template_does_not_render_tools() {
        let body = json!({"messages": [{"role": "user", "content": "hi"}], "tool_choice": "required", "tools": [
            {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]});
        let conv = <Conversation as crate::wire::RequestBody>::from_body(&body).expect("body");
        let text = |template: &str| {
            Tools::resolve(&conv, template, &FieldNames::CHAT).expect("tools").expect("some").instructions()
        };
        let gemma = text("<start_of_turn>user\n{{ message.content }}").expect("Gemma's template does not render tools");
        assert!(gemma.contains("\"get_weather\"") && gemma.contains("Python list"), "{gemma}");
        assert!(text("<start_of_turn>{% for t in tools %}{{ t | tojson }}{% endfor %}").is_none());
        assert!(text("[AVAILABLE_TOOLS]{{ tools | tojson }}[TOOL_CALLS]").is_none());
        assert!(text("<|im_start|>").is_some_and(|t| t.contains("tool_calls")));
    }
}
