//! `ragtune serve` under hostile input and faults, over real HTTP on 127.0.0.1 (issue 42): the key on every route,
//! keys too short to be keys, caches that outlive a write, a request turning on web search the operator left off,
//! slow clients (headers, bodies, idle connections), slots taken before the body, batch limits, DNS rebinding and
//! form posts, the readiness probe, and a store on a full disk.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use ragtune::ServerSettings;
use ragtune_server::Server;
use ragtune_testkit::http::{Response, request};
use serde_json::{Value, json};

const KEY: &str = "test-key-0123456789abcdef";

struct Running {
    url: String,
    port: u16,
    _dir: tempfile::TempDir,
    _stop: tokio::sync::oneshot::Sender<()>,
}

async fn start_with(settings: ServerSettings, edit: impl FnOnce(&mut ragtune::Config)) -> Running {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = ragtune::Config::default();
    cfg.store.path = dir.path().join("store");
    cfg.embedding.mode = ragtune::EmbeddingMode::Off;
    cfg.llm.url = String::new();
    cfg.llm.cache = false;
    edit(&mut cfg);
    let engine = ragtune::Engine::open(cfg).await.unwrap();
    let server = Server::bind(engine, settings).await.unwrap();
    let port = server.local_addr().port();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(server.run(async move {
        let _ = stopped.await;
    }));
    Running { url: format!("http://127.0.0.1:{port}"), port, _dir: dir, _stop: stop }
}

async fn start(settings: ServerSettings) -> Running {
    start_with(settings, |_| {}).await
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

/// Sends `bytes` as they are on a new connection and reads until the server closes it (or 30 s pass).
async fn raw_exchange(port: u16, bytes: Vec<u8>) -> String {
    tokio::task::spawn_blocking(move || {
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        s.write_all(&bytes).unwrap();
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        String::from_utf8_lossy(&out).into_owned()
    })
    .await
    .unwrap()
}

/// One HTTP/1.0 request with exactly these headers (the test client adds a `Host` of its own): the status and the
/// body.
async fn exact(port: u16, method: &str, path: &str, headers: &[(&str, &str)], body: Option<&str>) -> (u16, String) {
    let mut head = format!("{method} {path} HTTP/1.0\r\n");
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    if let Some(b) = body {
        head.push_str(&format!("Content-Length: {}\r\n", b.len()));
    }
    head.push_str("\r\n");
    head.push_str(body.unwrap_or_default());
    let answer = raw_exchange(port, head.into_bytes()).await;
    let status = answer.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = answer.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
    (status, body)
}

fn kind(r: &Response) -> String {
    r.json()["error"]["kind"].as_str().unwrap_or_default().to_owned()
}

fn docs(ids: &[(&str, &str)]) -> Value {
    json!({ "documents": ids.iter().map(|(id, text)| json!({"id": id, "text": text})).collect::<Vec<_>>() })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_but_health_readiness_and_the_page_needs_the_key() {
    let s = start(ServerSettings { api_key: Some(KEY.into()), ..loopback() }).await;
    let u = s.url.as_str();
    for route in ragtune_server::ROUTES {
        let path = route.path.replace("{id}", "x");
        let path = if path == "/searxng/search" { "/searxng/search?q=anything&format=json".to_owned() } else { path };
        let r = call(u, &route.method.to_uppercase(), &path, &[], None).await;
        if route.open {
            assert_ne!(r.status, 401, "{} {} is open", route.method, route.path);
        } else {
            assert_eq!((r.status, kind(&r).as_str()), (401, "unauthorized"), "{} {}", route.method, route.path);
        }
    }
    // The search engine view of the index answers with the key.
    let bearer = format!("Bearer {KEY}");
    let auth = [("Authorization", bearer.as_str())];
    assert_eq!(call(u, "PUT", "/v1/documents", &auth, Some(docs(&[("a", "secret text")]))).await.status, 200);
    let r = call(u, "GET", "/searxng/search?q=secret&format=json", &auth, None).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = call(u, "GET", "/searxng/search?q=secret&format=json", &[], None).await;
    assert!(r.status == 401 && !r.body.contains("secret text"), "{}", r.body);
    // The page is static: the same bytes for everyone, nothing of the index in it.
    let page = call(u, "GET", "/", &[], None).await;
    assert!(page.status == 200 && !page.body.contains("secret text"));
    // Readiness says yes or no and nothing else.
    let r = call(u, "GET", "/readyz", &[], None).await;
    assert_eq!((r.status, r.json()), (200, json!({"ready": true})), "{}", r.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_and_short_keys_are_refused_at_start() {
    for key in ["", "short", " padded-key-0123456789 "] {
        let settings = ServerSettings { bind: "0.0.0.0:0".into(), api_key: Some(key.into()), ..loopback() };
        let e = ragtune_server::check_bind(&settings).unwrap_err();
        assert!(e.message().contains("api_key"), "{key:?}: {e}");
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = ragtune::Config::default();
        cfg.store.path = dir.path().join("store");
        cfg.embedding.mode = ragtune::EmbeddingMode::Off;
        let engine = ragtune::Engine::open(cfg).await.unwrap();
        let e = Server::bind(engine, settings).await.unwrap_err();
        assert!(e.message().contains("api_key"), "{key:?}: {e}");
    }
    // The same through the environment: `RAGTUNE__SERVER__API_KEY=` is an error, not an open server.
    let e = ragtune::Config::from_toml_with_overrides("", &[("RAGTUNE__SERVER__API_KEY".into(), String::new())])
        .unwrap_err();
    assert!(e.message().contains("at least 16"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_invalidates_the_answer_caches() {
    let s = start(loopback()).await;
    let u = s.url.as_str();
    let batch = docs(&[
        ("lind", "James Lind cured scurvy with citrus fruit in 1747."),
        ("rickets", "Rickets is caused by a lack of vitamin D."),
    ]);
    assert_eq!(call(u, "PUT", "/v1/documents", &[], Some(batch)).await.status, 200);
    let q = json!({"question": "Who cured scurvy with citrus fruit?", "trace": true});
    let first = call(u, "POST", "/v1/query", &[], Some(q.clone())).await.json();
    assert!(first["context"].to_string().contains("James Lind"), "{first}");
    let again = call(u, "POST", "/v1/query", &[], Some(q.clone())).await.json();
    assert_eq!(again["crag"]["cache_hit"], true, "the cache answers a repeated question: {}", again["crag"]);

    // Deleted: the same question no longer sees the text, and nothing comes from the cache.
    assert_eq!(call(u, "DELETE", "/v1/documents/lind", &[], None).await.status, 200);
    let after = call(u, "POST", "/v1/query", &[], Some(q.clone())).await.json();
    assert!(!after.to_string().contains("James Lind"), "deleted text served: {after}");
    assert_eq!(after["crag"]["cache_hit"], false, "{}", after["crag"]);

    // Replaced under the same id: the new text, not the cached old one.
    let batch = docs(&[("lind", "James Lind wrote a treatise on citrus fruit and scurvy, revised edition.")]);
    assert_eq!(call(u, "PUT", "/v1/documents", &[], Some(batch)).await.status, 200);
    let replaced = call(u, "POST", "/v1/query", &[], Some(q)).await.json();
    assert!(replaced["context"].to_string().contains("revised edition"), "{replaced}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_cannot_turn_on_web_search_the_operator_left_off() {
    let s = start_with(loopback(), |cfg| {
        // A provider is configured but web search is off: the operator's choice.
        cfg.web = ragtune::Config::from_toml(
            "[web]\nenabled = false\n[web.providers.searxng]\nbase_url = \"http://127.0.0.1:9\"\n",
        )
        .unwrap()
        .web;
    })
    .await;
    let u = s.url.as_str();
    assert_eq!(call(u, "PUT", "/v1/documents", &[], Some(docs(&[("a", "alpha text")]))).await.status, 200);
    let r = call(u, "POST", "/v1/ask", &[], Some(json!({"question": "alpha?", "use_web": true}))).await;
    assert_eq!((r.status, kind(&r).as_str()), (400, "invalid_input"), "{}", r.body);
    assert!(r.json()["error"]["message"].as_str().unwrap().contains("enabled = false"), "{}", r.body);
    let r = call(u, "POST", "/v1/ask", &[], Some(json!({"question": "alpha?", "use_web": false}))).await;
    assert_eq!(r.status, 200, "{}", r.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_headers_and_idle_connections_are_closed() {
    let s = start(ServerSettings { header_timeout_secs: 1, ..loopback() }).await;
    // Headers that never finish: the server closes the connection after the header timeout.
    let partial = raw_exchange(s.port, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ".to_vec()).await;
    assert!(!partial.contains("200 OK"), "no answer to unfinished headers: {partial:?}");
    // A kept-alive connection that goes idle after one answer is closed too: the read ends with the first answer.
    let idle = raw_exchange(s.port, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".to_vec()).await;
    assert_eq!(idle.matches("HTTP/1.1 200").count(), 1, "{idle:?}");
    // The server still answers.
    assert_eq!(call(&s.url, "GET", "/healthz", &[], None).await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_upload_holds_no_slot_and_times_out() {
    let s = start(ServerSettings { max_concurrency: 1, body_timeout_secs: 2, ..loopback() }).await;
    assert_eq!(call(&s.url, "PUT", "/v1/documents", &[], Some(docs(&[("a", "alpha text")]))).await.status, 200);
    // An upload that announces 100 bytes and sends 10, then stalls.
    let port = s.port;
    let trickle = tokio::task::spawn_blocking(move || {
        let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let head = "POST /v1/search HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
                    Content-Length: 100\r\n\r\n{\"query\":";
        c.write_all(head.as_bytes()).unwrap();
        let mut out = Vec::new();
        let _ = c.read_to_end(&mut out);
        String::from_utf8_lossy(&out).into_owned()
    });
    // While it stalls, the one slot is free for a client that sends its request.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let r = call(&s.url, "POST", "/v1/search", &[], Some(json!({"query": "alpha"}))).await;
    assert_eq!(r.status, 200, "the stalled upload must not hold the only slot: {}", r.body);
    let stalled = trickle.await.unwrap();
    assert!(stalled.starts_with("HTTP/1.1 408"), "{stalled:?}");
    assert!(stalled.contains("body_timeout_secs"), "{stalled:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_over_the_limits_get_413_and_write_nothing() {
    let s = start(ServerSettings { max_batch_documents: 3, max_body_bytes: 64 * 1024, ..loopback() }).await;
    let u = s.url.as_str();
    let four = docs(&[("a", "alpha"), ("b", "beta"), ("c", "gamma"), ("d", "delta")]);
    let r = call(u, "PUT", "/v1/documents", &[], Some(four)).await;
    assert_eq!((r.status, kind(&r).as_str()), (413, "too_large"), "{}", r.body);
    assert!(r.body.contains("max_batch_documents"), "{}", r.body);
    let big = docs(&[("big", &"word ".repeat(20_000))]);
    let r = call(u, "PUT", "/v1/documents", &[], Some(big)).await;
    assert_eq!((r.status, kind(&r).as_str()), (413, "too_large"), "{}", r.body);
    let r = call(u, "GET", "/v1/stats", &[], None).await;
    assert_eq!(r.json()["stats"]["documents"], 0, "{}", r.body);
    // A batch within the limits is written whole.
    let three = docs(&[("a", "alpha"), ("b", "beta"), ("c", "gamma")]);
    assert_eq!(call(u, "PUT", "/v1/documents", &[], Some(three)).await.status, 200);
    assert_eq!(call(u, "GET", "/v1/stats", &[], None).await.json()["stats"]["documents"], 3);
}

/// Headers, the status they get, the error kind.
type Case<'a> = (Vec<(&'a str, &'a str)>, u16, &'a str);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loopback_server_refuses_foreign_hosts_origins_and_form_posts() {
    let s = start(loopback()).await;
    let port = s.port;
    let body = r#"{"query": "alpha"}"#;
    let json_type = ("Content-Type", "application/json");
    let local = format!("127.0.0.1:{port}");
    let cases: Vec<Case<'_>> = vec![
        // DNS rebinding: a page on attacker.example whose name now resolves to 127.0.0.1.
        (vec![("Host", "attacker.example"), json_type], 403, "forbidden_host"),
        (vec![("Host", "attacker.example:8080"), json_type], 403, "forbidden_host"),
        (vec![("Host", "localhost.attacker.example"), json_type], 403, "forbidden_host"),
        // Two Host headers: no way to tell which one a proxy routed by.
        (vec![("Host", local.as_str()), ("Host", "attacker.example"), json_type], 400, "invalid_input"),
        // A cross-site page posting to localhost.
        (vec![("Host", local.as_str()), ("Origin", "https://attacker.example"), json_type], 403, "forbidden_origin"),
        (vec![("Host", local.as_str()), ("Origin", "null"), json_type], 403, "forbidden_origin"),
        // A form post (text/plain needs no CORS preflight) is not acted on.
        (vec![("Host", local.as_str()), ("Content-Type", "text/plain")], 415, "unsupported_media_type"),
        (vec![("Host", local.as_str())], 415, "unsupported_media_type"),
    ];
    for (headers, status, want) in &cases {
        let (got, text) = exact(port, "POST", "/v1/search", headers, Some(body)).await;
        let kind =
            serde_json::from_str::<Value>(&text).ok().and_then(|v| v["error"]["kind"].as_str().map(str::to_owned));
        assert_eq!((got, kind.as_deref()), (*status, Some(*want)), "{headers:?}: {text}");
    }
    // Nothing planted by a refused form post.
    let planted = r#"{"documents":[{"id":"x","text":"planted"}]}"#;
    let (got, _) =
        exact(port, "PUT", "/v1/documents", &[("Host", local.as_str()), ("Content-Type", "text/plain")], Some(planted))
            .await;
    assert_eq!(got, 415);
    let stats = call(&s.url, "GET", "/v1/stats", &[], None).await;
    assert_eq!(stats.json()["stats"]["documents"], 0, "{}", stats.body);
    // The same-origin page and local tools get through.
    for host in
        [format!("localhost:{port}"), format!("127.0.0.1:{port}"), format!("[::1]:{port}"), "localhost".to_owned()]
    {
        let origin = format!("http://{host}");
        let h = [("Host", host.as_str()), ("Origin", origin.as_str()), json_type];
        let (got, text) = exact(port, "POST", "/v1/search", &h, Some(body)).await;
        assert!(got != 403 && got != 415 && got != 0, "{host}: {got} {text}");
    }
    let (got, _) = exact(port, "GET", "/healthz", &[], None).await;
    assert_eq!(got, 200, "HTTP/1.0 without a Host is a local tool");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allowed_hosts_open_a_loopback_server_to_a_named_proxy() {
    let s = start(ServerSettings { allowed_hosts: vec!["rag.internal".into()], ..loopback() }).await;
    assert_eq!(exact(s.port, "GET", "/healthz", &[("Host", "rag.internal:443")], None).await.0, 200);
    assert_eq!(exact(s.port, "GET", "/healthz", &[("Host", "other.internal")], None).await.0, 403);
}
