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

use std::sync::Arc;

use ragtune_core::WebSearch;

use crate::http::Endpoint;
use crate::settings::ProviderSettings;

/// Everything ragtune knows of a provider outside its own module: the one table a new provider is added to.
#[derive(Debug, Clone, Copy)]
pub struct Provider {
    /// The name in `[web.providers.NAME]`, in routes and in traces.
    pub name: &'static str,
    /// The public API, when there is one (SearXNG is self-hosted and needs a `base_url`).
    pub default_url: Option<&'static str>,
    /// The environment variable the facade reads the API key from when the settings have none.
    pub key_env: Option<&'static str>,
    /// The protocol's rate limit, in requests per second (none: the provider's own limits apply).
    pub per_second: Option<f64>,
    /// Makes the provider from its endpoint and settings.
    pub make: fn(Endpoint, &ProviderSettings) -> Result<Arc<dyn WebSearch>>,
}

/// The providers in registration order (the free and self-hosted first, then by the protocol's routes), which
/// decides how a route is topped up.
pub const PROVIDERS: &[Provider] = &[
    Provider { name: searxng::NAME, default_url: None, key_env: None, per_second: None, make: make_searxng },
    Provider {
        name: tavily::NAME,
        default_url: Some(tavily::DEFAULT_URL),
        key_env: Some("TAVILY_API_KEY"),
        per_second: None,
        make: make_tavily,
    },
    Provider {
        name: exa::NAME,
        default_url: Some(exa::DEFAULT_URL),
        key_env: Some("EXA_API_KEY"),
        per_second: None,
        make: make_exa,
    },
    Provider {
        name: perplexity::NAME,
        default_url: Some(perplexity::DEFAULT_URL),
        key_env: Some("PERPLEXITY_API_KEY"),
        per_second: None,
        make: make_perplexity,
    },
    Provider {
        name: semantic_scholar::NAME,
        default_url: Some(semantic_scholar::DEFAULT_URL),
        key_env: Some("SEMANTIC_SCHOLAR_API_KEY"),
        per_second: Some(1.0),
        make: make_semantic_scholar,
    },
    Provider {
        name: arxiv::NAME,
        default_url: Some(arxiv::DEFAULT_URL),
        key_env: None,
        per_second: Some(3.0),
        make: make_arxiv,
    },
];

/// The provider called `name`.
#[must_use]
pub fn provider(name: &str) -> Option<&'static Provider> {
    PROVIDERS.iter().find(|p| p.name == name)
}

fn make_searxng(endpoint: Endpoint, _: &ProviderSettings) -> Result<Arc<dyn WebSearch>> {
    Ok(Arc::new(searxng::SearxNg::new(endpoint)?))
}

fn make_tavily(endpoint: Endpoint, _: &ProviderSettings) -> Result<Arc<dyn WebSearch>> {
    Ok(Arc::new(tavily::Tavily::new(endpoint)?))
}

fn make_exa(endpoint: Endpoint, _: &ProviderSettings) -> Result<Arc<dyn WebSearch>> {
    Ok(Arc::new(exa::Exa::new(endpoint)?))
}

fn make_perplexity(endpoint: Endpoint, settings: &ProviderSettings) -> Result<Arc<dyn WebSearch>> {
    let sonar = perplexity::Perplexity::new(endpoint)?;
    Ok(Arc::new(match &settings.model {
        Some(m) => sonar.with_model(m),
        None => sonar,
    }))
}

fn make_semantic_scholar(endpoint: Endpoint, _: &ProviderSettings) -> Result<Arc<dyn WebSearch>> {
    Ok(Arc::new(semantic_scholar::SemanticScholar::new(endpoint)?))
}

fn make_arxiv(endpoint: Endpoint, _: &ProviderSettings) -> Result<Arc<dyn WebSearch>> {
    Ok(Arc::new(arxiv::Arxiv::new(endpoint)?))
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_provider_is_registered_once_and_makes_itself_under_its_name() {
        for (i, p) in PROVIDERS.iter().enumerate() {
            assert!(PROVIDERS[..i].iter().all(|q| q.name != p.name), "{} twice", p.name);
            assert_eq!(provider(p.name).map(|q| q.name), Some(p.name));
            let url = p.default_url.unwrap_or("http://127.0.0.1:8888");
            let mut endpoint = Endpoint::new(url);
            endpoint.api_key = Some("a-key-for-the-test".into());
            let made = (p.make)(endpoint, &ProviderSettings::default()).unwrap();
            assert_eq!(made.name(), p.name);
        }
        assert!(provider("bing").is_none());
        // The protocol's rate limits come from the table.
        assert!(crate::Resilience::for_provider("semantic_scholar").rate_limit.is_some());
        assert!(crate::Resilience::for_provider("searxng").rate_limit.is_none());
    }
}
