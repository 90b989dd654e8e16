//! The control value passed to every seam call: budget, cancellation, deadline and trace sink.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::{Budget, Error, ErrorKind, Result, TraceEvent};

/// A cancellation flag shared by clones; cancelling one cancels all.
#[derive(Debug, Clone, Default)]
pub struct CancellationToken(Arc<AtomicBool>);

impl CancellationToken {
    /// A token that is not cancelled.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Cancels every clone of this token.
    pub fn cancel(&self) {
        self.0.store(true, Ordering::Release);
    }

    /// Whether [`cancel`](Self::cancel) was called.
    #[must_use]
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

/// Collects trace events from every component a call passes through. Clones share the same buffer.
#[derive(Debug, Clone, Default)]
pub struct TraceSink(Arc<Mutex<Vec<TraceEvent>>>);

impl TraceSink {
    /// An empty sink.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends an event.
    pub fn push(&self, event: TraceEvent) {
        // A poisoned lock only means another thread panicked while pushing; the events are still valid.
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(event);
    }

    /// Takes every event recorded so far, in order.
    #[must_use]
    pub fn take(&self) -> Vec<TraceEvent> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner))
    }

    /// The summed cost of the events recorded so far that `keep` selects, leaving every event in place (what a
    /// request has spent so far, for a budget).
    #[must_use]
    pub fn cost_where(&self, keep: impl Fn(&TraceEvent) -> bool) -> crate::Cost {
        let events = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        events.iter().filter(|e| keep(e)).fold(crate::Cost::ZERO, |sum, e| sum + e.cost)
    }
}

/// Explicit control for one request: what may be spent, until when, whether to stop, and where to trace.
///
/// Nothing in ragtune reads global state for these; every seam call takes a `&Ctx`.
/// Cloning is cheap and clones share cancellation and trace.
#[derive(Debug, Clone, Default)]
pub struct Ctx {
    /// The spending limit for the request.
    pub budget: Budget,
    /// When the request must be done.
    pub deadline: Option<Instant>,
    /// Cancellation shared with the caller.
    pub cancel: CancellationToken,
    /// Where components record what they did; `None` disables tracing.
    pub trace: Option<TraceSink>,
}

impl Ctx {
    /// A context with no limits, no deadline and no tracing.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the budget.
    #[must_use]
    pub fn with_budget(mut self, budget: Budget) -> Self {
        self.budget = budget;
        self
    }

    /// Sets a deadline `timeout` from now.
    #[must_use]
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.deadline = Some(Instant::now() + timeout);
        self
    }

    /// Enables tracing into `sink`.
    #[must_use]
    pub fn with_trace(mut self, sink: TraceSink) -> Self {
        self.trace = Some(sink);
        self
    }

    /// Time left before the deadline, if there is one.
    #[must_use]
    pub fn remaining(&self) -> Option<Duration> {
        self.deadline.map(|d| d.saturating_duration_since(Instant::now()))
    }

    /// Returns an error when the request was cancelled or its deadline passed; call it between units of work.
    ///
    /// # Errors
    /// [`ErrorKind::Cancelled`] or [`ErrorKind::DeadlineExceeded`].
    pub fn check(&self) -> Result<()> {
        if self.cancel.is_cancelled() {
            return Err(Error::new(ErrorKind::Cancelled, "the request was cancelled"));
        }
        if self.deadline.is_some_and(|d| Instant::now() >= d) {
            return Err(Error::new(ErrorKind::DeadlineExceeded, "the request's deadline passed"));
        }
        Ok(())
    }

    /// Records an event when tracing is enabled.
    pub fn trace(&self, event: TraceEvent) {
        if let Some(sink) = &self.trace {
            sink.push(event);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cancellation_and_deadline() {
        let ctx = Ctx::new();
        ctx.check().unwrap();
        let c2 = ctx.clone();
        c2.cancel.cancel();
        assert_eq!(ctx.check().unwrap_err().kind(), ErrorKind::Cancelled);
        let late = Ctx::new().with_timeout(Duration::ZERO);
        assert_eq!(late.check().unwrap_err().kind(), ErrorKind::DeadlineExceeded);
    }

    #[test]
    fn trace_is_shared_by_clones() {
        let sink = TraceSink::new();
        let ctx = Ctx::new().with_trace(sink.clone());
        ctx.clone().trace(TraceEvent::new("retrieve", "bm25"));
        assert_eq!(sink.take().len(), 1);
        assert!(sink.take().is_empty());
    }
}
