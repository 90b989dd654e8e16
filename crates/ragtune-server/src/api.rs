//! Routes, handlers and the JSON error shape.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, MatchedPath, Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::MethodFilter;
use axum::{Json, Router};
use ragtune::commands::{self, AskOptions, SearchOptions};
use ragtune::core::{Document, Error, ErrorKind};
use serde_json::Value;

use std::sync::Arc;

use crate::openapi::{
    Deleted, DocumentsBody, ErrorBody, ErrorDetail, Health, Indexed, Ready, SearxResult, SearxResults, Stats,
    openapi_document,
};
use crate::stream::{self, Streamed};
use crate::{AppState, Collection};

/// The page at `/`: one self-contained file, no build step, no CDN.
const PAGE: &str = include_str!("page.html");

/// The method filter of a route's method, `None` for a method the router does not know (a test checks every route
/// has a known one).
fn method_filter(method: &str) -> Option<MethodFilter> {
    Some(match method {
        "get" => MethodFilter::GET,
        "post" => MethodFilter::POST,
        "put" => MethodFilter::PUT,
        "delete" => MethodFilter::DELETE,
        _ => return None,
    })
}

/// The router over `state`: the routes of [`ROUTES`](crate::openapi::ROUTES), the one table of routes (path,
/// method, handler, bodies; the OpenAPI document is made from it too); the open ones without the API key, every
/// other one behind it.
pub fn router(state: AppState) -> Router {
    let limit = state.inner.settings.max_body_bytes;
    let (mut guarded, mut open) = (Router::new(), Router::new());
    for route in crate::openapi::ROUTES {
        let Some(filter) = method_filter(route.method) else { continue };
        let handler = (route.handler)(filter);
        if route.open {
            open = open.route(route.path, handler);
        } else {
            guarded = guarded.route(route.path, handler);
        }
    }
    let guarded = guarded.route_layer(middleware::from_fn_with_state(state.clone(), authorize));
    Router::new()
        .merge(guarded)
        .merge(open)
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        // Layers run outside in, from the last added: the Host/Origin check, then the body is read whole (with
        // its timeout and size limit), and only then does the request take a slot.
        .layer(middleware::from_fn_with_state(state.clone(), admit))
        .layer(middleware::from_fn_with_state(state.clone(), read_body))
        .layer(middleware::from_fn_with_state(state.clone(), check_host))
        .layer(DefaultBodyLimit::max(limit))
        // Outermost: whatever layer refused a request on the OpenAI routes, the error is in OpenAI's shape.
        .layer(middleware::from_fn(crate::openai::error_shape))
        .with_state(state)
}

/// An error as JSON: `{"error": {"kind", "message"}}`.
#[derive(Debug)]
pub struct ApiError {
    pub(crate) status: StatusCode,
    pub(crate) kind: &'static str,
    pub(crate) message: String,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> Self {
        Self { status, kind, message: message.into() }
    }

    fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_input", message)
    }
}

impl From<Error> for ApiError {
    fn from(e: Error) -> Self {
        let (status, kind) = match e.kind() {
            ErrorKind::InvalidInput | ErrorKind::MalformedOutput => (StatusCode::BAD_REQUEST, "invalid_input"),
            ErrorKind::NotFound => (StatusCode::NOT_FOUND, "not_found"),
            ErrorKind::Mismatch => (StatusCode::CONFLICT, "mismatch"),
            ErrorKind::DeadlineExceeded => (StatusCode::GATEWAY_TIMEOUT, "deadline_exceeded"),
            ErrorKind::Unavailable | ErrorKind::Transient | ErrorKind::Locked => {
                (StatusCode::SERVICE_UNAVAILABLE, "unavailable")
            }
            ErrorKind::Cancelled => (StatusCode::SERVICE_UNAVAILABLE, "cancelled"),
            _ => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
        };
        Self::new(status, kind, e.chain())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = Json(ErrorBody { error: ErrorDetail { kind: self.kind.to_owned(), message: self.message } });
        let mut response = (self.status, body).into_response();
        if self.status == StatusCode::SERVICE_UNAVAILABLE || self.status == StatusCode::TOO_MANY_REQUESTS {
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        response
    }
}

pub(crate) type ApiResult<T> = Result<T, ApiError>;

/// The body's bytes: 413 above the size limit.
pub(crate) fn body_bytes(body: Result<Bytes, BytesRejection>) -> ApiResult<Bytes> {
    body.map_err(|rejection| {
        let status = rejection.status();
        if status == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::new(
                status,
                "too_large",
                "the request body is larger than the server accepts ([server] max_body_bytes)",
            )
        } else {
            ApiError::new(status, "invalid_input", rejection.body_text())
        }
    })
}

/// Takes a required string field out of `map` (`names`: the field and its aliases).
fn take_text(map: &mut serde_json::Map<String, Value>, names: &[&str]) -> ApiResult<String> {
    for name in names {
        if let Some(v) = map.remove(*name) {
            return match v {
                Value::String(s) => Ok(s),
                other => Err(ApiError::bad_request(format!("`{name}` must be a string, got {other}"))),
            };
        }
    }
    Err(ApiError::bad_request(format!("missing field `{}`", names[0])))
}

fn options<T: serde::de::DeserializeOwned>(map: serde_json::Map<String, Value>) -> ApiResult<T> {
    serde_json::from_value(Value::Object(map)).map_err(|e| ApiError::bad_request(format!("invalid options: {e}")))
}

/// The deadline a request gets: what it asks, at most `max_deadline_ms`; that when it asks none.
pub(crate) fn bounded(mut opts: AskOptions, state: &AppState) -> AskOptions {
    let max = state.inner.settings.max_deadline_ms;
    opts.deadline_ms = Some(opts.deadline_ms.map_or(max, |d| d.min(max)));
    opts
}

/// Parses a JSON object from bytes: 400 for anything that is not one.
pub(crate) fn object_of(bytes: &[u8]) -> ApiResult<serde_json::Map<String, Value>> {
    match serde_json::from_slice::<Value>(bytes) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(ApiError::bad_request("the body must be a JSON object")),
        Err(e) => Err(ApiError::bad_request(format!("the body is not valid JSON: {e}"))),
    }
}

/// The body of `/v1/ask` and `/v1/query`: the question and the options.
///
/// # Errors
/// 400 for anything else.
pub fn parse_ask(bytes: &[u8]) -> ApiResult<(String, AskOptions)> {
    let mut map = object_of(bytes)?;
    let question = take_text(&mut map, &["question", "query"])?;
    Ok((question, options(map)?))
}

/// The body of `/v1/search`: the query and the options.
///
/// # Errors
/// 400 for anything else.
pub fn parse_search(bytes: &[u8]) -> ApiResult<(String, SearchOptions)> {
    let mut map = object_of(bytes)?;
    let query = take_text(&mut map, &["query", "question"])?;
    Ok((query, options(map)?))
}

/// The body of `PUT /v1/documents`: the documents of the batch.
///
/// # Errors
/// 400 for anything else.
pub fn parse_documents(bytes: &[u8]) -> ApiResult<Vec<Document>> {
    let batch: DocumentsBody = options(object_of(bytes)?)?;
    Ok(batch.documents)
}

/// The store `name` names: 404 for any name no collection has.
pub(crate) fn collection(state: &AppState, name: &str) -> ApiResult<Arc<Collection>> {
    state.inner.collections.get(name).cloned().ok_or_else(|| {
        let known: Vec<&str> = state.inner.collections.keys().map(String::as_str).collect();
        let known = if known.is_empty() { "none is configured".to_owned() } else { known.join(", ") };
        ApiError::new(StatusCode::NOT_FOUND, "not_found", format!("no collection `{name}` (collections: {known})"))
    })
}

pub(crate) async fn collection_ask(
    State(state): State<AppState>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Response> {
    let c = collection(&state, &name)?;
    answer(&state, c, &headers, body, true).await
}

pub(crate) async fn collection_query(
    State(state): State<AppState>,
    Path(name): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Response> {
    let c = collection(&state, &name)?;
    answer(&state, c, &HeaderMap::new(), body, false).await
}

pub(crate) async fn collection_search(
    State(state): State<AppState>,
    Path(name): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Response> {
    let c = collection(&state, &name)?;
    search_in(&c, body).await
}

pub(crate) async fn collection_put_documents(
    State(state): State<AppState>,
    Path(name): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Response> {
    let c = collection(&state, &name)?;
    put_documents_in(&state, &c, body).await
}

pub(crate) async fn collection_delete_document(
    State(state): State<AppState>,
    Path((name, id)): Path<(String, String)>,
) -> ApiResult<Response> {
    let c = collection(&state, &name)?;
    delete_document_in(&state, &c, id).await
}

pub(crate) async fn collection_stats(State(state): State<AppState>, Path(name): Path<String>) -> ApiResult<Response> {
    let c = collection(&state, &name)?;
    stats_in(&state, &c).await
}

/// `/v1/ask` and `/v1/query` (`generate`: ask). An ask with `Accept: text/event-stream` streams its answer as
/// Server-Sent Events ([`stream_answer`]); every other request gets the JSON response whole.
async fn answer(
    state: &AppState,
    c: Arc<Collection>,
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
    generate: bool,
) -> ApiResult<Response> {
    let (question, opts) = parse_ask(&body_bytes(body)?)?;
    let opts = bounded(opts, state);
    if generate && stream::wants_events(headers) {
        return stream_answer(state, c, question, opts).await;
    }
    let engine = c.engine.read().await;
    let response = commands::ask(&engine, &question, &opts, generate).await?;
    state.inner.metrics.observe_answer(&response);
    Ok(Json(response).into_response())
}

/// An ask answered as Server-Sent Events: `token` events (`{"text"}`) as the answer is generated, `restart`
/// (`{"reason": "retry" | "replaced"}`) when what was sent is withdrawn, then one `answer` event with the JSON
/// response `/v1/ask` sends whole (or an `error` event, `{"error": {"kind", "message"}}`, if the question's task
/// was lost). The pieces after the last restart are the answer. A request that fails before the pipeline runs
/// (invalid input) is an ordinary HTTP error.
async fn stream_answer(
    state: &AppState,
    c: Arc<Collection>,
    question: String,
    opts: AskOptions,
) -> ApiResult<Response> {
    let mut running = stream::spawn_ask(state, c, question, opts);
    let first = match running.first().await {
        Some(Ok(first)) => first,
        Some(Err(e)) => return Err(e.into()),
        None => return Err(lost()),
    };
    let events =
        futures_util::stream::unfold((Some(first), running, false), |(pending, mut running, ended)| async move {
            if ended {
                return None;
            }
            let next = match pending {
                Some(event) => Some(event),
                None => running.next().await,
            };
            let (bytes, ended) = match next {
                Some(Streamed::Token(text) | Streamed::Whole(text)) => {
                    (stream::frame(Some("token"), &serde_json::json!({ "text": text }).to_string()), false)
                }
                Some(Streamed::Restart(reason)) => (
                    stream::frame(Some("restart"), &serde_json::json!({ "reason": reason.as_str() }).to_string()),
                    false,
                ),
                Some(Streamed::Done(done)) => match *done {
                    Ok(response) => {
                        (stream::frame(Some("answer"), &serde_json::to_string(&response).unwrap_or_default()), true)
                    }
                    Err(e) => (error_event(ApiError::from(e)), true),
                },
                None => (error_event(lost()), true),
            };
            Some((bytes, (None, running, ended)))
        });
    Ok(stream::event_stream(events))
}

/// The error of a question whose task ended without an answer.
fn lost() -> ApiError {
    ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", "the question's task ended without an answer")
}

/// An `error` event with the body an error response would have.
fn error_event(e: ApiError) -> Bytes {
    let body = ErrorBody { error: ErrorDetail { kind: e.kind.to_owned(), message: e.message } };
    stream::frame(Some("error"), &serde_json::to_string(&body).unwrap_or_default())
}

pub(crate) async fn ask(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Response> {
    let c = state.inner.default.clone();
    answer(&state, c, &headers, body, true).await
}

pub(crate) async fn query(State(state): State<AppState>, body: Result<Bytes, BytesRejection>) -> ApiResult<Response> {
    let c = state.inner.default.clone();
    answer(&state, c, &HeaderMap::new(), body, false).await
}

pub(crate) async fn search(State(state): State<AppState>, body: Result<Bytes, BytesRejection>) -> ApiResult<Response> {
    search_in(&state.inner.default, body).await
}

async fn search_in(c: &Collection, body: Result<Bytes, BytesRejection>) -> ApiResult<Response> {
    let (query, opts) = parse_search(&body_bytes(body)?)?;
    let engine = c.engine.read().await;
    Ok(Json(commands::search(&engine, &query, &opts).await?).into_response())
}

/// `PUT /v1/documents`: `{"documents": [{"id", "text", "title"?, "source"?, "metadata"?}]}`, written whole (one
/// atomic write: after an error or a crash either all of it is indexed or none), at most `max_batch_documents`.
///
/// Batches go one at a time, but beside readers: chunking and embedding run under the shared engine, and the store
/// shows readers a batch whole or not at all. The approximate dense index is rebuilt in the background once enough
/// of it changed, not within the request.
pub(crate) async fn put_documents(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Response> {
    let c = state.inner.default.clone();
    put_documents_in(&state, &c, body).await
}

async fn put_documents_in(
    state: &AppState,
    c: &Arc<Collection>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Response> {
    let documents = parse_documents(&body_bytes(body)?)?;
    let max = state.inner.settings.max_batch_documents;
    if documents.len() > max {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
            format!(
                "the batch has {} documents; the server takes at most {max} per PUT ([server] max_batch_documents): \
                 split it into several batches",
                documents.len()
            ),
        ));
    }
    let _writer = c.writer.lock().await;
    let engine = c.engine.read().await;
    let report = if engine.encoder().is_some() {
        commands::index_shared(&engine, &documents).await?
    } else {
        // The store's first batch fixes its sparse space: the only write that takes the engine alone.
        drop(engine);
        let mut engine = c.engine.write().await;
        commands::index(&mut engine, &documents).await?
    };
    if c.name.is_none() {
        state.inner.metrics.set_index(report.store.documents, report.store.chunks);
    }
    refresh_in_background(c);
    Ok(Json(Indexed { indexed: report }).into_response())
}

/// Starts a rebuild of the approximate dense index when a tenth of it changed, unless one runs already.
fn refresh_in_background(c: &Arc<Collection>) {
    if c.refreshing.swap(true, Ordering::AcqRel) {
        return;
    }
    let c = c.clone();
    tokio::spawn(async move {
        let engine = c.engine.read().await.clone();
        // A failure leaves the previous index in use (exact search covers what changed); the next write retries.
        let _ = engine.refresh_dense_index(0.1).await;
        c.refreshing.store(false, Ordering::Release);
    });
}

pub(crate) async fn delete_document(State(state): State<AppState>, Path(id): Path<String>) -> ApiResult<Response> {
    let c = state.inner.default.clone();
    delete_document_in(&state, &c, id).await
}

async fn delete_document_in(state: &AppState, c: &Collection, id: String) -> ApiResult<Response> {
    let _writer = c.writer.lock().await;
    let engine = c.engine.read().await;
    if !commands::delete(&engine, &id).await? {
        return Err(ApiError::new(StatusCode::NOT_FOUND, "not_found", format!("no document `{id}` in the index")));
    }
    if c.name.is_none()
        && let Ok(s) = commands::stats(&engine).await
    {
        state.inner.metrics.set_index(s.documents, s.chunks);
    }
    Ok(Json(Deleted { deleted: id }).into_response())
}

pub(crate) async fn stats(State(state): State<AppState>) -> ApiResult<Response> {
    let c = state.inner.default.clone();
    stats_in(&state, &c).await
}

async fn stats_in(state: &AppState, c: &Collection) -> ApiResult<Response> {
    let engine = c.engine.read().await;
    let s = commands::stats(&engine).await?;
    if c.name.is_none() {
        state.inner.metrics.set_index(s.documents, s.chunks);
    }
    Ok(Json(Stats {
        store: engine.store_location(),
        stats: s,
        dense_model: engine.embedder().map(|e| e.spec().model_id.clone()),
        llm: engine.llm().map(|l| l.name().to_owned()),
        web: engine.web().map(|w| w.name().to_owned()),
        notes: engine.notes().to_vec(),
    })
    .into_response())
}

pub(crate) async fn healthz() -> Response {
    Json(Health { status: "ok".into() }).into_response()
}

/// Ready when the store can read and write (the embedded store: its database is open and its disk has room;
/// Qdrant: one health check), asked at most once a second however often the probe comes. A yes or no only: the
/// route is open without the key, so it says nothing about the index (`/v1/stats` does, behind the key).
pub(crate) async fn readyz(State(state): State<AppState>) -> Response {
    let cached = *state.inner.readiness.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let ready = match cached {
        Some((at, ready)) if at.elapsed() < Duration::from_secs(1) => ready,
        _ => {
            // Not behind the engine's lock: a first batch writing for minutes must not make the probe wait. Ready
            // when every store is.
            let mut ready = true;
            for c in std::iter::once(&state.inner.default).chain(state.inner.collections.values()) {
                let engine = c.engine.try_read().map(|e| e.clone());
                if let Ok(engine) = engine
                    && engine.ready().await.is_err()
                {
                    ready = false;
                    break;
                }
            }
            *state.inner.readiness.lock().unwrap_or_else(std::sync::PoisonError::into_inner) =
                Some((Instant::now(), ready));
            ready
        }
    };
    let status = if ready { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    (status, Json(Ready { ready })).into_response()
}

pub(crate) async fn metrics(State(state): State<AppState>) -> Response {
    let mut engines = Vec::new();
    for c in std::iter::once(&state.inner.default).chain(state.inner.collections.values()) {
        engines.push(c.engine.read().await.web_stats().clone());
    }
    state.inner.metrics.observe_web(&engines.iter().collect::<Vec<_>>());
    let text = state.inner.metrics.render();
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], text).into_response()
}

/// The SearXNG JSON API over the index (`?q=…&format=json`): the index as a search engine for the web layer.
pub(crate) async fn searxng(
    State(state): State<AppState>,
    Query(params): Query<std::collections::HashMap<String, String>>,
) -> ApiResult<Response> {
    if params.get("format").is_some_and(|f| f != "json") {
        return Err(ApiError::bad_request("only format=json is served"));
    }
    let q = params.get("q").map(String::as_str).unwrap_or_default();
    let engine = state.inner.default.engine.read().await;
    let opts = SearchOptions { top_k: Some(10), ..SearchOptions::default() };
    let hits = commands::search(&engine, q, &opts).await?.hits;
    let results: Vec<SearxResult> = hits
        .iter()
        .map(|h| {
            let url = h.chunk.source.clone().filter(|s| s.starts_with("http://") || s.starts_with("https://"));
            SearxResult {
                url: url.unwrap_or_else(|| format!("https://ragtune.invalid/doc/{}", h.chunk.doc_id)),
                title: h.chunk.title.clone().unwrap_or_else(|| h.chunk.doc_id.clone()),
                content: h.chunk.text.clone(),
                engine: "ragtune".into(),
                score: h.score,
            }
        })
        .collect();
    Ok(Json(SearxResults { query: q.to_owned(), number_of_results: results.len(), results }).into_response())
}

pub(crate) async fn page() -> Html<&'static str> {
    Html(PAGE)
}

/// The OpenAPI document, generated from the wire types (`crate::openapi`).
pub(crate) async fn openapi() -> Response {
    Json(openapi_document()).into_response()
}

async fn not_found(request: Request) -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "not_found", format!("no route {} {}", request.method(), request.uri().path()))
}

async fn method_not_allowed(request: Request) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        format!("{} is not allowed on {}", request.method(), request.uri().path()),
    )
}

/// Bearer-token check of the guarded routes, in constant time; only when a key is configured.
async fn authorize(State(state): State<AppState>, headers: HeaderMap, request: Request, next: Next) -> Response {
    if let Some(key) = &state.inner.settings.api_key {
        let given = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .unwrap_or_default();
        if !constant_time_eq(given.as_bytes(), key.expose().as_bytes()) {
            let message = if given.is_empty() {
                "an API key is required (Authorization: Bearer KEY)"
            } else {
                "the API key is not valid"
            };
            let mut response = ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", message).into_response();
            response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            return response;
        }
    }
    next.run(request).await
}

/// Whether two byte strings are equal, in time that depends only on their lengths.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = u8::from(a.len() != b.len());
    for (i, y) in b.iter().enumerate() {
        diff |= a.get(i).copied().unwrap_or(0) ^ y;
    }
    diff == 0
}

/// Whether a `Host` or `Origin` host (with or without a port) names this machine: `localhost`, a loopback
/// address, or one of `allowed`.
fn local_host(host: &str, allowed: &[String]) -> bool {
    let name = if let Some(rest) = host.strip_prefix('[') {
        rest.split(']').next().unwrap_or_default()
    } else {
        match host.rsplit_once(':') {
            Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
            _ => host,
        }
    };
    let name = name.trim_end_matches('.');
    name.eq_ignore_ascii_case("localhost")
        || name.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
        || allowed.iter().any(|a| a.eq_ignore_ascii_case(name))
}

/// On a loopback bind, refuses requests whose `Host` or `Origin` names another machine: a web page on another
/// site whose name resolves to 127.0.0.1 (DNS rebinding) or that posts to it cross-origin cannot use the server.
async fn check_host(State(state): State<AppState>, request: Request, next: Next) -> Response {
    if request.headers().get_all(header::HOST).iter().count() > 1 {
        return ApiError::bad_request("the request has more than one Host header").into_response();
    }
    if state.inner.loopback {
        let allowed = &state.inner.settings.allowed_hosts;
        let host = request
            .headers()
            .get(header::HOST)
            .map(|h| h.to_str().unwrap_or("\u{0}").to_owned())
            .or_else(|| request.uri().authority().map(|a| a.as_str().to_owned()));
        if let Some(host) = host
            && !local_host(&host, allowed)
        {
            return ApiError::new(
                StatusCode::FORBIDDEN,
                "forbidden_host",
                "this server listens on a loopback address and answers only requests for localhost (Host header); \
                 add the name to [server] allowed_hosts to serve it behind a proxy",
            )
            .into_response();
        }
        if let Some(origin) = request.headers().get(header::ORIGIN) {
            let ok = origin
                .to_str()
                .ok()
                .and_then(|o| o.strip_prefix("http://").or_else(|| o.strip_prefix("https://")))
                .is_some_and(|rest| !rest.contains('/') && local_host(rest, allowed));
            if !ok {
                return ApiError::new(
                    StatusCode::FORBIDDEN,
                    "forbidden_origin",
                    "requests from web pages of other sites are refused (Origin header)",
                )
                .into_response();
            }
        }
    }
    next.run(request).await
}

/// Reads the body whole before anything else happens to the request: within `body_timeout_secs` (408 after it),
/// at most `max_body_bytes` (413), and JSON when there is one (415), so that a slow upload never holds a request
/// slot and a browser's form post (`text/plain`, which needs no CORS preflight) is never acted on.
async fn read_body(State(state): State<AppState>, request: Request, next: Next) -> Response {
    use http_body_util::BodyExt;
    let settings = &state.inner.settings;
    let limit = settings.max_body_bytes;
    let (parts, body) = request.into_parts();
    let declared = parts.headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return too_large();
    }
    let timeout = Duration::from_secs(settings.body_timeout_secs);
    let bytes = match tokio::time::timeout(timeout, http_body_util::Limited::new(body, limit).collect()).await {
        Err(_) => {
            let mut response = ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                "timeout",
                format!("the request body did not arrive within {}s ([server] body_timeout_secs)", timeout.as_secs()),
            )
            .into_response();
            response.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
            return response;
        }
        Ok(Err(e)) if e.downcast_ref::<http_body_util::LengthLimitError>().is_some() => return too_large(),
        Ok(Err(e)) => {
            return ApiError::new(StatusCode::BAD_REQUEST, "invalid_input", format!("the body could not be read: {e}"))
                .into_response();
        }
        Ok(Ok(collected)) => collected.to_bytes(),
    };
    if !bytes.is_empty() {
        let json = parts
            .headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .is_some_and(|essence| essence.trim().eq_ignore_ascii_case("application/json"));
        if !json {
            return ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                "the body must be JSON, sent with Content-Type: application/json",
            )
            .into_response();
        }
    }
    next.run(Request::from_parts(parts, Body::from(bytes))).await
}

fn too_large() -> Response {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "too_large",
        "the request body is larger than the server accepts ([server] max_body_bytes)",
    )
    .into_response()
}

/// Admission: a slot or 503 with `Retry-After` (never a queue), then timing and counting by route and status.
async fn admit(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let route =
        request.extensions().get::<MatchedPath>().map_or_else(|| "unmatched".to_owned(), |p| p.as_str().to_owned());
    let started = Instant::now();
    // Health and metrics stay answerable under load.
    let exempt = matches!(route.as_str(), "/healthz" | "/readyz" | "/metrics");
    let permit = if exempt { None } else { Some(state.inner.slots.clone().try_acquire_owned()) };
    let response = match permit {
        Some(Err(_)) => {
            state.inner.metrics.observe_rejected();
            ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "overloaded", "every request slot is busy: retry shortly")
                .into_response()
        }
        Some(Ok(permit)) => {
            let response = next.run(request).await;
            // A stream's body outlives its handler: the slot is held until the stream ends.
            if stream::is_event_stream(&response) { stream::hold(response, permit) } else { response }
        }
        None => next.run(request).await,
    };
    state.inner.metrics.observe_http(&route, response.status().as_u16(), started.elapsed().as_secs_f64());
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_compare_whole() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secreT", b"secret"));
        assert!(!constant_time_eq(b"secret-and-more", b"secret"));
        assert!(!constant_time_eq(b"", b"secret"));
    }

    #[test]
    fn every_route_of_the_table_has_a_known_method_and_one_entry() {
        for r in crate::openapi::ROUTES {
            assert!(method_filter(r.method).is_some(), "{} {} has an unknown method", r.method, r.path);
            let same = crate::openapi::ROUTES.iter().filter(|o| o.path == r.path && o.method == r.method).count();
            assert_eq!(same, 1, "{} {} is listed {same} times", r.method, r.path);
        }
        assert!(method_filter("patch").is_none());
        let open: Vec<&str> = crate::openapi::ROUTES.iter().filter(|r| r.open).map(|r| r.path).collect();
        assert_eq!(open, ["/healthz", "/readyz", "/"], "only liveness, readiness and the page are open");
    }

    #[test]
    fn every_route_is_in_the_openapi_document_with_schemas_from_the_types() {
        let doc = openapi_document();
        for r in crate::openapi::ROUTES {
            assert!(doc["paths"][r.path][r.method].is_object(), "{} {}", r.method, r.path);
        }
        let listed: usize = doc["paths"].as_object().unwrap().values().map(|p| p.as_object().unwrap().len()).sum();
        assert_eq!(listed, crate::openapi::ROUTES.len());
        // Every reference resolves to a schema in the components.
        let text = doc.to_string();
        let schemas = doc["components"]["schemas"].as_object().unwrap();
        for part in text.split("\"$ref\":\"#/components/schemas/").skip(1) {
            let name = part.split('"').next().unwrap();
            assert!(schemas.contains_key(name), "unresolved $ref {name}");
        }
        // The bodies are the types': the ask body has the question and the facade's options, the answer the
        // pipeline's fields, a document its required id and text.
        let ask = &schemas["AskBody"];
        assert_eq!(ask["required"], serde_json::json!(["question"]));
        for field in ["question", "use_crag", "use_web", "top_k", "deadline_ms", "trace"] {
            assert!(ask["properties"][field].is_object(), "AskBody.{field}: {ask}");
        }
        for field in
            ["answer", "citations", "context", "crag", "faithfulness", "triangulation", "cost", "trace", "notes"]
        {
            assert!(schemas["AskResponse"]["properties"][field].is_object(), "AskResponse.{field}");
        }
        for field in ["ttft_ms", "generation_ms"] {
            assert!(schemas["AskResponse"]["properties"][field].is_object(), "AskResponse.{field}");
        }
        let ask = &doc["paths"]["/v1/ask"]["post"]["responses"]["200"];
        assert!(ask["content"]["text/event-stream"].is_object() && ask["content"]["application/json"].is_object());
        assert!(ask["description"].as_str().is_some_and(|d| d.contains("`token`")), "{ask}");
        assert!(schemas["AskBody"]["properties"].get("tokens").is_none(), "the token sink is no request field");
        for field in ["decision", "category", "score", "web_search_used", "web_providers"] {
            assert!(schemas["CragMetadata"]["properties"][field].is_object(), "CragMetadata.{field}");
        }
        let required = schemas["Document"]["required"].as_array().unwrap();
        assert!(required.contains(&"id".into()) && required.contains(&"text".into()), "{required:?}");
    }

    #[test]
    fn engine_errors_map_to_statuses_bad_input_never_500() {
        let status = |e: Error| ApiError::from(e).status;
        assert_eq!(status(Error::invalid_input("x")), StatusCode::BAD_REQUEST);
        assert_eq!(status(Error::not_found("x")), StatusCode::NOT_FOUND);
        assert_eq!(status(Error::unavailable("x")), StatusCode::SERVICE_UNAVAILABLE);
    }
}
