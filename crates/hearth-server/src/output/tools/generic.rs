//! Tool calls for chat templates that do not render tools: a system message lists the functions and asks for
//! `{"tool_calls": [{"name": .., "arguments": {..}}]}` as the whole answer when calling them (`chat::tools::generic`).
//! An answer that is that JSON object is a list of calls; anything else is text.

use super::{call_of, cut_list, json_at, skip_ws, Call, Json, Scan};
use serde_json::Value;

/// The calls of a whole answer, if the answer is a `{"tool_calls": [...]}` object.
pub fn parse(text: &str) -> Option<Vec<Call>> {
    let v: Value = serde_json::from_str(text.trim()).ok()?;
    let list = v.as_object().filter(|o| o.len() == 1)?.get("tool_calls")?.as_array()?;
    let calls: Option<Vec<Call>> = list.iter().map(call_of).collect();
    calls.filter(|c| !c.is_empty())
}

/// An answer as calls: `More` when it ends inside its list (with the calls before that point).
pub fn scan(text: &str) -> Scan {
    if let Some(calls) = parse(text) {
        return Scan::Calls(calls, text.len());
    }
    let s = text.trim_start();
    if !matches!(json_at(s), Json::Eof) {
        return Scan::No;
    }
    // `{`, `"tool_calls"`, `:`, then the list the text ends in.
    let mut i = 0;
    for lit in ["{", "\"tool_calls\"", ":"] {
        i = skip_ws(s, i);
        match s[i..].strip_prefix(lit) {
            Some(_) => i += lit.len(),
            None => return Scan::More(Vec::new()),
        }
    }
    let list = &s[skip_ws(s, i)..];
    if !list.starts_with('[') {
        return Scan::More(Vec::new());
    }
    let calls: Option<Vec<Call>> = cut_list(list).unwrap_or_default().iter().map(call_of).collect();
    calls.map_or(Scan::No, Scan::More)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cut_answers_keep_the_calls_that_completed() {
        let f = Call { name: "f".into(), arguments: "{}".into() };
        let list = "{\"tool_calls\": [{\"name\": \"f\", \"arguments\": {}}, {\"name\": \"g\", \"argu";
        assert_eq!(scan(list), Scan::More(vec![f.clone()]));
        assert_eq!(scan("{\"tool_calls\": [{\"name\": \"f\", \"arguments\": {}}]"), Scan::More(vec![f]));
        assert_eq!(scan("{\"tool_ca"), Scan::More(vec![]));
        assert_eq!(scan("{\"tool_calls\": [1, {"), Scan::No);
        assert_eq!(scan("{\"a\": 1}"), Scan::No);
    }
}
