//! Which output constraint a request asks for, under any of the names clients use: OpenAI's `response_format`,
//! vLLM's `structured_outputs` and `guided_*` fields, llama.cpp's `grammar` (GBNF) and `json_schema`. At most one
//! may be set; each becomes an engine [`ConstraintSpec`], which the engine compiles when the request is submitted (a 400
//! naming the field when it is not a valid schema, regex or grammar: `GenParams::submit_error`).

use super::request::FieldNames;
use crate::error::{ApiError, ApiResult};
use crate::wire::common::{JsonValue, ResponseFormat};
use crate::wire::GenerationParams;
use hearth_engine::sampling::grammar::ConstraintSpec;
use serde_json::Value;

/// Most strings a `choice` constraint may list.
pub const MAX_CHOICE_STRINGS: usize = 1024;

/// A constraint and where it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Requested {
    pub spec: ConstraintSpec,
    pub source: Source,
}

/// Where a constraint came from, for the errors about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// A field of the request, as its API spells it.
    Field(&'static str),
    /// The grammar of the request's tools (their parameter schemas), which `tool_choice` asks for.
    Tools,
}

impl Requested {
    /// The field of the request that asked for the constraint.
    pub fn param(&self) -> &'static str {
        match self.source {
            Source::Field(f) => f,
            Source::Tools => "tools",
        }
    }
}

/// The request's constraint, if any; `fields` names the output format as the request's API spells it.
pub fn requested(p: &GenerationParams, fields: &FieldNames) -> ApiResult<Option<Requested>> {
    let mut found: Vec<Requested> = Vec::new();
    let mut add =
        |param: &'static str, spec: ConstraintSpec| found.push(Requested { spec, source: Source::Field(param) });
    let format = fields.response_format;
    match &p.response_format {
        None | Some(ResponseFormat::Text) => {}
        Some(ResponseFormat::JsonObject) | Some(ResponseFormat::JsonSchema(None)) => {
            add(format, ConstraintSpec::JsonObject)
        }
        Some(ResponseFormat::JsonSchema(Some(s))) => add(format, ConstraintSpec::JsonSchema(s.clone())),
    }
    if let Some(so) = &p.structured_outputs {
        add("structured_outputs", structured_outputs(so)?);
    }
    if let Some(JsonValue(s)) = &p.guided_json {
        add("guided_json", ConstraintSpec::JsonSchema(s.clone()));
    }
    if let Some(r) = &p.guided_regex {
        add("guided_regex", ConstraintSpec::Regex(r.clone()));
    }
    if let Some(c) = &p.guided_choice {
        add("guided_choice", choices("guided_choice", c)?);
    }
    if let Some(g) = &p.guided_grammar {
        add("guided_grammar", grammar(g));
    }
    if let Some(g) = &p.grammar {
        add("grammar", ConstraintSpec::Gbnf(g.clone()));
    }
    if let Some(JsonValue(s)) = &p.json_schema {
        add("json_schema", ConstraintSpec::JsonSchema(s.clone()));
    }
    match found.len() {
        0 | 1 => Ok(found.pop()),
        _ => Err(ApiError::param(
            found[1].param(),
            format!("`{}` and `{}` both constrain the output; send one of them", found[0].param(), found[1].param()),
        )),
    }
}

/// A grammar string: GBNF when it defines rules with `::=`, else Lark.
fn grammar(g: &str) -> ConstraintSpec {
    if g.contains("::=") {
        ConstraintSpec::Gbnf(g.to_string())
    } else {
        ConstraintSpec::Lark(g.to_string())
    }
}

fn choices(param: &str, list: &[Value]) -> ApiResult<ConstraintSpec> {
    if list.is_empty() || list.len() > MAX_CHOICE_STRINGS {
        return Err(ApiError::param(
            param,
            format!("`{param}` must list 1 to {MAX_CHOICE_STRINGS} strings, got {}", list.len()),
        ));
    }
    list.iter()
        .map(|v| match v {
            Value::String(s) if !s.is_empty() => Ok(s.clone()),
            _ => Err(ApiError::param(param, format!("`{param}` must hold non-empty strings"))),
        })
        .collect::<ApiResult<Vec<_>>>()
        .map(ConstraintSpec::Choice)
}

/// vLLM's `structured_outputs`: exactly one of `json`, `regex`, `choice`, `grammar`, `json_object`.
fn structured_outputs(m: &serde_json::Map<String, Value>) -> ApiResult<ConstraintSpec> {
    const P: &str = "structured_outputs";
    let mut out = Vec::new();
    for (k, v) in m {
        if v.is_null() {
            continue;
        }
        let bad = |what: &str| ApiError::param(P, format!("`{P}.{k}` must be {what}"));
        let spec = match k.as_str() {
            "json" => match v {
                Value::Object(_) | Value::Bool(_) => ConstraintSpec::JsonSchema(v.clone()),
                Value::String(s) => {
                    ConstraintSpec::JsonSchema(serde_json::from_str(s).map_err(|_| bad("a JSON schema"))?)
                }
                _ => return Err(bad("a JSON schema (an object)")),
            },
            "regex" => ConstraintSpec::Regex(v.as_str().ok_or_else(|| bad("a string"))?.to_string()),
            "choice" => choices(&format!("{P}.choice"), v.as_array().ok_or_else(|| bad("a list of strings"))?)?,
            "grammar" => grammar(v.as_str().ok_or_else(|| bad("a string"))?),
            "json_object" => match v {
                Value::Bool(true) => ConstraintSpec::JsonObject,
                Value::Bool(false) => continue,
                _ => return Err(bad("a boolean")),
            },
            // Options of vLLM's that change nothing here.
            "disable_fallback" | "disable_any_whitespace" | "disable_additional_properties" | "whitespace_pattern" => {
                continue
            }
            other => {
                return Err(ApiError::param(
                    P,
                    format!("`{P}.{other}` is not supported (use one of json, regex, choice, grammar, json_object)"),
                ))
            }
        };
        out.push(spec);
    }
    match out.len() {
        1 => Ok(out.remove(0)),
        0 => Err(ApiError::param(P, format!("`{P}` must set one of json, regex, choice, grammar, json_object"))),
        _ => Err(ApiError::param(P, format!("`{P}` may set only one of json, regex, choice, grammar, json_object"))),
    }
}
