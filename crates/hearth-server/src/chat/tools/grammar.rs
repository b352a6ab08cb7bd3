//! The grammar of a request's tool calls: `required` and a named function are enforced (the answer is calls and
//! nothing else); `auto` is guided lazily — the text stays free until the model opens a call the way its format
//! does, and from there only a valid call of an offered function fits:
//!
//! - Hermes: the lazy rule `TEXT <tool_call>` (text matches as little as it can before the tag), text again after
//!   `</tool_call>`; a call inside is JSON or in the XML form of Qwen3-Coder's template (`<function=NAME>`;
//!   `required` and a named function take JSON only: the XML form's free-text values know no `maxLength`);
//! - Mistral: its `[TOOL_CALLS]` control token (`<[id]>` in the grammar, a token no text can produce) opens the
//!   calls; where the vocabulary spells it as text, the lazy rule as for Hermes. A vocabulary that has `[ARGS]` as a
//!   control token gets the newer form `[TOOL_CALLS]name[ARGS]{..}` per call, the list `[TOOL_CALLS] [{..}]`
//!   otherwise;
//! - the whole-answer formats (Llama 3 JSON, pythonic, generic): an answer whose first character opens a call (`{`,
//!   `[`) is calls, any other answer is free text; Llama 3's `<|python_tag|>` control token opens calls too;
//! - harmony (gpt-oss): the calls are written in its channels; `auto` leaves the answer free, `required` and a named
//!   function take an optional thought and then one call (`Tools::harmony`);
//! - in every format, the forms models write outside it (`super::loose`): a call object, list or fence of them that
//!   opens the answer, and in Hermes' and Mistral's text `<function=NAME>` and tags before a call object; each
//!   opens a call once it names an offered function.

use super::{pythonic, ToolChoice, Tools};
use crate::output::tools::{hermes, llama3, mistral, Format};
use hearth_engine::sampling::grammar::{lark_string, ConstraintSpec};
use hearth_engine::tokenizer::Tokenizer;
use serde_json::{json, Value};

/// Any text.
const TEXT: &str = "TEXT: /(.|\\n)*/\n";

/// Which of the loose forms' openers (`super::loose`) a format's `auto` grammar takes.
#[derive(Debug, Clone, Copy)]
pub struct Openers {
    /// A bare call object (and list) at the answer's start (formats whose own calls do not open with `{` / `[`).
    pub bare: bool,
    /// Tags anywhere in text.
    pub tags: bool,
    /// `<tool_call>` is a loose tag (not the format's own).
    pub tool_call: bool,
}

/// A control token as a grammar terminal, if the vocabulary has it.
fn control(tok: &Tokenizer, text: &str) -> Option<String> {
    tok.control_id(text).map(|id| format!("<[{id}]>"))
}

impl Tools {
    /// The grammar that enforces `required` or a named function, or guides `auto` (see the module's text).
    pub fn constraint(&self, tok: &Tokenizer) -> Option<ConstraintSpec> {
        let auto = self.choice == ToolChoice::Auto;
        if self.format == Format::Harmony {
            // the answer's channels carry the calls: `auto` leaves them free, the others are enforced in them
            return (!auto).then(|| ConstraintSpec::Lark(format!("%llguidance {{}}\n{}", self.harmony(tok))));
        }
        // `auto`: the loose forms' openers besides the format's own (`output::tools::loose`); tags in the text of
        // the formats whose calls may follow text.
        let text_calls = matches!(self.format, Format::Hermes | Format::Mistral);
        let openers = Openers {
            bare: matches!(self.format, Format::Hermes | Format::Mistral | Format::Pythonic),
            tags: text_calls,
            tool_call: self.format != Format::Hermes,
        };
        let loose = if auto { self.loose_rules(openers) } else { None };
        let (top, rules) = self.format_rules(tok, loose.is_some() && text_calls);
        let Some(loose) = loose else {
            return Some(ConstraintSpec::Lark(format!("%llguidance {{}}\n{top}{rules}")));
        };
        // The format's own `start` becomes `fstart`; Mistral's text may hold tagged calls before its own.
        let own = top.strip_prefix("start:").unwrap_or(&top);
        let start = match self.format {
            Format::Mistral if self.parallel => "lead | ltag* fstart",
            Format::Mistral => "lead | ltag? fstart",
            _ => "lead | fstart",
        };
        Some(ConstraintSpec::Lark(format!("%llguidance {{}}\nstart: {start}\nfstart:{own}{rules}{loose}")))
    }

    /// The format's own grammar: its `start` rule and terminals, and the call rules they use (`tagged`: Hermes'
    /// calls under `auto` may be loose tagged calls, `ltag`, too).
    fn format_rules(&self, tok: &Tokenizer, tagged: bool) -> (String, String) {
        let auto = self.choice == ToolChoice::Auto;
        let more = |sep: &str| if self.parallel { format!(" ({} call)*", lark_string(sep)) } else { String::new() };
        let calls = if self.parallel { "+" } else { "" };
        // A whole answer that is calls (after an optional control token `tag`), or for `auto` free text when its
        // first character does not open them.
        let whole = |open: char, body: String, tag: Option<String>| match (auto, tag) {
            (true, tag) => {
                let tagged = tag.map(|t| format!(" | {t} {body}")).unwrap_or_default();
                let free = format!("FREE: /[^\\s{}](.|\\n)*/\nWS: /\\s+/\n", regex_escape(open));
                format!("start: WS? (FREE | {body})?{tagged}\n{free}")
            }
            (false, Some(t)) => format!("start: {t}? {body}\n"),
            (false, None) => format!("start: {body}\n"),
        };
        let top = match self.format {
            Format::Hermes if auto => {
                let more = if self.parallel { "*" } else { "?" };
                let ltag = if tagged { "ltag | " } else { "" };
                format!(
                    "start: tc{more} TEXT\ntc: {ltag}tc_open \"\\n\" (call | xcall) \"\\n\" {}\ntc_open[lazy]: TEXT {}\n{TEXT}",
                    lark_string(hermes::END),
                    lark_string(hermes::START)
                )
            }
            Format::Hermes => format!(
                "start: tc{calls}\ntc: {} \"\\n\" call \"\\n\" {} \"\\n\"?\n",
                lark_string(hermes::START),
                lark_string(hermes::END)
            ),
            Format::Mistral => return self.mistral(tok),
            Format::Llama3 => whole('{', format!("call{}", more("; ")), control(tok, llama3::MARKER)),
            Format::Generic => {
                whole('{', format!("{} call{} \"]}}\"", lark_string("{\"tool_calls\": ["), more(", ")), None)
            }
            Format::Pythonic => whole('[', format!("\"[\" call{} \"]\"", more(", ")), None),
            // (harmony's grammar is built by `harmony`: `constraint` returns first) free text
            Format::Harmony => format!("start: TEXT\n{TEXT}"),
        };
        let rules = match self.format {
            Format::Pythonic => pythonic::call_rules(self.callable()),
            Format::Llama3 => self.call_rules("parameters"),
            _ => self.call_rules("arguments"),
        };
        (top, rules)
    }

    /// Harmony's answer under `required` or a named function: an optional thought (an `analysis` message), then one
    /// call, in either header form: the one OpenAI's harmony format gives the model's calls,
    /// `<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>ARGS<|call|>`, or the one gpt-oss's
    /// template writes calls in the history with, ` to=functions.NAME<|channel|>commentary json<|message|>ARGS<|call|>`
    /// (after the `assistant` of the header). A harmony call ends the answer: one call even with
    /// `parallel_tool_calls`. Markers are control tokens where the vocabulary has them, text otherwise.
    fn harmony(&self, tok: &Tokenizer) -> String {
        let m = |t: &str| control(tok, t).unwrap_or_else(|| lark_string(t));
        let (ch, msg, start, end_call) = (m("<|channel|>"), m("<|message|>"), m("<|start|>"), m("<|call|>"));
        // A thought's text: with control-token markers no text can hold its end; with text markers, as little as
        // it can before `<|end|>`.
        let thought = match control(tok, "<|end|>") {
            Some(end) => format!("thought: TEXT {end}\n"),
            None => format!("thought[lazy]: TEXT {}\n", lark_string("<|end|>")),
        };
        let mut names = Vec::new();
        let mut rules = String::new();
        for (i, (name, params)) in self.callable().enumerate() {
            let to = format!("to=functions.{name}");
            rules.push_str(&format!(
                "h{i}: {ch} {} {} \"json\" {msg} a{i} {end_call}\n\
                 t{i}: {} {ch} \"commentary json\" {msg} a{i} {end_call}\na{i}: %json {}\n",
                lark_string(&format!("commentary {to} ")),
                m("<|constrain|>"),
                lark_string(&format!(" {to}")),
                nested(params, params, false)
            ));
            names.push(format!("h{i} | t{i}"));
        }
        format!(
            "start: ({ch} \"analysis\" {msg} thought {start} \"assistant\")? call\ncall: {}\n{rules}{thought}{TEXT}",
            names.join(" | ")
        )
    }

    /// Mistral's calls (see the module's text).
    fn mistral(&self, tok: &Tokenizer) -> (String, String) {
        let auto = self.choice == ToolChoice::Auto;
        let marker = control(tok, mistral::MARKER);
        let args = control(tok, mistral::ARGS);
        let (top, rules) = match (&marker, &args) {
            // `[TOOL_CALLS]name[ARGS]{..}`, one marker per call.
            (Some(m), Some(a)) => {
                let calls = if self.parallel { "ncall+" } else { "ncall" };
                let start = if auto { format!("TEXT | {calls}") } else { calls.to_string() };
                let mut names = Vec::new();
                let mut rules = String::new();
                for (i, (name, params)) in self.callable().enumerate() {
                    rules.push_str(&format!(
                        "n{i}: {} {a} %json {}\n",
                        lark_string(name),
                        nested(params, params, false)
                    ));
                    names.push(format!("n{i}"));
                }
                (format!("start: {start}\nncall: {m} ({})\n{TEXT}", names.join(" | ")), rules)
            }
            _ => {
                let more = if self.parallel { " (\", \" call)*" } else { "" };
                let list = format!("\" \"? \"[\" call{more} \"]\"");
                let top = match (marker, auto) {
                    (Some(m), true) => format!("start: TEXT | {m} {list}\n{TEXT}"),
                    (Some(m), false) => format!("start: {m}? {list}\n"),
                    // The marker is text here: no text or grammar can keep a model from writing it, so the calls
                    // open where it appears (as for Hermes).
                    (None, true) => format!(
                        "start: TEXT | tc_open {list}\ntc_open[lazy]: TEXT {}\n{TEXT}",
                        lark_string(mistral::MARKER)
                    ),
                    (None, false) => {
                        format!("start: ({} \" \"?)? \"[\" call{more} \"]\"\n", lark_string(mistral::MARKER))
                    }
                };
                (top, self.call_rules("arguments"))
            }
        };
        (top, rules)
    }

    /// The functions a call may name under `tool_choice`.
    pub(super) fn callable(&self) -> impl Iterator<Item = &(String, Value)> {
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
            rules.push_str(&format!("f{i}: %json {}\n", nested(&call_schema(name, key, params), params, false)));
            names.push(format!("f{i}"));
        }
        format!("call: {}\n{rules}", names.join(" | "))
    }
}

/// A call object's schema, `{"name": const, KEY: parameters}`.
pub(super) fn call_schema(name: &str, key: &str, params: &Value) -> Value {
    json!({
        "type": "object",
        "properties": {"name": {"const": name}, key: params},
        "required": ["name", key],
        "additionalProperties": false,
    })
}

/// `schema` as the root of a nested JSON grammar, with the definitions of `params` (whose `$ref`s point into their
/// own root) carried to it. Its whitespace: none (`flexible` false: with free whitespace a small model can pad an
/// empty object forever), or up to 16 characters between tokens (pretty-printed JSON fits; padding is bounded).
pub(super) fn nested(schema: &Value, params: &Value, flexible: bool) -> Value {
    let mut schema = schema.clone();
    if !schema.is_object() {
        return schema;
    }
    schema["x-guidance"] = if flexible {
        json!({"whitespace_pattern": "[\\x20\\x0A\\x0D\\x09]{1,16}"})
    } else {
        json!({"whitespace_flexible": false})
    };
    for defs in ["$defs", "definitions"] {
        if let Some(d) = params.get(defs) {
            schema[defs] = d.clone();
        }
    }
    schema
}

/// `c` inside a regex character class.
fn regex_escape(c: char) -> String {
    if c.is_ascii_punctuation() {
        format!("\\{c}")
    } else {
        c.to_string()
    }
}
