//! Routes, handlers and the JSON error shape.

use std::time::Instant;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, MatchedPath, Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{delete, get, post, put};
use axum::{Json, Router};
use ragtune::commands::{self, AskOptions, SearchOptions};
use ragtune::core::{Document, Error, ErrorKind};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::AppState;

/// The page at `/`: one self-contained file, no build step, no CDN.
const PAGE: &str = include_str!("page.html");

/// Every route: method and path, as `/openapi.json` lists them.
pub const ROUTES: [(&str, &str); 12] = [
    ("post", "/v1/ask"),
    ("post", "/v1/query"),
    ("post", "/v1/search"),
    ("put", "/v1/documents"),
    ("delete", "/v1/documents/{id}"),
    ("get", "/v1/stats"),
    ("get", "/healthz"),
    ("get", "/readyz"),
    ("get", "/metrics"),
    ("get", "/openapi.json"),
    ("get", "/searxng/search"),
    ("get", "/"),
];

/// The router over `state`.
pub fn router(state: AppState) -> Router {
    let limit = state.inner.settings.max_body_bytes;
    let guarded = Router::new()
        .route("/v1/ask", post(ask))
        .route("/v1/query", post(query))
        .route("/v1/search", post(search))
        .route("/v1/documents", put(put_documents))
        .route("/v1/documents/{id}", delete(delete_document))
        .route("/v1/stats", get(stats))
        .route("/metrics", get(metrics))
        .route("/openapi.json", get(openapi))
        .route_layer(middleware::from_fn_with_state(state.clone(), authorize));
    Router::new()
        .merge(guarded)
        .route("/searxng/search", get(searxng))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/", get(page))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn_with_state(state.clone(), admit))
        .layer(DefaultBodyLimit::max(limit))
        .with_state(state)
}

/// An error as JSON: `{"error": {"kind", "message"}}`.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    kind: &'static str,
    message: String,
}

impl ApiError {
    fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> Self {
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
        let body = Json(json!({ "error": { "kind": self.kind, "message": self.message } }));
        let mut response = (self.status, body).into_response();
        if self.status == StatusCode::SERVICE_UNAVAILABLE || self.status == StatusCode::TOO_MANY_REQUESTS {
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        response
    }
}

type ApiResult<T> = Result<T, ApiError>;

/// The body's bytes: 413 above the size limit.
fn body_bytes(body: Result<Bytes, BytesRejection>) -> ApiResult<Bytes> {
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
fn bounded(mut opts: AskOptions, state: &AppState) -> AskOptions {
    let max = state.inner.settings.max_deadline_ms;
    opts.deadline_ms = Some(opts.deadline_ms.map_or(max, |d| d.min(max)));
    opts
}

/// Parses a JSON object from bytes: 400 for anything that is not one.
fn object_of(bytes: &[u8]) -> ApiResult<serde_json::Map<String, Value>> {
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
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Batch {
        documents: Vec<Document>,
    }
    let batch: Batch = options(object_of(bytes)?)?;
    Ok(batch.documents)
}

async fn answer(state: AppState, body: Result<Bytes, BytesRejection>, generate: bool) -> ApiResult<Response> {
    let (question, opts) = parse_ask(&body_bytes(body)?)?;
    let opts = bounded(opts, &state);
    let engine = state.inner.engine.read().await;
    let response = commands::ask(&engine, &question, &opts, generate).await?;
    state.inner.metrics.observe_answer(&response);
    Ok(Json(response).into_response())
}

async fn ask(State(state): State<AppState>, body: Result<Bytes, BytesRejection>) -> ApiResult<Response> {
    answer(state, body, true).await
}

async fn query(State(state): State<AppState>, body: Result<Bytes, BytesRejection>) -> ApiResult<Response> {
    answer(state, body, false).await
}

async fn search(State(state): State<AppState>, body: Result<Bytes, BytesRejection>) -> ApiResult<Response> {
    let (query, opts) = parse_search(&body_bytes(body)?)?;
    let engine = state.inner.engine.read().await;
    Ok(Json(commands::search(&engine, &query, &opts).await?).into_response())
}

/// `PUT /v1/documents`: `{"documents": [{"id", "text", "title"?, "source"?, "metadata"?}]}`, written as one batch.
async fn put_documents(State(state): State<AppState>, body: Result<Bytes, BytesRejection>) -> ApiResult<Response> {
    let documents = parse_documents(&body_bytes(body)?)?;
    let mut engine = state.inner.engine.write().await;
    let report = commands::index(&mut engine, &documents).await?;
    if let Ok(s) = commands::stats(&engine).await {
        state.inner.metrics.set_index(s.documents, s.chunks);
    }
    Ok(Json(json!({ "indexed": report })).into_response())
}

async fn delete_document(State(state): State<AppState>, Path(id): Path<String>) -> ApiResult<Response> {
    let engine = state.inner.engine.write().await;
    if !commands::delete(&engine, &id).await? {
        return Err(ApiError::new(StatusCode::NOT_FOUND, "not_found", format!("no document `{id}` in the index")));
    }
    if let Ok(s) = commands::stats(&engine).await {
        state.inner.metrics.set_index(s.documents, s.chunks);
    }
    Ok(Json(json!({ "deleted": id })).into_response())
}

async fn stats(State(state): State<AppState>) -> ApiResult<Response> {
    let engine = state.inner.engine.read().await;
    let s = commands::stats(&engine).await?;
    state.inner.metrics.set_index(s.documents, s.chunks);
    Ok(Json(json!({ "store": engine.store_location(), "stats": s, "notes": engine.notes() })).into_response())
}

async fn healthz() -> Response {
    Json(json!({ "status": "ok" })).into_response()
}

/// Ready when the store answers; the models, the LLM and the web are reported, not required.
async fn readyz(State(state): State<AppState>) -> Response {
    let engine = state.inner.engine.read().await;
    let store = commands::stats(&engine).await;
    let body = json!({
        "ready": store.is_ok(),
        "store": match &store { Ok(s) => json!({"ok": true, "chunks": s.chunks}), Err(e) => json!({"ok": false, "error": e.to_string()}) },
        "dense_model": engine.embedder().map(|e| e.spec().model_id.clone()),
        "llm": engine.llm().map(|l| l.name().to_owned()),
        "web": engine.web().map(|w| w.name().to_owned()),
        "notes": engine.notes(),
    });
    let status = if store.is_ok() { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    (status, Json(body)).into_response()
}

async fn metrics(State(state): State<AppState>) -> Response {
    let text = state.inner.metrics.render();
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], text).into_response()
}

/// The SearXNG JSON API over the index (`?q=…&format=json`): the index as a search engine for the web layer.
async fn searxng(
    State(state): State<AppState>,
    Query(params): Query<std::collections::HashMap<String, String>>,
) -> ApiResult<Response> {
    if params.get("format").is_some_and(|f| f != "json") {
        return Err(ApiError::bad_request("only format=json is served"));
    }
    let q = params.get("q").map(String::as_str).unwrap_or_default();
    let engine = state.inner.engine.read().await;
    let opts = SearchOptions { top_k: Some(10), ..SearchOptions::default() };
    let hits = commands::search(&engine, q, &opts).await?.hits;
    let results: Vec<Value> = hits
        .iter()
        .map(|h| {
            let url = h.chunk.source.clone().filter(|s| s.starts_with("http://") || s.starts_with("https://"));
            json!({
                "url": url.unwrap_or_else(|| format!("https://ragtune.invalid/doc/{}", h.chunk.doc_id)),
                "title": h.chunk.title.clone().unwrap_or_else(|| h.chunk.doc_id.clone()),
                "content": h.chunk.text,
                "engine": "ragtune",
                "score": h.score,
            })
        })
        .collect();
    Ok(Json(json!({ "query": q, "number_of_results": results.len(), "results": results })).into_response())
}

async fn page() -> Html<&'static str> {
    Html(PAGE)
}

/// A minimal OpenAPI 3.1 document of the routes (their request fields; responses as JSON objects).
async fn openapi() -> Response {
    Json(openapi_document()).into_response()
}

/// The OpenAPI document.
#[must_use]
pub fn openapi_document() -> Value {
    let ask_body = json!({"type": "object", "required": ["question"], "properties": {
        "question": {"type": "string"}, "use_crag": {"type": "boolean"}, "use_web": {"type": "boolean"},
        "top_k": {"type": "integer", "minimum": 1}, "deadline_ms": {"type": "integer", "minimum": 1},
        "trace": {"type": "boolean"}}});
    let search_body = json!({"type": "object", "required": ["query"], "properties": {
        "query": {"type": "string"}, "top_k": {"type": "integer", "minimum": 1},
        "strategy": {"type": "string", "enum": ["auto", "bm25", "dense", "hybrid"]}, "trace": {"type": "boolean"}}});
    let docs_body = json!({"type": "object", "required": ["documents"], "properties": {"documents": {"type": "array",
        "items": {"type": "object", "required": ["id", "text"], "properties": {"id": {"type": "string"},
        "text": {"type": "string"}, "title": {"type": "string"}, "source": {"type": "string"},
        "metadata": {"type": "object"}}}}}});
    let error = json!({"type": "object", "properties": {"error": {"type": "object", "properties": {
        "kind": {"type": "string"}, "message": {"type": "string"}}}}});
    let mut paths = serde_json::Map::new();
    for (method, path) in ROUTES {
        let body = match path {
            "/v1/ask" | "/v1/query" => Some(ask_body.clone()),
            "/v1/search" => Some(search_body.clone()),
            "/v1/documents" => Some(docs_body.clone()),
            _ => None,
        };
        let mut op = json!({"responses": {"200": {"description": "OK"}, "default": {"description": "An error",
            "content": {"application/json": {"schema": error.clone()}}}}});
        if let Some(schema) = body {
            op["requestBody"] = json!({"required": true, "content": {"application/json": {"schema": schema}}});
        }
        let entry = paths.entry(path.to_owned()).or_insert_with(|| json!({}));
        entry[method] = op;
    }
    json!({"openapi": "3.1.0", "info": {"title": "ragtune", "version": env!("CARGO_PKG_VERSION")}, "paths": paths})
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
        Some(Ok(_permit)) => next.run(request).await,
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
    fn every_route_is_in_the_openapi_document() {
        let doc = openapi_document();
        for (method, path) in ROUTES {
            assert!(doc["paths"][path][method].is_object(), "{method} {path}");
        }
        let listed: usize = doc["paths"].as_object().unwrap().values().map(|p| p.as_object().unwrap().len()).sum();
        assert_eq!(listed, ROUTES.len());
    }

    #[test]
    fn engine_errors_map_to_statuses_bad_input_never_500() {
        let status = |e: Error| ApiError::from(e).status;
        assert_eq!(status(Error::invalid_input("x")), StatusCode::BAD_REQUEST);
        assert_eq!(status(Error::not_found("x")), StatusCode::NOT_FOUND);
        assert_eq!(status(Error::unavailable("x")), StatusCode::SERVICE_UNAVAILABLE);
    }
}
