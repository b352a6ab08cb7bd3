//! One choice's answer split into what every API shows: its thought (a template that thinks), its text, and its
//! tool calls (a request that offers tools). Streaming feeds the decoded text piece by piece; a whole answer is split
//! at once. Chat Completions, Anthropic Messages and Responses each turn these parts into their own shapes.

use crate::output::harmony::{self, HarmonySplitter};
use crate::output::reasoning::{Part, ReasoningSplitter};
use crate::output::tools::parser::{CallParser, Piece};
use crate::output::tools::{Call, Offered};

/// A piece of an answer, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AnswerPart {
    Reasoning(String),
    Content(String),
    /// Call `index` (0-based, in this answer) begins; with the whole call when its format parses calls whole, else
    /// its name only (its arguments follow as `CallArgs`).
    CallStart {
        index: usize,
        call: Call,
        whole: bool,
    },
    /// The next fragment of the arguments' JSON text of call `index`.
    CallArgs {
        index: usize,
        args: String,
    },
}

/// How a request's answers are split.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AnswerShape {
    /// The template thinks (`<think>...</think>`).
    pub thinks: bool,
    /// The prompt opened the thought: the answer starts inside it.
    pub opened: bool,
    /// The tools the request offers.
    pub tools: Option<Offered>,
    /// The template speaks harmony (gpt-oss): the answer's channels are its thought, its text and its calls.
    pub harmony: bool,
}

/// Where the text given to a splitter stands in its answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    /// More follows.
    More,
    /// The answer ends here.
    End,
    /// The length limit cut the answer here: calls that completed before the cut are calls.
    Cut,
}

impl Flow {
    /// How an answer that finished for `reason` ends.
    pub fn finished(reason: &str) -> Flow {
        if reason == "length" {
            Flow::Cut
        } else {
            Flow::End
        }
    }
}

/// The streaming splitter of one choice.
pub struct AnswerSplitter {
    thinker: Option<ReasoningSplitter>,
    parser: Option<CallParser>,
    harmony: Option<HarmonySplitter>,
}

impl AnswerSplitter {
    pub fn new(shape: &AnswerShape) -> Self {
        if shape.harmony {
            let offered = shape.tools.iter().flat_map(|t| t.functions.iter().map(|f| f.name.clone())).collect();
            return Self { thinker: None, parser: None, harmony: Some(HarmonySplitter::new(offered)) };
        }
        Self {
            thinker: shape.thinks.then(|| ReasoningSplitter::new(shape.opened)),
            parser: shape.tools.as_ref().map(|t| CallParser::new(t.format, t.functions.clone())),
            harmony: None,
        }
    }

    /// Calls begun so far.
    pub fn calls(&self) -> usize {
        match &self.harmony {
            Some(h) => h.calls(),
            None => self.parser.as_ref().map_or(0, CallParser::calls),
        }
    }

    /// The parts of the next text (at the answer's end what was held back is flushed).
    pub fn feed(&mut self, text: &str, flow: Flow) -> Vec<AnswerPart> {
        let end = flow != Flow::More;
        if let Some(h) = self.harmony.as_mut() {
            // the calls this text completes follow those before it
            let mut index = h.calls();
            return h
                .feed(text, end, flow == Flow::Cut)
                .into_iter()
                .map(|p| match p {
                    harmony::Part::Reasoning(r) => AnswerPart::Reasoning(r),
                    harmony::Part::Content(c) => AnswerPart::Content(c),
                    harmony::Part::Call { name, arguments } => {
                        index += 1;
                        AnswerPart::CallStart { index: index - 1, call: Call { name, arguments }, whole: true }
                    }
                })
                .collect();
        }
        let mut out = Vec::new();
        let answer = match self.thinker.as_mut() {
            Some(t) => {
                let mut pieces = t.feed(text);
                if end {
                    pieces.extend(t.finish());
                }
                let mut answer = String::new();
                for p in pieces {
                    match p {
                        Part::Reasoning(r) => out.push(AnswerPart::Reasoning(r)),
                        Part::Content(c) => answer.push_str(&c),
                    }
                }
                answer
            }
            None => text.to_string(),
        };
        let Some(p) = self.parser.as_mut() else {
            if !answer.is_empty() {
                out.push(AnswerPart::Content(answer));
            }
            return out;
        };
        let mut next = p.calls();
        let mut pieces = p.feed(&answer);
        if end {
            pieces.extend(p.finish(flow == Flow::Cut));
        }
        for piece in pieces {
            match piece {
                Piece::Text(t) => out.push(AnswerPart::Content(t)),
                Piece::Call(call) => {
                    out.push(AnswerPart::CallStart { index: next, call, whole: true });
                    next += 1;
                }
                Piece::CallStart(name) => {
                    out.push(AnswerPart::CallStart {
                        index: next,
                        call: Call { name, arguments: String::new() },
                        whole: false,
                    });
                    next += 1;
                }
                Piece::CallArgs(args) => out.push(AnswerPart::CallArgs { index: next.saturating_sub(1), args }),
            }
        }
        out
    }
}

/// A whole answer, split.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Answer {
    /// Its thought (None when it has none).
    pub reasoning: Option<String>,
    /// Its text: None when it is only calls, or only a thought (cut off by the length limit).
    pub content: Option<String>,
    pub calls: Vec<Call>,
}

impl Answer {
    /// A whole answer that finished for `reason`, split.
    pub fn split(shape: &AnswerShape, text: &str, reason: &str) -> Answer {
        let mut s = AnswerSplitter::new(shape);
        let mut a = Answer::default();
        let mut content = String::new();
        for part in s.feed(text, Flow::finished(reason)) {
            match part {
                AnswerPart::Reasoning(r) => a.reasoning.get_or_insert_with(String::new).push_str(&r),
                AnswerPart::Content(c) => content.push_str(&c),
                AnswerPart::CallStart { call, .. } => a.calls.push(call),
                AnswerPart::CallArgs { args, .. } => {
                    if let Some(c) = a.calls.last_mut() {
                        c.arguments.push_str(&args);
                    }
                }
            }
        }
        let only_calls = !a.calls.is_empty() && content.trim().is_empty();
        let only_thought = a.reasoning.is_some() && content.is_empty();
        a.content = (!only_calls && !only_thought).then_some(content);
        a
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::tools::{Declared, Format};

    fn hermes(names: &[&str]) -> Offered {
        Offered { format: Format::Hermes, functions: names.iter().map(|n| Declared::untyped(n)).collect() }
    }

    #[test]
    fn a_whole_answer_and_its_stream_split_alike() {
        let shape = AnswerShape { thinks: true, opened: false, tools: Some(hermes(&["f"])), harmony: false };
        let text = "<think>hmm</think>\n\nSure.<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1}}\n</tool_call>";
        let whole = Answer::split(&shape, text, "stop");
        assert_eq!(whole.reasoning.as_deref(), Some("hmm"));
        assert_eq!(whole.content.as_deref(), Some("Sure."));
        assert_eq!(whole.calls, vec![Call { name: "f".into(), arguments: "{\"x\": 1}".into() }]);
        let mut s = AnswerSplitter::new(&shape);
        let mut streamed = Vec::new();
        let chars: Vec<char> = text.chars().collect();
        for (i, c) in chars.iter().enumerate() {
            streamed.extend(s.feed(&c.to_string(), if i + 1 == chars.len() { Flow::End } else { Flow::More }));
        }
        let args: String = streamed
            .iter()
            .filter_map(|p| match p {
                AnswerPart::CallArgs { index: 0, args } => Some(args.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(args, "{\"x\": 1}");
        assert_eq!(s.calls(), 1);
    }

    #[test]
    fn only_calls_or_only_a_thought_have_no_content() {
        let calls = AnswerShape { tools: Some(hermes(&["f"])), ..AnswerShape::default() };
        let a = Answer::split(&calls, "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>", "stop");
        assert_eq!((a.content, a.calls.len()), (None, 1));
        let thought = AnswerShape { thinks: true, opened: true, ..AnswerShape::default() };
        assert_eq!(Answer::split(&thought, "still thinking", "length").content, None);
        assert_eq!(Answer::split(&AnswerShape::default(), "", "stop").content.as_deref(), Some(""));
    }

    #[test]
    fn the_calls_a_length_cut_completed_are_calls() {
        let shape = AnswerShape { tools: Some(hermes(&["f", "g"])), ..AnswerShape::default() };
        let text = "```json\n[{\"name\": \"f\", \"arguments\": {}}, {\"name\": \"g\", \"argu";
        let cut = Answer::split(&shape, text, "length");
        assert_eq!((cut.content, cut.calls), (None, vec![Call { name: "f".into(), arguments: "{}".into() }]));
        // The same answer ended by the model (a stop string, say) is malformed: text.
        let stopped = Answer::split(&shape, text, "stop");
        assert_eq!((stopped.content.as_deref(), stopped.calls.len()), (Some(text), 0));
    }
}
