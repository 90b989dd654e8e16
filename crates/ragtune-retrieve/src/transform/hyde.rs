//! HyDE: search with the embedding of a hypothetical answer passage.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use ragtune_core::{
    Candidate, Cost, Ctx, Embedder, Llm, Prompt, Query, Result, Retriever, SearchRequest, TextRole, TraceEvent,
    VectorQuery, VectorStore,
};

use super::{clip, fallback_event};
use crate::validate_all;

/// HyDE settings.
#[derive(Debug, Clone, Copy)]
pub struct HydeConfig {
    /// The generation prompt (`ragtune_llm::prompts::HYDE`): placeholder `query`; its temperature (about 0.7) and
    /// token limit (256) apply.
    pub prompt: Prompt,
    /// Passages generated per query (their embeddings are averaged); each uses its own seed.
    pub generations: usize,
    /// Average the query's own embedding in as well (guards against a passage that went astray).
    pub include_query: bool,
    /// How long generated passages are reused for the same query text.
    pub cache_ttl: Duration,
    /// The most queries kept in the cache (the oldest entries go first).
    pub cache_capacity: usize,
}

impl HydeConfig {
    /// One generation, averaged with the query, cached for an hour.
    #[must_use]
    pub fn new(prompt: Prompt) -> Self {
        Self { prompt, generations: 1, include_query: true, cache_ttl: Duration::from_secs(3600), cache_capacity: 4096 }
    }
}

/// Hypothetical Document Embeddings (Gao et al., 2022): the LLM writes a passage that would answer the question,
/// and the dense index is searched with its embedding (averaged with the question's and over several generations,
/// as configured), since a passage lies closer to relevant passages than a question does.
///
/// Generated passages are cached by query text for `cache_ttl`. When the LLM fails, the query's own embedding is
/// used (plain dense retrieval) and the trace says why. Candidates are named after this retriever (`hyde`).
#[derive(Debug)]
pub struct HydeRetriever {
    name: String,
    llm: Arc<dyn Llm>,
    embedder: Arc<dyn Embedder>,
    store: Arc<dyn VectorStore>,
    config: HydeConfig,
    cache: Mutex<HashMap<u64, (Instant, Vec<String>)>>,
}

impl HydeRetriever {
    /// A HyDE retriever over the store's dense vectors.
    pub fn new(
        name: impl Into<String>,
        llm: Arc<dyn Llm>,
        embedder: Arc<dyn Embedder>,
        store: Arc<dyn VectorStore>,
        config: HydeConfig,
    ) -> Self {
        Self { name: name.into(), llm, embedder, store, config, cache: Mutex::new(HashMap::new()) }
    }

    fn key(text: &str) -> u64 {
        let mut h = DefaultHasher::new();
        text.hash(&mut h);
        h.finish()
    }

    fn cached(&self, text: &str) -> Option<Vec<String>> {
        let cache = self.cache.lock().ok()?;
        let (at, passages) = cache.get(&Self::key(text))?;
        (at.elapsed() < self.config.cache_ttl).then(|| passages.clone())
    }

    fn remember(&self, text: &str, passages: &[String]) {
        if let Ok(mut cache) = self.cache.lock() {
            if cache.len() >= self.config.cache_capacity {
                let ttl = self.config.cache_ttl;
                cache.retain(|_, (at, _)| at.elapsed() < ttl);
                if cache.len() >= self.config.cache_capacity
                    && let Some(oldest) = cache.iter().min_by_key(|(_, (at, _))| *at).map(|(k, _)| *k)
                {
                    cache.remove(&oldest);
                }
            }
            cache.insert(Self::key(text), (Instant::now(), passages.to_vec()));
        }
    }

    /// The generated passages for a query (from the cache or the LLM), or the error that stopped generation.
    async fn passages(&self, ctx: &Ctx, query: &Query) -> (Result<Vec<String>>, Cost, bool) {
        if let Some(p) = self.cached(&query.text) {
            return (Ok(p), Cost::ZERO, true);
        }
        let mut requests = Vec::with_capacity(self.config.generations.max(1));
        for i in 0..self.config.generations.max(1) {
            match self.config.prompt.render(&[("query", &query.text)]) {
                Ok(mut r) => {
                    r.seed = Some(i as u64);
                    requests.push(r);
                }
                Err(e) => return (Err(e), Cost::ZERO, false),
            }
        }
        match self.llm.generate(ctx, &requests).await {
            Ok(responses) => {
                let cost = responses.iter().fold(Cost::ZERO, |acc, r| acc + r.cost);
                let passages: Vec<String> =
                    responses.into_iter().map(|r| r.text.trim().to_owned()).filter(|t| !t.is_empty()).collect();
                if passages.is_empty() {
                    return (Err(ragtune_core::Error::malformed_output("the LLM wrote an empty passage")), cost, false);
                }
                self.remember(&query.text, &passages);
                (Ok(passages), cost, false)
            }
            Err(e) => (Err(e), Cost::ZERO, false),
        }
    }
}

#[async_trait]
impl Retriever for HydeRetriever {
    fn name(&self) -> &str {
        &self.name
    }

    async fn retrieve(&self, ctx: &Ctx, queries: &[Query]) -> Result<Vec<Vec<Candidate>>> {
        validate_all(queries)?;
        let mut requests = Vec::with_capacity(queries.len());
        for query in queries {
            let started = Instant::now();
            let (generated, cost, cached) = self.passages(ctx, query).await;
            let llm_elapsed = started.elapsed();
            let passages = match generated {
                Ok(p) => p,
                Err(e) => {
                    ctx.trace(fallback_event(&self.name, query, &e).elapsed(llm_elapsed));
                    Vec::new()
                }
            };
            // The query is embedded too when configured, and always when there is no passage (the fallback).
            let mut texts: Vec<(&str, TextRole)> = passages.iter().map(|p| (p.as_str(), TextRole::Passage)).collect();
            if self.config.include_query || texts.is_empty() {
                texts.push((query.text.as_str(), TextRole::Query));
            }
            let mut sum = vec![0.0_f32; self.embedder.spec().dim];
            for role in [TextRole::Passage, TextRole::Query] {
                let batch: Vec<&str> = texts.iter().filter(|(_, r)| *r == role).map(|(t, _)| *t).collect();
                if batch.is_empty() {
                    continue;
                }
                for v in self.embedder.embed(ctx, &batch, role).await? {
                    sum.iter_mut().zip(&v).for_each(|(s, x)| *s += x);
                }
            }
            let norm = sum.iter().map(|x| x * x).sum::<f32>().sqrt();
            if norm > 0.0 {
                sum.iter_mut().for_each(|x| *x /= norm);
            }
            if !passages.is_empty() {
                ctx.trace(
                    TraceEvent::new("transform", self.name.clone())
                        .detail("query", query.text.clone())
                        .detail("passages", passages.iter().map(|p| clip(p, 300)).collect::<Vec<_>>())
                        .detail("cached", cached)
                        .detail("with_query", self.config.include_query)
                        .detail("prompt", self.config.prompt.tag())
                        .cost(cost)
                        .elapsed(llm_elapsed),
                );
            }
            requests.push(SearchRequest {
                vector: VectorQuery::Dense(sum),
                top_k: query.top_k,
                filter: query.filter.clone(),
            });
        }
        let results = self.store.search(ctx, &requests).await?;
        Ok(crate::to_candidates(results, &self.name))
    }
}
