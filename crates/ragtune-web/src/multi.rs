//! Multi-provider search: the providers a query's route names, searched in parallel with bounded concurrency, their
//! results merged with source metadata, canonicalised, de-duplicated and weighted by credibility.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use futures_util::stream::{self, StreamExt};
use ragtune_core::{
    Complexity, Cost, CostModel, Ctx, Error, Result, Skipped, TraceEvent, TraceSink, WebOutcome, WebQuery, WebResult,
    WebSearch,
};
use serde::{Deserialize, Serialize};

use crate::canon::{canonical_url, domain_of};
use crate::credibility::Credibility;

/// One provider's answer: its name, its result lists, and the trace it recorded.
type Answer = (String, Result<Vec<Vec<WebResult>>>, Option<TraceSink>);

/// One provider's search.
type Call<'a> = Pin<Box<dyn Future<Output = Answer> + Send + 'a>>;

/// Which providers a route asks, and how many results it keeps.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoutePlan {
    /// Provider names in order of preference.
    pub providers: Vec<String>,
    /// The most results asked of each provider and kept after merging.
    pub max_results: usize,
}

/// The plan of every route.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Routing {
    /// Simple queries (one provider, 3 results: the protocol has none, see [`Routing::default`]).
    pub simple: RoutePlan,
    /// Moderate queries (the protocol: Tavily and Semantic Scholar, 5 results).
    pub moderate: RoutePlan,
    /// Complex queries (the protocol: Tavily, Exa, Semantic Scholar and arXiv, 10 results).
    pub complex: RoutePlan,
}

impl Default for Routing {
    fn default() -> Self {
        let plan = |names: &[&str], max_results| RoutePlan {
            providers: names.iter().map(|n| (*n).to_owned()).collect(),
            max_results,
        };
        Self {
            // The seed's simple route asks nobody, because Adaptive-RAG answers a simple question without
            // retrieval; here the web is asked only after Corrective RAG judged the corpus's answer INCORRECT or
            // AMBIGUOUS, so a simple question still gets one provider (the first configured), with few results.
            simple: plan(&["searxng"], 3),
            moderate: plan(&["tavily", "semantic_scholar"], 5),
            complex: plan(&["tavily", "exa", "semantic_scholar", "arxiv"], 10),
        }
    }
}

impl Routing {
    /// The plan of a route.
    #[must_use]
    pub fn plan(&self, complexity: Complexity) -> &RoutePlan {
        match complexity {
            Complexity::Simple => &self.simple,
            Complexity::Moderate => &self.moderate,
            Complexity::Complex => &self.complex,
        }
    }
}

/// Searches several providers for one query and merges what they find.
///
/// A provider that fails (after its own retries) or whose circuit is open is skipped and reported; the search
/// fails only when every provider asked failed.
#[derive(Debug, Clone)]
pub struct MultiSearch {
    providers: Vec<Arc<dyn WebSearch>>,
    routing: Routing,
    concurrency: usize,
    credibility: Credibility,
    default_route: Complexity,
}

impl MultiSearch {
    /// Searches `providers` (already wrapped in their [`Resilience`](crate::Resilience)) with the protocol's
    /// routing, at most 4 at once, the default credibility table, and the moderate route for plain
    /// [`WebSearch::search`] calls.
    #[must_use]
    pub fn new(providers: Vec<Arc<dyn WebSearch>>) -> Self {
        Self {
            providers,
            routing: Routing::default(),
            concurrency: 4,
            credibility: Credibility::default(),
            default_route: Complexity::Moderate,
        }
    }

    /// Sets the routing.
    #[must_use]
    pub fn with_routing(mut self, routing: Routing) -> Self {
        self.routing = routing;
        self
    }

    /// Sets how many providers are asked at once (at least 1).
    #[must_use]
    pub fn with_concurrency(mut self, concurrency: usize) -> Self {
        self.concurrency = concurrency.max(1);
        self
    }

    /// Sets the credibility table.
    #[must_use]
    pub fn with_credibility(mut self, credibility: Credibility) -> Self {
        self.credibility = credibility;
        self
    }

    /// Sets the route used by [`WebSearch::search`].
    #[must_use]
    pub fn with_default_route(mut self, route: Complexity) -> Self {
        self.default_route = route;
        self
    }

    /// The providers a route asks: the plan's providers that are configured, in the plan's order, topped up with the
    /// other configured providers (in registration order) up to the plan's count, so that a deployment with only,
    /// say, SearXNG still searches on moderate and complex routes.
    #[must_use]
    pub fn providers_for(&self, route: Complexity) -> Vec<Arc<dyn WebSearch>> {
        let plan = self.routing.plan(route);
        let wanted = plan.providers.len();
        let mut chosen: Vec<Arc<dyn WebSearch>> = plan
            .providers
            .iter()
            .filter_map(|name| self.providers.iter().find(|p| p.name() == name))
            .map(Arc::clone)
            .collect();
        for p in &self.providers {
            if chosen.len() >= wanted {
                break;
            }
            if !chosen.iter().any(|c| c.name() == p.name()) {
                chosen.push(Arc::clone(p));
            }
        }
        chosen
    }

    /// The results a route keeps: its plan's `max_results`, at most `asked`.
    #[must_use]
    pub fn max_results(&self, route: Complexity, asked: usize) -> usize {
        self.routing.plan(route).max_results.min(asked)
    }

    /// Searches the providers of `route` for `query`, keeping at most `max_results`; failures are in `skipped`.
    async fn search_providers(
        &self,
        ctx: &Ctx,
        route: Complexity,
        query: &str,
        max_results: usize,
    ) -> Result<WebOutcome> {
        ctx.check()?;
        let start = Instant::now();
        let chosen = self.providers_for(route);
        if chosen.is_empty() || max_results == 0 {
            ctx.trace(
                TraceEvent::new("web", "skipped")
                    .detail("route", route.as_str())
                    .detail("reason", "no provider on this route"),
            );
            return Ok(WebOutcome::default());
        }
        let request = [WebQuery { text: query.to_owned(), max_results }];
        // Each provider traces into its own sink, replayed below in route order, so that the trace does not
        // depend on which provider answered first. Boxed one by one so that the stream's item type names no
        // closure lifetime.
        let request = &request;
        let calls: Vec<Call<'_>> = chosen
            .iter()
            .map(|p| -> Call<'_> {
                let p = Arc::clone(p);
                let mut own = ctx.clone();
                let sink = ctx.trace.as_ref().map(|_| TraceSink::new());
                own.trace.clone_from(&sink);
                Box::pin(async move {
                    let answer = p.search(&own, request).await;
                    (p.name().to_owned(), answer, sink)
                })
            })
            .collect();
        let answers: Vec<Answer> = stream::iter(calls).buffered(self.concurrency).collect().await;

        let mut outcome = WebOutcome::default();
        let mut lists = Vec::new();
        for (name, answer, sink) in answers {
            for event in sink.map(|s| s.take()).unwrap_or_default() {
                ctx.trace(event);
            }
            match answer {
                Ok(mut l) => {
                    outcome.answered.push(name);
                    lists.push(l.pop().unwrap_or_default());
                }
                Err(e) => {
                    ctx.trace(
                        TraceEvent::new("web", "provider_skipped")
                            .detail("provider", name.as_str())
                            .detail("kind", e.kind().as_str())
                            .detail("reason", e.message()),
                    );
                    outcome.skipped.push(Skipped {
                        provider: name,
                        kind: e.kind().as_str().to_owned(),
                        reason: e.message().to_owned(),
                    });
                }
            }
        }
        if outcome.answered.is_empty() {
            ctx.check()?;
            return Ok(outcome);
        }
        outcome.results = merge(lists, max_results, &self.credibility);
        ctx.trace(
            TraceEvent::new("web", "merged")
                .detail("route", route.as_str())
                .detail("answered", outcome.answered.clone())
                .detail("skipped", outcome.skipped.iter().map(|s| s.provider.clone()).collect::<Vec<_>>())
                .detail("results", outcome.results.len())
                .cost(Cost::new(0, outcome.results.len() as u64, 0))
                .elapsed(start.elapsed()),
        );
        Ok(outcome)
    }
}

/// Merges providers' lists (in provider order) into one ranking.
///
/// Each result's URL is canonicalised (results whose URL is not an absolute http(s) URL are dropped), its domain
/// and tier are set, and its score becomes relevance × tier weight, where relevance is the provider's score when
/// that lies in [0, 1] and `1 / (1 + rank)` otherwise. Duplicates keep the first occurrence, with the higher
/// score and any content or date it lacked. Ties are broken by URL, so the ranking is deterministic.
#[must_use]
pub fn merge(lists: Vec<Vec<WebResult>>, max_results: usize, credibility: &Credibility) -> Vec<WebResult> {
    let mut merged: Vec<WebResult> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    for list in lists {
        for (rank, mut r) in list.into_iter().enumerate() {
            let Some(url) = canonical_url(&r.url) else { continue };
            let domain = domain_of(&url).unwrap_or_default();
            let tier = credibility.tier(&domain);
            #[allow(clippy::cast_precision_loss)]
            let relevance = r.score.filter(|s| (0.0..=1.0).contains(s)).unwrap_or(1.0 / (1.0 + rank as f32));
            r.score = Some(relevance * credibility.weight(tier));
            r.url = url;
            r.domain = Some(domain);
            r.tier = Some(tier);
            match index.get(&r.url) {
                Some(&i) => {
                    let kept = &mut merged[i];
                    if r.score > kept.score {
                        kept.score = r.score;
                    }
                    if kept.content.trim().is_empty() {
                        kept.content = std::mem::take(&mut r.content);
                    }
                    if kept.title.trim().is_empty() {
                        kept.title = std::mem::take(&mut r.title);
                    }
                    if kept.date.is_none() {
                        kept.date = r.date.take();
                    }
                }
                None => {
                    index.insert(r.url.clone(), merged.len());
                    merged.push(r);
                }
            }
        }
    }
    merged.sort_by(|a, b| b.score.unwrap_or(0.0).total_cmp(&a.score.unwrap_or(0.0)).then_with(|| a.url.cmp(&b.url)));
    merged.truncate(max_results);
    merged
}

#[async_trait]
impl WebSearch for MultiSearch {
    fn name(&self) -> &str {
        "multi"
    }

    /// The sum of the default route's providers' models.
    fn cost_model(&self) -> CostModel {
        self.providers_for(self.default_route).iter().map(|p| p.cost_model()).fold(CostModel::FREE, |acc, m| {
            CostModel {
                per_call: acc.per_call + m.per_call,
                per_doc: acc.per_doc + m.per_doc,
                ms_per_doc: acc.ms_per_doc.max(m.ms_per_doc),
            }
        })
    }

    /// Each query on the default route, cut to its `max_results`.
    async fn search(&self, ctx: &Ctx, queries: &[WebQuery]) -> Result<Vec<Vec<WebResult>>> {
        let mut out = Vec::with_capacity(queries.len());
        for q in queries {
            let max_results = self.max_results(self.default_route, q.max_results);
            let outcome = self.search_providers(ctx, self.default_route, &q.text, max_results).await?;
            if outcome.answered.is_empty() && !outcome.skipped.is_empty() {
                let why: Vec<String> =
                    outcome.skipped.iter().map(|s| format!("{}: {}", s.provider, s.reason)).collect();
                return Err(Error::unavailable(format!("every web provider failed ({})", why.join("; "))));
            }
            out.push(outcome.results);
        }
        Ok(out)
    }

    /// The providers of the route, asked at once (at most `concurrency`), merged and cut to the route's
    /// `max_results` (at most the query's); a route without providers or results asks nobody.
    async fn search_routed(&self, ctx: &Ctx, query: &WebQuery, route: Complexity) -> Result<WebOutcome> {
        self.search_providers(ctx, route, &query.text, self.max_results(route, query.max_results)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(provider: &str, url: &str, score: Option<f32>) -> WebResult {
        WebResult { url: url.into(), title: url.into(), provider: provider.into(), score, ..WebResult::default() }
    }

    fn render(results: &[WebResult]) -> Vec<String> {
        results
            .iter()
            .map(|r| {
                format!(
                    "{} {:.3} t{} {} {}",
                    r.url,
                    r.score.unwrap(),
                    r.tier.unwrap(),
                    r.domain.as_deref().unwrap(),
                    r.provider
                )
            })
            .collect()
    }

    #[test]
    fn merging_canonicalises_deduplicates_and_weights() {
        let a = vec![
            r("a", "https://arxiv.org/abs/1?utm_source=x", Some(0.9)),
            r("a", "https://www.example.com/page/#top", Some(0.8)),
            r("a", "javascript:alert(1)", Some(1.0)),
        ];
        let b = vec![
            r("b", "https://example.com/other", Some(12.0)),
            r("b", "HTTPS://WWW.EXAMPLE.COM/page", Some(0.95)),
            r("b", "https://openai.com/x", None),
        ];
        let merged = merge(vec![a, b], 10, &Credibility::default());
        assert_eq!(
            render(&merged),
            [
                "https://arxiv.org/abs/1 0.900 t1 arxiv.org a",
                "https://example.com/other 0.600 t3 example.com b",
                "https://www.example.com/page 0.570 t3 example.com a",
                "https://openai.com/x 0.267 t2 openai.com b",
            ]
        );
        assert_eq!(merge(Vec::new(), 5, &Credibility::default()), Vec::new());
        assert_eq!(
            render(&merge(
                vec![vec![r("a", "https://a.org", None), r("a", "https://b.org", None)]],
                1,
                &Credibility::default()
            )),
            ["https://a.org 0.600 t3 a.org a"]
        );
    }

    #[test]
    fn routes_follow_the_protocol_and_top_up_with_configured_providers() {
        let routing = Routing::default();
        assert_eq!((routing.simple.providers.len(), routing.simple.max_results), (1, 3));
        assert_eq!((routing.moderate.providers.len(), routing.moderate.max_results), (2, 5));
        assert_eq!((routing.complex.providers.len(), routing.complex.max_results), (4, 10));
        let parsed: Routing =
            serde_json::from_str(r#"{"moderate": {"providers": ["searxng"], "max_results": 3}}"#).unwrap();
        assert_eq!(parsed.moderate.providers, ["searxng"]);
        assert_eq!(parsed.complex, Routing::default().complex);
    }
}
