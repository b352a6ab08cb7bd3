//! Tool calls as models write them when they leave their template's format (Qwen2.5-Coder answers a tool request
//! with a fenced JSON block, or a bare JSON object), read besides the template's own format:
//!
//! - a **run** of calls that ends the answer: call objects `{"name": .., "arguments": {..}}` (or `"parameters"`;
//!   `arguments` may be a JSON string that holds an object) or lists of them, bare or in a ```` ```json ````
//!   (` ``` `, ` ```JSON `, ` ```xml `) fence, one after another with only whitespace between them and after them.
//!   Bare JSON opens a run only at the answer's start; a fence may follow text (the text is content);
//! - a **tagged** call anywhere in the text: such objects between `<tool_call>`, `<function_call>`, `<tools>`,
//!   `<tool>`, `<response>`, `<json>`, `<JSON>` or `<xml>` and the matching closing tag, or
//!   `<function=NAME>..</function>` and `<function name="NAME">..</function>` with the arguments inside: a JSON
//!   object, or the XML form of Qwen3-Coder's template, `<parameter=KEY>value</parameter>` per argument (the
//!   value's first and last newline dropped; a string parameter's value is its text, any other's is read as JSON
//!   where it parses). Tags may nest (`<tool_call><function=..>..</function></tool_call>`).
//!
//! Only functions the request declares become calls. A unit the model wrote as one — a run, a tag, a list, a fence
//! — with anything else in it (an undeclared name, malformed JSON, an object of other keys) is text, whole.
//! These are the forms llama.cpp's Hermes and Qwen3-Coder parsers accept (`common/chat.cpp`); see
//! docs/design/0005.

use super::{call_of, json_at, skip_ws, Call, Declared, Json, Scan};
use serde_json::Map;
use serde_json::Value;

/// The fence a run's block may open with.
pub const FENCE: &str = "```";
/// The language tags a fence of calls may have.
const FENCE_INFOS: [&str; 4] = ["", "json", "JSON", "xml"];
/// The tags that may hold call objects (the grammar of `auto` opens calls at them too).
pub const TAGS: [&str; 8] = ["tool_call", "function_call", "tools", "tool", "response", "json", "JSON", "xml"];
/// How `<function=NAME>` and `<function name="NAME">` open.
const FUNCTION: &str = "<function";
pub const FUNCTION_END: &str = "</function>";
/// How an argument opens and closes in the XML form.
const PARAM: &str = "<parameter=";
const PARAM_END: &str = "</parameter>";
/// After `<function` in `<function name="NAME">`.
const NAME_ATTR: &str = " name=\"";
/// The keys a call object may have; the first must be one of them as soon as it is read.
const KEYS: [&str; 5] = ["name", "arguments", "parameters", "id", "type"];
/// Tags inside tags (or a fence) deeper than this are not read.
const MAX_DEPTH: usize = 4;
/// A function name longer than this in `<function=..>` is not one.
const MAX_NAME: usize = 256;

/// The openers of tagged calls, as text to look for (`<function=` and `<function name=` open a call whose name
/// follows).
pub fn tag_openers() -> impl Iterator<Item = String> {
    TAGS.iter().map(|t| format!("<{t}>")).chain(["<function=".to_string(), "<function name=".to_string()])
}

/// Whether an answer that begins with `text` (after whitespace) may be a run of calls (None: not known yet): it
/// opens with `{`, `[` or a fence.
pub fn opens(text: &str) -> Option<bool> {
    let s = text.trim_start();
    if s.starts_with(['{', '[']) || s.starts_with(FENCE) {
        Some(true)
    } else if s.is_empty() || FENCE.starts_with(s) {
        None
    } else {
        Some(false)
    }
}

/// The reader of one request's loose calls: the functions it declares.
pub struct Loose<'a> {
    pub functions: &'a [Declared],
}

impl Loose<'_> {
    fn function_named(&self, name: &str) -> Option<&Declared> {
        self.functions.iter().find(|f| f.name == name)
    }

    fn declared(&self, name: &str) -> bool {
        self.function_named(name).is_some()
    }

    /// Whether a name read so far may still become a declared function's.
    fn leads(&self, name: &str) -> bool {
        self.functions.iter().any(|f| f.name.starts_with(name))
    }

    /// The calls a `<tool_call>` of the template's own format holds when its body is not a JSON call: a tagged
    /// call (`<function=NAME>`, as Qwen3-Coder writes them), all of the body.
    pub fn body(&self, body: &str) -> Option<Vec<Call>> {
        let body = body.trim();
        match self.tagged(body, true, 1) {
            Scan::Calls(calls, len) if len == body.len() => Some(calls),
            _ => None,
        }
    }

    /// A call object of a declared function, with arguments (an object, or a string holding one) and no other keys.
    fn call(&self, v: &Value) -> Option<Call> {
        let o = v.as_object()?;
        let args = o.get("arguments").or_else(|| o.get("parameters"));
        if args.is_none() || o.keys().any(|k| !KEYS.contains(&k.as_str())) {
            return None;
        }
        call_of(v).filter(|c| self.declared(&c.name))
    }

    /// A run of calls from the start of `s` to its end (`eof`: the answer ends there; otherwise more may follow).
    /// Complete blocks with nothing after them are `More` until `eof`.
    pub fn run(&self, s: &str, eof: bool) -> Scan {
        self.items(s, None, eof, 0)
    }

    /// A fenced block of calls at the start of `s`: ```` ```json ````, then call objects, lists or tagged calls,
    /// then ```` ``` ```` (which the end of the answer may stand for).
    fn fence(&self, s: &str, eof: bool) -> Scan {
        let Some(after) = s.strip_prefix(FENCE) else {
            return if FENCE.starts_with(s) && !eof { Scan::More(Vec::new()) } else { Scan::No };
        };
        let Some(nl) = after.find('\n') else {
            let info = after.trim();
            let may = after.chars().all(|c| c.is_ascii_alphanumeric() || c == ' ')
                && FENCE_INFOS.iter().any(|i| i.starts_with(info));
            return if may && !eof { Scan::More(Vec::new()) } else { Scan::No };
        };
        if !FENCE_INFOS.contains(&after[..nl].trim()) {
            return Scan::No;
        }
        let head = FENCE.len() + nl + 1;
        self.items(&s[head..], Some(FENCE), eof, 1).shifted(head)
    }

    /// A tagged call at the start of `s` (which starts with `<`), or a prefix of one.
    pub fn tagged(&self, s: &str, eof: bool, depth: usize) -> Scan {
        if depth > MAX_DEPTH {
            return Scan::No;
        }
        let mut partial = false;
        for tag in TAGS {
            let open = format!("<{tag}>");
            if let Some(body) = s.strip_prefix(&open) {
                return self.items(body, Some(&format!("</{tag}>")), eof, depth + 1).shifted(open.len());
            }
            partial |= open.starts_with(s);
        }
        match s.strip_prefix(FUNCTION) {
            _ if partial && !eof => Scan::More(Vec::new()),
            Some(after) => self.function(after, eof).shifted(FUNCTION.len()),
            None if FUNCTION.starts_with(s) && !eof => Scan::More(Vec::new()),
            None => Scan::No,
        }
    }

    /// After `<function`: `=NAME>` or ` name="NAME">`, the arguments object, `</function>`.
    fn function(&self, s: &str, eof: bool) -> Scan {
        let more = if eof { Scan::No } else { Scan::More(Vec::new()) };
        // A name not complete yet must lead to a declared function.
        let leads = |name: &str| name.len() <= MAX_NAME && self.leads(name);
        let (name, head) = if let Some(r) = s.strip_prefix('=') {
            let n = r.len() - r.trim_start_matches(super::name_char).len();
            match r[n..].chars().next() {
                None if leads(&r[..n]) => return more,
                Some('>') if n > 0 => (&r[..n], 1 + n + 1),
                _ => return Scan::No,
            }
        } else if let Some(r) = s.strip_prefix(NAME_ATTR) {
            match r.find('"') {
                Some(q) if r[q + 1..].starts_with('>') => (&r[..q], NAME_ATTR.len() + q + 2),
                Some(q) if r.len() == q + 1 => return more,
                None if leads(r) => return more,
                _ => return Scan::No,
            }
        } else if NAME_ATTR.starts_with(s) {
            return more;
        } else {
            return Scan::No;
        };
        let Some(f) = self.function_named(name) else { return Scan::No };
        let i = skip_ws(s, head);
        let rest = &s[i..];
        let args = if rest.is_empty() {
            return more;
        } else if rest.starts_with('<') {
            match parameters(f, rest, eof) {
                Ok((args, used)) => (args, i + used),
                Err(scan) => return scan,
            }
        } else {
            match json_at(rest) {
                Json::Value(v @ Value::Object(_), used) => (v, i + used),
                Json::Eof if rest.starts_with('{') => return more,
                _ => return Scan::No,
            }
        };
        let call = Call { name: name.to_string(), arguments: args.0.to_string() };
        let j = skip_ws(s, args.1);
        let rest = &s[j..];
        if rest.starts_with(FUNCTION_END) {
            Scan::Calls(vec![call], j + FUNCTION_END.len())
        } else if eof && FUNCTION_END.starts_with(rest) {
            // The end of the answer stands for the closing tag.
            Scan::Calls(vec![call], s.len())
        } else if FUNCTION_END.starts_with(rest) {
            Scan::More(vec![call])
        } else {
            Scan::No
        }
    }

    /// Call objects, lists or tagged calls separated by whitespace, then `close` (which the end of the answer may
    /// stand for once a call is complete); with no `close` (a run), fenced blocks too, up to the end of the answer.
    fn items(&self, s: &str, close: Option<&str>, eof: bool, depth: usize) -> Scan {
        let mut calls = Vec::new();
        let mut i = 0;
        let end = close.unwrap_or_default();
        loop {
            i = skip_ws(s, i);
            let rest = &s[i..];
            if close.is_some() && rest.starts_with(end) {
                return if calls.is_empty() { Scan::No } else { Scan::Calls(calls, i + end.len()) };
            }
            if end.starts_with(rest) {
                return match (eof, calls.is_empty()) {
                    (false, _) => Scan::More(calls),
                    (true, false) => Scan::Calls(calls, s.len()),
                    (true, true) => Scan::No,
                };
            }
            let item = match rest.as_bytes().first() {
                Some(b'<') => self.tagged(rest, eof, depth),
                Some(b'`') if close.is_none() => self.fence(rest, eof),
                _ => self.value(rest),
            };
            match item {
                Scan::Calls(c, used) => {
                    calls.extend(c);
                    i += used;
                }
                Scan::More(c) => {
                    calls.extend(c);
                    return Scan::More(calls);
                }
                Scan::No => return Scan::No,
            }
        }
    }

    /// A call object or a list of them at the start of `s`.
    fn value(&self, s: &str) -> Scan {
        match s.as_bytes().first() {
            Some(b'{') => self.object(s),
            Some(b'[') => self.list(s),
            None => Scan::More(Vec::new()),
            _ => Scan::No,
        }
    }

    fn object(&self, s: &str) -> Scan {
        if !s.starts_with('{') {
            return if s.is_empty() { Scan::More(Vec::new()) } else { Scan::No };
        }
        match json_at(s) {
            Json::Value(v, used) => self.call(&v).map_or(Scan::No, |c| Scan::Calls(vec![c], used)),
            Json::Eof if self.may_open(s) => Scan::More(Vec::new()),
            _ => Scan::No,
        }
    }

    /// `[`, call objects separated by `,`, `]` (at least one).
    fn list(&self, s: &str) -> Scan {
        let mut calls = Vec::new();
        let mut i = 1;
        loop {
            i = skip_ws(s, i);
            let rest = &s[i..];
            if rest.is_empty() {
                return Scan::More(calls);
            }
            if rest.starts_with(']') {
                return if calls.is_empty() { Scan::No } else { Scan::Calls(calls, i + 1) };
            }
            if !calls.is_empty() {
                if !rest.starts_with(',') {
                    return Scan::No;
                }
                i = skip_ws(s, i + 1);
            }
            match self.object(&s[i..]) {
                Scan::Calls(c, used) => {
                    calls.extend(c);
                    i += used;
                }
                Scan::More(_) => return Scan::More(calls),
                Scan::No => return Scan::No,
            }
        }
    }

    /// Whether an incomplete JSON object (`s` starts with `{`) may still be a call: its first key is one a call
    /// has, and a `name` value read so far leads to a declared function.
    fn may_open(&self, s: &str) -> bool {
        let i = skip_ws(s, 1);
        let Some((key, done, after)) = json_string(s, i) else { return i == s.len() };
        if !done {
            return KEYS.iter().any(|k| k.starts_with(key));
        }
        if !KEYS.contains(&key) {
            return false;
        }
        let i = skip_ws(s, after);
        match s[i..].strip_prefix(':') {
            None => return i == s.len(),
            Some(_) if key != "name" => return true,
            Some(_) => {}
        }
        let i = skip_ws(s, i + 1);
        match json_string(s, i) {
            // An escaped name is checked when the object is complete.
            Some((name, _, _)) if name.contains('\\') => true,
            Some((name, true, _)) => self.declared(name),
            Some((name, false, _)) => self.leads(name),
            None => i == s.len(),
        }
    }
}

/// The XML form's arguments at the start of `s` (after `<function=NAME>` and whitespace): `<parameter=KEY>`,
/// the value, `</parameter>`, whitespace, as many as there are (none: `{}`); then the offset after them, where
/// `</function>` should follow. Err: what `s` is instead (`More` while a prefix).
fn parameters(f: &Declared, s: &str, eof: bool) -> Result<(Value, usize), Scan> {
    let more = || if eof { Scan::No } else { Scan::More(Vec::new()) };
    let mut args = Map::new();
    let mut i = 0;
    loop {
        let rest = &s[i..];
        let Some(r) = rest.strip_prefix(PARAM) else {
            // A prefix of `<parameter=` (not also one of `</function>`, which the caller reads).
            if !rest.is_empty() && PARAM.starts_with(rest) && !FUNCTION_END.starts_with(rest) {
                return Err(more());
            }
            return Ok((Value::Object(args), i));
        };
        let Some(gt) = r.find('>') else {
            let may = r.len() <= MAX_NAME && !r.contains(['\n', '<']);
            return Err(if may { more() } else { Scan::No });
        };
        let key = &r[..gt];
        if key.is_empty() || key.len() > MAX_NAME || key.contains(['\n', '<']) {
            return Err(Scan::No);
        }
        let body = &r[gt + 1..];
        let Some(end) = body.find(PARAM_END) else { return Err(more()) };
        let raw = &body[..end];
        let raw = raw.strip_prefix('\n').unwrap_or(raw);
        let raw = raw.strip_suffix('\n').unwrap_or(raw);
        args.insert(key.to_string(), f.value(key, raw));
        i = skip_ws(s, i + PARAM.len() + gt + 1 + end + PARAM_END.len());
    }
}

/// The JSON string starting at `i` as written (escapes kept), whether it closed, and the offset after it; None
/// when no string starts there.
fn json_string(s: &str, i: usize) -> Option<(&str, bool, usize)> {
    let body = s[i..].strip_prefix('"')?;
    let mut esc = false;
    for (j, c) in body.char_indices() {
        match (esc, c) {
            (true, _) => esc = false,
            (false, '\\') => esc = true,
            (false, '"') => return Some((&body[..j], true, i + 1 + j + 1)),
            _ => {}
        }
    }
    Some((body, false, s.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names() -> Vec<Declared> {
        vec![Declared::untyped("get_weather"), Declared::untyped("get_time")]
    }

    /// What text that may still grow is: More while it may become calls, No as soon as it cannot.
    #[test]
    fn prefixes_are_decided_as_soon_as_they_can_be() {
        let names = names();
        let l = Loose { functions: &names };
        let more = Scan::More(Vec::new());
        let runs = [
            ("", more.clone()),
            ("{", more.clone()),
            ("{ \"na", more.clone()),
            ("{\"name\": \"get_w", more.clone()),
            ("{\"name\": \"get_weather\", \"argu", more.clone()),
            ("{\"arguments\": {\"x\": 1}, \"na", more.clone()),
            ("[ {\"name\"", more.clone()),
            ("```", more.clone()),
            ("``", more.clone()),
            ("```js", more.clone()),
            ("```json\n", more.clone()),
            ("```json\n[{\"name\": \"get_time\", ", more.clone()),
            ("{\"x", Scan::No),
            ("{\"name\": \"get_x", Scan::No),
            ("{\"name\": \"rm\"", Scan::No),
            ("{\"name\": 3", Scan::No),
            ("[1", Scan::No),
            ("[]", Scan::No),
            ("```jsx", Scan::No),
            ("```python\n", Scan::No),
            ("```json\nHere", Scan::No),
            ("Hello", Scan::No),
        ];
        for (text, want) in runs {
            assert_eq!(l.run(text, false), want, "{text:?}");
        }
        let tags = [
            ("<", more.clone()),
            ("<too", more.clone()),
            ("<function", more.clone()),
            ("<function_c", more.clone()),
            ("<function=get_", more.clone()),
            ("<function name=\"get_time", more.clone()),
            ("<function=get_time>", more.clone()),
            ("<tools>\n[", more.clone()),
            ("<toolz", Scan::No),
            ("<function=rm", Scan::No),
            ("<function=get_time}", Scan::No),
            ("<function name=\"get_time\" x", Scan::No),
            ("<tools>\nSure", Scan::No),
        ];
        for (text, want) in tags {
            assert_eq!(l.tagged(text, false, 0), want, "{text:?}");
        }
        // At the end of the answer a prefix is not a call.
        assert_eq!(l.run("{\"name\": \"get_w", true), Scan::More(Vec::new()));
        assert_eq!(l.tagged("<function=get_", true, 0), Scan::No);
    }

    #[test]
    fn complete_runs_are_calls_once_the_answer_ends() {
        let names = names();
        let l = Loose { functions: &names };
        let text = "```json\n{\"name\": \"get_time\", \"arguments\": {}}\n```\n";
        let call = Call { name: "get_time".into(), arguments: "{}".into() };
        assert_eq!(l.run(text, false), Scan::More(vec![call.clone()]));
        assert_eq!(l.run(text, true), Scan::Calls(vec![call.clone()], text.len()));
        let tag = "<function=get_time>{}</function> and text";
        assert_eq!(l.tagged(tag, false, 0), Scan::Calls(vec![call], tag.len() - " and text".len()));
        let deep = format!("{}{{\"name\": \"get_time\", \"arguments\": {{}}}}", "<tools>".repeat(8));
        assert_eq!(l.tagged(&deep, true, 0), Scan::No);
        let nested = format!("[{}]", "[".repeat(500));
        assert_eq!(l.run(&nested, true), Scan::No);
    }
}
