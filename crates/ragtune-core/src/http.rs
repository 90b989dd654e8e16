//! What every crate that talks HTTP shares: which [`ErrorKind`] a status is, the wait a server asks for with
//! `Retry-After`, and the one [`RetryPolicy`] (exponential backoff with jitter within the call's deadline) that the
//! LLM client, the Qdrant store and the web providers retry with.
//!
//! Core holds no runtime, so the policy decides and the caller sleeps: a retry loop asks
//! [`RetryPolicy::decide`] after each failed attempt and either waits what it says or gives up with the reason.
//!
//! ```
//! use std::time::Duration;
//!
//! use ragtune_core::http::{GiveUp, RetryAfter, RetryDecision, RetryPolicy, WaitFrom, status_error};
//! use ragtune_core::{Ctx, ErrorKind};
//!
//! let policy = RetryPolicy { jitter: 0.0, ..RetryPolicy::default() };
//! let busy = status_error(503, "the server answered HTTP 503");
//! assert_eq!(busy.kind(), ErrorKind::Transient);
//! let ctx = Ctx::new();
//! let backoff = RetryDecision::Wait { wait: Duration::from_secs(2), from: WaitFrom::Backoff };
//! assert_eq!(policy.decide(&ctx, 1, &busy, 0.5), backoff);
//! // A server's Retry-After replaces the computed wait.
//! let asked = status_error(503, "the server answered HTTP 503").with_source(RetryAfter(Duration::from_secs(7)));
//! let honoured = RetryDecision::Wait { wait: Duration::from_secs(7), from: WaitFrom::RetryAfter };
//! assert_eq!(policy.decide(&ctx, 1, &asked, 0.5), honoured);
//! // Only transient failures are retried, and only `max_retries` times.
//! assert_eq!(policy.decide(&ctx, 0, &status_error(401, "no"), 0.5), RetryDecision::GiveUp(GiveUp::NotRetryable));
//! assert_eq!(policy.decide(&ctx, 3, &busy, 0.5), RetryDecision::GiveUp(GiveUp::Exhausted));
//! ```

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::{Ctx, Error, ErrorKind};

/// The kind of failure an HTTP status other than 2xx is.
///
/// - Transient: 408 Request Timeout, 409 Conflict, 425 Too Early, 429 Too Many Requests, 500, 502, 503 and 504. An
///   API answers 409 to a request that collided with another one on the same resource (OpenAI's SDKs retry it as a
///   lock timeout); the calls ragtune makes (a completion, a search, an idempotent write) change nothing that a
///   second attempt would conflict with.
/// - Permanent: 401 and 403 (a key is missing or wrong), and every other status.
/// - Not found: 404 (a wrong URL or model name).
/// - Invalid input: 400, 413 and 422 (the request itself is wrong or too large).
#[must_use]
pub fn status_kind(status: u16) -> ErrorKind {
    match status {
        408 | 409 | 425 | 429 | 500 | 502 | 503 | 504 => ErrorKind::Transient,
        404 => ErrorKind::NotFound,
        400 | 413 | 422 => ErrorKind::InvalidInput,
        _ => ErrorKind::Permanent,
    }
}

/// An [`Error`] of the [`status_kind`] of `status` with `message`.
pub fn status_error(status: u16, message: impl Into<String>) -> Error {
    Error::new(status_kind(status), message)
}

/// The wait a server asked for with `Retry-After`, carried as the source of a transient [`Error`] so that a
/// [`RetryPolicy`] honours it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryAfter(pub Duration);

impl fmt::Display for RetryAfter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the server asked to retry after {:.1} s", self.0.as_secs_f64())
    }
}

impl std::error::Error for RetryAfter {}

impl Error {
    /// Attaches the server's `Retry-After` wait when the error is retryable (a wait on a permanent failure means
    /// nothing); the error unchanged otherwise.
    #[must_use]
    pub fn with_retry_after(self, wait: Option<Duration>) -> Self {
        match wait {
            Some(w) if self.is_retryable() => self.with_source(RetryAfter(w)),
            _ => self,
        }
    }
}

/// The `Retry-After` wait an error carries anywhere in its chain of sources, if any.
#[must_use]
pub fn retry_after(error: &Error) -> Option<Duration> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(error);
    while let Some(e) = cur {
        if let Some(r) = e.downcast_ref::<RetryAfter>() {
            return Some(r.0);
        }
        cur = e.source();
    }
    None
}

/// Parses a `Retry-After` header value in seconds (`2`, `0.5`). The HTTP-date form is not honoured (it needs a date
/// parser and the servers ragtune talks to send seconds): it gives `None`, and the policy's backoff applies.
#[must_use]
pub fn parse_retry_after(value: &str) -> Option<Duration> {
    value.trim().parse::<f64>().ok().and_then(|s| Duration::try_from_secs_f64(s).ok())
}

/// Exponential backoff with jitter: the wait before retry `n` (from 0) is `base · 2ⁿ`, capped at `max`, spread by
/// ± `jitter` of itself. A `Retry-After` from the server ([`retry_after`]) replaces the computed wait, also capped
/// at `max`, so that a server cannot park a call for an hour. Only transient failures are retried, at most
/// `max_retries` times, and never with a wait that would pass the call's deadline.
///
/// In configuration files durations are seconds (`base = 0.25`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RetryPolicy {
    /// The first wait (1 s by default).
    #[serde(with = "secs")]
    pub base: Duration,
    /// The longest wait (60 s by default), computed or asked for.
    #[serde(with = "secs")]
    pub max: Duration,
    /// The spread, as a fraction of the wait (0.5 by default; 0 for none).
    pub jitter: f64,
    /// Retries after the first attempt (3 by default).
    pub max_retries: u32,
    /// The seed of the caller's jitter draws, so that the same run waits the same and traces the same.
    pub seed: u64,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self { base: Duration::from_secs(1), max: Duration::from_secs(60), jitter: 0.5, max_retries: 3, seed: 0 }
    }
}

/// What a retry loop does after a failed attempt ([`RetryPolicy::decide`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryDecision {
    /// Wait this long, then try again.
    Wait {
        /// How long.
        wait: Duration,
        /// Where the wait comes from.
        from: WaitFrom,
    },
    /// Stop and report the attempt's failure.
    GiveUp(GiveUp),
}

/// Where a retry's wait comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitFrom {
    /// The policy's backoff.
    Backoff,
    /// The server's `Retry-After`.
    RetryAfter,
}

impl WaitFrom {
    /// A stable lower-case name for traces (`backoff`, `retry_after`).
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Backoff => "backoff",
            Self::RetryAfter => "retry_after",
        }
    }
}

/// Why a retry loop stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GiveUp {
    /// The failure is not transient: another attempt would fail the same way.
    NotRetryable,
    /// `max_retries` retries were made.
    Exhausted,
    /// The wait would reach the call's deadline.
    Deadline {
        /// The wait that was refused.
        wait: Duration,
    },
}

impl RetryPolicy {
    /// The computed wait before retry `attempt` (from 0) for a jitter draw `u` in `[0, 1)` (0.5 is no spread).
    #[must_use]
    pub fn delay(&self, attempt: u32, u: f64) -> Duration {
        let exp = self.base.as_secs_f64() * 2f64.powi(i32::try_from(attempt.min(62)).unwrap_or(62));
        let capped = exp.min(self.max.as_secs_f64());
        let jitter = self.jitter.clamp(0.0, 1.0);
        let spread = capped * (1.0 + jitter * (2.0 * u - 1.0));
        Duration::from_secs_f64(spread.clamp(0.0, self.max.as_secs_f64()))
    }

    /// What to do after `error` ended retry `attempt` (0 for the first attempt, 1 for the first retry, ...): wait
    /// before the next, or give up. `u` is the caller's jitter draw in `[0, 1)` (any value when `jitter` is 0).
    #[must_use]
    pub fn decide(&self, ctx: &Ctx, attempt: u32, error: &Error, u: f64) -> RetryDecision {
        self.decide_for(ctx, attempt, error.kind(), retry_after(error), u)
    }

    /// [`decide`](Self::decide) for a failure known by its kind and the server's `Retry-After`, before it becomes
    /// an [`Error`].
    #[must_use]
    pub fn decide_for(
        &self,
        ctx: &Ctx,
        attempt: u32,
        kind: ErrorKind,
        retry_after: Option<Duration>,
        u: f64,
    ) -> RetryDecision {
        if !kind.is_retryable() {
            return RetryDecision::GiveUp(GiveUp::NotRetryable);
        }
        if attempt >= self.max_retries {
            return RetryDecision::GiveUp(GiveUp::Exhausted);
        }
        let (wait, from) = match retry_after {
            Some(asked) => (asked.min(self.max), WaitFrom::RetryAfter),
            None => (self.delay(attempt, u), WaitFrom::Backoff),
        };
        if ctx.remaining().is_some_and(|left| wait >= left) {
            return RetryDecision::GiveUp(GiveUp::Deadline { wait });
        }
        RetryDecision::Wait { wait, from }
    }
}

/// Durations as seconds (`0.25`) in configuration files: `#[serde(with = "ragtune_core::http::secs")]`.
pub mod secs {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    /// Writes `d` as seconds.
    ///
    /// # Errors
    /// The serializer's.
    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_secs_f64())
    }

    /// Reads seconds as a duration.
    ///
    /// # Errors
    /// A value that is not a number of seconds a [`Duration`] can hold (negative, not finite, too large).
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let secs = f64::deserialize(d)?;
        Duration::try_from_secs_f64(secs).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_are_classified_once() {
        let kinds: Vec<String> = [400, 401, 403, 404, 408, 409, 413, 418, 422, 425, 429, 500, 501, 502, 503, 504, 505]
            .map(|s| format!("{s} {}", status_kind(s)))
            .into();
        assert_eq!(
            kinds,
            [
                "400 invalid_input",
                "401 permanent",
                "403 permanent",
                "404 not_found",
                "408 transient",
                "409 transient",
                "413 invalid_input",
                "418 permanent",
                "422 invalid_input",
                "425 transient",
                "429 transient",
                "500 transient",
                "501 permanent",
                "502 transient",
                "503 transient",
                "504 transient",
                "505 permanent",
            ]
        );
        let e = status_error(429, "slow down");
        assert_eq!((e.kind(), e.message()), (ErrorKind::Transient, "slow down"));
    }

    #[test]
    fn retry_after_travels_with_retryable_errors_only() {
        let wait = Some(Duration::from_secs(7));
        let e = status_error(429, "slow down").with_retry_after(wait);
        assert_eq!(retry_after(&e), wait);
        // Found below other sources too.
        let wrapped = Error::transient("outer").with_source(e);
        assert_eq!(retry_after(&wrapped), wait);
        assert_eq!(retry_after(&status_error(401, "no").with_retry_after(wait)), None);
        assert_eq!(retry_after(&status_error(503, "busy").with_retry_after(None)), None);
    }

    #[test]
    fn retry_after_values_are_seconds() {
        assert_eq!(parse_retry_after(" 2 "), Some(Duration::from_secs(2)));
        assert_eq!(parse_retry_after("0.5"), Some(Duration::from_millis(500)));
        assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"), None);
        assert_eq!(parse_retry_after("-1"), None);
        assert_eq!(parse_retry_after("NaN"), None);
        assert_eq!(parse_retry_after("inf"), None);
    }

    #[test]
    fn backoff_doubles_is_capped_and_spread() {
        let p = RetryPolicy::default();
        let d = |attempt, u| p.delay(attempt, u).as_secs_f64();
        // No spread at u = 0.5; ± 50 % at the ends.
        assert_eq!([d(0, 0.5), d(1, 0.5), d(2, 0.5), d(10, 0.5), d(u32::MAX, 0.5)], [1.0, 2.0, 4.0, 60.0, 60.0]);
        assert_eq!([d(1, 0.0), d(1, 1.0)], [1.0, 3.0]);
        // The spread never passes the cap.
        assert_eq!(d(10, 1.0), 60.0);
        let none = RetryPolicy { jitter: 0.0, ..p };
        assert_eq!(none.delay(1, 0.0), none.delay(1, 1.0));
    }

    /// Renders the decisions after attempts 0 to 3 of a failure.
    fn check(policy: &RetryPolicy, ctx: &Ctx, error: &Error, expect: &str) {
        let got: Vec<String> = (0..4)
            .map(|attempt| match policy.decide(ctx, attempt, error, 0.5) {
                RetryDecision::Wait { wait, from } => format!("wait {} ms ({})", wait.as_millis(), from.as_str()),
                RetryDecision::GiveUp(why) => format!("give up: {why:?}"),
            })
            .collect();
        assert_eq!(got.join("; "), expect);
    }

    #[test]
    fn decisions_follow_the_kind_the_count_the_server_and_the_deadline() {
        let p = RetryPolicy { base: Duration::from_millis(100), max: Duration::from_secs(1), ..RetryPolicy::default() };
        let ctx = Ctx::new();
        check(
            &p,
            &ctx,
            &Error::transient("reset"),
            "wait 100 ms (backoff); wait 200 ms (backoff); wait 400 ms (backoff); give up: Exhausted",
        );
        let not = "give up: NotRetryable";
        check(&p, &ctx, &Error::permanent("bug"), &[not; 4].join("; "));
        check(&p, &ctx, &Error::new(ErrorKind::DeadlineExceeded, "late"), &[not; 4].join("; "));
        // The server's wait replaces the backoff, capped at `max`.
        let asked = |s| Error::transient("busy").with_retry_after(Some(Duration::from_secs_f64(s)));
        let three = |s: &str| format!("{s}; {s}; {s}; give up: Exhausted");
        check(&p, &ctx, &asked(0.05), &three("wait 50 ms (retry_after)"));
        check(&p, &ctx, &asked(3600.0), &three("wait 1000 ms (retry_after)"));
        // A wait that would reach the deadline is refused: 30 s away, 25.6 s fits and 51.2 s does not.
        let slow = RetryPolicy { max: Duration::from_secs(60), max_retries: 12, ..p };
        let soon = Ctx::new().with_timeout(Duration::from_secs(30));
        let reset = Error::transient("reset");
        let fits = RetryDecision::Wait { wait: Duration::from_millis(25_600), from: WaitFrom::Backoff };
        assert_eq!(slow.decide(&soon, 8, &reset, 0.5), fits);
        let refused = RetryDecision::GiveUp(GiveUp::Deadline { wait: Duration::from_millis(51_200) });
        assert_eq!(slow.decide(&soon, 9, &reset, 0.5), refused);
    }

    #[test]
    fn policies_read_seconds_from_configuration() {
        let p: RetryPolicy = serde_json::from_str(r#"{"base": 0.25, "max_retries": 1}"#).unwrap();
        assert_eq!(p, RetryPolicy { base: Duration::from_millis(250), max_retries: 1, ..RetryPolicy::default() });
        assert_eq!(serde_json::to_value(p).unwrap()["base"], 0.25);
        assert!(serde_json::from_str::<RetryPolicy>(r#"{"base": -1}"#).is_err());
        assert!(serde_json::from_str::<RetryPolicy>(r#"{"tries": 1}"#).is_err());
    }
}
