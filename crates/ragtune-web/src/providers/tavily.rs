//! Tavily, a search API made for LLM applications.
//!
//! Reference: <https://docs.tavily.com/documentation/api-reference/endpoint/search> — `POST /search` with
//! `Authorization: Bearer <key>` and a JSON body `{"query", "max_results", "search_depth", "include_answer"}`; the
//! answer's `results` array holds objects with `title`, `url`, `content`, `score` (0–1) and, for news,
//! `published_date`.
//!
//! Price: the web search protocol's figure, $5–8 per 1000 requests (basic depth); [`USD_PER_1000_REQUESTS`] takes the
//! upper end. Key: `web.tavily.api_key` (the facade also reads `$TAVILY_API_KEY`).

use std::time::Instant;

use ragtune_core::{Ctx, Result, WebQuery, WebResult};
use serde_json::json;

use super::{Hits, finish, per_call};
use crate::http::{self, Endpoint};

/// The name this provider reports.
pub const NAME: &str = "tavily";
/// The public API.
pub const DEFAULT_URL: &str = "https://api.tavily.com";
/// The declared price, in US dollars per 1000 searches.
pub const USD_PER_1000_REQUESTS: f64 = 8.0;

/// The Tavily search API.
#[derive(Debug, Clone)]
pub struct Tavily {
    endpoint: Endpoint,
    http: reqwest::Client,
    depth: &'static str,
}

impl Tavily {
    /// A client of the API at `endpoint.base_url` ([`DEFAULT_URL`] in production) with `endpoint.api_key`.
    ///
    /// # Errors
    /// No API key ([`InvalidInput`](ragtune_core::ErrorKind::InvalidInput)), or the HTTP client cannot be built.
    pub fn new(endpoint: Endpoint) -> Result<Self> {
        endpoint.require_key(NAME)?;
        Ok(Self { http: http::client(&endpoint)?, endpoint, depth: "basic" })
    }

    /// Uses the `advanced` search depth (better snippets, twice the price).
    #[must_use]
    pub fn advanced(mut self) -> Self {
        self.depth = "advanced";
        self
    }

    async fn one(&self, ctx: &Ctx, query: &WebQuery) -> Result<Vec<WebResult>> {
        let start = Instant::now();
        let key = self.endpoint.require_key(NAME)?;
        let body = json!({
            "query": query.text,
            "max_results": query.max_results.clamp(1, 20),
            "search_depth": self.depth,
            "include_answer": false,
        });
        let request = self.http.post(self.endpoint.url("/search")).bearer_auth(key.expose()).json(&body);
        let text = http::send(ctx, NAME, &self.endpoint, request).await?;
        let hits: Hits = http::parse_json(NAME, &text)?;
        Ok(finish(ctx, NAME, start, 0, query.max_results, hits.into_results(NAME)))
    }
}

web_search!(
    Tavily,
    per_call(1500.0),
    /// One paid call per query ([`USD_PER_1000_REQUESTS`]); about 1.5 s for a basic search.
);
