//! Llama 3.1–3.3 JSON tool calls: the answer is `{"name": "f", "parameters": {...}}` (after the `<|python_tag|>`
//! control token, which the text leaves out), several calls separated by `;`.

use super::{call_of, json_at, Call, Json, Scan};

/// The control token a Llama 3 call may open with (the text leaves it out).
pub const MARKER: &str = "<|python_tag|>";

/// Whether a chat template speaks this format: it mentions `<|python_tag|>`, the `ipython` environment, or asks for
/// `{"name": ..., "parameters": ...}` answers (Meta's Llama 3.1–3.3 templates do all three or some).
pub fn speaks(template: &str) -> bool {
    template.contains(MARKER)
        || template.contains("Environment: ipython")
        || template.contains("\"parameters\": dictionary")
}

/// The calls of a whole answer, if it is one or more `{"name": .., "parameters": {..}}` objects.
pub fn parse(text: &str) -> Option<Vec<Call>> {
    scan(text).whole()
}

/// An answer as calls: `More` when it ends inside one (with those before it).
pub fn scan(text: &str) -> Scan {
    let text = text.trim().trim_start_matches(MARKER).trim_start();
    let mut calls = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let used = match json_at(rest) {
            Json::Value(v, used) => match call_of(&v) {
                Some(c) => {
                    calls.push(c);
                    used
                }
                None => return Scan::No,
            },
            Json::Eof => return Scan::More(calls),
            Json::Bad => return Scan::No,
        };
        rest = rest[used..].trim_start().trim_start_matches(';').trim_start();
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
        assert_eq!(parse("{\"name\": \"f\", \"parameters\": {\"x\": 1}}"), Some(vec![c("f", "{\"x\":1}")]));
        assert_eq!(
            parse(" {\"name\": \"f\", \"parameters\": {}}; {\"name\": \"g\", \"parameters\": {\"q\": \"a;b\"}}"),
            Some(vec![c("f", "{}"), c("g", "{\"q\":\"a;b\"}")])
        );
        assert_eq!(parse("The answer is 4."), None);
        assert_eq!(parse("{\"a\": 1}"), None);
        assert_eq!(parse("{\"name\": \"f\", \"parameters\": {}} trailing words"), None);
        assert_eq!(parse(""), None);
    }

    #[test]
    fn cut_answers_keep_the_calls_that_completed() {
        let c = |n: &str| Call { name: n.into(), arguments: "{}".into() };
        assert_eq!(scan("{\"name\": \"f\", \"parameters\": {}}; {\"name\": \"g\", \"par"), Scan::More(vec![c("f")]));
        assert_eq!(scan("{\"name\": \"f\", \"par"), Scan::More(vec![]));
        assert_eq!(scan("{\"name\": \"f\", \"parameters\": {}}; oops {"), Scan::No);
    }
}
