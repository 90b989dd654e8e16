//! Answers streamed as Server-Sent Events: the question runs on a task of its own with a token sink, and the
//! route turns what it sends into events (`/v1/ask` with `Accept: text/event-stream`, `/v1/chat/completions` with
//! `stream: true`).
//!
//! The response starts when the pipeline sends its first event (a token, or the whole answer), so a request that
//! fails before any work (an empty question, invalid options) is still an HTTP error with its status. The task
//! holds the engine's read lock while it runs, as a whole answer does, and is aborted when the client goes away (the
//! body is dropped), which drops the LLM call too.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::Response;
use ragtune::AskResponse;
use ragtune::commands::{self, AskOptions};
use ragtune::core::Error;
use ragtune::pipeline::{AnswerEvent, RestartReason, TokenSink};
use tokio::sync::mpsc;

use crate::{AppState, Collection};

/// What the question's task sends: pieces of the answer, restarts, then the answer (or the error) once.
#[derive(Debug)]
pub(crate) enum Streamed {
    /// The next piece of the LLM's answer.
    Token(String),
    /// The answer whole (extractive, or replacing what was streamed).
    Whole(String),
    /// What was sent since the previous restart is withdrawn; what follows replaces it.
    Restart(RestartReason),
    /// The whole response (metrics already observed), or why there is none.
    Done(Box<Result<AskResponse, Error>>),
}

/// A question running with its answer streamed: its events in order, and the task (aborted when this is dropped).
pub(crate) struct Running {
    events: mpsc::UnboundedReceiver<Streamed>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Running {
    /// The next event; `None` once the task ended (after `Done`, or if it was lost).
    pub(crate) async fn next(&mut self) -> Option<Streamed> {
        self.events.recv().await
    }

    /// The first event, or the error when the question failed before anything was sent (then the route answers
    /// with an ordinary HTTP error); `None` if the task was lost.
    pub(crate) async fn first(&mut self) -> Option<Result<Streamed, Error>> {
        Some(match self.next().await? {
            Streamed::Done(done) => match *done {
                Err(e) => Err(e),
                ok => Ok(Streamed::Done(Box::new(ok))),
            },
            other => Ok(other),
        })
    }
}

/// Starts `question` on `collection` with its answer streamed (`opts` already bounded).
pub(crate) fn spawn_ask(state: &AppState, collection: Arc<Collection>, question: String, opts: AskOptions) -> Running {
    let (tx, events) = mpsc::unbounded_channel();
    let sink_tx = tx.clone();
    // The sink only queues: the pipeline never waits for the client.
    let sink = TokenSink::new(move |e| {
        let _ = sink_tx.send(match e {
            AnswerEvent::Token(t) => Streamed::Token(t.to_owned()),
            AnswerEvent::Whole(t) => Streamed::Whole(t.to_owned()),
            AnswerEvent::Restart(r) => Streamed::Restart(r),
        });
    });
    let opts = AskOptions { tokens: Some(sink), ..opts };
    let state = state.clone();
    let task = tokio::spawn(async move {
        let engine = collection.engine.read().await;
        let result = commands::ask(&engine, &question, &opts, true).await;
        drop(engine);
        if let Ok(r) = &result {
            state.inner.metrics.observe_answer(r);
        }
        let _ = tx.send(Streamed::Done(Box::new(result)));
    });
    Running { events, task }
}

/// Whether the client asked for Server-Sent Events (`Accept: text/event-stream`, among other types or alone).
pub(crate) fn wants_events(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.split(';').next().is_some_and(|m| m.trim().eq_ignore_ascii_case("text/event-stream")))
}

/// A `text/event-stream` response whose body is `events`, each already framed (`…\n\n`).
pub(crate) fn event_stream(events: impl futures_util::Stream<Item = Bytes> + Send + 'static) -> Response {
    use futures_util::StreamExt;
    let mut response = Response::new(Body::from_stream(events.map(Ok::<_, std::convert::Infallible>)));
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    // Proxies that buffer (nginx) would hold the tokens back until the end.
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}

/// `response` with `guard` kept until its body has been sent or dropped (a request slot held for as long as a
/// stream runs, not only until its handler returns).
pub(crate) fn hold(response: Response, guard: impl Send + Sync + 'static) -> Response {
    use futures_util::StreamExt;
    let (parts, body) = response.into_parts();
    let data = body.into_data_stream().map(move |chunk| {
        let _ = &guard;
        chunk
    });
    Response::from_parts(parts, Body::from_stream(data))
}

/// Whether a response is a stream of events (its body outlives the handler).
pub(crate) fn is_event_stream(response: &Response) -> bool {
    response.headers().get(header::CONTENT_TYPE).is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"))
}

/// One framed event: `event: NAME` (when named) and the data on one line.
pub(crate) fn frame(name: Option<&str>, data: &str) -> Bytes {
    // `data` is JSON on one line (serde_json escapes newlines), so one `data:` line carries it.
    match name {
        Some(name) => Bytes::from(format!("event: {name}\ndata: {data}\n\n")),
        None => Bytes::from(format!("data: {data}\n\n")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_accept_header_asks_for_events_among_other_types() {
        let accept = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert(header::ACCEPT, HeaderValue::from_str(v).unwrap());
            wants_events(&h)
        };
        assert!(accept("text/event-stream"));
        assert!(accept("application/json, Text/Event-Stream;q=0.9"));
        assert!(!accept("application/json"));
        assert!(!accept("*/*"));
        assert!(!wants_events(&HeaderMap::new()));
        assert_eq!(frame(Some("token"), "{\"text\":\"a\\nb\"}"), "event: token\ndata: {\"text\":\"a\\nb\"}\n\n");
        assert_eq!(frame(None, "[DONE]"), "data: [DONE]\n\n");
    }
}
