//! The OpenAI-compatible client: `/v1/chat/completions` and `/v1/completions` over HTTP.

use std::fmt;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use ragtune_core::http::{self, GiveUp, RetryDecision, RetryPolicy};
use ragtune_core::{Cost, Ctx, Error, Llm, LlmRequest, LlmResponse, Message, Result, Role, Secret, TraceEvent};
use serde_json::{Value, json};

use crate::structured::{RawOutput, parse_json_text};

/// Which API the client calls (`chat` or `completions` in configuration files).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Endpoint {
    /// `/v1/chat/completions` with the request's messages (the default).
    #[default]
    Chat,
    /// `/v1/completions` with the messages rendered as one plain-text prompt (for base models and servers
    /// without a chat template).
    Completions,
}

/// Settings of an [`OpenAiClient`].
#[derive(Debug, Clone, PartialEq)]
pub struct LlmConfig {
    /// The server's base URL, with or without the trailing `/v1` (`http://127.0.0.1:8080`,
    /// `https://api.openai.com/v1`).
    pub base_url: String,
    /// The model name sent with every request.
    pub model: String,
    /// Bearer token; never logged, never in errors or traces, never shown by `Debug`.
    pub api_key: Option<Secret>,
    /// Which API to call.
    pub endpoint: Endpoint,
    /// Time allowed for one attempt (the call's deadline in [`Ctx`] may cut it shorter).
    pub timeout: Duration,
    /// Time allowed to connect.
    pub connect_timeout: Duration,
    /// Retries after a transient failure (timeouts, connection resets, the transient statuses of
    /// [`status_kind`](ragtune_core::http::status_kind): 408, 409, 425, 429, 5xx).
    pub max_retries: u32,
    /// The first backoff; it doubles with every retry up to 10 s (a server's `Retry-After` wins, up to the same
    /// limit).
    pub initial_backoff: Duration,
    /// The largest response body read ([`DEFAULT_MAX_RESPONSE_BYTES`] by default): a longer one is a permanent
    /// error rather than a memory spike.
    pub max_response_bytes: usize,
}

/// The longest wait between two attempts, computed or asked for by the server.
const MAX_BACKOFF: Duration = Duration::from_secs(10);

impl LlmConfig {
    /// The retry policy of these settings: `initial_backoff` doubling up to 10 s, no jitter (one client
    /// talks to one server, so there is no herd to spread), `max_retries` retries.
    #[must_use]
    pub fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy {
            base: self.initial_backoff,
            max: MAX_BACKOFF,
            jitter: 0.0,
            max_retries: self.max_retries,
            seed: 0,
        }
    }
}

/// The default [`LlmConfig::max_response_bytes`], 8 MiB: a completion of a few thousand tokens is a few tens of
/// kilobytes, so only a broken or hostile server comes near it.
pub const DEFAULT_MAX_RESPONSE_BYTES: usize = 8 << 20;

impl Default for LlmConfig {
    fn default() -> Self {
        Self {
            base_url: "http://127.0.0.1:8080".into(),
            model: "local".into(),
            api_key: None,
            endpoint: Endpoint::Chat,
            timeout: Duration::from_secs(60),
            connect_timeout: Duration::from_secs(5),
            max_retries: 2,
            initial_backoff: Duration::from_millis(250),
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
        }
    }
}

/// An [`Llm`] on any OpenAI-compatible server: OpenAI, vLLM, Ollama, llama.cpp (the local LLM of
/// `cargo xtask llm start`).
///
/// Requests of a batch run one after another (a local CPU server serves one at a time anyway). Each request
/// becomes one HTTP call, retried with exponential backoff only for transient failures, within the deadline of
/// the [`Ctx`]; every call records an `llm` trace event with the model, tokens, attempts and time (never the API
/// key). With a JSON schema the output is checked to be JSON: invalid or truncated output is an
/// [`ErrorKind::MalformedOutput`] error whose source is a [`RawOutput`] holding the text, so that callers can ask
/// for a repair ([`generate_json`](crate::generate_json) does).
#[derive(Clone)]
pub struct OpenAiClient {
    config: LlmConfig,
    base: String,
    http: reqwest::Client,
}

impl fmt::Debug for OpenAiClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiClient").field("config", &self.config).finish_non_exhaustive()
    }
}

impl OpenAiClient {
    /// A client for the configured server. Nothing is sent until the first request.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`] for a URL that is not `http(s)://…`; a TLS backend that cannot start.
    pub fn new(config: LlmConfig) -> Result<Self> {
        let trimmed = config.base_url.trim().trim_end_matches('/');
        if !(trimmed.starts_with("http://") || trimmed.starts_with("https://")) {
            return Err(Error::invalid_input(format!(
                "the LLM URL `{}` must start with http:// or https://",
                config.base_url
            )));
        }
        let base = if trimmed.ends_with("/v1") { trimmed.to_owned() } else { format!("{trimmed}/v1") };
        let http = reqwest::Client::builder()
            .connect_timeout(config.connect_timeout)
            .redirect(same_origin_redirects())
            .build()
            .map_err(|e| Error::permanent("cannot start the HTTP client").with_source(e))?;
        Ok(Self { config, base, http })
    }

    /// The settings.
    #[must_use]
    pub fn config(&self) -> &LlmConfig {
        &self.config
    }

    /// Checks that the server answers (`GET /v1/models`) within the connect timeout.
    ///
    /// # Errors
    /// [`ErrorKind::Unavailable`] when it does not; [`ErrorKind::Permanent`] when it redirects to another origin.
    pub async fn ping(&self) -> Result<()> {
        let mut req = self.http.get(format!("{}/models", self.base)).timeout(self.config.connect_timeout * 2);
        if let Some(key) = &self.config.api_key {
            req = req.bearer_auth(key.expose());
        }
        match req.send().await {
            Ok(r) if r.status().is_success() => Ok(()),
            Ok(r) => Err(Error::unavailable(format!("the LLM at {} answered {} to a ping", self.base, r.status()))),
            Err(e) if e.is_redirect() => Err(self.transport_error(&e, self.config.connect_timeout * 2)),
            Err(e) => Err(Error::unavailable(format!("cannot reach the LLM at {}: {}", self.base, describe(&e)))),
        }
    }

    fn body(&self, request: &LlmRequest) -> Value {
        let mut body = json!({
            "model": self.config.model,
            "temperature": request.temperature,
            "max_tokens": request.max_tokens,
        });
        match self.config.endpoint {
            Endpoint::Chat => body["messages"] = serde_json::to_value(&request.messages).unwrap_or_default(),
            Endpoint::Completions => body["prompt"] = Value::String(plain_prompt(&request.messages)),
        }
        if let Some(seed) = request.seed {
            body["seed"] = json!(seed);
        }
        if !request.stop.is_empty() {
            body["stop"] = json!(request.stop);
        }
        if let Some(schema) = &request.json_schema {
            match self.config.endpoint {
                // OpenAI's structured outputs; llama.cpp, vLLM and Ollama honour it on the chat endpoint.
                Endpoint::Chat => {
                    body["response_format"] = json!({
                        "type": "json_schema",
                        "json_schema": { "name": "output", "strict": true, "schema": schema }
                    });
                }
                // On `/v1/completions` llama.cpp ignores `response_format` and constrains only with a top-level
                // `json_schema` (measured on the local server; see docs/llm.md).
                Endpoint::Completions => body["json_schema"] = schema.clone(),
            }
        }
        body
    }

    fn url(&self) -> String {
        match self.config.endpoint {
            Endpoint::Chat => format!("{}/chat/completions", self.base),
            Endpoint::Completions => format!("{}/completions", self.base),
        }
    }

    /// One request with retries; streamed into `stream` when there is one.
    ///
    /// A streamed request is retried like any other until its first piece has been handed over, never after it:
    /// the caller has shown what it got, and a second attempt would not continue it.
    async fn call(&self, ctx: &Ctx, request: &LlmRequest, mut stream: Option<Stream<'_>>) -> Result<LlmResponse> {
        let mut body = self.body(request);
        if stream.is_some() {
            body["stream"] = Value::Bool(true);
            // OpenAI sends the usage in a last chunk only when asked; llama.cpp sends it with the last chunk anyway.
            body["stream_options"] = json!({ "include_usage": true });
        }
        let started = Instant::now();
        let mut attempt = 0_u32;
        loop {
            ctx.check()?;
            let timeout = ctx.remaining().map_or(self.config.timeout, |r| r.min(self.config.timeout));
            if let Some(s) = stream.as_mut() {
                s.started = Instant::now();
            }
            let result = self.attempt(&body, request, timeout, stream.as_mut()).await;
            match result {
                Ok(response) => {
                    let mut event = TraceEvent::new("llm", "generate")
                        .detail("model", response.model.clone())
                        .detail("attempts", attempt + 1)
                        .detail("finish_reason", response.finish_reason.clone());
                    if let Some(s) = &stream {
                        event = s.describe(event);
                    }
                    ctx.trace(event.cost(response.cost).elapsed(started.elapsed()));
                    return Ok(response);
                }
                Err(error) => {
                    let streamed = stream.as_ref().map_or(0, |s| s.pieces);
                    let decision = if streamed == 0 {
                        // No jitter, so the draw does not matter.
                        self.config.retry_policy().decide(ctx, attempt, &error, 0.5)
                    } else {
                        RetryDecision::GiveUp(GiveUp::NotRetryable)
                    };
                    let RetryDecision::Wait { wait, .. } = decision else {
                        // A malformed answer was still generated and paid for: its cost goes into the trace.
                        let spent = crate::structured::raw_output(&error).map_or(Cost::ZERO, |raw| raw.cost);
                        let mut event = TraceEvent::new("llm", "failed")
                            .detail("error", error.kind().as_str())
                            .detail("message", error.message().to_owned())
                            .detail("attempts", attempt + 1);
                        if let Some(s) = &stream {
                            event = s.describe(event);
                        }
                        ctx.trace(event.cost(spent).elapsed(started.elapsed()));
                        if matches!(decision, RetryDecision::GiveUp(GiveUp::Deadline { .. })) {
                            return Err(error.context("no time left in the deadline to retry"));
                        }
                        return Err(error);
                    };
                    tokio::time::sleep(wait).await;
                    attempt += 1;
                }
            }
        }
    }

    /// One HTTP attempt (streamed into `stream` when there is one); a failure carries the server's `Retry-After`,
    /// if any ([`http::retry_after`]).
    async fn attempt(
        &self,
        body: &Value,
        request: &LlmRequest,
        timeout: Duration,
        mut stream: Option<&mut Stream<'_>>,
    ) -> Result<LlmResponse> {
        let mut req = self.http.post(self.url()).timeout(timeout).json(body);
        if let Some(key) = &self.config.api_key {
            req = req.bearer_auth(key.expose());
        }
        let response = req.send().await.map_err(|e| self.transport_error(&e, timeout))?;
        let status = response.status();
        let retry_after = response
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(http::parse_retry_after);
        if status.is_success()
            && is_event_stream(&response)
            && let Some(stream) = stream.as_deref_mut()
        {
            return self.read_stream(response, request, timeout, stream).await;
        }
        let (body, complete) = self.read_capped(response).await.map_err(|e| self.transport_error(&e, timeout))?;
        let text = String::from_utf8_lossy(&body);
        if !status.is_success() {
            // The start of an oversized error body is enough for its message.
            return Err(self.status_error(status.as_u16(), &text).with_retry_after(retry_after));
        }
        if !complete {
            return Err(self.too_large());
        }
        let response = self.parse(&text, request)?;
        if let Some(stream) = stream {
            // A server that answered a streamed request whole (it ignores `stream`): the whole text is one piece.
            stream.piece(&response.text);
        }
        Ok(response)
    }

    /// Reads a Server-Sent Events body (`data: {chunk}` lines, `data: [DONE]` last), handing each piece of text to
    /// `stream` as it arrives, within `max_response_bytes`; the response is the concatenated text with the last
    /// chunk's finish reason and the usage when the server sends it.
    ///
    /// A stream that ends without `[DONE]` or a finish reason, breaks, or carries a chunk that is not JSON or an
    /// error is an error that says how many pieces had arrived.
    async fn read_stream(
        &self,
        mut response: reqwest::Response,
        request: &LlmRequest,
        timeout: Duration,
        stream: &mut Stream<'_>,
    ) -> Result<LlmResponse> {
        let mut state = StreamState::default();
        let mut line = Vec::new();
        let mut read = 0_usize;
        'body: loop {
            let bytes = match response.chunk().await {
                Ok(Some(bytes)) => bytes,
                Ok(None) => break,
                Err(e) => return Err(self.broken_stream(&e, timeout, stream, &state)),
            };
            read += bytes.len();
            if read > self.config.max_response_bytes {
                return Err(self.too_large());
            }
            // Lines are cut on bytes, so a character split across two reads is decoded whole.
            for &b in bytes.iter() {
                if b != b'\n' {
                    line.push(b);
                    continue;
                }
                let text = String::from_utf8_lossy(&line).into_owned();
                line.clear();
                if self.stream_line(text.trim_end_matches('\r'), stream, &mut state)? {
                    break 'body;
                }
            }
        }
        if !state.done && state.finish_reason.is_none() {
            return Err(Error::transient(format!(
                "the stream from the LLM at {} ended early, without a finish reason or `data: [DONE]`, {}",
                self.base,
                so_far(stream.pieces, &state.text)
            )));
        }
        let tokens = match state.usage {
            Some(tokens) => tokens,
            None => {
                // No usage from the server: each piece is about one token (llama.cpp, vLLM and OpenAI send one
                // token per chunk); the prompt is not counted, as a whole answer without usage counts nothing.
                stream.estimated = true;
                stream.pieces as u64
            }
        };
        let out = LlmResponse {
            text: state.text,
            cost: Cost { tokens, docs: 0, calls: 1 },
            finish_reason: state.finish_reason.unwrap_or_else(|| "unknown".to_owned()),
            model: state.model.unwrap_or_else(|| self.config.model.clone()),
        };
        Self::check_structured(out, request)
    }

    /// One line of an event stream: a `data:` line's chunk handed over; `true` once it was `data: [DONE]`.
    fn stream_line(&self, line: &str, stream: &mut Stream<'_>, state: &mut StreamState) -> Result<bool> {
        // Comments (`: keep-alive`), `event:`, `id:` and `retry:` lines and the blank lines between events.
        let Some(data) = line.strip_prefix("data:") else { return Ok(false) };
        let data = data.trim();
        if data == "[DONE]" {
            state.done = true;
            return Ok(true);
        }
        if data.is_empty() {
            return Ok(false);
        }
        let v: Value = serde_json::from_str(data).map_err(|e| {
            Error::permanent(format!(
                "the LLM at {} sent a stream chunk that is not JSON, {}: {}",
                self.base,
                so_far(stream.pieces, &state.text),
                snippet(data)
            ))
            .with_source(e)
        })?;
        if !v["error"].is_null() {
            let message = v["error"]["message"]
                .as_str()
                .or_else(|| v["error"].as_str())
                .map_or_else(|| snippet(&v["error"].to_string()), str::to_owned);
            return Err(Error::transient(format!(
                "the LLM at {} reported an error in its stream, {}: {message}",
                self.base,
                so_far(stream.pieces, &state.text)
            )));
        }
        let choice = &v["choices"][0];
        let piece = match self.config.endpoint {
            Endpoint::Chat => choice["delta"]["content"].as_str(),
            Endpoint::Completions => choice["text"].as_str(),
        };
        if let Some(piece) = piece.filter(|p| !p.is_empty()) {
            state.text.push_str(piece);
            stream.piece(piece);
        }
        if let Some(reason) = choice["finish_reason"].as_str() {
            state.finish_reason = Some(reason.to_owned());
        }
        if let Some(model) = v["model"].as_str() {
            state.model = Some(model.to_owned());
        }
        if v["usage"].is_object() {
            let usage = &v["usage"];
            let prompt = usage["prompt_tokens"].as_u64().unwrap_or(0);
            let completion = usage["completion_tokens"].as_u64().unwrap_or(0);
            state.usage = Some(usage["total_tokens"].as_u64().unwrap_or(prompt + completion));
        }
        Ok(false)
    }

    /// A stream that broke while it was read: how long it ran and what had arrived.
    fn broken_stream(&self, e: &reqwest::Error, timeout: Duration, stream: &Stream<'_>, state: &StreamState) -> Error {
        let what = if e.is_timeout() {
            format!("did not finish within {:.1} s", timeout.as_secs_f64())
        } else {
            format!("broke: {}", describe(e))
        };
        Error::transient(format!(
            "the stream from the LLM at {} {what}, {}",
            self.base,
            so_far(stream.pieces, &state.text)
        ))
    }

    /// The body, read chunk by chunk up to `max_response_bytes`, and whether it was read whole. A body that
    /// announces more is not read at all; one that streams past the limit is read no further.
    async fn read_capped(&self, mut response: reqwest::Response) -> reqwest::Result<(Vec<u8>, bool)> {
        let limit = self.config.max_response_bytes;
        if response.content_length().is_some_and(|n| n > limit as u64) {
            return Ok((Vec::new(), false));
        }
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await? {
            if body.len() + chunk.len() > limit {
                let room = limit - body.len();
                body.extend_from_slice(&chunk[..room]);
                return Ok((body, false));
            }
            body.extend_from_slice(&chunk);
        }
        Ok((body, true))
    }

    fn too_large(&self) -> Error {
        Error::permanent(format!(
            "the LLM at {} sent a response larger than the limit of {} bytes (`max_response_bytes`)",
            self.base, self.config.max_response_bytes
        ))
    }

    fn transport_error(&self, e: &reqwest::Error, timeout: Duration) -> Error {
        if e.is_timeout() {
            Error::transient(format!("the LLM at {} did not answer within {:.1} s", self.base, timeout.as_secs_f64()))
        } else if e.is_redirect() {
            // The redirect policy's reason (another origin, too many hops): retrying would only repeat it.
            Error::permanent(format!(
                "the LLM at {} answered with a redirect that was not followed: {}",
                self.base,
                describe(e)
            ))
        } else if e.is_connect() {
            Error::unavailable(format!("cannot reach the LLM at {}: {}", self.base, describe(e)))
        } else {
            // Resets and truncated bodies: the next attempt may well succeed.
            Error::transient(format!("the connection to the LLM at {} failed: {}", self.base, describe(e)))
        }
    }

    fn status_error(&self, status: u16, body: &str) -> Error {
        let server = server_message(body);
        let what = format!("the LLM at {} answered HTTP {status}: {server}", self.base);
        // The kind is core's; the hints are this client's.
        let hint = match status {
            401 | 403 => " (check the API key: `llm.api_key` or $RAGTUNE_LLM_API_KEY)".to_owned(),
            404 => format!(" (check the URL and the model name `{}`)", self.config.model),
            _ => String::new(),
        };
        http::status_error(status, format!("{what}{hint}"))
    }

    fn parse(&self, text: &str, request: &LlmRequest) -> Result<LlmResponse> {
        let v: Value = serde_json::from_str(text).map_err(|e| {
            Error::permanent(format!("the LLM at {} sent a response that is not JSON: {}", self.base, snippet(text)))
                .with_source(e)
        })?;
        let choice = &v["choices"][0];
        let content = match self.config.endpoint {
            Endpoint::Chat => choice["message"]["content"].as_str(),
            Endpoint::Completions => choice["text"].as_str(),
        }
        .ok_or_else(|| {
            Error::permanent(format!("the LLM at {} sent a response without text: {}", self.base, snippet(text)))
        })?;
        let finish_reason = choice["finish_reason"].as_str().unwrap_or("unknown").to_owned();
        let usage = &v["usage"];
        let prompt = usage["prompt_tokens"].as_u64().unwrap_or(0);
        let completion = usage["completion_tokens"].as_u64().unwrap_or(0);
        let tokens = usage["total_tokens"].as_u64().unwrap_or(prompt + completion);
        let model = v["model"].as_str().unwrap_or(&self.config.model).to_owned();
        let out =
            LlmResponse { text: content.to_owned(), cost: Cost { tokens, docs: 0, calls: 1 }, finish_reason, model };
        Self::check_structured(out, request)
    }

    /// With a JSON schema: the output checked to be whole JSON (its text normalised), else a
    /// [`ErrorKind::MalformedOutput`] error carrying the raw text; without one, the output as it is.
    fn check_structured(mut out: LlmResponse, request: &LlmRequest) -> Result<LlmResponse> {
        if request.json_schema.is_some() {
            if out.finish_reason == "length" {
                return Err(Error::malformed_output(format!(
                    "the structured output was cut at {} tokens (max_tokens): {}",
                    request.max_tokens,
                    snippet(&out.text)
                ))
                .with_source(RawOutput { text: out.text, cost: out.cost }));
            }
            match parse_json_text(&out.text) {
                Ok(value) => out.text = value.to_string(),
                Err(e) => {
                    return Err(Error::malformed_output(format!(
                        "the structured output is not valid JSON ({e}): {}",
                        snippet(&out.text)
                    ))
                    .with_source(RawOutput { text: out.text, cost: out.cost }));
                }
            }
        }
        Ok(out)
    }
}

#[async_trait]
impl Llm for OpenAiClient {
    fn name(&self) -> &str {
        &self.config.model
    }

    async fn generate(&self, ctx: &Ctx, requests: &[LlmRequest]) -> Result<Vec<LlmResponse>> {
        let mut out = Vec::with_capacity(requests.len());
        for request in requests {
            if request.messages.is_empty() {
                return Err(Error::invalid_input("an LLM request needs at least one message"));
            }
            out.push(self.call(ctx, request, None).await?);
        }
        Ok(out)
    }

    /// Streams with `"stream": true` and reads the Server-Sent Events of the answer; a server that answers whole
    /// instead is read whole (one piece). Limits, timeouts (the whole stream within one attempt's timeout) and
    /// error classification are those of [`generate`](Llm::generate); a transient failure is retried only before
    /// the first piece.
    async fn generate_stream(
        &self,
        ctx: &Ctx,
        request: &LlmRequest,
        on_token: &mut (dyn for<'t> FnMut(&'t str) + Send),
    ) -> Result<LlmResponse> {
        if request.messages.is_empty() {
            return Err(Error::invalid_input("an LLM request needs at least one message"));
        }
        let stream = Stream { on_token, pieces: 0, first_piece: None, started: Instant::now(), estimated: false };
        self.call(ctx, request, Some(stream)).await
    }
}

/// Where a streamed request's pieces go, and what the trace says of them.
struct Stream<'a> {
    on_token: &'a mut (dyn for<'t> FnMut(&'t str) + Send),
    /// Pieces handed over (in every attempt: after the first one there is no other attempt).
    pieces: usize,
    /// When the first piece came, from the start of its attempt.
    first_piece: Option<Duration>,
    /// When the current attempt started.
    started: Instant,
    /// The usage was estimated from the pieces (the server sent none).
    estimated: bool,
}

impl Stream<'_> {
    fn piece(&mut self, text: &str) {
        if text.is_empty() {
            return;
        }
        self.first_piece.get_or_insert_with(|| self.started.elapsed());
        self.pieces += 1;
        (self.on_token)(text);
    }

    /// The stream's details on a trace event.
    fn describe(&self, event: TraceEvent) -> TraceEvent {
        let mut event = event.detail("stream", true).detail("pieces", self.pieces);
        if let Some(first) = self.first_piece {
            event = event.detail("first_token_ms", first.as_secs_f64() * 1e3);
        }
        if self.estimated {
            event = event.detail("usage", "estimated from the pieces");
        }
        event
    }
}

/// What a stream has said so far.
#[derive(Default)]
struct StreamState {
    text: String,
    finish_reason: Option<String>,
    model: Option<String>,
    usage: Option<u64>,
    done: bool,
}

/// How far a stream got, for its errors: `after 3 pieces (14 characters)`, or `before the first piece`.
fn so_far(pieces: usize, text: &str) -> String {
    match pieces {
        0 => "before the first piece".to_owned(),
        1 => format!("after 1 piece ({} characters)", text.chars().count()),
        n => format!("after {n} pieces ({} characters)", text.chars().count()),
    }
}

/// Whether a response is a Server-Sent Events stream (`Content-Type: text/event-stream`).
fn is_event_stream(response: &reqwest::Response) -> bool {
    response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim_start().to_ascii_lowercase().starts_with("text/event-stream"))
}

/// The most redirects one request follows.
const MAX_REDIRECTS: usize = 3;

/// Follows at most [`MAX_REDIRECTS`] redirects, all within the first request's origin (scheme, host and port).
///
/// reqwest already drops `Authorization` when a redirect leaves the host, but a 307 or 308 would still carry the
/// prompt (documents included) to wherever the answer points, and that server's reply would be taken for the
/// model's. An LLM API has no reason to send its clients elsewhere, so such a redirect is an error.
fn same_origin_redirects() -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(|attempt| {
        let Some(first) = attempt.previous().first() else { return attempt.follow() };
        let (from, to) = (first.origin(), attempt.url().origin());
        if from != to {
            let message = format!(
                "refused to follow a redirect from {} to {}, another origin: the request carries the API key and \
                 the prompt; set the LLM URL to the server that answers",
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

/// The messages as one plain prompt for `/v1/completions`.
#[must_use]
pub fn plain_prompt(messages: &[Message]) -> String {
    let mut out = String::new();
    for m in messages {
        let who = match m.role {
            Role::System => "",
            Role::User => "User: ",
            Role::Assistant => "Assistant: ",
        };
        out.push_str(who);
        out.push_str(m.content.trim());
        out.push_str("\n\n");
    }
    out.push_str("Assistant:");
    out
}

/// The `error.message` of an OpenAI-style error body, or the start of the body.
fn server_message(body: &str) -> String {
    serde_json::from_str::<Value>(body)
        .ok()
        .and_then(|v| v["error"]["message"].as_str().or_else(|| v["error"].as_str()).map(str::to_owned))
        .unwrap_or_else(|| snippet(body))
}

/// The start of a text, on one line, for messages.
fn snippet(text: &str) -> String {
    let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match flat.char_indices().nth(200) {
        Some((i, _)) => format!("{}…", &flat[..i]),
        None => flat,
    }
}

/// A transport error without the URL query (reqwest's message already names the URL; the key is in a header,
/// never in the URL).
fn describe(e: &reqwest::Error) -> String {
    let mut out = e.to_string();
    let mut cur = std::error::Error::source(e);
    while let Some(s) = cur {
        let t = s.to_string();
        if !out.contains(&t) {
            out.push_str(": ");
            out.push_str(&t);
        }
        cur = s.source();
    }
    out
}
