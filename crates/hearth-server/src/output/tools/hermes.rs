//! Hermes-style calls (Hermes 2/3, Qwen 2.5/3, SmolLM3): each call is a JSON object between two tags,
//! `<tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>`; text may come before and between calls.

pub const START: &str = "<tool_call>";
pub const END: &str = "</tool_call>";

/// The call inside one pair of tags (`body`: the text between them), if it is one.
pub fn parse_body(body: &str) -> Option<super::Call> {
    let v: serde_json::Value = serde_json::from_str(body.trim()).ok()?;
    super::call_of(&v)
}

/// How a call's body (after `<tool_call>`) begins, for streaming its arguments.
#[derive(Debug, PartialEq, Eq)]
pub enum Header {
    /// Too short to tell.
    Need,
    /// Not `{"name": "..", "arguments": ` (another key order, not JSON): parse the body when it is complete.
    No,
    /// `{"name": "f", "arguments": ` (or `"parameters"`) and the whitespace after it: the arguments start at `len`.
    Yes { name: String, len: usize },
}

/// Match the start of a call body: `{`, `"name"`, `:`, a JSON string, `,`, `"arguments"` or `"parameters"`, `:`.
pub fn header(body: &str) -> Header {
    let b = body.as_bytes();
    let mut i = 0;
    let ws = |i: &mut usize| {
        while *i < b.len() && b[*i].is_ascii_whitespace() {
            *i += 1;
        }
    };
    // Expect `lit` at i (after whitespace): Some(true) matched, Some(false) mismatch, None: input ended inside it.
    let lit = |i: &mut usize, lit: &str| -> Option<bool> {
        ws(i);
        let rest = &b[*i..];
        let n = rest.len().min(lit.len());
        if rest[..n] != lit.as_bytes()[..n] {
            return Some(false);
        }
        if n < lit.len() {
            return None;
        }
        *i += lit.len();
        Some(true)
    };
    for l in ["{", "\"name\"", ":"] {
        match lit(&mut i, l) {
            Some(true) => {}
            Some(false) => return Header::No,
            None => return Header::Need,
        }
    }
    ws(&mut i);
    if i == b.len() {
        return Header::Need;
    }
    if b[i] != b'"' {
        return Header::No;
    }
    // The name: a JSON string up to its closing quote.
    let start = i;
    let mut j = i + 1;
    let mut esc = false;
    let end = loop {
        let Some(&c) = b.get(j) else { return Header::Need };
        match (esc, c) {
            (true, _) => esc = false,
            (false, b'\\') => esc = true,
            (false, b'"') => break j + 1,
            _ => {}
        }
        j += 1;
    };
    let Ok(name) = serde_json::from_str::<String>(&body[start..end]) else { return Header::No };
    i = end;
    match lit(&mut i, ",") {
        Some(true) => {}
        Some(false) => return Header::No,
        None => return Header::Need,
    }
    let key = ["\"arguments\"", "\"parameters\""].iter().map(|k| lit(&mut i.clone(), k)).collect::<Vec<_>>();
    let key_len = match (key[0], key[1]) {
        (Some(true), _) => "\"arguments\"".len(),
        (_, Some(true)) => "\"parameters\"".len(),
        (None, _) | (_, None) => return Header::Need,
        _ => return Header::No,
    };
    ws(&mut i);
    i += key_len;
    match lit(&mut i, ":") {
        Some(true) => {}
        Some(false) => return Header::No,
        None => return Header::Need,
    }
    ws(&mut i);
    Header::Yes { name, len: i }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers() {
        let yes = |n: &str, len: usize| Header::Yes { name: n.into(), len };
        let cases = [
            ("{\"name\": \"get_weather\", \"arguments\": {\"a\"", yes("get_weather", 37)),
            ("\n{\"name\":\"f\",\"parameters\":", yes("f", 26)),
            ("{\"name\": \"a\\\"b\", \"arguments\": ", yes("a\"b", 30)),
            ("{\"name\": \"f\", \"argu", Header::Need),
            ("{\"nam", Header::Need),
            ("{\"name\": \"f", Header::Need),
            ("", Header::Need),
            ("{\"arguments\": {}, \"name\": \"f\"}", Header::No),
            ("oops", Header::No),
            ("{\"name\": 3", Header::No),
            ("{\"name\": \"f\", \"other\": 1", Header::No),
        ];
        for (body, want) in cases {
            assert_eq!(header(body), want, "{body:?}");
        }
    }
}
