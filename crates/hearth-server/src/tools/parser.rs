//! The streaming tool-call parser of one choice: text goes in piece by piece as it is decoded; out come text to
//! show and calls, each as soon as it is complete. Text that may begin a call marker is held back until it is
//! known not to (a Hermes `<tool_call>` split over several pieces, or a generic answer that opens with `{`).

use super::{generic, hermes, llama3, Call, Format};
use crate::stream::partial_marker_len;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    Text(String),
    Call(Call),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Hermes: plain text; generic: the answer has not started yet (only whitespace so far).
    Text,
    /// Hermes: inside `<tool_call>`; generic: the answer opened with `{` and may be a call list.
    Call,
    /// Generic: the answer is text.
    Plain,
}

pub struct CallParser {
    format: Format,
    mode: Mode,
    buf: String,
    calls: usize,
    /// Hermes: a call just closed; the newline after it (if it comes) is not text.
    skip_newline: bool,
}

impl CallParser {
    pub fn new(format: Format) -> Self {
        Self { format, mode: Mode::Text, buf: String::new(), calls: 0, skip_newline: false }
    }

    /// Calls emitted so far.
    pub fn calls(&self) -> usize {
        self.calls
    }

    /// Take the next decoded text.
    pub fn feed(&mut self, text: &str) -> Vec<Piece> {
        self.buf.push_str(text);
        let mut out = Vec::new();
        match self.format {
            Format::Hermes => self.hermes(&mut out, false),
            Format::Generic | Format::Llama3 => self.json_answer(&mut out, false),
        }
        out
    }

    /// The output ended: release what is held (an unterminated call that parses is still a call).
    pub fn finish(&mut self) -> Vec<Piece> {
        let mut out = Vec::new();
        match self.format {
            Format::Hermes => self.hermes(&mut out, true),
            Format::Generic | Format::Llama3 => self.json_answer(&mut out, true),
        }
        out
    }

    fn text(out: &mut Vec<Piece>, s: &str) {
        if !s.is_empty() {
            out.push(Piece::Text(s.to_string()));
        }
    }

    fn hermes(&mut self, out: &mut Vec<Piece>, end: bool) {
        loop {
            match self.mode {
                Mode::Text => {
                    if self.skip_newline {
                        if self.buf.is_empty() && !end {
                            return;
                        }
                        if self.buf.starts_with('\n') {
                            self.buf.remove(0);
                        }
                        self.skip_newline = false;
                    }
                    if let Some(i) = self.buf.find(hermes::START) {
                        Self::text(out, &self.buf[..i]);
                        self.buf.drain(..i + hermes::START.len());
                        self.mode = Mode::Call;
                        continue;
                    }
                    let keep = if end { 0 } else { partial_marker_len(&self.buf, hermes::START) };
                    let cut = self.buf.len() - keep;
                    Self::text(out, &self.buf[..cut]);
                    self.buf.drain(..cut);
                    return;
                }
                Mode::Call => {
                    let close = self.buf.find(hermes::END);
                    let body_end = match (close, end) {
                        (Some(j), _) => j,
                        (None, true) => self.buf.len(),
                        (None, false) => return,
                    };
                    let body = self.buf[..body_end].to_string();
                    match hermes::parse_body(&body) {
                        Some(call) => {
                            self.calls += 1;
                            out.push(Piece::Call(call));
                        }
                        // Not a call after all: show it as it was written.
                        None => Self::text(
                            out,
                            &format!("{}{body}{}", hermes::START, if close.is_some() { hermes::END } else { "" }),
                        ),
                    }
                    self.buf.drain(..close.map_or(body_end, |j| j + hermes::END.len()));
                    self.skip_newline = true;
                    self.mode = Mode::Text;
                    if end && self.buf.is_empty() {
                        return;
                    }
                }
                Mode::Plain => unreachable!("hermes has no plain mode"),
            }
        }
    }

    /// Formats whose calls are the whole answer, as JSON: decided by its first character, parsed once complete
    /// (generic: one object; Llama 3: at the end, as `;` may join several).
    fn json_answer(&mut self, out: &mut Vec<Piece>, end: bool) {
        if self.mode == Mode::Text {
            match self.buf.trim_start().chars().next() {
                Some('{') => self.mode = Mode::Call,
                Some(_) => self.mode = Mode::Plain,
                None if end => self.mode = Mode::Plain,
                None => return,
            }
        }
        match self.mode {
            Mode::Plain => {
                Self::text(out, &self.buf);
                self.buf.clear();
            }
            Mode::Call if end || (self.format == Format::Generic && json_complete(&self.buf)) => {
                let parsed =
                    if self.format == Format::Llama3 { llama3::parse(&self.buf) } else { generic::parse(&self.buf) };
                match parsed {
                    Some(calls) => {
                        self.calls += calls.len();
                        out.extend(calls.into_iter().map(Piece::Call));
                    }
                    None => Self::text(out, &self.buf),
                }
                self.buf.clear();
                self.mode = Mode::Plain;
            }
            _ => {}
        }
    }
}

/// Pieces merged: the text, and the calls in order.
pub fn merge(pieces: Vec<Piece>) -> (String, Vec<Call>) {
    let mut text = String::new();
    let mut calls = Vec::new();
    for p in pieces {
        match p {
            Piece::Text(s) => text.push_str(&s),
            Piece::Call(c) => calls.push(c),
        }
    }
    (text, calls)
}

/// A whole answer's text and calls.
pub fn parse_whole(format: Format, text: &str) -> (String, Vec<Call>) {
    let mut p = CallParser::new(format);
    let mut pieces = p.feed(text);
    pieces.extend(p.finish());
    merge(pieces)
}

/// Whether `s` (which starts with `{` after whitespace) holds one complete JSON object: braces balance outside
/// strings.
fn json_complete(s: &str) -> bool {
    let (mut depth, mut in_str, mut esc, mut opened) = (0i64, false, false, false);
    for c in s.chars() {
        if in_str {
            match (esc, c) {
                (true, _) => esc = false,
                (false, '\\') => esc = true,
                (false, '"') => in_str = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => in_str = true,
            '{' | '[' => {
                depth += 1;
                opened = true;
            }
            '}' | ']' => depth -= 1,
            _ => {}
        }
    }
    opened && depth <= 0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feed `text` split at every byte boundary pair (char boundaries) and in one piece: the same pieces come out,
    /// merged.
    fn parse_all(format: Format, text: &str) -> (String, Vec<Call>) {
        crate::stream::same_at_every_split(text, |pieces| {
            let mut p = CallParser::new(format);
            let mut got: Vec<Piece> = pieces.iter().flat_map(|t| p.feed(t)).collect();
            got.extend(p.finish());
            merge(got)
        })
    }

    fn call(name: &str, args: &str) -> Call {
        Call { name: name.into(), arguments: args.into() }
    }

    #[test]
    fn hermes_calls_text_and_splits() {
        let out =
            "Let me check.<tool_call>\n{\"name\": \"weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n\
                   <tool_call>\n{\"name\": \"time\", \"arguments\": {}}\n</tool_call>";
        let (text, calls) = parse_all(Format::Hermes, out);
        assert_eq!(text, "Let me check.");
        assert_eq!(calls, vec![call("weather", "{\"city\":\"Paris\"}"), call("time", "{}")]);
        // No call: all text, including something that starts like the marker.
        assert_eq!(parse_all(Format::Hermes, "a <tool b> é <tool_"), ("a <tool b> é <tool_".into(), vec![]));
        // An unterminated call that parses is a call (a model that stops after the JSON).
        let (t, c) = parse_all(Format::Hermes, "<tool_call>{\"name\": \"f\", \"parameters\": {\"x\": 1}}");
        assert_eq!((t.as_str(), c), ("", vec![call("f", "{\"x\":1}")]));
        // A body that is not a call stays text.
        assert_eq!(
            parse_all(Format::Hermes, "<tool_call>oops</tool_call>"),
            ("<tool_call>oops</tool_call>".into(), vec![])
        );
        // Arguments given as a JSON string.
        let (_, c) =
            parse_all(Format::Hermes, "<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"a\\\": [1]}\"}</tool_call>");
        assert_eq!(c, vec![call("f", "{\"a\":[1]}")]);
    }

    #[test]
    fn whole_answer_json_formats() {
        let generic = " {\"tool_calls\": [{\"name\": \"weather\", \"arguments\": {\"city\": \"Lima {x}\"}}, {\"name\": \"t\", \"arguments\": {}}]}";
        let llama = "{\"name\": \"f\", \"parameters\": {\"x\": \"{;}\"}}; {\"name\": \"g\", \"parameters\": {}}";
        let cases: Vec<(Format, &str, &str, Vec<Call>)> = vec![
            (Format::Generic, generic, "", vec![call("weather", "{\"city\":\"Lima {x}\"}"), call("t", "{}")]),
            (Format::Llama3, llama, "", vec![call("f", "{\"x\":\"{;}\"}"), call("g", "{}")]),
            // Text, and JSON that is not a call list, stay text.
            (Format::Generic, "Hello {there}", "Hello {there}", vec![]),
            (Format::Generic, "{\"a\": 1}", "{\"a\": 1}", vec![]),
            (Format::Generic, "{\"tool_calls\": [{\"na", "{\"tool_calls\": [{\"na", vec![]),
            (Format::Generic, "  ", "  ", vec![]),
            (Format::Llama3, "Sure, {x}", "Sure, {x}", vec![]),
            (Format::Llama3, "{\"a\": 1}", "{\"a\": 1}", vec![]),
        ];
        for (format, input, text, calls) in cases {
            assert_eq!(parse_all(format, input), (text.to_string(), calls), "{format:?} {input:?}");
        }
    }

    #[test]
    fn marker_prefixes() {
        assert_eq!(partial_marker_len("abc <tool", "<tool_call>"), 5);
        assert_eq!(partial_marker_len("abc", "<tool_call>"), 0);
        assert_eq!(partial_marker_len("é<", "<tool_call>"), 1);
        assert!(json_complete("{\"a\": \"}\"}") && !json_complete("{\"a\": \"}\"") && !json_complete("  "));
    }
}
