//! `ragtune serve`: the engine as an HTTP service, JSON in and out, over the same command layer as the CLI
//! ([`ragtune::commands`]).
//!
//! Routes (docs/server.md): `POST /v1/ask`, `POST /v1/query`, `POST /v1/search`, `PUT /v1/documents`,
//! `DELETE /v1/documents/{id}`, `GET /v1/stats`, `GET /healthz`, `GET /readyz`, `GET /metrics` (Prometheus text),
//! `GET /searxng/search?q=…&format=json` (the index as a SearXNG-compatible search engine, for the web layer's
//! offline tests), and `GET /` (a page to ask questions and read the trace); the OpenAI-compatible
//! `POST /v1/chat/completions` and `GET /v1/models` ([`openai`], docs/openai.md); and for each collection of the
//! configuration (`[collections.NAME.store]`) the same routes under `/v1/collections/NAME/`.
//!
//! Safe by default (docs/server.md, "Security model"): it binds 127.0.0.1 unless told otherwise, and refuses to
//! bind anything else without an API key of at least 16 characters (a bearer token, compared in constant time,
//! never logged) that every route but `/healthz`, `/readyz` and the page requires; on a loopback bind it answers
//! only requests whose `Host` and `Origin` name this machine (DNS rebinding); headers, bodies and idle connections
//! have timeouts and connections a cap (slowloris); a request takes a slot only once its body has arrived, and at
//! most `max_concurrency` run at once (one more is answered 503 with `Retry-After`, never queued); bodies and
//! batches are limited in size (413); a batch is written whole or not at all, beside readers; errors are JSON
//! `{"error": {"kind", "message"}}` with the status that fits (400 for bad input, never 500).
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
pub mod openai;
pub mod openapi;
mod stream;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use std::collections::BTreeMap;

use hyper_util::rt::{TokioIo, TokioTimer};
use ragtune::core::{Error, Result};
use ragtune::{Engine, ServerSettings};
use tokio::sync::{Mutex, RwLock, Semaphore};

pub use api::{ApiError, parse_ask, parse_documents, parse_search, router};
pub use metrics::Metrics;
pub use openapi::{ROUTES, Route, openapi_document};

/// What every handler shares.
#[derive(Debug, Clone)]
pub struct AppState {
    inner: Arc<Inner>,
}

/// One store the server answers for: the default one, or a named collection.
#[derive(Debug)]
struct Collection {
    /// `None` for the default store.
    name: Option<String>,
    /// Readers and writers share the engine (the store serialises its own commits and shows readers a batch whole
    /// or not at all); only the very first batch of a new store takes it alone, to create the store's sparse space.
    engine: RwLock<Engine>,
    /// Writes (`PUT`, `DELETE`) go one at a time.
    writer: Mutex<()>,
    /// Whether a rebuild of the approximate dense index runs in the background.
    refreshing: Arc<AtomicBool>,
}

impl Collection {
    fn new(name: Option<String>, engine: Engine) -> Arc<Self> {
        Arc::new(Self { name, engine: RwLock::new(engine), writer: Mutex::new(()), refreshing: Arc::default() })
    }
}

#[derive(Debug)]
struct Inner {
    /// The store of today's routes (`/v1/ask`, …).
    default: Arc<Collection>,
    /// The named collections (`/v1/collections/{name}/…`).
    collections: BTreeMap<String, Arc<Collection>>,
    settings: ServerSettings,
    /// Whether the server listens on a loopback address: then `Host` and `Origin` must name this machine.
    loopback: bool,
    /// Requests in flight: `try_acquire` or 503.
    slots: Arc<Semaphore>,
    metrics: Metrics,
    /// The last readiness answer and when it was taken: `/readyz` asks the store at most once a second.
    readiness: std::sync::Mutex<Option<(Instant, bool)>>,
}

impl AppState {
    /// The shared state of a server over `engine`.
    ///
    /// # Errors
    /// [`InvalidInput`](ragtune::core::ErrorKind::InvalidInput) for invalid settings (a zero limit, a short API
    /// key, an address that does not parse).
    pub fn new(engine: Engine, settings: ServerSettings) -> Result<Self> {
        Self::with_collections(engine, Vec::new(), settings)
    }

    /// The shared state of a server over `engine` (today's routes) and the named `collections`
    /// (`/v1/collections/{name}/…`, chat models `ragtune:NAME`).
    ///
    /// # Errors
    /// As [`new`](Self::new); a collection name that is not 1 to 64 of `a-z0-9_-`, or given twice.
    pub fn with_collections(
        engine: Engine,
        collections: Vec<(String, Engine)>,
        settings: ServerSettings,
    ) -> Result<Self> {
        settings.validate()?;
        let mut named = BTreeMap::new();
        for (name, engine) in collections {
            if !valid_collection_name(&name) {
                return Err(Error::invalid_input(format!(
                    "collection `{name}`: a name is 1 to 64 characters of a-z, 0-9, `_` and `-`"
                )));
            }
            if named.insert(name.clone(), Collection::new(Some(name.clone()), engine)).is_some() {
                return Err(Error::invalid_input(format!("collection `{name}` is given twice")));
            }
        }
        let loopback = parse_bind(&settings)?.ip().is_loopback();
        let slots = Arc::new(Semaphore::new(settings.max_concurrency));
        let metrics = Metrics::new()?;
        Ok(Self {
            inner: Arc::new(Inner {
                default: Collection::new(None, engine),
                collections: named,
                settings,
                loopback,
                slots,
                metrics,
                readiness: std::sync::Mutex::new(None),
            }),
        })
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
    /// Binds `settings.bind` (after checking that a non-loopback address has an API key), serving `engine` and
    /// the collections its configuration names (`[collections.NAME]`, opened by [`open_collections`]).
    ///
    /// # Errors
    /// An address that does not parse; a non-loopback address without `api_key`; a port in use; a collection's
    /// store that cannot be opened.
    pub async fn bind(engine: Engine, settings: ServerSettings) -> Result<Self> {
        check_bind(&settings)?;
        let collections = open_collections(&engine).await?;
        Self::bind_with_collections(engine, collections, settings).await
    }

    /// [`bind`](Self::bind) serving exactly the named `collections` beside the default store (whatever the
    /// engine's configuration names).
    ///
    /// # Errors
    /// As [`bind`](Self::bind) and [`AppState::with_collections`].
    pub async fn bind_with_collections(
        engine: Engine,
        collections: Vec<(String, Engine)>,
        settings: ServerSettings,
    ) -> Result<Self> {
        let addr = check_bind(&settings)?;
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| Error::unavailable(format!("cannot listen on {addr}: {e}")).with_source(e))?;
        let grace = Duration::from_secs(settings.shutdown_grace_secs);
        Ok(Self { listener, state: AppState::with_collections(engine, collections, settings)?, grace })
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
    /// Each connection is HTTP/1.1 with a header timeout that also closes a kept-alive connection idle for as long
    /// (`header_timeout_secs`); at most `max_connections` are open at once, and one more is closed as soon as it is
    /// accepted.
    ///
    /// # Errors
    /// None in practice: a failed `accept` (out of file descriptors, say) is retried after a pause.
    pub async fn run(self, shutdown: impl Future<Output = ()> + Send + 'static) -> Result<()> {
        let settings = self.state.inner.settings.clone();
        let metrics = self.state.inner.metrics.clone();
        let app = router(self.state);
        let mut http = hyper::server::conn::http1::Builder::new();
        http.timer(TokioTimer::new())
            .header_read_timeout(Duration::from_secs(settings.header_timeout_secs))
            .keep_alive(true);
        let graceful = hyper_util::server::graceful::GracefulShutdown::new();
        let connections = Arc::new(Semaphore::new(settings.max_connections));
        let shutdown = std::pin::pin!(shutdown);
        let mut shutdown = shutdown;
        loop {
            let accepted = tokio::select! {
                accepted = self.listener.accept() => accepted,
                () = &mut shutdown => break,
            };
            let stream = match accepted {
                Ok((stream, _peer)) => stream,
                // Out of file descriptors or a connection reset before it was accepted: pause, then go on.
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
            };
            let Ok(permit) = connections.clone().try_acquire_owned() else {
                metrics.observe_refused_connection();
                drop(stream);
                continue;
            };
            let _ = stream.set_nodelay(true);
            let service = hyper_util::service::TowerToHyperService::new(app.clone());
            let connection = graceful.watch(http.serve_connection(TokioIo::new(stream), service));
            tokio::spawn(async move {
                // A client that goes away or times out is no error of the server's.
                let _ = connection.await;
                drop(permit);
            });
        }
        drop(self.listener);
        tokio::select! {
            () = graceful.shutdown() => {}
            () = tokio::time::sleep(self.grace) => {}
        }
        Ok(())
    }
}

/// The engines of the collections `config` names (`[collections.NAME]`), beside `main`, sharing its models: what
/// `ragtune serve` passes to [`Server::bind_with_collections`].
///
/// # Errors
/// A collection's store cannot be opened (locked, corrupt, another model), naming the collection.
pub async fn open_collections(main: &Engine) -> Result<Vec<(String, Engine)>> {
    ragtune::commands::open_collections(main).await
}

/// Whether `name` can name a collection (the configuration's one rule, re-exported).
pub use ragtune::valid_collection_name;

/// The address to bind: loopback always; anything else only with an API key.
///
/// # Errors
/// An address that does not parse, or a non-loopback one without an API key.
pub fn check_bind(settings: &ServerSettings) -> Result<SocketAddr> {
    settings.validate()?;
    let addr = parse_bind(settings)?;
    if !addr.ip().is_loopback() && settings.api_key.is_none() {
        return Err(Error::invalid_input(format!(
            "binding {addr} would expose the server beyond this machine: set an API key ([server] api_key or \
             $RAGTUNE_SERVER_API_KEY) or bind 127.0.0.1"
        )));
    }
    Ok(addr)
}

fn parse_bind(settings: &ServerSettings) -> Result<SocketAddr> {
    settings.bind.parse().map_err(|e| {
        Error::invalid_input(format!("[server] bind `{}` is not an address like 127.0.0.1:8080: {e}", settings.bind))
    })
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
        assert!(check_bind(&s).unwrap_err().message().contains("at least 16"), "a short key is no key");
        s.api_key = Some(String::new().into());
        assert!(check_bind(&s).unwrap_err().message().contains("at least 16"), "an empty key is no key");
        s.api_key = Some(" 0123456789abcdef0123".to_owned().into());
        assert!(check_bind(&s).unwrap_err().message().contains("whitespace"));
        s.api_key = Some("0123456789abcdef".to_owned().into());
        assert!(check_bind(&s).is_ok());
        s.bind = "localhost".into();
        assert!(check_bind(&s).unwrap_err().message().contains("is not an address"));
        s.bind = "[::1]:9".into();
        s.api_key = None;
        assert!(check_bind(&s).is_ok());
    }
}
