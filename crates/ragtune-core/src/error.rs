//! The one public error type of ragtune.

use std::fmt;

/// A boxed error that can cross threads, used as the source of an [`Error`].
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Convenience alias used by every ragtune crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What kind of failure an [`Error`] is; callers decide on retries and degradation from this alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The caller gave something unusable (empty query, malformed line, bad config). Retrying cannot help.
    InvalidInput,
    /// A named thing does not exist (file, split, collection, document).
    NotFound,
    /// A failure that may go away on its own (timeout of a provider, connection reset, HTTP 429/503).
    Transient,
    /// A dependency is not there at all (no model provisioned, no LLM configured, server unreachable).
    Unavailable,
    /// Stored data or an artefact is damaged or does not match what is expected (checksum, schema, vector space).
    Corrupt,
    /// Two things that must agree do not (embedding spaces, dimensions, store settings).
    Mismatch,
    /// A resource is held by someone else (a second writer on an embedded store).
    Locked,
    /// The call was cancelled through its [`Ctx`](crate::Ctx).
    Cancelled,
    /// The deadline in the call's [`Ctx`](crate::Ctx) passed.
    DeadlineExceeded,
    /// Anything else that will fail again if retried (a bug in a provider, an IO error on a full disk).
    Permanent,
    /// A model's structured output did not parse or was cut short (invalid or truncated JSON). Callers may retry
    /// once with a repair prompt, then degrade.
    MalformedOutput,
}

impl ErrorKind {
    /// A stable lower-case name, used in traces and JSON output.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::InvalidInput => "invalid_input",
            Self::NotFound => "not_found",
            Self::Transient => "transient",
            Self::Unavailable => "unavailable",
            Self::Corrupt => "corrupt",
            Self::Mismatch => "mismatch",
            Self::Locked => "locked",
            Self::Cancelled => "cancelled",
            Self::DeadlineExceeded => "deadline_exceeded",
            Self::Permanent => "permanent",
            Self::MalformedOutput => "malformed_output",
        }
    }
}

impl ErrorKind {
    /// Whether retrying the same call may succeed: only [`Transient`](Self::Transient) failures.
    #[must_use]
    pub fn is_retryable(self) -> bool {
        matches!(self, Self::Transient)
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The error of every public ragtune API.
///
/// Adapter crates keep a private error enum and convert it into this type with an exhaustive `From`,
/// so that the kind is decided once, where the failure is understood.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
#[non_exhaustive]
pub struct Error {
    kind: ErrorKind,
    message: String,
    #[source]
    source: Option<BoxError>,
}

impl Error {
    /// Creates an error of `kind` with a message that says what went wrong and where.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self { kind, message: message.into(), source: None }
    }

    /// Shorthand for [`ErrorKind::InvalidInput`].
    pub fn invalid_input(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidInput, message)
    }

    /// Shorthand for [`ErrorKind::NotFound`].
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::NotFound, message)
    }

    /// Shorthand for [`ErrorKind::Transient`].
    pub fn transient(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Transient, message)
    }

    /// Shorthand for [`ErrorKind::Unavailable`].
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Unavailable, message)
    }

    /// Shorthand for [`ErrorKind::Corrupt`].
    pub fn corrupt(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Corrupt, message)
    }

    /// Shorthand for [`ErrorKind::Mismatch`].
    pub fn mismatch(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Mismatch, message)
    }

    /// Shorthand for [`ErrorKind::Permanent`].
    pub fn permanent(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Permanent, message)
    }

    /// Shorthand for [`ErrorKind::MalformedOutput`].
    pub fn malformed_output(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::MalformedOutput, message)
    }

    /// Attaches the underlying cause.
    #[must_use]
    pub fn with_source(mut self, source: impl Into<BoxError>) -> Self {
        self.source = Some(source.into());
        self
    }

    /// Prefixes the message with where the error happened (a file, a line, a stage).
    #[must_use]
    pub fn context(mut self, context: impl fmt::Display) -> Self {
        self.message = format!("{context}: {}", self.message);
        self
    }

    /// The kind of failure.
    #[must_use]
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The message without the source chain.
    #[must_use]
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Whether retrying the same call may succeed (transient failures and deadlines of a single attempt).
    #[must_use]
    pub fn is_retryable(&self) -> bool {
        self.kind.is_retryable()
    }

    /// The message followed by every cause, separated by `: ` — what a CLI prints.
    #[must_use]
    pub fn chain(&self) -> String {
        let mut out = self.message.clone();
        let mut cur: Option<&(dyn std::error::Error + 'static)> =
            self.source.as_deref().map(|e| e as &(dyn std::error::Error + 'static));
        while let Some(e) = cur {
            let text = e.to_string();
            if !out.ends_with(&text) {
                out.push_str(": ");
                out.push_str(&text);
            }
            cur = e.source();
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_transient_is_retryable() {
        assert!(Error::transient("x").is_retryable());
        for e in [
            Error::invalid_input("x"),
            Error::unavailable("x"),
            Error::permanent("x"),
            Error::corrupt("x"),
            Error::new(ErrorKind::Locked, "x"),
        ] {
            assert!(!e.is_retryable(), "{:?}", e.kind());
        }
    }

    #[test]
    fn chain_and_context() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "no such file");
        let e = Error::not_found("cannot open corpus").with_source(io).context("data/corpus.jsonl");
        assert_eq!(e.chain(), "data/corpus.jsonl: cannot open corpus: no such file");
        assert_eq!(e.kind().as_str(), "not_found");
    }
}
