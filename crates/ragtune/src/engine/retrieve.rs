//! Retrieval: the strategy a store can serve, the retrievers with their transformations (built once per
//! configuration, [`Built`](super::Built)), and search.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use ragtune_core::{Ctx, Error, Llm, Query, Result, Retriever, SparseEncoder, TraceEvent, TraceSink, VectorStore};
use ragtune_retrieve::{DenseRetriever, HybridRetriever, SparseRetriever};

use super::{Engine, SearchResponse};
use crate::config::{Strategy, Transform};

impl Engine {
    /// The strategy `requested` resolves to on this store, with the reason when `auto` could not use dense vectors.
    ///
    /// # Errors
    /// [`NotFound`](ragtune_core::ErrorKind::NotFound) when nothing was indexed yet;
    /// [`Unavailable`](ragtune_core::ErrorKind::Unavailable) when `dense` or `hybrid` is requested without an
    /// embedder or without dense vectors in the store.
    pub async fn resolve(&self, requested: Strategy) -> Result<(Strategy, Option<String>)> {
        if self.encoder.is_none() {
            return Err(Error::not_found(format!(
                "the store at {} has no index yet: run `ragtune index <path>` with this store first",
                self.config.store.location()
            )));
        }
        let why_not = match &self.embedder {
            None => Some(self.notes.first().cloned().unwrap_or_else(|| "no embedding model is loaded".into())),
            Some(_) if self.dense_seen.load(Ordering::Relaxed) => None,
            Some(_) => {
                if self.store.store.stats(&Ctx::new()).await?.dense_vectors == 0 {
                    Some("the store holds no dense vectors (re-index with the embedding model)".to_owned())
                } else {
                    self.dense_seen.store(true, Ordering::Relaxed);
                    None
                }
            }
        };
        match (requested, why_not) {
            (Strategy::Bm25, _) => Ok((Strategy::Bm25, None)),
            (Strategy::Auto, None) => Ok((Strategy::Hybrid, None)),
            (Strategy::Auto, Some(why)) => Ok((Strategy::Bm25, Some(why))),
            (s, None) => Ok((s, None)),
            (s, Some(why)) => Err(Error::unavailable(format!("`{s}` retrieval is not possible: {why}"))),
        }
    }

    /// The retriever for a resolved strategy (see [`resolve`](Self::resolve)).
    ///
    /// # Errors
    /// As [`resolve`](Self::resolve); invalid hybrid settings.
    pub async fn retriever(&self, requested: Strategy) -> Result<Arc<dyn Retriever>> {
        let (strategy, _) = self.resolve(requested).await?;
        let store: Arc<dyn VectorStore> = self.store.store.clone();
        let bm25 = |s: &Self| -> Result<Arc<dyn Retriever>> {
            let encoder = s.encoder.clone().ok_or_else(|| Error::not_found("nothing indexed yet"))?;
            Ok(Arc::new(SparseRetriever::new("bm25", encoder, store.clone())))
        };
        let dense = |s: &Self| -> Result<Arc<dyn Retriever>> {
            let embedder = s.embedder.clone().ok_or_else(|| Error::unavailable("no embedding model is loaded"))?;
            Ok(Arc::new(DenseRetriever::new("dense", embedder, store.clone())))
        };
        match strategy {
            Strategy::Bm25 | Strategy::Auto => bm25(self),
            Strategy::Dense => dense(self),
            Strategy::Hybrid => {
                let h = self.config.hybrid;
                let encoder = self.encoder.clone().map(|e| e as Arc<dyn SparseEncoder>);
                let inputs = h.fused(bm25(self)?, dense(self)?, encoder);
                Ok(Arc::new(HybridRetriever::new("hybrid", inputs, h.hybrid_config())?))
            }
        }
    }

    /// The retriever for a strategy with a query transformation around it (see [`Transform`]).
    ///
    /// LLM-driven transformations use the configured LLM; without one they are still built, and every query
    /// degrades to the plain question with a trace event saying that no LLM is configured. HyDE searches dense
    /// vectors: alone for `dense`, fused with BM25 for `hybrid` (and `auto` when it resolves to hybrid).
    ///
    /// # Errors
    /// As [`retriever`](Self::retriever); HyDE on a store without dense vectors or without an embedder
    /// ([`Unavailable`](ragtune_core::ErrorKind::Unavailable)); a synonym table that cannot be read; `routed` as a
    /// route's own transformation.
    pub async fn transformed_retriever(&self, requested: Strategy, transform: Transform) -> Result<Arc<dyn Retriever>> {
        let (strategy, _) = self.resolve(requested).await?;
        let key = (strategy, transform);
        if let Some(r) = self.built.retrievers.lock().ok().and_then(|m| m.get(&key).cloned()) {
            return Ok(r);
        }
        let mut retriever = self.transformed(strategy, transform, self.config.transform.max_hops).await?;
        // The header boost comes after fusion and transformation, on the list the caller receives.
        let boost = self.config.search.header_boost;
        if boost > 0.0 {
            retriever = Arc::new(ragtune_retrieve::HeaderBoostRetriever::new(retriever, boost)?);
        }
        if let Ok(mut m) = self.built.retrievers.lock() {
            m.insert(key, retriever.clone());
        }
        Ok(retriever)
    }

    /// The synonym table of `transform.synonyms` (the built-in one when unset), read on first use.
    ///
    /// # Errors
    /// A table file that cannot be read or parsed (not kept: the next use reads it again).
    pub(crate) fn synonym_table(&self) -> Result<Arc<ragtune_retrieve::transform::SynonymTable>> {
        use ragtune_retrieve::transform::SynonymTable;
        if let Some(t) = self.built.synonyms.get() {
            return Ok(t.clone());
        }
        let table = match &self.config.transform.synonyms {
            Some(path) => SynonymTable::from_file(path)?,
            None => SynonymTable::builtin(),
        };
        Ok(self.built.synonyms.get_or_init(|| Arc::new(table)).clone())
    }

    fn llm_or_none(&self) -> Arc<dyn Llm> {
        self.llm.clone().unwrap_or_else(|| Arc::new(crate::models::NoLlm))
    }

    async fn transformed(
        &self,
        requested: Strategy,
        transform: Transform,
        max_hops: usize,
    ) -> Result<Arc<dyn Retriever>> {
        use ragtune_llm::prompts;
        use ragtune_retrieve::transform::{
            HydeConfig, HydeRetriever, MultiHopConfig, MultiHopRetriever, MultiQueryConfig, MultiQueryRetriever,
            RewriteConfig, RewriteRetriever, RouteBudget, RoutePlan, RoutedRetriever, SynonymExpansionRetriever,
        };
        let t = &self.config.transform;
        let llm = self.llm_or_none();
        let (strategy, _) = self.resolve(requested).await?;
        match transform {
            Transform::None => self.retriever(strategy).await,
            Transform::Hyde => {
                let embedder = self.embedder.clone().ok_or_else(|| {
                    Error::unavailable(
                        "HyDE needs the embedding model and dense vectors (`cargo xtask models`, then index)",
                    )
                })?;
                if strategy == Strategy::Bm25 {
                    return Err(Error::unavailable("HyDE searches dense vectors: use the dense or hybrid strategy"));
                }
                let config = HydeConfig {
                    generations: t.hyde_generations.max(1),
                    include_query: t.hyde_include_query,
                    ..HydeConfig::new(prompts::HYDE)
                };
                let hyde: Arc<dyn Retriever> =
                    Arc::new(HydeRetriever::new("hyde", llm, embedder, self.store.store.clone(), config));
                if strategy == Strategy::Dense {
                    return Ok(hyde);
                }
                let h = self.config.hybrid;
                let bm25 = self.retriever(Strategy::Bm25).await?;
                let encoder = self.encoder.clone().map(|e| e as Arc<dyn SparseEncoder>);
                let inputs = h.fused(bm25, hyde, encoder);
                Ok(Arc::new(HybridRetriever::new("hybrid+hyde", inputs, h.hybrid_config())?))
            }
            Transform::MultiQuery => {
                let config = MultiQueryConfig {
                    n: t.multi_query_n.max(1),
                    max_similarity: t.multi_query_max_similarity,
                    ..MultiQueryConfig::new(prompts::MULTI_QUERY, prompts::REPAIR_JSON)
                };
                Ok(Arc::new(MultiQueryRetriever::new("multi_query", llm, self.retriever(strategy).await?, config)))
            }
            Transform::Rewrite => {
                let config = RewriteConfig::new(prompts::REWRITE, prompts::REPAIR_JSON);
                Ok(Arc::new(RewriteRetriever::new("rewrite", llm, self.retriever(strategy).await?, config)))
            }
            Transform::Expand => {
                let table = self.synonym_table()?;
                Ok(Arc::new(SynonymExpansionRetriever::new("expand", self.retriever(strategy).await?, table)))
            }
            Transform::MultiHop => {
                let config = MultiHopConfig {
                    max_hops: max_hops.max(1),
                    ..MultiHopConfig::new(prompts::FOLLOW_UP, prompts::REPAIR_JSON)
                };
                Ok(Arc::new(MultiHopRetriever::new("multi_hop", llm, self.retriever(strategy).await?, config)))
            }
            Transform::Routed => {
                let mut plans = Vec::with_capacity(3);
                for route in [t.routes.simple, t.routes.moderate, t.routes.complex] {
                    if route.transform == Transform::Routed {
                        return Err(Error::invalid_input("a route's transform cannot be `routed` itself"));
                    }
                    let retriever =
                        Box::pin(self.transformed(strategy, route.transform, route.retrieval_steps as usize)).await?;
                    let budget = RouteBudget {
                        retrieval_steps: route.retrieval_steps,
                        rerank_docs: route.rerank_docs,
                        max_results: route.max_results,
                    };
                    plans.push(RoutePlan { retriever, budget });
                }
                let [simple, moderate, complex]: [RoutePlan; 3] =
                    plans.try_into().map_err(|_| Error::permanent("invariant: three routes"))?;
                let mut router = RoutedRetriever::new("routed", simple, moderate, complex);
                if t.router_llm {
                    router = router.with_llm(llm, prompts::ROUTE, prompts::REPAIR_JSON);
                }
                Ok(Arc::new(router))
            }
        }
    }

    /// Answers one query with the configured strategy: ranked candidates and the trace of what was done.
    ///
    /// # Errors
    /// Invalid queries (empty, too long), an empty store, an unavailable strategy, store or model failures.
    pub async fn search(&self, query: Query) -> Result<SearchResponse> {
        self.search_with(query, self.config.search.strategy).await
    }

    /// Answers one query with the given strategy.
    ///
    /// # Errors
    /// As [`search`](Self::search).
    pub async fn search_with(&self, query: Query, strategy: Strategy) -> Result<SearchResponse> {
        query.validate()?;
        let sink = TraceSink::new();
        let ctx = Ctx::new().with_trace(sink.clone());
        let (resolved, why) = self.resolve(strategy).await?;
        let mut route = TraceEvent::new("route", resolved.to_string()).detail("requested", strategy.to_string());
        if let Some(why) = why {
            route = route.detail("fallback", why);
        }
        ctx.trace(route);
        let transform = self.config.transform.kind;
        if transform.needs_llm() && self.llm.is_none() {
            ctx.trace(
                TraceEvent::new("transform", transform.to_string())
                    .detail("note", "no LLM is configured: the transformation will fall back to the plain query"),
            );
        }
        let retriever = self.transformed_retriever(resolved, transform).await?;
        let mut lists = retriever.retrieve(&ctx, std::slice::from_ref(&query)).await?;
        let hits = lists.pop().unwrap_or_default();
        Ok(SearchResponse { hits, trace: sink.take() })
    }
}
