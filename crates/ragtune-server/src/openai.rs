//! The OpenAI-compatible routes (docs/openai.md): `POST /v1/chat/completions` answers the last user message through
//! the whole pipeline ([`ragtune::commands::ask`], like `/v1/ask`), and `GET /v1/models` lists the stores as
//! models (`ragtune`, `ragtune:NAME` for each collection).
//!
//! The answer's content is the answer with its `[n]` markers, then a `Sources:` list; the citations and the CRAG
//! decision are also in an extra top-level field, `ragtune`, which OpenAI clients ignore. With `stream: true` the
//! answer is sent as Server-Sent Events of `chat.completion.chunk` objects as it is generated: the LLM's tokens as
//! they come, an extractive answer (which exists only whole) in word-sized deltas, then the sources; when the
//! pipeline withdraws what it streamed (a retry, or an answer that replaces it), a notice in the content says so
//! ([`restart_notice`]) and the answer that replaces it follows. Errors on these routes are in OpenAI's shape,
//! `{"error": {"message", "type", "param", "code"}}`, with ragtune's `kind` beside them.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::Json;
use axum::body::{Body, Bytes};
use axum::extract::rejection::BytesRejection;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use ragtune::commands::{self, AskOptions};
use ragtune::pipeline::{PipelineCost, RestartReason};
use ragtune::{AskResponse, Citation, CragMetadata};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::AppState;
use crate::api::{ApiError, body_bytes, bounded, collection};
use crate::stream::{self, Streamed};

/// The model name of the default store.
pub const DEFAULT_MODEL: &str = "ragtune";

/// The body of `POST /v1/chat/completions`. Every other OpenAI parameter (`temperature`, `max_tokens`, `top_p`,
/// `user`, `stop`, `seed`, `tools`, …) is accepted and ignored.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct ChatRequest {
    /// `ragtune` (the default store), `ragtune:NAME` or `NAME` (a collection); `ragtune` when absent.
    #[serde(default)]
    pub model: Option<String>,
    /// The conversation; the last `user` message is the question (the others are not used).
    pub messages: Vec<ChatMessage>,
    /// Send the answer as Server-Sent Events of `chat.completion.chunk` objects.
    #[serde(default)]
    pub stream: Option<bool>,
    /// `{"include_usage": true}` adds a last chunk with the usage and no choices.
    #[serde(default)]
    pub stream_options: Option<StreamOptions>,
    /// Answers wanted: 1 only.
    #[serde(default)]
    pub n: Option<u64>,
    /// ragtune's own options (as `/v1/ask`: `use_crag`, `use_web`, `top_k`, `deadline_ms`, `trace`); the deadline is
    /// bounded by `[server] max_deadline_ms`.
    #[serde(default)]
    pub ragtune: Option<AskOptions>,
}

/// `stream_options`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
pub struct StreamOptions {
    /// Send a last chunk with the usage.
    #[serde(default)]
    pub include_usage: Option<bool>,
}

/// One message of the conversation.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct ChatMessage {
    /// `system`, `developer`, `user`, `assistant`, `tool`, …
    pub role: String,
    /// A string, or an array of parts of which the `text` ones are read.
    #[serde(default)]
    pub content: Option<MessageContent>,
}

/// A message's content: a string or the array-of-parts form.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum MessageContent {
    /// Plain text.
    Text(String),
    /// Parts: `{"type": "text", "text": …}` are read, others (images, audio) ignored.
    Parts(Vec<ContentPart>),
}

/// One part of an array content.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct ContentPart {
    /// `text`, `image_url`, …
    #[serde(rename = "type")]
    pub kind: String,
    /// The text of a `text` part.
    #[serde(default)]
    pub text: Option<String>,
}

/// Token counts: the LLM tokens the pipeline spent on the question (every call); the completion is the answer's
/// estimate, the prompt the rest. All 0 for an extractive answer (no LLM).
#[derive(Debug, Clone, Copy, Serialize, JsonSchema)]
pub struct Usage {
    /// Tokens of the prompts.
    pub prompt_tokens: u64,
    /// Tokens of the answer.
    pub completion_tokens: u64,
    /// Both.
    pub total_tokens: u64,
}

/// The assistant's message.
#[derive(Debug, Serialize, JsonSchema)]
pub struct AssistantMessage {
    /// Always `assistant`.
    pub role: String,
    /// The answer with its `[n]` markers, then `Sources:` and one `[n] title — doc_id` line per citation.
    pub content: String,
    /// Always null.
    pub refusal: Option<String>,
}

/// One choice (there is one).
#[derive(Debug, Serialize, JsonSchema)]
pub struct Choice {
    /// 0.
    pub index: u32,
    /// The answer.
    pub message: AssistantMessage,
    /// Always null.
    pub logprobs: Option<Value>,
    /// `stop`.
    pub finish_reason: String,
}

/// What ragtune adds to a completion (clients that do not know it ignore it).
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct RagtuneExtra {
    /// The collection that answered (`None`: the default store).
    pub collection: Option<String>,
    /// The sources the answer cites, in citation order.
    pub citations: Vec<Citation>,
    /// The Corrective-RAG decision of the first retrieval.
    pub crag: CragMetadata,
    /// What the question cost (stages, LLM tokens and calls, time).
    pub cost: PipelineCost,
    /// What was skipped, degraded or fell back, as sentences.
    pub notes: Vec<Value>,
}

/// The answer to `POST /v1/chat/completions` (OpenAI's `chat.completion`).
#[derive(Debug, Serialize, JsonSchema)]
pub struct ChatCompletion {
    /// `chatcmpl-…`.
    pub id: String,
    /// `chat.completion`.
    pub object: String,
    /// Unix seconds.
    pub created: u64,
    /// The model that answered (`ragtune` or `ragtune:NAME`).
    pub model: String,
    /// One choice.
    pub choices: Vec<Choice>,
    /// Token counts.
    pub usage: Usage,
    /// The citations, CRAG decision, cost and notes.
    pub ragtune: RagtuneExtra,
}

/// A chunk's delta.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Delta {
    /// `assistant` in the first chunk.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// A piece of the content.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
}

/// A chunk's choice.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ChunkChoice {
    /// 0.
    pub index: u32,
    /// What this chunk adds.
    pub delta: Delta,
    /// Always null.
    pub logprobs: Option<Value>,
    /// `stop` in the last chunk of the choice, else null.
    pub finish_reason: Option<String>,
}

/// One Server-Sent Event of a streamed completion (OpenAI's `chat.completion.chunk`), sent as `data: {…}`; the
/// stream ends with `data: [DONE]`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ChatCompletionChunk {
    /// The same for every chunk of a completion.
    pub id: String,
    /// `chat.completion.chunk`.
    pub object: String,
    /// Unix seconds.
    pub created: u64,
    /// The model that answered.
    pub model: String,
    /// One choice, or none in the usage chunk.
    pub choices: Vec<ChunkChoice>,
    /// In the last chunk when `stream_options.include_usage`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// In the chunk with `finish_reason`: the citations, CRAG decision, cost and notes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ragtune: Option<RagtuneExtra>,
}

/// One model of `GET /v1/models`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Model {
    /// `ragtune` or `ragtune:NAME`.
    pub id: String,
    /// `model`.
    pub object: String,
    /// Unix seconds (when the server started).
    pub created: u64,
    /// `ragtune`.
    pub owned_by: String,
}

/// The answer to `GET /v1/models` (OpenAI's list shape).
#[derive(Debug, Serialize, JsonSchema)]
pub struct ModelList {
    /// `list`.
    pub object: String,
    /// The default store, then each collection by name.
    pub data: Vec<Model>,
}

/// What an OpenAI error says.
#[derive(Debug, Serialize, JsonSchema)]
pub struct OpenAiErrorDetail {
    /// A sentence for people.
    pub message: String,
    /// `invalid_request_error`, `authentication_error`, `permission_error` or `server_error`.
    #[serde(rename = "type")]
    pub kind_of: String,
    /// The request field at fault, if one is.
    pub param: Option<String>,
    /// ragtune's error kind (`invalid_input`, `model_not_found`, `unauthorized`, `overloaded`, …).
    pub code: Option<String>,
    /// The same kind, as every ragtune error carries it.
    pub kind: String,
}

/// Every error of the OpenAI routes: `{"error": {"message", "type", "param", "code"}}`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct OpenAiErrorBody {
    /// The error.
    pub error: OpenAiErrorDetail,
}

/// An error of the OpenAI routes.
#[derive(Debug)]
pub(crate) struct OpenAiError {
    status: StatusCode,
    kind: String,
    message: String,
    param: Option<&'static str>,
}

impl OpenAiError {
    fn invalid(param: Option<&'static str>, message: impl Into<String>) -> Self {
        Self { status: StatusCode::BAD_REQUEST, kind: "invalid_input".into(), message: message.into(), param }
    }
}

impl From<ApiError> for OpenAiError {
    fn from(e: ApiError) -> Self {
        Self { status: e.status, kind: e.kind.to_owned(), message: e.message, param: None }
    }
}

impl From<ragtune::core::Error> for OpenAiError {
    fn from(e: ragtune::core::Error) -> Self {
        ApiError::from(e).into()
    }
}

/// OpenAI's error type for a status.
fn error_type(status: StatusCode) -> &'static str {
    match status.as_u16() {
        401 => "authentication_error",
        403 => "permission_error",
        s if s >= 500 => "server_error",
        _ => "invalid_request_error",
    }
}

fn error_body(status: StatusCode, kind: String, message: String, param: Option<String>) -> OpenAiErrorBody {
    OpenAiErrorBody {
        error: OpenAiErrorDetail {
            message,
            kind_of: error_type(status).to_owned(),
            param,
            code: Some(kind.clone()),
            kind,
        },
    }
}

impl IntoResponse for OpenAiError {
    fn into_response(self) -> Response {
        let body = error_body(self.status, self.kind, self.message, self.param.map(str::to_owned));
        let mut response = (self.status, Json(body)).into_response();
        if self.status == StatusCode::SERVICE_UNAVAILABLE {
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        response
    }
}

/// Whether a path is one of the OpenAI routes.
fn openai_path(path: &str) -> bool {
    matches!(path, "/v1/chat/completions" | "/v1/models")
}

/// Rewrites an error in ragtune's shape (from any layer: the key, the Host check, body limits, slots) into
/// OpenAI's on the OpenAI routes; every other route and every success pass through untouched.
pub(crate) async fn error_shape(request: Request, next: Next) -> Response {
    let openai = openai_path(request.uri().path());
    let response = next.run(request).await;
    if !openai || response.status().as_u16() < 400 {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, 1 << 20).await else {
        return Response::from_parts(parts, Body::empty());
    };
    let value: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    let error = &value["error"];
    if error["type"].is_string() || !error["kind"].is_string() {
        return Response::from_parts(parts, Body::from(bytes));
    }
    let kind = error["kind"].as_str().unwrap_or_default().to_owned();
    let message = error["message"].as_str().unwrap_or_default().to_owned();
    let body = error_body(parts.status, kind, message, None);
    let text = serde_json::to_vec(&body).unwrap_or_default();
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    Response::from_parts(parts, Body::from(text))
}

/// Unix seconds now.
fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// A completion id, unique within the process and unpredictable across processes.
fn completion_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.write_u128(SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos()));
    format!("chatcmpl-{:016x}{:08x}", h.finish(), COUNTER.load(Ordering::Relaxed))
}

/// The collection a model names: `None` for `ragtune`, `Some(name)` for `ragtune:NAME` or `NAME`.
fn collection_of(model: &str) -> Option<&str> {
    if model == DEFAULT_MODEL { None } else { Some(model.strip_prefix("ragtune:").unwrap_or(model)) }
}

/// The question: the text of the last `user` message.
fn question_of(messages: &[ChatMessage]) -> Result<String, OpenAiError> {
    if messages.is_empty() {
        return Err(OpenAiError::invalid(Some("messages"), "`messages` is empty: send at least one user message"));
    }
    let last = messages
        .iter()
        .rev()
        .find(|m| m.role == "user")
        .ok_or_else(|| OpenAiError::invalid(Some("messages"), "`messages` has no message with role `user`"))?;
    let text = match &last.content {
        Some(MessageContent::Text(t)) => t.clone(),
        Some(MessageContent::Parts(parts)) => parts
            .iter()
            .filter(|p| p.kind == "text" || p.kind == "input_text")
            .filter_map(|p| p.text.as_deref())
            .collect::<Vec<_>>()
            .join("\n"),
        None => String::new(),
    };
    if text.trim().is_empty() {
        return Err(OpenAiError::invalid(Some("messages"), "the last user message has no text"));
    }
    Ok(text)
}

/// Parses the body of `POST /v1/chat/completions`.
fn parse_chat(bytes: &[u8]) -> Result<ChatRequest, OpenAiError> {
    let value: Value = serde_json::from_slice(bytes)
        .map_err(|e| OpenAiError::invalid(None, format!("the body is not valid JSON: {e}")))?;
    if !value.is_object() {
        return Err(OpenAiError::invalid(None, "the body must be a JSON object"));
    }
    if value.get("messages").is_none_or(Value::is_null) {
        return Err(OpenAiError::invalid(Some("messages"), "missing field `messages`"));
    }
    let request: ChatRequest =
        serde_json::from_value(value).map_err(|e| OpenAiError::invalid(None, format!("invalid request: {e}")))?;
    match request.n {
        None | Some(1) => {}
        Some(n) => {
            return Err(OpenAiError::invalid(
                Some("n"),
                format!("n = {n}: ragtune gives one answer per question; send n = 1 or leave it out"),
            ));
        }
    }
    Ok(request)
}

/// The message content: the answer with its `[n]` markers, then the numbered sources.
#[must_use]
pub fn content_with_sources(answer: &str, citations: &[Citation]) -> String {
    let mut content = answer.trim_end().to_owned();
    if !citations.is_empty() {
        content.push_str("\n\nSources:");
        for c in citations {
            content.push_str(&format!("\n[{}] ", c.n));
            match &c.title {
                Some(title) if !title.trim().is_empty() && title != &c.doc_id => {
                    content.push_str(&format!("{} — {}", title.trim(), c.doc_id));
                }
                _ => content.push_str(&c.doc_id),
            }
            if let Some(pages) = &c.pages {
                content.push_str(&format!(" {pages}"));
            }
        }
    }
    content
}

/// The usage of an answer from the pipeline's cost.
fn usage_of(response: &AskResponse, content: &str) -> Usage {
    let total = response.cost.tokens;
    let answer = response.answer.as_deref().unwrap_or(content);
    let completion = (ragtune::evaluators::text::estimate_tokens(answer) as u64).min(total);
    Usage { prompt_tokens: total - completion, completion_tokens: completion, total_tokens: total }
}

/// The pieces of `text` a stream sends: each word with the whitespace after it (they concatenate to `text`).
#[must_use]
pub fn word_deltas(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut start, mut in_space) = (0, false);
    for (i, ch) in text.char_indices() {
        if ch.is_whitespace() {
            in_space = true;
        } else if in_space {
            out.push(&text[start..i]);
            start = i;
            in_space = false;
        }
    }
    if start < text.len() {
        out.push(&text[start..]);
    }
    out
}

/// `POST /v1/chat/completions`.
pub(crate) async fn chat_completions(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, OpenAiError> {
    let request = parse_chat(&body_bytes(body)?)?;
    let model = request.model.clone().unwrap_or_else(|| DEFAULT_MODEL.to_owned());
    let (store, model) = match collection_of(&model) {
        None => (state.inner.default.clone(), DEFAULT_MODEL.to_owned()),
        Some(name) => match collection(&state, name) {
            Ok(c) => (c, format!("ragtune:{name}")),
            Err(e) => {
                return Err(OpenAiError {
                    status: StatusCode::NOT_FOUND,
                    kind: "model_not_found".into(),
                    message: format!("the model `{model}` does not exist: {} (see GET /v1/models)", e.message),
                    param: Some("model"),
                });
            }
        },
    };
    let question = question_of(&request.messages)?;
    let opts = bounded(request.ragtune.unwrap_or_default(), &state);
    if request.stream == Some(true) {
        let include_usage = request.stream_options.and_then(|o| o.include_usage).unwrap_or(false);
        return stream_completion(&state, store, model, question, opts, include_usage).await;
    }
    let engine = store.engine.read().await;
    let response = commands::ask(&engine, &question, &opts, true).await?;
    drop(engine);
    state.inner.metrics.observe_answer(&response);
    let content = content_with_sources(response.answer.as_deref().unwrap_or_default(), &response.citations);
    let usage = usage_of(&response, &content);
    let completion = ChatCompletion {
        id: completion_id(),
        object: "chat.completion".into(),
        created: now(),
        model,
        choices: vec![Choice {
            index: 0,
            message: AssistantMessage { role: "assistant".into(), content, refusal: None },
            logprobs: None,
            finish_reason: "stop".into(),
        }],
        usage,
        ragtune: extra_of(&response, store.name.clone()),
    };
    Ok(Json(completion).into_response())
}

/// What ragtune adds to a completion, from the answer.
fn extra_of(response: &AskResponse, collection: Option<String>) -> RagtuneExtra {
    RagtuneExtra {
        collection,
        citations: response.citations.clone(),
        crag: response.crag.clone(),
        cost: response.cost.clone(),
        notes: response.notes.iter().filter_map(|n| serde_json::to_value(n).ok()).collect(),
    }
}

/// The chunks of one streamed completion (its id, time and model, and the collection that answers).
struct Chunks {
    id: String,
    created: u64,
    model: String,
    collection: Option<String>,
}

impl Chunks {
    /// One `chat.completion.chunk` event.
    fn event(&self, delta: Delta, finish: Option<&str>, extra: Option<RagtuneExtra>) -> String {
        let chunk = ChatCompletionChunk {
            id: self.id.clone(),
            object: "chat.completion.chunk".into(),
            created: self.created,
            model: self.model.clone(),
            choices: vec![ChunkChoice { index: 0, delta, logprobs: None, finish_reason: finish.map(str::to_owned) }],
            usage: None,
            ragtune: extra,
        };
        format!("data: {}\n\n", serde_json::to_string(&chunk).unwrap_or_default())
    }

    /// A chunk adding `content`.
    fn content(&self, content: &str) -> String {
        self.event(Delta { role: None, content: Some(content.to_owned()) }, None, None)
    }

    /// The events of one thing the pipeline sent.
    fn of(&self, streamed: Streamed, include_usage: bool) -> (String, bool) {
        match streamed {
            // The LLM's tokens go as they come; an answer that exists only whole (extractive, or one replacing what
            // was streamed) goes in word-sized deltas, as an OpenAI client expects of a stream.
            Streamed::Token(text) => (self.content(&text), false),
            Streamed::Whole(text) => (word_deltas(&text).into_iter().map(|p| self.content(p)).collect(), false),
            Streamed::Restart(reason) => (self.content(restart_notice(reason)), false),
            Streamed::Done(done) => match *done {
                Ok(response) => self.last(&response, include_usage),
                Err(e) => (Self::error(ApiError::from(e).into()), true),
            },
        }
    }

    /// The end of the stream: the sources, the stop chunk with ragtune's field, the usage when asked, `[DONE]`.
    fn last(&self, response: &AskResponse, include_usage: bool) -> (String, bool) {
        let answer = response.answer.as_deref().unwrap_or_default();
        let content = content_with_sources(answer, &response.citations);
        // The answer went out as it was generated: what is left is the list of sources.
        let sources = content.strip_prefix(answer.trim_end()).unwrap_or_default();
        let mut out: String = word_deltas(sources).into_iter().map(|p| self.content(p)).collect();
        let extra = extra_of(response, self.collection.clone());
        out.push_str(&self.event(Delta { role: None, content: None }, Some("stop"), Some(extra)));
        if include_usage {
            let last = ChatCompletionChunk {
                id: self.id.clone(),
                object: "chat.completion.chunk".into(),
                created: self.created,
                model: self.model.clone(),
                choices: Vec::new(),
                usage: Some(usage_of(response, &content)),
                ragtune: None,
            };
            out.push_str(&format!("data: {}\n\n", serde_json::to_string(&last).unwrap_or_default()));
        }
        out.push_str("data: [DONE]\n\n");
        (out, true)
    }

    /// An error in OpenAI's shape inside a stream that has begun, then the end of the stream.
    fn error(e: OpenAiError) -> String {
        let body = error_body(e.status, e.kind, e.message, None);
        format!("data: {}\n\ndata: [DONE]\n\n", serde_json::to_string(&body).unwrap_or_default())
    }
}

/// What the stream says when the text it sent is withdrawn (OpenAI's chunks cannot take text back): the notice,
/// then the answer that replaces it.
#[must_use]
pub fn restart_notice(reason: RestartReason) -> &'static str {
    match reason {
        RestartReason::Retry => {
            "\n\n[ragtune: the answer above is withdrawn; a retry asks again and its answer follows]\n\n"
        }
        RestartReason::Replaced => "\n\n[ragtune: the answer above is withdrawn; the final answer follows]\n\n",
    }
}

/// `stream: true`: the pipeline runs with its answer streamed, and each piece goes out as a
/// `chat.completion.chunk` as it comes (the role first, the sources after the answer, then the stop chunk with
/// ragtune's extra field, the usage when asked, and `[DONE]`).
async fn stream_completion(
    state: &AppState,
    store: std::sync::Arc<crate::Collection>,
    model: String,
    question: String,
    opts: AskOptions,
    include_usage: bool,
) -> Result<Response, OpenAiError> {
    let collection = store.name.clone();
    let mut running = stream::spawn_ask(state, store, question, opts);
    let first = match running.first().await {
        Some(Ok(first)) => first,
        Some(Err(e)) => return Err(e.into()),
        None => return Err(lost()),
    };
    let chunks = Chunks { id: completion_id(), created: now(), model, collection };
    let opening = chunks.event(Delta { role: Some("assistant".into()), content: Some(String::new()) }, None, None);
    let start = (Some(first), running, chunks, Some(opening), false);
    let events =
        futures_util::stream::unfold(start, move |(pending, mut running, chunks, opening, ended)| async move {
            if ended {
                return None;
            }
            let next = match pending {
                Some(event) => Some(event),
                None => running.next().await,
            };
            let (text, ended) = match next {
                Some(streamed) => chunks.of(streamed, include_usage),
                None => (Chunks::error(lost()), true),
            };
            // The role chunk opens the stream, with the first piece.
            let text = match opening {
                Some(opening) => opening + &text,
                None => text,
            };
            Some((Bytes::from(text), (None, running, chunks, None, ended)))
        });
    Ok(stream::event_stream(events))
}

/// The error of a question whose task ended without an answer.
fn lost() -> OpenAiError {
    OpenAiError {
        status: StatusCode::INTERNAL_SERVER_ERROR,
        kind: "internal".into(),
        message: "the question's task ended without an answer".into(),
        param: None,
    }
}

/// `GET /v1/models`: `ragtune`, then `ragtune:NAME` for each collection.
pub(crate) async fn models(State(state): State<AppState>) -> Response {
    let created = now();
    let model = |id: String| Model { id, object: "model".into(), created, owned_by: "ragtune".into() };
    let mut data = vec![model(DEFAULT_MODEL.to_owned())];
    data.extend(state.inner.collections.keys().map(|name| model(format!("ragtune:{name}"))));
    Json(ModelList { object: "list".into(), data }).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(text: &str, expect: &[&str]) {
        let pieces = word_deltas(text);
        assert_eq!(pieces, expect);
        assert_eq!(pieces.concat(), text);
    }

    #[test]
    fn deltas_are_words_with_their_whitespace_and_concatenate_to_the_text() {
        check("", &[]);
        check("one", &["one"]);
        check("Scurvy is [1].\n\nSources:\n[1] x", &["Scurvy ", "is ", "[1].\n\n", "Sources:\n", "[1] ", "x"]);
        check("  lead", &["  ", "lead"]);
    }

    #[test]
    fn models_name_collections() {
        assert_eq!(collection_of("ragtune"), None);
        assert_eq!(collection_of("ragtune:docs"), Some("docs"));
        assert_eq!(collection_of("docs"), Some("docs"));
    }

    #[test]
    fn requests_take_the_last_user_message_and_refuse_n_above_1() {
        let body = br#"{"model": "ragtune", "temperature": 0.2, "max_tokens": 9, "top_p": 1, "user": "u",
            "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "first"},
            {"role": "assistant", "content": "a"}, {"role": "user", "content": [{"type": "text", "text": "second"},
            {"type": "image_url", "image_url": {"url": "http://x"}}]}]}"#;
        let r = parse_chat(body).unwrap();
        assert_eq!(question_of(&r.messages).unwrap(), "second");
        let e = parse_chat(br#"{"messages": [{"role": "user", "content": "q"}], "n": 2}"#).unwrap_err();
        assert_eq!((e.status, e.param), (StatusCode::BAD_REQUEST, Some("n")));
        let e = parse_chat(br#"{"model": "ragtune"}"#).unwrap_err();
        assert_eq!(e.param, Some("messages"));
        let r = parse_chat(br#"{"messages": [{"role": "system", "content": "x"}]}"#).unwrap();
        assert_eq!(question_of(&r.messages).unwrap_err().param, Some("messages"));
    }

    #[test]
    fn sources_follow_the_answer() {
        let c = |n, doc: &str, title: Option<&str>| Citation {
            n,
            chunk_id: format!("{doc}#0"),
            doc_id: doc.into(),
            title: title.map(Into::into),
            tier: None,
            pages: None,
        };
        let text =
            content_with_sources("Lind [1] and limes [2].", &[c(1, "scurvy", Some("Scurvy")), c(2, "ships", None)]);
        assert_eq!(text, "Lind [1] and limes [2].\n\nSources:\n[1] Scurvy — scurvy\n[2] ships");
    }
}
