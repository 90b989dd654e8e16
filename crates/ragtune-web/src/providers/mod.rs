//! The providers, one module each, every one written to its public API reference (cited in the module's doc).
//!
//! Each implements [`WebSearch`](ragtune_core::WebSearch) for one HTTP request per query, returns at most
//! `max_results` results in the provider's order, and turns every failure into a classified
//! [`Error`](ragtune_core::Error): none retries, waits or keeps state; the decorators in
//! [`resilience`](crate::resilience) do.

/// Implements [`WebSearch`](ragtune_core::WebSearch) for a provider type whose module has a `NAME` and whose type
/// has `async fn one(&self, ctx, query) -> Result<Vec<WebResult>>`: every provider answers a batch one query at a
/// time, so the impls differ only in their declared cost.
macro_rules! web_search {
    ($ty:ty, $cost:expr, $(#[doc = $doc:literal])*) => {
        #[async_trait::async_trait]
        impl ragtune_core::WebSearch for $ty {
            fn name(&self) -> &str {
                NAME
            }

            $(#[doc = $doc])*
            fn cost_model(&self) -> ragtune_core::CostModel {
                $cost
            }

            async fn search(
                &self,
                ctx: &ragtune_core::Ctx,
                queries: &[ragtune_core::WebQuery],
            ) -> ragtune_core::Result<Vec<Vec<ragtune_core::WebResult>>> {
                $crate::providers::per_query(queries, |q| self.one(ctx, q)).await
            }
        }
    };
}

pub mod arxiv;
pub mod exa;
pub mod perplexity;
pub mod searxng;
pub mod semantic_scholar;
pub mod tavily;

use std::future::Future;
use std::time::Instant;

use ragtune_core::{Cost, CostModel, Ctx, Result, TraceEvent, WebQuery, WebResult};

/// A `results` array of objects with `url`, `title`, `content`, `score` and a publication date, the shape SearXNG
/// and Tavily share (the date is `publishedDate` in SearXNG, `published_date` in Tavily; SearXNG's content may be
/// null).
#[derive(serde::Deserialize)]
pub(crate) struct Hits {
    #[serde(default)]
    results: Vec<Hit>,
}

#[derive(serde::Deserialize)]
struct Hit {
    #[serde(default)]
    url: String,
    #[serde(default)]
    title: String,
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    score: Option<f64>,
    #[serde(default, alias = "publishedDate")]
    published_date: Option<String>,
}

impl Hits {
    /// The hits as results of `provider`.
    pub(crate) fn into_results(self, provider: &str) -> impl Iterator<Item = WebResult> + '_ {
        self.results.into_iter().map(move |h| {
            result(provider, h.url, &h.title, h.content.as_deref().unwrap_or_default(), h.score, h.published_date)
        })
    }
}

/// A result with what providers give, title and content on one line; the domain and tier are filled in later.
pub(crate) fn result(
    provider: &str,
    url: String,
    title: &str,
    content: &str,
    score: Option<f64>,
    date: Option<String>,
) -> WebResult {
    #[allow(clippy::cast_possible_truncation)]
    let score = score.map(|s| s as f32);
    WebResult {
        url,
        title: squash(title),
        content: squash(content),
        provider: provider.to_owned(),
        score,
        date,
        ..WebResult::default()
    }
}

/// The declared price of one search call: one call, `max_results` documents, `ms` of expected latency.
pub(crate) fn per_call(ms: f64) -> CostModel {
    CostModel { per_call: Cost::new(0, 0, 1), per_doc: Cost::ZERO, ms_per_doc: ms }
}

/// The first `max_results` results with a URL, and the call recorded in the trace with its cost.
pub(crate) fn finish(
    ctx: &Ctx,
    provider: &str,
    start: Instant,
    tokens: u64,
    max_results: usize,
    results: impl IntoIterator<Item = WebResult>,
) -> Vec<WebResult> {
    let results: Vec<WebResult> = results.into_iter().filter(|r| !r.url.trim().is_empty()).take(max_results).collect();
    ctx.trace(
        TraceEvent::new("web", "search")
            .detail("provider", provider)
            .detail("results", results.len())
            .cost(Cost::new(tokens, results.len() as u64, 1))
            .elapsed(start.elapsed()),
    );
    results
}

/// Text with whitespace runs collapsed, so snippets spread over lines (Atom, HTML-ish APIs) read as one paragraph.
pub(crate) fn squash(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Answers a batch one query at a time, in order: what every provider and decorator does with a batch, so that
/// each HTTP request is paced, retried and counted on its own.
pub(crate) async fn per_query<'a, F, Fut>(queries: &'a [WebQuery], mut one: F) -> Result<Vec<Vec<WebResult>>>
where
    F: FnMut(&'a WebQuery) -> Fut,
    Fut: Future<Output = Result<Vec<WebResult>>>,
{
    let mut out = Vec::with_capacity(queries.len());
    for q in queries {
        out.push(one(q).await?);
    }
    Ok(out)
}
