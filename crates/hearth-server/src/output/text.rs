//! The per-choice text pipeline: token ids -> `StreamDecoder` (UTF-8-safe, space rules) -> `StopMatcher`
//! (hold back text that may be the start of a stop string; cut at the first match, the stop text excluded).

use hearth_engine::tokenizer::{StreamDecoder, Tokenizer};

/// Finds stop strings in streamed text. Text that could still become a stop string is held back until it
/// either completes one (then it and everything after it is dropped) or cannot (then it is released).
#[derive(Debug, Clone, Default)]
pub struct StopMatcher {
    stops: Vec<String>,
    held: String,
    stopped: bool,
    /// The stop string that matched.
    matched: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StopOutput {
    /// Text that is final.
    pub text: String,
    /// A stop string matched; nothing more will be released.
    pub stopped: bool,
}

impl StopMatcher {
    /// Empty stop strings are ignored (the request layer rejects them).
    pub fn new(stops: Vec<String>) -> Self {
        Self {
            stops: stops.into_iter().filter(|s| !s.is_empty()).collect(),
            held: String::new(),
            stopped: false,
            matched: None,
        }
    }

    pub fn push(&mut self, text: &str) -> StopOutput {
        if self.stopped {
            return StopOutput { text: String::new(), stopped: true };
        }
        if self.stops.is_empty() {
            return StopOutput { text: text.to_string(), stopped: false };
        }
        self.held.push_str(text);
        // 1. the earliest complete match wins
        let first = self.stops.iter().filter_map(|s| self.held.find(s.as_str()).map(|at| (at, s))).min_by_key(|m| m.0);
        if let Some((at, stop)) = first {
            self.matched = Some(stop.clone());
            self.stopped = true;
            let mut out = std::mem::take(&mut self.held);
            out.truncate(at);
            return StopOutput { text: out, stopped: true };
        }
        // 2. hold the longest tail that is a prefix of some stop string
        let keep = self.partial_tail_len();
        let release = self.held.len() - keep;
        let rest = self.held.split_off(release);
        StopOutput { text: std::mem::replace(&mut self.held, rest), stopped: false }
    }

    /// Release what is held (the stream ended without completing a stop string).
    pub fn finish(&mut self) -> String {
        if self.stopped {
            return String::new();
        }
        std::mem::take(&mut self.held)
    }

    /// The stop string that matched, if one did.
    pub fn matched(&self) -> Option<&str> {
        self.matched.as_deref()
    }

    fn partial_tail_len(&self) -> usize {
        // Tails of `held` shorter than a stop (a full match was handled above).
        self.stops.iter().map(|s| partial_marker_len(&self.held, s)).max().unwrap_or(0)
    }
}

/// The length of the longest tail of `s` that is a proper prefix of `marker`: text to hold back, since it may be
/// the marker's start (a stop string, a tool-call or reasoning tag split over several pieces).
pub fn partial_marker_len(s: &str, marker: &str) -> usize {
    (1..marker.len().min(s.len() + 1))
        .rev()
        .find(|&n| s.is_char_boundary(s.len() - n) && marker.starts_with(&s[s.len() - n..]))
        .unwrap_or(0)
}

/// Tests of streaming text state machines: `run` over `text` cut at every pair of char boundaries (three pieces)
/// must give what it gives over `text` in one piece; returns that.
#[cfg(test)]
pub fn same_at_every_split<T: PartialEq + std::fmt::Debug>(text: &str, run: impl Fn(&[&str]) -> T) -> T {
    let want = run(&[text]);
    let bounds: Vec<usize> = (0..=text.len()).filter(|&i| text.is_char_boundary(i)).collect();
    for &a in &bounds {
        for &b in bounds.iter().filter(|&&b| b >= a) {
            assert_eq!(run(&[&text[..a], &text[a..b], &text[b..]]), want, "split at {a}, {b} of {text:?}");
        }
    }
    want
}

/// One choice's text state.
pub struct ChoiceText<'a> {
    dec: StreamDecoder<'a>,
    stop: StopMatcher,
    /// Characters released so far (for completions' `text_offset`).
    pub released_chars: usize,
    /// Tokens received.
    pub tokens: usize,
    /// No more text or tokens are wanted (a stop string matched, or the engine finished it).
    pub done: bool,
}

impl<'a> ChoiceText<'a> {
    pub fn new(tok: &'a Tokenizer, stops: Vec<String>, trim_leading_space: bool, skip_special: bool) -> Self {
        Self {
            dec: StreamDecoder::new(tok, trim_leading_space).skip_special(skip_special),
            stop: StopMatcher::new(stops),
            released_chars: 0,
            tokens: 0,
            done: false,
        }
    }

    /// Feed one token; returns the released text and whether a stop string matched.
    pub fn push(&mut self, id: u32) -> StopOutput {
        self.tokens += 1;
        let piece = self.dec.push(id);
        let out = self.stop.push(&piece);
        self.release(out)
    }

    /// The engine ended the choice: flush the decoder and the matcher. `stopped` tells whether the flushed
    /// text completed a stop string.
    pub fn finish(&mut self) -> StopOutput {
        let tail = self.dec.finish();
        let mut out = self.stop.push(&tail);
        if !out.stopped {
            out.text.push_str(&self.stop.finish());
        }
        self.done = true;
        self.release(out)
    }

    /// The stop string that ended this choice, if one did.
    pub fn matched_stop(&self) -> Option<&str> {
        self.stop.matched()
    }

    fn release(&mut self, out: StopOutput) -> StopOutput {
        self.released_chars += out.text.chars().count();
        if out.stopped {
            self.done = true;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(stops: &[&str], pieces: &[&str]) -> (String, bool, Vec<String>) {
        let mut m = StopMatcher::new(stops.iter().map(|s| s.to_string()).collect());
        let mut out = String::new();
        let mut each = Vec::new();
        for p in pieces {
            let o = m.push(p);
            each.push(o.text.clone());
            out.push_str(&o.text);
            if o.stopped {
                return (out, true, each);
            }
        }
        out.push_str(&m.finish());
        (out, false, each)
    }

    #[test]
    fn no_stops_passes_through() {
        assert_eq!(run(&[], &["a", "b"]), ("ab".into(), false, vec!["a".into(), "b".into()]));
    }

    #[test]
    fn stop_text_is_excluded_across_pieces() {
        let (out, stopped, each) = run(&["\nUser:"], &["Hello", " there\n", "Us", "er:", " more"]);
        assert_eq!(out, "Hello there");
        assert!(stopped);
        // "\n" is held until it is known not to be... it was part of the stop.
        assert_eq!(each, vec!["Hello", " there", "", ""]);
    }

    #[test]
    fn held_text_is_released_when_it_diverges() {
        let (out, stopped, each) = run(&["STOP"], &["a ST", "x", "b"]);
        assert_eq!((out.as_str(), stopped), ("a STxb", false));
        assert_eq!(each, vec!["a ", "STx", "b"]);
    }

    #[test]
    fn earliest_of_several_stops_wins_and_tail_is_flushed() {
        let (out, stopped, _) = run(&["world", "lo"], &["hello world"]);
        assert_eq!((out.as_str(), stopped), ("hel", true));
        let mut m = StopMatcher::new(vec!["world".into(), "lo".into()]);
        m.push("hello world");
        assert_eq!(m.matched(), Some("lo"));
        let (out, stopped, _) = run(&["xyz"], &["abc", "xy"]);
        assert_eq!((out.as_str(), stopped), ("abcxy", false));
    }

    #[test]
    fn stop_inside_one_piece_and_multibyte_boundaries() {
        let (out, stopped, _) = run(&["é!"], &["café", "!x"]);
        assert_eq!((out.as_str(), stopped), ("caf", true));
        // A stop starting with a multi-byte char never splits one.
        let (out, stopped, _) = run(&["日本"], &["今日", "は"]);
        assert_eq!((out.as_str(), stopped), ("今日は", false));
    }

    #[test]
    fn after_a_stop_nothing_more() {
        let mut m = StopMatcher::new(vec!["x".into()]);
        assert!(m.push("ax").stopped);
        assert_eq!(m.push("more"), StopOutput { text: String::new(), stopped: true });
        assert_eq!(m.finish(), "");
    }
}
