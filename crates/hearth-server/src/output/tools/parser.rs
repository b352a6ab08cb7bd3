//! The streaming tool-call parser of one choice: text goes in piece by piece as it is decoded; out come text to
//! show and calls: a Hermes call as its name, then its arguments' JSON text fragment by fragment as it is decoded;
//! the whole-answer formats' calls each as soon as it is complete. Text that may begin a call marker is held back
//! until it is known not to (a Hermes `<tool_call>` or Mistral `[TOOL_CALLS]` split over several pieces, a generic answer that
//! opens with `{`, a pythonic one that opens with `[`, a Mistral one's first word until what follows it shows).

use super::{generic, hermes, llama3, mistral, pythonic, Call, Format};
use crate::output::text::partial_marker_len;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    Text(String),
    /// A whole call.
    Call(Call),
    /// A call begins: its function's name (its arguments follow as [`Piece::CallArgs`]).
    CallStart(String),
    /// The next fragment of the arguments' JSON text of the call begun last.
    CallArgs(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Hermes: plain text; whole-answer formats: how the answer opens is not known yet.
    Text,
    /// Hermes: inside `<tool_call>`; whole-answer formats: the answer (Mistral: from its marker on) may be calls.
    Call,
    /// Whole-answer formats: the answer is text (Mistral: until its marker).
    Plain,
}

pub struct CallParser {
    format: Format,
    mode: Mode,
    buf: String,
    calls: usize,
    /// Hermes: a call just closed; the newline after it (if it comes) is not text.
    skip_newline: bool,
    /// Hermes: the call whose arguments are streaming (its header was read).
    args: Option<ArgScan>,
}

/// Where a streamed arguments object stands: JSON nesting outside strings, so its closing brace is known.
#[derive(Debug, Default)]
struct ArgScan {
    /// The arguments value started (its first non-space character was read).
    started: bool,
    /// The value is not an object (a JSON string, say): sent whole when the call closes.
    whole: bool,
    nesting: JsonNesting,
    /// The arguments value is complete; what follows up to `</tool_call>` is the call's own closing brace.
    done: bool,
}

/// JSON nesting outside strings, read a character at a time.
#[derive(Debug, Default)]
struct JsonNesting {
    depth: i64,
    in_str: bool,
    esc: bool,
}

impl JsonNesting {
    /// Read `c`; true when it closes the outermost object or list.
    fn step(&mut self, c: char) -> bool {
        if self.in_str {
            match (self.esc, c) {
                (true, _) => self.esc = false,
                (false, '\\') => self.esc = true,
                (false, '"') => self.in_str = false,
                _ => {}
            }
            return false;
        }
        match c {
            '"' => self.in_str = true,
            '{' | '[' => self.depth += 1,
            '}' | ']' => {
                self.depth -= 1;
                return self.depth == 0;
            }
            _ => {}
        }
        false
    }
}

impl CallParser {
    pub fn new(format: Format) -> Self {
        Self { format, mode: Mode::Text, buf: String::new(), calls: 0, skip_newline: false, args: None }
    }

    /// Calls emitted so far.
    pub fn calls(&self) -> usize {
        self.calls
    }

    /// The format it reads.
    pub fn format(&self) -> Format {
        self.format
    }

    /// Take the next decoded text.
    pub fn feed(&mut self, text: &str) -> Vec<Piece> {
        self.buf.push_str(text);
        let mut out = Vec::new();
        match self.format {
            Format::Hermes => self.hermes(&mut out, false),
            _ => self.whole_answer(&mut out, false),
        }
        out
    }

    /// The output ended: release what is held (an unterminated call that parses is still a call).
    pub fn finish(&mut self) -> Vec<Piece> {
        let mut out = Vec::new();
        match self.format {
            Format::Hermes => self.hermes(&mut out, true),
            _ => self.whole_answer(&mut out, true),
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
                Mode::Call if self.args.is_some() => {
                    if !self.stream_args(out, end) {
                        return;
                    }
                }
                Mode::Call => {
                    if !end || !self.buf.contains(hermes::END) {
                        match hermes::header(&self.buf) {
                            hermes::Header::Yes { name, len } => {
                                self.calls += 1;
                                out.push(Piece::CallStart(name));
                                self.buf.drain(..len);
                                self.args = Some(ArgScan::default());
                                continue;
                            }
                            hermes::Header::Need if !end => return,
                            _ => {}
                        }
                    }
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

    /// Stream the arguments of the Hermes call begun last: send what was decoded of its JSON object, up to its
    /// closing brace; then drop the call's own closing brace up to `</tool_call>`. Returns true when the call
    /// closed (text mode again), false when it needs more input (or the output ended).
    fn stream_args(&mut self, out: &mut Vec<Piece>, end: bool) -> bool {
        let Some(a) = self.args.as_mut() else { return true };
        if !a.done && !a.whole {
            // `from`: whitespace before the value is not part of it; `cut`: how far the value was read.
            let (mut from, mut cut) = (0, 0);
            for (i, c) in self.buf.char_indices() {
                if !a.started {
                    if c.is_whitespace() {
                        from = i + c.len_utf8();
                        cut = from;
                        continue;
                    }
                    a.started = true;
                    if c != '{' {
                        a.whole = true;
                        break;
                    }
                }
                cut = i + c.len_utf8();
                if a.nesting.step(c) {
                    a.done = true;
                    break;
                }
            }
            let mut read: String = self.buf.drain(..cut).collect();
            let fragment = read.split_off(from);
            if !fragment.is_empty() && !a.whole {
                out.push(Piece::CallArgs(fragment));
            }
        }
        let close = self.buf.find(hermes::END);
        if close.is_none() && !end {
            return false;
        }
        let rest: String = self.buf.drain(..close.map_or(self.buf.len(), |j| j + hermes::END.len())).collect();
        if a.whole {
            // A value that is not an object (arguments given as a JSON string): whole, once the call closed.
            let value = rest.trim_end().strip_suffix(hermes::END).unwrap_or(rest.trim_end()).trim_end();
            let value = value.strip_suffix('}').unwrap_or(value);
            let args = serde_json::from_str::<serde_json::Value>(value).ok().and_then(|v| match v {
                serde_json::Value::String(s) => Some(s),
                v @ serde_json::Value::Object(_) => Some(v.to_string()),
                _ => None,
            });
            out.push(Piece::CallArgs(args.unwrap_or_else(|| "{}".into())));
        }
        self.args = None;
        self.skip_newline = true;
        self.mode = Mode::Text;
        !(end && self.buf.is_empty())
    }

    /// Formats whose calls are the whole answer: decided by how it opens, parsed once complete (generic: one
    /// object, as soon as it closes; the others when the answer ends, as several calls may follow each other).
    /// Mistral's calls may also follow text, after their marker.
    fn whole_answer(&mut self, out: &mut Vec<Piece>, end: bool) {
        if self.mode == Mode::Text {
            let opens = match self.format {
                Format::Mistral => mistral::opens(&self.buf),
                Format::Pythonic => pythonic::opens(&self.buf),
                _ => self.buf.trim_start().chars().next().map(|c| c == '{'),
            };
            match (opens, end) {
                (Some(true), _) => self.mode = Mode::Call,
                (Some(false), _) | (None, true) => self.mode = Mode::Plain,
                (None, false) => return,
            }
        }
        if self.mode == Mode::Plain {
            let marker = (self.format == Format::Mistral).then_some(mistral::MARKER);
            match marker.and_then(|m| self.buf.find(m)) {
                Some(i) => {
                    Self::text(out, &self.buf[..i]);
                    self.buf.drain(..i);
                    self.mode = Mode::Call;
                }
                None => {
                    let keep = marker.filter(|_| !end).map_or(0, |m| partial_marker_len(&self.buf, m));
                    let cut = self.buf.len() - keep;
                    Self::text(out, &self.buf[..cut]);
                    self.buf.drain(..cut);
                    return;
                }
            }
        }
        if end || (self.format == Format::Generic && json_complete(&self.buf)) {
            let parsed = match self.format {
                Format::Llama3 => llama3::parse(&self.buf),
                Format::Mistral => mistral::parse(&self.buf),
                Format::Pythonic => pythonic::parse(&self.buf),
                _ => generic::parse(&self.buf),
            };
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
            Piece::CallStart(name) => calls.push(Call { name, arguments: String::new() }),
            Piece::CallArgs(a) => {
                if let Some(c) = calls.last_mut() {
                    c.arguments.push_str(&a);
                }
            }
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

/// Whether `s` (which starts with `{` after whitespace) holds one complete JSON object: its braces close outside
/// strings.
fn json_complete(s: &str) -> bool {
    let mut n = JsonNesting::default();
    s.chars().any(|c| n.step(c))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feed `text` split at every byte boundary pair (char boundaries) and in one piece: the same pieces come out,
    /// merged.
    fn parse_all(format: Format, text: &str) -> (String, Vec<Call>) {
        crate::output::text::same_at_every_split(text, |pieces| {
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
        // Hermes arguments are the model's JSON text as written (streamed as it is decoded).
        assert_eq!(calls, vec![call("weather", "{\"city\": \"Paris\"}"), call("time", "{}")]);
        // No call: all text, including something that starts like the marker.
        assert_eq!(parse_all(Format::Hermes, "a <tool b> é <tool_"), ("a <tool b> é <tool_".into(), vec![]));
        // An unterminated call that parses is a call (a model that stops after the JSON).
        let (t, c) = parse_all(Format::Hermes, "<tool_call>{\"name\": \"f\", \"parameters\": {\"x\": 1}}");
        assert_eq!((t.as_str(), c), ("", vec![call("f", "{\"x\": 1}")]));
        // Cut off inside its arguments: what was written is the call (as a streaming client saw it).
        let (_, c) = parse_all(Format::Hermes, "<tool_call>{\"name\": \"f\", \"arguments\": {\"x\": [1, ");
        assert_eq!(c, vec![call("f", "{\"x\": [1, ")]);
        // Braces and quotes inside strings do not end the arguments.
        let (t, c) =
            parse_all(Format::Hermes, "<tool_call>{\"name\": \"f\", \"arguments\": {\"s\": \"}\\\"{\"}}</tool_call>ok");
        assert_eq!((t.as_str(), c), ("ok", vec![call("f", "{\"s\": \"}\\\"{\"}")]));
        // Another key order: parsed when the call is complete.
        let (_, c) = parse_all(Format::Hermes, "<tool_call>{\"arguments\": {\"x\": 1}, \"name\": \"f\"}</tool_call>");
        assert_eq!(c, vec![call("f", "{\"x\":1}")]);
        // A body that is not a call stays text.
        assert_eq!(
            parse_all(Format::Hermes, "<tool_call>oops</tool_call>"),
            ("<tool_call>oops</tool_call>".into(), vec![])
        );
        // Arguments given as a JSON string.
        let (_, c) =
            parse_all(Format::Hermes, "<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"a\\\": [1]}\"}</tool_call>");
        assert_eq!(c, vec![call("f", "{\"a\": [1]}")]);
    }

    #[test]
    fn hermes_arguments_stream_as_they_are_decoded() {
        let mut p = CallParser::new(Format::Hermes);
        let mut got = p.feed("Sure.<tool_call>\n{\"name\": \"write\", \"arguments\": {\"text\": \"Hel");
        assert_eq!(
            got,
            vec![
                Piece::Text("Sure.".into()),
                Piece::CallStart("write".into()),
                Piece::CallArgs("{\"text\": \"Hel".into())
            ]
        );
        got = p.feed("lo\"}}\n</tool_call>\nDone.");
        assert_eq!(got, vec![Piece::CallArgs("lo\"}".into()), Piece::Text("Done.".into())]);
        assert_eq!(p.calls(), 1);
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
    fn mistral_answers() {
        let weather = || call("weather", "{\"city\":\"Paris\"}");
        let two = || vec![weather(), call("time", "{}")];
        let list = "[TOOL_CALLS] [{\"name\": \"weather\", \"arguments\": {\"city\": \"Paris\"}}, {\"name\": \"time\", \"arguments\": {}}]";
        let cases: Vec<(&str, &str, Vec<Call>)> = vec![
            (list, "", two()),
            (&list["[TOOL_CALLS]".len()..], "", two()),
            ("[TOOL_CALLS]weather[ARGS]{\"city\": \"Paris\"}[TOOL_CALLS]time[ARGS]{}", "", two()),
            // The markers left out of the text.
            ("weather{\"city\": \"Paris\"}time{}", "", two()),
            // Calls after text, from the marker on.
            (
                "Let me check. [TOOL_CALLS][{\"name\": \"time\", \"arguments\": {}}]",
                "Let me check. ",
                vec![call("time", "{}")],
            ),
            // Text, and what is not a call list, stay text as written.
            ("Hello there [1] é [TOOL_", "Hello there [1] é [TOOL_", vec![]),
            ("[1, 2] are numbers", "[1, 2] are numbers", vec![]),
            ("[TOOL_CALLS] [{\"name\": \"weather\", \"argu", "[TOOL_CALLS] [{\"name\": \"weather\", \"argu", vec![]),
            ("Sure: [TOOL_CALLS]oops", "Sure: [TOOL_CALLS]oops", vec![]),
            ("weather", "weather", vec![]),
            ("  ", "  ", vec![]),
        ];
        for (input, text, calls) in cases {
            assert_eq!(parse_all(Format::Mistral, input), (text.to_string(), calls), "{input:?}");
        }
    }

    #[test]
    fn pythonic_answers() {
        let weather = || call("get_weather", "{\"city\":\"Paris\",\"days\":3}");
        let cases: Vec<(&str, &str, Vec<Call>)> = vec![
            ("[get_weather(city=\"Paris\", days=3), get_time()]", "", vec![weather(), call("get_time", "{}")]),
            (" ```tool_code\n[get_weather(city='Paris', days=3)]\n```", "", vec![weather()]),
            ("```tool_code\nget_weather(city=\"Paris\", days=3)\n```", "", vec![weather()]),
            ("<|python_start|>[get_weather(city=\"Paris\", days=3,)]<|python_end|>", "", vec![weather()]),
            (
                "[f(a=True, b=None, c=[1, 2.5, 'x'], d={'k': \"v\"}, e=false, s=\"\\u00e9\\n\")]",
                "",
                vec![call(
                    "f",
                    "{\"a\":true,\"b\":null,\"c\":[1,2.5,\"x\"],\"d\":{\"k\":\"v\"},\"e\":false,\"s\":\"é\\n\"}",
                )],
            ),
            // Text, and what is not a list of calls, stay text as written.
            ("The weather is nice. [f()]", "The weather is nice. [f()]", vec![]),
            ("<b>é</b>", "<b>é</b>", vec![]),
            ("[1, 2, 3]", "[1, 2, 3]", vec![]),
            ("[f(1, 2)]", "[f(1, 2)]", vec![]),
            ("[f(a=x)]", "[f(a=x)]", vec![]),
            ("[f(a=1]", "[f(a=1]", vec![]),
            ("[f(a=1)] and more", "[f(a=1)] and more", vec![]),
            ("```python\nprint(f(a=1))\n```", "```python\nprint(f(a=1))\n```", vec![]),
            ("  ", "  ", vec![]),
        ];
        for (input, text, calls) in cases {
            assert_eq!(parse_all(Format::Pythonic, input), (text.to_string(), calls), "{input:?}");
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
