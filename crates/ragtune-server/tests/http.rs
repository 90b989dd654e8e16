//! `ragtune serve` over real HTTP on 127.0.0.1: every route, the JSON errors, limits, the API key, back-pressure,
//! concurrent writers, metrics and the OpenAPI document.

use ragtune::ServerSettings;
use ragtune_server::Server;
use ragtune_testkit::http::{Response, request, request_bytes};
use serde_json::{Value, json};

const DOCS: [(&str, &str); 4] = [
    (
        "scurvy",
        "Scurvy is a disease caused by a lack of vitamin C. James Lind showed in 1747 that citrus fruit cures it.",
    ),
    ("rickets", "Rickets is caused by a lack of vitamin D. It softens the bones of children."),
    ("markets", "Stock markets rose on Tuesday as investors bought shares of technology companies."),
    ("ships", "Ships of the Royal Navy carried lemons and limes to protect the crews on long voyages."),
];

/// A running server on a fresh store (BM25 only, no LLM) and its base URL.
struct Running {
    url: String,
    state: ragtune_server::AppState,
    _dir: tempfile::TempDir,
    _stop: tokio::sync::oneshot::Sender<()>,
}

async fn start(settings: ServerSettings) -> Running {
    start_with(settings, |_| {}).await
}

/// [`start`] with the configuration changed by `edit` first.
async fn start_with(settings: ServerSettings, edit: impl FnOnce(&mut ragtune::Config)) -> Running {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = ragtune::Config::default();
    cfg.store.path = dir.path().join("store");
    cfg.embedding.mode = ragtune::EmbeddingMode::Off;
    cfg.llm.url = String::new();
    // No on-disk LLM cache: every call must reach the endpoint under test.
    cfg.llm.cache = false;
    edit(&mut cfg);
    let engine = ragtune::Engine::open(cfg).await.unwrap();
    let server = Server::bind(engine, settings).await.unwrap();
    let port = server.local_addr().port();
    let state = server.state().clone();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(server.run(async move {
        let _ = stopped.await;
    }));
    Running { url: format!("http://127.0.0.1:{port}"), state, _dir: dir, _stop: stop }
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

async fn raw(url: &str, method: &str, path: &str, body: Vec<u8>) -> Response {
    let (url, method, path) = (url.to_owned(), method.to_owned(), path.to_owned());
    tokio::task::spawn_blocking(move || request_bytes(&method, &url, &path, &[], Some(&body)).expect("an answer"))
        .await
        .unwrap()
}

fn documents() -> Value {
    json!({ "documents": DOCS.iter().map(|(id, text)| json!({"id": id, "text": text})).collect::<Vec<_>>() })
}

/// The error kind of a JSON error response, checking its shape.
fn error_kind(r: &Response) -> String {
    let v = r.json();
    assert!(v["error"]["message"].as_str().is_some_and(|m| !m.is_empty()), "{} {}", r.status, r.body);
    v["error"]["kind"].as_str().unwrap_or_default().to_owned()
}

/// The sum of a counter's samples in the exposition text (every label set).
fn counter_sum(metrics: &str, name: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| !l.starts_with('#') && (l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} "))))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_answers_over_http() {
    let s = start(loopback()).await;
    let u = s.url.as_str();
    let r = call(u, "PUT", "/v1/documents", &[], Some(documents())).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["indexed"]["documents"], 4);

    let r = call(u, "POST", "/v1/search", &[], Some(json!({"query": "vitamin C scurvy", "top_k": 2}))).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let hits = r.json()["hits"].as_array().cloned().unwrap();
    assert_eq!(hits.len(), 2);
    assert_eq!(hits[0]["chunk"]["doc_id"], "scurvy");

    let r = call(u, "POST", "/v1/ask", &[], Some(json!({"question": "What causes scurvy?", "trace": true}))).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let v = r.json();
    assert!(v["answer"].as_str().is_some_and(|a| a.contains("vitamin C")), "{v}");
    assert_eq!(v["citations"][0]["doc_id"], "scurvy");
    assert!(v["crag"]["category"].is_string() && v["cost"]["total_ms"].is_number(), "{v}");
    assert!(!v["trace"].as_array().unwrap().is_empty(), "trace asked for");
    // The seed's field names, and no trace unless asked.
    let r = call(u, "POST", "/v1/query", &[], Some(json!({"query": "What causes scurvy?", "useCrag": false}))).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let v = r.json();
    assert!(v["answer"].is_null() && !v["context"].as_array().unwrap().is_empty(), "{v}");
    assert_eq!(v["crag"]["evaluator"], "off");
    assert!(v["trace"].as_array().unwrap().is_empty());

    let r = call(u, "GET", "/v1/stats", &[], None).await;
    assert_eq!((r.status, r.json()["stats"]["documents"].as_u64()), (200, Some(4)), "{}", r.body);
    assert_eq!(call(u, "GET", "/healthz", &[], None).await.json()["status"], "ok");
    let r = call(u, "GET", "/readyz", &[], None).await;
    assert_eq!((r.status, r.json()["ready"].as_bool()), (200, Some(true)), "{}", r.body);
    let r = call(u, "GET", "/searxng/search?q=lemons%20limes&format=json", &[], None).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let first = &r.json()["results"][0];
    assert_eq!((first["title"].as_str(), first["engine"].as_str()), (Some("ships"), Some("ragtune")), "{}", r.body);
    assert!(first["url"].as_str().unwrap().starts_with("https://"), "a URL the web layer accepts: {first}");
    let r = call(u, "GET", "/", &[], None).await;
    assert!(r.status == 200 && r.body.contains("<form id=\"ask\"") && r.body.contains("/v1/ask"), "{}", r.status);

    let r = call(u, "DELETE", "/v1/documents/markets", &[], None).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = call(u, "DELETE", "/v1/documents/markets", &[], None).await;
    assert_eq!((r.status, error_kind(&r).as_str()), (404, "not_found"));

    // Every route of the OpenAPI document exists, and every route is in it.
    let doc = call(u, "GET", "/openapi.json", &[], None).await.json();
    let paths = doc["paths"].as_object().unwrap();
    for route in ragtune_server::ROUTES {
        let (method, path) = (route.method, route.path);
        assert!(paths[path][method].is_object(), "{method} {path} is documented");
        let concrete = path.replace("{id}", "no-such-doc");
        let r = call(u, &method.to_uppercase(), &concrete, &[], None).await;
        // A collection route is there even when no collection is: its 404 names the collection, not the route.
        let unknown_collection = path.starts_with("/v1/collections/") && r.body.contains("no collection `{name}`");
        assert!(
            r.status != 404 || concrete.starts_with("/v1/documents/") || unknown_collection,
            "{method} {path}: {}",
            r.status
        );
        assert_ne!(r.status, 405, "{method} {path}");
    }

    // The schemas are the types the server really sends: every field of a real answer is a documented property.
    let schemas = &doc["components"]["schemas"];
    let answer = call(u, "POST", "/v1/ask", &[], Some(json!({"question": "What causes scurvy?", "trace": true}))).await;
    for (body, name) in [(answer.json(), "AskResponse"), (answer.json()["crag"].clone(), "CragMetadata")] {
        for key in body.as_object().unwrap().keys() {
            assert!(schemas[name]["properties"][key].is_object(), "{name}.{key} is in the OpenAPI document");
        }
    }
    let stats = call(u, "GET", "/v1/stats", &[], None).await.json();
    for key in stats.as_object().unwrap().keys() {
        assert!(schemas["Stats"]["properties"][key].is_object(), "Stats.{key}");
    }

    // Metrics: one decision per question answered (ask and query), HTTP counts by route and status.
    let m = call(u, "GET", "/metrics", &[], None).await;
    assert!(m.header("content-type").is_some_and(|c| c.starts_with("text/plain")));
    assert_eq!(counter_sum(&m.body, "crag_decisions_total"), 3.0, "{}", m.body);
    assert!(m.body.contains("http_requests_total{route=\"/v1/ask\",status=\"200\"} 2"), "{}", m.body);
    assert!(counter_sum(&m.body, "crag_retrieval_latency_seconds_count") >= 2.0, "{}", m.body);
    assert!(m.body.contains("ragtune_index_documents 3"), "after the delete: {}", m.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_are_json_errors_with_the_right_status() {
    let s = start(ServerSettings { max_body_bytes: 4096, ..loopback() }).await;
    let u = s.url.as_str();
    call(u, "PUT", "/v1/documents", &[], Some(documents())).await;
    let cases: [(&str, &str, &[u8], u16, &str); 9] = [
        ("POST", "/v1/ask", b"{", 400, "invalid_input"),
        ("POST", "/v1/ask", b"[1, 2]", 400, "invalid_input"),
        ("POST", "/v1/ask", b"{\"top_k\": 3}", 400, "invalid_input"),
        ("POST", "/v1/ask", b"{\"question\": \"   \"}", 400, "invalid_input"),
        ("POST", "/v1/ask", b"{\"question\": \"q\", \"use_crg\": true}", 400, "invalid_input"),
        ("POST", "/v1/ask", b"{\"question\": \"q\", \"top_k\": 0}", 400, "invalid_input"),
        ("POST", "/v1/search", b"{\"query\": 7}", 400, "invalid_input"),
        ("PUT", "/v1/documents", b"{\"documents\": [{\"id\": \"\", \"text\": \"x\"}]}", 400, "invalid_input"),
        ("PUT", "/v1/documents", b"{\"documents\": []}", 400, "invalid_input"),
    ];
    for (method, path, body, status, kind) in cases {
        let r = raw(u, method, path, body.to_vec()).await;
        assert_eq!(
            (r.status, error_kind(&r).as_str()),
            (status, kind),
            "{method} {path} {}",
            String::from_utf8_lossy(body)
        );
    }
    let big = format!("{{\"question\": \"{}\"}}", "a".repeat(10_000));
    let r = raw(u, "POST", "/v1/ask", big.into_bytes()).await;
    assert_eq!((r.status, error_kind(&r).as_str()), (413, "too_large"), "{}", r.body);
    let r = call(u, "GET", "/v2/nothing", &[], None).await;
    assert_eq!((r.status, error_kind(&r).as_str()), (404, "not_found"));
    let r = call(u, "GET", "/v1/ask", &[], None).await;
    assert_eq!((r.status, error_kind(&r).as_str()), (405, "method_not_allowed"));
    // A web search asked for with no provider configured is the caller's mistake.
    let r = call(u, "POST", "/v1/ask", &[], Some(json!({"question": "q", "use_web": true}))).await;
    assert_eq!((r.status, error_kind(&r).as_str()), (400, "invalid_input"), "{}", r.body);
    // Nothing was written by the refused batches.
    let r = call(u, "GET", "/v1/stats", &[], None).await;
    assert_eq!(r.json()["stats"]["documents"], 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_loopback_bind_needs_the_api_key() {
    let refused = ragtune_server::check_bind(&ServerSettings { bind: "0.0.0.0:0".into(), ..ServerSettings::default() });
    assert!(refused.unwrap_err().message().contains("set an API key"));
    let key = "k-7f3a-0123456789";
    let s =
        start(ServerSettings { bind: "0.0.0.0:0".into(), api_key: Some(key.to_owned().into()), ..loopback() }).await;
    let u = s.url.as_str();
    let r = call(u, "GET", "/v1/stats", &[], None).await;
    assert_eq!((r.status, error_kind(&r).as_str()), (401, "unauthorized"));
    assert_eq!(r.header("www-authenticate"), Some("Bearer"));
    let r = call(u, "GET", "/v1/stats", &[("Authorization", "Bearer wrong")], None).await;
    assert_eq!(r.status, 401);
    assert!(!r.body.contains(key), "the key is never echoed");
    let bearer = format!("Bearer {key}");
    let r = call(u, "GET", "/v1/stats", &[("Authorization", bearer.as_str())], None).await;
    assert_eq!(r.status, 200, "{}", r.body);
    for open in ["/healthz", "/readyz", "/"] {
        assert_eq!(call(u, "GET", open, &[], None).await.status, 200, "{open} needs no key");
    }
    assert_eq!(call(u, "GET", "/metrics", &[], None).await.status, 401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saturated_server_answers_503_with_retry_after_and_health_stays_up() {
    let s = start(ServerSettings { max_concurrency: 2, ..loopback() }).await;
    let u = s.url.as_str();
    assert_eq!(call(u, "PUT", "/v1/documents", &[], Some(documents())).await.status, 200);
    let held = s.state.occupy(2).expect("both slots");
    let r = call(u, "POST", "/v1/search", &[], Some(json!({"query": "scurvy"}))).await;
    assert_eq!((r.status, error_kind(&r).as_str()), (503, "overloaded"));
    assert_eq!(r.header("retry-after"), Some("1"));
    assert_eq!(call(u, "GET", "/healthz", &[], None).await.status, 200);
    drop(held);
    let r = call(u, "POST", "/v1/search", &[], Some(json!({"query": "scurvy"}))).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let m = call(u, "GET", "/metrics", &[], None).await;
    assert_eq!(counter_sum(&m.body, "http_rejected_total"), 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writers_lose_nothing() {
    let s = start(loopback()).await;
    let mut tasks = Vec::new();
    for w in 0..8 {
        let url = s.url.clone();
        tasks.push(tokio::spawn(async move {
            let docs: Vec<Value> = (0..5)
                .map(|i| json!({"id": format!("w{w}-d{i}"), "text": format!("writer{w} document{i} about topic{w}x{i}")}))
                .collect();
            call(&url, "PUT", "/v1/documents", &[], Some(json!({ "documents": docs }))).await.status
        }));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap(), 200);
    }
    let r = call(&s.url, "GET", "/v1/stats", &[], None).await;
    assert_eq!(r.json()["stats"]["documents"], 40, "{}", r.body);
    for w in 0..8 {
        for i in 0..5 {
            let q = json!({"query": format!("topic{w}x{i}"), "top_k": 1, "strategy": "bm25"});
            let r = call(&s.url, "POST", "/v1/search", &[], Some(q)).await;
            assert_eq!(r.json()["hits"][0]["chunk"]["doc_id"], format!("w{w}-d{i}"), "{}", r.body);
        }
    }
}

/// An OpenAI-compatible endpoint that accepts connections, reads the request and never answers: an LLM that hangs.
/// An LLM endpoint that accepts every request and answers nothing for a minute, far past the test's deadline.
fn hanging_llm() -> ragtune_testkit::http::ScriptedServer {
    ragtune_testkit::http::serve(|_, _| {
        ragtune_testkit::http::Reply::status(200).delayed(std::time::Duration::from_secs(60))
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadline_hit_mid_pipeline_still_answers_and_says_what_was_skipped() {
    let hanging = hanging_llm();
    let llm = hanging.url().to_owned();
    let s = start_with(loopback(), |cfg| {
        cfg.llm.url.clone_from(&llm);
        cfg.llm.timeout_secs = 30.0;
        cfg.llm.max_retries = 0;
    })
    .await;
    let u = s.url.as_str();
    assert_eq!(call(u, "PUT", "/v1/documents", &[], Some(documents())).await.status, 200);
    // Retrieval and evaluation run in milliseconds; generation waits on the hanging LLM until the deadline.
    let r = call(
        u,
        "POST",
        "/v1/ask",
        &[],
        Some(json!({"question": "What causes scurvy?", "deadline_ms": 1500, "trace": true})),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let v = r.json();
    let notes: Vec<&str> = v["notes"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    assert!(
        notes.iter().any(|n| n.contains("deadline") || n.contains("generation failed")),
        "the response says what the deadline cut: {notes:?}"
    );
    // What ran before the deadline is in the answer: the retrieved context and an extractive answer from it.
    assert!(!v["context"].as_array().unwrap().is_empty(), "{v}");
    assert!(v["context"].to_string().contains("scurvy") || v["context"].to_string().contains("Scurvy"), "{v}");
    assert_eq!(v["answer_kind"], "extractive", "{v}");
    let stages: Vec<&str> = v["trace"].as_array().unwrap().iter().filter_map(|e| e["stage"].as_str()).collect();
    assert!(stages.contains(&"retrieve") && stages.contains(&"generate"), "{stages:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_web_providers_resilience_counters_reach_metrics() {
    let searx = ragtune_testkit::fixtures::SearxServer::start(json!({
        "url": "https://example.org/harbour-cup",
        "title": "Harbour cup",
        "content": "The football team scored four goals against the ships of the harbour club on Saturday.",
        "engine": "test",
        "score": 1.0
    }));
    let web = format!("[web]\nenabled = true\n[web.providers.searxng]\nbase_url = \"{}\"\n", searx.url);
    let s = start_with(loopback(), |cfg| cfg.web = ragtune::Config::from_toml(&web).unwrap().web).await;
    let u = s.url.as_str();
    call(u, "PUT", "/v1/documents", &[], Some(documents())).await;
    let before = call(u, "GET", "/metrics", &[], None).await;
    assert!(
        before.body.contains("web_provider_resilience_total{event=\"calls\",provider=\"searxng\"} 0"),
        "{}",
        before.body
    );
    let question = json!({"question": "How many goals did the football team score against the harbour club?"});
    let answer = call(u, "POST", "/v1/ask", &[], Some(question)).await.json();
    assert_eq!(answer["crag"]["web_providers"], json!(["searxng"]), "{answer}");
    let m = call(u, "GET", "/metrics", &[], None).await;
    // Every search that reached the provider is counted (the retry loop may search again on a later attempt).
    let calls = format!("web_provider_resilience_total{{event=\"calls\",provider=\"searxng\"}} {}", searx.requests());
    assert!(searx.requests() >= 1 && m.body.contains(&calls), "{calls}: {}", m.body);
    assert!(m.body.contains("web_provider_resilience_total{event=\"retries\",provider=\"searxng\"} 0"), "{}", m.body);
}
