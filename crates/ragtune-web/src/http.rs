//! What every provider shares: where it is, its key, its time limits, and how an HTTP exchange becomes a result or
//! a classified [`Error`].

use std::time::Duration;

use ragtune_core::http::{parse_retry_after, status_kind};
use ragtune_core::{Ctx, Error, ErrorKind, Result, Secret};

/// Where a provider is and how long a call to it may take.
///
/// Base URLs are configurable so that tests and self-hosted instances (SearXNG above all) can point anywhere,
/// including `http://127.0.0.1:PORT`.
#[derive(Debug, Clone)]
pub struct Endpoint {
    /// The provider's base URL, without a trailing slash (one is tolerated).
    pub base_url: String,
    /// The API key, if the provider takes one; never logged (its `Debug` is `<redacted>`).
    pub api_key: Option<Secret>,
    /// The longest one request may take, connection included; the context's deadline shortens it.
    pub timeout: Duration,
    /// The longest the TCP and TLS connection may take.
    pub connect_timeout: Duration,
    /// The largest response body read; a longer one is an error rather than a memory spike.
    pub max_body_bytes: usize,
}

impl Endpoint {
    /// An endpoint at `base_url` with no key, a 15 s request timeout, a 5 s connect timeout and a 4 MiB body limit.
    #[must_use]
    pub fn new(base_url: impl Into<String>) -> Self {
        Self {
            base_url: base_url.into(),
            api_key: None,
            timeout: Duration::from_secs(15),
            connect_timeout: Duration::from_secs(5),
            max_body_bytes: 4 << 20,
        }
    }

    /// Sets the API key.
    #[must_use]
    pub fn with_key(mut self, key: impl Into<Secret>) -> Self {
        self.api_key = Some(key.into());
        self
    }

    /// Sets the request timeout.
    #[must_use]
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// `base_url` joined with `path` (which starts with `/`).
    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base_url.trim_end_matches('/'))
    }

    /// The key, or an error naming the provider when it needs one and has none.
    pub(crate) fn require_key(&self, provider: &str) -> Result<&Secret> {
        self.api_key.as_ref().ok_or_else(|| {
            Error::invalid_input(format!(
                "the {provider} web search provider needs an API key (`web.{provider}.api_key`)"
            ))
        })
    }
}

/// The most redirects a provider call follows.
const MAX_REDIRECTS: usize = 3;

/// A plain HTTP client with the endpoint's connect timeout that follows redirects only within the origin (scheme,
/// host and port) of the request: [`same_origin_redirects`].
pub(crate) fn client(endpoint: &Endpoint) -> Result<reqwest::Client> {
    reqwest::Client::builder()
        .connect_timeout(endpoint.connect_timeout)
        .redirect(same_origin_redirects())
        .user_agent(concat!("ragtune/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| Error::permanent("cannot start the HTTP client").with_source(e))
}

/// Follows at most [`MAX_REDIRECTS`] redirects, all within the first request's origin.
///
/// Providers take their keys in headers, and reqwest strips only `Authorization` and cookies when a redirect
/// leaves the host: a custom header such as Exa's and Semantic Scholar's `x-api-key` would be sent to whatever
/// host the answer names. An API has no reason to send its clients elsewhere, so such a redirect is an error
/// (see [`transport_error`]) rather than a request.
fn same_origin_redirects() -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(|attempt| {
        let Some(first) = attempt.previous().first() else { return attempt.follow() };
        let (from, to) = (first.origin(), attempt.url().origin());
        if from != to {
            let message = format!(
                "refused to follow a redirect from {} to {}, another origin: the request carries the API key; \
                 set the base URL to the server that answers",
                from.ascii_serialization(),
                to.ascii_serialization()
            );
            attempt.error(message)
        } else if attempt.previous().len() > MAX_REDIRECTS {
            attempt.error(format!("more than {MAX_REDIRECTS} redirects"))
        } else {
            attempt.follow()
        }
    })
}

/// Sends `request` within the endpoint's timeout and the context's deadline, and returns the body of a 2xx answer
/// as text (invalid UTF-8 replaced, so one bad snippet does not lose a whole answer).
///
/// # Errors
/// Transport failures, non-2xx statuses (classified; 429 and 503 carry their `Retry-After`), a body over the limit,
/// or a deadline that has already passed.
pub(crate) async fn send(
    ctx: &Ctx,
    provider: &str,
    endpoint: &Endpoint,
    request: reqwest::RequestBuilder,
) -> Result<String> {
    ctx.check()?;
    let timeout = ctx.remaining().map_or(endpoint.timeout, |r| r.min(endpoint.timeout));
    if timeout.is_zero() {
        return Err(Error::new(ErrorKind::DeadlineExceeded, format!("no time left to ask {provider}")));
    }
    let work = async {
        let mut response = request.send().await.map_err(|e| transport_error(provider, &e, timeout))?;
        let status = response.status();
        let wait = response
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(parse_retry_after);
        let too_large = || {
            Error::permanent(format!(
                "{provider} sent a response larger than {} bytes (`max_body_bytes`)",
                endpoint.max_body_bytes
            ))
        };
        // A body that announces more than the limit is not read at all; one that streams past it, no further.
        if response.content_length().is_some_and(|n| n > endpoint.max_body_bytes as u64) {
            return Err(too_large());
        }
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| transport_error(provider, &e, timeout))? {
            if body.len() + chunk.len() > endpoint.max_body_bytes {
                return Err(too_large());
            }
            body.extend_from_slice(&chunk);
        }
        let text = String::from_utf8_lossy(&body).into_owned();
        if status.is_success() { Ok(text) } else { Err(status_error(provider, status.as_u16(), wait, &text)) }
    };
    // The whole exchange, body included, is bounded: reqwest's own timeout covers it too, this makes it explicit
    // for slow bodies.
    match tokio::time::timeout(timeout, work).await {
        Ok(result) => result,
        Err(_) => Err(Error::transient(format!("{provider} did not answer within {:.1} s", timeout.as_secs_f64()))),
    }
}

fn transport_error(provider: &str, e: &reqwest::Error, timeout: Duration) -> Error {
    if e.is_timeout() {
        Error::transient(format!("{provider} did not answer within {:.1} s", timeout.as_secs_f64()))
    } else if e.is_redirect() {
        // The redirect policy's reason: another origin, or too many hops. Retrying would only repeat it.
        Error::permanent(format!("{provider} answered with a redirect that was not followed: {}", describe(e)))
    } else if e.is_connect() {
        Error::unavailable(format!("cannot reach {provider}: {}", describe(e)))
    } else {
        Error::transient(format!("the connection to {provider} failed: {}", describe(e)))
    }
}

/// A transport error's causes without the URL (which for some providers holds the query, and which reqwest
/// already names); keys travel in headers, never in URLs.
fn describe(e: &reqwest::Error) -> String {
    let mut parts = Vec::new();
    let mut cur = std::error::Error::source(e);
    while let Some(c) = cur {
        parts.push(c.to_string());
        cur = c.source();
    }
    if parts.is_empty() { e.to_string() } else { parts.join(": ") }
}

fn status_error(provider: &str, status: u16, wait: Option<Duration>, body: &str) -> Error {
    let what = format!("{provider} answered HTTP {status}: {}", snippet(body));
    // The kind is core's; the hints are the providers'.
    let hint = match status {
        401 | 403 => " (check the API key)",
        404 => " (check the base URL)",
        _ => "",
    };
    Error::new(status_kind(status), format!("{what}{hint}")).with_retry_after(wait)
}

/// The start of a body for an error message, on one line.
pub(crate) fn snippet(text: &str) -> String {
    let one_line: String = text.chars().take(200).map(|c| if c.is_control() { ' ' } else { c }).collect();
    if text.chars().count() > 200 { format!("{one_line}…") } else { one_line }
}

/// Parses a JSON body, or says which provider sent something else.
///
/// # Errors
/// [`ErrorKind::MalformedOutput`] for a body that is not the expected JSON (truncated, HTML, an error page).
pub(crate) fn parse_json<T: serde::de::DeserializeOwned>(provider: &str, text: &str) -> Result<T> {
    serde_json::from_str(text).map_err(|e| {
        Error::malformed_output(format!(
            "{provider} sent a response that is not the expected JSON ({e}): {}",
            snippet(text)
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_errors_carry_hints_and_retry_after() {
        use ragtune_core::http::retry_after;
        let e = status_error("p", 429, Some(Duration::from_secs(7)), "slow down");
        assert_eq!((e.kind(), e.message()), (ErrorKind::Transient, "p answered HTTP 429: slow down"));
        assert_eq!(retry_after(&e), Some(Duration::from_secs(7)));
        let e = status_error("p", 401, Some(Duration::from_secs(7)), "no");
        assert_eq!((e.kind(), e.message()), (ErrorKind::Permanent, "p answered HTTP 401: no (check the API key)"));
        assert_eq!(retry_after(&e), None);
        let e = status_error("p", 404, None, "");
        assert_eq!((e.kind(), e.message()), (ErrorKind::NotFound, "p answered HTTP 404:  (check the base URL)"));
    }

    #[test]
    fn snippets_are_one_bounded_line() {
        assert_eq!(snippet("a\nb"), "a b");
        assert_eq!(snippet(&"x".repeat(300)).chars().count(), 201);
    }
}
