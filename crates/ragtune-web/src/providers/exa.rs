//! Exa, neural (embedding-based) web search.
//!
//! Reference: <https://exa.ai/docs/reference/search> — `POST /search` with `x-api-key: <key>` and a JSON body
//! `{"query", "numResults", "type": "auto", "contents": {"text": {"maxCharacters": N}}}`; the answer's `results`
//! array holds objects with `id`, `url`, `title` (nullable), `publishedDate`, `author`, `score` and, because
//! contents were asked for, `text` (and `highlights` when requested).
//!
//! Price: the web search protocol's figure, $2.50–5 per 1000 requests; [`USD_PER_1000_REQUESTS`] takes the upper
//! end. Key: `web.exa.api_key` (the facade also reads `$EXA_API_KEY`).

use std::time::Instant;

use ragtune_core::{Ctx, Result, WebQuery, WebResult};
use serde::Deserialize;
use serde_json::json;

use super::{finish, per_call, result};
use crate::http::{self, Endpoint};

/// The name this provider reports.
pub const NAME: &str = "exa";
/// The public API.
pub const DEFAULT_URL: &str = "https://api.exa.ai";
/// The declared price, in US dollars per 1000 searches.
pub const USD_PER_1000_REQUESTS: f64 = 5.0;

/// The Exa search API.
#[derive(Debug, Clone)]
pub struct Exa {
    endpoint: Endpoint,
    http: reqwest::Client,
    max_characters: usize,
}

impl Exa {
    /// A client of the API at `endpoint.base_url` ([`DEFAULT_URL`] in production) with `endpoint.api_key`; each
    /// result's text is cut to 1000 characters by Exa.
    ///
    /// # Errors
    /// No API key ([`InvalidInput`](ragtune_core::ErrorKind::InvalidInput)), or the HTTP client cannot be built.
    pub fn new(endpoint: Endpoint) -> Result<Self> {
        endpoint.require_key(NAME)?;
        Ok(Self { http: http::client(&endpoint)?, endpoint, max_characters: 1000 })
    }

    async fn one(&self, ctx: &Ctx, query: &WebQuery) -> Result<Vec<WebResult>> {
        let start = Instant::now();
        let key = self.endpoint.require_key(NAME)?;
        let body = json!({
            "query": query.text,
            "numResults": query.max_results.clamp(1, 100),
            "type": "auto",
            "contents": { "text": { "maxCharacters": self.max_characters } },
        });
        let request = self.http.post(self.endpoint.url("/search")).header("x-api-key", key.expose()).json(&body);
        let text = http::send(ctx, NAME, &self.endpoint, request).await?;
        let answer: Answer = http::parse_json(NAME, &text)?;
        let results = answer.results.into_iter().map(|r| {
            let content = r.text.filter(|t| !t.trim().is_empty()).unwrap_or_else(|| r.highlights.join(" … "));
            result(NAME, r.url, r.title.as_deref().unwrap_or_default(), &content, r.score, r.published_date)
        });
        Ok(finish(ctx, NAME, start, 0, query.max_results, results))
    }
}

#[derive(Deserialize)]
struct Answer {
    #[serde(default)]
    results: Vec<Hit>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Hit {
    #[serde(default)]
    url: String,
    #[serde(default)]
    title: Option<String>,
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    highlights: Vec<String>,
    #[serde(default)]
    score: Option<f64>,
    #[serde(default)]
    published_date: Option<String>,
}

web_search!(
    Exa,
    per_call(350.0),
    /// One paid call per query ([`USD_PER_1000_REQUESTS`]); under 350 ms at the median for `auto` search.
);
