//! `ragtune serve`: the engine as an HTTP service, JSON in and out, over the same command layer as the CLI
//! ([`ragtune::commands`]).
//!
//! Routes (docs/server.md): `POST /v1/ask`, `POST /v1/query`, `POST /v1/search`, `PUT /v1/documents`,
//! `DELETE /v1/documents/{id}`, `GET /v1/stats`, `GET /healthz`, `GET /readyz`, `GET /metrics` (Prometheus text),
//! `GET /searxng/search?q=…&format=json` (the index as a SearXNG-compatible search engine, for the web layer's
//! offline tests), and `GET /` (a page to ask questions and read the trace).
//!
//! Safe by default: it binds 127.0.0.1 unless told otherwise, and refuses to bind anything else without an API key
//! (a bearer token, compared in constant time, never logged); bodies are limited in size; every request has a
//! deadline; at most `max_concurrency` requests run at once and one more is answered 503 with `Retry-After`, never
//! queued; writes go through one writer; errors are JSON `{"error": {"kind", "message"}}` with the status that fits
//! (400 for bad input, never 500).
//!
//! ```no_run
//! # async fn run() -> ragtune::core::Result<()> {
//! let config = ragtune::Config::default();
//! let engine = ragtune::Engine::open(config.clone()).await?;
//! let server = ragtune_server::Server::bind(engine, config.server).await?;
//! println!("listening on http://{}", server.local_addr());
//! server.run(async { let _ = tokio::signal::ctrl_c().await; }).await
//! # }
//! ```

mod api;
mod metrics;
pub mod openapi;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use ragtune::core::{Error, Result};
use ragtune::{Engine, ServerSettings};
use tokio::sync::{RwLock, Semaphore};

pub use api::{ApiError, parse_ask, parse_documents, parse_search, router};
pub use metrics::Metrics;
pub use openapi::{ROUTES, openapi_document};

/// What every handler shares.
#[derive(Debug, Clone)]
pub struct AppState {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// Readers share the engine; `PUT` and `DELETE` take it alone, so batches are written one at a time.
    engine: RwLock<Engine>,
    settings: ServerSettings,
    /// Requests in flight: `try_acquire` or 503.
    slots: Arc<Semaphore>,
    metrics: Metrics,
}

impl AppState {
    /// The shared state of a server over `engine`.
    ///
    /// # Errors
    /// [`InvalidInput`](ragtune::core::ErrorKind::InvalidInput) for a `max_concurrency` of 0 or a zero body limit.
    pub fn new(engine: Engine, settings: ServerSettings) -> Result<Self> {
        if settings.max_concurrency == 0 || settings.max_body_bytes == 0 || settings.max_deadline_ms == 0 {
            return Err(Error::invalid_input(
                "[server] max_concurrency, max_body_bytes and max_deadline_ms must be at least 1",
            ));
        }
        let slots = Arc::new(Semaphore::new(settings.max_concurrency));
        let metrics = Metrics::new()?;
        Ok(Self { inner: Arc::new(Inner { engine: RwLock::new(engine), settings, slots, metrics }) })
    }

    /// The server's metrics.
    #[must_use]
    pub fn metrics(&self) -> &Metrics {
        &self.inner.metrics
    }

    /// Takes `n` request slots and holds them until the returned permit drops: what a burst of slow requests
    /// does, for testing back-pressure without timing.
    ///
    /// # Errors
    /// When fewer than `n` slots are free.
    pub fn occupy(&self, n: u32) -> Result<tokio::sync::OwnedSemaphorePermit> {
        self.inner.slots.clone().try_acquire_many_owned(n).map_err(|_| Error::unavailable("the slots are busy"))
    }
}

/// A bound server, ready to run.
#[derive(Debug)]
pub struct Server {
    listener: tokio::net::TcpListener,
    state: AppState,
    grace: Duration,
}

impl Server {
    /// Binds `settings.bind` (after checking that a non-loopback address has an API key).
    ///
    /// # Errors
    /// An address that does not parse; a non-loopback address without `api_key`; a port in use.
    pub async fn bind(engine: Engine, settings: ServerSettings) -> Result<Self> {
        let addr = check_bind(&settings)?;
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| Error::unavailable(format!("cannot listen on {addr}: {e}")).with_source(e))?;
        let grace = Duration::from_secs(settings.shutdown_grace_secs);
        Ok(Self { listener, state: AppState::new(engine, settings)?, grace })
    }

    /// The address it listens on (with the port the OS chose for `:0`).
    ///
    /// # Panics
    /// Never in practice: a bound listener has a local address.
    #[must_use]
    pub fn local_addr(&self) -> SocketAddr {
        self.listener.local_addr().expect("invariant: a bound listener has an address")
    }

    /// The shared state (for metrics in tests).
    #[must_use]
    pub fn state(&self) -> &AppState {
        &self.state
    }

    /// Serves until `shutdown` completes, then stops accepting and lets requests in flight finish (for at most
    /// `shutdown_grace_secs`).
    ///
    /// # Errors
    /// A failure of the listener.
    pub async fn run(self, shutdown: impl Future<Output = ()> + Send + 'static) -> Result<()> {
        let app = router(self.state);
        let (stopping_tx, stopping_rx) = tokio::sync::oneshot::channel::<()>();
        let graceful = axum::serve(self.listener, app).with_graceful_shutdown(async move {
            shutdown.await;
            let _ = stopping_tx.send(());
        });
        let grace = self.grace;
        tokio::select! {
            r = graceful => r.map_err(|e| Error::unavailable(format!("the server failed: {e}")).with_source(e)),
            () = async move {
                let _ = stopping_rx.await;
                tokio::time::sleep(grace).await;
            } => Ok(()),
        }
    }
}

/// The address to bind: loopback always; anything else only with an API key.
///
/// # Errors
/// An address that does not parse, or a non-loopback one without an API key.
pub fn check_bind(settings: &ServerSettings) -> Result<SocketAddr> {
    let addr: SocketAddr = settings.bind.parse().map_err(|e| {
        Error::invalid_input(format!("[server] bind `{}` is not an address like 127.0.0.1:8080: {e}", settings.bind))
    })?;
    if !addr.ip().is_loopback() && settings.api_key.is_none() {
        return Err(Error::invalid_input(format!(
            "binding {addr} would expose the server beyond this machine: set an API key ([server] api_key or \
             $RAGTUNE_SERVER_API_KEY) or bind 127.0.0.1"
        )));
    }
    Ok(addr)
}

/// Resolves when the process is asked to stop (Ctrl-C or SIGTERM).
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_binds_without_a_key() {
        let mut s = ServerSettings::default();
        assert!(check_bind(&s).is_ok());
        s.bind = "0.0.0.0:8080".into();
        let e = check_bind(&s).unwrap_err();
        assert!(e.message().contains("set an API key"), "{e}");
        s.api_key = Some("k".to_owned().into());
        assert!(check_bind(&s).is_ok());
        s.bind = "localhost".into();
        assert!(check_bind(&s).unwrap_err().message().contains("is not an address"));
        s.bind = "[::1]:9".into();
        s.api_key = None;
        assert!(check_bind(&s).is_ok());
    }
}
