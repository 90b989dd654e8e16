//! `[server]`: the HTTP server's limits and its API key, and the bounds every surface shares (`top_k`).

use super::*;

/// The `[server]` section: how `ragtune serve` listens and what it accepts (docs/server.md, "Security model").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerSettings {
    /// The address to listen on. Anything but a loopback address needs `api_key`.
    pub bind: String,
    /// The bearer token every route but `/healthz`, `/readyz` and the page require (prefer
    /// `$RAGTUNE_SERVER_API_KEY`); at least [`MIN_API_KEY_CHARS`] characters; never written back out, logged or
    /// traced.
    #[serde(skip_serializing)]
    pub api_key: Option<Secret>,
    /// The largest request body accepted, in bytes (413 above it).
    pub max_body_bytes: usize,
    /// The most documents one `PUT /v1/documents` may carry (413 above it).
    pub max_batch_documents: usize,
    /// Requests handled at once; one more is answered 503 with `Retry-After` rather than queued. A request takes
    /// its slot only once its body has arrived.
    pub max_concurrency: usize,
    /// Open connections at once; a connection beyond them is closed as soon as it is accepted, so that idle or
    /// slow clients cannot exhaust the process's file descriptors.
    pub max_connections: usize,
    /// How long a client may take to send a request's headers, and how long a kept-alive connection may sit idle
    /// before its next request, in seconds (slowloris).
    pub header_timeout_secs: u64,
    /// How long a client may take to send a request's body, in seconds (408 after it).
    pub body_timeout_secs: u64,
    /// Host names a loopback-bound server also answers to (besides `localhost`, `127.0.0.1` and `::1`), for a
    /// reverse proxy on the same machine; every other `Host` or `Origin` is refused (DNS rebinding).
    pub allowed_hosts: Vec<String>,
    /// The longest deadline a request may ask for, and the deadline of requests that ask for none, in
    /// milliseconds.
    pub max_deadline_ms: u64,
    /// How long shutdown waits for requests in flight, in seconds.
    pub shutdown_grace_secs: u64,
}

/// The most candidates a question or a search may ask for (`top_k`), wherever it is set: the configuration file,
/// a command-line flag or an HTTP request.
pub const MAX_TOP_K: usize = 1000;

/// Checks a requested `top_k` (`name` says where it came from): 1 to [`MAX_TOP_K`].
///
/// # Errors
/// [`InvalidInput`](ragtune_core::ErrorKind::InvalidInput) naming it and the range.
pub fn check_top_k(name: &str, k: usize) -> Result<()> {
    if k == 0 || k > MAX_TOP_K {
        return Err(Error::invalid_input(format!("{name} must be 1 to {MAX_TOP_K}, got {k}")));
    }
    Ok(())
}

/// The shortest API key `ragtune serve` accepts: a key a person can guess or brute-force over HTTP is no key.
pub const MIN_API_KEY_CHARS: usize = 16;

impl Default for ServerSettings {
    fn default() -> Self {
        Self {
            bind: "127.0.0.1:8080".to_owned(),
            api_key: None,
            max_body_bytes: 2 * 1024 * 1024,
            max_batch_documents: 1000,
            max_concurrency: 16,
            max_connections: 512,
            header_timeout_secs: 10,
            body_timeout_secs: 30,
            allowed_hosts: Vec::new(),
            max_deadline_ms: 60_000,
            shutdown_grace_secs: 30,
        }
    }
}

impl ServerSettings {
    /// Checks the limits and the API key.
    ///
    /// # Errors
    /// [`InvalidInput`](ragtune_core::ErrorKind::InvalidInput) for a zero limit, or an API key that is empty,
    /// shorter than [`MIN_API_KEY_CHARS`] characters or padded with whitespace.
    pub fn validate(&self) -> Result<()> {
        let limits = [
            ("max_body_bytes", self.max_body_bytes as u64),
            ("max_batch_documents", self.max_batch_documents as u64),
            ("max_concurrency", self.max_concurrency as u64),
            ("max_connections", self.max_connections as u64),
            ("header_timeout_secs", self.header_timeout_secs),
            ("body_timeout_secs", self.body_timeout_secs),
            ("max_deadline_ms", self.max_deadline_ms),
        ];
        if let Some((name, _)) = limits.iter().find(|(_, v)| *v == 0) {
            return Err(Error::invalid_input(format!("[server] {name} must be at least 1")));
        }
        if let Some(key) = &self.api_key {
            let k = key.expose();
            if k.trim() != k {
                return Err(Error::invalid_input(
                    "[server] api_key (or $RAGTUNE_SERVER_API_KEY) starts or ends with whitespace: a copy-paste \
                     slip; set the key alone",
                ));
            }
            if k.chars().count() < MIN_API_KEY_CHARS {
                return Err(Error::invalid_input(format!(
                    "[server] api_key (or $RAGTUNE_SERVER_API_KEY) is {} characters long: an API key needs at least \
                     {MIN_API_KEY_CHARS} (for example `openssl rand -hex 24`)",
                    k.chars().count()
                )));
            }
        }
        Ok(())
    }
}
