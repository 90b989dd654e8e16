//! The client against real HTTP servers on 127.0.0.1: the testkit's scripted server for failures, retries, size
//! limits and streams (whose replies pause on a gate), and the local LLM (`cargo xtask llm start`,
//! `RAGTUNE_LLM_URL`) for real answers.

use std::sync::Arc;
use std::time::Duration;

use ragtune_core::{Ctx, ErrorKind, Llm, LlmRequest, LlmResponse, TraceSink};
use ragtune_llm::{CachedLlm, Endpoint, LlmConfig, OpenAiClient, generate_json, prompts, raw_output};
use ragtune_testkit::http::{Gate, Reply, SSE_DONE, ScriptedServer, chat_chunk, closed_port};

fn ok(content: &str, finish: &str) -> Reply {
    let body = serde_json::json!({
        "model": "scripted",
        "choices": [{ "message": { "role": "assistant", "content": content }, "text": content, "finish_reason": finish }],
        "usage": { "prompt_tokens": 11, "completion_tokens": 5, "total_tokens": 16 }
    });
    Reply::json_value(200, &body)
}

fn status(code: u16, body: &str) -> Reply {
    Reply::json(code, body)
}

/// The testkit's scripted server answering with `script`, in order (the last reply repeats).
fn serve(script: Vec<Reply>) -> ScriptedServer {
    ScriptedServer::start(script).unwrap()
}

fn client(url: &str) -> OpenAiClient {
    OpenAiClient::new(LlmConfig {
        base_url: url.to_owned(),
        model: "m".into(),
        api_key: Some("sk-secret-key".into()),
        timeout: Duration::from_secs(5),
        initial_backoff: Duration::from_millis(10),
        ..LlmConfig::default()
    })
    .unwrap()
}

fn simple() -> LlmRequest {
    prompts::HYDE.render(&[("query", "what causes scurvy?")]).unwrap()
}

#[tokio::test]
async fn a_chat_answer_carries_text_tokens_and_model_and_the_request_is_openai_shaped() {
    let server = serve(vec![ok("Scurvy is caused by a lack of vitamin C.", "stop")]);
    let llm = client(server.url());
    let sink = TraceSink::new();
    let out = llm.generate(&Ctx::new().with_trace(sink.clone()), &[simple()]).await.unwrap();
    assert_eq!(out[0].text, "Scurvy is caused by a lack of vitamin C.");
    assert_eq!((out[0].cost.tokens, out[0].cost.calls), (16, 1));
    assert_eq!((out[0].model.as_str(), out[0].finish_reason.as_str()), ("scripted", "stop"));
    let req = server.requests()[0].clone();
    assert!(req.starts_with("POST /v1/chat/completions"), "{req}");
    assert!(
        req.to_ascii_lowercase().contains("authorization: bearer sk-secret-key"),
        "the key is sent as a bearer token"
    );
    let body: serde_json::Value = serde_json::from_str(&req[req.find("\r\n\r\n").unwrap() + 4..]).unwrap();
    assert_eq!(body["model"], "m");
    assert_eq!(body["messages"][1]["role"], "user");
    assert_eq!(body["max_tokens"], 256);
    assert_eq!(body["seed"], 0);
    let trace = serde_json::to_string(&sink.take()).unwrap();
    assert!(trace.contains("\"llm\"") && !trace.contains("sk-secret-key"), "traced, without the key: {trace}");
}

#[tokio::test]
async fn completions_mode_sends_one_prompt() {
    let server = serve(vec![ok("a passage", "stop")]);
    let llm = OpenAiClient::new(LlmConfig {
        base_url: format!("{}/v1/", server.url()),
        endpoint: Endpoint::Completions,
        ..LlmConfig::default()
    })
    .unwrap();
    let out = llm.generate(&Ctx::new(), &[simple()]).await.unwrap();
    assert_eq!(out[0].text, "a passage");
    let req = server.requests()[0].clone();
    assert!(req.starts_with("POST /v1/completions"), "{req}");
    assert!(req.contains("\"prompt\":") && req.contains("Assistant:"), "{req}");
}

#[tokio::test]
async fn transient_failures_are_retried_and_permanent_ones_are_not() {
    let server = serve(vec![
        status(503, "{\"error\":{\"message\":\"loading model\"}}"),
        status(429, "slow down"),
        ok("fine", "stop"),
    ]);
    let out = client(server.url()).generate(&Ctx::new(), &[simple()]).await.unwrap();
    assert_eq!(out[0].text, "fine");
    assert_eq!(server.requests().len(), 3, "two retries, then success");

    let server = serve(vec![status(401, "{\"error\":{\"message\":\"bad key\"}}"), ok("never", "stop")]);
    let err = client(server.url()).generate(&Ctx::new(), &[simple()]).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Permanent);
    assert!(err.to_string().contains("HTTP 401: bad key") && err.to_string().contains("API key"), "{err}");
    assert!(!err.to_string().contains("sk-secret-key"), "the key never appears in errors: {err}");
    assert_eq!(server.requests().len(), 1, "no retry of a permanent failure");

    let server = serve(vec![status(500, "boom")]);
    let err = client(server.url()).generate(&Ctx::new(), &[simple()]).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Transient, "exhausted retries stay transient");
    assert_eq!(server.requests().len(), 3, "1 try + max_retries (2)");
}

#[tokio::test]
async fn a_slow_server_times_out_and_an_absent_one_is_unavailable() {
    let slow = ok("late", "stop").delayed(Duration::from_secs(3));
    let server = serve(vec![slow]);
    let llm = OpenAiClient::new(LlmConfig {
        base_url: server.url().to_owned(),
        timeout: Duration::from_millis(200),
        max_retries: 1,
        initial_backoff: Duration::from_millis(10),
        ..LlmConfig::default()
    })
    .unwrap();
    let err = llm.generate(&Ctx::new(), &[simple()]).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Transient);
    assert!(err.to_string().contains("did not answer within 0.2 s"), "{err}");

    // A deadline in the context cuts the attempt shorter than the configured timeout.
    let llm = client(server.url());
    let ctx = Ctx::new().with_timeout(Duration::from_millis(150));
    assert!(llm.generate(&ctx, &[simple()]).await.is_err());

    let dead = closed_port();
    let err = client(&dead).generate(&Ctx::new(), &[simple()]).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable);
    assert!(err.to_string().contains(&dead), "the message names the URL: {err}");
}

#[tokio::test]
async fn malformed_structured_output_is_its_own_error_and_one_repair_fixes_it() {
    let request = prompts::REWRITE.render(&[("query", "who wrote it?"), ("context", "Dune")]).unwrap();
    // Invalid JSON, then (for the repair prompt) valid JSON.
    let server = serve(vec![ok("{\"query\": \"Dune auth", "stop"), ok("{\"query\": \"Dune author\"}", "stop")]);
    let llm = client(server.url());
    let err = llm.generate(&Ctx::new(), std::slice::from_ref(&request)).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::MalformedOutput);
    assert_eq!(raw_output(&err).unwrap().text, "{\"query\": \"Dune auth");

    let server = serve(vec![ok("{\"query\": \"Dune auth", "stop"), ok("{\"query\": \"Dune author\"}", "stop")]);
    let answer = generate_json(&client(server.url()), &Ctx::new(), request.clone()).await.unwrap();
    assert_eq!(answer.value["query"], "Dune author");
    assert!(answer.repaired);
    assert_eq!(answer.cost.calls, 2);
    assert!(server.requests()[1].contains("not valid"), "the second call is the repair prompt");

    // Truncated output (finish_reason length), twice: the caller gets MalformedOutput and can degrade.
    let server = serve(vec![ok("{\"query\": \"Dune", "length")]);
    let err = generate_json(&client(server.url()), &Ctx::new(), request).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::MalformedOutput);
}

#[tokio::test]
async fn the_disk_cache_answers_repeated_requests_without_calling() {
    let server = serve(vec![ok("first", "stop"), ok("second", "stop")]);
    let dir = tempfile::tempdir().unwrap();
    let cached = CachedLlm::new(Arc::new(client(server.url())), dir.path()).unwrap();
    let a = cached.generate(&Ctx::new(), &[simple()]).await.unwrap();
    let b = cached.generate(&Ctx::new(), &[simple()]).await.unwrap();
    assert_eq!(a, b, "the same answer, cost included");
    assert_eq!(server.requests().len(), 1);
    let other = prompts::HYDE.render(&[("query", "what causes rickets?")]).unwrap();
    assert_eq!(cached.generate(&Ctx::new(), &[other]).await.unwrap()[0].text, "second");
    // A fresh decorator on the same directory reads the same answers.
    let again = CachedLlm::new(Arc::new(client(server.url())), dir.path()).unwrap();
    assert_eq!(again.generate(&Ctx::new(), &[simple()]).await.unwrap(), a);
    assert_eq!(server.requests().len(), 2);
}

/// An LLM server redirecting to another origin (here another port) never gets the key, nor the prompt, sent there:
/// the redirect is refused with a permanent error naming both origins. Within the origin a redirect is followed.
#[tokio::test]
async fn a_redirect_to_another_origin_is_refused_and_nothing_crosses() {
    let b = serve(vec![ok("from b", "stop")]);
    for code in [301, 302, 303, 307, 308] {
        let moved = status(code, "moved").header("location", &format!("{}/v1/chat/completions", b.url()));
        let a = serve(vec![moved]);
        let llm = client(a.url());
        let err = llm.generate(&Ctx::new(), &[simple()]).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Permanent, "HTTP {code}: {err}");
        let refused = format!("refused to follow a redirect from {} to {}, another origin", a.url(), b.url());
        assert!(err.to_string().contains(&refused), "HTTP {code}: {err}");
        assert!(!err.to_string().contains("sk-secret-key"), "{err}");
        assert_eq!(a.requests().len(), 1, "a permanent failure is not retried");
        let err = llm.ping().await.unwrap_err();
        assert!(err.to_string().contains(&refused), "the ping refuses it too: {err}");
    }
    let seen = b.requests();
    assert!(seen.is_empty(), "B received: {seen:?}");

    // Same origin: followed, key included (it goes to the same server).
    let moved = status(307, "moved").header("location", "/v2/chat/completions");
    let relative = serve(vec![moved, ok("followed", "stop")]);
    let out = client(relative.url()).generate(&Ctx::new(), &[simple()]).await.unwrap();
    assert_eq!(out[0].text, "followed");
    let requests = relative.requests();
    assert!(requests[1].starts_with("POST /v2/chat/completions"), "{}", requests[1]);
    assert!(requests[1].to_ascii_lowercase().contains("authorization: bearer sk-secret-key"), "{}", requests[1]);
}

fn capped(url: &str, max_response_bytes: usize) -> OpenAiClient {
    OpenAiClient::new(LlmConfig {
        base_url: url.to_owned(),
        timeout: Duration::from_secs(20),
        max_response_bytes,
        initial_backoff: Duration::from_millis(10),
        ..LlmConfig::default()
    })
    .unwrap()
}

/// A body over the limit is a permanent error naming the limit, whether it announces its length (then nothing of
/// it is read: the server never finishes it, so only the announced length can end the call with this error) or
/// streams without one until the client stops reading (the server would send 64 MiB).
#[tokio::test]
async fn a_response_over_the_size_limit_is_a_permanent_error_naming_it() {
    assert_eq!(ragtune_llm::DEFAULT_MAX_RESPONSE_BYTES, 8 << 20);
    assert_eq!(LlmConfig::default().max_response_bytes, 8 << 20);
    let json = || Reply::new(200).header("content-type", "application/json");
    // Announces one byte over the limit, sends the start, and holds the connection open without finishing.
    let announced =
        serve(vec![json().header("content-length", "1048577").send("{\"choices\": [").hold(Duration::from_secs(30))]);
    let url = announced.url();
    let err = capped(url, 1 << 20).generate(&Ctx::new(), &[simple()]).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Permanent, "{err}");
    assert!(err.to_string().contains("larger than the limit of 1048576 bytes (`max_response_bytes`)"), "{err}");
    assert!(err.to_string().contains(url), "{err}");
    assert_eq!(announced.requests().len(), 1, "not retried");

    let unannounced = serve(vec![json().send_repeated(vec![b' '; 64 * 1024], 1024)]);
    let err = capped(unannounced.url(), 256 * 1024).generate(&Ctx::new(), &[simple()]).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Permanent, "{err}");
    assert!(err.to_string().contains("larger than the limit of 262144 bytes"), "{err}");
    assert_eq!(unannounced.requests().len(), 1, "not retried");

    // Chunked, and an answer just under the limit is read as usual.
    let answer =
        serde_json::json!({"choices": [{"message": {"content": "fine"}, "finish_reason": "stop"}]}).to_string();
    let chunked =
        json().header("transfer-encoding", "chunked").send(format!("{:x}\r\n{answer}\r\n0\r\n\r\n", answer.len()));
    let server = serve(vec![chunked.clone()]);
    assert_eq!(capped(server.url(), answer.len()).generate(&Ctx::new(), &[simple()]).await.unwrap()[0].text, "fine");
    let server = serve(vec![chunked]);
    let err = capped(server.url(), answer.len() - 1).generate(&Ctx::new(), &[simple()]).await.unwrap_err();
    assert!(err.to_string().contains("larger than the limit"), "{err}");

    // An error status with an oversized body keeps its status in the message.
    let failing = serve(vec![Reply::new(500).send_repeated(vec![b'x'; 64 * 1024], 64)]);
    let llm = OpenAiClient::new(LlmConfig { max_retries: 0, ..capped(failing.url(), 1024).config().clone() }).unwrap();
    let err = llm.generate(&Ctx::new(), &[simple()]).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Transient, "{err}");
    assert!(err.to_string().contains("HTTP 500"), "{err}");
}

/// The local LLM server, when one runs (`cargo xtask llm start` exports `RAGTUNE_LLM_URL`; CI requires it).
fn local_llm() -> Option<OpenAiClient> {
    let url = std::env::var("RAGTUNE_LLM_URL").ok().filter(|u| !u.is_empty());
    let required = std::env::var("RAGTUNE_REQUIRE_LLM").is_ok_and(|v| v == "1");
    match url {
        Some(url) => Some(
            OpenAiClient::new(LlmConfig { base_url: url, timeout: Duration::from_secs(120), ..LlmConfig::default() })
                .unwrap(),
        ),
        None => {
            assert!(!required, "RAGTUNE_REQUIRE_LLM=1 but RAGTUNE_LLM_URL is not set");
            eprintln!("SKIPPED: RAGTUNE_LLM_URL is not set; run `cargo xtask llm start` to test against the local LLM");
            None
        }
    }
}

#[tokio::test]
async fn the_local_llm_answers_text_and_schema_constrained_json() {
    let Some(llm) = local_llm() else { return };
    let mut request = prompts::HYDE.render(&[("query", "what causes scurvy?")]).unwrap();
    request.temperature = 0.0;
    request.max_tokens = 32;
    let out = llm.generate(&Ctx::new(), &[request]).await.unwrap();
    assert!(!out[0].text.trim().is_empty());
    assert!(out[0].cost.tokens > 0 && out[0].cost.calls == 1, "usage is reported: {:?}", out[0].cost);

    let request = prompts::ROUTE.render(&[("query", "Compare the causes of scurvy and rickets.")]).unwrap();
    let answer = generate_json(&llm, &Ctx::new(), request).await.unwrap();
    let verdict = answer.value["complexity"].as_str().unwrap_or_default().to_owned();
    assert!(["simple", "moderate", "complex"].contains(&verdict.as_str()), "a verdict of the schema: {}", answer.value);

    let request = prompts::MULTI_QUERY.render(&[("query", "what causes scurvy?"), ("n", "3")]).unwrap();
    let answer = generate_json(&llm, &Ctx::new(), request).await.unwrap();
    let queries = answer.value["queries"].as_array().expect("a list of queries");
    assert!(!queries.is_empty() && queries.iter().all(serde_json::Value::is_string), "{}", answer.value);
}

/// Streams `request` from `llm` on a task of its own; its pieces arrive on the receiver as they are handed over.
fn stream_in_background(
    llm: OpenAiClient,
    ctx: Ctx,
    request: LlmRequest,
) -> (tokio::sync::mpsc::UnboundedReceiver<String>, tokio::task::JoinHandle<ragtune_core::Result<LlmResponse>>) {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let task = tokio::spawn(async move {
        let mut on_token = |piece: &str| {
            let _ = tx.send(piece.to_owned());
        };
        llm.generate_stream(&ctx, &request, &mut on_token).await
    });
    (rx, task)
}

#[tokio::test]
async fn a_streamed_answer_is_handed_over_piece_by_piece_as_it_arrives() {
    let gate = Gate::new();
    let usage =
        serde_json::json!({"choices": [], "usage": {"prompt_tokens": 30, "completion_tokens": 3, "total_tokens": 33}});
    let server = serve(vec![
        Reply::event_stream()
            .send(": keep-alive\n\n")
            .send(chat_chunk("Scurvy", None))
            // Nothing more exists until the test has seen the first piece and opens the gate.
            .wait(&gate)
            .send(chat_chunk(" is caused by", None))
            .send(chat_chunk(" a lack of vitamin C.", Some("stop")))
            .send(format!("data: {usage}\n\n"))
            .send(SSE_DONE),
    ]);
    let sink = TraceSink::new();
    let (mut pieces, task) = stream_in_background(client(server.url()), Ctx::new().with_trace(sink.clone()), simple());
    assert_eq!(pieces.recv().await.as_deref(), Some("Scurvy"), "the first piece arrives before the rest is sent");
    gate.open();
    let response = task.await.unwrap().unwrap();
    let mut rest = Vec::new();
    while let Some(p) = pieces.recv().await {
        rest.push(p);
    }
    assert_eq!(rest, [" is caused by", " a lack of vitamin C."], "in order");
    assert_eq!(response.text, "Scurvy is caused by a lack of vitamin C.");
    assert_eq!((response.cost.tokens, response.cost.calls), (33, 1), "the usage the server sent");
    assert_eq!((response.finish_reason.as_str(), response.model.as_str()), ("stop", "scripted"));
    let req = &server.requests()[0];
    let body: serde_json::Value = serde_json::from_str(&req[req.find("\r\n\r\n").unwrap() + 4..]).unwrap();
    assert_eq!((body["stream"].as_bool(), body["stream_options"]["include_usage"].as_bool()), (Some(true), Some(true)));
    assert!(req.to_ascii_lowercase().contains("authorization: bearer sk-secret-key"));
    let trace = sink.take();
    let llm = trace.iter().find(|e| e.stage == "llm").unwrap();
    assert_eq!((llm.detail["stream"].as_bool(), llm.detail["pieces"].as_u64()), (Some(true), Some(3)), "{llm:?}");
    assert!(llm.detail["first_token_ms"].is_f64(), "{llm:?}");
}

#[tokio::test]
async fn a_stream_without_usage_is_estimated_from_its_pieces_and_the_completions_endpoint_streams_text() {
    let text = |t: &str, finish: Option<&str>| {
        let chunk = serde_json::json!({"choices": [{"text": t, "finish_reason": finish}]});
        format!("data: {chunk}\n\n")
    };
    // No `[DONE]`: a finish reason ends the answer as well.
    let server = serve(vec![
        Reply::event_stream().send(text("a", None)).send(text("", None)).send(text(" passage", Some("length"))),
    ]);
    let llm = OpenAiClient::new(LlmConfig {
        base_url: server.url().to_owned(),
        endpoint: Endpoint::Completions,
        ..LlmConfig::default()
    })
    .unwrap();
    let sink = TraceSink::new();
    let mut pieces = Vec::new();
    let ctx = Ctx::new().with_trace(sink.clone());
    let out = llm.generate_stream(&ctx, &simple(), &mut |p: &str| pieces.push(p.to_owned())).await.unwrap();
    assert_eq!(
        (pieces, out.text.as_str(), out.finish_reason.as_str()),
        (vec!["a".to_owned(), " passage".to_owned()], "a passage", "length")
    );
    assert_eq!((out.cost.tokens, out.model.as_str()), (2, "local"), "one token per piece; the configured model");
    assert!(server.requests()[0].starts_with("POST /v1/completions"));
    let trace = serde_json::to_string(&sink.take()).unwrap();
    assert!(trace.contains("estimated from the pieces"), "{trace}");
}

#[tokio::test]
async fn a_stream_broken_mid_way_is_an_error_that_says_how_far_it_got_and_is_not_retried() {
    // The connection closes after two pieces, without a finish reason or `[DONE]`.
    let server = serve(vec![Reply::event_stream().send(chat_chunk("Scurvy", None)).send(chat_chunk(" is", None))]);
    let mut pieces = Vec::new();
    let err = client(server.url())
        .generate_stream(&Ctx::new(), &simple(), &mut |p: &str| pieces.push(p.to_owned()))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Transient, "{err}");
    let message = err.to_string();
    assert!(message.contains("ended early") && message.contains("after 2 pieces (9 characters)"), "{message}");
    assert!(message.contains(server.url()) && !message.contains("sk-secret-key"), "{message}");
    assert_eq!(pieces, ["Scurvy", " is"]);
    assert_eq!(server.requests().len(), 1, "pieces were handed over: a second attempt would not continue them");

    // A chunked body cut inside a chunk: the transport says the body broke.
    let cut = Reply::new(200)
        .header("content-type", "text/event-stream")
        .header("transfer-encoding", "chunked")
        .send(format!("{:x}\r\n{}\r\n", chat_chunk("Scurvy", None).len(), chat_chunk("Scurvy", None)))
        .send("40\r\ndata: {\"choi");
    let server = serve(vec![cut]);
    let err = client(server.url()).generate_stream(&Ctx::new(), &simple(), &mut |_: &str| {}).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Transient, "{err}");
    assert!(err.to_string().contains("broke") && err.to_string().contains("after 1 piece (6 characters)"), "{err}");
    assert_eq!(server.requests().len(), 1);

    // An error the server reports inside its stream.
    let server = serve(vec![
        Reply::event_stream()
            .send(chat_chunk("Sc", None))
            .send("data: {\"error\": {\"message\": \"slot unavailable\"}}\n\n"),
    ]);
    let err = client(server.url()).generate_stream(&Ctx::new(), &simple(), &mut |_: &str| {}).await.unwrap_err();
    assert!(
        err.to_string().contains("reported an error in its stream, after 1 piece (2 characters): slot unavailable"),
        "{err}"
    );
}

#[tokio::test]
async fn a_malformed_chunk_is_a_permanent_error_quoting_it() {
    let server = serve(vec![
        Reply::event_stream()
            .send(chat_chunk("Scurvy", None))
            .send("data: {\"choices\": [{\"delta\": \n\n")
            .send(SSE_DONE),
    ]);
    let err = client(server.url()).generate_stream(&Ctx::new(), &simple(), &mut |_: &str| {}).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Permanent, "{err}");
    assert!(
        err.to_string()
            .contains("a stream chunk that is not JSON, after 1 piece (6 characters): {\"choices\": [{\"delta\":"),
        "{err}"
    );
    assert_eq!(server.requests().len(), 1, "not retried");
}

#[tokio::test]
async fn a_failure_before_the_first_piece_is_retried_and_a_whole_answer_is_one_piece() {
    let server = serve(vec![
        Reply::json(503, "{\"error\": {\"message\": \"loading model\"}}"),
        // The connection closes before any piece: nothing was handed over, so it is retried too.
        Reply::event_stream(),
        Reply::event_stream().send(chat_chunk("fine", Some("stop"))).send(SSE_DONE),
    ]);
    let mut pieces = Vec::new();
    let out = client(server.url())
        .generate_stream(&Ctx::new(), &simple(), &mut |p: &str| pieces.push(p.to_owned()))
        .await
        .unwrap();
    assert_eq!((out.text.as_str(), pieces), ("fine", vec!["fine".to_owned()]));
    assert_eq!(server.requests().len(), 3, "two retries before the first piece");

    // A permanent failure is not retried, as without streaming.
    let server = serve(vec![Reply::json(401, "{\"error\": {\"message\": \"bad key\"}}")]);
    let err = client(server.url()).generate_stream(&Ctx::new(), &simple(), &mut |_: &str| {}).await.unwrap_err();
    assert_eq!((err.kind(), server.requests().len()), (ErrorKind::Permanent, 1));

    // A server that ignores `stream` and answers whole: the whole text is one piece.
    let whole = serde_json::json!({"choices": [{"message": {"content": "all at once"}, "finish_reason": "stop"}]});
    let server = serve(vec![Reply::json(200, &whole.to_string())]);
    let mut pieces = Vec::new();
    let out = client(server.url())
        .generate_stream(&Ctx::new(), &simple(), &mut |p: &str| pieces.push(p.to_owned()))
        .await
        .unwrap();
    assert_eq!((out.text.as_str(), pieces), ("all at once", vec!["all at once".to_owned()]));
}

#[tokio::test]
async fn a_stream_over_the_size_limit_and_structured_output_are_checked_as_without_streaming() {
    let mut reply = Reply::event_stream();
    for _ in 0..64 {
        reply = reply.send(chat_chunk(&"x".repeat(1000), None));
    }
    let server = serve(vec![reply]);
    let err =
        capped(server.url(), 16 * 1024).generate_stream(&Ctx::new(), &simple(), &mut |_: &str| {}).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Permanent, "{err}");
    assert!(err.to_string().contains("larger than the limit of 16384 bytes"), "{err}");

    let request = prompts::REWRITE.render(&[("query", "who wrote it?"), ("context", "Dune")]).unwrap();
    let server = serve(vec![
        Reply::event_stream()
            .send(chat_chunk("{\"query\": ", None))
            .send(chat_chunk("\"Dune author\"}", Some("stop")))
            .send(SSE_DONE),
    ]);
    let mut pieces = String::new();
    let out =
        client(server.url()).generate_stream(&Ctx::new(), &request, &mut |p: &str| pieces.push_str(p)).await.unwrap();
    assert_eq!((pieces.as_str(), out.text.as_str()), ("{\"query\": \"Dune author\"}", "{\"query\":\"Dune author\"}"));
    let server = serve(vec![Reply::event_stream().send(chat_chunk("{\"query\": \"Du", Some("length"))).send(SSE_DONE)]);
    let err = client(server.url()).generate_stream(&Ctx::new(), &request, &mut |_: &str| {}).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::MalformedOutput, "{err}");
}

#[tokio::test]
async fn the_local_llm_streams_the_answer_it_would_give_whole() {
    let Some(llm) = local_llm() else { return };
    let mut request = prompts::HYDE.render(&[("query", "what causes scurvy?")]).unwrap();
    request.temperature = 0.0;
    request.max_tokens = 24;
    let whole = llm.generate(&Ctx::new(), std::slice::from_ref(&request)).await.unwrap().remove(0);
    let mut pieces = Vec::new();
    let streamed = llm.generate_stream(&Ctx::new(), &request, &mut |p: &str| pieces.push(p.to_owned())).await.unwrap();
    assert!(pieces.len() > 1, "more than one piece: {pieces:?}");
    assert_eq!(pieces.concat(), streamed.text);
    assert_eq!(streamed.text, whole.text, "the same answer at temperature 0 with the same seed");
    assert!(streamed.cost.tokens > 0, "{:?}", streamed.cost);
}
