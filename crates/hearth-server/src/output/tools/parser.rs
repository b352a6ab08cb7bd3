//! The streaming tool-call parser of one choice: text goes in piece by piece as it is decoded; out come text to
//! show and calls: a Hermes call as its name, then its arguments' JSON text fragment by fragment as it is decoded;
//! the other forms' calls each as soon as it is complete (the whole-answer formats' and a run of loose calls when
//! the answer ends, generic's object as soon as it closes, a tagged call at its closing tag). Text that may begin a
//! call is held back until it is known not to: a marker split over pieces (`<tool_call>`, `[TOOL_CALLS]`, a fence,
//! a tag), an answer that opens like a call (`{`, `[`, a fence; Mistral's first word until what follows it shows),
//! a fenced block or tag that may hold calls until it shows it does not (or, a run, until the answer ends).
//!
//! What was held and turns out not to be calls is released as text: its first character, then the rest is read
//! again as text (so a tag inside it still opens a call).

use super::loose::{self, Loose};
use super::{generic, hermes, llama3, mistral, pythonic, Call, Declared, Format, Scan};
use crate::output::text::partial_marker_len;
use std::sync::Arc;

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
    /// How the answer opens is not known yet (only whitespace, or what may begin a fence or Mistral's call).
    Start,
    /// Text, watched for what opens a call.
    Text,
    /// Inside a Hermes `<tool_call>`, of a template that speaks Hermes.
    Hermes,
    /// The template's whole-answer format (Mistral's from its marker on): held until the answer ends (generic's
    /// until its object closes).
    Native,
    /// A run of loose calls (bare JSON, fences) from the start of what is held: it must end the answer.
    Run,
    /// A loose tagged call from the start of what is held.
    Tag,
}

pub struct CallParser {
    format: Format,
    /// The functions the request declares (loose forms call only these).
    functions: Arc<[Declared]>,
    mode: Mode,
    buf: String,
    calls: usize,
    /// A tagged call just closed; the newline after it (if it comes) is not text.
    skip_newline: bool,
    /// Hermes: the call whose arguments are streaming (its header was read).
    args: Option<ArgScan>,
    /// The length limit cut the answer: calls that completed before the cut are calls.
    cut: bool,
    /// What opens a call in text, and the mode it opens.
    openers: Vec<(String, Mode)>,
    /// JSON nesting over what a run or tag holds, read up to `nest_at`, for the mode `nest_of`: a long call is
    /// scanned again only when its JSON closes (see [`CallParser::worth_scanning`]).
    nest: JsonNesting,
    nest_at: usize,
    nest_of: Mode,
}

/// A held run or tag this long or shorter is scanned at every piece: its head decides whether it may be a call.
const HEAD: usize = 256;

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
    /// The parser of answers to a request that offers `functions` to a template of `format`.
    pub fn new(format: Format, functions: Arc<[Declared]>) -> Self {
        let mut openers = vec![(loose::FENCE.to_string(), Mode::Run)];
        for t in loose::tag_openers() {
            let native = format == Format::Hermes && t == hermes::START;
            openers.push((t, if native { Mode::Hermes } else { Mode::Tag }));
        }
        if format == Format::Mistral {
            openers.push((mistral::MARKER.to_string(), Mode::Native));
        }
        Self {
            format,
            functions,
            mode: Mode::Start,
            buf: String::new(),
            calls: 0,
            skip_newline: false,
            args: None,
            cut: false,
            openers,
            nest: JsonNesting::default(),
            nest_at: 0,
            nest_of: Mode::Start,
        }
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
        self.step(&mut out, false);
        out
    }

    /// The output ended (`cut`: by the length limit): release what is held (an unterminated call that parses is
    /// still a call; after a cut, so are the calls that completed before it).
    pub fn finish(&mut self, cut: bool) -> Vec<Piece> {
        self.cut = cut;
        let mut out = Vec::new();
        self.step(&mut out, true);
        out
    }

    /// Read what is held until it needs more text (or, at the end, until all is read).
    fn step(&mut self, out: &mut Vec<Piece>, end: bool) {
        while match self.mode {
            _ if self.nest_of != self.mode => {
                (self.nest, self.nest_at, self.nest_of) = (JsonNesting::default(), 0, self.mode);
                true
            }
            Mode::Start => self.start(end),
            Mode::Text => self.text(out, end),
            Mode::Hermes => self.hermes(out, end),
            Mode::Native => self.native(out, end),
            Mode::Run => self.run(out, end),
            Mode::Tag => self.tag(out, end),
        } {}
    }

    fn emit_text(out: &mut Vec<Piece>, s: &str) {
        if !s.is_empty() {
            out.push(Piece::Text(s.to_string()));
        }
    }

    fn emit_calls(&mut self, out: &mut Vec<Piece>, calls: Vec<Call>) {
        self.calls += calls.len();
        out.extend(calls.into_iter().map(Piece::Call));
    }

    /// What was held is not calls: its first character is text, the rest is read again as text.
    fn release_one(&mut self, out: &mut Vec<Piece>) -> bool {
        let n = self.buf.chars().next().map_or(0, char::len_utf8);
        Self::emit_text(out, &self.buf[..n]);
        self.buf.drain(..n);
        self.mode = Mode::Text;
        true
    }

    /// How the answer opens: the template's whole-answer format, a run of loose calls, or text. Returns whether
    /// it is known.
    fn start(&mut self, end: bool) -> bool {
        let native = match self.format {
            // harmony's calls are read by `crate::output::harmony`, not here: only loose forms
            Format::Hermes | Format::Harmony => Some(false),
            Format::Mistral => mistral::opens(&self.buf),
            Format::Pythonic => pythonic::opens(&self.buf),
            Format::Llama3 | Format::Generic => self.buf.trim_start().chars().next().map(|c| c == '{'),
        };
        self.mode = match (native, loose::opens(&self.buf)) {
            (Some(true), _) => Mode::Native,
            (None, _) | (_, None) if !end => return false,
            (_, Some(true)) => Mode::Run,
            _ => Mode::Text,
        };
        true
    }

    /// Text up to the first opener of a call; what may begin one at its end is held back.
    fn text(&mut self, out: &mut Vec<Piece>, end: bool) -> bool {
        if self.skip_newline {
            if self.buf.is_empty() && !end {
                return false;
            }
            if self.buf.starts_with('\n') {
                self.buf.remove(0);
            }
            self.skip_newline = false;
        }
        let first = self
            .openers
            .iter()
            .filter_map(|(m, mode)| self.buf.find(m.as_str()).map(|i| (i, *mode)))
            .min_by_key(|&(i, _)| i);
        if let Some((i, mode)) = first {
            Self::emit_text(out, &self.buf[..i]);
            let skip = if mode == Mode::Hermes { hermes::START.len() } else { 0 };
            self.buf.drain(..i + skip);
            self.mode = mode;
            return true;
        }
        let keep =
            if end { 0 } else { self.openers.iter().map(|(m, _)| partial_marker_len(&self.buf, m)).max().unwrap_or(0) };
        let cut = self.buf.len() - keep;
        Self::emit_text(out, &self.buf[..cut]);
        self.buf.drain(..cut);
        false
    }

    /// Inside a Hermes `<tool_call>` (its opener read): stream the call once its header is read, or parse its body
    /// when it closes (a JSON call, or a tagged one such as Qwen3-Coder's `<function=NAME>` form).
    fn hermes(&mut self, out: &mut Vec<Piece>, end: bool) -> bool {
        if self.args.is_some() {
            return self.stream_args(out, end);
        }
        if !end || !self.buf.contains(hermes::END) {
            match hermes::header(&self.buf) {
                hermes::Header::Yes { name, len } => {
                    self.calls += 1;
                    out.push(Piece::CallStart(name));
                    self.buf.drain(..len);
                    self.args = Some(ArgScan::default());
                    return true;
                }
                hermes::Header::Need if !end => return false,
                _ => {}
            }
        }
        let close = self.buf.find(hermes::END);
        let body_end = match (close, end) {
            (Some(j), _) => j,
            (None, true) => self.buf.len(),
            (None, false) => return false,
        };
        let body = self.buf[..body_end].to_string();
        let calls =
            hermes::parse_body(&body).map(|c| vec![c]).or_else(|| Loose { functions: &self.functions }.body(&body));
        match calls {
            Some(calls) => self.emit_calls(out, calls),
            // Not a call after all: show it as it was written.
            None => Self::emit_text(
                out,
                &format!("{}{body}{}", hermes::START, if close.is_some() { hermes::END } else { "" }),
            ),
        }
        self.buf.drain(..close.map_or(body_end, |j| j + hermes::END.len()));
        self.skip_newline = true;
        self.mode = Mode::Text;
        true
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
        true
    }

    /// The template's whole-answer format: parsed when the answer ends (generic: when its object closes); what
    /// does not parse is read as a run of loose calls, then as text.
    fn native(&mut self, out: &mut Vec<Piece>, end: bool) -> bool {
        if !end {
            if self.format != Format::Generic || !json_complete(&self.buf) {
                return false;
            }
            match generic::parse(&self.buf) {
                Some(calls) => {
                    self.emit_calls(out, calls);
                    self.buf.clear();
                    self.mode = Mode::Text;
                }
                None => self.mode = Mode::Run,
            }
            return true;
        }
        let scan = match self.format {
            Format::Llama3 => llama3::scan(&self.buf),
            Format::Mistral => mistral::scan(&self.buf),
            Format::Pythonic => pythonic::scan(&self.buf),
            _ => generic::scan(&self.buf),
        };
        match scan {
            Scan::Calls(calls, _) => self.emit_calls(out, calls),
            Scan::More(done) if self.cut && !done.is_empty() => self.emit_calls(out, done),
            _ => {
                self.mode = Mode::Run;
                return true;
            }
        }
        self.buf.clear();
        self.mode = Mode::Text;
        false
    }

    /// Whether what a run or tag holds may have changed what it is: at the end, while it is short, and when its
    /// JSON is not open (inside an open value nothing but its end can make it calls, and a flaw in it may wait).
    /// Scanning it at every piece would take time quadratic in a long call's arguments.
    fn worth_scanning(&mut self, end: bool) -> bool {
        for c in self.buf[self.nest_at..].chars() {
            self.nest.step(c);
        }
        self.nest_at = self.buf.len();
        // The XML form's values are text, not JSON: its nesting says nothing there, its closing tag does.
        let closed = self.buf.trim_end().ends_with(loose::FUNCTION_END);
        end || closed || self.buf.len() <= HEAD || (self.nest.depth <= 0 && !self.nest.in_str)
    }

    /// A run of loose calls: held until the answer ends, released as text as soon as it cannot be one.
    fn run(&mut self, out: &mut Vec<Piece>, end: bool) -> bool {
        if !self.worth_scanning(end) {
            return false;
        }
        let scan = Loose { functions: &self.functions }.run(&self.buf, end);
        self.held(out, scan, end, false)
    }

    /// A loose tagged call: sent when it closes, released as text as soon as it cannot be one.
    fn tag(&mut self, out: &mut Vec<Piece>, end: bool) -> bool {
        if !self.worth_scanning(end) {
            return false;
        }
        let scan = Loose { functions: &self.functions }.tagged(&self.buf, end, 0);
        self.held(out, scan, end, true)
    }

    /// Act on what a held run or tag is.
    fn held(&mut self, out: &mut Vec<Piece>, scan: Scan, end: bool, tagged: bool) -> bool {
        match scan {
            Scan::Calls(calls, len) => {
                self.emit_calls(out, calls);
                self.buf.drain(..len);
                self.skip_newline = tagged;
                self.mode = Mode::Text;
                true
            }
            Scan::More(_) if !end => false,
            Scan::More(done) if self.cut && !done.is_empty() => {
                self.emit_calls(out, done);
                self.buf.clear();
                self.mode = Mode::Text;
                false
            }
            _ => self.release_one(out),
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

/// A whole answer's text and calls (`names`: the functions the request declares).
pub fn parse_whole(format: Format, names: &[&str], text: &str) -> (String, Vec<Call>) {
    let mut p = CallParser::new(format, names.iter().map(|n| Declared::untyped(n)).collect());
    let mut pieces = p.feed(text);
    pieces.extend(p.finish(false));
    merge(pieces)
}

/// Whether `s` (which starts with `{` after whitespace) holds one complete JSON object: its braces close outside
/// strings.
fn json_complete(s: &str) -> bool {
    let mut n = JsonNesting::default();
    s.chars().any(|c| n.step(c))
}

#[cfg(test)]
mod tests;
