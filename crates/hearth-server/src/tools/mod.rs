//! Tool calling: which tool-call format the model's chat template speaks, what `tools` / `tool_choice` /
//! `parallel_tool_calls` ask for, the grammar that enforces `required` and a named function, and the parser that
//! turns the model's output into `tool_calls` (streamed as they complete).
//!
//! Formats: [`hermes`] (`<tool_call>{"name": .., "arguments": {..}}</tool_call>`: Hermes, Qwen 2.5/3, SmolLM3 and
//! every template that mentions `<tool_call>`), [`llama3`] (`{"name": .., "parameters": {..}}` as the whole answer:
//! Llama 3.1–3.3, templates that mention `<|python_tag|>`), and [`generic`] for templates that do not render tools:
//! the tools are described in a system message and the model answers
//! `{"tool_calls": [{"name": .., "arguments": {..}}]}`.

pub mod generic;
pub mod hermes;
pub mod llama3;
pub mod parser;

use crate::error::{ApiError, ApiResult};
use crate::wire::chat::Conversation;
use hearth_engine::sampling::grammar::{lark_string, ConstraintSpec};
use serde_json::{json, Value};

/// How a model writes tool calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Hermes,
    Llama3,
    Generic,
}

impl Format {
    /// The format a chat template speaks.
    pub fn of_template(source: &str) -> Format {
        if source.contains("<tool_call>") {
            Format::Hermes
        } else if llama3::speaks(source) {
            Format::Llama3
        } else {
            Format::Generic
        }
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
        Ok(Some(Tools { format: Format::of_template(template), choice, parallel, functions }))
    }

    /// The functions a call may name under `tool_choice`.
    fn callable(&self) -> impl Iterator<Item = &(String, Value)> {
        self.functions.iter().filter(move |(n, _)| match &self.choice {
            ToolChoice::Named(want) => n == want,
            _ => true,
        })
    }

    /// Lark rules `call: f0 | f1 ...` with each function's `{"name": .., KEY: ..}` as a JSON schema (KEY:
    /// `arguments`, or Llama 3's `parameters`).
    fn call_rules(&self, key: &str) -> String {
        let mut names = Vec::new();
        let mut rules = String::new();
        for (i, (name, params)) in self.callable().enumerate() {
            let schema = json!({
                "type": "object",
                "properties": {"name": {"const": name}, key: params},
                "required": ["name", key],
                "additionalProperties": false,
                // Compact JSON: with free whitespace a small model can pad an empty object forever.
                "x-guidance": {"whitespace_flexible": false}
            });
            rules.push_str(&format!("f{i}: %json {schema}\n"));
            names.push(format!("f{i}"));
        }
        format!("call: {}\n{rules}", names.join(" | "))
    }

    /// The grammar that enforces `required` or a named function, or for Hermes `auto` guides the calls the model
    /// chooses to make (None for other formats' `auto`).
    pub fn constraint(&self) -> Option<ConstraintSpec> {
        let calls = if self.parallel { "+" } else { "" };
        let top = match (self.format, &self.choice) {
            // Hermes `auto`: text is free until the model opens a call; from `<tool_call>` to `</tool_call>` the call
            // must be valid (llguidance's lazy rule: TEXT matches as little as it can before the tag).
            (Format::Hermes, ToolChoice::Auto) => {
                let more = if self.parallel { "*" } else { "?" };
                format!(
                    "start: tc{more} TEXT\ntc: tc_open \"\\n\" call \"\\n\" {}\ntc_open[lazy]: TEXT {}\nTEXT: /(.|\\n)*/\n",
                    lark_string(hermes::END),
                    lark_string(hermes::START)
                )
            }
            // The other formats' `auto` answers are parsed, not guided: their calls have no opening tag to wait for.
            (_, ToolChoice::Auto) => return None,
            (format, _) => match format {
                Format::Hermes => format!(
                    "start: tc{calls}\ntc: {} \"\\n\" call \"\\n\" {} \"\\n\"?\n",
                    lark_string(hermes::START),
                    lark_string(hermes::END)
                ),
                Format::Generic => {
                    let more = if self.parallel { " (\", \" call)*" } else { "" };
                    format!("start: {} call{more} \"]}}\"\n", lark_string("{\"tool_calls\": ["))
                }
                Format::Llama3 => {
                    let more = if self.parallel { " (\"; \" call)*" } else { "" };
                    format!("start: call{more}\n")
                }
            },
        };
        let key = if self.format == Format::Llama3 { "parameters" } else { "arguments" };
        Some(ConstraintSpec::Lark(format!("%llguidance {{}}\n{top}{}", self.call_rules(key))))
    }

    /// For templates that do not render tools: the system text that describes them.
    pub fn instructions(&self) -> Option<String> {
        (self.format == Format::Generic).then(|| generic::instructions(self))
    }
}

/// One parsed call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    pub name: String,
    /// The arguments object as JSON text.
    pub arguments: String,
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
            let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/oracle/templates").join(name);
            Format::of_template(&std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display())))
        };
        assert_eq!(t("qwen3_like.jinja"), Format::Hermes);
        assert_eq!(t("llama31_like.jinja"), Format::Llama3);
        assert_eq!(Format::of_template("{{ '<|python_tag|>' }}"), Format::Llama3);
        assert_eq!(Format::of_template("<|im_start|>{{ message.content }}"), Format::Generic);
    }
}
