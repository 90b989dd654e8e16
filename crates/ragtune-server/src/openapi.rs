//! The wire types of the API and the OpenAPI document generated from them (JSON Schemas by `schemars`, ADR 0011).
//!
//! Every JSON body the handlers read or write is one of these types or a facade type (`AskResponse`,
//! `SearchResponse`, `IndexReport`, `Document`, `AskOptions`, `SearchOptions`), so the document describes what the
//! server really sends. The paths come from [`ROUTES`], the table the router is checked against.

use ragtune::commands::{AskOptions, SearchOptions};
use ragtune::core::{Document, StoreStats};
use ragtune::{AskResponse, IndexReport, SearchResponse};
use schemars::generate::SchemaSettings;
use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::openai::{ChatCompletion, ChatRequest, ModelList, OpenAiErrorBody};

/// The body of `POST /v1/ask` and `POST /v1/query`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct AskBody {
    /// The question (`query` is accepted as an alias).
    pub question: String,
    /// Per-request options; unset ones keep the server's configuration.
    #[serde(flatten)]
    pub options: AskOptions,
}

/// The body of `POST /v1/search`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct SearchBody {
    /// The query (`question` is accepted as an alias).
    pub query: String,
    /// Per-request options.
    #[serde(flatten)]
    pub options: SearchOptions,
}

/// The body of `PUT /v1/documents`: one batch, written atomically.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DocumentsBody {
    /// The documents (`id` and `text` required; `title`, `source`, `metadata` optional).
    pub documents: Vec<Document>,
}

/// The answer to `PUT /v1/documents`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Indexed {
    /// What the batch wrote.
    pub indexed: IndexReport,
}

/// The answer to `DELETE /v1/documents/{id}`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Deleted {
    /// The id of the deleted document.
    pub deleted: String,
}

/// The answer to `GET /v1/stats`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Stats {
    /// Where the index lives (a directory, or the Qdrant URL and collection).
    pub store: String,
    /// Counts of the store.
    pub stats: StoreStats,
    /// The dense model loaded, if any.
    pub dense_model: Option<String>,
    /// The LLM configured, if any.
    pub llm: Option<String>,
    /// The web search configured, if any.
    pub web: Option<String>,
    /// What the engine runs without (no dense model, say).
    pub notes: Vec<String>,
}

/// The answer to `GET /healthz`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Health {
    /// Always `ok`: the process is up.
    pub status: String,
}

/// The answer to `GET /readyz` (503 when not ready): a yes or no and nothing else, so that it can stay open to
/// load balancers without the key. The details are in `GET /v1/stats`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Ready {
    /// Ready to answer: the store can read and write.
    pub ready: bool,
}

/// One result of `GET /searxng/search` (SearXNG's JSON format).
#[derive(Debug, Serialize, JsonSchema)]
pub struct SearxResult {
    /// The document's `source` when it is an http(s) URL, else `https://ragtune.invalid/doc/ID`.
    pub url: String,
    /// The document's title, else its id.
    pub title: String,
    /// The passage.
    pub content: String,
    /// Always `ragtune`.
    pub engine: String,
    /// The retrieval score.
    pub score: f32,
}

/// The answer to `GET /searxng/search`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct SearxResults {
    /// The query as received.
    pub query: String,
    /// How many results follow.
    pub number_of_results: usize,
    /// The results, best first.
    pub results: Vec<SearxResult>,
}

/// What an error says.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ErrorDetail {
    /// `invalid_input`, `unauthorized`, `not_found`, `too_large`, `overloaded`, `unavailable`, …
    pub kind: String,
    /// A sentence for people.
    pub message: String,
}

/// Every error: `{"error": {"kind", "message"}}`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ErrorBody {
    /// The error.
    pub error: ErrorDetail,
}

/// What a route reads or answers.
#[derive(Debug, Clone, Copy)]
pub enum Body {
    /// No body.
    None,
    /// JSON of a type (its schema).
    Json(fn(&mut SchemaGenerator) -> Schema),
    /// Another media type.
    Other(&'static str),
}

/// One route of the API.
#[derive(Debug, Clone, Copy)]
pub struct Route {
    /// `get`, `post`, `put` or `delete`.
    pub method: &'static str,
    /// The path, with `{id}` for a parameter.
    pub path: &'static str,
    /// One line on what it does.
    pub summary: &'static str,
    /// The request body.
    pub request: Body,
    /// The success response body.
    pub response: Body,
    /// Reached without the API key: liveness, readiness (a yes or no) and the page (static HTML that holds no
    /// data; it sends the key the user types with each request). Every other route needs the key when one is
    /// configured.
    pub open: bool,
    /// The handler, for the route's method.
    pub(crate) handler: Handler,
}

/// A route's handler for its method (the router's `on(filter, handler)`).
pub(crate) type Handler = fn(axum::routing::MethodFilter) -> axum::routing::MethodRouter<crate::AppState>;

fn schema<T: JsonSchema>(generator: &mut SchemaGenerator) -> Schema {
    generator.subschema_for::<T>()
}

/// Every route the router serves.
pub static ROUTES: &[Route] = &[
    Route {
        method: "post",
        path: "/v1/ask",
        summary: "Answer a question with citations, CRAG metadata, faithfulness and cost (`Accept: text/event-stream`: \
                  the answer streamed as Server-Sent Events, then the same response)",
        request: Body::Json(schema::<AskBody>),
        response: Body::Json(schema::<AskResponse>),
        open: false,
        handler: |filter| axum::routing::on(filter, crate::api::ask),
    },
    Route {
        method: "post",
        path: "/v1/query",
        summary: "The grounded context for a question, without generating an answer",
        request: Body::Json(schema::<AskBody>),
        response: Body::Json(schema::<AskResponse>),
        open: false,
        handler: |filter| axum::routing::on(filter, crate::api::query),
    },
    Route {
        method: "post",
        path: "/v1/search",
        summary: "Ranked passages for a query",
        request: Body::Json(schema::<SearchBody>),
        response: Body::Json(schema::<SearchResponse>),
        open: false,
        handler: |filter| axum::routing::on(filter, crate::api::search),
    },
    Route {
        method: "put",
        path: "/v1/documents",
        summary: "Upsert a batch of documents (atomic per batch)",
        request: Body::Json(schema::<DocumentsBody>),
        response: Body::Json(schema::<Indexed>),
        open: false,
        handler: |filter| axum::routing::on(filter, crate::api::put_documents),
    },
    Route {
        method: "delete",
        path: "/v1/documents/{id}",
        summary: "Delete a document and its chunks",
        request: Body::None,
        response: Body::Json(schema::<Deleted>),
        open: false,
        handler: |filter| axum::routing::on(filter, crate::api::delete_document),
    },
    Route {
        method: "get",
        path: "/v1/stats",
        summary: "Counts of the index",
        request: Body::None,
        response: Body::Json(schema::<Stats>),
        open: false,
        handler: |filter| axum::routing::on(filter, crate::api::stats),
    },
    Route {
        method: "post",
        path: "/v1/chat/completions",
        summary: "OpenAI-compatible chat: the last user message answered through the pipeline, with numbered sources \
                  (`stream: true`: Server-Sent Events of `chat.completion.chunk`, the LLM's tokens as they come); errors \
                  in OpenAI's shape",
        request: Body::Json(schema::<ChatRequest>),
        response: Body::Json(schema::<ChatCompletion>),
        open: false,
        handler: |filter| axum::routing::on(filter, crate::openai::chat_completions),
    },
    Route {
        method: "get",
        path: "/v1/models",
        summary: "OpenAI-compatible model list: `ragtune` (the default store) and `ragtune:NAME` per collection",
        request: Body::None,
        response: Body::Json(schema::<ModelList>),
        open: false,
        handler: |filter| axum::routing::on(filter, crate::openai::models),
    },
    Route {
        method: "post",
        path: "/v1/collections/{name}/ask",
        summary: "`/v1/ask` on the collection `name`",
        request: Body::Json(schema::<AskBody>),
        response: Body::Json(schema::<AskResponse>),
        open: false,
        handler: |filter| axum::routing::on(filter, crate::api::collection_ask),
    },
    Route {
        method: "post",
        path: "/v1/collections/{name}/query",
        summary: "`/v1/query` on the collection `name`",
        request: Body::Json(schema::<AskBody>),
        response: Body::Json(schema::<AskResponse>),
        open: false,
        handler: |filter| axum::routing::on(filter, crate::api::collection_query),
    },
    Route {
        method: "post",
        path: "/v1/collections/{name}/search",
        summary: "`/v1/search` on the collection `name`",
        request: Body::Json(schema::<SearchBody>),
        response: Body::Json(schema::<SearchResponse>),
        open: false,
        handler: |filter| axum::routing::on(filter, crate::api::collection_search),
    },
    Route {
        method: "put",
        path: "/v1/collections/{name}/documents",
        summary: "`PUT /v1/documents` on the collection `name`",
        request: Body::Json(schema::<DocumentsBody>),
        response: Body::Json(schema::<Indexed>),
        open: false,
        handler: |filter| axum::routing::on(filter, crate::api::collection_put_documents),
    },
    Route {
        method: "delete",
        path: "/v1/collections/{name}/documents/{id}",
        summary: "`DELETE /v1/documents/{id}` on the collection `name`",
        request: Body::None,
        response: Body::Json(schema::<Deleted>),
        open: false,
        handler: |filter| axum::routing::on(filter, crate::api::collection_delete_document),
    },
    Route {
        method: "get",
        path: "/v1/collections/{name}/stats",
        summary: "`/v1/stats` of the collection `name`",
        request: Body::None,
        response: Body::Json(schema::<Stats>),
        open: false,
        handler: |filter| axum::routing::on(filter, crate::api::collection_stats),
    },
    Route {
        method: "get",
        path: "/healthz",
        summary: "The process is up",
        request: Body::None,
        response: Body::Json(schema::<Health>),
        open: true,
        handler: |filter| axum::routing::on(filter, crate::api::healthz),
    },
    Route {
        method: "get",
        path: "/readyz",
        summary: "Whether the store can read and write: `{\"ready\": bool}`, no details (open without the key)",
        request: Body::None,
        response: Body::Json(schema::<Ready>),
        open: true,
        handler: |filter| axum::routing::on(filter, crate::api::readyz),
    },
    Route {
        method: "get",
        path: "/metrics",
        summary: "Prometheus metrics (text exposition format)",
        request: Body::None,
        response: Body::Other("text/plain; version=0.0.4"),
        open: false,
        handler: |filter| axum::routing::on(filter, crate::api::metrics),
    },
    Route {
        method: "get",
        path: "/openapi.json",
        summary: "This document",
        request: Body::None,
        response: Body::Other("application/json"),
        open: false,
        handler: |filter| axum::routing::on(filter, crate::api::openapi),
    },
    Route {
        method: "get",
        path: "/searxng/search",
        summary: "The index as a SearXNG-compatible search engine (`?q=…&format=json`)",
        request: Body::None,
        response: Body::Json(schema::<SearxResults>),
        open: false,
        handler: |filter| axum::routing::on(filter, crate::api::searxng),
    },
    Route {
        method: "get",
        path: "/",
        summary: "The page: ask, see the answer, citations, CRAG decision, cost and trace",
        request: Body::None,
        response: Body::Other("text/html"),
        open: true,
        handler: |filter| axum::routing::on(filter, crate::api::page),
    },
];

/// What an ask route sends with `Accept: text/event-stream` (docs/server.md, "Streamed answers").
const ASK_EVENTS: &str = "OK: the JSON response; with `Accept: text/event-stream`, Server-Sent Events as the answer is \
    generated: `token` events (`{\"text\"}`, the next piece of the answer), `restart` (`{\"reason\": \"retry\" | \
    \"replaced\"}`: what was sent is withdrawn, what follows replaces it), then one `answer` event with the JSON \
    response (or `error`, `{\"error\": {\"kind\", \"message\"}}`). The pieces after the last restart are the answer.";

/// The OpenAPI 3.1 document: the paths of [`ROUTES`], their bodies as JSON Schemas generated from the types.
#[must_use]
pub fn openapi_document() -> Value {
    let mut generator =
        SchemaSettings::draft2020_12().with(|s| s.definitions_path = "/components/schemas".into()).into_generator();
    let error = schema::<ErrorBody>(&mut generator);
    let openai_error = schema::<OpenAiErrorBody>(&mut generator);
    let mut paths = serde_json::Map::new();
    for route in ROUTES {
        let content = |body: Body, generator: &mut SchemaGenerator| match body {
            Body::None => None,
            Body::Json(f) => Some(json!({"application/json": {"schema": f(generator)}})),
            Body::Other(media) => Some(json!({ media: {} })),
        };
        let mut ok = json!({"description": "OK"});
        if let Some(c) = content(route.response, &mut generator) {
            ok["content"] = c;
        }
        if route.method == "post" && route.path.ends_with("/ask") {
            ok["description"] = json!(ASK_EVENTS);
            ok["content"]["text/event-stream"] = json!({"schema": {"type": "string"}});
        }
        let error = if matches!(route.path, "/v1/chat/completions" | "/v1/models") { &openai_error } else { &error };
        let mut op = json!({
            "summary": route.summary,
            "responses": {"200": ok, "default": {"description": "An error",
                "content": {"application/json": {"schema": error.clone()}}}}
        });
        if !route.open {
            op["security"] = json!([{"bearer": []}]);
        }
        if let Some(c) = content(route.request, &mut generator) {
            op["requestBody"] = json!({"required": true, "content": c});
        }
        let params: Vec<Value> = route
            .path
            .split('{')
            .skip(1)
            .filter_map(|p| p.split_once('}').map(|(name, _)| name))
            .map(|name| json!({"name": name, "in": "path", "required": true, "schema": {"type": "string"}}))
            .collect();
        if !params.is_empty() {
            op["parameters"] = Value::Array(params);
        }
        if route.path == "/searxng/search" {
            op["parameters"] = json!([
                {"name": "q", "in": "query", "required": true, "schema": {"type": "string"}},
                {"name": "format", "in": "query", "required": false, "schema": {"type": "string", "enum": ["json"]}}
            ]);
        }
        let entry = paths.entry(route.path.to_owned()).or_insert_with(|| json!({}));
        entry[route.method] = op;
    }
    let schemas: serde_json::Map<String, Value> = generator.take_definitions(true);
    json!({
        "openapi": "3.1.0",
        "info": {"title": "ragtune", "version": env!("CARGO_PKG_VERSION")},
        "paths": paths,
        "components": {"schemas": schemas, "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}}
    })
}
