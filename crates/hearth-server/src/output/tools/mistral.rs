//! Mistral tool calls (Mistral 7B v0.3, Mistral-Nemo, Mistral Small: templates that mention `[TOOL_CALLS]` and
//! render the tools in `[AVAILABLE_TOOLS]`). The answer is `[TOOL_CALLS] [{"name": "f", "arguments": {...}}, ...]`;
//! newer templates (Mistral Small 3.2, Magistral, Devstral) have `[TOOL_CALLS]f[ARGS]{...}` per call instead. The
//! markers are control tokens that the text usually leaves out, so `[{...}]` and `f{...}g{...}` are calls too.

use super::{call_of, cut_list, json_at, name_char, Call, Json, Scan};
use serde_json::{json, Value};

/// The control token before the calls.
pub const MARKER: &str = "[TOOL_CALLS]";
/// Between a function's name and its arguments, in the newer form.
pub const ARGS: &str = "[ARGS]";
/// Before a call's id, between the name and `[ARGS]` (Mistral Small 3.2 renders earlier calls with it).
pub const CALL_ID: &str = "[CALL_ID]";

/// Whether a chat template speaks this format.
pub fn speaks(template: &str) -> bool {
    template.contains(MARKER)
}

/// Whether an answer that begins with `text` is calls (None: not known yet): it opens with the marker, with `[`,
/// or with a name followed by its arguments (`[ARGS]`, `[CALL_ID]`, or `{` where the text leaves markers out).
pub fn opens(text: &str) -> Option<bool> {
    let s = text.trim_start();
    if s.starts_with(MARKER) || (s.starts_with('[') && !MARKER.starts_with(s)) {
        return Some(true);
    }
    if MARKER.starts_with(s) {
        return None;
    }
    let after = s.trim_start_matches(name_char);
    if after.len() == s.len() {
        return Some(false);
    }
    if after.starts_with('{') || after.starts_with(ARGS) || after.starts_with(CALL_ID) {
        return Some(true);
    }
    if after.is_empty() || ARGS.starts_with(after) || CALL_ID.starts_with(after) {
        return None;
    }
    Some(false)
}

/// The calls of `text` (an answer, or its end from the marker on), if it is nothing but calls in either form.
pub fn parse(text: &str) -> Option<Vec<Call>> {
    scan(text).whole()
}

/// `text` as calls: `More` when it ends inside one (with those before it).
pub fn scan(text: &str) -> Scan {
    let mut calls = Vec::new();
    let text = text.trim();
    let mut rest = text;
    while !rest.is_empty() {
        rest = rest.strip_prefix(MARKER).unwrap_or(rest).trim_start();
        let used = if rest.starts_with(['[', '{']) {
            match json_at(rest) {
                Json::Value(Value::Array(list), used) => {
                    for c in &list {
                        let Some(c) = call_of(c) else { return Scan::No };
                        calls.push(c);
                    }
                    used
                }
                Json::Value(v, used) => {
                    let Some(c) = call_of(&v) else { return Scan::No };
                    calls.push(c);
                    used
                }
                Json::Eof if rest.starts_with('[') => {
                    let cut: Option<Vec<Call>> = cut_list(rest).unwrap_or_default().iter().map(call_of).collect();
                    let Some(cut) = cut else { return Scan::No };
                    calls.extend(cut);
                    return Scan::More(calls);
                }
                Json::Eof => return Scan::More(calls),
                Json::Bad => return Scan::No,
            }
        } else {
            let name_len = rest.len() - rest.trim_start_matches(name_char).len();
            if name_len == 0 {
                return Scan::No;
            }
            let name = &rest[..name_len];
            let mut args = &rest[name_len..];
            if let Some(after) = args.strip_prefix(CALL_ID) {
                args = after.trim_start_matches(|c: char| c.is_ascii_alphanumeric());
            }
            args = args.strip_prefix(ARGS).unwrap_or(args);
            if !args.is_empty() && (ARGS.starts_with(args) || CALL_ID.starts_with(args)) {
                return Scan::More(calls);
            }
            match json_at(args) {
                Json::Value(v, used) => {
                    let Some(c) = call_of(&json!({"name": name, "arguments": v})) else { return Scan::No };
                    calls.push(c);
                    rest.len() - args.len() + used
                }
                Json::Eof => return Scan::More(calls),
                Json::Bad => return Scan::No,
            }
        };
        rest = rest[used..].trim_start();
    }
    if calls.is_empty() {
        Scan::No
    } else {
        Scan::Calls(calls, text.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_and_not_calls() {
        let c = |n: &str, a: &str| Call { name: n.into(), arguments: a.into() };
        let two = vec![c("f", "{\"x\":1}"), c("g", "{}")];
        let cases: Vec<(&str, Option<Vec<Call>>)> = vec![
            ("[TOOL_CALLS] [{\"name\": \"f\", \"arguments\": {\"x\": 1}}, {\"name\": \"g\", \"arguments\": {}}]", Some(two.clone())),
            ("[{\"name\": \"f\", \"arguments\": {\"x\": 1}, \"id\": \"abcdef123\"}, {\"name\": \"g\", \"parameters\": {}}]", Some(two.clone())),
            ("[TOOL_CALLS]f[ARGS]{\"x\": 1}[TOOL_CALLS]g[ARGS]{}", Some(two.clone())),
            ("[TOOL_CALLS]f[CALL_ID]a1b2c3d4e[ARGS]{\"x\": 1}[TOOL_CALLS]g[ARGS]{}", Some(two.clone())),
            ("f{\"x\": 1}g{}", Some(two.clone())),
            ("[TOOL_CALLS]f[ARGS]\"{\\\"x\\\": 1}\"", Some(vec![c("f", "{\"x\":1}")])),
            ("{\"name\": \"f\", \"arguments\": {\"x\": 1}}", Some(vec![c("f", "{\"x\":1}")])),
            ("The answer is 4.", None),
            ("[1, 2]", None),
            ("[]", None),
            ("[TOOL_CALLS]", None),
            ("[TOOL_CALLS] [{\"name\": \"f\", \"arguments\": {}}] and some words", None),
            ("[TOOL_CALLS]f[ARGS]{\"x\": ", None),
            ("f[ARGS][1]", None),
            ("", None),
        ];
        for (text, want) in cases {
            assert_eq!(parse(text), want, "{text:?}");
        }
    }

    #[test]
    fn cut_answers_keep_the_calls_that_completed() {
        let f = || Call { name: "f".into(), arguments: "{}".into() };
        let cases = [
            ("[TOOL_CALLS] [{\"name\": \"f\", \"arguments\": {}}, {\"name\": \"g\", \"ar", Scan::More(vec![f()])),
            ("[TOOL_CALLS]f[ARGS]{}[TOOL_CALLS]g[ARGS]{\"x\": ", Scan::More(vec![f()])),
            ("[TOOL_CALLS]f[ARGS]{}[TOOL_CALLS]g[AR", Scan::More(vec![f()])),
            ("[{\"name\": \"f\", \"arguments\": {}}, 3, {\"na", Scan::No),
            ("f[ARGS]{} [1, {", Scan::No),
        ];
        for (text, want) in cases {
            assert_eq!(scan(text), want, "{text:?}");
        }
    }

    #[test]
    fn openings() {
        let cases = [
            ("", None),
            ("  [", None),
            ("[TOOL", None),
            ("[TOOL_CALLS]", Some(true)),
            ("[{\"", Some(true)),
            ("get_weather", None),
            ("get_weather[AR", None),
            ("get_weather[ARGS]", Some(true)),
            ("get_weather{", Some(true)),
            ("Hello there", Some(false)),
            ("Hello[1]", Some(false)),
            ("Sure: [TOOL_CALLS]", Some(false)),
            ("\"quoted\"", Some(false)),
        ];
        for (text, want) in cases {
            assert_eq!(opens(text), want, "{text:?}");
        }
    }
}
