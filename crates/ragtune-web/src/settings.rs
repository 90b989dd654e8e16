//! One settings value for the whole layer, so that the facade can read a `[web]` configuration section and build
//! the stack with one call. Keys arrive already resolved (the facade reads the environment), as [`Secret`]s.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use ragtune_core::http::RetryPolicy;
use ragtune_core::{Error, Result, Secret, WebSearch};
use serde::{Deserialize, Serialize};

use crate::credibility::Credibility;
use crate::fetch::{FetchPolicy, PageFetcher};
use crate::http::Endpoint;
use ragtune_core::Complexity;

use crate::multi::{MultiSearch, Routing};
use crate::providers::{PROVIDERS, Provider, provider};
use crate::resilience::{BreakerConfig, RateLimit, Resilience, ResilienceStats};

/// The settings of one provider; everything but SearXNG's `base_url` (and the paid providers' keys) has a default.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ProviderSettings {
    /// The API's base URL; the public API when unset (SearXNG has none and needs one).
    pub base_url: Option<String>,
    /// The API key (Tavily, Exa and Perplexity need one; Semantic Scholar takes one).
    #[serde(skip_serializing)]
    pub api_key: Option<Secret>,
    /// Seconds one request may take (15 when unset).
    pub timeout_secs: Option<f64>,
    /// The rate limit; the protocol's for the provider when unset (see [`Resilience::for_provider`]).
    pub rate_limit: Option<RateLimit>,
    /// Retries; the protocol's backoff when unset.
    pub backoff: Option<RetryPolicy>,
    /// The circuit breaker; the protocol's when unset.
    pub breaker: Option<BreakerConfig>,
    /// Perplexity's model (`sonar` when unset).
    pub model: Option<String>,
}

/// The whole web layer's settings: which providers, how they are routed, trusted and fetched.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WebSettings {
    /// The providers to use, by name (`searxng`, `tavily`, `exa`, `perplexity`, `semantic_scholar`, `arxiv`).
    pub providers: BTreeMap<String, ProviderSettings>,
    /// The routes.
    pub routing: Routing,
    /// The credibility table.
    pub credibility: Credibility,
    /// Page fetching (off by default).
    pub fetch: FetchPolicy,
    /// Providers asked at once.
    pub concurrency: usize,
    /// The route of plain `WebSearch::search` calls.
    pub default_route: Complexity,
}

impl Default for WebSettings {
    fn default() -> Self {
        Self {
            providers: BTreeMap::new(),
            routing: Routing::default(),
            credibility: Credibility::default(),
            fetch: FetchPolicy::default(),
            concurrency: 4,
            default_route: Complexity::Moderate,
        }
    }
}

/// What [`WebSettings::build`] makes.
#[derive(Debug, Clone)]
pub struct WebStack {
    /// The multi-provider search, a `WebSearch` for `Engine::with_web`.
    pub search: Arc<MultiSearch>,
    /// Each provider's resilience counters, by name, in registration order.
    pub stats: Vec<(String, Arc<ResilienceStats>)>,
    /// The page fetcher, when `fetch.enabled` is set.
    pub fetcher: Option<PageFetcher>,
}

impl WebSettings {
    /// Builds every configured provider with its resilience stack, and the multi-provider search over them.
    ///
    /// # Errors
    /// [`InvalidInput`](ragtune_core::ErrorKind::InvalidInput) for an unknown provider name, SearXNG without a base
    /// URL, a paid provider without a key, an invalid timeout or rate limit.
    pub fn build(&self) -> Result<WebStack> {
        if let Some(unknown) = self.providers.keys().find(|k| provider(k).is_none()) {
            let known: Vec<&str> = PROVIDERS.iter().map(|p| p.name).collect();
            return Err(Error::invalid_input(format!(
                "unknown web provider `{unknown}` (known: {})",
                known.join(", ")
            )));
        }
        let mut providers: Vec<Arc<dyn WebSearch>> = Vec::new();
        let mut stats = Vec::new();
        for entry in PROVIDERS {
            let Some(p) = self.providers.get(entry.name) else { continue };
            let mut resilience = Resilience::for_provider(entry.name);
            resilience.rate_limit = p.rate_limit.or(resilience.rate_limit);
            resilience.backoff = p.backoff.unwrap_or(resilience.backoff);
            resilience.breaker = p.breaker.unwrap_or(resilience.breaker);
            let (provider, counters) = resilience.wrap((entry.make)(endpoint(entry, p)?, p)?)?;
            providers.push(Arc::new(provider));
            stats.push((entry.name.to_owned(), counters));
        }
        let search = MultiSearch::new(providers)
            .with_routing(self.routing.clone())
            .with_concurrency(self.concurrency)
            .with_credibility(self.credibility.clone())
            .with_default_route(self.default_route);
        let fetcher = self.fetch.enabled.then(|| PageFetcher::new(self.fetch.clone()));
        Ok(WebStack { search: Arc::new(search), stats, fetcher })
    }
}

fn endpoint(entry: &Provider, p: &ProviderSettings) -> Result<Endpoint> {
    let name = entry.name;
    let base_url = p
        .base_url
        .clone()
        .or_else(|| entry.default_url.map(str::to_owned))
        .ok_or_else(|| Error::invalid_input(format!("the {name} web provider needs a base_url")))?;
    let mut endpoint = Endpoint::new(base_url);
    endpoint.api_key = p.api_key.clone();
    if let Some(secs) = p.timeout_secs {
        endpoint.timeout = Duration::try_from_secs_f64(secs)
            .ok()
            .filter(|d| !d.is_zero())
            .ok_or_else(|| Error::invalid_input(format!("invalid timeout_secs for {name}: {secs}")))?;
    }
    Ok(endpoint)
}

#[cfg(test)]
mod tests {
    use ragtune_core::ErrorKind;

    use super::*;

    fn parse(json: &str) -> WebSettings {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn builds_the_configured_providers_in_order_with_the_protocols_defaults() {
        let settings = parse(
            r#"{"providers": {
                "arxiv": {},
                "searxng": {"base_url": "http://127.0.0.1:8888", "timeout_secs": 3},
                "perplexity": {"api_key": "pplx-secret", "model": "sonar-pro"}
            },
            "fetch": {"enabled": true, "allow_loopback": true},
            "credibility": {"tier1": ["wikipedia.org"]}}"#,
        );
        assert!(!format!("{settings:?}").contains("pplx-secret"));
        let stack = settings.build().unwrap();
        let names: Vec<&str> = stack.stats.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["searxng", "perplexity", "arxiv"]);
        assert!(stack.fetcher.is_some_and(|f| f.policy().allow_loopback));
        let moderate: Vec<String> =
            stack.search.providers_for(Complexity::Moderate).iter().map(|p| p.name().to_owned()).collect();
        assert_eq!(moderate, ["searxng", "perplexity"], "the route is topped up in registration order");
        assert!(WebSettings::default().build().unwrap().fetcher.is_none());
    }

    #[test]
    fn bad_settings_are_invalid_input() {
        for json in [
            r#"{"providers": {"bing": {}}}"#,
            r#"{"providers": {"searxng": {}}}"#,
            r#"{"providers": {"tavily": {}}}"#,
            r#"{"providers": {"exa": {"base_url": "http://127.0.0.1:1"}}}"#,
            r#"{"providers": {"arxiv": {"timeout_secs": -1}}}"#,
            r#"{"providers": {"arxiv": {"rate_limit": {"per_second": 0}}}}"#,
        ] {
            assert_eq!(parse(json).build().unwrap_err().kind(), ErrorKind::InvalidInput, "{json}");
        }
        assert!(serde_json::from_str::<WebSettings>(r#"{"provider": {}}"#).is_err(), "unknown fields are refused");
    }
}
