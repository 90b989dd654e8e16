//! Streamed answers over real HTTP on 127.0.0.1: `POST /v1/ask` with `Accept: text/event-stream` and
//! `POST /v1/chat/completions` with `stream: true`, the engine's LLM a scripted OpenAI-compatible server that streams
//! (the testkit's `ScriptedServer`) and holds the rest of its answer back on a gate until the test has read the
//! first token from ragtune. So the first token event provably arrives before the answer ends, with no timing.

mod common;

use ragtune_testkit::http::{Events, Gate, Reply, SSE_DONE, ScriptedServer, chat_chunk, open_events, request};
use serde_json::{Value, json};

const DOCS: [(&str, &str); 2] = [
    (
        "scurvy",
        "Scurvy is a disease caused by a lack of vitamin C. James Lind showed in 1747 that citrus fruit cures it.",
    ),
    ("rickets", "Rickets is caused by a lack of vitamin D. It softens the bones of children."),
];

/// The pieces the scripted LLM streams for every answer: the first before its gate, the rest after it. Pieces
/// that are not words show that tokens are forwarded as they come, not cut into words after the fact.
const PIECES: [&str; 6] = ["Scur", "vy", " comes from", " a lack of", " vitamin C", " [1]."];

/// A streamed answer of the scripted LLM, paused after its first piece until `gate` opens.
fn streamed_answer(gate: &Gate) -> Reply {
    let mut reply = Reply::event_stream().send(chat_chunk(PIECES[0], None)).wait(gate);
    for (i, piece) in PIECES.iter().enumerate().skip(1) {
        reply = reply.send(chat_chunk(piece, (i == PIECES.len() - 1).then_some("stop")));
    }
    let usage = json!({"choices": [], "usage": {"prompt_tokens": 90, "completion_tokens": 6, "total_tokens": 96}});
    reply.send(format!("data: {usage}\n\n")).send(SSE_DONE)
}

struct Running {
    url: String,
    _dir: tempfile::TempDir,
    _stop: tokio::sync::oneshot::Sender<()>,
}

/// A server whose engine asks `llm` for its answers and for nothing else (no CRAG, judge, retry or extraction,
/// which would call it too).
async fn start(llm: &str) -> Running {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = common::offline_config(dir.path());
    cfg.llm.url = llm.to_owned();
    cfg.crag.enabled = false;
    cfg.pipeline.judge = false;
    cfg.pipeline.retry = false;
    cfg.pipeline.context = ragtune::ContextMode::Full;
    let (url, stop) = common::serve(ragtune::Engine::open(cfg).await.unwrap()).await;
    let docs = json!({"documents": DOCS.iter().map(|(id, text)| json!({"id": id, "text": text})).collect::<Vec<_>>()});
    let put = call(&url, "PUT", "/v1/documents", &[], Some(docs)).await;
    assert_eq!(put.status, 200, "{}", put.body);
    Running { url, _dir: dir, _stop: stop }
}

async fn call(
    url: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<Value>,
) -> ragtune_testkit::http::Response {
    let (url, method, path) = (url.to_owned(), method.to_owned(), path.to_owned());
    let headers: Vec<(String, String)> = headers.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
    tokio::task::spawn_blocking(move || {
        let h: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        request(&method, &url, &path, &h, body.map(|b| b.to_string()).as_deref()).expect("the server answers")
    })
    .await
    .unwrap()
}

/// Opens `path` for events (on the blocking pool: the client blocks until the answer's head arrives).
async fn open(url: &str, path: &str, headers: &[(&str, &str)], body: Value) -> Events {
    let (url, path) = (url.to_owned(), path.to_owned());
    let headers: Vec<(String, String)> = headers.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
    tokio::task::spawn_blocking(move || {
        let h: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        open_events("POST", &url, &path, &h, Some(&body.to_string())).expect("the server answers")
    })
    .await
    .unwrap()
}

/// Reads on the blocking pool: the next event, or every event left.
async fn next(mut events: Events) -> (Events, ragtune_testkit::http::Event) {
    tokio::task::spawn_blocking(move || {
        let e = events.next_event().unwrap().expect("an event");
        (events, e)
    })
    .await
    .unwrap()
}

async fn read_rest(mut events: Events) -> Vec<ragtune_testkit::http::Event> {
    tokio::task::spawn_blocking(move || events.rest().unwrap()).await.unwrap()
}

fn text_of(e: &ragtune_testkit::http::Event) -> String {
    let v: Value = serde_json::from_str(&e.data).unwrap();
    v["text"].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ask_with_accept_event_stream_sends_tokens_before_the_answer_ends_then_the_whole_response() {
    let (ask_gate, chat_gate) = (Gate::new(), Gate::new());
    // Two streamed answers, then the same answer whole (for the request that does not stream).
    let whole =
        json!({"model": "scripted", "choices": [{"message": {"content": PIECES.concat()}, "finish_reason": "stop"}]});
    let llm = ScriptedServer::start(vec![
        streamed_answer(&ask_gate),
        streamed_answer(&chat_gate),
        Reply::json(200, &whole.to_string()),
    ])
    .unwrap();
    let s = start(llm.url()).await;
    let question = json!({"question": "What causes scurvy?"});

    let events = open(&s.url, "/v1/ask", &[("Accept", "text/event-stream")], question.clone()).await;
    assert_eq!(events.status, 200);
    assert!(events.header("content-type").is_some_and(|t| t.starts_with("text/event-stream")), "{:?}", events.headers);
    let (events, first) = next(events).await;
    assert_eq!((first.event.as_str(), text_of(&first).as_str()), ("token", "Scur"));
    // The LLM holds the rest of its answer until the gate opens: the answer cannot have ended yet.
    assert_eq!(llm.requests().len(), 1);
    ask_gate.open();
    let rest = read_rest(events).await;
    let (answer, tokens) = rest.split_last().expect("a final event");
    assert_eq!(answer.event, "answer", "{rest:?}");
    assert!(tokens.iter().all(|e| e.event == "token"), "{rest:?}");
    let streamed: String = std::iter::once(text_of(&first)).chain(tokens.iter().map(text_of)).collect();
    assert_eq!(streamed, PIECES.concat());
    // The final event is the response `/v1/ask` sends whole, with the time to first token.
    let response: Value = serde_json::from_str(&answer.data).unwrap();
    assert_eq!(response["answer"], PIECES.concat().trim());
    assert_eq!(
        (response["answer_kind"].as_str(), response["citations"][0]["doc_id"].as_str()),
        (Some("llm"), Some("scurvy"))
    );
    assert!(response["ttft_ms"].as_f64().is_some() && response["generation_ms"].as_f64().is_some(), "{response}");
    assert_eq!(response["cost"]["tokens"], 96, "the usage the LLM sent: {response}");
    assert!(response["trace"].as_array().is_some_and(Vec::is_empty), "no trace unless asked");
    let sent = llm.requests();
    assert!(sent[0].contains("\"stream\":true"), "the engine asked the LLM to stream: {}", sent[0]);

    // `stream: true` on the OpenAI route forwards the same tokens as chunks, the first before the answer ends.
    let chat = json!({"messages": [{"role": "user", "content": "What causes scurvy?"}], "stream": true});
    let events = open(&s.url, "/v1/chat/completions", &[], chat).await;
    assert_eq!(events.status, 200);
    let (events, role) = next(events).await;
    assert_eq!(serde_json::from_str::<Value>(&role.data).unwrap()["choices"][0]["delta"]["role"], "assistant");
    let (events, first) = next(events).await;
    let delta = |e: &ragtune_testkit::http::Event| -> Option<String> {
        let v: Value = serde_json::from_str(&e.data).ok()?;
        v["choices"][0]["delta"]["content"].as_str().map(str::to_owned)
    };
    assert_eq!(delta(&first).as_deref(), Some("Scur"));
    assert_eq!(llm.requests().len(), 2);
    chat_gate.open();
    let rest = read_rest(events).await;
    assert_eq!(rest.last().map(|e| e.data.as_str()), Some("[DONE]"));
    let deltas: Vec<String> = rest.iter().filter_map(delta).filter(|d| !d.is_empty()).collect();
    // The LLM's pieces as they came, then the sources in word-sized deltas.
    assert_eq!(deltas[..PIECES.len() - 1], PIECES[1..], "{deltas:?}");
    let content: String = std::iter::once("Scur".to_owned()).chain(deltas).collect();
    assert_eq!(content, format!("{}\n\nSources:\n[1] scurvy", PIECES.concat()));
    let stop: Value = serde_json::from_str(&rest[rest.len() - 2].data).unwrap();
    assert_eq!(stop["choices"][0]["finish_reason"], "stop", "{stop}");
    assert_eq!(stop["ragtune"]["citations"][0]["doc_id"], "scurvy", "{stop}");

    // Without the header the route answers whole, as before, and the engine did not ask the LLM to stream.
    let r = call(&s.url, "POST", "/v1/ask", &[], Some(question)).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.header("content-type").is_some_and(|t| t.starts_with("application/json")));
    assert_eq!(r.json()["answer"], PIECES.concat().trim());
    assert!(r.json().get("ttft_ms").is_none(), "not streamed: {}", r.body);
    assert!(!llm.requests()[2].contains("\"stream\""), "{}", llm.requests()[2]);

    // A request that fails before the pipeline runs is an ordinary HTTP error, not a stream.
    let r = call(&s.url, "POST", "/v1/ask", &[("Accept", "text/event-stream")], Some(json!({"question": " "}))).await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(r.json()["error"]["kind"], "invalid_input", "{}", r.body);
    assert_eq!(llm.requests().len(), 3, "no other stage called the LLM");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_an_llm_the_stream_carries_the_extractive_answer_whole_then_the_response() {
    let dir = tempfile::tempdir().unwrap();
    let engine = ragtune::Engine::open(common::offline_config(dir.path())).await.unwrap();
    let (url, _stop) = common::serve(engine).await;
    let docs = json!({"documents": DOCS.iter().map(|(id, text)| json!({"id": id, "text": text})).collect::<Vec<_>>()});
    assert_eq!(call(&url, "PUT", "/v1/documents", &[], Some(docs)).await.status, 200);
    let body = json!({"question": "What causes scurvy?", "trace": true});
    let events = open(&url, "/v1/ask", &[("Accept", "application/json, text/event-stream")], body).await;
    let all = read_rest(events).await;
    assert_eq!(all.iter().map(|e| e.event.as_str()).collect::<Vec<_>>(), ["token", "answer"], "{all:?}");
    let response: Value = serde_json::from_str(&all[1].data).unwrap();
    assert_eq!(text_of(&all[0]), response["answer"].as_str().unwrap());
    assert_eq!(response["answer_kind"], "extractive");
    assert!(response.get("ttft_ms").is_none() && response["trace"].as_array().is_some_and(|t| !t.is_empty()));
}
