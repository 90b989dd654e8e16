//! Web search inside Corrective RAG, configured by `[web]`, against a SearXNG-compatible server on 127.0.0.1:
//! INCORRECT searches the web, AMBIGUOUS expands the query and searches the web, CORRECT never calls it, and a
//! provider that is down is reported as skipped while the answer still comes back.

use ragtune::core::{Document, Verdict};
use ragtune::pipeline::NoteKind;
use ragtune::{Chunking, Config, Engine};
use ragtune_testkit::fixtures::SearxServer;

use crate::pipeline::DOCS;

/// The local SearXNG endpoint, answering one off-topic web result.
fn searx_server() -> SearxServer {
    SearxServer::start(serde_json::json!({
        "url": "https://example.org/harbour-cup",
        "title": "Harbour cup",
        "content": "The football team scored four goals against the ships of the harbour club on Saturday.",
        "engine": "test",
        "score": 1.0
    }))
}

/// A `[web]` section with SearXNG at `url`, no retries (so a dead server fails at once).
pub fn web_toml(url: &str, enabled: bool) -> String {
    format!(
        "[web]\nenabled = {enabled}\n[web.providers.searxng]\nbase_url = \"{url}\"\ntimeout_secs = 5\n\
         [web.providers.searxng.backoff]\nbase = 0.01\nmax = 0.01\njitter = 0.0\nmax_retries = 0\nseed = 1\n"
    )
}

async fn engine(dir: &std::path::Path, url: &str) -> Engine {
    engine_from(dir, &web_toml(url, true)).await
}

/// A BM25 engine over `DOCS` in `dir`, configured by `toml`.
async fn engine_from(dir: &std::path::Path, toml: &str) -> Engine {
    let mut cfg = Config::from_toml(toml).unwrap();
    cfg.store.path = dir.join("store");
    cfg.embedding.mode = ragtune::EmbeddingMode::Off;
    let mut engine = Engine::open(cfg).await.unwrap();
    let docs: Vec<Document> = DOCS.iter().map(|(id, text)| Document::new(*id, *text)).collect();
    engine.index_documents(&docs, Chunking::WholeDocuments, &mut |_, _| {}).await.unwrap();
    engine
}

const OFF_TOPIC: &str = "How many goals did the football team score against the ships?";

#[tokio::test]
async fn an_incorrect_retrieval_searches_the_configured_web_and_cites_it() {
    let dir = tempfile::tempdir().unwrap();
    let searx = searx_server();
    let engine = engine(dir.path(), &searx.url).await;
    let r = engine.ask(OFF_TOPIC).await.unwrap();
    assert_eq!(r.crag.decision, Some(Verdict::Incorrect), "{:?}", r.crag);
    assert!(r.crag.web_search_used, "{:?}", r.crag);
    assert!(r.crag.correction_strategy.contains("web_search"), "{}", r.crag.correction_strategy);
    assert_eq!(r.crag.web_providers, ["searxng"]);
    assert!(r.crag.web_skipped.is_empty(), "{:?}", r.crag.web_skipped);
    assert!(searx.requests() >= 1);
    let web = r.context.iter().find(|p| p.chunk_id.starts_with("web:")).expect("a web passage in the context");
    assert_eq!(web.chunk_id, "web:https://example.org/harbour-cup");
    assert!(
        r.citations.iter().any(|c| c.doc_id == "https://example.org/harbour-cup"),
        "the web passage is cited by its URL: {:?}",
        r.citations
    );
    let json = serde_json::to_value(&r.crag).unwrap();
    assert_eq!(json["web_providers"], serde_json::json!(["searxng"]));
    assert!(json.get("web_skipped").is_none(), "empty lists are not serialised: {json}");
    // The web passage carries its credibility tier (example.org is in no tier list: 3); corpus passages none.
    assert_eq!(web.tier, Some(3));
    assert!(r.context.iter().filter(|p| !p.chunk_id.starts_with("web:")).all(|p| p.tier.is_none()));
    assert!(r.citations.iter().all(|c| c.tier == c.doc_id.starts_with("https://").then_some(3)), "{:?}", r.citations);
    // With a web passage in the context, the answer's claims are triangulated.
    let t = r.triangulation.as_ref().expect("a triangulation table when the web was used");
    assert_eq!(t.support_check, "lexical");
    assert!(!t.rows.is_empty());
    let web_claims: Vec<_> = t.rows.iter().filter(|row| row.sources.iter().any(|s| s == "example.org")).collect();
    assert!(!web_claims.is_empty(), "the claim quoted from the web page is supported by it: {t:?}");
    let verified = t.rows.iter().filter(|row| row.status == ragtune::web::triangulation::Consensus::Verified).count();
    assert!((t.coverage_pct - 100.0 * verified as f64 / t.rows.len() as f64).abs() < 1e-9, "{t:?}");
}

#[tokio::test]
async fn a_correct_retrieval_never_calls_the_web() {
    let dir = tempfile::tempdir().unwrap();
    let searx = searx_server();
    let engine = engine(dir.path(), &searx.url).await;
    let r = engine.ask("What softens bones?").await.unwrap();
    assert_eq!(r.crag.decision, Some(Verdict::Correct), "{:?}", r.crag);
    assert!(!r.crag.web_search_used);
    assert!(r.crag.web_providers.is_empty() && r.crag.web_skipped.is_empty());
    assert_eq!(searx.requests(), 0, "no request reached the server");
    let json = serde_json::to_value(&r.crag).unwrap();
    assert!(json.get("web_providers").is_none() && json.get("web_skipped").is_none(), "{json}");
    assert!(r.triangulation.is_none(), "no web passage, no triangulation");
}

#[tokio::test]
async fn an_ambiguous_retrieval_expands_the_query_and_searches_the_web() {
    let dir = tempfile::tempdir().unwrap();
    let searx = searx_server();
    let engine = engine(dir.path(), &searx.url).await;
    let r = engine.ask(AMBIGUOUS).await.unwrap();
    assert_eq!(r.crag.decision, Some(Verdict::Ambiguous), "{:?}", r.crag);
    assert_eq!(r.crag.correction_strategy, "query_expansion+web_search");
    assert!(r.crag.web_search_used);
    assert_eq!(r.crag.web_providers, ["searxng"]);
    assert!(searx.requests() >= 1);
}

#[tokio::test]
async fn with_the_web_down_the_answer_still_comes_back_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    let engine = engine(dir.path(), &dead).await;
    let r = engine.ask(OFF_TOPIC).await.unwrap();
    assert_eq!(r.crag.decision, Some(Verdict::Incorrect), "{:?}", r.crag);
    assert!(!r.crag.web_search_used);
    assert!(r.crag.web_providers.is_empty());
    assert!(r.crag.web_skipped.iter().any(|s| s.starts_with("searxng: ")), "{:?}", r.crag.web_skipped);
    assert!(r.notes.iter().any(|n| n.kind() == NoteKind::WebSearch && n.as_str().contains("failed")), "{:?}", r.notes);
    assert!(r.answer.is_some());
}

/// The `web_route` trace event's route and result count.
fn web_route(r: &ragtune::AskResponse) -> (String, u64) {
    let e = r.trace.iter().find(|e| e.action == "web_route").expect("a web_route event");
    (e.detail["route"].as_str().unwrap().to_owned(), e.detail["max_results"].as_u64().unwrap())
}

#[tokio::test]
async fn the_web_route_follows_the_questions_complexity() {
    let dir = tempfile::tempdir().unwrap();
    let searx = searx_server();
    // The protocol's table: simple questions search no provider; complex ones ask for 10 results.
    let toml = format!(
        "{}[web.routing.simple]\nproviders = []\nmax_results = 0\n[web.routing.complex]\nproviders = [\"searxng\"]\nmax_results = 10\n",
        web_toml(&searx.url, true)
    );
    let engine = engine_from(dir.path(), &toml).await;

    let r = engine.ask(OFF_TOPIC).await.unwrap();
    assert_eq!(r.crag.decision, Some(Verdict::Incorrect), "{:?}", r.crag);
    assert_eq!(web_route(&r), ("simple".to_owned(), 0));
    assert!(!r.crag.web_search_used && r.crag.web_skipped.is_empty(), "{:?}", r.crag);
    assert_eq!(searx.requests(), 0, "the simple route asked nobody");

    let complex = "Compare how many goals the football team scored against the ships of the Harbour Club and \
                   the Dockers United, and explain why the numbers differ?";
    let r = engine.ask(complex).await.unwrap();
    assert_eq!(r.crag.decision, Some(Verdict::Incorrect), "{:?}", r.crag);
    assert_eq!(web_route(&r), ("complex".to_owned(), 10));
    assert!(r.crag.web_search_used, "{:?}", r.crag);
    assert_eq!(searx.requests(), 1);
}

#[tokio::test]
async fn by_default_a_simple_question_asks_one_provider_for_three_results() {
    let dir = tempfile::tempdir().unwrap();
    let searx = searx_server();
    let engine = engine(dir.path(), &searx.url).await;
    let r = engine.ask(OFF_TOPIC).await.unwrap();
    assert_eq!(web_route(&r), ("simple".to_owned(), 3));
    assert!(r.crag.web_search_used, "{:?}", r.crag);
}

#[tokio::test]
async fn an_invalid_web_section_is_a_config_error_naming_it_and_a_disabled_one_is_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = Config::from_toml("[web]\nenabled = true\n[web.providers.searxng]\n").unwrap();
    cfg.store.path = dir.path().join("store");
    cfg.embedding.mode = ragtune::EmbeddingMode::Off;
    let err = Engine::open(cfg.clone()).await.unwrap_err();
    assert_eq!(err.kind(), ragtune::core::ErrorKind::InvalidInput);
    assert!(err.to_string().contains("[web]"), "{err}");
    cfg.web.enabled = false;
    let engine = Engine::open(cfg).await.unwrap();
    assert!(engine.web().is_none());
    assert!(Config::from_toml("[web]\nenabled = true\nprovider = {}\n").is_err(), "unknown keys are refused");
}

const AMBIGUOUS: &str = "Which vitamin do children need?";

/// A page server on 127.0.0.1 answering every request with `html` as `text/html`.
fn page_server(html: &'static str) -> ragtune_testkit::http::ScriptedServer {
    ragtune_testkit::http::serve(move |_, _| {
        ragtune_testkit::http::Reply::raw(200, "text/html; charset=utf-8", html.as_bytes())
    })
}

#[tokio::test]
async fn web_fetch_reads_the_page_of_a_result_whose_snippet_is_too_short() {
    const PAGE: &str = "<html><head><script>var tracking = 1;</script></head><body><nav>Home News Sport</nav>\
        <main><p>The football team scored four goals against the ships &amp; crews of the harbour club.</p></main>\
        <footer>Cookie settings</footer></body></html>";
    let page_host = page_server(PAGE);
    let page = page_host.url();
    let searx = SearxServer::start(serde_json::json!({
        "url": format!("{page}/harbour-cup"),
        "title": "Harbour cup",
        "content": "Harbour cup.",
        "engine": "test",
        "score": 1.0
    }));
    let toml = format!(
        "{}[web.fetch]\nenabled = true\nallow_loopback = true\nmin_snippet_chars = 50\n",
        web_toml(&searx.url, true)
    );
    let dir = tempfile::tempdir().unwrap();
    let engine = engine_from(dir.path(), &toml).await;
    let r = engine.ask(OFF_TOPIC).await.unwrap();
    assert!(r.crag.web_search_used, "{:?}", r.crag);
    let web = r.context.iter().find(|p| p.chunk_id.starts_with("web:")).expect("a web passage");
    assert!(web.text.contains("scored four goals against the ships & crews"), "the page's text: {}", web.text);
    assert!(!web.text.contains("tracking") && !web.text.contains("Cookie"), "boilerplate dropped: {}", web.text);

    // The address guards hold: without allow_loopback the page is refused and the snippet stays.
    let toml = format!("{}[web.fetch]\nenabled = true\nmin_snippet_chars = 50\n", web_toml(&searx.url, true));
    let mut cfg = Config::from_toml(&toml).unwrap();
    cfg.store.path = dir.path().join("store");
    cfg.embedding.mode = ragtune::EmbeddingMode::Off;
    let engine = engine.reconfigure(cfg).unwrap();
    let r = engine.ask(&format!("{OFF_TOPIC} (again)")).await.unwrap();
    assert!(r.crag.web_search_used, "{:?}", r.crag);
    assert!(!serde_json::to_string(&r.context).unwrap().contains("scored four goals"), "a loopback page is refused");
    assert!(
        r.trace.iter().any(|e| e.stage == "web" && e.action == "fetch_refused"),
        "the refusal is traced: {:?}",
        r.trace.iter().map(|e| format!("{}/{}", e.stage, e.action)).collect::<Vec<_>>()
    );
}

#[tokio::test]
async fn web_enabled_without_a_provider_says_so_in_every_answer() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = Config::from_toml("[web]\nenabled = true\n").unwrap();
    cfg.store.path = dir.path().join("store");
    cfg.embedding.mode = ragtune::EmbeddingMode::Off;
    let mut engine = Engine::open(cfg).await.unwrap();
    assert!(engine.notes().iter().any(|n| n.contains("no provider is configured")), "{:?}", engine.notes());
    let docs: Vec<Document> = DOCS.iter().map(|(id, text)| Document::new(*id, *text)).collect();
    engine.index_documents(&docs, Chunking::WholeDocuments, &mut |_, _| {}).await.unwrap();
    let r = engine.ask(OFF_TOPIC).await.unwrap();
    assert!(
        r.notes.iter().any(|n| n.as_str().contains("no provider is configured")),
        "the answer says web search did nothing: {:?}",
        r.notes
    );
}
