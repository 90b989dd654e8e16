//! Every provider against a real HTTP server on 127.0.0.1 speaking its documented request and response format, and
//! the failures a real API shows: 429 with `Retry-After`, 5xx bursts, timeouts, truncated, oversized and non-JSON
//! bodies, invalid UTF-8. Each is a classified error or a degraded result, never a panic.

use std::time::Duration;

use ragtune_core::http::RetryPolicy;
use ragtune_core::{Ctx, ErrorKind, TraceSink, WebQuery, WebResult, WebSearch};
use ragtune_testkit::http::{Reply, closed_port, serve};
use ragtune_web::{Arxiv, Endpoint, Exa, Perplexity, Retrying, SearxNg, SemanticScholar, Tavily};
use serde_json::json;

fn query(text: &str, max_results: usize) -> Vec<WebQuery> {
    vec![WebQuery { text: text.into(), max_results }]
}

fn render(results: &[WebResult]) -> Vec<String> {
    results.iter().map(|r| format!("{} | {} | {} | {:?} | {:?}", r.url, r.title, r.content, r.score, r.date)).collect()
}

async fn one(provider: &dyn WebSearch, text: &str, max: usize) -> ragtune_core::Result<Vec<WebResult>> {
    Ok(provider.search(&Ctx::new(), &query(text, max)).await?.pop().unwrap())
}

#[tokio::test]
async fn searxng_speaks_the_json_search_api() {
    let server = serve(|_, _| {
        Reply::json_value(
            200,
            &json!({
                "query": "osteomalacia",
                "number_of_results": 0,
                "results": [
                    {"url": "https://en.wikipedia.org/wiki/Osteomalacia", "title": "Osteomalacia", "content": "Softening\n of the bones.", "engine": "wikipedia", "score": 4.5, "publishedDate": null},
                    {"url": "https://www.nhs.uk/conditions/osteomalacia/", "title": "Osteomalacia - NHS", "engine": "duckduckgo", "publishedDate": "2023-05-01T00:00:00"},
                    {"url": "https://third.example/x", "title": "Third", "content": "c"}
                ],
                "answers": [], "suggestions": [], "unresponsive_engines": []
            }),
        )
    });
    let searx = SearxNg::new(Endpoint::new(format!("{}/", server.url()))).unwrap().with_language("en");
    let results = one(&searx, "osteomalacia bones", 2).await.unwrap();
    assert_eq!(
        render(&results),
        [
            "https://en.wikipedia.org/wiki/Osteomalacia | Osteomalacia | Softening of the bones. | Some(4.5) | None",
            "https://www.nhs.uk/conditions/osteomalacia/ | Osteomalacia - NHS |  | None | Some(\"2023-05-01T00:00:00\")",
        ]
    );
    assert!(results.iter().all(|r| r.provider == "searxng"));
    let request = &server.received()[0];
    assert_eq!(request.method, "GET");
    assert_eq!(request.target, "/search?q=osteomalacia+bones&format=json&pageno=1&language=en");
}

#[tokio::test]
async fn tavily_posts_the_query_with_a_bearer_key() {
    let server = serve(|_, _| {
        Reply::json_value(
            200,
            &json!({
                "query": "q", "answer": null, "images": [], "response_time": 0.8,
                "results": [
                    {"title": "CRAG", "url": "https://arxiv.org/abs/2401.15884", "content": "Corrective RAG.", "score": 0.93, "raw_content": null},
                    {"title": "News", "url": "https://news.example/x", "content": "n", "score": 0.41, "published_date": "Mon, 01 Jan 2024"}
                ]
            }),
        )
    });
    let tavily = Tavily::new(Endpoint::new(server.url()).with_key("tvly-SECRET")).unwrap();
    assert!(!format!("{tavily:?}").contains("tvly-SECRET"), "the key must never reach Debug output");
    let results = one(&tavily, "corrective rag", 5).await.unwrap();
    assert_eq!(
        render(&results),
        [
            "https://arxiv.org/abs/2401.15884 | CRAG | Corrective RAG. | Some(0.93) | None",
            "https://news.example/x | News | n | Some(0.41) | Some(\"Mon, 01 Jan 2024\")",
        ]
    );
    let request = &server.received()[0];
    assert_eq!((request.method.as_str(), request.target.as_str()), ("POST", "/search"));
    assert_eq!(request.header("authorization"), Some("Bearer tvly-SECRET"));
    let body = request.json();
    assert_eq!((body["query"].as_str(), body["max_results"].as_u64()), (Some("corrective rag"), Some(5)));
    assert_eq!(Tavily::new(Endpoint::new(server.url())).unwrap_err().kind(), ErrorKind::InvalidInput);
}

#[tokio::test]
async fn exa_posts_num_results_with_an_api_key_header() {
    let server = serve(|_, _| {
        Reply::json_value(
            200,
            &json!({
                "requestId": "r", "resolvedSearchType": "neural",
                "results": [
                    {"id": "https://a.example/1", "url": "https://a.example/1", "title": null, "publishedDate": "2024-02-03T00:00:00.000Z", "author": "A", "score": 0.71, "text": "Text of a."},
                    {"id": "https://b.example/2", "url": "https://b.example/2", "title": "B", "highlights": ["one", "two"]}
                ]
            }),
        )
    });
    let exa = Exa::new(Endpoint::new(server.url()).with_key("exa-key")).unwrap();
    let results = one(&exa, "neural search", 3).await.unwrap();
    assert_eq!(
        render(&results),
        [
            "https://a.example/1 |  | Text of a. | Some(0.71) | Some(\"2024-02-03T00:00:00.000Z\")",
            "https://b.example/2 | B | one … two | None | None",
        ]
    );
    let request = &server.received()[0];
    assert_eq!(request.header("x-api-key"), Some("exa-key"));
    let body = request.json();
    assert_eq!(
        (body["numResults"].as_u64(), body["contents"]["text"]["maxCharacters"].as_u64()),
        (Some(3), Some(1000))
    );
}

#[tokio::test]
async fn perplexity_turns_citations_into_results() {
    let server = serve(|_, _| {
        Reply::json_value(
            200,
            &json!({
                "id": "x", "model": "sonar", "object": "chat.completion", "created": 1,
                "usage": {"prompt_tokens": 10, "completion_tokens": 20, "total_tokens": 30},
                "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "Pittsburgh has 446 bridges [1]. It is called the City of Bridges [2]."}}],
                "citations": ["https://en.wikipedia.org/wiki/Pittsburgh", "https://www.visitpittsburgh.com/bridges"],
                "search_results": [{"title": "Pittsburgh - Wikipedia", "url": "https://en.wikipedia.org/wiki/Pittsburgh", "date": "2024-03-01"}]
            }),
        )
    });
    let sonar = Perplexity::new(Endpoint::new(server.url()).with_key("pplx-key")).unwrap();
    let sink = TraceSink::new();
    let ctx = Ctx::new().with_trace(sink.clone());
    let results = sonar.search(&ctx, &query("how many bridges in pittsburgh", 5)).await.unwrap().pop().unwrap();
    assert_eq!(
        render(&results),
        [
            "https://en.wikipedia.org/wiki/Pittsburgh | Pittsburgh - Wikipedia | Pittsburgh has 446 bridges [1]. | None | Some(\"2024-03-01\")",
            "https://www.visitpittsburgh.com/bridges | https://www.visitpittsburgh.com/bridges | It is called the City of Bridges [2]. | None | None",
        ]
    );
    let request = &server.received()[0];
    assert_eq!(
        (request.target.as_str(), request.header("authorization")),
        ("/chat/completions", Some("Bearer pplx-key"))
    );
    let body = request.json();
    assert_eq!(body["model"], "sonar");
    assert_eq!(body["messages"][1]["content"], "how many bridges in pittsburgh");
    let call = sink.take().into_iter().find(|e| e.action == "search").unwrap();
    assert_eq!(call.cost.tokens, 30, "the answer's token usage is charged");
}

#[tokio::test]
async fn semantic_scholar_searches_papers_with_an_optional_key() {
    let server = serve(|_, _| {
        Reply::json_value(
            200,
            &json!({
                "total": 2, "offset": 0, "next": 2,
                "data": [
                    {"paperId": "abc", "title": "Self-RAG", "url": "https://www.semanticscholar.org/paper/abc", "abstract": "Reflection tokens.", "year": 2023, "publicationDate": "2023-10-17", "venue": "ICLR"},
                    {"paperId": "def", "title": "No Abstract", "url": null, "abstract": null, "year": 2020, "publicationDate": null, "venue": "ACL"}
                ]
            }),
        )
    });
    let s2 = SemanticScholar::new(Endpoint::new(server.url())).unwrap();
    let results = one(&s2, "self reflective rag", 2).await.unwrap();
    assert_eq!(
        render(&results),
        [
            "https://www.semanticscholar.org/paper/abc | Self-RAG | Reflection tokens. | None | Some(\"2023-10-17\")",
            "https://www.semanticscholar.org/paper/def | No Abstract | No Abstract (ACL) | None | Some(\"2020\")",
        ]
    );
    let request = &server.received()[0];
    assert_eq!(
        request.target,
        "/graph/v1/paper/search?query=self+reflective+rag&limit=2&fields=title%2Curl%2Cabstract%2Cyear%2CpublicationDate%2Cvenue"
    );
    assert_eq!(request.header("x-api-key"), None);
    let keyed = SemanticScholar::new(Endpoint::new(server.url()).with_key("s2-key")).unwrap();
    one(&keyed, "x", 1).await.unwrap();
    assert_eq!(server.received()[1].header("x-api-key"), Some("s2-key"));
}

#[tokio::test]
async fn arxiv_reads_the_atom_feed() {
    let server = serve(|_, _| {
        Reply::raw(
            200,
            "application/atom+xml; charset=utf-8",
            r#"<?xml version="1.0" encoding="UTF-8"?>
<feed xmlns="http://www.w3.org/2005/Atom">
  <id>http://arxiv.org/api/q</id>
  <entry>
    <id>http://arxiv.org/abs/2212.10496v1</id>
    <published>2022-12-20T18:00:00Z</published>
    <title>Precise Zero-Shot Dense Retrieval without Relevance Labels</title>
    <summary>HyDE.</summary>
    <link href="http://arxiv.org/abs/2212.10496v1" rel="alternate" type="text/html"/>
  </entry>
</feed>"#,
        )
    });
    let arxiv = Arxiv::new(Endpoint::new(server.url())).unwrap();
    let results = one(&arxiv, "hypothetical document embeddings", 3).await.unwrap();
    assert_eq!(
        render(&results),
        [
            "http://arxiv.org/abs/2212.10496v1 | Precise Zero-Shot Dense Retrieval without Relevance Labels | HyDE. | None | Some(\"2022-12-20T18:00:00Z\")"
        ]
    );
    assert_eq!(
        server.received()[0].target,
        "/api/query?search_query=all%3Ahypothetical+AND+all%3Adocument+AND+all%3Aembeddings&start=0&max_results=3"
    );
}

#[tokio::test]
async fn rate_limited_answers_are_retried_after_the_wait_the_server_asks() {
    let server = serve(|_, n| {
        if n == 0 {
            Reply::json_value(200, &json!({"detail": "slow down"})).with_status(429).header("retry-after", "1")
        } else {
            Reply::json_value(200, &json!({"results": [{"url": "https://a.org", "title": "A", "content": "a"}]}))
        }
    });
    let backoff = RetryPolicy { base: Duration::from_millis(10), ..RetryPolicy::default() };
    let searx = Retrying::new(SearxNg::new(Endpoint::new(server.url())).unwrap(), backoff);
    let sink = TraceSink::new();
    let ctx = Ctx::new().with_trace(sink.clone());
    let start = std::time::Instant::now();
    let results = searx.search(&ctx, &query("q", 5)).await.unwrap().pop().unwrap();
    assert_eq!(results.len(), 1);
    assert!(start.elapsed() >= Duration::from_secs(1), "Retry-After: 1 was honoured ({:?})", start.elapsed());
    let retry = sink.take().into_iter().find(|e| e.action == "retry").unwrap();
    assert_eq!(
        (retry.detail["wait_from"].as_str(), retry.detail["wait_ms"].as_u64()),
        (Some("retry_after"), Some(1000))
    );
    assert_eq!(server.received().len(), 2);

    // A Retry-After longer than the time left is not waited for: the 429 comes back at once.
    let always = serve(|_, _| Reply::status(429).header("retry-after", "30"));
    let searx = Retrying::new(SearxNg::new(Endpoint::new(always.url())).unwrap(), backoff);
    let err = searx.search(&Ctx::new().with_timeout(Duration::from_secs(2)), &query("q", 5)).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Transient);
    assert!(err.message().contains("429"), "{err}");
    assert_eq!(always.received().len(), 1, "no retry was made after the 30 s Retry-After");
}

#[tokio::test]
async fn a_burst_of_server_errors_is_retried_through() {
    let server = serve(|_, n| {
        if n < 3 {
            Reply::status(503)
        } else {
            Reply::json_value(200, &json!({"results": [{"url": "https://a.org", "title": "A", "content": "a"}]}))
        }
    });
    let backoff = RetryPolicy { base: Duration::from_millis(10), ..RetryPolicy::default() };
    let searx = Retrying::new(SearxNg::new(Endpoint::new(server.url())).unwrap(), backoff);
    assert_eq!(searx.search(&Ctx::new(), &query("q", 5)).await.unwrap()[0].len(), 1);
    assert_eq!(server.received().len(), 4);
    assert_eq!(searx.stats().retries, 3);
}

#[tokio::test]
async fn failures_are_classified_errors() {
    // Kind of each failure, and a word its message must contain.
    let cases: Vec<(Reply, ErrorKind, &str)> = vec![
        (Reply::status(500), ErrorKind::Transient, "HTTP 500"),
        (Reply::status(401), ErrorKind::Permanent, "API key"),
        (Reply::status(404), ErrorKind::NotFound, "base URL"),
        (Reply::status(400), ErrorKind::InvalidInput, "HTTP 400"),
        (
            Reply::raw(200, "text/html", "<html><body>Just a moment...</body></html>"),
            ErrorKind::MalformedOutput,
            "not the expected JSON",
        ),
        (
            Reply::raw(200, "application/json", r#"{"results": [{"url": "https://a.org", "ti"#),
            ErrorKind::MalformedOutput,
            "not the expected JSON",
        ),
        (Reply::raw(200, "application/json", r#"{"results": "#).truncated(500), ErrorKind::Transient, "searxng"),
        (Reply::raw(200, "application/json", vec![b'x'; 70_000]), ErrorKind::Permanent, "larger than 65536 bytes"),
        (
            Reply::json_value(200, &json!({"results": []})).delayed(Duration::from_secs(3)),
            ErrorKind::Transient,
            "did not answer within",
        ),
    ];
    for (reply, kind, words) in cases {
        let server = serve(move |_, _| reply.clone());
        let mut endpoint = Endpoint::new(server.url()).with_timeout(Duration::from_millis(400));
        endpoint.max_body_bytes = 64 * 1024;
        let searx = SearxNg::new(endpoint).unwrap();
        let err = one(&searx, "q", 5).await.unwrap_err();
        assert_eq!(err.kind(), kind, "{err}");
        assert!(err.message().contains(words), "{err}");
    }
    let nobody = SearxNg::new(Endpoint::new(closed_port())).unwrap();
    assert_eq!(one(&nobody, "q", 5).await.unwrap_err().kind(), ErrorKind::Unavailable);
}

#[tokio::test]
async fn the_deadline_bounds_a_slow_provider() {
    let server = serve(|_, _| Reply::json_value(200, &json!({"results": []})).delayed(Duration::from_secs(5)));
    let tavily = Tavily::new(Endpoint::new(server.url()).with_key("k")).unwrap();
    let ctx = Ctx::new().with_timeout(Duration::from_millis(300));
    // The answer would arrive after 5 s: an error means the 300 ms deadline cut the call.
    let err = tavily.search(&ctx, &query("q", 3)).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Transient, "{err}");
    // No time left at all: refused before any request.
    let spent = Ctx::new().with_timeout(Duration::ZERO);
    assert_eq!(tavily.search(&spent, &query("q", 3)).await.unwrap_err().kind(), ErrorKind::DeadlineExceeded);
    assert_eq!(server.received().len(), 1);
}

#[tokio::test]
async fn invalid_utf8_in_a_snippet_degrades_to_replacement_characters() {
    let server = serve(|_, _| {
        let mut body = br#"{"results": [{"url": "https://a.org/x", "title": "Caf"#.to_vec();
        body.extend_from_slice(&[0xC3, 0x28, 0xFF]);
        body.extend_from_slice(br#"", "content": "ok"}]}"#);
        Reply::raw(200, "application/json", body)
    });
    let searx = SearxNg::new(Endpoint::new(server.url())).unwrap();
    let results = one(&searx, "q", 5).await.unwrap();
    assert_eq!(render(&results), ["https://a.org/x | Caf\u{FFFD}(\u{FFFD} | ok | None | None"]);
}

#[tokio::test]
async fn arxiv_errors_and_garbage() {
    let server = serve(|_, n| match n {
        0 => Reply::raw(
            200,
            "application/atom+xml",
            r#"<feed xmlns="http://www.w3.org/2005/Atom"><entry><id>http://arxiv.org/api/errors#max_results_must_be_non-negative</id><title>Error</title><summary>max_results must be non-negative</summary></entry></feed>"#,
        ),
        1 => Reply::raw(
            200,
            "application/atom+xml",
            r#"<feed xmlns="http://www.w3.org/2005/Atom"><entry><id>http://arxiv.org/abs/1"#,
        ),
        _ => Reply::raw(200, "text/html", "<html><head><title>503</title></head><body>busy</body></html>"),
    });
    let arxiv = Arxiv::new(Endpoint::new(server.url())).unwrap();
    assert_eq!(one(&arxiv, "q x", 5).await.unwrap_err().kind(), ErrorKind::InvalidInput);
    assert_eq!(one(&arxiv, "q x", 5).await.unwrap_err().kind(), ErrorKind::MalformedOutput);
    assert_eq!(one(&arxiv, "q x", 5).await.unwrap_err().kind(), ErrorKind::MalformedOutput);
    // A query with no searchable word asks nothing.
    assert!(one(&arxiv, "what is it?", 5).await.unwrap().is_empty());
    assert_eq!(server.received().len(), 3);
}

/// A provider's API redirecting to another origin (host or port) never takes the key along: the redirect is not
/// followed and the call fails with a permanent error saying why. A redirect within the same origin still works.
#[tokio::test]
async fn a_redirect_to_another_origin_is_refused_and_no_key_crosses() {
    // B records what reaches it and would answer like a real API.
    let b = serve(|_, _| Reply::json_value(200, &json!({"results": [], "data": []})));
    let target = format!("{}/elsewhere", b.url());
    for status in [301, 302, 303, 307, 308] {
        let to = target.clone();
        let a = serve(move |_, _| Reply::raw(status, "text/plain", "moved").header("location", &to));
        let providers: Vec<(Box<dyn WebSearch>, &str)> = vec![
            (Box::new(Exa::new(Endpoint::new(a.url()).with_key("exa-secret")).unwrap()), "exa"),
            (Box::new(SemanticScholar::new(Endpoint::new(a.url()).with_key("s2-secret")).unwrap()), "semantic_scholar"),
            (Box::new(Tavily::new(Endpoint::new(a.url()).with_key("tvly-secret")).unwrap()), "tavily"),
            (Box::new(Perplexity::new(Endpoint::new(a.url()).with_key("pplx-secret")).unwrap()), "perplexity"),
            (Box::new(SearxNg::new(Endpoint::new(a.url())).unwrap()), "searxng"),
        ];
        for (provider, name) in providers {
            let err = one(provider.as_ref(), "q", 3).await.unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Permanent, "{name} after HTTP {status}: {err}");
            let message = err.message();
            assert!(
                message.contains(name) && message.contains("redirect") && message.contains("another origin"),
                "{name} after HTTP {status}: {err}"
            );
            let refused = format!("refused to follow a redirect from {} to {}, another origin", a.url(), b.url());
            assert!(message.contains(&refused), "the message names both origins: {err}");
            assert!(!message.contains("secret"), "{err}");
        }
        assert_eq!(a.received().len(), 5, "each provider asked A once, without retrying a permanent failure");
    }
    let seen = b.received();
    assert!(
        seen.is_empty(),
        "B received {} requests, headers {:?}",
        seen.len(),
        seen.iter().map(|r| &r.headers).collect::<Vec<_>>()
    );

    // Within one origin a redirect is followed (with the key: it goes to the same server).
    let same = serve(|request, _| {
        if request.target.starts_with("/search") {
            Reply::raw(307, "text/plain", "moved").header("location", "/v2/search")
        } else {
            Reply::json_value(200, &json!({"results": []}))
        }
    });
    let exa = Exa::new(Endpoint::new(same.url()).with_key("exa-secret")).unwrap();
    assert!(one(&exa, "q", 3).await.unwrap().is_empty());
    let requests = same.received();
    assert_eq!(requests.len(), 2);
    assert_eq!((requests[1].target.as_str(), requests[1].header("x-api-key")), ("/v2/search", Some("exa-secret")));

    // A loop within the origin ends after 3 redirects.
    let looping = serve(|_, _| Reply::raw(302, "text/plain", "again").header("location", "/search"));
    let err = one(&SearxNg::new(Endpoint::new(looping.url())).unwrap(), "q", 3).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Permanent, "{err}");
    assert!(err.message().contains("more than 3 redirects"), "{err}");
    assert_eq!(looping.received().len(), 4);
}

/// A body over `max_body_bytes` is a permanent error naming the limit: one that announces a larger length is not
/// read at all (the server never finishes it, so only the announced length can end the call with this error),
/// one that streams without a length is read no further than the limit (the server would send 64 MiB).
#[tokio::test]
async fn a_body_over_the_limit_is_refused_with_or_without_a_content_length() {
    let endpoint = |url: &str| {
        let mut e = Endpoint::new(url).with_timeout(Duration::from_secs(20));
        e.max_body_bytes = 64 * 1024;
        e
    };
    let json = || Reply::new(200).header("content-type", "application/json");
    // Announces one byte over the limit, sends the start, and holds the connection open without finishing.
    let announced = serve(move |_, _| {
        json().header("content-length", "65537").send("{\"results\": [").hold(Duration::from_secs(30))
    });
    let err = one(&SearxNg::new(endpoint(announced.url())).unwrap(), "q", 3).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Permanent, "{err}");
    assert!(err.message().contains("searxng sent a response larger than 65536 bytes (`max_body_bytes`)"), "{err}");

    let unannounced = serve(move |_, _| json().send_repeated(vec![b' '; 64 * 1024], 1024));
    let err = one(&SearxNg::new(endpoint(unannounced.url())).unwrap(), "q", 3).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Permanent, "{err}");
    assert!(err.message().contains("larger than 65536 bytes"), "{err}");

    let chunk = format!("10000\r\n{}\r\n", " ".repeat(0x10000));
    let chunked = serve(move |_, _| json().header("transfer-encoding", "chunked").send_repeated(&chunk, 1024));
    let err = one(&SearxNg::new(endpoint(chunked.url())).unwrap(), "q", 3).await.unwrap_err();
    assert!(err.message().contains("larger than 65536 bytes"), "{err}");
}
