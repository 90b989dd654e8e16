//! The `WebSearch` contract suite of the testkit against every registered provider and against `MultiSearch`
//! over two of them, each talking to the testkit's scripted server, which answers in the format of whichever
//! provider's request it received (the formats `providers.rs` tests in detail).

use std::sync::Arc;

use ragtune_core::WebSearch;
use ragtune_testkit::contract::web_search::{ScriptedHit, web_search_contract};
use ragtune_testkit::http::{Reply, Request};
use ragtune_web::providers::{PROVIDERS, provider};
use ragtune_web::{Endpoint, MultiSearch, ProviderSettings};
use serde_json::{Value, json};

fn searxng(hits: &[ScriptedHit]) -> Value {
    let results: Vec<_> = hits
        .iter()
        .map(|h| json!({"url": h.url, "title": h.title, "content": h.content, "engine": "scripted", "score": 1.0}))
        .collect();
    json!({"query": "q", "number_of_results": hits.len(), "results": results, "answers": [], "suggestions": []})
}

fn tavily(hits: &[ScriptedHit]) -> Value {
    let results: Vec<_> =
        hits.iter().map(|h| json!({"title": h.title, "url": h.url, "content": h.content, "score": 0.5})).collect();
    json!({"query": "q", "answer": null, "images": [], "response_time": 0.1, "results": results})
}

fn exa(hits: &[ScriptedHit]) -> Value {
    let results: Vec<_> =
        hits.iter().map(|h| json!({"id": h.url, "url": h.url, "title": h.title, "text": h.content})).collect();
    json!({"requestId": "r", "resolvedSearchType": "neural", "results": results})
}

fn perplexity(hits: &[ScriptedHit]) -> Value {
    let answer: Vec<String> = (1..=hits.len()).map(|i| format!("A fact [{i}].")).collect();
    let sources: Vec<_> = hits
        .iter()
        .map(|h| json!({"title": h.title, "url": h.url, "snippet": h.content, "date": "2024-01-01"}))
        .collect();
    json!({
        "id": "x", "model": "sonar", "object": "chat.completion",
        "usage": {"prompt_tokens": 10, "completion_tokens": 20, "total_tokens": 30},
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": answer.join(" ")}}],
        "citations": hits.iter().map(|h| h.url.clone()).collect::<Vec<_>>(),
        "search_results": sources
    })
}

fn semantic_scholar(hits: &[ScriptedHit]) -> Value {
    let data: Vec<_> = hits
        .iter()
        .enumerate()
        .map(|(i, h)| json!({"paperId": format!("p{i}"), "title": h.title, "url": h.url, "abstract": h.content, "year": 2024}))
        .collect();
    json!({"total": hits.len(), "offset": 0, "data": data})
}

fn arxiv(hits: &[ScriptedHit]) -> String {
    let entries: String = hits
        .iter()
        .map(|h| {
            format!(
                "<entry><id>{0}</id><published>2024-01-01T00:00:00Z</published><title>{1}</title>\
                 <summary>{2}</summary><link href=\"{0}\" rel=\"alternate\" type=\"text/html\"/></entry>",
                h.url, h.title, h.content
            )
        })
        .collect();
    format!(
        r#"<?xml version="1.0" encoding="UTF-8"?><feed xmlns="http://www.w3.org/2005/Atom"><id>q</id>{entries}</feed>"#
    )
}

/// Answers in the format of the provider whose request this is, told apart by method and path (and, for the two
/// that `POST /search`, by Exa's `numResults`).
fn api(request: &Request, hits: &[ScriptedHit]) -> Reply {
    let path = request.target.split('?').next().unwrap_or_default();
    match (request.method.as_str(), path) {
        ("GET", "/search") => Reply::json_value(200, &searxng(hits)),
        ("POST", "/search") if request.json().get("numResults").is_some() => Reply::json_value(200, &exa(hits)),
        ("POST", "/search") => Reply::json_value(200, &tavily(hits)),
        ("POST", "/chat/completions") => Reply::json_value(200, &perplexity(hits)),
        ("GET", "/graph/v1/paper/search") => Reply::json_value(200, &semantic_scholar(hits)),
        ("GET", "/api/query") => Reply::raw(200, "application/atom+xml; charset=utf-8", arxiv(hits)),
        _ => Reply::status(404),
    }
}

/// The registered provider `name` at `url`, with a key (the providers that need none ignore it).
fn make(name: &str, url: &str) -> Arc<dyn WebSearch> {
    let p = provider(name).unwrap_or_else(|| panic!("{name} is not a registered provider"));
    (p.make)(Endpoint::new(url).with_key("contract-key"), &ProviderSettings::default()).unwrap()
}

async fn contract_of(name: &'static str) {
    web_search_contract(move |url| make(name, url), api).await;
}

/// The providers the tests below run the suite on.
const TESTED: [&str; 6] = ["searxng", "tavily", "exa", "perplexity", "semantic_scholar", "arxiv"];

#[test]
fn every_registered_provider_runs_the_contract() {
    for p in PROVIDERS {
        assert!(TESTED.contains(&p.name), "{} is registered but its contract test is missing", p.name);
    }
}

#[tokio::test]
async fn searxng_meets_the_web_search_contract() {
    contract_of("searxng").await;
}

#[tokio::test]
async fn tavily_meets_the_web_search_contract() {
    contract_of("tavily").await;
}

#[tokio::test]
async fn exa_meets_the_web_search_contract() {
    contract_of("exa").await;
}

#[tokio::test]
async fn perplexity_meets_the_web_search_contract() {
    contract_of("perplexity").await;
}

#[tokio::test]
async fn semantic_scholar_meets_the_web_search_contract() {
    contract_of("semantic_scholar").await;
}

#[tokio::test]
async fn arxiv_meets_the_web_search_contract() {
    contract_of("arxiv").await;
}

/// Two providers on one server, merged: the simple route asks SearXNG, the others Semantic Scholar and SearXNG.
#[tokio::test]
async fn multi_search_over_two_providers_meets_the_web_search_contract() {
    web_search_contract(|url| MultiSearch::new(vec![make("searxng", url), make("semantic_scholar", url)]), api).await;
}
