//! The answer as it is generated: what a caller's [`TokenSink`] receives, and the run's record of what it was sent.

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde::Serialize;

/// What a [`TokenSink`] receives while the pipeline answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnswerEvent<'a> {
    /// The next piece of the LLM's answer, as it was generated.
    Token(&'a str),
    /// The answer whole, in one piece, when the pipeline ends: an answer the LLM did not stream (extractive), or
    /// the one that replaces what was streamed (after a [`Restart`](Self::Restart)).
    Whole(&'a str),
    /// The text sent since the previous restart (or the start) is not the answer: discard it; the pieces that
    /// follow replace it.
    Restart(RestartReason),
}

/// Why a streamed answer restarts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RestartReason {
    /// Smart retry asks the LLM again: the next attempt's answer follows as it is generated.
    Retry,
    /// The answer is not the text streamed (generation failed mid-way and the answer is extractive, or an earlier
    /// attempt's answer was kept): the answer follows whole, in one piece.
    Replaced,
}

impl RestartReason {
    /// The reason's name on the wire (`retry`, `replaced`).
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Retry => "retry",
            Self::Replaced => "replaced",
        }
    }
}

/// Where a streamed answer goes ([`commands::AskOptions::tokens`](crate::commands::AskOptions),
/// [`Engine::ask_streaming`](crate::Engine::ask_streaming)): a function called with every [`AnswerEvent`], in
/// order, on the task that runs the pipeline. It must return quickly (write to a terminal, send to a channel):
/// generation waits for it.
///
/// The contract a consumer relies on: the pieces ([`AnswerEvent::Token`], [`AnswerEvent::Whole`]) after the last
/// [`AnswerEvent::Restart`] concatenate, trimmed, to the final answer ([`AskResponse::answer`](super::AskResponse)). The LLM's answer
/// streams as it is generated (only the final answer's generation: no CRAG, extraction, judge or rewrite call
/// streams). When what was sent is not the answer, a restart says so and what follows replaces it: smart retry
/// asking the LLM again ([`RestartReason::Retry`]), or an answer that is not the streamed text
/// ([`RestartReason::Replaced`]: generation failed mid-way and the answer is extractive, or the retry loop kept an
/// earlier attempt), which then arrives whole ([`AnswerEvent::Whole`]). An answer the LLM did not generate
/// (extractive) arrives whole too, when the pipeline ends.
#[derive(Clone)]
pub struct TokenSink(Arc<dyn Fn(AnswerEvent<'_>) + Send + Sync>);

impl TokenSink {
    /// A sink calling `f`.
    pub fn new(f: impl Fn(AnswerEvent<'_>) + Send + Sync + 'static) -> Self {
        Self(Arc::new(f))
    }

    fn send(&self, event: AnswerEvent<'_>) {
        (self.0)(event);
    }
}

impl fmt::Debug for TokenSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TokenSink")
    }
}

/// Two sinks are equal when they are the same function (clones of one sink).
impl PartialEq for TokenSink {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for TokenSink {}

/// One question's stream: its sink (if any), and what was sent and when, for the restart rule and the timings.
#[derive(Debug)]
pub(super) struct Streaming {
    sink: Option<TokenSink>,
    /// When the question arrived: time to first token counts from here.
    started: Instant,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// The text sent since the last restart.
    sent: String,
    /// When the first piece of LLM text was sent, from the question's start.
    first_token: Option<Duration>,
    /// Time spent in the LLM calls that generated answers (every attempt).
    generation: Option<Duration>,
}

impl Streaming {
    pub(super) fn new(sink: Option<TokenSink>, started: Instant) -> Self {
        Self { sink, started, state: Mutex::new(State::default()) }
    }

    /// Whether a caller listens (the answer's LLM call then streams).
    pub(super) fn is_on(&self) -> bool {
        self.sink.is_some()
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// An LLM call for an answer starts: text an earlier attempt sent is withdrawn ([`RestartReason::Retry`]).
    pub(super) fn begin_generation(&self) {
        let Some(sink) = &self.sink else { return };
        let restart = {
            let mut state = self.state();
            let any = !state.sent.is_empty();
            state.sent.clear();
            any
        };
        if restart {
            sink.send(AnswerEvent::Restart(RestartReason::Retry));
        }
    }

    /// A piece of the LLM's answer: recorded and sent; the first one stamps the time to first token.
    pub(super) fn token(&self, piece: &str) {
        let Some(sink) = &self.sink else { return };
        {
            let mut state = self.state();
            let now = self.started.elapsed();
            state.first_token.get_or_insert(now);
            state.sent.push_str(piece);
        }
        sink.send(AnswerEvent::Token(piece));
    }

    /// Adds the time of one answer's LLM call.
    pub(super) fn generated(&self, took: Duration) {
        let mut state = self.state();
        state.generation = Some(state.generation.unwrap_or_default() + took);
    }

    /// The time to first token so far, in milliseconds from the question's start.
    pub(super) fn ttft_ms(&self) -> Option<f64> {
        self.state().first_token.map(ms)
    }

    /// The time of the answers' LLM calls so far, in milliseconds.
    pub(super) fn generation_ms(&self) -> Option<f64> {
        self.state().generation.map(ms)
    }

    /// The pipeline's final answer: when it is not what was streamed, a restart ([`RestartReason::Replaced`], only
    /// when something was sent) and the answer whole.
    pub(super) fn finish(&self, answer: Option<&str>) {
        let (Some(sink), Some(answer)) = (&self.sink, answer) else { return };
        let sent = std::mem::take(&mut self.state().sent);
        if sent.trim() == answer.trim() {
            return;
        }
        if !sent.is_empty() {
            sink.send(AnswerEvent::Restart(RestartReason::Replaced));
        }
        if !answer.is_empty() {
            sink.send(AnswerEvent::Whole(answer));
        }
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The events a sink received, as text: `tokens` and `<retry>`, `<replaced>`.
    fn recorder() -> (TokenSink, Arc<Mutex<Vec<String>>>) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&seen);
        let sink = TokenSink::new(move |e| {
            log.lock().unwrap().push(match e {
                AnswerEvent::Token(t) => t.to_owned(),
                AnswerEvent::Whole(t) => format!("={t}"),
                AnswerEvent::Restart(r) => format!("<{}>", r.as_str()),
            });
        });
        (sink, seen)
    }

    fn check(steps: impl FnOnce(&Streaming), answer: Option<&str>, expect: &[&str]) {
        let (sink, seen) = recorder();
        let s = Streaming::new(Some(sink), Instant::now());
        steps(&s);
        s.finish(answer);
        assert_eq!(*seen.lock().unwrap(), expect);
        // The contract: after the last restart, the pieces are the answer.
        let seen = seen.lock().unwrap();
        let last = seen.iter().rposition(|e| e.starts_with('<')).map_or(0, |i| i + 1);
        let pieces: String = seen[last..].iter().map(|e| e.strip_prefix('=').unwrap_or(e)).collect();
        assert_eq!(pieces.trim(), answer.unwrap_or_default().trim());
    }

    #[test]
    fn the_pieces_after_the_last_restart_are_the_answer() {
        let stream = |pieces: &'static [&'static str]| {
            move |s: &Streaming| {
                s.begin_generation();
                pieces.iter().for_each(|p| s.token(p));
            }
        };
        // Streamed whole: nothing more at the end (trailing whitespace aside).
        check(stream(&[" Lind", " [1]. "]), Some("Lind [1]."), &[" Lind", " [1]. "]);
        // A retry streams a second answer after a restart.
        let twice = |s: &Streaming| {
            stream(&["No."])(s);
            stream(&["Yes", " [2]."])(s);
        };
        check(twice, Some("Yes [2]."), &["No.", "<retry>", "Yes", " [2]."]);
        // The loop kept the first attempt, or generation broke and the answer is extractive: replaced whole.
        check(twice, Some("No."), &["No.", "<retry>", "Yes", " [2].", "<replaced>", "=No."]);
        check(stream(&["Sc"]), Some("Scurvy is … [1]"), &["Sc", "<replaced>", "=Scurvy is … [1]"]);
        // Nothing streamed (no LLM): the answer whole, no restart; no answer (query): nothing.
        check(|_| {}, Some("Extracted [1]."), &["=Extracted [1]."]);
        check(|_| {}, None, &[]);
    }

    #[test]
    fn the_first_token_and_generation_times_are_recorded_only_when_they_happen() {
        let quiet = Streaming::new(None, Instant::now());
        quiet.token("ignored");
        quiet.generated(Duration::from_millis(5));
        assert_eq!((quiet.ttft_ms(), quiet.generation_ms()), (None, Some(5.0)), "no sink: nothing streamed");
        let (sink, _) = recorder();
        let s = Streaming::new(Some(sink), Instant::now());
        assert_eq!(s.ttft_ms(), None);
        s.token("a");
        let first = s.ttft_ms().unwrap();
        s.token("b");
        assert_eq!(s.ttft_ms(), Some(first), "the first piece stamps it");
        assert!(s.is_on() && !quiet.is_on());
        assert_ne!(TokenSink::new(|_| {}), TokenSink::new(|_| {}), "two functions");
        let (a, _) = recorder();
        assert_eq!(a.clone(), a);
    }
}
