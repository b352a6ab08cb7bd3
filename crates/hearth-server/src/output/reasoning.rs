//! Reasoning separation: models that think in `<think>...</think>` (Qwen3, DeepSeek-R1 distills, SmolLM3) get that
//! part of their answer split into `reasoning_content`. The split runs on the streamed text: a marker split over
//! several pieces is held back until it is known, and a template that opens the thought itself (its generation
//! prompt ends in `<think>`) starts the answer inside it.

use crate::output::text::partial_marker_len;

pub const START: &str = "<think>";
pub const END: &str = "</think>";

/// Whether a chat template speaks this format.
pub fn template_thinks(source: &str) -> bool {
    source.contains(END)
}

/// Whether the rendered prompt leaves the answer inside an open thought.
pub fn prompt_opens_thought(prompt: &str) -> bool {
    let tail = prompt.trim_end();
    tail.ends_with(START) && tail.rfind(START) > tail.rfind(END)
}

/// Whether the rendered prompt ends with a closed thought (a template that turned thinking off writes an empty
/// one): the answer starts after it.
pub fn prompt_closes_thought(prompt: &str) -> bool {
    prompt.trim_end().ends_with(END)
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part {
    Reasoning(String),
    Content(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Nothing but whitespace yet: a `<think>` may still open the answer.
    Start,
    Thinking,
    Content,
}

pub struct ReasoningSplitter {
    state: State,
    buf: String,
    /// The thought just ended: the newlines after it (however they arrive) are not content.
    skip_newlines: bool,
}

impl ReasoningSplitter {
    /// `opened`: the prompt already opened the thought.
    pub fn new(opened: bool) -> Self {
        Self { state: if opened { State::Thinking } else { State::Start }, buf: String::new(), skip_newlines: false }
    }

    pub fn feed(&mut self, text: &str) -> Vec<Part> {
        self.buf.push_str(text);
        self.run(false)
    }

    /// The answer ended: release what is held.
    pub fn finish(&mut self) -> Vec<Part> {
        self.run(true)
    }

    fn run(&mut self, end: bool) -> Vec<Part> {
        let mut out = Vec::new();
        loop {
            match self.state {
                State::Start => {
                    let t = self.buf.trim_start();
                    if let Some(rest) = t.strip_prefix(START) {
                        self.buf = rest.to_string();
                        self.state = State::Thinking;
                        continue;
                    }
                    if !end && (t.is_empty() || START.starts_with(t)) {
                        return out;
                    }
                    self.state = State::Content;
                }
                State::Thinking => {
                    if let Some(i) = self.buf.find(END) {
                        push(&mut out, Part::Reasoning(self.buf[..i].to_string()));
                        self.buf.drain(..i + END.len());
                        self.skip_newlines = true;
                        self.state = State::Content;
                        continue;
                    }
                    let keep = if end { 0 } else { partial_marker_len(&self.buf, END) };
                    let cut = self.buf.len() - keep;
                    push(&mut out, Part::Reasoning(self.buf[..cut].to_string()));
                    self.buf.drain(..cut);
                    return out;
                }
                State::Content => {
                    if self.skip_newlines {
                        let rest = self.buf.trim_start_matches('\n').to_string();
                        self.buf = rest;
                        if self.buf.is_empty() && !end {
                            return out;
                        }
                        self.skip_newlines = false;
                    }
                    push(&mut out, Part::Content(std::mem::take(&mut self.buf)));
                    return out;
                }
            }
        }
    }
}

fn push(out: &mut Vec<Part>, p: Part) {
    match &p {
        Part::Reasoning(s) | Part::Content(s) if s.is_empty() => {}
        _ => out.push(p),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn merge(parts: Vec<Part>) -> (String, String) {
        let (mut r, mut c) = (String::new(), String::new());
        for p in parts {
            match p {
                Part::Reasoning(s) => r.push_str(&s),
                Part::Content(s) => c.push_str(&s),
            }
        }
        (r, c)
    }

    fn split_all(opened: bool, text: &str) -> (String, String) {
        crate::output::text::same_at_every_split(text, |pieces| {
            let mut s = ReasoningSplitter::new(opened);
            let mut got: Vec<Part> = pieces.iter().flat_map(|t| s.feed(t)).collect();
            got.extend(s.finish());
            merge(got)
        })
    }

    #[test]
    fn thoughts_split_from_answers() {
        let s = |a: &str, b: &str| (a.to_string(), b.to_string());
        assert_eq!(split_all(false, "<think>\nhmm, é\n</think>\n\nParis."), s("\nhmm, é\n", "Paris."));
        assert_eq!(split_all(false, "  <think>a</think>b"), s("a", "b"));
        assert_eq!(split_all(true, "step 1 </thi\n</think>Done"), s("step 1 </thi\n", "Done"));
        assert_eq!(split_all(false, "No thought <think> here"), s("", "No thought <think> here"));
        assert_eq!(split_all(true, "cut off mid-thought </th"), s("cut off mid-thought </th", ""));
        assert_eq!(split_all(false, "<thin"), s("", "<thin"));
        assert_eq!(split_all(false, ""), s("", ""));
    }

    #[test]
    fn templates_and_prompts() {
        assert!(template_thinks("{% if x %}<think>{% endif %}</think>"));
        assert!(!template_thinks("<|im_start|>"));
        assert!(prompt_opens_thought("<|im_start|>assistant\n<think>\n"));
        assert!(!prompt_opens_thought("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
        assert!(!prompt_opens_thought("<|im_start|>assistant\n"));
    }
}
