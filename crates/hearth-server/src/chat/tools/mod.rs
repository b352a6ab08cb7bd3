//! Tool calling: which tool-call format the model's chat template speaks, what `tools` / `tool_choice` /
//! `parallel_tool_calls` ask for, the grammar that enforces `required` and a named function, and the parser that
//! turns the model's output into `tool_calls` (streamed as they complete).
//!
//! Formats: [`hermes`] (`<tool_call>{"name": .., "arguments": {..}}</tool_call>`: Hermes, Qwen 2.5/3, SmolLM3 and
//! every template that mentions `<tool_call>`), [`mistral`] (`[TOOL_CALLS] [{"name": .., "arguments": {..}}]` or
//! `[TOOL_CALLS]name[ARGS]{..}`: templates that mention `[TOOL_CALLS]`), [`llama3`] (`{"name": .., "parameters": {..}}`
//! as the whole answer: Llama 3.1–3.3, templates that mention `<|python_tag|>`), [`pythonic`]
//! (`[name(key=value, ..)]` as the whole answer: Gemma, Llama 4 and the pythonic tool templates), and [`generic`] for
//! templates that do not render tools: the tools are described in a system message and the model answers
//! `{"tool_calls": [{"name": .., "arguments": {..}}]}`. Gemma's own templates do not render tools either: they are
//! described in a system message too, asking for the pythonic form.

pub mod generic;
pub mod grammar;
pub mod hermes;
pub mod llama3;
pub mod mistral;
pub mod parser;
pub mod pythonic;

use crate::error::{ApiError, ApiResult};
use crate::wire::chat::Conversation;
use serde_json::{json, Value};

/// How a model writes tool calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Hermes,
    Mistral,
    Llama3,
    Pythonic,
    Generic,
}

impl Format {
    /// The format a chat template speaks (a template that spells out the pythonic form is pythonic even where it
    /// has Llama 3's markers too).
    pub fn of_template(source: &str) -> Format {
        if source.contains(hermes::START) {
            Format::Hermes
        } else if mistral::speaks(source) {
            Format::Mistral
        } else if llama3::speaks(source) && !pythonic::asked(source) {
            Format::Llama3
        } else if pythonic::speaks(source) {
            Format::Pythonic
        } else {
            Format::Generic
        }
    }
}

/// A new `tool_calls[].id`: `call_` and 24 hex digits, or for the Mistral format 9 of those digits (Mistral's
/// templates raise on ids of any other length when the calls come back in `messages`).
pub fn call_id(format: Format) -> String {
    let id = crate::state::new_id("call").replacen("call-", "call_", 1);
    match format {
        Format::Mistral => id[id.len() - 9..].to_string(),
        _ => id,
    }
}

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
    /// The request's tools, or None when it offers none or `tool_choice` is `none`.
    pub fn resolve(c: &Conversation, template: &str) -> ApiResult<Option<Tools>> {
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
                    return Err(ApiError::param(
                        "tools",
                        format!("`tools[{i}].function.parameters` must be a JSON schema object"),
                    ))
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
        Ok(Some(Tools { format: Format::of_template(template), choice, parallel, functions, in_template }))
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

/// One parsed call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    pub name: String,
    /// The arguments object as JSON text.
    pub arguments: String,
}

/// The first JSON value of `s` and the bytes it takes (what follows it is left to the caller).
fn first_json(s: &str) -> Option<(Value, usize)> {
    let mut it = serde_json::Deserializer::from_str(s).into_iter::<Value>();
    let v = it.next()?.ok()?;
    Some((v, it.byte_offset()))
}

/// A call from a JSON object `{"name": .., "arguments": {..}}` (`parameters` is taken for `arguments` too).
pub fn call_of(v: &Value) -> Option<Call> {
    let name = v.get("name")?.as_str()?.to_string();
    let args = v.get("arguments").or_else(|| v.get("parameters")).cloned().unwrap_or_else(|| json!({}));
    let args = match args {
        Value::String(s) => serde_json::from_str::<Value>(&s).ok().filter(Value::is_object)?,
        a @ Value::Object(_) => a,
        _ => return None,
    };
    Some(Call { name, arguments: args.to_string() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_of_real_templates() {
        let t = |name: &str| {
            let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").join(name);
            Format::of_template(&std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display())))
        };
        assert_eq!(t("tools/oracle/templates/qwen3_like.jinja"), Format::Hermes);
        assert_eq!(t("tools/oracle/templates/llama31_like.jinja"), Format::Llama3);
        assert_eq!(t("tools/oracle/templates/mistral_like.jinja"), Format::Mistral);
        assert_eq!(t("bench/templates/gemma3.jinja"), Format::Pythonic);
        let cases = [
            ("{{ '<|python_tag|>' }}", Format::Llama3),
            ("{{ '[TOOL_CALLS]' + name + '[ARGS]' + arguments }}", Format::Mistral),
            ("Environment: ipython\nRespond in the format [func_name1(params_name1=params_value1)]", Format::Pythonic),
            ("{{ '<|header_start|>assistant<|header_end|>' }}{{ '<|python_start|>' }}", Format::Pythonic),
            ("<|im_start|>{{ message.content }}", Format::Generic),
        ];
        for (source, want) in cases {
            assert_eq!(Format::of_template(source), want, "{source:?}");
        }
    }

    #[test]
    fn mistral_ids_have_nine_characters() {
        let id = call_id(Format::Mistral);
        assert!(id.len() == 9 && id.chars().all(|c| c.is_ascii_alphanumeric()), "{id}");
        assert!(call_id(Format::Hermes).starts_with("call_"));
        assert_ne!(call_id(Format::Mistral), call_id(Format::Mistral));
    }

    #[test]
    fn described_in_the_prompt_where_the_template_does_not_render_tools() {
        let body = json!({"messages": [{"role": "user", "content": "hi"}], "tool_choice": "required", "tools": [
            {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]});
        let conv = <Conversation as crate::wire::RequestBody>::from_body(&body).expect("body");
        let text = |template: &str| Tools::resolve(&conv, template).expect("tools").expect("some").instructions();
        let gemma = text("<start_of_turn>user\n{{ message.content }}").expect("Gemma's template does not render tools");
        assert!(gemma.contains("\"get_weather\"") && gemma.contains("Python list"), "{gemma}");
        assert!(text("<start_of_turn>{% for t in tools %}{{ t | tojson }}{% endfor %}").is_none());
        assert!(text("[AVAILABLE_TOOLS]{{ tools | tojson }}[TOOL_CALLS]").is_none());
        assert!(text("<|im_start|>").is_some_and(|t| t.contains("tool_calls")));
    }
}
