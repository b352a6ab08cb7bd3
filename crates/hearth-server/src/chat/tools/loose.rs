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
//!   `<function name="NAME">` with the arguments object, and `<tool_call>` (outside Hermes), `<function_call>`,
//!   `<tools>` before a call object; text goes on after the closing tag.
//!
//! Whitespace inside these calls is free but bounded (pretty-printed JSON fits; a small model cannot pad forever).

use super::grammar::{nested, Openers};
use super::Tools;
use hearth_engine::sampling::grammar::lark_string;
use serde_json::json;

/// Whitespace: in an opener (free text until it is complete, so any amount), and in the rest of a call (at most 16
/// characters in a row, as in its JSON).
const WS: &str = "W: /[ \\t\\r\\n]*/\nWS1: /[ \\t\\r\\n]{1,16}/\n";
/// A fence's opening line.
const FENCE: &str = "LFENCE: /```(json|JSON|xml)?[ \\t]*\\n/\n";
/// The tags before a call object that open a call anywhere in text (Hermes' own `<tool_call>` is its format's).
const TAGS: [&str; 3] = ["tool_call", "function_call", "tools"];

impl Tools {
    /// The loose openers' rules (see the module's text): `lead` (a whole answer that is a run of calls) and, with
    /// tags, `ltag` (one tagged call after text, `TEXT` included); None when no function can be called.
    pub(super) fn loose_rules(&self, o: Openers) -> Option<String> {
        let more = |sep: &str| if self.parallel { format!(" (WS1? {sep}WS1? lcall)*") } else { String::new() };
        let (list_more, bare_more) = (more("\",\" "), more(""));
        let mut rules = String::new();
        let (mut leads, mut tags, mut calls) = (Vec::new(), Vec::new(), Vec::new());
        for (i, (name, params)) in self.callable().enumerate() {
            let quoted = lark_string(&json!(name).to_string());
            let head = format!("W \"{{\" W \"\\\"name\\\"\" W \":\" W {quoted}");
            // The rest of a call object after its name, the arguments alone, and a whole object (after the first).
            rules.push_str(&format!(
                "lr{i}: WS1? \",\" WS1? \"\\\"arguments\\\"\" WS1? \":\" WS1? la{i} WS1? \"}}\"\nla{i}: %json {}\n\
                 lc{i}: \"{{\" WS1? \"\\\"name\\\"\" WS1? \":\" WS1? {quoted} lr{i}\n",
                nested(params, params, true),
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
                tags.push(format!("lfn{i} WS1? la{i} WS1? \"</function>\""));
                for (t, tag) in TAGS.iter().enumerate().filter(|(_, t)| o.tool_call || **t != "tool_call") {
                    rules.push_str(&format!("lt{t}_{i}[lazy]: TEXT {} {head}\n", lark_string(&format!("<{tag}>"))));
                    tags.push(format!("lt{t}_{i} lr{i} WS1? {}", lark_string(&format!("</{tag}>"))));
                }
            }
        }
        if calls.is_empty() {
            return None;
        }
        rules.push_str(&format!("lead: ({}) WS1?\nlcall: {}\n{WS}{FENCE}", leads.join(" | "), calls.join(" | ")));
        if !tags.is_empty() {
            rules.push_str(&format!("ltag: {}\n", tags.join(" | ")));
        }
        Some(rules)
    }
}
