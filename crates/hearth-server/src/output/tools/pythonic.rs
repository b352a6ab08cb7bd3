//! Pythonic tool calls (Gemma 3's prompted function calling, Llama 4's and Llama 3.2's pythonic templates): the
//! answer is a Python list of calls with keyword arguments, `[get_weather(city="Paris", days=3), get_time()]`,
//! possibly in a ```` ```tool_code ```` fence (Gemma) or between Llama 4's `<|python_start|>` and `<|python_end|>`.
//! Argument values are Python literals (strings, numbers, `True`/`False`/`None`, lists, dicts) or JSON ones, read
//! into JSON; an answer that is anything else is text.

use super::{Call, Scan};
use serde_json::{Map, Number, Value};

/// Llama 4's control token before pythonic calls (the text usually leaves it out).
pub const START: &str = "<|python_start|>";
/// And after them.
pub const END: &str = "<|python_end|>";
/// The fence Gemma may put its calls in (closed by ```` ``` ````).
const FENCE: &str = "```";
/// Nesting deeper than this in an argument is not read.
const MAX_DEPTH: usize = 64;

/// Whether a chat template asks for pythonic calls: Gemma's (`<start_of_turn>`), one that mentions Llama 4's
/// `<|python_start|>`, or one that spells the form out (see [`asked`]).
pub fn speaks(template: &str) -> bool {
    template.contains("<start_of_turn>") || template.contains(START) || asked(template)
}

/// Whether a chat template spells the form out, `[func_name1(params_name1=params_value1, ...), ...]`, as vLLM's
/// pythonic tool templates for Llama 3.2, Llama 4 and Gemma 3 do: this wins over the Llama 3 markers they also have.
pub fn asked(template: &str) -> bool {
    template.contains("[func_name1(")
}

/// Whether an answer that begins with `text` is calls (None: not known yet): it opens with `[` or a fence (after
/// `<|python_start|>`, if the text has it).
pub fn opens(text: &str) -> Option<bool> {
    let s = text.trim_start();
    let s = s.strip_prefix(START).map_or(s, str::trim_start);
    if START.starts_with(s) {
        return None;
    }
    Some(s.starts_with('[') || s.starts_with('`'))
}

/// The calls of a whole answer, if it is a list of calls (in a fence, bare calls one after another too).
pub fn parse(text: &str) -> Option<Vec<Call>> {
    scan(text).whole()
}

/// An answer as calls: `More` when it ends inside one (with those before it).
pub fn scan(text: &str) -> Scan {
    let s = text.trim();
    let s = s.strip_prefix(START).unwrap_or(s);
    let s = s.strip_suffix(END).unwrap_or(s).trim();
    let (body, fenced) = match s.strip_prefix(FENCE) {
        Some(f) => {
            let f = f.strip_prefix("tool_code").unwrap_or(f);
            (f.strip_suffix(FENCE).unwrap_or(f), true)
        }
        None => (s, false),
    };
    let mut r = Reader { rest: body };
    let mut calls = Vec::new();
    // A call that does not read: the text ends inside it, or it is not a call.
    let failed = |from: &str, calls: Vec<Call>| if unfinished(from) { Scan::More(calls) } else { Scan::No };
    if r.eat('[') {
        while !r.eat(']') {
            let from = r.rest;
            let Some(c) = r.call() else { return failed(from, calls) };
            calls.push(c);
            if !r.separator(']') {
                return if r.at_end() { Scan::More(calls) } else { Scan::No };
            }
        }
    } else if fenced {
        while !r.at_end() {
            let from = r.rest;
            let Some(c) = r.call() else { return failed(from, calls) };
            calls.push(c);
            r.eat(',');
        }
    }
    if r.at_end() && !calls.is_empty() {
        Scan::Calls(calls, text.len())
    } else {
        Scan::No
    }
}

/// Whether `s` ends before what it opens closes: an open quote or bracket, or nothing at all.
fn unfinished(s: &str) -> bool {
    let (mut depth, mut quote, mut esc) = (0i64, None, false);
    for c in s.chars() {
        match (quote, esc, c) {
            (Some(_), true, _) => esc = false,
            (Some(_), false, '\\') => esc = true,
            (Some(q), false, c) if c == q => quote = None,
            (Some(_), _, _) => {}
            (None, _, '"' | '\'') => quote = Some(c),
            (None, _, '(' | '[' | '{') => depth += 1,
            (None, _, ')' | ']' | '}') => depth -= 1,
            _ => {}
        }
    }
    s.trim().is_empty() || quote.is_some() || depth > 0
}

/// A recursive-descent reader of Python literals and calls.
struct Reader<'a> {
    rest: &'a str,
}

impl Reader<'_> {
    fn at_end(&mut self) -> bool {
        self.rest = self.rest.trim_start();
        self.rest.is_empty()
    }

    /// Skip whitespace, then `c` if it is next.
    fn eat(&mut self, c: char) -> bool {
        self.rest = self.rest.trim_start();
        self.rest.strip_prefix(c).map(|r| self.rest = r).is_some()
    }

    /// After an item: a `,` (read), or `close` next (left to the caller). False when neither comes.
    fn separator(&mut self, close: char) -> bool {
        self.eat(',') || self.rest.starts_with(close)
    }

    /// A name: of a function, or an argument.
    fn name(&mut self) -> Option<String> {
        self.rest = self.rest.trim_start();
        let after = self.rest.trim_start_matches(|c: char| c.is_alphanumeric() || matches!(c, '_' | '-' | '.'));
        let name = &self.rest[..self.rest.len() - after.len()];
        self.rest = after;
        (!name.is_empty()).then(|| name.to_string())
    }

    /// `name(key=value, ...)`: keyword arguments only.
    fn call(&mut self) -> Option<Call> {
        let name = self.name()?;
        if !self.eat('(') {
            return None;
        }
        let mut args = Map::new();
        while !self.eat(')') {
            let key = self.name()?;
            if !self.eat('=') || args.contains_key(&key) {
                return None;
            }
            let v = self.value(0)?;
            args.insert(key, v);
            if !self.separator(')') {
                return None;
            }
        }
        Some(Call { name, arguments: Value::Object(args).to_string() })
    }

    /// One literal.
    fn value(&mut self, depth: usize) -> Option<Value> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.rest = self.rest.trim_start();
        match self.rest.chars().next()? {
            '"' | '\'' => self.string().map(Value::String),
            '[' => {
                self.eat('[');
                let mut items = Vec::new();
                while !self.eat(']') {
                    items.push(self.value(depth + 1)?);
                    if !self.separator(']') {
                        return None;
                    }
                }
                Some(Value::Array(items))
            }
            '{' => {
                self.eat('{');
                let mut map = Map::new();
                while !self.eat('}') {
                    let Value::String(key) = self.value(depth + 1)? else { return None };
                    if !self.eat(':') {
                        return None;
                    }
                    map.insert(key, self.value(depth + 1)?);
                    if !self.separator('}') {
                        return None;
                    }
                }
                Some(Value::Object(map))
            }
            _ => {
                let after = self.rest.trim_start_matches(|c: char| c.is_ascii_alphanumeric() || "+-._".contains(c));
                let word = &self.rest[..self.rest.len() - after.len()];
                self.rest = after;
                word_value(word)
            }
        }
    }

    /// A quoted string (single or double quotes), its escapes resolved: Python's, and JSON's `\/`.
    fn string(&mut self) -> Option<String> {
        let mut chars = self.rest.char_indices();
        let (_, quote) = chars.next()?;
        let mut out = String::new();
        while let Some((i, c)) = chars.next() {
            match c {
                c if c == quote => {
                    self.rest = &self.rest[i + 1..];
                    return Some(out);
                }
                '\n' => return None,
                '\\' => {
                    let (_, e) = chars.next()?;
                    let resolved = match e {
                        'n' => '\n',
                        't' => '\t',
                        'r' => '\r',
                        'b' => '\u{8}',
                        'f' => '\u{c}',
                        'v' => '\u{b}',
                        'a' => '\u{7}',
                        '\\' | '\'' | '"' | '/' => e,
                        '\n' => continue,
                        '0'..='7' => {
                            let mut code = e.to_digit(8)?;
                            for _ in 0..2 {
                                match chars.clone().next().and_then(|(_, d)| d.to_digit(8)) {
                                    Some(d) => {
                                        code = code * 8 + d;
                                        chars.next();
                                    }
                                    None => break,
                                }
                            }
                            char::from_u32(code)?
                        }
                        'x' => char::from_u32(hex(&mut chars, 2)?)?,
                        'U' => char::from_u32(hex(&mut chars, 8)?)?,
                        'u' => {
                            let hi = hex(&mut chars, 4)?;
                            if (0xD800..0xDC00).contains(&hi) {
                                // A UTF-16 surrogate pair, as JSON writes characters outside the BMP.
                                let (_, '\\') = chars.next()? else { return None };
                                let (_, 'u') = chars.next()? else { return None };
                                let lo = hex(&mut chars, 4)?;
                                if !(0xDC00..0xE000).contains(&lo) {
                                    return None;
                                }
                                char::from_u32(0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00))?
                            } else {
                                char::from_u32(hi)?
                            }
                        }
                        other => {
                            out.push('\\');
                            other
                        }
                    };
                    out.push(resolved);
                }
                c => out.push(c),
            }
        }
        None
    }
}

/// `n` hex digits.
fn hex(chars: &mut std::str::CharIndices<'_>, n: usize) -> Option<u32> {
    (0..n).try_fold(0u32, |acc, _| Some(acc * 16 + chars.next()?.1.to_digit(16)?))
}

/// A bare word: a constant (Python's or JSON's) or a number.
fn word_value(word: &str) -> Option<Value> {
    match word {
        "True" | "true" => return Some(Value::Bool(true)),
        "False" | "false" => return Some(Value::Bool(false)),
        "None" | "null" => return Some(Value::Null),
        _ => {}
    }
    if !word.starts_with(|c: char| c.is_ascii_digit() || matches!(c, '-' | '+' | '.')) {
        return None;
    }
    let digits = word.replace('_', "");
    if let Ok(i) = digits.parse::<i64>() {
        return Some(Value::Number(i.into()));
    }
    if let Ok(u) = digits.parse::<u64>() {
        return Some(Value::Number(u.into()));
    }
    digits.parse::<f64>().ok().and_then(Number::from_f64).map(Value::Number)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cut_answers_keep_the_calls_that_completed() {
        let f = || Call { name: "f".into(), arguments: "{\"a\":1}".into() };
        let cases = [
            ("[f(a=1), g(b='x", Scan::More(vec![f()])),
            ("[f(a=1), g(b=[1, 2", Scan::More(vec![f()])),
            ("[f(a=1), ", Scan::More(vec![f()])),
            ("[f(a=1)", Scan::More(vec![f()])),
            ("```tool_code\nf(a=1)\ng(", Scan::More(vec![f()])),
            ("[f(a=1), g(b=x)]", Scan::No),
            ("[f(a=1) oops", Scan::No),
        ];
        for (text, want) in cases {
            assert_eq!(scan(text), want, "{text:?}");
        }
    }

    /// The arguments of `[f(<args>)]`, as JSON text.
    fn args(text: &str) -> Option<String> {
        parse(&format!("[f({text})]")).map(|c| c[0].arguments.clone())
    }

    #[test]
    fn literals() {
        let cases: Vec<(&str, Option<&str>)> = vec![
            ("", Some("{}")),
            ("a=1, b=-2.5, c=1e3, d=1_000, e=+7", Some("{\"a\":1,\"b\":-2.5,\"c\":1000.0,\"d\":1000,\"e\":7}")),
            (
                "a=True, b=False, c=None, d=true, e=false, f=null",
                Some("{\"a\":true,\"b\":false,\"c\":null,\"d\":true,\"e\":false,\"f\":null}"),
            ),
            ("s='it\\'s', t=\"say \\\"hi\\\"\"", Some("{\"s\":\"it's\",\"t\":\"say \\\"hi\\\"\"}")),
            ("s='\\t\\x41\\101\\u00e9\\U0001F600\\ud83d\\ude00\\/\\d'", Some("{\"s\":\"\\tAAé😀😀/\\\\d\"}")),
            (
                "l=[1, [2, []], {'a': {}},], m={\"k\": [None]}",
                Some("{\"l\":[1,[2,[]],{\"a\":{}}],\"m\":{\"k\":[null]}}"),
            ),
            ("city = 'Paris' ,", Some("{\"city\":\"Paris\"}")),
            // Not literals, or not keyword arguments.
            ("1", None),
            ("a=b", None),
            ("a=inf", None),
            ("a=0x10", None),
            ("a=1, a=2", None),
            ("a=1 b=2", None),
            ("a='open", None),
            ("a='two\nlines'", None),
            ("a={1: 2}", None),
            ("a=[1 2]", None),
            ("a='\\ud83d'", None),
            ("a=f(1)", None),
        ];
        for (text, want) in cases {
            assert_eq!(args(text).as_deref(), want, "{text:?}");
        }
        let deep = format!("a={}{}", "[".repeat(200), "]".repeat(200));
        assert_eq!(args(&deep), None);
    }
}
