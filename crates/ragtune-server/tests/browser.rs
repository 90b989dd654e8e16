//! The page at `/` in a real headless browser (Debian's Chromium driven through its WebDriver, ChromeDriver): load
//! it, type a question, press Ask, and read the rendered answer, citations, CRAG decision and trace timeline back
//! from the DOM. A screenshot is kept as a test artefact (`target/tmp/page.png`).
//!
//! `#[ignore]`d so that a plain run lists it as skipped, never as passed: `cargo xtask ci` installs `chromium` and
//! `chromium-driver` and runs it in its own step (`browser-tests`).

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use ragtune::ServerSettings;
use ragtune_server::Server;
use ragtune_testkit::http::request_http11 as request;
use serde_json::{Value, json};

const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
const CHROMIUM: &str = "/usr/bin/chromium";

/// ChromeDriver on a free loopback port, killed on drop.
struct Driver {
    url: String,
    child: Child,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Driver {
    fn start() -> Self {
        let port = ragtune_testkit::qdrant::free_port().expect("a free port");
        let child = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {CHROMEDRIVER} (apt-get install chromium chromium-driver): {e}"));
        let url = format!("http://127.0.0.1:{port}");
        let started = Instant::now();
        while request("GET", &url, "/status", &[], None).map(|r| r.json()["value"]["ready"] != true).unwrap_or(true) {
            assert!(started.elapsed() < Duration::from_secs(30), "chromedriver did not become ready");
            std::thread::sleep(Duration::from_millis(100));
        }
        Self { url, child }
    }

    /// One WebDriver command; panics on an HTTP or WebDriver error.
    fn call(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let body = body.map(|b| b.to_string());
        let r = request(method, &self.url, path, &[], body.as_deref()).expect("chromedriver answers");
        assert_eq!(r.status, 200, "{method} {path}: {}", r.body);
        r.json()["value"].clone()
    }
}

/// The first element matching `css` in session `s`, as its WebDriver element id.
fn find(d: &Driver, s: &str, css: &str) -> Option<String> {
    let r = request(
        "POST",
        &d.url,
        &format!("/session/{s}/element"),
        &[],
        Some(&json!({"using": "css selector", "value": css}).to_string()),
    )
    .ok()?;
    if r.status != 200 {
        return None;
    }
    r.json()["value"].as_object()?.values().next()?.as_str().map(str::to_owned)
}

fn text(d: &Driver, s: &str, element: &str) -> String {
    d.call("GET", &format!("/session/{s}/element/{element}/text"), None).as_str().unwrap_or_default().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Debian's chromium and chromium-driver: `cargo xtask ci` installs them and runs this test"]
async fn the_page_asks_and_renders_the_answer_citations_and_trace_in_a_real_browser() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = ragtune::Config::default();
    cfg.store.path = dir.path().join("store");
    cfg.embedding.mode = ragtune::EmbeddingMode::Off;
    cfg.llm.url = String::new();
    let mut engine = ragtune::Engine::open(cfg).await.unwrap();
    let docs = [
        ragtune::core::Document::new(
            "scurvy",
            "Scurvy is a disease caused by a lack of vitamin C. Citrus fruit cures it.",
        ),
        ragtune::core::Document::new(
            "rickets",
            "Rickets is caused by a lack of vitamin D. It softens the bones of children.",
        ),
    ];
    engine.index_documents(&docs, ragtune::Chunking::WholeDocuments, &mut |_, _| {}).await.unwrap();
    let server =
        Server::bind(engine, ServerSettings { bind: "127.0.0.1:0".into(), ..ServerSettings::default() }).await.unwrap();
    let page = format!("http://127.0.0.1:{}/", server.local_addr().port());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(server.run(async move {
        let _ = stopped.await;
    }));
    let profile = tempfile::tempdir().unwrap();

    let screenshot = tokio::task::spawn_blocking(move || {
        let d = Driver::start();
        let args = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--window-size=1100,1000",
        ]
        .iter()
        .map(|a| (*a).to_owned())
        .chain([format!("--user-data-dir={}", profile.path().display())])
        .collect::<Vec<_>>();
        let caps = json!({"capabilities": {"alwaysMatch": {"browserName": "chrome",
            "goog:chromeOptions": {"binary": CHROMIUM, "args": args}}}});
        let session = d.call("POST", "/session", Some(caps));
        let s = session["sessionId"].as_str().expect("a session id").to_owned();
        d.call("POST", &format!("/session/{s}/url"), Some(json!({"url": page})));
        let input = find(&d, &s, "#question").expect("the question box");
        d.call("POST", &format!("/session/{s}/element/{input}/value"), Some(json!({"text": "What causes scurvy?"})));
        let button = find(&d, &s, "button[type=submit]").expect("the Ask button");
        d.call("POST", &format!("/session/{s}/element/{button}/click"), Some(json!({})));
        // Wait (bounded) for the answer's citations to be rendered.
        let started = Instant::now();
        let citation = loop {
            if let Some(c) = find(&d, &s, "#citations li.citation") {
                break c;
            }
            assert!(started.elapsed() < Duration::from_secs(60), "no citation rendered within 60 s");
            std::thread::sleep(Duration::from_millis(100));
        };
        let answer = text(&d, &s, &find(&d, &s, "#answer").unwrap());
        assert!(answer.to_lowercase().contains("vitamin c"), "the answer is shown: {answer:?}");
        let cited = text(&d, &s, &citation);
        assert!(cited.contains("scurvy"), "the citation names the cited document: {cited:?}");
        let decision = text(&d, &s, &find(&d, &s, "#crag-decision").unwrap());
        assert!(
            ["RELEVANT", "PARTIAL", "IRRELEVANT"].iter().any(|v| decision.contains(v)) && decision.contains("score"),
            "the CRAG decision and its score are shown: {decision:?}"
        );
        let trace = text(&d, &s, &find(&d, &s, "#trace").unwrap());
        for stage in ["retrieve", "evaluate", "assemble"] {
            assert!(trace.contains(stage), "the trace timeline shows `{stage}`: {trace:?}");
        }
        let cost = text(&d, &s, &find(&d, &s, "#cost").unwrap());
        assert!(!cost.trim().is_empty(), "the cost is shown");
        let png = d.call("GET", &format!("/session/{s}/screenshot"), None);
        let _ = request("DELETE", &d.url, &format!("/session/{s}"), &[], None);
        base64::engine::general_purpose::STANDARD.decode(png.as_str().unwrap()).expect("a base64 PNG")
    })
    .await
    .unwrap();
    assert!(screenshot.starts_with(b"\x89PNG"), "a PNG screenshot");
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("page.png");
    std::fs::write(&path, &screenshot).unwrap();
    println!("screenshot: {} ({} bytes)", path.display(), screenshot.len());
    let _ = stop.send(());
}
