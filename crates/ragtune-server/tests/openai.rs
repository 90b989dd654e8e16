//! The OpenAI-compatible routes and the collections of `ragtune serve`, over real HTTP on 127.0.0.1 (issue 46):
//! chat completions whole and streamed (Server-Sent Events parsed, `[DONE]` last), OpenAI's error shape, the model
//! list, the key, and two stores behind one server.

use ragtune::ServerSettings;
use ragtune_server::Server;
use ragtune_testkit::http::{Response, request};
use serde_json::{Value, json};

const KEY: &str = "test-key-0123456789abcdef";

struct Running {
    url: String,
    _dir: tempfile::TempDir,
    _stop: tokio::sync::oneshot::Sender<()>,
}

/// A server on a fresh default store (BM25 only, no LLM) with the collections `names`, each a store of its own.
async fn start(settings: ServerSettings, names: &[&str]) -> Running {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = ragtune::Config::default();
    cfg.store.path = dir.path().join("store");
    cfg.embedding.mode = ragtune::EmbeddingMode::Off;
    cfg.llm.url = String::new();
    cfg.llm.cache = false;
    let mut toml = String::new();
    for name in names {
        let path = dir.path().join(format!("store-{name}"));
        toml.push_str(&format!("[collections.{name}.store]\npath = {:?}\n", path.display().to_string()));
    }
    cfg.collections = ragtune::Config::from_toml(&toml).unwrap().collections;
    cfg.validate().unwrap();
    let engine = ragtune::Engine::open(cfg).await.unwrap();
    // `bind` opens the collections the engine's configuration names (what `ragtune serve` calls).
    let server = Server::bind(engine, settings).await.unwrap();
    let port = server.local_addr().port();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(server.run(async move {
        let _ = stopped.await;
    }));
    Running { url: format!("http://127.0.0.1:{port}"), _dir: dir, _stop: stop }
}

fn loopback() -> ServerSettings {
    ServerSettings { bind: "127.0.0.1:0".into(), ..ServerSettings::default() }
}

async fn call(url: &str, method: &str, path: &str, headers: &[(&str, &str)], body: Option<Value>) -> Response {
    let (url, method, path) = (url.to_owned(), method.to_owned(), path.to_owned());
    let headers: Vec<(String, String)> = headers.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
    tokio::task::spawn_blocking(move || {
        let h: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let body = body.map(|b| b.to_string());
        request(&method, &url, &path, &h, body.as_deref()).expect("the server answers")
    })
    .await
    .unwrap()
}

fn docs(ids: &[(&str, &str, &str)]) -> Value {
    json!({ "documents": ids.iter().map(|(id, title, text)| json!({"id": id, "title": title, "text": text}))
        .collect::<Vec<_>>() })
}

const SCURVY: (&str, &str, &str) = (
    "scurvy",
    "Scurvy",
    "Scurvy is a disease caused by a lack of vitamin C. James Lind showed in 1747 that citrus fruit cures it.",
);
const RICKETS: (&str, &str, &str) =
    ("rickets", "Rickets", "Rickets is caused by a lack of vitamin D. It softens the bones of children.");

/// Checks an error is in OpenAI's shape and returns its `code`.
fn openai_error(r: &Response) -> String {
    let e = &r.json()["error"];
    assert!(e["message"].as_str().is_some_and(|m| !m.is_empty()), "{} {}", r.status, r.body);
    assert!(e["type"].is_string() && e.get("param").is_some() && e.get("code").is_some(), "{}", r.body);
    e["code"].as_str().unwrap_or_default().to_owned()
}

/// The `data:` payloads of a Server-Sent Events body, in order.
fn events(body: &str) -> Vec<String> {
    body.split("\n\n")
        .filter(|e| !e.trim().is_empty())
        .map(|e| e.strip_prefix("data: ").unwrap_or_else(|| panic!("not a data event: {e:?}")).to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_completions_answer_with_numbered_sources_whole_and_streamed() {
    let s = start(loopback(), &[]).await;
    let u = s.url.as_str();
    assert_eq!(call(u, "PUT", "/v1/documents", &[], Some(docs(&[SCURVY, RICKETS]))).await.status, 200);

    // Common OpenAI parameters are accepted and ignored; the last user message is the question; the array form.
    let body = json!({
        "model": "ragtune", "temperature": 0.3, "max_tokens": 50, "top_p": 1, "n": 1, "user": "me",
        "presence_penalty": 0, "stop": ["\n\n\n"], "seed": 7,
        "messages": [
            {"role": "system", "content": "You are helpful."},
            {"role": "user", "content": "What softens bones?"},
            {"role": "assistant", "content": "Rickets."},
            {"role": "user", "content": [{"type": "text", "text": "What causes scurvy?"}]}
        ]
    });
    let r = call(u, "POST", "/v1/chat/completions", &[], Some(body.clone())).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let v = r.json();
    assert!(v["id"].as_str().unwrap().starts_with("chatcmpl-"), "{v}");
    assert_eq!((v["object"].as_str(), v["model"].as_str()), (Some("chat.completion"), Some("ragtune")));
    assert!(v["created"].as_u64().unwrap() > 1_600_000_000);
    let choice = &v["choices"][0];
    assert_eq!(v["choices"].as_array().unwrap().len(), 1);
    assert_eq!((choice["index"].as_u64(), choice["finish_reason"].as_str()), (Some(0), Some("stop")));
    assert_eq!(choice["message"]["role"], "assistant");
    let content = choice["message"]["content"].as_str().unwrap().to_owned();
    assert!(content.contains("vitamin C") && content.contains("[1]"), "{content}");
    assert!(content.contains("\n\nSources:\n[1] Scurvy — scurvy"), "{content}");
    let usage = &v["usage"];
    assert_eq!(
        usage["prompt_tokens"].as_u64().unwrap() + usage["completion_tokens"].as_u64().unwrap(),
        usage["total_tokens"].as_u64().unwrap(),
        "{usage}"
    );
    assert_eq!(v["ragtune"]["citations"][0]["doc_id"], "scurvy", "{v}");
    assert!(v["ragtune"]["crag"]["category"].is_string(), "{v}");

    // Streamed: a role chunk first, word deltas that concatenate to the same content, a stop chunk, [DONE] last.
    let mut stream = body;
    stream["stream"] = json!(true);
    stream["stream_options"] = json!({"include_usage": true});
    let r = call(u, "POST", "/v1/chat/completions", &[], Some(stream)).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.header("content-type").is_some_and(|t| t.starts_with("text/event-stream")), "{:?}", r.headers);
    let events = events(&r.body);
    assert!(events.len() > 4, "{events:?}");
    assert_eq!(events.last().unwrap(), "[DONE]");
    let chunks: Vec<Value> = events[..events.len() - 1].iter().map(|e| serde_json::from_str(e).unwrap()).collect();
    let id = chunks[0]["id"].as_str().unwrap();
    assert!(chunks.iter().all(|c| c["object"] == "chat.completion.chunk" && c["id"] == id && c["model"] == "ragtune"));
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let streamed: String =
        chunks.iter().filter_map(|c| c["choices"][0]["delta"]["content"].as_str()).collect::<Vec<_>>().concat();
    assert_eq!(streamed, content);
    let deltas = chunks.iter().filter(|c| c["choices"][0]["delta"]["content"].as_str().is_some_and(|t| !t.is_empty()));
    assert!(deltas.count() > 3, "word-sized deltas");
    let stop = &chunks[chunks.len() - 2];
    assert_eq!(stop["choices"][0]["finish_reason"], "stop", "{stop}");
    assert_eq!(stop["ragtune"]["citations"][0]["doc_id"], "scurvy", "{stop}");
    let usage = chunks.last().unwrap();
    assert!(usage["choices"].as_array().unwrap().is_empty() && usage["usage"]["total_tokens"].is_u64(), "{usage}");
    assert!(chunks[..chunks.len() - 2].iter().all(|c| c["choices"][0]["finish_reason"].is_null()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_routes_answer_errors_in_openai_shape() {
    let s = start(loopback(), &["docs"]).await;
    let u = s.url.as_str();
    let user = json!([{"role": "user", "content": "anything"}]);
    let cases = [
        (json!({"model": "ragtune", "messages": user, "n": 2}), 400, "invalid_input", Some("n")),
        (json!({"model": "ragtune"}), 400, "invalid_input", Some("messages")),
        (json!({"model": "ragtune", "messages": []}), 400, "invalid_input", Some("messages")),
        (json!({"messages": [{"role": "system", "content": "x"}]}), 400, "invalid_input", Some("messages")),
        (json!({"messages": [{"role": "user", "content": "  "}]}), 400, "invalid_input", Some("messages")),
        (json!({"model": "nope", "messages": user}), 404, "model_not_found", Some("model")),
        (json!({"model": "ragtune:nope", "messages": user}), 404, "model_not_found", Some("model")),
        (json!({"messages": user, "ragtune": {"top_k": 0}}), 400, "invalid_input", None),
        (json!({"messages": "not a list"}), 400, "invalid_input", None),
        (json!([1, 2]), 400, "invalid_input", None),
    ];
    for (body, status, code, param) in cases {
        let r = call(u, "POST", "/v1/chat/completions", &[], Some(body.clone())).await;
        assert_eq!((r.status, openai_error(&r).as_str()), (status, code), "{body}: {}", r.body);
        assert_eq!(r.json()["error"]["param"].as_str(), param, "{body}: {}", r.body);
        assert_eq!(r.json()["error"]["type"], "invalid_request_error", "{}", r.body);
    }
    // Errors of the outer layers too: wrong method, not JSON.
    let r = call(u, "GET", "/v1/chat/completions", &[], None).await;
    assert_eq!((r.status, openai_error(&r).as_str()), (405, "method_not_allowed"), "{}", r.body);
    let r = call(u, "POST", "/v1/chat/completions", &[("Host", "evil.example")], Some(json!({}))).await;
    assert_eq!(r.status, 400, "two Host headers: {}", r.body);
    assert_eq!(r.json()["error"]["type"], "invalid_request_error", "{}", r.body);
    // The other routes keep ragtune's shape.
    let r = call(u, "POST", "/v1/ask", &[], Some(json!({"question": ""}))).await;
    assert!(r.status == 400 && r.json()["error"]["kind"] == "invalid_input" && r.json()["error"]["type"].is_null());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn models_list_the_stores_and_openai_routes_need_the_key() {
    let s = start(ServerSettings { api_key: Some(KEY.into()), ..loopback() }, &["docs", "notes-2"]).await;
    let u = s.url.as_str();
    for (method, path) in [("GET", "/v1/models"), ("POST", "/v1/chat/completions")] {
        let r = call(u, method, path, &[], Some(json!({"messages": [{"role": "user", "content": "q"}]}))).await;
        assert_eq!((r.status, openai_error(&r).as_str()), (401, "unauthorized"), "{path}: {}", r.body);
        assert_eq!(r.json()["error"]["type"], "authentication_error");
        assert_eq!(r.header("www-authenticate"), Some("Bearer"));
        let r = call(u, method, path, &[("Authorization", "Bearer wrong-key-0123456789")], None).await;
        assert_eq!(r.status, 401, "{path}");
    }
    let bearer = format!("Bearer {KEY}");
    let auth = [("Authorization", bearer.as_str())];
    let r = call(u, "GET", "/v1/models", &auth, None).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let v = r.json();
    assert_eq!(v["object"], "list");
    let ids: Vec<&str> = v["data"].as_array().unwrap().iter().map(|m| m["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["ragtune", "ragtune:docs", "ragtune:notes-2"]);
    assert!(v["data"].as_array().unwrap().iter().all(|m| m["object"] == "model" && m["owned_by"] == "ragtune"));
    // The OpenAPI document lists the new routes, with OpenAI's error shape on them.
    let doc = call(u, "GET", "/openapi.json", &auth, None).await.json();
    assert!(doc["paths"]["/v1/chat/completions"]["post"].is_object());
    assert!(doc["paths"]["/v1/collections/{name}/documents/{id}"]["delete"]["parameters"][1]["name"] == "id");
    let text = doc["paths"]["/v1/models"]["get"]["responses"]["default"].to_string();
    assert!(text.contains("OpenAiErrorBody"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn collections_are_stores_of_their_own() {
    let s = start(loopback(), &["med", "other"]).await;
    let u = s.url.as_str();
    let r = call(u, "PUT", "/v1/collections/med/documents", &[], Some(docs(&[SCURVY]))).await;
    assert_eq!((r.status, r.json()["indexed"]["documents"].as_u64()), (200, Some(1)), "{}", r.body);
    assert_eq!(call(u, "PUT", "/v1/documents", &[], Some(docs(&[RICKETS]))).await.status, 200);

    // Each store finds its own documents and not the other's.
    let search = |path: &'static str| async move {
        let r = call(u, "POST", path, &[], Some(json!({"query": "lack of vitamin", "top_k": 5}))).await;
        assert_eq!(r.status, 200, "{path}: {}", r.body);
        let hits = r.json()["hits"].as_array().cloned().unwrap();
        hits.iter().map(|h| h["chunk"]["doc_id"].as_str().unwrap().to_owned()).collect::<Vec<_>>()
    };
    assert_eq!(search("/v1/collections/med/search").await, ["scurvy"]);
    assert_eq!(search("/v1/search").await, ["rickets"]);
    // A collection nothing was written to has no index yet.
    let r = call(u, "POST", "/v1/collections/other/search", &[], Some(json!({"query": "vitamin"}))).await;
    assert!(r.status == 404 && r.body.contains("no index yet"), "{}", r.body);
    let r = call(u, "GET", "/v1/collections/med/stats", &[], None).await;
    assert_eq!((r.status, r.json()["stats"]["documents"].as_u64()), (200, Some(1)), "{}", r.body);
    let r = call(u, "POST", "/v1/collections/med/ask", &[], Some(json!({"question": "What causes scurvy?"}))).await;
    assert_eq!((r.status, &r.json()["citations"][0]["doc_id"]), (200, &json!("scurvy")), "{}", r.body);
    let r = call(u, "POST", "/v1/collections/med/query", &[], Some(json!({"question": "What causes scurvy?"}))).await;
    assert_eq!(r.status, 200, "{}", r.body);

    // The chat model selects the collection: `ragtune:NAME` or `NAME`.
    for model in ["ragtune:med", "med"] {
        let body = json!({"model": model, "messages": [{"role": "user", "content": "What causes scurvy?"}]});
        let r = call(u, "POST", "/v1/chat/completions", &[], Some(body)).await;
        assert_eq!(r.status, 200, "{}", r.body);
        let v = r.json();
        assert_eq!((v["model"].as_str(), v["ragtune"]["collection"].as_str()), (Some("ragtune:med"), Some("med")));
        assert!(v["choices"][0]["message"]["content"].as_str().unwrap().contains("[1] Scurvy — scurvy"), "{v}");
    }
    let body = json!({"model": "ragtune", "messages": [{"role": "user", "content": "What causes scurvy?"}]});
    let v = call(u, "POST", "/v1/chat/completions", &[], Some(body)).await.json();
    assert!(v["ragtune"]["citations"].as_array().unwrap().iter().all(|c| c["doc_id"] != "scurvy"), "{v}");

    // Deletes reach one store only; unknown collections are 404 on every route.
    assert_eq!(call(u, "DELETE", "/v1/collections/other/documents/scurvy", &[], None).await.status, 404);
    assert_eq!(call(u, "DELETE", "/v1/documents/scurvy", &[], None).await.status, 404);
    let r = call(u, "DELETE", "/v1/collections/med/documents/scurvy", &[], None).await;
    assert_eq!((r.status, r.json()["deleted"].as_str()), (200, Some("scurvy")), "{}", r.body);
    assert!(search("/v1/collections/med/search").await.is_empty());
    for (method, path) in [
        ("POST", "/v1/collections/nope/ask"),
        ("POST", "/v1/collections/nope/query"),
        ("POST", "/v1/collections/nope/search"),
        ("PUT", "/v1/collections/nope/documents"),
        ("DELETE", "/v1/collections/nope/documents/x"),
        ("GET", "/v1/collections/nope/stats"),
        ("GET", "/v1/collections/NOT..valid/stats"),
    ] {
        let r = call(u, method, path, &[], Some(json!({"query": "x", "documents": [{"id": "a", "text": "b"}]}))).await;
        assert_eq!((r.status, r.json()["error"]["kind"].as_str()), (404, Some("not_found")), "{path}: {}", r.body);
    }
}

#[test]
fn collection_configuration_is_validated() {
    let ok = ragtune::Config::from_toml("[collections.docs-2.store]\npath = \"/tmp/a\"\n").unwrap();
    assert_eq!(ok.collection("docs-2").unwrap().store.path, std::path::PathBuf::from("/tmp/a"));
    assert!(ok.collection("nope").is_err());
    // The example of docs/openai.md.
    let docs = ragtune::Config::from_toml(
        "[store]\npath = \"/var/lib/ragtune/main\"\n[collections.handbook.store]\npath = \"/var/lib/ragtune/handbook\"\n\
         [collections.papers.store]\nbackend = \"qdrant\"\nqdrant.url = \"http://127.0.0.1:6334\"\n\
         qdrant.collection = \"papers\"\n",
    )
    .unwrap();
    assert_eq!(docs.collection("papers").unwrap().store.qdrant.collection, "papers");
    assert!(docs.collection("papers").unwrap().collections.is_empty());
    for (toml, says) in [
        ("[collections.Docs.store]\npath = \"/tmp/a\"\n", "a-z"),
        ("[collections.docs]\n", "same store as the main store"),
        ("[collections.a.store]\npath = \"/x\"\n[collections.b.store]\npath = \"/x\"\n", "collection `a`"),
        ("[collections.a.storage]\npath = \"/x\"\n", "unknown field"),
    ] {
        let e = ragtune::Config::from_toml(toml).unwrap_err();
        assert!(e.to_string().contains(says), "{toml}: {e}");
    }
}
