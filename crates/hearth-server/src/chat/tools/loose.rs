//! The grammar of `auto` for the call forms models write outside their template's format (read back by
//! `output::tools::loose`): the lazy rules that open them and the rules that finish them, so that a call once begun
//! is a valid call of an offered function.
//!
//! Each opener is one lazy lexeme that ends with the function's name, `{"name": "get_weather"` (llama.cpp's triggers
//! name the functions too): a JSON answer whose `name` is no offered function (`{"name": "Alice"}`) stays free, and
//! the rest of the call is that function's. Openers:
//!
//! - **leads**, at the answer's start only: a bare call object, a list of them, or either in a ```` ```json ````
//!   fence; the rest of the run follows (more calls if parallel, the closing `]` and fence) and the answer ends;
//! - **tags**, anywhere in text (for the formats whose calls may follow text): `<function=NAME>` and
//!   `<function name="NAME">` with the arguments (a JSON object, or the XML form's `<parameter=KEY>` items), and
//!   before a call object every tag `output::tools::loose` reads (`<tool_call>` outside Hermes, `<function_call>`,
//!   `<tools>`, `<tool>`, `<response>`, `<json>`, `<JSON>`, `<xml>`); text goes on after the closing tag.
//!
//! Whitespace inside these calls is free but bounded (pretty-printed JSON fits; a small model cannot pad forever).
//!
//! The XML form (`xcall`, Qwen3-Coder's: `<function=NAME>`, `<parameter=KEY>value</parameter>` per argument,
//! `</function>`) is also a call of Hermes' own `<tool_call>` under `auto` (the enforced choices take JSON, whose
//! grammar bounds every value). Its keys are the
//! schema's properties in the schema's order, the required ones always (any keys where it declares none); a string
//! property's value is free text up to `</parameter>`, any other property's is JSON of its schema.

use super::grammar::{nested, Openers};
use super::Tools;
use crate::output::tools::loose::TAGS;
use hearth_engine::sampling::grammar::lark_string;
use serde_json::{json, Value};

/// Whitespace in an opener (free text until it is complete, so any amount).
const W: &str = "W: /[ \\t\\r\\n]*/\n";
/// Whitespace in the rest of a call (at most 16 characters in a row, as in its JSON); a free-text value up to its
/// closing tag; a key where the schema declares none.
const CALL_TERMS: &str =
    "WS1: /[ \\t\\r\\n]{1,16}/\nPTEXT: /(.|\\n)*/\nxv[lazy]: PTEXT \"</parameter>\"\nXKEY: /[^<>\\n]{1,256}/\n";
/// A fence's opening line.
const FENCE: &str = "LFENCE: /```(json|JSON|xml)?[ \\t]*\\n/\n";

impl Tools {
    /// The loose openers' rules (see the module's text): `lead` (a whole answer that is a run of calls) and, with
    /// tags, `ltag` (one tagged call after text, `TEXT` included); None when no function can be called.
    pub(super) fn loose_rules(&self, o: Openers) -> Option<String> {
        let more = |sep: &str| if self.parallel { format!(" (WS1? {sep}WS1? lcall)*") } else { String::new() };
        let (list_more, bare_more) = (more("\",\" "), more(""));
        let mut rules = String::new();
        let (mut leads, mut tags, mut calls) = (Vec::new(), Vec::new(), Vec::new());
        for (i, (name, _)) in self.callable().enumerate() {
            let quoted = lark_string(&json!(name).to_string());
            let head = format!("W \"{{\" W \"\\\"name\\\"\" W \":\" W {quoted}");
            // The rest of a call object after its name, the arguments alone, and a whole object (after the first).
            rules.push_str(&format!(
                "lr{i}: WS1? \",\" WS1? \"\\\"arguments\\\"\" WS1? \":\" WS1? la{i} WS1? \"}}\"\n\
                 lc{i}: \"{{\" WS1? \"\\\"name\\\"\" WS1? \":\" WS1? {quoted} lr{i}\n",
            ));
            calls.push(format!("lc{i}"));
            let mut lead = |id: &str, open: String, close: &str| {
                rules.push_str(&format!("{id}{i}[lazy]: W {open}{head}\n"));
                leads.push(format!("{id}{i} lr{i}{close}"));
            };
            if o.bare {
                lead("lb", String::new(), &bare_more);
                lead("ll", "\"[\" W ".into(), &format!("{list_more} WS1? \"]\""));
            }
            lead("lf", "LFENCE W ".into(), &format!("{bare_more} WS1? \"```\""));
            lead("lfl", "LFENCE W \"[\" W ".into(), &format!("{list_more} WS1? \"]\" WS1? \"```\""));
            if o.tags {
                let open =
                    [format!("<function={name}>"), format!("<function name=\"{name}\">")].map(|s| lark_string(&s));
                rules.push_str(&format!("lfn{i}[lazy]: TEXT ({})\n", open.join(" | ")));
                tags.push(format!("lfn{i} xa{i}"));
                for (t, tag) in TAGS.iter().enumerate().filter(|(_, t)| o.tool_call || **t != "tool_call") {
                    rules.push_str(&format!("lt{t}_{i}[lazy]: TEXT {} {head}\n", lark_string(&format!("<{tag}>"))));
                    tags.push(format!("lt{t}_{i} lr{i} WS1? {}", lark_string(&format!("</{tag}>"))));
                }
            }
        }
        if calls.is_empty() {
            return None;
        }
        rules.push_str(&format!("lead: ({}) WS1?\nlcall: {}\n{W}{FENCE}", leads.join(" | "), calls.join(" | ")));
        rules.push_str(&self.function_rules());
        if !tags.is_empty() {
            rules.push_str(&format!("ltag: {}\n", tags.join(" | ")));
        }
        Some(rules)
    }

    /// Each callable function's arguments (`la{i}`: a JSON object of its schema), what follows `<function=NAME>`
    /// (`xa{i}`: the arguments as a JSON object or in the XML form, then `</function>`), and `xcall`, a whole call
    /// in that form; with the terminals they use.
    pub(super) fn function_rules(&self) -> String {
        let mut rules = String::from(CALL_TERMS);
        let mut calls = Vec::new();
        for (i, (name, params)) in self.callable().enumerate() {
            rules.push_str(&format!("la{i}: %json {}\n", nested(params, params, true)));
            let props = params.get("properties").and_then(Value::as_object).filter(|p| !p.is_empty());
            let required: Vec<&str> = params
                .get("required")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            // The schema's properties in its order, each `<parameter=KEY>` value `</parameter>`, the required ones
            // always (as the pythonic form's rules); any keys where it declares none.
            let body = match props {
                None => "(WS1? \"<parameter=\" XKEY \">\" xv)*".to_string(),
                Some(props) => props
                    .iter()
                    .enumerate()
                    .map(|(k, (key, schema))| {
                        let open = lark_string(&format!("<parameter={key}>"));
                        // A property schema that is not an object (`true`, or not a schema at all) takes text.
                        let item = if crate::output::tools::is_text(schema) || !schema.is_object() {
                            format!("WS1? {open} xv")
                        } else {
                            rules.push_str(&format!("xj{i}_{k}: %json {}\n", nested(schema, params, true)));
                            format!("WS1? {open} WS1? xj{i}_{k} WS1? \"</parameter>\"")
                        };
                        if required.contains(&key.as_str()) {
                            format!("({item})")
                        } else {
                            format!("({item})?")
                        }
                    })
                    .collect::<Vec<_>>()
                    .join(" "),
            };
            let fn_open = lark_string(&format!("<function={name}>"));
            rules.push_str(&format!(
                "xa{i}: (WS1? la{i} | xp{i}) WS1? \"</function>\"\nxp{i}: {body}\nxc{i}: {fn_open} xa{i}\n"
            ));
            calls.push(format!("xc{i}"));
        }
        rules.push_str(&format!("xcall: {}\n", calls.join(" | ")));
        rules
    }
}
