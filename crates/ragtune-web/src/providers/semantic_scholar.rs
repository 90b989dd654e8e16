//! Semantic Scholar's Academic Graph API: relevance search over papers.
//!
//! Reference: <https://api.semanticscholar.org/api-docs/graph#tag/Paper-Data/operation/get_graph_paper_relevance_search>
//! — `GET /graph/v1/paper/search?query=…&limit=N&fields=…`, with an optional `x-api-key` header; the answer is
//! `{"total", "offset", "next", "data": [...]}` where each paper has `paperId` and the fields asked for (`title`,
//! `url`, `abstract`, `year`, `publicationDate`, `venue`; any may be null).
//!
//! Without a key the public pool allows about 1 request per second (the web search protocol's limit, enforced by
//! [`RateLimited`](crate::RateLimited) in [`Resilience::for_provider`](crate::Resilience::for_provider)).
//!
//! Price: free. Key: optional, `web.semantic_scholar.api_key`.

use std::time::Instant;

use ragtune_core::{Ctx, Result, WebQuery, WebResult};
use serde::Deserialize;

use super::{finish, per_call, result};
use crate::http::{self, Endpoint};

/// The name this provider reports.
pub const NAME: &str = "semantic_scholar";
/// The public API.
pub const DEFAULT_URL: &str = "https://api.semanticscholar.org";

const FIELDS: &str = "title,url,abstract,year,publicationDate,venue";

/// The Semantic Scholar paper search.
#[derive(Debug, Clone)]
pub struct SemanticScholar {
    endpoint: Endpoint,
    http: reqwest::Client,
}

impl SemanticScholar {
    /// A client of the API at `endpoint.base_url` ([`DEFAULT_URL`] in production), with the key if one is set.
    ///
    /// # Errors
    /// The HTTP client cannot be built.
    pub fn new(endpoint: Endpoint) -> Result<Self> {
        Ok(Self { http: http::client(&endpoint)?, endpoint })
    }

    async fn one(&self, ctx: &Ctx, query: &WebQuery) -> Result<Vec<WebResult>> {
        let start = Instant::now();
        let limit = query.max_results.clamp(1, 100).to_string();
        let params = [("query", query.text.as_str()), ("limit", limit.as_str()), ("fields", FIELDS)];
        let mut request = self.http.get(self.endpoint.url("/graph/v1/paper/search")).query(&params);
        if let Some(key) = &self.endpoint.api_key {
            request = request.header("x-api-key", key.expose());
        }
        let text = http::send(ctx, NAME, &self.endpoint, request).await?;
        let answer: Answer = http::parse_json(NAME, &text)?;
        let results = answer.data.into_iter().filter(|p| !p.paper_id.is_empty()).map(|p| {
            let url = p
                .url
                .filter(|u| !u.is_empty())
                .unwrap_or_else(|| format!("https://www.semanticscholar.org/paper/{}", p.paper_id));
            let title = p.title.unwrap_or_default();
            // A paper without an abstract still says something through its title and venue.
            let content = match (p.r#abstract, &p.venue) {
                (Some(a), _) if !a.trim().is_empty() => a,
                (_, Some(v)) if !v.is_empty() => format!("{title} ({v})"),
                _ => title.clone(),
            };
            let date = p.publication_date.or_else(|| p.year.map(|y| y.to_string()));
            result(NAME, url, &title, &content, None, date)
        });
        Ok(finish(ctx, NAME, start, 0, query.max_results, results))
    }
}

#[derive(Deserialize)]
struct Answer {
    #[serde(default)]
    data: Vec<Paper>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Paper {
    #[serde(default)]
    paper_id: String,
    #[serde(default)]
    title: Option<String>,
    #[serde(default)]
    url: Option<String>,
    #[serde(default)]
    r#abstract: Option<String>,
    #[serde(default)]
    year: Option<i32>,
    #[serde(default)]
    publication_date: Option<String>,
    #[serde(default)]
    venue: Option<String>,
}

web_search!(
    SemanticScholar,
    per_call(800.0),
    /// One free call per query; about 800 ms.
);
