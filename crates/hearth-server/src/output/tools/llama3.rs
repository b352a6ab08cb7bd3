//! Llama 3.1–3.3 JSON tool calls: the answer is `{"name": "f", "parameters": {...}}` (after the `<|python_tag|>`
//! control token, which the text leaves out), several calls separated by `;`.

use super::Call;

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
    let text = text.trim().trim_start_matches(MARKER).trim_start();
    let mut calls = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let (v, used) = super::first_json(rest)?;
        calls.push(super::call_of(&v)?);
        rest = rest[used..].trim_start().trim_start_matches(';').trim_start();
    }
    (!calls.is_empty()).then_some(calls)
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
}
