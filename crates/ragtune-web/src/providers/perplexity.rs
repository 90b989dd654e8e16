//! Perplexity's Sonar models: a web-grounded answer whose citations become search results.
//!
//! Reference: <https://docs.perplexity.ai/api-reference/chat-completions-post> — `POST /chat/completions` with
//! `Authorization: Bearer <key>` and an OpenAI-style body `{"model": "sonar", "messages": [...]}`; the answer holds
//! `choices[0].message.content` (the text, citing sources as `[1]`, `[2]`, ...), `citations` (the cited URLs, in
//! citation order), `search_results` (objects with `title`, `url`, `date` and, in newer responses, `snippet`) and
//! `usage` (token counts).
//!
//! Each cited source becomes one result: its title and date from `search_results` when the URL is there, and as
//! content its snippet or, failing that, the sentences of the answer that cite it.
//!
//! Price: the web search protocol's figure, $5 per 1000 requests, plus tokens (reported in the trace). Key:
//! `web.perplexity.api_key` (the facade also reads `$PERPLEXITY_API_KEY`).

use std::collections::HashMap;
use std::time::Instant;

use ragtune_core::{Cost, CostModel, Ctx, Result, WebQuery, WebResult};
use serde::Deserialize;
use serde_json::json;

use super::{finish, result};
use crate::http::{self, Endpoint};

/// The name this provider reports.
pub const NAME: &str = "perplexity";
/// The public API.
pub const DEFAULT_URL: &str = "https://api.perplexity.ai";
/// The declared price, in US dollars per 1000 requests (tokens are extra).
pub const USD_PER_1000_REQUESTS: f64 = 5.0;

/// Perplexity's Sonar chat completions, used as a search provider.
#[derive(Debug, Clone)]
pub struct Perplexity {
    endpoint: Endpoint,
    http: reqwest::Client,
    model: String,
}

impl Perplexity {
    /// A client of the API at `endpoint.base_url` ([`DEFAULT_URL`] in production) with `endpoint.api_key`, asking
    /// the `sonar` model.
    ///
    /// # Errors
    /// No API key ([`InvalidInput`](ragtune_core::ErrorKind::InvalidInput)), or the HTTP client cannot be built.
    pub fn new(endpoint: Endpoint) -> Result<Self> {
        endpoint.require_key(NAME)?;
        Ok(Self { http: http::client(&endpoint)?, endpoint, model: "sonar".to_owned() })
    }

    /// Uses another Sonar model (`sonar-pro`, ...).
    #[must_use]
    pub fn with_model(mut self, model: impl Into<String>) -> Self {
        self.model = model.into();
        self
    }

    async fn one(&self, ctx: &Ctx, query: &WebQuery) -> Result<Vec<WebResult>> {
        let start = Instant::now();
        let key = self.endpoint.require_key(NAME)?;
        let body = json!({
            "model": self.model,
            "messages": [
                { "role": "system", "content": "Answer briefly and factually. Cite every source you use." },
                { "role": "user", "content": query.text },
            ],
        });
        let request = self.http.post(self.endpoint.url("/chat/completions")).bearer_auth(key.expose()).json(&body);
        let text = http::send(ctx, NAME, &self.endpoint, request).await?;
        let answer: Answer = http::parse_json(NAME, &text)?;
        let tokens = answer.usage.as_ref().map_or(0, |u| u.total_tokens);
        Ok(finish(ctx, NAME, start, tokens, query.max_results, citations_to_results(answer, query.max_results)))
    }
}

/// The answer's cited sources as results, in citation order.
fn citations_to_results(answer: Answer, max_results: usize) -> Vec<WebResult> {
    let text = answer.choices.into_iter().next().and_then(|c| c.message).map(|m| m.content).unwrap_or_default();
    let by_url: HashMap<&str, &Source> = answer.search_results.iter().map(|s| (s.url.as_str(), s)).collect();
    // Older responses give only `search_results`; newer ones give both, in the same order.
    let urls: Vec<&str> = if answer.citations.is_empty() {
        answer.search_results.iter().map(|s| s.url.as_str()).collect()
    } else {
        answer.citations.iter().map(String::as_str).collect()
    };
    let sentences = split_sentences(&text);
    urls.iter()
        .enumerate()
        .filter(|(_, url)| !url.is_empty())
        .take(max_results)
        .map(|(i, url)| {
            let source = by_url.get(url);
            let marker = format!("[{}]", i + 1);
            let cited: Vec<&str> = sentences.iter().copied().filter(|s| s.contains(&marker)).collect();
            let content = source
                .and_then(|s| s.snippet.as_deref())
                .filter(|s| !s.trim().is_empty())
                .map_or_else(|| cited.join(" "), str::to_owned);
            let title = source.map(|s| s.title.clone()).filter(|t| !t.is_empty()).unwrap_or_else(|| (*url).to_owned());
            result(NAME, (*url).to_owned(), &title, &content, None, source.and_then(|s| s.date.clone()))
        })
        .collect()
}

/// Sentences ending in `.`, `!` or `?` followed by whitespace (citation markers stay with their sentence).
fn split_sentences(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let bytes = text.as_bytes();
    for (i, c) in text.char_indices() {
        if matches!(c, '.' | '!' | '?') && bytes.get(i + 1).is_some_and(u8::is_ascii_whitespace) {
            // A citation right after the full stop ("... bones. [2]") belongs to the sentence before it.
            let mut end = i + 1;
            let rest = &text[end..];
            let trimmed = rest.trim_start();
            if trimmed.starts_with('[')
                && let Some(close) = trimmed.find(']')
            {
                end += rest.len() - trimmed.len() + close + 1;
            }
            if end > start {
                out.push(text[start..end].trim());
            }
            start = end;
        }
    }
    if start < text.len() && !text[start..].trim().is_empty() {
        out.push(text[start..].trim());
    }
    out
}

#[derive(Deserialize)]
struct Answer {
    #[serde(default)]
    choices: Vec<Choice>,
    #[serde(default)]
    citations: Vec<String>,
    #[serde(default)]
    search_results: Vec<Source>,
    #[serde(default)]
    usage: Option<Usage>,
}

#[derive(Deserialize)]
struct Choice {
    #[serde(default)]
    message: Option<Message>,
}

#[derive(Deserialize)]
struct Message {
    #[serde(default)]
    content: String,
}

#[derive(Deserialize)]
struct Source {
    #[serde(default)]
    url: String,
    #[serde(default)]
    title: String,
    #[serde(default)]
    date: Option<String>,
    #[serde(default)]
    snippet: Option<String>,
}

#[derive(Deserialize)]
struct Usage {
    #[serde(default)]
    total_tokens: u64,
}

web_search!(
    Perplexity,
    CostModel { per_call: Cost::new(600, 0, 1), per_doc: Cost::ZERO, ms_per_doc: 1500.0 },
    /// One paid call per query ([`USD_PER_1000_REQUESTS`]) plus about 600 tokens of prompt, search context and
    /// answer; under 400 ms at the median per the protocol, more for long answers.
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn citations_become_results_with_their_sentences() {
        let answer: Answer = serde_json::from_str(
            r#"{"choices":[{"message":{"role":"assistant","content":"Osteomalacia softens bones [1]. It comes from low vitamin D. [2] Treat it with supplements [1][2]."}}],
                "citations":["https://a.org/x","https://b.org/y"],
                "search_results":[{"title":"B","url":"https://b.org/y","date":"2024-01-02"}],
                "usage":{"total_tokens":42}}"#,
        )
        .unwrap();
        let results = citations_to_results(answer, 5);
        let rendered: Vec<String> =
            results.iter().map(|r| format!("{} | {} | {} | {:?}", r.url, r.title, r.content, r.date)).collect();
        assert_eq!(
            rendered,
            [
                "https://a.org/x | https://a.org/x | Osteomalacia softens bones [1]. Treat it with supplements [1][2]. | None",
                "https://b.org/y | B | It comes from low vitamin D. [2] Treat it with supplements [1][2]. | Some(\"2024-01-02\")",
            ]
        );
    }

    #[test]
    fn search_results_alone_and_limits() {
        let answer: Answer = serde_json::from_str(
            r#"{"choices":[],"search_results":[{"title":"A","url":"https://a.org","snippet":"s a"},{"title":"B","url":"https://b.org"}]}"#,
        )
        .unwrap();
        let results = citations_to_results(answer, 1);
        assert_eq!(results.len(), 1);
        assert_eq!((results[0].title.as_str(), results[0].content.as_str()), ("A", "s a"));
    }
}
