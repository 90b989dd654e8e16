//! SearXNG, the self-hosted metasearch engine, through its JSON search API.
//!
//! Reference: <https://docs.searxng.org/dev/search_api.html> — `GET /search?q=…&format=json` (the instance must
//! enable the `json` format in `settings.yml`, otherwise it answers 403). The answer's `results` array holds objects
//! with `url`, `title`, `content`, `engine`, `score` and `publishedDate` (nullable). SearXNG returns a page of
//! about twenty results and has no parameter to ask for fewer, so the list is cut to `max_results` here.
//!
//! Price: free (self-hosted); no key.

use std::time::Instant;

use ragtune_core::{Ctx, Result, WebQuery, WebResult};

use super::{Hits, finish, per_call};
use crate::http::{self, Endpoint};

/// The name this provider reports.
pub const NAME: &str = "searxng";

/// A SearXNG instance.
#[derive(Debug, Clone)]
pub struct SearxNg {
    endpoint: Endpoint,
    http: reqwest::Client,
    categories: Option<String>,
    language: Option<String>,
}

impl SearxNg {
    /// A client of the instance at `endpoint.base_url` (for example `http://127.0.0.1:8888`).
    ///
    /// # Errors
    /// The HTTP client cannot be built.
    pub fn new(endpoint: Endpoint) -> Result<Self> {
        Ok(Self { http: http::client(&endpoint)?, endpoint, categories: None, language: None })
    }

    /// Restricts the search to SearXNG categories (comma-separated, for example `general,science`).
    #[must_use]
    pub fn with_categories(mut self, categories: impl Into<String>) -> Self {
        self.categories = Some(categories.into());
        self
    }

    /// Sets the search language (for example `en`).
    #[must_use]
    pub fn with_language(mut self, language: impl Into<String>) -> Self {
        self.language = Some(language.into());
        self
    }

    async fn one(&self, ctx: &Ctx, query: &WebQuery) -> Result<Vec<WebResult>> {
        let start = Instant::now();
        let mut params = vec![("q", query.text.as_str()), ("format", "json"), ("pageno", "1")];
        if let Some(c) = &self.categories {
            params.push(("categories", c));
        }
        if let Some(l) = &self.language {
            params.push(("language", l));
        }
        let request = self.http.get(self.endpoint.url("/search")).query(&params);
        let text = http::send(ctx, NAME, &self.endpoint, request).await?;
        let hits: Hits = http::parse_json(NAME, &text)?;
        Ok(finish(ctx, NAME, start, 0, query.max_results, hits.into_results(NAME)))
    }
}

web_search!(
    SearxNg,
    per_call(1000.0),
    /// One call per query; self-hosted, so no money, and a metasearch answer in about a second.
);
