//! Drives one HTTP request's engine streams (one per prompt, each with `n` choices) through the per-choice text
//! pipeline, yielding `Event`s in arrival order. Dropping a `Generation` drops its `RequestStream`s, which
//! cancels the work in the engine (a client that hangs up costs nothing more).

use crate::error::ApiError;
use crate::output::metrics::{self, Finished};
use crate::output::text::ChoiceText;
use hearth_engine::engine::{EngineEvent, FinishReason, RequestStream};
use hearth_engine::sampling::TopLogprob;
use hearth_engine::tokenizer::Tokenizer;
use std::collections::VecDeque;
use std::task::Poll;
use std::time::Instant;

/// One submitted prompt.
pub struct Job {
    pub stream: RequestStream,
    pub prompt_tokens: usize,
    pub n: usize,
}

/// How text is produced for every choice.
#[derive(Debug, Clone, Default)]
pub struct TextOptions {
    pub stops: Vec<String>,
    /// Drop the first leading space of the answer (chat).
    pub trim_leading_space: bool,
    pub skip_special: bool,
}

/// The log-probability of one generated token.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenLogprob {
    pub id: u32,
    pub logprob: f32,
    pub top: Vec<TopLogprob>,
    /// Characters of this choice's text released before this token.
    pub text_offset: usize,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// One token of `choice`: the text it released (may be empty: held back) and its logprob when asked for.
    Token { choice: usize, text: String, logprob: Option<TokenLogprob> },
    /// `choice` ended; `text` is what was still held. `reason` is `stop` or `length`; `stop_sequence` is the stop
    /// string that ended it, if one did.
    Finish { choice: usize, text: String, reason: &'static str, stop_sequence: Option<String> },
    /// The prompt's log-probabilities (asked for with `SamplingParams::prompt_logprobs`), for the choices
    /// `choices` of its prompt: one per prompt token after the first, with the top alternatives. Before their
    /// first token.
    Prompt { choices: std::ops::Range<usize>, scores: PromptScores },
    /// The engine failed; nothing more follows.
    Error(ApiError),
}

/// A prompt's scores: each prompt token's log-probability after the first, and its top alternatives.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PromptScores {
    pub logprobs: Vec<f32>,
    pub top: Vec<Vec<TopLogprob>>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UsageTotals {
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    pub cached_tokens: usize,
    /// Speculation: drafted tokens kept, and not kept.
    pub accepted_prediction_tokens: usize,
    pub rejected_prediction_tokens: usize,
}

struct JobState<'a> {
    stream: Option<RequestStream>,
    first_choice: usize,
    prompt_tokens: usize,
    cached_tokens: usize,
    /// Speculation's counts over the job's finished choices.
    accepted: usize,
    rejected: usize,
    choices: Vec<ChoiceText<'a>>,
    /// When each choice's last token came (inter-token latency).
    last_token: Vec<Option<Instant>>,
}

pub struct Generation<'a> {
    jobs: Vec<JobState<'a>>,
    pending: VecDeque<Event>,
    next_poll: usize,
    failed: bool,
    /// When the request was accepted, and whether its first token came (`/metrics`).
    started: Instant,
    first_token: bool,
}

impl<'a> Generation<'a> {
    pub fn new(tok: &'a Tokenizer, jobs: Vec<Job>, opts: &TextOptions) -> Self {
        let mut first = 0;
        let jobs = jobs
            .into_iter()
            .map(|j| {
                let choices = (0..j.n)
                    .map(|_| ChoiceText::new(tok, opts.stops.clone(), opts.trim_leading_space, opts.skip_special))
                    .collect();
                let s = JobState {
                    stream: Some(j.stream),
                    first_choice: first,
                    prompt_tokens: j.prompt_tokens,
                    cached_tokens: 0,
                    accepted: 0,
                    rejected: 0,
                    choices,
                    last_token: vec![None; j.n],
                };
                first += j.n;
                s
            })
            .collect();
        Self {
            jobs,
            pending: VecDeque::new(),
            next_poll: 0,
            failed: false,
            started: Instant::now(),
            first_token: false,
        }
    }

    pub fn choices(&self) -> usize {
        self.jobs.iter().map(|j| j.choices.len()).sum()
    }

    pub fn usage(&self) -> UsageTotals {
        let mut u = UsageTotals::default();
        for j in &self.jobs {
            u.prompt_tokens += j.prompt_tokens;
            u.cached_tokens += j.cached_tokens;
            u.accepted_prediction_tokens += j.accepted;
            u.rejected_prediction_tokens += j.rejected;
            u.completion_tokens += j.choices.iter().map(|c| c.tokens).sum::<usize>();
        }
        u
    }

    /// The next event, or `None` when every choice has finished. Cancel-safe: an event is taken from an engine
    /// channel and fully processed within one poll.
    pub async fn next(&mut self) -> Option<Event> {
        loop {
            if let Some(ev) = self.pending.pop_front() {
                return Some(ev);
            }
            if self.failed || self.jobs.iter().all(|j| j.stream.is_none()) {
                return None;
            }
            // The shutdown's grace period being over ends the request like an engine error.
            let got = tokio::select! {
                biased;
                got = self.recv() => Some(got),
                _ = crate::shutdown::generation_ended() => None,
            };
            match got {
                Some((job, ev)) => self.handle(job, ev),
                None => {
                    self.failed = true;
                    return Some(Event::Error(ApiError::shutting_down()));
                }
            }
        }
    }

    /// Wait for an event from any live job (round-robin start for fairness).
    async fn recv(&mut self) -> (usize, Option<EngineEvent>) {
        std::future::poll_fn(|cx| {
            let n = self.jobs.len();
            for k in 0..n {
                let i = (self.next_poll + k) % n;
                if let Some(s) = self.jobs[i].stream.as_mut() {
                    if let Poll::Ready(ev) = s.rx.poll_recv(cx) {
                        self.next_poll = (i + 1) % n;
                        return Poll::Ready((i, ev));
                    }
                }
            }
            Poll::Pending
        })
        .await
    }

    fn handle(&mut self, j: usize, ev: Option<EngineEvent>) {
        let m = metrics::global();
        let job = &mut self.jobs[j];
        match ev {
            Some(EngineEvent::Token { choice, id, logprob, top }) => {
                let Some(c) = job.choices.get_mut(choice).filter(|c| !c.done) else { return };
                let now = Instant::now();
                if !self.first_token {
                    self.first_token = true;
                    m.ttft.observe(now - self.started);
                }
                if let Some(last) = job.last_token.get_mut(choice) {
                    if let Some(prev) = last.replace(now) {
                        m.itl.observe(now - prev);
                    }
                }
                let text_offset = c.released_chars;
                let out = c.push(id);
                let logprob = logprob.map(|lp| TokenLogprob { id, logprob: lp, top, text_offset });
                if out.stopped {
                    // Free this choice in the engine now; the others go on.
                    if let Some(s) = job.stream.as_ref() {
                        s.cancel_choice(choice);
                    }
                }
                let stop_sequence = c.matched_stop().map(str::to_string);
                let choice = job.first_choice + choice;
                self.pending.push_back(Event::Token { choice, text: out.text, logprob });
                if out.stopped {
                    m.finished(Finished::Stop);
                    let text = String::new();
                    self.pending.push_back(Event::Finish { choice, text, reason: "stop", stop_sequence });
                }
            }
            Some(EngineEvent::Finished { choice, reason, usage }) => {
                job.cached_tokens = job.cached_tokens.max(usage.cached_tokens);
                job.accepted += usage.accepted_prediction_tokens;
                job.rejected += usage.rejected_prediction_tokens;
                let Some(c) = job.choices.get_mut(choice).filter(|c| !c.done) else { return };
                let out = c.finish();
                let reason = match reason {
                    FinishReason::Length if !out.stopped => "length",
                    _ => "stop",
                };
                m.finished(if reason == "length" { Finished::Length } else { Finished::Stop });
                let stop_sequence = c.matched_stop().map(str::to_string);
                let choice = job.first_choice + choice;
                self.pending.push_back(Event::Finish { choice, text: out.text, reason, stop_sequence });
            }
            Some(EngineEvent::PromptLogprobs { logprobs, top }) => {
                let choices = job.first_choice..job.first_choice + job.choices.len();
                self.pending.push_back(Event::Prompt { choices, scores: PromptScores { logprobs, top } });
            }
            Some(EngineEvent::Error { kind, message }) => {
                self.failed = true;
                self.pending.push_back(Event::Error(ApiError::engine(kind, message)));
            }
            None => {
                // The engine dropped the channel without finishing every choice.
                if job.choices.iter().any(|c| !c.done) {
                    self.failed = true;
                    let e = ApiError::internal("the engine stopped before the request finished");
                    self.pending.push_back(Event::Error(e));
                }
                job.stream = None;
            }
        }
        // A job whose choices are all done is released now: this cancels it in the engine if it still runs
        // (a stop string matched before the engine knew).
        let job = &mut self.jobs[j];
        if job.choices.iter().all(|c| c.done) {
            job.stream = None;
        }
    }
}

/// The request ends (all its choices finished, it failed, or its client left): its latency, its tokens, and how
/// its unfinished choices ended.
impl Drop for Generation<'_> {
    fn drop(&mut self) {
        let m = metrics::global();
        m.e2e.observe(self.started.elapsed());
        let how = if self.failed { Finished::Error } else { Finished::Abort };
        for j in &self.jobs {
            let generated = j.choices.iter().map(|c| c.tokens).sum();
            m.tokens(j.prompt_tokens, j.cached_tokens, generated);
            for _ in j.choices.iter().filter(|c| !c.done) {
                m.finished(how);
            }
        }
    }
}

/// A choice's whole output, for non-streaming responses.
#[derive(Debug, Clone, Default)]
pub struct ChoiceResult {
    pub text: String,
    pub logprobs: Vec<TokenLogprob>,
    pub finish_reason: &'static str,
    /// The stop string that ended it, if one did.
    pub stop_sequence: Option<String>,
    /// Its prompt's scores, when asked for.
    pub prompt: Option<PromptScores>,
}

/// Run to the end and collect every choice (non-streaming). `Err` carries the engine's message.
pub async fn collect(mut g: Generation<'_>) -> Result<(Vec<ChoiceResult>, UsageTotals), ApiError> {
    let mut out = vec![ChoiceResult { finish_reason: "stop", ..Default::default() }; g.choices()];
    while let Some(ev) = g.next().await {
        match ev {
            Event::Token { choice, text, logprob } => {
                if let Some(c) = out.get_mut(choice) {
                    c.text.push_str(&text);
                    c.logprobs.extend(logprob);
                }
            }
            Event::Finish { choice, text, reason, stop_sequence } => {
                if let Some(c) = out.get_mut(choice) {
                    c.text.push_str(&text);
                    c.finish_reason = reason;
                    c.stop_sequence = stop_sequence;
                }
            }
            Event::Prompt { choices, scores } => {
                for c in out.iter_mut().take(choices.end).skip(choices.start) {
                    c.prompt = Some(scores.clone());
                }
            }
            Event::Error(e) => return Err(e),
        }
    }
    Ok((out, g.usage()))
}
