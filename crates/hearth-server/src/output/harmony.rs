//! OpenAI's harmony format (gpt-oss): an answer is a run of messages, each a header and a body,
//! `<|start|>assistant<|channel|>CHANNEL<|message|>BODY<|end|>`, the first one's `<|start|>assistant` written by the
//! prompt. The `analysis` channel is the model's thought (`reasoning_content`), `final` its answer (`content`), and
//! a `commentary` message addressed to a function (`to=functions.NAME`, in the header before or after the channel;
//! its body the arguments' JSON, ended by `<|call|>`) a tool call; a commentary message to no one is text for the
//! user. `<|return|>` ends the answer. The markers are special tokens: harmony answers are decoded with them kept,
//! and they never reach the client.
//!
//! The split streams: a body's text is released as it comes, a marker split over several pieces held back until it
//! is known; a header is read whole. An answer that does not begin with a marker is plain content. Only a call of a
//! function the request offers is a call (any other recipient's message is read by its channel), and the answer
//! ends at `<|call|>` or `<|return|>`, or at a message from anyone but the assistant: what follows is dropped.

use crate::output::text::partial_marker_len;

/// A piece of a harmony answer, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part {
    Reasoning(String),
    Content(String),
    /// A whole call: the function's name and its arguments' JSON text.
    Call {
        name: String,
        arguments: String,
    },
}

const START: &str = "<|start|>";
const CHANNEL: &str = "<|channel|>";
const MESSAGE: &str = "<|message|>";
const CONSTRAIN: &str = "<|constrain|>";
/// Markers that end a message's body: the first ends the message, the others the answer.
const ENDS: [&str; 3] = ["<|end|>", "<|return|>", "<|call|>"];

/// Whether a chat template speaks harmony.
pub fn template_speaks(source: &str) -> bool {
    source.contains(CHANNEL) && source.contains(MESSAGE)
}

/// Where a message's body goes.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Sink {
    Reasoning,
    Content,
    /// A call to this function: its arguments are the body, whole.
    Call(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    /// Reading a header (up to `<|message|>`); at the answer's start it may yet prove plain text.
    Header {
        first: bool,
    },
    Body(Sink),
    /// Not harmony: everything is content.
    Plain,
    /// The answer ended; anything more is dropped.
    Done,
}

pub struct HarmonySplitter {
    state: State,
    buf: String,
    /// The arguments of the call being read.
    args: String,
    calls: usize,
    /// The functions the request offers.
    offered: Vec<String>,
}

impl HarmonySplitter {
    /// `offered`: the names of the functions the request offers (none: no message is a call).
    pub fn new(offered: Vec<String>) -> Self {
        Self { state: State::Header { first: true }, buf: String::new(), args: String::new(), calls: 0, offered }
    }

    /// Calls begun so far.
    pub fn calls(&self) -> usize {
        self.calls
    }

    /// The parts of the next text; `end`: the answer ends here (`cut`: by the length limit, which leaves a call
    /// being written incomplete: it is dropped).
    pub fn feed(&mut self, text: &str, end: bool, cut: bool) -> Vec<Part> {
        self.buf.push_str(text);
        let mut out = Vec::new();
        loop {
            match self.state.clone() {
                State::Done => {
                    self.buf.clear();
                    return out;
                }
                State::Plain => {
                    push(&mut out, Part::Content(std::mem::take(&mut self.buf)));
                    return out;
                }
                State::Header { first } => {
                    let t = self.buf.trim_start();
                    if first && !t.is_empty() && !t.starts_with("<|") && !"<|".starts_with(t) {
                        self.state = State::Plain;
                        continue;
                    }
                    let Some(at) = self.buf.find(MESSAGE) else {
                        if end && first {
                            // it never became harmony: text
                            push(&mut out, Part::Content(std::mem::take(&mut self.buf)));
                        }
                        if end {
                            self.buf.clear();
                        }
                        return out;
                    };
                    let header = self.buf[..at].to_string();
                    self.buf.drain(..at + MESSAGE.len());
                    self.state = match sink_of(&header, &self.offered) {
                        Some(sink) => State::Body(sink),
                        None => State::Done,
                    };
                }
                State::Body(sink) => {
                    let hit =
                        ENDS.iter().enumerate().filter_map(|(k, m)| self.buf.find(m).map(|i| (i, m.len(), k))).min();
                    let answer_ends = hit.is_some_and(|(_, _, k)| k > 0);
                    let (body, rest) = match hit {
                        Some((i, len, _)) => (self.buf[..i].to_string(), Some(self.buf[i + len..].to_string())),
                        None if end => (std::mem::take(&mut self.buf), None),
                        None => {
                            let hold = ENDS.iter().map(|m| partial_marker_len(&self.buf, m)).max().unwrap_or(0);
                            let body = self.buf[..self.buf.len() - hold].to_string();
                            self.buf.drain(..self.buf.len() - hold);
                            (body, None)
                        }
                    };
                    let done = rest.is_some() || end;
                    match &sink {
                        Sink::Reasoning => push(&mut out, Part::Reasoning(body)),
                        Sink::Content => push(&mut out, Part::Content(body)),
                        Sink::Call(name) => {
                            self.args.push_str(&body);
                            if done && !(cut && rest.is_none()) {
                                out.push(Part::Call { name: name.clone(), arguments: self.args.trim().to_string() });
                                self.calls += 1;
                            }
                            if done {
                                self.args.clear();
                            }
                        }
                    }
                    match rest {
                        Some(rest) => {
                            self.buf = rest;
                            self.state = if answer_ends { State::Done } else { State::Header { first: false } };
                        }
                        None => return out,
                    }
                }
            }
        }
    }
}

fn push(out: &mut Vec<Part>, part: Part) {
    match &part {
        Part::Reasoning(t) | Part::Content(t) if t.is_empty() => {}
        _ => out.push(part),
    }
}

/// Where a message with this header goes: `[<|start|>]ROLE[ to=RECIPIENT]<|channel|>CHANNEL[ to=RECIPIENT][ TYPE |
/// <|constrain|>TYPE]`; None for a message from anyone but the assistant (the answer is over).
fn sink_of(header: &str, offered: &[String]) -> Option<Sink> {
    if let Some((_, after)) = header.split_once(START) {
        let role = after.split(|c: char| c.is_whitespace() || c == '<').next().unwrap_or("");
        if role != "assistant" {
            return None;
        }
    }
    let header = header.replace(START, " ").replace(CONSTRAIN, " ");
    let channel = header
        .split_once(CHANNEL)
        .map(|(_, rest)| rest.split(|c: char| c.is_whitespace() || c == '<').next().unwrap_or(""))
        .unwrap_or("");
    let recipient = header
        .split_whitespace()
        .flat_map(|w| w.split(CHANNEL))
        .find_map(|w| w.strip_prefix("to="))
        .filter(|r| !r.is_empty());
    let call = recipient.and_then(|r| r.strip_prefix("functions.")).filter(|f| offered.iter().any(|o| o == f));
    Some(match (call, channel) {
        (Some(f), _) => Sink::Call(f.to_string()),
        (None, "analysis") => Sink::Reasoning,
        (None, _) => Sink::Content,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::text::same_at_every_split;

    /// (name, arguments) of a call.
    type Call = (String, String);

    fn call(name: &str, arguments: &str) -> Call {
        (name.into(), arguments.into())
    }

    /// (reasoning, content, calls) of an answer fed in `pieces`.
    fn run(pieces: &[&str], cut: bool) -> (String, String, Vec<Call>) {
        let mut s = HarmonySplitter::new(vec!["get_weather".into(), "f".into()]);
        let (mut r, mut c, mut calls) = (String::new(), String::new(), Vec::new());
        for (i, p) in pieces.iter().enumerate() {
            for part in s.feed(p, i + 1 == pieces.len(), cut) {
                match part {
                    Part::Reasoning(t) => r.push_str(&t),
                    Part::Content(t) => c.push_str(&t),
                    Part::Call { name, arguments } => calls.push((name, arguments)),
                }
            }
        }
        assert_eq!(s.calls(), calls.len());
        (r, c, calls)
    }

    #[test]
    fn analysis_is_reasoning_and_final_is_content() {
        let text = "<|channel|>analysis<|message|>User asks 2+2. Easy.<|end|><|start|>assistant<|channel|>final\
                    <|message|>4.<|return|>";
        let got = same_at_every_split(text, |p| run(p, false));
        assert_eq!(got, ("User asks 2+2. Easy.".into(), "4.".into(), vec![]));
        // the answer ended by its end-of-sequence token (not decoded): the body runs to the end
        let got =
            run(&["<|channel|>analysis<|message|>hm<|end|><|start|>assistant<|channel|>final<|message|>4."], false);
        assert_eq!(got, ("hm".into(), "4.".into(), vec![]));
    }

    #[test]
    fn commentary_to_a_function_is_a_call_in_either_header_order() {
        for header in [
            "<|start|>assistant to=functions.get_weather<|channel|>commentary json",
            "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json",
        ] {
            let text = format!(
                "<|channel|>analysis<|message|>Need weather.<|end|>{header}<|message|>{{\"city\": \"Paris\"}}<|call|>"
            );
            let got = same_at_every_split(&text, |p| run(p, false));
            let want = vec![call("get_weather", "{\"city\": \"Paris\"}")];
            assert_eq!(got, ("Need weather.".into(), String::new(), want), "{header}");
        }
        // a preamble to no one is text for the user
        let got = run(&["<|channel|>commentary<|message|>Checking.<|end|>"], false);
        assert_eq!(got.1, "Checking.");
    }

    #[test]
    fn a_cut_call_is_dropped_and_plain_text_stays_text() {
        let text = "<|channel|>commentary to=functions.f <|constrain|>json<|message|>{\"a\": ";
        assert_eq!(run(&[text], true), (String::new(), String::new(), vec![]));
        // ended by `<|call|>` as the end-of-sequence token (not decoded): a whole call
        assert_eq!(run(&[text, "1}"], false).2, vec![call("f", "{\"a\": 1}")]);
        let got = same_at_every_split("Just text, <|no marker first.", |p| run(p, false));
        assert_eq!(got, (String::new(), "Just text, <|no marker first.".into(), vec![]));
        assert_eq!(run(&["<|never a header"], false).1, "<|never a header");
    }

    #[test]
    fn the_answer_ends_at_a_call_or_a_return_and_calls_are_offered_functions_only() {
        // after `<|call|>`, a made-up tool reply and more text are dropped
        let text = "<|channel|>commentary to=functions.f <|constrain|>json<|message|>{}<|call|><|start|>functions.f \
                    to=assistant<|channel|>commentary<|message|>\"sunny\"<|end|><|start|>assistant<|channel|>final\
                    <|message|>made up";
        assert_eq!(same_at_every_split(text, |p| run(p, false)), (String::new(), String::new(), vec![call("f", "{}")]));
        let text = "<|channel|>final<|message|>Done.<|return|>more";
        assert_eq!(run(&[text], false).1, "Done.");
        // a recipient the request does not offer: read by its channel
        let text = "<|channel|>analysis to=python<|message|>print(1)<|end|><|start|>assistant to=functions.nope\
                    <|channel|>commentary json<|message|>{}<|call|>";
        assert_eq!(run(&[text], false), ("print(1)".into(), "{}".into(), vec![]));
    }

    #[test]
    fn templates_that_speak_harmony() {
        assert!(template_speaks("{{- \"<|start|>assistant<|channel|>final<|message|>\" }}"));
        assert!(!template_speaks("<|im_start|>assistant"));
    }
}
