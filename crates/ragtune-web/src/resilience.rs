//! Resilience per provider, as decorators over any [`WebSearch`]: [`RateLimited`] (a GCRA rate limit from
//! `governor`), [`Retrying`] (exponential backoff with jitter that honours `Retry-After`) and [`CircuitBreaker`]
//! (closed → open after consecutive failures → half-open after a pause with a limited probe → closed on success).
//!
//! [`Resilience::wrap`] stacks them in the one sensible order: the breaker outside (an open circuit costs nothing),
//! retries inside it (one breaker failure is a call that failed after its retries), the rate limit innermost (every
//! attempt, retries included, is paced). Each decorator handles a batch one query at a time, so that every HTTP
//! request is paced, retried and counted on its own.
//!
//! Every state change and every wait is traced (stage `web`) and counted in [`ResilienceStats`]; no wait goes past
//! the [`Ctx`] deadline: a wait that would is refused with [`ErrorKind::DeadlineExceeded`] instead.

use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use governor::clock::Clock;
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use ragtune_core::http::{GiveUp, RetryDecision, RetryPolicy};
use ragtune_core::{CostModel, Ctx, Error, ErrorKind, Result, TraceEvent, WebQuery, WebResult, WebSearch};
use serde::{Deserialize, Serialize};

use crate::providers::per_query;

/// Counters shared by a provider's decorators: what the breaker, the retries and the rate limit did.
#[derive(Debug, Default)]
pub struct ResilienceStats {
    calls: AtomicU64,
    failures: AtomicU64,
    opened: AtomicU64,
    half_opened: AtomicU64,
    closed: AtomicU64,
    rejected: AtomicU64,
    retries: AtomicU64,
    rate_limited: AtomicU64,
    deadline_refusals: AtomicU64,
}

/// A copy of [`ResilienceStats`] at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct StatsSnapshot {
    /// Queries that reached the breaker.
    pub calls: u64,
    /// Queries that failed after their retries (counted by the breaker).
    pub failures: u64,
    /// Transitions to open (trips).
    pub opened: u64,
    /// Transitions to half-open.
    pub half_opened: u64,
    /// Transitions from half-open back to closed (recoveries).
    pub closed: u64,
    /// Queries refused because the circuit was open or its probe slots were taken.
    pub rejected: u64,
    /// Retries made.
    pub retries: u64,
    /// Requests that waited for the rate limit.
    pub rate_limited: u64,
    /// Waits refused because they would have passed the deadline.
    pub deadline_refusals: u64,
}

impl ResilienceStats {
    /// The counters now.
    #[must_use]
    pub fn snapshot(&self) -> StatsSnapshot {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        StatsSnapshot {
            calls: get(&self.calls),
            failures: get(&self.failures),
            opened: get(&self.opened),
            half_opened: get(&self.half_opened),
            closed: get(&self.closed),
            rejected: get(&self.rejected),
            retries: get(&self.retries),
            rate_limited: get(&self.rate_limited),
            deadline_refusals: get(&self.deadline_refusals),
        }
    }
}

fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

/// Waits `wait` unless that would pass the context's deadline.
async fn wait_within(ctx: &Ctx, provider: &str, what: &str, wait: Duration, stats: &ResilienceStats) -> Result<()> {
    if ctx.remaining().is_some_and(|left| wait >= left) {
        return Err(refuse(ctx, provider, what, wait, stats));
    }
    tokio::time::sleep(wait).await;
    ctx.check()
}

/// Counts and traces a wait refused because it would pass the deadline, and says so.
fn refuse(ctx: &Ctx, provider: &str, what: &str, wait: Duration, stats: &ResilienceStats) -> Error {
    bump(&stats.deadline_refusals);
    ctx.trace(
        TraceEvent::new("web", "deadline_refused")
            .detail("provider", provider)
            .detail("wait", what)
            .detail("wait_ms", millis(wait)),
    );
    Error::new(
        ErrorKind::DeadlineExceeded,
        format!("{provider}: waiting {:.1} s for the {what} would pass the deadline", wait.as_secs_f64()),
    )
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// One query through `inner`, as one list.
async fn single<P: WebSearch + ?Sized>(inner: &P, ctx: &Ctx, query: &WebQuery) -> Result<Vec<WebResult>> {
    let mut lists = inner.search(ctx, std::slice::from_ref(query)).await?;
    Ok(lists.pop().unwrap_or_default())
}

// ---------------------------------------------------------------------------------------------------------------
// Rate limit

/// A request rate: at most `per_second` requests per second, `burst` of them back to back.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateLimit {
    /// Requests per second (may be below 1: 0.5 is one request every two seconds).
    pub per_second: f64,
    /// Requests allowed back to back; 1 (the default) spaces every request evenly, so no one-second window ever
    /// holds more than `per_second` requests.
    #[serde(default = "one")]
    pub burst: u32,
}

fn one() -> u32 {
    1
}

impl RateLimit {
    /// `per_second` requests per second, evenly spaced.
    #[must_use]
    pub fn per_second(per_second: f64) -> Self {
        Self { per_second, burst: 1 }
    }
}

/// Paces a provider's requests to a [`RateLimit`].
#[derive(Debug)]
pub struct RateLimited<P> {
    inner: P,
    limiter: DefaultDirectRateLimiter,
    stats: Arc<ResilienceStats>,
}

impl<P: WebSearch> RateLimited<P> {
    /// Wraps `inner`.
    ///
    /// # Errors
    /// A rate that is not a positive finite number, or a burst of 0.
    pub fn new(inner: P, limit: RateLimit) -> Result<Self> {
        Self::with_stats(inner, limit, Arc::default())
    }

    /// Wraps `inner`, counting into `stats`.
    ///
    /// # Errors
    /// A rate that is not a positive finite number, or a burst of 0.
    pub fn with_stats(inner: P, limit: RateLimit, stats: Arc<ResilienceStats>) -> Result<Self> {
        let invalid = || Error::invalid_input(format!("invalid rate limit for {}: {limit:?}", inner.name()));
        if !(limit.per_second.is_finite() && limit.per_second > 0.0) {
            return Err(invalid());
        }
        let burst = NonZeroU32::new(limit.burst).ok_or_else(invalid)?;
        let quota =
            Quota::with_period(Duration::from_secs_f64(1.0 / limit.per_second)).ok_or_else(invalid)?.allow_burst(burst);
        Ok(Self { inner, limiter: RateLimiter::direct(quota), stats })
    }

    /// The counters.
    #[must_use]
    pub fn stats(&self) -> StatsSnapshot {
        self.stats.snapshot()
    }

    async fn one(&self, ctx: &Ctx, query: &WebQuery) -> Result<Vec<WebResult>> {
        self.permit(ctx).await?;
        single(&self.inner, ctx, query).await
    }

    async fn permit(&self, ctx: &Ctx) -> Result<()> {
        loop {
            match self.limiter.check() {
                Ok(()) => return Ok(()),
                Err(not_until) => {
                    let wait = not_until.wait_time_from(self.limiter.clock().now());
                    bump(&self.stats.rate_limited);
                    ctx.trace(
                        TraceEvent::new("web", "rate_limited")
                            .detail("provider", self.inner.name())
                            .detail("wait_ms", millis(wait)),
                    );
                    wait_within(ctx, self.inner.name(), "rate limit", wait, &self.stats).await?;
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Retries

/// Retries a provider's transient failures with [`RetryPolicy`].
#[derive(Debug)]
pub struct Retrying<P> {
    inner: P,
    backoff: RetryPolicy,
    rng: Mutex<fastrand::Rng>,
    stats: Arc<ResilienceStats>,
}

impl<P: WebSearch> Retrying<P> {
    /// Wraps `inner`.
    pub fn new(inner: P, backoff: RetryPolicy) -> Self {
        Self::with_stats(inner, backoff, Arc::default())
    }

    /// Wraps `inner`, counting into `stats`.
    pub fn with_stats(inner: P, backoff: RetryPolicy, stats: Arc<ResilienceStats>) -> Self {
        Self { inner, rng: Mutex::new(fastrand::Rng::with_seed(backoff.seed)), backoff, stats }
    }

    /// The counters.
    #[must_use]
    pub fn stats(&self) -> StatsSnapshot {
        self.stats.snapshot()
    }

    async fn one(&self, ctx: &Ctx, query: &WebQuery) -> Result<Vec<WebResult>> {
        let mut attempt = 0;
        loop {
            let error = match single(&self.inner, ctx, query).await {
                Ok(results) => return Ok(results),
                Err(e) => e,
            };
            let u = self.rng.lock().unwrap_or_else(std::sync::PoisonError::into_inner).f64();
            let (wait, source) = match self.backoff.decide(ctx, attempt, &error, u) {
                RetryDecision::Wait { wait, from } => (wait, from.as_str()),
                RetryDecision::GiveUp(GiveUp::Deadline { wait }) => {
                    // The caller gets the provider's failure, which says more than the refusal.
                    refuse(ctx, self.inner.name(), "retry", wait, &self.stats);
                    return Err(error);
                }
                RetryDecision::GiveUp(GiveUp::NotRetryable | GiveUp::Exhausted) => return Err(error),
            };
            bump(&self.stats.retries);
            ctx.trace(
                TraceEvent::new("web", "retry")
                    .detail("provider", self.inner.name())
                    .detail("attempt", attempt + 1)
                    .detail("wait_ms", millis(wait))
                    .detail("wait_from", source)
                    .detail("error", error.message()),
            );
            tokio::time::sleep(wait).await;
            ctx.check()?;
            attempt += 1;
        }
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Circuit breaker

/// When a circuit opens and how it recovers.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BreakerConfig {
    /// Consecutive failures that open the circuit (the protocol's 5).
    pub failure_threshold: u32,
    /// How long the circuit stays open before a probe is let through (the protocol's 30 s).
    #[serde(with = "ragtune_core::http::secs")]
    pub recovery_timeout: Duration,
    /// Queries let through at once while half-open.
    pub half_open_probes: u32,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        Self { failure_threshold: 5, recovery_timeout: Duration::from_secs(30), half_open_probes: 1 }
    }
}

/// The state of a circuit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BreakerState {
    /// Queries pass; failures are counted.
    Closed,
    /// Queries are refused until the recovery timeout has passed.
    Open,
    /// A limited number of probe queries pass; one success closes the circuit, one failure opens it again.
    HalfOpen,
}

impl BreakerState {
    fn as_str(self) -> &'static str {
        match self {
            Self::Closed => "closed",
            Self::Open => "open",
            Self::HalfOpen => "half_open",
        }
    }
}

#[derive(Debug)]
enum Inner {
    Closed { failures: u32 },
    Open { since: tokio::time::Instant },
    HalfOpen { in_flight: u32 },
}

/// Stops calling a provider that keeps failing, and lets a probe through after a pause.
///
/// Failures that say nothing about the provider's health (invalid input, cancellation, the caller's deadline,
/// not found) are not counted. Time is tokio's clock, so tests drive it with a paused clock.
#[derive(Debug)]
pub struct CircuitBreaker<P> {
    inner: P,
    config: BreakerConfig,
    state: Mutex<Inner>,
    stats: Arc<ResilienceStats>,
}

/// Releases a half-open probe slot if the probe's future is dropped before it reports.
struct ProbeSlot<'a, P> {
    breaker: &'a CircuitBreaker<P>,
    armed: bool,
}

impl<P> Drop for ProbeSlot<'_, P> {
    fn drop(&mut self) {
        if self.armed {
            let mut state = self.breaker.lock();
            if let Inner::HalfOpen { in_flight } = &mut *state {
                *in_flight = in_flight.saturating_sub(1);
            }
        }
    }
}

impl<P> CircuitBreaker<P> {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // The state is a few integers updated atomically under the lock; a panic elsewhere cannot leave it torn.
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl<P: WebSearch> CircuitBreaker<P> {
    /// Wraps `inner`, closed.
    pub fn new(inner: P, config: BreakerConfig) -> Self {
        Self::with_stats(inner, config, Arc::default())
    }

    /// Wraps `inner`, closed, counting into `stats`.
    pub fn with_stats(inner: P, config: BreakerConfig, stats: Arc<ResilienceStats>) -> Self {
        Self { inner, config, state: Mutex::new(Inner::Closed { failures: 0 }), stats }
    }

    /// The state now (an open circuit whose timeout has passed still reads open until a query arrives).
    #[must_use]
    pub fn state(&self) -> BreakerState {
        match &*self.lock() {
            Inner::Closed { .. } => BreakerState::Closed,
            Inner::Open { .. } => BreakerState::Open,
            Inner::HalfOpen { .. } => BreakerState::HalfOpen,
        }
    }

    /// The counters.
    #[must_use]
    pub fn stats(&self) -> StatsSnapshot {
        self.stats.snapshot()
    }

    fn transition(&self, ctx: &Ctx, from: BreakerState, to: BreakerState, reason: &str) {
        let counter = match to {
            BreakerState::Open => &self.stats.opened,
            BreakerState::HalfOpen => &self.stats.half_opened,
            BreakerState::Closed => &self.stats.closed,
        };
        bump(counter);
        ctx.trace(
            TraceEvent::new("web", "breaker")
                .detail("provider", self.inner.name())
                .detail("from", from.as_str())
                .detail("to", to.as_str())
                .detail("reason", reason),
        );
    }

    /// Whether a query may pass now, and whether it is a half-open probe.
    fn admit(&self, ctx: &Ctx) -> Result<bool> {
        let mut state = self.lock();
        let now = tokio::time::Instant::now();
        match &mut *state {
            Inner::Closed { .. } => Ok(false),
            Inner::Open { since } => {
                let elapsed = now.saturating_duration_since(*since);
                if elapsed >= self.config.recovery_timeout {
                    *state = Inner::HalfOpen { in_flight: 1 };
                    drop(state);
                    self.transition(ctx, BreakerState::Open, BreakerState::HalfOpen, "recovery timeout passed");
                    Ok(true)
                } else {
                    let left = self.config.recovery_timeout - elapsed;
                    drop(state);
                    Err(self.reject(ctx, format!("the circuit is open for {:.1} s more", left.as_secs_f64())))
                }
            }
            Inner::HalfOpen { in_flight } => {
                if *in_flight < self.config.half_open_probes.max(1) {
                    *in_flight += 1;
                    Ok(true)
                } else {
                    drop(state);
                    Err(self.reject(ctx, "the circuit is half-open and its probe is under way".to_owned()))
                }
            }
        }
    }

    fn reject(&self, ctx: &Ctx, why: String) -> Error {
        bump(&self.stats.rejected);
        ctx.trace(
            TraceEvent::new("web", "breaker_rejected")
                .detail("provider", self.inner.name())
                .detail("reason", why.as_str()),
        );
        Error::unavailable(format!("{} is not called: {why}", self.inner.name()))
    }

    fn record(&self, ctx: &Ctx, outcome: std::result::Result<(), &Error>, probe: bool) {
        let counts = |e: &Error| {
            !matches!(
                e.kind(),
                ErrorKind::InvalidInput | ErrorKind::Cancelled | ErrorKind::DeadlineExceeded | ErrorKind::NotFound
            )
        };
        let mut state = self.lock();
        let change = match (&mut *state, outcome) {
            (Inner::HalfOpen { .. }, Ok(())) if probe => {
                *state = Inner::Closed { failures: 0 };
                Some((BreakerState::HalfOpen, BreakerState::Closed, "the probe succeeded".to_owned()))
            }
            (Inner::Closed { failures }, Ok(())) => {
                *failures = 0;
                None
            }
            (Inner::HalfOpen { .. }, Err(e)) if probe && counts(e) => {
                *state = Inner::Open { since: tokio::time::Instant::now() };
                Some((BreakerState::HalfOpen, BreakerState::Open, format!("the probe failed: {}", e.message())))
            }
            (Inner::HalfOpen { in_flight }, _) if probe => {
                // A probe that ended without a verdict on the provider frees its slot.
                *in_flight = in_flight.saturating_sub(1);
                None
            }
            (Inner::Closed { failures }, Err(e)) if counts(e) => {
                *failures += 1;
                if *failures >= self.config.failure_threshold.max(1) {
                    let n = *failures;
                    *state = Inner::Open { since: tokio::time::Instant::now() };
                    Some((
                        BreakerState::Closed,
                        BreakerState::Open,
                        format!("{n} consecutive failures, the last: {}", e.message()),
                    ))
                } else {
                    None
                }
            }
            _ => None,
        };
        drop(state);
        if let Err(e) = outcome
            && counts(e)
        {
            bump(&self.stats.failures);
        }
        if let Some((from, to, reason)) = change {
            self.transition(ctx, from, to, &reason);
        }
    }

    async fn one(&self, ctx: &Ctx, query: &WebQuery) -> Result<Vec<WebResult>> {
        bump(&self.stats.calls);
        let probe = self.admit(ctx)?;
        let mut slot = ProbeSlot { breaker: self, armed: probe };
        let result = single(&self.inner, ctx, query).await;
        slot.armed = false;
        self.record(ctx, result.as_ref().map(|_| ()), probe);
        result
    }
}

/// The seam for each decorator: the inner provider's name and price, and a batch answered one query at a time
/// through the decorator's `one`, so that every request is paced, retried and counted on its own.
macro_rules! decorated {
    ($($decorator:ident),*) => {$(
        #[async_trait]
        impl<P: WebSearch> WebSearch for $decorator<P> {
            fn name(&self) -> &str {
                self.inner.name()
            }
            fn cost_model(&self) -> CostModel {
                self.inner.cost_model()
            }
            async fn search(&self, ctx: &Ctx, queries: &[WebQuery]) -> Result<Vec<Vec<WebResult>>> {
                per_query(queries, |q| self.one(ctx, q)).await
            }
        }
    )*};
}

decorated!(RateLimited, Retrying, CircuitBreaker);

// ---------------------------------------------------------------------------------------------------------------
// The stack

/// A provider with its breaker, retries and rate limit, in that order from the outside.
pub type Resilient<P> = CircuitBreaker<Retrying<MaybeRateLimited<P>>>;

/// A provider with or without a rate limit (free, self-hosted providers need none).
#[derive(Debug)]
pub enum MaybeRateLimited<P> {
    /// Paced.
    Limited(RateLimited<P>),
    /// Not paced.
    Unlimited(P),
}

#[async_trait]
impl<P: WebSearch> WebSearch for MaybeRateLimited<P> {
    fn name(&self) -> &str {
        match self {
            Self::Limited(p) => p.name(),
            Self::Unlimited(p) => p.name(),
        }
    }
    fn cost_model(&self) -> CostModel {
        match self {
            Self::Limited(p) => p.cost_model(),
            Self::Unlimited(p) => p.cost_model(),
        }
    }
    async fn search(&self, ctx: &Ctx, queries: &[WebQuery]) -> Result<Vec<Vec<WebResult>>> {
        match self {
            Self::Limited(p) => p.search(ctx, queries).await,
            Self::Unlimited(p) => p.search(ctx, queries).await,
        }
    }
}

/// The resilience settings of one provider.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Resilience {
    /// The rate limit; none by default except for the providers the protocol limits (see [`Self::for_provider`]).
    pub rate_limit: Option<RateLimit>,
    /// Retries.
    pub backoff: RetryPolicy,
    /// The circuit breaker.
    pub breaker: BreakerConfig,
}

impl Resilience {
    /// The web search protocol's settings for a provider by name: Semantic Scholar 1 request per second (its public
    /// pool), arXiv 3 per second, the others unlimited; everyone the default backoff and breaker.
    #[must_use]
    pub fn for_provider(name: &str) -> Self {
        let rate_limit = crate::providers::provider(name).and_then(|p| p.per_second).map(RateLimit::per_second);
        Self { rate_limit, ..Self::default() }
    }

    /// Stacks the decorators around `provider`, sharing one set of counters (returned too).
    ///
    /// # Errors
    /// An invalid rate limit.
    pub fn wrap<P: WebSearch>(&self, provider: P) -> Result<(Resilient<P>, Arc<ResilienceStats>)> {
        let stats = Arc::new(ResilienceStats::default());
        let paced = match self.rate_limit {
            Some(limit) => MaybeRateLimited::Limited(RateLimited::with_stats(provider, limit, Arc::clone(&stats))?),
            None => MaybeRateLimited::Unlimited(provider),
        };
        let retrying = Retrying::with_stats(paced, self.backoff, Arc::clone(&stats));
        Ok((CircuitBreaker::with_stats(retrying, self.breaker, Arc::clone(&stats)), stats))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use ragtune_core::{TraceSink, WebResult};

    use super::*;

    /// A provider that fails while `failing` is set, with the error kind given, and counts its calls.
    #[derive(Debug)]
    struct Flaky {
        failing: std::sync::atomic::AtomicBool,
        kind: ErrorKind,
        calls: AtomicUsize,
    }

    impl Flaky {
        fn new(failing: bool, kind: ErrorKind) -> Self {
            Self { failing: failing.into(), kind, calls: AtomicUsize::new(0) }
        }
        fn set_failing(&self, failing: bool) {
            self.failing.store(failing, Ordering::SeqCst);
        }
    }

    #[async_trait]
    impl WebSearch for Flaky {
        fn name(&self) -> &str {
            "flaky"
        }
        fn cost_model(&self) -> CostModel {
            CostModel::FREE
        }
        async fn search(&self, _: &Ctx, queries: &[WebQuery]) -> Result<Vec<Vec<WebResult>>> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            if self.failing.load(Ordering::SeqCst) {
                return Err(Error::new(self.kind, "down"));
            }
            Ok(queries
                .iter()
                .map(|q| vec![WebResult { url: format!("https://x.org/{}", q.text), ..WebResult::default() }])
                .collect())
        }
    }

    fn q() -> Vec<WebQuery> {
        vec![WebQuery { text: "q".into(), max_results: 3 }]
    }

    fn transitions(sink: &TraceSink) -> Vec<String> {
        sink.take()
            .into_iter()
            .filter(|e| e.action == "breaker")
            .map(|e| format!("{}->{}", e.detail["from"].as_str().unwrap(), e.detail["to"].as_str().unwrap()))
            .collect()
    }

    #[tokio::test(start_paused = true)]
    async fn the_breaker_opens_after_five_failures_probes_after_thirty_seconds_and_closes() {
        let sink = TraceSink::new();
        let ctx = Ctx::new().with_trace(sink.clone());
        let breaker = CircuitBreaker::new(Flaky::new(true, ErrorKind::Transient), BreakerConfig::default());
        for _ in 0..4 {
            breaker.search(&ctx, &q()).await.unwrap_err();
            assert_eq!(breaker.state(), BreakerState::Closed);
        }
        breaker.search(&ctx, &q()).await.unwrap_err();
        assert_eq!(breaker.state(), BreakerState::Open);
        assert_eq!(breaker.inner.calls.load(Ordering::SeqCst), 5);

        // Open: refused without a call, as unavailable.
        let err = breaker.search(&ctx, &q()).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unavailable);
        assert_eq!(breaker.inner.calls.load(Ordering::SeqCst), 5);
        tokio::time::advance(Duration::from_secs(29)).await;
        breaker.search(&ctx, &q()).await.unwrap_err();
        assert_eq!(breaker.inner.calls.load(Ordering::SeqCst), 5);

        // Half-open after 30 s: the probe fails, the circuit opens again for another 30 s.
        tokio::time::advance(Duration::from_secs(1)).await;
        breaker.search(&ctx, &q()).await.unwrap_err();
        assert_eq!(breaker.state(), BreakerState::Open);
        assert_eq!(breaker.inner.calls.load(Ordering::SeqCst), 6);
        tokio::time::advance(Duration::from_secs(15)).await;
        breaker.search(&ctx, &q()).await.unwrap_err();
        assert_eq!(breaker.inner.calls.load(Ordering::SeqCst), 6);

        // The provider recovers; the next probe closes the circuit and queries flow again.
        breaker.inner.set_failing(false);
        tokio::time::advance(Duration::from_secs(15)).await;
        assert_eq!(breaker.search(&ctx, &q()).await.unwrap()[0].len(), 1);
        assert_eq!(breaker.state(), BreakerState::Closed);
        breaker.search(&ctx, &q()).await.unwrap();

        assert_eq!(
            transitions(&sink),
            ["closed->open", "open->half_open", "half_open->open", "open->half_open", "half_open->closed"]
        );
        let s = breaker.stats();
        assert_eq!((s.opened, s.half_opened, s.closed, s.rejected, s.failures, s.calls), (2, 2, 1, 3, 6, 11));
    }

    #[tokio::test(start_paused = true)]
    async fn a_success_resets_the_count_and_caller_errors_do_not_count() {
        let ctx = Ctx::new();
        let breaker = CircuitBreaker::new(Flaky::new(true, ErrorKind::Transient), BreakerConfig::default());
        for _ in 0..4 {
            breaker.search(&ctx, &q()).await.unwrap_err();
        }
        breaker.inner.set_failing(false);
        breaker.search(&ctx, &q()).await.unwrap();
        breaker.inner.set_failing(true);
        for _ in 0..4 {
            breaker.search(&ctx, &q()).await.unwrap_err();
        }
        assert_eq!(breaker.state(), BreakerState::Closed);

        let invalid = CircuitBreaker::new(Flaky::new(true, ErrorKind::InvalidInput), BreakerConfig::default());
        for _ in 0..10 {
            invalid.search(&ctx, &q()).await.unwrap_err();
        }
        assert_eq!(invalid.state(), BreakerState::Closed);
    }

    #[tokio::test(start_paused = true)]
    async fn half_open_lets_one_probe_through_at_a_time() {
        let ctx = Ctx::new();
        let config = BreakerConfig { failure_threshold: 1, ..BreakerConfig::default() };
        let breaker = CircuitBreaker::new(Flaky::new(true, ErrorKind::Unavailable), config);
        breaker.search(&ctx, &q()).await.unwrap_err();
        tokio::time::advance(Duration::from_secs(30)).await;
        // Take the probe slot by hand, as a probe in flight would.
        assert!(breaker.admit(&ctx).unwrap());
        assert_eq!(breaker.state(), BreakerState::HalfOpen);
        assert_eq!(breaker.admit(&ctx).unwrap_err().kind(), ErrorKind::Unavailable);
        // A probe dropped before it reports frees its slot.
        drop(ProbeSlot { breaker: &breaker, armed: true });
        assert!(breaker.admit(&ctx).unwrap());
    }

    #[tokio::test(start_paused = true)]
    async fn retries_back_off_exponentially_and_stop_at_the_deadline() {
        let sink = TraceSink::new();
        let ctx = Ctx::new().with_trace(sink.clone());
        let retrying = Retrying::new(
            Flaky::new(true, ErrorKind::Transient),
            RetryPolicy { jitter: 0.0, ..RetryPolicy::default() },
        );
        let start = tokio::time::Instant::now();
        retrying.search(&ctx, &q()).await.unwrap_err();
        assert_eq!(retrying.inner.calls.load(Ordering::SeqCst), 4);
        assert_eq!(start.elapsed(), Duration::from_secs(1 + 2 + 4));
        let waits: Vec<u64> =
            sink.take().iter().filter(|e| e.action == "retry").map(|e| e.detail["wait_ms"].as_u64().unwrap()).collect();
        assert_eq!(waits, [1000, 2000, 4000]);

        // Permanent failures are not retried.
        let permanent = Retrying::new(Flaky::new(true, ErrorKind::Permanent), RetryPolicy::default());
        permanent.search(&ctx, &q()).await.unwrap_err();
        assert_eq!(permanent.inner.calls.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_wait_past_the_deadline_is_refused_at_once() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
        rt.block_on(async {
            // The deadline is on the real clock; 500 ms left and a 1 s first backoff.
            let ctx = Ctx::new().with_timeout(Duration::from_millis(500));
            let retrying = Retrying::new(
                Flaky::new(true, ErrorKind::Transient),
                RetryPolicy { jitter: 0.0, ..RetryPolicy::default() },
            );
            let err = retrying.search(&ctx, &q()).await.unwrap_err();
            // One call and a deadline refusal: the 1 s backoff was refused, not slept.
            assert_eq!(err.kind(), ErrorKind::Transient, "the provider's own failure is reported: {err}");
            assert_eq!(retrying.inner.calls.load(Ordering::SeqCst), 1);
            assert_eq!(retrying.stats().deadline_refusals, 1);
        });
    }

    #[test]
    fn rate_limits_are_validated_and_per_provider_defaults_follow_the_protocol() {
        let flaky = || Flaky::new(false, ErrorKind::Transient);
        assert!(RateLimited::new(flaky(), RateLimit::per_second(0.0)).is_err());
        assert!(RateLimited::new(flaky(), RateLimit { per_second: 1.0, burst: 0 }).is_err());
        assert!(RateLimited::new(flaky(), RateLimit::per_second(f64::NAN)).is_err());
        assert_eq!(Resilience::for_provider("semantic_scholar").rate_limit, Some(RateLimit::per_second(1.0)));
        assert_eq!(Resilience::for_provider("arxiv").rate_limit, Some(RateLimit::per_second(3.0)));
        assert_eq!(Resilience::for_provider("tavily").rate_limit, None);
        let parsed: Resilience =
            serde_json::from_str(r#"{"rate_limit": {"per_second": 2}, "backoff": {"base": 0.25}}"#).unwrap();
        assert_eq!(parsed.rate_limit, Some(RateLimit { per_second: 2.0, burst: 1 }));
        assert_eq!(parsed.backoff.base, Duration::from_millis(250));
        assert_eq!(parsed.breaker, BreakerConfig::default());
    }

    #[test]
    fn the_rate_limit_spaces_requests() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
        rt.block_on(async {
            let limited =
                RateLimited::new(Flaky::new(false, ErrorKind::Transient), RateLimit::per_second(20.0)).unwrap();
            let ctx = Ctx::new();
            let start = std::time::Instant::now();
            let queries: Vec<WebQuery> = (0..5).map(|i| WebQuery { text: i.to_string(), max_results: 1 }).collect();
            let lists = limited.search(&ctx, &queries).await.unwrap();
            assert_eq!(lists.len(), 5);
            // Five requests at 20 per second, evenly spaced: the fifth goes at 200 ms at the earliest.
            assert!(start.elapsed() >= Duration::from_millis(190), "{:?}", start.elapsed());
            assert!(limited.stats().rate_limited >= 4);
        });
    }
}
