//! Tool calls in the answer: which format a chat template speaks, and reading a model's calls back out of its text
//! ([`parser`], streamed as they complete). The request side (what `tools` / `tool_choice` ask for, the grammar that
//! enforces it, the system text for templates that do not render tools) is `chat::tools`.
//!
//! Formats: [`hermes`] (`<tool_call>{"name": .., "arguments": {..}}</tool_call>`: Hermes, Qwen 2.5/3, SmolLM3 and
//! every template that mentions `<tool_call>`), [`mistral`] (`[TOOL_CALLS] [{"name": .., "arguments": {..}}]` or
//! `[TOOL_CALLS]name[ARGS]{..}`: templates that mention `[TOOL_CALLS]`), [`llama3`] (`{"name": .., "parameters": {..}}`
//! as the whole answer: Llama 3.1–3.3, templates that mention `<|python_tag|>`), [`pythonic`]
//! (`[name(key=value, ..)]` as the whole answer: Gemma, Llama 4 and the pythonic tool templates), and [`generic`] for
//! templates that do not render tools: the tools are described in a system message and the model answers
//! `{"tool_calls": [{"name": .., "arguments": {..}}]}`. Gemma's own templates do not render tools either: they are
//! described in a system message too, asking for the pythonic form. Besides its template's format, a model's calls
//! are read in the [`loose`] forms that models write when they leave it (fenced or bare JSON, tags). Harmony
//! templates (gpt-oss) render the tools themselves and the answer's channels carry the calls
//! (`crate::output::harmony`).

pub mod generic;
pub mod hermes;
pub mod llama3;
pub mod loose;
pub mod mistral;
pub mod parser;
pub mod pythonic;

use serde_json::{json, Value};
use std::sync::Arc;

/// How a model writes tool calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Hermes,
    Mistral,
    Llama3,
    Pythonic,
    Generic,
    /// OpenAI's harmony (gpt-oss): calls are commentary messages to `functions.NAME` (`crate::output::harmony`).
    Harmony,
}

impl Format {
    /// The format a chat template speaks (a template that spells out the pythonic form is pythonic even where it
    /// has Llama 3's markers too).
    pub fn of_template(source: &str) -> Format {
        if crate::output::harmony::template_speaks(source) {
            Format::Harmony
        } else if source.contains(hermes::START) {
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

/// The tools a request offers, as the answer side reads them: the format its template speaks and the functions it
/// declares (the only ones a [`loose`] form may call).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Offered {
    pub format: Format,
    pub functions: Arc<[Declared]>,
}

/// A function a request declares, as its calls are read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Declared {
    pub name: String,
    /// Its parameters whose schema says they are strings: in the XML form (`<parameter=KEY>value</parameter>`)
    /// their values are the text as written; any other value is read as JSON where it parses.
    pub text_params: Vec<String>,
}

impl Declared {
    /// `name` with the parameter schema `params` (a JSON schema object).
    pub fn new(name: &str, params: &Value) -> Self {
        let props = params.get("properties").and_then(Value::as_object);
        let text_params = props.into_iter().flatten().filter(|(_, s)| is_text(s)).map(|(k, _)| k.clone()).collect();
        Self { name: name.to_string(), text_params }
    }

    /// `name` without parameter types (every XML value read as JSON where it parses).
    pub fn untyped(name: &str) -> Self {
        Self { name: name.to_string(), text_params: Vec::new() }
    }

    /// The value of parameter `key` written as `raw` text in the XML form.
    pub fn value(&self, key: &str, raw: &str) -> Value {
        if self.text_params.iter().any(|k| k == key) {
            return Value::String(raw.to_string());
        }
        serde_json::from_str(raw.trim()).unwrap_or_else(|_| Value::String(raw.to_string()))
    }
}

/// Whether a parameter's schema makes it a string: `"type": "string"` (or a list of types with `string` in it),
/// or no type and an `enum` of strings only.
pub fn is_text(schema: &Value) -> bool {
    match schema.get("type") {
        Some(Value::String(t)) => t == "string",
        Some(Value::Array(ts)) => ts.iter().any(|t| t == "string"),
        Some(_) => false,
        None => schema
            .get("enum")
            .and_then(Value::as_array)
            .is_some_and(|e| !e.is_empty() && e.iter().all(Value::is_string)),
    }
}

/// A new `tool_calls[].id`: `call_` and 24 hex digits, or for the Mistral format 9 of those digits (Mistral's
/// templates raise on ids of any other length when the calls come back in `messages`).
pub fn call_id(format: Format) -> String {
    let id = crate::ids::item_id("call");
    match format {
        Format::Mistral => id[id.len() - 9..].to_string(),
        _ => id,
    }
}

/// One parsed call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    pub name: String,
    /// The arguments object as JSON text.
    pub arguments: String,
}

/// Characters of a function name written outside JSON (Mistral's `name[ARGS]`, `<function=name>`).
fn name_char(c: char) -> bool {
    c.is_alphanumeric() || matches!(c, '_' | '-' | '.')
}

/// A JSON value at the start of a text.
enum Json {
    /// The value and the bytes it takes.
    Value(Value, usize),
    /// The text ends inside it (or is empty, or only whitespace).
    Eof,
    /// Not JSON.
    Bad,
}

fn json_at(s: &str) -> Json {
    let mut it = serde_json::Deserializer::from_str(s).into_iter::<Value>();
    match it.next() {
        None => Json::Eof,
        Some(Ok(v)) => Json::Value(v, it.byte_offset()),
        Some(Err(e)) if e.is_eof() => Json::Eof,
        Some(Err(_)) => Json::Bad,
    }
}

/// What a text (from some point) is, as calls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scan {
    /// Its first `len` bytes are these calls.
    Calls(Vec<Call>, usize),
    /// It may still become calls: the text ends first. The calls that completed before the end (what an answer
    /// the length limit cut keeps).
    More(Vec<Call>),
    /// It is not calls.
    No,
}

impl Scan {
    /// The calls of a whole text, if it is calls.
    pub fn whole(self) -> Option<Vec<Call>> {
        match self {
            Scan::Calls(c, _) => Some(c),
            _ => None,
        }
    }

    /// The same, with `n` more bytes before it.
    fn shifted(self, n: usize) -> Scan {
        match self {
            Scan::Calls(c, len) => Scan::Calls(c, len + n),
            other => other,
        }
    }
}

/// The complete elements of a JSON list that the text ends inside of (`s` starts with `[`; the list may have
/// closed right before the end), or None when what was read is not a JSON list.
fn cut_list(s: &str) -> Option<Vec<Value>> {
    let mut out = Vec::new();
    let mut i = 1;
    loop {
        i = skip_ws(s, i);
        let rest = &s[i..];
        if rest.is_empty() || rest.starts_with(']') {
            return Some(out);
        }
        if !out.is_empty() {
            i = skip_ws(s, i + rest.strip_prefix(',').map(|_| 1)?);
        }
        match json_at(&s[i..]) {
            Json::Value(v, used) => {
                out.push(v);
                i += used;
            }
            Json::Eof => return Some(out),
            Json::Bad => return None,
        }
    }
}

/// `i` moved past whitespace.
fn skip_ws(s: &str, i: usize) -> usize {
    i + s[i..].len() - s[i..].trim_start().len()
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
}
